/* test_head.c — the linear softmax head (src/models/head.c): the "vsr-head 1"
 * parser on good and malformed files (every truncation, bad dimensions,
 * non-finite numbers, stray bytes), predictions of a hand-made head against
 * values computed here, top-k; the committed domain head
 * (data/domains/domain.head) against the exemplar file it was trained on
 * (its recorded SHA-256), and, when the embedding model is present, a few
 * obvious questions landing in their class.  The "vsr-head 2" lexical part:
 * its features (hashed words and word pairs), its parser, its logits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>
#include <pthread.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "models/domain.h"
#include "models/head.h"
#include "models/models.h"

/* 3 inputs, 3 classes: logits = (x0 + 1, 2·x1, -x2 + 0.5) */
static const char GOOD[] = "vsr-head 1\n"
                           "dim 3\n"
                           "classes 3\n"
                           "temperature 0.5\n"
                           "meta exemplars-sha256 abc123\n"
                           "meta note hand-made\n"
                           "class alpha\n"
                           "class computer science\n"
                           "class \xC3\xA9t\xC3\xA9\n"
                           "bias 1 0 0.5\n"
                           "row 1 0 0\n"
                           "row 0 2 0\n"
                           "row 0 0 -1\n"
                           "end\n";

static int load_str(const char *s, vsr_head_t **h)
{
    *h = NULL;
    return vsr_head_load_mem(s, strlen(s), h);
}

/* GOOD with the first occurrence of `from` replaced by `to` */
static int load_edited(const char *from, const char *to)
{
    char buf[1024];
    const char *at = strstr(GOOD, from);
    assert_non_null(at);
    size_t pre = (size_t)(at - GOOD);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)pre, GOOD, to, at + strlen(from));
    vsr_head_t *h;
    int rc = load_str(buf, &h);
    if (rc == VSR_OK) vsr_head_free(h);
    else assert_null(h);
    return rc;
}

static void test_head_good_file(void **state)
{
    (void)state;
    vsr_head_t *h;
    assert_int_equal(load_str(GOOD, &h), VSR_OK);
    assert_int_equal(vsr_head_dim(h), 3);
    assert_int_equal(vsr_head_classes(h), 3);
    assert_true(fabs(vsr_head_temperature(h) - 0.5) < 1e-12);
    assert_string_equal(vsr_head_label(h, 1), "computer science");
    assert_string_equal(vsr_head_label(h, 2), "\xC3\xA9t\xC3\xA9");
    assert_null(vsr_head_label(h, 3));
    assert_int_equal(vsr_head_label_index(h, "alpha"), 0);
    assert_int_equal(vsr_head_label_index(h, "beta"), -1);
    assert_string_equal(vsr_head_meta(h, "exemplars-sha256"), "abc123");
    assert_string_equal(vsr_head_meta(h, "note"), "hand-made");
    assert_null(vsr_head_meta(h, "missing"));
    assert_int_equal(vsr_domain_check(h), VSR_ERR_INVALID); /* not a USE-lite head */
    vsr_head_free(h);
    vsr_head_free(NULL);
}

/* GOOD as a "vsr-head 2" head with 256 lexical buckets at scale 2, in a
 * buffer of the caller's; class 0's weight for bucket `hot` is 3, class 2's
 * is -1, every other is 0; `lexline` replaces the "lexical" line when given */
static char *lexical_head(uint32_t hot, const char *lexline)
{
    size_t cap = 16384, len;
    char *buf = malloc(cap);
    const char *end = strstr(GOOD, "end\n");
    len = (size_t)snprintf(buf, cap, "vsr-head 2%.*s%s\n", (int)(end - GOOD - 10), GOOD + 10,
                           lexline ? lexline : "lexical 256 2");
    for (int c = 0; c < 3; c++) {
        len += (size_t)snprintf(buf + len, cap - len, "lrow");
        for (uint32_t k = 0; k < 256; k++)
            len += (size_t)snprintf(buf + len, cap - len, " %d", k == hot ? (c == 0 ? 3 : c == 2 ? -1 : 0) : 0);
        len += (size_t)snprintf(buf + len, cap - len, "\n");
    }
    snprintf(buf + len, cap - len, "end\n");
    return buf;
}

