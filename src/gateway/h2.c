/*
 * h2.c — HTTP/2 from clients: one nghttp2 server session per connection
 * (prior knowledge, `Upgrade: h2c`, or ALPN "h2" over TLS), each stream one
 * request of the same request layer as HTTP/1.1 (conn.c).
 *
 * This file keeps the transport: frames, flow control, a stream's queue,
 * the limits on header blocks and resets.  What a request is stays the
 * request layer's (request.c's phase machine): the verdict on a head before
 * its body (vsr__request_admit: no target, a declared length over the limit,
 * the key check), the refusal (vsr__request_refuse), whether a body is whole
 * (vsr__request_body_whole), dispatch and the answer.  An ext_proc
 * listener's streams are Process calls instead (xp.c, extproc/).
 *
 * Sans-IO on both sides: conn.c hands the session the bytes it read
 * (plaintext, below TLS when there is TLS) and the session gives back the
 * bytes to write through vsr__conn_send().  nghttp2 is never called from
 * inside one of its own callbacks: replies decided while a frame is being
 * received only mark the session for a flush, which runs once the receive
 * call has returned; replies decided elsewhere (upstream callbacks) are
 * flushed from the loop right after (vsr__conn_flush_soon).
 *
 * Backpressure, response side: a stream's body bytes wait in its `out`
 * queue until nghttp2 asks for them (the client's flow-control window), and
 * the session stops producing frames while the connection has more than
 * H2_WQ_HIGH bytes queued for the socket.  The request layer pauses the
 * upstream read when a stream's queue passes its high mark and resumes it
 * when nghttp2 has drained it below the low one — as over HTTP/1.1, memory
 * stays bounded when the client stops reading.  Request bodies are bounded
 * by the listener's body limit (routing needs the whole document).
 *
 * Hostile clients (docs/security.md, "Limits"):
 * - header blocks: fields and decoded bytes are counted as nghttp2 delivers
 *   them, so a block past the listener's limits gets 431, and one far past
 *   them is dropped (RST_STREAM) without more per-field work; a connection
 *   that keeps doing it gets GOAWAY(ENHANCE_YOUR_CALM);
 * - rapid reset: a stream is dispatched only once the receive call that
 *   completed it has returned, so a stream reset in the same read never
 *   reaches a backend; client RST_STREAMs drain a per-connection token
 *   bucket, and an empty bucket is GOAWAY(ENHANCE_YOUR_CALM);
 * - a key check on the head: a request without the right key gets its 401
 *   before its body, then RST_STREAM(NO_ERROR) stops the body;
 * - a paused stream (its queue passed the high mark because the client
 *   grants no window) is reset, its upstream call cancelled, when it stays
 *   paused for the listener's timeout; and the queued bytes of every stream
 *   of the process together have a cap, past which a stream that falls
 *   behind is reset.
 */
#include "gateway/gateway-int.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>

#define H2_WQ_HIGH (1024 * 1024)       /* stop framing above this many bytes queued for the socket */
#define H2_MAX_STREAMS 128              /* SETTINGS_MAX_CONCURRENT_STREAMS */
#define H2_STREAM_WINDOW (1024 * 1024)  /* SETTINGS_INITIAL_WINDOW_SIZE: request bodies */
#define H2_CONN_WINDOW (16 * 1024 * 1024)
#define H2_UNAUTH_BODY_MAX (64 * 1024) /* body bytes dropped after a 401 before the stream is reset */
#define H2_HEADER_SLACK (16 * 1024)     /* decoded bytes (and fields / 4) past the limits before a block is dropped */
#define H2_HEADER_STRIKES 4             /* streams refused for their headers before the connection is ended */
#define H2_RST_BURST 200                /* client RST_STREAMs a connection may send at once ... */
#define H2_RST_PER_SEC 100              /* ... and per second after that */
#define H2_MAX_CONTINUATIONS 8          /* CONTINUATION frames after one HEADERS (nghttp2, when it can) */
#define H2_QUEUE_PROCESS_MAX (64u * 1024 * 1024) /* every stream's queued response bytes, all connections */
#define H2_QUEUE_BEHIND (64 * 1024)     /* over the process cap, a stream holding this much is cut */

/* Response bytes queued in every stream of the process (all workers). */
static atomic_size_t h2_queued_total;

