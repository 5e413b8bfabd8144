/* test_embedding_signal.c — the embeddings family on its own: the task it
 * asks for (the routing text and, until they are stored, its candidates),
 * what it makes of the runtime's embed result (cosine, prototype scoring for
 * max, mean, any, threshold, soft matching, negative candidates), the
 * candidates' vectors stored once and reused, and results it must refuse
 * (wrong count, wrong length, another model). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

static char *cands[] = {(char *)"alpha", (char *)"beta"};

static vsr_signals_t *compile_conf(vsr_sig_embedding_conf_t *ec)
{
    static vsr_sig_embedding_conf_t e;
    static vsr_recipe_conf_t r;
    e = *ec;
    memset(&r, 0, sizeof(r));
    e.name = (char *)"e";
    r.name = (char *)"default";
    r.signals.embeddings = &e;
    r.signals.n_embeddings = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    assert_non_null(s);
    vsr_buf_free(&err);
    return s;
}

static vsr_signals_t *compile(vsr_emb_aggregation_t agg, double threshold)
{
    vsr_sig_embedding_conf_t e;
    memset(&e, 0, sizeof(e));
    e.threshold = threshold;
    e.candidates.items = cands;
    e.candidates.n = 2;
    e.aggregation = agg;
    return compile_conf(&e);
}

/* vectors of dim 2: text (1,0); candidates (0.8,0.6) and (0,1): cosines 0.8
 * and 0; the candidates' cosine is 0.6, so they are two prototypes and max
 * scores 0.75 * 0.8 + 0.25 * (0.8 + 0) / 2 = 0.7 */
#define FULL "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[0.8,0.6],[0,1]]}"
#define TEXT_ONLY "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[2,0]]}"

static vsr_signal_input_t input(vsr_pool_t *pool, const char *text)
{
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr(text);
    in.pool = pool;
    return in;
}

static void test_task_and_store(void **state)
{
    (void)state;
    vsr_signals_t *s = compile(VSR_EMB_AGG_MAX, 0.65);
    int i = vsr_signals_find(s, "embedding", "e");
    assert_true(i >= 0);
    assert_string_equal(vsr_signals_family(s, i), "embeddings");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, "say \"hi\"");
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    assert_string_equal(t.type, "embed");
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"say \\\"hi\\\"\",\"alpha\",\"beta\"]}"));
    /* before anything is stored, a text-only answer cannot be scored */
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(TEXT_ONLY), &r), VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(FULL), &r), VSR_OK);
    assert_true(r.matched);
    assert_true(r.value > 0.69 && r.value < 0.71);
    /* stored: the next task asks for the text alone, and its answer is scored against the stored vectors */
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"say \\\"hi\\\"\"]}"));
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(TEXT_ONLY), &r), VSR_OK);
    assert_true(r.matched);
    /* another model, another length, a wrong count: unknown */
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"model\":\"x\",\"dim\":2,\"embeddings\":[[1,0]]}"), &r),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":3,\"embeddings\":[[1,0,0]]}"), &r),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[1,0]]}"), &r),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":[[0,0]]}"), &r),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("not json"), &r), VSR_ERR_INVALID);
    /* no routing text: no task, no match */
    vsr_signal_input_t empty = input(&pool, "");
    assert_int_equal(vsr_signals_task(s, i, &empty, &t), 0);
    assert_false(vsr_signals_eval(s, i, &empty).matched);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_aggregation(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, "x");
    vsr_signal_result_t r;
    struct {
        vsr_emb_aggregation_t agg;
        double threshold;
        int matched;
        double score;
    } rows[] = {
        {VSR_EMB_AGG_MAX, 0.69, 1, 0.7}, {VSR_EMB_AGG_MAX, 0.71, 0, 0.7}, {VSR_EMB_AGG_MEAN, 0.4, 1, 0.4},
        {VSR_EMB_AGG_MEAN, 0.5, 0, 0.4}, {VSR_EMB_AGG_ANY, 0.75, 1, 0.8}, {VSR_EMB_AGG_ANY, 0.9, 0, 0.8},
    };
    for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
        vsr_signals_t *s = compile(rows[k].agg, rows[k].threshold);
        int i = vsr_signals_find(s, "embedding", "e");
        assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(FULL), &r), VSR_OK);
        assert_int_equal(r.matched, rows[k].matched);
        assert_true(r.value > rows[k].score - 1e-6 && r.value < rows[k].score + 1e-6);
        assert_true(rows[k].matched ? r.confidence > 0 : r.confidence == 0);
        vsr_signals_free(s);
    }
    vsr_pool_free(&pool);
}

/* consume() of one answer on a fresh signal compiled from e */
static vsr_signal_result_t run(vsr_sig_embedding_conf_t *e, const char *answer)
{
    vsr_signals_t *s = compile_conf(e);
    int i = vsr_signals_find(s, "embedding", "e");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, "x");
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(answer), &r), VSR_OK);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
    return r;
}

#define NEAR(x, y) ((x) > (y) - 1e-4 && (x) < (y) + 1e-4)

