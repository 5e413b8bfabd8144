/*
 * breaker.c — the per-backend circuit breaker of cross-model fallback
 * (ref §1.7): closed -> open after N consecutive failures -> half-open once
 * the cooldown has passed (a few probes pass) -> closed on a success, or
 * open again on a failure.
 *
 * The state is not stored: it follows from opened_at_ms and the clock (see
 * vsr__breaker_state), so the move from open to half-open needs no writer.
 */
#include "policy.h"

#define DEFAULT_CONSECUTIVE_FAILURES 3
#define DEFAULT_COOLDOWN_MS 30000
#define DEFAULT_HALF_OPEN_PROBES 1

void vsr__breaker_init(vsr_breaker_t *b)
{
    atomic_init(&b->consecutive_failures, 0);
    atomic_init(&b->opened_at_ms, 0);
    atomic_init(&b->half_open_inflight, 0);
    atomic_init(&b->probe_at_ms, 0);
}

void vsr__breaker_conf_init(vsr_breaker_conf_t *c, const vsr_fallback_conf_t *f)
{
    c->consecutive_failures = DEFAULT_CONSECUTIVE_FAILURES;
    c->cooldown_ms = DEFAULT_COOLDOWN_MS;
    c->half_open_probes = DEFAULT_HALF_OPEN_PROBES;
    if (!f)
        return;
    if (f->has_cb_consecutive_failures)
        c->consecutive_failures = f->cb_consecutive_failures;
    if (f->has_cb_cooldown_period)
        c->cooldown_ms = f->cb_cooldown_period_ms;
    if (f->has_cb_half_open_probes)
        c->half_open_probes = f->cb_half_open_probes;
}

vsr_breaker_state_t vsr__breaker_state(vsr_breaker_t *b, const vsr_breaker_conf_t *c, uint64_t now_ms)
{
    if (c->consecutive_failures == 0)
        return VSR_BREAKER_CLOSED;
    uint64_t stored = atomic_load(&b->opened_at_ms);
    if (stored == 0)
        return VSR_BREAKER_CLOSED;
    uint64_t opened = stored - 1;
    if (now_ms < opened || now_ms - opened < c->cooldown_ms)
        return VSR_BREAKER_OPEN;
    return VSR_BREAKER_HALF_OPEN;
}

int vsr__breaker_allow(vsr_breaker_t *b, const vsr_breaker_conf_t *c, uint64_t now_ms)
{
    switch (vsr__breaker_state(b, c, now_ms)) {
    case VSR_BREAKER_CLOSED:
        return 1;
    case VSR_BREAKER_OPEN:
        return 0;
    case VSR_BREAKER_HALF_OPEN:
        break;
    }
    unsigned probes = c->half_open_probes ? c->half_open_probes : 1;
    unsigned inflight = atomic_load(&b->half_open_inflight);
    while (inflight < probes) {
        if (atomic_compare_exchange_weak(&b->half_open_inflight, &inflight, inflight + 1)) {
            atomic_store(&b->probe_at_ms, now_ms);
            return 1;
        }
    }
    /* Every slot is held.  A probe that never reports must not keep the
     * backend out for good: a cooldown after the latest probe, a new round
     * starts, claimed by whoever moves probe_at_ms first. */
    unsigned long long last = atomic_load(&b->probe_at_ms);
    if (now_ms < last || now_ms - last < c->cooldown_ms)
        return 0;
    if (!atomic_compare_exchange_strong(&b->probe_at_ms, &last, now_ms))
        return 0;
    atomic_store(&b->half_open_inflight, 1);
    return 1;
}

/* Returns 1 when this opened the breaker (it was closed or half-open). */
static int open_at(vsr_breaker_t *b, const vsr_breaker_conf_t *c, uint64_t now_ms)
{
    int was_open = vsr__breaker_state(b, c, now_ms) == VSR_BREAKER_OPEN;
    atomic_store(&b->half_open_inflight, 0);
    unsigned long long prev = atomic_exchange(&b->opened_at_ms, now_ms + 1);
    return prev == 0 || !was_open;
}

int vsr__breaker_record(vsr_breaker_t *b, const vsr_breaker_conf_t *c, int success, uint64_t now_ms)
{
    if (c->consecutive_failures == 0)
        return 0;
    if (success) {
        atomic_store(&b->consecutive_failures, 0);
        unsigned long long prev = atomic_exchange(&b->opened_at_ms, 0);
        atomic_store(&b->half_open_inflight, 0);
        return prev != 0 ? -1 : 0;
    }
    unsigned failures = atomic_fetch_add(&b->consecutive_failures, 1) + 1;
    if (atomic_load(&b->opened_at_ms) != 0 || failures >= c->consecutive_failures)
        return open_at(b, c, now_ms);
    return 0;
}
