/* test_anthropic.c — the Anthropic Messages codec: requests and answers both
 * ways with the shapes of Anthropic's and OpenAI's documentation, errors,
 * streams fed whole and one byte at a time, and hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "json/json.h"
#include "proto/anthropic.h"

/* ---- helpers ------------------------------------------------------------ */

static void assert_json(const char *s, size_t n)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, s, n, NULL);
    if (rc != VSR_OK)
        fprintf(stderr, "not JSON: %.*s\n", (int)n, s);
    assert_int_equal(rc, VSR_OK);
    vsr_json_free(&j);
}

typedef int (*conv_fn)(const char *, size_t, const vsr_anthropic_limits_t *, vsr_buf_t *, vsr_anthropic_error_t *);

/* Converts; on VSR_OK checks the output is JSON and returns it (static). */
static const char *conv(conv_fn f, const char *in, int want_rc, vsr_anthropic_error_t *err)
{
    static char out[65536];
    vsr_buf_t b;
    vsr_buf_init(&b, 1 << 20);
    vsr_anthropic_error_t e;
    int rc = f(in, strlen(in), NULL, &b, &e);
    if (rc != want_rc)
        fprintf(stderr, "rc %d (%s: %s) out %.*s\n", rc, e.type ? e.type : "-", e.message, (int)b.len, b.data);
    assert_int_equal(rc, want_rc);
    if (rc == VSR_OK) {
        assert_json(b.data, b.len);
        assert_true(b.len < sizeof(out));
        memcpy(out, b.data, b.len);
        out[b.len] = '\0';
    } else {
        assert_non_null(e.type);
        out[0] = '\0';
    }
    if (err)
        *err = e;
    vsr_buf_free(&b);
    return out;
}

static void assert_err(conv_fn f, const char *in, int want_rc, const char *type, const char *message)
{
    vsr_anthropic_error_t e;
    conv(f, in, want_rc, &e);
    assert_string_equal(e.type, type);
    assert_string_equal(e.message, message);
}

static int to_chat_at(const char *b, size_t n, const vsr_anthropic_limits_t *l, vsr_buf_t *o, vsr_anthropic_error_t *e)
{
    return vsr_anthropic_response_to_chat(b, n, l, 1700000000, o, e);
}

/* ---- ingress request ------------------------------------------------------ */

static void test_ingress_simple(void **state)
{
    (void)state;
    const char *in = "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":1024,"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"Hello, world\"}]}";
    assert_string_equal(conv(vsr_anthropic_request_to_chat, in, VSR_OK, NULL),
                        "{\"model\":\"claude-sonnet-4-5\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello, world\"}],"
                        "\"max_tokens\":1024}");
}

/* A count_tokens body has no max_tokens: none is required, none is written. */
static int count_to_chat(const char *b, size_t n, const vsr_anthropic_limits_t *l, vsr_buf_t *o,
                         vsr_anthropic_error_t *e)
{
    (void)l;
    vsr_anthropic_limits_t lim = {.count_tokens = 1};
    return vsr_anthropic_request_to_chat(b, n, &lim, o, e);
}

