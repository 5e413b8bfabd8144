/*
 * migrate.c — `vsr config migrate`: a pre-v0.3 document → canonical v0.3 YAML.
 *
 * Contract (vsr_config_migrate in config.h):
 *   - the input is parsed with vsr__cfg_parse_yaml, so syntax errors, duplicate
 *     keys, undefined aliases and bad tags are reported as the loader reports
 *     them ("FILE:LINE:COL: message");
 *   - a document that already says `version: v0.3` is refused ("already v0.3;
 *     nothing to migrate");
 *   - every top-level key and every key of the legacy blocks that are reshaped
 *     (model_config entries, vllm_endpoints[], provider_profiles, classifier,
 *     hallucination_mitigation, bert_model, providers) must be one this file
 *     knows: anything else is refused as "unknown pre-v0.3 key", never dropped;
 *   - blocks that move as a whole (signals, decisions, listeners, recipes,
 *     semantic_cache, observability, ...) are carried verbatim: their contents
 *     are the v0.3 contents, which `vsr config validate` checks afterwards;
 *   - two sources for one v0.3 place (top-level `decisions` and
 *     `routing.decisions`, `keyword_rules` and `signals.keywords`, ...) are an
 *     error naming both positions, not a silent preference;
 *   - nothing is written on error; the output round-trips: every scalar keeps
 *     its value and its type (strings that would read as something else are
 *     double-quoted; numbers are written in a form YAML 1.1 and 1.2 readers
 *     both resolve alike).  Comments, anchors and key spellings of scalars
 *     (`~`, `0x10`) are not kept.
 * Notes on what changed meaning (semantic_cache.enabled, endpoints no model
 * prefers) go to the warning buffer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/cfg_internal.h"

/* ---- the output tree -------------------------------------------------------- */

typedef enum { ON_SRC, ON_MAP, ON_SEQ, ON_STR } onode_kind_t;

typedef struct onode_s onode_t;
struct onode_s {
    onode_kind_t kind;
    const cfg_node_t *src; /* ON_SRC: the parsed node, emitted as is */
    const char *str;       /* ON_STR: a string value */
    uint32_t line, col;    /* where it came from (0: made here) */
    onode_t **keys;        /* ON_MAP: keys (ON_STR or scalar ON_SRC) */
    onode_t **vals;        /* ON_MAP: values; ON_SEQ: items */
    size_t n, cap;
};

typedef struct {
    vsr_pool_t pool;
    cfg_diag_t dg;
    vsr_buf_t *warn;
    const char *file;
} mig_t;

static onode_t *on_new(mig_t *m, onode_kind_t kind, const cfg_node_t *at)
{
    onode_t *o = vsr_pool_alloc(&m->pool, sizeof(*o));
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    if (at != NULL) {
        o->line = at->line;
        o->col = at->col;
    }
    return o;
}

static onode_t *on_src(mig_t *m, const cfg_node_t *n)
{
    onode_t *o = on_new(m, ON_SRC, n);
    o->src = n;
    return o;
}

static onode_t *on_str(mig_t *m, const char *s)
{
    onode_t *o = on_new(m, ON_STR, NULL);
    o->str = vsr_pool_strndup(&m->pool, s, strlen(s));
    return o;
}

static void on_grow(mig_t *m, onode_t *o)
{
    if (o->n < o->cap)
        return;
    size_t cap = o->cap ? 2 * o->cap : 8;
    onode_t **vals = vsr_pool_alloc(&m->pool, cap * sizeof(*vals));
    onode_t **keys = vsr_pool_alloc(&m->pool, cap * sizeof(*keys));
    if (o->n) {
        memcpy(vals, o->vals, o->n * sizeof(*vals));
        if (o->keys)
            memcpy(keys, o->keys, o->n * sizeof(*keys));
    }
    o->vals = vals;
    o->keys = keys;
    o->cap = cap;
}

static void seq_add(mig_t *m, onode_t *seq, onode_t *item)
{
    on_grow(m, seq);
    seq->vals[seq->n++] = item;
}

static void map_add(mig_t *m, onode_t *map, onode_t *key, onode_t *val)
{
    on_grow(m, map);
    map->keys[map->n] = key;
    map->vals[map->n++] = val;
}

static int key_is(const onode_t *k, const char *s)
{
    size_t len = strlen(s);
    if (k->kind == ON_STR)
        return strcmp(k->str, s) == 0;
    return k->kind == ON_SRC && k->src->kind == CFG_NODE_SCALAR && k->src->len == len &&
           memcmp(k->src->str, s, len) == 0;
}

static const char *key_text(const onode_t *k)
{
    return k->kind == ON_STR ? k->str : k->src->str;
}

/* The index of key s in an ON_MAP, or -1. */
static long map_find(const onode_t *map, const char *s)
{
    for (size_t i = 0; i < map->n; i++)
        if (key_is(map->keys[i], s))
            return (long)i;
    return -1;
}

static onode_t *map_get(const onode_t *map, const char *s)
{
    long i = map_find(map, s);
    return i < 0 ? NULL : map->vals[i];
}

static void map_del(onode_t *map, const char *s)
{
    long i = map_find(map, s);
    if (i < 0)
        return;
    for (size_t j = (size_t)i; j + 1 < map->n; j++) {
        map->keys[j] = map->keys[j + 1];
        map->vals[j] = map->vals[j + 1];
    }
    map->n--;
}

static int src_is_map(const onode_t *o)
{
    return o->kind == ON_MAP || (o->kind == ON_SRC && o->src->kind == CFG_NODE_MAP);
}

/* A parsed mapping as an ON_MAP whose entries are the parsed nodes. */
static onode_t *map_from_src(mig_t *m, const cfg_node_t *n)
{
    onode_t *o = on_new(m, ON_MAP, n);
    for (size_t i = 0; i < n->n; i++)
        map_add(m, o, on_src(m, n->items[2 * i]), on_src(m, n->items[2 * i + 1]));
    return o;
}

/* Makes value i of map an ON_MAP (a parsed mapping is opened up); 0, or -1
 * when it is something other than a mapping or null. */
static int open_map_at(mig_t *m, onode_t *map, size_t i)
{
    onode_t *v = map->vals[i];
    if (v->kind == ON_MAP)
        return 0;
    if (v->kind == ON_SRC && v->src->kind == CFG_NODE_MAP) {
        map->vals[i] = map_from_src(m, v->src);
        return 0;
    }
    if (v->kind == ON_SRC && v->src->kind == CFG_NODE_SCALAR && v->src->type == CFG_NULL) {
        map->vals[i] = on_new(m, ON_MAP, v->src);
        return 0;
    }
    return -1;
}

/* ---- diagnostics -------------------------------------------------------------- */

/* Entries of the lists and mappings this file matches pairwise (models,
 * endpoints, blocks merged key by key): the matching is quadratic, so a
 * document past this is refused rather than ground through. */
#define MIG_MAX_ENTRIES 4096

#define ERR(m, node, ...) vsr__cfg_error(&(m)->dg, (node)->line, (node)->col, __VA_ARGS__)

static const char *q(mig_t *m, const char *s)
{
    return vsr__cfg_quote(&m->pool, s, strlen(s));
}

static void warn_at(mig_t *m, const cfg_node_t *at, const char *msg)
{
    if (m->warn != NULL)
        vsr_buf_printf(m->warn, "%s:%u:%u: note: %s\n", m->file, at->line, at->col, msg);
}

static void unknown_key(mig_t *m, const cfg_node_t *key, const char *where)
{
    if (where != NULL)
        ERR(m, key, "unknown pre-v0.3 key %s in %s (see docs/cli.md, config migrate, for the keys it maps)",
            vsr__cfg_quote(&m->pool, key->str, key->len), where);
    else
        ERR(m, key, "unknown pre-v0.3 key %s (see docs/cli.md, config migrate, for the keys it maps)",
            vsr__cfg_quote(&m->pool, key->str, key->len));
}

/* 0, or -1 reported when the collection v is too large to match pairwise. */
static int too_many(mig_t *m, const cfg_node_t *v, const char *what)
{
    if (v->kind == CFG_NODE_SCALAR || v->n <= MIG_MAX_ENTRIES)
        return 0;
    vsr__cfg_error(&m->dg, v->line, v->col, "%s: more than %u entries", what, MIG_MAX_ENTRIES);
    return -1;
}

static int is_null(const cfg_node_t *v)
{
    return v->kind == CFG_NODE_SCALAR && v->type == CFG_NULL;
}

/* An empty value configures nothing and is left out: null, "", [] or {}. */
static int is_empty(const cfg_node_t *v)
{
    if (v->kind == CFG_NODE_SCALAR)
        return v->type == CFG_NULL || (v->type == CFG_STR && v->len == 0);
    return v->n == 0;
}

