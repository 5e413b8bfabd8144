/*
 * resp_cache.c — the response_cache plugin's pure parts (ref §2): the exact key
 * of a request, the stored form of an answer, and a stored answer replayed
 * as the client asked for it.  The waits (the embedding, the store) are the
 * session's, through its ports.
 *
 * Stored form: "<stored-at unix ms>\n" + a chat.completion JSON object.  A
 * streamed answer is stored in that form too (its events put together: the
 * text of choice 0, its finish_reason, the usage chunk), so one entry serves
 * both kinds of client; a stream carrying tool calls, several choices or
 * refusals is not stored (it would not replay faithfully).  Nor is an answer
 * that is not a good one, or not what its client saw: an error (an `error`
 * event or member), data after [DONE] (no client reads it), a choice that
 * finished with content_filter, or bytes that are not UTF-8.
 */
#include "routing/routing-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The exact key covers the whole request, less what is known not to change
 * the answer: every member of the body but these (`model` is hashed as the
 * model asked for, before routing), and every header field the client sent
 * (after ingress) but the neutral ones below.  An unknown field, in the body
 * or the head, is part of the key: it can only make a miss, never hand one
 * client's answer to another request. */
static const char *const neutral_members[] = {"model", "stream", "stream_options", "user"};

#define N(s) {s, sizeof(s) - 1}
static const struct {
    const char *p;
    size_t len;
} neutral_fields[] = {N("accept"), N("accept-encoding"), N("accept-language"), N("cache-control"), N("connection"),
    N("content-length"), N("content-type"), N("expect"), N("forwarded"), N("host"), N("keep-alive"), N("origin"),
    N("pragma"), N("referer"), N("te"), N("traceparent"), N("tracestate"), N("baggage"), N("transfer-encoding"),
    N("user-agent"), N("via"), N("x-forwarded-for"), N("x-forwarded-host"), N("x-forwarded-port"),
    N("x-forwarded-proto"), N("x-real-ip"), N("x-request-id"),
    /* credentials: the routing core removes them before any backend; the scope keeps keys apart */
    N("authorization"), N("api-key"), N("x-api-key"),
    /* identity: only from trusted peers; `scope: user` keeps users apart */
    N("x-authz-user-id"), N("x-authz-user-groups"), N("x-authz-team-id"), N("x-authz-tenant-id")},
  neutral_prefixes[] = {N("x-vsr-"), N("x-stainless-"), N("x-b3-"), N("x-envoy-"), N("sec-")};
#undef N
static int neutral_field(vsr_slice_t name)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(neutral_fields); i++)
        if (name.len == neutral_fields[i].len && vsr_slice_case_eq(name, vsr_slice(neutral_fields[i].p, name.len)))
            return 1;
    for (size_t i = 0; i < VSR_ARRAY_LEN(neutral_prefixes); i++) {
        size_t n = neutral_prefixes[i].len;
        if (name.len > n && vsr_slice_case_eq(vsr_slice(name.p, n), vsr_slice(neutral_prefixes[i].p, n)))
            return 1;
    }
    return 0;
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

typedef struct {
    vsr_slice_t name, value;
    uint32_t order; /* arrival: repeated header fields keep theirs */
    uint32_t tok;   /* body members: the value token */
} kv_t;