static void test_ingress_count_tokens(void **state)
{
    (void)state;
    assert_string_equal(conv(count_to_chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                             VSR_OK, NULL),
                        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    assert_string_equal(conv(count_to_chat, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[]}", VSR_OK, NULL),
                        "{\"model\":\"m\",\"messages\":[],\"max_tokens\":9}");
    assert_err(count_to_chat, "{\"model\":\"m\",\"max_tokens\":0,\"messages\":[]}", VSR_ERR_INVALID,
               "invalid_request_error", "max_tokens: Input should be greater than or equal to 1");
    assert_err(count_to_chat, "{\"model\":\"m\"}", VSR_ERR_INVALID, "invalid_request_error",
               "messages: Field required");
}

/* Lenient: what has no chat form is left out (the first thing named), what
 * Anthropic refuses is still refused. */
static void lenient(const char *in, int want_rc, const char *want_out, const char *want_msg)
{
    vsr_anthropic_limits_t lim = {.lenient = 1};
    vsr_buf_t b;
    vsr_buf_init(&b, 1 << 20);
    vsr_anthropic_error_t e;
    int rc = vsr_anthropic_request_to_chat(in, strlen(in), &lim, &b, &e);
    assert_int_equal(rc, want_rc);
    if (rc == VSR_OK) {
        assert_null(e.type);
        assert_int_equal(b.len, strlen(want_out));
        assert_memory_equal(b.data, want_out, b.len);
    }
    assert_string_equal(e.message, want_msg);
    vsr_buf_free(&b);
}

static void test_ingress_lenient(void **state)
{
    (void)state;
    lenient("{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\","
            "\"source\":{}},{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"search_result\"}]},{\"role\":\"assistant\","
            "\"content\":[{\"type\":\"server_tool_use\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
            "\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"},{\"name\":\"f\",\"input_schema\":{}}]}",
            VSR_OK,
            "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}],"
            "\"max_tokens\":1,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]}",
            "messages.0.content.0.type: a 'document' block has no chat form");
    lenient("{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", VSR_OK,
            "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1}", "");
    lenient("{\"model\":\"m\",\"messages\":[]}", VSR_ERR_INVALID, NULL, "max_tokens: Field required");
    lenient("{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\"},"
            "{\"type\":\"text\"}]}]}", VSR_ERR_INVALID, NULL, "messages.0.content.1.text: Input should be a valid string");
}

static void test_ingress_full(void **state)
{
    (void)state;
    const char *in =
        "{\"model\":\"auto\",\"max_tokens\":64,\"temperature\":0.2,\"top_p\":0.9,\"top_k\":5,"
        "\"stop_sequences\":[\"\\n\\nHuman:\"],\"stream\":true,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":10},"
        "\"metadata\":{\"user_id\":\"u-1\"},"
        "\"system\":[{\"type\":\"text\",\"text\":\"You are terse.\",\"cache_control\":{\"type\":\"ephemeral\"}},"
        "{\"type\":\"text\",\"text\":\"Answer in \\\"English\\\".\"}],"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Get the current weather in a given location\","
        "\"input_schema\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}},\"required\":[\"location\"]}}],"
        "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/jpeg\",\"data\":\"/9j/4AAQ\"}},"
        "{\"type\":\"text\",\"text\":\"What is in this image?\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"x\"},"
        "{\"type\":\"text\",\"text\":\"Let me check the weather.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_01A09q90qw90lq917835lq9\",\"name\":\"get_weather\",\"input\":{\"location\":\"San Francisco, CA\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_01A09q90qw90lq917835lq9\","
        "\"content\":[{\"type\":\"text\",\"text\":\"15 degrees\"}]},{\"type\":\"text\",\"text\":\"And tomorrow?\"},"
        "{\"type\":\"text\",\"text\":\"Thanks.\"}]}]}";
    assert_string_equal(
        conv(vsr_anthropic_request_to_chat, in, VSR_OK, NULL),
        "{\"model\":\"auto\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"You are terse.\\nAnswer in \\\"English\\\".\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/jpeg;base64,/9j/4AAQ\"}},"
        "{\"type\":\"text\",\"text\":\"What is in this image?\"}]},"
        "{\"role\":\"assistant\",\"content\":\"Let me check the weather.\",\"tool_calls\":[{\"id\":\"toolu_01A09q90qw90lq917835lq9\","
        "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"San Francisco, CA\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_01A09q90qw90lq917835lq9\",\"content\":\"15 degrees\"},"
        "{\"role\":\"user\",\"content\":\"And tomorrow?\\nThanks.\"}],"
        "\"max_tokens\":64,\"temperature\":0.2,\"top_p\":0.9,\"top_k\":5,\"stop\":[\"\\n\\nHuman:\"],"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get the current weather in a given location\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}},\"required\":[\"location\"]}}}],"
        "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"user\":\"u-1\"}");

    /* tool_choice tool / none / auto; a url image source */
    assert_string_equal(
        conv(vsr_anthropic_request_to_chat,
             "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},\"messages\":[{\"role\":\"user\","
             "\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://e.x/a.png\"}}]}]}",
             VSR_OK, NULL),
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://e.x/a.png\"}}]}],"
        "\"max_tokens\":1,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}");
    assert_string_equal(conv(vsr_anthropic_request_to_chat,
                             "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"none\"},\"system\":\"S\",\"messages\":[]}",
                             VSR_OK, NULL),
                        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"}],\"max_tokens\":1,\"tool_choice\":\"none\"}");
}