/* 0 when v has kind `kind`, else reports "<what>: expected ..., got ..." at v. */
static int expect(mig_t *m, const cfg_node_t *v, cfg_node_kind_t kind, const char *what)
{
    if (v->kind == kind)
        return 0;
    ERR(m, v, "%s: expected %s, got %s", what, kind == CFG_NODE_MAP ? "a mapping" : "a list", vsr__cfg_node_what(v));
    return -1;
}

/* The text of a non-empty string scalar, else NULL after reporting. */
static const char *expect_string(mig_t *m, const cfg_node_t *v, const char *what)
{
    if (v->kind == CFG_NODE_SCALAR && v->type == CFG_STR && v->len > 0 && strlen(v->str) == v->len)
        return v->str;
    ERR(m, v, "%s: expected a non-empty string, got %s", what, vsr__cfg_node_what(v));
    return NULL;
}

/* ---- placing values ------------------------------------------------------------- */

/* Merges `val` at `key` of the ON_MAP dst: absent → set; both mappings →
 * merged key by key; otherwise the place is taken, reported at `at` with
 * the dotted target path and where the first value came from. */
static void merge_into(mig_t *m, onode_t *dst, onode_t *key, onode_t *val, const char *path, const cfg_node_t *at)
{
    long i = map_find(dst, key_text(key));
    if (i < 0) {
        map_add(m, dst, key, val);
        return;
    }
    char sub[CFG_MAX_PATH];
    snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", key_text(key));
    onode_t *have = dst->vals[i];
    if (src_is_map(have) && src_is_map(val) && open_map_at(m, dst, (size_t)i) == 0) {
        have = dst->vals[i];
        if (val->kind == ON_SRC) {
            if (too_many(m, val->src, sub) != 0)
                return;
            val = map_from_src(m, val->src);
        }
        for (size_t j = 0; j < val->n; j++) {
            const cfg_node_t *where = val->keys[j]->kind == ON_SRC ? val->keys[j]->src : at;
            merge_into(m, have, val->keys[j], val->vals[j], sub, where);
        }
        return;
    }
    if (have->line)
        ERR(m, at, "%s is given twice (first at %u:%u)", sub, have->line, have->col);
    else
        ERR(m, at, "%s is given twice", sub);
}

/* The ON_MAP at dotted `path` under root, made as needed; NULL (reported
 * at `at`) when something other than a mapping is in the way. */
static onode_t *map_path(mig_t *m, onode_t *root, const char *path, const cfg_node_t *at)
{
    onode_t *cur = root;
    char seg[128];
    const char *p = path;
    while (*p) {
        size_t n = strcspn(p, ".");
        VSR_BUG_ON(n >= sizeof(seg));
        memcpy(seg, p, n);
        seg[n] = '\0';
        long i = map_find(cur, seg);
        if (i < 0) {
            onode_t *child = on_new(m, ON_MAP, NULL);
            map_add(m, cur, on_str(m, seg), child);
            cur = child;
        } else if (open_map_at(m, cur, (size_t)i) == 0) {
            cur = cur->vals[i];
        } else {
            ERR(m, at, "cannot place this value: %.*s is not a mapping (at %u:%u)", (int)(p - path + n), path,
                cur->vals[i]->line, cur->vals[i]->col);
            return NULL;
        }
        p += n;
        if (*p == '.')
            p++;
    }
    return cur;
}

/* Places val at dotted `path` (parent path + last segment) under root. */
static void place(mig_t *m, onode_t *root, const char *root_name, const char *path, onode_t *val, const cfg_node_t *at)
{
    char parent[CFG_MAX_PATH], full[CFG_MAX_PATH];
    const char *dot = strrchr(path, '.');
    size_t plen = dot ? (size_t)(dot - path) : 0;
    memcpy(parent, path, plen);
    parent[plen] = '\0';
    onode_t *dst = map_path(m, root, parent, at);
    if (dst == NULL)
        return;
    snprintf(full, sizeof(full), "%s%s%s", root_name, plen ? "." : "", parent);
    merge_into(m, dst, on_str(m, dot ? dot + 1 : path), val, full, at);
}

/* ---- the document ---------------------------------------------------------------- */

/* Legacy flat signal lists → routing.signals.<family> (the reference's
 * LEGACY_SIGNAL_KEY_TO_CANONICAL; families whose older key is their name
 * are listed too, so a flat `pii:` list is read the same way). */
static const char *const signal_keys[][2] = {
    {"keyword_rules", "keywords"},
    {"embedding_rules", "embeddings"},
    {"categories", "domains"},
    {"fact_check_rules", "fact_check"},
    {"user_feedback_rules", "user_feedbacks"},
    {"reask_rules", "reasks"},
    {"preference_rules", "preferences"},
    {"language_rules", "language"},
    {"context_rules", "context"},
    {"structure_rules", "structure"},
    {"complexity_rules", "complexity"},
    {"modality_rules", "modality"},
    {"role_bindings", "role_bindings"},
    {"jailbreak", "jailbreak"},
    {"pii", "pii"},
    {"kb", "kb"},
    {"conversation", "conversation"},
    {"events", "events"},
    {"metadata", "metadata"},
    {"classifiers", "classifiers"},
    {"input_modality", "input_modality"},
};

/* Legacy global blocks → their place under `global` (the reference's global
 * placement).  Blocks with a special shape are handled in place_global. */
static const char *const global_keys[][2] = {
    {"strategy", "router.strategy"},
    {"auto_model_name", "router.auto_model_name"},
    {"auto_model_names", "router.auto_model_names"},
    {"include_config_models_in_list", "router.include_config_models_in_list"},
    {"clear_route_cache", "router.clear_route_cache"},
    {"model_selection", "router.model_selection"},
    {"streamed_body_mode", "router.streamed_body.enabled"},
    {"max_streamed_body_bytes", "router.streamed_body.max_bytes"},
    {"streamed_body_timeout_sec", "router.streamed_body.timeout_sec"},
    {"router", "router"},
    {"response_api", "services.response_api"},
    {"router_replay", "services.router_replay"},
    {"api", "services.api"},
    {"observability", "services.observability"},
    {"authz", "services.authz"},
    {"ratelimit", "services.ratelimit"},
    /* vsr's v0.3 name for the semantic cache's store */
    {"semantic_cache", "stores.response_cache"},
    {"response_cache", "stores.response_cache"},
    {"memory", "stores.memory"},
    {"vector_store", "stores.vector_store"},
    {"tools", "integrations.tools"},
    {"looper", "integrations.looper"},
    {"system_models", "model_catalog.system"},
    {"external_models", "model_catalog.external"},
    {"embedding_models", "model_catalog.embeddings.semantic"},
    {"bert_model", "model_catalog.embeddings.semantic"},
    {"prompt_compression", "model_catalog.modules.prompt_compression"},
    {"modality_detector", "model_catalog.modules.modality_detector"},
    {"prompt_guard", "model_catalog.modules.prompt_guard"},
    {"feedback_detector", "model_catalog.modules.feedback_detector"},
    {"classifier", "model_catalog.modules.classifier"},
    {"hallucination_mitigation", "model_catalog.modules.hallucination_mitigation"},
};

typedef struct {
    const char *name;
    const cfg_node_t *name_node;
    onode_t *ref;     /* the backend_ref it becomes */
    int used;
} endpoint_t;

typedef struct {
    mig_t *m;
    const cfg_node_t *root;
    onode_t *providers, *defaults, *models; /* models: ON_SEQ of ON_MAP */
    onode_t *routing, *cards;               /* cards: ON_SEQ of ON_MAP, NULL until needed */
    onode_t *global;
    endpoint_t *endpoints;
    size_t n_endpoints;
    const cfg_node_t *profiles; /* provider_profiles */
} doc_t;

static onode_t *find_named(const onode_t *seq, const char *name)
{
    if (seq == NULL)
        return NULL;
    for (size_t i = 0; i < seq->n; i++) {
        const onode_t *it = seq->vals[i];
        if (it->kind != ON_MAP)
            continue;
        const onode_t *nm = map_get(it, "name");
        if (nm == NULL)
            continue;
        if ((nm->kind == ON_STR && strcmp(nm->str, name) == 0) ||
            (nm->kind == ON_SRC && nm->src->kind == CFG_NODE_SCALAR && strcmp(nm->src->str, name) == 0))
            return seq->vals[i];
    }
    return NULL;
}

