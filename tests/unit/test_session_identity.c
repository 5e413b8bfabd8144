/* test_session_identity.c — vsr_session_identity: the request's
 * authenticated user and groups, read as the authz signal family reads them
 * (trusted identity fields only, the configured field names). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "routing/routing.h"

static const char *DOC =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
    "providers:\n"
    "  defaults: {model: m}\n"
    "  models: [{name: m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}]\n"
    "global:\n"
    "  services:\n"
    "    authz: {identity: {user_id_header: x-user, user_groups_header: x-groups}}\n";

static void test_identity(void **state)
{
    (void)state;
    vsr_config_t *cfg = NULL;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("c.yaml", DOC, strlen(DOC), &cfg, &err), VSR_OK);
    vsr_engine_t *e = vsr_engine_new(cfg, 1, &err);
    assert_non_null(e);
    vsr_header_t h[] = {{VSR_SLICE_LIT("x-user"), VSR_SLICE_LIT(" alice ")},
                        {VSR_SLICE_LIT("x-groups"), VSR_SLICE_LIT("premium, staff")},
                        {VSR_SLICE_LIT("x-authz-user-id"), VSR_SLICE_LIT("mallory")}};
    for (int trusted = 0; trusted < 2; trusted++) {
        vsr_session_opts_t o = {.listener = &cfg->listeners[0], .identity_trusted = trusted};
        vsr_session_t *s = vsr_session_open(e, &o);
        vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), h, 3);
        vsr_slice_t user, groups;
        int got = vsr_session_identity(s, &user, &groups);
        if (trusted) { /* the configured names, trimmed; never the default name */
            assert_int_equal(got, 1);
            assert_true(vsr_slice_eq_cstr(user, "alice"));
            assert_true(vsr_slice_eq_cstr(groups, "premium, staff"));
        } else {
            assert_int_equal(got, 0);
            assert_int_equal(user.len, 0);
            assert_int_equal(groups.len, 0);
        }
        vsr_session_finish(s);
    }
    vsr_engine_unref(e);
    vsr_config_free(cfg);
    vsr_buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_identity)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
