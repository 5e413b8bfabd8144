/*
 * codec.c — Envoy's ext_proc messages (proto/, compiled by protoc-c) to the
 * routing core's phase inputs, and its Effects back to ProcessingResponse
 * bytes, with the rules of extproc-int.h.
 */
#include <envoy/service/ext_proc/v3/external_processor.pb-c.h>
#include <stdio.h>

#include "extproc/extproc-int.h"

typedef Envoy__Service__ExtProc__V3__ProcessingRequest preq_t;
typedef Envoy__Service__ExtProc__V3__ProcessingResponse presp_t;
typedef Envoy__Service__ExtProc__V3__HttpHeaders hh_t;
typedef Envoy__Service__ExtProc__V3__HttpBody hb_t;
typedef Envoy__Service__ExtProc__V3__CommonResponse common_t;
typedef Envoy__Service__ExtProc__V3__HeadersResponse headers_resp_t;
typedef Envoy__Service__ExtProc__V3__BodyResponse body_resp_t;
typedef Envoy__Service__ExtProc__V3__TrailersResponse trailers_resp_t;
typedef Envoy__Service__ExtProc__V3__HeaderMutation mutation_t;
typedef Envoy__Service__ExtProc__V3__BodyMutation body_mutation_t;
typedef Envoy__Service__ExtProc__V3__ImmediateResponse immediate_t;
typedef Envoy__Extensions__Filters__Http__ExtProc__V3__ProcessingMode mode_t_;
typedef Envoy__Config__Core__V3__HeaderMap hmap_t;
typedef Envoy__Config__Core__V3__HeaderValue hv_t;
typedef Envoy__Config__Core__V3__HeaderValueOption hvo_t;
typedef Envoy__Type__V3__HttpStatus status_t;
typedef Google__Protobuf__BoolValue boolv_t;

/* ---- protobuf-c allocations in a pool ---- */

static void *pool_alloc(void *ud, size_t n)
{
    return vsr_pool_alloc(ud, n ? n : 1);
}

static void pool_free(void *ud, void *p)
{
    VSR_UNUSED(ud);
    VSR_UNUSED(p); /* the pool goes as a whole */
}

/* ---- decode ---- */

static int decode_map(const hmap_t *m, vsr_pool_t *pool, vsr_xp_message_t *out, const char **why)
{
    if (m == NULL)
        return VSR_OK;
    if (m->n_headers > VSR_XP_MAX_HEADERS) {
        *why = "too many headers";
        return VSR_ERR_INVALID;
    }
    out->headers = vsr_pool_alloc(pool, sizeof(vsr_header_t) * (m->n_headers ? m->n_headers : 1));
    for (size_t i = 0; i < m->n_headers; i++) {
        const hv_t *h = m->headers[i];
        if (h->key == NULL || h->key[0] == '\0') {
            *why = "a header without a name";
            return VSR_ERR_INVALID;
        }
        vsr_slice_t v = h->raw_value.len ? vsr_slice((const char *)h->raw_value.data, h->raw_value.len)
                                         : vsr_slice_cstr(h->value ? h->value : "");
        out->headers[out->n_headers++] = (vsr_header_t){vsr_slice_cstr(h->key), v};
    }
    return VSR_OK;
}

int vsr__xp_decode(const uint8_t *p, size_t n, vsr_pool_t *pool, vsr_xp_message_t *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    ProtobufCAllocator a = {.alloc = pool_alloc, .free = pool_free, .allocator_data = pool};
    preq_t *m = envoy__service__ext_proc__v3__processing_request__unpack(&a, n, p);
    if (m == NULL) {
        *why = "not a ProcessingRequest";
        return VSR_ERR_INVALID;
    }
    out->observability_mode = m->observability_mode != 0;
    if (m->protocol_config) {
        out->has_protocol_config = 1;
        out->request_body_mode = (vsr_xp_body_mode_t)m->protocol_config->request_body_mode;
        out->response_body_mode = (vsr_xp_body_mode_t)m->protocol_config->response_body_mode;
        out->send_body_without_waiting = m->protocol_config->send_body_without_waiting_for_header_response != 0;
    }
    const hh_t *hh = NULL;
    const hb_t *hb = NULL;
    const hmap_t *trailers = NULL;
    switch (m->request_case) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS:
        out->kind = VSR_XP_REQUEST_HEADERS;
        hh = m->request_headers;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS:
        out->kind = VSR_XP_RESPONSE_HEADERS;
        hh = m->response_headers;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY:
        out->kind = VSR_XP_REQUEST_BODY;
        hb = m->request_body;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY:
        out->kind = VSR_XP_RESPONSE_BODY;
        hb = m->response_body;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_TRAILERS:
        out->kind = VSR_XP_REQUEST_TRAILERS;
        trailers = m->request_trailers ? m->request_trailers->trailers : NULL;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_TRAILERS:
        out->kind = VSR_XP_RESPONSE_TRAILERS;
        trailers = m->response_trailers ? m->response_trailers->trailers : NULL;
        break;
    default:
        out->kind = VSR_XP_NONE;
        return VSR_OK;
    }
    if (hh) {
        out->end_of_stream = hh->end_of_stream != 0;
        return decode_map(hh->headers, pool, out, why);
    }
    if (hb) {
        out->body = vsr_slice((const char *)hb->body.data, hb->body.len);
        out->end_of_stream = hb->end_of_stream != 0;
        return VSR_OK;
    }
    return decode_map(trailers, pool, out, why);
}

