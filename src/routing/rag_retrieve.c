/*
 * rag_retrieve.c — the rag plugin's retrieval (ref §2.2, docs/plugins.md "rag"): the
 * query (the current user message) sent to the decision's backend through
 * the session's ports, its answer read into one context text, and the
 * in-process result cache.
 *
 * Backends (each an endpoint the upstream layer calls as a model of one
 * backend: vsr_rag_backend_conf_t.model):
 *   external_api  elasticsearch  {"query":{"match":{"content":Q}},"size":K}
 *                                 → hits.hits[]._source.content | text
 *                 pinecone       {"vector":E,"topK":K,"includeMetadata":true,"filter":{}}
 *                                 → matches[].metadata.content | text
 *                 weaviate       {"query":"{ Get { Document(nearVector: {vector: E} limit: K) ..."}
 *                                 → data.Get.Document[].content
 *                 custom         request_template with the placeholders filled
 *                                 → content | text | results[].content | text
 *   openai        POST <base>/v1/vector_stores/ID/search {"query":Q,"max_num_results":N[,"filters":F]}
 *                                 → data[].content (a string, or text parts)
 *   mcp           JSON-RPC tools/call over streamable HTTP (the answer as JSON or as an event stream)
 *                                 → result.content[] text parts (or the reference's content | text |
 *                                   result | data | results forms)
 * E is the query's embedding from the runtime (one embed task first).
 * Hits are joined by "\n\n---\n\n".  hybrid: primary, then fallback when it
 * fails or finds nothing (sequential), or both at once, primary preferred
 * (parallel).
 *
 * Bounds: each call's deadline is min(the request's, now + timeout_seconds);
 * each answer is read up to max_response_bytes (the hop fails past it); the
 * context kept is at most max_context_length runes (4 bytes each at most).
 * The cache holds at most RAG_CACHE_MAX_ENTRIES entries and
 * RAG_CACHE_MAX_BYTES bytes of context, least recently stored first out.
 *
 * Threading: a retrieval belongs to the session's thread; the cache is
 * shared by the workers behind one mutex (a lookup or a store copies).
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "routing/routing-int.h"

#define RAG_SEP "\n\n---\n\n"
#define RAG_CACHE_MAX_ENTRIES 10000 /* the reference's LRU size */
#define RAG_CACHE_MAX_BYTES ((size_t)64 << 20)
#define RAG_CACHE_BUCKETS 4096
#define RAG_QUERY_MAX (64u << 10) /* bytes of the user message sent as the query */

/* ---- the result cache ---- */

typedef struct cache_entry_s {
    struct cache_entry_s *next_in_bucket;
    struct cache_entry_s *older, *newer; /* store order */
    char key[VSR_CONFIG_HASH_LEN];
    uint64_t expires_ms;
    size_t len;
    char value[];
} cache_entry_t;

static struct {
    pthread_mutex_t mu;
    cache_entry_t *buckets[RAG_CACHE_BUCKETS];
    cache_entry_t *oldest, *newest;
    size_t n, bytes;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static size_t bucket_of(const char *key)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the key (itself a SHA-256) */
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (size_t)(h % RAG_CACHE_BUCKETS);
}

static void cache_unlink(cache_entry_t *e)
{
    cache_entry_t **pp = &cache.buckets[bucket_of(e->key)];
    while (*pp && *pp != e)
        pp = &(*pp)->next_in_bucket;
    if (*pp)
        *pp = e->next_in_bucket;
    if (e->older)
        e->older->newer = e->newer;
    else
        cache.oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        cache.newest = e->older;
    cache.n--;
    cache.bytes -= e->len;
    vsr_free(e);
}

static void cache_key(const vsr_plugin_rag_conf_t *conf, vsr_slice_t query, char key[VSR_CONFIG_HASH_LEN])
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, conf->scope);
    vsr_buf_append(&b, "\n", 1);
    vsr_buf_append_slice(&b, query);
    vsr_config_hash(b.data ? b.data : "", b.len, key);
    vsr_buf_free(&b);
}

