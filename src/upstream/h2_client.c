/*
 * h2_client.c — HTTP/2 to backends over nghttp2 (client side): per-worker,
 * per-endpoint pools of connections, each multiplexing many attempts as
 * streams.
 *
 * A connection (h2conn) is CONNECTING (TCP, then TLS when the endpoint has
 * it), OPEN, or CLOSING.  Requests are submitted to the nghttp2 session at
 * once, even while connecting: the session holds them until the connection
 * is up and flow control lets them go.  One write is in flight at a time;
 * while it is, nothing more is pulled from the session, so a large request
 * body streams at the socket's pace.  Reads are never paused (other streams
 * share the connection): a paused stream's DATA is held, unacknowledged, so
 * its window closes and the server stops sending it, while the connection
 * window is acknowledged at once.
 *
 * Stream memory: a stream is referenced by its call (until detach) and by
 * the session (until nghttp2 closes it, or the connection goes).  It is
 * freed when both are done.
 *
 * Nothing here decides about retries or timeouts: the call's outcome is
 * reported to upstream.c through vsr__call_h2_*.
 */
#include <nghttp2/nghttp2.h>
#include <stdio.h>

#include "upstream/tls.h"
#include "upstream/upstream-int.h"

#define H2_IDLE_TIMEOUT_MS 60000           /* a connection without streams closes after this */
#define H2_STREAM_WINDOW (256 * 1024)      /* per stream: what a paused stream may hold */
#define H2_CONN_WINDOW (16 * 1024 * 1024)  /* per connection */
#define H2_ASSUMED_MAX_STREAMS 100         /* until the server's SETTINGS say */
#define H2_OUT_CHUNK (64 * 1024)           /* bytes pulled from the session per write */

typedef struct h2conn_s h2conn_t;

struct vsr_h2_pool_s {
    vsr_upstream_t *up;
    uv_loop_t *loop;
    const char *host; /* SNI and logs */
    int tls;
    const struct sockaddr_storage *addr;
    struct vsr_tls_ctx_s *tls_ctx;
    shared_cluster_t *sc;
    h2conn_t *conns;
    int h1_only; /* the TLS server chose http/1.1 */
};

typedef enum { H2C_CONNECTING, H2C_OPEN, H2C_CLOSING } h2c_state_t;

struct h2conn_s {
    uv_tcp_t tcp;
    uv_timer_t timer; /* connect, then idle expiry */
    uv_connect_t connect_req;
    uv_write_t write_req;
    vsr_h2_pool_t *pool;
    vsr_upstream_t *up;
    shared_cluster_t *sc;
    h2conn_t *next, *prev;
    nghttp2_session *session;
    vsr_tls_t *tls;
    vsr_h2_stream_t *streams; /* every stream the session knows, attached or not */
    unsigned n_streams;
    h2c_state_t state;
    int pending_closes;
    vsr_buf_t wbuf;           /* bytes of the write in flight */
    vsr_rbuf_t *cur_rbuf;     /* the plaintext being fed to the session */
    int32_t goaway_last_id;   /* -1 until a GOAWAY arrives */
    unsigned writing : 1;
    unsigned in_session : 1;  /* inside nghttp2_session_mem_recv/_send: no closing, no flushing */
    unsigned dead : 1;        /* close once out of the session's callbacks */
    unsigned counted_pending : 1;
    unsigned tls_ready : 1;
    unsigned got_settings : 1; /* the server's SETTINGS arrived */
    const char *dead_detail;
};

struct vsr_h2_stream_s {
    h2conn_t *conn;
    vsr_h2_stream_t *next, *prev; /* in conn->streams */
    vsr_upstream_call_t *call;    /* NULL once detached */
    int32_t id;
    uint32_t ordinal;             /* streams on the connection when this one was submitted, itself included */
    unsigned blind : 1;           /* submitted before the server's SETTINGS were known */
    const uv_buf_t *body;         /* borrowed from the call */
    size_t n_body, body_idx, body_off;
    int head_request;
    /* response head: fields as "name\0value\0" in hbuf, offsets in hoff */
    vsr_buf_t hbuf;
    uint32_t hoff[VSR_HTTP_MAX_HEADERS][4];
    size_t n_hdrs;
    int status;
    vsr_buf_t held;               /* DATA received while paused */
    unsigned paused : 1;
    unsigned got_head : 1;
    unsigned local_closed : 1;    /* our END_STREAM went out */
    unsigned remote_closed : 1;   /* the server's END_STREAM arrived */
    unsigned nh_closed : 1;       /* the session is done with it (then conn is not touched) */
    unsigned completed : 1;
    unsigned busy : 1;            /* delivering held bytes: not freed under the loop */
    unsigned bad_head : 1;        /* the response head was refused (nghttp2 resets the stream) */
};