int vsr__xp_header(const vsr_xp_message_t *m, const char *name, vsr_slice_t *value)
{
    for (size_t i = 0; i < m->n_headers; i++)
        if (vsr_slice_case_eq_cstr(m->headers[i].name, name)) {
            *value = m->headers[i].value;
            return 1;
        }
    return 0;
}

/* ---- encode ---- */

/* the reliability override, per request (the five-header rule) */
static const char *const five_headers[] = {
    "x-envoy-upstream-rq-timeout-ms", "x-envoy-upstream-rq-per-try-timeout-ms", "x-envoy-max-retries",
    "x-envoy-retry-on", "x-envoy-retriable-status-codes",
};

int vsr__xp_settable(vsr_slice_t name)
{
    if (name.len == 0 || vsr_slice_case_eq_cstr(name, "host") || vsr_slice_case_eq_cstr(name, ":authority") ||
        vsr_slice_case_eq_cstr(name, ":method") || vsr_slice_case_eq_cstr(name, ":scheme"))
        return 0;
    if (name.len >= 7 && strncasecmp(name.p, "x-envoy", 7) == 0) {
        for (size_t i = 0; i < VSR_ARRAY_LEN(five_headers); i++)
            if (vsr_slice_case_eq_cstr(name, five_headers[i]))
                return 1;
        return 0;
    }
    return 1;
}

/* removing a pseudo-header or host is ignored by Envoy: not sent */
static int removable(vsr_slice_t name)
{
    return name.len > 0 && name.p[0] != ':' && !vsr_slice_case_eq_cstr(name, "host");
}

typedef struct {
    vsr_pool_t *pool;
    mutation_t *m;
    size_t cap_set, cap_remove;
} mut_builder_t;

static char *pstr(vsr_pool_t *pool, vsr_slice_t s)
{
    return vsr_pool_strndup(pool, s.p ? s.p : "", s.len);
}

static void mut_set(mut_builder_t *b, vsr_slice_t name, vsr_slice_t value)
{
    mutation_t *m = b->m;
    if (m->n_set_headers == b->cap_set) {
        size_t cap = b->cap_set ? b->cap_set * 2 : 8;
        hvo_t **v = vsr_pool_alloc(b->pool, cap * sizeof(*v));
        if (m->n_set_headers)
            memcpy(v, m->set_headers, m->n_set_headers * sizeof(*v));
        m->set_headers = v;
        b->cap_set = cap;
    }
    hv_t *hv = vsr_pool_alloc(b->pool, sizeof(*hv));
    *hv = (hv_t)ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
    hv->key = pstr(b->pool, name);
    for (char *k = hv->key; *k; k++) /* HTTP/2 field names are lower case */
        if (*k >= 'A' && *k <= 'Z')
            *k = (char)(*k - 'A' + 'a');
    hv->raw_value.data = (uint8_t *)pstr(b->pool, value);
    hv->raw_value.len = value.len;
    boolv_t *ap = vsr_pool_alloc(b->pool, sizeof(*ap));
    *ap = (boolv_t)GOOGLE__PROTOBUF__BOOL_VALUE__INIT;
    ap->value = 0; /* overwrite: what Envoy's ext_proc reads */
    hvo_t *o = vsr_pool_alloc(b->pool, sizeof(*o));
    *o = (hvo_t)ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__INIT;
    o->header = hv;
    o->append = ap;
    /* Envoy refuses append and a non-default append_action together on
     * config headers; ext_proc ignores append_action.  The default (0)
     * keeps both readers agreeing with append: false. */
    o->append_action = ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__HEADER_APPEND_ACTION__APPEND_IF_EXISTS_OR_ADD;
    m->set_headers[m->n_set_headers++] = o;
}

