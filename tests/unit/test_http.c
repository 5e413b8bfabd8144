/* test_http.c — HTTP/1.x parser and writers.
 *
 * Every message goes through check(): it is parsed whole, split in two at
 * every offset, fed one byte at a time, and each of those again with every
 * callback pausing; all runs must produce the same event trace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/http.h"

/* ---- recorder ---------------------------------------------------------- */

typedef struct {
    vsr_buf_t trace;
    vsr_http_parser_t *parser;
    int pause_all;     /* every callback returns VSR_PAUSED */
    int pause_complete;
    int abort_head;
    int paused;        /* the last execute() stopped because of a pause */
    int in_body;
    int zero_body;     /* on_body was called with n == 0 */
    int slices_outside; /* a head slice did not point into the head buffer */
    size_t heads, bodies, completes;
} rec_t;

static void end_body(rec_t *r)
{
    if (r->in_body) {
        vsr_buf_append_cstr(&r->trace, "\n");
        r->in_body = 0;
    }
}

static int inside(const vsr_http_parser_t *p, vsr_slice_t s)
{
    if (s.len == 0)
        return 1;
    const char *b = p->_headbuf.data;
    return s.p >= b && s.p + s.len <= b + p->_headbuf.len;
}

static int on_head(void *ud, vsr_http_head_t *h)
{
    rec_t *r = ud;
    end_body(r);
    if (h->method.p)
        vsr_buf_printf(&r->trace, "H " VSR_SLICE_FMT " " VSR_SLICE_FMT " 1.%d", VSR_SLICE_ARG(h->method),
                       VSR_SLICE_ARG(h->target), h->version_minor);
    else
        vsr_buf_printf(&r->trace, "H 1.%d %d " VSR_SLICE_FMT, h->version_minor, h->status,
                       VSR_SLICE_ARG(h->reason));
    vsr_buf_printf(&r->trace, " cl=%lld ch%d ka%d ex%d up%d hb%d uc%d\n", (long long)h->content_length,
                   h->chunked, h->keep_alive, h->expect_continue, h->upgrade, h->has_body, h->until_close);
    if (r->parser && (!inside(r->parser, h->method) || !inside(r->parser, h->target) ||
                      !inside(r->parser, h->reason)))
        r->slices_outside = 1;
    for (size_t i = 0; i < h->num_headers; i++) {
        vsr_buf_printf(&r->trace, "  " VSR_SLICE_FMT ": " VSR_SLICE_FMT "\n", VSR_SLICE_ARG(h->headers[i].name),
                       VSR_SLICE_ARG(h->headers[i].value));
        if (r->parser && (!inside(r->parser, h->headers[i].name) || !inside(r->parser, h->headers[i].value)))
            r->slices_outside = 1;
    }
    r->heads++;
    if (r->abort_head)
        return VSR_ERR;
    return r->pause_all ? VSR_PAUSED : VSR_OK;
}

static int on_body(void *ud, const char *p, size_t n)
{
    rec_t *r = ud;
    if (n == 0)
        r->zero_body = 1;
    if (!r->in_body) {
        vsr_buf_append_cstr(&r->trace, "B:");
        r->in_body = 1;
    }
    vsr_buf_append(&r->trace, p, n);
    r->bodies++;
    return r->pause_all ? VSR_PAUSED : VSR_OK;
}

static int on_complete(void *ud)
{
    rec_t *r = ud;
    end_body(r);
    vsr_buf_append_cstr(&r->trace, "C\n");
    r->completes++;
    return r->pause_all || r->pause_complete ? VSR_PAUSED : VSR_OK;
}

static const vsr_http_callbacks_t CBS = {on_head, on_body, on_complete};

static int on_head_rec(void *ud, vsr_http_head_t *h)
{
    int rc = on_head(ud, h);
    ((rec_t *)ud)->paused |= rc == VSR_PAUSED;
    return rc;
}
static int on_body_rec(void *ud, const char *p, size_t n)
{
    int rc = on_body(ud, p, n);
    ((rec_t *)ud)->paused |= rc == VSR_PAUSED;
    return rc;
}
static int on_complete_rec(void *ud)
{
    int rc = on_complete(ud);
    ((rec_t *)ud)->paused |= rc == VSR_PAUSED;
    return rc;
}
static const vsr_http_callbacks_t CBS_REC = {on_head_rec, on_body_rec, on_complete_rec};

/* ---- driver ------------------------------------------------------------ */

typedef struct {
    vsr_http_kind_t kind;
    const vsr_http_limits_t *limits;
    int head_request;      /* responses: set_head_request(1) first */
    int finish;            /* call finish() after the last byte */
    int allow_unconsumed;  /* 101: execute() may stop without a pause */
} opts_t;

static const opts_t REQ = {VSR_HTTP_REQUEST, NULL, 0, 0, 0};
static const opts_t RESP = {VSR_HTTP_RESPONSE, NULL, 0, 1, 0};

/* Feeds one piece, resuming after every pause.  < 0 when the parser failed. */
static ssize_t feed(vsr_http_parser_t *p, rec_t *r, const opts_t *o, const char *d, size_t n, int *unconsumed)
{
    size_t off = 0;
    for (;;) {
        r->paused = 0;
        ssize_t k = vsr_http_parser_execute(p, d + off, n - off);
        if (k < 0)
            return k;
        assert_true((size_t)k <= n - off);
        off += (size_t)k;
        if (r->paused)
            continue; /* resume, even with nothing left: events may still be due */
        if (off < n) {
            assert_true(o->allow_unconsumed);
            *unconsumed = 1;
        }
        return 0;
    }
}

/* Runs msg as: a first piece of `first` bytes, then pieces of `step` bytes.
 * Returns the trace (caller frees). */
static char *trace_of(const opts_t *o, const char *msg, size_t len, size_t first, size_t step, int pause_all,
                      int *status_out)
{
    rec_t r;
    memset(&r, 0, sizeof(r));
    vsr_buf_init(&r.trace, 0);
    r.pause_all = pause_all;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, o->kind, o->limits, &CBS_REC, &r);
    r.parser = &p;
    if (o->head_request)
        vsr_http_parser_set_head_request(&p, 1);
    int unconsumed = 0, dead = 0;
    size_t off = 0, piece = first;
    for (;;) {
        size_t n = VSR_MIN(piece, len - off);
        if (feed(&p, &r, o, msg + off, n, &unconsumed) < 0) {
            dead = 1;
            break;
        }
        off += n;
        if (off == len)
            break;
        piece = step;
    }
    end_body(&r);
    if (unconsumed)
        vsr_buf_append_cstr(&r.trace, "X\n");
    if (dead) {
        assert_non_null(p.error_msg);
        vsr_buf_printf(&r.trace, "E%d %s\n", p.error_status, p.error_msg);
        assert_false(vsr_http_parser_idle(&p));
        /* dead stays dead */
        assert_int_equal(vsr_http_parser_execute(&p, "GET", 3), VSR_ERR_INVALID);
    } else if (o->finish) {
        int rc = vsr_http_parser_finish(&p);
        end_body(&r);
        if (rc != VSR_OK)
            vsr_buf_printf(&r.trace, "F%d E%d %s\n", rc, p.error_status, p.error_msg);
        else
            vsr_buf_append_cstr(&r.trace, "F0\n");
    }
    assert_false(r.zero_body);
    assert_false(r.slices_outside);
    if (status_out)
        *status_out = dead ? p.error_status : 0;
    vsr_http_parser_free(&p);
    char *out = vsr_strndup(r.trace.data ? r.trace.data : "", r.trace.len);
    vsr_buf_free(&r.trace);
    return out;
}

/* Parses msg every way; all traces must match (and `expect` when given).
 * Returns the trace (caller frees). */