struct h2_stream_s {
    h2_sess_t *s;
    h2_stream_t *prev, *next;
    int32_t id;
    request_t *req;            /* NULL once the request is finished (or before it starts) */
    vsr_pool_t pool;           /* the request head's bytes */
    vsr_http_head_t head;
    vsr_slice_t authority;
    size_t head_bytes;
    int reject;                /* a limit was passed: answer this status (431, 413, 400, 401) */
    size_t n_fields;           /* every field delivered, cookie crumbs and dropped host included */
    size_t n_cookies;          /* cookie crumbs among head.headers: joined when the head is complete */
    uint64_t paused_since;     /* ms: the queue passed the high mark and has not drained below the low one */
    h2_stream_t *ready_next;   /* complete, waiting for the receive call to return before dispatch */
    /* response body waiting for nghttp2: copied, not a reference to the
     * upstream's receive buffer, so that a queue of small SSE events held
     * by a closed window pins its bytes, not one 64 KiB buffer per event */
    vsr_buf_t out;
    size_t out_off;
    unsigned eof : 1;          /* the response body is complete */
    unsigned deferred : 1;     /* nghttp2 waits for body bytes (resume_data when they come) */
    unsigned responded : 1;    /* HEADERS submitted */
    unsigned dispatched : 1;
    unsigned ready : 1;        /* on the session's ready list */
    unsigned rst_after : 1;    /* answered before its body: RST_STREAM(NO_ERROR) if the body goes on */
    unsigned answered : 1;     /* the reply's last frame is out */
    size_t dropped;            /* body bytes received after the reply and dropped */
    unsigned cut : 1;          /* reset by a limit: its request ends at the next flush */
    xp_call_t *xp;             /* an ext_proc listener's stream: its Process call */
    uint64_t xp_expired;       /* ms: the call ended on its deadline; the stream is reset once answered */
    nghttp2_nv *trailers;      /* sent after the body (vsr__h2_trailers), with their bytes in trailer_mem */
    size_t n_trailers;
    char *trailer_mem;
};

struct h2_sess_s {
    conn_t *c;
    const vsr_listener_conf_t *lc;
    nghttp2_session *ng;
    h2_stream_t *streams;
    size_t n_requests;         /* streams with a request in flight */
    int in_ng;                 /* inside an nghttp2 call: no re-entry, flush later */
    int dead;                  /* the connection is closing: nghttp2 is not called anymore */
    int goaway;                /* GOAWAY sent: the session ends once its streams are done */
    int ended;
    int calm;                  /* abusive: GOAWAY(ENHANCE_YOUR_CALM) after the current receive call */
    unsigned strikes;          /* streams refused for their header blocks */
    size_t n_paused;           /* streams with paused_since set */
    size_t n_cut;              /* streams with cut set and a request still attached */
    double rst_tokens;         /* the RST_STREAM budget (H2_RST_BURST, H2_RST_PER_SEC) */
    uint64_t rst_at_ms;
    h2_stream_t *ready, **ready_tail; /* streams to dispatch, in arrival order */
    worker_t *xp_worker;       /* an ext_proc listener's session: its streams are Process calls */
    uint64_t xp_check_at;      /* ms: no Process call's deadline comes before this (0: look now) */
};

/* ---- streams ---- */

static h2_stream_t *stream_new(h2_sess_t *s, int32_t id)
{
    h2_stream_t *st = vsr_calloc(1, sizeof(*st));
    st->s = s;
    st->id = id;
    vsr_pool_init(&st->pool);
    vsr_buf_init(&st->out, 0);
    st->head.content_length = -1;
    st->head.version_minor = 1;
    st->head.keep_alive = 1;
    st->next = s->streams;
    if (s->streams)
        s->streams->prev = st;
    s->streams = st;
    return st;
}

static size_t queued(const h2_stream_t *st);
static void unready(h2_stream_t *st);

static void stream_free(h2_stream_t *st)
{
    h2_sess_t *s = st->s;
    atomic_fetch_sub(&h2_queued_total, queued(st));
    if (st->paused_since)
        s->n_paused--;
    if (st->cut && st->req)
        s->n_cut--;
    unready(st);
    if (st->req) {
        request_t *req = st->req;
        st->req = NULL;
        s->n_requests--;
        vsr__request_reset(req); /* the client is gone: the upstream call is cancelled */
    }
    if (st->xp) {
        xp_call_t *x = st->xp;
        st->xp = NULL;
        s->n_requests--;
        vsr__xp_call_free(x);
    }
    vsr_free(st->trailers);
    vsr_free(st->trailer_mem);
    if (st->prev)
        st->prev->next = st->next;
    else
        s->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    vsr_buf_free(&st->out);
    vsr_pool_free(&st->pool);
    vsr_free(st);
}

static size_t queued(const h2_stream_t *st)
{
    return st->out.len - st->out_off;
}

/* Response bytes into a stream's queue, counted process-wide. */
static void queue_append(h2_stream_t *st, const char *p, size_t n)
{
    vsr_buf_append(&st->out, p, n);
    atomic_fetch_add(&h2_queued_total, n);
    if (queued(st) > VSR__H2_QUEUE_HIGH && !st->paused_since) {
        st->paused_since = vsr_now_ms(); /* the request layer pauses the upstream read now */
        st->s->n_paused++;
    }
}

/* The queue is emptied: a reset stream's bytes go. */
static void queue_drop(h2_stream_t *st)
{
    atomic_fetch_sub(&h2_queued_total, queued(st));
    vsr_buf_reset(&st->out);
    st->out_off = 0;
}