static void mut_remove(mut_builder_t *b, vsr_slice_t name)
{
    mutation_t *m = b->m;
    if (m->n_remove_headers == b->cap_remove) {
        size_t cap = b->cap_remove ? b->cap_remove * 2 : 8;
        char **v = vsr_pool_alloc(b->pool, cap * sizeof(*v));
        if (m->n_remove_headers)
            memcpy(v, m->remove_headers, m->n_remove_headers * sizeof(*v));
        m->remove_headers = v;
        b->cap_remove = cap;
    }
    m->remove_headers[m->n_remove_headers++] = pstr(b->pool, name);
}

static int pack(const presp_t *r, vsr_buf_t *out)
{
    size_t n = envoy__service__ext_proc__v3__processing_response__get_packed_size(r);
    if (vsr_buf_reserve(out, n) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    envoy__service__ext_proc__v3__processing_response__pack(r, (uint8_t *)out->data + out->len);
    out->len += n;
    return VSR_OK;
}

static void concat_body(vsr_pool_t *pool, const vsr_effect_t *eff, ProtobufCBinaryData *out)
{
    size_t n = 0;
    for (size_t i = 0; i < eff->n_body; i++)
        n += eff->body[i].len;
    uint8_t *p = vsr_pool_alloc(pool, n ? n : 1);
    size_t off = 0;
    for (size_t i = 0; i < eff->n_body; i++) {
        if (eff->body[i].len)
            memcpy(p + off, eff->body[i].p, eff->body[i].len);
        off += eff->body[i].len;
    }
    out->data = p;
    out->len = n;
}

static immediate_t *immediate_msg(vsr_pool_t *pool, int status, const vsr_header_t *h, size_t nh, vsr_slice_t body,
                                  vsr_slice_t details)
{
    immediate_t *im = vsr_pool_alloc(pool, sizeof(*im));
    *im = (immediate_t)ENVOY__SERVICE__EXT_PROC__V3__IMMEDIATE_RESPONSE__INIT;
    status_t *st = vsr_pool_alloc(pool, sizeof(*st));
    *st = (status_t)ENVOY__TYPE__V3__HTTP_STATUS__INIT;
    st->code = (Envoy__Type__V3__StatusCode)status;
    im->status = st;
    mutation_t *m = vsr_pool_alloc(pool, sizeof(*m));
    *m = (mutation_t)ENVOY__SERVICE__EXT_PROC__V3__HEADER_MUTATION__INIT;
    mut_builder_t b = {.pool = pool, .m = m};
    for (size_t i = 0; i < nh; i++)
        if (vsr__xp_settable(h[i].name) && !vsr_slice_case_eq_cstr(h[i].name, "content-length"))
            mut_set(&b, h[i].name, h[i].value); /* Envoy sets the length of the body it sends */
    if (m->n_set_headers)
        im->headers = m;
    im->body.data = (uint8_t *)pstr(pool, body);
    im->body.len = body.len;
    im->details = pstr(pool, details);
    return im;
}

int vsr__xp_encode_immediate(int status, vsr_slice_t content_type, vsr_slice_t body, vsr_slice_t details,
                             vsr_buf_t *out)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_header_t ct = {VSR_SLICE_LIT("content-type"), content_type};
    presp_t r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE;
    r.immediate_response = immediate_msg(&pool, status, &ct, content_type.len ? 1 : 0, body, details);
    int rc = pack(&r, out);
    vsr_pool_free(&pool);
    return rc;
}

