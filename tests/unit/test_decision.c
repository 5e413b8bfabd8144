/* test_decision.c — rule confidence arithmetic and decision selection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "decision/decision.h"

/* leaves are named "<matched 0|1>:<confidence>" */
static int leaf(void *ud, const vsr_rule_conf_t *l, double *conf)
{
    int *calls = ud;
    if (calls)
        (*calls)++;
    *conf = atof(l->name + 2);
    return l->name[0] == '1';
}

#define LEAF(n) {.kind = VSR_RULE_LEAF, .type = (char *)"keyword", .name = (char *)(n)}

static void test_rule_arithmetic(void **state)
{
    (void)state;
    double c;
    vsr_rule_conf_t l1 = LEAF("1:0.8"), l0 = LEAF("0:0"), l2 = LEAF("1:0.4");
    assert_int_equal(vsr_rule_eval(&l1, leaf, NULL, &c), 1);
    assert_true(c == 0.8);

    vsr_rule_conf_t and_kids[] = {LEAF("1:0.8"), LEAF("1:0.4")};
    vsr_rule_conf_t and = {.kind = VSR_RULE_AND, .children = and_kids, .n_children = 2};
    assert_int_equal(vsr_rule_eval(&and, leaf, NULL, &c), 1);
    assert_true(c > 0.5999 && c < 0.6001); /* mean */

    vsr_rule_conf_t and_fail_kids[] = {LEAF("0:0"), LEAF("1:1")};
    vsr_rule_conf_t and_fail = {.kind = VSR_RULE_AND, .children = and_fail_kids, .n_children = 2};
    int calls = 0;
    assert_int_equal(vsr_rule_eval(&and_fail, leaf, &calls, &c), 0);
    assert_int_equal(calls, 1); /* short-circuits */

    vsr_rule_conf_t empty_and = {.kind = VSR_RULE_AND};
    assert_int_equal(vsr_rule_eval(&empty_and, leaf, NULL, &c), 1);
    assert_true(c == 0);

    vsr_rule_conf_t or_kids[] = {LEAF("1:0.4"), LEAF("0:0"), LEAF("1:0.9")};
    vsr_rule_conf_t or = {.kind = VSR_RULE_OR, .children = or_kids, .n_children = 3};
    assert_int_equal(vsr_rule_eval(&or, leaf, NULL, &c), 1);
    assert_true(c == 0.9); /* best child */
    vsr_rule_conf_t or_none_kids[] = {LEAF("0:0")};
    vsr_rule_conf_t or_none = {.kind = VSR_RULE_OR, .children = or_none_kids, .n_children = 1};
    assert_int_equal(vsr_rule_eval(&or_none, leaf, NULL, &c), 0);

    vsr_rule_conf_t not_match = {.kind = VSR_RULE_NOT, .children = &l0, .n_children = 1};
    assert_int_equal(vsr_rule_eval(&not_match, leaf, NULL, &c), 1);
    assert_true(c == 1.0);
    vsr_rule_conf_t not_nomatch = {.kind = VSR_RULE_NOT, .children = &l2, .n_children = 1};
    assert_int_equal(vsr_rule_eval(&not_nomatch, leaf, NULL, &c), 0);

    /* nested: AND(leaf 1.0, NOT(leaf no)) = mean(1.0, 1.0) */
    vsr_rule_conf_t nested_kids[] = {LEAF("1:1.0"), {.kind = VSR_RULE_NOT, .children = &l0, .n_children = 1}};
    vsr_rule_conf_t nested = {.kind = VSR_RULE_AND, .children = nested_kids, .n_children = 2};
    assert_int_equal(vsr_rule_eval(&nested, leaf, NULL, &c), 1);
    assert_true(c == 1.0);

    assert_int_equal(vsr_rule_eval(NULL, leaf, NULL, &c), 1); /* no rules: always, confidence 0 */
    assert_true(c == 0);
}

static vsr_decision_conf_t dec(const char *name, int64_t prio, int64_t tier, vsr_rule_conf_t *rule)
{
    vsr_decision_conf_t d;
    memset(&d, 0, sizeof(d));
    d.name = (char *)name;
    d.priority = prio;
    d.tier = tier;
    d.rules = rule;
    return d;
}

static void test_selection(void **state)
{
    (void)state;
    vsr_rule_conf_t hi = LEAF("1:0.9"), lo = LEAF("1:0.5"), no = LEAF("0:0");
    vsr_decision_conf_t ds[4];
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.decisions = ds;
    r.n_decisions = 4;
    vsr_decision_result_t res[4];

    /* priority strategy: higher priority wins over higher confidence */
    ds[0] = dec("a", 10, 0, &hi);
    ds[1] = dec("b", 20, 0, &lo);
    ds[2] = dec("c", 99, 0, &no);
    ds[3] = dec("d", 20, 0, &lo);
    assert_int_equal(vsr_decision_select(&r, leaf, NULL, res), 1); /* b: prio 20, tie with d broken by name */
    assert_int_equal(res[2].matched, 0);

    /* confidence strategy */
    r.strategy_confidence = 1;
    assert_int_equal(vsr_decision_select(&r, leaf, NULL, res), 0);

    /* tiers: lower tier first; an untiered decision (tier 0) sorts before tier 1 */
    r.strategy_confidence = 0;
    ds[0] = dec("a", 10, 2, &hi);
    ds[1] = dec("b", 20, 1, &lo);
    ds[2] = dec("c", 99, 0, &no);
    ds[3] = dec("d", 1, 0, &lo);
    assert_int_equal(vsr_decision_select(&r, leaf, NULL, res), 3);
    ds[3] = dec("d", 1, 3, &lo);
    assert_int_equal(vsr_decision_select(&r, leaf, NULL, res), 1);

    /* nothing matches */
    for (int i = 0; i < 4; i++)
        ds[i] = dec("x", 1, 0, &no);
    assert_int_equal(vsr_decision_select(&r, leaf, NULL, res), -1);

    /* omitted rules match with confidence 0 and lose to a real match of equal priority */
    ds[0] = dec("always", 5, 0, NULL);
    ds[1] = dec("zmatch", 5, 0, &lo);
    assert_int_equal(vsr_decision_select(&r, leaf, NULL, res), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_arithmetic),
        cmocka_unit_test(test_selection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
