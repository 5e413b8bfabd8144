/*
 * fuzz_http_request.c — arbitrary bytes as an HTTP/1.x request stream.
 *
 * Input: byte 0 selects limits and which callbacks pause, byte 1 a split
 * point; the rest is the stream.  It is parsed whole, then split in two at
 * the derived point with pausing callbacks, then (when short) one byte at a
 * time; the event traces must be identical.  Every head is checked against
 * the guarantees of http.h, and what the parser accepted must be accepted
 * by the writers.  fuzz_http_response.c reuses this file for responses.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"

#ifndef FUZZ_KIND
#define FUZZ_KIND VSR_HTTP_REQUEST
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    vsr_buf_t trace;
    const vsr_http_parser_t *p;
    int pause_head, pause_body, pause_complete;
    int paused;
    uint64_t body_in_msg;
} fz_t;

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "invariant broken: %s\n", what);
        abort();
    }
}

static int within(const vsr_http_parser_t *p, vsr_slice_t s)
{
    if (s.len == 0)
        return 1;
    return s.p >= p->_headbuf.data && s.p + s.len <= p->_headbuf.data + p->_headbuf.len;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static int fz_head(void *ud, vsr_http_head_t *h)
{
    fz_t *f = ud;
    const vsr_http_parser_t *p = f->p;
    vsr_buf_t w;
    vsr_buf_init(&w, 0);

    check(h->version_minor == 0 || h->version_minor == 1, "version");
    check(h->num_headers <= p->limits.max_headers, "num_headers");
    check(within(p, h->method) && within(p, h->target) && within(p, h->reason), "start line slices");
    if (p->kind == VSR_HTTP_REQUEST) {
        check(h->method.len > 0 && h->target.len > 0, "method/target");
        check(vsr_http_write_request_line(&w, h->method, h->target) == VSR_OK, "writer refuses request line");
        check(!h->until_close, "request until_close");
        check(h->has_body == (h->chunked || h->content_length > 0), "request has_body");
    } else {
        check(h->status >= 100 && h->status <= 599, "status");
        check(vsr_http_write_status_line(&w, h->status, h->reason) == VSR_OK, "writer refuses status line");
        if (h->until_close)
            check(h->has_body && !h->keep_alive && !h->chunked && h->content_length < 0, "until_close");
    }
    if (h->chunked)
        check(h->content_length == -1, "chunked with CL");
    if (h->content_length > 0 && !h->chunked && p->limits.max_body && p->kind == VSR_HTTP_REQUEST)
        check((uint64_t)h->content_length <= p->limits.max_body, "declared body over max_body");

    vsr_buf_printf(&f->trace, "\x01H%d %d %d " VSR_SLICE_FMT " " VSR_SLICE_FMT " " VSR_SLICE_FMT
                              " %lld %d%d%d%d%d%d %zu\n",
                   p->kind, h->version_minor, h->status, VSR_SLICE_ARG(h->method), VSR_SLICE_ARG(h->target),
                   VSR_SLICE_ARG(h->reason), (long long)h->content_length, h->chunked, h->keep_alive,
                   h->expect_continue, h->upgrade, h->has_body, h->until_close, h->num_headers);
    for (size_t i = 0; i < h->num_headers; i++) {
        vsr_slice_t n = h->headers[i].name, v = h->headers[i].value;
        check(n.len > 0 && within(p, n) && within(p, v), "field slices");
        check(v.len == 0 || (!is_ows(v.p[0]) && !is_ows(v.p[v.len - 1])), "value not trimmed");
        check(vsr_http_write_header(&w, n, v) == VSR_OK, "writer refuses a parsed field");
        vsr_buf_printf(&f->trace, VSR_SLICE_FMT ":" VSR_SLICE_FMT "\n", VSR_SLICE_ARG(n), VSR_SLICE_ARG(v));
        vsr_buf_printf(&f->trace, "%d", vsr_http_is_hop_by_hop(h, n));
        vsr_slice_t got;
        check(vsr_http_head_get(h, "", &got) == 0, "empty name found");
    }
    vsr_slice_t host;
    if (vsr_http_head_get(h, "host", &host))
        vsr_buf_printf(&f->trace, "host=" VSR_SLICE_FMT "\n", VSR_SLICE_ARG(host));
    vsr_buf_free(&w);
    f->body_in_msg = 0;
    return f->pause_head ? VSR_PAUSED : VSR_OK;
}

static int fz_body(void *ud, const char *b, size_t n)
{
    fz_t *f = ud;
    check(n > 0, "on_body with n == 0");
    f->body_in_msg += n;
    if (f->p->limits.max_body)
        check(f->body_in_msg <= f->p->limits.max_body, "body over max_body");
    vsr_buf_append(&f->trace, b, n);
    return f->pause_body ? VSR_PAUSED : VSR_OK;
}

static int fz_complete(void *ud)
{
    fz_t *f = ud;
    vsr_buf_append_cstr(&f->trace, "\x01" "C\n");
    return f->pause_complete ? VSR_PAUSED : VSR_OK;
}

static int fz_head_w(void *ud, vsr_http_head_t *h)
{
    int rc = fz_head(ud, h);
    ((fz_t *)ud)->paused |= rc == VSR_PAUSED;
    return rc;
}
static int fz_body_w(void *ud, const char *b, size_t n)
{
    int rc = fz_body(ud, b, n);
    ((fz_t *)ud)->paused |= rc == VSR_PAUSED;
    return rc;
}
static int fz_complete_w(void *ud)
{
    int rc = fz_complete(ud);
    ((fz_t *)ud)->paused |= rc == VSR_PAUSED;
    return rc;
}

static const vsr_http_callbacks_t FZ_CBS = {fz_head_w, fz_body_w, fz_complete_w};

/* Feeds one piece, resuming after pauses.  0 ok, 1 stopped for good. */
static int fz_feed(vsr_http_parser_t *p, fz_t *f, const char *d, size_t n, int *unconsumed)
{
    size_t off = 0;
    for (;;) {
        f->paused = 0;
        ssize_t k = vsr_http_parser_execute(p, d + off, n - off);
        if (k < 0) {
            check(k == VSR_ERR_INVALID, "error code");
            if (p->kind == VSR_HTTP_REQUEST)
                check(p->error_status == 400 || p->error_status == 413 || p->error_status == 431 ||
                          p->error_status == 501 || p->error_status == 505,
                      "request error status");
            else
                check(p->error_status == 502, "response error status");
            check(p->error_msg != NULL && !vsr_http_parser_idle(p), "error state");
            vsr_buf_printf(&f->trace, "\x01" "E%d %s\n", p->error_status, p->error_msg);
            return 1;
        }
        check((size_t)k <= n - off, "consumed more than given");
        off += (size_t)k;
        if (f->paused)
            continue;
        if (off < n) {
            /* only an upgraded connection leaves bytes without a pause */
            check(p->kind == VSR_HTTP_RESPONSE, "bytes left without a pause");
            *unconsumed = 1;
            return 1;
        }
        return 0;
    }
}

