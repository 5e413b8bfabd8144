/*
 * One libuv loop per worker thread.  Each connection answers its requests
 * strictly in order (pipelining is served by parsing the next buffered
 * request only once the current answer is fully queued).  Output is batched:
 * answers are appended to conn->out and handed to libuv in one uv_write;
 * while that write is in flight the next answers accumulate in the other
 * buffer, so a busy keep-alive connection does one write per loop turn and
 * no allocation per request once its buffers have grown.
 *
 * With TLS the same state machine runs on plaintext: reads go through
 * tls_read_cb, which feeds the ciphertext to OpenSSL and appends what it
 * decrypts to conn->in; flush encrypts conn->out into the session's memory
 * BIO and writes the ciphertext.  A plain connection never enters that code
 * (its read callbacks are the plain ones, and flush tests one pointer).
 */
#include "fakellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#define IN_CHUNK (16u << 10)      /* minimum free space offered to a read */
#define IN_HIGH (1u << 20)        /* buffered input while busy: stop reading */
#define OUT_HIGH (4u << 20)       /* queued output: stop answering pipelined requests */
#define STREAM_BATCH (64u << 10)  /* undelayed stream: events per write */
#define KEEP_CAP (256u << 10)     /* buffers above this are released when empty */
#define LINGER_MS 2000
#define RST_DRAIN_MAX_POLLS 5000  /* x 1 ms: then reset regardless */
#define TLS_IN_CHUNK (64u << 10)  /* ciphertext read buffer, one per worker */

static void process_input(fl_conn_t *c);
static void stream_pump(fl_conn_t *c);
static void update_reading(fl_conn_t *c);
static void flush(fl_conn_t *c);

/* ---- closing ------------------------------------------------------------ */

atomic_uint_fast64_t fl_conn_seq;

static void conn_free(fl_conn_t *c)
{
    fl_buf_free(&c->in);
    fl_buf_free(&c->cbody);
    fl_buf_free(&c->out);
    fl_buf_free(&c->wbuf);
    fl_buf_free(&c->pending);
    fl_buf_free(&c->st.id);
    fl_buf_free(&c->st.model);
    fl_buf_free(&c->st.echo);
    fl_buf_free(&c->st.text);
    fl_buf_free(&c->st.tok);
    fl_tls_free(c->tls);
    free(c);
}

static void on_handle_closed(uv_handle_t *h)
{
    fl_conn_t *c = h->data;
    if (--c->handles == 0)
        conn_free(c);
}

/* rst: make the kernel send RST instead of FIN (SO_LINGER with 0 timeout
 * discards unsent data and resets), for the abrupt-close faults. */
static void conn_close(fl_conn_t *c, int rst)
{
    if (c->state == CS_CLOSED)
        return;
    c->state = CS_CLOSED;
    atomic_fetch_sub(&fl_stats.open, 1);
    if (c->h2)
        fl_h2_free(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        c->w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    if (rst) {
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
    }
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void linger_timer_cb(uv_timer_t *t)
{
    conn_close(t->data, 0);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    fl_conn_t *c = req->data;
    if (status < 0 && c->state != CS_CLOSED)
        conn_close(c, 0);
}

/* Graceful close after the last answer is written: shut the write side and
 * keep reading (discarding) until the client closes, so that requests it
 * may still be sending do not turn our FIN into a RST that would destroy
 * the answer before the client has read it. */
static void start_linger(fl_conn_t *c)
{
    if (c->peer_eof) {
        conn_close(c, 0);
        return;
    }
    c->state = CS_LINGER;
    c->in.len = 0;
    c->in_off = 0;
    if (c->tls) {
        /* a TLS client tells a truncation attack from the end of the
         * answers by the close_notify alert before the FIN */
        fl_tls_close_notify(c->tls);
        flush(c);
        if (c->state == CS_CLOSED)
            return;
    }
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, shutdown_cb) < 0) {
        conn_close(c, 0);
        return;
    }
    uv_timer_start(&c->timer, linger_timer_cb, LINGER_MS, 0);
    update_reading(c);
}

/* RST only once everything queued has left and been acknowledged: an RST
 * discards unsent data, and the point of drop-after / after-headers is that
 * the client does receive what came before the reset. */
static void rst_poll(fl_conn_t *c);

static void rst_timer_cb(uv_timer_t *t)
{
    rst_poll(t->data);
}

