/*
 * fuzz_routing.c — the routing pipeline on hostile request bodies: the JSON
 * view, the chat view, every signal, the decision, the plugins (system
 * prompt insert, request_params removals and clamps, header mutation) and
 * the byte-range rewrite.  Invariants: a request that goes upstream has a
 * body that is valid JSON whose top-level model is the provider's id, with
 * no duplicate member name; an immediate answer is an error with a JSON body
 * (valid UTF-8 too, whatever the client sent) or a fast response.
 *
 * One decision references a model-backed signal (a family registered here,
 * "fz"): its task goes to fake ports that answer at once, answer later
 * (with the client's body as the task's result), fail, or never answer
 * (the session is finished while pending: cancelled), chosen by the last
 * byte; the final effect, returned or resumed, meets the same invariants.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing.h"
#include "signals/signals.h"

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
    "      - {name: modeled, operator: OR, keywords: [qqqq]}\n"
    "    context:\n"
    "      - {name: long, min_tokens: 2K}\n"
    "    conversation:\n"
    "      - {name: tools, feature: {type: exists, source: {type: tool_definition}}}\n"
    "    metadata:\n"
    "      - {name: gold, key: tier, predicate: {equals: gold}}\n"
    "      - {name: budget, key: budget, predicate: {gte: 10, lt: 1e6}}\n"
    "    events: [{name: sev1, event_types: [incident], severities: [critical]}]\n"
    "  projections:\n"
    "    scores:\n"
    "      - {name: s, inputs: [{type: metadata, name: gold, weight: 0.5}, {type: metadata, name: budget,"
    " value_source: raw, weight: 0.001}, {type: event, name: sev1}, {type: kb_metric, kb: k}]}\n"
    "    mappings:\n"
    "      - {name: m, source: s, method: multi_emit, calibration: {method: sigmoid_distance},"
    " outputs: [{name: hi, gte: 0.5}, {name: lo, lt: 0.5}]}\n"
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
    "    - name: model_route\n"
    "      priority: 25\n"
    "      rules: {operator: OR, conditions: [{type: keyword, name: modeled}]}\n"
    "      modelRefs: [{model: large}]\n"
    "    - name: tooling\n"
    "      priority: 10\n"
    "      rules: {operator: AND, conditions: [{type: conversation, name: tools}]}\n"
    "      modelRefs: [{model: small}]\n"
    "      plugins:\n"
    "        - {type: fast_response, configuration: {message: \"no tools here\"}}\n"
    "    - name: metadata_route\n"
    "      priority: 5\n"
    "      rules: {operator: OR, conditions: [{type: projection, name: hi}, {type: event, name: sev1}]}\n"
    "      modelRefs: [{model: large}]\n";

static vsr_config_t *cfg;
static vsr_engine_t *engine;

static void fail(const char *what, const char *body, size_t len)
{
    fprintf(stderr, "fuzz_routing: invariant broken: %s\nbody: %.*s\n", what, (int)VSR_MIN(len, 2000), body);
    abort();
}

/* ---- the model-backed family and the fake ports ---- */

static int fz_compile(const vsr_sig_ext_conf_t *conf, const char *path, void **state, vsr_buf_t *err)
{
    (void)conf;
    (void)path;
    (void)err;
    *state = NULL;
    return VSR_OK;
}

static int fz_task(const void *state, const vsr_signal_input_t *in, vsr_signal_task_t *out)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"text\":");
    vsr_buf_append_json_string(&b, in->text);
    vsr_buf_append_cstr(&b, "}");
    out->type = "classify";
    out->payload = vsr_pool_dup_slice(in->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return 1;
}

static int fz_consume(const void *state, const vsr_signal_input_t *in, vsr_slice_t result, vsr_signal_result_t *out)
{
    (void)state;
    (void)in;
    vsr_json_t j;
    uint32_t t;
    if (vsr_json_parse(&j, result.p ? result.p : "", result.len, NULL) != VSR_OK)
        return VSR_ERR_INVALID;
    out->matched = vsr_json_type(&j, 0) == VSR_JSON_OBJECT && vsr_json_object_get(&j, 0, "model", &t) == VSR_OK;
    out->confidence = out->matched ? 1.0 : 0;
    vsr_json_free(&j);
    return VSR_OK;
}

