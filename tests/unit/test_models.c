/* test_models.c — the USE-lite loader and tokenizer (src/models) on small
 * synthetic model files: malformed files refused, the TF.js tokenizer's
 * tie-breaks (`>=`, `best == 0`), unknowns merged, white space, limits; and,
 * when scripts/setup-deps has fetched it, the real model's basic behaviour
 * (tests/e2e/test_embeddings.py compares it with the reference runtime). */
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

#include "models/models.h"
#include "../tools/use_vocab.h"

#define S "\xE2\x96\x81" /* U+2581 */

typedef use_piece_t piece_t;

static const piece_t RESERVED[6] = {{"\xEF\xBF\xBD", 0}, {"<s>", 0}, {"</s>", 0}, {"r3", 0}, {"r4", 0}, {"r5", 0}};

static uint64_t file[1024];

/* a vocabulary-only model file of RESERVED + pieces; returns its size */
static size_t build(const piece_t *pieces, size_t n_pieces)
{
    const piece_t *all[64];
    uint32_t n = (uint32_t)(6 + n_pieces);
    assert_true(n <= 64);
    for (uint32_t i = 0; i < n; i++)
        all[i] = i < 6 ? &RESERVED[i] : &pieces[i - 6];
    memset(file, 0, sizeof file);
    return use_vocab_file((uint8_t *)file, all, n);
}

static size_t tok(const vsr_use_model_t *m, const char *text, int32_t *ids)
{
    size_t n = 99;
    assert_int_equal(vsr_use_tokenize(m, text, strlen(text), ids, 64, &n, NULL), VSR_OK);
    return n;
}

static void test_models_malformed_files_refused(void **state)
{
    (void)state;
    static const piece_t p[] = {{S, -1.0}, {"a", -1.0}};
    size_t len = build(p, 2);
    vsr_use_model_t *m = NULL;
    assert_int_equal(vsr_use_load_mem(file, len, &m), VSR_OK);
    vsr_use_free(m);
    m = NULL;
    assert_int_equal(vsr_use_load_mem(file, len - 1, &m), VSR_ERR_INVALID); /* size disagrees */
    assert_null(m);
    assert_int_equal(vsr_use_load_mem(file, 40, &m), VSR_ERR_INVALID);
    uint8_t *f = (uint8_t *)file;
    f[0] = 'X';
    assert_int_equal(vsr_use_load_mem(file, len, &m), VSR_ERR_INVALID);
    build(p, 2);
    uint32_t off = 1u << 30; /* a piece outside the vocabulary */
    memcpy(f + 64 + 7 * 16 + 8, &off, 4);
    assert_int_equal(vsr_use_load_mem(file, len, &m), VSR_ERR_INVALID);
    build(p, 2);
    f[len - 1] = (char)0xC3; /* "a" becomes a truncated UTF-8 sequence */
    assert_int_equal(vsr_use_load_mem(file, len, &m), VSR_ERR_INVALID);
    build(p, 2);
    uint32_t tensors = 3; /* neither vocabulary-only nor the full set */
    memcpy(f + 12, &tensors, 4);
    assert_int_equal(vsr_use_load_mem(file, len, &m), VSR_ERR_INVALID);
    assert_null(m);
    assert_int_equal(vsr_use_load("/nonexistent/use-lite.vsrm", &m), VSR_ERR_IO);
}

static void test_models_js_tie_breaks(void **state)
{
    (void)state;
    /* ids: ▁=6 a=7 b=8 ▁a=9 ab=10 ▁q=11 q=12 */
    static const piece_t p[] = {{S, -1.0}, {"a", -1.0}, {"b", -1.0}, {S "a", -2.0},
                                {"ab", -2.0}, {S "q", 0.0}, {"q", -5.0}};
    vsr_use_model_t *m;
    assert_int_equal(vsr_use_load_mem(file, build(p, 7), &m), VSR_OK);
    int32_t ids[64];
    /* equal scores: the later start wins (`>=`), so ▁|a|b rather than ▁|ab */
    assert_int_equal(tok(m, "ab", ids), 3);
    assert_int_equal(ids[0], 6);
    assert_int_equal(ids[1], 7);
    assert_int_equal(ids[2], 8);
    /* a best score of exactly 0 counts as unset: ▁q (0) loses to ▁|q (-6) */
    assert_int_equal(tok(m, "q", ids), 2);
    assert_int_equal(ids[0], 6);
    assert_int_equal(ids[1], 12);
    /* unknown characters are id 0, a run of them one id */
    assert_int_equal(tok(m, "zz\xC3\xA9z a", ids), 4);
    assert_int_equal(ids[0], 6);
    assert_int_equal(ids[1], 0);
    assert_int_equal(ids[2], 6); /* ▁|a again beats ▁a on the tie */
    assert_int_equal(ids[3], 7);
    /* NFKC first: a fullwidth "ａ" is "a" */
    assert_int_equal(tok(m, "\xEF\xBD\x81", ids), 2);
    assert_int_equal(ids[1], 7);
    /* white space alone tokenizes; empty gives nothing */
    assert_int_equal(tok(m, "  ", ids), 3);
    assert_int_equal(tok(m, "", ids), 0);
    /* the id limit keeps the first ones */
    size_t n = 0;
    assert_int_equal(vsr_use_tokenize(m, "ab", 2, ids, 2, &n, NULL), VSR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[1], 7);
    vsr_use_free(m);
}