static void test_ingress_errors(void **state)
{
    (void)state;
    conv_fn f = vsr_anthropic_request_to_chat;
    const char *ire = "invalid_request_error";
    assert_err(f, "{\"model\":\"m\",\"messages\":[]}", VSR_ERR_INVALID, ire, "max_tokens: Field required");
    assert_err(f, "{\"max_tokens\":1,\"messages\":[]}", VSR_ERR_INVALID, ire, "model field is required");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1}", VSR_ERR_INVALID, ire, "messages: Field required");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":{}}", VSR_ERR_INVALID, ire,
               "messages: Input should be a valid list");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":0,\"messages\":[]}", VSR_ERR_INVALID, ire,
               "max_tokens: Input should be greater than or equal to 1");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1.5,\"messages\":[]}", VSR_ERR_INVALID, ire,
               "max_tokens: Input should be a valid integer");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]}",
               VSR_ERR_INVALID, ire, "messages.1.role: Input should be 'user' or 'assistant'");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\"}]}", VSR_ERR_INVALID, ire,
               "messages.0.content: Field required");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{}}]}]}",
               VSR_ERR_INVALID, ire, "messages.0.content.0.type: a 'document' block has no chat form");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
               VSR_ERR_INVALID, ire, "messages.0.content.0.text: Input should be a valid string");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[],\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}",
               VSR_ERR_INVALID, ire, "tools.0.type: the server tool 'web_search_20250305' has no chat form");
    assert_err(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[],\"temperature\":\"hot\"}", VSR_ERR_INVALID, ire,
               "temperature: Input should be a valid number");
    assert_err(f, "[1]", VSR_ERR_INVALID, ire, "body: Input should be a JSON object");
    assert_err(f, "{\"model\":\"m\",\"model\":\"n\"}", VSR_ERR_INVALID, ire, "body: duplicate member model");
    /* client text in a message is cut and kept printable */
    vsr_anthropic_error_t e;
    conv(f, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"\\u0001\\\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}]}]}",
         VSR_ERR_INVALID, &e);
    assert_non_null(strstr(e.message, "'??xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'"));
}

