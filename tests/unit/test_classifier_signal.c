/* test_classifier_signal.c — the classifiers family, type local: the first
 * task embeds the configured bank after the routing text, later ones the
 * text alone; every label competes, the nearest wins and is the result's
 * label with its score as value; the signal matches when that score >=
 * threshold; a condition's label and predicate decide over the winning
 * label and its score (vsr_rule_leaf_result); type llm is unknown on every
 * request (its task answer is -1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decision/decision.h"
#include "signals/signals.h"

static char *labels[] = {"billing", "account", "shipping"};
/* two examples a label, on the label's axis (billing: x, account: y, shipping: z) */
static vsr_cls_example_conf_t examples[] = {
    {"I was charged twice", 0},      {"account locked", 1},   {"the invoice is wrong", 0},
    {"reset my password", 1},        {"where is my parcel", 2}, {"the package is late", 2},
};
static const char *bank_vecs = ",[1,0,0],[0,1,0],[0.9,0.1,0],[0,1,0],[0,0,1],[0,0.1,0.9]";

static vsr_sig_classifier_conf_t conf;
static vsr_recipe_conf_t recipe;

static vsr_signals_t *compile(vsr_cls_type_t type, double threshold)
{
    memset(&conf, 0, sizeof(conf));
    memset(&recipe, 0, sizeof(recipe));
    conf.name = (char *)"support";
    conf.type = type;
    conf.threshold = threshold;
    conf.labels = labels;
    conf.n_labels = 3;
    if (type == VSR_CLS_LOCAL) {
        conf.examples = examples;
        conf.n_examples = VSR_ARRAY_LEN(examples);
    }
    recipe.name = (char *)"default";
    recipe.signals.classifiers = &conf;
    recipe.signals.n_classifiers = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_signals_t *s = vsr_signals_compile(&recipe, &err);
    if (s == NULL)
        fprintf(stderr, "%.*s", (int)err.len, err.data);
    vsr_buf_free(&err);
    return s;
}

static vsr_signal_result_t consume(vsr_signals_t *s, vsr_signal_input_t *in, const char *vec, int with_bank)
{
    char json[512];
    snprintf(json, sizeof json, "{\"model\":\"m\",\"dim\":3,\"embeddings\":[%s%s]}", vec, with_bank ? bank_vecs : "");
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, 0, in, vsr_slice_cstr(json), &r), VSR_OK);
    return r;
}

static void test_local_labels(void **state)
{
    (void)state;
    vsr_signals_t *s = compile(VSR_CLS_LOCAL, 0.5);
    assert_non_null(s);
    assert_int_equal(vsr_signals_find(s, "classifier", "support"), 0);
    assert_string_equal(vsr_signals_family(s, 0), "classifiers");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("my card was billed two times");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    assert_string_equal(t.type, "embed");
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"my card was billed two times\",\"I was charged twice\","
                                             "\"account locked\",\"the invoice is wrong\",\"reset my password\","
                                             "\"where is my parcel\",\"the package is late\"]}"));
    /* on the billing axis: billing wins with a score near 1 */
    vsr_signal_result_t r = consume(s, &in, "[1,0,0]", 1);
    assert_true(r.matched);
    assert_non_null(r.label);
    assert_string_equal(r.label, "billing");
    assert_true(r.value > 0.99 && r.confidence == r.value);
    assert_non_null(memmem(r.evidence.p, r.evidence.len, "\"label\":\"billing\"", 17));
    assert_non_null(memmem(r.evidence.p, r.evidence.len, "\"nearest\":[{\"text\":\"I was charged twice\"", 39));
    assert_non_null(memmem(r.evidence.p, r.evidence.len, "\"shipping\":", 11));
    /* stored: the next task is the text alone */
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"my card was billed two times\"]}"));
    /* nearest shipping */
    r = consume(s, &in, "[0.1,0,1]", 0);
    assert_true(r.matched);
    assert_string_equal(r.label, "shipping");
    /* between account and shipping, under the threshold: the label still wins, no match */
    r = consume(s, &in, "[-1,0.3,0.3]", 0);
    assert_false(r.matched);
    assert_true(r.confidence == 0);
    assert_non_null(r.label);
    assert_true(r.value < 0.5);
    /* another model than the bank's: unknown */
    vsr_signal_result_t u;
    assert_int_not_equal(vsr_signals_consume(s, 0, &in,
                                             vsr_slice_cstr("{\"model\":\"x\",\"dim\":3,\"embeddings\":[[1,0,0]]}"), &u),
                         VSR_OK);
    /* no routing text: nothing to classify */
    vsr_signal_input_t empty = in;
    empty.text = vsr_slice_cstr("");
    assert_int_equal(vsr_signals_task(s, 0, &empty, &t), 0);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_condition_label_and_predicate(void **state)
{
    (void)state;
    vsr_signal_result_t r = {1, 0.8, 0.8, VSR_SLICE_NULL, "billing"};
    vsr_rule_conf_t leaf;
    memset(&leaf, 0, sizeof(leaf));
    leaf.kind = VSR_RULE_LEAF;
    double c;
    leaf.label = (char *)"billing";
    assert_true(vsr_rule_leaf_result(&leaf, &r, &c));
    assert_true(c == 0.8);
    leaf.label = (char *)"account";
    assert_false(vsr_rule_leaf_result(&leaf, &r, &c));
    assert_true(c == 0);
    /* the predicate replaces the threshold, on the score */
    leaf.label = (char *)"billing";
    leaf.has_predicate = 1;
    leaf.predicate.has_gte = 1;
    leaf.predicate.gte = 0.9;
    assert_false(vsr_rule_leaf_result(&leaf, &r, &c));
    leaf.predicate.gte = 0.8;
    assert_true(vsr_rule_leaf_result(&leaf, &r, &c));
    leaf.predicate.has_lt = 1;
    leaf.predicate.lt = 0.8; /* a conjunction: 0.8 < 0.8 fails */
    assert_false(vsr_rule_leaf_result(&leaf, &r, &c));
    /* under the signal's threshold, a lower predicate still holds */
    vsr_signal_result_t low = {0, 0, 0.4, VSR_SLICE_NULL, "billing"};
    memset(&leaf.predicate, 0, sizeof(leaf.predicate));
    leaf.predicate.has_gt = 1;
    leaf.predicate.gt = 0.3;
    assert_true(vsr_rule_leaf_result(&leaf, &low, &c));
    assert_true(c == 0.4);
    /* without a label, any winner; a result without a label never holds a predicate */
    leaf.label = NULL;
    assert_true(vsr_rule_leaf_result(&leaf, &low, &c));
    low.label = NULL;
    assert_false(vsr_rule_leaf_result(&leaf, &low, &c));
}