/* A fresh entry's value copied into pool, or a NULL slice. */
static vsr_slice_t cache_get(const char *key, uint64_t now, vsr_pool_t *pool)
{
    vsr_slice_t out = VSR_SLICE_NULL;
    pthread_mutex_lock(&cache.mu);
    cache_entry_t *e = cache.buckets[bucket_of(key)];
    while (e && strcmp(e->key, key) != 0)
        e = e->next_in_bucket;
    if (e && e->expires_ms <= now)
        cache_unlink(e);
    else if (e)
        out = vsr_pool_dup_slice(pool, vsr_slice(e->value, e->len));
    pthread_mutex_unlock(&cache.mu);
    return out;
}

static void cache_put(const char *key, vsr_slice_t value, uint64_t expires_ms)
{
    if (value.len == 0 || value.len > RAG_CACHE_MAX_BYTES / 16)
        return;
    cache_entry_t *n = vsr_malloc(sizeof(*n) + value.len);
    memset(n, 0, sizeof(*n));
    snprintf(n->key, sizeof(n->key), "%s", key);
    n->expires_ms = expires_ms;
    n->len = value.len;
    memcpy(n->value, value.p, value.len);
    pthread_mutex_lock(&cache.mu);
    size_t b = bucket_of(key);
    for (cache_entry_t *e = cache.buckets[b]; e; e = e->next_in_bucket)
        if (strcmp(e->key, key) == 0) {
            cache_unlink(e);
            break;
        }
    while (cache.oldest && (cache.n >= RAG_CACHE_MAX_ENTRIES || cache.bytes + value.len > RAG_CACHE_MAX_BYTES))
        cache_unlink(cache.oldest);
    n->next_in_bucket = cache.buckets[b];
    cache.buckets[b] = n;
    n->older = cache.newest;
    if (cache.newest)
        cache.newest->newer = n;
    else
        cache.oldest = n;
    cache.newest = n;
    cache.n++;
    cache.bytes += value.len;
    pthread_mutex_unlock(&cache.mu);
}

void vsr__rag_cache_clear(void)
{
    pthread_mutex_lock(&cache.mu);
    while (cache.oldest)
        cache_unlink(cache.oldest);
    pthread_mutex_unlock(&cache.mu);
}

/* ---- one backend's call ---- */

typedef struct leg_s leg_t;

struct vsr__rag_s {
    vsr_pool_t *pool;
    const vsr_plugin_rag_conf_t *conf;
    vsr_slice_t query;
    const vsr__rag_vars_t *vars;
    const vsr_ports_t *ports;
    void *ports_ud;
    uint64_t t0, deadline;
    vsr_rag_result_t *out;
    void (*done)(void *ud);
    void *done_ud;
    int pending;      /* legs running */
    int starting;     /* vsr__rag_start is still on the stack */
    int finished;
    char key[VSR_CONFIG_HASH_LEN];
    struct leg_s {
        vsr__rag_t *r;
        const vsr_rag_backend_conf_t *b;
        void *handle;
        int embedding;    /* the handle is the runtime's (pinecone, weaviate) */
        int running, answered;
        int ok;
        vsr_slice_t context, error;
        uint64_t deadline;
    } legs[2];
};

static const char *kind_name(int kind)
{
    return kind == VSR_RAG_EXTERNAL_API ? "external_api" : kind == VSR_RAG_MCP ? "mcp" : "openai";
}

static uint64_t now_ms(const vsr__rag_t *r)
{
    return r->ports && r->ports->now_ms ? r->ports->now_ms(r->ports_ud) : vsr_now_ms();
}

