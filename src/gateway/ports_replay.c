/*
 * ports_replay.c — router replay records: the replay_store port (routing.h) and
 * the management API's /api/v1/router_replay endpoints.
 *
 * One store for the process (store.h, vsr_replay_*), opened from
 * global.services.router_replay of the version that first needs it and
 * opened anew when a later version changes that block (a memory store's
 * records go with the old one).  It lives outside the gateway, in this
 * file's statics, because a management call runs on a detached thread that
 * may outlast the gateway; each user holds a reference for its call.
 *
 * Workers only put (memory: a list under a mutex; redis, postgres: a
 * bounded queue for the store's writer thread): a request never waits for
 * the store.  Management reads may block (redis, postgres) on admin/'s
 * threads, never on a worker's loop.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway-int.h"

#define LIST_DEFAULT 50
#define LIST_MAX 1000

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static vsr_replay_store_t *g_store;
static int g_closed; /* the gateway is gone: no store is opened again (see vsr__gateway_replay_free) */
static char g_sig[2400];
/* vsr_router_replay_records_total{backend, result}: since the process started */
static _Atomic uint64_t g_counts[3][3];
static const char *const backends[3] = {"memory", "redis", "postgres"};
static const char *const results[3] = {"written", "failed", "evicted"};

/* the store's count callback; ud: its backends[] entry (NULL: memory) */
static void count(void *ud, const char *result)
{
    int b = ud == backends[1] ? 1 : ud == backends[2] ? 2 : 0;
    int r = result[0] == 'w' ? 0 : result[0] == 'f' ? 1 : 2;
    atomic_fetch_add_explicit(&g_counts[b][r], 1, memory_order_relaxed);
}

static int backend_of(const vsr_config_t *cfg)
{
    return cfg->replay_store.postgres ? 2 : cfg->replay_store.redis ? 1 : 0;
}

static const char *str(const char *s)
{
    return s ? s : "";
}

static void signature(const vsr_config_t *cfg, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%d|%s|%llu|%s|%s|%s|%s|%s|%llu|", backend_of(cfg), str(cfg->replay_store.pg_host),
                     (unsigned long long)cfg->replay_store.pg_port, str(cfg->replay_store.pg_database),
                     str(cfg->replay_store.pg_user), str(cfg->replay_store.pg_password),
                     str(cfg->replay_store.pg_ssl_mode), str(cfg->replay_store.pg_table_name),
                     (unsigned long long)cfg->replay_store.pg_conn_max_lifetime);
    if (n < 0 || (size_t)n >= cap)
        return;
    out += n;
    cap -= (size_t)n;
    snprintf(out, cap, "%d|%llu|%s|%s|%llu|%s|%llu", cfg->replay_store.redis,
             (unsigned long long)cfg->replay_store.ttl_seconds,
             cfg->replay_store.redis_address ? cfg->replay_store.redis_address : "",
             cfg->replay_store.redis_password ? cfg->replay_store.redis_password : "",
             (unsigned long long)cfg->replay_store.redis_db,
             cfg->replay_store.redis_key_prefix ? cfg->replay_store.redis_key_prefix : "",
             (unsigned long long)cfg->replay_store.redis_timeout_ms);
    if (cfg->replay_store.redis_cluster) /* cluster mode: its addresses too */
        for (size_t i = 0; i < cfg->replay_store.redis_cluster_addresses.n; i++) {
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "|c:%s", cfg->replay_store.redis_cluster_addresses.items[i]);
        }
}

