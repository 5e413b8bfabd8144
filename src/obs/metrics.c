/* metrics.c — per-worker counters and histograms, summed at scrape time.
 *
 * Label values are interned per registry: each label kind (model, decision,
 * outcome, endpoint) keeps at most MAX_LABEL_VALUES distinct values, and any
 * value past that becomes "other", so a flood of new names cannot grow
 * memory or the scrape without bound.  A series is identified by its family
 * and the interned pointers of its label values.
 *
 * A shard has one writer (its worker) and any number of readers (scrapes).
 * The writer finds series through an index only it reads, so the index can be
 * rebuilt freely; readers walk the shard's series list instead.  A new series
 * is filled in, then pushed on the list head with a release store; readers
 * load the head with acquire, so they never see a half-built series.  Values
 * are 64-bit atomics written and read with relaxed order: with one writer a
 * load-add-store needs no read-modify-write instruction, and a reader never
 * sees a torn value. */
#include "obs-int.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_LABEL_VALUES 256
#define LABEL_VALUE_CAP 256 /* bytes of a label value kept */
#define SHARD_MEMO 32       /* label values a shard remembers (intern_sh) */
#define DOMAIN_SLOTS 512    /* open addressing, at most half full */

/* ---- interned label values ---- */

typedef struct {
    uint32_t hash;
    uint32_t key_len;
    const char *key;  /* the value as given, at most LABEL_VALUE_CAP bytes */
    const char *text; /* valid UTF-8, escaped for the text format, no quotes */
    size_t text_len;
} lv_t;

#define LV_STATIC(s) {0, sizeof(s) - 1, s, s, sizeof(s) - 1}

enum { D_MODEL, D_DECISION, D_OUTCOME, D_ENDPOINT, D_FAMILY, D_COUNT };

typedef struct {
    _Atomic(lv_t *) slots[DOMAIN_SLOTS];
    atomic_int full;  /* MAX_LABEL_VALUES reached: misses need no lock */
    unsigned count;   /* under intern_mu */
} domain_t;

static const lv_t status_lv[] = {LV_STATIC("1xx"), LV_STATIC("2xx"), LV_STATIC("3xx"), LV_STATIC("4xx"),
                                 LV_STATIC("5xx"), LV_STATIC("none"), LV_STATIC("other")};
static const lv_t other_lv = LV_STATIC("other");

/* ---- families ---- */

typedef struct {
    unsigned n;             /* finite buckets; +Inf is implied */
    const double *bounds;
    const char *const *text;
} hist_spec_t;

static const double dur_bounds[] = {.001, .0025, .005, .01, .025, .05, .1, .25, .5,
                                    1,    2.5,   5,    10,  30,   60,  120, 300};
static const char *const dur_text[] = {"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                                       "0.1",   "0.25",   "0.5",   "1",    "2.5",   "5",
                                       "10",    "30",     "60",    "120",  "300"};
static const hist_spec_t dur_hist = {VSR_ARRAY_LEN(dur_bounds), dur_bounds, dur_text};

static const double routing_bounds[] = {.00001, .000025, .00005, .0001, .00025, .0005, .001,
                                        .0025,  .005,    .01,    .025,  .05,    .1};
static const char *const routing_text[] = {"0.00001", "0.000025", "0.00005", "0.0001", "0.00025",
                                           "0.0005",  "0.001",    "0.0025",  "0.005",  "0.01",
                                           "0.025",   "0.05",     "0.1"};
static const hist_spec_t routing_hist = {VSR_ARRAY_LEN(routing_bounds), routing_bounds, routing_text};

/* a signal family's evaluation: rule families take microseconds, model
 * families a runtime round trip */
static const double family_bounds[] = {.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005,
                                       .01,    .025,    .05,    .1,    .25,    .5,    1,    2.5,   5};
static const char *const family_text[] = {"0.00001", "0.000025", "0.00005", "0.0001", "0.00025", "0.0005",
                                          "0.001",   "0.0025",   "0.005",   "0.01",   "0.025",   "0.05",
                                          "0.1",     "0.25",     "0.5",     "1",      "2.5",     "5"};
static const hist_spec_t family_hist = {VSR_ARRAY_LEN(family_bounds), family_bounds, family_text};

#define MAX_BUCKETS 32 /* >= every spec's n + 1 */

/* The families whose series live in the shards' tables, in render order. */
enum { F_REQUESTS, F_REQ_DUR, F_UP_DUR, F_TTFB, F_ATTEMPTS, F_RETRIES, F_FALLBACKS, F_OVERFLOW, F_TOKENS, F_ACCEPT_ERR,
       F_CLIENT_TIMEOUT, F_EDGE, F_LOOPER_CALLS, F_LOOPER_DUR, F_SIG_FAMILY, F_CACHE, F_RGUARD,
       F_TOOLSEL, F_REMOTE_CLS, F_MEMORY, F_HALLU, F_SHADOW, F_RAG, F_RATELIMIT, F_COUNT };

typedef struct {
    const char *name;
    const char *help;
    const hist_spec_t *hist; /* NULL: a counter */
    unsigned n_labels;
    const char *labels[3];
} family_t;

