/* test_runtime_supervisor.c — the runtime as the router's child: started,
 * probed on /health/live, its output in the log, restarted after a crash,
 * with back-off when it cannot start, and when it never becomes ready, or
 * when another process serves its socket; stopped with the router.  The child is a small Python stand-in
 * (tests/unit/data/fake_runtime.py) or sleep(1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/client.h"

static uv_loop_t loop;
static char path[108];

typedef struct {
    int ready_calls[2];
    int ready;
    int saw_hello, saw_stderr, saw_cannot;
} watch_t;

static void on_ready(void *ud, int ready)
{
    watch_t *w = ud;
    w->ready_calls[ready ? 1 : 0]++;
    w->ready = ready;
}

static void log_line(void *ud, const char *line, size_t len)
{
    watch_t *w = ud;
    if (len == 18 && memcmp(line, "hello from runtime", 18) == 0)
        w->saw_hello = 1;
    if (len == 16 && memcmp(line, "a line on stderr", 16) == 0)
        w->saw_stderr = 1;
    if (len == 12 && memcmp(line, "cannot start", 12) == 0)
        w->saw_cannot++;
}

/* Runs the loop until cond holds or ms pass. */
#define RUN_UNTIL(cond, ms)                                                           \
    do {                                                                              \
        uint64_t until_ = vsr_now_ms() + (ms);                                        \
        while (!(cond) && vsr_now_ms() < until_)                                      \
            uv_run(&loop, UV_RUN_ONCE);                                               \
    } while (0)

static const char *PY_ARGS[] = {"tests/unit/data/fake_runtime.py", "--socket", path, NULL};

static vsr_rts_opts_t base_opts(watch_t *w, const char *const *args)
{
    vsr_rts_opts_t o = {.exe = "/usr/bin/python3", .args = args, .socket_path = path, .probe_interval_ms = 100,
                        .probe_timeout_ms = 1000, .backoff_initial_ms = 100, .backoff_max_ms = 400,
                        .on_ready = on_ready, .log_line = log_line, .ud = w};
    return o;
}

/* a ticker keeps UV_RUN_ONCE from blocking for long */
static uv_timer_t ticker;
static void tick_cb(uv_timer_t *t)
{
    (void)t;
}

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof(path), "/tmp/vsr-rts-test-%d.sock", (int)getpid());
    uv_loop_init(&loop);
    uv_timer_init(&loop, &ticker);
    uv_timer_start(&ticker, tick_cb, 20, 20);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    uv_close((uv_handle_t *)&ticker, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    unlink(path);
    return uv_loop_close(&loop) == 0 ? 0 : -1;
}

static void stop_and_reap(vsr_rts_t *s, int pid)
{
    vsr_rts_stop(s);
    /* the child goes (SIGTERM) and the supervisor's handles close */
    RUN_UNTIL(pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH), 10000);
    if (pid > 0)
        assert_int_equal(kill(pid, 0), -1);
    for (int i = 0; i < 20; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
}

static void test_start_ready_log_crash_restart(void **state)
{
    (void)state;
    watch_t w = {0};
    vsr_rts_opts_t o = base_opts(&w, PY_ARGS);
    vsr_rts_t *s = vsr_rts_start(&loop, &o);
    assert_false(vsr_rts_ready(s)); /* not until the first good probe */
    RUN_UNTIL(w.ready && w.saw_hello && w.saw_stderr, 20000);
    assert_true(vsr_rts_ready(s));
    assert_int_equal(w.ready_calls[1], 1);
    assert_true(w.saw_hello);  /* stdout ... */
    assert_true(w.saw_stderr); /* ... and stderr go to the log */
    int pid = vsr_rts_pid(s);
    assert_true(pid > 0);
    assert_int_equal(vsr_rts_starts(s), 1);

    /* the child dies: not ready, then a new child, ready again */
    kill(pid, SIGKILL);
    RUN_UNTIL(w.ready_calls[0] >= 1, 10000);
    assert_int_equal(w.ready_calls[0], 1);
    assert_false(vsr_rts_ready(s));
    RUN_UNTIL(w.ready_calls[1] >= 2, 20000);
    assert_true(vsr_rts_ready(s));
    assert_int_equal(vsr_rts_starts(s), 2);
    int pid2 = vsr_rts_pid(s);
    assert_true(pid2 > 0 && pid2 != pid);
    stop_and_reap(s, pid2);
    assert_int_equal(w.ready_calls[0], 1); /* stopping says nothing */
}

