/* test_chatview.c — the OpenAI request view: chat, completions, responses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "json/json.h"

typedef struct {
    vsr_json_t j;
    vsr_pool_t pool;
    vsr_chat_view_t v;
    const char *src;
    const char *why;
} fx_t;

static int fx_build(fx_t *f, const char *src, vsr_api_kind_t api)
{
    f->src = src;
    vsr_pool_init(&f->pool);
    assert_int_equal(vsr_json_parse(&f->j, src, strlen(src), NULL), VSR_OK);
    f->why = "unset";
    return vsr_chat_view_build(&f->j, api, &f->pool, &f->v, &f->why);
}

static void fx_close(fx_t *f)
{
    vsr_json_free(&f->j);
    vsr_pool_free(&f->pool);
}

static void assert_text(vsr_slice_t s, const char *want)
{
    if (s.len != strlen(want) || (s.len && memcmp(s.p, want, s.len) != 0))
        fail_msg("text '%.*s' want '%s'", (int)s.len, s.p ? s.p : "", want);
}

static int in_src(const fx_t *f, vsr_slice_t s)
{
    return s.p >= f->src && s.p + s.len <= f->src + strlen(f->src);
}

static void test_chat_conversation(void **state)
{
    (void)state;
    fx_t f;
    const char *body =
        "{\"model\":\"auto\",\"stream\":true,"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\"}],"
        "\"tool_choice\":\"auto\","
        "\"messages\":["
        "{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"developer\",\"content\":\"dev\"},"
        "{\"role\":\"user\",\"content\":\"what is 2+2?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\"}]},"
        "{\"role\":\"tool\",\"content\":\"4\",\"tool_call_id\":\"c1\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"look\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:x\"}},{\"type\":\"text\",\"text\":\"here\"}]},"
        "{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":[]}"
        "]}";
    assert_int_equal(fx_build(&f, body, VSR_API_CHAT), VSR_OK);
    assert_null(f.why);
    const vsr_chat_view_t *v = &f.v;
    assert_int_equal(v->api, VSR_API_CHAT);
    assert_int_equal(v->n_messages, 7);
    uint32_t msgs;
    assert_int_equal(vsr_json_object_get(&f.j, 0, "messages", &msgs), VSR_OK);
    assert_int_equal(v->messages_tok, msgs);
    static const vsr_role_t roles[] = {VSR_ROLE_SYSTEM, VSR_ROLE_DEVELOPER, VSR_ROLE_USER, VSR_ROLE_ASSISTANT,
                                       VSR_ROLE_TOOL,   VSR_ROLE_USER,      VSR_ROLE_ASSISTANT};
    uint32_t c = msgs + 1;
    for (size_t i = 0; i < 7; i++, c = f.j.toks[c].next) {
        assert_int_equal(v->messages[i].role, roles[i]);
        assert_int_equal(v->messages[i].tok, c);
    }
    assert_text(v->messages[0].text, "be brief");
    assert_true(in_src(&f, v->messages[0].text)); /* zero copy */
    assert_text(v->messages[2].text, "what is 2+2?");
    assert_text(v->messages[3].text, "");
    assert_true(v->messages[3].content_tok != 0); /* null is present */
    assert_int_equal(vsr_json_type(&f.j, v->messages[3].content_tok), VSR_JSON_NULL);
    assert_true(v->messages[3].has_tool_calls);
    assert_false(v->messages[6].has_tool_calls); /* empty array */
    assert_text(v->messages[5].text, "look\nhere");
    assert_true(v->messages[5].has_image);
    assert_false(v->messages[2].has_image);
    assert_int_equal(vsr_json_type(&f.j, v->messages[5].content_tok), VSR_JSON_ARRAY);
    assert_int_equal(v->last_user, 5);
    assert_int_equal(v->n_tools, 2);
    assert_text(v->tool_choice, "auto");
    assert_int_equal(v->stream, 1);
    assert_int_equal(v->text_bytes, 8 + 3 + 12 + 0 + 1 + 9 + 2);
    fx_close(&f);
}

