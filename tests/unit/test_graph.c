/* test_graph.c — the request-graph executor driven directly: a decision of a
 * document loaded from YAML, vsr_graph_start(), and a fake port that records
 * every call (model, body, deadline) and lets each test answer the calls in
 * any order, at once from inside call or later, with chat.completion bodies
 * (with logprobs where needed), errors, non-2xx statuses or bad JSON.  The
 * expectations are the Looper algorithms' (ref §3): call order, what each
 * hop sends, the answer's bytes, usage sums, iterations and models used. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

/* ---- the document ----
 * Four provider models; cards give small < mid < large by param_size,
 * pricing gives mid < small < large by prompt_per_1m (spare has neither,
 * and retries twice). */
static const char *DOC_HEAD =
    "version: v0.3\n"
    "listeners: [{name: l1, address: 127.0.0.1, port: 18899}]\n"
    "providers:\n"
    "  defaults: {model: small}\n"
    "  models:\n"
    "    - {name: small, provider_model_id: small-v1, pricing: {prompt_per_1m: 0.5},"
    " backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: large, provider_model_id: large-v2, pricing: {prompt_per_1m: 3},"
    " backend_refs: [{endpoint: '127.0.0.1:2'}]}\n"
    "    - {name: mid, provider_model_id: mid-v1, pricing: {prompt_per_1m: 0.1},"
    " backend_refs: [{endpoint: '127.0.0.1:3'}]}\n"
    "    - {name: spare, provider_model_id: spare-v1, backend_refs: [{endpoint: '127.0.0.1:4'}],"
    " reliability: {retry_count: 2}}\n"
    "routing:\n"
    "  modelCards:\n"
    "    - {name: small, param_size: 8B, loras: [{name: small-math}]}\n"
    "    - {name: large, param_size: 70B}\n"
    "    - {name: mid, param_size: 13B}\n"
    "  decisions:\n"
    "    - name: d\n";

/* The request every test sends unless it says otherwise: a system message,
 * the question, tools and the client's own knobs. */
static const char *REQ = "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                         "{\"role\":\"user\",\"content\":\"Q?\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                         "{\"name\":\"f\"}}],\"tool_choice\":\"auto\",\"temperature\":0.3,\"seed\":7}";
static const char *REQ_STREAM = "{\"model\":\"auto\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                                "\"messages\":[{\"role\":\"user\",\"content\":\"Q?\"}]}";

static char *xstrndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    assert_non_null(d);
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- the fake port ---- */

#define MAXC 160
enum { IN_FLIGHT, ANSWERED, CANCELLED };

typedef struct {
    char model[32];                /* the provider model's name */
    char *body;
    unsigned iteration;
    uint64_t deadline, max_bytes;
    vsr_graph_call_done_fn done;
    void *done_ud;
    int state;
} fcall_t;

typedef struct fake_s fake_t;
typedef void (*responder_fn)(fake_t *f, size_t i);

struct fake_s {
    fcall_t c[MAXC];
    size_t n;
    uint64_t now;
    size_t cancels, in_flight, max_in_flight;
    responder_fn sync;             /* answers from inside call when set */
    int done_calls;
    const vsr_graph_outcome_t *out;
};

static void *fake_call(void *ud, const vsr_graph_call_t *call, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                       void *done_ud)
{
    fake_t *f = ud;
    assert_true(f->n < MAXC);
    fcall_t *c = &f->c[f->n];
    memset(c, 0, sizeof(*c));
    snprintf(c->model, sizeof(c->model), "%s", call->model->name);
    c->body = xstrndup(call->body.p, call->body.len);
    c->iteration = call->iteration;
    c->deadline = deadline_ms;
    c->max_bytes = call->max_response_bytes;
    c->done = done;
    c->done_ud = done_ud;
    c->state = IN_FLIGHT;
    size_t i = f->n++;
    if (++f->in_flight > f->max_in_flight)
        f->max_in_flight = f->in_flight;
    if (f->sync)
        f->sync(f, i);
    return f->c[i].state == IN_FLIGHT ? &f->c[i] : NULL;
}

static void fake_cancel(void *ud, void *handle)
{
    fake_t *f = ud;
    fcall_t *c = handle;
    assert_true(c >= f->c && c < f->c + f->n);
    assert_int_equal(c->state, IN_FLIGHT); /* a handle is cancelled once, and only while in flight */
    c->state = CANCELLED;
    f->in_flight--;
    f->cancels++;
}

static uint64_t fake_now(void *ud)
{
    return ((fake_t *)ud)->now;
}

static void answer_raw(fake_t *f, size_t i, int status, int http, const char *body, unsigned attempts)
{
    assert_true(i < f->n);
    fcall_t *c = &f->c[i];
    assert_int_equal(c->state, IN_FLIGHT);
    c->state = ANSWERED;
    f->in_flight--;
    c->done(c->done_ud, status, http, vsr_slice(body, body ? strlen(body) : 0), attempts);
}

static void answer(fake_t *f, size_t i, const char *body)
{
    answer_raw(f, i, VSR_OK, 200, body, 1);
}

static void fail_io(fake_t *f, size_t i)
{
    answer_raw(f, i, VSR_ERR_IO, 0, NULL, 1);
}

/* ---- canned bodies ---- */

static char *allocs[2048];
static size_t n_allocs;

static const char *keep(char *s)
{
    assert_true(n_allocs < VSR_ARRAY_LEN(allocs));
    allocs[n_allocs++] = s;
    return s;
}

/* A chat.completion answering `content`, with usage pt/ct; with lp != 0,
 * two content tokens of logprob lp, and with top2 != 0 their top_logprobs
 * [lp, top2]. */
static const char *completion_lp(const char *model, const char *content, int pt, int ct, double lp, double top2)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_printf(&b, "{\"id\":\"chatcmpl-%s\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"%s\","
                       "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":",
                   model, model);
    vsr_buf_append_json_string(&b, vsr_slice_cstr(content));
    vsr_buf_append_cstr(&b, "},\"finish_reason\":\"stop\"");
    if (lp != 0) {
        vsr_buf_append_cstr(&b, ",\"logprobs\":{\"content\":[");
        for (int k = 0; k < 2; k++) {
            vsr_buf_printf(&b, "%s{\"token\":\"t%d\",\"logprob\":%g", k ? "," : "", k, lp);
            if (top2 != 0)
                vsr_buf_printf(&b, ",\"top_logprobs\":[{\"token\":\"t%d\",\"logprob\":%g},{\"token\":\"u\","
                                   "\"logprob\":%g}]",
                               k, lp, top2);
            vsr_buf_append_cstr(&b, "}");
        }
        vsr_buf_append_cstr(&b, "]}");
    }
    vsr_buf_printf(&b, "}],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}", pt, ct,
                   pt + ct);
    char *s = xstrndup(b.data, b.len);
    vsr_buf_free(&b);
    return keep(s);
}

static const char *completion(const char *model, const char *content, int pt, int ct)
{
    return completion_lp(model, content, pt, ct, 0, 0);
}

/* ---- reading JSON back ----
 * jget(json, "choices.0.message.content"): a string member unescaped, any
 * other value as its raw text; NULL when the path is absent. */
static const char *jget(const char *json, const char *path)
{
    vsr_json_t j;
    if (vsr_json_parse(&j, json, strlen(json), NULL) != VSR_OK) {
        vsr_json_free(&j);
        return NULL;
    }
    uint32_t t = 0;
    char seg[64];
    const char *p = path;
    int ok = 1;
    while (ok && *p) {
        size_t n = strcspn(p, ".");
        snprintf(seg, sizeof(seg), "%.*s", (int)n, p);
        p += n + (p[n] == '.');
        if (vsr_json_type(&j, t) == VSR_JSON_OBJECT) {
            ok = vsr_json_object_get(&j, t, seg, &t) == VSR_OK;
        } else if (vsr_json_type(&j, t) == VSR_JSON_ARRAY) {
            unsigned long k = strtoul(seg, NULL, 10);
            ok = k < j.toks[t].count;
            uint32_t e = t + 1;
            for (unsigned long i = 0; ok && i < k; i++)
                e = j.toks[e].next;
            t = e;
        } else {
            ok = 0;
        }
    }
    char *out = NULL;
    if (ok) {
        if (vsr_json_type(&j, t) == VSR_JSON_STRING) {
            vsr_pool_t pool;
            vsr_pool_init(&pool);
            vsr_slice_t s;
            vsr_json_string(&j, t, &pool, &s);
            out = xstrndup(s.p ? s.p : "", s.len);
            vsr_pool_free(&pool);
        } else {
            vsr_slice_t s = vsr_json_raw(&j, t);
            out = xstrndup(s.p, s.len);
        }
    }
    vsr_json_free(&j);
    return out ? keep(out) : NULL;
}

static size_t jcount(const char *json, const char *path)
{
    vsr_json_t j;
    const char *raw = jget(json, path);
    if (raw == NULL)
        return (size_t)-1;
    assert_int_equal(vsr_json_parse(&j, raw, strlen(raw), NULL), VSR_OK);
    size_t n = j.toks[0].count;
    vsr_json_free(&j);
    return n;
}

static int has(const char *hay, const char *needle)
{
    return hay && strstr(hay, needle) != NULL;
}

/* ---- a run ---- */

typedef struct {
    vsr_config_t *cfg;
    vsr_pool_t pool;
    fake_t f;
    vsr_graph_port_t port;
    vsr_graph_run_t *run;
    int rc;
    const char *why;
} T;

static void on_done(void *ud, const vsr_graph_outcome_t *out)
{
    T *t = ud;
    t->f.done_calls++;
    assert_int_equal(t->f.done_calls, 1);
    t->f.out = out;
}

static void load(T *t, const char *refs, const char *algo)
{
    char doc[8192];
    snprintf(doc, sizeof(doc), "%s      modelRefs: %s\n      algorithm: %s\n", DOC_HEAD, refs, algo);
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    int rc = vsr_config_load_string("graph.yaml", doc, strlen(doc), &t->cfg, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%s\n%s", doc, err.data ? err.data : "");
    assert_int_equal(rc, VSR_OK);
    vsr_buf_free(&err);
}

static const vsr_decision_conf_t *decision(const T *t)
{
    return &t->cfg->recipes[0].decisions[0];
}

/* Loads the decision; the fake clock at 1000. */
static void prepare(T *t, const char *refs, const char *algo)
{
    memset(t, 0, sizeof(*t));
    load(t, refs, algo);
    vsr_pool_init(&t->pool);
    t->f.now = 1000;
    t->port = (vsr_graph_port_t){.call = fake_call, .cancel = fake_cancel, .now_ms = fake_now, .ud = &t->f};
}

static int go(T *t, const char *body, int stream, int include_usage, uint64_t deadline)
{
    vsr_graph_opts_t o = {
        .cfg = t->cfg,
        .decision = decision(t),
        .body = body,
        .len = strlen(body),
        .stream = stream,
        .include_usage = include_usage,
        .pool = &t->pool,
        .port = &t->port,
        .deadline_ms = deadline ? deadline : 1000 + 600000,
        .done = on_done,
        .done_ud = t,
    };
    const vsr_graph_outcome_t *out = NULL;
    t->rc = vsr_graph_start(&o, &t->run, &out, &t->why);
    if (t->rc == VSR_OK) {
        assert_non_null(out);
        t->f.out = out;
    }
    return t->rc;
}

/* The common case: REQ (or REQ_STREAM), started, running. */
static void start(T *t, const char *refs, const char *algo, int stream)
{
    prepare(t, refs, algo);
    go(t, stream ? REQ_STREAM : REQ, stream, stream, 0);
}

static void finish_test(T *t)
{
    if (t->run && t->f.out == NULL)
        vsr_graph_cancel(t->run);
    vsr_pool_free(&t->pool);
    vsr_config_free(t->cfg);
    for (size_t i = 0; i < t->f.n; i++)
        free(t->f.c[i].body);
    for (size_t i = 0; i < n_allocs; i++)
        free(allocs[i]);
    n_allocs = 0;
}

static const vsr_graph_outcome_t *outcome(T *t)
{
    assert_non_null(t->f.out);
    return t->f.out;
}

static const char *out_body(T *t)
{
    const vsr_graph_outcome_t *o = outcome(t);
    return keep(xstrndup(o->body.p ? o->body.p : "", o->body.len));
}

static const char *final_body(T *t)
{
    const vsr_graph_outcome_t *o = outcome(t);
    return keep(xstrndup(o->final_body.p ? o->final_body.p : "", o->final_body.len));
}

/* Asserts the error answer's status and code. */
static void expect_error(T *t, int status, const char *code)
{
    const vsr_graph_outcome_t *o = outcome(t);
    assert_int_equal(o->status, status);
    assert_string_equal(o->content_type, "application/json");
    const char *b = out_body(t);
    assert_non_null(jget(b, "error.message"));
    assert_non_null(jget(b, "error.type"));
    assert_string_equal(jget(b, "error.code"), code);
}

/* The call's body: the model id sent upstream, stream false. */
static void expect_hop(const T *t, size_t i, const char *model, const char *upstream_id)
{
    assert_true(i < t->f.n);
    assert_string_equal(t->f.c[i].model, model);
    assert_string_equal(jget(t->f.c[i].body, "model"), upstream_id);
    assert_string_equal(jget(t->f.c[i].body, "stream"), "false");
    assert_null(jget(t->f.c[i].body, "n"));
    assert_int_equal(t->f.c[i].iteration, i + 1);
    assert_int_equal(t->f.c[i].max_bytes, 32u << 20);
}

/* ======================================================================== */
/* vsr_graph_eligible                                                        */

static void test_eligible(void **state)
{
    (void)state;
    static const struct {
        const char *refs, *algo;
        int want;
    } cases[] = {
        {"[{model: small}, {model: mid}]", "{type: confidence}", 1},
        {"[{model: small}]", "{type: confidence}", 0},
        {"[{model: small}, {model: mid}]", "{type: ratings}", 1},
        {"[{model: small}]", "{type: ratings}", 0},
        {"[{model: small}]", "{type: remom}", 1},
        {"[{model: small}]", "{type: fusion}", 1},
        {"[{model: small}]", "{type: workflows}", 1},
        {"[{model: small}, {model: mid}]", "{type: static}", 0},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        T t;
        memset(&t, 0, sizeof(t));
        load(&t, cases[i].refs, cases[i].algo);
        assert_int_equal(vsr_graph_eligible(decision(&t)), cases[i].want);
        vsr_config_free(t.cfg);
    }
}

/* ======================================================================== */
/* confidence (ref §3.3)                                                     */

/* escalation_order size: small (8B), mid (13B), large (70B); avg_logprob at
 * 0.9: small's −1.5 scores 0.5 and escalates, mid's −0.1 scores 0.967 and
 * is the answer; usage is summed over both. */
static void test_confidence_size(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: large}, {model: mid}, {model: small}]",
          "{type: confidence, confidence: {threshold: 0.9}}", 0);
    assert_int_equal(t.rc, VSR_AGAIN);
    assert_int_equal(t.f.n, 1); /* one model at a time */
    expect_hop(&t, 0, "small", "small-v1");
    const char *b0 = t.f.c[0].body;
    assert_string_equal(jget(b0, "logprobs"), "true");
    assert_null(jget(b0, "top_logprobs")); /* avg_logprob needs no alternatives */
    /* the original request otherwise: messages, tools, the client's temperature and seed */
    assert_int_equal(jcount(b0, "messages"), 2);
    assert_string_equal(jget(b0, "messages.1.content"), "Q?");
    assert_non_null(jget(b0, "tools"));
    assert_string_equal(jget(b0, "temperature"), "0.3");
    assert_string_equal(jget(b0, "seed"), "7");
    answer(&t.f, 0, completion_lp("small-v1", "A-small", 10, 2, -1.5, 0));
    assert_int_equal(t.f.n, 2);
    assert_int_equal(t.f.done_calls, 0);
    expect_hop(&t, 1, "mid", "mid-v1");
    t.f.now = 1750;
    answer(&t.f, 1, completion_lp("mid-v1", "A-mid", 11, 3, -0.1, 0));
    assert_int_equal(t.f.n, 2); /* confident: large is never called */
    assert_int_equal(t.f.done_calls, 1);
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 200);
    assert_string_equal(o->content_type, "application/json");
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "choices.0.message.content"), "A-mid");
    assert_string_equal(jget(b, "id"), "chatcmpl-mid-v1"); /* the model's own answer */
    assert_string_equal(jget(b, "usage.prompt_tokens"), "21");
    assert_string_equal(jget(b, "usage.completion_tokens"), "5");
    assert_string_equal(jget(b, "usage.total_tokens"), "26");
    assert_string_equal(o->algorithm, "confidence");
    assert_string_equal(o->model, "mid");
    assert_string_equal(o->models_used, "small,mid");
    assert_int_equal(o->iterations, 2);
    assert_int_equal(o->prompt_tokens, 21);
    assert_int_equal(o->completion_tokens, 5);
    assert_int_equal(o->latency_ms, 750); /* on the port's clock */
    assert_int_equal(o->n_records, 2);
    assert_string_equal(o->records[0].model, "small");
    assert_string_equal(o->records[1].model, "mid");
    assert_int_equal(o->records[1].start_ms, 1000);
    assert_int_equal(o->records[1].ms, 750);
    assert_int_equal(o->records[1].prompt_tokens, 11);
    assert_string_equal(o->records[1].node, "escalate");
    finish_test(&t);
}