static char *check_n(const opts_t *o, const char *msg, size_t len, const char *expect)
{
    char *whole = trace_of(o, msg, len, len, len, 0, NULL);
    if (expect)
        assert_string_equal(whole, expect);
    for (int pause = 0; pause <= 1; pause++) {
        for (size_t k = 0; k <= len; k++) {
            char *t = trace_of(o, msg, len, k, len, pause, NULL);
            if (strcmp(t, whole) != 0)
                fail_msg("split at %zu (pause %d) differs:\n%s\n--- whole:\n%s", k, pause, t, whole);
            vsr_free(t);
        }
        char *t = trace_of(o, msg, len, 0, 1, pause, NULL);
        if (strcmp(t, whole) != 0)
            fail_msg("byte-by-byte (pause %d) differs:\n%s\n--- whole:\n%s", pause, t, whole);
        vsr_free(t);
        t = trace_of(o, msg, len, 3, 7, pause, NULL);
        assert_string_equal(t, whole);
        vsr_free(t);
    }
    return whole;
}

static char *check(const opts_t *o, const char *msg, const char *expect)
{
    return check_n(o, msg, strlen(msg), expect);
}

static void check_eq(const opts_t *o, const char *msg, const char *expect)
{
    vsr_free(check(o, msg, expect));
}

/* msg must be rejected with `status`; returns nothing, frees everything. */
static void check_reject_n(const opts_t *o, const char *msg, size_t len, int status)
{
    char *t = check_n(o, msg, len, NULL);
    int st = 0;
    char *t2 = trace_of(o, msg, len, len, len, 0, &st);
    if (st != status)
        fail_msg("expected %d, got %d for:\n%.*s\ntrace:\n%s", status, st, (int)len, msg, t);
    char want[16];
    snprintf(want, sizeof(want), "E%d ", status);
    assert_non_null(strstr(t, want));
    vsr_free(t);
    vsr_free(t2);
}

static void check_reject(const opts_t *o, const char *msg, int status)
{
    check_reject_n(o, msg, strlen(msg), status);
}

/* ---- requests: happy paths --------------------------------------------- */

static void test_get(void **state)
{
    (void)state;
    check_eq(&REQ, "GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/1\r\n\r\n",
             "H GET /index.html?q=1 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n"
             "  Host: example.com\n"
             "  User-Agent: t/1\n"
             "C\n");
}

static void test_field_values(void **state)
{
    (void)state;
    /* OWS trimmed both sides, inner HTAB and SP kept, empty value, obs-text kept */
    check_eq(&REQ,
             "GET / HTTP/1.1\r\nHost:example.com\r\nX-A:  \t a \t b\t \r\nX-Empty:\r\nX-Sp:   \r\n"
             "X-Utf8: caf\xc3\xa9\r\n\r\n",
             "H GET / 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n"
             "  Host: example.com\n"
             "  X-A: a \t b\n"
             "  X-Empty: \n"
             "  X-Sp: \n"
             "  X-Utf8: caf\xc3\xa9\n"
             "C\n");
}

static void test_post_content_length(void **state)
{
    (void)state;
    check_eq(&REQ, "POST /v1/chat HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world",
             "H POST /v1/chat 1.1 cl=11 ch0 ka1 ex0 up0 hb1 uc0\n"
             "  Host: a\n"
             "  Content-Length: 11\n"
             "B:hello world\n"
             "C\n");
    /* CL 0: no body; leading zeros are digits */
    check_eq(&REQ, "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 0\r\n\r\n",
             "H POST / 1.1 cl=0 ch0 ka1 ex0 up0 hb0 uc0\n  Host: a\n  content-length: 0\nC\n");
    check_eq(&REQ, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:  003 \r\n\r\nabc",
             "H POST / 1.1 cl=3 ch0 ka1 ex0 up0 hb1 uc0\n  Host: a\n  Content-Length: 003\nB:abc\nC\n");
}

static void test_chunked(void **state)
{
    (void)state;
    check_eq(&REQ,
             "POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
             "5;name=val;q=\"x y\"\r\nhello\r\n"
             "6 ; ext\t;e2 \r\n world\r\n"
             "A\r\n0123456789\r\n"
             "00\r\n"
             "X-Trailer: t\r\nX-Other:  u v \r\n\r\n",
             "H POST /u 1.1 cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n"
             "  Host: a\n"
             "  Transfer-Encoding: chunked\n"
             "B:hello world0123456789\n"
             "C\n");
    /* case-insensitive coding, no trailers, uppercase hex, next message follows */
    check_eq(&REQ,
             "POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ChUnKeD \r\n\r\n"
             "1F\r\n0123456789012345678901234567890\r\n0\r\n\r\n"
             "GET /next HTTP/1.1\r\nHost: a\r\n\r\n",
             "H POST /u 1.1 cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n"
             "  Host: a\n"
             "  Transfer-Encoding: ChUnKeD\n"
             "B:0123456789012345678901234567890\n"
             "C\n"
             "H GET /next 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n"
             "  Host: a\n"
             "C\n");
    /* only a last chunk: a body-less chunked message */
    check_eq(&REQ, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
             "H POST / 1.1 cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n  Host: a\n  Transfer-Encoding: chunked\nC\n");
}

static void test_chunk_line_limit(void **state)
{
    (void)state;
    /* a chunk-size line of exactly 4096 bytes passes, 4097 fails */
    const char *pre = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int extra = 0; extra <= 1; extra++) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, pre);
        vsr_buf_append_cstr(&b, "3;");
        for (int i = 0; i < 4096 - 2 + extra; i++)
            vsr_buf_append_cstr(&b, "e");
        vsr_buf_append_cstr(&b, "\r\nabc\r\n0\r\n\r\n");
        if (extra) {
            check_reject_n(&REQ, b.data, b.len, 400);
        } else {
            char *t = trace_of(&REQ, b.data, b.len, b.len, b.len, 0, NULL);
            assert_non_null(strstr(t, "B:abc\nC\n"));
            vsr_free(t);
        }
        vsr_buf_free(&b);
    }
    /* same for a trailer line */
    for (int extra = 0; extra <= 1; extra++) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, pre);
        vsr_buf_append_cstr(&b, "3\r\nabc\r\n0\r\nX-T: ");
        for (int i = 0; i < 4096 - 5 + extra; i++)
            vsr_buf_append_cstr(&b, "v");
        vsr_buf_append_cstr(&b, "\r\n\r\n");
        int st = -1;
        char *t = trace_of(&REQ, b.data, b.len, b.len, b.len, 0, &st);
        assert_int_equal(st, extra ? 400 : 0);
        if (!extra)
            assert_non_null(strstr(t, "B:abc\nC\n"));
        vsr_free(t);
        t = trace_of(&REQ, b.data, b.len, 0, 1, 0, &st);
        assert_int_equal(st, extra ? 400 : 0);
        vsr_free(t);
        vsr_buf_free(&b);
    }
}

static void test_keep_alive_rules(void **state)
{
    (void)state;
    static const struct {
        const char *msg;
        int ka;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 1},
        {"GET / HTTP/1.0\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1},
        {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 1},
        {"GET / HTTP/1.0\r\nConnection: foo,keep-alive\r\n\r\n", 1},
        {"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\nKeep-Alive: timeout=5\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, CLOSE\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo\r\nConnection: close\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: ,, close ,\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", 1},
        {"GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n", 1},
        {"GET / HTTP/1.1\r\nHost: a\r\nX-Connection: close\r\n\r\n", 1},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        char *t = check(&REQ, cases[i].msg, NULL);
        if (strstr(t, cases[i].ka ? " ka1 " : " ka0 ") == NULL)
            fail_msg("case %zu: want ka%d:\n%s", i, cases[i].ka, t);
        assert_non_null(strstr(t, "C\n"));
        vsr_free(t);
    }
}