static void test_chat_escapes_and_parts(void **state)
{
    (void)state;
    fx_t f;
    const char *body = "{\"messages\":["
                       "{\"role\":\"user\",\"content\":\"a \\\"q\\\"\\nb \\u00e9\\ud83d\\ude00\"},"
                       "{\"role\":\"user\",\"content\":[{\"text\":\"no type\"},{\"type\":\"text\",\"text\":\"\"},"
                       "{\"type\":\"input_text\",\"text\":\"t\\tx\"},7,{\"type\":\"file\",\"text\":\"skip\"},"
                       "{\"type\":\"input_image\",\"image_url\":\"u\"}]},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"single\"}]},"
                       "{\"role\":\"user\",\"content\":[]},"
                       "{\"role\":\"user\"}"
                       "],\"stream\":false,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}";
    assert_int_equal(fx_build(&f, body, VSR_API_CHAT), VSR_OK);
    const vsr_chat_view_t *v = &f.v;
    assert_int_equal(v->n_messages, 5);
    assert_text(v->messages[0].text, "a \"q\"\nb \xc3\xa9\xf0\x9f\x98\x80");
    assert_false(in_src(&f, v->messages[0].text)); /* decoded into the pool */
    assert_text(v->messages[1].text, "no type\nt\tx");
    assert_true(v->messages[1].has_image);
    assert_text(v->messages[2].text, "single");
    assert_true(in_src(&f, v->messages[2].text));
    assert_text(v->messages[3].text, "");
    assert_text(v->messages[4].text, "");
    assert_int_equal(v->messages[4].content_tok, 0);
    assert_int_equal(v->last_user, 4);
    assert_int_equal(v->stream, 0);
    assert_text(v->tool_choice, "required");
    assert_int_equal(v->n_tools, 0);
    fx_close(&f);
}

static void test_chat_odd_messages(void **state)
{
    (void)state;
    fx_t f;
    const char *body = "{\"messages\":[\"hello\",{\"role\":\"function\",\"content\":\"x\"},{\"role\":5},"
                       "{\"role\":\"User\",\"content\":\"case\"},{\"role\":\"system\",\"content\":{\"a\":1}},"
                       "{\"role\":\"user\",\"content\":\"u\",\"tool_calls\":[1]}],"
                       "\"stream\":\"true\",\"tool_choice\":\"n\\u006fne\",\"tools\":{}}";
    assert_int_equal(fx_build(&f, body, VSR_API_CHAT), VSR_OK);
    const vsr_chat_view_t *v = &f.v;
    assert_int_equal(v->n_messages, 6);
    assert_int_equal(v->messages[0].role, VSR_ROLE_OTHER);
    assert_int_equal(vsr_json_type(&f.j, v->messages[0].tok), VSR_JSON_STRING);
    assert_int_equal(v->messages[1].role, VSR_ROLE_OTHER);
    assert_text(v->messages[1].text, "x");
    assert_int_equal(v->messages[2].role, VSR_ROLE_OTHER);
    assert_int_equal(v->messages[3].role, VSR_ROLE_OTHER); /* roles are case-sensitive */
    assert_int_equal(v->messages[4].role, VSR_ROLE_SYSTEM);
    assert_text(v->messages[4].text, "");
    assert_false(v->messages[5].has_tool_calls); /* only assistants call tools */
    assert_int_equal(v->last_user, 5);
    assert_int_equal(v->stream, 0);
    assert_text(v->tool_choice, "none");
    assert_int_equal(v->n_tools, 0);
    fx_close(&f);

    assert_int_equal(fx_build(&f, "{\"messages\":[]}", VSR_API_CHAT), VSR_OK);
    assert_int_equal(f.v.n_messages, 0);
    assert_int_equal(f.v.last_user, -1);
    assert_int_equal(f.v.text_bytes, 0);
    assert_int_equal(f.v.tool_choice.len, 0);
    fx_close(&f);
}

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        vsr_api_kind_t api;
        const char *why;
    } cases[] = {
        {"{\"model\":\"m\"}", VSR_API_CHAT, "messages field is required"},
        {"{\"messages\":null}", VSR_API_CHAT, "messages field is required"},
        {"{\"messages\":\"hi\"}", VSR_API_CHAT, "messages field must be an array"},
        {"{\"messages\":{\"role\":\"user\"}}", VSR_API_CHAT, "messages field must be an array"},
        {"[{\"role\":\"user\"}]", VSR_API_CHAT, "request body must be a JSON object"},
        {"\"x\"", VSR_API_COMPLETIONS, "request body must be a JSON object"},
        {"{}", VSR_API_COMPLETIONS, "prompt field is required"},
        {"{\"prompt\":null}", VSR_API_COMPLETIONS, "prompt field is required"},
        {"{\"prompt\":3}", VSR_API_COMPLETIONS, "prompt field must be a string or an array"},
        {"{\"messages\":[]}", VSR_API_RESPONSES, "input field is required"},
        {"{\"input\":null,\"instructions\":\"x\"}", VSR_API_RESPONSES, "input field is required"},
        {"{\"input\":{}}", VSR_API_RESPONSES, "input field must be a string or an array"},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        fx_t f;
        assert_int_equal(fx_build(&f, cases[i].body, cases[i].api), VSR_ERR_INVALID);
        assert_non_null(f.why);
        if (strcmp(f.why, cases[i].why) != 0)
            fail_msg("%s: why '%s' want '%s'", cases[i].body, f.why, cases[i].why);
        assert_int_equal(f.v.n_messages, 0);
        fx_close(&f);
    }
    /* why may be NULL */
    fx_t f;
    vsr_pool_init(&f.pool);
    assert_int_equal(vsr_json_parse(&f.j, "{}", 2, NULL), VSR_OK);
    assert_int_equal(vsr_chat_view_build(&f.j, VSR_API_CHAT, &f.pool, &f.v, NULL), VSR_ERR_INVALID);
    fx_close(&f);
}

