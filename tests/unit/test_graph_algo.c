/* test_graph_algo.c — the Looper algorithms' pure parts, on hand-computed values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <math.h>

#include "graph/algo.h"
#include "json/json.h"

#define S(lit) VSR_SLICE_LIT(lit)

static void assert_slice(vsr_slice_t got, const char *want)
{
    if (!vsr_slice_eq_cstr(got, want))
        fail_msg("got '%.*s', want '%s'", (int)got.len, got.p ? got.p : "", want);
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---- completion parsing ---------------------------------------------------- */

static const char body_basic[] =
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"m\\/a\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"a\\\"b\\\\n\\u00e9\","
    "\"reasoning_content\":\"think\"},\"finish_reason\":\"length\","
    "\"logprobs\":{\"content\":["
    "{\"token\":\"a\",\"logprob\":-0.5,\"top_logprobs\":[{\"token\":\"a\",\"logprob\":-0.5},{\"token\":\"b\",\"logprob\":-2.5}]},"
    "{\"token\":\"b\",\"logprob\":-1.0,\"top_logprobs\":[{\"token\":\"x\",\"logprob\":-1.6},{\"token\":\"b\",\"logprob\":-1.0}]},"
    "{\"token\":\"c\",\"logprob\":-1.5,\"top_logprobs\":[{\"token\":\"c\",\"logprob\":-1.5}]}]}}],"
    "\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3,\"total_tokens\":14}}";

static void test_parse_basic(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_algo_completion_t c;
    assert_int_equal(vsr__algo_completion_parse(body_basic, strlen(body_basic), &pool, &c), VSR_OK);
    assert_slice(c.id, "chatcmpl-1");
    assert_slice(c.model, "m/a");
    assert_int_equal(c.created, 1700000000);
    assert_int_equal(c.n_choices, 1);
    assert_slice(c.content, "a\"b\\n\xc3\xa9");
    assert_slice(c.reasoning, "think");
    assert_slice(c.finish_reason, "length");
    assert_false(c.has_tool_calls);
    assert_int_equal(c.prompt_tokens, 11);
    assert_int_equal(c.completion_tokens, 3);
    assert_int_equal(c.total_tokens, 14);
    assert_true(c.has_logprobs);
    assert_int_equal(c.n_tokens, 3);
    assert_true(fabs(c.tokens[0].margin - 2.0) < 1e-12);
    assert_true(fabs(c.tokens[1].margin - 0.6) < 1e-12); /* top1 − top2 whatever their order */
    assert_true(isnan(c.tokens[2].margin));
    assert_false(c.tokens[0].is_tool_arg);
    vsr_pool_free(&pool);
}

static void test_parse_tool_calls_and_reasoning_alias(void **state)
{
    (void)state;
    const char *b = "{\"choices\":[{\"message\":{\"content\":null,\"reasoning\":\"r\",\"tool_calls\":"
                    "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}";
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_algo_completion_t c;
    assert_int_equal(vsr__algo_completion_parse(b, strlen(b), &pool, &c), VSR_OK);
    assert_int_equal(c.content.len, 0);
    assert_slice(c.reasoning, "r");
    assert_true(c.has_tool_calls);
    assert_int_equal(c.tool_calls.p[0], '[');
    assert_int_equal(c.tool_calls.p[c.tool_calls.len - 1], ']');
    assert_false(c.has_logprobs);
    assert_int_equal(c.prompt_tokens, 0);
    vsr_pool_free(&pool);
}

static void test_parse_refuses(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "[]", "{\"choices\":[]}", "{\"choices\":[1]}", "{\"choices\":[{}]}",
        "{\"object\":\"chat.completion.chunk\",\"choices\":[{\"message\":{}}]}", "{\"choices\":[{\"message\":{}}]",
        "{\"choices\":{}}",
    };
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++) {
        vsr_algo_completion_t c;
        assert_int_equal(vsr__algo_completion_parse(bad[i], strlen(bad[i]), &pool, &c), VSR_ERR_INVALID);
        assert_non_null(c.why);
    }
    vsr_pool_free(&pool);
}

/* The call written as content: <tool_call>{"name":"f","arguments": {"x": 1}}
 * split into tokens; only the ones overlapping the arguments' value count. */
