/* test_completions.c — the Completions codec: a completions request as a
 * chat one, what has no chat form refused, a chat answer as a
 * text_completion, and chunk streams fed whole and one byte at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "proto/anthropic.h"
#include "proto/completions.h"

/* needle in the buffer's bytes (a buffer is not NUL-terminated by contract) */
static int has(const vsr_buf_t *b, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= b->len; i++)
        if (memcmp(b->data + i, needle, n) == 0)
            return 1;
    return 0;
}

static void request(const char *in, int want_rc, const char *want)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 1 << 20);
    char err[160] = "";
    int rc = vsr_completions_request_to_chat(in, strlen(in), &b, err, sizeof(err));
    assert_int_equal(rc, want_rc);
    if (rc == VSR_OK) {
        assert_int_equal(b.len, strlen(want));
        assert_memory_equal(b.data, want, b.len);
    } else {
        assert_non_null(strstr(err, want));
    }
    vsr_buf_free(&b);
}

static void test_request(void **state)
{
    (void)state;
    request("{\"model\":\"m\",\"prompt\":\"Say \\\"hi\\\"\",\"max_tokens\":5,\"temperature\":0.5,\"stop\":[\"X\"],"
            "\"stream\":true,\"suffix\":\"\",\"best_of\":1,\"echo\":false,\"logprobs\":null,\"unknown\":1}",
            VSR_OK,
            "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Say \\\"hi\\\"\"}],\"max_tokens\":5,"
            "\"temperature\":0.5,\"stop\":[\"X\"],\"stream\":true}");
    request("{\"model\":\"m\",\"prompt\":[\"one\"]}", VSR_OK,
            "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"one\"}]}");
    request("{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", VSR_ERR_INVALID, "prompt");
    request("{\"model\":\"m\",\"prompt\":[1,2,3]}", VSR_ERR_INVALID, "prompt");
    request("{\"model\":\"m\"}", VSR_ERR_INVALID, "prompt");
    request("{\"prompt\":\"x\"}", VSR_ERR_INVALID, "model");
    request("{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true}", VSR_ERR_INVALID, "echo");
    request("{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"end\"}", VSR_ERR_INVALID, "suffix");
    request("{\"model\":\"m\",\"prompt\":\"x\",\"best_of\":3}", VSR_ERR_INVALID, "best_of");
    request("{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":2}", VSR_ERR_INVALID, "logprobs");
    request("[1]", VSR_ERR_INVALID, "malformed");
    request("{\"model\":", VSR_ERR_INVALID, "malformed");
}

static void test_response(void **state)
{
    (void)state;
    const char *in = "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":7,\"model\":\"m\","
                     "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hi\\n\"},"
                     "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,"
                     "\"total_tokens\":3}}";
    vsr_buf_t b;
    vsr_buf_init(&b, 1 << 20);
    assert_int_equal(vsr_completions_response_from_chat(in, strlen(in), &b), VSR_OK);
    const char *want = "{\"object\":\"text_completion\",\"id\":\"chatcmpl-1\",\"created\":7,\"model\":\"m\","
                       "\"choices\":[{\"index\":0,\"text\":\"Hi\\n\",\"logprobs\":null,\"finish_reason\":\"length\"}],"
                       "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}";
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.data, want, b.len);
    vsr_buf_reset(&b);
    const char *tools = "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[]},\"finish_reason\":\"stop\"}]}";
    assert_int_equal(vsr_completions_response_from_chat(tools, strlen(tools), &b), VSR_OK);
    assert_true(has(&b, "\"text\":\"\""));
    vsr_buf_reset(&b);
    assert_int_equal(vsr_completions_response_from_chat("{\"choices\":[]}", 14, &b), VSR_ERR_INVALID);
    assert_int_equal(vsr_completions_response_from_chat("nope", 4, &b), VSR_ERR_INVALID);
    vsr_buf_free(&b);
}

static const char STREAM_IN[] =
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"content\":\"A b\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
    "\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],"
    "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\n"
    "data: [DONE]\n\n";

