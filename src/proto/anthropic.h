/*
 * proto/anthropic — Anthropic Messages <-> OpenAI chat completions.
 */
#ifndef VSR_PROTO_ANTHROPIC_H
#define VSR_PROTO_ANTHROPIC_H

#include "base/base.h"
#include "proto/sse.h"

/* ==== Anthropic Messages ===================================================
 * The codec between Anthropic's Messages API (POST /v1/messages) and OpenAI
 * chat completions, both directions: pure (no I/O, no clock, no globals),
 * single-threaded per object, linear in its input.  Bodies are given as bytes
 * and parsed here under the limits below; output is appended to a caller's
 * vsr_buf_t, whose cap bounds it (VSR_ERR_TOO_BIG past it).  What maps to
 * what, and what is dropped, is listed at the top of anthropic.c.
 *
 * Errors of a translation fill a vsr_anthropic_error_t: an Anthropic error
 * type ("invalid_request_error", "request_too_large", "api_error") and a
 * message naming the field and why ("max_tokens: Field required",
 * "messages.1.role: Input should be 'user' or 'assistant'"). */
#define VSR_ANTHROPIC_MAX_INPUT (16u << 20)      /* bytes of one body */
#define VSR_ANTHROPIC_MAX_DEPTH 64u              /* JSON nesting */
#define VSR_ANTHROPIC_MAX_ITEMS 4096u            /* messages + blocks + tools + tool calls */
#define VSR_ANTHROPIC_MAX_EVENT (1u << 20)       /* bytes of one SSE line / event */
#define VSR_ANTHROPIC_DEFAULT_MAX_TOKENS 4096u   /* egress, when the chat request has none */

typedef struct {
    size_t max_input;            /* 0 → VSR_ANTHROPIC_MAX_INPUT */
    uint32_t max_depth;          /* 0 → VSR_ANTHROPIC_MAX_DEPTH */
    uint32_t max_items;          /* 0 → VSR_ANTHROPIC_MAX_ITEMS */
    size_t max_event;            /* streams: 0 → VSR_ANTHROPIC_MAX_EVENT */
    uint32_t default_max_tokens; /* egress: 0 → VSR_ANTHROPIC_DEFAULT_MAX_TOKENS */
    int count_tokens;            /* ingress: a count_tokens body (max_tokens neither required nor copied) */
    int lenient;                 /* ingress: what has no chat form (document blocks, server tools ...) is left
                                  * out, not refused; on VSR_OK err->message names the first such thing
                                  * (empty when nothing was left out) and err->type is NULL */
} vsr_anthropic_limits_t;

typedef struct {
    const char *type;  /* static: Anthropic error type */
    char message[256]; /* NUL-terminated; client text in it is cut and made valid UTF-8 */
} vsr_anthropic_error_t;

/* Ingress: an Anthropic Messages request → an OpenAI chat request (model
 * kept).  lim may be NULL.  VSR_OK; VSR_ERR_INVALID (err: invalid_request_error,
 * what Anthropic itself would reject or what has no chat form);
 * VSR_ERR_TOO_BIG (err: request_too_large: the body, its nesting, its item
 * count, or out's cap).  On error out may hold a partial body. */
int vsr_anthropic_request_to_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, vsr_buf_t *out,
                                  vsr_anthropic_error_t *err);
/* Ingress answer: an OpenAI chat.completion → an Anthropic message (choice
 * 0).  VSR_OK, VSR_ERR_INVALID (not a chat.completion; err api_error) or
 * VSR_ERR_TOO_BIG. */
int vsr_anthropic_response_from_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, vsr_buf_t *out,
                                     vsr_anthropic_error_t *err);
/* The Anthropic error type for an HTTP status (400 invalid_request_error,
 * 401 authentication_error, 403 permission_error, 404 not_found_error, 413
 * request_too_large, 429 rate_limit_error, 529 overloaded_error, other 5xx
 * api_error, other 4xx invalid_request_error).  Static string. */
const char *vsr_anthropic_error_type(int status);
/* Appends {"type":"error","error":{"type":type,"message":message}}. */
int vsr_anthropic_error_body(vsr_buf_t *out, const char *type, vsr_slice_t message);
/* An OpenAI error body (any bytes) answered with `status` → an Anthropic
 * error body: error.message kept when there is one, else a message naming
 * the status; the type from the status.  VSR_OK or VSR_ERR_TOO_BIG. */
int vsr_anthropic_error_from_chat(int status, const char *body, size_t len, vsr_buf_t *out);

/* Egress: an OpenAI chat request → an Anthropic Messages request for a
 * backend whose api_format is anthropic.  VSR_OK, VSR_ERR_INVALID (err:
 * invalid_request_error, e.g. n > 1) or VSR_ERR_TOO_BIG. */