static void test_head_lex_features(void **state)
{
    (void)state;
    uint32_t a[VSR_HEAD_LEX_MAX_FEATURES], b[VSR_HEAD_LEX_MAX_FEATURES];
    /* one word: one bucket; two: two words and their pair */
    assert_int_equal(vsr_head_lex_features("tort", 4, 1024, a), 1);
    size_t n = vsr_head_lex_features("tort law", 8, 1u << 16, a);
    assert_int_equal(n, 3);
    for (size_t i = 1; i < n; i++) assert_true(a[i] > a[i - 1]); /* increasing, distinct */
    /* case, punctuation and the digits' values do not matter; order does */
    assert_int_equal(vsr_head_lex_features("Tort, LAW!", 10, 1u << 16, b), 3);
    assert_memory_equal(a, b, 3 * sizeof *a);
    assert_int_equal(vsr_head_lex_features("x 12 kg", 7, 1u << 16, a), 5);
    assert_int_equal(vsr_head_lex_features("x 57 kg", 7, 1u << 16, b), 5);
    assert_memory_equal(a, b, 5 * sizeof *a);
    assert_int_equal(vsr_head_lex_features("law tort", 8, 1u << 16, b), 3);
    n = vsr_head_lex_features("tort law", 8, 1u << 16, a);
    assert_true(memcmp(a, b, 3 * sizeof *a) != 0);
    /* a repeated word counts once */
    assert_int_equal(vsr_head_lex_features("law law law", 11, 1u << 16, a), 2);
    /* nothing to read */
    assert_int_equal(vsr_head_lex_features("  ?! ", 5, 1024, a), 0);
    assert_int_equal(vsr_head_lex_features("", 0, 1024, a), 0);
    /* bounded: a long text reads only its first VSR_HEAD_LEX_MAX_WORDS words */
    char big[8192];
    size_t len = 0;
    for (int i = 0; len + 16 < sizeof big; i++) len += (size_t)snprintf(big + len, sizeof big - len, "w%d ", i * 7919);
    n = vsr_head_lex_features(big, len, 1u << 18, a);
    assert_true(n > 0 && n <= VSR_HEAD_LEX_MAX_FEATURES);
    for (size_t i = 0; i < n; i++) assert_true(a[i] < (1u << 18));
}

static void test_head_lexical_part(void **state)
{
    (void)state;
    uint32_t f[VSR_HEAD_LEX_MAX_FEATURES];
    assert_int_equal(vsr_head_lex_features("tort", 4, 256, f), 1);
    char *text = lexical_head(f[0], NULL);
    vsr_head_t *h;
    assert_int_equal(load_str(text, &h), VSR_OK);
    assert_int_equal(vsr_head_lex_buckets(h), 256);
    assert_true(fabs(vsr_head_lex_scale(h) - 2) < 1e-12);
    const float x[3] = {0.5f, 1.0f, -2.0f};
    float p[3], q[3];
    /* logits (1.5, 2, 2.5) + "tort"'s (3, 0, -1)·2/sqrt(1), / T 0.5 */
    assert_int_equal(vsr_head_predict_text(h, x, 3, "Tort?", 5, p), VSR_OK);
    double e0 = exp(15.0), e1 = exp(4.0), e2 = exp(1.0), s = e0 + e1 + e2;
    assert_true(fabs(p[0] - e0 / s) < 1e-6 && fabs(p[1] - e1 / s) < 1e-6 && fabs(p[2] - e2 / s) < 1e-6);
    /* without the text (or with words it has no weight for), the embedding alone */
    assert_int_equal(vsr_head_predict(h, x, 3, p), VSR_OK);
    assert_int_equal(vsr_head_predict_text(h, x, 3, "?", 1, q), VSR_OK);
    e0 = exp(3.0), e1 = exp(4.0), e2 = exp(5.0), s = e0 + e1 + e2;
    assert_true(fabs(p[0] - e0 / s) < 1e-6 && fabs(q[0] - p[0]) < 1e-7 && fabs(q[2] - p[2]) < 1e-7);
    vsr_head_free(h);
    free(text);
    /* a "vsr-head 1" head ignores the text */
    assert_int_equal(load_str(GOOD, &h), VSR_OK);
    assert_int_equal(vsr_head_lex_buckets(h), 0);
    assert_int_equal(vsr_head_predict_text(h, x, 3, "tort", 4, q), VSR_OK);
    assert_true(fabs(q[0] - p[0]) < 1e-7);
    vsr_head_free(h);

    /* refused: bad lexical lines, a missing row, a version without its part */
    static const char *const bad[] = {"lexical 255 2", "lexical 128 2", "lexical 300 2", "lexical 256 0",
                                      "lexical 256 -1", "lexical 256 101", "lexical 256", "lexical  256 2",
                                      "lexical 256 2 3", "lexical 524288 1", "lexicon 256 2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        text = lexical_head(0, bad[i]);
        if (load_str(text, &h) != VSR_ERR_INVALID) fail_msg("\"%s\" was accepted", bad[i]);
        free(text);
    }
    text = lexical_head(0, NULL);
    char *last = strstr(text, "lrow");
    last = strstr(last + 1, "lrow");
    last = strstr(last + 1, "lrow");
    strcpy(last, "end\n"); /* two rows of three */
    assert_int_equal(load_str(text, &h), VSR_ERR_INVALID);
    free(text);
    text = lexical_head(0, NULL);
    text[9] = '1'; /* "vsr-head 1" with a lexical part */
    assert_int_equal(load_str(text, &h), VSR_ERR_INVALID);
    text[9] = '3';
    assert_int_equal(load_str(text, &h), VSR_ERR_INVALID);
    free(text);
    char *v2 = strdup(GOOD);
    v2[9] = '2'; /* "vsr-head 2" without one */
    assert_int_equal(load_str(v2, &h), VSR_ERR_INVALID);
    free(v2);
}