static const char STREAM_OUT[] =
    "data: {\"object\":\"text_completion\",\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
    "\"text\":\"A b\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    "data: {\"object\":\"text_completion\",\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
    "\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n"
    "data: {\"object\":\"text_completion\",\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[],"
    "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\n"
    "data: [DONE]\n\n";

static void test_stream(void **state)
{
    (void)state;
    for (size_t step = 1; step <= sizeof(STREAM_IN); step += sizeof(STREAM_IN) - 2) { /* byte by byte, then whole */
        vsr_completions_stream_t s;
        vsr_completions_stream_init(&s);
        vsr_buf_t out;
        vsr_buf_init(&out, 1 << 20);
        for (size_t i = 0; i < sizeof(STREAM_IN) - 1; i += step) {
            size_t n = sizeof(STREAM_IN) - 1 - i < step ? sizeof(STREAM_IN) - 1 - i : step;
            assert_int_equal(vsr_completions_stream_feed(&s, STREAM_IN + i, n, &out), VSR_OK);
        }
        assert_int_equal(out.len, sizeof(STREAM_OUT) - 1);
        assert_memory_equal(out.data, STREAM_OUT, out.len);
        vsr_completions_stream_free(&s);
        vsr_buf_free(&out);
    }
    /* an error event passes as it is; an event without end past the bound fails the stream once */
    vsr_completions_stream_t s;
    vsr_completions_stream_init(&s);
    vsr_buf_t out;
    vsr_buf_init(&out, 1 << 20);
    const char *err = "data: {\"error\":{\"message\":\"cut\"}}\n\n";
    assert_int_equal(vsr_completions_stream_feed(&s, err, strlen(err), &out), VSR_OK);
    assert_int_equal(out.len, strlen(err));
    vsr_buf_reset(&out); /* data that is not JSON: nothing a client could read */
    const char *junk = "data: {nope\n\ndata: 12\n\n";
    assert_int_equal(vsr_completions_stream_feed(&s, junk, strlen(junk), &out), VSR_OK);
    assert_int_equal(out.len, 0);
    char *big = malloc(VSR_ANTHROPIC_MAX_EVENT + 1);
    memset(big, 'x', VSR_ANTHROPIC_MAX_EVENT + 1);
    vsr_buf_reset(&out);
    assert_int_equal(vsr_completions_stream_feed(&s, big, VSR_ANTHROPIC_MAX_EVENT + 1, &out), VSR_OK);
    assert_true(has(&out, "too large"));
    assert_int_equal(vsr_completions_stream_feed(&s, err, strlen(err), &out), VSR_ERR_INVALID);
    free(big);
    vsr_completions_stream_free(&s);
    vsr_buf_free(&out);
}

/* The framing is proto/sse.h's: CRLF line ends (one cut between CR and LF
 * too) and a comment line give the same events. */
static void test_stream_framing(void **state)
{
    (void)state;
    vsr_buf_t in;
    vsr_buf_init(&in, 0);
    assert_int_equal(vsr_buf_append_cstr(&in, ": keep-alive\r\n\r\n"), VSR_OK);
    for (const char *p = STREAM_IN; *p; p++)
        assert_int_equal(*p == '\n' ? vsr_buf_append_cstr(&in, "\r\n") : vsr_buf_append(&in, p, 1), VSR_OK);
    for (size_t step = 1; step <= in.len; step += in.len - 1) { /* byte by byte, then whole */
        vsr_completions_stream_t s;
        vsr_completions_stream_init(&s);
        vsr_buf_t out;
        vsr_buf_init(&out, 1 << 20);
        for (size_t i = 0; i < in.len; i += step)
            assert_int_equal(vsr_completions_stream_feed(&s, in.data + i, in.len - i < step ? in.len - i : step, &out),
                             VSR_OK);
        assert_int_equal(out.len, sizeof(STREAM_OUT) - 1);
        assert_memory_equal(out.data, STREAM_OUT, out.len);
        vsr_completions_stream_free(&s);
        vsr_buf_free(&out);
    }
    vsr_buf_free(&in);
    /* each data line of an event is read on its own, as vsr did when it cut
     * events itself: an empty one adds nothing, two chunks give two */
    vsr_completions_stream_t s;
    vsr_completions_stream_init(&s);
    vsr_buf_t out;
    vsr_buf_init(&out, 1 << 20);
    const char *two = "data\ndata: {\"error\":{\"message\":\"x\"}}\ndata: {\"error\":{\"message\":\"y\"}}\n\n";
    const char *want = "data: {\"error\":{\"message\":\"x\"}}\n\ndata: {\"error\":{\"message\":\"y\"}}\n\n";
    assert_int_equal(vsr_completions_stream_feed(&s, two, strlen(two), &out), VSR_OK);
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    vsr_completions_stream_free(&s);
    vsr_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_response),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_stream_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