static void conn_flush(h2conn_t *c);
static void conn_close(h2conn_t *c);
static void conn_arm_idle(h2conn_t *c);

/* ---- stream bookkeeping ---- */

static void stream_free_if_done(vsr_h2_stream_t *s)
{
    if (s->call || !s->nh_closed || s->busy)
        return;
    vsr_buf_free(&s->hbuf);
    vsr_buf_free(&s->held);
    vsr_free(s);
}

/* The session no longer knows the stream. */
static void stream_unlink(vsr_h2_stream_t *s)
{
    h2conn_t *c = s->conn;
    if (s->nh_closed)
        return;
    s->nh_closed = 1;
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
    c->n_streams--;
}

/* Resets a stream the server may still be sending or receiving. */
static void stream_reset(vsr_h2_stream_t *s, uint32_t code)
{
    h2conn_t *c = s->conn;
    if (!s->nh_closed && c->session && c->state != H2C_CLOSING && !(s->local_closed && s->remote_closed))
        nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, s->id, code);
}

/* Reports the end of a stream that had no complete response.  The stream
 * lets go of the call first: the report may start anything. */
static void stream_fail(vsr_h2_stream_t *s, vsr_outcome_t o, vsr_upstream_error_t err, const char *detail)
{
    vsr_upstream_call_t *call = s->call;
    if (call == NULL)
        return;
    s->call = NULL;
    stream_reset(s, NGHTTP2_CANCEL);
    vsr__call_h2_failed(call, o, err, detail);
}

static void stream_complete(vsr_h2_stream_t *s)
{
    vsr_upstream_call_t *call = s->call;
    s->call = NULL;
    if (!s->local_closed)
        stream_reset(s, NGHTTP2_NO_ERROR); /* answered early: the rest of the upload is not wanted */
    vsr__call_h2_complete(call);
}

/* ---- connection life ---- */

static void conn_close_cb(uv_handle_t *h)
{
    h2conn_t *c = h->data;
    if (--c->pending_closes > 0)
        return;
    vsr_upstream_t *up = c->up;
    atomic_fetch_sub(&c->sc->connections, 1);
    vsr__upstream_cluster_unref(c->sc);
    vsr_buf_free(&c->wbuf);
    vsr__tls_free(c->tls);
    vsr_free(c);
    vsr__upstream_put(up);
}

static void uncount_pending(h2conn_t *c)
{
    if (c->counted_pending) {
        c->counted_pending = 0;
        atomic_fetch_sub(&c->sc->pending, 1);
    }
}

/* Fails every stream still attached and forgets them all.  Streams the
 * server never saw (above a GOAWAY's last id, or on a connection that never
 * came up) are safe to retry. */
static void conn_fail_streams(h2conn_t *c, int connected, const char *detail)
{
    while (c->streams) {
        vsr_h2_stream_t *s = c->streams;
        stream_unlink(s);
        if (s->call) {
            if (s->got_head)
                stream_fail(s, VSR_OUTCOME_RESET, VSR_UPSTREAM_E_ABORTED, detail);
            else if (!connected)
                stream_fail(s, VSR_OUTCOME_CONNECT_FAILURE, VSR_UPSTREAM_E_CONNECT, detail);
            else if (c->goaway_last_id >= 0 && s->id > c->goaway_last_id)
                stream_fail(s, VSR_OUTCOME_RESET_BEFORE_REQUEST, VSR_UPSTREAM_E_RESET, "goaway");
            else
                stream_fail(s, s->local_closed ? VSR_OUTCOME_RESET : VSR_OUTCOME_RESET_BEFORE_REQUEST,
                            VSR_UPSTREAM_E_RESET, detail);
        }
        stream_free_if_done(s);
    }
}

static void conn_unlink(h2conn_t *c)
{
    vsr_h2_pool_t *p = c->pool;
    if (p == NULL)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        p->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    c->pool = NULL;
}

static void conn_close(h2conn_t *c)
{
    if (c->state == H2C_CLOSING)
        return;
    if (c->in_session) {
        c->dead = 1; /* the session is on the stack: close once it returns */
        return;
    }
    conn_unlink(c);
    uncount_pending(c);
    int connected = c->state == H2C_OPEN && (c->tls == NULL || c->tls_ready);
    c->state = H2C_CLOSING;
    conn_fail_streams(c, connected, c->dead_detail ? c->dead_detail : "connection termination");
    nghttp2_session_del(c->session);
    c->session = NULL;
    c->pending_closes = 2;
    uv_close((uv_handle_t *)&c->tcp, conn_close_cb);
    uv_close((uv_handle_t *)&c->timer, conn_close_cb);
}

