/* test_policy.c — the upstream reliability state machines with a fake clock
 * and a seeded generator: policy merging, retry_on, the retry table,
 * back-off, Retry-After, outlier ejection, health checks, load balancing,
 * the retry budget and the fallback circuit breaker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "upstream/policy.h"

#define ALL_TOKENS 0x1FFu

static vsr_reliability_conf_t rel_none(void)
{
    vsr_reliability_conf_t r;
    memset(&r, 0, sizeof(r));
    return r;
}

/* ---- randomness ---- */

static void test_rng(void **state)
{
    (void)state;
    vsr_rng_t a, b, z;
    vsr__rng_seed(&a, 42);
    vsr__rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        assert_true(vsr__rng_next(&a) == vsr__rng_next(&b));
    vsr__rng_seed(&b, 43);
    assert_true(vsr__rng_next(&a) != vsr__rng_next(&b));
    /* seed 0 must not leave xorshift stuck at 0 */
    vsr__rng_seed(&z, 0);
    uint64_t x = vsr__rng_next(&z);
    assert_true(x != 0 && x != vsr__rng_next(&z));

    assert_true(vsr__rng_below(&a, 1) == 0);
    assert_true(vsr__rng_below(&a, 0) == 0);
    unsigned hist[10] = {0};
    for (int i = 0; i < 20000; i++) {
        uint64_t v = vsr__rng_below(&a, 10);
        assert_true(v < 10);
        hist[v]++;
    }
    for (int i = 0; i < 10; i++)
        assert_in_range(hist[i], 1800, 2200);
    /* a bound close to 2^64 (the rejection path) still stays below it */
    for (int i = 0; i < 1000; i++)
        assert_true(vsr__rng_below(&a, UINT64_MAX / 2 + 2) < UINT64_MAX / 2 + 2);
}

/* ---- policy: defaults and merging ---- */

static void test_policy_defaults(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr__policy_init(&p, 300000);
    assert_int_equal(p.connect_ms, 10000);
    assert_int_equal(p.first_byte_ms, 0);
    assert_int_equal(p.per_try_ms, 0);
    assert_int_equal(p.total_ms, 300000);
    assert_int_equal(p.idle_ms, 300000);
    assert_int_equal(p.retry_count, 0);
    assert_int_equal(p.retry_on, 0);
    assert_int_equal(p.n_codes, 0);
    assert_int_equal(p.backoff_base_ms, 25);
    assert_int_equal(p.backoff_max_ms, 250);
    assert_int_equal(p.retry_after_max_ms, 0);
    assert_int_equal(p.budget_percent, 0);
    assert_int_equal(p.least_request, 0);
    /* a NULL layer and an empty one change nothing */
    vsr_policy_t q = p;
    vsr__policy_merge(&q, NULL);
    vsr_reliability_conf_t none = rel_none();
    vsr__policy_merge(&q, &none);
    assert_memory_equal(&p, &q, sizeof(p));
}

static void test_merge_replace(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr__policy_init(&p, 300000);
    vsr_reliability_conf_t model = rel_none();
    model.has_connect_timeout = 1, model.connect_timeout_ms = 3000;
    model.has_per_try_timeout = 1, model.per_try_timeout_ms = 20000;
    model.has_total_timeout = 1, model.total_timeout_ms = 120000;
    model.has_idle_timeout = 1, model.idle_timeout_ms = 45000;
    model.has_first_byte_timeout = 1, model.first_byte_timeout_ms = 5000;
    model.has_retry_count = 1, model.retry_count = 2;
    model.has_retry_after_max = 1, model.retry_after_max_ms = 30000;
    model.lb_policy = "least_request";
    vsr__policy_merge(&p, &model);
    assert_int_equal(p.connect_ms, 3000);
    assert_int_equal(p.per_try_ms, 20000);
    assert_int_equal(p.total_ms, 120000);
    assert_int_equal(p.idle_ms, 45000);
    assert_int_equal(p.first_byte_ms, 5000);
    assert_int_equal(p.retry_count, 2);
    assert_int_equal(p.retry_after_max_ms, 30000);
    assert_int_equal(p.least_request, 1);

    vsr_reliability_conf_t decision = rel_none();
    decision.has_total_timeout = 1, decision.total_timeout_ms = 0; /* 0s disables */
    decision.has_retry_count = 1, decision.retry_count = 0;        /* replaces downwards too */
    decision.has_per_try_timeout = 1, decision.per_try_timeout_ms = 7000;
    vsr__policy_merge(&p, &decision);
    assert_int_equal(p.total_ms, 0);
    assert_int_equal(p.retry_count, 0);
    assert_int_equal(p.per_try_ms, 7000);
    /* what the decision did not set stays the model's */
    assert_int_equal(p.idle_ms, 45000);
    assert_int_equal(p.first_byte_ms, 5000);
    assert_int_equal(p.connect_ms, 3000);
    assert_int_equal(p.retry_after_max_ms, 30000);
    assert_int_equal(p.least_request, 1);

    vsr_reliability_conf_t rr = rel_none();
    rr.lb_policy = "round_robin";
    vsr__policy_merge(&p, &rr);
    assert_int_equal(p.least_request, 0);
}

static void test_merge_add(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr__policy_init(&p, 1000);
    uint32_t model_codes[] = {429, 503};
    vsr_reliability_conf_t model = rel_none();
    model.retry_on = "5xx, retriable-status-codes";
    model.retriable_status_codes = model_codes, model.n_retriable_status_codes = 2;
    vsr__policy_merge(&p, &model);
    assert_int_equal(p.retry_on, VSR_RETRY_5XX | VSR_RETRY_RETRIABLE_STATUS_CODES);

    uint32_t decision_codes[] = {503, 409, 429, 418};
    vsr_reliability_conf_t decision = rel_none();
    decision.retry_on = "reset,5xx";
    decision.retriable_status_codes = decision_codes, decision.n_retriable_status_codes = 4;
    vsr__policy_merge(&p, &decision);
    assert_int_equal(p.retry_on, VSR_RETRY_5XX | VSR_RETRY_RETRIABLE_STATUS_CODES | VSR_RETRY_RESET);
    assert_int_equal(p.n_codes, 4);
    assert_int_equal(p.codes[0], 429);
    assert_int_equal(p.codes[1], 503);
    assert_int_equal(p.codes[2], 409);
    assert_int_equal(p.codes[3], 418);

    /* a bad string (the config rejects it) adds nothing */
    vsr_reliability_conf_t bad = rel_none();
    bad.retry_on = "gateway-error,bogus";
    vsr__policy_merge(&p, &bad);
    assert_int_equal(p.retry_on, VSR_RETRY_5XX | VSR_RETRY_RETRIABLE_STATUS_CODES | VSR_RETRY_RESET);

    /* the list is capped, and out-of-range values are dropped */
    uint32_t many[50];
    for (int i = 0; i < 50; i++)
        many[i] = (uint32_t)(500 + i);
    many[0] = 99;
    vsr_reliability_conf_t lots = rel_none();
    lots.retriable_status_codes = many, lots.n_retriable_status_codes = 50;
    vsr__policy_merge(&p, &lots);
    assert_int_equal(p.n_codes, VSR_POLICY_MAX_CODES);
    for (size_t i = 0; i < p.n_codes; i++) {
        assert_true(p.codes[i] >= 100 && p.codes[i] <= 599);
        for (size_t j = 0; j < i; j++)
            assert_true(p.codes[i] != p.codes[j]);
    }
}

/* retry_on is compiled when the document is loaded: the request path merges
 * the mask and never reads the string again. */
