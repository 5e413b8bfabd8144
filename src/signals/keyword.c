/* keyword.c — keyword signals (routing.signals.keywords[]).
 *
 * Methods: exact (default: literal on word boundaries, via the recipe's
 * shared literal matcher), regex (PCRE2), fuzzy (exact plus Levenshtein over
 * text words), ngram and bm25 (kw_ngram.c, kw_bm25.c).  Operators OR / AND /
 * NOR combine the per-keyword results.  Confidence 1.0 on a match. */
#include "signals/signals-int.h"

typedef struct {
    vsr_kw_operator_t op;
    vsr_kw_method_t method;
    size_t n;
    uint32_t *pat;        /* exact/fuzzy: literal pattern of each keyword, VSR__NO_PAT = empty keyword */
    pcre2_code **re;      /* regex */
    int fuzzy;
    uint32_t fuzzy_k;
    uint32_t **kr;        /* fuzzy: each keyword lower-cased, as runes */
    size_t *kn;
    vsr__ngram_t *ngram;
    vsr__bm25_t *bm25;
} kw_t;

void vsr__keyword_free(void *state)
{
    kw_t *k = state;
    if (!k)
        return;
    if (k->re) {
        for (size_t i = 0; i < k->n; i++)
            pcre2_code_free(k->re[i]);
        vsr_free(k->re);
    }
    if (k->kr) {
        for (size_t i = 0; i < k->n; i++)
            vsr_free(k->kr[i]);
        vsr_free(k->kr);
    }
    vsr_free(k->kn);
    vsr_free(k->pat);
    vsr__ngram_free(k->ngram);
    vsr__bm25_free(k->bm25);
    vsr_free(k);
}

int vsr__keyword_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_keyword_conf_t *kc = conf;
    kw_t *k = vsr_calloc(1, sizeof(*k));
    k->op = kc->op;
    k->method = kc->method;
    k->n = kc->keywords.n;
    int ci = !kc->case_sensitive;
    int failed = 0;
    if (kc->op != VSR_KW_OP_OR && kc->op != VSR_KW_OP_AND && kc->op != VSR_KW_OP_NOR) {
        vsr_buf_printf(err, "%s: signal \"%s\": unknown operator\n", path, kc->name);
        vsr__keyword_free(k);
        return VSR_ERR_INVALID;
    }
    for (size_t i = 0; i < k->n; i++) {
        if (!kc->keywords.items[i]) {
            vsr_buf_printf(err, "%s.keywords[%zu]: signal \"%s\": keyword is null\n", path, i, kc->name);
            vsr__keyword_free(k);
            return VSR_ERR_INVALID;
        }
    }
    k->fuzzy = kc->fuzzy_match || kc->method == VSR_KW_FUZZY;
    k->fuzzy_k = kc->fuzzy_threshold ? kc->fuzzy_threshold : 2;

    switch (kc->method) {
    case VSR_KW_EXACT:
    case VSR_KW_FUZZY:
        k->pat = vsr_malloc((k->n ? k->n : 1) * sizeof(uint32_t));
        for (size_t i = 0; i < k->n; i++)
            k->pat[i] = vsr__add_pattern(s, kc->keywords.items[i], ci, VSR__BOUND_ASCII, 0);
        break;
    case VSR_KW_REGEX:
        k->re = vsr_calloc(k->n ? k->n : 1, sizeof(pcre2_code *));
        for (size_t i = 0; i < k->n; i++) {
            vsr_buf_t msg;
            vsr_buf_init(&msg, 1024);
            k->re[i] = vsr__re_compile(kc->keywords.items[i], ci, &msg);
            if (!k->re[i]) {
                vsr_buf_printf(err, "%s.keywords[%zu]: signal \"%s\": regex \"%s\" does not compile: %.*s\n", path, i,
                               kc->name, kc->keywords.items[i], (int)msg.len, msg.data ? msg.data : "");
                failed = 1;
            }
            vsr_buf_free(&msg);
        }
        break;
    case VSR_KW_NGRAM:
        k->ngram = vsr__ngram_build(kc->keywords.items, k->n, kc->case_sensitive, kc->ngram_arity ? kc->ngram_arity : 3,
                                    kc->ngram_threshold != 0 ? kc->ngram_threshold : 0.4);
        k->fuzzy = 0;
        break;
    case VSR_KW_BM25:
        k->bm25 = vsr__bm25_build(kc->keywords.items, k->n, kc->case_sensitive,
                                  kc->bm25_threshold != 0 ? kc->bm25_threshold : 0.1);
        k->fuzzy = 0;
        break;
    default:
        vsr_buf_printf(err, "%s: signal \"%s\": unknown method\n", path, kc->name);
        failed = 1;
    }
    if (!failed && k->fuzzy) {
        k->kr = vsr_calloc(k->n ? k->n : 1, sizeof(uint32_t *));
        k->kn = vsr_calloc(k->n ? k->n : 1, sizeof(size_t));
        for (size_t i = 0; i < k->n; i++) {
            size_t len = strlen(kc->keywords.items[i]);
            k->kr[i] = vsr_malloc((len ? len : 1) * sizeof(uint32_t));
            k->kn[i] = vsr__runes(kc->keywords.items[i], len, 1, k->kr[i]);
        }
    }
    if (failed) {
        vsr__keyword_free(k);
        return VSR_ERR_INVALID;
    }
    *state = k;
    return VSR_OK;
}