/* s as the inside of a JSON string literal (no quotes). */
static void put_json_inner(vsr_buf_t *b, vsr_slice_t s)
{
    size_t at = b->len;
    if (vsr_buf_append_json_string(b, s) != VSR_OK)
        return;
    memmove(b->data + at, b->data + at + 1, b->len - at - 2);
    b->len -= 2;
}

/* Appends template t with each placeholder replaced: name → JSON-escaped text. */
static void fill_template(vsr_buf_t *b, const char *t, const char *const *names, const vsr_slice_t *values, size_t n,
                          const int *raw)
{
    while (*t) {
        size_t k = 0;
        while (k < n && strncmp(t, names[k], strlen(names[k])) != 0)
            k++;
        if (k == n) {
            vsr_buf_append(b, t, 1);
            t++;
            continue;
        }
        if (raw[k])
            vsr_buf_append_slice(b, values[k]);
        else
            put_json_inner(b, values[k]);
        t += strlen(names[k]);
    }
}

static void put_vector(vsr_buf_t *b, const float *v, size_t dim)
{
    vsr_buf_append(b, "[", 1);
    for (size_t i = 0; i < dim; i++)
        vsr_buf_printf(b, "%s%.7g", i ? "," : "", (double)v[i]);
    vsr_buf_append(b, "]", 1);
}

/* The request body of leg l (vec: the query's embedding for pinecone and weaviate). */
static vsr_slice_t request_body(leg_t *l, const float *vec, size_t dim)
{
    vsr__rag_t *r = l->r;
    const vsr_rag_backend_conf_t *b = l->b;
    const vsr_plugin_rag_conf_t *c = r->conf;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    char num[32], thr[32];
    snprintf(num, sizeof(num), "%u", c->top_k);
    snprintf(thr, sizeof(thr), "%.3f", c->similarity_threshold);
    if (b->kind == VSR_RAG_OPENAI) {
        vsr_buf_append_cstr(&out, "{\"query\":");
        vsr_buf_append_json_string(&out, r->query);
        vsr_buf_printf(&out, ",\"max_num_results\":%u", b->max_num_results);
        if (b->filter)
            vsr_buf_printf(&out, ",\"filters\":%s", b->filter);
        vsr_buf_append(&out, "}", 1);
    } else if (b->kind == VSR_RAG_MCP) {
        static const char *const names[] = {"${user_content}", "${matched_domains}", "${matched_keywords}",
                                            "${decision_name}"};
        static const int raw[] = {0, 0, 0, 0};
        vsr_slice_t values[4] = {r->query, r->vars->domains, r->vars->keywords, r->vars->decision};
        vsr_buf_append_cstr(&out, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":");
        vsr_buf_append_json_string(&out, vsr_slice_cstr(b->tool_name));
        vsr_buf_append_cstr(&out, ",\"arguments\":");
        fill_template(&out, b->tool_arguments ? b->tool_arguments : "{}", names, values, 4, raw);
        vsr_buf_append_cstr(&out, "}}");
    } else if (b->format == VSR_RAG_FMT_ELASTICSEARCH) {
        vsr_buf_append_cstr(&out, "{\"query\":{\"match\":{\"content\":");
        vsr_buf_append_json_string(&out, r->query);
        vsr_buf_printf(&out, "}},\"size\":%u}", c->top_k);
    } else if (b->format == VSR_RAG_FMT_PINECONE) {
        vsr_buf_append_cstr(&out, "{\"vector\":");
        put_vector(&out, vec, dim);
        vsr_buf_printf(&out, ",\"topK\":%u,\"includeMetadata\":true,\"filter\":{}}", c->top_k);
    } else if (b->format == VSR_RAG_FMT_WEAVIATE) {
        vsr_buf_t q;
        vsr_buf_init(&q, 0);
        vsr_buf_append_cstr(&q, "{ Get { Document(nearVector: {vector: ");
        put_vector(&q, vec, dim);
        vsr_buf_printf(&q, "} limit: %u) { content _additional { distance } } } }", c->top_k);
        vsr_buf_append_cstr(&out, "{\"query\":");
        vsr_buf_append_json_string(&out, vsr_buf_slice(&q));
        vsr_buf_append(&out, "}", 1);
        vsr_buf_free(&q);
    } else {
        /* custom: the query goes in JSON-escaped, so a quote in the user's text cannot end the
         * template's string (the reference inserts it raw and only escapes template markers) */
        static const char *const names[] = {"{{.Query}}", "{{.TopK}}", "{{.Threshold}}",
                                            "${user_content}", "${top_k}", "${threshold}"};
        static const int raw[] = {0, 1, 1, 0, 1, 1};
        vsr_slice_t values[6] = {r->query, vsr_slice_cstr(num), vsr_slice_cstr(thr),
                                 r->query, vsr_slice_cstr(num), vsr_slice_cstr(thr)};
        fill_template(&out, b->request_template, names, values, 6, raw);
    }
    vsr_slice_t s = vsr_pool_dup_slice(r->pool, vsr_buf_slice(&out));
    vsr_buf_free(&out);
    return s;
}