static const char body_tool_text[] =
    "{\"choices\":[{\"message\":{\"content\":\"...\"},\"logprobs\":{\"content\":["
    "{\"token\":\"<tool_call>\",\"logprob\":-0.1},"
    "{\"token\":\"{\\\"name\\\":\\\"f\\\",\",\"logprob\":-0.2},"
    "{\"token\":\"\\\"arguments\\\":\",\"logprob\":-0.3},"
    "{\"token\":\" {\\\"x\\\":\",\"logprob\":-1.2},"
    "{\"token\":\" 1}\",\"logprob\":-1.8},"
    "{\"token\":\"}\",\"logprob\":-0.4}]}}]}";

static void test_tool_arg_tokens(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_algo_completion_t c;
    assert_int_equal(vsr__algo_completion_parse(body_tool_text, strlen(body_tool_text), &pool, &c), VSR_OK);
    assert_int_equal(c.n_tokens, 6);
    int want[6] = {0, 0, 0, 1, 1, 0};
    for (int i = 0; i < 6; i++)
        assert_int_equal(c.tokens[i].is_tool_arg, want[i]);
    double v;
    /* mean(-1.2, -1.8) = -1.5 → (1.5)/3 = 0.5 */
    assert_int_equal(vsr__algo_confidence(&c, VSR_ALGO_CONF_AVG_LOGPROB, 0, 0, 1, &v), VSR_OK);
    assert_true(fabs(v - 0.5) < 1e-12);
    /* no top_logprobs at all: margin is an evaluation error */
    assert_int_equal(vsr__algo_confidence(&c, VSR_ALGO_CONF_MARGIN, 0, 0, 0, &v), VSR_ERR_INVALID);
    vsr_pool_free(&pool);
}

/* Arguments written as a JSON string (OpenAI's wire form): the value ends at
 * the string's closing quote, escaped quotes included; the rest is plain. */
static void test_tool_arg_string_value(void **state)
{
    (void)state;
    const char *b = "{\"choices\":[{\"message\":{},\"logprobs\":{\"content\":["
                    "{\"token\":\"{\\\"arguments\\\": \\\"{\\\\\\\"x\",\"logprob\":-0.1},"
                    "{\"token\":\"\\\\\\\":1}\\\"\",\"logprob\":-0.2},"
                    "{\"token\":\"} done\",\"logprob\":-0.3}]}}]}";
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_algo_completion_t c;
    assert_int_equal(vsr__algo_completion_parse(b, strlen(b), &pool, &c), VSR_OK);
    assert_int_equal(c.n_tokens, 3);
    /* texts: {"arguments": "{\"x  |  \":1}"  |  } done */
    assert_int_equal(c.tokens[0].text_len, 19);
    assert_int_equal(c.tokens[0].is_tool_arg, 1);
    assert_int_equal(c.tokens[1].is_tool_arg, 1);
    assert_int_equal(c.tokens[2].is_tool_arg, 0);
    vsr_pool_free(&pool);
}

/* ---- confidence ------------------------------------------------------------ */

static void test_confidence_values(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_algo_completion_t c;
    assert_int_equal(vsr__algo_completion_parse(body_basic, strlen(body_basic), &pool, &c), VSR_OK);
    double v;
    /* mean logprob −1 → (−1 + 3)/3 */
    assert_int_equal(vsr__algo_confidence(&c, VSR_ALGO_CONF_AVG_LOGPROB, 0, 0, 0, &v), VSR_OK);
    assert_true(fabs(v - 2.0 / 3.0) < 1e-12);
    /* margins 2.0 and 0.6 (the third token has one alternative) → mean 1.3 */
    assert_int_equal(vsr__algo_confidence(&c, VSR_ALGO_CONF_MARGIN, 0, 0, 0, &v), VSR_OK);
    assert_true(fabs(v - 0.3516556589984903) < 1e-12);
    assert_int_equal(vsr__algo_confidence(&c, VSR_ALGO_CONF_HYBRID, 0.5, 0.5, 0, &v), VSR_OK);
    assert_true(fabs(v - 0.5091611628325785) < 1e-12);
    /* no tool-argument token in plain text */
    assert_int_equal(vsr__algo_confidence(&c, VSR_ALGO_CONF_AVG_LOGPROB, 0, 0, 1, &v), VSR_ERR_INVALID);
    assert_int_equal(vsr__algo_confidence(&c, VSR_ALGO_CONF_SELF_VERIFY, 0, 0, 0, &v), VSR_ERR_INVALID);

    /* clamping: a mean below −3 scores 0, above 0 cannot happen but ≥ 0 gives 1 */
    vsr_algo_token_t t[2] = {{-5.0, -1.0, 0, 0, 0}, {-4.0, NAN, 0, 0, 0}};
    vsr_algo_completion_t low = {0};
    low.has_logprobs = 1;
    low.tokens = t;
    low.n_tokens = 2;
    assert_int_equal(vsr__algo_confidence(&low, VSR_ALGO_CONF_AVG_LOGPROB, 0, 0, 0, &v), VSR_OK);
    assert_true(v == 0.0);
    assert_int_equal(vsr__algo_confidence(&low, VSR_ALGO_CONF_MARGIN, 0, 0, 0, &v), VSR_OK);
    assert_true(v == 0.0); /* margin ≤ 0 → 0 */
    t[0].logprob = 0;
    t[1].logprob = 0;
    assert_int_equal(vsr__algo_confidence(&low, VSR_ALGO_CONF_AVG_LOGPROB, 0, 0, 0, &v), VSR_OK);
    assert_true(v == 1.0);
    low.has_logprobs = 0;
    assert_int_equal(vsr__algo_confidence(&low, VSR_ALGO_CONF_AVG_LOGPROB, 0, 0, 0, &v), VSR_ERR_INVALID);
    vsr_pool_free(&pool);
}

