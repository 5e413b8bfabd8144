/* projection.c — routing.projections (see decision.h). */
#include "decision/decision.h"

#include <math.h>
#include <stdlib.h>

typedef enum { IN_SIGNAL, IN_SCORE, IN_KB, IN_OUTPUT } input_kind_t;

typedef struct {
    const vsr_score_input_conf_t *conf;
    input_kind_t kind;
    int ref; /* signal, score or output index, -1 when unresolved (evaluates to miss) */
} input_t;

typedef struct {
    const vsr_score_conf_t *conf;
    input_t *inputs;
    size_t n_inputs;
} score_t;

typedef struct {
    const vsr_mapping_conf_t *mapping;
    int mapping_index;
    int source;    /* score index, -1 when unresolved */
    size_t first;  /* index of the mapping's first output */
    const vsr_mapping_output_conf_t *conf;
} output_t;

typedef struct {
    const vsr_partition_conf_t *conf;
    int *members;  /* signal indices (-1 unresolved), as conf->members */
    int def;       /* signal index of `default`, or -1 */
} partition_t;

struct vsr_projections_s {
    score_t *scores;
    size_t n_scores;
    output_t *outputs;
    size_t n_outputs;
    partition_t *partitions;
    size_t n_partitions;
};

static int score_index(const vsr_projections_conf_t *c, const char *name)
{
    for (size_t i = 0; name && i < c->n_scores; i++)
        if (c->scores[i].name && strcmp(c->scores[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* The index of mapping output `name` in the outputs' order, or -1. */
static int output_index(const vsr_projections_conf_t *c, const char *name)
{
    int o = 0;
    for (size_t m = 0; m < c->n_mappings; m++)
        for (size_t k = 0; k < c->mappings[m].n_outputs; k++, o++)
            if (name && c->mappings[m].outputs[k].name && strcmp(c->mappings[m].outputs[k].name, name) == 0)
                return o;
    return -1;
}

/* A partition member is a domain or an embedding signal. */
static int member_index(vsr_projection_find_fn find, void *ud, const char *name)
{
    if (name == NULL)
        return -1;
    int i = find(ud, "domain", name);
    return i >= 0 ? i : find(ud, "embedding", name);
}

vsr_projections_t *vsr_projections_compile(const vsr_projections_conf_t *c, vsr_projection_find_fn find, void *ud)
{
    vsr_projections_t *p = vsr_calloc(1, sizeof(*p));
    p->n_scores = c->n_scores;
    p->scores = vsr_calloc(c->n_scores + 1, sizeof(score_t));
    for (size_t i = 0; i < c->n_scores; i++) {
        score_t *s = &p->scores[i];
        s->conf = &c->scores[i];
        s->n_inputs = s->conf->n_inputs;
        s->inputs = vsr_calloc(s->n_inputs + 1, sizeof(input_t));
        for (size_t k = 0; k < s->n_inputs; k++) {
            input_t *in = &s->inputs[k];
            in->conf = &s->conf->inputs[k];
            const char *type = in->conf->type ? in->conf->type : "";
            if (strcmp(type, "kb_metric") == 0) {
                in->kind = IN_KB; /* the kb signal the configuration resolved, if any */
                in->ref = in->conf->name ? find(ud, "kb", in->conf->name) : -1;
            } else if (strcmp(type, "score") == 0) {
                in->kind = IN_SCORE;
                in->ref = score_index(c, in->conf->name);
            } else if (strcmp(type, "projection") == 0 && in->conf->value_source == VSR_VALUE_CONFIDENCE) {
                in->kind = IN_OUTPUT; /* the reference's: a mapping output's confidence */
                in->ref = output_index(c, in->conf->name);
            } else if (strcmp(type, "projection") == 0) {
                in->kind = IN_SCORE; /* the reference's: a score's value */
                in->ref = score_index(c, in->conf->name);
            } else {
                in->kind = IN_SIGNAL;
                in->ref = in->conf->name ? find(ud, type, in->conf->name) : -1;
            }
        }
    }
    for (size_t m = 0; m < c->n_mappings; m++)
        p->n_outputs += c->mappings[m].n_outputs;
    p->outputs = vsr_calloc(p->n_outputs + 1, sizeof(output_t));
    size_t o = 0;
    for (size_t m = 0; m < c->n_mappings; m++) {
        size_t first = o;
        for (size_t k = 0; k < c->mappings[m].n_outputs; k++, o++)
            p->outputs[o] = (output_t){&c->mappings[m], (int)m, score_index(c, c->mappings[m].source), first,
                                       &c->mappings[m].outputs[k]};
    }
    p->n_partitions = c->n_partitions;
    p->partitions = vsr_calloc(c->n_partitions + 1, sizeof(partition_t));
    for (size_t i = 0; i < c->n_partitions; i++) {
        partition_t *pa = &p->partitions[i];
        pa->conf = &c->partitions[i];
        pa->members = vsr_calloc(pa->conf->members.n + 1, sizeof(int));
        for (size_t k = 0; k < pa->conf->members.n; k++)
            pa->members[k] = member_index(find, ud, pa->conf->members.items[k]);
        pa->def = member_index(find, ud, pa->conf->default_);
    }
    return p;
}

void vsr_projections_free(vsr_projections_t *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n_scores; i++)
        vsr_free(p->scores[i].inputs);
    for (size_t i = 0; i < p->n_partitions; i++)
        vsr_free(p->partitions[i].members);
    vsr_free(p->scores);
    vsr_free(p->outputs);
    vsr_free(p->partitions);
    vsr_free(p);
}

size_t vsr_projections_n_outputs(const vsr_projections_t *p)
{
    return p->n_outputs;
}

size_t vsr_projections_n_scores(const vsr_projections_t *p)
{
    return p->n_scores;
}

int vsr_projections_find_output(const vsr_projections_t *p, const char *name)
{
    for (size_t o = 0; name && o < p->n_outputs; o++)
        if (p->outputs[o].conf->name && strcmp(p->outputs[o].conf->name, name) == 0)
            return (int)o;
    return -1;
}

const char *vsr_projections_output_name(const vsr_projections_t *p, int o)
{
    return p->outputs[o].conf->name;
}

const char *vsr_projections_score_name(const vsr_projections_t *p, int s)
{
    return p->scores[s].conf->name;
}

/* depth-bounded: cycles are refused at load, the bound only guards it */
static void score_deps(const vsr_projections_t *p, int s, void (*add)(void *ud, int sig), void *ud, size_t depth)
{
    if (s < 0 || depth > p->n_scores)
        return;
    const score_t *sc = &p->scores[s];
    for (size_t k = 0; k < sc->n_inputs; k++) {
        if ((sc->inputs[k].kind == IN_SIGNAL || sc->inputs[k].kind == IN_KB) && sc->inputs[k].ref >= 0)
            add(ud, sc->inputs[k].ref);
        else if (sc->inputs[k].kind == IN_SCORE)
            score_deps(p, sc->inputs[k].ref, add, ud, depth + 1);
        else if (sc->inputs[k].kind == IN_OUTPUT && sc->inputs[k].ref >= 0)
            score_deps(p, p->outputs[sc->inputs[k].ref].source, add, ud, depth + 1);
    }
}

void vsr_projections_output_deps(const vsr_projections_t *p, int o, void (*add)(void *ud, int sig), void *ud)
{
    score_deps(p, p->outputs[o].source, add, ud, 0);
}

void vsr_projections_partners(const vsr_projections_t *p, int sig, void (*add)(void *ud, int sig), void *ud)
{
    for (size_t i = 0; i < p->n_partitions; i++) {
        const partition_t *pa = &p->partitions[i];
        size_t n = pa->conf->members.n, k = 0;
        while (k < n && pa->members[k] != sig)
            k++;
        if (k == n)
            continue;
        for (k = 0; k < n; k++)
            if (pa->members[k] >= 0)
                add(ud, pa->members[k]);
    }
}

void vsr_projections_partition(const vsr_projections_t *p, vsr_signal_result_t *sig, const unsigned char *known)
{
    for (size_t i = 0; i < p->n_partitions; i++) {
        const partition_t *pa = &p->partitions[i];
        size_t n = pa->conf->members.n, n_matched = 0;
        int win = -1;
        double best = 0;
        for (size_t k = 0; k < n; k++) {
            int m = pa->members[k];
            if (m < 0 || !known[m] || !sig[m].matched)
                continue;
            /* the same signal listed twice counts once */
            size_t j = 0;
            while (j < k && pa->members[j] != m)
                j++;
            if (j < k)
                continue;
            n_matched++;
            if (win < 0 || sig[m].confidence > best) {
                win = m;
                best = sig[m].confidence;
            }
        }
        if (n_matched == 0) {
            if (pa->def >= 0 && known[pa->def]) {
                sig[pa->def].matched = 1;
                sig[pa->def].confidence = 1.0;
            }
            continue;
        }
        if (n_matched == 1)
            continue;
        double winner = best;
        if (pa->conf->softmax) {
            double t = pa->conf->temperature > 0 ? pa->conf->temperature : 1.0, sum = 0;
            for (size_t k = 0; k < n; k++) {
                int m = pa->members[k];
                size_t j = 0;
                while (j < k && pa->members[j] != m)
                    j++;
                if (m >= 0 && j == k && known[m] && sig[m].matched)
                    sum += exp((sig[m].confidence - best) / t); /* shifted by the max: no overflow */
            }
            winner = 1.0 / sum;
        }
        for (size_t k = 0; k < n; k++) {
            int m = pa->members[k];
            if (m >= 0 && m != win && known[m] && sig[m].matched) {
                sig[m].matched = 0;
                sig[m].confidence = 0;
            }
        }
        sig[win].confidence = winner;
    }
}

void vsr_projections_run_init(const vsr_projections_t *p, vsr_projections_run_t *run, vsr_pool_t *pool,
                              const vsr_signal_result_t *sig, const unsigned char *known)
{
    run->sig = sig;
    run->known = known;
    run->score = vsr_pool_alloc(pool, sizeof(double) * (p->n_scores + 1));
    run->score_state = vsr_pool_alloc(pool, p->n_scores + 1);
    memset(run->score_state, 0, p->n_scores + 1);
    run->out = vsr_pool_alloc(pool, sizeof(vsr_projection_out_t) * (p->n_outputs + 1));
    run->out_done = vsr_pool_alloc(pool, p->n_outputs + 1);
    memset(run->out_done, 0, p->n_outputs + 1);
}

static double input_value(const vsr_projections_t *p, vsr_projections_run_t *run, const input_t *in)
{
    const vsr_score_input_conf_t *c = in->conf;
    if (in->ref < 0)
        return c->miss;
    if (in->kind == IN_SCORE)
        return vsr_projections_score(p, run, in->ref);
    if (in->kind == IN_OUTPUT) { /* 0 when the output is not emitted, as the reference */
        vsr_projection_out_t o = vsr_projections_output(p, run, in->ref);
        return o.matched ? o.confidence : 0;
    }
    if (!run->known[in->ref])
        return c->miss;
    const vsr_signal_result_t *r = &run->sig[in->ref];
    if (in->kind == IN_KB) {
        switch (c->kb_metric) {
        case VSR_KB_METRIC_SCORE:
            return r->value;
        case VSR_KB_METRIC_CONFIDENCE:
            return r->matched ? r->confidence : c->miss;
        case VSR_KB_METRIC_MATCHED:
            return r->matched ? c->match : c->miss;
        }
        return c->miss;
    }
    switch (c->value_source) {
    case VSR_VALUE_BINARY:
        return r->matched ? c->match : c->miss;
    case VSR_VALUE_CONFIDENCE:
        return r->matched ? r->confidence : c->miss;
    case VSR_VALUE_RAW:
    case VSR_VALUE_SCORE:
        return r->value;
    }
    return c->miss;
}

double vsr_projections_score(const vsr_projections_t *p, vsr_projections_run_t *run, int s)
{
    if (s < 0 || (size_t)s >= p->n_scores)
        return 0;
    if (run->score_state[s] == 2)
        return run->score[s];
    if (run->score_state[s] == 1)
        return 0; /* a cycle (refused at load) */
    run->score_state[s] = 1;
    const score_t *sc = &p->scores[s];
    double sum = 0;
    for (size_t k = 0; k < sc->n_inputs; k++)
        sum += sc->inputs[k].conf->weight * input_value(p, run, &sc->inputs[k]);
    run->score[s] = sum;
    run->score_state[s] = 2;
    return sum;
}

/* 1 when x is in the band; *dist gets the distance to its nearest bound. */
static int in_band(const vsr_predicate_conf_t *b, double x, double *dist)
{
    double d = INFINITY;
    if (b->has_gt) {
        if (!(x > b->gt))
            return 0;
        d = fmin(d, x - b->gt);
    }
    if (b->has_gte) {
        if (!(x >= b->gte))
            return 0;
        d = fmin(d, x - b->gte);
    }
    if (b->has_lt) {
        if (!(x < b->lt))
            return 0;
        d = fmin(d, b->lt - x);
    }
    if (b->has_lte) {
        if (!(x <= b->lte))
            return 0;
        d = fmin(d, b->lte - x);
    }
    *dist = isinf(d) ? 1.0 : d;
    return 1;
}

vsr_projection_out_t vsr_projections_output(const vsr_projections_t *p, vsr_projections_run_t *run, int o)
{
    if (run->out_done[o])
        return run->out[o];
    const output_t *ot = &p->outputs[o];
    const vsr_mapping_conf_t *m = ot->mapping;
    /* every output of the mapping at once: threshold_bands needs the earlier ones */
    double x = vsr_projections_score(p, run, ot->source);
    int emitted = 0;
    for (size_t k = 0; k < m->n_outputs; k++) {
        size_t j = ot->first + k;
        double d = 0;
        vsr_projection_out_t r = {0, 0};
        if (ot->source >= 0 && (m->multi_emit || !emitted) && in_band(&m->outputs[k].band, x, &d)) {
            r.matched = 1;
            r.confidence = m->calibrated ? 1.0 / (1.0 + exp(-m->slope * d)) : 1.0;
            emitted = 1;
        }
        run->out[j] = r;
        run->out_done[j] = 1;
    }
    return run->out[o];
}

static const char *const value_source_names[] = {"binary", "confidence", "raw", "score"};

void vsr_projections_describe(const vsr_projections_t *p, const vsr_projections_run_t *run, int trace, vsr_buf_t *b)
{
    vsr_buf_append_cstr(b, "\"projection_scores\":[");
    int comma = 0;
    for (size_t s = 0; s < p->n_scores; s++) {
        if (run->score_state[s] != 2)
            continue;
        vsr_buf_append_cstr(b, comma ? ",{\"name\":" : "{\"name\":");
        comma = 1;
        vsr_buf_append_json_string(b, vsr_slice_cstr(p->scores[s].conf->name));
        vsr_buf_printf(b, ",\"score\":%.4f", run->score[s]);
        if (trace) {
            vsr_buf_append_cstr(b, ",\"inputs\":[");
            const score_t *sc = &p->scores[s];
            for (size_t k = 0; k < sc->n_inputs; k++) {
                const input_t *in = &sc->inputs[k];
                /* the value is recomputed from the memo: no side effect */
                vsr_projections_run_t tmp = *run;
                double v = input_value(p, &tmp, in);
                vsr_buf_append_cstr(b, k ? ",{\"type\":" : "{\"type\":");
                vsr_buf_append_json_string(b, vsr_slice_cstr(in->conf->type ? in->conf->type : ""));
                vsr_buf_append_cstr(b, ",\"name\":");
                vsr_buf_append_json_string(b, vsr_slice_cstr(in->conf->name ? in->conf->name
                                                             : in->conf->kb ? in->conf->kb : ""));
                vsr_buf_printf(b, ",\"value_source\":\"%s\",\"value\":%.4f,\"weight\":%.4f}",
                               value_source_names[in->conf->value_source], v, in->conf->weight);
            }
            vsr_buf_append_cstr(b, "]");
        }
        vsr_buf_append_cstr(b, "}");
    }
    vsr_buf_append_cstr(b, "],\"projection_outputs\":[");
    comma = 0;
    for (size_t o = 0; o < p->n_outputs; o++) {
        if (!run->out_done[o])
            continue;
        vsr_buf_append_cstr(b, comma ? ",{\"name\":" : "{\"name\":");
        comma = 1;
        vsr_buf_append_json_string(b, vsr_slice_cstr(p->outputs[o].conf->name));
        vsr_buf_append_cstr(b, ",\"mapping\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(p->outputs[o].mapping->name ? p->outputs[o].mapping->name : ""));
        vsr_buf_printf(b, ",\"matched\":%s,\"confidence\":%.4f}", run->out[o].matched ? "true" : "false",
                       run->out[o].confidence);
    }
    vsr_buf_append_cstr(b, "]");
}

size_t vsr_projections_matched_names(const vsr_projections_t *p, const vsr_projections_run_t *run, vsr_buf_t *b)
{
    size_t n = 0;
    for (size_t o = 0; o < p->n_outputs; o++) {
        if (!run->out_done[o] || !run->out[o].matched)
            continue;
        if (n++)
            vsr_buf_append_cstr(b, ",");
        vsr_buf_append_cstr(b, p->outputs[o].conf->name);
    }
    return n;
}