int vsr__xp_encode(vsr_xp_kind_t to, const vsr_effect_t *eff, const vsr_xp_mode_t *mode, vsr_buf_t *out)
{
    if (to == VSR_XP_NONE || (unsigned)to > VSR_XP_RESPONSE_TRAILERS)
        return VSR_ERR_INVALID;
    int trailers = to == VSR_XP_REQUEST_TRAILERS || to == VSR_XP_RESPONSE_TRAILERS;
    int body_phase = to == VSR_XP_REQUEST_BODY || to == VSR_XP_RESPONSE_BODY;
    int request_path = to == VSR_XP_REQUEST_HEADERS || to == VSR_XP_REQUEST_BODY || to == VSR_XP_REQUEST_TRAILERS;
    if (trailers && eff && eff->body_replaced)
        return VSR_ERR_INVALID;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    presp_t r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    int rc;
    if (eff && eff->status) {
        r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE;
        r.immediate_response = immediate_msg(&pool, eff->status, eff->resp_headers, eff->n_resp_headers,
                                             eff->resp_body, VSR_SLICE_LIT("vsr"));
        rc = pack(&r, out);
        vsr_pool_free(&pool);
        return rc;
    }
    mutation_t *m = vsr_pool_alloc(&pool, sizeof(*m));
    *m = (mutation_t)ENVOY__SERVICE__EXT_PROC__V3__HEADER_MUTATION__INIT;
    mut_builder_t b = {.pool = &pool, .m = m};
    int replaced = eff && eff->body_replaced && !trailers;
    if (eff) {
        for (size_t i = 0; i < eff->n_remove; i++)
            if (removable(eff->remove[i]))
                mut_remove(&b, eff->remove[i]);
        if (eff->path.len)
            mut_set(&b, VSR_SLICE_LIT(":path"), eff->path);
        for (size_t i = 0; i < eff->n_set; i++) {
            if (!vsr__xp_settable(eff->set[i].name))
                continue;
            if (replaced && vsr_slice_case_eq_cstr(eff->set[i].name, "content-length"))
                continue; /* the body's own length is set below */
            mut_set(&b, eff->set[i].name, eff->set[i].value);
        }
    }
    body_mutation_t *bm = NULL;
    if (replaced) {
        /* Envoy fails a body whose content-length disagrees: it goes with the body */
        char len[VSR_U64_DIGITS];
        mut_set(&b, VSR_SLICE_LIT("content-length"), vsr_slice(len, vsr_fmt_u64(len, eff->body_len, 0)));
        bm = vsr_pool_alloc(&pool, sizeof(*bm));
        envoy__service__ext_proc__v3__body_mutation__init(bm);
        if (eff->body_len == 0) {
            bm->mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_CLEAR_BODY;
            bm->clear_body = 1;
        } else {
            bm->mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_BODY;
            concat_body(&pool, eff, &bm->body);
        }
    }
    int has_mutation = m->n_set_headers || m->n_remove_headers;
    if (trailers) {
        trailers_resp_t *t = vsr_pool_alloc(&pool, sizeof(*t));
        *t = (trailers_resp_t)ENVOY__SERVICE__EXT_PROC__V3__TRAILERS_RESPONSE__INIT;
        t->header_mutation = has_mutation ? m : NULL;
        if (to == VSR_XP_REQUEST_TRAILERS) {
            r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS;
            r.request_trailers = t;
        } else {
            r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_TRAILERS;
            r.response_trailers = t;
        }
    } else {
        common_t *c = vsr_pool_alloc(&pool, sizeof(*c));
        *c = (common_t)ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__INIT;
        c->header_mutation = has_mutation ? m : NULL;
        c->body_mutation = bm;
        if (bm && !body_phase) /* a body given on a headers answer replaces the body there */
            c->status = ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__RESPONSE_STATUS__CONTINUE_AND_REPLACE;
        /* counted by Envoy only with a header mutation, on the request path */
        c->clear_route_cache = eff && eff->clear_route_cache && request_path && has_mutation;
        switch (to) {
        case VSR_XP_REQUEST_HEADERS:
        case VSR_XP_RESPONSE_HEADERS: {
            headers_resp_t *h = vsr_pool_alloc(&pool, sizeof(*h));
            *h = (headers_resp_t)ENVOY__SERVICE__EXT_PROC__V3__HEADERS_RESPONSE__INIT;
            h->response = c;
            if (to == VSR_XP_REQUEST_HEADERS) {
                r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS;
                r.request_headers = h;
            } else {
                r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS;
                r.response_headers = h;
            }
            break;
        }
        default: {
            body_resp_t *bb = vsr_pool_alloc(&pool, sizeof(*bb));
            *bb = (body_resp_t)ENVOY__SERVICE__EXT_PROC__V3__BODY_RESPONSE__INIT;
            bb->response = c;
            if (to == VSR_XP_REQUEST_BODY) {
                r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY;
                r.request_body = bb;
            } else {
                r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY;
                r.response_body = bb;
            }
            break;
        }
        }
    }
    mode_t_ mo;
    envoy__extensions__filters__http__ext_proc__v3__processing_mode__init(&mo);
    if (mode && mode->set && (to == VSR_XP_REQUEST_HEADERS || to == VSR_XP_RESPONSE_HEADERS)) {
        mo.request_body_mode = (Envoy__Extensions__Filters__Http__ExtProc__V3__ProcessingMode__BodySendMode)
                                   mode->request_body_mode;
        mo.response_body_mode = (Envoy__Extensions__Filters__Http__ExtProc__V3__ProcessingMode__BodySendMode)
                                    mode->response_body_mode;
        r.mode_override = &mo;
    }
    rc = pack(&r, out);
    vsr_pool_free(&pool);
    return rc;
}
