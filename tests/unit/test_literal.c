/* The keyword automaton (src/signals/literal.c) against a plain search: the
 * presence bit of every pattern after a scan must equal "the pattern occurs
 * in the text" (ASCII letters folded for the case-insensitive automaton), on
 * random texts long enough for the 16-byte skip and its scalar tail, for
 * pattern sets that load the skip's buckets differently: one pattern per
 * bucket, patterns shorter than the three bytes it looks at (a one-byte
 * pattern lets any byte follow), more first bytes than buckets (first bytes
 * spanning more than eight high nibbles), and buckets shared by patterns
 * whose second and third bytes differ; each with the 32-byte (AVX2) skip
 * and without it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "signals/signals-int.h"

static unsigned seed = 20261203u;

static unsigned rnd(void)
{
    seed = seed * 1103515245u + 12345u;
    return seed >> 16;
}

static unsigned char fold(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

static int occurs(const char *text, size_t n, const char *pat, size_t k, int ci)
{
    for (size_t i = 0; i + k <= n; i++) {
        size_t j = 0;
        while (j < k && (ci ? fold((unsigned char)text[i + j]) == fold((unsigned char)pat[j]) : text[i + j] == pat[j]))
            j++;
        if (j == k)
            return 1;
    }
    return 0;
}

/* The automaton as the CPU would have it (no_avx2 0), or without its AVX2 skip. */
static vsr__ac_t *build(const vsr__pat_t *pats, const uint32_t *ids, size_t n, int ci, int no_avx2)
{
    if (no_avx2)
        setenv("VSR_NO_AVX2", "1", 1);
    vsr__ac_t *ac = vsr__ac_build(pats, ids, n, ci);
    unsetenv("VSR_NO_AVX2");
    return ac;
}

/* Texts of random lengths up to max, made of the given pieces (the patterns'
 * bytes and filler), each scanned and checked pattern by pattern. */
static void check_set(const char *const *words, size_t nw, int ci, const char *const *pieces, size_t np,
                      size_t max, int rounds)
{
    vsr__pat_t pats[16];
    uint32_t ids[16];
    assert_true(nw <= 16);
    for (size_t i = 0; i < nw; i++) {
        memset(&pats[i], 0, sizeof(pats[i]));
        pats[i].len = strlen(words[i]);
        pats[i].bytes = vsr_strndup(words[i], pats[i].len);
        if (ci)
            for (size_t j = 0; j < pats[i].len; j++)
                pats[i].bytes[j] = (char)fold((unsigned char)pats[i].bytes[j]);
        pats[i].ci = (uint8_t)ci;
        pats[i].bound = VSR__BOUND_NONE;
        pats[i].slot = (uint32_t)i;
        ids[i] = (uint32_t)i;
    }
    for (int no_avx2 = 0; no_avx2 < 2; no_avx2++) { /* skip32 and skip16, where the CPU has them */
        vsr__ac_t *ac = build(pats, ids, nw, ci, no_avx2);
        char text[1024];
        for (int round = 0; round < rounds; round++) {
            size_t want = rnd() % max, n = 0;
            while (n < want) {
                const char *p = pieces[rnd() % np];
                size_t k = strlen(p);
                if (n + k >= sizeof(text))
                    break;
                memcpy(text + n, p, k);
                n += k;
            }
            uint64_t bits[1] = {0};
            vsr__ac_scan(ac, pats, text, n, bits, NULL, NULL);
            for (size_t i = 0; i < nw; i++) {
                int got = (int)((bits[0] >> i) & 1u), exp = occurs(text, n, words[i], strlen(words[i]), ci);
                if (got != exp)
                    fail_msg("pattern \"%s\" (ci %d, no avx2 %d) over %zu bytes \"%.*s\": the scan says %d", words[i], ci,
                             no_avx2, n, (int)n, text, got);
            }
        }
        vsr__ac_free(ac);
    }
    for (size_t i = 0; i < nw; i++)
        vsr_free(pats[i].bytes);
}

static void test_both_filters(void **st)
{
    (void)st;
    /* bench/config.yaml's keywords and prefixes of them */
    static const char *const w[] = {"python", "golang", "compile", "function", "urgent", "asap", "py", "co"};
    static const char *const pieces[] = {"p", "y", "t", "h", "o", "n", "g", "l", "a", "c", "m", "i", "e", "f", "u",
                                         "r", "s", " ", "P", "Y", "O", "co", "py", "as", "ur", "the quiet river ",
                                         "\xc3\xa9", "\x01"};
    check_set(w, 8, 1, pieces, 28, 600, 3000);
    check_set(w, 8, 0, pieces, 28, 600, 3000);
}

static void test_first_filter_only(void **st)
{
    (void)st;
    /* "c" alone is a pattern: any byte may follow a c */
    static const char *const w[] = {"ab", "abc", "bca", "c", "cab", "aab"};
    static const char *const pieces[] = {"a", "b", "c", "x", " ", ".", "A", "B", "C", "xxxxxxxxxxxxxxxxx"};
    check_set(w, 6, 1, pieces, 10, 300, 3000);
    check_set(w, 6, 0, pieces, 10, 300, 3000);
}

