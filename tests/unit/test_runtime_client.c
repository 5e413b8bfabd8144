/* test_runtime_client.c — the router's runtime client against a fake
 * runtime on a Unix socket in the same loop: one POST /v1/bundle per call,
 * results by id, pooled keep-alive connections, the deadline, cancel, a
 * runtime that is down, refuses (429), or closed an idle connection, and a
 * socket served by another process than the one expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/client.h"

/* ---- the fake runtime ---- */

enum { SRV_OK, SRV_SILENT, SRV_429, SRV_OK_THEN_CLOSE, SRV_DROP_REUSED };

typedef struct {
    uv_pipe_t server;
    int mode;
    int accepted;
    int requests;
    char last_body[2048];
} fake_srv_t;

typedef struct {
    uv_pipe_t pipe;
    fake_srv_t *srv;
    char buf[8192];
    size_t len;
    int served;
    uv_write_t w;
    char out[1024];
} fake_conn_t;

static void fc_closed(uv_handle_t *h)
{
    free(h->data);
}

static void fc_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    (void)s;
    fake_conn_t *fc = h->data;
    *b = uv_buf_init(fc->buf + fc->len, (unsigned)(sizeof(fc->buf) - fc->len - 1));
}

static void fc_written(uv_write_t *w, int status)
{
    (void)status;
    fake_conn_t *fc = w->data;
    if (fc->srv->mode == SRV_OK_THEN_CLOSE)
        uv_close((uv_handle_t *)&fc->pipe, fc_closed); /* as a runtime closing an idle connection */
}

static void fc_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    fake_conn_t *fc = s->data;
    if (n < 0) {
        if (!uv_is_closing((uv_handle_t *)s))
            uv_close((uv_handle_t *)s, fc_closed);
        return;
    }
    fc->len += (size_t)n;
    fc->buf[fc->len] = '\0';
    char *end = strstr(fc->buf, "\r\n\r\n");
    if (end == NULL)
        return;
    char *cl = strstr(fc->buf, "content-length: ");
    size_t want = cl ? (size_t)atoi(cl + 16) : 0;
    size_t have = fc->len - (size_t)(end + 4 - fc->buf);
    if (have < want)
        return;
    fake_srv_t *srv = fc->srv;
    srv->requests++;
    if (srv->mode == SRV_DROP_REUSED && fc->served++ > 0) {
        uv_close((uv_handle_t *)s, fc_closed); /* the runtime closed it as the request went out */
        return;
    }
    snprintf(srv->last_body, sizeof(srv->last_body), "%.*s", (int)want, end + 4);
    fc->len = 0;
    const char *body = "{\"results\":[{\"id\":\"a\",\"embed\":{\"dim\":2,\"embeddings\":[[0.6,0.8]]}},"
                       "{\"id\":\"b\",\"error\":{\"code\":\"not_supported\",\"message\":\"no\"}}]}";
    if (srv->mode == SRV_SILENT)
        return;
    if (srv->mode == SRV_429)
        snprintf(fc->out, sizeof(fc->out),
                 "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 2\r\nretry-after: 1\r\n\r\n{}");
    else
        snprintf(fc->out, sizeof(fc->out),
                 "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nserver-timing: queue;dur=0.25, "
                 "compute;dur=1.5\r\ncontent-length: %zu\r\n\r\n%s",
                 strlen(body), body);
    uv_buf_t ub = uv_buf_init(fc->out, (unsigned)strlen(fc->out));
    fc->w.data = fc;
    uv_write(&fc->w, s, &ub, 1, fc_written);
}

static void srv_conn(uv_stream_t *server, int status)
{
    assert_int_equal(status, 0);
    fake_srv_t *srv = server->data;
    fake_conn_t *fc = calloc(1, sizeof(*fc));
    fc->srv = srv;
    uv_pipe_init(server->loop, &fc->pipe, 0);
    fc->pipe.data = fc;
    assert_int_equal(uv_accept(server, (uv_stream_t *)&fc->pipe), 0);
    srv->accepted++;
    uv_read_start((uv_stream_t *)&fc->pipe, fc_alloc, fc_read);
}

static uv_loop_t loop;
static char path[108];
static fake_srv_t srv;

static void srv_start(int mode)
{
    memset(&srv, 0, sizeof(srv));
    srv.mode = mode;
    unlink(path);
    uv_pipe_init(&loop, &srv.server, 0);
    srv.server.data = &srv;
    assert_int_equal(uv_pipe_bind(&srv.server, path), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&srv.server, 16, srv_conn), 0);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, h == (uv_handle_t *)&srv.server ? NULL : fc_closed);
}

