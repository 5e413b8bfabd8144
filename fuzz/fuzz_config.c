/* fuzz_config.c — arbitrary bytes as a v0.3 document.
 *
 * Beyond "no crash, no leak" (the sanitizers' job) it checks the contract:
 * a success yields a config whose invariants hold; a failure yields no
 * config and at least one well-formed "FILE:LINE:COL: message" line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_config: invariant broken: %s\n", what);
        abort();
    }
}

static int has_signal(const vsr_recipe_conf_t *r, const char *type, const char *name)
{
#define FIND(arr, n)                              \
    for (size_t i = 0; i < (n); i++)              \
        if (strcmp((arr)[i].name, name) == 0)     \
            return 1;                             \
    return 0
    if (strcmp(type, "keyword") == 0) {
        FIND(r->signals.keywords, r->signals.n_keywords);
    } else if (strcmp(type, "context") == 0) {
        FIND(r->signals.context, r->signals.n_context);
    } else if (strcmp(type, "structure") == 0) {
        FIND(r->signals.structure, r->signals.n_structure);
    } else if (strcmp(type, "conversation") == 0) {
        FIND(r->signals.conversation, r->signals.n_conversation);
    } else if (strcmp(type, "language") == 0) {
        FIND(r->signals.language, r->signals.n_language);
    } else if (strcmp(type, "embedding") == 0) {
        FIND(r->signals.embeddings, r->signals.n_embeddings);
    } else if (strcmp(type, "metadata") == 0) {
        FIND(r->signals.metadata, r->signals.n_metadata);
    } else if (strcmp(type, "event") == 0) {
        FIND(r->signals.events, r->signals.n_events);
    } else if (strcmp(type, "projection") == 0) {
        for (size_t m = 0; m < r->projections.n_mappings; m++)
            for (size_t o = 0; o < r->projections.mappings[m].n_outputs; o++)
                if (strcmp(r->projections.mappings[m].outputs[o].name, name) == 0)
                    return 1;
        return 0;
    } else if (strcmp(type, "domain") == 0) {
        FIND(r->signals.domains, r->signals.n_domains);
    } else if (strcmp(type, "jailbreak") == 0) {
        FIND(r->signals.jailbreak, r->signals.n_jailbreak);
    } else if (strcmp(type, "pii") == 0) {
        FIND(r->signals.pii, r->signals.n_pii);
    } else if (strcmp(type, "preference") == 0) {
        FIND(r->signals.preferences, r->signals.n_preferences);
    } else if (strcmp(type, "reask") == 0) {
        FIND(r->signals.reasks, r->signals.n_reasks);
    } else if (strcmp(type, "fact_check") == 0) {
        FIND(r->signals.fact_check, r->signals.n_fact_check);
    } else if (strcmp(type, "user_feedback") == 0) {
        FIND(r->signals.user_feedbacks, r->signals.n_user_feedbacks);
    } else if (strcmp(type, "modality") == 0) {
        FIND(r->signals.modality, r->signals.n_modality);
    } else if (strcmp(type, "kb") == 0) {
        FIND(r->signals.kb, r->signals.n_kb);
    } else if (strcmp(type, "complexity") == 0) {
        /* "<signal>:easy|medium|hard" */
        const char *colon = strrchr(name, ':');
        if (colon == NULL || (strcmp(colon + 1, "easy") && strcmp(colon + 1, "medium") && strcmp(colon + 1, "hard")))
            return 0;
        for (size_t i = 0; i < r->signals.n_complexity; i++)
            if (strlen(r->signals.complexity[i].name) == (size_t)(colon - name) &&
                strncmp(r->signals.complexity[i].name, name, (size_t)(colon - name)) == 0)
                return 1;
        return 0;
    } else if (strcmp(type, "authz") == 0) {
        /* a binding's name or a binding's role */
        for (size_t i = 0; i < r->signals.n_role_bindings; i++)
            if (r->signals.role_bindings[i].role && strcmp(r->signals.role_bindings[i].role, name) == 0)
                return 1;
        FIND(r->signals.role_bindings, r->signals.n_role_bindings);
    }
#undef FIND
    return 0;
}

