/*
 * use_bench — latency of the sentence-embedding model (src/models): p50/p99
 * of one vsr_use_embed() on a 22-token and a 128-token text, and of one
 * vsr_use_embed_batch() of 16 such texts; the load time and the RSS with the
 * model loaded.  One core: BLAS is set to one thread (pin it with taskset).
 *
 *   OPENBLAS_NUM_THREADS=1 build/use_bench ~/.cache/vsr/models/use-lite.vsrm [ITERATIONS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/models.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0) v = atol(line + strlen(field) + 1);
    if (f) fclose(f);
    return v;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run(const vsr_use_model_t *m, vsr_use_scratch_t *s, const char *name, const char *text, size_t batch,
                int iters)
{
    vsr_slice_t texts[16];
    int rc[16];
    static float out[16 * VSR_USE_DIM];
    for (size_t i = 0; i < batch; i++) texts[i] = (vsr_slice_t){text, strlen(text)};
    int32_t ids[VSR_USE_MAX_TOKENS];
    size_t n = 0;
    vsr_use_tokenize(m, text, strlen(text), ids, VSR_USE_MAX_TOKENS, &n, s);
    double *t = malloc((size_t)iters * sizeof *t);
    for (int i = -3; i < iters; i++) { /* three warm-up calls */
        double t0 = now_ms();
        if (vsr_use_embed_batch(m, texts, batch, out, rc, s) != VSR_OK || rc[0] != VSR_OK) {
            fprintf(stderr, "use_bench: embed failed\n");
            exit(1);
        }
        if (i >= 0) t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp);
    printf("%-10s tokens=%3zu batch=%2zu  p50 %7.3f ms  p99 %7.3f ms  (per text p50 %.3f ms)\n", name, n, batch,
           t[iters / 2], t[(int)(iters * 0.99)], t[iters / 2] / (double)batch);
    free(t);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: use_bench MODEL_FILE [ITERATIONS]\n");
        return 2;
    }
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    if (iters < 10) iters = 10;
    vsr_models_blas_threads(1); /* one core, whatever OPENBLAS_NUM_THREADS says */
    long rss0 = status_kb("VmRSS:");
    double t0 = now_ms();
    vsr_use_model_t *m;
    int rc = vsr_use_load(argv[1], &m);
    if (rc != VSR_OK) {
        fprintf(stderr, "use_bench: %s: %s\n", argv[1], vsr_strerror(rc));
        return 1;
    }
    double load = now_ms() - t0;
    vsr_use_scratch_t *s = vsr_use_scratch_new();
    static const char short_text[] =
        "Can you explain how a transformer model computes attention over a sentence, step by step, please?";
    char long_text[4096] = "";
    while (strlen(long_text) < 1500)
        strcat(long_text, "Routing picks the model for each request from signals computed on its prompt, "
                          "such as keywords, language and sentence embeddings. ");
    long rss_loaded = status_kb("VmRSS:");
    run(m, s, "short", short_text, 1, iters);
    run(m, s, "long", long_text, 1, iters / 2);
    long rss_one = status_kb("VmRSS:");
    for (size_t b = 2; b <= 8; b *= 2)
        run(m, s, "short", short_text, b, iters / (int)b * 2);
    run(m, s, "short", short_text, 16, iters / 4);
    run(m, s, "long", long_text, 16, iters / 10);
    printf("load %.1f ms; file %zu bytes; RSS KiB: before load %ld, loaded %ld, after single texts %ld, "
           "after batches of 16 %ld (peak %ld)\n",
           load, vsr_use_file_bytes(m), rss0, rss_loaded, rss_one, status_kb("VmRSS:"), status_kb("VmHWM:"));
    vsr_use_scratch_free(s);
    vsr_use_free(m);
    return 0;
}
