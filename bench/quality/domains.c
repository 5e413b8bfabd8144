/*
 * quality_domains — offline quality of the built-in domain classifier: the
 * USE-lite embedding (src/models/use_lite.c) and a linear softmax head
 * (src/models/head.c) through vsr_domain_classify() (src/models/domain.h),
 * the call the model runtime makes, over a
 * labelled evaluation set.
 *
 *   OPENBLAS_NUM_THREADS=1 build/quality_domains data/domains/domain.head data/domains/eval.jsonl [--misses]
 *
 * Prints top-1 and top-2 accuracy, per-class precision/recall/F1, the
 * confusion matrix (rows: true class, columns: predicted), calibration
 * (mean confidence against accuracy in ten confidence bins, and the expected
 * calibration error), a threshold sweep (share of questions whose top
 * probability reaches the threshold, accuracy among them, and accuracy when
 * the others fall back to "other") and the latency p50/p99 of one embed +
 * head call on one thread (three passes over the set) and of the head
 * alone.  --misses lists the misclassified questions.  --check MIN makes
 * one pass only (no head-alone timing) and exits 1 when top-1 accuracy is
 * below MIN (the unit-test run: ctest quality_domains).  The model file is $VSR_MODEL_CACHE/use-lite.vsrm
 * (default ~/.cache/vsr/models); without it the program exits 77 (skip).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "labeled.h"
#include "models/domain.h"
#include "models/head.h"
#include "models/models.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: quality_domains HEAD EVAL.jsonl [--misses] [--check MIN_ACCURACY]\n");
        return 2;
    }
    int misses = 0, passes = 3;
    double min_acc = -1;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--misses") == 0) {
            misses = 1;
        } else if (strcmp(argv[i], "--check") == 0 && i + 1 < argc) {
            min_acc = atof(argv[++i]);
            passes = 1;
        } else {
            fprintf(stderr, "quality_domains: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    char model_path[4096];
    const char *cache = getenv("VSR_MODEL_CACHE"), *home = getenv("HOME");
    if (cache && *cache) snprintf(model_path, sizeof model_path, "%s/use-lite.vsrm", cache);
    else snprintf(model_path, sizeof model_path, "%s/.cache/vsr/models/use-lite.vsrm", home ? home : "");
    if (access(model_path, R_OK) != 0) {
        fprintf(stderr, "quality_domains: %s: no model file (skipped)\n", model_path);
        return 77;
    }
    vsr_models_blas_threads(1);
    vsr_head_t *h;
    int rc = vsr_head_load(argv[1], &h);
    if (rc != VSR_OK) {
        fprintf(stderr, "quality_domains: %s: %s\n", argv[1], vsr_strerror(rc));
        return 1;
    }
    vsr_use_model_t *m;
    if ((rc = vsr_use_load(model_path, &m)) != VSR_OK) {
        fprintf(stderr, "quality_domains: %s: %s\n", model_path, vsr_strerror(rc));
        return 1;
    }
    labeled_t ev;
    if (labeled_load(argv[2], &ev) != 0) return 1;
    size_t c = vsr_head_classes(h), n = ev.n;
    if (vsr_domain_check(h) != VSR_OK || c > 64) {
        fprintf(stderr, "quality_domains: the head is not a USE-lite head of <= 64 classes\n");
        return 1;
    }
    int *truth = malloc(n * sizeof *truth), *pred = malloc(n * sizeof *pred), *second = malloc(n * sizeof *second);
    size_t calls = (size_t)passes * n;
    double *conf = malloc(n * sizeof *conf), *lat = malloc(calls * sizeof *lat), *hlat = malloc(calls * sizeof *hlat);
    vsr_use_scratch_t *scratch = vsr_use_scratch_new();
    float x[VSR_USE_DIM], probs[VSR_HEAD_MAX_CLASSES];
    for (size_t i = 0; i < n; i++) {
        if ((truth[i] = vsr_head_label_index(h, ev.label[i])) < 0) {
            fprintf(stderr, "quality_domains: item %zu: label \"%s\" is not one of the head's\n", i + 1, ev.label[i]);
            return 1;
        }
    }
    for (int pass = 0; pass < passes; pass++)
        for (size_t i = 0; i < n; i++) {
            /* the runtime's call */
            vsr_domain_score_t scores[VSR_HEAD_MAX_CLASSES];
            size_t got;
            double t0 = now_ms();
            rc = vsr_domain_classify(m, h, ev.text[i], strlen(ev.text[i]), scratch, scores, &got);
            lat[pass * n + i] = now_ms() - t0;
            if (rc != VSR_OK) {
                fprintf(stderr, "quality_domains: item %zu: %s\n", i + 1, vsr_strerror(rc));
                return 1;
            }
            pred[i] = vsr_head_label_index(h, scores[0].label), second[i] = vsr_head_label_index(h, scores[1].label);
            conf[i] = scores[0].score;
            /* the head alone, on this text's embedding (not in a check run) */
            if (min_acc >= 0) continue;
            size_t idx[2];
            vsr_use_embed(m, ev.text[i], strlen(ev.text[i]), x, scratch);
            double t1 = now_ms();
            vsr_head_predict_text(h, x, VSR_USE_DIM, ev.text[i], strlen(ev.text[i]), probs);
            vsr_head_top_k(probs, c, 2, idx);
            hlat[pass * n + i] = now_ms() - t1;
        }

    size_t cm[64][64] = {{0}}, correct = 0, top2 = 0;
    for (size_t i = 0; i < n; i++) {
        cm[truth[i]][pred[i]]++;
        correct += pred[i] == truth[i];
        top2 += pred[i] == truth[i] || second[i] == truth[i];
    }
    printf("items %zu, classes %zu, temperature %.4g\n", n, c, vsr_head_temperature(h));
    printf("top-1 accuracy %.4f (%zu/%zu)   top-2 accuracy %.4f\n\n", (double)correct / n, correct, n,
           (double)top2 / n);
    printf("%-18s %9s %9s %9s %8s\n", "class", "precision", "recall", "F1", "support");
    double macro = 0;
    for (size_t j = 0; j < c; j++) {
        size_t tp = cm[j][j], col = 0, row = 0;
        for (size_t k = 0; k < c; k++) col += cm[k][j], row += cm[j][k];
        double p = col ? (double)tp / col : 0, r = row ? (double)tp / row : 0, f = p + r > 0 ? 2 * p * r / (p + r) : 0;
        macro += f;
        printf("%-18s %9.3f %9.3f %9.3f %8zu\n", vsr_head_label(h, j), p, r, f, row);
    }
    printf("%-18s %29.3f\n\n", "macro F1", macro / c);

    printf("confusion (rows true, columns predicted)\n%-5s", "");
    for (size_t j = 0; j < c; j++) printf(" %4.4s", vsr_head_label(h, j));
    printf("\n");
    for (size_t j = 0; j < c; j++) {
        printf("%-5.5s", vsr_head_label(h, j));
        for (size_t k = 0; k < c; k++) printf(" %4zu", cm[j][k]);
        printf("\n");
    }

    printf("\ncalibration (top probability)\n%-11s %6s %10s %9s\n", "bin", "items", "mean conf", "accuracy");
    double ece = 0;
    for (int bnum = 0; bnum < 10; bnum++) {
        double lo = bnum / 10.0, hi = (bnum + 1) / 10.0, sc = 0;
        size_t cnt = 0, ok = 0;
        for (size_t i = 0; i < n; i++)
            if (conf[i] >= lo && (conf[i] < hi || (bnum == 9 && conf[i] <= 1.0))) {
                cnt++, sc += conf[i], ok += pred[i] == truth[i];
            }
        if (!cnt) continue;
        ece += fabs(sc / cnt - (double)ok / cnt) * cnt / n;
        printf("[%.1f, %.1f%c %6zu %10.3f %9.3f\n", lo, hi, bnum == 9 ? ']' : ')', cnt, sc / cnt, (double)ok / cnt);
    }
    printf("expected calibration error %.4f\n", ece);

    int other = vsr_head_label_index(h, "other");
    static const double TH[] = {0.2, 0.25, 0.28, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8};
    printf("\nthreshold sweep (below it: fallback \"other\")\n%-9s %9s %15s %17s\n", "threshold", "coverage",
           "acc. above", "acc. w/ fallback");
    for (size_t t = 0; t < sizeof TH / sizeof *TH; t++) {
        size_t above = 0, ok_above = 0, ok_fb = 0;
        for (size_t i = 0; i < n; i++) {
            if (conf[i] >= TH[t]) {
                above++, ok_above += pred[i] == truth[i], ok_fb += pred[i] == truth[i];
            } else {
                ok_fb += truth[i] == other;
            }
        }
        printf("%-9.2f %9.3f %15.3f %17.3f\n", TH[t], (double)above / n, above ? (double)ok_above / above : 0,
               (double)ok_fb / n);
    }

    qsort(lat, calls, sizeof *lat, cmp_d);
    printf("\nlatency embed+head, one thread, %zu calls: p50 %.3f ms  p99 %.3f ms\n", calls, lat[calls / 2],
           lat[(size_t)(calls * 0.99)]);
    if (min_acc < 0) {
        qsort(hlat, calls, sizeof *hlat, cmp_d);
        printf("latency head alone (predict + top-k):          p50 %.4f ms  p99 %.4f ms\n", hlat[calls / 2],
               hlat[(size_t)(calls * 0.99)]);
    }

    if (misses) {
        printf("\nmisclassified\n");
        for (size_t i = 0; i < n; i++)
            if (pred[i] != truth[i])
                printf("%-16s -> %-16s %.2f  %.90s\n", ev.label[i], vsr_head_label(h, pred[i]), conf[i], ev.text[i]);
    }
    vsr_use_scratch_free(scratch);
    vsr_use_free(m);
    vsr_head_free(h);
    labeled_free(&ev);
    free(truth), free(pred), free(second), free(conf), free(lat), free(hlat);
    if (min_acc >= 0 && (double)correct / n < min_acc) {
        fprintf(stderr, "quality_domains: top-1 accuracy %.4f is below %.4f\n", (double)correct / n, min_acc);
        return 1;
    }
    return 0;
}
