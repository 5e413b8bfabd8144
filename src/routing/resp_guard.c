/*
 * resp_guard.c — the response_jailbreak plugin's pure parts (ref §2): the
 * answer's text put together (a chat.completion, or a chat stream's deltas),
 * the client stream's terminal event held back until the verdict, and what
 * replaces it when the answer is blocked.  The wait on the prompt guard is
 * the session's, through its ports (session.c), like the response cache's.
 *
 * Bounds: the text keeps its first RG_HEAD bytes and its latest RG_TAIL
 * bytes (the model sees 2,048 runes of head, middle and tail: a longer
 * answer is shortened anyway); the held-back client bytes are one partial
 * event or the terminal event(s), at most RG_CARRY bytes (past it they go
 * out: an event that long is not a terminal one).
 */
#include "routing/routing-int.h"

#include <stdio.h>

#include "proto/anthropic.h"

#define RG_HEAD (64u << 10)
#define RG_TAIL (64u << 10)
#define RG_CARRY (1u << 20)
#define RG_MAX_EVENT (4u << 20) /* one chat event's data (the SSE parser's line bound) */

const char *const vsr__rg_result_names[] = {"", "pass", "flagged", "blocked", "error"};

void vsr__rg_init(vsr__rguard_t *g)
{
    memset(g, 0, sizeof(*g));
    vsr_buf_init(&g->head, RG_HEAD);
    vsr_buf_init(&g->tail, 2 * RG_TAIL);
    vsr_buf_init(&g->carry, 0);
    vsr_buf_init(&g->kept, 0);
}

void vsr__rg_free(vsr__rguard_t *g)
{
    if (g->sp_open)
        vsr_sse_free(&g->sp);
    vsr_buf_free(&g->head);
    vsr_buf_free(&g->tail);
    vsr_buf_free(&g->carry);
    vsr_buf_free(&g->kept);
    g->sp_open = 0;
}

void vsr__rg_reset(vsr__rguard_t *g)
{
    if (g->sp_open)
        vsr_sse_free(&g->sp);
    g->sp_open = 0;
    vsr_buf_reset(&g->head);
    vsr_buf_reset(&g->tail);
    vsr_buf_reset(&g->carry);
    vsr_buf_reset(&g->kept);
    g->on = g->sse = g->withhold = g->held = g->result = 0;
    g->has_kept = 0;
    g->score = 0;
}

/* Text of the answer: the head until it is full, then a tail that keeps
 * its latest RG_TAIL bytes. */
static void add_text(vsr__rguard_t *g, vsr_slice_t t)
{
    if (t.len == 0)
        return;
    if (g->head.len < RG_HEAD) {
        size_t n = VSR_MIN(t.len, (size_t)(RG_HEAD - g->head.len));
        vsr_buf_append(&g->head, t.p, n);
        t.p += n;
        t.len -= n;
    }
    if (t.len == 0)
        return;
    if (t.len >= RG_TAIL) {
        vsr_buf_reset(&g->tail);
        vsr_buf_append(&g->tail, t.p + t.len - RG_TAIL, RG_TAIL);
        return;
    }
    if (g->tail.len + t.len > 2 * RG_TAIL) {
        size_t keep = RG_TAIL - t.len;
        memmove(g->tail.data, g->tail.data + g->tail.len - keep, keep);
        g->tail.len = keep;
    }
    vsr_buf_append(&g->tail, t.p, t.len);
}

