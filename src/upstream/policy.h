/*
 * policy.h — private to upstream/: the reliability state machines, pure
 * logic with the clock and randomness passed in (unit tests use a fake
 * clock and a seeded generator).  No I/O, no libuv.
 *
 * Endpoint and breaker state is shared by every worker thread: its fields
 * are C11 atomics and every function here is thread-safe.
 */
#ifndef VSR_UPSTREAM_POLICY_H
#define VSR_UPSTREAM_POLICY_H

#include <stdatomic.h>

#include "base/base.h"
#include "config/config.h"

/* ---- randomness: xorshift, one state per worker ---- */
typedef struct {
    uint64_t s;
} vsr_rng_t;
void vsr__rng_seed(vsr_rng_t *r, uint64_t seed);
uint64_t vsr__rng_next(vsr_rng_t *r);
/* uniform in [0, n) without modulo bias; n > 0 (0 gives 0) */
uint64_t vsr__rng_below(vsr_rng_t *r, uint64_t n);

/* ---- the effective policy of one call (ref §1.5, §1.6, §5.3) ---- */

/* VSR_RETRY_* (config.h): the retry_on bits. */

#define VSR_POLICY_MAX_CODES 32

typedef struct {
    uint64_t connect_ms;       /* default 10s */
    uint64_t first_byte_ms;    /* 0 = none */
    uint64_t per_try_ms;       /* 0 = none */
    uint64_t total_ms;         /* 0 = none; defaults to the listener's timeout */
    uint64_t idle_ms;          /* 0 = none; defaults to the listener's timeout */
    uint32_t retry_count;      /* 0..5, default 0 */
    uint32_t retry_on;         /* VSR_RETRY_* mask; default connect-failure,refused-stream when retry_count > 0 and none given */
    uint16_t codes[VSR_POLICY_MAX_CODES]; /* retriable_status_codes */
    size_t n_codes;
    uint64_t backoff_base_ms;  /* 25ms */
    uint64_t backoff_max_ms;   /* 10 x base */
    uint64_t retry_after_max_ms; /* 0 = Retry-After not honoured beyond the back-off */
    uint32_t budget_percent;   /* 0 = no budget; 20 once a budget field is set */
    uint32_t budget_min_concurrency; /* 3 */
    int least_request;         /* lb_policy: least_request */
    int _backoff_max_set;      /* some layer set retry_back_off_max (else it follows 10 x base) */
} vsr_policy_t;

/* Builtin defaults with the listener's timeout as total and idle. */
void vsr__policy_init(vsr_policy_t *p, uint64_t listener_timeout_ms);
/* Merges one layer (model, then decision): timeouts, retry_count, back-off,
 * retry_after_max, budget and lb_policy replace when set; retry_on tokens and
 * retriable_status_codes add.
 * - retriable codes are kept once each, at most VSR_POLICY_MAX_CODES.
 * - retry_back_off_max, until a layer sets it, is 10 x the current base.
 * - a budget field set to a value > 0 turns the budget on (percent 20, min
 *   concurrency 3 for the field not given); 0 counts as not set (ref).
 * - once a layer leaves retries configured (retry_count > 0 or a per-try
 *   timeout) with no retry_on token at all, retry_on becomes the default
 *   connect-failure,refused-stream, and later layers' tokens add to it (as
 *   the reference compiles a model's retry policy before a decision's
 *   override is added).
 * - retry_on and lb_policy come from the layer's retry_on_mask and
 *   least_request, compiled by the loader; a layer built by hand
 *   (compiled 0) has its strings read here, and an invalid retry_on (the
 *   config rejects those) adds nothing. */
void vsr__policy_merge(vsr_policy_t *p, const vsr_reliability_conf_t *layer);
/* Merges the decision's layer, as above, then: a decision that gives
 * retry_on without retry_count, over a model with no retries, gets one retry
 * (ref §1.6: the decision's tokens reach Envoy as x-envoy-retry-on without
 * x-envoy-max-retries, and Envoy then retries once; a model's own retry
 * count, when it has one, stays). */
