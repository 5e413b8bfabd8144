/* test_kb_signal.c — the kb family: the target entries of a kb are the
 * candidates; with match best the other entries are negatives (the nearest
 * entry decides), with match any a target entry within threshold matches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

static vsr_kb_entry_conf_t entries[] = {
    {(char *)"alpha", (char *)"L", (char *)"G1"},
    {(char *)"beta", (char *)"M", (char *)"G1"},
    {(char *)"gamma", (char *)"L", (char *)"G2"},
};
static vsr_kb_conf_t kbs[] = {{(char *)"bank", entries, 3}};

static vsr_signals_t *compile(const char *kb, vsr_kb_target_kind_t kind, const char *value, vsr_kb_match_t match,
                              int has_threshold, double threshold, const char *want_err)
{
    static vsr_sig_kb_conf_t k;
    static vsr_recipe_conf_t r;
    memset(&k, 0, sizeof(k));
    memset(&r, 0, sizeof(r));
    k.name = (char *)"inkb";
    k.kb = (char *)kb;
    k.target.kind = kind;
    k.target.value = (char *)value;
    k.match = match;
    k.has_threshold = has_threshold;
    k.threshold = threshold;
    r.name = (char *)"default";
    r.signals.kb = &k;
    r.signals.n_kb = 1;
    r.signals.modules.kbs = kbs;
    r.signals.modules.n_kbs = 1;
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

static void consume(vsr_signals_t *s, vsr_signal_input_t *in, const char *result, int matched, double value)
{
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, 0, in, vsr_slice_cstr(result), &r), VSR_OK);
    assert_int_equal(r.matched, matched);
    assert_true(r.value > value - 1e-4 && r.value < value + 1e-4);
}

static void test_best(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("bank", VSR_KB_TARGET_LABEL, "L", VSR_KB_MATCH_BEST, 0, 0, NULL);
    assert_int_equal(vsr_signals_find(s, "kb", "inkb"), 0);
    assert_string_equal(vsr_signals_family(s, 0), "kb");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("q");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    /* the label-L entries, then the others */
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"q\",\"alpha\",\"gamma\",\"beta\"]}"));
    /* alpha (1,0), gamma (0,1), beta (0.6,0.8): the text (1,0) is nearest alpha */
    consume(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[1,0],[0,1],[0.6,0.8]]}", 1, 1);
    /* (0.6,0.8) is nearest beta (label M): no match, however near gamma (0.8) */
    consume(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0.6,0.8]]}", 0, 0.8);
    /* (0,1) is nearest gamma */
    consume(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0,1]]}", 1, 1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
    /* with a threshold, the nearest target entry must be within it too */
    s = compile("bank", VSR_KB_TARGET_LABEL, "L", VSR_KB_MATCH_BEST, 1, 0.9, NULL);
    vsr_pool_init(&pool);
    in.pool = &pool;
    consume(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0.8,-0.6],[1,0],[0,1],[0.6,0.8]]}", 0, 0.8);
    consume(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0]]}", 1, 1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_any_and_errors(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("bank", VSR_KB_TARGET_GROUP, "G2", VSR_KB_MATCH_ANY, 1, 0.7, NULL);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("q");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"q\",\"gamma\"]}"));
    /* gamma (0,1): 0.8 >= 0.7 matches, whatever the other entries */
    consume(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0.6,0.8],[0,1]]}", 1, 0.8);
    consume(s, &in, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0]]}", 0, 0);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
    compile("nowhere", VSR_KB_TARGET_GROUP, "G2", VSR_KB_MATCH_ANY, 0, 0, "kb \"nowhere\" is not declared");
    compile("bank", VSR_KB_TARGET_GROUP, "G3", VSR_KB_MATCH_BEST, 0, 0, "no entry of kb \"bank\" has group \"G3\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best),
        cmocka_unit_test(test_any_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
