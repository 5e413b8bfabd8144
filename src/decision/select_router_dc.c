/*
 * select_router_dc.c — the router_dc selector (ref §3.8, the reference's
 * pkg/selection/router_dc.go): the candidate whose modelCards description
 * is nearest the query, by a temperature-scaled cosine similarity.
 *
 * The caller brings the cosines (the embeddings come from the runtime);
 * this file is the reference's arithmetic and its fallback.
 */
#include "decision/decision.h"

#include <math.h>
#include <string.h>

static void take_first(vsr_select_result_t *out, size_t n, const char *warning)
{
    memset(out->scored, 0, sizeof(out->scored));
    for (size_t i = 0; i < n; i++) { /* the reference's defaultSelection: 1/n each */
        out->scores[i] = 1.0 / (double)n;
        out->scored[i] = 1;
    }
    out->chosen = 0;
    out->score = out->scores[0];
    out->warning = warning;
}

void vsr_select_router_dc(const vsr_algo_router_dc_conf_t *c, uint32_t minimum_candidates, const double *cosine,
                          const unsigned char *has, size_t n, vsr_select_result_t *out)
{
    memset(out, 0, sizeof(*out));
    VSR_BUG_ON(n == 0 || n > VSR_SELECT_MAX_CANDIDATES);
    double t = c->temperature > 0 ? c->temperature : 0.07;
    double raw[VSR_SELECT_MAX_CANDIDATES];
    double best_score = 0; /* the reference starts at 0 and takes a strictly higher one */
    int best = -1;
    size_t embedded = 0;
    for (size_t i = 0; i < n; i++) {
        if (!has[i] || !isfinite(cosine[i])) {
            raw[i] = c->min_similarity;
            out->dropped[i] = "no description embedding";
            continue;
        }
        embedded++;
        raw[i] = 1.0 / (1.0 + exp(-cosine[i] / t));
        if (raw[i] > best_score) {
            best_score = raw[i];
            best = (int)i;
        }
    }
    if (embedded == 0) {
        take_first(out, n, "router_dc: no candidate has a description embedding; the first candidate");
        return;
    }
    if (embedded < (minimum_candidates ? minimum_candidates : 1)) {
        take_first(out, n, "router_dc: fewer candidates with a description embedding than minimum_candidates; "
                           "the first candidate");
        return;
    }
    if (best < 0 || best_score < c->min_similarity) {
        take_first(out, n, "router_dc: no candidate above min_similarity; the first candidate");
        return;
    }
    double max = raw[0];
    for (size_t i = 1; i < n; i++)
        if (raw[i] > max)
            max = raw[i];
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        out->scores[i] = exp((raw[i] - max) / t);
        sum += out->scores[i];
    }
    for (size_t i = 0; i < n; i++) {
        out->scores[i] /= sum;
        out->scored[i] = 1;
    }
    out->chosen = best;
    out->score = out->scores[best];
}
