/*
 * cfg_looper.c — routing.decisions[].algorithm (ref §1.6, §3) and
 * global.integrations.looper (ref §1.13).
 *
 * A decision's algorithm is `static` (the first modelRef), one of the five
 * Looper algorithms (confidence, ratings, remom, fusion, workflows), whose
 * block is decoded into vsr_algo_conf_t with the reference's defaults, or
 * vsr's `graph` (a request graph written in YAML, cfg_graph.c).  The
 * other catalogue types are refused as not supported yet.  Model names inside
 * the blocks are checked against providers.models and the decision's
 * modelRefs once the whole document is decoded (cfg_check.c).
 */
#include "config/cfg_internal.h"

#include <string.h>

/* Bounds of the graph a block may ask for: each is far above what a request
 * graph of the reference uses, and keeps one request's fan-out finite. */
#define ALGO_MAX_CALLS 10000          /* budget.max_calls */
#define ALGO_MAX_UPSTREAM_BYTES ((uint64_t)64 << 30) /* budget.max_upstream_bytes */
#define ALGO_MAX_BREADTH 64           /* calls of one ReMoM round */
#define ALGO_MAX_ROUNDS 16            /* ReMoM rounds (breadth_schedule entries) */
#define ALGO_MAX_CONCURRENT 256       /* max_concurrent, min_successful_responses, max_responses_per_round */
#define ALGO_MAX_COMPLETION_TOKENS (1 << 24)
#define ALGO_MAX_STEPS 32             /* workflows max_steps, roles[] */
#define ALGO_MAX_PARALLEL 64          /* workflows max_parallel */

static const char *q(cfg_decoder_t *d, const char *s)
{
    return vsr__cfg_quote(d->pool, s, strlen(s));
}

/* Prompts and templates: text that may span lines, non-empty, no NUL. */
static int decode_prompt(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_text(d, val);
    if (s == NULL)
        return -1;
    if (val->len == 0 || memchr(s, '\0', val->len) != NULL) {
        vsr__cfg_node_error(d, val, "%s must be non-empty text", f->key);
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr_pool_strndup(d->pool, s, val->len);
    return 0;
}

/* A remom or fusion template: a prompt, or "" for the built-in one (the
 * reference renders its own template only when the text is non-empty). */
static int decode_template(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR && val->len == 0)
        return 0;
    return decode_prompt(d, f, val, obj);
}

/* A model name: a string, remembered with its position for the checks in cfg_check.c. */
static int decode_model(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_string(d, f, val, obj) != 0)
        return -1;
    vsr__cfg_mark(d, (char *)obj + f->offset, val);
    return 0;
}

/* A list of model names, each remembered with its position; no duplicates. */
static int decode_models(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    vsr_strlist_conf_t *l = (vsr_strlist_conf_t *)((char *)obj + f->offset);
    if (val->kind != CFG_NODE_SEQ || val->n != l->n)
        return 0;
    for (size_t i = 0; i < l->n; i++)
        vsr__cfg_mark(d, &l->items[i], val->items[i]);
    vsr__cfg_check_unique(d, "model", (const char *const *)l->items, (const cfg_node_t *const *)val->items, l->n);
    return 0;
}

/* An http(s) URL (a verifier's); "" is none, as in the reference. */
static int decode_url(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR && val->len == 0)
        return 0;
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    cfg_url_t u;
    const char *why = NULL;
    if (vsr__cfg_parse_base_url(vsr_slice(s, strlen(s)), &u, &why) != 0) {
        vsr__cfg_node_error(d, val, "%s: invalid URL %s: %s", f->key, q(d, s), why ? why : "malformed");
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

static const char *const on_error_choices[] = {"skip", "fail", NULL}; /* index = on_error_fail */

#define ON_ERROR(T) {.key = "on_error", .decode = vsr__cfg_choice, .offset = offsetof(T, on_error_fail), \
                     .choices = on_error_choices}
#define UINT_FIELD(k, T, m, lo, hi) {.key = (k), .decode = vsr__cfg_uint, .offset = offsetof(T, m), \
                                     .size = sizeof(((T *)0)->m), .min = (lo), .max = (hi)}
#define TEMPERATURE(T) {.key = "temperature", .decode = vsr__cfg_double, .flags = CFG_HAS, \
                        .offset = offsetof(T, temperature), .has_offset = offsetof(T, has_temperature), \
                        .dmin = 0, .dmax = 2}
#define MAX_TOKENS(T) UINT_FIELD("max_completion_tokens", T, max_completion_tokens, 1, ALGO_MAX_COMPLETION_TOKENS)
#define ROUND_TIMEOUT(T) {.key = "round_timeout_seconds", .decode = vsr__cfg_duration_ms, \
                          .offset = offsetof(T, round_timeout_ms)}

/* ---- budget --------------------------------------------------------------------------- */

static const cfg_field_t budget_fields[] = {
    UINT_FIELD("max_calls", vsr_algo_budget_conf_t, max_calls, 1, ALGO_MAX_CALLS),
    {.key = "deadline", .decode = vsr__cfg_duration_ms, .offset = offsetof(vsr_algo_budget_conf_t, deadline_ms)},
    UINT_FIELD("max_upstream_bytes", vsr_algo_budget_conf_t, max_upstream_bytes, 1, ALGO_MAX_UPSTREAM_BYTES),
};
static const cfg_spec_t budget_spec = {
    .size = sizeof(vsr_algo_budget_conf_t), .fields = budget_fields, .n_fields = VSR_ARRAY_LEN(budget_fields)};

/* ---- confidence (ref §3.3) ------------------------------------------------------------ */

#define CF(m) offsetof(vsr_algo_confidence_conf_t, m)
static const char *const confidence_methods[] = {"avg_logprob", "margin", "hybrid", "self_verify",
                                                 "automix_entailment", NULL};
static const char *const escalation_orders[] = {"size", "small_to_large", "declared", "cost", "automix", NULL};
static const char *const token_filters[] = {"tool_call_args", NULL};

/* hybrid_weights: members of the confidence block itself */
static const cfg_field_t hybrid_weight_fields[] = {
    {.key = "logprob_weight", .decode = vsr__cfg_double, .offset = CF(logprob_weight), .dmin = 0, .dmax = 1e6},
    {.key = "margin_weight", .decode = vsr__cfg_double, .offset = CF(margin_weight), .dmin = 0, .dmax = 1e6},
};
static const cfg_spec_t hybrid_weights_spec = {.size = sizeof(vsr_algo_confidence_conf_t),
                                               .fields = hybrid_weight_fields,
                                               .n_fields = VSR_ARRAY_LEN(hybrid_weight_fields)};

