/* test_config.c — loading and validating the v0.3 document. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"

/* ---- helpers ------------------------------------------------------------- */

#define HEAD "version: v0.3\n"
/* lines 2-4 */
#define LISTENERS \
    "listeners:\n"  \
    "  - name: l\n" \
    "    port: 8080\n"
/* lines 5-9 when following HEAD LISTENERS */
#define PROVIDERS              \
    "providers:\n"             \
    "  models:\n"              \
    "    - name: m\n"          \
    "      backend_refs:\n"    \
    "        - endpoint: 127.0.0.1:8000\n"
/* lines 5-8; the test adds line 9 ("        - endpoint: ..." → value at column 21) */
#define PROVIDERS_OPEN   \
    "providers:\n"       \
    "  models:\n"        \
    "    - name: m\n"    \
    "      backend_refs:\n"

static vsr_config_t *load_ok(const char *yaml)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "unexpected errors:\n%.*s", (int)err.len, err.data ? err.data : "");
    assert_int_equal(rc, VSR_OK);
    assert_non_null(c);
    assert_int_equal(err.len, 0);
    vsr_buf_free(&err);
    return c;
}

/* Loads yaml as "t.yaml", asserts it fails with exactly `expected`. */
static void expect_errors(const char *yaml, const char *expected)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = (vsr_config_t *)0x1;
    int rc = vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_null(c);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, expected);
    vsr_buf_free(&err);
}

/* One backend_refs item on line 9: `        - <item>`. */
static void expect_backend_error(const char *item, const char *expected)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml), HEAD LISTENERS PROVIDERS_OPEN "        - %s\n", item);
    expect_errors(yaml, expected);
}

/* lines 1-11; the test adds line 12 under global.stores */
#define DOC_RC HEAD LISTENERS PROVIDERS "global:\n  stores:\n"

/* ---- valid documents ----------------------------------------------------- */

static vsr_config_t *load_file_ok(const char *path)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_file(path, &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%.*s", (int)err.len, err.data);
    assert_int_equal(rc, VSR_OK);
    assert_int_equal(err.len, 0);
    vsr_buf_free(&err);
    return c;
}

static void expect_file_errors(const char *path, const char *expected)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *c = (vsr_config_t *)0x1;
    assert_int_equal(vsr_config_load_file(path, &c, &err), VSR_ERR_INVALID);
    assert_null(c);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, expected);
    vsr_buf_free(&err);
}

static const vsr_decision_conf_t *find_decision(const vsr_recipe_conf_t *r, const char *name)
{
    for (size_t i = 0; i < r->n_decisions; i++)
        if (strcmp(r->decisions[i].name, name) == 0)
            return &r->decisions[i];
    fail_msg("no decision %s", name);
    return NULL;
}

static void assert_leaf(const vsr_rule_conf_t *r, const char *type, const char *name)
{
    assert_int_equal(r->kind, VSR_RULE_LEAF);
    assert_string_equal(r->type, type);
    assert_string_equal(r->name, name);
    assert_int_equal(r->n_children, 0);
}

/* The reference's §1.2 example, minus what vsr does not support yet (see the
 * file's header): every section lands in the typed model. */
static void test_reference_example(void **state)
{
    setenv("LARGE_API_KEY", "sk-large-from-env", 1);
    vsr_config_t *c = load_file_ok("tests/unit/configs/reference-v0.3-openai.yaml");
    assert_string_equal(c->path, "tests/unit/configs/reference-v0.3-openai.yaml");
    assert_string_equal(c->version, "v0.3");

    /* listeners */
    assert_int_equal(c->n_listeners, 1);
    const vsr_listener_conf_t *l = &c->listeners[0];
    assert_string_equal(l->name, "http-8899");
    assert_string_equal(l->address, "0.0.0.0");
    assert_int_equal(l->port, 8899);
    assert_int_equal(l->timeout_ms, 300000);
    assert_int_equal(l->api_keys.n, 1);
    assert_string_equal(l->api_keys.items[0], "sk-client-1");
    assert_int_equal(l->models.n, 2);
    assert_string_equal(l->models.items[0], "vllm-sr/auto");
    assert_string_equal(l->models.items[1], "general-small");
    assert_null(l->tls_cert_file);

    /* providers */
    assert_string_equal(c->default_model, "general-small");
    assert_int_equal(c->n_models, 2);
    const vsr_model_conf_t *m = &c->models[0];
    assert_string_equal(m->name, "general-small");
    assert_string_equal(m->provider_model_id, "general-small-instruct");
    assert_string_equal(m->api_format, "openai");
    assert_int_equal(m->has_reliability, 1);
    const vsr_reliability_conf_t *rel = &m->reliability;
    assert_string_equal(rel->lb_policy, "least_request");
    assert_int_equal(rel->has_retry_count, 1);
    assert_int_equal(rel->retry_count, 2);
    assert_string_equal(rel->retry_on, "connect-failure,refused-stream,gateway-error");
    assert_int_equal(rel->per_try_timeout_ms, 30000);
    assert_int_equal(rel->consecutive_5xx, 5);
    assert_int_equal(rel->base_ejection_time_ms, 30000);
    assert_int_equal(rel->max_ejection_percent, 50);
    assert_string_equal(rel->health_check_path, "/health");
    assert_int_equal(rel->health_check_interval_ms, 10000);
    assert_int_equal(rel->health_check_timeout_ms, 2000);
    assert_int_equal(rel->has_total_timeout, 0);
    assert_int_equal(rel->has_connect_timeout, 0);
    assert_int_equal(m->n_backends, 2);
    assert_string_equal(m->backends[0].name, "small-primary");
    assert_string_equal(m->backends[0].authority, "127.0.0.1:18000");
    assert_string_equal(m->backends[0].provider, "vllm");
    assert_int_equal(m->backends[0].weight, 80);
    assert_null(m->backends[0].resolved_api_key);
    assert_string_equal(m->backends[1].name, "small-secondary");
    assert_int_equal(m->backends[1].weight, 20);
    m = &c->models[1];
    assert_string_equal(m->name, "general-large");
    assert_int_equal(m->has_reliability, 0);
    const vsr_backend_conf_t *b = &m->backends[0];
    assert_string_equal(b->host, "llm.example.com");
    assert_int_equal(b->port, 80);
    assert_string_equal(b->path_prefix, "/v1");
    assert_string_equal(b->provider, "openai");
    assert_string_equal(b->auth_header, "Authorization");
    assert_int_equal(b->has_auth_prefix, 1);
    assert_string_equal(b->auth_prefix, "Bearer");
    assert_string_equal(b->api_key_env, "LARGE_API_KEY");
    assert_null(b->api_key);
    assert_string_equal(b->resolved_api_key, "sk-large-from-env");
    assert_int_equal(b->n_extra_headers, 1);
    assert_string_equal(b->extra_headers[0].name, "X-Tenant");
    assert_string_equal(b->extra_headers[0].value, "demo");
    assert_ptr_equal(vsr_config_default_model(c), &c->models[0]);

    /* routing = recipe "default" */
    assert_int_equal(c->n_recipes, 2);
    const vsr_recipe_conf_t *r = &c->recipes[0];
    assert_string_equal(r->name, "default");
    assert_ptr_equal(vsr_config_find_recipe(c, vsr_slice_cstr("default")), r);
    assert_int_equal(r->strategy_confidence, 0);
    assert_int_equal(c->n_model_cards, 3);
    assert_string_equal(c->model_cards[0].name, "general-small");
    assert_string_equal(c->model_cards[0].param_size, "8B");
    assert_string_equal(c->model_cards[1].description, "strong general model");
    assert_string_equal(c->model_cards[2].name, "claude-compatible");
    assert_null(c->model_cards[2].param_size);
    assert_int_equal(r->signals.n_keywords, 2);
    assert_string_equal(r->signals.keywords[0].name, "code_keywords");
    assert_int_equal(r->signals.keywords[0].op, VSR_KW_OP_OR);
    assert_int_equal(r->signals.keywords[0].keywords.n, 3);
    assert_string_equal(r->signals.keywords[0].keywords.items[2], "compile");
    assert_int_equal(r->signals.keywords[0].method, VSR_KW_EXACT);
    assert_int_equal(r->signals.keywords[0].case_sensitive, 0);
    assert_string_equal(r->signals.keywords[1].keywords.items[1], "asap");
    assert_int_equal(r->signals.n_context, 1);
    assert_string_equal(r->signals.context[0].name, "long_context");
    assert_int_equal(r->signals.context[0].min_tokens, 32000);
    assert_int_equal(r->signals.context[0].has_max_tokens, 1);
    assert_int_equal(r->signals.context[0].max_tokens, 256000);
    assert_int_equal(r->signals.n_structure + r->signals.n_conversation + r->signals.n_language +
                         r->signals.n_role_bindings,
                     0);

    assert_int_equal(r->n_decisions, 2);
    const vsr_decision_conf_t *dec = &r->decisions[0];
    assert_string_equal(dec->name, "code_route");
    assert_int_equal(dec->priority, 30);
    assert_int_equal(dec->tier, 0);
    /* AND(keyword code_keywords, NOT(context long_context)) */
    const vsr_rule_conf_t *rule = dec->rules;
    assert_non_null(rule);
    assert_int_equal(rule->kind, VSR_RULE_AND);
    assert_int_equal(rule->n_children, 2);
    assert_leaf(&rule->children[0], "keyword", "code_keywords");
    assert_int_equal(rule->children[0].line, 77);
    assert_int_equal(rule->children[0].col, 13);
    assert_int_equal(rule->children[1].kind, VSR_RULE_NOT);
    assert_int_equal(rule->children[1].n_children, 1);
    assert_leaf(&rule->children[1].children[0], "context", "long_context");
    assert_int_equal(dec->n_model_refs, 2);
    assert_string_equal(dec->model_refs[0].model, "general-large");
    assert_int_equal(dec->model_refs[0].has_use_reasoning, 1);
    assert_int_equal(dec->model_refs[0].use_reasoning, 0);
    assert_null(dec->model_refs[0].lora_name);
    assert_int_equal(dec->model_refs[0].has_weight, 0);
    assert_string_equal(dec->model_refs[1].model, "general-small");
    assert_string_equal(dec->algorithm, "static");
    assert_int_equal(dec->has_reliability, 1);
    assert_int_equal(dec->reliability.total_timeout_ms, 120000);
    assert_int_equal(dec->reliability.retry_count, 1);
    assert_string_equal(dec->reliability.retry_on, "5xx");
    assert_null(dec->reliability.lb_policy);
    assert_int_equal(dec->fallback.present, 1);
    assert_int_equal(dec->fallback.has_enabled, 1);
    assert_int_equal(dec->fallback.enabled, 1);
    assert_int_equal(dec->fallback.max_attempts, 2);
    assert_int_equal(dec->fallback.has_total_timeout, 0);
    assert_int_equal(dec->n_plugins, 2);
    const vsr_plugin_conf_t *p = &dec->plugins[0];
    assert_int_equal(p->kind, VSR_PLUGIN_SYSTEM_PROMPT);
    assert_string_equal(p->type, "system_prompt");
    assert_int_equal(p->enabled, 1);
    assert_int_equal(p->u.system_prompt.enabled, 1);
    assert_int_equal(p->u.system_prompt.insert, 1);
    assert_string_equal(p->u.system_prompt.system_prompt, "You are a careful senior engineer.");
    p = &dec->plugins[1];
    assert_int_equal(p->kind, VSR_PLUGIN_HEADER_MUTATION);
    assert_int_equal(p->enabled, 1);
    assert_int_equal(p->u.header_mutation.n_add, 1);
    assert_string_equal(p->u.header_mutation.add[0].name, "x-route-source");
    assert_string_equal(p->u.header_mutation.add[0].value, "demo");
    assert_int_equal(p->u.header_mutation.n_update, 0);
    assert_int_equal(p->u.header_mutation.delete_.n, 0);
    dec = &r->decisions[1];
    assert_string_equal(dec->name, "urgent_route");
    assert_int_equal(dec->priority, 20);
    assert_int_equal(dec->rules->kind, VSR_RULE_AND);
    assert_int_equal(dec->rules->n_children, 1);
    assert_leaf(&dec->rules->children[0], "keyword", "urgent_keywords");
    assert_null(dec->algorithm);
    assert_int_equal(dec->n_plugins, 0);
    assert_int_equal(dec->fallback.present, 0);

    /* recipes and entrypoints */
    r = &c->recipes[1];
    assert_string_equal(r->name, "support");
    assert_ptr_equal(vsr_config_find_recipe(c, vsr_slice_cstr("support")), r);
    assert_null(vsr_config_find_recipe(c, vsr_slice_cstr("supp")));
    assert_int_equal(r->has_strategy, 0);
    assert_int_equal(r->signals.n_keywords, 1);
    assert_string_equal(r->signals.keywords[0].name, "refund_keywords");
    assert_int_equal(r->n_decisions, 1);
    assert_string_equal(r->decisions[0].name, "billing_route");
    assert_leaf(&r->decisions[0].rules->children[0], "keyword", "refund_keywords");
    assert_string_equal(r->decisions[0].model_refs[0].model, "general-small");
    assert_int_equal(c->n_entrypoints, 1);
    assert_int_equal(c->entrypoints[0].model_names.n, 1);
    assert_string_equal(c->entrypoints[0].model_names.items[0], "vllm-sr/support");
    assert_string_equal(c->entrypoints[0].recipe, "support");
    assert_ptr_equal(c->entrypoints[0].resolved, &c->recipes[1]);

    /* global */
    assert_int_equal(c->auto_model_names.n, 3);
    assert_string_equal(c->auto_model_names.items[0], "vllm-sr/auto");
    assert_string_equal(c->auto_model_names.items[1], "auto");
    assert_string_equal(c->auto_model_names.items[2], "MoM");
    assert_int_equal(c->include_config_models_in_list, 1);
    assert_int_equal(c->clear_route_cache, 1); /* the reference's default */
    assert_int_equal(c->skip_processing_enabled, 0);
    const vsr_fallback_conf_t *fb = &c->global_fallback;
    assert_int_equal(fb->present, 1);
    assert_int_equal(fb->version, 1);
    assert_int_equal(fb->has_enabled, 1);
    assert_int_equal(fb->enabled, 0);
    assert_int_equal(fb->max_attempts, 3);
    assert_int_equal(fb->total_timeout_ms, 30000);
    assert_int_equal(fb->per_attempt_timeout_ms, 10000);
    assert_int_equal(fb->n_retryable_status_codes, 3);
    assert_int_equal(fb->retryable_status_codes[0], 502);
    assert_int_equal(fb->retryable_status_codes[2], 504);
    assert_int_equal(fb->cb_consecutive_failures, 3);
    assert_int_equal(fb->cb_cooldown_period_ms, 30000);
    assert_int_equal(fb->cb_half_open_probes, 1);
    assert_int_equal(c->management_enabled, 0);
    assert_string_equal(c->authz_user_id_header, "x-authz-user-id");
    assert_string_equal(c->authz_user_groups_header, "x-authz-user-groups");
    assert_int_equal(c->response_api_enabled, 0);

    /* the decision's effective fallback: global, then the decision's own */
    vsr_fallback_conf_t eff;
    vsr_config_effective_fallback(c, &c->recipes[0], &c->recipes[0].decisions[0], &eff);
    assert_int_equal(eff.enabled, 1);
    assert_int_equal(eff.max_attempts, 2);
    assert_int_equal(eff.total_timeout_ms, 30000);
    assert_int_equal(eff.n_retryable_status_codes, 3);

    static const char *const want[] = {
        "providers.defaults.reasoning_effort",
        "providers.models[].reasoning",
    };
    assert_int_equal(c->n_unimplemented, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < c->n_unimplemented; i++)
        assert_string_equal(c->unimplemented[i], want[i]);
    vsr_config_free(c);
    unsetenv("LARGE_API_KEY");
}

/* The example as published loads as it is, its Messages backend included
 * (x-api-key and anthropic-version by default). */
static void test_reference_example_verbatim(void **state)
{
    (void)state;
    setenv("LARGE_API_KEY", "k", 1);
    const char *files[] = {"tests/unit/configs/reference-v0.3.yaml", "tests/unit/configs/reference-v0.3-http.yaml"};
    for (size_t f = 0; f < 2; f++) {
        vsr_buf_t err;
        vsr_buf_init(&err, 1 << 20);
        vsr_config_t *c = NULL;
        assert_int_equal(vsr_config_load_file(files[f], &c, &err), VSR_OK);
        const vsr_model_conf_t *m = vsr_config_find_model(c, VSR_SLICE_LIT("claude-compatible"));
        assert_non_null(m);
        assert_string_equal(m->api_format, "anthropic");
        assert_true(m->messages_api); /* compiled at load: no request compares the string */
        assert_string_equal(m->backends[0].auth_header, "x-api-key");
        assert_true(m->backends[0].has_auth_prefix && m->backends[0].auth_prefix == NULL);
        assert_int_equal(m->backends[0].n_extra_headers, 1);
        assert_string_equal(m->backends[0].extra_headers[0].name, "anthropic-version");
        assert_string_equal(m->backends[0].extra_headers[0].value, "2023-06-01");
        assert_string_equal(vsr_config_find_model(c, VSR_SLICE_LIT("general-large"))->api_format, "openai");
        assert_false(vsr_config_find_model(c, VSR_SLICE_LIT("general-large"))->messages_api);
        vsr_config_free(c);
        vsr_buf_free(&err);
    }
    /* the key comes from the environment at load: without it, no key (a warning), as in the reference */
    unsetenv("LARGE_API_KEY");
    vsr_config_t *c = load_file_ok("tests/unit/configs/reference-v0.3-openai.yaml");
    assert_null(vsr_config_find_model(c, VSR_SLICE_LIT("general-large"))->backends[0].resolved_api_key);
    vsr_config_free(c);
}

/* The parity corpus configuration (ref §6.1) as vsr runs it. */
static void test_corpus(void **state)
{
    vsr_config_t *c = load_file_ok("tests/unit/configs/corpus.yaml");
    assert_string_equal(vsr_config_default_model(c)->name, "general-small");
    const vsr_model_conf_t *large = vsr_config_find_model(c, vsr_slice_cstr("general-large"));
    assert_non_null(large);
    assert_string_equal(large->backends[0].resolved_api_key, "sk-parity-corpus-upstream");
    assert_string_equal(large->backends[0].extra_headers[0].value, "parity-corpus");
    assert_string_equal(large->backends[0].path_prefix, "/v1");
    assert_null(vsr_config_find_model(c, vsr_slice_cstr("claude-compatible")));

    const vsr_recipe_conf_t *r = vsr_config_find_recipe(c, vsr_slice_cstr("default"));
    assert_int_equal(r->n_decisions, 2);
    const vsr_decision_conf_t *code = find_decision(r, "code_route");
    assert_int_equal(code->priority, 30);
    assert_int_equal(code->rules->kind, VSR_RULE_OR);
    assert_leaf(&code->rules->children[0], "keyword", "code_keywords");
    assert_string_equal(code->model_refs[0].model, "general-large");
    assert_int_equal(code->n_plugins, 2);
    assert_int_equal(code->plugins[0].kind, VSR_PLUGIN_SYSTEM_PROMPT);
    assert_int_equal(code->plugins[0].u.system_prompt.insert, 1);
    assert_int_equal(code->plugins[1].kind, VSR_PLUGIN_HEADER_MUTATION);
    assert_string_equal(code->plugins[1].u.header_mutation.add[0].name, "x-route-source");
    assert_string_equal(code->plugins[1].u.header_mutation.add[0].value, "parity-corpus");
    const vsr_decision_conf_t *urgent = find_decision(r, "urgent_route");
    assert_int_equal(urgent->priority, 20);
    assert_string_equal(urgent->model_refs[0].model, "general-small");
    assert_int_equal(r->signals.keywords[1].keywords.n, 3);

    const vsr_recipe_conf_t *support = vsr_config_find_recipe(c, vsr_slice_cstr("support"));
    assert_non_null(support);
    assert_string_equal(support->description, "Customer support (billing) routing.");
    assert_string_equal(find_decision(support, "billing_route")->model_refs[0].model, "general-small");
    assert_int_equal(c->n_entrypoints, 1);
    assert_string_equal(c->entrypoints[0].model_names.items[0], "vllm-sr/support");
    assert_ptr_equal(c->entrypoints[0].resolved, support);
    assert_int_equal(c->skip_processing_enabled, 0);
    assert_int_equal(c->response_api_enabled, 0);
    assert_int_equal(c->auto_model_names.n, 3);
    assert_int_equal(c->n_unimplemented, 0);
    vsr_config_free(c);
}

static void test_full_fixture(void **state)
{
    setenv("VSR_TEST_UPSTREAM_KEY", "sk-from-env", 1);
    vsr_config_t *c = load_file_ok("tests/unit/configs/full.yaml");
    unsetenv("VSR_TEST_UPSTREAM_KEY");

    /* listeners */
    assert_int_equal(c->n_listeners, 2);
    const vsr_listener_conf_t *l = &c->listeners[0];
    assert_int_equal(l->timeout_ms, 1500);
    assert_int_equal(l->max_body_bytes, 1048576);
    assert_int_equal(l->max_connections, 1000);
    assert_int_equal(l->api_keys.n, 2);
    assert_string_equal(l->api_keys.items[1], "sk-b");
    assert_string_equal(l->models.items[1], "small");
    assert_null(l->tls_cert_file); /* see test_listener_tls_and_identity */
    assert_int_equal(l->identity_trust_headers, 1);
    assert_int_equal(l->identity_trusted_peers.n, 3);
    /* canonical networks: host bits cleared, bare addresses are one host */
    assert_string_equal(l->identity_trusted_peers.items[0], "10.0.0.0/8");
    assert_string_equal(l->identity_trusted_peers.items[1], "192.168.0.7/32");
    assert_string_equal(l->identity_trusted_peers.items[2], "fd00::/16");
    l = &c->listeners[1];
    assert_string_equal(l->address, "::1");
    assert_int_equal(l->port, 8899); /* same port, other address: fine */
    assert_int_equal(l->timeout_ms, 120000);
    assert_int_equal(l->max_body_bytes, VSR_DEFAULT_MAX_BODY_BYTES);
    assert_int_equal(l->api_keys.n, 0);
    assert_null(l->tls_cert_file);
    assert_int_equal(l->identity_trust_headers, 0);

    /* providers */
    assert_string_equal(c->default_model, "large");
    assert_ptr_equal(vsr_config_default_model(c), &c->models[1]);
    const vsr_model_conf_t *m = &c->models[0];
    assert_string_equal(m->provider_model_id, "small-instruct-v2");
    const vsr_reliability_conf_t *rel = &m->reliability;
    assert_int_equal(m->has_reliability, 1);
    assert_string_equal(rel->lb_policy, "least_request");
    assert_int_equal(rel->retry_count, 5);
    assert_string_equal(rel->retry_on, "5xx,reset,retriable-status-codes");
    assert_int_equal(rel->n_retriable_status_codes, 2);
    assert_int_equal(rel->retriable_status_codes[1], 429);
    assert_int_equal(rel->per_try_timeout_ms, 3000);
    assert_int_equal(rel->has_total_timeout, 1);
    assert_int_equal(rel->total_timeout_ms, 0);
    assert_int_equal(rel->idle_timeout_ms, 45000);
    assert_int_equal(rel->first_byte_timeout_ms, 2000);
    assert_int_equal(rel->connect_timeout_ms, 500);
    assert_int_equal(rel->retry_back_off_base_ms, 50);
    assert_int_equal(rel->retry_back_off_max_ms, 1000);
    assert_int_equal(rel->retry_after_max_ms, 20000);
    assert_int_equal(rel->retry_budget_percent, 40);
    assert_int_equal(rel->retry_budget_min_concurrency, 7);
    assert_int_equal(rel->consecutive_5xx, 4);
    assert_int_equal(rel->base_ejection_time_ms, 15000);
    assert_int_equal(rel->max_ejection_percent, 100);
    assert_string_equal(rel->health_check_path, "/healthz");
    assert_int_equal(rel->health_check_interval_ms, 5000);
    assert_int_equal(rel->health_check_timeout_ms, 1000);
    const vsr_backend_conf_t *b = &m->backends[0];
    assert_string_equal(b->name, "primary");
    assert_int_equal(b->weight, 3);
    assert_string_equal(b->type, "chat");
    assert_string_equal(b->provider, "vllm");
    assert_string_equal(b->api_key, "sk-literal");
    assert_string_equal(b->resolved_api_key, "sk-literal");
    /* present-aware: an explicit "" means no prefix */
    assert_int_equal(b->has_auth_prefix, 1);
    assert_string_equal(b->auth_prefix, "");
    assert_null(b->auth_header);
    assert_string_equal(b->chat_path, "/v2/chat");
    b = &m->backends[1];
    assert_string_equal(b->name, "backend-2");
    assert_string_equal(b->host, "fd00::2");
    assert_string_equal(b->authority, "[fd00::2]:18000");
    assert_string_equal(b->auth_header, "api-key");
    assert_int_equal(b->has_auth_prefix, 0);
    assert_null(b->auth_prefix);
    assert_string_equal(b->api_key_env, "VSR_TEST_UPSTREAM_KEY");
    assert_string_equal(b->resolved_api_key, "sk-from-env");
    assert_string_equal(b->api_version, "2024-06-01");
    assert_int_equal(b->n_extra_headers, 2);
    assert_string_equal(b->extra_headers[0].name, "X-Tenant");
    assert_string_equal(b->extra_headers[0].value, "t1");
    assert_string_equal(b->extra_headers[1].value, "");
    m = &c->models[1];
    assert_string_equal(m->api_format, "openai"); /* the default */
    assert_false(m->messages_api);
    assert_int_equal(m->has_reliability, 0);
    assert_string_equal(m->backends[0].path_prefix, "/openai/v1");

    /* model cards */
    assert_int_equal(c->n_model_cards, 2);
    assert_int_equal(c->model_cards[0].loras.n, 2);
    assert_string_equal(c->model_cards[0].loras.items[1], "small-math");
    assert_int_equal(c->model_cards[1].loras.n, 0);

    /* signals */
    const vsr_recipe_conf_t *r = &c->recipes[0];
    assert_int_equal(r->strategy_confidence, 1);
    assert_int_equal(r->has_strategy, 1);
    const vsr_sig_keyword_conf_t *kw = &r->signals.keywords[0];
    assert_int_equal(kw->op, VSR_KW_OP_NOR);
    assert_int_equal(kw->case_sensitive, 1);
    assert_int_equal(kw->method, VSR_KW_FUZZY);
    assert_int_equal(kw->fuzzy_match, 1); /* implied by the method */
    assert_int_equal(kw->fuzzy_threshold, 1);
    assert_true(kw->bm25_threshold == 0.1 && kw->ngram_threshold == 0.4 && kw->ngram_arity == 3);
    kw = &r->signals.keywords[1];
    assert_int_equal(kw->op, VSR_KW_OP_OR);
    assert_int_equal(kw->method, VSR_KW_BM25);
    assert_int_equal(kw->fuzzy_match, 0);
    assert_int_equal(kw->fuzzy_threshold, 2);
    assert_true(kw->bm25_threshold == 0.25 && kw->ngram_threshold == 0.5 && kw->ngram_arity == 4);
    assert_int_equal(r->signals.context[0].min_tokens, 1500);
    assert_int_equal(r->signals.context[0].max_tokens, 1000000);
    assert_int_equal(r->signals.context[1].min_tokens, 0);
    assert_int_equal(r->signals.context[1].max_tokens, 4096);
    const vsr_sig_structure_conf_t *st = &r->signals.structure[0];
    assert_string_equal(st->feature_type, "density");
    assert_string_equal(st->source_type, "regex");
    assert_string_equal(st->pattern, "^- ");
    assert_int_equal(st->case_sensitive, 1);
    assert_true(st->predicate.has_gte && st->predicate.gte == 0.5);
    assert_true(st->predicate.has_lt && st->predicate.lt == 3);
    assert_false(st->predicate.has_gt || st->predicate.has_lte);
    st = &r->signals.structure[1];
    assert_string_equal(st->source_type, "sequence");
    assert_int_equal(st->n_sequences, 2);
    assert_string_equal(st->sequences[1].items[1], "step 2");
    const vsr_sig_conversation_conf_t *cv = &r->signals.conversation[0];
    assert_string_equal(cv->feature_type, "count");
    assert_string_equal(cv->source_type, "message");
    assert_string_equal(cv->role, "user");
    assert_true(cv->predicate.has_gt && cv->predicate.gt == 2);
    cv = &r->signals.conversation[1];
    assert_string_equal(cv->source_type, "tool_definition");
    assert_null(cv->role);
    assert_true(r->signals.language[0].threshold == 0.6);
    assert_true(r->signals.language[1].threshold == 0.3); /* 0 / absent reads as 0.3 */
    const vsr_sig_authz_conf_t *rb = &r->signals.role_bindings[0];
    assert_string_equal(rb->role, "admin");
    assert_int_equal(rb->n_subjects, 2);
    assert_string_equal(rb->subjects[0].kind, "User"); /* normalised */
    assert_string_equal(rb->subjects[0].name, "alice");
    assert_string_equal(rb->subjects[1].kind, "Group");

    /* the decision with every rule shape */
    const vsr_decision_conf_t *dec = find_decision(r, "complex");
    assert_string_equal(dec->description, "every rule shape");
    assert_int_equal(dec->priority, -5);
    assert_int_equal(dec->tier, 2);
    const vsr_rule_conf_t *rule = dec->rules;
    assert_int_equal(rule->kind, VSR_RULE_OR);
    assert_int_equal(rule->n_children, 5);
    assert_leaf(&rule->children[0], "keyword", "kw");
    assert_int_equal(rule->children[1].kind, VSR_RULE_AND); /* no operator = AND */
    assert_leaf(&rule->children[1].children[0], "context", "long");
    assert_int_equal(rule->children[1].children[1].kind, VSR_RULE_NOT);
    assert_leaf(&rule->children[1].children[1].children[0], "structure", "bullets");
    assert_leaf(&rule->children[2], "conversation", "multi_turn");
    assert_leaf(&rule->children[3], "language", "zh");
    assert_leaf(&rule->children[4], "authz", "admins");
    assert_int_equal(dec->n_model_refs, 3);
    assert_string_equal(dec->model_refs[0].model, "small");
    assert_string_equal(dec->model_refs[0].lora_name, "small-sql");
    assert_true(dec->model_refs[0].has_weight && dec->model_refs[0].weight == 0.7);
    /* a LoRA named as the model: normalised to base model + lora_name */
    assert_string_equal(dec->model_refs[1].model, "small");
    assert_string_equal(dec->model_refs[1].lora_name, "small-math");
    assert_int_equal(dec->model_refs[2].use_reasoning, 1);
    assert_string_equal(dec->model_refs[2].reasoning_effort, "high");
    assert_string_equal(dec->reliability.retry_on, "gateway-error");
    assert_int_equal(dec->reliability.per_try_timeout_ms, 20000);
    assert_int_equal(dec->reliability.n_retriable_status_codes, 1);
    assert_int_equal(dec->n_plugins, 5);
    const vsr_plugin_conf_t *p = &dec->plugins[0];
    assert_int_equal(p->kind, VSR_PLUGIN_SYSTEM_PROMPT);
    assert_int_equal(p->u.system_prompt.insert, 1); /* insert is the default (the reference's) */
    assert_string_equal(p->u.system_prompt.system_prompt, "Line one.\nLine two.\n");
    p = &dec->plugins[1];
    assert_string_equal(p->u.header_mutation.update[0].name, "x-b");
    assert_string_equal(p->u.header_mutation.update[0].value, "");
    assert_string_equal(p->u.header_mutation.delete_.items[0], "x-c");
    p = &dec->plugins[2];
    assert_int_equal(p->kind, VSR_PLUGIN_FAST_RESPONSE);
    assert_int_equal(p->enabled, 0);
    assert_string_equal(p->u.fast_response.message, "Blocked.");
    p = &dec->plugins[3];
    assert_int_equal(p->kind, VSR_PLUGIN_REQUEST_PARAMS);
    const vsr_plugin_request_params_conf_t *rp = &p->u.request_params;
    assert_string_equal(rp->blocked_params.items[0], "logit_bias");
    assert_true(rp->has_max_tokens_limit && rp->max_tokens_limit == 2048);
    assert_true(rp->has_max_n && rp->max_n == 2);
    assert_int_equal(rp->strip_unknown, 1);
    assert_string_equal(rp->allowed_params.items[0], "user");
    assert_true(rp->has_default_max_tokens && rp->default_max_tokens == 512);
    /* a disabled response cache is kept, switched off */
    p = &dec->plugins[4];
    assert_int_equal(p->kind, VSR_PLUGIN_RESPONSE_CACHE);
    assert_string_equal(p->type, "response_cache");
    assert_int_equal(p->enabled, 0);
    assert_int_equal(p->u.response_cache.enabled, 0);
    dec = find_decision(r, "catch_all");
    assert_null(dec->rules);
    assert_int_equal(dec->n_model_refs, 0);

    /* recipes: strategy inherited unless set */
    assert_int_equal(c->n_recipes, 3);
    assert_string_equal(c->recipes[1].name, "support");
    assert_int_equal(c->recipes[1].has_strategy, 0);
    assert_int_equal(c->recipes[1].strategy_confidence, 1);
    assert_leaf(c->recipes[1].decisions[0].rules, "keyword", "refund");
    assert_int_equal(c->recipes[1].fallback.total_timeout_ms, 20000);
    assert_string_equal(c->recipes[2].name, "fast");
    assert_int_equal(c->recipes[2].has_strategy, 1);
    assert_int_equal(c->recipes[2].strategy_confidence, 0);
    assert_ptr_equal(c->entrypoints[0].resolved, &c->recipes[1]);
    assert_string_equal(c->entrypoints[0].model_names.items[1], "support");
    assert_ptr_equal(c->entrypoints[1].resolved, &c->recipes[0]);

    /* global */
    assert_int_equal(c->auto_model_names.n, 3);
    assert_string_equal(c->auto_model_names.items[2], "Router"); /* trimmed */
    assert_int_equal(c->include_config_models_in_list, 1);
    assert_int_equal(c->clear_route_cache, 1);
    assert_int_equal(c->skip_processing_enabled, 1);
    const vsr_fallback_conf_t *fb = &c->global_fallback;
    assert_int_equal(fb->has_version, 0);
    assert_int_equal(fb->enabled, 1);
    assert_int_equal(fb->max_attempts, 2);
    assert_int_equal(fb->total_timeout_ms, 40000);
    assert_int_equal(fb->per_attempt_timeout_ms, 15000);
    assert_int_equal(fb->retryable_status_codes[0], 429);
    assert_int_equal(fb->cb_consecutive_failures, 5);
    assert_int_equal(fb->has_cb_cooldown_period, 1);
    assert_int_equal(fb->cb_cooldown_period_ms, 0);
    assert_int_equal(fb->cb_half_open_probes, 2);
    assert_int_equal(c->response_api_enabled, 1);
    assert_int_equal(c->authz_fail_open, 1);
    assert_string_equal(c->authz_user_id_header, "x-user");
    assert_string_equal(c->authz_user_groups_header, "x-groups");
    assert_int_equal(c->management_enabled, 1);
    assert_string_equal(c->management_address, "::1");
    assert_int_equal(c->management_port, 9090);

    /* layers: defaults <- global <- recipe <- decision */
    vsr_fallback_conf_t eff;
    vsr_config_effective_fallback(c, NULL, NULL, &eff);
    assert_int_equal(eff.version, 1);
    assert_int_equal(eff.total_timeout_ms, 40000);
    vsr_config_effective_fallback(c, &c->recipes[1], &c->recipes[1].decisions[0], &eff);
    assert_int_equal(eff.total_timeout_ms, 20000);
    assert_int_equal(eff.per_attempt_timeout_ms, 15000);
    assert_int_equal(eff.max_attempts, 2);
    vsr_config_effective_fallback(c, &c->recipes[0], find_decision(&c->recipes[0], "complex"), &eff);
    assert_int_equal(eff.max_attempts, 4);
    assert_int_equal(eff.per_attempt_timeout_ms, 5000);
    assert_int_equal(eff.total_timeout_ms, 40000);
    assert_int_equal(eff.cb_consecutive_failures, 5);
    assert_int_equal(eff.has_cb_half_open_probes, 1);

    static const char *const want[] = {
        "routing.decisions[].modelRefs[].use_reasoning",
        "routing.decisions[].modelRefs[].reasoning_effort",
    };
    assert_int_equal(c->n_unimplemented, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < c->n_unimplemented; i++)
        assert_string_equal(c->unimplemented[i], want[i]);
    vsr_config_free(c);
}