static void test_retry_on_compiled_at_load(void **state)
{
    (void)state;
    static const char doc[] = "version: v0.3\n"
                              "listeners: [{name: l1, address: 127.0.0.1, port: 18899}]\n"
                              "providers:\n"
                              "  models:\n"
                              "    - name: m\n"
                              "      backend_refs: [{endpoint: '127.0.0.1:1'}]\n"
                              "      reliability: {retry_count: 2, retry_on: ' 5xx , reset,retriable-4xx', lb_policy: least_request}\n";
    vsr_config_t *c = NULL;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("t.yaml", doc, sizeof(doc) - 1, &c, &err), VSR_OK);
    vsr_buf_free(&err);
    vsr_reliability_conf_t r = c->models[0].reliability;
    assert_int_equal(r.compiled, 1);
    assert_int_equal(r.least_request, 1);
    assert_int_equal(r.retry_on_mask, VSR_RETRY_5XX | VSR_RETRY_RESET | VSR_RETRY_RETRIABLE_4XX);
    assert_string_equal(r.retry_on, "5xx,reset,retriable-4xx");
    r.retry_on = "bogus"; /* never read once compiled */
    r.lb_policy = "round_robin";
    vsr_policy_t p;
    vsr__policy_init(&p, 1000);
    vsr__policy_merge(&p, &r);
    assert_int_equal(p.retry_on, VSR_RETRY_5XX | VSR_RETRY_RESET | VSR_RETRY_RETRIABLE_4XX);
    assert_int_equal(p.retry_count, 2);
    assert_int_equal(p.least_request, 1);
    vsr_config_free(c);

    /* an invalid token is a load error at the value's LINE:COL */
    static const char bad[] = "version: v0.3\n"
                              "listeners: [{name: l1, address: 127.0.0.1, port: 18899}]\n"
                              "providers:\n"
                              "  models:\n"
                              "    - name: m\n"
                              "      backend_refs: [{endpoint: '127.0.0.1:1'}]\n"
                              "      reliability: {retry_on: '5xx,timeout'}\n";
    vsr_buf_init(&err, 0);
    assert_int_equal(vsr_config_load_string("t.yaml", bad, sizeof(bad) - 1, &c, &err), VSR_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(err.data, "t.yaml:7:31: unknown retry_on token \"timeout\""));
    vsr_buf_free(&err);
}

static void test_merge_default_retry_on(void **state)
{
    (void)state;
    const uint32_t def = VSR_RETRY_CONNECT_FAILURE | VSR_RETRY_REFUSED_STREAM;
    vsr_policy_t p;

    /* a model with retries and no tokens: the default, to which a decision adds */
    vsr__policy_init(&p, 1000);
    vsr_reliability_conf_t model = rel_none();
    model.has_retry_count = 1, model.retry_count = 2;
    vsr__policy_merge(&p, &model);
    assert_int_equal(p.retry_on, def);
    vsr_reliability_conf_t decision = rel_none();
    decision.retry_on = "retriable-status-codes";
    vsr__policy_merge(&p, &decision);
    assert_int_equal(p.retry_on, def | VSR_RETRY_RETRIABLE_STATUS_CODES);

    /* tokens given with the count: only those */
    vsr__policy_init(&p, 1000);
    decision = rel_none();
    decision.has_retry_count = 1, decision.retry_count = 1;
    decision.retry_on = "5xx";
    vsr__policy_merge(&p, &decision);
    assert_int_equal(p.retry_on, VSR_RETRY_5XX);

    /* a per-try timeout alone makes a retry policy (the reference's) */
    vsr__policy_init(&p, 1000);
    model = rel_none();
    model.has_per_try_timeout = 1, model.per_try_timeout_ms = 15000;
    vsr__policy_merge(&p, &model);
    assert_int_equal(p.retry_on, def);
    assert_int_equal(p.retry_count, 0);

    /* no retries, no tokens: nothing */
    vsr__policy_init(&p, 1000);
    model = rel_none();
    model.has_connect_timeout = 1, model.connect_timeout_ms = 1000;
    vsr__policy_merge(&p, &model);
    assert_int_equal(p.retry_on, 0);
}

/* ref §1.6: a decision's retry_on without retry_count retries once, unless
 * the model already retries (then its count stays). */
static void test_merge_decision_retry_count(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr_reliability_conf_t model, decision = rel_none();
    decision.retry_on = "5xx";

    vsr__policy_init(&p, 1000);
    vsr__policy_merge_decision(&p, &decision);
    assert_int_equal(p.retry_count, 1);
    assert_int_equal(p.retry_on, VSR_RETRY_5XX);

    vsr__policy_init(&p, 1000);
    model = rel_none();
    model.has_retry_count = 1, model.retry_count = 3;
    vsr__policy_merge(&p, &model);
    vsr__policy_merge_decision(&p, &decision);
    assert_int_equal(p.retry_count, 3);

    /* an explicit count wins, 0 included */
    vsr__policy_init(&p, 1000);
    decision.has_retry_count = 1, decision.retry_count = 0;
    vsr__policy_merge_decision(&p, &decision);
    assert_int_equal(p.retry_count, 0);

    /* a model's retry_on without a count is no retry policy (ref §5.4) */
    vsr__policy_init(&p, 1000);
    model = rel_none();
    model.retry_on = "5xx";
    vsr__policy_merge(&p, &model);
    assert_int_equal(p.retry_count, 0);
    /* and a decision without retry_on adds no retry */
    decision = rel_none();
    decision.has_total_timeout = 1, decision.total_timeout_ms = 5000;
    vsr__policy_merge_decision(&p, &decision);
    assert_int_equal(p.retry_count, 0);
}

static void test_merge_backoff(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr__policy_init(&p, 1000);
    vsr_reliability_conf_t l = rel_none();
    l.has_retry_back_off_base = 1, l.retry_back_off_base_ms = 50;
    vsr__policy_merge(&p, &l);
    assert_int_equal(p.backoff_base_ms, 50);
    assert_int_equal(p.backoff_max_ms, 500); /* 10 x base while unset */

    l = rel_none();
    l.has_retry_back_off_max = 1, l.retry_back_off_max_ms = 1000;
    vsr__policy_merge(&p, &l);
    assert_int_equal(p.backoff_max_ms, 1000);

    l = rel_none();
    l.has_retry_back_off_base = 1, l.retry_back_off_base_ms = 20;
    vsr__policy_merge(&p, &l);
    assert_int_equal(p.backoff_base_ms, 20);
    assert_int_equal(p.backoff_max_ms, 1000); /* set explicitly: kept */
}

static void test_merge_budget(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr_reliability_conf_t l;

    vsr__policy_init(&p, 1000);
    l = rel_none();
    l.has_retry_budget_percent = 1, l.retry_budget_percent = 25;
    vsr__policy_merge(&p, &l);
    assert_int_equal(p.budget_percent, 25);
    assert_int_equal(p.budget_min_concurrency, 3);

    vsr__policy_init(&p, 1000);
    l = rel_none();
    l.has_retry_budget_min_concurrency = 1, l.retry_budget_min_concurrency = 5;
    vsr__policy_merge(&p, &l);
    assert_int_equal(p.budget_percent, 20);
    assert_int_equal(p.budget_min_concurrency, 5);

    vsr__policy_init(&p, 1000);
    l = rel_none();
    l.has_retry_budget_percent = 1, l.retry_budget_percent = 0;
    vsr__policy_merge(&p, &l);
    assert_int_equal(p.budget_percent, 0);
}

/* ---- retry_on ---- */

