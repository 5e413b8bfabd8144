/*
 * cfg_snapshot.c — what makes a document a version: its canonical form and
 * content hash, the history of activated versions, and the comparison that
 * says whether a new document can be applied without a restart.
 *
 * The canonical document is the YAML tree rendered as JSON: keys in document
 * order, comments, quoting style, anchors and layout gone, scalars in their
 * resolved types.  Two files that differ only in formatting have the same
 * hash; the JSON text is itself a valid YAML document, so a stored version
 * reloads through the same loader (rollback).
 */
#include "config/cfg_internal.h"

#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* ---- canonical form ---------------------------------------------------------- */

static int put_string(vsr_buf_t *b, vsr_slice_t s);

static int put_double(vsr_buf_t *b, const cfg_node_t *n)
{
    char *end;
    double v = strtod(n->str, &end);
    if (!isfinite(v) || *end != '\0') /* .inf, .nan: no JSON number for them */
        return put_string(b, vsr_slice(n->str, n->len));
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) { /* the shortest text that reads back the same */
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    /* keep it a float: "1" would come back as an integer */
    if (strpbrk(tmp, ".eE") == NULL)
        strcat(tmp, ".0");
    return vsr_buf_append_cstr(b, tmp);
}

/* A JSON string that YAML reads back unchanged: besides JSON's escapes,
 * the characters YAML refuses (DEL, C1 controls, U+FFFE, U+FFFF) or takes as
 * line breaks inside a quoted scalar (NEL, U+2028, U+2029) are escaped. */
