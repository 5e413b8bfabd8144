/* test_classify_signal.c — the domains, jailbreak and pii families on their
 * own: the classify task each asks for (model, text, options), what each
 * makes of the runtime's answer (top class and fallback, guard threshold,
 * allowed entity types), the module defaults, include_history, and answers
 * they must refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

static vsr_modules_conf_t modules(void)
{
    vsr_modules_conf_t m;
    memset(&m, 0, sizeof(m));
    m.guard_threshold = VSR_DEFAULT_GUARD_THRESHOLD;
    m.domain_threshold = VSR_DEFAULT_DOMAIN_THRESHOLD;
    m.domain_fallback = (char *)"other";
    m.pii_threshold = 0.9;
    m.guard_on_error = VSR_ON_ERROR_MATCH;
    return m;
}

static vsr_signals_t *compile(vsr_recipe_conf_t *r)
{
    r->name = (char *)"default";
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(r, &err);
    assert_non_null(s);
    vsr_buf_free(&err);
    return s;
}

static vsr_signal_input_t input(vsr_pool_t *pool, const char *text)
{
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr(text);
    in.pool = pool;
    return in;
}

static vsr_signal_result_t consume(vsr_signals_t *s, int i, vsr_signal_input_t *in, const char *json, int want_rc)
{
    vsr_signal_result_t r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(vsr_signals_consume(s, i, in, vsr_slice_cstr(json), &r), want_rc);
    return r;
}

#define LABELS(a, pa, b, pb) "{\"labels\":[{\"label\":\"" a "\",\"score\":" #pa "},{\"label\":\"" b "\",\"score\":" #pb "}]}"

static void test_domains(void **state)
{
    (void)state;
    static char *cats[] = {(char *)"Computer Science", (char *)"engineering"};
    vsr_sig_domain_conf_t d[3];
    memset(d, 0, sizeof(d));
    d[0].name = (char *)"coding";
    d[0].categories.items = cats;
    d[0].categories.n = 2;
    d[1].name = (char *)"math";
    d[2].name = (char *)"other";
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.domains = d;
    r.signals.n_domains = 3;
    r.signals.modules = modules();
    vsr_signals_t *s = compile(&r);
    int coding = vsr_signals_find(s, "domain", "coding"), math = vsr_signals_find(s, "domain", "math"),
        other = vsr_signals_find(s, "domain", "other");
    assert_true(coding >= 0 && math >= 0 && other >= 0);
    assert_string_equal(vsr_signals_family(s, coding), "domains");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, "sort a list\n");
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, coding, &in, &t), 1);
    assert_string_equal(t.type, "classify");
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"model\":\"domain\",\"text\":\"sort a list\\n\"}"));
    /* the top class, named by a category in another spelling */
    vsr_signal_result_t v = consume(s, coding, &in, LABELS("computer_science", 0.8, "math", 0.2), VSR_OK);
    assert_true(v.matched);
    assert_true(v.confidence > 0.79 && v.confidence < 0.81);
    v = consume(s, math, &in, LABELS("computer_science", 0.8, "math", 0.2), VSR_OK);
    assert_false(v.matched);
    assert_true(v.confidence == 0);
    /* not sure enough (below 0.5): the fallback class "other" */
    v = consume(s, coding, &in, LABELS("computer science", 0.45, "other", 0.3), VSR_OK);
    assert_false(v.matched);
    v = consume(s, other, &in, LABELS("computer science", 0.45, "other", 0.3), VSR_OK);
    assert_true(v.matched);
    assert_true(v.confidence > 0.29 && v.confidence < 0.31);
    /* the order of labels does not matter: the highest score is the top */
    v = consume(s, math, &in, LABELS("other", 0.1, "math", 0.9), VSR_OK);
    assert_true(v.matched);
    /* answers it refuses */
    consume(s, coding, &in, "{\"labels\":[]}", VSR_ERR_INVALID);
    consume(s, coding, &in, "{\"labels\":[{\"label\":\"math\",\"score\":1.5}]}", VSR_ERR_INVALID);
    consume(s, coding, &in, "{\"labels\":[{\"label\":\"math\"}]}", VSR_ERR_INVALID);
    consume(s, coding, &in, "{\"entities\":[]}", VSR_ERR_INVALID);
    consume(s, coding, &in, "not json", VSR_ERR_INVALID);
    /* no routing text: no task */
    vsr_signal_input_t empty = input(&pool, "");
    assert_int_equal(vsr_signals_task(s, coding, &empty, &t), 0);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

