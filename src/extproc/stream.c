/*
 * stream.c — one ext_proc Process stream through one routing session (see
 * extproc.h): messages deframed and decoded, each phase called, its effect
 * folded into the answer, the answer encoded and framed, in order.  The
 * transport below it (HTTP/2, gRPC framing) is the caller's (vsr_xp_io_t).
 *
 * The stream's phase is one state:
 *
 *   REQ_HEADERS  waiting for the first message (the request headers)
 *   REQ_BODY     the request headers are answered; the body is next
 *   ROUTED       the request phases are over: response messages next
 *   RESP_BODY    the response headers are answered; body chunks next
 *   DONE         an immediate answer was given: later messages are answered
 *                unchanged
 *   FINISHED     the call's status is given (OK, or an error): nothing more
 *
 * Transitions (xp_moves; anything else is a bug, caught by VSR_ASSERT):
 *
 *   REQ_HEADERS -> REQ_BODY | ROUTED (no body: both phases in one answer)
 *                  | DONE (an immediate answer)
 *   REQ_BODY    -> ROUTED | DONE
 *   ROUTED      -> RESP_BODY
 *   RESP_BODY   -> DONE (a response phase changed the status)
 *   any but FINISHED -> FINISHED
 *
 * A phase waiting on the ports (pending) is no state of its own: the stream
 * stays where it is, messages queue, and the phase's end moves it on.  What
 * is not the stream's phase stays a flag: cancelled (the caller's side),
 * ended (Envoy closed its side), observability.
 */
#include <stdio.h>

#include "extproc/extproc-int.h"
#include "extproc/extproc.h"

typedef enum {
    ST_REQ_HEADERS = 0,
    ST_REQ_BODY,
    ST_ROUTED,
    ST_RESP_BODY,
    ST_DONE,
    ST_FINISHED,
    ST_N_STATES
} state_t;

/* The legal moves: xp_moves[from] has bit `to`. */
#define ST_BIT(s) (1u << (s))
static const unsigned xp_moves[ST_N_STATES] = {
    [ST_REQ_HEADERS] = ST_BIT(ST_REQ_BODY) | ST_BIT(ST_ROUTED) | ST_BIT(ST_DONE) | ST_BIT(ST_FINISHED),
    [ST_REQ_BODY] = ST_BIT(ST_ROUTED) | ST_BIT(ST_DONE) | ST_BIT(ST_FINISHED),
    [ST_ROUTED] = ST_BIT(ST_RESP_BODY) | ST_BIT(ST_FINISHED),
    [ST_RESP_BODY] = ST_BIT(ST_DONE) | ST_BIT(ST_FINISHED),
    [ST_DONE] = ST_BIT(ST_FINISHED),
    [ST_FINISHED] = 0,
};

/* 1 when a stream may go from one state to the other (read by VSR_ASSERT,
 * which a release build compiles out, and by the unit test). */
__attribute__((unused)) static inline int xp_can_move(state_t from, state_t to)
{
    return (unsigned)from < ST_N_STATES && (unsigned)to < ST_N_STATES && (xp_moves[from] & ST_BIT(to)) != 0;
}

/* An answer under construction: what one or two phase effects ask for,
 * copied (a phase's effect is valid only until the session's next call). */
typedef struct {
    vsr_pool_t pool;
    vsr_slice_t *rm;
    size_t n_rm, cap_rm;
    vsr_header_t *set;
    size_t n_set, cap_set;
    vsr_buf_t body;
    int body_replaced;
    vsr_slice_t path;
    int clear_route_cache;
    int status;                 /* an immediate answer */
    vsr_header_t *resp;
    size_t n_resp, cap_resp;
} ans_t;

/* A message waiting behind a pending phase. */
typedef struct queued_s {
    struct queued_s *next;
    size_t len;
    uint8_t bytes[];
} queued_t;

