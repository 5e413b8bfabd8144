/*
 * use_lite.c — Universal Sentence Encoder lite: the converted model file,
 * the SentencePiece-unigram tokenizer and the transformer forward pass.
 *
 * The file (tools/models/use_lite_convert.py documents its layout) is mapped
 * read-only; only the tokenizer's trie is built on the heap at load.  The
 * graph, as read from the TF.js model.json:
 *   x   = emb + (emb + timing(pos))                     [L,256]
 *   L0  : h = MHA_4x64(LN(x)) + (x·Wr + br)              [L,512]
 *         h = h + FFN(LN(h))                             (512→1536 ReLU→512)
 *   L1  : h = h + MHA_4x128(LN(h));  h = h + FFN(LN(h))
 *   out = l2norm(tanh(mean_L(h)·Wp + bp))
 * MHA: q,k,v = LN(x)·Wqkv + b, q scaled, softmax(q·kᵀ)·v per head, then ·Wo + bo.
 */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unicode/uchar.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "models/models.h"

enum {
    T_EMB, T_TIMING,
    T_L0_LN1_S, T_L0_LN1_B, T_L0_QKV_W, T_L0_QKV_B, T_L0_OUT_W, T_L0_OUT_B, T_L0_RES_W, T_L0_RES_B,
    T_L0_LN2_S, T_L0_LN2_B, T_L0_FF1_W, T_L0_FF1_B, T_L0_FF2_W, T_L0_FF2_B,
    T_L1_LN1_S, T_L1_LN1_B, T_L1_QKV_W, T_L1_QKV_B, T_L1_OUT_W, T_L1_OUT_B,
    T_L1_LN2_S, T_L1_LN2_B, T_L1_FF1_W, T_L1_FF1_B, T_L1_FF2_W, T_L1_FF2_B,
    T_POOL_W, T_POOL_B, T_SCALARS,
    T_COUNT
};

#define D0 256   /* width of the token embeddings and layer 0's attention */
#define D1 512   /* model width after layer 0 */
#define DFF 1536
#define HEADS 4
#define SEP 0x2581u
#define RESERVED_IDS 6  /* ids below this are never produced by the trie */
#define MAX_PIECE_CPS 256
#define MAX_VOCAB (1u << 20)

static const size_t expected_count[T_COUNT] = {
    [T_EMB] = 0, /* rows from the header */
    [T_TIMING] = 128,
    [T_L0_LN1_S] = D0, [T_L0_LN1_B] = D0, [T_L0_QKV_W] = D0 * 3 * D0, [T_L0_QKV_B] = 3 * D0,
    [T_L0_OUT_W] = D0 * D1, [T_L0_OUT_B] = D1, [T_L0_RES_W] = D0 * D1, [T_L0_RES_B] = D1,
    [T_L0_LN2_S] = D1, [T_L0_LN2_B] = D1, [T_L0_FF1_W] = D1 * DFF, [T_L0_FF1_B] = DFF,
    [T_L0_FF2_W] = DFF * D1, [T_L0_FF2_B] = D1,
    [T_L1_LN1_S] = D1, [T_L1_LN1_B] = D1, [T_L1_QKV_W] = D1 * 3 * D1, [T_L1_QKV_B] = 3 * D1,
    [T_L1_OUT_W] = D1 * D1, [T_L1_OUT_B] = D1,
    [T_L1_LN2_S] = D1, [T_L1_LN2_B] = D1, [T_L1_FF1_W] = D1 * DFF, [T_L1_FF1_B] = DFF,
    [T_L1_FF2_W] = DFF * D1, [T_L1_FF2_B] = D1,
    [T_POOL_W] = D1 * D1, [T_POOL_B] = D1, [T_SCALARS] = 4,
};

struct vsr_use_model_s {
    void *map;               /* mmap'd file, or NULL for vsr_use_load_mem() */
    size_t map_len;
    size_t file_bytes;
    int has_weights;
    const float *t[T_COUNT];
    uint32_t n_vocab, emb_rows;
    float q_scale[2], ln_eps, l2_eps;
    double *score;           /* per id */
    uint16_t *u16len;        /* per id: the piece's UTF-16 length (the JS backtracking step) */
    /* trie over code points: node 0 is the root */
    uint32_t n_nodes;
    int32_t *node_id;        /* id ending at the node, -1 if none */
    double *node_score;
    uint64_t *h_key;         /* (node << 21 | code point) + 1, 0 = empty */
    uint32_t *h_val;
    uint64_t h_mask;
    int sep_boundary;        /* no piece has U+2581 after its first character */
    const UNormalizer2 *nfkc;
};

