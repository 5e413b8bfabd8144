/*
 * config.c — the v0.3 schema as field tables for the document, listeners,
 * providers and global; the public entry points of config.h.  (Routing,
 * recipes and entrypoints: cfg_routing.c; reliability and fallback:
 * cfg_policy.c; checks across sections: cfg_check.c.)
 *
 * Reading a table top to bottom tells which keys an object has, which are
 * required, and which belong to v0.3 but are not implemented yet.  Growing
 * the model means adding rows (and, for new value kinds, a decoder
 * function), not new control flow.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "config/cfg_internal.h"
#include "config/config.h"
#include "http/http.h"

#define MAX_FILE_BYTES (16u * 1024 * 1024)
#define MAX_BACKEND_WEIGHT 1000000
#define INET6_ADDRSTRLEN_MAX 46

/* Rows for keys vsr accepts and reports but does not act on yet. */
#define UNIMPLEMENTED(k) {.key = (k), .flags = CFG_UNIMPLEMENTED}
#define UNIMPLEMENTED_ALIAS(k, target) {.key = (k), .flags = CFG_UNIMPLEMENTED, .alias_of = (target)}

#define BOX_OFF(m) offsetof(config_box_t, m)
#define CONF_OFF(m) offsetof(config_box_t, conf.m)

/* ---- providers.models[].backend_refs[] -------------------------------------- */

static int decode_endpoint(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_backend_conf_t *b = obj;
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    cfg_endpoint_t ep;
    const char *why;
    if (vsr__cfg_parse_endpoint(vsr_slice(s, val->len), &ep, &why) != VSR_OK) {
        vsr__cfg_node_error(d, val, "invalid endpoint %s: %s", vsr__cfg_quote(d->pool, s, val->len), why);
        return -1;
    }
    /* The reference (splitEndpointAddress) drops everything from the first
     * '/' after host[:port]; so does vsr, saying so. */
    if (ep.path.len > 0)
        vsr__cfg_warn(d,
                      "%s:%u:%u: endpoint %s: the path %s is ignored, as the reference ignores it; write base_url "
                      "(e.g. \"http://host:port/prefix\") to send requests under a path prefix",
                      d->dg->file, val->line, val->col, vsr__cfg_quote(d->pool, s, val->len),
                      vsr__cfg_quote(d->pool, ep.path.p, ep.path.len));
    b->host = vsr_pool_strndup(d->pool, ep.hp.host.p, ep.hp.host.len);
    b->port = ep.hp.port; /* 0: the scheme default, chosen in finish_backend */
    return 0;
}

static int decode_base_url(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_backend_conf_t *b = obj;
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    cfg_url_t url;
    const char *why;
    if (vsr__cfg_parse_base_url(vsr_slice(s, val->len), &url, &why) != VSR_OK) {
        vsr__cfg_node_error(d, val, "invalid base_url %s: %s", vsr__cfg_quote(d->pool, s, val->len), why);
        return -1;
    }
    b->host = vsr_pool_strndup(d->pool, url.hp.host.p, url.hp.host.len);
    b->port = url.hp.port;
    b->tls = url.tls;
    b->path_prefix = vsr_pool_strndup(d->pool, url.path.p, url.path.len);
    b->has_base_url = 1;
    return 0;
}

/* Only validated here: with base_url the URL's scheme decides, so the
 * resulting tls flag is settled in finish_backend. */
