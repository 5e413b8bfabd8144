/*
 * admin_auth.c — management_api.auth mode bearer: tokens bound to roles,
 * roles granting permissions, each management route needing one (the
 * reference's apiserver/auth.go and route_policy.go).
 *
 * GET /health needs nothing (health.read is public in the reference); every
 * other route needs "authorization: Bearer TOKEN" with a token whose role
 * grants the route's permission ("*" grants all): else 401 (no or an unknown
 * token, or no token configured at all) or 403 (the role lacks it).  The
 * tokens are read once, at start; a change of the auth block needs a restart
 * (cfg_snapshot.c), so a document sent through the API cannot widen the
 * access of whoever sends it.
 */
#include "admin/admin-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AUTH_MAX_TOKEN 4096

typedef struct {
    char *token; /* the value, from the environment */
    int role;    /* index in roles */
} principal_t;

typedef struct {
    char *name;
    char **perms;
    size_t n_perms;
} role_t;

struct admin_auth_s {
    principal_t *principals;
    size_t n_principals;
    role_t *roles;
    size_t n_roles;
    int admin_role; /* the role of vsr_admin_set_token's token: "admin" when defined, else -1 */
};

void vsr__admin_auth_free(admin_auth_t *auth)
{
    if (auth == NULL)
        return;
    for (size_t i = 0; i < auth->n_principals; i++) {
        memset(auth->principals[i].token, 0, strlen(auth->principals[i].token));
        vsr_free(auth->principals[i].token);
    }
    for (size_t i = 0; i < auth->n_roles; i++) {
        for (size_t j = 0; j < auth->roles[i].n_perms; j++)
            vsr_free(auth->roles[i].perms[j]);
        vsr_free(auth->roles[i].perms);
        vsr_free(auth->roles[i].name);
    }
    vsr_free(auth->principals);
    vsr_free(auth->roles);
    vsr_free(auth);
}

static int role_index(const admin_auth_t *auth, const char *name)
{
    for (size_t i = 0; i < auth->n_roles; i++)
        if (strcmp(auth->roles[i].name, name) == 0)
            return (int)i;
    return -1;
}

int vsr_admin_set_auth(vsr_admin_t *a, const vsr_config_t *cfg, vsr_buf_t *err)
{
    VSR_BUG_ON(a->auth != NULL);
    if (!cfg->management_auth_bearer)
        return VSR_OK;
    admin_auth_t *auth = vsr_calloc(1, sizeof(*auth));
    auth->roles = vsr_calloc(cfg->n_management_auth_roles ? cfg->n_management_auth_roles : 1, sizeof(role_t));
    for (size_t i = 0; i < cfg->n_management_auth_roles; i++) {
        const vsr_management_role_conf_t *rc = &cfg->management_auth_roles[i];
        role_t *r = &auth->roles[auth->n_roles++];
        r->name = vsr_strdup(rc->name);
        r->perms = vsr_calloc(rc->permissions.n ? rc->permissions.n : 1, sizeof(char *));
        for (size_t j = 0; j < rc->permissions.n; j++)
            r->perms[r->n_perms++] = vsr_strdup(rc->permissions.items[j]);
    }
    auth->admin_role = role_index(auth, "admin");
    size_t n = cfg->n_management_auth_tokens;
    auth->principals = vsr_calloc(n ? n : 1, sizeof(principal_t));
    for (size_t i = 0; i < n; i++) {
        const vsr_management_token_conf_t *t = &cfg->management_auth_tokens[i];
        const char *v = getenv(t->env);
        size_t len = v ? strlen(v) : 0;
        while (len > 0 && (v[len - 1] == '\n' || v[len - 1] == '\r' || v[len - 1] == ' ' || v[len - 1] == '\t'))
            len--;
        int ok = len >= 16 && len <= AUTH_MAX_TOKEN;
        for (size_t k = 0; ok && k < len; k++)
            ok = v[k] > 0x20 && v[k] < 0x7f;
        if (!ok) {
            /* the reference skips such an entry silently, leaving a role without its token */
            vsr_buf_printf(err, "global.services.management_api.auth.tokens[%zu]: environment variable %s %s\n", i,
                           t->env, v == NULL ? "is not set" : len == 0 ? "is empty"
                                                 : "must hold 16 to 4096 visible ASCII characters (no spaces)");
            vsr__admin_auth_free(auth);
            return VSR_ERR_INVALID;
        }
        principal_t *p = &auth->principals[auth->n_principals++];
        p->token = vsr_malloc(len + 1);
        memcpy(p->token, v, len);
        p->token[len] = '\0';
        p->role = role_index(auth, t->role);
        VSR_BUG_ON(p->role < 0); /* the configuration checked it */
    }
    a->auth = auth;
    return VSR_OK;
}