static void test_confidence_names(void **state)
{
    (void)state;
    assert_true(vsr__algo_confidence_default_threshold("avg_logprob") == -1.0);
    assert_true(vsr__algo_confidence_default_threshold(NULL) == -1.0);
    assert_true(vsr__algo_confidence_default_threshold("margin") == 0.5);
    assert_true(vsr__algo_confidence_default_threshold("hybrid") == 0.5);
    assert_true(vsr__algo_confidence_default_threshold("self_verify") == 0.7);
    assert_true(vsr__algo_confidence_default_threshold("automix_entailment") == 0.7);
    assert_true(vsr__algo_confidence_default_threshold("nope") == 0.0);
    assert_int_equal(vsr__algo_confidence_method(S("hybrid")), VSR_ALGO_CONF_HYBRID);
    assert_int_equal(vsr__algo_confidence_method(S("")), VSR_ALGO_CONF_AVG_LOGPROB);
    assert_int_equal(vsr__algo_confidence_method(S("Margin")), VSR_ERR_INVALID);
    assert_true(vsr__algo_confidence_needs_top2(VSR_ALGO_CONF_MARGIN));
    assert_false(vsr__algo_confidence_needs_top2(VSR_ALGO_CONF_AVG_LOGPROB));
}

/* ---- escalation order ------------------------------------------------------- */

static void test_param_size(void **state)
{
    (void)state;
    double v;
    assert_int_equal(vsr__algo_parse_param_size("8B", &v), VSR_OK);
    assert_true(v == 8e9);
    assert_int_equal(vsr__algo_parse_param_size("120M", &v), VSR_OK);
    assert_true(v == 1.2e8);
    assert_int_equal(vsr__algo_parse_param_size("1.5k", &v), VSR_OK);
    assert_true(v == 1500);
    assert_int_equal(vsr__algo_parse_param_size("70b", &v), VSR_OK);
    assert_true(v == 7e10);
    assert_int_equal(vsr__algo_parse_param_size("7", &v), VSR_OK);
    assert_true(v == 7);
    assert_int_equal(vsr__algo_parse_param_size(" 2T ", &v), VSR_OK);
    assert_true(v == 2e12);
    static const char *const bad[] = {"", "B", "8G", "8BB", "1.", ".5", "-1B", "8 B", "1e9", "abc", NULL,
                                      "123456789012345678901234567890123"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++)
        assert_int_equal(vsr__algo_parse_param_size(bad[i], &v), VSR_ERR_INVALID);
}