static void unpause(h2_stream_t *st)
{
    if (st->paused_since) {
        st->paused_since = 0;
        st->s->n_paused--;
    }
}

static void unready(h2_stream_t *st)
{
    h2_sess_t *s = st->s;
    if (!st->ready)
        return;
    st->ready = 0;
    for (h2_stream_t **pp = &s->ready; *pp; pp = &(*pp)->ready_next) {
        if (*pp == st) {
            *pp = st->ready_next;
            if (s->ready_tail == &st->ready_next)
                s->ready_tail = pp;
            break;
        }
    }
    st->ready_next = NULL;
}

/* The stream's request is complete: dispatched once the receive call that
 * completed it returns, unless the client has reset it by then. */
static void make_ready(h2_stream_t *st)
{
    h2_sess_t *s = st->s;
    st->dispatched = 1;
    st->ready = 1;
    st->ready_next = NULL;
    *s->ready_tail = st;
    s->ready_tail = &st->ready_next;
}

/* The client or vsr abuses the connection: it ends with GOAWAY(ENHANCE_YOUR_CALM). */
static void calm_down(h2_sess_t *s, const char *reason)
{
    if (s->calm)
        return;
    s->calm = 1;
    vsr_metrics_edge_refusal(vsr__conn_metrics(s->c), reason);
    /* GOAWAY(ENHANCE_YOUR_CALM) now, from inside the receive call: the
     * session then ignores the rest of what this read holds (new streams
     * included), so neither a refused header block nor nghttp2's own reset
     * limit can end the connection first with another code */
    nghttp2_session_terminate_session(s->ng, NGHTTP2_ENHANCE_YOUR_CALM);
}

/* A limit cuts the stream: RST_STREAM(CANCEL), never a clean end; its
 * request (and upstream call) ends at the next flush, not under a caller. */
static void stream_cut(h2_stream_t *st, const char *reason)
{
    h2_sess_t *s = st->s;
    if (st->cut || s->dead)
        return;
    st->cut = 1;
    st->eof = 1;
    queue_drop(st);
    unpause(st);
    if (st->req)
        s->n_cut++;
    vsr_metrics_edge_refusal(vsr__conn_metrics(s->c), reason);
    nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
    if (!s->in_ng)
        vsr__conn_flush_soon(s->c);
}

/* ---- nghttp2 callbacks ---- */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    h2_sess_t *s = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (s->calm)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* refused, its block skipped: GOAWAY follows */
    h2_stream_t *st = stream_new(s, f->hd.stream_id);
    nghttp2_session_set_stream_user_data(ng, f->hd.stream_id, st);
    return 0;
}

