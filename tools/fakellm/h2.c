/*
 * HTTP/2 (nghttp2, server side) on a connection that opened with the client
 * preface: h2c with prior knowledge on a plain listener, h2 after ALPN on a
 * TLS one (server.c moves the bytes; TLS is below it).
 *
 * Every stream's request is rewritten as the HTTP/1.1 request it stands for
 * (":method :path HTTP/1.1", host from :authority, the fields, a
 * content-length) and parsed and answered by the same code as HTTP/1.1, on
 * a stand-in fl_conn_t owned by the stream.  The answer comes back as
 * HTTP/1.1 text (a head, then a body or SSE events without chunk framing);
 * this file turns the head into a HEADERS frame and the body into DATA at
 * flow control's pace.  So echo, knobs, the call log and streams behave
 * exactly as over HTTP/1.1; the faults map onto HTTP/2 thus:
 *   reset before headers  RST_STREAM INTERNAL_ERROR, no HEADERS
 *   reset after headers   HEADERS, then RST_STREAM INTERNAL_ERROR
 *   drop-after N          N events, then RST_STREAM INTERNAL_ERROR
 *   refuse-stream         RST_STREAM REFUSED_STREAM (HTTP/2 only)
 *   goaway                GOAWAY with a last stream id below the stream,
 *                         then the connection closes (HTTP/2 only)
 */
#include "fakellm.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H2_OUT_HIGH (1u << 20)      /* session output queued in conn->out: stop pulling */
#define H2_STREAM_BATCH (64u << 10) /* an undelayed stream produces this much ahead */

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct fl_h2 {
    fl_conn_t *c;
    nghttp2_session *sess;
    fl_h2_stream_t *streams;
    int close_after_write; /* GOAWAY sent: close once it is out */
};

struct fl_h2_stream {
    fl_conn_t sc; /* the stand-in: first, so timer callbacks find the stream */
    fl_h2_t *h;   /* NULL once the connection is gone */
    fl_h2_stream_t *prev, *next;
    int32_t id;
    fl_buf_t method, path, authority, fields; /* the request as it arrives */
    fl_buf_t body;
    size_t out_off;       /* sc.out bytes already handed to DATA frames */
    int answered;         /* HEADERS submitted */
    int eof;              /* sc.out holds the whole rest of the body */
    int rst_after;        /* reset once sc.out is drained (drop-after, reset after headers) */
    int streaming;        /* sc.st drives the body */
    int waiting;          /* a stream delay or stall is running */
    int deferred;         /* the data source is deferred */
    int closed;           /* the session is done with it */
    int too_big;
};

int fl_h2_is_preface(const char *p, size_t n)
{
    size_t m = n < sizeof preface - 1 ? n : sizeof preface - 1;
    if (memcmp(p, preface, m) != 0)
        return -1;
    return m == sizeof preface - 1 ? 1 : 0;
}

/* ---- output ---------------------------------------------------------------- */

static void h2_send(fl_h2_t *h)
{
    fl_conn_t *c = h->c;
    if (c->state == CS_CLOSED)
        return;
    while (c->out.len < H2_OUT_HIGH) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(h->sess, &data);
        if (n < 0) {
            fl_conn_close(c, 0);
            return;
        }
        if (n == 0)
            break;
        fl_buf_add(&c->out, data, (size_t)n);
    }
    fl_conn_flush(c);
    if (c->state == CS_CLOSED)
        return;
    if (!c->writing && c->out.len == 0 &&
        (h->close_after_write || (!nghttp2_session_want_read(h->sess) && !nghttp2_session_want_write(h->sess))))
        fl_conn_close(c, 0);
}

void fl_h2_after_write(fl_conn_t *c)
{
    h2_send(c->h2);
}

/* ---- streams ------------------------------------------------------------- */

static void stream_timer_closed(uv_handle_t *hd)
{
    fl_h2_stream_t *s = hd->data;
    fl_buf_free(&s->sc.in);
    fl_buf_free(&s->sc.cbody);
    fl_buf_free(&s->sc.out);
    fl_buf_free(&s->sc.pending);
    fl_buf_free(&s->sc.st.id);
    fl_buf_free(&s->sc.st.model);
    fl_buf_free(&s->sc.st.echo);
    fl_buf_free(&s->sc.st.text);
    fl_buf_free(&s->sc.st.tok);
    fl_buf_free(&s->method);
    fl_buf_free(&s->path);
    fl_buf_free(&s->authority);
    fl_buf_free(&s->fields);
    fl_buf_free(&s->body);
    free(s);
}