static void check_rule(const vsr_recipe_conf_t *r, const vsr_rule_conf_t *n, int depth, int root)
{
    check(depth <= 33, "rule depth");
    check(n->line >= 1 && n->col >= 1, "rule position");
    switch (n->kind) {
    case VSR_RULE_LEAF:
        check(n->type != NULL && n->name != NULL && n->n_children == 0, "leaf");
        check(has_signal(r, n->type, n->name), "leaf resolves in its recipe");
        return;
    case VSR_RULE_NOT:
        check(n->n_children == 1, "NOT has one child");
        break;
    case VSR_RULE_OR:
        check(n->n_children >= 1, "OR has children");
        break;
    case VSR_RULE_AND:
        check(n->n_children >= 1 || root, "only a root AND may be empty");
        break;
    default:
        check(0, "rule kind");
    }
    for (size_t i = 0; i < n->n_children; i++)
        check_rule(r, &n->children[i], depth + 1, 0);
}

static int restricted(const char *h)
{
    return strncasecmp(h, "x-envoy-", 8) == 0 || strcasecmp(h, "host") == 0;
}

static void check_plugin(const vsr_plugin_conf_t *p)
{
    check(p->type != NULL, "plugin type");
    switch (p->kind) {
    case VSR_PLUGIN_SYSTEM_PROMPT:
        check(p->enabled == p->u.system_prompt.enabled, "system_prompt enabled");
        check(!p->enabled || p->u.system_prompt.system_prompt != NULL, "system prompt text");
        break;
    case VSR_PLUGIN_HEADER_MUTATION:
        for (size_t i = 0; i < p->u.header_mutation.n_add; i++)
            check(!restricted(p->u.header_mutation.add[i].name), "restricted header added");
        for (size_t i = 0; i < p->u.header_mutation.n_update; i++)
            check(!restricted(p->u.header_mutation.update[i].name), "restricted header updated");
        for (size_t i = 0; i < p->u.header_mutation.delete_.n; i++)
            check(!restricted(p->u.header_mutation.delete_.items[i]), "restricted header deleted");
        break;
    case VSR_PLUGIN_FAST_RESPONSE:
        check(!p->enabled || p->u.fast_response.message != NULL, "fast response message");
        break;
    case VSR_PLUGIN_REQUEST_PARAMS:
        break;
    case VSR_PLUGIN_TOOLS:
        check(p->enabled == p->u.tools.enabled, "tools enabled");
        break;
    case VSR_PLUGIN_CONTEXT_COMPRESSION:
        check(p->enabled == p->u.context_compression.enabled, "context_compression enabled");
        break;
    case VSR_PLUGIN_RESPONSE_CACHE: {
        const vsr_plugin_response_cache_conf_t *rc = &p->u.response_cache;
        check(p->enabled == rc->enabled, "response_cache enabled");
        check(rc->mode >= VSR_RC_SEMANTIC && rc->mode <= VSR_RC_EXACT_THEN_SEMANTIC, "response_cache mode");
        check(!rc->has_similarity_threshold || (rc->similarity_threshold >= 0 && rc->similarity_threshold <= 1),
              "response_cache threshold");
        check(!rc->has_ttl_seconds || rc->ttl_seconds >= 1, "response_cache ttl");
        break;
    }
    case VSR_PLUGIN_ROUTER_REPLAY: {
        const vsr_plugin_router_replay_conf_t *rr = &p->u.router_replay;
        check(p->enabled == rr->enabled, "router_replay enabled");
        check(rr->max_records >= 1 && rr->max_records <= 1000000, "router_replay max_records");
        check(rr->max_body_bytes <= 16u << 20, "router_replay max_body_bytes");
        check(rr->max_tool_trace_bytes <= 1u << 20 && rr->max_tool_trace_steps <= 1024, "router_replay tool trace");
        break;
    }
    case VSR_PLUGIN_RAG: {
        const vsr_plugin_rag_conf_t *r = p->u.rag;
        check(r != NULL && p->enabled == r->enabled, "rag enabled");
        check(r->top_k >= 1 && r->max_context_length >= 1 && r->cache_ttl_ms >= 1000, "rag bounds");
        check(!r->enabled || (r->primary.kind >= VSR_RAG_EXTERNAL_API && r->primary.kind <= VSR_RAG_OPENAI &&
                              r->primary.model.n_backends == 1 && r->primary.path && r->primary.path[0] == '/' &&
                              r->primary.max_response_bytes >= 1024 && r->primary.timeout_ms >= 1000),
              "rag backend");
        check(!r->has_fallback || r->fallback.model.n_backends == 1, "rag fallback");
        break;
    }
    case VSR_PLUGIN_UNSUPPORTED:
        check(!p->enabled, "an unsupported plugin is kept only when disabled");
        break;
    default:
        check(0, "plugin kind");
    }
}

