/*
 * fuzz_responses.c — the Responses API codec over arbitrary bytes.
 *
 * The whole input is given to every translation (request, chat answer,
 * error body) and to the stream translator.  Checks:
 *  - whatever a translation accepts comes out as valid JSON without
 *    duplicate member names: the chat body (which also builds a chat view),
 *    the items, the conversation, the echo, the Response object and the
 *    conversation after it; a failed translation always says why, with a
 *    status;
 *  - what a request leaves (echo, conversation) feeds the answer side, and
 *    the conversation after the answer is accepted as the prior turns of the
 *    next request;
 *  - a stream's output is the same whole, cut at two places chosen from the
 *    input, and (for short inputs) one byte at a time; each event is
 *    "event: T" and a data line of JSON whose sequence_number counts up; the
 *    final Response object is JSON.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "proto/responses.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_responses: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static void check_json(const char *p, size_t n)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, p, n, NULL);
    if (rc != VSR_OK)
        fprintf(stderr, "fuzz_responses: not JSON: %.*s\n", (int)(n > 2000 ? 2000 : n), p);
    CHECK(rc == VSR_OK);
    uint32_t dup;
    CHECK(vsr_json_find_duplicate_key(&j, &dup) == 0);
    vsr_json_free(&j);
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
        fprintf(stderr, "fuzz_responses: no chat view (%s): %.*s\n", why, (int)b->len, b->data);
    CHECK(rc == VSR_OK);
    vsr_pool_free(&pool);
    vsr_json_free(&j);
}

static void check_err(int rc, const vsr_responses_error_t *e)
{
    CHECK(rc == VSR_ERR_INVALID || rc == VSR_ERR_TOO_BIG);
    CHECK(e->type != NULL && e->message[0] != '\0' && e->status >= 400 && e->status < 600);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    CHECK(vsr_responses_error_body(&b, e) == VSR_OK);
    check_json(b.data, b.len);
    vsr_buf_free(&b);
}

static void stream_run(const vsr_responses_meta_t *m, const char *p, size_t n, size_t cut1, size_t cut2, int bytewise,
                       vsr_buf_t *out, vsr_buf_t *final, int *rc_out)
{
    vsr_responses_stream_t s;
    vsr_responses_limits_t lim = {.max_event = 4096, .max_output = 8192, .max_items = 16};
    vsr_responses_stream_init(&s, m, &lim);
    vsr_buf_reset(out);
    if (bytewise) {
        for (size_t i = 0; i < n; i++)
            vsr_responses_stream_feed(&s, p + i, 1, out);
    } else {
        vsr_responses_stream_feed(&s, p, cut1, out);
        vsr_responses_stream_feed(&s, p + cut1, cut2 - cut1, out);
        vsr_responses_stream_feed(&s, p + cut2, n - cut2, out);
    }
    CHECK(s.sse._line.len <= 4096 && s.sse._data.len <= 4096 + 1 && s.text.len <= 8192 && s.args.len <= 8192);
    *rc_out = vsr_responses_stream_finish(&s, out);
    CHECK(*rc_out == VSR_OK || *rc_out == VSR_ERR_INVALID || *rc_out == VSR_ERR_TOO_BIG);
    if (final) {
        check_json(s.final.data, s.final.len);
        if (*rc_out == VSR_OK)
            check_json(s.conv.data, s.conv.len);
        vsr_buf_reset(final);
        vsr_buf_append_slice(final, vsr_buf_slice(&s.final));
    }
    vsr_responses_stream_free(&s);
}

static void check_stream(const vsr_responses_meta_t *m, const char *p, size_t n)
{
    vsr_buf_t whole, cut, final;
    vsr_buf_init(&whole, 0);
    vsr_buf_init(&cut, 0);
    vsr_buf_init(&final, 0);
    int rc1, rc2;
    stream_run(m, p, n, n, n, 0, &whole, &final, &rc1);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    size_t c1 = n ? (size_t)(h % (n + 1)) : 0, c2 = n ? (size_t)((h >> 32) % (n + 1)) : 0;
    if (c1 > c2) {
        size_t t = c1;
        c1 = c2;
        c2 = t;
    }
    stream_run(m, p, n, c1, c2, 0, &cut, NULL, &rc2);
    CHECK(rc1 == rc2 && whole.len == cut.len && memcmp(whole.data, cut.data, whole.len) == 0);
    if (n <= 512) {
        stream_run(m, p, n, 0, 0, 1, &cut, NULL, &rc2);
        CHECK(rc1 == rc2 && whole.len == cut.len && memcmp(whole.data, cut.data, whole.len) == 0);
    }
    /* events: "event: T\ndata: {"type":"T","sequence_number":N...}\n\n" */
    size_t i = 0;
    uint64_t seq = 0;
    while (i < whole.len) {
        const char *ev = whole.data + i;
        const char *nl = memchr(ev, '\n', whole.len - i);
        CHECK(nl != NULL && whole.len - i > 7 && memcmp(ev, "event: ", 7) == 0);
        size_t tlen = (size_t)(nl - ev) - 7;
        const char *d = nl + 1;
        const char *end = d;
        while (end + 1 < whole.data + whole.len && !(end[0] == '\n' && end[1] == '\n'))
            end++;
        CHECK(end + 1 < whole.data + whole.len && (size_t)(end - d) > 6 && memcmp(d, "data: ", 6) == 0);
        CHECK(memchr(d, '\n', (size_t)(end - d)) == NULL); /* one data line */
        check_json(d + 6, (size_t)(end - d - 6));
        char want[128];
        int wl = snprintf(want, sizeof(want), "{\"type\":\"%.*s\",\"sequence_number\":%llu,", (int)tlen, ev + 7,
                          (unsigned long long)seq++);
        CHECK(wl > 0 && (size_t)(end - d - 6) > (size_t)wl && memcmp(d + 6, want, (size_t)wl) == 0);
        i = (size_t)(end + 2 - whole.data);
    }
    vsr_buf_free(&whole);
    vsr_buf_free(&cut);
    vsr_buf_free(&final);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    vsr_buf_t chat, items, conv, echo, resp, conv2, chat2;
    vsr_buf_init(&chat, 1 << 20);
    vsr_buf_init(&items, 1 << 20);
    vsr_buf_init(&conv, 1 << 20);
    vsr_buf_init(&echo, 1 << 20);
    vsr_buf_init(&resp, 1 << 20);
    vsr_buf_init(&conv2, 1 << 20);
    vsr_buf_init(&chat2, 1 << 20);
    vsr_responses_error_t e;

    vsr_responses_info_t info;
    int rc = vsr_responses_request_info(p, size, NULL, &info, &e);
    if (rc != VSR_OK)
        check_err(rc, &e);
    else
        CHECK(strlen(info.previous_response_id) < sizeof(info.previous_response_id));

    vsr_responses_out_t out = {&chat, &items, &conv, &echo};
    static const char PRIOR[] = "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"}]";
    rc = vsr_responses_request_to_chat(p, size, (size & 1) ? PRIOR : NULL, (size & 1) ? sizeof(PRIOR) - 1 : 0, NULL,
                                       &out, &e);
    int have_request = rc == VSR_OK;
    if (rc == VSR_OK) {
        CHECK(e.type == NULL);
        check_json(chat.data, chat.len);
        check_view(&chat);
        check_json(items.data, items.len);
        check_json(conv.data, conv.len);
        check_json(echo.data, echo.len);
    } else {
        check_err(rc, &e);
    }

    vsr_responses_meta_t meta = {.id = VSR_SLICE_LIT("resp_f\"uzz"), .created_at = 1, .model = VSR_SLICE_LIT("m\n"),
                                 .echo = have_request ? vsr_buf_slice(&echo) : VSR_SLICE_NULL,
                                 .conv = have_request ? vsr_buf_slice(&conv) : VSR_SLICE_NULL};
    rc = vsr_responses_response_from_chat(p, size, &meta, NULL, &resp, &conv2, &e);
    if (rc == VSR_OK) {
        check_json(resp.data, resp.len);
        check_json(conv2.data, conv2.len);
        /* the conversation after the answer continues in a next request */
        static const char NEXT[] = "{\"model\":\"m\",\"input\":\"next\"}";
        vsr_responses_out_t o2 = {.chat = &chat2};
        rc = vsr_responses_request_to_chat(NEXT, sizeof(NEXT) - 1, conv2.data, conv2.len, NULL, &o2, &e);
        CHECK(rc == VSR_OK);
        check_json(chat2.data, chat2.len);
    } else {
        check_err(rc, &e);
    }

    vsr_buf_reset(&resp);
    CHECK(vsr_responses_error_from_chat(500, p, size, &resp) == VSR_OK);
    check_json(resp.data, resp.len);

    check_stream(&meta, p, size);

    vsr_buf_free(&chat);
    vsr_buf_free(&items);
    vsr_buf_free(&conv);
    vsr_buf_free(&echo);
    vsr_buf_free(&resp);
    vsr_buf_free(&conv2);
    vsr_buf_free(&chat2);
    return 0;
}