struct vsr_use_scratch_s {
    /* tokenizer */
    UChar *u16; size_t u16_cap;
    UChar *norm; size_t norm_cap;
    uint32_t *cps; size_t cps_cap;
    double *best; int32_t *words; size_t dp_cap;
    int32_t *rev; size_t rev_cap;
    /* forward pass, for up to tok_cap tokens */
    size_t tok_cap;
    float *x, *ln, *qkv, *att, *h, *ff, *scores;
    int32_t ids[VSR_USE_MAX_BATCH][VSR_USE_MAX_TOKENS];
};

/* ---------------------------------------------------------------- load */

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static uint64_t hkey(uint32_t node, uint32_t cp) { return ((uint64_t)node << 21 | cp) + 1; }
static uint64_t hmix(uint64_t k)
{
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33;
    return k;
}

static int32_t trie_child(const vsr_use_model_t *m, uint32_t node, uint32_t cp)
{
    uint64_t k = hkey(node, cp);
    for (uint64_t i = hmix(k) & m->h_mask;; i = (i + 1) & m->h_mask) {
        if (m->h_key[i] == k) return (int32_t)m->h_val[i];
        if (m->h_key[i] == 0) return -1;
    }
}

/* strict UTF-8 decode of one piece; -1 when malformed */
static int utf8_next(const uint8_t *s, size_t len, size_t *i, uint32_t *cp)
{
    uint8_t c = s[*i];
    uint32_t v; int n;
    if (c < 0x80) { *cp = c; (*i)++; return 0; }
    if (c >= 0xC2 && c <= 0xDF) { v = c & 0x1F; n = 1; }
    else if (c >= 0xE0 && c <= 0xEF) { v = c & 0x0F; n = 2; }
    else if (c >= 0xF0 && c <= 0xF4) { v = c & 0x07; n = 3; }
    else return -1;
    if (*i + (size_t)n >= len) return -1;
    for (int k = 1; k <= n; k++) {
        uint8_t d = s[*i + (size_t)k];
        if ((d & 0xC0) != 0x80) return -1;
        v = v << 6 | (d & 0x3F);
    }
    if ((n == 2 && v < 0x800) || (n == 3 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    *i += (size_t)n + 1;
    *cp = v;
    return 0;
}

static int build_trie(vsr_use_model_t *m, const uint8_t *entries, const uint8_t *text, size_t text_len)
{
    size_t total = 1;
    for (uint32_t id = 0; id < m->n_vocab; id++) total += entries[id * 16 + 12] | (size_t)entries[id * 16 + 13] << 8;
    if (total > (1u << 24)) return VSR_ERR_INVALID;
    m->node_id = vsr_malloc(total * sizeof *m->node_id);
    m->node_score = vsr_calloc(total, sizeof *m->node_score);
    uint64_t cap = 16;
    while (cap < total * 2) cap <<= 1;
    m->h_key = vsr_calloc(cap, sizeof *m->h_key);
    m->h_val = vsr_malloc(cap * sizeof *m->h_val);
    m->h_mask = cap - 1;
    m->node_id[0] = -1;
    m->n_nodes = 1;
    m->sep_boundary = 1;
    for (uint32_t id = 0; id < m->n_vocab; id++) {
        const uint8_t *e = entries + (size_t)id * 16;
        uint32_t off = rd32(e + 8);
        size_t blen = e[12] | (size_t)e[13] << 8;
        if (off > text_len || blen > text_len - off) return VSR_ERR_INVALID;
        const uint8_t *p = text + off;
        uint32_t node = 0, ncp = 0;
        for (size_t i = 0; i < blen;) {
            uint32_t cp;
            if (utf8_next(p, blen, &i, &cp) != 0 || ++ncp > MAX_PIECE_CPS) return VSR_ERR_INVALID;
            if (cp == SEP && ncp > 1) m->sep_boundary = 0;
            if (id < RESERVED_IDS) continue; /* reserved pieces: checked, not inserted */
            int32_t c = trie_child(m, node, cp);
            if (c < 0) {
                c = (int32_t)m->n_nodes++;
                m->node_id[c] = -1;
                uint64_t k = hkey(node, cp), j = hmix(k) & m->h_mask;
                while (m->h_key[j] != 0) j = (j + 1) & m->h_mask;
                m->h_key[j] = k;
                m->h_val[j] = (uint32_t)c;
            }
            node = (uint32_t)c;
        }
        if (id >= RESERVED_IDS && node != 0) { /* a later duplicate wins, as in the JS trie */
            m->node_id[node] = (int32_t)id;
            m->node_score[node] = m->score[id];
        }
    }
    /* "▁" itself must be a piece for a chunk to start on a known token */
    if (trie_child(m, 0, SEP) < 0 || m->node_id[trie_child(m, 0, SEP)] < 0) m->sep_boundary = 0;
    return VSR_OK;
}

static int parse(vsr_use_model_t *m, const uint8_t *b, size_t len)
{
    if (len < 64 || memcmp(b, "VSRMUSE1", 8) != 0 || rd32(b + 8) != 1) return VSR_ERR_INVALID;
    uint32_t n_t = rd32(b + 12);
    m->n_vocab = rd32(b + 16);
    m->emb_rows = rd32(b + 20);
    uint64_t voff = rd64(b + 24), vbytes = rd64(b + 32);
    m->file_bytes = rd64(b + 40);
    if (m->file_bytes != len || (n_t != 0 && n_t != T_COUNT) || m->n_vocab <= RESERVED_IDS ||
        m->n_vocab > MAX_VOCAB || 64 + (uint64_t)n_t * 16 > len || voff > len || vbytes > len - voff ||
        vbytes < (uint64_t)m->n_vocab * 16)
        return VSR_ERR_INVALID;
    m->has_weights = n_t == T_COUNT;
    if (m->has_weights) {
        if (m->emb_rows < m->n_vocab || m->emb_rows > MAX_VOCAB) return VSR_ERR_INVALID;
        for (uint32_t i = 0; i < T_COUNT; i++) {
            uint64_t off = rd64(b + 64 + i * 16), count = rd64(b + 72 + i * 16);
            uint64_t want = i == T_EMB ? (uint64_t)m->emb_rows * D0 : expected_count[i];
            if (count != want || off > len || count * 4 > len - off || ((uintptr_t)(b + off) & 3) != 0)
                return VSR_ERR_INVALID;
            m->t[i] = (const float *)(const void *)(b + off);
        }
        const float *sc = m->t[T_SCALARS];
        m->q_scale[0] = sc[0]; m->q_scale[1] = sc[1]; m->ln_eps = sc[2]; m->l2_eps = sc[3];
        if (!(m->ln_eps >= 0.0f && m->l2_eps >= 0.0f && isfinite(m->q_scale[0]) && isfinite(m->q_scale[1])))
            return VSR_ERR_INVALID;
    }
    const uint8_t *entries = b + voff;
    m->score = vsr_malloc(m->n_vocab * sizeof *m->score);
    m->u16len = vsr_malloc(m->n_vocab * sizeof *m->u16len);
    for (uint32_t id = 0; id < m->n_vocab; id++) {
        double s;
        memcpy(&s, entries + (size_t)id * 16, 8);
        if (!isfinite(s)) return VSR_ERR_INVALID;
        m->score[id] = s;
        uint16_t u;
        memcpy(&u, entries + (size_t)id * 16 + 14, 2);
        m->u16len[id] = u;
    }
    int rc = build_trie(m, entries, entries + (size_t)m->n_vocab * 16, vbytes - (uint64_t)m->n_vocab * 16);
    if (rc != VSR_OK) return rc;
    UErrorCode err = U_ZERO_ERROR;
    m->nfkc = unorm2_getNFKCInstance(&err);
    if (U_FAILURE(err) || !unorm2_hasBoundaryBefore(m->nfkc, ' ')) return VSR_ERR;
    return VSR_OK;
}

static int finish_load(vsr_use_model_t *m, const void *data, size_t len, vsr_use_model_t **out)
{
    int rc = parse(m, data, len);
    if (rc != VSR_OK) {
        vsr_use_free(m);
        return rc;
    }
    *out = m;
    return VSR_OK;
}

int vsr_use_load_mem(const void *data, size_t len, vsr_use_model_t **out)
{
    vsr_use_model_t *m = vsr_calloc(1, sizeof *m);
    return finish_load(m, data, len, out);
}

int vsr_use_load(const char *path, vsr_use_model_t **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return VSR_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 64) {
        close(fd);
        return st.st_size < 64 && S_ISREG(st.st_mode) ? VSR_ERR_INVALID : VSR_ERR_IO;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return VSR_ERR_IO;
    madvise(map, (size_t)st.st_size, MADV_WILLNEED); /* read ahead: the first embedding touches it all */
    vsr_use_model_t *m = vsr_calloc(1, sizeof *m);
    m->map = map;
    m->map_len = (size_t)st.st_size;
    return finish_load(m, map, m->map_len, out);
}

void vsr_use_free(vsr_use_model_t *m)
{
    if (m == NULL) return;
    if (m->map != NULL) munmap(m->map, m->map_len);
    vsr_free(m->score);
    vsr_free(m->u16len);
    vsr_free(m->node_id);
    vsr_free(m->node_score);
    vsr_free(m->h_key);
    vsr_free(m->h_val);
    vsr_free(m);
}

void vsr_models_blas_threads(int n) { openblas_set_num_threads(n < 1 ? 1 : n); }

size_t vsr_use_vocab_size(const vsr_use_model_t *m) { return m->n_vocab; }
int vsr_use_has_weights(const vsr_use_model_t *m) { return m->has_weights; }
size_t vsr_use_file_bytes(const vsr_use_model_t *m) { return m->file_bytes; }

/* ------------------------------------------------------------- scratch */

vsr_use_scratch_t *vsr_use_scratch_new(void) { return vsr_calloc(1, sizeof(vsr_use_scratch_t)); }

void vsr_use_scratch_free(vsr_use_scratch_t *s)
{
    if (s == NULL) return;
    vsr_free(s->u16); vsr_free(s->norm); vsr_free(s->cps);
    vsr_free(s->best); vsr_free(s->words); vsr_free(s->rev);
    vsr_free(s->x); vsr_free(s->ln); vsr_free(s->qkv); vsr_free(s->att);
    vsr_free(s->h); vsr_free(s->ff); vsr_free(s->scores);
    vsr_free(s);
}

static void grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return;
    size_t n = *cap ? *cap : 256;
    while (n < need) n *= 2;
    *p = vsr_realloc(*p, n * elem);
    *cap = n;
}

/* ----------------------------------------------------------- tokenizer */

/* Where the chunk starting at pos ends: the whole rest when it fits, else
 * just before the last ASCII space in the chunk (a token boundary: no piece
 * holds U+2581 after its start), else at a code point where normalisation
 * may restart. */
static size_t chunk_end(const vsr_use_model_t *m, const uint8_t *t, size_t len, size_t pos)
{
    if (len - pos <= VSR_USE_CHUNK_BYTES) return len;
    size_t lim = pos + VSR_USE_CHUNK_BYTES;
    if (m->sep_boundary)
        for (size_t i = lim; i > pos; i--)
            if (t[i] == ' ') return i;
    for (size_t i = lim; i > pos + VSR_USE_CHUNK_BYTES / 2; i--) {
        if ((t[i] & 0xC0) == 0x80) continue; /* not a code point's first byte */
        UChar32 c;
        int32_t k = (int32_t)i, n = (int32_t)VSR_MIN(len, i + 4);
        U8_NEXT(t, k, n, c);
        if (c >= 0 && unorm2_hasBoundaryBefore(m->nfkc, c)) return i;
    }
    while (lim > pos + 1 && (t[lim] & 0xC0) == 0x80) lim--;
    return lim;
}

/* Segments cps[0..n) as the TF.js tokenizer does and appends its ids to
 * out (up to max), merging repeated unknowns (id 0) with *prev_unk.  *carry
 * is the score the whole text's run has at the chunk's start (0 for the
 * first chunk) and becomes the one at its end: the JS compares sums against
 * 0 as "unset", so a chunk that restarted from 0 would, with pieces of
 * positive or null score, take other ties than one pass over the whole text
 * does.  Starting from the carried score makes a cut before a space exact. */
static void viterbi(const vsr_use_model_t *m, vsr_use_scratch_t *s, size_t n, int32_t *out, size_t max,
                    size_t *n_out, int *prev_unk, double *carry)
{
    const uint32_t *cps = s->cps;
    double *best = s->best;
    int32_t *words = s->words;
    for (size_t i = 0; i <= n; i++) {
        best[i] = 0.0;
        words[i] = 0;
    }
    best[0] = *carry;
    /* push form of the JS pull loop: for a given end the candidates arrive in
     * increasing start order either way, and best[start] is final by then */
    for (size_t i = 0; i < n; i++) {
        uint32_t node = 0;
        int found = 0;
        for (size_t k = i; k < n; k++) {
            int32_t c = trie_child(m, node, cps[k]);
            if (c < 0) break;
            node = (uint32_t)c;
            if (m->node_id[node] >= 0) {
                found = 1;
                double sc = m->node_score[node] + best[i];
                if (best[k + 1] == 0 || sc >= best[k + 1]) {
                    best[k + 1] = sc;
                    words[k + 1] = m->node_id[node];
                }
            }
        }
        if (!found) { /* an unknown character: id 0, score 0 */
            double sc = best[i];
            if (best[i + 1] == 0 || sc >= best[i + 1]) {
                best[i + 1] = sc;
                words[i + 1] = 0;
            }
        }
    }
    *carry = best[n];
    /* backtrack by the pieces' UTF-16 lengths, as the JS does */
    size_t nrev = 0;
    for (size_t it = n; it > 0;) {
        int32_t id = words[it];
        s->rev[nrev++] = id;
        size_t step = m->u16len[id] ? m->u16len[id] : 1;
        it = step >= it ? 0 : it - step;
    }
    while (nrev > 0 && *n_out < max) {
        int32_t id = s->rev[--nrev];
        if (!(*prev_unk && id == 0)) out[(*n_out)++] = id;
        *prev_unk = id == 0;
    }
}

int vsr_use_tokenize(const vsr_use_model_t *m, const char *text, size_t len, int32_t *ids, size_t max_ids,
                     size_t *n_ids, vsr_use_scratch_t *scratch)
{
    vsr_use_scratch_t *s = scratch ? scratch : vsr_use_scratch_new();
    const uint8_t *t = (const uint8_t *)text;
    size_t pos = 0, n_out = 0;
    int prev_unk = 0, rc = VSR_OK;
    double carry = 0.0;
    while (pos < len && n_out < max_ids) {
        size_t end = chunk_end(m, t, len, pos), clen = end - pos;
        grow((void **)&s->u16, &s->u16_cap, clen + 1, sizeof(UChar));
        UErrorCode err = U_ZERO_ERROR;
        int32_t n16 = 0, subs = 0;
        u_strFromUTF8WithSub(s->u16, (int32_t)s->u16_cap, &n16, text + pos, (int32_t)clen, 0xFFFD, &subs, &err);
        if (U_FAILURE(err)) { rc = VSR_ERR_INVALID; break; }
        int32_t nn;
        for (;;) {
            err = U_ZERO_ERROR;
            nn = unorm2_normalize(m->nfkc, s->u16, n16, s->norm, (int32_t)s->norm_cap, &err);
            if (err == U_BUFFER_OVERFLOW_ERROR) {
                grow((void **)&s->norm, &s->norm_cap, (size_t)nn + 1, sizeof(UChar));
                continue;
            }
            break;
        }
        if (U_FAILURE(err)) { rc = VSR_ERR_INVALID; break; }
        /* code points (a lone surrogate counts as one, like JS's for-of) */
        grow((void **)&s->cps, &s->cps_cap, (size_t)nn + 2, sizeof(uint32_t));
        size_t n = 0;
        if (pos == 0 && nn > 0) s->cps[n++] = SEP;
        for (int32_t i = 0; i < nn;) {
            UChar32 c;
            U16_NEXT(s->norm, i, nn, c);
            s->cps[n++] = c == ' ' ? SEP : (uint32_t)c;
        }
        if (n + 1 > s->dp_cap) {
            size_t c = s->dp_cap ? s->dp_cap : 256;
            while (c < n + 1) c *= 2;
            s->best = vsr_realloc(s->best, c * sizeof *s->best);
            s->words = vsr_realloc(s->words, c * sizeof *s->words);
            s->dp_cap = c;
        }
        grow((void **)&s->rev, &s->rev_cap, n + 1, sizeof(int32_t));
        viterbi(m, s, n, ids, max_ids, &n_out, &prev_unk, &carry);
        pos = end;
    }
    *n_ids = n_out;
    if (scratch == NULL) vsr_use_scratch_free(s);
    return rc;
}

/* text with something to embed: any code point that isn't white space */
static int has_content(const char *text, size_t len)
{
    const uint8_t *t = (const uint8_t *)text;
    for (int32_t i = 0, n = (int32_t)VSR_MIN(len, (size_t)INT32_MAX); i < n;) {
        UChar32 c;
        U8_NEXT(t, i, n, c);
        if (c < 0 || !u_isUWhiteSpace(c)) return 1;
    }
    return 0;
}

/* --------------------------------------------------------- forward pass */

static void layer_norm(const float *x, float *y, size_t rows, size_t d, const float *scale, const float *bias,
                       float eps)
{
    for (size_t r = 0; r < rows; r++) {
        const float *a = x + r * d;
        float *o = y + r * d;
        float sum = 0.0f;
        for (size_t i = 0; i < d; i++) sum += a[i];
        float mean = sum / (float)d, var = 0.0f;
        for (size_t i = 0; i < d; i++) {
            float c = a[i] - mean;
            var += c * c;
        }
        float rs = 1.0f / sqrtf(var / (float)d + eps);
        for (size_t i = 0; i < d; i++) o[i] = scale[i] * rs * (a[i] - mean) + bias[i];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX512_KERNEL 1
/* y[RB rows, 32 columns] += x[RB,k]·w[k, 32 columns] with the accumulators
 * in registers while w streams by rows.  On the forward pass's shapes this
 * beats sgemm, which repacks the whole weight matrix on every call, at every
 * row count measured (22 to 2,048 rows: docs/runtime.md). */
static inline __attribute__((always_inline, target("avx512f"))) void
tile32(const float *x, size_t k, const float *w, size_t n, float *y, const size_t RB)
{
    __m512 a0[8], a1[8];
    for (size_t r = 0; r < RB; r++) {
        a0[r] = _mm512_loadu_ps(y + r * n);
        a1[r] = _mm512_loadu_ps(y + r * n + 16);
    }
    for (size_t kk = 0; kk < k; kk++) {
        __m512 w0 = _mm512_loadu_ps(w + kk * n), w1 = _mm512_loadu_ps(w + kk * n + 16);
#pragma GCC unroll 8
        for (size_t r = 0; r < RB; r++) {
            __m512 b = _mm512_set1_ps(x[r * k + kk]);
            a0[r] = _mm512_fmadd_ps(b, w0, a0[r]);
            a1[r] = _mm512_fmadd_ps(b, w1, a1[r]);
        }
    }
    for (size_t r = 0; r < RB; r++) {
        _mm512_storeu_ps(y + r * n, a0[r]);
        _mm512_storeu_ps(y + r * n + 16, a1[r]);
    }
}

__attribute__((target("avx512f"))) static void gemm_strips(const float *x, size_t rows, size_t k,
                                                            const float *w, size_t n, float *y)
{
    /* column strips outermost: a strip of w (k × 128 bytes) stays in L2 while
     * every block of rows passes over it */
    for (size_t j = 0; j < n; j += 32)
        for (size_t r0 = 0; r0 < rows; r0 += 8) {
            const float *xr = x + r0 * k;
            float *yr = y + r0 * n + j;
            switch (VSR_MIN(rows - r0, (size_t)8)) {
            case 8: tile32(xr, k, w + j, n, yr, 8); break;
            case 7: tile32(xr, k, w + j, n, yr, 7); break;
            case 6: tile32(xr, k, w + j, n, yr, 6); break;
            case 5: tile32(xr, k, w + j, n, yr, 5); break;
            case 4: tile32(xr, k, w + j, n, yr, 4); break;
            case 3: tile32(xr, k, w + j, n, yr, 3); break;
            case 2: tile32(xr, k, w + j, n, yr, 2); break;
            default: tile32(xr, k, w + j, n, yr, 1); break;
            }
        }
}

/* VSR_USE_NO_AVX512 set: sgemm everywhere (to compare) */
static int have_avx512(void)
{
    static int cached = -1; /* any thread may compute it: all get the same answer */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = getenv("VSR_USE_NO_AVX512") == NULL && __builtin_cpu_supports("avx512f");
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

/* y[rows,n] = (accumulate ? y : 0) + bias + x[rows,k]·w[k,n] */
static void dense(const float *x, size_t rows, size_t k, const float *w, const float *bias, size_t n, float *y,
                  int accumulate)
{
    for (size_t r = 0; r < rows; r++) {
        float *o = y + r * n;
        if (accumulate)
            for (size_t i = 0; i < n; i++) o[i] += bias[i];
        else
            memcpy(o, bias, n * sizeof *o);
    }
#ifdef HAVE_AVX512_KERNEL
    if (n % 32 == 0 && have_avx512()) {
        gemm_strips(x, rows, k, w, n, y);
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)n, (int)k, 1.0f, x, (int)k, w, (int)n,
                1.0f, y, (int)n);
}

/* multi-head self-attention of one sequence of L rows: qkv [L,3d] → att [L,d] */
static void attention(const float *qkv, size_t L, size_t d, float scale, float *scores, float *att)
{
    size_t dh = d / HEADS, ld = 3 * d;
    for (size_t h = 0; h < HEADS; h++) {
        const float *q = qkv + h * dh, *k = qkv + d + h * dh, *v = qkv + 2 * d + h * dh;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)L, (int)L, (int)dh, scale, q, (int)ld, k, (int)ld,
                    0.0f, scores, (int)L);
        for (size_t i = 0; i < L; i++) {
            float *row = scores + i * L, mx = row[0], sum = 0.0f;
            for (size_t j = 1; j < L; j++) mx = row[j] > mx ? row[j] : mx;
            for (size_t j = 0; j < L; j++) {
                row[j] = expf(row[j] - mx);
                sum += row[j];
            }
            float inv = 1.0f / sum;
            for (size_t j = 0; j < L; j++) row[j] *= inv;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)L, (int)dh, (int)L, 1.0f, scores, (int)L, v,
                    (int)ld, 0.0f, att + h * dh, (int)d);
    }
}