static const cfg_field_t confidence_fields[] = {
    {.key = "confidence_method", .decode = vsr__cfg_string, .offset = CF(method), .choices = confidence_methods},
    {.key = "threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = CF(threshold),
     .has_offset = CF(has_threshold), .dmin = 0, .dmax = 1},
    {.key = "escalation_order", .decode = vsr__cfg_string, .offset = CF(escalation_order),
     .choices = escalation_orders},
    {.key = "hybrid_weights", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &hybrid_weights_spec},
    {.key = "token_filter", .decode = vsr__cfg_string, .offset = CF(token_filter), .choices = token_filters},
    ON_ERROR(vsr_algo_confidence_conf_t),
    {.key = "verifier_server_url", .decode = decode_url, .offset = CF(verifier_server_url)},
    /* 0 is unset: the reference's 60 seconds */
    {.key = "verifier_timeout_seconds", .decode = vsr__cfg_duration_ms, .flags = CFG_ZERO_OK,
     .offset = CF(verifier_timeout_ms)},
    {.key = "cost_quality_tradeoff", .decode = vsr__cfg_double, .offset = CF(cost_quality_tradeoff), .dmin = 0,
     .dmax = 1},
};

static void finish_confidence(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                              size_t index)
{
    (void)index;
    vsr_algo_confidence_conf_t *c = obj;
    if (c->escalation_order != NULL && strcmp(c->escalation_order, "small_to_large") == 0)
        c->escalation_order = vsr__cfg_strdup(d, "size");
    if (strcmp(c->method, "hybrid") == 0 && c->logprob_weight == 0 && c->margin_weight == 0) {
        const cfg_node_t *w = vsr__cfg_seen(&(cfg_spec_t){.fields = confidence_fields,
                                                          .n_fields = VSR_ARRAY_LEN(confidence_fields)},
                                            seen, "hybrid_weights");
        vsr__cfg_node_error(d, w ? w : map, "hybrid_weights: at least one weight must be greater than 0");
    }
    if (strcmp(c->method, "automix_entailment") == 0 && c->verifier_server_url == NULL)
        vsr__cfg_node_error(d, map, "confidence_method \"automix_entailment\" needs verifier_server_url");
}

static const cfg_spec_t confidence_spec = {.size = sizeof(vsr_algo_confidence_conf_t),
                                           .fields = confidence_fields,
                                           .n_fields = VSR_ARRAY_LEN(confidence_fields),
                                           .finish = finish_confidence};

/* ---- ratings (ref §3.4) --------------------------------------------------------------- */

static const cfg_field_t ratings_fields[] = {
    UINT_FIELD("max_concurrent", vsr_algo_ratings_conf_t, max_concurrent, 1, ALGO_MAX_CONCURRENT),
    ON_ERROR(vsr_algo_ratings_conf_t),
};
static const cfg_spec_t ratings_spec = {
    .size = sizeof(vsr_algo_ratings_conf_t), .fields = ratings_fields, .n_fields = VSR_ARRAY_LEN(ratings_fields)};

/* ---- remom (ref §3.5) ------------------------------------------------------------------ */

#define RM(m) offsetof(vsr_algo_remom_conf_t, m)
static const char *const distributions[] = {"weighted", "equal", "round_robin", "first_only", NULL};
static const char *const compactions[] = {"full", "last_n_tokens", NULL};

/* breadth_schedule: 1..ALGO_MAX_ROUNDS rounds of 1..ALGO_MAX_BREADTH calls */
static int decode_breadth(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_algo_remom_conf_t *r = obj;
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "%s: expected a list of call counts, got %s", f->key, vsr__cfg_node_what(val));
        return -1;
    }
    if (val->n == 0 || val->n > ALGO_MAX_ROUNDS) {
        vsr__cfg_node_error(d, val, "%s must hold 1 to %d rounds, got %zu", f->key, ALGO_MAX_ROUNDS, val->n);
        return -1;
    }
    uint32_t *v = vsr_pool_alloc(d->pool, val->n * sizeof(uint32_t));
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *c = val->items[i];
        if (c->kind != CFG_NODE_SCALAR || c->type != CFG_INT) {
            vsr__cfg_node_error(d, c, "%s: expected an integer, got %s", f->key, vsr__cfg_node_what(c));
            rc = -1;
        } else if (!c->ival_ok || c->ival < 1 || c->ival > ALGO_MAX_BREADTH) {
            vsr__cfg_node_error(d, c, "%s: a round makes 1 to %d calls, got %s", f->key, ALGO_MAX_BREADTH, c->str);
            rc = -1;
        } else {
            v[i] = (uint32_t)c->ival;
        }
    }
    if (rc == 0) {
        r->breadth_schedule = v;
        r->n_breadth_schedule = val->n;
    }
    return rc;
}

static const cfg_field_t remom_fields[] = {
    {.key = "breadth_schedule", .decode = decode_breadth},
    {.key = "model_distribution", .decode = vsr__cfg_string, .offset = RM(model_distribution),
     .choices = distributions},
    {.key = "synthesis_model", .decode = decode_model, .offset = RM(synthesis_model)},
    {.key = "synthesis_template", .decode = decode_template, .offset = RM(synthesis_template)},
    {.key = "compaction_strategy", .decode = vsr__cfg_string, .offset = RM(compaction_strategy),
     .choices = compactions},
    UINT_FIELD("compaction_tokens", vsr_algo_remom_conf_t, compaction_tokens, 1, 1000000),
    {.key = "include_reasoning", .decode = vsr__cfg_bool, .offset = RM(include_reasoning)},
    {.key = "temperature", .decode = vsr__cfg_double, .offset = RM(temperature), .dmin = 0, .dmax = 2},
    MAX_TOKENS(vsr_algo_remom_conf_t),
    UINT_FIELD("max_concurrent", vsr_algo_remom_conf_t, max_concurrent, 1, ALGO_MAX_CONCURRENT),
    ROUND_TIMEOUT(vsr_algo_remom_conf_t),
    UINT_FIELD("min_successful_responses", vsr_algo_remom_conf_t, min_successful_responses, 1, ALGO_MAX_BREADTH),
    UINT_FIELD("max_responses_per_round", vsr_algo_remom_conf_t, max_responses_per_round, 1, ALGO_MAX_BREADTH),
    UINT_FIELD("shuffle_seed", vsr_algo_remom_conf_t, shuffle_seed, 0, INT64_MAX),
    ON_ERROR(vsr_algo_remom_conf_t),
    {.key = "include_intermediate_responses", .decode = vsr__cfg_bool, .offset = RM(include_intermediate_responses)},
};
static const cfg_spec_t remom_spec = {
    .size = sizeof(vsr_algo_remom_conf_t), .fields = remom_fields, .n_fields = VSR_ARRAY_LEN(remom_fields)};

