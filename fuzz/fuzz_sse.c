/*
 * fuzz_sse.c — the server-sent-events parser over arbitrary bytes.
 *
 * Input byte 0 picks the line limit (small ones hit the limit paths) and
 * byte 1 seeds the split points; the rest is the stream.  Checks, beyond
 * memory safety:
 *  - the events (type, id, data) and the final result are the same whether
 *    the stream is fed whole, byte by byte, or in pseudo-random pieces;
 *  - every event has data no longer than the limit, no CR or LF in its type
 *    or id, and a type that is never empty;
 *  - a parser that failed stays failed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz_sse: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

typedef struct {
    vsr_buf_t out;
    size_t max;
} rec_t;

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t d, vsr_slice_t id)
{
    rec_t *r = ud;
    CHECK(d.len <= r->max);
    CHECK(type.len > 0);
    CHECK(memchr(type.p, '\n', type.len) == NULL && memchr(type.p, '\r', type.len) == NULL);
    CHECK(id.len == 0 || (memchr(id.p, '\n', id.len) == NULL && memchr(id.p, '\r', id.len) == NULL &&
                          memchr(id.p, '\0', id.len) == NULL));
    vsr_buf_printf(&r->out, "%zu:", type.len);
    vsr_buf_append_slice(&r->out, type);
    vsr_buf_printf(&r->out, "%zu:", id.len);
    vsr_buf_append_slice(&r->out, id);
    vsr_buf_printf(&r->out, "%zu:", d.len);
    vsr_buf_append_slice(&r->out, d);
    return VSR_OK;
}

static const vsr_sse_callbacks_t cbs = {on_event};

/* mode 0: whole; 1: byte by byte; 2: pieces from the seed */
static int run(const char *p, size_t n, size_t max, int mode, unsigned seed, vsr_buf_t *out)
{
    rec_t r = {.max = max ? max : 1024 * 1024}; /* 0: the parser's default */
    vsr_buf_init(&r.out, 0);
    vsr_sse_parser_t ps;
    vsr_sse_init(&ps, max, &cbs, &r);
    int rc = VSR_OK;
    size_t i = 0;
    while (i < n && rc == VSR_OK) {
        size_t step = mode == 0 ? n : mode == 1 ? 1 : 1 + (seed = seed * 1103515245u + 12345u) % 17;
        if (step > n - i)
            step = n - i;
        rc = vsr_sse_feed(&ps, p + i, step);
        i += step;
    }
    if (rc != VSR_OK)
        CHECK(vsr_sse_feed(&ps, "\n\n", 2) == VSR_ERR_INVALID);
    vsr_buf_printf(&r.out, "|rc=%d|events=%llu", rc, (unsigned long long)ps.events);
    vsr_sse_free(&ps);
    *out = r.out;
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    static const size_t maxes[] = {0, 1, 2, 8, 64, 4096};
    size_t max = maxes[data[0] % 6];
    unsigned seed = data[1];
    const char *p = (const char *)data + 2;
    size_t n = size - 2;
    vsr_buf_t a, b, c;
    int ra = run(p, n, max, 0, seed, &a);
    int rb = run(p, n, max, 1, seed, &b);
    int rc = run(p, n, max, 2, seed, &c);
    CHECK(ra == rb && rb == rc);
    CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    CHECK(a.len == c.len && memcmp(a.data, c.data, a.len) == 0);
    vsr_buf_free(&a);
    vsr_buf_free(&b);
    vsr_buf_free(&c);
    return 0;
}