void vsr__policy_merge_decision(vsr_policy_t *p, const vsr_reliability_conf_t *layer);
/* Parses "5xx,gateway-error,..." into a mask: tokens are case-sensitive,
 * spaces and tabs around a token are allowed, an empty token is not.
 * VSR_OK or VSR_ERR_INVALID (then *mask is left alone). */
int vsr__retry_on_parse(const char *tokens, uint32_t *mask);

/* What ended an attempt. */
typedef enum {
    VSR_OUTCOME_STATUS = 0,        /* a response head with `status` arrived */
    VSR_OUTCOME_CONNECT_FAILURE,
    VSR_OUTCOME_RESET_BEFORE_REQUEST, /* reset before the request was fully sent */
    VSR_OUTCOME_RESET,             /* reset / EOF before the response head */
    VSR_OUTCOME_TIMEOUT,           /* per-try or first-byte timeout */
    VSR_OUTCOME_PROTOCOL,
    VSR_OUTCOME_REFUSED_STREAM,    /* HTTP/2 RST_STREAM REFUSED_STREAM before the response head */
} vsr_outcome_t;

/* Whether an attempt that ended so may be retried under p (ref §5.3: a
 * per-try/first-byte timeout counts under 5xx, gateway-error and reset;
 * reset-before-request also under reset; 429 only through
 * retriable-status-codes or envoy-ratelimited).  Count and deadline are the
 * caller's business.  As Envoy's router decides it:
 *   outcome               retried under
 *   STATUS 5xx            5xx; 502/503/504 also gateway-error
 *   STATUS 409            retriable-4xx
 *   STATUS 429            envoy-ratelimited (vsr has no x-envoy-ratelimited)
 *   STATUS listed code    retriable-status-codes
 *   CONNECT_FAILURE       5xx, gateway-error, reset, connect-failure,
 *                         reset-before-request (nothing was sent)
 *   RESET_BEFORE_REQUEST  5xx, gateway-error, reset, reset-before-request
 *   RESET, TIMEOUT        5xx, gateway-error, reset
 *   PROTOCOL              as RESET (Envoy reports it as a reset with reason
 *                         "protocol error")
 *   REFUSED_STREAM        refused-stream, 5xx, gateway-error, reset (an
 *                         HTTP/2 stream the server refused unprocessed)
 * Envoy's 5xx and gateway-error include every reset, connect failures too.
 * retry_on == 0 with retry_count > 0 counts as the default
 * connect-failure,refused-stream. */
int vsr__policy_retriable(const vsr_policy_t *p, vsr_outcome_t o, int status);

/* Jittered exponential back-off before retry n (n = 1 for the first retry):
 * uniform in [0, min(base * 2^(n-1), max)). */
uint64_t vsr__backoff_ms(const vsr_policy_t *p, unsigned n, vsr_rng_t *rng);
/* A Retry-After value (delay-seconds, or an HTTP-date relative to now_epoch
 * seconds) in ms, plus up to 50% jitter.  VSR_OK; VSR_DECLINED when the
 * value exceeds max_ms (then it is not honoured at all and the computed
 * back-off applies, as Envoy's rate-limited back-off discards a reset header
 * beyond its max_interval); VSR_ERR_INVALID when the value is neither form
 * (then it is ignored).  *out is written only on VSR_OK.
 * The result d is in [v, v + v/2) for the value v (exactly v when v < 2 ms),
 * so it may exceed max_ms by the jitter.  All
 * three HTTP-date forms are read (IMF-fixdate, RFC 850, asctime; RFC 9110
 * §5.6.7); a date in the past gives 0; surrounding spaces are ignored. */
int vsr__retry_after_ms(vsr_slice_t value, double now_epoch, uint64_t max_ms, vsr_rng_t *rng, uint64_t *out);

