/* literal.c — Aho-Corasick over bytes, compiled to a DFA with byte classes.
 *
 * Why a DFA: the scan is one table lookup per text byte whatever the number
 * of keywords, which is what keeps a request's cost proportional to the
 * prompt.  Bytes that occur in no pattern share class 0, so a table row is
 * as wide as the patterns' alphabet (a few dozen for ASCII keywords), not
 * 256.  For the case-insensitive automaton ASCII upper-case bytes are mapped
 * to their lower-case classes, so ASCII text is scanned without folding.
 *
 * Most of a prompt is spent at the root, where a position can be skipped
 * when its byte and the next begin no pattern: a table of such pairs
 * decides, and on x86-64 with SSSE3 a bucketed test of three bytes (Teddy's
 * nibble tables) clears 16 positions at a time before that table is asked,
 * 32 with AVX2 (VSR_NO_AVX2 in the environment turns that one off).
 * These tests depend on nothing before them, unlike the automaton's loads. */
#include "signals/signals-int.h"

/* A transition holds the target state's row offset (state x n_classes), so
 * the scan needs no multiplication, and HIT_FLAG when the target reports a
 * match, so the common no-match byte costs a single dependent load. */
#define HIT_FLAG 0x80000000u

/* Three bytes at a time, as Teddy does: the patterns are put in 8 buckets
 * (one bit each, by first byte) and for offset j < 3 of a pattern, lo[j][b &
 * 15] and hi[j][b >> 4] carry its bucket's bit for every byte b the automaton
 * takes there (both cases when it folds); an offset past a short pattern
 * carries it for every byte.  Position k can begin a pattern of bucket x only
 * if bit x survives the AND over the three offsets.  The test is a superset
 * (the nibbles of a bucket's different bytes combine), exact for a bucket of
 * one ASCII pattern. */
typedef struct {
    uint8_t lo[3][16], hi[3][16];
} vsr__teddy_t;

struct vsr__ac_s {
    uint32_t n_states;
    uint32_t n_classes;
    uint16_t cls[256];
    uint8_t start[256];   /* the byte leaves the root: the scan skips the others there */
    uint8_t pair[256 * 32]; /* bit (a, b): some pattern starts with a then b, or a alone is one */
    vsr__teddy_t teddy;     /* the patterns' first three bytes, for 16 positions at a time */
    int simd;               /* 0: bytes one by one; 1: the CPU has SSSE3 (skip16); 2: AVX2 too (skip32) */
    uint32_t *trans;      /* n_states x n_classes; row offsets | HIT_FLAG */
    uint8_t *hit;         /* state reports something (own output or via dict) */
    uint32_t *dict;       /* next state on the fail chain with outputs, 0 = none */
    uint32_t *out_first;  /* first local output of a state, VSR__NO_PAT = none */
    uint32_t *out_next;   /* next local output */
    uint32_t *out_pat;    /* local output -> global pattern id */
};

/* Bit (s[i], s[i + 1]) of a pair table. */
#define PAIR(pair, s, i) (((pair)[(s)[i] * 32u + ((s)[(i) + 1] >> 3)] >> ((s)[(i) + 1] & 7)) & 1u)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SSSE3_SKIP 1

static void teddy_build(vsr__teddy_t *t, const vsr__pat_t *pats, const uint32_t *ids, size_t n, const uint16_t *cls,
                        uint32_t n_classes)
{
    /* the buckets each byte class may be at offset j, and the buckets any byte
     * may be there (past a short pattern); then the nibble tables in one pass */
    uint8_t (*by_class)[3] = vsr_calloc(n_classes, sizeof(*by_class));
    uint8_t any[3] = {0};
    uint16_t firsts[8];
    size_t n_firsts = 0;
    for (size_t i = 0; i < n; i++) {
        const vsr__pat_t *p = &pats[ids[i]];
        /* a bucket per first byte (its class) while there are buckets to give */
        uint16_t c0 = p->len ? cls[(unsigned char)p->bytes[0]] : 0;
        size_t b = 0;
        while (b < n_firsts && firsts[b] != c0)
            b++;
        if (b == n_firsts) {
            if (n_firsts < 8)
                firsts[n_firsts++] = c0;
            else
                b = c0 % 8u;
        }
        uint8_t bit = (uint8_t)(1u << b);
        for (size_t j = 0; j < 3; j++) {
            if (j >= p->len)
                any[j] |= bit;
            else
                by_class[cls[(unsigned char)p->bytes[j]]][j] |= bit;
        }
    }
    memset(t, 0, sizeof(*t));
    for (int x = 0; x < 256; x++)
        for (size_t j = 0; j < 3; j++) {
            uint8_t bits = (uint8_t)(by_class[cls[x]][j] | any[j]);
            t->lo[j][x & 15] |= bits;
            t->hi[j][x >> 4] |= bits;
        }
    vsr_free(by_class);
}