/* The reference's default of `path` (tests/data/v0.3-fields.tsv, column 4),
 * or NULL. */
static char *tsv_default(const char *path)
{
    FILE *f = fopen("tests/data/v0.3-fields.tsv", "r");
    assert_non_null(f);
    char line[4096];
    char *out = NULL;
    size_t plen = strlen(path);
    while (out == NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, path, plen) != 0 || line[plen] != '\t')
            continue;
        char *col = line;
        for (int i = 0; i < 3 && col != NULL; i++) {
            col = strchr(col, '\t');
            if (col != NULL)
                col++;
        }
        if (col != NULL) {
            col[strcspn(col, "\t\n")] = '\0';
            out = strdup(col);
        }
    }
    fclose(f);
    return out;
}

/* The number a TSV default starts with ("true" 1, "false" 0, "0.8 (...)" 0.8). */
static double tsv_number(const char *path)
{
    char *s = tsv_default(path);
    assert_non_null(s);
    double v = strncmp(s, "true", 4) == 0 ? 1 : strncmp(s, "false", 5) == 0 ? 0 : strtod(s, NULL);
    free(s);
    return v;
}

/* Defaults are the reference's, as its field inventory lists them. */
static void test_reference_defaults(void **state)
{
    VSR_UNUSED(state);
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS
                              "routing:\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      modelRefs: [{model: m}]\n"
                              "      plugins:\n"
                              "        - {type: system_prompt, configuration: {system_prompt: hi}}\n");
    struct {
        const char *path;
        double vsr;
    } nums[] = {
        {"global.router.clear_route_cache", c->clear_route_cache},
        {"global.stores.response_cache.enabled", c->rc_store.enabled},
        {"global.stores.response_cache.max_entries", (double)c->rc_store.max_entries},
        {"global.stores.response_cache.ttl_seconds", (double)c->rc_store.ttl_seconds},
        {"routing.decisions[].plugins[type=response_cache].configuration.semantic.similarity_threshold",
         VSR_RC_DEFAULT_THRESHOLD},
        {"global.services.response_api.max_responses", (double)c->resp_store.max_responses},
        {"global.services.response_api.ttl_seconds", (double)c->resp_store.ttl_seconds},
        {"global.services.router_replay.ttl_seconds", (double)c->replay_store.ttl_seconds},
        {"global.services.management_api.port", c->management_port},
        {"global.router.include_config_models_in_list", c->include_config_models_in_list},
        {"global.services.observability.tracing.sampling.rate", c->tracing_sampling_ratio},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(nums); i++) {
        double want = tsv_number(nums[i].path);
        if (want != nums[i].vsr)
            fail_msg("%s: vsr's default %g, the reference's %g", nums[i].path, nums[i].vsr, want);
    }
    /* "unset -> ... (0.5)": the store's own threshold */
    char *s = tsv_default("global.stores.response_cache.similarity_threshold");
    assert_non_null(strstr(s, "(0.5)"));
    free(s);
    assert_true(c->rc_store.similarity_threshold == 0.5);
    s = tsv_default("routing.decisions[].plugins[type=system_prompt].configuration.mode");
    assert_string_equal(s, "insert");
    free(s);
    const vsr_plugin_conf_t *p = &c->recipes[0].decisions[0].plugins[0];
    assert_int_equal(p->kind, VSR_PLUGIN_SYSTEM_PROMPT);
    assert_int_equal(p->u.system_prompt.insert, 1);
    s = tsv_default("global.services.management_api.bind_address");
    assert_string_equal(s, c->management_address);
    free(s);
    vsr_config_free(c);
}

static void test_defaults(void **state)
{
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS);
    assert_string_equal(c->path, "t.yaml"); /* the name given, as in every message about it */
    const vsr_listener_conf_t *l = &c->listeners[0];
    assert_string_equal(l->name, "l");
    assert_string_equal(l->address, "0.0.0.0");
    assert_int_equal(l->port, 8080);
    assert_int_equal(l->timeout_ms, VSR_DEFAULT_LISTENER_TIMEOUT_MS);
    assert_int_equal(l->timeout_ms, 300000);
    assert_int_equal(l->max_body_bytes, 32ull * 1024 * 1024);
    assert_int_equal(l->max_connections, 50000);

    assert_null(c->default_model);
    assert_int_equal(c->n_models, 1);
    const vsr_model_conf_t *m = &c->models[0];
    assert_string_equal(m->provider_model_id, "m");
    assert_int_equal(m->n_backends, 1);
    const vsr_backend_conf_t *b = &m->backends[0];
    assert_string_equal(b->name, "primary");
    assert_string_equal(b->host, "127.0.0.1");
    assert_int_equal(b->port, 8000);
    assert_int_equal(b->tls, 0);
    assert_string_equal(b->authority, "127.0.0.1:8000");
    assert_string_equal(b->path_prefix, "");
    assert_int_equal(b->weight, 1);
    assert_int_equal(c->n_unimplemented, 0);
    assert_null(c->unimplemented);
    assert_ptr_equal(vsr_config_default_model(c), m);
    vsr_config_free(c);
}

static void test_durations(void **state)
{
    static const struct {
        const char *text;
        uint64_t ms;
    } rows[] = {
        {"300s", 300000}, {"1.5s", 1500}, {"250ms", 250}, {"5m", 300000}, {"1h", 3600000}, {"42", 42000},
        {"\"7s\"", 7000},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml), HEAD LISTENERS "    timeout: %s\n" PROVIDERS, rows[i].text);
        vsr_config_t *c = load_ok(yaml);
        assert_int_equal(c->listeners[0].timeout_ms, rows[i].ms);
        vsr_config_free(c);
    }
}

static void test_default_model_spellings(void **state)
{
    static const char *const spellings[] = {"model", "default_model"};
    for (size_t i = 0; i < 2; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml),
                 HEAD LISTENERS
                 "providers:\n"
                 "  defaults:\n"
                 "    %s: b\n"
                 "  models:\n"
                 "    - {name: a, backend_refs: [{endpoint: a}]}\n"
                 "    - {name: b, backend_refs: [{endpoint: b}]}\n",
                 spellings[i]);
        vsr_config_t *c = load_ok(yaml);
        assert_string_equal(c->default_model, "b");
        assert_ptr_equal(vsr_config_default_model(c), &c->models[1]);
        assert_ptr_equal(vsr_config_find_model(c, vsr_slice_cstr("a")), &c->models[0]);
        assert_ptr_equal(vsr_config_find_model(c, vsr_slice("bee", 1)), &c->models[1]);
        assert_null(vsr_config_find_model(c, vsr_slice_cstr("c")));
        assert_null(vsr_config_find_model(c, vsr_slice_cstr("")));
        vsr_config_free(c);
    }
}

/* global.stores.response_cache.eviction_policy: lru, lfu and fifo load;
 * unset stays unset (the store picks fifo in memory, lru with redis) */
static void test_rc_eviction(void **state)
{
    VSR_UNUSED(state);
    static const char *const names[] = {"lru", "lfu", "fifo"};
    for (int i = 0; i < 3; i++) {
        char doc[512];
        snprintf(doc, sizeof(doc), DOC_RC "    response_cache: {backend_type: memory, eviction_policy: %s}\n", names[i]);
        vsr_config_t *c = load_ok(doc);
        assert_int_equal(c->rc_store.eviction, i);
        assert_int_equal(c->rc_store.has_eviction, 1);
        vsr_config_free(c);
    }
    vsr_config_t *c = load_ok(DOC_RC "    response_cache: {backend_type: redis}\n");
    assert_int_equal(c->rc_store.has_eviction, 0);
    vsr_config_free(c);
    expect_errors(DOC_RC "    response_cache: {eviction_policy: random}\n",
                  "t.yaml:12:39: eviction_policy must be lru, lfu or fifo, got \"random\"\n");
}

/* redis.cluster_mode and cluster_addresses, in every store's redis block */
static void test_redis_cluster_keys(void **state)
{
    VSR_UNUSED(state);
    vsr_config_t *c = load_ok(DOC_RC "    response_cache: {backend_type: redis, redis: {cluster_mode: true, "
                                     "cluster_addresses: [\"10.0.0.1:7000\", \"[::1]:7001\", \"redis-0.redis:7002\"]}}\n"
                                     "  services:\n"
                                     "    response_api: {store_backend: redis, redis: {cluster_mode: true, "
                                     "cluster_addresses: [\"10.0.0.2:7000\"]}}\n"
                                     "    router_replay: {store_backend: redis, redis: {cluster_mode: true, "
                                     "cluster_addresses: [\"10.0.0.3:7000\"]}}\n");
    assert_int_equal(c->rc_store.redis_cluster, 1);
    assert_int_equal(c->rc_store.redis_cluster_addresses.n, 3);
    assert_string_equal(c->rc_store.redis_cluster_addresses.items[1], "[::1]:7001");
    assert_int_equal(c->resp_store.redis_cluster, 1);
    assert_string_equal(c->resp_store.redis_cluster_addresses.items[0], "10.0.0.2:7000");
    assert_int_equal(c->replay_store.redis_cluster, 1);
    assert_string_equal(c->replay_store.redis_cluster_addresses.items[0], "10.0.0.3:7000");
    vsr_config_free(c);
    /* cluster_mode false: the addresses are kept and unused */
    c = load_ok(DOC_RC "    response_cache: {redis: {cluster_mode: false, cluster_addresses: [\"10.0.0.1:7000\"]}}\n");
    assert_int_equal(c->rc_store.redis_cluster, 0);
    vsr_config_free(c);
    expect_errors(DOC_RC "    response_cache: {redis: {cluster_mode: true}}\n",
                  "t.yaml:12:44: cluster_mode needs cluster_addresses (\"host:port\" of at least one node)\n");
    expect_errors(DOC_RC "    response_cache: {redis: {cluster_mode: true, cluster_addresses: [\"redis-0\"]}}\n",
                  "t.yaml:12:70: cluster_addresses: want \"host:port\", got \"redis-0\"\n");
    expect_errors(DOC_RC "    response_cache: {redis: {cluster_mode: true, cluster_addresses: [\"10.0.0.1:7000\"], db: 2}}\n",
                  "t.yaml:12:92: a Redis Cluster has only db 0\n");
}

static void test_unimplemented_paths(void **state)
{
    vsr_config_t *c = load_ok(
        HEAD
        "global:\n"
        "  router: {strategy: priority, streamed_body: {enabled: true}, learning: {}}\n"
        "  services: {observability: {metrics: {windowed_metrics: {enabled: true}}}, ratelimit: {fail_open: true}}\n"
        "  stores: {response_cache: {backend_type: memory}}\n"
        "  model_catalog: {embeddings: {semantic: {use_cpu: true}}, runtime: {embedder: hash}}\n"
        "listeners:\n"
        "  - {name: a, port: 1, api_keys: []}\n"
        "providers:\n"
        "  defaults: {default_reasoning_effort: high, reasoning_families: {q: {type: x, parameter: y}}}\n"
        "  models:\n"
        "    - name: m\n"
        "      catalog: c1\n"
        "      external_model_ids: {openai: x}\n"
        "      deployment: {}\n"
        "      backend_refs: [{endpoint: a}]\n"
        "evaluation: {records: [{model: m}]}\n"
        "routing:\n"
        "  model_bindings: {m: m}\n"
        "  modelCards: [{name: m, tags: [fast], quality_score: 0.5}]\n"
        "  decisions:\n"
        "    - name: d\n"
        "      annotations: {owner: me}\n"
        "      algorithm: {type: static, on_error: skip}\n"
        "      modelRefs: [{model: m, reasoning_description: x}]\n"
        "recipes:\n"
        "  - name: r\n"
        "    routing: {decisions: [{name: d, emits: [{kind: retention}], modelRefs: [{model: m, use_reasoning: true}]}]}\n"
        "entrypoints: []\n");
    static const char *const want[] = {
        "global.router.strategy",
        "global.router.streamed_body",
        "global.services.observability.metrics",
        "global.model_catalog.embeddings.semantic.use_cpu",
        "providers.defaults.default_reasoning_effort",
        "providers.defaults.reasoning_families",
        "providers.models[].catalog",
        "providers.models[].external_model_ids",
        "evaluation",
        "routing.model_bindings",
        "routing.decisions[].annotations",
        "routing.decisions[].algorithm.on_error",
        "routing.decisions[].modelRefs[].reasoning_description",
        "recipes[].routing.decisions[].modelRefs[].use_reasoning",
    };
    /* empty values (api_keys: [], deployment: {}, learning: {}, entrypoints:
     * []) configure nothing and are not reported */
    assert_int_equal(c->n_unimplemented, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < c->n_unimplemented; i++) {
        assert_string_equal(c->unimplemented[i], want[i]);
        /* where each was given, for vsr config validate */
        assert_true(c->unimplemented_line[i] > 1 && c->unimplemented_col[i] >= 1);
    }
    vsr_config_warn_unimplemented(c);
    vsr_config_free(c);
}

/* Anchors and aliases are resolved (shared, not copied). */
static void test_aliases_resolved(void **state)
{
    vsr_config_t *c = load_ok(
        HEAD LISTENERS
        "providers:\n"
        "  models:\n"
        "    - name: a\n"
        "      backend_refs: &refs\n"
        "        - {endpoint: \"10.0.0.1:9000\", weight: 2}\n"
        "        - {endpoint: \"10.0.0.2:9000\"}\n"
        "    - name: b\n"
        "      backend_refs: *refs\n");
    assert_int_equal(c->n_models, 2);
    assert_int_equal(c->models[1].n_backends, 2);
    assert_string_equal(c->models[1].backends[0].host, "10.0.0.1");
    assert_int_equal(c->models[1].backends[0].weight, 2);
    assert_string_equal(c->models[1].backends[1].name, "backend-2");
    vsr_config_free(c);
}

static void test_explicit_tags(void **state)
{
    vsr_config_t *c = load_ok(
        HEAD
        "listeners:\n"
        "  - name: !!str 8080\n"
        "    port: !!int \"8081\"\n"
        "providers:\n"
        "  models:\n"
        "    - name: ! 12\n"
        "      backend_refs: !!seq [{endpoint: h}]\n");
    assert_string_equal(c->listeners[0].name, "8080");
    assert_int_equal(c->listeners[0].port, 8081);
    assert_string_equal(c->models[0].name, "12");
    vsr_config_free(c);
}

/* ---- endpoint / base_url ------------------------------------------------- */

static void test_endpoint_table(void **state)
{
    static const struct {
        const char *item;
        const char *host;
        uint16_t port;
        const char *authority;
        const char *path_prefix;
    } rows[] = {
        {"endpoint: 127.0.0.1:18000", "127.0.0.1", 18000, "127.0.0.1:18000", ""},
        {"endpoint: vllm", "vllm", 80, "vllm", ""},
        {"endpoint: vllm:80", "vllm", 80, "vllm", ""},
        {"endpoint: my_svc.ns.svc:8000", "my_svc.ns.svc", 8000, "my_svc.ns.svc:8000", ""},
        {"endpoint: \"[::1]:8000\"", "::1", 8000, "[::1]:8000", ""},
        {"endpoint: \"[2001:db8::1]\"", "2001:db8::1", 80, "[2001:db8::1]", ""},
        {"{endpoint: \"h:443\", protocol: http}", "h", 443, "h:443", ""},
        {"base_url: http://h", "h", 80, "h", ""},
        {"base_url: http://h/", "h", 80, "h", ""},
        {"base_url: http://h:9/openai/v1/", "h", 9, "h:9", "/openai/v1"},
        {"base_url: http://api.x.com/v1", "api.x.com", 80, "api.x.com", "/v1"},
        {"base_url: HTTP://H.example:80/a//", "H.example", 80, "H.example", "/a"},
        {"base_url: \"http://[::1]:8080/v1\"", "::1", 8080, "[::1]:8080", "/v1"},
        {"{base_url: \"http://h:81\", protocol: http}", "h", 81, "h:81", ""},
        {"base_url: https://api.x.com/v1", "api.x.com", 443, "api.x.com", "/v1"},
        {"{endpoint: h, protocol: https}", "h", 443, "h", ""},
        {"base_url: \"https://h:8443\"", "h", 8443, "h:8443", ""},
        {"{endpoint: h, protocol: h2}", "h", 80, "h", ""},
        {"{endpoint: \"h:8000\", protocol: h2}", "h", 8000, "h:8000", ""},
        {"{base_url: \"https://h/v1\", protocol: h2}", "h", 443, "h", "/v1"},
        {"{base_url: \"http://h:81\", protocol: h2}", "h", 81, "h:81", ""},
        /* the reference's reading of an endpoint: a scheme is the protocol,
         * a path is dropped (with a warning) */
        {"endpoint: \"host.docker.internal:8000/v1\"", "host.docker.internal", 8000, "host.docker.internal:8000", ""},
        {"endpoint: \"https://api.example.com:443/v1\"", "api.example.com", 443, "api.example.com", ""},
        {"endpoint: \"https://api.example.com\"", "api.example.com", 443, "api.example.com", ""},
        {"endpoint: \"http://h:8000/\"", "h", 8000, "h:8000", ""},
        {"endpoint: \"http://[::1]:8000/v1\"", "::1", 8000, "[::1]:8000", ""},
        {"endpoint: h:9/", "h", 9, "h:9", ""},
        {"{endpoint: \"https://h/v1\", protocol: http}", "h", 443, "h", ""},
        {"{endpoint: \"http://h:8000\", protocol: h2}", "h", 8000, "h:8000", ""},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), HEAD LISTENERS PROVIDERS_OPEN "        - %s\n", rows[i].item);
        vsr_config_t *c = load_ok(yaml);
        const vsr_backend_conf_t *b = &c->models[0].backends[0];
        assert_string_equal(b->host, rows[i].host);
        assert_int_equal(b->port, rows[i].port);
        assert_int_equal(b->tls, strstr(rows[i].item, "https") != NULL);
        assert_int_equal(b->h2, strstr(rows[i].item, "h2") != NULL);
        assert_string_equal(b->authority, rows[i].authority);
        assert_string_equal(b->path_prefix, rows[i].path_prefix);
        vsr_config_free(c);
    }
}

/* The endpoint's scheme decides, whatever protocol says. */
static void test_endpoint_scheme_beats_protocol(void **state)
{
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS_OPEN "        - {endpoint: \"http://h:81/v1\", protocol: https}\n");
    const vsr_backend_conf_t *b = &c->models[0].backends[0];
    assert_int_equal(b->tls, 0);
    assert_int_equal(b->port, 81);
    assert_string_equal(b->path_prefix, "");
    vsr_config_free(c);
}

static void test_endpoint_errors(void **state)
{
    static const struct {
        const char *item;
        const char *error;
    } rows[] = {
        {"endpoint: \"h:0\"", "t.yaml:9:21: invalid endpoint \"h:0\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"h:65536\"",
         "t.yaml:9:21: invalid endpoint \"h:65536\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"h:\"", "t.yaml:9:21: invalid endpoint \"h:\": empty port\n"},
        {"endpoint: \":80\"", "t.yaml:9:21: invalid endpoint \":80\": missing host\n"},
        {"endpoint: \"h:x\"", "t.yaml:9:21: invalid endpoint \"h:x\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"::1\"",
         "t.yaml:9:21: invalid endpoint \"::1\": IPv6 addresses must be written in brackets, e.g. \"[::1]:8000\"\n"},
        {"endpoint: \"[::1\"", "t.yaml:9:21: invalid endpoint \"[::1\": missing ']' after the IPv6 address\n"},
        {"endpoint: \"[::1]8\"", "t.yaml:9:21: invalid endpoint \"[::1]8\": expected ':' after ']'\n"},
        {"endpoint: \"[h]:1\"", "t.yaml:9:21: invalid endpoint \"[h]:1\": invalid IPv6 address in brackets\n"},
        {"endpoint: \"a b\"", "t.yaml:9:21: invalid endpoint \"a b\": invalid host name\n"},
        {"endpoint: \"ftp://h:1\"", "t.yaml:9:21: invalid endpoint \"ftp://h:1\": the scheme must be http:// or https://\n"},
        {"endpoint: \"https://\"", "t.yaml:9:21: invalid endpoint \"https://\": missing host\n"},
        {"endpoint: \"http:///v1\"", "t.yaml:9:21: invalid endpoint \"http:///v1\": missing host\n"},
        {"endpoint: \"/v1\"", "t.yaml:9:21: invalid endpoint \"/v1\": missing host\n"},
        {"endpoint: \"http://u@h/v1\"", "t.yaml:9:21: invalid endpoint \"http://u@h/v1\": invalid host name\n"},
        {"endpoint: \"h:x/v1\"", "t.yaml:9:21: invalid endpoint \"h:x/v1\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"http://h:1?x\"", "t.yaml:9:21: invalid endpoint \"http://h:1?x\": port must be an integer between 1 and 65535\n"},
        {"endpoint: \"\"", "t.yaml:9:21: endpoint must not be empty\n"},
        {"endpoint: 8080", "t.yaml:9:21: expected a string, got an integer\n"},
        {"base_url: ftp://h", "t.yaml:9:21: invalid base_url \"ftp://h\": the scheme must be http:// or https://\n"},
        {"base_url: h:80", "t.yaml:9:21: invalid base_url \"h:80\": the scheme must be http:// or https://\n"},
        {"base_url: http://", "t.yaml:9:21: invalid base_url \"http://\": missing host\n"},
        {"base_url: http://u:p@h/v1",
         "t.yaml:9:21: invalid base_url \"http://u:p@h/v1\": user info (user@host) is not allowed; use api_key / "
         "auth_header\n"},
        {"base_url: http://h/v1?x=1", "t.yaml:9:21: invalid base_url \"http://h/v1?x=1\": a query or fragment is not allowed\n"},
        {"base_url: \"http://h/a b\"",
         "t.yaml:9:21: invalid base_url \"http://h/a b\": the path must be printable ASCII without spaces "
         "(percent-encode the rest)\n"},
        {"{endpoint: h, protocol: HTTP}", "t.yaml:9:35: protocol must be \"http\", \"https\" or \"h2\", got \"HTTP\"\n"},
        {"{endpoint: h, protocol: h2c}", "t.yaml:9:35: protocol must be \"http\", \"https\" or \"h2\", got \"h2c\"\n"},
        {"{endpoint: h, base_url: \"http://h\"}", "t.yaml:9:35: set either endpoint or base_url, not both\n"},
        {"{name: x}", "t.yaml:9:11: missing required key \"endpoint\" (or \"base_url\")\n"},
        {"{endpoint: h, weight: 0}", "t.yaml:9:33: weight must be between 1 and 1000000, got 0\n"},
        {"{endpoint: h, weight: -1}", "t.yaml:9:33: weight must be between 1 and 1000000, got -1\n"},
        {"{endpoint: h, weight: 1.5}", "t.yaml:9:33: expected an integer, got a float\n"},
        {"{endpoint: h, name: \"\"}", "t.yaml:9:31: name must not be empty\n"},
        {"{endpoint: h, bogus: 1}", "t.yaml:9:25: unknown key \"bogus\"\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_backend_error(rows[i].item, rows[i].error);
}

static void test_backend_names(void **state)
{
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS_OPEN
                              "        - endpoint: a\n"
                              "        - {name: named, endpoint: b}\n"
                              "        - endpoint: c\n");
    assert_string_equal(c->models[0].backends[0].name, "primary");
    assert_string_equal(c->models[0].backends[1].name, "named");
    assert_string_equal(c->models[0].backends[2].name, "backend-3");
    vsr_config_free(c);

    expect_errors(HEAD LISTENERS PROVIDERS_OPEN
                  "        - {name: x, endpoint: a}\n"
                  "        - {name: x, endpoint: b}\n"
                  "        - endpoint: c\n"
                  "        - {name: backend-3, endpoint: d}\n",
                  "t.yaml:10:18: duplicate backend name \"x\" (first defined at 9:18)\n"
                  "t.yaml:12:18: duplicate backend name \"backend-3\" (first defined at 11:11)\n");
}

/* ---- errors ---------------------------------------------------------------- */

static void test_type_errors(void **state)
{
    expect_errors(HEAD
                  "listeners:\n"
                  "  - name: l\n"
                  "    port: \"8080\"\n" PROVIDERS,
                  "t.yaml:4:11: expected an integer, got a string (\"8080\" is quoted)\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - name: true\n"
                  "    port:\n" PROVIDERS,
                  "t.yaml:3:11: expected a string, got a boolean\n"
                  "t.yaml:4:10: expected an integer, got null\n");
    expect_errors(HEAD "listeners: {name: l, port: 1}\n" PROVIDERS, "t.yaml:2:12: expected a list, got a mapping\n");
    expect_errors(HEAD "listeners: [l]\n" PROVIDERS, "t.yaml:2:13: expected a mapping, got a string\n");
    expect_errors(HEAD LISTENERS "providers: models\n", "t.yaml:5:12: expected a mapping, got a string\n");
    expect_errors(HEAD LISTENERS "providers: {models: {name: m}}\n", "t.yaml:5:21: expected a list, got a mapping\n");
    expect_errors(HEAD LISTENERS "providers: {defaults: [], models: [{name: m, backend_refs: [{endpoint: h}]}]}\n",
                  "t.yaml:5:23: expected a mapping, got a list\n");
    expect_errors(HEAD LISTENERS "    timeout: true\n" PROVIDERS,
                  "t.yaml:5:14: expected a duration (e.g. \"300s\") or a number of seconds, got a boolean\n");
    expect_errors(HEAD LISTENERS "    max_connections: 1e3\n" PROVIDERS,
                  "t.yaml:5:22: expected an integer, got a float\n");
    expect_errors(HEAD LISTENERS "    ? [a]\n    : 1\n" PROVIDERS, "t.yaml:5:7: expected a string key, got a list\n");
    /* the quoting hint only where dropping the quotes would give the expected type */
    expect_errors(HEAD "listeners: [{name: a, port: 'http'}]\n" PROVIDERS,
                  "t.yaml:2:29: expected an integer, got a string\n");
    expect_errors(HEAD "listeners: \"[]\"\n" PROVIDERS, "t.yaml:2:12: expected a list, got a string\n");
    expect_errors("|\n  version: v0.3\n", "t.yaml:1:1: expected a mapping, got a string\n");
}

static void test_value_errors(void **state)
{
    expect_errors(HEAD LISTENERS "    address: localhost\n" PROVIDERS,
                  "t.yaml:5:14: address must be an IPv4 or IPv6 address, got \"localhost\"\n");
    expect_errors(HEAD LISTENERS "    address: \"[::1]\"\n" PROVIDERS,
                  "t.yaml:5:14: address must be an IPv4 or IPv6 address, got \"[::1]\"\n");
    /* a bad address is not taken for the default: no follow-on duplicate */
    expect_errors(HEAD
                  "listeners:\n"
                  "  - {name: a, port: 80, address: my-host}\n"
                  "  - {name: b, port: 80}\n" PROVIDERS,
                  "t.yaml:3:34: address must be an IPv4 or IPv6 address, got \"my-host\"\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - {name: a, port: 0}\n"
                  "  - {name: b, port: 65536}\n"
                  "  - {name: c, port: 99999999999999999999}\n"
                  "  - {name: d, port: -1}\n" PROVIDERS,
                  "t.yaml:3:21: port must be between 1 and 65535, got 0\n"
                  "t.yaml:4:21: port must be between 1 and 65535, got 65536\n"
                  "t.yaml:5:21: port must be between 1 and 65535, got 99999999999999999999\n"
                  "t.yaml:6:21: port must be between 1 and 65535, got -1\n");
    expect_errors(HEAD LISTENERS "    timeout: 5 seconds\n" PROVIDERS,
                  "t.yaml:5:14: invalid duration \"5 seconds\" (use e.g. \"300s\", \"1.5s\", \"250ms\", \"5m\", \"1h\")\n");
    expect_errors(HEAD LISTENERS "    timeout: 0s\n" PROVIDERS, "t.yaml:5:14: timeout must be greater than 0\n");
    expect_errors(HEAD LISTENERS "    timeout: 0\n" PROVIDERS,
                  "t.yaml:5:14: timeout must be between 1 and 1000000000 seconds, got 0\n");
    expect_errors(HEAD LISTENERS "    max_request_body_bytes: 0\n    max_connections: 4294967296\n" PROVIDERS,
                  "t.yaml:5:29: max_request_body_bytes must be at least 1, got 0\n"
                  "t.yaml:6:22: max_connections must be between 1 and 4294967295, got 4294967296\n");
    expect_errors(HEAD LISTENERS "    name: \"a\\nb\"\n" PROVIDERS,
                  "t.yaml:5:5: duplicate key \"name\" (first at 3:5)\n");
    expect_errors(HEAD "listeners: [{name: \"a\\r\\nb\", port: 1}]\n" PROVIDERS,
                  "t.yaml:2:20: name must not contain control characters\n");
}

static void test_version(void **state)
{
    expect_errors("version: v0.2\n" LISTENERS PROVIDERS, "t.yaml:1:10: unsupported version \"v0.2\" (vsr reads \"v0.3\")\n");
    expect_errors("version: 0.3\n" LISTENERS PROVIDERS, "t.yaml:1:10: expected the string \"v0.3\", got a float\n");
    expect_errors("version: \"v0.3\\0\"\n" LISTENERS PROVIDERS,
                  "t.yaml:1:10: unsupported version \"v0.3\\x00\" (vsr reads \"v0.3\")\n");
    vsr_config_t *c = load_ok("version: 'v0.3'\n" LISTENERS PROVIDERS);
    vsr_config_free(c);
}

/* What the reference takes and vsr follows, with a warning where the
 * document is likely wrong. */
static void test_reference_leniencies(void **state)
{
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS
                              "routing:\n"
                              "  signals:\n"
                              "    keywords:\n"
                              "      - {name: any, keywords: [\"\"]}\n"
                              "      - {name: fz, keywords: [hello], method: fuzzy, fuzzy_threshold: 82}\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      plugins:\n"
                              "        - {type: system_prompt, configuration: {mode: append, system_prompt: x}}\n"
                              "global:\n"
                              "  services:\n"
                              "    observability:\n"
                              "      tracing:\n"
                              "        resource: {service_name: svc, service_version: \"\"}\n");
    const vsr_recipe_conf_t *r = &c->recipes[0];
    assert_int_equal(r->signals.keywords[0].keywords.n, 1);
    assert_string_equal(r->signals.keywords[0].keywords.items[0], "");
    assert_int_equal(r->signals.keywords[1].fuzzy_threshold, 82);
    assert_int_equal(r->decisions[0].plugins[0].u.system_prompt.insert, 0); /* append = replace */
    assert_null(c->tracing_service_version);
    vsr_config_free(c);
}

/* decisions[].emits: one retention directive, tri-state fields. */
static void test_emits_retention(void **state)
{
#define EMITS(x) HEAD LISTENERS PROVIDERS "routing:\n  decisions:\n    - name: d\n      emits: " x "\n"
    vsr_config_t *c = load_ok(EMITS("[{kind: retention, retention: {ttl_turns: 0, prefer_prefix_retention: true}}]"));
    const vsr_retention_conf_t *r = &c->recipes[0].decisions[0].retention;
    assert_true(r->present);
    assert_true(r->has_ttl_turns && r->ttl_turns == 0);
    assert_true(r->has_prefer_prefix_retention && r->prefer_prefix_retention);
    assert_false(r->has_drop || r->has_keep_current_model);
    assert_int_equal(c->n_unimplemented, 0);
    vsr_config_free(c);
    expect_errors(EMITS("[{kind: retention, retention: {drop: true, ttl_turns: 3}}]"),
                  "t.yaml:13:68: retention: drop: true and a positive ttl_turns exclude each other\n");
    expect_errors(EMITS("[{kind: retention}, {kind: retention}]"),
                  "t.yaml:13:41: a decision emits at most one retention directive\n");
    expect_errors(EMITS("[{kind: retention, retention: {drop: 1}}]"),
                  "t.yaml:13:51: expected a boolean (true or false), got an integer\n");
#undef EMITS
}

/* No listeners (absent, null or []): the reference CLI's default listener. */
static void test_default_listener(void **state)
{
    const char *docs[] = {HEAD PROVIDERS, HEAD "listeners: []\n" PROVIDERS, HEAD "listeners:\n" PROVIDERS};
    for (size_t i = 0; i < VSR_ARRAY_LEN(docs); i++) {
        vsr_config_t *c = load_ok(docs[i]);
        assert_int_equal(c->n_listeners, 1);
        assert_true(c->listeners_defaulted);
        assert_string_equal(c->listeners[0].name, "http-8899");
        assert_string_equal(c->listeners[0].address, "0.0.0.0");
        assert_int_equal(c->listeners[0].port, 8899);
        assert_int_equal(c->listeners[0].timeout_ms, VSR_DEFAULT_LISTENER_TIMEOUT_MS);
        vsr_config_free(c);
    }
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS);
    assert_false(c->listeners_defaulted);
    vsr_config_free(c);
}