static onode_t *named_entry(doc_t *d, onode_t **seq, const char *name)
{
    if (*seq == NULL)
        *seq = on_new(d->m, ON_SEQ, NULL);
    onode_t *it = find_named(*seq, name);
    if (it == NULL) {
        it = on_new(d->m, ON_MAP, NULL);
        map_add(d->m, it, on_str(d->m, "name"), on_str(d->m, name));
        seq_add(d->m, *seq, it);
    }
    return it;
}

/* Sets `key` of an ON_MAP to the parsed `val` unless it is empty; a key
 * already there is reported at `at` as given twice. */
static void set_new(doc_t *d, onode_t *map, const char *key, const cfg_node_t *val, const cfg_node_t *at,
                    const char *where)
{
    if (is_empty(val))
        return;
    merge_into(d->m, map, on_str(d->m, key), on_src(d->m, val), where, at);
}

/* A list of mappings (parsed) as an ON_SEQ of ON_MAPs, so entries can get
 * fields; items that are not mappings are kept as they are. */
static onode_t *open_list(mig_t *m, const cfg_node_t *v)
{
    onode_t *o = on_new(m, ON_SEQ, v);
    for (size_t i = 0; i < v->n; i++)
        seq_add(m, o, v->items[i]->kind == CFG_NODE_MAP ? map_from_src(m, v->items[i]) : on_src(m, v->items[i]));
    return o;
}

/* ---- providers: vllm_endpoints + provider_profiles + model_config ---------------- */

static void add_profile(doc_t *d, onode_t *ref, const cfg_node_t *name_val)
{
    mig_t *m = d->m;
    const char *pname = expect_string(m, name_val, "provider_profile");
    if (pname == NULL)
        return;
    const cfg_node_t *prof = d->profiles ? vsr__cfg_map_get(d->profiles, pname) : NULL;
    if (prof == NULL) {
        ERR(m, name_val, "provider_profile %s is not declared in provider_profiles", q(m, pname));
        return;
    }
    if (prof->kind != CFG_NODE_MAP)
        return; /* reported in check_profiles */
    static const char *const keys[] = {"base_url", "type", "auth_header", "auth_prefix",
                                       "extra_headers", "api_version", "chat_path"};
    for (size_t i = 0; i < prof->n; i++) {
        const cfg_node_t *k = prof->items[2 * i], *v = prof->items[2 * i + 1];
        size_t j = 0;
        while (j < VSR_ARRAY_LEN(keys) && !(k->len == strlen(keys[j]) && strcmp(k->str, keys[j]) == 0))
            j++;
        if (j == VSR_ARRAY_LEN(keys))
            continue; /* reported once, in check_profiles */
        /* auth_prefix "" means "no prefix": an empty value is kept there */
        if (is_null(v) || (is_empty(v) && strcmp(keys[j], "auth_prefix") != 0))
            continue;
        merge_into(m, ref, on_str(m, strcmp(keys[j], "type") == 0 ? "provider" : keys[j]), on_src(m, v),
                   "backend_refs[]", k);
    }
}

static void check_profiles(doc_t *d, const cfg_node_t *v)
{
    mig_t *m = d->m;
    if (expect(m, v, CFG_NODE_MAP, "provider_profiles") != 0)
        return;
    d->profiles = v;
    static const char *const keys[] = {"base_url", "type", "auth_header", "auth_prefix",
                                       "extra_headers", "api_version", "chat_path"};
    for (size_t i = 0; i < v->n; i++) {
        const cfg_node_t *prof = v->items[2 * i + 1];
        if (expect(m, prof, CFG_NODE_MAP, "provider_profiles entry") != 0)
            continue;
        for (size_t k = 0; k < prof->n; k++) {
            const cfg_node_t *key = prof->items[2 * k];
            size_t j = 0;
            while (j < VSR_ARRAY_LEN(keys) && !(key->len == strlen(keys[j]) && strcmp(key->str, keys[j]) == 0))
                j++;
            if (j == VSR_ARRAY_LEN(keys))
                unknown_key(m, key, "a provider_profiles entry");
        }
    }
}

/* "host:port", with IPv6 literals bracketed. */
static const char *endpoint_text(mig_t *m, const char *addr, int64_t port)
{
    char buf[512];
    int v6 = strchr(addr, ':') != NULL && addr[0] != '[';
    if (port > 0)
        snprintf(buf, sizeof(buf), v6 ? "[%s]:%lld" : "%s:%lld", addr, (long long)port);
    else
        snprintf(buf, sizeof(buf), v6 ? "[%s]" : "%s", addr);
    return vsr_pool_strndup(&m->pool, buf, strlen(buf));
}

static void read_endpoint(doc_t *d, const cfg_node_t *ep, endpoint_t *out)
{
    mig_t *m = d->m;
    static const char *const carried[] = {"weight",  "protocol",   "type",         "api_key",     "api_key_env",
                                          "backend_id", "engine_kind", "metrics_port", "metrics_path"};
    memset(out, 0, sizeof(*out));
    if (expect(m, ep, CFG_NODE_MAP, "vllm_endpoints[]") != 0)
        return;
    const cfg_node_t *name = vsr__cfg_map_get(ep, "name"), *addr = vsr__cfg_map_get(ep, "address"),
                     *port = vsr__cfg_map_get(ep, "port"), *prof = vsr__cfg_map_get(ep, "provider_profile");
    if (name == NULL) {
        ERR(m, ep, "vllm_endpoints[]: an endpoint needs a name (models name it in preferred_endpoints)");
        return;
    }
    out->name = expect_string(m, name, "vllm_endpoints[].name");
    out->name_node = name;
    if (out->name == NULL)
        return;
    onode_t *ref = on_new(m, ON_MAP, ep);
    map_add(m, ref, on_str(m, "name"), on_src(m, name));
    if (addr != NULL && !is_null(addr)) {
        const char *a = expect_string(m, addr, "vllm_endpoints[].address");
        int64_t p = 0;
        if (port != NULL && !is_null(port)) {
            if (port->kind != CFG_NODE_SCALAR || port->type != CFG_INT || !port->ival_ok || port->ival < 1 ||
                port->ival > 65535)
                ERR(m, port, "vllm_endpoints[].port: expected a port number (1..65535), got %s%s%s",
                    vsr__cfg_node_what(port), port->kind == CFG_NODE_SCALAR ? " " : "",
                    port->kind == CFG_NODE_SCALAR ? vsr__cfg_quote(&m->pool, port->str, port->len) : "");
            else
                p = port->ival;
        }
        if (a != NULL) {
            onode_t *e = on_str(m, endpoint_text(m, a, p));
            e->line = addr->line;
            e->col = addr->col;
            map_add(m, ref, on_str(m, "endpoint"), e);
        }
    } else if (port != NULL && !is_null(port)) {
        ERR(m, port, "vllm_endpoints[].port without an address");
    }
    if (prof != NULL && !is_null(prof))
        add_profile(d, ref, prof);
    for (size_t i = 0; i < ep->n; i++) {
        const cfg_node_t *k = ep->items[2 * i], *v = ep->items[2 * i + 1];
        if (k->kind != CFG_NODE_SCALAR) {
            ERR(m, k, "vllm_endpoints[]: keys must be scalars");
            continue;
        }
        if (!strcmp(k->str, "name") || !strcmp(k->str, "address") || !strcmp(k->str, "port") ||
            !strcmp(k->str, "provider_profile"))
            continue;
        size_t j = 0;
        while (j < VSR_ARRAY_LEN(carried) && strcmp(k->str, carried[j]) != 0)
            j++;
        if (j == VSR_ARRAY_LEN(carried) || k->len != strlen(k->str)) {
            unknown_key(m, k, "vllm_endpoints[]");
            continue;
        }
        set_new(d, ref, carried[j], v, k, "backend_refs[]");
    }
    out->ref = ref;
}

static void read_endpoints(doc_t *d, const cfg_node_t *v)
{
    mig_t *m = d->m;
    if (expect(m, v, CFG_NODE_SEQ, "vllm_endpoints") != 0 || too_many(m, v, "vllm_endpoints") != 0)
        return;
    d->endpoints = vsr_pool_alloc(&m->pool, (v->n ? v->n : 1) * sizeof(*d->endpoints));
    d->n_endpoints = v->n;
    for (size_t i = 0; i < v->n; i++) {
        read_endpoint(d, v->items[i], &d->endpoints[i]);
        for (size_t j = 0; j < i && d->endpoints[i].name; j++)
            if (d->endpoints[j].name && strcmp(d->endpoints[j].name, d->endpoints[i].name) == 0) {
                ERR(m, d->endpoints[i].name_node, "duplicate endpoint name %s (first at %u:%u)",
                    q(m, d->endpoints[i].name), d->endpoints[j].name_node->line, d->endpoints[j].name_node->col);
                d->endpoints[i].name = NULL;
                break;
            }
    }
}

