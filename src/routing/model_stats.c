/*
 * model_stats.c — live per-model statistics for the selectors, /metrics and
 * the management API.
 *
 * Each worker writes only its own shard of a model's slot (plain relaxed
 * atomic loads and stores, no read-modify-write shared between threads);
 * a reader sums the shards.  Times go into log-spaced histograms (four
 * buckets a doubling, 100 µs to about 28 minutes) kept for two consecutive
 * windows: a reader counts the current window and the one before, so a
 * percentile covers the last one to two windows.  A worker clears a
 * window's half when it first writes into a new window; a reader racing
 * that clear may see part of it, which only makes one read approximate.
 */
#include "routing/routing-int.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NB 96                /* histogram buckets */
#define SLOTS 512            /* open addressing: at most VSR_MODEL_STATS_MAX_MODELS used */
#define MIN_FOR_PERCENTILE 3 /* the reference's MinObservationsForPercentile */
#define BUCKET_BASE_US 100.0

typedef struct {
    _Atomic uint32_t b[NB];
    _Atomic uint64_t n, sum_us;
} hist_t;

typedef struct {
    _Atomic uint64_t epoch[2];          /* the window each half holds */
    hist_t h[2][VSR_MSTAT_N];
    _Atomic uint64_t req[2], err[2];    /* finished requests and failures of each half's window */
    _Atomic int64_t inflight;
    _Atomic uint64_t requests, errors, prompt_tokens, completion_tokens, cost_nano;
} shard_t;

typedef struct {
    _Atomic(char *) name;               /* published once, never changed */
    shard_t *shards;                    /* n_shards */
} slot_t;

struct vsr_model_stats_s {
    unsigned n_shards;
    uint64_t window_ms;
    uint64_t (*now_ms)(void);
    pthread_mutex_t mu;                 /* adding a model */
    _Atomic unsigned n_models;
    slot_t slots[SLOTS];
};

static uint64_t wall_ms(void)
{
    return vsr_now_ms();
}

/* The current window's number, from 1 (0 marks a half never written). */
static uint64_t epoch_now(const vsr_model_stats_t *m)
{
    return m->now_ms() / m->window_ms + 1;
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void append_label(vsr_buf_t *b, vsr_slice_t v)
{
    vsr_buf_append(b, "\"", 1);
    for (size_t i = 0; i < v.len; i++) {
        char c = v.p[i];
        if (c == '\\' || c == '"')
            vsr_buf_append(b, "\\", 1);
        if (c == '\n')
            vsr_buf_append(b, "\\n", 2);
        else
            vsr_buf_append(b, &c, 1);
    }
    vsr_buf_append(b, "\"", 1);
}

vsr_model_stats_t *vsr_model_stats_new(unsigned n_shards, uint64_t window_ms)
{
    vsr_model_stats_t *m = vsr_calloc(1, sizeof(*m));
    m->n_shards = n_shards ? n_shards : 1;
    m->window_ms = window_ms ? window_ms : VSR_MODEL_STATS_WINDOW_MS;
    m->now_ms = wall_ms;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void vsr_model_stats_set_clock(vsr_model_stats_t *m, uint64_t (*now_ms)(void))
{
    m->now_ms = now_ms ? now_ms : wall_ms;
}

void vsr_model_stats_free(vsr_model_stats_t *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < SLOTS; i++) {
        vsr_free(atomic_load_explicit(&m->slots[i].name, memory_order_relaxed));
        vsr_free(m->slots[i].shards);
    }
    pthread_mutex_destroy(&m->mu);
    vsr_free(m);
}

static uint64_t hash(vsr_slice_t s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < s.len; i++)
        h = (h ^ (unsigned char)s.p[i]) * 1099511628211ull;
    return h;
}

static int name_is(const char *name, vsr_slice_t s)
{
    return strlen(name) == s.len && memcmp(name, s.p, s.len) == 0;
}

