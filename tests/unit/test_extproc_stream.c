/* test_extproc_stream.c — one ext_proc Process stream through a real
 * routing session, as Envoy drives it: the answers to each message (the
 * route's headers and body, the x-vsr-* surface, the body modes asked for,
 * translated bodies), immediate answers, a phase that waits on its ports
 * (the answer and the stream's end come after it), and the protocol's
 * errors (bad bytes, messages out of order, a stream cut inside a message). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <envoy/service/ext_proc/v3/external_processor.pb-c.h>

#include "extproc/extproc-int.h"
#include "extproc/extproc.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest preq_t;
typedef Envoy__Service__ExtProc__V3__ProcessingResponse presp_t;
typedef Envoy__Service__ExtProc__V3__HeaderMutation mut_t;

static const char *DOC =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
    "providers:\n"
    "  defaults: {model: m}\n"
    "  models: [{name: m, provider_model_id: up-m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}]\n"
    "routing:\n"
    "  signals: {keywords: [{name: k, keywords: [cacheme]}]}\n"
    "  decisions:\n"
    "    - name: d\n"
    "      rules: {type: keyword, name: k}\n"
    "      modelRefs: [{model: m}]\n"
    "      plugins: [{type: semantic-cache, configuration: {mode: exact, scope: global, ttl_seconds: 7}}]\n";

/* ---- the io: answers decoded as Envoy would ---- */

typedef struct {
    presp_t *answers[16];
    size_t n;
    int finished, status;
    char message[256];
    vsr_grpc_deframer_t df;
} peer_t;

static int on_answer(void *ud, const uint8_t *msg, size_t len, int *gs)
{
    (void)gs;
    peer_t *p = ud;
    presp_t *r = envoy__service__ext_proc__v3__processing_response__unpack(NULL, len, msg);
    assert_non_null(r);
    assert_true(p->n < 16);
    p->answers[p->n++] = r;
    return 0;
}

static void io_send(void *ud, const char *b, size_t n)
{
    peer_t *p = ud;
    assert_false(p->finished);
    int gs;
    assert_int_equal(vsr__grpc_deframe(&p->df, (const uint8_t *)b, n, on_answer, p, &gs), VSR_OK);
    assert_true(vsr__grpc_deframer_idle(&p->df)); /* whole messages only */
}

static void io_finish(void *ud, int status, const char *msg)
{
    peer_t *p = ud;
    assert_false(p->finished);
    p->finished = 1;
    p->status = status;
    snprintf(p->message, sizeof(p->message), "%s", msg ? msg : "");
}

static void peer_init(peer_t *p)
{
    memset(p, 0, sizeof(*p));
    vsr__grpc_deframer_init(&p->df, 0);
}

static void peer_free(peer_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        envoy__service__ext_proc__v3__processing_response__free_unpacked(p->answers[i], NULL);
    vsr__grpc_deframer_free(&p->df);
}

/* ---- fake ports: a cache whose lookups answer when told ---- */

typedef struct {
    vsr_cache_done_fn done;
    void *done_ud;
    int lookups, stores, cancels;
} fake_t;

static void *f_lookup(void *ud, const vsr_cache_query_t *q, vsr_cache_done_fn done, void *done_ud)
{
    (void)q;
    fake_t *f = ud;
    f->lookups++;
    f->done = done;
    f->done_ud = done_ud;
    return f;
}

static void f_cancel(void *ud, void *h)
{
    (void)h;
    fake_t *f = ud;
    f->cancels++;
    f->done = NULL;
}

static void f_store(void *ud, const vsr_cache_query_t *q, vsr_slice_t v)
{
    (void)q;
    (void)v;
    fake_t *f = ud;
    f->stores++;
}

static void f_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    (void)ud;
    (void)s;
    (void)eff;
    fail_msg("the stream must take the session's resume itself");
}

static const vsr_ports_t fake_ports = {
    .cache_lookup = f_lookup, .cache_cancel = f_cancel, .cache_store = f_store, .resume = f_resume};

/* ---- a stream ---- */

typedef struct {
    vsr_config_t *cfg;
    vsr_engine_t *engine;
    peer_t peer;
    fake_t fake;
    vsr_xp_stream_t *st;
} fx_t;

