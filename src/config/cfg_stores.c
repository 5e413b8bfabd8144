/*
 * cfg_stores.c — the store blocks: global.services.response_api,
 * global.services.router_replay and global.stores, with the keys of the
 * reference's Redis client that every Redis-backed store shares (its pool
 * and timeout knobs are inert, TLS not supported yet; cluster mode is Redis
 * Cluster, store_redis_cluster.c), the
 * response cache's `connection` spelling of a Redis address, and the blocks
 * of backends vsr has no client for (Milvus, Qdrant, PostgreSQL), accepted
 * while the document does not select them (store_backend / backend_type
 * says "not supported yet" when it does).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/cfg_internal.h"

#define UNIMPLEMENTED(k) {.key = (k), .flags = CFG_UNIMPLEMENTED}
#define BOX_OFF(m) offsetof(config_box_t, m)
#define CONF_OFF(m) offsetof(config_box_t, conf.m)

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
    {.key = "password", .decode = vsr__cfg_string_or_unset, .offset = RC_OFF(password)},
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

/* ---- global.services.response_api, .router_replay, global.stores ---- */

/* redis.password_env: the password from the environment, read at load (an
 * unset variable: a warning, and no password) */
static int decode_password_env(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *name = vsr__cfg_get_string(d, f, val);
    if (name == NULL)
        return -1;
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') {
        vsr__cfg_warn(d, "%s:%u:%u: environment variable %s is not set: Redis is reached without a password",
                      d->dg->file, val->line, val->col, name);
        return 0;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, v);
    return 0;
}

static int decode_resp_backend(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "memory") != 0 && strcmp(s, "redis") != 0) {
        vsr__cfg_node_error(d, val, "store_backend must be memory or redis, got %s", vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    ((config_box_t *)obj)->conf.resp_store.redis = s[0] == 'r';
    return 0;
}

/* A store's redis block (response_api, stores.response_cache, router_replay):
 * the same keys into the same-named members of the store's struct. */
#define REDIS_FIELDS(st)                                                                                         \
    {.key = "address", .decode = vsr__cfg_string, .offset = CONF_OFF(st.redis_address)},                       \
    {.key = "password", .decode = vsr__cfg_string_or_unset, .offset = CONF_OFF(st.redis_password)},            \
    {.key = "password_env", .decode = decode_password_env, .offset = CONF_OFF(st.redis_password)},            \
    {.key = "db", .decode = vsr__cfg_uint, .offset = CONF_OFF(st.redis_db), .size = 8, .min = 0, .max = 15},   \
    {.key = "key_prefix", .decode = vsr__cfg_string, .offset = CONF_OFF(st.redis_key_prefix)},                 \
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = CONF_OFF(st.redis_timeout_ms)},               \
    {.key = "connection", .decode = vsr__cfg_redis_connection, .flags = CFG_NULL_OK,                           \
     .arg = &(const cfg_redis_offsets_t){CONF_OFF(st.redis_address), CONF_OFF(st.redis_password),            \
                                         CONF_OFF(st.redis_db), CONF_OFF(st.redis_timeout_ms)}},              \
    {.key = "cluster_mode", .decode = vsr__cfg_bool, .offset = CONF_OFF(st.redis_cluster)},                    \
    {.key = "cluster_addresses", .decode = vsr__cfg_strlist, .offset = CONF_OFF(st.redis_cluster_addresses)}, \
    CFG_REDIS_EXTRA_FIELDS

/* cluster_mode: at least one "host:port" in cluster_addresses, db 0 (a
 * cluster has no other); address is then unused. */