/* From i at the root: the first position before len - 17 that can begin a
 * pattern (its three bytes pass the buckets, and its pair), or the first
 * position that is not checked (i + 18 > len).  The first byte alone clears
 * most blocks of most texts: the next two are looked at only when it does
 * not.  The six tables stay in registers. */
__attribute__((target("ssse3"))) static size_t skip16(const vsr__ac_t *ac, const unsigned char *s, size_t i,
                                                      size_t len)
{
    const vsr__teddy_t *t = &ac->teddy;
    const __m128i nib = _mm_set1_epi8(0x0f), zero = _mm_setzero_si128();
    const __m128i lo0 = _mm_loadu_si128((const __m128i *)(const void *)t->lo[0]);
    const __m128i hi0 = _mm_loadu_si128((const __m128i *)(const void *)t->hi[0]);
    const __m128i lo1 = _mm_loadu_si128((const __m128i *)(const void *)t->lo[1]);
    const __m128i hi1 = _mm_loadu_si128((const __m128i *)(const void *)t->hi[1]);
    const __m128i lo2 = _mm_loadu_si128((const __m128i *)(const void *)t->lo[2]);
    const __m128i hi2 = _mm_loadu_si128((const __m128i *)(const void *)t->hi[2]);
#define TEDDY_AT(lo, hi, x)                                                                                          \
    _mm_and_si128(_mm_shuffle_epi8(lo, _mm_and_si128(x, nib)), _mm_shuffle_epi8(hi, _mm_and_si128(_mm_srli_epi16(x, 4), nib)))
    while (i + 18 <= len) {
        const __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i r = TEDDY_AT(lo0, hi0, x0);
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(r, zero)) != 0xffff) {
            const __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 1));
            const __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 2));
            r = _mm_and_si128(r, _mm_and_si128(TEDDY_AT(lo1, hi1, x1), TEDDY_AT(lo2, hi2, x2)));
            for (unsigned m = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(r, zero)) & 0xffffu; m; m &= m - 1) {
                size_t k = i + (unsigned)__builtin_ctz(m);
                if (PAIR(ac->pair, s, k))
                    return k;
            }
        }
        i += 16;
    }
#undef TEDDY_AT
    return i;
}

/* skip16 over 32 positions at a time (AVX2: PSHUFB works within each
 * 128-bit lane, so each table is in both); stops where fewer than 34
 * bytes are left, for skip16 to go on. */
__attribute__((target("avx2"))) static size_t skip32(const vsr__ac_t *ac, const unsigned char *s, size_t i,
                                                     size_t len)
{
    const vsr__teddy_t *t = &ac->teddy;
    const __m256i nib = _mm256_set1_epi8(0x0f), zero = _mm256_setzero_si256();
#define TABLE(x) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(x)))
    const __m256i lo0 = TABLE(t->lo[0]), hi0 = TABLE(t->hi[0]);
    const __m256i lo1 = TABLE(t->lo[1]), hi1 = TABLE(t->hi[1]);
    const __m256i lo2 = TABLE(t->lo[2]), hi2 = TABLE(t->hi[2]);
#undef TABLE
#define TEDDY_AT(lo, hi, x)                                                                                          \
    _mm256_and_si256(_mm256_shuffle_epi8(lo, _mm256_and_si256(x, nib)),                                             \
                     _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(x, 4), nib)))
    while (i + 34 <= len) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i));
        __m256i r = TEDDY_AT(lo0, hi0, x0);
        if ((unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(r, zero)) != 0xffffffffu) {
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 1));
            const __m256i x2 = _mm256_loadu_si256((const __m256i *)(const void *)(s + i + 2));
            r = _mm256_and_si256(r, _mm256_and_si256(TEDDY_AT(lo1, hi1, x1), TEDDY_AT(lo2, hi2, x2)));
            for (unsigned m = ~(unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(r, zero)); m; m &= m - 1) {
                size_t k = i + (unsigned)__builtin_ctz(m);
                if (PAIR(ac->pair, s, k))
                    return k;
            }
        }
        i += 32;
    }
#undef TEDDY_AT
    return i;
}
#endif

