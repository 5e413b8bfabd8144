/* test_static_select.c — the static selector over domains[].model_scores
 * (vsr_static_select): which domain's scores decide, the 1.0 default and
 * use_first_candidate, ties, LoRA names, other algorithms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "decision/decision.h"

static const char *DOC =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 18891}]\n"
    "providers:\n"
    "  models:\n"
    "    - {name: a, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: b, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: c, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "routing:\n"
    "  modelCards: [{name: c, loras: [{name: c-sql}]}]\n"
    "  signals:\n"
    "    keywords: [{name: k, keywords: [x]}]\n"
    "    domains:\n"
    "      - {name: math, model_scores: [{model: a, score: 0.2}, {model: b, score: 0.8}, {model: c-sql, score: 0.9}]}\n"
    "      - {name: law, model_scores: [{model: a, score: 0.5}, {model: b, score: 0.5}]}\n"
    "      - {name: neg, model_scores: [{model: a, score: -2}, {model: b, score: -1}]}\n"
    "      - {name: high, model_scores: [{model: a, score: 1.5}]}\n"
    "      - {name: plain}\n"
    "  decisions:\n"
    "    - {name: d1, rules: {operator: OR, conditions: [{type: keyword, name: k}, {type: domain, name: law},"
    " {type: domain, name: math}]}, modelRefs: [{model: a}, {model: b}]}\n"
    "    - {name: law, rules: {type: keyword, name: k}, modelRefs: [{model: b}, {model: a}]}\n"
    "    - {name: d3, rules: {operator: AND, conditions: [{type: domain, name: plain},"
    " {operator: NOT, conditions: [{type: domain, name: math}]}]}, modelRefs: [{model: a}, {model: b}]}\n"
    "    - {name: d4, rules: {type: domain, name: math}, modelRefs: [{model: a}, {model: c, lora_name: c-sql}]}\n"
    "    - {name: d5, rules: {type: domain, name: neg}, modelRefs: [{model: a}, {model: b}]}\n"
    "    - {name: d6, rules: {type: domain, name: high}, modelRefs: [{model: b}, {model: a}]}\n"
    "    - {name: d7, rules: {type: domain, name: math}, modelRefs: [{model: a}, {model: b}],"
    " algorithm: {type: confidence}}\n";

static vsr_config_t *cfg;
static const char *matched[8]; /* the domain signals that match */

static int leaf(void *ud, const vsr_rule_conf_t *l, double *confidence)
{
    (void)ud;
    *confidence = 1.0;
    for (size_t i = 0; i < 8 && matched[i]; i++)
        if (strcmp(l->name, matched[i]) == 0)
            return 1;
    return 0;
}

static const vsr_decision_conf_t *decision(const char *name)
{
    const vsr_recipe_conf_t *r = &cfg->recipes[0];
    for (size_t i = 0; i < r->n_decisions; i++)
        if (strcmp(r->decisions[i].name, name) == 0)
            return &r->decisions[i];
    fail();
    return NULL;
}

static size_t pick(const char *dec, const char *m0, const char *m1, vsr_static_choice_t *ch)
{
    memset(matched, 0, sizeof(matched));
    matched[0] = m0;
    matched[1] = m0 ? m1 : NULL;
    return vsr_static_select(&cfg->recipes[0], decision(dec), leaf, NULL, ch);
}

static void test_static_select(void **state)
{
    (void)state;
    vsr_static_choice_t ch;
    /* the first matched domain condition in rule order: law (a tie, 0.5 and 0.5: the first), then math */
    assert_int_equal(pick("d1", "law", "math", &ch), 0);
    assert_string_equal(ch.domain, "law");
    assert_true(ch.score == 0.5);
    assert_int_equal(pick("d1", "math", NULL, &ch), 1); /* math: b 0.8 > a 0.2 */
    assert_string_equal(ch.domain, "math");
    /* no domain matched: the decision's name names a domain (law) */
    assert_int_equal(pick("d1", "k", NULL, &ch), 0);
    assert_false(ch.scored);
    assert_int_equal(pick("law", "k", NULL, &ch), 0); /* law's scores: b 0.5 first */
    assert_string_equal(ch.domain, "law");
    /* a domain under NOT is not the matched one; plain has no scores: the first modelRef */
    assert_int_equal(pick("d3", "plain", "math", &ch), 0);
    assert_false(ch.scored);
    /* a LoRA candidate is scored by its LoRA's name */
    assert_int_equal(pick("d4", "math", NULL, &ch), 1);
    assert_true(ch.score == 0.9);
    /* negative scores: the highest still wins */
    assert_int_equal(pick("d5", "neg", NULL, &ch), 1);
    /* above 1.0 beats the unlisted candidate's 1.0 */
    assert_int_equal(pick("d6", "high", NULL, &ch), 1);
    assert_true(ch.score == 1.5);
    /* another algorithm: the scores are not read */
    assert_int_equal(pick("d7", "math", NULL, &ch), 0);
    assert_false(ch.scored);
}

static int setup(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    int rc = vsr_config_load_string("t.yaml", DOC, strlen(DOC), &cfg, &err);
    if (rc != VSR_OK)
        fprintf(stderr, "%.*s", (int)err.len, err.data);
    vsr_buf_free(&err);
    return rc == VSR_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    vsr_config_free(cfg);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_static_select)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
