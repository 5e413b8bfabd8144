/*
 * cfg_rag.c — the rag plugin's configuration (ref §2.2, docs/plugins.md
 * "rag"): the plugin's own keys, then backend_config read by the backend it
 * names (hybrid: primary_config and fallback_config by theirs).
 *
 * Every backend is an HTTP endpoint vsr calls through the upstream layer:
 * each becomes a model of one backend (vsr_rag_backend_conf_t.model), listed
 * in cfg->plugin_models so that the snapshot's clusters include it.
 * milvus, qdrant and vectorstore (the reference's own vector store service)
 * are refused as not supported yet.
 */
#include <stdio.h>
#include <strings.h>

#include "config/cfg_internal.h"

#define RAG_OFF(m) offsetof(vsr_plugin_rag_conf_t, m)
#define RB_OFF(m) offsetof(vsr_rag_backend_conf_t, m)

static const char *const rag_backends[] = {"milvus", "qdrant", "external_api", "mcp", "openai", "vectorstore",
                                           "hybrid", NULL};
static const char *const rag_injection[] = {"tool_role", "system_prompt", NULL};
static const char *const rag_on_failure[] = {"skip", "warn", "block", NULL};
static const char *const rag_formats[] = {"pinecone", "weaviate", "elasticsearch", "custom", NULL};

/* timeout_seconds: whole seconds, 1..600, stored in ms */
static int decode_seconds(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    cfg_field_t g = *f;
    uint64_t secs = 0;
    g.offset = 0;
    g.size = sizeof(uint64_t);
    g.min = 1;
    g.max = 600;
    if (vsr__cfg_uint(d, &g, val, &secs) != 0)
        return -1;
    *(uint64_t *)((char *)obj + f->offset) = secs * 1000;
    return 0;
}

/* headers: {Name: value, ...}, sent with every call (the backend's extra_headers) */
static int decode_headers(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_rag_backend_conf_t *b = obj;
    return vsr__cfg_header_map(d, f->key, "a header value", val, &b->headers, &b->n_headers);
}

/* An object kept as JSON text (mcp tool_arguments, openai filter). */
static int decode_json_object(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "%s: expected a mapping, got %s", f->key, vsr__cfg_node_what(val));
        return -1;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 1 << 20);
    int rc = vsr__cfg_canonical_node(&b, val);
    if (rc == VSR_OK)
        *(char **)((char *)obj + f->offset) = vsr_pool_strndup(d->pool, b.data ? b.data : "", b.len);
    else
        vsr__cfg_node_error(d, val, "%s: cannot be written as JSON (too deep or too large)", f->key);
    vsr_buf_free(&b);
    return rc == VSR_OK ? 0 : -1;
}

/* cache_ttl_seconds: 1 s .. 30 days, stored in ms */
static int decode_ttl(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    cfg_field_t g = *f;
    uint64_t secs = 0;
    g.offset = 0;
    g.size = sizeof(uint64_t);
    g.min = 1;
    g.max = 86400 * 30;
    if (vsr__cfg_uint(d, &g, val, &secs) != 0)
        return -1;
    *(uint64_t *)((char *)obj + f->offset) = secs * 1000;
    return 0;
}

/* A block read later by the backend it belongs to: here only its shape. */
static int accept_map(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(obj);
    if (val->kind == CFG_NODE_MAP)
        return 0;
    vsr__cfg_node_error(d, val, "%s: expected a mapping, got %s", f->key, vsr__cfg_node_what(val));
    return -1;
}

static const cfg_field_t external_api_fields[] = {
    {.key = "endpoint", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = RB_OFF(endpoint)},
    {.key = "api_key", .decode = vsr__cfg_header_text, .offset = RB_OFF(backend.api_key)},
    {.key = "auth_header", .decode = vsr__cfg_header_name, .offset = RB_OFF(backend.auth_header)},
    {.key = "request_format", .decode = vsr__cfg_choice, .flags = CFG_REQUIRED, .offset = RB_OFF(format),
     .choices = rag_formats},
    {.key = "request_template", .decode = vsr__cfg_string, .offset = RB_OFF(request_template)},
    {.key = "timeout_seconds", .decode = decode_seconds, .offset = RB_OFF(timeout_ms)},
    {.key = "headers", .decode = decode_headers},
    {.key = "max_response_bytes", .decode = vsr__cfg_uint, .offset = RB_OFF(max_response_bytes), .size = 8,
     .min = 1024, .max = (int64_t)64 << 20},
};
static const cfg_spec_t external_api_spec = {.size = sizeof(vsr_rag_backend_conf_t),
                                             .fields = external_api_fields,
                                             .n_fields = VSR_ARRAY_LEN(external_api_fields)};

