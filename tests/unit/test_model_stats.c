/* test_model_stats.c — the live per-model statistics the selectors read:
 * percentiles, windows, shards, bounds, rendering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "routing/routing.h"

static uint64_t fake_now;
static uint64_t fake_clock(void)
{
    return fake_now;
}

static void test_model_stats(void **state)
{
    (void)state;
    vsr_model_stats_t *m = vsr_model_stats_new(4, 1000);
    vsr_model_stats_set_clock(m, fake_clock);
    fake_now = 10000;
    vsr_slice_t a = VSR_SLICE_LIT("a");
    double v;
    assert_int_equal(vsr_model_stats_percentile(m, a, VSR_MSTAT_TTFT, 95, &v), 0);
    /* two samples: their mean */
    vsr_model_obs_t o = {.ttft_ms = 100, .tpot_ms = -1, .latency_ms = 200};
    vsr_model_stats_observe(m, 0, a, &o);
    o.ttft_ms = 300;
    vsr_model_stats_observe(m, 1, a, &o);
    assert_int_equal(vsr_model_stats_percentile(m, a, VSR_MSTAT_TTFT, 95, &v), 1);
    assert_float_equal(v, 200, 1e-6);
    assert_int_equal(vsr_model_stats_percentile(m, a, VSR_MSTAT_TPOT, 95, &v), 0);
    /* 100 samples 1..100 ms over the shards: percentiles within a bucket (19%) */
    vsr_model_stats_t *p = vsr_model_stats_new(4, 1000);
    vsr_model_stats_set_clock(p, fake_clock);
    for (int i = 1; i <= 100; i++) {
        vsr_model_obs_t x = {.ttft_ms = i, .tpot_ms = -1, .latency_ms = -1, .error = i > 90};
        vsr_model_stats_observe(p, (unsigned)i % 4, a, &x);
    }
    assert_int_equal(vsr_model_stats_percentile(p, a, VSR_MSTAT_TTFT, 50, &v), 1);
    assert_true(fabs(v - 50) / 50 < 0.2);
    assert_int_equal(vsr_model_stats_percentile(p, a, VSR_MSTAT_TTFT, 95, &v), 1);
    assert_true(fabs(v - 95) / 95 < 0.2);
    vsr_model_stats_view_t view;
    assert_int_equal(vsr_model_stats_view(p, a, &view), 1);
    assert_int_equal(view.window_requests, 100);
    assert_int_equal(view.window_errors, 10);
    /* in flight: summed over the shards */
    vsr_model_stats_inflight(p, 0, a, 1);
    vsr_model_stats_inflight(p, 3, a, 1);
    vsr_model_stats_view(p, a, &view);
    assert_int_equal(view.inflight, 2);
    assert_int_equal(vsr_model_stats_inflight_now(p, a), 2);
    assert_int_equal(vsr_model_stats_inflight_now(p, VSR_SLICE_LIT("nobody")), 0);
    /* the window moves on: one window later the samples still count, two later they are gone */
    fake_now += 1000;
    assert_int_equal(vsr_model_stats_percentile(p, a, VSR_MSTAT_TTFT, 50, &v), 1);
    fake_now += 1000;
    assert_int_equal(vsr_model_stats_percentile(p, a, VSR_MSTAT_TTFT, 50, &v), 0);
    vsr_model_stats_view(p, a, &view);
    assert_int_equal(view.window_requests, 0);
    assert_int_equal(view.requests, 100); /* the totals stay */
    /* a shard writing into a new window starts that half empty */
    vsr_model_obs_t late = {.ttft_ms = 7, .tpot_ms = -1, .latency_ms = -1};
    vsr_model_stats_observe(p, 1, a, &late);
    assert_int_equal(vsr_model_stats_percentile(p, a, VSR_MSTAT_TTFT, 50, &v), 1);
    assert_float_equal(v, 7, 1e-6);
    /* rendering */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_model_stats_render(p, &b);
    assert_non_null(strstr(b.data, "vsr_model_inflight{model=\"a\"} 2\n"));
    assert_non_null(strstr(b.data, "vsr_model_ttft_seconds{model=\"a\",quantile=\"0.5\"} 0.007000\n"));
    vsr_buf_free(&b);
    vsr_model_stats_free(p);
    vsr_model_stats_free(m);
}

static void test_model_stats_bounds(void **state)
{
    (void)state;
    vsr_model_stats_t *m = vsr_model_stats_new(1, 0);
    char name[32];
    vsr_model_obs_t o = {.ttft_ms = 1, .tpot_ms = -1, .latency_ms = -1};
    for (int i = 0; i < VSR_MODEL_STATS_MAX_MODELS + 10; i++) {
        int n = snprintf(name, sizeof(name), "model-%d", i);
        vsr_model_stats_observe(m, 0, vsr_slice(name, (size_t)n), &o);
    }
    const char *names[VSR_MODEL_STATS_MAX_MODELS + 10];
    assert_int_equal(vsr_model_stats_names(m, names, VSR_ARRAY_LEN(names)), VSR_MODEL_STATS_MAX_MODELS);
    double v;
    assert_int_equal(vsr_model_stats_percentile(m, VSR_SLICE_LIT("model-300"), VSR_MSTAT_TTFT, 50, &v), 0);
    vsr_model_stats_free(m);
    vsr_model_stats_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_stats),
        cmocka_unit_test(test_model_stats_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
