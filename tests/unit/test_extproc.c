/* test_extproc.c — the ext_proc adapter's codec and gRPC framing: messages
 * built the way Envoy builds them (protobuf-c from proto/) decode to the
 * phase inputs; Effects encode to the answers Envoy applies, with the
 * standalone adapter's rules (removals before sets, raw_value, append false,
 * protected names skipped, the five x-envoy headers allowed, content-length
 * with a replaced body, clear_route_cache on the request path only,
 * immediate answers); deframing split at every byte; the limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <envoy/service/ext_proc/v3/external_processor.pb-c.h>

#include "extproc/extproc-int.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest preq_t;
typedef Envoy__Service__ExtProc__V3__ProcessingResponse presp_t;
typedef Envoy__Config__Core__V3__HeaderValue hv_t;
typedef Envoy__Config__Core__V3__HeaderValueOption hvo_t;
typedef Envoy__Service__ExtProc__V3__HeaderMutation mut_t;

/* ---- building requests as Envoy does ---- */

static size_t pack_headers_request(uint8_t *out, size_t cap, int response, const char *const *kv, size_t n,
                                   int eos, int use_value_field)
{
    hv_t *hv = calloc(n, sizeof(*hv));
    hv_t **hp = calloc(n, sizeof(*hp));
    for (size_t i = 0; i < n; i++) {
        envoy__config__core__v3__header_value__init(&hv[i]);
        hv[i].key = (char *)kv[2 * i];
        if (use_value_field) {
            hv[i].value = (char *)kv[2 * i + 1];
        } else {
            hv[i].raw_value.data = (uint8_t *)kv[2 * i + 1];
            hv[i].raw_value.len = strlen(kv[2 * i + 1]);
        }
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
    Envoy__Service__ExtProc__V3__ProtocolConfiguration pc;
    envoy__service__ext_proc__v3__protocol_configuration__init(&pc);
    if (response) {
        r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS;
        r.response_headers = &hh;
    } else {
        r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS;
        r.request_headers = &hh;
        pc.request_body_mode = ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__BUFFERED;
        pc.response_body_mode = ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__NONE;
        r.protocol_config = &pc;
    }
    size_t len = envoy__service__ext_proc__v3__processing_request__get_packed_size(&r);
    assert_true(len <= cap);
    envoy__service__ext_proc__v3__processing_request__pack(&r, out);
    free(hv);
    free(hp);
    return len;
}

static size_t pack_body_request(uint8_t *out, size_t cap, int response, const char *body, size_t n, int eos)
{
    Envoy__Service__ExtProc__V3__HttpBody hb;
    envoy__service__ext_proc__v3__http_body__init(&hb);
    hb.body.data = (uint8_t *)body;
    hb.body.len = n;
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
    size_t len = envoy__service__ext_proc__v3__processing_request__get_packed_size(&r);
    assert_true(len <= cap);
    envoy__service__ext_proc__v3__processing_request__pack(&r, out);
    return len;
}

static int slice_is(vsr_slice_t s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.p, want, s.len) == 0;
}

static void test_decode_request_headers(void **state)
{
    (void)state;
    static const char *const kv[] = {":method", "POST", ":path", "/v1/chat/completions", ":authority", "vsr",
                                     "content-type", "application/json", "x-odd", "a\x01z"};
    uint8_t buf[1024];
    size_t n = pack_headers_request(buf, sizeof(buf), 0, kv, 5, 0, 0);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_xp_message_t m;
    const char *why = NULL;
    assert_int_equal(vsr__xp_decode(buf, n, &pool, &m, &why), VSR_OK);
    assert_int_equal(m.kind, VSR_XP_REQUEST_HEADERS);
    assert_int_equal(m.n_headers, 5);
    assert_false(m.end_of_stream);
    assert_true(slice_is(m.headers[1].name, ":path"));
    assert_true(slice_is(m.headers[1].value, "/v1/chat/completions"));
    assert_true(slice_is(m.headers[4].value, "a\x01z")); /* bytes, as raw_value carries them */
    assert_true(m.has_protocol_config);
    assert_int_equal(m.request_body_mode, VSR_XP_BODY_BUFFERED);
    assert_int_equal(m.response_body_mode, VSR_XP_BODY_NONE);
    vsr_slice_t v;
    assert_true(vsr__xp_header(&m, "Content-Type", &v));
    assert_true(slice_is(v, "application/json"));
    assert_false(vsr__xp_header(&m, "x-missing", &v));
    /* an older Envoy puts values in `value` */
    n = pack_headers_request(buf, sizeof(buf), 1, (const char *const[]){":status", "200"}, 1, 1, 1);
    vsr_pool_clear(&pool);
    assert_int_equal(vsr__xp_decode(buf, n, &pool, &m, &why), VSR_OK);
    assert_int_equal(m.kind, VSR_XP_RESPONSE_HEADERS);
    assert_true(m.end_of_stream);
    assert_false(m.has_protocol_config);
    assert_true(slice_is(m.headers[0].value, "200"));
    vsr_pool_free(&pool);
}