static const family_t families[F_COUNT] = {
    [F_REQUESTS] = {"vsr_requests_total", "Requests answered, by status class, selected model and decision.", NULL,
                    3, {"status_class", "model", "decision"}},
    [F_REQ_DUR] = {"vsr_request_duration_seconds", "Time from the request's first byte to its end, by model.",
                   &dur_hist, 1, {"model"}},
    [F_UP_DUR] = {"vsr_upstream_duration_seconds", "Time spent in upstream attempts for one request, by model.",
                  &dur_hist, 1, {"model"}},
    [F_TTFB] = {"vsr_stream_ttfb_seconds", "Time to the first response byte of a streamed response, by model.",
                &dur_hist, 1, {"model"}},
    [F_ATTEMPTS] = {"vsr_upstream_attempts_total", "Upstream attempts, by model and outcome.", NULL, 2,
                    {"model", "outcome"}},
    [F_RETRIES] = {"vsr_upstream_retries_total", "Upstream retries, by model.", NULL, 1, {"model"}},
    [F_FALLBACKS] = {"vsr_fallbacks_total", "Cross-model fallbacks, from the failed model to the next one.", NULL,
                     2, {"from", "to"}},
    [F_OVERFLOW] = {"vsr_upstream_overflow_total", "Requests refused by a model's connection or request limit.",
                    NULL, 1, {"model"}},
    [F_TOKENS] = {"vsr_tokens_total", "Tokens reported by streamed responses' usage, by model and type (prompt, completion).",
                  NULL, 2, {"model", "type"}},
    [F_ACCEPT_ERR] = {"vsr_accept_errors_total",
                      "Failed accepts on a listener, by reason (emfile, enfile, other); each backs the listener off.",
                      NULL, 1, {"reason"}},
    [F_CLIENT_TIMEOUT] = {"vsr_client_timeouts_total",
                          "Client connections ended because the client was too slow, by phase (header, body, write).",
                          NULL, 1, {"reason"}},
    [F_SIG_FAMILY] = {"vsr_signal_family_seconds",
                      "Time one request spent evaluating a signal family (rule families: the sum over their signals; "
                      "model families: from the task's start to its result consumed, the longest of their signals).",
                      &family_hist, 1, {"family"}},
    [F_EDGE] = {"vsr_edge_refusals_total",
                "Requests, streams and connections refused or cut at the edge by a client-facing limit, by reason.",
                NULL, 1, {"reason"}},
    [F_LOOPER_CALLS] = {"vsr_looper_calls_total",
                        "Model calls made by request graphs (Looper algorithms), by algorithm, model and outcome "
                        "(ok, error).",
                        NULL, 3, {"algorithm", "model", "outcome"}},
    [F_CACHE] = {"vsr_response_cache_total",
                 "Response cache operations, by operation (lookup, store) and result (hit, miss, stored, error, "
                 "skipped).",
                 NULL, 2, {"op", "result"}},
    [F_RATELIMIT] = {"vsr_ratelimit_total",
                     "Requests refused by a rate limit rule (limited), and checks that could not be made, admitted "
                     "or refused by fail_open (error_open, error_closed), by rule.",
                     NULL, 2, {"rule", "result"}},
    [F_RGUARD] = {"vsr_response_guard_total",
                  "Answers scanned by the response_jailbreak plugin, by result (pass, flagged, blocked, error: the "
                  "scan failed or came late and the answer went out unchanged).",
                  NULL, 1, {"result"}},
    [F_MEMORY] = {"vsr_memory_total",
                  "The memory plugin, by operation and result: request (used, missing, skipped, unavailable) and "
                  "write (stored, error).",
                  NULL, 2, {"op", "result"}},
    [F_TOOLSEL] = {"vsr_tool_selection_total",
                   "Requests whose tool plugins selected by similarity, by result (semantic: on similarities; "
                   "unavailable: the runtime gave none and the tools went as sent).",
                   NULL, 1, {"result"}},
    [F_REMOTE_CLS] = {"vsr_remote_classifier_calls_total",
                      "Calls of remote classifiers (global.model_catalog.external) by routing signals, by result (ok; "
                      "failed: no answer in time, no connection, a non-2xx status or an answer over the bound; "
                      "invalid: an answer that is not the contract's). Failed and invalid calls leave their signals "
                      "unknown.",
                      NULL, 1, {"result"}},
    [F_HALLU] = {"vsr_hallucination_checks_total",
                 "Answers the hallucination plugin looked at, by result (detected, not_detected, "
                 "context_unavailable: no grounding context, unverified_factual_action applied; evaluation_failed: "
                 "the detector failed and the answer went out unchanged; not_enforced_streaming).",
                 NULL, 1, {"result"}},
    [F_SHADOW] = {"vsr_shadow_dispatch_total",
                  "Copies of requests for shadow models (shadow_dispatch), by shadow model and result (ok: a 2xx "
                  "answer, read and dropped; failed: an error, a non-2xx status or an answer over max_response_bytes; "
                  "dropped: max_concurrency copies were in flight; sampled_out: not drawn by sample_rate).",
                  NULL, 2, {"model", "result"}},
    [F_RAG] = {"vsr_rag_retrievals_total",
               "Requests whose rag plugin retrieved, by backend (external_api, openai, mcp) and result (injected, "
               "cached, empty: nothing found, failed: went on without context, blocked: answered 503).",
               NULL, 2, {"backend", "result"}},
    [F_LOOPER_DUR] = {"vsr_looper_call_duration_seconds",
                      "Duration of request-graph calls, by algorithm and the node that made them (panel, judge, ...).",
                      &dur_hist, 2, {"algorithm", "node"}},
};

/* ---- series and shards ---- */

typedef struct series_s {
    struct series_s *next; /* set before publication, never changed */
    const lv_t *lab[3];
    uint32_t hash;
    uint8_t family;
    /* counter: v[0].  histogram: v[0..n] the count per bucket (not
     * cumulative; v[n] is +Inf), v[n + 1] the sum in nanoseconds (an
     * integer, so that sums are exact and render without float noise). */
    _Atomic uint64_t v[];
} series_t;

struct vsr_metrics_shard_s {
    vsr_metrics_t *m;
    _Atomic(series_t *) head;
    /* the owner's index: open addressing, at most half full */
    series_t **index;
    size_t index_mask;
    size_t n_series;
    _Atomic uint64_t connections; /* two's complement: the sum of the deltas */
    _Atomic uint64_t requests;
    _Atomic uint64_t routing[VSR_ARRAY_LEN(routing_bounds) + 2];
    /* the owner's memo of label values it interned (intern_sh) */
    struct {
        unsigned dom;
        const lv_t *lv;
    } memo[SHARD_MEMO];
    char _pad[64]; /* keeps the next shard's hot fields off this one's cache line */
};

typedef struct {
    const lv_t *model, *endpoint;
    int healthy, ejected;
} health_t;

typedef struct {
    const lv_t *model;
    uint64_t n;
} ejections_t;

