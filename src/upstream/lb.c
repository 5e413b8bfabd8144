/*
 * lb.c — endpoint choice within a cluster: smooth weighted round robin (as
 * nginx's) or power of two choices by requests in flight (Envoy's
 * least_request with choice_count 2), over the endpoints that are healthy,
 * not ejected and not tried yet, with Envoy's 50% panic threshold.
 *
 * No arrays are built per pick: each pass re-evaluates the candidate test,
 * which is a few atomic loads per endpoint.
 */
#include "policy.h"

/* Which endpoints a pick may choose from. */
typedef struct {
    vsr_endpoint_state_t *const *eps;
    size_t n;
    uint64_t now_ms;
    int panic;          /* too many unavailable: health and ejection are ignored */
    uint64_t exclude;   /* effective exclusion mask (0 when it would leave nothing) */
} pool_t;

static int available(const pool_t *pl, size_t i)
{
    vsr_endpoint_state_t *e = pl->eps[i];
    if (atomic_load(&e->unresolved))
        return 0; /* there is no address to send to */
    if (pl->panic)
        return 1;
    return atomic_load(&e->healthy) && !vsr__outlier_ejected(e, pl->now_ms);
}

static int excluded(uint64_t mask, size_t i)
{
    return i < 64 && (mask >> i) & 1;
}

static int candidate(const pool_t *pl, size_t i)
{
    return !excluded(pl->exclude, i) && available(pl, i);
}

static uint64_t weight_of(const uint32_t *weights, size_t i)
{
    return weights && weights[i] ? weights[i] : 1;
}

static size_t pick_round_robin(const pool_t *pl, const uint32_t *weights, int64_t *cur)
{
    int64_t total = 0;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < pl->n; i++) {
        if (!candidate(pl, i))
            continue;
        int64_t w = (int64_t)weight_of(weights, i);
        cur[i] += w;
        total += w;
        if (best == SIZE_MAX || cur[i] > cur[best])
            best = i;
    }
    if (best != SIZE_MAX)
        cur[best] -= total;
    return best;
}

/* The k-th candidate (0-based). */
static size_t nth_candidate(const pool_t *pl, uint64_t k)
{
    for (size_t i = 0; i < pl->n; i++)
        if (candidate(pl, i) && k-- == 0)
            return i;
    return SIZE_MAX;
}

static size_t pick_least_request(const pool_t *pl, const uint32_t *weights, vsr_rng_t *rng)
{
    uint64_t m = 0;
    for (size_t i = 0; i < pl->n; i++)
        m += (uint64_t)candidate(pl, i);
    if (m == 0)
        return SIZE_MAX;
    if (m == 1)
        return nth_candidate(pl, 0);
    uint64_t ka = vsr__rng_below(rng, m);
    uint64_t kb = vsr__rng_below(rng, m - 1);
    if (kb >= ka)
        kb++; /* two different candidates */
    size_t a = nth_candidate(pl, ka);
    size_t b = nth_candidate(pl, kb);
    if (a == SIZE_MAX || b == SIZE_MAX) /* the set changed under us */
        return a != SIZE_MAX ? a : b;
    unsigned la = atomic_load(&pl->eps[a]->active);
    unsigned lb = atomic_load(&pl->eps[b]->active);
    if (lb < la || (lb == la && weight_of(weights, b) > weight_of(weights, a)))
        return b;
    return a;
}

int vsr__lb_pick(vsr_endpoint_state_t *const *eps, const uint32_t *weights, int64_t *cur, size_t n,
                 int least_request, uint64_t exclude_mask, uint64_t now_ms, vsr_rng_t *rng)
{
    if (n == 0)
        return -1;
    pool_t pl = {eps, n, now_ms, 0, 0};

    size_t unavailable = 0;
    for (size_t i = 0; i < n; i++)
        unavailable += (size_t)!available(&pl, i);
    /* Envoy's panic threshold: with under half the cluster healthy, spread
     * the load over all of it rather than crush the few that are left. */
    pl.panic = unavailable * 2 > n;

    /* Exclusion is a preference: honour it only while something is left. */
    pl.exclude = exclude_mask;
    int any = 0;
    for (size_t i = 0; i < n && !any; i++)
        any = candidate(&pl, i);
    if (!any)
        pl.exclude = 0;

    size_t pick = least_request ? pick_least_request(&pl, weights, rng) : pick_round_robin(&pl, weights, cur);
    if (pick == SIZE_MAX) {
        /* Only when an ejection expired or health changed between the passes
         * above; any endpoint is better than none. */
        pick = 0;
        for (size_t i = 0; i < n; i++)
            if (!excluded(exclude_mask, i)) {
                pick = i;
                break;
            }
    }
    return (int)pick;
}