static void stream_release(fl_h2_stream_t *s)
{
    fl_h2_t *h = s->h;
    if (h) {
        if (s->prev)
            s->prev->next = s->next;
        else
            h->streams = s->next;
        if (s->next)
            s->next->prev = s->prev;
        s->h = NULL;
    }
    s->closed = 1;
    uv_timer_stop(&s->sc.timer);
    uv_close((uv_handle_t *)&s->sc.timer, stream_timer_closed);
}

static int drop_due(const fl_stream_t *s)
{
    return s->drop_after >= 0 && s->next >= (s->drop_after < s->n ? s->drop_after : s->n);
}

static int stall_due(const fl_stream_t *s)
{
    return s->stall_after >= 0 && !s->stalled &&
           s->next >= (s->stall_after < s->n ? s->stall_after : s->n);
}

static void stream_timer_cb(uv_timer_t *t);

/* Produces SSE events into sc.out, as server.c's stream_pump does. */
static void pump(fl_h2_stream_t *s)
{
    fl_stream_t *st = &s->sc.st;
    while (s->streaming && !s->eof && !s->rst_after && !s->waiting) {
        if (stall_due(st)) {
            st->stalled = 1;
            s->waiting = 1;
            uv_timer_start(&s->sc.timer, stream_timer_cb, (uint64_t)st->stall_ms, 0);
            return;
        }
        if (drop_due(st)) {
            s->rst_after = 1;
            return;
        }
        if (fl_api_stream_next(&s->sc)) {
            s->eof = 1;
            return;
        }
        if (stall_due(st) || drop_due(st))
            continue;
        if (st->delay_ms > 0) {
            s->waiting = 1;
            uv_timer_start(&s->sc.timer, stream_timer_cb, (uint64_t)st->delay_ms, 0);
            return;
        }
        if (s->sc.out.len - s->out_off >= H2_STREAM_BATCH)
            return;
    }
}

static void wake(fl_h2_stream_t *s)
{
    if (s->h && s->deferred && !s->closed) {
        s->deferred = 0;
        nghttp2_session_resume_data(s->h->sess, s->id);
    }
}

static void stream_timer_cb(uv_timer_t *t)
{
    fl_h2_stream_t *s = t->data;
    if (s->closed || s->h == NULL)
        return;
    s->waiting = 0;
    pump(s);
    wake(s);
    h2_send(s->h);
}

static ssize_t read_data(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    (void)sess;
    (void)id;
    (void)ud;
    fl_h2_stream_t *s = src->ptr;
    fl_buf_t *o = &s->sc.out;
    if (o->len == s->out_off && !s->eof && !s->rst_after)
        pump(s);
    size_t n = o->len - s->out_off;
    if (n > length)
        n = length;
    if (n) /* a stream paused before its first event has no buffer yet */
        memcpy(buf, o->p + s->out_off, n);
    s->out_off += n;
    if (s->out_off == o->len) {
        o->len = 0;
        s->out_off = 0;
        fl_buf_shrink(o, 256u << 10);
        if (s->eof) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            fl_api_answer_done(&s->sc);
            return (ssize_t)n;
        }
        if (s->rst_after && n == 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM INTERNAL_ERROR */
    }
    if (n == 0) {
        s->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

/* An HTTP/1.1 head (as api.c renders it) -> the response HEADERS. */
static int submit_head(fl_h2_stream_t *s, const char *p, size_t n, size_t *head_len, int with_body)
{
    const char *end = NULL;
    for (size_t i = 0; i + 3 < n; i++)
        if (!memcmp(p + i, "\r\n\r\n", 4)) {
            end = p + i + 4;
            break;
        }
    if (!end || n < 12)
        return -1;
    *head_len = (size_t)(end - p);
    char status[3] = {p[9], p[10], p[11]};
    nghttp2_nv nv[40];
    size_t k = 0;
    nv[k++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)status, 7, 3, NGHTTP2_NV_FLAG_NONE};
    const char *line = (const char *)memchr(p, '\n', *head_len) + 1;
    char lower[40][64];
    while (line < end - 2 && k < 40) {
        const char *eol = memchr(line, '\r', (size_t)(end - line));
        const char *colon = memchr(line, ':', (size_t)(eol - line));
        if (!colon)
            break;
        size_t nl = (size_t)(colon - line);
        const char *v = colon + 1;
        while (v < eol && *v == ' ')
            v++;
        if (nl < 64 && !(nl == 10 && !strncasecmp(line, "connection", 10)) &&
            !(nl == 10 && !strncasecmp(line, "keep-alive", 10)) &&
            !(nl == 17 && !strncasecmp(line, "transfer-encoding", 17))) {
            for (size_t i = 0; i < nl; i++)
                lower[k][i] = (char)((line[i] >= 'A' && line[i] <= 'Z') ? line[i] + 32 : line[i]);
            nv[k] = (nghttp2_nv){(uint8_t *)lower[k], (uint8_t *)v, nl, (size_t)(eol - v), NGHTTP2_NV_FLAG_NONE};
            k++;
        }
        line = eol + 2;
    }
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = read_data};
    s->answered = 1;
    return nghttp2_submit_response(s->h->sess, s->id, nv, k, with_body ? &dp : NULL);
}