struct vsr_metrics_s {
    unsigned n_shards;
    vsr_metrics_shard_t **shards;
    pthread_mutex_t intern_mu;
    domain_t domains[D_COUNT];
    _Atomic uint64_t config_version;
    _Atomic uint64_t activations;
    _Atomic uint64_t updates[3];   /* configuration updates by result: ack, nack, unchanged */
    _Atomic uint64_t replay[3][3]; /* router replay records by backend (memory, redis, postgres) and result */
    /* control-side values: set from any thread, rarely */
    pthread_mutex_t global_mu;
    health_t *health;
    size_t n_health, cap_health;
    ejections_t *ejections;
    size_t n_ejections, cap_ejections;
    /* borrowed: their counters are read at scrape time */
    vsr_access_log_t *log;
    vsr_tracer_t *tracer;
};

/* ---- small helpers ---- */

static inline void add_u64(_Atomic uint64_t *p, uint64_t d)
{
    /* one writer: a plain load and store, each untearable */
    atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + d, memory_order_relaxed);
}

static inline uint64_t get_u64(const _Atomic uint64_t *p)
{
    return atomic_load_explicit((_Atomic uint64_t *)p, memory_order_relaxed);
}

static inline uint64_t double_to_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

/* Observations that are not a finite number >= 0 are skipped: a negative
 * value means "did not happen", the rest are the caller's mistake and would
 * poison the sum. */
static inline int observable(double x)
{
    return x >= 0 && isfinite(x);
}

static uint32_t hash_bytes(vsr_slice_t s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < s.len; i++)
        h = (h ^ (unsigned char)s.p[i]) * 16777619u;
    return h;
}

/* ---- interning ---- */

static lv_t *lv_new(vsr_slice_t key, uint32_t hash)
{
    char clean[3 * LABEL_VALUE_CAP];
    size_t n = vsr__obs_utf8_clean(key, LABEL_VALUE_CAP, clean);
    /* Prometheus text format: backslash, double quote and newline escaped */
    char text[2 * sizeof(clean)];
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        char c = clean[i];
        if (c == '\\' || c == '"')
            text[t++] = '\\', text[t++] = c;
        else if (c == '\n')
            text[t++] = '\\', text[t++] = 'n';
        else
            text[t++] = c;
    }
    lv_t *lv = vsr_malloc(sizeof(*lv) + key.len + t + 2);
    char *k = (char *)(lv + 1);
    if (key.len)
        memcpy(k, key.p, key.len);
    k[key.len] = '\0';
    char *x = k + key.len + 1;
    memcpy(x, text, t);
    x[t] = '\0';
    lv->hash = hash;
    lv->key_len = (uint32_t)key.len;
    lv->key = k;
    lv->text = x;
    lv->text_len = t;
    return lv;
}

static int lv_matches(const lv_t *lv, uint32_t hash, vsr_slice_t key)
{
    return lv->hash == hash && lv->key_len == key.len && (key.len == 0 || memcmp(lv->key, key.p, key.len) == 0);
}

static const lv_t *intern(vsr_metrics_t *m, unsigned dom, vsr_slice_t v)
{
    domain_t *d = &m->domains[dom];
    vsr_slice_t key = vsr_slice(v.p, VSR_MIN(v.len, (size_t)LABEL_VALUE_CAP));
    /* a configured "other" and the overflow share one series, so the output
     * never holds two series with the same labels */
    if (vsr_slice_eq_cstr(key, "other"))
        return &other_lv;
    uint32_t h = hash_bytes(key);
    size_t i = h & (DOMAIN_SLOTS - 1);
    for (lv_t *p; (p = atomic_load_explicit(&d->slots[i], memory_order_acquire)) != NULL;
         i = (i + 1) & (DOMAIN_SLOTS - 1))
        if (lv_matches(p, h, key))
            return p;
    if (atomic_load_explicit(&d->full, memory_order_relaxed))
        return &other_lv;

    pthread_mutex_lock(&m->intern_mu);
    /* Another thread may have added values since: go on probing from the
     * empty slot found above (slots are only ever filled, never emptied). */
    const lv_t *found = NULL;
    for (lv_t *p; (p = atomic_load_explicit(&d->slots[i], memory_order_acquire)) != NULL;
         i = (i + 1) & (DOMAIN_SLOTS - 1)) {
        if (lv_matches(p, h, key)) {
            found = p;
            break;
        }
    }
    if (found == NULL) {
        if (d->count >= MAX_LABEL_VALUES) {
            atomic_store_explicit(&d->full, 1, memory_order_relaxed);
            found = &other_lv;
        } else {
            lv_t *lv = lv_new(key, h);
            atomic_store_explicit(&d->slots[i], lv, memory_order_release);
            if (++d->count == MAX_LABEL_VALUES)
                atomic_store_explicit(&d->full, 1, memory_order_relaxed);
            found = lv;
        }
    }
    pthread_mutex_unlock(&m->intern_mu);
    return found;
}

/* intern() for a shard's own thread: a request's labels are mostly the
 * same few configuration strings, found again in the shard's memo (indexed
 * by length and end bytes, checked against the interned key) without
 * hashing every byte and probing the shared table. */
static const lv_t *intern_sh(vsr_metrics_shard_t *sh, unsigned dom, vsr_slice_t v)
{
    size_t len = VSR_MIN(v.len, (size_t)LABEL_VALUE_CAP);
    size_t i = len ? (len * 7u + (unsigned char)v.p[0] * 3u + (unsigned char)v.p[len - 1] + dom * 5u) : dom;
    i &= SHARD_MEMO - 1;
    const lv_t *lv = sh->memo[i].lv;
    if (lv && sh->memo[i].dom == dom && lv->key_len == len && (len == 0 || memcmp(lv->key, v.p, len) == 0))
        return lv;
    lv = intern(sh->m, dom, v);
    sh->memo[i].dom = dom;
    sh->memo[i].lv = lv;
    return lv;
}

static const lv_t *status_class(int status)
{
    if (status == 0)
        return &status_lv[5];
    if (status >= 100 && status <= 599)
        return &status_lv[status / 100 - 1];
    return &status_lv[6];
}

