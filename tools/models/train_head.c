/*
 * train_head — trains a linear softmax head (src/models/head.h) over USE-lite
 * embeddings of a labelled exemplar file and writes it in the "vsr-head 1"
 * format.
 *
 *   train_head EXEMPLARS.jsonl USE_LITE.vsrm OUT.head [--l2 X] [--folds K] [--iters N]
 *
 * Method: multinomial logistic regression, loss = mean cross-entropy +
 * (l2/2)·|W|² (the bias is not penalised), full-batch gradient descent with
 * Nesterov momentum from zero weights for a fixed number of steps.  The
 * exemplars are split into K folds by position within their class (the j-th
 * exemplar of a class is in fold j mod K); for each L2 strength of the grid
 * (or the one given) the out-of-fold predictions are collected, the strength
 * with the best out-of-fold accuracy (then log-loss) is kept, and the
 * temperature that minimises the out-of-fold log-loss is chosen.  The head
 * written is then trained on every exemplar with that strength and carries
 * that temperature.  The evaluation sets are never read here.
 *
 * Deterministic: fixed order, no randomness, BLAS on one thread, so a run on
 * one machine always writes the same bytes.  The file records the SHA-256 of
 * the exemplar file and of the model file (meta exemplars-sha256,
 * encoder-sha256) so a test can tell when data and head drift apart.
 * Labels are sorted (strcmp), so the class order doesn't depend on the file.
 *
 * Exit: 0; 1 on bad input; 2 usage; 77 when the model file is absent.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "labeled.h"
#include "models/head.h"
#include "models/models.h"

#define MAX_CLASSES 256

typedef struct {
    size_t n, d, c;
    const double *x; /* n × d */
    const int *y;    /* n */
} set_t;

/* W (c × d) and b (c) minimising the regularised loss over rows `rows` */
static void fit(const set_t *s, const size_t *rows, size_t m, double l2, int iters, double *W, double *b)
{
    size_t d = s->d, c = s->c;
    double *X = malloc(m * d * sizeof *X), *Z = malloc(m * c * sizeof *Z);
    double *Wp = calloc(c * d, sizeof *Wp), *bp = calloc(c, sizeof *bp);
    double *Wy = malloc(c * d * sizeof *Wy), *by = malloc(c * sizeof *by), *G = malloc(c * d * sizeof *G);
    for (size_t i = 0; i < m; i++) memcpy(X + i * d, s->x + rows[i] * d, d * sizeof *X);
    memset(W, 0, c * d * sizeof *W);
    memset(b, 0, c * sizeof *b);
    /* the loss's curvature is at most 1/2 · the largest eigenvalue of XᵀX/m
     * (<= 1/2 for unit vectors) + l2: a step of 1/(0.5 + l2) is safe */
    double lr = 1.0 / (0.5 + l2);
    for (int k = 0; k < iters; k++) {
        double mu = (double)k / (k + 3);
        for (size_t i = 0; i < c * d; i++) Wy[i] = W[i] + mu * (W[i] - Wp[i]);
        for (size_t i = 0; i < c; i++) by[i] = b[i] + mu * (b[i] - bp[i]);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)c, (int)d, 1.0, X, (int)d, Wy, (int)d, 0.0,
                    Z, (int)c);
        double gb[MAX_CLASSES] = {0};
        for (size_t i = 0; i < m; i++) {
            double *z = Z + i * c, mx = -INFINITY, sum = 0;
            for (size_t j = 0; j < c; j++) {
                z[j] += by[j];
                if (z[j] > mx) mx = z[j];
            }
            for (size_t j = 0; j < c; j++) sum += (z[j] = exp(z[j] - mx));
            for (size_t j = 0; j < c; j++) {
                z[j] = (z[j] / sum - (s->y[rows[i]] == (int)j)) / (double)m;
                gb[j] += z[j];
            }
        }
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c, (int)d, (int)m, 1.0, Z, (int)c, X, (int)d, 0.0, G,
                    (int)d);
        memcpy(Wp, W, c * d * sizeof *W);
        memcpy(bp, b, c * sizeof *b);
        for (size_t i = 0; i < c * d; i++) W[i] = Wy[i] - lr * (G[i] + l2 * Wy[i]);
        for (size_t i = 0; i < c; i++) b[i] = by[i] - lr * gb[i];
    }
    free(X), free(Z), free(Wp), free(bp), free(Wy), free(by), free(G);
}

