/*
 * cfg_management.c — global.services.management_api.auth: who may use the
 * management API (the reference's config/management_api.go).
 *
 *   auth:
 *     mode: disabled | bearer        (default disabled)
 *     tokens: [{env: VAR, role: R}]  (a bearer token read from VAR at start, bound to role R)
 *     roles: {R: [permission, ...]}  (absent: viewer, operator, admin as the reference's defaults)
 *
 * A token's role must be one of the roles; every token names a variable and
 * a role.  What each vsr route needs is admin/admin_auth.c's; docs/security.md
 * says it all.
 */
#include "config/cfg_internal.h"

#include <stddef.h>
#include <string.h>

#define BOX_OFF(m) offsetof(config_box_t, m)
#define CONF_OFF(m) offsetof(config_box_t, conf.m)
#define TOK_OFF(m) offsetof(vsr_management_token_conf_t, m)

/* The reference's DefaultManagementAPIRoles. */
static const char *const viewer_perms[] = {"health.read", "ready.read",      "docs.read", "metrics.read",
                                           "classify.invoke", "config.read", "replay.read", "data.read",
                                           "cache.read",  "compression.read", NULL};
static const char *const operator_perms[] = {"health.read",    "ready.read",      "docs.read",
                                             "metrics.read",   "classify.invoke", "config.read",
                                             "config.write",   "learning.ingest", "replay.read",
                                             "replay.detail",  "data.read",       "data.write",
                                             "cache.read",     "cache.invalidate", "compression.read",
                                             "compression.preview", NULL};
static const char *const admin_perms[] = {"*", NULL};
static const struct {
    const char *name;
    const char *const *perms;
} default_roles[] = {{"viewer", viewer_perms}, {"operator", operator_perms}, {"admin", admin_perms}};

static const char *const auth_modes[] = {"disabled", "bearer", NULL};

static const cfg_field_t token_fields[] = {
    {.key = "env", .decode = vsr__cfg_env_name, .flags = CFG_REQUIRED, .offset = TOK_OFF(env)},
    {.key = "role", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = TOK_OFF(role)},
};

static const cfg_spec_t token_spec = {
    .size = sizeof(vsr_management_token_conf_t),
    .fields = token_fields,
    .n_fields = VSR_ARRAY_LEN(token_fields),
};

/* roles: a mapping of role names to lists of permission strings. */
static int decode_roles(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr_config_t *c = &((config_box_t *)obj)->conf;
    if (vsr__cfg_is_empty(val))
        return 0;
    if (val->kind != CFG_NODE_MAP) {
        vsr__cfg_node_error(d, val, "expected a mapping of role names to permission lists, got %s",
                            vsr__cfg_node_what(val));
        return -1;
    }
    c->management_auth_roles = vsr_pool_alloc(d->pool, val->n * sizeof(*c->management_auth_roles));
    c->n_management_auth_roles = 0;
    int rc = 0;
    for (size_t i = 0; i < val->n; i++) {
        const cfg_node_t *k = val->items[2 * i], *v = val->items[2 * i + 1];
        vsr_management_role_conf_t *r = &c->management_auth_roles[c->n_management_auth_roles];
        memset(r, 0, sizeof(*r));
        cfg_field_t kf = {.key = "roles"};
        const char *name = k->kind == CFG_NODE_SCALAR ? vsr__cfg_get_string(d, &kf, k) : NULL;
        if (name == NULL) {
            if (k->kind != CFG_NODE_SCALAR)
                vsr__cfg_node_error(d, k, "a role name must be a string");
            rc = -1;
            continue;
        }
        cfg_field_t pf = {.key = "roles", .offset = offsetof(vsr_management_role_conf_t, permissions)};
        if (vsr__cfg_strlist(d, &pf, v, r) != 0) {
            rc = -1;
            continue;
        }
        r->name = vsr__cfg_strdup(d, name);
        c->n_management_auth_roles++;
    }
    return rc;
}

