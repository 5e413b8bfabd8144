/* test_preference_signal.c — the preferences family: its task embeds the
 * examples and then the description after the routing text, and its score
 * is the embeddings family's prototype scoring over them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

static char *examples[] = {(char *)"keep it short", (char *)"just the answer"};

static vsr_signals_t *compile(const char *description, size_t n_examples, double threshold, int ok)
{
    static vsr_sig_preference_conf_t p;
    static vsr_recipe_conf_t r;
    memset(&p, 0, sizeof(p));
    memset(&r, 0, sizeof(r));
    p.name = (char *)"terse";
    p.description = (char *)description;
    p.examples.items = examples;
    p.examples.n = n_examples;
    p.threshold = threshold;
    r.name = (char *)"default";
    r.signals.preferences = &p;
    r.signals.n_preferences = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    if (ok) {
        assert_non_null(s);
    } else {
        assert_null(s);
        assert_non_null(memmem(err.data, err.len, "examples or a description", 25));
    }
    vsr_buf_free(&err);
    return s;
}

static void test_task_and_score(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("brief answers", 2, 0.6, 1);
    int i = vsr_signals_find(s, "preference", "terse");
    assert_true(i >= 0);
    assert_string_equal(vsr_signals_family(s, i), "preferences");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("tl;dr please");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    assert_string_equal(t.type, "embed");
    assert_true(vsr_slice_eq_cstr(t.payload,
                                  "{\"input\":[\"tl;dr please\",\"keep it short\",\"just the answer\",\"brief answers\"]}"));
    /* text (1,0); examples (0.8,0.6), (0,1); description (0.8,0.6) joins the first example's prototype:
     * two prototypes, cosines 0.8 and 0: 0.75 * 0.8 + 0.25 * 0.4 = 0.7 */
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, i, &in,
                                         vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":"
                                                        "[[1,0],[0.8,0.6],[0,1],[0.8,0.6]]}"),
                                         &r),
                     VSR_OK);
    assert_true(r.matched);
    assert_true(r.value > 0.6999 && r.value < 0.7001);
    /* stored: the text alone; under a 0.6 threshold the text (0,-1) does not match */
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0,-1]]}"),
                                         &r),
                     VSR_OK);
    assert_false(r.matched);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_examples_or_description(void **state)
{
    (void)state;
    /* examples alone, a description alone: both compile; neither (or a blank description): refused */
    vsr_signals_free(compile(NULL, 2, 0.6, 1));
    vsr_signals_t *s = compile("brief answers", 0, 0.6, 1);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("q");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"q\",\"brief answers\"]}"));
    vsr_pool_free(&pool);
    vsr_signals_free(s);
    compile(NULL, 0, 0.6, 0);
    compile(" \n", 0, 0.6, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_and_score),
        cmocka_unit_test(test_examples_or_description),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
