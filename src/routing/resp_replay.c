/*
 * resp_replay.c — the router_replay plugin (ref §2): a record of one request and
 * its answer, started when the decision is made and written once through
 * the replay_store port when the answer ended (or the session did).
 *
 * Bounded: each body costs at most max_body_bytes (the rest is counted, not
 * kept: `truncated`), the tool trace at most max_tool_trace_steps calls and
 * max_tool_trace_bytes bytes.  Only the response body's bytes the client was
 * sent are kept, in the client's protocol.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "routing/routing-int.h"

struct vsr__replay_s {
    const vsr_plugin_router_replay_conf_t *conf;
    char id[36];                  /* "rr_" + 32 hex */
    uint64_t ts_ms;               /* wall clock */
    vsr_slice_t method, path, request_id, model;
    vsr_slice_t req_body;         /* borrowed from the session (until finish) */
    int status, streamed, cut, ended, written, answered;
    vsr_response_path_t path_kind;
    uint64_t resp_bytes;          /* every byte sent, kept or not */
    vsr_buf_t resp;               /* at most max_body_bytes */
};

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const vsr_plugin_router_replay_conf_t *vsr__replay_conf(const vsr_config_t *cfg, const vsr_decision_conf_t *d)
{
    if (d == NULL || !cfg->replay_store.enabled)
        return NULL;
    for (size_t i = 0; i < d->n_plugins; i++)
        if (d->plugins[i].kind == VSR_PLUGIN_ROUTER_REPLAY && d->plugins[i].enabled)
            return &d->plugins[i].u.router_replay;
    return NULL;
}

vsr__replay_t *vsr__replay_begin(vsr_pool_t *pool, const vsr_plugin_router_replay_conf_t *conf, vsr_slice_t method,
                                 vsr_slice_t path, vsr_slice_t request_id, vsr_slice_t model, vsr_slice_t body)
{
    vsr__replay_t *r = vsr_pool_alloc(pool, sizeof(*r));
    memset(r, 0, sizeof(*r));
    r->conf = conf;
    char u[37];
    vsr_uuid4(u);
    size_t k = 0;
    memcpy(r->id, "rr_", 3);
    for (size_t i = 0; u[i] && k < 32; i++)
        if (u[i] != '-')
            r->id[3 + k++] = u[i];
    r->id[3 + k] = 0;
    r->ts_ms = wall_ms();
    r->method = vsr_pool_dup_slice(pool, method);
    r->path = vsr_pool_dup_slice(pool, path);
    r->request_id = vsr_pool_dup_slice(pool, vsr_slice(request_id.p, request_id.len > 256 ? 256 : request_id.len));
    r->model = vsr_pool_dup_slice(pool, vsr_slice(model.p, model.len > 256 ? 256 : model.len));
    r->req_body = body;
    vsr_buf_init(&r->resp, (size_t)conf->max_body_bytes);
    return r;
}

const char *vsr__replay_id(const vsr__replay_t *r)
{
    return r->id;
}

void vsr__replay_response(vsr__replay_t *r, int status, int streamed)
{
    /* a fallback's answer starts afresh */
    r->status = status;
    r->streamed = streamed;
    r->answered = 1;
    r->resp_bytes = 0;
    r->cut = 0;
    vsr_buf_reset(&r->resp);
}

void vsr__replay_feed(vsr__replay_t *r, const char *p, size_t n)
{
    r->resp_bytes += n;
    if (!r->conf->capture_response_body || n == 0)
        return;
    size_t room = r->resp.cap - r->resp.len;
    if (r->resp.cap == 0)
        room = 0; /* max_body_bytes: 0 keeps nothing */
    vsr_buf_append(&r->resp, p, n < room ? n : room);
}

/* s as a JSON string, at most max bytes of it, cut on a character boundary,
 * invalid UTF-8 replaced: {"body":...,"bytes":N,"truncated":B} */
