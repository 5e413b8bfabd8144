/*
 * cfg_policy.c — the upstream policies of v0.3: per-model and per-decision
 * `reliability` (ref §1.5, §1.6) and the cross-model `fallback` policy (ref
 * §1.7), with the merge of fallback layers.
 *
 * Values are decoded as written, with has_ flags: the layers are merged by
 * their consumers (and, for fallback, by vsr_config_effective_fallback), so
 * "absent" must stay distinguishable from "zero".
 */
#include <stddef.h>
#include <stdio.h>

#include "config/cfg_internal.h"

#define DEFAULT_BACK_OFF_BASE_MS 25
#define MAX_RETRY_COUNT 5
#define MAX_FALLBACK_ATTEMPTS 100

/* ---- retry_on ------------------------------------------------------------------ */

/* ref §5.3 */
static const struct {
    const char *name;
    uint32_t bit;
} retry_tokens[] = {
    {"5xx", VSR_RETRY_5XX},
    {"gateway-error", VSR_RETRY_GATEWAY_ERROR},
    {"reset", VSR_RETRY_RESET},
    {"reset-before-request", VSR_RETRY_RESET_BEFORE_REQUEST},
    {"connect-failure", VSR_RETRY_CONNECT_FAILURE},
    {"refused-stream", VSR_RETRY_REFUSED_STREAM},
    {"retriable-4xx", VSR_RETRY_RETRIABLE_4XX},
    {"retriable-status-codes", VSR_RETRY_RETRIABLE_STATUS_CODES},
    {"envoy-ratelimited", VSR_RETRY_ENVOY_RATELIMITED},
};

/* Stored normalised (the tokens without blanks, joined by ',') and compiled
 * (retry_on_mask): requests read the mask, never the string. */
static int decode_retry_on(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr_slice_t rest = vsr_slice(s, val->len);
    uint32_t mask = 0;
    int rc = 0;
    while (rest.p != NULL) {
        vsr_slice_t tok = vsr_slice_trim(vsr_slice_split(rest, ',', &rest));
        if (tok.len == 0) {
            vsr__cfg_node_error(d, val, "retry_on has an empty token (write tokens separated by commas)");
            rc = -1;
            break;
        }
        uint32_t bit = 0;
        for (size_t i = 0; i < VSR_ARRAY_LEN(retry_tokens); i++)
            if (vsr_slice_eq_cstr(tok, retry_tokens[i].name))
                bit = retry_tokens[i].bit;
        if (bit == 0) {
            vsr__cfg_node_error(d, val,
                                "unknown retry_on token %s (expected 5xx, gateway-error, reset, reset-before-request, "
                                "connect-failure, refused-stream, retriable-4xx, retriable-status-codes or "
                                "envoy-ratelimited)",
                                vsr__cfg_quote(d->pool, tok.p, tok.len));
            rc = -1;
            continue;
        }
        mask |= bit;
        vsr_buf_printf(&out, "%s" VSR_SLICE_FMT, out.len ? "," : "", VSR_SLICE_ARG(tok));
    }
    if (rc == 0) {
        vsr_reliability_conf_t *r = obj;
        *(char **)((char *)obj + f->offset) = vsr_pool_strndup(d->pool, out.data ? out.data : "", out.len);
        r->retry_on_mask = mask;
    }
    vsr_buf_free(&out);
    return rc;
}

static int decode_health_check_path(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    const char *s = vsr__cfg_get_string(d, f, val);
    if (s == NULL)
        return -1;
    if (s[0] != '/') {
        vsr__cfg_node_error(d, val, "health_check_path must start with '/', got %s",
                            vsr__cfg_quote(d->pool, s, val->len));
        return -1;
    }
    for (size_t i = 0; i < val->len; i++) {
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
            vsr__cfg_node_error(d, val, "health_check_path must be printable ASCII without spaces");
            return -1;
        }
    }
    *(char **)((char *)obj + f->offset) = vsr__cfg_strdup(d, s);
    return 0;
}

/* ---- reliability ------------------------------------------------------------------ */

static const char *const lb_policies[] = {"round_robin", "least_request", NULL};

#define R_OFF(m) offsetof(vsr_reliability_conf_t, m)
#define R_DURATION(k, m, has, fl) \
    {.key = (k), .decode = vsr__cfg_duration_ms, .flags = CFG_HAS | (fl), .offset = R_OFF(m), .has_offset = R_OFF(has)}
#define R_UINT32(k, m, has, lo, hi)                                                                                    \
    {.key = (k), .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = R_OFF(m), .size = sizeof(uint32_t), .min = (lo), \
     .max = (hi), .has_offset = R_OFF(has)}