/* declared order with the defaults: threshold −1.0, so the first model is
 * always accepted (even with poor logprobs). */
static void test_confidence_declared_default(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: large}, {model: mid}, {model: small}]",
          "{type: confidence, confidence: {escalation_order: declared}}", 0);
    assert_int_equal(t.f.n, 1);
    expect_hop(&t, 0, "large", "large-v2");
    answer(&t.f, 0, completion_lp("large-v2", "A-large", 5, 5, -2.9, 0));
    assert_int_equal(t.f.n, 1);
    assert_int_equal(outcome(&t)->status, 200);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "A-large");
    assert_string_equal(outcome(&t)->models_used, "large");
    assert_int_equal(outcome(&t)->iterations, 1);
    finish_test(&t);
}

/* cost order: mid (0.1), small (0.5), large (3); none passes 0.99 and the
 * last model fails: the answer is the last successful one (small's). */
static void test_confidence_cost_none_passing(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: large}, {model: mid}, {model: small}]",
          "{type: confidence, confidence: {escalation_order: cost, threshold: 0.99}}", 0);
    expect_hop(&t, 0, "mid", "mid-v1");
    answer(&t.f, 0, completion_lp("mid-v1", "A-mid", 1, 1, -1.5, 0));
    expect_hop(&t, 1, "small", "small-v1");
    answer(&t.f, 1, completion_lp("small-v1", "A-small", 1, 1, -0.5, 0));
    expect_hop(&t, 2, "large", "large-v2");
    answer_raw(&t.f, 2, VSR_OK, 500, "{\"error\":{\"message\":\"boom\"}}", 1);
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 200);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "A-small");
    assert_string_equal(o->model, "small");
    assert_string_equal(o->models_used, "mid,small,large");
    assert_int_equal(o->iterations, 3);
    assert_string_equal(jget(out_body(&t), "usage.total_tokens"), "4");
    finish_test(&t);
}

/* margin and hybrid ask for top_logprobs 2; their default threshold is 0.5:
 * a margin of 0.3 scores 0.095, one of 2.99 scores 0.63. */
static void test_confidence_margin_hybrid(void **state)
{
    (void)state;
    const char *methods[] = {"margin", "hybrid"};
    for (size_t m = 0; m < 2; m++) {
        T t;
        char algo[128];
        snprintf(algo, sizeof(algo), "{type: confidence, confidence: {confidence_method: %s}}", methods[m]);
        start(&t, "[{model: small}, {model: large}]", algo, 0);
        expect_hop(&t, 0, "small", "small-v1");
        assert_string_equal(jget(t.f.c[0].body, "logprobs"), "true");
        assert_string_equal(jget(t.f.c[0].body, "top_logprobs"), "2");
        /* margin 0.3: below 0.5 (hybrid: 0.5·0.9 + 0.5·0.095 = 0.4975, below too) */
        answer(&t.f, 0, completion_lp("small-v1", "A-small", 1, 1, -0.3, -0.6));
        assert_int_equal(t.f.n, 2);
        expect_hop(&t, 1, "large", "large-v2");
        assert_string_equal(jget(t.f.c[1].body, "top_logprobs"), "2");
        answer(&t.f, 1, completion_lp("large-v2", "A-large", 1, 1, -0.01, -3.0));
        assert_int_equal(outcome(&t)->status, 200);
        assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "A-large");
        finish_test(&t);
    }
    /* the same margin passes an explicit threshold below its score */
    T t;
    start(&t, "[{model: small}, {model: large}]",
          "{type: confidence, confidence: {confidence_method: margin, threshold: 0.09}}", 0);
    answer(&t.f, 0, completion_lp("small-v1", "A-small", 1, 1, -0.3, -0.6));
    assert_int_equal(t.f.n, 1);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "A-small");
    finish_test(&t);
}

/* Missing logprobs (or missing alternatives for margin) is an evaluation
 * error: skip goes to the next model, fail ends the request. */
static void test_confidence_missing_logprobs(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: large}]", "{type: confidence, confidence: {threshold: 0.5}}", 0);
    answer(&t.f, 0, completion("small-v1", "A-small", 1, 1)); /* no logprobs */
    assert_int_equal(t.f.n, 2);
    /* skipped for evaluation, but still an answer: large failing leaves it */
    fail_io(&t.f, 1);
    assert_int_equal(outcome(&t)->status, 200);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "A-small");
    assert_int_equal(outcome(&t)->iterations, 2);
    finish_test(&t);

    start(&t, "[{model: small}, {model: large}]",
          "{type: confidence, confidence: {threshold: 0.5, on_error: fail}}", 0);
    answer(&t.f, 0, completion("small-v1", "A-small", 1, 1));
    assert_int_equal(t.f.n, 1);
    expect_error(&t, 502, "looper_confidence_unavailable");
    assert_int_equal(outcome(&t)->iterations, 1);
    finish_test(&t);

    /* margin with logprobs but no alternatives: the same evaluation error */
    start(&t, "[{model: small}, {model: large}]",
          "{type: confidence, confidence: {confidence_method: margin, on_error: fail}}", 0);
    answer(&t.f, 0, completion_lp("small-v1", "A-small", 1, 1, -0.1, 0));
    expect_error(&t, 502, "looper_confidence_unavailable");
    finish_test(&t);
}

/* A failed call is skipped (error, non-2xx, bad JSON); on_error fail ends
 * the request at the first; all failed is an error. */
static void test_confidence_on_error(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: confidence}", 0);
    fail_io(&t.f, 0);
    answer_raw(&t.f, 1, VSR_OK, 200, "{\"choices\": not json", 1);
    answer(&t.f, 2, completion_lp("large-v2", "A-large", 1, 1, -0.1, 0));
    assert_int_equal(outcome(&t)->status, 200);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "A-large");
    assert_string_equal(outcome(&t)->models_used, "small,mid,large");
    assert_int_equal(outcome(&t)->iterations, 3);
    assert_int_equal(outcome(&t)->records[0].status, VSR_ERR_IO);
    assert_int_equal(outcome(&t)->records[1].status, VSR_ERR_INVALID);
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: confidence, on_error: fail}", 0);
    answer_raw(&t.f, 0, VSR_OK, 503, "{}", 1);
    assert_int_equal(t.f.n, 1);
    expect_error(&t, 502, "looper_call_failed");
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}]", "{type: confidence}", 0);
    answer_raw(&t.f, 0, VSR_OK, 429, "{}", 1);
    fail_io(&t.f, 1);
    expect_error(&t, 502, "looper_all_failed");
    assert_int_equal(outcome(&t)->iterations, 2);
    finish_test(&t);
}