static int setup(void **state)
{
    fx_t *x = calloc(1, sizeof(*x));
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("c.yaml", DOC, strlen(DOC), &x->cfg, &err), VSR_OK);
    x->engine = vsr_engine_new(x->cfg, 1, &err);
    assert_non_null(x->engine);
    vsr_buf_free(&err);
    peer_init(&x->peer);
    vsr_xp_stream_opts_t o = {0};
    o.session.ports = &fake_ports;
    o.session.ports_ud = &x->fake;
    vsr_xp_io_t io = {.send = io_send, .finish = io_finish, .ud = &x->peer};
    x->st = vsr_xp_stream_open(x->engine, &o, &io);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    fx_t *x = *state;
    vsr_xp_stream_free(x->st);
    peer_free(&x->peer);
    vsr_engine_unref(x->engine);
    vsr_config_free(x->cfg);
    free(x);
    return 0;
}

/* ---- Envoy's messages ---- */

static void send_msg(fx_t *x, const preq_t *r, int want_rc)
{
    size_t n = envoy__service__ext_proc__v3__processing_request__get_packed_size(r);
    uint8_t *b = malloc(n + VSR_GRPC_PREFIX);
    b[0] = 0;
    b[1] = (uint8_t)(n >> 24);
    b[2] = (uint8_t)(n >> 16);
    b[3] = (uint8_t)(n >> 8);
    b[4] = (uint8_t)n;
    envoy__service__ext_proc__v3__processing_request__pack(r, b + VSR_GRPC_PREFIX);
    assert_int_equal(vsr_xp_stream_data(x->st, b, n + VSR_GRPC_PREFIX), want_rc);
    free(b);
}

static void send_headers(fx_t *x, int response, const char *const *kv, size_t n, int eos)
{
    Envoy__Config__Core__V3__HeaderValue hv[16], *hp[16];
    for (size_t i = 0; i < n; i++) {
        envoy__config__core__v3__header_value__init(&hv[i]);
        hv[i].key = (char *)kv[2 * i];
        hv[i].raw_value.data = (uint8_t *)kv[2 * i + 1];
        hv[i].raw_value.len = strlen(kv[2 * i + 1]);
        hp[i] = &hv[i];
    }
    Envoy__Config__Core__V3__HeaderMap map;
    envoy__config__core__v3__header_map__init(&map);
    map.headers = hp;
    map.n_headers = n;
    Envoy__Service__ExtProc__V3__HttpHeaders hh;
    envoy__service__ext_proc__v3__http_headers__init(&hh);
    hh.headers = &map;
    hh.end_of_stream = eos;
    preq_t r;
    envoy__service__ext_proc__v3__processing_request__init(&r);
    if (response) {
        r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS;
        r.response_headers = &hh;
    } else {
        r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS;
        r.request_headers = &hh;
    }
    send_msg(x, &r, VSR_OK);
}

static void send_body_rc(fx_t *x, int response, const char *body, int eos, int want_rc);

static void send_body(fx_t *x, int response, const char *body, int eos)
{
    send_body_rc(x, response, body, eos, VSR_OK);
}

static void send_body_rc(fx_t *x, int response, const char *body, int eos, int want_rc)
{
    Envoy__Service__ExtProc__V3__HttpBody hb;
    envoy__service__ext_proc__v3__http_body__init(&hb);
    hb.body.data = (uint8_t *)body;
    hb.body.len = strlen(body);
    hb.end_of_stream = eos;
    preq_t r;
    envoy__service__ext_proc__v3__processing_request__init(&r);
    if (response) {
        r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY;
        r.response_body = &hb;
    } else {
        r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY;
        r.request_body = &hb;
    }
    send_msg(x, &r, want_rc);
}

static const Envoy__Service__ExtProc__V3__CommonResponse *common(const presp_t *r)
{
    if (r->response_case == ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE)
        fprintf(stderr, "immediate %d: %.*s\n", (int)r->immediate_response->status->code,
                (int)r->immediate_response->body.len, (const char *)r->immediate_response->body.data);
    switch (r->response_case) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS:
        return r->request_headers->response;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS:
        return r->response_headers->response;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY:
        return r->request_body->response;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY:
        return r->response_body->response;
    default:
        fail_msg("not a headers or body answer: %d", r->response_case);
        return NULL;
    }
}