/* The fields both levels have (ref §1.6). */
#define RELIABILITY_COMMON_FIELDS                                                                                       \
    R_UINT32("retry_count", retry_count, has_retry_count, 0, MAX_RETRY_COUNT),                                       \
        {.key = "retry_on", .decode = decode_retry_on, .offset = R_OFF(retry_on)},                                    \
        {.key = "retriable_status_codes", .decode = vsr__cfg_status_codes, .flags = CFG_NULL_OK,                      \
         .offset = R_OFF(retriable_status_codes), .count_offset = R_OFF(n_retriable_status_codes)},                  \
        R_DURATION("per_try_timeout", per_try_timeout_ms, has_per_try_timeout, 0),                                    \
        R_DURATION("total_timeout", total_timeout_ms, has_total_timeout, CFG_ZERO_OK),                                \
        R_DURATION("idle_timeout", idle_timeout_ms, has_idle_timeout, CFG_ZERO_OK),                                   \
        R_DURATION("first_byte_timeout", first_byte_timeout_ms, has_first_byte_timeout, 0),                           \
        R_DURATION("retry_back_off_base", retry_back_off_base_ms, has_retry_back_off_base, 0),                        \
        R_DURATION("retry_back_off_max", retry_back_off_max_ms, has_retry_back_off_max, 0),                           \
        R_DURATION("retry_after_max", retry_after_max_ms, has_retry_after_max, 0)

static const cfg_field_t model_reliability_fields[] = {
    {.key = "lb_policy", .decode = vsr__cfg_string, .offset = R_OFF(lb_policy), .choices = lb_policies},
    RELIABILITY_COMMON_FIELDS,
    R_DURATION("connect_timeout", connect_timeout_ms, has_connect_timeout, 0),
    R_UINT32("retry_budget_percent", retry_budget_percent, has_retry_budget_percent, 0, 100),
    R_UINT32("retry_budget_min_concurrency", retry_budget_min_concurrency, has_retry_budget_min_concurrency, 0,
             UINT32_MAX),
    R_UINT32("consecutive_5xx", consecutive_5xx, has_consecutive_5xx, 0, UINT32_MAX),
    R_DURATION("base_ejection_time", base_ejection_time_ms, has_base_ejection_time, 0),
    R_UINT32("max_ejection_percent", max_ejection_percent, has_max_ejection_percent, 0, 100),
    R_DURATION("ttft_ejection_threshold", ttft_ejection_threshold_ms, has_ttft_ejection_threshold, 0),
    R_UINT32("ttft_ejection_percentile", ttft_ejection_percentile, has_ttft_ejection_percentile, 1, 100),
    R_DURATION("ttft_ejection_window", ttft_ejection_window_ms, has_ttft_ejection_window, 0),
    R_UINT32("ttft_ejection_min_samples", ttft_ejection_min_samples, has_ttft_ejection_min_samples, 1, 1000000),
    {.key = "health_check_path", .decode = decode_health_check_path, .offset = R_OFF(health_check_path)},
    R_DURATION("health_check_interval", health_check_interval_ms, has_health_check_interval, 0),
    R_DURATION("health_check_timeout", health_check_timeout_ms, has_health_check_timeout, 0),
    R_UINT32("max_connections", max_connections, has_max_connections, 1, VSR_MAX_CIRCUIT_LIMIT),
    R_UINT32("max_pending_requests", max_pending_requests, has_max_pending_requests, 1, VSR_MAX_CIRCUIT_LIMIT),
    R_UINT32("max_requests", max_requests, has_max_requests, 1, VSR_MAX_CIRCUIT_LIMIT),
};

static const cfg_field_t decision_reliability_fields[] = {
    RELIABILITY_COMMON_FIELDS,
};

static void finish_reliability(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                               size_t index)
{
    vsr_reliability_conf_t *r = obj;
    /* what requests read: retry_on_mask is set by decode_retry_on */
    r->least_request = r->lb_policy != NULL && strcmp(r->lb_policy, "least_request") == 0;
    r->compiled = 1;
    /* both tables put retry_back_off_max at the same index */
    const cfg_node_t *max_node = vsr__cfg_map_get(map, "retry_back_off_max");
    uint64_t base = r->has_retry_back_off_base ? r->retry_back_off_base_ms : DEFAULT_BACK_OFF_BASE_MS;
    if (r->has_retry_back_off_max && max_node != NULL && r->retry_back_off_max_ms < base)
        vsr__cfg_node_error(d, max_node, "retry_back_off_max (%llums) must not be less than retry_back_off_base (%llums)",
                            (unsigned long long)r->retry_back_off_max_ms, (unsigned long long)base);
}