static void test_missing_required(void **state)
{
    expect_errors("listeners: []\n"
                  "providers: {}\n",
                  "t.yaml:1:1: missing required key \"version\"\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - address: 127.0.0.1\n" PROVIDERS,
                  "t.yaml:3:5: missing required key \"name\"\n"
                  "t.yaml:3:5: missing required key \"port\"\n");
    expect_errors(HEAD LISTENERS
                  "providers:\n"
                  "  models:\n"
                  "    - provider_model_id: x\n"
                  "    - name: y\n"
                  "      backend_refs: []\n",
                  "t.yaml:7:7: missing required key \"name\"\n");
    /* providers and providers.models are optional, as in the reference (a warning says no request has a model to
     * go to); a Kubernetes base takes them from the IntelligentPool */
    static const char *const no_models[] = {HEAD, HEAD LISTENERS "providers: {}\n",
                                            HEAD LISTENERS "providers:\n  models: []\n",
                                            HEAD "routing: {decisions: [{name: d, rules: {operator: AND, conditions: "
                                                 "[]}}]}\n"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(no_models); i++) {
        vsr_config_t *nm = load_ok(no_models[i]);
        assert_int_equal(nm->n_models, 0);
        vsr_config_free(nm);
    }
    vsr_config_t *c = load_ok(HEAD LISTENERS "providers: {defaults: {reasoning_effort: low}}\n"
                              "global: {router: {config_source: kubernetes}}\n");
    assert_int_equal(c->n_models, 0);
    vsr_config_free(c);
    c = load_ok(HEAD LISTENERS "providers: {models: []}\nglobal: {router: {config_source: kubernetes}}\n");
    assert_int_equal(c->n_models, 0);
    vsr_config_free(c);
    /* with no models, a default model or a modelRef still names nothing */
    expect_errors(HEAD LISTENERS "providers: {defaults: {model: m}}\n",
                  "t.yaml:5:31: default model \"m\" is not defined in providers.models (nor as a LoRA in "
                  "routing.modelCards)\n");
}

static void test_unknown_keys(void **state)
{
    expect_errors(HEAD LISTENERS "    listen: 1\n" PROVIDERS "extra: 1\n"
                  "providers_: 2\n",
                  "t.yaml:5:5: unknown key \"listen\"\n"
                  "t.yaml:11:1: unknown key \"extra\"\n"
                  "t.yaml:12:1: unknown key \"providers_\"; did you mean \"providers\"?\n");
    expect_errors(HEAD LISTENERS PROVIDERS "      loras: [{name: x}]\n"
                                           "  default: {model: m}\n",
                  "t.yaml:10:7: unknown key \"loras\"\n"
                  "t.yaml:11:3: unknown key \"default\"; did you mean \"defaults\"?\n");
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults: {modle: m}\n", "t.yaml:10:14: unknown key \"modle\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "<<: {a: 1}\n", "t.yaml:10:1: merge keys (<<) are not supported\n");
}

static void test_default_model_checks(void **state)
{
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                           "    model: m\n"
                                           "    default_model: m\n",
                  "t.yaml:12:5: \"model\" and \"default_model\" are the same setting (first at 11:5); set only one\n");
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                           "    default_model: nope\n",
                  "t.yaml:11:20: default model \"nope\" is not defined in providers.models (nor as a LoRA in "
                  "routing.modelCards)\n");
    /* a LoRA of a model card resolves to {the card's provider model, the LoRA} (ref §1.14) */
    vsr_config_t *c = load_ok(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                                      "    model: sql-expert\n"
                                                      "routing:\n"
                                                      "  modelCards:\n"
                                                      "    - name: m\n"
                                                      "      loras: [{name: sql-expert}]\n");
    assert_string_equal(c->default_model, "m");
    assert_string_equal(c->default_lora, "sql-expert");
    assert_string_equal(vsr_config_default_model(c)->name, "m");
    vsr_config_free(c);
    c = load_ok(HEAD LISTENERS PROVIDERS "  defaults:\n    model: m\n");
    assert_null(c->default_lora);
    vsr_config_free(c);
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                           "    model: sql-expert\n"
                                           "routing:\n"
                                           "  modelCards:\n"
                                           "    - name: other\n"
                                           "      loras: [{name: sql-expert}]\n",
                  "t.yaml:11:12: default model \"sql-expert\" is a LoRA of model card \"other\", which is not defined "
                  "in providers.models\n");
    expect_errors(HEAD LISTENERS PROVIDERS "  defaults:\n"
                                           "    reasoning_effort: low\n"
                                           "    default_reasoning_effort: high\n",
                  "t.yaml:12:5: \"reasoning_effort\" and \"default_reasoning_effort\" are the same setting (first at "
                  "11:5); set only one\n");
}

static void test_duplicates(void **state)
{
    expect_errors(HEAD HEAD LISTENERS PROVIDERS, "t.yaml:2:1: duplicate key \"version\" (first at 1:1)\n");
    /* a key no schema has: its canonical form would not parse back (YAML's implicit-key limit) */
    {
        char doc[1024];
        snprintf(doc, sizeof(doc), HEAD "k%0300d: 1\n", 7);
        expect_errors(doc, "t.yaml:2:1: a key longer than 256 bytes\n"
                           "t.yaml:2:1: unknown key \"k000000000000000000000000000000000000000000000000000000000000000...\"\n");
    }
    /* duplicates are found in unimplemented subtrees too */
    expect_errors(HEAD LISTENERS PROVIDERS "routing:\n"
                                           "  strategy: priority\n"
                                           "  strategy: confidence\n",
                  "t.yaml:12:3: duplicate key \"strategy\" (first at 11:3)\n");
    expect_errors(HEAD
                  "listeners:\n"
                  "  - {name: a, port: 80}\n"
                  "  - {name: a, port: 81}\n"
                  "  - {name: b, port: 80, address: 0.0.0.0}\n"
                  "  - {name: c, port: 80, address: \"::\"}\n"
                  "  - {name: d, port: 80, address: \"0:0::0\"}\n"
                  "  - {name: e, port: 80, address: 127.0.0.1}\n" PROVIDERS,
                  "t.yaml:4:12: duplicate listener name \"a\" (first defined at 3:12)\n"
                  "t.yaml:5:21: duplicate listener address \"0.0.0.0:80\" (first defined at 3:21)\n"
                  "t.yaml:7:21: duplicate listener address \"[::]:80\" (first defined at 6:21)\n");
    expect_errors(HEAD LISTENERS
                  "providers:\n"
                  "  models:\n"
                  "    - {name: m, backend_refs: [{endpoint: a}]}\n"
                  "    - {name: m, backend_refs: [{endpoint: b}]}\n",
                  "t.yaml:8:14: duplicate model name \"m\" (first defined at 7:14)\n");
}

static void test_several_errors_in_one_run(void **state)
{
    expect_errors("version: v0.4\n"
                  "listeners:\n"
                  "  - name: a\n"
                  "    port: \"80\"\n"
                  "    timeout: forever\n"
                  "  - name: a\n"
                  "    port: 81\n"
                  "    colour: blue\n"
                  "providers:\n"
                  "  defaults: {model: ghost}\n"
                  "  models:\n"
                  "    - name: m\n"
                  "      weight: 3\n"
                  "      backend_refs:\n"
                  "        - endpoint: \"h:99999\"\n"
                  "        - base_url: https://x\n",
                  "t.yaml:1:10: unsupported version \"v0.4\" (vsr reads \"v0.3\")\n"
                  "t.yaml:4:11: expected an integer, got a string (\"80\" is quoted)\n"
                  "t.yaml:5:14: invalid duration \"forever\" (use e.g. \"300s\", \"1.5s\", \"250ms\", \"5m\", \"1h\")\n"
                  "t.yaml:8:5: unknown key \"colour\"\n"
                  "t.yaml:13:7: unknown key \"weight\"\n"
                  "t.yaml:15:21: invalid endpoint \"h:99999\": port must be an integer between 1 and 65535\n"
                  "t.yaml:6:11: duplicate listener name \"a\" (first defined at 3:11)\n"
                  "t.yaml:10:21: default model \"ghost\" is not defined in providers.models (nor as a LoRA in "
                  "routing.modelCards)\n");
}

static void test_error_cap(void **state)
{
    vsr_buf_t doc, want;
    vsr_buf_init(&doc, 0);
    vsr_buf_init(&want, 0);
    vsr_buf_append_cstr(&doc, HEAD LISTENERS PROVIDERS);
    for (int i = 0; i < 60; i++) {
        vsr_buf_printf(&doc, "k%d: 1\n", i);
        if (i < 50)
            vsr_buf_printf(&want, "t.yaml:%d:1: unknown key \"k%d\"\n", 10 + i, i);
    }
    vsr_buf_append_cstr(&want, "t.yaml:60:1: too many errors; the rest are not shown\n");
    vsr_buf_append(&doc, "", 1);
    vsr_buf_append(&want, "", 1);
    expect_errors(doc.data, want.data);
    vsr_buf_free(&doc);
    vsr_buf_free(&want);
}

/* ---- YAML-level problems ------------------------------------------------------ */

static void test_yaml_syntax_errors(void **state)
{
    expect_errors(HEAD "listeners: [a, b\n", "t.yaml:3:1: did not find expected ',' or ']' (while parsing a flow "
                                               "sequence at 2:12)\n");
    expect_errors(HEAD "listeners: a: b\n", "t.yaml:2:13: mapping values are not allowed in this context\n");
    expect_errors(HEAD "listeners:\n  - a\n b: 1\n", "t.yaml:4:2: did not find expected key (while parsing a block "
                                                     "mapping at 1:1)\n");
    expect_errors(HEAD "x: \"\\q\"\n", "t.yaml:2:5: found unknown escape character (while parsing a quoted scalar at "
                                       "2:4)\n");
    /* invalid UTF-8 comes from the reader: a byte offset turned into line/col */
    expect_errors(HEAD "x: \xff\n", "t.yaml:2:4: invalid leading UTF-8 octet (byte 0xff)\n");
    expect_errors(HEAD "x: \x01\n", "t.yaml:2:4: control characters are not allowed (byte 0x01)\n");
    /* nesting is bounded on the event stream, before libyaml's scanner gets
     * slow on it: the root mapping, then flow collections up to the bound */
    vsr_buf_t doc, want;
    vsr_buf_init(&doc, 0);
    vsr_buf_init(&want, 0);
    vsr_buf_append_cstr(&doc, HEAD "x: ");
    for (int i = 0; i < 1 << 18; i++) /* 1 MiB, unclosed */
        vsr_buf_append_cstr(&doc, "{a: ");
    vsr_buf_append(&doc, "", 1);
    vsr_buf_printf(&want, "t.yaml:2:%u: nesting deeper than %u levels\n", 4 + 4 * (VSR_CONFIG_MAX_DEPTH - 1),
                   VSR_CONFIG_MAX_DEPTH);
    vsr_buf_append(&want, "", 1);
    expect_errors(doc.data, want.data);
    /* exactly at the bound is fine for the parser */
    vsr_buf_reset(&doc);
    vsr_buf_append_cstr(&doc, HEAD LISTENERS PROVIDERS "evaluation: ");
    for (unsigned i = 0; i < VSR_CONFIG_MAX_DEPTH - 1; i++)
        vsr_buf_append_cstr(&doc, "[");
    for (unsigned i = 0; i < VSR_CONFIG_MAX_DEPTH - 1; i++)
        vsr_buf_append_cstr(&doc, "]");
    vsr_buf_append(&doc, "\n", 2);
    vsr_config_free(load_ok(doc.data));
    vsr_buf_free(&doc);
    vsr_buf_free(&want);
}

static void test_document_shape(void **state)
{
    expect_errors("", "t.yaml:1:1: the document is empty\n");
    expect_errors("# just a comment\n\n", "t.yaml:1:1: the document is empty\n");
    expect_errors("---\n", "t.yaml:2:1: the document is empty\n");
    expect_errors("~\n", "t.yaml:1:1: the document is empty\n");
    expect_errors("- a\n", "t.yaml:1:1: expected a mapping, got a list\n");
    expect_errors("v0.3\n", "t.yaml:1:1: expected a mapping, got a string\n");
    /* only the first document counts, as in the reference: an error in
     * the first is still one, and the first must not be empty */
    expect_errors(HEAD LISTENERS "    port: x\n" PROVIDERS "---\n" HEAD,
                  "t.yaml:5:5: duplicate key \"port\" (first at 4:5)\n");
    expect_errors("---\n---\n" HEAD LISTENERS PROVIDERS, "t.yaml:2:1: the document is empty\n");
    /* a NULL/empty buffer is an empty document, not a crash */
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = NULL;
    assert_int_equal(vsr_config_load_string(NULL, NULL, 0, &c, &err), VSR_ERR_INVALID);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, "<string>:1:1: the document is empty\n");
    vsr_buf_free(&err);
}

static void test_alias_errors(void **state)
{
    expect_errors(HEAD LISTENERS PROVIDERS "evaluation: *nope\n", "t.yaml:10:13: undefined alias \"nope\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "evaluation: &r {a: [*r]}\n",
                  "t.yaml:10:21: alias \"r\" refers to a node that contains it\n");
    /* exponential expansion is refused, not computed */
    expect_errors(HEAD LISTENERS PROVIDERS "evaluation:\n"
                                           "  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                                           "  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                                           "  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                                           "  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                                           "  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                                           "  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
                  "t.yaml:15:38: aliases expand to more than 100000 nodes\n");
}

static void test_tag_errors(void **state)
{
    expect_errors(HEAD LISTENERS "    max_connections: !!int many\n" PROVIDERS,
                  "t.yaml:5:22: \"many\" is not a valid \"!!int\" value\n"
                  "t.yaml:5:22: expected an integer, got a string\n");
    expect_errors(HEAD LISTENERS PROVIDERS "evaluation: !custom {a: 1}\n",
                  "t.yaml:10:13: unsupported tag \"!custom\"\n");
    expect_errors(HEAD LISTENERS PROVIDERS "evaluation: !!binary aGVsbG8=\n",
                  "t.yaml:10:13: unsupported tag \"!!binary\"\n");
}

/* ---- files ------------------------------------------------------------------------- */

static void test_file_errors(void **state)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = (vsr_config_t *)0x1;
    assert_int_equal(vsr_config_load_file("tests/unit/configs/does-not-exist.yaml", &c, &err), VSR_ERR_IO);
    assert_null(c);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, "tests/unit/configs/does-not-exist.yaml: No such file or directory\n");
    vsr_buf_reset(&err);
    assert_int_equal(vsr_config_load_file("tests/unit/configs", &c, &err), VSR_ERR_IO);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, "tests/unit/configs: Is a directory\n");
    vsr_buf_free(&err);
    /* err may be NULL: the result code alone */
    assert_int_equal(vsr_config_load_file("tests/unit/configs/does-not-exist.yaml", &c, NULL), VSR_ERR_IO);
    assert_int_equal(vsr_config_load_string("x", "a: 1", 4, &c, NULL), VSR_ERR_INVALID);
    vsr_config_free(NULL);
}

/* Messages of a file load name the file. */
static void test_file_error_names_file(void **state)
{
    char path[] = "/tmp/vsr-test-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *doc = HEAD LISTENERS "    port: 1\n" PROVIDERS;
    assert_int_equal(write(fd, doc, strlen(doc)), (ssize_t)strlen(doc));
    close(fd);
    vsr_buf_t err, want;
    vsr_buf_init(&err, 0);
    vsr_buf_init(&want, 0);
    vsr_config_t *c = NULL;
    assert_int_equal(vsr_config_load_file(path, &c, &err), VSR_ERR_INVALID);
    vsr_buf_printf(&want, "%s:5:5: duplicate key \"port\" (first at 4:5)\n", path);
    vsr_buf_append(&err, "", 1);
    vsr_buf_append(&want, "", 1);
    assert_string_equal(err.data, want.data);
    unlink(path);
    vsr_buf_free(&err);
    vsr_buf_free(&want);
}

/* A stream of several documents loads its first, as the reference's YAML
 * decoder does, with one warning at where the second starts; what follows is
 * not even parsed. */