/* ---- endpoint state: health, outlier ejection, load ---- */
typedef struct {
    atomic_uint active;             /* requests in flight (least_request) */
    atomic_uint consecutive_5xx;
    atomic_uint times_ejected;      /* the ejection-time multiplier: +1 per ejection, -1 per 10 s back in rotation (Envoy's) */
    atomic_ullong ejected_until_ms; /* 0 = not ejected */
    atomic_ullong returned_at_ms;   /* when the last ejection ended, 0 = never ejected (for the decay above) */
    atomic_uint hc_failures;        /* consecutive failed health checks */
    atomic_int healthy;             /* 1 until 3 failed checks; back after 1 success */
    atomic_int unresolved;          /* its host name has not resolved yet: never picked (dns.c) */
    /* TTFT ejection: the current window's times to first byte, counted by
     * every worker: how many, and how many above the threshold */
    atomic_ullong ttft_window;      /* the window number the counts belong to (0: none yet) */
    atomic_uint ttft_n, ttft_over;
} vsr_endpoint_state_t;

void vsr__endpoint_state_init(vsr_endpoint_state_t *e);

/* Records an attempt's result on ep (is_5xx: a 5xx status, or a connect
 * failure/reset/timeout, as Envoy's consecutive_5xx counts them).  Ejects ep
 * when consecutive_5xx reaches the threshold, only when the cluster has more
 * than one endpoint and fewer than max_ejection_percent of them are ejected;
 * ejection lasts base x times ejected, at most 300 s.  Returns 1 when this
 * call ejected it.  eps/n: the whole cluster (for the percentage).
 * Precisely (as Envoy and the reference): rel->consecutive_5xx absent or 0
 * disables it; the count restarts at 0 on any other result and whenever it
 * reaches the threshold, ejected or not; ep is ejected only if
 * (ejected + 1) * 100 <= max_ejection_percent * n, counting the endpoints
 * ejected now (so 50% of 2 allows one, 0% none); the ejection time is
 * min(base x times_ejected, max(300 s, base)), base_ejection_time default
 * 30 s; the multiplier first loses one per whole 10 s (Envoy's detection
 * interval) since ep came back, and stops growing once base x multiplier
 * reaches the cap plus one base.  Results arriving while ep is ejected
 * are counted but do not eject it again. */
int vsr__outlier_record(vsr_endpoint_state_t *ep, int is_5xx, const vsr_reliability_conf_t *rel,
                        vsr_endpoint_state_t *const *eps, size_t n, uint64_t now_ms);
/* One response head's time to first byte (a vsr extension of the reliability
 * block, off unless ttft_ejection_threshold is set): counted in ep's
 * current window of ttft_ejection_window (30 s; a new window starts from
 * zero); once the window holds ttft_ejection_min_samples (10) and its
 * ttft_ejection_percentile-th (95, nearest rank) time exceeds the
 * threshold, ep is ejected exactly as by consecutive_5xx (same multiplier,
 * base_ejection_time, max_ejection_percent, never the last endpoint) and
 * its window starts again.  Returns 1 when this call ejected it. */
int vsr__outlier_ttft(vsr_endpoint_state_t *ep, uint64_t ttft_ms, const vsr_reliability_conf_t *rel,
                      vsr_endpoint_state_t *const *eps, size_t n, uint64_t now_ms);
/* True while ep is ejected at now_ms (an expired ejection clears itself). */
int vsr__outlier_ejected(vsr_endpoint_state_t *ep, uint64_t now_ms);

/* Health checks: unhealthy after 3 consecutive failures, healthy after 1
 * success.  Returns 1 when the endpoint's health changed. */
int vsr__health_record(vsr_endpoint_state_t *ep, int ok);

/* ---- load balancing ---- */