static void reserve_tokens(vsr_use_scratch_t *s, size_t tokens)
{
    if (tokens <= s->tok_cap) return;
    size_t n = VSR_MAX(tokens, 2 * s->tok_cap);
    vsr_free(s->x); vsr_free(s->ln); vsr_free(s->qkv); vsr_free(s->att); vsr_free(s->h); vsr_free(s->ff);
    s->x = vsr_malloc(n * D1 * sizeof(float));
    s->ln = vsr_malloc(n * D1 * sizeof(float));
    s->qkv = vsr_malloc(n * 3 * D1 * sizeof(float));
    s->att = vsr_malloc(n * D1 * sizeof(float));
    s->h = vsr_malloc(n * D1 * sizeof(float));
    s->ff = vsr_malloc(n * DFF * sizeof(float));
    if (s->scores == NULL) s->scores = vsr_malloc(VSR_USE_MAX_TOKENS * VSR_USE_MAX_TOKENS * sizeof(float));
    s->tok_cap = n;
}

/* the forward pass over nseq packed sequences (ids in s->ids, lengths in
 * lens[]) into out[nseq][VSR_USE_DIM] */
static void forward(const vsr_use_model_t *m, vsr_use_scratch_t *s, size_t nseq, const size_t *lens, float *out)
{
    size_t T = 0;
    for (size_t q = 0; q < nseq; q++) T += lens[q];
    reserve_tokens(s, T);
    const float *const *t = m->t;
    const float *inv = t[T_TIMING];

    /* input: emb + (emb + timing) */
    float *x = s->x;
    for (size_t q = 0, r = 0; q < nseq; q++)
        for (size_t p = 0; p < lens[q]; p++, r++) {
            const float *e = t[T_EMB] + (size_t)s->ids[q][p] * D0;
            float *o = x + r * D0;
            for (size_t i = 0; i < D0 / 2; i++) {
                float a = (float)p * inv[i];
                o[i] = e[i] + (e[i] + (float)sin(a));
                o[i + D0 / 2] = e[i + D0 / 2] + (e[i + D0 / 2] + (float)cos(a));
            }
        }

    /* layer 0 */
    float *h = s->h;
    layer_norm(x, s->ln, T, D0, t[T_L0_LN1_S], t[T_L0_LN1_B], m->ln_eps);
    dense(s->ln, T, D0, t[T_L0_QKV_W], t[T_L0_QKV_B], 3 * D0, s->qkv, 0);
    for (size_t q = 0, r = 0; q < nseq; r += lens[q], q++)
        attention(s->qkv + r * 3 * D0, lens[q], D0, m->q_scale[0], s->scores, s->att + r * D0);
    dense(x, T, D0, t[T_L0_RES_W], t[T_L0_RES_B], D1, h, 0);
    dense(s->att, T, D0, t[T_L0_OUT_W], t[T_L0_OUT_B], D1, h, 1);
    layer_norm(h, s->ln, T, D1, t[T_L0_LN2_S], t[T_L0_LN2_B], m->ln_eps);
    dense(s->ln, T, D1, t[T_L0_FF1_W], t[T_L0_FF1_B], DFF, s->ff, 0);
    for (size_t i = 0; i < T * DFF; i++) s->ff[i] = s->ff[i] > 0.0f ? s->ff[i] : 0.0f;
    dense(s->ff, T, DFF, t[T_L0_FF2_W], t[T_L0_FF2_B], D1, h, 1);

    /* layer 1 */
    layer_norm(h, s->ln, T, D1, t[T_L1_LN1_S], t[T_L1_LN1_B], m->ln_eps);
    dense(s->ln, T, D1, t[T_L1_QKV_W], t[T_L1_QKV_B], 3 * D1, s->qkv, 0);
    for (size_t q = 0, r = 0; q < nseq; r += lens[q], q++)
        attention(s->qkv + r * 3 * D1, lens[q], D1, m->q_scale[1], s->scores, s->att + r * D1);
    dense(s->att, T, D1, t[T_L1_OUT_W], t[T_L1_OUT_B], D1, h, 1);
    layer_norm(h, s->ln, T, D1, t[T_L1_LN2_S], t[T_L1_LN2_B], m->ln_eps);
    dense(s->ln, T, D1, t[T_L1_FF1_W], t[T_L1_FF1_B], DFF, s->ff, 0);
    for (size_t i = 0; i < T * DFF; i++) s->ff[i] = s->ff[i] > 0.0f ? s->ff[i] : 0.0f;

    /* masked mean pool.  The last projection is linear, so it runs once on
     * the pooled feed-forward activations: mean(h + f·W2 + b2) =
     * mean(h) + mean(f)·W2 + b2, a sixth of the work for one row.  Then
     * dense + tanh and L2 normalisation. */
    float *pool = s->x, *fpool = s->qkv; /* free now: nseq rows of D1 and of DFF */
    for (size_t q = 0, r = 0; q < nseq; r += lens[q], q++) {
        float *o = pool + q * D1, *fo = fpool + q * DFF;
        memset(o, 0, D1 * sizeof *o);
        memset(fo, 0, DFF * sizeof *fo);
        for (size_t p = 0; p < lens[q]; p++) {
            for (size_t i = 0; i < D1; i++) o[i] += h[(r + p) * D1 + i];
            for (size_t i = 0; i < DFF; i++) fo[i] += s->ff[(r + p) * DFF + i];
        }
        float n = (float)lens[q];
        for (size_t i = 0; i < D1; i++) o[i] /= n;
        for (size_t i = 0; i < DFF; i++) fo[i] /= n;
    }
    dense(fpool, nseq, DFF, t[T_L1_FF2_W], t[T_L1_FF2_B], D1, pool, 1);
    dense(pool, nseq, D1, t[T_POOL_W], t[T_POOL_B], VSR_USE_DIM, out, 0);
    for (size_t q = 0; q < nseq; q++) {
        float *o = out + q * VSR_USE_DIM, ss = 0.0f;
        for (size_t i = 0; i < VSR_USE_DIM; i++) {
            o[i] = tanhf(o[i]);
            ss += o[i] * o[i];
        }
        float rs = 1.0f / sqrtf(ss > m->l2_eps ? ss : m->l2_eps);
        for (size_t i = 0; i < VSR_USE_DIM; i++) o[i] *= rs;
    }
}

