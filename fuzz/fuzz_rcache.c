/*
 * fuzz_rcache.c — the response cache's readers of backend bytes
 * (src/routing/resp_cache.c) over arbitrary input: an answer put into its stored
 * form (JSON, or an event stream put together), a stored value read back,
 * and a stored completion replayed as an event stream; plus the embedding
 * reader of a runtime result.
 *
 * Input byte 0: bit 0 = treat the rest as an event stream, bit 1 = ask for
 * the usage chunk on replay.  Checks, beyond memory safety:
 *  - a stored form, when made, reads back: its time, then a JSON object with
 *    a non-empty choices array;
 *  - its replay is an event stream that the SSE parser reads whole, whose
 *    last event is [DONE], and which, stored again, gives the same text;
 *  - an embedding, when read, has unit length.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/sse.h"
#include "routing/routing-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_rcache: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

typedef struct {
    int last_done;
    uint64_t n;
} seen_t;

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t d, vsr_slice_t id)
{
    (void)type;
    (void)id;
    seen_t *s = ud;
    s->n++;
    s->last_done = vsr_slice_eq_cstr(d, "[DONE]");
    return VSR_OK;
}

static const vsr_sse_callbacks_t cb = {on_event};

/* choice 0's message content token of a completion (0: none); j is parsed (free it) */
static uint32_t content_of(vsr_slice_t json, vsr_json_t *j)
{
    uint32_t ch, msg, c;
    if (vsr_json_parse(j, json.p, json.len, NULL) != VSR_OK || vsr_json_type(j, 0) != VSR_JSON_OBJECT ||
        vsr_json_object_get(j, 0, "choices", &ch) != VSR_OK || vsr_json_type(j, ch) != VSR_JSON_ARRAY ||
        j->toks[ch].count == 0 || vsr_json_object_get(j, ch + 1, "message", &msg) != VSR_OK ||
        vsr_json_type(j, msg) != VSR_JSON_OBJECT || vsr_json_object_get(j, msg, "content", &c) != VSR_OK ||
        vsr_json_type(j, c) != VSR_JSON_STRING)
        return 0;
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int sse = data[0] & 1, usage = (data[0] >> 1) & 1;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    vsr_buf_t stored;
    vsr_buf_init(&stored, 0);
    if (vsr__rc_stored_form(body, len, sse, 1234, &stored) == VSR_OK) {
        uint64_t t;
        vsr_slice_t json;
        CHECK(vsr__rc_parse_stored(vsr_buf_slice(&stored), &t, &json) == VSR_OK && t == 1234);
        vsr_buf_t replay;
        vsr_buf_init(&replay, 0);
        if (vsr__rc_replay_sse(json, usage, &replay) == VSR_OK) {
            seen_t s = {0};
            vsr_sse_parser_t p;
            vsr_sse_init(&p, (size_t)1 << 30, &cb, &s);
            CHECK(vsr_sse_feed(&p, replay.data, replay.len) == VSR_OK);
            vsr_sse_free(&p);
            CHECK(s.last_done && s.n >= 3);
            /* a replay stored again keeps the text (when the stored content was a string) */
            vsr_json_t j1, j2;
            uint32_t t1 = content_of(json, &j1);
            vsr_buf_t again;
            vsr_buf_init(&again, 0);
            if (t1 && vsr__rc_stored_form(replay.data, replay.len, 1, 1, &again) == VSR_OK) {
                uint64_t t2;
                vsr_slice_t json2;
                CHECK(vsr__rc_parse_stored(vsr_buf_slice(&again), &t2, &json2) == VSR_OK);
                uint32_t tt2 = content_of(json2, &j2);
                CHECK(tt2 != 0);
                vsr_pool_t pool;
                vsr_pool_init(&pool);
                vsr_slice_t u1, u2; /* the unescaped texts */
                if (vsr_json_string(&j1, t1, &pool, &u1) == VSR_OK && vsr_json_string(&j2, tt2, &pool, &u2) == VSR_OK)
                    CHECK(vsr_slice_eq(u1, u2));
                vsr_pool_free(&pool);
                vsr_json_free(&j2);
            }
            vsr_buf_free(&again);
            vsr_json_free(&j1);
        }
        vsr_buf_free(&replay);
    }
    vsr_buf_free(&stored);

    float v[VSR_CACHE_DIM];
    if (vsr__rc_read_embedding(vsr_slice(body, len), v, VSR_CACHE_DIM) == VSR_OK) {
        double n = 0;
        for (size_t i = 0; i < VSR_CACHE_DIM; i++)
            n += (double)v[i] * v[i];
        CHECK(fabs(n - 1) < 1e-3);
    }
    return 0;
}