struct vsr_xp_stream_s {
    vsr_session_t *sess;
    vsr_xp_io_t io;
    vsr_ports_t ports;             /* the caller's, with resume pointing here */
    const vsr_ports_t *outer;
    void *outer_ud;
    vsr_grpc_deframer_t df;
    vsr_pool_t req_pool;           /* the request's headers and body: the session borrows them until finish */
    vsr_pool_t msg_pool;           /* one response message at a time */
    state_t state;                 /* its phase (the table above) */
    int cancelled, ended, observability;
    /* the phase that waits, and what its answer is for */
    int pending;
    vsr_xp_kind_t pending_kind;
    int pending_then_end;          /* a response chunk was fed; the end call follows on resume */
    int pending_eos_headers;       /* a response-headers answer waits for the body's end */
    vsr_xp_mode_t pending_mode;
    ans_t ans;
    vsr_body_mode_t body_mode;
    int observe;
    int resp_status;               /* the upstream's :status */
    size_t chunk_len;              /* the response chunk being answered */
    vsr_xp_info_t info;
    queued_t *q_head, **q_tail;
    size_t queued, max_queued;
    vsr_buf_t out;
};

/* ---- the answer ---- */

static void ans_init(ans_t *a)
{
    memset(a, 0, sizeof(*a));
    vsr_pool_init(&a->pool);
    vsr_buf_init(&a->body, 0);
}

static void ans_free(ans_t *a)
{
    vsr_pool_free(&a->pool);
    vsr_buf_free(&a->body);
}

static void ans_reset(ans_t *a)
{
    ans_free(a);
    ans_init(a);
}

static void grow(vsr_pool_t *pool, void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return;
    size_t c = *cap ? *cap * 2 : 8;
    void *nv = vsr_pool_alloc(pool, c * size);
    if (n)
        memcpy(nv, *v, n * size);
    *v = nv;
    *cap = c;
}

static void ans_set(ans_t *a, vsr_slice_t name, vsr_slice_t value)
{
    grow(&a->pool, (void **)&a->set, &a->cap_set, a->n_set, sizeof(*a->set));
    a->set[a->n_set++] = (vsr_header_t){vsr_pool_dup_slice(&a->pool, name), vsr_pool_dup_slice(&a->pool, value)};
}

static void ans_remove(ans_t *a, vsr_slice_t name)
{
    grow(&a->pool, (void **)&a->rm, &a->cap_rm, a->n_rm, sizeof(*a->rm));
    a->rm[a->n_rm++] = vsr_pool_dup_slice(&a->pool, name);
}

/* Folds one phase's effect into the answer.  On the response path
 * (upstream_status: the upstream's), a BUFFER end that keeps the status is
 * a body answer with its header sets; one that changes it can only be an
 * ImmediateResponse. */
static void ans_fold(ans_t *a, const vsr_effect_t *eff, int upstream_status)
{
    int response_path = upstream_status != 0;
    int status = eff->status && eff->status != upstream_status ? eff->status : 0;
    for (size_t i = 0; i < eff->n_remove; i++)
        ans_remove(a, eff->remove[i]);
    for (size_t i = 0; i < eff->n_set; i++)
        ans_set(a, eff->set[i].name, eff->set[i].value);
    if (eff->path.len)
        a->path = vsr_pool_dup_slice(&a->pool, eff->path);
    a->clear_route_cache |= eff->clear_route_cache;
    if (eff->body_replaced) {
        a->body_replaced = 1;
        for (size_t i = 0; i < eff->n_body; i++)
            vsr_buf_append_slice(&a->body, eff->body[i]);
    }
    if (status) {
        a->status = status;
        if (!eff->body_replaced) { /* a request phase's answer: its own body */
            vsr_buf_reset(&a->body);
            vsr_buf_append_slice(&a->body, eff->resp_body);
        }
    }
    for (size_t i = 0; i < eff->n_resp_headers; i++) {
        if (status || !response_path) {
            grow(&a->pool, (void **)&a->resp, &a->cap_resp, a->n_resp, sizeof(*a->resp));
            a->resp[a->n_resp++] = (vsr_header_t){vsr_pool_dup_slice(&a->pool, eff->resp_headers[i].name),
                                                  vsr_pool_dup_slice(&a->pool, eff->resp_headers[i].value)};
        } else {
            ans_set(a, eff->resp_headers[i].name, eff->resp_headers[i].value); /* BUFFER: set on the held head */
        }
    }
}

/* The stream enters a state: a move the table does not allow is a bug. */
static void enter(vsr_xp_stream_t *st, state_t to)
{
    VSR_ASSERT(xp_can_move(st->state, to));
    st->state = to;
}