/* ---- fusion (ref §3.6) ------------------------------------------------------------------ */

#define FU(m) offsetof(vsr_algo_fusion_conf_t, m)
#define FO(m) offsetof(vsr_algo_fusion_override_conf_t, m)
static const char *const quorum_policies[] = {"fail", "fallback", NULL}; /* index = quorum_fallback */
static const char *const analysis_modes[] = {"separate", "one_call", "none", NULL};

static const cfg_field_t override_fields[] = {
    {.key = "model", .decode = decode_model, .flags = CFG_REQUIRED, .offset = FO(model)},
    TEMPERATURE(vsr_algo_fusion_override_conf_t),
    MAX_TOKENS(vsr_algo_fusion_override_conf_t),
};
static const cfg_spec_t override_spec = {.size = sizeof(vsr_algo_fusion_override_conf_t),
                                         .fields = override_fields,
                                         .n_fields = VSR_ARRAY_LEN(override_fields)};

static const char *const grounding_references[] = {"hybrid", "context", "panel", NULL};
static const char *const grounding_policies[] = {"weight", "annotate", "filter", NULL};

/* grounding: `enabled` is a member of the fusion block; the rest configures
 * a scorer vsr does not have, so it is checked and not stored */
static int check_choice(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    (void)obj;
    int scratch;
    cfg_field_t g = *f;
    g.offset = 0;
    return vsr__cfg_choice(d, &g, val, &scratch);
}
static int check_double(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    (void)obj;
    double scratch;
    cfg_field_t g = *f;
    g.offset = 0;
    return vsr__cfg_double(d, &g, val, &scratch);
}
static int check_count(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    (void)obj;
    uint64_t scratch;
    cfg_field_t g = *f;
    g.offset = 0;
    g.size = sizeof(scratch);
    return vsr__cfg_uint(d, &g, val, &scratch);
}

static const cfg_field_t grounding_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = FU(grounding_enabled)},
    {.key = "reference", .decode = check_choice, .choices = grounding_references},
    {.key = "policy", .decode = check_choice, .choices = grounding_policies},
    {.key = "min_score", .decode = check_double, .dmin = 0, .dmax = 1},
    {.key = "min_keep", .decode = check_count, .min = 0, .max = ALGO_MAX_CONCURRENT},
    {.key = "nli_contradiction_penalty", .decode = check_double, .dmin = 0, .dmax = 1e6},
    {.key = "on_error", .decode = check_choice, .choices = on_error_choices},
};

static void finish_grounding(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    (void)map, (void)seen, (void)index;
    if (((vsr_algo_fusion_conf_t *)obj)->grounding_enabled)
        vsr__cfg_record_unimplemented(d, "enabled");
}

static const cfg_spec_t grounding_spec = {.size = sizeof(vsr_algo_fusion_conf_t),
                                          .fields = grounding_fields,
                                          .n_fields = VSR_ARRAY_LEN(grounding_fields),
                                          .finish = finish_grounding};

static const cfg_field_t fusion_fields[] = {
    {.key = "analysis_models", .decode = decode_models, .flags = CFG_NULL_OK, .offset = FU(analysis_models)},
    {.key = "model", .decode = decode_model, .offset = FU(model)},
    {.key = "analysis_overrides", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = FU(analysis_overrides),
     .count_offset = FU(n_analysis_overrides), .spec = &override_spec},
    UINT_FIELD("max_concurrent", vsr_algo_fusion_conf_t, max_concurrent, 1, ALGO_MAX_CONCURRENT),
    ROUND_TIMEOUT(vsr_algo_fusion_conf_t),
    TEMPERATURE(vsr_algo_fusion_conf_t),
    MAX_TOKENS(vsr_algo_fusion_conf_t),
    UINT_FIELD("min_successful_responses", vsr_algo_fusion_conf_t, min_successful_responses, 1,
               ALGO_MAX_CONCURRENT),
    {.key = "quorum_failure_policy", .decode = vsr__cfg_choice, .offset = FU(quorum_fallback),
     .choices = quorum_policies},
    {.key = "quorum_fallback_target", .decode = decode_model, .offset = FU(quorum_fallback_target)},
    {.key = "analysis_mode", .decode = vsr__cfg_string, .offset = FU(analysis_mode), .choices = analysis_modes},
    {.key = "analysis_template", .decode = decode_template, .offset = FU(analysis_template)},
    {.key = "synthesis_template", .decode = decode_template, .offset = FU(synthesis_template)},
    {.key = "judge_prompt_version", .decode = vsr__cfg_string, .offset = FU(judge_prompt_version)},
    {.key = "include_analysis", .decode = vsr__cfg_bool, .offset = FU(include_analysis)},
    {.key = "include_intermediate_responses", .decode = vsr__cfg_bool, .offset = FU(include_intermediate_responses)},
    ON_ERROR(vsr_algo_fusion_conf_t),
    {.key = "grounding", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &grounding_spec},
};

static void finish_fusion(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    (void)index;
    vsr_algo_fusion_conf_t *f = obj;
    cfg_spec_t s = {.fields = fusion_fields, .n_fields = VSR_ARRAY_LEN(fusion_fields)};
    const cfg_node_t *target = vsr__cfg_seen(&s, seen, "quorum_fallback_target");
    if (f->quorum_fallback && f->quorum_fallback_target == NULL && target == NULL)
        vsr__cfg_node_error(d, vsr__cfg_seen(&s, seen, "quorum_failure_policy"),
                            "quorum_failure_policy \"fallback\" needs quorum_fallback_target");
    if (!f->quorum_fallback && target != NULL)
        vsr__cfg_node_error(d, target, "quorum_fallback_target only applies with quorum_failure_policy: fallback");
    (void)map;
}

static const cfg_spec_t fusion_spec = {.size = sizeof(vsr_algo_fusion_conf_t),
                                       .fields = fusion_fields,
                                       .n_fields = VSR_ARRAY_LEN(fusion_fields),
                                       .finish = finish_fusion};

/* ---- workflows (ref §3.7) ------------------------------------------------------------- */

#define WF(m) offsetof(vsr_algo_workflows_conf_t, m)
#define ST(m) offsetof(vsr_algo_flow_step_conf_t, m)
static const char *const flow_modes[] = {"static", "dynamic", NULL}; /* index = dynamic */

static const cfg_field_t planner_fields[] = {
    {.key = "model", .decode = decode_model, .offset = WF(planner_model)},
    UINT_FIELD("max_completion_tokens", vsr_algo_workflows_conf_t, planner_max_completion_tokens, 1,
               ALGO_MAX_COMPLETION_TOKENS),
};
static const cfg_spec_t planner_spec = {
    .size = sizeof(vsr_algo_workflows_conf_t), .fields = planner_fields, .n_fields = VSR_ARRAY_LEN(planner_fields)};

