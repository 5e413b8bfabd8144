/*
 * cfg_secrets.c — a submitted document's placeholders and environment
 * variable names, checked before it is loaded (vsr_config_vet).
 *
 * A document read back through the management API is redacted: every secret
 * is VSR_CONFIG_REDACTED.  Sending it back must keep the secrets, and must
 * never make the placeholder itself a key, so each placeholder found where
 * redaction puts one is replaced by the active version's node at the same
 * position, or refused.  The walk follows the submitted tree and the active
 * tree side by side; a list item that is a mapping with a "name" is matched
 * by name (a reordered list keeps its secrets), anything else by index.
 */
#include "config/cfg_internal.h"

#include <stdio.h>

typedef struct {
    const vsr_config_vet_t *v;
    cfg_diag_t *dg;
    vsr_pool_t *pool;
    int replaced;
} vet_t;

static int is_placeholder(const cfg_node_t *n)
{
    return n && n->kind == CFG_NODE_SCALAR && n->type == CFG_STR && n->len == sizeof(VSR_CONFIG_REDACTED) - 1 &&
           memcmp(n->str, VSR_CONFIG_REDACTED, n->len) == 0;
}

static const cfg_node_t *item_name(const cfg_node_t *item)
{
    const cfg_node_t *name = vsr__cfg_map_get(item, "name");
    return name && name->kind == CFG_NODE_SCALAR ? name : NULL;
}

/* The active list's counterpart of doc's item i. */
static const cfg_node_t *counterpart(const cfg_node_t *act, const cfg_node_t *item, size_t i)
{
    if (act == NULL || act->kind != CFG_NODE_SEQ)
        return NULL;
    const cfg_node_t *name = item->kind == CFG_NODE_MAP ? item_name(item) : NULL;
    if (name == NULL)
        return i < act->n ? act->items[i] : NULL;
    for (size_t j = 0; j < act->n; j++) {
        const cfg_node_t *other = act->items[j]->kind == CFG_NODE_MAP ? item_name(act->items[j]) : NULL;
        if (other && other->len == name->len && memcmp(other->str, name->str, name->len) == 0)
            return act->items[j];
    }
    return NULL;
}

static int env_allowed(const vsr_config_vet_t *v, const char *name)
{
    for (size_t i = 0; i < v->n_env_allowed; i++)
        if (strcmp(v->env_allowed[i], name) == 0)
            return 1;
    return 0;
}

/* *slot (a secret's value) is a placeholder: put the active secret there. */
static void resolve(vet_t *t, cfg_node_t **slot, const cfg_node_t *act, const char *path)
{
    if (act != NULL && !is_placeholder(act) && !(act->kind == CFG_NODE_SCALAR && act->type == CFG_NULL)) {
        *slot = (cfg_node_t *)act; /* the active tree lives until the walk's end */
        t->replaced = 1;
        return;
    }
    vsr__cfg_error(t->dg, (*slot)->line, (*slot)->col,
                   "%s is \"" VSR_CONFIG_REDACTED "\" but the active configuration has no secret there to keep: "
                   "send the secret itself",
                   path);
}

static void walk(vet_t *t, cfg_node_t *n, const cfg_node_t *act, char *path, size_t plen, int depth);

/* A secret's value: a placeholder, or a list of them (api_keys). */
static void secret_value(vet_t *t, cfg_node_t **slot, const cfg_node_t *act, char *path, size_t plen)
{
    cfg_node_t *v = *slot;
    if (is_placeholder(v)) {
        resolve(t, slot, act, path);
        return;
    }
    if (v->kind != CFG_NODE_SEQ)
        return;
    size_t l = strlen(path);
    for (size_t i = 0; i < v->n; i++) {
        if (!is_placeholder(v->items[i]))
            continue;
        snprintf(path + l, plen - l, "[%zu]", i);
        const cfg_node_t *a = act && act->kind == CFG_NODE_SEQ && i < act->n ? act->items[i] : NULL;
        resolve(t, &v->items[i], a, path);
        path[l] = '\0';
    }
}

