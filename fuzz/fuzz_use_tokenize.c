/*
 * fuzz_use_tokenize.c — the USE-lite tokenizer (src/models/use_lite.c) over
 * arbitrary bytes, on two small synthetic vocabularies built here (the real
 * one lives outside the tree): one where U+2581 only starts pieces (so text is
 * read in chunks cut before spaces) and one with a piece holding U+2581
 * inside (one chunk at a time is then not a token boundary).  Both have
 * ties, null (0) and positive scores, a duplicate piece and an astral piece
 * (whose UTF-16 length makes the JS backtracking step differ from its code
 * point count).  The first input byte picks the vocabulary and the id limit.
 *
 * Checks, beyond memory safety:
 *  - ids are within the vocabulary, at most the limit, never two unknowns
 *    (id 0) in a row, and a smaller limit gives a prefix of a larger one;
 *  - a reused scratch and a fresh one give the same ids;
 *  - for ASCII text (NFKC leaves it alone), the ids equal those of a direct
 *    port of the TF.js tokenizer (per-position prefix search over the piece
 *    list, the pull-form Viterbi with its `best == 0 || >=` rule, backtracking
 *    by UTF-16 lengths) run on the whole text — chunking included;
 *  - embedding a vocabulary-only model says VSR_ERR_NOT_FOUND.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "../tests/tools/use_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_use_tokenize: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

typedef use_piece_t piece_t;

#define S "\xE2\x96\x81" /* U+2581 */
static const piece_t VOCAB[] = {
    {"\xEF\xBF\xBD", 0}, {"<s>", 0}, {"</s>", 0}, {"r3", 0}, {"r4", 0}, {"r5", 0},
    {S, -2.0}, {S "a", -3.0}, {S "ab", -3.0}, {"a", -2.0}, {"b", -2.0}, {"ab", -3.5},
    {"abc", -4.0}, {"c", -2.5}, {"ba", -4.0}, {S "the", -1.5}, {"t", -3.0}, {"h", -3.0},
    {"e", -3.0}, {"th", -4.0}, {"he", -4.0}, {"the", -6.0}, {S "b", -2.0}, {"bb", -4.0},
    {"bbb", -6.0}, {"x", -5.0}, {"\xC3\xA9", -3.0}, {"\xF0\x9F\x98\x80", -3.0},
    {"\xF0\x9F\x98\x80\xF0\x9F\x98\x80", -5.0}, {"ab", -2.5} /* duplicate: this one wins */,
    {":", 0} /* a null score in vocab.json */, {":3", 30.0}, {"3", -1.0}, {" ", -9.0},
    {"cab", -6.5}, {"aaa", -6.0}, {"aa", -4.0},
};
#define N_VOCAB (sizeof VOCAB / sizeof VOCAB[0])
static const piece_t INNER_SEP = {"a" S "b", -1.0};

static uint64_t file_a[2048], file_b[2048]; /* 8-byte aligned model files */
static vsr_use_model_t *model_a, *model_b;

static size_t build(uint64_t *store, int with_inner)
{
    const piece_t *pieces[N_VOCAB + 1];
    for (size_t i = 0; i < N_VOCAB; i++)
        pieces[i] = &VOCAB[i];
    pieces[N_VOCAB] = &INNER_SEP;
    return use_vocab_file((uint8_t *)store, pieces, (uint32_t)N_VOCAB + (with_inner ? 1 : 0));
}

/* ---- the JS tokenizer, ported directly (ASCII input only) ---- */

typedef struct {
    uint32_t cps[16];
    size_t n;
    int32_t id;
    double score;
    int u16;
} rpiece_t;

static rpiece_t rvocab[N_VOCAB + 1];
static size_t n_rvocab_a, n_rvocab_b;

static void ref_init(void)
{
    for (size_t i = 0; i < N_VOCAB + 1; i++) {
        const piece_t *p = i < N_VOCAB ? &VOCAB[i] : &INNER_SEP;
        rpiece_t *r = &rvocab[i];
        const uint8_t *s = (const uint8_t *)p->piece;
        r->n = 0;
        r->u16 = 0;
        for (size_t k = 0; s[k];) {
            uint32_t c = s[k];
            int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            c = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
            for (int j = 1; j < len; j++) c = c << 6 | (s[k + j] & 0x3F);
            k += (size_t)len;
            r->cps[r->n++] = c;
            r->u16 += c > 0xFFFF ? 2 : 1;
        }
        r->id = (int32_t)i;
        r->score = p->score;
    }
    n_rvocab_a = N_VOCAB;
    n_rvocab_b = N_VOCAB + 1;
}

/* the trie's view: the last inserted piece of equal text wins */
static const rpiece_t *ref_lookup(size_t nv, const uint32_t *sym, size_t len)
{
    const rpiece_t *hit = NULL;
    for (size_t i = 6; i < nv; i++)
        if (rvocab[i].n == len && memcmp(rvocab[i].cps, sym, len * sizeof *sym) == 0) hit = &rvocab[i];
    return hit;
}

