/*
 * fuzz_pii.c — the personal-data detector (src/models/pii.c) over arbitrary
 * bytes.  The first byte picks the threshold (byte / 255) and the entity cap
 * (1 + byte % 16 for a second, truncated call); the rest is the text.
 *
 * Checks, beyond memory safety: entities are in order, never overlap, lie
 * inside the text, are at most VSR_PII_MAX_SPAN bytes long, have a known
 * type and a score in [threshold, 1]; a smaller cap gives a prefix of the
 * full answer and says it truncated exactly when it dropped something; two
 * calls give the same answer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/pii.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_pii: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    float thr = (float)data[0] / 255.0f;
    size_t small_cap = 1 + data[0] % 16;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    static vsr_pii_entity_t a[VSR_PII_MAX_ENTITIES], b[VSR_PII_MAX_ENTITIES], c[16];
    size_t na = 0, nb = 0, nc = 0;
    int ta = 0, tb = 0, tc = 0;
    check(vsr_pii_detect(text, len, thr, a, VSR_PII_MAX_ENTITIES, &na, &ta) == VSR_OK, "detect ok");
    for (size_t k = 0; k < na; k++) {
        check(a[k].type < VSR_PII_N_TYPES, "known type");
        check(a[k].start < a[k].end && a[k].end <= len, "span inside the text");
        check(a[k].end - a[k].start <= VSR_PII_MAX_SPAN, "span bounded");
        check(a[k].score >= thr && a[k].score > 0 && a[k].score <= 1, "score in range");
        check(k == 0 || a[k].start >= a[k - 1].end, "ordered, no overlap");
    }
    check(vsr_pii_detect(text, len, thr, b, VSR_PII_MAX_ENTITIES, &nb, &tb) == VSR_OK, "detect ok twice");
    check(na == nb && ta == tb && memcmp(a, b, na * sizeof a[0]) == 0, "deterministic");
    check(vsr_pii_detect(text, len, thr, c, small_cap, &nc, &tc) == VSR_OK, "detect ok with a cap");
    check(nc == (na < small_cap ? na : small_cap), "cap keeps a prefix");
    check(memcmp(a, c, nc * sizeof a[0]) == 0, "cap keeps the same prefix");
    check(tc == (na > small_cap), "truncated exactly when something was dropped");
    return 0;
}
