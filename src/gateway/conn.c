/*
 * conn.c — one client connection and the requests on it.
 *
 * Requests on a connection are answered strictly in order: when a request's
 * head and body are in, the parser is paused and any pipelined bytes wait in
 * `pending` (bounded; reading stops when it is full, the client's FIN still
 * watched) until the response has been handed to the socket.  A client's
 * EOF while a request is in flight ends it at once (read_cb).  Request
 * bodies are buffered (bounded by the listener's body limit) because
 * routing needs the whole JSON document.
 * Responses stream: upstream body bytes are written to the client straight
 * from the upstream's receive buffers, and a client that reads slowly pauses
 * the upstream read (high/low watermarks), so memory stays bounded.
 */
#include "gateway/request-int.h"

#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#define PENDING_MAX (1024 * 1024)   /* pipelined bytes held while a request is in flight */
#define WQ_HIGH (1024 * 1024)       /* pause the upstream above this many queued bytes */
#define WQ_LOW (256 * 1024)         /* ... and resume below this */
#define HELD_BUFS 16                /* relayed body pieces' buffers held for one write (HTTP/1.x) */
#define LINGER_MS 5000              /* how long unread input is drained after a final reply */
#define PARSER_POOL 64              /* request parsers a worker keeps for its connections' next requests */

struct conn_s {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_timer_t *flush_timer;       /* HTTP/2's delayed flush (its sweep's next deadline): made on first use */
    worker_t *w;
    listener_t *l;
    conn_t *prev, *next;
    conn_t *post_prev, *post_next; /* on the worker's list of flushes due once the current callback is over */
    vsr_http_parser_t *parser;     /* NULL between requests: taken again by the next bytes (conn_parser) */
    vsr_buf_t pending;
    request_t *req;
    size_t wq_bytes;
    int pending_closes;
    unsigned closing : 1;
    unsigned reading : 1;
    unsigned busy : 1;             /* a request is complete and being answered */
    unsigned close_after_write : 1;
    unsigned doomed : 1;           /* a write failed to start: closed from the timer */
    unsigned lingering : 1;        /* the last reply is out: draining input until EOF */
    unsigned identity_trusted : 1; /* identity headers from this peer are trusted */
    unsigned counted : 1;          /* in the active-connections gauge */
    unsigned sniff : 1;            /* no request yet: the HTTP/2 preface (prior knowledge) is recognised */
    unsigned tls_open : 1;         /* the TLS handshake is done */
    unsigned flush_armed : 1;      /* posted: on the worker's list (post_*) */
    unsigned peer_eof : 1;         /* the client half-closed with its whole answer sent: closed once it ends */
    unsigned out_paused : 1;       /* over the output budget: no request is read or parsed until it drains */
    unsigned stalled : 1;          /* the timer runs for a client that does not read its replies */
    unsigned deadline_armed : 1;   /* the timer runs for the request-head or request-body deadline */
    unsigned tkind : 3;            /* what the timer is wanted for (ctimer_set), T_NONE = nothing */
    uint64_t tdue;                 /* ... and the loop time it is wanted at */
    uint64_t req_start_ms;         /* the current request's first byte was taken (its head deadline runs) */
    uint64_t body_start_ms;        /* ... and its head was complete (its body deadline runs); 0 = not yet */
    vsr_tls_t *tls;                /* a TLS listener's: between the socket and the protocol */
    h2_sess_t *h2;                 /* the connection speaks HTTP/2: every request is a stream of it */
    struct fin_watch_s *fin;       /* reads stopped at PENDING_MAX: the client's FIN is watched (fin_watch) */
    /* HTTP/1.x: the response head, held to go out with the first body bytes */
    char *held_head;
    size_t held_len;
    /* ... and the relayed body pieces since the last write, held until the
     * backend read that brought them is over (vsr__conn_read_end), or the
     * connection's next write, so the pieces of one read go out in one
     * write; the posted flush is the backstop */
    struct wop_s *held_op;         /* the write that carries them; the other pieces' ops chained to it */
    uv_buf_t held_bufs[HELD_BUFS];
    unsigned n_held_bufs;
};

typedef struct wop_s {
    uv_write_t w;
    struct wop_s *next_free;
    struct wop_s *chain; /* more ops whose bytes this write carries: released with it */
    conn_t *c;
    vsr_rbuf_t *rb;   /* a relayed body slice's buffer, unref'd when written */
    char *heap;       /* a head or local reply built for this write, freed when written */
    size_t bytes;
    char chunk[24];
} wop_t;

static void conn_close(conn_t *c);
static void conn_handle_closed(conn_t *c);
static void conn_process(conn_t *c);
static void conn_post(conn_t *c);
static void conn_unpost(conn_t *c);

/* ---- the connection's timer ----
 * One timer serves every wait of a connection; tkind says which.  It is a
 * lazy timer (upstream.h): stopping it only notes that nothing is wanted, so
 * a keep-alive request's stop and the idle timeout armed again after it cost
 * no timer-heap update. */
enum { T_NONE, T_STALL, T_LINGER, T_DOOMED, T_IDLE, T_SOON };

static void ctimer_cb(uv_timer_t *t);

static void ctimer_set(conn_t *c, unsigned kind, uint64_t ms)
{
    c->tkind = kind & 7;
    vsr_timer_want(&c->timer, ctimer_cb, &c->tdue, ms);
}

static void ctimer_stop(conn_t *c)
{
    c->tkind = T_NONE;
}

/* ---- write operations ---- */

static wop_t *wop_get(conn_t *c)
{
    worker_t *w = c->w;
    wop_t *op = w->wop_free;
    if (op)
        w->wop_free = op->next_free;
    else
        op = vsr_malloc(sizeof(*op));
    op->w.data = op;
    op->c = c;
    op->rb = NULL;
    op->heap = NULL;
    op->chain = NULL;
    op->bytes = 0;
    return op;
}

static void wop_put(worker_t *w, wop_t *op)
{
    while (op) {
        wop_t *next = op->chain;
        vsr_rbuf_unref(op->rb);
        vsr_free(op->heap);
        op->next_free = w->wop_free;
        w->wop_free = op;
        op = next;
    }
}

static void linger_timeout_cb(uv_timer_t *t)
{
    conn_close(t->data);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    conn_t *c = req->data;
    vsr_free(req); /* a close cancels it (UV_ECANCELED) before the connection's close callbacks */
    if (status < 0 && !c->closing)
        conn_close(c);
}

static void set_reading(conn_t *c, int on);

/* A client that does not read what it is sent: past WQ_HIGH queued bytes the
 * upstream read is paused (or, between requests, no further request is
 * taken), and the client has the listener's timeout to drain below WQ_LOW;
 * then the connection is closed (a response in flight is visibly cut, its
 * upstream call cancelled).  Queued memory per connection stays about
 * WQ_HIGH plus one upstream read. */
static void stall_cb(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (!c->stalled)
        return;
    vsr_metrics_client_timeout(c->w->metrics, "write");
    vsr_log_debug("gateway", "client read nothing of %zu queued bytes for %llu ms: closing", c->wq_bytes,
                  (unsigned long long)c->l->conf->timeout_ms);
    conn_close(c);
}

static void stall_arm(conn_t *c)
{
    if (c->stalled || c->closing || c->doomed || c->lingering)
        return;
    c->stalled = 1;
    c->deadline_armed = 0;
    ctimer_set(c, T_STALL, c->l->conf->timeout_ms);
}

static void stall_clear(conn_t *c)
{
    if (!c->stalled)
        return;
    c->stalled = 0;
    if (!c->closing && !c->doomed && !c->lingering)
        ctimer_stop(c);
}

/* The final reply is written: send FIN and drain what the client still sends
 * (the rest of a rejected body) until it closes or LINGER_MS pass.  Closing
 * with unread input would make the kernel answer with RST, and the client
 * could lose the reply it has not read yet (nginx's lingering close). */
static void conn_linger(conn_t *c)
{
    if (c->closing || c->lingering)
        return;
    c->lingering = 1;
    c->stalled = 0;
    uv_shutdown_t *req = vsr_malloc(sizeof(*req)); /* once per connection at most: not in conn_t */
    req->data = c;
    if (uv_shutdown(req, (uv_stream_t *)&c->tcp, shutdown_cb) < 0) {
        vsr_free(req);
        conn_close(c);
        return;
    }
    ctimer_set(c, T_LINGER, LINGER_MS);
    set_reading(c, 1);
}

static void write_cb(uv_write_t *uw, int status)
{
    wop_t *op = uw->data;
    conn_t *c = op->c;
    c->wq_bytes -= op->bytes;
    wop_put(c->w, op);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c); /* the client went away: cancels the upstream call */
        return;
    }
    if (c->req && c->wq_bytes < WQ_LOW && vsr__request_unpause(c->req))
        stall_clear(c);
    if (c->h2 && c->wq_bytes < WQ_LOW)
        vsr__h2_flush(c->h2);
    if (c->close_after_write && c->wq_bytes == 0)
        conn_linger(c);
    else if (c->out_paused && c->wq_bytes < WQ_LOW) {
        /* the client read its replies: its next requests are taken again */
        c->out_paused = 0;
        stall_clear(c);
        set_reading(c, !c->peer_eof && c->pending.len < PENDING_MAX);
        conn_process(c);
    }
}

static void doomed_cb(uv_timer_t *t)
{
    conn_close(t->data);
}

static void conn_doom(conn_t *c)
{
    if (!c->closing && !c->doomed) {
        c->doomed = 1;
        c->stalled = 0;
        ctimer_set(c, T_DOOMED, 0);
    }
}

/* Hands op's bytes (op->bytes of them, in bufs) to the socket.  What the
 * socket takes at once is written here without a write request: a queued
 * request's completion makes libuv drop POLLOUT, which costs an epoll_ctl
 * per response even when the write never waited.  The rest is queued, and
 * op goes with it; a write done at once releases op now.  Returns < 0 when
 * the write could not be queued (op released). */