static void logits(const set_t *s, size_t row, const double *W, const double *b, double *z)
{
    for (size_t j = 0; j < s->c; j++) {
        double acc = b[j];
        for (size_t k = 0; k < s->d; k++) acc += W[j * s->d + k] * s->x[row * s->d + k];
        z[j] = acc;
    }
}

/* mean negative log-likelihood of softmax(z / t) over the n rows of Z */
static double nll(const double *Z, const int *y, size_t n, size_t c, double t)
{
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        const double *z = Z + i * c;
        double mx = -INFINITY, sum = 0;
        for (size_t j = 0; j < c; j++)
            if (z[j] > mx) mx = z[j];
        for (size_t j = 0; j < c; j++) sum += exp((z[j] - mx) / t);
        total += -((z[y[i]] - mx) / t - log(sum));
    }
    return total / (double)n;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: train_head EXEMPLARS.jsonl USE_LITE.vsrm OUT.head [--l2 X] [--folds K] [--iters N]\n");
        return 2;
    }
    const char *ex_path = argv[1], *model_path = argv[2], *out_path = argv[3];
    double fixed_l2 = -1;
    int folds = 5, iters = 600;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--l2") == 0) fixed_l2 = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--folds") == 0) folds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "train_head: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (folds < 2 || folds > 20 || iters < 1 || iters > 100000) {
        fprintf(stderr, "train_head: --folds 2..20, --iters 1..100000\n");
        return 2;
    }
    if (access(model_path, R_OK) != 0) {
        fprintf(stderr, "train_head: %s: no model file (scripts/setup-deps fetches it)\n", model_path);
        return 77;
    }
    vsr_models_blas_threads(1);
    labeled_t ex;
    if (labeled_load(ex_path, &ex) != 0) return 1;
    char ex_sha[65], model_sha[65];
    if (labeled_sha256_file(ex_path, ex_sha) != 0 || labeled_sha256_file(model_path, model_sha) != 0) {
        fprintf(stderr, "train_head: can't hash the inputs\n");
        return 1;
    }

    /* the classes, sorted */
    char *labels[MAX_CLASSES];
    size_t c = 0;
    for (size_t i = 0; i < ex.n; i++) {
        size_t j = 0;
        while (j < c && strcmp(labels[j], ex.label[i]) != 0) j++;
        if (j == c) {
            if (c == MAX_CLASSES) {
                fprintf(stderr, "train_head: more than %d classes\n", MAX_CLASSES);
                return 1;
            }
            labels[c++] = ex.label[i];
        }
    }
    qsort(labels, c, sizeof *labels, cmp_str);
    int *y = malloc(ex.n * sizeof *y);
    size_t *fold = malloc(ex.n * sizeof *fold), seen[MAX_CLASSES] = {0};
    for (size_t i = 0; i < ex.n; i++) {
        size_t j = 0;
        while (strcmp(labels[j], ex.label[i]) != 0) j++;
        y[i] = (int)j;
        fold[i] = seen[j]++ % (size_t)folds;
    }

    /* embeddings */
    vsr_use_model_t *m;
    int rc = vsr_use_load(model_path, &m);
    if (rc != VSR_OK) {
        fprintf(stderr, "train_head: %s: %s\n", model_path, vsr_strerror(rc));
        return 1;
    }
    size_t d = VSR_USE_DIM;
    double *x = malloc(ex.n * d * sizeof *x);
    float v[VSR_USE_DIM];
    vsr_use_scratch_t *scratch = vsr_use_scratch_new();
    for (size_t i = 0; i < ex.n; i++) {
        if ((rc = vsr_use_embed(m, ex.text[i], strlen(ex.text[i]), v, scratch)) != VSR_OK) {
            fprintf(stderr, "train_head: exemplar %zu: %s\n", i + 1, vsr_strerror(rc));
            return 1;
        }
        for (size_t k = 0; k < d; k++) x[i * d + k] = v[k];
    }
    vsr_use_scratch_free(scratch);
    vsr_use_free(m);
    set_t s = {ex.n, d, c, x, y};

    /* cross-validation over the L2 grid */
    static const double GRID[] = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2};
    size_t n_grid = fixed_l2 >= 0 ? 1 : sizeof GRID / sizeof *GRID;
    double *W = malloc(c * d * sizeof *W), b[MAX_CLASSES];
    double *Z = malloc(ex.n * c * sizeof *Z), *bestZ = malloc(ex.n * c * sizeof *bestZ);
    int *yo = malloc(ex.n * sizeof *yo);
    size_t *rows = malloc(ex.n * sizeof *rows);
    double best_l2 = 0, best_acc = -1, best_nll = INFINITY;
    for (size_t g = 0; g < n_grid; g++) {
        double l2 = fixed_l2 >= 0 ? fixed_l2 : GRID[g];
        size_t no = 0, correct = 0;
        for (size_t f = 0; f < (size_t)folds; f++) {
            size_t mrows = 0;
            for (size_t i = 0; i < ex.n; i++)
                if (fold[i] != f) rows[mrows++] = i;
            fit(&s, rows, mrows, l2, iters, W, b);
            for (size_t i = 0; i < ex.n; i++) {
                if (fold[i] != f) continue;
                double *z = Z + no * c;
                logits(&s, i, W, b, z);
                size_t top = 0;
                for (size_t j = 1; j < c; j++)
                    if (z[j] > z[top]) top = j;
                correct += top == (size_t)y[i];
                yo[no++] = y[i];
            }
        }
        double acc = (double)correct / (double)no, loss = nll(Z, yo, no, c, 1.0);
        printf("l2 %-8g  %d-fold accuracy %.4f  log-loss %.4f\n", l2, folds, acc, loss);
        if (acc > best_acc || (acc == best_acc && loss < best_nll)) {
            best_acc = acc, best_nll = loss, best_l2 = l2;
            memcpy(bestZ, Z, no * c * sizeof *Z);
        }
    }
    /* the temperature: log-spaced grid 0.05 .. 20 on the out-of-fold logits */
    double best_t = 1, best_tnll = INFINITY;
    for (int i = 0; i <= 400; i++) {
        double t = exp(log(0.05) + (log(20.0) - log(0.05)) * i / 400.0);
        double loss = nll(bestZ, yo, ex.n, c, t);
        if (loss < best_tnll) best_tnll = loss, best_t = t;
    }
    printf("chosen: l2 %g, temperature %.4g (out-of-fold log-loss %.4f -> %.4f)\n", best_l2, best_t, best_nll,
           best_tnll);

    /* the head: every exemplar */
    for (size_t i = 0; i < ex.n; i++) rows[i] = i;
    fit(&s, rows, ex.n, best_l2, iters, W, b);
    FILE *out = fopen(out_path, "w");
    if (!out) {
        fprintf(stderr, "train_head: %s: can't write\n", out_path);
        return 1;
    }
    fprintf(out, "vsr-head %d\ndim %zu\nclasses %zu\ntemperature %.6g\n", VSR_HEAD_VERSION, d, c, best_t);
    fprintf(out, "meta encoder use-lite\nmeta encoder-sha256 %s\nmeta exemplars-sha256 %s\n", model_sha, ex_sha);
    fprintf(out, "meta exemplars %zu\nmeta l2 %g\nmeta iters %d\nmeta cv-folds %d\nmeta cv-accuracy %.4f\n", ex.n,
            best_l2, iters, folds, best_acc);
    for (size_t j = 0; j < c; j++) fprintf(out, "class %s\n", labels[j]);
    fprintf(out, "bias");
    for (size_t j = 0; j < c; j++) fprintf(out, " %.9g", (float)b[j]);
    fprintf(out, "\n");
    for (size_t j = 0; j < c; j++) {
        fprintf(out, "row");
        for (size_t k = 0; k < d; k++) fprintf(out, " %.9g", (float)W[j * d + k]);
        fprintf(out, "\n");
    }
    fprintf(out, "end\n");
    if (fclose(out) != 0) {
        fprintf(stderr, "train_head: %s: write failed\n", out_path);
        return 1;
    }
    /* what was written must load */
    vsr_head_t *h;
    if ((rc = vsr_head_load(out_path, &h)) != VSR_OK) {
        fprintf(stderr, "train_head: %s does not load back: %s\n", out_path, vsr_strerror(rc));
        return 1;
    }
    vsr_head_free(h);
    printf("wrote %s (%zu classes, %zu exemplars)\n", out_path, c, ex.n);
    free(W), free(Z), free(bestZ), free(yo), free(rows), free(x), free(y), free(fold);
    labeled_free(&ex);
    return 0;
}
