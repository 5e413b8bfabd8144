/*
 * ratelimit.c — global.services.ratelimit's local limiter (docs/tenancy.md).
 *
 * One table for the whole process (every worker), under one mutex: a bucket
 * per rule and subject (the user, group and model the rule's match names),
 * counting requests and tokens in a fixed window aligned to the rule's unit
 * (second, minute, hour, day).  A request is admitted when every rule that
 * matches it has room; it then counts one request in each of their buckets.
 * Tokens (prompt + completion) are charged when the answer is over, so a
 * token limit refuses the requests that start after it is spent.
 *
 * Bounded: RL_SLOTS buckets, probed at most RL_PROBE deep; a bucket of a
 * window that has passed is reused.  A request whose bucket finds no room
 * in the table is a check that could not be made: fail_open decides.
 */
#include "gateway/gateway-int.h"

#include <stdio.h>

#define RL_SLOTS 16384
#define RL_PROBE 64
#define RL_KEY 192

typedef struct {
    uint64_t hash;  /* 0 = free */
    uint64_t window;
    uint32_t unit_s;
    uint64_t requests, tokens;
    char key[RL_KEY];
} rl_bucket_t;

struct vsr__ratelimit_s {
    pthread_mutex_t mu;
    rl_bucket_t *slots;
};

vsr__ratelimit_t *vsr__ratelimit_new(void)
{
    vsr__ratelimit_t *rl = vsr_calloc(1, sizeof(*rl));
    pthread_mutex_init(&rl->mu, NULL);
    rl->slots = vsr_calloc(RL_SLOTS, sizeof(rl_bucket_t));
    return rl;
}

void vsr__ratelimit_free(vsr__ratelimit_t *rl)
{
    if (rl == NULL)
        return;
    pthread_mutex_destroy(&rl->mu);
    vsr_free(rl->slots);
    vsr_free(rl);
}

static int has_group(vsr_slice_t groups, const char *g)
{
    vsr_slice_t rest = groups;
    while (rest.p) {
        vsr_slice_t one = vsr_slice_trim(vsr_slice_split(rest, ',', &rest));
        if (one.len && vsr_slice_eq_cstr(one, g))
            return 1;
    }
    return 0;
}

static uint64_t fnv(uint64_t h, vsr_slice_t v)
{
    for (size_t i = 0; i < v.len; i++)
        h = (h ^ (unsigned char)v.p[i]) * 1099511628211ull;
    return (h ^ 0x1f) * 1099511628211ull;
}

/* The bucket key of rule r for this request and its hash (over the whole
 * values: the key keeps at most 48 bytes of each), or 0 when r does not
 * match the request. */
static int subject(const vsr_ratelimit_rule_conf_t *r, const vsr__rl_subject_t *s, char *key, size_t cap,
                   uint64_t *hash)
{
    vsr_slice_t user = VSR_SLICE_NULL, group = VSR_SLICE_NULL, model = VSR_SLICE_NULL;
    if (r->match_user) {
        if (s->user.len == 0 || (strcmp(r->match_user, "*") != 0 && !vsr_slice_eq_cstr(s->user, r->match_user)))
            return 0;
        user = s->user;
    }
    if (r->match_group) {
        if (strcmp(r->match_group, "*") == 0) {
            group = vsr_slice_trim(vsr_slice_split(s->groups, ',', NULL)); /* the first group's bucket */
            if (group.len == 0)
                return 0;
        } else if (!has_group(s->groups, r->match_group)) {
            return 0;
        } else {
            group = vsr_slice_cstr(r->match_group);
        }
    }
    if (r->match_model) {
        if (s->model.len == 0 || (strcmp(r->match_model, "*") != 0 && !vsr_slice_eq_cstr(s->model, r->match_model)))
            return 0;
        model = s->model;
    }
    snprintf(key, cap, "%s\x1f%.*s\x1f%.*s\x1f%.*s", r->name, (int)VSR_MIN(user.len, 48), user.p ? user.p : "",
             (int)VSR_MIN(group.len, 48), group.p ? group.p : "", (int)VSR_MIN(model.len, 48),
             model.p ? model.p : "");
    uint64_t h = fnv(fnv(fnv(fnv(1469598103934665603ull, vsr_slice_cstr(r->name)), user), group), model);
    *hash = h ? h : 1;
    return 1;
}