static vsr_slice_t copy_bytes(h2_stream_t *st, const uint8_t *p, size_t n)
{
    return vsr_pool_dup_slice(&st->pool, vsr_slice((const char *)p, n));
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    h2_sess_t *s = ud;
    VSR_UNUSED(flags);
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    h2_stream_t *st = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (st == NULL)
        return 0;
    if (f->headers.cat != NGHTTP2_HCAT_REQUEST) {
        /* trailers: nothing in them is used, but they are bounded as the head
         * is (they add to its count), and refused at once past it */
        st->head_bytes += namelen + valuelen + 4;
        st->n_fields++;
        if (st->head_bytes > s->lc->max_header_bytes || st->n_fields > s->lc->max_headers + 4) {
            if (++s->strikes > H2_HEADER_STRIKES)
                calm_down(s, "h2_header_abuse");
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        return 0;
    }
    vsr_http_head_t *h = &st->head;
    /* the same limits as an HTTP/1.1 head: field count and bytes (→ 431),
     * counted before any work on the field; far past them the block is
     * dropped (RST_STREAM) so that nghttp2 stops validating its fields */
    st->head_bytes += namelen + valuelen + 4;
    st->n_fields++;
    if (st->head_bytes > s->lc->max_header_bytes || st->n_fields > s->lc->max_headers + 4 || /* + the four pseudo-fields */
        st->n_fields >= VSR_HTTP_MAX_HEADERS) {
        if (st->reject != 431) {
            st->reject = 431;
            if (++s->strikes > H2_HEADER_STRIKES)
                calm_down(s, "h2_header_abuse");
        }
        if (s->calm || st->head_bytes > s->lc->max_header_bytes + H2_HEADER_SLACK ||
            st->n_fields > s->lc->max_headers + H2_HEADER_SLACK / 4)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return 0;
    }
    if (st->reject)
        return 0;
    vsr_slice_t n = vsr_slice((const char *)name, namelen);
    if (namelen > 0 && name[0] == ':') {
        /* nghttp2 has checked the pseudo-fields: known, once, before the others */
        if (vsr_slice_eq_cstr(n, ":method"))
            h->method = copy_bytes(st, value, valuelen);
        else if (vsr_slice_eq_cstr(n, ":path"))
            h->target = copy_bytes(st, value, valuelen);
        else if (vsr_slice_eq_cstr(n, ":authority"))
            st->authority = copy_bytes(st, value, valuelen);
        return 0;
    }
    /* :authority stands for host (RFC 9113 §8.3.1); a host field beside it is dropped
     * (pseudo-fields come first, so :authority is known by now) */
    if (st->authority.p && vsr_slice_eq_cstr(n, "host"))
        return 0;
    if (h->num_headers + 1 >= s->lc->max_headers || h->num_headers + 1 >= VSR_HTTP_MAX_HEADERS) {
        st->reject = 431;
        return 0;
    }
    if (vsr_slice_eq_cstr(n, "content-length")) {
        uint64_t cl;
        if (vsr_slice_to_u64(vsr_slice((const char *)value, valuelen), INT64_MAX, &cl) != VSR_OK) {
            st->reject = 400;
            return 0;
        }
        h->content_length = (int64_t)cl;
    }
    if (vsr_slice_eq_cstr(n, "cookie"))
        st->n_cookies++; /* split crumbs are joined again for HTTP/1.1 (RFC 9113 §8.2.3), once, at the end */
    h->headers[h->num_headers].name = copy_bytes(st, name, namelen);
    h->headers[h->num_headers].value = copy_bytes(st, value, valuelen);
    h->num_headers++;
    return 0;
}

/* Cookie crumbs become one field, in the place of the first, in one copy. */
static void join_cookies(h2_stream_t *st)
{
    vsr_http_head_t *h = &st->head;
    size_t total = 0, first = SIZE_MAX;
    for (size_t i = 0; i < h->num_headers; i++) {
        if (vsr_slice_eq_cstr(h->headers[i].name, "cookie")) {
            total += h->headers[i].value.len + 2;
            if (first == SIZE_MAX)
                first = i;
        }
    }
    char *joined = vsr_pool_alloc(&st->pool, total);
    size_t len = 0, k = 0;
    for (size_t i = 0; i < h->num_headers; i++) {
        if (vsr_slice_eq_cstr(h->headers[i].name, "cookie")) {
            if (len) {
                memcpy(joined + len, "; ", 2);
                len += 2;
            }
            memcpy(joined + len, h->headers[i].value.p, h->headers[i].value.len);
            len += h->headers[i].value.len;
            if (i != first)
                continue;
        }
        h->headers[k++] = h->headers[i];
    }
    h->num_headers = k;
    for (size_t i = 0; i < h->num_headers; i++)
        if (vsr_slice_eq_cstr(h->headers[i].name, "cookie"))
            h->headers[i].value = vsr_slice(joined, len);
}

/* The request head is complete: hand it to the request layer. */
static void start_request(h2_sess_t *s, h2_stream_t *st, int end_stream)
{
    vsr_http_head_t *h = &st->head;
    if (st->n_cookies > 1)
        join_cookies(st);
    if (st->authority.p) {
        /* host first, so header lookups find it as they would over HTTP/1.1 */
        memmove(&h->headers[1], &h->headers[0], h->num_headers * sizeof(h->headers[0]));
        h->headers[0].name = VSR_SLICE_LIT("host");
        h->headers[0].value = st->authority;
        h->num_headers++;
    }
    h->has_body = !end_stream;
    if (s->xp_worker) { /* a Process call: its messages are the stream's DATA */
        s->n_requests++;
        st->dispatched = 1;
        st->xp = vsr__xp_call_open(s->c, s->xp_worker, s->lc, st, h);
        s->xp_check_at = 0; /* its grpc-timeout may come first */
        if (end_stream)
            vsr__xp_call_end(st->xp);
        return;
    }
    st->req = vsr__request_open(s->c, st, h);
    s->n_requests++;
    st->reject = vsr__request_admit(st->req, st->reject, !end_stream); /* the request layer's verdict */
    if (st->reject) {
        st->dispatched = 1;
        /* a client without the key is refused the body that follows past a
         * small allowance (a short body ends the stream cleanly: curl before
         * 8.1 fails a stream reset after its response); a client with the
         * key may send (and vsr drops) the rest of a body over a limit */
        st->rst_after = !end_stream && st->reject == 401;
        vsr__request_refuse(st->req, st->reject);
        return;
    }
    if (end_stream)
        make_ready(st);
}

/* A client RST_STREAM takes a token; an empty bucket ends the connection. */
static void count_reset(h2_sess_t *s)
{
    uint64_t now = vsr_now_ms();
    s->rst_tokens += (double)(now - s->rst_at_ms) * H2_RST_PER_SEC / 1000.0;
    if (s->rst_tokens > H2_RST_BURST)
        s->rst_tokens = H2_RST_BURST;
    s->rst_at_ms = now;
    s->rst_tokens -= 1;
    if (s->rst_tokens < 0)
        calm_down(s, "h2_rapid_reset");
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    h2_sess_t *s = ud;
    if (f->hd.type == NGHTTP2_RST_STREAM) {
        count_reset(s);
        return 0;
    }
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    h2_stream_t *st = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (st == NULL)
        return 0;
    int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        start_request(s, st, end);
        return 0;
    }
    if (st->xp) {
        if (end)
            vsr__xp_call_end(st->xp); /* Envoy closed its side (DATA, or trailers) */
        return 0;
    }
    if (end && st->req && !st->dispatched) {
        if (!vsr__request_body_whole(st->req)) {
            st->dispatched = 1;
            vsr__request_reject(st->req, 400); /* RFC 9113 §8.1.1: malformed */
        } else {
            make_ready(st);
        }
    }
    return 0;
}