static void check_fallback(const vsr_fallback_conf_t *f)
{
    check(f->present && f->version == 1, "fallback version");
    check(f->total_timeout_ms == 0 || f->per_attempt_timeout_ms <= f->total_timeout_ms, "per-attempt <= total");
    check(!f->enabled || f->max_attempts >= 1, "attempts when enabled");
    for (size_t i = 0; i < f->n_retryable_status_codes; i++)
        check(f->retryable_status_codes[i] >= 100 && f->retryable_status_codes[i] <= 599, "fallback codes");
}

/* A loaded algorithm: its kind matches its name, its block's values are in
 * their ranges and every model it names is a provider model or a modelRef. */
static int algo_model_ok(const vsr_config_t *c, const vsr_decision_conf_t *d, const char *name)
{
    if (name == NULL || vsr_config_find_model(c, vsr_slice_cstr(name)) != NULL)
        return 1;
    for (size_t i = 0; i < d->n_model_refs; i++)
        if (strcmp(d->model_refs[i].model, name) == 0 ||
            (d->model_refs[i].lora_name && strcmp(d->model_refs[i].lora_name, name) == 0))
            return 1;
    return 0;
}

/* A loaded request graph, walked from the root through every subgraph node
 * (so a cycle or a missing resolution would not stay hidden): depth and
 * node count within their bounds, each node's fields within theirs. */
typedef struct {
    const vsr_config_t *c;
    const vsr_decision_conf_t *d;
    const vsr_graph_conf_t *g;
    size_t nodes, calls;
} graph_walk_t;

static int is_subgraph_node(const vsr_graph_conf_t *g, const vsr_gnode_conf_t *n)
{
    for (size_t i = 0; i < g->n_subgraphs; i++)
        if (n == &g->subgraphs[i].node)
            return 1;
    return 0;
}

static void check_gnode(graph_walk_t *w, const vsr_gnode_conf_t *n, unsigned depth)
{
    check(depth <= VSR_GRAPH_MAX_DEPTH, "graph depth");
    check(++w->nodes <= VSR_GRAPH_MAX_NODES, "graph nodes");
    check(n->name != NULL && n->name[0] != '\0', "graph node name");
    check(n->line >= 1 && n->col >= 1, "graph node position");
    check(n->kind == VSR_GNODE_SUBGRAPH ? n->resolved != NULL && n->subgraph != NULL &&
                                              is_subgraph_node(w->g, n->resolved)
                                        : n->resolved == NULL,
          "graph subgraph resolved");
    check(n->stream == 0 || n->kind == VSR_GNODE_CALL, "graph stream only on a call");
    switch (n->kind) {
    case VSR_GNODE_SEQ:
        check(n->n_kids >= 1, "graph seq");
        break;
    case VSR_GNODE_CALL:
    case VSR_GNODE_PARALLEL: {
        w->calls++;
        check(n->n_kids == 0 && n->models.n <= VSR_GRAPH_MAX_FANOUT, "graph hop");
        check(n->models.n > 0 || w->d->n_model_refs > 0, "graph hop has models");
        for (size_t i = 0; i < n->models.n; i++)
            check(algo_model_ok(w->c, w->d, n->models.items[i]), "graph model");
        check(!n->has_temperature || (n->temperature >= 0 && n->temperature <= 2), "graph temperature");
        check(n->top_logprobs <= 20 && (n->top_logprobs == 0 || n->logprobs), "graph top_logprobs");
        uint64_t calls = n->count ? n->count : n->models.n ? n->models.n : w->d->n_model_refs;
        if (n->kind == VSR_GNODE_CALL)
            check(n->count == 0 && n->first_k == 0 && n->min_success == 0 && n->max_concurrency == 0, "graph call");
        else
            check(calls <= VSR_GRAPH_MAX_FANOUT && n->first_k <= calls && n->min_success <= calls &&
                      n->max_concurrency <= VSR_GRAPH_MAX_FANOUT && (n->on_error_fail == 0 || n->on_error_fail == 1),
                  "graph parallel");
        break;
    }
    case VSR_GNODE_LOOP:
        check(n->n_kids == 1 && n->max_rounds >= 1 && n->max_rounds <= VSR_GRAPH_MAX_ROUNDS, "graph loop");
        break;
    case VSR_GNODE_BRANCH:
        check((n->n_kids == 1 || n->n_kids == 2) && n->until.kind != VSR_GPRED_NONE, "graph branch");
        break;
    case VSR_GNODE_TRANSFORM:
        check(n->n_kids == 0 && (n->system_prompt || n->prompt || n->append), "graph transform");
        break;
    case VSR_GNODE_RESPOND:
        check(n->n_kids == 0 && n->aggregate != NULL, "graph respond");
        break;
    case VSR_GNODE_SUBGRAPH:
        check(n->n_kids == 0, "graph subgraph node");
        break;
    default:
        check(0, "graph node kind");
    }
    const vsr_gpred_conf_t *p = &n->until;
    if (p->kind == VSR_GPRED_CONFIDENCE_GTE)
        check(p->value >= 0 && p->value <= 1, "graph confidence_gte");
    if (p->kind == VSR_GPRED_ROUNDS_GTE)
        check(p->value >= 1 && p->value <= VSR_GRAPH_MAX_ROUNDS, "graph rounds_gte");
    if (p->kind == VSR_GPRED_SIGNAL)
        check(p->signal_type != NULL && p->signal_name != NULL, "graph signal predicate");
    if (n->kind == VSR_GNODE_SUBGRAPH)
        check_gnode(w, n->resolved, depth + 1);
    for (size_t i = 0; i < n->n_kids; i++)
        check_gnode(w, &n->kids[i], depth + 1);
}