static const char *set_value(const mut_t *m, const char *name, char *buf, size_t cap)
{
    for (size_t i = 0; m && i < m->n_set_headers; i++)
        if (strcmp(m->set_headers[i]->header->key, name) == 0) {
            size_t n = m->set_headers[i]->header->raw_value.len;
            n = n < cap - 1 ? n : cap - 1;
            memcpy(buf, m->set_headers[i]->header->raw_value.data, n);
            buf[n] = 0;
            return buf;
        }
    return NULL;
}

static int removes(const mut_t *m, const char *name)
{
    for (size_t i = 0; m && i < m->n_remove_headers; i++)
        if (strcmp(m->remove_headers[i], name) == 0)
            return 1;
    return 0;
}

static const char *const CHAT_REQ[] = {":method", "POST", ":path", "/v1/chat/completions", ":authority", "vsr",
                                       "content-type", "application/json", "authorization", "Bearer client"};
static const char *CHAT_BODY = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";

/* ---- tests ---- */

static void test_chat_round_trip(void **state)
{
    fx_t *x = *state;
    char v[256];
    send_headers(x, 0, CHAT_REQ, 5, 0);
    assert_int_equal(x->peer.n, 1);
    assert_int_equal(x->peer.answers[0]->response_case,
                     ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS);
    send_body(x, 0, CHAT_BODY, 1);
    assert_int_equal(x->peer.n, 2);
    const Envoy__Service__ExtProc__V3__CommonResponse *c = common(x->peer.answers[1]);
    assert_int_equal(x->peer.answers[1]->response_case,
                     ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY);
    /* the route, the provider's id in the body, the client's key gone */
    assert_string_equal(set_value(c->header_mutation, "x-selected-model", v, sizeof(v)), "m");
    assert_true(removes(c->header_mutation, "authorization"));
    assert_non_null(c->body_mutation);
    char body[512];
    snprintf(body, sizeof(body), "%.*s", (int)c->body_mutation->body.len, (const char *)c->body_mutation->body.data);
    assert_non_null(strstr(body, "\"model\":\"up-m\""));
    snprintf(v, sizeof(v), "%zu", c->body_mutation->body.len);
    char len[32];
    assert_string_equal(set_value(c->header_mutation, "content-length", len, sizeof(len)), v);
    /* the answer: the x-vsr surface; the body goes as it is (no override needs it) */
    static const char *const resp[] = {":status", "200", "content-type", "application/json", "content-length", "20"};
    send_headers(x, 1, resp, 3, 0);
    assert_int_equal(x->peer.n, 3);
    c = common(x->peer.answers[2]);
    assert_string_equal(set_value(c->header_mutation, "x-vsr-selected-model", v, sizeof(v)), "m");
    assert_string_equal(set_value(c->header_mutation, "x-vsr-response-path", v, sizeof(v)), "upstream");
    assert_false(removes(c->header_mutation, "content-length"));
    assert_false(c->clear_route_cache);
    assert_non_null(x->peer.answers[2]->mode_override);
    assert_int_equal(x->peer.answers[2]->mode_override->response_body_mode,
                     ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__NONE);
    assert_false(x->peer.finished);
    vsr_xp_stream_end(x->st);
    assert_true(x->peer.finished);
    assert_int_equal(x->peer.status, VSR_GRPC_OK);
    assert_int_equal(x->fake.lookups, 0); /* the cache's decision did not match */
}

static void test_immediate_answers(void **state)
{
    fx_t *x = *state;
    static const char *const models[] = {":method", "GET", ":path", "/v1/models"};
    send_headers(x, 0, models, 2, 1);
    assert_int_equal(x->peer.n, 1);
    const presp_t *r = x->peer.answers[0];
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    assert_int_equal(r->immediate_response->status->code, 200);
    assert_non_null(strstr((const char *)r->immediate_response->body.data, "\"object\":\"list\""));
    /* nothing more is expected; Envoy's end finishes the stream */
    vsr_xp_stream_end(x->st);
    assert_int_equal(x->peer.status, VSR_GRPC_OK);
}