static const cfg_field_t final_fields[] = {
    {.key = "model", .decode = decode_model, .offset = WF(final_model)},
    {.key = "prompt", .decode = decode_prompt, .offset = WF(final_prompt)},
};
static const cfg_spec_t final_spec = {
    .size = sizeof(vsr_algo_workflows_conf_t), .fields = final_fields, .n_fields = VSR_ARRAY_LEN(final_fields)};

static const cfg_field_t step_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = ST(name)},
    {.key = "model", .decode = decode_model, .offset = ST(model)},
    {.key = "models", .decode = decode_models, .offset = ST(models)},
    {.key = "prompt", .decode = decode_prompt, .flags = CFG_REQUIRED, .offset = ST(prompt)},
    {.key = "access_list", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = ST(access_list)},
};
static const cfg_spec_t step_spec = {
    .size = sizeof(vsr_algo_flow_step_conf_t), .fields = step_fields, .n_fields = VSR_ARRAY_LEN(step_fields)};

static const cfg_field_t workflows_fields[] = {
    {.key = "mode", .decode = vsr__cfg_choice, .offset = WF(dynamic), .choices = flow_modes},
    {.key = "template", .decode = vsr__cfg_string, .offset = WF(template_name)},
    {.key = "planner", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &planner_spec},
    UINT_FIELD("max_steps", vsr_algo_workflows_conf_t, max_steps, 1, ALGO_MAX_STEPS),
    UINT_FIELD("max_parallel", vsr_algo_workflows_conf_t, max_parallel, 1, ALGO_MAX_PARALLEL),
    MAX_TOKENS(vsr_algo_workflows_conf_t),
    ROUND_TIMEOUT(vsr_algo_workflows_conf_t),
    UINT_FIELD("min_successful_responses", vsr_algo_workflows_conf_t, min_successful_responses, 1,
               ALGO_MAX_PARALLEL),
    TEMPERATURE(vsr_algo_workflows_conf_t),
    {.key = "include_intermediate_responses", .decode = vsr__cfg_bool,
     .offset = WF(include_intermediate_responses)},
    ON_ERROR(vsr_algo_workflows_conf_t),
    {.key = "roles", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = WF(roles), .count_offset = WF(n_roles),
     .spec = &step_spec},
    {.key = "final", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &final_spec},
};

/* Roles: unique names, at most ALGO_MAX_STEPS, each access_list naming
 * earlier roles only (static mode runs them in order); roles belong to
 * static mode (dynamic mode's plan comes from the planner).  A role names
 * model or models (1 to VSR_FLOW_ROLE_MAX_MODELS), not both, and the roles'
 * calls are at most VSR_FLOW_MAX_CALLS. */
static void finish_workflows(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    (void)map, (void)index;
    vsr_algo_workflows_conf_t *w = obj;
    cfg_spec_t s = {.fields = workflows_fields, .n_fields = VSR_ARRAY_LEN(workflows_fields)};
    const cfg_node_t *roles = vsr__cfg_seen(&s, seen, "roles");
    if (roles == NULL || roles->kind != CFG_NODE_SEQ)
        return;
    if (w->dynamic && roles->n > 0) {
        vsr__cfg_node_error(d, roles, "roles only apply to mode \"static\" (a dynamic flow's steps come from its "
                                      "planner)");
        return;
    }
    if (roles->n > ALGO_MAX_STEPS) {
        vsr__cfg_node_error(d, roles, "roles: at most %d roles, got %zu", ALGO_MAX_STEPS, roles->n);
        return;
    }
    if (roles->n != w->n_roles)
        return;
    const char *keys[ALGO_MAX_STEPS];
    const cfg_node_t *nodes[ALGO_MAX_STEPS];
    for (size_t i = 0; i < w->n_roles; i++) {
        const cfg_node_t *nm = vsr__cfg_map_get(roles->items[i], "name");
        keys[i] = w->roles[i].name;
        nodes[i] = nm ? nm : roles->items[i];
    }
    vsr__cfg_check_unique(d, "role name", keys, nodes, w->n_roles);
    size_t calls = 0;
    for (size_t i = 0; i < w->n_roles; i++) {
        const vsr_algo_flow_step_conf_t *r = &w->roles[i];
        const cfg_node_t *ms = vsr__cfg_map_get(roles->items[i], "models");
        if (ms != NULL && r->model != NULL)
            vsr__cfg_node_error(d, ms, "a role takes model or models, not both");
        else if (ms != NULL && r->models.n == 0)
            vsr__cfg_node_error(d, ms, "models: a role's models name at least one model");
        else if (r->models.n > VSR_FLOW_ROLE_MAX_MODELS)
            vsr__cfg_node_error(d, ms, "models: at most %u models a role, got %zu", VSR_FLOW_ROLE_MAX_MODELS,
                                r->models.n);
        size_t n = r->models.n ? r->models.n : 1;
        if (calls <= VSR_FLOW_MAX_CALLS && calls + n > VSR_FLOW_MAX_CALLS)
            vsr__cfg_node_error(d, roles->items[i], "roles: at most %u model calls in all (each role's models "
                                "counted), this role makes %zu", VSR_FLOW_MAX_CALLS, calls + n);
        calls += n;
        const cfg_node_t *al = vsr__cfg_map_get(roles->items[i], "access_list");
        for (size_t j = 0; j < r->access_list.n; j++) {
            size_t k = 0;
            while (k < i && (keys[k] == NULL || strcmp(keys[k], r->access_list.items[j]) != 0))
                k++;
            if (k == i) {
                const cfg_node_t *at = al && al->kind == CFG_NODE_SEQ && j < al->n ? al->items[j] : roles->items[i];
                vsr__cfg_node_error(d, at, "access_list: %s is not an earlier role of this flow",
                                    q(d, r->access_list.items[j]));
            }
        }
    }
}

static const cfg_spec_t workflows_spec = {.size = sizeof(vsr_algo_workflows_conf_t),
                                          .fields = workflows_fields,
                                          .n_fields = VSR_ARRAY_LEN(workflows_fields),
                                          .finish = finish_workflows};

/* ---- latency_aware, multi_factor (ref §3.8: single-call selectors) ------------------- */

#define LA(m) offsetof(vsr_algo_latency_conf_t, m)
static const cfg_field_t latency_fields[] = {
    UINT_FIELD("tpot_percentile", vsr_algo_latency_conf_t, tpot_percentile, 1, 100),
    UINT_FIELD("ttft_percentile", vsr_algo_latency_conf_t, ttft_percentile, 1, 100),
    {.key = "description", .decode = vsr__cfg_string, .offset = LA(description)},
};
static const cfg_spec_t latency_spec = {
    .size = sizeof(vsr_algo_latency_conf_t), .fields = latency_fields, .n_fields = VSR_ARRAY_LEN(latency_fields)};

