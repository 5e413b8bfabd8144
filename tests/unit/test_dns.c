/* test_dns.c — backend host names: a name that does not resolve does not
 * stop a version (its endpoint is out of rotation), and the re-resolution
 * started with the health checks brings an endpoint back once its name
 * resolves (on a real libuv loop; bounded by a deadline). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <uv.h>

#include "config/config.h"
#include "upstream/upstream-int.h"

static vsr_config_t *load(const char *yaml)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 16);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%.*s", (int)err.len, err.data);
    assert_int_equal(rc, VSR_OK);
    vsr_buf_free(&err);
    return c;
}

#define DOC(ep1, ep2)                                                                                                 \
    "version: v0.3\nlisteners: [{name: l, port: 8080}]\nproviders:\n  models:\n"                                      \
    "    - name: m\n      backend_refs: [{name: a, endpoint: \"" ep1 "\"}, {name: b, endpoint: \"" ep2 "\"}]\n"

static void test_unresolvable_name_does_not_fail(void **state)
{
    (void)state;
    vsr_config_t *c = load(DOC("127.0.0.1:9", "no-such-host.invalid:8000"));
    vsr_buf_t err, names;
    vsr_buf_init(&err, 4096);
    vsr_buf_init(&names, 4096);
    vsr_upstream_shared_t *sh = vsr_upstream_shared_new(c, &err);
    assert_non_null(sh);
    assert_int_equal(err.len, 0);
    assert_int_equal(vsr_upstream_unresolved(sh, &names, 16), 1);
    vsr_buf_append(&names, "", 1);
    assert_string_equal(names.data, "\"m/b (no-such-host.invalid)\"");
    assert_int_equal(atomic_load(&sh->clusters[0]->eps[0].unresolved), 0);
    assert_int_equal(atomic_load(&sh->clusters[0]->eps[1].unresolved), 1);
    assert_int_equal(vsr_upstream_unresolved(NULL, NULL, 0), 0);
    vsr_upstream_shared_free(sh);
    vsr_buf_free(&err);
    vsr_buf_free(&names);
    vsr_config_free(c);
}

typedef struct {
    vsr_upstream_shared_t *sh;
    uv_timer_t poll;
    uint64_t deadline_ms;
    int done;
} watch_t;

static void poll_cb(uv_timer_t *t)
{
    watch_t *w = t->data;
    if (vsr_upstream_unresolved(w->sh, NULL, 0) == 0 || vsr_now_ms() > w->deadline_ms) {
        w->done = 1;
        uv_timer_stop(t);
        vsr_upstream_health_stop(w->sh);
        uv_close((uv_handle_t *)t, NULL);
    }
}

/* "localhost" resolves; made to look unresolved, the resolver's first retry
 * (VSR_DNS_RETRY_MS) finds it again and puts it back in rotation. */
static void test_name_resolves_later(void **state)
{
    (void)state;
    vsr_config_t *c = load(DOC("127.0.0.1:9", "localhost:8000"));
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_upstream_shared_t *sh = vsr_upstream_shared_new(c, &err);
    assert_non_null(sh);
    shared_cluster_t *sc = sh->clusters[0];
    assert_true(sc->named[1] && !sc->named[0]);
    pthread_mutex_lock(&sc->addr_mu);
    memset(&sc->addrs[1], 0, sizeof(sc->addrs[1]));
    pthread_mutex_unlock(&sc->addr_mu);
    atomic_store(&sc->eps[1].unresolved, 1);

    uv_loop_t loop;
    uv_loop_init(&loop);
    vsr_upstream_health_start(sh, &loop);
    watch_t w = {.sh = sh, .deadline_ms = vsr_now_ms() + VSR_DNS_RETRY_MS + 20000};
    uv_timer_init(&loop, &w.poll);
    w.poll.data = &w;
    uv_timer_start(&w.poll, poll_cb, 50, 50);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(w.done);
    assert_int_equal(atomic_load(&sc->eps[1].unresolved), 0);
    struct sockaddr_storage a;
    vsr__upstream_addr(sc, &sc->addrs[1], &a);
    assert_true(a.ss_family == AF_INET || a.ss_family == AF_INET6);
    assert_int_equal(uv_loop_close(&loop), 0);
    vsr_upstream_shared_free(sh);
    vsr_buf_free(&err);
    vsr_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unresolvable_name_does_not_fail),
        cmocka_unit_test(test_name_resolves_later),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