/* A reply that went out before the request's body (401): once it is out,
 * a body that goes on past H2_UNAUTH_BODY_MAX is refused with
 * RST_STREAM(NO_ERROR) (RFC 9113 §8.1) instead of being read and dropped. */
static void refuse_body(nghttp2_session *ng, h2_stream_t *st)
{
    if (st->rst_after && st->answered && st->dropped > H2_UNAUTH_BODY_MAX &&
        !nghttp2_session_get_stream_remote_close(ng, st->id)) {
        st->rst_after = 0;
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    }
}

static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
    VSR_UNUSED(ud);
    if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    h2_stream_t *st = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (st) {
        st->answered = 1;
        refuse_body(ng, st);
        /* a Process call that ended on its deadline: Envoy's side, still
         * open, is closed for it (RFC 9113 §8.1: a complete answer, then
         * RST_STREAM(NO_ERROR)) so that the stream is freed now */
        if (st->xp_expired && !nghttp2_session_get_stream_remote_close(ng, st->id))
            nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud)
{
    VSR_UNUSED(flags);
    VSR_UNUSED(ud);
    h2_stream_t *st = nghttp2_session_get_stream_user_data(ng, id);
    if (st && st->xp) {
        vsr__xp_call_data(st->xp, (const char *)data, len);
        return 0;
    }
    if (st && st->rst_after) {
        st->dropped += len;
        refuse_body(ng, st);
        return 0;
    }
    if (st == NULL || st->req == NULL || st->dispatched)
        return 0; /* the stream was answered already: its remaining body is dropped */
    if (vsr__request_body(st->req, (const char *)data, len) != VSR_OK) {
        st->dispatched = 1;
        vsr__request_reject(st->req, 413);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *ud)
{
    VSR_UNUSED(error_code);
    VSR_UNUSED(ud);
    h2_stream_t *st = nghttp2_session_get_stream_user_data(ng, id);
    if (st == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    stream_free(st); /* a request still attached was reset by the client */
    return 0;
}

/* The body's last DATA frame does not end the stream: the trailers do
 * (nghttp2 lets them be submitted from here). */
static void send_trailers(nghttp2_session *ng, h2_stream_t *st, uint32_t *data_flags)
{
    *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    int rc = nghttp2_submit_trailer(ng, st->id, st->trailers, st->n_trailers);
    if (rc != 0)
        vsr_log_debug("gateway", "h2: cannot submit trailers: %s", nghttp2_strerror(rc));
}

/* nghttp2 asks for response body bytes, at most `len` (the window allows). */
static ssize_t read_body(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *data_flags,
                         nghttp2_data_source *src, void *ud)
{
    VSR_UNUSED(ng);
    VSR_UNUSED(id);
    VSR_UNUSED(ud);
    h2_stream_t *st = src->ptr;
    size_t avail = queued(st);
    if (avail == 0 && !st->eof) {
        st->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = VSR_MIN(avail, len);
    if (n == 0) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF; /* the end, and nothing (more) before it */
        if (st->trailers)
            send_trailers(ng, st, data_flags);
        return 0;
    }
    memcpy(buf, st->out.data + st->out_off, n);
    st->out_off += n;
    atomic_fetch_sub(&h2_queued_total, n);
    if (st->out_off == st->out.len) {
        vsr_buf_reset(&st->out);
        st->out_off = 0;
    } else if (st->out_off >= VSR__H2_QUEUE_LOW) {
        vsr_buf_consume(&st->out, st->out_off); /* keeps the queue from creeping forward */
        st->out_off = 0;
    }
    if (st->eof && queued(st) == 0) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        if (st->trailers)
            send_trailers(ng, st, data_flags);
    }
    if (queued(st) < VSR__H2_QUEUE_LOW)
        unpause(st);
    if (st->req && queued(st) < VSR__H2_QUEUE_LOW)
        vsr__request_resume(st->req);
    return (ssize_t)n;
}

/* ---- the session ---- */

/* Frames out to the connection, as many as the socket's queue allows.  They
 * are gathered into receive-sized buffers from the thread's cache, which the
 * writes give back: no allocation per flush. */
/* Streams paused past the listener's timeout are cut; Process calls past
 * theirs end; cut streams' requests end (their upstream calls cancelled).
 * Returns the ms until the next such deadline, 0 when there is none. */
static uint64_t sweep(h2_sess_t *s)
{
    uint64_t next = 0;
    if (s->n_paused) {
        uint64_t now = vsr_now_ms(), limit = s->lc->timeout_ms;
        for (h2_stream_t *st = s->streams; st; st = st->next) {
            if (!st->paused_since)
                continue;
            uint64_t age = now - st->paused_since;
            if (age >= limit) {
                stream_cut(st, "h2_stream_stalled");
                continue;
            }
            if (next == 0 || limit - age < next)
                next = limit - age;
        }
    }
    if (s->xp_worker && s->n_requests) {
        /* Process calls: silent past the listener's timeout (or past
         * Envoy's grpc-timeout) they end with DEADLINE_EXCEEDED; one whose
         * answer cannot go out within another timeout (a peer that does not
         * read) is cut */
        uint64_t now = vsr_now_ms(), limit = s->lc->timeout_ms, xp_next = 0;
        /* activity only moves deadlines later, so the streams are walked
         * when the earliest one seen last time is due, not at every flush */
        for (h2_stream_t *st = now >= s->xp_check_at ? s->streams : NULL; st; st = st->next) {
            if (st->xp == NULL || st->cut)
                continue;
            uint64_t left;
            if (st->xp_expired) {
                if (st->answered)
                    continue;
                if (now - st->xp_expired >= limit) {
                    stream_cut(st, "extproc_stream_unread");
                    continue;
                }
                left = limit - (now - st->xp_expired);
            } else {
                left = vsr__xp_call_check(st->xp, now);
                if (left == 0) {
                    st->xp_expired = now ? now : 1;
                    vsr_metrics_edge_refusal(vsr__conn_metrics(s->c), "extproc_stream_idle");
                    left = limit;
                }
            }
            if (left != UINT64_MAX && (xp_next == 0 || left < xp_next))
                xp_next = left;
        }
        if (now >= s->xp_check_at)
            s->xp_check_at = now + (xp_next ? xp_next : limit);
        xp_next = s->xp_check_at - now;
        if (next == 0 || xp_next < next)
            next = xp_next;
    }
    if (s->n_cut) {
        for (h2_stream_t *st = s->streams; st; st = st->next) {
            if (st->cut && st->req) {
                request_t *req = st->req;
                st->req = NULL;
                s->n_requests--;
                s->n_cut--;
                vsr__request_reset(req); /* visibly cut: the upstream call is cancelled */
            }
        }
    }
    return next;
}

/* Complete streams go to the request layer, now that no nghttp2 call is
 * running; a stream reset in the meantime never got this far. */
static void dispatch_ready(h2_sess_t *s)
{
    s->in_ng++; /* replies decided now go out with the flush that follows, as from a callback */
    while (s->ready && !s->dead) {
        h2_stream_t *st = s->ready;
        unready(st);
        if (st->req && !st->cut)
            vsr__request_dispatch(st->req);
    }
    s->in_ng--;
}

void vsr__h2_flush(h2_sess_t *s)
{
    if (s->dead || s->in_ng || s->ended)
        return;
    uint64_t wake = sweep(s);
    vsr_rbuf_t *rb = NULL;
    size_t used = 0;
    s->in_ng++;
    while (vsr__conn_queued(s->c) + used < H2_WQ_HIGH) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(s->ng, &p);
        if (n < 0) {
            vsr_log_debug("gateway", "h2: %s", nghttp2_strerror((int)n));
            s->dead = 1;
            break;
        }
        if (n == 0)
            break;
        if (rb && used + (size_t)n > VSR_RBUF_SIZE) {
            vsr__conn_send_rbuf(s->c, rb, used);
            rb = NULL;
        }
        if ((size_t)n > VSR_RBUF_SIZE) {
            /* a header block bigger than a buffer: rare, sent from the heap */
            vsr_buf_t big;
            vsr_buf_init(&big, 0);
            vsr_buf_append(&big, p, (size_t)n);
            vsr__conn_send(s->c, &big);
            continue;
        }
        if (rb == NULL) {
            rb = vsr_rbuf_get();
            used = 0;
        }
        memcpy(rb->data + used, p, (size_t)n);
        used += (size_t)n;
    }
    s->in_ng--;
    if (rb)
        vsr__conn_send_rbuf(s->c, rb, used);
    if (s->dead) {
        vsr__conn_end(s->c, 0);
        return;
    }
    if (!nghttp2_session_want_read(s->ng) && !nghttp2_session_want_write(s->ng)) {
        s->ended = 1;
        vsr__conn_end(s->c, 1); /* GOAWAY exchanged, every stream done */
        return;
    }
    if (wake)
        vsr__conn_flush_after(s->c, wake);
}