/* ---- reading answers ---- */

typedef struct {
    vsr_buf_t *b;
    size_t cap;     /* bytes of context kept at most */
    size_t hits;
} acc_t;

static void add_hit(acc_t *a, vsr_slice_t text)
{
    if (text.len == 0 || a->b->len >= a->cap)
        return;
    if (a->hits++)
        vsr_buf_append_cstr(a->b, RAG_SEP);
    size_t room = a->cap > a->b->len ? a->cap - a->b->len : 0;
    vsr_buf_append(a->b, text.p, text.len < room ? text.len : room);
}

/* The string member key of object o (pool-unescaped), or an empty slice. */
static vsr_slice_t str_member(const vsr_json_t *j, uint32_t o, const char *key, vsr_pool_t *pool)
{
    uint32_t t = vsr_json_member(j, o, key);
    vsr_slice_t s = VSR_SLICE_NULL;
    if (vsr_json_is(j, t, VSR_JSON_STRING) && vsr_json_string(j, t, pool, &s) == VSR_OK)
        return s;
    return VSR_SLICE_NULL;
}

/* content, else text, of object o */
static vsr_slice_t content_or_text(const vsr_json_t *j, uint32_t o, vsr_pool_t *pool)
{
    vsr_slice_t s = str_member(j, o, "content", pool);
    return s.len ? s : str_member(j, o, "text", pool);
}

/* For each object of array arr: its member `inner` (0: itself), then content | text. */
static void each_hit(const vsr_json_t *j, uint32_t arr, const char *inner, acc_t *a, vsr_pool_t *pool)
{
    if (!vsr_json_is(j, arr, VSR_JSON_ARRAY))
        return;
    uint32_t e = arr + 1;
    for (uint32_t i = 0; i < j->toks[arr].count; i++, e = j->toks[e].next) {
        uint32_t o = inner ? vsr_json_member(j, e, inner) : e;
        if (vsr_json_is(j, o, VSR_JSON_OBJECT))
            add_hit(a, content_or_text(j, o, pool));
    }
}

/* The text parts of an MCP or OpenAI content array ([{"type":"text","text":...}]). */
static void text_parts(const vsr_json_t *j, uint32_t arr, acc_t *a, vsr_pool_t *pool)
{
    uint32_t e = arr + 1;
    for (uint32_t i = 0; i < j->toks[arr].count; i++, e = j->toks[e].next)
        if (vsr_json_is(j, e, VSR_JSON_OBJECT) &&
            (vsr_json_absent(j, vsr_json_member(j, e, "type")) || vsr_json_str_is(j, vsr_json_member(j, e, "type"), "text")))
            add_hit(a, str_member(j, e, "text", pool));
}

