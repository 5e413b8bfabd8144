/*
 * config.c — the v0.3 schema as field tables, the checks that span fields
 * and objects, and the public entry points of config.h.
 *
 * Reading a table top to bottom tells which keys an object has, which are
 * required, and which belong to v0.3 but are not implemented yet.  Growing
 * the model means adding rows (and, for new value kinds, a decoder
 * function), not new control flow.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/cfg_internal.h"
#include "config/config.h"

#define MAX_FILE_BYTES (16u * 1024 * 1024)
#define MAX_BACKEND_WEIGHT 1000000

/* Rows for keys vsr accepts and reports but does not act on yet. */
#define UNIMPLEMENTED(k) {.key = (k), .flags = CFG_UNIMPLEMENTED}
#define UNIMPLEMENTED_ALIAS(k, target) {.key = (k), .flags = CFG_UNIMPLEMENTED, .alias_of = (target)}

/* The allocation behind a vsr_config_t: everything it points to lives in
 * `pool`, so freeing is one call whatever the document held. */
typedef struct {
    vsr_config_t conf; /* first: vsr_config_free converts back */
    vsr_pool_t pool;
} config_box_t;

/* ---- providers.models[].backend_refs[] -------------------------------------- */

static int decode_endpoint(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_backend_conf_t *b = obj;
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    cfg_hostport_t hp;
    const char *why;
    if (vsr__cfg_parse_hostport(vsr_slice(s, val->len), &hp, &why) != VSR_OK) {
        vsr__cfg_node_error(d, val, "invalid endpoint %s: %s", vsr__cfg_quote(d->pool, s, val->len), why);
        return -1;
    }
    b->host = vsr_pool_strndup(d->pool, hp.host.p, hp.host.len);
    b->port = hp.port; /* 0: the scheme default, chosen in finish_backend */
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
    if (url.tls) {
        vsr__cfg_node_error(d, val, "upstream TLS is not supported yet");
        return -1;
    }
    return 0;
}

/* Only validated here: with base_url the URL's scheme decides, so the
 * resulting tls flag is settled in finish_backend. */
static int decode_protocol(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (strcmp(s, "https") == 0) {
        vsr__cfg_node_error(d, val, "upstream TLS is not supported yet");
        return -1;
    }
    if (strcmp(s, "http") != 0) {
        vsr__cfg_node_error(d, val, "protocol must be \"http\" or \"https\", got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    return 0;
}

static const cfg_field_t backend_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .offset = offsetof(vsr_backend_conf_t, name)},
    {.key = "endpoint", .decode = decode_endpoint},
    {.key = "base_url", .decode = decode_base_url},
    {.key = "protocol", .decode = decode_protocol},
    {.key = "weight", .decode = vsr__cfg_uint, .offset = offsetof(vsr_backend_conf_t, weight),
     .size = sizeof(uint32_t), .min = 1, .max = MAX_BACKEND_WEIGHT},
    UNIMPLEMENTED("type"),
    UNIMPLEMENTED("provider"),
    UNIMPLEMENTED("auth_header"),
    UNIMPLEMENTED("auth_prefix"),
    UNIMPLEMENTED("api_key"),
    UNIMPLEMENTED("api_key_env"),
    UNIMPLEMENTED("extra_headers"),
    UNIMPLEMENTED("api_version"),
    UNIMPLEMENTED("chat_path"),
};

static void init_backend(cfg_decoder_t *d, void *obj)
{
    vsr_backend_conf_t *b = obj;
    b->weight = 1;
}

static const cfg_spec_t backend_spec;

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
    if (endpoint)
        b->tls = protocol && protocol->type == CFG_STR && strcmp(protocol->str, "https") == 0;
    if (b->host == NULL) /* endpoint/base_url was invalid, already reported */
        return;
    if (b->port == 0)
        b->port = b->tls ? 443 : 80;
    if (b->path_prefix == NULL)
        b->path_prefix = vsr__cfg_strdup(d, "");
    b->authority = vsr__cfg_authority(d->pool, vsr_slice_cstr(b->host), strchr(b->host, ':') != NULL, b->port, b->tls);
}

static const cfg_spec_t backend_spec = {
    .path = "providers.models[].backend_refs[]",
    .size = sizeof(vsr_backend_conf_t),
    .fields = backend_fields,
    .n_fields = VSR_ARRAY_LEN(backend_fields),
    .init = init_backend,
    .finish = finish_backend,
};