static void test_expect_and_upgrade(void **state)
{
    (void)state;
    static const struct {
        const char *msg;
        const char *flag;
    } cases[] = {
        {"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx", " ex1 "},
        {"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx", " ex1 "},
        {"PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx", " ex0 "},
        {"PUT / HTTP/1.1\r\nHost: a\r\nExpect: something\r\nContent-Length: 1\r\n\r\nx", " ex0 "},
        {"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx", " ex0 "},
        {"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", " up1 "},
        {"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, upgrade\r\nUpgrade: h2c\r\n\r\n", " up1 "},
        {"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", " up0 "},
        {"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", " up0 "},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        char *t = check(&REQ, cases[i].msg, NULL);
        if (strstr(t, cases[i].flag) == NULL)
            fail_msg("case %zu: want%s:\n%s", i, cases[i].flag, t);
        vsr_free(t);
    }
}

static void test_target_forms(void **state)
{
    (void)state;
    check_eq(&REQ, "GET http://example.com/x?y HTTP/1.1\r\nHost: example.com\r\n\r\n",
             "H GET http://example.com/x?y 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: example.com\nC\n");
    check_eq(&REQ, "GET HTTPS://e.com HTTP/1.1\r\nHost: e.com\r\n\r\n",
             "H GET HTTPS://e.com 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: e.com\nC\n");
    check_eq(&REQ, "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
             "H OPTIONS * 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: a\nC\n");
    /* obs-text in the target is tolerated (not a framing hazard) */
    check_eq(&REQ, "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
             "H GET /caf\xc3\xa9 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: a\nC\n");
    check_reject(&REQ, "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    check_reject(&REQ, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 501);
    check_reject(&REQ, "GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    check_reject(&REQ, "GET http:/x HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    check_reject(&REQ, "GET http:// HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    check_reject(&REQ, "GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400);
}

static void test_leading_empty_lines(void **state)
{
    (void)state;
    check_eq(&REQ, "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
             "H GET / 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: a\nC\n");
    /* the CRLF some clients append after a body */
    check_eq(&REQ,
             "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab\r\n"
             "GET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
             "H POST / 1.1 cl=2 ch0 ka1 ex0 up0 hb1 uc0\n  Host: a\n  Content-Length: 2\nB:ab\nC\n"
             "H GET /2 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: a\nC\n");
    check_reject(&REQ, "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    check_reject(&REQ, "\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    check_reject(&REQ, "\rGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
}

static void test_pipeline_pause(void **state)
{
    (void)state;
    const char *m1 = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
    const char *m2 = "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyz";
    const char *m3 = "GET /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nq\r\n0\r\n\r\n";
    char all[512];
    snprintf(all, sizeof(all), "%s%s%s", m1, m2, m3);
    size_t len = strlen(all);

    rec_t r;
    memset(&r, 0, sizeof(r));
    vsr_buf_init(&r.trace, 0);
    r.pause_complete = 1;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, &CBS, &r);
    assert_true(vsr_http_parser_idle(&p));

    /* on_complete pausing stops before the first byte of the next message */
    ssize_t n = vsr_http_parser_execute(&p, all, len);
    assert_int_equal(n, strlen(m1));
    assert_int_equal(r.completes, 1);
    assert_true(vsr_http_parser_idle(&p));
    /* the head stays valid until the next execute() */
    assert_true(vsr_slice_eq_cstr(p.head.target, "/a"));
    vsr_slice_t host;
    assert_true(vsr_http_head_get(&p.head, "HOST", &host));
    assert_true(vsr_slice_eq_cstr(host, "h"));

    size_t off = (size_t)n;
    n = vsr_http_parser_execute(&p, all + off, len - off);
    assert_int_equal(n, strlen(m2));
    assert_int_equal(r.completes, 2);
    assert_true(vsr_slice_eq_cstr(p.head.target, "/b"));
    off += (size_t)n;
    n = vsr_http_parser_execute(&p, all + off, len - off);
    assert_int_equal(n, strlen(m3));
    assert_int_equal(r.completes, 3);
    assert_true(vsr_slice_eq_cstr(p.head.target, "/c"));
    off += (size_t)n;
    assert_int_equal(off, len);
    assert_int_equal(vsr_http_parser_execute(&p, all + off, 0), 0);
    assert_int_equal(r.completes, 3);
    assert_string_equal(r.trace.data,
                        "H GET /a 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: h\nC\n"
                        "H POST /b 1.1 cl=3 ch0 ka1 ex0 up0 hb1 uc0\n  Host: h\n  Content-Length: 3\nB:xyz\nC\n"
                        "H GET /c 1.1 cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n  Host: h\n  Transfer-Encoding: chunked\n"
                        "B:q\nC\n");
    vsr_http_parser_free(&p);
    vsr_buf_free(&r.trace);

    /* without pausing, one call parses all three */
    memset(&r, 0, sizeof(r));
    vsr_buf_init(&r.trace, 0);
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, &CBS, &r);
    assert_int_equal(vsr_http_parser_execute(&p, all, len), len);
    assert_int_equal(r.completes, 3);
    vsr_http_parser_free(&p);
    vsr_buf_free(&r.trace);

    /* and the whole thing is split-invariant */
    vsr_free(check(&REQ, all, NULL));
}

static void test_pause_pending_complete(void **state)
{
    (void)state;
    /* a pause in on_head of a body-less message: on_complete is still due
     * and arrives with an execute() of zero bytes */
    rec_t r;
    memset(&r, 0, sizeof(r));
    vsr_buf_init(&r.trace, 0);
    r.pause_all = 1;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, &CBS, &r);
    const char *m = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_int_equal(vsr_http_parser_execute(&p, m, strlen(m)), strlen(m));
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.completes, 0);
    assert_false(vsr_http_parser_idle(&p));
    assert_int_equal(vsr_http_parser_execute(&p, NULL, 0), 0);
    assert_int_equal(r.completes, 1);
    assert_true(vsr_http_parser_idle(&p));
    vsr_http_parser_free(&p);
    vsr_buf_free(&r.trace);

    /* a pause on the last body bytes: finish() delivers the due on_complete */
    memset(&r, 0, sizeof(r));
    vsr_buf_init(&r.trace, 0);
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, &CBS, &r);
    m = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok";
    r.pause_all = 1;
    assert_int_equal(vsr_http_parser_execute(&p, m, strlen(m)), strlen(m) - 2);
    assert_int_equal(vsr_http_parser_execute(&p, m + strlen(m) - 2, 2), 2);
    assert_int_equal(r.bodies, 1);
    assert_int_equal(r.completes, 0);
    assert_int_equal(vsr_http_parser_finish(&p), VSR_OK);
    assert_int_equal(r.completes, 1);
    vsr_http_parser_free(&p);
    vsr_buf_free(&r.trace);
}

static void test_callback_abort(void **state)
{
    (void)state;
    rec_t r;
    memset(&r, 0, sizeof(r));
    vsr_buf_init(&r.trace, 0);
    r.abort_head = 1;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, &CBS, &r);
    const char *m = "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_int_equal(vsr_http_parser_execute(&p, m, strlen(m)), VSR_ERR);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.completes, 0);
    assert_false(vsr_http_parser_idle(&p));
    assert_int_equal(vsr_http_parser_execute(&p, m, strlen(m)), VSR_ERR);
    assert_int_equal(r.heads, 1);
    vsr_http_parser_free(&p);
    vsr_buf_free(&r.trace);
}