/* The bucket of key in its current window (reset when its window passed); NULL when the table has no room. */
static rl_bucket_t *bucket(vsr__ratelimit_t *rl, const char *key, uint64_t h, uint32_t unit_s, uint64_t now_s)
{
    uint64_t window = now_s / unit_s;
    rl_bucket_t *reuse = NULL;
    for (size_t i = 0; i < RL_PROBE; i++) {
        rl_bucket_t *b = &rl->slots[(h + i) % RL_SLOTS];
        if (b->hash == h && b->unit_s == unit_s && strcmp(b->key, key) == 0) {
            if (b->window != window) {
                b->window = window;
                b->requests = b->tokens = 0;
            }
            return b;
        }
        if (reuse == NULL && (b->hash == 0 || (b->window + 1) * b->unit_s <= now_s))
            reuse = b; /* free, or its window is over */
    }
    if (reuse == NULL)
        return NULL;
    reuse->hash = h;
    reuse->unit_s = unit_s;
    reuse->window = window;
    reuse->requests = reuse->tokens = 0;
    snprintf(reuse->key, sizeof(reuse->key), "%s", key);
    return reuse;
}

int vsr__ratelimit_admit(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const vsr__rl_subject_t *s, uint64_t now_s,
                         vsr__rl_verdict_t *v)
{
    memset(v, 0, sizeof(*v));
    if (cfg->n_ratelimit_rules == 0)
        return VSR__RL_ADMIT;
    size_t n = cfg->n_ratelimit_rules;
    rl_bucket_t **hit = vsr_calloc(n, sizeof(*hit));
    int verdict = VSR__RL_ADMIT;
    pthread_mutex_lock(&rl->mu);
    for (size_t i = 0; i < n && verdict == VSR__RL_ADMIT; i++) {
        const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[i];
        char key[RL_KEY];
        uint64_t h;
        if (!subject(r, s, key, sizeof(key), &h))
            continue;
        rl_bucket_t *b = bucket(rl, key, h, r->unit_s, now_s);
        if (b == NULL) {
            v->rule = r->name;
            verdict = VSR__RL_ERROR;
            break;
        }
        hit[i] = b;
        uint64_t reset = (b->window + 1) * r->unit_s - now_s;
        int over = (r->requests_per_unit && b->requests >= r->requests_per_unit) ||
                   (r->tokens_per_unit && b->tokens >= r->tokens_per_unit);
        /* the headers report the tightest rule: the one refusing, else the least room left */
        uint64_t left = r->requests_per_unit ? r->requests_per_unit - VSR_MIN(b->requests, r->requests_per_unit)
                                             : UINT64_MAX;
        if (over || v->rule == NULL || left < v->remaining_requests) {
            v->rule = r->name;
            v->limit_requests = r->requests_per_unit;
            v->remaining_requests = left;
            v->limit_tokens = r->tokens_per_unit;
            v->remaining_tokens = r->tokens_per_unit ? r->tokens_per_unit - VSR_MIN(b->tokens, r->tokens_per_unit) : 0;
            v->reset_s = reset;
        }
        if (over)
            verdict = VSR__RL_LIMITED;
    }
    if (verdict == VSR__RL_ADMIT)
        for (size_t i = 0; i < n; i++)
            if (hit[i]) {
                hit[i]->requests++;
                if (v->rule && v->remaining_requests && v->remaining_requests != UINT64_MAX &&
                    strcmp(v->rule, cfg->ratelimit_rules[i].name) == 0)
                    v->remaining_requests--;
            }
    pthread_mutex_unlock(&rl->mu);
    vsr_free(hit);
    return verdict;
}

void vsr__ratelimit_charge(vsr__ratelimit_t *rl, const vsr_config_t *cfg, const vsr__rl_subject_t *s, uint64_t now_s,
                           uint64_t tokens)
{
    if (tokens == 0)
        return;
    pthread_mutex_lock(&rl->mu);
    for (size_t i = 0; i < cfg->n_ratelimit_rules; i++) {
        const vsr_ratelimit_rule_conf_t *r = &cfg->ratelimit_rules[i];
        char key[RL_KEY];
        uint64_t h;
        if (r->tokens_per_unit == 0 || !subject(r, s, key, sizeof(key), &h))
            continue;
        rl_bucket_t *b = bucket(rl, key, h, r->unit_s, now_s);
        if (b)
            b->tokens += tokens;
    }
    pthread_mutex_unlock(&rl->mu);
}
