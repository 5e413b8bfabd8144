/*
 * plugins — decision plugins (ref §2), one file per type, each registered by
 * type with its request-side hook (response-side hooks come with response
 * plugins).  A hook reads the request (JSON view + chat view) and records
 * what it changes: body edits as byte ranges, upstream header mutations, or
 * an immediate response.  Nothing is re-serialised.
 *
 * Implemented: system_prompt, header_mutation, fast_response, request_params,
 * tools, context_compression.
 */
#ifndef VSR_PLUGINS_H
#define VSR_PLUGINS_H

#include "base/base.h"
#include "config/config.h"
#include "json/json.h"

typedef struct {
    vsr_slice_t name;
    vsr_slice_t value;
} vsr_plugin_header_t;

/* Where a plugin reads the request and writes its changes. */
typedef struct {
    /* in */
    const vsr_json_t *json;          /* the parsed body; token 0 is the top-level object */
    const vsr_chat_view_t *chat;
    int stream;                      /* the client asked for SSE (fast_response answers in SSE then) */
    vsr_pool_t *pool;                /* everything a plugin allocates */
    /* out */
    vsr_json_edits_t *edits;         /* body edits (the engine adds its own, e.g. the model rewrite) */
    vsr_plugin_header_t *set_headers; size_t n_set_headers, cap_set_headers; /* upstream request: set/overwrite */
    vsr_slice_t *remove_headers; size_t n_remove_headers, cap_remove_headers; /* upstream request: remove */
    /* an immediate response (fast_response): status 0 = none */
    int imm_status;
    vsr_slice_t imm_content_type;
    vsr_slice_t imm_body;
    vsr_plugin_header_t imm_headers[4]; size_t n_imm_headers;
    /* debug evidence: the system prompt injected, for x-vsr-injected-system-prompt */
    int injected_system_prompt;
    /* debug evidence of tools (for x-vsr-tools-*): set when a tools plugin
     * ran on a chat request; entries of "tools" before it and after it */
    int tools_applied;
    size_t tools_before, tools_after;
    /* debug evidence of context_compression: the token estimate before and
     * after (after == before when the request was under trigger_tokens or
     * nothing could be cut), and how many message contents were cut */
    int compression_applied;
    uint64_t compression_tokens_before, compression_tokens_after;
    size_t compression_messages;
} vsr_plugin_ctx_t;

void vsr_plugin_ctx_init(vsr_plugin_ctx_t *ctx, const vsr_json_t *json, const vsr_chat_view_t *chat,
                         vsr_json_edits_t *edits, vsr_pool_t *pool);
/* Records a header set / removal (copies nothing: slices must live in the pool or the config). */
void vsr_plugin_set_header(vsr_plugin_ctx_t *ctx, vsr_slice_t name, vsr_slice_t value);
void vsr_plugin_remove_header(vsr_plugin_ctx_t *ctx, vsr_slice_t name);

/* Runs the request-side hook of every enabled plugin of a decision, in order.
 * Returns VSR_OK (ctx holds the changes; ctx->imm_status != 0 means answer
 * with the immediate response and call no model) or VSR_ERR_INVALID when the
 * body cannot be edited as the plugin needs (message in *why). */
int vsr_plugins_run_request(const vsr_decision_conf_t *decision, vsr_plugin_ctx_t *ctx, const char **why);

#endif /* VSR_PLUGINS_H */
