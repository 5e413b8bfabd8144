/*
 * fuzz_completions.c — the Completions codec over arbitrary bytes.
 *
 * Checks, beyond memory safety:
 *  - a request it accepts becomes valid JSON with a chat view, and the
 *    Messages codec takes it (or finds it too big);
 *  - an answer it accepts becomes valid JSON;
 *  - a stream's output does not depend on how its input was cut, and each
 *    of its events is "data: " and valid JSON or [DONE].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "proto/anthropic.h"
#include "proto/completions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_completions: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static void check_json(const char *p, size_t n)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, p ? p : "", n, NULL);
    if (rc != VSR_OK)
        fprintf(stderr, "fuzz_completions: not JSON: %.*s\n", (int)(n > 2000 ? 2000 : n), p);
    CHECK(rc == VSR_OK);
    vsr_json_free(&j);
}

static void check_request(const char *p, size_t n)
{
    vsr_buf_t chat, msg;
    vsr_buf_init(&chat, 0);
    vsr_buf_init(&msg, 0);
    char err[160];
    if (vsr_completions_request_to_chat(p, n, &chat, err, sizeof(err)) == VSR_OK) {
        vsr_json_t j;
        CHECK(vsr_json_parse(&j, chat.data, chat.len, NULL) == VSR_OK);
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        vsr_chat_view_t v;
        const char *why = NULL;
        CHECK(vsr_chat_view_build(&j, VSR_API_CHAT, &pool, &v, &why) == VSR_OK);
        vsr_pool_free(&pool);
        vsr_json_free(&j);
        vsr_anthropic_error_t e;
        int rc = vsr_anthropic_request_from_chat(chat.data, chat.len, NULL, &msg, &e);
        CHECK(rc == VSR_OK || rc == VSR_ERR_TOO_BIG || (rc == VSR_ERR_INVALID && e.type != NULL));
    } else {
        CHECK(err[0] != '\0');
    }
    vsr_buf_free(&chat);
    vsr_buf_free(&msg);
}

static void stream_run(const char *p, size_t n, size_t step, vsr_buf_t *out)
{
    vsr_completions_stream_t s;
    vsr_completions_stream_init(&s);
    vsr_buf_reset(out);
    for (size_t i = 0; i < n; i += step)
        vsr_completions_stream_feed(&s, p + i, n - i < step ? n - i : step, out);
    CHECK(s.sse._line.len <= VSR_ANTHROPIC_MAX_EVENT && s.sse._data.len <= VSR_ANTHROPIC_MAX_EVENT + 1);
    vsr_completions_stream_free(&s);
}

static void check_stream(const char *p, size_t n)
{
    vsr_buf_t whole, cut;
    vsr_buf_init(&whole, 0);
    vsr_buf_init(&cut, 0);
    stream_run(p, n, n ? n : 1, &whole);
    stream_run(p, n, n > 512 ? 97 : 1, &cut);
    CHECK(whole.len == cut.len && (whole.len == 0 || memcmp(whole.data, cut.data, whole.len) == 0));
    size_t i = 0;
    while (i < whole.len) {
        const char *end = NULL;
        for (size_t k = i; k + 1 < whole.len && !end; k++)
            if (whole.data[k] == '\n' && whole.data[k + 1] == '\n')
                end = whole.data + k;
        CHECK(end != NULL);
        size_t len = (size_t)(end - (whole.data + i));
        CHECK(len >= 6 && memcmp(whole.data + i, "data: ", 6) == 0);
        if (!(len == 12 && memcmp(whole.data + i + 6, "[DONE]", 6) == 0))
            check_json(whole.data + i + 6, len - 6);
        i += len + 2;
    }
    vsr_buf_free(&whole);
    vsr_buf_free(&cut);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    check_request(p, size);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    if (vsr_completions_response_from_chat(p, size, &out) == VSR_OK)
        check_json(out.data, out.len);
    vsr_buf_free(&out);
    check_stream(p, size);
    return 0;
}
