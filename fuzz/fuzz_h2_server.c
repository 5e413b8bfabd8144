/*
 * fuzz_h2_server.c — arbitrary bytes as what an HTTP/2 client sends to the
 * gateway's session (h2.c): frames after the connection preface, or, when
 * byte 0 says so, an `Upgrade: h2c` first with HTTP2-Settings taken from
 * the input.  nghttp2 parses the frames; what is ours is checked: the
 * request head built from the fields (host first from :authority, limits
 * held, no pseudo-field left), bodies within the limit, each request ended
 * exactly once, and the response path (respond, body, end, reset).
 *
 * The request layer and the connection (conn.c) are played by stubs here,
 * so the session runs alone; a request is answered at once or after a
 * few more input events, as byte 0 chooses.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "invariant broken: %s\n", what);
        abort();
    }
}

struct conn_s {
    h2_sess_t *h2;
    vsr_listener_conf_t lc;
    size_t sent;
    int ended;
    int flush_due;
    int mode;
};

struct request_s {
    conn_t *c;
    h2_stream_t *st;
    vsr_http_head_t *head;
    vsr_buf_t body;
    int dispatched;
    request_t *next;       /* requests not answered yet */
};

static request_t *waiting;
static size_t live;

static void req_free(request_t *req)
{
    for (request_t **pp = &waiting; *pp; pp = &(*pp)->next)
        if (*pp == req) {
            *pp = req->next;
            break;
        }
    vsr_buf_free(&req->body);
    free(req);
    live--;
}

request_t *vsr__request_open(conn_t *c, h2_stream_t *st, vsr_http_head_t *head)
{
    const vsr_http_head_t *h = head;
    check(h->num_headers <= c->lc.max_headers + 1 && h->num_headers <= VSR_HTTP_MAX_HEADERS, "field count");
    for (size_t i = 0; i < h->num_headers; i++) {
        check(h->headers[i].name.len == 0 || h->headers[i].name.p[0] != ':', "pseudo-field among fields");
    }
    request_t *req = calloc(1, sizeof(*req));
    req->c = c;
    req->st = st;
    req->head = head;
    vsr_buf_init(&req->body, c->lc.max_body_bytes);
    live++;
    return req;
}

int vsr__request_body(request_t *req, const char *p, size_t n)
{
    check(!req->dispatched, "body after dispatch");
    return vsr_buf_append(&req->body, p, n) == VSR_OK ? VSR_OK : VSR_ERR_TOO_BIG;
}

int vsr__request_body_whole(const request_t *req)
{
    return req->head->content_length < 0 || req->body.len == (uint64_t)req->head->content_length;
}

static void answer(request_t *req, int status)
{
    static const vsr_http_header_t f[] = {{VSR_SLICE_LIT("Content-Type"), VSR_SLICE_LIT("text/plain")}};
    int streaming = req->c->mode & 1;
    vsr__resp_head_t rh = {.status = status, .fields = f, .n_fields = 1, .content_length = streaming ? -1 : 2};
    vsr__h2_respond(req->st, &rh, "ok", 2, streaming);
    if (streaming) {
        vsr__h2_body(req->st, req->body.data ? req->body.data : "", req->body.len);
        if (req->c->mode & 2)
            vsr__h2_reset(req->st);
        else
            vsr__h2_end(req->st);
    }
    vsr__h2_detach(req->st);
    req_free(req);
}

void vsr__request_dispatch(request_t *req)
{
    check(!req->dispatched, "dispatched twice");
    req->dispatched = 1;
    if (req->c->mode & 4) {
        req->next = waiting; /* answered later, from outside the session's callbacks */
        waiting = req;
        return;
    }
    answer(req, 200);
}

/* request.c's verdict on a head; a request with a body and a key that is
 * not good enough: byte 0's top bit */
int vsr__request_admit(request_t *req, int transport_status, int has_body)
{
    const vsr_http_head_t *h = req->head;
    if (h->target.len == 0)
        return 400;
    if (transport_status)
        return transport_status;
    if (h->content_length > 0 && (uint64_t)h->content_length > req->c->lc.max_body_bytes)
        return 413;
    if (has_body && (req->c->mode & 128))
        return 401;
    return 0;
}

void vsr__request_reject(request_t *req, int status)
{
    check(status == 400 || status == 413 || status == 431, "reject status");
    check(!req->dispatched, "rejected after dispatch");
    req->dispatched = 1;
    answer(req, status);
}