static const cfg_field_t mcp_fields[] = {
    /* vsr: the MCP server's streamable HTTP URL (the reference resolves server_name through a tools
     * database that has no MCP client) */
    {.key = "endpoint", .decode = vsr__cfg_string, .offset = RB_OFF(endpoint)},
    {.key = "server_name", .decode = vsr__cfg_string, .offset = RB_OFF(server_name)},
    {.key = "tool_name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = RB_OFF(tool_name)},
    {.key = "tool_arguments", .decode = decode_json_object, .flags = CFG_NULL_OK, .offset = RB_OFF(tool_arguments)},
    {.key = "timeout_seconds", .decode = decode_seconds, .offset = RB_OFF(timeout_ms)},
    {.key = "api_key", .decode = vsr__cfg_header_text, .offset = RB_OFF(backend.api_key)},
    {.key = "headers", .decode = decode_headers},
    {.key = "max_response_bytes", .decode = vsr__cfg_uint, .offset = RB_OFF(max_response_bytes), .size = 8,
     .min = 1024, .max = (int64_t)64 << 20},
};
static const cfg_spec_t mcp_spec = {.size = sizeof(vsr_rag_backend_conf_t),
                                    .fields = mcp_fields,
                                    .n_fields = VSR_ARRAY_LEN(mcp_fields)};

static const char *const openai_modes[] = {"direct_search", "tool_based", NULL};

static int decode_openai_mode(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    int which = 0;
    cfg_field_t g = *f;
    g.offset = 0;
    if (vsr__cfg_choice(d, &g, val, &which) != 0)
        return -1;
    if (which == 1) {
        vsr__cfg_node_error(d, val, "rag: workflow_mode tool_based is not supported yet (it hands a file_search tool "
                                    "to the model); use direct_search");
        return -1;
    }
    return 0;
}

static const cfg_field_t openai_fields[] = {
    {.key = "vector_store_id", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = RB_OFF(vector_store_id)},
    {.key = "base_url", .decode = vsr__cfg_string, .offset = RB_OFF(endpoint)},
    {.key = "api_key", .decode = vsr__cfg_header_text, .offset = RB_OFF(backend.api_key)},
    {.key = "max_num_results", .decode = vsr__cfg_uint, .offset = RB_OFF(max_num_results), .size = 4, .min = 1,
     .max = 50},
    {.key = "file_ids", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK,
     .inert = "file_ids apply to workflow_mode tool_based; direct_search searches the whole store"},
    {.key = "filter", .decode = decode_json_object, .flags = CFG_NULL_OK, .offset = RB_OFF(filter)},
    {.key = "timeout_seconds", .decode = decode_seconds, .offset = RB_OFF(timeout_ms)},
    {.key = "workflow_mode", .decode = decode_openai_mode, .choices = openai_modes},
    {.key = "max_response_bytes", .decode = vsr__cfg_uint, .offset = RB_OFF(max_response_bytes), .size = 8,
     .min = 1024, .max = (int64_t)64 << 20},
};
static const cfg_spec_t openai_spec = {.size = sizeof(vsr_rag_backend_conf_t),
                                       .fields = openai_fields,
                                       .n_fields = VSR_ARRAY_LEN(openai_fields)};

static const cfg_field_t rag_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = RAG_OFF(enabled)},
    /* required when enabled (finish_rag) */
    {.key = "backend", .decode = vsr__cfg_string, .offset = RAG_OFF(backend_name),
     .choices = rag_backends},
    {.key = "similarity_threshold", .decode = vsr__cfg_double, .offset = RAG_OFF(similarity_threshold), .dmin = 0,
     .dmax = 1},
    {.key = "top_k", .decode = vsr__cfg_uint, .offset = RAG_OFF(top_k), .size = 4, .min = 1, .max = 100},
    {.key = "max_context_length", .decode = vsr__cfg_uint, .offset = RAG_OFF(max_context_length), .size = 8,
     .min = 1, .max = 1 << 20},
    {.key = "injection_mode", .decode = vsr__cfg_choice, .offset = RAG_OFF(injection_mode), .choices = rag_injection},
    {.key = "backend_config", .decode = accept_map, .flags = CFG_NULL_OK}, /* read in finish, by the backend */
    {.key = "on_failure", .decode = vsr__cfg_choice, .offset = RAG_OFF(on_failure), .choices = rag_on_failure},
    {.key = "cache_results", .decode = vsr__cfg_bool, .offset = RAG_OFF(cache_results)},
    {.key = "cache_ttl_seconds", .decode = decode_ttl, .offset = RAG_OFF(cache_ttl_ms)},
    {.key = "min_confidence_threshold", .decode = vsr__cfg_double, .flags = CFG_HAS,
     .offset = RAG_OFF(min_confidence_threshold), .dmin = 0, .dmax = 1, .has_offset = RAG_OFF(has_min_confidence)},
    {.key = "rerank", .decode = vsr__cfg_accept_text, .inert = "rerank applies to the vectorstore backend"},
};