vsr_slice_t vsr__rg_text(vsr__rguard_t *g, vsr_pool_t *pool)
{
    if (g->tail.len == 0)
        return vsr_buf_slice(&g->head);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_slice(&b, vsr_buf_slice(&g->head));
    vsr_buf_append_cstr(&b, "\n");
    vsr_buf_append_slice(&b, vsr_buf_slice(&g->tail));
    vsr_slice_t out = vsr_pool_dup_slice(pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return out;
}

/* A string member (or an array of {"text": ...} parts) of object o, added. */
static void add_content(vsr__rguard_t *g, const vsr_json_t *j, uint32_t o, const char *key)
{
    uint32_t t;
    if (vsr_json_object_get(j, o, key, &t) != VSR_OK)
        return;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t s;
    if (vsr_json_type(j, t) == VSR_JSON_STRING && vsr_json_string(j, t, &pool, &s) == VSR_OK) {
        add_text(g, s);
    } else if (vsr_json_type(j, t) == VSR_JSON_ARRAY) {
        uint32_t p = t + 1;
        for (uint32_t i = 0; i < j->toks[t].count; i++, p = j->toks[p].next) {
            uint32_t x;
            if (vsr_json_type(j, p) == VSR_JSON_OBJECT && vsr_json_object_get(j, p, "text", &x) == VSR_OK &&
                vsr_json_type(j, x) == VSR_JSON_STRING && vsr_json_string(j, x, &pool, &s) == VSR_OK)
                add_text(g, s);
        }
    }
    vsr_pool_free(&pool);
}

/* Every choice's `field` object's content (message, or a chunk's delta). */
static void add_choices(vsr__rguard_t *g, const vsr_json_t *j, const char *field)
{
    uint32_t choices;
    if (vsr_json_type(j, 0) != VSR_JSON_OBJECT || vsr_json_object_get(j, 0, "choices", &choices) != VSR_OK ||
        vsr_json_type(j, choices) != VSR_JSON_ARRAY)
        return;
    uint32_t c = choices + 1;
    for (uint32_t k = 0; k < j->toks[choices].count; k++, c = j->toks[c].next) {
        uint32_t m;
        if (vsr_json_type(j, c) == VSR_JSON_OBJECT && vsr_json_object_get(j, c, field, &m) == VSR_OK &&
            vsr_json_type(j, m) == VSR_JSON_OBJECT) {
            add_content(g, j, m, "content");
            add_content(g, j, m, "refusal");
        }
    }
}

void vsr__rg_feed_json(vsr__rguard_t *g, const char *p, size_t n)
{
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    if (vsr_json_parse(&j, p ? p : "", n, NULL) == VSR_OK)
        add_choices(g, &j, "message");
    vsr_json_free(&j);
}

static int on_chunk_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id)
{
    VSR_UNUSED(type);
    VSR_UNUSED(id);
    vsr__rguard_t *g = ud;
    if (vsr_slice_eq_cstr(vsr_slice_trim(data), "[DONE]"))
        return VSR_OK;
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    if (vsr_json_parse(&j, data.p, data.len, NULL) == VSR_OK)
        add_choices(g, &j, "delta");
    vsr_json_free(&j);
    return VSR_OK;
}

void vsr__rg_feed_sse(vsr__rguard_t *g, const char *p, size_t n)
{
    static const vsr_sse_callbacks_t cb = {on_chunk_event};
    if (!g->sp_open) {
        vsr_sse_init(&g->sp, RG_MAX_EVENT, &cb, g);
        g->sp_open = 1;
    }
    if (n)
        vsr_sse_feed(&g->sp, p, n); /* a dead parser (an event past the bound) adds nothing more */
}

/* 1 when the event [p, p+n) is the client protocol's terminal one. */
static int is_terminal(int term, const char *p, size_t n)
{
    vsr_slice_t rest = vsr_slice(p, n);
    while (rest.p && rest.len) {
        vsr_slice_t line = vsr_slice_split(rest, '\n', &rest);
        while (line.len && line.p[line.len - 1] == '\r')
            line.len--;
        vsr_slice_t val = VSR_SLICE_NULL;
        vsr_slice_t name = vsr_slice_split(line, ':', &val);
        val = vsr_slice_trim(val);
        if (term == VSR__RG_TERM_CHAT && vsr_slice_eq_cstr(name, "data") && vsr_slice_eq_cstr(val, "[DONE]"))
            return 1;
        if (term == VSR__RG_TERM_MESSAGES && vsr_slice_eq_cstr(name, "event") && vsr_slice_eq_cstr(val, "message_stop"))
            return 1;
        if (term == VSR__RG_TERM_RESPONSES && vsr_slice_eq_cstr(name, "event") &&
            (vsr_slice_eq_cstr(val, "response.completed") || vsr_slice_eq_cstr(val, "response.incomplete")))
            return 1;
    }
    return 0;
}

