/* kw_ngram.c — the ngram keyword method, as the reference's ngrammatic
 * corpus: character n-grams of arity n (runes), each string padded with n-1
 * spaces on both sides; similarity of two strings with multisets of grams A
 * and B, s = |A ∩ B| and all = |A| + |B| - s, is 1 - ((all - s) / all)^2
 * (ngrammatic's "warp 2").  A keyword matches when some word of the text
 * (a run of letters, digits, '_' and '-') or the whole text reaches the
 * threshold.  Text and keywords are lower-cased unless case_sensitive.
 *
 * Keyword grams are indexed (gram -> keywords containing it), so a word
 * costs its own grams' postings, not one comparison per keyword. */
#include <stdlib.h>

#include "signals/signals-int.h"

struct vsr__ngram_s {
    size_t n;
    int cs;
    uint32_t arity;
    double threshold;
    uint32_t *kgrams;   /* grams per keyword */
    size_t tcap;        /* gram table (open addressing, power of two) */
    uint64_t *keys;
    uint32_t *pstart, *plen;
    uint32_t *post_kw, *post_cnt;
};

typedef struct {
    uint64_t h;
    uint32_t kw, cnt;
} triple_t;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_triple(const void *a, const void *b)
{
    const triple_t *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return x->kw < y->kw ? -1 : x->kw > y->kw;
}

/* Gram hashes of runes r[0..n) padded with arity-1 spaces each side, into
 * out (room for n + arity - 1), sorted.  Returns the gram count. */
static size_t grams(const uint32_t *r, size_t n, uint32_t arity, uint32_t *pad, uint64_t *out)
{
    size_t pl = n + 2 * (size_t)(arity - 1);
    for (size_t i = 0; i < arity - 1; i++) {
        pad[i] = ' ';
        pad[pl - 1 - i] = ' ';
    }
    memcpy(pad + arity - 1, r, n * sizeof(uint32_t));
    size_t g = pl - arity + 1;
    for (size_t i = 0; i < g; i++)
        out[i] = vsr__hash_runes(pad + i, arity);
    if (g > 32) {
        qsort(out, g, sizeof(uint64_t), cmp_u64);
        return g;
    }
    for (size_t i = 1; i < g; i++) { /* words are short: insertion sort beats qsort's calls */
        uint64_t v = out[i];
        size_t j = i;
        while (j > 0 && out[j - 1] > v) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = v;
    }
    return g;
}

vsr__ngram_t *vsr__ngram_build(char *const *keywords, size_t n, int case_sensitive, uint32_t arity, double threshold)
{
    vsr__ngram_t *g = vsr_calloc(1, sizeof(*g));
    g->n = n;
    g->cs = case_sensitive;
    g->arity = arity < 2 ? 2 : arity; /* as the reference clamps it */
    g->threshold = threshold;
    g->kgrams = vsr_calloc(n ? n : 1, sizeof(uint32_t));
    size_t cap = 16, nt = 0;
    triple_t *tr = vsr_malloc(cap * sizeof(triple_t));
    for (size_t k = 0; k < n; k++) {
        size_t len = strlen(keywords[k]);
        uint32_t *r = vsr_malloc((len + 1) * sizeof(uint32_t));
        size_t nr = vsr__runes(keywords[k], len, !case_sensitive, r);
        uint32_t *pad = vsr_malloc((nr + 2 * g->arity) * sizeof(uint32_t));
        uint64_t *h = vsr_malloc((nr + g->arity) * sizeof(uint64_t));
        size_t ng = grams(r, nr, g->arity, pad, h);
        g->kgrams[k] = (uint32_t)ng;
        for (size_t i = 0; i < ng;) {
            size_t j = i;
            while (j < ng && h[j] == h[i])
                j++;
            if (nt == cap) {
                cap *= 2;
                tr = vsr_realloc(tr, cap * sizeof(triple_t));
            }
            tr[nt++] = (triple_t){h[i], (uint32_t)k, (uint32_t)(j - i)};
            i = j;
        }
        vsr_free(r);
        vsr_free(pad);
        vsr_free(h);
    }
    qsort(tr, nt, sizeof(triple_t), cmp_triple);
    size_t distinct = 0;
    for (size_t i = 0; i < nt; i++)
        distinct += i == 0 || tr[i].h != tr[i - 1].h;
    g->tcap = 16;
    while (g->tcap < distinct * 2)
        g->tcap *= 2;
    g->keys = vsr_calloc(g->tcap, sizeof(uint64_t));
    g->pstart = vsr_calloc(g->tcap, sizeof(uint32_t));
    g->plen = vsr_calloc(g->tcap, sizeof(uint32_t));
    g->post_kw = vsr_malloc((nt ? nt : 1) * sizeof(uint32_t));
    g->post_cnt = vsr_malloc((nt ? nt : 1) * sizeof(uint32_t));
    for (size_t i = 0; i < nt;) {
        size_t j = i;
        while (j < nt && tr[j].h == tr[i].h) {
            g->post_kw[j] = tr[j].kw;
            g->post_cnt[j] = tr[j].cnt;
            j++;
        }
        size_t slot = (size_t)tr[i].h & (g->tcap - 1);
        while (g->plen[slot])
            slot = (slot + 1) & (g->tcap - 1);
        g->keys[slot] = tr[i].h;
        g->pstart[slot] = (uint32_t)i;
        g->plen[slot] = (uint32_t)(j - i);
        i = j;
    }
    vsr_free(tr);
    return g;
}

