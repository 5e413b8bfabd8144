/* test_session_replay.c — the routing core's side of the router_replay
 * plugin with a fake replay_store port: one record per request, written when
 * the answer ended (or at finish when it never did), the id in
 * x-vsr-replay-id, bodies cut at max_body_bytes on a character boundary, the
 * answer kept as the client got it, a cut stream recorded as cut, the tool
 * trace bounded, fast_response recorded, and nothing without the plugin or
 * the port.  A second test file holds the store (test_replay_store.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "routing/routing.h"

static const char *DOC_FMT =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
    "providers:\n"
    "  defaults: {model: m}\n"
    "  models: [{name: m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}]\n"
    "routing:\n"
    "  signals: {keywords: [{name: k, keywords: [replayme]}, {name: f, keywords: [fastme]}]}\n"
    "  decisions:\n"
    "    - name: fast\n"
    "      priority: 20\n"
    "      rules: {type: keyword, name: f}\n"
    "      modelRefs: [{model: m}]\n"
    "      plugins: [{type: router_replay}, {type: fast_response, configuration: {message: quick}}]\n"
    "    - name: d\n"
    "      priority: 10\n"
    "      rules: {type: keyword, name: k}\n"
    "      modelRefs: [{model: m}]\n"
    "      plugins: [{type: router_replay, configuration: {max_records: 9, max_body_bytes: %d,\n"
    "                max_tool_trace_steps: 2}}]\n";

typedef struct {
    vsr_config_t *cfg;
    vsr_engine_t *engine;
} doc_t;

static void doc_init(doc_t *d, int max_body)
{
    char yaml[2048];
    snprintf(yaml, sizeof(yaml), DOC_FMT, max_body);
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    int rc = vsr_config_load_string("c.yaml", yaml, strlen(yaml), &d->cfg, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%.*s", (int)err.len, err.data);
    assert_int_equal(rc, VSR_OK);
    d->engine = vsr_engine_new(d->cfg, 1, &err);
    assert_non_null(d->engine);
    vsr_buf_free(&err);
}

static void doc_free(doc_t *d)
{
    vsr_engine_unref(d->engine);
    vsr_config_free(d->cfg);
}

/* ---- the fake port: keeps the last record ---- */

typedef struct {
    int writes;
    char id[64];
    uint64_t max_records;
    vsr_buf_t record, summary;
    vsr_json_t j;
    int parsed;
} fake_t;

static void fake_store(void *ud, const vsr_replay_record_t *r)
{
    fake_t *f = ud;
    f->writes++;
    snprintf(f->id, sizeof(f->id), "%.*s", (int)r->id.len, r->id.p);
    f->max_records = r->max_records;
    vsr_buf_reset(&f->record);
    vsr_buf_reset(&f->summary);
    vsr_buf_append(&f->record, r->record.p, r->record.len);
    vsr_buf_append(&f->summary, r->summary.p, r->summary.len);
}

static const vsr_ports_t ports = {.replay_store = fake_store};

static void fake_init(fake_t *f)
{
    memset(f, 0, sizeof(*f));
    vsr_buf_init(&f->record, 0);
    vsr_buf_init(&f->summary, 0);
}

static void fake_free(fake_t *f)
{
    if (f->parsed)
        vsr_json_free(&f->j);
    vsr_buf_free(&f->record);
    vsr_buf_free(&f->summary);
}

/* The record parses as JSON (both forms); the token of `path` ("a.b"). */
static uint32_t field(fake_t *f, const char *path)
{
    if (!f->parsed) {
        vsr_json_t sj;
        assert_int_equal(vsr_json_parse(&sj, f->summary.data, f->summary.len, NULL), VSR_OK);
        vsr_json_free(&sj);
        assert_int_equal(vsr_json_parse(&f->j, f->record.data, f->record.len, NULL), VSR_OK);
        f->parsed = 1;
    }
    uint32_t t = 0;
    char key[64];
    const char *p = path;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof(key), "%.*s", (int)n, p);
        if (vsr_json_object_get(&f->j, t, key, &t) != VSR_OK)
            return UINT32_MAX;
        p += n + (dot != NULL);
    }
    return t;
}

static vsr_slice_t raw(fake_t *f, const char *path)
{
    uint32_t t = field(f, path);
    assert_true(t != UINT32_MAX);
    return vsr_json_raw(&f->j, t);
}

static int is(fake_t *f, const char *path, const char *json)
{
    return vsr_slice_eq_cstr(raw(f, path), json);
}

static const char *header(const vsr_header_t *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (vsr_slice_case_eq_cstr(h[i].name, name))
            return h[i].value.p;
    return NULL;
}