#define MF(m) offsetof(vsr_algo_multi_factor_conf_t, m)
#define MF_DOUBLE(k, m, hi) {.key = (k), .decode = vsr__cfg_double, .offset = MF(m), .dmin = 0, .dmax = (hi)}
static const char *const mf_factors[] = {"quality", "latency", "cost", "load", NULL};
static const char *const mf_no_candidates[] = {"cheapest", "first", "fail", NULL};
static const char *const mf_strategies[] = {"weighted", "lexicographic", NULL};
static const char *const mf_quality_indexes[] = {"model_cards", NULL};
static const char *const mf_on_missing[] = {"zero", "neutral", "exclude", NULL};

static const cfg_field_t mf_weight_fields[] = {
    MF_DOUBLE("quality", w_quality, 1e6), MF_DOUBLE("latency", w_latency, 1e6),
    MF_DOUBLE("cost", w_cost, 1e6),       MF_DOUBLE("load", w_load, 1e6),
};
static const cfg_spec_t mf_weights_spec = {.size = sizeof(vsr_algo_multi_factor_conf_t),
                                           .fields = mf_weight_fields,
                                           .n_fields = VSR_ARRAY_LEN(mf_weight_fields)};
static const cfg_field_t mf_slo_fields[] = {
    MF_DOUBLE("max_ttft_ms", max_ttft_ms, 1e9),
    MF_DOUBLE("max_tpot_ms", max_tpot_ms, 1e9),
    MF_DOUBLE("max_cost_per_1m", max_cost_per_1m, 1e9),
    UINT_FIELD("max_inflight", vsr_algo_multi_factor_conf_t, max_inflight, 0, 1000000000),
};
static const cfg_spec_t mf_slo_spec = {
    .size = sizeof(vsr_algo_multi_factor_conf_t), .fields = mf_slo_fields, .n_fields = VSR_ARRAY_LEN(mf_slo_fields)};
static const cfg_field_t mf_priority_fields[] = {
    {.key = "factor", .decode = vsr__cfg_string, .flags = CFG_REQUIRED,
     .offset = offsetof(vsr_algo_priority_conf_t, factor), .choices = mf_factors},
    {.key = "tolerance", .decode = vsr__cfg_double, .offset = offsetof(vsr_algo_priority_conf_t, tolerance),
     .dmin = 0, .dmax = 1},
};
static const cfg_spec_t mf_priority_spec = {.size = sizeof(vsr_algo_priority_conf_t),
                                            .fields = mf_priority_fields,
                                            .n_fields = VSR_ARRAY_LEN(mf_priority_fields)};
static const cfg_field_t mf_objective_fields[] = {
    {.key = "strategy", .decode = vsr__cfg_string, .offset = MF(strategy), .choices = mf_strategies},
    {.key = "priorities", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = MF(priorities),
     .count_offset = MF(n_priorities), .spec = &mf_priority_spec},
};
static const cfg_spec_t mf_objective_spec = {.size = sizeof(vsr_algo_multi_factor_conf_t),
                                             .fields = mf_objective_fields,
                                             .n_fields = VSR_ARRAY_LEN(mf_objective_fields)};
static const cfg_field_t mf_quality_fields[] = {
    {.key = "index", .decode = vsr__cfg_string, .offset = MF(quality_index), .choices = mf_quality_indexes},
    {.key = "min_score", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = MF(min_score),
     .has_offset = MF(has_min_score), .dmin = 0, .dmax = 1},
    MF_DOUBLE("min_coverage", min_coverage, 1),
    {.key = "on_missing", .decode = vsr__cfg_string, .offset = MF(on_missing), .choices = mf_on_missing},
};
static const cfg_spec_t mf_quality_spec = {.size = sizeof(vsr_algo_multi_factor_conf_t),
                                           .fields = mf_quality_fields,
                                           .n_fields = VSR_ARRAY_LEN(mf_quality_fields)};

static const cfg_field_t multi_factor_fields[] = {
    {.key = "weights", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &mf_weights_spec},
    {.key = "slo", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &mf_slo_spec},
    UINT_FIELD("latency_percentile", vsr_algo_multi_factor_conf_t, latency_percentile, 1, 100),
    {.key = "on_no_candidates", .decode = vsr__cfg_string, .offset = MF(on_no_candidates),
     .choices = mf_no_candidates},
    {.key = "objective", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &mf_objective_spec},
    {.key = "quality", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &mf_quality_spec},
};

/* The reference's NewMultiFactorSelector: negative weights are refused at
 * load here (the reference clamps them to 0), the rest normalised to sum 1;
 * none set: 0.25 each. */
static void finish_multi_factor(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                size_t index)
{
    (void)d, (void)map, (void)seen, (void)index;
    vsr_algo_multi_factor_conf_t *m = obj;
    double sum = m->w_quality + m->w_latency + m->w_cost + m->w_load;
    if (sum <= 0) {
        m->w_quality = m->w_latency = m->w_cost = m->w_load = 0.25;
        return;
    }
    m->w_quality /= sum;
    m->w_latency /= sum;
    m->w_cost /= sum;
    m->w_load /= sum;
}

static const cfg_spec_t multi_factor_spec = {.size = sizeof(vsr_algo_multi_factor_conf_t),
                                             .fields = multi_factor_fields,
                                             .n_fields = VSR_ARRAY_LEN(multi_factor_fields),
                                             .finish = finish_multi_factor};

#define DC(m) offsetof(vsr_algo_router_dc_conf_t, m)
static const cfg_field_t router_dc_fields[] = {
    {.key = "temperature", .decode = vsr__cfg_double, .offset = DC(temperature), .dmin = 1e-6, .dmax = 1e6},
    UINT_FIELD("dimension_size", vsr_algo_router_dc_conf_t, dimension_size, 1, 65536),
    {.key = "min_similarity", .decode = vsr__cfg_double, .offset = DC(min_similarity), .dmin = 0, .dmax = 1},
    {.key = "use_query_contrastive", .decode = vsr__cfg_bool, .offset = DC(use_query_contrastive)},
    {.key = "use_model_contrastive", .decode = vsr__cfg_bool, .offset = DC(use_model_contrastive)},
    {.key = "require_descriptions", .decode = vsr__cfg_bool, .offset = DC(require_descriptions)},
    {.key = "use_capabilities", .decode = vsr__cfg_bool, .offset = DC(use_capabilities)},
};
static const cfg_spec_t router_dc_spec = {
    .size = sizeof(vsr_algo_router_dc_conf_t), .fields = router_dc_fields, .n_fields = VSR_ARRAY_LEN(router_dc_fields)};

