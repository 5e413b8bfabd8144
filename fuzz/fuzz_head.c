/*
 * fuzz_head.c — the "vsr-head 1" and "vsr-head 2" parser (src/models/head.c) over arbitrary
 * bytes.  Beyond memory safety, a head that loads must be usable: its
 * dimensions within the documented bounds, every label a non-empty string
 * found again by vsr_head_label_index(), and a prediction on a fixed input a
 * probability distribution (each in [0, 1], summing to 1) whose top-1 from
 * vsr_head_top_k() is its largest value; a wrong input width is refused.
 * A lexical part has a power-of-two bucket count within bounds, and a
 * prediction with a text is a probability distribution too.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "fuzz_head: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_head_t *h = NULL;
    int rc = vsr_head_load_mem(data, size, &h);
    if (rc != VSR_OK) {
        CHECK(h == NULL);
        CHECK(rc == VSR_ERR_INVALID || rc == VSR_ERR_TOO_BIG);
        return 0;
    }
    size_t dim = vsr_head_dim(h), n = vsr_head_classes(h);
    CHECK(dim >= 1 && dim <= VSR_HEAD_MAX_DIM);
    CHECK(n >= 2 && n <= VSR_HEAD_MAX_CLASSES);
    double t = vsr_head_temperature(h);
    CHECK(isfinite(t) && t >= VSR_HEAD_MIN_TEMP && t <= VSR_HEAD_MAX_TEMP);
    for (size_t i = 0; i < n; i++) {
        const char *l = vsr_head_label(h, i);
        CHECK(l && *l && strlen(l) <= VSR_HEAD_MAX_LABEL);
        CHECK(vsr_head_label_index(h, l) == (int)i);
    }
    CHECK(vsr_head_label(h, n) == NULL);
    static float x[VSR_HEAD_MAX_DIM], p[VSR_HEAD_MAX_CLASSES];
    for (size_t d = 0; d < dim; d++) x[d] = (float)((d % 7) - 3) / 3.0f;
    CHECK(vsr_head_predict(h, x, dim, p) == VSR_OK);
    double sum = 0, max = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(p[i] >= 0 && p[i] <= 1);
        sum += p[i];
        if (p[i] > max) max = p[i];
    }
    CHECK(fabs(sum - 1.0) < 1e-3);
    size_t idx[3];
    CHECK(vsr_head_top_k(p, n, 3, idx) == (n < 3 ? n : 3));
    CHECK(p[idx[0]] == max);
    size_t lex = vsr_head_lex_buckets(h);
    CHECK(lex == 0 || (lex >= VSR_HEAD_MIN_LEX && lex <= VSR_HEAD_MAX_LEX && (lex & (lex - 1)) == 0));
    static const char text[] = "What is a tort? 12 kg of NaCl, in law";
    CHECK(vsr_head_predict_text(h, x, dim, text, sizeof text - 1, p) == VSR_OK);
    sum = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(p[i] >= 0 && p[i] <= 1);
        sum += p[i];
    }
    CHECK(fabs(sum - 1.0) < 1e-3);
    CHECK(vsr_head_predict(h, x, dim + 1, p) == VSR_ERR_INVALID);
    vsr_head_free(h);
    return 0;
}