/* Pieces: [0, first), then `step` bytes at a time (step 0: the rest). */
static void fz_run(const vsr_http_limits_t *lim, int head_req, int pause_mask, const char *d, size_t n,
                   size_t first, size_t step, vsr_buf_t *out)
{
    fz_t f;
    memset(&f, 0, sizeof(f));
    vsr_buf_init(&f.trace, 0);
    f.pause_head = pause_mask & 1;
    f.pause_body = (pause_mask >> 1) & 1;
    f.pause_complete = (pause_mask >> 2) & 1;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, FUZZ_KIND, lim, &FZ_CBS, &f);
    f.p = &p;
    if (head_req)
        vsr_http_parser_set_head_request(&p, 1);
    int unconsumed = 0, stopped = 0;
    size_t off = 0, piece = first;
    while (!stopped) {
        size_t k = piece < n - off ? piece : n - off;
        stopped = fz_feed(&p, &f, d + off, k, &unconsumed);
        off += k;
        if (off == n)
            break;
        piece = step ? step : n - off;
    }
    if (unconsumed)
        vsr_buf_append_cstr(&f.trace, "\x01X\n");
    if (!stopped || unconsumed) {
        int rc = vsr_http_parser_finish(&p);
        vsr_buf_printf(&f.trace, "\x01" "F%d %d\n", rc, rc ? p.error_status : 0);
    }
    vsr_http_parser_free(&p);
    *out = f.trace;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t ctl = data[0], seed = data[1];
    const char *d = (const char *)data + 2;
    size_t n = size - 2;

    vsr_http_limits_t lim = {0, 0, 0};
    if (ctl & 1) {
        lim.max_head_size = 256;
        lim.max_headers = 6;
    }
    if (ctl & 2)
        lim.max_body = 64;
    int head_req = (ctl >> 5) & 1;
    int pause_mask = (ctl >> 2) & 7;

    vsr_buf_t a, b;
    fz_run(&lim, head_req, 0, d, n, n, 0, &a);
    size_t cut = n * seed / 255;
    fz_run(&lim, head_req, pause_mask, d, n, cut, 0, &b);
    if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0)) {
        fprintf(stderr, "split at %zu changes the events\n", cut);
        abort();
    }
    vsr_buf_free(&b);
    if (n <= 1024) {
        fz_run(&lim, head_req, pause_mask ^ 7, d, n, 0, 1, &b);
        if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0)) {
            fprintf(stderr, "byte-by-byte feeding changes the events\n");
            abort();
        }
        vsr_buf_free(&b);
    }
    vsr_buf_free(&a);
    return 0;
}