static void srv_stop(void)
{
    uv_walk(&loop, close_walk, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    unlink(path);
}

/* ---- the caller ---- */

typedef struct {
    int calls;
    int status;
    size_t n;
    char id[2][8];
    int st[2];
    char result[2][128];
    char code[2][32];
    vsr_rtc_timing_t t;
} outcome_t;

static void on_done(void *ud, int status, const vsr_rtc_result_t *r, size_t n, const vsr_rtc_timing_t *t)
{
    outcome_t *o = ud;
    o->calls++;
    o->status = status;
    o->n = n;
    o->t = *t;
    for (size_t i = 0; i < n && i < 2; i++) {
        snprintf(o->id[i], sizeof(o->id[i]), "%.*s", (int)r[i].id.len, r[i].id.p);
        o->st[i] = r[i].status;
        snprintf(o->result[i], sizeof(o->result[i]), "%.*s", (int)r[i].result.len, r[i].result.p);
        snprintf(o->code[i], sizeof(o->code[i]), "%.*s", (int)r[i].error_code.len, r[i].error_code.p);
    }
}

static const vsr_rtc_task_t TASKS[] = {
    {VSR_SLICE_LIT("a"), VSR_SLICE_LIT("embed"), VSR_SLICE_LIT("{\"input\":[\"hi\"]}")},
    {VSR_SLICE_LIT("b"), VSR_SLICE_LIT("classify"), VSR_SLICE_LIT("{\"text\":\"hi\"}")},
};

static void run_until(outcome_t *o, int calls)
{
    for (int i = 0; i < 2000 && o->calls < calls; i++)
        uv_run(&loop, UV_RUN_ONCE);
}

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof(path), "/tmp/vsr-rtc-test-%d.sock", (int)getpid());
    return uv_loop_init(&loop);
}

static int teardown(void **state)
{
    (void)state;
    uv_run(&loop, UV_RUN_DEFAULT);
    return uv_loop_close(&loop) == 0 ? 0 : -1;
}

static void test_bundle_results_and_pooling(void **state)
{
    (void)state;
    srv_start(SRV_OK);
    vsr_rtc_opts_t opts = {.socket_path = path};
    vsr_rtc_t *c = vsr_rtc_new(&loop, &opts);
    outcome_t o = {0};
    vsr_rtc_call_t *call = vsr_rtc_bundle(c, TASKS, 2, vsr_now_ms() + 10000, on_done, &o);
    assert_non_null(call);
    run_until(&o, 1);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, VSR_OK);
    assert_int_equal(o.n, 2);
    assert_string_equal(o.id[0], "a");
    assert_int_equal(o.st[0], VSR_OK);
    assert_string_equal(o.result[0], "{\"dim\":2,\"embeddings\":[[0.6,0.8]]}");
    assert_string_equal(o.id[1], "b");
    assert_int_equal(o.st[1], VSR_ERR);
    assert_string_equal(o.code[1], "not_supported");
    assert_int_equal(o.t.http_status, 200);
    assert_true(o.t.runtime_ms > 1.74 && o.t.runtime_ms < 1.76);
    assert_true(o.t.wall_ms >= 0);
    /* one bundle: every task, and the remaining deadline */
    assert_non_null(strstr(srv.last_body, "{\"tasks\":[{\"id\":\"a\",\"embed\":{\"input\":[\"hi\"]}},"
                                          "{\"id\":\"b\",\"classify\":{\"text\":\"hi\"}}],\"options\":{\"deadline_ms\":"));
    int dl = atoi(strstr(srv.last_body, "deadline_ms\":") + 13);
    assert_true(dl > 9000 && dl <= 10000);
    assert_int_equal(vsr_rtc_idle_conns(c), 1);
    /* the next call reuses the connection */
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 2);
    assert_int_equal(o.status, VSR_OK);
    assert_int_equal(srv.accepted, 1);
    assert_int_equal(srv.requests, 2);
    vsr_rtc_free(c);
    srv_stop();
}

static void test_deadline_and_cancel(void **state)
{
    (void)state;
    srv_start(SRV_SILENT);
    vsr_rtc_opts_t opts = {.socket_path = path};
    vsr_rtc_t *c = vsr_rtc_new(&loop, &opts);
    outcome_t o = {0};
    uint64_t t0 = vsr_now_ms();
    assert_non_null(vsr_rtc_bundle(c, TASKS, 1, t0 + 100, on_done, &o));
    run_until(&o, 1);
    assert_int_equal(o.status, VSR_ERR);
    assert_true(vsr_now_ms() - t0 >= 100);
    assert_int_equal(vsr_rtc_open_conns(c), 0); /* an answer may still come: not reused */

    outcome_t o2 = {0};
    vsr_rtc_call_t *call = vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o2);
    for (int i = 0; i < 50 && srv.requests < 2; i++)
        uv_run(&loop, UV_RUN_ONCE);
    vsr_rtc_cancel(call);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(o2.calls, 0);
    assert_int_equal(vsr_rtc_open_conns(c), 0);

    /* past the deadline already: done at once, no connection */
    outcome_t o3 = {0};
    assert_null(vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms(), on_done, &o3));
    assert_int_equal(o3.calls, 1);
    assert_int_equal(o3.status, VSR_ERR);

    /* a call in flight when the client goes never completes */
    outcome_t o4 = {0};
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o4);
    vsr_rtc_free(c);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(o4.calls, 0);
    srv_stop();
}