static void rst_poll(fl_conn_t *c)
{
    uv_os_fd_t fd;
    int unacked = 0;
    if (c->writing || c->out.len || (c->tls && fl_tls_pending_out(c->tls))) {
        /* normally after_write() calls back; the timer bounds a client
         * that stopped reading */
        unacked = 1;
    } else if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && ioctl(fd, TIOCOUTQ, &unacked) < 0) {
        unacked = 0;
    }
    if (unacked <= 0 || ++c->drain_polls > RST_DRAIN_MAX_POLLS) {
        conn_close(c, 1);
        return;
    }
    uv_timer_start(&c->timer, rst_timer_cb, 1, 0);
}

static void begin_rst(fl_conn_t *c);

/* ---- writing ------------------------------------------------------------ */

static void write_cb(uv_write_t *req, int status);

/* TLS: everything in out is encrypted at once (OpenSSL's memory BIO takes
 * it all), then the ciphertext, which may also hold handshake messages,
 * session tickets or alerts produced while reading, goes out in one write.
 * While it is in flight out collects plaintext as on a plain connection, so
 * the back-pressure thresholds on out.len mean the same thing. */
static void tls_flush(fl_conn_t *c)
{
    if (c->out.len) {
        if (fl_tls_write(c->tls, c->out.p, c->out.len) < 0) {
            conn_close(c, 0);
            return;
        }
        c->out.len = 0;
        fl_buf_shrink(&c->out, KEEP_CAP);
    }
    size_t n = fl_tls_pending_out(c->tls);
    if (n == 0)
        return;
    c->wbuf.len = 0;
    fl_buf_reserve(&c->wbuf, n);
    c->wbuf.len = fl_tls_take_out(c->tls, c->wbuf.p, n);
    uv_buf_t b = uv_buf_init(c->wbuf.p, (unsigned int)c->wbuf.len);
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb) < 0) {
        conn_close(c, 0);
        return;
    }
    c->writing = 1;
}

static void flush(fl_conn_t *c)
{
    if (c->tls) {
        if (!c->writing && c->state != CS_CLOSED)
            tls_flush(c);
        return;
    }
    if (c->writing || c->out.len == 0 || c->state == CS_CLOSED)
        return;
    fl_buf_t t = c->wbuf;
    c->wbuf = c->out;
    c->out = t;
    c->out.len = 0;
    uv_buf_t b = uv_buf_init(c->wbuf.p, (unsigned int)c->wbuf.len);
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb) < 0) {
        conn_close(c, 0);
        return;
    }
    c->writing = 1;
}

static void after_write(fl_conn_t *c)
{
    if (c->h2) {
        fl_h2_after_write(c);
        return;
    }
    switch (c->state) {
    case CS_IDLE:
        if (c->in.len > c->in_off && !c->processing)
            process_input(c); /* answering was paused on OUT_HIGH */
        else
            update_reading(c);
        break;
    case CS_STREAM:
        if (c->st.wait_write) {
            c->st.wait_write = 0;
            stream_pump(c);
        }
        break;
    case CS_CLOSE_AFTER_WRITE:
        if (!c->writing && c->out.len == 0)
            start_linger(c);
        break;
    case CS_RST_DRAIN:
        rst_poll(c);
        break;
    default:
        break;
    }
}

static void write_cb(uv_write_t *req, int status)
{
    fl_conn_t *c = req->data;
    c->writing = 0;
    c->wbuf.len = 0;
    if (c->state == CS_CLOSED)
        return;
    if (status < 0) {
        conn_close(c, 0);
        return;
    }
    fl_buf_shrink(&c->wbuf, KEEP_CAP);
    flush(c);
    after_write(c);
}

/* ---- reading ------------------------------------------------------------ */

/* Free space at the end of conn->in for the next bytes of input. */
static void in_reserve(fl_conn_t *c)
{
    fl_buf_t *b = &c->in;
    if (c->req.phase == FL_P_BODY_CL) {
        /* the body size is known: make room for all of it at once */
        size_t need = c->in_off + c->req.head_len + (size_t)c->req.content_length;
        if (need > b->cap && need - b->len >= IN_CHUNK)
            fl_buf_reserve_exact(b, need);
    }
    if (b->cap - b->len < IN_CHUNK / 4)
        fl_buf_reserve(b, IN_CHUNK);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *out)
{
    fl_conn_t *c = h->data;
    fl_buf_t *b = &c->in;
    in_reserve(c);
    *out = uv_buf_init(b->p + b->len, (unsigned int)(b->cap - b->len));
}

/* The client went away (an EOF with an answer pending, a reset): the
 * answers in progress are logged as left, then the connection closes. */