static void conn_die(h2conn_t *c, const char *detail)
{
    if (c->dead_detail == NULL)
        c->dead_detail = detail;
    conn_close(c);
}

/* A GOAWAY'd connection, or one that failed, takes no more streams. */
static int conn_accepts(h2conn_t *c)
{
    if (c->state == H2C_CLOSING || c->dead || c->goaway_last_id >= 0 || c->session == NULL)
        return 0;
    if (!nghttp2_session_check_request_allowed(c->session))
        return 0;
    uint32_t max = nghttp2_session_get_remote_settings(c->session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    return c->n_streams < max;
}

static void timer_cb(uv_timer_t *t)
{
    h2conn_t *c = t->data;
    if (c->dead)
        conn_close(c);
    else if (c->state == H2C_CONNECTING || (c->tls && !c->tls_ready))
        conn_die(c, "connection timeout");
    else if (c->n_streams == 0)
        conn_close(c); /* idle too long */
}

static void conn_arm_idle(h2conn_t *c)
{
    if (c->state == H2C_OPEN && c->n_streams == 0) {
        if (c->goaway_last_id >= 0 || c->pool == NULL || c->up == NULL)
            conn_close(c);
        else
            uv_timer_start(&c->timer, timer_cb, H2_IDLE_TIMEOUT_MS, 0);
    }
}

/* ---- nghttp2 callbacks ---- */

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    VSR_UNUSED(sess);
    VSR_UNUSED(ud);
    vsr_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
    if (s && f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_RESPONSE) {
        vsr_buf_reset(&s->hbuf);
        s->n_hdrs = 0;
        s->status = 0;
    }
    return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    VSR_UNUSED(flags);
    VSR_UNUSED(ud);
    vsr_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
    if (s == NULL || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_RESPONSE)
        return 0; /* trailers and pushes are not relayed */
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        uint64_t st = 0;
        if (vsr_slice_to_u64(vsr_slice((const char *)value, valuelen), 999, &st) != VSR_OK) {
            s->bad_head = 1;
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        s->status = (int)st;
        return 0;
    }
    if (namelen > 0 && name[0] == ':')
        return 0;
    if (s->n_hdrs >= VSR_HTTP_MAX_HEADERS || s->hbuf.len + namelen + valuelen > (64u << 10)) {
        s->bad_head = 1;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* as the HTTP/1.1 parser's head limits */
    }
    uint32_t *o = s->hoff[s->n_hdrs++];
    o[0] = (uint32_t)s->hbuf.len;
    o[1] = (uint32_t)namelen;
    vsr_buf_append(&s->hbuf, (const char *)name, namelen);
    o[2] = (uint32_t)s->hbuf.len;
    o[3] = (uint32_t)valuelen;
    vsr_buf_append(&s->hbuf, (const char *)value, valuelen);
    return 0;
}

/* nghttp2 found the response HEADERS invalid (no :status, a forbidden
 * field, ...): it resets the stream; the attempt's outcome is a protocol
 * error, as an invalid HTTP/1.1 head is. */
static int on_invalid_frame(nghttp2_session *sess, const nghttp2_frame *f, int lib_error, void *ud)
{
    VSR_UNUSED(lib_error);
    VSR_UNUSED(ud);
    vsr_h2_stream_t *s = f->hd.stream_id ? nghttp2_session_get_stream_user_data(sess, f->hd.stream_id) : NULL;
    if (s && f->hd.type == NGHTTP2_HEADERS)
        s->bad_head = 1;
    return 0;
}

