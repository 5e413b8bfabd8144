/*
 * policy.c — the effective reliability policy of one call: the seeded
 * generator, layer merging, retry_on tokens, the retry table and the retry
 * budget (ref §1.5, §1.6, §5.3).
 */
#include "policy.h"

/* ---- randomness ---- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void vsr__rng_seed(vsr_rng_t *r, uint64_t seed)
{
    /* xorshift is stuck at 0 and weak on sparse seeds: mix the seed first. */
    r->s = splitmix64(seed);
    if (r->s == 0)
        r->s = 0x9E3779B97F4A7C15ull;
}

uint64_t vsr__rng_next(vsr_rng_t *r)
{
    /* xorshift64* */
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint64_t vsr__rng_below(vsr_rng_t *r, uint64_t n)
{
    if (n == 0)
        return 0;
    /* Reject the low values that would make the modulo uneven. */
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = vsr__rng_next(r);
        if (x >= threshold)
            return x % n;
    }
}

/* ---- the policy ---- */

#define DEFAULT_CONNECT_MS 10000
#define DEFAULT_BACKOFF_BASE_MS 25
#define DEFAULT_BUDGET_PERCENT 20
#define DEFAULT_BUDGET_MIN_CONCURRENCY 3
#define DEFAULT_RETRY_ON (VSR_RETRY_CONNECT_FAILURE | VSR_RETRY_REFUSED_STREAM)

void vsr__policy_init(vsr_policy_t *p, uint64_t listener_timeout_ms)
{
    memset(p, 0, sizeof(*p));
    p->connect_ms = DEFAULT_CONNECT_MS;
    p->total_ms = listener_timeout_ms;
    p->idle_ms = listener_timeout_ms;
    p->backoff_base_ms = DEFAULT_BACKOFF_BASE_MS;
    p->backoff_max_ms = 10 * DEFAULT_BACKOFF_BASE_MS;
    p->budget_min_concurrency = DEFAULT_BUDGET_MIN_CONCURRENCY;
}

static void add_code(vsr_policy_t *p, uint32_t code)
{
    if (code < 100 || code > 599)
        return;
    for (size_t i = 0; i < p->n_codes; i++)
        if (p->codes[i] == code)
            return;
    if (p->n_codes < VSR_POLICY_MAX_CODES)
        p->codes[p->n_codes++] = (uint16_t)code;
}

void vsr__policy_merge(vsr_policy_t *p, const vsr_reliability_conf_t *l)
{
    if (!l)
        return;
    if (l->has_connect_timeout)
        p->connect_ms = l->connect_timeout_ms;
    if (l->has_first_byte_timeout)
        p->first_byte_ms = l->first_byte_timeout_ms;
    if (l->has_per_try_timeout)
        p->per_try_ms = l->per_try_timeout_ms;
    if (l->has_total_timeout)
        p->total_ms = l->total_timeout_ms;
    if (l->has_idle_timeout)
        p->idle_ms = l->idle_timeout_ms;
    if (l->has_retry_count)
        p->retry_count = l->retry_count;

    if (l->compiled) {
        p->retry_on |= l->retry_on_mask;
    } else if (l->retry_on) { /* not from the loader */
        uint32_t mask = 0;
        if (vsr__retry_on_parse(l->retry_on, &mask) == VSR_OK)
            p->retry_on |= mask;
    }
    for (size_t i = 0; i < l->n_retriable_status_codes; i++)
        add_code(p, l->retriable_status_codes[i]);

    if (l->has_retry_back_off_base) {
        p->backoff_base_ms = l->retry_back_off_base_ms;
        if (!p->_backoff_max_set)
            p->backoff_max_ms = 10 * p->backoff_base_ms;
    }
    if (l->has_retry_back_off_max) {
        p->backoff_max_ms = l->retry_back_off_max_ms;
        p->_backoff_max_set = 1;
    }
    if (l->has_retry_after_max)
        p->retry_after_max_ms = l->retry_after_max_ms;

    /* The reference reads 0 in either budget field as "not given". */
    int budget = 0;
    if (l->has_retry_budget_percent && l->retry_budget_percent > 0) {
        p->budget_percent = l->retry_budget_percent;
        budget = 1;
    }
    if (l->has_retry_budget_min_concurrency && l->retry_budget_min_concurrency > 0) {
        p->budget_min_concurrency = l->retry_budget_min_concurrency;
        budget = 1;
    }
    if (budget && p->budget_percent == 0)
        p->budget_percent = DEFAULT_BUDGET_PERCENT;

    if (l->lb_policy)
        p->least_request = l->compiled ? l->least_request : strcmp(l->lb_policy, "least_request") == 0;

    /* The reference compiles a model's retry policy, default tokens
     * included, before a decision's tokens are added to it. */
    if ((p->retry_count > 0 || p->per_try_ms > 0) && p->retry_on == 0)
        p->retry_on = DEFAULT_RETRY_ON;
}

