/*
 * cfg_memory.c — the memory plugin's configuration (ref §2.1) and its store,
 * global.stores.memory: the in-process store (backend memory, vsr's default)
 * or Redis / Valkey (backend valkey or redis, the `valkey` block).  Milvus
 * and Qdrant are refused when selected ("not supported yet"), and their
 * blocks are accepted inert otherwise, as for the other stores.
 */
#include <regex.h>
#include <stdio.h>

#include "config/cfg_internal.h"

#define CONF_OFF(m) offsetof(config_box_t, conf.m)
#define MEM_OFF(m) offsetof(config_box_t, conf.mem_store.m)
#define PM(m) offsetof(vsr_plugin_conf_t, u.memory.m)
#define RF(m) offsetof(vsr_memory_reflection_conf_t, m)

/* block_patterns: each must compile as vsr reads it (POSIX extended,
 * case-insensitive) */
static int decode_block_patterns(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    const vsr_strlist_conf_t *l = (const vsr_strlist_conf_t *)((char *)obj + f->offset);
    for (size_t i = 0; i < l->n; i++) {
        regex_t re;
        if (regcomp(&re, l->items[i], REG_EXTENDED | REG_ICASE | REG_NOSUB) != 0) {
            vsr__cfg_node_error(d, val->items[i], "block_patterns: %s is not a POSIX extended regular expression",
                                vsr__cfg_quote(d->pool, l->items[i], strlen(l->items[i])));
            return -1;
        }
        regfree(&re);
    }
    return 0;
}

static const char *const reflection_algorithms[] = {"heuristic", "recency_semantic", "noop", NULL};

static int decode_algorithm(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    vsr_memory_reflection_conf_t *r = obj;
    /* the reference runs anything it does not know as heuristic (its own
     * documents say recency_semantic) */
    r->noop = strcmp(s, "noop") == 0;
    r->has_algorithm = 1;
    int known = 0;
    for (size_t i = 0; reflection_algorithms[i]; i++)
        known |= strcmp(s, reflection_algorithms[i]) == 0;
    if (!known)
        vsr__cfg_warn(d, "%s:%u:%u: %s %s is not known: the heuristic gate runs, as in the reference", d->dg->file,
                      val->line, val->col, d->path, vsr__cfg_quote(d->pool, s, val->len));
    return 0;
}

static const cfg_field_t reflection_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = RF(enabled), .has_offset = RF(has_enabled)},
    {.key = "algorithm", .decode = decode_algorithm},
    {.key = "max_inject_tokens", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = RF(max_inject_tokens), .size = 8,
     .min = 1, .max = 1 << 20, .has_offset = RF(has_max_inject_tokens)},
    {.key = "recency_decay_days", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = RF(recency_decay_days),
     .size = 8, .min = 0, .max = 36500, .has_offset = RF(has_recency_decay_days)},
    {.key = "dedup_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = RF(dedup_threshold), .dmin = 0,
     .dmax = 1, .has_offset = RF(has_dedup_threshold)},
    {.key = "block_patterns", .decode = decode_block_patterns, .flags = CFG_HAS | CFG_NULL_OK,
     .offset = RF(block_patterns), .has_offset = RF(has_block_patterns)},
};

static const cfg_spec_t reflection_spec = {
    .size = sizeof(vsr_memory_reflection_conf_t),
    .fields = reflection_fields,
    .n_fields = VSR_ARRAY_LEN(reflection_fields),
};

static int decode_plugin_hybrid_mode(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    vsr_plugin_memory_conf_t *m = &((vsr_plugin_conf_t *)obj)->u.memory;
    m->hybrid_rrf = strcmp(s, "rrf") == 0; /* anything else: weighted, as in the reference */
    m->has_hybrid_mode = 1;
    return 0;
}

static const cfg_field_t plugin_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = offsetof(vsr_plugin_conf_t, enabled)},
    {.key = "retrieval_limit", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = PM(retrieval_limit),
     .size = sizeof(uint32_t), .min = 1, .max = VSR_MEMORY_MAX_LIMIT, .has_offset = PM(has_retrieval_limit)},
    {.key = "similarity_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = PM(similarity_threshold),
     .dmin = 0, .dmax = 1, .has_offset = PM(has_similarity_threshold)},
    {.key = "auto_store", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = PM(auto_store),
     .has_offset = PM(has_auto_store)},
    {.key = "hybrid_search", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = PM(hybrid_search),
     .has_offset = PM(has_hybrid_search)},
    {.key = "hybrid_mode", .decode = decode_plugin_hybrid_mode},
    {.key = "reflection", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = PM(reflection),
     .spec = &reflection_spec},
};

static void finish_plugin(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                          size_t index)
{
    VSR_UNUSED(d);
    VSR_UNUSED(map);
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    vsr_plugin_conf_t *p = obj;
    p->u.memory.enabled = p->enabled;
}

const cfg_spec_t vsr__cfg_memory_plugin_spec = {
    .size = sizeof(vsr_plugin_conf_t),
    .fields = plugin_fields,
    .n_fields = VSR_ARRAY_LEN(plugin_fields),
    .finish = finish_plugin,
};

/* ---- global.stores.memory ---- */

static int decode_backend(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    config_box_t *b = obj;
    if (strcmp(s, "memory") == 0 || strcmp(s, "valkey") == 0 || strcmp(s, "redis") == 0) {
        b->conf.mem_store.redis = s[0] != 'm';
        return 0;
    }
    if (strcmp(s, "milvus") == 0 || strcmp(s, "qdrant") == 0) {
        vsr__cfg_node_error(d, val, "global.stores.memory.backend \"%s\" is not supported yet (memory, valkey and "
                                    "redis are)", s);
        return -1;
    }
    vsr__cfg_node_error(d, val, "backend must be memory, valkey, redis, milvus or qdrant, got %s",
                        vsr__cfg_quote(d->pool, s, val->len));
    return -1;
}