static void test_head_predict_known_values(void **state)
{
    (void)state;
    vsr_head_t *h;
    assert_int_equal(load_str(GOOD, &h), VSR_OK);
    const float x[3] = {0.5f, 1.0f, -2.0f};
    float z[3], p[3];
    assert_int_equal(vsr_head_logits(h, x, 3, z), VSR_OK);
    assert_true(fabs(z[0] - 1.5) < 1e-6 && fabs(z[1] - 2.0) < 1e-6 && fabs(z[2] - 2.5) < 1e-6);
    assert_int_equal(vsr_head_predict(h, x, 3, p), VSR_OK);
    /* softmax((1.5, 2, 2.5) / 0.5) = softmax(3, 4, 5) */
    double e0 = exp(3.0), e1 = exp(4.0), e2 = exp(5.0), s = e0 + e1 + e2;
    assert_true(fabs(p[0] - e0 / s) < 1e-6);
    assert_true(fabs(p[1] - e1 / s) < 1e-6);
    assert_true(fabs(p[2] - e2 / s) < 1e-6);
    size_t idx[3];
    assert_int_equal(vsr_head_top_k(p, 3, 2, idx), 2);
    assert_int_equal(idx[0], 2);
    assert_int_equal(idx[1], 1);
    /* huge logits don't overflow */
    const float big[3] = {1e5f, 0, 0};
    assert_int_equal(vsr_head_predict(h, big, 3, p), VSR_OK);
    assert_true(fabs(p[0] - 1.0) < 1e-6 && p[1] >= 0 && p[2] >= 0);
    /* wrong width, non-finite input: refused, probabilities zeroed */
    assert_int_equal(vsr_head_predict(h, x, 2, p), VSR_ERR_INVALID);
    assert_true(p[0] == 0 && p[1] == 0 && p[2] == 0);
    const float bad[3] = {0, NAN, 0};
    assert_int_equal(vsr_head_predict(h, bad, 3, p), VSR_ERR_INVALID);
    const float inf[3] = {INFINITY, 0, 0};
    assert_int_equal(vsr_head_predict(h, inf, 3, p), VSR_ERR_INVALID);
    vsr_head_free(h);
}