#define PS(m) offsetof(vsr_algo_prompt_conf_t, m)
static const cfg_field_t prompt_fields[] = {
    {.key = "model", .decode = decode_model, .flags = CFG_REQUIRED, .offset = PS(model)},
    {.key = "instructions", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = PS(instructions)},
    UINT_FIELD("timeout_seconds", vsr_algo_prompt_conf_t, timeout_seconds, 0, 3600),
};
static const cfg_spec_t prompt_spec = {
    .size = sizeof(vsr_algo_prompt_conf_t), .fields = prompt_fields, .n_fields = VSR_ARRAY_LEN(prompt_fields)};

/* ---- the algorithm block ------------------------------------------------------------- */

/* ref §1.11 (the newest catalogue): the type, its own config block, and its
 * kind when vsr runs it (-1: not supported yet) */
static const struct {
    const char *type, *block;
    int kind;
    const cfg_spec_t *spec;
    size_t offset; /* of its block's struct in vsr_algo_conf_t */
} algorithms[] = {
    {"static", NULL, VSR_ALGO_STATIC, NULL, 0},
    {"automix", "automix", -1, NULL, 0},
    {"confidence", "confidence", VSR_ALGO_CONFIDENCE, &confidence_spec, offsetof(vsr_algo_conf_t, u.confidence)},
    {"fusion", "fusion", VSR_ALGO_FUSION, &fusion_spec, offsetof(vsr_algo_conf_t, u.fusion)},
    {"hybrid", "hybrid", -1, NULL, 0},
    {"kmeans", NULL, -1, NULL, 0},
    {"knn", NULL, -1, NULL, 0},
    {"latency_aware", "latency_aware", VSR_ALGO_LATENCY_AWARE, &latency_spec,
     offsetof(vsr_algo_conf_t, u.latency_aware)},
    {"mlp", NULL, -1, NULL, 0},
    {"multi_factor", "multi_factor", VSR_ALGO_MULTI_FACTOR, &multi_factor_spec,
     offsetof(vsr_algo_conf_t, u.multi_factor)},
    {"ratings", "ratings", VSR_ALGO_RATINGS, &ratings_spec, offsetof(vsr_algo_conf_t, u.ratings)},
    {"remom", "remom", VSR_ALGO_REMOM, &remom_spec, offsetof(vsr_algo_conf_t, u.remom)},
    {"router_dc", "router_dc", VSR_ALGO_ROUTER_DC, &router_dc_spec, offsetof(vsr_algo_conf_t, u.router_dc)},
    {"svm", NULL, -1, NULL, 0},
    {"workflows", "workflows", VSR_ALGO_WORKFLOWS, &workflows_spec, offsetof(vsr_algo_conf_t, u.workflows)},
    {"prompt", "prompt", VSR_ALGO_PROMPT, &prompt_spec, offsetof(vsr_algo_conf_t, u.prompt)},
    /* a vsr extension: a request graph written in YAML (cfg_graph.c) */
    {"graph", "graph", VSR_ALGO_GRAPH, &vsr__cfg_graph_spec, offsetof(vsr_algo_conf_t, u.graph)},
};

static int algorithm_of_kind(vsr_algo_kind_t kind)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(algorithms); i++)
        if (algorithms[i].kind == (int)kind)
            return (int)i;
    VSR_BUG_ON(1);
    return 0;
}

const char *vsr__cfg_algo_block(vsr_algo_kind_t kind)
{
    return algorithms[algorithm_of_kind(kind)].block;
}

/* `type` was read before the table runs (it chooses the defaults). */
static int decode_known(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    (void)d, (void)f, (void)val, (void)obj;
    return 0;
}

/* A type's own block: decoded for the chosen type, refused for any other. */
static int decode_block(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_algo_conf_t *a = obj;
    int ti = algorithm_of_kind(a->kind);
    if (algorithms[ti].block == NULL || strcmp(algorithms[ti].block, f->key) != 0) {
        for (size_t i = 0; i < VSR_ARRAY_LEN(algorithms); i++)
            if (algorithms[i].block && strcmp(algorithms[i].block, f->key) == 0) {
                vsr__cfg_node_error(d, d->key ? d->key : val, "algorithm.%s only applies to type \"%s\"", f->key,
                                    algorithms[i].type);
                break;
            }
        return -1;
    }
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_NULL)
        return 0; /* the defaults */
    return vsr__cfg_decode_object(d, algorithms[ti].spec, val, (char *)a + algorithms[ti].offset, 0);
}

/* Records the value being decoded (the decoder's path ends in f->key) as
 * not implemented. */
static void record_this(cfg_decoder_t *d, const cfg_field_t *f)
{
    size_t n = strlen(f->key);
    VSR_BUG_ON(d->path_len < n);
    size_t parent = d->path_len - n - (d->path_len > n ? 1 : 0);
    vsr__cfg_path_pop(d, parent);
    vsr__cfg_record_unimplemented(d, f->key);
    vsr__cfg_path_push(d, f->key);
}

/* on_error and budget: a static choice makes no call that could fail or
 * overspend, so there they are recorded as not implemented */
static int decode_on_error(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_algo_conf_t *a = obj;
    if (a->kind == VSR_ALGO_STATIC) {
        if (!vsr__cfg_is_empty(val))
            record_this(d, f);
        return 0;
    }
    return vsr__cfg_string(d, f, val, obj);
}

static int is_selector(vsr_algo_kind_t k)
{
    return k == VSR_ALGO_LATENCY_AWARE || k == VSR_ALGO_MULTI_FACTOR || k == VSR_ALGO_ROUTER_DC ||
           k == VSR_ALGO_PROMPT;
}

/* budget: a selector, like static, makes one call */
static int decode_budget(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_algo_conf_t *a = obj;
    if (a->kind == VSR_ALGO_STATIC || is_selector(a->kind)) {
        if (!vsr__cfg_is_empty(val))
            record_this(d, f);
        return 0;
    }
    return vsr__cfg_object(d, f, val, obj);
}

/* minimum_candidates: read by the selectors; the other kinds do not rank */
static int decode_minimum_candidates(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_algo_conf_t *a = obj;
    if (!is_selector(a->kind)) {
        record_this(d, f);
        return 0;
    }
    return vsr__cfg_uint(d, f, val, obj);
}

static const char *const algo_on_error_choices[] = {"skip", "fail", "fallback", NULL};

