/*
 * fuzz_grpc.c — gRPC message framing and the grpc-timeout form over
 * arbitrary bytes.  Byte 0 picks the message limit, byte 1 seeds the split
 * points; the rest is a stream's DATA.  Checks, beyond memory safety:
 *  - the messages and the result are the same whether the stream is fed
 *    whole, byte by byte, or in pseudo-random pieces;
 *  - no message is longer than the limit; after an error nothing more is fed;
 *  - grpc-timeout of the input's first bytes parses only when it is 1 to 8
 *    digits and a unit, and never exceeds a day.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extproc/extproc-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "fuzz_grpc: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

typedef struct {
    vsr_buf_t got;
    uint32_t max;
} rec_t;

static int on_msg(void *ud, const uint8_t *msg, size_t len, int *grpc_status)
{
    rec_t *r = ud;
    CHECK(len <= r->max);
    vsr_buf_printf(&r->got, "%zu:", len);
    vsr_buf_append(&r->got, msg, len);
    /* a message starting with '!' is refused by the consumer */
    if (len && msg[0] == '!') {
        *grpc_status = VSR_GRPC_INVALID_ARGUMENT;
        return VSR_ERR_INVALID;
    }
    return 0;
}

static int run(const uint8_t *p, size_t n, uint32_t max, unsigned mode, unsigned seed, vsr_buf_t *out)
{
    vsr_grpc_deframer_t d;
    vsr__grpc_deframer_init(&d, max);
    rec_t r = {.max = max};
    vsr_buf_init(&r.got, 0);
    int rc = VSR_OK, st = -1;
    size_t off = 0;
    while (off < n && rc == VSR_OK) {
        size_t k = mode == 0 ? n - off : mode == 1 ? 1 : 1 + (seed = seed * 1103515245u + 12345u) % 23;
        k = k > n - off ? n - off : k;
        rc = vsr__grpc_deframe(&d, p + off, k, on_msg, &r, &st);
        off += k;
    }
    if (rc != VSR_OK)
        CHECK(st > 0);
    vsr_buf_printf(&r.got, "|rc=%d st=%d idle=%d", rc, rc == VSR_OK ? 0 : st, rc == VSR_OK ? vsr__grpc_deframer_idle(&d) : 0);
    vsr_buf_append_slice(out, vsr_buf_slice(&r.got));
    vsr_buf_free(&r.got);
    vsr__grpc_deframer_free(&d);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t max = (uint32_t)data[0] * 7;
    unsigned seed = data[1];
    const uint8_t *p = data + 2;
    size_t n = size - 2;
    vsr_buf_t a, b, c;
    vsr_buf_init(&a, 0);
    vsr_buf_init(&b, 0);
    vsr_buf_init(&c, 0);
    run(p, n, max ? max : 1, 0, seed, &a);
    run(p, n, max ? max : 1, 1, seed, &b);
    run(p, n, max ? max : 1, 2, seed, &c);
    CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    CHECK(a.len == c.len && memcmp(a.data, c.data, a.len) == 0);
    vsr_buf_free(&a);
    vsr_buf_free(&b);
    vsr_buf_free(&c);
    uint64_t ms;
    size_t tl = n < 12 ? n : 12;
    if (vsr_grpc_timeout_ms(vsr_slice((const char *)p, tl), &ms) == VSR_OK) {
        CHECK(tl >= 2 && tl <= 9);
        for (size_t i = 0; i + 1 < tl; i++)
            CHECK(p[i] >= '0' && p[i] <= '9');
        CHECK(strchr("HMSmun", p[tl - 1]) != NULL && p[tl - 1] != 0);
        CHECK(ms <= 24ull * 3600 * 1000);
    }
    return 0;
}