static void test_unknown_model_is_a_400(void **state)
{
    fx_t *x = *state;
    send_headers(x, 0, CHAT_REQ, 4, 0);
    send_body(x, 0, "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 1);
    assert_int_equal(x->peer.n, 2);
    const presp_t *r = x->peer.answers[1];
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    assert_int_equal(r->immediate_response->status->code, 400);
    assert_non_null(strstr((const char *)r->immediate_response->body.data, "is not available"));
}

static void test_messages_ingress_translated_both_ways(void **state)
{
    fx_t *x = *state;
    static const char *const req[] = {":method", "POST", ":path", "/v1/messages", "content-type", "application/json",
                                      "x-api-key", "sk-client"};
    send_headers(x, 0, req, 4, 0);
    send_body(x, 0, "{\"model\":\"m\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 1);
    assert_int_equal(x->peer.n, 2);
    const Envoy__Service__ExtProc__V3__CommonResponse *c = common(x->peer.answers[1]);
    char v[256];
    assert_string_equal(set_value(c->header_mutation, ":path", v, sizeof(v)), "/v1/chat/completions");
    assert_non_null(c->body_mutation);
    /* the chat backend's JSON answer: BUFFERED, translated to a Messages answer */
    static const char *const resp[] = {":status", "200", "content-type", "application/json", "content-length", "200"};
    send_headers(x, 1, resp, 3, 0);
    assert_int_equal(x->peer.n, 3);
    c = common(x->peer.answers[2]);
    assert_true(removes(c->header_mutation, "content-length"));
    assert_int_equal(x->peer.answers[2]->mode_override->response_body_mode,
                     ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__BUFFERED);
    send_body(x, 1,
              "{\"id\":\"c1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"up-m\",\"choices\":[{\"index\":0,"
              "\"message\":{\"role\":\"assistant\",\"content\":\"Rivers carve the land.\"},\"finish_reason\":\"stop\"}],"
              "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}",
              1);
    assert_int_equal(x->peer.n, 4);
    c = common(x->peer.answers[3]);
    assert_non_null(c->body_mutation);
    char body[1024];
    snprintf(body, sizeof(body), "%.*s", (int)c->body_mutation->body.len, (const char *)c->body_mutation->body.data);
    assert_non_null(strstr(body, "\"type\":\"message\""));
    assert_non_null(strstr(body, "Rivers carve the land."));
    assert_non_null(strstr(body, "\"output_tokens\":5"));
}

static void test_stream_translated_chunk_by_chunk(void **state)
{
    fx_t *x = *state;
    static const char *const req[] = {":method", "POST", ":path", "/v1/messages", "content-type", "application/json"};
    send_headers(x, 0, req, 3, 0);
    send_body(x, 0,
              "{\"model\":\"m\",\"max_tokens\":16,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
              1);
    static const char *const resp[] = {":status", "200", "content-type", "text/event-stream"};
    send_headers(x, 1, resp, 2, 0);
    assert_int_equal(x->peer.answers[2]->mode_override->response_body_mode,
                     ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__STREAMED);
    send_body(x, 1,
              "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up-m\",\"choices\":"
              "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n",
              0);
    assert_int_equal(x->peer.n, 4);
    const Envoy__Service__ExtProc__V3__CommonResponse *c = common(x->peer.answers[3]);
    assert_non_null(c->body_mutation);
    char body[2048];
    snprintf(body, sizeof(body), "%.*s", (int)c->body_mutation->body.len, (const char *)c->body_mutation->body.data);
    assert_non_null(strstr(body, "event: message_start"));
    assert_non_null(strstr(body, "Hel"));
    assert_null(strstr(body, "message_stop"));
    send_body(x, 1,
              "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up-m\",\"choices\":"
              "[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
              1);
    assert_int_equal(x->peer.n, 5);
    c = common(x->peer.answers[4]);
    snprintf(body, sizeof(body), "%.*s", (int)c->body_mutation->body.len, (const char *)c->body_mutation->body.data);
    assert_non_null(strstr(body, "event: message_stop"));
    assert_null(strstr(body, "[DONE]"));
}

static void test_pending_phase_orders_answers(void **state)
{
    fx_t *x = *state;
    send_headers(x, 0, CHAT_REQ, 4, 0);
    send_body(x, 0, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"please cacheme\"}]}", 1);
    /* the cache lookup waits: no answer yet, and Envoy's end waits too */
    assert_int_equal(x->fake.lookups, 1);
    assert_int_equal(x->peer.n, 1);
    vsr_xp_stream_end(x->st);
    assert_false(x->peer.finished);
    x->fake.done(x->fake.done_ud, VSR_ERR_NOT_FOUND, VSR_SLICE_NULL, 0); /* a miss */
    assert_int_equal(x->peer.n, 2);
    char v[64];
    assert_string_equal(set_value(common(x->peer.answers[1])->header_mutation, "x-selected-model", v, sizeof(v)), "m");
    assert_true(x->peer.finished);
    assert_int_equal(x->peer.status, VSR_GRPC_OK);
}

static void test_cancel_while_pending(void **state)
{
    fx_t *x = *state;
    send_headers(x, 0, CHAT_REQ, 4, 0);
    send_body(x, 0, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"cacheme\"}]}", 1);
    assert_int_equal(x->fake.lookups, 1);
    vsr_xp_stream_cancel(x->st);
    assert_int_equal(x->fake.cancels, 1); /* the session's wait is cancelled; no io follows */
    assert_false(x->peer.finished);
    assert_int_equal(x->peer.n, 1);
}

static void test_protocol_errors(void **state)
{
    fx_t *x = *state;
    /* a response body before anything */
    send_body_rc(x, 1, "x", 0, VSR_ERR);
    assert_true(x->peer.finished);
    assert_int_equal(x->peer.status, VSR_GRPC_FAILED_PRECONDITION);
    assert_int_equal(x->peer.n, 0);
    /* fed after the end: ignored */
    static const uint8_t junk[] = {0, 0, 0, 0, 2, 0x12, 0x40};
    assert_int_equal(vsr_xp_stream_data(x->st, junk, sizeof(junk)), VSR_ERR);
}

static void test_bad_bytes_and_cut_stream(void **state)
{
    fx_t *x = *state;
    static const uint8_t junk[] = {0, 0, 0, 0, 2, 0x12, 0x40};
    assert_int_equal(vsr_xp_stream_data(x->st, junk, sizeof(junk)), VSR_ERR);
    assert_int_equal(x->peer.status, VSR_GRPC_INVALID_ARGUMENT);
    /* another stream: ended inside a message */
    fx_t *y = *state;
    vsr_xp_stream_free(y->st);
    peer_free(&y->peer);
    peer_init(&y->peer);
    vsr_xp_stream_opts_t o = {0};
    vsr_xp_io_t io = {.send = io_send, .finish = io_finish, .ud = &y->peer};
    y->st = vsr_xp_stream_open(y->engine, &o, &io);
    static const uint8_t half[] = {0, 0, 0, 0, 9, 0x12};
    assert_int_equal(vsr_xp_stream_data(y->st, half, sizeof(half)), VSR_OK);
    vsr_xp_stream_end(y->st);
    assert_true(y->peer.finished);
    assert_int_equal(y->peer.status, VSR_GRPC_INVALID_ARGUMENT);
}

static void test_streamed_request_body_refused(void **state)
{
    fx_t *x = *state;
    send_headers(x, 0, CHAT_REQ, 4, 0);
    send_body(x, 0, "{\"model\":", 0);
    assert_int_equal(x->peer.n, 2);
    const presp_t *r = x->peer.answers[1];
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    assert_int_equal(r->immediate_response->status->code, 500);
    assert_non_null(strstr((const char *)r->immediate_response->body.data, "BUFFERED"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chat_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_immediate_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_model_is_a_400, setup, teardown),
        cmocka_unit_test_setup_teardown(test_messages_ingress_translated_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_translated_chunk_by_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_phase_orders_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_while_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_protocol_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_bytes_and_cut_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_streamed_request_body_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
