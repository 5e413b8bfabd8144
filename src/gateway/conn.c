/*
 * conn.c — one client connection: its start (once accept.c has admitted
 * it) and close, reads, writes, its timers, the HTTP/1.x parser and the
 * switch to HTTP/2 (prior knowledge, ALPN, Upgrade: h2c).  What a request is and how it is answered is the
 * request layer's (request.c, proxy.c, local.c): the connection reaches it
 * through its parser callbacks (vsr__request_open, _body, _dispatch) and the
 * few vsr__request_* calls of gateway-int.h, and the request layer writes
 * only through this file's vsr__conn_* functions.
 *
 * Requests on a connection are answered strictly in order: when a request's
 * head and body are in, the parser is paused and any pipelined bytes wait in
 * `pending` (bounded; reading stops when it is full, the client's FIN still
 * watched) until the response has been handed to the socket.  A client's
 * EOF while a request is in flight ends it at once (read_cb).  Request
 * bodies are buffered (bounded by the listener's body limit) because
 * routing needs the whole JSON document.
 * Responses stream: upstream body bytes are written to the client straight
 * from the upstream's receive buffers (vsr__conn_relay), and a client that
 * reads slowly pauses the upstream read (high/low watermarks), so memory
 * stays bounded.
 */
#include "gateway/gateway-int.h"

#include <stdio.h>
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
    if (c->req && c->wq_bytes < WQ_LOW && vsr__request_in_call(c->req)) {
        stall_clear(c);
        vsr__request_resume(c->req);
    }
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

/* ---- parsing the client's bytes ---- */

static int on_req_head(void *ud, vsr_http_head_t *head)
{
    conn_t *c = ud;
    request_t *req = vsr__request_open(c, NULL, head);
    c->req = req;
    if (head->has_body && !vsr__request_check_key(req)) {
        /* no 100 Continue, no body: answered as it stands, then closed */
        c->busy = 1;
        return VSR_PAUSED;
    }
    if (head->content_length > 0)
        vsr__request_reserve(req, (size_t)head->content_length);
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
    return vsr__request_body(c->req, p, n); /* the parser's max_body catches a body too big first */
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
        vsr__request_abort(c->req, status);
        c->req = NULL;
    }
    if (status == 413) { /* the head is whole: its target says which API */
        vsr__request_codec_error(c, 413, "request_too_large", VSR_SLICE_LIT("The request body is too large."),
                                 p->head.target);
        return;
    }
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: %s",
             status == 431 ? "request header fields too large"
             : status == 501 ? "not implemented"
             : status == 505 ? "HTTP version not supported"
                             : "malformed HTTP request",
             p->error_msg ? p->error_msg : "invalid");
    vsr__request_codec_error(c, status, NULL, vsr_slice_cstr(msg), VSR_SLICE_NULL);
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
        vsr__request_abort(c->req, 408);
        c->req = NULL;
    }
    vsr__request_codec_error(c, 408, "request_timeout",
                             c->body_start_ms ? VSR_SLICE_LIT("the request body was not received in time")
                                              : VSR_SLICE_LIT("the request head was not received in time"),
                             VSR_SLICE_NULL);
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
    vsr__request_dispatch(c->req);
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
    if (nread == UV_EOF && c->busy && c->req && !c->h2 && vsr__request_peer_left(c->req)) {
        /* the client has the whole answer and only the session's look at it
         * is pending: the request ends answered, then the connection closes */
        c->peer_eof = 1;
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
        vsr__request_reset(c->req); /* not finished: the access log says DC */
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

/* Out of descriptors: one of the worker's connections is given up for the
 * next accept — the oldest idle one (the newest may be the client that just
 * got in), else the newest.  1 when one was closed (its descriptor now, its
 * memory in the close callback). */
int vsr__conn_shed(worker_t *w)
{
    conn_t *victim = NULL;
    for (conn_t *c = w->conns; c; c = c->next)
        if (!c->closing && !c->req && !c->busy && !(c->h2 && vsr__h2_active(c->h2)))
            victim = c;
    if (victim == NULL)
        victim = w->conns;
    if (victim == NULL)
        return 0;
    conn_close(victim);
    return 1;
}

/* A connection accepted (accept.c has admitted it): the connection starts. */
void vsr__conn_accept(listener_t *l)
{
    worker_t *w = l->w;
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
    if (uv_accept((uv_stream_t *)&l->tcp, (uv_stream_t *)&c->tcp) != 0) {
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

/* ---- the request layer's side of the connection ---- */

/* `Upgrade: h2c` on a request that is complete (its body is in): 101, then
 * the response comes as stream 1 of the new session.  0 when the request is
 * answered over HTTP/1.1 instead (ignoring Upgrade is always allowed). */
int vsr__conn_upgrade_h2c(conn_t *c, request_t *req, const vsr_http_head_t *head, int is_head)
{
    vsr_slice_t up, settings;
    if (c->tls || c->h2 || c->w->draining || head->version_minor < 1 ||
        !vsr_http_head_get(head, "upgrade", &up) || !vsr_http_head_get(head, "http2-settings", &settings))
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
    if (vsr__h2_upgrade(s, settings, req, is_head, &st) != VSR_OK) {
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
    ctimer_set(c, T_IDLE, c->l->conf->timeout_ms); /* idle as HTTP/2 from now on */
    set_reading(c, 1);
    vsr__request_upgraded(req, st);
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

void vsr__conn_request_done(conn_t *c, request_t *req, int keep_alive)
{
    if (c->held_op && c->req == req)
        held_flush(c); /* "handed to the socket": the held pieces too */
    int keep = keep_alive && !c->close_after_write && !c->w->draining && !c->peer_eof;
    vsr__gateway_drain_poke(c->w);
    c->req = NULL;
    c->busy = 0;
    vsr__request_reset(req); /* finished: its access log line says how */
    held_drop(c); /* a head never written */
    if (!keep) {
        c->close_after_write = 1;
        if (c->wq_bytes == 0)
            conn_linger(c);
        return;
    }
    conn_process(c);
}

worker_t *vsr__conn_worker(const conn_t *c)
{
    return c->w;
}

listener_t *vsr__conn_listener(const conn_t *c)
{
    return c->l;
}

int vsr__conn_identity_trusted(const conn_t *c)
{
    return c->identity_trusted;
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