static int put_string(vsr_buf_t *b, vsr_slice_t s)
{
    vsr_buf_t tmp;
    vsr_buf_init(&tmp, 0);
    int rc = vsr_buf_append_json_string(&tmp, s);
    const unsigned char *p = (const unsigned char *)tmp.data;
    size_t start = 0;
    for (size_t i = 0; rc == VSR_OK && i < tmp.len; i++) {
        unsigned cp = 0, n = 0;
        if (p[i] == 0x7f)
            cp = 0x7f, n = 1;
        else if (p[i] == 0xc2 && i + 1 < tmp.len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
            cp = p[i + 1], n = 2;
        else if (p[i] == 0xe2 && i + 2 < tmp.len && p[i + 1] == 0x80 && (p[i + 2] == 0xa8 || p[i + 2] == 0xa9))
            cp = 0x2000u | (p[i + 2] - 0x80u), n = 3;
        else if (p[i] == 0xef && i + 2 < tmp.len && p[i + 1] == 0xbf && (p[i + 2] == 0xbe || p[i + 2] == 0xbf))
            cp = 0xffc0u | (p[i + 2] & 0x3fu), n = 3; /* U+FFFE, U+FFFF */
        if (n == 0)
            continue;
        rc |= vsr_buf_append(b, tmp.data + start, i - start);
        rc |= vsr_buf_printf(b, "\\u%04x", cp);
        i += n - 1;
        start = i + 1;
    }
    if (rc == VSR_OK)
        rc = vsr_buf_append(b, tmp.data + start, tmp.len - start);
    vsr_buf_free(&tmp);
    return rc;
}

/* An integer too large for 64 bits: JSON has no leading "+" or zeros, and
 * no hex or octal, so decimal digits are normalised and the rest becomes a
 * string (no field takes such a value: the loader reports it either way). */
static int put_big_int(vsr_buf_t *b, const cfg_node_t *n)
{
    size_t i = 0, len = n->len;
    const char *p = n->str;
    int neg = 0;
    if (i < len && (p[i] == '+' || p[i] == '-'))
        neg = p[i++] == '-';
    size_t start = i;
    for (; i < len; i++)
        if (p[i] < '0' || p[i] > '9')
            return put_string(b, vsr_slice(p, len));
    while (start + 1 < len && p[start] == '0')
        start++;
    if (start >= len)
        return put_string(b, vsr_slice(p, len));
    int rc = neg ? vsr_buf_append(b, "-", 1) : VSR_OK;
    return rc | vsr_buf_append(b, p + start, len - start);
}

static int emit(vsr_buf_t *b, const cfg_node_t *n, int depth)
{
    int rc = VSR_OK;
    if (depth > 256)
        return VSR_ERR_INVALID;
    switch (n->kind) {
    case CFG_NODE_MAP:
        rc |= vsr_buf_append(b, "{", 1);
        for (size_t i = 0; i < n->n; i++) {
            const cfg_node_t *k = n->items[2 * i], *v = n->items[2 * i + 1];
            if (i)
                rc |= vsr_buf_append(b, ",", 1);
            if (k->kind != CFG_NODE_SCALAR)
                return VSR_ERR_INVALID;
            rc |= put_string(b, vsr_slice(k->str, k->len));
            rc |= vsr_buf_append(b, ":", 1);
            rc |= emit(b, v, depth + 1);
        }
        rc |= vsr_buf_append(b, "}", 1);
        return rc;
    case CFG_NODE_SEQ:
        rc |= vsr_buf_append(b, "[", 1);
        for (size_t i = 0; i < n->n; i++) {
            if (i)
                rc |= vsr_buf_append(b, ",", 1);
            rc |= emit(b, n->items[i], depth + 1);
        }
        rc |= vsr_buf_append(b, "]", 1);
        return rc;
    case CFG_NODE_SCALAR:
        break;
    }
    switch (n->type) {
    case CFG_NULL:
        return vsr_buf_append_cstr(b, "null");
    case CFG_BOOL: {
        /* the core schema's true/True/TRUE and false/... */
        int t = n->len > 0 && (n->str[0] == 't' || n->str[0] == 'T');
        return vsr_buf_append_cstr(b, t ? "true" : "false");
    }
    case CFG_INT:
        if (n->ival_ok)
            return vsr_buf_printf(b, "%lld", (long long)n->ival);
        return put_big_int(b, n);
    case CFG_FLOAT:
        return put_double(b, n);
    case CFG_STR:
        break;
    }
    return put_string(b, vsr_slice(n->str, n->len));
}

int vsr__cfg_canonical_node(vsr_buf_t *b, const cfg_node_t *n)
{
    return emit(b, n, 0);
}

/* The canonical form of a parsed tree; dg already counts (and has reported)
 * the parse's errors. */
static int canonical_tree(cfg_diag_t *dg, int parsed, const cfg_node_t *root, vsr_buf_t *out)
{
    int rc = parsed ? VSR_OK : VSR_ERR_INVALID;
    if (rc == VSR_OK && root == NULL && dg->n_errors == 0)
        vsr__cfg_error(dg, 1, 1, "the document is empty");
    if (rc == VSR_OK && (dg->n_errors > 0 || root == NULL))
        rc = VSR_ERR_INVALID;
    if (rc == VSR_OK && root->weight > 10u * 1000 * 1000) {
        vsr__cfg_error(dg, root->line, root->col, "the document expands to too many nodes");
        rc = VSR_ERR_INVALID;
    }
    if (rc == VSR_OK && emit(out, root, 0) != VSR_OK) {
        vsr__cfg_error(dg, root->line, root->col, "the document cannot be rendered canonically");
        rc = VSR_ERR_INVALID;
    }
    return rc;
}

int vsr_config_canonical(const char *name, const char *doc, size_t len, vsr_buf_t *out, vsr_buf_t *err)
{
    cfg_diag_t dg = {.out = err, .file = name ? name : "<string>"};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    cfg_node_t *root = NULL;
    int parsed = vsr__cfg_parse_yaml(&pool, &dg, doc ? doc : "", doc ? len : 0, &root) == VSR_OK;
    int rc = canonical_tree(&dg, parsed, root, out);
    vsr_pool_free(&pool);
    return rc;
}

/* ---- the parsed document ------------------------------------------------------ */

vsr_config_doc_t *vsr_config_doc_parse(const char *name, const char *doc, size_t len)
{
    vsr_config_doc_t *d = vsr_calloc(1, sizeof(*d));
    vsr_pool_init(&d->pool);
    vsr_buf_init(&d->parse_err, 0);
    const char *file = name ? name : "<string>";
    d->name = vsr_pool_strndup(&d->pool, file, strlen(file));
    d->dg.out = &d->parse_err;
    d->dg.file = d->name;
    d->parsed = vsr__cfg_parse_yaml(&d->pool, &d->dg, doc ? doc : "", doc ? len : 0, &d->root) == VSR_OK;
    d->dg.out = NULL;
    return d;
}

/* A diagnostic sink that continues the parse's: its messages are written
 * to err first and its error count carries on. */
static cfg_diag_t doc_diag(const vsr_config_doc_t *d, vsr_buf_t *err)
{
    cfg_diag_t dg = d->dg;
    dg.out = err;
    if (err != NULL && d->parse_err.len > 0)
        vsr_buf_append(err, d->parse_err.data, d->parse_err.len);
    return dg;
}

int vsr_config_doc_canonical(const vsr_config_doc_t *d, vsr_buf_t *out, vsr_buf_t *err)
{
    cfg_diag_t dg = doc_diag(d, err);
    return canonical_tree(&dg, d->parsed, d->root, out);
}

int vsr_config_doc_load(const vsr_config_doc_t *d, vsr_config_t **out, vsr_buf_t *err)
{
    cfg_diag_t dg = doc_diag(d, err);
    return vsr__cfg_load_tree(&dg, d->parsed, d->root, d->name, out, NULL, NULL);
}

void vsr_config_doc_free(vsr_config_doc_t *d)
{
    if (d == NULL)
        return;
    vsr_buf_free(&d->parse_err);
    vsr_pool_free(&d->pool);
    vsr_free(d);
}

void vsr_config_hash(const char *data, size_t len, char out[VSR_CONFIG_HASH_LEN])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)data, len, md);
    memcpy(out, "sha256:", 7);
    for (size_t i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[7 + 2 * i] = hex[md[i] >> 4];
        out[8 + 2 * i] = hex[md[i] & 15];
    }
    out[7 + 2 * SHA256_DIGEST_LENGTH] = '\0';
}