/* self_verify: after each answer, an extra call to the same model with the
 * answer and a rating request appended (no logprobs, no tools); 0.9 passes
 * the default 0.7, 0.4 escalates. */
static void test_confidence_self_verify(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: large}]",
          "{type: confidence, confidence: {confidence_method: self_verify}}", 0);
    expect_hop(&t, 0, "small", "small-v1");
    assert_null(jget(t.f.c[0].body, "logprobs"));
    answer(&t.f, 0, completion("small-v1", "A-small", 3, 4));
    assert_int_equal(t.f.n, 2);
    expect_hop(&t, 1, "small", "small-v1");
    const char *v = t.f.c[1].body;
    assert_int_equal(jcount(v, "messages"), 4);
    assert_string_equal(jget(v, "messages.2.role"), "assistant");
    assert_string_equal(jget(v, "messages.2.content"), "A-small");
    assert_string_equal(jget(v, "messages.3.role"), "user");
    assert_true(has(jget(v, "messages.3.content"), "between 0 and 1"));
    assert_null(jget(v, "tools"));
    assert_null(jget(v, "tool_choice"));
    assert_null(jget(v, "logprobs"));
    answer(&t.f, 1, completion("small-v1", "0.4", 1, 1));
    assert_int_equal(t.f.n, 3);
    expect_hop(&t, 2, "large", "large-v2");
    answer(&t.f, 2, completion("large-v2", "A-large", 5, 6));
    expect_hop(&t, 3, "large", "large-v2");
    answer(&t.f, 3, completion("large-v2", "0.9", 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "A-large");
    assert_string_equal(outcome(&t)->models_used, "small,large"); /* each model once, in call order */
    assert_int_equal(outcome(&t)->iterations, 4); /* the verify calls count */
    assert_string_equal(jget(out_body(&t), "usage.total_tokens"), "22");
    finish_test(&t);
}

/* A streaming client gets the chosen answer as SSE chunks. */
static void test_confidence_stream(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: large}]", "{type: confidence}", 1);
    expect_hop(&t, 0, "small", "small-v1"); /* logprob calls never stream */
    assert_null(jget(t.f.c[0].body, "stream_options"));
    answer(&t.f, 0, completion_lp("small-v1", "A-small", 2, 3, -0.2, 0));
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 200);
    assert_string_equal(o->content_type, "text/event-stream");
    assert_int_equal(o->final_body.len, 0);
    const char *b = out_body(&t);
    assert_true(!strncmp(b, "data: {", 7));
    assert_true(has(b, "\"object\":\"chat.completion.chunk\""));
    assert_true(has(b, "\"content\":\"A-small\""));
    assert_true(has(b, "\"total_tokens\":5")); /* include_usage */
    size_t n = strlen(b);
    assert_true(n > 14 && !strcmp(b + n - 14, "data: [DONE]\n\n"));
    finish_test(&t);
}

/* token_filter tool_call_args: only the tokens of a tool call's arguments
 * are scored.  Over all tokens (−0.01, −2.5) the score is 0.58 and passes
 * 0.5; over the argument token alone it is 0.17 and escalates. */
static void test_confidence_token_filter(void **state)
{
    (void)state;
    static const char *tool_text =
        "{\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
        "\"content\":\"{\\\"arguments\\\":1}\"},\"logprobs\":{\"content\":[{\"token\":\"{\\\"arguments\\\":\","
        "\"logprob\":-0.01},{\"token\":\"1}\",\"logprob\":-2.5}]}}]}";
    for (int filter = 0; filter < 2; filter++) {
        T t;
        start(&t, "[{model: small}, {model: large}]",
              filter ? "{type: confidence, confidence: {threshold: 0.5, token_filter: tool_call_args}}"
                     : "{type: confidence, confidence: {threshold: 0.5}}",
              0);
        answer(&t.f, 0, tool_text);
        assert_int_equal(t.f.n, filter ? 2 : 1);
        if (filter)
            answer(&t.f, 1, completion_lp("large-v2", "A-large", 1, 1, -0.1, 0));
        assert_int_equal(outcome(&t)->status, 200);
        assert_string_equal(outcome(&t)->model, filter ? "large" : "small");
        finish_test(&t);
    }
}

/* A modelRef naming a LoRA: the LoRA is the model id sent and the name reported. */
static void test_confidence_lora(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small, lora_name: small-math}, {model: large}]", "{type: confidence}", 0);
    assert_string_equal(t.f.c[0].model, "small");
    assert_string_equal(jget(t.f.c[0].body, "model"), "small-math");
    answer(&t.f, 0, completion_lp("small-math", "A-lora", 1, 1, -0.1, 0));
    assert_string_equal(outcome(&t)->model, "small-math");
    assert_string_equal(outcome(&t)->models_used, "small-math");
    finish_test(&t);
}

/* ======================================================================== */
/* ratings (ref §3.4)                                                        */

static void test_ratings_concurrent(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings}", 0);
    assert_int_equal(t.rc, VSR_AGAIN);
    assert_int_equal(t.f.n, 3); /* every call started before any answered */
    const char *ids[] = {"small-v1", "mid-v1", "large-v2"}, *names[] = {"small", "mid", "large"};
    for (size_t i = 0; i < 3; i++) {
        expect_hop(&t, i, names[i], ids[i]);
        assert_null(jget(t.f.c[i].body, "tools"));
        assert_null(jget(t.f.c[i].body, "tool_choice"));
        assert_null(jget(t.f.c[i].body, "logprobs"));
        assert_string_equal(jget(t.f.c[i].body, "seed"), "7");
        assert_string_equal(jget(t.f.c[i].body, "messages.1.content"), "Q?");
    }
    /* answered in reverse order: the choices are in modelRefs order */
    answer(&t.f, 2, completion("large-v2", "A-large", 3, 1));
    answer(&t.f, 1, completion("mid-v1", "A-mid", 2, 1));
    assert_int_equal(t.f.done_calls, 0);
    answer(&t.f, 0, completion("small-v1", "A-small", 1, 1));
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 200);
    const char *b = out_body(&t);
    assert_true(!strncmp(jget(b, "id"), "chatcmpl-looper-", 16));
    assert_string_equal(jget(b, "object"), "chat.completion");
    assert_string_equal(jget(b, "model"), "small,mid,large");
    assert_int_equal(jcount(b, "choices"), 3);
    for (size_t i = 0; i < 3; i++) {
        char p[64], want[32];
        snprintf(p, sizeof(p), "choices.%zu.index", i);
        snprintf(want, sizeof(want), "%zu", i);
        assert_string_equal(jget(b, p), want);
        snprintf(p, sizeof(p), "choices.%zu.model", i);
        assert_string_equal(jget(b, p), names[i]);
        snprintf(p, sizeof(p), "choices.%zu.message.content", i);
        snprintf(want, sizeof(want), "A-%s", names[i]);
        assert_string_equal(jget(b, p), want);
        snprintf(p, sizeof(p), "choices.%zu.finish_reason", i);
        assert_string_equal(jget(b, p), "stop");
    }
    assert_string_equal(jget(b, "usage.prompt_tokens"), "6");
    assert_string_equal(jget(b, "usage.completion_tokens"), "3");
    assert_string_equal(o->models_used, "small,mid,large");
    assert_int_equal(o->iterations, 3);
    finish_test(&t);
}

static void test_ratings_max_concurrent(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings, ratings: {max_concurrent: 2}}", 0);
    assert_int_equal(t.f.n, 2);
    answer(&t.f, 1, completion("mid-v1", "A-mid", 1, 1));
    assert_int_equal(t.f.n, 3);
    expect_hop(&t, 2, "large", "large-v2");
    answer(&t.f, 2, completion("large-v2", "A-large", 1, 1));
    answer(&t.f, 0, completion("small-v1", "A-small", 1, 1));
    assert_int_equal(t.f.max_in_flight, 2);
    assert_string_equal(jget(out_body(&t), "model"), "small,mid,large");
    finish_test(&t);
}

static void test_ratings_errors(void **state)
{
    (void)state;
    T t;
    /* skip: the failure is dropped, iterations count it */
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings}", 0);
    answer(&t.f, 0, completion("small-v1", "A-small", 1, 1));
    answer_raw(&t.f, 1, VSR_OK, 503, "{}", 1);
    answer(&t.f, 2, completion("large-v2", "A-large", 1, 1));
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "model"), "small,large");
    assert_int_equal(jcount(b, "choices"), 2);
    assert_string_equal(jget(b, "choices.1.index"), "1");
    assert_string_equal(jget(b, "choices.1.model"), "large");
    assert_string_equal(outcome(&t)->models_used, "small,mid,large");
    assert_int_equal(outcome(&t)->iterations, 3);
    finish_test(&t);

    /* fail: the first failure ends the request; the calls in flight are cancelled */
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings, ratings: {on_error: fail}}", 0);
    answer_raw(&t.f, 1, VSR_OK, 200, "not json", 1);
    expect_error(&t, 502, "looper_call_failed");
    assert_int_equal(t.f.cancels, 2);
    assert_int_equal(t.f.c[0].state, CANCELLED);
    assert_int_equal(t.f.c[2].state, CANCELLED);
    finish_test(&t);

    /* all failed */
    start(&t, "[{model: small}, {model: mid}]", "{type: ratings}", 0);
    fail_io(&t.f, 0);
    answer_raw(&t.f, 1, VSR_ERR_TOO_BIG, 0, NULL, 1);
    expect_error(&t, 502, "looper_all_failed");
    assert_int_equal(outcome(&t)->iterations, 2);
    finish_test(&t);
}

static void test_ratings_stream(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]", "{type: ratings}", 1);
    answer(&t.f, 0, completion("small-v1", "A-small", 1, 1));
    answer(&t.f, 1, completion("mid-v1", "A-mid", 1, 1));
    assert_string_equal(outcome(&t)->content_type, "text/event-stream");
    const char *b = out_body(&t);
    assert_true(has(b, "\"content\":\"A-small\"") && has(b, "\"content\":\"A-mid\""));
    assert_true(has(b, "data: [DONE]\n\n"));
    finish_test(&t);
}

/* ======================================================================== */
/* remom (ref §3.5)                                                          */

/* breadth [3, 2] round_robin over two models: 3 + 2 + 1 calls, each round
 * waiting for the previous one, whose answers its prompt embeds. */
static void test_remom_rounds(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: remom, remom: {breadth_schedule: [3, 2], model_distribution: round_robin}}", 0);
    assert_int_equal(t.f.n, 3); /* round 1 only */
    expect_hop(&t, 0, "small", "small-v1");
    expect_hop(&t, 1, "mid", "mid-v1");
    expect_hop(&t, 2, "small", "small-v1");
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(jget(t.f.c[i].body, "temperature"), "1"); /* the block's default */
        assert_string_equal(jget(t.f.c[i].body, "messages.1.content"), "Q?");
    }
    answer(&t.f, 1, completion("mid-v1", "R1-bbbb", 1, 1));
    answer(&t.f, 0, completion("small-v1", "R1-a", 1, 1));
    assert_int_equal(t.f.n, 3); /* round 2 waits for the whole of round 1 */
    answer(&t.f, 2, completion("small-v1", "R1-cccccc", 1, 1));
    assert_int_equal(t.f.n, 5);
    expect_hop(&t, 3, "small", "small-v1");
    expect_hop(&t, 4, "mid", "mid-v1");
    for (size_t i = 3; i < 5; i++) {
        const char *b = t.f.c[i].body;
        assert_int_equal(jcount(b, "messages"), 2); /* the last user message replaced */
        assert_string_equal(jget(b, "messages.0.content"), "S");
        const char *p = jget(b, "messages.1.content");
        assert_string_equal(jget(b, "messages.1.role"), "user");
        assert_true(has(p, "Question:\nQ?"));
        assert_true(has(p, "R1-a") && has(p, "R1-bbbb") && has(p, "R1-cccccc"));
        assert_true(has(p, "Response 3:\n"));
    }
    answer(&t.f, 3, completion("small-v1", "R2-x", 1, 1));
    answer(&t.f, 4, completion("mid-v1", "R2-yy", 1, 1));
    assert_int_equal(t.f.n, 6);
    expect_hop(&t, 5, "small", "small-v1"); /* round_robin's one call */
    const char *p = jget(t.f.c[5].body, "messages.1.content");
    assert_true(has(p, "R2-x") && has(p, "R2-yy") && !has(p, "R1-a"));
    answer(&t.f, 5, completion("small-v1", "FINAL", 2, 3));
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 200);
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "choices.0.message.content"), "FINAL");
    assert_string_equal(jget(b, "usage.prompt_tokens"), "7");
    assert_string_equal(jget(b, "usage.completion_tokens"), "8");
    assert_int_equal(jcount(b, "reasoning_mom_responses"), 5); /* include_intermediate_responses: default true */
    assert_string_equal(jget(b, "reasoning_mom_responses.0.round"), "1");
    assert_string_equal(jget(b, "reasoning_mom_responses.4.round"), "2");
    assert_string_equal(o->models_used, "small,mid");
    assert_int_equal(o->iterations, 6);
    assert_string_equal(o->model, "small");
    finish_test(&t);
}