static void test_models_vocab_only_and_limits(void **state)
{
    (void)state;
    static const piece_t p[] = {{S, -1.0}, {"a", -1.0}};
    vsr_use_model_t *m;
    assert_int_equal(vsr_use_load_mem(file, build(p, 2), &m), VSR_OK);
    assert_false(vsr_use_has_weights(m));
    assert_int_equal(vsr_use_vocab_size(m), 8);
    float out[VSR_USE_DIM];
    assert_int_equal(vsr_use_embed(m, "a", 1, out, NULL), VSR_ERR_NOT_FOUND);
    vsr_slice_t texts[VSR_USE_MAX_BATCH + 1];
    int rc[VSR_USE_MAX_BATCH + 1];
    static float many[(VSR_USE_MAX_BATCH + 1) * VSR_USE_DIM];
    for (size_t i = 0; i < VSR_USE_MAX_BATCH + 1; i++) texts[i] = (vsr_slice_t){"a", 1};
    assert_int_equal(vsr_use_embed_batch(m, texts, VSR_USE_MAX_BATCH + 1, many, rc, NULL), VSR_ERR_TOO_BIG);
    vsr_use_free(m);
}

static float dot(const float *a, const float *b)
{
    float s = 0;
    for (size_t i = 0; i < VSR_USE_DIM; i++) s += a[i] * b[i];
    return s;
}

/* the fetched model's path, or skip (fail under CI, which must have it) */
static void model_path(char *path, size_t n)
{
    const char *cache = getenv("VSR_MODEL_CACHE"), *home = getenv("HOME");
    if (cache != NULL)
        snprintf(path, n, "%s/use-lite.vsrm", cache);
    else
        snprintf(path, n, "%s/.cache/vsr/models/use-lite.vsrm", home ? home : "");
    if (access(path, R_OK) != 0) {
        if (getenv("CI") != NULL) fail_msg("%s missing (scripts/setup-deps fetches it)", path);
        skip();
    }
}

static void test_models_real_model(void **state)
{
    (void)state;
    char path[1024];
    model_path(path, sizeof path);
    vsr_use_model_t *m;
    assert_int_equal(vsr_use_load(path, &m), VSR_OK);
    assert_true(vsr_use_has_weights(m));
    vsr_use_scratch_t *s = vsr_use_scratch_new();
    float a[VSR_USE_DIM], b[VSR_USE_DIM], c[VSR_USE_DIM];
    const char *ta = "What is the capital of France?", *tb = "Which city is France's capital?",
               *tc = "How do I reverse a linked list in C?";
    assert_int_equal(vsr_use_embed(m, ta, strlen(ta), a, s), VSR_OK);
    assert_int_equal(vsr_use_embed(m, tb, strlen(tb), b, s), VSR_OK);
    assert_int_equal(vsr_use_embed(m, tc, strlen(tc), c, NULL), VSR_OK);
    assert_true(fabsf(dot(a, a) - 1.0f) < 1e-5f);
    assert_true(dot(a, b) > 0.85f);
    assert_true(dot(a, c) < 0.35f);
    b[0] = 42.0f;
    assert_int_equal(vsr_use_embed(m, "", 0, b, s), VSR_ERR_INVALID);
    assert_true(b[0] == 0.0f);
    assert_int_equal(vsr_use_embed(m, " \t\n", 3, b, s), VSR_ERR_INVALID);
    assert_int_equal(vsr_use_embed(m, "\xFF\xFE", 2, b, s), VSR_OK); /* invalid UTF-8 reads as U+FFFD */
    vsr_use_scratch_free(s);
    vsr_use_free(m);
}

typedef struct {
    const vsr_use_model_t *m;
    const char *text;
    float out[VSR_USE_DIM];
    int rc;
} job_t;

static void *embed_many(void *arg)
{
    job_t *j = arg;
    vsr_use_scratch_t *s = vsr_use_scratch_new();
    for (int i = 0; i < 20 && j->rc == VSR_OK; i++) j->rc = vsr_use_embed(j->m, j->text, strlen(j->text), j->out, s);
    vsr_use_scratch_free(s);
    return NULL;
}

/* one model, four threads with their own scratch: the same vectors as alone */
static void test_models_shared_across_threads(void **state)
{
    (void)state;
    char path[1024];
    model_path(path, sizeof path);
    vsr_use_model_t *m;
    assert_int_equal(vsr_use_load(path, &m), VSR_OK);
    static const char *texts[4] = {"short one", "a somewhat longer sentence about routing requests to models",
                                   "Café naïve résumé", "How do I reverse a linked list in C?"};
    job_t jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job_t){.m = m, .text = texts[i], .rc = VSR_OK};
        assert_int_equal(pthread_create(&th[i], NULL, embed_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 4; i++) {
        float alone[VSR_USE_DIM];
        assert_int_equal(jobs[i].rc, VSR_OK);
        assert_int_equal(vsr_use_embed(m, texts[i], strlen(texts[i]), alone, NULL), VSR_OK);
        assert_memory_equal(alone, jobs[i].out, sizeof alone);
    }
    vsr_use_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models_malformed_files_refused),
        cmocka_unit_test(test_models_js_tie_breaks),
        cmocka_unit_test(test_models_vocab_only_and_limits),
        cmocka_unit_test(test_models_real_model),
        cmocka_unit_test(test_models_shared_across_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