/* The final response head, as the HTTP/1.1 parser would describe it. */
static void deliver_head(vsr_h2_stream_t *s, int end_stream)
{
    vsr_http_head_t *head = vsr_calloc(1, sizeof(*head));
    head->status = s->status;
    head->version_minor = 1;
    head->content_length = -1;
    head->keep_alive = 1;
    for (size_t i = 0; i < s->n_hdrs; i++) {
        head->headers[i].name = vsr_slice(s->hbuf.data + s->hoff[i][0], s->hoff[i][1]);
        head->headers[i].value = vsr_slice(s->hbuf.data + s->hoff[i][2], s->hoff[i][3]);
        uint64_t cl;
        if (vsr_slice_case_eq_cstr(head->headers[i].name, "content-length") &&
            vsr_slice_to_u64(head->headers[i].value, INT64_MAX, &cl) == VSR_OK)
            head->content_length = (int64_t)cl;
    }
    head->num_headers = s->n_hdrs;
    head->has_body = !end_stream && !s->head_request && s->status != 204 && s->status != 304;
    s->got_head = 1;
    vsr__call_h2_head(s->call, head);
    vsr_free(head);
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    h2conn_t *c = ud;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->goaway_last_id = f->goaway.last_stream_id;
        return 0;
    }
    if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK)) {
        c->got_settings = 1;
        return 0;
    }
    vsr_h2_stream_t *s = f->hd.stream_id ? nghttp2_session_get_stream_user_data(sess, f->hd.stream_id) : NULL;
    if (s == NULL || s->call == NULL)
        return 0;
    int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_RESPONSE) {
        if (s->status < 200) {
            if (s->status == 101 || s->status == 0 || end) {
                stream_fail(s, VSR_OUTCOME_PROTOCOL, VSR_UPSTREAM_E_PROTOCOL, "invalid interim response");
                return 0;
            }
            return 0; /* 1xx: the final response follows */
        }
        deliver_head(s, end);
        if (s->call == NULL)
            return 0;
    } else if (f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) {
        return 0;
    }
    if (end) {
        s->remote_closed = 1;
        if (!s->got_head) {
            stream_fail(s, VSR_OUTCOME_PROTOCOL, VSR_UPSTREAM_E_PROTOCOL, "stream ended without a response");
            return 0;
        }
        if (s->held.len) {
            s->completed = 1; /* reported once the held bytes are delivered */
            return 0;
        }
        stream_complete(s);
    }
    return 0;
}

/* Hands n held or received bytes to the call. */
static void deliver_body(vsr_h2_stream_t *s, const char *p, size_t n, vsr_rbuf_t *owner)
{
    h2conn_t *c = s->conn;
    if (!s->nh_closed && c->session && s->id > 0)
        nghttp2_session_consume_stream(c->session, s->id, n);
    vsr__call_h2_body(s->call, p, n, owner);
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud)
{
    VSR_UNUSED(flags);
    h2conn_t *c = ud;
    /* the connection window is never the bottleneck of a slow stream */
    nghttp2_session_consume_connection(sess, len);
    vsr_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, id);
    if (s == NULL || s->call == NULL || !s->got_head) {
        if (s)
            nghttp2_session_consume_stream(sess, id, len);
        return 0;
    }
    if (s->paused || s->held.len) {
        vsr_buf_append(&s->held, (const char *)data, len);
        return 0;
    }
    deliver_body(s, (const char *)data, len, c->cur_rbuf);
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *ud)
{
    h2conn_t *c = ud;
    vsr_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, id);
    if (s == NULL)
        return 0;
    stream_unlink(s);
    if (s->call && !(s->completed && error_code == NGHTTP2_NO_ERROR)) {
        if (s->got_head) {
            stream_fail(s, VSR_OUTCOME_RESET, VSR_UPSTREAM_E_ABORTED, "stream reset");
        } else if (s->bad_head) {
            stream_fail(s, VSR_OUTCOME_PROTOCOL, VSR_UPSTREAM_E_PROTOCOL, "invalid response head");
        } else if (c->goaway_last_id >= 0 && id > c->goaway_last_id) {
            /* the server says it never processed it */
            stream_fail(s, VSR_OUTCOME_RESET_BEFORE_REQUEST, VSR_UPSTREAM_E_RESET, "goaway");
        } else if (error_code == NGHTTP2_REFUSED_STREAM && s->blind &&
                   s->ordinal > nghttp2_session_get_remote_settings(sess, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)) {
            /* sent beyond a limit the server had not told yet: not a failure
             * of the attempt, it goes again (now within the limit) */
            vsr_upstream_call_t *call = s->call;
            s->call = NULL;
            vsr__call_h2_resend(call);
        } else if (error_code == NGHTTP2_REFUSED_STREAM) {
            stream_fail(s, VSR_OUTCOME_REFUSED_STREAM, VSR_UPSTREAM_E_RESET, "refused stream");
        } else {
            stream_fail(s, s->local_closed ? VSR_OUTCOME_RESET : VSR_OUTCOME_RESET_BEFORE_REQUEST,
                        VSR_UPSTREAM_E_RESET, "remote reset");
        }
    }
    stream_free_if_done(s);
    conn_arm_idle(c);
    return 0;
}