/* ---- history ------------------------------------------------------------------ */

void vsr_config_history_init(vsr_config_history_t *h)
{
    memset(h, 0, sizeof(*h));
}

void vsr_config_history_free(vsr_config_history_t *h)
{
    for (size_t i = 0; i < h->n; i++)
        vsr_free(h->v[i].doc);
    memset(h, 0, sizeof(*h));
}

uint64_t vsr_config_history_push(vsr_config_history_t *h, const char *hash, const char *source, double time,
                                 const char *doc, size_t len)
{
    if (h->n == VSR_CONFIG_HISTORY) { /* the oldest goes */
        vsr_free(h->v[0].doc);
        memmove(&h->v[0], &h->v[1], sizeof(h->v[0]) * (VSR_CONFIG_HISTORY - 1));
        h->n--;
    }
    vsr_config_version_t *v = &h->v[h->n++];
    memset(v, 0, sizeof(*v));
    v->version = ++h->last;
    snprintf(v->hash, sizeof(v->hash), "%s", hash);
    snprintf(v->source, sizeof(v->source), "%s", source);
    v->time = time;
    v->doc = vsr_malloc(len + 1);
    memcpy(v->doc, doc, len);
    v->doc[len] = '\0';
    v->len = len;
    return v->version;
}

const vsr_config_version_t *vsr_config_history_find(const vsr_config_history_t *h, uint64_t version)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->v[i].version == version)
            return &h->v[i];
    return NULL;
}

const vsr_config_version_t *vsr_config_history_active(const vsr_config_history_t *h)
{
    return h->n ? &h->v[h->n - 1] : NULL;
}

/* ---- what a running process cannot change ---------------------------------------- */

static int str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static int list_eq(const vsr_strlist_conf_t *a, const vsr_strlist_conf_t *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->items[i], b->items[i]) != 0)
            return 0;
    return 1;
}