static void test_ingress_limits(void **state)
{
    (void)state;
    /* nesting */
    char deep[400];
    size_t n = (size_t)snprintf(deep, sizeof(deep), "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[],\"x\":");
    for (int i = 0; i < 100; i++)
        deep[n++] = '[';
    for (int i = 0; i < 100; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    assert_err(vsr_anthropic_request_to_chat, deep, VSR_ERR_TOO_BIG, "request_too_large", "body: nested deeper than 64 levels");

    /* the item count and the input size, with limits of their own */
    vsr_anthropic_limits_t lim = {.max_items = 3};
    const char *in = "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                     "{\"role\":\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"},{\"role\":\"user\",\"content\":\"d\"}]}";
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_anthropic_error_t e;
    assert_int_equal(vsr_anthropic_request_to_chat(in, strlen(in), &lim, &b, &e), VSR_ERR_TOO_BIG);
    assert_string_equal(e.message, "body: more than 3 messages, blocks and tools");
    lim.max_items = 4;
    vsr_buf_reset(&b);
    assert_int_equal(vsr_anthropic_request_to_chat(in, strlen(in), &lim, &b, &e), VSR_OK);
    lim.max_input = 10;
    vsr_buf_reset(&b);
    assert_int_equal(vsr_anthropic_request_to_chat(in, strlen(in), &lim, &b, &e), VSR_ERR_TOO_BIG);
    assert_string_equal(e.type, "request_too_large");
    vsr_buf_free(&b);

    /* the output buffer's cap */
    vsr_buf_init(&b, 20);
    assert_int_equal(vsr_anthropic_request_to_chat(in, strlen(in), NULL, &b, &e), VSR_ERR_TOO_BIG);
    assert_true(b.len <= 20);
    vsr_buf_free(&b);
}

/* ---- ingress answer and errors --------------------------------------------- */

static void test_response_from_chat(void **state)
{
    (void)state;
    const char *ok = "{\"id\":\"chatcmpl-123\",\"object\":\"chat.completion\",\"created\":1677652288,\"model\":\"general-large\","
                     "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello from the upstream model.\"},"
                     "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":6,\"total_tokens\":18}}";
    assert_string_equal(conv(vsr_anthropic_response_from_chat, ok, VSR_OK, NULL),
                        "{\"id\":\"msg_chatcmpl-123\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"general-large\","
                        "\"content\":[{\"type\":\"text\",\"text\":\"Hello from the upstream model.\"}],\"stop_reason\":\"end_turn\","
                        "\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":6}}");
    const char *tools = "{\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"
                        "\"tool_calls\":[{\"id\":\"call_abc\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                        "\"arguments\":\"{\\\"location\\\": \\\"Boston, MA\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}";
    assert_string_equal(conv(vsr_anthropic_response_from_chat, tools, VSR_OK, NULL),
                        "{\"id\":\"msg_c\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"tool_use\","
                        "\"id\":\"call_abc\",\"name\":\"get_weather\",\"input\":{\"location\": \"Boston, MA\"}}],"
                        "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}");
    assert_err(vsr_anthropic_response_from_chat,
               "{\"choices\":[{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]},\"finish_reason\":\"length\"}]}",
               VSR_ERR_INVALID, "api_error", "upstream answer: choices.0.message.tool_calls.0.function.arguments: not a JSON object");
    assert_err(vsr_anthropic_response_from_chat, "{\"object\":\"list\"}", VSR_ERR_INVALID, "api_error",
               "upstream answer: choices: Field required");
    /* length → max_tokens */
    assert_non_null(strstr(conv(vsr_anthropic_response_from_chat,
                                "{\"choices\":[{\"message\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}", VSR_OK, NULL),
                           "\"stop_reason\":\"max_tokens\""));
}

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *type;
    } map[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
               {404, "not_found_error"}, {413, "request_too_large"}, {429, "rate_limit_error"}, {500, "api_error"},
               {503, "api_error"}, {529, "overloaded_error"}, {422, "invalid_request_error"}};
    for (size_t i = 0; i < VSR_ARRAY_LEN(map); i++)
        assert_string_equal(vsr_anthropic_error_type(map[i].status), map[i].type);

    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    const char *up = "{\"error\":{\"message\":\"backend overloaded\",\"type\":\"server_error\"}}";
    assert_int_equal(vsr_anthropic_error_from_chat(503, up, strlen(up), &b), VSR_OK);
    b.data[b.len] = '\0';
    assert_string_equal(b.data, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"backend overloaded\"}}");
    vsr_buf_reset(&b);
    assert_int_equal(vsr_anthropic_error_from_chat(429, "not json", 8, &b), VSR_OK);
    assert_json(b.data, b.len);
    assert_true(memmem(b.data, b.len, "rate_limit_error", 16) != NULL);
    assert_true(memmem(b.data, b.len, "status 429", 10) != NULL);
    vsr_buf_reset(&b);
    const char *ae = "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}";
    assert_int_equal(vsr_anthropic_error_to_chat(529, ae, strlen(ae), &b), VSR_OK);
    assert_true(b.len == strlen("{\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\",\"code\":529}}"));
    assert_memory_equal(b.data, "{\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\",\"code\":529}}", b.len);
    vsr_buf_reset(&b);
    assert_int_equal(vsr_anthropic_error_body(&b, "invalid_request_error", vsr_slice_cstr("a \"b\"")), VSR_OK);
    assert_memory_equal(b.data, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"a \\\"b\\\"\"}}", b.len);
    vsr_buf_free(&b);
}

/* ---- egress ------------------------------------------------------------------ */

