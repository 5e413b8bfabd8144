/*
 * fuzz_extproc_stream.c — an ext_proc Process stream through a real routing
 * session, fed arbitrary DATA bytes (split at pseudo-random points), then
 * ended.  Checks, beyond memory safety and leaks:
 *  - every answer sent is one whole gRPC message that decodes as a
 *    ProcessingResponse with a part set;
 *  - finish runs exactly once, after the last answer, and ending a stream
 *    that was fed whole messages and waits on nothing finishes it.
 */
#include <envoy/service/ext_proc/v3/external_processor.pb-c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "extproc/extproc-int.h"
#include "extproc/extproc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_extproc_stream: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char *DOC =
    "version: v0.3\n"
    "listeners: [{name: l, address: 127.0.0.1, port: 8899}]\n"
    "providers:\n"
    "  defaults: {model: m}\n"
    "  models:\n"
    "    - {name: m, provider_model_id: up-m, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}\n"
    "    - {name: a, api_format: anthropic, backend_refs: [{endpoint: \"127.0.0.1:9\"}]}\n"
    "routing:\n"
    "  signals: {keywords: [{name: k, keywords: [claude]}]}\n"
    "  decisions:\n"
    "    - name: d\n"
    "      rules: {type: keyword, name: k}\n"
    "      modelRefs: [{model: a}]\n"
    "      plugins: [{type: system_prompt, configuration: {system_prompt: be brief}}]\n";

static vsr_engine_t *engine;

typedef struct {
    int finished, answers;
} peer_t;

static int on_answer(void *ud, const uint8_t *msg, size_t len, int *gs)
{
    (void)gs;
    peer_t *p = ud;
    Envoy__Service__ExtProc__V3__ProcessingResponse *r =
        envoy__service__ext_proc__v3__processing_response__unpack(NULL, len, msg);
    CHECK(r != NULL);
    CHECK(r->response_case != ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE__NOT_SET);
    envoy__service__ext_proc__v3__processing_response__free_unpacked(r, NULL);
    p->answers++;
    return 0;
}

static void io_send(void *ud, const char *b, size_t n)
{
    peer_t *p = ud;
    CHECK(!p->finished);
    vsr_grpc_deframer_t df;
    vsr__grpc_deframer_init(&df, 0);
    int gs;
    CHECK(vsr__grpc_deframe(&df, (const uint8_t *)b, n, on_answer, p, &gs) == VSR_OK);
    CHECK(vsr__grpc_deframer_idle(&df));
    vsr__grpc_deframer_free(&df);
}

static void io_finish(void *ud, int status, const char *msg)
{
    (void)status;
    (void)msg;
    peer_t *p = ud;
    CHECK(!p->finished);
    p->finished = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (engine == NULL) {
        vsr_config_t *cfg = NULL;
        vsr_buf_t err;
        vsr_buf_init(&err, 0);
        CHECK(vsr_config_load_string("c.yaml", DOC, strlen(DOC), &cfg, &err) == VSR_OK);
        engine = vsr_engine_new(cfg, 1, &err); /* kept for the process: cfg with it */
        CHECK(engine != NULL);
        vsr_buf_free(&err);
    }
    if (size < 1)
        return 0;
    unsigned seed = data[0];
    data++;
    size--;
    peer_t p = {0};
    vsr_xp_stream_opts_t o = {.max_message = 1u << 20, .max_queued = 1u << 20};
    vsr_xp_io_t io = {.send = io_send, .finish = io_finish, .ud = &p};
    vsr_xp_stream_t *st = vsr_xp_stream_open(engine, &o, &io);
    size_t off = 0;
    while (off < size && !p.finished) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 8) % 97;
        k = k > size - off ? size - off : k;
        vsr_xp_stream_data(st, data + off, k);
        off += k;
    }
    vsr_xp_stream_end(st);
    CHECK(p.finished); /* no port waits here: the end always finishes */
    CHECK(vsr_xp_stream_finished(st));
    vsr_xp_stream_free(st);
    return 0;
}