/* A shallow copy of an endpoint's backend_ref, for one model. */
static onode_t *copy_ref(mig_t *m, const onode_t *ref)
{
    onode_t *o = on_new(m, ON_MAP, NULL);
    o->line = ref->line;
    o->col = ref->col;
    for (size_t i = 0; i < ref->n; i++)
        map_add(m, o, ref->keys[i], ref->vals[i]);
    return o;
}

static void model_backends(doc_t *d, onode_t *pm, const char *model, const cfg_node_t *pref,
                           const cfg_node_t *access_key)
{
    mig_t *m = d->m;
    if (expect(m, pref, CFG_NODE_SEQ, "preferred_endpoints") != 0 || too_many(m, pref, "preferred_endpoints") != 0)
        return;
    onode_t *refs = on_new(m, ON_SEQ, pref);
    for (size_t i = 0; i < pref->n; i++) {
        const cfg_node_t *it = pref->items[i];
        const char *ep = expect_string(m, it, "preferred_endpoints[]");
        if (ep == NULL)
            continue;
        endpoint_t *e = NULL;
        for (size_t j = 0; j < d->n_endpoints && e == NULL; j++)
            if (d->endpoints[j].name && strcmp(d->endpoints[j].name, ep) == 0)
                e = &d->endpoints[j];
        if (e == NULL) {
            ERR(m, it, "model %s prefers endpoint %s, which vllm_endpoints does not declare", q(m, model), q(m, ep));
            continue;
        }
        for (size_t j = 0; j < i; j++)
            if (pref->items[j]->kind == CFG_NODE_SCALAR && strcmp(pref->items[j]->str, ep) == 0) {
                ERR(m, it, "endpoint %s is listed twice (first at %u:%u)", q(m, ep), pref->items[j]->line,
                    pref->items[j]->col);
                e = NULL;
                break;
            }
        if (e == NULL || e->ref == NULL)
            continue;
        e->used = 1;
        onode_t *ref = copy_ref(m, e->ref);
        if (access_key != NULL && !is_empty(access_key)) {
            const onode_t *have = map_get(ref, "api_key") ? map_get(ref, "api_key") : map_get(ref, "api_key_env");
            if (have != NULL)
                ERR(m, access_key, "model %s: access_key conflicts with the api_key/api_key_env of endpoint %s "
                    "(at %u:%u)", q(m, model), q(m, ep), have->line, have->col);
            else
                map_add(m, ref, on_str(m, "api_key"), on_src(m, access_key));
        }
        seq_add(m, refs, ref);
    }
    if (refs->n)
        merge_into(m, pm, on_str(m, "backend_refs"), refs, "providers.models[]", pref);
}

typedef enum { TO_MODEL, TO_CARD, TO_REFS, TO_KEY } dest_t;

static const struct {
    const char *key, *as;
    dest_t to;
} model_config_keys[] = {
    {"model_id", "provider_model_id", TO_MODEL},
    {"pricing", "pricing", TO_MODEL},
    {"api_format", "api_format", TO_MODEL},
    {"external_model_ids", "external_model_ids", TO_MODEL},
    {"reasoning_family", "reasoning_family", TO_MODEL},
    {"param_size", "param_size", TO_CARD},
    {"context_window_size", "context_window_size", TO_CARD},
    {"description", "description", TO_CARD},
    {"capabilities", "capabilities", TO_CARD},
    {"loras", "loras", TO_CARD},
    {"quality_score", "quality_score", TO_CARD},
    {"modality", "modality", TO_CARD},
    {"tags", "tags", TO_CARD},
    {"preferred_endpoints", NULL, TO_REFS},
    {"access_key", NULL, TO_KEY},
};

static void read_model(doc_t *d, const cfg_node_t *key, const cfg_node_t *entry)
{
    mig_t *m = d->m;
    if (key->kind != CFG_NODE_SCALAR || is_null(key) || key->len == 0 || strlen(key->str) != key->len) {
        ERR(m, key, "model_config: a model name must be a non-empty scalar");
        return;
    }
    const char *name = key->str;
    if (is_null(entry))
        entry = NULL;
    else if (expect(m, entry, CFG_NODE_MAP, "model_config entry") != 0)
        return;
    onode_t *pm = find_named(d->models, name);
    if (pm == NULL) {
        pm = named_entry(d, &d->models, name);
        pm->line = key->line;
        pm->col = key->col;
    }
    onode_t *card = named_entry(d, &d->cards, name);
    if (entry == NULL)
        return;
    const cfg_node_t *pref = NULL, *access = NULL;
    for (size_t i = 0; i < entry->n; i++) {
        const cfg_node_t *k = entry->items[2 * i], *v = entry->items[2 * i + 1];
        size_t j = 0;
        while (j < VSR_ARRAY_LEN(model_config_keys) &&
               !(k->kind == CFG_NODE_SCALAR && k->len == strlen(model_config_keys[j].key) &&
                 strcmp(k->str, model_config_keys[j].key) == 0))
            j++;
        if (j == VSR_ARRAY_LEN(model_config_keys)) {
            char where[256];
            snprintf(where, sizeof(where), "model_config.%s", name);
            unknown_key(m, k, where);
            continue;
        }
        switch (model_config_keys[j].to) {
        case TO_MODEL: set_new(d, pm, model_config_keys[j].as, v, k, "providers.models[]"); break;
        case TO_CARD: set_new(d, card, model_config_keys[j].as, v, k, "routing.modelCards[]"); break;
        case TO_REFS: pref = is_null(v) ? NULL : v; break;
        case TO_KEY: access = v; break;
        }
    }
    if (access != NULL && !is_null(access) && (access->kind != CFG_NODE_SCALAR || access->type != CFG_STR)) {
        ERR(m, access, "model_config.%s.access_key: expected a string, got %s", name, vsr__cfg_node_what(access));
        access = NULL;
    }
    if (pref != NULL)
        model_backends(d, pm, name, pref, access);
    else if (access != NULL && !is_empty(access))
        ERR(m, access, "model_config.%s.access_key without preferred_endpoints: there is no backend to send it to",
            name);
}

static void read_model_config(doc_t *d, const cfg_node_t *v)
{
    if (expect(d->m, v, CFG_NODE_MAP, "model_config") != 0 || too_many(d->m, v, "model_config") != 0)
        return;
    for (size_t i = 0; i < v->n; i++)
        read_model(d, v->items[2 * i], v->items[2 * i + 1]);
}

/* providers.defaults.<as> from a legacy key (or its v0.3 spelling). */
static void set_default(doc_t *d, const char *as, const char *alias, const cfg_node_t *k, const cfg_node_t *v)
{
    mig_t *m = d->m;
    if (is_empty(v))
        return;
    const onode_t *have = map_get(d->defaults, as);
    if (have == NULL && alias != NULL)
        have = map_get(d->defaults, alias);
    if (have != NULL) {
        ERR(m, k, "providers.defaults.%s is given twice (first at %u:%u)", as, have->line, have->col);
        return;
    }
    map_add(m, d->defaults, on_str(m, as), on_src(m, v));
}

static int default_key(doc_t *d, const cfg_node_t *k, const cfg_node_t *v)
{
    if (strcmp(k->str, "default_model") == 0)
        set_default(d, "model", "default_model", k, v);
    else if (strcmp(k->str, "default_reasoning_effort") == 0)
        set_default(d, "reasoning_effort", "default_reasoning_effort", k, v);
    else if (strcmp(k->str, "reasoning_families") == 0)
        set_default(d, "reasoning_families", NULL, k, v);
    else
        return 0;
    return 1;
}

/* The older surface of a providers.models[] entry (the reference's
 * LEGACY_PROVIDER_MODEL_SURFACE_KEYS and its `access` block):
 * endpoints[] + access_key become backend_refs, the card fields go to the
 * model's routing.modelCards entry, access.* to the model; other keys are
 * v0.3 keys and stay. */
static const char *const card_keys[] = {"param_size", "context_window_size", "description", "capabilities",
                                        "loras",      "quality_score",       "modality",    "tags"};

static int in_list(const cfg_node_t *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (k->kind == CFG_NODE_SCALAR && k->len == strlen(list[i]) && strcmp(k->str, list[i]) == 0)
            return 1;
    return 0;
}

