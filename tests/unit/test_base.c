/* test_base.c — slices, bounded buffers, the pool, durations, uuids. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/base.h"

static void test_slices(void **state)
{
    (void)state;
    vsr_slice_t s = VSR_SLICE_LIT("Content-Length");
    assert_true(vsr_slice_case_eq_cstr(s, "content-length"));
    assert_false(vsr_slice_eq_cstr(s, "content-length"));
    assert_false(vsr_slice_case_eq_cstr(s, "content-lengt"));
    assert_false(vsr_slice_case_eq_cstr(s, "content-lengths"));
    assert_false(vsr_slice_case_eq_cstr(vsr_slice("a\0b", 3), "a"));
    assert_true(vsr_slice_case_eq_cstr(VSR_SLICE_NULL, ""));
    /* secrets: equal only when equal in full, a prefix or an extension is not */
    assert_true(vsr_secret_eq(VSR_SLICE_LIT("sk-abc"), VSR_SLICE_LIT("sk-abc")));
    assert_false(vsr_secret_eq(VSR_SLICE_LIT("sk-ab"), VSR_SLICE_LIT("sk-abc")));
    assert_false(vsr_secret_eq(VSR_SLICE_LIT("sk-abcd"), VSR_SLICE_LIT("sk-abc")));
    assert_false(vsr_secret_eq(VSR_SLICE_LIT("sk-abd"), VSR_SLICE_LIT("sk-abc")));
    assert_false(vsr_secret_eq(vsr_slice("sk-abc\0", 7), VSR_SLICE_LIT("sk-abc")));
    assert_false(vsr_secret_eq(VSR_SLICE_NULL, VSR_SLICE_LIT("sk-abc")));
    vsr_slice_t t = vsr_slice_trim(VSR_SLICE_LIT(" \t a b \t"));
    assert_true(vsr_slice_eq_cstr(t, "a b"));
    vsr_slice_t rest;
    vsr_slice_t head = vsr_slice_split(VSR_SLICE_LIT("/v1/x?q=1"), '?', &rest);
    assert_true(vsr_slice_eq_cstr(head, "/v1/x"));
    assert_true(vsr_slice_eq_cstr(rest, "q=1"));
    head = vsr_slice_split(VSR_SLICE_LIT("/v1"), '?', &rest);
    assert_true(vsr_slice_eq_cstr(head, "/v1"));
    assert_null(rest.p);
    uint64_t v;
    assert_int_equal(vsr_slice_to_u64(VSR_SLICE_LIT("18446744073709551615"), UINT64_MAX, &v), VSR_OK);
    assert_true(v == UINT64_MAX);
    assert_int_equal(vsr_slice_to_u64(VSR_SLICE_LIT("18446744073709551616"), UINT64_MAX, &v), VSR_ERR_TOO_BIG);
    assert_int_equal(vsr_slice_to_u64(VSR_SLICE_LIT("12a"), UINT64_MAX, &v), VSR_ERR_INVALID);
    assert_int_equal(vsr_slice_to_u64(VSR_SLICE_LIT(""), UINT64_MAX, &v), VSR_ERR_INVALID);
    assert_int_equal(vsr_slice_to_u64(VSR_SLICE_LIT("+1"), UINT64_MAX, &v), VSR_ERR_INVALID);
    assert_int_equal(vsr_slice_to_u64(VSR_SLICE_LIT("65536"), 65535, &v), VSR_ERR_TOO_BIG);
}