static const char *const hybrid_strategies[] = {"sequential", "parallel", NULL};

typedef struct {
    char *primary, *fallback;
    int strategy;
} hybrid_scratch_t;

#define HY_OFF(m) offsetof(hybrid_scratch_t, m)
static const cfg_field_t hybrid_fields[] = {
    {.key = "primary", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = HY_OFF(primary),
     .choices = rag_backends},
    {.key = "fallback", .decode = vsr__cfg_string, .offset = HY_OFF(fallback), .choices = rag_backends},
    {.key = "primary_config", .decode = accept_map, .flags = CFG_NULL_OK},
    {.key = "fallback_config", .decode = accept_map, .flags = CFG_NULL_OK},
    {.key = "strategy", .decode = vsr__cfg_choice, .offset = HY_OFF(strategy), .choices = hybrid_strategies},
};
static const cfg_spec_t hybrid_spec = {.size = sizeof(hybrid_scratch_t),
                                       .fields = hybrid_fields,
                                       .n_fields = VSR_ARRAY_LEN(hybrid_fields)};

/* The endpoint of b as a model of one backend, listed for the upstream layer. */
static int backend_model(cfg_decoder_t *d, const cfg_node_t *at, vsr_rag_backend_conf_t *b)
{
    const char *url = b->endpoint;
    if (b->kind == VSR_RAG_OPENAI && url == NULL)
        url = "https://api.openai.com";
    if (url == NULL)
        return -1;
    cfg_url_t u;
    const char *why = NULL;
    if (vsr__cfg_parse_base_url(vsr_slice_cstr(url), &u, &why) != VSR_OK) {
        vsr__cfg_node_error(d, at, "rag: endpoint %s: %s", vsr__cfg_quote(d->pool, url, strlen(url)),
                            why ? why : "not an http(s) URL");
        return -1;
    }
    vsr_backend_conf_t *be = &b->backend;
    be->name = vsr__cfg_strdup(d, "primary");
    be->host = vsr_pool_strndup(d->pool, u.hp.host.p, u.hp.host.len);
    be->tls = u.tls;
    be->port = u.hp.port ? u.hp.port : (u.tls ? 443 : 80);
    be->weight = 1;
    be->path_prefix = vsr__cfg_strdup(d, "");
    be->resolved_api_key = be->api_key;
    be->extra_headers = b->headers;
    be->n_extra_headers = b->n_headers;
    if (b->kind == VSR_RAG_MCP) {
        /* streamable HTTP: the server may answer JSON or an event stream, and requires both in Accept */
        int has_accept = 0;
        for (size_t i = 0; i < b->n_headers; i++)
            has_accept |= strcasecmp(b->headers[i].name, "accept") == 0;
        if (!has_accept) {
            vsr_kv_conf_t *h = vsr_pool_alloc(d->pool, (b->n_headers + 1) * sizeof(*h));
            if (b->n_headers)
                memcpy(h, b->headers, b->n_headers * sizeof(*h));
            h[b->n_headers] = (vsr_kv_conf_t){vsr__cfg_strdup(d, "accept"),
                                              vsr__cfg_strdup(d, "application/json, text/event-stream")};
            be->extra_headers = h;
            be->n_extra_headers = b->n_headers + 1;
        }
    }
    be->authority = vsr__cfg_authority(d->pool, u.hp.host, u.hp.ipv6, be->port, be->tls);
    if (b->kind == VSR_RAG_OPENAI) {
        /* the reference's client: the base URL without a trailing /v1, then /v1/vector_stores/ID/search */
        vsr_slice_t base = u.path;
        if (base.len >= 3 && memcmp(base.p + base.len - 3, "/v1", 3) == 0)
            base.len -= 3;
        char *p = vsr_pool_alloc(d->pool, base.len + strlen(b->vector_store_id) + 32);
        snprintf(p, base.len + strlen(b->vector_store_id) + 32, "%.*s/v1/vector_stores/%s/search", (int)base.len,
                 base.p, b->vector_store_id);
        b->path = p;
    } else {
        b->path = u.path.len ? vsr_pool_strndup(d->pool, u.path.p, u.path.len) : vsr__cfg_strdup(d, "/");
    }
    b->model.name = vsr__cfg_strdup(d, "rag");
    b->model.provider_model_id = b->model.name;
    b->model.backends = be;
    b->model.n_backends = 1;
    /* listed for the upstream layer's clusters */
    config_box_t *box = d->user;
    if (box) {
        vsr_config_t *c = &box->conf;
        const vsr_model_conf_t **n = vsr_pool_alloc(d->pool, (c->n_plugin_models + 1) * sizeof(*n));
        if (c->n_plugin_models)
            memcpy(n, c->plugin_models, c->n_plugin_models * sizeof(*n));
        n[c->n_plugin_models++] = &b->model;
        c->plugin_models = n;
    }
    return 0;
}