/* ---- the shard's table ---- */

static size_t values_of(unsigned fam)
{
    const hist_spec_t *h = families[fam].hist;
    return h ? h->n + 2 : 1;
}

static uint32_t series_hash(unsigned fam, const lv_t *a, const lv_t *b, const lv_t *c)
{
    uint64_t x = fam;
    const lv_t *lab[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        x ^= (uint64_t)(uintptr_t)lab[i];
        x *= 0x9e3779b97f4a7c15ull;
        x ^= x >> 29;
    }
    return (uint32_t)(x ^ (x >> 32));
}

static void index_insert(series_t **index, size_t mask, series_t *s)
{
    size_t i = s->hash & mask;
    while (index[i] != NULL)
        i = (i + 1) & mask;
    index[i] = s;
}

static series_t *series_add(vsr_metrics_shard_t *sh, unsigned fam, const lv_t *a, const lv_t *b, const lv_t *c,
                            uint32_t hash)
{
    size_t nv = values_of(fam);
    series_t *s = vsr_malloc(sizeof(*s) + nv * sizeof(s->v[0]));
    s->lab[0] = a, s->lab[1] = b, s->lab[2] = c;
    s->hash = hash;
    s->family = (uint8_t)fam;
    for (size_t i = 0; i < nv; i++)
        atomic_init(&s->v[i], 0);
    if (families[fam].hist)
        atomic_init(&s->v[nv - 1], double_to_bits(0.0));

    if ((sh->n_series + 1) * 2 > sh->index_mask + 1) {
        size_t cap = (sh->index_mask + 1) * 2;
        series_t **idx = vsr_calloc(cap, sizeof(*idx));
        for (size_t i = 0; i <= sh->index_mask; i++)
            if (sh->index[i])
                index_insert(idx, cap - 1, sh->index[i]);
        vsr_free(sh->index);
        sh->index = idx;
        sh->index_mask = cap - 1;
    }
    index_insert(sh->index, sh->index_mask, s);
    sh->n_series++;

    s->next = atomic_load_explicit(&sh->head, memory_order_relaxed);
    atomic_store_explicit(&sh->head, s, memory_order_release); /* publish, filled in */
    return s;
}

/* The series (fam, a, b, c) of this shard; allocates only the first time. */
static series_t *series_get(vsr_metrics_shard_t *sh, unsigned fam, const lv_t *a, const lv_t *b, const lv_t *c)
{
    uint32_t h = series_hash(fam, a, b, c);
    for (size_t i = h & sh->index_mask;; i = (i + 1) & sh->index_mask) {
        series_t *s = sh->index[i];
        if (s == NULL)
            return series_add(sh, fam, a, b, c, h);
        if (s->hash == h && s->family == fam && s->lab[0] == a && s->lab[1] == b && s->lab[2] == c)
            return s;
    }
}

static void hist_observe(_Atomic uint64_t *v, const hist_spec_t *spec, double x)
{
    unsigned i = 0;
    while (i < spec->n && x > spec->bounds[i])
        i++;
    add_u64(&v[i], 1);
    add_u64(&v[spec->n + 1], x > 0 ? (uint64_t)llround(x * 1e9) : 0);
}

static void count1(vsr_metrics_shard_t *s, unsigned fam, const lv_t *a, const lv_t *b, const lv_t *c)
{
    add_u64(&series_get(s, fam, a, b, c)->v[0], 1);
}

/* ---- the registry ---- */

vsr_metrics_t *vsr_metrics_new(unsigned n_shards)
{
    vsr_metrics_t *m = vsr_calloc(1, sizeof(*m));
    m->n_shards = n_shards;
    m->shards = vsr_calloc(n_shards ? n_shards : 1, sizeof(*m->shards));
    for (unsigned i = 0; i < n_shards; i++) {
        vsr_metrics_shard_t *s = vsr_calloc(1, sizeof(*s));
        s->m = m;
        atomic_init(&s->head, NULL);
        s->index_mask = 63;
        s->index = vsr_calloc(s->index_mask + 1, sizeof(*s->index));
        atomic_init(&s->connections, 0);
        atomic_init(&s->requests, 0);
        for (size_t j = 0; j < VSR_ARRAY_LEN(s->routing); j++)
            atomic_init(&s->routing[j], 0);
        atomic_init(&s->routing[routing_hist.n + 1], double_to_bits(0.0));
        m->shards[i] = s;
    }
    pthread_mutex_init(&m->intern_mu, NULL);
    pthread_mutex_init(&m->global_mu, NULL);
    for (unsigned d = 0; d < D_COUNT; d++) {
        for (size_t i = 0; i < DOMAIN_SLOTS; i++)
            atomic_init(&m->domains[d].slots[i], NULL);
        atomic_init(&m->domains[d].full, 0);
    }
    atomic_init(&m->config_version, 0);
    atomic_init(&m->activations, 0);
    for (int i = 0; i < 3; i++)
        atomic_init(&m->updates[i], 0);
    return m;
}

void vsr_metrics_free(vsr_metrics_t *m)
{
    if (m == NULL)
        return;
    for (unsigned i = 0; i < m->n_shards; i++) {
        vsr_metrics_shard_t *s = m->shards[i];
        series_t *p = atomic_load_explicit(&s->head, memory_order_relaxed);
        while (p) {
            series_t *next = p->next;
            vsr_free(p);
            p = next;
        }
        vsr_free(s->index);
        vsr_free(s);
    }
    vsr_free(m->shards);
    for (unsigned d = 0; d < D_COUNT; d++)
        for (size_t i = 0; i < DOMAIN_SLOTS; i++)
            vsr_free(atomic_load_explicit(&m->domains[d].slots[i], memory_order_relaxed));
    vsr_free(m->health);
    vsr_free(m->ejections);
    pthread_mutex_destroy(&m->intern_mu);
    pthread_mutex_destroy(&m->global_mu);
    vsr_free(m);
}

