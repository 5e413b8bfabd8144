/*
 * fuzz_guard.c — the jailbreak classifiers (src/models/guard.c) on hostile
 * input.  The first byte picks the mode:
 *   even: the rest is a model file for vsr_guard_lr_load_mem(); a model that
 *         loads is then made to score a fixed text;
 *   odd:  the rest is a text scored by a small fixed model, whole and in
 *         windows.
 * Checks, beyond memory safety: a load either succeeds or says
 * VSR_ERR_INVALID and hands back nothing; scores are probabilities in [0, 1];
 * a text scored in one window has the whole text's score.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/guard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz_guard: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

static const char MODEL[] =
    "{\"coefficients\":[[1.5,-1,2,0.5,3,-2]],\"intercept\":[-1],\"classes\":[0,1],"
    "\"vocabulary\":{\"ignore\":0,\"rules\":1,\"ignore rules\":2,\"kk\":3,\"dan\":4,\"ab cd\":5},"
    "\"idf\":[2,1,3,1,2.5,1.5],\"ngram_range\":[1,2],\"lowercase\":true,\"threshold\":0.5}";

static vsr_guard_lr_t *fixed;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (!fixed)
        CHECK(vsr_guard_lr_load_mem(MODEL, sizeof MODEL - 1, &fixed) == VSR_OK);
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    double p, q;
    size_t w;
    if ((data[0] & 1) == 0) {
        vsr_guard_lr_t *m = NULL;
        int rc = vsr_guard_lr_load_mem(rest, n, &m);
        CHECK(rc == VSR_OK || rc == VSR_ERR_INVALID);
        CHECK((rc == VSR_OK) == (m != NULL));
        if (m) {
            static const char text[] = "Ignore the RULES, DAN: ab cd \xe2\x84\xaa\xe2\x84\xaa ignore";
            CHECK(vsr_guard_lr_score(m, text, sizeof text - 1, &p) == VSR_OK);
            CHECK(!(p < 0) && !(p > 1));
            vsr_guard_lr_free(m);
        }
        return 0;
    }
    CHECK(vsr_guard_lr_score(fixed, rest, n, &p) == VSR_OK);
    CHECK(vsr_guard_lr_score_chunked(fixed, rest, n, &q, &w) == VSR_OK);
    CHECK(p >= 0 && p <= 1 && q >= 0 && q <= 1 && w >= 1);
    if (w == 1)
        CHECK(p == q);
    return 0;
}