static void test_decode_bodies_and_unknown_fields(void **state)
{
    (void)state;
    uint8_t buf[256];
    size_t n = pack_body_request(buf, sizeof(buf) - 32, 0, "{\"a\":1}", 7, 1);
    /* fields vsr does not declare (8 metadata_context, 9 attributes; a
     * future 15) are skipped: tag 8 length-delimited, tag 15 varint */
    static const uint8_t extra[] = {0x42, 0x02, 0x0a, 0x00, 0x78, 0x01};
    memcpy(buf + n, extra, sizeof(extra));
    n += sizeof(extra);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_xp_message_t m;
    const char *why = NULL;
    assert_int_equal(vsr__xp_decode(buf, n, &pool, &m, &why), VSR_OK);
    assert_int_equal(m.kind, VSR_XP_REQUEST_BODY);
    assert_true(slice_is(m.body, "{\"a\":1}"));
    assert_true(m.end_of_stream);
    n = pack_body_request(buf, sizeof(buf), 1, "", 0, 0);
    assert_int_equal(vsr__xp_decode(buf, n, &pool, &m, &why), VSR_OK);
    assert_int_equal(m.kind, VSR_XP_RESPONSE_BODY);
    assert_int_equal(m.body.len, 0);
    assert_false(m.end_of_stream);
    /* no part set: decodes, as NONE (the server refuses it) */
    assert_int_equal(vsr__xp_decode((const uint8_t *)"", 0, &pool, &m, &why), VSR_OK);
    assert_int_equal(m.kind, VSR_XP_NONE);
    /* not protobuf: a truncated length-delimited field */
    static const uint8_t bad[] = {0x12, 0x40, 0x0a};
    assert_int_equal(vsr__xp_decode(bad, sizeof(bad), &pool, &m, &why), VSR_ERR_INVALID);
    assert_non_null(why);
    vsr_pool_free(&pool);
}

static void test_decode_limits(void **state)
{
    (void)state;
    size_t n = VSR_XP_MAX_HEADERS + 1;
    const char **kv = calloc(2 * n, sizeof(*kv));
    for (size_t i = 0; i < n; i++) {
        kv[2 * i] = "x-h";
        kv[2 * i + 1] = "v";
    }
    size_t cap = 16 * n + 64;
    uint8_t *buf = malloc(cap);
    size_t len = pack_headers_request(buf, cap, 0, kv, n, 1, 0);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_xp_message_t m;
    const char *why = NULL;
    assert_int_equal(vsr__xp_decode(buf, len, &pool, &m, &why), VSR_ERR_INVALID);
    assert_string_equal(why, "too many headers");
    /* a header without a name */
    len = pack_headers_request(buf, cap, 0, (const char *const[]){"", "v"}, 1, 1, 0);
    assert_int_equal(vsr__xp_decode(buf, len, &pool, &m, &why), VSR_ERR_INVALID);
    vsr_pool_free(&pool);
    free(buf);
    free(kv);
}

/* ---- answers ---- */

static presp_t *unpack(const vsr_buf_t *b)
{
    presp_t *r = envoy__service__ext_proc__v3__processing_response__unpack(NULL, b->len, (const uint8_t *)b->data);
    assert_non_null(r);
    return r;
}

static const hvo_t *find_set(const mut_t *m, const char *name, size_t *index)
{
    for (size_t i = 0; m && i < m->n_set_headers; i++)
        if (strcmp(m->set_headers[i]->header->key, name) == 0) {
            if (index)
                *index = i;
            return m->set_headers[i];
        }
    return NULL;
}