static int decode_protocol(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "http") != 0 && strcmp(s, "https") != 0 && strcmp(s, "h2") != 0) {
        vsr__cfg_node_error(d, val, "protocol must be \"http\", \"https\" or \"h2\", got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    ((vsr_backend_conf_t *)obj)->h2 = strcmp(s, "h2") == 0;
    return 0;
}

int vsr__cfg_header_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (!vsr__cfg_is_token(s)) {
        vsr__cfg_node_error(d, val, "invalid header name %s", vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

/* Header-safe text: no CR, LF or other controls; "" allowed (HAS: present). */
int vsr__cfg_header_text(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_text(d, val);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < val->len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            vsr__cfg_node_error(d, val, "%s must not contain control characters", f->key);
            return -1;
        }
    }
    *(char **)((char *)obj + f->offset) = vsr_pool_strndup(d->pool, s, val->len);
    return 0;
}

/* A mapping of header names to values ({Name: value, ...}) into a pool
 * array: names checked as header names (the error names key), values as
 * header text (value_what). */
int vsr__cfg_header_map(cfg_decoder_t *d, const char *key, const char *value_what, const cfg_node_t *val,
                        vsr_kv_conf_t **out, size_t *n)
{
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "expected a mapping of header names to values, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    *out = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(vsr_kv_conf_t)) : NULL;
    *n = 0;
    int rc = 0;
    cfg_field_t nf = {.key = key}, vf = {.key = value_what};
    for (size_t i = 0; i < val->n; i++) {
        vsr_kv_conf_t kv = {NULL, NULL};
        if (vsr__cfg_header_name(d, &nf, val->items[2 * i], &kv) != 0 ||
            vsr__cfg_header_text(d, &vf, val->items[2 * i + 1], &kv.value) != 0) {
            rc = -1;
            continue;
        }
        (*out)[(*n)++] = kv;
    }
    return rc;
}

/* extra_headers: {Name: value, ...} */
static int decode_extra_headers(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(f);
    vsr_backend_conf_t *b = obj;
    return vsr__cfg_header_map(d, "extra_headers", "an extra header value", val, &b->extra_headers,
                               &b->n_extra_headers);
}

int vsr__cfg_env_name(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    int ok = !isdigit((unsigned char)s[0]);
    for (const char *p = s; *p && ok; p++)
        ok = isalnum((unsigned char)*p) || *p == '_';
    if (!ok) {
        vsr__cfg_node_error(d, val, "invalid environment variable name %s", vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

static int decode_chat_path(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    int ok = s[0] == '/';
    for (size_t i = 0; ok && i < val->len; i++)
        ok = (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f && s[i] != '?' && s[i] != '#';
    if (!ok) {
        vsr__cfg_node_error(d, val, "chat_path must be a path starting with '/', without spaces, query or fragment");
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

#define BE_OFF(m) offsetof(vsr_backend_conf_t, m)

static const cfg_field_t backend_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .offset = BE_OFF(name)},
    {.key = "endpoint", .decode = decode_endpoint},
    {.key = "base_url", .decode = decode_base_url},
    {.key = "protocol", .decode = decode_protocol},
    {.key = "weight", .decode = vsr__cfg_uint, .offset = BE_OFF(weight), .size = sizeof(uint32_t), .min = 1,
     .max = MAX_BACKEND_WEIGHT},
    {.key = "type", .decode = vsr__cfg_string, .offset = BE_OFF(type)},
    {.key = "provider", .decode = vsr__cfg_string, .offset = BE_OFF(provider)},
    {.key = "auth_header", .decode = vsr__cfg_header_name, .offset = BE_OFF(auth_header)},
    {.key = "auth_prefix", .decode = vsr__cfg_header_text, .flags = CFG_HAS, .offset = BE_OFF(auth_prefix),
     .has_offset = BE_OFF(has_auth_prefix)},
    {.key = "api_key", .decode = vsr__cfg_header_text, .offset = BE_OFF(api_key)},
    {.key = "api_key_env", .decode = vsr__cfg_env_name, .offset = BE_OFF(api_key_env)},
    {.key = "extra_headers", .decode = decode_extra_headers, .flags = CFG_NULL_OK},
    {.key = "api_version", .decode = vsr__cfg_string, .offset = BE_OFF(api_version)},
    {.key = "chat_path", .decode = decode_chat_path, .offset = BE_OFF(chat_path)},
};

static void init_backend(cfg_decoder_t *d, void *obj)
{
    vsr_backend_conf_t *b = obj;
    b->weight = 1;
}

static const cfg_spec_t backend_spec;

/* The key is resolved once, at load.  An unset or empty variable is, as in
 * the reference, no key: a warning, and the backend is sent none. */
static void resolve_credentials(cfg_decoder_t *d, vsr_backend_conf_t *b, const cfg_node_t *const *seen)
{
    const cfg_node_t *key = vsr__cfg_seen(&backend_spec, seen, "api_key");
    const cfg_node_t *env = vsr__cfg_seen(&backend_spec, seen, "api_key_env");
    if (key != NULL && env != NULL) {
        const cfg_node_t *later = env->line > key->line || (env->line == key->line && env->col > key->col) ? env : key;
        vsr__cfg_node_error(d, later, "set either api_key or api_key_env, not both");
        return;
    }
    if (b->api_key != NULL) {
        if (b->api_key[0] == '\0')
            vsr__cfg_node_error(d, key, "api_key must not be empty");
        b->resolved_api_key = b->api_key;
        return;
    }
    if (b->api_key_env == NULL)
        return;
    const char *v = getenv(b->api_key_env);
    if (v == NULL || v[0] == '\0') {
        vsr__cfg_warn(d, "%s:%u:%u: environment variable %s is %s: requests to this backend carry no API key",
                      d->dg->file, env->line, env->col, b->api_key_env, v == NULL ? "not set" : "empty");
        return;
    }
    for (const char *p = v; *p; p++) {
        if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f) {
            /* the value goes into a header: never print it */
            vsr__cfg_node_error(d, env, "environment variable %s contains control characters", b->api_key_env);
            return;
        }
    }
    b->resolved_api_key = vsr__cfg_strdup(d, v);
}

static void finish_backend(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                           size_t index)
{
    vsr_backend_conf_t *b = obj;
    const cfg_node_t *endpoint = vsr__cfg_seen(&backend_spec, seen, "endpoint");
    const cfg_node_t *base_url = vsr__cfg_seen(&backend_spec, seen, "base_url");
    const cfg_node_t *protocol = vsr__cfg_seen(&backend_spec, seen, "protocol");

    if (b->name == NULL) {
        char name[32];
        if (index == 0)
            snprintf(name, sizeof(name), "primary");
        else
            snprintf(name, sizeof(name), "backend-%zu", index + 1);
        b->name = vsr__cfg_strdup(d, name);
    }

    if (endpoint && base_url) {
        const cfg_node_t *later = (base_url->line > endpoint->line ||
                                   (base_url->line == endpoint->line && base_url->col > endpoint->col))
                                      ? base_url
                                      : endpoint;
        vsr__cfg_node_error(d, later, "set either endpoint or base_url, not both");
        return;
    }
    if (!endpoint && !base_url) {
        vsr__cfg_node_error(d, map, "missing required key \"endpoint\" (or \"base_url\")");
        return;
    }
    /* protocol next to base_url: today any disagreement between them
     * involves https, which is already an error; once upstream TLS exists,
     * check here that they agree. */
    if (endpoint) {
        b->tls = protocol && protocol->type == CFG_STR && strcmp(protocol->str, "https") == 0;
        /* A scheme in the endpoint is the protocol, as in the reference;
         * a protocol key that says otherwise loses, with a warning. */
        cfg_endpoint_t ep;
        const char *why;
        if (endpoint->type == CFG_STR &&
            vsr__cfg_parse_endpoint(vsr_slice(endpoint->str, endpoint->len), &ep, &why) == VSR_OK &&
            ep.scheme != CFG_SCHEME_NONE) {
            int scheme_tls = ep.scheme == CFG_SCHEME_HTTPS;
            if (protocol && protocol->type == CFG_STR && strcmp(protocol->str, "h2") != 0 && b->tls != scheme_tls)
                vsr__cfg_warn(d, "%s:%u:%u: protocol: %s is overridden by the endpoint's %s:// scheme",
                              d->dg->file, protocol->line, protocol->col, protocol->str,
                              scheme_tls ? "https" : "http");
            b->tls = scheme_tls;
        }
    }
    resolve_credentials(d, b, seen);
    if (b->host == NULL) /* endpoint/base_url was invalid, already reported */
        return;
    if (b->port == 0)
        b->port = b->tls ? 443 : 80;
    if (b->path_prefix == NULL)
        b->path_prefix = vsr__cfg_strdup(d, "");
    b->authority = vsr__cfg_authority(d->pool, vsr_slice_cstr(b->host), strchr(b->host, ':') != NULL, b->port, b->tls);
}

static const cfg_spec_t backend_spec = {
    .size = sizeof(vsr_backend_conf_t),
    .fields = backend_fields,
    .n_fields = VSR_ARRAY_LEN(backend_fields),
    .init = init_backend,
    .finish = finish_backend,
};

/* ---- providers.models[] --------------------------------------------------------- */

static int decode_api_format(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "openai") != 0 && strcmp(s, "anthropic") != 0) {
        vsr__cfg_node_error(d, val, "api_format must be \"openai\" or \"anthropic\", got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

/* providers.models[].pricing: members of the model (per million tokens, >= 0) */
#define PRICE(k, m) {.key = (k), .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = offsetof(vsr_model_conf_t, m), \
                     .has_offset = offsetof(vsr_model_conf_t, has_##m), .dmin = 0, .dmax = 1e9}
static const cfg_field_t pricing_fields[] = {
    {.key = "currency", .decode = vsr__cfg_string, .offset = offsetof(vsr_model_conf_t, pricing_currency)},
    PRICE("prompt_per_1m", prompt_per_1m),
    PRICE("completion_per_1m", completion_per_1m),
    PRICE("cached_input_per_1m", cached_input_per_1m),
    PRICE("cache_write_per_1m", cache_write_per_1m),
};

static const cfg_spec_t pricing_spec = {
    .size = sizeof(vsr_model_conf_t), .fields = pricing_fields, .n_fields = VSR_ARRAY_LEN(pricing_fields)};

static const cfg_field_t model_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_model_conf_t, name)},
    {.key = "provider_model_id", .decode = vsr__cfg_string, .offset = offsetof(vsr_model_conf_t, provider_model_id)},
    /* absent or []: a gateway-routed model (see finish_model) */
    {.key = "backend_refs", .decode = vsr__cfg_list, .flags = CFG_NULL_OK,
     .offset = offsetof(vsr_model_conf_t, backends), .count_offset = offsetof(vsr_model_conf_t, n_backends),
     .spec = &backend_spec},
    {.key = "api_format", .decode = decode_api_format, .offset = offsetof(vsr_model_conf_t, api_format)},
    {.key = "reliability", .decode = vsr__cfg_object, .flags = CFG_NULL_OK | CFG_HAS,
     .offset = offsetof(vsr_model_conf_t, reliability), .spec = &vsr__cfg_model_reliability_spec,
     .has_offset = offsetof(vsr_model_conf_t, has_reliability)},
    UNIMPLEMENTED("reasoning"),
    UNIMPLEMENTED("reasoning_family"),
    {.key = "pricing", .decode = vsr__cfg_object, .flags = CFG_NULL_OK | CFG_HAS, .spec = &pricing_spec,
     .has_offset = offsetof(vsr_model_conf_t, has_pricing)},
    UNIMPLEMENTED("external_model_ids"),
    UNIMPLEMENTED("catalog"),
    UNIMPLEMENTED("deployment"),
};

static const cfg_spec_t model_spec;

/* The node to blame for item i of a list of objects: its `name` value when
 * it has one, else the item itself. */
static const cfg_node_t *item_name_node(const cfg_node_t *list, size_t i)
{
    const cfg_node_t *item = list->items[i];
    const cfg_node_t *name = vsr__cfg_map_get(item, "name");
    return name ? name : item;
}

/* A Messages backend's conventions, unless the document says otherwise:
 * the key in x-api-key (no prefix) and an anthropic-version field. */
#define ANTHROPIC_VERSION "2023-06-01"
static void anthropic_backend(cfg_decoder_t *d, vsr_backend_conf_t *b)
{
    if (b->auth_header == NULL) {
        b->auth_header = vsr__cfg_strdup(d, "x-api-key");
        if (!b->has_auth_prefix) {
            b->has_auth_prefix = 1;
            b->auth_prefix = NULL; /* none */
        }
    }
    for (size_t i = 0; i < b->n_extra_headers; i++)
        if (strcasecmp(b->extra_headers[i].name, "anthropic-version") == 0)
            return;
    vsr_kv_conf_t *h = vsr_pool_alloc(d->pool, sizeof(*h) * (b->n_extra_headers + 1));
    if (b->n_extra_headers)
        memcpy(h, b->extra_headers, sizeof(*h) * b->n_extra_headers);
    h[b->n_extra_headers].name = vsr__cfg_strdup(d, "anthropic-version");
    h[b->n_extra_headers].value = vsr__cfg_strdup(d, ANTHROPIC_VERSION);
    b->extra_headers = h;
    b->n_extra_headers++;
}

static void finish_model(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                         size_t index)
{
    vsr_model_conf_t *m = obj;
    if (m->provider_model_id == NULL && m->name != NULL)
        m->provider_model_id = vsr__cfg_strdup(d, m->name);
    if (m->api_format == NULL)
        m->api_format = vsr__cfg_strdup(d, "openai");
    m->messages_api = strcmp(m->api_format, "anthropic") == 0;
    if (m->messages_api)
        for (size_t i = 0; i < m->n_backends; i++)
            anthropic_backend(d, &m->backends[i]);
    const cfg_node_t *name = vsr__cfg_map_get(map, "name");
    vsr__cfg_mark(d, &m->name, name ? name : map);

    const cfg_node_t *refs = vsr__cfg_seen(&model_spec, seen, "backend_refs");
    /* The reference's gateway deployments route such a model themselves
     * (catalogue metadata only: provider_model_id, pricing, ...); standalone
     * there is nothing to call, which each request routed to it is told. */
    if (m->n_backends == 0 && m->name != NULL && (refs == NULL || vsr__cfg_is_empty(refs)))
        vsr__cfg_warn(d, "%s:%u:%u: model %s has no backend_refs: requests routed to it are answered 503", d->dg->file,
                      name ? name->line : map->line, name ? name->col : map->col,
                      vsr__cfg_quote(d->pool, m->name, strlen(m->name)));
    if (m->n_backends < 2)
        return;
    const char **keys = vsr_malloc(m->n_backends * sizeof(*keys));
    const cfg_node_t **nodes = vsr_malloc(m->n_backends * sizeof(*nodes));
    for (size_t i = 0; i < m->n_backends; i++) {
        keys[i] = m->backends[i].name;
        nodes[i] = item_name_node(refs, i);
    }
    vsr__cfg_check_unique(d, "backend name", keys, nodes, m->n_backends);
    vsr_free(keys);
    vsr_free(nodes);
}

static const cfg_spec_t model_spec = {
    .size = sizeof(vsr_model_conf_t),
    .fields = model_fields,
    .n_fields = VSR_ARRAY_LEN(model_fields),
    .finish = finish_model,
};

/* ---- providers ------------------------------------------------------------------ */

/* Decoded straight into vsr_config_t: the C model is flatter than the YAML. */
static const cfg_field_t defaults_fields[] = {
    {.key = "model", .decode = vsr__cfg_string, .offset = offsetof(vsr_config_t, default_model)},
    {.key = "default_model", .decode = vsr__cfg_string, .offset = offsetof(vsr_config_t, default_model),
     .alias_of = "model", .deprecated = "the reference renamed it providers.defaults.model"},
    UNIMPLEMENTED("reasoning_effort"),
    UNIMPLEMENTED_ALIAS("default_reasoning_effort", "reasoning_effort"),
    UNIMPLEMENTED("reasoning_families"),
};

static const cfg_spec_t defaults_spec = {
    .size = sizeof(vsr_config_t),
    .fields = defaults_fields,
    .n_fields = VSR_ARRAY_LEN(defaults_fields),
};

static const cfg_field_t providers_fields[] = {
    {.key = "defaults", .decode = vsr__cfg_object, .spec = &defaults_spec},
    /* optional, as in the reference (finish_document warns without one) */
    {.key = "models", .decode = vsr__cfg_list, .offset = offsetof(vsr_config_t, models),
     .count_offset = offsetof(vsr_config_t, n_models), .spec = &model_spec},
};

static const cfg_spec_t providers_spec;

static void finish_providers(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                             size_t index)
{
    vsr_config_t *c = obj;
    const cfg_node_t *models = vsr__cfg_seen(&providers_spec, seen, "models");
    if (c->n_models > 1) {
        const char **keys = vsr_malloc(c->n_models * sizeof(*keys));
        const cfg_node_t **nodes = vsr_malloc(c->n_models * sizeof(*nodes));
        for (size_t i = 0; i < c->n_models; i++) {
            keys[i] = c->models[i].name;
            nodes[i] = item_name_node(models, i);
        }
        vsr__cfg_check_unique(d, "model name", keys, nodes, c->n_models);
        vsr_free(keys);
        vsr_free(nodes);
    }
    /* resolved with the model cards' LoRAs in cfg_check.c */
    if (c->default_model != NULL) {
        const cfg_node_t *defaults = vsr__cfg_seen(&providers_spec, seen, "defaults");
        const cfg_node_t *at = vsr__cfg_map_get(defaults, "model");
        if (at == NULL)
            at = vsr__cfg_map_get(defaults, "default_model");
        vsr__cfg_mark(d, &c->default_model, at ? at : map);
    }
}

static const cfg_spec_t providers_spec = {
    .size = sizeof(vsr_config_t),
    .fields = providers_fields,
    .n_fields = VSR_ARRAY_LEN(providers_fields),
    .finish = finish_providers,
};

/* ---- listeners[] ------------------------------------------------------------------ */

static int decode_address(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    char canon[64];
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (vsr__cfg_canonical_ip(s, canon, sizeof(canon)) != VSR_OK) {
        vsr__cfg_node_error(d, val, "address must be an IPv4 or IPv6 address, got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        /* not the default either: keeps the address:port check quiet */
        *(char **)((char *)obj + f->offset) = NULL;
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

/* Read by the listener at startup: checked now, so a typo fails the load
 * rather than the serving. */
static int decode_readable_file(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    const char *q = vsr__cfg_quote(d->pool, s, val->len);
    /* stat first: a device or FIFO is refused without being opened (opening
     * some devices has effects, and a FIFO would block) */
    struct stat st;
    if (stat(s, &st) != 0) {
        vsr__cfg_node_error(d, val, "cannot read %s %s: %s", f->key, q, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        vsr__cfg_node_error(d, val, "%s %s is not a regular file", f->key, q);
        return -1;
    }
    int fd = open(s, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        vsr__cfg_node_error(d, val, "cannot read %s %s: %s", f->key, q, strerror(errno));
        return -1;
    }
    close(fd);
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

static const cfg_field_t tls_fields[] = {
    {.key = "cert_file", .decode = decode_readable_file, .flags = CFG_REQUIRED,
     .offset = offsetof(vsr_listener_conf_t, tls_cert_file)},
    {.key = "key_file", .decode = decode_readable_file, .flags = CFG_REQUIRED,
     .offset = offsetof(vsr_listener_conf_t, tls_key_file)},
};

/* The listener loads these PEM files at startup; they are loaded here too,
 * so that a certificate that is no certificate, or a key that does not
 * belong to it, fails the load at its line rather than the serving. */
static int check_tls_pem(cfg_decoder_t *d, const cfg_node_t *val, const vsr_listener_conf_t *l)
{
    const cfg_node_t *cn = vsr__cfg_map_get(val, "cert_file"), *kn = vsr__cfg_map_get(val, "key_file");
    int rc = -1;
    X509 *cert = NULL;
    EVP_PKEY *key = NULL;
    BIO *b = BIO_new_file(l->tls_cert_file, "r");
    if (b)
        cert = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    ERR_clear_error();
    if (cert == NULL) {
        vsr__cfg_node_error(d, cn ? cn : val, "cert_file %s holds no PEM certificate",
                            vsr__cfg_quote(d->pool, l->tls_cert_file, strlen(l->tls_cert_file)));
        goto out;
    }
    b = BIO_new_file(l->tls_key_file, "r");
    if (b)
        key = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    BIO_free(b);
    ERR_clear_error();
    if (key == NULL) {
        vsr__cfg_node_error(d, kn ? kn : val, "key_file %s holds no PEM private key (or it is encrypted)",
                            vsr__cfg_quote(d->pool, l->tls_key_file, strlen(l->tls_key_file)));
        goto out;
    }
    if (X509_check_private_key(cert, key) != 1) {
        ERR_clear_error();
        vsr__cfg_node_error(d, kn ? kn : val, "key_file %s does not match the certificate of cert_file",
                            vsr__cfg_quote(d->pool, l->tls_key_file, strlen(l->tls_key_file)));
        goto out;
    }
    rc = 0;
out:
    X509_free(cert);
    EVP_PKEY_free(key);
    return rc;
}

static int decode_tls(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    int rc = vsr__cfg_object(d, f, val, obj);
    const vsr_listener_conf_t *l = obj;
    if (rc == 0 && val->kind == CFG_NODE_MAP && l->tls_cert_file && l->tls_key_file)
        rc = check_tls_pem(d, val, l);
    return rc;
}

static const cfg_spec_t tls_spec = {
    .size = sizeof(vsr_listener_conf_t),
    .fields = tls_fields,
    .n_fields = VSR_ARRAY_LEN(tls_fields),
};

/* Stored as canonical networks ("10.0.0.0/8"), so readers parse one form. */
static int decode_trusted_peers(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (vsr__cfg_strlist(d, f, val, obj) != 0)
        return -1;
    vsr_strlist_conf_t *l = (vsr_strlist_conf_t *)((char *)obj + f->offset);
    int rc = 0;
    for (size_t i = 0; i < l->n; i++) {
        char canon[INET6_ADDRSTRLEN_MAX + 8];
        const char *why;
        if (vsr__cfg_canonical_cidr(l->items[i], canon, sizeof(canon), &why) != VSR_OK) {
            vsr__cfg_node_error(d, val->items[i], "invalid trusted peer %s: %s",
                                vsr__cfg_quote(d->pool, l->items[i], strlen(l->items[i])), why);
            rc = -1;
            continue;
        }
        l->items[i] = vsr__cfg_strdup(d, canon);
    }
    return rc;
}

static const cfg_field_t identity_fields[] = {
    {.key = "trust_headers", .decode = vsr__cfg_bool, .offset = offsetof(vsr_listener_conf_t, identity_trust_headers)},
    {.key = "trusted_peers", .decode = decode_trusted_peers, .flags = CFG_NULL_OK,
     .offset = offsetof(vsr_listener_conf_t, identity_trusted_peers)},
};

static const cfg_spec_t identity_spec = {
    .size = sizeof(vsr_listener_conf_t),
    .fields = identity_fields,
    .n_fields = VSR_ARRAY_LEN(identity_fields),
};

static const cfg_field_t listener_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_listener_conf_t, name)},
    {.key = "address", .decode = decode_address, .offset = offsetof(vsr_listener_conf_t, address)},
    {.key = "port", .decode = vsr__cfg_uint, .flags = CFG_REQUIRED, .offset = offsetof(vsr_listener_conf_t, port),
     .size = sizeof(uint16_t), .min = 1, .max = 65535},
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = offsetof(vsr_listener_conf_t, timeout_ms)},
    /* vsr extensions */
    {.key = "max_request_body_bytes", .decode = vsr__cfg_uint, .offset = offsetof(vsr_listener_conf_t, max_body_bytes),
     .size = sizeof(uint64_t), .min = 1, .max = INT64_MAX},
    {.key = "max_header_bytes", .decode = vsr__cfg_uint, .offset = offsetof(vsr_listener_conf_t, max_header_bytes),
     .size = sizeof(uint32_t), .min = 1024, .max = 1024 * 1024},
    {.key = "max_headers", .decode = vsr__cfg_uint, .offset = offsetof(vsr_listener_conf_t, max_headers),
     .size = sizeof(uint32_t), .min = 1, .max = VSR_HTTP_MAX_HEADERS - 1},
    {.key = "max_connections", .decode = vsr__cfg_uint, .offset = offsetof(vsr_listener_conf_t, max_connections),
     .size = sizeof(uint32_t), .min = 1, .max = UINT32_MAX},
    {.key = "header_timeout", .decode = vsr__cfg_duration_ms, .offset = offsetof(vsr_listener_conf_t, header_timeout_ms)},
    {.key = "body_timeout", .decode = vsr__cfg_duration_ms, .offset = offsetof(vsr_listener_conf_t, body_timeout_ms)},
    {.key = "api_keys", .decode = vsr__cfg_api_keys, .flags = CFG_NULL_OK}, /* strings, or entries with identity */
    {.key = "models", .decode = vsr__cfg_strlist, .flags = CFG_NULL_OK, .offset = offsetof(vsr_listener_conf_t, models)},
    {.key = "tls", .decode = decode_tls, .flags = CFG_NULL_OK, .spec = &tls_spec},
    {.key = "identity", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &identity_spec},
};

static void init_listener(cfg_decoder_t *d, void *obj)
{
    vsr_listener_conf_t *l = obj;
    l->address = vsr__cfg_strdup(d, "0.0.0.0");
    l->timeout_ms = VSR_DEFAULT_LISTENER_TIMEOUT_MS;
    l->max_body_bytes = VSR_DEFAULT_MAX_BODY_BYTES;
    l->max_connections = VSR_DEFAULT_MAX_CONNECTIONS;
    l->max_header_bytes = VSR_DEFAULT_MAX_HEADER_BYTES;
    l->max_headers = VSR_DEFAULT_MAX_HEADERS;
    l->header_timeout_ms = VSR_DEFAULT_HEADER_TIMEOUT_MS;
    l->body_timeout_ms = VSR_DEFAULT_BODY_TIMEOUT_MS;
}

static const cfg_spec_t listener_spec = {
    .size = sizeof(vsr_listener_conf_t),
    .fields = listener_fields,
    .n_fields = VSR_ARRAY_LEN(listener_fields),
    .init = init_listener,
};

/* ---- the document -------------------------------------------------------------------- */

static int decode_version(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SCALAR || val->type != CFG_STR) {
        vsr__cfg_node_error(d, val, "expected the string \"v0.3\", got %s", vsr__cfg_node_what(val));
        return -1;
    }
    if (strcmp(val->str, "v0.3") != 0 || val->len != 4) {
        vsr__cfg_node_error(d, val, "unsupported version %s (vsr reads \"v0.3\")",
                            vsr__cfg_quote(d->pool, val->str, val->len));
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, val->str);
    return 0;
}

/* ---- global ------------------------------------------------------------------------- */

/* The global tables decode into the config_box_t (the document object), so
 * scratch members sit next to the config's. */

/* file: the document is the file; kubernetes: the file is the base that
 * the reference's IntelligentPool and IntelligentRoute resources complete
 * (admin_k8s.c). */
static int decode_config_source(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    config_box_t *box = obj;
    if (strcmp(s, "kubernetes") == 0) {
        box->conf.config_source_kubernetes = 1;
        return 0;
    }
    if (strcmp(s, "file") != 0) {
        vsr__cfg_node_error(d, val, "config_source must be \"file\" or \"kubernetes\", not %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    return 0;
}

/* Entries are trimmed; blank ones and repeats are dropped (as the
 * reference does), so only strings are checked here. */
static int decode_auto_model_names(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    config_box_t *box = obj;
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list of strings, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    char **trimmed = val->n ? vsr_pool_alloc(d->pool, val->n * sizeof(char *)) : NULL;
    cfg_index_t ix = {0};
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *it = val->items[i];
        trimmed[i] = NULL;
        const char *s = vsr__cfg_get_text(d, it);
        if (s == NULL) {
            rc = -1;
            continue;
        }
        vsr_slice_t t = vsr_slice_trim(vsr_slice(s, it->len));
        int clean = 1;
        for (size_t j = 0; j < t.len; j++)
            clean &= (unsigned char)t.p[j] >= 0x20 && t.p[j] != 0x7f;
        if (!clean) {
            vsr__cfg_node_error(d, it, "auto_model_names must not contain control characters");
            rc = -1;
            continue;
        }
        if (t.len == 0)
            continue;
        trimmed[i] = vsr_pool_strndup(d->pool, t.p, t.len);
        vsr__cfg_index_add(&ix, trimmed[i], i);
    }
    /* keep the first of equal names, in document order */
    vsr__cfg_index_sort(&ix);
    for (size_t i = 1; i < ix.n; i++)
        if (strcmp(ix.v[i].name, ix.v[i - 1].name) == 0)
            trimmed[ix.v[i].index] = NULL;
    vsr__cfg_index_free(&ix);
    vsr_strlist_conf_t *l = &box->auto_model_names;
    l->items = trimmed;
    l->n = 0;
    for (size_t i = 0; i < val->n; i++) {
        if (trimmed[i] == NULL)
            continue;
        l->items[l->n] = trimmed[i];
        vsr__cfg_mark(d, &l->items[l->n], val->items[i]);
        l->n++;
    }
    box->has_auto_model_names = 1;
    return rc;
}

static const cfg_field_t skip_processing_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = CONF_OFF(skip_processing_enabled)},
};

static const cfg_spec_t skip_processing_spec = {
    .size = sizeof(config_box_t),
    .fields = skip_processing_fields,
    .n_fields = VSR_ARRAY_LEN(skip_processing_fields),
};

static const cfg_field_t router_fields[] = {
    {.key = "config_source", .decode = decode_config_source},
    UNIMPLEMENTED("strategy"),
    {.key = "auto_model_name", .decode = vsr__cfg_string, .offset = BOX_OFF(auto_model_name)},
    {.key = "auto_model_names", .decode = decode_auto_model_names, .flags = CFG_NULL_OK},
    {.key = "include_config_models_in_list", .decode = vsr__cfg_bool,
     .offset = CONF_OFF(include_config_models_in_list)},
    {.key = "clear_route_cache", .decode = vsr__cfg_bool, .offset = CONF_OFF(clear_route_cache)},
    UNIMPLEMENTED("streamed_body"),
    {.key = "skip_processing", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &skip_processing_spec},
    UNIMPLEMENTED("model_selection"),
    UNIMPLEMENTED("learning"),
    {.key = "fallback", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = CONF_OFF(global_fallback),
     .spec = &vsr__cfg_fallback_spec},
};

static const cfg_spec_t router_spec = {
    .size = sizeof(config_box_t),
    .fields = router_fields,
    .n_fields = VSR_ARRAY_LEN(router_fields),
};

static const cfg_field_t authz_identity_fields[] = {
    {.key = "user_id_header", .decode = vsr__cfg_header_name, .offset = CONF_OFF(authz_user_id_header)},
    {.key = "user_groups_header", .decode = vsr__cfg_header_name, .offset = CONF_OFF(authz_user_groups_header)},
};

static const cfg_spec_t authz_identity_spec = {
    .size = sizeof(config_box_t),
    .fields = authz_identity_fields,
    .n_fields = VSR_ARRAY_LEN(authz_identity_fields),
};

static const cfg_field_t authz_fields[] = {
    {.key = "fail_open", .decode = vsr__cfg_bool, .offset = CONF_OFF(authz_fail_open)},
    {.key = "identity", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &authz_identity_spec},
    /* external authorization services */
    {.key = "providers", .decode = vsr__cfg_unsupported},
};

static const cfg_spec_t authz_spec = {
    .size = sizeof(config_box_t),
    .fields = authz_fields,
    .n_fields = VSR_ARRAY_LEN(authz_fields),
};

static const cfg_field_t ratelimit_fields[] = {
    {.key = "fail_open", .decode = vsr__cfg_bool, .offset = CONF_OFF(ratelimit_fail_open)},
    {.key = "providers", .decode = vsr__cfg_ratelimit_providers, .flags = CFG_NULL_OK}, /* cfg_ratelimit.c */
};

static const cfg_spec_t ratelimit_spec = {
    .size = sizeof(config_box_t),
    .fields = ratelimit_fields,
    .n_fields = VSR_ARRAY_LEN(ratelimit_fields),
};

static int decode_management_address(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    char canon[64];
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (vsr__cfg_canonical_ip(s, canon, sizeof(canon)) != VSR_OK) {
        vsr__cfg_node_error(d, val, "bind_address must be an IPv4 or IPv6 address, got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    vsr__cfg_mark(d, (char *)obj + f->offset, val);
    return 0;
}

static const cfg_field_t management_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = CONF_OFF(management_enabled),
     .has_offset = BOX_OFF(has_management_enabled)},
    {.key = "bind_address", .decode = decode_management_address, .offset = CONF_OFF(management_address)},
    {.key = "port", .decode = vsr__cfg_uint, .offset = CONF_OFF(management_port), .size = sizeof(uint16_t), .min = 1,
     .max = 65535},
    {.key = "remote_exposure", .decode = vsr__cfg_bool, .offset = BOX_OFF(management_remote_exposure)},
    {.key = "auth", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &vsr__cfg_management_auth_spec},
    /* vsr's own: the document size bound and the API's bearer token */
    {.key = "max_document_bytes", .decode = vsr__cfg_uint, .offset = CONF_OFF(management_max_document_bytes),
     .size = sizeof(uint64_t), .min = 1024, .max = VSR_CONFIG_MAX_DOCUMENT_BYTES},
    {.key = "token_file", .decode = vsr__cfg_string, .offset = CONF_OFF(management_token_file)},
    {.key = "token_env", .decode = vsr__cfg_env_name, .offset = CONF_OFF(management_token_env)},
};

static void finish_management(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                              size_t index)
{
    config_box_t *box = obj;
    const cfg_node_t *port = vsr__cfg_map_get(map, "port");
    vsr__cfg_mark(d, &box->conf.management_port, port ? port : map);
}

static const cfg_spec_t management_spec = {
    .size = sizeof(config_box_t),
    .fields = management_fields,
    .n_fields = VSR_ARRAY_LEN(management_fields),
    .finish = finish_management,
};

/* global.services.observability: tracing (OTLP/HTTP JSON export).  The
 * reference's layout: enabled, provider, exporter{type, endpoint, insecure},
 * sampling{type, rate}, resource{service_name, service_version,
 * deployment_environment}. */
static const char *const tracing_providers[] = {"opentelemetry", NULL};
/* otlp: OTLP/HTTP with an http:// endpoint, OTLP/gRPC with a bare
 * host:port (as the reference reads it) or a grpc:// / grpcs:// one;
 * otlp-grpc: OTLP/gRPC whatever the scheme; stdout: the reference's
 * console exporter (not supported yet) */
static const char *const tracing_exporters[] = {"otlp", "otlp-http", "otlphttp", "otlp-grpc", "stdout", NULL};
static const char *const tracing_sampling_types[] = {"always_on", "always_off", "probabilistic", NULL};

static const cfg_field_t tracing_exporter_fields[] = {
    {.key = "type", .decode = vsr__cfg_string, .offset = BOX_OFF(tracing_exporter_type), .choices = tracing_exporters},
    {.key = "endpoint", .decode = vsr__cfg_string, .offset = CONF_OFF(tracing_endpoint)},
    {.key = "insecure", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = BOX_OFF(tracing_insecure),
     .has_offset = BOX_OFF(has_tracing_insecure)},
};

static const cfg_spec_t tracing_exporter_spec = {
    .size = sizeof(config_box_t),
    .fields = tracing_exporter_fields,
    .n_fields = VSR_ARRAY_LEN(tracing_exporter_fields),
};

static const cfg_field_t tracing_sampling_fields[] = {
    {.key = "type", .decode = vsr__cfg_choice, .offset = BOX_OFF(tracing_sampling_type),
     .choices = tracing_sampling_types},
    {.key = "rate", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = BOX_OFF(tracing_rate),
     .has_offset = BOX_OFF(has_tracing_rate), .dmin = 0, .dmax = 1},
};

static const cfg_spec_t tracing_sampling_spec = {
    .size = sizeof(config_box_t),
    .fields = tracing_sampling_fields,
    .n_fields = VSR_ARRAY_LEN(tracing_sampling_fields),
};

/* A string that may be "": then as if absent (the reference's templates
 * render an unset version as ""). */
static int decode_optional_text(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind == CFG_NODE_SCALAR && val->type == CFG_STR && val->len == 0) {
        *(char **)((char *)obj + f->offset) = NULL;
        return 0;
    }
    return vsr__cfg_string(d, f, val, obj);
}

static const cfg_field_t tracing_resource_fields[] = {
    {.key = "service_name", .decode = vsr__cfg_string, .offset = CONF_OFF(tracing_service_name)},
    {.key = "service_version", .decode = decode_optional_text, .offset = CONF_OFF(tracing_service_version)},
    {.key = "deployment_environment", .decode = vsr__cfg_string, .offset = CONF_OFF(tracing_environment)},
};

static const cfg_spec_t tracing_resource_spec = {
    .size = sizeof(config_box_t),
    .fields = tracing_resource_fields,
    .n_fields = VSR_ARRAY_LEN(tracing_resource_fields),
};

static const cfg_field_t tracing_fields[] = {
    {.key = "enabled", .decode = vsr__cfg_bool, .offset = CONF_OFF(tracing_enabled)},
    {.key = "provider", .decode = vsr__cfg_string, .offset = BOX_OFF(tracing_provider), .choices = tracing_providers},
    {.key = "exporter", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &tracing_exporter_spec},
    {.key = "sampling", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &tracing_sampling_spec},
    {.key = "resource", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &tracing_resource_spec},
    {.key = "otlp_endpoint", .decode = vsr__cfg_string_or_unset, .offset = CONF_OFF(tracing_endpoint),
     .deprecated = "the reference replaced it with exporter.endpoint"},
    {.key = "sampling_ratio", .decode = vsr__cfg_double, .flags = CFG_HAS, .offset = BOX_OFF(tracing_rate),
     .has_offset = BOX_OFF(has_tracing_rate), .dmin = 0, .dmax = 1,
     .deprecated = "the reference replaced it with sampling.rate"},
};

static void finish_tracing(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                           size_t index)
{
    config_box_t *box = obj;
    vsr_config_t *c = &box->conf;
    switch (box->tracing_sampling_type) {
    case 0: c->tracing_sampling_ratio = 1; break;
    case 1: c->tracing_sampling_ratio = 0; break;
    default: c->tracing_sampling_ratio = box->has_tracing_rate ? box->tracing_rate : 1; break;
    }
    if (!c->tracing_enabled)
        return;
    const cfg_node_t *exp = vsr__cfg_map_get(map, "exporter");
    const cfg_node_t *ep = exp ? vsr__cfg_map_get(exp, "endpoint") : NULL;
    if (exp == NULL && c->tracing_endpoint == NULL) {
        /* the reference's start-up fails to make an exporter, warns and runs untraced */
        const cfg_node_t *on = vsr__cfg_map_get(map, "enabled");
        vsr__cfg_warn(d, "%s:%u:%u: %s.enabled is true but no exporter is configured: tracing stays off "
                      "(set exporter {type: otlp, endpoint: http://<collector>:4318} to export spans)",
                      d->dg->file, (on ? on : map)->line, (on ? on : map)->col, d->path);
        c->tracing_enabled = 0;
        return;
    }
    const cfg_node_t *type = exp ? vsr__cfg_map_get(exp, "type") : NULL;
    const char *t = box->tracing_exporter_type ? box->tracing_exporter_type : "otlp";
    static const char how[] = "export OTLP/HTTP instead: exporter {type: otlp, endpoint: http://<collector>:4318}";
    if (strcmp(t, "stdout") == 0) {
        vsr__cfg_node_error(d, type, "%s.exporter.type \"stdout\" is not supported yet; %s", d->path, how);
        return;
    }
    const char *e = c->tracing_endpoint ? c->tracing_endpoint : "";
    int bare = e[0] != '\0' && strstr(e, "://") == NULL;
    int grpc_scheme = strncmp(e, "grpc://", 7) == 0 || strncmp(e, "grpcs://", 8) == 0;
    int http_type = strcmp(t, "otlp-http") == 0 || strcmp(t, "otlphttp") == 0;
    if (http_type && grpc_scheme) {
        vsr__cfg_node_error(d, ep, "%s.exporter: type %s exports OTLP/HTTP, but the endpoint is a gRPC one; write "
                            "type otlp-grpc, or an http:// endpoint", d->path, t);
        return;
    }
    if (strcmp(t, "otlp-grpc") == 0 || grpc_scheme || (strcmp(t, "otlp") == 0 && bare)) {
        c->tracing_grpc = 1;
        if (e[0] == '\0') {
            vsr__cfg_node_error(d, ep ? ep : map, "%s.exporter.endpoint is required when tracing is enabled (an "
                                "OTLP/gRPC collector, e.g. 127.0.0.1:4317)", d->path);
            return;
        }
        /* the scheme says whether TLS, and so does insecure; they may not contradict */
        int tls_scheme = strncmp(e, "grpcs://", 8) == 0 || strncmp(e, "https://", 8) == 0;
        int plain_scheme = strncmp(e, "grpc://", 7) == 0 || strncmp(e, "http://", 7) == 0;
        const cfg_node_t *ins = exp ? vsr__cfg_map_get(exp, "insecure") : NULL;
        if (box->has_tracing_insecure && ((tls_scheme && box->tracing_insecure) ||
                                          (plain_scheme && !box->tracing_insecure))) {
            vsr__cfg_node_error(d, ins, "%s.exporter.insecure: %s contradicts the endpoint's scheme (%s); drop one",
                                d->path, box->tracing_insecure ? "true" : "false",
                                tls_scheme ? "TLS" : "plaintext");
            return;
        }
        c->tracing_grpc_tls = tls_scheme || (!plain_scheme && box->has_tracing_insecure && !box->tracing_insecure);
        const char *hp = strstr(e, "://") ? strstr(e, "://") + 3 : e;
        size_t hl = strlen(hp);
        if (hl > 0 && hp[hl - 1] == '/')
            hl--;
        const char *why = NULL;
        cfg_hostport_t hpo;
        if (!tls_scheme && !plain_scheme && !bare)
            why = "the scheme must be grpc://, grpcs://, http:// or https://";
        else if (memchr(hp, '/', hl) != NULL || strpbrk(hp, "?#@") != NULL)
            why = "no path, query, fragment or user info (the service's method is fixed)";
        else
            vsr__cfg_parse_hostport(vsr_slice(hp, hl), &hpo, &why);
        if (why != NULL)
            vsr__cfg_node_error(d, ep, "%s.exporter.endpoint: %s (OTLP/gRPC: host:port, e.g. 127.0.0.1:4317)",
                                d->path, why);
        return;
    }
    if (c->tracing_endpoint == NULL || c->tracing_endpoint[0] == '\0') {
        vsr__cfg_node_error(d, ep ? ep : map,
                            "%s.exporter.endpoint is required when tracing is enabled (an OTLP/HTTP collector, "
                            "e.g. http://127.0.0.1:4318)", d->path);
        return;
    }
    cfg_url_t url;
    const char *why = NULL;
    if (vsr__cfg_parse_base_url(vsr_slice_cstr(c->tracing_endpoint), &url, &why) != VSR_OK) {
        vsr__cfg_node_error(d, ep, "%s.exporter.endpoint: %s (vsr exports OTLP/HTTP JSON, e.g. "
                            "http://127.0.0.1:4318)", d->path, why ? why : "not an http:// URL");
        return;
    }
    if (url.tls)
        vsr__cfg_node_error(d, ep, "%s.exporter.endpoint: https collectors are not supported; export over http:// "
                            "to a local collector (it may forward over TLS)", d->path);
}

static void init_tracing(cfg_decoder_t *d, void *obj)
{
    ((config_box_t *)obj)->tracing_sampling_type = -1;
}

static const cfg_spec_t tracing_spec = {
    .size = sizeof(config_box_t),
    .fields = tracing_fields,
    .n_fields = VSR_ARRAY_LEN(tracing_fields),
    .init = init_tracing,
    .finish = finish_tracing,
};

static const cfg_field_t observability_fields[] = {
    {.key = "tracing", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &tracing_spec},
    UNIMPLEMENTED("metrics"),
    {.key = "profiling", .inert = "vsr has no profiling endpoint (the reference's is Go's pprof); profile vsr with perf"},
};

static const cfg_spec_t observability_spec = {
    .size = sizeof(config_box_t),
    .fields = observability_fields,
    .n_fields = VSR_ARRAY_LEN(observability_fields),
};

static const cfg_field_t services_fields[] = {
    UNIMPLEMENTED("api"),
    {.key = "response_api", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &vsr__cfg_response_api_spec},
    {.key = "observability", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &observability_spec},
    {.key = "authz", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &authz_spec},
    {.key = "ratelimit", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &ratelimit_spec},
    {.key = "management_api", .decode = vsr__cfg_object, .flags = CFG_NULL_OK | CFG_HAS, .spec = &management_spec,
     .has_offset = BOX_OFF(has_management)},
    {.key = "router_replay", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &vsr__cfg_router_replay_spec},
    UNIMPLEMENTED("startup_status"), /* where the reference records its start-up progress (store_backend, redis) */
};

static const cfg_spec_t services_spec = {
    .size = sizeof(config_box_t),
    .fields = services_fields,
    .n_fields = VSR_ARRAY_LEN(services_fields),
};

/* ---- global.model_catalog.runtime (vsr): which model runtime the router calls ---- */

/* endpoint: unix:///ABSOLUTE/PATH or http://IPV4:PORT (numeric: the client
 * resolves no names) */
static int decode_runtime_endpoint(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    int ok = 0;
    if (strncmp(s, "unix://", 7) == 0) {
        ok = s[7] == '/' && strlen(s + 7) < 108; /* sun_path */
    } else if (strncmp(s, "http://", 7) == 0) {
        const char *colon = strrchr(s + 7, ':');
        struct in_addr a;
        char host[64];
        size_t hl = colon ? (size_t)(colon - (s + 7)) : 0;
        uint64_t port = 0;
        ok = colon && hl > 0 && hl < sizeof(host) &&
             vsr_slice_to_u64(vsr_slice_cstr(colon + 1), 65535, &port) == VSR_OK && port > 0;
        if (ok) {
            memcpy(host, s + 7, hl);
            host[hl] = '\0';
            ok = inet_pton(AF_INET, host, &a) == 1;
        }
    }
    if (!ok) {
        vsr__cfg_node_error(d, val, "%s must be unix:///ABSOLUTE/PATH (under 108 bytes) or http://IPV4:PORT, got %s",
                            f->key, vsr__cfg_quote(d->pool, s, strlen(s)));
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

static const char *const runtime_embedders[] = {"hash", NULL};

static const cfg_field_t runtime_fields[] = {
    {.key = "endpoint", .decode = decode_runtime_endpoint, .offset = CONF_OFF(runtime_endpoint)},
    {.key = "managed", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = CONF_OFF(runtime_managed),
     .has_offset = CONF_OFF(has_runtime_managed)},
    {.key = "embedder", .decode = vsr__cfg_string, .offset = CONF_OFF(runtime_embedder), .choices = runtime_embedders},
    {.key = "model", .decode = vsr__cfg_string, .offset = CONF_OFF(runtime_model)},
    {.key = "threads", .decode = vsr__cfg_uint, .offset = CONF_OFF(runtime_threads), .size = sizeof(uint32_t),
     .min = 0, .max = 256},
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = CONF_OFF(runtime_timeout_ms)},
    {.key = "guard_model", .decode = vsr__cfg_string, .offset = CONF_OFF(runtime_guard_model)},
};

static void init_runtime(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    ((config_box_t *)obj)->conf.runtime_timeout_ms = VSR_DEFAULT_RUNTIME_TIMEOUT_MS;
}

static void finish_runtime(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                           size_t index)
{
    vsr_config_t *c = &((config_box_t *)obj)->conf;
    const cfg_node_t *to = vsr__cfg_map_get(map, "timeout");
    if (to != NULL && (c->runtime_timeout_ms == 0 || c->runtime_timeout_ms > 3600000))
        vsr__cfg_node_error(d, to, "timeout must be from 1ms to 1h");
    if (c->runtime_endpoint == NULL)
        return;
    if (c->has_runtime_managed && c->runtime_managed) {
        vsr__cfg_node_error(d, vsr__cfg_map_get(map, "managed"),
                            "managed: true and endpoint exclude each other (endpoint names a runtime vsr does not start)");
        return;
    }
    static const char *const child_only[] = {"embedder", "model", "threads", "guard_model"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(child_only); i++) {
        const cfg_node_t *v = vsr__cfg_map_get(map, child_only[i]);
        if (v != NULL)
            vsr__cfg_node_error(d, v, "%s only applies to a runtime vsr starts (managed), not to an endpoint",
                                child_only[i]);
    }
}

static const cfg_spec_t runtime_spec = {
    .size = sizeof(config_box_t),
    .fields = runtime_fields,
    .n_fields = VSR_ARRAY_LEN(runtime_fields),
    .init = init_runtime,
    .finish = finish_runtime,
};

/* ---- global.model_catalog.modules (ref §1.9): the families' defaults ----
 * Every block here is open: the model settings the reference's releases put
 * beside these (model_id, use_cpu, *_mapping_path, prompt_compression,
 * hallucination_mitigation, ...) are accepted and recorded as not
 * implemented without being listed. */

#define MOD_OFF(m) offsetof(config_box_t, conf.modules.m)

/* on_error: prompt_guard says allow | block (what a failed guard means for
 * the request); the classifiers say match | no_match, as conditions do. */
static int decode_module_on_error(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    static const char *const guard[] = {"allow", "block", "no_match", "match", NULL};
    cfg_field_t g = *f;
    g.choices = guard;
    g.offset = 0;
    int which = 0;
    if (vsr__cfg_choice(d, &g, val, &which) != 0)
        return -1;
    *(vsr_on_error_t *)((char *)obj + f->offset) = which % 2 ? VSR_ON_ERROR_MATCH : VSR_ON_ERROR_NO_MATCH;
    return 0;
}

/* A remote classifier's protocol (docs/signals.md "Bring a bigger model"):
 * http_classify (the reference's) or runtime_classify (a vsr extension: a
 * runtime's POST /v1/classify); http_chat is the reference's prompted-chat
 * guard, not implemented. */
static int decode_remote_protocol(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    static const char *const protocols[] = {"http_classify", "runtime_classify", "http_chat", NULL};
    cfg_field_t g = *f;
    g.choices = protocols;
    g.offset = 0;
    int which = 0;
    if (vsr__cfg_choice(d, &g, val, &which) != 0)
        return -1;
    if (which == 2) {
        vsr__cfg_node_error(d, val, "protocol http_chat is not implemented: use http_classify (a /classify endpoint "
                                    "that returns label scores) or runtime_classify");
        return -1;
    }
    *(vsr_remote_protocol_t *)((char *)obj + f->offset) = which == 0 ? VSR_REMOTE_HTTP_CLASSIFY : VSR_REMOTE_RUNTIME;
    vsr__cfg_mark(d, (char *)obj + f->offset, val); /* where the check of its external model reports */
    return 0;
}

static int decode_remote_contract(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    static const char *const contracts[] = {"label_distribution", "label_scores", "entities", NULL};
    cfg_field_t g = *f;
    g.choices = contracts;
    g.offset = 0;
    int which = 0;
    if (vsr__cfg_choice(d, &g, val, &which) != 0)
        return -1;
    *(int *)((char *)obj + f->offset) = which == 0;
    return 0;
}

#define RB_OFF(m) offsetof(vsr_remote_cls_conf_t, m)
static const cfg_field_t remote_backend_fields[] = {
    {.key = "protocol", .decode = decode_remote_protocol, .flags = CFG_REQUIRED, .offset = RB_OFF(protocol)},
    {.key = "model", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = RB_OFF(model)},
    {.key = "contract", .decode = decode_remote_contract, .offset = RB_OFF(distribution)},
    {.key = "deadline_ms", .decode = vsr__cfg_uint, .offset = RB_OFF(timeout_ms), .size = sizeof(uint64_t), .min = 1,
     .max = 60000},
};
const cfg_spec_t vsr__cfg_remote_backend_spec = {.size = sizeof(vsr_remote_cls_conf_t),
                                                 .fields = remote_backend_fields,
                                                 .n_fields = VSR_ARRAY_LEN(remote_backend_fields)};

static const cfg_field_t prompt_guard_fields[] = {
    {.key = "threshold", .decode = vsr__cfg_double, .offset = MOD_OFF(guard_threshold), .dmin = 0, .dmax = 1},
    {.key = "on_error", .decode = decode_module_on_error, .offset = MOD_OFF(guard_on_error)},
    {.key = "protocol", .decode = decode_remote_protocol, .offset = MOD_OFF(guard_remote.protocol)},
    {.key = "positive_labels", .decode = vsr__cfg_strlist, .offset = MOD_OFF(guard_positive)},
};
static const cfg_spec_t prompt_guard_spec = {
    .size = sizeof(config_box_t), .fields = prompt_guard_fields, .n_fields = VSR_ARRAY_LEN(prompt_guard_fields), .open = 1};

static const cfg_field_t domain_module_fields[] = {
    {.key = "threshold", .decode = vsr__cfg_double, .offset = MOD_OFF(domain_threshold), .dmin = 0, .dmax = 1},
    {.key = "fallback_category", .decode = vsr__cfg_string, .offset = MOD_OFF(domain_fallback)},
    {.key = "on_error", .decode = decode_module_on_error, .offset = MOD_OFF(domain_on_error)},
    {.key = "backend", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = MOD_OFF(domain_remote),
     .spec = &vsr__cfg_remote_backend_spec},
};
static const cfg_spec_t domain_module_spec = {
    .size = sizeof(config_box_t), .fields = domain_module_fields, .n_fields = VSR_ARRAY_LEN(domain_module_fields), .open = 1};

static const cfg_field_t pii_module_fields[] = {
    {.key = "threshold", .decode = vsr__cfg_double, .offset = MOD_OFF(pii_threshold), .dmin = 0, .dmax = 1},
    {.key = "on_error", .decode = decode_module_on_error, .offset = MOD_OFF(pii_on_error)},
    {.key = "backend", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = MOD_OFF(pii_remote),
     .spec = &vsr__cfg_remote_backend_spec},
};
static const cfg_spec_t pii_module_spec = {
    .size = sizeof(config_box_t), .fields = pii_module_fields, .n_fields = VSR_ARRAY_LEN(pii_module_fields), .open = 1};

static const cfg_field_t classifier_module_fields[] = {
    {.key = "domain", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &domain_module_spec},
    {.key = "category", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &domain_module_spec},
    {.key = "pii", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &pii_module_spec},
};
static const cfg_spec_t classifier_module_spec = {.size = sizeof(config_box_t),
                                                  .fields = classifier_module_fields,
                                                  .n_fields = VSR_ARRAY_LEN(classifier_module_fields), .open = 1};

static void init_modules(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_modules_conf_t *m = &((config_box_t *)obj)->conf.modules;
    m->guard_threshold = VSR_DEFAULT_GUARD_THRESHOLD;
    m->domain_threshold = VSR_DEFAULT_DOMAIN_THRESHOLD;
    m->pii_threshold = VSR_DEFAULT_PII_THRESHOLD;
}

static const cfg_field_t modules_fields[] = {
    {.key = "prompt_guard", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &prompt_guard_spec},
    {.key = "classifier", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &classifier_module_spec},
    {.key = "hallucination_mitigation", .decode = vsr__cfg_object, .flags = CFG_NULL_OK,
     .offset = CONF_OFF(hallucination), .spec = &vsr__cfg_hallucination_module_spec},
};
static const cfg_spec_t modules_spec = {
    .size = sizeof(config_box_t), .fields = modules_fields, .n_fields = VSR_ARRAY_LEN(modules_fields),
    .init = init_modules, .open = 1};

/* ---- global.model_catalog.embeddings.semantic.endpoint ---- */

static int decode_embed_base_url(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    cfg_url_t u;
    const char *why = NULL;
    if (vsr__cfg_parse_base_url(vsr_slice_cstr(s), &u, &why) != VSR_OK) {
        vsr__cfg_node_error(d, val, "base_url: %s", why);
        return -1;
    }
    if (u.tls) {
        vsr__cfg_node_error(d, val, "%s: https is not supported yet for remote embeddings (use http://, e.g. "
                                    "through a local TLS-terminating proxy)", d->path);
        return -1;
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

static const cfg_field_t embed_endpoint_fields[] = {
    {.key = "base_url", .decode = decode_embed_base_url, .flags = CFG_REQUIRED, .offset = CONF_OFF(remote_embed_url)},
    {.key = "model", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = CONF_OFF(remote_embed_model)},
    {.key = "api_key_env", .decode = vsr__cfg_string, .offset = CONF_OFF(remote_embed_key_env)},
    {.key = "dimensions", .flags = CFG_UNIMPLEMENTED},
    {.key = "timeout_seconds", .decode = vsr__cfg_uint, .size = 8, .max = 3600,
     .inert = "vsr bounds an embedding call with global.model_catalog.runtime.timeout"},
    {.key = "max_retries", .decode = vsr__cfg_uint, .size = 8, .max = 100,
     .inert = "vsr does not retry an embedding call: a failed one counts as the signal's error (on_error)"},
    {.key = "max_response_bytes", .decode = vsr__cfg_uint, .size = 8, .max = INT64_MAX,
     .inert = "vsr bounds an embedding answer by the vector's size"},
};
static const cfg_spec_t embed_endpoint_spec = {
    .size = sizeof(config_box_t), .fields = embed_endpoint_fields, .n_fields = VSR_ARRAY_LEN(embed_endpoint_fields)};

static const cfg_field_t semantic_fields[] = {
    {.key = "endpoint", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &embed_endpoint_spec},
};
static const cfg_spec_t semantic_spec = {
    .size = sizeof(config_box_t), .fields = semantic_fields, .n_fields = VSR_ARRAY_LEN(semantic_fields), .open = 1};

static const cfg_field_t embeddings_catalog_fields[] = {
    {.key = "semantic", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &semantic_spec},
};
static const cfg_spec_t embeddings_catalog_spec = {.size = sizeof(config_box_t),
                                                   .fields = embeddings_catalog_fields,
                                                   .n_fields = VSR_ARRAY_LEN(embeddings_catalog_fields),
                                                   .open = 1};

/* ---- global.model_catalog.kbs[] ---- */

static void finish_kb_entry(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    const vsr_kb_entry_conf_t *e = obj;
    const cfg_node_t *t = vsr__cfg_map_get(map, "text");
    if (e->text == NULL || t == NULL)
        return;
    size_t len = strlen(e->text), k = 0;
    while (k < len && (e->text[k] == ' ' || e->text[k] == '\t' || e->text[k] == '\n' || e->text[k] == '\r'))
        k++;
    if (k == len)
        vsr__cfg_node_error(d, t, "a kb entry's text must not be empty or blank");
    else if (len > VSR_EMB_MAX_CANDIDATE_BYTES)
        vsr__cfg_node_error(d, t, "a kb entry's text is at most %d bytes, got %zu", VSR_EMB_MAX_CANDIDATE_BYTES, len);
}

static const cfg_field_t kb_entry_fields[] = {
    {.key = "text", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_kb_entry_conf_t, text)},
    {.key = "label", .decode = vsr__cfg_string, .offset = offsetof(vsr_kb_entry_conf_t, label)},
    {.key = "group", .decode = vsr__cfg_string, .offset = offsetof(vsr_kb_entry_conf_t, group)},
};
static const cfg_spec_t kb_entry_spec = {.size = sizeof(vsr_kb_entry_conf_t),
                                         .fields = kb_entry_fields,
                                         .n_fields = VSR_ARRAY_LEN(kb_entry_fields),
                                         .finish = finish_kb_entry};

static void finish_kb(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen, size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    const vsr_kb_conf_t *k = obj;
    const cfg_node_t *e = vsr__cfg_map_get(map, "entries"), *docs = vsr__cfg_map_get(map, "documents");
    if (e && docs)
        vsr__cfg_node_error(d, docs, "a kb has entries or documents, not both");
    else if (!e && !docs && vsr__cfg_map_get(map, "source") == NULL)
        /* a kb read from source (the reference's labels.json under
         * source.path) is reported as not supported yet at its key */
        vsr__cfg_node_error(d, map, "a kb needs entries");
    else if (k->n_entries > VSR_KB_MAX_ENTRIES)
        vsr__cfg_node_error(d, e ? e : docs, "at most %d entries per kb, got %zu", VSR_KB_MAX_ENTRIES, k->n_entries);
}

static const cfg_field_t kb_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_kb_conf_t, name)},
    {.key = "description", .decode = vsr__cfg_accept_text},
    {.key = "entries", .decode = vsr__cfg_list, .flags = CFG_NONEMPTY, .offset = offsetof(vsr_kb_conf_t, entries),
     .count_offset = offsetof(vsr_kb_conf_t, n_entries), .spec = &kb_entry_spec},
    {.key = "documents", .decode = vsr__cfg_list, .flags = CFG_NONEMPTY, .offset = offsetof(vsr_kb_conf_t, entries),
     .count_offset = offsetof(vsr_kb_conf_t, n_entries), .spec = &kb_entry_spec},
    UNIMPLEMENTED("source"),
    UNIMPLEMENTED("threshold"),
    UNIMPLEMENTED("label_thresholds"),
    UNIMPLEMENTED("groups"),
    UNIMPLEMENTED("metrics"),
    {.key = "prototype_scoring", .inert = "vsr scores a knowledge base by its nearest entries (no prototype clustering)"},
};
static const cfg_spec_t kb_spec = {
    .size = sizeof(vsr_kb_conf_t), .fields = kb_fields, .n_fields = VSR_ARRAY_LEN(kb_fields), .finish = finish_kb};