static void test_egress_request(void **state)
{
    (void)state;
    const char *in =
        "{\"model\":\"claude-compatible-1\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Use metric units.\"}]},"
        "{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"And this?\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,iVBORw0KGgo=\"}},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://e.x/p.jpg\"}}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
        "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"18C\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_2\",\"content\":[{\"type\":\"text\",\"text\":\"noon\"}]},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}],"
        "\"temperature\":0.5,\"stop\":\"END\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"presence_penalty\":1,\"user\":\"u-7\",\"parallel_tool_calls\":false,\"tool_choice\":\"required\","
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]}";
    assert_string_equal(
        conv(vsr_anthropic_request_from_chat, in, VSR_OK, NULL),
        "{\"model\":\"claude-compatible-1\",\"max_tokens\":4096,\"system\":\"Be brief.\\n\\nUse metric units.\","
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is the weather in Paris?\"},"
        "{\"type\":\"text\",\"text\":\"And this?\"},"
        "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"iVBORw0KGgo=\"}},"
        "{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://e.x/p.jpg\"}}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"call_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}},"
        "{\"type\":\"tool_use\",\"id\":\"call_2\",\"name\":\"get_time\",\"input\":{}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"call_1\",\"content\":\"18C\"},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"call_2\",\"content\":\"noon\"},{\"type\":\"text\",\"text\":\"Thanks\"}]}],"
        "\"temperature\":0.5,\"stop_sequences\":[\"END\"],\"stream\":true,"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}},"
        "{\"name\":\"get_time\",\"input_schema\":{\"type\":\"object\",\"properties\":{}}}],"
        "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},\"metadata\":{\"user_id\":\"u-7\"}}");

    /* the parity case: auto, a poem, max_tokens 64 */
    assert_string_equal(conv(vsr_anthropic_request_from_chat,
                             "{\"model\":\"claude-compatible-1\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"Write a short poem about rivers.\"}]}",
                             VSR_OK, NULL),
                        "{\"model\":\"claude-compatible-1\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":"
                        "[{\"type\":\"text\",\"text\":\"Write a short poem about rivers.\"}]}]}");
    /* max_completion_tokens wins; tool_choice by name */
    assert_non_null(strstr(conv(vsr_anthropic_request_from_chat,
                                "{\"model\":\"m\",\"max_tokens\":9,\"max_completion_tokens\":7,\"messages\":[],"
                                "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
                                VSR_OK, NULL),
                           "\"max_tokens\":7,\"messages\":[],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"}}"));
    /* a configured default */
    vsr_anthropic_limits_t lim = {.default_max_tokens = 100};
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    const char *m = "{\"model\":\"m\",\"messages\":[]}";
    assert_int_equal(vsr_anthropic_request_from_chat(m, strlen(m), &lim, &b, NULL), VSR_OK);
    assert_true(memmem(b.data, b.len, "\"max_tokens\":100,", 17) != NULL);
    vsr_buf_free(&b);

    const char *ire = "invalid_request_error";
    assert_err(vsr_anthropic_request_from_chat, "{\"model\":\"m\",\"n\":2,\"messages\":[]}", VSR_ERR_INVALID, ire,
               "n: an Anthropic backend returns one choice; n must be 1");
    assert_err(vsr_anthropic_request_from_chat,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]}",
               VSR_ERR_INVALID, ire, "messages.0.tool_calls.0.function.arguments: Input should be a JSON object");
    assert_err(vsr_anthropic_request_from_chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}",
               VSR_ERR_INVALID, ire, "messages.0.role: 'function' has no Messages form");
    assert_err(vsr_anthropic_request_from_chat,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\",\"input_audio\":{}}]}]}",
               VSR_ERR_INVALID, ire, "messages.0.content.0.type: a 'input_audio' part has no Messages form");
    assert_err(vsr_anthropic_request_from_chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
               VSR_ERR_INVALID, ire, "messages.0.tool_call_id: Field required");
}

/* A model that speaks Messages: its whole answer in chat form by status (a
 * message under 2xx, an error body otherwise). */
static void test_messages_model(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_anthropic_error_t err;
    const char *msg = "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":["
                      "{\"type\":\"text\",\"text\":\"hi\"}],\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":1,"
                      "\"output_tokens\":1}}";
    assert_int_equal(vsr_anthropic_answer_to_chat(200, msg, strlen(msg), 7, &b, &err), VSR_OK);
    assert_true(memmem(b.data, b.len, "\"object\":\"chat.completion\",\"created\":7,", 38) != NULL);
    vsr_buf_reset(&b);
    const char *ae = "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}";
    assert_int_equal(vsr_anthropic_answer_to_chat(529, ae, strlen(ae), 7, &b, &err), VSR_OK);
    assert_memory_equal(b.data, "{\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\",\"code\":529}}", b.len);
    vsr_buf_reset(&b); /* an error body under 200 is no message */
    assert_int_equal(vsr_anthropic_answer_to_chat(200, ae, strlen(ae), 7, &b, &err), VSR_ERR_INVALID);
    vsr_buf_free(&b);
}

static void test_response_to_chat(void **state)
{
    (void)state;
    const char *ok = "{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-compatible-1\","
                     "\"content\":[{\"type\":\"text\",\"text\":\"Rivers carve the land.\"}],\"stop_reason\":\"end_turn\","
                     "\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":5}}";
    assert_string_equal(conv(to_chat_at, ok, VSR_OK, NULL),
                        "{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"object\":\"chat.completion\",\"created\":1700000000,"
                        "\"model\":\"claude-compatible-1\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                        "\"content\":\"Rivers carve the land.\"},\"finish_reason\":\"stop\"}],"
                        "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15}}");
    const char *tool = "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":["
                       "{\"type\":\"text\",\"text\":\"<thinking>I need the weather.</thinking>\"},"
                       "{\"type\":\"tool_use\",\"id\":\"toolu_01A09q90qw90lq917835lq9\",\"name\":\"get_weather\","
                       "\"input\":{\"location\": \"San Francisco, CA\", \"unit\": \"celsius\"}}],"
                       "\"stop_reason\":\"tool_use\",\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":2,\"output_tokens\":1}}";
    assert_string_equal(conv(to_chat_at, tool, VSR_OK, NULL),
                        "{\"id\":\"msg_1\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"c\",\"choices\":[{\"index\":0,"
                        "\"message\":{\"role\":\"assistant\",\"content\":\"<thinking>I need the weather.</thinking>\",\"tool_calls\":["
                        "{\"id\":\"toolu_01A09q90qw90lq917835lq9\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                        "\"arguments\":\"{\\\"location\\\": \\\"San Francisco, CA\\\", \\\"unit\\\": \\\"celsius\\\"}\"}}]},"
                        "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}");
    assert_err(to_chat_at, "{\"type\":\"message\"}", VSR_ERR_INVALID, "api_error", "upstream answer: content: Field required");
}