vsr_metrics_shard_t *vsr_metrics_shard(vsr_metrics_t *m, unsigned i)
{
    if (m == NULL)
        return NULL;
    VSR_BUG_ON(i >= m->n_shards);
    return m->shards[i];
}

/* ---- the workers' side ---- */

void vsr_metrics_request(vsr_metrics_shard_t *s, int status, vsr_slice_t model, vsr_slice_t decision,
                         double total_seconds, double routing_seconds, double upstream_seconds)
{
    if (s == NULL)
        return;
    const lv_t *mo = intern_sh(s, D_MODEL, model);
    const lv_t *de = intern_sh(s, D_DECISION, decision);
    count1(s, F_REQUESTS, status_class(status), mo, de);
    if (observable(total_seconds))
        hist_observe(series_get(s, F_REQ_DUR, mo, NULL, NULL)->v, &dur_hist, total_seconds);
    if (observable(routing_seconds))
        hist_observe(s->routing, &routing_hist, routing_seconds);
    if (observable(upstream_seconds))
        hist_observe(series_get(s, F_UP_DUR, mo, NULL, NULL)->v, &dur_hist, upstream_seconds);
}

void vsr_metrics_signal_family(vsr_metrics_shard_t *s, vsr_slice_t family, double seconds)
{
    if (s == NULL || !observable(seconds))
        return;
    const lv_t *fa = intern_sh(s, D_FAMILY, family);
    hist_observe(series_get(s, F_SIG_FAMILY, fa, NULL, NULL)->v, &family_hist, seconds);
}

void vsr_metrics_ttfb(vsr_metrics_shard_t *s, vsr_slice_t model, double seconds)
{
    if (s == NULL || !observable(seconds))
        return;
    const lv_t *mo = intern_sh(s, D_MODEL, model);
    hist_observe(series_get(s, F_TTFB, mo, NULL, NULL)->v, &dur_hist, seconds);
}

void vsr_metrics_attempt(vsr_metrics_shard_t *s, vsr_slice_t model, const char *outcome)
{
    if (s == NULL)
        return;
    count1(s, F_ATTEMPTS, intern_sh(s, D_MODEL, model), intern_sh(s, D_OUTCOME, vsr_slice_cstr(outcome)), NULL);
}

void vsr_metrics_retry(vsr_metrics_shard_t *s, vsr_slice_t model)
{
    if (s == NULL)
        return;
    count1(s, F_RETRIES, intern_sh(s, D_MODEL, model), NULL, NULL);
}

void vsr_metrics_fallback(vsr_metrics_shard_t *s, vsr_slice_t from_model, vsr_slice_t to_model)
{
    if (s == NULL)
        return;
    count1(s, F_FALLBACKS, intern_sh(s, D_MODEL, from_model), intern_sh(s, D_MODEL, to_model), NULL);
}

void vsr_metrics_overflow(vsr_metrics_shard_t *s, vsr_slice_t model)
{
    if (s == NULL)
        return;
    count1(s, F_OVERFLOW, intern_sh(s, D_MODEL, model), NULL, NULL);
}

void vsr_metrics_accept_error(vsr_metrics_shard_t *s, const char *reason)
{
    if (s == NULL)
        return;
    count1(s, F_ACCEPT_ERR, intern_sh(s, D_OUTCOME, vsr_slice_cstr(reason)), NULL, NULL);
}

void vsr_metrics_client_timeout(vsr_metrics_shard_t *s, const char *reason)
{
    if (s == NULL)
        return;
    count1(s, F_CLIENT_TIMEOUT, intern_sh(s, D_OUTCOME, vsr_slice_cstr(reason)), NULL, NULL);
}

void vsr_metrics_tokens(vsr_metrics_shard_t *s, vsr_slice_t model, uint64_t prompt, uint64_t completion)
{
    if (s == NULL)
        return;
    const lv_t *mo = intern_sh(s, D_MODEL, model);
    add_u64(&series_get(s, F_TOKENS, mo, intern_sh(s, D_OUTCOME, VSR_SLICE_LIT("prompt")), NULL)->v[0], prompt);
    add_u64(&series_get(s, F_TOKENS, mo, intern_sh(s, D_OUTCOME, VSR_SLICE_LIT("completion")), NULL)->v[0],
            completion);
}

void vsr_metrics_looper_call(vsr_metrics_shard_t *s, const char *algorithm, const char *node, vsr_slice_t model,
                             int ok, double seconds)
{
    if (s == NULL)
        return;
    const lv_t *al = intern_sh(s, D_OUTCOME, vsr_slice_cstr(algorithm ? algorithm : ""));
    count1(s, F_LOOPER_CALLS, al, intern_sh(s, D_MODEL, model), intern_sh(s, D_OUTCOME, vsr_slice_cstr(ok ? "ok" : "error")));
    if (observable(seconds))
        hist_observe(series_get(s, F_LOOPER_DUR, al, intern_sh(s, D_OUTCOME, vsr_slice_cstr(node ? node : "")), NULL)->v,
                     &dur_hist, seconds);
}

void vsr_metrics_edge_refusal(vsr_metrics_shard_t *s, const char *reason)
{
    if (s == NULL)
        return;
    count1(s, F_EDGE, intern_sh(s, D_OUTCOME, vsr_slice_cstr(reason)), NULL, NULL);
}

void vsr_metrics_ratelimit(vsr_metrics_shard_t *s, const char *rule, const char *result)
{
    if (s == NULL)
        return;
    count1(s, F_RATELIMIT, intern_sh(s, D_DECISION, vsr_slice_cstr(rule)), intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)),
           NULL);
}

void vsr_metrics_cache(vsr_metrics_shard_t *s, const char *op, const char *result)
{
    if (s == NULL)
        return;
    count1(s, F_CACHE, intern_sh(s, D_OUTCOME, vsr_slice_cstr(op)), intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)),
           NULL);
}

void vsr_metrics_response_guard(vsr_metrics_shard_t *s, const char *result)
{
    if (s == NULL || result == NULL)
        return;
    count1(s, F_RGUARD, intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)), NULL, NULL);
}

