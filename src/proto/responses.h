/*
 * proto/responses — OpenAI Responses API <-> chat completions.
 */
#ifndef VSR_PROTO_RESPONSES_H
#define VSR_PROTO_RESPONSES_H

#include "base/base.h"
#include "proto/sse.h"

/* ==== Responses API ========================================================
 * The codec between OpenAI's Responses API (POST /v1/responses) and chat
 * completions: pure (no I/O, no clock, no randomness, no globals), single-
 * threaded per object, linear in its input.  Bodies are parsed here under
 * the limits below; output is appended to caller buffers, whose caps bound
 * it (VSR_ERR_TOO_BIG past them).  What maps to what, what is dropped and
 * what is refused is listed at the top of responses.c.
 *
 * The caller owns ids, clocks and the store: it reads the request's
 * previous_response_id (vsr_responses_request_info), fetches that
 * response's conversation (a JSON array of chat messages, as this codec
 * wrote it), passes it to vsr_responses_request_to_chat, and after the
 * answer keeps the conversation the answer side returns (prior turns, this
 * request's input, the assistant's turn) for the next previous_response_id.
 *
 * Errors fill a vsr_responses_error_t: the HTTP status to answer (400,
 * 413; 502 for a chat answer the codec cannot read; 500 for a stored
 * conversation that is not a JSON array), an OpenAI error type,
 * the parameter at fault ("input[2].content[0].type", "" for none) and a
 * message in OpenAI's words ("Missing required parameter: 'model'."). */
#define VSR_RESPONSES_MAX_INPUT (16u << 20)  /* bytes of one body */
#define VSR_RESPONSES_MAX_DEPTH 64u          /* JSON nesting */
#define VSR_RESPONSES_MAX_ITEMS 4096u        /* input items + parts + tools; output items */
#define VSR_RESPONSES_MAX_EVENT (1u << 20)   /* streams: bytes of one SSE line / event */
#define VSR_RESPONSES_MAX_OUTPUT (16u << 20) /* streams: bytes kept of the answer (text, arguments, items) */

typedef struct {
    size_t max_input;  /* 0 → VSR_RESPONSES_MAX_INPUT */
    uint32_t max_depth; /* 0 → VSR_RESPONSES_MAX_DEPTH */
    uint32_t max_items; /* 0 → VSR_RESPONSES_MAX_ITEMS */
    size_t max_event;  /* 0 → VSR_RESPONSES_MAX_EVENT */
    size_t max_output; /* 0 → VSR_RESPONSES_MAX_OUTPUT */
} vsr_responses_limits_t;

typedef struct {
    int status;        /* HTTP status to answer with */
    const char *type;  /* static: "invalid_request_error", "server_error" */
    char param[96];    /* NUL-terminated; "" when no single parameter is at fault */
    char message[256]; /* NUL-terminated; client text in it is cut and made valid UTF-8 */
} vsr_responses_error_t;

/* What the caller needs of a request before translating it. */
typedef struct {
    int stream;                      /* "stream": true */
    int store;                       /* "store", default true */
    char previous_response_id[128];  /* NUL-terminated; "" when absent or null */
    int auto_store;                  /* "auto_store" (the memory plugin's per-request switch): 1, 0, -1 when absent */
} vsr_responses_info_t;

/* Reads stream, store and previous_response_id (checking their types and
 * that the id fits).  VSR_OK, VSR_ERR_INVALID or VSR_ERR_TOO_BIG (err). */
int vsr_responses_request_info(const char *body, size_t len, const vsr_responses_limits_t *lim,
                               vsr_responses_info_t *info, vsr_responses_error_t *err);

/* Outputs of a request translation.  chat is required; the others may be
 * NULL when not wanted.
 *  chat:  the chat completions body;
 *  items: this request's input items, normalised (a JSON array: every
 *         message has type "message" and content parts; string input is one
 *         user message), for GET /v1/responses/{id}/input_items;
 *  conv:  the conversation so far as chat messages (a JSON array: prior,
 *         then this input; instructions are not part of it, as a
 *         continued response does not inherit them);
 *  echo:  a JSON object of the request fields a Response object repeats
 *         (instructions, max_output_tokens, metadata, parallel_tool_calls,
 *         previous_response_id, reasoning, store, temperature, text,
 *         tool_choice, tools, top_p, truncation, user), defaults filled in,
 *         without whitespace between tokens (one SSE line); pass it back in
 *         vsr_responses_meta_t. */
typedef struct {
    vsr_buf_t *chat, *items, *conv, *echo;
} vsr_responses_out_t;

/* A Responses request (+ the stored conversation of its previous response,
 * a JSON array of chat messages; prior NULL or prior_len 0 for none) → the
 * outputs above.  lim may be NULL.  VSR_OK; VSR_ERR_INVALID (status 400:
 * what OpenAI refuses, unknown parameters, and what has no chat form, e.g.
 * built-in tools); VSR_ERR_TOO_BIG (413: the body, its nesting, its item
 * count, or an output's cap).  On error the outputs may hold partial text. */
int vsr_responses_request_to_chat(const char *body, size_t len, const char *prior, size_t prior_len,
                                  const vsr_responses_limits_t *lim, const vsr_responses_out_t *out,
                                  vsr_responses_error_t *err);