static void test_second_document_ignored(void **state)
{
    static const struct {
        const char *tail;
        unsigned line, col;
    } rows[] = {
        {"---\n" HEAD LISTENERS PROVIDERS, 10, 1},
        {"...\n---\nnot: [valid\n", 11, 1},
        {"--- {]\n---\n", 10, 1},
        {"...\nunterminated: [\n", 11, 1},
        {"...\n...\n---\n", 12, 1},
        {"...\n", 0, 0}, /* one document, explicitly ended: no warning */
        {"...\n# a comment\n", 0, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char path[] = "/tmp/vsr-test-config-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        char doc[1024];
        int n = snprintf(doc, sizeof(doc), HEAD LISTENERS PROVIDERS "%s", rows[i].tail);
        assert_int_equal(write(fd, doc, (size_t)n), (ssize_t)n);
        close(fd);
        vsr_buf_t err, warn, want;
        vsr_buf_init(&err, 0);
        vsr_buf_init(&warn, 0);
        vsr_buf_init(&want, 0);
        vsr_config_t *c = NULL;
        int rc = vsr_config_load_file_notes(path, &c, &err, &warn, NULL);
        if (rc != VSR_OK)
            fprintf(stderr, "%.*s", (int)err.len, err.data);
        assert_int_equal(rc, VSR_OK);
        assert_int_equal(c->n_models, 1);
        assert_string_equal(c->models[0].name, "m");
        if (rows[i].line > 0)
            vsr_buf_printf(&want,
                       "%s:%u:%u: warning: a second YAML document starts here: it and anything after it are ignored, "
                       "as the reference ignores them (it reads only the first document)\n",
                       path, rows[i].line, rows[i].col);
        vsr_buf_append(&warn, "", 1);
        vsr_buf_append(&want, "", 1);
        assert_string_equal(warn.data, want.data);
        vsr_config_free(c);
        unlink(path);
        vsr_buf_free(&err);
        vsr_buf_free(&warn);
        vsr_buf_free(&want);
    }
}

/* ---- the routing model: capability checks --------------------------------- */

/* HEAD LISTENERS PROVIDERS take lines 1-9 (one model "m"); text starts on line 10. */
#define DOC HEAD LISTENERS PROVIDERS

/* complexity: a rule names one level of a signal, "<signal>:easy|medium|hard" */
static void test_complexity_signals(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(DOC
                              "routing:\n"
                              "  signals:\n"
                              "    complexity:\n"
                              "      - {name: cx, threshold: 0.2, hard: {candidates: [prove it]}, easy: {candidates: [hi]},"
                              " hard_above: 0.3}\n"
                              "  decisions:\n"
                              "    - {name: d, rules: {type: complexity, name: \"cx:hard\"}, modelRefs: [{model: m}]}\n");
    const vsr_signals_conf_t *s = &c->recipes[0].signals;
    assert_int_equal(s->n_complexity, 1);
    assert_string_equal(s->complexity[0].name, "cx");
    assert_true(s->complexity[0].threshold == 0.2);
    assert_true(s->complexity[0].has_hard_above && s->complexity[0].hard_above == 0.3);
    assert_false(s->complexity[0].has_easy_below);
    assert_int_equal(s->complexity[0].hard.candidates.n, 1);
    assert_string_equal(s->complexity[0].easy.candidates.items[0], "hi");
    vsr_config_free(c);
    /* a composer gates every leaf naming a level: the leaf becomes AND(leaf, composer) */
    c = load_ok(DOC
                "routing:\n"
                "  signals:\n"
                "    keywords: [{name: math, keywords: [integral]}]\n"
                "    complexity:\n"
                "      - {name: cx, hard: {candidates: [prove it]}, easy: {candidates: [hi]},"
                " composer: {operator: OR, conditions: [{type: keyword, name: math}]}}\n"
                "  decisions:\n"
                "    - {name: d, rules: {type: complexity, name: \"cx:hard\", on_error: match, on_unknown: fail_request},"
                " modelRefs: [{model: m}]}\n");
    const vsr_rule_conf_t *r = c->recipes[0].decisions[0].rules;
    assert_int_equal(r->kind, VSR_RULE_AND);
    assert_true(r->on_unknown_fail);
    assert_int_equal(r->n_children, 2);
    assert_int_equal(r->children[0].kind, VSR_RULE_LEAF);
    assert_string_equal(r->children[0].name, "cx:hard");
    assert_int_equal(r->children[0].on_error, VSR_ON_ERROR_MATCH);
    assert_int_equal(r->children[1].kind, VSR_RULE_OR);
    assert_string_equal(r->children[1].children[0].name, "math");
    vsr_config_free(c);
    expect_errors(DOC
                  "routing:\n"
                  "  signals:\n"
                  "    complexity:\n"
                  "      - {name: cx, hard: {candidates: [a]}, easy: {candidates: [b]},"
                  " composer: {type: complexity, name: \"cx:easy\"}}\n",
                  "t.yaml:13:80: a complexity composer cannot name a complexity signal\n");
    expect_errors(DOC
                  "routing:\n"
                  "  signals:\n"
                  "    complexity:\n"
                  "      - name: cx\n"
                  "        hard: {candidates: [a], image_candidates: [a.png]}\n"
                  "        easy: {candidates: [b]}\n"
                  "        composer: {operator: AND, conditions: [{type: keyword, name: k}]}\n"
                  "      - {name: \"x:y\", easy_below: 0.5, hard: {candidates: [a]}, easy: {}}\n"
                  "  decisions:\n"
                  "    - name: d\n"
                  "      rules: {operator: OR, conditions: [{type: complexity, name: \"cx:extreme\"},"
                  " {type: complexity, name: cx}, {type: complexity, name: \"no:easy\"}]}\n",
                  "t.yaml:14:51: complexity: image_candidates is not supported yet\n"
                  "t.yaml:17:71: missing required key \"candidates\"\n"
                  "t.yaml:17:16: a complexity signal name must not contain ':' (rules name its levels as "
                  "\"<signal>:easy|medium|hard\")\n"
                  "t.yaml:17:35: easy_below (0.5) is greater than hard_above (0.1)\n"
                  "t.yaml:20:42: complexity condition \"cx:extreme\" must name a level: \"<signal>:easy\", "
                  "\"<signal>:medium\" or \"<signal>:hard\"\n"
                  "t.yaml:16:48: keyword signal \"k\" is not declared in routing.signals.keywords\n"
                  "t.yaml:20:82: complexity condition \"cx\" must name a level: \"<signal>:easy\", "
                  "\"<signal>:medium\" or \"<signal>:hard\"\n"
                  "t.yaml:20:112: complexity signal \"no\" is not declared in routing.signals.complexity\n");
}

/* kb: global.model_catalog.kbs are decoded into every recipe's signals and
 * are part of their hash */
/* classifiers: type local with an inline bank or a model_path JSONL file
 * (relative to the configuration's directory, bounded, errors with the
 * bank's file:line); type llm loads and is recorded as not implemented; a
 * classifier condition takes label and predicate. */
static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define CLS_DOC(bank_line)                                                                                       \
    DOC "routing:\n"                                                                                             \
        "  signals:\n"                                                                                           \
        "    classifiers:\n"                                                                                     \
        "      - name: topic\n"                                                                                  \
        "        labels:\n"                                                                                      \
        "          - {name: cooking, examples: [a recipe for soup, how long to boil eggs]}\n"                     \
        "          - {name: sports, examples: [who won the match]}\n"                                            \
        "      - name: bank\n"                                                                                   \
        "        " bank_line "\n"                                                                                \
        "      - {name: judge, type: llm, model: m, labels: [positive, negative], instructions: say which}\n"    \
        "  decisions:\n"                                                                                         \
        "    - name: d\n"                                                                                        \
        "      rules: {type: classifier, name: topic, label: cooking, predicate: {gte: 0.7}, on_error: match}\n"

static void test_classifier_signals(void **state)
{
    (void)state;
    char dir[] = "/tmp/vsr-cls-XXXXXX", cfg[64], bank[64], want[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(cfg, sizeof cfg, "%s/c.yaml", dir);
    snprintf(bank, sizeof bank, "%s/bank.jsonl", dir);
    write_text(bank, "{\"text\": \"reset my password\", \"label\": \"account\"}\n\n"
                     "{\"text\": \"the invoice is wrong\", \"label\": \"billing\"}\n"
                     "{\"text\": \"I was charged twice\", \"label\": \"billing\"}\n");
    write_text(cfg, CLS_DOC("model_path: bank.jsonl"));
    vsr_config_t *c = load_file_ok(cfg);
    const vsr_signals_conf_t *s = &c->recipes[0].signals;
    assert_int_equal(s->n_classifiers, 3);
    assert_int_equal(s->classifiers[0].type, VSR_CLS_LOCAL);
    assert_true(s->classifiers[0].threshold == VSR_CLS_DEFAULT_THRESHOLD);
    assert_int_equal(s->classifiers[0].n_labels, 2);
    assert_string_equal(s->classifiers[0].labels[1], "sports");
    assert_int_equal(s->classifiers[0].n_examples, 3);
    assert_string_equal(s->classifiers[0].examples[1].text, "how long to boil eggs");
    assert_int_equal(s->classifiers[0].examples[2].label, 1);
    assert_int_equal(s->classifiers[1].n_labels, 2);
    assert_string_equal(s->classifiers[1].labels[0], "account");
    assert_int_equal(s->classifiers[1].n_examples, 3);
    assert_int_equal(s->classifiers[1].examples[2].label, 1);
    assert_int_equal(s->classifiers[2].type, VSR_CLS_LLM);
    assert_string_equal(s->classifiers[2].model, "m");
    assert_string_equal(s->classifiers[2].instructions, "say which");
    for (size_t i = 0; i < c->n_unimplemented; i++) /* type llm asks its model (a chat task) */
        assert_null(strstr(c->unimplemented[i], "type: llm"));
    const vsr_rule_conf_t *r = c->recipes[0].decisions[0].rules;
    assert_string_equal(r->label, "cooking");
    assert_true(r->has_predicate && r->predicate.has_gte && r->predicate.gte == 0.7 && !r->predicate.has_gt);
    assert_int_equal(r->on_error, VSR_ON_ERROR_MATCH);
    /* the bank file is part of the signals' hash */
    char hash[sizeof(c->recipes[0].signals_hash)];
    memcpy(hash, c->recipes[0].signals_hash, sizeof(hash));
    vsr_config_free(c);
    write_text(bank, "{\"text\": \"reset my password\", \"label\": \"account\"}\n"
                     "{\"text\": \"refund please\", \"label\": \"billing\"}\n");
    c = load_file_ok(cfg);
    assert_memory_not_equal(hash, c->recipes[0].signals_hash, sizeof(hash));
    vsr_config_free(c);

    /* the bank's errors name the document's node and the bank's line */
    write_text(bank, "{\"text\": \"reset my password\", \"label\": \"account\"}\n{\"text\": 3, \"label\": \"x\"}\n");
    snprintf(want, sizeof want, "%s:18:21: model_path: %s:2: \"text\" must be a string\n", cfg, bank);
    expect_file_errors(cfg, want);
    write_text(bank, "{\"text\": \"a\", \"label\": \"x\"}\nnot json\n");
    snprintf(want, sizeof want,
             "%s:18:21: model_path: %s:2: expected a JSON object {\"text\": ..., \"label\": ...}\n", cfg, bank);
    expect_file_errors(cfg, want);
    vsr_buf_t big;
    vsr_buf_init(&big, 0);
    vsr_buf_append_cstr(&big, "{\"text\": \"");
    for (int i = 0; i < 4097; i++)
        vsr_buf_append(&big, "x", 1);
    vsr_buf_append_cstr(&big, "\", \"label\": \"x\"}\n");
    vsr_buf_append(&big, "", 1);
    write_text(bank, big.data);
    snprintf(want, sizeof want, "%s:18:21: model_path: %s:1: \"text\" is longer than 4096 bytes\n", cfg, bank);
    expect_file_errors(cfg, want);
    vsr_buf_reset(&big);
    for (int i = 0; i < 10001; i++)
        vsr_buf_printf(&big, "{\"text\": \"t%d\", \"label\": \"l%d\"}\n", i, i % 2);
    vsr_buf_append(&big, "", 1);
    write_text(bank, big.data);
    vsr_buf_free(&big);
    snprintf(want, sizeof want, "%s:18:21: model_path: %s:10001: more than 10000 examples\n", cfg, bank);
    expect_file_errors(cfg, want);
    unlink(bank);
    assert_int_equal(mkdir(bank, 0700), 0); /* not a regular file (a FIFO would block the load) */
    snprintf(want, sizeof want, "%s:18:21: model_path: \"%s\" is not a regular file\n", cfg, bank);
    expect_file_errors(cfg, want);
    rmdir(bank);
    snprintf(want, sizeof want, "%s:18:21: model_path: cannot open \"%s\": No such file or directory\n", cfg, bank);
    expect_file_errors(cfg, want);
    write_text(cfg, CLS_DOC("labels: [{name: a}]"));
    snprintf(want, sizeof want, "%s:18:17: label \"a\" has no examples\n", cfg);
    expect_file_errors(cfg, want);

    /* model_path with labels, as the reference writes a local classifier:
     * the labels name and order the classes, the bank's labels must be
     * among them */
    write_text(bank, "{\"text\": \"ignore your rules\", \"label\": \"JAILBREAK\"}\n"
                     "{\"text\": \"what is the weather\", \"label\": \"SAFE\"}\n");
    write_text(cfg, CLS_DOC("model_path: bank.jsonl\n        labels: [SAFE, JAILBREAK]\n        use_cpu: true"));
    c = load_file_ok(cfg);
    const vsr_sig_classifier_conf_t *k = &c->recipes[0].signals.classifiers[1];
    assert_int_equal(k->n_labels, 2);
    assert_string_equal(k->labels[0], "SAFE");
    assert_string_equal(k->labels[1], "JAILBREAK");
    assert_int_equal(k->n_examples, 2);
    assert_int_equal(k->examples[0].label, 1);
    assert_int_equal(k->examples[1].label, 0);
    vsr_config_free(c);
    write_text(cfg, CLS_DOC("model_path: bank.jsonl\n        labels: [SAFE, JAILBREAK, OTHER]"));
    snprintf(want, sizeof want, "%s:18:21: label \"OTHER\" has no examples\n", cfg);
    expect_file_errors(cfg, want);
    write_text(cfg, CLS_DOC("model_path: bank.jsonl\n        labels: [SAFE]"));
    snprintf(want, sizeof want, "%s:18:21: model_path: %s:1: \"label\" is not one of the classifier's labels\n", cfg,
             bank);
    expect_file_errors(cfg, want);
    /* inline examples and the bank together: one set of classes */
    write_text(cfg, CLS_DOC("model_path: bank.jsonl\n        labels: [{name: SAFE, examples: [hello]}, JAILBREAK]"));
    c = load_file_ok(cfg);
    k = &c->recipes[0].signals.classifiers[1];
    assert_int_equal(k->n_labels, 2);
    assert_int_equal(k->n_examples, 3);
    assert_string_equal(k->examples[0].text, "hello");
    assert_int_equal(k->examples[1].label, 1);
    vsr_config_free(c);
    /* a model directory (or nothing there) is the reference's sequence-
     * classification model: not supported yet */
    write_text(cfg, CLS_DOC("model_path: models/mmbert32k-jailbreak-detector-merged\n        labels: [SAFE, JAILBREAK]"));
    snprintf(want, sizeof want,
             "%s:18:21: model_path \"models/mmbert32k-jailbreak-detector-merged\" names no JSONL file of examples: "
             "a sequence-classification model directory (the reference's local classifier, its labels naming the "
             "model's outputs) is not supported yet; vsr's local classifier reads {\"text\", \"label\"} lines with "
             "those labels\n",
             cfg);
    expect_file_errors(cfg, want);
    write_text(cfg, CLS_DOC("model: m"));
    snprintf(want, sizeof want,
             "%s:18:16: model applies to llm classifiers (a local classifier reads model_path or inline labels)\n"
             "%s:17:9: a local classifier needs labels with examples, or model_path\n", cfg, cfg);
    expect_file_errors(cfg, want);
    unlink(cfg);
    rmdir(dir);

    /* conditions: a predicate needs a bound; label stays a classifier key */
    expect_errors(DOC "routing:\n  signals: {classifiers: [{name: t, labels: [{name: a, examples: [x]}]}]}\n"
                      "  decisions: [{name: d, rules: {type: classifier, name: t, predicate: {}}}]\n",
                  "t.yaml:12:71: a predicate needs at least one of gt, gte, lt, lte\n");
    expect_errors(DOC "routing:\n  signals: {classifiers: [{name: t, labels: [{name: a, examples: [x]}]}]}\n"
                      "  decisions: [{name: d, rules: {type: classifier, name: u}}]\n",
                  "t.yaml:12:32: classifier signal \"u\" is not declared in routing.signals.classifiers\n");
    expect_errors(DOC "routing:\n  signals: {classifiers: [{name: t, labels: [{name: a, examples: [x]}]}]}\n"
                      "  decisions: [{name: d, rules: {type: classifier, name: t, label: b}}]\n",
                  "t.yaml:12:32: classifier \"t\" has no label \"b\"\n");
    /* an llm classifier's model that is no provider model: at its place */
    expect_errors(DOC "routing:\n  signals: {classifiers: [{name: t, type: llm, model: ext, labels: [a, b]}]}\n",
                  "t.yaml:11:55: classifier model \"ext\" is not defined in providers.models nor in "
                  "global.model_catalog.external\n");
    /* external entries need no name, as in the reference: they are found by model_role */
    vsr_config_t *ce = load_ok(DOC "global:\n  model_catalog:\n    external:\n"
                                  "      - {model_role: memory_rewrite, llm_endpoint: {address: h, port: 8000}}\n"
                                  "      - {model_role: guardrail, llm_endpoint: {address: g, port: 9000}}\n"
                                  "    modules: {prompt_guard: {protocol: http_classify}}\n");
    assert_int_equal(ce->n_externals, 2);
    assert_string_equal(ce->externals[0].name, "external[0]");
    assert_string_equal(ce->modules.guard_remote.model, "external[1]");
    vsr_config_free(ce);
}
#undef CLS_DOC

static void test_kb_signals(void **state)
{
    (void)state;
#define KB_DOC(text)                                                                                              \
    DOC "routing:\n"                                                                                              \
        "  signals:\n"                                                                                            \
        "    kb: [{name: k, kb: bank, target: {kind: LABEL, value: a}, match: any, threshold: 0.4}]\n"            \
        "global:\n"                                                                                               \
        "  model_catalog:\n"                                                                                      \
        "    kbs: [{name: bank, documents: [{text: " text ", label: a, group: g}, {text: other}]}]\n"
    vsr_config_t *c = load_ok(KB_DOC("hello"));
    const vsr_signals_conf_t *s = &c->recipes[0].signals;
    assert_int_equal(s->n_kb, 1);
    assert_string_equal(s->kb[0].kb, "bank");
    assert_int_equal(s->kb[0].target.kind, VSR_KB_TARGET_LABEL);
    assert_string_equal(s->kb[0].target.value, "a");
    assert_int_equal(s->kb[0].match, VSR_KB_MATCH_ANY);
    assert_true(s->kb[0].has_threshold && s->kb[0].threshold == 0.4);
    assert_int_equal(s->modules.n_kbs, 1);
    assert_int_equal(s->modules.kbs[0].n_entries, 2);
    assert_string_equal(s->modules.kbs[0].entries[0].group, "g");
    assert_null(s->modules.kbs[0].entries[1].label);
    char hash[sizeof(c->recipes[0].signals_hash)];
    memcpy(hash, c->recipes[0].signals_hash, sizeof(hash));
    vsr_config_free(c);
    c = load_ok(KB_DOC("hello there"));
    assert_memory_not_equal(hash, c->recipes[0].signals_hash, sizeof(hash));
    vsr_config_free(c);
    expect_errors(KB_DOC("'  '"), "t.yaml:15:43: a kb entry's text must not be empty or blank\n");
#undef KB_DOC
    expect_errors(DOC "global: {model_catalog: {kbs: [{name: b, entries: [{text: x}], documents: [{text: y}]},"
                      " {name: c}]}}\n",
                  "t.yaml:10:75: a kb has entries or documents, not both\n"
                  "t.yaml:10:89: a kb needs entries\n");
    /* the reference's kb read from files (source: {path, manifest}): not
     * supported yet, at the source key, and not a missing-entries error */
    vsr_config_t *c2 = load_ok(DOC "global: {model_catalog: {kbs: [{name: b, source: {path: knowledge_bases/b/,"
                                   " manifest: labels.json}}]}}\n");
    assert_int_equal(c2->n_unimplemented, 1);
    assert_string_equal(c2->unimplemented[0], "global.model_catalog.kbs[].source");
    vsr_config_free(c2);
}

#define NO_MEANING " (the reference names this key in its newest schema but defines no fields or behaviour for it; vsr does not guess one)"

static void test_capability_errors(void **state)
{
    static const struct {
        const char *text;
        const char *error;
    } rows[] = {
        {"routing:\n"
         "  signals:\n"
         "    safety:\n"
         "      - {name: e, description: x}\n",
         "t.yaml:13:9: missing required key \"threshold\"\n"},
        {"routing:\n"
         "  decisions:\n"
         "    - name: d\n"
         "      algorithm: {type: automix, automix: {cost_quality_tradeoff: 0.5}}\n",
         "t.yaml:13:25: algorithm type \"automix\" is not supported yet\n"},
        {"routing:\n"
         "  decisions:\n"
         "    - name: d\n"
         "      plugins:\n"
         "        - type: rag\n"
         "          configuration: {enabled: true, backend: milvus, top_k: 3}\n",
         "t.yaml:15:51: rag: backend milvus is not supported yet (use external_api, openai or mcp in front of the "
         "store)\n"},
        {"routing:\n"
         "  decisions:\n"
         "    - name: d\n"
         "      plugins:\n"
         "        - type: image_gen\n"
         "          configuration: {enabled: true, backend: openai}\n",
         "t.yaml:14:17: plugin \"image_gen\" is unsupported: the image_gen route plugin was removed; use the "
         "Responses-API hosted image_generation tool with a vllm-omni modality route\n"},
        {"routing:\n"
         "  decisions:\n"
         "    - name: d\n"
         "      plugins: [{type: semantic-cache, configuration: {mode: fuzzy}}]\n",
         "t.yaml:13:62: mode must be \"semantic\", \"exact\" or \"exact_then_semantic\", got \"fuzzy\"\n"},
        {"routing: {data_policy: {allowed_regions: [eu]}}\n",
         "t.yaml:10:11: routing.data_policy is not supported yet" NO_MEANING "\n"},
        {"routing: {candidate_requirements: {capabilities: [vision]}}\n",
         "t.yaml:10:11: routing.candidate_requirements is not supported yet" NO_MEANING "\n"},
        /* candidateIterations are decoded (cfg_decision.c): the reference's fields */
        {"routing: {decisions: [{name: d, candidateIterations: [{variable: x, source: all}]}]}\n",
         "t.yaml:10:77: source must be \"decision.candidates\" or \"models\", got \"all\"\n"},
        /* action routes to its destination, a model that must exist (cfg_decision.c) */
        {"routing: {decisions: [{name: d, action: {type: route, destination: x}}]}\n",
         "t.yaml:10:68: model \"x\" is not defined in providers.models (nor as a LoRA in routing.modelCards)\n"},
        {"routing: {decisions: [{name: d, rules: {type: safety, name: e}}]}\n",
         "t.yaml:10:40: safety signal \"e\" is not declared in routing.signals.safety\n"},
        {"routing:\n"
         "  signals:\n"
         "    conversation:\n"
         "      - {name: c, feature: {type: exists, source: {type: flow_tool_state}}}\n",
         "t.yaml:13:58: conversation source type \"flow_tool_state\" is not supported yet (the reference's "
         "conversation signal defines no such source; the name points at the pending tool state of its router-flow "
         "workflows, which hand tool calls back to the client, and vsr's workflows never do)\n"},
        {"entrypoints: [{model_names: [x], rules: [{name: r, recipe: default}]}]\n",
         "t.yaml:10:34: entrypoints[].rules is not supported yet" NO_MEANING "\n"},
        {"global: {services: {authz: {providers: [{type: opa}]}}}\n",
         "t.yaml:10:29: global.services.authz.providers is not supported yet\n"},
        {"global: {services: {ratelimit: {providers: [{type: envoy-ratelimit, address: a, domain: d}]}}}\n",
         "t.yaml:10:45: an envoy-ratelimit provider needs address (host:port) and domain\n"},
        /* the auth block is decoded (bearer mode and roles are built): a token is an {env, role} mapping */
        {"global: {services: {management_api: {auth: {mode: bearer, tokens: [t]}}}}\n",
         "t.yaml:10:68: expected a mapping, got a string\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[2048];
        snprintf(yaml, sizeof(yaml), DOC "%s", rows[i].text);
        expect_errors(yaml, rows[i].error);
    }
}

/* config_source: file is the default; kubernetes is accepted and recorded
 * (the file is then the base the cluster's resources complete). */
static void test_config_source(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(DOC);
    assert_int_equal(c->config_source_kubernetes, 0);
    vsr_config_free(c);
    c = load_ok(DOC "global: {router: {config_source: kubernetes}}\n");
    assert_int_equal(c->config_source_kubernetes, 1);
    vsr_config_free(c);
    c = load_ok(DOC "global: {router: {config_source: file}}\n");
    assert_int_equal(c->config_source_kubernetes, 0);
    vsr_config_free(c);
    expect_errors(DOC "global: {router: {config_source: etcd}}\n",
                  "t.yaml:10:34: config_source must be \"file\" or \"kubernetes\", not \"etcd\"\n");
}

/* What is absent, empty or switched off enables nothing: accepted. */
/* domains, jailbreak and pii with global.model_catalog.modules: the
 * families' fields, the modules' defaults and their copies in each recipe,
 * model settings accepted as not implemented, and what is refused. */
static void test_classifier_families(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(DOC
                              "routing:\n"
                              "  signals:\n"
                              "    domains: [{name: coding, description: x, mmlu_categories: [computer science]}]\n"
                              "    jailbreak:\n"
                              "      - {name: jb, method: hybrid, threshold: 0.6, include_history: true,\n"
                              "         jailbreak_patterns: [ignore your rules], benign_patterns: [hello]}\n"
                              "      - {name: jb2}\n"
                              "    pii: [{name: p, pii_types_allowed: [EMAIL_ADDRESS]}]\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      rules: {operator: OR, conditions: [{type: domain, name: coding},\n"
                              "              {type: jailbreak, name: jb}, {type: pii, name: p, on_error: match}]}\n"
                              "global:\n"
                              "  model_catalog:\n"
                              "    modules:\n"
                              "      prompt_guard: {threshold: 0.8, on_error: block, model_id: x, use_cpu: true}\n"
                              "      classifier:\n"
                              "        domain: {threshold: 0.3, fallback_category: general}\n"
                              "        pii_model: {model_id: y}\n"
                              "      hallucination_mitigation: {enabled: true}\n");
    const vsr_signals_conf_t *sg = &c->recipes[0].signals;
    assert_int_equal(sg->n_domains, 1);
    assert_int_equal(sg->domains[0].categories.n, 1);
    assert_int_equal(sg->n_jailbreak, 2);
    assert_int_equal(sg->jailbreak[0].method, VSR_JB_HYBRID);
    assert_true(sg->jailbreak[0].has_method);
    assert_false(sg->jailbreak[1].has_method); /* named no method: VSR_JB_DEFAULT_METHOD when compiled */
    assert_true(sg->jailbreak[0].has_threshold && sg->jailbreak[0].threshold == 0.6);
    assert_true(sg->jailbreak[0].include_history);
    assert_int_equal(sg->jailbreak[0].jailbreak_patterns.n, 1);
    assert_int_equal(sg->jailbreak[1].method, VSR_JB_CLASSIFIER);
    assert_false(sg->jailbreak[1].has_threshold);
    assert_int_equal(sg->pii[0].allowed.n, 1);
    assert_true(sg->modules.guard_threshold == 0.8);
    assert_int_equal(sg->modules.guard_on_error, VSR_ON_ERROR_MATCH);
    assert_true(sg->modules.domain_threshold == 0.3);
    assert_string_equal(sg->modules.domain_fallback, "general");
    assert_true(sg->modules.pii_threshold == VSR_DEFAULT_PII_THRESHOLD);
    int model_id = 0, pii_model = 0, halu = 0;
    for (size_t i = 0; i < c->n_unimplemented; i++) {
        model_id |= strcmp(c->unimplemented[i], "global.model_catalog.modules.prompt_guard.model_id") == 0;
        pii_model |= strcmp(c->unimplemented[i], "global.model_catalog.modules.classifier.pii_model") == 0;
        halu |= strcmp(c->unimplemented[i], "global.model_catalog.modules.hallucination_mitigation") == 0;
    }
    assert_true(model_id && pii_model && !halu);
    assert_true(c->hallucination.enabled); /* the detector's block is read (its local model is not there) */
    char hash[sizeof(c->recipes[0].signals_hash)];
    memcpy(hash, c->recipes[0].signals_hash, sizeof(hash));
    vsr_config_free(c);
    /* without modules: the reference's defaults; and a modules change is a signals change */
    c = load_ok(DOC "routing:\n  signals:\n    domains: [{name: coding}]\n"
                    "    jailbreak:\n"
                    "      - {name: jb, method: hybrid, threshold: 0.6, include_history: true,\n"
                    "         jailbreak_patterns: [ignore your rules], benign_patterns: [hello]}\n"
                    "      - {name: jb2}\n");
    sg = &c->recipes[0].signals;
    assert_true(sg->modules.guard_threshold == VSR_DEFAULT_GUARD_THRESHOLD);
    assert_true(sg->modules.domain_threshold == VSR_DEFAULT_DOMAIN_THRESHOLD);
    assert_string_equal(sg->modules.domain_fallback, "other");
    assert_int_equal(sg->modules.guard_on_error, VSR_ON_ERROR_DEFAULT);
    assert_memory_not_equal(hash, c->recipes[0].signals_hash, sizeof(hash));
    vsr_config_free(c);
    expect_errors(DOC "routing:\n  signals:\n    jailbreak: [{name: j, method: regex, threshold: 2}]\n"
                      "    pii: [{name: p, pii_types_allowed: EMAIL}]\n"
                      "    domains: [{name: d, bogus: 1}]\n"
                      "global: {model_catalog: {modules: {prompt_guard: {on_error: maybe}}}}\n",
                  "t.yaml:12:35: method must be \"classifier\", \"contrastive\" or \"hybrid\", got \"regex\"\n"
                  "t.yaml:12:53: threshold must be between 0 and 1, got 2\n"
                  "t.yaml:13:40: expected a list of strings, got a string\n"
                  "t.yaml:14:25: unknown key \"bogus\"\n"
                  "t.yaml:15:61: on_error must be \"allow\", \"block\", \"no_match\" or \"match\", got \"maybe\"\n");
}

static void test_capability_absent_is_fine(void **state)
{
    vsr_config_t *c = load_ok(DOC
                              "routing:\n"
                              "  projections: {partitions: [], scores: [], mappings: []}\n"
                              "  data_policy: {}\n"
                              "  signals:\n"
                              "    embeddings: []\n"
                              "    pii:\n"
                              "    keywords: [{name: k, keywords: [x]}]\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      candidateIterations: []\n"
                              "      rules: {type: keyword, name: k}\n"
                              "      plugins:\n"
                              "        - {type: rag, configuration: {enabled: false, top_k: 3}}\n"
                              "        - {type: memory, configuration: {enabled: false}}\n"
                              "        - {type: image_gen, configuration: {enabled: false}}\n"
                              "        - {type: tool_selection, configuration: {enabled: false}}\n"
                              "global: {services: {authz: {providers: []}, management_api: {enabled: false, auth: {mode: disabled}}}}\n"
                              "entrypoints: [{model_names: [e], recipe: default, rules: []}]\n");
    const vsr_decision_conf_t *d = &c->recipes[0].decisions[0];
    assert_int_equal(d->n_plugins, 4);
    static const char *const types[] = {"rag", "memory", "image_gen", "tool_selection"};
    assert_int_equal(d->plugins[3].kind, VSR_PLUGIN_TOOL_SELECTION); /* implemented: decoded, switched off */
    assert_int_equal(d->plugins[3].enabled, 0);
    assert_int_equal(d->plugins[1].kind, VSR_PLUGIN_MEMORY); /* implemented: decoded, switched off */
    assert_int_equal(d->plugins[1].enabled, 0);
    assert_int_equal(d->plugins[0].kind, VSR_PLUGIN_RAG); /* implemented: decoded, switched off, no backend needed */
    assert_int_equal(d->plugins[0].enabled, 0);
    for (size_t i = 2; i < 3; i++) {
        assert_int_equal(d->plugins[i].kind, VSR_PLUGIN_UNSUPPORTED);
        assert_int_equal(d->plugins[i].enabled, 0);
        assert_string_equal(d->plugins[i].type, types[i]);
    }
    assert_int_equal(c->n_unimplemented, 0);
    vsr_config_free(c);
}


/* hallucination and shadow_dispatch: keys, defaults, the detector as an external model */
static void test_hallucination_and_shadow(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(DOC
                              "routing:\n"
                              "  signals:\n"
                              "    keywords: [{name: k, keywords: [x]}]\n"
                              "    hallucination: [{name: grounded, description: g, use_nli: true}]\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      rules: {type: keyword, name: k}\n"
                              "      plugins:\n"
                              "        - {type: hallucination, configuration: {enabled: true, hallucination_action: body,\n"
                              "                                               unverified_factual_action: none}}\n"
                              "        - {type: shadow_dispatch, configuration: {enabled: true, model: m}}\n"
                              "global:\n"
                              "  model_catalog:\n"
                              "    modules:\n"
                              "      hallucination_mitigation:\n"
                              "        enabled: true\n"
                              "        detector: {backend: endpoint, endpoint: \"http://127.0.0.1:9/v1\", model_id: judge}\n");
    const vsr_recipe_conf_t *r = &c->recipes[0];
    assert_int_equal(r->signals.n_hallucination, 1);
    assert_string_equal(r->signals.hallucination[0].name, "grounded");
    const vsr_plugin_conf_t *p = r->decisions[0].plugins;
    assert_int_equal(p[0].kind, VSR_PLUGIN_HALLUCINATION);
    assert_int_equal(p[0].u.hallucination.action, VSR_HAL_BODY);
    assert_int_equal(p[0].u.hallucination.unverified_action, VSR_HAL_NONE);
    assert_int_equal(p[0].u.hallucination.include_details, 0);
    assert_int_equal(p[1].kind, VSR_PLUGIN_SHADOW_DISPATCH);
    const vsr_plugin_shadow_dispatch_conf_t *s = &p[1].u.shadow_dispatch;
    assert_string_equal(s->model, "m");
    assert_true(s->sample_rate == 1.0);
    assert_int_equal(s->max_concurrency, 2);
    assert_int_equal(s->timeout_ms, 30000);
    assert_int_equal(s->max_response_bytes, 1048576);
    const vsr_external_conf_t *e = vsr_config_find_external(c, VSR_SLICE_LIT(VSR_HAL_DETECTOR_NAME));
    assert_non_null(e);
    assert_string_equal(e->model.provider_model_id, "judge");
    assert_ptr_equal(e->model.backends, &e->backend);
    assert_string_equal(e->backend.host, "127.0.0.1");
    assert_int_equal(e->backend.port, 9);
    assert_string_equal(e->backend.path_prefix, "/v1");
    vsr_config_free(c);
}

/* tool_selection: advanced_filtering, the plugin's fallback_to_empty, the reference's filter default */
static void test_tool_selection_advanced_keys(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(DOC
                              "routing:\n"
                              "  signals: {keywords: [{name: k, keywords: [x]}]}\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      rules: {type: keyword, name: k}\n"
                              "      plugins:\n"
                              "        - type: tool_selection\n"
                              "          configuration:\n"
                              "            mode: filter\n"
                              "            fallback_to_empty: true\n"
                              "            advanced_filtering:\n"
                              "              enabled: true\n"
                              "              retrieval_strategy: weighted\n"
                              "              candidate_pool_size: 20\n"
                              "              min_lexical_overlap: 1\n"
                              "              min_combined_score: 0.1\n"
                              "              weights: {lexical: 0.5, name: 0.25}\n"
                              "              use_category_filter: true\n"
                              "              category_confidence_threshold: 0.6\n"
                              "              block_tools: [shell]\n");
    const vsr_plugin_tool_selection_conf_t *t = &c->recipes[0].decisions[0].plugins[0].u.tool_selection;
    assert_true(t->fallback_to_empty);
    assert_true(t->relevance_threshold == 0.25);
    assert_true(t->advanced);
    assert_int_equal(t->candidate_pool_size, 20);
    assert_int_equal(t->min_lexical_overlap, 1);
    assert_true(t->min_combined_score == 0.1);
    assert_true(t->w_embed == 0 && t->w_lexical == 0.5 && t->w_name == 0.25);
    assert_true(t->use_category_filter && t->category_confidence_threshold == 0.6);
    assert_int_equal(t->af_block.n, 1);
    vsr_config_free(c);
    expect_errors(DOC "routing:\n"
                      "  decisions:\n"
                      "    - name: d\n"
                      "      plugins:\n"
                      "        - {type: tool_selection, configuration: {mode: filter, advanced_filtering: "
                      "{retrieval_strategy: hybrid_history}}}\n",
                  "t.yaml:14:105: tool_selection: advanced_filtering.retrieval_strategy hybrid_history is not "
                  "supported yet (use weighted)\n");
}

/* router_replay: the plugin's keys and defaults; global.services.router_replay */
static void test_router_replay(void **state)
{
    vsr_config_t *c = load_ok(DOC
                              "routing:\n"
                              "  signals: {keywords: [{name: k, keywords: [x]}]}\n"
                              "  decisions:\n"
                              "    - name: d\n"
                              "      rules: {type: keyword, name: k}\n"
                              "      plugins:\n"
                              "        - type: router_replay\n"
                              "          configuration: {enabled: true, max_records: 7, capture_request_body: false,\n"
                              "                          max_body_bytes: 10, max_tool_trace_bytes: 99, max_tool_trace_steps: 3}\n"
                              "    - name: e\n"
                              "      rules: {type: keyword, name: k}\n"
                              "      plugins: [{type: router_replay}]\n");
    const vsr_plugin_conf_t *p = &c->recipes[0].decisions[0].plugins[0];
    assert_int_equal(p->kind, VSR_PLUGIN_ROUTER_REPLAY);
    assert_int_equal(p->u.router_replay.enabled, 1);
    assert_int_equal(p->u.router_replay.max_records, 7);
    assert_int_equal(p->u.router_replay.capture_request_body, 0);
    assert_int_equal(p->u.router_replay.capture_response_body, 1);
    assert_int_equal(p->u.router_replay.max_body_bytes, 10);
    assert_int_equal(p->u.router_replay.max_tool_trace_bytes, 99);
    assert_int_equal(p->u.router_replay.max_tool_trace_steps, 3);
    const vsr_plugin_router_replay_conf_t *d = &c->recipes[0].decisions[1].plugins[0].u.router_replay;
    assert_int_equal(d->enabled, 1);
    assert_int_equal(d->max_records, 1000);
    assert_int_equal(d->capture_request_body, 1);
    assert_int_equal(d->max_body_bytes, 65536);
    assert_int_equal(d->max_tool_trace_bytes, 16384);
    assert_int_equal(d->max_tool_trace_steps, 32);
    /* no service block: a memory store, on */
    assert_int_equal(c->replay_store.enabled, 1);
    assert_int_equal(c->replay_store.redis, 0);
    assert_int_equal(c->replay_store.ttl_seconds, 2592000);
    assert_string_equal(c->replay_store.redis_key_prefix, "vsr:replay:");
    assert_int_equal(c->n_unimplemented, 0);
    vsr_config_free(c);

    setenv("VSR_TEST_REPLAY_PW", "sekrit", 1);
    c = load_ok(DOC "global:\n"
                    "  services:\n"
                    "    router_replay:\n"
                    "      enabled: true\n"
                    "      store_backend: redis\n"
                    "      ttl_seconds: 60\n"
                    "      async_writes: false\n"
                    "      redis: {address: \"10.0.0.1:6380\", password_env: VSR_TEST_REPLAY_PW, db: 2,\n"
                    "              key_prefix: \"r:\", timeout: 1s}\n");
    assert_int_equal(c->replay_store.redis, 1);
    assert_int_equal(c->replay_store.ttl_seconds, 60);
    assert_int_equal(c->replay_store.async_writes, 0);
    assert_string_equal(c->replay_store.redis_address, "10.0.0.1:6380");
    assert_string_equal(c->replay_store.redis_password, "sekrit");
    assert_int_equal(c->replay_store.redis_db, 2);
    assert_string_equal(c->replay_store.redis_key_prefix, "r:");
    assert_int_equal(c->replay_store.redis_timeout_ms, 1000);
    vsr_config_free(c);
    unsetenv("VSR_TEST_REPLAY_PW");

    /* password: '' is the reference's "no password" (Redis without AUTH) */
    c = load_ok(DOC "global: {services: {router_replay: {store_backend: redis,\n"
                    "  redis: {address: \"10.0.0.1:6380\", password: '',\n"
                    "          connection: {host: 10.0.0.2, password: ''}}}}}\n");
    assert_string_equal(c->replay_store.redis_address, "10.0.0.2:6379");
    assert_null(c->replay_store.redis_password);
    vsr_config_free(c);

    /* postgres: the reference's fields and defaults */
    c = load_ok(DOC "global: {services: {router_replay: {store_backend: postgres,\n"
                    "  postgres: {database: rr, user: vsr}}}}\n");
    assert_int_equal(c->replay_store.postgres, 1);
    assert_int_equal(c->replay_store.redis, 0);
    assert_string_equal(c->replay_store.pg_host, "localhost");
    assert_int_equal(c->replay_store.pg_port, 5432);
    assert_string_equal(c->replay_store.pg_database, "rr");
    assert_string_equal(c->replay_store.pg_user, "vsr");
    assert_null(c->replay_store.pg_password);
    assert_string_equal(c->replay_store.pg_ssl_mode, "disable");
    assert_string_equal(c->replay_store.pg_table_name, "router_replay_records");
    assert_int_equal(c->replay_store.pg_conn_max_lifetime, 300);
    assert_int_equal(c->n_unimplemented, 0);
    vsr_config_free(c);
    c = load_ok(DOC "global: {services: {router_replay: {store_backend: postgres,\n"
                    "  postgres: {host: db.internal, port: 6543, database: rr, user: vsr, password: pw,\n"
                    "             ssl_mode: verify-full, table_name: My_Replays, conn_max_lifetime: 0,\n"
                    "             max_open_conns: 25, max_idle_conns: 5}}}}\n");
    assert_string_equal(c->replay_store.pg_host, "db.internal");
    assert_int_equal(c->replay_store.pg_port, 6543);
    assert_string_equal(c->replay_store.pg_password, "pw");
    assert_string_equal(c->replay_store.pg_ssl_mode, "verify-full");
    assert_string_equal(c->replay_store.pg_table_name, "My_Replays");
    assert_int_equal(c->replay_store.pg_conn_max_lifetime, 0);
    assert_int_equal(c->n_unimplemented, 2); /* the pool's knobs: one writer connection */
    vsr_config_free(c);

    /* no server named and no database or user: the reference's local stack (its CLI's defaults), on localhost;
     * what the document gives stays */
    c = load_ok(DOC "global: {services: {router_replay: {store_backend: postgres}}}\n");
    assert_string_equal(c->replay_store.pg_host, "localhost");
    assert_int_equal(c->replay_store.pg_port, 5432);
    assert_string_equal(c->replay_store.pg_database, "vsr");
    assert_string_equal(c->replay_store.pg_user, "router");
    assert_string_equal(c->replay_store.pg_password, "router-secret");
    vsr_config_free(c);
    c = load_ok(DOC "global: {services: {router_replay: {store_backend: postgres,\n"
                    "  postgres: {port: 6543, database: rr, password: pw}}}}\n");
    assert_string_equal(c->replay_store.pg_host, "localhost");
    assert_int_equal(c->replay_store.pg_port, 6543);
    assert_string_equal(c->replay_store.pg_database, "rr");
    assert_string_equal(c->replay_store.pg_user, "router");
    assert_string_equal(c->replay_store.pg_password, "pw");
    vsr_config_free(c);
}

static void test_router_replay_errors(void **state)
{
    expect_errors(DOC "routing: {decisions: [{name: d, plugins: [{type: router_replay, configuration: "
                      "{max_records: 0}}]}]}\n",
                  "t.yaml:10:94: max_records must be between 1 and 1000000, got 0\n");
    expect_errors(DOC "routing: {decisions: [{name: d, plugins: [{type: router_replay, configuration: "
                      "{max_body_byte: 5}}]}]}\n",
                  "t.yaml:10:81: unknown key \"max_body_byte\"; did you mean \"max_body_bytes\"?\n");
    /* a server named: database and user are required (no server named: the local stack's, below) */
    expect_errors(DOC "global: {services: {router_replay: {store_backend: postgres, postgres: {host: db}}}}\n",
                  "t.yaml:10:72: store_backend postgres needs postgres.database\n");
    expect_errors(DOC "global: {services: {router_replay: {store_backend: postgres, postgres: {host: db, "
                      "database: d}}}}\n",
                  "t.yaml:10:72: store_backend postgres needs postgres.user\n");
    expect_errors(DOC "global: {services: {router_replay: {postgres: {table_name: \"t; DROP TABLE x\"}}}}\n",
                  "t.yaml:10:60: table_name must be 1 to 48 letters, digits and _ (not a digit first), got "
                  "\"t; DROP TABLE x\"\n");
    expect_errors(DOC "global: {services: {router_replay: {postgres: {ssl_mode: on}}}}\n",
                  "t.yaml:10:58: ssl_mode must be \"disable\", \"allow\", \"prefer\", \"require\", \"verify-ca\" or "
                  "\"verify-full\", got \"on\"\n");
    expect_errors(DOC "global: {services: {router_replay: {store_backend: qdrant}}}\n",
                  "t.yaml:10:52: global.services.router_replay.store_backend \"qdrant\" is not supported yet "
                  "(memory, redis and postgres are)\n");
    expect_errors(DOC "global: {services: {router_replay: {store_backend: sqlite}}}\n",
                  "t.yaml:10:52: store_backend must be memory, redis, postgres, milvus or qdrant, got \"sqlite\"\n");
    expect_errors(DOC "global: {services: {router_replay: {ttl_seconds: 0}}}\n",
                  "t.yaml:10:50: ttl_seconds must be between 1 and 31536000, got 0\n");
    expect_errors(DOC "global: {services: {router_replay: {redis: {db: 16}}}}\n",
                  "t.yaml:10:49: db must be between 0 and 15, got 16\n");
}

static void test_unknown_names(void **state)
{
    expect_errors(DOC "routing: {signals: {keyword: [{name: k, keywords: [x]}]}}\n",
                  "t.yaml:10:21: unknown signal family \"keyword\"\n");
    expect_errors(DOC "routing: {decisions: [{name: d, plugins: [{type: jailbreak}]}]}\n",
                  "t.yaml:10:50: unknown plugin type \"jailbreak\"\n");
    /* unknown even when disabled */
    expect_errors(DOC "routing: {decisions: [{name: d, plugins: [{type: pii, configuration: {enabled: false}}]}]}\n",
                  "t.yaml:10:50: unknown plugin type \"pii\"\n");
    expect_errors(DOC "routing: {decisions: [{name: d, algorithm: {type: elo}}]}\n",
                  "t.yaml:10:51: unknown algorithm type \"elo\"\n");
    expect_errors(DOC "routing: {decisions: [{name: d, rules: {type: keywords, name: k}}]}\n",
                  "t.yaml:10:47: unknown condition type \"keywords\"\n");
    expect_errors(DOC "routing: {decisions: [{name: d, algorithm: {type: static, remom: {breadth_schedule: [2]}}}]}\n",
                  "t.yaml:10:59: algorithm.remom only applies to type \"remom\"\n");
    expect_errors(DOC "routing: {decisions: [{name: d, algorithm: {kind: static}}]}\n",
                  "t.yaml:10:44: missing required key \"type\"\n");
    expect_errors(DOC "routing: {modelCard: []}\n", "t.yaml:10:11: unknown key \"modelCard\"; did you mean \"modelCards\"?\n");
    expect_errors(DOC "recipes: [{name: r, routing: {modelCards: [{name: m}]}}]\n",
                  "t.yaml:10:31: modelCards are global: declare them in the top-level routing block, not in a "
                  "recipe\n");
    expect_errors(DOC "global: {store: {}}\n", "t.yaml:10:10: unknown key \"store\"; did you mean \"stores\"?\n");
    expect_errors(DOC "routing: {strategy: fastest}\n",
                  "t.yaml:10:21: strategy must be \"priority\" or \"confidence\", got \"fastest\"\n");
}

/* ---- rule trees ------------------------------------------------------------ */

static void test_rule_shapes(void **state)
{
    vsr_config_t *c = load_ok(DOC
                              "routing:\n"
                              "  signals: {keywords: [{name: a, keywords: [a]}, {name: b, keywords: [b]}]}\n"
                              "  decisions:\n"
                              "    - {name: empty_map, rules: {}}\n"
                              "    - {name: empty_and, rules: {operator: and}}\n"
                              "    - {name: leaf_root, rules: {type: keyword, name: a}}\n"
                              "    - {name: lower_or, rules: {operator: or, conditions: [{type: keyword, name: a}]}}\n"
                              "    - {name: no_rules}\n"
                              "    - {name: null_rules, rules: null}\n");
    const vsr_recipe_conf_t *r = &c->recipes[0];
    assert_null(find_decision(r, "empty_map")->rules);
    const vsr_rule_conf_t *e = find_decision(r, "empty_and")->rules;
    assert_non_null(e);
    assert_int_equal(e->kind, VSR_RULE_AND);
    assert_int_equal(e->n_children, 0);
    assert_leaf(find_decision(r, "leaf_root")->rules, "keyword", "a");
    assert_int_equal(find_decision(r, "lower_or")->rules->kind, VSR_RULE_OR);
    assert_null(find_decision(r, "no_rules")->rules);
    assert_null(find_decision(r, "null_rules")->rules);
    vsr_config_free(c);

#define RULE_DOC(rules)                                            \
    DOC "routing:\n"                                               \
        "  signals: {keywords: [{name: a, keywords: [a]}]}\n"      \
        "  decisions:\n"                                           \
        "    - name: d\n"                                          \
        "      rules: " rules "\n"
    /* the rules value starts at line 14, column 14 */
    static const struct {
        const char *doc;
        const char *error;
    } rows[] = {
        {RULE_DOC("{operator: NOT, conditions: [{type: keyword, name: a}, {type: keyword, name: a}]}"),
         "t.yaml:14:25: NOT needs exactly one condition, got 2\n"},
        {RULE_DOC("{operator: NOT}"), "t.yaml:14:25: NOT needs exactly one condition, got 0\n"},
        {RULE_DOC("{operator: OR}"), "t.yaml:14:25: OR needs at least one condition\n"},
        {RULE_DOC("{operator: XOR, conditions: [{type: keyword, name: a}]}"),
         "t.yaml:14:25: unsupported operator \"XOR\" (expected AND, OR or NOT)\n"},
        {RULE_DOC("{operator: AND, conditions: [{type: keyword, name: a}, {operator: AND}]}"),
         "t.yaml:14:80: AND needs at least one condition\n"},
        {RULE_DOC("{operator: AND, conditions: [{}]}"),
         "t.yaml:14:43: a combination needs an operator and at least one condition\n"},
        {RULE_DOC("{type: keyword, name: a, operator: AND}"),
         "t.yaml:14:14: a condition is either a leaf (type, name) or a combination (operator, conditions), not "
         "both\n"},
        {RULE_DOC("{operator: AND, conditions: [{name: a}]}"),
         "t.yaml:14:43: a leaf condition needs a type (name, label, predicate and on_error only apply to leaf "
         "conditions)\n"},
        {RULE_DOC("{type: keyword}"), "t.yaml:14:14: missing required key \"name\"\n"},
        {RULE_DOC("{type: keyword, name: a, label: x}"),
         "t.yaml:14:39: label only applies to classifier conditions\n"},
        {RULE_DOC("{operator: AND, conditions: [{type: keyword, name: a, on_unknown: no_match}]}"),
         "t.yaml:14:68: on_unknown only applies to the root of rules\n"},
        {RULE_DOC("{operator: AND, conditions: [], on_unknown: maybe}"),
         "t.yaml:14:58: on_unknown must be \"no_match\" or \"fail_request\", got \"maybe\"\n"},
        {RULE_DOC("{operator: AND, conditions: {type: keyword, name: a}}"),
         "t.yaml:14:42: expected a list of conditions, got a mapping\n"},
        {RULE_DOC("{operator: AND, conditions: [a]}"),
         "t.yaml:14:43: expected a condition (a mapping), got a string\n"},
        {RULE_DOC("{operator: 1, conditions: [{type: keyword, name: a}]}"),
         "t.yaml:14:25: expected an operator (AND, OR or NOT), got an integer\n"},
        {RULE_DOC("{type: keyword, name: a, color: red}"), "t.yaml:14:39: unknown key \"color\"\n"},
        {RULE_DOC("[{type: keyword, name: a}]"), "t.yaml:14:14: expected a condition (a mapping), got a list\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_errors(rows[i].doc, rows[i].error);

    /* nesting is bounded (the decoder recurses) */
    vsr_buf_t doc, want;
    vsr_buf_init(&doc, 0);
    vsr_buf_init(&want, 0);
    vsr_buf_append_cstr(&doc, DOC "routing:\n  signals: {keywords: [{name: a, keywords: [a]}]}\n  decisions:\n"
                                  "    - name: d\n      rules: ");
    for (int i = 0; i < 40; i++)
        vsr_buf_append_cstr(&doc, "{operator: NOT, conditions: [");
    vsr_buf_append_cstr(&doc, "{type: keyword, name: a}");
    for (int i = 0; i < 40; i++)
        vsr_buf_append_cstr(&doc, "]}");
    vsr_buf_append(&doc, "\n", 2);
    /* depth 33 starts at column 14 + 33 * 29 */
    vsr_buf_printf(&want, "t.yaml:14:%d: rules are nested more than 32 levels deep\n", 14 + 33 * 29);
    vsr_buf_append(&want, "", 1);
    expect_errors(doc.data, want.data);
    vsr_buf_free(&doc);
    vsr_buf_free(&want);
#undef RULE_DOC
}

/* ---- named references ----------------------------------------------------------- */

static void test_signal_references(void **state)
{
    /* recipes do not inherit the top-level signals */
    expect_errors(DOC
                  "routing:\n"
                  "  signals: {keywords: [{name: code, keywords: [x]}], context: [{name: long, min_tokens: 8K}]}\n"
                  "  decisions:\n"
                  "    - name: d\n"
                  "      rules: {operator: OR, conditions: [{type: keyword, name: code}, {type: context, name: code}]}\n"
                  "recipes:\n"
                  "  - name: r\n"
                  "    routing:\n"
                  "      decisions: [{name: d, rules: {type: keyword, name: code}}]\n",
                  "t.yaml:14:71: context signal \"code\" is not declared in routing.signals.context\n"
                  "t.yaml:18:36: keyword signal \"code\" is not declared in recipe \"r\": routing.signals.keywords\n");
    /* names are unique per family and recipe; the same name in another
     * family or recipe is fine */
    expect_errors(DOC
                  "routing:\n"
                  "  signals:\n"
                  "    keywords: [{name: x, keywords: [a]}, {name: x, keywords: [b]}]\n"
                  "    language: [{name: x}]\n"
                  "  decisions: [{name: d}, {name: e}, {name: d}]\n"
                  "recipes:\n"
                  "  - {name: r, routing: {signals: {keywords: [{name: x, keywords: [a]}]}, decisions: [{name: d}]}}\n",
                  "t.yaml:12:49: duplicate keywords signal name \"x\" (first defined at 12:23)\n"
                  "t.yaml:14:44: duplicate decision name \"d\" (first defined at 14:22)\n");
}

static void test_model_references(void **state)
{
#define REF_DOC(cards, refs)                                                 \
    HEAD LISTENERS                                                           \
    "providers:\n"                                                           \
    "  models:\n"                                                            \
    "    - {name: base, backend_refs: [{endpoint: h}]}\n"                    \
    "routing:\n"                                                             \
    "  modelCards: " cards "\n"                                              \
    "  decisions: [{name: d, modelRefs: " refs "}]\n"
    /* line 10 is the decisions line: its refs start at column 36 */
    static const struct {
        const char *doc;
        const char *error;
    } rows[] = {
        {REF_DOC("[]", "[{model: nope}]"),
         "t.yaml:10:45: model \"nope\" is not defined in providers.models (nor as a LoRA in routing.modelCards)\n"},
        {REF_DOC("[{name: base, loras: [{name: sql}]}]", "[{model: base, lora_name: math}]"),
         "t.yaml:10:62: lora_name \"math\" is not a LoRA of model \"base\" (routing.modelCards[].loras)\n"},
        {REF_DOC("[]", "[{model: base, lora_name: math}]"),
         "t.yaml:10:62: lora_name \"math\" is not a LoRA of model \"base\" (routing.modelCards[].loras)\n"},
        {REF_DOC("[{name: other, loras: [{name: sql}]}]", "[{model: sql}]"),
         "t.yaml:10:45: model \"sql\" is a LoRA of model card \"other\", which is not defined in providers.models\n"},
        {REF_DOC("[{name: base, loras: [{name: sql}]}, {name: b2, loras: [{name: sql}]}]", "[{model: sql}]"),
         "t.yaml:10:45: model \"sql\" is a LoRA of 2 model cards; name the base model and set lora_name\n"},
        {REF_DOC("[{name: base, loras: [{name: sql}]}]", "[{model: sql, lora_name: other}]"),
         "t.yaml:10:61: lora_name \"other\" conflicts with model \"sql\", itself a LoRA of \"base\"\n"},
        {REF_DOC("[{name: base, loras: [{name: sql}, {name: sql}]}]", "[]"),
         "t.yaml:9:57: duplicate LoRA name \"sql\" (first defined at 9:44)\n"},
        {REF_DOC("[{name: base}, {name: base}]", "[]"),
         "t.yaml:9:37: duplicate model card name \"base\" (first defined at 9:23)\n"},
        {REF_DOC("[]", "[{lora_name: x}]"), "t.yaml:10:37: missing required key \"model\"\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_errors(rows[i].doc, rows[i].error);
    /* LoRA by name and with lora_name both resolve */
    vsr_config_t *c = load_ok(REF_DOC("[{name: base, loras: [{name: sql}]}]",
                                      "[{model: sql}, {model: base, lora_name: sql}, {model: sql, lora_name: sql}]"));
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(c->recipes[0].decisions[0].model_refs[i].model, "base");
        assert_string_equal(c->recipes[0].decisions[0].model_refs[i].lora_name, "sql");
    }
    vsr_config_free(c);
#undef REF_DOC
}

static void test_recipe_and_entrypoint_references(void **state)
{
    expect_errors(DOC
                  "recipes:\n"
                  "  - {name: default}\n"
                  "  - {name: a}\n"
                  "  - {name: a}\n"
                  "entrypoints:\n"
                  "  - {model_names: [x], recipe: b}\n"
                  "  - {model_names: [y]}\n",
                  "t.yaml:16:5: missing required key \"recipe\"\n"
                  "t.yaml:11:12: recipe name \"default\" is reserved: it names the top-level routing block\n"
                  "t.yaml:13:12: duplicate recipe name \"a\" (first defined at 12:12)\n"
                  "t.yaml:15:32: recipe \"b\" is not defined (recipes[].name, or \"default\" for the top-level "
                  "routing)\n");
    expect_errors(DOC "entrypoints: [{model_names: [], recipe: default}]\n",
                  "t.yaml:10:29: model_names must not be empty\n");
    expect_errors(DOC "entrypoints: [{model_names: [1], recipe: default}]\n",
                  "t.yaml:10:30: expected a string, got an integer\n");
}

/* Auto names, entrypoint names and provider model names share one namespace. */
static void test_client_name_collisions(void **state)
{
    expect_errors(HEAD LISTENERS
                  "providers:\n"
                  "  models:\n"
                  "    - {name: auto, backend_refs: [{endpoint: h}]}\n"
                  "    - {name: m, backend_refs: [{endpoint: h}]}\n"
                  "entrypoints:\n"
                  "  - {model_names: [e1, m], recipe: default}\n"
                  "  - {model_names: [e1, MoM], recipe: default}\n",
                  "t.yaml:10:24: model name \"m\" is already a provider model name (at 8:14)\n"
                  "t.yaml:11:20: model name \"e1\" is already published by an entrypoint (at 10:20)\n"
                  "t.yaml:11:24: model name \"MoM\" is already an auto model name (a default of "
                  "global.router.auto_model_names)\n");
    expect_errors(DOC
                  "entrypoints: [{model_names: [r/auto], recipe: default}]\n"
                  "global: {router: {auto_model_names: [\" r/auto \"]}}\n",
                  "t.yaml:11:38: model name \"r/auto\" is already published by an entrypoint (at 10:30)\n");
    /* a provider model named like an auto name loads, as in the reference: the auto name wins */
    vsr_config_t *pm = load_ok(HEAD LISTENERS
                               "providers:\n"
                               "  models:\n"
                               "    - {name: MoM, backend_refs: [{endpoint: h}]}\n"
                               "global: {router: {auto_model_names: [MoM, auto]}}\n");
    assert_int_equal(pm->n_models, 1);
    assert_string_equal(pm->auto_model_names.items[0], "MoM");
    vsr_config_free(pm);
    /* with an explicit list, the default names are free again */
    vsr_config_t *c = load_ok(DOC
                              "entrypoints: [{model_names: [auto, MoM], recipe: default}]\n"
                              "global: {router: {auto_model_names: [vllm-sr/auto]}}\n");
    assert_int_equal(c->auto_model_names.n, 1);
    vsr_config_free(c);
}

static void test_auto_model_names(void **state)
{
    static const struct {
        const char *global;
        const char *want[4];
    } rows[] = {
        {"", {"vllm-sr/auto", "auto", "MoM"}},
        {"global: {router: {auto_model_name: custom-auto}}\n", {"vllm-sr/auto", "auto", "custom-auto"}},
        {"global: {router: {auto_model_name: auto}}\n", {"vllm-sr/auto", "auto"}},
        {"global: {router: {auto_model_names: [\" a \", \"\", b, a, \"  \"]}}\n", {"a", "b"}},
        /* an explicit list replaces auto_model_name too */
        {"global: {router: {auto_model_names: [x], auto_model_name: y}}\n", {"x"}},
        /* nothing usable listed: the defaults */
        {"global: {router: {auto_model_names: []}}\n", {"vllm-sr/auto", "auto", "MoM"}},
        {"global: {router: {auto_model_names: [\" \"]}}\n", {"vllm-sr/auto", "auto", "MoM"}},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), DOC "%s", rows[i].global);
        vsr_config_t *c = load_ok(yaml);
        size_t n = 0;
        while (n < 4 && rows[i].want[n])
            n++;
        assert_int_equal(c->auto_model_names.n, n);
        for (size_t j = 0; j < n; j++)
            assert_string_equal(c->auto_model_names.items[j], rows[i].want[j]);
        vsr_config_free(c);
    }
    expect_errors(DOC "global: {router: {auto_model_names: [\"a\\nb\"]}}\n",
                  "t.yaml:10:38: auto_model_names must not contain control characters\n");
}

/* ---- plugins ------------------------------------------------------------------------ */

/* tools and context_compression: decoded, defaults, and every refusal */
static void test_plugin_tools_compression(void **state)
{
#define PLUGIN_DOC(p) DOC "routing:\n  decisions:\n    - name: d\n      plugins:\n        - " p "\n"
    (void)state;
    vsr_config_t *c = load_ok(PLUGIN_DOC("{type: tools, configuration: {mode: filtered, allow_tools: [a, b], "
                                         "block_tools: [b], semantic_selection: {enabled: false}}}"));
    const vsr_plugin_conf_t *p = &c->recipes[0].decisions[0].plugins[0];
    assert_int_equal(p->kind, VSR_PLUGIN_TOOLS);
    assert_int_equal(p->u.tools.enabled, 1);
    assert_int_equal(p->u.tools.mode, VSR_TOOLS_FILTERED);
    assert_int_equal(p->u.tools.allow_tools.n, 2);
    assert_string_equal(p->u.tools.block_tools.items[0], "b");
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: tools, configuration: {mode: none, strip_tool_history: true}}"));
    p = &c->recipes[0].decisions[0].plugins[0];
    assert_int_equal(p->u.tools.mode, VSR_TOOLS_NONE);
    assert_int_equal(p->u.tools.strip_tool_history, 1);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: tools}"));
    assert_int_equal(c->recipes[0].decisions[0].plugins[0].u.tools.mode, VSR_TOOLS_FILTERED);
    vsr_config_free(c);

    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {mode: auto, budget: {trigger_tokens: 1000, "
                           "target_tokens: 600, reserve_output_tokens: 100}, targets: [history], scoring: {method: "
                           "bm25}, failure_mode: fail_closed}}"));
    p = &c->recipes[0].decisions[0].plugins[0];
    const vsr_plugin_context_compression_conf_t *cc = &p->u.context_compression;
    assert_int_equal(p->kind, VSR_PLUGIN_CONTEXT_COMPRESSION);
    assert_int_equal(cc->enabled, 1);
    assert_int_equal(cc->trigger_tokens, 1000);
    assert_int_equal(cc->target_tokens, 600);
    assert_int_equal(cc->reserve_output_tokens, 100);
    assert_int_equal(cc->n_targets, 1);
    assert_int_equal(cc->targets[0], VSR_CC_HISTORY);
    assert_int_equal(cc->fail_closed, 1);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 10, "
                           "target_tokens: 10}}}"));
    cc = &c->recipes[0].decisions[0].plugins[0].u.context_compression;
    assert_int_equal(cc->n_targets, 1); /* the reference's default: tool outputs only, history preserved */
    assert_int_equal(cc->targets[0], VSR_CC_TOOL_RESULTS);
    assert_int_equal(cc->fail_closed, 0);
    assert_int_equal(cc->reserve_output_tokens, 0);
    vsr_config_free(c);
    /* "auto" (any case, spaces around it ignored) and 0 are the reference's
     * auto limits; a quoted integer is an integer; an absent reserve is auto */
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: auto, "
                           "target_tokens: \" AUTO \", reserve_output_tokens: 0}}}"));
    cc = &c->recipes[0].decisions[0].plugins[0].u.context_compression;
    assert_true(cc->trigger_auto && cc->target_auto && cc->reserve_auto);
    assert_int_equal(cc->trigger_tokens, 0);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: \"8000\", "
                           "target_tokens: auto}}}"));
    cc = &c->recipes[0].decisions[0].plugins[0].u.context_compression;
    assert_true(!cc->trigger_auto && cc->target_auto && cc->reserve_auto);
    assert_int_equal(cc->trigger_tokens, 8000);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 10, "
                           "target_tokens: 5, reserve_output_tokens: 2}}}"));
    cc = &c->recipes[0].decisions[0].plugins[0].u.context_compression;
    assert_true(!cc->trigger_auto && !cc->target_auto && !cc->reserve_auto);
    vsr_config_free(c);
    /* the reference's targets mapping: extractive tool_outputs (its
     * default) and history are vsr's targets; preserve is none; a disabled
     * recovery or request_controls block loads whatever it holds */
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: auto, "
                           "target_tokens: auto}, targets: {tool_outputs: {min_tokens: 2000, target_tokens: 1000}, "
                           "history: {mode: extractive}, rag: {mode: preserve}, memory: {mode: extractive}}, "
                           "recovery: {enabled: false, store: response_cache, ttl_seconds: 900}, "
                           "request_controls: {enabled: false, header: x-c}}}"));
    cc = &c->recipes[0].decisions[0].plugins[0].u.context_compression;
    assert_int_equal(cc->n_targets, 2);
    assert_int_equal(cc->targets[0], VSR_CC_TOOL_RESULTS);
    assert_int_equal(cc->targets[1], VSR_CC_HISTORY);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, "
                           "target_tokens: 5}, targets: {tool_outputs: {mode: preserve}, history: {mode: extractive}}}}"));
    cc = &c->recipes[0].decisions[0].plugins[0].u.context_compression;
    assert_int_equal(cc->n_targets, 1);
    assert_int_equal(cc->targets[0], VSR_CC_HISTORY);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, "
                           "target_tokens: 5}, targets: {history: {}}}}"));
    cc = &c->recipes[0].decisions[0].plugins[0].u.context_compression;
    assert_int_equal(cc->n_targets, 1); /* tool_outputs: extractive by default; history: preserve */
    assert_int_equal(cc->targets[0], VSR_CC_TOOL_RESULTS);
    vsr_config_free(c);
    /* switched off: no budget needed */
    c = load_ok(PLUGIN_DOC("{type: context_compression, configuration: {enabled: false}}"));
    assert_int_equal(c->recipes[0].decisions[0].plugins[0].kind, VSR_PLUGIN_CONTEXT_COMPRESSION);
    assert_int_equal(c->recipes[0].decisions[0].plugins[0].enabled, 0);
    vsr_config_free(c);

    static const struct {
        const char *doc;
        const char *error;
    } rows[] = {
        {PLUGIN_DOC("{type: tools, configuration: {mode: filtered, semantic_selection: {top_k: 0}}}"), "t.yaml:14:85: top_k must be between 1 and 64, got 0\n"},
        {PLUGIN_DOC("{type: tools, configuration: {semantic_selection: {similarity_threshold: 2}}}"), "t.yaml:14:84: similarity_threshold must be between 0 and 1, got 2\n"},
        {PLUGIN_DOC("{type: tools, configuration: {semantic_selection: {k: 1}}}"), "t.yaml:14:62: unknown key \"k\"\n"},
        {PLUGIN_DOC("{type: tools, configuration: {semantic_selection: yes}}"), "t.yaml:14:61: semantic_selection: expected true, false or a mapping {enabled, top_k, similarity_threshold}, got a string\n"},
        {PLUGIN_DOC("{type: tool_selection, configuration: {mode: filter, relevance_threshold: -1}}"), "t.yaml:14:85: relevance_threshold must be between 0 and 1, got -1\n"},
        {PLUGIN_DOC("{type: tool_selection, configuration: {mode: pick}}"), "t.yaml:14:56: mode must be \"add\" or \"filter\", got \"pick\"\n"},
        {PLUGIN_DOC("{type: tool_selection, configuration: {mode: add}}"), "t.yaml:14:49: tool_selection: mode add takes its tools from the tools database, and global.integrations.tools.tools_db_path is not set\n"},
        {PLUGIN_DOC("{type: tools, configuration: {mode: all}}"), "t.yaml:14:47: mode must be \"filtered\", \"none\" or \"passthrough\", got \"all\"\n"},
        {PLUGIN_DOC("{type: tools, configuration: {allow: [x]}}"), "t.yaml:14:41: unknown key \"allow\"\n"},
        {PLUGIN_DOC("{type: tools, configuration: {allow_tools: x}}"), "t.yaml:14:54: expected a list of strings, got a string\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {}}"), "t.yaml:14:54: missing required key \"budget\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 100}}}"), "t.yaml:14:63: missing required key \"target_tokens\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 100, target_tokens: 200}}}"),
         "t.yaml:14:100: target_tokens (200) exceeds trigger_tokens (100)\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 100, target_tokens: 50, "
                    "reserve_output_tokens: 50}}}"),
         "t.yaml:14:127: reserve_output_tokens (50) must be below target_tokens (50)\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: -1, target_tokens: lots}}}"),
         "t.yaml:14:80: trigger_tokens must be an integer >= 0 or \"auto\", got \"-1\"\n"
         "t.yaml:14:99: target_tokens must be an integer >= 0 or \"auto\", got \"lots\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: [auto], target_tokens: 1.5}}}"),
         "t.yaml:14:80: trigger_tokens must be an integer >= 0 or \"auto\", got a list\n"
         "t.yaml:14:103: target_tokens must be an integer >= 0 or \"auto\", got \"1.5\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "targets: [rag]}}"),
         "t.yaml:14:112: targets must be \"tool_results\" or \"history\", got \"rag\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "targets: [history, history]}}"),
         "t.yaml:14:121: targets: history is listed twice\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "targets: {tool_outputs: {mode: recoverable}, files: {}, history: {mode: x, size: 1}}}}"),
         "t.yaml:14:133: context_compression: targets.tool_outputs.mode recoverable is not supported yet (it needs "
         "recovery)\n"
         "t.yaml:14:147: targets must be \"tool_outputs\", \"history\", \"rag\" or \"memory\", got \"files\"\n"
         "t.yaml:14:174: mode must be \"preserve\", \"extractive\" or \"recoverable\", got \"x\"\n"
         "t.yaml:14:177: unknown key \"size\" (a target has mode, min_tokens, target_tokens)\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "targets: []}}"),
         "t.yaml:14:111: targets must not be empty\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "scoring: {method: tfidf}}}"),
         "t.yaml:14:120: method must be \"bm25\", got \"tfidf\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "mode: manual}}"),
         "t.yaml:14:108: mode must be \"auto\", got \"manual\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "failure_mode: retry}}"),
         "t.yaml:14:116: failure_mode must be \"fail_open\" or \"fail_closed\", got \"retry\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "recovery: {enabled: true, store: memory}}}"),
         "t.yaml:14:112: context_compression: recovery is not supported yet (it needs a recovery tool offered to "
         "the model, a store of the cut passages and a follow-up upstream call when the model asks for one; vsr "
         "makes the one upstream call and keeps no cut text)\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5}, "
                    "request_controls: {enabled: true, allowed: [skip]}}}"),
         "t.yaml:14:146: allowed must be \"bypass\" or \"target\", got \"skip\"\n"},
        {PLUGIN_DOC("{type: context_compression, configuration: {budget: {trigger_tokens: 9, target_tokens: 5, "
                    "max: 3}}}"),
         "t.yaml:14:101: unknown key \"max\"\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_errors(rows[i].doc, rows[i].error);
#undef PLUGIN_DOC
}

