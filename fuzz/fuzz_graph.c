/*
 * fuzz_graph.c — the request-graph executor on hostile client bodies and
 * hostile model answers: every Looper template and a YAML graph run over a
 * fake port whose calls are answered with the input's segments (a
 * chat.completion or anything else), at once from inside the call, later
 * in order, or later in reverse; some runs are cancelled half way.
 *
 * Input: byte 0 picks the decision and the port's behaviour, then the
 * client's body, then the answers, each segment ended by a 0x01 byte
 * (answers are reused in turn when there are fewer than calls).
 * Invariants: a run ends exactly once (or is cancelled and never reports);
 * an answer is valid JSON (application/json) or an event stream whose every
 * data line is JSON or [DONE]; a final hop left for the adapter is a JSON
 * object; calls never exceed the budget cap.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "graph/graph.h"
#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DOC[] =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 18899}]\n"
    "providers:\n"
    "  models:\n"
    "    - {name: a, provider_model_id: a-1, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: b, provider_model_id: b-1, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: c, provider_model_id: c-1, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "routing:\n"
    "  modelCards: [{name: a, param_size: 1B}, {name: b, param_size: 8B}, {name: c, param_size: 70B}]\n"
    "  decisions:\n"
    "    - {name: conf, modelRefs: [{model: c}, {model: a}, {model: b}],"
    " algorithm: {type: confidence, confidence: {threshold: 0.6}}}\n"
    "    - {name: margin, modelRefs: [{model: a}, {model: b}],"
    " algorithm: {type: confidence, confidence: {confidence_method: hybrid, token_filter: tool_call_args}}}\n"
    "    - {name: verify, modelRefs: [{model: a}, {model: b}],"
    " algorithm: {type: confidence, confidence: {confidence_method: self_verify}}}\n"
    "    - {name: ratings, modelRefs: [{model: a}, {model: b}, {model: c}], algorithm: {type: ratings}}\n"
    "    - {name: remom, modelRefs: [{model: a, weight: 2}, {model: b}],"
    " algorithm: {type: remom, remom: {breadth_schedule: [3, 2], compaction_strategy: last_n_tokens,"
    " compaction_tokens: 8, include_reasoning: true}}}\n"
    "    - {name: fusion, modelRefs: [{model: a}, {model: b}],"
    " algorithm: {type: fusion, fusion: {model: c, include_analysis: true, include_intermediate_responses: true}}}\n"
    "    - {name: flow, modelRefs: [{model: a}, {model: b}],"
    " algorithm: {type: workflows, workflows: {mode: dynamic, on_error: skip}}}\n"
    "    - name: graph\n"
    "      modelRefs: [{model: a}]\n"
    "      algorithm:\n"
    "        type: graph\n"
    "        budget: {max_calls: 12}\n"
    "        graph:\n"
    "          root:\n"
    "            - parallel: {models: [a, b], first_k: 1}\n"
    "            - loop: {max_rounds: 3, until: {answers_agree: true},"
    " body: {parallel: {models: [a, b, c]}}}\n"
    "            - transform: {system_prompt: 'be brief', append: '{question} {responses}'}\n"
    "            - call: {models: [c, a], stream: true}\n"
    "            - respond: {aggregate: vote}\n";

static vsr_config_t *cfg;

typedef struct {
    vsr_graph_call_done_fn done;
    void *ud;
    int live;
} pending_t;

typedef struct {
    const uint8_t *answers;
    size_t n_answers_bytes;
    size_t next;         /* the answer segment to use next */
    int mode;            /* 0 at once, 1 later in order, 2 later in reverse */
    pending_t q[4096];
    size_t n_q;
    unsigned calls;
    int reported;
    const vsr_graph_outcome_t *out;
} fport_t;

/* The next answer segment (cycled); empty input: an empty body. */
static vsr_slice_t next_answer(fport_t *f)
{
    if (f->n_answers_bytes == 0)
        return vsr_slice(NULL, 0);
    size_t start = f->next;
    if (start >= f->n_answers_bytes)
        start = 0;
    const uint8_t *end = memchr(f->answers + start, 1, f->n_answers_bytes - start);
    size_t len = end ? (size_t)(end - (f->answers + start)) : f->n_answers_bytes - start;
    f->next = start + len + 1;
    return vsr_slice((const char *)f->answers + start, len);
}

static void answer(fport_t *f, pending_t *p)
{
    p->live = 0;
    vsr_slice_t a = next_answer(f);
    int status = a.len && (unsigned char)a.p[0] == 0xff ? VSR_ERR_IO : VSR_OK;
    p->done(p->ud, status, a.len && a.p[0] == '!' ? 500 : 200, a, 1 + (a.len ? (unsigned)a.p[0] % 2 : 0));
}