/* Answers the calls in flight now (not the ones their answers start). */
static void answer_all(T *t, const char *content)
{
    size_t n = t->f.n;
    for (size_t i = 0; i < n; i++)
        if (t->f.c[i].state == IN_FLIGHT)
            answer(&t->f, i, completion(t->f.c[i].model, content, 1, 1));
}

static void test_remom_distributions(void **state)
{
    (void)state;
    T t;
    /* first_only: every call, the final one too, to the first modelRef */
    start(&t, "[{model: mid}, {model: small}]",
          "{type: remom, remom: {breadth_schedule: [2], model_distribution: first_only}}", 0);
    answer_all(&t, "x");
    assert_int_equal(t.f.n, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(t.f.c[i].model, "mid");
    answer_all(&t, "y");
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    /* weighted {3, 1} over 4 calls: 3 and 1 */
    start(&t, "[{model: small, weight: 3}, {model: mid, weight: 1}]",
          "{type: remom, remom: {breadth_schedule: [4]}}", 0);
    assert_int_equal(t.f.n, 4);
    size_t small = 0;
    for (size_t i = 0; i < 4; i++)
        small += !strcmp(t.f.c[i].model, "small");
    assert_int_equal(small, 3);
    answer_all(&t, "x");
    assert_int_equal(t.f.n, 5);
    answer_all(&t, "y");
    assert_int_equal(outcome(&t)->iterations, 5);
    finish_test(&t);

    /* synthesis_model: the final round's one call */
    start(&t, "[{model: small}, {model: mid}]",
          "{type: remom, remom: {breadth_schedule: [2], model_distribution: round_robin, synthesis_model: large}}",
          0);
    answer_all(&t, "x");
    assert_int_equal(t.f.n, 3);
    expect_hop(&t, 2, "large", "large-v2");
    answer_all(&t, "y");
    assert_string_equal(outcome(&t)->models_used, "small,mid,large");
    assert_string_equal(outcome(&t)->model, "large");
    finish_test(&t);
}

/* last_n_tokens keeps the last ≈4·N bytes of each answer; with
 * include_intermediate_responses false the body has no trace. */
static void test_remom_compaction(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}]",
          "{type: remom, remom: {breadth_schedule: [1], compaction_strategy: last_n_tokens, compaction_tokens: 2,"
          " include_intermediate_responses: false, temperature: 0.2, max_completion_tokens: 77}}",
          0);
    assert_string_equal(jget(t.f.c[0].body, "temperature"), "0.2");
    assert_string_equal(jget(t.f.c[0].body, "max_completion_tokens"), "77");
    answer(&t.f, 0, completion("small-v1", "0123456789ABCDEF", 1, 1));
    const char *p = jget(t.f.c[1].body, "messages.1.content");
    assert_true(has(p, "89ABCDEF"));
    assert_false(has(p, "01234567"));
    answer(&t.f, 1, completion("small-v1", "FINAL", 1, 1));
    assert_null(jget(out_body(&t), "reasoning_mom_responses"));
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "FINAL");
    finish_test(&t);
}

/* The final round failed: the longest answer of the earlier rounds (ties
 * favour the newer round). */
static void test_remom_final_failed(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: remom, remom: {breadth_schedule: [2, 2], model_distribution: round_robin}}", 0);
    answer(&t.f, 0, completion("small-v1", "LONGEST-R1", 1, 1));
    answer(&t.f, 1, completion("mid-v1", "short", 1, 1));
    answer(&t.f, 2, completion("small-v1", "TEN-BYTES!", 1, 1)); /* as long as round 1's longest */
    fail_io(&t.f, 3);
    assert_int_equal(t.f.n, 5);
    answer_raw(&t.f, 4, VSR_OK, 502, "{}", 1);
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 200);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "TEN-BYTES!");
    assert_string_equal(o->model, "small");
    assert_int_equal(o->iterations, 5);
    finish_test(&t);

    /* an empty final answer is no answer either */
    start(&t, "[{model: small}, {model: mid}]",
          "{type: remom, remom: {breadth_schedule: [2], model_distribution: round_robin}}", 0);
    answer(&t.f, 0, completion("small-v1", "a", 1, 1));
    answer(&t.f, 1, completion("mid-v1", "LONGER", 1, 1));
    answer(&t.f, 2, completion("small-v1", "  ", 1, 1));
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "LONGER");
    assert_string_equal(outcome(&t)->model, "mid");
    assert_string_equal(jget(out_body(&t), "usage.total_tokens"), "6");
    finish_test(&t);

    /* nothing at all */
    start(&t, "[{model: small}]", "{type: remom, remom: {breadth_schedule: [1]}}", 0);
    fail_io(&t.f, 0);
    assert_int_equal(t.f.n, 2);
    fail_io(&t.f, 1);
    expect_error(&t, 502, "looper_all_failed");
    finish_test(&t);
}

/* max_responses_per_round caps the answers carried forward; include_reasoning
 * carries their reasoning; min_successful_responses fails a short round. */
static void test_remom_knobs(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}]",
          "{type: remom, remom: {breadth_schedule: [3], max_responses_per_round: 1, include_reasoning: true}}", 0);
    answer(&t.f, 0, completion("small-v1", "aa", 1, 1));
    answer(&t.f, 1, completion("small-v1", "bbbb", 1, 1));
    static const char *with_reasoning =
        "{\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
        "\"assistant\",\"content\":\"cccccc\",\"reasoning_content\":\"THOUGHTS\"}}]}";
    answer(&t.f, 2, with_reasoning);
    assert_int_equal(t.f.n, 4);
    const char *p = jget(t.f.c[3].body, "messages.1.content");
    assert_true(has(p, "Response 1:\n"));
    assert_false(has(p, "Response 2:\n"));
    /* which one is carried is the seeded order's first: exactly one of the three */
    int carried = has(p, "aa") + has(p, "bbbb") + has(p, "cccccc");
    assert_int_equal(carried, 1);
    assert_int_equal(has(p, "THOUGHTS"), has(p, "cccccc"));
    finish_test(&t);

    start(&t, "[{model: small}]", "{type: remom, remom: {breadth_schedule: [3, 1], min_successful_responses: 2}}", 0);
    answer(&t.f, 0, completion("small-v1", "aa", 1, 1));
    fail_io(&t.f, 1);
    fail_io(&t.f, 2);
    assert_int_equal(t.f.n, 3);
    expect_error(&t, 502, "looper_quorum");
    finish_test(&t);
}

/* max_concurrent bounds a round's calls in flight. */
static void test_remom_max_concurrent(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}]", "{type: remom, remom: {breadth_schedule: [3], max_concurrent: 1}}", 0);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(t.f.n, i + 1);
        answer(&t.f, i, completion("small-v1", "x", 1, 1));
    }
    assert_int_equal(t.f.n, 4);
    answer(&t.f, 3, completion("small-v1", "FINAL", 1, 1));
    assert_int_equal(t.f.max_in_flight, 1);
    assert_int_equal(outcome(&t)->iterations, 4);
    finish_test(&t);

    /* Fusion's panel likewise */
    start(&t, "[{model: small}, {model: mid}, {model: large}]",
          "{type: fusion, fusion: {max_concurrent: 2, analysis_mode: none}}", 0);
    assert_int_equal(t.f.n, 2);
    answer(&t.f, 0, completion("small-v1", "P", 1, 1));
    assert_int_equal(t.f.n, 3);
    answer_all(&t, "P");
    answer_all(&t, "FUSED");
    assert_int_equal(t.f.max_in_flight, 2);
    assert_int_equal(outcome(&t)->iterations, 4);
    finish_test(&t);
}

/* Streaming: the final round is left to the adapter (stream true), no answer. */
static void test_remom_stream(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: remom, remom: {breadth_schedule: [2], model_distribution: round_robin, synthesis_model: mid}}", 1);
    assert_string_equal(jget(t.f.c[0].body, "stream"), "false");
    assert_null(jget(t.f.c[0].body, "stream_options"));
    answer(&t.f, 0, completion("small-v1", "R1-a", 1, 1));
    answer(&t.f, 1, completion("mid-v1", "R1-b", 1, 1));
    assert_int_equal(t.f.n, 2); /* the final hop is not a port call */
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 0);
    assert_int_equal(o->body.len, 0);
    assert_non_null(o->final_model);
    assert_string_equal(o->final_model->name, "mid");
    const char *fb = final_body(&t);
    assert_string_equal(jget(fb, "model"), "mid-v1");
    assert_string_equal(jget(fb, "stream"), "true");
    assert_string_equal(jget(fb, "stream_options.include_usage"), "true");
    assert_true(has(jget(fb, "messages.0.content"), "R1-a"));
    assert_string_equal(o->model, "mid");
    assert_string_equal(o->models_used, "small,mid");
    assert_int_equal(o->iterations, 3);
    finish_test(&t);
}

/* ======================================================================== */
/* fusion (ref §3.6)                                                         */

static const char *ANALYSIS = "{\"consensus\":[\"both say 4\"],\"contradictions\":[],\"partial_coverage\":[],"
                              "\"unique_insights\":[\"mid shows work\"],\"blind_spots\":[]}";

static void test_fusion_separate(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]", "{type: fusion, fusion: {temperature: 0.4}}", 0);
    assert_int_equal(t.f.n, 2); /* the panel, concurrently */
    expect_hop(&t, 0, "small", "small-v1");
    expect_hop(&t, 1, "mid", "mid-v1");
    assert_non_null(jget(t.f.c[0].body, "tools")); /* the original request */
    assert_string_equal(jget(t.f.c[0].body, "temperature"), "0.4");
    answer(&t.f, 1, completion("mid-v1", "P-mid", 1, 2));
    answer(&t.f, 0, completion("small-v1", "P-small", 3, 4));
    assert_int_equal(t.f.n, 3);
    expect_hop(&t, 2, "small", "small-v1"); /* the judge: the first panel model */
    const char *a = t.f.c[2].body;
    assert_int_equal(jcount(a, "messages"), 3); /* appended to the conversation */
    assert_string_equal(jget(a, "messages.1.content"), "Q?");
    const char *ap = jget(a, "messages.2.content");
    assert_true(has(ap, "Response 1 (small):\nP-small") && has(ap, "Response 2 (mid):\nP-mid"));
    assert_true(has(ap, "\"consensus\""));
    assert_null(jget(a, "tools"));
    answer(&t.f, 2, completion("small-v1", ANALYSIS, 5, 6));
    assert_int_equal(t.f.n, 4);
    expect_hop(&t, 3, "small", "small-v1");
    const char *s = t.f.c[3].body;
    assert_int_equal(jcount(s, "messages"), 3);
    const char *sp = jget(s, "messages.2.content");
    assert_true(has(sp, "Response 1 (small):\nP-small") && has(sp, "Response 2 (mid):\nP-mid"));
    assert_true(has(sp, "An analysis of the responses (JSON):\n") && has(sp, "both say 4"));
    assert_true(has(sp, "Output contract"));
    assert_false(has(sp, "silently"));
    assert_string_equal(jget(s, "temperature"), "0.4");
    answer(&t.f, 3, completion("small-v1", "FUSED", 7, 8));
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 200);
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "choices.0.message.content"), "FUSED");
    assert_string_equal(jget(b, "usage.prompt_tokens"), "16");
    assert_string_equal(jget(b, "usage.completion_tokens"), "20");
    assert_null(jget(b, "fusion")); /* include_analysis / include_intermediate_responses default false */
    assert_string_equal(o->models_used, "small,mid");
    assert_int_equal(o->iterations, 4);
    assert_string_equal(o->model, "small");
    finish_test(&t);
}