/* ---- providers.models[] --------------------------------------------------------- */

static const cfg_field_t model_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_model_conf_t, name)},
    {.key = "provider_model_id", .decode = vsr__cfg_string, .offset = offsetof(vsr_model_conf_t, provider_model_id)},
    {.key = "backend_refs", .decode = vsr__cfg_list, .flags = CFG_REQUIRED | CFG_NONEMPTY,
     .offset = offsetof(vsr_model_conf_t, backends), .count_offset = offsetof(vsr_model_conf_t, n_backends),
     .spec = &backend_spec},
    UNIMPLEMENTED("api_format"),
    UNIMPLEMENTED("reasoning"),
    UNIMPLEMENTED("reasoning_family"),
    UNIMPLEMENTED("reliability"),
    UNIMPLEMENTED("pricing"),
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

static void finish_model(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                         size_t index)
{
    vsr_model_conf_t *m = obj;
    if (m->provider_model_id == NULL && m->name != NULL)
        m->provider_model_id = vsr__cfg_strdup(d, m->name);

    const cfg_node_t *refs = vsr__cfg_seen(&model_spec, seen, "backend_refs");
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
    .path = "providers.models[]",
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
     .alias_of = "model"},
    UNIMPLEMENTED("reasoning_effort"),
    UNIMPLEMENTED_ALIAS("default_reasoning_effort", "reasoning_effort"),
    UNIMPLEMENTED("reasoning_families"),
};

static const cfg_spec_t defaults_spec = {
    .path = "providers.defaults",
    .size = sizeof(vsr_config_t),
    .fields = defaults_fields,
    .n_fields = VSR_ARRAY_LEN(defaults_fields),
};

static const cfg_field_t providers_fields[] = {
    {.key = "defaults", .decode = vsr__cfg_object, .spec = &defaults_spec},
    {.key = "models", .decode = vsr__cfg_list, .flags = CFG_REQUIRED | CFG_NONEMPTY,
     .offset = offsetof(vsr_config_t, models), .count_offset = offsetof(vsr_config_t, n_models), .spec = &model_spec},
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
    /* only meaningful once the models decoded; otherwise that error stands alone */
    if (c->default_model != NULL && c->n_models > 0 && vsr_config_find_model(c, vsr_slice_cstr(c->default_model)) == NULL) {
        const cfg_node_t *defaults = vsr__cfg_seen(&providers_spec, seen, "defaults");
        const cfg_node_t *at = vsr__cfg_map_get(defaults, "model");
        if (at == NULL)
            at = vsr__cfg_map_get(defaults, "default_model");
        vsr__cfg_node_error(d, at ? at : map, "default model %s is not defined in providers.models",
                            vsr__cfg_quote(d->pool, c->default_model, strlen(c->default_model)));
    }
}

static const cfg_spec_t providers_spec = {
    .path = "providers",
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

static const cfg_field_t listener_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(vsr_listener_conf_t, name)},
    {.key = "address", .decode = decode_address, .offset = offsetof(vsr_listener_conf_t, address)},
    {.key = "port", .decode = vsr__cfg_uint, .flags = CFG_REQUIRED, .offset = offsetof(vsr_listener_conf_t, port),
     .size = sizeof(uint16_t), .min = 1, .max = 65535},
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = offsetof(vsr_listener_conf_t, timeout_ms)},
    /* vsr extensions */
    {.key = "max_request_body_bytes", .decode = vsr__cfg_uint, .offset = offsetof(vsr_listener_conf_t, max_body_bytes),
     .size = sizeof(uint64_t), .min = 1, .max = INT64_MAX},
    {.key = "max_connections", .decode = vsr__cfg_uint, .offset = offsetof(vsr_listener_conf_t, max_connections),
     .size = sizeof(uint32_t), .min = 1, .max = UINT32_MAX},
    UNIMPLEMENTED("api_keys"),
    UNIMPLEMENTED("models"),
    UNIMPLEMENTED("tls"),
    UNIMPLEMENTED("identity"),
};