/* response_cache personalized: true, or the reference's {mode: disabled | exact} */
static void test_plugin_response_cache_personalized(void **state)
{
#define PLUGIN_DOC(p) DOC "routing:\n  decisions:\n    - name: d\n      plugins:\n        - " p "\n"
    (void)state;
    vsr_config_t *c = load_ok(PLUGIN_DOC("{type: response_cache, configuration: {personalized: {mode: exact}}}"));
    const vsr_plugin_conf_t *p = &c->recipes[0].decisions[0].plugins[0];
    assert_int_equal(p->u.response_cache.has_scope, 1);
    assert_int_equal(p->u.response_cache.scope, VSR_RC_SCOPE_USER);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: response_cache, configuration: {personalized: {mode: disabled}}}"));
    assert_int_equal(c->recipes[0].decisions[0].plugins[0].u.response_cache.has_scope, 0);
    vsr_config_free(c);
    expect_errors(PLUGIN_DOC("{type: response_cache, configuration: {personalized: {mode: team}}}"),
                  "t.yaml:14:71: mode must be \"disabled\" or \"exact\", got \"team\"\n");
    expect_errors(PLUGIN_DOC("{type: response_cache, configuration: {personalized: {mod: exact}}}"),
                  "t.yaml:14:65: unknown key \"mod\"; did you mean \"mode\"?\n");
#undef PLUGIN_DOC
}

/* response_jailbreak: enabled, threshold (default: the prompt guard's), action, method */
static void test_plugin_response_jailbreak(void **state)
{
#define PLUGIN_DOC(p) DOC "routing:\n  decisions:\n    - name: d\n      plugins:\n        - " p "\n"
    (void)state;
    vsr_config_t *c = load_ok(PLUGIN_DOC("{type: response_jailbreak}"));
    const vsr_plugin_conf_t *p = &c->recipes[0].decisions[0].plugins[0];
    assert_int_equal(p->kind, VSR_PLUGIN_RESPONSE_JAILBREAK);
    assert_int_equal(p->u.response_jailbreak.enabled, 1);
    assert_int_equal(p->u.response_jailbreak.action, VSR_RJ_HEADER);
    assert_int_equal(p->u.response_jailbreak.method, VSR_JB_CLASSIFIER);
    assert_false(p->u.response_jailbreak.has_threshold);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: response_jailbreak, configuration: {enabled: true, threshold: 0.85, action: block, "
                           "method: contrastive}}"));
    p = &c->recipes[0].decisions[0].plugins[0];
    assert_true(p->u.response_jailbreak.has_threshold);
    assert_true(p->u.response_jailbreak.threshold == 0.85);
    assert_int_equal(p->u.response_jailbreak.action, VSR_RJ_BLOCK);
    assert_int_equal(p->u.response_jailbreak.method, VSR_JB_CONTRASTIVE);
    vsr_config_free(c);
    c = load_ok(PLUGIN_DOC("{type: response_jailbreak, configuration: {enabled: false, action: none}}"));
    p = &c->recipes[0].decisions[0].plugins[0];
    assert_int_equal(p->enabled, 0);
    assert_int_equal(p->u.response_jailbreak.enabled, 0);
    assert_int_equal(p->u.response_jailbreak.action, VSR_RJ_NONE);
    vsr_config_free(c);
    static const struct {
        const char *doc;
        const char *error;
    } rows[] = {
        {PLUGIN_DOC("{type: response_jailbreak, configuration: {action: drop}}"),
         "t.yaml:14:62: action must be \"header\", \"block\" or \"none\", got \"drop\"\n"},
        {PLUGIN_DOC("{type: response_jailbreak, configuration: {threshold: 1.5}}"),
         "t.yaml:14:65: threshold must be between 0 and 1, got 1.5\n"},
        {PLUGIN_DOC("{type: response_jailbreak, configuration: {method: regex}}"),
         "t.yaml:14:62: method must be \"classifier\", \"contrastive\" or \"hybrid\", got \"regex\"\n"},
        {PLUGIN_DOC("{type: response_jailbreak, configuration: {patterns: [x]}}"),
         "t.yaml:14:54: unknown key \"patterns\"\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_errors(rows[i].doc, rows[i].error);
#undef PLUGIN_DOC
}

static void test_plugin_errors(void **state)
{
#define PLUGIN_DOC(p) DOC "routing:\n  decisions:\n    - name: d\n      plugins:\n        - " p "\n"
    /* the plugin item starts at line 14, column 11 */
    static const struct {
        const char *doc;
        const char *error;
    } rows[] = {
        {PLUGIN_DOC("{type: system_prompt, configuration: {mode: 3, system_prompt: x}}"),
         "t.yaml:14:55: expected a string, got an integer\n"},
        {PLUGIN_DOC("{type: fast_response, configuration: {}}"), "t.yaml:14:48: missing required key \"message\"\n"},
        {PLUGIN_DOC("{type: header_mutation, configuration: {add: [{name: \"bad name\", value: x}]}}"),
         "t.yaml:14:64: invalid header name \"bad name\"\n"},
        {PLUGIN_DOC("{type: header_mutation, configuration: {add: [{name: x-a, value: \"a\\r\\nb\"}]}}"),
         "t.yaml:14:76: value must not contain control characters\n"},
        {PLUGIN_DOC("{type: header_mutation, configuration: {add: [{name: x-a}]}}"),
         "t.yaml:14:57: missing required key \"value\"\n"},
        {PLUGIN_DOC("{type: header_mutation, configuration: {remove: [x-a]}}"),
         "t.yaml:14:51: unknown key \"remove\"\n"},
        {PLUGIN_DOC("{type: request_params, configuration: {max_tokens_limit: 100, default_max_tokens: 200}}"),
         "t.yaml:14:93: default_max_tokens (200) exceeds max_tokens_limit (100)\n"},
        {PLUGIN_DOC("{type: request_params, configuration: {max_n: 0}}"),
         "t.yaml:14:57: max_n must be at least 1, got 0\n"},
        {PLUGIN_DOC("{configuration: {}}"), "t.yaml:14:11: missing required key \"type\"\n"},
        {PLUGIN_DOC("{type: system_prompt, configuration: {enabled: \"no\", system_prompt: x}}"),
         "t.yaml:14:58: expected a boolean (true or false), got a string\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_errors(rows[i].doc, rows[i].error);
    /* as in the reference: a system_prompt plugin without a prompt (absent or "") and a fast_response plugin
     * without configuration load and do nothing */
    static const char *const idle[] = {
        PLUGIN_DOC("{type: system_prompt}"),
        PLUGIN_DOC("{type: system_prompt, configuration: {mode: insert}}"),
        PLUGIN_DOC("{type: system_prompt, configuration: {system_prompt: \"\"}}"),
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(idle); i++) {
        vsr_config_t *c = load_ok(idle[i]);
        assert_int_equal(c->recipes[0].decisions[0].plugins[0].kind, VSR_PLUGIN_SYSTEM_PROMPT);
        assert_null(c->recipes[0].decisions[0].plugins[0].u.system_prompt.system_prompt);
        vsr_config_free(c);
    }
    vsr_config_t *fr = load_ok(PLUGIN_DOC("{type: fast_response}"));
    assert_int_equal(fr->recipes[0].decisions[0].plugins[0].kind, VSR_PLUGIN_FAST_RESPONSE);
    assert_int_equal(fr->recipes[0].decisions[0].plugins[0].enabled, 0);
    vsr_config_free(fr);
    /* disabled: still checked, but system_prompt is not required */
    vsr_config_t *c = load_ok(PLUGIN_DOC("{type: system_prompt, configuration: {enabled: false}}"));
    assert_int_equal(c->recipes[0].decisions[0].plugins[0].enabled, 0);
    assert_int_equal(c->recipes[0].decisions[0].plugins[0].u.system_prompt.enabled, 0);
    vsr_config_free(c);
#undef PLUGIN_DOC
}

/* Runs fn with fd 2 sent to a temporary file; returns what was written (malloc'd). */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long n = ftell(tmp) >= 0 ? (fseek(tmp, 0, SEEK_END), ftell(tmp)) : 0;
    rewind(tmp);
    char *out = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(out, 1, (size_t)n, tmp), (size_t)n);
    fclose(tmp);
    return out;
}

static void load_into(void *arg)
{
    vsr_config_t **c = arg;
    *c = load_ok(DOC
                 "routing:\n"
                 "  decisions:\n"
                 "    - name: d\n"
                 "      plugins:\n"
                 "        - type: header_mutation\n"
                 "          configuration:\n"
                 "            add:\n"
                 "              - {name: X-Envoy-Max-Retries, value: \"3\"}\n"
                 "              - {name: x-keep, value: \"1\"}\n"
                 "              - {name: x-envoy-upstream-rq-timeout-ms, value: \"100\"}\n"
                 "            update:\n"
                 "              - {name: x-envoy-upstream-rq-per-try-timeout-ms, value: \"5\"}\n"
                 "              - {name: x-envoy-retry-on, value: 5xx}\n"
                 "              - {name: host, value: evil}\n"
                 "            delete: [x-envoy-retriable-status-codes, x-drop, x-envoy-force-trace]\n");
}

/* The reliability headers are dropped at load with a warning, not an error. */
static void test_header_mutation_drops_reliability_headers(void **state)
{
    vsr_config_t *c = NULL;
    char *log = capture_stderr(load_into, &c);
    const vsr_plugin_header_mutation_conf_t *h = &c->recipes[0].decisions[0].plugins[0].u.header_mutation;
    assert_int_equal(h->n_add, 1);
    assert_string_equal(h->add[0].name, "x-keep");
    assert_int_equal(h->n_update, 0);
    assert_int_equal(h->delete_.n, 1);
    assert_string_equal(h->delete_.items[0], "x-drop");
    static const char *const lines[] = {
        "[config] t.yaml:17:24: header_mutation: dropped \"X-Envoy-Max-Retries\": the x-envoy reliability headers "
        "come from the decision's reliability block\n",
        "[config] t.yaml:19:24: header_mutation: dropped \"x-envoy-upstream-rq-timeout-ms\": the x-envoy reliability "
        "headers come from the decision's reliability block\n",
        "[config] t.yaml:21:24: header_mutation: dropped \"x-envoy-upstream-rq-per-try-timeout-ms\"",
        "[config] t.yaml:22:24: header_mutation: dropped \"x-envoy-retry-on\"",
        "[config] t.yaml:23:24: header_mutation: dropped \"host\": host and x-envoy-* headers cannot be mutated",
        "[config] t.yaml:24:22: header_mutation: dropped \"x-envoy-retriable-status-codes\": the x-envoy reliability",
        "[config] t.yaml:24:62: header_mutation: dropped \"x-envoy-force-trace\": host and x-envoy-*",
    };
    const char *p = log;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        const char *at = strstr(p, lines[i]);
        if (at == NULL)
            fail_msg("missing warning %zu (%s) in:\n%s", i, lines[i], log);
        assert_non_null(strstr(log, " warn "));
        p = at + strlen(lines[i]);
    }
    free(log);
    vsr_config_free(c);

    /* a failing document logs nothing of what it would have dropped */
    static const char *const doc = DOC "routing: {decisions: [{name: d, plugins: [{type: header_mutation, "
                                       "configuration: {add: [{name: x-envoy-max-retries, value: \"1\"}]}}]}]}\n"
                                       "bogus: 1\n";
    expect_errors(doc, "t.yaml:11:1: unknown key \"bogus\"\n");
}

