/*
 * fuzz_remote_answer.c — a remote classifier's answer (src/signals/remote.c)
 * on hostile input.  The first byte picks the reading: bit 0 entities
 * (else labels), bit 1 contract label_distribution; the rest is the answer.
 * Checks, beyond memory safety: an accepted answer is written out as JSON
 * of the runtime's shape ({"labels": [...]} or {"entities": [...]}) whose
 * scores are numbers in [0, 1]; a refused one says why.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "signals/signals.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_remote_answer: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int entities = data[0] & 1, distribution = (data[0] >> 1) & 1;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    const char *why = NULL;
    int rc = vsr_signals_remote_answer(vsr_slice((const char *)data + 1, size - 1), entities, distribution, &pool,
                                       &out, &why);
    CHECK(rc == VSR_OK || rc == VSR_ERR_INVALID);
    if (rc != VSR_OK) {
        CHECK(why != NULL);
    } else {
        CHECK(why == NULL);
        vsr_json_t j;
        memset(&j, 0, sizeof(j));
        CHECK(vsr_json_parse(&j, out.data, out.len, NULL) == VSR_OK);
        uint32_t arr;
        CHECK(vsr_json_type(&j, 0) == VSR_JSON_OBJECT);
        CHECK(vsr_json_object_get(&j, 0, entities ? "entities" : "labels", &arr) == VSR_OK);
        CHECK(vsr_json_type(&j, arr) == VSR_JSON_ARRAY);
        CHECK(entities || j.toks[arr].count > 0);
        uint32_t t = arr + 1;
        for (uint32_t i = 0; i < j.toks[arr].count; i++, t = j.toks[t].next) {
            uint32_t s;
            double p = -1;
            CHECK(vsr_json_object_get(&j, t, "score", &s) == VSR_OK);
            CHECK(vsr_json_number(&j, s, &p) == VSR_OK && p >= 0 && p <= 1);
        }
        vsr_json_free(&j);
    }
    vsr_buf_free(&out);
    vsr_pool_free(&pool);
    return 0;
}