static int decode_store_hybrid_mode(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    ((config_box_t *)obj)->conf.mem_store.hybrid_rrf = strcmp(s, "rrf") == 0;
    return 0;
}

/* valkey.timeout: seconds, as the reference writes it */
static int decode_timeout(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    uint64_t secs = 0;
    cfg_field_t g = {.key = f->key, .size = 8, .min = 1, .max = 60};
    if (vsr__cfg_uint(d, &g, val, &secs) != 0)
        return -1;
    ((config_box_t *)obj)->conf.mem_store.redis_timeout_ms = secs * 1000;
    return 0;
}

#define VK_INERT(k, why) {.key = (k), .inert = (why)}

static const cfg_field_t valkey_fields[] = {
    {.key = "host", .decode = vsr__cfg_string, .offset = MEM_OFF(redis_host)},
    {.key = "port", .decode = vsr__cfg_uint, .offset = MEM_OFF(redis_port), .size = 8, .min = 1, .max = 65535},
    {.key = "database", .decode = vsr__cfg_uint, .offset = MEM_OFF(redis_db), .size = 8, .min = 0, .max = 15},
    {.key = "password", .decode = vsr__cfg_string, .offset = MEM_OFF(redis_password)},
    {.key = "timeout", .decode = decode_timeout},
    {.key = "collection_prefix", .decode = vsr__cfg_string, .offset = MEM_OFF(redis_key_prefix)},
    VK_INERT("index_name", "vsr keeps no server-side vector index: it searches a user's bounded set itself"),
    VK_INERT("dimension", "the runtime's embedding model gives the dimension"),
    VK_INERT("metric_type", "vsr compares memories by cosine similarity"),
    VK_INERT("index_m", "vsr keeps no server-side vector index"),
    VK_INERT("index_ef_construction", "vsr keeps no server-side vector index"),
    {.key = "tls_enabled", .decode = vsr__cfg_redis_tls},
    VK_INERT("tls_ca_path", "used only with tls_enabled, which vsr does not support"),
    VK_INERT("tls_insecure_skip_verify", "used only with tls_enabled, which vsr does not support"),
};

static const cfg_spec_t valkey_spec = {
    .size = sizeof(config_box_t),
    .fields = valkey_fields,
    .n_fields = VSR_ARRAY_LEN(valkey_fields),
};

static const cfg_field_t quality_fields[] = {
    {.key = "max_memories_per_user", .decode = vsr__cfg_uint, .offset = MEM_OFF(max_memories_per_user), .size = 8,
     .min = 1, .max = VSR_MEMORY_MAX_PER_USER},
    {.key = "initial_strength_days", .decode = vsr__cfg_uint, .offset = MEM_OFF(initial_strength_days), .size = 8,
     .min = 1, .max = 36500},
    {.key = "prune_threshold", .decode = vsr__cfg_double, .offset = MEM_OFF(prune_threshold), .dmin = 0, .dmax = 1},
};

static const cfg_spec_t quality_spec = {
    .size = sizeof(config_box_t),
    .fields = quality_fields,
    .n_fields = VSR_ARRAY_LEN(quality_fields),
};

static const cfg_field_t store_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = MEM_OFF(enabled)},
    {.key = "backend", .decode = decode_backend},
    {.key = "auto_store", .decode = vsr__cfg_bool, .offset = MEM_OFF(auto_store)},
    {.key = "disabled_routes", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = MEM_OFF(disabled_routes)},
    {.key = "disabled_models", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = MEM_OFF(disabled_models)},
    {.key = "default_retrieval_limit", .decode = vsr__cfg_uint, .offset = MEM_OFF(default_retrieval_limit), .size = 8,
     .min = 1, .max = VSR_MEMORY_MAX_LIMIT},
    {.key = "default_similarity_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS,
     .offset = MEM_OFF(default_similarity_threshold), .dmin = 0, .dmax = 1,
     .has_offset = MEM_OFF(has_default_similarity_threshold)},
    {.key = "hybrid_search", .decode = vsr__cfg_bool, .offset = MEM_OFF(hybrid_search)},
    {.key = "hybrid_mode", .decode = decode_store_hybrid_mode},
    {.key = "quality_scoring", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &quality_spec},
    {.key = "reflection", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = MEM_OFF(reflection),
     .spec = &reflection_spec},
    {.key = "valkey", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &valkey_spec},
    {.key = "redis", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &valkey_spec, .alias_of = "valkey"},
    {.key = "milvus", .inert = "read only with backend: milvus, which is not supported yet"},
    {.key = "qdrant", .inert = "read only with backend: qdrant, which is not supported yet"},
    {.key = "redis_cache", .inert = "vsr reads a user's memories from the store itself, with no cache in front"},
    {.key = "embedding_model", .inert = "the runtime's embedding model embeds memories and queries"},
    {.key = "extraction_batch_size", .inert = "vsr stores each turn as it ends; nothing is extracted in batches"},
    {.key = "adaptive_threshold", .inert = "the threshold is the plugin's or default_similarity_threshold"},
};

const cfg_spec_t vsr__cfg_memory_store_spec = {
    .size = sizeof(config_box_t),
    .fields = store_fields,
    .n_fields = VSR_ARRAY_LEN(store_fields),
};