void vsr__policy_merge_decision(vsr_policy_t *p, const vsr_reliability_conf_t *l)
{
    vsr__policy_merge(p, l);
    if (l && l->retry_on && !l->has_retry_count && p->retry_count == 0)
        p->retry_count = 1;
}

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

int vsr__retry_on_parse(const char *tokens, uint32_t *mask)
{
    if (!tokens)
        return VSR_ERR_INVALID;
    uint32_t m = 0;
    vsr_slice_t rest = vsr_slice_cstr(tokens);
    do {
        vsr_slice_t tok = vsr_slice_trim(vsr_slice_split(rest, ',', &rest));
        size_t i;
        for (i = 0; i < VSR_ARRAY_LEN(retry_tokens); i++)
            if (vsr_slice_eq_cstr(tok, retry_tokens[i].name))
                break;
        if (i == VSR_ARRAY_LEN(retry_tokens))
            return VSR_ERR_INVALID; /* unknown or empty */
        m |= retry_tokens[i].bit;
    } while (rest.p);
    *mask = m;
    return VSR_OK;
}

static int has_code(const vsr_policy_t *p, int status)
{
    for (size_t i = 0; i < p->n_codes; i++)
        if (p->codes[i] == status)
            return 1;
    return 0;
}

int vsr__policy_retriable(const vsr_policy_t *p, vsr_outcome_t o, int status)
{
    uint32_t on = p->retry_on;
    if (on == 0 && p->retry_count > 0)
        on = DEFAULT_RETRY_ON;
    /* Envoy retries any attempt that got no response under these three. */
    const uint32_t no_response = VSR_RETRY_5XX | VSR_RETRY_GATEWAY_ERROR | VSR_RETRY_RESET;

    switch (o) {
    case VSR_OUTCOME_STATUS:
        if ((on & VSR_RETRY_5XX) && status >= 500 && status <= 599)
            return 1;
        if ((on & VSR_RETRY_GATEWAY_ERROR) && (status == 502 || status == 503 || status == 504))
            return 1;
        if ((on & VSR_RETRY_RETRIABLE_4XX) && status == 409)
            return 1;
        if ((on & VSR_RETRY_ENVOY_RATELIMITED) && status == 429)
            return 1;
        if ((on & VSR_RETRY_RETRIABLE_STATUS_CODES) && has_code(p, status))
            return 1;
        return 0;
    case VSR_OUTCOME_CONNECT_FAILURE:
        return (on & (no_response | VSR_RETRY_CONNECT_FAILURE | VSR_RETRY_RESET_BEFORE_REQUEST)) != 0;
    case VSR_OUTCOME_RESET_BEFORE_REQUEST:
        return (on & (no_response | VSR_RETRY_RESET_BEFORE_REQUEST)) != 0;
    case VSR_OUTCOME_RESET:
    case VSR_OUTCOME_TIMEOUT:
    case VSR_OUTCOME_PROTOCOL:
        return (on & no_response) != 0;
    case VSR_OUTCOME_REFUSED_STREAM:
        return (on & (no_response | VSR_RETRY_REFUSED_STREAM)) != 0;
    }
    return 0;
}

/* ---- retry budget ---- */

int vsr__budget_allows(uint32_t active_requests, uint32_t active_retries, const vsr_policy_t *p)
{
    if (p->budget_percent == 0)
        return 1;
    uint64_t limit = (uint64_t)active_requests * p->budget_percent / 100;
    if (limit < p->budget_min_concurrency)
        limit = p->budget_min_concurrency;
    return active_retries < limit;
}
