/*
 * fuzz_hcheck.c — the hallucination detector's answer and the body warning
 * (src/routing/hcheck.c) on hostile input.  The first byte splits the rest:
 * its value (mod the length) is where the answer text ends and the
 * detector's answer begins.  Checks, beyond memory safety: an accepted
 * verdict's spans are non-empty substrings of the answer, at most
 * VSR__HC_MAX_SPANS; the answer with the warning put before its contents
 * (the same bytes read as a chat.completion) is still JSON when it was.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "routing/routing-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_hcheck: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t rest = size - 1, cut = rest ? data[0] % (rest + 1) : 0;
    vsr_slice_t answer = vsr_slice((const char *)data + 1, cut);
    vsr_slice_t body = vsr_slice((const char *)data + 1 + cut, rest - cut);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr__hc_span_t spans[VSR__HC_MAX_SPANS];
    size_t n = 0;
    int rc = vsr__hc_parse(body, answer, &pool, spans, &n);
    CHECK(rc == VSR_OK || rc == VSR_ERR_INVALID);
    CHECK(n <= VSR__HC_MAX_SPANS);
    for (size_t i = 0; rc == VSR_OK && i < n; i++) {
        CHECK(spans[i].text.len > 0);
        CHECK(vsr_find(answer.p, answer.len, spans[i].text.p, spans[i].text.len) != NULL);
    }
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    int was_json = vsr_json_parse(&j, body.p ? body.p : "", body.len, NULL) == VSR_OK;
    vsr_json_free(&j);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr_buf_append_slice(&out, body);
    if (vsr__hc_prepend(out.data, out.len, vsr__hc_warning(1, spans, n, &pool), &pool, &out) == VSR_OK) {
        CHECK(was_json);
        memset(&j, 0, sizeof(j));
        CHECK(vsr_json_parse(&j, out.data ? out.data : "", out.len, NULL) == VSR_OK);
        vsr_json_free(&j);
    }
    (void)vsr__hc_answer(body.p, body.len, &pool);
    vsr_buf_free(&out);
    vsr_pool_free(&pool);
    return 0;
}