static vsr_session_t *open_req(doc_t *d, fake_t *f, const char *body, const vsr_effect_t **eff, int with_port)
{
    vsr_session_opts_t o = {.listener = &d->cfg->listeners[0], .ports = with_port ? &ports : NULL, .ports_ud = f};
    vsr_session_t *s = vsr_session_open(d->engine, &o);
    vsr_header_t rid = {VSR_SLICE_LIT("x-request-id"), VSR_SLICE_LIT("req-7")};
    vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions?x=1"), &rid, 1);
    *eff = vsr_session_request_body(s, body, strlen(body));
    return s;
}

static const char *BODY = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"replayme please\"}]}";
static const char *ANSWER = "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
                            "{\"role\":\"assistant\",\"content\":\"fresh\"},\"finish_reason\":\"stop\"}]}";

/* the upstream's answer through the response phases: the head's effect */
static const vsr_effect_t *head(vsr_session_t *s, int status, const char *ctype)
{
    vsr_header_t ct = {VSR_SLICE_LIT("content-type"), vsr_slice_cstr(ctype)};
    return vsr_session_response_headers(s, status, &ct, 1);
}

static void test_upstream_answer_recorded_once(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, 4096);
    fake_t f;
    fake_init(&f);
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, BODY, &e, 1);
    assert_int_equal(vsr_session_plan(s)->kind, VSR_PLAN_CALL);
    e = head(s, 200, "application/json");
    assert_true(e->observe); /* relayed, and seen on the side */
    const char *id = header(e->set, e->n_set, "x-vsr-replay-id");
    assert_non_null(id);
    assert_int_equal(strlen(id), 35);
    assert_true(strncmp(id, "rr_", 3) == 0 && strspn(id + 3, "0123456789abcdef") == 32);
    size_t half = strlen(ANSWER) / 2;
    vsr_session_response_body(s, ANSWER, half, 0);
    vsr_session_response_body(s, ANSWER + half, strlen(ANSWER) - half, 0);
    assert_int_equal(f.writes, 0); /* not before the end */
    vsr_session_response_body(s, NULL, 0, VSR_BODY_END);
    assert_int_equal(f.writes, 1);
    vsr_session_finish(s); /* written already: not again */
    assert_int_equal(f.writes, 1);
    assert_true(strncmp(f.id, "rr_", 3) == 0);
    assert_int_equal(f.max_records, 9);
    assert_true(is(&f, "request_id", "\"req-7\""));
    assert_true(is(&f, "path", "\"/v1/chat/completions\""));
    assert_true(is(&f, "decision", "\"d\""));
    assert_true(is(&f, "selected_model", "\"m\""));
    assert_true(is(&f, "response_path", "\"upstream\""));
    assert_true(is(&f, "status", "200"));
    assert_true(is(&f, "streamed", "false") && is(&f, "cut", "false") && is(&f, "completed", "true"));
    assert_true(is(&f, "request.truncated", "false") && is(&f, "response.truncated", "false"));
    assert_non_null(strstr(f.record.data, "replayme please"));
    assert_non_null(strstr(f.record.data, "\\\"fresh\\\""));
    assert_non_null(strstr(f.record.data, "\"family\":\"keywords\",\"name\":\"k\""));
    assert_null(strstr(f.summary.data, "replayme please")); /* no bodies in the summary */
    assert_null(strstr(f.summary.data, "tool_trace"));
    fake_free(&f);
    doc_free(&d);
}

static void test_cut_and_abandoned_answers(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, 4096);
    fake_t f;
    fake_init(&f);
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, BODY, &e, 1);
    head(s, 200, "text/event-stream");
    vsr_session_response_body(s, "data: {}\n\n", 10, 0);
    vsr_session_response_body(s, NULL, 0, VSR_BODY_CUT);
    assert_int_equal(f.writes, 1);
    assert_true(is(&f, "streamed", "true") && is(&f, "cut", "true"));
    assert_true(is(&f, "response.body", "\"data: {}\\n\\n\""));
    vsr_session_finish(s);
    fake_free(&f);

    /* the client left mid-answer: written at finish, cut, not completed */
    fake_init(&f);
    s = open_req(&d, &f, BODY, &e, 1);
    head(s, 502, "application/json");
    vsr_session_response_body(s, "{", 1, 0);
    assert_int_equal(f.writes, 0);
    vsr_session_finish(s);
    assert_int_equal(f.writes, 1);
    assert_true(is(&f, "status", "502") && is(&f, "cut", "true") && is(&f, "completed", "false"));
    fake_free(&f);

    /* no answer at all (the client left while the call was on its way): status 0 */
    fake_init(&f);
    s = open_req(&d, &f, BODY, &e, 1);
    vsr_session_finish(s);
    assert_int_equal(f.writes, 1);
    assert_true(is(&f, "status", "0") && is(&f, "cut", "false") && is(&f, "completed", "false"));
    fake_free(&f);

    /* the adapter answered itself (no backend could be reached) */
    fake_init(&f);
    s = open_req(&d, &f, BODY, &e, 1);
    const char *id = vsr_session_local_reply(s, 503, VSR_SLICE_LIT("no healthy upstream"));
    assert_non_null(id);
    char kept[64];
    snprintf(kept, sizeof(kept), "%s", id); /* the session's: gone with it */
    assert_true(strncmp(kept, "rr_", 3) == 0);
    vsr_session_finish(s);
    assert_int_equal(f.writes, 1);
    assert_string_equal(f.id, kept);
    assert_true(is(&f, "status", "503") && is(&f, "response_path", "\"error\"") && is(&f, "completed", "true"));
    assert_true(is(&f, "response.body", "\"no healthy upstream\""));
    assert_null(vsr_session_local_reply(NULL, 503, VSR_SLICE_NULL));
    fake_free(&f);
    doc_free(&d);
}