h2_sess_t *vsr__h2_new(conn_t *c, const vsr_listener_conf_t *lc)
{
    h2_sess_t *s = vsr_calloc(1, sizeof(*s));
    s->c = c;
    s->lc = lc;
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    s->ready_tail = &s->ready;
    s->rst_tokens = H2_RST_BURST;
    s->rst_at_ms = vsr_now_ms();
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    /* nghttp2's own bounds where the library has them, behind vsr's (which
     * come first and say ENHANCE_YOUR_CALM): a backstop, never the only one */
#if defined(VSR_HAVE_NGHTTP2_RESET_RATE_LIMIT)
    nghttp2_option_set_stream_reset_rate_limit(opt, 2 * H2_RST_BURST, 2 * H2_RST_PER_SEC);
#endif
#if defined(VSR_HAVE_NGHTTP2_MAX_CONTINUATIONS)
    nghttp2_option_set_max_continuations(opt, H2_MAX_CONTINUATIONS);
#endif
    int rc = nghttp2_session_server_new2(&s->ng, cbs, s, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0) {
        vsr_free(s);
        return NULL;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, lc->max_header_bytes},
    };
    nghttp2_submit_settings(s->ng, NGHTTP2_FLAG_NONE, iv, VSR_ARRAY_LEN(iv));
    nghttp2_session_set_local_window_size(s->ng, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW);
    return s;
}