static void test_retry_on_parse(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint32_t bit;
    } each[] = {
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
    uint32_t m;
    for (size_t i = 0; i < VSR_ARRAY_LEN(each); i++) {
        m = 0;
        assert_int_equal(vsr__retry_on_parse(each[i].s, &m), VSR_OK);
        assert_int_equal(m, each[i].bit);
    }
    assert_int_equal(vsr__retry_on_parse("5xx,gateway-error,reset,reset-before-request,connect-failure,"
                                         "refused-stream,retriable-4xx,retriable-status-codes,envoy-ratelimited",
                                         &m),
                     VSR_OK);
    assert_int_equal(m, ALL_TOKENS);
    assert_int_equal(vsr__retry_on_parse("  5xx ,\treset\t, 5xx", &m), VSR_OK);
    assert_int_equal(m, VSR_RETRY_5XX | VSR_RETRY_RESET);

    static const char *const bad[] = {"", " ", ",", "5xx,", ",5xx", "5xx,,reset", "5XX", "bogus",
                                      "5xx reset", "retriable-headers", "reset-before", "5xx;reset"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++) {
        m = 0x12345;
        assert_int_equal(vsr__retry_on_parse(bad[i], &m), VSR_ERR_INVALID);
        assert_int_equal(m, 0x12345); /* untouched */
    }
    assert_int_equal(vsr__retry_on_parse(NULL, &m), VSR_ERR_INVALID);
}

/* ---- the retry table ---- */

static void test_retriable_table(void **state)
{
    (void)state;
    const uint32_t rst = VSR_RETRY_5XX | VSR_RETRY_GATEWAY_ERROR | VSR_RETRY_RESET;
    static const struct {
        vsr_outcome_t o;
        int status;
        uint32_t on; /* tokens under which it is retried */
    } rows[] = {
        {VSR_OUTCOME_STATUS, 500, VSR_RETRY_5XX},
        {VSR_OUTCOME_STATUS, 501, VSR_RETRY_5XX},
        {VSR_OUTCOME_STATUS, 502, VSR_RETRY_5XX | VSR_RETRY_GATEWAY_ERROR},
        {VSR_OUTCOME_STATUS, 503, VSR_RETRY_5XX | VSR_RETRY_GATEWAY_ERROR},
        {VSR_OUTCOME_STATUS, 504, VSR_RETRY_5XX | VSR_RETRY_GATEWAY_ERROR},
        {VSR_OUTCOME_STATUS, 505, VSR_RETRY_5XX},
        {VSR_OUTCOME_STATUS, 599, VSR_RETRY_5XX},
        {VSR_OUTCOME_STATUS, 600, 0},
        {VSR_OUTCOME_STATUS, 409, VSR_RETRY_RETRIABLE_4XX},
        {VSR_OUTCOME_STATUS, 429, VSR_RETRY_ENVOY_RATELIMITED},
        {VSR_OUTCOME_STATUS, 418, VSR_RETRY_RETRIABLE_STATUS_CODES}, /* listed */
        {VSR_OUTCOME_STATUS, 404, 0},
        {VSR_OUTCOME_STATUS, 400, 0},
        {VSR_OUTCOME_STATUS, 200, 0},
        {VSR_OUTCOME_STATUS, 0, 0},
        {VSR_OUTCOME_CONNECT_FAILURE, 0, 0x1F /* 5xx .. connect-failure */},
        {VSR_OUTCOME_RESET_BEFORE_REQUEST, 0, 0xF /* 5xx .. reset-before-request */},
        {VSR_OUTCOME_RESET, 0, 0x7},
        {VSR_OUTCOME_TIMEOUT, 0, 0x7},
        {VSR_OUTCOME_PROTOCOL, 0, 0x7},
        {VSR_OUTCOME_REFUSED_STREAM, 0, 0x7 | VSR_RETRY_REFUSED_STREAM},
    };
    assert_int_equal(0x1F, rst | VSR_RETRY_RESET_BEFORE_REQUEST | VSR_RETRY_CONNECT_FAILURE);

    vsr_policy_t p;
    vsr__policy_init(&p, 1000);
    p.retry_count = 1;
    p.codes[0] = 418;
    p.n_codes = 1;
    for (size_t r = 0; r < VSR_ARRAY_LEN(rows); r++) {
        for (uint32_t bit = 1; bit <= VSR_RETRY_ENVOY_RATELIMITED; bit <<= 1) {
            p.retry_on = bit;
            int want = (rows[r].on & bit) != 0;
            if (vsr__policy_retriable(&p, rows[r].o, rows[r].status) != want)
                fail_msg("row %zu (outcome %d, status %d), token 0x%x: want %d", r, rows[r].o, rows[r].status,
                         bit, want);
        }
        p.retry_on = ALL_TOKENS;
        assert_int_equal(vsr__policy_retriable(&p, rows[r].o, rows[r].status), rows[r].on != 0);
    }

    /* 429 listed: retried under retriable-status-codes as well */
    p.codes[1] = 429;
    p.n_codes = 2;
    p.retry_on = VSR_RETRY_RETRIABLE_STATUS_CODES;
    assert_true(vsr__policy_retriable(&p, VSR_OUTCOME_STATUS, 429));
    p.retry_on = VSR_RETRY_5XX | VSR_RETRY_GATEWAY_ERROR;
    assert_false(vsr__policy_retriable(&p, VSR_OUTCOME_STATUS, 429));

    /* no tokens with retries: the default connect-failure,refused-stream */
    p.retry_on = 0;
    p.retry_count = 2;
    assert_true(vsr__policy_retriable(&p, VSR_OUTCOME_CONNECT_FAILURE, 0));
    assert_false(vsr__policy_retriable(&p, VSR_OUTCOME_RESET, 0));
    assert_false(vsr__policy_retriable(&p, VSR_OUTCOME_STATUS, 503));
    p.retry_count = 0;
    assert_false(vsr__policy_retriable(&p, VSR_OUTCOME_CONNECT_FAILURE, 0));
}

/* ---- back-off ---- */

static void test_backoff(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr__policy_init(&p, 1000); /* 25 ms base, 250 ms max */
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 7);
    double mean[10];
    for (unsigned n = 1; n <= 9; n++) {
        uint64_t ceiling = VSR_MIN(25ull << (n - 1), 250ull);
        uint64_t sum = 0, hi = 0;
        for (int i = 0; i < 4000; i++) {
            uint64_t d = vsr__backoff_ms(&p, n, &rng);
            assert_true(d < ceiling);
            sum += d;
            hi = VSR_MAX(hi, d);
        }
        mean[n] = (double)sum / 4000;
        /* uniform over [0, ceiling): the top of the range is reached */
        assert_true(hi >= ceiling - ceiling / 20 - 1);
        assert_true(mean[n] > 0.45 * (double)ceiling && mean[n] < 0.55 * (double)ceiling);
    }
    /* grows until the cap (12.5, 25, 50, 100, then 125 on average) */
    for (unsigned n = 1; n <= 3; n++)
        assert_true(mean[n + 1] > 1.5 * mean[n]);
    assert_true(mean[5] > 1.1 * mean[4]);
    for (unsigned n = 6; n <= 9; n++)
        assert_true(mean[n] > 0.9 * mean[5] && mean[n] < 1.1 * mean[5]);

    /* absurd retry numbers do not overflow */
    for (int i = 0; i < 100; i++) {
        assert_true(vsr__backoff_ms(&p, 64, &rng) < 250);
        assert_true(vsr__backoff_ms(&p, UINT32_MAX, &rng) < 250);
    }
    /* n = 0 is treated as the first retry */
    for (int i = 0; i < 100; i++)
        assert_true(vsr__backoff_ms(&p, 0, &rng) < 25);
    /* max below base: max wins */
    p.backoff_base_ms = 100;
    p.backoff_max_ms = 40;
    for (int i = 0; i < 100; i++)
        assert_true(vsr__backoff_ms(&p, 1, &rng) < 40);
    p.backoff_base_ms = 0;
    assert_int_equal(vsr__backoff_ms(&p, 3, &rng), 0);
    /* a huge base caps without overflow */
    p.backoff_base_ms = UINT64_MAX / 2 + 1;
    p.backoff_max_ms = UINT64_MAX;
    assert_true(vsr__backoff_ms(&p, 5, &rng) < UINT64_MAX);
}