/* An unparsable analysis (or a failed analysis call) is not fatal. */
static void test_fusion_bad_analysis(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: fusion, fusion: {model: large, include_analysis: true, include_intermediate_responses: true}}", 0);
    answer_all(&t, "P");
    expect_hop(&t, 2, "large", "large-v2");
    answer(&t.f, 2, completion("large-v2", "I think they agree.", 1, 1));
    assert_int_equal(t.f.n, 4);
    assert_false(has(jget(t.f.c[3].body, "messages.2.content"), "An analysis of the responses"));
    answer(&t.f, 3, completion("large-v2", "FUSED", 1, 1));
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "choices.0.message.content"), "FUSED");
    assert_string_equal(jget(b, "fusion.analysis"), "null");
    assert_int_equal(jcount(b, "fusion.panel"), 2);
    assert_string_equal(jget(b, "fusion.panel.1.model"), "mid");
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}]", "{type: fusion}", 0);
    answer_all(&t, "P");
    fail_io(&t.f, 2);
    assert_int_equal(t.f.n, 4);
    answer(&t.f, 3, completion("small-v1", "FUSED", 1, 1));
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "FUSED");
    assert_int_equal(outcome(&t)->iterations, 4);
    finish_test(&t);

    /* the synthesis failing fails the request */
    start(&t, "[{model: small}, {model: mid}]", "{type: fusion, fusion: {analysis_mode: none}}", 0);
    answer_all(&t, "P");
    fail_io(&t.f, 2);
    expect_error(&t, 502, "looper_synthesis_failed");
    finish_test(&t);
}

static void test_fusion_modes(void **state)
{
    (void)state;
    const char *modes[] = {"one_call", "none"};
    for (size_t m = 0; m < 2; m++) {
        T t;
        char algo[128];
        snprintf(algo, sizeof(algo), "{type: fusion, fusion: {analysis_mode: %s}}", modes[m]);
        start(&t, "[{model: small}, {model: mid}]", algo, 0);
        answer_all(&t, "P");
        assert_int_equal(t.f.n, 3); /* one judge call */
        const char *sp = jget(t.f.c[2].body, "messages.2.content");
        assert_true(has(sp, "Response 2 (mid):\nP"));
        assert_int_equal(has(sp, "First compare the responses"), m == 0);
        answer(&t.f, 2, completion("small-v1", "FUSED", 1, 1));
        assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "FUSED");
        assert_int_equal(outcome(&t)->iterations, 3);
        finish_test(&t);
    }
}

static void test_fusion_quorum(void **state)
{
    (void)state;
    T t;
    /* on_error skip: a short panel goes on with what it has */
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: fusion, fusion: {analysis_mode: none}}", 0);
    answer(&t.f, 0, completion("small-v1", "P-small", 1, 1));
    fail_io(&t.f, 1);
    answer(&t.f, 2, completion("large-v2", "P-large", 1, 1));
    assert_int_equal(t.f.n, 4);
    const char *sp = jget(t.f.c[3].body, "messages.1.content");
    sp = jget(t.f.c[3].body, "messages.1.content");
    assert_true(has(jget(t.f.c[3].body, "messages.2.content"), "Response 2 (large):\nP-large"));
    (void)sp;
    answer(&t.f, 3, completion("small-v1", "FUSED", 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    /* on_error fail: a short panel fails */
    start(&t, "[{model: small}, {model: mid}]", "{type: fusion, fusion: {on_error: fail}}", 0);
    answer(&t.f, 0, completion("small-v1", "P-small", 1, 1));
    fail_io(&t.f, 1);
    assert_int_equal(t.f.n, 2);
    expect_error(&t, 502, "looper_quorum");
    finish_test(&t);

    /* min_successful_responses 2 of 3: one failure is fine, two are not */
    start(&t, "[{model: small}, {model: mid}, {model: large}]",
          "{type: fusion, fusion: {min_successful_responses: 2, analysis_mode: none}}", 0);
    answer(&t.f, 0, completion("small-v1", "P-small", 1, 1));
    fail_io(&t.f, 1);
    answer(&t.f, 2, completion("large-v2", "P-large", 1, 1));
    assert_int_equal(t.f.n, 4);
    answer(&t.f, 3, completion("small-v1", "FUSED", 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}, {model: large}]",
          "{type: fusion, fusion: {min_successful_responses: 2}}", 0);
    answer(&t.f, 0, completion("small-v1", "P-small", 1, 1));
    fail_io(&t.f, 1);
    fail_io(&t.f, 2);
    assert_int_equal(t.f.n, 3);
    expect_error(&t, 502, "looper_quorum");
    finish_test(&t);

    /* a quorum above the panel size is capped to it */
    start(&t, "[{model: small}, {model: mid}]",
          "{type: fusion, fusion: {min_successful_responses: 5, analysis_mode: none}}", 0);
    answer_all(&t, "P");
    assert_int_equal(t.f.n, 3);
    answer_all(&t, "FUSED");
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    /* quorum_failure_policy fallback: the original request to the target */
    start(&t, "[{model: small}, {model: mid}]",
          "{type: fusion, fusion: {min_successful_responses: 2, quorum_failure_policy: fallback,"
          " quorum_fallback_target: spare}}",
          0);
    answer(&t.f, 0, completion("small-v1", "P-small", 1, 1));
    fail_io(&t.f, 1);
    assert_int_equal(t.f.n, 3);
    expect_hop(&t, 2, "spare", "spare-v1");
    assert_int_equal(jcount(t.f.c[2].body, "messages"), 2);
    assert_string_equal(jget(t.f.c[2].body, "messages.1.content"), "Q?");
    assert_non_null(jget(t.f.c[2].body, "tools"));
    answer(&t.f, 2, completion("spare-v1", "FALLBACK", 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "FALLBACK");
    assert_string_equal(outcome(&t)->model, "spare");
    assert_string_equal(outcome(&t)->models_used, "small,mid,spare");
    finish_test(&t);
}

/* analysis_overrides: a panel model's own temperature and max_completion_tokens. */
static void test_fusion_overrides(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: fusion, fusion: {temperature: 0.5, max_completion_tokens: 99, analysis_mode: none,"
          " analysis_overrides: [{model: mid, temperature: 0.1, max_completion_tokens: 9}]}}",
          0);
    assert_string_equal(jget(t.f.c[0].body, "temperature"), "0.5");
    assert_string_equal(jget(t.f.c[0].body, "max_completion_tokens"), "99");
    assert_string_equal(jget(t.f.c[1].body, "temperature"), "0.1");
    assert_string_equal(jget(t.f.c[1].body, "max_completion_tokens"), "9");
    answer_all(&t, "P");
    assert_string_equal(jget(t.f.c[2].body, "temperature"), "0.5");
    finish_test(&t);
}

static void test_fusion_stream(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]", "{type: fusion}", 1);
    answer_all(&t, "P");
    assert_int_equal(t.f.n, 3);
    assert_string_equal(jget(t.f.c[2].body, "stream"), "false"); /* the analysis is buffered */
    answer(&t.f, 2, completion("small-v1", ANALYSIS, 1, 1));
    assert_int_equal(t.f.n, 3);
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 0);
    assert_string_equal(o->final_model->name, "small");
    const char *fb = final_body(&t);
    assert_string_equal(jget(fb, "stream"), "true");
    assert_true(has(jget(fb, "messages.1.content"), "both say 4"));
    assert_int_equal(o->iterations, 4);
    assert_string_equal(o->models_used, "small,mid");
    finish_test(&t);

    /* the quorum fallback is the final hop too */
    start(&t, "[{model: small}, {model: mid}]",
          "{type: fusion, fusion: {on_error: fail, quorum_failure_policy: fallback, quorum_fallback_target: spare}}",
          1);
    fail_io(&t.f, 0);
    answer(&t.f, 1, completion("mid-v1", "P", 1, 1));
    assert_int_equal(t.f.n, 2);
    assert_int_equal(outcome(&t)->status, 0);
    assert_string_equal(outcome(&t)->final_model->name, "spare");
    assert_string_equal(jget(final_body(&t), "messages.0.content"), "Q?");
    assert_string_equal(jget(final_body(&t), "stream"), "true");
    finish_test(&t);
}

/* ======================================================================== */
/* workflows (ref §3.7)                                                      */

static const char *FLOW = "{type: workflows, workflows: {max_parallel: %d, roles: ["
                          "{name: r1, model: small, prompt: P1}, {name: r2, model: mid, prompt: P2},"
                          " {name: r3, model: large, prompt: P3, access_list: [r1, r2]}]}}";

static void test_workflows_static(void **state)
{
    (void)state;
    T t;
    char algo[512];
    snprintf(algo, sizeof(algo), FLOW, 2);
    start(&t, "[{model: small}, {model: mid}, {model: large}]", algo, 0);
    assert_int_equal(t.f.n, 2); /* r1 and r2: r3 waits for its inputs */
    expect_hop(&t, 0, "small", "small-v1");
    expect_hop(&t, 1, "mid", "mid-v1");
    assert_true(has(jget(t.f.c[0].body, "messages.2.content"), "P1"));
    assert_true(has(jget(t.f.c[1].body, "messages.2.content"), "P2"));
    answer(&t.f, 1, completion("mid-v1", "OUT-r2", 1, 1));
    assert_int_equal(t.f.n, 2);
    answer(&t.f, 0, completion("small-v1", "OUT-r1", 1, 1));
    assert_int_equal(t.f.n, 3);
    expect_hop(&t, 2, "large", "large-v2");
    const char *p3 = jget(t.f.c[2].body, "messages.2.content");
    assert_true(has(p3, "P3") && has(p3, "OUT-r1") && has(p3, "OUT-r2"));
    answer(&t.f, 2, completion("large-v2", "OUT-r3", 1, 1));
    assert_int_equal(t.f.n, 4);
    expect_hop(&t, 3, "small", "small-v1"); /* final: the first modelRef */
    const char *pf = jget(t.f.c[3].body, "messages.2.content");
    assert_true(has(pf, "OUT-r1") && has(pf, "OUT-r2") && has(pf, "OUT-r3"));
    answer(&t.f, 3, completion("small-v1", "FINAL", 1, 1));
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "choices.0.message.content"), "FINAL");
    assert_int_equal(jcount(b, "workflow_steps"), 3);
    assert_string_equal(jget(b, "workflow_steps.2.id"), "r3");
    assert_string_equal(outcome(&t)->models_used, "small,mid,large");
    assert_int_equal(outcome(&t)->iterations, 4);
    finish_test(&t);

    snprintf(algo, sizeof(algo), FLOW, 1);
    start(&t, "[{model: small}, {model: mid}, {model: large}]", algo, 0);
    assert_int_equal(t.f.n, 1);
    answer(&t.f, 0, completion("small-v1", "OUT-r1", 1, 1));
    assert_int_equal(t.f.n, 2);
    answer(&t.f, 1, completion("mid-v1", "OUT-r2", 1, 1));
    answer(&t.f, 2, completion("large-v2", "OUT-r3", 1, 1));
    answer(&t.f, 3, completion("small-v1", "FINAL", 1, 1));
    assert_int_equal(t.f.max_in_flight, 1);
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    /* on_error fail (the default): a failed role fails the request */
    snprintf(algo, sizeof(algo), FLOW, 2);
    start(&t, "[{model: small}, {model: mid}, {model: large}]", algo, 0);
    fail_io(&t.f, 0);
    expect_error(&t, 502, "looper_call_failed");
    assert_int_equal(t.f.c[1].state, CANCELLED);
    finish_test(&t);
}