static void check_redis_cluster(cfg_decoder_t *d, const cfg_node_t *map, const cfg_spec_t *spec,
                                const cfg_node_t *const *seen, int cluster, const vsr_strlist_conf_t *addrs,
                                uint64_t db)
{
    const cfg_node_t *mode = vsr__cfg_seen(spec, seen, "cluster_mode");
    const cfg_node_t *list = vsr__cfg_seen(spec, seen, "cluster_addresses");
    if (!cluster)
        return;
    if (addrs->n == 0) {
        vsr__cfg_node_error(d, list ? list : mode ? mode : map, "cluster_mode needs cluster_addresses (\"host:port\" "
                                                                "of at least one node)");
        return;
    }
    for (size_t i = 0; i < addrs->n; i++) {
        const char *a = addrs->items[i];
        const char *colon = strrchr(a, ':');
        uint64_t port = 0;
        if (!colon || colon == a || (size_t)(colon - a) >= 64 ||
            vsr_slice_to_u64(vsr_slice_cstr(colon + 1), 65535, &port) != VSR_OK || port == 0) {
            vsr__cfg_node_error(d, list && list->kind == CFG_NODE_SEQ && i < list->n ? list->items[i] : map,
                                "cluster_addresses: want \"host:port\", got %s",
                                vsr__cfg_quote(d->pool, a, strlen(a)));
            return;
        }
    }
    if (db != 0)
        vsr__cfg_node_error(d, vsr__cfg_seen(spec, seen, "db") ? vsr__cfg_seen(spec, seen, "db") : map,
                            "a Redis Cluster has only db 0");
}

#define REDIS_FINISH(name, st, spec)                                                                               \
    static void name(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen, size_t i) \
    {                                                                                                              \
        VSR_UNUSED(i);                                                                                             \
        config_box_t *b = obj;                                                                                     \
        check_redis_cluster(d, map, &spec, seen, b->conf.st.redis_cluster, &b->conf.st.redis_cluster_addresses,    \
                            b->conf.st.redis_db);                                                                  \
    }

static const cfg_field_t resp_redis_fields[] = {REDIS_FIELDS(resp_store)};
static const cfg_spec_t resp_redis_spec;
REDIS_FINISH(finish_resp_redis, resp_store, resp_redis_spec)

static const cfg_spec_t resp_redis_spec = {
    .size = sizeof(config_box_t),
    .fields = resp_redis_fields,
    .n_fields = VSR_ARRAY_LEN(resp_redis_fields),
    .finish = finish_resp_redis,
};

static const cfg_field_t response_api_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = CONF_OFF(response_api_enabled)},
    {.key = "store_backend", .decode = decode_resp_backend},
    {.key = "ttl_seconds", .decode = vsr__cfg_uint, .offset = CONF_OFF(resp_store.ttl_seconds), .size = 8, .min = 1,
     .max = 365 * 86400},
    {.key = "max_responses", .decode = vsr__cfg_uint, .offset = CONF_OFF(resp_store.max_responses), .size = 8,
     .min = 1, .max = 10000000},
    {.key = "redis", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &resp_redis_spec},
};

const cfg_spec_t vsr__cfg_response_api_spec = {
    .size = sizeof(config_box_t),
    .fields = response_api_fields,
    .n_fields = VSR_ARRAY_LEN(response_api_fields),
};

/* global.services.router_replay: where router_replay plugins' records go */
static int decode_replay_backend(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "memory") == 0 || strcmp(s, "redis") == 0 || strcmp(s, "postgres") == 0) {
        ((config_box_t *)obj)->conf.replay_store.redis = s[0] == 'r';
        ((config_box_t *)obj)->conf.replay_store.postgres = s[0] == 'p';
        return 0;
    }
    if (strcmp(s, "milvus") == 0 || strcmp(s, "qdrant") == 0) {
        vsr__cfg_node_error(d, val, "global.services.router_replay.store_backend \"%s\" is not supported yet "
                                    "(memory, redis and postgres are)", s);
        return -1;
    }
    vsr__cfg_node_error(d, val, "store_backend must be memory, redis, postgres, milvus or qdrant, got %s",
                        vsr__cfg_quote(d->pool, s, val->len));
    return -1;
}

