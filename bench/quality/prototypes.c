/*
 * prototypes.c — offline quality of the exemplar-bank families (fact_check,
 * user_feedbacks, modality; src/signals/exemplar.c): the same prototype
 * scoring (vsr__emb_prototypes, vsr__emb_proto_score, modality's cues) over
 * the same embedding model (src/models/use_lite.c).
 *
 *   prototypes DATA_DIR FAMILY THRESHOLD
 *
 * reads DATA_DIR/FAMILY/exemplars.jsonl and eval.jsonl, and prints
 *  - dev: the bank without every 5th exemplar, scored on those held out,
 *    swept over thresholds: accuracy when a text below the threshold gets
 *    no label (how the default threshold was chosen);
 *  - eval: the whole bank on eval.jsonl at THRESHOLD: per-label
 *    precision/recall/F1, accuracy, the confusion matrix, and the embedding
 *    latency p50/p99 per text on one thread (PROTOTYPES_DUMP=1: each eval
 *    text's truth, prediction and score too).
 * The model comes from $VSR_MODEL_CACHE (default ~/.cache/vsr/models)/
 * use-lite.vsrm; without it the program says so and exits 77.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json/json.h"
#include "models/models.h"
#include "signals/signals-int.h"

#define MAX_ROWS 1024
#define MAX_LABELS 8

typedef struct {
    char *text;
    int label;
    float v[VSR_USE_DIM];
} row_t;

static char labels[MAX_LABELS][64];
static int n_labels;
static double lat[MAX_ROWS * 2];
static size_t n_lat;

static int label_of(const char *l, size_t len)
{
    for (int i = 0; i < n_labels; i++)
        if (strlen(labels[i]) == len && memcmp(labels[i], l, len) == 0)
            return i;
    if (n_labels == MAX_LABELS || len >= sizeof(labels[0]))
        return -1;
    memcpy(labels[n_labels], l, len);
    labels[n_labels][len] = 0;
    return n_labels++;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t load(const char *path, row_t *rows, const vsr_use_model_t *m, vsr_use_scratch_t *s)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        exit(1);
    }
    char line[8192];
    size_t n = 0;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    while (fgets(line, sizeof line, f) && n < MAX_ROWS) {
        vsr_json_t j;
        memset(&j, 0, sizeof(j));
        uint32_t tl, tt;
        vsr_slice_t ls, ts;
        if (vsr_json_parse(&j, line, strlen(line), NULL) != VSR_OK || vsr_json_object_get(&j, 0, "label", &tl) != VSR_OK ||
            vsr_json_object_get(&j, 0, "text", &tt) != VSR_OK || vsr_json_string(&j, tl, &pool, &ls) != VSR_OK ||
            vsr_json_string(&j, tt, &pool, &ts) != VSR_OK || (rows[n].label = label_of(ls.p, ls.len)) < 0) {
            fprintf(stderr, "%s: bad line %zu\n", path, n + 1);
            exit(1);
        }
        rows[n].text = strndup(ts.p, ts.len);
        double t0 = now();
        if (vsr_use_embed(m, ts.p, ts.len, rows[n].v, s) != VSR_OK) {
            fprintf(stderr, "%s: cannot embed line %zu\n", path, n + 1);
            exit(1);
        }
        lat[n_lat++] = (now() - t0) * 1e3;
        vsr_json_free(&j);
        n++;
    }
    vsr_pool_free(&pool);
    fclose(f);
    return n;
}

typedef struct {
    float *protos[MAX_LABELS];
    size_t np[MAX_LABELS];
} bank_t;

/* skip: every skip-th row (1-based) left out, 0 none */
static void build(bank_t *b, const row_t *rows, size_t n, size_t skip)
{
    float *tmp = malloc(n * VSR_USE_DIM * sizeof(float));
    for (int k = 0; k < n_labels; k++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (rows[i].label == k && !(skip && (i + 1) % skip == 0))
                memcpy(tmp + (m++) * VSR_USE_DIM, rows[i].v, sizeof(rows[i].v));
        b->protos[k] = vsr__emb_prototypes(tmp, m, VSR_USE_DIM, &b->np[k]);
    }
    free(tmp);
}