static vsr_signal_result_t llm_answer(vsr_signals_t *s, vsr_signal_input_t *in, const char *content, int *rc)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
             "{\"role\":\"assistant\",\"content\":\"%s\"},\"finish_reason\":\"stop\"}]}",
             content);
    vsr_signal_result_t r;
    memset(&r, 0, sizeof(r));
    *rc = vsr_signals_consume(s, 0, in, vsr_slice_cstr(body), &r);
    return r;
}

/* type llm: a chat task to its model (instructions and labels as the
 * system message, the text as the user's); the reply's label wins. */
static void test_llm_asks_its_model(void **state)
{
    (void)state;
    memset(&conf, 0, sizeof(conf));
    vsr_signals_t *s;
    {
        s = compile(VSR_CLS_LLM, 0.5);
        assert_null(s); /* no model: refused at compile time */
    }
    conf.model = (char *)"judge";
    conf.instructions = (char *)"Route support tickets.";
    conf.timeout_ms = 1500;
    recipe.signals.classifiers = &conf;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    s = vsr_signals_compile(&recipe, &err);
    vsr_buf_free(&err);
    assert_non_null(s);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("my \"card\" was charged twice");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    assert_string_equal(t.type, VSR_SIGNAL_TASK_CHAT);
    char *p = strndup(t.payload.p, t.payload.len);
    assert_non_null(strstr(p, "\"model\":\"judge\""));
    assert_non_null(strstr(p, "\"timeout_ms\":1500"));
    assert_non_null(strstr(p, "Route support tickets."));
    assert_non_null(strstr(p, "billing, account, shipping"));
    assert_non_null(strstr(p, "\"content\":\"my \\\"card\\\" was charged twice\""));
    free(p);
    int rc;
    vsr_signal_result_t r = llm_answer(s, &in, "billing", &rc);
    assert_int_equal(rc, VSR_OK);
    assert_string_equal(r.label, "billing");
    assert_true(r.matched && r.confidence == 1.0);
    r = llm_answer(s, &in, " Shipping.", &rc); /* case, blanks and a period */
    assert_string_equal(r.label, "shipping");
    r = llm_answer(s, &in, "The label is account, I think", &rc); /* named inside: 0.8 */
    assert_int_equal(rc, VSR_OK);
    assert_string_equal(r.label, "account");
    assert_true(r.value == 0.8 && r.matched);
    assert_non_null(strstr(r.evidence.p, "\"answer\":\"The label is account"));
    llm_answer(s, &in, "accounting", &rc); /* not a word of it: no label, unknown */
    assert_int_equal(rc, VSR_ERR_INVALID);
    memset(&r, 0, sizeof(r));
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr("{\"error\":{}}"), &r), VSR_ERR_INVALID);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_bank_counts_toward_recipe_budget(void **state)
{
    (void)state;
    /* 2048 texts a recipe: a bank of 2048 examples plus the routing text is one too many */
    vsr_cls_example_conf_t *many = calloc(2048, sizeof(*many));
    for (size_t i = 0; i < 2048; i++)
        many[i] = (vsr_cls_example_conf_t){(char *)"text", (uint32_t)(i % 3)};
    memset(&conf, 0, sizeof(conf));
    memset(&recipe, 0, sizeof(recipe));
    conf.name = (char *)"big";
    conf.threshold = 0.3;
    conf.labels = labels;
    conf.n_labels = 3;
    conf.examples = many;
    conf.n_examples = 2048;
    recipe.name = (char *)"default";
    recipe.signals.classifiers = &conf;
    recipe.signals.n_classifiers = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_null(vsr_signals_compile(&recipe, &err));
    assert_non_null(memmem(err.data, err.len, "2049 texts to embed", 19));
    vsr_buf_free(&err);
    free(many);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_labels),
        cmocka_unit_test(test_condition_label_and_predicate),
        cmocka_unit_test(test_llm_asks_its_model),
        cmocka_unit_test(test_bank_counts_toward_recipe_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