/* The model's slot; add: create it when missing (NULL past the bound). */
static slot_t *find(vsr_model_stats_t *m, vsr_slice_t model, int add)
{
    if (m == NULL || model.len == 0 || model.len > VSR_MODEL_STATS_MAX_NAME)
        return NULL;
    size_t i = hash(model) % SLOTS;
    for (size_t k = 0; k < SLOTS; k++, i = (i + 1) % SLOTS) {
        char *name = atomic_load_explicit(&m->slots[i].name, memory_order_acquire);
        if (name == NULL)
            break;
        if (name_is(name, model))
            return &m->slots[i];
    }
    if (!add)
        return NULL;
    pthread_mutex_lock(&m->mu);
    slot_t *found = NULL;
    i = hash(model) % SLOTS;
    for (size_t k = 0; k < SLOTS; k++, i = (i + 1) % SLOTS) {
        char *name = atomic_load_explicit(&m->slots[i].name, memory_order_acquire);
        if (name != NULL && name_is(name, model)) {
            found = &m->slots[i];
            break;
        }
        if (name == NULL) {
            if (atomic_load_explicit(&m->n_models, memory_order_relaxed) >= VSR_MODEL_STATS_MAX_MODELS)
                break;
            m->slots[i].shards = vsr_calloc(m->n_shards, sizeof(shard_t));
            atomic_store_explicit(&m->slots[i].name, vsr_strndup(model.p, model.len), memory_order_release);
            atomic_fetch_add_explicit(&m->n_models, 1, memory_order_relaxed);
            found = &m->slots[i];
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return found;
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)
#define BUMP(x, d) STORE(x, LOAD(x) + (d)) /* one writer: the shard's worker */

static shard_t *shard_of(vsr_model_stats_t *m, unsigned shard, vsr_slice_t model)
{
    slot_t *s = find(m, model, 1);
    return s ? &s->shards[shard % m->n_shards] : NULL;
}

void vsr_model_stats_inflight(vsr_model_stats_t *m, unsigned shard, vsr_slice_t model, int delta)
{
    shard_t *sh = shard_of(m, shard, model);
    if (sh)
        BUMP(sh->inflight, delta);
}

static int bucket_of(double us)
{
    if (us <= BUCKET_BASE_US)
        return 0;
    int b = (int)floor(4.0 * log2(us / BUCKET_BASE_US));
    return b < 0 ? 0 : b >= NB ? NB - 1 : b;
}

static void hist_add(hist_t *h, double ms)
{
    if (!(ms >= 0) || !isfinite(ms))
        return;
    double us = ms * 1000.0;
    BUMP(h->b[bucket_of(us)], 1);
    BUMP(h->n, 1);
    BUMP(h->sum_us, (uint64_t)us);
}

void vsr_model_stats_observe(vsr_model_stats_t *m, unsigned shard, vsr_slice_t model, const vsr_model_obs_t *o)
{
    shard_t *sh = shard_of(m, shard, model);
    if (sh == NULL)
        return;
    uint64_t e = epoch_now(m);
    int half = (int)(e & 1);
    if (LOAD(sh->epoch[half]) != e) { /* a new window: its half starts empty */
        for (int k = 0; k < VSR_MSTAT_N; k++) {
            hist_t *h = &sh->h[half][k];
            for (int b = 0; b < NB; b++)
                STORE(h->b[b], 0);
            STORE(h->n, 0);
            STORE(h->sum_us, 0);
        }
        STORE(sh->req[half], 0);
        STORE(sh->err[half], 0);
        STORE(sh->epoch[half], e);
    }
    hist_add(&sh->h[half][VSR_MSTAT_TTFT], o->ttft_ms);
    hist_add(&sh->h[half][VSR_MSTAT_TPOT], o->tpot_ms);
    hist_add(&sh->h[half][VSR_MSTAT_LATENCY], o->latency_ms);
    BUMP(sh->req[half], 1);
    BUMP(sh->requests, 1);
    if (o->error) {
        BUMP(sh->err[half], 1);
        BUMP(sh->errors, 1);
    }
    BUMP(sh->prompt_tokens, o->prompt_tokens);
    BUMP(sh->completion_tokens, o->completion_tokens);
    if (o->cost > 0 && isfinite(o->cost))
        BUMP(sh->cost_nano, (uint64_t)llround(o->cost * 1e9));
}

/* Is a shard's half part of the window a reader sees now? */
static int half_live(const shard_t *sh, int half, uint64_t e)
{
    uint64_t he = LOAD(sh->epoch[half]);
    return he != 0 && (he == e || he + 1 == e);
}

/* The merged histogram of one statistic: every shard, both live halves. */
static uint64_t merged(const vsr_model_stats_t *m, const slot_t *s, int which, uint64_t e, uint64_t *b,
                       uint64_t *sum_us)
{
    uint64_t n = 0;
    memset(b, 0, NB * sizeof(*b));
    *sum_us = 0;
    for (unsigned i = 0; i < m->n_shards; i++)
        for (int half = 0; half < 2; half++) {
            const shard_t *sh = &s->shards[i];
            if (!half_live(sh, half, e))
                continue;
            const hist_t *h = &sh->h[half][which];
            for (int k = 0; k < NB; k++)
                b[k] += LOAD(h->b[k]);
            n += LOAD(h->n);
            *sum_us += LOAD(h->sum_us);
        }
    return n;
}

/* The pct-th percentile of n samples in b (ms): the bucket of the
 * sample at rank pct/100*(n-1), interpolated within it. */
static double percentile_of(const uint64_t *b, uint64_t n, unsigned pct)
{
    double rank = (double)pct / 100.0 * (double)(n - 1);
    uint64_t seen = 0;
    for (int k = 0; k < NB; k++) {
        if (b[k] == 0)
            continue;
        if ((double)(seen + b[k]) > rank) {
            double lo = k == 0 ? 0 : BUCKET_BASE_US * exp2(k / 4.0), hi = BUCKET_BASE_US * exp2((k + 1) / 4.0);
            double frac = (rank - (double)seen + 0.5) / (double)b[k];
            if (frac > 1)
                frac = 1;
            return (lo + (hi - lo) * frac) / 1000.0;
        }
        seen += b[k];
    }
    return BUCKET_BASE_US * exp2(NB / 4.0) / 1000.0;
}

int vsr_model_stats_percentile(const vsr_model_stats_t *m, vsr_slice_t model, vsr_mstat_t which, unsigned pct,
                               double *ms)
{
    const slot_t *s = find((vsr_model_stats_t *)m, model, 0);
    if (s == NULL || pct < 1 || pct > 100 || (int)which < 0 || which >= VSR_MSTAT_N)
        return 0;
    uint64_t b[NB], sum_us;
    uint64_t n = merged(m, s, (int)which, epoch_now(m), b, &sum_us);
    if (n == 0)
        return 0;
    if (n < MIN_FOR_PERCENTILE) /* too few for a percentile: their mean */
        *ms = (double)sum_us / (double)n / 1000.0;
    else
        *ms = percentile_of(b, n, pct);
    return 1;
}

int64_t vsr_model_stats_inflight_now(const vsr_model_stats_t *m, vsr_slice_t model)
{
    const slot_t *s = find((vsr_model_stats_t *)m, model, 0);
    int64_t n = 0;
    for (unsigned i = 0; s && i < m->n_shards; i++)
        n += LOAD(s->shards[i].inflight);
    return n < 0 ? 0 : n;
}

int vsr_model_stats_view(const vsr_model_stats_t *m, vsr_slice_t model, vsr_model_stats_view_t *v)
{
    memset(v, 0, sizeof(*v));
    const slot_t *s = find((vsr_model_stats_t *)m, model, 0);
    if (s == NULL)
        return 0;
    uint64_t e = epoch_now(m);
    for (unsigned i = 0; i < m->n_shards; i++) {
        const shard_t *sh = &s->shards[i];
        v->inflight += LOAD(sh->inflight);
        v->requests += LOAD(sh->requests);
        v->errors += LOAD(sh->errors);
        v->prompt_tokens += LOAD(sh->prompt_tokens);
        v->completion_tokens += LOAD(sh->completion_tokens);
        v->cost += (double)LOAD(sh->cost_nano) / 1e9;
        for (int half = 0; half < 2; half++)
            if (half_live(sh, half, e)) {
                v->window_requests += LOAD(sh->req[half]);
                v->window_errors += LOAD(sh->err[half]);
            }
    }
    if (v->inflight < 0) /* a fallback moved a request between workers' counts mid-read */
        v->inflight = 0;
    static const unsigned pcts[3] = {50, 95, 99};
    for (int k = 0; k < VSR_MSTAT_N; k++) {
        uint64_t b[NB], sum_us;
        v->n[k] = merged(m, s, k, e, b, &sum_us);
        for (int j = 0; j < 3; j++)
            v->pct_ms[k][j] = v->n[k] == 0                    ? -1
                              : v->n[k] < MIN_FOR_PERCENTILE ? (double)sum_us / (double)v->n[k] / 1000.0
                                                             : percentile_of(b, v->n[k], pcts[j]);
    }
    return 1;
}

uint64_t vsr_model_stats_window_ms(const vsr_model_stats_t *m)
{
    return m->window_ms;
}

size_t vsr_model_stats_names(const vsr_model_stats_t *m, const char **names, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; m && i < SLOTS && n < cap; i++) {
        char *name = atomic_load_explicit(&((vsr_model_stats_t *)m)->slots[i].name, memory_order_acquire);
        if (name)
            names[n++] = name;
    }
    return n;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static size_t sorted_names(const vsr_model_stats_t *m, const char **names)
{
    size_t n = vsr_model_stats_names(m, names, VSR_MODEL_STATS_MAX_MODELS);
    qsort(names, n, sizeof(*names), cmp_name);
    return n;
}

static const char *const stat_names[VSR_MSTAT_N] = {"ttft", "tpot", "latency"};
static const char *const quantiles[3] = {"0.5", "0.95", "0.99"};

void vsr_model_stats_render(const vsr_model_stats_t *m, vsr_buf_t *out)
{
    if (m == NULL)
        return;
    const char *names[VSR_MODEL_STATS_MAX_MODELS];
    size_t n = sorted_names(m, names);
    vsr_model_stats_view_t *v = vsr_calloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        vsr_model_stats_view(m, vsr_slice_cstr(names[i]), &v[i]);
    for (int k = 0; k < VSR_MSTAT_N; k++) {
        vsr_buf_printf(out,
                       "# HELP vsr_model_%s_seconds Windowed %s percentiles per model (the selectors' view).\n"
                       "# TYPE vsr_model_%s_seconds gauge\n",
                       stat_names[k], stat_names[k], stat_names[k]);
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < 3 && v[i].n[k]; j++) {
                vsr_buf_printf(out, "vsr_model_%s_seconds{model=", stat_names[k]);
                append_label(out, vsr_slice_cstr(names[i]));
                vsr_buf_printf(out, ",quantile=\"%s\"} %.6f\n", quantiles[j], v[i].pct_ms[k][j] / 1000.0);
            }
    }
#define PER_MODEL(metric, type, help, fmt, expr)                                                                      \
    do {                                                                                                              \
        vsr_buf_printf(out, "# HELP " metric " " help "\n# TYPE " metric " " type "\n");                              \
        for (size_t i = 0; i < n; i++) {                                                                              \
            vsr_buf_append_cstr(out, metric "{model=");                                                               \
            append_label(out, vsr_slice_cstr(names[i]));                                                 \
            vsr_buf_printf(out, "} " fmt "\n", expr);                                                                 \
        }                                                                                                             \
    } while (0)
    PER_MODEL("vsr_model_inflight", "gauge", "Requests in flight to each model.", "%lld", (long long)v[i].inflight);
    PER_MODEL("vsr_model_window_requests", "gauge", "Finished requests per model in the statistics window.", "%llu",
              (unsigned long long)v[i].window_requests);
    PER_MODEL("vsr_model_error_ratio", "gauge", "Failed share of the window's requests per model.", "%.6f",
              v[i].window_requests ? (double)v[i].window_errors / (double)v[i].window_requests : 0.0);
    PER_MODEL("vsr_model_observed_cost_total", "counter",
              "Cost of the tokens each model reported, from providers.models[].pricing.", "%.9f", v[i].cost);
#undef PER_MODEL
    vsr_buf_append_cstr(out, "# HELP vsr_model_observed_tokens_total Tokens each model reported.\n"
                             "# TYPE vsr_model_observed_tokens_total counter\n");
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < 2; t++) {
            vsr_buf_append_cstr(out, "vsr_model_observed_tokens_total{model=");
            append_label(out, vsr_slice_cstr(names[i]));
            vsr_buf_printf(out, ",type=\"%s\"} %llu\n", t ? "completion" : "prompt",
                           (unsigned long long)(t ? v[i].completion_tokens : v[i].prompt_tokens));
        }
    vsr_free(v);
}