/* ---- global.model_catalog.external[] (ref §1.9): models the router calls itself ---- */

#define EXT_OFF(m) offsetof(vsr_external_conf_t, m)
static const char *const external_roles[] = {"guardrail", "classification", "scoring", "preference",
                                             "memory_rewrite", "memory_extraction", NULL};
static const char *const external_protocols[] = {"http", "https", NULL};

static const cfg_field_t llm_endpoint_fields[] = {
    {.key = "address", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = EXT_OFF(address)},
    {.key = "port", .decode = vsr__cfg_uint, .flags = CFG_REQUIRED, .offset = EXT_OFF(port), .size = sizeof(uint32_t),
     .min = 1, .max = 65535},
    {.key = "protocol", .decode = vsr__cfg_string, .offset = EXT_OFF(protocol), .choices = external_protocols},
    {.key = "name", .decode = vsr__cfg_accept_text, .inert = "informational: vsr calls the address and port"},
    {.key = "use_chat_template", .decode = vsr__cfg_bool, .inert = "vsr's remote classifiers send the text as is"},
    {.key = "prompt_template", .decode = vsr__cfg_accept_text, .inert = "vsr's remote classifiers send the text as is"},
};
static const cfg_spec_t llm_endpoint_spec = {.size = sizeof(vsr_external_conf_t),
                                             .fields = llm_endpoint_fields,
                                             .n_fields = VSR_ARRAY_LEN(llm_endpoint_fields)};

