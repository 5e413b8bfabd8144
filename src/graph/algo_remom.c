/*
 * algo_remom.c — ReMoM's deterministic parts: the PCG32 generator, the
 * spreading of a round's calls over models, the order answers are embedded
 * in, compaction and the choice of the result.  See algo.h.
 */
#include <math.h>
#include <stdlib.h>

#include "algo.h"

/* ---- PCG32 (pcg_basic.c, O'Neill) ---------------------------------------- */

#define PCG_MULT 6364136223846793005ULL

uint32_t vsr__algo_pcg_next(vsr_algo_pcg_t *g)
{
    uint64_t old = g->state;
    g->state = old * PCG_MULT + g->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

void vsr__algo_pcg_seed_seq(vsr_algo_pcg_t *g, uint64_t seed, uint64_t seq)
{
    g->state = 0;
    g->inc = (seq << 1u) | 1u;
    (void)vsr__algo_pcg_next(g);
    g->state += seed;
    (void)vsr__algo_pcg_next(g);
}

void vsr__algo_pcg_seed(vsr_algo_pcg_t *g, uint64_t seed)
{
    vsr__algo_pcg_seed_seq(g, seed, VSR_ALGO_PCG_SEQ);
}

uint32_t vsr__algo_pcg_bounded(vsr_algo_pcg_t *g, uint32_t n)
{
    if (n == 0)
        return 0;
    uint32_t threshold = (uint32_t)(-n) % n;
    /* Each draw is rejected with probability < 1/2: the loop ends fast. */
    for (;;) {
        uint32_t r = vsr__algo_pcg_next(g);
        if (r >= threshold)
            return r % n;
    }
}

void vsr__algo_pcg_shuffle(vsr_algo_pcg_t *g, size_t *a, size_t n)
{
    VSR_BUG_ON(n > UINT32_MAX);
    for (size_t i = n; i > 1; i--) {
        size_t j = vsr__algo_pcg_bounded(g, (uint32_t)i);
        size_t tmp = a[i - 1];
        a[i - 1] = a[j];
        a[j] = tmp;
    }
}

/* ---- distribution ----------------------------------------------------- */

int vsr__algo_dist_parse(vsr_slice_t name)
{
    if (name.len == 0 || vsr_slice_eq_cstr(name, "weighted"))
        return VSR_ALGO_DIST_WEIGHTED;
    if (vsr_slice_eq_cstr(name, "equal"))
        return VSR_ALGO_DIST_EQUAL;
    if (vsr_slice_eq_cstr(name, "round_robin"))
        return VSR_ALGO_DIST_ROUND_ROBIN;
    if (vsr_slice_eq_cstr(name, "first_only"))
        return VSR_ALGO_DIST_FIRST_ONLY;
    return VSR_ERR_INVALID;
}

static double usable_weight(double w)
{
    return isfinite(w) && w > 0 ? w : 0;
}

int vsr__algo_remom_distribute(int dist, const double *weights, size_t k, size_t n_calls, uint64_t seed,
                               size_t *out)
{
    if (dist < VSR_ALGO_DIST_WEIGHTED || dist > VSR_ALGO_DIST_FIRST_ONLY || k > UINT32_MAX)
        return VSR_ERR_INVALID;
    if (n_calls == 0)
        return VSR_OK;
    if (k == 0)
        return VSR_ERR_INVALID;
    if (dist == VSR_ALGO_DIST_ROUND_ROBIN || dist == VSR_ALGO_DIST_FIRST_ONLY) {
        for (size_t i = 0; i < n_calls; i++)
            out[i] = dist == VSR_ALGO_DIST_FIRST_ONLY ? 0 : i % k;
        return VSR_OK;
    }
    size_t *count = vsr_calloc(k, sizeof(*count));
    double total = 0;
    if (dist == VSR_ALGO_DIST_WEIGHTED && weights)
        for (size_t i = 0; i < k; i++)
            total += usable_weight(weights[i]);
    if (dist == VSR_ALGO_DIST_WEIGHTED && total > 0 && isfinite(total)) {
        double *rem = vsr_malloc(k * sizeof(*rem));
        size_t *rank = vsr_malloc(k * sizeof(*rank));
        size_t given = 0;
        for (size_t i = 0; i < k; i++) {
            double share = (double)n_calls * (usable_weight(weights[i]) / total);
            double fl = floor(share);
            count[i] = (size_t)fl;
            if (count[i] > n_calls - given) /* rounding can never give more than n in all */
                count[i] = n_calls - given;
            given += count[i];
            rem[i] = share - fl;
            rank[i] = i;
        }
        /* Ties are ranked by a seeded permutation: shuffle, then a stable
         * sort by remainder, descending (insertion sort: k is small). */
        vsr_algo_pcg_t g;
        vsr__algo_pcg_seed(&g, seed);
        vsr__algo_pcg_shuffle(&g, rank, k);
        for (size_t i = 1; i < k; i++) {
            size_t x = rank[i], j = i;
            while (j > 0 && rem[rank[j - 1]] < rem[x]) {
                rank[j] = rank[j - 1];
                j--;
            }
            rank[j] = x;
        }
        for (size_t i = 0; given < n_calls; i = (i + 1) % k) {
            count[rank[i]]++;
            given++;
        }
        vsr_free(rem);
        vsr_free(rank);
    } else {
        for (size_t i = 0; i < k; i++)
            count[i] = n_calls / k + (i < n_calls % k ? 1 : 0);
    }
    size_t o = 0;
    for (size_t i = 0; i < k; i++)
        for (size_t c = 0; c < count[i]; c++)
            out[o++] = i;
    VSR_BUG_ON(o != n_calls);
    vsr_free(count);
    vsr_algo_pcg_t g;
    vsr__algo_pcg_seed(&g, seed);
    vsr__algo_pcg_shuffle(&g, out, n_calls);
    return VSR_OK;
}

/* ---- answer order, compaction, result ------------------------------------ */

void vsr__algo_remom_order(const size_t *lens, size_t n, uint64_t seed, size_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = i;
    /* Stable insertion sort by length: n is a round's answers (small). */
    for (size_t i = 1; i < n; i++) {
        size_t x = out[i], j = i;
        while (j > 0 && lens[out[j - 1]] > lens[x]) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = x;
    }
    vsr_algo_pcg_t g;
    vsr__algo_pcg_seed(&g, seed);
    vsr__algo_pcg_shuffle(&g, out, n);
}

vsr_slice_t vsr__algo_compact_last_tokens(vsr_slice_t text, uint64_t tokens)
{
    if (tokens == 0 || tokens > SIZE_MAX / 4 || text.len <= tokens * 4)
        return text;
    size_t start = text.len - (size_t)(tokens * 4);
    for (int k = 0; k < 3 && start < text.len && ((unsigned char)text.p[start] & 0xC0) == 0x80; k++)
        start++;
    return vsr_slice(text.p + start, text.len - start);
}

static int blank(vsr_slice_t s)
{
    for (size_t i = 0; i < s.len; i++)
        if (s.p[i] != ' ' && s.p[i] != '\t' && s.p[i] != '\n' && s.p[i] != '\r')
            return 0;
    return 1;
}

int vsr__algo_remom_pick(const vsr_algo_answer_t *a, size_t n, uint32_t final_round, size_t *out)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].round == final_round && !blank(a[i].content)) {
            *out = i;
            return VSR_OK;
        }
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (a[i].round >= final_round || blank(a[i].content))
            continue;
        if (best == SIZE_MAX || a[i].content.len > a[best].content.len ||
            (a[i].content.len == a[best].content.len && a[i].round > a[best].round))
            best = i;
    }
    if (best == SIZE_MAX)
        return VSR_ERR_NOT_FOUND;
    *out = best;
    return VSR_OK;
}