static int conn_send_op(conn_t *c, wop_t *op, uv_buf_t *bufs, unsigned n)
{
    uv_stream_t *s = (uv_stream_t *)&c->tcp;
    size_t left = op->bytes;
    if (s->write_queue_size == 0 && n <= HELD_BUFS) {
        int k = uv_try_write(s, bufs, n);
        if (k > 0) {
            left -= (size_t)k;
            if (left == 0) {
                wop_put(c->w, op);
                return 0;
            }
            /* the rest, from where the socket stopped */
            size_t skip = (size_t)k;
            while (skip >= bufs[0].len) {
                skip -= bufs[0].len;
                bufs++;
                n--;
            }
            uv_buf_t rest[HELD_BUFS];
            memcpy(rest, bufs, n * sizeof(*bufs));
            rest[0].base += skip;
            rest[0].len -= skip;
            op->bytes = left;
            if (uv_write(&op->w, s, rest, n, write_cb) < 0) {
                wop_put(c->w, op);
                return -1;
            }
            c->wq_bytes += left;
            return 0;
        }
        if (k == 0 && left == 0) {
            wop_put(c->w, op);
            return 0;
        }
    }
    if (uv_write(&op->w, s, bufs, n, write_cb) < 0) {
        wop_put(c->w, op);
        return -1;
    }
    c->wq_bytes += left;
    return 0;
}

/* Writes the ciphertext TLS has produced (handshake messages included). */
static void tls_flush_out(conn_t *c)
{
    size_t n = vsr_tls_conn_pending_out(c->tls);
    if (n == 0 || c->closing || c->doomed)
        return;
    wop_t *op = wop_get(c);
    op->heap = vsr_malloc(n);
    op->bytes = vsr_tls_conn_take_out(c->tls, op->heap, n);
    uv_buf_t ub = uv_buf_init(op->heap, (unsigned)op->bytes);
    if (conn_send_op(c, op, &ub, 1) < 0)
        conn_doom(c);
}

/* Queues a write.  Never closes the connection synchronously, so callers may
 * go on using the request after it; a failure closes it from the timer. */
static void held_flush(conn_t *c);

static void conn_write(conn_t *c, wop_t *op, uv_buf_t *bufs, unsigned n)
{
    if (c->held_op)
        held_flush(c); /* the held pieces go first */
    for (unsigned i = 0; i < n; i++)
        op->bytes += bufs[i].len;
    if (c->req)
        vsr__request_sent(c->req, op->bytes);
    if (c->tls && !c->closing && !c->doomed) {
        /* encrypted now: the plaintext's buffers are released at once */
        for (unsigned i = 0; i < n; i++)
            if (vsr_tls_conn_write(c->tls, bufs[i].base, bufs[i].len) != VSR_OK) {
                conn_doom(c);
                break;
            }
        wop_put(c->w, op);
        tls_flush_out(c);
        return;
    }
    if (c->closing || c->doomed) {
        wop_put(c->w, op);
        conn_doom(c);
        return;
    }
    if (conn_send_op(c, op, bufs, n) < 0)
        conn_doom(c);
}

/* Writes the relayed body pieces held for c's request, in one write. */
static void held_flush(conn_t *c)
{
    wop_t *op = c->held_op;
    uv_buf_t bufs[HELD_BUFS];
    unsigned n = c->n_held_bufs;
    memcpy(bufs, c->held_bufs, n * sizeof *bufs);
    c->held_op = NULL;
    c->n_held_bufs = 0;
    if (c->held_head == NULL)
        conn_unpost(c); /* nothing is held now */
    conn_write(c, op, bufs, n);
}

/* Holds a relayed body piece's write (op, its n buffers) until the backend
 * read that brought it is over (up_on_read_end), the connection writes
 * anything else, or, as a backstop, the posted flush: the pieces that follow
 * meanwhile go out in the same write. */
static void held_add(conn_t *c, wop_t *op, const uv_buf_t *bufs, unsigned n)
{
    if (c->n_held_bufs + n > HELD_BUFS)
        held_flush(c);
    if (c->held_op) {
        op->chain = c->held_op->chain;
        c->held_op->chain = op;
    } else {
        c->held_op = op;
    }
    memcpy(c->held_bufs + c->n_held_bufs, bufs, n * sizeof *bufs);
    c->n_held_bufs += n;
    conn_post(c);
}

/* What a request held and never wrote: its response was abandoned. */
static void held_drop(conn_t *c)
{
    vsr_free(c->held_head);
    c->held_head = NULL;
    if (c->held_op)
        wop_put(c->w, c->held_op);
    c->held_op = NULL;
    c->n_held_bufs = 0;
}

/* Takes the held response head into a write: the write frees it when done. */
static size_t take_held_head(conn_t *c, wop_t *op, uv_buf_t *buf)
{
    if (c->held_head == NULL)
        return 0;
    if (!c->h2)
        conn_unpost(c);
    op->heap = c->held_head;
    *buf = uv_buf_init(c->held_head, (unsigned)c->held_len);
    c->held_head = NULL;
    return 1;
}

/* Writes a buffer whose memory passes to the write (freed when written). */
static void conn_write_buf(conn_t *c, vsr_buf_t *b)
{
    wop_t *op = wop_get(c);
    op->heap = b->data;
    uv_buf_t ub = uv_buf_init(b->data, (unsigned)b->len);
    b->data = NULL;
    b->len = b->alloc = 0;
    conn_write(c, op, &ub, 1);
}

/* ---- local replies ---- */

/* A local reply on an HTTP/2 stream: the same fields, no framing ones.
 * extra_headers are this file's own "name: value\r\n" lines. */
static void reply_h2(request_t *req, int status, const char *ctype, vsr_slice_t body, const char *extra_headers,
                     int is_head, const char *replay_id)
{
    vsr_http_header_t f[8];
    size_t n = 0;
    char ver[24];
    f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("content-type"), vsr_slice_cstr(ctype)};
    if (req->head)
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-request-id"), vsr__request_id(req)};
    if (req->eng)
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-vsr-config-version"),
                                     vsr_slice(ver, (size_t)snprintf(ver, sizeof(ver), "%llu",
                                                                     (unsigned long long)vsr_engine_version(req->eng)))};
    if (replay_id)
        f[n++] = (vsr_http_header_t){VSR_SLICE_LIT("x-vsr-replay-id"), vsr_slice_cstr(replay_id)};
    vsr_slice_t rest = extra_headers ? vsr_slice_cstr(extra_headers) : VSR_SLICE_NULL;
    while (rest.len > 2 && n < VSR_ARRAY_LEN(f)) {
        vsr_slice_t line = vsr_slice_split(rest, '\n', &rest);
        vsr_slice_t value;
        vsr_slice_t name = vsr_slice_split(line, ':', &value);
        value = vsr_slice_trim(value);
        if (value.len && value.p[value.len - 1] == '\r')
            value.len--;
        f[n++] = (vsr_http_header_t){name, value};
    }
    vsr__resp_head_t rh = {.status = status, .fields = f, .n_fields = n, .content_length = (int64_t)body.len};
    if (!is_head)
        req->bytes_sent += body.len;
    vsr__h2_respond(req->st, &rh, is_head ? NULL : body.p, is_head ? 0 : body.len, 0);
}

static void reply_on(conn_t *c, request_t *req, int status, const char *ctype, vsr_slice_t body,
                     const char *extra_headers, int is_head, int close)
{
    if (req) {
        req->resp_status = status;
        if (req->flags == NULL)
            req->flags = "LR"; /* a local reply */
    }
    /* a router_replay record of the request takes this answer, and names itself */
    const char *replay_id = req ? vsr_session_local_reply(req->sess, status, body) : NULL;
    if (req && req->st) {
        reply_h2(req, status, ctype, body, extra_headers, is_head, replay_id);
        return;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_http_write_status_line(&b, status, VSR_SLICE_NULL);
    vsr_buf_printf(&b, "content-type: %s\r\ncontent-length: %zu\r\n", ctype, body.len);
    if (req == NULL)
        req = c->req;
    if (req && req->eng) {
        vsr_buf_printf(&b, "x-vsr-config-version: %llu\r\n", (unsigned long long)vsr_engine_version(req->eng));
    } else { /* a codec error before any request: the version in force */
        vsr_engine_t *e = vsr__gateway_pin(c->w->gw);
        vsr_buf_printf(&b, "x-vsr-config-version: %llu\r\n", (unsigned long long)vsr_engine_version(e));
        vsr_engine_unref(e);
    }
    if (req && req->head)
        vsr_http_write_header(&b, VSR_SLICE_LIT("x-request-id"), vsr__request_id(req));
    if (replay_id)
        vsr_http_write_header(&b, VSR_SLICE_LIT("x-vsr-replay-id"), vsr_slice_cstr(replay_id));
    if (extra_headers)
        vsr_buf_append_cstr(&b, extra_headers);
    if (close)
        vsr_buf_append_cstr(&b, "connection: close\r\n");
    vsr_http_write_end_head(&b);
    if (!is_head)
        vsr_buf_append_slice(&b, body);
    conn_write_buf(c, &b);
    if (close) {
        c->close_after_write = 1;
        if (c->wq_bytes == 0 && !c->doomed)
            conn_linger(c); /* written at once: no write_cb will see the flag */
    }
}

void vsr__request_reply(request_t *req, int status, const char *ctype, vsr_slice_t body, const char *extra_headers,
                  int is_head, int close)
{
    reply_on(req->c, req, status, ctype, body, extra_headers, is_head, close);
}

/* Anthropic's API: /v1/messages and every path under it (the query aside). */
static int messages_target(vsr_slice_t target)
{
    vsr_slice_t path = vsr_slice_split(target, '?', NULL);
    return vsr_slice_eq_cstr(path, "/v1/messages") || vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/messages/"));
}

/* An OpenAI-style error: {"error":{"message":M,"type":T,"code":C}} where C
 * is the string `code` when given, else null (OpenAI's convention: a code is
 * a string or null, never a number); Anthropic's shape on /v1/messages paths,
 * before routing has looked at the request too (`messages`). */
static void reply_error_as(conn_t *c, request_t *req, int messages, int status, const char *type, const char *code,
                           vsr_slice_t msg, const char *extra_headers, int is_head, int close)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if ((req == NULL || req->sess == NULL) && messages)
        vsr_anthropic_error_body(&b, vsr_anthropic_error_type(status), msg);
    else
        vsr_session_error_body(req ? req->sess : NULL, status, type, code, msg, &b); /* Anthropic's for /v1/messages */
    reply_on(c, req, status, "application/json", vsr_buf_slice(&b), extra_headers, is_head, close);
    vsr_buf_free(&b);
}

