/* kw_bm25.c — the bm25 keyword method, as the reference's bm25 search
 * engine: the signal's keywords are the documents of a small corpus and the
 * routing text is the query.  For keyword d and the text's tokens q1..qm
 * (repeats included, as the reference's query embedding keeps them):
 *
 *   score(d) = sum_i idf(qi) * tf(qi,d) * (k1 + 1) / (tf(qi,d) + k1 * (1 - b + b * |d| / avgdl))
 *   idf(t)   = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))
 *
 * with k1 = 1.2, b = 0.75, N keywords, n(t) keywords containing t, |d| the
 * keyword's token count and avgdl their mean.  A keyword matches when its
 * score reaches bm25_threshold.  Tokens are runs of letters and digits,
 * lower-cased unless case_sensitive (no stemming or stop words, unlike the
 * reference's English tokenizer).
 *
 * Terms are indexed (term -> keywords with their weight), so a request
 * costs one lookup per text token. */
#include <math.h>
#include <stdlib.h>

#include "signals/signals-int.h"

#define BM25_K1 1.2
#define BM25_B 0.75

struct vsr__bm25_s {
    size_t n;
    int cs;
    double threshold;
    size_t tcap;
    uint64_t *keys;
    uint32_t *pstart, *plen;
    uint32_t *post_kw;
    double *post_w;
};

typedef struct {
    uint64_t h;
    uint32_t kw, tf;
} term_t;

static int cmp_term(const void *a, const void *b)
{
    const term_t *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return x->kw < y->kw ? -1 : x->kw > y->kw;
}

/* The next token (run of letters/digits) of r[0..n) at or after *i: its
 * start in *st, its length returned (0 at the end). */
static size_t next_token(const uint32_t *r, size_t n, size_t *i, size_t *st)
{
    while (*i < n && !vsr__is_alnum(r[*i]))
        (*i)++;
    *st = *i;
    while (*i < n && vsr__is_alnum(r[*i]))
        (*i)++;
    return *i - *st;
}

vsr__bm25_t *vsr__bm25_build(char *const *keywords, size_t n, int case_sensitive, double threshold)
{
    vsr__bm25_t *b = vsr_calloc(1, sizeof(*b));
    b->n = n;
    b->cs = case_sensitive;
    b->threshold = threshold;
    size_t cap = 16, nt = 0, total = 0;
    term_t *terms = vsr_malloc(cap * sizeof(term_t));
    uint32_t *dl = vsr_calloc(n ? n : 1, sizeof(uint32_t));
    for (size_t k = 0; k < n; k++) {
        size_t len = strlen(keywords[k]);
        uint32_t *r = vsr_malloc((len + 1) * sizeof(uint32_t));
        size_t nr = vsr__runes(keywords[k], len, !case_sensitive, r);
        size_t first = nt;
        size_t pos = 0, st, tl;
        while ((tl = next_token(r, nr, &pos, &st)) > 0) {
            uint64_t h = vsr__hash_runes(r + st, tl);
            dl[k]++;
            size_t j;
            for (j = first; j < nt && terms[j].h != h; j++)
                ;
            if (j < nt) {
                terms[j].tf++;
            } else {
                if (nt == cap) {
                    cap *= 2;
                    terms = vsr_realloc(terms, cap * sizeof(term_t));
                }
                terms[nt++] = (term_t){h, (uint32_t)k, 1};
            }
        }
        total += dl[k];
        vsr_free(r);
    }
    double avgdl = n ? (double)total / (double)n : 0;
    if (avgdl <= 0)
        avgdl = 256.0; /* the reference's fallback for an empty corpus */
    qsort(terms, nt, sizeof(term_t), cmp_term);
    size_t distinct = 0;
    for (size_t i = 0; i < nt; i++)
        distinct += i == 0 || terms[i].h != terms[i - 1].h;
    b->tcap = 16;
    while (b->tcap < distinct * 2)
        b->tcap *= 2;
    b->keys = vsr_calloc(b->tcap, sizeof(uint64_t));
    b->pstart = vsr_calloc(b->tcap, sizeof(uint32_t));
    b->plen = vsr_calloc(b->tcap, sizeof(uint32_t));
    b->post_kw = vsr_malloc((nt ? nt : 1) * sizeof(uint32_t));
    b->post_w = vsr_malloc((nt ? nt : 1) * sizeof(double));
    for (size_t i = 0; i < nt;) {
        size_t j = i;
        while (j < nt && terms[j].h == terms[i].h)
            j++;
        double df = (double)(j - i);
        double idf = log(1.0 + ((double)n - df + 0.5) / (df + 0.5));
        for (size_t p = i; p < j; p++) {
            double tf = terms[p].tf;
            double norm = tf + BM25_K1 * (1.0 - BM25_B + BM25_B * (double)dl[terms[p].kw] / avgdl);
            b->post_kw[p] = terms[p].kw;
            b->post_w[p] = idf * tf * (BM25_K1 + 1.0) / norm;
        }
        size_t slot = (size_t)terms[i].h & (b->tcap - 1);
        while (b->plen[slot])
            slot = (slot + 1) & (b->tcap - 1);
        b->keys[slot] = terms[i].h;
        b->pstart[slot] = (uint32_t)i;
        b->plen[slot] = (uint32_t)(j - i);
        i = j;
    }
    vsr_free(terms);
    vsr_free(dl);
    return b;
}

void vsr__bm25_free(vsr__bm25_t *b)
{
    if (!b)
        return;
    vsr_free(b->keys);
    vsr_free(b->pstart);
    vsr_free(b->plen);
    vsr_free(b->post_kw);
    vsr_free(b->post_w);
    vsr_free(b);
}

void vsr__bm25_match(const vsr__bm25_t *b, vsr__ctx_t *c, uint8_t *matched)
{
    size_t n;
    const uint32_t *r = vsr__memo_runes(c, !b->cs, &n);
    if (n == 0 || b->n == 0)
        return;
    double *score = vsr_pool_alloc(c->pool, b->n * sizeof(double));
    for (size_t k = 0; k < b->n; k++)
        score[k] = 0;
    size_t pos = 0, st, tl;
    while ((tl = next_token(r, n, &pos, &st)) > 0) {
        uint64_t h = vsr__hash_runes(r + st, tl);
        size_t slot = (size_t)h & (b->tcap - 1);
        while (b->plen[slot]) {
            if (b->keys[slot] == h) {
                for (uint32_t p = b->pstart[slot]; p < b->pstart[slot] + b->plen[slot]; p++)
                    score[b->post_kw[p]] += b->post_w[p];
                break;
            }
            slot = (slot + 1) & (b->tcap - 1);
        }
    }
    for (size_t k = 0; k < b->n; k++)
        matched[k] = score[k] >= b->threshold && score[k] > 0;
}