/* The decimal writer matches printf's "%llu" and "%.<frac>f" of v / 10^frac. */
static void test_fmt_u64(void **state)
{
    (void)state;
    static const struct {
        uint64_t v;
        unsigned frac;
        const char *want;
    } cases[] = {
        {0, 0, "0"},       {7, 0, "7"},         {1234567, 0, "1234567"},
        {UINT64_MAX, 0, "18446744073709551615"}, {0, 3, "0.000"},   {5, 3, "0.005"},
        {999, 3, "0.999"}, {1000, 3, "1.000"},  {123456, 3, "123.456"}, {42, 1, "4.2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[VSR_U64_DIGITS];
        size_t n = vsr_fmt_u64(out, cases[i].v, cases[i].frac);
        assert_true(vsr_slice_eq_cstr(vsr_slice(out, n), cases[i].want));
    }
}

/* "%.4f" without printf: byte for byte what printf writes, on ties,
 * near-ties, signs, the range edge, non-finite values and a million
 * random scores. */
static void check_fixed4(double v)
{
    char want[512], out[VSR_U64_DIGITS];
    int w = snprintf(want, sizeof(want), "%.4f", v);
    size_t n = vsr_fmt_fixed4(out, v);
    if ((size_t)w > VSR_U64_DIGITS)
        w = VSR_U64_DIGITS;
    if (n != (size_t)w || memcmp(out, want, n) != 0)
        fail_msg("%.17g: \"%.*s\", printf \"%s\"", v, (int)n, out, want);
}

static void test_fmt_fixed4(void **state)
{
    (void)state;
    static const double cases[] = {0.0, -0.0, 1.0, 0.5, 0.12345, 0.00005, 0.00015, 2.5e-5, 0.99995, 0.999949999,
                                   -0.12345, -0.00004, -1.5, 1e-300, 99999.99995, 99999.9999, 1e5, 1e300, -1e300,
                                   NAN, INFINITY, -INFINITY, 0.1, 0.7, 1.0 / 3.0, 2.0 / 3.0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_fixed4(cases[i]);
    for (int k = 0; k <= 20000; k++) { /* every tie of the fourth decimal in [0, 1] */
        check_fixed4((k + 0.5) / 10000.0);
        check_fixed4(nextafter((k + 0.5) / 10000.0, 0));
        check_fixed4(nextafter((k + 0.5) / 10000.0, 2));
    }
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < 1000000; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = (double)(x >> 11) / 9007199254740992.0;
        check_fixed4(k % 3 == 0 ? u : k % 3 == 1 ? u * 200000.0 - 100000.0 : u * 1e-3);
    }
}

/* vsr_find against memmem: needles of 1 to 9 bytes placed at every offset
 * of haystacks across the 16-byte step, with near misses around them. */
static void test_find(void **state)
{
    (void)state;
    static const char *const needles[] = {"u", "ab", "\"u\"", "\"usage\"", "\"usage\":{", "aaaa"};
    char hay[80];
    for (size_t k = 0; k < sizeof(needles) / sizeof(needles[0]); k++) {
        const char *nd = needles[k];
        size_t nl = strlen(nd);
        for (size_t n = 0; n < sizeof(hay); n++)
            for (size_t at = 0; at <= n; at++) {
                for (size_t i = 0; i < n; i++)
                    hay[i] = "\"usag a"[i % 7]; /* every byte of the needles, no whole one */
                for (int miss = 0; miss < 3; miss++) { /* whole, last byte wrong, first byte wrong */
                    if (at + nl <= n) {
                        memcpy(hay + at, nd, nl);
                        if (miss)
                            hay[at + (miss == 1 ? nl - 1 : 0)] = '#';
                    }
                    const char *want = memmem(hay, n, nd, nl), *got = vsr_find(hay, n, nd, nl);
                    if (got != want)
                        fail_msg("\"%s\" in %zu bytes (placed at %zu, miss %d): %td, memmem %td", nd, n, at, miss,
                                 got ? got - hay : -1, want ? want - hay : -1);
                }
            }
    }
    assert_ptr_equal(vsr_find("abc", 3, "", 0), "abc");
}

static void test_buf_cap(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 10);
    assert_int_equal(vsr_buf_append_cstr(&b, "0123456789"), VSR_OK);
    assert_int_equal(vsr_buf_append_cstr(&b, "x"), VSR_ERR_TOO_BIG);
    assert_int_equal(b.len, 10);
    vsr_buf_consume(&b, 4);
    assert_memory_equal(b.data, "456789", 6);
    assert_int_equal(vsr_buf_printf(&b, "%d", 1234), VSR_OK);
    assert_int_equal(vsr_buf_printf(&b, "%d", 5), VSR_ERR_TOO_BIG);
    vsr_buf_free(&b);

    vsr_buf_init(&b, 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(vsr_buf_printf(&b, "%04d", i), VSR_OK);
    assert_int_equal(b.len, 4000);
    assert_memory_equal(b.data + 3996, "0999", 4);
    vsr_buf_free(&b);
}

static void test_json_string_escape(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_json_string(&b, vsr_slice("a\"b\\c\n\x01\xc3\xa9", 9));
    assert_string_equal(b.data, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"");
    vsr_buf_free(&b);
}

/* UTF-8: what is valid passes whole; every stray byte becomes U+FFFD, in the
 * JSON string writer too (JSON text is UTF-8). */
static void test_utf8(void **state)
{
    (void)state;
    static const char *const valid[] = {"", "plain ascii text, longer than eight", "caf\xc3\xa9",
                                        "\xe6\x97\xa5\xe6\x9c\xac", "12345678\xf0\x9f\x98\x80", "\xef\xbf\xbd",
                                        "0123456789012345678901234567890123456789"
                                        "\xe6\x97\xa5\xc3\xa9\xf0\x9f\x98\x80\xe0\xa0\x80\xed\x9f\xbf\xf4\x8f\xbf\xbf"
                                        "0123456789012345678901234567890123456789"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(valid); i++)
        assert_true(vsr_utf8_valid(vsr_slice_cstr(valid[i])));
    static const char *const invalid[] = {"\xff", "abc\xc3", "\xc0\x80", "\xed\xa0\x80", "\xf5\x80\x80\x80",
                                          "12345678\xe6\x97", "\xc3(", "\x80", "\xe6\x97\xa5\xe0\x80\x80",
                                          "\xe6\x97\xa5\xed\xa0\x80",
                                          "0123456789012345678901234567890123456789\xe6\x97\xa5\xff",
                                          "\xf0\x9f\x98\x80\xf4\x90\x80\x80"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(invalid); i++)
        assert_false(vsr_utf8_valid(vsr_slice_cstr(invalid[i])));
    char out[64];
    size_t n = vsr_utf8_repair("a\xff\xc3\xa9\xc3(", 6, out);
    assert_int_equal(n, 10);
    assert_memory_equal(out, "a\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd(", 10);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_json_string(&b, vsr_slice("\"\xfe\xc3\xa9\n", 5));
    assert_string_equal(b.data, "\"\\\"\xef\xbf\xbd\xc3\xa9\\n\"");
    assert_int_equal(vsr_json_string_size(vsr_slice("\"\xfe\xc3\xa9\n", 5)), b.len);
    vsr_buf_free(&b);
}

/* RFC 8259's escapes, one byte at a time: the reference for the writer */
static size_t ref_escape(const unsigned char *p, size_t n, char *out)
{
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        const char *short_esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                              : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (short_esc)
            o += (size_t)sprintf(out + o, "%s", short_esc);
        else if (c < 0x20)
            o += (size_t)sprintf(out + o, "\\u%04x", c);
        else if (c >= 0x80) /* alone in these texts: never a whole UTF-8 sequence */
            o += (size_t)sprintf(out + o, "\xEF\xBF\xBD");
        else
            out[o++] = (char)c;
    }
    out[o++] = '"';
    return o;
}