static void run_action(fl_h2_stream_t *s)
{
    fl_conn_t *sc = &s->sc;
    size_t hl = 0;
    switch (sc->action) {
    case ACT_SEND: {
        fl_buf_t *p = &sc->pending;
        if (submit_head(s, p->p, p->len, &hl, 1) < 0)
            break;
        fl_buf_add(&sc->out, p->p + hl, p->len - hl);
        s->eof = 1;
        p->len = 0;
        break;
    }
    case ACT_SEND_THEN_RST:
        if (submit_head(s, sc->pending.p, sc->pending.len, &hl, 1) == 0)
            s->rst_after = 1;
        sc->pending.len = 0;
        break;
    case ACT_RST:
        nghttp2_submit_rst_stream(s->h->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
        break;
    case ACT_STREAM:
        if (submit_head(s, sc->pending.p, sc->pending.len, &hl, 1) < 0)
            break;
        sc->pending.len = 0;
        s->streaming = 1;
        pump(s);
        break;
    }
}

static void delay_timer_cb(uv_timer_t *t)
{
    fl_h2_stream_t *s = t->data;
    if (s->closed || s->h == NULL)
        return;
    run_action(s);
    h2_send(s->h);
}

void fl_h2_queue(fl_conn_t *sc, fl_action_t action, int64_t delay_ms)
{
    fl_h2_stream_t *s = sc->h2s;
    sc->action = action;
    if (delay_ms > 0) {
        uv_timer_start(&sc->timer, delay_timer_cb, (uint64_t)delay_ms, 0);
        return;
    }
    run_action(s);
}

void fl_h2_hang(fl_conn_t *sc)
{
    (void)sc; /* never answered; the client's reset or close ends it */
}

void fl_h2_refuse(fl_conn_t *sc)
{
    fl_h2_stream_t *s = sc->h2s;
    nghttp2_submit_rst_stream(s->h->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_REFUSED_STREAM);
}

void fl_h2_goaway(fl_conn_t *sc)
{
    fl_h2_stream_t *s = sc->h2s;
    nghttp2_submit_goaway(s->h->sess, NGHTTP2_FLAG_NONE, s->id > 2 ? s->id - 2 : 0, NGHTTP2_NO_ERROR, NULL, 0);
    s->h->close_after_write = 1;
}

/* The whole request is in: rewrite it as HTTP/1.1 and answer it. */
static void dispatch(fl_h2_stream_t *s)
{
    fl_conn_t *sc = &s->sc;
    fl_buf_t *in = &sc->in;
    in->len = 0;
    fl_buf_add(in, s->method.p, s->method.len);
    fl_buf_addc(in, ' ');
    fl_buf_add(in, s->path.p, s->path.len);
    fl_buf_adds(in, " HTTP/1.1\r\n");
    if (s->authority.len) {
        fl_buf_adds(in, "host: ");
        fl_buf_add(in, s->authority.p, s->authority.len);
        fl_buf_adds(in, "\r\n");
    }
    fl_buf_add(in, s->fields.p, s->fields.len);
    fl_buf_adds(in, "content-length: ");
    fl_buf_addu(in, s->body.len);
    fl_buf_adds(in, "\r\n\r\n");
    fl_buf_add(in, s->body.p, s->body.len);
    fl_req_reset(&sc->req);
    fl_phase_t ph = fl_req_parse(&sc->req, in->p, in->len, &sc->cbody);
    if (s->too_big) {
        sc->req.err_status = 413;
        sc->req.err_msg = "request body too large";
        ph = FL_P_ERROR;
    }
    if (ph != FL_P_DONE) {
        if (ph != FL_P_ERROR) {
            sc->req.err_status = 400;
            sc->req.err_msg = "malformed request";
        }
        fl_api_reject(sc, sc->req.err_status, sc->req.err_msg); /* renders into sc->out */
        fl_buf_t t = sc->pending;
        sc->pending = sc->out;
        sc->out = t;
        sc->out.len = 0;
        sc->action = ACT_SEND;
        run_action(s);
        return;
    }
    sc->keep_alive = 1;
    fl_api_handle(sc, in->p, in->p + sc->req.head_len, (size_t)sc->req.content_length);
}

/* ---- session callbacks ---------------------------------------------------- */

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    fl_h2_t *h = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    fl_h2_stream_t *s = fl_xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->h = h;
    s->id = f->hd.stream_id;
    s->sc.w = h->c->w;
    s->sc.id = h->c->id;
    s->sc.h2s = s;
    s->sc.state = CS_IDLE;
    uv_timer_init(&h->c->w->loop, &s->sc.timer);
    s->sc.timer.data = s;
    s->next = h->streams;
    if (h->streams)
        h->streams->prev = s;
    h->streams = s;
    nghttp2_session_set_stream_user_data(sess, s->id, s);
    return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    fl_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
    if (!s || s->answered)
        return 0;
    const char *n = (const char *)name;
    if (namelen == 7 && !memcmp(n, ":method", 7))
        fl_buf_add(&s->method, value, valuelen);
    else if (namelen == 5 && !memcmp(n, ":path", 5))
        fl_buf_add(&s->path, value, valuelen);
    else if (namelen == 10 && !memcmp(n, ":authority", 10))
        fl_buf_add(&s->authority, value, valuelen);
    else if (namelen && n[0] == ':')
        return 0;
    else if ((namelen == 4 && !memcmp(n, "host", 4) && s->authority.len) ||
             (namelen == 14 && !memcmp(n, "content-length", 14)))
        return 0;
    else {
        fl_buf_add(&s->fields, name, namelen);
        fl_buf_adds(&s->fields, ": ");
        fl_buf_add(&s->fields, value, valuelen);
        fl_buf_adds(&s->fields, "\r\n");
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud)
{
    (void)flags;
    (void)ud;
    fl_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, id);
    if (!s || s->too_big)
        return 0;
    if (s->body.len + len > FL_MAX_BODY) {
        s->too_big = 1;
        fl_buf_free(&s->body);
        return 0;
    }
    fl_buf_add(&s->body, data, len);
    return 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *f, void *ud)
{
    (void)ud;
    if (f->hd.type == NGHTTP2_RST_STREAM) {
        /* the client cancelled the stream: its pending answer is logged so */
        fl_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
        if (s)
            fl_log_client_left(s->sc.log_seq);
        return 0;
    }
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    fl_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
    if (s && !s->answered && !s->sc.h2_checked) {
        s->sc.h2_checked = 1; /* dispatched once */
        dispatch(s);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t code, void *ud)
{
    (void)code;
    (void)ud;
    fl_h2_stream_t *s = nghttp2_session_get_stream_user_data(sess, id);
    if (s)
        stream_release(s);
    return 0;
}

/* ---- connection ----------------------------------------------------------- */

void fl_h2_start(fl_conn_t *c)
{
    fl_h2_t *h = fl_xmalloc(sizeof *h);
    memset(h, 0, sizeof *h);
    h->c = c;
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    if (nghttp2_session_server_new(&h->sess, cbs, h) != 0) {
        fprintf(stderr, "fakellm: cannot create an HTTP/2 session\n");
        abort();
    }
    nghttp2_session_callbacks_del(cbs);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)fl_cfg.h2_max_streams},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(h->sess, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(h->sess, NGHTTP2_FLAG_NONE, 0, 16 << 20);
    c->h2 = h;
}

