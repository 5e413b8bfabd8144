/*
 * fuzz_anthropic.c — the Anthropic Messages codec over arbitrary bytes.
 *
 * The whole input is given to every translation (requests and answers both
 * ways, error bodies) and to both stream translators.  Checks:
 *  - whatever a translation accepts comes out as valid JSON, and a chat
 *    request that comes out of ingress builds a chat view;
 *  - round trips hold: what egress makes of a chat request, ingress takes
 *    back, and the other way round (only a limit may refuse it);
 *  - a stream's output is the same whole, cut at two places chosen from the
 *    input, and (for short inputs) one byte at a time; every data line of it
 *    is JSON or [DONE];
 *  - a failed translation always says why.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "proto/anthropic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_anthropic: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static void check_json(const char *p, size_t n)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, p, n, NULL);
    if (rc != VSR_OK)
        fprintf(stderr, "fuzz_anthropic: not JSON: %.*s\n", (int)(n > 2000 ? 2000 : n), p);
    CHECK(rc == VSR_OK);
    vsr_json_free(&j);
}

typedef int (*conv_fn)(const char *, size_t, const vsr_anthropic_limits_t *, vsr_buf_t *, vsr_anthropic_error_t *);

static int to_chat_at(const char *b, size_t n, const vsr_anthropic_limits_t *l, vsr_buf_t *o, vsr_anthropic_error_t *e)
{
    return vsr_anthropic_response_to_chat(b, n, l, 1, o, e);
}

static int conv(conv_fn f, const char *p, size_t n, vsr_buf_t *out)
{
    vsr_anthropic_error_t e;
    vsr_buf_reset(out);
    int rc = f(p, n, NULL, out, &e);
    if (rc == VSR_OK)
        check_json(out->data, out->len);
    else
        CHECK((rc == VSR_ERR_INVALID || rc == VSR_ERR_TOO_BIG) && e.type != NULL && e.message[0] != '\0');
    return rc;
}

static void check_view(const vsr_buf_t *b)
{
    vsr_json_t j;
    CHECK(vsr_json_parse(&j, b->data, b->len, NULL) == VSR_OK);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_view_t v;
    const char *why = NULL;
    int rc = vsr_chat_view_build(&j, VSR_API_CHAT, &pool, &v, &why);
    if (rc != VSR_OK)
        fprintf(stderr, "fuzz_anthropic: no chat view (%s): %.*s\n", why, (int)b->len, b->data);
    CHECK(rc == VSR_OK);
    vsr_pool_free(&pool);
    vsr_json_free(&j);
}

static void round_trip(conv_fn first, conv_fn second, const char *p, size_t n)
{
    vsr_buf_t a, b;
    vsr_buf_init(&a, 0);
    vsr_buf_init(&b, 0);
    if (conv(first, p, n, &a) == VSR_OK) {
        if (first == vsr_anthropic_request_to_chat)
            check_view(&a);
        int rc = conv(second, a.data, a.len, &b);
        if (rc != VSR_OK)
            fprintf(stderr, "fuzz_anthropic: round trip refused: %.*s\n", (int)a.len, a.data);
        CHECK(rc == VSR_OK || rc == VSR_ERR_TOO_BIG);
        if (rc == VSR_OK && second == vsr_anthropic_request_to_chat)
            check_view(&b);
    }
    vsr_buf_free(&a);
    vsr_buf_free(&b);
}

static void stream_run(vsr_anthropic_dir_t dir, const char *p, size_t n, size_t cut1, size_t cut2, int bytewise,
                       vsr_buf_t *out, int *rc_out)
{
    vsr_anthropic_stream_t s;
    vsr_anthropic_limits_t lim = {.max_event = 4096};
    vsr_anthropic_stream_init(&s, dir, &lim, 7, 1);
    vsr_buf_reset(out);
    if (bytewise) {
        for (size_t i = 0; i < n; i++)
            vsr_anthropic_stream_feed(&s, p + i, 1, out);
    } else {
        vsr_anthropic_stream_feed(&s, p, cut1, out);
        vsr_anthropic_stream_feed(&s, p + cut1, cut2 - cut1, out);
        vsr_anthropic_stream_feed(&s, p + cut2, n - cut2, out);
    }
    CHECK(s.sse._line.len <= 4096 && s.sse._data.len <= 4096 + 1); /* +1: the LF of the last data line */
    *rc_out = vsr_anthropic_stream_finish(&s, out);
    vsr_anthropic_stream_free(&s);
}

