/*
 * chatview.c — what routing reads of an OpenAI chat / completions /
 * responses body, extracted once from the parsed tokens.  See json.h ("The
 * OpenAI request view") for the contract.
 *
 * Choices beyond the header, matching what the reference router accepts:
 *  - Chat: "messages" missing or null → "messages field is required"; any
 *    other non-array → "messages field must be an array".  messages[i] is
 *    element i of the array, always (a non-object element is kept as a
 *    role-OTHER message with no text), so plugins can address elements by
 *    index.
 *  - Content arrays: a part contributes text when its "type" is absent,
 *    "text", "input_text" or "output_text" and its "text" is a non-empty
 *    string; texts are joined with "\n".  "image_url" / "input_image" parts
 *    set has_image.  Parts are counted by modality (n_parts).  Content that is neither a string nor an array (null,
 *    absent, a number...) gives empty text.
 *  - tool_choice: a string is taken as is; an object (the named-function
 *    form, which forces a call) reads as "required".
 *  - Completions: "prompt" string → one user message; an array → its first
 *    element when that is a string, else empty text (token-id prompts carry
 *    no text); missing/null → "prompt field is required"; other types →
 *    "prompt field must be a string or an array".
 *  - Responses: "input" string → one user message; an array → one message
 *    per item that has a "role" (content string or parts), plus
 *    function_call items as assistant tool calls and function_call_output
 *    items as tool messages (text = "output" when a string); other items are
 *    skipped.  "instructions" (a string) → a system message first.
 *    missing/null → "input field is required"; other types → "input field
 *    must be a string or an array".
 */
#include "json/json.h"

static int get(const vsr_json_t *j, uint32_t obj, const char *key, uint32_t *v)
{
    return vsr_json_object_get(j, obj, key, v) == VSR_OK;
}

static int is_type(const vsr_json_t *j, uint32_t t, vsr_json_type_t type)
{
    return vsr_json_type(j, t) == type;
}

static vsr_role_t role_of(const vsr_json_t *j, uint32_t t)
{
    static const struct {
        const char *name;
        vsr_role_t role;
    } roles[] = {
        {"user", VSR_ROLE_USER},         {"assistant", VSR_ROLE_ASSISTANT}, {"system", VSR_ROLE_SYSTEM},
        {"developer", VSR_ROLE_DEVELOPER}, {"tool", VSR_ROLE_TOOL},
    };
    if (!is_type(j, t, VSR_JSON_STRING))
        return VSR_ROLE_OTHER;
    for (size_t i = 0; i < VSR_ARRAY_LEN(roles); i++)
        if (vsr_json_string_eq(j, t, vsr_slice_cstr(roles[i].name)))
            return roles[i].role;
    return VSR_ROLE_OTHER;
}

static int part_type_is(const vsr_json_t *j, uint32_t type_tok, const char *name)
{
    return vsr_json_string_eq(j, type_tok, vsr_slice_cstr(name));
}

static void count_part(vsr_chat_message_t *m, int modality)
{
    if (m->n_parts[modality] < UINT16_MAX)
        m->n_parts[modality]++;
}

/* Text of a content array: its text parts joined with "\n".  A single part
 * stays zero-copy when it has no escapes. */
static void parts_text(const vsr_json_t *j, uint32_t arr, vsr_pool_t *pool, vsr_chat_message_t *m)
{
    uint32_t n = j->toks[arr].count;
    uint32_t c = arr + 1;
    vsr_slice_t first = VSR_SLICE_NULL;
    size_t nparts = 0, total = 0;
    vsr_slice_t *parts = NULL;

    for (uint32_t i = 0; i < n; i++, c = j->toks[c].next) {
        if (!is_type(j, c, VSR_JSON_OBJECT))
            continue;
        uint32_t type_tok = 0, text_tok;
        int has_type = get(j, c, "type", &type_tok);
        if (has_type && (part_type_is(j, type_tok, "image_url") || part_type_is(j, type_tok, "input_image"))) {
            m->has_image = 1;
            count_part(m, VSR_MODALITY_IMAGE);
            continue;
        }
        int media = !has_type ? -1 : part_type_is(j, type_tok, "image") ? VSR_MODALITY_IMAGE
                                   : part_type_is(j, type_tok, "input_audio") || part_type_is(j, type_tok, "audio_url")
                                       ? VSR_MODALITY_AUDIO
                                   : part_type_is(j, type_tok, "video_url") || part_type_is(j, type_tok, "input_video")
                                       ? VSR_MODALITY_VIDEO
                                       : -1;
        if (media >= 0) {
            count_part(m, media);
            continue;
        }
        if (has_type && !part_type_is(j, type_tok, "text") && !part_type_is(j, type_tok, "input_text") &&
            !part_type_is(j, type_tok, "output_text"))
            continue;
        if (!get(j, c, "text", &text_tok) || !is_type(j, text_tok, VSR_JSON_STRING))
            continue;
        vsr_slice_t s;
        vsr_json_string(j, text_tok, pool, &s);
        if (s.len == 0)
            continue;
        count_part(m, VSR_MODALITY_TEXT);
        if (nparts == 1) {
            /* A second part: from here on collect them all.  At most one
             * slice per element, so n bounds the array. */
            parts = vsr_pool_alloc(pool, (size_t)n * sizeof(*parts));
            parts[0] = first;
        }
        if (nparts == 0)
            first = s;
        else
            parts[nparts] = s;
        nparts++;
        total += s.len;
    }
    if (nparts <= 1) {
        m->text = first;
        return;
    }
    total += nparts - 1;
    char *buf = vsr_pool_alloc(pool, total + 1);
    size_t w = 0;
    for (size_t i = 0; i < nparts; i++) {
        if (i)
            buf[w++] = '\n';
        memcpy(buf + w, parts[i].p, parts[i].len);
        w += parts[i].len;
    }
    buf[w] = '\0';
    m->text = vsr_slice(buf, w);
}