#define BLOCK(k) {.key = (k), .decode = decode_block}
static const cfg_field_t algorithm_fields[] = {
    {.key = "type", .decode = decode_known, .flags = CFG_REQUIRED},
    {.key = "minimum_candidates", .decode = decode_minimum_candidates,
     .offset = offsetof(vsr_algo_conf_t, minimum_candidates), .size = sizeof(uint32_t), .min = 1, .max = 1000},
    {.key = "on_error", .decode = decode_on_error, .offset = offsetof(vsr_algo_conf_t, on_error),
     .choices = algo_on_error_choices},
    {.key = "budget", .decode = decode_budget, .flags = CFG_NULL_OK, .offset = offsetof(vsr_algo_conf_t, budget),
     .spec = &budget_spec},
    BLOCK("confidence"),    BLOCK("ratings"),      BLOCK("remom"),  BLOCK("fusion"),    BLOCK("workflows"),
    BLOCK("automix"),       BLOCK("hybrid"),       BLOCK("latency_aware"), BLOCK("multi_factor"),
    BLOCK("router_dc"),     BLOCK("prompt"),       BLOCK("graph"),
};

/* The reference's defaults of the chosen kind (ref §3.3–§3.7), before any field. */
static void init_algorithm(cfg_decoder_t *d, void *obj)
{
    vsr_algo_conf_t *a = obj;
    switch (a->kind) {
    case VSR_ALGO_STATIC:
        break;
    case VSR_ALGO_CONFIDENCE: {
        vsr_algo_confidence_conf_t *c = &a->u.confidence;
        c->method = vsr__cfg_strdup(d, "avg_logprob");
        c->escalation_order = vsr__cfg_strdup(d, "size");
        c->logprob_weight = 0.5;
        c->margin_weight = 0.5;
        c->cost_quality_tradeoff = 0.3;
        break;
    }
    case VSR_ALGO_RATINGS:
        break;
    case VSR_ALGO_REMOM: {
        vsr_algo_remom_conf_t *r = &a->u.remom;
        r->breadth_schedule = vsr_pool_alloc(d->pool, sizeof(uint32_t));
        r->breadth_schedule[0] = 4;
        r->n_breadth_schedule = 1;
        r->model_distribution = vsr__cfg_strdup(d, "weighted");
        r->compaction_strategy = vsr__cfg_strdup(d, "full");
        r->compaction_tokens = 1000;
        r->temperature = 1.0;
        r->shuffle_seed = 42;
        r->include_intermediate_responses = 1;
        break;
    }
    case VSR_ALGO_FUSION: {
        vsr_algo_fusion_conf_t *f = &a->u.fusion;
        f->analysis_mode = vsr__cfg_strdup(d, "separate");
        f->judge_prompt_version = vsr__cfg_strdup(d, "fusion-v1");
        break;
    }
    case VSR_ALGO_WORKFLOWS: {
        vsr_algo_workflows_conf_t *w = &a->u.workflows;
        w->template_name = vsr__cfg_strdup(d, "micro_agent");
        w->planner_max_completion_tokens = 2048;
        w->max_steps = 3;
        w->max_parallel = 2;
        w->include_intermediate_responses = 1;
        w->on_error_fail = 1;
        break;
    }
    case VSR_ALGO_GRAPH:
    case VSR_ALGO_LATENCY_AWARE:
        break;
    case VSR_ALGO_MULTI_FACTOR: {
        vsr_algo_multi_factor_conf_t *m = &a->u.multi_factor;
        m->latency_percentile = 95;
        m->on_no_candidates = vsr__cfg_strdup(d, "cheapest");
        m->strategy = vsr__cfg_strdup(d, "weighted");
        m->quality_index = vsr__cfg_strdup(d, "model_cards");
        m->on_missing = vsr__cfg_strdup(d, "zero");
        break;
    }
    case VSR_ALGO_PROMPT:
        break;
    case VSR_ALGO_ROUTER_DC: { /* the reference's DefaultRouterDCConfig */
        vsr_algo_router_dc_conf_t *r = &a->u.router_dc;
        r->temperature = 0.07;
        r->dimension_size = 768;
        r->min_similarity = 0.3;
        r->use_query_contrastive = r->use_model_contrastive = 1;
        r->use_capabilities = 1;
        break;
    }
    }
}

/* algorithm.on_error skip|fail is the default of the block's own on_error
 * (for a graph: of each parallel's); a graph needs its block. */
static void finish_algorithm(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    (void)index;
    vsr_algo_conf_t *a = obj;
    cfg_spec_t s = {.fields = algorithm_fields, .n_fields = VSR_ARRAY_LEN(algorithm_fields)};
    if (a->kind == VSR_ALGO_GRAPH) {
        const cfg_node_t *g = vsr__cfg_seen(&s, seen, "graph");
        if (g == NULL || (g->kind == CFG_NODE_SCALAR && g->type == CFG_NULL))
            vsr__cfg_node_error(d, map, "algorithm type \"graph\" needs algorithm.graph (its root node)");
        vsr__cfg_graph_defaults(&a->u.graph,
                                a->on_error && strcmp(a->on_error, "fallback") != 0 ? a->on_error : NULL);
        return;
    }
    if (a->kind == VSR_ALGO_PROMPT && a->u.prompt.model == NULL) /* the reference's validator */
        vsr__cfg_node_error(d, map, "algorithm type \"prompt\" needs algorithm.prompt (its model and instructions)");
    if (a->kind == VSR_ALGO_STATIC || a->on_error == NULL || strcmp(a->on_error, "fallback") == 0)
        return;
    const cfg_node_t *block = vsr__cfg_seen(&s, seen, vsr__cfg_algo_block(a->kind));
    if (block != NULL && vsr__cfg_map_get(block, "on_error") != NULL)
        return;
    int fail = strcmp(a->on_error, "fail") == 0;
    switch (a->kind) {
    case VSR_ALGO_STATIC:
        break;
    case VSR_ALGO_CONFIDENCE: a->u.confidence.on_error_fail = fail; break;
    case VSR_ALGO_RATINGS: a->u.ratings.on_error_fail = fail; break;
    case VSR_ALGO_REMOM: a->u.remom.on_error_fail = fail; break;
    case VSR_ALGO_FUSION: a->u.fusion.on_error_fail = fail; break;
    case VSR_ALGO_WORKFLOWS: a->u.workflows.on_error_fail = fail; break;
    case VSR_ALGO_GRAPH:
    case VSR_ALGO_LATENCY_AWARE:
    case VSR_ALGO_MULTI_FACTOR:
    case VSR_ALGO_ROUTER_DC:
    case VSR_ALGO_PROMPT: break; /* a selector reads algorithm.on_error itself */
    }
}