static void client_left(fl_conn_t *c)
{
    if (c->h2)
        fl_h2_client_left(c);
    else
        fl_log_client_left(c->log_seq);
    conn_close(c, 0);
}

/* The client closed (or half-closed) its side. */
static void peer_closed(fl_conn_t *c)
{
    c->peer_eof = 1;
    switch (c->state) {
    case CS_IDLE:
        process_input(c); /* closes once the buffered requests are answered */
        break;
    case CS_CLOSE_AFTER_WRITE:
        if (!c->writing && c->out.len == 0)
            conn_close(c, 0);
        break;
    default:
        /* the client went away while an answer was pending: cancel it */
        client_left(c);
        break;
    }
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    fl_conn_t *c = s->data;
    if (c->state == CS_CLOSED)
        return;
    if (n > 0) {
        switch (c->state) {
        case CS_LINGER:
        case CS_RST_DRAIN:
            return; /* discarded */
        case CS_IDLE:
            c->in.len += (size_t)n;
            process_input(c);
            return;
        default:
            c->in.len += (size_t)n; /* a pipelined request: answered later */
            update_reading(c);
            return;
        }
    }
    if (n == 0)
        return;
    if (n != UV_EOF) {
        client_left(c);
        return;
    }
    c->reading = 0; /* libuv stops reading at EOF */
    peer_closed(c);
}

/* ---- reading over TLS ----------------------------------------------------- */

static void tls_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *out)
{
    fl_conn_t *c = h->data;
    fl_buf_t *b = &c->w->tls_in; /* consumed before the next read of any connection */
    if (b->cap < TLS_IN_CHUNK)
        fl_buf_reserve_exact(b, TLS_IN_CHUNK);
    *out = uv_buf_init(b->p, (unsigned int)b->cap);
}

/* A fatal TLS error (a plain-HTTP request, a bad certificate on the other
 * side, a corrupted record): nothing more can be sent but the alert OpenSSL
 * queued, which the client should get before the FIN. */
static void tls_failed(fl_conn_t *c)
{
    uv_timer_stop(&c->timer);
    c->keep_alive = 0;
    c->out.len = 0;
    c->pending.len = 0;
    c->state = CS_CLOSE_AFTER_WRITE;
    flush(c);
    if (c->state != CS_CLOSED && !c->writing)
        start_linger(c);
}

static void tls_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    fl_conn_t *c = s->data;
    if (c->state == CS_CLOSED || n == 0)
        return;
    if (n < 0) {
        if (n != UV_EOF) {
            client_left(c);
            return;
        }
        c->reading = 0;
        peer_closed(c);
        return;
    }
    if (c->state == CS_LINGER || c->state == CS_RST_DRAIN)
        return; /* discarded, undecrypted */
    fl_tls_feed(c->tls, buf->base, (size_t)n);
    int hs = fl_tls_handshake(c->tls);
    if (hs < 0) {
        tls_failed(c);
        return;
    }
    /* Decrypt everything fed so far: nothing stays buffered in OpenSSL, so
     * pausing the socket reads pauses the input exactly as without TLS. */
    size_t before = c->in.len;
    int eof = 0;
    while (hs > 0) {
        in_reserve(c);
        ssize_t got = fl_tls_read(c->tls, c->in.p + c->in.len, c->in.cap - c->in.len);
        if (got > 0) {
            c->in.len += (size_t)got;
        } else if (got == 0) {
            break;
        } else if (got == FL_TLS_EOF) {
            eof = 1;
            break;
        } else {
            tls_failed(c);
            return;
        }
    }
    if (c->in.len > before) {
        if (c->state == CS_IDLE)
            process_input(c);
        else
            update_reading(c);
        if (c->state == CS_CLOSED)
            return;
    }
    flush(c); /* handshake messages, session tickets, key-update replies */
    if (eof && c->state != CS_CLOSED && !c->peer_eof) {
        if (c->reading) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = 0;
        }
        peer_closed(c);
    }
}

static void update_reading(fl_conn_t *c)
{
    int want;
    if (c->state == CS_CLOSED || c->peer_eof)
        return;
    switch (c->state) {
    case CS_IDLE:
        want = c->out.len < OUT_HIGH;
        break;
    case CS_LINGER:
    case CS_RST_DRAIN:
        want = 1;
        break;
    default:
        want = c->in.len < IN_HIGH;
        break;
    }
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, c->tls ? tls_alloc_cb : alloc_cb,
                          c->tls ? tls_read_cb : read_cb) == 0)
            c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