static void init_listener(cfg_decoder_t *d, void *obj)
{
    vsr_listener_conf_t *l = obj;
    l->address = vsr__cfg_strdup(d, "0.0.0.0");
    l->timeout_ms = VSR_DEFAULT_LISTENER_TIMEOUT_MS;
    l->max_body_bytes = VSR_DEFAULT_MAX_BODY_BYTES;
    l->max_connections = VSR_DEFAULT_MAX_CONNECTIONS;
}

static const cfg_spec_t listener_spec = {
    .path = "listeners[]",
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

static const cfg_field_t document_fields[] = {
    {.key = "version", .decode = decode_version, .flags = CFG_REQUIRED, .offset = offsetof(vsr_config_t, version)},
    {.key = "listeners", .decode = vsr__cfg_list, .flags = CFG_REQUIRED | CFG_NONEMPTY,
     .offset = offsetof(vsr_config_t, listeners), .count_offset = offsetof(vsr_config_t, n_listeners),
     .spec = &listener_spec},
    {.key = "providers", .decode = vsr__cfg_object, .flags = CFG_REQUIRED, .spec = &providers_spec},
    UNIMPLEMENTED("evaluation"),
    UNIMPLEMENTED("routing"),
    UNIMPLEMENTED("entrypoints"),
    UNIMPLEMENTED("recipes"),
    UNIMPLEMENTED("global"),
};

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

static void finish_document(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    vsr_config_t *c = obj;
    if (c->n_listeners > 1)
        check_listeners(d, c, vsr__cfg_seen(&document_spec, seen, "listeners"));
}

static const cfg_spec_t document_spec = {
    .path = "",
    .size = sizeof(vsr_config_t),
    .fields = document_fields,
    .n_fields = VSR_ARRAY_LEN(document_fields),
    .finish = finish_document,
};

/* ---- public API ------------------------------------------------------------------------ */

static int load(const char *file, const char *path, const char *yaml, size_t len, vsr_config_t **out, vsr_buf_t *err)
{
    cfg_diag_t dg = {err, file, 0};
    vsr_pool_t tree_pool;
    vsr_pool_init(&tree_pool);
    config_box_t *box = vsr_calloc(1, sizeof(*box));
    vsr_pool_init(&box->pool);
    cfg_decoder_t d = {.pool = &box->pool, .dg = &dg};

    cfg_node_t *root = NULL;
    if (vsr__cfg_parse_yaml(&tree_pool, &dg, yaml ? yaml : "", yaml ? len : 0, &root) == VSR_OK) {
        if (root == NULL)
            vsr__cfg_error(&dg, 1, 1, "the document is empty");
        else if (root->kind == CFG_NODE_SCALAR && root->type == CFG_NULL)
            vsr__cfg_error(&dg, root->line, root->col, "the document is empty");
        else
            vsr__cfg_decode_object(&d, &document_spec, root, &box->conf, 0);
    }
    vsr_pool_free(&tree_pool);

    if (dg.n_errors > 0) {
        vsr_free(d.unimpl);
        vsr_pool_free(&box->pool);
        vsr_free(box);
        return VSR_ERR_INVALID;
    }
    vsr_config_t *c = &box->conf;
    c->path = vsr__cfg_strdup(&d, path);
    c->n_unimplemented = d.n_unimpl;
    if (d.n_unimpl > 0) {
        c->unimplemented = vsr_pool_alloc(&box->pool, d.n_unimpl * sizeof(char *));
        memcpy(c->unimplemented, d.unimpl, d.n_unimpl * sizeof(char *));
    }
    vsr_free(d.unimpl);
    *out = c;
    return VSR_OK;
}

int vsr_config_load_string(const char *name, const char *yaml, size_t len, vsr_config_t **out, vsr_buf_t *err)
{
    *out = NULL;
    return load(name ? name : "<string>", "<string>", yaml, len, out, err);
}

static int io_error(const char *path, int e, vsr_buf_t *err)
{
    if (err != NULL)
        vsr_buf_printf(err, "%s: %s\n", path, strerror(e));
    return VSR_ERR_IO;
}

int vsr_config_load_file(const char *path, vsr_config_t **out, vsr_buf_t *err)
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
    int rc = load(path, path, data, len, out, err);
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

const vsr_model_conf_t *vsr_config_find_model(const vsr_config_t *c, vsr_slice_t name)
{
    for (size_t i = 0; i < c->n_models; i++)
        if (c->models[i].name != NULL && vsr_slice_eq_cstr(name, c->models[i].name))
            return &c->models[i];
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
