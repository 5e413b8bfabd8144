/*
 * graph_body.c — what a hop sends: the client's request (after the
 * decision's plugins) with the fields the hop owns replaced.
 *
 * The hop owns "model", "stream" (and "stream_options" unless it streams),
 * "n" (one answer per call), and whichever of "messages", "logprobs" /
 * "top_logprobs", "temperature", "max_completion_tokens" / "max_tokens" and
 * "tools" / "tool_choice" / "parallel_tool_calls" its slot sets.  Every
 * other member is passed on byte for byte, so the client's own knobs
 * (response_format, seed, user, ...) reach every model.
 */
#include <string.h>

#include "graph/graph-int.h"

static const char *const owned[] = {
    "model", "stream", "stream_options", "n", "messages", "logprobs", "top_logprobs", "temperature",
    "max_completion_tokens", "max_tokens", "tools", "tool_choice", "parallel_tool_calls",
};

static int owns(const slot_t *s, int stream, size_t k)
{
    const char *key = owned[k];
    if (!strcmp(key, "model") || !strcmp(key, "stream") || !strcmp(key, "n"))
        return 1;
    if (!strcmp(key, "stream_options"))
        return !stream;
    if (!strcmp(key, "messages"))
        return s->messages.len > 0;
    if (!strcmp(key, "logprobs") || !strcmp(key, "top_logprobs"))
        return s->logprobs;
    if (!strcmp(key, "temperature"))
        return s->has_temperature;
    if (!strcmp(key, "max_completion_tokens") || !strcmp(key, "max_tokens"))
        return s->max_completion_tokens > 0;
    return s->strip_tools; /* tools, tool_choice, parallel_tool_calls */
}

vsr_slice_t vsr__graph_body(vsr_graph_run_t *r, const slot_t *s, int stream)
{
    vsr_buf_t m;
    vsr_buf_init(&m, 0);
    vsr__graph_body_into(r, s, stream, &m);
    vsr_slice_t out = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&m));
    vsr_buf_free(&m);
    return out;
}

void vsr__graph_body_into(vsr_graph_run_t *r, const slot_t *s, int stream, vsr_buf_t *out)
{
    const vsr_json_t *j = &r->json;
    const ref_t *ref = &r->refs[s->ref];
    vsr_buf_t m = *out;
    vsr_buf_append_cstr(&m, "{\"model\":");
    vsr_buf_append_json_string(&m, vsr_slice_cstr(ref->upstream_id));
    vsr_buf_append_cstr(&m, stream ? ",\"stream\":true" : ",\"stream\":false");
    if (s->logprobs) {
        vsr_buf_append_cstr(&m, ",\"logprobs\":true");
        if (s->top_logprobs)
            vsr_buf_printf(&m, ",\"top_logprobs\":%u", s->top_logprobs);
    }
    if (s->has_temperature)
        vsr_buf_printf(&m, ",\"temperature\":%.6g", s->temperature);
    if (s->max_completion_tokens)
        vsr_buf_printf(&m, ",\"max_completion_tokens\":%llu", (unsigned long long)s->max_completion_tokens);
    if (s->messages.len) {
        vsr_buf_append_cstr(&m, ",\"messages\":");
        vsr_buf_append_slice(&m, s->messages);
    }
    /* the client's other members, byte for byte */
    uint32_t t = 1;
    for (uint32_t i = 0; i < j->toks[0].count; i++) {
        uint32_t key = t, val = t + 1;
        int drop = 0;
        for (size_t k = 0; k < VSR_ARRAY_LEN(owned) && !drop; k++)
            drop = vsr_json_string_eq(j, key, vsr_slice_cstr(owned[k])) && owns(s, stream, k);
        if (!drop) {
            vsr_buf_append_cstr(&m, ",");
            vsr_buf_append(&m, j->src + j->toks[key].start, j->toks[val].end - j->toks[key].start);
        }
        t = j->toks[val].next;
    }
    vsr_buf_append_cstr(&m, "}");
    *out = m;
}

/* ---- the conversation ---- */

vsr_slice_t vsr__graph_messages(vsr_graph_run_t *r)
{
    uint32_t mt = r->chat.messages_tok;
    return mt ? vsr_json_raw(&r->json, mt) : VSR_SLICE_LIT("[]");
}

static void user_message(vsr_buf_t *b, vsr_slice_t text)
{
    vsr_buf_append_cstr(b, "{\"role\":\"user\",\"content\":");
    vsr_buf_append_json_string(b, text);
    vsr_buf_append_cstr(b, "}");
}

vsr_slice_t vsr__graph_messages_replace_last_user(vsr_graph_run_t *r, vsr_slice_t text)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "[");
    int replaced = 0;
    for (size_t i = 0; i < r->chat.n_messages; i++) {
        const vsr_chat_message_t *m = &r->chat.messages[i];
        if (i)
            vsr_buf_append_cstr(&b, ",");
        if ((int)i == r->chat.last_user) {
            user_message(&b, text);
            replaced = 1;
        } else {
            vsr_buf_append_slice(&b, vsr_json_raw(&r->json, m->tok));
        }
    }
    if (!replaced) {
        if (r->chat.n_messages)
            vsr_buf_append_cstr(&b, ",");
        user_message(&b, text);
    }
    vsr_buf_append_cstr(&b, "]");
    vsr_slice_t s = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return s;
}

vsr_slice_t vsr__graph_messages_append_user(vsr_graph_run_t *r, vsr_slice_t assistant, vsr_slice_t text)
{
    vsr_slice_t orig = vsr__graph_messages(r);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append(&b, orig.p, orig.len - 1); /* without its "]" */
    int empty = r->chat.n_messages == 0;
    if (assistant.len) {
        vsr_buf_append_cstr(&b, empty ? "" : ",");
        vsr_buf_append_cstr(&b, "{\"role\":\"assistant\",\"content\":");
        vsr_buf_append_json_string(&b, assistant);
        vsr_buf_append_cstr(&b, "}");
        empty = 0;
    }
    vsr_buf_append_cstr(&b, empty ? "" : ",");
    user_message(&b, text);
    vsr_buf_append_cstr(&b, "]");
    vsr_slice_t s = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return s;
}

vsr_slice_t vsr__graph_question(vsr_graph_run_t *r)
{
    return r->chat.last_user >= 0 ? r->chat.messages[r->chat.last_user].text : vsr_slice(NULL, 0);
}
