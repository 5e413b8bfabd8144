/* test_selectors.c — the single-call selectors (latency_aware, router_dc,
 * multi_factor) on fixed candidates: the pick and every score. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "decision/decision.h"

#define IN(m) {.model = (m)}

static void set_lat(vsr_select_input_t *in, double ttft, double tpot)
{
    in->ttft_ms = ttft;
    in->has_ttft = ttft >= 0;
    in->tpot_ms = tpot;
    in->has_tpot = tpot >= 0;
}

static void test_latency_aware(void **state)
{
    (void)state;
    vsr_select_input_t in[3] = {IN("a"), IN("b"), IN("c")};
    vsr_select_result_t r;
    vsr_algo_latency_conf_t c = {.ttft_percentile = 95};
    /* no statistics yet: the first candidate, with a warning */
    vsr_select_latency_aware(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 0);
    assert_non_null(r.warning);
    /* no percentile asked: the same */
    vsr_algo_latency_conf_t none = {0};
    set_lat(&in[0], 400, 40), set_lat(&in[1], 100, 20), set_lat(&in[2], 200, 10);
    vsr_select_latency_aware(&none, 0, in, 3, &r);
    assert_int_equal(r.chosen, 0);
    assert_non_null(r.warning);
    /* TTFT only: ratios to the best, the lowest wins */
    vsr_select_latency_aware(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 1);
    assert_null(r.warning);
    assert_true(r.scored[0] && r.scored[1] && r.scored[2]);
    assert_float_equal(r.scores[0], 4.0, 1e-9);
    assert_float_equal(r.scores[1], 1.0, 1e-9);
    assert_float_equal(r.scores[2], 2.0, 1e-9);
    /* both: mean of (tpot/10, ttft/100): a 4+4, b 2+1, c 1+2 → b and c tie, b first */
    vsr_algo_latency_conf_t both = {.ttft_percentile = 95, .tpot_percentile = 90};
    vsr_select_latency_aware(&both, 0, in, 3, &r);
    assert_float_equal(r.scores[0], 4.0, 1e-9);
    assert_float_equal(r.scores[1], 1.5, 1e-9);
    assert_float_equal(r.scores[2], 1.5, 1e-9);
    assert_int_equal(r.chosen, 1);
    /* a candidate without data and nothing in flight is tried */
    in[1].has_tpot = 0;
    vsr_select_latency_aware(&both, 0, in, 3, &r);
    assert_int_equal(r.chosen, 1);
    assert_true(r.probe);
    /* one in flight already: it is left out, not ranked */
    in[1].inflight = 1;
    vsr_select_latency_aware(&both, 0, in, 3, &r);
    assert_int_equal(r.chosen, 2);
    assert_false(r.probe);
    assert_false(r.scored[1]);
    assert_non_null(r.dropped[1]);
    /* minimum_candidates: two with data are fewer than three */
    vsr_select_latency_aware(&both, 3, in, 3, &r);
    assert_int_equal(r.chosen, 0);
    assert_non_null(r.warning);
}

static vsr_algo_multi_factor_conf_t mf(double wq, double wl, double wc, double wload)
{
    vsr_algo_multi_factor_conf_t c = {.w_quality = wq, .w_latency = wl, .w_cost = wc, .w_load = wload,
                                      .latency_percentile = 95, .on_no_candidates = (char *)"cheapest",
                                      .strategy = (char *)"weighted", .quality_index = (char *)"model_cards",
                                      .on_missing = (char *)"zero"};
    return c;
}

