/*
 * anthropic.c — Anthropic Messages <-> OpenAI chat completions.  See proto/anthropic.h
 * ("Anthropic Messages") for the contracts.
 *
 * Every translation parses its input once (vsr_json_parse, under the
 * codec's limits) and writes its output in one walk of the tokens.  Strings
 * are copied as their raw JSON text (escapes and all), so joining texts
 * concatenates raw string bodies and nothing is unescaped except what must
 * be read (data URLs, tool-call arguments, which are JSON inside a string).
 *
 * Ingress request (Messages → chat):
 *  - system (string, or text blocks joined with "\n") → a first system message;
 *  - user content: a string stays a string; blocks become a string (text
 *    blocks joined with "\n") or, when the message holds an image, content
 *    parts (image → image_url, base64 sources as a data: URL); tool_result
 *    blocks become tool messages (text joined; images and is_error are
 *    dropped), in block order, splitting the user message around them;
 *  - assistant content: text blocks joined → content, tool_use → tool_calls
 *    (input serialised as the arguments string); thinking and
 *    redacted_thinking blocks are dropped;
 *  - max_tokens, temperature, top_p, top_k, stream copied; stop_sequences →
 *    stop; stream true adds stream_options.include_usage; tools →
 *    function tools; tool_choice auto/any/tool/none → "auto"/"required"/
 *    {function}/"none", disable_parallel_tool_use → parallel_tool_calls
 *    false; metadata.user_id → user;
 *  - every other field is dropped (thinking, service_tier, container,
 *    cache_control ...): a chat backend would reject what it does not know;
 *  - refused, as Anthropic refuses them: a missing model, max_tokens (not
 *    for count_tokens) or messages, roles other than user/assistant,
 *    malformed blocks; and what has no chat form (document blocks, server
 *    tools), which lenient mode leaves out instead, naming the first.
 * Ingress answer (chat.completion → message): choice 0; text → a text
 * block, tool_calls → tool_use blocks (arguments must hold a JSON object);
 * finish_reason stop → end_turn, length → max_tokens, tool_calls /
 * function_call → tool_use, content_filter → refusal; usage prompt /
 * completion tokens → input / output tokens; the id gets a "msg_" prefix.
 * Egress request (chat → Messages): system and developer messages, wherever
 * they stand, → system (joined with "\n\n"); tool messages → tool_result
 * blocks of a user turn; consecutive turns of one role merged into one
 * message (content always as blocks; empty texts skipped); image_url parts →
 * image blocks (data: URLs → base64 sources); max_completion_tokens or
 * max_tokens, else the default (4096); stop → stop_sequences; tools,
 * tool_choice, parallel_tool_calls, user mapped back; n other than 1
 * refused; the rest (penalties, logprobs, seed, response_format ...) dropped.
 * Egress answer: text blocks concatenated → content, tool_use → tool_calls;
 * end_turn / stop_sequence / pause_turn → stop, max_tokens → length,
 * tool_use → tool_calls, refusal → content_filter; prompt_tokens counts the
 * cache read and write tokens too.
 */
#include "proto/anthropic.h"

#include <stdarg.h>
#include <stdio.h>

#include "json/json.h"
#include "proto/proto-int.h"

/* ---- a parsed input --------------------------------------------------- */

typedef struct {
    vsr_json_t j;
    vsr_pool_t pool;
    w_t w;
    vsr_anthropic_limits_t lim;
    vsr_anthropic_error_t *err;
    vsr_anthropic_error_t scratch;
    uint32_t items;
} cx_t;

static void limits_fill(vsr_anthropic_limits_t *l, const vsr_anthropic_limits_t *in)
{
    LIMITS_FILL(l, in, VSR_ANTHROPIC);
    if (l->default_max_tokens == 0)
        l->default_max_tokens = VSR_ANTHROPIC_DEFAULT_MAX_TOKENS;
}

static int fail(cx_t *c, int rc, const char *type, const char *fmt, ...) VSR_PRINTF(4, 5);
static int fail(cx_t *c, int rc, const char *type, const char *fmt, ...)
{
    if (c->err->type != NULL)
        return rc; /* the first error wins */
    c->err->type = type;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err->message, sizeof(c->err->message), fmt, ap);
    va_end(ap);
    return rc;
}
#define BAD(c, ...) fail((c), VSR_ERR_INVALID, "invalid_request_error", __VA_ARGS__)

/* What has no chat form: refused, or (lenient) left out, the first such
 * thing named in err->message while err->type stays NULL. */
static int no_chat_form(cx_t *c, const char *fmt, ...) VSR_PRINTF(2, 3);
static int no_chat_form(cx_t *c, const char *fmt, ...)
{
    if (c->err->type != NULL || (c->lim.lenient && c->err->message[0]))
        return c->lim.lenient ? VSR_OK : VSR_ERR_INVALID;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err->message, sizeof(c->err->message), fmt, ap);
    va_end(ap);
    if (c->lim.lenient)
        return VSR_OK;
    c->err->type = "invalid_request_error";
    return VSR_ERR_INVALID;
}

/* A client string for an error message (proto-int.h). */
static const char *quote(cx_t *c, uint32_t t)
{
    return client_quote(&c->j, t, &c->pool, NULL);
}

/* repair: input that is not UTF-8 is translated with U+FFFD for each stray
 * byte (0 only where a result points into the input, which must stay as is). */
static int cx_open(cx_t *c, const char *body, size_t len, const vsr_anthropic_limits_t *lim, vsr_buf_t *out,
                   vsr_anthropic_error_t *err, int repair)
{
    memset(c, 0, sizeof(*c));
    limits_fill(&c->lim, lim);
    c->err = err ? err : &c->scratch;
    c->err->type = NULL;
    c->err->message[0] = '\0';
    c->w.b = out;
    c->w.rc = VSR_OK;
    vsr_pool_init(&c->pool);
    if (len > c->lim.max_input) {
        c->j.toks = NULL;
        return fail(c, VSR_ERR_TOO_BIG, "request_too_large", "body: larger than %zu bytes", c->lim.max_input);
    }
    uint32_t dup = 0;
    switch (doc_parse(&c->j, &c->pool, body, len, c->lim.max_depth, repair, &dup)) {
    case DOC_OK:
        return VSR_OK;
    case DOC_DEEP:
        return fail(c, VSR_ERR_TOO_BIG, "request_too_large", "body: nested deeper than %u levels", c->lim.max_depth);
    case DOC_MALFORMED:
        return BAD(c, "body: malformed JSON (%s at byte %zu)", c->j.err_msg ? c->j.err_msg : "invalid",
                   c->j.err_offset);
    case DOC_NOT_OBJECT:
        return BAD(c, "body: Input should be a JSON object");
    case DOC_DUPLICATE:
        break;
    }
    return BAD(c, "body: duplicate member %s", quote(c, dup));
}

static int cx_close(cx_t *c, int rc)
{
    if (rc == VSR_OK && c->w.rc != VSR_OK)
        rc = fail(c, c->w.rc, "request_too_large", "translated body: larger than the output limit");
    vsr_json_free(&c->j);
    vsr_pool_free(&c->pool);
    return rc;
}

static int item(cx_t *c)
{
    if (++c->items > c->lim.max_items)
        return fail(c, VSR_ERR_TOO_BIG, "request_too_large", "body: more than %u messages, blocks and tools",
                    c->lim.max_items);
    return VSR_OK;
}

static uint32_t first_child(uint32_t t)
{
    return t + 1;
}

static uint64_t count_of(const cx_t *c, uint32_t t)
{
    int64_t v = int_of(c, t);
    return v < 0 ? 0 : (uint64_t)v;
}

/* Writes the JSON text of a string token's *content* when it holds a JSON
 * object (tool-call arguments); "" → {}.  VSR_ERR_INVALID otherwise. */
static int put_args_object(cx_t *c, uint32_t t)
{
    vsr_slice_t s;
    if (!is(c, t, VSR_JSON_STRING) || vsr_json_string(&c->j, t, &c->pool, &s) != VSR_OK)
        return VSR_ERR_INVALID;
    vsr_slice_t trimmed = s;
    while (trimmed.len && (trimmed.p[0] == ' ' || trimmed.p[0] == '\n' || trimmed.p[0] == '\t' || trimmed.p[0] == '\r'))
        trimmed.p++, trimmed.len--;
    if (trimmed.len == 0) {
        PUT(&c->w, "{}");
        return VSR_OK;
    }
    vsr_json_t a;
    vsr_json_limits_t jl = {.max_depth = c->lim.max_depth, .max_tokens = 0};
    int rc = vsr_json_parse(&a, s.p, s.len, &jl);
    if (rc == VSR_OK && vsr_json_type(&a, 0) == VSR_JSON_OBJECT)
        put_slice(&c->w, vsr_slice(s.p + a.toks[0].start, a.toks[0].end - a.toks[0].start));
    else
        rc = VSR_ERR_INVALID;
    vsr_json_free(&a);
    return rc;
}

/* ---- errors ------------------------------------------------------------ */