/* the winning label, its score in *score */
static int classify(const bank_t *b, const row_t *r, int cues, double *score)
{
    int cue = vsr__modality_cue(vsr_slice_cstr(r->text));
    int win = 0;
    double best = -10;
    for (int k = 0; k < n_labels; k++) {
        double s = vsr__emb_proto_score(r->v, b->protos[k], b->np[k], VSR_USE_DIM);
        if (cues && (strcmp(labels[k], "DIFFUSION") == 0 || strcmp(labels[k], "BOTH") == 0))
            s += cue ? VSR__MODALITY_CUE_BONUS : -VSR__MODALITY_CUE_BONUS;
        if (s > best) {
            best = s;
            win = k;
        }
    }
    *score = best;
    return win;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s DATA_DIR FAMILY THRESHOLD\n", argv[0]);
        return 2;
    }
    double thr = atof(argv[3]);
    int cues = strcmp(argv[2], "modality") == 0;
    char cache[2048], path[4096];
    const char *env = getenv("VSR_MODEL_CACHE");
    if (env)
        snprintf(cache, sizeof cache, "%s", env);
    else
        snprintf(cache, sizeof cache, "%s/.cache/vsr/models", getenv("HOME") ? getenv("HOME") : ".");
    snprintf(path, sizeof path, "%s/use-lite.vsrm", cache);
    vsr_use_model_t *m = NULL;
    if (vsr_use_load(path, &m) != VSR_OK || !vsr_use_has_weights(m)) {
        fprintf(stderr, "%s: the embedding model is absent (skipped)\n", path);
        vsr_use_free(m);
        return 77;
    }
    vsr_models_blas_threads(1);
    vsr_use_scratch_t *s = vsr_use_scratch_new();
    static row_t bank_rows[MAX_ROWS], eval_rows[MAX_ROWS];
    snprintf(path, sizeof path, "%s/%s/exemplars.jsonl", argv[1], argv[2]);
    size_t nb = load(path, bank_rows, m, s);
    snprintf(path, sizeof path, "%s/%s/eval.jsonl", argv[1], argv[2]);
    size_t ne = load(path, eval_rows, m, s);

    /* dev split */
    bank_t dev;
    build(&dev, bank_rows, nb, 5);
    printf("%s: %zu exemplars, %zu eval texts, %d labels\n", argv[2], nb, ne, n_labels);
    printf("dev (every 5th exemplar held out): threshold accuracy (a text under it gets no label)\n");
    for (double t = 0.0; t <= 0.701; t += 0.1) {
        size_t ok = 0, tot = 0;
        for (size_t i = 0; i < nb; i++) {
            if ((i + 1) % 5)
                continue;
            double sc;
            int w = classify(&dev, &bank_rows[i], cues, &sc);
            tot++;
            ok += w == bank_rows[i].label && sc >= t;
        }
        printf("  %.1f  %.3f (%zu/%zu)\n", t, (double)ok / (double)tot, ok, tot);
    }
    for (int k = 0; k < n_labels; k++)
        vsr_free(dev.protos[k]);

    bank_t full;
    build(&full, bank_rows, nb, 0);
    int conf[MAX_LABELS][MAX_LABELS + 1];
    memset(conf, 0, sizeof(conf));
    size_t ok = 0;
    for (size_t i = 0; i < ne; i++) {
        double sc;
        int w = classify(&full, &eval_rows[i], cues, &sc);
        if (getenv("PROTOTYPES_DUMP"))
            printf("  [%s -> %s %.3f] %s\n", labels[eval_rows[i].label], labels[w], sc, eval_rows[i].text);
        if (sc < thr)
            w = n_labels; /* no label */
        conf[eval_rows[i].label][w]++;
        ok += w == eval_rows[i].label;
    }
    printf("eval at threshold %.2f:\n  %-22s %6s %6s %6s\n", thr, "label", "P", "R", "F1");
    for (int k = 0; k < n_labels; k++) {
        int tp = conf[k][k], fp = 0, fn = 0;
        for (int x = 0; x < n_labels; x++)
            if (x != k)
                fp += conf[x][k];
        for (int x = 0; x <= n_labels; x++)
            if (x != k)
                fn += conf[k][x];
        double p = tp + fp ? (double)tp / (tp + fp) : 0, r = tp + fn ? (double)tp / (tp + fn) : 0;
        printf("  %-22s %6.3f %6.3f %6.3f\n", labels[k], p, r, p + r > 0 ? 2 * p * r / (p + r) : 0);
    }
    printf("  accuracy %.3f (%zu/%zu)\nconfusion (rows: truth; columns: predicted, then none):\n", (double)ok / (double)ne,
           ok, ne);
    for (int k = 0; k < n_labels; k++) {
        printf("  %-22s", labels[k]);
        for (int x = 0; x <= n_labels; x++)
            printf(" %3d", conf[k][x]);
        printf("\n");
    }
    qsort(lat, n_lat, sizeof(double), cmp);
    printf("embedding latency per text (one thread): p50 %.2f ms, p99 %.2f ms\n", lat[n_lat / 2],
           lat[(size_t)(0.99 * (double)(n_lat - 1))]);
    for (int k = 0; k < n_labels; k++)
        vsr_free(full.protos[k]);
    for (size_t i = 0; i < nb; i++)
        free(bank_rows[i].text);
    for (size_t i = 0; i < ne; i++)
        free(eval_rows[i].text);
    vsr_use_scratch_free(s);
    vsr_use_free(m);
    return 0;
}