const cfg_spec_t vsr__cfg_model_reliability_spec = {
    .size = sizeof(vsr_reliability_conf_t),
    .fields = model_reliability_fields,
    .n_fields = VSR_ARRAY_LEN(model_reliability_fields),
    .finish = finish_reliability,
};

const cfg_spec_t vsr__cfg_decision_reliability_spec = {
    .size = sizeof(vsr_reliability_conf_t),
    .fields = decision_reliability_fields,
    .n_fields = VSR_ARRAY_LEN(decision_reliability_fields),
    .finish = finish_reliability,
};

/* ---- fallback ---------------------------------------------------------------------- */

#define F_OFF(m) offsetof(vsr_fallback_conf_t, m)

static int decode_fallback_version(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    if (val->kind != CFG_NODE_SCALAR || val->type != CFG_INT) {
        vsr__cfg_node_error(d, val, "expected the integer 1, got %s", vsr__cfg_node_what(val));
        return -1;
    }
    if (!val->ival_ok || val->ival != 1) {
        vsr__cfg_node_error(d, val, "unsupported fallback version %s (only version 1 exists)", val->str);
        return -1;
    }
    *(uint32_t *)((char *)obj + f->offset) = 1;
    return 0;
}

static const cfg_field_t circuit_breaker_fields[] = {
    {.key = "consecutive_failures", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = F_OFF(cb_consecutive_failures),
     .size = sizeof(uint32_t), .min = 0, .max = UINT32_MAX, .has_offset = F_OFF(has_cb_consecutive_failures)},
    {.key = "cooldown_period", .decode = vsr__cfg_duration_ms, .flags = CFG_HAS | CFG_ZERO_OK,
     .offset = F_OFF(cb_cooldown_period_ms), .has_offset = F_OFF(has_cb_cooldown_period)},
    {.key = "half_open_probes", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = F_OFF(cb_half_open_probes),
     .size = sizeof(uint32_t), .min = 0, .max = UINT32_MAX, .has_offset = F_OFF(has_cb_half_open_probes)},
};

static const cfg_spec_t circuit_breaker_spec = {
    .size = sizeof(vsr_fallback_conf_t),
    .fields = circuit_breaker_fields,
    .n_fields = VSR_ARRAY_LEN(circuit_breaker_fields),
};

/* The breaker state is per backend and shared by every decision, so it has
 * one configuration (ref §1.7). */
static int decode_scoped_circuit_breaker(cfg_decoder_t *d, const cfg_field_t *f, const cfg_node_t *val, void *obj)
{
    vsr__cfg_node_error(d, val, "circuit_breaker is global: set it in global.router.fallback");
    return -1;
}

#define FALLBACK_FIELDS(cb_decode, cb_spec)                                                                            \
    {.key = "version", .decode = decode_fallback_version, .flags = CFG_HAS, .offset = F_OFF(version),                 \
     .has_offset = F_OFF(has_version)},                                                                                \
        {.key = "enabled", .decode = vsr__cfg_bool, .flags = CFG_HAS, .offset = F_OFF(enabled),                       \
         .has_offset = F_OFF(has_enabled)},                                                                            \
        {.key = "max_attempts", .decode = vsr__cfg_uint, .flags = CFG_HAS, .offset = F_OFF(max_attempts),             \
         .size = sizeof(uint32_t), .min = 0, .max = MAX_FALLBACK_ATTEMPTS, .has_offset = F_OFF(has_max_attempts)},    \
        {.key = "total_timeout", .decode = vsr__cfg_duration_ms, .flags = CFG_HAS | CFG_ZERO_OK,                      \
         .offset = F_OFF(total_timeout_ms), .has_offset = F_OFF(has_total_timeout)},                                   \
        {.key = "per_attempt_timeout", .decode = vsr__cfg_duration_ms, .flags = CFG_HAS,                              \
         .offset = F_OFF(per_attempt_timeout_ms), .has_offset = F_OFF(has_per_attempt_timeout)},                       \
        {.key = "retryable_status_codes", .decode = vsr__cfg_status_codes, .flags = CFG_HAS,                          \
         .offset = F_OFF(retryable_status_codes), .count_offset = F_OFF(n_retryable_status_codes),                     \
         .has_offset = F_OFF(has_retryable_status_codes)},                                                             \
    {                                                                                                                  \
        .key = "circuit_breaker", .decode = (cb_decode), .flags = CFG_NULL_OK, .spec = (cb_spec)                       \
    }