static void check_graph(const vsr_config_t *c, const vsr_decision_conf_t *d)
{
    const vsr_graph_conf_t *g = &d->algo.u.graph;
    graph_walk_t w = {c, d, g, 0, 0};
    check_gnode(&w, &g->root, 1);
    check(w.calls >= 1, "graph has a call");
    for (size_t i = 0; i < g->n_subgraphs; i++) {
        check(g->subgraphs[i].name != NULL, "subgraph name");
        for (size_t j = 0; j < i; j++)
            check(strcmp(g->subgraphs[i].name, g->subgraphs[j].name) != 0, "subgraph names unique");
        graph_walk_t s = {c, d, g, 0, 0};
        check_gnode(&s, &g->subgraphs[i].node, 1);
    }
}

static void check_algo(const vsr_config_t *c, const vsr_decision_conf_t *d)
{
    static const char *const names[] = {"static", "confidence", "ratings", "remom", "fusion", "workflows", "graph",
                                        "latency_aware", "multi_factor", "router_dc", "prompt"};
    const vsr_algo_conf_t *a = &d->algo;
    check((unsigned)a->kind < VSR_ARRAY_LEN(names), "algorithm kind");
    check(d->algorithm == NULL ? a->kind == VSR_ALGO_STATIC : strcmp(d->algorithm, names[a->kind]) == 0,
          "algorithm");
    check(a->budget.max_calls <= 10000, "budget max_calls");
    switch (a->kind) {
    case VSR_ALGO_STATIC:
        break;
    case VSR_ALGO_CONFIDENCE: {
        const vsr_algo_confidence_conf_t *x = &a->u.confidence;
        check(x->method != NULL && x->escalation_order != NULL, "confidence defaults");
        check(strcmp(x->escalation_order, "small_to_large") != 0, "escalation order normalised");
        check(x->threshold >= 0 && x->threshold <= 1, "confidence threshold");
        check(x->logprob_weight >= 0 && x->margin_weight >= 0, "hybrid weights");
        check(x->cost_quality_tradeoff >= 0 && x->cost_quality_tradeoff <= 1, "cost_quality_tradeoff");
        check(strcmp(x->method, "automix_entailment") != 0 || x->verifier_server_url != NULL, "verifier url");
        break;
    }
    case VSR_ALGO_RATINGS:
        check(a->u.ratings.max_concurrent <= 256, "ratings max_concurrent");
        break;
    case VSR_ALGO_PROMPT:
        check(a->u.prompt.model != NULL && a->u.prompt.instructions != NULL, "prompt model");
        break;
    case VSR_ALGO_ROUTER_DC:
        check(a->u.router_dc.temperature > 0 && a->u.router_dc.min_similarity >= 0 &&
                  a->u.router_dc.min_similarity <= 1, "router_dc");
        break;
    case VSR_ALGO_LATENCY_AWARE:
        check(a->u.latency_aware.tpot_percentile <= 100 && a->u.latency_aware.ttft_percentile <= 100, "percentiles");
        break;
    case VSR_ALGO_MULTI_FACTOR: {
        const vsr_algo_multi_factor_conf_t *x = &a->u.multi_factor;
        double sum = x->w_quality + x->w_latency + x->w_cost + x->w_load;
        check(sum > 0.999 && sum < 1.001, "multi_factor weights normalised");
        check(x->latency_percentile >= 1 && x->latency_percentile <= 100 && x->on_no_candidates != NULL,
              "multi_factor defaults");
        break;
    }
    case VSR_ALGO_REMOM: {
        const vsr_algo_remom_conf_t *x = &a->u.remom;
        check(x->n_breadth_schedule >= 1 && x->n_breadth_schedule <= 16, "breadth rounds");
        for (size_t i = 0; i < x->n_breadth_schedule; i++)
            check(x->breadth_schedule[i] >= 1 && x->breadth_schedule[i] <= 64, "breadth calls");
        check(x->model_distribution != NULL && x->compaction_strategy != NULL, "remom defaults");
        check(algo_model_ok(c, d, x->synthesis_model), "remom synthesis model");
        break;
    }
    case VSR_ALGO_FUSION: {
        const vsr_algo_fusion_conf_t *x = &a->u.fusion;
        for (size_t i = 0; i < x->analysis_models.n; i++)
            check(algo_model_ok(c, d, x->analysis_models.items[i]), "fusion panel model");
        check(algo_model_ok(c, d, x->model), "fusion judge");
        for (size_t i = 0; i < x->n_analysis_overrides; i++)
            check(algo_model_ok(c, d, x->analysis_overrides[i].model), "fusion override model");
        check(!x->quorum_fallback || (x->quorum_fallback_target != NULL &&
                                      vsr_config_find_model(c, vsr_slice_cstr(x->quorum_fallback_target)) != NULL),
              "quorum fallback target");
        check(x->analysis_mode != NULL && x->judge_prompt_version != NULL, "fusion defaults");
        check(x->min_successful_responses <= (x->analysis_models.n ? x->analysis_models.n : d->n_model_refs),
              "fusion quorum capped");
        break;
    }
    case VSR_ALGO_WORKFLOWS: {
        const vsr_algo_workflows_conf_t *x = &a->u.workflows;
        check(x->max_steps >= 1 && x->max_steps <= 32 && x->max_parallel >= 1 && x->max_parallel <= 64, "flow bounds");
        check(x->n_roles <= 32 && (x->n_roles == 0 || !x->dynamic), "flow roles");
        for (size_t i = 0; i < x->n_roles; i++) {
            check(x->roles[i].name != NULL && x->roles[i].prompt != NULL, "flow role");
            check(algo_model_ok(c, d, x->roles[i].model), "flow role model");
        }
        check(algo_model_ok(c, d, x->planner_model) && algo_model_ok(c, d, x->final_model), "flow models");
        break;
    }
    case VSR_ALGO_GRAPH:
        check_graph(c, d);
        break;
    }
}