/* An MCP answer in an event stream: the last data line that parses as an object. */
static vsr_slice_t mcp_event(vsr_slice_t body)
{
    vsr_slice_t found = VSR_SLICE_NULL;
    const char *p = body.p, *end = body.p + body.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        vsr_slice_t line = vsr_slice(p, (size_t)(le - p));
        if (line.len && line.p[line.len - 1] == '\r')
            line.len--;
        if (vsr_slice_starts_with(line, VSR_SLICE_LIT("data:"))) {
            vsr_slice_t d = vsr_slice_trim(vsr_slice(line.p + 5, line.len - 5));
            if (d.len && d.p[0] == '{')
                found = d;
        }
        p = nl ? nl + 1 : end;
    }
    return found;
}

/* Reads leg l's answer into its context, or says why not. */
static int read_answer(leg_t *l, vsr_slice_t body, const char **why)
{
    vsr__rag_t *r = l->r;
    const vsr_rag_backend_conf_t *b = l->b;
    vsr_pool_t *pool = r->pool;
    if (b->kind == VSR_RAG_MCP) {
        vsr_slice_t t = vsr_slice_trim(body);
        if (t.len == 0 || t.p[0] != '{')
            body = mcp_event(body);
    }
    vsr_json_t j;
    if (vsr_json_parse(&j, body.p ? body.p : "", body.len, NULL) != VSR_OK) {
        *why = "the answer is not JSON";
        return VSR_ERR_INVALID;
    }
    vsr_buf_t ctx;
    vsr_buf_init(&ctx, 0);
    acc_t a = {&ctx, (size_t)r->conf->max_context_length * 4 + 4, 0};
    int rc = VSR_OK;
    *why = NULL;
    if (vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        *why = "the answer is not a JSON object";
        rc = VSR_ERR_INVALID;
    } else if (b->kind == VSR_RAG_OPENAI) {
        uint32_t data = vsr_json_member(&j, 0, "data");
        if (vsr_json_is(&j, data, VSR_JSON_ARRAY)) {
            uint32_t e = data + 1;
            for (uint32_t i = 0; i < j.toks[data].count; i++, e = j.toks[e].next) {
                uint32_t c = vsr_json_member(&j, e, "content");
                if (vsr_json_is(&j, c, VSR_JSON_ARRAY))
                    text_parts(&j, c, &a, pool);
                else if (vsr_json_is(&j, c, VSR_JSON_STRING))
                    add_hit(&a, str_member(&j, e, "content", pool));
            }
        }
        if (a.hits == 0)
            *why = "no results found in vector store";
    } else if (b->kind == VSR_RAG_MCP) {
        uint32_t res = vsr_json_member(&j, 0, "result");
        uint32_t err = vsr_json_member(&j, 0, "error");
        if (err && !vsr_json_absent(&j, err)) {
            *why = "the MCP server answered an error";
        } else if (!vsr_json_is(&j, res, VSR_JSON_OBJECT)) {
            *why = "the MCP answer has no result";
        } else if (vsr_json_bool(&j, vsr_json_member(&j, res, "isError")) == 1) {
            *why = "the MCP tool reported an error";
        } else {
            uint32_t c = vsr_json_member(&j, res, "content");
            uint32_t data = vsr_json_member(&j, res, "data");
            if (vsr_json_is(&j, c, VSR_JSON_ARRAY))
                text_parts(&j, c, &a, pool);
            else if (vsr_json_is(&j, c, VSR_JSON_STRING))
                add_hit(&a, str_member(&j, res, "content", pool));
            else if (vsr_json_is(&j, vsr_json_member(&j, res, "text"), VSR_JSON_STRING))
                add_hit(&a, str_member(&j, res, "text", pool));
            else if (vsr_json_is(&j, vsr_json_member(&j, res, "result"), VSR_JSON_STRING))
                add_hit(&a, str_member(&j, res, "result", pool));
            else if (vsr_json_is(&j, data, VSR_JSON_STRING))
                add_hit(&a, str_member(&j, res, "data", pool));
            else if (vsr_json_is(&j, data, VSR_JSON_OBJECT))
                add_hit(&a, str_member(&j, data, "content", pool));
            else
                each_hit(&j, vsr_json_member(&j, res, "results"), NULL, &a, pool);
        }
    } else if (b->format == VSR_RAG_FMT_ELASTICSEARCH) {
        each_hit(&j, vsr_json_member(&j, vsr_json_member(&j, 0, "hits"), "hits"), "_source", &a, pool);
        if (a.hits == 0)
            *why = "no content found in Elasticsearch hits";
    } else if (b->format == VSR_RAG_FMT_PINECONE) {
        each_hit(&j, vsr_json_member(&j, 0, "matches"), "metadata", &a, pool);
        if (a.hits == 0)
            *why = "no content found in Pinecone matches";
    } else if (b->format == VSR_RAG_FMT_WEAVIATE) {
        uint32_t docs = vsr_json_member(&j, vsr_json_member(&j, vsr_json_member(&j, 0, "data"), "Get"), "Document");
        if (vsr_json_is(&j, docs, VSR_JSON_ARRAY)) {
            uint32_t e = docs + 1;
            for (uint32_t i = 0; i < j.toks[docs].count; i++, e = j.toks[e].next)
                add_hit(&a, str_member(&j, e, "content", pool));
        }
        if (a.hits == 0)
            *why = "no content found in Weaviate documents";
    } else {
        if (vsr_json_is(&j, vsr_json_member(&j, 0, "content"), VSR_JSON_STRING) ||
            vsr_json_is(&j, vsr_json_member(&j, 0, "text"), VSR_JSON_STRING))
            add_hit(&a, content_or_text(&j, 0, pool));
        else if (vsr_json_is(&j, vsr_json_member(&j, 0, "results"), VSR_JSON_ARRAY))
            each_hit(&j, vsr_json_member(&j, 0, "results"), NULL, &a, pool);
        else
            *why = "unable to extract context from custom response format";
    }
    if (*why)
        rc = VSR_ERR_INVALID;
    else
        l->context = vsr_pool_dup_slice(pool, vsr_buf_slice(&ctx));
    vsr_buf_free(&ctx);
    vsr_json_free(&j);
    return rc;
}

