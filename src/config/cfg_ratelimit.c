/*
 * cfg_ratelimit.c — global.services.ratelimit.providers (ref:
 * RateLimitConfig): {type, address, domain, rules[{name, match{user, group,
 * model}, requests_per_unit, tokens_per_unit, unit}]}.  The rules of every
 * local-limiter provider become the config's ratelimit_rules; one
 * envoy-ratelimit provider (address host:port, domain) names Envoy's rate
 * limit service.
 */
#include <stdlib.h>

#include "config/cfg_internal.h"

enum { RL_LOCAL = 0, RL_ENVOY = 1 };
static const char *const rl_types[] = {"local-limiter", "envoy-ratelimit", NULL};
static const char *const rl_units[] = {"second", "minute", "hour", "day", NULL};
static const uint32_t rl_unit_s[] = {1, 60, 3600, 86400};

typedef struct {
    char *user, *group, *model;
} rl_match_t;

typedef struct {
    char *name;
    rl_match_t match;
    uint64_t requests, tokens;
    int unit, has_unit;
} rl_rule_t;

typedef struct {
    char *address;
    uint64_t timeout_ms;
} rl_redis_t;

typedef struct {
    int type;
    char *address, *domain;
    rl_rule_t *rules;
    size_t n_rules;
    rl_redis_t redis;
    int has_redis;
    uint64_t timeout_ms;
} rl_provider_t;

static const cfg_field_t redis_fields[] = {
    {.key = "address", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(rl_redis_t, address)},
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = offsetof(rl_redis_t, timeout_ms)},
};

static const cfg_spec_t redis_spec = {
    .size = sizeof(rl_redis_t),
    .fields = redis_fields,
    .n_fields = VSR_ARRAY_LEN(redis_fields),
};

static const cfg_field_t match_fields[] = {
    {.key = "user", .decode = vsr__cfg_string, .offset = offsetof(rl_match_t, user)},
    {.key = "group", .decode = vsr__cfg_string, .offset = offsetof(rl_match_t, group)},
    {.key = "model", .decode = vsr__cfg_string, .offset = offsetof(rl_match_t, model)},
};

static const cfg_spec_t match_spec = {
    .size = sizeof(rl_match_t),
    .fields = match_fields,
    .n_fields = VSR_ARRAY_LEN(match_fields),
};

static void rule_finish(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                        size_t index)
{
    VSR_UNUSED(seen);
    VSR_UNUSED(index);
    const rl_rule_t *r = obj;
    if (r->requests == 0 && r->tokens == 0)
        vsr__cfg_node_error(d, map, "a rate limit rule needs requests_per_unit or tokens_per_unit");
    if (!r->has_unit)
        vsr__cfg_node_error(d, map, "a rate limit rule needs a unit (second, minute, hour or day)");
}

static const cfg_field_t rule_fields[] = {
    {.key = "name", .decode = vsr__cfg_string, .flags = CFG_REQUIRED, .offset = offsetof(rl_rule_t, name)},
    {.key = "match", .decode = vsr__cfg_object, .flags = CFG_NULL_OK, .offset = offsetof(rl_rule_t, match),
     .spec = &match_spec},
    {.key = "requests_per_unit", .decode = vsr__cfg_uint, .offset = offsetof(rl_rule_t, requests),
     .size = sizeof(uint64_t), .min = 1, .max = INT64_MAX},
    {.key = "tokens_per_unit", .decode = vsr__cfg_uint, .offset = offsetof(rl_rule_t, tokens),
     .size = sizeof(uint64_t), .min = 1, .max = INT64_MAX},
    {.key = "unit", .decode = vsr__cfg_choice, .flags = CFG_HAS, .offset = offsetof(rl_rule_t, unit),
     .has_offset = offsetof(rl_rule_t, has_unit), .choices = rl_units},
};

static const cfg_spec_t rule_spec = {
    .size = sizeof(rl_rule_t),
    .fields = rule_fields,
    .n_fields = VSR_ARRAY_LEN(rule_fields),
    .finish = rule_finish,
};

static const cfg_field_t provider_fields[] = {
    {.key = "type", .decode = vsr__cfg_choice, .flags = CFG_REQUIRED, .offset = offsetof(rl_provider_t, type),
     .choices = rl_types},
    {.key = "address", .decode = vsr__cfg_string, .offset = offsetof(rl_provider_t, address)},
    {.key = "domain", .decode = vsr__cfg_string, .offset = offsetof(rl_provider_t, domain)},
    /* vsr extension: an envoy-ratelimit check's bound */
    {.key = "timeout", .decode = vsr__cfg_duration_ms, .offset = offsetof(rl_provider_t, timeout_ms)},
    {.key = "rules", .decode = vsr__cfg_list, .flags = CFG_NULL_OK, .offset = offsetof(rl_provider_t, rules),
     .count_offset = offsetof(rl_provider_t, n_rules), .spec = &rule_spec},
    /* vsr extension: the buckets live in Redis, shared by every replica */
    {.key = "redis", .decode = vsr__cfg_object, .flags = CFG_NULL_OK | CFG_HAS, .offset = offsetof(rl_provider_t, redis),
     .has_offset = offsetof(rl_provider_t, has_redis), .spec = &redis_spec},
};

