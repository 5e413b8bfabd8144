/*
 * plugins — decision plugins (ref §2), one file per type, each registered by
 * type with its request-side hook (response-side hooks come with response
 * plugins).  A hook reads the request (JSON view + chat view) and records
 * what it changes: body edits as byte ranges, upstream header mutations, or
 * an immediate response.  Nothing is re-serialised.
 *
 * Implemented: system_prompt, header_mutation, fast_response, request_params,
 * tools, tool_selection, context_compression, rag (its retrieval runs in the
 * session, see vsr_rag_result_t).
 *
 * The tool plugins' semantic parts (tools.semantic_selection, tool_selection)
 * compare tools with the routing text by embedding.  The plugin layer has no
 * ports: before the plugins run, the session asks vsr_plugins_tool_texts()
 * what to embed, has the runtime embed it, and hands the plugins the cosine
 * similarities (vsr_plugin_ctx_t.tool_scores).
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

/* The similarities of the candidate tools to the routing text. */
typedef struct {
    int ok;                    /* 1: valid; 0: they could not be had (runtime down, failed task, deadline) */
    const double *request;     /* per element of the request's "tools", in order; NAN: the tool has no text */
    size_t n_request;          /* elements scored (<= VSR_TOOLS_MAX_SCORED); the ones past it are kept as they are */
    const double *db;          /* per tools-database entry */
    size_t n_db;
} vsr_tool_scores_t;

#define VSR_TOOLS_MAX_SCORED 128u /* request tools scored at most */
#define VSR_TOOLS_TEXT_MAX 1024u  /* bytes of one tool's text sent to be embedded */

/* The memories the session selected for the memory plugin to inject (memory.c), best first. */
typedef struct {
    const vsr_slice_t *texts;
    size_t n;
} vsr_memory_hits_t;

typedef enum { VSR_TOOLSEL_NONE = 0, VSR_TOOLSEL_SEMANTIC, VSR_TOOLSEL_UNAVAILABLE } vsr_toolsel_state_t;

/* The rag plugin's retrieval: the session calls the backends (routing's
 * rag.c, through its ports) before the plugins run, and the plugin injects
 * what came back (or blocks, per on_failure). */
typedef enum { VSR_RAG_NONE = 0, VSR_RAG_OK, VSR_RAG_FAILED } vsr_rag_status_t;
typedef struct {
    int status;                /* vsr_rag_status_t; OK with an empty context: the backends found nothing */
    vsr_slice_t context;       /* what the backends answered (pool), hits joined by "\n\n---\n\n" */
    vsr_slice_t error;         /* FAILED: why (pool), for on_failure block's 503 */
    int cached;                /* answered from the result cache */
    const char *backend;       /* the backend that answered: external_api | mcp | openai */
    uint64_t latency_ms;
} vsr_rag_result_t;

/* Where a plugin reads the request and writes its changes. */
typedef struct {
    /* in */
    const vsr_json_t *json;          /* the parsed body; token 0 is the top-level object */
    const vsr_chat_view_t *chat;
    int stream;                      /* the client asked for SSE (fast_response answers in SSE then) */
    vsr_pool_t *pool;                /* everything a plugin allocates */
    const vsr_tools_db_t *tools_db;  /* global.integrations.tools' database (NULL: none) */
    const vsr_tool_scores_t *tool_scores; /* NULL: none gathered (a semantic plugin then fails open) */
    const vsr_memory_hits_t *memories; /* NULL or none: the memory plugin injects nothing */
    const vsr_decision_conf_t *_decision; /* private: the decision being run */
    uint64_t context_window;         /* the selected model's context_window_size (its model card); 0: unknown */
    /* the client's request headers (what ingress kept), for a plugin's own
     * control header: 1 with *value when a field is named name (any case) */
    int (*request_header)(void *ud, const char *name, vsr_slice_t *value);
    void *request_header_ud;
    const vsr_rag_result_t *rag;     /* the rag plugin's retrieval, NULL when none ran */
    vsr_slice_t request_id;          /* the request's id (the rag tool message's tool_call_id) */
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
    /* ... and of the semantic selection: whether it ran on similarities or
     * failed open (vsr_toolsel_state_t), the tools it added from the
     * database, and the names it kept or added, best first, comma-separated
     * (x-vsr-tools-selected; names are [A-Za-z0-9_-], others are left out) */
    int tools_selection;
    size_t tools_added;
    vsr_slice_t tools_selected;
    /* debug evidence of context_compression: the token estimate before and
     * after (after == before when the request was under trigger_tokens or
     * nothing could be cut), and how many message contents were cut */
    int compression_applied;
    int compression_bypassed;        /* request_controls: the client's bypass directive skipped it */
    uint64_t compression_tokens_before, compression_tokens_after;
    size_t compression_messages;
    size_t memory_injected;          /* memories the memory plugin injected */
    /* the documents a retrieval plugin (rag) injected, as it injected them:
     * the hallucination check's grounding context (else the request's tool
     * results are) */
    vsr_slice_t rag_context;
    const char *rag_outcome;         /* x-vsr-rag: injected | cached | empty | failed | blocked; NULL: not run */
    /* in: the matched domain signal's name and confidence (tool_selection's
     * advanced_filtering category); empty when no domain matched */
    vsr_slice_t category;
    double category_confidence;
} vsr_plugin_ctx_t;