static void test_idle_and_truncation(void **state)
{
    (void)state;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, NULL, NULL); /* no callbacks at all */
    assert_true(vsr_http_parser_idle(&p));
    assert_int_equal(vsr_http_parser_finish(&p), VSR_OK);
    assert_int_equal(vsr_http_parser_execute(&p, "GE", 2), 2);
    assert_false(vsr_http_parser_idle(&p));
    assert_int_equal(vsr_http_parser_finish(&p), VSR_ERR_INVALID);
    assert_int_equal(p.error_status, 400);
    assert_string_equal(p.error_msg, "truncated message");
    vsr_http_parser_free(&p);

    /* after an error, finish() reports it again */
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, NULL, NULL);
    assert_int_equal(vsr_http_parser_execute(&p, "GET / HTTP/1.1\n", 15), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_parser_finish(&p), VSR_ERR_INVALID);
    assert_int_equal(p.error_status, 400);
    assert_string_equal(p.error_msg, "bare LF in head");
    vsr_http_parser_free(&p);

    /* a request body cut short */
    char *t = check(&(opts_t){VSR_HTTP_REQUEST, NULL, 0, 1, 0},
                    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc", NULL);
    assert_non_null(strstr(t, "B:abc\nF-3 E400 truncated message\n"));
    vsr_free(t);
}

static void test_head_buffer_reused(void **state)
{
    (void)state;
    vsr_buf_t all;
    vsr_buf_init(&all, 0);
    for (int i = 0; i < 50; i++)
        vsr_buf_printf(&all, "GET /%02d HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n", i);
    rec_t r;
    memset(&r, 0, sizeof(r));
    vsr_buf_init(&r.trace, 0);
    r.pause_complete = 1;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, &CBS, &r);
    size_t off = 0;
    const char *data0 = NULL;
    size_t alloc0 = 0;
    while (off < all.len) {
        ssize_t n = vsr_http_parser_execute(&p, all.data + off, all.len - off);
        assert_true(n > 0);
        off += (size_t)n;
        if (data0 == NULL) {
            data0 = p._headbuf.data;
            alloc0 = p._headbuf.alloc;
        }
        /* no allocation per message after the first */
        assert_ptr_equal(p._headbuf.data, data0);
        assert_int_equal(p._headbuf.alloc, alloc0);
    }
    assert_int_equal(r.completes, 50);
    assert_true(vsr_slice_eq_cstr(p.head.target, "/49"));
    vsr_http_parser_free(&p);
    vsr_buf_free(&r.trace);
    vsr_buf_free(&all);
}

static void test_large_head_small_pieces(void **state)
{
    (void)state;
    vsr_buf_t m;
    vsr_buf_init(&m, 0);
    vsr_buf_append_cstr(&m, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 0; i < 90; i++) {
        vsr_buf_printf(&m, "X-H%02d: ", i);
        for (int j = 0; j < 600; j++)
            vsr_buf_append(&m, "v", 1);
        vsr_buf_append_cstr(&m, "\r\n");
    }
    vsr_buf_append_cstr(&m, "\r\n");
    assert_true(m.len < 64 * 1024);
    int st = -1;
    char *whole = trace_of(&REQ, m.data, m.len, m.len, m.len, 0, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(whole, "  X-H89: vvv"));
    for (size_t step = 1; step <= 13; step += 4) {
        char *t = trace_of(&REQ, m.data, m.len, step, step, 0, &st);
        assert_string_equal(t, whole);
        vsr_free(t);
    }
    vsr_free(whole);
    vsr_buf_free(&m);
}

/* ---- requests: rejections ---------------------------------------------- */

static void test_reject_framing(void **state)
{
    (void)state;
    static const struct {
        const char *msg;
        int status;
    } cases[] = {
        /* CL with TE, either order, whatever the coding */
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n", 400},
        /* Content-Length: duplicates, lists, non-digits, overflow */
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\nhello", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5,5\r\n\r\nhello", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5a\r\n\r\nhello", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n", 400},
        /* transfer codings */
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 501},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++)
        check_reject(&REQ, cases[i].msg, cases[i].status);
}