static void test_workflows_dynamic(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]", "{type: workflows, workflows: {mode: dynamic}}", 0);
    assert_int_equal(t.f.n, 1);
    expect_hop(&t, 0, "small", "small-v1");
    const char *pp = jget(t.f.c[0].body, "messages.2.content");
    assert_true(has(pp, "\"steps\"") && has(pp, "small, mid"));
    assert_string_equal(jget(t.f.c[0].body, "max_completion_tokens"), "2048");
    assert_null(jget(t.f.c[0].body, "tools"));
    answer(&t.f, 0, completion("small-v1",
                                "```json\n{\"steps\":[{\"id\":\"facts\",\"role\":\"researcher\",\"models\":[\"mid\"],"
                                "\"prompt\":\"List facts\",\"access_list\":[]},{\"id\":\"draft\",\"role\":\"writer\","
                                "\"models\":[\"small\"],\"prompt\":\"Write it\",\"access_list\":[\"facts\"]}],"
                                "\"final\":{\"prompt\":\"Polish the draft\"}}\n```",
                                1, 1));
    assert_int_equal(t.f.n, 2);
    expect_hop(&t, 1, "mid", "mid-v1");
    assert_true(has(jget(t.f.c[1].body, "messages.2.content"), "List facts"));
    answer(&t.f, 1, completion("mid-v1", "FACTS", 1, 1));
    assert_int_equal(t.f.n, 3);
    expect_hop(&t, 2, "small", "small-v1");
    const char *dp = jget(t.f.c[2].body, "messages.2.content");
    assert_true(has(dp, "Write it") && has(dp, "FACTS"));
    answer(&t.f, 2, completion("small-v1", "DRAFT", 1, 1));
    assert_int_equal(t.f.n, 4);
    const char *fp = jget(t.f.c[3].body, "messages.2.content");
    assert_true(has(fp, "Polish the draft") && has(fp, "DRAFT") && has(fp, "FACTS"));
    answer(&t.f, 3, completion("small-v1", "FINAL", 1, 1));
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "FINAL");
    assert_int_equal(outcome(&t)->iterations, 4);
    finish_test(&t);

    /* the planner failing: the built-in plan too */
    start(&t, "[{model: small}, {model: mid}]", "{type: workflows, workflows: {mode: dynamic}}", 0);
    answer_raw(&t.f, 0, VSR_OK, 500, "{}", 1);
    assert_int_equal(t.f.n, 2);
    answer(&t.f, 1, completion("small-v1", "STEP", 1, 1));
    answer(&t.f, 2, completion("small-v1", "FINAL", 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    assert_int_equal(outcome(&t)->iterations, 3);
    finish_test(&t);

    /* not a plan: the built-in one (one step answering the request) */
    start(&t, "[{model: small}, {model: mid}]", "{type: workflows, workflows: {mode: dynamic}}", 0);
    answer(&t.f, 0, completion("small-v1", "I would first research, then write.", 1, 1));
    assert_int_equal(t.f.n, 2);
    expect_hop(&t, 1, "small", "small-v1");
    answer(&t.f, 1, completion("small-v1", "STEP", 1, 1));
    assert_int_equal(t.f.n, 3);
    assert_true(has(jget(t.f.c[2].body, "messages.2.content"), "STEP"));
    answer(&t.f, 2, completion("small-v1", "FINAL", 1, 1));
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "FINAL");
    finish_test(&t);
}

/* A role with several models (the reference's roles[].models) calls each of
 * them with its prompt in the same wave; a later role and the final see
 * every model's output.  A planned step's models fan out the same way (the
 * decision's models only, each once). */
static void test_workflows_role_models(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}, {model: large}]",
          "{type: workflows, workflows: {max_parallel: 4, roles: [{name: plan, models: [small], prompt: P1},"
          " {name: patch, models: [small, mid], prompt: P2, access_list: [plan]},"
          " {name: verify, models: [large], prompt: P3, access_list: [patch]}], final: {model: large}}}",
          0);
    assert_int_equal(t.f.n, 1);
    expect_hop(&t, 0, "small", "small-v1");
    answer(&t.f, 0, completion("small-v1", "OUT-plan", 1, 1));
    assert_int_equal(t.f.n, 3); /* patch: small and mid at once */
    expect_hop(&t, 1, "small", "small-v1");
    expect_hop(&t, 2, "mid", "mid-v1");
    for (int i = 1; i <= 2; i++) {
        const char *p = jget(t.f.c[i].body, "messages.2.content");
        assert_true(has(p, "P2") && has(p, "OUT-plan"));
    }
    answer(&t.f, 2, completion("mid-v1", "OUT-patch-b", 1, 1));
    assert_int_equal(t.f.n, 3); /* verify waits for every model of patch */
    answer(&t.f, 1, completion("small-v1", "OUT-patch-a", 1, 1));
    assert_int_equal(t.f.n, 4);
    expect_hop(&t, 3, "large", "large-v2");
    const char *p3 = jget(t.f.c[3].body, "messages.2.content");
    assert_true(has(p3, "P3") && has(p3, "OUT-patch-a") && has(p3, "OUT-patch-b"));
    assert_false(has(p3, "OUT-plan"));
    answer(&t.f, 3, completion("large-v2", "OUT-verify", 1, 1));
    assert_int_equal(t.f.n, 5);
    expect_hop(&t, 4, "large", "large-v2");
    answer(&t.f, 4, completion("large-v2", "FINAL", 1, 1));
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "choices.0.message.content"), "FINAL");
    assert_int_equal(jcount(b, "workflow_steps"), 4);
    assert_string_equal(jget(b, "workflow_steps.1.id"), "patch");
    assert_string_equal(jget(b, "workflow_steps.1.model"), "small");
    assert_string_equal(jget(b, "workflow_steps.2.id"), "patch");
    assert_string_equal(jget(b, "workflow_steps.2.model"), "mid");
    assert_int_equal(outcome(&t)->iterations, 5);
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}]", "{type: workflows, workflows: {mode: dynamic}}", 0);
    answer(&t.f, 0, completion("small-v1",
                                "{\"steps\":[{\"id\":\"a\",\"prompt\":\"PA\","
                                "\"models\":[\"mid\",\"nosuch\",\"small\",\"mid\"]}]}",
                                1, 1));
    assert_int_equal(t.f.n, 3); /* mid and small; nosuch and the second mid are dropped */
    expect_hop(&t, 1, "mid", "mid-v1");
    expect_hop(&t, 2, "small", "small-v1");
    answer(&t.f, 1, completion("mid-v1", "OUT-a1", 1, 1));
    answer(&t.f, 2, completion("small-v1", "OUT-a2", 1, 1));
    assert_int_equal(t.f.n, 4);
    const char *fp = jget(t.f.c[3].body, "messages.2.content");
    assert_true(has(fp, "OUT-a1") && has(fp, "OUT-a2"));
    answer(&t.f, 3, completion("small-v1", "FINAL", 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);
}

/* A step sees only the outputs its access_list names; min_successful_responses
 * needs that many steps to succeed under on_error skip. */
static void test_workflows_access(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: workflows, workflows: {roles: [{name: r1, prompt: P1}, {name: r2, prompt: P2},"
          " {name: r3, prompt: P3, access_list: [r1]}]}}",
          0);
    answer(&t.f, 0, completion("small-v1", "OUT-r1", 1, 1));
    answer(&t.f, 1, completion("small-v1", "OUT-r2", 1, 1));
    const char *p3 = jget(t.f.c[2].body, "messages.2.content");
    assert_true(has(p3, "OUT-r1"));
    assert_false(has(p3, "OUT-r2"));
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}]",
          "{type: workflows, workflows: {on_error: skip, min_successful_responses: 2,"
          " roles: [{name: r1, prompt: P1}, {name: r2, prompt: P2}]}}",
          0);
    answer(&t.f, 0, completion("small-v1", "OUT-r1", 1, 1));
    fail_io(&t.f, 1);
    assert_int_equal(t.f.n, 2);
    expect_error(&t, 502, "looper_quorum");
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}]",
          "{type: workflows, workflows: {on_error: skip, min_successful_responses: 1,"
          " roles: [{name: r1, prompt: P1}, {name: r2, prompt: P2}]}}",
          0);
    answer(&t.f, 0, completion("small-v1", "OUT-r1", 1, 1));
    fail_io(&t.f, 1);
    assert_int_equal(t.f.n, 3);
    answer(&t.f, 2, completion("small-v1", "FINAL", 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    /* a plan longer than max_steps is cut; the planner is planner.model */
    start(&t, "[{model: small}, {model: mid}]",
          "{type: workflows, workflows: {mode: dynamic, max_steps: 2, planner: {model: mid}}}", 0);
    expect_hop(&t, 0, "mid", "mid-v1");
    answer(&t.f, 0, completion("mid-v1",
                                "{\"steps\":[{\"id\":\"a\",\"prompt\":\"PA\"},{\"id\":\"b\",\"prompt\":\"PB\"},"
                                "{\"id\":\"c\",\"prompt\":\"PC\"}]}",
                                1, 1));
    assert_int_equal(t.f.n, 3); /* a and b, in parallel */
    answer_all(&t, "OUT");
    assert_int_equal(t.f.n, 4);
    assert_false(has(jget(t.f.c[3].body, "messages.2.content"), "\"c\""));
    answer_all(&t, "FINAL");
    assert_int_equal(outcome(&t)->iterations, 4);
    finish_test(&t);
}

static void test_workflows_stream(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: workflows, workflows: {roles: [{name: a, prompt: PA}], final: {model: mid, prompt: FIN}}}", 1);
    answer(&t.f, 0, completion("small-v1", "OUT-a", 1, 1));
    const vsr_graph_outcome_t *o = outcome(&t);
    assert_int_equal(o->status, 0);
    assert_string_equal(o->final_model->name, "mid");
    const char *fb = final_body(&t);
    assert_string_equal(jget(fb, "stream"), "true");
    assert_true(has(jget(fb, "messages.1.content"), "FIN") && has(jget(fb, "messages.1.content"), "OUT-a"));
    finish_test(&t);
}

/* ======================================================================== */
/* the executor                                                              */

/* Every physical exchange counts: a call that took 3 attempts spends a
 * budget of 3, so the next call is refused. */
static void test_budget_attempts(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: confidence, budget: {max_calls: 3}, confidence: {escalation_order: declared}}", 0);
    answer_raw(&t.f, 0, VSR_OK, 503, "{}", 3);
    assert_int_equal(t.f.n, 1);
    expect_error(&t, 503, "looper_budget_exhausted");
    finish_test(&t);

    start(&t, "[{model: small}, {model: mid}]",
          "{type: confidence, budget: {max_calls: 3}, confidence: {escalation_order: declared}}", 0);
    answer_raw(&t.f, 0, VSR_OK, 503, "{}", 2);
    assert_int_equal(t.f.n, 2);
    answer(&t.f, 1, completion_lp("mid-v1", "A-mid", 1, 1, -0.1, 0));
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);
}

/* Calls in flight count too: a fan-out of 3 under max_calls 2 never starts
 * the third. */
static void test_budget_parallel(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings, budget: {max_calls: 2}}", 0);
    assert_int_equal(t.f.n, 2);
    expect_error(&t, 503, "looper_budget_exhausted");
    assert_int_equal(t.f.cancels, 2);
    finish_test(&t);

    /* the streamed final hop is an exchange too: refused when nothing is left for it */
    start(&t, "[{model: small}]", "{type: remom, budget: {max_calls: 2}, remom: {breadth_schedule: [2]}}", 1);
    answer_all(&t, "x");
    assert_int_equal(t.f.n, 2);
    expect_error(&t, 503, "looper_budget_exhausted");
    finish_test(&t);
    start(&t, "[{model: small}]", "{type: remom, budget: {max_calls: 3}, remom: {breadth_schedule: [2]}}", 1);
    answer_all(&t, "x");
    assert_int_equal(outcome(&t)->status, 0);
    assert_int_equal(outcome(&t)->iterations, 3);
    finish_test(&t);
}

