/*
 * fuzz_rguard.c — the response_jailbreak plugin's readers of answer bytes
 * (src/routing/resp_guard.c) over arbitrary input: a chat.completion's text, a
 * chat stream's deltas, and the client stream's terminal held back, in
 * pieces cut where the input says.
 *
 * Input byte 0: bits 0-1 = the terminal's protocol (chat, Messages,
 * Responses); byte 1: where to cut the rest in two.  Checks, beyond memory
 * safety:
 *  - nothing is lost or reordered: what went out plus what is held (then
 *    released) is the input, byte for byte, however it was cut;
 *  - once the terminal is held, nothing after it goes out;
 *  - the text to scan is bounded (head and tail) whatever the answer's size;
 *  - a blocked stream's replacement is one whole event (ends in a blank line).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_rguard: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int term = data[0] % 3;
    const char *p = (const char *)data + 2;
    size_t n = size - 2;
    size_t cut = n ? data[1] % (n + 1) : 0;

    vsr__rguard_t g;
    vsr__rg_init(&g);
    g.withhold = 1;
    g.term = term;
    vsr_buf_t out, sent;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&sent, 0);
    size_t pieces[2][2] = {{0, cut}, {cut, n - cut}};
    for (int i = 0; i < 2; i++) {
        vsr_buf_reset(&out);
        vsr_buf_append(&out, p + pieces[i][0], pieces[i][1]);
        int was_held = g.held;
        vsr__rg_feed_sse(&g, p + pieces[i][0], pieces[i][1]);
        vsr__rg_withhold(&g, &out, 0);
        if (was_held)
            CHECK(out.len == 0);
        vsr_buf_append(&sent, out.data ? out.data : "", out.len);
    }
    vsr_buf_reset(&out);
    vsr__rg_release(&g, &out);
    vsr_buf_append(&sent, out.data ? out.data : "", out.len);
    CHECK(sent.len == n && (n == 0 || memcmp(sent.data, p, n) == 0));

    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t text = vsr__rg_text(&g, &pool);
    CHECK(text.len <= (128u << 10) + 1);
    vsr__rg_feed_json(&g, p, n);
    text = vsr__rg_text(&g, &pool);
    CHECK(text.len <= (128u << 10) + 1);
    vsr_buf_reset(&out);
    vsr__rg_blocked_event(&g, VSR_SLICE_LIT("blocked"), VSR_SLICE_LIT("resp_1"), 7, &out);
    CHECK(out.len >= 2 && out.data[out.len - 1] == '\n' && out.data[out.len - 2] == '\n');
    CHECK(g.carry.len == 0);
    vsr_pool_free(&pool);
    vsr_buf_free(&out);
    vsr_buf_free(&sent);
    vsr__rg_free(&g);
    return 0;
}