/* HTTP2-Settings is base64url without padding (RFC 7540 §3.2.1). */
static int b64url_decode(vsr_slice_t in, uint8_t *out, size_t cap, size_t *outlen)
{
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t n = 0;
    for (size_t i = 0; i < in.len; i++) {
        unsigned char ch = (unsigned char)in.p[i];
        int v;
        if (ch >= 'A' && ch <= 'Z')
            v = ch - 'A';
        else if (ch >= 'a' && ch <= 'z')
            v = ch - 'a' + 26;
        else if (ch >= '0' && ch <= '9')
            v = ch - '0' + 52;
        else if (ch == '-')
            v = 62;
        else if (ch == '_')
            v = 63;
        else if (ch == '=')
            break; /* tolerated padding ends the data */
        else
            return VSR_ERR_INVALID;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return VSR_ERR_TOO_BIG;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    *outlen = n;
    return VSR_OK;
}

int vsr__h2_upgrade(h2_sess_t *s, vsr_slice_t settings, request_t *req, int is_head, h2_stream_t **stp)
{
    uint8_t payload[6 * 32];
    size_t n = 0;
    if (b64url_decode(settings, payload, sizeof(payload), &n) != VSR_OK || n % 6 != 0)
        return VSR_ERR_INVALID;
    h2_stream_t *st = stream_new(s, 1);
    if (nghttp2_session_upgrade2(s->ng, payload, n, is_head, st) != 0) {
        stream_free(st);
        return VSR_ERR_INVALID;
    }
    st->req = req;
    st->dispatched = 1;
    s->n_requests++;
    *stp = st;
    return VSR_OK;
}

int vsr__h2_feed(h2_sess_t *s, const char *p, size_t n)
{
    if (s->dead)
        return VSR_ERR;
    if (s->calm)
        return VSR_ERR; /* GOAWAY is queued or out: nothing more is read */
    s->in_ng++;
    ssize_t r = nghttp2_session_mem_recv(s->ng, (const uint8_t *)p, n);
    s->in_ng--;
    if (r < 0) {
        vsr_log_debug("gateway", "h2: %s", nghttp2_strerror((int)r));
        /* a connection error: nghttp2 has queued GOAWAY; send it, then close */
        vsr__h2_flush(s);
        return VSR_ERR;
    }
    if (s->calm) {
        /* abuse: GOAWAY, then the connection closes */
        nghttp2_session_terminate_session(s->ng, NGHTTP2_ENHANCE_YOUR_CALM);
        vsr__h2_flush(s); /* streams not dispatched yet never are: the connection closes */
        return VSR_ERR;
    }
    dispatch_ready(s);
    vsr__h2_flush(s);
    return VSR_OK;
}

void vsr__h2_goaway(h2_sess_t *s)
{
    if (s->dead || s->goaway)
        return;
    s->goaway = 1;
    nghttp2_submit_goaway(s->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(s->ng),
                          NGHTTP2_NO_ERROR, NULL, 0);
    vsr__h2_flush(s);
}

int vsr__h2_active(const h2_sess_t *s)
{
    if (s->n_requests > 0)
        return 1;
    for (const h2_stream_t *st = s->streams; st; st = st->next)
        if (queued(st) > 0 || (st->responded && !st->eof))
            return 1;
    return 0;
}

void vsr__h2_close(h2_sess_t *s)
{
    s->dead = 1;
    while (s->streams)
        stream_free(s->streams); /* cancels what is still in flight */
}

void vsr__h2_free(h2_sess_t *s)
{
    if (s == NULL)
        return;
    vsr__h2_close(s);
    nghttp2_session_del(s->ng);
    vsr_free(s);
}

/* ---- the response side, for the request layer ---- */

static void after_submit(h2_sess_t *s)
{
    if (!s->in_ng)
        vsr__conn_flush_soon(s->c);
}

void vsr__h2_respond(h2_stream_t *st, const vsr__resp_head_t *rh, const char *body, size_t body_len, int more)
{
    h2_sess_t *s = st->s;
    if (s->dead || st->responded)
        return;
    st->responded = 1;
    size_t n = rh->n_fields + 2;
    nghttp2_nv *nv = vsr_malloc(sizeof(*nv) * n);
    size_t k = 0;
    char status[8], clen[24];
    snprintf(status, sizeof(status), "%03d", rh->status % 1000);
    nv[k++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)status, 7, 3, NGHTTP2_NV_FLAG_NONE};
    /* HTTP/2 field names are lower case (RFC 9113 §8.2.1): lowered copies */
    size_t names = 0;
    for (size_t i = 0; i < rh->n_fields; i++)
        names += rh->fields[i].name.len;
    char *lower = vsr_malloc(names + 1);
    char *q = lower;
    for (size_t i = 0; i < rh->n_fields; i++) {
        vsr_slice_t nm = rh->fields[i].name;
        for (size_t j = 0; j < nm.len; j++)
            q[j] = (char)((nm.p[j] >= 'A' && nm.p[j] <= 'Z') ? nm.p[j] + 32 : nm.p[j]);
        nv[k++] = (nghttp2_nv){(uint8_t *)q, (uint8_t *)rh->fields[i].value.p, nm.len, rh->fields[i].value.len,
                               NGHTTP2_NV_FLAG_NONE};
        q += nm.len;
    }
    if (rh->content_length >= 0) {
        int cl = snprintf(clen, sizeof(clen), "%lld", (long long)rh->content_length);
        nv[k++] = (nghttp2_nv){(uint8_t *)"content-length", (uint8_t *)clen, 14, (size_t)cl, NGHTTP2_NV_FLAG_NONE};
    }
    if (body_len)
        queue_append(st, body, body_len);
    st->eof = !more;
    int rc;
    if (!more && body_len == 0) {
        rc = nghttp2_submit_response(s->ng, st->id, nv, k, NULL);
    } else {
        nghttp2_data_provider dp = {.source.ptr = st, .read_callback = read_body};
        rc = nghttp2_submit_response(s->ng, st->id, nv, k, &dp);
    }
    vsr_free(lower);
    vsr_free(nv);
    if (rc != 0)
        vsr_log_debug("gateway", "h2: cannot submit a response: %s", nghttp2_strerror(rc));
    after_submit(s);
}