/* ---- Retry-After ---- */

#define DATE_1994 784111777.0 /* Sun, 06 Nov 1994 08:49:37 GMT */

static void assert_retry_after(const char *value, double now, uint64_t max_ms, uint64_t lo, uint64_t hi)
{
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 99);
    uint64_t min_seen = UINT64_MAX, max_seen = 0;
    for (int i = 0; i < 300; i++) {
        uint64_t d = 12345;
        int rc = vsr__retry_after_ms(vsr_slice_cstr(value), now, max_ms, &rng, &d);
        if (rc != VSR_OK)
            fail_msg("\"%s\": rc %d", value, rc);
        if (d < lo || (hi > lo ? d >= hi : d != lo))
            fail_msg("\"%s\": %llu not in [%llu, %llu)", value, (unsigned long long)d, (unsigned long long)lo,
                     (unsigned long long)hi);
        min_seen = VSR_MIN(min_seen, d);
        max_seen = VSR_MAX(max_seen, d);
    }
    if (hi > lo + 20) {
        /* the jitter really spreads over its range */
        uint64_t span = hi - lo;
        assert_true(min_seen < lo + span / 10);
        assert_true(max_seen >= hi - span / 10);
    }
}

static void test_retry_after(void **state)
{
    (void)state;
    const uint64_t big = 3600000;
    /* delay-seconds, plus up to 50% */
    assert_retry_after("5", DATE_1994, big, 5000, 7500);
    assert_retry_after(" 7\t", DATE_1994, big, 7000, 10500);
    assert_retry_after("0", DATE_1994, big, 0, 0);
    /* up to max it is honoured (jittered); beyond it, not at all: the
     * caller's back-off applies (ref §5.3, Envoy's rate-limited back-off) */
    assert_retry_after("30", DATE_1994, 30000, 30000, 45000);
    static const char *const beyond[] = {"31", "120", "99999999999999999999999999", "18446744073709551615"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(beyond); i++) {
        vsr_rng_t r;
        vsr__rng_seed(&r, 5);
        uint64_t out = 4242;
        assert_int_equal(vsr__retry_after_ms(vsr_slice_cstr(beyond[i]), DATE_1994, 30000, &r, &out), VSR_DECLINED);
        assert_int_equal(out, 4242);
    }
    uint64_t d0 = 4242;
    vsr_rng_t r0;
    vsr__rng_seed(&r0, 5);
    assert_int_equal(vsr__retry_after_ms(vsr_slice_cstr("5"), DATE_1994, 0, &r0, &d0), VSR_DECLINED);
    assert_retry_after("0", DATE_1994, 0, 0, 0);
    /* HTTP-dates, relative to now */
    assert_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", DATE_1994 - 10, big, 10000, 15000);
    assert_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", DATE_1994 - 10, big, 10000, 15000);
    assert_retry_after("Sun Nov  6 08:49:37 1994", DATE_1994 - 10, big, 10000, 15000);
    assert_retry_after("Sun, 06 Nov 1994 08:50:37 GMT", DATE_1994, big, 60000, 90000);
    assert_int_equal(vsr__retry_after_ms(vsr_slice_cstr("Sun, 06 Nov 1994 08:50:37 GMT"), DATE_1994, 20000, &r0, &d0),
                     VSR_DECLINED);
    /* now has a fraction: the wait is measured from it */
    assert_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", DATE_1994 - 0.5, big, 500, 750);
    /* past dates: no wait */
    assert_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", DATE_1994, big, 0, 0);
    assert_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", DATE_1994 + 3600, big, 0, 0);
    assert_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", DATE_1994, big, 0, 0);
    /* leap day, and the two-digit year taken in the right century */
    assert_retry_after("Thu, 29 Feb 2024 00:00:10 GMT", 1709164800.0, big, 10000, 15000);
    assert_retry_after("Sunday, 01-Mar-26 00:00:05 GMT", 1772323200.0, big, 5000, 7500);
    assert_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", 1772323200.0, big, 0, 0); /* 1994, not 2094 */

    static const char *const garbage[] = {
        "", "   ", "-5", "+5", "1.5", "5s", "abc", "5 6",
        "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Nov 1994 08:49:37", "sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT", "Sun, 31 Feb 1994 08:49:37 GMT",
        "Sun, 29 Feb 2023 08:49:37 GMT", "Sun, 00 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:37 GMT", "Sun, 06 Nov 1994 08:49:61 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMTx", "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 6 08:49:37 1994",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
    };
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 1);
    for (size_t i = 0; i < VSR_ARRAY_LEN(garbage); i++) {
        uint64_t d = 777;
        if (vsr__retry_after_ms(vsr_slice_cstr(garbage[i]), DATE_1994, big, &rng, &d) != VSR_ERR_INVALID)
            fail_msg("accepted \"%s\"", garbage[i]);
        assert_int_equal(d, 777);
    }
    /* not NUL-terminated: only the slice is read */
    uint64_t d = 0;
    assert_int_equal(vsr__retry_after_ms(vsr_slice("12345", 1), DATE_1994, big, &rng, &d), VSR_OK);
    assert_in_range(d, 1000, 1499);
}

/* ---- outlier ejection ---- */

typedef struct {
    vsr_endpoint_state_t st[8];
    vsr_endpoint_state_t *eps[8];
    size_t n;
} cluster_t;

static void cluster_init(cluster_t *c, size_t n)
{
    c->n = n;
    for (size_t i = 0; i < n; i++) {
        vsr__endpoint_state_init(&c->st[i]);
        c->eps[i] = &c->st[i];
    }
}

/* k consecutive 5xx on endpoint i; returns how many of the calls ejected it */
static int fail_k(cluster_t *c, size_t i, int k, const vsr_reliability_conf_t *rel, uint64_t now)
{
    int ejected = 0;
    for (int j = 0; j < k; j++)
        ejected += vsr__outlier_record(c->eps[i], 1, rel, c->eps, c->n, now);
    return ejected;
}

static void test_outlier_eject_and_return(void **state)
{
    (void)state;
    cluster_t c;
    cluster_init(&c, 4);
    vsr_reliability_conf_t rel = rel_none();
    rel.has_consecutive_5xx = 1, rel.consecutive_5xx = 3;
    uint64_t t = 1000;

    /* a success in between restarts the count */
    assert_int_equal(fail_k(&c, 0, 2, &rel, t), 0);
    assert_int_equal(vsr__outlier_record(c.eps[0], 0, &rel, c.eps, c.n, t), 0);
    assert_int_equal(fail_k(&c, 0, 2, &rel, t), 0);
    assert_false(vsr__outlier_ejected(c.eps[0], t));
    assert_int_equal(vsr__outlier_record(c.eps[0], 1, &rel, c.eps, c.n, t), 1);
    assert_true(vsr__outlier_ejected(c.eps[0], t));
    assert_int_equal(atomic_load(&c.st[0].consecutive_5xx), 0);
    assert_int_equal(atomic_load(&c.st[0].times_ejected), 1);

    /* ejection time = 30 s x times ejected, up to 300 s; re-ejected as soon
     * as it returns, so the multiplier never decays */
    for (unsigned k = 1; k <= 13; k++) {
        uint64_t dur = VSR_MIN(30000ull * k, 300000ull);
        assert_true(vsr__outlier_ejected(c.eps[0], t + dur - 1));
        assert_false(vsr__outlier_ejected(c.eps[0], t + dur)); /* back, cleared */
        assert_int_equal(atomic_load(&c.st[0].ejected_until_ms), 0);
        t += dur;
        /* results while it is out do not eject it again */
        if (k < 13)
            assert_int_equal(fail_k(&c, 0, 3, &rel, t), 1);
    }
    /* the multiplier stopped growing just past the cap (Envoy's rule) */
    assert_int_equal(atomic_load(&c.st[0].times_ejected), 11);

    /* a 5xx streak on an ejected endpoint is counted but changes nothing */
    assert_int_equal(fail_k(&c, 1, 3, &rel, t), 1);
    uint64_t until = atomic_load(&c.st[1].ejected_until_ms);
    assert_int_equal(fail_k(&c, 1, 3, &rel, t + 10), 0);
    assert_int_equal(atomic_load(&c.st[1].ejected_until_ms), until);
    assert_int_equal(atomic_load(&c.st[1].consecutive_5xx), 0);
}