static void check_recipe(const vsr_config_t *c, const vsr_recipe_conf_t *r)
{
    check(r->name != NULL, "recipe name");
    check(vsr_config_find_recipe(c, vsr_slice_cstr(r->name)) == r, "find_recipe");
    vsr_fallback_conf_t eff;
    vsr_config_effective_fallback(c, r, NULL, &eff);
    check_fallback(&eff);
    for (size_t i = 0; i < r->n_decisions; i++) {
        const vsr_decision_conf_t *d = &r->decisions[i];
        check(d->name != NULL, "decision name");
        if (d->rules != NULL)
            check_rule(r, d->rules, 0, 1);
        for (size_t j = 0; j < d->n_model_refs; j++) {
            check(vsr_config_find_model(c, vsr_slice_cstr(d->model_refs[j].model)) != NULL, "modelRef resolves");
            check(d->model_refs[j].lora_name == NULL || d->model_refs[j].lora_name[0] != '\0', "lora name");
        }
        check_algo(c, d);
        for (size_t j = 0; j < d->n_plugins; j++)
            check_plugin(&d->plugins[j]);
        check(!d->has_reliability || d->reliability.retry_count <= 5, "decision retry_count");
        vsr_config_effective_fallback(c, r, d, &eff);
        check_fallback(&eff);
    }
}