static int kv_cmp(const void *a, const void *b)
{
    const kv_t *x = a, *y = b;
    size_t n = VSR_MIN(x->name.len, y->name.len);
    for (size_t i = 0; i < n; i++) {
        int cx = lower((unsigned char)x->name.p[i]), cy = lower((unsigned char)y->name.p[i]);
        if (cx != cy)
            return cx - cy;
    }
    if (x->name.len != y->name.len)
        return x->name.len < y->name.len ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Sorted copies of what goes into the key; small requests stay on the stack. */
#define KEY_STACK_ITEMS 32

static kv_t *kv_alloc(kv_t *stack, size_t n)
{
    return n <= KEY_STACK_ITEMS ? stack : vsr_malloc(n * sizeof(kv_t));
}

/* "|<tag><len>:<bytes>": each part's length first, so no two requests run together */
static void put_sized(vsr_buf_t *b, char tag, vsr_slice_t v)
{
    char head[VSR_U64_DIGITS + 3];
    head[0] = '|';
    head[1] = tag;
    size_t n = 2 + vsr_fmt_u64(head + 2, v.len, 0);
    head[n++] = ':';
    vsr_buf_append(b, head, n);
    vsr_buf_append_slice(b, v);
}

void vsr__rc_key(const vsr_json_t *j, int last_user, const vsr_header_t *headers,
                 size_t n_headers, vsr_slice_t model, vsr_slice_t partition, vsr_slice_t scope,
                 vsr_slice_t control, char out[VSR_CONFIG_HASH_LEN], char context[VSR_CONFIG_HASH_LEN])
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_reserve(&b, 512);
    put_sized(&b, 'm', model);
    put_sized(&b, 'p', partition);
    put_sized(&b, 's', scope);
    vsr_slice_t last = VSR_SLICE_NULL;
    /* the body's members, by name */
    uint32_t n = vsr_json_type(j, 0) == VSR_JSON_OBJECT ? j->toks[0].count : 0;
    kv_t stack[KEY_STACK_ITEMS], *m = kv_alloc(stack, n);
    size_t k = 0;
    for (uint32_t i = 0, t = 1; i < n; i++, t = j->toks[t + 1].next) {
        int skip = 0;
        for (size_t x = 0; x < VSR_ARRAY_LEN(neutral_members) && !skip; x++)
            skip = vsr_json_string_eq(j, t, vsr_slice_cstr(neutral_members[x]));
        if (!skip)
            m[k++] = (kv_t){vsr_json_raw(j, t), vsr_json_raw(j, t + 1), i, t + 1};
    }
    qsort(m, k, sizeof(kv_t), kv_cmp);
    for (size_t i = 0; i < k; i++) {
        put_sized(&b, 'b', m[i].name);
        uint32_t v = m[i].tok;
        if (last_user >= 0 && vsr_json_type(j, v) == VSR_JSON_ARRAY &&
            vsr_json_string_eq(j, v - 1, VSR_SLICE_LIT("messages"))) {
            /* the conversation with its last user message set aside: what a
             * semantic hit must share with the request */
            put_sized(&b, '[', VSR_SLICE_NULL);
            uint32_t e = v + 1;
            for (uint32_t x = 0; x < j->toks[v].count; x++, e = j->toks[e].next) {
                if ((int)x == last_user) {
                    last = vsr_json_raw(j, e);
                    vsr_buf_append_cstr(&b, "|U");
                } else {
                    put_sized(&b, 'e', vsr_json_raw(j, e));
                }
            }
        } else {
            put_sized(&b, '=', m[i].value);
        }
    }
    if (m != stack)
        vsr_free(m);
    /* the header fields that reach the backend and may change its answer */
    kv_t hstack[KEY_STACK_ITEMS], *h = kv_alloc(hstack, n_headers);
    k = 0;
    for (size_t i = 0; i < n_headers; i++)
        if (!neutral_field(headers[i].name) && !(control.len && vsr_slice_case_eq(headers[i].name, control)))
            h[k++] = (kv_t){headers[i].name, headers[i].value, (uint32_t)i, 0};
    qsort(h, k, sizeof(kv_t), kv_cmp);
    for (size_t i = 0; i < k; i++) {
        size_t at = b.len;
        put_sized(&b, 'h', h[i].name);
        for (size_t c = at; c < b.len; c++)
            b.data[c] = (char)lower((unsigned char)b.data[c]);
        put_sized(&b, 'v', vsr_slice_trim(h[i].value));
    }
    if (h != hstack)
        vsr_free(h);
    /* the context (everything but the last user message), then the key:
     * the context's hash and that message, so the request is hashed once */
    char ctx[VSR_CONFIG_HASH_LEN];
    vsr_config_hash(b.data, b.len, ctx);
    if (context)
        memcpy(context, ctx, sizeof(ctx));
    vsr_buf_reset(&b);
    vsr_buf_append_cstr(&b, ctx);
    put_sized(&b, 'u', last);
    vsr_config_hash(b.data, b.len, out);
    vsr_buf_free(&b);
}

/* ---- a streamed answer put together ---- */

typedef struct {
    vsr_buf_t text, id, model, finish, usage;
    uint64_t created;
    int done, bad;
} assemble_t;

static void keep_string(const vsr_json_t *j, uint32_t t, vsr_buf_t *into)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t s;
    if (vsr_json_type(j, t) == VSR_JSON_STRING && vsr_json_string(j, t, &pool, &s) == VSR_OK) {
        vsr_buf_reset(into);
        vsr_buf_append_slice(into, s);
    }
    vsr_pool_free(&pool);
}

