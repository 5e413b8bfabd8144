/*
 * embed.c — the embedder interface's common part and the built-in test
 * embedder "hash-512" (see runtime.h: deterministic, meaningless beyond
 * shared words, for tests and demos only).
 */
#include <math.h>
#include <stdio.h>

#include "runtime-int.h"

void vsr_embedder_free(vsr_embedder_t *e)
{
    if (e == NULL)
        return;
    if (e->ops && e->ops->free)
        e->ops->free(e);
    vsr_free(e);
}

void vsr_classifier_free(vsr_classifier_t *c)
{
    if (c == NULL)
        return;
    if (c->ops && c->ops->free)
        c->ops->free(c);
    vsr_free(c);
}

static int is_word_byte(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

static void add_word(float *v, const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        h = (h ^ c) * 1099511628211ULL;
    }
    /* 8 components per word, each index and sign from a fresh mix of h */
    for (int k = 0; k < 8; k++) {
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        v[h % VSR_HASH_EMBED_DIM] += (h >> 63) ? -1.0f : 1.0f;
    }
}

static int hash_embed(vsr_embedder_t *e, const vsr_slice_t *texts, size_t n, float *out, uint64_t *tokens,
                      vsr_buf_t *err)
{
    VSR_UNUSED(e);
    for (size_t t = 0; t < n; t++) {
        float *v = out + t * VSR_HASH_EMBED_DIM;
        memset(v, 0, VSR_HASH_EMBED_DIM * sizeof *v);
        const char *p = texts[t].p;
        size_t len = texts[t].len, words = 0;
        if (len == 0) {
            vsr_buf_printf(err, "input %zu is empty", t);
            return VSR_ERR_INVALID;
        }
        for (size_t i = 0; i < len;) {
            if (!is_word_byte((unsigned char)p[i])) {
                i++;
                continue;
            }
            size_t s = i;
            while (i < len && is_word_byte((unsigned char)p[i]))
                i++;
            add_word(v, p + s, i - s);
            words++;
        }
        if (words == 0) {
            add_word(v, p, len);
            words = 1;
        }
        if (tokens)
            *tokens += words;
        double ss = 0;
        for (size_t i = 0; i < VSR_HASH_EMBED_DIM; i++)
            ss += (double)v[i] * v[i];
        if (ss == 0) { /* words that cancelled out exactly: any fixed unit vector */
            v[0] = 1;
            continue;
        }
        float inv = (float)(1.0 / sqrt(ss));
        for (size_t i = 0; i < VSR_HASH_EMBED_DIM; i++)
            v[i] *= inv;
    }
    return VSR_OK;
}

static const vsr_embedder_ops_t hash_ops = {hash_embed, NULL};

vsr_embedder_t *vsr_embedder_hash_new(void)
{
    vsr_embedder_t *e = vsr_calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->ops = &hash_ops;
    snprintf(e->name, sizeof e->name, "hash-%d", VSR_HASH_EMBED_DIM);
    e->backend = "hash";
    e->dim = VSR_HASH_EMBED_DIM;
    return e;
}