/* TTFT ejection: the nearest-rank percentile of the window against the threshold */
static void test_outlier_ttft(void **state)
{
    (void)state;
    cluster_t c;
    cluster_init(&c, 2);
    vsr_reliability_conf_t rel = rel_none();
    uint64_t t = 100000;
    /* off without a threshold */
    for (int i = 0; i < 20; i++)
        assert_int_equal(vsr__outlier_ttft(c.eps[0], 5000, &rel, c.eps, c.n, t), 0);
    rel.has_ttft_ejection_threshold = 1, rel.ttft_ejection_threshold_ms = 100;
    rel.has_ttft_ejection_min_samples = 1, rel.ttft_ejection_min_samples = 10;
    rel.has_ttft_ejection_percentile = 1, rel.ttft_ejection_percentile = 90;
    rel.has_ttft_ejection_window = 1, rel.ttft_ejection_window_ms = 1000;
    t = 200000; /* a new window: the samples above are gone */
    /* 9 fast, then slow ones: p90 of 10 is rank 9 (fast), of 11 rank 10 (slow) */
    for (int i = 0; i < 9; i++)
        assert_int_equal(vsr__outlier_ttft(c.eps[0], 50, &rel, c.eps, c.n, t), 0);
    assert_int_equal(vsr__outlier_ttft(c.eps[0], 500, &rel, c.eps, c.n, t), 0);
    assert_int_equal(vsr__outlier_ttft(c.eps[0], 500, &rel, c.eps, c.n, t), 1);
    assert_true(vsr__outlier_ejected(c.eps[0], t));
    assert_int_equal(atomic_load(&c.st[0].ttft_n), 0); /* a clean window */
    /* the other endpoint: never both out at 50% */
    for (int i = 0; i < 10; i++)
        assert_int_equal(vsr__outlier_ttft(c.eps[1], 500, &rel, c.eps, c.n, t), 0);
    /* a window that ends before min_samples forgets its samples */
    for (int i = 0; i < 9; i++)
        vsr__outlier_ttft(c.eps[1], 500, &rel, c.eps, c.n, t + 40000);
    assert_int_equal(vsr__outlier_ttft(c.eps[1], 500, &rel, c.eps, c.n, t + 41000), 0);
}

static void test_outlier_decay(void **state)
{
    (void)state;
    cluster_t c;
    cluster_init(&c, 2);
    vsr_reliability_conf_t rel = rel_none();
    rel.has_consecutive_5xx = 1, rel.consecutive_5xx = 1;
    rel.has_base_ejection_time = 1, rel.base_ejection_time_ms = 5000;
    uint64_t t = 0;
    assert_int_equal(fail_k(&c, 0, 1, &rel, t), 1); /* 5 s */
    t += 5000;
    assert_int_equal(fail_k(&c, 0, 1, &rel, t), 1); /* 10 s */
    t += 10000;
    assert_false(vsr__outlier_ejected(c.eps[0], t));
    assert_int_equal(atomic_load(&c.st[0].times_ejected), 2);
    /* 10 s back in rotation: the multiplier lost one, so 2 x 5 s, not 3 x 5 s */
    t += 10000;
    assert_int_equal(fail_k(&c, 0, 1, &rel, t), 1);
    assert_int_equal(atomic_load(&c.st[0].ejected_until_ms), t + 10000);
    t += 10000;
    /* a long healthy spell forgets everything: back to 1 x base */
    t += 3600000;
    assert_int_equal(fail_k(&c, 0, 1, &rel, t), 1);
    assert_int_equal(atomic_load(&c.st[0].ejected_until_ms), t + 5000);
    assert_int_equal(atomic_load(&c.st[0].times_ejected), 1);

    /* a base above 300 s is the cap */
    cluster_init(&c, 2);
    rel.base_ejection_time_ms = 400000;
    assert_int_equal(fail_k(&c, 1, 1, &rel, 100), 1);
    assert_int_equal(atomic_load(&c.st[1].ejected_until_ms), 400100);
}

static void test_outlier_max_percent(void **state)
{
    (void)state;
    cluster_t c;
    vsr_reliability_conf_t rel = rel_none();
    rel.has_consecutive_5xx = 1, rel.consecutive_5xx = 2;
    uint64_t t = 50;

    /* default 50% of 4: two may be out, not three */
    cluster_init(&c, 4);
    assert_int_equal(fail_k(&c, 0, 2, &rel, t), 1);
    assert_int_equal(fail_k(&c, 1, 2, &rel, t), 1);
    assert_int_equal(fail_k(&c, 2, 2, &rel, t), 0);
    assert_false(vsr__outlier_ejected(c.eps[2], t));
    assert_int_equal(atomic_load(&c.st[2].consecutive_5xx), 0); /* the streak restarts */
    assert_int_equal(fail_k(&c, 2, 1, &rel, t), 0);
    /* once one is back, there is room again */
    t += 30000;
    assert_false(vsr__outlier_ejected(c.eps[0], t));
    assert_int_equal(fail_k(&c, 2, 1, &rel, t), 1);
    assert_int_equal(fail_k(&c, 3, 2, &rel, t), 1);
    assert_int_equal(fail_k(&c, 0, 2, &rel, t), 0);
    assert_true(vsr__outlier_ejected(c.eps[2], t));
    assert_true(vsr__outlier_ejected(c.eps[3], t));
    assert_false(vsr__outlier_ejected(c.eps[0], t));

    /* 50% of 2: one */
    cluster_init(&c, 2);
    assert_int_equal(fail_k(&c, 0, 2, &rel, t), 1);
    assert_int_equal(fail_k(&c, 1, 2, &rel, t), 0);

    /* 0%: none; 100%: all */
    rel.has_max_ejection_percent = 1, rel.max_ejection_percent = 0;
    cluster_init(&c, 4);
    assert_int_equal(fail_k(&c, 0, 2, &rel, t), 0);
    rel.max_ejection_percent = 100;
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(fail_k(&c, i, 2, &rel, t), 1);
    /* 30% of 3: not even one (Envoy counts the candidate: 33% > 30%) */
    rel.max_ejection_percent = 30;
    cluster_init(&c, 3);
    assert_int_equal(fail_k(&c, 0, 2, &rel, t), 0);
}

