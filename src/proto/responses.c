/*
 * responses.c — OpenAI Responses API <-> chat completions.  See proto/responses.h
 * ("Responses API") for the contracts.
 *
 * Every translation parses its input once (vsr_json_parse under the codec's
 * limits, duplicate member names refused) and writes its output in one walk
 * of the tokens.  Strings are copied as their raw JSON text, so joining texts
 * concatenates raw string bodies.
 *
 * Request → chat:
 *  - model (required string) copied; input (required): a string → one user
 *    message; an array of items:
 *     message (type "message", or no type with a role): role user, system,
 *       developer (→ system, which every chat backend knows) or assistant;
 *       content a string, or parts: text parts only (input_text,
 *       output_text) → one string, the texts joined with "\n"; else content
 *       parts: input_text → text, input_image with an image_url →
 *       image_url {url, detail} (user only), output_text and refusal
 *       (assistant) → text / refusal parts;
 *     function_call {call_id, name, arguments} → tool_calls of an assistant
 *       message (consecutive calls, and the assistant message right before
 *       them, form one chat message);
 *     function_call_output {call_id, output} → a tool message (an output
 *       given as parts: its input_text texts joined);
 *     reasoning → dropped (chat has no input form for it; kept in items);
 *  - instructions → a first system message (not part of the conversation
 *    kept for previous_response_id, as OpenAI does not carry it over);
 *  - the prior conversation (the caller's) goes between the two;
 *  - tools: function tools (flat: name, description, parameters, strict)
 *    → {"type":"function","function":{...}}; tool_choice "auto" / "none" /
 *    "required" copied, {"type":"function","name"} → chat's object;
 *    parallel_tool_calls, temperature, top_p, user copied;
 *    max_output_tokens → max_tokens; reasoning.effort → reasoning_effort;
 *    text.format json_schema → response_format json_schema {name, schema,
 *    description, strict}, json_object → json_object, text → nothing;
 *    stream true → stream + stream_options.include_usage;
 *  - read but not sent to the backend: store, previous_response_id and
 *    metadata (the caller's store and the echo); include, service_tier,
 *    prompt_cache_key, safety_identifier, top_logprobs, stream_options,
 *    text.verbosity, reasoning.summary, background false, truncation
 *    "disabled": harmless (they ask for extra output fields, billing or
 *    caching, or are the default);
 *  - refused (400): built-in tools (web_search, file_search, code
 *    interpreter, computer use, MCP, image generation, shell, custom) and
 *    tool_choice naming them or allowed_tools; background true; truncation
 *    "auto"; prompt, conversation, max_tool_calls; input_file, input_audio,
 *    input images by file_id, item_reference and other item types; every
 *    unknown parameter ("Unknown parameter: 'x'.", as OpenAI answers).
 * Chat answer → Response object: choice 0; content (a string, or text
 * parts joined with "\n") → a message item with an output_text part (a refusal → a refusal part); tool_calls →
 * function_call items; finish_reason length → status incomplete
 * (max_output_tokens), content_filter → incomplete (content_filter), else
 * completed; usage prompt / completion / total tokens (and cached /
 * reasoning details) → input / output / total tokens.  Item ids derive
 * from the response id: "resp_X" → "msg_X_<index>", "fc_X_<index>".
 * Streams: text, refusal and tool-call deltas map to the events in proto/responses.h
 * (a message's text and refusal parts are numbered in the order they
 * start); logprobs and choices other than 0 are dropped.
 */
#include "proto/responses.h"

#include <stdarg.h>
#include <stdio.h>

#include "json/json.h"
#include "proto/proto-int.h"

/* ---- output (the writer is proto-int.h's) ------------------------------ */

/* Valid JSON text without the whitespace between its tokens: what goes
 * into an SSE data line must hold no line break. */
static void put_compact(w_t *w, vsr_slice_t s)
{
    if (s.len == 0)
        return;
    int in_str = 0, esc = 0;
    size_t run = 0; /* start of the pending run of kept bytes */
    for (size_t i = 0; i < s.len; i++) {
        char ch = s.p[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            put(w, s.p + run, i - run);
            run = i + 1;
        }
    }
    put(w, s.p + run, s.len - run);
}

/* ---- a parsed input --------------------------------------------------- */

typedef struct {
    vsr_json_t j;
    vsr_pool_t pool;
    w_t w;
    vsr_responses_limits_t lim;
    vsr_responses_error_t *err;
    vsr_responses_error_t scratch;
    uint32_t items;
} cx_t;

static void limits_fill(vsr_responses_limits_t *l, const vsr_responses_limits_t *in)
{
    LIMITS_FILL(l, in, VSR_RESPONSES);
    if (l->max_output == 0)
        l->max_output = VSR_RESPONSES_MAX_OUTPUT;
}

static void err_reset(vsr_responses_error_t *e)
{
    e->status = 0;
    e->type = NULL;
    e->param[0] = '\0';
    e->message[0] = '\0';
}

static int vfail(cx_t *c, int rc, const char *param, const char *fmt, va_list ap)
{
    if (c->err->type != NULL)
        return rc; /* the first error wins */
    c->err->status = rc == VSR_ERR_TOO_BIG ? 413 : 400;
    c->err->type = "invalid_request_error";
    snprintf(c->err->param, sizeof(c->err->param), "%s", param ? param : "");
    vsnprintf(c->err->message, sizeof(c->err->message), fmt, ap);
    return rc;
}

static int bad(cx_t *c, const char *param, const char *fmt, ...) VSR_PRINTF(3, 4);
static int bad(cx_t *c, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, VSR_ERR_INVALID, param, fmt, ap);
    va_end(ap);
    return VSR_ERR_INVALID;
}

static int big(cx_t *c, const char *param, const char *fmt, ...) VSR_PRINTF(3, 4);
static int big(cx_t *c, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, VSR_ERR_TOO_BIG, param, fmt, ap);
    va_end(ap);
    return VSR_ERR_TOO_BIG;
}

/* An upstream (chat answer) failure: 502 server_error. */
static int upstream(cx_t *c, const char *fmt, ...) VSR_PRINTF(2, 3);
static int upstream(cx_t *c, const char *fmt, ...)
{
    if (c->err->type != NULL)
        return VSR_ERR_INVALID;
    va_list ap;
    va_start(ap, fmt);
    vfail(c, VSR_ERR_INVALID, NULL, fmt, ap);
    va_end(ap);
    c->err->status = 502;
    c->err->type = "server_error";
    return VSR_ERR_INVALID;
}

