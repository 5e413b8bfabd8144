/* The process's end waits (bounded) for management calls still running on
 * their threads, so that no exit handler unloads a library under one of
 * them (vsr_admin_wait). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "admin/admin.h"
#include "base/base.h"

#define DOC(tag)                                                                                                     \
    "version: v0.3\n"                                                                                                \
    "listeners: [{name: main, address: 127.0.0.1, port: 8899}]\n"                                                    \
    "providers:\n"                                                                                                   \
    "  defaults: {model: m1}\n"                                                                                      \
    "  models:\n"                                                                                                    \
    "    - {name: m1, backend_refs: [{name: a, endpoint: '127.0.0.1:18000'}]}\n"                                     \
    "routing:\n"                                                                                                     \
    "  signals: {keywords: [{name: " tag ", operator: OR, keywords: [zzz]}]}\n"                                      \
    "  decisions: [{name: d, rules: {operator: AND, conditions: [{type: keyword, name: " tag "}]},\n"                \
    "               modelRefs: [{model: m1}]}]\n"

static atomic_int slow;    /* the next warm-up blocks until released */
static atomic_int entered; /* a warm-up is blocked */
static atomic_int release;
static atomic_int warmed;  /* warm-ups that ran to their end */
static atomic_int answered;

static void nap(void)
{
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static int warm(void *ud, vsr_engine_t *e, int dry_run, vsr_buf_t *err)
{
    (void)ud, (void)e, (void)dry_run, (void)err;
    if (atomic_load(&slow)) {
        atomic_store(&entered, 1);
        while (!atomic_load(&release))
            nap();
    }
    atomic_fetch_add(&warmed, 1);
    return VSR_OK;
}

static void done(void *ud)
{
    (void)ud;
    atomic_fetch_add(&answered, 1);
}

static void test_the_end_waits_for_a_call_in_progress(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 16);
    vsr_admin_hooks_t hooks = {.warm = warm};
    vsr_admin_t *a = vsr_admin_new(&hooks, NULL, &err);
    assert_non_null(a);
    vsr_admin_result_t res = {0};
    const char *first = DOC("one");
    assert_int_equal(vsr_admin_apply(a, "config.yaml", first, strlen(first), "file", 0, &res), VSR_OK);
    vsr_admin_result_free(&res);
    assert_int_equal(vsr_admin_wait(a, 0), 0); /* nothing running */

    atomic_store(&slow, 1);
    const char *second = DOC("two");
    vsr_admin_request_t req = {.method = vsr_slice_cstr("PUT"),
                               .target = vsr_slice_cstr("/api/v1/config"),
                               .content_type = vsr_slice_cstr("application/yaml"),
                               .body = second,
                               .body_len = strlen(second)};
    vsr_admin_response_t resp;
    memset(&resp, 0, sizeof(resp));
    assert_int_equal(vsr_admin_submit(a, &req, &resp, done, NULL), VSR_OK);
    while (!atomic_load(&entered))
        nap();

    vsr_admin_close(a);
    assert_int_equal(vsr_admin_wait(a, 20), 1); /* still warming: counted, not waited out */
    /* the admin is on the process's exit list: the end's one wait sees it */
    const char *busy = NULL;
    assert_int_equal(vsr_exit_wait_all(20, &busy), 1);
    assert_non_null(busy);
    assert_string_equal(busy, "management call(s)");
    assert_int_equal(atomic_load(&answered), 0);
    atomic_store(&release, 1);
    assert_int_equal(vsr_exit_wait_all(30000, &busy), 0);
    assert_null(busy);
    assert_int_equal(vsr_admin_wait(a, 0), 0);
    /* the thread has ended: its answer was given before */
    assert_int_equal(atomic_load(&warmed), 2);
    assert_int_equal(atomic_load(&answered), 1);
    assert_int_not_equal(resp.status, 200); /* closed meanwhile: nothing activated */
    vsr_admin_response_free(&resp);
    vsr_admin_free(a);
    vsr_buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_end_waits_for_a_call_in_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