static const cfg_field_t replay_redis_fields[] = {REDIS_FIELDS(replay_store)};
static const cfg_spec_t replay_redis_spec;
REDIS_FINISH(finish_replay_redis, replay_store, replay_redis_spec)

static const cfg_spec_t replay_redis_spec = {
    .size = sizeof(config_box_t),
    .fields = replay_redis_fields,
    .n_fields = VSR_ARRAY_LEN(replay_redis_fields),
    .finish = finish_replay_redis,
};

/* router_replay.postgres: the reference's RouterReplayPostgresConfig */
static const char *const pg_ssl_modes[] = {"disable", "allow", "prefer", "require", "verify-ca", "verify-full", NULL};

/* table_name goes into SQL as it is: an identifier PostgreSQL folds to lower
 * case, short enough for its index names (idx_<table>_created_at) */
static int decode_pg_table(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    size_t n = strlen(s), ok = n >= 1 && n <= 48 && (isalpha((unsigned char)s[0]) || s[0] == '_');
    for (size_t i = 1; ok && i < n; i++)
        ok = isalnum((unsigned char)s[i]) || s[i] == '_';
    if (!ok) {
        vsr__cfg_node_error(d, val, "table_name must be 1 to 48 letters, digits and _ (not a digit first), got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

static const cfg_field_t replay_pg_fields[] = {
    {.key = "host", .decode = vsr__cfg_string, .offset = CONF_OFF(replay_store.pg_host)},
    {.key = "port", .decode = vsr__cfg_uint, .offset = CONF_OFF(replay_store.pg_port), .size = 8, .min = 1,
     .max = 65535},
    {.key = "database", .decode = vsr__cfg_string, .offset = CONF_OFF(replay_store.pg_database)},
    {.key = "user", .decode = vsr__cfg_string, .offset = CONF_OFF(replay_store.pg_user)},
    {.key = "password", .decode = vsr__cfg_string, .offset = CONF_OFF(replay_store.pg_password)},
    {.key = "ssl_mode", .decode = vsr__cfg_string, .offset = CONF_OFF(replay_store.pg_ssl_mode),
     .choices = pg_ssl_modes},
    UNIMPLEMENTED("max_open_conns"), /* one writer connection; each management read opens its own */
    UNIMPLEMENTED("max_idle_conns"),
    {.key = "conn_max_lifetime", .decode = vsr__cfg_uint, .offset = CONF_OFF(replay_store.pg_conn_max_lifetime),
     .size = 8, .min = 0, .max = 365 * 86400},
    {.key = "table_name", .decode = decode_pg_table, .offset = CONF_OFF(replay_store.pg_table_name)},
};

static const cfg_spec_t replay_pg_spec = {
    .size = sizeof(config_box_t),
    .fields = replay_pg_fields,
    .n_fields = VSR_ARRAY_LEN(replay_pg_fields),
};

static const cfg_field_t router_replay_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = CONF_OFF(replay_store.enabled)},
    {.key = "store_backend", .decode = decode_replay_backend},
    {.key = "ttl_seconds", .decode = vsr__cfg_uint, .offset = CONF_OFF(replay_store.ttl_seconds), .size = 8,
     .min = 1, .max = 365 * 86400},
    {.key = "async_writes", .decode = vsr__cfg_bool, .offset = CONF_OFF(replay_store.async_writes)},
    {.key = "redis", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &replay_redis_spec},
    {.key = "postgres", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &replay_pg_spec},
    {.key = "milvus", .inert = "read only with store_backend: milvus, which is not supported yet"},
    {.key = "qdrant", .inert = "read only with store_backend: qdrant, which is not supported yet"},
};


/* store_backend: postgres needs postgres.database and postgres.user, as the
 * reference's router does.  A document that names no server (no postgres
 * block, or no host in it) and lacks one of them is written for the
 * reference's local stack, whose CLI fills in the managed server's
 * credentials for every key that is missing (database vsr, user router,
 * password router-secret); vsr does the same, on localhost, with a warning.
 * With a host named, the two stay required (a blank string is refused). */
static const struct {
    const char *key, *value;
    size_t offset;
} pg_stack_defaults[] = {
    {"database", "vsr", offsetof(vsr_config_t, replay_store.pg_database)},
    {"user", "router", offsetof(vsr_config_t, replay_store.pg_user)},
    {"password", "router-secret", offsetof(vsr_config_t, replay_store.pg_password)},
};

static void finish_router_replay(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                                 size_t index)
{
    VSR_UNUSED(index);
    vsr_config_t *c = &((config_box_t *)obj)->conf;
    if (!c->replay_store.postgres)
        return;
    const cfg_node_t *pg = vsr__cfg_seen(&vsr__cfg_router_replay_spec, seen, "postgres");
    const cfg_node_t *host = pg && pg->kind == CFG_NODE_MAP ? vsr__cfg_map_get(pg, "host") : NULL;
    int lacks = c->replay_store.pg_database == NULL || c->replay_store.pg_user == NULL;
    if (lacks && host == NULL) {
        char said[128] = "";
        size_t n = 0;
        for (size_t i = 0; i < VSR_ARRAY_LEN(pg_stack_defaults); i++) {
            char **v = (char **)((char *)c + pg_stack_defaults[i].offset);
            if (*v != NULL)
                continue;
            *v = vsr__cfg_strdup(d, pg_stack_defaults[i].value);
            int secret = strcmp(pg_stack_defaults[i].key, "password") == 0; /* its value stays out of logs */
            n += (size_t)snprintf(said + n, sizeof(said) - n, "%s%s%s%s", n ? ", " : "", pg_stack_defaults[i].key,
                                  secret ? "" : " ", secret ? "" : pg_stack_defaults[i].value);
        }
        if (n)
            vsr__cfg_warn(d, "%s:%u:%u: global.services.router_replay: store_backend postgres names no server: "
                          "using the reference's local stack defaults on %s:%llu (%s)",
                          d->dg->file, (pg ? pg : map)->line, (pg ? pg : map)->col, c->replay_store.pg_host,
                          (unsigned long long)c->replay_store.pg_port, said);
        return;
    }
    const char *missing = c->replay_store.pg_database == NULL ? "database" : c->replay_store.pg_user == NULL ? "user"
                                                                                                          : NULL;
    if (missing)
        vsr__cfg_node_error(d, pg ? pg : map, "store_backend postgres needs postgres.%s", missing);
}

const cfg_spec_t vsr__cfg_router_replay_spec = {
    .size = sizeof(config_box_t),
    .fields = router_replay_fields,
    .n_fields = VSR_ARRAY_LEN(router_replay_fields),
    .finish = finish_router_replay,
};

/* global.stores.response_cache */
static int decode_rc_backend(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    config_box_t *b = obj;
    if (strcmp(s, "memory") == 0 || strcmp(s, "redis") == 0 || strcmp(s, "valkey") == 0) {
        b->conf.rc_store.redis = s[0] != 'm'; /* valkey speaks Redis's protocol */
        return 0;
    }
    if (strcmp(s, "milvus") == 0 || strcmp(s, "hybrid") == 0) {
        vsr__cfg_node_error(d, val, "global.stores.response_cache.backend_type \"%s\" is not supported yet (memory, "
                                    "redis and valkey are)", s);
        return -1;
    }
    vsr__cfg_node_error(d, val, "backend_type must be memory, redis, valkey, milvus or hybrid, got %s",
                        vsr__cfg_quote(d->pool, s, val->len));
    return -1;
}

/* lru, lfu or fifo: the memory store's order; for redis, lfu and fifo
 * bound the entries with vsr's own bookkeeping (docs/configuration.md) */
static int decode_rc_eviction(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    static const char *const names[] = {"lru", "lfu", "fifo"};
    config_box_t *b = obj;
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            b->conf.rc_store.eviction = i;
            b->conf.rc_store.has_eviction = 1;
            return 0;
        }
    vsr__cfg_node_error(d, val, "eviction_policy must be lru, lfu or fifo, got %s", vsr__cfg_quote(d->pool, s, val->len));
    return -1;
}