static int raw_is(const hvo_t *o, const char *want)
{
    return o && o->header->raw_value.len == strlen(want) &&
           memcmp(o->header->raw_value.data, want, o->header->raw_value.len) == 0 &&
           (o->header->value == NULL || o->header->value[0] == '\0');
}

static void test_encode_request_body_effect(void **state)
{
    (void)state;
    vsr_slice_t removes[] = {VSR_SLICE_LIT("authorization"), VSR_SLICE_LIT(":authority"), VSR_SLICE_LIT("host")};
    vsr_header_t sets[] = {
        {VSR_SLICE_LIT("x-selected-model"), VSR_SLICE_LIT("qwen")},
        {VSR_SLICE_LIT("Authorization"), VSR_SLICE_LIT("Bearer sk-up")},
        {VSR_SLICE_LIT("host"), VSR_SLICE_LIT("evil")},
        {VSR_SLICE_LIT(":authority"), VSR_SLICE_LIT("evil")},
        {VSR_SLICE_LIT("x-envoy-internal"), VSR_SLICE_LIT("true")},
        {VSR_SLICE_LIT("x-envoy-max-retries"), VSR_SLICE_LIT("2")},
        {VSR_SLICE_LIT("content-length"), VSR_SLICE_LIT("999")},
    };
    vsr_slice_t pieces[] = {VSR_SLICE_LIT("{\"model\":"), VSR_SLICE_LIT("\"qwen\"}")};
    vsr_effect_t eff = {0};
    eff.remove = removes;
    eff.n_remove = VSR_ARRAY_LEN(removes);
    eff.set = sets;
    eff.n_set = VSR_ARRAY_LEN(sets);
    eff.body_replaced = 1;
    eff.body = pieces;
    eff.n_body = 2;
    eff.body_len = 16;
    eff.clear_route_cache = 1;
    eff.path = VSR_SLICE_LIT("/v1/messages");
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    assert_int_equal(vsr__xp_encode(VSR_XP_REQUEST_BODY, &eff, NULL, &out), VSR_OK);
    presp_t *r = unpack(&out);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY);
    const Envoy__Service__ExtProc__V3__CommonResponse *c = r->request_body->response;
    assert_int_equal(c->status, ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__RESPONSE_STATUS__CONTINUE);
    assert_true(c->clear_route_cache);
    const mut_t *m = c->header_mutation;
    assert_non_null(m);
    /* removals: only what Envoy would honour */
    assert_int_equal(m->n_remove_headers, 1);
    assert_string_equal(m->remove_headers[0], "authorization");
    /* sets: raw_value, append false, names lower case; protected ones skipped */
    size_t i_model, i_auth;
    assert_true(raw_is(find_set(m, "x-selected-model", &i_model), "qwen"));
    assert_true(raw_is(find_set(m, "authorization", &i_auth), "Bearer sk-up"));
    assert_true(i_model < i_auth); /* in the effect's order */
    assert_null(find_set(m, "host", NULL));
    assert_null(find_set(m, ":authority", NULL));
    assert_null(find_set(m, "x-envoy-internal", NULL));
    assert_true(raw_is(find_set(m, "x-envoy-max-retries", NULL), "2"));
    assert_true(raw_is(find_set(m, ":path", NULL), "/v1/messages"));
    for (size_t i = 0; i < m->n_set_headers; i++) {
        assert_non_null(m->set_headers[i]->append);
        assert_false(m->set_headers[i]->append->value);
    }
    /* the body and its own length (the effect's stale one dropped) */
    assert_true(raw_is(find_set(m, "content-length", NULL), "16"));
    size_t n_len = 0;
    for (size_t i = 0; i < m->n_set_headers; i++)
        n_len += strcmp(m->set_headers[i]->header->key, "content-length") == 0;
    assert_int_equal(n_len, 1);
    assert_int_equal(c->body_mutation->mutation_case, ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_BODY);
    assert_int_equal(c->body_mutation->body.len, 16);
    assert_memory_equal(c->body_mutation->body.data, "{\"model\":\"qwen\"}", 16);
    assert_null(r->mode_override);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    vsr_buf_free(&out);
}