static void test_bodies_cut_on_a_character(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, 40);
    fake_t f;
    fake_init(&f);
    /* byte 40 is the second half of the third "é" (bytes 35-36, 37-38, 39-40) */
    const char *body = "{\"model\":\"auto\",\"messages\":[{\"c\":\"x\xc3\xa9\xc3\xa9\xc3\xa9 replayme\",\"role\":\"user\","
                       "\"content\":\"replayme\"}]}";
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, body, &e, 1);
    head(s, 200, "application/json");
    vsr_session_response_body(s, ANSWER, strlen(ANSWER), 0);
    vsr_session_response_body(s, NULL, 0, VSR_BODY_END);
    vsr_session_finish(s);
    assert_true(is(&f, "request.truncated", "true") && is(&f, "response.truncated", "true"));
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t rb;
    assert_int_equal(vsr_json_string(&f.j, field(&f, "request.body"), &pool, &rb), VSR_OK);
    assert_int_equal(rb.len, 39);           /* 40 less the half character */
    assert_memory_equal(rb.p, body, 39);
    vsr_pool_free(&pool);
    char n[32];
    snprintf(n, sizeof(n), "%zu", strlen(body));
    assert_true(is(&f, "request.bytes", n));
    snprintf(n, sizeof(n), "%zu", strlen(ANSWER));
    assert_true(is(&f, "response.bytes", n));
    fake_free(&f);
    doc_free(&d);
}

static void test_tool_trace_bounded(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, 4096);
    fake_t f;
    fake_init(&f);
    const char *body =
        "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"replayme\"},"
        "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f1\","
        "\"arguments\":\"{}\"}},{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"f2\",\"arguments\":\"{}\"}},"
        "{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f3\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"1\"}]}";
    const vsr_effect_t *e;
    vsr_session_t *s = open_req(&d, &f, body, &e, 1);
    vsr_session_finish(s);
    assert_true(is(&f, "tool_trace.truncated", "true"));
    uint32_t steps = field(&f, "tool_trace.steps");
    assert_int_equal(f.j.toks[steps].count, 2); /* max_tool_trace_steps */
    assert_non_null(strstr(f.record.data, "{\"source\":\"request\",\"call\":{\"id\":\"a\""));
    assert_null(strstr(f.record.data, "\"name\":\"f3\""));
    fake_free(&f);
    doc_free(&d);
}

static void test_fast_response_and_no_plugin(void **state)
{
    (void)state;
    doc_t d;
    doc_init(&d, 4096);
    fake_t f;
    fake_init(&f);
    const vsr_effect_t *e;
    const char *fast = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"fastme\"}]}";
    vsr_session_t *s = open_req(&d, &f, fast, &e, 1);
    assert_int_equal(e->status, 200);
    assert_non_null(header(e->resp_headers, e->n_resp_headers, "x-vsr-replay-id"));
    assert_int_equal(f.writes, 1);
    assert_true(is(&f, "response_path", "\"fast_response\"") && is(&f, "decision", "\"fast\""));
    assert_non_null(strstr(f.record.data, "quick"));
    vsr_session_finish(s);
    assert_int_equal(f.writes, 1);
    fake_free(&f);

    /* a decision without the plugin, and a session without the port: nothing */
    fake_init(&f);
    const char *plain = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
    s = open_req(&d, &f, plain, &e, 1);
    e = head(s, 200, "application/json");
    assert_null(header(e->set, e->n_set, "x-vsr-replay-id"));
    assert_false(e->observe);
    vsr_session_finish(s);
    s = open_req(&d, &f, BODY, &e, 0);
    e = head(s, 200, "application/json");
    assert_null(header(e->set, e->n_set, "x-vsr-replay-id"));
    vsr_session_finish(s);
    assert_int_equal(f.writes, 0);
    fake_free(&f);
    doc_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upstream_answer_recorded_once),
        cmocka_unit_test(test_cut_and_abandoned_answers),
        cmocka_unit_test(test_bodies_cut_on_a_character),
        cmocka_unit_test(test_tool_trace_bounded),
        cmocka_unit_test(test_fast_response_and_no_plugin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