void vsr_metrics_remote_classifier(vsr_metrics_shard_t *s, const char *result, unsigned n)
{
    if (s == NULL || n == 0)
        return;
    add_u64(&series_get(s, F_REMOTE_CLS, intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)), NULL, NULL)->v[0], n);
}

void vsr_metrics_memory(vsr_metrics_shard_t *s, const char *op, const char *result)
{
    if (s == NULL || result == NULL)
        return;
    count1(s, F_MEMORY, intern_sh(s, D_OUTCOME, vsr_slice_cstr(op)), intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)),
           NULL);
}

void vsr_metrics_hallucination(vsr_metrics_shard_t *s, const char *result)
{
    if (s != NULL && result != NULL)
        count1(s, F_HALLU, intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)), NULL, NULL);
}

void vsr_metrics_shadow(vsr_metrics_shard_t *s, vsr_slice_t model, const char *result)
{
    if (s != NULL)
        count1(s, F_SHADOW, intern_sh(s, D_MODEL, model), intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)), NULL);
}

void vsr_metrics_rag(vsr_metrics_shard_t *s, const char *backend, const char *result)
{
    if (s == NULL || backend == NULL || result == NULL)
        return;
    count1(s, F_RAG, intern_sh(s, D_OUTCOME, vsr_slice_cstr(backend)), intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)),
           NULL);
}

void vsr_metrics_tool_selection(vsr_metrics_shard_t *s, const char *result)
{
    if (s != NULL)
        count1(s, F_TOOLSEL, intern_sh(s, D_OUTCOME, vsr_slice_cstr(result)), NULL, NULL);
}

void vsr_metrics_connections(vsr_metrics_shard_t *s, int delta)
{
    if (s != NULL)
        add_u64(&s->connections, (uint64_t)(int64_t)delta);
}

void vsr_metrics_active_requests(vsr_metrics_shard_t *s, int delta)
{
    if (s != NULL)
        add_u64(&s->requests, (uint64_t)(int64_t)delta);
}

/* ---- the control side ---- */

void vsr_metrics_set_config_version(vsr_metrics_t *m, uint64_t version)
{
    if (m != NULL)
        atomic_store_explicit(&m->config_version, version, memory_order_relaxed);
}

void vsr_metrics_count_activation(vsr_metrics_t *m)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&m->activations, 1, memory_order_relaxed);
}

static const char *const update_results[3] = {"ack", "nack", "unchanged"};
static const char *const replay_backends[3] = {"memory", "redis", "postgres"};
static const char *const replay_results[3] = {"written", "failed", "evicted"};

void vsr_metrics_set_replay_records(vsr_metrics_t *m, const char *backend, const char *result, uint64_t n)
{
    if (m == NULL)
        return;
    for (int b = 0; b < 3; b++)
        for (int r = 0; r < 3; r++)
            if (strcmp(backend, replay_backends[b]) == 0 && strcmp(result, replay_results[r]) == 0)
                atomic_store_explicit(&m->replay[b][r], n, memory_order_relaxed);
}

void vsr_metrics_count_config_update(vsr_metrics_t *m, const char *result)
{
    for (int i = 0; m != NULL && result != NULL && i < 3; i++)
        if (strcmp(result, update_results[i]) == 0)
            atomic_fetch_add_explicit(&m->updates[i], 1, memory_order_relaxed);
}

void vsr_metrics_set_endpoint_health(vsr_metrics_t *m, vsr_slice_t model, vsr_slice_t endpoint, int healthy,
                                     int ejected)
{
    if (m == NULL)
        return;
    const lv_t *mo = intern(m, D_MODEL, model);
    const lv_t *ep = intern(m, D_ENDPOINT, endpoint);
    pthread_mutex_lock(&m->global_mu);
    health_t *h = NULL;
    for (size_t i = 0; i < m->n_health && h == NULL; i++)
        if (m->health[i].model == mo && m->health[i].endpoint == ep)
            h = &m->health[i];
    if (h == NULL) {
        if (m->n_health == m->cap_health) {
            m->cap_health = m->cap_health ? 2 * m->cap_health : 16;
            m->health = vsr_realloc(m->health, m->cap_health * sizeof(*m->health));
        }
        h = &m->health[m->n_health++];
        h->model = mo;
        h->endpoint = ep;
    }
    h->healthy = healthy != 0;
    h->ejected = ejected != 0;
    pthread_mutex_unlock(&m->global_mu);
}

void vsr_metrics_count_ejection(vsr_metrics_t *m, vsr_slice_t model)
{
    if (m == NULL)
        return;
    const lv_t *mo = intern(m, D_MODEL, model);
    pthread_mutex_lock(&m->global_mu);
    ejections_t *e = NULL;
    for (size_t i = 0; i < m->n_ejections && e == NULL; i++)
        if (m->ejections[i].model == mo)
            e = &m->ejections[i];
    if (e == NULL) {
        if (m->n_ejections == m->cap_ejections) {
            m->cap_ejections = m->cap_ejections ? 2 * m->cap_ejections : 16;
            m->ejections = vsr_realloc(m->ejections, m->cap_ejections * sizeof(*m->ejections));
        }
        e = &m->ejections[m->n_ejections++];
        e->model = mo;
        e->n = 0;
    }
    e->n++;
    pthread_mutex_unlock(&m->global_mu);
}

/* ---- rendering ---- */

static int lv_cmp(const lv_t *a, const lv_t *b)
{
    if (a == b)
        return 0;
    if (a == NULL || b == NULL)
        return a == NULL ? -1 : 1;
    size_t n = VSR_MIN(a->key_len, b->key_len);
    int c = n ? memcmp(a->key, b->key, n) : 0;
    if (c != 0)
        return c;
    return a->key_len < b->key_len ? -1 : a->key_len > b->key_len ? 1 : 0;
}