/* A card's param_size is read once, at load: the graph's candidates take the
 * number.  One that does not read is kept as written, with no number. */
static void test_param_size_read_at_load(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok("version: v0.3\n"
                              "listeners: [{name: l1, port: 18899}]\n"
                              "providers: {models: [{name: a, backend_refs: [{endpoint: '127.0.0.1:1'}]}]}\n"
                              "routing:\n"
                              "  modelCards:\n"
                              "    - {name: a, param_size: ' 1.5k '}\n"
                              "    - {name: b, param_size: 70b}\n"
                              "    - {name: c, param_size: huge}\n"
                              "    - {name: d}\n");
    assert_int_equal(c->n_model_cards, 4);
    assert_int_equal(c->model_cards[0].has_param_size_value, 1);
    assert_true(c->model_cards[0].param_size_value == 1500.0);
    assert_int_equal(c->model_cards[1].has_param_size_value, 1);
    assert_true(c->model_cards[1].param_size_value == 7e10);
    assert_string_equal(c->model_cards[2].param_size, "huge");
    assert_int_equal(c->model_cards[2].has_param_size_value, 0);
    assert_int_equal(c->model_cards[3].has_param_size_value, 0);
    vsr_config_free(c);
}

/* ---- reliability and fallback ---------------------------------------------------------- */

static void test_reliability_errors(void **state)
{
#define REL_DOC(r) DOC "      reliability: {" r "}\n"
    /* the mapping starts at line 10, column 20 */
    static const struct {
        const char *doc;
        const char *error;
    } rows[] = {
        {REL_DOC("retry_count: 6"), "t.yaml:10:34: retry_count must be between 0 and 5, got 6\n"},
        {REL_DOC("retry_budget_percent: 101"), "t.yaml:10:43: retry_budget_percent must be between 0 and 100, got 101\n"},
        {REL_DOC("max_ejection_percent: -1"), "t.yaml:10:43: max_ejection_percent must be between 0 and 100, got -1\n"},
        {REL_DOC("retry_back_off_base: 100ms, retry_back_off_max: 50ms"),
         "t.yaml:10:69: retry_back_off_max (50ms) must not be less than retry_back_off_base (100ms)\n"},
        {REL_DOC("retry_back_off_max: 10ms"),
         "t.yaml:10:41: retry_back_off_max (10ms) must not be less than retry_back_off_base (25ms)\n"},
        {REL_DOC("health_check_path: health"), "t.yaml:10:40: health_check_path must start with '/', got \"health\"\n"},
        {REL_DOC("retry_on: \"5xx,,reset\""),
         "t.yaml:10:31: retry_on has an empty token (write tokens separated by commas)\n"},
        {REL_DOC("retry_on: \"5xx,timeout\""),
         "t.yaml:10:31: unknown retry_on token \"timeout\" (expected 5xx, gateway-error, reset, reset-before-request, "
         "connect-failure, refused-stream, retriable-4xx, retriable-status-codes or envoy-ratelimited)\n"},
        {REL_DOC("lb_policy: random"),
         "t.yaml:10:32: lb_policy must be \"round_robin\" or \"least_request\", got \"random\"\n"},
        {REL_DOC("retriable_status_codes: [503, 600, x]"),
         "t.yaml:10:51: retriable_status_codes: a status code must be between 100 and 599, got 600\n"
         "t.yaml:10:56: expected an HTTP status code, got a string\n"},
        {REL_DOC("per_try_timeout: 0s"), "t.yaml:10:38: per_try_timeout must be greater than 0\n"},
        {REL_DOC("connect_timeout: 0"), "t.yaml:10:38: connect_timeout must be between 1 and 1000000000 seconds, got 0\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_errors(rows[i].doc, rows[i].error);
    /* 0s disables the total and idle timeouts */
    vsr_config_t *c = load_ok(REL_DOC("total_timeout: 0s, idle_timeout: 0"));
    assert_true(c->models[0].reliability.has_total_timeout && c->models[0].reliability.total_timeout_ms == 0);
    assert_true(c->models[0].reliability.has_idle_timeout && c->models[0].reliability.idle_timeout_ms == 0);
    vsr_config_free(c);
    /* the decision level has the subset of ref §1.6 */
    expect_errors(DOC "routing: {decisions: [{name: d, reliability: {lb_policy: round_robin}}]}\n",
                  "t.yaml:10:47: unknown key \"lb_policy\"\n");
#undef REL_DOC
}

static void test_fallback_errors(void **state)
{
    static const struct {
        const char *text;
        const char *error;
    } rows[] = {
        {"global: {router: {fallback: {version: 2}}}\n",
         "t.yaml:10:39: unsupported fallback version 2 (only version 1 exists)\n"},
        {"global: {router: {fallback: {total_timeout: 5s, per_attempt_timeout: 6s}}}\n",
         "t.yaml:10:70: fallback per_attempt_timeout (6000ms) must not exceed total_timeout (5000ms)\n"},
        /* against the inherited total: the default 30s */
        {"global: {router: {fallback: {per_attempt_timeout: 31s}}}\n",
         "t.yaml:10:51: fallback per_attempt_timeout (31000ms) must not exceed total_timeout (30000ms)\n"},
        /* a decision lowering the total below the global per-attempt timeout */
        {"routing: {decisions: [{name: d, fallback: {total_timeout: 5s}}]}\n",
         "t.yaml:10:59: fallback per_attempt_timeout (10000ms) must not exceed total_timeout (5000ms)\n"},
        {"routing: {fallback: {enabled: true, max_attempts: 0}}\n",
         "t.yaml:10:51: fallback max_attempts must be at least 1 when fallback is enabled\n"},
        {"global: {router: {fallback: {max_attempts: 0}}}\nrouting: {decisions: [{name: d, fallback: {enabled: true}}]}\n",
         "t.yaml:11:53: fallback max_attempts must be at least 1 when fallback is enabled\n"},
        {"routing: {decisions: [{name: d, fallback: {circuit_breaker: {half_open_probes: 2}}}]}\n",
         "t.yaml:10:61: circuit_breaker is global: set it in global.router.fallback\n"},
        {"recipes: [{name: r, routing: {fallback: {circuit_breaker: {}}}}]\n",
         "t.yaml:10:59: circuit_breaker is global: set it in global.router.fallback\n"},
        {"global: {router: {fallback: {retryable_status_codes: [99]}}}\n",
         "t.yaml:10:55: retryable_status_codes: a status code must be between 100 and 599, got 99\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), DOC "%s", rows[i].text);
        expect_errors(yaml, rows[i].error);
    }
    /* enabled: false is kept (tri-state), and disabled needs no attempts */
    vsr_config_t *c = load_ok(DOC "routing: {decisions: [{name: d, fallback: {enabled: false, max_attempts: 0}}]}\n"
                                  "global: {router: {fallback: {enabled: true}}}\n");
    const vsr_fallback_conf_t *f = &c->recipes[0].decisions[0].fallback;
    assert_true(f->present && f->has_enabled && !f->enabled);
    vsr_fallback_conf_t eff;
    vsr_config_effective_fallback(c, &c->recipes[0], &c->recipes[0].decisions[0], &eff);
    assert_int_equal(eff.enabled, 0);
    assert_int_equal(eff.max_attempts, 0);
    vsr_config_effective_fallback(c, &c->recipes[0], NULL, &eff);
    assert_int_equal(eff.enabled, 1);
    assert_int_equal(eff.max_attempts, 3);
    assert_int_equal(eff.n_retryable_status_codes, 3);
    assert_int_equal(eff.retryable_status_codes[1], 503);
    vsr_config_free(c);
}

/* ---- providers: credentials ------------------------------------------------------------ */

static void test_credentials(void **state)
{
    setenv("VSR_TEST_EMPTY_KEY", "", 1);
    setenv("VSR_TEST_CRLF_KEY", "a\r\nX-Injected: 1", 1);
    unsetenv("VSR_TEST_MISSING_KEY");
    static const struct {
        const char *item;
        const char *error;
    } rows[] = {
        {"{endpoint: h, api_key_env: VSR_TEST_CRLF_KEY}",
         "t.yaml:9:38: environment variable VSR_TEST_CRLF_KEY contains control characters\n"},
        {"{endpoint: h, api_key_env: \"1BAD\"}", "t.yaml:9:38: invalid environment variable name \"1BAD\"\n"},
        {"{endpoint: h, api_key: k, api_key_env: HOME}", "t.yaml:9:50: set either api_key or api_key_env, not both\n"},
        {"{endpoint: h, api_key: \"\"}", "t.yaml:9:34: api_key must not be empty\n"},
        {"{endpoint: h, auth_header: \"x y\"}", "t.yaml:9:38: invalid header name \"x y\"\n"},
        {"{endpoint: h, auth_prefix: \"a\\nb\"}", "t.yaml:9:38: auth_prefix must not contain control characters\n"},
        {"{endpoint: h, extra_headers: {\"a:b\": c}}", "t.yaml:9:41: invalid header name \"a:b\"\n"},
        {"{endpoint: h, extra_headers: {x: 1}}",
         "t.yaml:9:44: expected a string, got an integer\n"},
        {"{endpoint: h, extra_headers: [x]}",
         "t.yaml:9:40: expected a mapping of header names to values, got a list\n"},
        {"{endpoint: h, chat_path: chat}",
         "t.yaml:9:36: chat_path must be a path starting with '/', without spaces, query or fragment\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_backend_error(rows[i].item, rows[i].error);
    /* an unset or empty variable is no key, as in the reference (a warning) */
    static const char *const no_key[] = {"VSR_TEST_MISSING_KEY", "VSR_TEST_EMPTY_KEY"};
    for (size_t i = 0; i < 2; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), HEAD LISTENERS PROVIDERS_OPEN "        - {endpoint: h, api_key_env: %s}\n",
                 no_key[i]);
        vsr_config_t *c = load_ok(yaml);
        const vsr_backend_conf_t *b = &c->models[0].backends[0];
        assert_string_equal(b->api_key_env, no_key[i]);
        assert_null(b->resolved_api_key);
        vsr_config_free(c);
    }
    unsetenv("VSR_TEST_EMPTY_KEY");
    unsetenv("VSR_TEST_CRLF_KEY");
    /* api_format: only openai and anthropic exist */
    expect_errors(HEAD LISTENERS PROVIDERS "      api_format: gemini\n",
                  "t.yaml:10:19: api_format must be \"openai\" or \"anthropic\", got \"gemini\"\n");
}

/* ---- signals ----------------------------------------------------------------------------- */

static void test_token_counts(void **state)
{
    static const struct {
        const char *value;
        uint64_t tokens;
    } ok[] = {
        {"32K", 32000}, {"32k", 32000}, {"1M", 1000000}, {"1.5K", 1500}, {"\"256K\"", 256000}, {"4096", 4096},
        {"0", 0},       {"2.5m", 2500000}, {"\" 8K \"", 8000},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml), DOC "routing: {signals: {context: [{name: c, min_tokens: %s}]}}\n", ok[i].value);
        vsr_config_t *c = load_ok(yaml);
        assert_int_equal(c->recipes[0].signals.context[0].min_tokens, ok[i].tokens);
        assert_int_equal(c->recipes[0].signals.context[0].has_max_tokens, 0);
        vsr_config_free(c);
    }
    static const struct {
        const char *sig;
        const char *error;
    } bad[] = {
        {"{name: c, min_tokens: 32KB}", "t.yaml:10:53: invalid token count \"32KB\" (use e.g. 4096, \"32K\" or \"1M\")\n"},
        {"{name: c, min_tokens: K}", "t.yaml:10:53: invalid token count \"K\" (use e.g. 4096, \"32K\" or \"1M\")\n"},
        {"{name: c, min_tokens: -1}", "t.yaml:10:53: min_tokens must be between 0 and 1000000000000, got -1\n"},
        {"{name: c, min_tokens: true}", "t.yaml:10:53: expected a token count (e.g. 4096 or \"32K\"), got a boolean\n"},
        {"{name: c, max_tokens: 0}",
         "t.yaml:10:53: max_tokens must be greater than 0 (leave it out for no upper bound)\n"},
        {"{name: c, min_tokens: 8K, max_tokens: 4K}", "t.yaml:10:69: max_tokens (4000) is less than min_tokens (8000)\n"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml), DOC "routing: {signals: {context: [%s]}}\n", bad[i].sig);
        expect_errors(yaml, bad[i].error);
    }
}

static void test_signal_errors(void **state)
{
    static const struct {
        const char *signals;
        const char *error;
    } rows[] = {
        /* keywords: regexes are not compiled here (the signals module does) */
        {"keywords: [{name: k, keywords: []}]", "t.yaml:10:52: keywords must not be empty\n"},
        {"keywords: [{name: k, keywords: [x], operator: XOR}]",
         "t.yaml:10:67: operator must be \"OR\", \"AND\" or \"NOR\", got \"XOR\"\n"},
        {"keywords: [{name: k, keywords: [x], method: exact}]",
         "t.yaml:10:65: method must be \"\", \"regex\", \"bm25\", \"ngram\" or \"fuzzy\", got \"exact\"\n"},
        {"keywords: [{name: k, keywords: [x], ngram_threshold: 1.5}]",
         "t.yaml:10:74: ngram_threshold must be between 0 and 1, got 1.5\n"},
        {"keywords: [{name: k, keywords: [x], bm25_threshold: .nan}]",
         "t.yaml:10:73: bm25_threshold must be a finite number, got .nan\n"},
        {"structure: [{name: s, feature: {type: count, source: {type: regex}}}]",
         "t.yaml:10:74: source type \"regex\" needs a non-empty pattern\n"},
        {"structure: [{name: s, feature: {type: count, source: {type: text_bytes, pattern: x}}}]",
         "t.yaml:10:102: pattern only applies to source type \"regex\"\n"},
        {"structure: [{name: s, feature: {type: width, source: {type: text_bytes}}}]",
         "t.yaml:10:59: type must be \"count\", \"exists\", \"density\" or \"sequence\", got \"width\"\n"},
        {"structure: [{name: s}]", "t.yaml:10:33: missing required key \"feature\"\n"},
        {"structure: [{name: s, feature: {type: sequence, source: {type: sequence, sequences: [[]]}}}]",
         "t.yaml:10:106: sequences must not be empty\n"},
        {"conversation: [{name: c, feature: {type: count, source: {type: tool_definition, role: user}}}]",
         "t.yaml:10:107: role only applies to source type \"message\"\n"},
        {"conversation: [{name: c, feature: {type: count, source: {type: message, role: bot}}}]",
         "t.yaml:10:99: role must be \"user\", \"assistant\", \"system\", \"developer\", \"tool\" or \"non_user\", "
         "got \"bot\"\n"},
        {"language: [{name: en, threshold: 2}]", "t.yaml:10:54: threshold must be between 0 and 1, got 2\n"},
        {"role_bindings: [{name: r, role: admin, subjects: []}]", "t.yaml:10:70: subjects must not be empty\n"},
        {"role_bindings: [{name: r, subjects: [{kind: Team, name: x}]}]",
         "t.yaml:10:65: kind must be \"User\" or \"Group\", got \"Team\"\n"
         "t.yaml:10:37: missing required key \"role\"\n"},
        {"keywords: {name: k}", "t.yaml:10:31: expected a list, got a mapping\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char yaml[1024];
        snprintf(yaml, sizeof(yaml), DOC "routing: {signals: {%s}}\n", rows[i].signals);
        expect_errors(yaml, rows[i].error);
    }
    expect_errors(DOC "routing: {signals: [keywords]}\n",
                  "t.yaml:10:20: expected a mapping of signal families, got a list\n");
}

/* ---- listeners: tls and identity --------------------------------------------------------- */

static void test_listener_tls_and_identity(void **state)
{
#define L_DOC(extra) HEAD "listeners:\n  - {name: l, port: 1, " extra "}\n" PROVIDERS
    /* the extra keys start at line 3, column 25 */
    static const struct {
        const char *doc;
        const char *error;
    } rows[] = {
        {L_DOC("tls: {cert_file: tests/unit/configs/tls-cert.pem}"), "t.yaml:3:29: missing required key \"key_file\"\n"},
        {L_DOC("tls: {cert_file: tests/unit/configs/nope.pem, key_file: tests/unit/configs/tls-key.pem}"),
         "t.yaml:3:41: cannot read cert_file \"tests/unit/configs/nope.pem\": No such file or directory\n"},
        {L_DOC("tls: {cert_file: tests/unit/configs/tls-cert.pem, key_file: tests/unit/configs}"),
         "t.yaml:3:84: key_file \"tests/unit/configs\" is not a regular file\n"},
        {L_DOC("tls: {cert_file: tests/unit/configs/tls-not-pem.pem, key_file: tests/unit/configs/tls-key.pem}"),
         "t.yaml:3:41: cert_file \"tests/unit/configs/tls-not-pem.pem\" holds no PEM certificate\n"},
        {L_DOC("tls: {cert_file: tests/unit/configs/tls-cert.pem, key_file: tests/unit/configs/tls-cert.pem}"),
         "t.yaml:3:84: key_file \"tests/unit/configs/tls-cert.pem\" holds no PEM private key (or it is encrypted)\n"},
        {L_DOC("tls: {cert_file: tests/unit/configs/tls-cert.pem, key_file: tests/unit/configs/tls-other-key.pem}"),
         "t.yaml:3:84: key_file \"tests/unit/configs/tls-other-key.pem\" does not match the certificate of cert_file\n"},
        {L_DOC("max_headers: 0"), "t.yaml:3:37: max_headers must be between 1 and 127, got 0\n"},
        {L_DOC("identity: {trusted_peers: [10.0.0.0/33]}"),
         "t.yaml:3:51: invalid trusted peer \"10.0.0.0/33\": the prefix length must be an integer from 0 to 32\n"},
        {L_DOC("identity: {trusted_peers: [\"::/129\"]}"),
         "t.yaml:3:51: invalid trusted peer \"::/129\": the prefix length must be an integer from 0 to 128\n"},
        {L_DOC("identity: {trusted_peers: [example.com/8]}"),
         "t.yaml:3:51: invalid trusted peer \"example.com/8\": expected an IPv4 or IPv6 network such as "
         "\"10.0.0.0/8\" or \"fd00::/8\"\n"},
        {L_DOC("identity: {trusted_peers: [\"10.0.0.0/\"]}"),
         "t.yaml:3:51: invalid trusted peer \"10.0.0.0/\": the prefix length must be an integer from 0 to 32\n"},
        {L_DOC("identity: {trust_headers: yes}"), "t.yaml:3:50: expected a boolean (true or false), got a string\n"},
        {L_DOC("api_keys: [\"\"]"), "t.yaml:3:35: api_keys must not be empty\n"},
        {L_DOC("models: [1]"), "t.yaml:3:33: expected a string, got an integer\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        expect_errors(rows[i].doc, rows[i].error);
    vsr_config_t *c = load_ok(L_DOC("tls: {cert_file: tests/unit/configs/tls-cert.pem, key_file: "
                                    "tests/unit/configs/tls-key.pem}, max_headers: 20, max_header_bytes: 4096"));
    assert_string_equal(c->listeners[0].tls_cert_file, "tests/unit/configs/tls-cert.pem");
    assert_string_equal(c->listeners[0].tls_key_file, "tests/unit/configs/tls-key.pem");
    assert_int_equal(c->listeners[0].max_headers, 20);
    assert_int_equal(c->listeners[0].max_header_bytes, 4096);
    vsr_config_free(c);
    c = load_ok(L_DOC("identity: {trusted_peers: [\"0.0.0.0/0\", \"::ffff:10.1.1.1/104\", \"2001:db8::/0\"]}"));
    assert_int_equal(c->listeners[0].max_headers, VSR_DEFAULT_MAX_HEADERS);
    assert_int_equal(c->listeners[0].max_header_bytes, VSR_DEFAULT_MAX_HEADER_BYTES);
    const vsr_strlist_conf_t *p = &c->listeners[0].identity_trusted_peers;
    assert_string_equal(p->items[0], "0.0.0.0/0");
    assert_string_equal(p->items[1], "::ffff:10.0.0.0/104");
    assert_string_equal(p->items[2], "::/0");
    vsr_config_free(c);
#undef L_DOC
}

/* ---- global.services ---------------------------------------------------------------------- */

static void test_management_api(void **state)
{
    vsr_config_t *c = load_ok(DOC);
    assert_int_equal(c->management_enabled, 0); /* absent: off */
    assert_string_equal(c->management_address, "127.0.0.1");
    assert_int_equal(c->management_port, 8080);
    vsr_config_free(c);
    c = load_ok(DOC "global: {services: {management_api: {port: 9000}}}\n");
    assert_int_equal(c->management_enabled, 1); /* present: on */
    assert_int_equal(c->management_port, 9000);
    vsr_config_free(c);
    c = load_ok(DOC "global: {services: {management_api: {enabled: false}}}\n");
    assert_int_equal(c->management_enabled, 0);
    vsr_config_free(c);
    c = load_ok(DOC "global: {services: {management_api: {bind_address: 0.0.0.0, port: 9000, remote_exposure: true}}}\n");
    assert_int_equal(c->management_enabled, 1);
    vsr_config_free(c);
    /* the listener of LISTENERS binds 0.0.0.0:8080 */
    expect_errors(DOC "global: {services: {management_api: {}}}\n",
                  "t.yaml:10:37: management_api port 8080 is also used by listener \"l\" (at 4:11)\n");
    expect_errors(DOC "global: {services: {management_api: {bind_address: 10.0.0.1, port: 9000}}}\n",
                  "t.yaml:10:52: binding the management API to 10.0.0.1 makes it reachable from other hosts: it "
                  "needs remote_exposure: true (and a management token)\n");
    /* vsr's own management fields */
    c = load_ok(DOC "global: {services: {management_api: {port: 9000, max_document_bytes: 4096, token_file: /t, "
                    "token_env: ADMIN_TOKEN}}}\n");
    assert_int_equal(c->management_max_document_bytes, 4096);
    assert_string_equal(c->management_token_file, "/t");
    assert_string_equal(c->management_token_env, "ADMIN_TOKEN");
    vsr_config_free(c);
    c = load_ok(DOC "global: {services: {management_api: {port: 9000}}}\n");
    assert_int_equal(c->management_max_document_bytes, VSR_CONFIG_DEFAULT_MAX_DOCUMENT_BYTES);
    assert_null(c->management_token_file);
    vsr_config_free(c);
    expect_errors(DOC "global: {services: {management_api: {port: 9000, max_document_bytes: 10}}}\n",
                  "t.yaml:10:70: max_document_bytes must be between 1024 and 16777216, got 10\n");
    expect_errors(DOC "global: {services: {management_api: {bind_address: localhost}}}\n",
                  "t.yaml:10:52: bind_address must be an IPv4 or IPv6 address, got \"localhost\"\n");
    /* disabled: no port conflict */
    c = load_ok(DOC "global: {services: {management_api: {enabled: false, port: 8080}}}\n");
    vsr_config_free(c);
    expect_errors(DOC "global: {services: {authz: {identity: {user_id_header: \"x user\"}}}}\n",
                  "t.yaml:10:56: invalid header name \"x user\"\n");
}

/* ---- errors in several sections are all reported --------------------------------------- */

static void test_routing_errors_all_reported(void **state)
{
    expect_errors(DOC
                  "routing:\n"
                  "  signals:\n"
                  "    keywords: [{name: k, keywords: [x], operator: XOR}]\n"
                  "    safety: [{name: e}]\n"
                  "  decisions:\n"
                  "    - name: d\n"
                  "      priority: high\n"
                  "      rules: {type: keyword, name: missing}\n"
                  "      modelRefs: [{model: ghost}]\n"
                  "      algorithm: {type: svm}\n"
                  "      plugins: [{type: mmeory}]\n"
                  "entrypoints: [{model_names: [m], recipe: nowhere}]\n",
                  "t.yaml:12:51: operator must be \"OR\", \"AND\" or \"NOR\", got \"XOR\"\n"
                  "t.yaml:13:14: missing required key \"threshold\"\n"
                  "t.yaml:16:17: expected an integer, got a string\n"
                  "t.yaml:19:25: algorithm type \"svm\" is not supported yet\n"
                  "t.yaml:20:24: unknown plugin type \"mmeory\"\n"
                  "t.yaml:17:14: keyword signal \"missing\" is not declared in routing.signals.keywords\n"
                  "t.yaml:18:27: model \"ghost\" is not defined in providers.models (nor as a LoRA in "
                  "routing.modelCards)\n"
                  "t.yaml:21:42: recipe \"nowhere\" is not defined (recipes[].name, or \"default\" for the top-level "
                  "routing)\n"
                  "t.yaml:21:30: model name \"m\" is already a provider model name (at 7:13)\n");
}

static void test_strategy_inheritance(void **state)
{
    vsr_config_t *c = load_ok(DOC
                              "routing: {strategy: confidence}\n"
                              "recipes:\n"
                              "  - {name: a}\n"
                              "  - {name: b, routing: {strategy: priority}}\n"
                              "  - {name: c, routing: {strategy: confidence}}\n");
    assert_int_equal(c->n_recipes, 4);
    assert_int_equal(c->recipes[0].strategy_confidence, 1);
    assert_int_equal(c->recipes[1].strategy_confidence, 1);
    assert_int_equal(c->recipes[1].has_strategy, 0);
    assert_int_equal(c->recipes[2].strategy_confidence, 0);
    assert_int_equal(c->recipes[3].strategy_confidence, 1);
    vsr_config_free(c);
    /* no routing block: still recipe "default", empty */
    c = load_ok(DOC);
    assert_int_equal(c->n_recipes, 1);
    assert_string_equal(c->recipes[0].name, "default");
    assert_int_equal(c->recipes[0].n_decisions, 0);
    assert_int_equal(c->recipes[0].strategy_confidence, 0);
    assert_int_equal(c->n_entrypoints, 0);
    vsr_config_free(c);
}

/* ---- Looper algorithms ---------------------------------------------------- */

/* DOC plus a second provider model "n" (line 10); routing from line 11 */
#define LOOPER_DOC DOC "    - {name: n, backend_refs: [{endpoint: 127.0.0.1:8000}]}\n"

/* One decision (its algorithm on line 15) with modelRefs m and n and the given algorithm. */
#define ALGO_DOC(algo)                                     \
    LOOPER_DOC "routing:\n"                                \
               "  decisions:\n"                            \
               "    - name: d\n"                           \
               "      modelRefs: [{model: m}, {model: n}]\n" \
               "      algorithm: " algo "\n"

static const vsr_decision_conf_t *only_decision(const vsr_config_t *c)
{
    assert_int_equal(c->recipes[0].n_decisions, 1);
    return &c->recipes[0].decisions[0];
}

/* Each Looper type loads with the reference's defaults when its block is absent. */
static void test_looper_defaults(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(ALGO_DOC("{type: confidence}"));
    const vsr_decision_conf_t *dec = only_decision(c);
    assert_string_equal(dec->algorithm, "confidence");
    assert_int_equal(dec->algo.kind, VSR_ALGO_CONFIDENCE);
    assert_null(dec->algo.on_error);
    assert_int_equal(dec->algo.budget.max_calls, 0);
    assert_int_equal(dec->algo.budget.deadline_ms, 0);
    const vsr_algo_confidence_conf_t *cf = &dec->algo.u.confidence;
    assert_string_equal(cf->method, "avg_logprob");
    assert_int_equal(cf->has_threshold, 0);
    assert_string_equal(cf->escalation_order, "size");
    assert_true(cf->logprob_weight == 0.5 && cf->margin_weight == 0.5);
    assert_null(cf->token_filter);
    assert_int_equal(cf->on_error_fail, 0);
    assert_null(cf->verifier_server_url);
    assert_true(cf->cost_quality_tradeoff == 0.3);
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: ratings, ratings: null}"));
    dec = only_decision(c);
    assert_int_equal(dec->algo.kind, VSR_ALGO_RATINGS);
    assert_int_equal(dec->algo.u.ratings.max_concurrent, 0);
    assert_int_equal(dec->algo.u.ratings.on_error_fail, 0);
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: remom}"));
    dec = only_decision(c);
    const vsr_algo_remom_conf_t *rm = &dec->algo.u.remom;
    assert_int_equal(dec->algo.kind, VSR_ALGO_REMOM);
    assert_int_equal(rm->n_breadth_schedule, 1);
    assert_int_equal(rm->breadth_schedule[0], 4);
    assert_string_equal(rm->model_distribution, "weighted");
    assert_null(rm->synthesis_model);
    assert_null(rm->synthesis_template);
    assert_string_equal(rm->compaction_strategy, "full");
    assert_int_equal(rm->compaction_tokens, 1000);
    assert_int_equal(rm->include_reasoning, 0);
    assert_true(rm->temperature == 1.0);
    assert_int_equal(rm->max_completion_tokens + rm->max_concurrent + rm->round_timeout_ms +
                         rm->min_successful_responses + rm->max_responses_per_round, 0);
    assert_int_equal(rm->shuffle_seed, 42);
    assert_int_equal(rm->on_error_fail, 0);
    assert_int_equal(rm->include_intermediate_responses, 1);
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: fusion, fusion: {}}"));
    dec = only_decision(c);
    const vsr_algo_fusion_conf_t *fu = &dec->algo.u.fusion;
    assert_int_equal(dec->algo.kind, VSR_ALGO_FUSION);
    assert_int_equal(fu->analysis_models.n, 0);
    assert_null(fu->model);
    assert_int_equal(fu->n_analysis_overrides, 0);
    assert_int_equal(fu->has_temperature, 0);
    assert_int_equal(fu->min_successful_responses, 0);
    assert_int_equal(fu->quorum_fallback, 0);
    assert_null(fu->quorum_fallback_target);
    assert_string_equal(fu->analysis_mode, "separate");
    assert_string_equal(fu->judge_prompt_version, "fusion-v1");
    assert_int_equal(fu->include_analysis + fu->include_intermediate_responses + fu->on_error_fail, 0);
    assert_int_equal(fu->grounding_enabled, 0);
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: workflows}"));
    dec = only_decision(c);
    const vsr_algo_workflows_conf_t *wf = &dec->algo.u.workflows;
    assert_int_equal(dec->algo.kind, VSR_ALGO_WORKFLOWS);
    assert_int_equal(wf->dynamic, 0);
    assert_string_equal(wf->template_name, "micro_agent");
    assert_null(wf->planner_model);
    assert_int_equal(wf->planner_max_completion_tokens, 2048);
    assert_int_equal(wf->max_steps, 3);
    assert_int_equal(wf->max_parallel, 2);
    assert_int_equal(wf->has_temperature, 0);
    assert_int_equal(wf->include_intermediate_responses, 1);
    assert_int_equal(wf->on_error_fail, 1);
    assert_int_equal(wf->n_roles, 0);
    assert_null(wf->final_model);
    assert_null(wf->final_prompt);
    /* no integrations block: the looper defaults */
    assert_int_equal(c->looper.timeout_ms, 120000);
    assert_int_equal(c->looper.max_response_bytes, 32u * 1024 * 1024);
    assert_int_equal(c->looper.grpc_max_msg_size_mb, 16);
    assert_null(c->looper.endpoint);
    vsr_config_free(c);

    /* an empty endpoint is the reference's "none": the graphs run in process */
    c = load_ok(ALGO_DOC("{type: confidence}")
                "global: {integrations: {looper: {endpoint: \"\", timeout_seconds: 30}}}\n");
    assert_null(c->looper.endpoint);
    assert_int_equal(c->looper.timeout_ms, 30000);
    assert_int_equal(only_decision(c)->algo.kind, VSR_ALGO_CONFIDENCE);
    vsr_config_free(c);

    /* static keeps its name and kind; no algorithm at all is static too */
    c = load_ok(ALGO_DOC("{type: static}"));
    assert_int_equal(only_decision(c)->algo.kind, VSR_ALGO_STATIC);
    assert_string_equal(only_decision(c)->algorithm, "static");
    vsr_config_free(c);
}

