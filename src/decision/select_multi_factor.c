/*
 * select_multi_factor.c — the multi_factor selector (ref §3.8, the
 * reference's pkg/selection/multi_factor.go): SLO ceilings prune the
 * candidates, then a weighted sum of min-max normalised quality, latency,
 * cost and load ranks the rest.
 *
 * objective (strategy, priorities) and quality (index, min_score,
 * min_coverage, on_missing) are in the reference's schema but its selector
 * does not read them; vsr gives them the meaning docs/routing.md states.
 */
#include "decision/decision.h"

#include <math.h>
#include <string.h>

enum { F_QUALITY, F_LATENCY, F_COST, F_LOAD, N_FACTORS };

typedef struct {
    double v[N_FACTORS];
    int has[N_FACTORS];
} signal_t;

typedef struct {
    double min[N_FACTORS], max[N_FACTORS];
    int has[N_FACTORS];
} extrema_t;

static int factor_index(const char *name)
{
    static const char *const names[N_FACTORS] = {"quality", "latency", "cost", "load"};
    for (int i = 0; i < N_FACTORS; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

/* The reference's latencySignal: TPOT when known, else TTFT. */
static void gather(const vsr_algo_multi_factor_conf_t *c, const vsr_select_input_t *in, signal_t *s)
{
    memset(s, 0, sizeof(*s));
    if (in->has_quality) {
        s->v[F_QUALITY] = in->quality;
        s->has[F_QUALITY] = 1;
    } else if (strcmp(c->on_missing, "neutral") == 0) {
        s->v[F_QUALITY] = NAN; /* 0.5 once normalised */
        s->has[F_QUALITY] = 1;
    }
    if (in->has_tpot) {
        s->v[F_LATENCY] = in->tpot_ms;
        s->has[F_LATENCY] = 1;
    } else if (in->has_ttft) {
        s->v[F_LATENCY] = in->ttft_ms;
        s->has[F_LATENCY] = 1;
    }
    if (in->has_cost) {
        s->v[F_COST] = in->cost_per_1m;
        s->has[F_COST] = 1;
    }
    s->v[F_LOAD] = in->inflight;
    s->has[F_LOAD] = 1;
}

/* Why the SLO or the quality rules drop the candidate, or NULL. */
static const char *excluded(const vsr_algo_multi_factor_conf_t *c, const vsr_select_input_t *in)
{
    if (c->max_tpot_ms > 0 && in->has_tpot && in->tpot_ms > c->max_tpot_ms)
        return "slo: tpot above max_tpot_ms";
    if (c->max_ttft_ms > 0 && in->has_ttft && in->ttft_ms > c->max_ttft_ms)
        return "slo: ttft above max_ttft_ms";
    if (c->max_cost_per_1m > 0 && in->has_cost && in->cost_per_1m > c->max_cost_per_1m)
        return "slo: cost above max_cost_per_1m";
    if (c->max_inflight > 0 && in->inflight > (double)c->max_inflight)
        return "slo: inflight above max_inflight";
    if (!in->has_quality && strcmp(c->on_missing, "exclude") == 0)
        return "quality: no score (on_missing: exclude)";
    if (c->has_min_score && in->has_quality && in->quality < c->min_score)
        return "quality: below min_score";
    return NULL;
}

/* A factor's normalised goodness in [0,1] (higher is better); the
 * reference's normalizeDirect / normalizeInverted: 0 when unknown, 0.5 when
 * every candidate has the same value. */
static double goodness(const signal_t *s, const extrema_t *e, int f)
{
    if (!s->has[f])
        return 0;
    if (isnan(s->v[f]) || e->max[f] - e->min[f] <= 0)
        return 0.5;
    double x = (s->v[f] - e->min[f]) / (e->max[f] - e->min[f]);
    return f == F_QUALITY ? x : 1.0 - x;
}

static void set_extrema(const signal_t *sig, const unsigned char *live, size_t n, extrema_t *e)
{
    for (int f = 0; f < N_FACTORS; f++) {
        e->min[f] = INFINITY;
        e->max[f] = -INFINITY;
        e->has[f] = 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!live[i])
            continue;
        for (int f = 0; f < N_FACTORS; f++) {
            if (!sig[i].has[f] || isnan(sig[i].v[f]))
                continue;
            e->has[f] = 1;
            if (sig[i].v[f] < e->min[f])
                e->min[f] = sig[i].v[f];
            if (sig[i].v[f] > e->max[f])
                e->max[f] = sig[i].v[f];
        }
    }
}

void vsr_select_multi_factor(const vsr_algo_multi_factor_conf_t *c, uint32_t minimum_candidates,
                             const vsr_select_input_t *in, size_t n, vsr_select_result_t *out)
{
    memset(out, 0, sizeof(*out));
    VSR_BUG_ON(n == 0 || n > VSR_SELECT_MAX_CANDIDATES);
    signal_t sig[VSR_SELECT_MAX_CANDIDATES];
    unsigned char live[VSR_SELECT_MAX_CANDIDATES];
    size_t kept = 0, with_quality = 0;
    for (size_t i = 0; i < n; i++) {
        out->dropped[i] = excluded(c, &in[i]);
        live[i] = out->dropped[i] == NULL;
        gather(c, &in[i], &sig[i]);
        kept += live[i];
        with_quality += live[i] && in[i].has_quality;
    }
    if (kept == 0) {
        out->score = 0;
        if (strcmp(c->on_no_candidates, "fail") == 0) {
            out->chosen = -1;
            out->error = "multi_factor: every candidate is excluded by the SLO (on_no_candidates: fail)";
            return;
        }
        int pick = 0;
        if (strcmp(c->on_no_candidates, "cheapest") == 0) {
            double best = INFINITY;
            for (size_t i = 0; i < n; i++)
                if (in[i].has_cost && in[i].cost_per_1m < best) {
                    best = in[i].cost_per_1m;
                    pick = (int)i;
                }
            out->warning = "multi_factor: every candidate is excluded by the SLO; the cheapest (on_no_candidates)";
        } else {
            out->warning = "multi_factor: every candidate is excluded by the SLO; the first (on_no_candidates)";
        }
        out->chosen = pick;
        return;
    }
    if (kept < (minimum_candidates ? minimum_candidates : 1)) {
        out->chosen = 0;
        out->score = 1.0;
        out->warning = "multi_factor: fewer candidates left than minimum_candidates; the first candidate";
        return;
    }
    /* quality.min_coverage: too few scored candidates and quality does not count */
    double wq = c->w_quality;
    if (c->min_coverage > 0 && (double)with_quality / (double)kept < c->min_coverage)
        wq = 0;
    const double w[N_FACTORS] = {wq, c->w_latency, c->w_cost, c->w_load};

    extrema_t e;
    set_extrema(sig, live, n, &e);
    /* objective.strategy lexicographic: narrow down factor by factor */
    if (strcmp(c->strategy, "lexicographic") == 0) {
        for (size_t p = 0; p < c->n_priorities; p++) {
            int f = factor_index(c->priorities[p].factor);
            if (f < 0 || !e.has[f])
                continue;
            double best = -INFINITY;
            for (size_t i = 0; i < n; i++)
                if (live[i] && goodness(&sig[i], &e, f) > best)
                    best = goodness(&sig[i], &e, f);
            for (size_t i = 0; i < n; i++)
                if (live[i] && goodness(&sig[i], &e, f) < best - c->priorities[p].tolerance - 1e-12) {
                    live[i] = 0;
                    out->dropped[i] = "objective: outside a priority's tolerance";
                }
        }
    }
    int bestix = -1;
    for (size_t i = 0; i < n; i++) {
        if (!live[i])
            continue;
        double s = 0;
        for (int f = 0; f < N_FACTORS; f++)
            if (w[f] > 0 && e.has[f])
                s += w[f] * goodness(&sig[i], &e, f);
        out->scores[i] = s;
        out->scored[i] = 1;
        if (bestix < 0 || s > out->scores[bestix])
            bestix = (int)i;
    }
    out->chosen = bestix;
    out->score = out->scores[bestix];
}