/* ---- the retrieval's course ---- */

static void leg_start(leg_t *l);

static void finish(vsr__rag_t *r)
{
    if (r->finished || r->pending > 0 || r->starting)
        return;
    leg_t *p = &r->legs[0], *f = r->conf->has_fallback ? &r->legs[1] : NULL;
    /* sequential: the fallback runs when the primary failed or found nothing */
    if (f && !r->conf->parallel && !f->running && !f->answered && !(p->ok && p->context.len)) {
        r->starting = 1;
        leg_start(f);
        r->starting = 0;
        if (r->pending > 0)
            return;
    }
    r->finished = 1;
    vsr_rag_result_t *o = r->out;
    leg_t *won = p->ok && p->context.len ? p : f && f->ok && f->context.len ? f : p->ok ? p : f && f->ok ? f : NULL;
    o->latency_ms = now_ms(r) - r->t0;
    if (won) {
        o->status = VSR_RAG_OK;
        o->context = won->context;
        o->backend = kind_name(won->b->kind);
        if (r->conf->cache_results && won->context.len)
            cache_put(r->key, won->context, now_ms(r) + r->conf->cache_ttl_ms);
    } else {
        o->status = VSR_RAG_FAILED;
        o->backend = kind_name(p->b->kind);
        if (f) {
            char msg[600];
            snprintf(msg, sizeof(msg), "both backends failed: primary=%.*s, fallback=%.*s", (int)p->error.len,
                     p->error.p ? p->error.p : "", (int)f->error.len, f->error.p ? f->error.p : "");
            o->error = vsr_pool_dup_slice(r->pool, vsr_slice_cstr(msg));
        } else {
            o->error = p->error;
        }
    }
    r->done(r->done_ud);
}

