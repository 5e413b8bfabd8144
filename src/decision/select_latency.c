/*
 * select_latency.c — the latency_aware selector (ref §3.8, the reference's
 * pkg/selection/latency_aware.go): among the candidates with live
 * statistics, the one whose TPOT and TTFT percentiles are lowest relative to
 * the best of each.
 */
#include "decision/decision.h"

#include <float.h>
#include <string.h>

static void take_first(vsr_select_result_t *out, const char *warning)
{
    memset(out->scored, 0, sizeof(out->scored));
    out->chosen = 0;
    out->score = 1.0;
    out->scores[0] = 1.0; /* the reference reports the default candidate with 1.0 */
    out->scored[0] = 1;
    out->warning = warning;
}

void vsr_select_latency_aware(const vsr_algo_latency_conf_t *c, uint32_t minimum_candidates,
                              const vsr_select_input_t *in, size_t n, vsr_select_result_t *out)
{
    memset(out, 0, sizeof(*out));
    VSR_BUG_ON(n == 0 || n > VSR_SELECT_MAX_CANDIDATES);
    int tpot = c->tpot_percentile > 0, ttft = c->ttft_percentile > 0;
    if (!tpot && !ttft) {
        take_first(out, "latency_aware: no tpot_percentile or ttft_percentile; the first candidate");
        return;
    }
    double min_tpot = DBL_MAX, min_ttft = DBL_MAX;
    size_t with_data = 0;
    for (size_t i = 0; i < n; i++) {
        if ((tpot && !in[i].has_tpot) || (ttft && !in[i].has_ttft)) {
            out->dropped[i] = "no latency statistics";
            continue;
        }
        with_data++;
        if (tpot && in[i].tpot_ms < min_tpot)
            min_tpot = in[i].tpot_ms;
        if (ttft && in[i].ttft_ms < min_ttft)
            min_ttft = in[i].ttft_ms;
    }
    if (with_data == 0) {
        take_first(out, "latency_aware: no latency statistics for any candidate yet; the first candidate");
        return;
    }
    /* vsr: a candidate without statistics and with no request in flight is
     * tried (one at a time), or nothing would ever measure it */
    for (size_t i = 0; i < n; i++)
        if (out->dropped[i] && in[i].inflight <= 0) {
            out->chosen = (int)i;
            out->score = 0;
            out->probe = 1;
            return;
        }
    if (with_data < (minimum_candidates ? minimum_candidates : 1)) {
        take_first(out, "latency_aware: fewer candidates with latency statistics than minimum_candidates; "
                        "the first candidate");
        return;
    }
    /* a minimum of 0 (or less) divides by 1, as the reference's positiveDenominator */
    double den_tpot = min_tpot > 0 ? min_tpot : 1.0, den_ttft = min_ttft > 0 ? min_ttft : 1.0;
    int best = -1;
    for (size_t i = 0; i < n; i++) {
        if (out->dropped[i])
            continue;
        double s = 0;
        int parts = 0;
        if (tpot) {
            s += in[i].tpot_ms / den_tpot;
            parts++;
        }
        if (ttft) {
            s += in[i].ttft_ms / den_ttft;
            parts++;
        }
        s /= parts;
        out->scores[i] = s;
        out->scored[i] = 1;
        if (best < 0 || s < out->scores[best])
            best = (int)i;
    }
    out->chosen = best;
    out->score = out->scores[best];
}