static void test_runtime_down_or_refusing(void **state)
{
    (void)state;
    unlink(path);
    vsr_rtc_opts_t opts = {.socket_path = path};
    vsr_rtc_t *c = vsr_rtc_new(&loop, &opts);
    outcome_t o = {0};
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 1);
    assert_int_equal(o.status, VSR_ERR_IO);
    assert_int_equal(o.t.http_status, 0);

    srv_start(SRV_429);
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 2);
    assert_int_equal(o.status, VSR_ERR_TOO_BIG);
    assert_int_equal(o.t.http_status, 429);
    vsr_rtc_free(c);
    srv_stop();
}

/* The runtime closed an idle connection: it is not reused. */
static void test_stale_connection_is_retried(void **state)
{
    (void)state;
    srv_start(SRV_OK_THEN_CLOSE);
    vsr_rtc_opts_t opts = {.socket_path = path};
    vsr_rtc_t *c = vsr_rtc_new(&loop, &opts);
    outcome_t o = {0};
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 1);
    assert_int_equal(o.status, VSR_OK);
    /* let the server's close happen before the next call */
    for (int i = 0; i < 20 && vsr_rtc_idle_conns(c) > 0; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    srv.mode = SRV_OK;
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 2);
    assert_int_equal(o.status, VSR_OK);
    assert_int_equal(srv.requests, 2);
    assert_int_equal(srv.accepted, 2);
    vsr_rtc_free(c);
    srv_stop();

    /* ... and a reused connection closed before any byte of the answer: sent again on a new one */
    srv_start(SRV_DROP_REUSED);
    c = vsr_rtc_new(&loop, &opts);
    memset(&o, 0, sizeof(o));
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 1);
    assert_int_equal(o.status, VSR_OK);
    assert_int_equal(vsr_rtc_idle_conns(c), 1);
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 2);
    assert_int_equal(o.calls, 2);
    assert_int_equal(o.status, VSR_OK);
    assert_int_equal(srv.requests, 3);
    assert_int_equal(srv.accepted, 2);
    vsr_rtc_free(c);
    srv_stop();
}

static void test_connection_bound(void **state)
{
    (void)state;
    srv_start(SRV_SILENT);
    vsr_rtc_opts_t opts = {.socket_path = path, .max_conns = 1};
    vsr_rtc_t *c = vsr_rtc_new(&loop, &opts);
    outcome_t o = {0}, o2 = {0};
    assert_non_null(vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o));
    assert_null(vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o2));
    assert_int_equal(o2.calls, 1);
    assert_int_equal(o2.status, VSR_ERR_TOO_BIG);
    assert_int_equal(o.calls, 0);
    vsr_rtc_free(c);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(o.calls, 0);
    srv_stop();
}

static int peer_is(void *ud)
{
    return *(int *)ud;
}

/* The socket must be served by the expected process (the managed child):
 * served by any other, the call fails as the runtime's failure and nothing
 * is sent to it. */
static void test_peer_must_be_the_expected_process(void **state)
{
    (void)state;
    srv_start(SRV_OK);
    int want = (int)getpid(); /* the fake runtime runs in this process */
    vsr_rtc_opts_t opts = {.socket_path = path, .peer_pid = peer_is, .peer_ud = &want};
    vsr_rtc_t *c = vsr_rtc_new(&loop, &opts);
    outcome_t o = {0};
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 1);
    assert_int_equal(o.status, VSR_OK);
    assert_int_equal(srv.requests, 1);
    vsr_rtc_free(c);
    uv_run(&loop, UV_RUN_NOWAIT);

    /* another process is expected: refused before a byte goes out */
    want = (int)getpid() + 1;
    c = vsr_rtc_new(&loop, &opts);
    memset(&o, 0, sizeof(o));
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 1);
    assert_int_equal(o.calls, 1);
    assert_int_equal(o.status, VSR_ERR_IO);
    assert_int_equal(o.t.http_status, 0);
    assert_int_equal(vsr_rtc_open_conns(c), 0);
    /* no child runs (0): refused too */
    want = 0;
    vsr_rtc_bundle(c, TASKS, 1, vsr_now_ms() + 10000, on_done, &o);
    run_until(&o, 2);
    assert_int_equal(o.calls, 2);
    assert_int_equal(o.status, VSR_ERR_IO);
    for (int i = 0; i < 20; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(srv.accepted, 3);
    assert_int_equal(srv.requests, 1); /* only the first, to the expected process */
    vsr_rtc_free(c);
    srv_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle_results_and_pooling),
        cmocka_unit_test(test_deadline_and_cancel),
        cmocka_unit_test(test_runtime_down_or_refusing),
        cmocka_unit_test(test_stale_connection_is_retried),
        cmocka_unit_test(test_connection_bound),
        cmocka_unit_test(test_peer_must_be_the_expected_process),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