static int series_cmp(const void *pa, const void *pb)
{
    const series_t *a = *(const series_t *const *)pa, *b = *(const series_t *const *)pb;
    if (a->family != b->family)
        return a->family < b->family ? -1 : 1;
    for (int i = 0; i < 3; i++) {
        int c = lv_cmp(a->lab[i], b->lab[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

static int health_cmp(const void *pa, const void *pb)
{
    const health_t *a = pa, *b = pb;
    int c = lv_cmp(a->model, b->model);
    return c ? c : lv_cmp(a->endpoint, b->endpoint);
}

static int ejections_cmp(const void *pa, const void *pb)
{
    return lv_cmp(((const ejections_t *)pa)->model, ((const ejections_t *)pb)->model);
}

/* A sum of nanoseconds as seconds, exactly: 1.5, 0.000123, 0. */
static void put_seconds(vsr_buf_t *b, uint64_t ns)
{
    char frac[16];
    int n = snprintf(frac, sizeof(frac), "%09" PRIu64, ns % 1000000000u);
    while (n > 0 && frac[n - 1] == '0')
        frac[--n] = '\0';
    vsr_buf_printf(b, "%" PRIu64 "%s%s", ns / 1000000000u, n ? "." : "", frac);
}

static void put_header(vsr_buf_t *b, const char *name, const char *help, const char *type)
{
    vsr_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{l1="v1",...,extra} — braces only when there is a label */
static void put_name(vsr_buf_t *b, const char *name, const char *suffix, const char *const *names,
                     const lv_t *const *values, unsigned n, const char *le)
{
    vsr_buf_append_cstr(b, name);
    vsr_buf_append_cstr(b, suffix);
    if (n == 0 && le == NULL)
        return;
    vsr_buf_append(b, "{", 1);
    for (unsigned i = 0; i < n; i++) {
        vsr_buf_printf(b, "%s%s=\"", i ? "," : "", names[i]);
        vsr_buf_append(b, values[i]->text, values[i]->text_len);
        vsr_buf_append(b, "\"", 1);
    }
    if (le)
        vsr_buf_printf(b, "%sle=\"%s\"", n ? "," : "", le);
    vsr_buf_append(b, "}", 1);
}

static void put_histogram(vsr_buf_t *b, const char *name, const hist_spec_t *spec, const char *const *names,
                          const lv_t *const *values, unsigned n, const uint64_t *buckets, uint64_t sum_ns)
{
    uint64_t cum = 0;
    for (unsigned i = 0; i <= spec->n; i++) {
        cum += buckets[i];
        put_name(b, name, "_bucket", names, values, n, i < spec->n ? spec->text[i] : "+Inf");
        vsr_buf_printf(b, " %" PRIu64 "\n", cum);
    }
    put_name(b, name, "_sum", names, values, n, NULL);
    vsr_buf_append(b, " ", 1);
    put_seconds(b, sum_ns);
    vsr_buf_append(b, "\n", 1);
    /* the count is the +Inf bucket as read in this scrape, so the two agree */
    put_name(b, name, "_count", names, values, n, NULL);
    vsr_buf_printf(b, " %" PRIu64 "\n", cum);
}

/* Renders one shard family from its series (sorted, series of every shard
 * mixed): equal label sets are summed. */
static void render_family(vsr_buf_t *b, unsigned fam, series_t *const *v, size_t n)
{
    const family_t *f = &families[fam];
    put_header(b, f->name, f->help, f->hist ? "histogram" : "counter");
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && series_cmp(&v[i], &v[j]) == 0)
            j++;
        if (f->hist == NULL) {
            uint64_t total = 0;
            for (size_t k = i; k < j; k++)
                total += get_u64(&v[k]->v[0]);
            put_name(b, f->name, "", f->labels, v[i]->lab, f->n_labels, NULL);
            vsr_buf_printf(b, " %" PRIu64 "\n", total);
        } else {
            uint64_t buckets[MAX_BUCKETS] = {0};
            uint64_t sum = 0;
            for (size_t k = i; k < j; k++) {
                for (unsigned x = 0; x <= f->hist->n; x++)
                    buckets[x] += get_u64(&v[k]->v[x]);
                sum += get_u64(&v[k]->v[f->hist->n + 1]);
            }
            put_histogram(b, f->name, f->hist, f->labels, v[i]->lab, f->n_labels, buckets, sum);
        }
        i = j;
    }
}

static void render_shard_families(vsr_buf_t *b, series_t *const *all, size_t n, unsigned from, unsigned to)
{
    size_t i = 0;
    while (i < n && all[i]->family < from)
        i++;
    while (i < n && all[i]->family < to) {
        size_t j = i;
        while (j < n && all[j]->family == all[i]->family)
            j++;
        render_family(b, all[i]->family, all + i, j - i);
        i = j;
    }
}

static int64_t gauge_sum(vsr_metrics_t *m, int requests)
{
    uint64_t total = 0; /* the deltas wrap per shard; their sum is exact */
    for (unsigned i = 0; i < m->n_shards; i++)
        total += get_u64(requests ? &m->shards[i]->requests : &m->shards[i]->connections);
    return (int64_t)total;
}

static void render_all(vsr_metrics_t *m, vsr_buf_t *b)
{
    /* every published series of every shard */
    size_t n = 0, cap = 64;
    series_t **all = vsr_malloc(cap * sizeof(*all));
    for (unsigned i = 0; i < m->n_shards; i++) {
        for (series_t *p = atomic_load_explicit(&m->shards[i]->head, memory_order_acquire); p; p = p->next) {
            if (n == cap) {
                cap *= 2;
                all = vsr_realloc(all, cap * sizeof(*all));
            }
            all[n++] = p;
        }
    }
    qsort(all, n, sizeof(*all), series_cmp);

    render_shard_families(b, all, n, F_REQUESTS, F_REQ_DUR + 1);

    uint64_t routing[MAX_BUCKETS] = {0};
    uint64_t routing_sum = 0;
    for (unsigned i = 0; i < m->n_shards; i++) {
        for (unsigned x = 0; x <= routing_hist.n; x++)
            routing[x] += get_u64(&m->shards[i]->routing[x]);
        routing_sum += get_u64(&m->shards[i]->routing[routing_hist.n + 1]);
    }
    put_header(b, "vsr_routing_duration_seconds", "Time spent choosing the model of a request.", "histogram");
    put_histogram(b, "vsr_routing_duration_seconds", &routing_hist, NULL, NULL, 0, routing, routing_sum);

    render_shard_families(b, all, n, F_UP_DUR, F_COUNT);
    vsr_free(all);

    pthread_mutex_lock(&m->global_mu);
    if (m->n_ejections) {
        static const char *const names[] = {"model"};
        qsort(m->ejections, m->n_ejections, sizeof(*m->ejections), ejections_cmp);
        put_header(b, "vsr_outlier_ejections_total", "Endpoints ejected by outlier detection, by model.", "counter");
        for (size_t i = 0; i < m->n_ejections; i++) {
            put_name(b, "vsr_outlier_ejections_total", "", names, &m->ejections[i].model, 1, NULL);
            vsr_buf_printf(b, " %" PRIu64 "\n", m->ejections[i].n);
        }
    }
    if (m->n_health) {
        static const char *const names[] = {"model", "endpoint"};
        qsort(m->health, m->n_health, sizeof(*m->health), health_cmp);
        for (int ej = 0; ej <= 1; ej++) {
            const char *name = ej ? "vsr_endpoint_ejected" : "vsr_endpoint_healthy";
            put_header(b, name,
                       ej ? "1 while outlier detection keeps the endpoint out of rotation."
                          : "1 while the endpoint passes its health checks.",
                       "gauge");
            for (size_t i = 0; i < m->n_health; i++) {
                const lv_t *lab[2] = {m->health[i].model, m->health[i].endpoint};
                put_name(b, name, "", names, lab, 2, NULL);
                vsr_buf_printf(b, " %d\n", ej ? m->health[i].ejected : m->health[i].healthy);
            }
        }
    }
    pthread_mutex_unlock(&m->global_mu);

    put_header(b, "vsr_active_connections", "Open client connections.", "gauge");
    vsr_buf_printf(b, "vsr_active_connections %" PRId64 "\n",
                   gauge_sum(m, 0));
    put_header(b, "vsr_active_requests", "Requests in progress.", "gauge");
    vsr_buf_printf(b, "vsr_active_requests %" PRId64 "\n", gauge_sum(m, 1));
    put_header(b, "vsr_config_version", "Version of the active configuration.", "gauge");
    vsr_buf_printf(b, "vsr_config_version %" PRIu64 "\n",
                   atomic_load_explicit(&m->config_version, memory_order_relaxed));
    put_header(b, "vsr_config_activations_total", "Configurations activated since the start.", "counter");
    vsr_buf_printf(b, "vsr_config_activations_total %" PRIu64 "\n",
                   atomic_load_explicit(&m->activations, memory_order_relaxed));
    uint64_t upd[3], any = 0;
    for (int i = 0; i < 3; i++)
        any |= upd[i] = atomic_load_explicit(&m->updates[i], memory_order_relaxed);
    if (any) { /* only once a configuration was submitted after the start */
        put_header(b, "vsr_config_updates_total",
                   "Configuration documents submitted (file, API, rollback), by result.", "counter");
        for (int i = 0; i < 3; i++)
            vsr_buf_printf(b, "vsr_config_updates_total{result=\"%s\"} %" PRIu64 "\n", update_results[i], upd[i]);
    }
    uint64_t rr[3][3], rr_any = 0;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++)
            rr_any |= rr[i][k] = atomic_load_explicit(&m->replay[i][k], memory_order_relaxed);
    if (rr_any) { /* once a router_replay plugin recorded something */
        put_header(b, "vsr_router_replay_records_total",
                   "Router replay records by store backend: written, failed (the request went on), evicted.",
                   "counter");
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 3; k++)
                vsr_buf_printf(b, "vsr_router_replay_records_total{backend=\"%s\",result=\"%s\"} %" PRIu64 "\n",
                               replay_backends[i], replay_results[k], rr[i][k]);
    }
    put_header(b, "vsr_access_log_dropped_total", "Access log lines dropped because the writer's queue was full.",
               "counter");
    vsr_buf_printf(b, "vsr_access_log_dropped_total %" PRIu64 "\n", vsr_access_log_dropped(m->log));
    if (m->tracer) {
        vsr_tracer_stats_t ts;
        vsr_tracer_stats(m->tracer, &ts);
        put_header(b, "vsr_tracing_spans_exported_total", "Spans the trace collector accepted.", "counter");
        vsr_buf_printf(b, "vsr_tracing_spans_exported_total %" PRIu64 "\n", ts.spans_exported);
        put_header(b, "vsr_tracing_spans_dropped_total",
                   "Spans not exported: the queue was full (queue_full), or the collector did not take their batch "
                   "(export_failed).",
                   "counter");
        vsr_buf_printf(b, "vsr_tracing_spans_dropped_total{reason=\"export_failed\"} %" PRIu64 "\n", ts.spans_failed);
        vsr_buf_printf(b, "vsr_tracing_spans_dropped_total{reason=\"queue_full\"} %" PRIu64 "\n", ts.spans_dropped);
        put_header(b, "vsr_tracing_export_failures_total",
                   "Span batches that failed to export: connect, write, timeout, or a non-2xx answer.", "counter");
        vsr_buf_printf(b, "vsr_tracing_export_failures_total %" PRIu64 "\n", ts.export_failures);
    }
}

void vsr_metrics_attach(vsr_metrics_t *m, vsr_access_log_t *log, vsr_tracer_t *tracer)
{
    if (m == NULL)
        return;
    m->log = log;
    m->tracer = tracer;
}

void vsr_metrics_render(vsr_metrics_t *m, vsr_buf_t *out)
{
    if (m == NULL)
        return;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    render_all(m, &b);
    if (vsr_buf_append(out, b.data, b.len) != VSR_OK) {
        /* out's cap: keep whole lines only */
        size_t room = out->cap - out->len, keep = 0;
        for (size_t i = 0; i < b.len && i < room; i++)
            if (b.data[i] == '\n')
                keep = i + 1;
        vsr_buf_append(out, b.data, keep);
    }
    vsr_buf_free(&b);
}