/* Picks an endpoint index among n: skips excluded ones (mask bit i set: tried
 * already) when any other is available, and unhealthy or ejected ones unless
 * more than 50% of the cluster is unavailable (panic: then all are used);
 * an endpoint whose host has not resolved is skipped even then, unless no
 * other endpoint is left.
 * Weighted round robin over `cur` (smooth, as nginx; cur has n entries owned
 * by the caller's worker) or, with least_request, power of two choices among
 * the available ones by `active` (weights break ties).  Returns -1 only when
 * n == 0.
 * Details: exclusion covers indexes below 64 only.  weights may be NULL (all
 * 1); a weight of 0 counts as 1.  Round robin adds each candidate's weight
 * to its cur[] and takes the largest (the first on a tie), which then loses
 * the candidates' total: weights 3:1 give a, a, b, a in every 4 picks; cur
 * starts all 0 and endpoints that are skipped keep theirs.  P2C samples two
 * different candidates uniformly; on equal load and weight the first
 * sampled wins; the most loaded of 3 or more is never picked.  cur may be
 * NULL with least_request. */
int vsr__lb_pick(vsr_endpoint_state_t *const *eps, const uint32_t *weights, int64_t *cur, size_t n,
                 int least_request, uint64_t exclude_mask, uint64_t now_ms, vsr_rng_t *rng);

/* ---- retry budget (Envoy's): retries in flight may be at most percent% of
 * the cluster's active requests, but at least min_concurrency.
 * Whether one more retry may start: active_retries <
 * max(min_concurrency, floor(active_requests * percent / 100)), where
 * active_requests are the cluster's requests in flight, retries included (as
 * Envoy counts them).  Always 1 when budget_percent is 0 (no budget: then
 * Envoy's max_retries breaker, 3 retries in flight, is the caller's). */
int vsr__budget_allows(uint32_t active_requests, uint32_t active_retries, const vsr_policy_t *p);

/* ---- circuit breaker per backend for cross-model fallback (ref §1.7) ---- */
typedef struct {
    atomic_uint consecutive_failures;
    atomic_ullong opened_at_ms;     /* 0 = closed; else the opening time + 1 (so time 0 is not "closed") */
    atomic_uint half_open_inflight; /* probes let through since the cooldown ended */
    atomic_ullong probe_at_ms;      /* when the latest probe was let through */
} vsr_breaker_t;

typedef enum {
    VSR_BREAKER_CLOSED = 0,
    VSR_BREAKER_OPEN,      /* cooling down: no calls */
    VSR_BREAKER_HALF_OPEN, /* cooldown over: probes may pass */
} vsr_breaker_state_t;

typedef struct {
    uint32_t consecutive_failures;  /* 3; 0 disables */
    uint64_t cooldown_ms;           /* 30s */
    uint32_t half_open_probes;      /* 1 */
} vsr_breaker_conf_t;

void vsr__breaker_init(vsr_breaker_t *b);
/* The configuration of ref §1.7 with its defaults (3, 30 s, 1) for what f
 * does not set; f may be NULL (all defaults). */
void vsr__breaker_conf_init(vsr_breaker_conf_t *c, const vsr_fallback_conf_t *f);
/* May a call go to this backend now?  Closed: yes.  Open: no until cooldown
 * has passed, then up to half_open_probes calls are let through.
 * half_open_probes 0 counts as 1 (else the breaker could never close).  A
 * probe that never reports (the caller records neither cancellations nor
 * client errors) would hold its slot forever, so once every slot is taken a
 * fresh probe is let through a cooldown after the latest one (as the
 * reference).  consecutive_failures 0: always yes. */
int vsr__breaker_allow(vsr_breaker_t *b, const vsr_breaker_conf_t *c, uint64_t now_ms);
/* A call's result (client errors and cancellations are not failures: the
 * caller does not record them).  A success closes the breaker; failures open
 * it at the threshold, and a failed half-open probe reopens it.  A failure
 * reported while the breaker is open (a call let through before it opened)
 * restarts the cooldown, as the reference's does.  Returns 1 when this
 * opened it (from closed or half-open), -1 when this closed it, else 0. */
int vsr__breaker_record(vsr_breaker_t *b, const vsr_breaker_conf_t *c, int success, uint64_t now_ms);
/* The state at now_ms, for metrics, logs and tests. */
vsr_breaker_state_t vsr__breaker_state(vsr_breaker_t *b, const vsr_breaker_conf_t *c, uint64_t now_ms);

#endif