static const cfg_spec_t algorithm_spec = {.size = sizeof(vsr_algo_conf_t),
                                          .fields = algorithm_fields,
                                          .n_fields = VSR_ARRAY_LEN(algorithm_fields),
                                          .init = init_algorithm,
                                          .finish = finish_algorithm};

int vsr__cfg_decode_algorithm(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    (void)f;
    vsr_decision_conf_t *dec = obj;
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "expected a mapping, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    const cfg_node_t *type = vsr__cfg_map_get(val, "type");
    if (type == NULL) {
        vsr__cfg_node_error(d, val, "missing required key \"type\"");
        return -1;
    }
    cfg_field_t tf = {.key = "type"};
    const char *t = vsr__cfg_get_string(d, &tf, type);
    if (t == NULL)
        return -1;
    int ti = -1;
    for (size_t i = 0; i < VSR_ARRAY_LEN(algorithms); i++)
        if (strcmp(t, algorithms[i].type) == 0)
            ti = (int)i;
    if (ti < 0) {
        vsr__cfg_node_error(d, type, "unknown algorithm type %s", vsr__cfg_quote(d->pool, t, type->len));
        return -1;
    }
    if (algorithms[ti].kind < 0) {
        vsr__cfg_node_error(d, type, "algorithm type \"%s\" is not supported yet", algorithms[ti].type);
        return -1;
    }
    memset(&dec->algo, 0, sizeof(dec->algo));
    dec->algo.kind = (vsr_algo_kind_t)algorithms[ti].kind;
    dec->algorithm = vsr__cfg_strdup(d, algorithms[ti].type);
    return vsr__cfg_decode_object(d, &algorithm_spec, val, &dec->algo, 0);
}

/* ---- global.integrations ------------------------------------------------------------ */

#define LI(m) offsetof(vsr_looper_integration_conf_t, m)

static int decode_looper_headers(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_looper_integration_conf_t *l = obj;
    return vsr__cfg_header_map(d, f->key, "a header value", val, &l->headers, &l->n_headers);
}

/* `*_mb` sizes: whole MiB, 1..max, stored in bytes */
static int decode_mib(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    uint64_t mb = 0;
    cfg_field_t g = *f;
    g.offset = 0;
    g.size = sizeof(mb);
    if (vsr__cfg_uint(d, &g, val, &mb) != 0)
        return -1;
    *(uint64_t *)((char *)obj + f->offset) = mb * 1024 * 1024;
    return 0;
}

static const cfg_field_t slug_fields[] = {
    {.key = "model_names", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = 0},
};
static const cfg_spec_t slug_spec = {
    .size = sizeof(vsr_strlist_conf_t), .fields = slug_fields, .n_fields = VSR_ARRAY_LEN(slug_fields)};

static const char *const store_backends[] = {"file", "redis", NULL};

/* flow.state: persisted flow state; vsr keeps none, so a configured store is recorded */
static const cfg_field_t flow_state_fields[] = {
    {.key = "store_backend", .decode = vsr__cfg_string, .offset = LI(flow_state_store_backend),
     .choices = store_backends},
    {.key = "ttl_seconds", .decode = vsr__cfg_duration_ms, .offset = LI(flow_state_ttl_ms)},
    {.key = "file", .flags = CFG_UNIMPLEMENTED},
    {.key = "redis", .flags = CFG_UNIMPLEMENTED},
};

static void finish_flow_state(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                              size_t index)
{
    (void)map, (void)seen, (void)index;
    if (((vsr_looper_integration_conf_t *)obj)->flow_state_store_backend != NULL)
        vsr__cfg_record_unimplemented(d, "store_backend");
}

static const cfg_spec_t flow_state_spec = {.size = sizeof(vsr_looper_integration_conf_t),
                                           .fields = flow_state_fields,
                                           .n_fields = VSR_ARRAY_LEN(flow_state_fields),
                                           .finish = finish_flow_state};

static const cfg_field_t flow_fields[] = {
    {.key = "model_names", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = LI(flow_model_names)},
    {.key = "state", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &flow_state_spec},
};
static const cfg_spec_t flow_spec = {
    .size = sizeof(vsr_looper_integration_conf_t), .fields = flow_fields, .n_fields = VSR_ARRAY_LEN(flow_fields)};

/* endpoint: the reference's loopback address.  Empty is how its documents
 * say "none" (the graphs run in process here either way): absent. */
static int decode_looper_endpoint(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR && val->len == 0)
        return VSR_OK;
    return vsr__cfg_string(d, f, val, obj);
}

static const cfg_field_t looper_fields[] = {
    {.key = "endpoint", .decode = decode_looper_endpoint, .offset = LI(endpoint)},
    {.key = "timeout_seconds", .decode = vsr__cfg_duration_ms, .offset = LI(timeout_ms)},
    UINT_FIELD("retry_count", vsr_looper_integration_conf_t, retry_count, 0, 5),
    {.key = "headers", .decode = decode_looper_headers, .flags = CFG_NULL_OK},
    {.key = "max_response_bytes_mb", .decode = decode_mib, .offset = LI(max_response_bytes), .min = 1, .max = 1024},
    UINT_FIELD("grpc_max_msg_size_mb", vsr_looper_integration_conf_t, grpc_max_msg_size_mb, 1, 1024),
    {.key = "remom", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = LI(remom_model_names),
     .spec = &slug_spec},
    {.key = "fusion", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = LI(fusion_model_names),
     .spec = &slug_spec},
    {.key = "flow", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &flow_spec},
};

static void init_looper(cfg_decoder_t *d, void *obj)
{
    (void)d;
    vsr_looper_integration_conf_t *l = obj;
    l->timeout_ms = VSR_LOOPER_DEFAULT_TIMEOUT_MS;
    l->max_response_bytes = VSR_LOOPER_DEFAULT_MAX_RESPONSE_BYTES;
    l->grpc_max_msg_size_mb = 16;
}

static const cfg_spec_t looper_spec = {.size = sizeof(vsr_looper_integration_conf_t),
                                       .fields = looper_fields,
                                       .n_fields = VSR_ARRAY_LEN(looper_fields),
                                       .init = init_looper};

static const cfg_field_t integrations_fields[] = {
    {.key = "tools", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = offsetof(vsr_config_t, tools),
     .spec = &vsr__cfg_tools_integration_spec},
    {.key = "looper", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = offsetof(vsr_config_t, looper),
     .spec = &looper_spec},
};

const cfg_spec_t vsr__cfg_integrations_spec = {.size = sizeof(vsr_config_t),
                                               .fields = integrations_fields,
                                               .n_fields = VSR_ARRAY_LEN(integrations_fields)};

void vsr__cfg_looper_defaults(vsr_looper_integration_conf_t *l)
{
    init_looper(NULL, l);
}