static void reply_error_on(conn_t *c, request_t *req, int status, const char *type, const char *code, vsr_slice_t msg,
                           const char *extra_headers, int is_head, int close)
{
    reply_error_as(c, req, req && req->head && messages_target(req->head->target), status, type, code, msg,
                   extra_headers, is_head, close);
}

void vsr__request_reply_error(request_t *req, int status, const char *type, const char *code, vsr_slice_t msg,
                        const char *extra_headers, int is_head, int close)
{
    reply_error_on(req->c, req, status, type, code, msg, extra_headers, is_head, close);
}

void vsr__request_error(request_t *req, int status, const char *msg)
{
    vsr__request_reply_error(req, status, "invalid_request_error", NULL, vsr_slice_cstr(msg),
                "x-vsr-response-path: error\r\n", req->is_head, !req->keep_alive);
    vsr__request_finish(req);
}

/* ---- request lifecycle ---- */

static request_t *request_new(conn_t *c)
{
    _Static_assert(sizeof(request_t) <= VSR_BLOCK_MAX, "a request is one block");
    request_t *req = vsr_block_calloc(sizeof(*req));
    req->c = c;
    req->w = c->w;
    req->l = c->l;
    req->start_wall = vsr_wall_time();
    req->start_us = vsr_now_us();
    req->eng = vsr__gateway_pin(c->w->gw);
    if (!c->l->metrics) /* scrapes are not requests: they would count themselves */
        vsr_metrics_active_requests(c->w->metrics, 1);
    vsr_pool_init(&req->pool);
    vsr_buf_init(&req->body, c->l->conf->max_body_bytes);
    return req;
}

static vsr_slice_t header_value(const request_t *req, const char *name)
{
    vsr_slice_t v = VSR_SLICE_NULL;
    if (req->head)
        vsr_http_head_get(req->head, name, &v);
    return v;
}

/* The request's id: the client's x-request-id when it sent one, else a
 * UUIDv4 made once (the one the backend gets, the log's and the client's). */
vsr_slice_t vsr__request_id(request_t *req)
{
    if (req->request_id.len == 0) {
        req->request_id = header_value(req, "x-request-id");
        if (req->request_id.len == 0) {
            char *id = vsr_pool_alloc(&req->pool, 37);
            vsr_uuid4(id);
            req->request_id = vsr_slice(id, 36);
            req->id_made = 1; /* the one the backend gets too */
        }
    }
    return req->request_id;
}

/* The models a call went to, in order (the session's list without a first
 * choice skipped for its open circuit). */
const vsr_model_conf_t *const *vsr__request_models_called(const request_t *req, size_t *n)
{
    size_t n_tried = 0;
    const vsr_model_conf_t *const *tried = req->sess ? vsr_session_tried(req->sess, &n_tried) : NULL;
    if (tried && req->first_skipped && n_tried > 0) {
        tried++;
        n_tried--;
    }
    *n = n_tried;
    return tried;
}

/* Attempts made by model m (those past the report's array are the latest
 * ones: they count for the last model called). */
unsigned vsr__request_attempts_of(const request_t *req, const vsr_model_conf_t *m)
{
    const vsr_upstream_report_t *rep = &req->report;
    unsigned kept = VSR_MIN(rep->n_attempts, VSR_UPSTREAM_MAX_ATTEMPTS), n = 0;
    for (unsigned i = 0; i < kept; i++)
        n += rep->attempts[i].model == m;
    if (rep->n_attempts > kept && kept && rep->attempts[kept - 1].model == m)
        n += rep->n_attempts - kept;
    return n;
}

/* The request is over, one way or another: one access-log line, metrics. */
static void request_account(request_t *req)
{
    conn_t *c = req->c;
    worker_t *w = c->w;
    const vsr_evidence_t *ev = req->sess ? vsr_session_evidence(req->sess) : NULL;
    double total = (double)(vsr_now_us() - req->start_us) / 1e6;
    if (!req->finished && req->flags == NULL)
        req->flags = "DC"; /* the client went away first */
    vsr_slice_t model = vsr__slice_or_empty(ev ? ev->selected_model : NULL);
    vsr_slice_t decision = vsr__slice_or_empty(ev ? ev->decision : NULL);
    const vsr_upstream_report_t *rep = &req->report;
    unsigned kept = VSR_MIN(rep->n_attempts, VSR_UPSTREAM_MAX_ATTEMPTS);
    double upstream = 0;
    unsigned retries_kept = 0;
    for (unsigned i = 0; i < kept; i++) {
        const vsr_upstream_attempt_t *a = &rep->attempts[i];
        static const char *err_outcome[] = {"ok", "connect_failure", "reset", "protocol", "timeout", "timeout",
                                            "reset", "overflow"};
        const char *outcome = a->error ? err_outcome[a->error] : a->status >= 500 ? "5xx" : a->status >= 400 ? "4xx" : "ok";
        vsr_slice_t am = a->model ? vsr_slice_cstr(a->model->name) : model; /* the model it was sent to */
        vsr_metrics_attempt(w->metrics, am, outcome);
        if (a->retry && retries_kept < rep->retries) {
            vsr_metrics_retry(w->metrics, am);
            retries_kept++;
        }
        upstream += (double)a->duration_ms / 1000.0;
    }
    for (unsigned i = retries_kept; i < rep->retries; i++) /* past the array: the latest model's */
        vsr_metrics_retry(w->metrics, kept && rep->attempts[kept - 1].model
                                          ? vsr_slice_cstr(rep->attempts[kept - 1].model->name)
                                          : model);
    if (req->usage && req->usage->has_usage)
        vsr_metrics_tokens(w->metrics, model, req->usage->prompt_tokens, req->usage->completion_tokens);
    if (ev && ev->looper) /* a request graph's calls (its streamed final hop is an attempt above) */
        for (size_t i = 0; i < ev->looper->n_records; i++) {
            const vsr_graph_call_record_t *rec = &ev->looper->records[i];
            vsr_metrics_looper_call(w->metrics, ev->looper->algorithm, rec->node, vsr_slice_cstr(rec->model),
                                    rec->status == VSR_OK, (double)rec->ms / 1000.0);
        }
    if (ev && ev->tools_selection)
        vsr_metrics_tool_selection(w->metrics, ev->tools_selection == 1 ? "semantic" : "unavailable");
    /* -1: not observed (no routing, no upstream attempt) — not a zero-length one */
    if (!c->l->metrics) {
        vsr_metrics_request(w->metrics, req->resp_status, model, decision, total,
                            ev && ev->routing_us ? (double)ev->routing_us / 1e6 : -1, kept ? upstream : -1);
        for (size_t i = 0; ev && i < ev->n_family_times; i++)
            vsr_metrics_signal_family(w->metrics, vsr_slice_cstr(ev->family_times[i].family),
                                      (double)ev->family_times[i].us / 1e6);
        vsr_metrics_active_requests(w->metrics, -1);
        if (ev && ev->response_guard)
            vsr_metrics_response_guard(w->metrics, ev->response_guard);
        if (ev) {
            vsr_metrics_remote_classifier(w->metrics, "ok", ev->remote_ok);
            vsr_metrics_remote_classifier(w->metrics, "failed", ev->remote_failed);
            vsr_metrics_remote_classifier(w->metrics, "invalid", ev->remote_invalid);
        }
    }
    if (req->trace.on) {
        req_trace_end_t te = {req->start_wall, req->start_us, req->head ? req->head->method : VSR_SLICE_NULL,
                              req->head ? req->head->target : VSR_SLICE_NULL, req->resp_status, req->flags,
                              header_value(req, "x-request-id"), ev, vsr_engine_version(req->eng), rep};
        vsr__trace_end(&req->trace, w->gw->opts.tracer, &te);
    }

    vsr_access_log_t *log = w->gw->opts.access_log;
    if (log == NULL || req->head == NULL)
        return;
    char fallback[512] = "";
    const char *fam_names[VSR_EVIDENCE_MAX_FAMILIES];
    uint64_t fam_us[VSR_EVIDENCE_MAX_FAMILIES];
    size_t n_fam = ev ? VSR_MIN(ev->n_family_times, (size_t)VSR_EVIDENCE_MAX_FAMILIES) : 0;
    for (size_t i = 0; i < n_fam; i++) {
        fam_names[i] = ev->family_times[i].family;
        fam_us[i] = ev->family_times[i].us;
    }
    size_t n_called = 0, n_tried = 0;
    const vsr_model_conf_t *const *called = vsr__request_models_called(req, &n_called);
    const vsr_model_conf_t *const *tried = req->sess ? vsr_session_tried(req->sess, &n_tried) : NULL;
    for (size_t i = 0, off = 0; n_called > 1 && i < n_called && off < sizeof(fallback) - 1; i++)
        off += (size_t)snprintf(fallback + off, sizeof(fallback) - off, "%s%s", i ? "," : "", called[i]->name);
    vsr_access_entry_t e = {
        .start_time = req->start_wall,
        .method = req->head->method,
        .path = req->head->target,
        .protocol = req->st ? VSR_SLICE_LIT("HTTP/2") : req->head->version_minor ? VSR_SLICE_LIT("HTTP/1.1") : VSR_SLICE_LIT("HTTP/1.0"),
        .status = req->resp_status,
        .response_flags = vsr_slice_cstr(req->flags ? req->flags : "-"),
        .bytes_received = req->body.len,
        .bytes_sent = req->bytes_sent,
        .duration_ms = (vsr_now_us() - req->start_us) / 1000,
        .upstream_host = kept ? vsr_slice_cstr(rep->attempts[kept - 1].backend->authority) : VSR_SLICE_NULL,
        .request_id = vsr__request_id(req),
        .user_agent = header_value(req, "user-agent"),
        .recipe = vsr__slice_or_empty(ev ? ev->recipe : NULL),
        .decision = decision,
        .selected_model = n_tried ? vsr_slice_cstr(tried[0]->name) : model, /* the routing's choice */
        .served_model = req->served ? vsr_slice_cstr(req->served->name) : VSR_SLICE_NULL,
        .fallback_path = vsr_slice_cstr(fallback),
        .attempts = rep->n_attempts,
        .config_version = vsr_engine_version(req->eng),
        .routing_ms = ev ? (double)ev->routing_us / 1000.0 : 0,
        .family_names = fam_names,
        .family_us = fam_us,
        .n_families = n_fam,
        .streamed = req->usage != NULL,
        .stream_events = req->usage ? req->usage->parser.events : 0,
        .has_usage = req->usage && req->usage->has_usage,
        .prompt_tokens = req->usage ? req->usage->prompt_tokens : 0,
        .completion_tokens = req->usage ? req->usage->completion_tokens : 0,
    };
    if (ev && ev->cache_hit >= 0)
        e.cache = ev->cache_hit ? VSR_SLICE_LIT("hit") : VSR_SLICE_LIT("miss");
    if (ev && ev->response_guard)
        e.response_guard = vsr_slice_cstr(ev->response_guard);
    if (req->sess) {
        int client_a = vsr_session_client_anthropic(req->sess);
        int up_a = req->served && req->served->api_format && strcmp(req->served->api_format, "anthropic") == 0;
        if (client_a != up_a && req->served) {
            e.client_protocol = client_a ? VSR_SLICE_LIT("anthropic") : VSR_SLICE_LIT("openai");
            e.upstream_protocol = up_a ? VSR_SLICE_LIT("anthropic") : VSR_SLICE_LIT("openai");
        }
    }
    if (ev && ev->looper) {
        e.looper_algorithm = ev->looper->algorithm;
        e.looper_calls = ev->looper->iterations;
        e.looper_models = vsr_slice_cstr(ev->looper->models_used);
        e.looper_prompt_tokens = ev->looper->prompt_tokens;
        e.looper_completion_tokens = ev->looper->completion_tokens;
    }
    vsr_access_log_write(log, &e);
}