/* The end of the event starting at `from` (past its blank line), or 0. */
static size_t event_end(const char *p, size_t n, size_t from)
{
    for (size_t i = from; i + 1 < n; i++) {
        if (p[i] != '\n')
            continue;
        if (p[i + 1] == '\n')
            return i + 2;
        if (p[i + 1] == '\r' && i + 2 < n && p[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

void vsr__rg_withhold(vsr__rguard_t *g, vsr_buf_t *out, int cut)
{
    if (!g->withhold)
        return;
    vsr_buf_append(&g->carry, out->data ? out->data : "", out->len);
    vsr_buf_reset(out);
    if (cut) { /* no verdict comes for a cut answer: what was held goes out, the cut's event after it */
        vsr__rg_release(g, out);
        g->withhold = 0;
        return;
    }
    if (g->held)
        return; /* what follows the terminal waits with it */
    size_t at = 0, end;
    while ((end = event_end(g->carry.data, g->carry.len, at)) != 0) {
        if (is_terminal(g->term, g->carry.data + at, end - at)) {
            g->held = 1;
            break;
        }
        at = end;
    }
    if (!g->held && g->carry.len - at > RG_CARRY)
        at = g->carry.len; /* not an event we are waiting for */
    vsr_buf_append(out, g->carry.data ? g->carry.data : "", at);
    memmove(g->carry.data, g->carry.data + at, g->carry.len - at);
    g->carry.len -= at;
}

void vsr__rg_release(vsr__rguard_t *g, vsr_buf_t *out)
{
    vsr_buf_append(out, g->carry.data ? g->carry.data : "", g->carry.len);
    vsr_buf_reset(&g->carry);
}

void vsr__rg_blocked_event(vsr__rguard_t *g, vsr_slice_t msg, vsr_slice_t resp_id, uint64_t seq, vsr_buf_t *out)
{
    vsr_buf_reset(&g->carry); /* the terminal and anything after it: never sent */
    if (g->term == VSR__RG_TERM_MESSAGES) {
        vsr_buf_append_cstr(out, "event: error\ndata: ");
        vsr_anthropic_error_body(out, vsr_anthropic_error_type(403), msg);
        vsr_buf_append_cstr(out, "\n\n");
    } else if (g->term == VSR__RG_TERM_RESPONSES) {
        vsr_buf_printf(out, "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":%llu,"
                            "\"response\":{\"id\":", (unsigned long long)seq);
        vsr_buf_append_json_string(out, resp_id);
        vsr_buf_append_cstr(out, ",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":"
                                 "\"response_blocked\",\"message\":");
        vsr_buf_append_json_string(out, msg);
        vsr_buf_append_cstr(out, "},\"output\":[]}}\n\n");
    } else {
        vsr_buf_append_cstr(out, "data: ");
        vsr_json_error_body(out, msg, "invalid_request_error", "response_blocked");
        vsr_buf_append_cstr(out, "\n\n");
    }
}

/* x-vsr-response-warnings: the codes set, in the reference's fixed order. */
vsr_slice_t vsr__rg_warnings(unsigned bits, vsr_pool_t *pool)
{
    static const struct {
        unsigned bit;
        const char *code;
    } order[] = {
        {VSR__WARN_HALLUCINATION, "hallucination"},
        {VSR__WARN_UNVERIFIED_FACTUAL, "unverified_factual"},
        {VSR__WARN_RESPONSE_JAILBREAK, "response_jailbreak"},
    };
    char tmp[96];
    size_t n = 0;
    for (size_t i = 0; i < VSR_ARRAY_LEN(order); i++) {
        if (!(bits & order[i].bit))
            continue;
        n += (size_t)snprintf(tmp + n, sizeof(tmp) - n, "%s%s", n ? "," : "", order[i].code);
    }
    return n ? vsr_pool_dup_slice(pool, vsr_slice(tmp, n)) : VSR_SLICE_NULL;
}