/* Levenshtein distance of a and b (runes) is at most k; rows stop as soon as
 * every cell exceeds k. */
static int lev_within(const uint32_t *a, size_t la, const uint32_t *b, size_t lb, uint32_t k)
{
    if (la > lb) {
        const uint32_t *t = a;
        a = b;
        b = t;
        size_t tl = la;
        la = lb;
        lb = tl;
    }
    if (lb - la > k)
        return 0;
    if (la == 0)
        return lb <= k;
    uint32_t stack[2][129];
    uint32_t *heap = NULL, *prev, *cur;
    if (la + 1 <= 129) {
        prev = stack[0];
        cur = stack[1];
    } else {
        heap = vsr_malloc(2 * (la + 1) * sizeof(uint32_t));
        prev = heap;
        cur = heap + la + 1;
    }
    for (size_t i = 0; i <= la; i++)
        prev[i] = (uint32_t)i;
    int ok = 1;
    for (size_t j = 1; j <= lb; j++) {
        cur[0] = (uint32_t)j;
        uint32_t rowmin = cur[0];
        for (size_t i = 1; i <= la; i++) {
            uint32_t v = prev[i - 1] + (a[i - 1] != b[j - 1]);
            if (prev[i] + 1 < v)
                v = prev[i] + 1;
            if (cur[i - 1] + 1 < v)
                v = cur[i - 1] + 1;
            cur[i] = v;
            if (v < rowmin)
                rowmin = v;
        }
        if (rowmin > k) {
            ok = 0;
            break;
        }
        uint32_t *t = prev;
        prev = cur;
        cur = t;
    }
    if (ok)
        ok = prev[la] <= k;
    vsr_free(heap);
    return ok;
}

static int fuzzy_hit(vsr__ctx_t *c, const kw_t *k, size_t i)
{
    vsr__memo_words(c);
    const vsr__memo_t *m = c->m;
    size_t n;
    const uint32_t *r = vsr__memo_runes(c, 1, &n);
    for (size_t w = 0; w < m->n_words; w++) {
        size_t wl = m->word_len[w];
        size_t d = wl > k->kn[i] ? wl - k->kn[i] : k->kn[i] - wl;
        if (d > k->fuzzy_k)
            continue;
        if (lev_within(r + m->word_off[w], wl, k->kr[i], k->kn[i], k->fuzzy_k))
            return 1;
    }
    return 0;
}

static int keyword_hit(vsr__ctx_t *c, const kw_t *k, size_t i, const uint8_t *sim)
{
    int hit = 0;
    switch (k->method) {
    case VSR_KW_EXACT:
    case VSR_KW_FUZZY:
        hit = k->pat[i] == VSR__NO_PAT || vsr__memo_bit(c->m, c->s->pats[k->pat[i]].slot);
        break;
    case VSR_KW_REGEX:
        hit = vsr__re_match(k->re[i], c->in->text.p, c->in->text.len, vsr__memo_md(c));
        break;
    default:
        hit = sim[i];
    }
    if (!hit && k->fuzzy)
        hit = fuzzy_hit(c, k, i);
    return hit;
}

vsr_signal_result_t vsr__keyword_eval(vsr__ctx_t *c, const void *state)
{
    const kw_t *k = state;
    vsr_signal_result_t r = {0};
    uint8_t *sim = NULL;
    if (k->method == VSR_KW_EXACT || k->method == VSR_KW_FUZZY) {
        vsr__memo_scan(c);
    } else if (k->method == VSR_KW_NGRAM || k->method == VSR_KW_BM25) {
        sim = vsr_pool_alloc(c->pool, k->n ? k->n : 1);
        memset(sim, 0, k->n ? k->n : 1);
        if (k->ngram)
            vsr__ngram_match(k->ngram, c, sim);
        else
            vsr__bm25_match(k->bm25, c, sim);
    }
    size_t hits = 0;
    int matched;
    switch (k->op) {
    case VSR_KW_OP_AND:
        matched = 1;
        for (size_t i = 0; i < k->n; i++) {
            if (!keyword_hit(c, k, i, sim)) {
                matched = 0;
                break;
            }
            hits++;
        }
        break;
    case VSR_KW_OP_NOR:
        matched = 1;
        for (size_t i = 0; i < k->n; i++) {
            if (keyword_hit(c, k, i, sim)) {
                matched = 0;
                hits++;
                break;
            }
        }
        break;
    default: /* OR: count every hit for the trace value */
        matched = 0;
        for (size_t i = 0; i < k->n; i++) {
            if (keyword_hit(c, k, i, sim)) {
                matched = 1;
                hits++;
                if (k->method == VSR_KW_REGEX || k->fuzzy)
                    break; /* each further keyword costs a pass: stop at the first */
            }
        }
        break;
    }
    r.matched = matched;
    r.confidence = matched ? 1.0 : 0.0;
    r.value = (double)hits;
    return r;
}