const char *vsr_anthropic_error_type(int status)
{
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

int vsr_anthropic_error_body(vsr_buf_t *out, const char *type, vsr_slice_t message)
{
    w_t w = {out, VSR_OK};
    size_t mark = out->len;
    PUT(&w, "{\"type\":\"error\",\"error\":{\"type\":");
    put_str(&w, vsr_slice_cstr(type));
    PUT(&w, ",\"message\":");
    put_str(&w, message);
    PUT(&w, "}}");
    if (w.rc != VSR_OK)
        out->len = mark;
    return w.rc;
}

/* error.message of an error body (raw string token) into w, or a fallback. */
static int error_convert(int status, const char *body, size_t len, vsr_buf_t *out, int to_chat)
{
    cx_t c;
    size_t mark = out->len;
    int ok = cx_open(&c, body, len, NULL, out, NULL, 1) == VSR_OK;
    uint32_t e = ok ? get(&c, 0, "error") : 0;
    uint32_t msg = is(&c, e, VSR_JSON_OBJECT) ? get(&c, e, "message") : (is(&c, e, VSR_JSON_STRING) ? e : 0);
    uint32_t etype = is(&c, e, VSR_JSON_OBJECT) ? get(&c, e, "type") : 0;
    if (to_chat) {
        PUT(&c.w, "{\"error\":{\"message\":");
    } else {
        PUT(&c.w, "{\"type\":\"error\",\"error\":{\"type\":");
        put_str(&c.w, vsr_slice_cstr(vsr_anthropic_error_type(status)));
        PUT(&c.w, ",\"message\":");
    }
    if (is(&c, msg, VSR_JSON_STRING)) {
        raw(&c, msg);
    } else {
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "upstream answered with status %d", status);
        put_str(&c.w, vsr_slice_cstr(tmp));
    }
    if (to_chat) {
        PUT(&c.w, ",\"type\":");
        if (is(&c, etype, VSR_JSON_STRING))
            raw(&c, etype);
        else
            put_str(&c.w, vsr_slice_cstr(vsr_anthropic_error_type(status)));
        PUT(&c.w, ",\"code\":");
        put_u64(&c.w, status > 0 ? (uint64_t)status : 0);
    }
    PUT(&c.w, "}}");
    int rc = c.w.rc;
    if (rc != VSR_OK)
        out->len = mark;
    vsr_json_free(&c.j);
    vsr_pool_free(&c.pool);
    return rc;
}

int vsr_anthropic_error_from_chat(int status, const char *body, size_t len, vsr_buf_t *out)
{
    return error_convert(status, body, len, out, 0);
}

int vsr_anthropic_error_to_chat(int status, const char *body, size_t len, vsr_buf_t *out)
{
    return error_convert(status, body, len, out, 1);
}

/* ---- ingress request: Messages → chat ----------------------------------- */

/* Appends the raw bodies of the text blocks of array arr, joined by sep,
 * inside an already open string.  Non-text blocks are checked by the caller;
 * returns the number joined. */
static size_t join_texts(cx_t *c, uint32_t arr, const char *sep)
{
    size_t n = 0;
    uint32_t b = first_child(arr);
    for (uint32_t i = 0; i < c->j.toks[arr].count; i++, b = next_sib(c, b)) {
        uint32_t text = is(c, b, VSR_JSON_OBJECT) && str_is(c, get(c, b, "type"), "text") ? get(c, b, "text") : 0;
        if (!is(c, text, VSR_JSON_STRING))
            continue;
        if (n++ > 0)
            put(&c->w, sep, strlen(sep));
        put_slice(&c->w, inner(c, text));
    }
    return n;
}

static int check_text_block(cx_t *c, uint32_t b, const char *where, uint32_t i, uint32_t k)
{
    if (!is(c, get(c, b, "text"), VSR_JSON_STRING))
        return BAD(c, "%s.%u.content.%u.text: Input should be a valid string", where, i, k);
    return VSR_OK;
}

/* A user message with block content. */
static int user_blocks(cx_t *c, uint32_t arr, uint32_t i, int *first_msg)
{
    /* First pass: validate, and see whether content parts are needed. */
    int parts = 0;
    uint32_t b = first_child(arr);
    for (uint32_t k = 0; k < c->j.toks[arr].count; k++, b = next_sib(c, b)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        if (!is(c, b, VSR_JSON_OBJECT))
            return BAD(c, "messages.%u.content.%u: Input should be a valid dictionary", i, k);
        uint32_t type = get(c, b, "type");
        if (!is(c, type, VSR_JSON_STRING))
            return BAD(c, "messages.%u.content.%u.type: Field required", i, k);
        if (str_is(c, type, "text")) {
            if (check_text_block(c, b, "messages", i, k) != VSR_OK)
                return VSR_ERR_INVALID;
        } else if (str_is(c, type, "image")) {
            uint32_t src = get(c, b, "source");
            uint32_t st = get(c, src, "type");
            if (!is(c, src, VSR_JSON_OBJECT))
                return BAD(c, "messages.%u.content.%u.source: Field required", i, k);
            if (str_is(c, st, "base64")) {
                if (!is(c, get(c, src, "media_type"), VSR_JSON_STRING) || !is(c, get(c, src, "data"), VSR_JSON_STRING))
                    return BAD(c, "messages.%u.content.%u.source: a base64 source needs media_type and data", i, k);
            } else if (str_is(c, st, "url")) {
                if (!is(c, get(c, src, "url"), VSR_JSON_STRING))
                    return BAD(c, "messages.%u.content.%u.source.url: Field required", i, k);
            } else {
                return BAD(c, "messages.%u.content.%u.source.type: Input should be 'base64' or 'url'", i, k);
            }
            parts = 1;
        } else if (str_is(c, type, "tool_result")) {
            if (!is(c, get(c, b, "tool_use_id"), VSR_JSON_STRING))
                return BAD(c, "messages.%u.content.%u.tool_use_id: Field required", i, k);
            uint32_t tc = get(c, b, "content");
            if (tc != 0 && !is(c, tc, VSR_JSON_STRING) && !is(c, tc, VSR_JSON_ARRAY))
                return BAD(c, "messages.%u.content.%u.content: Input should be a valid string or list", i, k);
        } else if (no_chat_form(c, "messages.%u.content.%u.type: a '%s' block has no chat form", i, k,
                                quote(c, type)) != VSR_OK) {
            return VSR_ERR_INVALID;
        }
    }

    /* Second pass: runs of text/image blocks as user messages, tool_result
     * blocks as tool messages, in order. */
    int open = 0, run_n = 0, emitted = 0;
    w_t *w = &c->w;
    b = first_child(arr);
    for (uint32_t k = 0; k < c->j.toks[arr].count; k++, b = next_sib(c, b)) {
        uint32_t type = get(c, b, "type");
        if (str_is(c, type, "tool_result")) {
            if (open)
                put(w, parts ? "]}" : "\"}", 2);
            open = 0;
            if (!*first_msg)
                PUT(w, ",");
            *first_msg = 0;
            PUT(w, "{\"role\":\"tool\",\"tool_call_id\":");
            raw(c, get(c, b, "tool_use_id"));
            PUT(w, ",\"content\":");
            uint32_t tc = get(c, b, "content");
            if (is(c, tc, VSR_JSON_STRING)) {
                raw(c, tc);
            } else {
                PUT(w, "\"");
                if (tc != 0)
                    join_texts(c, tc, "\\n");
                PUT(w, "\"");
            }
            PUT(w, "}");
            emitted = 1;
            continue;
        }
        if (!str_is(c, type, "text") && !str_is(c, type, "image"))
            continue; /* lenient: left out */
        if (!open) {
            if (!*first_msg)
                PUT(w, ",");
            *first_msg = 0;
            PUT(w, "{\"role\":\"user\",\"content\":");
            put(w, parts ? "[" : "\"", 1);
            open = 1, run_n = 0, emitted = 1;
        }
        if (str_is(c, type, "text")) {
            if (parts) {
                if (run_n)
                    PUT(w, ",");
                PUT(w, "{\"type\":\"text\",\"text\":");
                raw(c, get(c, b, "text"));
                PUT(w, "}");
            } else {
                if (run_n)
                    PUT(w, "\\n");
                put_slice(w, inner(c, get(c, b, "text")));
            }
        } else { /* image */
            uint32_t src = get(c, b, "source");
            if (run_n)
                PUT(w, ",");
            PUT(w, "{\"type\":\"image_url\",\"image_url\":{\"url\":");
            if (str_is(c, get(c, src, "type"), "base64")) {
                PUT(w, "\"data:");
                put_slice(w, inner(c, get(c, src, "media_type")));
                PUT(w, ";base64,");
                put_slice(w, inner(c, get(c, src, "data")));
                PUT(w, "\"");
            } else {
                raw(c, get(c, src, "url"));
            }
            PUT(w, "}}");
        }
        run_n++;
    }
    if (open)
        put(w, parts ? "]}" : "\"}", 2);
    if (!emitted) {
        if (!*first_msg)
            PUT(w, ",");
        *first_msg = 0;
        PUT(w, "{\"role\":\"user\",\"content\":\"\"}");
    }
    return VSR_OK;
}

