/*
 * outlier.c — passive and active endpoint health: Envoy's consecutive_5xx
 * outlier ejection and the health-check thresholds (ref §1.5, §5.3).
 *
 * Every worker reports into the same endpoint state, so each transition is
 * one atomic exchange or compare-and-swap: of two threads that race to eject
 * or to return an endpoint, exactly one does it.  The max-ejection
 * percentage is read without a lock, so a race can overshoot it by the
 * number of threads ejecting at the same instant; that is harmless.
 */
#include "policy.h"

#define DEFAULT_BASE_EJECTION_MS 30000
#define MAX_EJECTION_MS 300000
#define DEFAULT_MAX_EJECTION_PERCENT 50
/* Envoy's outlier detection interval: the multiplier decays once per interval. */
#define DECAY_INTERVAL_MS 10000
#define UNHEALTHY_THRESHOLD 3

void vsr__endpoint_state_init(vsr_endpoint_state_t *e)
{
    atomic_init(&e->active, 0);
    atomic_init(&e->consecutive_5xx, 0);
    atomic_init(&e->times_ejected, 0);
    atomic_init(&e->ejected_until_ms, 0);
    atomic_init(&e->returned_at_ms, 0);
    atomic_init(&e->hc_failures, 0);
    atomic_init(&e->healthy, 1);
    atomic_init(&e->unresolved, 0);
    atomic_init(&e->ttft_window, 0);
    atomic_init(&e->ttft_n, 0);
    atomic_init(&e->ttft_over, 0);
}

int vsr__outlier_ejected(vsr_endpoint_state_t *ep, uint64_t now_ms)
{
    unsigned long long until = atomic_load(&ep->ejected_until_ms);
    if (until == 0)
        return 0;
    if (now_ms < until)
        return 1;
    if (atomic_compare_exchange_strong(&ep->ejected_until_ms, &until, 0)) {
        /* Back in rotation with a clean slate; the decay counts from here. */
        atomic_store(&ep->consecutive_5xx, 0);
        atomic_store(&ep->returned_at_ms, until);
    }
    return 0;
}

/* Ejects ep unless that puts more than max_ejection_percent of the
 * cluster out; the ejection time grows with the times ejected (Envoy's). */
static int eject(vsr_endpoint_state_t *ep, const vsr_reliability_conf_t *rel, vsr_endpoint_state_t *const *eps,
                 size_t n, uint64_t now_ms)
{
    uint64_t percent = rel->has_max_ejection_percent ? rel->max_ejection_percent : DEFAULT_MAX_EJECTION_PERCENT;
    uint64_t ejected = 0;
    for (size_t i = 0; i < n; i++)
        if (eps[i] != ep && vsr__outlier_ejected(eps[i], now_ms))
            ejected++;
    if ((ejected + 1) * 100 > percent * n)
        return 0;

    uint64_t base = rel->has_base_ejection_time ? rel->base_ejection_time_ms : DEFAULT_BASE_EJECTION_MS;
    if (base == 0)
        base = DEFAULT_BASE_EJECTION_MS;
    uint64_t cap = VSR_MAX(base, (uint64_t)MAX_EJECTION_MS);
    uint64_t times = atomic_load(&ep->times_ejected);
    uint64_t back = atomic_load(&ep->returned_at_ms);
    if (times > 0 && back != 0 && now_ms > back) {
        uint64_t decay = (now_ms - back) / DECAY_INTERVAL_MS;
        times = decay >= times ? 0 : times - decay;
    }
    if (times * base < cap + base)
        times++;
    uint64_t duration = VSR_MIN(times * base, cap);

    unsigned long long expected = 0;
    if (!atomic_compare_exchange_strong(&ep->ejected_until_ms, &expected, now_ms + duration))
        return 0; /* another thread ejected it first */
    atomic_store(&ep->times_ejected, (unsigned)times);
    return 1;
}

int vsr__outlier_record(vsr_endpoint_state_t *ep, int is_5xx, const vsr_reliability_conf_t *rel,
                        vsr_endpoint_state_t *const *eps, size_t n, uint64_t now_ms)
{
    if (!rel || !rel->has_consecutive_5xx || rel->consecutive_5xx == 0)
        return 0;
    int ejected_now = vsr__outlier_ejected(ep, now_ms);
    if (!is_5xx) {
        atomic_store(&ep->consecutive_5xx, 0);
        return 0;
    }
    if (atomic_fetch_add(&ep->consecutive_5xx, 1) + 1 < rel->consecutive_5xx)
        return 0;
    /* Only the thread that takes the count back to 0 may act on it. */
    if (atomic_exchange(&ep->consecutive_5xx, 0) < rel->consecutive_5xx)
        return 0;
    if (ejected_now || n <= 1)
        return 0;
    return eject(ep, rel, eps, n, now_ms);
}

#define DEFAULT_TTFT_PERCENTILE 95
#define DEFAULT_TTFT_WINDOW_MS 30000
#define DEFAULT_TTFT_MIN_SAMPLES 10

int vsr__outlier_ttft(vsr_endpoint_state_t *ep, uint64_t ttft_ms, const vsr_reliability_conf_t *rel,
                      vsr_endpoint_state_t *const *eps, size_t n, uint64_t now_ms)
{
    if (!rel || !rel->has_ttft_ejection_threshold || rel->ttft_ejection_threshold_ms == 0)
        return 0;
    uint64_t window = rel->has_ttft_ejection_window && rel->ttft_ejection_window_ms ? rel->ttft_ejection_window_ms
                                                                                      : DEFAULT_TTFT_WINDOW_MS;
    unsigned long long w = now_ms / window + 1, seen = atomic_load(&ep->ttft_window);
    if (seen != w && atomic_compare_exchange_strong(&ep->ttft_window, &seen, w)) {
        /* a new window; a sample another worker adds meanwhile may land in either */
        atomic_store(&ep->ttft_n, 0);
        atomic_store(&ep->ttft_over, 0);
    }
    unsigned over = ttft_ms > rel->ttft_ejection_threshold_ms;
    if (over)
        atomic_fetch_add(&ep->ttft_over, 1);
    unsigned count = atomic_fetch_add(&ep->ttft_n, 1) + 1;
    uint32_t min = rel->has_ttft_ejection_min_samples ? rel->ttft_ejection_min_samples : DEFAULT_TTFT_MIN_SAMPLES;
    if (!over || count < min || vsr__outlier_ejected(ep, now_ms) || n <= 1)
        return 0;
    /* the nearest-rank percentile is above the threshold when fewer samples
     * than its rank are at or below it */
    uint32_t pct = rel->has_ttft_ejection_percentile ? rel->ttft_ejection_percentile : DEFAULT_TTFT_PERCENTILE;
    uint64_t rank = ((uint64_t)pct * count + 99) / 100;
    unsigned above = atomic_load(&ep->ttft_over);
    if (above > count || (uint64_t)(count - above) >= rank)
        return 0;
    if (!eject(ep, rel, eps, n, now_ms))
        return 0;
    atomic_store(&ep->ttft_n, 0); /* it comes back with a clean window */
    atomic_store(&ep->ttft_over, 0);
    return 1;
}

int vsr__health_record(vsr_endpoint_state_t *ep, int ok)
{
    if (ok) {
        atomic_store(&ep->hc_failures, 0);
        return atomic_exchange(&ep->healthy, 1) == 0;
    }
    if (atomic_fetch_add(&ep->hc_failures, 1) + 1 < UNHEALTHY_THRESHOLD)
        return 0;
    return atomic_exchange(&ep->healthy, 0) == 1;
}
