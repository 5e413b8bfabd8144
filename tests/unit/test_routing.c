/* test_routing.c — the routing core driven directly, no sockets: sessions,
 * effects, plans, evidence and the preview. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing.h"

static const char *DOC =
    "version: v0.3\n"
    "listeners:\n"
    "  - {name: l1, address: 127.0.0.1, port: 18899}\n"
    "  - {name: l2, address: 127.0.0.1, port: 18898, models: [auto, small]}\n"
    "providers:\n"
    "  defaults: {model: small}\n"
    "  models:\n"
    "    - name: small\n"
    "      provider_model_id: small-v1\n"
    "      backend_refs: [{endpoint: '127.0.0.1:1'}]\n"
    "    - name: large\n"
    "      provider_model_id: large-v2\n"
    "      backend_refs: [{endpoint: '127.0.0.1:2'}]\n"
    "routing:\n"
    "  signals:\n"
    "    keywords:\n"
    "      - {name: code, operator: OR, keywords: [python, golang]}\n"
    "      - {name: urgent, operator: OR, keywords: [urgent]}\n"
    "  decisions:\n"
    "    - name: code_route\n"
    "      priority: 30\n"
    "      rules: {operator: AND, conditions: [{type: keyword, name: code}]}\n"
    "      modelRefs: [{model: large}]\n"
    "      plugins:\n"
    "        - type: system_prompt\n"
    "          configuration: {mode: insert, system_prompt: \"Be exact.\"}\n"
    "        - type: header_mutation\n"
    "          configuration: {add: [{name: x-route, value: code}], delete: [x-drop]}\n"
    "    - name: urgent_route\n"
    "      priority: 20\n"
    "      rules: {operator: OR, conditions: [{type: keyword, name: urgent}]}\n"
    "      modelRefs: [{model: small}]\n"
    "      plugins:\n"
    "        - type: fast_response\n"
    "          configuration: {message: \"busy\"}\n"
    "global:\n"
    "  router: {include_config_models_in_list: true}\n";

static vsr_config_t *cfg;
static vsr_engine_t *engine;

static int setup(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    if (vsr_config_load_string("test.yaml", DOC, strlen(DOC), &cfg, &err) != VSR_OK) {
        fprintf(stderr, "%s", err.data);
        return -1;
    }
    engine = vsr_engine_new(cfg, 7, &err);
    if (engine == NULL) {
        fprintf(stderr, "%s", err.data);
        return -1;
    }
    vsr_buf_free(&err);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    vsr_engine_unref(engine);
    vsr_config_free(cfg);
    return 0;
}

static char *join(const vsr_effect_t *eff, const char *orig)
{
    if (!eff->body_replaced)
        return strdup(orig);
    char *out = calloc(1, eff->body_len + 1);
    size_t off = 0;
    for (size_t i = 0; i < eff->n_body; i++) {
        memcpy(out + off, eff->body[i].p, eff->body[i].len);
        off += eff->body[i].len;
    }
    assert_int_equal(off, eff->body_len);
    return out;
}

static const char *set_value(const vsr_effect_t *eff, const char *name)
{
    static char buf[256];
    for (size_t i = 0; i < eff->n_set; i++)
        if (vsr_slice_case_eq_cstr(eff->set[i].name, name)) {
            snprintf(buf, sizeof(buf), "%.*s", (int)eff->set[i].value.len, eff->set[i].value.p);
            return buf;
        }
    return NULL;
}

static int removes(const vsr_effect_t *eff, const char *name)
{
    for (size_t i = 0; i < eff->n_remove; i++)
        if (vsr_slice_case_eq_cstr(eff->remove[i], name))
            return 1;
    return 0;
}

static vsr_session_t *open_chat(int listener, const char *body, const vsr_effect_t **eff)
{
    vsr_session_opts_t o = {.listener = &cfg->listeners[listener]};
    vsr_session_t *s = vsr_session_open(engine, &o);
    static const vsr_header_t hs[] = {{VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json")}};
    const vsr_effect_t *e = vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"),
                                                        hs, 1);
    assert_int_equal(e->status, 0);
    *eff = vsr_session_request_body(s, body, strlen(body));
    return s;
}

static void test_decision_route_and_effects(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"write python\"}]}";
    const vsr_effect_t *eff;
    vsr_session_t *s = open_chat(0, body, &eff);
    assert_int_equal(eff->status, 0);
    const vsr_plan_t *plan = vsr_session_plan(s);
    assert_int_equal(plan->kind, VSR_PLAN_CALL);
    assert_string_equal(plan->model->name, "large");
    const vsr_evidence_t *ev = vsr_session_evidence(s);
    assert_string_equal(ev->decision, "code_route");
    assert_string_equal(ev->recipe, "default");
    assert_true(ev->confidence == 1.0);
    char *out = join(eff, body);
    assert_string_equal(out, "{\"model\":\"large-v2\",\"messages\":[{\"role\":\"system\",\"content\":\"Be exact.\"},"
                             "{\"role\":\"user\",\"content\":\"write python\"}]}");
    free(out);
    assert_string_equal(set_value(eff, "x-selected-model"), "large");
    assert_string_equal(set_value(eff, "x-route"), "code");
    assert_true(removes(eff, "x-drop"));
    assert_true(removes(eff, "authorization"));
    assert_true(removes(eff, "api-key"));

    /* response headers: decision surface on 2xx only */
    const vsr_effect_t *r = vsr_session_response_headers(s, 200, NULL, 0);
    assert_string_equal(set_value(r, "x-vsr-selected-decision"), "code_route");
    assert_string_equal(set_value(r, "x-vsr-selected-confidence"), "1.0000");
    assert_string_equal(set_value(r, "x-vsr-config-version"), "7");
    r = vsr_session_response_headers(s, 503, NULL, 0);
    assert_null(set_value(r, "x-vsr-selected-decision"));
    assert_null(set_value(r, "x-vsr-selected-model"));
    vsr_session_finish(s);
}