void vsr__request_free(request_t *req)
{
    if (req->admin_job)
        vsr__local_abandon(req->admin_job); /* its answer has nobody to go to */
    request_account(req);
    vsr__usage_free(req->usage);
    if (req->call)
        vsr_upstream_call_cancel(req->call);
    vsr_preview_cancel(req->preview); /* the client is gone: so is the runtime call it waits on */
    vsr_buf_free(&req->preview_out);
    if (req->has_json)
        vsr_json_free(&req->json);
    vsr_session_finish(req->sess); /* ... and the session's, likewise */
    vsr_engine_unref(req->eng); /* the version may drain now */
    vsr_buf_free(&req->body);
    vsr_pool_free(&req->pool);
    vsr_block_free(req);
}

/* The response has been handed to the socket: the next request may start. */
void vsr__request_finish(request_t *req)
{
    conn_t *c = req->c;
    req->finished = 1;
    if (req->st) {
        /* an HTTP/2 stream: the connection goes on with its other streams */
        vsr__h2_detach(req->st);
        vsr__gateway_drain_poke(c->w);
        vsr__request_free(req);
        return;
    }
    if (c->held_op && c->req == req)
        held_flush(c); /* "handed to the socket": the held pieces too */
    int keep = req->keep_alive && !c->close_after_write && !c->w->draining && !c->peer_eof;
    vsr__gateway_drain_poke(c->w);
    c->req = NULL;
    c->busy = 0;
    vsr__request_free(req);
    held_drop(c); /* a head never written */
    if (!keep) {
        c->close_after_write = 1;
        if (c->wq_bytes == 0)
            conn_linger(c);
        return;
    }
    conn_process(c);
}

/* What bounds a request's waits: its start plus the listener's timeout. */
uint64_t vsr__request_deadline(const request_t *req)
{
    return req->start_us / 1000 + req->c->l->conf->timeout_ms;
}

static int upgrade_h2c(request_t *req);

/* The request-target as routing and the backend see it, normalised once
 * (vsr_http_normalize_target); an absolute-form authority replaces Host.
 * 0 when it cannot be normalised safely: answered 400.  An encoded '/' is
 * refused but in `/v1/models/{id}` (the OpenAI SDK encodes "org/model"),
 * which vsr answers itself. */
static int normalize_target(request_t *req)
{
    vsr_http_head_t *h = req->head;
    char *out = vsr_pool_alloc(&req->pool, h->target.len + 1);
    size_t len = 0;
    vsr_slice_t auth;
    const char *why = NULL;
    int rc = vsr_http_normalize_target(h->target, out, h->target.len + 1, &len, &auth, &why);
    /* an encoded separator only where vsr answers itself and forwards nothing: a model id */
    if (rc == VSR_DECLINED && vsr_slice_starts_with(vsr_slice(out, len), VSR_SLICE_LIT("/v1/models/")) &&
        memchr(out + 11, '/', len - 11) == NULL)
        rc = VSR_OK;
    if (rc != VSR_OK) {
        char msg[96];
        snprintf(msg, sizeof(msg), "invalid request path: %s", why ? why : "malformed");
        vsr__request_error(req, 400, msg);
        return 0;
    }
    h->target = vsr_slice(out, len);
    if (auth.p) {
        size_t i = 0;
        while (i < h->num_headers && !vsr_slice_case_eq_cstr(h->headers[i].name, "host"))
            i++;
        if (i == h->num_headers && i < VSR_HTTP_MAX_HEADERS)
            h->headers[h->num_headers++].name = VSR_SLICE_LIT("host");
        if (i < h->num_headers)
            h->headers[i].value = auth;
    }
    return 1;
}

/* The listener settings that change live (api_keys, models): the request's version has them. */
static const vsr_listener_conf_t *live_listener(const request_t *req)
{
    const listener_t *l = req->c->l;
    const vsr_config_t *cfg = vsr_engine_config(req->eng);
    return l->index >= 0 && (size_t)l->index < cfg->n_listeners ? &cfg->listeners[l->index] : l->conf;
}