static onode_t *model_endpoints(doc_t *d, const cfg_node_t *eps, const cfg_node_t *access_key)
{
    mig_t *m = d->m;
    static const char *const carried[] = {"name", "endpoint", "backend_id", "engine_kind", "protocol", "weight", "type"};
    onode_t *refs = on_new(m, ON_SEQ, eps);
    for (size_t i = 0; i < eps->n; i++) {
        const cfg_node_t *ep = eps->items[i];
        if (expect(m, ep, CFG_NODE_MAP, "providers.models[].endpoints[]") != 0)
            continue;
        const cfg_node_t *where = vsr__cfg_map_get(ep, "endpoint");
        if (where == NULL || is_empty(where)) {
            ERR(m, ep, "providers.models[].endpoints[]: an endpoint needs its endpoint (host:port)");
            continue;
        }
        onode_t *ref = on_new(m, ON_MAP, ep);
        if (vsr__cfg_map_get(ep, "name") == NULL) {
            /* the names the v0.3 loader gives unnamed refs: primary, backend-2, ... */
            char nm[32];
            snprintf(nm, sizeof(nm), i == 0 ? "primary" : "backend-%zu", i + 1);
            map_add(m, ref, on_str(m, "name"), on_str(m, nm));
        }
        for (size_t j = 0; j < ep->n; j++) {
            const cfg_node_t *k = ep->items[2 * j], *v = ep->items[2 * j + 1];
            if (!in_list(k, carried, VSR_ARRAY_LEN(carried)))
                unknown_key(m, k, "providers.models[].endpoints[]");
            else if (!is_empty(v))
                map_add(m, ref, on_src(m, k), on_src(m, v));
        }
        if (access_key != NULL)
            map_add(m, ref, on_str(m, "api_key"), on_src(m, access_key));
        seq_add(m, refs, ref);
    }
    return refs;
}

static onode_t *read_provider_model(doc_t *d, const cfg_node_t *item)
{
    mig_t *m = d->m;
    if (item->kind != CFG_NODE_MAP)
        return on_src(m, item); /* the loader says what is wrong */
    const cfg_node_t *name = vsr__cfg_map_get(item, "name"), *eps = vsr__cfg_map_get(item, "endpoints"),
                     *key = vsr__cfg_map_get(item, "access_key"), *access = vsr__cfg_map_get(item, "access");
    int legacy = eps != NULL || key != NULL || access != NULL;
    for (size_t i = 0; i < item->n && !legacy; i++)
        legacy = in_list(item->items[2 * i], card_keys, VSR_ARRAY_LEN(card_keys));
    if (!legacy)
        return map_from_src(m, item);
    const char *nm = name ? expect_string(m, name, "providers.models[].name") : NULL;
    if (nm == NULL) {
        if (name == NULL)
            ERR(m, item, "providers.models[]: a model needs a name");
        return on_src(m, item);
    }
    if (key != NULL && (is_empty(key) || key->kind != CFG_NODE_SCALAR || key->type != CFG_STR)) {
        if (!is_empty(key))
            ERR(m, key, "providers.models[].access_key: expected a string, got %s", vsr__cfg_node_what(key));
        key = NULL;
    }
    onode_t *pm = on_new(m, ON_MAP, item);
    onode_t *card = named_entry(d, &d->cards, nm);
    for (size_t i = 0; i < item->n; i++) {
        const cfg_node_t *k = item->items[2 * i], *v = item->items[2 * i + 1];
        if (v == eps || v == key || (k->kind == CFG_NODE_SCALAR && strcmp(k->str, "access_key") == 0))
            continue;
        if (v == access) {
            if (is_null(v) || expect(m, v, CFG_NODE_MAP, "providers.models[].access") != 0)
                continue;
            static const char *const access_keys[] = {"provider_model_id", "pricing", "api_format",
                                                      "external_model_ids", "backend_refs"};
            for (size_t j = 0; j < v->n; j++) {
                const cfg_node_t *ak = v->items[2 * j], *av = v->items[2 * j + 1];
                if (!in_list(ak, access_keys, VSR_ARRAY_LEN(access_keys)))
                    unknown_key(m, ak, "providers.models[].access");
                else if (!is_empty(av))
                    merge_into(m, pm, on_src(m, ak), on_src(m, av), "providers.models[]", ak);
            }
        } else if (in_list(k, card_keys, VSR_ARRAY_LEN(card_keys))) {
            set_new(d, card, k->str, v, k, "routing.modelCards[]");
        } else {
            merge_into(m, pm, on_src(m, k), on_src(m, v), "providers.models[]", k);
        }
    }
    if (eps != NULL && !is_null(eps) && expect(m, eps, CFG_NODE_SEQ, "providers.models[].endpoints") == 0 &&
        too_many(m, eps, "providers.models[].endpoints") == 0 && eps->n > 0)
        merge_into(m, pm, on_str(m, "backend_refs"), model_endpoints(d, eps, key), "providers.models[]", eps);
    else if (key != NULL && (eps == NULL || is_empty(eps)))
        ERR(m, key, "providers.models[].access_key without endpoints: there is no backend to send it to");
    return pm;
}

/* A `providers` block in a partly migrated document: defaults and models are
 * kept, the three older default keys move into defaults, external_models to
 * the model catalog; the older backends/auth_profiles/model_targets layout
 * is not converted (refused). */
static void read_providers(doc_t *d, const cfg_node_t *v)
{
    mig_t *m = d->m;
    if (expect(m, v, CFG_NODE_MAP, "providers") != 0)
        return;
    const cfg_node_t *pm = vsr__cfg_map_get(v, "models"), *pd = vsr__cfg_map_get(v, "defaults");
    if ((pm != NULL && too_many(m, pm, "providers.models") != 0) ||
        (pd != NULL && too_many(m, pd, "providers.defaults") != 0))
        return;
    for (size_t i = 0; i < v->n; i++) {
        const cfg_node_t *k = v->items[2 * i], *val = v->items[2 * i + 1];
        if (k->kind != CFG_NODE_SCALAR) {
            ERR(m, k, "providers: keys must be scalars");
        } else if (strcmp(k->str, "defaults") == 0) {
            if (is_null(val) || expect(m, val, CFG_NODE_MAP, "providers.defaults") != 0)
                continue;
            for (size_t j = 0; j < val->n; j++)
                merge_into(m, d->defaults, on_src(m, val->items[2 * j]), on_src(m, val->items[2 * j + 1]),
                           "providers.defaults", val->items[2 * j]);
        } else if (strcmp(k->str, "models") == 0) {
            if (is_null(val) || expect(m, val, CFG_NODE_SEQ, "providers.models") != 0)
                continue;
            for (size_t j = 0; j < val->n; j++)
                seq_add(m, d->models, read_provider_model(d, val->items[j]));
        } else if (default_key(d, k, val)) {
            continue;
        } else if (strcmp(k->str, "external_models") == 0) {
            if (!is_empty(val))
                place(m, d->global, "global", "model_catalog.external", on_src(m, val), k);
        } else if (strcmp(k->str, "backends") == 0 || strcmp(k->str, "auth_profiles") == 0 ||
                   strcmp(k->str, "model_targets") == 0) {
            ERR(m, k, "providers.%s (the backends/auth_profiles/model_targets layout) is not converted by vsr config "
                "migrate: write providers.models[].backend_refs", k->str);
        } else {
            unknown_key(m, k, "providers");
        }
    }
}

/* ---- routing ------------------------------------------------------------------------ */

static void read_routing(doc_t *d, const cfg_node_t *v)
{
    mig_t *m = d->m;
    if (is_null(v) || expect(m, v, CFG_NODE_MAP, "routing") != 0 || too_many(m, v, "routing") != 0)
        return;
    const cfg_node_t *cards = vsr__cfg_map_get(v, "modelCards"), *old = vsr__cfg_map_get(v, "models");
    if (cards != NULL && old != NULL) {
        ERR(m, old, "routing.models is the older spelling of routing.modelCards, which is given too");
        return;
    }
    if (old != NULL)
        cards = old;
    for (size_t i = 0; i < v->n; i++) {
        const cfg_node_t *k = v->items[2 * i], *val = v->items[2 * i + 1];
        if (val == cards) {
            if (!is_null(cards) && expect(m, cards, CFG_NODE_SEQ, "routing.modelCards") == 0 &&
                too_many(m, cards, "routing.modelCards") == 0)
                d->cards = open_list(m, cards);
            continue;
        }
        merge_into(m, d->routing, on_src(m, k), on_src(m, val), "routing", k);
    }
}

static void read_signal_list(doc_t *d, const cfg_node_t *k, const cfg_node_t *v, const char *family)
{
    mig_t *m = d->m;
    if (is_null(v) || expect(m, v, CFG_NODE_SEQ, k->str) != 0 || v->n == 0)
        return;
    onode_t *signals = map_path(m, d->routing, "signals", k);
    if (signals != NULL)
        merge_into(m, signals, on_str(m, family), on_src(m, v), "routing.signals", k);
}

