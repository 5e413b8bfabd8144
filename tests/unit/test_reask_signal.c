/* test_reask_signal.c — the reasks family: which turns its task embeds
 * (the current user turn, then the previous user turns nearest first, at
 * most lookback_turns, skipping other roles and empty ones), and its match:
 * every similarity to them >= threshold, the lowest as the score. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

static vsr_signals_t *compile(double threshold, uint32_t lookback)
{
    static vsr_sig_reask_conf_t c;
    static vsr_recipe_conf_t r;
    memset(&c, 0, sizeof(c));
    memset(&r, 0, sizeof(r));
    c.name = (char *)"again";
    c.threshold = threshold;
    c.lookback_turns = lookback;
    r.name = (char *)"default";
    r.signals.reasks = &c;
    r.signals.n_reasks = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 4096);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    assert_non_null(s);
    vsr_buf_free(&err);
    return s;
}

/* user "u1", assistant "a", user "", user "u2", tool "t", user "now" */
static vsr_chat_message_t msgs[6];
static vsr_chat_view_t chat;

static vsr_signal_input_t input(vsr_pool_t *pool, size_t n_messages)
{
    static const struct {
        vsr_role_t role;
        const char *text;
    } m[] = {{VSR_ROLE_USER, "u1"}, {VSR_ROLE_ASSISTANT, "a"}, {VSR_ROLE_USER, ""},
             {VSR_ROLE_USER, "u2"}, {VSR_ROLE_TOOL, "t"},      {VSR_ROLE_USER, "now"}};
    memset(msgs, 0, sizeof(msgs));
    memset(&chat, 0, sizeof(chat));
    for (size_t i = 0; i < 6; i++) {
        msgs[i].role = m[i].role;
        msgs[i].text = vsr_slice_cstr(m[i].text);
    }
    /* the current turn is the last of the first n_messages */
    msgs[n_messages - 1].role = VSR_ROLE_USER;
    msgs[n_messages - 1].text = vsr_slice_cstr("now");
    chat.messages = msgs;
    chat.n_messages = n_messages;
    chat.last_user = (int)n_messages - 1;
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.text = vsr_slice_cstr("now");
    in.chat = &chat;
    in.pool = pool;
    return in;
}

static void test_turns_asked(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signal_task_t t;
    vsr_signals_t *s = compile(0.8, 1);
    vsr_signal_input_t in = input(&pool, 6);
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    assert_string_equal(t.type, "embed");
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"now\",\"u2\"]}"));
    vsr_signals_free(s);
    s = compile(0.8, 3); /* only two previous user turns with text */
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 1);
    assert_true(vsr_slice_eq_cstr(t.payload, "{\"input\":[\"now\",\"u2\",\"u1\"]}"));
    /* the first user turn has nothing before it: no task, no match */
    in = input(&pool, 1);
    assert_int_equal(vsr_signals_task(s, 0, &in, &t), 0);
    assert_false(vsr_signals_eval(s, 0, &in).matched);
    vsr_signal_result_t r;
    assert_int_equal(vsr_signals_consume(s, 0, &in, vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0]]}"),
                                         &r),
                     VSR_ERR_INVALID);
    vsr_signals_free(s);
    vsr_pool_free(&pool);
}

static void test_all_turns_must_be_near(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_signals_t *s = compile(0.8, 2);
    vsr_signal_input_t in = input(&pool, 6);
    vsr_signal_result_t r;
    /* cosines 0.9 and 0.8: both >= 0.8, score the lowest */
    assert_int_equal(vsr_signals_consume(s, 0, &in,
                                         vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":"
                                                        "[[1,0],[0.9,0.43589],[0.8,0.6]]}"),
                                         &r),
                     VSR_OK);
    assert_true(r.matched);
    assert_true(r.value > 0.7999 && r.value < 0.8001);
    /* 0.9 and 0.6: one turn is not near enough */
    assert_int_equal(vsr_signals_consume(s, 0, &in,
                                         vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":"
                                                        "[[1,0],[0.9,0.43589],[0.6,0.8]]}"),
                                         &r),
                     VSR_OK);
    assert_false(r.matched);
    assert_true(r.confidence == 0);
    /* a count that is not 1 + the previous turns, a zero vector: unknown */
    assert_int_equal(vsr_signals_consume(s, 0, &in,
                                         vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":[[1,0],[1,0]]}"), &r),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_signals_consume(s, 0, &in,
                                         vsr_slice_cstr("{\"model\":\"m\",\"dim\":2,\"embeddings\":"
                                                        "[[1,0],[0,0],[1,0]]}"),
                                         &r),
                     VSR_ERR_INVALID);
    vsr_signals_free(s);
    vsr_pool_free(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_turns_asked),
        cmocka_unit_test(test_all_turns_must_be_near),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