static void test_completions(void **state)
{
    (void)state;
    fx_t f;
    assert_int_equal(fx_build(&f, "{\"model\":\"m\",\"prompt\":\"Once upon\",\"stream\":true}", VSR_API_COMPLETIONS),
                     VSR_OK);
    assert_int_equal(f.v.api, VSR_API_COMPLETIONS);
    assert_int_equal(f.v.n_messages, 1);
    assert_int_equal(f.v.messages[0].role, VSR_ROLE_USER);
    assert_int_equal(f.v.messages[0].tok, 0);
    assert_text(f.v.messages[0].text, "Once upon");
    assert_int_equal(vsr_json_type(&f.j, f.v.messages[0].content_tok), VSR_JSON_STRING);
    assert_int_equal(f.v.messages_tok, 0);
    assert_int_equal(f.v.last_user, 0);
    assert_int_equal(f.v.text_bytes, 9);
    assert_int_equal(f.v.stream, 1);
    fx_close(&f);

    assert_int_equal(fx_build(&f, "{\"prompt\":[\"first\",\"second\"]}", VSR_API_COMPLETIONS), VSR_OK);
    assert_int_equal(f.v.n_messages, 1);
    assert_text(f.v.messages[0].text, "first");
    fx_close(&f);

    assert_int_equal(fx_build(&f, "{\"prompt\":[1,2,3]}", VSR_API_COMPLETIONS), VSR_OK);
    assert_int_equal(f.v.n_messages, 1);
    assert_text(f.v.messages[0].text, "");
    assert_int_equal(f.v.messages[0].content_tok, 0);
    fx_close(&f);

    assert_int_equal(fx_build(&f, "{\"prompt\":[]}", VSR_API_COMPLETIONS), VSR_OK);
    assert_int_equal(f.v.n_messages, 1);
    assert_text(f.v.messages[0].text, "");
    fx_close(&f);
}

static void test_responses(void **state)
{
    (void)state;
    fx_t f;
    assert_int_equal(fx_build(&f, "{\"model\":\"m\",\"input\":\"Tell me a joke\",\"instructions\":\"Be funny\"}",
                              VSR_API_RESPONSES),
                     VSR_OK);
    assert_int_equal(f.v.api, VSR_API_RESPONSES);
    assert_int_equal(f.v.n_messages, 2);
    assert_int_equal(f.v.messages[0].role, VSR_ROLE_SYSTEM);
    assert_text(f.v.messages[0].text, "Be funny");
    assert_int_equal(f.v.messages[1].role, VSR_ROLE_USER);
    assert_text(f.v.messages[1].text, "Tell me a joke");
    assert_int_equal(f.v.last_user, 1);
    assert_int_equal(f.v.text_bytes, 8 + 14);
    fx_close(&f);

    const char *body = "{\"input\":["
                       "{\"role\":\"user\",\"content\":\"hi\"},"
                       "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hello\"}]},"
                       "{\"type\":\"reasoning\",\"summary\":[]},"
                       "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},"
                       "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"42\"},"
                       "\"stray\","
                       "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"and\"},"
                       "{\"type\":\"input_image\",\"image_url\":\"u\"},{\"type\":\"input_text\",\"text\":\"this\"}]}"
                       "],\"instructions\":7,\"tools\":[{\"type\":\"web_search\"}],\"tool_choice\":\"required\"}";
    assert_int_equal(fx_build(&f, body, VSR_API_RESPONSES), VSR_OK);
    const vsr_chat_view_t *v = &f.v;
    assert_int_equal(v->n_messages, 5);
    assert_int_equal(v->messages[0].role, VSR_ROLE_USER);
    assert_text(v->messages[0].text, "hi");
    assert_int_equal(v->messages[1].role, VSR_ROLE_ASSISTANT);
    assert_text(v->messages[1].text, "hello");
    assert_int_equal(v->messages[2].role, VSR_ROLE_ASSISTANT);
    assert_true(v->messages[2].has_tool_calls);
    assert_int_equal(v->messages[3].role, VSR_ROLE_TOOL);
    assert_text(v->messages[3].text, "42");
    assert_int_equal(v->messages[4].role, VSR_ROLE_USER);
    assert_text(v->messages[4].text, "and\nthis");
    assert_true(v->messages[4].has_image);
    assert_int_equal(v->last_user, 4);
    assert_int_equal(v->n_tools, 1);
    assert_text(v->tool_choice, "required");
    assert_int_equal(v->messages_tok, 0);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_conversation),
        cmocka_unit_test(test_chat_escapes_and_parts),
        cmocka_unit_test(test_chat_odd_messages),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_completions),
        cmocka_unit_test(test_responses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