static void test_escalation_order(void **state)
{
    (void)state;
    vsr_algo_candidate_t c[5] = {
        {70e9, 3.0, 0.9}, {NAN, 1.0, NAN}, {8e9, NAN, 0.6}, {8e9, 0.5, 0.5}, {1e9, 2.0, 0.4},
    };
    size_t o[5];
    vsr__algo_escalation_order(VSR_ALGO_ORDER_SIZE, c, 5, 0.3, o);
    size_t size_want[5] = {4, 2, 3, 0, 1}; /* ties (8B) keep declared order, unknown last */
    assert_memory_equal(o, size_want, sizeof(o));
    vsr__algo_escalation_order(VSR_ALGO_ORDER_COST, c, 5, 0.3, o);
    size_t cost_want[5] = {3, 1, 4, 0, 2};
    assert_memory_equal(o, cost_want, sizeof(o));
    vsr__algo_escalation_order(VSR_ALGO_ORDER_DECLARED, c, 5, 0.3, o);
    size_t decl_want[5] = {0, 1, 2, 3, 4};
    assert_memory_equal(o, decl_want, sizeof(o));
    /* automix, t = 0.3, max cost 3: costScores 0, 2/3, 0.5 (unknown), 5/6, 1/3
     * values: 0.63, 0.55, 0.57, 0.6, 0.38 → descending */
    vsr__algo_escalation_order(VSR_ALGO_ORDER_AUTOMIX, c, 5, 0.3, o);
    size_t mix_want[5] = {0, 3, 2, 1, 4};
    assert_memory_equal(o, mix_want, sizeof(o));
    /* t = 1: cost only (unknown cost scores 0.5) */
    vsr__algo_escalation_order(VSR_ALGO_ORDER_AUTOMIX, c, 5, 1.0, o);
    size_t cheap_want[5] = {3, 1, 2, 4, 0};
    assert_memory_equal(o, cheap_want, sizeof(o));
    /* more candidates than the on-stack keys: sizes 69..0 then one unknown → reversed, unknown last */
    vsr_algo_candidate_t many[71];
    size_t mo[71];
    for (size_t i = 0; i < 70; i++)
        many[i] = (vsr_algo_candidate_t){(double)(69 - i), NAN, NAN};
    many[70] = (vsr_algo_candidate_t){NAN, NAN, NAN};
    vsr__algo_escalation_order(VSR_ALGO_ORDER_SIZE, many, 71, 0.3, mo);
    for (size_t i = 0; i < 70; i++)
        assert_int_equal(mo[i], 69 - i);
    assert_int_equal(mo[70], 70);
    assert_int_equal(vsr__algo_order_parse(S("small_to_large")), VSR_ALGO_ORDER_SIZE);
    assert_int_equal(vsr__algo_order_parse(S("automix")), VSR_ALGO_ORDER_AUTOMIX);
    assert_int_equal(vsr__algo_order_parse(S("random")), VSR_ERR_INVALID);
}

/* ---- ReMoM ------------------------------------------------------------------ */

/* pcg32_srandom_r(42, 54): the first outputs of O'Neill's pcg32-demo. */
static void test_pcg_reference(void **state)
{
    (void)state;
    vsr_algo_pcg_t g;
    vsr__algo_pcg_seed(&g, 42);
    static const uint32_t want[6] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
    for (int i = 0; i < 6; i++)
        assert_int_equal(vsr__algo_pcg_next(&g), want[i]);
    vsr__algo_pcg_seed(&g, 42);
    for (int i = 0; i < 1000; i++)
        assert_true(vsr__algo_pcg_bounded(&g, 7) < 7);
    assert_int_equal(vsr__algo_pcg_bounded(&g, 0), 0);
    size_t a[4] = {0, 1, 2, 3};
    vsr__algo_pcg_seed(&g, 42);
    vsr__algo_pcg_shuffle(&g, a, 4);
    size_t want_a[4] = {1, 2, 0, 3};
    assert_memory_equal(a, want_a, sizeof(a));
}