static int is_probe(const vsr_http_head_t *h)
{
    vsr_slice_t path = vsr_slice_split(h->target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--;
    return (vsr_slice_eq_cstr(path, "/health") || vsr_slice_eq_cstr(path, "/ready")) &&
           (vsr_slice_eq_cstr(h->method, "GET") || vsr_slice_eq_cstr(h->method, "HEAD"));
}

/* The key check on the head alone, for a request with a body still to come:
 * a client without the key never makes vsr read (or buffer) its body.
 * VSR__AUTH_OK when the body may be read. */
static int early_auth(const request_t *req)
{
    const listener_t *l = req->c->l;
    if (l->management || l->metrics || is_probe(req->head))
        return VSR__AUTH_OK;
    return vsr__ingress_auth(live_listener(req), req->head, NULL);
}

/* 401: a missing or wrong key, or several different ones (`auth` says which). */
static void reply_unauthorized(request_t *req, int auth, int close)
{
    vsr_metrics_edge_refusal(req->c->w->metrics, auth == VSR__AUTH_CONFLICT ? "conflicting_api_keys"
                                                                            : "invalid_api_key");
    if (messages_target(req->head->target)) {
        /* an Anthropic client reads Anthropic's error shape */
        vsr__request_reply(req, 401, "application/json",
              auth == VSR__AUTH_CONFLICT
                  ? VSR_SLICE_LIT("{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":"
                                  "\"Unauthorized: the request carries more than one API key\"}}")
                  : VSR_SLICE_LIT("{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":"
                                  "\"Unauthorized: missing or invalid API key\"}}"),
              "www-authenticate: Bearer realm=\"vllm-semantic-router\"\r\n", req->is_head, close);
        vsr__request_finish(req);
        return;
    }
    vsr__request_reply(req, 401, "application/json",
          auth == VSR__AUTH_CONFLICT
              ? VSR_SLICE_LIT("{\"error\":{\"message\":\"Unauthorized: the request carries more than one API key\","
                              "\"type\":\"authentication_error\",\"code\":\"invalid_api_key\"}}")
              : VSR_SLICE_LIT("{\"error\":{\"message\":\"Unauthorized: missing or invalid API key\","
                              "\"type\":\"authentication_error\",\"code\":\"invalid_api_key\"}}"),
          "www-authenticate: Bearer realm=\"vllm-semantic-router\"\r\n", req->is_head, close);
    vsr__request_finish(req);
}

static void dispatch(request_t *req)
{
    conn_t *c = req->c;
    const vsr_http_head_t *h = req->head;
    if (req->unauth) {
        /* refused on its head: the body was never read; over HTTP/1.1 the
         * connection closes (lingering, so the client reads the 401) */
        req->keep_alive = 0;
        reply_unauthorized(req, req->unauth, 1);
        return;
    }
    if (!req->st && h->upgrade && upgrade_h2c(req))
        return; /* answered as stream 1 of the new HTTP/2 session */
    if (c->w->draining)
        req->keep_alive = 0; /* while draining, every reply closes its connection */
    if (!normalize_target(req))
        return;
    vsr_slice_t path = vsr_slice_split(h->target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--;
    if (vsr__local_serve(req, path))
        return; /* an endpoint vsr answers itself */
    /* api_keys and models change live: the request's version has them */
    const vsr_config_t *cfg = vsr_engine_config(req->eng);
    const vsr_listener_conf_t *lc = live_listener(req);
    vsr_slice_t key;
    int auth = vsr__ingress_auth(lc, h, &key);
    if (auth != VSR__AUTH_OK) {
        reply_unauthorized(req, auth, !req->keep_alive);
        return;
    }
    /* what this client stores is its key's, and only its key's (only the
     * Responses API stores: other requests skip the digest) */
    char *owner = vsr_pool_alloc(&req->pool, VSR_SESSION_MAX_OWNER + 1);
    vsr__ingress_owner(vsr_slice_starts_with(path, VSR_SLICE_LIT("/v1/responses")) ? key : VSR_SLICE_NULL, owner);

    /* ingress hygiene: what a client may not send never reaches routing or a backend */
    req->hdrs = vsr_pool_alloc(&req->pool, sizeof(vsr_header_t) * (h->num_headers + 1));
    for (size_t i = 0; i < h->num_headers; i++) {
        if (vsr__ingress_drop(lc, cfg, c->identity_trusted, h->headers[i].name))
            continue;
        req->hdrs[req->n_hdrs].name = h->headers[i].name;
        req->hdrs[req->n_hdrs].value = h->headers[i].value;
        req->n_hdrs++;
    }
    vsr__trace_begin(&req->trace, c->w->gw->opts.tracer, h);
    vsr_session_opts_t opts = {.listener = lc, .identity_trusted = c->identity_trusted, .api_key = key,
                               .ports = &vsr__gateway_ports, .ports_ud = req, .deadline_ms = vsr__request_deadline(req),
                               .request_id = vsr__request_id(req), .owner = vsr_slice_cstr(owner)};
    req->sess = vsr_session_open(req->eng, &opts);
    const vsr_effect_t *eff = vsr_session_request_headers(req->sess, h->method, h->target, req->hdrs, req->n_hdrs);
    if (eff->status) {
        vsr__proxy_reply_effect(req, eff);
        return;
    }
    eff = vsr_session_request_body(req->sess, req->body.data, req->body.len);
    if (!eff->pending)
        vsr__proxy_routed(req, eff); /* else the worker serves others until port_resume */
}

/* ---- parsing the client's bytes ---- */

static int on_req_head(void *ud, vsr_http_head_t *head)
{
    conn_t *c = ud;
    request_t *req = request_new(c);
    c->req = req;
    req->head = head;
    req->keep_alive = head->keep_alive;
    req->is_head = vsr_slice_eq_cstr(head->method, "HEAD");
    if (head->has_body) {
        int auth = early_auth(req);
        if (auth != VSR__AUTH_OK) {
            /* no 100 Continue, no body: answered as it stands, then closed */
            req->unauth = (unsigned)auth;
            c->busy = 1;
            return VSR_PAUSED;
        }
    }
    if (head->content_length > 0)
        vsr_buf_reserve(&req->body, (size_t)head->content_length);
    if (head->expect_continue && head->has_body && head->version_minor >= 1) {
        wop_t *op = wop_get(c);
        uv_buf_t ub = uv_buf_init((char *)"HTTP/1.1 100 Continue\r\n\r\n", 25);
        conn_write(c, op, &ub, 1);
    }
    return VSR_OK;
}

static int on_req_body(void *ud, const char *p, size_t n)
{
    conn_t *c = ud;
    if (vsr_buf_append(&c->req->body, p, n) != VSR_OK)
        return VSR_ERR_TOO_BIG; /* the parser's max_body catches this first */
    return VSR_OK;
}

static int on_req_complete(void *ud)
{
    conn_t *c = ud;
    c->busy = 1;
    return VSR_PAUSED;
}

static const vsr_http_callbacks_t req_callbacks = {on_req_head, on_req_body, on_req_complete};

/* The request parser, taken on a connection's first bytes after it was
 * idle.  It is the bulk of a connection's memory (a head holds room for
 * every field), so a keep-alive connection gives it back between requests
 * (parser_release), as nginx frees an idle connection's buffers; the worker
 * keeps up to PARSER_POOL of them for the next requests. */
static void conn_parser(conn_t *c)
{
    worker_t *w = c->w;
    const vsr_listener_conf_t *lc = c->l->conf;
    vsr_http_limits_t lim = {.max_head_size = lc->max_header_bytes, .max_headers = lc->max_headers,
                             .max_body = lc->max_body_bytes};
    if (w->parser_free) {
        c->parser = w->parser_free;
        w->parser_free = *(void **)w->parser_free;
        w->n_parser_free--;
    } else {
        c->parser = vsr_malloc(sizeof(*c->parser));
    }
    vsr_http_parser_init(c->parser, VSR_HTTP_REQUEST, &lim, &req_callbacks, c);
}

/* Between requests, with nothing half-received: the parser goes back to the
 * worker (and a pending buffer's memory, held after pipelining, is freed). */
static void parser_release(conn_t *c)
{
    if (c->busy || c->req || c->h2 || c->pending.len || c->parser == NULL || !vsr_http_parser_idle(c->parser))
        return;
    worker_t *w = c->w;
    vsr_http_parser_free(c->parser);
    if (w->n_parser_free < PARSER_POOL) {
        *(void **)c->parser = w->parser_free;
        w->parser_free = c->parser;
        w->n_parser_free++;
    } else {
        vsr_free(c->parser);
    }
    c->parser = NULL;
    if (c->pending.alloc) {
        vsr_buf_free(&c->pending);
        vsr_buf_init(&c->pending, PENDING_MAX + VSR_RBUF_SIZE);
    }
}

static void parse_error(conn_t *c)
{
    vsr_http_parser_t *p = c->parser;
    int status = p->error_status ? p->error_status : 400;
    if (c->req) {
        c->req->resp_status = status;
        c->req->flags = "LR";
        c->req->finished = 1;
        vsr__request_free(c->req);
        c->req = NULL;
    }
    if (status == 413) { /* the head is whole: its target says which API */
        reply_error_as(c, NULL, messages_target(p->head.target), 413, "invalid_request_error", "request_too_large",
                       VSR_SLICE_LIT("The request body is too large."), NULL, 0, 1);
        return;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: %s",
             status == 431 ? "request header fields too large"
             : status == 501 ? "not implemented"
             : status == 505 ? "HTTP version not supported"
                             : "malformed HTTP request",
             p->error_msg ? p->error_msg : "invalid");
    reply_error_on(c, NULL, status, "invalid_request_error", NULL, vsr_slice_cstr(msg), NULL, 0, 1);
}

/* Feeds bytes to the parser until they run out or a request is complete;
 * returns how many were consumed, or -1 when the connection is done for. */
static ssize_t feed(conn_t *c, const char *data, size_t len)
{
    size_t off = 0;
    if (c->parser == NULL)
        conn_parser(c);
    if (len && c->req_start_ms == 0 && vsr_http_parser_idle(c->parser))
        c->req_start_ms = vsr_now_ms(); /* a new request: its head deadline runs */
    while (off < len && !c->busy) {
        ssize_t n = vsr_http_parser_execute(c->parser, data + off, len - off);
        if (c->req && c->body_start_ms == 0)
            c->body_start_ms = vsr_now_ms(); /* its head is in: the body deadline runs */
        if (n < 0) {
            parse_error(c);
            return -1;
        }
        if (n == 0 && !c->busy)
            break; /* nothing more will be taken now; the rest waits in pending */
        off += (size_t)n;
    }
    return (ssize_t)off;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    *buf = uv_buf_init(c->w->readbuf, sizeof(c->w->readbuf));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* ---- the client's FIN while reads are stopped ----
 * Past PENDING_MAX of pipelined bytes reads stop, and an EOF queued behind
 * the unread bytes would go unseen until the request ahead is answered.  So
 * the socket is watched meanwhile for the peer's FIN alone (EPOLLRDHUP,
 * which libuv's stream does not ask for), through a duplicate of its
 * descriptor: the client that closed has left (read_cb's EOF), and its
 * request is cancelled at once. */
typedef struct fin_watch_s {
    uv_poll_t poll;                /* data: the connection; NULL once it no longer waits for this close */
    int fd;                        /* the duplicate, closed with the watch */
} fin_watch_t;

static void fin_closed_cb(uv_handle_t *h)
{
    fin_watch_t *fw = (fin_watch_t *)h;
    conn_t *c = h->data;
    close(fw->fd);
    vsr_free(fw);
    if (c)
        conn_handle_closed(c); /* one of the connection's closes: it closed with it */
}

/* counted: the connection's close waits for this one (conn_close) */
static void fin_unwatch(conn_t *c, int counted)
{
    fin_watch_t *fw = c->fin;
    c->fin = NULL;
    if (!counted)
        fw->poll.data = NULL;
    uv_close((uv_handle_t *)&fw->poll, fin_closed_cb);
}

static void fin_cb(uv_poll_t *p, int status, int events)
{
    VSR_UNUSED(status);
    VSR_UNUSED(events);
    conn_t *c = p->data;
    vsr_clock_tick();
    vsr_log_debug("gateway", "client closed with %zu pipelined bytes held: cancelling its request", c->pending.len);
    conn_close(c); /* a FIN, a reset or an error: the client is gone */
}

static void fin_watch(conn_t *c)
{
    uv_os_fd_t fd;
    if (c->fin || c->closing || c->h2 || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return;
    fin_watch_t *fw = vsr_malloc(sizeof(*fw));
    fw->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (fw->fd < 0 || uv_poll_init(&c->w->loop, &fw->poll, fw->fd) != 0) {
        if (fw->fd >= 0)
            close(fw->fd);
        vsr_free(fw); /* out of descriptors: the EOF is seen when reads resume */
        return;
    }
    fw->poll.data = c;
    c->fin = fw;
    if (uv_poll_start(&fw->poll, UV_DISCONNECT, fin_cb) != 0)
        fin_unwatch(c, 0);
}

static void set_reading(conn_t *c, int on)
{
    if (c->lingering)
        on = 1;
    if (on && c->fin && !c->closing)
        fin_unwatch(c, 0); /* reads see the EOF again */
    if (on && !c->reading && !c->closing)
        uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    else if (!on && c->reading)
        uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = on && !c->closing;
}

/* A request being received has deadlines that its bytes do not push back
 * (as nginx's client_header_timeout, and a whole-body client_body_timeout):
 * its head within header_timeout of its first byte, its body within
 * body_timeout of the head's end.  0 = none. */
static uint64_t recv_deadline(const conn_t *c)
{
    const vsr_listener_conf_t *lc = c->l->conf;
    if (c->req && c->body_start_ms)
        return lc->body_timeout_ms ? c->body_start_ms + lc->body_timeout_ms : 0;
    if (c->req_start_ms)
        return lc->header_timeout_ms ? c->req_start_ms + lc->header_timeout_ms : 0;
    return 0;
}

/* The deadline passed: 408 (the client may still read it), then close. */
static void recv_timeout(conn_t *c)
{
    const char *phase = c->req ? "body" : "header";
    vsr_metrics_client_timeout(c->w->metrics, phase);
    if (c->req) {
        c->req->resp_status = 408;
        c->req->flags = "LR";
        c->req->finished = 1;
        vsr__request_free(c->req);
        c->req = NULL;
    }
    reply_error_on(c, NULL, 408, "invalid_request_error", "request_timeout",
                   c->body_start_ms ? VSR_SLICE_LIT("the request body was not received in time")
                                    : VSR_SLICE_LIT("the request head was not received in time"),
                   NULL, 0, 1);
}

static void idle_timer_cb(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->deadline_armed && !c->busy && !c->h2) {
        c->deadline_armed = 0;
        recv_timeout(c);
        return;
    }
    if (c->h2) {
        /* HTTP/2: idle means no stream in flight for the listener's timeout */
        if (vsr__h2_active(c->h2)) {
            ctimer_set(c, T_IDLE, c->l->conf->timeout_ms);
            return;
        }
        vsr__h2_goaway(c->h2);
        if (!c->closing)
            vsr__conn_end(c, 1);
        return;
    }
    if (!c->busy)
        conn_close(c); /* the client said nothing for the listener's timeout */
}

#define TRIM_DELAY_MS 1000 /* memory freed by closed connections is returned this long after */

static void trim_cb(uv_timer_t *t)
{
    VSR_UNUSED(t);
    vsr_pool_trim_cache(); /* the requests' spare chunks go back first */
#if defined(__GLIBC__)
    /* glibc keeps freed chunks in the middle of its heaps resident: after
     * many connections close, RSS would stay at its peak */
    malloc_trim(0);
#endif
}

/* Connection memory was freed: schedule one trim for the lot (at most one
 * pending, off the request path). */
static void memory_released(worker_t *w)
{
    if (!w->torn_down && !uv_is_active((uv_handle_t *)&w->trim_timer))
        uv_timer_start(&w->trim_timer, trim_cb, TRIM_DELAY_MS, 0);
}

/* Waiting for the next request (the parser goes back) or for the rest of
 * one: the idle timeout runs, or the request's deadline when it is sooner. */
static void idle_arm(conn_t *c)
{
    parser_release(c);
    uint64_t ms = c->l->conf->timeout_ms;
    c->stalled = 0;
    c->deadline_armed = 0;
    if (c->parser == NULL || vsr_http_parser_idle(c->parser)) {
        c->req_start_ms = c->body_start_ms = 0;
    } else {
        uint64_t dl = recv_deadline(c), now = vsr_now_ms();
        if (dl && dl - VSR_MIN(dl, now) <= ms) {
            ms = dl - VSR_MIN(dl, now);
            c->deadline_armed = 1;
        }
    }
    ctimer_set(c, T_IDLE, ms);
}

/* A complete request: its deadlines end, its answer starts. */
static void conn_answer(conn_t *c)
{
    c->req_start_ms = c->body_start_ms = 0;
    c->deadline_armed = 0;
    c->stalled = 0;
    ctimer_stop(c);
    dispatch(c->req);
}

static void process_soon_cb(uv_timer_t *t)
{
    conn_process(t->data);
}

static void ctimer_cb(uv_timer_t *t)
{
    static const uv_timer_cb by_kind[] = {
        [T_STALL] = stall_cb, [T_LINGER] = linger_timeout_cb, [T_DOOMED] = doomed_cb,
        [T_IDLE] = idle_timer_cb, [T_SOON] = process_soon_cb,
    };
    conn_t *c = t->data;
    unsigned kind = c->tkind;
    if (kind == T_NONE || c->closing)
        return; /* stopped since it was armed */
    if (!vsr_timer_due(t, ctimer_cb, c->tdue))
        return; /* moved later since it was armed */
    c->tkind = T_NONE;
    by_kind[kind](t);
}

#define PROCESS_DEPTH_MAX 16 /* pipelined requests answered in one go (each finish starts the next) */

/* Parses what is pending and answers the next complete request, if any. */
static void conn_process_now(conn_t *c)
{
    if (c->wq_bytes > WQ_HIGH) {
        /* the client does not read its replies: no request is taken from it
         * until it drains (write_cb), for at most the listener's timeout */
        c->out_paused = 1;
        set_reading(c, 0);
        stall_arm(c);
        return;
    }
    if (c->pending.len) {
        ssize_t n = feed(c, c->pending.data, c->pending.len);
        if (n < 0)
            return;
        vsr_buf_consume(&c->pending, (size_t)n);
    }
    if (c->busy) {
        conn_answer(c);
        return;
    }
    idle_arm(c);
    set_reading(c, !c->peer_eof);
}

static void conn_process(conn_t *c)
{
    if (c->closing || c->close_after_write || c->doomed)
        return;
    worker_t *w = c->w;
    if (w->process_depth >= PROCESS_DEPTH_MAX) {
        /* answers made at once start the next request from their finish:
         * past a few, the rest goes on from the loop, so a long pipeline
         * neither grows the stack nor keeps the worker from its other
         * connections */
        c->stalled = c->deadline_armed = 0;
        ctimer_set(c, T_SOON, 0);
        return;
    }
    w->process_depth++;
    conn_process_now(c);
    w->process_depth--;
}

static const char H2_PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define H2_PREFACE_LEN (sizeof(H2_PREFACE) - 1)

static int start_h2(conn_t *c)
{
    c->sniff = 0;
    c->h2 = vsr__h2_new(c, c->l->conf);
    if (c->h2 == NULL) {
        conn_close(c);
        return VSR_ERR;
    }
    if (c->l->extproc)
        vsr__h2_extproc(c->h2, c->w);
    return VSR_OK;
}

/* HTTP/2 bytes: the session takes them all; the idle timer restarts. */
static void h2_input(conn_t *c, const char *p, size_t n)
{
    ctimer_set(c, T_IDLE, c->l->conf->timeout_ms);
    if (vsr__h2_feed(c->h2, p, n) != VSR_OK)
        vsr__conn_end(c, 1); /* a connection error: GOAWAY is queued, then close */
}

/* Plaintext from the client (decrypted first on a TLS listener). */
static void conn_input(conn_t *c, const char *data, size_t nread)
{
    if (c->h2) {
        h2_input(c, data, nread);
        return;
    }
    if (c->sniff) {
        /* the first bytes: HTTP/2 with prior knowledge, or HTTP/1.x */
        size_t have = c->pending.len;
        size_t k = VSR_MIN(have + nread, H2_PREFACE_LEN);
        int match = memcmp(c->pending.data ? c->pending.data : "", H2_PREFACE, VSR_MIN(have, k)) == 0 &&
                    (k <= have || memcmp(data, H2_PREFACE + have, k - have) == 0);
        if (match && k < H2_PREFACE_LEN) {
            if (vsr_buf_append(&c->pending, data, nread) != VSR_OK)
                conn_close(c);
            return; /* not enough to tell yet */
        }
        c->sniff = 0;
        if (!match && c->l->extproc) { /* gRPC is HTTP/2: nothing else is served here */
            conn_close(c);
            return;
        }
        if (match) {
            if (start_h2(c) != VSR_OK)
                return;
            if (have) {
                vsr_buf_t held = c->pending;
                vsr_buf_init(&c->pending, PENDING_MAX + VSR_RBUF_SIZE);
                h2_input(c, held.data, held.len);
                vsr_buf_free(&held);
                if (c->closing)
                    return;
            }
            h2_input(c, data, nread);
            return;
        }
        if (have) {
            if (vsr_buf_append(&c->pending, data, nread) != VSR_OK) {
                conn_close(c);
                return;
            }
            conn_process(c);
            return;
        }
    }
    if (!c->busy && !c->out_paused && c->pending.len == 0) {
        ssize_t n = feed(c, data, nread);
        if (n < 0)
            return;
        if ((size_t)n < nread && vsr_buf_append(&c->pending, data + n, nread - (size_t)n) != VSR_OK) {
            conn_close(c);
            return;
        }
        if (c->busy) {
            conn_answer(c);
        } else {
            idle_arm(c);
        }
        return;
    }
    /* a request is being answered, or its replies are backed up: hold
     * pipelined bytes, within bounds */
    if (vsr_buf_append(&c->pending, data, nread) != VSR_OK) {
        conn_close(c);
        return;
    }
    if (c->pending.len >= PENDING_MAX) {
        set_reading(c, 0);
        fin_watch(c);
    }
}

/* The handshake is done: ALPN h2 makes the connection HTTP/2 at once. */
static void tls_opened(conn_t *c)
{
    c->tls_open = 1;
    if (vsr_tls_conn_alpn_h2(c->tls))
        start_h2(c);
}

/* Ciphertext from the client: decrypted and handed on, piece by piece. */
static void tls_input(conn_t *c, const char *data, size_t nread)
{
    if (vsr_tls_conn_feed(c->tls, data, nread) != VSR_OK) {
        conn_close(c);
        return;
    }
    for (;;) {
        ssize_t n = vsr_tls_conn_read(c->tls, c->w->tlsbuf, sizeof(c->w->tlsbuf));
        if (n == 0)
            break;
        if (n < 0) {
            /* a failed handshake (its alert goes out first), or close_notify */
            if (n != VSR_EOF)
                vsr_log_debug("gateway", "client TLS: %s", vsr_tls_conn_error(c->tls));
            tls_flush_out(c);
            conn_close(c);
            return;
        }
        if (!c->tls_open) {
            tls_opened(c);
            if (c->closing)
                return;
        }
        conn_input(c, c->w->tlsbuf, (size_t)n);
        if (c->closing || c->lingering || c->close_after_write)
            break;
    }
    if (!c->tls_open && vsr_tls_conn_handshake(c->tls) == VSR_OK)
        tls_opened(c);
    tls_flush_out(c);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    vsr_clock_tick(); /* a request's times are its own, not those of the round's first event */
    if (nread == 0 || c->closing)
        return;
    if (c->lingering || c->close_after_write) {
        /* the last reply is queued or out: input is discarded */
        if (nread < 0) {
            if (c->lingering)
                conn_close(c);
            else
                set_reading(c, 0); /* write_cb lingers, which sees the EOF again */
        }
        return;
    }
    if (nread == UV_EOF && c->busy && c->req && !c->h2 && c->req->resp_wait == 2) {
        /* the client has the whole answer and only the session's look at it
         * is pending: the request ends answered, then the connection closes */
        c->peer_eof = 1;
        c->req->keep_alive = 0;
        set_reading(c, 0);
        return;
    }
    if (nread < 0) {
        /* EOF or error: the client is gone, whatever was in flight is
         * abandoned at once (access log DC, its duration the time the client
         * left).  A half-close (shutdown(SHUT_WR), `nc -N`) counts too, as
         * nginx's proxy_ignore_client_abort off: the EOF is all a proxy can
         * tell of a client that closed.  The request ends with its upstream
         * call (the backend's connection closed), a routing wait (model
         * signals) and a request graph's hops in flight, through
         * vsr_session_finish. */
        conn_close(c);
        return;
    }
    if (c->tls)
        tls_input(c, buf->base, (size_t)nread);
    else
        conn_input(c, buf->base, (size_t)nread);
}

/* ---- accept and close ---- */

static void conn_handle_closed(conn_t *c)
{
    if (--c->pending_closes > 0)
        return;
    if (c->counted)
        vsr_metrics_connections(c->w->metrics, -1);
    vsr__gateway_drain_poke(c->w);
    atomic_fetch_sub(c->l->active, 1);
    vsr__h2_free(c->h2);
    vsr_tls_conn_free(c->tls);
    if (c->parser) {
        vsr_http_parser_free(c->parser);
        vsr_free(c->parser);
    }
    vsr_buf_free(&c->pending);
    vsr_free(c->flush_timer);
    worker_t *w = c->w;
    vsr_free(c);
    if (w->conns == NULL)
        memory_released(w); /* the last one: what the connections held can go back */
}

static void conn_close_cb(uv_handle_t *h)
{
    conn_handle_closed(h->data);
}

static void conn_close(conn_t *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    if (c->req) {
        vsr__request_free(c->req);
        c->req = NULL;
    }
    held_drop(c); /* never written: the response was abandoned */
    if (c->h2)
        vsr__h2_close(c->h2); /* its streams' requests end, their upstream calls cancelled */
    if (c->prev)
        c->prev->next = c->next;
    else
        c->w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    conn_unpost(c);
    c->pending_closes = c->flush_timer ? 3 : 2;
    if (c->fin) {
        c->pending_closes++;
        fin_unwatch(c, 1);
    }
    uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
    uv_close((uv_handle_t *)&c->timer, conn_close_cb);
    if (c->flush_timer)
        uv_close((uv_handle_t *)c->flush_timer, conn_close_cb);
}

static void reject_close_cb(uv_handle_t *h)
{
    vsr_free(h);
}

#define ACCEPT_BACKOFF_MS 200      /* a listener stops accepting this long after a failed accept */
#define ACCEPT_LOG_INTERVAL_MS 5000 /* failed accepts are logged at most this often per worker */

void vsr__gateway_reserve_fd(worker_t *w)
{
    if (w->reserve_fd < 0)
        w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Out of descriptors, libuv retries accept() at once, in a loop that only a
 * successful accept or an empty backlog ends; its own spare descriptor is
 * one per loop and another worker's thread can take it between its close
 * and its accept.  So a descriptor is given up here — the worker's reserve,
 * else one of its idle connections, else its newest one — for the next
 * accept to succeed; the listener backs off, and the connection accepted
 * meanwhile is held (not taken with uv_accept, so libuv stops polling the
 * listener) until the back-off timer takes it. */
static void accept_failed(listener_t *l, int status)
{
    worker_t *w = l->w;
    const char *reason = status == UV_EMFILE ? "emfile" : status == UV_ENFILE ? "enfile" : "other";
    vsr_metrics_accept_error(w->metrics, reason);
    uint64_t now = vsr_now_ms();
    w->accept_unlogged++;
    if (w->accept_log_ms == 0 || now - w->accept_log_ms >= ACCEPT_LOG_INTERVAL_MS) {
        vsr_log_warn("gateway", "worker %u, listener %s: accept failed %u time(s): %s; backing off %d ms", w->id,
                     l->conf->name, w->accept_unlogged, uv_strerror(status), ACCEPT_BACKOFF_MS);
        w->accept_log_ms = now;
        w->accept_unlogged = 0;
    }
    if (!l->paused) {
        l->paused = 1;
        uv_timer_start(&l->backoff, vsr__gateway_accept_backoff_cb, ACCEPT_BACKOFF_MS, 0);
    }
    if (status == UV_EMFILE || status == UV_ENFILE) {
        if (w->reserve_fd >= 0) {
            close(w->reserve_fd);
            w->reserve_fd = -1;
            return;
        }
        conn_t *victim = NULL; /* the oldest idle one: the newest may be the client that just got in */
        for (conn_t *c = w->conns; c; c = c->next)
            if (!c->closing && !c->req && !c->busy && !(c->h2 && vsr__h2_active(c->h2)))
                victim = c;
        if (victim == NULL)
            victim = w->conns;
        if (victim) {
            conn_close(victim); /* its descriptor is closed now, its memory in the close callback */
            return;
        }
    }
    /* nothing of ours to give up (another thread frees one), or an error a
     * descriptor does not cure: libuv calls again at once, so each call
     * costs a millisecond rather than a spinning core */
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

void vsr__gateway_accept_backoff_cb(uv_timer_t *t)
{
    listener_t *l = t->data;
    worker_t *w = l->w;
    l->paused = 0;
    vsr__gateway_reserve_fd(w);
    if (!l->held)
        return; /* libuv still polls the listener */
    l->held = 0;
    if (w->reserve_fd < 0) {
        /* still out of descriptors: the held connection is refused, which
         * frees one for the reserve; uv_accept lets libuv poll again */
        uv_tcp_t *tcp = vsr_malloc(sizeof(*tcp));
        uv_tcp_init(&w->loop, tcp);
        if (uv_accept((uv_stream_t *)&l->tcp, (uv_stream_t *)tcp) == 0)
            uv_tcp_close_reset(tcp, reject_close_cb);
        else
            uv_close((uv_handle_t *)tcp, reject_close_cb);
        vsr__gateway_reserve_fd(w);
        return;
    }
    vsr__gateway_on_connection((uv_stream_t *)&l->tcp, 0);
}

void vsr__gateway_on_connection(uv_stream_t *server, int status)
{
    listener_t *l = server->data;
    worker_t *w = l->w;
    if (status < 0) {
        accept_failed(l, status);
        return;
    }
    if (l->paused) {
        l->held = 1; /* taken when the back-off ends: until then libuv stops polling this listener */
        return;
    }
    if (atomic_fetch_add(l->active, 1) >= l->conf->max_connections) {
        /* over the limit: refuse this one without touching the others */
        atomic_fetch_sub(l->active, 1);
        uv_tcp_t *t = vsr_malloc(sizeof(*t));
        uv_tcp_init(&w->loop, t);
        if (uv_accept(server, (uv_stream_t *)t) == 0)
            uv_tcp_close_reset(t, reject_close_cb);
        else
            uv_close((uv_handle_t *)t, reject_close_cb);
        return;
    }
    conn_t *c = vsr_calloc(1, sizeof(*c));
    c->w = w;
    c->l = l;
    uv_tcp_init(&w->loop, &c->tcp);
    uv_timer_init(&w->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    vsr_buf_init(&c->pending, PENDING_MAX + VSR_RBUF_SIZE);
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->counted = !l->metrics; /* a scrape's connection is not a client's */
    if (c->counted)
        vsr_metrics_connections(w->metrics, 1);
    if (l->conf->identity_trust_headers) {
        struct sockaddr_storage peer;
        int len = sizeof(peer);
        memset(&peer, 0, sizeof(peer));
        uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer, &len);
        c->identity_trusted = vsr__ingress_identity_trusted(l->conf, &peer);
    }
    c->sniff = 1;
    if (l->tls)
        c->tls = vsr_tls_server_new(l->tls);
    conn_process(c);
}

int vsr__gateway_busy(worker_t *w)
{
    for (conn_t *c = w->conns; c; c = c->next)
        if (c->req || (c->wq_bytes > 0 && !c->lingering) || (c->h2 && vsr__h2_active(c->h2)))
            return 1;
    return 0;
}

void vsr__gateway_close_all(worker_t *w)
{
    while (w->conns)
        conn_close(w->conns);
}

void vsr__gateway_worker_cleanup(worker_t *w)
{
    while (w->wop_free) {
        wop_t *op = w->wop_free;
        w->wop_free = op->next_free;
        vsr_free(op);
    }
    while (w->parser_free) {
        void *p = w->parser_free;
        w->parser_free = *(void **)p;
        vsr_free(p);
    }
    w->n_parser_free = 0;
}

void vsr__gateway_goaway_all(worker_t *w)
{
    for (conn_t *c = w->conns; c; c = c->next)
        if (c->h2)
            vsr__h2_goaway(c->h2);
}

/* ---- the HTTP/2 session's side of the request layer and the connection ---- */

/* `Upgrade: h2c` on a request that is complete (its body is in): 101, then
 * the response comes as stream 1 of the new session.  0 when the request is
 * answered over HTTP/1.1 instead (ignoring Upgrade is always allowed). */
static int upgrade_h2c(request_t *req)
{
    conn_t *c = req->c;
    vsr_slice_t up, settings;
    if (c->tls || c->h2 || c->w->draining || req->head->version_minor < 1 ||
        !vsr_http_head_get(req->head, "upgrade", &up) || !vsr_http_head_get(req->head, "http2-settings", &settings))
        return 0;
    int h2c = 0;
    while (up.len && !h2c) {
        vsr_slice_t rest;
        vsr_slice_t tok = vsr_slice_trim(vsr_slice_split(up, ',', &rest));
        h2c = vsr_slice_case_eq_cstr(tok, "h2c");
        up = rest;
    }
    if (!h2c)
        return 0;
    h2_sess_t *s = vsr__h2_new(c, c->l->conf);
    h2_stream_t *st = NULL;
    if (s == NULL)
        return 0;
    if (vsr__h2_upgrade(s, settings, req, req->is_head, &st) != VSR_OK) {
        vsr__h2_free(s);
        return 0;
    }
    static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n";
    wop_t *op = wop_get(c);
    uv_buf_t ub = uv_buf_init((char *)switching, sizeof(switching) - 1);
    conn_write(c, op, &ub, 1);
    /* the parser stays paused on this request: its head (which the request
     * keeps) lives until the connection closes */
    c->h2 = s;
    c->req = NULL;
    c->busy = 0;
    req->st = st;
    req->bytes_sent = 0;
    req->keep_alive = 1;
    ctimer_set(c, T_IDLE, c->l->conf->timeout_ms); /* idle as HTTP/2 from now on */
    set_reading(c, 1);
    dispatch(req);
    if (c->pending.len && !c->closing) {
        /* the client's preface may already be here */
        vsr_buf_t held = c->pending;
        vsr_buf_init(&c->pending, PENDING_MAX + VSR_RBUF_SIZE);
        h2_input(c, held.data, held.len);
        vsr_buf_free(&held);
    } else {
        vsr__h2_flush(s);
    }
    return 1;
}

request_t *vsr__request_open(conn_t *c, h2_stream_t *st, vsr_http_head_t *head)
{
    request_t *req = request_new(c);
    req->st = st;
    req->head = head;
    req->keep_alive = 1;
    req->is_head = vsr_slice_eq_cstr(head->method, "HEAD");
    return req;
}

int vsr__request_body(request_t *req, const char *p, size_t n)
{
    return vsr_buf_append(&req->body, p, n) == VSR_OK ? VSR_OK : VSR_ERR_TOO_BIG;
}

uint64_t vsr__request_body_len(const request_t *req)
{
    return req->body.len;
}

void vsr__request_dispatch(request_t *req)
{
    dispatch(req);
}

int vsr__request_early_auth(request_t *req)
{
    int auth = early_auth(req);
    req->unauth = (unsigned)auth;
    if (auth != VSR__AUTH_OK)
        return 0;
    const vsr_http_head_t *head = req->head;
    if (head->content_length > 0 && (uint64_t)head->content_length <= req->c->l->conf->max_body_bytes)
        vsr_buf_reserve(&req->body, (size_t)head->content_length); /* only for a client with the key */
    return 1;
}

void vsr__request_reject(request_t *req, int status)
{
    if (status == 413) {
        vsr__request_reply_error(req, 413, "invalid_request_error", "request_too_large",
                    VSR_SLICE_LIT("The request body is too large."), NULL, req->is_head, 0);
    } else {
        vsr__request_reply_error(req, status, "invalid_request_error", NULL,
                    status == 431 ? VSR_SLICE_LIT("request header fields too large")
                                  : VSR_SLICE_LIT("malformed HTTP request"),
                    NULL, req->is_head, 0);
    }
    vsr__request_finish(req);
}

void vsr__request_reset(request_t *req)
{
    vsr__request_free(req); /* not finished: the access log says DC */
}

void vsr__request_resume(request_t *req)
{
    vsr__request_unpause(req);
}

int vsr__request_unpause(request_t *req)
{
    if (req->call == NULL)
        return 0;
    vsr_upstream_call_resume(req->call);
    return 1;
}

int vsr__request_pause(request_t *req)
{
    if (req->call == NULL)
        return 0;
    vsr_upstream_call_pause(req->call);
    return 1;
}

void vsr__request_sent(request_t *req, uint64_t n)
{
    req->bytes_sent += n;
}

void vsr__conn_send(conn_t *c, vsr_buf_t *b)
{
    conn_write_buf(c, b);
}

/* What a connection flushes: HTTP/2's frames, or an HTTP/1.1 response's
 * held body pieces, or its head that no body bytes followed in the same read. */
static void conn_flush(conn_t *c)
{
    if (c->closing)
        return;
    if (c->h2) {
        vsr__h2_flush(c->h2);
    } else if (c->held_op) {
        held_flush(c);
    } else if (c->held_head) {
        wop_t *op = wop_get(c);
        uv_buf_t ub;
        take_held_head(c, op, &ub);
        conn_write(c, op, &ub, 1);
        if (c->wq_bytes > WQ_HIGH && c->req && vsr__request_pause(c->req))
            stall_arm(c);
    }
}

/* Flushes "once the current callback is over" are posted on the worker's
 * list (nginx's posted events), so a connection carries two list links
 * instead of a timer of its own.  The list runs from the worker's check
 * handle, after the round of I/O callbacks that posted it; its idle handle,
 * active while anything is posted, keeps the loop from blocking for I/O
 * before that (a flush posted from a timer), and runs the list too.  Both
 * start and stop in O(1), where a zero timer was two timer-heap updates per
 * round.  The list being run is w->posting: a connection posted meanwhile
 * waits for the next run, and one closed meanwhile leaves either list. */
static void posted_run(worker_t *w)
{
    w->posting = w->posted;
    w->posted = NULL;
    while (w->posting) {
        conn_t *c = w->posting;
        conn_unpost(c);
        conn_flush(c);
    }
    if (w->posted == NULL) {
        uv_check_stop(&w->posted_check);
        uv_idle_stop(&w->posted_idle);
    }
}

static void posted_check_cb(uv_check_t *h)
{
    posted_run(h->data);
}

static void posted_idle_cb(uv_idle_t *h)
{
    posted_run(h->data);
}

static void conn_post(conn_t *c)
{
    if (c->flush_armed || c->closing)
        return;
    worker_t *w = c->w;
    c->flush_armed = 1;
    c->post_prev = NULL;
    c->post_next = w->posted;
    if (w->posted)
        w->posted->post_prev = c;
    else if (!w->torn_down) {
        uv_check_start(&w->posted_check, posted_check_cb);
        uv_idle_start(&w->posted_idle, posted_idle_cb);
    }
    w->posted = c;
}

static void conn_unpost(conn_t *c)
{
    if (!c->flush_armed)
        return;
    worker_t *w = c->w;
    c->flush_armed = 0;
    if (c->post_prev)
        c->post_prev->post_next = c->post_next;
    else if (w->posting == c)
        w->posting = c->post_next;
    else
        w->posted = c->post_next;
    if (c->post_next)
        c->post_next->post_prev = c->post_prev;
    c->post_prev = c->post_next = NULL;
}

static void flush_timer_cb(uv_timer_t *t)
{
    conn_flush(t->data);
}

void vsr__conn_flush_soon(conn_t *c)
{
    conn_post(c);
}

void vsr__conn_flush_after(conn_t *c, uint64_t ms)
{
    if (c->flush_armed || c->closing)
        return;
    if (c->flush_timer == NULL) {
        c->flush_timer = vsr_malloc(sizeof(*c->flush_timer));
        uv_timer_init(&c->w->loop, c->flush_timer);
        c->flush_timer->data = c;
    }
    uv_timer_start(c->flush_timer, flush_timer_cb, ms, 0);
}

vsr_metrics_shard_t *vsr__conn_metrics(const conn_t *c)
{
    return c->w->metrics;
}

void vsr__conn_send_rbuf(conn_t *c, vsr_rbuf_t *rb, size_t len)
{
    wop_t *op = wop_get(c);
    op->rb = rb;
    uv_buf_t ub = uv_buf_init(rb->data, (unsigned)len);
    conn_write(c, op, &ub, 1);
}

int vsr__conn_closing(const conn_t *c)
{
    return c->closing;
}

size_t vsr__conn_queued(const conn_t *c)
{
    return c->wq_bytes;
}

void vsr__conn_end(conn_t *c, int graceful)
{
    if (c->closing)
        return;
    if (!graceful) {
        conn_doom(c); /* closed from the timer: never under the caller's feet */
        return;
    }
    c->close_after_write = 1;
    if (c->wq_bytes == 0)
        conn_linger(c);
}

/* ---- the response relay's writes (HTTP/1.x) ---- */

void vsr__conn_hold_head(conn_t *c, vsr_buf_t *b)
{
    c->held_head = b->data;
    c->held_len = b->len;
    b->data = NULL;
    b->len = b->alloc = 0;
    conn_post(c);
}

int vsr__conn_head_held(const conn_t *c)
{
    return c->held_head != NULL;
}

void vsr__conn_take_head(conn_t *c, vsr_buf_t *b)
{
    if (c->held_head == NULL)
        return;
    conn_unpost(c);
    vsr_buf_append(b, c->held_head, c->held_len);
    vsr_free(c->held_head);
    c->held_head = NULL;
}

void vsr__conn_relay(conn_t *c, const char *p, size_t n, vsr_rbuf_t *owner, int chunked)
{
    wop_t *op = wop_get(c);
    op->rb = owner;
    vsr_rbuf_ref(owner);
    uv_buf_t bufs[4];
    size_t nb = take_held_head(c, op, &bufs[0]);
    if (chunked) {
        size_t hl = vsr_http_chunk_head(op->chunk, n);
        bufs[nb++] = uv_buf_init(op->chunk, (unsigned)hl);
        bufs[nb++] = uv_buf_init((char *)p, (unsigned)n);
        bufs[nb++] = uv_buf_init((char *)VSR_HTTP_CRLF, 2);
    } else {
        bufs[nb++] = uv_buf_init((char *)p, (unsigned)n);
    }
    if (c->closing || c->doomed)
        conn_write(c, op, bufs, (unsigned)nb);
    else
        held_add(c, op, bufs, (unsigned)nb);
}

void vsr__conn_relay_end(conn_t *c, int chunked, int coalesce)
{
    if (!chunked && c->held_head == NULL && !(coalesce && c->held_op))
        return;
    wop_t *op = wop_get(c);
    uv_buf_t bufs[2];
    size_t nb = take_held_head(c, op, &bufs[0]);
    if (chunked)
        bufs[nb++] = uv_buf_init((char *)VSR_HTTP_LAST_CHUNK, 5);
    if (coalesce && c->held_op && !c->closing && !c->doomed) {
        held_add(c, op, bufs, (unsigned)nb); /* the end goes out with the last pieces */
        held_flush(c);
    } else {
        conn_write(c, op, bufs, (unsigned)nb);
    }
}

void vsr__conn_read_end(conn_t *c, const request_t *req)
{
    if (c->held_op && c->req == req)
        held_flush(c);
}

int vsr__conn_backpressure(conn_t *c, vsr_upstream_call_t *call)
{
    if (call == NULL || c->closing || c->wq_bytes <= WQ_HIGH)
        return 0;
    vsr_upstream_call_pause(call);
    stall_arm(c);
    return 1;
}

void vsr__conn_abort(conn_t *c)
{
    if (c->held_op)
        held_flush(c);
    conn_close(c);
}

void vsr__conn_close_after_write(conn_t *c, int linger_now)
{
    c->close_after_write = 1;
    if (linger_now && c->wq_bytes == 0 && !c->doomed)
        conn_linger(c); /* written at once: no write_cb will see the flag */
}