int vsr_config_restart_required(const vsr_config_t *run, const vsr_config_t *next, vsr_buf_t *why)
{
    int n = 0;
    if (run->n_listeners != next->n_listeners) {
        vsr_buf_printf(why, "listeners: %zu configured, %zu running; adding or removing a listener needs a restart\n",
                       next->n_listeners, run->n_listeners);
        n++;
    }
    for (size_t i = 0; i < run->n_listeners && i < next->n_listeners; i++) {
        const vsr_listener_conf_t *a = &run->listeners[i], *b = &next->listeners[i];
        const char *what = NULL;
        if (!str_eq(a->name, b->name))
            what = "name (or order)";
        else if (!str_eq(a->address, b->address))
            what = "address";
        else if (a->port != b->port)
            what = "port";
        else if (a->timeout_ms != b->timeout_ms)
            what = "timeout";
        else if (!str_eq(a->tls_cert_file, b->tls_cert_file) || !str_eq(a->tls_key_file, b->tls_key_file))
            what = "tls";
        else if (a->max_body_bytes != b->max_body_bytes)
            what = "max_request_body_bytes";
        else if (a->max_connections != b->max_connections)
            what = "max_connections";
        else if (a->max_header_bytes != b->max_header_bytes)
            what = "max_header_bytes";
        else if (a->max_headers != b->max_headers)
            what = "max_headers";
        else if (a->header_timeout_ms != b->header_timeout_ms)
            what = "header_timeout";
        else if (a->body_timeout_ms != b->body_timeout_ms)
            what = "body_timeout";
        else if (a->identity_trust_headers != b->identity_trust_headers ||
                 !list_eq(&a->identity_trusted_peers, &b->identity_trusted_peers))
            what = "identity";
        if (what) {
            vsr_buf_printf(why, "listeners[%zu] (%s): %s changed; it needs a restart\n", i, b->name, what);
            n++;
        }
    }
    if (run->config_source_kubernetes != next->config_source_kubernetes) {
        /* the file watch or the cluster's watch is chosen at start */
        vsr_buf_printf(why, "global.router.config_source changed; it needs a restart\n");
        n++;
    }
    if (run->management_enabled != next->management_enabled || run->management_port != next->management_port ||
        !str_eq(run->management_address, next->management_address)) {
        vsr_buf_printf(why, "global.services.management_api: enabled, bind_address or port changed; it needs a restart\n");
        n++;
    }
    if (run->management_max_document_bytes != next->management_max_document_bytes ||
        !str_eq(run->management_token_file, next->management_token_file) ||
        !str_eq(run->management_token_env, next->management_token_env)) {
        vsr_buf_printf(why, "global.services.management_api: max_document_bytes, token_file or token_env changed; "
                            "it needs a restart\n");
        n++;
    }
    if (!vsr__cfg_management_auth_eq(run, next)) {
        /* the tokens are read at start; and a document sent through the API must not widen its own access */
        vsr_buf_printf(why, "global.services.management_api.auth changed; it needs a restart\n");
        n++;
    }
    /* the tracer is built once at start: its exporter thread owns these */
    if (run->tracing_enabled != next->tracing_enabled || !str_eq(run->tracing_endpoint, next->tracing_endpoint) ||
        run->tracing_grpc != next->tracing_grpc || run->tracing_grpc_tls != next->tracing_grpc_tls ||
        run->tracing_sampling_ratio != next->tracing_sampling_ratio ||
        !str_eq(run->tracing_service_name, next->tracing_service_name) ||
        !str_eq(run->tracing_service_version, next->tracing_service_version) ||
        !str_eq(run->tracing_environment, next->tracing_environment)) {
        vsr_buf_printf(why, "global.services.observability.tracing changed; it needs a restart\n");
        n++;
    }
    return n;
}

/* ---- the effective document (vsr config print) ------------------------------------ */

/* Keys whose values are secrets wherever they appear: credentials, keys,
 * tokens, passwords.  Names of environment variables (*_env) and files
 * (*_file) are not secrets; max_tokens is not one. */
int vsr__cfg_secret_key(const char *k)
{
    char low[128];
    size_t n = strlen(k);
    if (n >= sizeof(low))
        n = sizeof(low) - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)(k[i] >= 'A' && k[i] <= 'Z' ? k[i] + 32 : k[i]);
    low[n] = '\0';
    if ((n > 4 && strcmp(low + n - 4, "_env") == 0) || (n > 5 && strcmp(low + n - 5, "_file") == 0))
        return 0;
    static const char *const parts[] = {"api_key",  "api-key",    "apikey",      "access_key", "authorization", "secret",
                                        "password", "credential", "private_key", "cookie",     NULL};
    for (int i = 0; parts[i]; i++)
        if (strstr(low, parts[i]))
            return 1;
    return strcmp(low, "token") == 0 || (n > 6 && (strcmp(low + n - 6, "_token") == 0 || strcmp(low + n - 6, "-token") == 0));
}

/* Header names whose values are known to carry no credential.  Every other
 * extra_headers value is a secret (Ocp-Apim-Subscription-Key, X-Auth,
 * X-Signature, ... have no pattern in common), so this is an allow-list. */
int vsr__cfg_header_harmless(const char *name)
{
    static const char *const harmless[] = {
        "accept", "accept-encoding", "accept-language", "anthropic-beta", "anthropic-version", "cache-control",
        "content-type", "openai-beta", "user-agent", "x-request-id", "x-correlation-id", "x-client-name",
        "x-client-version", "x-team", "x-tenant", "x-environment", "x-region", "x-model", "x-source", NULL};
    for (int i = 0; harmless[i]; i++)
        if (strcasecmp(name, harmless[i]) == 0)
            return 1;
    return 0;
}

typedef struct {
    vsr_buf_t *b;
    const vsr_config_t *c;
    int redact;
} printer_t;