/* A parameter path in the pool: path(c, "input[%u].content", i). */
static const char *path(cx_t *c, const char *fmt, ...) VSR_PRINTF(2, 3);
static const char *path(cx_t *c, const char *fmt, ...)
{
    char tmp[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    return vsr_pool_strndup(&c->pool, tmp, strlen(tmp));
}

/* A client string for an error message (proto-int.h). */
static const char *quote(cx_t *c, uint32_t t)
{
    return client_quote(&c->j, t, &c->pool, "'");
}

static const char *type_name(const cx_t *c, uint32_t t)
{
    switch (vsr_json_type(&c->j, t)) {
    case VSR_JSON_OBJECT: return "an object";
    case VSR_JSON_ARRAY: return "an array";
    case VSR_JSON_STRING: return "a string";
    case VSR_JSON_NUMBER: return "a number";
    case VSR_JSON_TRUE:
    case VSR_JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* repair: input that is not UTF-8 is translated with U+FFFD for each stray
 * byte (0 only where a result points into the input, which must stay as is). */
static int cx_open(cx_t *c, const char *body, size_t len, const vsr_responses_limits_t *lim, vsr_buf_t *out,
                   vsr_responses_error_t *err, int repair)
{
    memset(c, 0, sizeof(*c));
    limits_fill(&c->lim, lim);
    c->err = err ? err : &c->scratch;
    err_reset(c->err);
    c->w.b = out;
    c->w.rc = VSR_OK;
    vsr_pool_init(&c->pool);
    if (len > c->lim.max_input)
        return big(c, NULL, "Request body is larger than %zu bytes.", c->lim.max_input);
    uint32_t dup = 0;
    switch (doc_parse(&c->j, &c->pool, body, len, c->lim.max_depth, repair, &dup)) {
    case DOC_OK:
        return VSR_OK;
    case DOC_DEEP:
        return big(c, NULL, "Request body is nested deeper than %u levels.", c->lim.max_depth);
    case DOC_MALFORMED:
        return bad(c, NULL, "We could not parse the JSON body of your request (%s at byte %zu).",
                   c->j.err_msg ? c->j.err_msg : "invalid", c->j.err_offset);
    case DOC_NOT_OBJECT:
        return bad(c, NULL, "The request body must be a JSON object.");
    case DOC_DUPLICATE:
        break;
    }
    return bad(c, NULL, "Duplicate parameter: '%s'.", quote(c, dup));
}

static int cx_close(cx_t *c, int rc)
{
    if (rc == VSR_OK && c->w.rc != VSR_OK)
        rc = big(c, NULL, "The translated body is larger than the output limit.");
    vsr_json_free(&c->j);
    vsr_pool_free(&c->pool);
    return rc;
}

static int item(cx_t *c)
{
    if (++c->items > c->lim.max_items)
        return big(c, NULL, "The request has more than %u input items, content parts and tools.", c->lim.max_items);
    return VSR_OK;
}

static int is_bool(const cx_t *c, uint32_t t)
{
    return is(c, t, VSR_JSON_TRUE) || is(c, t, VSR_JSON_FALSE);
}

static uint32_t count(const cx_t *c, uint32_t t)
{
    return c->j.toks[t].count;
}

static uint64_t count_of(const cx_t *c, uint32_t t)
{
    int64_t v = int_of(c, t);
    return v < 0 ? 0 : (uint64_t)v;
}

static int nonempty_str(const cx_t *c, uint32_t t)
{
    return is(c, t, VSR_JSON_STRING) && c->j.toks[t].end - c->j.toks[t].start > 2;
}

/* ---- errors ------------------------------------------------------------ */

static const char *type_for_status(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

int vsr_responses_error_body(vsr_buf_t *out, const vsr_responses_error_t *err)
{
    w_t w = {out, VSR_OK};
    size_t mark = out->len;
    PUT(&w, "{\"error\":{\"message\":");
    put_str(&w, vsr_slice_cstr(err->message));
    PUT(&w, ",\"type\":");
    put_str(&w, vsr_slice_cstr(err->type ? err->type : type_for_status(err->status)));
    PUT(&w, ",\"param\":");
    if (err->param[0])
        put_str(&w, vsr_slice_cstr(err->param));
    else
        PUT(&w, "null");
    PUT(&w, ",\"code\":null}}");
    if (w.rc != VSR_OK)
        out->len = mark;
    return w.rc;
}

int vsr_responses_error_from_chat(int status, const char *body, size_t len, vsr_buf_t *out)
{
    cx_t c;
    size_t mark = out->len;
    int ok = cx_open(&c, body, len, NULL, out, NULL, 1) == VSR_OK;
    uint32_t e = ok ? get(&c, 0, "error") : 0;
    uint32_t msg = is(&c, e, VSR_JSON_OBJECT) ? get(&c, e, "message") : (is(&c, e, VSR_JSON_STRING) ? e : 0);
    uint32_t etype = is(&c, e, VSR_JSON_OBJECT) ? get(&c, e, "type") : 0;
    uint32_t param = is(&c, e, VSR_JSON_OBJECT) ? get(&c, e, "param") : 0;
    uint32_t code = is(&c, e, VSR_JSON_OBJECT) ? get(&c, e, "code") : 0;
    PUT(&c.w, "{\"error\":{\"message\":");
    if (is(&c, msg, VSR_JSON_STRING)) {
        raw(&c, msg);
    } else {
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "upstream answered with status %d", status);
        put_str(&c.w, vsr_slice_cstr(tmp));
    }
    PUT(&c.w, ",\"type\":");
    if (is(&c, etype, VSR_JSON_STRING))
        raw(&c, etype);
    else
        put_str(&c.w, vsr_slice_cstr(type_for_status(status)));
    PUT(&c.w, ",\"param\":");
    if (is(&c, param, VSR_JSON_STRING))
        raw(&c, param);
    else
        PUT(&c.w, "null");
    PUT(&c.w, ",\"code\":");
    if (is(&c, code, VSR_JSON_STRING)) {
        raw(&c, code);
    } else if (is(&c, code, VSR_JSON_NUMBER)) {
        PUT(&c.w, "\"");
        raw(&c, code);
        PUT(&c.w, "\"");
    } else {
        PUT(&c.w, "null");
    }
    PUT(&c.w, "}}");
    int rc = c.w.rc;
    if (rc != VSR_OK)
        out->len = mark;
    vsr_json_free(&c.j);
    vsr_pool_free(&c.pool);
    return rc;
}

/* ---- request info --------------------------------------------------------- */

static int check_info(cx_t *c, vsr_responses_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->store = 1;
    uint32_t stream = get(c, 0, "stream"), store = get(c, 0, "store"), prev = get(c, 0, "previous_response_id");
    uint32_t auto_store = get(c, 0, "auto_store");
    if (!absent(c, auto_store) && !is_bool(c, auto_store))
        return bad(c, "auto_store", "Invalid type for 'auto_store': expected a boolean, but got %s instead.",
                   type_name(c, auto_store));
    info->auto_store = absent(c, auto_store) ? -1 : is(c, auto_store, VSR_JSON_TRUE);
    if (!absent(c, stream) && !is_bool(c, stream))
        return bad(c, "stream", "Invalid type for 'stream': expected a boolean, but got %s instead.",
                   type_name(c, stream));
    if (!absent(c, store) && !is_bool(c, store))
        return bad(c, "store", "Invalid type for 'store': expected a boolean, but got %s instead.",
                   type_name(c, store));
    info->stream = is(c, stream, VSR_JSON_TRUE);
    info->store = !is(c, store, VSR_JSON_FALSE);
    if (!absent(c, prev)) {
        vsr_slice_t s;
        if (!is(c, prev, VSR_JSON_STRING))
            return bad(c, "previous_response_id",
                       "Invalid type for 'previous_response_id': expected a string, but got %s instead.",
                       type_name(c, prev));
        if (vsr_json_string(&c->j, prev, &c->pool, &s) != VSR_OK || s.len == 0 ||
            s.len >= sizeof(info->previous_response_id) || memchr(s.p, '\0', s.len) != NULL)
            return bad(c, "previous_response_id", "Invalid 'previous_response_id': '%s'.", quote(c, prev));
        memcpy(info->previous_response_id, s.p, s.len);
        info->previous_response_id[s.len] = '\0';
    }
    return VSR_OK;
}

int vsr_responses_request_info(const char *body, size_t len, const vsr_responses_limits_t *lim,
                               vsr_responses_info_t *info, vsr_responses_error_t *err)
{
    cx_t c;
    vsr_buf_t none_buf;
    vsr_buf_init(&none_buf, 1);
    int rc = cx_open(&c, body, len, lim, &none_buf, err, 0);
    if (rc == VSR_OK)
        rc = check_info(&c, info);
    else
        memset(info, 0, sizeof(*info));
    vsr_buf_free(&none_buf);
    return cx_close(&c, rc);
}

/* ---- request → chat -------------------------------------------------------- */

/* The input messages are written once into `msgs` (chat) and `items`
 * (normalised); the caller copies msgs into the chat body and conv. */
typedef struct {
    cx_t *c;
    w_t m;     /* chat messages, comma-separated */
    w_t it;    /* normalised items, comma-separated */
    int n_msgs, n_items;
    int asst;  /* 0 none open, 1 an assistant message open, 2 its tool_calls open */
} in_t;

static void msg_sep(in_t *in)
{
    if (in->n_msgs++)
        PUT(&in->m, ",");
}

static void item_sep(in_t *in)
{
    if (in->n_items++)
        PUT(&in->it, ",");
}

static void asst_close(in_t *in)
{
    if (in->asst == 1)
        PUT(&in->m, "}");
    else if (in->asst == 2)
        PUT(&in->m, "]}");
    in->asst = 0;
}

/* Writes into in->m with the cx's raw() helpers. */
static void mraw(in_t *in, uint32_t t)
{
    put_slice(&in->m, vsr_json_raw(&in->c->j, t));
}

static void iraw(in_t *in, uint32_t t)
{
    put_slice(&in->it, vsr_json_raw(&in->c->j, t));
}

static int check_string_field(cx_t *c, uint32_t obj, const char *key, const char *where, int required)
{
    uint32_t v = get(c, obj, key);
    if (v == 0 && !required)
        return VSR_OK;
    if (v == 0)
        return bad(c, path(c, "%s.%s", where, key), "Missing required parameter: '%s.%s'.", where, key);
    if (!is(c, v, VSR_JSON_STRING))
        return bad(c, path(c, "%s.%s", where, key), "Invalid type for '%s.%s': expected a string, but got %s instead.",
                   where, key, type_name(c, v));
    return VSR_OK;
}

/* A message item: role and content checked, written to both outputs. */
static int in_message(in_t *in, uint32_t m, uint32_t i)
{
    cx_t *c = in->c;
    const char *where = path(c, "input[%u]", i);
    uint32_t role = get(c, m, "role"), content = get(c, m, "content");
    if (role == 0)
        return bad(c, path(c, "%s.role", where), "Missing required parameter: '%s.role'.", where);
    int user = str_is(c, role, "user"), asst = str_is(c, role, "assistant");
    int sys = str_is(c, role, "system") || str_is(c, role, "developer");
    if (!user && !asst && !sys)
        return bad(c, path(c, "%s.role", where),
                   "Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.",
                   is(c, role, VSR_JSON_STRING) ? quote(c, role) : type_name(c, role));
    if (content == 0)
        return bad(c, path(c, "%s.content", where), "Missing required parameter: '%s.content'.", where);
    if (!is(c, content, VSR_JSON_STRING) && !is(c, content, VSR_JSON_ARRAY))
        return bad(c, path(c, "%s.content", where),
                   "Invalid type for '%s.content': expected a string or an array of content parts, but got %s instead.",
                   where, type_name(c, content));
    /* check the parts */
    if (is(c, content, VSR_JSON_ARRAY)) {
        uint32_t p = content + 1;
        for (uint32_t k = 0; k < count(c, content); k++, p = next_sib(c, p)) {
            if (item(c) != VSR_OK)
                return VSR_ERR_TOO_BIG;
            const char *pw = path(c, "%s.content[%u]", where, k);
            if (!is(c, p, VSR_JSON_OBJECT))
                return bad(c, pw, "Invalid type for '%s': expected an object, but got %s instead.", pw,
                           type_name(c, p));
            uint32_t pt = get(c, p, "type");
            if (pt == 0)
                return bad(c, path(c, "%s.type", pw), "Missing required parameter: '%s.type'.", pw);
            if (str_is(c, pt, "input_text") || str_is(c, pt, "output_text")) {
                if (check_string_field(c, p, "text", pw, 1) != VSR_OK)
                    return VSR_ERR_INVALID;
                if (str_is(c, pt, "output_text") && !asst)
                    return bad(c, path(c, "%s.type", pw), "Invalid value: 'output_text'. Supported values are: "
                                                          "'input_text', 'input_image', and 'input_file'.");
            } else if (str_is(c, pt, "refusal")) {
                if (!asst)
                    return bad(c, path(c, "%s.type", pw), "Invalid value: 'refusal'. Supported values are: "
                                                          "'input_text', 'input_image', and 'input_file'.");
                if (check_string_field(c, p, "refusal", pw, 1) != VSR_OK)
                    return VSR_ERR_INVALID;
            } else if (str_is(c, pt, "input_image")) {
                if (!user)
                    return bad(c, path(c, "%s.type", pw), "Image content is only supported in user messages.");
                uint32_t url = get(c, p, "image_url"), detail = get(c, p, "detail");
                if (absent(c, url)) {
                    if (!absent(c, get(c, p, "file_id")))
                        return bad(c, path(c, "%s.file_id", pw), "Images by file_id are not supported here; "
                                                                 "give an image_url.");
                    return bad(c, path(c, "%s.image_url", pw), "Missing required parameter: '%s.image_url'.", pw);
                }
                if (!is(c, url, VSR_JSON_STRING))
                    return bad(c, path(c, "%s.image_url", pw),
                               "Invalid type for '%s.image_url': expected a string, but got %s instead.", pw,
                               type_name(c, url));
                if (!absent(c, detail) && !str_is(c, detail, "auto") && !str_is(c, detail, "low") &&
                    !str_is(c, detail, "high"))
                    return bad(c, path(c, "%s.detail", pw),
                               "Invalid value for '%s.detail'. Supported values are: 'low', 'high', and 'auto'.", pw);
            } else if (str_is(c, pt, "input_file") || str_is(c, pt, "input_audio")) {
                return bad(c, path(c, "%s.type", pw), "Content of type '%s' is not supported here.", quote(c, pt));
            } else {
                return bad(c, path(c, "%s.type", pw), "Invalid value: '%s'. Supported values are: 'input_text', "
                                                      "'input_image', 'output_text', and 'refusal'.",
                           is(c, pt, VSR_JSON_STRING) ? quote(c, pt) : type_name(c, pt));
            }
        }
    }

    /* normalised item */
    item_sep(in);
    PUT(&in->it, "{");
    uint32_t id = get(c, m, "id");
    if (is(c, id, VSR_JSON_STRING)) {
        PUT(&in->it, "\"id\":");
        iraw(in, id);
        PUT(&in->it, ",");
    }
    PUT(&in->it, "\"type\":\"message\",\"role\":");
    iraw(in, role);
    PUT(&in->it, ",\"content\":");
    if (is(c, content, VSR_JSON_STRING)) {
        if (asst)
            PUT(&in->it, "[{\"type\":\"output_text\",\"text\":");
        else
            PUT(&in->it, "[{\"type\":\"input_text\",\"text\":");
        iraw(in, content);
        if (asst)
            PUT(&in->it, ",\"annotations\":[]}]");
        else
            PUT(&in->it, "}]");
    } else {
        iraw(in, content);
    }
    uint32_t status = get(c, m, "status");
    if (is(c, status, VSR_JSON_STRING)) {
        PUT(&in->it, ",\"status\":");
        iraw(in, status);
    }
    PUT(&in->it, "}");

    /* chat message */
    asst_close(in);
    msg_sep(in);
    PUT(&in->m, "{\"role\":");
    if (user)
        PUT(&in->m, "\"user\"");
    else if (asst)
        PUT(&in->m, "\"assistant\"");
    else
        PUT(&in->m, "\"system\"");
    PUT(&in->m, ",\"content\":");
    int only_text = is(c, content, VSR_JSON_ARRAY);
    if (only_text) {
        uint32_t p = content + 1;
        for (uint32_t k = 0; k < count(c, content); k++, p = next_sib(c, p))
            only_text &= !str_is(c, get(c, p, "type"), "input_image") && !str_is(c, get(c, p, "type"), "refusal");
    }
    if (is(c, content, VSR_JSON_STRING)) {
        mraw(in, content);
    } else if (only_text) { /* texts joined: a string every chat backend takes */
        PUT(&in->m, "\"");
        uint32_t p = content + 1;
        for (uint32_t k = 0; k < count(c, content); k++, p = next_sib(c, p)) {
            if (k)
                PUT(&in->m, "\\n");
            put_slice(&in->m, inner(c, get(c, p, "text")));
        }
        PUT(&in->m, "\"");
    } else {
        PUT(&in->m, "[");
        uint32_t p = content + 1;
        for (uint32_t k = 0; k < count(c, content); k++, p = next_sib(c, p)) {
            uint32_t pt = get(c, p, "type");
            if (k)
                PUT(&in->m, ",");
            if (str_is(c, pt, "input_image")) {
                PUT(&in->m, "{\"type\":\"image_url\",\"image_url\":{\"url\":");
                mraw(in, get(c, p, "image_url"));
                uint32_t detail = get(c, p, "detail");
                if (is(c, detail, VSR_JSON_STRING)) {
                    PUT(&in->m, ",\"detail\":");
                    mraw(in, detail);
                }
                PUT(&in->m, "}}");
            } else if (str_is(c, pt, "refusal")) {
                PUT(&in->m, "{\"type\":\"refusal\",\"refusal\":");
                mraw(in, get(c, p, "refusal"));
                PUT(&in->m, "}");
            } else {
                PUT(&in->m, "{\"type\":\"text\",\"text\":");
                mraw(in, get(c, p, "text"));
                PUT(&in->m, "}");
            }
        }
        PUT(&in->m, "]");
    }
    if (asst)
        in->asst = 1; /* function calls right after join it */
    else
        PUT(&in->m, "}");
    return VSR_OK;
}

static int in_function_call(in_t *in, uint32_t m, uint32_t i)
{
    cx_t *c = in->c;
    const char *where = path(c, "input[%u]", i);
    if (check_string_field(c, m, "call_id", where, 1) != VSR_OK || check_string_field(c, m, "name", where, 1) != VSR_OK ||
        check_string_field(c, m, "arguments", where, 1) != VSR_OK)
        return VSR_ERR_INVALID;
    uint32_t id = get(c, m, "id"), call_id = get(c, m, "call_id"), name = get(c, m, "name"),
             args = get(c, m, "arguments");
    item_sep(in);
    PUT(&in->it, "{");
    if (is(c, id, VSR_JSON_STRING)) {
        PUT(&in->it, "\"id\":");
        iraw(in, id);
        PUT(&in->it, ",");
    }
    PUT(&in->it, "\"type\":\"function_call\",\"call_id\":");
    iraw(in, call_id);
    PUT(&in->it, ",\"name\":");
    iraw(in, name);
    PUT(&in->it, ",\"arguments\":");
    iraw(in, args);
    PUT(&in->it, ",\"status\":\"completed\"}");

    if (in->asst == 0) {
        msg_sep(in);
        PUT(&in->m, "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[");
    } else if (in->asst == 1) {
        PUT(&in->m, ",\"tool_calls\":[");
    } else {
        PUT(&in->m, ",");
    }
    in->asst = 2;
    PUT(&in->m, "{\"id\":");
    mraw(in, call_id);
    PUT(&in->m, ",\"type\":\"function\",\"function\":{\"name\":");
    mraw(in, name);
    PUT(&in->m, ",\"arguments\":");
    mraw(in, args);
    PUT(&in->m, "}}");
    return VSR_OK;
}

static int in_function_output(in_t *in, uint32_t m, uint32_t i)
{
    cx_t *c = in->c;
    const char *where = path(c, "input[%u]", i);
    if (check_string_field(c, m, "call_id", where, 1) != VSR_OK)
        return VSR_ERR_INVALID;
    uint32_t call_id = get(c, m, "call_id"), output = get(c, m, "output"), id = get(c, m, "id");
    if (output == 0)
        return bad(c, path(c, "%s.output", where), "Missing required parameter: '%s.output'.", where);
    if (is(c, output, VSR_JSON_ARRAY)) {
        uint32_t p = output + 1;
        for (uint32_t k = 0; k < count(c, output); k++, p = next_sib(c, p)) {
            if (item(c) != VSR_OK)
                return VSR_ERR_TOO_BIG;
            const char *pw = path(c, "%s.output[%u]", where, k);
            uint32_t pt = get(c, p, "type");
            if (!is(c, p, VSR_JSON_OBJECT) || !is(c, pt, VSR_JSON_STRING))
                return bad(c, pw, "Invalid '%s': expected a content part with a type.", pw);
            if (str_is(c, pt, "input_text") && check_string_field(c, p, "text", pw, 1) != VSR_OK)
                return VSR_ERR_INVALID;
            if (!str_is(c, pt, "input_text"))
                return bad(c, path(c, "%s.type", pw), "Function output parts of type '%s' are not supported here.",
                           quote(c, pt));
        }
    } else if (!is(c, output, VSR_JSON_STRING)) {
        return bad(c, path(c, "%s.output", where),
                   "Invalid type for '%s.output': expected a string or an array of content parts, but got %s instead.",
                   where, type_name(c, output));
    }
    item_sep(in);
    PUT(&in->it, "{");
    if (is(c, id, VSR_JSON_STRING)) {
        PUT(&in->it, "\"id\":");
        iraw(in, id);
        PUT(&in->it, ",");
    }
    PUT(&in->it, "\"type\":\"function_call_output\",\"call_id\":");
    iraw(in, call_id);
    PUT(&in->it, ",\"output\":");
    iraw(in, output);
    PUT(&in->it, "}");

    asst_close(in);
    msg_sep(in);
    PUT(&in->m, "{\"role\":\"tool\",\"tool_call_id\":");
    mraw(in, call_id);
    PUT(&in->m, ",\"content\":");
    if (is(c, output, VSR_JSON_STRING)) {
        mraw(in, output);
    } else {
        PUT(&in->m, "\"");
        uint32_t p = output + 1;
        for (uint32_t k = 0; k < count(c, output); k++, p = next_sib(c, p)) {
            if (k)
                PUT(&in->m, "\\n");
            put_slice(&in->m, inner(c, get(c, p, "text")));
        }
        PUT(&in->m, "\"");
    }
    PUT(&in->m, "}");
    return VSR_OK;
}

static int in_items(in_t *in, uint32_t input)
{
    cx_t *c = in->c;
    if (is(c, input, VSR_JSON_STRING)) {
        item_sep(in);
        PUT(&in->it, "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":");
        iraw(in, input);
        PUT(&in->it, "}]}");
        msg_sep(in);
        PUT(&in->m, "{\"role\":\"user\",\"content\":");
        mraw(in, input);
        PUT(&in->m, "}");
        return VSR_OK;
    }
    if (!is(c, input, VSR_JSON_ARRAY))
        return bad(c, "input", "Invalid type for 'input': expected a string or an array of input items, but got %s "
                               "instead.", type_name(c, input));
    uint32_t m = input + 1;
    for (uint32_t i = 0; i < count(c, input); i++, m = next_sib(c, m)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        if (!is(c, m, VSR_JSON_OBJECT))
            return bad(c, path(c, "input[%u]", i), "Invalid type for 'input[%u]': expected an object, but got %s "
                                                   "instead.", i, type_name(c, m));
        uint32_t type = get(c, m, "type");
        int rc;
        if (absent(c, type) || str_is(c, type, "message")) {
            rc = in_message(in, m, i);
        } else if (str_is(c, type, "function_call")) {
            rc = in_function_call(in, m, i);
        } else if (str_is(c, type, "function_call_output")) {
            rc = in_function_output(in, m, i);
        } else if (str_is(c, type, "reasoning")) {
            item_sep(in);
            iraw(in, m);
            rc = VSR_OK;
        } else if (is(c, type, VSR_JSON_STRING)) {
            rc = bad(c, path(c, "input[%u].type", i), "Input items of type '%s' are not supported here.",
                     quote(c, type));
        } else {
            rc = bad(c, path(c, "input[%u].type", i), "Invalid type for 'input[%u].type': expected a string, but got "
                                                      "%s instead.", i, type_name(c, type));
        }
        if (rc != VSR_OK)
            return rc;
    }
    asst_close(in);
    return VSR_OK;
}

static int number_param(cx_t *c, const char *name, double lo, double hi)
{
    uint32_t t = get(c, 0, name);
    if (absent(c, t))
        return VSR_OK;
    double d;
    if (!is(c, t, VSR_JSON_NUMBER) || vsr_json_number(&c->j, t, &d) != VSR_OK)
        return bad(c, name, "Invalid type for '%s': expected a decimal, but got %s instead.", name, type_name(c, t));
    if (!(d >= lo && d <= hi))
        return bad(c, name, "Invalid '%s': must be between %g and %g.", name, lo, hi);
    return VSR_OK;
}

static int check_tools(cx_t *c, uint32_t tools)
{
    if (absent(c, tools))
        return VSR_OK;
    if (!is(c, tools, VSR_JSON_ARRAY))
        return bad(c, "tools", "Invalid type for 'tools': expected an array, but got %s instead.", type_name(c, tools));
    uint32_t t = tools + 1;
    for (uint32_t k = 0; k < count(c, tools); k++, t = next_sib(c, t)) {
        if (item(c) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        const char *where = path(c, "tools[%u]", k);
        if (!is(c, t, VSR_JSON_OBJECT))
            return bad(c, where, "Invalid type for '%s': expected an object, but got %s instead.", where,
                       type_name(c, t));
        uint32_t type = get(c, t, "type");
        if (type == 0)
            return bad(c, path(c, "%s.type", where), "Missing required parameter: '%s.type'.", where);
        if (!str_is(c, type, "function")) {
            if (is(c, type, VSR_JSON_STRING))
                return bad(c, path(c, "%s.type", where),
                           "Tools of type '%s' are not supported here: only function tools have a chat form.",
                           quote(c, type));
            return bad(c, path(c, "%s.type", where), "Invalid type for '%s.type': expected a string.", where);
        }
        if (check_string_field(c, t, "name", where, 1) != VSR_OK)
            return VSR_ERR_INVALID;
        uint32_t desc = get(c, t, "description"), params = get(c, t, "parameters"), strict = get(c, t, "strict");
        if (!absent(c, desc) && !is(c, desc, VSR_JSON_STRING))
            return bad(c, path(c, "%s.description", where), "Invalid type for '%s.description': expected a string.",
                       where);
        if (!absent(c, params) && !is(c, params, VSR_JSON_OBJECT))
            return bad(c, path(c, "%s.parameters", where), "Invalid type for '%s.parameters': expected an object.",
                       where);
        if (!absent(c, strict) && !is_bool(c, strict))
            return bad(c, path(c, "%s.strict", where), "Invalid type for '%s.strict': expected a boolean.", where);
    }
    return VSR_OK;
}

static void write_tools(cx_t *c, uint32_t tools)
{
    w_t *w = &c->w;
    PUT(w, ",\"tools\":[");
    uint32_t t = tools + 1;
    for (uint32_t k = 0; k < count(c, tools); k++, t = next_sib(c, t)) {
        uint32_t desc = get(c, t, "description"), params = get(c, t, "parameters"), strict = get(c, t, "strict");
        if (k)
            PUT(w, ",");
        PUT(w, "{\"type\":\"function\",\"function\":{\"name\":");
        raw(c, get(c, t, "name"));
        if (!absent(c, desc)) {
            PUT(w, ",\"description\":");
            raw(c, desc);
        }
        if (!absent(c, params)) {
            PUT(w, ",\"parameters\":");
            raw(c, params);
        }
        if (!absent(c, strict)) {
            PUT(w, ",\"strict\":");
            raw(c, strict);
        }
        PUT(w, "}}");
    }
    PUT(w, "]");
}

/* tool_choice → its chat form (into w), checked. */
static int tool_choice(cx_t *c, uint32_t tc, int write)
{
    w_t *w = &c->w;
    if (absent(c, tc))
        return VSR_OK;
    if (str_is(c, tc, "auto") || str_is(c, tc, "none") || str_is(c, tc, "required")) {
        if (write) {
            PUT(w, ",\"tool_choice\":");
            raw(c, tc);
        }
        return VSR_OK;
    }
    if (is(c, tc, VSR_JSON_STRING))
        return bad(c, "tool_choice", "Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.",
                   quote(c, tc));
    if (!is(c, tc, VSR_JSON_OBJECT))
        return bad(c, "tool_choice", "Invalid type for 'tool_choice': expected a string or an object, but got %s "
                                     "instead.", type_name(c, tc));
    uint32_t type = get(c, tc, "type"), name = get(c, tc, "name");
    if (!str_is(c, type, "function"))
        return bad(c, "tool_choice.type", "A tool_choice of type '%s' is not supported here: only function tools "
                                          "have a chat form.",
                   is(c, type, VSR_JSON_STRING) ? quote(c, type) : "?");
    if (!is(c, name, VSR_JSON_STRING))
        return bad(c, "tool_choice.name", "Missing required parameter: 'tool_choice.name'.");
    if (write) {
        PUT(w, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
        raw(c, name);
        PUT(w, "}}");
    }
    return VSR_OK;
}

static int check_text(cx_t *c, uint32_t text)
{
    if (absent(c, text))
        return VSR_OK;
    if (!is(c, text, VSR_JSON_OBJECT))
        return bad(c, "text", "Invalid type for 'text': expected an object, but got %s instead.", type_name(c, text));
    uint32_t k = text + 1;
    for (uint32_t i = 0; i < count(c, text); i++, k = next_sib(c, k + 1)) {
        if (!str_is(c, k, "format") && !str_is(c, k, "verbosity"))
            return bad(c, path(c, "text.%s", quote(c, k)), "Unknown parameter: 'text.%s'.", quote(c, k));
    }
    uint32_t f = get(c, text, "format");
    if (absent(c, f))
        return VSR_OK;
    uint32_t type = get(c, f, "type");
    if (!is(c, f, VSR_JSON_OBJECT) || !is(c, type, VSR_JSON_STRING))
        return bad(c, "text.format.type", "Missing required parameter: 'text.format.type'.");
    if (str_is(c, type, "text") || str_is(c, type, "json_object"))
        return VSR_OK;
    if (!str_is(c, type, "json_schema"))
        return bad(c, "text.format.type", "Invalid value: '%s'. Supported values are: 'text', 'json_schema', and "
                                          "'json_object'.", quote(c, type));
    if (check_string_field(c, f, "name", "text.format", 1) != VSR_OK)
        return VSR_ERR_INVALID;
    uint32_t schema = get(c, f, "schema"), strict = get(c, f, "strict");
    if (!is(c, schema, VSR_JSON_OBJECT))
        return bad(c, "text.format.schema", "Missing required parameter: 'text.format.schema'.");
    if (check_string_field(c, f, "description", "text.format", 0) != VSR_OK)
        return VSR_ERR_INVALID;
    if (!absent(c, strict) && !is_bool(c, strict))
        return bad(c, "text.format.strict", "Invalid type for 'text.format.strict': expected a boolean.");
    return VSR_OK;
}

static void write_text_format(cx_t *c, uint32_t text)
{
    w_t *w = &c->w;
    uint32_t f = get(c, text, "format");
    uint32_t type = get(c, f, "type");
    if (str_is(c, type, "json_object")) {
        PUT(w, ",\"response_format\":{\"type\":\"json_object\"}");
    } else if (str_is(c, type, "json_schema")) {
        PUT(w, ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":");
        raw(c, get(c, f, "name"));
        uint32_t desc = get(c, f, "description"), strict = get(c, f, "strict");
        if (is(c, desc, VSR_JSON_STRING)) {
            PUT(w, ",\"description\":");
            raw(c, desc);
        }
        PUT(w, ",\"schema\":");
        raw(c, get(c, f, "schema"));
        if (is_bool(c, strict)) {
            PUT(w, ",\"strict\":");
            raw(c, strict);
        }
        PUT(w, "}}");
    }
}

static int check_reasoning(cx_t *c, uint32_t r)
{
    if (absent(c, r))
        return VSR_OK;
    if (!is(c, r, VSR_JSON_OBJECT))
        return bad(c, "reasoning", "Invalid type for 'reasoning': expected an object, but got %s instead.",
                   type_name(c, r));
    uint32_t e = get(c, r, "effort");
    if (!absent(c, e) && !str_is(c, e, "minimal") && !str_is(c, e, "low") && !str_is(c, e, "medium") &&
        !str_is(c, e, "high") && !str_is(c, e, "none"))
        return bad(c, "reasoning.effort", "Invalid value for 'reasoning.effort'. Supported values are: 'none', "
                                          "'minimal', 'low', 'medium', and 'high'.");
    return VSR_OK;
}

/* The top-level parameters: known ones checked elsewhere, harmless ones
 * dropped, the rest refused. */
static const char *const KNOWN[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p",
    "max_output_tokens", "stream", "store", "previous_response_id", "metadata", "text", "reasoning", "user",
    "auto_store", /* the router's own (the memory plugin's), never sent on */
    /* dropped: */
    "include", "service_tier", "prompt_cache_key", "safety_identifier", "top_logprobs", "stream_options",
    "background", "truncation",
};
static const char *const REFUSED[] = {"prompt", "conversation", "max_tool_calls"};

static int check_params(cx_t *c)
{
    uint32_t k = 1;
    for (uint32_t i = 0; i < count(c, 0); i++, k = next_sib(c, k + 1)) {
        int known = 0;
        for (size_t n = 0; n < sizeof(KNOWN) / sizeof(KNOWN[0]) && !known; n++)
            known = str_is(c, k, KNOWN[n]);
        if (known)
            continue;
        for (size_t n = 0; n < sizeof(REFUSED) / sizeof(REFUSED[0]); n++) {
            if (!str_is(c, k, REFUSED[n]))
                continue;
            if (absent(c, k + 1))
                goto next; /* null is its default */
            return bad(c, REFUSED[n], "The '%s' parameter is not supported here.", REFUSED[n]);
        }
        {
            const char *q = quote(c, k);
            return bad(c, q, "Unknown parameter: '%s'.", q);
        }
    next:;
    }
    uint32_t bg = get(c, 0, "background"), trunc = get(c, 0, "truncation");
    if (!absent(c, bg) && !is_bool(c, bg))
        return bad(c, "background", "Invalid type for 'background': expected a boolean, but got %s instead.",
                   type_name(c, bg));
    if (is(c, bg, VSR_JSON_TRUE))
        return bad(c, "background", "Background responses are not supported here.");
    if (!absent(c, trunc) && !str_is(c, trunc, "disabled")) {
        if (str_is(c, trunc, "auto"))
            return bad(c, "truncation", "truncation 'auto' is not supported here: the backend would drop input "
                                        "without saying so.");
        return bad(c, "truncation", "Invalid value for 'truncation'. Supported values are: 'auto' and 'disabled'.");
    }
    uint32_t model = get(c, 0, "model");
    if (model == 0)
        return bad(c, "model", "Missing required parameter: 'model'.");
    if (!is(c, model, VSR_JSON_STRING))
        return bad(c, "model", "Invalid type for 'model': expected a string, but got %s instead.", type_name(c, model));
    uint32_t input = get(c, 0, "input");
    if (absent(c, input))
        return bad(c, "input", "Missing required parameter: 'input'.");
    uint32_t instr = get(c, 0, "instructions");
    if (!absent(c, instr) && !is(c, instr, VSR_JSON_STRING))
        return bad(c, "instructions", "Invalid type for 'instructions': expected a string, but got %s instead.",
                   type_name(c, instr));
    uint32_t mot = get(c, 0, "max_output_tokens");
    if (!absent(c, mot)) {
        int64_t v = int_of(c, mot);
        if (!is(c, mot, VSR_JSON_NUMBER) || v < 0)
            return bad(c, "max_output_tokens", "Invalid type for 'max_output_tokens': expected an integer.");
        if (v < 16)
            return bad(c, "max_output_tokens", "Invalid 'max_output_tokens': integer below minimum value. Expected a "
                                               "value >= 16, but got %lld instead.", (long long)v);
    }
    uint32_t ptc = get(c, 0, "parallel_tool_calls"), meta = get(c, 0, "metadata"), user = get(c, 0, "user");
    if (!absent(c, ptc) && !is_bool(c, ptc))
        return bad(c, "parallel_tool_calls", "Invalid type for 'parallel_tool_calls': expected a boolean.");
    if (!absent(c, meta)) {
        if (!is(c, meta, VSR_JSON_OBJECT))
            return bad(c, "metadata", "Invalid type for 'metadata': expected an object, but got %s instead.",
                       type_name(c, meta));
        if (count(c, meta) > 16)
            return bad(c, "metadata", "Invalid 'metadata': too many properties. Expected at most 16.");
        uint32_t mk = meta + 1;
        for (uint32_t i = 0; i < count(c, meta); i++, mk = next_sib(c, mk + 1))
            if (!is(c, mk + 1, VSR_JSON_STRING))
                return bad(c, path(c, "metadata.%s", quote(c, mk)), "Invalid type for 'metadata.%s': expected a "
                                                                    "string.", quote(c, mk));
    }
    if (!absent(c, user) && !is(c, user, VSR_JSON_STRING))
        return bad(c, "user", "Invalid type for 'user': expected a string, but got %s instead.", type_name(c, user));
    uint32_t include = get(c, 0, "include");
    if (!absent(c, include) && !is(c, include, VSR_JSON_ARRAY))
        return bad(c, "include", "Invalid type for 'include': expected an array, but got %s instead.",
                   type_name(c, include));
    if (number_param(c, "temperature", 0, 2) != VSR_OK || number_param(c, "top_p", 0, 1) != VSR_OK)
        return VSR_ERR_INVALID;
    return VSR_OK;
}

/* The prior conversation: a JSON array (the caller's store).  Writes its
 * elements, comma-separated, to w; returns how many (or -1). */
static int prior_copy(cx_t *c, const char *prior, size_t prior_len, w_t *w, long *n)
{
    *n = 0;
    if (prior == NULL || prior_len == 0)
        return VSR_OK;
    vsr_json_t pj;
    vsr_json_limits_t jl = {.max_depth = c->lim.max_depth, .max_tokens = 0};
    int rc = vsr_json_parse(&pj, prior, prior_len, &jl);
    if (rc != VSR_OK || vsr_json_type(&pj, 0) != VSR_JSON_ARRAY) {
        vsr_json_free(&pj);
        c->err->type = NULL;
        upstream(c, "The stored conversation of previous_response_id is not a JSON array.");
        c->err->status = 500;
        return VSR_ERR_INVALID;
    }
    if (pj.toks[0].count > 0)
        put(w, prior + pj.toks[1].start, pj.toks[0].end - 1 - pj.toks[1].start);
    *n = (long)pj.toks[0].count;
    vsr_json_free(&pj);
    return VSR_OK;
}

static void write_echo(cx_t *c, vsr_buf_t *b)
{
    w_t w = {b, VSR_OK};
    w_t save = c->w;
    c->w = w;
#define ECHO(key, dflt)                          \
    do {                                         \
        uint32_t v_ = get(c, 0, key);            \
        PUT(&c->w, "\"" key "\":");              \
        if (!absent(c, v_))                        \
            put_compact(&c->w, vsr_json_raw(&c->j, v_)); \
        else                                     \
            PUT(&c->w, dflt);                    \
    } while (0)
    PUT(&c->w, "{");
    ECHO("instructions", "null");
    PUT(&c->w, ",");
    ECHO("max_output_tokens", "null");
    PUT(&c->w, ",");
    ECHO("metadata", "{}");
    PUT(&c->w, ",");
    ECHO("parallel_tool_calls", "true");
    PUT(&c->w, ",");
    ECHO("previous_response_id", "null");
    PUT(&c->w, ",");
    ECHO("reasoning", "{\"effort\":null,\"summary\":null}");
    PUT(&c->w, ",");
    ECHO("store", "true");
    PUT(&c->w, ",");
    ECHO("temperature", "1");
    PUT(&c->w, ",");
    ECHO("text", "{\"format\":{\"type\":\"text\"}}");
    PUT(&c->w, ",");
    ECHO("tool_choice", "\"auto\"");
    PUT(&c->w, ",");
    ECHO("tools", "[]");
    PUT(&c->w, ",");
    ECHO("top_p", "1");
    PUT(&c->w, ",");
    ECHO("truncation", "\"disabled\"");
    PUT(&c->w, ",");
    ECHO("user", "null");
    PUT(&c->w, "}");
#undef ECHO
    int rc = c->w.rc;
    c->w = save;
    if (rc != VSR_OK && c->w.rc == VSR_OK)
        c->w.rc = rc;
}

static int to_chat(cx_t *c, const char *prior, size_t prior_len, const vsr_responses_out_t *out)
{
    vsr_responses_info_t info;
    if (check_params(c) != VSR_OK || check_info(c, &info) != VSR_OK)
        return c->err->status == 413 ? VSR_ERR_TOO_BIG : VSR_ERR_INVALID;
    uint32_t tools = get(c, 0, "tools"), tc = get(c, 0, "tool_choice"), text = get(c, 0, "text"),
             reasoning = get(c, 0, "reasoning");
    int rc = check_tools(c, tools);
    if (rc == VSR_OK)
        rc = tool_choice(c, tc, 0);
    if (rc == VSR_OK)
        rc = check_text(c, text);
    if (rc == VSR_OK)
        rc = check_reasoning(c, reasoning);
    if (rc != VSR_OK)
        return rc;

    vsr_buf_t msgs, items;
    vsr_buf_init(&msgs, c->w.b->cap);
    vsr_buf_init(&items, out->items ? out->items->cap : 0);
    in_t in = {.c = c, .m = {&msgs, VSR_OK}, .it = {&items, VSR_OK}};
    vsr_buf_t prior_b;
    vsr_buf_init(&prior_b, c->w.b->cap);
    w_t pw = {&prior_b, VSR_OK};
    long n_prior = 0;
    rc = prior_copy(c, prior, prior_len, &pw, &n_prior);
    if (rc == VSR_OK)
        rc = in_items(&in, get(c, 0, "input")) == VSR_OK ? VSR_OK : VSR_ERR_INVALID;
    if (rc != VSR_OK && c->err->status == 413)
        rc = VSR_ERR_TOO_BIG;
    if (rc == VSR_OK && (in.m.rc != VSR_OK || in.it.rc != VSR_OK || pw.rc != VSR_OK))
        rc = big(c, NULL, "The translated body is larger than the output limit.");
    if (rc == VSR_OK) {
        w_t *w = &c->w;
        PUT(w, "{\"model\":");
        raw(c, get(c, 0, "model"));
        PUT(w, ",\"messages\":[");
        uint32_t instr = get(c, 0, "instructions");
        int any = 0;
        if (is(c, instr, VSR_JSON_STRING)) {
            PUT(w, "{\"role\":\"system\",\"content\":");
            raw(c, instr);
            PUT(w, "}");
            any = 1;
        }
        if (n_prior > 0) {
            if (any)
                PUT(w, ",");
            put_slice(w, vsr_buf_slice(&prior_b));
            any = 1;
        }
        if (in.n_msgs > 0 && any)
            PUT(w, ",");
        put_slice(w, vsr_buf_slice(&msgs));
        PUT(w, "]");
        if (is(c, tools, VSR_JSON_ARRAY) && count(c, tools) > 0)
            write_tools(c, tools);
        tool_choice(c, tc, 1);
        uint32_t ptc = get(c, 0, "parallel_tool_calls");
        if (is_bool(c, ptc) && is(c, tools, VSR_JSON_ARRAY) && count(c, tools) > 0) {
            PUT(w, ",\"parallel_tool_calls\":");
            raw(c, ptc);
        }
        uint32_t mot = get(c, 0, "max_output_tokens");
        if (!absent(c, mot)) {
            PUT(w, ",\"max_tokens\":");
            raw(c, mot);
        }
        static const char *const NUMS[] = {"temperature", "top_p"};
        for (size_t k = 0; k < 2; k++) {
            uint32_t v = get(c, 0, NUMS[k]);
            if (!absent(c, v)) {
                PUT(w, ",\"");
                put(w, NUMS[k], strlen(NUMS[k]));
                PUT(w, "\":");
                raw(c, v);
            }
        }
        if (!absent(c, text))
            write_text_format(c, text);
        uint32_t effort = get(c, reasoning, "effort");
        if (is(c, effort, VSR_JSON_STRING)) {
            PUT(w, ",\"reasoning_effort\":");
            raw(c, effort);
        }
        uint32_t user = get(c, 0, "user");
        if (is(c, user, VSR_JSON_STRING)) {
            PUT(w, ",\"user\":");
            raw(c, user);
        }
        if (info.stream)
            PUT(w, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
        PUT(w, "}");
        if (out->items) {
            w_t iw = {out->items, VSR_OK};
            PUT(&iw, "[");
            put_slice(&iw, vsr_buf_slice(&items));
            PUT(&iw, "]");
            if (iw.rc != VSR_OK && c->w.rc == VSR_OK)
                c->w.rc = iw.rc;
        }
        if (out->conv) {
            w_t cw = {out->conv, VSR_OK};
            PUT(&cw, "[");
            put_slice(&cw, vsr_buf_slice(&prior_b));
            if (n_prior > 0 && in.n_msgs > 0)
                PUT(&cw, ",");
            put_slice(&cw, vsr_buf_slice(&msgs));
            PUT(&cw, "]");
            if (cw.rc != VSR_OK && c->w.rc == VSR_OK)
                c->w.rc = cw.rc;
        }
        if (out->echo)
            write_echo(c, out->echo);
    }
    vsr_buf_free(&msgs);
    vsr_buf_free(&items);
    vsr_buf_free(&prior_b);
    return rc;
}

int vsr_responses_request_to_chat(const char *body, size_t len, const char *prior, size_t prior_len,
                                  const vsr_responses_limits_t *lim, const vsr_responses_out_t *out,
                                  vsr_responses_error_t *err)
{
    cx_t c;
    int rc = cx_open(&c, body, len, lim, out->chat, err, 1);
    if (rc == VSR_OK)
        rc = to_chat(&c, prior, prior_len, out);
    return cx_close(&c, rc);
}

/* ---- the Response object ------------------------------------------------------ */

typedef struct {
    const char *status;     /* "completed", "incomplete", "failed", "in_progress" */
    const char *incomplete; /* reason, or NULL */
    vsr_slice_t error_msg;  /* failed: the message */
    vsr_slice_t model;      /* raw JSON string body */
    vsr_slice_t items;      /* output items, comma-separated */
    int have_usage;
    uint64_t in_tokens, out_tokens, total_tokens, cached_tokens, reasoning_tokens;
} resp_t;

/* The id suffix for item ids: "resp_X" → "X". */
static vsr_slice_t id_suffix(vsr_slice_t id)
{
    if (vsr_slice_starts_with(id, VSR_SLICE_LIT("resp_")))
        return vsr_slice(id.p + 5, id.len - 5);
    return id;
}

static void put_item_id(w_t *w, const char *prefix, vsr_slice_t resp_id, uint32_t index)
{
    vsr_buf_t tmp;
    vsr_buf_init(&tmp, 0);
    vsr_buf_append_cstr(&tmp, prefix);
    vsr_buf_append_slice(&tmp, id_suffix(resp_id));
    vsr_buf_append(&tmp, "_", 1);
    char d[VSR_U64_DIGITS];
    vsr_buf_append(&tmp, d, vsr_fmt_u64(d, index, 0));
    put_str(w, vsr_buf_slice(&tmp));
    vsr_buf_free(&tmp);
}

/* The echo object's members, spliced in (echo is the codec's own text). */
static void put_echo(w_t *w, vsr_slice_t echo)
{
    vsr_slice_t e = vsr_slice_trim(echo);
    if (e.len > 2 && e.p[0] == '{' && e.p[e.len - 1] == '}') {
        PUT(w, ",");
        put(w, e.p + 1, e.len - 2);
    }
}

static void put_response(w_t *w, vsr_slice_t id, uint64_t created_at, vsr_slice_t echo, const resp_t *r)
{
    PUT(w, "{\"id\":");
    put_str(w, id);
    PUT(w, ",\"object\":\"response\",\"created_at\":");
    put_u64(w, created_at);
    PUT(w, ",\"status\":\"");
    put(w, r->status, strlen(r->status));
    PUT(w, "\",\"error\":");
    if (r->error_msg.p != NULL) {
        PUT(w, "{\"code\":\"server_error\",\"message\":");
        put_str(w, r->error_msg);
        PUT(w, "}");
    } else {
        PUT(w, "null");
    }
    PUT(w, ",\"incomplete_details\":");
    if (r->incomplete) {
        PUT(w, "{\"reason\":\"");
        put(w, r->incomplete, strlen(r->incomplete));
        PUT(w, "\"}");
    } else {
        PUT(w, "null");
    }
    PUT(w, ",\"model\":\"");
    put_slice(w, r->model);
    PUT(w, "\",\"output\":[");
    put_slice(w, r->items);
    PUT(w, "],\"usage\":");
    if (r->have_usage) {
        PUT(w, "{\"input_tokens\":");
        put_u64(w, r->in_tokens);
        PUT(w, ",\"input_tokens_details\":{\"cached_tokens\":");
        put_u64(w, r->cached_tokens);
        PUT(w, "},\"output_tokens\":");
        put_u64(w, r->out_tokens);
        PUT(w, ",\"output_tokens_details\":{\"reasoning_tokens\":");
        put_u64(w, r->reasoning_tokens);
        PUT(w, "},\"total_tokens\":");
        put_u64(w, r->total_tokens ? r->total_tokens : r->in_tokens + r->out_tokens);
        PUT(w, "}");
    } else {
        PUT(w, "null");
    }
    put_echo(w, echo);
    PUT(w, "}");
}

/* The conversation after the answer: conv's elements, then the turn. */
static void put_conv(w_t *w, vsr_slice_t conv, vsr_slice_t turn)
{
    vsr_slice_t e = vsr_slice_trim(conv);
    PUT(w, "[");
    int any = 0;
    if (e.len > 2 && e.p[0] == '[' && e.p[e.len - 1] == ']') {
        vsr_slice_t body = vsr_slice_trim(vsr_slice(e.p + 1, e.len - 2));
        if (body.len) {
            put_slice(w, body);
            any = 1;
        }
    }
    if (turn.len) {
        if (any)
            PUT(w, ",");
        put_slice(w, turn);
    }
    PUT(w, "]");
}

static const char *incomplete_of(const char *finish)
{
    if (finish == NULL)
        return NULL;
    if (strcmp(finish, "length") == 0)
        return "max_output_tokens";
    if (strcmp(finish, "content_filter") == 0)
        return "content_filter";
    return NULL;
}

static const char *finish_of(const cx_t *c, uint32_t fr)
{
    if (str_is(c, fr, "length"))
        return "length";
    if (str_is(c, fr, "content_filter"))
        return "content_filter";
    if (str_is(c, fr, "tool_calls") || str_is(c, fr, "function_call"))
        return "tool_calls";
    return "stop";
}

static void usage_of(const cx_t *c, uint32_t usage, resp_t *r)
{
    if (!is(c, usage, VSR_JSON_OBJECT))
        return;
    r->have_usage = 1;
    r->in_tokens = count_of(c, get(c, usage, "prompt_tokens"));
    r->out_tokens = count_of(c, get(c, usage, "completion_tokens"));
    r->total_tokens = count_of(c, get(c, usage, "total_tokens"));
    r->cached_tokens = count_of(c, get(c, get(c, usage, "prompt_tokens_details"), "cached_tokens"));
    r->reasoning_tokens = count_of(c, get(c, get(c, usage, "completion_tokens_details"), "reasoning_tokens"));
}

static int from_chat(cx_t *c, const vsr_responses_meta_t *meta, vsr_buf_t *conv)
{
    uint32_t choices = get(c, 0, "choices");
    if (!is(c, choices, VSR_JSON_ARRAY) || count(c, choices) == 0)
        return upstream(c, "The upstream answer has no choices.");
    uint32_t ch = choices + 1;
    uint32_t msg = get(c, ch, "message");
    if (!is(c, ch, VSR_JSON_OBJECT) || !is(c, msg, VSR_JSON_OBJECT))
        return upstream(c, "The upstream answer has no choices[0].message.");
    const char *finish = finish_of(c, get(c, ch, "finish_reason"));
    resp_t r = {.status = incomplete_of(finish) ? "incomplete" : "completed", .incomplete = incomplete_of(finish)};
    uint32_t model = get(c, 0, "model");
    r.model = is(c, model, VSR_JSON_STRING) ? inner(c, model) : VSR_SLICE_NULL;
    vsr_buf_t mb;
    vsr_buf_init(&mb, 0);
    if (!is(c, model, VSR_JSON_STRING)) {
        w_t mw = {&mb, VSR_OK};
        put_str(&mw, meta->model);
        r.model = mb.len >= 2 ? vsr_slice(mb.data + 1, mb.len - 2) : VSR_SLICE_NULL;
    }
    usage_of(c, get(c, 0, "usage"), &r);

    vsr_buf_t items, turn;
    vsr_buf_init(&items, c->w.b->cap);
    vsr_buf_init(&turn, conv ? conv->cap : 0);
    w_t iw = {&items, VSR_OK}, tw = {&turn, VSR_OK};
    uint32_t n = 0;
    uint32_t content = get(c, msg, "content"), refusal = get(c, msg, "refusal"), calls = get(c, msg, "tool_calls");
    int has_calls = is(c, calls, VSR_JSON_ARRAY) && count(c, calls) > 0;
    int rc = VSR_OK;
    PUT(&tw, "{\"role\":\"assistant\",\"content\":");
    /* the text: a string, or (some backends) text parts joined */
    vsr_buf_t tb;
    vsr_buf_init(&tb, c->w.b->cap);
    w_t tbw = {&tb, VSR_OK};
    if (is(c, content, VSR_JSON_ARRAY)) {
        PUT(&tbw, "\"");
        uint32_t p = content + 1;
        for (uint32_t k = 0, np = 0; k < count(c, content); k++, p = next_sib(c, p)) {
            uint32_t t = get(c, p, "text");
            if (!is(c, p, VSR_JSON_OBJECT) || !is(c, t, VSR_JSON_STRING) ||
                !(str_is(c, get(c, p, "type"), "text") || str_is(c, get(c, p, "type"), "output_text")))
                continue;
            if (np++)
                PUT(&tbw, "\\n");
            put_slice(&tbw, inner(c, t));
        }
        PUT(&tbw, "\"");
    } else if (is(c, content, VSR_JSON_STRING)) {
        put_slice(&tbw, vsr_json_raw(&c->j, content));
    }
    vsr_slice_t text = vsr_buf_slice(&tb);
    int has_text = text.len > 2;
    if (has_text || nonempty_str(c, refusal) || !has_calls) {
        PUT(&iw, "{\"id\":");
        put_item_id(&iw, "msg_", meta->id, n);
        PUT(&iw, ",\"type\":\"message\",\"status\":\"");
        put(&iw, r.status, strlen(r.status));
        PUT(&iw, "\",\"role\":\"assistant\",\"content\":[");
        int parts = 0;
        if (has_text) {
            PUT(&iw, "{\"type\":\"output_text\",\"text\":");
            put_slice(&iw, text);
            PUT(&iw, ",\"annotations\":[]}");
            put_slice(&tw, text);
            parts++;
        } else if (!nonempty_str(c, refusal)) {
            PUT(&iw, "{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}");
            if (has_calls)
                PUT(&tw, "null");
            else
                PUT(&tw, "\"\"");
            parts++;
        } else {
            PUT(&tw, "null");
        }
        if (nonempty_str(c, refusal)) {
            if (parts)
                PUT(&iw, ",");
            PUT(&iw, "{\"type\":\"refusal\",\"refusal\":");
            put_slice(&iw, vsr_json_raw(&c->j, refusal));
            PUT(&iw, "}");
            PUT(&tw, ",\"refusal\":");
            put_slice(&tw, vsr_json_raw(&c->j, refusal));
        }
        PUT(&iw, "]}");
        n++;
    } else {
        PUT(&tw, "null");
    }
    if (has_calls) {
        PUT(&tw, ",\"tool_calls\":[");
        uint32_t tc = calls + 1;
        for (uint32_t k = 0; k < count(c, calls) && rc == VSR_OK; k++, tc = next_sib(c, tc)) {
            if (n >= c->lim.max_items) {
                rc = upstream(c, "The upstream answer has more than %u output items.", c->lim.max_items);
                break;
            }
            uint32_t fn = get(c, tc, "function"), id = get(c, tc, "id");
            uint32_t name = get(c, fn, "name"), args = get(c, fn, "arguments");
            if (!is(c, tc, VSR_JSON_OBJECT) || !is(c, fn, VSR_JSON_OBJECT) || !is(c, name, VSR_JSON_STRING)) {
                rc = upstream(c, "The upstream answer's tool call %u has no function name.", k);
                break;
            }
            if (n)
                PUT(&iw, ",");
            if (k)
                PUT(&tw, ",");
            PUT(&iw, "{\"id\":");
            put_item_id(&iw, "fc_", meta->id, n);
            PUT(&iw, ",\"type\":\"function_call\",\"status\":\"completed\",\"call_id\":");
            PUT(&tw, "{\"id\":");
            if (is(c, id, VSR_JSON_STRING)) {
                put_slice(&iw, vsr_json_raw(&c->j, id));
                put_slice(&tw, vsr_json_raw(&c->j, id));
            } else {
                put_item_id(&iw, "call_", meta->id, n);
                put_item_id(&tw, "call_", meta->id, n);
            }
            PUT(&iw, ",\"name\":");
            put_slice(&iw, vsr_json_raw(&c->j, name));
            PUT(&iw, ",\"arguments\":");
            PUT(&tw, ",\"type\":\"function\",\"function\":{\"name\":");
            put_slice(&tw, vsr_json_raw(&c->j, name));
            PUT(&tw, ",\"arguments\":");
            if (is(c, args, VSR_JSON_STRING)) {
                put_slice(&iw, vsr_json_raw(&c->j, args));
                put_slice(&tw, vsr_json_raw(&c->j, args));
            } else if (is(c, args, VSR_JSON_OBJECT)) { /* some backends send an object */
                put_str(&iw, vsr_json_raw(&c->j, args));
                put_str(&tw, vsr_json_raw(&c->j, args));
            } else {
                PUT(&iw, "\"\"");
                PUT(&tw, "\"\"");
            }
            PUT(&iw, "}");
            PUT(&tw, "}}");
            n++;
        }
        PUT(&tw, "]");
    }
    PUT(&tw, "}");
    if (rc == VSR_OK && (iw.rc != VSR_OK || tw.rc != VSR_OK || tbw.rc != VSR_OK))
        rc = big(c, NULL, "The translated answer is larger than the output limit.");
    if (rc == VSR_OK) {
        r.items = vsr_buf_slice(&items);
        put_response(&c->w, meta->id, meta->created_at, meta->echo, &r);
        if (conv) {
            w_t cw = {conv, VSR_OK};
            put_conv(&cw, meta->conv, vsr_buf_slice(&turn));
            if (cw.rc != VSR_OK && c->w.rc == VSR_OK)
                c->w.rc = cw.rc;
        }
    }
    vsr_buf_free(&items);
    vsr_buf_free(&turn);
    vsr_buf_free(&mb);
    vsr_buf_free(&tb);
    return rc;
}

int vsr_responses_response_from_chat(const char *body, size_t len, const vsr_responses_meta_t *meta,
                                     const vsr_responses_limits_t *lim, vsr_buf_t *out, vsr_buf_t *conv,
                                     vsr_responses_error_t *err)
{
    cx_t c;
    int rc = cx_open(&c, body, len, lim, out, err, 1);
    if (rc == VSR_ERR_INVALID) {
        /* an answer that does not parse is the upstream's fault */
        c.err->status = 502;
        c.err->type = "server_error";
        c.err->param[0] = '\0';
        snprintf(c.err->message, sizeof(c.err->message), "The upstream answer is not a JSON object.");
    } else if (rc == VSR_OK) {
        rc = from_chat(&c, meta, conv);
    }
    return cx_close(&c, rc);
}

/* ---- streams ------------------------------------------------------------------ *
 * SSE framing is proto/sse.h's, as in anthropic.c: lines end in LF, CR or
 * CRLF; "data:" lines accumulate, an empty line dispatches; a partial event
 * at the end is dropped.  Each event's data is one JSON document or [DONE]. */

enum { OPEN_NONE = 0, OPEN_MSG, OPEN_CALL };

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id);
static const vsr_sse_callbacks_t sse_cb = {on_event};

void vsr_responses_stream_init(vsr_responses_stream_t *s, const vsr_responses_meta_t *meta,
                               const vsr_responses_limits_t *lim)
{
    memset(s, 0, sizeof(*s));
    limits_fill(&s->lim, lim);
    size_t mo = s->lim.max_output;
    vsr_sse_init(&s->sse, s->lim.max_event, &sse_cb, s);
    vsr_buf_init(&s->id, 0);
    vsr_buf_init(&s->model, 0);
    vsr_buf_init(&s->echo, 0);
    vsr_buf_init(&s->conv_in, 0);
    vsr_buf_init(&s->text, mo);
    vsr_buf_init(&s->args, mo);
    vsr_buf_init(&s->call_id, 1024);
    vsr_buf_init(&s->call_name, 1024);
    vsr_buf_init(&s->items, mo);
    vsr_buf_init(&s->calls, mo);
    vsr_buf_init(&s->turn_text, mo);
    vsr_buf_init(&s->refusal, mo);
    vsr_buf_init(&s->turn_refusal, mo);
    s->text_part = s->refusal_part = -1;
    vsr_buf_init(&s->final, 0);
    vsr_buf_init(&s->conv, 0);
    s->created_at = meta->created_at;
    vsr_buf_append_slice(&s->id, meta->id);
    vsr_buf_append_json_string(&s->model, meta->model); /* kept as a raw string body */
    vsr_buf_consume(&s->model, 1);
    s->model.len--;
    w_t ew = {&s->echo, VSR_OK};
    put_compact(&ew, meta->echo); /* events are one line each */
    vsr_buf_append_slice(&s->conv_in, meta->conv);
    s->cur_tool = -1;
}

void vsr_responses_stream_free(vsr_responses_stream_t *s)
{
    vsr_sse_free(&s->sse);
    vsr_buf_t *all[] = {&s->id, &s->model, &s->echo, &s->conv_in, &s->text, &s->args,
                        &s->call_id, &s->call_name, &s->items, &s->calls, &s->turn_text, &s->refusal, &s->turn_refusal, &s->final, &s->conv};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        vsr_buf_free(all[i]);
}

static vsr_slice_t s_id(const vsr_responses_stream_t *s)
{
    return vsr_buf_slice(&s->id);
}

/* "event: T\ndata: {"type":"T","sequence_number":N" */
static void ev_open(vsr_responses_stream_t *s, w_t *w, const char *type)
{
    size_t n = strlen(type);
    PUT(w, "event: ");
    put(w, type, n);
    PUT(w, "\ndata: {\"type\":\"");
    put(w, type, n);
    PUT(w, "\",\"sequence_number\":");
    put_u64(w, s->seq++);
}

static void ev_close(w_t *w)
{
    PUT(w, "}\n\n");
}

/* ,"item_id":..,"output_index":N */
static void ev_item_ref(vsr_responses_stream_t *s, w_t *w, const char *prefix)
{
    PUT(w, ",\"item_id\":");
    put_item_id(w, prefix, s_id(s), s->n_items);
    PUT(w, ",\"output_index\":");
    put_u64(w, s->n_items);
}

static void snapshot(vsr_responses_stream_t *s, w_t *w, const char *status, vsr_slice_t error_msg)
{
    resp_t r = {.status = status, .incomplete = strcmp(status, "incomplete") == 0 ? incomplete_of(s->finish) : NULL,
                .error_msg = error_msg, .model = vsr_buf_slice(&s->model),
                .items = strcmp(status, "in_progress") == 0 ? VSR_SLICE_NULL : vsr_buf_slice(&s->items),
                .have_usage = s->have_usage && strcmp(status, "in_progress") != 0, .in_tokens = s->in_tokens,
                .out_tokens = s->out_tokens, .total_tokens = s->total_tokens, .cached_tokens = s->cached_tokens,
                .reasoning_tokens = s->reasoning_tokens};
    put_response(w, s_id(s), s->created_at, vsr_buf_slice(&s->echo), &r);
}

static void ev_start(vsr_responses_stream_t *s, w_t *w)
{
    ev_open(s, w, "response.created");
    PUT(w, ",\"response\":");
    snapshot(s, w, "in_progress", VSR_SLICE_NULL);
    ev_close(w);
    ev_open(s, w, "response.in_progress");
    PUT(w, ",\"response\":");
    snapshot(s, w, "in_progress", VSR_SLICE_NULL);
    ev_close(w);
    s->state = ST_OPEN;
}

/* Fails the stream: response.failed with the items finished so far. */
static int stream_fail(void *ud, w_t *w, int rc, const char *message)
{
    vsr_responses_stream_t *s = ud;
    if (s->state == ST_START && w->rc == VSR_OK)
        ev_start(s, w);
    vsr_buf_reset(&s->final);
    w_t fw = {&s->final, VSR_OK};
    snapshot(s, &fw, "failed", vsr_slice_cstr(message));
    ev_open(s, w, "response.failed");
    PUT(w, ",\"response\":");
    put_slice(w, vsr_buf_slice(&s->final));
    ev_close(w);
    vsr_buf_reset(&s->conv);
    s->state = ST_FAILED;
    return rc;
}

static void part_json(vsr_responses_stream_t *s, w_t *w, int refusal)
{
    if (refusal) {
        PUT(w, "{\"type\":\"refusal\",\"refusal\":\"");
        put_slice(w, vsr_buf_slice(&s->refusal));
        PUT(w, "\"}");
    } else {
        PUT(w, "{\"type\":\"output_text\",\"text\":\"");
        put_slice(w, vsr_buf_slice(&s->text));
        PUT(w, "\",\"annotations\":[]}");
    }
}

static void msg_item(vsr_responses_stream_t *s, w_t *w, const char *status, int with_parts)
{
    PUT(w, "{\"id\":");
    put_item_id(w, "msg_", s_id(s), s->n_items);
    PUT(w, ",\"type\":\"message\",\"status\":\"");
    put(w, status, strlen(status));
    PUT(w, "\",\"role\":\"assistant\",\"content\":[");
    for (int k = 0; with_parts && k < 2; k++) {
        if (k && s->text_part >= 0 && s->refusal_part >= 0)
            PUT(w, ",");
        if (s->text_part == k)
            part_json(s, w, 0);
        else if (s->refusal_part == k)
            part_json(s, w, 1);
    }
    PUT(w, "]}");
}

static void call_item(vsr_responses_stream_t *s, w_t *w, const char *status, int with_args)
{
    PUT(w, "{\"id\":");
    put_item_id(w, "fc_", s_id(s), s->n_items);
    PUT(w, ",\"type\":\"function_call\",\"status\":\"");
    put(w, status, strlen(status));
    PUT(w, "\",\"call_id\":");
    put_slice(w, vsr_buf_slice(&s->call_id));
    PUT(w, ",\"name\":");
    put_slice(w, vsr_buf_slice(&s->call_name));
    PUT(w, ",\"arguments\":\"");
    if (with_args)
        put_slice(w, vsr_buf_slice(&s->args));
    PUT(w, "\"}");
}

static int too_much(vsr_responses_stream_t *s, w_t *w)
{
    return stream_fail(s, w, VSR_ERR_TOO_BIG, "upstream answer is larger than the limit");
}

/* Opens the message's text or refusal part (content_index: the parts
 * opened before it). */
static void part_open(vsr_responses_stream_t *s, w_t *w, int refusal)
{
    int *part = refusal ? &s->refusal_part : &s->text_part;
    if (*part >= 0)
        return;
    *part = (s->text_part >= 0) + (s->refusal_part >= 0);
    ev_open(s, w, "response.content_part.added");
    ev_item_ref(s, w, "msg_");
    PUT(w, ",\"content_index\":");
    put_u64(w, (uint64_t)*part);
    PUT(w, ",\"part\":");
    if (refusal)
        PUT(w, "{\"type\":\"refusal\",\"refusal\":\"\"}");
    else
        PUT(w, "{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}");
    ev_close(w);
}

/* Closes the open item: its done events, and the item into s->items. */
static int item_close(vsr_responses_stream_t *s, w_t *w)
{
    if (s->open == OPEN_NONE)
        return VSR_OK;
    const char *status = incomplete_of(s->finish) ? "incomplete" : "completed";
    w_t iw = {&s->items, VSR_OK};
    if (s->n_items)
        PUT(&iw, ",");
    if (s->open == OPEN_MSG) {
        if (s->text_part < 0 && s->refusal_part < 0)
            part_open(s, w, 0); /* an empty message still has its text part */
        for (int k = 0; k < 2; k++) {
            int refusal = s->refusal_part == k;
            if (!refusal && s->text_part != k)
                continue;
            vsr_slice_t body = vsr_buf_slice(refusal ? &s->refusal : &s->text);
            ev_open(s, w, refusal ? "response.refusal.done" : "response.output_text.done");
            ev_item_ref(s, w, "msg_");
            PUT(w, ",\"content_index\":");
            put_u64(w, (uint64_t)k);
            if (refusal)
                PUT(w, ",\"refusal\":\"");
            else
                PUT(w, ",\"text\":\"");
            put_slice(w, body);
            if (refusal)
                PUT(w, "\"");
            else
                PUT(w, "\",\"logprobs\":[]");
            ev_close(w);
            ev_open(s, w, "response.content_part.done");
            ev_item_ref(s, w, "msg_");
            PUT(w, ",\"content_index\":");
            put_u64(w, (uint64_t)k);
            PUT(w, ",\"part\":");
            part_json(s, w, refusal);
            ev_close(w);
        }
        ev_open(s, w, "response.output_item.done");
        PUT(w, ",\"output_index\":");
        put_u64(w, s->n_items);
        PUT(w, ",\"item\":");
        msg_item(s, w, status, 1);
        ev_close(w);
        msg_item(s, &iw, status, 1);
        if (vsr_buf_append_slice(&s->turn_text, vsr_buf_slice(&s->text)) != VSR_OK ||
            vsr_buf_append_slice(&s->turn_refusal, vsr_buf_slice(&s->refusal)) != VSR_OK)
            iw.rc = VSR_ERR_TOO_BIG;
        vsr_buf_reset(&s->text);
        vsr_buf_reset(&s->refusal);
    } else {
        ev_open(s, w, "response.function_call_arguments.done");
        ev_item_ref(s, w, "fc_");
        PUT(w, ",\"name\":");
        put_slice(w, vsr_buf_slice(&s->call_name));
        PUT(w, ",\"arguments\":\"");
        put_slice(w, vsr_buf_slice(&s->args));
        PUT(w, "\"");
        ev_close(w);
        ev_open(s, w, "response.output_item.done");
        PUT(w, ",\"output_index\":");
        put_u64(w, s->n_items);
        PUT(w, ",\"item\":");
        call_item(s, w, "completed", 1);
        ev_close(w);
        call_item(s, &iw, "completed", 1);
        w_t cw = {&s->calls, VSR_OK};
        if (s->calls.len)
            PUT(&cw, ",");
        PUT(&cw, "{\"id\":");
        put_slice(&cw, vsr_buf_slice(&s->call_id));
        PUT(&cw, ",\"type\":\"function\",\"function\":{\"name\":");
        put_slice(&cw, vsr_buf_slice(&s->call_name));
        PUT(&cw, ",\"arguments\":\"");
        put_slice(&cw, vsr_buf_slice(&s->args));
        PUT(&cw, "\"}}");
        if (cw.rc != VSR_OK)
            iw.rc = cw.rc;
        vsr_buf_reset(&s->args);
    }
    s->open = OPEN_NONE;
    s->n_items++;
    if (iw.rc != VSR_OK)
        return too_much(s, w);
    return VSR_OK;
}

static int msg_open(vsr_responses_stream_t *s, w_t *w)
{
    if (s->open == OPEN_MSG)
        return VSR_OK;
    if (item_close(s, w) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    if (s->n_items >= s->lim.max_items)
        return stream_fail(s, w, VSR_ERR_TOO_BIG, "upstream answer has too many output items");
    ev_open(s, w, "response.output_item.added");
    PUT(w, ",\"output_index\":");
    put_u64(w, s->n_items);
    PUT(w, ",\"item\":");
    msg_item(s, w, "in_progress", 0);
    ev_close(w);
    s->text_part = s->refusal_part = -1;
    s->open = OPEN_MSG;
    return VSR_OK;
}

static void stream_end(vsr_responses_stream_t *s, w_t *w)
{
    if (s->state == ST_START)
        ev_start(s, w);
    if (s->n_items == 0 && s->open == OPEN_NONE && msg_open(s, w) != VSR_OK)
        return;
    if (item_close(s, w) != VSR_OK)
        return;
    const char *status = incomplete_of(s->finish) ? "incomplete" : "completed";
    vsr_buf_reset(&s->final);
    w_t fw = {&s->final, VSR_OK};
    snapshot(s, &fw, status, VSR_SLICE_NULL);
    ev_open(s, w, strcmp(status, "completed") == 0 ? "response.completed" : "response.incomplete");
    PUT(w, ",\"response\":");
    put_slice(w, vsr_buf_slice(&s->final));
    ev_close(w);
    /* the conversation: meta's, then the assistant's turn */
    vsr_buf_t turn;
    vsr_buf_init(&turn, 0);
    w_t tw = {&turn, VSR_OK};
    PUT(&tw, "{\"role\":\"assistant\",\"content\":");
    if (s->turn_text.len || (s->calls.len == 0 && s->turn_refusal.len == 0)) {
        PUT(&tw, "\"");
        put_slice(&tw, vsr_buf_slice(&s->turn_text));
        PUT(&tw, "\"");
    } else {
        PUT(&tw, "null");
    }
    if (s->turn_refusal.len) {
        PUT(&tw, ",\"refusal\":\"");
        put_slice(&tw, vsr_buf_slice(&s->turn_refusal));
        PUT(&tw, "\"");
    }
    if (s->calls.len) {
        PUT(&tw, ",\"tool_calls\":[");
        put_slice(&tw, vsr_buf_slice(&s->calls));
        PUT(&tw, "]");
    }
    PUT(&tw, "}");
    vsr_buf_reset(&s->conv);
    w_t cw = {&s->conv, VSR_OK};
    put_conv(&cw, vsr_buf_slice(&s->conv_in), vsr_buf_slice(&turn));
    vsr_buf_free(&turn);
    s->state = ST_DONE;
}

/* Keeps a raw JSON string token (call id, name) in b when it fits. */
static int keep_str(vsr_buf_t *b, const cx_t *c, uint32_t t)
{
    vsr_buf_reset(b);
    return vsr_buf_append_slice(b, vsr_json_raw(&c->j, t));
}

static int chunk(vsr_responses_stream_t *s, cx_t *c)
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
        uint32_t model = get(c, 0, "model");
        if (nonempty_str(c, model)) {
            vsr_buf_reset(&s->model);
            vsr_buf_append_slice(&s->model, inner(c, model));
        }
        ev_start(s, w);
    }
    uint32_t usage = get(c, 0, "usage");
    if (is(c, usage, VSR_JSON_OBJECT)) {
        resp_t r = {0};
        usage_of(c, usage, &r);
        s->have_usage = 1;
        s->in_tokens = r.in_tokens, s->out_tokens = r.out_tokens, s->total_tokens = r.total_tokens;
        s->cached_tokens = r.cached_tokens, s->reasoning_tokens = r.reasoning_tokens;
    }
    uint32_t choices = get(c, 0, "choices");
    if (!is(c, choices, VSR_JSON_ARRAY) || count(c, choices) == 0)
        return VSR_OK;
    uint32_t ch = choices + 1;
    uint32_t idx = get(c, ch, "index");
    if (idx != 0 && int_of(c, idx) != 0)
        return VSR_OK; /* only choice 0 */
    uint32_t delta = get(c, ch, "delta");
    uint32_t content = get(c, delta, "content");
    uint32_t refusal = get(c, delta, "refusal");
    for (int r = 0; r < 2; r++) {
        uint32_t t = r ? refusal : content;
        if (!nonempty_str(c, t))
            continue;
        if (msg_open(s, w) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        part_open(s, w, r);
        if (vsr_buf_append_slice(r ? &s->refusal : &s->text, inner(c, t)) != VSR_OK)
            return too_much(s, w);
        ev_open(s, w, r ? "response.refusal.delta" : "response.output_text.delta");
        ev_item_ref(s, w, "msg_");
        PUT(w, ",\"content_index\":");
        put_u64(w, (uint64_t)(r ? s->refusal_part : s->text_part));
        PUT(w, ",\"delta\":");
        raw(c, t);
        if (!r)
            PUT(w, ",\"logprobs\":[]");
        ev_close(w);
    }
    uint32_t calls = get(c, delta, "tool_calls");
    if (is(c, calls, VSR_JSON_ARRAY)) {
        uint32_t tc = calls + 1;
        for (uint32_t k = 0; k < count(c, calls); k++, tc = next_sib(c, tc)) {
            uint32_t it = get(c, tc, "index"), fn = get(c, tc, "function");
            int64_t ti = it ? int_of(c, it) : 0;
            if (ti < 0)
                return stream_fail(s, w, VSR_ERR_INVALID, "upstream sent a tool call without a valid index");
            if (ti != s->cur_tool || s->open != OPEN_CALL) {
                if (ti <= s->cur_tool)
                    return stream_fail(s, w, VSR_ERR_INVALID, "upstream interleaved its tool calls");
                if (item_close(s, w) != VSR_OK)
                    return VSR_ERR_TOO_BIG;
                if (s->n_items >= s->lim.max_items)
                    return stream_fail(s, w, VSR_ERR_TOO_BIG, "upstream answer has too many output items");
                uint32_t id = get(c, tc, "id"), name = get(c, fn, "name");
                int rc = VSR_OK;
                if (is(c, id, VSR_JSON_STRING)) {
                    rc = keep_str(&s->call_id, c, id);
                } else {
                    vsr_buf_reset(&s->call_id);
                    w_t iw = {&s->call_id, VSR_OK};
                    put_item_id(&iw, "call_", s_id(s), s->n_items);
                    rc = iw.rc;
                }
                if (rc == VSR_OK) {
                    if (is(c, name, VSR_JSON_STRING)) {
                        rc = keep_str(&s->call_name, c, name);
                    } else {
                        vsr_buf_reset(&s->call_name);
                        rc = vsr_buf_append(&s->call_name, "\"\"", 2);
                    }
                }
                if (rc != VSR_OK)
                    return stream_fail(s, w, VSR_ERR_TOO_BIG, "upstream sent a tool call id or name too long");
                s->cur_tool = ti;
                s->open = OPEN_CALL;
                ev_open(s, w, "response.output_item.added");
                PUT(w, ",\"output_index\":");
                put_u64(w, s->n_items);
                PUT(w, ",\"item\":");
                call_item(s, w, "in_progress", 0);
                ev_close(w);
            }
            uint32_t args = get(c, fn, "arguments");
            if (nonempty_str(c, args)) {
                if (vsr_buf_append_slice(&s->args, inner(c, args)) != VSR_OK)
                    return too_much(s, w);
                ev_open(s, w, "response.function_call_arguments.delta");
                ev_item_ref(s, w, "fc_");
                PUT(w, ",\"delta\":");
                raw(c, args);
                ev_close(w);
            }
        }
    }
    uint32_t fr = get(c, ch, "finish_reason");
    if (is(c, fr, VSR_JSON_STRING))
        s->finish = finish_of(c, fr);
    return VSR_OK;
}

static int dispatch(void *ud, vsr_slice_t data, vsr_buf_t *out)
{
    vsr_responses_stream_t *s = ud;
    vsr_slice_t d = event_data(data);
    w_t w = {out, VSR_OK};
    if (d.len == 0)
        return VSR_OK;
    if (vsr_slice_eq_cstr(d, "[DONE]")) {
        int rc = VSR_OK;
        if (s->finish == NULL)
            rc = stream_fail(s, &w, VSR_ERR_INVALID, "upstream stream ended before its end");
        else
            stream_end(s, &w);
        if (w.rc != VSR_OK) {
            s->state = ST_FAILED;
            return w.rc;
        }
        return s->state == ST_FAILED && rc == VSR_OK ? VSR_ERR_TOO_BIG : rc;
    }
    cx_t c;
    vsr_responses_limits_t lim = s->lim;
    lim.max_input = s->lim.max_event;
    int rc = cx_open(&c, d.p, d.len, &lim, out, NULL, 1);
    if (rc != VSR_OK || vsr_json_type(&c.j, 0) != VSR_JSON_OBJECT) {
        rc = stream_fail(s, &w, rc != VSR_OK ? rc : VSR_ERR_INVALID, "upstream sent an event that is not a JSON object");
    } else {
        rc = chunk(s, &c);
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
    vsr_responses_stream_t *s = ud;
    return stream_event(STREAM_CORE(s, stream_fail), data, dispatch);
}

int vsr_responses_stream_feed(vsr_responses_stream_t *s, const char *p, size_t n, vsr_buf_t *out)
{
    return stream_feed(STREAM_CORE(s, stream_fail), p, n, out);
}

/* The upstream's end was seen (its finish reason): the closing events, or
 * response.failed past the output limit (VSR_ERR_TOO_BIG). */
static int stream_end_seen(void *ud, w_t *w)
{
    vsr_responses_stream_t *s = ud;
    stream_end(s, w);
    if (w->rc != VSR_OK) {
        s->state = ST_FAILED;
        return w->rc;
    }
    return s->state == ST_DONE ? VSR_OK : VSR_ERR_TOO_BIG;
}

int vsr_responses_stream_finish(vsr_responses_stream_t *s, vsr_buf_t *out)
{
    return stream_finish(STREAM_CORE(s, stream_fail), out, s->finish != NULL, stream_end_seen);
}