vsr__ac_t *vsr__ac_build(const vsr__pat_t *pats, const uint32_t *ids, size_t n, int ci)
{
    vsr__ac_t *ac = vsr_calloc(1, sizeof(*ac));
    /* byte classes */
    uint8_t used[256] = {0};
    size_t total = 1;
    for (size_t i = 0; i < n; i++) {
        const vsr__pat_t *p = &pats[ids[i]];
        for (size_t j = 0; j < p->len; j++)
            used[(unsigned char)p->bytes[j]] = 1;
        total += p->len;
    }
    uint32_t nc = 1;
    for (int b = 0; b < 256; b++) {
        if (used[b])
            ac->cls[b] = (uint16_t)nc++;
    }
    if (ci) {
        for (int b = 'A'; b <= 'Z'; b++)
            ac->cls[b] = ac->cls[b + 32];
    }
    ac->n_classes = nc;

    /* trie */
    uint32_t cap = (uint32_t)total;
    ac->trans = vsr_calloc((size_t)cap * nc, sizeof(uint32_t));
    uint32_t *parent = vsr_calloc(cap, sizeof(uint32_t));
    uint32_t *fail = vsr_calloc(cap, sizeof(uint32_t));
    ac->dict = vsr_calloc(cap, sizeof(uint32_t));
    ac->hit = vsr_calloc(cap, 1);
    ac->out_first = vsr_malloc(cap * sizeof(uint32_t));
    for (uint32_t i = 0; i < cap; i++)
        ac->out_first[i] = VSR__NO_PAT;
    ac->out_next = vsr_malloc((n ? n : 1) * sizeof(uint32_t));
    ac->out_pat = vsr_malloc((n ? n : 1) * sizeof(uint32_t));
    uint32_t ns = 1;
    for (size_t i = 0; i < n; i++) {
        const vsr__pat_t *p = &pats[ids[i]];
        uint32_t st = 0;
        for (size_t j = 0; j < p->len; j++) {
            uint32_t c = ac->cls[(unsigned char)p->bytes[j]];
            uint32_t *t = &ac->trans[(size_t)st * nc + c];
            if (*t == 0) {
                *t = ns;
                parent[ns] = st;
                ns++;
            }
            st = *t;
        }
        ac->out_pat[i] = ids[i];
        ac->out_next[i] = ac->out_first[st];
        ac->out_first[st] = (uint32_t)i;
    }
    ac->n_states = ns;

    /* breadth-first: fail links, dictionary links, missing transitions */
    uint32_t *queue = vsr_malloc(ns * sizeof(uint32_t));
    size_t qh = 0, qt = 0;
    for (uint32_t c = 0; c < nc; c++) {
        uint32_t u = ac->trans[c];
        if (u) {
            fail[u] = 0;
            queue[qt++] = u;
        }
    }
    while (qh < qt) {
        uint32_t r = queue[qh++];
        for (uint32_t c = 0; c < nc; c++) {
            uint32_t *t = &ac->trans[(size_t)r * nc + c];
            uint32_t u = *t;
            if (u && parent[u] == r) {
                uint32_t f = ac->trans[(size_t)fail[r] * nc + c];
                fail[u] = f;
                ac->dict[u] = ac->out_first[f] != VSR__NO_PAT ? f : ac->dict[f];
                queue[qt++] = u;
            } else {
                *t = ac->trans[(size_t)fail[r] * nc + c];
            }
        }
    }
    for (uint32_t s = 1; s < ns; s++)
        ac->hit[s] = ac->out_first[s] != VSR__NO_PAT || ac->dict[s] != 0;
    /* the pairs of bytes that can begin a match: a first byte's depth-1
     * state and a child of it in the trie (not a fail transition) */
    for (int a = 0; a < 256; a++) {
        uint32_t u = ac->cls[a] ? ac->trans[ac->cls[a]] : 0;
        if (u == 0)
            continue;
        for (int b = 0; b < 256; b++) {
            uint32_t v = ac->cls[b] ? ac->trans[(size_t)u * nc + ac->cls[b]] : 0;
            if (ac->hit[u] || (v && parent[v] == u))
                ac->pair[a * 32 + (b >> 3)] |= (uint8_t)(1u << (b & 7));
        }
    }
    VSR_BUG_ON((uint64_t)ns * nc >= HIT_FLAG);
    for (size_t i = 0; i < (size_t)ns * nc; i++) {
        uint32_t t = ac->trans[i];
        ac->trans[i] = t * nc | (ac->hit[t] ? HIT_FLAG : 0);
    }
    for (int b = 0; b < 256; b++)
        ac->start[b] = ac->trans[ac->cls[b]] != 0;
#ifdef HAVE_SSSE3_SKIP
    teddy_build(&ac->teddy, pats, ids, n, ac->cls, ac->n_classes);
    ac->simd = !__builtin_cpu_supports("ssse3") ? 0 : __builtin_cpu_supports("avx2") && !getenv("VSR_NO_AVX2") ? 2 : 1;
#endif
    vsr_free(queue);
    vsr_free(parent);
    vsr_free(fail);
    return ac;
}

