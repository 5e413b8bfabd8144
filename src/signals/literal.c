/* literal.c — Aho-Corasick over bytes, compiled to a DFA with byte classes.
 *
 * Why a DFA: the scan is one table lookup per text byte whatever the number
 * of keywords, which is what keeps a request's cost proportional to the
 * prompt.  Bytes that occur in no pattern share class 0, so a table row is
 * as wide as the patterns' alphabet (a few dozen for ASCII keywords), not
 * 256.  For the case-insensitive automaton ASCII upper-case bytes are mapped
 * to their lower-case classes, so ASCII text is scanned without folding. */
#include "signals/signals-int.h"

/* A transition holds the target state's row offset (state x n_classes), so
 * the scan needs no multiplication, and HIT_FLAG when the target reports a
 * match, so the common no-match byte costs a single dependent load. */
#define HIT_FLAG 0x80000000u

struct vsr__ac_s {
    uint32_t n_states;
    uint32_t n_classes;
    uint16_t cls[256];
    uint8_t start[256];   /* the byte leaves the root: the scan skips the others there */
    uint32_t *trans;      /* n_states x n_classes; row offsets | HIT_FLAG */
    uint8_t *hit;         /* state reports something (own output or via dict) */
    uint32_t *dict;       /* next state on the fail chain with outputs, 0 = none */
    uint32_t *out_first;  /* first local output of a state, VSR__NO_PAT = none */
    uint32_t *out_next;   /* next local output */
    uint32_t *out_pat;    /* local output -> global pattern id */
};

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
    VSR_BUG_ON((uint64_t)ns * nc >= HIT_FLAG);
    for (size_t i = 0; i < (size_t)ns * nc; i++) {
        uint32_t t = ac->trans[i];
        ac->trans[i] = t * nc | (ac->hit[t] ? HIT_FLAG : 0);
    }
    for (int b = 0; b < 256; b++)
        ac->start[b] = ac->trans[ac->cls[b]] != 0;
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

void vsr__ac_scan(const vsr__ac_t *ac, const vsr__pat_t *pats, const char *buf, size_t len, uint64_t *bits,
                  uint32_t *counts, uint32_t *last_end)
{
    if (!ac || ac->n_states <= 1)
        return;
    const uint32_t nc = ac->n_classes;
    const uint32_t *trans = ac->trans;
    const uint16_t *cls = ac->cls;
    const unsigned char *s = (const unsigned char *)buf;
    const uint8_t *lead = ac->start;
    uint32_t row = 0;
    size_t i = 0;
    while (i < len) {
        if (row == 0) {
            /* at the root most bytes of a prompt start no keyword: they
             * go by at one load each (the root never reports a match) */
            while (i + 4 <= len && !(lead[s[i]] | lead[s[i + 1]] | lead[s[i + 2]] | lead[s[i + 3]]))
                i += 4;
            while (i < len && !lead[s[i]])
                i++;
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
