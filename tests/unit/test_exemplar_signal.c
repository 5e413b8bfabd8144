/* test_exemplar_signal.c — the fact_check, user_feedbacks and modality
 * families: the first task embeds the built-in bank after the routing
 * text, later ones the text alone; the label whose bank is nearest wins and
 * the signal matches when it is its own label with a score >= threshold;
 * user_feedbacks asks nothing without a prior assistant reply; modality's
 * keyword cues tip a close call to DIFFUSION; a name that is not a label is
 * refused, except fact_check's and user_feedbacks', which load and never
 * match. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

/* the banks compiled into the binary (cmake/embed.cmake) */
extern const unsigned char vsr_builtin_fact_check_exemplars[];
extern const size_t vsr_builtin_fact_check_exemplars_len;
extern const unsigned char vsr_builtin_user_feedbacks_exemplars[];
extern const size_t vsr_builtin_user_feedbacks_exemplars_len;
extern const unsigned char vsr_builtin_modality_exemplars[];
extern const size_t vsr_builtin_modality_exemplars_len;

static vsr_sig_exemplar_conf_t conf;
static vsr_recipe_conf_t recipe;

static vsr_signals_t *compile(const char *family, const char *name, double threshold)
{
    memset(&conf, 0, sizeof(conf));
    memset(&recipe, 0, sizeof(recipe));
    conf.name = (char *)name;
    conf.threshold = threshold;
    recipe.name = (char *)"default";
    if (strcmp(family, "fact_check") == 0) {
        recipe.signals.fact_check = &conf;
        recipe.signals.n_fact_check = 1;
    } else if (strcmp(family, "user_feedbacks") == 0) {
        recipe.signals.user_feedbacks = &conf;
        recipe.signals.n_user_feedbacks = 1;
    } else {
        recipe.signals.modality = &conf;
        recipe.signals.n_modality = 1;
    }
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(&recipe, &err);
    if (s == NULL)
        assert_non_null(memmem(err.data, err.len, "name is one of its labels", 25));
    vsr_buf_free(&err);
    return s;
}

/* The canned embed result: the text's vector, then (with_bank) one vector
 * per bank line: axis k for the family's k-th label (labels in order). */
static char *result(const unsigned char *bank, size_t len, const char *const *labels, const char *text_vec,
                    int with_bank)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_printf(&b, "{\"model\":\"m\",\"dim\":3,\"embeddings\":[%s", text_vec);
    const char *p = (const char *)bank, *end = p + len;
    while (with_bank && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ll = (size_t)((nl ? nl : end) - p);
        int k = -1;
        for (int i = 0; labels[i]; i++) {
            char needle[96];
            snprintf(needle, sizeof needle, "\"label\": \"%s\"", labels[i]);
            if (memmem(p, ll, needle, strlen(needle)))
                k = i;
        }
        assert_true(k >= 0);
        vsr_buf_printf(&b, ",[%d,%d,%d]", k == 0, k == 1, k == 2 || k == 3);
        p = nl ? nl + 1 : end;
    }
    vsr_buf_append_cstr(&b, "]}");
    char *out = strndup(b.data, b.len);
    vsr_buf_free(&b);
    return out;
}

static const char *const fc_labels[] = {"needs_fact_check", "no_fact_check_needed", NULL};
static const char *const mod_labels[] = {"AR", "DIFFUSION", "BOTH", NULL};