static void walk(vet_t *t, cfg_node_t *n, const cfg_node_t *act, char *path, size_t plen, int depth)
{
    if (depth > (int)CFG_MAX_DEPTH)
        return;
    size_t l = strlen(path);
    if (n->kind == CFG_NODE_SEQ) {
        for (size_t i = 0; i < n->n; i++) {
            snprintf(path + l, plen - l, "[%zu]", i);
            walk(t, n->items[i], counterpart(act, n->items[i], i), path, plen, depth + 1);
        }
        path[l] = '\0';
        return;
    }
    if (n->kind != CFG_NODE_MAP)
        return;
    int headers = l >= 13 && strcmp(path + l - 13, "extra_headers") == 0;
    int entry_secret = vsr__cfg_header_entry_secret(path, n);
    for (size_t i = 0; i < n->n; i++) {
        const cfg_node_t *k = n->items[2 * i];
        cfg_node_t **slot = &n->items[2 * i + 1];
        if (k->kind != CFG_NODE_SCALAR)
            continue;
        const cfg_node_t *a = act && act->kind == CFG_NODE_MAP ? vsr__cfg_map_get(act, k->str) : NULL;
        snprintf(path + l, plen - l, "%s%s", l ? "." : "", k->str);
        if (vsr__cfg_secret_key(k->str) || (headers && !vsr__cfg_header_harmless(k->str)) ||
            (entry_secret && strcmp(k->str, "value") == 0)) {
            secret_value(t, slot, a, path, plen);
        } else if (k->len > 4 && strcmp(k->str + k->len - 4, "_env") == 0 && (*slot)->kind == CFG_NODE_SCALAR &&
                   (*slot)->type == CFG_STR) {
            const char *name = (*slot)->str;
            if (t->v->env_seen)
                t->v->env_seen(t->v->ud, name);
            if (t->v->env_check && !env_allowed(t->v, name))
                vsr__cfg_error(t->dg, (*slot)->line, (*slot)->col,
                               "%s names the environment variable %s, which no configuration file of this process "
                               "names: a document sent through the management API may only use those",
                               path, vsr__cfg_quote(t->pool, name, (*slot)->len));
        } else {
            walk(t, *slot, a, path, plen, depth + 1);
        }
        path[l] = '\0';
    }
}

/* Whether the tree holds a placeholder anywhere (then the active tree is
 * needed); bounded like the walk. */
static int has_placeholder(const cfg_node_t *n, int depth)
{
    if (n == NULL || depth > (int)CFG_MAX_DEPTH)
        return 0;
    if (is_placeholder(n))
        return 1;
    size_t items = n->kind == CFG_NODE_MAP ? 2 * n->n : n->kind == CFG_NODE_SEQ ? n->n : 0;
    for (size_t i = 0; i < items; i++)
        if (has_placeholder(n->items[i], depth + 1))
            return 1;
    return 0;
}

/* Vets root in place; the active tree, when one is needed, is parsed into
 * pool (which then outlives root's use). */
static int vet_tree(const char *file, vsr_pool_t *pool, cfg_node_t *root, const vsr_config_vet_t *v, int *replaced,
                    vsr_buf_t *err)
{
    cfg_diag_t dg = {.out = err, .file = file};
    cfg_diag_t quiet = {.out = NULL, .file = "active"};
    cfg_node_t *act = NULL;
    if (v->active && has_placeholder(root, 0) &&
        (vsr__cfg_parse_yaml(pool, &quiet, v->active, v->active_len, &act) != VSR_OK || quiet.n_errors))
        act = NULL;
    vet_t t = {v, &dg, pool, 0};
    char path[CFG_MAX_PATH] = "";
    walk(&t, root, act, path, sizeof(path), 0);
    *replaced = t.replaced;
    return dg.n_errors ? VSR_ERR_INVALID : VSR_OK;
}

int vsr_config_doc_vet(vsr_config_doc_t *d, const vsr_config_vet_t *v, vsr_buf_t *err)
{
    if (!d->parsed || d->root == NULL || d->dg.n_errors > 0)
        return VSR_OK; /* the next steps report it */
    int replaced = 0;
    return vet_tree(d->name, &d->pool, d->root, v, &replaced, err);
}

int vsr_config_vet(const char *name, const char *doc, size_t len, const vsr_config_vet_t *v, vsr_buf_t *resolved,
                   vsr_buf_t *err)
{
    const char *file = name ? name : "<string>";
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    cfg_node_t *root = NULL;
    cfg_diag_t parse = {.out = NULL, .file = file};
    if (vsr__cfg_parse_yaml(&pool, &parse, doc ? doc : "", doc ? len : 0, &root) != VSR_OK || root == NULL ||
        parse.n_errors > 0) {
        vsr_pool_free(&pool);
        return VSR_OK; /* the loader reports it */
    }
    int replaced = 0;
    int rc = vet_tree(file, &pool, root, v, &replaced, err);
    if (rc == VSR_OK && replaced && vsr__cfg_canonical_node(resolved, root) != VSR_OK) {
        cfg_diag_t dg = {.out = err, .file = file};
        vsr__cfg_error(&dg, root->line, root->col, "the document cannot be rendered canonically");
        rc = VSR_ERR_INVALID;
    }
    vsr_pool_free(&pool);
    return rc;
}
