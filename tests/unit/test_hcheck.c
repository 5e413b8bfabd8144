/*
 * test_hcheck.c — the hallucination plugin's pure parts (src/routing/hcheck.c):
 * the grounding context, the detector's verdict (spans quote the answer, the
 * taxonomy holds, a verdict of only bad spans is a failure), the warning
 * texts and the answer with the warning before every choice's content.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing-int.h"

static vsr_slice_t S(const char *s)
{
    return vsr_slice(s, strlen(s));
}

/* A detector answer whose message content is `verdict` (JSON, escaped here). */
static vsr_slice_t answer_of(vsr_pool_t *pool, const char *verdict)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    vsr_buf_append_json_string(&b, S(verdict));
    vsr_buf_append_cstr(&b, "}}]}");
    vsr_slice_t out = vsr_pool_dup_slice(pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return out;
}

static void test_parse(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr__hc_span_t spans[VSR__HC_MAX_SPANS];
    size_t n = 99;
    vsr_slice_t answer = S("Paris is in France. It has 90 million people.");
    /* a clean verdict */
    assert_int_equal(vsr__hc_parse(answer_of(&pool, "{\"hallucinated_spans\":[]}"), answer, &pool, spans, &n), VSR_OK);
    assert_int_equal(n, 0);
    /* a valid span; one not in the answer and one out of the taxonomy are left out */
    assert_int_equal(vsr__hc_parse(answer_of(&pool, "{\"hallucinated_spans\":["
                                                    "{\"text\":\"90 million\",\"category\":\" Contradiction\","
                                                    "\"subcategory\":\"numerical\"},"
                                                    "{\"text\":\"Berlin\",\"category\":\"contradiction\","
                                                    "\"subcategory\":\"entity\"},"
                                                    "{\"text\":\"Paris\",\"category\":\"lie\",\"subcategory\":\"entity\"}]}"),
                                   answer, &pool, spans, &n),
                     VSR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(spans[0].text.len, strlen("90 million"));
    assert_memory_equal(spans[0].text.p, "90 million", spans[0].text.len);
    /* only bad spans: a failed verdict, not a clean one */
    assert_int_equal(vsr__hc_parse(answer_of(&pool, "{\"hallucinated_spans\":[{\"text\":\"Berlin\","
                                                    "\"category\":\"contradiction\",\"subcategory\":\"entity\"}]}"),
                                   answer, &pool, spans, &n),
                     VSR_ERR_INVALID);
    /* the array missing or null, content not JSON, no choices: failures */
    assert_int_equal(vsr__hc_parse(answer_of(&pool, "{}"), answer, &pool, spans, &n), VSR_ERR_INVALID);
    assert_int_equal(vsr__hc_parse(answer_of(&pool, "{\"hallucinated_spans\":null}"), answer, &pool, spans, &n),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr__hc_parse(answer_of(&pool, "```json\n{}```"), answer, &pool, spans, &n), VSR_ERR_INVALID);
    assert_int_equal(vsr__hc_parse(S("{\"choices\":[]}"), answer, &pool, spans, &n), VSR_ERR_INVALID);
    assert_int_equal(vsr__hc_parse(S("not json"), answer, &pool, spans, &n), VSR_ERR_INVALID);
    vsr_pool_free(&pool);
}

static void test_context(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_message_t m[4] = {
        {.role = VSR_ROLE_USER, .text = S("q")},
        {.role = VSR_ROLE_TOOL, .text = S("first result")},
        {.role = VSR_ROLE_ASSISTANT, .text = S("x")},
        {.role = VSR_ROLE_TOOL, .text = S("second result")},
    };
    vsr_chat_view_t chat = {.messages = m, .n_messages = 4, .last_user = 0};
    vsr_slice_t c = vsr__hc_context(&chat, VSR_SLICE_NULL, &pool);
    assert_int_equal(c.len, strlen("first result\n\nsecond result"));
    assert_memory_equal(c.p, "first result\n\nsecond result", c.len);
    /* retrieved documents win */
    c = vsr__hc_context(&chat, S("retrieved"), &pool);
    assert_int_equal(c.len, strlen("retrieved"));
    /* no tool message: no context */
    chat.n_messages = 1;
    assert_int_equal(vsr__hc_context(&chat, VSR_SLICE_NULL, &pool).len, 0);
    vsr_pool_free(&pool);
}

static void test_prepend_and_warnings(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    const char *body = "{\"id\":\"x\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"A \\\"q\\\"\"}},"
                       "{\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}}],\"usage\":{}}";
    vsr_buf_append_cstr(&out, body);
    vsr__hc_span_t sp[2] = {{S("one")}, {S("two")}};
    vsr_slice_t w = vsr__hc_warning(1, sp, 2, &pool);
    const char *want_w = "[Hallucination Warning] This response may contain unsupported claims (confidence: 100%). "
                         "Unsupported spans: \"one\", \"two\". Please verify the information independently.";
    assert_int_equal(w.len, strlen(want_w));
    assert_memory_equal(w.p, want_w, w.len);
    w = vsr__hc_warning(0, NULL, 0, &pool);
    assert_int_equal(vsr__hc_prepend(out.data, out.len, w, &pool, &out), VSR_OK); /* in place */
    const char *want = "{\"id\":\"x\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":"
                       "\"[Hallucination Warning] This response may contain unsupported claims. Please verify the "
                       "information independently.\\n\\nA \\\"q\\\"\"}},"
                       "{\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}}],\"usage\":{}}";
    vsr_buf_append(&out, "", 1);
    assert_string_equal(out.data, want);
    vsr_buf_reset(&out);
    vsr_buf_append_cstr(&out, "[1]");
    assert_int_equal(vsr__hc_prepend(out.data, out.len, w, &pool, &out), VSR_ERR_INVALID);
    assert_int_equal(out.len, 3);
    vsr_buf_free(&out);
    vsr_pool_free(&pool);
}

static void test_request(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr__hc_request(&b, "judge", 1, S("ctx"), S("q?"), S("a."));
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    assert_int_equal(vsr_json_parse(&j, b.data, b.len, NULL), VSR_OK);
    assert_non_null(strstr(b.data, "\"strict\":true"));
    assert_non_null(strstr(b.data, "\"required\":[\"text\",\"category\",\"subcategory\",\"explanation\"]"));
    assert_non_null(strstr(b.data, "\"content\":\"User request: q?\\n\\nExcerpt 1:\\nctx\\n\\nAnswer to verify:\\na.\""));
    assert_non_null(strstr(b.data, "and give a short explanation of why it is unsupported.\\n\\nCategories"));
    vsr_json_free(&j);
    vsr_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_context),
        cmocka_unit_test(test_prepend_and_warnings),
        cmocka_unit_test(test_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