static void test_head_top_k_ties_and_bounds(void **state)
{
    (void)state;
    const float p[5] = {0.1f, 0.3f, 0.3f, 0.2f, 0.1f};
    size_t idx[5];
    assert_int_equal(vsr_head_top_k(p, 5, 9, idx), 5);
    assert_int_equal(idx[0], 1); /* tie: lower index first */
    assert_int_equal(idx[1], 2);
    assert_int_equal(idx[2], 3);
    assert_int_equal(idx[3], 0);
    assert_int_equal(idx[4], 4);
    assert_int_equal(vsr_head_top_k(p, 5, 0, idx), 0);
    assert_int_equal(vsr_head_top_k(p, 5, 2, idx), 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 2);
    const float q[6] = {0.05f, 0.1f, 0.2f, 0.05f, 0.5f, 0.1f}; /* later values evict earlier ones */
    assert_int_equal(vsr_head_top_k(q, 6, 3, idx), 3);
    assert_int_equal(idx[0], 4);
    assert_int_equal(idx[1], 2);
    assert_int_equal(idx[2], 1);
    assert_int_equal(vsr_head_top_k(q, 6, 1, idx), 1);
    assert_int_equal(idx[0], 4);
}

static void test_head_truncated_files_refused(void **state)
{
    (void)state;
    size_t len = strlen(GOOD);
    for (size_t n = 0; n < len; n++) {
        vsr_head_t *h = NULL;
        assert_int_equal(vsr_head_load_mem(GOOD, n, &h), VSR_ERR_INVALID);
        assert_null(h);
    }
    vsr_head_t *h;
    assert_int_equal(vsr_head_load_mem(GOOD, len, &h), VSR_OK);
    vsr_head_free(h);
}

