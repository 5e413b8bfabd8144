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
/* Reading members the way the format codecs (proto/) do: token 0 is the
 * root, never a member's value, so 0 stands for "absent".
 * vsr_json_member: the value of member key of object t, or 0 (absent, t not
 * an object, or t past the tokens).  vsr_json_is: t is present and of type.
 * vsr_json_absent: t is absent or null.  vsr_json_str_is: t is a string
 * equal to s after unescaping. */
static inline uint32_t vsr_json_member(const vsr_json_t *j, uint32_t t, const char *key)
{
    uint32_t v;
    if (t >= j->ntoks || vsr_json_object_get(j, t, key, &v) != VSR_OK)
        return 0;
    return v;
}
static inline int vsr_json_is(const vsr_json_t *j, uint32_t t, vsr_json_type_t type)
{
    return t != 0 && vsr_json_type(j, t) == type;
}
static inline int vsr_json_absent(const vsr_json_t *j, uint32_t t)
{
    return t == 0 || vsr_json_type(j, t) == VSR_JSON_NULL;
}
static inline int vsr_json_str_is(const vsr_json_t *j, uint32_t t, const char *s)
{
    return vsr_json_is(j, t, VSR_JSON_STRING) && vsr_json_string_eq(j, t, vsr_slice_cstr(s));
}

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
    /* content parts by modality (VSR_MODALITY_*; saturating): a non-empty string content or text part is text;
     * image_url, input_image, image: image; input_audio, audio_url: audio; video_url, input_video: video */
    uint16_t n_parts[4];
} vsr_chat_message_t;
enum { VSR_MODALITY_TEXT = 0, VSR_MODALITY_IMAGE, VSR_MODALITY_AUDIO, VSR_MODALITY_VIDEO };

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

#endif /* VSR_JSON_H */