/* The store for cfg, with a reference for the caller; NULL when it cannot be opened. */
static vsr_replay_store_t *acquire(const vsr_config_t *cfg)
{
    char sig[sizeof(g_sig)];
    signature(cfg, sig, sizeof(sig));
    vsr_replay_store_t *old = NULL, *st;
    pthread_mutex_lock(&g_mu);
    if (g_closed) { /* the process is ending: a call still running (management) opens no store */
        pthread_mutex_unlock(&g_mu);
        return NULL;
    }
    if (g_store == NULL || strcmp(sig, g_sig) != 0) {
        old = g_store;
        vsr_replay_config_t rc;
        vsr_replay_config_init(&rc);
        int b = backend_of(cfg);
        rc.backend = b == 2 ? VSR_STORE_POSTGRES : b == 1 ? VSR_STORE_REDIS : VSR_STORE_MEMORY;
        rc.ttl_ms = cfg->replay_store.ttl_seconds * 1000;
        rc.address = cfg->replay_store.redis_address;
        rc.password = cfg->replay_store.redis_password;
        rc.db = (unsigned)cfg->replay_store.redis_db;
        rc.key_prefix = cfg->replay_store.redis_key_prefix;
        rc.timeout_ms = cfg->replay_store.redis_timeout_ms;
        if (b == 2) {
            rc.password = cfg->replay_store.pg_password;
            rc.pg_host = cfg->replay_store.pg_host;
            rc.pg_port = (unsigned)cfg->replay_store.pg_port;
            rc.pg_database = cfg->replay_store.pg_database;
            rc.pg_user = cfg->replay_store.pg_user;
            rc.pg_ssl_mode = cfg->replay_store.pg_ssl_mode;
            rc.pg_table = cfg->replay_store.pg_table_name;
            rc.pg_max_lifetime_ms = cfg->replay_store.pg_conn_max_lifetime * 1000;
        }
        if (b == 1) {
            rc.cluster = cfg->replay_store.redis_cluster;
            rc.cluster_addresses = (const char *const *)cfg->replay_store.redis_cluster_addresses.items;
            rc.n_cluster_addresses = cfg->replay_store.redis_cluster_addresses.n;
        }
        rc.count = count;
        rc.count_ud = b ? (void *)backends[b] : NULL;
        vsr_buf_t err;
        vsr_buf_init(&err, 4096);
        g_store = vsr_replay_open(&rc, &err);
        if (g_store == NULL)
            vsr_log_warn("gateway", "router replay store: %.*s", (int)err.len, err.data ? err.data : "");
        vsr_buf_free(&err);
        snprintf(g_sig, sizeof(g_sig), "%s", sig);
    }
    st = vsr_replay_ref(g_store);
    pthread_mutex_unlock(&g_mu);
    vsr_replay_unref(old); /* never waits: a redis writer finishes and frees it on its own */
    return st;
}

void vsr__gateway_replay_put(const vsr_config_t *cfg, const vsr_replay_record_t *r)
{
    vsr_replay_store_t *st = acquire(cfg);
    if (st == NULL) {
        int b = backend_of(cfg);
        count(b ? (void *)backends[b] : NULL, "failed");
        return;
    }
    vsr_replay_put(st, r->id, r->timestamp_ms, r->summary, r->record, (size_t)r->max_records);
    vsr_replay_unref(st);
}

void vsr__gateway_replay_metrics(vsr_metrics_t *m)
{
    for (int b = 0; b < 3; b++)
        for (int r = 0; r < 3; r++)
            vsr_metrics_set_replay_records(m, backends[b], results[r],
                                           atomic_load_explicit(&g_counts[b][r], memory_order_relaxed));
}

/* ---- the management API ---- */

#define ROOT "/api/v1/router_replay"

