/*
 * json — a strict, zero-copy JSON view over a request body.
 *
 * vsr_json_parse() validates the whole document (RFC 8259: no comments, no
 * trailing commas, no leading zeros, no raw control bytes in strings, one
 * top-level value followed only by whitespace) in a single pass and records a
 * flat array of tokens in document order.  Tokens point into the source by
 * offset; nothing is copied.  Objects are key, value, key, value ...; each
 * token knows where its subtree ends (`next`), so siblings are walked in
 * O(1) each.  Invalid UTF-8 is accepted and kept as-is (as Go's decoder
 * does), so a body the reference router accepts is accepted here.
 */
#ifndef VSR_JSON_H
#define VSR_JSON_H

#include "base/base.h"

typedef enum {
    VSR_JSON_OBJECT = 1,
    VSR_JSON_ARRAY,
    VSR_JSON_STRING,
    VSR_JSON_NUMBER,
    VSR_JSON_TRUE,
    VSR_JSON_FALSE,
    VSR_JSON_NULL,
} vsr_json_type_t;

typedef struct {
    uint32_t start;  /* offset of the first byte (strings: the opening quote) */
    uint32_t end;    /* offset one past the last byte (strings: past the closing quote) */
    uint32_t next;   /* index of the token after this one's subtree */
    uint32_t count;  /* objects: members; arrays: elements; else 0 */
    uint8_t type;    /* vsr_json_type_t */
    uint8_t escaped; /* strings: contains a backslash escape */
} vsr_json_tok_t;

typedef struct {
    uint32_t max_depth;  /* 0 → the default, 512 */
    uint32_t max_tokens; /* 0 = unlimited */
} vsr_json_limits_t;

typedef struct {
    const char *src;
    size_t len;
    vsr_json_tok_t *toks;
    uint32_t ntoks;
    uint32_t _cap;
    size_t err_offset;   /* after VSR_ERR_INVALID / VSR_ERR_TOO_BIG: where */
    const char *err_msg; /* ... and why (static string) */
} vsr_json_t;

/* Parses src[0..len) (borrowed: it must outlive the view).  limits may be
 * NULL.  Returns VSR_OK, VSR_ERR_INVALID (malformed) or VSR_ERR_TOO_BIG
 * (depth, token count, or len >= 4 GiB).  Call vsr_json_free() in every case. */
int vsr_json_parse(vsr_json_t *j, const char *src, size_t len, const vsr_json_limits_t *limits);
void vsr_json_free(vsr_json_t *j);

static inline vsr_json_type_t vsr_json_type(const vsr_json_t *j, uint32_t t)
{
    return (vsr_json_type_t)j->toks[t].type;
}
/* The raw bytes of token t (strings include their quotes). */
static inline vsr_slice_t vsr_json_raw(const vsr_json_t *j, uint32_t t)
{
    return vsr_slice(j->src + j->toks[t].start, j->toks[t].end - j->toks[t].start);
}

/* Object member lookup by key, comparing unescaped keys.  On duplicate keys
 * the last one wins (as in Go's encoding/json).  Returns VSR_OK with *value
 * the value token, or VSR_ERR_NOT_FOUND (also when obj is not an object). */
int vsr__json_object_get_n(const vsr_json_t *j, uint32_t obj, const char *key, size_t klen, uint32_t *value);
/* Inline so that a literal key's length is known at compile time. */
static inline int vsr_json_object_get(const vsr_json_t *j, uint32_t obj, const char *key, uint32_t *value)
{
    return vsr__json_object_get_n(j, obj, key, strlen(key), value);
}

/* Iteration: the first child of an object/array is t + 1 (objects: a key);
 * the sibling after child c is toks[c].next.  A container holds toks[t].count
 * children (objects: count keys, each followed by its value). */

/* The unescaped content of string token t.  Without escapes this is a slice
 * of the source (zero copy); with escapes the result is written into pool.
 * \u escapes become UTF-8; a lone surrogate becomes U+FFFD.  VSR_OK or
 * VSR_ERR_INVALID (t is not a string). */
int vsr_json_string(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, vsr_slice_t *out);
/* True when string token t equals s after unescaping (no allocation). */
int vsr_json_string_eq(const vsr_json_t *j, uint32_t t, vsr_slice_t s);
/* Duplicate member names.  RFC 8259 §4 says names SHOULD be unique and
 * leaves duplicates to the implementation (Go keeps the last, others the
 * first); I-JSON (RFC 7493 §2.3) says MUST.  A proxy that reads one copy
 * while its backend reads another is open to confusion, so vsr refuses them.
 * Finds, walking the objects in document order, a member whose unescaped
 * name equals an earlier one of the same object: 1 with *key the later key
 * token, 0 when every object's names are unique.  O(members · log members)
 * whatever the names; scratch memory is freed before it returns. */
int vsr_json_find_duplicate_key(const vsr_json_t *j, uint32_t *key);

