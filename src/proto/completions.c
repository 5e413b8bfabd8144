/*
 * completions.c — OpenAI's Completions API (POST /v1/completions) <-> chat
 * completions, for a model that does not serve Completions itself: a model
 * of api_format anthropic gets completions → chat → Messages, this codec
 * composed with anthropic.c, and its answer back the other way.  See json.h
 * ("Completions") for the contracts.
 *
 * Request → chat: prompt (a string, or a list of one string) → one user
 * message; max_tokens, temperature, top_p, stop, stream, stream_options, n,
 * user, seed, presence_penalty, frequency_penalty, logit_bias copied (what
 * Messages has no room for is dropped by the next codec); refused, having
 * no chat form: several prompts, token-id prompts, echo true, a non-empty
 * suffix, best_of other than 1, logprobs; every other field is dropped.
 * Chat answer → text_completion: choice 0's content as its text (null or
 * parts → ""), finish_reason, id, created, model and usage copied, logprobs
 * null.
 * Stream: each chat.completion.chunk event → a text_completion chunk (the
 * delta's content as text; a chunk with no text, no finish_reason and no
 * usage, such as the first one carrying the role, is dropped); [DONE] and
 * error events (any other JSON object) pass as they are, data that is not
 * JSON is dropped.  Events are read whole, whatever the cut
 * of the input.
 */
#include "proto/completions.h"

#include <stdarg.h>
#include <stdio.h>

#include "json/json.h"
#include "proto/proto-int.h"
#include "proto/anthropic.h"

typedef struct {
    vsr_json_t j;
    w_t w;
} cm_t;

static int refuse(char *err, size_t err_len, const char *fmt, ...) VSR_PRINTF(3, 4);
static int refuse(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return VSR_ERR_INVALID;
}

int vsr_completions_request_to_chat(const char *body, size_t len, vsr_buf_t *out, char *err, size_t err_len)
{
    cm_t c = {.w = {out, VSR_OK}};
    int rc = vsr_json_parse(&c.j, body, len, NULL);
    if (rc != VSR_OK || vsr_json_type(&c.j, 0) != VSR_JSON_OBJECT) {
        vsr_json_free(&c.j);
        return refuse(err, err_len, "malformed JSON body");
    }
    uint32_t model = get(&c, 0, "model"), prompt = get(&c, 0, "prompt");
    if (is(&c, prompt, VSR_JSON_ARRAY) && c.j.toks[prompt].count == 1 && is(&c, prompt + 1, VSR_JSON_STRING))
        prompt = prompt + 1; /* a list of one prompt */
    uint32_t echo = get(&c, 0, "echo"), suffix = get(&c, 0, "suffix"), best_of = get(&c, 0, "best_of");
    double bo = 1;
    if (!is(&c, model, VSR_JSON_STRING))
        rc = refuse(err, err_len, "model: a string is required");
    else if (!is(&c, prompt, VSR_JSON_STRING))
        rc = refuse(err, err_len, "prompt: only one prompt, as a string, has a chat form");
    else if (is(&c, echo, VSR_JSON_TRUE))
        rc = refuse(err, err_len, "echo: has no chat form");
    else if (!absent(&c, suffix) && !(is(&c, suffix, VSR_JSON_STRING) && c.j.toks[suffix].end - c.j.toks[suffix].start == 2))
        rc = refuse(err, err_len, "suffix: has no chat form");
    else if (!absent(&c, best_of) && (vsr_json_number(&c.j, best_of, &bo) != VSR_OK || bo != 1))
        rc = refuse(err, err_len, "best_of: only 1 has a chat form");
    else if (!absent(&c, get(&c, 0, "logprobs")))
        rc = refuse(err, err_len, "logprobs: has no chat form");
    if (rc != VSR_OK) {
        vsr_json_free(&c.j);
        return VSR_ERR_INVALID;
    }
    PUT(&c.w, "{\"model\":");
    raw(&c, model);
    PUT(&c.w, ",\"messages\":[{\"role\":\"user\",\"content\":");
    raw(&c, prompt);
    PUT(&c.w, "}]");
    static const char *const COPIED[] = {"max_tokens", "temperature", "top_p", "stop", "stream", "stream_options",
                                         "n", "user", "seed", "presence_penalty", "frequency_penalty", "logit_bias"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(COPIED); i++) {
        uint32_t t = get(&c, 0, COPIED[i]);
        if (absent(&c, t))
            continue;
        PUT(&c.w, ",\"");
        put(&c.w, COPIED[i], strlen(COPIED[i]));
        PUT(&c.w, "\":");
        raw(&c, t);
    }
    PUT(&c.w, "}");
    vsr_json_free(&c.j);
    if (c.w.rc != VSR_OK)
        return refuse(err, err_len, "the translated body is larger than its limit");
    return VSR_OK;
}

/* One choice-0 object (a completion's or a chunk's) from a chat one; 0 when
 * a chunk's has nothing to say. */
static int choice(cm_t *c, uint32_t ch, const char *part, int chunk)
{
    uint32_t m = get(c, ch, part), text = get(c, m, "content"), fr = get(c, ch, "finish_reason");
    int has_text = is(c, text, VSR_JSON_STRING) && c->j.toks[text].end - c->j.toks[text].start > 2;
    if (chunk && !has_text && absent(c, fr))
        return 0;
    PUT(&c->w, "{\"index\":0,\"text\":");
    if (is(c, text, VSR_JSON_STRING))
        raw(c, text);
    else
        PUT(&c->w, "\"\"");
    PUT(&c->w, ",\"logprobs\":null,\"finish_reason\":");
    if (absent(c, fr))
        PUT(&c->w, "null");
    else
        raw(c, fr);
    PUT(&c->w, "}");
    return 1;
}