static void test_fact_check_labels(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("fact_check", "needs_fact_check", 0.3);
    assert_non_null(s);
    int i = vsr_signals_find(s, "fact_check", "needs_fact_check");
    assert_true(i >= 0);
    assert_string_equal(vsr_signals_family(s, i), "fact_check");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("When did the Berlin Wall fall?");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    assert_string_equal(t.type, "embed");
    const char *head = "{\"input\":[\"When did the Berlin Wall fall?\",\"What year did the Berlin Wall fall?\",";
    assert_true(t.payload.len > strlen(head) && memcmp(t.payload.p, head, strlen(head)) == 0);
    /* the text on the needs_fact_check axis: its label wins with score 1 */
    char *r1 = result(vsr_builtin_fact_check_exemplars, vsr_builtin_fact_check_exemplars_len, fc_labels, "[1,0,0]", 1);
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(r1), &r), VSR_OK);
    assert_true(r.matched);
    assert_true(r.value > 0.999);
    /* stored: the next task is the text alone */
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"When did the Berlin Wall fall?\"]}"));
    /* nearer the other label: no match; near but under the threshold: no match */
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":3,\"embeddings\":[[0,1,0]]}"),
                                         &r),
                     VSR_OK);
    assert_false(r.matched);
    assert_int_equal(vsr_signals_consume(s, i, &in,
                                         vsr_slice_cstr("{\"model\":\"m\",\"dim\":3,\"embeddings\":[[0.2,0.1,0.97]]}"),
                                         &r),
                     VSR_OK);
    assert_false(r.matched);
    /* another model than the bank's: unknown */
    assert_int_not_equal(vsr_signals_consume(s, i, &in,
                                             vsr_slice_cstr("{\"model\":\"x\",\"dim\":3,\"embeddings\":[[1,0,0]]}"), &r),
                         VSR_OK);
    free(r1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_name_must_be_a_label(void **state)
{
    (void)state;
    assert_null(compile("modality", "ar", 0.3)); /* labels are exact */
}

/* fact_check under another name (the reference's documents write them): it
 * loads and never matches, even when the classifier says needs_fact_check. */
static void test_fact_check_other_name_never_matches(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("fact_check", "verification-needed", 0.3);
    assert_non_null(s);
    int i = vsr_signals_find(s, "fact_check", "verification-needed");
    assert_true(i >= 0);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("When did the Berlin Wall fall?");
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    char *r1 = result(vsr_builtin_fact_check_exemplars, vsr_builtin_fact_check_exemplars_len, fc_labels, "[1,0,0]", 1);
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr(r1), &r), VSR_OK);
    assert_false(r.matched);
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":3,\"embeddings\":[[0,1,0]]}"),
                                         &r),
                     VSR_OK);
    assert_false(r.matched);
    free(r1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_user_feedback_needs_a_prior_reply(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("user_feedbacks", "wrong_answer", 0.3);
    assert_non_null(s);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_message_t msgs[3];
    memset(msgs, 0, sizeof(msgs));
    msgs[0].role = VSR_ROLE_USER;
    msgs[0].text = vsr_slice_cstr("what is 7 times 8?");
    msgs[1].role = VSR_ROLE_ASSISTANT;
    msgs[1].text = vsr_slice_cstr("54");
    msgs[2].role = VSR_ROLE_USER;
    msgs[2].text = vsr_slice_cstr("that's wrong");
    vsr_chat_view_t chat;
    memset(&chat, 0, sizeof(chat));
    chat.messages = msgs;
    chat.n_messages = 1;
    chat.last_user = 0;
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("that's wrong");
    in.pool = &pool;
    in.chat = &chat;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 0); /* no reply before: nothing asked */
    in.chat = NULL;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 0);
    chat.n_messages = 3;
    chat.last_user = 2;
    in.chat = &chat;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    static const char *const uf_labels[] = {"wrong_answer", "need_clarification", "want_different", "satisfied", NULL};
    char *r1 = result(vsr_builtin_user_feedbacks_exemplars, vsr_builtin_user_feedbacks_exemplars_len, uf_labels,
                      "[1,0,0]", 1);
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr(r1), &r), VSR_OK);
    assert_true(r.matched);
    free(r1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

/* user_feedbacks under another name (the reference's recipes write
 * balance_user_reports_incorrect_answer): it loads and never matches, even
 * when the classifier says wrong_answer after an assistant reply. */
static void test_user_feedback_other_name_never_matches(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("user_feedbacks", "balance_user_reports_incorrect_answer", 0.3);
    assert_non_null(s);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_message_t msgs[3];
    memset(msgs, 0, sizeof(msgs));
    msgs[0].role = VSR_ROLE_USER;
    msgs[0].text = vsr_slice_cstr("what is 7 times 8?");
    msgs[1].role = VSR_ROLE_ASSISTANT;
    msgs[1].text = vsr_slice_cstr("54");
    msgs[2].role = VSR_ROLE_USER;
    msgs[2].text = vsr_slice_cstr("that's wrong");
    vsr_chat_view_t chat;
    memset(&chat, 0, sizeof(chat));
    chat.messages = msgs;
    chat.n_messages = 3;
    chat.last_user = 2;
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("that's wrong");
    in.pool = &pool;
    in.chat = &chat;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    static const char *const uf_labels[] = {"wrong_answer", "need_clarification", "want_different", "satisfied", NULL};
    char *r1 = result(vsr_builtin_user_feedbacks_exemplars, vsr_builtin_user_feedbacks_exemplars_len, uf_labels,
                      "[1,0,0]", 1);
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr(r1), &r), VSR_OK);
    assert_false(r.matched);
    free(r1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_modality_cues(void **state)
{
    (void)state;
    vsr_signals_t *s = compile("modality", "DIFFUSION", 0.3);
    assert_non_null(s);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.pool = &pool;
    in.text = vsr_slice_cstr("a castle on a hill");
    /* nearer AR (0.75) than DIFFUSION (0.66): AR wins without a cue */
    char *r1 = result(vsr_builtin_modality_exemplars, vsr_builtin_modality_exemplars_len, mod_labels,
                      "[0.75,0.66,0]", 1);
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr(r1), &r), VSR_OK);
    assert_false(r.matched);
    /* "Draw" (a whole word, any case) adds the cue bonus: DIFFUSION wins */
    in.text = vsr_slice_cstr("Draw a castle on a hill");
    const char *q = "{\"model\":\"m\",\"dim\":3,\"embeddings\":[[0.75,0.66,0]]}";
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr(q), &r), VSR_OK);
    assert_true(r.matched);
    /* "drawback" is not "draw" */
    in.text = vsr_slice_cstr("the drawback of a castle on a hill");
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr(q), &r), VSR_OK);
    assert_false(r.matched);
    /* a long text is scanned at its head and tail only */
    static char big[3 * 4096 + 16];
    memset(big, 'a', sizeof(big) - 1);
    memcpy(big + 4096 + 100, " draw ", 6);
    in.text = vsr_slice_cstr(big);
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr(q), &r), VSR_OK);
    assert_false(r.matched);
    memcpy(big + sizeof(big) - 8, " draw ", 6);
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr(q), &r), VSR_OK);
    assert_true(r.matched);
    free(r1);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fact_check_labels),
        cmocka_unit_test(test_name_must_be_a_label),
        cmocka_unit_test(test_fact_check_other_name_never_matches),
        cmocka_unit_test(test_user_feedback_needs_a_prior_reply),
        cmocka_unit_test(test_user_feedback_other_name_never_matches),
        cmocka_unit_test(test_modality_cues),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