static vsr_slice_t clean_path(vsr_slice_t target)
{
    vsr_slice_t path = vsr_slice_split(target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--;
    return path;
}

int vsr__gateway_replay_owns(vsr_slice_t target)
{
    vsr_slice_t p = clean_path(target);
    return vsr_slice_eq_cstr(p, ROOT) || vsr_slice_starts_with(p, VSR_SLICE_LIT(ROOT "/"));
}

static void answer_error(vsr_admin_response_t *r, int status, const char *type, const char *code, vsr_slice_t msg)
{
    r->status = status;
    vsr_buf_reset(&r->body);
    vsr_json_error_body(&r->body, msg, type, code);
}

/* ?limit=N: 1..LIST_MAX; 0 when it is not a number in range */
static size_t list_limit(vsr_slice_t target)
{
    vsr_slice_t q = VSR_SLICE_NULL;
    vsr_slice_split(target, '?', &q);
    while (q.p && q.len) {
        vsr_slice_t rest = VSR_SLICE_NULL;
        vsr_slice_t kv = vsr_slice_split(q, '&', &rest);
        if (vsr_slice_starts_with(kv, VSR_SLICE_LIT("limit="))) {
            size_t v = 0, i = 6;
            if (kv.len == 6 || kv.len > 6 + 7)
                return 0;
            for (; i < kv.len; i++) {
                if (kv.p[i] < '0' || kv.p[i] > '9')
                    return 0;
                v = v * 10 + (size_t)(kv.p[i] - '0');
            }
            return v >= 1 && v <= LIST_MAX ? v : 0;
        }
        q = rest;
    }
    return LIST_DEFAULT;
}

static void handle(void *ud, vsr_engine_t *active, const vsr_admin_request_t *req, vsr_admin_response_t *r)
{
    VSR_UNUSED(ud);
    vsr_slice_t path = clean_path(req->target);
    int get = vsr_slice_eq_cstr(req->method, "GET") || vsr_slice_eq_cstr(req->method, "HEAD");
    int del = vsr_slice_eq_cstr(req->method, "DELETE");
    int list = vsr_slice_eq_cstr(path, ROOT);
    vsr_slice_t id = list ? VSR_SLICE_NULL : vsr_slice(path.p + strlen(ROOT "/"), path.len - strlen(ROOT "/"));
    if (!list && memchr(id.p, '/', id.len) != NULL) {
        answer_error(r, 404, "invalid_request_error", "not_found", VSR_SLICE_LIT("endpoint not found"));
        return;
    }
    if (!(get || (del && !list))) {
        answer_error(r, 405, "invalid_request_error", NULL, VSR_SLICE_LIT("method not allowed"));
        vsr_buf_append_cstr(&r->headers, list ? "allow: GET, HEAD\r\n" : "allow: GET, HEAD, DELETE\r\n");
        return;
    }
    size_t limit = list ? list_limit(req->target) : 0;
    if (list && limit == 0) {
        char msg[96];
        snprintf(msg, sizeof(msg), "limit must be a whole number from 1 to %d", LIST_MAX);
        answer_error(r, 400, "invalid_request_error", "invalid_limit", vsr_slice_cstr(msg));
        return;
    }
    vsr_replay_store_t *st = active ? acquire(vsr_engine_config(active)) : NULL;
    if (st == NULL) {
        answer_error(r, 503, "server_error", "unavailable", VSR_SLICE_LIT("the router replay store is not available"));
        return;
    }
    const char *backend = backends[backend_of(vsr_engine_config(active))];
    int rc;
    if (list) {
        vsr_buf_t items;
        vsr_buf_init(&items, 0);
        uint64_t total = 0;
        rc = vsr_replay_list(st, limit, &items, &total);
        if (rc == VSR_OK) {
            vsr_buf_append_cstr(&r->body, "{\"object\":\"list\",\"data\":");
            vsr_buf_append(&r->body, items.data, items.len);
            vsr_buf_printf(&r->body, ",\"total\":%llu,\"limit\":%zu,\"backend\":\"%s\"}", (unsigned long long)total,
                           limit, backend);
        }
        vsr_buf_free(&items);
    } else if (get) {
        rc = vsr_replay_get(st, id, &r->body);
    } else {
        rc = vsr_replay_delete(st, id);
        if (rc == VSR_OK) {
            vsr_buf_append_cstr(&r->body, "{\"id\":");
            vsr_buf_append_json_string(&r->body, id);
            vsr_buf_append_cstr(&r->body, ",\"object\":\"router_replay.deleted\",\"deleted\":true}");
        }
    }
    vsr_replay_unref(st);
    if (rc == VSR_ERR_NOT_FOUND) {
        vsr_buf_t m;
        vsr_buf_init(&m, 0);
        vsr_buf_append_cstr(&m, "replay record ");
        vsr_json_append_client_text(&m, id, VSR_JSON_QUOTE_MAX);
        vsr_buf_append_cstr(&m, " not found");
        answer_error(r, 404, "invalid_request_error", "not_found", vsr_buf_slice(&m));
        vsr_buf_free(&m);
    } else if (rc != VSR_OK) {
        answer_error(r, 503, "server_error", "store_unavailable",
              VSR_SLICE_LIT("the router replay store cannot be reached"));
    }
}

void vsr__gateway_replay_init(vsr_gateway_t *gw)
{
    pthread_mutex_lock(&g_mu);
    g_closed = 0;
    pthread_mutex_unlock(&g_mu);
    if (gw->opts.admin)
        vsr_admin_set_extra(gw->opts.admin, vsr__gateway_replay_owns, handle, NULL);
}

void vsr__gateway_replay_free(vsr_gateway_t *gw)
{
    VSR_UNUSED(gw);
    pthread_mutex_lock(&g_mu);
    vsr_replay_store_t *st = g_store;
    g_store = NULL;
    g_sig[0] = 0;
    g_closed = 1;
    pthread_mutex_unlock(&g_mu);
    /* the writer closes its connection on its own thread (a statement in
     * flight is bounded by the store's timeouts); the process's end waits
     * for it on the exit list (base.h), so exit() does not cut it off */
    vsr_replay_unref(st);
}