static void test_multi_factor(void **state)
{
    (void)state;
    /* fast/expensive/good, mid, slow/cheap/poor */
    vsr_select_input_t in[3] = {IN("fast"), IN("mid"), IN("slow")};
    double ttft[3] = {10, 110, 410}, cost[3] = {10, 1, 0.1}, q[3] = {0.9, 0.7, 0.5}, load[3] = {4, 0, 2};
    for (int i = 0; i < 3; i++) {
        set_lat(&in[i], ttft[i], -1);
        in[i].cost_per_1m = cost[i], in[i].has_cost = 1;
        in[i].quality = q[i], in[i].has_quality = 1;
        in[i].inflight = load[i];
    }
    vsr_select_result_t r;
    /* the reference's formula, equal weights:
     * fast: .25*1 + .25*1 + .25*0 + .25*0 = .5
     * mid:  .25*.5 + .25*(1-100/400) + .25*(1-.9/9.9) + .25*1
     * slow: .25*0 + .25*0 + .25*1 + .25*.5 = .375 */
    vsr_algo_multi_factor_conf_t c = mf(.25, .25, .25, .25);
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    double mid = .25 * .5 + .25 * .75 + .25 * (1 - .9 / 9.9) + .25;
    assert_float_equal(r.scores[0], .5, 1e-9);
    assert_float_equal(r.scores[1], mid, 1e-9);
    assert_float_equal(r.scores[2], .375, 1e-9);
    assert_int_equal(r.chosen, 1);
    /* cost only, with an SLO on TTFT: the cheapest that meets it */
    c = mf(0, 0, 1, 0);
    c.max_ttft_ms = 300;
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 1);
    assert_false(r.scored[2]);
    assert_non_null(r.dropped[2]);
    /* every one over the SLO: on_no_candidates */
    c.max_ttft_ms = 1;
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 2); /* cheapest */
    assert_non_null(r.warning);
    c.on_no_candidates = (char *)"first";
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 0);
    c.on_no_candidates = (char *)"fail";
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, -1);
    assert_non_null(r.error);
    /* max_inflight and max_cost_per_1m */
    c = mf(1, 0, 0, 0);
    c.max_inflight = 3;
    c.max_cost_per_1m = 5;
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 1); /* fast is over both */
    /* quality.min_score and on_missing */
    c = mf(0, 1, 0, 0);
    c.has_min_score = 1, c.min_score = 0.6;
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 0);
    assert_non_null(r.dropped[2]);
    in[0].has_quality = 0;
    c.on_missing = (char *)"exclude";
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 1);
    in[0].has_quality = 1;
    /* lexicographic: cost first within 0.05 of the best keeps slow (1.0) only → slow */
    c = mf(.25, .25, .25, .25);
    c.strategy = (char *)"lexicographic";
    vsr_algo_priority_conf_t pri[2] = {{(char *)"cost", 0.05}, {(char *)"quality", 0}};
    c.priorities = pri, c.n_priorities = 1;
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 2);
    /* a wider tolerance keeps mid (0.909) too; then quality, within 0, keeps mid alone */
    pri[0].tolerance = 0.5;
    c.n_priorities = 2;
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_int_equal(r.chosen, 1);
    assert_non_null(r.dropped[0]);
    assert_non_null(r.dropped[2]);
    /* quality.min_coverage: one score in three is too few; quality drops out */
    c = mf(1, 0, 0, 0);
    c.min_coverage = 0.5;
    in[1].has_quality = in[2].has_quality = 0;
    vsr_select_multi_factor(&c, 0, in, 3, &r);
    assert_float_equal(r.scores[0], 0, 1e-9); /* no factor counted */
    assert_int_equal(r.chosen, 0);
}

static void test_router_dc(void **state)
{
    (void)state;
    vsr_algo_router_dc_conf_t c = {.temperature = 0.07, .min_similarity = 0.3};
    vsr_select_result_t r;
    /* sigmoid(cos / 0.07): a 0.806679, b 0.999210; c without an embedding
     * counts min_similarity; the reported scores are their softmax at 0.07 */
    double cos[3] = {0.1, 0.5, 0};
    unsigned char has[3] = {1, 1, 0};
    vsr_select_router_dc(&c, 0, cos, has, 3, &r);
    assert_int_equal(r.chosen, 1);
    assert_null(r.warning);
    assert_true(r.scored[0] && r.scored[1] && r.scored[2]);
    assert_float_equal(r.scores[0], 0.060058646, 1e-6);
    assert_float_equal(r.scores[1], 0.939898199, 1e-6);
    assert_float_equal(r.scores[2], 4.31555e-05, 1e-8);
    assert_float_equal(r.score, r.scores[1], 1e-12);
    assert_non_null(r.dropped[2]);
    /* minimum_candidates above the embedded count: the first, 1/n each */
    vsr_select_router_dc(&c, 3, cos, has, 3, &r);
    assert_int_equal(r.chosen, 0);
    assert_non_null(r.warning);
    assert_float_equal(r.scores[1], 1.0 / 3, 1e-12);
    /* every similarity below min_similarity (opposed directions): the first */
    double neg[2] = {-0.5, -0.6};
    unsigned char both[2] = {1, 1};
    vsr_select_router_dc(&c, 0, neg, both, 2, &r);
    assert_int_equal(r.chosen, 0);
    assert_non_null(r.warning);
    assert_float_equal(r.scores[0], 0.5, 1e-12);
    /* no embedding at all: the first */
    unsigned char none[3] = {0, 0, 0};
    vsr_select_router_dc(&c, 0, cos, none, 3, &r);
    assert_int_equal(r.chosen, 0);
    assert_non_null(r.warning);
    /* the best is the highest raw score, later candidates included */
    double later[3] = {0.2, 0.1, 0.3};
    unsigned char all[3] = {1, 1, 1};
    vsr_select_router_dc(&c, 0, later, all, 3, &r);
    assert_int_equal(r.chosen, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latency_aware),
        cmocka_unit_test(test_multi_factor),
        cmocka_unit_test(test_router_dc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