static void check_config(const vsr_config_t *c)
{
    check(c->version != NULL && strcmp(c->version, "v0.3") == 0, "version");
    check(c->n_listeners >= 1, "listeners");
    for (size_t i = 0; i < c->n_listeners; i++) {
        const vsr_listener_conf_t *l = &c->listeners[i];
        check(l->name != NULL && l->name[0] != '\0', "listener name");
        check(l->address != NULL && l->port != 0, "listener address");
        check(l->timeout_ms > 0 && l->max_body_bytes > 0 && l->max_connections > 0, "listener limits");
        check((l->tls_cert_file == NULL) == (l->tls_key_file == NULL), "tls pair");
        for (size_t j = 0; j < l->identity_trusted_peers.n; j++)
            check(strchr(l->identity_trusted_peers.items[j], '/') != NULL, "canonical trusted peer");
    }
    /* providers.models is optional (the loader warns when it is empty) */
    for (size_t i = 0; i < c->n_models; i++) {
        const vsr_model_conf_t *m = &c->models[i];
        check(m->name != NULL && m->provider_model_id != NULL, "model names");
        check(m->api_format != NULL &&
                  (strcmp(m->api_format, "openai") == 0 || strcmp(m->api_format, "anthropic") == 0),
              "api_format");
        check(m->messages_api == (strcmp(m->api_format, "anthropic") == 0), "api_format compiled");
        check(vsr_config_find_model(c, vsr_slice_cstr(m->name)) != NULL, "find_model");
        check(m->n_backends >= 1 || m->backends == NULL, "backends"); /* 0: a gateway-routed model */
        check(!m->has_reliability || (m->reliability.retry_count <= 5 && m->reliability.max_ejection_percent <= 100),
              "reliability ranges");
        for (size_t j = 0; j < m->n_backends; j++) {
            const vsr_backend_conf_t *b = &m->backends[j];
            check(b->name != NULL && b->host != NULL && b->authority != NULL && b->path_prefix != NULL,
                  "backend strings");
            check(b->port != 0 && b->weight >= 1, "backend values");
            check(b->api_key == NULL || b->resolved_api_key == b->api_key, "literal key");
            /* an unset or empty variable is no key (a warning at load) */
            check(b->api_key_env == NULL || b->resolved_api_key == NULL || b->resolved_api_key[0] != '\0',
                  "key from the environment");
        }
    }
    check(c->n_models == 0 || vsr_config_default_model(c) != NULL, "default model");
    check(c->default_model == NULL || vsr_config_find_model(c, vsr_slice_cstr(c->default_model)) != NULL,
          "default model resolves");
    check(c->default_lora == NULL || (c->default_model != NULL && c->default_lora[0] != '\0'), "default LoRA");
    check(!c->listeners_defaulted || (c->n_listeners == 1 && c->listeners[0].port == VSR_DEFAULT_LISTENER_PORT),
          "default listener");
    check(c->n_recipes >= 1 && strcmp(c->recipes[0].name, "default") == 0, "recipe default");
    for (size_t i = 0; i < c->n_recipes; i++)
        check_recipe(c, &c->recipes[i]);
    for (size_t i = 0; i < c->n_entrypoints; i++) {
        const vsr_entrypoint_conf_t *e = &c->entrypoints[i];
        check(e->model_names.n >= 1 && e->recipe != NULL && e->resolved != NULL, "entrypoint");
        check(strcmp(e->resolved->name, e->recipe) == 0, "entrypoint resolves");
    }
    check(c->auto_model_names.n >= 1, "auto names");
    for (size_t i = 0; i < c->auto_model_names.n; i++) {
        const char *a = c->auto_model_names.items[i];
        size_t len = strlen(a);
        check(len > 0 && a[0] != ' ' && a[len - 1] != ' ', "trimmed auto names");
    }
    check(c->management_address != NULL && c->authz_user_id_header != NULL && c->authz_user_groups_header != NULL,
          "global defaults");
    for (size_t i = 0; i < c->n_unimplemented; i++)
        check(c->unimplemented[i] != NULL, "unimplemented");
}

