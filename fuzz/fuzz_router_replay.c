/* fuzz_router_replay.c — a router replay record (src/routing/resp_replay.c) built
 * from arbitrary bytes: the client's body (also read as the request for the
 * tool trace), the answer in arbitrary chunks, any bounds.  Beyond "no crash,
 * no leak": the record and its summary are always valid JSON, and no body
 * kept passes max_body_bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "routing/routing-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(void *ud, const vsr_replay_record_t *r)
{
    size_t max = *(size_t *)ud;
    vsr_json_t j;
    if (vsr_json_parse(&j, r->summary.p, r->summary.len, NULL) != VSR_OK) {
        fprintf(stderr, "fuzz_router_replay: the summary is not JSON: %.*s\n", (int)r->summary.len, r->summary.p);
        abort();
    }
    vsr_json_free(&j);
    if (vsr_json_parse(&j, r->record.p, r->record.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        fprintf(stderr, "fuzz_router_replay: the record is not JSON: %.*s\n", (int)r->record.len, r->record.p);
        abort();
    }
    static const char *const parts[] = {"request", "response"};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    for (int i = 0; i < 2; i++) {
        uint32_t part, body;
        vsr_slice_t text;
        if (vsr_json_object_get(&j, 0, parts[i], &part) != VSR_OK)
            continue;
        if (vsr_json_object_get(&j, part, "body", &body) != VSR_OK || vsr_json_string(&j, body, &pool, &text) != VSR_OK)
            abort();
        /* invalid UTF-8 became U+FFFD (3 bytes for 1): bounded by 3 * max */
        if (text.len > 3 * max)
            abort();
    }
    vsr_pool_free(&pool);
    vsr_json_free(&j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    vsr_plugin_router_replay_conf_t conf = {
        .enabled = 1,
        .max_records = 10,
        .capture_request_body = data[0] & 1,
        .capture_response_body = (data[0] >> 1) & 1,
        .max_body_bytes = data[1],
        .max_tool_trace_bytes = (uint64_t)data[2] * 8,
        .max_tool_trace_steps = data[0] >> 4,
    };
    int streamed = (data[0] >> 2) & 1, end = (data[0] >> 3) & 1 ? VSR_BODY_END : VSR_BODY_CUT;
    data += 3;
    size -= 3;
    /* the client's body, then the answer's chunks, separated by 0xff */
    const uint8_t *sep = memchr(data, 0xff, size);
    size_t req_len = sep ? (size_t)(sep - data) : size;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr__replay_t *r = vsr__replay_begin(&pool, &conf, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"),
                                         vsr_slice((const char *)data, req_len > 300 ? 300 : req_len),
                                         vsr_slice((const char *)data, req_len > 40 ? 40 : req_len),
                                         vsr_slice((const char *)data, req_len));
    vsr__replay_response(r, 200, streamed);
    const uint8_t *p = sep ? sep + 1 : data + size, *stop = data + size;
    while (p < stop) {
        const uint8_t *q = memchr(p, 0xff, (size_t)(stop - p));
        size_t n = q ? (size_t)(q - p) : (size_t)(stop - p);
        vsr__replay_feed(r, (const char *)p, n);
        p += n + (q != NULL);
    }
    vsr__replay_end(r, 0, VSR_PATH_UPSTREAM, end == VSR_BODY_CUT);
    vsr_json_t req;
    int parsed = vsr_json_parse(&req, (const char *)data, req_len, NULL) == VSR_OK;
    vsr_signal_hit_t hit = {"keywords", "k\"\x01", 0.5, 1};
    vsr_evidence_t ev = {.recipe = "default", .decision = "d", .selected_model = "m", .signals = &hit, .n_signals = 1};
    size_t max = (size_t)conf.max_body_bytes;
    vsr_ports_t ports = {.replay_store = check};
    vsr__replay_write(r, &ev, parsed ? &req : NULL, 1234, &ports, &max);
    vsr_json_free(&req);
    vsr__replay_free(r);
    vsr_pool_free(&pool);
    return 0;
}