static const cfg_field_t fallback_fields[] = {
    FALLBACK_FIELDS(vsr__cfg_object, &circuit_breaker_spec),
};

static const cfg_field_t scoped_fallback_fields[] = {
    FALLBACK_FIELDS(decode_scoped_circuit_breaker, NULL),
};

static void init_fallback(cfg_decoder_t *d, void *obj)
{
    vsr_fallback_conf_t *fb = obj;
    fb->present = 1;
}

/* The cross-field rules (per_attempt <= total, max_attempts >= 1 when
 * enabled) hold for the merged policy, so they are checked once all layers
 * are known (cfg_check.c); this keeps where each value came from. */
static void finish_fallback(cfg_decoder_t *d, const cfg_node_t *map, void *obj, const cfg_node_t *const *seen,
                            size_t index)
{
    vsr_fallback_conf_t *fb = obj;
    static const struct {
        const char *key;
        size_t off;
    } marked[] = {
        {"enabled", F_OFF(enabled)},
        {"max_attempts", F_OFF(max_attempts)},
        {"total_timeout", F_OFF(total_timeout_ms)},
        {"per_attempt_timeout", F_OFF(per_attempt_timeout_ms)},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(marked); i++) {
        const cfg_node_t *n = vsr__cfg_map_get(map, marked[i].key);
        if (n != NULL)
            vsr__cfg_mark(d, (const char *)fb + marked[i].off, n);
    }
}

const cfg_spec_t vsr__cfg_fallback_spec = {
    .size = sizeof(vsr_fallback_conf_t),
    .fields = fallback_fields,
    .n_fields = VSR_ARRAY_LEN(fallback_fields),
    .init = init_fallback,
    .finish = finish_fallback,
};

const cfg_spec_t vsr__cfg_scoped_fallback_spec = {
    .size = sizeof(vsr_fallback_conf_t),
    .fields = scoped_fallback_fields,
    .n_fields = VSR_ARRAY_LEN(scoped_fallback_fields),
    .init = init_fallback,
    .finish = finish_fallback,
};

void vsr__cfg_fallback_defaults(const config_box_t *box, vsr_fallback_conf_t *out)
{
    memset(out, 0, sizeof(*out));
    out->present = 1;
    out->version = 1;
    out->has_version = 1;
    out->enabled = 0;
    out->has_enabled = 1;
    out->max_attempts = 3;
    out->has_max_attempts = 1;
    out->total_timeout_ms = 30000;
    out->has_total_timeout = 1;
    out->per_attempt_timeout_ms = 10000;
    out->has_per_attempt_timeout = 1;
    out->retryable_status_codes = (uint32_t *)box->default_retryable_codes;
    out->n_retryable_status_codes = VSR_ARRAY_LEN(box->default_retryable_codes);
    out->has_retryable_status_codes = 1;
    out->cb_consecutive_failures = 3;
    out->has_cb_consecutive_failures = 1;
    out->cb_cooldown_period_ms = 30000;
    out->has_cb_cooldown_period = 1;
    out->cb_half_open_probes = 1;
    out->has_cb_half_open_probes = 1;
}

void vsr__cfg_fallback_merge(vsr_fallback_conf_t *base, const vsr_fallback_conf_t *layer)
{
    if (!layer->present)
        return;
#define TAKE(has, ...)                     \
    do {                                   \
        if (layer->has) {                  \
            __VA_ARGS__;                   \
        }                                  \
    } while (0)
    TAKE(has_version, base->version = layer->version);
    TAKE(has_enabled, base->enabled = layer->enabled);
    TAKE(has_max_attempts, base->max_attempts = layer->max_attempts);
    TAKE(has_total_timeout, base->total_timeout_ms = layer->total_timeout_ms);
    TAKE(has_per_attempt_timeout, base->per_attempt_timeout_ms = layer->per_attempt_timeout_ms);
    TAKE(has_retryable_status_codes, base->retryable_status_codes = layer->retryable_status_codes;
         base->n_retryable_status_codes = layer->n_retryable_status_codes);
    TAKE(has_cb_consecutive_failures, base->cb_consecutive_failures = layer->cb_consecutive_failures);
    TAKE(has_cb_cooldown_period, base->cb_cooldown_period_ms = layer->cb_cooldown_period_ms);
    TAKE(has_cb_half_open_probes, base->cb_half_open_probes = layer->cb_half_open_probes);
#undef TAKE
}