/* similarity_threshold: kept (vsr config print shows it) but, as in the
 * reference, not cascaded to the plugins, whose threshold defaults to 0.8 */
static int decode_rc_threshold(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_double(d, f, val, obj) != 0)
        return -1;
    vsr__cfg_warn(d, "%s:%u:%u: %s is accepted and has no effect in vsr: a response_cache plugin's threshold is its "
                     "own semantic.similarity_threshold (default %g); the store's is not cascaded",
                  d->dg->file, d->key->line, d->key->col, d->path, VSR_RC_DEFAULT_THRESHOLD);
    return 0;
}

static const cfg_field_t rc_redis_fields[] = {REDIS_FIELDS(rc_store)};
static const cfg_spec_t rc_redis_spec;
REDIS_FINISH(finish_rc_redis, rc_store, rc_redis_spec)

static const cfg_spec_t rc_redis_spec = {
    .size = sizeof(config_box_t),
    .fields = rc_redis_fields,
    .n_fields = VSR_ARRAY_LEN(rc_redis_fields),
    .finish = finish_rc_redis,
};

static const cfg_field_t rc_store_fields[] = {
    {.key = "backend_type", .decode = decode_rc_backend},
    {.key = "similarity_threshold", .decode = decode_rc_threshold, .offset = CONF_OFF(rc_store.similarity_threshold),
     .dmin = 0, .dmax = 1},
    {.key = "max_entries", .decode = vsr__cfg_uint, .offset = CONF_OFF(rc_store.max_entries), .size = 8, .min = 1,
     .max = 10000000},
    {.key = "ttl_seconds", .decode = vsr__cfg_uint, .offset = CONF_OFF(rc_store.ttl_seconds), .size = 8, .min = 1,
     .max = 365 * 86400},
    {.key = "max_bytes", .decode = vsr__cfg_uint, .offset = CONF_OFF(rc_store.max_bytes), .size = 8,
     .min = 1 << 16, .max = (int64_t)1 << 40},
    {.key = "eviction_policy", .decode = decode_rc_eviction},
    {.key = "redis", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &rc_redis_spec},
    /* valkey speaks Redis's protocol: its block is the redis block */
    {.key = "valkey", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &rc_redis_spec, .alias_of = "redis"},
    UNIMPLEMENTED("embedding_model"), /* the runtime's embedding model serves the semantic lookup */
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = CONF_OFF(rc_store.enabled)},
    {.key = "milvus", .inert = "read only with backend_type: milvus, which is not supported yet"},
    {.key = "qdrant", .inert = "read only with backend_type: qdrant, which is not supported yet"},
    {.key = "polarity_guard", .inert = "vsr's semantic cache does not compare the polarity of a hit with the request"},
};

static const cfg_spec_t rc_store_spec = {
    .size = sizeof(config_box_t),
    .fields = rc_store_fields,
    .n_fields = VSR_ARRAY_LEN(rc_store_fields),
};

static const cfg_field_t stores_fields[] = {
    {.key = "response_cache", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &rc_store_spec},
    {.key = "semantic_cache", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &rc_store_spec,
     .alias_of = "response_cache", .deprecated = "the reference renamed it global.stores.response_cache"},
    {.key = "memory", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &vsr__cfg_memory_store_spec},
    UNIMPLEMENTED("vector_store"),
};

const cfg_spec_t vsr__cfg_stores_spec = {
    .size = sizeof(config_box_t),
    .fields = stores_fields,
    .n_fields = VSR_ARRAY_LEN(stores_fields),
};