/* Fills text / has_image from a content value token (0 = absent). */
static void content_text(const vsr_json_t *j, uint32_t content, vsr_pool_t *pool, vsr_chat_message_t *m)
{
    m->content_tok = content;
    m->text = VSR_SLICE_NULL;
    if (content == 0)
        return;
    if (is_type(j, content, VSR_JSON_STRING)) {
        vsr_json_string(j, content, pool, &m->text);
        if (m->text.len > 0)
            count_part(m, VSR_MODALITY_TEXT);
    }
    else if (is_type(j, content, VSR_JSON_ARRAY))
        parts_text(j, content, pool, m);
}

/* A chat message or a responses message item: {role, content, tool_calls}. */
static void message_from_object(const vsr_json_t *j, uint32_t obj, vsr_pool_t *pool, vsr_chat_message_t *m)
{
    uint32_t v;
    m->tok = obj;
    m->role = get(j, obj, "role", &v) ? role_of(j, v) : VSR_ROLE_OTHER;
    content_text(j, get(j, obj, "content", &v) ? v : 0, pool, m);
    if (m->role == VSR_ROLE_ASSISTANT && get(j, obj, "tool_calls", &v) && is_type(j, v, VSR_JSON_ARRAY) &&
        j->toks[v].count > 0)
        m->has_tool_calls = 1;
}

static vsr_chat_message_t *alloc_messages(vsr_pool_t *pool, size_t n)
{
    if (n == 0)
        return NULL;
    vsr_chat_message_t *m = vsr_pool_alloc(pool, n * sizeof(*m));
    memset(m, 0, n * sizeof(*m));
    return m;
}

static int build_chat(const vsr_json_t *j, vsr_pool_t *pool, vsr_chat_view_t *out, const char **why)
{
    uint32_t arr;
    if (!get(j, 0, "messages", &arr) || is_type(j, arr, VSR_JSON_NULL)) {
        *why = "messages field is required";
        return VSR_ERR_INVALID;
    }
    if (!is_type(j, arr, VSR_JSON_ARRAY)) {
        *why = "messages field must be an array";
        return VSR_ERR_INVALID;
    }
    out->messages_tok = arr;
    uint32_t n = j->toks[arr].count;
    out->messages = alloc_messages(pool, n);
    uint32_t c = arr + 1;
    for (uint32_t i = 0; i < n; i++, c = j->toks[c].next) {
        vsr_chat_message_t *m = &out->messages[i];
        if (is_type(j, c, VSR_JSON_OBJECT)) {
            message_from_object(j, c, pool, m);
        } else {
            m->tok = c;
            m->role = VSR_ROLE_OTHER;
        }
    }
    out->n_messages = n;
    return VSR_OK;
}

static int build_completions(const vsr_json_t *j, vsr_pool_t *pool, vsr_chat_view_t *out, const char **why)
{
    uint32_t p;
    if (!get(j, 0, "prompt", &p) || is_type(j, p, VSR_JSON_NULL)) {
        *why = "prompt field is required";
        return VSR_ERR_INVALID;
    }
    uint32_t text_tok = 0;
    if (is_type(j, p, VSR_JSON_STRING))
        text_tok = p;
    else if (!is_type(j, p, VSR_JSON_ARRAY)) {
        *why = "prompt field must be a string or an array";
        return VSR_ERR_INVALID;
    } else if (j->toks[p].count > 0 && is_type(j, p + 1, VSR_JSON_STRING))
        text_tok = p + 1;
    out->messages = alloc_messages(pool, 1);
    out->n_messages = 1;
    out->messages[0].role = VSR_ROLE_USER;
    content_text(j, text_tok, pool, &out->messages[0]);
    return VSR_OK;
}

