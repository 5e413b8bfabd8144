/*
 * fuzz_extproc.c — the ext_proc codec over arbitrary ProcessingRequest
 * bytes.  Checks, beyond memory safety:
 *  - a decoded message's header names are never empty and there are at most
 *    VSR_XP_MAX_HEADERS of them;
 *  - an effect made from what was decoded (its headers as sets and
 *    removals, its body as the replacement, its first header's value as the
 *    path) encodes, for every kind of answer, to bytes that decode as a
 *    ProcessingResponse of that kind, whose sets are all settable names with
 *    append false and whose body mutation is the body with its length;
 *  - the same effect with a status encodes as an ImmediateResponse.
 */
#include <envoy/service/ext_proc/v3/external_processor.pb-c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extproc/extproc-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz_extproc: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

typedef Envoy__Service__ExtProc__V3__ProcessingResponse presp_t;

static const Envoy__Service__ExtProc__V3__CommonResponse *common_of(const presp_t *r)
{
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
        return NULL;
    }
}

static void check_mutation(const Envoy__Service__ExtProc__V3__HeaderMutation *m)
{
    for (size_t i = 0; m && i < m->n_set_headers; i++) {
        const Envoy__Config__Core__V3__HeaderValueOption *o = m->set_headers[i];
        CHECK(o->header && o->header->key);
        CHECK(vsr__xp_settable(vsr_slice_cstr(o->header->key)));
        CHECK(o->append && !o->append->value);
        for (const char *k = o->header->key; *k; k++)
            CHECK(!(*k >= 'A' && *k <= 'Z'));
    }
    for (size_t i = 0; m && i < m->n_remove_headers; i++)
        CHECK(m->remove_headers[i][0] != ':' && strcmp(m->remove_headers[i], "host") != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_xp_message_t m;
    const char *why = NULL;
    if (vsr__xp_decode(data, size, &pool, &m, &why) != VSR_OK) {
        CHECK(why != NULL);
        vsr_pool_free(&pool);
        return 0;
    }
    CHECK(m.n_headers <= VSR_XP_MAX_HEADERS);
    for (size_t i = 0; i < m.n_headers; i++)
        CHECK(m.headers[i].name.len > 0);
    vsr_slice_t *removes = vsr_pool_alloc(&pool, sizeof(vsr_slice_t) * (m.n_headers + 1));
    for (size_t i = 0; i < m.n_headers; i++)
        removes[i] = m.headers[i].name;
    vsr_effect_t eff = {0};
    eff.set = m.headers;
    eff.n_set = m.n_headers;
    eff.remove = removes;
    eff.n_remove = m.n_headers;
    eff.body_replaced = m.body.len > 0 || m.end_of_stream;
    eff.body = &m.body;
    eff.n_body = 1;
    eff.body_len = m.body.len;
    eff.clear_route_cache = 1;
    eff.path = m.n_headers ? m.headers[0].value : VSR_SLICE_NULL;
    vsr_xp_mode_t mode = {.set = 1, .response_body_mode = VSR_XP_BODY_STREAMED};
    for (int k = VSR_XP_REQUEST_HEADERS; k <= VSR_XP_RESPONSE_TRAILERS; k++) {
        vsr_buf_t out;
        vsr_buf_init(&out, 0);
        int trailers = k == VSR_XP_REQUEST_TRAILERS || k == VSR_XP_RESPONSE_TRAILERS;
        int rc = vsr__xp_encode((vsr_xp_kind_t)k, &eff, &mode, &out);
        if (trailers && eff.body_replaced) {
            CHECK(rc == VSR_ERR_INVALID);
            vsr_buf_free(&out);
            continue;
        }
        CHECK(rc == VSR_OK);
        presp_t *r =
            envoy__service__ext_proc__v3__processing_response__unpack(NULL, out.len, (const uint8_t *)out.data);
        CHECK(r != NULL);
        CHECK((int)r->response_case == k); /* the answer kinds are numbered as the request kinds */
        const Envoy__Service__ExtProc__V3__CommonResponse *c = common_of(r);
        if (c) {
            check_mutation(c->header_mutation);
            if (eff.body_replaced) {
                CHECK(c->body_mutation != NULL);
                if (m.body.len)
                    CHECK(c->body_mutation->body.len == m.body.len &&
                          memcmp(c->body_mutation->body.data, m.body.p, m.body.len) == 0);
                else
                    CHECK(c->body_mutation->clear_body);
            }
            if (k != VSR_XP_REQUEST_HEADERS && k != VSR_XP_REQUEST_BODY)
                CHECK(!c->clear_route_cache);
        }
        CHECK((r->mode_override != NULL) == (k == VSR_XP_REQUEST_HEADERS || k == VSR_XP_RESPONSE_HEADERS));
        envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
        vsr_buf_free(&out);
    }
    eff.status = 400 + (int)(size % 200);
    eff.resp_headers = m.headers;
    eff.n_resp_headers = m.n_headers;
    eff.resp_body = m.body;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    CHECK(vsr__xp_encode(VSR_XP_REQUEST_BODY, &eff, NULL, &out) == VSR_OK);
    presp_t *r = envoy__service__ext_proc__v3__processing_response__unpack(NULL, out.len, (const uint8_t *)out.data);
    CHECK(r && r->response_case == ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    CHECK((int)r->immediate_response->status->code == eff.status);
    check_mutation(r->immediate_response->headers);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    vsr_buf_free(&out);
    vsr_pool_free(&pool);
    return 0;
}
