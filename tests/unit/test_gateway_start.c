/* test_gateway_start.c — vsr_gateway_start's refusals that come before any
 * worker, socket or loop: an ext_proc listener without the stream handler
 * the composition root lends (vsr_gateway_opts_t.extproc) does not start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/gateway.h"

static void *h_open(void *ud, vsr_engine_t *e, const vsr_session_opts_t *s, uint32_t max, const vsr_gateway_xp_io_t *io)
{
    VSR_UNUSED(ud);
    VSR_UNUSED(e);
    VSR_UNUSED(s);
    VSR_UNUSED(max);
    VSR_UNUSED(io);
    return NULL;
}
static void h_data(void *st, const uint8_t *p, size_t n)
{
    VSR_UNUSED(st);
    VSR_UNUSED(p);
    VSR_UNUSED(n);
}
static void h_stream(void *st)
{
    VSR_UNUSED(st);
}
static vsr_session_t *h_session(const void *st)
{
    VSR_UNUSED(st);
    return NULL;
}

static void refused(const vsr_gateway_opts_t *o)
{
    static vsr_config_t cfg; /* not read: the refusal comes first */
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_null(vsr_gateway_start(&cfg, NULL, o, &err));
    assert_true(err.len > 0);
    assert_non_null(memmem(err.data, err.len, "stream handler", 14));
    vsr_buf_free(&err);
}

static void test_extproc_needs_handler(void **state)
{
    (void)state;
    vsr_gateway_opts_t o;
    memset(&o, 0, sizeof(o));
    o.extproc_port = 1; /* never bound: the start is refused before any socket */
    refused(&o);
    /* every function is required: one missing is refused too */
    o.extproc = (vsr_gateway_xp_t){h_open, h_data, h_stream, h_stream, h_session, NULL, NULL};
    refused(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extproc_needs_handler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