static void wake(h2_stream_t *st)
{
    if (st->deferred) {
        st->deferred = 0;
        nghttp2_session_resume_data(st->s->ng, st->id);
    }
    after_submit(st->s);
}

void vsr__h2_body(h2_stream_t *st, const char *p, size_t n)
{
    if (st->s->dead || st->eof)
        return;
    if (queued(st) >= H2_QUEUE_BEHIND && atomic_load(&h2_queued_total) + n > H2_QUEUE_PROCESS_MAX) {
        stream_cut(st, "h2_queue_memory"); /* the process holds too much for clients that do not read */
        return;
    }
    queue_append(st, p, n);
    wake(st);
}

void vsr__h2_end(h2_stream_t *st)
{
    if (st->s->dead || st->eof)
        return;
    st->eof = 1;
    wake(st);
}

void vsr__h2_reset(h2_stream_t *st)
{
    if (st->s->dead)
        return;
    st->eof = 1;
    queue_drop(st);
    unpause(st);
    nghttp2_submit_rst_stream(st->s->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    after_submit(st->s);
}

size_t vsr__h2_queued(const h2_stream_t *st)
{
    return queued(st);
}

void vsr__h2_detach(h2_stream_t *st)
{
    if (st->req) {
        if (st->cut)
            st->s->n_cut--;
        st->req = NULL;
        st->s->n_requests--;
    }
}

void vsr__h2_trailers(h2_stream_t *st, const vsr_http_header_t *f, size_t n)
{
    if (st->s->dead || st->eof || st->trailers)
        return;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += f[i].name.len + f[i].value.len;
    st->trailers = vsr_malloc(sizeof(nghttp2_nv) * (n ? n : 1));
    st->trailer_mem = vsr_malloc(bytes + 1);
    char *q = st->trailer_mem;
    for (size_t i = 0; i < n; i++) {
        char *name = q;
        for (size_t j = 0; j < f[i].name.len; j++)
            *q++ = (char)((f[i].name.p[j] >= 'A' && f[i].name.p[j] <= 'Z') ? f[i].name.p[j] + 32 : f[i].name.p[j]);
        char *value = q;
        if (f[i].value.len)
            memcpy(q, f[i].value.p, f[i].value.len);
        q += f[i].value.len;
        st->trailers[i] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, f[i].name.len, f[i].value.len,
                                       NGHTTP2_NV_FLAG_NONE};
    }
    st->n_trailers = n;
    st->eof = 1;
    wake(st);
}

void vsr__h2_extproc(h2_sess_t *s, worker_t *w)
{
    s->xp_worker = w;
}