static void put_body(vsr_buf_t *b, const char *name, vsr_slice_t s, uint64_t total, size_t max)
{
    size_t n = s.len < max ? s.len : max;
    while (n > 0 && n < s.len && ((unsigned char)s.p[n] & 0xC0) == 0x80)
        n--; /* not in the middle of a character */
    vsr_buf_t clean;
    vsr_buf_init(&clean, 0);
    vsr_json_append_client_text(&clean, vsr_slice(s.p, n), 3 * n + 16); /* U+FFFD is 3 bytes */
    vsr_buf_printf(b, ",\"%s\":{\"body\":", name);
    vsr_buf_append_json_string(b, vsr_buf_slice(&clean));
    vsr_buf_printf(b, ",\"bytes\":%llu,\"truncated\":%s}", (unsigned long long)total, n < total ? "true" : "false");
    vsr_buf_free(&clean);
}

typedef struct {
    vsr_buf_t *b;
    uint64_t steps, max_steps, max_bytes;
    size_t start;
    int truncated;
} trace_t;

static void trace_add(trace_t *t, const char *source, vsr_slice_t call)
{
    if (t->steps >= t->max_steps || (t->b->len - t->start) + call.len + 32 > t->max_bytes) {
        t->truncated = 1;
        return;
    }
    vsr_buf_printf(t->b, "%s{\"source\":\"%s\",\"call\":", t->steps ? "," : "", source);
    vsr_buf_append(t->b, call.p, call.len);
    vsr_buf_append_cstr(t->b, "}");
    t->steps++;
}

/* Every tool_calls[] element of the message objects of array msgs. */
static void trace_messages(trace_t *t, const vsr_json_t *j, uint32_t msgs, const char *source, int answer)
{
    if (vsr_json_type(j, msgs) != VSR_JSON_ARRAY)
        return;
    uint32_t m = msgs + 1;
    for (uint32_t i = 0; i < j->toks[msgs].count; i++, m = j->toks[m].next) {
        uint32_t msg = m, calls, c;
        if (answer && vsr_json_object_get(j, m, "message", &msg) != VSR_OK)
            continue;
        if (vsr_json_type(j, msg) != VSR_JSON_OBJECT || vsr_json_object_get(j, msg, "tool_calls", &calls) != VSR_OK ||
            vsr_json_type(j, calls) != VSR_JSON_ARRAY)
            continue;
        c = calls + 1;
        for (uint32_t k = 0; k < j->toks[calls].count; k++, c = j->toks[c].next)
            trace_add(t, source, vsr_json_raw(j, c));
    }
}

