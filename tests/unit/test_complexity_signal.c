/* test_complexity_signal.c — the complexity family: one signal compiles to
 * its three levels, their task embeds the hard then the easy candidates
 * after the routing text until they are stored, and the margin between the
 * two banks' prototype scores picks exactly one level. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

static char *hard[] = {(char *)"prove the theorem"};
static char *easy[] = {(char *)"say hi"};

static vsr_signals_t *compile(double threshold, int has_hard, double hard_above, int has_easy, double easy_below,
                              const char *want_err)
{
    static vsr_sig_complexity_conf_t x;
    static vsr_recipe_conf_t r;
    memset(&x, 0, sizeof(x));
    memset(&r, 0, sizeof(r));
    x.name = (char *)"cx";
    x.threshold = threshold;
    x.has_hard_above = has_hard;
    x.hard_above = hard_above;
    x.has_easy_below = has_easy;
    x.easy_below = easy_below;
    x.hard.candidates.items = hard;
    x.hard.candidates.n = 1;
    x.easy.candidates.items = easy;
    x.easy.candidates.n = 1;
    r.name = (char *)"default";
    r.signals.complexity = &x;
    r.signals.n_complexity = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    if (want_err == NULL) {
        assert_non_null(s);
    } else {
        assert_null(s);
        assert_non_null(memmem(err.data, err.len, want_err, strlen(want_err)));
    }
    vsr_buf_free(&err);
    return s;
}

/* consumes `result` for every level, asserts that only `level` matched with margin ~ want */
static void expect_level(vsr_signals_t *s, vsr_signal_input_t *in, const char *result, const char *level,
                         double want)
{
    static const char *const levels[] = {"cx:easy", "cx:medium", "cx:hard"};
    for (int l = 0; l < 3; l++) {
        int i = vsr_signals_find(s, "complexity", levels[l]);
        assert_true(i >= 0);
        vsr_signal_result_t r;
        assert_int_equal(vsr_signals_consume(s, i, in, vsr_slice_cstr(result), &r), VSR_OK);
        assert_int_equal(r.matched, strcmp(levels[l] + 3, level) == 0);
        assert_true(r.value > want - 1e-4 && r.value < want + 1e-4);
        assert_non_null(memmem(r.evidence.p, r.evidence.len, level, strlen(level)));
    }
}

static void test_levels(void **state)
{
    (void)state;
    vsr_signals_t *s = compile(0.1, 0, 0, 0, 0, NULL);
    assert_int_equal(vsr_signals_count(s), 3);
    assert_int_equal(vsr_signals_find(s, "complexity", "cx"), -1);
    int h = vsr_signals_find(s, "complexity", "cx:hard");
    assert_true(h >= 0);
    assert_string_equal(vsr_signals_family(s, h), "complexity");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("q");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, h, &in, &t), 1);
    assert_string_equal(t.type, "embed");
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"q\",\"prove the theorem\",\"say hi\"]}"));
    /* a result without the candidates while none are stored, or with the wrong count: unusable */
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, h, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0]]}"),
                                         &r),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, h, &in,
                                         vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[1,0]]}"), &r),
                     VSR_ERR_INVALID);
    /* text (1,0), hard (1,0), easy (0,1): margin 1 - 0 */
    expect_level(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[1,0],[0,1]]}", "hard", 1);
    /* stored now: the text alone */
    assert_int_equal(vsr_signals_task(s, h, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"q\"]}"));
    expect_level(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0,1]]}", "easy", -1);
    expect_level(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,1]]}", "medium", 0);
    /* 0.6 - 0.8 = -0.2 < -0.1 */
    expect_level(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0.6,0.8]]}", "easy", -0.2);
    /* another model than the stored vectors': unusable */
    assert_int_equal(vsr_signals_consume(s, h, &in, vsr_slice_cstr("{\"model\":\"o\",\"dim\":2,\"embeddings\":[[1,0]]}"),
                                         &r),
                     VSR_ERR_INVALID);
    /* no routing text: no task, no level */
    in.text = vsr_slice_cstr("");
    assert_int_equal(vsr_signals_task(s, h, &in, &t), 0);
    assert_false(vsr_signals_eval(s, h, &in).matched);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_bounds(void **state)
{
    (void)state;
    /* hard_above 0.5 and easy_below -0.5 override threshold 0.1: 0.6 - 0.8 is medium */
    vsr_signals_t *s = compile(0.1, 1, 0.5, 1, -0.5, NULL);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("q");
    in.pool = &pool;
    expect_level(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0.6,0.8],[1,0],[0,1]]}", "medium", -0.2);
    expect_level(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0,1]]}", "easy", -1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
    compile(0.1, 1, -0.2, 0, 0, "easy_below (-0.1) is greater than hard_above (-0.2)");
}

/* every level a rule names carries the candidates until they are stored: they count three times per recipe */
static void test_recipe_budget(void **state)
{
    (void)state;
    static char *texts[256];
    for (size_t i = 0; i < 256; i++)
        texts[i] = (char *)"t";
    vsr_sig_complexity_conf_t x[2];
    memset(x, 0, sizeof(x));
    for (int k = 0; k < 2; k++) {
        x[k].name = (char *)(k ? "b" : "a");
        x[k].threshold = 0.1;
        x[k].hard.candidates.items = texts;
        x[k].hard.candidates.n = 256;
        x[k].easy.candidates.items = texts;
        x[k].easy.candidates.n = 256;
    }
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.name = (char *)"default";
    r.signals.complexity = x;
    r.signals.n_complexity = 1; /* 3 x 513 */
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    assert_non_null(s);
    assert_int_equal(vsr_signals_count(s), 3);
    vsr_signals_free(s);
    r.signals.n_complexity = 2; /* 6 x 513 */
    assert_null(vsr_signals_compile(&r, &err));
    assert_non_null(memmem(err.data, err.len, "at most 2048 per recipe", 23));
    vsr_buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_recipe_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