static void test_prototypes(void **state)
{
    (void)state;
    static char *three[] = {(char *)"a", (char *)"b", (char *)"c"};
    vsr_sig_embedding_conf_t e;
    memset(&e, 0, sizeof(e));
    e.threshold = 0.5;
    e.candidates.items = three;
    e.candidates.n = 3;
    /* a and b (cosine 0.99) are one prototype, normalised (a + b) = (0.9975, 0.0707); c is another:
     * 0.75 * 0.9975 + 0.25 * (0.9975 + 0) / 2 = 0.8728 (without clustering it would be 0.9988) */
    vsr_signal_result_t r = run(&e, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[1,0],[0.99,0.141],[0,1]]}");
    assert_true(r.matched);
    assert_true(NEAR(r.value, 0.8728));
    /* any: the best candidate alone */
    e.aggregation = VSR_EMB_AGG_ANY;
    r = run(&e, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[1,0],[0.99,0.141],[0,1]]}");
    assert_true(NEAR(r.value, 1.0));
    /* nine orthogonal candidates: eight prototypes at most, the ninth joins the nearest (the first, all being
     * at cosine 0): a text on the ninth scores 0.75 * 0.7071 + 0.25 * 0.7071 / 2 = 0.6187 */
    static char *nine[] = {(char *)"1", (char *)"2", (char *)"3", (char *)"4", (char *)"5",
                           (char *)"6", (char *)"7", (char *)"8", (char *)"9"};
    e.aggregation = VSR_EMB_AGG_MAX;
    e.candidates.items = nine;
    e.candidates.n = 9;
    char ans[1024];
    size_t len = (size_t)snprintf(ans, sizeof(ans), "{\"model\":\"m\",\"dim\":9,\"embeddings\":[[0,0,0,0,0,0,0,0,1]");
    for (int k = 0; k < 9; k++) {
        len += (size_t)snprintf(ans + len, sizeof(ans) - len, ",[");
        for (int t = 0; t < 9; t++)
            len += (size_t)snprintf(ans + len, sizeof(ans) - len, "%s%d", t ? "," : "", t == k);
        len += (size_t)snprintf(ans + len, sizeof(ans) - len, "]");
    }
    snprintf(ans + len, sizeof(ans) - len, "]}");
    r = run(&e, ans);
    assert_true(NEAR(r.value, 0.6187));
}

static void test_negatives_and_soft(void **state)
{
    (void)state;
    static char *neg[] = {(char *)"n"};
    vsr_sig_embedding_conf_t e;
    memset(&e, 0, sizeof(e));
    e.threshold = 0.65;
    e.candidates.items = cands;
    e.candidates.n = 2;
    e.negative_candidates.items = neg;
    e.negative_candidates.n = 1;
    /* the task carries the negatives after the candidates */
    vsr_signals_t *s = compile_conf(&e);
    int i = vsr_signals_find(s, "embedding", "e");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, "q");
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"q\",\"alpha\",\"beta\",\"n\"]}"));
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(FULL), &r), VSR_ERR_INVALID); /* 3 of 4 */
    vsr_pool_free(&pool);
    vsr_signals_free(s);
    /* best candidate 0.8, negative 0.6: matches (score 0.7) */
    r = run(&e, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[0.8,0.6],[0,1],[0.6,0.8]]}");
    assert_true(r.matched);
    assert_true(NEAR(r.value, 0.7));
    /* negative 0.9 >= 0.8: no match, the score is still reported */
    r = run(&e, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[0.8,0.6],[0,1],[0.9,0.43589]]}");
    assert_false(r.matched);
    assert_true(r.confidence == 0);
    assert_true(NEAR(r.value, 0.7));
    /* a tie goes to the negative */
    r = run(&e, "{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[0.8,0.6],[0,1],[0.8,0.6]]}");
    assert_false(r.matched);

    /* soft matching: score 0.7 under threshold 0.9 */
    memset(&e, 0, sizeof(e));
    e.threshold = 0.9;
    e.candidates.items = cands;
    e.candidates.n = 2;
    e.min_score_threshold = 0.6;
    assert_false(run(&e, FULL).matched); /* off */
    e.soft_matching = 1;
    r = run(&e, FULL);
    assert_true(r.matched);
    assert_true(NEAR(r.confidence, 0.7));
    e.min_score_threshold = 0.75;
    assert_false(run(&e, FULL).matched);
    /* a floor above the threshold is the threshold */
    e.threshold = 0.69;
    e.min_score_threshold = 0.95;
    assert_true(run(&e, FULL).matched);
}

static void test_long_text_is_cut(void **state)
{
    (void)state;
    vsr_signals_t *s = compile(VSR_EMB_AGG_MAX, 0.5);
    int i = vsr_signals_find(s, "embedding", "e");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    size_t n = 10000;
    char *text = malloc(n + 1);
    for (size_t k = 0; k < n; k++)
        text[k] = (char)('a' + k % 26);
    text[n] = '\0';
    text[5] = (char)0xff; /* an invalid byte goes as U+FFFD */
    vsr_signal_input_t in = input(&pool, text);
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    /* {"input":["<2048 runes + 2 markers>","alpha","beta"]} */
    assert_true(t.payload.len < 2048 + 3 + 10 + 40);
    assert_non_null(memmem(t.payload.p, t.payload.len, "\xef\xbf\xbd", 3));
    assert_non_null(memmem(t.payload.p, t.payload.len, " ... ", 5));
    free(text);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_and_store),
        cmocka_unit_test(test_aggregation),
        cmocka_unit_test(test_prototypes),
        cmocka_unit_test(test_negatives_and_soft),
        cmocka_unit_test(test_long_text_is_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