/* A domain of its own (no MMLU-Pro class) with a description: the task
 * sends the description, and its similarity to the text decides; a
 * category domain with a description still goes by the class. */
static void test_domain_description(void **state)
{
    (void)state;
    vsr_sig_domain_conf_t d[2];
    memset(d, 0, sizeof(d));
    d[0].name = (char *)"contracts";
    d[0].description = (char *)"Questions about \"contracts\" and leases";
    d[1].name = (char *)"law";
    d[1].description = (char *)"Legal questions";
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.domains = d;
    r.signals.n_domains = 2;
    r.signals.modules = modules();
    vsr_signals_t *s = compile(&r);
    int c = vsr_signals_find(s, "domain", "contracts"), law = vsr_signals_find(s, "domain", "law");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, "can my landlord raise the rent");
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, c, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"model\":\"domain\",\"text\":\"can my landlord raise the rent\","
                                             "\"description\":\"Questions about \\\"contracts\\\" and leases\"}"));
    vsr_signal_result_t v = consume(s, c, &in,
                                    "{\"labels\":[{\"label\":\"law\",\"score\":0.9}],\"description_similarity\":0.52}",
                                    VSR_OK);
    assert_true(v.matched && v.confidence > 0.51 && v.confidence < 0.53);
    v = consume(s, c, &in, "{\"labels\":[{\"label\":\"law\",\"score\":0.9}],\"description_similarity\":0.3}",
                VSR_OK);
    assert_false(v.matched);
    assert_true(v.value > 0.29 && v.value < 0.31);
    /* without the similarity (an older runtime): the class rule, and "contracts" is no class */
    v = consume(s, c, &in, "{\"labels\":[{\"label\":\"law\",\"score\":0.9}]}", VSR_OK);
    assert_false(v.matched);
    /* a category domain: the class decides, whatever the description says */
    v = consume(s, law, &in, "{\"labels\":[{\"label\":\"law\",\"score\":0.9}],\"description_similarity\":0.1}",
                VSR_OK);
    assert_true(v.matched && v.confidence > 0.89);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_jailbreak(void **state)
{
    (void)state;
    static char *jp[] = {(char *)"ignore all rules"};
    vsr_sig_jailbreak_conf_t j[3];
    memset(j, 0, sizeof(j));
    j[0].name = (char *)"guard"; /* no method: the default, hybrid */
    j[1].name = (char *)"strict";
    j[1].method = VSR_JB_HYBRID;
    j[1].has_method = 1;
    j[2].name = (char *)"pkg"; /* method: classifier, said */
    j[2].method = VSR_JB_CLASSIFIER;
    j[2].has_method = 1;
    j[1].threshold = 0.3;
    j[1].has_threshold = 1;
    j[1].jailbreak_patterns.items = jp;
    j[1].jailbreak_patterns.n = 1;
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.jailbreak = j;
    r.signals.n_jailbreak = 3;
    r.signals.modules = modules();
    vsr_signals_t *s = compile(&r);
    int g = vsr_signals_find(s, "jailbreak", "guard"), st = vsr_signals_find(s, "jailbreak", "strict");
    int pk = vsr_signals_find(s, "jailbreak", "pkg");
    assert_true(g >= 0 && st >= 0 && pk >= 0);
    assert_int_equal(vsr_signals_on_error(s, g), VSR_ON_ERROR_MATCH); /* prompt_guard.on_error: block */
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, "hi");
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, g, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"model\":\"jailbreak\",\"text\":\"hi\",\"method\":\"hybrid\"}"));
    assert_int_equal(vsr_signals_task(s, pk, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"model\":\"jailbreak\",\"text\":\"hi\",\"method\":\"classifier\"}"));
    assert_int_equal(vsr_signals_task(s, st, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(
        t.payload,
        "{\"model\":\"jailbreak\",\"text\":\"hi\",\"method\":\"hybrid\",\"jailbreak_patterns\":[\"ignore all rules\"]}"));
    /* the default threshold (0.7) and the signal's own (0.3) */
    const char *mid = LABELS("benign", 0.5, "jailbreak", 0.5);
    assert_false(consume(s, g, &in, mid, VSR_OK).matched);
    vsr_signal_result_t v = consume(s, st, &in, mid, VSR_OK);
    assert_true(v.matched);
    assert_true(v.value > 0.49 && v.value < 0.51);
    assert_true(consume(s, g, &in, LABELS("jailbreak", 0.93, "benign", 0.07), VSR_OK).matched);
    /* an answer without a jailbreak score is unusable */
    consume(s, g, &in, "{\"labels\":[{\"label\":\"benign\",\"score\":0.9}]}", VSR_ERR_INVALID);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

static void test_pii_and_history(void **state)
{
    (void)state;
    static char *allowed[] = {(char *)"EMAIL_ADDRESS"};
    vsr_sig_pii_conf_t p[2];
    memset(p, 0, sizeof(p));
    p[0].name = (char *)"any";
    p[1].name = (char *)"no_email";
    p[1].allowed.items = allowed;
    p[1].allowed.n = 1;
    p[1].include_history = 1;
    p[1].threshold = 0.5;
    p[1].has_threshold = 1;
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.pii = p;
    r.signals.n_pii = 2;
    r.signals.modules = modules();
    vsr_signals_t *s = compile(&r);
    int any = vsr_signals_find(s, "pii", "any"), ne = vsr_signals_find(s, "pii", "no_email");
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_message_t msgs[3];
    memset(msgs, 0, sizeof(msgs));
    msgs[0].role = VSR_ROLE_SYSTEM;
    msgs[0].text = vsr_slice_cstr("be nice");
    msgs[1].role = VSR_ROLE_ASSISTANT;
    msgs[1].text = vsr_slice_cstr("");
    msgs[2].role = VSR_ROLE_USER;
    msgs[2].text = vsr_slice_cstr("mail a@b.io");
    vsr_chat_view_t chat;
    memset(&chat, 0, sizeof(chat));
    chat.messages = msgs;
    chat.n_messages = 3;
    chat.last_user = 2;
    vsr_signal_input_t in = input(&pool, "mail a@b.io");
    in.chat = &chat;
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, any, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"model\":\"pii\",\"text\":\"mail a@b.io\",\"threshold\":0.9}"));
    assert_int_equal(vsr_signals_task(s, ne, &in, &t), 1); /* include_history: every message with text */
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"model\":\"pii\",\"text\":\"be nice\\n\\nmail a@b.io\",\"threshold\":0.5}"));
    const char *email = "{\"entities\":[{\"type\":\"EMAIL_ADDRESS\",\"start\":5,\"end\":11,\"score\":0.95}]}";
    vsr_signal_result_t v = consume(s, any, &in, email, VSR_OK);
    assert_true(v.matched);
    assert_true(v.value == 1);
    assert_false(consume(s, ne, &in, email, VSR_OK).matched); /* allowed type */
    const char *phone = "{\"entities\":[{\"type\":\"PHONE_NUMBER\",\"start\":0,\"end\":3,\"score\":0.6}]}";
    assert_false(consume(s, any, &in, phone, VSR_OK).matched); /* below the default (0.9 in this test's modules) */
    assert_true(consume(s, ne, &in, phone, VSR_OK).matched);   /* its own 0.5 */
    assert_false(consume(s, any, &in, "{\"entities\":[]}", VSR_OK).matched);
    consume(s, any, &in, "{\"entities\":[{\"type\":\"PERSON\",\"score\":-1}]}", VSR_ERR_INVALID);
    consume(s, any, &in, "{\"labels\":[]}", VSR_ERR_INVALID);
    vsr_pool_free(&pool);
    vsr_signals_free(s);
}

/* a model-backed text is cut to head, middle and tail */
static void test_long_text_is_shortened(void **state)
{
    (void)state;
    vsr_sig_domain_conf_t d;
    memset(&d, 0, sizeof(d));
    d.name = (char *)"x";
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.domains = &d;
    r.signals.n_domains = 1;
    r.signals.modules = modules();
    vsr_signals_t *s = compile(&r);
    size_t n = 10000;
    char *text = malloc(n + 1);
    memset(text, 'a', n);
    text[n] = '\0';
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_input_t in = input(&pool, text);
    vsr_signal_task_t t;
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    /* {"model":"domain","text":"<2048 runes and two markers>"} */
    assert_int_equal(t.payload.len, strlen("{\"model\":\"domain\",\"text\":\"\"}") + 2048 + 2 * strlen(" ... "));
    vsr_pool_free(&pool);
    free(text);
    vsr_signals_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_domains),
        cmocka_unit_test(test_domain_description),
        cmocka_unit_test(test_jailbreak),
        cmocka_unit_test(test_pii_and_history),
        cmocka_unit_test(test_long_text_is_shortened),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