int vsr_anthropic_request_from_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, vsr_buf_t *out,
                                    vsr_anthropic_error_t *err);
/* Egress answer: an Anthropic message → an OpenAI chat.completion with the
 * given `created` (seconds; the codec reads no clock).  VSR_OK,
 * VSR_ERR_INVALID (err api_error) or VSR_ERR_TOO_BIG. */
int vsr_anthropic_response_to_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, uint64_t created,
                                   vsr_buf_t *out, vsr_anthropic_error_t *err);
/* An Anthropic error body → an OpenAI one {"error":{"message","type","code"}}
 * (type: the Anthropic error type; code: the status). */
int vsr_anthropic_error_to_chat(int status, const char *body, size_t len, vsr_buf_t *out);

/* ---- a model that speaks Messages ----
 * The provider side every caller shares (the routing session's upstream
 * call, a request graph's hop): its backend's whole answer in chat form.
 * Whether a model speaks Messages is its configuration's messages_api,
 * compiled from api_format at load. */
/* A Messages backend's answer → chat: a 2xx message by
 * vsr_anthropic_response_to_chat (default limits, `created`), any other
 * status's error by vsr_anthropic_error_to_chat.  Their returns. */
int vsr_anthropic_answer_to_chat(int status, const char *body, size_t len, uint64_t created, vsr_buf_t *out,
                                 vsr_anthropic_error_t *err);

/* Streams.  A translator is fed the upstream's SSE bytes in chunks of any
 * size and appends the translated SSE bytes to out; the output depends only
 * on the bytes, never on where the chunks were cut.  Memory: one pending line
 * and one pending event, each at most max_event bytes.
 *  TO_MESSAGES: OpenAI chat.completion.chunk SSE → Anthropic events
 *   (message_start, content_block_start/delta/stop, message_delta with
 *   stop_reason and usage, message_stop; an upstream error → an error event).
 *  TO_CHAT: Anthropic events → chat.completion.chunk SSE ending in
 *   data: [DONE] (with a usage chunk before it when include_usage).
 * vsr_anthropic_stream_feed returns VSR_OK, or VSR_ERR_INVALID /
 * VSR_ERR_TOO_BIG once the stream has failed (an event too long, a payload
 * that is not JSON, interleaved tool calls): an error event has then been
 * written and every later byte is ignored.  vsr_anthropic_stream_finish is
 * called when the upstream stream ends: a stream that ended properly gets
 * nothing more; one that ended early gets its open block closed and an
 * error event (api_error, "upstream stream ended before its end") instead of
 * a proper ending, so a client never takes a cut answer for a whole one —
 * except that a stream that sent its finish (finish_reason; message_delta's
 * stop_reason) but not its end marker ([DONE]; message_stop) is ended
 * normally.  VSR_OK, or VSR_ERR_INVALID when it ended early (VSR_ERR_TOO_BIG
 * when out's cap is hit, here or in feed: the stream has then failed). */
typedef enum { VSR_ANTHROPIC_TO_MESSAGES = 1, VSR_ANTHROPIC_TO_CHAT } vsr_anthropic_dir_t;

typedef struct {
    vsr_anthropic_dir_t dir;
    vsr_anthropic_limits_t lim;
    uint64_t created;
    int include_usage;
    vsr_sse_parser_t sse;        /* private: the event framing */
    vsr_buf_t *out;              /* private: feed's out, during the call */
    int cb_rc;                   /* private: an event's failure, for feed */
    int state;                   /* private */
    int block_open, block_tool;  /* private: the open content block */
    uint32_t next_block;         /* private: index of the next Anthropic block */
    int64_t cur_tool, max_tool;  /* private: OpenAI tool-call indices */
    const char *stop_reason;     /* private */
    uint64_t in_tokens, out_tokens;
    char id[128], model[256];
    size_t id_len, model_len;
} vsr_anthropic_stream_t;

/* created and include_usage matter only TO_CHAT.  lim may be NULL. */
void vsr_anthropic_stream_init(vsr_anthropic_stream_t *s, vsr_anthropic_dir_t dir, const vsr_anthropic_limits_t *lim,
                               uint64_t created, int include_usage);
int vsr_anthropic_stream_feed(vsr_anthropic_stream_t *s, const char *p, size_t n, vsr_buf_t *out);
int vsr_anthropic_stream_finish(vsr_anthropic_stream_t *s, vsr_buf_t *out);
void vsr_anthropic_stream_free(vsr_anthropic_stream_t *s);

#endif /* VSR_PROTO_ANTHROPIC_H */