/* ---- streams ------------------------------------------------------------------- */

/* Feeds `in` in pieces of `step` bytes (0: whole); returns the output and the
 * finish return code. */
static char *run_stream(vsr_anthropic_dir_t dir, const char *in, size_t step, int *finish_rc, int include_usage)
{
    vsr_anthropic_stream_t s;
    vsr_anthropic_stream_init(&s, dir, NULL, 1700000000, include_usage);
    vsr_buf_t out;
    vsr_buf_init(&out, 1 << 20);
    size_t n = strlen(in);
    if (step == 0)
        step = n ? n : 1;
    for (size_t i = 0; i < n; i += step)
        vsr_anthropic_stream_feed(&s, in + i, VSR_MIN(step, n - i), &out);
    int rc = vsr_anthropic_stream_finish(&s, &out);
    if (finish_rc)
        *finish_rc = rc;
    vsr_anthropic_stream_free(&s);
    char *r = malloc(out.len + 1);
    memcpy(r, out.data, out.len);
    r[out.len] = '\0';
    vsr_buf_free(&out);
    /* every data line is JSON (or [DONE]) */
    for (char *l = r; (l = strstr(l, "data: ")) != NULL;) {
        l += 6;
        char *e = strchr(l, '\n');
        assert_non_null(e);
        if (strncmp(l, "[DONE]", 6) != 0)
            assert_json(l, (size_t)(e - l));
        l = e;
    }
    return r;
}

/* Same output whole, one byte at a time, and in 7-byte pieces. */
static char *run_all_cuts(vsr_anthropic_dir_t dir, const char *in, int *finish_rc, int include_usage)
{
    char *whole = run_stream(dir, in, 0, finish_rc, include_usage);
    for (size_t step = 1; step <= 13; step += 6) {
        int rc2;
        char *cut = run_stream(dir, in, step, &rc2, include_usage);
        assert_string_equal(cut, whole);
        assert_int_equal(rc2, *finish_rc);
        free(cut);
    }
    return whole;
}

static const char chat_sse[] =
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n"
    ": keep-alive\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world.\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\","
    "\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
    "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"general-large\","
    "\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":6,\"total_tokens\":18}}\n\n"
    "data: [DONE]\n\n";