/* Request body: the call's pieces, in order, at flow control's pace. */
static ssize_t read_body(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    VSR_UNUSED(sess);
    VSR_UNUSED(id);
    VSR_UNUSED(ud);
    vsr_h2_stream_t *s = src->ptr;
    if (s->call == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* detached: the stream is being reset */
    size_t got = 0;
    while (got < length && s->body_idx < s->n_body) {
        const uv_buf_t *b = &s->body[s->body_idx];
        size_t n = VSR_MIN(length - got, b->len - s->body_off);
        memcpy(buf + got, b->base + s->body_off, n);
        got += n;
        s->body_off += n;
        if (s->body_off == b->len) {
            s->body_idx++;
            s->body_off = 0;
        }
    }
    if (s->body_idx == s->n_body) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        s->local_closed = 1;
    }
    return (ssize_t)got;
}

static int on_frame_send(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    VSR_UNUSED(ud);
    if (f->hd.type == NGHTTP2_HEADERS && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        vsr_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
        if (s)
            s->local_closed = 1;
    }
    return 0;
}

/* ---- I/O ---- */

static void write_cb(uv_write_t *w, int status)
{
    h2conn_t *c = w->data;
    c->writing = 0;
    vsr_buf_reset(&c->wbuf);
    if (c->state == H2C_CLOSING)
        return;
    if (status < 0) {
        conn_die(c, "write failed");
        return;
    }
    conn_flush(c);
}

/* Pulls frames from the session into one write (none while one is in
 * flight: write_cb comes back for the rest). */
static void conn_flush(h2conn_t *c)
{
    if (c->state != H2C_OPEN || c->writing || c->dead || c->in_session)
        return;
    int talking = c->tls == NULL || c->tls_ready; /* else only the handshake goes out */
    vsr_buf_reset(&c->wbuf);
    while (talking && c->wbuf.len < H2_OUT_CHUNK) {
        const uint8_t *data;
        c->in_session = 1; /* sending may close streams: their callbacks run from here */
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        c->in_session = 0;
        if (c->dead) {
            conn_close(c);
            return;
        }
        if (n < 0) {
            conn_die(c, "protocol error");
            return;
        }
        if (n == 0)
            break;
        if (c->tls) {
            if (vsr__tls_write(c->tls, (const char *)data, (size_t)n) != VSR_OK) {
                conn_die(c, "TLS write failed");
                return;
            }
        } else {
            vsr_buf_append(&c->wbuf, (const char *)data, (size_t)n);
        }
        if (c->tls && vsr__tls_pending_out(c->tls) >= H2_OUT_CHUNK)
            break;
    }
    if (c->tls) {
        size_t n = vsr__tls_pending_out(c->tls);
        vsr_buf_reserve(&c->wbuf, n);
        c->wbuf.len = vsr__tls_take_out(c->tls, c->wbuf.data, n);
    }
    if (c->wbuf.len == 0) {
        if (talking && !nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session))
            conn_die(c, "connection termination");
        return;
    }
    uv_buf_t b = uv_buf_init(c->wbuf.data, (unsigned)c->wbuf.len);
    if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, write_cb) < 0) {
        conn_die(c, "write failed");
        return;
    }
    c->writing = 1;
}

/* Plaintext from the server. */
static int conn_recv(h2conn_t *c, const char *p, size_t n)
{
    c->in_session = 1;
    ssize_t used = nghttp2_session_mem_recv(c->session, (const uint8_t *)p, n);
    c->in_session = 0;
    if (c->dead) {
        conn_close(c);
        return VSR_ERR;
    }
    if (used < 0) {
        conn_die(c, "protocol error");
        return VSR_ERR;
    }
    return VSR_OK;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    VSR_UNUSED(suggested);
    h2conn_t *c = h->data;
    VSR_BUG_ON(c->cur_rbuf != NULL);
    c->cur_rbuf = vsr_rbuf_get();
    *buf = uv_buf_init(c->cur_rbuf->data, VSR_RBUF_SIZE);
}

static void start_session(h2conn_t *c);