void vsr_plugin_ctx_init(vsr_plugin_ctx_t *ctx, const vsr_json_t *json, const vsr_chat_view_t *chat,
                         vsr_json_edits_t *edits, vsr_pool_t *pool);
/* Records a header set / removal (copies nothing: slices must live in the pool or the config). */
void vsr_plugin_set_header(vsr_plugin_ctx_t *ctx, vsr_slice_t name, vsr_slice_t value);
void vsr_plugin_remove_header(vsr_plugin_ctx_t *ctx, vsr_slice_t name);

/* What a decision's enabled plugins need compared with the routing text:
 * 0 when nothing (no semantic tool plugin, not a chat request, no tool to
 * compare).  1: *texts gets one text per element of the request's "tools"
 * (*n of them, at most VSR_TOOLS_MAX_SCORED; an empty slice for a tool with
 * neither name nor description), allocated from ctx->pool, and *with_db
 * says whether the tools database's texts are needed too. */
int vsr_plugins_tool_texts(const vsr_decision_conf_t *decision, const vsr_plugin_ctx_t *ctx, vsr_slice_t **texts,
                           size_t *n, int *with_db);

/* Runs the request-side hook of every enabled plugin of a decision, in order.
 * Returns VSR_OK (ctx holds the changes; ctx->imm_status != 0 means answer
 * with the immediate response and call no model) or VSR_ERR_INVALID when the
 * body cannot be edited as the plugin needs (message in *why). */
int vsr_plugins_run_request(const vsr_decision_conf_t *decision, vsr_plugin_ctx_t *ctx, const char **why);

/* ---- memory (memory.c): what the session needs around the plugin ----
 * A user's set of memories as the store keeps it (encode/decode), ranked
 * against a query (select: threshold, limit, hybrid rerank, reflection
 * gate), and the set after a turn (remember: the Q/A pair and, every third
 * user turn, the last five turns; pruned to max_memories_per_user).  A
 * memory's vector is the embedding of the user turn that made it. */
#define VSR_MEMORY_MAX_TEXT 4096u /* bytes of one memory's text */
#define VSR_MEMORY_MAX_DIM 4096u  /* floats in a memory's vector */

typedef struct {
    uint64_t created_ms;   /* wall clock */
    float importance;      /* 0.5 a Q/A pair, 0.7 a session chunk */
    vsr_slice_t text;
    const float *vec;      /* dim floats, unit length */
} vsr_memory_item_t;

typedef struct {
    size_t dim, n;
    uint32_t turns;        /* turns stored so far */
    vsr_memory_item_t *items; /* oldest first */
} vsr_memory_set_t;

extern const char vsr_memory_preamble[], vsr_memory_postamble[];

/* The decision's memory plugin (enabled or not), NULL when it has none. */
const vsr_plugin_memory_conf_t *vsr_memory_conf(const vsr_decision_conf_t *d);
/* Why the plugin does not run for this request ("disabled", "header",
 * "route", "model"), NULL when it does.  disable: x-disable-router-memory. */
const char *vsr_memory_skip(const vsr_config_t *cfg, const vsr_plugin_memory_conf_t *m, vsr_slice_t path,
                            vsr_slice_t model, vsr_slice_t disable);
/* 0 when the request carries tools or tool results, or its user turn is a greeting. */
int vsr_memory_should_search(const vsr_chat_view_t *chat);
int vsr_memory_is_greeting(vsr_slice_t query);
/* 1 when the query says my, I, me, mine, I'm, I've, I'll, I'd or myself (a
 * request the fact_check signal found needs_fact_check is searched only then) */
int vsr_memory_personal(vsr_slice_t query);
/* VSR_OK, or VSR_ERR_INVALID for bytes not in the stored form.  The texts
 * point into v (keep it while the set is used); the vectors are copied
 * into the pool (aligned). */
int vsr_memory_decode(vsr_slice_t v, vsr_pool_t *pool, vsr_memory_set_t *out);
void vsr_memory_encode(const vsr_memory_set_t *s, vsr_buf_t *out);
/* The memories to inject, best first, in *out (pool); how many. */
size_t vsr_memory_select(const vsr_config_t *cfg, const vsr_plugin_memory_conf_t *m, const vsr_memory_set_t *set,
                         const float *q, size_t dim, vsr_slice_t query, uint64_t now_ms, vsr_pool_t *pool,
                         vsr_slice_t **out);
/* The injected message's text. */
vsr_slice_t vsr_memory_context(vsr_pool_t *pool, const vsr_slice_t *texts, size_t n);
/* 1 with the user's new set in out when the turn changes it, else 0. */
int vsr_memory_remember(const vsr_config_t *cfg, const vsr_memory_set_t *old, const float *q, size_t dim,
                        const vsr_chat_view_t *chat, vsr_slice_t answer, uint64_t now_ms, vsr_pool_t *pool,
                        vsr_buf_t *out);

/* The query's rewrite by the external model of role memory_rewrite (ref
 * §2.1): its chat request (the reference's prompt, the last
 * VSR_MEMORY_REWRITE_HISTORY non-system messages and the user turn), and the
 * query its answer's content makes (<think> blocks, surrounding spaces and
 * quotes removed; empty: use the raw message). */
#define VSR_MEMORY_REWRITE_HISTORY 5
void vsr_memory_rewrite_request(vsr_buf_t *out, const char *model, const vsr_chat_view_t *chat);
vsr_slice_t vsr_memory_rewrite_result(vsr_pool_t *pool, vsr_slice_t content);

#endif /* VSR_PLUGINS_H */