static const char messages_sse_want[] =
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_chatcmpl-1\",\"type\":\"message\","
    "\"role\":\"assistant\",\"model\":\"general-large\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
    "\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" world.\"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\","
    "\"id\":\"call_9\",\"name\":\"get_weather\",\"input\":{}}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
    "\"partial_json\":\"{\\\"city\\\":\"}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
    "\"partial_json\":\"\\\"Paris\\\"}\"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},"
    "\"usage\":{\"input_tokens\":12,\"output_tokens\":6}}\n\n"
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/* s with every "\n" replaced by `eol` (malloc'd). */
static char *with_eol(const char *s, const char *eol)
{
    size_t n = 0;
    for (const char *p = s; *p; p++)
        n += *p == '\n' ? strlen(eol) : 1;
    char *r = malloc(n + 1), *w = r;
    for (const char *p = s; *p; p++) {
        if (*p == '\n') {
            memcpy(w, eol, strlen(eol));
            w += strlen(eol);
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    return r;
}

static void test_stream_to_messages(void **state)
{
    (void)state;
    int rc;
    char *out = run_all_cuts(VSR_ANTHROPIC_TO_MESSAGES, chat_sse, &rc, 0);
    assert_int_equal(rc, VSR_OK);
    assert_string_equal(out, messages_sse_want);
    free(out);
    /* CRLF and CR line endings give the same events */
    for (int k = 0; k < 2; k++) {
        char *in = with_eol(chat_sse, k ? "\r" : "\r\n");
        out = run_all_cuts(VSR_ANTHROPIC_TO_MESSAGES, in, &rc, 0);
        assert_string_equal(out, messages_sse_want);
        free(out);
        free(in);
    }
    /* bytes after [DONE] are ignored */
    char buf[sizeof(chat_sse) + 64];
    snprintf(buf, sizeof(buf), "%sdata: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n", chat_sse);
    out = run_stream(VSR_ANTHROPIC_TO_MESSAGES, buf, 0, &rc, 0);
    assert_string_equal(out, messages_sse_want);
    free(out);
}

static void test_stream_to_messages_early_end(void **state)
{
    (void)state;
    int rc;
    /* cut after the first text: the block is closed and an error event ends it, no message_stop */
    const char *cut = strstr(chat_sse, ": keep-alive");
    char *in = strndup(chat_sse, (size_t)(cut - chat_sse));
    char *out = run_all_cuts(VSR_ANTHROPIC_TO_MESSAGES, in, &rc, 0);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_non_null(strstr(out, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
                                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                                "\"message\":\"upstream stream ended before its end\"}}\n\n"));
    assert_null(strstr(out, "message_stop"));
    free(out);
    free(in);
    /* a finish_reason without [DONE] ends normally */
    const char *done = strstr(chat_sse, "data: [DONE]");
    in = strndup(chat_sse, (size_t)(done - chat_sse));
    out = run_all_cuts(VSR_ANTHROPIC_TO_MESSAGES, in, &rc, 0);
    assert_int_equal(rc, VSR_OK);
    assert_string_equal(out, messages_sse_want);
    free(out);
    free(in);
    /* nothing at all */
    out = run_stream(VSR_ANTHROPIC_TO_MESSAGES, "", 0, &rc, 0);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_non_null(strstr(out, "event: error\n"));
    free(out);
}

static void test_stream_to_messages_hostile(void **state)
{
    (void)state;
    int rc;
    /* interleaved tool calls */
    const char *il = "data: {\"id\":\"a\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"x\",\"function\":{\"name\":\"f\"}}]}}]}\n\n"
                     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"y\",\"function\":{\"name\":\"g\"}}]}}]}\n\n"
                     "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n"
                     "data: [DONE]\n\n";
    char *out = run_all_cuts(VSR_ANTHROPIC_TO_MESSAGES, il, &rc, 0);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_non_null(strstr(out, "upstream interleaved its tool calls"));
    assert_null(strstr(out, "message_stop"));
    free(out);
    /* not JSON */
    out = run_all_cuts(VSR_ANTHROPIC_TO_MESSAGES, "data: {\"choices\":\n\n", &rc, 0);
    assert_non_null(strstr(out, "not a JSON object"));
    free(out);
    /* an upstream error in the stream */
    out = run_all_cuts(VSR_ANTHROPIC_TO_MESSAGES, "data: {\"error\":{\"message\":\"boom \\\"x\\\"\"}}\n\n", &rc, 0);
    assert_non_null(strstr(out, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom \\\"x\\\"\"}}"));
    free(out);
    /* a line longer than the limit, even one byte at a time, and no growth past it */
    vsr_anthropic_limits_t lim = {.max_event = 64};
    vsr_anthropic_stream_t s;
    vsr_anthropic_stream_init(&s, VSR_ANTHROPIC_TO_MESSAGES, &lim, 0, 0);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    int last = VSR_OK;
    for (int i = 0; i < 10000 && last == VSR_OK; i++)
        last = vsr_anthropic_stream_feed(&s, "x", 1, &b);
    assert_int_equal(last, VSR_ERR_TOO_BIG);
    assert_true(s.sse._line.alloc <= 256);
    assert_int_equal(vsr_anthropic_stream_feed(&s, "\n\n", 2, &b), VSR_ERR_INVALID);
    assert_true(memmem(b.data, b.len, "larger than the limit", 21) != NULL);
    vsr_anthropic_stream_free(&s);
    vsr_buf_free(&b);
    /* many data lines of one event add up to the same limit */
    vsr_anthropic_stream_init(&s, VSR_ANTHROPIC_TO_MESSAGES, &lim, 0, 0);
    vsr_buf_init(&b, 0);
    last = VSR_OK;
    for (int i = 0; i < 100 && last == VSR_OK; i++)
        last = vsr_anthropic_stream_feed(&s, "data: 0123456789\n", 17, &b);
    assert_int_not_equal(last, VSR_OK);
    vsr_anthropic_stream_free(&s);
    vsr_buf_free(&b);
}

/* Anthropic's documented stream, with a ping and a tool block. */
static const char messages_sse[] =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"type\":\"message\","
    "\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,"
    "\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
    "event: ping\ndata: {\"type\": \"ping\"}\n\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"!\"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\","
    "\"name\":\"get_weather\",\"input\":{}}}\n\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": \\\"San\"}}\n\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" Francisco\\\"}\"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
    "event: message_delta\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n"
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

#define CHUNK(delta, fin)                                                                                          \
    "data: {\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"object\":\"chat.completion.chunk\",\"created\":1700000000," \
    "\"model\":\"claude-sonnet-4-5\",\"choices\":[{\"index\":0,\"delta\":" delta ",\"finish_reason\":" fin "}]}\n\n"

static const char chat_sse_want[] =
    CHUNK("{\"role\":\"assistant\",\"content\":\"\"}", "null")
    CHUNK("{\"content\":\"Hello\"}", "null")
    CHUNK("{\"content\":\"!\"}", "null")
    CHUNK("{\"tool_calls\":[{\"index\":0,\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"type\":\"function\","
          "\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}", "null")
    CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"location\\\": \\\"San\"}}]}", "null")
    CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\" Francisco\\\"}\"}}]}", "null")
    CHUNK("{}", "\"tool_calls\"")
    "data: {\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
    "\"model\":\"claude-sonnet-4-5\",\"choices\":[],\"usage\":{\"prompt_tokens\":25,\"completion_tokens\":15,\"total_tokens\":40}}\n\n"
    "data: [DONE]\n\n";

