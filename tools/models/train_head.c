/*
 * train_head — trains a linear softmax head (src/models/head.h) over USE-lite
 * embeddings of a labelled exemplar file and writes it in the "vsr-head 1"
 * format.
 *
 *   train_head TRAIN.jsonl[,MORE.jsonl[@W]...] USE_LITE.vsrm OUT.head [--l2 X] [--folds K]
 *              [--iters N] [--dev DEV.jsonl] [--lexical K] [--lex-scale S] [--balance]
 *
 * Training files are read in order; a file named FILE@W has its items
 * weighted W (default 1).  With --balance every class gets the same total
 * weight.  With --lexical K the head is a "vsr-head 2" head: each text also
 * gets the hashed words and word pairs of vsr_head_lex_features() (K
 * buckets, value SCALE/sqrt(n) each), learnt jointly with the embedding.
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
 * that temperature.  With --dev, the grid (L2 x lexical scale) is scored on
 * that separate dev set instead (accuracy, then log-loss), each point trained
 * once on all the training items, and the temperature minimises the dev
 * log-loss.  The evaluation sets are never read here.
 *
 * Deterministic: fixed order, no randomness, BLAS on one thread, so a run on
 * one machine always writes the same bytes.  The file records the SHA-256 of
 * each training file (meta exemplars-sha256 for the first, train2-sha256 ...
 * for the others), of the dev file (dev-sha256) and of the model file
 * (encoder-sha256) so a test can tell when data and head drift apart.
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
#define MAX_FILES 8

typedef struct {
    size_t n, d, c, lex;
    const double *x;     /* n × d */
    const int *y;        /* n */
    const double *w;     /* n sample weights */
    const size_t *loff;  /* n + 1 offsets into lidx */
    const uint32_t *lidx;
    double lscale;       /* lexical value: lscale / sqrt(row's count) */
} set_t;

static double lex_value(const set_t *s, size_t row)
{
    size_t k = s->loff[row + 1] - s->loff[row];
    return k ? s->lscale / sqrt((double)k) : 0;
}

/* W (c × d), L (c × lex) and b (c) minimising the weighted regularised loss
 * over rows `rows` */
static void fit(const set_t *s, const size_t *rows, size_t m, double l2, int iters, double *W, double *L, double *b)
{
    size_t d = s->d, c = s->c, nl = c * s->lex;
    double *X = malloc(m * d * sizeof *X), *Z = malloc(m * c * sizeof *Z);
    double *Wp = calloc(c * d, sizeof *Wp), *bp = calloc(c, sizeof *bp);
    double *Wy = malloc(c * d * sizeof *Wy), *by = malloc(c * sizeof *by), *G = malloc(c * d * sizeof *G);
    double *Lp = calloc(nl + 1, sizeof *Lp), *Ly = malloc((nl + 1) * sizeof *Ly), *GL = malloc((nl + 1) * sizeof *GL);
    double wsum = 0;
    for (size_t i = 0; i < m; i++) {
        memcpy(X + i * d, s->x + rows[i] * d, d * sizeof *X);
        wsum += s->w[rows[i]];
    }
    memset(W, 0, c * d * sizeof *W);
    memset(L, 0, nl * sizeof *L);
    memset(b, 0, c * sizeof *b);
    /* the loss's curvature is at most 1/2 · the largest squared row norm
     * (1 for the unit embedding, lscale² for the lexical part) + l2 */
    double lr = 1.0 / (0.5 * (1 + (s->lex ? s->lscale * s->lscale : 0)) + l2);
    for (int k = 0; k < iters; k++) {
        double mu = (double)k / (k + 3);
        for (size_t i = 0; i < c * d; i++) Wy[i] = W[i] + mu * (W[i] - Wp[i]);
        for (size_t i = 0; i < nl; i++) Ly[i] = L[i] + mu * (L[i] - Lp[i]);
        for (size_t i = 0; i < c; i++) by[i] = b[i] + mu * (b[i] - bp[i]);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)c, (int)d, 1.0, X, (int)d, Wy, (int)d, 0.0,
                    Z, (int)c);
        double gb[MAX_CLASSES] = {0};
        memset(GL, 0, nl * sizeof *GL);
        for (size_t i = 0; i < m; i++) {
            size_t r = rows[i];
            double *z = Z + i * c, mx = -INFINITY, sum = 0, v = s->lex ? lex_value(s, r) : 0;
            for (size_t j = 0; j < c; j++) {
                z[j] += by[j];
                if (s->lex)
                    for (size_t t = s->loff[r]; t < s->loff[r + 1]; t++) z[j] += Ly[j * s->lex + s->lidx[t]] * v;
                if (z[j] > mx) mx = z[j];
            }
            for (size_t j = 0; j < c; j++) sum += (z[j] = exp(z[j] - mx));
            for (size_t j = 0; j < c; j++) {
                z[j] = (z[j] / sum - (s->y[r] == (int)j)) * s->w[r] / wsum;
                gb[j] += z[j];
                if (s->lex)
                    for (size_t t = s->loff[r]; t < s->loff[r + 1]; t++) GL[j * s->lex + s->lidx[t]] += z[j] * v;
            }
        }
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c, (int)d, (int)m, 1.0, Z, (int)c, X, (int)d, 0.0, G,
                    (int)d);
        memcpy(Wp, W, c * d * sizeof *W);
        memcpy(Lp, L, nl * sizeof *L);
        memcpy(bp, b, c * sizeof *b);
        for (size_t i = 0; i < c * d; i++) W[i] = Wy[i] - lr * (G[i] + l2 * Wy[i]);
        for (size_t i = 0; i < nl; i++) L[i] = Ly[i] - lr * (GL[i] + l2 * Ly[i]);
        for (size_t i = 0; i < c; i++) b[i] = by[i] - lr * gb[i];
    }
    free(X), free(Z), free(Wp), free(bp), free(Wy), free(by), free(G), free(Lp), free(Ly), free(GL);
}