void vsr__request_refuse(request_t *req, int status)
{
    if (status == 401)
        vsr__request_dispatch(req);
    else
        vsr__request_reject(req, status);
}

void vsr__request_reset(request_t *req)
{
    req_free(req);
}

void vsr__request_resume(request_t *req)
{
    (void)req;
}

void vsr__conn_send(conn_t *c, vsr_buf_t *b)
{
    c->sent += b->len;
    vsr_buf_free(b);
}

void vsr__conn_send_rbuf(conn_t *c, vsr_rbuf_t *rb, size_t len)
{
    c->sent += len;
    vsr_rbuf_unref(rb);
}

size_t vsr__conn_queued(const conn_t *c)
{
    (void)c;
    return 0;
}

void vsr__conn_end(conn_t *c, int graceful)
{
    (void)graceful;
    c->ended = 1;
}

void vsr__conn_flush_soon(conn_t *c)
{
    c->flush_due = 1;
}

void vsr__conn_flush_after(conn_t *c, uint64_t ms)
{
    (void)ms;
    c->flush_due = 1;
}

/* the ext_proc listener's calls (xp.c): this session is a client
 * listener's, whose streams are never Process calls */
xp_call_t *vsr__xp_call_open(conn_t *c, worker_t *w, const vsr_listener_conf_t *lc, h2_stream_t *st,
                             const vsr_http_head_t *head)
{
    (void)c, (void)w, (void)lc, (void)st, (void)head;
    abort();
}

void vsr__xp_call_data(xp_call_t *x, const char *p, size_t n)
{
    (void)x, (void)p, (void)n;
    abort();
}

void vsr__xp_call_end(xp_call_t *x)
{
    (void)x;
    abort();
}

void vsr__xp_call_free(xp_call_t *x)
{
    (void)x;
    abort();
}

uint64_t vsr__xp_call_check(xp_call_t *x, uint64_t now)
{
    (void)x, (void)now;
    abort();
}

vsr_metrics_shard_t *vsr__conn_metrics(const conn_t *c)
{
    (void)c;
    return NULL;
}

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    conn_t c;
    memset(&c, 0, sizeof(c));
    c.mode = data[0];
    c.lc.max_headers = 1 + data[1] % 40;
    c.lc.max_header_bytes = 1024 + (size_t)(data[1] % 8) * 512;
    c.lc.max_body_bytes = 1 + (data[1] >> 3) * 64;
    data += 2;
    size -= 2;
    c.h2 = vsr__h2_new(&c, &c.lc);
    check(c.h2 != NULL, "session");

    if (c.mode & 8) {
        /* Upgrade: the first line of the input is the HTTP2-Settings value */
        const uint8_t *nl = memchr(data, '\n', size);
        size_t n = nl ? (size_t)(nl - data) : size;
        static vsr_http_head_t head;
        memset(&head, 0, sizeof(head));
        head.method = VSR_SLICE_LIT("GET");
        head.target = VSR_SLICE_LIT("/");
        head.content_length = -1;
        request_t *req = vsr__request_open(&c, NULL, &head);
        h2_stream_t *st = NULL;
        if (vsr__h2_upgrade(c.h2, vsr_slice((const char *)data, n), req, 0, &st) == VSR_OK) {
            req->st = st;
            vsr__request_dispatch(req);
        } else {
            req_free(req);
        }
        data += nl ? n + 1 : n;
        size -= nl ? n + 1 : n;
    }
    int ok = vsr__h2_feed(c.h2, PREFACE, sizeof(PREFACE) - 1) == VSR_OK;
    /* the rest in pieces, so frames straddle feeds; waiting requests are
     * answered between pieces */
    size_t step = 1 + (c.mode >> 4) * 7;
    for (size_t off = 0; ok && off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        ok = vsr__h2_feed(c.h2, (const char *)data + off, n) == VSR_OK;
        if (waiting && (off / step) % 3 == 0)
            answer(waiting, 200);
        if (c.flush_due) {
            c.flush_due = 0;
            vsr__h2_flush(c.h2);
        }
    }
    while (waiting)
        answer(waiting, 200);
    if (ok)
        vsr__h2_goaway(c.h2);
    (void)vsr__h2_active(c.h2);
    vsr__h2_free(c.h2); /* resets what is still in flight */
    check(live == 0, "every request ended exactly once");
    return 0;
}