static int on_event(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id)
{
    VSR_UNUSED(id);
    assemble_t *a = ud;
    if (a->done || vsr_slice_eq_cstr(type, "error")) {
        a->bad = 1; /* data after [DONE] (no client reads it), or an error event */
        return VSR_OK;
    }
    if (vsr_slice_eq_cstr(vsr_slice_trim(data), "[DONE]")) {
        a->done = 1;
        return VSR_OK;
    }
    vsr_json_t j;
    if (vsr_json_parse(&j, data.p, data.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        vsr_json_free(&j);
        a->bad = 1;
        return VSR_ERR_INVALID;
    }
    uint32_t t, choices, u;
    if (vsr_json_object_get(&j, 0, "error", &t) == VSR_OK && vsr_json_type(&j, t) != VSR_JSON_NULL)
        a->bad = 1; /* an error in the stream */
    if (a->id.len == 0 && vsr_json_object_get(&j, 0, "id", &t) == VSR_OK)
        keep_string(&j, t, &a->id);
    if (a->model.len == 0 && vsr_json_object_get(&j, 0, "model", &t) == VSR_OK)
        keep_string(&j, t, &a->model);
    double created;
    if (!a->created && vsr_json_object_get(&j, 0, "created", &t) == VSR_OK && vsr_json_number(&j, t, &created) == VSR_OK &&
        created > 0 && created < 1e15)
        a->created = (uint64_t)created;
    if (vsr_json_object_get(&j, 0, "usage", &u) == VSR_OK && vsr_json_type(&j, u) == VSR_JSON_OBJECT) {
        vsr_buf_reset(&a->usage);
        vsr_buf_append(&a->usage, data.p + j.toks[u].start, j.toks[u].end - j.toks[u].start);
    }
    if (vsr_json_object_get(&j, 0, "choices", &choices) == VSR_OK && vsr_json_type(&j, choices) == VSR_JSON_ARRAY) {
        for (uint32_t k = 0, c = choices + 1; k < j.toks[choices].count; k++, c = j.toks[c].next) {
            uint32_t idx, delta, fr;
            double ix = 0;
            if (vsr_json_object_get(&j, c, "index", &idx) == VSR_OK)
                vsr_json_number(&j, idx, &ix);
            if (ix != 0) {
                a->bad = 1; /* several choices */
                continue;
            }
            if (vsr_json_object_get(&j, c, "delta", &delta) == VSR_OK && vsr_json_type(&j, delta) == VSR_JSON_OBJECT) {
                uint32_t x;
                if (vsr_json_object_get(&j, delta, "tool_calls", &x) == VSR_OK ||
                    vsr_json_object_get(&j, delta, "function_call", &x) == VSR_OK ||
                    (vsr_json_object_get(&j, delta, "refusal", &x) == VSR_OK && vsr_json_type(&j, x) != VSR_JSON_NULL))
                    a->bad = 1;
                if (vsr_json_object_get(&j, delta, "content", &x) == VSR_OK && vsr_json_type(&j, x) == VSR_JSON_STRING) {
                    vsr_pool_t pool;
                    vsr_pool_init(&pool);
                    vsr_slice_t s;
                    if (vsr_json_string(&j, x, &pool, &s) == VSR_OK)
                        vsr_buf_append_slice(&a->text, s);
                    vsr_pool_free(&pool);
                }
            }
            if (vsr_json_object_get(&j, c, "finish_reason", &fr) == VSR_OK && vsr_json_type(&j, fr) == VSR_JSON_STRING)
                keep_string(&j, fr, &a->finish);
        }
    }
    vsr_json_free(&j);
    return VSR_OK;
}

static const vsr_sse_callbacks_t assemble_cb = {on_event};

/* An answer a moderation layer stopped is the provider's verdict on that
 * request, not an answer to hand others. */
static int filtered(vsr_slice_t finish)
{
    return vsr_slice_eq_cstr(finish, "content_filter");
}

int vsr__rc_stored_form(const char *body, size_t len, int sse, uint64_t now_ms, vsr_buf_t *out)
{
    /* bytes that are not UTF-8 are not JSON (RFC 8259 §8.1): a replay
     * would hand on what the first client's parser may have refused */
    if (!vsr_utf8_valid(vsr_slice(body, len)))
        return VSR_ERR_INVALID;
    vsr_buf_printf(out, "%llu\n", (unsigned long long)now_ms);
    if (!sse) {
        /* a chat.completion as the backend sent it, once it is one, without an error or a filtered choice */
        vsr_json_t j;
        uint32_t t = 0, e;
        int ok = vsr_json_parse(&j, body, len, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
                 vsr_json_object_get(&j, 0, "choices", &t) == VSR_OK && vsr_json_type(&j, t) == VSR_JSON_ARRAY &&
                 j.toks[t].count > 0 &&
                 (vsr_json_object_get(&j, 0, "error", &e) != VSR_OK || vsr_json_type(&j, e) == VSR_JSON_NULL);
        for (uint32_t k = 0, c = t + 1; ok && k < j.toks[t].count; k++, c = j.toks[c].next) {
            uint32_t fr;
            ok = vsr_json_type(&j, c) == VSR_JSON_OBJECT &&
                 !(vsr_json_object_get(&j, c, "finish_reason", &fr) == VSR_OK &&
                   vsr_json_string_eq(&j, fr, VSR_SLICE_LIT("content_filter")));
        }
        vsr_json_free(&j);
        if (!ok)
            return VSR_ERR_INVALID;
        return vsr_buf_append(out, body, len);
    }
    assemble_t a;
    memset(&a, 0, sizeof(a));
    vsr_buf_init(&a.text, 0);
    vsr_buf_init(&a.id, 0);
    vsr_buf_init(&a.model, 0);
    vsr_buf_init(&a.finish, 0);
    vsr_buf_init(&a.usage, 0);
    vsr_sse_parser_t p;
    vsr_sse_init(&p, 0, &assemble_cb, &a);
    int rc = vsr_sse_feed(&p, body, len);
    vsr_sse_free(&p);
    if (rc == VSR_OK && a.done && !a.bad && a.finish.len && !filtered(vsr_buf_slice(&a.finish))) {
        vsr_buf_append_cstr(out, "{\"id\":");
        vsr_buf_append_json_string(out, vsr_buf_slice(&a.id));
        vsr_buf_printf(out, ",\"object\":\"chat.completion\",\"created\":%llu,\"model\":", (unsigned long long)a.created);
        vsr_buf_append_json_string(out, vsr_buf_slice(&a.model));
        vsr_buf_append_cstr(out, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
        vsr_buf_append_json_string(out, vsr_buf_slice(&a.text));
        vsr_buf_append_cstr(out, "},\"finish_reason\":");
        vsr_buf_append_json_string(out, vsr_buf_slice(&a.finish));
        vsr_buf_append_cstr(out, "}]");
        if (a.usage.len) {
            vsr_buf_append_cstr(out, ",\"usage\":");
            vsr_buf_append_slice(out, vsr_buf_slice(&a.usage));
        }
        rc = vsr_buf_append_cstr(out, "}");
    } else {
        rc = VSR_ERR_INVALID; /* cut, or not something a replay could give back whole */
    }
    vsr_buf_free(&a.text);
    vsr_buf_free(&a.id);
    vsr_buf_free(&a.model);
    vsr_buf_free(&a.finish);
    vsr_buf_free(&a.usage);
    return rc;
}

int vsr__rc_parse_stored(vsr_slice_t v, uint64_t *stored_ms, vsr_slice_t *json)
{
    const char *nl = memchr(v.p, '\n', v.len);
    if (nl == NULL || nl == v.p)
        return VSR_ERR_INVALID;
    uint64_t t = 0;
    for (const char *p = v.p; p < nl; p++) {
        if (*p < '0' || *p > '9' || t > UINT64_MAX / 10)
            return VSR_ERR_INVALID;
        t = t * 10 + (uint64_t)(*p - '0');
    }
    *stored_ms = t;
    *json = vsr_slice(nl + 1, v.len - (size_t)(nl + 1 - v.p));
    return json->len ? VSR_OK : VSR_ERR_INVALID;
}

/* A stored chat.completion as the event stream a streaming client expects:
 * the role and content in one chunk, the finish_reason, the usage chunk
 * when the request asked for it, then [DONE]. */
int vsr__rc_replay_sse(vsr_slice_t json, int include_usage, vsr_buf_t *out)
{
    vsr_json_t j;
    if (vsr_json_parse(&j, json.p, json.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    uint32_t t, choices, c, msg, content, fr, usage;
    vsr_slice_t id = VSR_SLICE_LIT("\"\""), model = VSR_SLICE_LIT("\"\""), created = VSR_SLICE_LIT("0");
#define RAW(tok) vsr_slice(json.p + j.toks[tok].start, j.toks[tok].end - j.toks[tok].start)
    if (vsr_json_object_get(&j, 0, "id", &t) == VSR_OK)
        id = RAW(t);
    if (vsr_json_object_get(&j, 0, "model", &t) == VSR_OK)
        model = RAW(t);
    if (vsr_json_object_get(&j, 0, "created", &t) == VSR_OK)
        created = RAW(t);
    if (vsr_json_object_get(&j, 0, "choices", &choices) != VSR_OK || vsr_json_type(&j, choices) != VSR_JSON_ARRAY ||
        j.toks[choices].count == 0) {
        vsr_json_free(&j);
        return VSR_ERR_INVALID;
    }
    c = choices + 1;
    vsr_slice_t text = VSR_SLICE_LIT("\"\""), finish = VSR_SLICE_LIT("\"stop\"");
    if (vsr_json_object_get(&j, c, "message", &msg) == VSR_OK && vsr_json_type(&j, msg) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, msg, "content", &content) == VSR_OK && vsr_json_type(&j, content) == VSR_JSON_STRING)
        text = RAW(content);
    if (vsr_json_object_get(&j, c, "finish_reason", &fr) == VSR_OK && vsr_json_type(&j, fr) == VSR_JSON_STRING)
        finish = RAW(fr);
    const char *shape[3] = {"{\"role\":\"assistant\",\"content\":", "{}", NULL};
    for (int k = 0; k < 2; k++) {
        vsr_buf_append_cstr(out, "data: {\"id\":");
        vsr_buf_append_slice(out, id);
        vsr_buf_append_cstr(out, ",\"object\":\"chat.completion.chunk\",\"created\":");
        vsr_buf_append_slice(out, created);
        vsr_buf_append_cstr(out, ",\"model\":");
        vsr_buf_append_slice(out, model);
        vsr_buf_append_cstr(out, ",\"choices\":[{\"index\":0,\"delta\":");
        vsr_buf_append_cstr(out, shape[k]);
        if (k == 0) {
            vsr_buf_append_slice(out, text);
            vsr_buf_append_cstr(out, "},\"finish_reason\":null}]}\n\n");
        } else {
            vsr_buf_append_cstr(out, ",\"finish_reason\":");
            vsr_buf_append_slice(out, finish);
            vsr_buf_append_cstr(out, "}]}\n\n");
        }
    }
    if (include_usage && vsr_json_object_get(&j, 0, "usage", &usage) == VSR_OK &&
        vsr_json_type(&j, usage) == VSR_JSON_OBJECT) {
        vsr_buf_append_cstr(out, "data: {\"id\":");
        vsr_buf_append_slice(out, id);
        vsr_buf_append_cstr(out, ",\"object\":\"chat.completion.chunk\",\"created\":");
        vsr_buf_append_slice(out, created);
        vsr_buf_append_cstr(out, ",\"model\":");
        vsr_buf_append_slice(out, model);
        vsr_buf_append_cstr(out, ",\"choices\":[],\"usage\":");
        vsr_buf_append_slice(out, RAW(usage));
        vsr_buf_append_cstr(out, "}\n\n");
    }
#undef RAW
    vsr_json_free(&j);
    return vsr_buf_append_cstr(out, "data: [DONE]\n\n");
}

/* The embedding of a runtime embed task's result: {"embeddings":[[...]]},
 * the first vector, scaled to unit length.  VSR_OK or VSR_ERR_INVALID. */
int vsr__rc_read_embedding(vsr_slice_t result, float *v, size_t dim)
{
    vsr_json_t j;
    if (vsr_json_parse(&j, result.p, result.len, NULL) != VSR_OK)
        return VSR_ERR_INVALID;
    uint32_t e;
    int rc = VSR_ERR_INVALID;
    if (vsr_json_type(&j, 0) == VSR_JSON_OBJECT && vsr_json_object_get(&j, 0, "embeddings", &e) == VSR_OK &&
        vsr_json_type(&j, e) == VSR_JSON_ARRAY && j.toks[e].count >= 1) {
        uint32_t arr = e + 1;
        if (vsr_json_type(&j, arr) == VSR_JSON_ARRAY && j.toks[arr].count == dim) {
            double norm = 0;
            uint32_t t = arr + 1;
            rc = VSR_OK;
            for (size_t i = 0; i < dim && rc == VSR_OK; i++, t = j.toks[t].next) {
                double x;
                if (vsr_json_number(&j, t, &x) != VSR_OK || !(x == x) || x > 1e30 || x < -1e30)
                    rc = VSR_ERR_INVALID;
                v[i] = (float)x;
                norm += x * x;
            }
            if (rc == VSR_OK && norm > 0) {
                float inv = (float)(1.0 / sqrt(norm));
                for (size_t i = 0; i < dim; i++)
                    v[i] *= inv;
            } else {
                rc = VSR_ERR_INVALID;
            }
        }
    }
    vsr_json_free(&j);
    return rc;
}