static void test_outlier_disabled(void **state)
{
    (void)state;
    cluster_t c;
    vsr_reliability_conf_t rel = rel_none();
    /* a single endpoint is never ejected */
    cluster_init(&c, 1);
    rel.has_consecutive_5xx = 1, rel.consecutive_5xx = 1;
    rel.has_max_ejection_percent = 1, rel.max_ejection_percent = 100;
    assert_int_equal(fail_k(&c, 0, 10, &rel, 5), 0);
    assert_false(vsr__outlier_ejected(c.eps[0], 5));
    /* consecutive_5xx absent or 0 */
    cluster_init(&c, 4);
    rel.consecutive_5xx = 0;
    assert_int_equal(fail_k(&c, 0, 100, &rel, 5), 0);
    rel = rel_none();
    assert_int_equal(fail_k(&c, 0, 100, &rel, 5), 0);
    assert_int_equal(vsr__outlier_record(c.eps[0], 1, NULL, c.eps, c.n, 5), 0);
    assert_false(vsr__outlier_ejected(c.eps[0], 5));
}

/* ---- health checks ---- */

static void test_health(void **state)
{
    (void)state;
    vsr_endpoint_state_t e;
    vsr__endpoint_state_init(&e);
    assert_int_equal(atomic_load(&e.healthy), 1);
    assert_int_equal(vsr__health_record(&e, 0), 0);
    assert_int_equal(vsr__health_record(&e, 0), 0);
    assert_int_equal(vsr__health_record(&e, 1), 0); /* the streak restarts */
    assert_int_equal(vsr__health_record(&e, 0), 0);
    assert_int_equal(vsr__health_record(&e, 0), 0);
    assert_int_equal(atomic_load(&e.healthy), 1);
    assert_int_equal(vsr__health_record(&e, 0), 1); /* third in a row */
    assert_int_equal(atomic_load(&e.healthy), 0);
    assert_int_equal(vsr__health_record(&e, 0), 0);
    assert_int_equal(vsr__health_record(&e, 1), 1); /* one success */
    assert_int_equal(atomic_load(&e.healthy), 1);
    assert_int_equal(vsr__health_record(&e, 1), 0);
    assert_int_equal(vsr__health_record(&e, 0), 0);
}

/* ---- load balancing ---- */

static int pick(cluster_t *c, const uint32_t *w, int64_t *cur, int lr, uint64_t excl, uint64_t now, vsr_rng_t *rng)
{
    int i = vsr__lb_pick(c->eps, w, cur, c->n, lr, excl, now, rng);
    assert_true(i >= 0 && (size_t)i < c->n);
    return i;
}

static void test_lb_weighted_rr(void **state)
{
    (void)state;
    cluster_t c;
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 3);

    /* 3:1 gives a, a, b, a in every cycle of four */
    cluster_init(&c, 2);
    uint32_t w31[] = {3, 1};
    int64_t cur[8] = {0};
    for (int cyc = 0; cyc < 100; cyc++) {
        assert_int_equal(pick(&c, w31, cur, 0, 0, 0, &rng), 0);
        assert_int_equal(pick(&c, w31, cur, 0, 0, 0, &rng), 0);
        assert_int_equal(pick(&c, w31, cur, 0, 0, 0, &rng), 1);
        assert_int_equal(pick(&c, w31, cur, 0, 0, 0, &rng), 0);
    }

    /* nginx's example: 5:1:1 gives a a b a c a a */
    cluster_init(&c, 3);
    uint32_t w511[] = {5, 1, 1};
    static const int seq[] = {0, 0, 1, 0, 2, 0, 0};
    memset(cur, 0, sizeof(cur));
    for (int cyc = 0; cyc < 20; cyc++)
        for (size_t k = 0; k < VSR_ARRAY_LEN(seq); k++)
            assert_int_equal(pick(&c, w511, cur, 0, 0, 0, &rng), seq[k]);

    /* NULL weights and zero weights count as 1: plain rotation */
    memset(cur, 0, sizeof(cur));
    for (int k = 0; k < 30; k++)
        assert_int_equal(pick(&c, NULL, cur, 0, 0, 0, &rng), k % 3);
    uint32_t w0[] = {0, 1, 0};
    memset(cur, 0, sizeof(cur));
    for (int k = 0; k < 30; k++)
        assert_int_equal(pick(&c, w0, cur, 0, 0, 0, &rng), k % 3);

    /* 80:20 over 1000 picks: exactly 800 and 200 */
    cluster_init(&c, 2);
    uint32_t w82[] = {80, 20};
    memset(cur, 0, sizeof(cur));
    int count[2] = {0, 0};
    for (int k = 0; k < 1000; k++)
        count[pick(&c, w82, cur, 0, 0, 0, &rng)]++;
    assert_int_equal(count[0], 800);
    assert_int_equal(count[1], 200);
}

static void test_lb_exclude(void **state)
{
    (void)state;
    cluster_t c;
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 4);
    int64_t cur[8] = {0};
    uint32_t w[] = {3, 1, 1};
    cluster_init(&c, 3);
    for (int lr = 0; lr <= 1; lr++) {
        for (int k = 0; k < 100; k++) {
            int i = pick(&c, w, cur, lr, 1u << 0, 0, &rng);
            assert_true(i == 1 || i == 2);
            assert_int_equal(pick(&c, w, cur, lr, (1u << 0) | (1u << 2), 0, &rng), 1);
        }
        /* everything tried: any endpoint rather than none */
        for (int k = 0; k < 10; k++)
            pick(&c, w, cur, lr, 0x7, 0, &rng);
        /* the only untried endpoint is unhealthy: a tried healthy one is
         * taken again rather than it */
        atomic_store(&c.st[1].healthy, 0);
        for (int k = 0; k < 50; k++)
            assert_int_not_equal(pick(&c, w, cur, lr, (1u << 0) | (1u << 2), 0, &rng), 1);
        atomic_store(&c.st[1].healthy, 1);
    }
}

static void test_lb_health_and_panic(void **state)
{
    (void)state;
    cluster_t c;
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 5);
    int64_t cur[8] = {0};
    cluster_init(&c, 4);
    uint64_t now = 1000;

    for (int lr = 0; lr <= 1; lr++) {
        /* one unhealthy, one ejected: never chosen; the others all are */
        cluster_init(&c, 4);
        atomic_store(&c.st[1].healthy, 0);
        atomic_store(&c.st[3].ejected_until_ms, now + 100);
        int count[4] = {0};
        for (int k = 0; k < 400; k++)
            count[pick(&c, NULL, cur, lr, 0, now, &rng)]++;
        assert_int_equal(count[1], 0);
        assert_int_equal(count[3], 0);
        assert_true(count[0] > 100 && count[2] > 100);
        /* the ejection ends: back in the rotation */
        memset(count, 0, sizeof(count));
        for (int k = 0; k < 400; k++)
            count[pick(&c, NULL, cur, lr, 0, now + 100, &rng)]++;
        assert_true(count[3] > 50);
        assert_int_equal(count[1], 0);

        /* 3 of 4 unavailable (> 50%): panic, all are used */
        atomic_store(&c.st[0].healthy, 0);
        atomic_store(&c.st[2].ejected_until_ms, now + 1000);
        memset(count, 0, sizeof(count));
        for (int k = 0; k < 400; k++)
            count[pick(&c, NULL, cur, lr, 0, now + 100, &rng)]++;
        for (int i = 0; i < 4; i++)
            assert_true(count[i] > 50);
        /* in panic, exclusion still steers the retry */
        for (int k = 0; k < 50; k++)
            assert_int_equal(pick(&c, NULL, cur, lr, 0xE, now + 100, &rng), 0);
    }

    /* exactly 50% unavailable is not panic */
    cluster_init(&c, 2);
    atomic_store(&c.st[0].healthy, 0);
    for (int k = 0; k < 50; k++) {
        assert_int_equal(pick(&c, NULL, cur, 0, 0, now, &rng), 1);
        assert_int_equal(pick(&c, NULL, cur, 1, 0, now, &rng), 1);
    }
    /* a single unhealthy endpoint is still used */
    cluster_init(&c, 1);
    atomic_store(&c.st[0].healthy, 0);
    assert_int_equal(pick(&c, NULL, cur, 0, 0, now, &rng), 0);
    assert_int_equal(pick(&c, NULL, cur, 1, 1, now, &rng), 0);
}