static void init_external(cfg_decoder_t *d, void *obj)
{
    VSR_UNUSED(d);
    vsr_external_conf_t *e = obj;
    e->timeout_ms = VSR_EXTERNAL_DEFAULT_TIMEOUT_MS;
    e->max_request_bytes = VSR_EXTERNAL_DEFAULT_MAX_REQUEST;
    e->max_response_bytes = VSR_EXTERNAL_DEFAULT_MAX_RESPONSE;
}

/* The entry as a model of one backend, so that the upstream layer (its
 * connection pools, deadlines and response bound) carries its calls. */
static void finish_external(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    VSR_UNUSED(seen);
    vsr_external_conf_t *e = obj;
    vsr__cfg_mark(d, e, map);
    if (e->name == NULL) {
        char name[32];
        snprintf(name, sizeof(name), "external[%zu]", index);
        e->name = vsr__cfg_strdup(d, name);
    }
    if (e->address == NULL || e->address[0] == '\0' || e->port == 0)
        return; /* reported */
    vsr_backend_conf_t *b = &e->backend;
    b->name = vsr__cfg_strdup(d, "primary");
    b->host = e->address;
    b->port = (uint16_t)e->port;
    b->tls = e->protocol && strcmp(e->protocol, "https") == 0;
    b->weight = 1;
    b->path_prefix = vsr__cfg_strdup(d, "");
    b->resolved_api_key = e->access_key;
    b->authority = vsr__cfg_authority(d->pool, vsr_slice_cstr(b->host), strchr(b->host, ':') != NULL, b->port, b->tls);
    e->model.name = e->name;
    e->model.provider_model_id = e->model_name ? e->model_name : e->name;
    e->model.backends = b;
    e->model.n_backends = 1;
}