static void test_head_bad_dims_refused(void **state)
{
    (void)state;
    assert_int_equal(load_edited("dim 3", "dim 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("dim 3", "dim 4"), VSR_ERR_INVALID); /* rows too short */
    assert_int_equal(load_edited("dim 3", "dim 2"), VSR_ERR_INVALID); /* rows too long */
    assert_int_equal(load_edited("dim 3", "dim 4097"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("dim 3", "dim 03"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("dim 3", "dim -3"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("dim 3", "dim 99999999999999999999999"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("classes 3", "classes 1"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("classes 3", "classes 2"), VSR_ERR_INVALID); /* a class line too many */
    assert_int_equal(load_edited("classes 3", "classes 4"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("classes 3", "classes 257"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("bias 1 0 0.5", "bias 1 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("bias 1 0 0.5", "bias 1 0 0.5 1"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0\n", ""), VSR_ERR_INVALID);      /* a row missing */
    assert_int_equal(load_edited("row 0 2 0\n", "row 0 2 0\nrow 1 1 1\n"), VSR_ERR_INVALID);
    /* a declared size far beyond the file's: refused before allocating */
    assert_int_equal(load_edited("dim 3", "dim 4096"), VSR_ERR_INVALID);
}

static void test_head_non_finite_and_malformed_refused(void **state)
{
    (void)state;
    assert_int_equal(load_edited("row 0 2 0", "row 0 nan 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 NAN 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 inf 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 -infinity 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 1e400 0"), VSR_ERR_INVALID); /* overflow */
    assert_int_equal(load_edited("row 0 2 0", "row 0 2e6 0"), VSR_ERR_INVALID);   /* beyond MAX_ABS */
    assert_int_equal(load_edited("bias 1 0 0.5", "bias 1 nan 0.5"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 2x 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 2.00000000000000000000000000000000000000000000000000000000000000 0"),
                     VSR_OK); /* 64 bytes */
    assert_int_equal(load_edited("row 0 2 0", "row 0 2.000000000000000000000000000000000000000000000000000000000000000 0"),
                     VSR_ERR_INVALID); /* 65 */
    assert_int_equal(load_edited("row 0 2 0", "row 0  2 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 2 0 "), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 \t2 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("row 0 2 0", "row 0 2 0\r"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("temperature 0.5", "temperature 0"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("temperature 0.5", "temperature -1"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("temperature 0.5", "temperature nan"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("temperature 0.5", "temperature 1e9"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("vsr-head 1", "vsr-head 2"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("class alpha", "class computer science"), VSR_ERR_INVALID); /* duplicate */
    assert_int_equal(load_edited("class alpha", "class "), VSR_ERR_INVALID);
    assert_int_equal(load_edited("class alpha", "class  alpha"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("class alpha", "class alpha "), VSR_ERR_INVALID);
    assert_int_equal(load_edited("class alpha", "class al\x01pha"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("class alpha", "class al\xC3pha"), VSR_ERR_INVALID); /* bad UTF-8 */
    assert_int_equal(load_edited("class alpha", "class \xED\xA0\x80"), VSR_ERR_INVALID); /* surrogate */
    assert_int_equal(
        load_edited("class alpha", "class aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), /* 65 */
        VSR_ERR_INVALID);
    assert_int_equal(load_edited("meta note hand-made", "meta Note hand-made"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("meta note hand-made", "meta note hand made"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("meta note hand-made", "meta exemplars-sha256 x"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("meta note hand-made", "meta note"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("end\n", "end\nrow 1 1 1\n"), VSR_ERR_INVALID); /* trailing data */
    assert_int_equal(load_edited("end\n", "end"), VSR_ERR_INVALID);
    assert_int_equal(load_edited("end\n", "end\n\n"), VSR_ERR_INVALID);
    /* NUL inside */
    char buf[sizeof GOOD];
    memcpy(buf, GOOD, sizeof GOOD);
    buf[20] = '\0';
    vsr_head_t *h = NULL;
    assert_int_equal(vsr_head_load_mem(buf, sizeof GOOD - 1, &h), VSR_ERR_INVALID);
    assert_null(h);
    /* the edits above are refused for what they change, not by accident */
    assert_int_equal(load_edited("row 0 2 0", "row 0 -2.5e-3 0"), VSR_OK);
    assert_int_equal(load_edited("meta note hand-made", "meta n_2-x y"), VSR_OK);
    assert_int_equal(load_edited("meta note hand-made\n", ""), VSR_OK);
}

static void test_head_file_errors(void **state)
{
    (void)state;
    vsr_head_t *h = NULL;
    assert_int_equal(vsr_head_load("/nonexistent/x.head", &h), VSR_ERR_IO);
    assert_int_equal(vsr_head_load("/tmp", &h), VSR_ERR_IO); /* not a regular file */
    assert_int_equal(vsr_head_load_mem(GOOD, (size_t)VSR_HEAD_MAX_BYTES + 1, &h), VSR_ERR_TOO_BIG);
    assert_null(h);
}

typedef struct {
    const vsr_head_t *h;
    int seed;
    float out[3];
    int rc;
} job_t;

static void fill(float x[3], int seed, int i)
{
    for (int d = 0; d < 3; d++) x[d] = (float)((seed * 7 + i * 3 + d) % 11) / 4.0f - 1.0f;
}

static void *predict_many(void *arg)
{
    job_t *j = arg;
    float x[3], p[3];
    memset(j->out, 0, sizeof j->out);
    j->rc = VSR_OK;
    for (int i = 0; i < 20000; i++) {
        fill(x, j->seed, i);
        if (vsr_head_predict(j->h, x, 3, p) != VSR_OK) j->rc = VSR_ERR;
        for (int k = 0; k < 3; k++) j->out[k] += p[k];
    }
    return NULL;
}

/* one head, four threads predicting at once: each gets what it gets alone */
static void test_head_shared_across_threads(void **state)
{
    (void)state;
    vsr_head_t *h;
    assert_int_equal(load_str(GOOD, &h), VSR_OK);
    job_t alone[4], jobs[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        alone[i] = (job_t){.h = h, .seed = i};
        predict_many(&alone[i]);
        jobs[i] = (job_t){.h = h, .seed = i};
    }
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, predict_many, &jobs[i]), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(jobs[i].rc, VSR_OK);
        assert_memory_equal(alone[i].out, jobs[i].out, sizeof alone[i].out);
    }
    vsr_head_free(h);
}

static int sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char buf[1 << 16], md[32];
    unsigned mdlen = 0;
    size_t n;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(ctx, buf, n);
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    fclose(f);
    for (int i = 0; ok && i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return ok ? 0 : -1;
}

/* the committed head was trained on the committed exemplars (retrain with
 * tools/models/train_head when they change: data/domains/README.md) */
static void test_head_domain_head_matches_exemplars(void **state)
{
    (void)state;
    vsr_head_t *h;
    assert_int_equal(vsr_head_load("data/domains/domain.head", &h), VSR_OK);
    assert_int_equal(vsr_head_dim(h), VSR_USE_DIM);
    assert_int_equal(vsr_head_classes(h), 14);
    assert_int_not_equal(vsr_head_label_index(h, "other"), -1);
    char hex[65];
    assert_int_equal(sha256_file("data/domains/exemplars.jsonl", hex), 0);
    assert_non_null(vsr_head_meta(h, "exemplars-sha256"));
    assert_string_equal(vsr_head_meta(h, "exemplars-sha256"), hex);
    /* and on the Debian-derived questions (tools/models/domain.sh) */
    assert_int_equal(sha256_file("data/domains/debian.jsonl", hex), 0);
    assert_non_null(vsr_head_meta(h, "train2-sha256"));
    assert_string_equal(vsr_head_meta(h, "train2-sha256"), hex);
    assert_int_equal(sha256_file("data/domains/eval.jsonl", hex), 0);
    assert_non_null(vsr_head_meta(h, "dev-sha256"));
    assert_string_equal(vsr_head_meta(h, "dev-sha256"), hex);
    assert_int_equal(vsr_head_lex_buckets(h), 16384);
    vsr_head_free(h);
}

static void test_head_domain_obvious_questions(void **state)
{
    (void)state;
    char path[1024];
    const char *cache = getenv("VSR_MODEL_CACHE"), *home = getenv("HOME");
    if (cache != NULL) snprintf(path, sizeof path, "%s/use-lite.vsrm", cache);
    else snprintf(path, sizeof path, "%s/.cache/vsr/models/use-lite.vsrm", home ? home : "");
    if (access(path, R_OK) != 0) {
        if (getenv("CI") != NULL) fail_msg("%s missing (scripts/setup-deps fetches it)", path);
        skip();
    }
    vsr_head_t *h;
    vsr_use_model_t *m;
    assert_int_equal(vsr_head_load("data/domains/domain.head", &h), VSR_OK);
    assert_int_equal(vsr_use_load(path, &m), VSR_OK);
    char hex[65];
    assert_int_equal(sha256_file(path, hex), 0);
    assert_string_equal(vsr_head_meta(h, "encoder-sha256"), hex);
    static const struct {
        const char *label, *text;
    } cases[] = {
        {"math", "Solve the equation 3x - 7 = 11 for x."},
        {"law", "Can my landlord evict me without a court order?"},
        {"chemistry", "How many grams of NaOH are needed to neutralize 0.5 mol of HCl?"},
        {"history", "Why did the Western Roman Empire collapse in the fifth century?"},
        {"computer science", "How do I fix a null pointer exception in my Java code?"},
        /* one domain term and little else: the word part's ground */
        {"law", "What is a writ of certiorari?"},
        {"chemistry", "What is an aldehyde?"},
        {"psychology", "What is cognitive dissonance?"},
        {"physics", "What is a quark?"},
        {"history", "Who was Charlemagne?"},
    };
    assert_int_equal(vsr_domain_check(h), VSR_OK);
    vsr_domain_score_t out[VSR_HEAD_MAX_CLASSES];
    size_t n;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_int_equal(vsr_domain_classify(m, h, cases[i].text, strlen(cases[i].text), NULL, out, &n), VSR_OK);
        assert_int_equal(n, vsr_head_classes(h));
        if (strcmp(out[0].label, cases[i].label) != 0)
            fail_msg("\"%s\": %s (%.2f), want %s", cases[i].text, out[0].label, out[0].score, cases[i].label);
        double sum = 0;
        for (size_t j = 0; j < n; j++) {
            sum += out[j].score;
            if (j > 0) assert_true(out[j].score <= out[j - 1].score);
        }
        assert_true(fabs(sum - 1.0) < 1e-4);
    }
    /* nothing to embed: refused, so the caller falls back */
    assert_int_equal(vsr_domain_classify(m, h, "  \n", 3, NULL, out, &n), VSR_ERR_INVALID);
    assert_int_equal(n, 0);
    vsr_use_free(m);
    vsr_head_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_good_file),
        cmocka_unit_test(test_head_predict_known_values),
        cmocka_unit_test(test_head_lex_features),
        cmocka_unit_test(test_head_lexical_part),
        cmocka_unit_test(test_head_top_k_ties_and_bounds),
        cmocka_unit_test(test_head_truncated_files_refused),
        cmocka_unit_test(test_head_bad_dims_refused),
        cmocka_unit_test(test_head_non_finite_and_malformed_refused),
        cmocka_unit_test(test_head_file_errors),
        cmocka_unit_test(test_head_shared_across_threads),
        cmocka_unit_test(test_head_domain_head_matches_exemplars),
        cmocka_unit_test(test_head_domain_obvious_questions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