/* Every byte value at offsets of texts whose lengths cross the scanner's
 * 16- and 64-byte steps, and every offset for the escaped kinds: the size
 * matches what is written, and both match the reference. */
static void check_escape(const unsigned char *text, size_t len)
{
    static char want[130 * 6 + 2], got[130 * 6 + 2];
    vsr_slice_t s = vsr_slice((const char *)text, len);
    size_t n = ref_escape(text, len, want);
    assert_int_equal(vsr_json_string_size(s), n);
    memset(got, 0, sizeof(got));
    assert_ptr_equal(vsr_json_string_put(got, s), got + n);
    assert_memory_equal(got, want, n);
}

static void test_json_string_every_byte(void **state)
{
    (void)state;
    static const size_t lens[] = {1, 15, 16, 17, 63, 64, 65, 127, 130};
    static const unsigned char kinds[] = {'"', '\\', '\n', 0x01, 0x1f, 0x7f, 0xc3, 'a'};
    unsigned char text[130];
    for (size_t l = 0; l < VSR_ARRAY_LEN(lens); l++) {
        size_t len = lens[l];
        for (size_t at = 0; at < len; at++)
            for (unsigned v = 0; v < 256; v++) {
                int kind = 0;
                for (size_t k = 0; k < sizeof(kinds); k++)
                    kind |= kinds[k] == v;
                if (!kind && at % 13 != 0)
                    continue; /* every byte value at every 13th offset, the escaped kinds at all */
                for (size_t i = 0; i < len; i++)
                    text[i] = (unsigned char)('a' + i % 26);
                text[at] = (unsigned char)v;
                check_escape(text, len);
                text[len - 1 - (len - 1 - at) / 2] = '"'; /* a second escape after it */
                check_escape(text, len);
            }
    }
    char got[2];
    assert_int_equal(vsr_json_string_size(VSR_SLICE_NULL), 2);
    assert_ptr_equal(vsr_json_string_put(got, VSR_SLICE_NULL), got + 2);
    assert_memory_equal(got, "\"\"", 2);
}