static void test_reject_syntax(void **state)
{
    (void)state;
#define C(m, st) {m, sizeof(m) - 1, st}
    static const struct {
        const char *msg;
        size_t len;
        int status;
    } cases[] = {
        /* bare LF anywhere in the head */
        C("GET / HTTP/1.1\nHost: a\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\n\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\n\n", 400),
        C("GET / HTTP/1.1\r\nX: a\nb\r\nHost: a\r\n\r\n", 400),
        /* bare CR */
        C("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400),
        C("GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\r\nHost: a\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\n\rX: b\r\n\r\n", 400),
        /* obs-fold */
        C("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400),
        /* field names */
        C("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nX@Y: b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nX(Y): b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nX Y: b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nH\xc3\xa9: b\r\n\r\n", 400),
        /* control bytes in values (HTAB is fine, see test_field_values) */
        C("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nX: a\x01" "b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nX: a\x1b" "b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f" "b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\x0b\r\n\r\n", 400),
        /* method */
        C("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C(" GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET\r\nHost: a\r\n\r\n", 400),
        /* request-target */
        C("GET /a\x01" "b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET /a\0b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400),
        C("GET /\r\nHost: a\r\n\r\n", 400),
        C("GET / \r\nHost: a\r\n\r\n", 400),
        /* version */
        C("GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505),
        C("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        C("GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505),
        C("GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 400),
        C("GET / http/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET / HTTP/11\r\nHost: a\r\n\r\n", 400),
        C("GET / HTTP/2\r\nHost: a\r\n\r\n", 400),
        C("GET / HTTPS/1.1\r\nHost: a\r\n\r\n", 400),
        C("GET / HTTP/1.a\r\nHost: a\r\n\r\n", 400),
        /* Host */
        C("GET / HTTP/1.1\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        C("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400),
        C("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++)
        check_reject_n(&REQ, cases[i].msg, cases[i].len, cases[i].status);
    /* the reasons name the fault */
    char *t = check(&REQ, "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", NULL);
    assert_non_null(strstr(t, "E400 obs-fold in head\n"));
    vsr_free(t);
    t = check(&REQ, "GET / HTTP/1.1\r\nHost : a\r\n\r\n", NULL);
    assert_non_null(strstr(t, "E400 whitespace before colon\n"));
    vsr_free(t);
    t = check(&REQ, "GET / HTTP/1.1\r\nHost: a\r\nX: \rb\r\n\r\n", NULL);
    assert_non_null(strstr(t, "E400 bare CR in head\n"));
    vsr_free(t);
    t = check(&REQ, "GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n", NULL);
    assert_non_null(strstr(t, "E400 invalid character in field value\n"));
    vsr_free(t);
#undef C
}

static void test_reject_chunked(void **state)
{
    (void)state;
    static const char *bodies[] = {
        "zz\r\n",                                /* not hex */
        "0x5\r\nhello\r\n0\r\n\r\n",             /* no 0x */
        "\r\nhello\r\n0\r\n\r\n",                /* empty size */
        ";ext\r\nhello\r\n0\r\n\r\n",            /* extension without size */
        "-5\r\nhello\r\n0\r\n\r\n",
        " 5\r\nhello\r\n0\r\n\r\n",
        "10000000000000000\r\n",                 /* 2^64 */
        "8000000000000000\r\n",                  /* 2^63 */
        "00000000000000000000000010000000000000000\r\n",
        "5 \r\nhello\r\n0\r\n\r\n",              /* BWS must lead to ';' */
        "5\nhello\r\n0\r\n\r\n",                 /* bare LF after size */
        "5;a\nhello\r\n0\r\n\r\n",
        "5\rhello\r\n0\r\n\r\n",                 /* bare CR */
        "5;a\x01" "b\r\nhello\r\n0\r\n\r\n",     /* control in extension */
        "5;a\x7f\r\nhello\r\n0\r\n\r\n",
        "5\r\nhelloX\r\n0\r\n\r\n",              /* data not followed by CRLF */
        "5\r\nhello\rX0\r\n\r\n",
        "5\r\nhello\n0\r\n\r\n",
        "5\r\nhello\r\n\r\n",                    /* missing last chunk */
        "0\r\nX: a\r\n b\r\n\r\n",               /* trailer obs-fold */
        "0\r\n X: a\r\n\r\n",
        "0\r\nX Y: a\r\n\r\n",                   /* trailer name */
        "0\r\nX : a\r\n\r\n",
        "0\r\n: a\r\n\r\n",
        "0\r\nX@: a\r\n\r\n",
        "0\r\nNoColon\r\n\r\n",
        "0\r\nX: a\x01\r\n\r\n",                 /* trailer control byte */
        "0\r\nX: a\n\r\n",                       /* trailer bare LF */
        "0\r\nX: a\r\n\n",
        "0\r\nX: a\rb\r\n\r\n",                  /* trailer bare CR */
        "0\r\n\rX",
        "0\r\n\n",
    };
    /* the size line limit counts leading zeros too */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 4097; i++)
        vsr_buf_append_cstr(&b, "0");
    vsr_buf_append_cstr(&b, "\r\n\r\n");
    char *t = check_n(&REQ, b.data, b.len, NULL);
    assert_non_null(strstr(t, "E400 chunk size line too long"));
    vsr_free(t);
    /* ... and so does whitespace before an extension */
    b.len -= 4097 + 4;
    vsr_buf_append_cstr(&b, "1");
    for (int i = 0; i < 4096; i++)
        vsr_buf_append_cstr(&b, " ");
    vsr_buf_append_cstr(&b, ";a\r\nx\r\n0\r\n\r\n");
    t = check_n(&REQ, b.data, b.len, NULL);
    assert_non_null(strstr(t, "E400 chunk size line too long"));
    vsr_free(t);
    vsr_buf_free(&b);

    for (size_t i = 0; i < VSR_ARRAY_LEN(bodies); i++) {
        char msg[512];
        snprintf(msg, sizeof(msg), "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n%s",
                 bodies[i]);
        check_reject(&REQ, msg, 400);
    }
}

static void test_limits(void **state)
{
    (void)state;
    /* head size: exactly at the limit passes, one byte more → 431 */
    const char *m = "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: 0123456789\r\n\r\n";
    vsr_http_limits_t lim = {strlen(m), 0, 0};
    opts_t o = {VSR_HTTP_REQUEST, &lim, 0, 0, 0};
    vsr_free(check(&o, m, "H GET / 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: a\n  X-Pad: 0123456789\nC\n"));
    lim.max_head_size = strlen(m) - 1;
    check_reject(&o, m, 431);
    /* an endless head is cut at the limit */
    check_reject(&o, "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: 01234567890123456789012345678901234567890", 431);
    /* a bare LF past the limit is never looked at: still 431 however split */
    check_reject(&o, "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: 0123456789012345678901234567890\n\n", 431);

    /* field count: max_headers fields pass, one more → 431 */
    lim = (vsr_http_limits_t){0, 3, 0};
    check_eq(&o, "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n",
             "H GET / 1.1 cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Host: a\n  A: 1\n  B: 2\nC\n");
    check_reject(&o, "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", 431);
    /* too many trailer fields */
    check_reject(&o,
                 "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
                 "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n",
                 431);

    /* default field limit: 100 */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 0; i < 99; i++)
        vsr_buf_printf(&b, "X-%d: v\r\n", i);
    vsr_buf_append_cstr(&b, "\r\n");
    int st = -1;
    vsr_free(trace_of(&REQ, b.data, b.len, b.len, b.len, 0, &st));
    assert_int_equal(st, 0);
    b.len -= 2;
    vsr_buf_append_cstr(&b, "X-last: v\r\n\r\n");
    vsr_free(trace_of(&REQ, b.data, b.len, b.len, b.len, 0, &st));
    assert_int_equal(st, 431);
    vsr_buf_free(&b);

    /* max_headers is clamped to VSR_HTTP_MAX_HEADERS */
    lim = (vsr_http_limits_t){0, 500, 0};
    for (int extra = 0; extra <= 1; extra++) {
        vsr_buf_init(&b, 0);
        vsr_buf_append_cstr(&b, "GET / HTTP/1.1\r\nHost: a\r\n");
        for (int i = 1; i < VSR_HTTP_MAX_HEADERS + extra; i++)
            vsr_buf_printf(&b, "X-%d: v\r\n", i);
        vsr_buf_append_cstr(&b, "\r\n");
        vsr_free(trace_of(&o, b.data, b.len, b.len, b.len, 0, &st));
        assert_int_equal(st, extra ? 431 : 0);
        vsr_buf_free(&b);
    }

    /* body size: declared */
    lim = (vsr_http_limits_t){0, 0, 10};
    check_eq(&o, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789",
             "H POST / 1.1 cl=10 ch0 ka1 ex0 up0 hb1 uc0\n  Host: a\n  Content-Length: 10\nB:0123456789\nC\n");
    check_reject(&o, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n0123456789a", 413);
    /* body size: decoded chunked total */
    check_eq(&o,
             "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n",
             "H POST / 1.1 cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n  Host: a\n  Transfer-Encoding: chunked\n"
             "B:0123456789\nC\n");
    char *t = check(&o,
                    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n6\r\n567890\r\n"
                    "0\r\n\r\n",
                    NULL);
    assert_non_null(strstr(t, "B:01234\nE413 "));
    vsr_free(t);
}

/* ---- responses --------------------------------------------------------- */

static void test_response_basic(void **state)
{
    (void)state;
    check_eq(&RESP, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
             "H 1.1 200 OK cl=5 ch0 ka1 ex0 up0 hb1 uc0\n  Content-Type: text/plain\n  Content-Length: 5\n"
             "B:hello\nC\nF0\n");
    check_eq(&RESP,
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
             "7\r\ndata: {\r\n3;x=y\r\n}\n\n\r\n0\r\nX-T: 1\r\n\r\n",
             "H 1.1 200 OK cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n  Transfer-Encoding: chunked\n"
             "B:data: {}\n\n\nC\nF0\n");
    /* keep-alive for responses */
    check_eq(&RESP, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
             "H 1.0 200 OK cl=0 ch0 ka0 ex0 up0 hb0 uc0\n  Content-Length: 0\nC\nF0\n");
    check_eq(&RESP, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
             "H 1.0 200 OK cl=0 ch0 ka1 ex0 up0 hb0 uc0\n  Connection: keep-alive\n  Content-Length: 0\nC\nF0\n");
    check_eq(&RESP, "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
             "H 1.1 404 Not Found cl=0 ch0 ka0 ex0 up0 hb0 uc0\n  Connection: close\n  Content-Length: 0\nC\nF0\n");
    /* reason phrases: empty, missing, with obs-text and HTAB */
    check_eq(&RESP, "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
             "H 1.1 200  cl=0 ch0 ka1 ex0 up0 hb0 uc0\n  Content-Length: 0\nC\nF0\n");
    check_eq(&RESP, "HTTP/1.1 503\r\nContent-Length: 0\r\n\r\n",
             "H 1.1 503  cl=0 ch0 ka1 ex0 up0 hb0 uc0\n  Content-Length: 0\nC\nF0\n");
    check_eq(&RESP, "HTTP/1.1 299 Tr\xc3\xa8s\tbien\r\nContent-Length: 0\r\n\r\n",
             "H 1.1 299 Tr\xc3\xa8s\tbien cl=0 ch0 ka1 ex0 up0 hb0 uc0\n  Content-Length: 0\nC\nF0\n");
}

static void test_response_until_close(void **state)
{
    (void)state;
    check_eq(&RESP, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\ndata: 2\n\n",
             "H 1.1 200 OK cl=-1 ch0 ka0 ex0 up0 hb1 uc1\n  Content-Type: text/event-stream\n"
             "B:data: 1\n\ndata: 2\n\n\nC\nF0\n");
    /* keep-alive asked for, but a close-delimited body ends the connection */
    check_eq(&RESP, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nx",
             "H 1.0 200 OK cl=-1 ch0 ka0 ex0 up0 hb1 uc1\n  Connection: keep-alive\nB:x\nC\nF0\n");
    /* empty until-close body */
    check_eq(&RESP, "HTTP/1.1 200 OK\r\n\r\n", "H 1.1 200 OK cl=-1 ch0 ka0 ex0 up0 hb1 uc1\nC\nF0\n");
    /* max_body: exactly the limit is delivered, then 502 */
    vsr_http_limits_t lim = {0, 0, 4};
    opts_t o = {VSR_HTTP_RESPONSE, &lim, 0, 1, 0};
    check_eq(&o, "HTTP/1.1 200 OK\r\n\r\nabcd", "H 1.1 200 OK cl=-1 ch0 ka0 ex0 up0 hb1 uc1\nB:abcd\nC\nF0\n");
    check_eq(&o, "HTTP/1.1 200 OK\r\n\r\nabcdef",
             "H 1.1 200 OK cl=-1 ch0 ka0 ex0 up0 hb1 uc1\nB:abcd\nE502 body too large\n");
    check_reject(&o, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcde", 502);
}

static void test_response_no_body(void **state)
{
    (void)state;
    check_eq(&RESP,
             "HTTP/1.1 204 No Content\r\n\r\n"
             "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\nETag: \"x\"\r\n\r\n"
             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
             "H 1.1 204 No Content cl=-1 ch0 ka1 ex0 up0 hb0 uc0\nC\n"
             "H 1.1 304 Not Modified cl=100 ch0 ka1 ex0 up0 hb0 uc0\n  Content-Length: 100\n  ETag: \"x\"\nC\n"
             "H 1.1 200 OK cl=2 ch0 ka1 ex0 up0 hb1 uc0\n  Content-Length: 2\nB:ok\nC\nF0\n");
    /* HEAD: no body whatever the fields say; the flag ends with that response */
    opts_t head = {VSR_HTTP_RESPONSE, NULL, 1, 1, 0};
    check_eq(&head,
             "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
             "H 1.1 200 OK cl=100 ch0 ka1 ex0 up0 hb0 uc0\n  Content-Length: 100\nC\n"
             "H 1.1 200 OK cl=2 ch0 ka1 ex0 up0 hb1 uc0\n  Content-Length: 2\nB:ok\nC\nF0\n");
    check_eq(&head, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
             "H 1.1 200 OK cl=-1 ch1 ka1 ex0 up0 hb0 uc0\n  Transfer-Encoding: chunked\nC\nF0\n");
    check_eq(&head, "HTTP/1.1 200 OK\r\n\r\n", "H 1.1 200 OK cl=-1 ch0 ka1 ex0 up0 hb0 uc0\nC\nF0\n");
    /* an interim response keeps the HEAD flag for the final one */
    check_eq(&head, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
             "H 1.1 100 Continue cl=-1 ch0 ka1 ex0 up0 hb0 uc0\nC\n"
             "H 1.1 200 OK cl=5 ch0 ka1 ex0 up0 hb0 uc0\n  Content-Length: 5\nC\nF0\n");
}

static void test_response_interim(void **state)
{
    (void)state;
    check_eq(&RESP,
             "HTTP/1.1 100 Continue\r\n\r\n"
             "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
             "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
             "H 1.1 100 Continue cl=-1 ch0 ka1 ex0 up0 hb0 uc0\nC\n"
             "H 1.1 103 Early Hints cl=-1 ch0 ka1 ex0 up0 hb0 uc0\n  Link: </s.css>; rel=preload\nC\n"
             "H 1.1 200 OK cl=2 ch0 ka1 ex0 up0 hb1 uc0\n  Content-Length: 2\nB:ok\nC\nF0\n");
    /* 101: the bytes after it are not ours */
    opts_t up = {VSR_HTTP_RESPONSE, NULL, 0, 1, 1};
    check_eq(&up, "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
             "H 1.1 101 Switching Protocols cl=-1 ch0 ka1 ex0 up1 hb0 uc0\n  Connection: upgrade\n"
             "  Upgrade: websocket\nC\nX\nF0\n");
}

static void test_response_truncated(void **state)
{
    (void)state;
    check_eq(&RESP, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
             "H 1.1 200 OK cl=10 ch0 ka1 ex0 up0 hb1 uc0\n  Content-Length: 10\nB:hello\n"
             "F-3 E502 truncated message\n");
    check_eq(&RESP, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
             "H 1.1 200 OK cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n  Transfer-Encoding: chunked\nB:hel\n"
             "F-3 E502 truncated message\n");
    check_eq(&RESP, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
             "H 1.1 200 OK cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n  Transfer-Encoding: chunked\n"
             "F-3 E502 truncated message\n");
    check_eq(&RESP, "HTTP/1.1 200 OK\r\nContent-", "F-3 E502 truncated message\n");
    check_eq(&RESP, "", "F0\n");
}

static void test_response_reject(void **state)
{
    (void)state;
    static const char *cases[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX : a\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 600 Nope\r\n\r\n",
        "HTTP/1.1 099 Nope\r\n\r\n",
        "HTTP/1.1 abc OK\r\n\r\n",
        "HTTP/1.1 200OK\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.1\r\n\r\n",
        "http/1.1 200 OK\r\n\r\n",
        "ICY 200 OK\r\n\r\n",
        "HTTP/1.1 200 O\x01K\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n",
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++)
        check_reject(&RESP, cases[i], 502);
    vsr_http_limits_t lim = {32, 0, 0};
    opts_t o = {VSR_HTTP_RESPONSE, &lim, 0, 1, 0};
    check_reject(&o, "HTTP/1.1 200 OK\r\nX-Long: 01234567890123456789\r\n\r\n", 502);
}

/* Field values are checked sixteen bytes at a time by the parser and the
 * writer: a bad byte is found at every offset of a long value, on both
 * sides of each 16-byte step, and every good byte class passes there. */
static void test_value_bytes_every_offset(void **state)
{
    (void)state;
    static const unsigned char bad[] = {0x00, 0x01, 0x08, 0x0a, 0x0d, 0x1f, 0x7f};
    static const unsigned char good[] = {0x09, 0x20, 0x21, 0x7e, 0x80, 0xa0, 0xff};
    char v[48];
    for (size_t len = 1; len <= sizeof(v); len++)
        for (size_t at = 0; at < len; at++) {
            for (int g = 0; g < 2; g++) {
                const unsigned char *set = g ? good : bad;
                size_t n = g ? sizeof(good) : sizeof(bad);
                for (size_t k = 0; k < n; k++) {
                    memset(v, 'a', len);
                    v[at] = (char)set[k];
                    if (g && (at == 0 || at == len - 1) && (set[k] == 0x09 || set[k] == 0x20))
                        continue; /* edge whitespace is trimmed by the parser: checked below */
                    vsr_buf_t b;
                    vsr_buf_init(&b, 0);
                    int rc = vsr_http_write_header(&b, VSR_SLICE_LIT("X"), vsr_slice(v, len));
                    assert_int_equal(rc, g ? VSR_OK : VSR_ERR_INVALID);
                    assert_int_equal(b.len, g ? len + 5 : 0);
                    vsr_buf_free(&b);

                    char msg[128];
                    int m = snprintf(msg, sizeof(msg), "GET / HTTP/1.1\r\nHost: a\r\nX: ");
                    memcpy(msg + m, v, len);
                    memcpy(msg + m + len, "\r\n\r\n", 4);
                    size_t total = (size_t)m + len + 4;
                    vsr_http_parser_t p;
                    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, NULL, NULL);
                    ptrdiff_t r = vsr_http_parser_execute(&p, msg, total);
                    if (g) {
                        assert_int_equal(r, (ptrdiff_t)total);
                        assert_int_equal(p.head.headers[1].value.len, len);
                        assert_memory_equal(p.head.headers[1].value.p, v, len);
                    } else {
                        assert_true(r < 0);
                        assert_int_equal(p.error_status, 400);
                    }
                    vsr_http_parser_free(&p);
                }
            }
        }
}

/* ---- head helpers ------------------------------------------------------- */

static void test_hop_by_hop_and_get(void **state)
{
    (void)state;
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, NULL, NULL);
    const char *m = "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Foo, keep-alive\r\nX-Foo: 1\r\n"
                    "connection:x-bar\r\nX-Bar: 2\r\nX-Baz: 3\r\nx-foo: second\r\n\r\n";
    assert_int_equal(vsr_http_parser_execute(&p, m, strlen(m)), strlen(m));
    const vsr_http_head_t *h = &p.head;
    static const char *hop[] = {"Connection", "KEEP-ALIVE", "Proxy-Connection", "te", "TE", "Trailer",
                                "transfer-encoding", "Upgrade", "X-Foo", "x-foo", "X-BAR"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(hop); i++)
        assert_true(vsr_http_is_hop_by_hop(h, vsr_slice_cstr(hop[i])));
    static const char *e2e[] = {"Host", "X-Baz", "Content-Length", "Trailers", "X-Fo", "X-Foo2", "", "tE2"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(e2e); i++)
        assert_false(vsr_http_is_hop_by_hop(h, vsr_slice_cstr(e2e[i])));
    vsr_http_parser_free(&p);

    /* a Connection field naming only fixed ones leaves every other field
     * end to end; close is an option that names a field too */
    static const struct { const char *conn; int close_hop; } plain[] = {
        {"keep-alive", 0}, {"Upgrade, keep-alive", 0}, {"close", 1}, {"keep-alive, ,", 0}};
    for (size_t i = 0; i < VSR_ARRAY_LEN(plain); i++) {
        char msg[160];
        snprintf(msg, sizeof(msg), "GET / HTTP/1.1\r\nHost: a\r\nConnection: %s\r\nClose: 1\r\n\r\n",
                 plain[i].conn);
        vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, NULL, NULL);
        assert_int_equal(vsr_http_parser_execute(&p, msg, strlen(msg)), strlen(msg));
        assert_int_equal(p.head.conn_plain, !plain[i].close_hop);
        assert_int_equal(vsr_http_is_hop_by_hop(&p.head, VSR_SLICE_LIT("close")), plain[i].close_hop);
        assert_false(vsr_http_is_hop_by_hop(&p.head, VSR_SLICE_LIT("X-Foo")));
        assert_true(vsr_http_is_hop_by_hop(&p.head, VSR_SLICE_LIT("Keep-Alive")));
        vsr_http_parser_free(&p);
    }
    vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, NULL, NULL);
    assert_int_equal(vsr_http_parser_execute(&p, m, strlen(m)), strlen(m));
    h = &p.head;
    assert_false(h->conn_plain);

    /* without a head only the fixed list counts */
    assert_true(vsr_http_is_hop_by_hop(NULL, VSR_SLICE_LIT("Upgrade")));
    assert_false(vsr_http_is_hop_by_hop(NULL, VSR_SLICE_LIT("X-Foo")));

    vsr_slice_t v;
    assert_true(vsr_http_head_get(h, "x-FOO", &v));
    assert_true(vsr_slice_eq_cstr(v, "1")); /* the first one */
    assert_true(vsr_http_head_get(h, "host", &v));
    assert_true(vsr_slice_eq_cstr(v, "a"));
    assert_true(vsr_http_head_get(h, "X-Baz", NULL));
    assert_false(vsr_http_head_get(h, "X-Qux", &v));
    assert_false(vsr_http_head_get(h, "X-Ba", &v));
    vsr_http_parser_free(&p);
}

/* ---- writers ----------------------------------------------------------- */

static void test_reason(void **state)
{
    (void)state;
    static const struct {
        int code;
        const char *reason;
    } cases[] = {
        {100, "Continue"}, {101, "Switching Protocols"}, {200, "OK"}, {201, "Created"}, {202, "Accepted"},
        {203, "Non-Authoritative Information"}, {204, "No Content"}, {205, "Reset Content"},
        {206, "Partial Content"}, {300, "Multiple Choices"}, {301, "Moved Permanently"}, {302, "Found"},
        {303, "See Other"}, {304, "Not Modified"}, {305, "Use Proxy"}, {307, "Temporary Redirect"},
        {308, "Permanent Redirect"}, {400, "Bad Request"}, {401, "Unauthorized"}, {402, "Payment Required"},
        {403, "Forbidden"}, {404, "Not Found"}, {405, "Method Not Allowed"}, {406, "Not Acceptable"},
        {407, "Proxy Authentication Required"}, {408, "Request Timeout"}, {409, "Conflict"}, {410, "Gone"},
        {411, "Length Required"}, {412, "Precondition Failed"}, {413, "Content Too Large"},
        {414, "URI Too Long"}, {415, "Unsupported Media Type"}, {416, "Range Not Satisfiable"},
        {417, "Expectation Failed"}, {421, "Misdirected Request"}, {422, "Unprocessable Content"},
        {426, "Upgrade Required"}, {428, "Precondition Required"}, {429, "Too Many Requests"},
        {431, "Request Header Fields Too Large"}, {451, "Unavailable For Legal Reasons"},
        {500, "Internal Server Error"}, {501, "Not Implemented"}, {502, "Bad Gateway"},
        {503, "Service Unavailable"}, {504, "Gateway Timeout"}, {505, "HTTP Version Not Supported"},
        {0, "Unknown"}, {99, "Unknown"}, {299, "Unknown"}, {419, "Unknown"}, {599, "Unknown"}, {600, "Unknown"},
        {-1, "Unknown"},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++)
        assert_string_equal(vsr_http_reason(cases[i].code), cases[i].reason);
}

/* fields_checked's promise: every field the parser accepts, the checking
 * writer accepts too, and the unchecked one writes the same bytes.  Tried
 * with each byte value in a field's name and in its value. */
static int checked_head(void *ud, vsr_http_head_t *h)
{
    int *ok = ud;
    *ok = h->fields_checked ? 1 : 2;
    for (size_t i = 0; i < h->num_headers; i++) {
        vsr_buf_t a, b;
        vsr_buf_init(&a, 0);
        vsr_buf_init(&b, 0);
        if (vsr_http_write_header(&a, h->headers[i].name, h->headers[i].value) != VSR_OK ||
            vsr_http_write_checked_header(&b, h->headers[i].name, h->headers[i].value) != VSR_OK || a.len != b.len ||
            memcmp(a.data, b.data, a.len) != 0)
            *ok = 3;
        vsr_buf_free(&a);
        vsr_buf_free(&b);
    }
    return VSR_OK;
}
static int checked_body(void *ud, const char *p, size_t n)
{
    (void)ud, (void)p, (void)n;
    return VSR_OK;
}
static int checked_complete(void *ud)
{
    (void)ud;
    return VSR_OK;
}

static void test_checked_fields_are_writable(void **state)
{
    (void)state;
    static const vsr_http_callbacks_t cbs = {checked_head, checked_body, checked_complete};
    unsigned accepted = 0;
    for (unsigned v = 0; v < 256; v++)
        for (int in_name = 0; in_name < 2; in_name++) {
            char msg[128];
            int n = in_name ? snprintf(msg, sizeof(msg), "GET / HTTP/1.1\r\nHost: a\r\nX-%cT: ab\r\n\r\n", 'Q')
                            : snprintf(msg, sizeof(msg), "GET / HTTP/1.1\r\nHost: a\r\nX-T: a%cb\r\n\r\n", 'Q');
            char *at = strchr(msg + 24, 'Q');
            *at = (char)v;
            vsr_http_parser_t p;
            int ok = 0;
            vsr_http_parser_init(&p, VSR_HTTP_REQUEST, NULL, &cbs, &ok);
            ssize_t r = vsr_http_parser_execute(&p, msg, (size_t)n);
            if (r == n && ok) {
                accepted++;
                if (ok != 1)
                    fail_msg("byte 0x%02x in the %s: fields_checked %s", v, in_name ? "name" : "value",
                             ok == 2 ? "not set" : "but the writer refuses it or writes it otherwise");
            }
            vsr_http_parser_free(&p);
        }
    assert_true(accepted > 200); /* the value takes most bytes; the name, the token ones */
}

static void test_writers(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr_http_write_status_line(&b, 200, VSR_SLICE_NULL), VSR_OK);
    assert_int_equal(vsr_http_write_status_line(&b, 404, VSR_SLICE_LIT("Nope")), VSR_OK);
    assert_int_equal(vsr_http_write_status_line(&b, 799, VSR_SLICE_NULL), VSR_OK);
    assert_int_equal(vsr_http_write_status_line(&b, 204, vsr_slice("", 0)), VSR_OK);
    assert_int_equal(vsr_http_write_request_line(&b, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat?x=1")),
                     VSR_OK);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("Content-Type"), VSR_SLICE_LIT("application/json")),
                     VSR_OK);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("X-Empty"), VSR_SLICE_NULL), VSR_OK);
    assert_int_equal(vsr_http_write_header_u64(&b, "Content-Length", 0), VSR_OK);
    assert_int_equal(vsr_http_write_header_u64(&b, "X-Max", UINT64_MAX), VSR_OK);
    assert_int_equal(vsr_http_write_header_u64(&b, "X-N", 1234567890), VSR_OK);
    assert_int_equal(vsr_http_write_end_head(&b), VSR_OK);
    assert_int_equal(b.len, strlen(b.data));
    assert_string_equal(b.data, "HTTP/1.1 200 OK\r\n"
                                "HTTP/1.1 404 Nope\r\n"
                                "HTTP/1.1 799 Unknown\r\n"
                                "HTTP/1.1 204 \r\n"
                                "POST /v1/chat?x=1 HTTP/1.1\r\n"
                                "Content-Type: application/json\r\n"
                                "X-Empty: \r\n"
                                "Content-Length: 0\r\n"
                                "X-Max: 18446744073709551615\r\n"
                                "X-N: 1234567890\r\n"
                                "\r\n");

    /* refused: framing-breaking bytes; the buffer is untouched */
    size_t len = b.len;
    assert_int_equal(vsr_http_write_status_line(&b, 99, VSR_SLICE_NULL), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_status_line(&b, 1000, VSR_SLICE_NULL), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_status_line(&b, 200, VSR_SLICE_LIT("OK\r\nX: y")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_request_line(&b, VSR_SLICE_LIT("GE T"), VSR_SLICE_LIT("/")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_request_line(&b, VSR_SLICE_LIT(""), VSR_SLICE_LIT("/")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_request_line(&b, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/a b")),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_request_line(&b, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("/a\r\n")),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_request_line(&b, VSR_SLICE_LIT("GET"), VSR_SLICE_LIT("")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("X"), VSR_SLICE_LIT("a\r\nEvil: 1")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("X"), VSR_SLICE_LIT("a\nb")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("X"), vsr_slice("a\0b", 3)), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("X:Y"), VSR_SLICE_LIT("v")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("X Y"), VSR_SLICE_LIT("v")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT(""), VSR_SLICE_LIT("v")), VSR_ERR_INVALID);
    assert_int_equal(vsr_http_write_header_u64(&b, "Bad Name", 1), VSR_ERR_INVALID);
    assert_int_equal(b.len, len);
    vsr_buf_free(&b);

    /* the buffer's cap */
    vsr_buf_init(&b, 20);
    assert_int_equal(vsr_http_write_status_line(&b, 200, VSR_SLICE_NULL), VSR_OK); /* 17 bytes */
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("A"), VSR_SLICE_LIT("b")), VSR_ERR_TOO_BIG);
    assert_int_equal(vsr_http_write_header_u64(&b, "A", 12), VSR_ERR_TOO_BIG);
    assert_int_equal(vsr_http_write_end_head(&b), VSR_OK);
    assert_int_equal(b.len, 19);
    assert_int_equal(vsr_http_write_end_head(&b), VSR_ERR_TOO_BIG);
    assert_int_equal(b.len, 19);
    vsr_buf_free(&b);
}

static void test_chunk_head(void **state)
{
    (void)state;
    char out[24];
    static const struct {
        size_t n;
        const char *s;
    } cases[] = {
        {0, "0\r\n"}, {1, "1\r\n"}, {10, "a\r\n"}, {255, "ff\r\n"}, {4096, "1000\r\n"}, {0xabcdef, "abcdef\r\n"},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        size_t len = vsr_http_chunk_head(out, cases[i].n);
        assert_int_equal(len, strlen(cases[i].s));
        assert_memory_equal(out, cases[i].s, len);
    }
    if (sizeof(size_t) == 8) {
        size_t len = vsr_http_chunk_head(out, SIZE_MAX);
        assert_int_equal(len, 18);
        assert_memory_equal(out, "ffffffffffffffff\r\n", 18);
    }
}

/* What the writers produce, the parser takes back unchanged. */
static void test_round_trip(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr_http_write_status_line(&b, 429, VSR_SLICE_NULL), VSR_OK);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("Retry-After"), VSR_SLICE_LIT("3")), VSR_OK);
    assert_int_equal(vsr_http_write_header(&b, VSR_SLICE_LIT("Transfer-Encoding"), VSR_SLICE_LIT("chunked")),
                     VSR_OK);
    assert_int_equal(vsr_http_write_end_head(&b), VSR_OK);
    const char *parts[] = {"{\"error\":", "", "\"rate limited\"}"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(parts); i++) {
        size_t n = strlen(parts[i]);
        if (n == 0)
            continue; /* a zero-size chunk would end the body */
        char ch[24];
        vsr_buf_append(&b, ch, vsr_http_chunk_head(ch, n));
        vsr_buf_append(&b, parts[i], n);
        vsr_buf_append_cstr(&b, VSR_HTTP_CRLF);
    }
    vsr_buf_append_cstr(&b, VSR_HTTP_LAST_CHUNK);
    vsr_free(check_n(&RESP, b.data, b.len,
                     "H 1.1 429 Too Many Requests cl=-1 ch1 ka1 ex0 up0 hb1 uc0\n  Retry-After: 3\n"
                     "  Transfer-Encoding: chunked\nB:{\"error\":\"rate limited\"}\nC\nF0\n"));
    vsr_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_field_values),
        cmocka_unit_test(test_post_content_length),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_chunk_line_limit),
        cmocka_unit_test(test_keep_alive_rules),
        cmocka_unit_test(test_expect_and_upgrade),
        cmocka_unit_test(test_target_forms),
        cmocka_unit_test(test_leading_empty_lines),
        cmocka_unit_test(test_pipeline_pause),
        cmocka_unit_test(test_pause_pending_complete),
        cmocka_unit_test(test_callback_abort),
        cmocka_unit_test(test_idle_and_truncation),
        cmocka_unit_test(test_head_buffer_reused),
        cmocka_unit_test(test_large_head_small_pieces),
        cmocka_unit_test(test_reject_framing),
        cmocka_unit_test(test_reject_syntax),
        cmocka_unit_test(test_reject_chunked),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_response_basic),
        cmocka_unit_test(test_response_until_close),
        cmocka_unit_test(test_response_no_body),
        cmocka_unit_test(test_response_interim),
        cmocka_unit_test(test_response_truncated),
        cmocka_unit_test(test_response_reject),
        cmocka_unit_test(test_value_bytes_every_offset),
        cmocka_unit_test(test_hop_by_hop_and_get),
        cmocka_unit_test(test_reason),
        cmocka_unit_test(test_writers),
        cmocka_unit_test(test_checked_fields_are_writable),
        cmocka_unit_test(test_chunk_head),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