static void test_remom_distribute(void **state)
{
    (void)state;
    size_t out[8];
    /* 7 calls over {3,1}: shares 5.25 and 1.75 → 5 + 1, the left call to the
     * larger remainder (0.75) → {5,2}; then shuffled by PCG(42). */
    double w31[2] = {3, 1};
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_WEIGHTED, w31, 2, 7, 42, out), VSR_OK);
    size_t want31[7] = {0, 0, 0, 1, 1, 0, 0};
    assert_memory_equal(out, want31, sizeof(want31));
    /* equal remainders: {1,1,1}, 4 calls → the tie-break permutation of PCG(42)
     * over [0,1,2] is [2,1,0], so model 2 gets the extra call: [0,1,2,2] shuffled */
    double w111[3] = {1, 1, 1};
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_WEIGHTED, w111, 3, 4, 42, out), VSR_OK);
    size_t want111[4] = {1, 2, 0, 2};
    assert_memory_equal(out, want111, sizeof(want111));
    /* equal: 5 over 3 → 2,2,1 → [0,0,1,1,2] shuffled */
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_EQUAL, NULL, 3, 5, 42, out), VSR_OK);
    size_t want_eq[5] = {0, 2, 1, 0, 1};
    assert_memory_equal(out, want_eq, sizeof(want_eq));
    /* all weights ≤ 0 (or not finite) → equal */
    double wneg[3] = {0, -1, NAN};
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_WEIGHTED, wneg, 3, 5, 42, out), VSR_OK);
    assert_memory_equal(out, want_eq, sizeof(want_eq));
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_ROUND_ROBIN, NULL, 3, 5, 42, out), VSR_OK);
    size_t want_rr[5] = {0, 1, 2, 0, 1};
    assert_memory_equal(out, want_rr, sizeof(want_rr));
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_FIRST_ONLY, NULL, 3, 3, 42, out), VSR_OK);
    size_t want_first[3] = {0, 0, 0};
    assert_memory_equal(out, want_first, sizeof(want_first));
    /* counts always add up, whatever the weights */
    double wodd[3] = {0.1, 1e-300, 7.7};
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_WEIGHTED, wodd, 3, 8, 7, out), VSR_OK);
    for (int i = 0; i < 8; i++)
        assert_true(out[i] < 3);
    assert_int_equal(vsr__algo_remom_distribute(VSR_ALGO_DIST_EQUAL, NULL, 0, 1, 42, out), VSR_ERR_INVALID);
    assert_int_equal(vsr__algo_remom_distribute(99, NULL, 1, 1, 42, out), VSR_ERR_INVALID);
    assert_int_equal(vsr__algo_dist_parse(S("round_robin")), VSR_ALGO_DIST_ROUND_ROBIN);
    assert_int_equal(vsr__algo_dist_parse(S("x")), VSR_ERR_INVALID);
}

static void test_remom_order(void **state)
{
    (void)state;
    /* by length: [1,3,2,0]; PCG(42) permutes 4 positions as [1,2,0,3] */
    size_t lens[4] = {30, 10, 20, 10};
    size_t out[4];
    vsr__algo_remom_order(lens, 4, 42, out);
    size_t want[4] = {3, 2, 1, 0};
    assert_memory_equal(out, want, sizeof(want));
    /* the order depends on the lengths, not on arrival */
    size_t lens2[4] = {10, 20, 10, 30};
    vsr__algo_remom_order(lens2, 4, 42, out);
    size_t want2[4] = {2, 1, 0, 3};
    assert_memory_equal(out, want2, sizeof(want2));
}