/* ---- global ------------------------------------------------------------------------- */

/* v, given model_ref `ref` when it is a mapping with a model_id and no
 * model_ref (the reference names each classifier's model this way). */
static onode_t *with_model_ref(mig_t *m, const cfg_node_t *v, const char *ref)
{
    if (v->kind != CFG_NODE_MAP || vsr__cfg_map_get(v, "model_id") == NULL || vsr__cfg_map_get(v, "model_ref") != NULL)
        return on_src(m, v);
    onode_t *o = map_from_src(m, v);
    map_add(m, o, on_str(m, "model_ref"), on_str(m, ref));
    return o;
}

typedef struct {
    const char *from, *to, *model_ref; /* model_ref NULL: carried as is */
} rename_t;

/* The mapping v with its keys renamed per table (unknown keys refused). */
static onode_t *renamed(mig_t *m, const cfg_node_t *v, const rename_t *table, size_t n, const char *where)
{
    onode_t *o = on_new(m, ON_MAP, v);
    for (size_t i = 0; i < v->n; i++) {
        const cfg_node_t *k = v->items[2 * i], *val = v->items[2 * i + 1];
        size_t j = 0;
        while (j < n && !(k->kind == CFG_NODE_SCALAR && k->len == strlen(table[j].from) &&
                          strcmp(k->str, table[j].from) == 0))
            j++;
        if (j == n) {
            unknown_key(m, k, where);
            continue;
        }
        onode_t *nv = table[j].model_ref ? with_model_ref(m, val, table[j].model_ref) : on_src(m, val);
        merge_into(m, o, on_str(m, table[j].to), nv, where, k);
    }
    return o;
}

static const rename_t classifier_keys[] = {
    {"category_model", "domain", "domain_classifier"},
    {"pii_model", "pii", "pii_classifier"},
    {"mcp_category_model", "mcp", NULL},
    {"preference_model", "preference", NULL},
};

static const rename_t hallucination_keys[] = {
    {"fact_check_model", "fact_check", "fact_check_classifier"},
    {"hallucination_model", "detector", "hallucination_detector"},
    {"nli_model", "explainer", "hallucination_explainer"},
    {"enabled", "enabled", NULL},
    {"on_hallucination_detected", "on_hallucination_detected", NULL},
};

static onode_t *bert_model(mig_t *m, const cfg_node_t *v)
{
    onode_t *o = on_new(m, ON_MAP, v);
    for (size_t i = 0; i < v->n; i++) {
        const cfg_node_t *k = v->items[2 * i], *val = v->items[2 * i + 1];
        if (k->kind == CFG_NODE_SCALAR && strcmp(k->str, "model_id") == 0) {
            merge_into(m, o, on_str(m, "bert_model_path"), on_src(m, val), "bert_model", k);
        } else if (k->kind == CFG_NODE_SCALAR && strcmp(k->str, "use_cpu") == 0) {
            merge_into(m, o, on_str(m, "use_cpu"), on_src(m, val), "bert_model", k);
        } else if (k->kind == CFG_NODE_SCALAR && strcmp(k->str, "threshold") == 0) {
            onode_t *ec = on_new(m, ON_MAP, NULL);
            map_add(m, ec, on_str(m, "min_score_threshold"), on_src(m, val));
            merge_into(m, o, on_str(m, "embedding_config"), ec, "bert_model", k);
        } else {
            unknown_key(m, k, "bert_model");
        }
    }
    return o;
}

/* One legacy global block: reshaped where its v0.3 form differs, then
 * merged at its place under `global`. */
static void place_global(doc_t *d, const cfg_node_t *k, const cfg_node_t *v, const char *path)
{
    mig_t *m = d->m;
    const char *key = k->str;
    onode_t *val = NULL;
    if (is_empty(v))
        return;
    int shaped = !strcmp(key, "semantic_cache") || !strcmp(key, "prompt_guard") || !strcmp(key, "feedback_detector") ||
                 !strcmp(key, "classifier") || !strcmp(key, "hallucination_mitigation") || !strcmp(key, "bert_model") ||
                 !strcmp(key, "router");
    if (shaped && (expect(m, v, CFG_NODE_MAP, key) != 0 || too_many(m, v, key) != 0))
        return;
    if (!strcmp(key, "semantic_cache")) {
        val = map_from_src(m, v);
        const cfg_node_t *en = vsr__cfg_map_get(v, "enabled");
        if (en != NULL) {
            map_del(val, "enabled");
            warn_at(m, en, "semantic_cache.enabled is not carried: global.stores.response_cache only configures the "
                           "store; in v0.3 a decision turns caching on with a response_cache plugin");
        }
        if (val->n == 0)
            return;
    } else if (!strcmp(key, "prompt_guard") || !strcmp(key, "feedback_detector")) {
        val = with_model_ref(m, v, key);
    } else if (!strcmp(key, "classifier")) {
        val = renamed(m, v, classifier_keys, VSR_ARRAY_LEN(classifier_keys), "classifier");
    } else if (!strcmp(key, "hallucination_mitigation")) {
        val = renamed(m, v, hallucination_keys, VSR_ARRAY_LEN(hallucination_keys), "hallucination_mitigation");
    } else if (!strcmp(key, "bert_model")) {
        val = bert_model(m, v);
    } else {
        val = on_src(m, v);
    }
    if (!strcmp(key, "router")) {
        /* merged key by key into global.router */
        onode_t *router = map_path(m, d->global, "router", k);
        for (size_t i = 0; router != NULL && i < v->n; i++)
            merge_into(m, router, on_src(m, v->items[2 * i]), on_src(m, v->items[2 * i + 1]), "global.router",
                       v->items[2 * i]);
        return;
    }
    place(m, d->global, "global", path, val, k);
}

/* ---- the top level --------------------------------------------------------------------- */

static void read_top(doc_t *d, const cfg_node_t *k, const cfg_node_t *v, onode_t *out)
{
    mig_t *m = d->m;
    const char *key = k->str;
    if (!strcmp(key, "version"))
        return;
    if (!strcmp(key, "listeners") || !strcmp(key, "entrypoints") || !strcmp(key, "recipes")) {
        if (!is_null(v) && expect(m, v, CFG_NODE_SEQ, key) == 0)
            map_add(m, out, on_src(m, k), on_src(m, v));
        return;
    }
    if (!strcmp(key, "setup")) {
        map_add(m, out, on_src(m, k), on_src(m, v));
        return;
    }
    if (!strcmp(key, "providers") || !strcmp(key, "routing"))
        return; /* read first, see migrate_root */
    if (!strcmp(key, "global")) {
        if (is_null(v) || expect(m, v, CFG_NODE_MAP, "global") != 0 || too_many(m, v, "global") != 0)
            return;
        for (size_t i = 0; i < v->n; i++) {
            const cfg_node_t *gk = v->items[2 * i];
            /* the reference's older global layout: not converted here */
            if (gk->kind == CFG_NODE_SCALAR &&
                (!strcmp(gk->str, "runtime") || !strcmp(gk->str, "models") || !strcmp(gk->str, "modules"))) {
                ERR(m, gk, "global.%s (an older layout of global) is not converted by vsr config migrate: move its "
                    "blocks to global.router, services, stores, integrations or model_catalog", gk->str);
                continue;
            }
            merge_into(m, d->global, on_src(m, gk), on_src(m, v->items[2 * i + 1]), "global", gk);
        }
        return;
    }
    if (!strcmp(key, "model_config"))
        return read_model_config(d, v);
    if (!strcmp(key, "vllm_endpoints") || !strcmp(key, "provider_profiles"))
        return; /* read first */
    if (default_key(d, k, v))
        return;
    if (!strcmp(key, "signals")) {
        if (is_null(v) || expect(m, v, CFG_NODE_MAP, "signals") != 0 || too_many(m, v, "signals") != 0)
            return;
        onode_t *signals = map_path(m, d->routing, "signals", k);
        for (size_t i = 0; signals != NULL && i < v->n; i++)
            merge_into(m, signals, on_src(m, v->items[2 * i]), on_src(m, v->items[2 * i + 1]), "routing.signals",
                       v->items[2 * i]);
        return;
    }
    if (!strcmp(key, "decisions")) {
        if (!is_null(v) && expect(m, v, CFG_NODE_SEQ, "decisions") == 0)
            merge_into(m, d->routing, on_str(m, "decisions"), on_src(m, v), "routing", k);
        return;
    }
    for (size_t i = 0; i < VSR_ARRAY_LEN(signal_keys); i++)
        if (!strcmp(key, signal_keys[i][0]))
            return read_signal_list(d, k, v, signal_keys[i][1]);
    for (size_t i = 0; i < VSR_ARRAY_LEN(global_keys); i++)
        if (!strcmp(key, global_keys[i][0]))
            return place_global(d, k, v, global_keys[i][1]);
    unknown_key(m, k, NULL);
}