static int cleaned;
static void on_clear(void *arg)
{
    cleaned += *(int *)arg;
}

static void test_pool(void **state)
{
    (void)state;
    vsr_pool_t p;
    vsr_pool_init(&p);
    char *prev = NULL;
    for (int i = 0; i < 2000; i++) {
        char *s = vsr_pool_alloc(&p, (size_t)(i % 50) + 1);
        assert_true(((uintptr_t)s & 15) == 0);
        memset(s, 'x', (size_t)(i % 50) + 1);
        assert_ptr_not_equal(s, prev);
        prev = s;
    }
    char *big = vsr_pool_alloc(&p, 100000);
    memset(big, 1, 100000);
    static int one = 1, ten = 10;
    vsr_pool_on_clear(&p, on_clear, &one);
    vsr_pool_on_clear(&p, on_clear, &ten);
    vsr_slice_t d = vsr_pool_dup_slice(&p, VSR_SLICE_LIT("hello"));
    assert_true(vsr_slice_eq_cstr(d, "hello"));
    assert_int_equal(d.p[5], '\0');
    cleaned = 0;
    vsr_pool_clear(&p);
    assert_int_equal(cleaned, 11);
    assert_non_null(vsr_pool_alloc(&p, 10));
    vsr_pool_free(&p);
    assert_int_equal(cleaned, 11);
}

/* Freed chunks come back to the next pool on the same thread (at most 16
 * kept), and a thread that ends gives its cache back: under ASan the leak
 * check at exit fails this binary if it does not. */
static void *pool_thread(void *arg)
{
    (void)arg;
    vsr_pool_t p[20];
    for (int i = 0; i < 20; i++) {
        vsr_pool_init(&p[i]);
        memset(vsr_pool_alloc(&p[i], 100), 7, 100);
    }
    for (int i = 0; i < 20; i++)
        vsr_pool_free(&p[i]);
    return NULL; /* 16 chunks cached, and no trim call */
}

static void test_pool_chunk_cache(void **state)
{
    (void)state;
    vsr_pool_trim_cache();
    vsr_pool_t a, b;
    vsr_pool_init(&a);
    char *x = vsr_pool_alloc(&a, 64);
    vsr_pool_free(&a);
    vsr_pool_init(&b);
    char *y = vsr_pool_alloc(&b, 64);
    assert_ptr_equal(x, y); /* the same chunk, from the cache */
    vsr_pool_free(&b);
    vsr_pool_trim_cache();

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pool_thread, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_durations(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        uint64_t ms;
    } cases[] = {
        {"300s", VSR_OK, 300000}, {"1.5s", VSR_OK, 1500}, {"250ms", VSR_OK, 250}, {"2m", VSR_OK, 120000},
        {"1h", VSR_OK, 3600000},  {"0s", VSR_OK, 0},      {"1500us", VSR_OK, 2},  {"10", VSR_ERR_INVALID, 0},
        {"s", VSR_ERR_INVALID, 0}, {"1.2.3s", VSR_ERR_INVALID, 0}, {"-1s", VSR_ERR_INVALID, 0},
        {"1d", VSR_ERR_INVALID, 0}, {"", VSR_ERR_INVALID, 0},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        uint64_t ms = 12345;
        int rc = vsr_parse_duration_ms(vsr_slice_cstr(cases[i].in), &ms);
        assert_int_equal(rc, cases[i].rc);
        if (rc == VSR_OK)
            assert_true(ms == cases[i].ms);
    }
}

static void test_uuid(void **state)
{
    (void)state;
    char a[37], b[37];
    vsr_uuid4(a);
    vsr_uuid4(b);
    assert_int_equal(strlen(a), 36);
    assert_string_not_equal(a, b);
    assert_int_equal(a[14], '4');
    assert_true(strchr("89ab", a[19]) != NULL);
    assert_int_equal(a[8], '-');
    assert_int_equal(a[23], '-');
}

/* The linear complexity of a bit sequence (Berlekamp-Massey over GF(2)): the
 * length of the shortest LFSR that produces it.  About n/2 for random bits;
 * at most 128 for a bit that a 128-bit GF(2)-linear state determines, such as
 * the lowest bit of xorshift128+'s outputs (no carry reaches it). */
