/* test_sse.c — the server-sent-events parser: fields, line ends, splits at
 * every byte, BOM, ids, retry, limits, and events cut off by the stream's end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "proto/sse.h"

typedef struct {
    vsr_buf_t out; /* "type|id|data\n" per event */
    int stop_after;
} rec_t;

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id)
{
    rec_t *r = ud;
    vsr_buf_append_slice(&r->out, type);
    vsr_buf_append(&r->out, "|", 1);
    vsr_buf_append_slice(&r->out, id);
    vsr_buf_append(&r->out, "|", 1);
    vsr_buf_append_slice(&r->out, data);
    vsr_buf_append(&r->out, "\n", 1);
    if (r->stop_after && --r->stop_after == 0)
        return VSR_ERR;
    return VSR_OK;
}

static const vsr_sse_callbacks_t cbs = {on_event};

/* Parses in pieces of `step` bytes (0 = whole); returns the events as text. */
static char *run(const char *in, size_t len, size_t step, size_t max, int *rc_out, uint64_t *retry)
{
    rec_t r = {0};
    vsr_buf_init(&r.out, 0);
    vsr_sse_parser_t p;
    vsr_sse_init(&p, max, &cbs, &r);
    int rc = VSR_OK;
    if (step == 0) {
        rc = vsr_sse_feed(&p, in, len);
    } else {
        for (size_t i = 0; i < len && rc == VSR_OK; i += step)
            rc = vsr_sse_feed(&p, in + i, len - i < step ? len - i : step);
    }
    if (rc_out)
        *rc_out = rc;
    if (retry)
        *retry = p.has_retry ? p.retry_ms : (uint64_t)-1;
    vsr_sse_free(&p);
    vsr_buf_append(&r.out, "", 1);
    return r.out.data;
}

/* The same events whole, byte by byte and in threes. */
static void expect(const char *in, const char *events)
{
    size_t steps[] = {0, 1, 2, 3, 7};
    for (size_t i = 0; i < VSR_ARRAY_LEN(steps); i++) {
        int rc;
        char *got = run(in, strlen(in), steps[i], 0, &rc, NULL);
        assert_int_equal(rc, VSR_OK);
        if (strcmp(got, events) != 0)
            fail_msg("step %zu: got\n%s\nwanted\n%s", steps[i], got, events);
        free(got);
    }
}

static void test_sse_basic(void **state)
{
    expect("data: hello\n\n", "message||hello\n");
    expect("data:hello\n\n", "message||hello\n");
    expect("data:  two spaces\n\n", "message|| two spaces\n");   /* only one space is removed */
    expect("data: a\ndata: b\n\n", "message||a\nb\n");
    expect("event: add\ndata: 1\n\ndata: 2\n\n", "add||1\nmessage||2\n");   /* the type resets */
    expect(": comment\ndata: x\n\n", "message||x\n");
    expect("data\n\n", "message||\n");                          /* a field with no colon: empty value */
    expect("data:\ndata:\n\n", "message||\n\n");
    expect("event: e\n\n", "");                                   /* no data: nothing dispatched */
    expect("foo: bar\ndata: y\n\n", "message||y\n");              /* unknown fields ignored */
    expect("data: {\"a\":1}\n\ndata: [DONE]\n\n", "message||{\"a\":1}\nmessage||[DONE]\n");
}

static void test_sse_line_ends(void **state)
{
    expect("data: a\r\n\r\ndata: b\r\rdata: c\n\n", "message||a\nmessage||b\nmessage||c\n");
    expect("data: a\r\ndata: b\r\n\r\n", "message||a\nb\n");
    expect("\r\n\r\n\n\rdata: z\r\n\r\n", "message||z\n");
}

static void test_sse_bom_and_ids(void **state)
{
    expect("\xef\xbb\xbf" "data: bom\n\n", "message||bom\n");
    expect("\xef\xbb" "data: x\n\n", "");                         /* not a BOM: the field name is odd */
    expect("id: 1\ndata: a\n\ndata: b\n\n", "message|1|a\nmessage|1|b\n");   /* the id persists */
    expect("id: 1\ndata: a\n\nid\ndata: b\n\n", "message|1|a\nmessage||b\n");  /* an empty id resets it */
    int rc;
    char in[] = "id: 1\ndata: a\n\nid: x\0y\ndata: b\n\n";
    char *got = run(in, sizeof(in) - 1, 0, 0, &rc, NULL);
    assert_string_equal(got, "message|1|a\nmessage|1|b\n");       /* an id with NUL is ignored */
    free(got);
}

static void test_sse_retry(void **state)
{
    uint64_t retry;
    char *got = run("retry: 1500\n\n", 13, 0, 0, NULL, &retry);
    assert_int_equal(retry, 1500);
    free(got);
    got = run("retry: 15x\n\nretry: -1\n\nretry:\n\n", 29, 0, 0, NULL, &retry);
    assert_int_equal(retry, (uint64_t)-1);
    free(got);
}

static void test_sse_unterminated_event_dropped(void **state)
{
    expect("data: a\n\ndata: never", "message||a\n");
    expect("data: a\n\ndata: never\n", "message||a\n");
}

static void test_sse_limits(void **state)
{
    int rc;
    char *got = run("data: 0123456789\n\n", 18, 0, 8, &rc, NULL);
    assert_int_equal(rc, VSR_ERR_TOO_BIG);
    free(got);
    got = run("data: 0123456789\n\n", 18, 1, 8, &rc, NULL);   /* the same line split */
    assert_int_equal(rc, VSR_ERR_TOO_BIG);
    free(got);
    /* many lines under the limit, one event's data over it */
    got = run("data:abc\ndata:abc\ndata:abc\n\n", 27, 0, 8, &rc, NULL);
    assert_int_equal(rc, VSR_ERR_TOO_BIG);
    free(got);
    got = run("data:abc\n\ndata:abc\n\n", 20, 0, 8, &rc, NULL);
    assert_int_equal(rc, VSR_OK);
    assert_string_equal(got, "message||abc\nmessage||abc\n");
    free(got);

    /* dead after an error; a callback's error stops it too */
    rec_t r = {.stop_after = 1};
    vsr_buf_init(&r.out, 0);
    vsr_sse_parser_t p;
    vsr_sse_init(&p, 0, &cbs, &r);
    assert_int_equal(vsr_sse_feed(&p, "data: a\n\ndata: b\n\n", 18), VSR_ERR);
    assert_int_equal(p.events, 1);
    assert_int_equal(vsr_sse_feed(&p, "data: c\n\n", 9), VSR_ERR_INVALID);
    vsr_sse_free(&p);
    vsr_buf_free(&r.out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_basic),
        cmocka_unit_test(test_sse_line_ends),
        cmocka_unit_test(test_sse_bom_and_ids),
        cmocka_unit_test(test_sse_retry),
        cmocka_unit_test(test_sse_unterminated_event_dropped),
        cmocka_unit_test(test_sse_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