/* ---- answering ---------------------------------------------------------- */

static void finish_answer(fl_conn_t *c)
{
    fl_api_answer_done(c);
    if (c->keep_alive) {
        c->state = CS_IDLE;
        if (!c->processing)
            process_input(c);
    } else {
        c->state = CS_CLOSE_AFTER_WRITE;
        flush(c);
        if (!c->writing && c->out.len == 0) {
            if (c->peer_eof)
                conn_close(c, 0);
            else
                start_linger(c);
        }
    }
}

static void begin_rst(fl_conn_t *c)
{
    c->state = CS_RST_DRAIN;
    c->drain_polls = 0;
    flush(c);
    update_reading(c);
    rst_poll(c);
}

static void stream_timer_cb(uv_timer_t *t)
{
    fl_conn_t *c = t->data;
    if (c->state != CS_STREAM)
        return;
    if (c->writing) {
        c->st.wait_write = 1;
        return;
    }
    stream_pump(c);
}

static int drop_due(const fl_stream_t *s)
{
    return s->drop_after >= 0 && s->next >= (s->drop_after < s->n ? s->drop_after : s->n);
}

/* The stall replaces the normal gap after min(stall_after, n) content
 * events (so with stall_after 0 the head goes out alone), and comes before
 * a drop due at the same point. */
static int stall_due(const fl_stream_t *s)
{
    return s->stall_after >= 0 && !s->stalled &&
           s->next >= (s->stall_after < s->n ? s->stall_after : s->n);
}

static void stream_pump(fl_conn_t *c)
{
    fl_stream_t *s = &c->st;
    while (c->state == CS_STREAM) {
        if (stall_due(s)) {
            s->stalled = 1;
            flush(c);
            uv_timer_start(&c->timer, stream_timer_cb, (uint64_t)s->stall_ms, 0);
            return;
        }
        if (drop_due(s)) {
            begin_rst(c);
            return;
        }
        if (fl_api_stream_next(c)) {
            finish_answer(c);
            flush(c);
            return;
        }
        flush(c);
        if (stall_due(s) || drop_due(s))
            continue;
        if (s->delay_ms > 0) {
            uv_timer_start(&c->timer, stream_timer_cb, (uint64_t)s->delay_ms, 0);
            return;
        }
        if (c->out.len >= STREAM_BATCH) {
            s->wait_write = 1; /* one batch in flight, one queued */
            return;
        }
    }
}

static void run_action(fl_conn_t *c)
{
    switch (c->action) {
    case ACT_SEND:
        fl_buf_add(&c->out, c->pending.p, c->pending.len);
        c->pending.len = 0;
        fl_buf_shrink(&c->pending, KEEP_CAP);
        finish_answer(c);
        break;
    case ACT_SEND_THEN_RST:
        fl_buf_add(&c->out, c->pending.p, c->pending.len);
        c->pending.len = 0;
        begin_rst(c);
        break;
    case ACT_RST:
        begin_rst(c);
        break;
    case ACT_STREAM:
        fl_buf_add(&c->out, c->pending.p, c->pending.len);
        c->pending.len = 0;
        c->state = CS_STREAM;
        c->st.wait_write = 0;
        stream_pump(c);
        break;
    }
}

static void delay_timer_cb(uv_timer_t *t)
{
    fl_conn_t *c = t->data;
    if (c->state != CS_DELAY)
        return;
    run_action(c);
    if (c->state == CS_IDLE)
        flush(c);
}

void fl_conn_flush(fl_conn_t *c)
{
    flush(c);
    if (c->state != CS_CLOSED)
        update_reading(c);
}

void fl_conn_close(fl_conn_t *c, int rst)
{
    conn_close(c, rst);
}

void fl_conn_queue(fl_conn_t *c, fl_action_t action, int64_t delay_ms)
{
    if (c->h2s) {
        fl_h2_queue(c, action, delay_ms);
        return;
    }
    c->action = action;
    if (delay_ms > 0) {
        c->state = CS_DELAY;
        uv_timer_start(&c->timer, delay_timer_cb, (uint64_t)delay_ms, 0);
        return;
    }
    run_action(c);
}

void fl_conn_hang(fl_conn_t *c)
{
    if (c->h2s) {
        fl_h2_hang(c);
        return;
    }
    c->state = CS_HANG;
}