static void test_compact(void **state)
{
    (void)state;
    vsr_slice_t t = S("abcdefghij");
    assert_slice(vsr__algo_compact_last_tokens(t, 2), "cdefghij");
    assert_slice(vsr__algo_compact_last_tokens(t, 3), "abcdefghij");
    assert_slice(vsr__algo_compact_last_tokens(t, 0), "abcdefghij");
    assert_slice(vsr__algo_compact_last_tokens(t, UINT64_MAX), "abcdefghij");
    /* "xé€😀": x(1) é(2) €(3) 😀(4) = 10 bytes; the last 4 bytes start inside € */
    vsr_slice_t u = S("x\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    assert_slice(vsr__algo_compact_last_tokens(u, 1), "\xf0\x9f\x98\x80");
    /* the last 8 bytes start in é's second byte → moved to € */
    assert_slice(vsr__algo_compact_last_tokens(u, 2), "\xe2\x82\xac\xf0\x9f\x98\x80");
}

static void test_remom_prompt(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_slice_t ans[2] = {S("one"), S("two")};
    assert_int_equal(vsr__algo_remom_prompt(&b, "Q={question} N={count} {x}\n{responses}.", S("why?"), ans, 2),
                     VSR_OK);
    assert_slice(vsr_buf_slice(&b), "Q=why? N=2 {x}\nResponse 1:\none\n\nResponse 2:\ntwo.");
    vsr_buf_reset(&b);
    assert_int_equal(vsr__algo_remom_prompt(&b, NULL, S("why?"), ans, 2), VSR_OK);
    assert_non_null(strstr(b.data, "Question:\nwhy?\n\nResponse 1:\none"));
    assert_non_null(strstr(b.data, "2 candidate responses"));
    vsr_buf_free(&b);
    /* a capped buffer fails cleanly */
    vsr_buf_init(&b, 8);
    assert_int_equal(vsr__algo_remom_prompt(&b, NULL, S("why?"), ans, 2), VSR_ERR_TOO_BIG);
    vsr_buf_free(&b);
}

static void test_remom_pick(void **state)
{
    (void)state;
    size_t i;
    vsr_algo_answer_t a[] = {
        {S("short"), 1}, {S("longer!"), 1}, {S("longer?"), 2}, {S(" \n"), 3}, {S("final"), 3}, {S("final2"), 3},
    };
    assert_int_equal(vsr__algo_remom_pick(a, 6, 3, &i), VSR_OK);
    assert_int_equal(i, 4); /* first non-blank answer of the final round */
    assert_int_equal(vsr__algo_remom_pick(a, 4, 3, &i), VSR_OK);
    assert_int_equal(i, 2); /* final blank: longest earlier, tie to the newer round */
    assert_int_equal(vsr__algo_remom_pick(a, 1, 3, &i), VSR_OK);
    assert_int_equal(i, 0);
    vsr_algo_answer_t none[] = {{S(""), 1}, {S("\t"), 2}};
    assert_int_equal(vsr__algo_remom_pick(none, 2, 3, &i), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr__algo_remom_pick(NULL, 0, 1, &i), VSR_ERR_NOT_FOUND);
}

/* ---- Fusion ------------------------------------------------------------------ */

static void test_fusion_prompts(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_slice_t models[2] = {S("a"), S("b")};
    vsr_slice_t ans[2] = {S("yes"), S("no")};
    assert_int_equal(vsr__algo_fusion_analysis_prompt(&b, NULL, models, ans, 2), VSR_OK);
    assert_non_null(strstr(b.data, "Response 1 (a):\nyes\n\nResponse 2 (b):\nno\n\n"));
    assert_non_null(strstr(b.data, "\"blind_spots\""));
    vsr_buf_reset(&b);
    assert_int_equal(vsr__algo_fusion_synthesis_prompt(&b, NULL, S("q"), models, ans, 2, S("{\"consensus\":[]}"), 0),
                     VSR_OK);
    assert_non_null(strstr(b.data, "An analysis of the responses (JSON):\n{\"consensus\":[]}\n\nSynthesize"));
    assert_non_null(strstr(b.data, "\n\nOutput contract: "));
    assert_null(strstr(b.data, "silently"));
    vsr_buf_reset(&b);
    assert_int_equal(vsr__algo_fusion_synthesis_prompt(&b, NULL, S("q"), models, ans, 2, S(""), 1), VSR_OK);
    assert_null(strstr(b.data, "An analysis"));
    assert_non_null(strstr(b.data, "silently. Synthesize"));
    vsr_buf_reset(&b);
    assert_int_equal(vsr__algo_fusion_synthesis_prompt(&b, "{question}|{analysis}|{count}", S("q"), models, ans, 2,
                                                       S(""), 0),
                     VSR_OK);
    assert_true(strncmp(b.data, "q||2\n\nOutput contract: ", 23) == 0);
    vsr_buf_free(&b);
}

static void test_fusion_parse_analysis(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t out;
    const char *fenced = "  ```json\n{\"consensus\":[\"a\",\"b\",\"c\"],\"blind_spots\":\"x\\\"y\",\"other\":1,"
                         "\"contradictions\":null,\"unique_insights\":[1,\"u\"]}\n```\n";
    assert_int_equal(vsr__algo_fusion_parse_analysis(vsr_slice_cstr(fenced), &pool, &out), VSR_OK);
    assert_slice(out, "{\"consensus\":[\"a\",\"b\"],\"contradictions\":[],\"partial_coverage\":[],"
                      "\"unique_insights\":[\"u\"],\"blind_spots\":[\"x\\\"y\"]}");
    assert_int_equal(vsr__algo_fusion_parse_analysis(S("{\"consensus\":[\"a\"]}"), &pool, &out), VSR_OK);
    static const char *const bad[] = {
        "", "Here is the analysis: {\"consensus\":[\"a\"]}", "[\"a\"]", "{\"consensus\":5}", "{}",
        "```python\n{\"consensus\":[\"a\"]}\n```", "{\"consensus\":[\"a\"]} trailing",
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++)
        assert_int_equal(vsr__algo_fusion_parse_analysis(vsr_slice_cstr(bad[i]), &pool, &out), VSR_ERR_INVALID);
    vsr_pool_free(&pool);
}

/* ---- response assembly --------------------------------------------------------- */

static void test_ratings_response(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_slice_t models[2] = {S("m1"), S("m\"2")};
    vsr_slice_t contents[2] = {S("hi\n"), S("\xc3\xa9")};
    assert_int_equal(vsr__algo_ratings_response(&b, 123, 456, models, contents, 2, 10, 5), VSR_OK);
    assert_slice(vsr_buf_slice(&b),
                 "{\"id\":\"chatcmpl-looper-123\",\"object\":\"chat.completion\",\"created\":456,"
                 "\"model\":\"m1,m\\\"2\",\"choices\":["
                 "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\\n\"},\"finish_reason\":\"stop\","
                 "\"model\":\"m1\"},"
                 "{\"index\":1,\"message\":{\"role\":\"assistant\",\"content\":\"\xc3\xa9\"},\"finish_reason\":\"stop\","
                 "\"model\":\"m\\\"2\"}],"
                 "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}");
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, b.data, b.len, NULL), VSR_OK);
    vsr_json_free(&j);
    vsr_buf_free(&b);
}