/* backend_config (or a hybrid's primary_config / fallback_config) of backend `name`. */
static int decode_backend(cfg_decoder_t *d, const char *name, const cfg_node_t *conf, const cfg_node_t *at,
                          vsr_rag_backend_conf_t *b)
{
    memset(b, 0, sizeof(*b));
    const cfg_spec_t *spec = NULL;
    if (strcmp(name, "external_api") == 0) {
        b->kind = VSR_RAG_EXTERNAL_API;
        spec = &external_api_spec;
        b->timeout_ms = VSR_RAG_DEFAULT_TIMEOUT_MS;
    } else if (strcmp(name, "mcp") == 0) {
        b->kind = VSR_RAG_MCP;
        spec = &mcp_spec;
        b->timeout_ms = VSR_RAG_MCP_DEFAULT_TIMEOUT_MS;
    } else if (strcmp(name, "openai") == 0) {
        b->kind = VSR_RAG_OPENAI;
        spec = &openai_spec;
        b->timeout_ms = VSR_RAG_DEFAULT_TIMEOUT_MS;
        b->max_num_results = 20;
    } else {
        const char *why = strcmp(name, "vectorstore") == 0
                              ? "it searches the router's own vector store (global.stores.vector_store), which vsr "
                                "does not have; use backend openai against an OpenAI-compatible vector store"
                              : "use external_api, openai or mcp in front of the store";
        vsr__cfg_node_error(d, at, "rag: backend %s is not supported yet (%s)", name, why);
        return -1;
    }
    b->max_response_bytes = VSR_RAG_DEFAULT_MAX_RESPONSE;
    cfg_node_t empty = {.kind = CFG_NODE_MAP, .line = at->line, .col = at->col, .str = ""};
    if (conf == NULL || (conf->kind == CFG_NODE_SCALAR && conf->type == CFG_NULL))
        conf = &empty;
    if (vsr__cfg_decode_object(d, spec, conf, b, 0) != 0)
        return -1;
    if (b->kind == VSR_RAG_EXTERNAL_API && b->format == VSR_RAG_FMT_CUSTOM &&
        (b->request_template == NULL || b->request_template[0] == '\0')) {
        vsr__cfg_node_error(d, conf, "rag: request_format custom needs a request_template");
        return -1;
    }
    if (b->kind == VSR_RAG_MCP && b->endpoint == NULL) {
        vsr__cfg_node_error(d, conf, "rag: mcp needs endpoint, the MCP server's streamable HTTP URL (vsr calls the "
                                     "tool there; server_name alone names no address)");
        return -1;
    }
    return backend_model(d, conf, b);
}