static void test_passthrough_and_errors(void **state)
{
    (void)state;
    const vsr_effect_t *eff;
    vsr_session_t *s = open_chat(0, "{\"model\":\"large\",\"messages\":[{\"role\":\"user\",\"content\":\"python\"}]}", &eff);
    assert_int_equal(eff->status, 0);
    assert_true(vsr_session_evidence(s)->passthrough);
    assert_null(vsr_session_evidence(s)->decision); /* no signals on passthrough */
    assert_string_equal(vsr_session_plan(s)->model->name, "large");
    vsr_session_finish(s);

    s = open_chat(0, "{\"model\":\"nope\",\"messages\":[]}", &eff);
    assert_int_equal(eff->status, 400);
    assert_memory_equal(eff->resp_body.p, "{\"error\":{\"message\":\"model \\\"nope\\\" is not available\"", 48);
    vsr_session_finish(s);

    s = open_chat(0, "{\"model\":\"auto\",", &eff);
    assert_int_equal(eff->status, 400);
    vsr_session_finish(s);

    /* listener allow-list */
    s = open_chat(1, "{\"model\":\"large\",\"messages\":[]}", &eff);
    assert_int_equal(eff->status, 403);
    assert_non_null(strstr(eff->resp_body.p, "model_not_allowed"));
    vsr_session_finish(s);
    s = open_chat(1, "{\"messages\":[]}", &eff);
    assert_int_equal(eff->status, 400);
    assert_non_null(strstr(eff->resp_body.p, "model_required"));
    vsr_session_finish(s);
}

static void test_fast_response_is_immediate(void **state)
{
    (void)state;
    const vsr_effect_t *eff;
    vsr_session_t *s = open_chat(0, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"urgent!\"}]}", &eff);
    assert_int_equal(eff->status, 200);
    assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_IMMEDIATE);
    assert_non_null(strstr(eff->resp_body.p, "busy"));
    vsr_session_finish(s);
}