static void test_encode_headers_answers(void **state)
{
    (void)state;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    /* an empty CONTINUE */
    assert_int_equal(vsr__xp_encode(VSR_XP_REQUEST_HEADERS, NULL, NULL, &out), VSR_OK);
    presp_t *r = unpack(&out);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS);
    assert_null(r->request_headers->response->header_mutation);
    assert_false(r->request_headers->response->clear_route_cache);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    /* response headers: x-vsr-* sets, a streamed body asked for; no
     * clear_route_cache on the response path */
    vsr_header_t sets[] = {{VSR_SLICE_LIT("x-vsr-selected-model"), VSR_SLICE_LIT("qwen")}};
    vsr_effect_t eff = {0};
    eff.set = sets;
    eff.n_set = 1;
    eff.clear_route_cache = 1;
    vsr_xp_mode_t mode = {.set = 1, .request_body_mode = VSR_XP_BODY_NONE, .response_body_mode = VSR_XP_BODY_STREAMED};
    vsr_buf_reset(&out);
    assert_int_equal(vsr__xp_encode(VSR_XP_RESPONSE_HEADERS, &eff, &mode, &out), VSR_OK);
    r = unpack(&out);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS);
    assert_false(r->response_headers->response->clear_route_cache);
    assert_true(raw_is(find_set(r->response_headers->response->header_mutation, "x-vsr-selected-model", NULL), "qwen"));
    assert_non_null(r->mode_override);
    assert_int_equal(r->mode_override->response_body_mode,
                     ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__STREAMED);
    assert_int_equal(r->mode_override->request_body_mode,
                     ENVOY__EXTENSIONS__FILTERS__HTTP__EXT_PROC__V3__PROCESSING_MODE__BODY_SEND_MODE__NONE);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    /* a body given on a headers answer: CONTINUE_AND_REPLACE */
    vsr_slice_t piece = VSR_SLICE_LIT("{}");
    vsr_effect_t rep = {0};
    rep.body_replaced = 1;
    rep.body = &piece;
    rep.n_body = 1;
    rep.body_len = 2;
    vsr_buf_reset(&out);
    assert_int_equal(vsr__xp_encode(VSR_XP_REQUEST_HEADERS, &rep, NULL, &out), VSR_OK);
    r = unpack(&out);
    assert_int_equal(r->request_headers->response->status,
                     ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__RESPONSE_STATUS__CONTINUE_AND_REPLACE);
    assert_int_equal(r->request_headers->response->body_mutation->body.len, 2);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    /* a mode override is only ever on a headers answer */
    vsr_buf_reset(&out);
    assert_int_equal(vsr__xp_encode(VSR_XP_RESPONSE_BODY, NULL, &mode, &out), VSR_OK);
    r = unpack(&out);
    assert_null(r->mode_override);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    vsr_buf_free(&out);
}

static void test_encode_stream_chunk_and_trailers(void **state)
{
    (void)state;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    /* a streamed chunk translated to nothing: the chunk is cleared */
    vsr_effect_t eff = {0};
    eff.body_replaced = 1;
    assert_int_equal(vsr__xp_encode(VSR_XP_RESPONSE_BODY, &eff, NULL, &out), VSR_OK);
    presp_t *r = unpack(&out);
    assert_int_equal(r->response_body->response->body_mutation->mutation_case,
                     ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_CLEAR_BODY);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    /* trailers take no body */
    assert_int_equal(vsr__xp_encode(VSR_XP_RESPONSE_TRAILERS, &eff, NULL, &out), VSR_ERR_INVALID);
    vsr_buf_reset(&out);
    assert_int_equal(vsr__xp_encode(VSR_XP_REQUEST_TRAILERS, NULL, NULL, &out), VSR_OK);
    r = unpack(&out);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    assert_int_equal(vsr__xp_encode(VSR_XP_NONE, NULL, NULL, &out), VSR_ERR_INVALID);
    /* the buffer's cap */
    vsr_buf_t small;
    vsr_buf_init(&small, 4);
    vsr_slice_t piece = VSR_SLICE_LIT("0123456789");
    vsr_effect_t big = {0};
    big.body_replaced = 1;
    big.body = &piece;
    big.n_body = 1;
    big.body_len = 10;
    assert_int_equal(vsr__xp_encode(VSR_XP_REQUEST_BODY, &big, NULL, &small), VSR_ERR_TOO_BIG);
    vsr_buf_free(&small);
    vsr_buf_free(&out);
}