static int build_responses(const vsr_json_t *j, vsr_pool_t *pool, vsr_chat_view_t *out, const char **why)
{
    uint32_t in, instr;
    if (!get(j, 0, "input", &in) || is_type(j, in, VSR_JSON_NULL)) {
        *why = "input field is required";
        return VSR_ERR_INVALID;
    }
    int is_str = is_type(j, in, VSR_JSON_STRING);
    if (!is_str && !is_type(j, in, VSR_JSON_ARRAY)) {
        *why = "input field must be a string or an array";
        return VSR_ERR_INVALID;
    }
    int has_instr = get(j, 0, "instructions", &instr) && is_type(j, instr, VSR_JSON_STRING);
    size_t cap = (size_t)has_instr + (is_str ? 1 : j->toks[in].count);
    out->messages = alloc_messages(pool, cap);
    size_t n = 0;
    if (has_instr) {
        out->messages[n].role = VSR_ROLE_SYSTEM;
        content_text(j, instr, pool, &out->messages[n]);
        n++;
    }
    if (is_str) {
        out->messages[n].role = VSR_ROLE_USER;
        content_text(j, in, pool, &out->messages[n]);
        n++;
    } else {
        uint32_t c = in + 1;
        for (uint32_t i = 0; i < j->toks[in].count; i++, c = j->toks[c].next) {
            if (!is_type(j, c, VSR_JSON_OBJECT))
                continue;
            vsr_chat_message_t *m = &out->messages[n];
            uint32_t v;
            if (get(j, c, "role", &v)) {
                message_from_object(j, c, pool, m);
                n++;
            } else if (get(j, c, "type", &v) && part_type_is(j, v, "function_call")) {
                m->tok = c;
                m->role = VSR_ROLE_ASSISTANT;
                m->has_tool_calls = 1;
                n++;
            } else if (get(j, c, "type", &v) && part_type_is(j, v, "function_call_output")) {
                m->tok = c;
                m->role = VSR_ROLE_TOOL;
                uint32_t o;
                if (get(j, c, "output", &o) && is_type(j, o, VSR_JSON_STRING))
                    content_text(j, o, pool, m);
                n++;
            }
        }
    }
    out->n_messages = n;
    return VSR_OK;
}

int vsr_chat_view_build(const vsr_json_t *j, vsr_api_kind_t api, vsr_pool_t *pool, vsr_chat_view_t *out,
                        const char **why)
{
    const char *dummy;
    if (why == NULL)
        why = &dummy;
    *why = NULL;
    memset(out, 0, sizeof(*out));
    out->api = api;
    out->last_user = -1;
    if (j->toks == NULL || j->ntoks == 0 || !is_type(j, 0, VSR_JSON_OBJECT)) {
        *why = "request body must be a JSON object";
        return VSR_ERR_INVALID;
    }

    int rc;
    switch (api) {
    case VSR_API_CHAT:
        rc = build_chat(j, pool, out, why);
        break;
    case VSR_API_COMPLETIONS:
        rc = build_completions(j, pool, out, why);
        break;
    case VSR_API_RESPONSES:
        rc = build_responses(j, pool, out, why);
        break;
    default:
        *why = "unknown API";
        rc = VSR_ERR_INVALID;
        break;
    }
    if (rc != VSR_OK)
        return rc;

    for (size_t i = 0; i < out->n_messages; i++) {
        out->text_bytes += out->messages[i].text.len;
        if (out->messages[i].role == VSR_ROLE_USER && i <= (size_t)INT32_MAX)
            out->last_user = (int)i;
    }

    uint32_t v;
    if (get(j, 0, "tools", &v) && is_type(j, v, VSR_JSON_ARRAY))
        out->n_tools = j->toks[v].count;
    if (get(j, 0, "tool_choice", &v)) {
        if (is_type(j, v, VSR_JSON_STRING))
            vsr_json_string(j, v, pool, &out->tool_choice);
        else if (is_type(j, v, VSR_JSON_OBJECT))
            out->tool_choice = VSR_SLICE_LIT("required");
    }
    if (get(j, 0, "stream", &v) && is_type(j, v, VSR_JSON_TRUE))
        out->stream = 1;
    if (get(j, 0, "metadata", &v) && is_type(j, v, VSR_JSON_OBJECT))
        out->metadata = vsr_json_raw(j, v);
    return VSR_OK;
}