void vsr_model_stats_json(const vsr_model_stats_t *m, vsr_buf_t *out)
{
    const char *names[VSR_MODEL_STATS_MAX_MODELS];
    size_t n = m ? sorted_names(m, names) : 0;
    vsr_buf_printf(out, "{\"window_seconds\":%.3f,\"models\":[", m ? (double)m->window_ms / 1000.0 : 0.0);
    for (size_t i = 0; i < n; i++) {
        vsr_model_stats_view_t v;
        vsr_model_stats_view(m, vsr_slice_cstr(names[i]), &v);
        vsr_buf_append_cstr(out, i ? ",{\"model\":" : "{\"model\":");
        vsr_buf_append_json_string(out, vsr_slice_cstr(names[i]));
        vsr_buf_printf(out,
                       ",\"inflight\":%lld,\"window_requests\":%llu,\"window_errors\":%llu,\"error_rate\":%.6f,"
                       "\"requests\":%llu,\"errors\":%llu,\"prompt_tokens\":%llu,\"completion_tokens\":%llu,"
                       "\"cost\":%.9f",
                       (long long)v.inflight, (unsigned long long)v.window_requests,
                       (unsigned long long)v.window_errors,
                       v.window_requests ? (double)v.window_errors / (double)v.window_requests : 0.0,
                       (unsigned long long)v.requests, (unsigned long long)v.errors,
                       (unsigned long long)v.prompt_tokens, (unsigned long long)v.completion_tokens, v.cost);
        for (int k = 0; k < VSR_MSTAT_N; k++) {
            vsr_buf_printf(out, ",\"%s_ms\":", stat_names[k]);
            if (v.n[k] == 0) {
                vsr_buf_append_cstr(out, "null");
                continue;
            }
            vsr_buf_printf(out, "{\"samples\":%llu,\"p50\":%.3f,\"p95\":%.3f,\"p99\":%.3f}",
                           (unsigned long long)v.n[k], v.pct_ms[k][0], v.pct_ms[k][1], v.pct_ms[k][2]);
        }
        vsr_buf_append_cstr(out, "}");
    }
    vsr_buf_append_cstr(out, "]}");
}