/* Client text quoted in an error message: appends s to b as valid UTF-8,
 * every byte that is not part of a valid sequence replaced by U+FFFD, and
 * every other byte (NUL included) kept for the JSON string writer to escape.
 * At most `max` bytes are written, cut on a character boundary and then
 * followed by "...".  VSR_OK or VSR_ERR_TOO_BIG (the buffer's cap). */
int vsr_json_append_client_text(vsr_buf_t *b, vsr_slice_t s, size_t max);
/* The bound error messages use for a quoted client string (bytes). */
#define VSR_JSON_QUOTE_MAX 200
/* An OpenAI-style error body, appended to b:
 *   {"error":{"message":MSG,"type":TYPE,"code":CODE}}
 * code NULL writes null (OpenAI's convention: a string or null, never a
 * number).  VSR_OK or VSR_ERR_TOO_BIG (the buffer's cap). */
int vsr_json_error_body(vsr_buf_t *b, vsr_slice_t msg, const char *type, const char *code);

/* Boolean value of a true/false token: 1, 0, or VSR_ERR_INVALID. */
int vsr_json_bool(const vsr_json_t *j, uint32_t t);
/* Number token as double (strtod semantics on the token's bytes). */
int vsr_json_number(const vsr_json_t *j, uint32_t t, double *out);


/* ==== Edits: rewriting a body by byte ranges ===============================
 * A rewritten request body is the client's bytes with a few ranges replaced,
 * so it is produced as pieces (slices of the source and of new text) without
 * re-serialising anything.  Edits must not overlap; an insertion is an edit
 * with start == end.
 *
 * Overlap: two ranges overlap when they share a byte; an insertion overlaps
 * a range only when it falls strictly inside it (an insertion at either end
 * of a replaced range is fine and lands before / after its text).
 *
 * The structural helpers compose: any mix of member removals, member and
 * element insertions and value replacements on non-overlapping targets (in
 * any order, through one vsr_json_edits_t) yields valid JSON.  Removals of
 * neighbouring members are merged into one range per run, commas included;
 * insertions into a container carry their own separator (a separate
 * one-byte edit), dropped again if later removals empty the container.
 * The edit array is kept sorted by position (ties in insertion order):
 * adding an edit costs O(log n) plus a move of the edits after it, so add
 * many edits in document order (or use vsr_json_edit_remove_members). */
typedef struct {
    uint32_t start, end;  /* source range [start, end) replaced by text */
    vsr_slice_t text;     /* borrowed: must outlive the pieces */
    uint32_t seq;         /* private: insertion order, for ties at one offset */
} vsr_json_edit_t;

#define VSR_JSON_EDITS_INLINE 4
/* The first few edits are kept in the struct itself (a request's usual
 * edits: the model rewrite and a plugin's insertion), so the struct must
 * not be copied once it holds any. */
typedef struct {
    vsr_json_edit_t *e;
    size_t n, cap;
    vsr_json_edit_t inline_e[VSR_JSON_EDITS_INLINE];
} vsr_json_edits_t;

void vsr_json_edits_init(vsr_json_edits_t *ed);
void vsr_json_edits_free(vsr_json_edits_t *ed);
/* VSR_OK, or VSR_ERR_INVALID when the range overlaps an earlier edit's range
 * (insertions at the same offset are kept in the order they were added). */
int vsr_json_edits_add(vsr_json_edits_t *ed, uint32_t start, uint32_t end, vsr_slice_t text);
/* Replaces the value token t. */
int vsr_json_edit_replace(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t t, vsr_slice_t text);
/* Removes member (key token k and its value) from object obj, with the one
 * comma that separates it from a neighbour, so the result stays valid JSON.
 * Removing a member that is already removed is a no-op (VSR_OK), so two
 * plugins may both drop a parameter.  VSR_ERR_INVALID when k is not a key of
 * obj or the member overlaps another edit (e.g. its value was replaced). */
int vsr_json_edit_remove_member(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t obj, uint32_t k);
/* The same for n keys of obj at once (any order): O(members + edits) for the
 * whole batch instead of per key, for stripping many parameters.  All or
 * nothing: on VSR_ERR_INVALID no edit was added. */
int vsr_json_edit_remove_members(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t obj, const uint32_t *keys,
                                 size_t n);
/* Inserts `member` (e.g. "\"model\":\"x\"") as the first member of object obj,
 * adding the comma when the object is not empty. */
int vsr_json_edit_insert_member(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t obj, vsr_slice_t member);
/* Inserts `value` as the first element of array arr (comma added as needed). */
int vsr_json_edit_insert_element(vsr_json_edits_t *ed, const vsr_json_t *j, uint32_t arr, vsr_slice_t value);
/* 1 when [start, end) overlaps an edit already added (same rule as
 * vsr_json_edits_add), else 0.  Lets a plugin see that an earlier one already
 * removed or rewrote a member. */