static void put_tool_trace(vsr__replay_t *r, vsr_buf_t *b, const vsr_json_t *req)
{
    trace_t t = {b, 0, r->conf->max_tool_trace_steps, r->conf->max_tool_trace_bytes, 0, 0};
    vsr_buf_append_cstr(b, ",\"tool_trace\":{\"steps\":[");
    t.start = b->len;
    uint32_t msgs;
    if (req && req->ntoks && vsr_json_type(req, 0) == VSR_JSON_OBJECT &&
        vsr_json_object_get(req, 0, "messages", &msgs) == VSR_OK)
        trace_messages(&t, req, msgs, "request", 0);
    /* a JSON answer kept whole: its choices' tool calls */
    if (!r->streamed && r->resp.len && r->resp.len == r->resp_bytes) {
        vsr_json_t j;
        uint32_t choices;
        if (vsr_json_parse(&j, r->resp.data, r->resp.len, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
            vsr_json_object_get(&j, 0, "choices", &choices) == VSR_OK)
            trace_messages(&t, &j, choices, "response", 1);
        vsr_json_free(&j);
    }
    vsr_buf_printf(b, "],\"truncated\":%s}", t.truncated ? "true" : "false");
}

static void put_str(vsr_buf_t *b, const char *key, const char *v)
{
    vsr_buf_printf(b, ",\"%s\":", key);
    if (v)
        vsr_buf_append_json_string(b, vsr_slice_cstr(v));
    else
        vsr_buf_append_cstr(b, "null");
}

/* The fields every summary and record have. */
static void put_head(const vsr__replay_t *r, vsr_buf_t *b, const vsr_evidence_t *ev, uint64_t latency_us)
{
    static const char *paths[] = {"none", "upstream", "fast_response", "error", "looper", "cache"};
    time_t secs = (time_t)(r->ts_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char iso[40];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%S", &tm);
    vsr_buf_printf(b, "{\"id\":\"%s\",\"timestamp\":\"%s.%03uZ\",\"timestamp_ms\":%llu,\"request_id\":", r->id, iso,
                   (unsigned)(r->ts_ms % 1000), (unsigned long long)r->ts_ms);
    vsr_buf_append_json_string(b, r->request_id);
    vsr_buf_append_cstr(b, ",\"method\":");
    vsr_buf_append_json_string(b, r->method);
    vsr_buf_append_cstr(b, ",\"path\":");
    vsr_buf_append_json_string(b, r->path);
    vsr_buf_append_cstr(b, ",\"model\":");
    vsr_buf_append_json_string(b, r->model);
    put_str(b, "recipe", ev->recipe);
    put_str(b, "decision", ev->decision);
    put_str(b, "selected_model", ev->selected_model);
    put_str(b, "upstream_model", ev->upstream_model);
    vsr_buf_printf(b, ",\"confidence\":%.4f", ev->confidence);
    put_str(b, "algorithm", ev->algorithm);
    vsr_buf_append_cstr(b, ",\"signals\":[");
    for (size_t i = 0; i < ev->n_signals; i++) {
        vsr_buf_append_cstr(b, i ? ",{\"family\":" : "{\"family\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(ev->signals[i].family ? ev->signals[i].family : ""));
        vsr_buf_append_cstr(b, ",\"name\":");
        vsr_buf_append_json_string(b, vsr_slice_cstr(ev->signals[i].name ? ev->signals[i].name : ""));
        vsr_buf_printf(b, ",\"confidence\":%.4f}", ev->signals[i].confidence);
    }
    vsr_buf_append_cstr(b, "]");
    vsr_response_path_t p = r->path_kind;
    vsr_buf_printf(b, ",\"response_path\":\"%s\",\"status\":%d,\"latency_ms\":%.3f,\"streamed\":%s,\"cut\":%s,"
                      "\"completed\":%s",
                   (unsigned)p < VSR_ARRAY_LEN(paths) ? paths[p] : "none", r->status, (double)latency_us / 1000.0,
                   r->streamed ? "true" : "false", r->cut ? "true" : "false", r->ended ? "true" : "false");
}

void vsr__replay_end(vsr__replay_t *r, int status, vsr_response_path_t path, int cut)
{
    if (status)
        r->status = status;
    r->path_kind = path;
    r->cut = cut;
    r->ended = 1;
}

void vsr__replay_write(vsr__replay_t *r, const vsr_evidence_t *ev, const vsr_json_t *req, uint64_t latency_us,
                       const vsr_ports_t *ports, void *ud)
{
    if (r->written || ports == NULL || ports->replay_store == NULL)
        return;
    r->written = 1;
    if (!r->ended && r->answered)
        r->cut = 1; /* the answer's head came, its end never did (a reset, a timeout, the client gone) */
    if (!r->ended && r->path_kind == VSR_PATH_NONE)
        r->path_kind = r->answered ? ev->path != VSR_PATH_NONE ? ev->path : VSR_PATH_UPSTREAM : VSR_PATH_ERROR;
    vsr_buf_t sum, rec;
    vsr_buf_init(&sum, 0);
    vsr_buf_init(&rec, 0);
    put_head(r, &sum, ev, latency_us);
    vsr_buf_append(&rec, sum.data, sum.len);
    vsr_buf_append_cstr(&sum, "}");
    const vsr_plugin_router_replay_conf_t *c = r->conf;
    if (c->capture_request_body)
        put_body(&rec, "request", r->req_body, r->req_body.len, (size_t)c->max_body_bytes);
    if (c->capture_response_body)
        put_body(&rec, "response", vsr_buf_slice(&r->resp), r->resp_bytes, (size_t)c->max_body_bytes);
    put_tool_trace(r, &rec, req);
    vsr_buf_append_cstr(&rec, "}");
    vsr_replay_record_t out = {vsr_slice_cstr(r->id), r->ts_ms, vsr_buf_slice(&sum), vsr_buf_slice(&rec),
                               c->max_records};
    ports->replay_store(ud, &out);
    vsr_buf_free(&sum);
    vsr_buf_free(&rec);
}

void vsr__replay_free(vsr__replay_t *r)
{
    if (r)
        vsr_buf_free(&r->resp);
}