static void process_input(fl_conn_t *c)
{
    if (!c->h2 && !c->h2_checked && c->in.len > c->in_off) {
        /* HTTP/2 with prior knowledge (or after ALPN h2) opens with its preface */
        int pre = fl_h2_is_preface(c->in.p + c->in_off, c->in.len - c->in_off);
        if (pre == 0) {
            update_reading(c);
            return;
        }
        c->h2_checked = 1;
        if (pre > 0)
            fl_h2_start(c);
    }
    if (c->h2) {
        fl_h2_input(c);
        return;
    }
    c->processing = 1;
    while (c->state == CS_IDLE && c->out.len < OUT_HIGH && c->in.len > c->in_off) {
        const char *base = c->in.p + c->in_off;
        size_t had_head = c->req.head_len;
        fl_phase_t ph = fl_req_parse(&c->req, base, c->in.len - c->in_off, &c->cbody);
        if (ph == FL_P_ERROR) {
            fl_api_reject(c, c->req.err_status, c->req.err_msg);
            c->keep_alive = 0;
            finish_answer(c);
            break;
        }
        if (ph != FL_P_DONE) {
            if (!had_head && c->req.head_len && c->req.expect_continue && c->req.minor == 1 &&
                !c->continue_sent) {
                fl_buf_adds(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
                c->continue_sent = 1;
            }
            break;
        }
        c->keep_alive = c->req.keep_alive;
        const char *body = c->req.chunked ? c->cbody.p : base + c->req.head_len;
        size_t body_len = c->req.chunked ? c->cbody.len : (size_t)c->req.content_length;
        size_t total = c->req.total_len;
        fl_api_handle(c, base, body, body_len);
        if (c->state == CS_CLOSED)
            return;
        c->in_off += total;
        fl_req_reset(&c->req);
        c->cbody.len = 0;
        fl_buf_shrink(&c->cbody, KEEP_CAP);
        c->continue_sent = 0;
    }
    if (c->state == CS_CLOSED)
        return;
    if (c->in_off) {
        memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
        if (c->in.len == 0 && c->in.cap > KEEP_CAP)
            fl_buf_free(&c->in);
    }
    flush(c);
    c->processing = 0;
    if (c->peer_eof && c->state == CS_IDLE && c->out.len < OUT_HIGH) {
        /* half-closed client: everything it sent has been answered */
        c->state = CS_CLOSE_AFTER_WRITE;
        if (!c->writing && c->out.len == 0)
            conn_close(c, 0);
        return;
    }
    update_reading(c);
}

/* ---- accepting ---------------------------------------------------------- */

static void on_connection(uv_stream_t *server, int status)
{
    fl_worker_t *w = server->data;
    if (status < 0)
        return;
    fl_conn_t *c = fl_xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->w = w;
    fl_req_reset(&c->req);
    uv_tcp_init(&w->loop, &c->tcp);
    uv_timer_init(&w->loop, &c->timer);
    c->tcp.data = c->timer.data = c->wreq.data = c->sreq.data = c;
    c->handles = 2;
    c->state = CS_IDLE;
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    atomic_fetch_add(&fl_stats.open, 1);
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c, 0);
        return;
    }
    atomic_fetch_add(&fl_stats.accepted, 1);
    c->id = atomic_fetch_add(&fl_conn_seq, 1) + 1;
    uv_tcp_nodelay(&c->tcp, 1);
    if (fl_cfg.tls)
        c->tls = fl_tls_new();
    update_reading(c);
}

static void close_plain(uv_handle_t *h)
{
    (void)h;
}

static void on_stop(uv_async_t *a)
{
    fl_worker_t *w = a->data;
    while (w->conns)
        conn_close(w->conns, 0);
    uv_close((uv_handle_t *)&w->listener, close_plain);
    uv_close((uv_handle_t *)&w->stop, close_plain);
}

void fl_worker_init(fl_worker_t *w)
{
    int rc;
    if ((rc = uv_loop_init(&w->loop)) < 0 || (rc = uv_tcp_init(&w->loop, &w->listener)) < 0 ||
        (rc = uv_tcp_open(&w->listener, w->fd)) < 0 ||
        (rc = uv_async_init(&w->loop, &w->stop, on_stop)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&w->listener, 4096, on_connection)) < 0) {
        fprintf(stderr, "fakellm: worker %d: %s\n", w->index, uv_strerror(rc));
        exit(1);
    }
    w->listener.data = w;
    w->stop.data = w;
}

void fl_worker_run(fl_worker_t *w)
{
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    fl_buf_free(&w->scratch);
    fl_buf_free(&w->tls_in);
}

void fl_worker_stop(fl_worker_t *w)
{
    uv_async_send(&w->stop);
}