static size_t linear_complexity(const unsigned char *s, size_t n)
{
    unsigned char *c = vsr_calloc(n + 1, 1), *b = vsr_calloc(n + 1, 1), *t = vsr_malloc(n + 1);
    size_t L = 0, m = 0; /* m: one past the position of the last length change */
    c[0] = b[0] = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned d = s[i];
        for (size_t j = 1; j <= L; j++)
            d ^= c[j] & s[i - j];
        if (!d)
            continue;
        memcpy(t, c, n + 1);
        size_t shift = i + 1 - m;
        for (size_t j = 0; j + shift <= n; j++)
            c[j + shift] ^= b[j];
        if (2 * L <= i) {
            L = i + 1 - L;
            m = i + 1;
            memcpy(b, t, n + 1);
        }
    }
    vsr_free(c);
    vsr_free(b);
    vsr_free(t);
    return L;
}

static int hexval(char c)
{
    return c <= '9' ? c - '0' : c - 'a' + 10;
}

static int cmp_id(const void *a, const void *b)
{
    return memcmp(a, b, 37);
}

/* 1,000 consecutive ids: all different, and no bit of them follows from the
 * ones before by a linear recurrence shorter than chance gives (the state of
 * the former xorshift128+ generator was recovered from 20 request ids). */
static void test_uuid_unpredictable(void **state)
{
    (void)state;
    enum { N = 1000 };
    static char ids[N][37];
    static unsigned char bytes[N][16];
    static unsigned char seq[2 * N];
    for (size_t i = 0; i < N; i++) {
        vsr_uuid4(ids[i]);
        for (size_t k = 0, h = 0; k < 16; k++, h += 2) {
            if (ids[i][h] == '-')
                h++;
            bytes[i][k] = (unsigned char)(hexval(ids[i][h]) << 4 | hexval(ids[i][h + 1]));
        }
    }
    qsort(ids, N, sizeof(ids[0]), cmp_id);
    for (size_t i = 1; i < N; i++)
        assert_true(memcmp(ids[i - 1], ids[i], 37) != 0);
    /* every one of the 122 random bits, id after id (version and variant bits skipped) */
    size_t lo = N, hi = 0;
    for (size_t bit = 0; bit < 128; bit++) {
        size_t byte = bit / 8, shift = bit % 8;
        if ((byte == 6 && shift >= 4) || (byte == 8 && shift >= 6))
            continue;
        for (size_t i = 0; i < N; i++)
            seq[i] = (bytes[i][byte] >> shift) & 1;
        size_t L = linear_complexity(seq, N);
        lo = L < lo ? L : lo;
        hi = L > hi ? L : hi;
    }
    /* random bits: n/2 give or take a few (a deviation of k has odds about 2^-2k) */
    assert_in_range(lo, N / 2 - 24, N / 2 + 24);
    assert_in_range(hi, N / 2 - 24, N / 2 + 24);
    /* the lowest bit of each 64-bit half, in the order they were made */
    for (size_t i = 0; i < N; i++) {
        seq[2 * i] = bytes[i][0] & 1;
        seq[2 * i + 1] = bytes[i][8] & 1;
    }
    assert_in_range(linear_complexity(seq, 2 * N), N - 24, N + 24);
}

/* A forked child does not hand out the random bytes its parent will. */
static void test_random_after_fork(void **state)
{
    (void)state;
    unsigned char one, mine[16], child[16];
    vsr_random_bytes(&one, 1); /* the thread's buffer is full now */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        vsr_random_bytes(child, sizeof(child));
        ssize_t w = write(fds[1], child, sizeof(child));
        _exit(w == (ssize_t)sizeof(child) ? 0 : 1);
    }
    close(fds[1]);
    vsr_random_bytes(mine, sizeof(mine));
    assert_int_equal(read(fds[0], child, sizeof(child)), (ssize_t)sizeof(child));
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(memcmp(mine, child, sizeof(mine)) != 0);
}

static void test_rbuf(void **state)
{
    (void)state;
    vsr_rbuf_t *r = vsr_rbuf_get();
    assert_int_equal(r->refs, 1);
    vsr_rbuf_ref(r);
    vsr_rbuf_unref(r);
    assert_int_equal(r->refs, 1);
    vsr_rbuf_unref(r);
    vsr_rbuf_t *again = vsr_rbuf_get(); /* comes back from the cache */
    assert_ptr_equal(again, r);
    vsr_rbuf_unref(again);
    vsr_rbuf_trim_cache();
}

/* ---- the exit list ---- */

typedef struct {
    unsigned running;      /* what the wait reports still running */
    uint64_t sleep_ms;     /* it waits this long, at most its timeout */
    int calls;
    uint64_t last_timeout; /* the timeout it was given last */
    int order;             /* when it was called, among the waits of one run */
} fake_wait_t;

