/* authz.c — role_bindings signals (condition type authz): a condition
 * names a binding or, as in the reference, a role (every binding granting
 * it).  Match when the request's identity (from trusted headers) is one of
 * the subjects: a User
 * subject whose name equals the user id, or a Group subject whose name is
 * one of the user's groups (exact, case-sensitive comparisons).  No identity
 * matches nothing; refusing such requests (403, or not with fail_open) is
 * the engine's business.  Confidence 1.0 on a match. */
#include <strings.h>

#include "signals/signals-int.h"

typedef struct {
    char **users;
    size_t n_users;
    char **groups;
    size_t n_groups;
} authz_t;

void vsr__authz_free(void *state)
{
    authz_t *a = state;
    if (!a)
        return;
    for (size_t i = 0; i < a->n_users; i++)
        vsr_free(a->users[i]);
    for (size_t i = 0; i < a->n_groups; i++)
        vsr_free(a->groups[i]);
    vsr_free(a->users);
    vsr_free(a->groups);
    vsr_free(a);
}

int vsr__authz_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_authz_conf_t *ac = conf;
    VSR_UNUSED(s);
    authz_t *a = vsr_calloc(1, sizeof(*a));
    size_t n = ac->n_subjects ? ac->n_subjects : 1;
    a->users = vsr_calloc(n, sizeof(char *));
    a->groups = vsr_calloc(n, sizeof(char *));
    for (size_t i = 0; i < ac->n_subjects; i++) {
        const vsr_subject_conf_t *sub = &ac->subjects[i];
        if (!sub->name || !*sub->name) {
            vsr_buf_printf(err, "%s.subjects[%zu].name: signal \"%s\": a subject needs a name\n", path, i, ac->name);
            vsr__authz_free(a);
            return VSR_ERR_INVALID;
        }
        if (sub->kind && strcasecmp(sub->kind, "User") == 0) {
            a->users[a->n_users++] = vsr_strdup(sub->name);
        } else if (sub->kind && strcasecmp(sub->kind, "Group") == 0) {
            a->groups[a->n_groups++] = vsr_strdup(sub->name);
        } else {
            vsr_buf_printf(err, "%s.subjects[%zu].kind: signal \"%s\": expected User or Group\n", path, i, ac->name);
            vsr__authz_free(a);
            return VSR_ERR_INVALID;
        }
    }
    *state = a;
    return VSR_OK;
}

vsr_signal_result_t vsr__authz_eval(vsr__ctx_t *c, const void *state)
{
    const authz_t *a = state;
    const vsr_signal_input_t *in = c->in;
    vsr_signal_result_t r = {0};
    if (!in->identity_present)
        return r;
    for (size_t i = 0; i < a->n_users && !r.matched; i++)
        r.matched = in->user_id.len > 0 && vsr_slice_eq_cstr(in->user_id, a->users[i]);
    for (size_t g = 0; g < in->n_groups && !r.matched; g++) {
        for (size_t i = 0; i < a->n_groups && !r.matched; i++)
            r.matched = in->groups[g].len > 0 && vsr_slice_eq_cstr(in->groups[g], a->groups[i]);
    }
    r.confidence = r.value = r.matched ? 1.0 : 0.0;
    return r;
}

void *vsr__authz_role_compile(const vsr_sig_authz_conf_t *bindings, size_t n, const char *role)
{
    authz_t *a = vsr_calloc(1, sizeof(*a));
    size_t total = 0;
    for (size_t b = 0; b < n; b++)
        if (bindings[b].role && strcmp(bindings[b].role, role) == 0)
            total += bindings[b].n_subjects;
    a->users = vsr_calloc(total ? total : 1, sizeof(char *));
    a->groups = vsr_calloc(total ? total : 1, sizeof(char *));
    for (size_t b = 0; b < n; b++) {
        if (!bindings[b].role || strcmp(bindings[b].role, role) != 0)
            continue;
        for (size_t i = 0; i < bindings[b].n_subjects; i++) {
            const vsr_subject_conf_t *sub = &bindings[b].subjects[i];
            if (!sub->name || !*sub->name || !sub->kind)
                continue; /* the binding's own compile reports it */
            if (strcasecmp(sub->kind, "User") == 0)
                a->users[a->n_users++] = vsr_strdup(sub->name);
            else if (strcasecmp(sub->kind, "Group") == 0)
                a->groups[a->n_groups++] = vsr_strdup(sub->name);
        }
    }
    return a;
}