int vsr_admin_has_auth_tokens(const vsr_admin_t *a)
{
    return a->auth != NULL && a->auth->n_principals > 0;
}

/* The permission a management route needs (vsr's routes with the
 * reference's permission names); NULL: any authenticated principal. */
static const char *route_permission(vsr_slice_t method, vsr_slice_t target)
{
    vsr_slice_t path = vsr_slice_split(target, '?', NULL);
    while (path.len > 1 && path.p[path.len - 1] == '/')
        path.len--;
    int read = vsr_slice_eq_cstr(method, "GET") || vsr_slice_eq_cstr(method, "HEAD");
    if (vsr_slice_eq_cstr(path, "/health"))
        return "health.read";
    if (vsr_slice_eq_cstr(path, "/ready"))
        return "ready.read";
    if (vsr_slice_eq_cstr(path, "/api/v1/routing/preview"))
        return "classify.invoke";
    if (vsr_slice_eq_cstr(path, "/api/v1/config/validate") || vsr_slice_eq_cstr(path, "/api/v1/config/hash") ||
        vsr_slice_eq_cstr(path, "/api/v1/config/versions"))
        return "config.read";
    if (vsr_slice_eq_cstr(path, "/api/v1/config/rollback"))
        return "config.write";
    return read ? "config.read" : "config.write";
}

static int role_grants(const role_t *r, const char *perm)
{
    for (size_t i = 0; i < r->n_perms; i++)
        if (strcmp(r->perms[i], "*") == 0 || strcmp(r->perms[i], perm) == 0)
            return 1;
    return 0;
}

int vsr__admin_authorize(const vsr_admin_t *a, const vsr_admin_access_t *req, vsr_admin_response_t *r)
{
    const admin_auth_t *auth = a->auth;
    const char *perm = route_permission(req->method, req->target);
    if (strcmp(perm, "health.read") == 0 && (vsr_slice_eq_cstr(req->method, "GET") || vsr_slice_eq_cstr(req->method, "HEAD")))
        return 1;
    if (auth->n_principals == 0 && a->token == NULL) {
        vsr__admin_refuse(r, 401, "authentication_error", "management_auth_not_configured",
                          "management_api.auth.mode is bearer but no token is configured");
        return 0;
    }
    vsr_slice_t got = vsr__admin_bearer(req->authorization);
    int role = -2; /* -2: no match */
    /* every token is compared, in constant time, whichever matches */
    if (a->token && vsr_secret_eq(got, vsr_slice_cstr(a->token)) && got.p && a->token[0])
        role = auth->admin_role;
    for (size_t i = 0; i < auth->n_principals; i++)
        if (vsr_secret_eq(got, vsr_slice_cstr(auth->principals[i].token)) && got.p && role == -2)
            role = auth->principals[i].role;
    if (role == -2) {
        vsr__admin_refuse(r, 401, "authentication_error", "invalid_management_token",
                          "the management API needs authorization: Bearer <management token>");
        vsr_buf_append_cstr(&r->headers, "www-authenticate: Bearer realm=\"vsr-management\"\r\n");
        return 0;
    }
    if (role < 0 || !role_grants(&auth->roles[role], perm)) {
        char msg[256];
        snprintf(msg, sizeof(msg), "the token's role %s lacks the permission %s",
                 role < 0 ? "(none)" : auth->roles[role].name, perm);
        vsr__admin_refuse(r, 403, "permission_error", "forbidden", msg);
        return 0;
    }
    return 1;
}