static void indent(vsr_buf_t *b, int depth)
{
    vsr_buf_append(b, "\n", 1);
    for (int i = 0; i < depth; i++)
        vsr_buf_append(b, "  ", 2);
}

static void put_redacted(printer_t *p, const cfg_node_t *v, int depth);

static void put_duration(vsr_buf_t *b, uint64_t ms)
{
    if (ms % 1000 == 0)
        vsr_buf_printf(b, "\"%llus\"", (unsigned long long)(ms / 1000));
    else
        vsr_buf_printf(b, "\"%llums\"", (unsigned long long)ms);
}

/* Defaults the document left out, appended to the mapping at `path`;
 * idx[0..nidx) are the positions in the enclosing lists, outermost first. */
static int put_defaults(printer_t *p, const char *path, const size_t *idx, int nidx, const cfg_node_t *map, int depth,
                        int first)
{
    vsr_buf_t *b = p->b;
    const vsr_config_t *c = p->c;
    if (c == NULL)
        return first;
#define KEY(k) (vsr__cfg_map_get(map, k) == NULL ? (first ? (void)0 : (void)vsr_buf_append(b, ",", 1), \
                 indent(b, depth), vsr_buf_append_cstr(b, "\"" k "\": "), first = 0, 1) : 0)
    size_t index = nidx > 0 ? idx[nidx - 1] : 0;
    if (strcmp(path, "listeners[]") == 0 && index < c->n_listeners) {
        const vsr_listener_conf_t *l = &c->listeners[index];
        if (KEY("address"))
            put_string(b, vsr_slice_cstr(l->address));
        if (KEY("timeout"))
            put_duration(b, l->timeout_ms);
        if (KEY("max_request_body_bytes"))
            vsr_buf_printf(b, "%llu", (unsigned long long)l->max_body_bytes);
        if (KEY("max_connections"))
            vsr_buf_printf(b, "%u", (unsigned)l->max_connections);
    } else if (strcmp(path, "providers.models[]") == 0 && index < c->n_models) {
        const vsr_model_conf_t *m = &c->models[index];
        if (KEY("provider_model_id"))
            put_string(b, vsr_slice_cstr(m->provider_model_id ? m->provider_model_id : m->name));
        if (KEY("api_format"))
            put_string(b, vsr_slice_cstr(m->api_format ? m->api_format : "openai"));
    } else if (strcmp(path, "providers.models[].backend_refs[]") == 0 && nidx == 2 && idx[0] < c->n_models &&
               idx[1] < c->models[idx[0]].n_backends) {
        const vsr_backend_conf_t *be = &c->models[idx[0]].backends[idx[1]];
        if (KEY("name"))
            put_string(b, vsr_slice_cstr(be->name));
        if (KEY("weight"))
            vsr_buf_printf(b, "%u", (unsigned)be->weight);
        if (vsr__cfg_map_get(map, "endpoint") != NULL && KEY("protocol"))
            vsr_buf_append_cstr(b, be->tls ? "\"https\"" : "\"http\"");
    } else if (strcmp(path, "global.services.management_api") == 0) {
        if (KEY("enabled"))
            vsr_buf_append_cstr(b, c->management_enabled ? "true" : "false");
        if (KEY("bind_address"))
            put_string(b, vsr_slice_cstr(c->management_address ? c->management_address : "127.0.0.1"));
        if (KEY("port"))
            vsr_buf_printf(b, "%u", (unsigned)c->management_port);
    }
#undef KEY
    return first;
}

#define PRINT_MAX_NEST 8