/* Every line: "fuzz.yaml:LINE:COL: message". */
static void check_errors(const vsr_buf_t *err)
{
    check(err->len > 0 && err->data[err->len - 1] == '\n', "errors reported");
    const char *p = err->data, *end = err->data + err->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        unsigned line, col;
        int n = 0;
        check(nl != NULL, "newline-terminated");
        check(sscanf(p, "fuzz.yaml:%u:%u: %n", &line, &col, &n) == 2 && n > 0 && line >= 1 && col >= 1,
              "error line format");
        p = nl + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("fuzz.yaml", (const char *)data, size, &c, &err);
    const int rc_load = rc;
    if (rc == VSR_OK) {
        check(c != NULL && err.len == 0, "success");
        check_config(c);
        vsr_config_free(c);
    } else {
        check(rc == VSR_ERR_INVALID && c == NULL, "failure");
        check_errors(&err);
    }
    /* the vetting of a submitted document, against itself as the active one
     * (every placeholder has a counterpart, unless the counterpart is one) */
    vsr_buf_t resolved, canon, verr;
    vsr_buf_init(&resolved, 0);
    vsr_buf_init(&canon, 0);
    vsr_buf_init(&verr, 1 << 20);
    vsr_config_vet_t vet = {.active = (const char *)data, .active_len = size, .env_check = 1};
    rc = vsr_config_vet("fuzz.yaml", (const char *)data, size, &vet, &resolved, &verr);
    check(rc == VSR_OK || (rc == VSR_ERR_INVALID && verr.len > 0), "vet: ok, or says why");
    if (rc == VSR_ERR_INVALID)
        check_errors(&verr);
    if (rc == VSR_OK && resolved.len > 0)
        check(vsr_config_canonical("resolved", resolved.data, resolved.len, &canon, &verr) == VSR_OK,
              "a resolved document parses");
    vsr_buf_free(&resolved);
    vsr_buf_free(&canon);
    vsr_buf_free(&verr);

    /* one parse: the tree's canonical form and load say what the string
     * functions say, byte for byte */
    vsr_config_doc_t *d = vsr_config_doc_parse("fuzz.yaml", (const char *)data, size);
    vsr_buf_t c1, c2, e1, e2;
    vsr_buf_init(&c1, 0);
    vsr_buf_init(&c2, 0);
    vsr_buf_init(&e1, 1 << 20);
    vsr_buf_init(&e2, 1 << 20);
    int r1 = vsr_config_canonical("fuzz.yaml", (const char *)data, size, &c1, &e1);
    int r2 = vsr_config_doc_canonical(d, &c2, &e2);
    check(r1 == r2 && vsr_slice_eq(vsr_buf_slice(&c1), vsr_buf_slice(&c2)) &&
              vsr_slice_eq(vsr_buf_slice(&e1), vsr_buf_slice(&e2)),
          "doc canonical = canonical");
    vsr_buf_reset(&e2);
    vsr_config_t *c3 = NULL;
    r2 = vsr_config_doc_load(d, &c3, &e2);
    check(r2 == rc_load && vsr_slice_eq(vsr_buf_slice(&err), vsr_buf_slice(&e2)), "doc load = load");
    vsr_config_free(c3);
    /* vetted in place against itself, it still renders */
    vsr_buf_reset(&e2);
    if (vsr_config_doc_vet(d, &vet, &e2) == VSR_OK && r1 == VSR_OK) {
        vsr_buf_reset(&c2);
        check(vsr_config_doc_canonical(d, &c2, &e2) == VSR_OK, "a vetted tree renders");
    }
    vsr_config_doc_free(d);
    vsr_buf_free(&c1);
    vsr_buf_free(&c2);
    vsr_buf_free(&e1);
    vsr_buf_free(&e2);
    vsr_buf_free(&err);
    return 0;
}