/* The fields around the choices: id, object, created, model. */
static void head(cm_t *c)
{
    static const char *const KEYS[] = {"id", "created", "model"};
    PUT(&c->w, "{\"object\":\"text_completion\"");
    for (size_t i = 0; i < VSR_ARRAY_LEN(KEYS); i++) {
        uint32_t t = get(c, 0, KEYS[i]);
        if (absent(c, t))
            continue;
        PUT(&c->w, ",\"");
        put(&c->w, KEYS[i], strlen(KEYS[i]));
        PUT(&c->w, "\":");
        raw(c, t);
    }
}

int vsr_completions_response_from_chat(const char *body, size_t len, vsr_buf_t *out)
{
    cm_t c = {.w = {out, VSR_OK}};
    int rc = vsr_json_parse(&c.j, body, len, NULL);
    uint32_t choices = rc == VSR_OK ? get(&c, 0, "choices") : 0;
    if (rc != VSR_OK || vsr_json_type(&c.j, 0) != VSR_JSON_OBJECT || !is(&c, choices, VSR_JSON_ARRAY) ||
        c.j.toks[choices].count == 0 || !is(&c, choices + 1, VSR_JSON_OBJECT)) {
        vsr_json_free(&c.j);
        return VSR_ERR_INVALID;
    }
    head(&c);
    PUT(&c.w, ",\"choices\":[");
    choice(&c, choices + 1, "message", 0);
    PUT(&c.w, "]");
    uint32_t usage = get(&c, 0, "usage");
    if (!absent(&c, usage)) {
        PUT(&c.w, ",\"usage\":");
        raw(&c, usage);
    }
    PUT(&c.w, "}");
    vsr_json_free(&c.j);
    return c.w.rc;
}

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id);
static const vsr_sse_callbacks_t sse_cb = {on_event};

void vsr_completions_stream_init(vsr_completions_stream_t *s)
{
    vsr_sse_init(&s->sse, VSR_ANTHROPIC_MAX_EVENT, &sse_cb, s);
    s->out = NULL;
    s->failed = 0;
}

void vsr_completions_stream_free(vsr_completions_stream_t *s)
{
    vsr_sse_free(&s->sse);
}

/* One event's data (a chunk, [DONE], an error) in the client's form. */
static int event(const char *p, size_t n, vsr_buf_t *out)
{
    vsr_slice_t data = vsr_slice_trim(vsr_slice(p, n));
    if (vsr_slice_eq_cstr(data, "[DONE]"))
        return vsr_buf_append_cstr(out, "data: [DONE]\n\n");
    cm_t c = {.w = {out, VSR_OK}};
    uint32_t choices = 0;
    int object = vsr_json_parse(&c.j, data.p, data.len, NULL) == VSR_OK && vsr_json_type(&c.j, 0) == VSR_JSON_OBJECT;
    if (!object || !is(&c, choices = get(&c, 0, "choices"), VSR_JSON_ARRAY)) {
        vsr_json_free(&c.j);
        if (object) { /* an error event: as it is */
            PUT(&c.w, "data: ");
            put(&c.w, data.p, data.len);
            PUT(&c.w, "\n\n");
        }
        return c.w.rc; /* not JSON: nothing a client could read */
    }
    uint32_t usage = get(&c, 0, "usage");
    size_t mark = out->len;
    PUT(&c.w, "data: ");
    head(&c);
    PUT(&c.w, ",\"choices\":[");
    int said = c.j.toks[choices].count > 0 && is(&c, choices + 1, VSR_JSON_OBJECT) && choice(&c, choices + 1, "delta", 1);
    PUT(&c.w, "]");
    if (!absent(&c, usage)) {
        PUT(&c.w, ",\"usage\":");
        raw(&c, usage);
        said = 1;
    }
    PUT(&c.w, "}\n\n");
    if (!said)
        out->len = mark; /* nothing for the client: no event */
    vsr_json_free(&c.j);
    return c.w.rc;
}

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id)
{
    (void)type, (void)id;
    vsr_completions_stream_t *s = ud;
    /* each data line on its own (vsr's own chat streams write one) */
    vsr_slice_t rest = data;
    while (rest.p) {
        vsr_slice_t line = vsr_slice_split(rest, '\n', &rest);
        if (event(line.p, line.len, s->out) != VSR_OK) {
            s->failed = 1; /* out's cap */
            return VSR_ERR_TOO_BIG;
        }
    }
    return VSR_OK;
}

/* The events are framed by proto/sse.h. */
int vsr_completions_stream_feed(vsr_completions_stream_t *s, const char *p, size_t n, vsr_buf_t *out)
{
    if (s->failed)
        return VSR_ERR_INVALID;
    s->out = out;
    int rc = vsr_sse_feed(&s->sse, p, n);
    s->out = NULL;
    if (rc == VSR_OK)
        return VSR_OK;
    if (s->failed)
        return VSR_ERR_TOO_BIG; /* out's cap, writing an event */
    s->failed = 1;             /* a line or an event past the bound */
    return vsr_buf_append_cstr(out, "data: {\"error\":{\"message\":\"an event of the upstream's stream is too "
                                    "large\",\"type\":\"server_error\",\"code\":\"upstream_protocol_error\"}}\n\n");
}