/* Every field of every block lands in its member. */
static void test_looper_fields(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(ALGO_DOC(
        "{type: confidence, on_error: fail, budget: {max_calls: 6, deadline: 1.5s, max_upstream_bytes: 1048576},"
        " confidence: {confidence_method: hybrid, threshold: 0.6, escalation_order: small_to_large,"
        " hybrid_weights: {logprob_weight: 0.7, margin_weight: 0}, token_filter: tool_call_args,"
        " verifier_server_url: \"http://127.0.0.1:9000/verify\", verifier_timeout_seconds: 5,"
        " cost_quality_tradeoff: 1}}"));
    const vsr_decision_conf_t *dec = only_decision(c);
    const vsr_algo_confidence_conf_t *cf = &dec->algo.u.confidence;
    assert_string_equal(dec->algo.on_error, "fail");
    assert_int_equal(dec->algo.budget.max_calls, 6);
    assert_int_equal(dec->algo.budget.deadline_ms, 1500);
    assert_int_equal(dec->algo.budget.max_upstream_bytes, 1048576);
    assert_string_equal(cf->method, "hybrid");
    assert_true(cf->has_threshold && cf->threshold == 0.6);
    assert_string_equal(cf->escalation_order, "size"); /* small_to_large is the same order */
    assert_true(cf->logprob_weight == 0.7 && cf->margin_weight == 0);
    assert_string_equal(cf->token_filter, "tool_call_args");
    assert_int_equal(cf->on_error_fail, 1); /* from algorithm.on_error */
    assert_string_equal(cf->verifier_server_url, "http://127.0.0.1:9000/verify");
    assert_int_equal(cf->verifier_timeout_ms, 5000);
    assert_true(cf->cost_quality_tradeoff == 1);
    vsr_config_free(c);

    /* the reference's "not configured": an empty verifier URL and a 0
     * timeout (its 60 seconds); empty templates are the built-in ones */
    c = load_ok(ALGO_DOC("{type: confidence, confidence: {confidence_method: hybrid,"
                         " verifier_server_url: \"\", verifier_timeout_seconds: 0}}"));
    cf = &only_decision(c)->algo.u.confidence;
    assert_null(cf->verifier_server_url);
    assert_int_equal(cf->verifier_timeout_ms, 0);
    vsr_config_free(c);
    c = load_ok(ALGO_DOC("{type: fusion, fusion: {analysis_template: \"\", synthesis_template: ''}}"));
    assert_null(only_decision(c)->algo.u.fusion.analysis_template);
    assert_null(only_decision(c)->algo.u.fusion.synthesis_template);
    vsr_config_free(c);
    c = load_ok(ALGO_DOC("{type: remom, remom: {synthesis_template: \"\"}}"));
    assert_null(only_decision(c)->algo.u.remom.synthesis_template);
    vsr_config_free(c);

    /* the block's own on_error wins over algorithm.on_error */
    c = load_ok(ALGO_DOC("{type: ratings, on_error: fail, ratings: {max_concurrent: 1, on_error: skip}}"));
    assert_int_equal(only_decision(c)->algo.u.ratings.max_concurrent, 1);
    assert_int_equal(only_decision(c)->algo.u.ratings.on_error_fail, 0);
    vsr_config_free(c);
    c = load_ok(ALGO_DOC("{type: ratings, on_error: fallback}"));
    assert_string_equal(only_decision(c)->algo.on_error, "fallback");
    assert_int_equal(only_decision(c)->algo.u.ratings.on_error_fail, 0);
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: remom, remom: {breadth_schedule: [3, 2], model_distribution: round_robin,"
                         " synthesis_model: n, synthesis_template: \"a\\nb\", compaction_strategy: last_n_tokens,"
                         " compaction_tokens: 500, include_reasoning: true, temperature: 0, "
                         "max_completion_tokens: 64,"
                         " max_concurrent: 2, round_timeout_seconds: 30, min_successful_responses: 1,"
                         " max_responses_per_round: 3, shuffle_seed: 7, on_error: fail,"
                         " include_intermediate_responses: false}}"));
    const vsr_algo_remom_conf_t *rm = &only_decision(c)->algo.u.remom;
    assert_int_equal(rm->n_breadth_schedule, 2);
    assert_int_equal(rm->breadth_schedule[0], 3);
    assert_int_equal(rm->breadth_schedule[1], 2);
    assert_string_equal(rm->model_distribution, "round_robin");
    assert_string_equal(rm->synthesis_model, "n");
    assert_string_equal(rm->synthesis_template, "a\nb");
    assert_string_equal(rm->compaction_strategy, "last_n_tokens");
    assert_int_equal(rm->compaction_tokens, 500);
    assert_int_equal(rm->include_reasoning, 1);
    assert_true(rm->temperature == 0);
    assert_int_equal(rm->max_completion_tokens, 64);
    assert_int_equal(rm->max_concurrent, 2);
    assert_int_equal(rm->round_timeout_ms, 30000);
    assert_int_equal(rm->min_successful_responses, 1);
    assert_int_equal(rm->max_responses_per_round, 3);
    assert_int_equal(rm->shuffle_seed, 7);
    assert_int_equal(rm->on_error_fail, 1);
    assert_int_equal(rm->include_intermediate_responses, 0);
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: fusion, fusion: {analysis_models: [m, n], model: n,"
                         " analysis_overrides: [{model: m, temperature: 0.2, max_completion_tokens: 9}, {model: n}],"
                         " max_concurrent: 2, round_timeout_seconds: 45, temperature: 0.5, max_completion_tokens: 99,"
                         " min_successful_responses: 3, quorum_failure_policy: fallback, quorum_fallback_target: m,"
                         " analysis_mode: one_call, analysis_template: A, synthesis_template: S,"
                         " judge_prompt_version: fusion-v2, include_analysis: true,"
                         " include_intermediate_responses: true, on_error: fail,"
                         " grounding: {enabled: true, reference: panel, policy: filter, min_score: 0.5}}}"));
    const vsr_algo_fusion_conf_t *fu = &only_decision(c)->algo.u.fusion;
    assert_int_equal(fu->analysis_models.n, 2);
    assert_string_equal(fu->analysis_models.items[1], "n");
    assert_string_equal(fu->model, "n");
    assert_int_equal(fu->n_analysis_overrides, 2);
    assert_string_equal(fu->analysis_overrides[0].model, "m");
    assert_true(fu->analysis_overrides[0].has_temperature && fu->analysis_overrides[0].temperature == 0.2);
    assert_int_equal(fu->analysis_overrides[0].max_completion_tokens, 9);
    assert_int_equal(fu->analysis_overrides[1].has_temperature, 0);
    assert_int_equal(fu->max_concurrent, 2);
    assert_int_equal(fu->round_timeout_ms, 45000);
    assert_true(fu->has_temperature && fu->temperature == 0.5);
    assert_int_equal(fu->max_completion_tokens, 99);
    assert_int_equal(fu->min_successful_responses, 2); /* 3, capped to the panel */
    assert_int_equal(fu->quorum_fallback, 1);
    assert_string_equal(fu->quorum_fallback_target, "m");
    assert_string_equal(fu->analysis_mode, "one_call");
    assert_string_equal(fu->analysis_template, "A");
    assert_string_equal(fu->synthesis_template, "S");
    assert_string_equal(fu->judge_prompt_version, "fusion-v2");
    assert_int_equal(fu->include_analysis + fu->include_intermediate_responses + fu->on_error_fail, 3);
    assert_int_equal(fu->grounding_enabled, 1);
    assert_int_equal(c->n_unimplemented, 1); /* grounding is not implemented: recorded */
    assert_string_equal(c->unimplemented[0], "routing.decisions[].algorithm.fusion.grounding.enabled");
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: workflows, workflows: {mode: static, template: t2, planner: {model: n,"
                         " max_completion_tokens: 100}, max_steps: 5, max_parallel: 4, max_completion_tokens: 50,"
                         " round_timeout_seconds: 60, min_successful_responses: 1, temperature: 0.3,"
                         " include_intermediate_responses: false, on_error: skip,"
                         " roles: [{name: r1, model: m, prompt: P1}, {name: r2, prompt: P2, access_list: [r1]}],"
                         " final: {model: n, prompt: F}}}"));
    const vsr_algo_workflows_conf_t *wf = &only_decision(c)->algo.u.workflows;
    assert_int_equal(wf->dynamic, 0);
    assert_string_equal(wf->template_name, "t2");
    assert_string_equal(wf->planner_model, "n");
    assert_int_equal(wf->planner_max_completion_tokens, 100);
    assert_int_equal(wf->max_steps, 5);
    assert_int_equal(wf->max_parallel, 4);
    assert_int_equal(wf->max_completion_tokens, 50);
    assert_int_equal(wf->round_timeout_ms, 60000);
    assert_int_equal(wf->min_successful_responses, 1);
    assert_true(wf->has_temperature && wf->temperature == 0.3);
    assert_int_equal(wf->include_intermediate_responses, 0);
    assert_int_equal(wf->on_error_fail, 0);
    assert_int_equal(wf->n_roles, 2);
    assert_string_equal(wf->roles[0].name, "r1");
    assert_string_equal(wf->roles[0].model, "m");
    assert_string_equal(wf->roles[0].prompt, "P1");
    assert_int_equal(wf->roles[0].access_list.n, 0);
    assert_null(wf->roles[1].model);
    assert_int_equal(wf->roles[1].access_list.n, 1);
    assert_string_equal(wf->roles[1].access_list.items[0], "r1");
    assert_string_equal(wf->final_model, "n");
    assert_string_equal(wf->final_prompt, "F");
    vsr_config_free(c);

    /* roles[].models (the reference's form): each model answers the role */
    c = load_ok(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a, prompt: p, models: [m, n]}]}}"));
    wf = &only_decision(c)->algo.u.workflows;
    assert_int_equal(wf->roles[0].models.n, 2);
    assert_string_equal(wf->roles[0].models.items[1], "n");
    assert_null(wf->roles[0].model);
    vsr_config_free(c);

    /* without analysis_models the panel is the modelRefs; a quorum within it stays */
    c = load_ok(ALGO_DOC("{type: fusion, fusion: {min_successful_responses: 5}}"));
    assert_int_equal(only_decision(c)->algo.u.fusion.min_successful_responses, 2);
    vsr_config_free(c);
    c = load_ok(ALGO_DOC("{type: fusion, fusion: {min_successful_responses: 1}}"));
    assert_int_equal(only_decision(c)->algo.u.fusion.min_successful_responses, 1);
    vsr_config_free(c);
    /* a null block is the defaults; a null block of another type is still refused */
    c = load_ok(ALGO_DOC("{type: remom, remom: null}"));
    assert_int_equal(only_decision(c)->algo.u.remom.breadth_schedule[0], 4);
    vsr_config_free(c);

    c = load_ok(ALGO_DOC("{type: workflows, workflows: {mode: dynamic}}"));
    assert_int_equal(only_decision(c)->algo.u.workflows.dynamic, 1);
    vsr_config_free(c);
}

/* Bad values: each with its message at its line:col. */
static void test_looper_errors(void **state)
{
    (void)state;
    /* the algorithm line is 15, its value starts at column 18 */
    expect_errors(ALGO_DOC("{type: confidence, confidence: {threshold: 1.5}}"),
                  "t.yaml:15:61: threshold must be between 0 and 1, got 1.5\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {confidence_method: entropy}}"),
                  "t.yaml:15:69: confidence_method must be \"avg_logprob\", \"margin\", \"hybrid\", "
                  "\"self_verify\" or \"automix_entailment\", got \"entropy\"\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {hybrid_weights: {margin_weight: -0.1}}}"),
                  "t.yaml:15:82: margin_weight must be between 0 and 1e+06, got -0.1\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {confidence_method: hybrid,"
                           " hybrid_weights: {logprob_weight: 0, margin_weight: 0}}}"),
                  "t.yaml:15:93: hybrid_weights: at least one weight must be greater than 0\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {confidence_method: automix_entailment}}"),
                  "t.yaml:15:49: confidence_method \"automix_entailment\" needs verifier_server_url\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {confidence_method: automix_entailment,"
                           " verifier_server_url: \"\"}}"),
                  "t.yaml:15:49: confidence_method \"automix_entailment\" needs verifier_server_url\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {verifier_timeout_seconds: -1}}"),
                  "t.yaml:15:76: verifier_timeout_seconds must be between 0 and 1000000000 seconds, got -1\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {verifier_server_url: \"ftp://x\"}}"),
                  "t.yaml:15:71: verifier_server_url: invalid URL \"ftp://x\": the scheme must be http:// or "
                  "https://\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {cost_quality_tradeoff: 2}}"),
                  "t.yaml:15:73: cost_quality_tradeoff must be between 0 and 1, got 2\n");
    expect_errors(ALGO_DOC("{type: confidence, confidence: {thresold: 0.5}}"),
                  "t.yaml:15:50: unknown key \"thresold\"; did you mean \"threshold\"?\n");
    expect_errors(ALGO_DOC("{type: ratings, ratings: {on_error: retry}}"),
                  "t.yaml:15:54: on_error must be \"skip\" or \"fail\", got \"retry\"\n");
    expect_errors(ALGO_DOC("{type: ratings, on_error: maybe}"),
                  "t.yaml:15:44: on_error must be \"skip\", \"fail\" or \"fallback\", got \"maybe\"\n");
    expect_errors(ALGO_DOC("{type: ratings, budget: {max_calls: 0}}"),
                  "t.yaml:15:54: max_calls must be between 1 and 10000, got 0\n");
    expect_errors(ALGO_DOC("{type: ratings, budget: {max_upstream_bytes: 0}}"),
                  "t.yaml:15:63: max_upstream_bytes must be between 1 and 68719476736, got 0\n");
    expect_errors(ALGO_DOC("{type: ratings, budget: {deadline: soon}}"),
                  "t.yaml:15:53: invalid duration \"soon\" (use e.g. \"300s\", \"1.5s\", \"250ms\", \"5m\", "
                  "\"1h\")\n");
    expect_errors(ALGO_DOC("{type: ratings, budget: {calls: 3}}"), 
                  "t.yaml:15:43: unknown key \"calls\"\n");
    expect_errors(ALGO_DOC("{type: remom, remom: {breadth_schedule: [2, 0]}}"),
                  "t.yaml:15:62: breadth_schedule: a round makes 1 to 64 calls, got 0\n");
    expect_errors(ALGO_DOC("{type: remom, remom: {breadth_schedule: []}}"),
                  "t.yaml:15:58: breadth_schedule must hold 1 to 16 rounds, got 0\n");
    expect_errors(ALGO_DOC("{type: remom, remom: {breadth_schedule: 3}}"),
                  "t.yaml:15:58: breadth_schedule: expected a list of call counts, got an integer\n");
    expect_errors(ALGO_DOC("{type: remom, remom: {model_distribution: random}}"),
                  "t.yaml:15:60: model_distribution must be \"weighted\", \"equal\", \"round_robin\" or "
                  "\"first_only\", got \"random\"\n");
    expect_errors(ALGO_DOC("{type: remom, remom: {temperature: 3}}"),
                  "t.yaml:15:53: temperature must be between 0 and 2, got 3\n");
    expect_errors(ALGO_DOC("{type: remom, remom: {include_reasoning: yes}}"),
                  "t.yaml:15:59: expected a boolean (true or false), got a string\n");
    expect_errors(ALGO_DOC("{type: remom, fusion: null}"),
                  "t.yaml:15:32: algorithm.fusion only applies to type \"fusion\"\n");
    expect_errors(ALGO_DOC("{type: remom, confidence: {}}"),
                  "t.yaml:15:32: algorithm.confidence only applies to type \"confidence\"\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {quorum_failure_policy: fallback}}"),
                  "t.yaml:15:65: quorum_failure_policy \"fallback\" needs quorum_fallback_target\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {quorum_fallback_target: m}}"),
                  "t.yaml:15:66: quorum_fallback_target only applies with quorum_failure_policy: fallback\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {analysis_models: [m, m]}}"),
                  "t.yaml:15:63: duplicate model \"m\" (first defined at 15:60)\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {analysis_overrides: [{temperature: 1}]}}"),
                  "t.yaml:15:63: missing required key \"model\"\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {analysis_mode: twice}}"),
                  "t.yaml:15:57: analysis_mode must be \"separate\", \"one_call\" or \"none\", got \"twice\"\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {grounding: {policy: drop}}}"),
                  "t.yaml:15:62: policy must be \"weight\", \"annotate\" or \"filter\", got \"drop\"\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {mode: auto}}"),
                  "t.yaml:15:54: mode must be \"static\" or \"dynamic\", got \"auto\"\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {max_steps: 0}}"),
                  "t.yaml:15:59: max_steps must be between 1 and 32, got 0\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a}]}}"),
                  "t.yaml:15:56: missing required key \"prompt\"\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a, prompt: p}, {name: a, prompt: q}]}}"),
                  "t.yaml:15:85: duplicate role name \"a\" (first defined at 15:63)\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a, prompt: p, access_list: [b]}, "
                           "{name: b, prompt: q}]}}"),
                  "t.yaml:15:91: access_list: \"b\" is not an earlier role of this flow\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {mode: dynamic, roles: [{name: a, prompt: p}]}}"),
                  "t.yaml:15:70: roles only apply to mode \"static\" (a dynamic flow's steps come from its "
                  "planner)\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {final: {prompt: \"\"}}}"),
                  "t.yaml:15:64: prompt must be non-empty text\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a, prompt: p, model: m, models: [n]}]}}"),
                  "t.yaml:15:95: a role takes model or models, not both\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a, prompt: p, models: []}]}}"),
                  "t.yaml:15:85: models: a role's models name at least one model\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a, prompt: p, models: [m, m]}]}}"),
                  "t.yaml:15:89: duplicate model \"m\" (first defined at 15:86)\n");
    {
        /* at most VSR_FLOW_ROLE_MAX_MODELS models a role, VSR_FLOW_MAX_CALLS calls in all */
        char algo[4096], yaml[8192];
        int len = snprintf(algo, sizeof(algo), "{type: workflows, workflows: {roles: [{name: a, prompt: p, models: [");
        for (unsigned i = 0; i <= VSR_FLOW_ROLE_MAX_MODELS; i++)
            len += snprintf(algo + len, sizeof(algo) - (size_t)len, "%sx%u", i ? ", " : "", i);
        snprintf(algo + len, sizeof(algo) - (size_t)len, "]}]}}");
        snprintf(yaml, sizeof(yaml), ALGO_DOC("%s"), algo);
        vsr_buf_t err;
        vsr_buf_init(&err, 1 << 16);
        vsr_config_t *bad = NULL;
        assert_int_equal(vsr_config_load_string("t.yaml", yaml, strlen(yaml), &bad, &err), VSR_ERR_INVALID);
        vsr_buf_append(&err, "", 1);
        assert_non_null(strstr(err.data, "t.yaml:15:85: models: at most 16 models a role, got 17\n"));
        vsr_buf_reset(&err);
        len = snprintf(algo, sizeof(algo), "{type: workflows, workflows: {roles: [");
        for (unsigned r = 0; r < 5; r++) {
            len += snprintf(algo + len, sizeof(algo) - (size_t)len, "%s{name: r%u, prompt: p, models: [",
                            r ? ", " : "", r);
            for (unsigned i = 0; i < VSR_FLOW_ROLE_MAX_MODELS; i++)
                len += snprintf(algo + len, sizeof(algo) - (size_t)len, "%sx%u", i ? ", " : "", i);
            len += snprintf(algo + len, sizeof(algo) - (size_t)len, "]}");
        }
        snprintf(algo + len, sizeof(algo) - (size_t)len, "]}}");
        snprintf(yaml, sizeof(yaml), ALGO_DOC("%s"), algo);
        assert_int_equal(vsr_config_load_string("t.yaml", yaml, strlen(yaml), &bad, &err), VSR_ERR_INVALID);
        vsr_buf_append(&err, "", 1);
        assert_non_null(strstr(err.data, "roles: at most 64 model calls in all (each role's models counted), this "
                                         "role makes 80\n"));
        vsr_buf_free(&err);
    }
    /* the other catalogue types stay refused */
    expect_errors(ALGO_DOC("{type: svm}"), 
                  "t.yaml:15:25: algorithm type \"svm\" is not supported yet\n");
}

/* router_dc: the reference's defaults, its fields, the cards' capabilities,
 * and require_descriptions refusing a candidate without a description. */
static void test_router_dc_config(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(ALGO_DOC("{type: router_dc}"));
    const vsr_algo_router_dc_conf_t *r = &only_decision(c)->algo.u.router_dc;
    assert_int_equal(only_decision(c)->algo.kind, VSR_ALGO_ROUTER_DC);
    assert_float_equal(r->temperature, 0.07, 1e-12);
    assert_float_equal(r->min_similarity, 0.3, 1e-12);
    assert_int_equal(r->dimension_size, 768);
    assert_true(r->use_capabilities && r->use_query_contrastive && r->use_model_contrastive);
    assert_false(r->require_descriptions);
    vsr_config_free(c);
    c = load_ok(ALGO_DOC("{type: router_dc, minimum_candidates: 2, router_dc: {temperature: 0.5, "
                         "min_similarity: 0.6, use_capabilities: false}}")
                "  modelCards:\n"
                "    - {name: m, description: Code generation, capabilities: [code, math]}\n");
    r = &only_decision(c)->algo.u.router_dc;
    assert_float_equal(r->temperature, 0.5, 1e-12);
    assert_float_equal(r->min_similarity, 0.6, 1e-12);
    assert_false(r->use_capabilities);
    assert_int_equal(only_decision(c)->algo.minimum_candidates, 2);
    assert_int_equal(c->model_cards[0].capabilities.n, 2);
    assert_string_equal(c->model_cards[0].capabilities.items[1], "math");
    vsr_config_free(c);
    expect_errors(ALGO_DOC("{type: router_dc, router_dc: {require_descriptions: true}}")
                  "  modelCards:\n"
                  "    - {name: m, capabilities: [code]}\n",
                  "t.yaml:14:39: decision \"d\": router_dc.require_descriptions is true but model \"n\" has no "
                  "modelCards description or capabilities\n");
    expect_errors(ALGO_DOC("{type: router_dc, router_dc: {temperature: 0}}"),
                  "t.yaml:15:61: temperature must be between 1e-06 and 1e+06, got 0\n");
}

/* prompt: model and instructions required, the model a provider model. */
static void test_prompt_selector_config(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(ALGO_DOC("{type: prompt, prompt: {model: n, instructions: Pick one., "
                                       "timeout_seconds: 3}}"));
    const vsr_algo_prompt_conf_t *p = &only_decision(c)->algo.u.prompt;
    assert_int_equal(only_decision(c)->algo.kind, VSR_ALGO_PROMPT);
    assert_string_equal(p->model, "n");
    assert_string_equal(p->instructions, "Pick one.");
    assert_int_equal(p->timeout_seconds, 3);
    vsr_config_free(c);
    expect_errors(ALGO_DOC("{type: prompt}"),
                  "t.yaml:15:18: algorithm type \"prompt\" needs algorithm.prompt (its model and instructions)\n");
    expect_errors(ALGO_DOC("{type: prompt, prompt: {model: n}}"),
                  "t.yaml:15:41: missing required key \"instructions\"\n");
    expect_errors(ALGO_DOC("{type: prompt, prompt: {model: ghost, instructions: x}}"),
                  "t.yaml:15:49: algorithm.prompt.model \"ghost\" is neither a model of providers.models nor one of "
                  "the decision's modelRefs\n");
}

/* Model names in the blocks: a provider model or one of the decision's modelRefs. */
static void test_looper_model_names(void **state)
{
    (void)state;
    /* a provider model that is not a modelRef is fine (here: n is a provider model, only m a modelRef) */
    vsr_config_t *c = load_ok(LOOPER_DOC "routing:\n"
                                         "  decisions:\n"
                                         "    - name: d\n"
                                         "      modelRefs: [{model: m}]\n"
                                         "      algorithm: {type: fusion, fusion: {model: n, analysis_models: "
                                         "[m]}}\n");
    vsr_config_free(c);
    expect_errors(ALGO_DOC("{type: remom, remom: {synthesis_model: ghost}}"),
                  "t.yaml:15:57: algorithm.remom.synthesis_model \"ghost\" is neither a model of "
                  "providers.models nor one of the decision's modelRefs\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {model: ghost}}"),
                  "t.yaml:15:49: algorithm.fusion.model \"ghost\" is neither a model of providers.models nor "
                  "one of the decision's modelRefs\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {analysis_models: [m, ghost]}}"),
                  "t.yaml:15:63: algorithm.fusion.analysis_models: \"ghost\" is neither a model of "
                  "providers.models nor one of the decision's modelRefs\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {analysis_models: [m], analysis_overrides: [{model: n}]}}"),
                  "t.yaml:15:93: algorithm.fusion.analysis_overrides[].model \"n\" is not a panel model "
                  "(analysis_models)\n");
    expect_errors(ALGO_DOC("{type: fusion, fusion: {quorum_failure_policy: fallback, quorum_fallback_target: ghost}}"),
                  "t.yaml:15:99: algorithm.fusion.quorum_fallback_target \"ghost\" is not defined in "
                  "providers.models\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {planner: {model: ghost}, final: {model: ghost2},"
                           " roles: [{name: a, prompt: p, model: ghost3}]}}"),
                  "t.yaml:15:65: algorithm.workflows.planner.model \"ghost\" is neither a model of "
                  "providers.models nor one of the decision's modelRefs\n"
                  "t.yaml:15:88: algorithm.workflows.final.model \"ghost2\" is neither a model of "
                  "providers.models nor one of the decision's modelRefs\n"
                  "t.yaml:15:133: algorithm.workflows.roles[].model \"ghost3\" is neither a model of "
                  "providers.models nor one of the decision's modelRefs\n");
    expect_errors(ALGO_DOC("{type: workflows, workflows: {roles: [{name: a, prompt: p, models: [m, ghost]}]}}"),
                  "t.yaml:15:89: algorithm.workflows.roles[].models: \"ghost\" is neither a model of "
                  "providers.models nor one of the decision's modelRefs\n");
}

/* global.integrations.looper, providers.models[].pricing, modelCards[].quality_score */
static void test_looper_integration_pricing(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(HEAD LISTENERS
                              "providers:\n"
                              "  models:\n"
                              "    - name: m\n"
                              "      backend_refs: [{endpoint: 127.0.0.1:8000}]\n"
                              "      pricing: {currency: USD, prompt_per_1m: 0.18, completion_per_1m: 0.42,"
                              " cached_input_per_1m: 0.01, cache_write_per_1m: 0}\n"
                              "    - name: n\n"
                              "      backend_refs: [{endpoint: 127.0.0.1:8000}]\n"
                              "routing:\n"
                              "  modelCards: [{name: m, quality_score: 0.8}, {name: n}]\n"
                              "global:\n"
                              "  integrations:\n"
                              "    looper:\n"
                              "      endpoint: http://localhost:8899/v1/chat/completions\n"
                              "      timeout_seconds: 30\n"
                              "      retry_count: 2\n"
                              "      headers: {x-team: a}\n"
                              "      max_response_bytes_mb: 4\n"
                              "      grpc_max_msg_size_mb: 8\n"
                              "      remom: {model_names: [vllm-sr/remom]}\n"
                              "      fusion: {model_names: [vllm-sr/fusion, f2]}\n"
                              "      flow: {model_names: [vllm-sr/flow], state: {store_backend: file, "
                              "ttl_seconds: 60}}\n");
    const vsr_model_conf_t *m = &c->models[0];
    assert_int_equal(m->has_pricing, 1);
    assert_string_equal(m->pricing_currency, "USD");
    assert_true(m->has_prompt_per_1m && m->prompt_per_1m == 0.18);
    assert_true(m->has_completion_per_1m && m->completion_per_1m == 0.42);
    assert_true(m->has_cached_input_per_1m && m->cached_input_per_1m == 0.01);
    assert_true(m->has_cache_write_per_1m && m->cache_write_per_1m == 0);
    assert_int_equal(c->models[1].has_pricing, 0);
    assert_int_equal(c->models[1].has_prompt_per_1m, 0);
    assert_true(c->model_cards[0].has_quality_score && c->model_cards[0].quality_score == 0.8);
    assert_int_equal(c->model_cards[1].has_quality_score, 0);
    const vsr_looper_integration_conf_t *l = &c->looper;
    assert_string_equal(l->endpoint, "http://localhost:8899/v1/chat/completions");
    assert_int_equal(l->timeout_ms, 30000);
    assert_int_equal(l->retry_count, 2);
    assert_int_equal(l->n_headers, 1);
    assert_string_equal(l->headers[0].name, "x-team");
    assert_string_equal(l->headers[0].value, "a");
    assert_int_equal(l->max_response_bytes, 4u * 1024 * 1024);
    assert_int_equal(l->grpc_max_msg_size_mb, 8);
    assert_int_equal(l->remom_model_names.n, 1);
    assert_string_equal(l->remom_model_names.items[0], "vllm-sr/remom");
    assert_int_equal(l->fusion_model_names.n, 2);
    assert_int_equal(l->flow_model_names.n, 1);
    assert_string_equal(l->flow_state_store_backend, "file");
    assert_int_equal(l->flow_state_ttl_ms, 60000);
    /* flow state is not kept: the store is recorded */
    assert_int_equal(c->n_unimplemented, 1);
    assert_string_equal(c->unimplemented[0], "global.integrations.looper.flow.state.store_backend");
    vsr_config_free(c);

    expect_errors(DOC "global: {integrations: {looper: {max_response_bytes_mb: 0}}}\n",
                  "t.yaml:10:57: max_response_bytes_mb must be between 1 and 1024, got 0\n");
    expect_errors(DOC "global: {integrations: {looper: {timeout_seconds: 0}}}\n",
                  "t.yaml:10:51: timeout_seconds must be between 1 and 1000000000 seconds, got 0\n");
    expect_errors(DOC "global: {integrations: {looper: {remom: {names: []}}}}\n",
                  "t.yaml:10:42: unknown key \"names\"\n");
    expect_errors(DOC "global: {integrations: {loopr: {}}}\n", "t.yaml:10:25: unknown key \"loopr\"; did you mean \"looper\"?\n");
    expect_errors(DOC "      pricing: {prompt_per_1m: -1}\n",
                  "t.yaml:10:32: prompt_per_1m must be between 0 and 1e+09, got -1\n");
    expect_errors(DOC "      pricing: {per_token: 1}\n", "t.yaml:10:17: unknown key \"per_token\"\n");
    expect_errors(DOC "routing: {modelCards: [{name: m, quality_score: 1.5}]}\n",
                  "t.yaml:10:49: quality_score must be between 0 and 1, got 1.5\n");
    /* integrations.tools: its defaults (no database named) */
    c = load_ok(DOC "global: {integrations: {tools: {enabled: true}}}\n");
    assert_int_equal(c->n_unimplemented, 0);
    assert_int_equal(c->tools.present, 1);
    assert_int_equal(c->tools.top_k, 3);
    assert_int_equal(c->tools.db.n, 0);
    vsr_config_free(c);
}


/* ---- global.integrations.tools, the tools database, the semantic tool plugins ---- */

static const char tools_db_json[] =
    "[\n"
    "  {\"tool\": {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather\",\n"
    "            \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}},\n"
    "   \"description\": \"Weather forecast for a city\", \"category\": \"weather\", \"tags\": [\"rain\", \"sun\"]},\n"
    "  {\"tool\": {\"type\": \"function\", \"function\": {\"name\": \"send_email\", \"description\": \"Send an email\"}}}\n"
    "]\n";

static char *write_tmp(const char *content)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/vsr-tools-db-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(content);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    close(fd);
    return path;
}

static void expect_db_error(const char *json, const char *expected)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_tools_db_t db;
    assert_int_equal(vsr_tools_db_parse("db.json", json, strlen(json), &pool, &db, &err), VSR_ERR_INVALID);
    vsr_buf_append(&err, "", 1);
    assert_string_equal(err.data, expected);
    vsr_buf_free(&err);
    vsr_pool_free(&pool);
}