/* What a Response object carries besides the chat answer.  All borrowed. */
typedef struct {
    vsr_slice_t id;      /* "resp_..." (the caller's); item ids derive from it */
    uint64_t created_at; /* seconds */
    vsr_slice_t model;   /* used when the chat answer names none */
    vsr_slice_t echo;    /* vsr_responses_out_t.echo; empty → no echo fields */
    vsr_slice_t conv;    /* vsr_responses_out_t.conv; empty → [] */
} vsr_responses_meta_t;

/* A chat.completion → a Response object (choice 0) into out, and when conv
 * is not NULL the conversation after it (meta->conv plus the assistant's
 * turn as a chat message).  finish_reason length → status "incomplete",
 * incomplete_details.reason "max_output_tokens" (content_filter →
 * "content_filter"); tool_calls → function_call items.  VSR_OK,
 * VSR_ERR_INVALID (502: not a chat.completion) or VSR_ERR_TOO_BIG. */
int vsr_responses_response_from_chat(const char *body, size_t len, const vsr_responses_meta_t *meta,
                                     const vsr_responses_limits_t *lim, vsr_buf_t *out, vsr_buf_t *conv,
                                     vsr_responses_error_t *err);

/* {"error":{"message":..,"type":..,"param":..|null,"code":null}} for err. */
int vsr_responses_error_body(vsr_buf_t *out, const vsr_responses_error_t *err);
/* A chat error body (any bytes) answered with `status` → a Responses error
 * body for the same status: message, type, param and code kept when they
 * are there (code as a string), else a message naming the status and the
 * type from it.  VSR_OK or VSR_ERR_TOO_BIG. */
int vsr_responses_error_from_chat(int status, const char *body, size_t len, vsr_buf_t *out);

/* Streams: chat.completion.chunk SSE bytes, in chunks of any size → the
 * Responses events (`event: <type>\ndata: {...}\n\n`, sequence_number 0,
 * 1, 2 ...): response.created, response.in_progress, then per output item
 * output_item.added, (messages) content_part.added, output_text.delta...
 * (refusal.delta... in a refusal part), output_text.done (refusal.done),
 * content_part.done, (function calls)
 * function_call_arguments.delta..., function_call_arguments.done, then
 * output_item.done; and at the end response.completed (or
 * response.incomplete, as OpenAI sends for status "incomplete") carrying the
 * whole Response object.  The output depends only on the bytes, never on
 * where the chunks were cut.
 *
 * vsr_responses_stream_feed returns VSR_OK, or VSR_ERR_INVALID /
 * VSR_ERR_TOO_BIG once the stream has failed (an upstream error event, an
 * event too long, a payload that is not JSON, interleaved tool calls, the
 * answer past max_output): a response.failed event (status "failed",
 * error {code, message}) has then been written and every later byte is
 * ignored.  vsr_responses_stream_finish is called when the upstream stream
 * ends: a stream that sent its finish_reason ends normally (with or without
 * [DONE]); one that did not fails ("upstream stream ended before its end").
 * After finish (or a failure) `final` holds the whole Response object and
 * `conv` the conversation after it (meta->conv plus the assistant's turn;
 * empty when the stream failed), for the store.
 *
 * Memory: one pending line and one event's data, each at most max_event
 * bytes; the answer's text, its arguments, its finished items and the
 * assistant's turn, each at most max_output bytes (plus the copied meta). */
typedef struct {
    vsr_responses_limits_t lim;
    vsr_sse_parser_t sse;           /* private: the event framing */
    vsr_buf_t *out;                 /* private: feed's out, during the call */
    int cb_rc;                      /* private: an event's failure, for feed */
    int state;                      /* private */
    uint64_t seq;                   /* private: the next sequence_number */
    uint64_t created_at;
    vsr_buf_t id, model, echo, conv_in; /* private: copies of meta */
    vsr_buf_t text;                 /* private: the open message's text (raw JSON string body) */
    vsr_buf_t args;                 /* private: the open call's arguments (raw JSON string body) */
    vsr_buf_t call_id, call_name;   /* private: the open call's (raw JSON strings) */
    vsr_buf_t items;                /* private: finished output items, comma-separated */
    vsr_buf_t calls;                /* private: finished chat tool_calls, comma-separated */
    vsr_buf_t turn_text;            /* private: the message text, for the conversation */
    vsr_buf_t refusal, turn_refusal; /* private: the open message's refusal; all of it, for the conversation */
    int text_part, refusal_part;    /* private: content_index of the open message's parts, -1 none */
    int open;                       /* private: 0 none, 1 message, 2 function call */
    uint32_t n_items;               /* private: output items so far */
    int64_t cur_tool;               /* private: the open call's chat index */
    const char *finish;             /* private: the finish_reason seen, static */
    int have_usage;
    uint64_t in_tokens, out_tokens, total_tokens, cached_tokens, reasoning_tokens;
    vsr_buf_t final;                /* after finish: the Response object */
    vsr_buf_t conv;                 /* after finish: the conversation */
} vsr_responses_stream_t;

/* Copies what it needs of meta.  lim may be NULL. */
void vsr_responses_stream_init(vsr_responses_stream_t *s, const vsr_responses_meta_t *meta,
                               const vsr_responses_limits_t *lim);
int vsr_responses_stream_feed(vsr_responses_stream_t *s, const char *p, size_t n, vsr_buf_t *out);
int vsr_responses_stream_finish(vsr_responses_stream_t *s, vsr_buf_t *out);
void vsr_responses_stream_free(vsr_responses_stream_t *s);

#endif /* VSR_PROTO_RESPONSES_H */