/* ---- emitting YAML ------------------------------------------------------------------------ */

typedef struct {
    mig_t *m;
    vsr_buf_t *b;
    int failed;
} emit_t;

/* A view of either tree: an onode_t, or a parsed node. */
typedef struct {
    const onode_t *o;
    const cfg_node_t *c;
} ref_t;

static ref_t ref_of(const onode_t *o)
{
    ref_t r = {o, NULL};
    if (o->kind == ON_SRC) {
        r.o = NULL;
        r.c = o->src;
    }
    return r;
}

static ref_t ref_src(const cfg_node_t *c)
{
    ref_t r = {NULL, c};
    return r;
}

static int ref_is_map(ref_t r)
{
    return r.o ? r.o->kind == ON_MAP : r.c->kind == CFG_NODE_MAP;
}

static int ref_is_seq(ref_t r)
{
    return r.o ? r.o->kind == ON_SEQ : r.c->kind == CFG_NODE_SEQ;
}

static size_t ref_n(ref_t r)
{
    return r.o ? r.o->n : r.c->n;
}

static ref_t ref_key(ref_t r, size_t i)
{
    return r.o ? ref_of(r.o->keys[i]) : ref_src(r.c->items[2 * i]);
}

static ref_t ref_val(ref_t r, size_t i)
{
    if (r.o)
        return ref_of(r.o->vals[i]);
    return ref_src(r.c->kind == CFG_NODE_MAP ? r.c->items[2 * i + 1] : r.c->items[i]);
}

static int is_11_word(const char *s, size_t len)
{
    static const char *const words[] = {"y", "n", "yes", "no", "on", "off", NULL};
    for (const char *const *w = words; *w; w++)
        if (strlen(*w) == len && strncasecmp(*w, s, len) == 0)
            return 1;
    return 0;
}

/* Can s be written unquoted and still read back as this string, by YAML
 * 1.2 (vsr) and 1.1 (PyYAML and other older readers) alike? */
static int plain_ok(const char *s, size_t len)
{
    if (len == 0 || len > 200 || memchr(s, '\0', len) != NULL)
        return 0;
    unsigned char c0 = (unsigned char)s[0];
    if (!((c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z') || c0 == '_' || c0 == '/'))
        return 0;
    if (s[len - 1] == ' ')
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_./+@- ", c)))
            return 0;
    }
    return vsr__cfg_plain_type(s, len) == CFG_STR && !is_11_word(s, len);
}

/* The code point of the UTF-8 sequence at s (at most len bytes) and its
 * length in *n; a byte that starts no valid sequence is returned as is. */
static unsigned utf8_at(const unsigned char *s, size_t len, size_t *n)
{
    unsigned c = s[0];
    size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (need == 1 || need > len) {
        *n = 1;
        return c;
    }
    unsigned cp = c & (0x3fu >> (need - 1));
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *n = 1;
            return c;
        }
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    *n = need;
    return cp;
}

static void emit_string(emit_t *e, const char *s, size_t len)
{
    if (plain_ok(s, len)) {
        vsr_buf_append(e->b, s, len);
        return;
    }
    vsr_buf_append(e->b, "\"", 1);
    for (size_t i = 0; i < len;) {
        size_t n;
        unsigned cp = utf8_at((const unsigned char *)s + i, len - i, &n);
        switch (cp) {
        case '"': vsr_buf_append_cstr(e->b, "\\\""); break;
        case '\\': vsr_buf_append_cstr(e->b, "\\\\"); break;
        case '\n': vsr_buf_append_cstr(e->b, "\\n"); break;
        case '\t': vsr_buf_append_cstr(e->b, "\\t"); break;
        case '\r': vsr_buf_append_cstr(e->b, "\\r"); break;
        case 0: vsr_buf_append_cstr(e->b, "\\0"); break;
        default:
            /* control characters, C1, the Unicode line breaks, BOM and the
             * non-characters a YAML reader refuses: escaped */
            if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 || cp == 0xfeff ||
                cp == 0xfffe || cp == 0xffff)
                vsr_buf_printf(e->b, cp <= 0xff ? "\\x%02x" : "\\u%04x", cp);
            else
                vsr_buf_append(e->b, s + i, n);
        }
        i += n;
    }
    vsr_buf_append(e->b, "\"", 1);
}

/* The run of digits at s[i], or "0" when there is none; returns its end. */
static size_t emit_digits(emit_t *e, const char *s, size_t len, size_t i)
{
    size_t start = i;
    while (i < len && s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == start)
        vsr_buf_append(e->b, "0", 1);
    else
        vsr_buf_append(e->b, s + start, i - start);
    return i;
}

/* A float in a form both YAML 1.1 and 1.2 read as a float:
 * [sign] digits "." digits ["e" sign digits], or the .inf/.nan words. */
static void emit_float(emit_t *e, const char *s, size_t len)
{
    if (memchr(s, 'i', len) || memchr(s, 'I', len) || memchr(s, 'n', len) || memchr(s, 'N', len)) {
        vsr_buf_append(e->b, s, len); /* .inf, -.Inf, .nan: as written */
        return;
    }
    size_t i = 0;
    if (i < len && (s[i] == '-' || s[i] == '+'))
        vsr_buf_append(e->b, s + i++, 1);
    i = emit_digits(e, s, len, i);
    vsr_buf_append(e->b, ".", 1);
    if (i < len && s[i] == '.')
        i++;
    i = emit_digits(e, s, len, i);
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        vsr_buf_append(e->b, "e", 1);
        if (i < len && (s[i] == '-' || s[i] == '+'))
            vsr_buf_append(e->b, s + i++, 1);
        else
            vsr_buf_append(e->b, "+", 1);
        vsr_buf_append(e->b, s + i, len - i);
    }
}

static void emit_scalar(emit_t *e, ref_t r)
{
    if (r.o) {
        emit_string(e, r.o->str, strlen(r.o->str));
        return;
    }
    const cfg_node_t *n = r.c;
    switch (n->type) {
    case CFG_NULL: vsr_buf_append_cstr(e->b, "null"); break;
    case CFG_BOOL: vsr_buf_append_cstr(e->b, (n->str[0] | 0x20) == 't' ? "true" : "false"); break;
    case CFG_INT:
        if (n->ival_ok)
            vsr_buf_printf(e->b, "%lld", (long long)n->ival);
        else
            vsr_buf_append(e->b, n->str, n->len); /* past int64: the digits as written */
        break;
    case CFG_FLOAT: emit_float(e, n->str, n->len); break;
    case CFG_STR: emit_string(e, n->str, n->len); break;
    }
}

static void indent(emit_t *e, unsigned depth)
{
    for (unsigned i = 0; i < depth; i++)
        vsr_buf_append(e->b, "  ", 2);
}

static void emit_map_body(emit_t *e, ref_t r, unsigned depth, int first_inline);
static void emit_seq_body(emit_t *e, ref_t r, unsigned depth);

static uint32_t ref_line(ref_t r, uint32_t *col)
{
    *col = r.o ? r.o->col : r.c->col;
    return r.o ? r.o->line : r.c->line;
}

static int too_deep(emit_t *e, ref_t r, unsigned depth)
{
    if (depth < CFG_MAX_DEPTH)
        return 0;
    if (!e->failed) {
        uint32_t col, line = ref_line(r, &col);
        vsr__cfg_error(&e->m->dg, line ? line : 1, line ? col : 1,
                       "the migrated document would nest deeper than %u levels", CFG_MAX_DEPTH);
    }
    e->failed = 1;
    return 1;
}

/* Writes the value that follows "key:" or "-" (nothing written yet on the line after it). */
static void emit_value(emit_t *e, ref_t v, unsigned depth, int after_dash)
{
    if (ref_is_map(v)) {
        if (ref_n(v) == 0) {
            vsr_buf_append_cstr(e->b, " {}\n");
        } else if (after_dash) {
            vsr_buf_append_cstr(e->b, " ");
            emit_map_body(e, v, depth + 1, 1);
        } else {
            vsr_buf_append_cstr(e->b, "\n");
            emit_map_body(e, v, depth + 1, 0);
        }
    } else if (ref_is_seq(v)) {
        if (ref_n(v) == 0) {
            vsr_buf_append_cstr(e->b, " []\n");
        } else {
            vsr_buf_append_cstr(e->b, "\n");
            emit_seq_body(e, v, depth + 1);
        }
    } else {
        vsr_buf_append_cstr(e->b, " ");
        emit_scalar(e, v);
        vsr_buf_append_cstr(e->b, "\n");
    }
}