static void load_missing_tools_db(void *arg)
{
    vsr_config_t **c = arg;
    *c = load_ok(DOC "routing: {decisions: [{name: d, plugins: [{type: tool_selection,"
                     " configuration: {mode: add}}]}]}\n"
                     "global: {integrations: {tools: {tools_db_path: \"/nonexistent/db.json\"}}}\n");
}
static void test_tools_db_and_selection(void **state)
{
    (void)state;
    /* the database on its own */
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_tools_db_t db;
    assert_int_equal(vsr_tools_db_parse("db.json", tools_db_json, strlen(tools_db_json), &pool, &db, NULL), VSR_OK);
    assert_int_equal(db.n, 2);
    assert_string_equal(db.tools[0].name, "get_weather");
    assert_string_equal(db.tools[0].text, "get_weather: Weather forecast for a city (weather) Tags: rain, sun");
    assert_string_equal(db.tools[0].category, "weather");
    assert_int_equal(db.tools[0].tags.n, 2);
    assert_true(db.tools[0].json.len > 0 && db.tools[0].json.p[0] == '{' && db.tools[0].json.p[db.tools[0].json.len - 1] == '}');
    assert_string_equal(db.tools[1].text, "send_email: Send an email"); /* the function's description */
    assert_null(db.tools[1].category);
    vsr_pool_free(&pool);

    expect_db_error("{}", "db.json:1:1: a tools database is a JSON array of {\"tool\": {...}, \"description\": ...}\n");
    expect_db_error("[1,", "db.json:1:4: not valid JSON: unexpected end of input, expected a value\n");
    expect_db_error("[{\"description\": \"x\"}]", "db.json:1:2: missing \"tool\" (an OpenAI tool definition)\n");
    expect_db_error("[{\"tool\": {\"type\": \"web\", \"function\": {\"name\": \"a\", \"description\": \"d\"}}}]",
                    "db.json:1:11: tool.type must be \"function\"\n");
    expect_db_error("[{\"tool\": {\"type\": \"function\", \"function\": {\"name\": \"a b\", \"description\": \"d\"}}}]",
                    "db.json:1:44: tool.function.name must be 1 to 64 letters, digits, '_' or '-'\n");
    expect_db_error("[{\"tool\": {\"type\": \"function\", \"function\": {\"name\": \"a\"}}}]",
                    "db.json:1:2: tool \"a\" has no description (description or tool.function.description): it is "
                    "chosen by what its description says\n");
    expect_db_error("[{\"tool\": {\"type\": \"function\", \"function\": {\"name\": \"a\", \"description\": \"d\"}}},\n"
                    " {\"tool\": {\"type\": \"function\", \"function\": {\"name\": \"a\", \"description\": \"e\"}}}]",
                    "db.json:2:2: duplicate tool name \"a\" (first at entry 1)\n");
    expect_db_error("[{\"tool\": {\"type\": \"function\", \"function\": {\"name\": \"a\", \"description\": \"d\"}}, "
                    "\"tags\": [1]}]",
                    "db.json:1:89: tags must be a list of strings\n");
    expect_db_error("[{\"tool\": {}, \"tool\": {}}]", "db.json:1:15: duplicate key \"tool\"\n");

    /* in a document: loaded with it; the plugins take their defaults from it */
    char *path = write_tmp(tools_db_json);
    char doc[4096];
    snprintf(doc, sizeof(doc),
             DOC "global: {integrations: {tools: {top_k: 2, similarity_threshold: 0.4, tools_db_path: \"%s\", "
                 "fallback_to_empty: true}}}\n"
                 "routing:\n  decisions:\n    - name: d\n      plugins:\n"
                 "        - {type: tools, configuration: {semantic_selection: true}}\n"
                 "        - {type: tools, configuration: {semantic_selection: {top_k: 5}}}\n"
                 "        - {type: tool_selection, configuration: {mode: add}}\n"
                 "        - {type: tool_selection, configuration: {mode: filter, preserve_count: 0, relevance_threshold: 0.5}}\n",
             path);
    vsr_config_t *c = load_ok(doc);
    assert_int_equal(c->tools.db.n, 2);
    const vsr_plugin_conf_t *p = c->recipes[0].decisions[0].plugins;
    assert_int_equal(p[0].u.tools.semantic, 1);
    assert_int_equal(p[0].u.tools.top_k, 2);
    assert_true(p[0].u.tools.similarity_threshold == 0.4);
    assert_int_equal(p[0].u.tools.fallback_to_empty, 1);
    assert_int_equal(p[1].u.tools.semantic, 1);
    assert_int_equal(p[1].u.tools.top_k, 5);
    assert_int_equal(p[2].kind, VSR_PLUGIN_TOOL_SELECTION);
    assert_int_equal(p[2].u.tool_selection.mode, VSR_TOOLSEL_ADD);
    assert_int_equal(p[2].u.tool_selection.top_k, 2);
    assert_int_equal(p[3].u.tool_selection.mode, VSR_TOOLSEL_FILTER);
    assert_int_equal(p[3].u.tool_selection.preserve_count, 0);
    assert_true(p[3].u.tool_selection.relevance_threshold == 0.5);
    vsr_config_free(c);

    /* no integrations block: built-in defaults */
    c = load_ok(DOC "routing:\n  decisions:\n    - name: d\n      plugins:\n"
                    "        - {type: tools, configuration: {semantic_selection: {enabled: true}}}\n"
                    "        - {type: tool_selection, configuration: {mode: filter}}\n");
    p = c->recipes[0].decisions[0].plugins;
    assert_int_equal(p[0].u.tools.top_k, 3);
    assert_true(p[0].u.tools.similarity_threshold == 0.2);
    assert_int_equal(p[1].u.tool_selection.preserve_count, 1);
    vsr_config_free(c);

    /* a bad database fails the document, with its own positions */
    unlink(path);
    path = write_tmp("[\n  {\"tool\": 3}\n]\n");
    snprintf(doc, sizeof(doc), DOC "global: {integrations: {tools: {tools_db_path: \"%s\"}}}\n", path);
    char want[1024];
    snprintf(want, sizeof(want),
             "t.yaml:10:48: tools_db_path: \"%s\" is not a valid tools database:\n"
             "%s:2:12: \"tool\" must be an object {\"type\": \"function\", \"function\": {...}}\n", path, path);
    expect_errors(doc, want);
    unlink(path);
    /* a database that does not exist: a warning, and no tools (as the reference) */
    vsr_config_t *m = NULL;
    char *log = capture_stderr(load_missing_tools_db, &m);
    assert_non_null(strstr(log, "[config] t.yaml:11:48: tools_db_path: \"/nonexistent/db.json\" does not exist: "
                                "running without the tools database"));
    assert_int_equal(m->tools.db.n, 0);
    assert_true(m->tools.db_missing);
    assert_int_equal(m->recipes[0].decisions[0].plugins[0].kind, VSR_PLUGIN_TOOL_SELECTION);
    free(log);
    vsr_config_free(m);
}

/* ---- request graphs in YAML (algorithm type graph) ------------------------------- */

/* A graph with every node kind and every predicate, lines 11-41 */
#define GRAPH_DOC                                                                                          \
    LOOPER_DOC "routing:\n"                                                                                \
               "  signals:\n"                                                                              \
               "    keywords: [{name: urgent, operator: OR, keywords: [urgent]}]\n"                        \
               "  decisions:\n"                                                                            \
               "    - name: d\n"                                                                           \
               "      modelRefs: [{model: m}, {model: n}]\n"                                               \
               "      algorithm:\n"                                                                        \
               "        type: graph\n"                                                                     \
               "        on_error: fail\n"                                                                  \
               "        budget: {max_calls: 8, deadline: 30s}\n"                                           \
               "        graph:\n"                                                                          \
               "          subgraphs:\n"                                                                    \
               "            panel:\n"                                                                      \
               "              parallel: {models: [m, n], count: 4, max_concurrency: 2, first_k: 3,"        \
               " min_success: 2, temperature: 0.7, timeout: 5s, max_completion_tokens: 100,"               \
               " logprobs: true, top_logprobs: 3, strip_tools: true}\n"                                    \
               "            refine: {seq: [{transform: {system_prompt: be brief, prompt: \"again: {question}\"}}," \
               " {call: null}], name: refine-step}\n"                                                      \
               "          root:\n"                                                                         \
               "            - subgraph: panel\n"                                                           \
               "            - transform: {append: \"Combine these answers to {question}:\\n{responses}\"}\n" \
               "            - loop:\n"                                                                     \
               "                max_rounds: 3\n"                                                           \
               "                until: {rounds_gte: 2}\n"                                                  \
               "                body: {subgraph: refine}\n"                                                \
               "                name: polish\n"                                                            \
               "            - branch:\n"                                                                   \
               "                if: {signal: {type: keyword, name: urgent}}\n"                             \
               "                then: {parallel: {on_error: skip}}\n"                                      \
               "                else: {call: {models: [n]}, name: plain}\n"                                \
               "            - branch: {if: {confidence_gte: 0.5}, then: {respond: {aggregate: vote}},"     \
               " else: {branch: {if: {succeeded: false}, then: {call: {}},"                                \
               " else: {branch: {if: {answers_agree: true}, then: {respond: {aggregate: longest}}}}}}}\n"  \
               "            - call: {models: [n, m], stream: true, timeout: 20s, name: judge}\n"           \
               "            - respond: null\n"

static void assert_node(const vsr_gnode_conf_t *n, vsr_gnode_kind_t kind, const char *name, size_t n_kids,
                        uint32_t line, uint32_t col)
{
    assert_int_equal(n->kind, kind);
    assert_string_equal(n->name, name);
    assert_int_equal(n->n_kids, n_kids);
    assert_int_equal(n->line, line);
    assert_int_equal(n->col, col);
}

/* Every node kind decodes to the exact tree, with its defaults, position and resolved subgraphs. */
static void test_graph_tree(void **state)
{
    (void)state;
    vsr_config_t *c = load_ok(GRAPH_DOC);
    const vsr_decision_conf_t *dec = only_decision(c);
    assert_string_equal(dec->algorithm, "graph");
    assert_int_equal(dec->algo.kind, VSR_ALGO_GRAPH);
    assert_int_equal(dec->algo.budget.max_calls, 8);
    assert_int_equal(dec->algo.budget.deadline_ms, 30000);
    const vsr_graph_conf_t *g = &dec->algo.u.graph;

    assert_int_equal(g->n_subgraphs, 2);
    assert_string_equal(g->subgraphs[0].name, "panel");
    const vsr_gnode_conf_t *p = &g->subgraphs[0].node;
    assert_node(p, VSR_GNODE_PARALLEL, "parallel", 0, 24, 15);
    assert_int_equal(p->models.n, 2);
    assert_string_equal(p->models.items[0], "m");
    assert_string_equal(p->models.items[1], "n");
    assert_int_equal(p->count, 4);
    assert_int_equal(p->max_concurrency, 2);
    assert_int_equal(p->first_k, 3);
    assert_int_equal(p->min_success, 2);
    assert_true(p->has_temperature && p->temperature == 0.7);
    assert_int_equal(p->timeout_ms, 5000);
    assert_int_equal(p->max_completion_tokens, 100);
    assert_int_equal(p->logprobs, 1);
    assert_int_equal(p->top_logprobs, 3);
    assert_int_equal(p->strip_tools, 1);
    assert_int_equal(p->stream, 0);
    assert_int_equal(p->on_error_fail, 1); /* from algorithm.on_error */
    assert_null(p->resolved);

    assert_string_equal(g->subgraphs[1].name, "refine");
    const vsr_gnode_conf_t *r = &g->subgraphs[1].node;
    assert_node(r, VSR_GNODE_SEQ, "refine-step", 2, 25, 21);
    assert_node(&r->kids[0], VSR_GNODE_TRANSFORM, "transform", 0, 25, 28);
    assert_string_equal(r->kids[0].system_prompt, "be brief");
    assert_string_equal(r->kids[0].prompt, "again: {question}");
    assert_null(r->kids[0].append);
    assert_node(&r->kids[1], VSR_GNODE_CALL, "call", 0, 25, 97);
    assert_int_equal(r->kids[1].models.n, 0);
    assert_int_equal(r->kids[1].has_temperature, 0);
    assert_int_equal(r->kids[1].timeout_ms, 0);

    const vsr_gnode_conf_t *root = &g->root;
    assert_node(root, VSR_GNODE_SEQ, "seq", 7, 27, 13);
    const vsr_gnode_conf_t *k = root->kids;
    assert_node(&k[0], VSR_GNODE_SUBGRAPH, "subgraph", 0, 27, 15);
    assert_string_equal(k[0].subgraph, "panel");
    assert_ptr_equal(k[0].resolved, &g->subgraphs[0].node);

    assert_node(&k[1], VSR_GNODE_TRANSFORM, "transform", 0, 28, 15);
    assert_string_equal(k[1].append, "Combine these answers to {question}:\n{responses}");
    assert_null(k[1].prompt);
    assert_null(k[1].system_prompt);

    assert_node(&k[2], VSR_GNODE_LOOP, "polish", 1, 29, 15);
    assert_int_equal(k[2].max_rounds, 3);
    assert_int_equal(k[2].until.kind, VSR_GPRED_ROUNDS_GTE);
    assert_true(k[2].until.value == 2);
    assert_node(&k[2].kids[0], VSR_GNODE_SUBGRAPH, "subgraph", 0, 32, 23);
    assert_ptr_equal(k[2].kids[0].resolved, &g->subgraphs[1].node);

    assert_node(&k[3], VSR_GNODE_BRANCH, "branch", 2, 34, 15);
    assert_int_equal(k[3].until.kind, VSR_GPRED_SIGNAL);
    assert_string_equal(k[3].until.signal_type, "keyword");
    assert_string_equal(k[3].until.signal_name, "urgent");
    assert_node(&k[3].kids[0], VSR_GNODE_PARALLEL, "parallel", 0, 36, 23);
    assert_int_equal(k[3].kids[0].on_error_fail, 0); /* its own on_error wins */
    assert_int_equal(k[3].kids[0].models.n, 0);
    assert_node(&k[3].kids[1], VSR_GNODE_CALL, "plain", 0, 37, 23);
    assert_string_equal(k[3].kids[1].models.items[0], "n");

    assert_node(&k[4], VSR_GNODE_BRANCH, "branch", 2, 38, 15);
    assert_int_equal(k[4].until.kind, VSR_GPRED_CONFIDENCE_GTE);
    assert_true(k[4].until.value == 0.5);
    assert_int_equal(k[4].until.negate, 0);
    assert_int_equal(k[4].kids[0].kind, VSR_GNODE_RESPOND);
    assert_string_equal(k[4].kids[0].aggregate, "vote");
    const vsr_gnode_conf_t *b2 = &k[4].kids[1];
    assert_node(b2, VSR_GNODE_BRANCH, "branch", 2, 38, 93);
    assert_int_equal(b2->until.kind, VSR_GPRED_SUCCEEDED);
    assert_int_equal(b2->until.negate, 1);
    assert_int_equal(b2->kids[0].kind, VSR_GNODE_CALL);
    const vsr_gnode_conf_t *b3 = &b2->kids[1];
    assert_node(b3, VSR_GNODE_BRANCH, "branch", 1, 38, 151);
    assert_int_equal(b3->until.kind, VSR_GPRED_AGREE);
    assert_int_equal(b3->until.negate, 0);
    assert_string_equal(b3->kids[0].aggregate, "longest");

    assert_node(&k[5], VSR_GNODE_CALL, "judge", 0, 39, 15);
    assert_int_equal(k[5].models.n, 2);
    assert_string_equal(k[5].models.items[0], "n");
    assert_string_equal(k[5].models.items[1], "m");
    assert_int_equal(k[5].stream, 1);
    assert_int_equal(k[5].timeout_ms, 20000);

    assert_node(&k[6], VSR_GNODE_RESPOND, "respond", 0, 40, 15);
    assert_string_equal(k[6].aggregate, "last"); /* the default */
    vsr_config_free(c);

    /* a name beside the kind key; on_error skip by default; `call:` alone calls the modelRefs */
    c = load_ok(ALGO_DOC("{type: graph, graph: {root: [{parallel: {}, name: fan}, {call: }]}}"));
    g = &only_decision(c)->algo.u.graph;
    assert_node(&g->root.kids[0], VSR_GNODE_PARALLEL, "fan", 0, 15, 47);
    assert_int_equal(g->root.kids[0].on_error_fail, 0);
    assert_int_equal(g->root.kids[1].kind, VSR_GNODE_CALL);
    assert_int_equal(g->n_subgraphs, 0);
    vsr_config_free(c);
}

/* Bad nodes and fields: each with its message at its line:col. */
static void test_graph_errors(void **state)
{
    (void)state;
    /* the algorithm line is 15, its value starts at column 18 */
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {first_k: 2}}}}"),
                  "t.yaml:15:54: \"first_k\" is not a field of a call node (only of parallel)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {parallel: {stream: true}}}}"),
                  "t.yaml:15:58: \"stream\" is not a field of a parallel node (only of call)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 2, body: {call: {}}, models: [m]}}}}"),
                  "t.yaml:15:87: \"models\" is not a field of a loop node (only of call and parallel)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {}, parallel: {}}}}"),
                  "t.yaml:15:57: a graph node has one kind: \"call\" and \"parallel\" (first at 15:47)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {}, nme: x}}}"),
                  "t.yaml:15:57: unknown key \"nme\" (a graph node holds one of seq, call, parallel, loop, branch, "
                  "transform, respond or subgraph, and an optional name)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {}}}"),
                  "t.yaml:15:46: a graph node needs one of seq, call, parallel, loop, branch, transform, respond or "
                  "subgraph\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: 3}}"),
                  "t.yaml:15:46: expected a graph node (a mapping naming its kind, or a list), got an integer\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: []}}"), "t.yaml:15:46: a seq needs at least one node\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {seq: {call: {}}}}}"),
                  "t.yaml:15:52: seq: expected a list of nodes, got a mapping\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {name: x}, name: y}}}"),
                  "t.yaml:15:64: name is set twice: beside \"call\" and inside it\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {name: \"\"}}}}"),
                  "t.yaml:15:60: name must not be empty\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {}, name: "
                           "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}}}"),
                  "t.yaml:15:63: name must be at most 64 bytes, got 65\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {models: []}}}}"),
                  "t.yaml:15:62: models must not be empty\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {models: [m, m]}}}}"),
                  "t.yaml:15:66: duplicate model \"m\" (first defined at 15:63)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {temperature: 2.5}}}}"),
                  "t.yaml:15:67: temperature must be between 0 and 2, got 2.5\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {top_logprobs: 21, logprobs: true}}}}"),
                  "t.yaml:15:68: top_logprobs must be between 0 and 20, got 21\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {top_logprobs: 2}}}}"),
                  "t.yaml:15:68: top_logprobs needs logprobs: true\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {timeout: soon}}}}"),
                  "t.yaml:15:63: invalid duration \"soon\" (use e.g. \"300s\", \"1.5s\", \"250ms\", \"5m\", "
                  "\"1h\")\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {stream: yes}}}}"),
                  "t.yaml:15:62: expected a boolean (true or false), got a string\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {parallel: {count: 65}}}}"),
                  "t.yaml:15:65: count must be between 1 and 64, got 65\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {parallel: {models: [m, n], first_k: 3}}}}"),
                  "t.yaml:15:83: first_k must not exceed the parallel's 2 calls, got 3\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {parallel: {count: 3, min_success: 4}}}}"),
                  "t.yaml:15:81: min_success must not exceed the parallel's 3 calls, got 4\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {parallel: {first_k: 1, min_success: 2}}}}"),
                  "t.yaml:15:83: min_success must not exceed first_k (1), got 2\n");
    /* without models or count: one call per modelRef (two here) */
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {parallel: {first_k: 3}}}}"),
                  "t.yaml:15:46: algorithm.graph: first_k must not exceed the parallel's 2 calls (one per "
                  "modelRef), got 3\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {parallel: {on_error: retry}}}}"),
                  "t.yaml:15:68: on_error must be \"skip\" or \"fail\", got \"retry\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {body: {call: {}}}}}}"),
                  "t.yaml:15:53: missing required key \"max_rounds\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 0, body: {call: {}}}}}}"),
                  "t.yaml:15:66: max_rounds must be between 1 and 100, got 0\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 101, body: {call: {}}}}}}"),
                  "t.yaml:15:66: max_rounds must be between 1 and 100, got 101\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 2}}}}"),
                  "t.yaml:15:53: missing required key \"body\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {then: {call: {}}}}}}"),
                  "t.yaml:15:55: missing required key \"if\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {succeeded: true}}}}}"),
                  "t.yaml:15:55: missing required key \"then\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: [{transform: {}}, {call: {}}]}}"),
                  "t.yaml:15:59: transform needs at least one of system_prompt, prompt or append\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: [{transform: {prompt: \"\"}}, {call: {}}]}}"),
                  "t.yaml:15:68: prompt must be non-empty text\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: [{call: {}}, {respond: {aggregate: max}}]}}"),
                  "t.yaml:15:81: aggregate must be \"last\", \"first\", \"vote\", \"concat\", \"choices\" or "
                  "\"longest\", got \"max\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: [{call: {}}, {respond: last}]}}"),
                  "t.yaml:15:69: respond: expected a mapping, got a string\n");
    /* the graph as a whole */
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {transform: {prompt: hi}}}}"),
                  "t.yaml:15:46: a graph needs at least one call or parallel node reachable from its root\n");
    expect_errors(ALGO_DOC("{type: graph}"),
                  "t.yaml:15:18: algorithm type \"graph\" needs algorithm.graph (its root node)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: null}"),
                  "t.yaml:15:18: algorithm type \"graph\" needs algorithm.graph (its root node)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {subgraphs: {}}}"), "t.yaml:15:39: missing required key \"root\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {}}, extra: 1}}"),
                  "t.yaml:15:58: unknown key \"extra\"\n");
    expect_errors(ALGO_DOC("{type: static, graph: {root: {call: {}}}}"),
                  "t.yaml:15:33: algorithm.graph only applies to type \"graph\"\n");
    /* a call without models calls the decision's modelRefs: it needs some */
    expect_errors(DOC "routing: {decisions: [{name: d, algorithm: {type: graph, graph: {root: {call: {}}}}}]}\n",
                  "t.yaml:10:72: algorithm.graph: a call without models calls the decision's modelRefs, and "
                  "decision \"d\" has none\n");
    vsr_config_t *c = load_ok(DOC "routing: {decisions: [{name: d, algorithm: {type: graph, graph: {root: "
                                  "{call: {models: [m]}}}}}]}\n");
    vsr_config_free(c);
    /* models: provider models or the decision's modelRefs */
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {models: [ghost]}}}}"),
                  "t.yaml:15:63: algorithm.graph: the call's model \"ghost\" is neither a model of providers.models "
                  "nor one of the decision's modelRefs\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {subgraphs: {p: {parallel: {models: [m, ghost]}}}, root: "
                           "{subgraph: p}}}"),
                  "t.yaml:15:79: algorithm.graph: the parallel's model \"ghost\" is neither a model of "
                  "providers.models nor one of the decision's modelRefs\n");
}

/* Predicates: one key each, typed values, signals of the recipe. */
static void test_graph_predicates(void **state)
{
    (void)state;
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 2, until: {}, body: {call: {}}}}}}"),
                  "t.yaml:15:76: until: expected a mapping with one of succeeded, confidence_gte, answers_agree, "
                  "signal or rounds_gte, got an empty mapping\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 2, until: true, body: {call: {}}}}}}"),
                  "t.yaml:15:76: until: expected a mapping with one of succeeded, confidence_gte, answers_agree, "
                  "signal or rounds_gte, got a boolean\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 2, until: {rounds_gte: 0}, body: "
                           "{call: {}}}}}}"),
                  "t.yaml:15:89: rounds_gte must be between 1 and 100, got 0\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {loop: {max_rounds: 2, until: {done: true}, body: "
                           "{call: {}}}}}}"),
                  "t.yaml:15:77: unknown predicate \"done\" (one of succeeded, confidence_gte, answers_agree, "
                  "signal or rounds_gte)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {succeeded: true, answers_agree: true}, "
                           "then: {call: {}}}}}}"),
                  "t.yaml:15:78: if holds one predicate, got a second key\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {succeeded: 1}, then: {call: {}}}}}}"),
                  "t.yaml:15:72: expected a boolean (true or false), got an integer\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {confidence_gte: 1.5}, then: {call: {}}}}}}"),
                  "t.yaml:15:77: confidence_gte must be between 0 and 1, got 1.5\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {signal: {type: keywrd, name: x}}, "
                           "then: {call: {}}}}}}"),
                  "t.yaml:15:76: unknown condition type \"keywrd\"\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {signal: {type: safety, name: x}}, "
                           "then: {call: {}}}}}}"),
                  "t.yaml:15:90: safety signal \"x\" is not declared in routing.signals.safety\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {signal: {type: classifier, name: x}}, "
                           "then: {call: {}}}}}}"),
                  "t.yaml:15:94: classifier signal \"x\" is not declared in routing.signals.classifiers\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {signal: {type: keyword}}, then: {call: {}}}}}}"),
                  "t.yaml:15:69: missing required key \"name\"\n");
    /* the name resolves against the recipe's signals, as a rule leaf's does */
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {signal: {type: keyword, name: x}}, "
                           "then: {call: {}}}}}}"),
                  "t.yaml:15:91: keyword signal \"x\" is not declared in routing.signals.keywords\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {branch: {if: {signal: {type: projection, name: x}}, "
                           "then: {call: {}}}}}}"),
                  "t.yaml:15:94: projection output \"x\" is not declared in routing.projections.mappings\n");
}

/* Subgraphs: resolved by name, defined once, never reaching themselves;
 * the bounds count a subgraph at every use. */
static void test_graph_subgraphs(void **state)
{
    (void)state;
    expect_errors(ALGO_DOC("{type: graph, graph: {root: [{call: {}}, {subgraph: nope}]}}"),
                  "t.yaml:15:59: subgraph \"nope\" is not defined in algorithm.graph.subgraphs\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {subgraph: [x]}}}"),
                  "t.yaml:15:57: expected a string, got a list\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {}}, subgraphs: [a]}}"),
                  "t.yaml:15:69: subgraphs: expected a mapping of names to nodes, got a list\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {root: {call: {}}, subgraphs: {a: {call: {}}, a: {call: {}}}}}"),
                  "t.yaml:15:85: duplicate key \"a\" (first at 15:70)\n");
    /* recursion: directly, through another subgraph, and in a subgraph the root does not use */
    expect_errors(ALGO_DOC("{type: graph, graph: {subgraphs: {x: [{call: {}}, {subgraph: x}]}, root: {subgraph: x}}}"),
                  "t.yaml:15:68: subgraph \"x\" reaches itself (x -> x)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {subgraphs: {x: [{call: {}}, {subgraph: y}], y: {subgraph: x}}, "
                           "root: {subgraph: x}}}"),
                  "t.yaml:15:87: subgraph \"x\" reaches itself (x -> y -> x)\n");
    expect_errors(ALGO_DOC("{type: graph, graph: {subgraphs: {x: {subgraph: y}, y: {subgraph: z}, z: {subgraph: y}}, "
                           "root: {call: {}}}}"),
                  "t.yaml:15:91: subgraph \"y\" reaches itself (y -> z -> y)\n");
    /* a subgraph used twice: the same definition */
    vsr_config_t *c = load_ok(ALGO_DOC("{type: graph, graph: {subgraphs: {x: {call: {}}}, root: [{subgraph: x}, "
                                       "{subgraph: x}]}}"));
    const vsr_graph_conf_t *g = &only_decision(c)->algo.u.graph;
    assert_ptr_equal(g->root.kids[0].resolved, &g->subgraphs[0].node);
    assert_ptr_equal(g->root.kids[1].resolved, &g->subgraphs[0].node);
    vsr_config_free(c);

    /* depth: 16 levels load, 17 do not; a subgraph's levels count where it is used */
    char doc[16384], node[64];
    snprintf(node, sizeof(node), "%.15s{call: {}}%.15s", "[[[[[[[[[[[[[[[", "]]]]]]]]]]]]]]]");
    snprintf(doc, sizeof(doc), ALGO_DOC("{type: graph, graph: {root: %s}}"), node);
    c = load_ok(doc);
    vsr_config_free(c);
    snprintf(doc, sizeof(doc), ALGO_DOC("{type: graph, graph: {root: [%s]}}"), node);
    expect_errors(doc, "t.yaml:15:62: graph nodes nest at most 16 deep\n");
    snprintf(doc, sizeof(doc), ALGO_DOC("{type: graph, graph: {subgraphs: {x: %s}, root: [{subgraph: x}]}}"), node);
    expect_errors(doc, "t.yaml:15:105: subgraph \"x\" used here makes graph nodes nest deeper than 16\n");
    /* ... also in a subgraph the root does not use */
    snprintf(doc, sizeof(doc), ALGO_DOC("{type: graph, graph: {subgraphs: {x: %s, y: [{subgraph: x}]}, root: "
                                        "{call: {}}}}"), node);
    expect_errors(doc, "t.yaml:15:101: subgraph \"x\" used here makes graph nodes nest deeper than 16\n");

    /* nodes: 256 load, 257 do not; a subgraph counts at each use */
    char list[8192];
    size_t o = 0;
    for (int i = 0; i < 255; i++)
        o += (size_t)snprintf(list + o, sizeof(list) - o, "%s{call: {}}", i ? ", " : "");
    snprintf(doc, sizeof(doc), ALGO_DOC("{type: graph, graph: {root: [%s]}}"), list);
    c = load_ok(doc);
    vsr_config_free(c);
    snprintf(doc, sizeof(doc), ALGO_DOC("{type: graph, graph: {root: [%s, {call: {}}]}}"), list);
    expect_errors(doc, "t.yaml:15:3107: a graph holds at most 256 nodes\n");
    list[200 * 12 - 2] = '\0'; /* 200 calls: a subgraph of 201 nodes fits once, not twice */
    snprintf(doc, sizeof(doc), ALGO_DOC("{type: graph, graph: {subgraphs: {x: [%s]}, root: [{subgraph: x}, "
                                        "{subgraph: x}]}}"), list);
    expect_errors(doc, "t.yaml:15:2480: a graph holds at most 256 nodes, each subgraph counted at every use\n");
    /* an alias does not multiply the work: the bound stops the decoding */
    expect_errors(ALGO_DOC("{type: graph, graph: {root: &a3 [&a2 [&a1 [&a0 [{call: {}}, {call: {}}, {call: {}}, "
                           "{call: {}}], *a0, *a0, *a0], *a1, *a1, *a1], *a2, *a2, *a2]}}"),
                  "t.yaml:15:51: a graph holds at most 256 nodes\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_example),
        cmocka_unit_test(test_param_size_read_at_load),
        cmocka_unit_test(test_reference_example_verbatim),
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_full_fixture),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_reference_defaults),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_default_model_spellings),
        cmocka_unit_test(test_unimplemented_paths),
        cmocka_unit_test(test_rc_eviction),
        cmocka_unit_test(test_redis_cluster_keys),
        cmocka_unit_test(test_aliases_resolved),
        cmocka_unit_test(test_explicit_tags),
        cmocka_unit_test(test_endpoint_table),
        cmocka_unit_test(test_endpoint_scheme_beats_protocol),
        cmocka_unit_test(test_endpoint_errors),
        cmocka_unit_test(test_backend_names),
        cmocka_unit_test(test_type_errors),
        cmocka_unit_test(test_value_errors),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_default_listener),
        cmocka_unit_test(test_emits_retention),
        cmocka_unit_test(test_reference_leniencies),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_default_model_checks),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_several_errors_in_one_run),
        cmocka_unit_test(test_error_cap),
        cmocka_unit_test(test_yaml_syntax_errors),
        cmocka_unit_test(test_document_shape),
        cmocka_unit_test(test_alias_errors),
        cmocka_unit_test(test_tag_errors),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_file_error_names_file),
        cmocka_unit_test(test_second_document_ignored),
        cmocka_unit_test(test_capability_errors),
        cmocka_unit_test(test_complexity_signals),
        cmocka_unit_test(test_kb_signals),
        cmocka_unit_test(test_classifier_signals),
        cmocka_unit_test(test_capability_absent_is_fine),
        cmocka_unit_test(test_router_replay),
        cmocka_unit_test(test_hallucination_and_shadow),
        cmocka_unit_test(test_tool_selection_advanced_keys),
        cmocka_unit_test(test_router_replay_errors),
        cmocka_unit_test(test_classifier_families),
        cmocka_unit_test(test_config_source),
        cmocka_unit_test(test_unknown_names),
        cmocka_unit_test(test_rule_shapes),
        cmocka_unit_test(test_signal_references),
        cmocka_unit_test(test_model_references),
        cmocka_unit_test(test_recipe_and_entrypoint_references),
        cmocka_unit_test(test_client_name_collisions),
        cmocka_unit_test(test_auto_model_names),
        cmocka_unit_test(test_plugin_errors),
        cmocka_unit_test(test_plugin_response_cache_personalized),
        cmocka_unit_test(test_plugin_response_jailbreak),
        cmocka_unit_test(test_plugin_tools_compression),
        cmocka_unit_test(test_tools_db_and_selection),
        cmocka_unit_test(test_header_mutation_drops_reliability_headers),
        cmocka_unit_test(test_reliability_errors),
        cmocka_unit_test(test_fallback_errors),
        cmocka_unit_test(test_credentials),
        cmocka_unit_test(test_token_counts),
        cmocka_unit_test(test_signal_errors),
        cmocka_unit_test(test_listener_tls_and_identity),
        cmocka_unit_test(test_management_api),
        cmocka_unit_test(test_routing_errors_all_reported),
        cmocka_unit_test(test_strategy_inheritance),
        cmocka_unit_test(test_looper_defaults),
        cmocka_unit_test(test_looper_fields),
        cmocka_unit_test(test_looper_errors),
        cmocka_unit_test(test_router_dc_config),
        cmocka_unit_test(test_prompt_selector_config),
        cmocka_unit_test(test_looper_model_names),
        cmocka_unit_test(test_looper_integration_pricing),
        cmocka_unit_test(test_graph_tree),
        cmocka_unit_test(test_graph_errors),
        cmocka_unit_test(test_graph_predicates),
        cmocka_unit_test(test_graph_subgraphs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
