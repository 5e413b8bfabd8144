/*
 * algo_confidence.c — the confidence algorithm's scoring and the order in
 * which it escalates through the candidates.  See algo.h.
 */
#include <math.h>
#include <stdlib.h>

#include "algo.h"
#include "config/config.h"

int vsr__algo_confidence_method(vsr_slice_t name)
{
    static const char *const names[] = {"avg_logprob", "margin", "hybrid", "self_verify", "automix_entailment"};
    if (name.len == 0)
        return VSR_ALGO_CONF_AVG_LOGPROB;
    for (size_t i = 0; i < VSR_ARRAY_LEN(names); i++)
        if (vsr_slice_eq_cstr(name, names[i]))
            return (int)i;
    return VSR_ERR_INVALID;
}

double vsr__algo_confidence_default_threshold(const char *method)
{
    static const double thresholds[] = {-1.0, 0.5, 0.5, 0.7, 0.7};
    int m = vsr__algo_confidence_method(vsr_slice_cstr(method));
    return m < 0 ? 0.0 : thresholds[m];
}

int vsr__algo_confidence_needs_top2(int method)
{
    return method == VSR_ALGO_CONF_MARGIN || method == VSR_ALGO_CONF_HYBRID;
}

int vsr__algo_confidence(const vsr_algo_completion_t *c, int method, double logprob_weight, double margin_weight,
                         int tool_args_only, double *out)
{
    if (method != VSR_ALGO_CONF_AVG_LOGPROB && method != VSR_ALGO_CONF_MARGIN && method != VSR_ALGO_CONF_HYBRID)
        return VSR_ERR_INVALID;
    if (!c->has_logprobs || c->n_tokens == 0)
        return VSR_ERR_INVALID;
    double lp_sum = 0, m_sum = 0;
    size_t lp_n = 0, m_n = 0;
    for (size_t i = 0; i < c->n_tokens; i++) {
        const vsr_algo_token_t *t = &c->tokens[i];
        if (tool_args_only && !t->is_tool_arg)
            continue;
        lp_sum += t->logprob;
        lp_n++;
        if (!isnan(t->margin)) {
            m_sum += t->margin;
            m_n++;
        }
    }
    if (lp_n == 0)
        return VSR_ERR_INVALID;
    double lp = (lp_sum / (double)lp_n + 3.0) / 3.0;
    lp = lp < 0 ? 0 : lp > 1 ? 1 : lp;
    if (method == VSR_ALGO_CONF_AVG_LOGPROB) {
        *out = lp;
        return VSR_OK;
    }
    if (m_n == 0)
        return VSR_ERR_INVALID;
    double m = m_sum / (double)m_n;
    double ms = m <= 0 ? 0 : 1.0 - exp(-m / 3.0);
    *out = method == VSR_ALGO_CONF_MARGIN ? ms : logprob_weight * lp + margin_weight * ms;
    return VSR_OK;
}

/* ---- escalation order --------------------------------------------------- */

int vsr__algo_order_parse(vsr_slice_t name)
{
    if (name.len == 0 || vsr_slice_eq_cstr(name, "size") || vsr_slice_eq_cstr(name, "small_to_large"))
        return VSR_ALGO_ORDER_SIZE;
    if (vsr_slice_eq_cstr(name, "declared"))
        return VSR_ALGO_ORDER_DECLARED;
    if (vsr_slice_eq_cstr(name, "cost"))
        return VSR_ALGO_ORDER_COST;
    if (vsr_slice_eq_cstr(name, "automix"))
        return VSR_ALGO_ORDER_AUTOMIX;
    return VSR_ERR_INVALID;
}

int vsr__algo_parse_param_size(const char *s, double *out)
{
    return vsr_config_param_size(s, out);
}

void vsr__algo_escalation_order(int order, const vsr_algo_candidate_t *c, size_t n, double tradeoff, size_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = i;
    if (order != VSR_ALGO_ORDER_SIZE && order != VSR_ALGO_ORDER_COST && order != VSR_ALGO_ORDER_AUTOMIX)
        return;
    double t = isnan(tradeoff) ? 0.3 : tradeoff < 0 ? 0 : tradeoff > 1 ? 1 : tradeoff;
    double max_cost = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(c[i].prompt_per_1m) && c[i].prompt_per_1m > max_cost)
            max_cost = c[i].prompt_per_1m;
    /* Insertion sort on a key (smaller first; NAN = unknown, last): stable. */
    double key_of[64];
    double *key = n <= VSR_ARRAY_LEN(key_of) ? key_of : vsr_malloc(n * sizeof(*key));
    for (size_t i = 0; i < n; i++) {
        if (order == VSR_ALGO_ORDER_SIZE) {
            key[i] = c[i].param_size;
        } else if (order == VSR_ALGO_ORDER_COST) {
            key[i] = c[i].prompt_per_1m;
        } else {
            double q = isnan(c[i].quality_score) ? 0.5 : c[i].quality_score;
            double cs = 0.5;
            if (isfinite(c[i].prompt_per_1m))
                cs = max_cost > 0 ? 1.0 - c[i].prompt_per_1m / max_cost : 1.0;
            key[i] = -((1.0 - t) * q + t * cs); /* descending value */
        }
    }
    for (size_t i = 1; i < n; i++) {
        size_t x = out[i];
        size_t j = i;
        while (j > 0) {
            double a = key[out[j - 1]], b = key[x];
            int after = isnan(b) ? 0 : (isnan(a) || a > b); /* x goes before out[j-1] */
            if (!after)
                break;
            out[j] = out[j - 1];
            j--;
        }
        out[j] = x;
    }
    if (key != key_of)
        vsr_free(key);
}