static void test_with_usage(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    const char *in = " {\"id\":\"x\", \"usage\" : {\"prompt_tokens\":1},\"choices\":[]}\n";
    assert_int_equal(vsr__algo_with_usage(&b, in, strlen(in), 5, 7, S("\"extra\":[1]")), VSR_OK);
    assert_slice(vsr_buf_slice(&b), " {\"id\":\"x\", \"usage\" : {\"prompt_tokens\":5,\"completion_tokens\":7,"
                                    "\"total_tokens\":12},\"choices\":[],\"extra\":[1]}\n");
    vsr_buf_reset(&b);
    const char *no_usage = "{\"id\":\"x\"}";
    assert_int_equal(vsr__algo_with_usage(&b, no_usage, strlen(no_usage), 1, 2, S("")), VSR_OK);
    assert_slice(vsr_buf_slice(&b),
                 "{\"id\":\"x\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}");
    vsr_buf_reset(&b);
    assert_int_equal(vsr__algo_with_usage(&b, "{}", 2, 0, 0, S("\"e\":1")), VSR_OK);
    assert_slice(vsr_buf_slice(&b), "{\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0},\"e\":1}");
    vsr_buf_reset(&b);
    assert_int_equal(vsr__algo_with_usage(&b, "[1]", 3, 0, 0, S("")), VSR_ERR_INVALID);
    assert_int_equal(vsr__algo_with_usage(&b, "{", 1, 0, 0, S("")), VSR_ERR_INVALID);
    vsr_buf_free(&b);
}

static void test_sse_basic(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr__algo_sse_from_completion(&b, body_basic, strlen(body_basic), 1), VSR_OK);
    vsr_buf_append(&b, "", 1);
    const char *want =
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\/a\","
        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"think\"},"
        "\"finish_reason\":null}]}\n\n"
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\/a\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\\"b\\\\n\xc3\xa9\"},\"finish_reason\":null}]}\n\n"
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\/a\","
        "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\\/a\","
        "\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":3,\"total_tokens\":14}}\n\n"
        "data: [DONE]\n\n";
    assert_string_equal(b.data, want);
    vsr_buf_reset(&b);
    assert_int_equal(vsr__algo_sse_from_completion(&b, body_basic, strlen(body_basic), 0), VSR_OK);
    vsr_buf_append(&b, "", 1);
    assert_null(strstr(b.data, "usage"));
    assert_int_equal(vsr__algo_sse_from_completion(&b, "{}", 2, 0), VSR_ERR_INVALID);
    vsr_buf_free(&b);
}

/* Every event of an SSE text must be valid JSON (or [DONE]); returns the
 * number of events and appends the concatenated delta contents to text. */
static size_t check_events(const char *sse, vsr_buf_t *text)
{
    size_t n = 0;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    for (const char *p = sse; *p;) {
        assert_true(strncmp(p, "data: ", 6) == 0);
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        const char *d = p + 6;
        size_t len = (size_t)(end - d);
        if (!(len == 6 && memcmp(d, "[DONE]", 6) == 0)) {
            vsr_json_t j;
            assert_int_equal(vsr_json_parse(&j, d, len, NULL), VSR_OK);
            uint32_t ch, delta, c;
            if (vsr_json_object_get(&j, 0, "choices", &ch) == VSR_OK && j.toks[ch].count &&
                vsr_json_object_get(&j, ch + 1, "delta", &delta) == VSR_OK &&
                vsr_json_object_get(&j, delta, "content", &c) == VSR_OK) {
                vsr_slice_t s;
                assert_int_equal(vsr_json_string(&j, c, &pool, &s), VSR_OK);
                assert_true(s.len <= VSR_ALGO_SSE_PIECE);
                vsr_buf_append_slice(text, s);
            }
            vsr_json_free(&j);
        }
        n++;
        p = end + 2;
    }
    vsr_pool_free(&pool);
    return n;
}