int vsr_json_edits_overlaps(const vsr_json_edits_t *ed, uint32_t start, uint32_t end);
/* The edited body as pieces, allocated from pool; *n_out pieces.  With no
 * edits this is one piece: the source itself.  ed may be NULL (no edits).
 * Every edit must lie within the source (end <= len). */
vsr_slice_t *vsr_json_edits_apply(const vsr_json_edits_t *ed, const char *src, size_t len, vsr_pool_t *pool,
                                  size_t *n_out, uint64_t *total_len);

/* ==== The OpenAI request view ==============================================
 * What routing reads of a chat/completions/responses body, extracted once:
 * messages with roles and their text (string content, or the text parts of a
 * content array joined with "\n"), and request-shape facts. */
typedef enum {
    VSR_ROLE_OTHER = 0, VSR_ROLE_SYSTEM, VSR_ROLE_DEVELOPER, VSR_ROLE_USER, VSR_ROLE_ASSISTANT, VSR_ROLE_TOOL,
} vsr_role_t;

typedef struct {
    vsr_role_t role;
    uint32_t tok;             /* the message object token (0 when synthesised from a prompt string) */
    uint32_t content_tok;     /* its "content" value token, 0 when absent */
    vsr_slice_t text;         /* unescaped text (zero copy when possible; else in the pool) */
    unsigned has_image : 1;   /* an image_url / input_image part */
    unsigned has_tool_calls : 1; /* assistant "tool_calls" non-empty */
} vsr_chat_message_t;

typedef enum { VSR_API_CHAT = 0, VSR_API_COMPLETIONS, VSR_API_RESPONSES } vsr_api_kind_t;

typedef struct {
    vsr_api_kind_t api;
    vsr_chat_message_t *messages; /* chat: "messages"; completions: "prompt" (string or first of a list) as one user message;
                                   * responses: "input" string as one user message, or its message items; "instructions" as system */
    size_t n_messages;
    int last_user;            /* index of the latest user message, -1 when none */
    uint32_t messages_tok;    /* the "messages" array token (chat), 0 otherwise */
    size_t n_tools;           /* entries of "tools" */
    vsr_slice_t tool_choice;  /* "auto" / "none" / "required" when a string; empty otherwise ("required" also for an object) */
    int stream;               /* "stream": true */
    uint64_t text_bytes;      /* bytes of all messages' text, for the context token estimate */
    vsr_slice_t metadata;     /* the raw text of the top-level "metadata" object; empty when absent or not an object */
} vsr_chat_view_t;

/* Builds the view of a parsed body (top-level object).  Allocations come from
 * pool.  VSR_OK, or VSR_ERR_INVALID with *why set ("messages field is
 * required", "messages field must be an array", ...) for a body the API
 * cannot accept (*why is NULL on success; why may be NULL).  For chat,
 * messages[i] is always element i of "messages" (a non-object element is an
 * OTHER message without text).  The finer rules (content parts, prompt
 * arrays, responses items) are listed at the top of chatview.c. */
int vsr_chat_view_build(const vsr_json_t *j, vsr_api_kind_t api, vsr_pool_t *pool, vsr_chat_view_t *out,
                        const char **why);

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
    vsr_buf_t line, data, event; /* pending line; the current event's data and name */
    int cr;                      /* the last byte was a CR (a following LF belongs to it) */
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
    vsr_buf_t line, data;           /* private: the pending line; the current event's data */
    int cr;                         /* private: the last byte was a CR */
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

/* ==== Completions ==========================================================
 * OpenAI's Completions API (POST /v1/completions) <-> chat completions, for
 * a model that does not serve Completions itself (api_format anthropic:
 * composed with the Messages codec).  Pure, linear in the input; what maps
 * to what is listed at the top of completions.c. */

/* A completions request → a chat request (model kept).  VSR_OK, or
 * VSR_ERR_INVALID with err (NUL-terminated, err_len bytes at most) naming
 * the field that has no chat form. */
int vsr_completions_request_to_chat(const char *body, size_t len, vsr_buf_t *out, char *err, size_t err_len);
/* A chat.completion → a text_completion (choice 0).  VSR_OK, VSR_ERR_INVALID
 * (not a chat.completion) or VSR_ERR_TOO_BIG (out's cap). */
int vsr_completions_response_from_chat(const char *body, size_t len, vsr_buf_t *out);

/* chat.completion.chunk SSE bytes, in chunks of any size → text_completion
 * chunk SSE bytes.  An event over VSR_ANTHROPIC_MAX_EVENT bytes ends the
 * stream with an error event; later bytes are ignored. */
typedef struct {
    vsr_buf_t pend; /* an event's bytes not yet whole */
    int failed;
} vsr_completions_stream_t;

void vsr_completions_stream_init(vsr_completions_stream_t *s);
int vsr_completions_stream_feed(vsr_completions_stream_t *s, const char *p, size_t n, vsr_buf_t *out);
void vsr_completions_stream_free(vsr_completions_stream_t *s);

#endif /* VSR_JSON_H */