static void leg_fail(leg_t *l, const char *fmt, ...) VSR_PRINTF(2, 3);
static void leg_fail(leg_t *l, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    l->error = vsr_pool_dup_slice(l->r->pool, vsr_slice_cstr(msg));
    l->ok = 0;
}

static void leg_over(leg_t *l)
{
    l->handle = NULL;
    l->answered = 1;
    l->r->pending--;
    finish(l->r);
}

static void call_done(void *ud, int status, int http_status, vsr_slice_t body, unsigned attempts)
{
    VSR_UNUSED(attempts);
    leg_t *l = ud;
    if (l->answered)
        return;
    const char *why = NULL;
    if (now_ms(l->r) > l->deadline)
        leg_fail(l, "%s: no answer in time", kind_name(l->b->kind));
    else if (status != VSR_OK)
        leg_fail(l, "%s: %s", kind_name(l->b->kind),
                 status == VSR_ERR_TOO_BIG ? "an answer over max_response_bytes" : "no answer (connection or timeout)");
    else if (http_status < 200 || http_status > 299)
        leg_fail(l, "%s: API returned status %d", kind_name(l->b->kind), http_status);
    else if (read_answer(l, body, &why) != VSR_OK)
        leg_fail(l, "%s: %s", kind_name(l->b->kind), why);
    else
        l->ok = 1;
    leg_over(l);
}

static void leg_call(leg_t *l, const float *vec, size_t dim)
{
    vsr__rag_t *r = l->r;
    vsr_graph_call_t gc = {.model = &l->b->model, .body = request_body(l, vec, dim), .iteration = 1,
                           .max_response_bytes = l->b->max_response_bytes, .path = vsr_slice_cstr(l->b->path)};
    l->embedding = 0;
    void *h = r->ports->model_call(r->ports_ud, &gc, l->deadline, call_done, l);
    if (!l->answered)
        l->handle = h;
}

static void embed_done(void *ud, int status, const vsr_runtime_result_t *res, size_t n)
{
    leg_t *l = ud;
    if (l->answered)
        return;
    l->handle = NULL;
    float *vec = NULL;
    size_t dim = 0;
    for (size_t i = 0; status == VSR_OK && now_ms(l->r) <= l->deadline && i < n && vec == NULL; i++) {
        if (res[i].id == NULL || strcmp(res[i].id, "rag") != 0 || res[i].status != VSR_OK)
            continue;
        vsr_json_t j;
        if (vsr_json_parse(&j, res[i].result.p ? res[i].result.p : "", res[i].result.len, NULL) != VSR_OK)
            continue;
        uint32_t arr = vsr_json_member(&j, 0, "embeddings");
        uint32_t v = vsr_json_is(&j, arr, VSR_JSON_ARRAY) && j.toks[arr].count == 1 ? arr + 1 : 0;
        if (vsr_json_is(&j, v, VSR_JSON_ARRAY) && j.toks[v].count > 0 && j.toks[v].count <= 65536) {
            dim = j.toks[v].count;
            vec = vsr_pool_alloc(l->r->pool, dim * sizeof(float));
            uint32_t t = v + 1;
            for (size_t k = 0; k < dim && vec; k++, t = j.toks[t].next) {
                double x;
                if (vsr_json_number(&j, t, &x) != VSR_OK || !isfinite(x))
                    vec = NULL;
                else
                    vec[k] = (float)x;
            }
        }
        vsr_json_free(&j);
    }
    if (vec == NULL) {
        vsr_log_debug("routing", "rag: embedding failed: status %d, %zu results, first %.*s", status, n,
                      n && res[0].result.p ? (int)(res[0].result.len < 300 ? res[0].result.len : 300) : 0,
                      n && res[0].result.p ? res[0].result.p : "");
        leg_fail(l, "external_api: failed to generate embedding");
        leg_over(l);
        return;
    }
    leg_call(l, vec, dim);
}

