/* test_upstream_clock.c — an upstream call's total deadline holds when the
 * loop's cached time is stale (long work earlier in the same loop
 * iteration): the timer armed for the rest of the deadline must not fire
 * early and let one more attempt start.
 *
 * The backend is a loopback listener whose accept queue is full, so a
 * connect attempt hangs (the SYN is dropped) until a timer ends it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "upstream/upstream.h"

typedef struct {
    vsr_upstream_t *up;
    const vsr_model_conf_t *model;
    vsr_upstream_report_t report;
    vsr_upstream_call_t *call;
    uint64_t start_ms, end_ms;
    int err, done;
} run_t;

static void on_head(void *ud, const vsr_http_head_t *h)
{
    (void)ud;
    (void)h;
    fail_msg("the backend never answers");
}
static void on_body(void *ud, const char *p, size_t n, vsr_rbuf_t *o)
{
    (void)ud, (void)p, (void)n, (void)o;
}
static void on_complete(void *ud)
{
    (void)ud;
}
static void on_error(void *ud, vsr_upstream_error_t err, const char *detail, int retried)
{
    (void)detail;
    (void)retried;
    run_t *r = ud;
    r->err = (int)err;
    r->end_ms = vsr_now_ms();
    r->done = 1;
}
static const vsr_upstream_callbacks_t cbs = {on_head, on_body, on_complete, on_error, NULL};

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Long work, then the call: both in one timer callback, so the loop's cached
 * time is `ms` behind the clock when the call arms its first timer. */
static void start_late(uv_timer_t *t)
{
    run_t *r = t->data;
    sleep_ms(300);
    vsr_upstream_request_t req = {
        .method = VSR_SLICE_LIT("POST"),
        .path = VSR_SLICE_LIT("/v1/chat/completions"),
        .listener_timeout_ms = 20000,
        .report = &r->report,
    };
    r->start_ms = vsr_now_ms();
    r->call = vsr_upstream_call_start(r->up, r->model, &req, &cbs, r);
    uv_close((uv_handle_t *)t, NULL);
}

static void test_total_deadline_with_a_stale_loop_time(void **state)
{
    (void)state;
    /* a listener with a full accept queue: connects to it hang */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(lfd, 0), 0);
    socklen_t al = sizeof(a);
    getsockname(lfd, (struct sockaddr *)&a, &al);
    int filler[2];
    for (int i = 0; i < 2; i++) { /* one fills the queue; the second makes sure */
        filler[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(filler[i], (struct sockaddr *)&a, sizeof(a));
    }
    sleep_ms(50);

    char doc[1024];
    snprintf(doc, sizeof(doc),
             "version: v0.3\n"
             "listeners:\n"
             "  - {name: l1, address: 127.0.0.1, port: 18899}\n"
             "providers:\n"
             "  defaults: {model: m}\n"
             "  models:\n"
             "    - name: m\n"
             "      reliability: {retry_count: 5, retry_on: connect-failure, connect_timeout: 10s,\n"
             "                    total_timeout: 500ms}\n"
             "      backend_refs: [{endpoint: '127.0.0.1:%u'}]\n",
             (unsigned)ntohs(a.sin_port));
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *cfg = NULL;
    if (vsr_config_load_string("t.yaml", doc, strlen(doc), &cfg, &err) != VSR_OK)
        fail_msg("%s", err.data);
    vsr_upstream_shared_t *sh = vsr_upstream_shared_new(cfg, &err);
    assert_non_null(sh);
    uv_loop_t loop;
    uv_loop_init(&loop);
    run_t r = {0};
    r.up = vsr_upstream_new(&loop, cfg, sh);
    r.model = vsr_config_find_model(cfg, VSR_SLICE_LIT("m"));
    assert_non_null(r.model);
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    t.data = &r;
    uv_timer_start(&t, start_late, 0, 0);
    while (!r.done)
        uv_run(&loop, UV_RUN_ONCE);

    for (unsigned i = 0; r.report.n_attempts != 1 && i < r.report.n_attempts && i < VSR_UPSTREAM_MAX_ATTEMPTS; i++)
        fprintf(stderr, "attempt %u: error %d status %d after %llu ms\n", i, (int)r.report.attempts[i].error,
                r.report.attempts[i].status, (unsigned long long)r.report.attempts[i].duration_ms);
    /* one attempt, ended by the total deadline, not before it */
    assert_int_equal(r.err, VSR_UPSTREAM_E_TIMEOUT);
    assert_int_equal(r.report.n_attempts, 1);
    assert_true(r.end_ms - r.start_ms >= 499);

    vsr_upstream_free(r.up);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    vsr_upstream_shared_free(sh);
    vsr_config_free(cfg);
    vsr_buf_free(&err);
    for (int i = 0; i < 2; i++)
        close(filler[i]);
    close(lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_total_deadline_with_a_stale_loop_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