/* llm_timeout_seconds: whole seconds, 1..600, stored in ms. */
static int decode_external_seconds(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
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

static const cfg_field_t external_fields[] = {
    /* optional, as in the reference (entries are found by model_role); an unnamed one is "external[INDEX]" */
    {.key = "name", .decode = vsr__cfg_string, .offset = EXT_OFF(name)},
    {.key = "model_role", .decode = vsr__cfg_string, .offset = EXT_OFF(role), .choices = external_roles},
    /* optional, as in the reference: an entry no family asks needs none (cfg_check.c checks the ones asked) */
    {.key = "llm_endpoint", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &llm_endpoint_spec},
    {.key = "llm_model_name", .decode = vsr__cfg_string, .offset = EXT_OFF(model_name)},
    {.key = "llm_provider", .decode = vsr__cfg_accept_text,
     .inert = "informational: the protocol decides how vsr calls the endpoint"},
    {.key = "access_key", .decode = vsr__cfg_header_text, .offset = EXT_OFF(access_key)},
    {.key = "llm_timeout_seconds", .decode = decode_external_seconds, .offset = EXT_OFF(timeout_ms)},
    {.key = "max_request_bytes", .decode = vsr__cfg_uint, .offset = EXT_OFF(max_request_bytes),
     .size = sizeof(uint64_t), .min = 1024, .max = (int64_t)1 << 24},
    {.key = "max_response_bytes", .decode = vsr__cfg_uint, .offset = EXT_OFF(max_response_bytes),
     .size = sizeof(uint64_t), .min = 1024, .max = (int64_t)1 << 26},
    {.key = "max_tokens", .decode = vsr__cfg_uint, .size = sizeof(uint64_t), .min = 0, .max = INT32_MAX,
     .inert = "a remote classifier's answer is bounded by max_response_bytes"},
    {.key = "temperature", .decode = vsr__cfg_double, .dmin = 0, .dmax = 2,
     .inert = "vsr's remote classifiers are not sampled"},
    {.key = "threshold", .decode = vsr__cfg_double, .dmin = 0, .dmax = 1,
     .inert = "the signals' thresholds (and global.model_catalog.modules) apply"},
    {.key = "parser_type", .decode = vsr__cfg_accept_text, .inert = "the protocol decides how the answer is read"},
};
static const cfg_spec_t external_spec = {.size = sizeof(vsr_external_conf_t),
                                         .fields = external_fields,
                                         .n_fields = VSR_ARRAY_LEN(external_fields),
                                         .init = init_external,
                                         .finish = finish_external};

static const cfg_field_t model_catalog_fields[] = {
    {.key = "runtime", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &runtime_spec},
    {.key = "embeddings", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &embeddings_catalog_spec},
    UNIMPLEMENTED("system"),
    {.key = "external", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = CONF_OFF(externals),
     .count_offset = CONF_OFF(n_externals), .spec = &external_spec},
    {.key = "kbs", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = offsetof(config_box_t, conf.modules.kbs),
     .count_offset = offsetof(config_box_t, conf.modules.n_kbs), .spec = &kb_spec},
    {.key = "modules", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &modules_spec},
    UNIMPLEMENTED("admission"),
};

static const cfg_spec_t model_catalog_spec = {
    .size = sizeof(config_box_t),
    .fields = model_catalog_fields,
    .n_fields = VSR_ARRAY_LEN(model_catalog_fields),
};

static const cfg_field_t global_fields[] = {
    {.key = "router", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &router_spec},
    {.key = "services", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &services_spec},
    {.key = "stores", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &vsr__cfg_stores_spec},
    {.key = "integrations", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &vsr__cfg_integrations_spec},
    {.key = "model_catalog", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &model_catalog_spec},
};

static const cfg_spec_t global_spec = {
    .size = sizeof(config_box_t),
    .fields = global_fields,
    .n_fields = VSR_ARRAY_LEN(global_fields),
};

/* ---- the document ---------------------------------------------------------------------- */

static const cfg_field_t document_fields[] = {
    {.key = "version", .decode = decode_version, .flags = CFG_REQUIRED, .offset = CONF_OFF(version)},
    /* absent or []: the reference's default listener (see default_listener) */
    {.key = "listeners", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = CONF_OFF(listeners),
     .count_offset = CONF_OFF(n_listeners), .spec = &listener_spec},
    /* optional, as in the reference: without models, only a decision without modelRefs routes (finish_document) */
    {.key = "providers", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &providers_spec},
    {.key = "routing", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = BOX_OFF(routing),
     .spec = &vsr__cfg_routing_spec},
    {.key = "entrypoints", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = CONF_OFF(entrypoints),
     .count_offset = CONF_OFF(n_entrypoints), .spec = &vsr__cfg_entrypoint_spec},
    {.key = "recipes", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = BOX_OFF(recipe_list),
     .count_offset = BOX_OFF(n_recipe_list), .spec = &vsr__cfg_recipe_spec},
    {.key = "global", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .spec = &global_spec},
    UNIMPLEMENTED("evaluation"),
    {.key = "setup", .inert = "the reference dashboard's setup state; vsr has no setup wizard"},
};

static void init_document(cfg_decoder_t *d, void *obj)
{
    config_box_t *box = obj;
    vsr_config_t *c = &box->conf;
    c->runtime_timeout_ms = VSR_DEFAULT_RUNTIME_TIMEOUT_MS;
    c->management_address = vsr__cfg_strdup(d, "127.0.0.1");
    c->management_port = 8080;
    c->clear_route_cache = 1; /* the reference's default: Envoy routes again on the decision's model */
    c->management_max_document_bytes = VSR_CONFIG_DEFAULT_MAX_DOCUMENT_BYTES;
    c->authz_user_id_header = vsr__cfg_strdup(d, "x-authz-user-id");
    c->authz_user_groups_header = vsr__cfg_strdup(d, "x-authz-user-groups");
    c->tracing_service_name = vsr__cfg_strdup(d, "vllm-sr");
    c->tracing_sampling_ratio = 1;
    vsr__cfg_looper_defaults(&c->looper);
    c->rc_store.enabled = 1;
    c->rc_store.similarity_threshold = 0.5;
    c->rc_store.max_entries = 1000;
    c->rc_store.ttl_seconds = 3600;
    c->rc_store.max_bytes = (uint64_t)64 << 20;
    c->rc_store.redis_address = vsr__cfg_strdup(d, "127.0.0.1:6379");
    c->rc_store.redis_key_prefix = vsr__cfg_strdup(d, "vsr:rc:");
    c->rc_store.redis_timeout_ms = 250;
    c->resp_store.ttl_seconds = 86400;
    c->resp_store.max_responses = 1000;
    c->resp_store.redis_address = vsr__cfg_strdup(d, "127.0.0.1:6379");
    c->resp_store.redis_key_prefix = vsr__cfg_strdup(d, "vsr:resp:");
    c->resp_store.redis_timeout_ms = 250;
    c->replay_store.enabled = 1;
    c->replay_store.ttl_seconds = 2592000; /* 30 days */
    c->replay_store.async_writes = 1;
    c->replay_store.redis_address = vsr__cfg_strdup(d, "127.0.0.1:6379");
    c->replay_store.redis_key_prefix = vsr__cfg_strdup(d, "vsr:replay:");
    c->replay_store.redis_timeout_ms = 250;
    c->replay_store.pg_host = vsr__cfg_strdup(d, "localhost");
    c->replay_store.pg_port = 5432;
    c->replay_store.pg_ssl_mode = vsr__cfg_strdup(d, "disable");
    c->replay_store.pg_table_name = vsr__cfg_strdup(d, "router_replay_records");
    c->replay_store.pg_conn_max_lifetime = 300;
    box->default_retryable_codes[0] = 502;
    box->default_retryable_codes[1] = 503;
    box->default_retryable_codes[2] = 504;
}

static const cfg_spec_t document_spec;

static void check_listeners(cfg_decoder_t *d, const vsr_config_t *c, const cfg_node_t *list)
{
    size_t n = c->n_listeners;
    const char **names = vsr_malloc(n * sizeof(*names));
    const char **addrs = vsr_malloc(n * sizeof(*addrs));
    const cfg_node_t **name_nodes = vsr_malloc(n * sizeof(*name_nodes));
    const cfg_node_t **port_nodes = vsr_malloc(n * sizeof(*port_nodes));
    for (size_t i = 0; i < n; i++) {
        const vsr_listener_conf_t *l = &c->listeners[i];
        names[i] = l->name;
        name_nodes[i] = item_name_node(list, i);
        /* "::" and "0::0" are one socket address: compare canonical forms */
        char canon[64], key[96];
        addrs[i] = NULL;
        port_nodes[i] = vsr__cfg_map_get(list->items[i], "port");
        if (l->port != 0 && l->address != NULL && vsr__cfg_canonical_ip(l->address, canon, sizeof(canon)) == VSR_OK) {
            snprintf(key, sizeof(key), strchr(canon, ':') ? "[%s]:%u" : "%s:%u", canon, l->port);
            addrs[i] = vsr__cfg_strdup(d, key);
        }
    }
    vsr__cfg_check_unique(d, "listener name", names, name_nodes, n);
    vsr__cfg_check_unique(d, "listener address", addrs, port_nodes, n);
    vsr_free(names);
    vsr_free(addrs);
    vsr_free(name_nodes);
    vsr_free(port_nodes);
}

/* A document without listeners (Kubernetes and gateway deployments put the
 * listener elsewhere) is served on the reference CLI's default listener,
 * http-8899 on 0.0.0.0:8899, and the load says so. */
static void default_listener(cfg_decoder_t *d, vsr_config_t *c)
{
    c->listeners = vsr_pool_alloc(d->pool, sizeof(vsr_listener_conf_t));
    memset(c->listeners, 0, sizeof(vsr_listener_conf_t));
    init_listener(d, c->listeners);
    c->listeners[0].name = vsr__cfg_strdup(d, VSR_DEFAULT_LISTENER_NAME);
    c->listeners[0].port = VSR_DEFAULT_LISTENER_PORT;
    c->n_listeners = 1;
    c->listeners_defaulted = 1;
    vsr__cfg_warn(d, "%s: no listeners in the document: serving the default listener \"%s\" on %s:%u", d->dg->file,
                  c->listeners[0].name, c->listeners[0].address, (unsigned)c->listeners[0].port);
}

static void finish_document(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    config_box_t *box = obj;
    vsr_config_t *c = &box->conf;
    const cfg_node_t *listeners = vsr__cfg_seen(&document_spec, seen, "listeners");
    if (c->n_listeners == 0 && (listeners == NULL || vsr__cfg_is_empty(listeners))) {
        default_listener(d, c);
        listeners = NULL;
    }
    if (c->n_listeners > 1)
        check_listeners(d, c, listeners);
    for (size_t i = 0; listeners && listeners->kind == CFG_NODE_SEQ && i < c->n_listeners && i < listeners->n; i++) {
        const cfg_node_t *port = vsr__cfg_map_get(listeners->items[i], "port");
        vsr__cfg_mark(d, &c->listeners[i].port, port ? port : listeners->items[i]);
    }
    /* providers and providers.models are optional, as in the reference (its
     * own testdata loads documents without them, and a Kubernetes base takes
     * its models from the IntelligentPool): without models a decision routes
     * nowhere, so say so */
    if (c->n_models == 0 && !c->config_source_kubernetes) {
        const cfg_node_t *prov = vsr__cfg_seen(&document_spec, seen, "providers");
        const cfg_node_t *at = prov ? prov : map;
        vsr__cfg_warn(d, "%s:%u:%u: the document names no provider models (providers.models): no request has a "
                      "model to go to",
                      d->dg->file, at->line, at->col);
    }
    vsr__cfg_check_document(d, box);
}

static const cfg_spec_t document_spec = {
    .size = sizeof(config_box_t),
    .fields = document_fields,
    .n_fields = VSR_ARRAY_LEN(document_fields),
    .init = init_document,
    .finish = finish_document,
};

/* ---- public API ------------------------------------------------------------------------ */

/* Each recipe's signals_hash, from the tree: routing.signals for the
 * default recipe, recipes[i].routing.signals for the others. */
/* A recipe's signals hash covers its signals block and the families'
 * defaults in global.model_catalog.modules, which compile into them; the
 * decoded modules are copied into every recipe's signals here. */
static void hash_signals(vsr_config_t *c, const cfg_node_t *root)
{
    const cfg_node_t *list = vsr__cfg_map_get(root, "recipes");
    const cfg_node_t *g = vsr__cfg_map_get(root, "global");
    const cfg_node_t *mc = g ? vsr__cfg_map_get(g, "model_catalog") : NULL;
    const cfg_node_t *mods = mc ? vsr__cfg_map_get(mc, "modules") : NULL;
    if (c->modules.domain_fallback == NULL)
        c->modules.domain_fallback = "other";
    for (size_t i = 0; i < c->n_recipes; i++) {
        const cfg_node_t *routing = NULL;
        if (i == 0)
            routing = vsr__cfg_map_get(root, "routing");
        else if (list && list->kind == CFG_NODE_SEQ && i - 1 < list->n)
            routing = vsr__cfg_map_get(list->items[i - 1], "routing");
        const cfg_node_t *sig = routing ? vsr__cfg_map_get(routing, "signals") : NULL;
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        if (sig == NULL || vsr__cfg_canonical_node(&b, sig) != VSR_OK) {
            vsr_buf_reset(&b);
            vsr_buf_append_cstr(&b, "null");
        }
        if (mods != NULL) {
            size_t at = b.len;
            vsr_buf_append_cstr(&b, "\nmodules:");
            if (vsr__cfg_canonical_node(&b, mods) != VSR_OK)
                b.len = at;
        }
        const cfg_node_t *ext = mc ? vsr__cfg_map_get(mc, "external") : NULL;
        if (ext != NULL) { /* a remote classifier's settings compile into the signals */
            size_t at = b.len;
            vsr_buf_append_cstr(&b, "\nexternal:");
            if (vsr__cfg_canonical_node(&b, ext) != VSR_OK)
                b.len = at;
        }
        const cfg_node_t *kbs = mc ? vsr__cfg_map_get(mc, "kbs") : NULL;
        if (kbs != NULL) {
            size_t at = b.len;
            vsr_buf_append_cstr(&b, "\nkbs:");
            if (vsr__cfg_canonical_node(&b, kbs) != VSR_OK)
                b.len = at;
        }
        /* a classifier's model_path bank compiles into it: a changed file is a changed signal */
        const vsr_signals_conf_t *sc = &c->recipes[i].signals;
        for (size_t k = 0; k < sc->n_classifiers; k++) {
            if (sc->classifiers[k].model_path == NULL)
                continue;
            vsr_buf_printf(&b, "\nbank %zu:", k);
            for (size_t e = 0; e < sc->classifiers[k].n_examples; e++)
                vsr_buf_printf(&b, "%u:%zu:%s\n", (unsigned)sc->classifiers[k].examples[e].label,
                               strlen(sc->classifiers[k].examples[e].text), sc->classifiers[k].examples[e].text);
            for (size_t l = 0; l < sc->classifiers[k].n_labels; l++)
                vsr_buf_printf(&b, "%zu:%s\n", strlen(sc->classifiers[k].labels[l]), sc->classifiers[k].labels[l]);
        }
        c->recipes[i].signals.modules = c->modules;
        vsr_config_hash(b.data, b.len, c->recipes[i].signals_hash);
        vsr_buf_free(&b);
    }
}

/* "FILE:L:C: msg" → "FILE:L:C: warning: msg" (a message without a
 * position gets the word in front). */
static void note_warning(vsr_buf_t *b, const char *file, const char *msg)
{
    size_t fl = strlen(file);
    const char *p = msg;
    if (strncmp(msg, file, fl) == 0 && msg[fl] == ':') {
        p = msg + fl + 1;
        for (int part = 0; part < 2 && *p >= '0' && *p <= '9'; part++) {
            while (*p >= '0' && *p <= '9')
                p++;
            if (*p == ':')
                p++;
        }
        if (*p == ' ')
            p++;
    }
    if (p == msg)
        vsr_buf_printf(b, "%s: warning: %s\n", file, msg);
    else
        vsr_buf_printf(b, "%.*swarning: %s\n", (int)(p - msg), msg, p);
}

static void note_unsupported(vsr_buf_t *b, const char *file, const cfg_decoder_t *d)
{
    for (size_t i = 0; i < d->n_unimpl; i++)
        vsr_buf_printf(b, "%s:%u:%u: not supported yet: %s (accepted, no effect)\n", file, d->unimpl_at[i].line,
                       d->unimpl_at[i].col, d->unimpl[i]);
}

int vsr__cfg_load_tree(cfg_diag_t *dg, int parsed, const cfg_node_t *root, const char *path, vsr_config_t **out,
                       vsr_buf_t *warnings, vsr_buf_t *unsupported)
{
    const char *file = dg->file;
    *out = NULL;
    config_box_t *box = vsr_calloc(1, sizeof(*box));
    vsr_pool_init(&box->pool);
    cfg_decoder_t d = {.pool = &box->pool, .dg = dg, .user = box};
    init_modules(&d, box);

    if (parsed) {
        if (dg->ignored_line > 0)
            vsr__cfg_warn(&d,
                          "%s:%u:%u: a second YAML document starts here: it and anything after it are ignored, "
                          "as the reference ignores them (it reads only the first document)",
                          file, dg->ignored_line, dg->ignored_col);
        if (root == NULL)
            vsr__cfg_error(dg, 1, 1, "the document is empty");
        else if (root->kind == CFG_NODE_SCALAR && root->type == CFG_NULL)
            vsr__cfg_error(dg, root->line, root->col, "the document is empty");
        else
            vsr__cfg_decode_object(&d, &document_spec, root, &box->conf, 0);
        if (dg->n_errors == 0 && root != NULL)
            hash_signals(&box->conf, root);
    }
    vsr_free(d.marks);

    for (size_t i = 0; warnings != NULL && i < d.n_warnings; i++)
        note_warning(warnings, file, d.warnings[i]);
    if (unsupported != NULL)
        note_unsupported(unsupported, file, &d);
    if (dg->n_errors > 0) {
        vsr_free(d.unimpl);
        vsr_free(d.unimpl_at);
        vsr_free(d.warnings);
        vsr_free(d.warned);
        vsr_pool_free(&box->pool);
        vsr_free(box);
        return VSR_ERR_INVALID;
    }
    /* only now: a document that fails says what is wrong, not what would
     * have been adjusted */
    for (size_t i = 0; warnings == NULL && i < d.n_warnings; i++)
        vsr_log_warn("config", "%s", d.warnings[i]);
    vsr_free(d.warnings);
    vsr_free(d.warned);
    vsr_config_t *c = &box->conf;
    c->path = vsr__cfg_strdup(&d, path);
    c->n_unimplemented = d.n_unimpl;
    if (d.n_unimpl > 0) {
        c->unimplemented = vsr_pool_alloc(&box->pool, d.n_unimpl * sizeof(char *));
        memcpy(c->unimplemented, d.unimpl, d.n_unimpl * sizeof(char *));
        c->unimplemented_line = vsr_pool_alloc(&box->pool, d.n_unimpl * sizeof(uint32_t));
        c->unimplemented_col = vsr_pool_alloc(&box->pool, d.n_unimpl * sizeof(uint32_t));
        for (size_t i = 0; i < d.n_unimpl; i++) {
            c->unimplemented_line[i] = d.unimpl_at[i].line;
            c->unimplemented_col[i] = d.unimpl_at[i].col;
        }
    }
    vsr_free(d.unimpl);
    vsr_free(d.unimpl_at);
    *out = c;
    return VSR_OK;
}

static int load(const char *file, const char *path, const char *yaml, size_t len, vsr_config_t **out, vsr_buf_t *err,
                vsr_buf_t *warnings, vsr_buf_t *unsupported)
{
    cfg_diag_t dg = {.out = err, .file = file};
    vsr_pool_t tree_pool;
    vsr_pool_init(&tree_pool);
    cfg_node_t *root = NULL;
    int parsed = vsr__cfg_parse_yaml(&tree_pool, &dg, yaml ? yaml : "", yaml ? len : 0, &root) == VSR_OK;
    int rc = vsr__cfg_load_tree(&dg, parsed, root, path, out, warnings, unsupported);
    vsr_pool_free(&tree_pool);
    return rc;
}

int vsr_config_load_string(const char *name, const char *yaml, size_t len, vsr_config_t **out, vsr_buf_t *err)
{
    *out = NULL;
    return load(name ? name : "<string>", name ? name : "<string>", yaml, len, out, err, NULL, NULL);
}

static int io_error(const char *path, int e, vsr_buf_t *err)
{
    if (err != NULL)
        vsr_buf_printf(err, "%s: %s\n", path, strerror(e));
    return VSR_ERR_IO;
}

int vsr_config_load_file(const char *path, vsr_config_t **out, vsr_buf_t *err)
{
    return vsr_config_load_file_notes(path, out, err, NULL, NULL);
}

int vsr_config_load_file_notes(const char *path, vsr_config_t **out, vsr_buf_t *err, vsr_buf_t *warnings,
                               vsr_buf_t *unsupported)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return io_error(path, errno, err);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return io_error(path, e, err);
    }
    if (S_ISREG(st.st_mode) && st.st_size > (off_t)MAX_FILE_BYTES) {
        close(fd);
        if (err != NULL)
            vsr_buf_printf(err, "%s:1:1: the file is larger than %u bytes\n", path, MAX_FILE_BYTES);
        return VSR_ERR_INVALID;
    }
    /* read to EOF rather than trusting st_size: pipes and /proc files */
    size_t len = 0, alloc = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 4096;
    char *data = vsr_malloc(alloc);
    for (;;) {
        if (len == alloc) {
            if (alloc > MAX_FILE_BYTES) {
                vsr_free(data);
                close(fd);
                if (err != NULL)
                    vsr_buf_printf(err, "%s:1:1: the file is larger than %u bytes\n", path, MAX_FILE_BYTES);
                return VSR_ERR_INVALID;
            }
            alloc *= 2;
            data = vsr_realloc(data, alloc);
        }
        ssize_t got = read(fd, data + len, alloc - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            vsr_free(data);
            close(fd);
            return io_error(path, e, err);
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    int rc = load(path, path, data, len, out, err, warnings, unsupported);
    vsr_free(data);
    return rc;
}

void vsr_config_free(vsr_config_t *c)
{
    if (c == NULL)
        return;
    config_box_t *box = (config_box_t *)c;
    vsr_pool_free(&box->pool);
    vsr_free(box);
}

const vsr_recipe_conf_t *vsr_config_find_recipe(const vsr_config_t *c, vsr_slice_t name)
{
    for (size_t i = 0; i < c->n_recipes; i++)
        if (c->recipes[i].name != NULL && vsr_slice_eq_cstr(name, c->recipes[i].name))
            return &c->recipes[i];
    return NULL;
}

void vsr_config_effective_fallback(const vsr_config_t *c, const vsr_recipe_conf_t *recipe,
                                   const vsr_decision_conf_t *decision, vsr_fallback_conf_t *out)
{
    vsr__cfg_fallback_defaults((const config_box_t *)c, out);
    vsr__cfg_fallback_merge(out, &c->global_fallback);
    if (recipe != NULL)
        vsr__cfg_fallback_merge(out, &recipe->fallback);
    if (decision != NULL)
        vsr__cfg_fallback_merge(out, &decision->fallback);
}

const vsr_model_conf_t *vsr_config_find_model(const vsr_config_t *c, vsr_slice_t name)
{
    for (size_t i = 0; i < c->n_models; i++)
        if (c->models[i].name != NULL && vsr_slice_eq_cstr(name, c->models[i].name))
            return &c->models[i];
    return NULL;
}

const vsr_external_conf_t *vsr_config_find_external(const vsr_config_t *c, vsr_slice_t name)
{
    for (size_t i = 0; i < c->n_externals; i++)
        if (c->externals[i].name != NULL && vsr_slice_eq_cstr(name, c->externals[i].name))
            return &c->externals[i];
    return NULL;
}

const vsr_model_conf_t *vsr_config_default_model(const vsr_config_t *c)
{
    if (c->default_model != NULL) {
        const vsr_model_conf_t *m = vsr_config_find_model(c, vsr_slice_cstr(c->default_model));
        if (m != NULL)
            return m;
    }
    return c->n_models > 0 ? &c->models[0] : NULL;
}

void vsr_config_warn_unimplemented(const vsr_config_t *c)
{
    if (c->n_unimplemented == 0)
        return;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (size_t i = 0; i < c->n_unimplemented; i++)
        vsr_buf_printf(&b, "%s%s", i ? ", " : "", c->unimplemented[i]);
    vsr_log_warn("config", "%s: accepted but not implemented yet, so they have no effect: %.*s", c->path,
                 (int)b.len, b.data);
    vsr_buf_free(&b);
}