static const cfg_field_t auth_fields[] = {
    {.key = "mode", .decode = vsr__cfg_choice, .offset = CONF_OFF(management_auth_bearer), .choices = auth_modes},
    {.key = "tokens", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = CONF_OFF(management_auth_tokens),
     .count_offset = CONF_OFF(n_management_auth_tokens), .spec = &token_spec},
    {.key = "roles", .decode = decode_roles, .flags = CFG_NULL_OK},
};

static void finish_auth(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                        size_t index)
{
    vsr_config_t *c = &((config_box_t *)obj)->conf;
    if (c->n_management_auth_roles == 0) {
        /* the reference's built-in map, spelled out so that every reader sees one */
        size_t n = VSR_ARRAY_LEN(default_roles);
        c->management_auth_roles = vsr_pool_alloc(d->pool, n * sizeof(*c->management_auth_roles));
        for (size_t i = 0; i < n; i++) {
            vsr_management_role_conf_t *r = &c->management_auth_roles[i];
            size_t m = 0;
            while (default_roles[i].perms[m])
                m++;
            r->name = vsr__cfg_strdup(d, default_roles[i].name);
            r->permissions.items = vsr_pool_alloc(d->pool, m * sizeof(char *));
            r->permissions.n = m;
            for (size_t j = 0; j < m; j++)
                r->permissions.items[j] = vsr__cfg_strdup(d, default_roles[i].perms[j]);
        }
        c->n_management_auth_roles = n;
    }
    const cfg_node_t *tokens = seen[1];
    for (size_t i = 0; i < c->n_management_auth_tokens; i++) {
        const vsr_management_token_conf_t *t = &c->management_auth_tokens[i];
        int known = 0;
        for (size_t j = 0; j < c->n_management_auth_roles && !known; j++)
            known = t->role && strcmp(t->role, c->management_auth_roles[j].name) == 0;
        const cfg_node_t *at = tokens && tokens->kind == CFG_NODE_SEQ && i < tokens->n ? tokens->items[i] : map;
        const cfg_node_t *role = vsr__cfg_map_get(at, "role");
        if (!known && t->role)
            vsr__cfg_node_error(d, role ? role : at, "tokens[%zu].role %s is not one of the roles", i,
                                vsr__cfg_quote(d->pool, t->role, strlen(t->role)));
        for (size_t j = 0; j < i; j++)
            if (t->env && c->management_auth_tokens[j].env && strcmp(t->env, c->management_auth_tokens[j].env) == 0)
                vsr__cfg_node_error(d, at, "tokens[%zu].env %s is named twice", i, t->env);
    }
}

const cfg_spec_t vsr__cfg_management_auth_spec = {
    .size = sizeof(config_box_t),
    .fields = auth_fields,
    .n_fields = VSR_ARRAY_LEN(auth_fields),
    .finish = finish_auth,
};

static int str_same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

int vsr__cfg_management_auth_eq(const vsr_config_t *a, const vsr_config_t *b)
{
    if (a->management_auth_bearer != b->management_auth_bearer ||
        a->n_management_auth_tokens != b->n_management_auth_tokens ||
        a->n_management_auth_roles != b->n_management_auth_roles)
        return 0;
    for (size_t i = 0; i < a->n_management_auth_tokens; i++)
        if (!str_same(a->management_auth_tokens[i].env, b->management_auth_tokens[i].env) ||
            !str_same(a->management_auth_tokens[i].role, b->management_auth_tokens[i].role))
            return 0;
    for (size_t i = 0; i < a->n_management_auth_roles; i++) {
        const vsr_management_role_conf_t *x = &a->management_auth_roles[i], *y = &b->management_auth_roles[i];
        if (!str_same(x->name, y->name) || x->permissions.n != y->permissions.n)
            return 0;
        for (size_t j = 0; j < x->permissions.n; j++)
            if (!str_same(x->permissions.items[j], y->permissions.items[j]))
                return 0;
    }
    return 1;
}