static void test_sse_pieces_and_tool_calls(void **state)
{
    (void)state;
    /* content: 1023 × 'a', then é (2 bytes) straddling the 1024 cut, then 1500 × 'b' */
    vsr_buf_t content, body, out, text;
    vsr_buf_init(&content, 0);
    for (int i = 0; i < 1023; i++)
        vsr_buf_append(&content, "a", 1);
    vsr_buf_append_cstr(&content, "\xc3\xa9");
    for (int i = 0; i < 1500; i++)
        vsr_buf_append(&content, "b", 1);
    vsr_buf_init(&body, 0);
    vsr_buf_append_cstr(&body, "{\"choices\":[{\"message\":{\"content\":");
    vsr_buf_append_json_string(&body, vsr_buf_slice(&content));
    vsr_buf_append_cstr(&body, ",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}},"
                               "{\"index\":1,\"message\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}");
    vsr_buf_init(&out, 0);
    vsr_buf_init(&text, 0);
    assert_int_equal(vsr__algo_sse_from_completion(&out, body.data, body.len, 1), VSR_OK);
    vsr_buf_append(&out, "", 1);
    /* choice 0: 3 content pieces (1023, 1024, 478), tool calls, finish; choice 1: role, finish;
     * usage; [DONE] */
    assert_int_equal(check_events(out.data, &text), 3 + 1 + 1 + 2 + 1 + 1);
    assert_true(vsr_slice_eq(vsr_buf_slice(&text), vsr_buf_slice(&content)));
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"index\":0,\"id\":\"c\""));
    assert_int_equal(count_of(out.data, "\"role\":\"assistant\""), 2);
    assert_non_null(strstr(out.data, "\"id\":\"\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"\""));
    assert_non_null(strstr(out.data, "{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}"));
    assert_non_null(strstr(out.data, "{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}"));
    vsr_buf_free(&content);
    vsr_buf_free(&body);
    vsr_buf_free(&out);
    vsr_buf_free(&text);
}

/* Raw JSON copied into an event (tool calls, usage) loses its line breaks:
 * a pretty-printed body must not end an event early. */
static void test_sse_pretty_body(void **state)
{
    (void)state;
    const char *b = "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[\n\n{\"id\":\"c\",\r\n\"index\":3}]}}],"
                    "\"usage\":{\n\n\"prompt_tokens\":1}}";
    vsr_buf_t out, text;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&text, 0);
    assert_int_equal(vsr__algo_sse_from_completion(&out, b, strlen(b), 1), VSR_OK);
    vsr_buf_append(&out, "", 1);
    assert_int_equal(check_events(out.data, &text), 5); /* role, tool calls, finish, usage, [DONE] */
    assert_null(strstr(out.data, "\r"));
    assert_non_null(strstr(out.data, "\"tool_calls\":[{\"id\":\"c\",\"index\":3}]")); /* its own index kept */
    vsr_buf_free(&out);
    vsr_buf_free(&text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_basic),
        cmocka_unit_test(test_parse_tool_calls_and_reasoning_alias),
        cmocka_unit_test(test_parse_refuses),
        cmocka_unit_test(test_tool_arg_tokens),
        cmocka_unit_test(test_tool_arg_string_value),
        cmocka_unit_test(test_confidence_values),
        cmocka_unit_test(test_confidence_names),
        cmocka_unit_test(test_param_size),
        cmocka_unit_test(test_escalation_order),
        cmocka_unit_test(test_pcg_reference),
        cmocka_unit_test(test_remom_distribute),
        cmocka_unit_test(test_remom_order),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_remom_prompt),
        cmocka_unit_test(test_remom_pick),
        cmocka_unit_test(test_fusion_prompts),
        cmocka_unit_test(test_fusion_parse_analysis),
        cmocka_unit_test(test_ratings_response),
        cmocka_unit_test(test_with_usage),
        cmocka_unit_test(test_sse_basic),
        cmocka_unit_test(test_sse_pieces_and_tool_calls),
        cmocka_unit_test(test_sse_pretty_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