static int wait_seq;

static unsigned fake_wait(void *arg, uint64_t timeout_ms)
{
    fake_wait_t *w = arg;
    w->calls++;
    w->last_timeout = timeout_ms;
    w->order = ++wait_seq;
    uint64_t ms = w->sleep_ms < timeout_ms ? w->sleep_ms : timeout_ms;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return w->running;
}

static void test_exit_waits_in_order_within_one_bound(void **state)
{
    (void)state;
    /* a's threads end after 150 ms; b's never do */
    fake_wait_t a = {.sleep_ms = 150}, b = {.running = 2, .sleep_ms = 10000}, c = {0};
    assert_int_equal(vsr_exit_wait_add("a", fake_wait, &a), VSR_OK);
    assert_int_equal(vsr_exit_wait_add("b", fake_wait, &b), VSR_OK);
    assert_int_equal(vsr_exit_wait_add("c", fake_wait, &c), VSR_OK);

    /* b never ends: its count and name come back, c is not waited for, and
     * the whole run stays within its one bound (b gets what a left of it) */
    wait_seq = 0;
    const char *busy = NULL;
    uint64_t t0 = vsr_now_ms();
    assert_int_equal(vsr_exit_wait_all(250, &busy), 2);
    uint64_t took = vsr_now_ms() - t0;
    assert_true(took >= 240 && took < 1000);
    assert_string_equal(busy, "b");
    assert_int_equal(a.order, 1);
    assert_int_equal(b.order, 2);
    assert_int_equal(c.calls, 0);
    assert_int_equal(a.last_timeout, 250);
    assert_true(b.last_timeout <= 100);

    /* b ends: every wait runs, each given what is left of the one bound */
    b.running = 0;
    a.sleep_ms = b.sleep_ms = 0;
    wait_seq = 0;
    assert_int_equal(vsr_exit_wait_all(5000, &busy), 0);
    assert_null(busy);
    assert_int_equal(c.order, 3);
    assert_true(c.last_timeout <= 5000 && c.last_timeout >= 4000);

    /* a removed entry is no longer waited for */
    vsr_exit_wait_remove(fake_wait, &b);
    b.running = 1;
    b.calls = 0;
    assert_int_equal(vsr_exit_wait_all(100, NULL), 0);
    assert_int_equal(b.calls, 0);
    vsr_exit_wait_remove(fake_wait, &a);
    vsr_exit_wait_remove(fake_wait, &c);
    vsr_exit_wait_remove(fake_wait, &c); /* twice: nothing */
}

static void test_exit_list_is_bounded(void **state)
{
    (void)state;
    fake_wait_t w[VSR_EXIT_WAITS_MAX + 1];
    memset(w, 0, sizeof(w));
    for (size_t i = 0; i < VSR_EXIT_WAITS_MAX; i++)
        assert_int_equal(vsr_exit_wait_add("w", fake_wait, &w[i]), VSR_OK);
    assert_int_equal(vsr_exit_wait_add("w", fake_wait, &w[VSR_EXIT_WAITS_MAX]), VSR_ERR_TOO_BIG);
    assert_int_equal(vsr_exit_wait_all(100, NULL), 0);
    for (size_t i = 0; i < VSR_EXIT_WAITS_MAX; i++)
        assert_int_equal(w[i].calls, 1);
    assert_int_equal(w[VSR_EXIT_WAITS_MAX].calls, 0);
    for (size_t i = 0; i < VSR_EXIT_WAITS_MAX; i++)
        vsr_exit_wait_remove(fake_wait, &w[i]);
    assert_int_equal(vsr_exit_wait_add("w", fake_wait, &w[0]), VSR_OK); /* room again */
    vsr_exit_wait_remove(fake_wait, &w[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slices),   cmocka_unit_test(test_buf_cap), cmocka_unit_test(test_json_string_escape),
        cmocka_unit_test(test_json_string_every_byte), cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_pool), cmocka_unit_test(test_pool_chunk_cache),     cmocka_unit_test(test_durations), cmocka_unit_test(test_uuid),
        cmocka_unit_test(test_uuid_unpredictable), cmocka_unit_test(test_random_after_fork),
        cmocka_unit_test(test_rbuf),     cmocka_unit_test(test_fmt_u64), cmocka_unit_test(test_fmt_fixed4), cmocka_unit_test(test_find),
        cmocka_unit_test(test_exit_waits_in_order_within_one_bound), cmocka_unit_test(test_exit_list_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