static void test_paths_and_models(void **state)
{
    (void)state;
    vsr_session_opts_t o = {.listener = &cfg->listeners[0]};
    vsr_session_t *s = vsr_session_open(engine, &o);
    const vsr_effect_t *e = vsr_session_request_headers(s, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/v1/nothing"), NULL, 0);
    assert_int_equal(e->status, 404);
    vsr_session_finish(s);

    s = vsr_session_open(engine, &o);
    e = vsr_session_request_headers(s, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/v1/chat/completions/"), NULL, 0);
    assert_int_equal(e->status, 405);
    vsr_session_finish(s);

    s = vsr_session_open(engine, &o);
    e = vsr_session_request_headers(s, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/metrics?x=1"), NULL, 0);
    assert_int_equal(e->status, 0);
    assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_CALL);
    assert_string_equal(vsr_session_plan(s)->model->name, "small"); /* the default route */
    assert_int_equal(vsr_session_plan(s)->rewrite_prefix, 0);
    vsr_session_finish(s);

    s = vsr_session_open(engine, &o);
    e = vsr_session_request_headers(s, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/v1/models"), NULL, 0);
    assert_int_equal(e->status, 200);
    assert_non_null(strstr(e->resp_body.p, "\"id\":\"vllm-sr/auto\""));
    assert_non_null(strstr(e->resp_body.p, "\"id\":\"large\""));
    vsr_session_finish(s);

    /* the allow-list narrows the listing */
    vsr_session_opts_t o2 = {.listener = &cfg->listeners[1]};
    s = vsr_session_open(engine, &o2);
    e = vsr_session_request_headers(s, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/v1/models"), NULL, 0);
    assert_non_null(strstr(e->resp_body.p, "\"id\":\"small\""));
    assert_null(strstr(e->resp_body.p, "\"id\":\"large\""));
    assert_null(strstr(e->resp_body.p, "MoM"));
    vsr_session_finish(s);
}

static vsr_session_t *open_chat_n(int listener, const char *body, size_t len, const vsr_effect_t **eff)
{
    vsr_session_opts_t o = {.listener = &cfg->listeners[listener]};
    vsr_session_t *s = vsr_session_open(engine, &o);
    const vsr_effect_t *e = vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"),
                                                        NULL, 0);
    assert_int_equal(e->status, 0);
    *eff = vsr_session_request_body(s, body, len);
    return s;
}

/* An error body is valid JSON and valid UTF-8; returns its message, unescaped, in buf. */
static const char *error_message(vsr_slice_t body, char *buf, size_t cap, size_t *len)
{
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, body.p, body.len, NULL), VSR_OK);
    vsr_buf_t clean;
    vsr_buf_init(&clean, 0);
    vsr_json_append_client_text(&clean, body, body.len + 1);
    assert_int_equal(clean.len, body.len); /* nothing had to be replaced: valid UTF-8 */
    vsr_buf_free(&clean);
    uint32_t e, m;
    assert_int_equal(vsr_json_object_get(&j, 0, "error", &e), VSR_OK);
    assert_int_equal(vsr_json_object_get(&j, e, "message", &m), VSR_OK);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t msg;
    vsr_json_string(&j, m, &pool, &msg);
    assert_true(msg.len < cap);
    memcpy(buf, msg.p, msg.len);
    buf[msg.len] = 0;
    *len = msg.len;
    vsr_pool_free(&pool);
    vsr_json_free(&j);
    return buf;
}

#define BODY_N(lit) lit, sizeof(lit) - 1

static void test_client_strings_in_errors_are_valid_json(void **state)
{
    (void)state;
    const vsr_effect_t *eff;
    char msg[512];
    size_t n;
    /* invalid UTF-8: replaced, the body stays valid */
    vsr_session_t *s = open_chat_n(0, BODY_N("{\"model\":\"a\xff\xc3\",\"messages\":[]}"), &eff);
    assert_int_equal(eff->status, 400);
    error_message(eff->resp_body, msg, sizeof(msg), &n);
    assert_string_equal(msg, "model \"a\xef\xbf\xbd\xef\xbf\xbd\" is not available");
    vsr_session_finish(s);
    /* \u0000 does not cut the name short */
    s = open_chat_n(0, BODY_N("{\"model\":\"x\\u0000y\",\"messages\":[]}"), &eff);
    assert_int_equal(eff->status, 400);
    assert_non_null(memmem(eff->resp_body.p, eff->resp_body.len, "x\\u0000y", 8));
    error_message(eff->resp_body, msg, sizeof(msg), &n);
    assert_int_equal(n, strlen("model \"x") + 1 + strlen("y\" is not available"));
    vsr_session_finish(s);
    /* the allow-list's 403 too */
    s = open_chat_n(1, BODY_N("{\"model\":\"x\\u0000\xfe\",\"messages\":[]}"), &eff);
    assert_int_equal(eff->status, 403);
    error_message(eff->resp_body, msg, sizeof(msg), &n);
    assert_memory_equal(msg, "model \"x\0\xef\xbf\xbd\" is not allowed on this listener", n);
    vsr_session_finish(s);
    /* a long name is bounded, cut on a character boundary */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"model\":\"");
    for (int i = 0; i < 199; i++)
        vsr_buf_append_cstr(&b, "a");
    for (int i = 0; i < 5000; i++)
        vsr_buf_append_cstr(&b, "\xc3\xa9");
    vsr_buf_append_cstr(&b, "\",\"messages\":[]}");
    s = open_chat_n(0, b.data, b.len, &eff);
    assert_int_equal(eff->status, 400);
    error_message(eff->resp_body, msg, sizeof(msg), &n);
    assert_int_equal(n, strlen("model \"") + 199 + 3 + strlen("\" is not available"));
    assert_non_null(strstr(msg, "aaa...\" is not available"));
    vsr_session_finish(s);
    vsr_buf_free(&b);
    /* the preview quotes the same way */
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    assert_int_equal(vsr_engine_preview(engine, vsr_slice("n\0\xff", 3), VSR_SLICE_LIT("hi"), 0, &out), 400);
    error_message(vsr_buf_slice(&out), msg, sizeof(msg), &n);
    assert_memory_equal(msg, "model \"n\0\xef\xbf\xbd\" is not available", n);
    vsr_buf_free(&out);
}