static void test_encode_immediate(void **state)
{
    (void)state;
    vsr_header_t h[] = {{VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json")},
                        {VSR_SLICE_LIT("content-length"), VSR_SLICE_LIT("2")},
                        {VSR_SLICE_LIT("x-vsr-response-path"), VSR_SLICE_LIT("error")}};
    vsr_effect_t eff = {0};
    eff.status = 404;
    eff.resp_headers = h;
    eff.n_resp_headers = 3;
    eff.resp_body = VSR_SLICE_LIT("{}");
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    assert_int_equal(vsr__xp_encode(VSR_XP_REQUEST_HEADERS, &eff, NULL, &out), VSR_OK);
    presp_t *r = unpack(&out);
    assert_int_equal(r->response_case, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    const Envoy__Service__ExtProc__V3__ImmediateResponse *im = r->immediate_response;
    assert_int_equal(im->status->code, 404);
    assert_int_equal(im->body.len, 2);
    assert_true(raw_is(find_set(im->headers, "content-type", NULL), "application/json"));
    assert_true(raw_is(find_set(im->headers, "x-vsr-response-path", NULL), "error"));
    assert_null(find_set(im->headers, "content-length", NULL)); /* Envoy sets the body's own */
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    vsr_buf_reset(&out);
    assert_int_equal(vsr__xp_encode_immediate(503, VSR_SLICE_LIT("text/plain"), VSR_SLICE_LIT("no healthy upstream"),
                                              VSR_SLICE_LIT("vsr_unavailable"), &out),
                     VSR_OK);
    r = unpack(&out);
    assert_int_equal(r->immediate_response->status->code, 503);
    assert_string_equal(r->immediate_response->details, "vsr_unavailable");
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    vsr_buf_free(&out);
}

/* ---- gRPC framing ---- */

typedef struct {
    vsr_buf_t got; /* "<len>:<bytes>|" per message */
    int fail_at;
    int n;
} frames_t;

static int on_msg(void *ud, const uint8_t *msg, size_t len, int *grpc_status)
{
    frames_t *f = ud;
    if (++f->n == f->fail_at) {
        *grpc_status = VSR_GRPC_INVALID_ARGUMENT;
        return VSR_ERR_INVALID;
    }
    vsr_buf_printf(&f->got, "%zu:", len);
    vsr_buf_append(&f->got, msg, len);
    vsr_buf_append(&f->got, "|", 1);
    return 0;
}

static void test_deframe_split_everywhere(void **state)
{
    (void)state;
    vsr_buf_t wire;
    vsr_buf_init(&wire, 0);
    const char *msgs[] = {"hello", "", "a longer message of some bytes"};
    for (size_t i = 0; i < 3; i++) {
        vsr__grpc_frame_prefix(&wire, strlen(msgs[i]));
        vsr_buf_append_cstr(&wire, msgs[i]);
    }
    const char *want = "5:hello|0:|30:a longer message of some bytes|";
    for (size_t cut = 0; cut <= wire.len; cut++) {
        for (size_t cut2 = cut; cut2 <= wire.len; cut2 += 7) {
            vsr_grpc_deframer_t d;
            vsr__grpc_deframer_init(&d, 64);
            frames_t f = {0};
            vsr_buf_init(&f.got, 0);
            int st = -1;
            const uint8_t *p = (const uint8_t *)wire.data;
            assert_int_equal(vsr__grpc_deframe(&d, p, cut, on_msg, &f, &st), VSR_OK);
            assert_int_equal(vsr__grpc_deframe(&d, p + cut, cut2 - cut, on_msg, &f, &st), VSR_OK);
            assert_int_equal(vsr__grpc_deframe(&d, p + cut2, wire.len - cut2, on_msg, &f, &st), VSR_OK);
            assert_true(vsr__grpc_deframer_idle(&d));
            vsr_buf_append(&f.got, "", 1);
            assert_string_equal(f.got.data, want);
            vsr_buf_free(&f.got);
            vsr__grpc_deframer_free(&d);
        }
    }
    vsr_buf_free(&wire);
}

static void test_deframe_errors(void **state)
{
    (void)state;
    vsr_grpc_deframer_t d;
    frames_t f = {0};
    vsr_buf_init(&f.got, 0);
    int st = -1;
    /* over the limit: refused from the prefix, before any byte of it is held */
    vsr__grpc_deframer_init(&d, 16);
    static const uint8_t big[] = {0, 0, 0, 0, 17};
    assert_int_equal(vsr__grpc_deframe(&d, big, sizeof(big), on_msg, &f, &st), VSR_ERR_TOO_BIG);
    assert_int_equal(st, VSR_GRPC_RESOURCE_EXHAUSTED);
    vsr__grpc_deframer_free(&d);
    /* compressed, with no encoding agreed */
    vsr__grpc_deframer_init(&d, 16);
    static const uint8_t comp[] = {1, 0, 0, 0, 1, 'x'};
    assert_int_equal(vsr__grpc_deframe(&d, comp, sizeof(comp), on_msg, &f, &st), VSR_ERR_INVALID);
    assert_int_equal(st, VSR_GRPC_UNIMPLEMENTED);
    vsr__grpc_deframer_free(&d);
    /* a flag byte that is neither */
    vsr__grpc_deframer_init(&d, 16);
    static const uint8_t flag[] = {2, 0, 0, 0, 0};
    assert_int_equal(vsr__grpc_deframe(&d, flag, sizeof(flag), on_msg, &f, &st), VSR_ERR_INVALID);
    assert_int_equal(st, VSR_GRPC_INTERNAL);
    vsr__grpc_deframer_free(&d);
    /* the consumer's error and status come back; a partial message is not idle */
    vsr__grpc_deframer_init(&d, 16);
    f.fail_at = 2;
    static const uint8_t two[] = {0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b'};
    assert_int_equal(vsr__grpc_deframe(&d, two, sizeof(two), on_msg, &f, &st), VSR_ERR_INVALID);
    assert_int_equal(st, VSR_GRPC_INVALID_ARGUMENT);
    vsr__grpc_deframer_free(&d);
    vsr__grpc_deframer_init(&d, 16);
    assert_int_equal(vsr__grpc_deframe(&d, two, 3, on_msg, &f, &st), VSR_OK);
    assert_false(vsr__grpc_deframer_idle(&d));
    vsr__grpc_deframer_free(&d);
    vsr_buf_free(&f.got);
}

static void test_grpc_timeout_and_message(void **state)
{
    (void)state;
    uint64_t ms = 0;
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("200m"), &ms), VSR_OK);
    assert_int_equal(ms, 200);
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("3S"), &ms), VSR_OK);
    assert_int_equal(ms, 3000);
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("2M"), &ms), VSR_OK);
    assert_int_equal(ms, 120000);
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("1500u"), &ms), VSR_OK);
    assert_int_equal(ms, 2); /* rounded up */
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("1n"), &ms), VSR_OK);
    assert_int_equal(ms, 1);
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("99999999H"), &ms), VSR_OK);
    assert_int_equal(ms, 24ull * 3600 * 1000); /* a day at most */
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("123456789m"), &ms), VSR_ERR_INVALID); /* 9 digits */
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("m"), &ms), VSR_ERR_INVALID);
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("10x"), &ms), VSR_ERR_INVALID);
    assert_int_equal(vsr_grpc_timeout_ms(VSR_SLICE_LIT("-1S"), &ms), VSR_ERR_INVALID);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_grpc_message_encode(&b, VSR_SLICE_LIT("bad 100% \xe2\x9c\x93\n"));
    vsr_buf_append(&b, "", 1);
    assert_string_equal(b.data, "bad 100%25 %E2%9C%93%0A");
    vsr_buf_reset(&b);
    char longmsg[4096];
    memset(longmsg, '\n', sizeof(longmsg));
    vsr_grpc_message_encode(&b, vsr_slice(longmsg, sizeof(longmsg)));
    assert_true(b.len <= 1024);
    vsr_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_request_headers),
        cmocka_unit_test(test_decode_bodies_and_unknown_fields),
        cmocka_unit_test(test_decode_limits),
        cmocka_unit_test(test_encode_request_body_effect),
        cmocka_unit_test(test_encode_headers_answers),
        cmocka_unit_test(test_encode_stream_chunk_and_trailers),
        cmocka_unit_test(test_encode_immediate),
        cmocka_unit_test(test_deframe_split_everywhere),
        cmocka_unit_test(test_deframe_errors),
        cmocka_unit_test(test_grpc_timeout_and_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