void fl_h2_input(fl_conn_t *c)
{
    fl_h2_t *h = c->h2;
    size_t n = c->in.len - c->in_off;
    if (n) {
        ssize_t used = nghttp2_session_mem_recv(h->sess, (const uint8_t *)c->in.p + c->in_off, n);
        if (c->state == CS_CLOSED)
            return;
        if (used < 0) {
            h2_send(h); /* the GOAWAY nghttp2 queued for the error */
            fl_conn_close(c, 0);
            return;
        }
        c->in.len = 0;
        c->in_off = 0;
        fl_buf_shrink(&c->in, 256u << 10);
    }
    if (c->peer_eof) {
        fl_h2_client_left(c);
        fl_conn_close(c, 0);
        return;
    }
    h2_send(h);
}

void fl_h2_client_left(fl_conn_t *c)
{
    for (fl_h2_stream_t *s = c->h2 ? c->h2->streams : NULL; s; s = s->next)
        fl_log_client_left(s->sc.log_seq);
}

void fl_h2_free(fl_conn_t *c)
{
    fl_h2_t *h = c->h2;
    c->h2 = NULL;
    while (h->streams) {
        fl_h2_stream_t *s = h->streams;
        stream_release(s);
    }
    nghttp2_session_del(h->sess);
    free(h);
}
