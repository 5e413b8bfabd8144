/*
 * graph_budget.c — what a decision's algorithm may cost without an
 * algorithm.budget (vsr_graph_implied_budget), read from its configuration
 * the way the templates (graph_templates.c, graph_workflows.c,
 * graph_yaml.c) build their nodes:
 *
 *   confidence  every modelRef once, twice under self_verify (the rating)
 *   ratings     every modelRef once
 *   remom       the breadth schedule's calls, plus the synthesis
 *   fusion      the panel, plus the judge's analysis (separate) and
 *               synthesis, or the quorum fallback's one call if larger
 *   workflows   the planner (dynamic), the steps (at most max_steps; static:
 *               the roles run, or one step), plus the final call
 *   graph       call: each of its models (fallback inside the hop);
 *               parallel: its slots; seq: the sum; loop: max_rounds x its
 *               body; branch: the larger side; subgraph: its node
 *
 * A hop costs 1 + its model's reliability.retry_count exchanges in calls.
 * Sums saturate; both totals are capped at VSR_GRAPH_MAX_CALLS, since a run
 * never makes more hops than its call budget allows.
 */
#include <string.h>

#include "graph/graph-int.h"

#define SAT ((uint64_t)1 << 40) /* far above VSR_GRAPH_MAX_CALLS: sums stop growing here */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b > SAT ? SAT : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return a && b > SAT / a ? SAT : a * b;
}

static void add(vsr_graph_implied_t *acc, const vsr_graph_implied_t *x)
{
    acc->hops = sat_add(acc->hops, x->hops);
    acc->calls = sat_add(acc->calls, x->calls);
}

static void times(vsr_graph_implied_t *x, uint64_t k)
{
    x->hops = sat_mul(x->hops, k);
    x->calls = sat_mul(x->calls, k);
}

/* Exchanges one hop to `name` may take: the first and its model's retries.
 * name: a provider model, or a modelRef's model or LoRA. */
static uint64_t tries(const vsr_config_t *cfg, const vsr_decision_conf_t *d, const char *name)
{
    const vsr_model_conf_t *m = name ? vsr_config_find_model(cfg, vsr_slice_cstr(name)) : NULL;
    for (size_t i = 0; m == NULL && name && i < d->n_model_refs; i++)
        if (d->model_refs[i].lora_name && !strcmp(d->model_refs[i].lora_name, name))
            m = vsr_config_find_model(cfg, vsr_slice_cstr(d->model_refs[i].model));
    if (m == NULL || !m->has_reliability || !m->reliability.has_retry_count)
        return 1;
    return 1 + (uint64_t)m->reliability.retry_count;
}

static uint64_t ref_tries(const vsr_config_t *cfg, const vsr_decision_conf_t *d, size_t i)
{
    return tries(cfg, d, d->model_refs[i].model);
}

/* The most exchanges a hop to any modelRef may take. */
static uint64_t refs_tries(const vsr_config_t *cfg, const vsr_decision_conf_t *d)
{
    uint64_t best = 1;
    for (size_t i = 0; i < d->n_model_refs; i++)
        if (ref_tries(cfg, d, i) > best)
            best = ref_tries(cfg, d, i);
    return best;
}

/* n hops of k exchanges each */
static vsr_graph_implied_t hops(uint64_t n, uint64_t k)
{
    vsr_graph_implied_t x = {n, sat_mul(n, k)};
    return x;
}

/* ---- the templates ---- */

static void implied_confidence(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_graph_implied_t *out)
{
    const vsr_algo_confidence_conf_t *c = &d->algo.u.confidence;
    uint64_t per = c->method && !strcmp(c->method, "self_verify") ? 2 : 1;
    for (size_t i = 0; i < d->n_model_refs; i++) {
        vsr_graph_implied_t x = hops(per, ref_tries(cfg, d, i));
        add(out, &x);
    }
}

static void implied_ratings(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_graph_implied_t *out)
{
    for (size_t i = 0; i < d->n_model_refs; i++) {
        vsr_graph_implied_t x = hops(1, ref_tries(cfg, d, i));
        add(out, &x);
    }
}

static void implied_remom(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_graph_implied_t *out)
{
    const vsr_algo_remom_conf_t *c = &d->algo.u.remom;
    uint64_t calls = 0;
    for (size_t i = 0; i < c->n_breadth_schedule; i++)
        calls = sat_add(calls, c->breadth_schedule[i]);
    if (c->n_breadth_schedule == 0)
        calls = 4; /* the template's default schedule, [4] */
    vsr_graph_implied_t rounds = hops(calls, refs_tries(cfg, d));
    vsr_graph_implied_t synth = hops(1, c->synthesis_model ? tries(cfg, d, c->synthesis_model) : refs_tries(cfg, d));
    add(out, &rounds);
    add(out, &synth);
}

static void implied_fusion(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_graph_implied_t *out)
{
    const vsr_algo_fusion_conf_t *c = &d->algo.u.fusion;
    if (c->analysis_models.n) {
        for (size_t i = 0; i < c->analysis_models.n; i++) {
            vsr_graph_implied_t x = hops(1, tries(cfg, d, c->analysis_models.items[i]));
            add(out, &x);
        }
    } else {
        implied_ratings(cfg, d, out);
    }
    const char *judge = c->model                ? c->model
                        : c->analysis_models.n ? c->analysis_models.items[0]
                        : d->n_model_refs      ? d->model_refs[0].model
                                               : NULL;
    int separate = c->analysis_mode == NULL || !strcmp(c->analysis_mode, "separate");
    vsr_graph_implied_t after = hops(separate ? 2 : 1, tries(cfg, d, judge));
    if (c->quorum_fallback && c->quorum_fallback_target) {
        vsr_graph_implied_t fb = hops(1, tries(cfg, d, c->quorum_fallback_target));
        if (fb.calls > after.calls)
            after.calls = fb.calls;
    }
    add(out, &after);
}

