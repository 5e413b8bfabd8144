/*
 * fuzz_routing.c — the routing pipeline on hostile request bodies: the JSON
 * view, the chat view, every signal, the decision, the plugins (system
 * prompt insert, request_params removals and clamps, header mutation) and
 * the byte-range rewrite.  Invariants: a request that goes upstream has a
 * body that is valid JSON whose top-level model is the provider's id, with
 * no duplicate member name; an immediate answer is an error with a JSON body
 * (valid UTF-8 too, whatever the client sent) or a fast response.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DOC[] =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 18899}]\n"
    "providers:\n"
    "  defaults: {model: small}\n"
    "  models:\n"
    "    - {name: small, provider_model_id: small-v1, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: large, provider_model_id: \"large \\\"v2\\\"\", backend_refs: [{endpoint: '127.0.0.1:2'}]}\n"
    "routing:\n"
    "  signals:\n"
    "    keywords:\n"
    "      - {name: code, operator: OR, keywords: [python, golang, \"c++\", 代码]}\n"
    "      - {name: fuzzy, operator: OR, method: fuzzy, keywords: [refund]}\n"
    "      - {name: rx, operator: OR, method: regex, keywords: [\"ur+gent\"]}\n"
    "    context:\n"
    "      - {name: long, min_tokens: 2K}\n"
    "    conversation:\n"
    "      - {name: tools, feature: {type: exists, source: {type: tool_definition}}}\n"
    "  decisions:\n"
    "    - name: code_route\n"
    "      priority: 30\n"
    "      rules: {operator: OR, conditions: [{type: keyword, name: code}, {type: keyword, name: fuzzy}]}\n"
    "      modelRefs: [{model: large}, {model: small}]\n"
    "      plugins:\n"
    "        - {type: system_prompt, configuration: {mode: insert, system_prompt: \"Be \\\"exact\\\".\\n\"}}\n"
    "        - {type: request_params, configuration: {blocked_params: [logit_bias, user], max_tokens_limit: 100,"
    " max_n: 1, strip_unknown: true}}\n"
    "        - {type: header_mutation, configuration: {add: [{name: x-r, value: a}], delete: [x-d]}}\n"
    "    - name: urgent\n"
    "      priority: 20\n"
    "      rules: {operator: AND, conditions: [{type: keyword, name: rx}, {operator: NOT, conditions: [{type: context, name: long}]}]}\n"
    "      modelRefs: [{model: small}]\n"
    "      plugins:\n"
    "        - {type: system_prompt, configuration: {mode: replace, system_prompt: \"short\"}}\n"
    "    - name: tooling\n"
    "      priority: 10\n"
    "      rules: {operator: AND, conditions: [{type: conversation, name: tools}]}\n"
    "      modelRefs: [{model: small}]\n"
    "      plugins:\n"
    "        - {type: fast_response, configuration: {message: \"no tools here\"}}\n";

static vsr_config_t *cfg;
static vsr_engine_t *engine;

static void fail(const char *what, const char *body, size_t len)
{
    fprintf(stderr, "fuzz_routing: invariant broken: %s\nbody: %.*s\n", what, (int)VSR_MIN(len, 2000), body);
    abort();
}

static void setup(void)
{
    if (engine)
        return;
    vsr_log_min_level = VSR_LOG_ERROR;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    if (vsr_config_load_string("fuzz.yaml", DOC, sizeof(DOC) - 1, &cfg, &err) != VSR_OK ||
        (engine = vsr_engine_new(cfg, 1, &err)) == NULL) {
        fprintf(stderr, "%s", err.data ? err.data : "setup failed\n");
        abort();
    }
    vsr_buf_free(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    const char *body = (const char *)data;
    static const char *paths[] = {"/v1/chat/completions", "/v1/completions"};
    const char *path = paths[size && data[0] == 'C' ? 1 : 0];
    vsr_session_opts_t o = {.listener = &cfg->listeners[0]};
    vsr_session_t *s = vsr_session_open(engine, &o);
    static const vsr_header_t hs[] = {{VSR_SLICE_LIT("x-vsr-debug"), VSR_SLICE_LIT("true")}};
    const vsr_effect_t *e = vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), vsr_slice_cstr(path), hs, 1);
    if (e->status)
        fail("headers phase answered", body, size);
    e = vsr_session_request_body(s, body, size);
    const vsr_plan_t *plan = vsr_session_plan(s);
    if (e->status) {
        if (e->resp_body.len == 0 || (e->resp_body.p[0] != '{' && strncmp(e->resp_body.p, "data: ", 6) != 0))
            fail("an immediate answer without a body", body, size);
        if (e->status >= 400) {
            vsr_json_t j;
            if (vsr_json_parse(&j, e->resp_body.p, e->resp_body.len, NULL) != VSR_OK)
                fail("an error body is not JSON", e->resp_body.p, e->resp_body.len);
            vsr_json_free(&j);
            vsr_buf_t clean;
            vsr_buf_init(&clean, 0);
            vsr_json_append_client_text(&clean, e->resp_body, e->resp_body.len + 1);
            if (clean.len != e->resp_body.len || memcmp(clean.data, e->resp_body.p, clean.len) != 0)
                fail("an error body is not valid UTF-8", e->resp_body.p, e->resp_body.len);
            vsr_buf_free(&clean);
        }
    } else {
        if (plan->kind != VSR_PLAN_CALL || plan->model == NULL)
            fail("no call planned", body, size);
        /* the body that goes upstream */
        vsr_buf_t out;
        vsr_buf_init(&out, 0);
        if (e->body_replaced) {
            for (size_t i = 0; i < e->n_body; i++)
                vsr_buf_append_slice(&out, e->body[i]);
            if (out.len != e->body_len)
                fail("body_len differs from the pieces", body, size);
        } else {
            vsr_buf_append(&out, body, size);
        }
        vsr_json_t j;
        if (vsr_json_parse(&j, out.data ? out.data : "", out.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT)
            fail("the rewritten body is not a JSON object", out.data, out.len);
        uint32_t mt;
        if (vsr_json_object_get(&j, 0, "model", &mt) != VSR_OK ||
            !vsr_json_string_eq(&j, mt, vsr_slice_cstr(plan->model->provider_model_id)))
            fail("the upstream model is not the provider's id", out.data, out.len);
        uint32_t dk;
        if (vsr_json_find_duplicate_key(&j, &dk))
            fail("the upstream body has a duplicate member name", out.data, out.len);
        vsr_json_free(&j);
        vsr_buf_free(&out);
        /* fallback re-aims at another candidate with a valid body too */
        const vsr_effect_t *f = vsr_session_fallback(s, NULL, NULL);
        if (f && f->body_replaced) {
            vsr_buf_init(&out, 0);
            for (size_t i = 0; i < f->n_body; i++)
                vsr_buf_append_slice(&out, f->body[i]);
            if (vsr_json_parse(&j, out.data ? out.data : "", out.len, NULL) != VSR_OK)
                fail("the fallback body is not JSON", out.data, out.len);
            vsr_json_free(&j);
            vsr_buf_free(&out);
        }
        vsr_session_response_headers(s, 200, NULL, 0);
    }
    vsr_session_finish(s);
    return 0;
}