int vsr_use_embed_batch(const vsr_use_model_t *m, const vsr_slice_t *texts, size_t n, float *out, int *rc,
                        vsr_use_scratch_t *scratch)
{
    if (n > VSR_USE_MAX_BATCH) return VSR_ERR_TOO_BIG;
    if (!m->has_weights) return VSR_ERR_NOT_FOUND;
    if (n == 0) return VSR_OK;
    vsr_use_scratch_t *s = scratch ? scratch : vsr_use_scratch_new();
    size_t lens[VSR_USE_MAX_BATCH], slot[VSR_USE_MAX_BATCH], nseq = 0;
    for (size_t i = 0; i < n; i++) {
        memset(out + i * VSR_USE_DIM, 0, VSR_USE_DIM * sizeof(float));
        size_t k = 0;
        rc[i] = has_content(texts[i].p, texts[i].len)
                    ? vsr_use_tokenize(m, texts[i].p, texts[i].len, s->ids[nseq], VSR_USE_MAX_TOKENS, &k, s)
                    : VSR_ERR_INVALID;
        if (rc[i] == VSR_OK && k == 0) rc[i] = VSR_ERR_INVALID;
        if (rc[i] != VSR_OK) continue;
        lens[nseq] = k;
        slot[nseq++] = i;
    }
    if (nseq > 0) {
        float *tmp = nseq == n ? out : vsr_malloc(nseq * VSR_USE_DIM * sizeof(float));
        forward(m, s, nseq, lens, tmp);
        if (tmp != out) {
            for (size_t q = 0; q < nseq; q++)
                memcpy(out + slot[q] * VSR_USE_DIM, tmp + q * VSR_USE_DIM, VSR_USE_DIM * sizeof(float));
            vsr_free(tmp);
        }
    }
    if (scratch == NULL) vsr_use_scratch_free(s);
    return VSR_OK;
}

int vsr_use_embed(const vsr_use_model_t *m, const char *text, size_t len, float out[VSR_USE_DIM],
                  vsr_use_scratch_t *scratch)
{
    vsr_slice_t one = {text, len};
    int rc1 = VSR_OK;
    int rc = vsr_use_embed_batch(m, &one, 1, out, &rc1, scratch);
    if (rc != VSR_OK) {
        memset(out, 0, VSR_USE_DIM * sizeof(float));
        return rc;
    }
    return rc1;
}