static void test_lb_p2c(void **state)
{
    (void)state;
    cluster_t c;
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 6);

    /* two endpoints: both are always sampled, the idle one always wins */
    cluster_init(&c, 2);
    atomic_store(&c.st[0].active, 10);
    for (int k = 0; k < 1000; k++)
        assert_int_equal(pick(&c, NULL, NULL, 1, 0, 0, &rng), 1);

    /* idle, busy, busy: the idle one wins whenever it is sampled (2 in 3) */
    cluster_init(&c, 3);
    atomic_store(&c.st[1].active, 10);
    atomic_store(&c.st[2].active, 10);
    int count[3] = {0};
    for (int k = 0; k < 3000; k++)
        count[pick(&c, NULL, NULL, 1, 0, 0, &rng)]++;
    assert_in_range(count[0], 1850, 2150);
    assert_in_range(count[1], 400, 600);
    assert_in_range(count[2], 400, 600);

    /* the most loaded of several is never picked */
    cluster_init(&c, 5);
    for (int i = 0; i < 5; i++)
        atomic_store(&c.st[i].active, (unsigned)(i * 3 + 1));
    int count5[5] = {0};
    for (int k = 0; k < 2000; k++)
        count5[pick(&c, NULL, NULL, 1, 0, 0, &rng)]++;
    assert_int_equal(count5[4], 0);
    for (int i = 0; i < 3; i++)
        assert_true(count5[i] > count5[i + 1]);

    /* equal load: the heavier weight wins */
    cluster_init(&c, 2);
    uint32_t w[] = {1, 5};
    for (int k = 0; k < 200; k++)
        assert_int_equal(pick(&c, w, NULL, 1, 0, 0, &rng), 1);
    /* equal load and weight: both get picked */
    int count2[2] = {0};
    for (int k = 0; k < 1000; k++)
        count2[pick(&c, NULL, NULL, 1, 0, 0, &rng)]++;
    assert_in_range(count2[0], 400, 600);
}

/* An endpoint whose host has not resolved is never picked while another
 * is left, not even in panic (it has no address). */
static void test_lb_skips_unresolved(void **state)
{
    (void)state;
    cluster_t c;
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 5);
    cluster_init(&c, 3);
    atomic_store(&c.st[1].unresolved, 1);
    int64_t cur[3] = {0};
    for (int k = 0; k < 60; k++) {
        assert_int_not_equal(pick(&c, NULL, cur, 0, 0, 0, &rng), 1);
        assert_int_not_equal(pick(&c, NULL, NULL, 1, 0, 0, &rng), 1);
    }
    /* panic (two of three unavailable): the unhealthy one is used, the unresolved one is not */
    atomic_store(&c.st[2].healthy, 0);
    for (int k = 0; k < 60; k++)
        assert_int_not_equal(pick(&c, NULL, cur, 0, 0, 0, &rng), 1);
    /* resolved: back in rotation */
    atomic_store(&c.st[1].unresolved, 0);
    int seen1 = 0;
    for (int k = 0; k < 60; k++)
        seen1 |= pick(&c, NULL, cur, 0, 0, 0, &rng) == 1;
    assert_true(seen1);
}

static void test_lb_bounds(void **state)
{
    (void)state;
    vsr_rng_t rng;
    vsr__rng_seed(&rng, 8);
    assert_int_equal(vsr__lb_pick(NULL, NULL, NULL, 0, 0, 0, 0, &rng), -1);
    assert_int_equal(vsr__lb_pick(NULL, NULL, NULL, 0, 1, ~0ull, 0, &rng), -1);

    enum { N = 70 };
    vsr_endpoint_state_t st[N];
    vsr_endpoint_state_t *eps[N];
    uint32_t w[N];
    int64_t cur[N];
    for (int round = 0; round < 2000; round++) {
        size_t n = 1 + (size_t)vsr__rng_below(&rng, N);
        for (size_t i = 0; i < n; i++) {
            vsr__endpoint_state_init(&st[i]);
            eps[i] = &st[i];
            atomic_store(&st[i].healthy, vsr__rng_below(&rng, 3) != 0);
            if (vsr__rng_below(&rng, 4) == 0)
                atomic_store(&st[i].ejected_until_ms, 50 + vsr__rng_below(&rng, 100));
            atomic_store(&st[i].active, (unsigned)vsr__rng_below(&rng, 5));
            w[i] = (uint32_t)vsr__rng_below(&rng, 4);
            cur[i] = 0;
        }
        uint64_t excl = vsr__rng_next(&rng);
        for (int k = 0; k < 5; k++) {
            int i = vsr__lb_pick(eps, w, cur, n, round & 1, excl, 100, &rng);
            assert_true(i >= 0 && (size_t)i < n);
        }
    }

    /* beyond 64 endpoints, the mask does not reach: those stay eligible */
    for (size_t i = 0; i < N; i++) {
        vsr__endpoint_state_init(&st[i]);
        eps[i] = &st[i];
        cur[i] = 0;
    }
    for (int k = 0; k < 60; k++) {
        int i = vsr__lb_pick(eps, NULL, cur, N, k & 1, ~0ull, 0, &rng);
        assert_true(i >= 64 && i < N);
    }
}

/* ---- retry budget ---- */

static void test_budget(void **state)
{
    (void)state;
    vsr_policy_t p;
    vsr__policy_init(&p, 1000);
    assert_true(vsr__budget_allows(0, 1000, &p)); /* no budget */

    vsr_reliability_conf_t l = rel_none();
    l.has_retry_budget_percent = 1, l.retry_budget_percent = 20;
    vsr__policy_merge(&p, &l);
    /* few requests: the floor of 3 */
    assert_true(vsr__budget_allows(0, 0, &p));
    assert_true(vsr__budget_allows(10, 2, &p));
    assert_false(vsr__budget_allows(10, 3, &p));
    /* many: 20% of them */
    assert_true(vsr__budget_allows(100, 19, &p));
    assert_false(vsr__budget_allows(100, 20, &p));
    assert_true(vsr__budget_allows(UINT32_MAX, UINT32_MAX / 5 - 1, &p));
    p.budget_percent = 100;
    p.budget_min_concurrency = 0;
    assert_false(vsr__budget_allows(0, 0, &p));
    assert_true(vsr__budget_allows(5, 4, &p));
    assert_false(vsr__budget_allows(5, 5, &p));
}

/* ---- circuit breaker ---- */