static void *port_call(void *ud, const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                       void *done_ud)
{
    (void)deadline_ms;
    fport_t *f = ud;
    f->calls++;
    vsr_json_t j; /* every hop's body is a JSON object */
    if (vsr_json_parse(&j, call->body.p, call->body.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT)
        abort();
    vsr_json_free(&j);
    if (f->mode == 0 || f->n_q == sizeof(f->q) / sizeof(f->q[0])) {
        pending_t p = {done, done_ud, 1};
        answer(f, &p);
        return NULL;
    }
    f->q[f->n_q] = (pending_t){done, done_ud, 1};
    return &f->q[f->n_q++];
}

static void port_cancel(void *ud, void *handle)
{
    (void)ud;
    pending_t *p = handle;
    if (!p->live)
        abort(); /* a handle is cancelled once, before its done */
    p->live = 0;
}

static uint64_t port_now(void *ud)
{
    (void)ud;
    return 1000;
}

static void on_done(void *ud, const vsr_graph_outcome_t *out)
{
    fport_t *f = ud;
    if (f->reported++)
        abort();
    f->out = out;
}

static int valid_json(const char *p, size_t n)
{
    vsr_json_t j;
    int ok = vsr_json_parse(&j, p, n, NULL) == VSR_OK;
    vsr_json_free(&j);
    return ok;
}

static void check(const vsr_graph_outcome_t *o)
{
    if (o->status == 0) {
        if (o->final_model == NULL || !valid_json(o->final_body.p, o->final_body.len))
            abort();
        return;
    }
    if (!strcmp(o->content_type, "application/json")) {
        if (!valid_json(o->body.p, o->body.len))
            abort();
        return;
    }
    /* an event stream: data lines of JSON, then [DONE] */
    const char *p = o->body.p, *end = p + o->body.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            abort();
        if (nl > p) {
            if ((size_t)(nl - p) < 6 || memcmp(p, "data: ", 6))
                abort();
            if (!((size_t)(nl - p) == 12 && !memcmp(p + 6, "[DONE]", 6)) && !valid_json(p + 6, (size_t)(nl - p - 6)))
                abort();
        }
        p = nl + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (cfg == NULL) {
        vsr_buf_t err;
        vsr_buf_init(&err, 0);
        vsr_log_min_level = VSR_LOG_ERROR;
        if (vsr_config_load_string("fuzz.yaml", DOC, sizeof(DOC) - 1, &cfg, &err) != VSR_OK) {
            fprintf(stderr, "%.*s\n", (int)err.len, err.data);
            abort();
        }
        vsr_buf_free(&err);
    }
    if (size < 1)
        return 0;
    const vsr_recipe_conf_t *rc = &cfg->recipes[0];
    unsigned pick = data[0];
    const vsr_decision_conf_t *d = &rc->decisions[(pick & 7) % rc->n_decisions];
    const uint8_t *body = data + 1, *sep = memchr(body, 1, size - 1);
    size_t body_len = sep ? (size_t)(sep - body) : size - 1;
    static fport_t f;
    memset(&f, 0, sizeof(f));
    f.answers = sep ? sep + 1 : NULL;
    f.n_answers_bytes = sep ? size - 1 - body_len - 1 : 0;
    f.mode = (pick >> 3) % 3;
    int stream = (pick >> 5) & 1, cancel_half = (pick >> 6) & 1;
    vsr_graph_port_t port = {.call = port_call, .cancel = port_cancel, .now_ms = port_now, .ud = &f};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    char *copy = vsr_pool_strndup(&pool, (const char *)body, body_len);
    vsr_graph_opts_t o = {.cfg = cfg, .decision = d, .body = copy, .len = body_len, .stream = stream,
                          .include_usage = (pick >> 7) & 1, .pool = &pool, .port = &port, .deadline_ms = 100000,
                          .done = on_done, .done_ud = &f};
    vsr_graph_run_t *run = NULL;
    const vsr_graph_outcome_t *out = NULL;
    const char *why = NULL;
    int rc_ = vsr_graph_start(&o, &run, &out, &why);
    if (rc_ == VSR_OK) {
        check(out);
    } else if (rc_ == VSR_AGAIN) {
        /* answer the queued calls (answers may queue more) until it ends */
        size_t done_n = 0;
        while (!f.reported) {
            pending_t *p = NULL;
            if (f.mode == 1) {
                while (done_n < f.n_q && !f.q[done_n].live)
                    done_n++;
                p = done_n < f.n_q ? &f.q[done_n] : NULL;
            } else {
                for (size_t i = f.n_q; i-- > 0 && p == NULL;)
                    if (f.q[i].live)
                        p = &f.q[i];
            }
            if (p == NULL)
                abort(); /* waiting on nothing */
            if (cancel_half && f.calls >= 3) {
                vsr_graph_cancel(run);
                break;
            }
            answer(&f, p);
        }
        if (f.reported)
            check(f.out);
    }
    if (f.calls > VSR_GRAPH_MAX_CALLS)
        abort();
    vsr_pool_free(&pool);
    return 0;
}
