/* test_remote_classifier.c — remote classifiers (docs/signals.md "Bring a
 * bigger model") on their own: the answer's reader (labels, entities, the
 * runtime's shape, what it refuses), the task a family with a remote asks
 * for (entry, timeout, path, body; the text bounded by max_request_bytes),
 * and how the jailbreak family adds up positive_labels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

static int answer(const char *in, int entities, int distribution, vsr_buf_t *out)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    const char *why = "unset";
    vsr_buf_reset(out);
    int rc = vsr_signals_remote_answer(vsr_slice_cstr(in), entities, distribution, &pool, out, &why);
    if (rc == VSR_OK)
        assert_null(why);
    else
        assert_non_null(why);
    vsr_buf_append(out, "", 1);
    vsr_pool_free(&pool);
    return rc;
}

static void test_reader(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    /* the reference's http_classify answer, in any order */
    assert_int_equal(answer("[{\"label\":\"benign\",\"score\":0.25},{\"label\":\"jailbreak\",\"score\":0.75}]", 0, 1,
                            &b),
                     VSR_OK);
    assert_string_equal(b.data,
                        "{\"labels\":[{\"label\":\"benign\",\"score\":0.25},{\"label\":\"jailbreak\",\"score\":0.75}]}");
    /* a runtime's /v1/classify answer */
    assert_int_equal(answer("{\"model\":\"domain\",\"labels\":[{\"label\":\"law\",\"score\":1}]}", 0, 1, &b), VSR_OK);
    assert_string_equal(b.data, "{\"labels\":[{\"label\":\"law\",\"score\":1}]}");
    /* entities: HF token classification, BIO prefixes and short names mapped, spans kept */
    assert_int_equal(answer("[{\"entity_group\":\"PER\",\"score\":0.9,\"word\":\"Rene\",\"start\":5,\"end\":9},"
                            "{\"entity\":\"B-email\",\"score\":0.5},{\"type\":\"CREDIT_CARD\",\"score\":1}]",
                            1, 0, &b),
                     VSR_OK);
    assert_string_equal(b.data, "{\"entities\":[{\"type\":\"PERSON\",\"start\":5,\"end\":9,\"score\":0.9},"
                                "{\"type\":\"EMAIL_ADDRESS\",\"score\":0.5},{\"type\":\"CREDIT_CARD\",\"score\":1}]}");
    assert_int_equal(answer("[]", 1, 0, &b), VSR_OK); /* no entity is an answer */
    assert_string_equal(b.data, "{\"entities\":[]}");
    /* refused */
    static const char *const bad_labels[] = {
        "[]",                                                              /* no label */
        "not json",
        "{\"labels\":{}}",
        "[{\"label\":\"a\",\"score\":1.5}]",                               /* outside [0, 1] */
        "[{\"label\":\"a\",\"score\":\"0.5\"}]",                           /* not a number */
        "[{\"label\":\"\",\"score\":0.5}]",                                /* no name */
        "[{\"score\":0.5}]",
        "[{\"label\":\"a\",\"score\":0.5},{\"label\":\"a\",\"score\":0.5}]", /* twice */
        "[1, 2]",
    };
    for (size_t i = 0; i < sizeof(bad_labels) / sizeof(bad_labels[0]); i++)
        assert_int_equal(answer(bad_labels[i], 0, 0, &b), VSR_ERR_INVALID);
    /* label_distribution: the scores must add up to 1 (within 0.02); label_scores need not */
    const char *half = "[{\"label\":\"a\",\"score\":0.3},{\"label\":\"b\",\"score\":0.2}]";
    assert_int_equal(answer(half, 0, 1, &b), VSR_ERR_INVALID);
    assert_int_equal(answer(half, 0, 0, &b), VSR_OK);
    assert_int_equal(answer("[{\"label\":\"a\",\"score\":0.5},{\"label\":\"b\",\"score\":0.49}]", 0, 1, &b), VSR_OK);
    assert_int_equal(answer("[{\"type\":\"PER\",\"score\":0.5,\"start\":9,\"end\":3}]", 1, 0, &b), VSR_ERR_INVALID);
    assert_int_equal(answer("[{\"type\":\"PER\",\"score\":0.5,\"start\":3}]", 1, 0, &b), VSR_ERR_INVALID);
    /* at most 256 items */
    vsr_buf_t big;
    vsr_buf_init(&big, 0);
    vsr_buf_append_cstr(&big, "[");
    for (int i = 0; i < 257; i++)
        vsr_buf_printf(&big, "%s{\"label\":\"l%d\",\"score\":0}", i ? "," : "", i);
    vsr_buf_append_cstr(&big, "]");
    vsr_buf_append(&big, "", 1);
    assert_int_equal(answer(big.data, 0, 0, &b), VSR_ERR_INVALID);
    vsr_buf_free(&big);
    vsr_buf_free(&b);
}

static int has(vsr_slice_t s, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= s.len; i++)
        if (memcmp(s.p + i, needle, n) == 0)
            return 1;
    return 0;
}

static void test_jailbreak_task_and_positive_labels(void **state)
{
    (void)state;
    static char *pos[] = {(char *)"jailbreak", (char *)"Prompt_Injection"};
    vsr_sig_jailbreak_conf_t jb[1];
    memset(jb, 0, sizeof(jb));
    jb[0].name = (char *)"attack";
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.name = (char *)"default";
    r.signals.jailbreak = jb;
    r.signals.n_jailbreak = 1;
    r.signals.modules.guard_threshold = 0.7;
    r.signals.modules.guard_remote = (vsr_remote_cls_conf_t){.model = (char *)"big-guard",
                                                             .protocol = VSR_REMOTE_HTTP_CLASSIFY,
                                                             .timeout_ms = 250,
                                                             .max_request_bytes = 256 + 6 * 10};
    r.signals.modules.guard_positive.items = pos;
    r.signals.modules.guard_positive.n = 2;
    /* a family with a remote classifier needs no runtime */
    assert_int_equal(vsr_signals_conf_model_backed(&r.signals), 0);
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    assert_non_null(s);
    int i = vsr_signals_find(s, "jailbreak", "attack");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("0123456789abcdefghij"); /* 20 runes; the entry's bound leaves room for 10 */
    in.pool = &pool;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, i, &in, &t), 1);
    assert_string_equal(t.type, VSR_SIGNAL_TASK_REMOTE);
    assert_true(has(t.payload, "{\"model\":\"big-guard\",\"timeout_ms\":250,\"path\":\"/classify\",\"body\":"
                               "{\"inputs\":\"012"));
    assert_true(has(t.payload, "\"}}"));
    assert_false(has(t.payload, "abcdefghij")); /* shortened to fit max_request_bytes */
    /* the positive labels add up: 0.4 + 0.35 >= 0.7 */
    vsr_signal_result_t v;
    assert_int_equal(vsr_signals_consume(s, i, &in,
                                         vsr_slice_cstr("[{\"label\":\"benign\",\"score\":0.25},{\"label\":\"jailbreak\","
                                                        "\"score\":0.4},{\"label\":\"prompt injection\",\"score\":0.35}]"),
                                         &v),
                     VSR_OK);
    assert_true(v.matched);
    assert_true(v.value > 0.74 && v.value < 0.76);
    /* an answer that is not the contract's: unusable (the signal is unknown) */
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("{\"labels\":[]}"), &v), VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, i, &in, vsr_slice_cstr("<html>"), &v), VSR_ERR_INVALID);
    vsr_pool_free(&pool);
    vsr_buf_free(&err);
    vsr_signals_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_jailbreak_task_and_positive_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