static void tls_input(h2conn_t *c, ssize_t nread, const uv_buf_t *buf)
{
    if (nread > 0 && vsr__tls_feed(c->tls, buf->base, (size_t)nread) != VSR_OK) {
        conn_die(c, "TLS input overflow");
        return;
    }
    vsr_rbuf_unref(c->cur_rbuf);
    c->cur_rbuf = NULL;
    if (!c->tls_ready) {
        if (nread < 0) {
            conn_die(c, "TLS handshake: connection closed");
            return;
        }
        int rc = vsr__tls_handshake(c->tls);
        if (rc == VSR_ERR) {
            vsr_log_warn("upstream", "TLS to %s: %s", c->pool ? c->pool->host : "?", vsr__tls_error(c->tls));
            conn_die(c, "TLS handshake failed");
            return;
        }
        if (rc == VSR_AGAIN) {
            conn_flush(c); /* the handshake's next flight, once the write in flight is done */
            return;
        }
        c->tls_ready = 1;
        if (!vsr__tls_selected_h2(c->tls)) {
            /* the server speaks HTTP/1.1 only: every call here goes that way */
            if (c->pool)
                c->pool->h1_only = 1;
            conn_unlink(c);
            while (c->streams) {
                vsr_h2_stream_t *s = c->streams;
                stream_unlink(s);
                vsr_upstream_call_t *call = s->call;
                s->call = NULL;
                if (call)
                    vsr__call_h2_downgrade(call);
                stream_free_if_done(s);
            }
            conn_close(c);
            return;
        }
        start_session(c);
        return;
    }
    for (;;) {
        vsr_rbuf_t *pt = vsr_rbuf_get();
        ssize_t n = vsr__tls_read(c->tls, pt->data, VSR_RBUF_SIZE);
        if (n <= 0) {
            vsr_rbuf_unref(pt);
            if (n == VSR_EOF)
                nread = UV_EOF;
            else if (n < 0)
                nread = UV_ECONNRESET;
            break;
        }
        c->cur_rbuf = pt;
        int rc = conn_recv(c, pt->data, (size_t)n);
        c->cur_rbuf = NULL;
        vsr_rbuf_unref(pt);
        if (rc != VSR_OK)
            return;
    }
    if (nread < 0) {
        conn_die(c, nread == UV_EOF ? "connection termination" : "remote reset");
        return;
    }
    conn_flush(c);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    h2conn_t *c = st->data;
    vsr_clock_tick(); /* a response's times are its own (base.h: the cached clock) */
    if (c->state == H2C_CLOSING) {
        /* nothing */
    } else if (c->tls) {
        tls_input(c, nread, buf);
    } else if (nread < 0) {
        conn_die(c, nread == UV_EOF ? "connection termination" : "remote reset");
    } else if (nread > 0 && conn_recv(c, buf->base, (size_t)nread) == VSR_OK) {
        conn_flush(c);
    }
    if (c->cur_rbuf) {
        vsr_rbuf_unref(c->cur_rbuf);
        c->cur_rbuf = NULL;
    }
}

/* The connection (and TLS, when any) is up: the session may talk. */
static void start_session(h2conn_t *c)
{
    uv_timer_stop(&c->timer);
    for (vsr_h2_stream_t *s = c->streams; s; s = s->next)
        if (s->call)
            vsr__call_h2_sent(s->call);
    conn_flush(c);
    conn_arm_idle(c);
}

static void connect_cb(uv_connect_t *req, int status)
{
    h2conn_t *c = req->data;
    if (c->state == H2C_CLOSING || status == UV_ECANCELED)
        return;
    uncount_pending(c);
    if (status < 0) {
        conn_die(c, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->state = H2C_OPEN;
    if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) < 0) {
        conn_die(c, "read failed");
        return;
    }
    if (c->tls) {
        if (vsr__tls_handshake(c->tls) == VSR_ERR) {
            conn_die(c, "TLS setup failed");
            return;
        }
        conn_flush(c); /* the ClientHello */
        return; /* the connect timer runs on through the handshake */
    }
    start_session(c);
}

static h2conn_t *conn_new(vsr_h2_pool_t *p, uint64_t connect_ms)
{
    h2conn_t *c = vsr_calloc(1, sizeof(*c));
    c->pool = p;
    c->up = p->up;
    c->sc = p->sc;
    atomic_fetch_add(&c->sc->refs, 1); /* the cluster may be dropped before this connection's handles close */
    c->goaway_last_id = -1;
    c->state = H2C_CONNECTING;
    vsr_buf_init(&c->wbuf, 0);
    uv_tcp_init(p->loop, &c->tcp);
    uv_timer_init(p->loop, &c->timer);
    c->tcp.data = c->timer.data = c->connect_req.data = c->write_req.data = c;
    vsr__upstream_hold(p->up);

    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_peer_max_concurrent_streams(opt, H2_ASSUMED_MAX_STREAMS);
    nghttp2_session_client_new2(&c->session, cbs, c, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
    };
    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, VSR_ARRAY_LEN(iv));
    nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW);

    c->next = p->conns;
    if (p->conns)
        p->conns->prev = c;
    p->conns = c;
    if (p->tls) {
        c->tls = vsr__tls_new(p->tls_ctx, p->host);
        if (c->tls)
            vsr__tls_offer_h2(c->tls); /* a failure shows in the handshake */
    }
    struct sockaddr_storage addr;
    vsr__upstream_addr(p->sc, p->addr, &addr);
    int rc = addr.ss_family == 0 ? UV_EAI_NONAME
                                 : uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&addr, connect_cb);
    if (rc < 0) {
        c->dead_detail = uv_strerror(rc);
        c->dead = 1; /* failed from the loop: the streams are not attached yet */
        uv_timer_start(&c->timer, timer_cb, 0, 0);
        return c;
    }
    uv_timer_start(&c->timer, timer_cb, connect_ms ? connect_ms : 10000, 0);
    return c;
}

