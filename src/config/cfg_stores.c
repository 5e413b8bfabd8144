/*
 * cfg_stores.c — the keys of the reference's store blocks that vsr reads
 * differently from the reference: the Redis client's knobs shared by every
 * Redis-backed store, the response cache's `connection` spelling of a Redis
 * address, and the blocks of backends vsr has no client for (Milvus, Qdrant,
 * PostgreSQL), which are accepted as long as the document does not select
 * them (store_backend / backend_type says "not supported yet" when it does).
 */
#include <stdio.h>

#include "config/cfg_internal.h"

/* cluster_mode: true needs a cluster client (MOVED/ASK). */
int vsr__cfg_redis_cluster_mode(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    int on = 0;
    cfg_field_t b = {.key = f->key};
    if (vsr__cfg_bool(d, &b, val, &on) != 0)
        return -1;
    if (on) {
        vsr__cfg_node_error(d, d->key ? d->key : val, "%s is not supported yet (vsr talks to one Redis node)", d->path);
        return -1;
    }
    VSR_UNUSED(obj);
    return 0;
}

/* tls_enabled / use_tls: true would send the password in clear text to a
 * server that expects TLS, so it is refused rather than ignored. */
int vsr__cfg_redis_tls(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    int on = 0;
    cfg_field_t b = {.key = f->key};
    if (vsr__cfg_bool(d, &b, val, &on) != 0)
        return -1;
    if (on) {
        vsr__cfg_node_error(d, d->key ? d->key : val, "%s is not supported yet (vsr reaches Redis without TLS)",
                            d->path);
        return -1;
    }
    VSR_UNUSED(obj);
    return 0;
}

/* ---- response_cache.redis.connection: the reference's spelling of an address ---- */

typedef struct {
    char *host;
    uint64_t port, database, timeout_s;
    char *password;
    int tls;
} redis_conn_t;

#define RC_OFF(m) offsetof(redis_conn_t, m)

static const cfg_field_t conn_tls_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_redis_tls},
    {.key = "ca_file", .decode = vsr__cfg_accept_text, .inert = "used only with tls.enabled, which vsr does not support"},
    {.key = "cert_file", .decode = vsr__cfg_accept_text, .inert = "used only with tls.enabled, which vsr does not support"},
    {.key = "key_file", .decode = vsr__cfg_accept_text, .inert = "used only with tls.enabled, which vsr does not support"},
};

static const cfg_spec_t conn_tls_spec = {
    .size = CFG_INERT_SIZE,
    .fields = conn_tls_fields,
    .n_fields = VSR_ARRAY_LEN(conn_tls_fields),
};

static const cfg_field_t conn_fields[] = {
    {.key = "host", .decode = vsr__cfg_string, .offset = RC_OFF(host)},
    {.key = "port", .decode = vsr__cfg_uint, .offset = RC_OFF(port), .size = 8, .min = 1, .max = 65535},
    {.key = "database", .decode = vsr__cfg_uint, .offset = RC_OFF(database), .size = 8, .min = 0, .max = 15},
    {.key = "password", .decode = vsr__cfg_string, .offset = RC_OFF(password)},
    {.key = "timeout", .decode = vsr__cfg_uint, .offset = RC_OFF(timeout_s), .size = 8, .min = 0, .max = 3600},
    {.key = "tls", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &conn_tls_spec},
};

static const cfg_spec_t conn_spec = {
    .size = sizeof(redis_conn_t),
    .fields = conn_fields,
    .n_fields = VSR_ARRAY_LEN(conn_fields),
};

/* connection: {host, port, database, password, timeout} sets the store's
 * address ("host:port", port 6379 when absent), db, password and per-call
 * timeout (seconds; 0 keeps the default).  obj is the store's block; the
 * members are found through the offsets the store's table gives. */
int vsr__cfg_redis_connection(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    redis_conn_t c = {0};
    if (vsr__cfg_decode_object(d, &conn_spec, val, &c, 0) != 0)
        return -1;
    const cfg_redis_offsets_t *o = f->arg;
    VSR_BUG_ON(o == NULL);
    char *base = obj;
    if (c.host != NULL) {
        int v6 = strchr(c.host, ':') != NULL;
        char addr[512];
        snprintf(addr, sizeof(addr), "%s%s%s:%llu", v6 ? "[" : "", c.host, v6 ? "]" : "",
                 (unsigned long long)(c.port ? c.port : 6379));
        *(char **)(base + o->address) = vsr__cfg_strdup(d, addr);
    }
    if (vsr__cfg_map_get(val, "database") != NULL)
        *(uint64_t *)(base + o->db) = c.database;
    if (c.password != NULL)
        *(char **)(base + o->password) = c.password;
    if (c.timeout_s > 0)
        *(uint64_t *)(base + o->timeout_ms) = c.timeout_s * 1000;
    return 0;
}