/* Without algorithm.budget, the call budget is what the configuration
 * implies: hops from the algorithm's structure, calls with each hop's
 * retries (spare retries twice), both capped at VSR_GRAPH_MAX_CALLS. */
static void test_implied_budget(void **state)
{
    (void)state;
    static const struct {
        const char *refs, *algo;
        uint64_t hops, calls;
    } cases[] = {
        {"[{model: small}, {model: mid}]", "{type: static}", 0, 0},
        {"[{model: small}, {model: mid}, {model: large}]", "{type: confidence}", 3, 3},
        {"[{model: small}, {model: spare}]", "{type: confidence}", 2, 4},
        {"[{model: small}, {model: mid}]", "{type: confidence, confidence: {confidence_method: self_verify}}", 4, 4},
        {"[{model: small}, {model: mid}, {model: large}]", "{type: ratings}", 3, 3},
        {"[{model: small}]", "{type: remom}", 5, 5},
        {"[{model: small}, {model: mid}]", "{type: remom, remom: {breadth_schedule: [2, 3, 1]}}", 7, 7},
        {"[{model: small}, {model: spare}]", "{type: remom, remom: {breadth_schedule: [2]}}", 3, 9},
        {"[{model: small}]", "{type: remom, remom: {breadth_schedule: [2], synthesis_model: spare}}", 3, 5},
        {"[{model: small}, {model: mid}, {model: large}]", "{type: fusion}", 5, 5},
        {"[{model: small}, {model: mid}, {model: large}]", "{type: fusion, fusion: {analysis_mode: one_call}}", 4, 4},
        {"[{model: small}, {model: mid}, {model: large}]", "{type: fusion, fusion: {analysis_mode: none}}", 4, 4},
        {"[{model: small}, {model: mid}]", "{type: fusion, fusion: {analysis_models: [small, mid, large], model: large}}",
         5, 5},
        {"[{model: small}, {model: mid}, {model: large}]",
         "{type: fusion, fusion: {analysis_mode: none, quorum_failure_policy: fallback,"
         " quorum_fallback_target: spare}}", 4, 6},
        {"[{model: small}]", "{type: workflows}", 2, 2},
        {"[{model: small}]", "{type: workflows, workflows: {mode: dynamic}}", 5, 5},
        {"[{model: small}]", "{type: workflows, workflows: {mode: dynamic, max_steps: 8}}", 10, 10},
        {"[{model: small}]",
         "{type: workflows, workflows: {roles: [{name: a, prompt: A}, {name: b, prompt: B, model: spare}]}}", 3, 7},
        {"[{model: small}]",
         "{type: workflows, workflows: {max_steps: 1, roles: [{name: a, prompt: A}, {name: b, prompt: B}]}}", 2, 2},
        /* a role's models each make a call; a planned step may name every modelRef */
        {"[{model: small}, {model: mid}]",
         "{type: workflows, workflows: {roles: [{name: a, prompt: A, models: [small, mid]}, {name: b, prompt: B}]}}",
         4, 4},
        {"[{model: small}]",
         "{type: workflows, workflows: {roles: [{name: a, prompt: A, models: [small, spare]}]}}", 3, 7},
        {"[{model: small}, {model: mid}]", "{type: workflows, workflows: {mode: dynamic, max_steps: 2}}", 6, 6},
        /* a graph: calls x loop rounds x fan-out, the larger side of a branch */
        {"[{model: small}, {model: mid}]",
         "{type: graph, graph: {root: [{parallel: {models: [small, mid], count: 3}},"
         " {loop: {max_rounds: 4, body: {call: {models: [small, spare]}}}},"
         " {branch: {if: {succeeded: true}, then: {call: {models: [small]}}, else: {parallel: {count: 2}}}}]}}",
         13, 21},
        {"[{model: small}, {model: mid}]",
         "{type: graph, graph: {subgraphs: {p: {parallel: {}}}, root: [{subgraph: p}, {subgraph: p}, {call: {}}]}}",
         6, 6},
        {"[{model: small}]",
         "{type: graph, graph: {root: {loop: {max_rounds: 100, body: {loop: {max_rounds: 100,"
         " body: {parallel: {count: 64}}}}}}}}", VSR_GRAPH_MAX_CALLS, VSR_GRAPH_MAX_CALLS},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        T t;
        memset(&t, 0, sizeof(t));
        load(&t, cases[i].refs, cases[i].algo);
        vsr_graph_implied_t im;
        vsr_graph_implied_budget(t.cfg, decision(&t), &im);
        if (im.hops != cases[i].hops || im.calls != cases[i].calls)
            fail_msg("case %zu (%s): hops %llu calls %llu, want %llu and %llu", i, cases[i].algo,
                     (unsigned long long)im.hops, (unsigned long long)im.calls, (unsigned long long)cases[i].hops,
                     (unsigned long long)cases[i].calls);
        vsr_config_free(t.cfg);
    }
}

/* The implied budget is the ledger's cap: two modelRefs imply two calls, so
 * a first call that took two exchanges leaves none; a modelRef that may
 * retry twice brings its retries with it. */
static void test_budget_implied(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]", "{type: confidence, confidence: {escalation_order: declared}}", 0);
    answer_raw(&t.f, 0, VSR_OK, 503, "{}", 2);
    assert_int_equal(t.f.n, 1);
    expect_error(&t, 503, "looper_budget_exhausted");
    finish_test(&t);

    start(&t, "[{model: spare}, {model: mid}]", "{type: confidence, confidence: {escalation_order: declared}}", 0);
    answer_raw(&t.f, 0, VSR_OK, 503, "{}", 3);
    assert_int_equal(t.f.n, 2);
    answer(&t.f, 1, completion_lp("mid-v1", "A-mid", 1, 1, -0.1, 0));
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    /* the snapshot's implied budget is the one used: a run does not work it out again */
    prepare(&t, "[{model: small}, {model: mid}]", "{type: ratings}");
    vsr_graph_implied_t one = {1, 1};
    vsr_graph_opts_t o = {.cfg = t.cfg, .decision = decision(&t), .body = REQ, .len = strlen(REQ), .pool = &t.pool,
                          .port = &t.port, .deadline_ms = 1000 + 600000, .implied = &one, .done = on_done,
                          .done_ud = &t};
    const vsr_graph_outcome_t *out = NULL;
    assert_int_equal(vsr_graph_start(&o, &t.run, &out, &t.why), VSR_OK); /* the second call is refused at once */
    t.f.out = out;
    assert_int_equal(t.f.n, 1);
    expect_error(&t, 503, "looper_budget_exhausted");
    finish_test(&t);
}

/* A request body with one user message of n bytes (malloc'd). */
static char *big_request(size_t n)
{
    const char *head = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"";
    size_t h = strlen(head);
    char *b = malloc(h + n + 8);
    assert_non_null(b);
    memcpy(b, head, h);
    memset(b + h, 'x', n);
    strcpy(b + h + n, "\"}]}");
    return b;
}

/* The byte budget: a request whose size times the hops the algorithm may
 * make passes it is refused before any hop (413); one that fits goes on,
 * and a hop that would pass it (the synthesis carries the round's answers)
 * is not sent: the run fails there, the streamed final hop included. */
static void test_byte_budget(void **state)
{
    (void)state;
    T t;
    /* the default, 64 MiB: three hops of 22 MiB would send 66 */
    char *big = big_request((size_t)22 << 20);
    prepare(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: confidence}");
    assert_int_equal(go(&t, big, 0, 0, 0), VSR_OK);
    assert_int_equal(t.f.n, 0);
    expect_error(&t, 413, "looper_request_too_large");
    assert_true(has(jget(out_body(&t), "error.message"), "67108864"));
    assert_string_equal(jget(out_body(&t), "error.type"), "invalid_request_error");
    finish_test(&t);
    /* with a budget that holds them, they go */
    prepare(&t, "[{model: small}, {model: mid}]", "{type: confidence, budget: {max_upstream_bytes: 100000000}}");
    assert_int_equal(go(&t, big, 0, 0, 0), VSR_AGAIN);
    assert_int_equal(t.f.n, 1);
    finish_test(&t);
    free(big);

    /* configured: 3 x the request is too much */
    size_t len = strlen(REQ);
    char algo[256];
    snprintf(algo, sizeof(algo), "{type: remom, budget: {max_upstream_bytes: %zu}, remom: {breadth_schedule: [2]}}",
             3 * len - 1);
    prepare(&t, "[{model: small}]", algo);
    assert_int_equal(go(&t, REQ, 0, 0, 0), VSR_OK);
    assert_int_equal(t.f.n, 0);
    expect_error(&t, 413, "looper_request_too_large");
    finish_test(&t);

    /* room for the rounds, not for a synthesis that carries 2 x 2000 bytes of answers */
    char *long_answer = malloc(2001);
    assert_non_null(long_answer);
    memset(long_answer, 'a', 2000);
    long_answer[2000] = '\0';
    for (int stream = 0; stream <= 1; stream++) {
        const char *req = stream ? REQ_STREAM : REQ;
        snprintf(algo, sizeof(algo), "{type: remom, budget: {max_upstream_bytes: %zu}, remom: {breadth_schedule: [2]}}",
                 3 * strlen(req) + 600);
        start(&t, "[{model: small}]", algo, stream);
        assert_int_equal(t.f.n, 2);
        answer_all(&t, long_answer);
        assert_int_equal(t.f.n, 2);
        expect_error(&t, 503, "looper_budget_exhausted");
        assert_true(has(jget(out_body(&t), "error.message"), "byte budget"));
        finish_test(&t);
    }
    free(long_answer);

    /* a retry sends the body again: it counts */
    snprintf(algo, sizeof(algo),
             "{type: confidence, budget: {max_upstream_bytes: %zu}, confidence: {escalation_order: declared}}",
             3 * len + 600);
    start(&t, "[{model: small}, {model: mid}]", algo, 0);
    answer_raw(&t.f, 0, VSR_OK, 503, "{}", 3);
    assert_int_equal(t.f.n, 1);
    expect_error(&t, 503, "looper_budget_exhausted");
    finish_test(&t);
}

/* budget.deadline bounds the run: every call's deadline is at most the
 * run's, and a call due after it is refused. */
static void test_deadline(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]",
          "{type: confidence, budget: {deadline: 2s}, confidence: {escalation_order: declared, threshold: 0.99}}", 0);
    assert_int_equal(t.f.c[0].deadline, 1000 + 2000);
    t.f.now = 3500;
    answer(&t.f, 0, completion_lp("small-v1", "A-small", 1, 1, -2, 0));
    assert_int_equal(t.f.n, 1);
    expect_error(&t, 504, "looper_deadline");
    finish_test(&t);

    /* the run's own deadline, and the per-hop timeout (integrations.looper, 120 s) below it */
    prepare(&t, "[{model: small}, {model: mid}]", "{type: confidence, confidence: {escalation_order: declared,"
                                                      " threshold: 0.99}}");
    go(&t, REQ, 0, 0, 1000 + 500000);
    assert_int_equal(t.f.c[0].deadline, 1000 + 120000);
    t.f.now = 450000;
    answer(&t.f, 0, completion_lp("small-v1", "A-small", 1, 1, -2, 0));
    assert_int_equal(t.f.c[1].deadline, 1000 + 500000);
    finish_test(&t);

    /* the streamed final hop is not handed on after the deadline */
    start(&t, "[{model: small}]", "{type: remom, budget: {deadline: 2s}, remom: {breadth_schedule: [1]}}", 1);
    t.f.now = 3000;
    answer(&t.f, 0, completion("small-v1", "x", 1, 1));
    expect_error(&t, 504, "looper_deadline");
    finish_test(&t);

    /* round_timeout_seconds is the hop's timeout */
    start(&t, "[{model: small}]", "{type: remom, remom: {breadth_schedule: [1], round_timeout_seconds: 5}}", 0);
    assert_int_equal(t.f.c[0].deadline, 1000 + 5000);
    finish_test(&t);
}