static void emit_map_body(emit_t *e, ref_t r, unsigned depth, int first_inline)
{
    if (too_deep(e, r, depth))
        return;
    for (size_t i = 0; i < ref_n(r) && !e->failed; i++) {
        ref_t k = ref_key(r, i);
        if (ref_is_map(k) || ref_is_seq(k)) {
            uint32_t col, line = ref_line(k, &col);
            vsr__cfg_error(&e->m->dg, line, col, "a mapping key must be a scalar to be migrated");
            e->failed = 1;
            return;
        }
        if (!(i == 0 && first_inline))
            indent(e, depth);
        if ((k.o ? strlen(k.o->str) : k.c->len) > 1000) {
            /* past the 1024 characters of an implicit key: an explicit one */
            vsr_buf_append(e->b, "? ", 2);
            emit_scalar(e, k);
            vsr_buf_append(e->b, "\n", 1);
            indent(e, depth);
        } else {
            emit_scalar(e, k);
        }
        vsr_buf_append(e->b, ":", 1);
        emit_value(e, ref_val(r, i), depth, 0);
    }
}

static void emit_seq_body(emit_t *e, ref_t r, unsigned depth)
{
    if (too_deep(e, r, depth))
        return;
    for (size_t i = 0; i < ref_n(r) && !e->failed; i++) {
        indent(e, depth);
        vsr_buf_append(e->b, "-", 1);
        emit_value(e, ref_val(r, i), depth, 1);
    }
}

/* ---- the entry point ------------------------------------------------------------------------ */

/* Refuses a document that needs no migration; 1 when it is one. */
static int already_v03(mig_t *m, const cfg_node_t *root)
{
    const cfg_node_t *v = vsr__cfg_map_get(root, "version");
    if (v == NULL)
        return 0;
    if (v->kind != CFG_NODE_SCALAR) {
        ERR(m, v, "version: expected a scalar, got %s", vsr__cfg_node_what(v));
        return 1;
    }
    if (v->len == 4 && memcmp(v->str, "v0.3", 4) == 0) {
        ERR(m, v, "version is already v0.3; nothing to migrate");
        return 1;
    }
    return 0;
}

static void migrate_root(mig_t *m, const cfg_node_t *root, onode_t *out)
{
    doc_t d;
    memset(&d, 0, sizeof(d));
    d.m = m;
    d.root = root;
    d.providers = on_new(m, ON_MAP, NULL);
    d.defaults = on_new(m, ON_MAP, NULL);
    d.models = on_new(m, ON_SEQ, NULL);
    d.routing = on_new(m, ON_MAP, NULL);
    d.global = on_new(m, ON_MAP, NULL);

    if (too_many(m, root, "the document") != 0)
        return;
    for (size_t i = 0; i < root->n; i++)
        if (root->items[2 * i]->kind != CFG_NODE_SCALAR || root->items[2 * i]->type != CFG_STR) {
            ERR(m, root->items[2 * i], "top-level keys must be strings, got %s", vsr__cfg_node_what(root->items[2 * i]));
            return;
        }
    /* what other blocks refer to, first */
    const cfg_node_t *v;
    if ((v = vsr__cfg_map_get(root, "provider_profiles")) != NULL && !is_null(v))
        check_profiles(&d, v);
    if ((v = vsr__cfg_map_get(root, "vllm_endpoints")) != NULL && !is_null(v))
        read_endpoints(&d, v);
    if ((v = vsr__cfg_map_get(root, "routing")) != NULL)
        read_routing(&d, v);
    if ((v = vsr__cfg_map_get(root, "providers")) != NULL && !is_null(v))
        read_providers(&d, v);

    onode_t *tail = on_new(m, ON_MAP, NULL); /* listeners, entrypoints, recipes, setup */
    for (size_t i = 0; i < root->n; i++)
        read_top(&d, root->items[2 * i], root->items[2 * i + 1], tail);

    for (size_t i = 0; i < d.n_endpoints; i++)
        if (d.endpoints[i].name && d.endpoints[i].ref && !d.endpoints[i].used)
            warn_at(m, d.endpoints[i].name_node, "this endpoint is in no model's preferred_endpoints, so no "
                                                 "backend_refs entry carries it");
    /* every provider model has a card (the reference's layout) */
    for (size_t i = 0; i < d.models->n; i++) {
        const onode_t *nm = d.models->vals[i]->kind == ON_MAP ? map_get(d.models->vals[i], "name") : NULL;
        if (nm != NULL && nm->kind == ON_STR)
            named_entry(&d, &d.cards, nm->str);
        else if (nm != NULL && nm->kind == ON_SRC && nm->src->kind == CFG_NODE_SCALAR && nm->src->type == CFG_STR)
            named_entry(&d, &d.cards, nm->src->str);
    }

    map_add(m, out, on_str(m, "version"), on_str(m, "v0.3"));
    onode_t *listeners = map_get(tail, "listeners");
    if (listeners)
        map_add(m, out, on_str(m, "listeners"), listeners);
    if (d.defaults->n)
        map_add(m, d.providers, on_str(m, "defaults"), d.defaults);
    map_add(m, d.providers, on_str(m, "models"), d.models);
    map_add(m, out, on_str(m, "providers"), d.providers);
    /* routing: its own keys, then modelCards, signals, decisions */
    onode_t *routing = on_new(m, ON_MAP, NULL);
    for (size_t i = 0; i < d.routing->n; i++)
        if (!key_is(d.routing->keys[i], "signals") && !key_is(d.routing->keys[i], "decisions"))
            map_add(m, routing, d.routing->keys[i], d.routing->vals[i]);
    if (d.cards && d.cards->n)
        map_add(m, routing, on_str(m, "modelCards"), d.cards);
    static const char *const last[] = {"signals", "decisions"};
    for (size_t j = 0; j < VSR_ARRAY_LEN(last); j++) {
        long i = map_find(d.routing, last[j]);
        if (i >= 0)
            map_add(m, routing, d.routing->keys[i], d.routing->vals[i]);
    }
    if (routing->n)
        map_add(m, out, on_str(m, "routing"), routing);
    static const char *const kept[] = {"entrypoints", "recipes"};
    for (size_t j = 0; j < VSR_ARRAY_LEN(kept); j++)
        if (map_get(tail, kept[j]))
            map_add(m, out, on_str(m, kept[j]), map_get(tail, kept[j]));
    if (d.global->n)
        map_add(m, out, on_str(m, "global"), d.global);
    if (map_get(tail, "setup"))
        map_add(m, out, on_str(m, "setup"), map_get(tail, "setup"));
}

int vsr_config_migrate(const char *file, const char *data, size_t len, vsr_buf_t *out, vsr_buf_t *err,
                       vsr_buf_t *warn)
{
    mig_t m;
    memset(&m, 0, sizeof(m));
    vsr_pool_init(&m.pool);
    m.file = file;
    m.warn = warn;
    m.dg.out = err;
    m.dg.file = file;

    cfg_node_t *root = NULL;
    int rc = vsr__cfg_parse_yaml(&m.pool, &m.dg, data, len, &root);
    if (rc == VSR_OK && m.dg.ignored_line > 0 && warn != NULL)
        vsr_buf_printf(warn, "%s:%u:%u: note: a second YAML document starts here: only the first is migrated\n", file,
                       m.dg.ignored_line, m.dg.ignored_col);
    if (rc == VSR_OK && m.dg.n_errors == 0) {
        if (root == NULL || is_null(root)) {
            vsr__cfg_error(&m.dg, 1, 1, "the document is empty: nothing to migrate");
        } else if (root->kind != CFG_NODE_MAP) {
            ERR(&m, root, "expected a mapping at the top of the document, got %s", vsr__cfg_node_what(root));
        } else if (!already_v03(&m, root)) {
            onode_t *doc = on_new(&m, ON_MAP, NULL);
            migrate_root(&m, root, doc);
            if (m.dg.n_errors == 0) {
                vsr_buf_t tmp;
                vsr_buf_init(&tmp, 0);
                emit_t e = {&m, &tmp, 0};
                emit_map_body(&e, ref_of(doc), 0, 0);
                if (!e.failed && m.dg.n_errors == 0 && vsr_buf_append(out, tmp.data, tmp.len) != VSR_OK)
                    vsr__cfg_error(&m.dg, 1, 1, "the migrated document is too large");
                vsr_buf_free(&tmp);
            }
        }
    }
    rc = m.dg.n_errors ? VSR_ERR_INVALID : VSR_OK;
    vsr_pool_free(&m.pool);
    return rc;
}