static void test_stream_to_chat(void **state)
{
    (void)state;
    int rc;
    char *out = run_all_cuts(VSR_ANTHROPIC_TO_CHAT, messages_sse, &rc, 1);
    assert_int_equal(rc, VSR_OK);
    assert_string_equal(out, chat_sse_want);
    free(out);
    char *crlf = with_eol(messages_sse, "\r\n");
    out = run_all_cuts(VSR_ANTHROPIC_TO_CHAT, crlf, &rc, 1);
    assert_string_equal(out, chat_sse_want);
    free(out);
    free(crlf);
    /* without include_usage: no usage chunk, still [DONE] */
    out = run_stream(VSR_ANTHROPIC_TO_CHAT, messages_sse, 0, &rc, 0);
    assert_null(strstr(out, "\"usage\""));
    assert_non_null(strstr(out, "\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"));
    free(out);

    /* an error event */
    out = run_all_cuts(VSR_ANTHROPIC_TO_CHAT,
                       "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
                       &rc, 1);
    assert_string_equal(out, "data: {\"error\":{\"message\":\"Overloaded\",\"type\":\"api_error\",\"code\":null}}\n\n");
    assert_int_equal(rc, VSR_ERR_INVALID);
    free(out);
    /* cut before message_delta: an error, no [DONE] */
    const char *md = strstr(messages_sse, "event: message_delta");
    char *in = strndup(messages_sse, (size_t)(md - messages_sse));
    out = run_all_cuts(VSR_ANTHROPIC_TO_CHAT, in, &rc, 1);
    assert_int_equal(rc, VSR_ERR_INVALID);
    assert_null(strstr(out, "[DONE]"));
    assert_non_null(strstr(out, "upstream stream ended before its end"));
    free(out);
    free(in);
    /* an event before message_start */
    out = run_stream(VSR_ANTHROPIC_TO_CHAT, "data: {\"type\":\"content_block_delta\"}\n\n", 0, &rc, 1);
    assert_non_null(strstr(out, "did not begin with message_start"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ingress_simple),
        cmocka_unit_test(test_messages_model),
        cmocka_unit_test(test_ingress_count_tokens),
        cmocka_unit_test(test_ingress_lenient),
        cmocka_unit_test(test_ingress_full),
        cmocka_unit_test(test_ingress_errors),
        cmocka_unit_test(test_ingress_limits),
        cmocka_unit_test(test_response_from_chat),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_egress_request),
        cmocka_unit_test(test_response_to_chat),
        cmocka_unit_test(test_stream_to_messages),
        cmocka_unit_test(test_stream_to_messages_early_end),
        cmocka_unit_test(test_stream_to_messages_hostile),
        cmocka_unit_test(test_stream_to_chat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