static void put_node(printer_t *p, const cfg_node_t *n, int depth, char *path, size_t plen, size_t *idx, int nidx)
{
    vsr_buf_t *b = p->b;
    if (n->kind == CFG_NODE_SCALAR) {
        emit(b, n, depth);
        return;
    }
    if (n->kind == CFG_NODE_SEQ) {
        vsr_buf_append(b, "[", 1);
        size_t l = strlen(path);
        if (l + 3 < plen)
            strcat(path, "[]");
        for (size_t i = 0; i < n->n; i++) {
            vsr_buf_append_cstr(b, i ? "," : "");
            indent(b, depth + 1);
            if (nidx < PRINT_MAX_NEST)
                idx[nidx] = i;
            put_node(p, n->items[i], depth + 1, path, plen, idx, nidx < PRINT_MAX_NEST ? nidx + 1 : nidx);
        }
        path[l] = '\0';
        if (n->n)
            indent(b, depth);
        vsr_buf_append(b, "]", 1);
        return;
    }
    vsr_buf_append(b, "{", 1);
    int first = 1;
    size_t l = strlen(path);
    int entry_secret = p->redact && vsr__cfg_header_entry_secret(path, n);
    for (size_t i = 0; i < n->n; i++) {
        const cfg_node_t *k = n->items[2 * i], *v = n->items[2 * i + 1];
        vsr_buf_append_cstr(b, first ? "" : ",");
        first = 0;
        indent(b, depth + 1);
        put_string(b, vsr_slice(k->str, k->len));
        vsr_buf_append_cstr(b, ": ");
        if (p->redact && (vsr__cfg_secret_key(k->str) || (entry_secret && strcmp(k->str, "value") == 0) ||
                          (vsr__cfg_under_extra_headers(path) && !vsr__cfg_header_harmless(k->str)))) {
            put_redacted(p, v, depth + 1);
            continue;
        }
        if (l + strlen(k->str) + 2 < plen)
            snprintf(path + l, plen - l, "%s%s", l ? "." : "", k->str);
        put_node(p, v, depth + 1, path, plen, idx, nidx);
        path[l] = '\0';
    }
    first = put_defaults(p, path, idx, nidx, n, depth + 1, first);
    if (!first)
        indent(b, depth);
    vsr_buf_append(b, "}", 1);
}

/* A header_mutation entry ({name, value} in a plugin configuration's add,
 * update or set list; path in the printer's "x[]" or the vet's "x[3]" form):
 * its value is a secret unless the header is known to be harmless. */
int vsr__cfg_header_entry_secret(const char *path, const cfg_node_t *map)
{
    const char *last = strrchr(path, '.');
    if (last == NULL || strstr(path, ".configuration.") == NULL || vsr__cfg_map_get(map, "value") == NULL)
        return 0;
    last++;
    if (strncmp(last, "add[", 4) != 0 && strncmp(last, "update[", 7) != 0 && strncmp(last, "set[", 4) != 0)
        return 0;
    const cfg_node_t *name = vsr__cfg_map_get(map, "name");
    return name == NULL || name->kind != CFG_NODE_SCALAR || !vsr__cfg_header_harmless(name->str);
}

/* 1 when path (dotted, "[]" for list items) names an extra_headers map. */
int vsr__cfg_under_extra_headers(const char *path)
{
    size_t n = strlen(path);
    if (strcmp(path, "global.integrations.looper.headers") == 0) /* sent with every Looper hop, as extra_headers */
        return 1;
    return n >= 13 && strcmp(path + n - 13, "extra_headers") == 0 && (n == 13 || path[n - 14] == '.');
}

/* A secret's shape stays (a list stays a list), its text goes. */
static void put_redacted(printer_t *p, const cfg_node_t *v, int depth)
{
    if (v->kind == CFG_NODE_SEQ) {
        vsr_buf_append(p->b, "[", 1);
        for (size_t i = 0; i < v->n; i++)
            vsr_buf_append_cstr(p->b, i ? ", \"" VSR_CONFIG_REDACTED "\"" : "\"" VSR_CONFIG_REDACTED "\"");
        vsr_buf_append(p->b, "]", 1);
    } else if (v->kind == CFG_NODE_SCALAR && v->type == CFG_NULL) {
        vsr_buf_append_cstr(p->b, "null");
    } else {
        VSR_UNUSED(depth);
        vsr_buf_append_cstr(p->b, "\"" VSR_CONFIG_REDACTED "\"");
    }
}

int vsr_config_print(const char *name, const char *doc, size_t len, const vsr_config_t *c, int redact, vsr_buf_t *out)
{
    cfg_diag_t dg = {.out = NULL, .file = name ? name : "<string>"};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    cfg_node_t *root = NULL;
    int rc = vsr__cfg_parse_yaml(&pool, &dg, doc ? doc : "", doc ? len : 0, &root);
    if (rc == VSR_OK && (dg.n_errors > 0 || root == NULL || root->kind != CFG_NODE_MAP))
        rc = VSR_ERR_INVALID;
    if (rc == VSR_OK) {
        printer_t p = {out, c, redact};
        char path[CFG_MAX_PATH] = "";
        size_t idx[PRINT_MAX_NEST] = {0};
        put_node(&p, root, 0, path, sizeof(path), idx, 0);
        vsr_buf_append(out, "\n", 1);
    }
    vsr_pool_free(&pool);
    return rc;
}