/* Cancel with calls in flight: every handle cancelled once, done never called. */
static void test_cancel(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings}", 0);
    answer(&t.f, 1, completion("mid-v1", "A-mid", 1, 1));
    vsr_graph_cancel(t.run);
    assert_int_equal(t.f.cancels, 2);
    assert_int_equal(t.f.c[0].state, CANCELLED);
    assert_int_equal(t.f.c[2].state, CANCELLED);
    vsr_graph_cancel(t.run); /* idempotent */
    assert_int_equal(t.f.cancels, 2);
    assert_int_equal(t.f.done_calls, 0);
    t.run = NULL;
    finish_test(&t);

    /* in the middle of a ReMoM */
    start(&t, "[{model: small}, {model: mid}]",
          "{type: remom, remom: {breadth_schedule: [2, 2], model_distribution: round_robin}}", 0);
    answer_all(&t, "x");
    assert_int_equal(t.f.n, 4);
    answer(&t.f, 2, completion("small-v1", "y", 1, 1));
    vsr_graph_cancel(t.run);
    assert_int_equal(t.f.cancels, 1);
    assert_int_equal(t.f.c[3].state, CANCELLED);
    assert_int_equal(t.f.done_calls, 0);
    t.run = NULL;
    finish_test(&t);
}

/* Answers from inside call, for every call of every algorithm: the run ends
 * inside vsr_graph_start (VSR_OK, done not called). */
static void sync_answer(fake_t *f, size_t i)
{
    const char *content = "synchronous answer";
    if (strstr(f->c[i].body, "\\\"steps\\\"")) /* the planner */
        content = "{\"steps\":[{\"id\":\"s1\",\"prompt\":\"do\",\"models\":[\"mid\"]}]}";
    else if (strstr(f->c[i].body, "between 0 and 1"))
        content = "0.95";
    answer(f, i, completion_lp(f->c[i].model, content, 1, 1, -0.1, -3));
}

static void test_sync_every_call(void **state)
{
    (void)state;
    static const char *algos[] = {
        "{type: confidence, confidence: {threshold: 0.99}}",
        "{type: confidence, confidence: {confidence_method: self_verify, threshold: 0.99}}",
        "{type: ratings, ratings: {max_concurrent: 1}}",
        "{type: remom, remom: {breadth_schedule: [3, 2]}}",
        "{type: fusion}",
        "{type: workflows, workflows: {mode: dynamic}}",
        "{type: workflows, workflows: {roles: [{name: a, prompt: A}, {name: b, prompt: B, access_list: [a]}]}}",
    };
    static const size_t calls[] = {3, 6, 3, 6, 5, 3, 3};
    for (int stream = 0; stream < 2; stream++)
        for (size_t k = 0; k < VSR_ARRAY_LEN(algos); k++) {
            T t;
            prepare(&t, "[{model: small}, {model: mid}, {model: large}]", algos[k]);
            t.f.sync = sync_answer;
            go(&t, stream ? REQ_STREAM : REQ, stream, 0, 0);
            assert_int_equal(t.rc, VSR_OK);
            assert_int_equal(t.f.done_calls, 0);
            const vsr_graph_outcome_t *o = outcome(&t);
            /* the streamed final hop is not a port call */
            int final_hop = stream && k >= 3;
            assert_int_equal(t.f.n, calls[k] - (size_t)final_hop);
            assert_int_equal(o->iterations, calls[k]);
            assert_int_equal(o->status, final_hop ? 0 : 200);
            if (!final_hop)
                assert_true(has(out_body(&t), "synchronous answer"));
            t.run = NULL;
            finish_test(&t);
        }
}

/* Answers from inside call for the first calls only: a node whose every
 * call ended synchronously hands over once, even when the next node's call
 * stays in flight. */
static size_t sync_upto;

static void sync_first(fake_t *f, size_t i)
{
    if (i < sync_upto)
        answer(f, i, completion(f->c[i].model, "early", 1, 1));
}

static void test_sync_then_later(void **state)
{
    (void)state;
    T t;
    /* fusion: the panel at once, the analysis later */
    prepare(&t, "[{model: small}, {model: mid}]", "{type: fusion}");
    t.f.sync = sync_first;
    sync_upto = 2;
    go(&t, REQ, 0, 0, 0);
    assert_int_equal(t.rc, VSR_AGAIN);
    assert_int_equal(t.f.n, 3);
    assert_int_equal(t.f.in_flight, 1);
    answer(&t.f, 2, completion("small-v1", ANALYSIS, 1, 1));
    assert_int_equal(t.f.n, 4);
    answer(&t.f, 3, completion("small-v1", "FUSED", 1, 1));
    assert_int_equal(outcome(&t)->iterations, 4);
    assert_int_equal(t.f.done_calls, 1);
    finish_test(&t);

    /* remom: round 1 at once, round 2 later */
    prepare(&t, "[{model: small}, {model: mid}]",
            "{type: remom, remom: {breadth_schedule: [2, 2], model_distribution: round_robin}}");
    t.f.sync = sync_first;
    sync_upto = 2;
    go(&t, REQ, 0, 0, 0);
    assert_int_equal(t.rc, VSR_AGAIN);
    assert_int_equal(t.f.n, 4);
    answer_all(&t, "later");
    assert_int_equal(t.f.n, 5);
    answer_all(&t, "FINAL");
    assert_int_equal(outcome(&t)->iterations, 5);
    assert_string_equal(jget(out_body(&t), "choices.0.message.content"), "FINAL");
    finish_test(&t);

    /* ratings under max_concurrent 1: the first at once, the rest later */
    prepare(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings, ratings: {max_concurrent: 1}}");
    t.f.sync = sync_first;
    sync_upto = 1;
    go(&t, REQ, 0, 0, 0);
    assert_int_equal(t.f.n, 2);
    answer_all(&t, "b");
    answer_all(&t, "c");
    assert_int_equal(t.f.n, 3);
    assert_int_equal(jcount(out_body(&t), "choices"), 3);
    finish_test(&t);
}

/* A large answer passes whole; VSR_ERR_TOO_BIG from the port (the cap it
 * was given) is a failed call like any other. */
static void test_large_response(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}]", "{type: ratings}", 0);
    size_t n = 300000;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    big[n] = '\0';
    keep(big);
    answer(&t.f, 0, completion("small-v1", big, 1, 1));
    answer_raw(&t.f, 1, VSR_ERR_TOO_BIG, 0, NULL, 1);
    const char *b = out_body(&t);
    assert_string_equal(jget(b, "choices.0.message.content"), big);
    assert_int_equal(jcount(b, "choices"), 1);
    assert_int_equal(outcome(&t)->records[1].status, VSR_ERR_TOO_BIG);
    finish_test(&t);
}

/* A run keeps at most VSR_GRAPH_MAX_KEPT_BYTES of answers: three answers of
 * 30 MiB each, the third past the cap fails as too big, and the answer is
 * made of the two kept. */
static void test_kept_bytes_cap(void **state)
{
    (void)state;
    T t;
    start(&t, "[{model: small}, {model: mid}, {model: large}]", "{type: ratings}", 0);
    size_t n = (size_t)30 << 20;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    keep(big);
    for (int i = 0; i < 3; i++)
        answer(&t.f, (size_t)i, completion(i == 0 ? "small-v1" : i == 1 ? "mid-v2" : "large-v2", big, 1, 1));
    assert_int_equal(outcome(&t)->status, 200);
    assert_int_equal(jcount(out_body(&t), "choices"), 2);
    assert_int_equal(outcome(&t)->records[2].status, VSR_ERR_TOO_BIG);
    finish_test(&t);
}

/* More models than any fixed array: every answer is a choice, every panel
 * answer counts toward the quorum and reaches the judge; a flow runs as many
 * steps as max_steps allows. */
static void test_wide(void **state)
{
    (void)state;
    char refs[4096] = "[";
    size_t n = 70;
    for (size_t i = 0; i < n; i++)
        strcat(refs, i ? ", {model: small}" : "{model: small}");
    strcat(refs, "]");
    T t;
    start(&t, refs, "{type: ratings}", 0);
    assert_int_equal(t.f.n, n);
    answer_all(&t, "A");
    assert_int_equal(jcount(out_body(&t), "choices"), n);
    finish_test(&t);

    start(&t, refs, "{type: fusion, fusion: {analysis_mode: none}}", 0);
    assert_int_equal(t.f.n, n);
    answer_all(&t, "P");
    assert_int_equal(t.f.n, n + 1); /* the quorum (the panel size) is met */
    assert_true(has(jget(t.f.c[n].body, "messages.2.content"), "Response 70 (small)"));
    answer_all(&t, "FUSED");
    assert_int_equal(outcome(&t)->status, 200);
    finish_test(&t);

    char algo[4096];
    int len = snprintf(algo, sizeof(algo), "{type: workflows, workflows: {max_steps: 32, max_parallel: 32, roles: [");
    for (int i = 0; i < 32; i++)
        len += snprintf(algo + len, sizeof(algo) - (size_t)len, "%s{name: r%d, prompt: P%d}", i ? ", " : "", i, i);
    snprintf(algo + len, sizeof(algo) - (size_t)len, "]}}");
    start(&t, "[{model: small}]", algo, 0);
    assert_int_equal(t.f.n, 32);
    answer_all(&t, "OUT");
    assert_int_equal(t.f.n, 33);
    answer_all(&t, "FINAL");
    assert_int_equal(outcome(&t)->iterations, 33);
    finish_test(&t);
}

/* A body that is not a chat completion request is refused at start. */
static void test_bad_request(void **state)
{
    (void)state;
    T t;
    prepare(&t, "[{model: small}, {model: mid}]", "{type: ratings}");
    assert_int_equal(go(&t, "[1,2]", 0, 0, 0), VSR_ERR_INVALID);
    assert_non_null(t.why);
    assert_int_equal(t.f.n, 0);
    t.run = NULL;
    finish_test(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eligible),
        cmocka_unit_test(test_confidence_size),
        cmocka_unit_test(test_confidence_declared_default),
        cmocka_unit_test(test_confidence_cost_none_passing),
        cmocka_unit_test(test_confidence_margin_hybrid),
        cmocka_unit_test(test_confidence_missing_logprobs),
        cmocka_unit_test(test_confidence_on_error),
        cmocka_unit_test(test_confidence_self_verify),
        cmocka_unit_test(test_confidence_stream),
        cmocka_unit_test(test_confidence_token_filter),
        cmocka_unit_test(test_confidence_lora),
        cmocka_unit_test(test_ratings_concurrent),
        cmocka_unit_test(test_ratings_max_concurrent),
        cmocka_unit_test(test_ratings_errors),
        cmocka_unit_test(test_ratings_stream),
        cmocka_unit_test(test_remom_rounds),
        cmocka_unit_test(test_remom_distributions),
        cmocka_unit_test(test_remom_compaction),
        cmocka_unit_test(test_remom_final_failed),
        cmocka_unit_test(test_remom_knobs),
        cmocka_unit_test(test_remom_max_concurrent),
        cmocka_unit_test(test_remom_stream),
        cmocka_unit_test(test_fusion_separate),
        cmocka_unit_test(test_fusion_bad_analysis),
        cmocka_unit_test(test_fusion_modes),
        cmocka_unit_test(test_fusion_quorum),
        cmocka_unit_test(test_fusion_overrides),
        cmocka_unit_test(test_fusion_stream),
        cmocka_unit_test(test_workflows_static),
        cmocka_unit_test(test_workflows_dynamic),
        cmocka_unit_test(test_workflows_role_models),
        cmocka_unit_test(test_workflows_access),
        cmocka_unit_test(test_workflows_stream),
        cmocka_unit_test(test_budget_attempts),
        cmocka_unit_test(test_budget_parallel),
        cmocka_unit_test(test_implied_budget),
        cmocka_unit_test(test_budget_implied),
        cmocka_unit_test(test_byte_budget),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_sync_every_call),
        cmocka_unit_test(test_sync_then_later),
        cmocka_unit_test(test_large_response),
        cmocka_unit_test(test_kept_bytes_cap),
        cmocka_unit_test(test_wide),
        cmocka_unit_test(test_bad_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