static int assistant_blocks(cx_t *c, uint32_t arr, uint32_t i)
{
    size_t n_text = 0, n_tools = 0;
    uint32_t b = first_child(arr);
    for (uint32_t k = 0; k < c->j.toks[arr].count; k++, b = next_sib(c, b)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        if (!is(c, b, VSR_JSON_OBJECT))
            return BAD(c, "messages.%u.content.%u: Input should be a valid dictionary", i, k);
        uint32_t type = get(c, b, "type");
        if (!is(c, type, VSR_JSON_STRING))
            return BAD(c, "messages.%u.content.%u.type: Field required", i, k);
        if (str_is(c, type, "text")) {
            if (check_text_block(c, b, "messages", i, k) != VSR_OK)
                return VSR_ERR_INVALID;
            n_text++;
        } else if (str_is(c, type, "tool_use")) {
            if (!is(c, get(c, b, "id"), VSR_JSON_STRING))
                return BAD(c, "messages.%u.content.%u.id: Field required", i, k);
            if (!is(c, get(c, b, "name"), VSR_JSON_STRING))
                return BAD(c, "messages.%u.content.%u.name: Field required", i, k);
            if (!is(c, get(c, b, "input"), VSR_JSON_OBJECT))
                return BAD(c, "messages.%u.content.%u.input: Input should be a valid dictionary", i, k);
            n_tools++;
        } else if (!str_is(c, type, "thinking") && !str_is(c, type, "redacted_thinking") &&
                   no_chat_form(c, "messages.%u.content.%u.type: a '%s' block has no chat form in an assistant turn",
                                i, k, quote(c, type)) != VSR_OK) {
            return VSR_ERR_INVALID;
        }
    }
    w_t *w = &c->w;
    PUT(w, "{\"role\":\"assistant\",\"content\":");
    if (n_text > 0) {
        PUT(w, "\"");
        join_texts(c, arr, "\\n");
        PUT(w, "\"");
    } else {
        put(w, n_tools ? "null" : "\"\"", n_tools ? 4 : 2);
    }
    if (n_tools > 0) {
        PUT(w, ",\"tool_calls\":[");
        size_t n = 0;
        b = first_child(arr);
        for (uint32_t k = 0; k < c->j.toks[arr].count; k++, b = next_sib(c, b)) {
            if (!str_is(c, get(c, b, "type"), "tool_use"))
                continue;
            if (n++)
                PUT(w, ",");
            PUT(w, "{\"id\":");
            raw(c, get(c, b, "id"));
            PUT(w, ",\"type\":\"function\",\"function\":{\"name\":");
            raw(c, get(c, b, "name"));
            PUT(w, ",\"arguments\":");
            put_str(w, vsr_json_raw(&c->j, get(c, b, "input")));
            PUT(w, "}}");
        }
        PUT(w, "]");
    }
    PUT(w, "}");
    return VSR_OK;
}

static int number_field(cx_t *c, const char *name, const char *out_name)
{
    uint32_t t = get(c, 0, name);
    if (t == 0 || vsr_json_type(&c->j, t) == VSR_JSON_NULL)
        return VSR_OK;
    if (!is(c, t, VSR_JSON_NUMBER))
        return BAD(c, "%s: Input should be a valid number", name);
    PUT(&c->w, ",\"");
    put(&c->w, out_name, strlen(out_name));
    PUT(&c->w, "\":");
    raw(c, t);
    return VSR_OK;
}

static int ingress_tools(cx_t *c, uint32_t tools)
{
    w_t *w = &c->w;
    if (!is(c, tools, VSR_JSON_ARRAY))
        return BAD(c, "tools: Input should be a valid list");
    if (c->j.toks[tools].count == 0)
        return VSR_OK;
    PUT(w, ",\"tools\":[");
    uint32_t t = first_child(tools), n = 0;
    for (uint32_t k = 0; k < c->j.toks[tools].count; k++, t = next_sib(c, t)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        if (!is(c, t, VSR_JSON_OBJECT))
            return BAD(c, "tools.%u: Input should be a valid dictionary", k);
        uint32_t type = get(c, t, "type");
        if (type != 0 && !str_is(c, type, "custom") && vsr_json_type(&c->j, type) != VSR_JSON_NULL) {
            if (no_chat_form(c, "tools.%u.type: the server tool '%s' has no chat form", k, quote(c, type)) != VSR_OK)
                return VSR_ERR_INVALID;
            continue; /* lenient: left out */
        }
        uint32_t name = get(c, t, "name"), desc = get(c, t, "description"), schema = get(c, t, "input_schema");
        if (!is(c, name, VSR_JSON_STRING))
            return BAD(c, "tools.%u.name: Field required", k);
        if (!is(c, schema, VSR_JSON_OBJECT))
            return BAD(c, "tools.%u.input_schema: Field required", k);
        if (desc != 0 && !is(c, desc, VSR_JSON_STRING))
            return BAD(c, "tools.%u.description: Input should be a valid string", k);
        if (n++)
            PUT(w, ",");
        PUT(w, "{\"type\":\"function\",\"function\":{\"name\":");
        raw(c, name);
        if (desc) {
            PUT(w, ",\"description\":");
            raw(c, desc);
        }
        PUT(w, ",\"parameters\":");
        raw(c, schema);
        PUT(w, "}}");
    }
    PUT(w, "]");
    return VSR_OK;
}