static void logits(const set_t *s, size_t row, const double *W, const double *L, const double *b, double *z)
{
    double v = s->lex ? lex_value(s, row) : 0;
    for (size_t j = 0; j < s->c; j++) {
        double acc = b[j];
        for (size_t k = 0; k < s->d; k++) acc += W[j * s->d + k] * s->x[row * s->d + k];
        if (s->lex)
            for (size_t t = s->loff[row]; t < s->loff[row + 1]; t++) acc += L[j * s->lex + s->lidx[t]] * v;
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

/* embeddings (n × d) and lexical features of a labelled set */
static int featurise(vsr_use_model_t *m, const labeled_t *ex, size_t lex, double *x, size_t **loff, uint32_t **lidx)
{
    float v[VSR_USE_DIM];
    uint32_t f[VSR_HEAD_LEX_MAX_FEATURES];
    vsr_use_scratch_t *scratch = vsr_use_scratch_new();
    size_t cap = ex->n * 16 + 16, used = 0;
    *loff = malloc((ex->n + 1) * sizeof **loff);
    *lidx = malloc(cap * sizeof **lidx);
    for (size_t i = 0; i < ex->n; i++) {
        int rc = vsr_use_embed(m, ex->text[i], strlen(ex->text[i]), v, scratch);
        if (rc != VSR_OK) {
            fprintf(stderr, "train_head: item %zu: %s\n", i + 1, vsr_strerror(rc));
            vsr_use_scratch_free(scratch);
            return -1;
        }
        for (size_t k = 0; k < VSR_USE_DIM; k++) x[i * VSR_USE_DIM + k] = v[k];
        (*loff)[i] = used;
        size_t k = lex ? vsr_head_lex_features(ex->text[i], strlen(ex->text[i]), lex, f) : 0;
        if (used + k > cap) {
            while (used + k > cap) cap *= 2;
            *lidx = realloc(*lidx, cap * sizeof **lidx);
        }
        memcpy(*lidx + used, f, k * sizeof *f);
        used += k;
    }
    (*loff)[ex->n] = used;
    vsr_use_scratch_free(scratch);
    return 0;
}

/* appends b's items to a (a owns them after; b is emptied) */
static void labeled_append(labeled_t *a, labeled_t *b)
{
    a->label = realloc(a->label, (a->n + b->n) * sizeof *a->label);
    a->text = realloc(a->text, (a->n + b->n) * sizeof *a->text);
    memcpy(a->label + a->n, b->label, b->n * sizeof *b->label);
    memcpy(a->text + a->n, b->text, b->n * sizeof *b->text);
    a->n += b->n;
    free(b->label), free(b->text);
    memset(b, 0, sizeof *b);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: train_head TRAIN.jsonl[,MORE.jsonl[@W]...] USE_LITE.vsrm OUT.head [--l2 X] [--folds K] "
                        "[--iters N] [--dev DEV.jsonl] [--lexical K] [--lex-scale S] [--balance]\n");
        return 2;
    }
    const char *model_path = argv[2], *out_path = argv[3], *dev_path = NULL;
    double fixed_l2 = -1, fixed_scale = -1;
    int folds = 5, iters = 600, balance = 0;
    size_t lex = 0;
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--balance") == 0) {
            balance = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "train_head: %s needs a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--l2") == 0) fixed_l2 = atof(argv[++i]);
        else if (strcmp(argv[i], "--folds") == 0) folds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dev") == 0) dev_path = argv[++i];
        else if (strcmp(argv[i], "--lexical") == 0) lex = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--lex-scale") == 0) fixed_scale = atof(argv[++i]);
        else {
            fprintf(stderr, "train_head: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (folds < 2 || folds > 20 || iters < 1 || iters > 100000 ||
        (lex && (lex < VSR_HEAD_MIN_LEX || lex > VSR_HEAD_MAX_LEX || (lex & (lex - 1)) != 0))) {
        fprintf(stderr, "train_head: --folds 2..20, --iters 1..100000, --lexical a power of two in %d..%u\n",
                VSR_HEAD_MIN_LEX, VSR_HEAD_MAX_LEX);
        return 2;
    }
    if (access(model_path, R_OK) != 0) {
        fprintf(stderr, "train_head: %s: no model file (scripts/setup-deps fetches it)\n", model_path);
        return 77;
    }
    vsr_models_blas_threads(1);

    /* the training files, "a.jsonl,b.jsonl@3" */
    labeled_t ex = {0};
    char paths[MAX_FILES][1024], shas[MAX_FILES][65];
    double fweight[MAX_FILES];
    size_t nfiles = 0, fend[MAX_FILES];
    for (const char *p = argv[1]; *p;) {
        size_t len = strcspn(p, ",");
        if (nfiles == MAX_FILES || len == 0 || len >= sizeof paths[0]) {
            fprintf(stderr, "train_head: at most %d training files\n", MAX_FILES);
            return 2;
        }
        memcpy(paths[nfiles], p, len);
        paths[nfiles][len] = '\0';
        char *at = strrchr(paths[nfiles], '@');
        fweight[nfiles] = 1;
        if (at) {
            *at = '\0';
            fweight[nfiles] = atof(at + 1);
            if (!(fweight[nfiles] > 0)) {
                fprintf(stderr, "train_head: bad weight in %s\n", p);
                return 2;
            }
        }
        labeled_t one;
        if (labeled_load(paths[nfiles], &one) != 0) return 1;
        if (labeled_sha256_file(paths[nfiles], shas[nfiles]) != 0) {
            fprintf(stderr, "train_head: can't hash %s\n", paths[nfiles]);
            return 1;
        }
        labeled_append(&ex, &one);
        fend[nfiles++] = ex.n;
        p += len;
        if (*p == ',') p++;
    }
    char model_sha[65], dev_sha[65];
    if (labeled_sha256_file(model_path, model_sha) != 0 || (dev_path && labeled_sha256_file(dev_path, dev_sha) != 0)) {
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
    double *w = malloc(ex.n * sizeof *w), cw[MAX_CLASSES] = {0};
    size_t *fold = malloc(ex.n * sizeof *fold), seen[MAX_CLASSES] = {0};
    for (size_t i = 0, f = 0; i < ex.n; i++) {
        size_t j = 0;
        while (strcmp(labels[j], ex.label[i]) != 0) j++;
        y[i] = (int)j;
        fold[i] = seen[j]++ % (size_t)folds;
        while (i >= fend[f]) f++;
        w[i] = fweight[f];
        cw[j] += w[i];
    }
    if (balance)
        for (size_t i = 0; i < ex.n; i++) w[i] *= (double)ex.n / ((double)c * cw[y[i]]);

    labeled_t dev = {0};
    int *ydev = NULL;
    if (dev_path) {
        if (labeled_load(dev_path, &dev) != 0) return 1;
        ydev = malloc(dev.n * sizeof *ydev);
        for (size_t i = 0; i < dev.n; i++) {
            size_t j = 0;
            while (j < c && strcmp(labels[j], dev.label[i]) != 0) j++;
            if (j == c) {
                fprintf(stderr, "train_head: %s: item %zu: unknown label %s\n", dev_path, i + 1, dev.label[i]);
                return 1;
            }
            ydev[i] = (int)j;
        }
    }

    /* features */
    vsr_use_model_t *m;
    int rc = vsr_use_load(model_path, &m);
    if (rc != VSR_OK) {
        fprintf(stderr, "train_head: %s: %s\n", model_path, vsr_strerror(rc));
        return 1;
    }
    size_t d = VSR_USE_DIM;
    double *x = malloc(ex.n * d * sizeof *x), *xdev = malloc((dev.n + 1) * d * sizeof *xdev);
    size_t *loff, *dloff = NULL;
    uint32_t *lidx, *dlidx = NULL;
    if (featurise(m, &ex, lex, x, &loff, &lidx) != 0 || (dev_path && featurise(m, &dev, lex, xdev, &dloff, &dlidx) != 0))
        return 1;
    vsr_use_free(m);
    set_t s = {ex.n, d, c, lex, x, y, w, loff, lidx, 1.0};
    set_t sd = {dev.n, d, c, lex, xdev, ydev, NULL, dloff, dlidx, 1.0};

    /* the grid: L2 × lexical scale, scored out of fold or on the dev set */
    static const double GRID[] = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2};
    static const double SCALES[] = {0.5, 1, 2, 4};
    size_t n_grid = fixed_l2 >= 0 ? 1 : sizeof GRID / sizeof *GRID;
    size_t n_scales = !lex || fixed_scale > 0 ? 1 : sizeof SCALES / sizeof *SCALES;
    size_t nl = c * lex;
    double *W = malloc(c * d * sizeof *W), *L = malloc((nl + 1) * sizeof *L), b[MAX_CLASSES];
    double *bestW = malloc(c * d * sizeof *W), *bestL = malloc((nl + 1) * sizeof *L), bestb[MAX_CLASSES];
    size_t n_scored = dev_path ? dev.n : ex.n;
    double *Z = malloc(n_scored * c * sizeof *Z), *bestZ = malloc(n_scored * c * sizeof *bestZ);
    int *yo = malloc(n_scored * sizeof *yo);
    size_t *rows = malloc(ex.n * sizeof *rows);
    double best_l2 = 0, best_scale = 1, best_acc = -1, best_nll = INFINITY;
    for (size_t g = 0; g < n_grid; g++) {
        for (size_t q = 0; q < n_scales; q++) {
            double l2 = fixed_l2 >= 0 ? fixed_l2 : GRID[g];
            double scale = fixed_scale > 0 ? fixed_scale : SCALES[q];
            s.lscale = sd.lscale = scale;
            size_t no = 0, correct = 0;
            if (dev_path) {
                for (size_t i = 0; i < ex.n; i++) rows[i] = i;
                fit(&s, rows, ex.n, l2, iters, W, L, b);
                for (size_t i = 0; i < dev.n; i++) {
                    double *z = Z + no * c;
                    logits(&sd, i, W, L, b, z);
                    size_t top = 0;
                    for (size_t j = 1; j < c; j++)
                        if (z[j] > z[top]) top = j;
                    correct += top == (size_t)ydev[i];
                    yo[no++] = ydev[i];
                }
            } else {
                for (size_t f = 0; f < (size_t)folds; f++) {
                    size_t mrows = 0;
                    for (size_t i = 0; i < ex.n; i++)
                        if (fold[i] != f) rows[mrows++] = i;
                    fit(&s, rows, mrows, l2, iters, W, L, b);
                    for (size_t i = 0; i < ex.n; i++) {
                        if (fold[i] != f) continue;
                        double *z = Z + no * c;
                        logits(&s, i, W, L, b, z);
                        size_t top = 0;
                        for (size_t j = 1; j < c; j++)
                            if (z[j] > z[top]) top = j;
                        correct += top == (size_t)y[i];
                        yo[no++] = y[i];
                    }
                }
            }
            double acc = (double)correct / (double)no, loss = nll(Z, yo, no, c, 1.0);
            if (lex) printf("l2 %-8g lexical scale %-4g", l2, scale);
            else printf("l2 %-8g", l2);
            printf("  %s accuracy %.4f  log-loss %.4f\n", dev_path ? "dev" : "out-of-fold", acc, loss);
            fflush(stdout);
            if (acc > best_acc || (acc == best_acc && loss < best_nll)) {
                best_acc = acc, best_nll = loss, best_l2 = l2, best_scale = scale;
                memcpy(bestZ, Z, no * c * sizeof *Z);
                if (dev_path) {
                    memcpy(bestW, W, c * d * sizeof *W);
                    memcpy(bestL, L, nl * sizeof *L);
                    memcpy(bestb, b, c * sizeof *b);
                }
            }
        }
    }
    /* the temperature: log-spaced grid 0.05 .. 20 on the held-out logits */
    double best_t = 1, best_tnll = INFINITY;
    for (int i = 0; i <= 400; i++) {
        double t = exp(log(0.05) + (log(20.0) - log(0.05)) * i / 400.0);
        double loss = nll(bestZ, yo, n_scored, c, t);
        if (loss < best_tnll) best_tnll = loss, best_t = t;
    }
    printf("chosen: l2 %g", best_l2);
    if (lex) printf(", lexical scale %g", best_scale);
    printf(", temperature %.4g (%s log-loss %.4f -> %.4f)\n", best_t, dev_path ? "dev" : "out-of-fold", best_nll,
           best_tnll);

    /* the head: every training item (with --dev, the chosen fit already is) */
    if (dev_path) {
        memcpy(W, bestW, c * d * sizeof *W);
        memcpy(L, bestL, nl * sizeof *L);
        memcpy(b, bestb, c * sizeof *b);
    } else {
        for (size_t i = 0; i < ex.n; i++) rows[i] = i;
        s.lscale = best_scale;
        fit(&s, rows, ex.n, best_l2, iters, W, L, b);
    }
    FILE *out = fopen(out_path, "w");
    if (!out) {
        fprintf(stderr, "train_head: %s: can't write\n", out_path);
        return 1;
    }
    fprintf(out, "vsr-head %d\ndim %zu\nclasses %zu\ntemperature %.6g\n", lex ? VSR_HEAD_VERSION_LEX : VSR_HEAD_VERSION,
            d, c, best_t);
    fprintf(out, "meta encoder use-lite\nmeta encoder-sha256 %s\nmeta exemplars-sha256 %s\n", model_sha, shas[0]);
    for (size_t f = 1; f < nfiles; f++) fprintf(out, "meta train%zu-sha256 %s\n", f + 1, shas[f]);
    if (dev_path) fprintf(out, "meta dev-sha256 %s\nmeta dev-accuracy %.4f\n", dev_sha, best_acc);
    fprintf(out, "meta exemplars %zu\nmeta l2 %g\nmeta iters %d\n", ex.n, best_l2, iters);
    if (!dev_path) fprintf(out, "meta cv-folds %d\nmeta cv-accuracy %.4f\n", folds, best_acc);
    if (balance) fprintf(out, "meta balanced yes\n");
    for (size_t j = 0; j < c; j++) fprintf(out, "class %s\n", labels[j]);
    fprintf(out, "bias");
    for (size_t j = 0; j < c; j++) fprintf(out, " %.9g", (float)b[j]);
    fprintf(out, "\n");
    for (size_t j = 0; j < c; j++) {
        fprintf(out, "row");
        for (size_t k = 0; k < d; k++) fprintf(out, " %.9g", (float)W[j * d + k]);
        fprintf(out, "\n");
    }
    if (lex) {
        /* a bucket's weights matter only relative to each other across the
         * classes: centring them changes no probability and keeps the
         * numbers short; unseen buckets become exact zeros */
        fprintf(out, "lexical %zu %g\n", lex, best_scale);
        for (size_t k = 0; k < lex; k++) {
            double mean = 0;
            for (size_t j = 0; j < c; j++) mean += L[j * lex + k];
            mean /= (double)c;
            for (size_t j = 0; j < c; j++) L[j * lex + k] -= mean;
        }
        for (size_t j = 0; j < c; j++) {
            fprintf(out, "lrow");
            for (size_t k = 0; k < lex; k++) {
                float v = (float)L[j * lex + k];
                fprintf(out, " %.6g", fabsf(v) < 1e-6f ? 0.0f : v);
            }
            fprintf(out, "\n");
        }
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
    printf("wrote %s (%zu classes, %zu training items)\n", out_path, c, ex.n);
    free(W), free(L), free(bestW), free(bestL), free(Z), free(bestZ), free(yo), free(rows), free(x), free(xdev);
    free(y), free(w), free(fold), free(loff), free(lidx), free(dloff), free(dlidx), free(ydev);
    labeled_free(&ex);
    labeled_free(&dev);
    return 0;
}