static void implied_workflows(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_graph_implied_t *out)
{
    const vsr_algo_workflows_conf_t *c = &d->algo.u.workflows;
    const char *first = d->n_model_refs ? d->model_refs[0].model : NULL;
    if (c->dynamic) {
        vsr_graph_implied_t planner = hops(1, tries(cfg, d, c->planner_model ? c->planner_model : first));
        add(out, &planner);
    }
    uint64_t k = refs_tries(cfg, d); /* a planned step calls modelRefs, a role its model(s) */
    uint64_t steps = 0;              /* calls: a role's models each make one */
    for (size_t i = 0; i < c->n_roles; i++) {
        if (c->roles[i].model && tries(cfg, d, c->roles[i].model) > k)
            k = tries(cfg, d, c->roles[i].model);
        for (size_t j = 0; j < c->roles[i].models.n; j++)
            if (tries(cfg, d, c->roles[i].models.items[j]) > k)
                k = tries(cfg, d, c->roles[i].models.items[j]);
        if (i < c->max_steps)
            steps += c->roles[i].models.n ? c->roles[i].models.n : 1;
    }
    if (c->dynamic) { /* a planned step: each of its models, the decision's modelRefs */
        uint64_t per = d->n_model_refs < VSR_FLOW_ROLE_MAX_MODELS ? d->n_model_refs : VSR_FLOW_ROLE_MAX_MODELS;
        steps = c->max_steps * (per ? per : 1);
    }
    if (steps > VSR_FLOW_MAX_CALLS)
        steps = VSR_FLOW_MAX_CALLS;
    if (steps == 0)
        steps = 1; /* one step that answers the request */
    vsr_graph_implied_t run = hops(steps, k);
    vsr_graph_implied_t final = hops(1, tries(cfg, d, c->final_model ? c->final_model : first));
    add(out, &run);
    add(out, &final);
}

/* A YAML node's models: its own, or the decision's modelRefs. */
static vsr_graph_implied_t node_models(const vsr_config_t *cfg, const vsr_decision_conf_t *d,
                                       const vsr_gnode_conf_t *n, uint64_t slots)
{
    vsr_graph_implied_t x = {0, 0};
    size_t m = n->models.n ? n->models.n : d->n_model_refs;
    if (m == 0)
        return x;
    if (slots == 0)
        slots = m;
    for (uint64_t i = 0; i < slots; i++) { /* slot i to models[i mod m] */
        size_t k = (size_t)(i % m);
        vsr_graph_implied_t one = hops(1, n->models.n ? tries(cfg, d, n->models.items[k]) : ref_tries(cfg, d, k));
        add(&x, &one);
    }
    return x;
}

static vsr_graph_implied_t implied_node(const vsr_config_t *cfg, const vsr_decision_conf_t *d,
                                        const vsr_gnode_conf_t *n, unsigned depth)
{
    vsr_graph_implied_t x = {0, 0};
    if (depth > 2 * VSR_GRAPH_MAX_DEPTH) { /* the config bounds nesting; this only guards the recursion */
        x.hops = x.calls = SAT;
        return x;
    }
    switch (n->kind) {
    case VSR_GNODE_SEQ:
        for (size_t i = 0; i < n->n_kids; i++) {
            vsr_graph_implied_t k = implied_node(cfg, d, &n->kids[i], depth + 1);
            add(&x, &k);
        }
        break;
    case VSR_GNODE_CALL: /* each candidate in turn until one answers */
        x = node_models(cfg, d, n, 0);
        break;
    case VSR_GNODE_PARALLEL:
        x = node_models(cfg, d, n, n->count);
        break;
    case VSR_GNODE_LOOP:
        if (n->n_kids) {
            x = implied_node(cfg, d, &n->kids[0], depth + 1);
            times(&x, n->max_rounds);
        }
        break;
    case VSR_GNODE_BRANCH:
        for (size_t i = 0; i < n->n_kids && i < 2; i++) {
            vsr_graph_implied_t k = implied_node(cfg, d, &n->kids[i], depth + 1);
            if (k.hops > x.hops)
                x.hops = k.hops;
            if (k.calls > x.calls)
                x.calls = k.calls;
        }
        break;
    case VSR_GNODE_SUBGRAPH:
        if (n->resolved)
            x = implied_node(cfg, d, n->resolved, depth + 1);
        break;
    case VSR_GNODE_TRANSFORM:
    case VSR_GNODE_RESPOND:
        break;
    }
    return x;
}

void vsr_graph_implied_budget(const vsr_config_t *cfg, const vsr_decision_conf_t *d, vsr_graph_implied_t *out)
{
    memset(out, 0, sizeof(*out));
    switch (d->algo.kind) {
    case VSR_ALGO_CONFIDENCE:
        implied_confidence(cfg, d, out);
        break;
    case VSR_ALGO_RATINGS:
        implied_ratings(cfg, d, out);
        break;
    case VSR_ALGO_REMOM:
        implied_remom(cfg, d, out);
        break;
    case VSR_ALGO_FUSION:
        implied_fusion(cfg, d, out);
        break;
    case VSR_ALGO_WORKFLOWS:
        implied_workflows(cfg, d, out);
        break;
    case VSR_ALGO_GRAPH:
        *out = implied_node(cfg, d, &d->algo.u.graph.root, 0);
        break;
    default:
        return;
    }
    if (out->hops > VSR_GRAPH_MAX_CALLS)
        out->hops = VSR_GRAPH_MAX_CALLS;
    if (out->calls > VSR_GRAPH_MAX_CALLS)
        out->calls = VSR_GRAPH_MAX_CALLS;
}