void vsr__ac_free(vsr__ac_t *ac)
{
    if (!ac)
        return;
    vsr_free(ac->trans);
    vsr_free(ac->hit);
    vsr_free(ac->dict);
    vsr_free(ac->out_first);
    vsr_free(ac->out_next);
    vsr_free(ac->out_pat);
    vsr_free(ac);
}

static int blocks_unicode(uint32_t cp)
{
    return vsr__is_alnum(cp) && !vsr__is_cjk(cp);
}

static int boundary_ok(const vsr__pat_t *p, const char *buf, size_t len, size_t start, size_t end)
{
    switch (p->bound) {
    case VSR__BOUND_ASCII:
        if (p->left && start > 0 && vsr__is_word_ascii((unsigned char)buf[start - 1]))
            return 0;
        if (p->right && end < len && vsr__is_word_ascii((unsigned char)buf[end]))
            return 0;
        return 1;
    case VSR__BOUND_UNICODE:
        if (p->left && start > 0 && blocks_unicode(vsr__utf8_prev(buf, start)))
            return 0;
        if (p->right && end < len) {
            size_t adv;
            if (blocks_unicode(vsr__utf8_decode(buf + end, len - end, &adv)))
                return 0;
        }
        return 1;
    default:
        return 1;
    }
}

/* From i at the root: the next position the automaton must take, or len.
 * A byte i whose pair (i, i+1) begins no pattern can go by: the state after
 * i+1 is then the one the root reaches on i+1 alone, and i alone is no
 * pattern. */
static inline size_t root_skip(const vsr__ac_t *ac, const unsigned char *s, size_t i, size_t len)
{
    const uint8_t *lead = ac->start;
#ifdef HAVE_SSSE3_SKIP
    if (ac->simd) { /* 32 or 16 positions at a time, then the bytes that remain */
        if (ac->simd == 2) {
            i = skip32(ac, s, i, len);
            if (i + 34 <= len)
                return i;
        }
        i = skip16(ac, s, i, len);
        if (i + 18 <= len)
            return i;
    }
#endif
    for (;;) {
        while (i + 4 <= len && !(lead[s[i]] | lead[s[i + 1]] | lead[s[i + 2]] | lead[s[i + 3]]))
            i += 4;
        while (i < len && !lead[s[i]])
            i++;
        if (i + 1 >= len || PAIR(ac->pair, s, i))
            return i;
        i++;
    }
}

void vsr__ac_scan(const vsr__ac_t *ac, const vsr__pat_t *pats, const char *buf, size_t len, uint64_t *bits,
                  uint32_t *counts, uint32_t *last_end)
{
    if (!ac || ac->n_states <= 1)
        return;
    const uint32_t nc = ac->n_classes;
    const uint32_t *trans = ac->trans;
    const uint16_t *cls = ac->cls;
    const unsigned char *s = (const unsigned char *)buf;
    uint32_t row = 0;
    size_t i = 0;
    while (i < len) {
        if (row == 0) {
            i = root_skip(ac, s, i, len);
            if (i == len)
                break;
        }
        uint32_t t = trans[row + cls[s[i++]]];
        row = t & ~HIT_FLAG;
        if (VSR_LIKELY(!(t & HIT_FLAG)))
            continue;
        size_t end = i;
        for (uint32_t x = row / nc; x; x = ac->dict[x]) {
            for (uint32_t o = ac->out_first[x]; o != VSR__NO_PAT; o = ac->out_next[o]) {
                const vsr__pat_t *p = &pats[ac->out_pat[o]];
                size_t start = end - p->len;
                if (p->counted) {
                    /* the reference counts non-overlapping occurrences per
                     * keyword, moving past an occurrence even when its
                     * boundary check fails */
                    if (start < last_end[p->slot])
                        continue;
                    last_end[p->slot] = (uint32_t)end;
                    if (boundary_ok(p, buf, len, start, end))
                        counts[p->slot]++;
                } else if (!((bits[p->slot >> 6] >> (p->slot & 63)) & 1u)) {
                    if (boundary_ok(p, buf, len, start, end))
                        bits[p->slot >> 6] |= (uint64_t)1 << (p->slot & 63);
                }
            }
        }
    }
}