static void test_breaker(void **state)
{
    (void)state;
    vsr_breaker_t b;
    vsr_breaker_conf_t c;
    vsr__breaker_conf_init(&c, NULL);
    assert_int_equal(c.consecutive_failures, 3);
    assert_int_equal(c.cooldown_ms, 30000);
    assert_int_equal(c.half_open_probes, 1);
    vsr__breaker_init(&b);
    uint64_t t = 0; /* opening at time 0 must work too */

    assert_true(vsr__breaker_allow(&b, &c, t));
    vsr__breaker_record(&b, &c, 0, t);
    vsr__breaker_record(&b, &c, 0, t);
    vsr__breaker_record(&b, &c, 1, t); /* a success restarts the count */
    vsr__breaker_record(&b, &c, 0, t);
    vsr__breaker_record(&b, &c, 0, t);
    assert_int_equal(vsr__breaker_state(&b, &c, t), VSR_BREAKER_CLOSED);
    assert_true(vsr__breaker_allow(&b, &c, t));
    vsr__breaker_record(&b, &c, 0, t); /* third in a row */
    assert_int_equal(vsr__breaker_state(&b, &c, t), VSR_BREAKER_OPEN);
    assert_false(vsr__breaker_allow(&b, &c, t));
    assert_false(vsr__breaker_allow(&b, &c, t + 29998));

    /* cooldown over: one probe, no second */
    t += 30000;
    assert_int_equal(vsr__breaker_state(&b, &c, t), VSR_BREAKER_HALF_OPEN);
    assert_true(vsr__breaker_allow(&b, &c, t));
    assert_false(vsr__breaker_allow(&b, &c, t));
    assert_false(vsr__breaker_allow(&b, &c, t + 100));
    vsr__breaker_record(&b, &c, 1, t + 200); /* the probe succeeded */
    assert_int_equal(vsr__breaker_state(&b, &c, t + 200), VSR_BREAKER_CLOSED);
    for (int i = 0; i < 5; i++)
        assert_true(vsr__breaker_allow(&b, &c, t + 200));

    /* open again; the probe fails: reopened for a whole cooldown */
    t = 100000;
    for (int i = 0; i < 3; i++)
        vsr__breaker_record(&b, &c, 0, t);
    assert_false(vsr__breaker_allow(&b, &c, t + 29999));
    assert_true(vsr__breaker_allow(&b, &c, t + 30000));
    vsr__breaker_record(&b, &c, 0, t + 31000);
    assert_int_equal(vsr__breaker_state(&b, &c, t + 31000), VSR_BREAKER_OPEN);
    assert_false(vsr__breaker_allow(&b, &c, t + 60000));
    assert_false(vsr__breaker_allow(&b, &c, t + 60999));
    assert_true(vsr__breaker_allow(&b, &c, t + 61000));

    /* a probe that never reports: a fresh one a cooldown later */
    assert_false(vsr__breaker_allow(&b, &c, t + 61000 + 29999));
    assert_true(vsr__breaker_allow(&b, &c, t + 61000 + 30000));
    assert_false(vsr__breaker_allow(&b, &c, t + 61000 + 30001));

    /* a straggler failure while open restarts the cooldown */
    vsr__breaker_init(&b);
    t = 500000;
    for (int i = 0; i < 3; i++)
        vsr__breaker_record(&b, &c, 0, t);
    vsr__breaker_record(&b, &c, 0, t + 20000);
    assert_false(vsr__breaker_allow(&b, &c, t + 30000));
    assert_true(vsr__breaker_allow(&b, &c, t + 50000));
}

/* vsr__breaker_record says when it moved the breaker, for the log lines. */
static void test_breaker_transitions(void **state)
{
    (void)state;
    vsr_breaker_t b;
    vsr_breaker_conf_t c;
    vsr__breaker_conf_init(&c, NULL);
    vsr__breaker_init(&b);
    uint64_t t = 1000;
    assert_int_equal(vsr__breaker_record(&b, &c, 1, t), 0);     /* closed stays closed */
    assert_int_equal(vsr__breaker_record(&b, &c, 0, t), 0);
    assert_int_equal(vsr__breaker_record(&b, &c, 0, t), 0);
    assert_int_equal(vsr__breaker_record(&b, &c, 0, t), 1);     /* the third opens it */
    assert_int_equal(vsr__breaker_record(&b, &c, 0, t + 10), 0); /* a straggler while open */
    assert_true(vsr__breaker_allow(&b, &c, t + 10 + 30000));
    assert_int_equal(vsr__breaker_record(&b, &c, 0, t + 10 + 30000), 1); /* the probe failed: reopened */
    assert_true(vsr__breaker_allow(&b, &c, t + 10 + 60000));
    assert_int_equal(vsr__breaker_record(&b, &c, 1, t + 10 + 60000), -1); /* the probe closed it */
    assert_int_equal(vsr__breaker_record(&b, &c, 1, t + 10 + 60000), 0);
}

static void test_breaker_conf(void **state)
{
    (void)state;
    vsr_breaker_t b;
    vsr_breaker_conf_t c;
    vsr_fallback_conf_t f;
    memset(&f, 0, sizeof(f));
    f.has_cb_consecutive_failures = 1, f.cb_consecutive_failures = 1;
    f.has_cb_half_open_probes = 1, f.cb_half_open_probes = 2;
    vsr__breaker_conf_init(&c, &f);
    assert_int_equal(c.consecutive_failures, 1);
    assert_int_equal(c.cooldown_ms, 30000);
    assert_int_equal(c.half_open_probes, 2);

    /* two probes at once, then none */
    vsr__breaker_init(&b);
    vsr__breaker_record(&b, &c, 0, 10);
    assert_false(vsr__breaker_allow(&b, &c, 20));
    assert_true(vsr__breaker_allow(&b, &c, 30010));
    assert_true(vsr__breaker_allow(&b, &c, 30010));
    assert_false(vsr__breaker_allow(&b, &c, 30010));

    /* half_open_probes 0 still lets one through */
    c.half_open_probes = 0;
    vsr__breaker_init(&b);
    vsr__breaker_record(&b, &c, 0, 10);
    assert_true(vsr__breaker_allow(&b, &c, 30010));
    assert_false(vsr__breaker_allow(&b, &c, 30010));

    /* cooldown 0: half-open at once */
    c.cooldown_ms = 0;
    vsr__breaker_init(&b);
    vsr__breaker_record(&b, &c, 0, 10);
    assert_int_equal(vsr__breaker_state(&b, &c, 10), VSR_BREAKER_HALF_OPEN);
    assert_true(vsr__breaker_allow(&b, &c, 10));

    /* consecutive_failures 0 disables the breaker */
    f.cb_consecutive_failures = 0;
    f.has_cb_cooldown_period = 1, f.cb_cooldown_period_ms = 5000;
    vsr__breaker_conf_init(&c, &f);
    assert_int_equal(c.cooldown_ms, 5000);
    vsr__breaker_init(&b);
    for (int i = 0; i < 100; i++)
        vsr__breaker_record(&b, &c, 0, 10);
    assert_true(vsr__breaker_allow(&b, &c, 10));
    assert_int_equal(vsr__breaker_state(&b, &c, 10), VSR_BREAKER_CLOSED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_policy_defaults),
        cmocka_unit_test(test_merge_replace),
        cmocka_unit_test(test_merge_add),
        cmocka_unit_test(test_merge_default_retry_on),
        cmocka_unit_test(test_retry_on_compiled_at_load),
        cmocka_unit_test(test_merge_decision_retry_count),
        cmocka_unit_test(test_merge_backoff),
        cmocka_unit_test(test_merge_budget),
        cmocka_unit_test(test_retry_on_parse),
        cmocka_unit_test(test_retriable_table),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_outlier_eject_and_return),
        cmocka_unit_test(test_outlier_decay),
        cmocka_unit_test(test_outlier_ttft),
        cmocka_unit_test(test_outlier_max_percent),
        cmocka_unit_test(test_outlier_disabled),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_lb_weighted_rr),
        cmocka_unit_test(test_lb_exclude),
        cmocka_unit_test(test_lb_health_and_panic),
        cmocka_unit_test(test_lb_p2c),
        cmocka_unit_test(test_lb_bounds),
        cmocka_unit_test(test_lb_skips_unresolved),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_breaker),
        cmocka_unit_test(test_breaker_transitions),
        cmocka_unit_test(test_breaker_conf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