static int finished(const vsr_xp_stream_t *st)
{
    return st->state == ST_FINISHED;
}

/* ---- output ---- */

static void finish(vsr_xp_stream_t *st, int grpc_status, const char *msg)
{
    if (finished(st))
        return;
    enter(st, ST_FINISHED);
    st->info.answered = grpc_status == VSR_GRPC_OK;
    if (!st->cancelled)
        st->io.finish(st->io.ud, grpc_status, msg);
}

static void send_answer(vsr_xp_stream_t *st, vsr_xp_kind_t kind, const vsr_xp_mode_t *mode)
{
    ans_t *a = &st->ans;
    vsr_effect_t eff = {0};
    vsr_slice_t piece = vsr_buf_slice(&a->body);
    if (a->status || kind == VSR_XP_RESPONSE_BODY)
        st->info.response_bytes += piece.len;
    if (a->status) {
        st->info.status = a->status;
        eff.status = a->status;
        eff.resp_headers = a->resp;
        eff.n_resp_headers = a->n_resp;
        eff.resp_body = piece;
        enter(st, ST_DONE);
    } else {
        eff.remove = a->rm;
        eff.n_remove = a->n_rm;
        eff.set = a->set;
        eff.n_set = a->n_set;
        eff.path = a->path;
        eff.clear_route_cache = a->clear_route_cache;
        eff.body_replaced = a->body_replaced;
        eff.body = &piece;
        eff.n_body = 1;
        eff.body_len = piece.len;
    }
    vsr_buf_reset(&st->out);
    int rc = vsr__grpc_frame_prefix(&st->out, 0); /* a placeholder for the length */
    if (rc == VSR_OK)
        rc = vsr__xp_encode(kind, &eff, a->status ? NULL : mode, &st->out);
    ans_reset(a);
    if (rc != VSR_OK) {
        finish(st, VSR_GRPC_INTERNAL, "the answer could not be encoded");
        return;
    }
    size_t len = st->out.len - VSR_GRPC_PREFIX;
    uint8_t *pre = (uint8_t *)st->out.data;
    pre[1] = (uint8_t)(len >> 24);
    pre[2] = (uint8_t)(len >> 16);
    pre[3] = (uint8_t)(len >> 8);
    pre[4] = (uint8_t)len;
    if (!st->observability && !st->cancelled)
        st->io.send(st->io.ud, st->out.data, st->out.len);
}

