/*
 * fuzz_completion.c — reading a chat.completion and re-emitting it as SSE
 * (and with summed usage) over arbitrary bytes.
 *
 * Checks, beyond memory safety:
 *  - vsr__algo_sse_from_completion accepts exactly what
 *    vsr__algo_completion_parse accepts;
 *  - every SSE event is "data: " followed by valid JSON (or [DONE], last),
 *    every content piece is at most VSR_ALGO_SSE_PIECE bytes, and with one
 *    choice the pieces put together are the parsed content;
 *  - every token's text span lies inside the concatenated text, and the
 *    confidence scores are in [0, 1];
 *  - vsr__algo_with_usage of an accepted body is valid JSON.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/algo.h"
#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "fuzz_completion: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

static void check_sse(vsr_slice_t sse, vsr_buf_t *text, vsr_pool_t *pool, size_t max_piece)
{
    const char *p = sse.p, *end = sse.p + sse.len;
    int done = 0;
    while (p < end) {
        CHECK(!done);
        CHECK((size_t)(end - p) >= 8 && memcmp(p, "data: ", 6) == 0);
        const char *d = p + 6;
        const char *e = memmem(d, (size_t)(end - d), "\n\n", 2);
        CHECK(e != NULL);
        size_t len = (size_t)(e - d);
        if (len == 6 && memcmp(d, "[DONE]", 6) == 0) {
            done = 1;
        } else {
            vsr_json_t j;
            CHECK(vsr_json_parse(&j, d, len, NULL) == VSR_OK);
            uint32_t ch, delta, c;
            if (vsr_json_object_get(&j, 0, "choices", &ch) == VSR_OK && j.toks[ch].count &&
                vsr_json_object_get(&j, ch + 1, "delta", &delta) == VSR_OK &&
                vsr_json_object_get(&j, delta, "content", &c) == VSR_OK) {
                vsr_slice_t s;
                CHECK(vsr_json_string(&j, c, pool, &s) == VSR_OK);
                CHECK(s.len <= max_piece);
                vsr_buf_append_slice(text, s);
            }
            vsr_json_free(&j);
        }
        p = e + 2;
    }
    CHECK(done);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_algo_completion_t c;
    int rc = vsr__algo_completion_parse(body, size, &pool, &c);
    CHECK(rc == VSR_OK || rc == VSR_ERR_INVALID);
    if (rc != VSR_OK)
        CHECK(c.why != NULL);

    vsr_buf_t sse;
    vsr_buf_init(&sse, 0);
    int src = vsr__algo_sse_from_completion(&sse, body, size, size & 1);
    CHECK(src == rc);
    if (rc == VSR_OK) {
        vsr_buf_t text;
        vsr_buf_init(&text, 0);
        /* a piece holds at most VSR_ALGO_SSE_PIECE bytes of the content; an
         * invalid byte in it is written as U+FFFD, three bytes */
        size_t max_piece = vsr_utf8_valid((vsr_slice_t){body, size}) ? VSR_ALGO_SSE_PIECE : 3 * VSR_ALGO_SSE_PIECE;
        check_sse(vsr_buf_slice(&sse), &text, &pool, max_piece);
        /* the stream is JSON vsr wrote, so invalid UTF-8 in the content comes
         * back as U+FFFD: only valid text round-trips byte for byte */
        if (c.n_choices == 1 && vsr_utf8_valid(c.content))
            CHECK(vsr_slice_eq(vsr_buf_slice(&text), c.content));
        vsr_buf_free(&text);

        uint64_t end = 0;
        for (size_t i = 0; i < c.n_tokens; i++) {
            CHECK(c.tokens[i].text_start == end);
            end += c.tokens[i].text_len;
            CHECK(isnan(c.tokens[i].margin) || c.tokens[i].margin >= 0);
        }
        for (int m = VSR_ALGO_CONF_AVG_LOGPROB; m <= VSR_ALGO_CONF_HYBRID; m++)
            for (int f = 0; f < 2; f++) {
                double v = -1;
                int r = vsr__algo_confidence(&c, m, 0.5, 0.5, f, &v);
                CHECK(r == VSR_OK || r == VSR_ERR_INVALID);
                if (r == VSR_OK)
                    CHECK(v >= 0 && v <= 1);
            }

        vsr_buf_t u;
        vsr_buf_init(&u, 0);
        CHECK(vsr__algo_with_usage(&u, body, size, c.prompt_tokens, c.completion_tokens,
                                   VSR_SLICE_LIT("\"x\":[]")) == VSR_OK);
        vsr_json_t j;
        CHECK(vsr_json_parse(&j, u.data, u.len, NULL) == VSR_OK);
        vsr_json_free(&j);
        vsr_buf_free(&u);
    }
    vsr_buf_free(&sse);
    vsr_pool_free(&pool);
    return 0;
}