static const cfg_spec_t provider_spec = {
    .size = sizeof(rl_provider_t),
    .fields = provider_fields,
    .n_fields = VSR_ARRAY_LEN(provider_fields),
};

int vsr__cfg_ratelimit_providers(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    VSR_UNUSED(f);
    vsr_config_t *c = &((config_box_t *)obj)->conf;
    if (val->kind != CFG_NODE_SEQ) {
        vsr__cfg_node_error(d, val, "expected a list of rate limit providers, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    int rc = 0;
    size_t saved = vsr__cfg_path_push(d, "[]");
    for (size_t i = 0; i < val->n; i++) {
        rl_provider_t p = {0};
        if (vsr__cfg_decode_object(d, &provider_spec, val->items[i], &p, i) != 0) {
            rc = -1;
            continue;
        }
        if (p.type == RL_ENVOY) {
            const char *colon = p.address ? strrchr(p.address, ':') : NULL;
            long port = colon ? strtol(colon + 1, NULL, 10) : 0;
            if (colon == NULL || colon == p.address || port < 1 || port > 65535 || p.domain == NULL) {
                vsr__cfg_node_error(d, val->items[i], "an envoy-ratelimit provider needs address (host:port) and domain");
                rc = -1;
                continue;
            }
            if (c->ratelimit_envoy_host) {
                vsr__cfg_node_error(d, val->items[i], "only one envoy-ratelimit provider is supported");
                rc = -1;
                continue;
            }
            c->ratelimit_envoy_host = vsr__cfg_strdup(d, p.address);
            c->ratelimit_envoy_host[colon - p.address] = '\0';
            c->ratelimit_envoy_port = (uint16_t)port;
            c->ratelimit_envoy_domain = p.domain;
            c->ratelimit_envoy_timeout_ms = p.timeout_ms ? p.timeout_ms : 100;
            continue;
        }
        if (p.n_rules == 0) {
            vsr__cfg_node_error(d, val->items[i], "a local-limiter provider needs rules");
            rc = -1;
            continue;
        }
        if (p.has_redis) {
            const char *colon = strrchr(p.redis.address, ':');
            if (colon == NULL || colon == p.redis.address || colon[1] == '\0') {
                vsr__cfg_node_error(d, val->items[i], "redis.address must be host:port, got %s", p.redis.address);
                rc = -1;
                continue;
            }
            char *host = vsr__cfg_strdup(d, p.redis.address);
            host[colon - p.redis.address] = '\0';
            if (c->ratelimit_redis_host &&
                (strcmp(c->ratelimit_redis_host, host) != 0 || strcmp(c->ratelimit_redis_port, colon + 1) != 0)) {
                vsr__cfg_node_error(d, val->items[i], "every local-limiter provider with redis must name the same address");
                rc = -1;
                continue;
            }
            c->ratelimit_redis_host = host;
            c->ratelimit_redis_port = vsr__cfg_strdup(d, colon + 1);
            c->ratelimit_redis_timeout_ms = p.redis.timeout_ms ? p.redis.timeout_ms : 50;
        }
        vsr_ratelimit_rule_conf_t *all =
            vsr_pool_alloc(d->pool, (c->n_ratelimit_rules + p.n_rules) * sizeof(vsr_ratelimit_rule_conf_t));
        if (c->n_ratelimit_rules)
            memcpy(all, c->ratelimit_rules, c->n_ratelimit_rules * sizeof(*all));
        for (size_t j = 0; j < p.n_rules; j++) {
            const rl_rule_t *r = &p.rules[j];
            for (size_t k = 0; k < c->n_ratelimit_rules; k++)
                if (strcmp(all[k].name, r->name) == 0) {
                    vsr__cfg_node_error(d, val->items[i], "rate limit rule name %s is used twice", r->name);
                    rc = -1;
                }
            all[c->n_ratelimit_rules++] = (vsr_ratelimit_rule_conf_t){
                .name = r->name,
                .match_user = r->match.user,
                .match_group = r->match.group,
                .match_model = r->match.model,
                .requests_per_unit = r->requests,
                .tokens_per_unit = r->tokens,
                .unit_s = rl_unit_s[r->unit],
                .shared = p.has_redis,
            };
        }
        c->ratelimit_rules = all;
    }
    vsr__cfg_path_pop(d, saved);
    return rc;
}