void vsr__ngram_free(vsr__ngram_t *g)
{
    if (!g)
        return;
    vsr_free(g->kgrams);
    vsr_free(g->keys);
    vsr_free(g->pstart);
    vsr_free(g->plen);
    vsr_free(g->post_kw);
    vsr_free(g->post_cnt);
    vsr_free(g);
}

static double similarity(size_t same, size_t a, size_t b)
{
    double all = (double)(a + b - same);
    if (all <= 0)
        return 0;
    double diff = all - (double)same;
    return (all * all - diff * diff) / (all * all);
}

typedef struct {
    uint32_t *same;     /* per keyword, zero between items */
    uint32_t *touched;
    uint32_t *pad;
    uint64_t *h;
} scratch_t;

static void match_item(const vsr__ngram_t *g, scratch_t *sc, const uint32_t *r, size_t n, uint8_t *matched)
{
    size_t ng = grams(r, n, g->arity, sc->pad, sc->h);
    size_t nt = 0;
    for (size_t i = 0; i < ng;) {
        size_t j = i;
        while (j < ng && sc->h[j] == sc->h[i])
            j++;
        uint32_t cw = (uint32_t)(j - i);
        size_t slot = (size_t)sc->h[i] & (g->tcap - 1);
        while (g->plen[slot]) {
            if (g->keys[slot] == sc->h[i]) {
                for (uint32_t p = g->pstart[slot]; p < g->pstart[slot] + g->plen[slot]; p++) {
                    uint32_t kw = g->post_kw[p];
                    if (sc->same[kw] == 0)
                        sc->touched[nt++] = kw;
                    sc->same[kw] += VSR_MIN(cw, g->post_cnt[p]);
                }
                break;
            }
            slot = (slot + 1) & (g->tcap - 1);
        }
        i = j;
    }
    for (size_t t = 0; t < nt; t++) {
        uint32_t kw = sc->touched[t];
        if (!matched[kw] && similarity(sc->same[kw], ng, g->kgrams[kw]) >= g->threshold)
            matched[kw] = 1;
        sc->same[kw] = 0;
    }
}

static int is_word_rune(uint32_t cp)
{
    return cp == '_' || cp == '-' || vsr__is_alnum(cp);
}

void vsr__ngram_match(const vsr__ngram_t *g, vsr__ctx_t *c, uint8_t *matched)
{
    size_t n;
    const uint32_t *r = vsr__memo_runes(c, !g->cs, &n);
    if (n == 0 || g->n == 0)
        return;
    scratch_t sc;
    sc.same = vsr_pool_alloc(c->pool, g->n * sizeof(uint32_t));
    memset(sc.same, 0, g->n * sizeof(uint32_t));
    sc.touched = vsr_pool_alloc(c->pool, g->n * sizeof(uint32_t));
    sc.pad = vsr_pool_alloc(c->pool, (n + 2 * g->arity) * sizeof(uint32_t));
    sc.h = vsr_pool_alloc(c->pool, (n + g->arity) * sizeof(uint64_t));
    size_t i = 0;
    while (i < n) {
        if (!is_word_rune(r[i])) {
            i++;
            continue;
        }
        size_t st = i;
        while (i < n && is_word_rune(r[i]))
            i++;
        match_item(g, &sc, r + st, i - st, matched);
    }
    /* the whole text as one string, when it can still reach the threshold for
     * a keyword not matched yet (it rarely can: a long text has far more grams) */
    size_t tg = n + g->arity - 1;
    int worth = 0;
    for (size_t k = 0; k < g->n && !worth; k++) {
        if (matched[k])
            continue;
        size_t same = VSR_MIN(tg, (size_t)g->kgrams[k]);
        worth = similarity(same, tg, g->kgrams[k]) >= g->threshold;
    }
    if (worth)
        match_item(g, &sc, r, n, matched);
}