static void test_duplicate_keys_refused(void **state)
{
    (void)state;
    static const char *bodies[] = {
        "{\"model\":\"small\",\"model\":\"auto\",\"messages\":[]}",
        "{\"model\":\"auto\",\"messages\":[],\"messages\":[{\"role\":\"user\",\"content\":\"python\"}]}",
        "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"python\",\"content\":\"hi\"}]}",
        "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"mod\\u0065l\":\"large\",\"model\":\"auto\",\"messages\":[]}",
        "{\"model\":\"auto\",\"messages\":[],\"tools\":[{\"function\":{\"name\":\"a\",\"name\":\"b\"}}]}",
    };
    static const char *names[] = {"model", "messages", "content", "role", "model", "name"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(bodies); i++) {
        const vsr_effect_t *eff;
        vsr_session_t *s = open_chat(1, bodies[i], &eff);
        assert_int_equal(eff->status, 400);
        assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_IMMEDIATE);
        assert_non_null(strstr(eff->resp_body.p, "\"code\":\"duplicate_key\""));
        char want[64], msg[256];
        size_t n;
        snprintf(want, sizeof(want), "duplicate key \"%s\" in request body", names[i]);
        assert_string_equal(error_message(eff->resp_body, msg, sizeof(msg), &n), want);
        vsr_session_finish(s);
    }
}

static void test_v1_in_another_case_is_not_passed_through(void **state)
{
    (void)state;
    static const char *local[] = {"/V1/chat/completions", "/v1;x/chat/completions", "/V1", "/v1;/models?x=1"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(local); i++) {
        vsr_session_t *s = vsr_session_open(engine, NULL);
        const vsr_effect_t *e =
            vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), vsr_slice_cstr(local[i]), NULL, 0);
        assert_int_equal(e->status, 404);
        assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_IMMEDIATE);
        vsr_session_finish(s);
    }
    static const char *routed_default[] = {"/v1x/chat", "/v2/chat/completions", "/", "/tokenize", "/x/v1/chat"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(routed_default); i++) {
        vsr_session_t *s = vsr_session_open(engine, NULL);
        const vsr_effect_t *e =
            vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), vsr_slice_cstr(routed_default[i]), NULL, 0);
        assert_int_equal(e->status, 0);
        assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_CALL);
        vsr_session_finish(s);
    }
}

static void test_engine_outlives_config_swap_by_refcount(void **state)
{
    (void)state;
    const vsr_effect_t *eff;
    vsr_engine_t *extra = vsr_engine_ref(engine);
    vsr_session_t *s = open_chat(0, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &eff);
    vsr_engine_unref(extra); /* the session still pins it */
    assert_string_equal(vsr_session_plan(s)->model->name, "small");
    vsr_session_finish(s);
}

static void test_preview(void **state)
{
    (void)state;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    assert_int_equal(vsr_engine_preview(engine, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("golang please"), 1, &out), 200);
    assert_non_null(strstr(out.data, "\"decision_name\":\"code_route\""));
    assert_non_null(strstr(out.data, "\"selected_model\":\"large\""));
    assert_non_null(strstr(out.data, "\"eval_trace\""));
    vsr_buf_reset(&out);
    assert_int_equal(vsr_engine_preview(engine, VSR_SLICE_LIT("zzz"), VSR_SLICE_LIT("x"), 0, &out), 400);
    vsr_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decision_route_and_effects),
        cmocka_unit_test(test_passthrough_and_errors),
        cmocka_unit_test(test_fast_response_is_immediate),
        cmocka_unit_test(test_paths_and_models),
        cmocka_unit_test(test_engine_outlives_config_swap_by_refcount),
        cmocka_unit_test(test_preview),
        cmocka_unit_test(test_client_strings_in_errors_are_valid_json),
        cmocka_unit_test(test_duplicate_keys_refused),
        cmocka_unit_test(test_v1_in_another_case_is_not_passed_through),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