static void check_stream(vsr_anthropic_dir_t dir, const char *p, size_t n)
{
    vsr_buf_t whole, cut;
    vsr_buf_init(&whole, 0);
    vsr_buf_init(&cut, 0);
    int rc1, rc2;
    stream_run(dir, p, n, n, n, 0, &whole, &rc1);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    size_t c1 = n ? (size_t)(h % (n + 1)) : 0, c2 = n ? (size_t)((h >> 32) % (n + 1)) : 0;
    if (c1 > c2) {
        size_t t = c1;
        c1 = c2;
        c2 = t;
    }
    stream_run(dir, p, n, c1, c2, 0, &cut, &rc2);
    CHECK(rc1 == rc2 && whole.len == cut.len && memcmp(whole.data, cut.data, whole.len) == 0);
    if (n <= 512) {
        stream_run(dir, p, n, 0, 0, 1, &cut, &rc2);
        CHECK(rc1 == rc2 && whole.len == cut.len && memcmp(whole.data, cut.data, whole.len) == 0);
    }
    /* every data line parses */
    size_t i = 0;
    while (i < whole.len) {
        const char *nl = memchr(whole.data + i, '\n', whole.len - i);
        CHECK(nl != NULL);
        size_t len = (size_t)(nl - (whole.data + i));
        if (len >= 6 && memcmp(whole.data + i, "data: ", 6) == 0 &&
            !(len == 12 && memcmp(whole.data + i + 6, "[DONE]", 6) == 0))
            check_json(whole.data + i + 6, len - 6);
        i += len + 1;
    }
    vsr_buf_free(&whole);
    vsr_buf_free(&cut);
}

/* Lenient ingress (and count_tokens) walks what strict ingress walks: it
 * succeeds where strict does, with the same output and nothing named, and
 * where strict refuses only for what has no chat form, it succeeds naming
 * that very thing. */
static void check_lenient(const char *p, size_t n)
{
    vsr_buf_t a, b;
    vsr_buf_init(&a, 0);
    vsr_buf_init(&b, 0);
    vsr_anthropic_error_t es, el;
    vsr_anthropic_limits_t lim = {.lenient = 1, .count_tokens = (int)(n & 1)};
    vsr_anthropic_limits_t strict = {.count_tokens = lim.count_tokens};
    int rs = vsr_anthropic_request_to_chat(p, n, &strict, &a, &es);
    int rl = vsr_anthropic_request_to_chat(p, n, &lim, &b, &el);
    if (rl == VSR_OK) {
        check_json(b.data, b.len);
        check_view(&b);
        CHECK(el.type == NULL);
        if (rs == VSR_OK)
            CHECK(el.message[0] == '\0' && a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        else
            CHECK(rs == VSR_ERR_INVALID && strcmp(es.message, el.message) == 0 && strstr(el.message, "no chat form"));
    } else {
        CHECK(rs != VSR_OK); /* strict may stop earlier, at what lenient left out */
        if (strstr(es.message, "no chat form") == NULL)
            CHECK(rs == rl && strcmp(es.message, el.message) == 0);
    }
    vsr_buf_free(&a);
    vsr_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    check_lenient(p, size);
    round_trip(vsr_anthropic_request_to_chat, vsr_anthropic_request_from_chat, p, size);
    round_trip(vsr_anthropic_request_from_chat, vsr_anthropic_request_to_chat, p, size);
    round_trip(vsr_anthropic_response_from_chat, to_chat_at, p, size);
    round_trip(to_chat_at, vsr_anthropic_response_from_chat, p, size);
    vsr_buf_reset(&out);
    CHECK(vsr_anthropic_error_from_chat(500, p, size, &out) == VSR_OK);
    check_json(out.data, out.len);
    vsr_buf_reset(&out);
    CHECK(vsr_anthropic_error_to_chat(529, p, size, &out) == VSR_OK);
    check_json(out.data, out.len);
    vsr_buf_free(&out);
    check_stream(VSR_ANTHROPIC_TO_MESSAGES, p, size);
    check_stream(VSR_ANTHROPIC_TO_CHAT, p, size);
    return 0;
}