static int ingress_tool_choice(cx_t *c, uint32_t tc)
{
    w_t *w = &c->w;
    if (!is(c, tc, VSR_JSON_OBJECT))
        return BAD(c, "tool_choice: Input should be a valid dictionary");
    uint32_t type = get(c, tc, "type");
    if (str_is(c, type, "auto")) {
        PUT(w, ",\"tool_choice\":\"auto\"");
    } else if (str_is(c, type, "any")) {
        PUT(w, ",\"tool_choice\":\"required\"");
    } else if (str_is(c, type, "none")) {
        PUT(w, ",\"tool_choice\":\"none\"");
    } else if (str_is(c, type, "tool")) {
        uint32_t name = get(c, tc, "name");
        if (!is(c, name, VSR_JSON_STRING))
            return BAD(c, "tool_choice.name: Field required");
        PUT(w, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
        raw(c, name);
        PUT(w, "}}");
    } else {
        return BAD(c, "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'");
    }
    if (is(c, get(c, tc, "disable_parallel_tool_use"), VSR_JSON_TRUE))
        PUT(w, ",\"parallel_tool_calls\":false");
    return VSR_OK;
}

static int ingress(cx_t *c)
{
    w_t *w = &c->w;
    uint32_t model = get(c, 0, "model"), max_tokens = get(c, 0, "max_tokens"), messages = get(c, 0, "messages");
    if (model == 0)
        return BAD(c, "model field is required"); /* the reference router's words */
    if (!is(c, model, VSR_JSON_STRING))
        return BAD(c, "model: Input should be a valid string");
    if (max_tokens == 0 && !c->lim.count_tokens)
        return BAD(c, "max_tokens: Field required");
    int64_t mt = max_tokens ? int_of(c, max_tokens) : 1;
    if (mt < 0)
        return BAD(c, "max_tokens: Input should be a valid integer");
    if (mt < 1)
        return BAD(c, "max_tokens: Input should be greater than or equal to 1");
    if (messages == 0)
        return BAD(c, "messages: Field required");
    if (!is(c, messages, VSR_JSON_ARRAY))
        return BAD(c, "messages: Input should be a valid list");

    PUT(w, "{\"model\":");
    raw(c, model);
    PUT(w, ",\"messages\":[");
    int first = 1;
    uint32_t sys = get(c, 0, "system");
    if (is(c, sys, VSR_JSON_STRING)) {
        if (c->j.toks[sys].end - c->j.toks[sys].start > 2) {
            PUT(w, "{\"role\":\"system\",\"content\":");
            raw(c, sys);
            PUT(w, "}");
            first = 0;
        }
    } else if (is(c, sys, VSR_JSON_ARRAY)) {
        uint32_t b = first_child(sys);
        for (uint32_t k = 0; k < c->j.toks[sys].count; k++, b = next_sib(c, b)) {
            if (item(c) != VSR_OK)
                return VSR_ERR_TOO_BIG;
            if (!is(c, b, VSR_JSON_OBJECT) || !str_is(c, get(c, b, "type"), "text"))
                return BAD(c, "system.%u.type: Input should be 'text'", k);
            if (!is(c, get(c, b, "text"), VSR_JSON_STRING))
                return BAD(c, "system.%u.text: Input should be a valid string", k);
        }
        if (c->j.toks[sys].count > 0) {
            PUT(w, "{\"role\":\"system\",\"content\":\"");
            join_texts(c, sys, "\\n");
            PUT(w, "\"}");
            first = 0;
        }
    } else if (sys != 0 && vsr_json_type(&c->j, sys) != VSR_JSON_NULL) {
        return BAD(c, "system: Input should be a valid string or list of text blocks");
    }

    uint32_t m = first_child(messages);
    for (uint32_t i = 0; i < c->j.toks[messages].count; i++, m = next_sib(c, m)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        if (!is(c, m, VSR_JSON_OBJECT))
            return BAD(c, "messages.%u: Input should be a valid dictionary", i);
        uint32_t role = get(c, m, "role"), content = get(c, m, "content");
        int user = str_is(c, role, "user");
        if (!user && !str_is(c, role, "assistant"))
            return BAD(c, "messages.%u.role: Input should be 'user' or 'assistant'", i);
        if (content == 0)
            return BAD(c, "messages.%u.content: Field required", i);
        if (is(c, content, VSR_JSON_STRING)) {
            if (!first)
                PUT(w, ",");
            first = 0;
            PUT(w, "{\"role\":");
            raw(c, role);
            PUT(w, ",\"content\":");
            raw(c, content);
            PUT(w, "}");
        } else if (is(c, content, VSR_JSON_ARRAY)) {
            int rc;
            if (user) {
                rc = user_blocks(c, content, i, &first);
            } else {
                if (!first)
                    PUT(w, ",");
                first = 0;
                rc = assistant_blocks(c, content, i);
            }
            if (rc != VSR_OK)
                return rc;
        } else {
            return BAD(c, "messages.%u.content: Input should be a valid string or list", i);
        }
    }
    PUT(w, "]");
    if (max_tokens) {
        PUT(w, ",\"max_tokens\":");
        raw(c, max_tokens);
    }
    if (number_field(c, "temperature", "temperature") != VSR_OK || number_field(c, "top_p", "top_p") != VSR_OK ||
        number_field(c, "top_k", "top_k") != VSR_OK)
        return VSR_ERR_INVALID;
    uint32_t stop = get(c, 0, "stop_sequences");
    if (stop != 0 && vsr_json_type(&c->j, stop) != VSR_JSON_NULL) {
        if (!is(c, stop, VSR_JSON_ARRAY))
            return BAD(c, "stop_sequences: Input should be a valid list");
        uint32_t s = first_child(stop);
        for (uint32_t k = 0; k < c->j.toks[stop].count; k++, s = next_sib(c, s))
            if (!is(c, s, VSR_JSON_STRING))
                return BAD(c, "stop_sequences.%u: Input should be a valid string", k);
        if (c->j.toks[stop].count > 0) {
            PUT(w, ",\"stop\":");
            raw(c, stop);
        }
    }
    uint32_t stream = get(c, 0, "stream");
    if (stream != 0 && vsr_json_type(&c->j, stream) != VSR_JSON_NULL) {
        if (!is(c, stream, VSR_JSON_TRUE) && !is(c, stream, VSR_JSON_FALSE))
            return BAD(c, "stream: Input should be a valid boolean");
        if (is(c, stream, VSR_JSON_TRUE))
            PUT(w, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
        else
            PUT(w, ",\"stream\":false");
    }
    uint32_t tools = get(c, 0, "tools");
    if (tools != 0 && vsr_json_type(&c->j, tools) != VSR_JSON_NULL && ingress_tools(c, tools) != VSR_OK)
        return c->err->type && strcmp(c->err->type, "request_too_large") == 0 ? VSR_ERR_TOO_BIG : VSR_ERR_INVALID;
    uint32_t tc = get(c, 0, "tool_choice");
    if (tc != 0 && vsr_json_type(&c->j, tc) != VSR_JSON_NULL && ingress_tool_choice(c, tc) != VSR_OK)
        return VSR_ERR_INVALID;
    uint32_t meta = get(c, 0, "metadata");
    if (meta != 0 && vsr_json_type(&c->j, meta) != VSR_JSON_NULL) {
        if (!is(c, meta, VSR_JSON_OBJECT))
            return BAD(c, "metadata: Input should be a valid dictionary");
        uint32_t uid = get(c, meta, "user_id");
        if (uid != 0 && vsr_json_type(&c->j, uid) != VSR_JSON_NULL) {
            if (!is(c, uid, VSR_JSON_STRING))
                return BAD(c, "metadata.user_id: Input should be a valid string");
            PUT(w, ",\"user\":");
            raw(c, uid);
        }
    }
    PUT(w, "}");
    return VSR_OK;
}

int vsr_anthropic_request_to_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, vsr_buf_t *out,
                                  vsr_anthropic_error_t *err)
{
    cx_t c;
    int rc = cx_open(&c, body, len, lim, out, err, 1);
    if (rc == VSR_OK)
        rc = ingress(&c);
    return cx_close(&c, rc);
}

/* ---- ingress answer: chat.completion → message ---------------------------- */

static const char *stop_from_finish(const cx_t *c, uint32_t fr)
{
    if (str_is(c, fr, "length"))
        return "max_tokens";
    if (str_is(c, fr, "tool_calls") || str_is(c, fr, "function_call"))
        return "tool_use";
    if (str_is(c, fr, "content_filter"))
        return "refusal";
    return "end_turn";
}

#define UPSTREAM(c, ...) fail((c), VSR_ERR_INVALID, "api_error", __VA_ARGS__)

static void put_msg_id(cx_t *c, uint32_t id)
{
    PUT(&c->w, "\"");
    if (is(c, id, VSR_JSON_STRING)) {
        vsr_slice_t s = inner(c, id);
        if (!vsr_slice_starts_with(s, VSR_SLICE_LIT("msg_")))
            PUT(&c->w, "msg_");
        put_slice(&c->w, s);
    } else {
        PUT(&c->w, "msg_vsr");
    }
    PUT(&c->w, "\"");
}

static int from_chat(cx_t *c)
{
    w_t *w = &c->w;
    uint32_t choices = get(c, 0, "choices");
    if (!is(c, choices, VSR_JSON_ARRAY) || c->j.toks[choices].count == 0)
        return UPSTREAM(c, "upstream answer: choices: Field required");
    uint32_t ch = first_child(choices);
    uint32_t msg = get(c, ch, "message");
    if (!is(c, ch, VSR_JSON_OBJECT) || !is(c, msg, VSR_JSON_OBJECT))
        return UPSTREAM(c, "upstream answer: choices.0.message: Field required");
    uint32_t model = get(c, 0, "model");
    PUT(w, "{\"id\":");
    put_msg_id(c, get(c, 0, "id"));
    PUT(w, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    if (is(c, model, VSR_JSON_STRING))
        raw(c, model);
    else
        PUT(w, "\"\"");
    PUT(w, ",\"content\":[");
    size_t nb = 0;
    uint32_t content = get(c, msg, "content");
    if (is(c, content, VSR_JSON_STRING) && c->j.toks[content].end - c->j.toks[content].start > 2) {
        PUT(w, "{\"type\":\"text\",\"text\":");
        raw(c, content);
        PUT(w, "}");
        nb++;
    } else if (is(c, content, VSR_JSON_ARRAY)) {
        uint32_t p = first_child(content);
        for (uint32_t k = 0; k < c->j.toks[content].count; k++, p = next_sib(c, p)) {
            uint32_t text = get(c, p, "text");
            if (!str_is(c, get(c, p, "type"), "text") || !is(c, text, VSR_JSON_STRING))
                continue;
            if (item(c) != VSR_OK)
                return VSR_ERR_TOO_BIG;
            if (nb++)
                PUT(w, ",");
            PUT(w, "{\"type\":\"text\",\"text\":");
            raw(c, text);
            PUT(w, "}");
        }
    }
    uint32_t calls = get(c, msg, "tool_calls");
    if (is(c, calls, VSR_JSON_ARRAY)) {
        uint32_t tc = first_child(calls);
        for (uint32_t k = 0; k < c->j.toks[calls].count; k++, tc = next_sib(c, tc)) {
            if (item(c) != VSR_OK)
                return VSR_ERR_TOO_BIG;
            uint32_t fn = get(c, tc, "function"), id = get(c, tc, "id");
            uint32_t name = get(c, fn, "name"), args = get(c, fn, "arguments");
            if (!is(c, tc, VSR_JSON_OBJECT) || !is(c, fn, VSR_JSON_OBJECT) || !is(c, name, VSR_JSON_STRING))
                return UPSTREAM(c, "upstream answer: choices.0.message.tool_calls.%u.function.name: Field required", k);
            if (nb++)
                PUT(w, ",");
            PUT(w, "{\"type\":\"tool_use\",\"id\":");
            if (is(c, id, VSR_JSON_STRING))
                raw(c, id);
            else {
                PUT(w, "\"toolu_vsr_");
                put_u64(w, k);
                PUT(w, "\"");
            }
            PUT(w, ",\"name\":");
            raw(c, name);
            PUT(w, ",\"input\":");
            if (args == 0)
                PUT(w, "{}");
            else if (put_args_object(c, args) != VSR_OK)
                return UPSTREAM(c, "upstream answer: choices.0.message.tool_calls.%u.function.arguments: "
                                   "not a JSON object", k);
            PUT(w, "}");
        }
    }
    PUT(w, "],\"stop_reason\":\"");
    const char *sr = stop_from_finish(c, get(c, ch, "finish_reason"));
    put(w, sr, strlen(sr));
    uint32_t usage = get(c, 0, "usage");
    PUT(w, "\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":");
    put_u64(w, count_of(c, get(c, usage, "prompt_tokens")));
    PUT(w, ",\"output_tokens\":");
    put_u64(w, count_of(c, get(c, usage, "completion_tokens")));
    PUT(w, "}}");
    return VSR_OK;
}

int vsr_anthropic_response_from_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, vsr_buf_t *out,
                                     vsr_anthropic_error_t *err)
{
    cx_t c;
    int rc = cx_open(&c, body, len, lim, out, err, 1);
    if (rc == VSR_OK)
        rc = from_chat(&c);
    return cx_close(&c, rc);
}

/* ---- egress request: chat → Messages --------------------------------------- */

typedef struct {
    int role; /* 0 none, 1 user, 2 assistant */
    int any;
} turn_t;

static void turn_block(cx_t *c, turn_t *t, int role)
{
    w_t *w = &c->w;
    if (t->role != role) {
        if (t->role)
            PUT(w, "]}");
        if (t->any)
            PUT(w, ",");
        PUT(w, "{\"role\":");
        if (role == 1)
            PUT(w, "\"user\"");
        else
            PUT(w, "\"assistant\"");
        PUT(w, ",\"content\":[");
        t->role = role;
        t->any = 1;
    } else {
        PUT(w, ",");
    }
}

static int nonempty_str(const cx_t *c, uint32_t t)
{
    return is(c, t, VSR_JSON_STRING) && c->j.toks[t].end - c->j.toks[t].start > 2;
}

/* The text of chat content (a string, or the text parts joined with "\n")
 * inside an open string.  Returns how many pieces were written. */
static size_t chat_text(cx_t *c, uint32_t content)
{
    if (is(c, content, VSR_JSON_STRING)) {
        put_slice(&c->w, inner(c, content));
        return c->j.toks[content].end - c->j.toks[content].start > 2;
    }
    if (!is(c, content, VSR_JSON_ARRAY))
        return 0;
    size_t n = 0;
    uint32_t p = first_child(content);
    for (uint32_t k = 0; k < c->j.toks[content].count; k++, p = next_sib(c, p)) {
        uint32_t text = get(c, p, "text");
        if (!is(c, p, VSR_JSON_OBJECT) || !is(c, text, VSR_JSON_STRING))
            continue;
        if (n++)
            PUT(&c->w, "\\n");
        put_slice(&c->w, inner(c, text));
    }
    return n;
}

static int image_block(cx_t *c, uint32_t url_tok)
{
    w_t *w = &c->w;
    vsr_slice_t url;
    if (vsr_json_string(&c->j, url_tok, &c->pool, &url) != VSR_OK)
        return VSR_ERR_INVALID;
    PUT(w, "{\"type\":\"image\",\"source\":");
    const char *comma = url.len > 5 ? memchr(url.p, ',', url.len) : NULL;
    if (vsr_slice_starts_with(url, VSR_SLICE_LIT("data:")) && comma != NULL &&
        (size_t)(comma - url.p) >= 12 && memcmp(comma - 7, ";base64", 7) == 0) {
        PUT(w, "{\"type\":\"base64\",\"media_type\":");
        put_str(w, vsr_slice(url.p + 5, (size_t)(comma - 7 - url.p - 5)));
        PUT(w, ",\"data\":");
        put_str(w, vsr_slice(comma + 1, url.len - (size_t)(comma + 1 - url.p)));
        PUT(w, "}}");
    } else {
        PUT(w, "{\"type\":\"url\",\"url\":");
        raw(c, url_tok);
        PUT(w, "}}");
    }
    return VSR_OK;
}

static int egress_message(cx_t *c, uint32_t m, uint32_t i, turn_t *t)
{
    w_t *w = &c->w;
    uint32_t role = get(c, m, "role"), content = get(c, m, "content");
    if (content != 0 && !is(c, content, VSR_JSON_STRING) && !is(c, content, VSR_JSON_ARRAY) &&
        vsr_json_type(&c->j, content) != VSR_JSON_NULL)
        return BAD(c, "messages.%u.content: Input should be a valid string or list", i);
    if (str_is(c, role, "system") || str_is(c, role, "developer"))
        return VSR_OK; /* in "system" */
    if (str_is(c, role, "tool")) {
        uint32_t id = get(c, m, "tool_call_id");
        if (!is(c, id, VSR_JSON_STRING))
            return BAD(c, "messages.%u.tool_call_id: Field required", i);
        turn_block(c, t, 1);
        PUT(w, "{\"type\":\"tool_result\",\"tool_use_id\":");
        raw(c, id);
        PUT(w, ",\"content\":\"");
        chat_text(c, content);
        PUT(w, "\"}");
        return VSR_OK;
    }
    int user = str_is(c, role, "user");
    if (!user && !str_is(c, role, "assistant"))
        return BAD(c, "messages.%u.role: '%s' has no Messages form", i, quote(c, role));
    if (is(c, content, VSR_JSON_STRING)) {
        if (nonempty_str(c, content)) {
            turn_block(c, t, user ? 1 : 2);
            PUT(w, "{\"type\":\"text\",\"text\":");
            raw(c, content);
            PUT(w, "}");
        }
    } else if (is(c, content, VSR_JSON_ARRAY)) {
        uint32_t p = first_child(content);
        for (uint32_t k = 0; k < c->j.toks[content].count; k++, p = next_sib(c, p)) {
            if (item(c) != VSR_OK)
                return VSR_ERR_TOO_BIG;
            uint32_t type = get(c, p, "type");
            if (!is(c, p, VSR_JSON_OBJECT) || !is(c, type, VSR_JSON_STRING))
                return BAD(c, "messages.%u.content.%u.type: Field required", i, k);
            if (str_is(c, type, "text")) {
                uint32_t text = get(c, p, "text");
                if (!is(c, text, VSR_JSON_STRING))
                    return BAD(c, "messages.%u.content.%u.text: Input should be a valid string", i, k);
                if (!nonempty_str(c, text))
                    continue;
                turn_block(c, t, user ? 1 : 2);
                PUT(w, "{\"type\":\"text\",\"text\":");
                raw(c, text);
                PUT(w, "}");
            } else if (str_is(c, type, "image_url") && user) {
                uint32_t iu = get(c, p, "image_url");
                uint32_t url = is(c, iu, VSR_JSON_OBJECT) ? get(c, iu, "url") : iu;
                if (!is(c, url, VSR_JSON_STRING))
                    return BAD(c, "messages.%u.content.%u.image_url.url: Field required", i, k);
                turn_block(c, t, 1);
                if (image_block(c, url) != VSR_OK)
                    return VSR_ERR_INVALID;
            } else if (!str_is(c, type, "refusal")) {
                return BAD(c, "messages.%u.content.%u.type: a '%s' part has no Messages form", i, k, quote(c, type));
            }
        }
    }
    uint32_t calls = user ? 0 : get(c, m, "tool_calls");
    if (is(c, calls, VSR_JSON_ARRAY)) {
        uint32_t tc = first_child(calls);
        for (uint32_t k = 0; k < c->j.toks[calls].count; k++, tc = next_sib(c, tc)) {
            if (item(c) != VSR_OK)
                return VSR_ERR_TOO_BIG;
            uint32_t fn = get(c, tc, "function"), id = get(c, tc, "id");
            uint32_t name = get(c, fn, "name"), args = get(c, fn, "arguments");
            if (!is(c, tc, VSR_JSON_OBJECT) || !is(c, id, VSR_JSON_STRING))
                return BAD(c, "messages.%u.tool_calls.%u.id: Field required", i, k);
            if (!is(c, fn, VSR_JSON_OBJECT) || !is(c, name, VSR_JSON_STRING))
                return BAD(c, "messages.%u.tool_calls.%u.function.name: Field required", i, k);
            turn_block(c, t, 2);
            PUT(w, "{\"type\":\"tool_use\",\"id\":");
            raw(c, id);
            PUT(w, ",\"name\":");
            raw(c, name);
            PUT(w, ",\"input\":");
            if (args == 0)
                PUT(w, "{}");
            else if (put_args_object(c, args) != VSR_OK)
                return BAD(c, "messages.%u.tool_calls.%u.function.arguments: Input should be a JSON object", i, k);
            PUT(w, "}");
        }
    }
    return VSR_OK;
}

static int egress_tools(cx_t *c, uint32_t tools)
{
    w_t *w = &c->w;
    if (!is(c, tools, VSR_JSON_ARRAY))
        return BAD(c, "tools: Input should be a valid list");
    if (c->j.toks[tools].count == 0)
        return VSR_OK;
    PUT(w, ",\"tools\":[");
    uint32_t t = first_child(tools);
    for (uint32_t k = 0; k < c->j.toks[tools].count; k++, t = next_sib(c, t)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        uint32_t fn = get(c, t, "function");
        uint32_t name = get(c, fn, "name"), desc = get(c, fn, "description"), params = get(c, fn, "parameters");
        if (!is(c, t, VSR_JSON_OBJECT) || !str_is(c, get(c, t, "type"), "function") || !is(c, fn, VSR_JSON_OBJECT))
            return BAD(c, "tools.%u: only function tools have a Messages form", k);
        if (!is(c, name, VSR_JSON_STRING))
            return BAD(c, "tools.%u.function.name: Field required", k);
        if (k)
            PUT(w, ",");
        PUT(w, "{\"name\":");
        raw(c, name);
        if (is(c, desc, VSR_JSON_STRING)) {
            PUT(w, ",\"description\":");
            raw(c, desc);
        }
        PUT(w, ",\"input_schema\":");
        if (is(c, params, VSR_JSON_OBJECT))
            raw(c, params);
        else
            PUT(w, "{\"type\":\"object\",\"properties\":{}}");
        PUT(w, "}");
    }
    PUT(w, "]");
    return VSR_OK;
}

static int egress(cx_t *c)
{
    w_t *w = &c->w;
    uint32_t model = get(c, 0, "model"), messages = get(c, 0, "messages");
    if (!is(c, model, VSR_JSON_STRING))
        return BAD(c, "model: Field required");
    if (messages == 0)
        return BAD(c, "messages: Field required");
    if (!is(c, messages, VSR_JSON_ARRAY))
        return BAD(c, "messages: Input should be a valid list");
    uint32_t n = get(c, 0, "n");
    if (n != 0 && vsr_json_type(&c->j, n) != VSR_JSON_NULL && int_of(c, n) != 1)
        return BAD(c, "n: an Anthropic backend returns one choice; n must be 1");
    uint32_t mt = get(c, 0, "max_completion_tokens");
    if (!is(c, mt, VSR_JSON_NUMBER))
        mt = get(c, 0, "max_tokens");
    if (mt != 0 && vsr_json_type(&c->j, mt) != VSR_JSON_NULL && int_of(c, mt) < 1)
        return BAD(c, "max_tokens: Input should be a positive integer");

    PUT(w, "{\"model\":");
    raw(c, model);
    PUT(w, ",\"max_tokens\":");
    if (is(c, mt, VSR_JSON_NUMBER))
        raw(c, mt);
    else
        put_u64(w, c->lim.default_max_tokens);

    /* system: every system / developer message, joined */
    size_t nsys = 0;
    uint32_t m = first_child(messages);
    for (uint32_t i = 0; i < c->j.toks[messages].count; i++, m = next_sib(c, m)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        if (!is(c, m, VSR_JSON_OBJECT))
            return BAD(c, "messages.%u: Input should be a valid dictionary", i);
        uint32_t role = get(c, m, "role");
        if (!str_is(c, role, "system") && !str_is(c, role, "developer"))
            continue;
        size_t mark = w->b->len;
        if (nsys)
            PUT(w, "\\n\\n");
        else
            PUT(w, ",\"system\":\"");
        if (chat_text(c, get(c, m, "content")) == 0 && w->rc == VSR_OK)
            w->b->len = mark; /* nothing to add */
        else
            nsys++;
    }
    if (nsys)
        PUT(w, "\"");

    PUT(w, ",\"messages\":[");
    turn_t t = {0, 0};
    m = first_child(messages);
    for (uint32_t i = 0; i < c->j.toks[messages].count; i++, m = next_sib(c, m)) {
        int rc = egress_message(c, m, i, &t);
        if (rc != VSR_OK)
            return rc;
    }
    if (t.role)
        PUT(w, "]}");
    PUT(w, "]");
    if (number_field(c, "temperature", "temperature") != VSR_OK || number_field(c, "top_p", "top_p") != VSR_OK ||
        number_field(c, "top_k", "top_k") != VSR_OK)
        return VSR_ERR_INVALID;
    uint32_t stop = get(c, 0, "stop");
    if (nonempty_str(c, stop)) {
        PUT(w, ",\"stop_sequences\":[");
        raw(c, stop);
        PUT(w, "]");
    } else if (is(c, stop, VSR_JSON_ARRAY) && c->j.toks[stop].count > 0) {
        uint32_t s = first_child(stop);
        for (uint32_t k = 0; k < c->j.toks[stop].count; k++, s = next_sib(c, s))
            if (!is(c, s, VSR_JSON_STRING))
                return BAD(c, "stop.%u: Input should be a valid string", k);
        PUT(w, ",\"stop_sequences\":");
        raw(c, stop);
    }
    uint32_t stream = get(c, 0, "stream");
    if (is(c, stream, VSR_JSON_TRUE))
        PUT(w, ",\"stream\":true");
    uint32_t tools = get(c, 0, "tools");
    if (tools != 0 && vsr_json_type(&c->j, tools) != VSR_JSON_NULL) {
        int rc = egress_tools(c, tools);
        if (rc != VSR_OK)
            return rc;
    }
    uint32_t tc = get(c, 0, "tool_choice"), ptc = get(c, 0, "parallel_tool_calls");
    int no_parallel = is(c, ptc, VSR_JSON_FALSE);
    if (is(c, tc, VSR_JSON_STRING) || is(c, tc, VSR_JSON_OBJECT) || (no_parallel && is(c, tools, VSR_JSON_ARRAY))) {
        PUT(w, ",\"tool_choice\":{\"type\":");
        if (tc == 0 || str_is(c, tc, "auto")) {
            PUT(w, "\"auto\"");
        } else if (str_is(c, tc, "none")) {
            PUT(w, "\"none\"");
        } else if (str_is(c, tc, "required")) {
            PUT(w, "\"any\"");
        } else {
            uint32_t name = get(c, get(c, tc, "function"), "name");
            if (!is(c, tc, VSR_JSON_OBJECT) || !is(c, name, VSR_JSON_STRING))
                return BAD(c, "tool_choice: Input should be 'auto', 'none', 'required' or a function");
            PUT(w, "\"tool\",\"name\":");
            raw(c, name);
        }
        if (no_parallel && !str_is(c, tc, "none"))
            PUT(w, ",\"disable_parallel_tool_use\":true");
        PUT(w, "}");
    }
    uint32_t user = get(c, 0, "user");
    if (is(c, user, VSR_JSON_STRING)) {
        PUT(w, ",\"metadata\":{\"user_id\":");
        raw(c, user);
        PUT(w, "}");
    }
    PUT(w, "}");
    return VSR_OK;
}

int vsr_anthropic_request_from_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, vsr_buf_t *out,
                                    vsr_anthropic_error_t *err)
{
    cx_t c;
    int rc = cx_open(&c, body, len, lim, out, err, 1);
    if (rc == VSR_OK)
        rc = egress(&c);
    return cx_close(&c, rc);
}

/* ---- egress answer: message → chat.completion ------------------------------- */

static const char *finish_from_stop(const cx_t *c, uint32_t sr)
{
    if (str_is(c, sr, "max_tokens"))
        return "length";
    if (str_is(c, sr, "tool_use"))
        return "tool_calls";
    if (str_is(c, sr, "refusal"))
        return "content_filter";
    return "stop";
}

static int to_chat(cx_t *c, uint64_t created)
{
    w_t *w = &c->w;
    uint32_t content = get(c, 0, "content"), id = get(c, 0, "id"), model = get(c, 0, "model");
    if (!is(c, content, VSR_JSON_ARRAY))
        return UPSTREAM(c, "upstream answer: content: Field required");
    size_t n_text = 0, n_tools = 0;
    uint32_t b = first_child(content);
    for (uint32_t k = 0; k < c->j.toks[content].count; k++, b = next_sib(c, b)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        uint32_t type = get(c, b, "type");
        if (str_is(c, type, "text") && is(c, get(c, b, "text"), VSR_JSON_STRING))
            n_text++;
        else if (str_is(c, type, "tool_use")) {
            if (!is(c, get(c, b, "id"), VSR_JSON_STRING) || !is(c, get(c, b, "name"), VSR_JSON_STRING) ||
                !is(c, get(c, b, "input"), VSR_JSON_OBJECT))
                return UPSTREAM(c, "upstream answer: content.%u: a tool_use block needs id, name and input", k);
            n_tools++;
        }
    }
    PUT(w, "{\"id\":");
    if (is(c, id, VSR_JSON_STRING))
        raw(c, id);
    else
        PUT(w, "\"msg_vsr\"");
    PUT(w, ",\"object\":\"chat.completion\",\"created\":");
    put_u64(w, created);
    PUT(w, ",\"model\":");
    if (is(c, model, VSR_JSON_STRING))
        raw(c, model);
    else
        PUT(w, "\"\"");
    PUT(w, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    if (n_text || !n_tools) {
        PUT(w, "\"");
        b = first_child(content);
        for (uint32_t k = 0; k < c->j.toks[content].count; k++, b = next_sib(c, b))
            if (str_is(c, get(c, b, "type"), "text") && is(c, get(c, b, "text"), VSR_JSON_STRING))
                put_slice(w, inner(c, get(c, b, "text")));
        PUT(w, "\"");
    } else {
        PUT(w, "null");
    }
    if (n_tools) {
        PUT(w, ",\"tool_calls\":[");
        size_t n = 0;
        b = first_child(content);
        for (uint32_t k = 0; k < c->j.toks[content].count; k++, b = next_sib(c, b)) {
            if (!str_is(c, get(c, b, "type"), "tool_use"))
                continue;
            if (n++)
                PUT(w, ",");
            PUT(w, "{\"id\":");
            raw(c, get(c, b, "id"));
            PUT(w, ",\"type\":\"function\",\"function\":{\"name\":");
            raw(c, get(c, b, "name"));
            PUT(w, ",\"arguments\":");
            put_str(w, vsr_json_raw(&c->j, get(c, b, "input")));
            PUT(w, "}}");
        }
        PUT(w, "]");
    }
    PUT(w, "},\"finish_reason\":\"");
    const char *fr = finish_from_stop(c, get(c, 0, "stop_reason"));
    put(w, fr, strlen(fr));
    uint32_t usage = get(c, 0, "usage");
    uint64_t in = count_of(c, get(c, usage, "input_tokens")) + count_of(c, get(c, usage, "cache_read_input_tokens")) +
                  count_of(c, get(c, usage, "cache_creation_input_tokens"));
    uint64_t out = count_of(c, get(c, usage, "output_tokens"));
    PUT(w, "\"}],\"usage\":{\"prompt_tokens\":");
    put_u64(w, in);
    PUT(w, ",\"completion_tokens\":");
    put_u64(w, out);
    PUT(w, ",\"total_tokens\":");
    put_u64(w, in + out);
    PUT(w, "}}");
    return VSR_OK;
}

int vsr_anthropic_response_to_chat(const char *body, size_t len, const vsr_anthropic_limits_t *lim, uint64_t created,
                                   vsr_buf_t *out, vsr_anthropic_error_t *err)
{
    cx_t c;
    int rc = cx_open(&c, body, len, lim, out, err, 1);
    if (rc == VSR_OK)
        rc = to_chat(&c, created);
    return cx_close(&c, rc);
}

int vsr_anthropic_answer_to_chat(int status, const char *body, size_t len, uint64_t created, vsr_buf_t *out,
                                 vsr_anthropic_error_t *err)
{
    if (status >= 200 && status < 300)
        return vsr_anthropic_response_to_chat(body, len, NULL, created, out, err);
    return vsr_anthropic_error_to_chat(status, body, len, out);
}

/* ---- streams ------------------------------------------------------------------
 * SSE framing is proto/sse.h's (WHATWG: lines end in LF, CR or CRLF, "data:"
 * lines of one event joined with LF, an empty line dispatches, a partial
 * event at the end of the stream is dropped).  Each event's data is parsed
 * as one JSON document; its name, id and retry are not used (the payload's
 * "type" says it all). */

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id);
static const vsr_sse_callbacks_t sse_cb = {on_event};

void vsr_anthropic_stream_init(vsr_anthropic_stream_t *s, vsr_anthropic_dir_t dir, const vsr_anthropic_limits_t *lim,
                               uint64_t created, int include_usage)
{
    memset(s, 0, sizeof(*s));
    s->dir = dir;
    limits_fill(&s->lim, lim);
    s->created = created;
    s->include_usage = include_usage;
    s->cur_tool = -1;
    s->max_tool = -1;
    vsr_sse_init(&s->sse, s->lim.max_event, &sse_cb, s);
}

void vsr_anthropic_stream_free(vsr_anthropic_stream_t *s)
{
    vsr_sse_free(&s->sse);
}

/* Writes an error event in the output's format and fails the stream. */
static int stream_fail(void *ud, w_t *w, int rc, const char *message)
{
    vsr_anthropic_stream_t *s = ud;
    if (s->dir == VSR_ANTHROPIC_TO_MESSAGES) {
        if (s->block_open) {
            PUT(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":");
            put_u64(w, s->next_block - 1);
            PUT(w, "}\n\n");
            s->block_open = 0;
        }
        PUT(w, "event: error\ndata: ");
        if (w->rc == VSR_OK)
            w->rc = vsr_anthropic_error_body(w->b, "api_error", vsr_slice_cstr(message));
        PUT(w, "\n\n");
    } else {
        PUT(w, "data: {\"error\":{\"message\":");
        put_str(w, vsr_slice_cstr(message));
        PUT(w, ",\"type\":\"api_error\",\"code\":null}}\n\n");
    }
    s->state = ST_FAILED;
    return rc;
}

/* Keeps the raw body of string token t (id, model) when it fits. */
static void keep(char *dst, size_t cap, size_t *len, const cx_t *c, uint32_t t)
{
    if (!is(c, t, VSR_JSON_STRING))
        return;
    vsr_slice_t r = inner(c, t);
    if (r.len <= cap) {
        memcpy(dst, r.p, r.len);
        *len = r.len;
    }
}

/* ---- OpenAI chunks → Anthropic events ---- */

static void ev_block_stop(vsr_anthropic_stream_t *s, w_t *w)
{
    if (!s->block_open)
        return;
    PUT(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":");
    put_u64(w, s->next_block - 1);
    PUT(w, "}\n\n");
    s->block_open = 0;
}

static void ev_message_start(vsr_anthropic_stream_t *s, w_t *w)
{
    PUT(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"");
    vsr_slice_t id = vsr_slice(s->id, s->id_len);
    if (!vsr_slice_starts_with(id, VSR_SLICE_LIT("msg_")))
        PUT(w, "msg_");
    put_slice(w, s->id_len ? id : VSR_SLICE_LIT("vsr"));
    PUT(w, "\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"");
    put(w, s->model, s->model_len);
    PUT(w, "\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"
           "\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n");
    s->state = ST_OPEN;
}

static void ev_end(vsr_anthropic_stream_t *s, w_t *w)
{
    if (s->state == ST_START)
        ev_message_start(s, w);
    ev_block_stop(s, w);
    PUT(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"");
    const char *sr = s->stop_reason ? s->stop_reason : "end_turn";
    put(w, sr, strlen(sr));
    PUT(w, "\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":");
    put_u64(w, s->in_tokens);
    PUT(w, ",\"output_tokens\":");
    put_u64(w, s->out_tokens);
    PUT(w, "}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s->state = ST_DONE;
}

static int chunk_to_messages(vsr_anthropic_stream_t *s, cx_t *c)
{
    w_t *w = &c->w;
    uint32_t e = get(c, 0, "error");
    if (e != 0) {
        uint32_t m = get(c, e, "message");
        vsr_slice_t msg = VSR_SLICE_LIT("upstream error");
        if (is(c, m, VSR_JSON_STRING))
            vsr_json_string(&c->j, m, &c->pool, &msg);
        return stream_fail(s, w, VSR_ERR_INVALID, vsr_pool_strndup(&c->pool, msg.p, msg.len));
    }
    if (s->state == ST_START) {
        keep(s->id, sizeof(s->id), &s->id_len, c, get(c, 0, "id"));
        keep(s->model, sizeof(s->model), &s->model_len, c, get(c, 0, "model"));
        ev_message_start(s, w);
    }
    uint32_t usage = get(c, 0, "usage");
    if (is(c, usage, VSR_JSON_OBJECT)) {
        s->in_tokens = count_of(c, get(c, usage, "prompt_tokens"));
        s->out_tokens = count_of(c, get(c, usage, "completion_tokens"));
    }
    uint32_t choices = get(c, 0, "choices");
    if (!is(c, choices, VSR_JSON_ARRAY) || c->j.toks[choices].count == 0)
        return VSR_OK;
    uint32_t ch = first_child(choices);
    uint32_t idx = get(c, ch, "index");
    if (idx != 0 && int_of(c, idx) != 0)
        return VSR_OK; /* only choice 0 */
    uint32_t delta = get(c, ch, "delta");
    uint32_t content = get(c, delta, "content");
    if (nonempty_str(c, content)) {
        if (!s->block_open || s->block_tool) {
            ev_block_stop(s, w);
            PUT(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":");
            put_u64(w, s->next_block++);
            PUT(w, ",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
            s->block_open = 1, s->block_tool = 0;
        }
        PUT(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":");
        put_u64(w, s->next_block - 1);
        PUT(w, ",\"delta\":{\"type\":\"text_delta\",\"text\":");
        raw(c, content);
        PUT(w, "}}\n\n");
    }
    uint32_t calls = get(c, delta, "tool_calls");
    if (is(c, calls, VSR_JSON_ARRAY)) {
        uint32_t tc = first_child(calls);
        for (uint32_t k = 0; k < c->j.toks[calls].count; k++, tc = next_sib(c, tc)) {
            uint32_t it = get(c, tc, "index"), fn = get(c, tc, "function");
            int64_t ti = it ? int_of(c, it) : 0;
            if (ti < 0)
                return stream_fail(s, w, VSR_ERR_INVALID, "upstream sent a tool call without a valid index");
            if (ti != s->cur_tool || !s->block_open || !s->block_tool) {
                if (ti <= s->max_tool)
                    return stream_fail(s, w, VSR_ERR_INVALID, "upstream interleaved its tool calls");
                if (item(c) != VSR_OK)
                    return stream_fail(s, w, VSR_ERR_TOO_BIG, "upstream sent too many tool calls");
                ev_block_stop(s, w);
                uint32_t id = get(c, tc, "id"), name = get(c, fn, "name");
                PUT(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":");
                put_u64(w, s->next_block++);
                PUT(w, ",\"content_block\":{\"type\":\"tool_use\",\"id\":");
                if (is(c, id, VSR_JSON_STRING))
                    raw(c, id);
                else {
                    PUT(w, "\"toolu_vsr_");
                    put_u64(w, (uint64_t)ti);
                    PUT(w, "\"");
                }
                PUT(w, ",\"name\":");
                if (is(c, name, VSR_JSON_STRING))
                    raw(c, name);
                else
                    PUT(w, "\"\"");
                PUT(w, ",\"input\":{}}}\n\n");
                s->block_open = 1, s->block_tool = 1;
                s->cur_tool = s->max_tool = ti;
            }
            uint32_t args = get(c, fn, "arguments");
            if (nonempty_str(c, args)) {
                PUT(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":");
                put_u64(w, s->next_block - 1);
                PUT(w, ",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":");
                raw(c, args);
                PUT(w, "}}\n\n");
            }
        }
    }
    uint32_t fr = get(c, ch, "finish_reason");
    if (is(c, fr, VSR_JSON_STRING))
        s->stop_reason = stop_from_finish(c, fr);
    return VSR_OK;
}

/* ---- Anthropic events → OpenAI chunks ---- */

static void chunk_open(vsr_anthropic_stream_t *s, w_t *w)
{
    PUT(w, "data: {\"id\":\"");
    put(w, s->id, s->id_len);
    PUT(w, "\",\"object\":\"chat.completion.chunk\",\"created\":");
    put_u64(w, s->created);
    PUT(w, ",\"model\":\"");
    put(w, s->model, s->model_len);
    PUT(w, "\",\"choices\":[{\"index\":0,\"delta\":");
}

static void chunk_close(w_t *w, const char *finish)
{
    PUT(w, ",\"finish_reason\":");
    if (finish) {
        PUT(w, "\"");
        put(w, finish, strlen(finish));
        PUT(w, "\"");
    } else {
        PUT(w, "null");
    }
    PUT(w, "}]}\n\n");
}

static void chat_end(vsr_anthropic_stream_t *s, w_t *w)
{
    if (s->include_usage) {
        PUT(w, "data: {\"id\":\"");
        put(w, s->id, s->id_len);
        PUT(w, "\",\"object\":\"chat.completion.chunk\",\"created\":");
        put_u64(w, s->created);
        PUT(w, ",\"model\":\"");
        put(w, s->model, s->model_len);
        PUT(w, "\",\"choices\":[],\"usage\":{\"prompt_tokens\":");
        put_u64(w, s->in_tokens);
        PUT(w, ",\"completion_tokens\":");
        put_u64(w, s->out_tokens);
        PUT(w, ",\"total_tokens\":");
        put_u64(w, s->in_tokens + s->out_tokens);
        PUT(w, "}}\n\n");
    }
    PUT(w, "data: [DONE]\n\n");
    s->state = ST_DONE;
}

static int event_to_chat(vsr_anthropic_stream_t *s, cx_t *c)
{
    w_t *w = &c->w;
    uint32_t type = get(c, 0, "type");
    if (str_is(c, type, "error")) {
        uint32_t m = get(c, get(c, 0, "error"), "message");
        vsr_slice_t msg = VSR_SLICE_LIT("upstream error");
        if (is(c, m, VSR_JSON_STRING))
            vsr_json_string(&c->j, m, &c->pool, &msg);
        return stream_fail(s, w, VSR_ERR_INVALID, vsr_pool_strndup(&c->pool, msg.p, msg.len));
    }
    if (str_is(c, type, "message_start")) {
        if (s->state != ST_START)
            return VSR_OK;
        uint32_t msg = get(c, 0, "message"), usage = get(c, msg, "usage");
        keep(s->id, sizeof(s->id), &s->id_len, c, get(c, msg, "id"));
        keep(s->model, sizeof(s->model), &s->model_len, c, get(c, msg, "model"));
        s->in_tokens = count_of(c, get(c, usage, "input_tokens")) +
                       count_of(c, get(c, usage, "cache_read_input_tokens")) +
                       count_of(c, get(c, usage, "cache_creation_input_tokens"));
        s->out_tokens = count_of(c, get(c, usage, "output_tokens"));
        s->state = ST_OPEN;
        chunk_open(s, w);
        PUT(w, "{\"role\":\"assistant\",\"content\":\"\"}");
        chunk_close(w, NULL);
        return VSR_OK;
    }
    if (s->state == ST_START)
        return stream_fail(s, w, VSR_ERR_INVALID, "upstream stream did not begin with message_start");
    if (str_is(c, type, "content_block_start")) {
        uint32_t cb = get(c, 0, "content_block"), bt = get(c, cb, "type");
        s->block_open = 1;
        s->block_tool = 0;
        if (str_is(c, bt, "tool_use")) {
            if (item(c) != VSR_OK)
                return stream_fail(s, w, VSR_ERR_TOO_BIG, "upstream sent too many tool calls");
            s->block_tool = 1;
            s->cur_tool++;
            uint32_t id = get(c, cb, "id"), name = get(c, cb, "name");
            chunk_open(s, w);
            PUT(w, "{\"tool_calls\":[{\"index\":");
            put_u64(w, (uint64_t)s->cur_tool);
            PUT(w, ",\"id\":");
            if (is(c, id, VSR_JSON_STRING))
                raw(c, id);
            else
                PUT(w, "\"\"");
            PUT(w, ",\"type\":\"function\",\"function\":{\"name\":");
            if (is(c, name, VSR_JSON_STRING))
                raw(c, name);
            else
                PUT(w, "\"\"");
            PUT(w, ",\"arguments\":\"\"}}]}");
            chunk_close(w, NULL);
        } else if (str_is(c, bt, "text") && nonempty_str(c, get(c, cb, "text"))) {
            chunk_open(s, w);
            PUT(w, "{\"content\":");
            raw(c, get(c, cb, "text"));
            PUT(w, "}");
            chunk_close(w, NULL);
        }
        return VSR_OK;
    }
    if (str_is(c, type, "content_block_delta")) {
        uint32_t d = get(c, 0, "delta"), dt = get(c, d, "type");
        if (str_is(c, dt, "text_delta") && nonempty_str(c, get(c, d, "text"))) {
            chunk_open(s, w);
            PUT(w, "{\"content\":");
            raw(c, get(c, d, "text"));
            PUT(w, "}");
            chunk_close(w, NULL);
        } else if (str_is(c, dt, "input_json_delta") && s->block_open && s->block_tool &&
                   nonempty_str(c, get(c, d, "partial_json"))) {
            chunk_open(s, w);
            PUT(w, "{\"tool_calls\":[{\"index\":");
            put_u64(w, (uint64_t)s->cur_tool);
            PUT(w, ",\"function\":{\"arguments\":");
            raw(c, get(c, d, "partial_json"));
            PUT(w, "}}]}");
            chunk_close(w, NULL);
        }
        return VSR_OK;
    }
    if (str_is(c, type, "content_block_stop")) {
        s->block_open = 0;
        return VSR_OK;
    }
    if (str_is(c, type, "message_delta")) {
        uint32_t sr = get(c, get(c, 0, "delta"), "stop_reason");
        uint32_t usage = get(c, 0, "usage");
        if (is(c, get(c, usage, "output_tokens"), VSR_JSON_NUMBER))
            s->out_tokens = count_of(c, get(c, usage, "output_tokens"));
        if (is(c, get(c, usage, "input_tokens"), VSR_JSON_NUMBER))
            s->in_tokens = count_of(c, get(c, usage, "input_tokens")) +
                           count_of(c, get(c, usage, "cache_read_input_tokens")) +
                           count_of(c, get(c, usage, "cache_creation_input_tokens"));
        if (is(c, sr, VSR_JSON_STRING)) {
            s->stop_reason = finish_from_stop(c, sr);
            chunk_open(s, w);
            PUT(w, "{}");
            chunk_close(w, s->stop_reason);
        }
        return VSR_OK;
    }
    if (str_is(c, type, "message_stop")) {
        chat_end(s, w);
        return VSR_OK;
    }
    return VSR_OK; /* ping and event types added later */
}

/* One complete event's data. */
static int dispatch(void *ud, vsr_slice_t data, vsr_buf_t *out)
{
    vsr_anthropic_stream_t *s = ud;
    vsr_slice_t d = event_data(data);
    w_t w = {out, VSR_OK};
    if (d.len == 0)
        return VSR_OK;
    if (s->dir == VSR_ANTHROPIC_TO_MESSAGES && vsr_slice_eq_cstr(d, "[DONE]")) {
        ev_end(s, &w);
        return w.rc;
    }
    cx_t c;
    vsr_anthropic_limits_t lim = s->lim;
    int rc = cx_open(&c, d.p, d.len, &lim, out, NULL, 1);
    /* blocks (tool calls) so far count toward max_items */
    c.items = s->dir == VSR_ANTHROPIC_TO_MESSAGES ? s->next_block : (uint32_t)(s->cur_tool + 1);
    if (rc != VSR_OK) {
        rc = stream_fail(s, &w, rc, "upstream sent an event that is not a JSON object");
    } else {
        rc = s->dir == VSR_ANTHROPIC_TO_MESSAGES ? chunk_to_messages(s, &c) : event_to_chat(s, &c);
        if (w.rc == VSR_OK)
            w.rc = c.w.rc;
    }
    cx_close(&c, VSR_OK);
    if (w.rc != VSR_OK) {
        s->state = ST_FAILED;
        return w.rc;
    }
    return rc;
}

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id)
{
    (void)type, (void)id;
    vsr_anthropic_stream_t *s = ud;
    return stream_event(STREAM_CORE(s, stream_fail), data, dispatch);
}

int vsr_anthropic_stream_feed(vsr_anthropic_stream_t *s, const char *p, size_t n, vsr_buf_t *out)
{
    return stream_feed(STREAM_CORE(s, stream_fail), p, n, out);
}

/* The upstream's end was seen (its stop reason): the output's last events. */
static int stream_end(void *ud, w_t *w)
{
    vsr_anthropic_stream_t *s = ud;
    if (s->dir == VSR_ANTHROPIC_TO_MESSAGES)
        ev_end(s, w);
    else
        chat_end(s, w);
    return w->rc;
}

int vsr_anthropic_stream_finish(vsr_anthropic_stream_t *s, vsr_buf_t *out)
{
    return stream_finish(STREAM_CORE(s, stream_fail), out, s->stop_reason != NULL, stream_end);
}