static void finish_rag(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                       size_t index);

static const cfg_spec_t rag_spec = {.size = sizeof(vsr_plugin_rag_conf_t),
                                    .fields = rag_fields,
                                    .n_fields = VSR_ARRAY_LEN(rag_fields),
                                    .finish = finish_rag};

static void finish_rag(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                       size_t index)
{
    VSR_UNUSED(index);
    vsr_plugin_rag_conf_t *r = obj;
    if (r->backend_name == NULL) {
        /* a block switched off needs no backend (the reference's documents write them) */
        if (r->enabled && vsr__cfg_seen(&rag_spec, seen, "backend") == NULL)
            vsr__cfg_node_error(d, map, "rag: missing required key \"backend\" (milvus, qdrant, external_api, mcp, "
                                        "openai, vectorstore or hybrid)");
        return;
    }
    if (!r->enabled)
        return; /* switched off: its backend is neither checked nor called */
    const cfg_node_t *bc = vsr__cfg_seen(&rag_spec, seen, "backend_config");
    const cfg_node_t *bn = vsr__cfg_seen(&rag_spec, seen, "backend");
    size_t saved = vsr__cfg_path_push(d, "backend_config");
    if (strcmp(r->backend_name, "hybrid") == 0) {
        hybrid_scratch_t h = {0};
        cfg_node_t empty = {.kind = CFG_NODE_MAP, .line = map->line, .col = map->col, .str = ""};
        if (vsr__cfg_decode_object(d, &hybrid_spec, bc ? bc : &empty, &h, 0) == 0 && h.primary) {
            r->hybrid = 1;
            r->parallel = h.strategy == 1;
            if (strcmp(h.primary, "hybrid") == 0 || (h.fallback && strcmp(h.fallback, "hybrid") == 0)) {
                vsr__cfg_node_error(d, bc, "rag: a hybrid backend's primary and fallback are plain backends");
            } else {
                size_t s2 = vsr__cfg_path_push(d, "primary_config");
                decode_backend(d, h.primary, vsr__cfg_map_get(bc, "primary_config"), bc, &r->primary);
                vsr__cfg_path_pop(d, s2);
                if (h.fallback) {
                    s2 = vsr__cfg_path_push(d, "fallback_config");
                    r->has_fallback =
                        decode_backend(d, h.fallback, vsr__cfg_map_get(bc, "fallback_config"), bc, &r->fallback) == 0;
                    vsr__cfg_path_pop(d, s2);
                }
            }
        }
    } else {
        decode_backend(d, r->backend_name, bc, bc ? bc : bn, &r->primary);
    }
    vsr__cfg_path_pop(d, saved);
    /* the result cache's scope: what the backends are asked, so that two plugins never share an entry */
    vsr_buf_t b;
    vsr_buf_init(&b, 1 << 20);
    vsr__cfg_canonical_node(&b, map);
    vsr_config_hash(b.data ? b.data : "", b.len, r->scope);
    vsr_buf_free(&b);
}

void vsr__cfg_rag_decode(cfg_decoder_t *d, const cfg_node_t *conf, vsr_plugin_conf_t *p)
{
    vsr_plugin_rag_conf_t *r = vsr_pool_alloc(d->pool, sizeof(*r));
    memset(r, 0, sizeof(*r));
    r->enabled = 1;
    r->similarity_threshold = 0.7;
    r->top_k = 5;
    r->max_context_length = 10000;
    r->cache_ttl_ms = 3600000; /* the reference's default: an hour */
    p->u.rag = r;
    vsr__cfg_decode_object(d, &rag_spec, conf, r, 0);
    p->enabled = r->enabled;
}