static size_t ref_encode(size_t nv, const uint8_t *t, size_t len, int32_t *out)
{
    size_t n = len ? len + 1 : 0;
    uint32_t *sym = malloc((n + 1) * sizeof *sym);
    if (len) sym[0] = 0x2581;
    for (size_t i = 0; i < len; i++) sym[i + 1] = t[i] == ' ' ? 0x2581 : t[i];
    /* nodes[end] holds (start, piece) pairs; pieces are at most 16 long */
    size_t cap = (n + 1) * 17;
    size_t *cnt = calloc(n + 1, sizeof *cnt);
    size_t *st = malloc(cap * sizeof *st);
    const rpiece_t **pc = malloc(cap * sizeof *pc);
    static const rpiece_t unk = {{0}, 1, 0, 0.0, 1};
    for (size_t i = 0; i < n; i++) {
        int any = 0;
        for (size_t l = 1; l <= 16 && i + l <= n; l++) {
            const rpiece_t *p = ref_lookup(nv, sym + i, l);
            if (p == NULL) continue;
            any = 1;
            size_t e = i + l;
            st[e * 17 + cnt[e]] = i;
            pc[e * 17 + cnt[e]++] = p;
        }
        if (!any) {
            st[(i + 1) * 17 + cnt[i + 1]] = i;
            pc[(i + 1) * 17 + cnt[i + 1]++] = &unk;
        }
    }
    double *best = calloc(n + 1, sizeof *best);
    int32_t *words = calloc(n + 1, sizeof *words);
    for (size_t e = 0; e <= n; e++) {
        /* JS enumerates starts in increasing order; insertion order was by start already */
        for (size_t j = 0; j < cnt[e]; j++) {
            const rpiece_t *p = pc[e * 17 + j];
            double sc = p->score + best[e - p->n];
            if (best[e] == 0 || sc >= best[e]) {
                best[e] = sc;
                words[e] = p->id;
            }
        }
    }
    size_t nr = 0;
    int32_t *rev = malloc((n + 1) * sizeof *rev);
    for (long it = (long)n; it > 0;) {
        rev[nr++] = words[it];
        it -= rvocab[words[it]].u16;
    }
    size_t no = 0;
    int prev = 0;
    for (size_t k = 0; k < nr; k++) {
        int32_t id = rev[k];
        if (!(prev && id == 0)) out[no++] = id;
        prev = id == 0;
    }
    for (size_t a = 0, b = no; a + 1 < b; a++, b--) {
        int32_t x = out[a];
        out[a] = out[b - 1];
        out[b - 1] = x;
    }
    free(sym); free(cnt); free(st); free(pc); free(best); free(words); free(rev);
    return no;
}

/* whether every chunk of the tokenizer ends before a space (exact chunking) */
static int cuts_at_spaces(const uint8_t *t, size_t len)
{
    for (size_t pos = 0; len - pos > VSR_USE_CHUNK_BYTES;) {
        size_t i = pos + VSR_USE_CHUNK_BYTES;
        while (i > pos && t[i] != ' ') i--;
        if (i == pos) return 0;
        pos = i;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (model_a == NULL) {
        CHECK(vsr_use_load_mem(file_a, build(file_a, 0), &model_a) == VSR_OK);
        CHECK(vsr_use_load_mem(file_b, build(file_b, 1), &model_b) == VSR_OK);
        ref_init();
        /* a truncated or altered file is refused, not read past */
        vsr_use_model_t *bad = NULL;
        CHECK(vsr_use_load_mem(file_a, 100, &bad) == VSR_ERR_INVALID && bad == NULL);
    }
    if (size == 0) return 0;
    const vsr_use_model_t *m = data[0] & 1 ? model_b : model_a;
    size_t nv = data[0] & 1 ? n_rvocab_b : n_rvocab_a;
    size_t limit = data[0] >> 1; /* 0..127 */
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    size_t max = len + 2, n_all = 0, n_lim = 0, n_fresh = 0;
    int32_t *all = malloc(max * sizeof *all), *lim = malloc((limit + 1) * sizeof *lim);
    int32_t *fresh = malloc(max * sizeof *fresh);
    vsr_use_scratch_t *s = vsr_use_scratch_new();
    CHECK(vsr_use_tokenize(m, text, len, all, max, &n_all, s) == VSR_OK);
    CHECK(vsr_use_tokenize(m, text, len, lim, limit, &n_lim, s) == VSR_OK);
    CHECK(vsr_use_tokenize(m, text, len, fresh, max, &n_fresh, NULL) == VSR_OK);
    CHECK(n_all <= max && n_lim == (n_all < limit ? n_all : limit));
    CHECK(n_fresh == n_all && memcmp(fresh, all, n_all * sizeof *all) == 0);
    CHECK(memcmp(lim, all, n_lim * sizeof *all) == 0);
    CHECK((len == 0) == (n_all == 0));
    for (size_t i = 0; i < n_all; i++) {
        CHECK(all[i] >= 0 && (size_t)all[i] < vsr_use_vocab_size(m));
        CHECK(!(i > 0 && all[i] == 0 && all[i - 1] == 0));
    }
    int ascii = 1;
    for (size_t i = 0; i < len; i++) ascii &= data[i + 1] < 0x80;
    /* the direct port is quadratic in the vocabulary: keep it to fuzz-sized text */
    if (ascii && len <= 20000 && (len <= VSR_USE_CHUNK_BYTES || (m == model_a && cuts_at_spaces(data + 1, len)))) {
        int32_t *ref = malloc((len + 2) * sizeof *ref);
        size_t n_ref = ref_encode(nv, data + 1, len, ref);
        CHECK(n_ref == n_all && memcmp(ref, all, n_all * sizeof *all) == 0);
        free(ref);
    }
    float v[VSR_USE_DIM];
    CHECK(vsr_use_embed(m, text, len, v, s) == VSR_ERR_NOT_FOUND);
    vsr_use_scratch_free(s);
    free(all); free(lim); free(fresh);
    return 0;
}