static const vsr_signal_family_t fz_family = {
    .cond_type = "fz", .family = "fz", .compile = fz_compile, .task = fz_task, .consume = fz_consume,
};

static vsr_sig_ext_conf_t fz_signals[] = {{(char *)"modeled", (char *)"fz", NULL, VSR_ON_ERROR_DEFAULT}};

enum { FZ_NOW, FZ_LATER, FZ_FAIL, FZ_CANCEL };

static struct {
    int mode;
    vsr_slice_t result;
    vsr_runtime_done_fn done;
    void *done_ud;
    char id[16];
    const vsr_effect_t *resumed;
    int handle;
} fz;

static void fz_answer(void)
{
    vsr_runtime_result_t r = {fz.id, VSR_OK, fz.result};
    vsr_runtime_done_fn done = fz.done;
    fz.done = NULL;
    done(fz.done_ud, VSR_OK, &r, 1);
}

static void *fz_call(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline_ms, vsr_runtime_done_fn done,
                     void *done_ud)
{
    (void)ud;
    (void)deadline_ms;
    if (b->n_tasks != 1)
        abort(); /* one model-backed signal is referenced */
    snprintf(fz.id, sizeof(fz.id), "%s", b->tasks[0].id);
    fz.done = done;
    fz.done_ud = done_ud;
    if (fz.mode == FZ_NOW) {
        fz_answer();
        return NULL;
    }
    if (fz.mode == FZ_FAIL) {
        fz.done = NULL;
        done(done_ud, VSR_ERR_IO, NULL, 0);
        return NULL;
    }
    return &fz.handle;
}

static void fz_cancel(void *ud, void *h)
{
    (void)ud;
    if (h != &fz.handle || fz.done == NULL)
        abort(); /* only a call in flight is cancelled */
    fz.done = NULL;
}

static void fz_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    (void)ud;
    (void)s;
    if (eff->pending)
        abort();
    fz.resumed = eff;
}

static const vsr_ports_t fz_ports = {.runtime_call = fz_call, .runtime_cancel = fz_cancel, .resume = fz_resume};

static void setup(void)
{
    if (engine)
        return;
    vsr_log_min_level = VSR_LOG_ERROR;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    if (vsr_signals_register_family(&fz_family) != VSR_OK ||
        vsr_config_load_string("fuzz.yaml", DOC, sizeof(DOC) - 1, &cfg, &err) != VSR_OK) {
        fprintf(stderr, "%s", err.data ? err.data : "setup failed\n");
        abort();
    }
    /* the placeholder keyword signal `modeled` becomes the fz signal of that name */
    static char fz_type[] = "fz";
    vsr_recipe_conf_t *r = &cfg->recipes[0];
    r->signals.ext = fz_signals;
    r->signals.n_ext = 1;
    for (size_t i = 0; i < r->n_decisions; i++)
        if (strcmp(r->decisions[i].name, "model_route") == 0)
            r->decisions[i].rules->children[0].type = fz_type;
    if ((engine = vsr_engine_new(cfg, 1, &err)) == NULL) {
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
    memset(&fz, 0, sizeof(fz));
    fz.mode = size ? data[size - 1] % 4 : FZ_NOW;
    fz.result = vsr_slice(body, size); /* the task's result: whatever the client sent */
    vsr_session_opts_t o = {.listener = &cfg->listeners[0], .ports = &fz_ports, .deadline_ms = vsr_now_ms() + 60000};
    vsr_session_t *s = vsr_session_open(engine, &o);
    static const vsr_header_t hs[] = {{VSR_SLICE_LIT("x-vsr-debug"), VSR_SLICE_LIT("true")}};
    const vsr_effect_t *e = vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), vsr_slice_cstr(path), hs, 1);
    if (e->status)
        fail("headers phase answered", body, size);
    e = vsr_session_request_body(s, body, size);
    if (e->pending) {
        if (fz.mode == FZ_CANCEL || fz.done == NULL) {
            vsr_session_finish(s); /* the client went: the call is cancelled */
            if (fz.done != NULL)
                fail("a pending call outlived its session", body, size);
            return 0;
        }
        fz_answer();
        if (fz.resumed == NULL)
            fail("an answered wait did not resume", body, size);
        e = fz.resumed;
    }
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