static void leg_start(leg_t *l)
{
    vsr__rag_t *r = l->r;
    uint64_t now = now_ms(r);
    l->running = 1;
    l->deadline = now + l->b->timeout_ms < r->deadline ? now + l->b->timeout_ms : r->deadline;
    r->pending++;
    if (r->ports == NULL || r->ports->model_call == NULL) {
        leg_fail(l, "%s: no way to call the backend", kind_name(l->b->kind));
        leg_over(l);
        return;
    }
    int needs_vector = l->b->kind == VSR_RAG_EXTERNAL_API &&
                       (l->b->format == VSR_RAG_FMT_PINECONE || l->b->format == VSR_RAG_FMT_WEAVIATE);
    if (!needs_vector) {
        leg_call(l, NULL, 0);
        return;
    }
    if (r->ports->runtime_call == NULL) {
        leg_fail(l, "external_api: failed to generate embedding (no model runtime)");
        leg_over(l);
        return;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_append_json_string(&b, r->query);
    vsr_buf_append_cstr(&b, "]}");
    vsr_runtime_task_t task = {"rag", "embed", vsr_pool_dup_slice(r->pool, vsr_buf_slice(&b))};
    vsr_buf_free(&b);
    vsr_runtime_bundle_t bundle = {&task, 1};
    l->embedding = 1;
    void *h = r->ports->runtime_call(r->ports_ud, &bundle, l->deadline, embed_done, l);
    if (!l->answered && l->embedding)
        l->handle = h;
}

void *vsr__rag_start(vsr_pool_t *pool, const vsr_plugin_rag_conf_t *conf, vsr_slice_t query,
                     const vsr__rag_vars_t *vars, const vsr_ports_t *ports, void *ports_ud, uint64_t deadline,
                     vsr_rag_result_t *out, void (*done)(void *ud), void *done_ud)
{
    vsr__rag_t *r = vsr_pool_alloc(pool, sizeof(*r));
    memset(r, 0, sizeof(*r));
    memset(out, 0, sizeof(*out));
    r->pool = pool;
    r->conf = conf;
    if (query.len > RAG_QUERY_MAX)
        query.len = RAG_QUERY_MAX;
    r->query = query;
    r->vars = vars;
    r->ports = ports;
    r->ports_ud = ports_ud;
    r->deadline = deadline;
    r->out = out;
    r->done = done;
    r->done_ud = done_ud;
    r->t0 = now_ms(r);
    if (conf->cache_results) {
        cache_key(conf, query, r->key);
        vsr_slice_t hit = cache_get(r->key, r->t0, pool);
        if (hit.p) {
            out->status = VSR_RAG_OK;
            out->context = hit;
            out->cached = 1;
            out->backend = kind_name(conf->primary.kind);
            done(done_ud);
            return NULL;
        }
    }
    r->legs[0] = (leg_t){.r = r, .b = &conf->primary};
    r->legs[1] = (leg_t){.r = r, .b = &conf->fallback};
    r->starting = 1;
    leg_start(&r->legs[0]);
    if (conf->has_fallback && conf->parallel)
        leg_start(&r->legs[1]);
    r->starting = 0;
    finish(r);
    return r->finished ? NULL : r;
}

void vsr__rag_cancel(void *handle)
{
    vsr__rag_t *r = handle;
    if (r == NULL || r->finished)
        return;
    r->finished = 1;
    for (int i = 0; i < 2; i++) {
        leg_t *l = &r->legs[i];
        if (l->running && !l->answered && l->handle) {
            if (l->embedding && r->ports->runtime_cancel)
                r->ports->runtime_cancel(r->ports_ud, l->handle);
            else if (!l->embedding && r->ports->model_cancel)
                r->ports->model_cancel(r->ports_ud, l->handle);
        }
        l->answered = 1;
        l->handle = NULL;
    }
}
