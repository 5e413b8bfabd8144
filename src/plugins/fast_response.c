/*
 * fast_response.c — answers the request at once with the configured
 * message, calling no model (ref §2).
 *
 * Non-streaming: 200, application/json, an OpenAI chat.completion:
 *   {"id":"chatcmpl-fast-<32 hex>","object":"chat.completion","created":<unix s>,
 *    "model":"router","choices":[{"index":0,"message":{"role":"assistant",
 *    "content":<message>},"finish_reason":"stop"}],
 *    "usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}
 * Streaming (ctx->stream): 200, text/event-stream, three events:
 *   data: {chunk: delta {"role":"assistant","content":<message>}, finish_reason null}
 *   data: {chunk: delta {}, finish_reason "stop"}
 *   data: [DONE]
 * each chunk {"id":..,"object":"chat.completion.chunk","created":..,"model":"router","choices":[..]}.
 * Header x-vsr-fast-response: true (the engine adds x-vsr-response-path).
 * The same shape answers every API kind (a Responses-API rendering is not
 * implemented).  An absent message answers with empty content.
 */
#include "plugins/plugins_int.h"

#include <stdio.h>
#include <time.h>

static void chunk_head(vsr_buf_t *b, const char *id, long long created)
{
    vsr_buf_printf(b, "data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%lld,"
                      "\"model\":\"router\",\"choices\":[{\"index\":0,\"delta\":",
                   id, created);
}

int vsr__plugin_fast_response_request(const vsr_plugin_conf_t *conf, vsr_plugin_ctx_t *ctx, const char **why)
{
    vsr_slice_t message = vsr_slice_cstr(conf->u.fast_response.message);
    char uuid[37], id[64];
    vsr_uuid4(uuid);
    size_t w = (size_t)snprintf(id, sizeof(id), "chatcmpl-fast-");
    for (const char *p = uuid; *p && w + 1 < sizeof(id); p++)
        if (*p != '-')
            id[w++] = *p;
    id[w] = '\0';
    long long created = (long long)time(NULL);

    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    if (ctx->stream) {
        chunk_head(&b, id, created);
        vsr_buf_append_cstr(&b, "{\"role\":\"assistant\",\"content\":");
        vsr_buf_append_json_string(&b, message);
        vsr_buf_append_cstr(&b, "},\"finish_reason\":null}]}\n\n");
        chunk_head(&b, id, created);
        vsr_buf_append_cstr(&b, "{},\"finish_reason\":\"stop\"}]}\n\n");
        vsr_buf_append_cstr(&b, "data: [DONE]\n\n");
        ctx->imm_content_type = VSR_SLICE_LIT("text/event-stream");
    } else {
        vsr_buf_printf(&b, "{\"id\":\"%s\",\"object\":\"chat.completion\",\"created\":%lld,\"model\":\"router\","
                           "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":",
                       id, created);
        vsr_buf_append_json_string(&b, message);
        vsr_buf_append_cstr(&b, "},\"finish_reason\":\"stop\"}],"
                                "\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0}}");
        ctx->imm_content_type = VSR_SLICE_LIT("application/json");
    }
    ctx->imm_body = vsr__plugin_keep(ctx, &b);
    vsr_buf_free(&b);
    ctx->imm_status = 200;
    ctx->imm_headers[0].name = VSR_SLICE_LIT("x-vsr-fast-response");
    ctx->imm_headers[0].value = VSR_SLICE_LIT("true");
    ctx->n_imm_headers = 1;
    return VSR_OK;
}