/* An answer of the adapter's own, for a request vsr cannot process. */
static void send_own_error(vsr_xp_stream_t *st, vsr_xp_kind_t kind, int status, const char *msg)
{
    vsr_buf_t body;
    vsr_buf_init(&body, 0);
    vsr_session_error_body(st->sess, status, "server_error", "extproc_error", vsr_slice_cstr(msg), &body);
    ans_reset(&st->ans);
    st->ans.status = status;
    vsr_buf_append_slice(&st->ans.body, vsr_buf_slice(&body));
    vsr_buf_free(&body);
    vsr_header_t ct = {VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json")};
    vsr_effect_t e = {.resp_headers = &ct, .n_resp_headers = 1};
    ans_fold(&st->ans, &e, 0);
    send_answer(st, kind, NULL);
}

/* ---- the phases ---- */

static void drain(vsr_xp_stream_t *st);

static int is_pseudo(vsr_slice_t name)
{
    return name.len && name.p[0] == ':';
}

/* the fields of a decoded header map without its pseudo-headers, in the pool */
static vsr_header_t *plain_headers(const vsr_xp_message_t *m, vsr_pool_t *pool, size_t *n)
{
    vsr_header_t *h = vsr_pool_alloc(pool, sizeof(*h) * (m->n_headers ? m->n_headers : 1));
    *n = 0;
    for (size_t i = 0; i < m->n_headers; i++)
        if (!is_pseudo(m->headers[i].name))
            h[(*n)++] = m->headers[i];
    return h;
}

static vsr_xp_mode_t mode_for(const vsr_xp_stream_t *st)
{
    vsr_xp_mode_t m = {.set = 1, .request_body_mode = VSR_XP_BODY_NONE};
    m.response_body_mode = st->body_mode == VSR_BODY_BUFFER                          ? VSR_XP_BODY_BUFFERED
                           : st->body_mode == VSR_BODY_STREAM || st->observe ? VSR_XP_BODY_STREAMED
                                                                                     : VSR_XP_BODY_NONE;
    return m;
}

/* A phase's effect arrived (at once or through resume): fold it, and send
 * the answer when nothing else is to come. */
static void phase_done(vsr_xp_stream_t *st, const vsr_effect_t *eff)
{
    vsr_xp_kind_t kind = st->pending_kind;
    st->pending = 0;
    switch (kind) {
    case VSR_XP_REQUEST_HEADERS:
    case VSR_XP_REQUEST_BODY:
        ans_fold(&st->ans, eff, 0);
        if (st->state != ST_DONE && !st->ans.status)
            enter(st, ST_ROUTED);
        send_answer(st, kind, NULL);
        break;
    case VSR_XP_RESPONSE_HEADERS: /* the body's end of a response without a body */
        ans_fold(&st->ans, eff, st->resp_status);
        send_answer(st, kind, &st->pending_mode);
        break;
    case VSR_XP_RESPONSE_BODY:
        ans_fold(&st->ans, eff, st->resp_status);
        if (st->pending_then_end) {
            st->pending_then_end = 0;
            const vsr_effect_t *e2 = vsr_session_response_body(st->sess, NULL, 0, VSR_BODY_END);
            if (e2->pending) {
                st->pending = 1;
                return;
            }
            ans_fold(&st->ans, e2, st->resp_status);
        }
        if (st->body_mode == VSR_BODY_RELAY) { /* observed or not asked for: the chunk as it is */
            st->ans.body_replaced = 0;
            vsr_buf_reset(&st->ans.body);
            st->info.response_bytes += st->chunk_len;
        }
        send_answer(st, kind, NULL);
        break;
    default:
        break;
    }
}

static void call_phase(vsr_xp_stream_t *st, vsr_xp_kind_t kind, const vsr_effect_t *eff)
{
    st->pending_kind = kind;
    if (eff->pending) {
        st->pending = 1;
        return;
    }
    phase_done(st, eff);
}

static void on_request_headers(vsr_xp_stream_t *st, const vsr_xp_message_t *m)
{
    vsr_slice_t method = VSR_SLICE_LIT("GET"), path = VSR_SLICE_LIT("/");
    vsr__xp_header(m, ":method", &method);
    vsr__xp_header(m, ":path", &path);
    st->info.method = method;
    st->info.path = path;
    vsr__xp_header(m, "x-request-id", &st->info.request_id);
    vsr__xp_header(m, "user-agent", &st->info.user_agent);
    size_t n;
    vsr_header_t *h = plain_headers(m, &st->req_pool, &n);
    const vsr_effect_t *eff = vsr_session_request_headers(st->sess, method, path, h, n);
    if (eff->status || !m->end_of_stream) {
        if (!eff->status)
            enter(st, ST_REQ_BODY);
        ans_fold(&st->ans, eff, 0);
        send_answer(st, VSR_XP_REQUEST_HEADERS, NULL); /* an immediate answer: DONE */
        return;
    }
    /* no body follows: the body phase runs now, and one answer carries both */
    ans_fold(&st->ans, eff, 0);
    call_phase(st, VSR_XP_REQUEST_HEADERS, vsr_session_request_body(st->sess, "", 0));
}

static void on_request_body(vsr_xp_stream_t *st, const vsr_xp_message_t *m)
{
    if (!m->end_of_stream) {
        send_own_error(st, VSR_XP_REQUEST_BODY, 500,
                       "vsr needs the whole request body in one message (ext_proc request_body_mode BUFFERED)");
        return;
    }
    st->info.request_bytes = m->body.len;
    call_phase(st, VSR_XP_REQUEST_BODY,
               vsr_session_request_body(st->sess, m->body.p ? m->body.p : "", m->body.len));
}

static void on_response_headers(vsr_xp_stream_t *st, const vsr_xp_message_t *m)
{
    vsr_slice_t sv;
    uint64_t status = 0;
    if (!vsr__xp_header(m, ":status", &sv) || vsr_slice_to_u64(sv, 999, &status) != VSR_OK || status < 100) {
        finish(st, VSR_GRPC_INVALID_ARGUMENT, "response headers without a valid :status");
        return;
    }
    size_t n;
    vsr_header_t *h = plain_headers(m, &st->msg_pool, &n);
    st->resp_status = (int)status;
    st->info.status = (int)status;
    const vsr_effect_t *eff = vsr_session_response_headers(st->sess, (int)status, h, n);
    st->body_mode = m->end_of_stream ? VSR_BODY_RELAY : eff->body_mode;
    st->observe = eff->observe;
    enter(st, ST_RESP_BODY);
    ans_fold(&st->ans, eff, st->resp_status);
    if (eff->body_mode != VSR_BODY_RELAY)
        ans_remove(&st->ans, VSR_SLICE_LIT("content-length")); /* the body is written anew */
    vsr_xp_mode_t mode = mode_for(st);
    if (m->end_of_stream && (eff->body_mode != VSR_BODY_RELAY || eff->observe)) {
        /* no body comes: the body phase ends here, and its bytes (a
         * translated empty answer) go with this answer */
        st->body_mode = eff->body_mode;
        st->pending_mode = (vsr_xp_mode_t){0};
        call_phase(st, VSR_XP_RESPONSE_HEADERS, vsr_session_response_body(st->sess, NULL, 0, VSR_BODY_END));
        return;
    }
    send_answer(st, VSR_XP_RESPONSE_HEADERS, &mode);
}

static void on_response_body(vsr_xp_stream_t *st, const vsr_xp_message_t *m)
{
    st->chunk_len = m->body.len;
    if (st->body_mode == VSR_BODY_RELAY && !st->observe) { /* a mode we did not ask for: unchanged */
        st->info.response_bytes += m->body.len;
        send_answer(st, VSR_XP_RESPONSE_BODY, NULL);
        return;
    }
    const vsr_effect_t *eff = vsr_session_response_body(st->sess, m->body.p, m->body.len, 0);
    if (st->body_mode == VSR_BODY_BUFFER) {
        /* the whole body comes at its end: an earlier chunk (a filter that
         * streams although BUFFERED was asked for) is held by the session
         * and cleared here */
        if (!m->end_of_stream) {
            st->ans.body_replaced = 1;
            send_answer(st, VSR_XP_RESPONSE_BODY, NULL);
            return;
        }
        st->pending_kind = VSR_XP_RESPONSE_BODY;
        st->pending_then_end = 0;
        call_phase(st, VSR_XP_RESPONSE_BODY, vsr_session_response_body(st->sess, NULL, 0, VSR_BODY_END));
        return;
    }
    st->pending_then_end = m->end_of_stream;
    call_phase(st, VSR_XP_RESPONSE_BODY, eff);
}

static void process(vsr_xp_stream_t *st, const uint8_t *p, size_t n)
{
    vsr_xp_message_t m;
    const char *why = NULL;
    int request_side = st->state == ST_REQ_HEADERS || st->state == ST_REQ_BODY;
    vsr_pool_t *pool = request_side ? &st->req_pool : &st->msg_pool;
    if (!request_side)
        vsr_pool_clear(&st->msg_pool);
    if (vsr__xp_decode(p, n, pool, &m, &why) != VSR_OK) {
        finish(st, VSR_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    if (m.observability_mode)
        st->observability = 1;
    int ok;
    switch (m.kind) {
    case VSR_XP_REQUEST_HEADERS:
        ok = st->state == ST_REQ_HEADERS;
        if (ok)
            on_request_headers(st, &m);
        break;
    case VSR_XP_REQUEST_BODY:
        ok = st->state == ST_REQ_BODY;
        if (ok)
            on_request_body(st, &m);
        break;
    case VSR_XP_RESPONSE_HEADERS:
        ok = st->state == ST_ROUTED || st->state == ST_DONE;
        if (st->state == ST_ROUTED)
            on_response_headers(st, &m);
        else if (ok) /* after an immediate answer (Envoy's own reply): nothing of vsr's to add */
            send_answer(st, m.kind, NULL);
        break;
    case VSR_XP_RESPONSE_BODY:
        ok = st->state == ST_RESP_BODY || st->state == ST_DONE;
        if (st->state == ST_RESP_BODY)
            on_response_body(st, &m);
        else if (ok)
            send_answer(st, m.kind, NULL);
        break;
    case VSR_XP_REQUEST_TRAILERS:
    case VSR_XP_RESPONSE_TRAILERS:
        ok = st->state != ST_REQ_HEADERS; /* nothing vsr changes: answered as they are */
        if (ok)
            send_answer(st, m.kind, NULL);
        break;
    default:
        ok = 0;
        break;
    }
    if (!ok)
        finish(st, VSR_GRPC_FAILED_PRECONDITION, "a ProcessingRequest out of order or with no part set");
}

/* Messages queued behind a phase that waited, in order, until one waits again. */
static void drain(vsr_xp_stream_t *st)
{
    while (!st->pending && !finished(st) && st->q_head) {
        queued_t *q = st->q_head;
        st->q_head = q->next;
        if (!st->q_head)
            st->q_tail = &st->q_head;
        st->queued -= q->len;
        process(st, q->bytes, q->len);
        vsr_free(q);
    }
    if (!st->pending && !finished(st) && st->ended && !st->q_head)
        finish(st, VSR_GRPC_OK, NULL);
}

static int on_msg(void *ud, const uint8_t *msg, size_t len, int *grpc_status)
{
    vsr_xp_stream_t *st = ud;
    if (finished(st))
        return VSR_ERR;
    if (st->pending || st->q_head) {
        if (st->queued + len > st->max_queued) {
            *grpc_status = VSR_GRPC_RESOURCE_EXHAUSTED;
            return VSR_ERR_TOO_BIG;
        }
        queued_t *q = vsr_malloc(sizeof(*q) + len);
        q->next = NULL;
        q->len = len;
        memcpy(q->bytes, msg, len);
        *st->q_tail = q;
        st->q_tail = &q->next;
        st->queued += len;
        return 0;
    }
    process(st, msg, len);
    return finished(st) ? VSR_ERR : 0;
}

/* ---- ports: the caller's, with resume here ---- */

static void *p_runtime_call(void *ud, const vsr_runtime_bundle_t *b, uint64_t deadline_ms, vsr_runtime_done_fn done,
                            void *done_ud)
{
    vsr_xp_stream_t *st = ud;
    return st->outer->runtime_call(st->outer_ud, b, deadline_ms, done, done_ud);
}

static void p_runtime_cancel(void *ud, void *h)
{
    vsr_xp_stream_t *st = ud;
    st->outer->runtime_cancel(st->outer_ud, h);
}

static void *p_model_call(void *ud, const vsr_graph_call_t *c, uint64_t deadline_ms, vsr_graph_call_done_fn done,
                          void *done_ud)
{
    vsr_xp_stream_t *st = ud;
    return st->outer->model_call(st->outer_ud, c, deadline_ms, done, done_ud);
}

static void p_model_cancel(void *ud, void *h)
{
    vsr_xp_stream_t *st = ud;
    st->outer->model_cancel(st->outer_ud, h);
}

static void *p_cache_lookup(void *ud, const vsr_cache_query_t *q, vsr_cache_done_fn done, void *done_ud)
{
    vsr_xp_stream_t *st = ud;
    return st->outer->cache_lookup(st->outer_ud, q, done, done_ud);
}

static void p_cache_cancel(void *ud, void *h)
{
    vsr_xp_stream_t *st = ud;
    st->outer->cache_cancel(st->outer_ud, h);
}

static void p_cache_store(void *ud, const vsr_cache_query_t *q, vsr_slice_t v)
{
    vsr_xp_stream_t *st = ud;
    st->outer->cache_store(st->outer_ud, q, v);
}

static void p_cache_delete(void *ud, const vsr_cache_query_t *q)
{
    vsr_xp_stream_t *st = ud;
    st->outer->cache_delete(st->outer_ud, q);
}

static uint64_t p_now(void *ud)
{
    vsr_xp_stream_t *st = ud;
    return st->outer->now_ms(st->outer_ud);
}

static void p_resume(void *ud, vsr_session_t *s, const vsr_effect_t *eff)
{
    VSR_UNUSED(s);
    vsr_xp_stream_t *st = ud;
    if (st->cancelled || finished(st))
        return;
    phase_done(st, eff);
    drain(st);
}

static void wrap_ports(vsr_xp_stream_t *st, const vsr_ports_t *o)
{
    vsr_ports_t *p = &st->ports;
    memset(p, 0, sizeof(*p));
    p->runtime_call = o->runtime_call ? p_runtime_call : NULL;
    p->runtime_cancel = o->runtime_cancel ? p_runtime_cancel : NULL;
    p->model_call = o->model_call ? p_model_call : NULL;
    p->model_cancel = o->model_cancel ? p_model_cancel : NULL;
    p->cache_lookup = o->cache_lookup ? p_cache_lookup : NULL;
    p->cache_cancel = o->cache_cancel ? p_cache_cancel : NULL;
    p->cache_store = o->cache_store ? p_cache_store : NULL;
    p->cache_delete = o->cache_delete ? p_cache_delete : NULL;
    p->now_ms = o->now_ms ? p_now : NULL;
    p->resume = p_resume;
}

/* ---- the stream ---- */

vsr_xp_stream_t *vsr_xp_stream_open(vsr_engine_t *e, const vsr_xp_stream_opts_t *opts, const vsr_xp_io_t *io)
{
    vsr_xp_stream_t *st = vsr_calloc(1, sizeof(*st));
    st->io = *io;
    vsr_session_opts_t so = opts->session;
    so.envoy = 1; /* Envoy calls the backend: credentials and the reliability headers go in the effect */
    if (so.ports) {
        st->outer = so.ports;
        st->outer_ud = so.ports_ud;
        wrap_ports(st, so.ports);
        so.ports = &st->ports;
        so.ports_ud = st;
    }
    st->sess = vsr_session_open(e, &so);
    vsr__grpc_deframer_init(&st->df, opts->max_message);
    vsr_pool_init(&st->req_pool);
    vsr_pool_init(&st->msg_pool);
    ans_init(&st->ans);
    vsr_buf_init(&st->out, 0);
    st->q_tail = &st->q_head;
    st->max_queued = opts->max_queued ? opts->max_queued : (64u << 20);
    return st;
}

int vsr_xp_stream_data(vsr_xp_stream_t *st, const uint8_t *p, size_t n)
{
    if (finished(st) || st->cancelled)
        return VSR_ERR;
    int gs = VSR_GRPC_INTERNAL;
    int rc = vsr__grpc_deframe(&st->df, p, n, on_msg, st, &gs);
    if (rc != VSR_OK && !finished(st))
        finish(st, gs, rc == VSR_ERR_TOO_BIG ? "a message over the size limit" : "bad gRPC framing");
    return finished(st) ? VSR_ERR : VSR_OK;
}

void vsr_xp_stream_end(vsr_xp_stream_t *st)
{
    if (finished(st) || st->cancelled)
        return;
    st->ended = 1;
    if (!vsr__grpc_deframer_idle(&st->df)) {
        finish(st, VSR_GRPC_INVALID_ARGUMENT, "the stream ended inside a message");
        return;
    }
    drain(st);
}

void vsr_xp_stream_cancel(vsr_xp_stream_t *st)
{
    if (st->cancelled)
        return;
    st->cancelled = 1;
    vsr_session_cancel(st->sess);
}

void vsr_xp_stream_free(vsr_xp_stream_t *st)
{
    if (st == NULL)
        return;
    vsr_xp_stream_cancel(st);
    vsr_session_finish(st->sess);
    while (st->q_head) {
        queued_t *q = st->q_head;
        st->q_head = q->next;
        vsr_free(q);
    }
    vsr__grpc_deframer_free(&st->df);
    vsr_pool_free(&st->req_pool);
    vsr_pool_free(&st->msg_pool);
    ans_free(&st->ans);
    vsr_buf_free(&st->out);
    vsr_free(st);
}

vsr_session_t *vsr_xp_stream_session(const vsr_xp_stream_t *st)
{
    return st->sess;
}

int vsr_xp_stream_finished(const vsr_xp_stream_t *st)
{
    return finished(st);
}

void vsr_xp_stream_info(const vsr_xp_stream_t *st, vsr_xp_info_t *out)
{
    *out = st->info;
}
