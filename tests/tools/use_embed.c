/*
 * use_embed — the sentence-embedding model from the command line, for
 * tests/e2e/test_embeddings.py (which compares it with the model's own
 * JavaScript runtime).
 *
 *   use_embed MODEL_FILE [--batch] < texts
 *
 * Input: one text per line, hex-encoded UTF-8 (so any byte can be given).
 * Output: one JSON object per text: {"rc":N,"ids":[...],"embedding":[...]}
 * with every token id (not only the 128 the model reads) and the embedding
 * when rc is 0.  --batch embeds all texts with one vsr_use_embed_batch().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"

#define MAX_IDS 65536

static int unhex(const char *line, size_t n, char *out, size_t *olen)
{
    if (n % 2) return -1;
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(line + i, "%2x", &v) != 1) return -1;
        out[i / 2] = (char)v;
    }
    *olen = n / 2;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: use_embed MODEL_FILE [--batch] < hex-lines\n");
        return 2;
    }
    int batch = argc > 2 && strcmp(argv[2], "--batch") == 0;
    vsr_use_model_t *m;
    int rc = vsr_use_load(argv[1], &m);
    if (rc != VSR_OK) {
        fprintf(stderr, "use_embed: %s: %s\n", argv[1], vsr_strerror(rc));
        return 1;
    }
    vsr_use_scratch_t *s = vsr_use_scratch_new();
    vsr_slice_t texts[VSR_USE_MAX_BATCH];
    size_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    static int32_t ids[MAX_IDS];
    static float out[VSR_USE_MAX_BATCH * VSR_USE_DIM];
    int status = 0;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) got--;
        if (n == VSR_USE_MAX_BATCH) {
            fprintf(stderr, "use_embed: more than %d texts\n", VSR_USE_MAX_BATCH);
            return 1;
        }
        char *t = malloc((size_t)got / 2 + 1);
        size_t tl;
        if (unhex(line, (size_t)got, t, &tl) != 0) {
            fprintf(stderr, "use_embed: bad hex line\n");
            return 1;
        }
        texts[n++] = (vsr_slice_t){t, tl};
    }
    free(line);
    int rcs[VSR_USE_MAX_BATCH];
    if (batch) {
        rc = vsr_use_embed_batch(m, texts, n, out, rcs, s);
        if (rc != VSR_OK) {
            fprintf(stderr, "use_embed: batch: %s\n", vsr_strerror(rc));
            return 1;
        }
    } else {
        for (size_t i = 0; i < n; i++) rcs[i] = vsr_use_embed(m, texts[i].p, texts[i].len, out + i * VSR_USE_DIM, s);
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        if (vsr_use_tokenize(m, texts[i].p, texts[i].len, ids, MAX_IDS, &k, s) != VSR_OK) status = 1;
        printf("{\"rc\":%d,\"ids\":[", rcs[i]);
        for (size_t j = 0; j < k; j++) printf("%s%d", j ? "," : "", ids[j]);
        printf("],\"embedding\":[");
        if (rcs[i] == VSR_OK)
            for (size_t j = 0; j < VSR_USE_DIM; j++) printf("%s%.9g", j ? "," : "", out[i * VSR_USE_DIM + j]);
        printf("]}\n");
        free((void *)texts[i].p);
    }
    vsr_use_scratch_free(s);
    vsr_use_free(m);
    return status;
}