/* ---- pool ---- */

vsr_h2_pool_t *vsr__h2_pool_new(vsr_upstream_t *up, uv_loop_t *loop, const char *host, int tls,
                                const struct sockaddr_storage *addr, struct vsr_tls_ctx_s *tls_ctx,
                                shared_cluster_t *sc)
{
    vsr_h2_pool_t *p = vsr_calloc(1, sizeof(*p));
    p->up = up;
    p->loop = loop;
    p->host = host;
    p->tls = tls;
    p->addr = addr;
    p->tls_ctx = tls_ctx;
    p->sc = sc;
    return p;
}

void vsr__h2_pool_free(vsr_h2_pool_t *p)
{
    if (p == NULL)
        return;
    while (p->conns) {
        h2conn_t *c = p->conns;
        conn_unlink(c);
        conn_close(c);
    }
    vsr_free(p);
}

int vsr__h2_pool_usable(const vsr_h2_pool_t *p)
{
    return !p->h1_only;
}

/* HTTP/1.1 head text -> HTTP/2 fields (lower-case names, no
 * connection-specific fields, host as :authority). */
static int build_nv(const char *head, size_t len, int tls, vsr_buf_t *names, nghttp2_nv *nv, size_t cap,
                    size_t *n_out)
{
    vsr_slice_t rest = vsr_slice(head, len);
    vsr_slice_t line = vsr_slice_split(rest, '\n', &rest);
    vsr_slice_t target, method = vsr_slice_split(line, ' ', &target);
    vsr_slice_t version;
    target = vsr_slice_split(target, ' ', &version);
    if (method.len == 0 || target.len == 0)
        return VSR_ERR;
    size_t n = 0;
    /* lower-cased names go into `names`; the offsets are fixed up below */
    vsr_buf_reserve(names, len + 64);
    nv[n++] = (nghttp2_nv){(uint8_t *)":method", (uint8_t *)method.p, 7, method.len, NGHTTP2_NV_FLAG_NONE};
    nv[n++] = (nghttp2_nv){(uint8_t *)":scheme", (uint8_t *)(tls ? "https" : "http"), 7, tls ? 5 : 4,
                           NGHTTP2_NV_FLAG_NONE};
    nv[n++] = (nghttp2_nv){(uint8_t *)":path", (uint8_t *)target.p, 5, target.len, NGHTTP2_NV_FLAG_NONE};
    size_t authority_at = n++;
    nv[authority_at] = (nghttp2_nv){(uint8_t *)":authority", (uint8_t *)"", 10, 0, NGHTTP2_NV_FLAG_NONE};
    while (rest.p && rest.len > 0 && n < cap) {
        line = vsr_slice_split(rest, '\n', &rest);
        if (line.len && line.p[line.len - 1] == '\r')
            line.len--;
        if (line.len == 0)
            break;
        vsr_slice_t value, name = vsr_slice_split(line, ':', &value);
        value = vsr_slice_trim(value);
        if (vsr_slice_case_eq_cstr(name, "host")) {
            nv[authority_at].value = (uint8_t *)value.p;
            nv[authority_at].valuelen = value.len;
            continue;
        }
        if (vsr_slice_case_eq_cstr(name, "connection") || vsr_slice_case_eq_cstr(name, "keep-alive") ||
            vsr_slice_case_eq_cstr(name, "proxy-connection") || vsr_slice_case_eq_cstr(name, "transfer-encoding") ||
            vsr_slice_case_eq_cstr(name, "upgrade") ||
            (vsr_slice_case_eq_cstr(name, "te") && !vsr_slice_case_eq_cstr(value, "trailers")))
            continue;
        char *lower = names->data + names->len;
        for (size_t i = 0; i < name.len; i++) {
            char ch = name.p[i];
            lower[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        }
        names->len += name.len;
        nv[n++] = (nghttp2_nv){(uint8_t *)lower, (uint8_t *)value.p, name.len, value.len, NGHTTP2_NV_FLAG_NONE};
    }
    *n_out = n;
    return VSR_OK;
}

vsr_h2_stream_t *vsr__h2_start(vsr_h2_pool_t *p, vsr_upstream_call_t *call, const char *head, size_t head_len,
                               const uv_buf_t *body, size_t n_body, int head_request, uint64_t connect_ms,
                               const char **overflow)
{
    h2conn_t *c = p->conns;
    while (c && !conn_accepts(c))
        c = c->next;
    if (c == NULL) {
        if ((*overflow = vsr__call_admit_connection(call, p->sc)) != NULL)
            return NULL;
        c = conn_new(p, connect_ms);
        c->counted_pending = 1;
    }
    vsr_h2_stream_t *s = vsr_calloc(1, sizeof(*s));
    s->conn = c;
    s->call = call;
    s->body = body;
    s->n_body = n_body;
    s->head_request = head_request;
    vsr_buf_init(&s->hbuf, 0);
    vsr_buf_init(&s->held, 0);
    s->next = c->streams;
    if (c->streams)
        c->streams->prev = s;
    c->streams = s;
    c->n_streams++;
    s->ordinal = c->n_streams;
    s->blind = !c->got_settings;
    if (c->state == H2C_OPEN && (c->tls == NULL || c->tls_ready))
        uv_timer_stop(&c->timer); /* no longer idle (a connecting one keeps its connect timer) */

    nghttp2_nv nv[VSR_HTTP_MAX_HEADERS + 8];
    size_t n_nv = 0;
    vsr_buf_t names;
    vsr_buf_init(&names, 0);
    uint64_t body_len = 0;
    for (size_t i = 0; i < n_body; i++)
        body_len += body[i].len;
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = read_body};
    int32_t id = -1;
    if (build_nv(head, head_len, p->tls, &names, nv, VSR_ARRAY_LEN(nv), &n_nv) == VSR_OK)
        id = nghttp2_submit_request(c->session, NULL, nv, n_nv, body_len ? &dp : NULL, s);
    vsr_buf_free(&names);
    if (id < 0) {
        /* reported from the loop, as every failure: the connection's timer */
        stream_unlink(s);
        s->nh_closed = 1;
        s->id = 0;
        s->call = NULL;
        stream_free_if_done(s);
        *overflow = NULL;
        conn_arm_idle(c);
        return NULL;
    }
    s->id = id;
    if (c->state == H2C_OPEN && (c->tls == NULL || c->tls_ready) && !c->dead) {
        vsr__call_h2_sent(call);
        conn_flush(c);
    }
    return s;
}