static void test_no_filter(void **st)
{
    (void)st;
    /* first bytes in nine high nibbles: 0x2_ 0x3_ 0x6_ 0x7_ 0x4_ 0x8_ 0xc_ 0xd_ 0xe_ */
    static const char *const w[] = {"#x", "1a", "ab", "pq", "Zz", "\x85z", "\xc3\xa9t", "\xd0\xb6", "\xe4\xb8\xad"};
    static const char *const pieces[] = {"#", "x", "1", "a", "b", "p", "q", "Z", "z", "\x85", "\xc3\xa9", "t",
                                         "\xd0\xb6", "\xe4\xb8\xad", " ", "filler text "};
    check_set(w, 9, 1, pieces, 16, 400, 3000);
    check_set(w, 9, 0, pieces, 16, 400, 3000);
}

static void test_shared_buckets(void **st)
{
    (void)st;
    /* eleven first bytes for eight buckets, and one first byte with four
     * different continuations: a bucket's nibbles combine into bytes no
     * pattern has there */
    static const char *const w[] = {"abc", "axy", "aq", "abz", "bcd", "cde", "def", "efg", "fgh", "ghi",
                                    "hij", "ijk", "jkl", "k", "lmn", "Xa"};
    static const char *const pieces[] = {"a", "b", "c", "q", "x", "y", "z", "d", "e", "f", "g", "h", "i", "j",
                                         "k", "l", "m", "n", "X", "A", "ay", "bq", "ab", " ", "filler words "};
    check_set(w, 16, 1, pieces, 25, 500, 3000);
    check_set(w, 16, 0, pieces, 25, 500, 3000);
}

static void test_matches_at_every_offset(void **st)
{
    (void)st;
    /* one match placed at each offset of texts whose lengths cross the
     * skips' 16-, 18-, 32- and 34-byte bounds */
    static const char *const w[] = {"golang"};
    vsr__pat_t p = {.bytes = (char *)"golang", .len = 6, .ci = 1, .slot = 0};
    uint32_t id = 0;
    for (int no_avx2 = 0; no_avx2 < 2; no_avx2++) {
        vsr__ac_t *ac = build(&p, &id, 1, 1, no_avx2);
        char text[80];
        for (size_t n = 6; n < sizeof(text); n++)
            for (size_t at = 0; at + 6 <= n; at++) {
                memset(text, 'g', n); /* a first byte everywhere, never followed by its o */
                memcpy(text + at, "GoLang", 6);
                uint64_t bits[1] = {0};
                vsr__ac_scan(ac, &p, text, n, bits, NULL, NULL);
                if (bits[0] != 1)
                    fail_msg("%s at %zu of %zu bytes: not found", w[0], at, n);
                text[at + 5] = 'x';
                bits[0] = 0;
                vsr__ac_scan(ac, &p, text, n, bits, NULL, NULL);
                if (bits[0] != 0)
                    fail_msg("a broken %s at %zu of %zu bytes: found", w[0], at, n);
            }
        vsr__ac_free(ac);
    }
}

/* A short pattern found once at each offset, followed by bytes of the
 * patterns that complete nothing: the skip must not ask for more bytes of
 * a pattern than it has. */
static void test_short_patterns_at_every_offset(void **st)
{
    (void)st;
    static const struct {
        const char *placed;
        uint64_t want;
    } cases[] = {{"ca", 1}, {"cb", 1}, {"aba", 2}, {"abb", 2}, {"cba", 1}};
    vsr__pat_t p[2] = {{.bytes = (char *)"c", .len = 1, .slot = 0}, {.bytes = (char *)"ab", .len = 2, .slot = 1}};
    uint32_t ids[2] = {0, 1};
    for (int no_avx2 = 0; no_avx2 < 2; no_avx2++) {
        vsr__ac_t *ac = build(p, ids, 2, 0, no_avx2);
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
            size_t k = strlen(cases[c].placed);
            char text[80];
            for (size_t n = k; n < sizeof(text); n++)
                for (size_t at = 0; at + k <= n; at++) {
                    memset(text, 'x', n);
                    memcpy(text + at, cases[c].placed, k);
                    uint64_t bits[1] = {0};
                    vsr__ac_scan(ac, p, text, n, bits, NULL, NULL);
                    if (bits[0] != cases[c].want)
                        fail_msg("\"%s\" at %zu of %zu bytes: bits %llu", cases[c].placed, at, n,
                                 (unsigned long long)bits[0]);
                }
        }
        vsr__ac_free(ac);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_filters),
        cmocka_unit_test(test_first_filter_only),
        cmocka_unit_test(test_no_filter),
        cmocka_unit_test(test_shared_buckets),
        cmocka_unit_test(test_short_patterns_at_every_offset),
        cmocka_unit_test(test_matches_at_every_offset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