/* A child that cannot start is started again after 100, 200, 400, 400 ms. */
static void test_backoff(void **state)
{
    (void)state;
    static const char *args[] = {"tests/unit/data/fake_runtime.py", "--exit", NULL};
    watch_t w = {0};
    vsr_rts_opts_t o = base_opts(&w, args);
    vsr_rts_t *s = vsr_rts_start(&loop, &o);
    uint64_t at[6] = {vsr_now_ms()};
    unsigned seen = 1;
    uint64_t until = vsr_now_ms() + 30000;
    while (seen < 6 && vsr_now_ms() < until) {
        uv_run(&loop, UV_RUN_ONCE);
        if (vsr_rts_starts(s) > seen)
            at[seen++] = vsr_now_ms();
    }
    assert_int_equal(seen, 6);
    static const uint64_t min_gap[] = {100, 200, 400, 400, 400};
    for (int i = 0; i < 5; i++)
        assert_true(at[i + 1] - at[i] >= min_gap[i]);
    assert_int_equal(w.ready_calls[1], 0);
    assert_true(w.saw_cannot >= 1);
    stop_and_reap(s, vsr_rts_pid(s));
}

/* A child that runs but never answers /health/live is restarted. */
static void test_never_ready(void **state)
{
    (void)state;
    static const char *args[] = {"30", NULL};
    watch_t w = {0};
    vsr_rts_opts_t o = base_opts(&w, args);
    o.exe = "/bin/sleep";
    o.start_timeout_ms = 300;
    unlink(path);
    vsr_rts_t *s = vsr_rts_start(&loop, &o);
    int pid = vsr_rts_pid(s);
    assert_true(pid > 0);
    RUN_UNTIL(vsr_rts_starts(s) >= 2, 20000);
    assert_true(vsr_rts_starts(s) >= 2);
    assert_int_equal(w.ready_calls[1], 0);
    RUN_UNTIL(kill(pid, 0) != 0, 5000);
    assert_int_equal(kill(pid, 0), -1); /* the first one was killed */
    stop_and_reap(s, vsr_rts_pid(s));
}

/* ---- a process other than the child answering on the socket: this one ---- */

typedef struct {
    uv_pipe_t pipe;
    uv_write_t w;
    char buf[512];
} squat_conn_t;

static int squat_answers;

static void squat_closed(uv_handle_t *h)
{
    free(h->data);
}

static void squat_alloc(uv_handle_t *h, size_t n, uv_buf_t *b)
{
    (void)n;
    squat_conn_t *sc = h->data;
    *b = uv_buf_init(sc->buf, sizeof(sc->buf));
}

static void squat_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n > 0) {
        static const char ok[] = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        squat_conn_t *sc = st->data;
        uv_buf_t out = uv_buf_init((char *)ok, sizeof(ok) - 1);
        uv_write(&sc->w, st, &out, 1, NULL);
        squat_answers++;
    }
    if (n < 0 && !uv_is_closing((uv_handle_t *)st))
        uv_close((uv_handle_t *)st, squat_closed);
}

static void squat_conn(uv_stream_t *server, int status)
{
    assert_int_equal(status, 0);
    squat_conn_t *sc = calloc(1, sizeof(*sc));
    uv_pipe_init(server->loop, &sc->pipe, 0);
    sc->pipe.data = sc;
    assert_int_equal(uv_accept(server, (uv_stream_t *)&sc->pipe), 0);
    uv_read_start((uv_stream_t *)&sc->pipe, squat_alloc, squat_read);
}

static void squat_close_walk(uv_handle_t *h, void *server)
{
    if (h->type == UV_NAMED_PIPE && !uv_is_closing(h))
        uv_close(h, h == server ? NULL : squat_closed);
}

/* The child (sleep) serves nothing; this process answers /health/live on
 * its socket: those answers do not make the runtime ready, and the child
 * is restarted as one that never became ready. */
static void test_socket_served_by_another_process(void **state)
{
    (void)state;
    static const char *args[] = {"30", NULL};
    watch_t w = {0};
    vsr_rts_opts_t o = base_opts(&w, args);
    o.exe = "/bin/sleep";
    o.start_timeout_ms = 1000;
    unlink(path);
    uv_pipe_t server;
    uv_pipe_init(&loop, &server, 0);
    assert_int_equal(uv_pipe_bind(&server, path), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&server, 16, squat_conn), 0);
    squat_answers = 0;
    vsr_rts_t *s = vsr_rts_start(&loop, &o);
    RUN_UNTIL(vsr_rts_starts(s) >= 2, 20000);
    assert_true(vsr_rts_starts(s) >= 2);
    assert_int_equal(w.ready_calls[1], 0);
    assert_false(vsr_rts_ready(s));
    assert_int_equal(squat_answers, 0); /* connected, never asked */
    stop_and_reap(s, vsr_rts_pid(s));
    uv_walk(&loop, squat_close_walk, &server);
    for (int i = 0; i < 20; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_ready_log_crash_restart),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_never_ready),
        cmocka_unit_test(test_socket_served_by_another_process),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