void vsr__h2_stream_detach(vsr_h2_stream_t *s)
{
    if (s == NULL || s->call == NULL)
        return;
    s->call = NULL;
    vsr_buf_free(&s->held);
    if (!s->nh_closed) {
        /* sending the RST_STREAM may close the stream, and free it, at once */
        h2conn_t *c = s->conn;
        stream_reset(s, NGHTTP2_CANCEL);
        conn_flush(c);
        return;
    }
    stream_free_if_done(s);
}

void vsr__h2_pause(vsr_h2_stream_t *s)
{
    s->paused = 1;
}

void vsr__h2_resume(vsr_h2_stream_t *s)
{
    if (!s->paused)
        return;
    s->paused = 0;
    h2conn_t *c = s->conn;
    /* held bytes go out in rbuf-sized pieces, until paused again */
    size_t off = 0;
    s->busy = 1;
    while (s->call && !s->paused && off < s->held.len) {
        size_t n = VSR_MIN(s->held.len - off, (size_t)VSR_RBUF_SIZE);
        vsr_rbuf_t *rb = vsr_rbuf_get();
        memcpy(rb->data, s->held.data + off, n);
        off += n;
        deliver_body(s, rb->data, n, rb);
        vsr_rbuf_unref(rb);
    }
    s->busy = 0;
    if (s->call == NULL) {
        stream_free_if_done(s); /* detached from a callback */
        return;
    }
    if (off) {
        memmove(s->held.data, s->held.data + off, s->held.len - off);
        s->held.len -= off;
    }
    if (s->held.len == 0 && s->completed) {
        stream_complete(s);
        stream_free_if_done(s);
        return;
    }
    if (!s->nh_closed)
        conn_flush(c); /* the window updates */
}
