/*
 * jailbreak — offline quality of the jailbreak classifiers (src/models/guard.c):
 *
 *   OPENBLAS_NUM_THREADS=1 build/jailbreak_quality [DATA_DIR]
 *
 * DATA_DIR (default data/jailbreak) holds jailbreak_patterns.txt and
 * benign_patterns.txt (the contrastive method's exemplars), jailbreak.head
 * (the logistic head over USE-lite, trained on train.tsv), dev.tsv (the
 * split the hybrid's mapping is tuned on) and eval_attacks.txt /
 * eval_benign.txt (the evaluation set, used for nothing else).  The models
 * come from $VSR_MODEL_CACHE (default ~/.cache/vsr/models): llm_guardrail/
 * and use-lite.vsrm; without them it says so and exits 77.
 *
 * JAILBREAK_DEV_SPLIT=FILE.tsv JAILBREAK_DEV_HEAD=FILE.head (both or
 * neither; tools/models/jailbreak.sh sets them): a fifth of train.tsv held
 * out and a head trained on the other four fifths.  The split joins dev.tsv
 * for tuning, and every dev text is then scored with that head, so no dev
 * text was seen by the head that scores it.  Without them the dev texts
 * (dev.tsv only, not in train.tsv) are scored with jailbreak.head.
 *
 * Methods:
 *   classifier   max(p_jailbreak, p_prompt_injection), chunked (guard.h)
 *   contrastive  max cos(jailbreak patterns) - max cos(benign patterns), USE-lite
 *   head         p(jailbreak) of the head (src/models/head.h)
 *   lexical      p(jailbreak) of jailbreak_lexical.json (TF-IDF + logistic
 *                regression, guard.h's arithmetic); JAILBREAK_DEV_LEXICAL=FILE
 *                is its dev twin, trained on the four fifths
 *   hybrid       vsr_guard_with_head(head, vsr_guard_hybrid(classifier,
 *                contrastive, w, lo, hi), w_head); w_head/w/lo/hi chosen on
 *                the dev texts: the most dev attacks at threshold 0.7 with
 *                dev false positives <= 2%, then the best dev AUC, then the
 *                widest hi - lo.  "hybrid, no head" is the same with w_head 0.
 *                Then, over the compiled-in hybrid, the lexical weight and
 *                the operating point: the most dev attacks at the lowest
 *                threshold with dev false positives <= 2%, then the best AUC.
 *                "hybrid (compiled in)" is what the runtime computes:
 *                vsr_guard_calibrate(vsr_guard_with_lexical(lexical, hybrid,
 *                VSR_GUARD_LEXICAL_W), VSR_GUARD_OPERATING_POINT).
 * JAILBREAK_TEST=FILE.tsv (label TAB text, jailbreak / benign): a set from
 * another source (bench/quality/jailbreak_ref.sh writes the reference
 * router's e2e prompts there), scored once with the compiled-in hybrid and
 * the classifier after everything above is fixed: a sweep and the point at
 * 0.7.  Nothing is tuned on it.
 * Prints a threshold sweep (threshold, TPR, FPR, precision) per method, the
 * recall at FPR <= 2% (threshold just above the benign score ranked
 * floor(2% of benign)+1), the default-threshold (0.7) point, and the
 * latency p50/p99 of one call on one thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/guard.h"
#include "models/models.h"

#define MAX_TEXTS 4096

typedef struct {
    double wh, w, lo, hi, tpr, auc;
} tuned_t;

typedef struct {
    char *text[MAX_TEXTS];
    int label[MAX_TEXTS]; /* 1 = attack */
    size_t n;
} set_t;

static int read_lines(const char *path, set_t *s, int label, int tsv)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "jailbreak: %s: cannot open\n", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0 || line[0] == '#') continue;
        char *t = line;
        int l = label;
        if (tsv) {
            char *tab = strchr(line, '\t');
            if (!tab) continue;
            *tab = 0;
            l = strcmp(line, "jailbreak") == 0;
            t = tab + 1;
        }
        if (s->n == MAX_TEXTS) break;
        s->text[s->n] = strdup(t);
        s->label[s->n++] = l;
    }
    free(line);
    fclose(f);
    return 0;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double q)
{
    qsort(v, n, sizeof *v, cmp_d);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i];
}

static void point(const double *sc, const int *lab, size_t n, double t, double *tpr, double *fpr, double *prec)
{
    size_t tp = 0, fp = 0, P = 0, N = 0;
    for (size_t i = 0; i < n; i++) {
        if (lab[i]) { P++; tp += sc[i] >= t; }
        else { N++; fp += sc[i] >= t; }
    }
    *tpr = P ? (double)tp / P : 0;
    *fpr = N ? (double)fp / N : 0;
    *prec = tp + fp ? (double)tp / (tp + fp) : 1;
}

/* recall when at most floor(2% of benign) benign texts score at or above t */
static double recall_at_fpr(const double *sc, const int *lab, size_t n, double max_fpr, double *thr, double *fpr_out)
{
    double *b = malloc(n * sizeof *b);
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) if (!lab[i]) b[nb++] = sc[i];
    qsort(b, nb, sizeof *b, cmp_d); /* ascending */
    size_t k = (size_t)floor(max_fpr * (double)nb); /* allowed false positives */
    double t = nb > k ? nextafter(b[nb - 1 - k], INFINITY) : -INFINITY;
    free(b);
    double tpr, fpr, prec;
    point(sc, lab, n, t, &tpr, &fpr, &prec);
    *thr = t;
    *fpr_out = fpr;
    return tpr;
}

typedef struct {
    double s;
    int l;
} scored_t;

static int cmp_scored(const void *a, const void *b)
{
    double x = ((const scored_t *)a)->s, y = ((const scored_t *)b)->s;
    return (x > y) - (x < y);
}

/* the area under the ROC curve by ranks (ties count a half) */
static double auc_of(const double *sc, const int *lab, size_t n)
{
    scored_t *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (scored_t){sc[i], lab[i]};
    qsort(v, n, sizeof *v, cmp_scored);
    double below = 0, sum = 0, P = 0, N = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double tb = 0, tp = 0;
        while (j < n && v[j].s == v[i].s) { if (v[j].l) tp++; else tb++; j++; }
        sum += tp * (below + tb / 2);
        below += tb;
        P += tp;
        N += tb;
        i = j;
    }
    free(v);
    return P && N ? sum / (P * N) : 0;
}

static double mix(double head, double cls, double con, double wh, double w, double lo, double hi)
{
    return vsr_guard_with_head(head, vsr_guard_hybrid(cls, con, w, lo, hi), wh);
}

/* the grid search of the header comment over w_head in [wh_lo, wh_hi]; with
 * fixed, w/lo/hi stay the compiled-in VSR_GUARD_HYBRID_* (then only w_head is
 * searched, in steps of 0.05) */
static tuned_t tune(const set_t *dev, const double *head, const double *cls, const double *con, double wh_lo,
                    double wh_hi, int fixed)
{
    tuned_t best = {0, VSR_GUARD_HYBRID_W, VSR_GUARD_HYBRID_LO, VSR_GUARD_HYBRID_HI, -1, -1};
    double best_span = 0;
    static double h[MAX_TEXTS];
    for (double wh = wh_lo; wh <= wh_hi + 1e-9; wh += fixed ? 0.05 : 0.1) {
        for (double w = fixed ? VSR_GUARD_HYBRID_W : 0; w <= (fixed ? VSR_GUARD_HYBRID_W : 1) + 1e-9; w += 0.1) {
            for (double lo = fixed ? VSR_GUARD_HYBRID_LO : -0.2; lo <= (fixed ? VSR_GUARD_HYBRID_LO : 0.2) + 1e-9;
                 lo += 0.025) {
                double s_lo = fixed ? VSR_GUARD_HYBRID_HI - VSR_GUARD_HYBRID_LO : 0.05;
                double s_hi = fixed ? s_lo : 0.8;
                for (double span = s_lo; span <= s_hi + 1e-9; span += 0.025) {
                    double tpr, fpr, prec;
                    for (size_t i = 0; i < dev->n; i++) h[i] = mix(head[i], cls[i], con[i], wh, w, lo, lo + span);
                    point(h, dev->label, dev->n, 0.7, &tpr, &fpr, &prec);
                    if (fpr > 0.02 || tpr < best.tpr - 1e-12) continue;
                    double auc = auc_of(h, dev->label, dev->n);
                    if (tpr > best.tpr + 1e-12 || (auc > best.auc + 1e-12) ||
                        (fabs(auc - best.auc) < 1e-12 && span > best_span)) {
                        best = (tuned_t){wh, w, lo, lo + span, tpr, auc};
                        best_span = span;
                    }
                }
            }
        }
    }
    return best;
}

static void sweep(const char *name, const double *sc, const int *lab, size_t n, double lo, double hi, double step)
{
    printf("\n== %s: threshold sweep (eval set)\n%10s %7s %7s %9s\n", name, "threshold", "TPR", "FPR", "precision");
    for (double t = lo; t <= hi + 1e-9; t += step) {
        double tpr, fpr, prec;
        point(sc, lab, n, t, &tpr, &fpr, &prec);
        printf("%10.2f %7.3f %7.3f %9.3f\n", t, tpr, fpr, prec);
    }
    double thr, fpr;
    double r = recall_at_fpr(sc, lab, n, 0.02, &thr, &fpr);
    printf("%s: recall at FPR <= 2%%: %.3f (threshold %.4f, FPR %.3f)\n", name, r, thr, fpr);
}

int main(int argc, char **argv)
{
    const char *data = argc > 1 ? argv[1] : "data/jailbreak";
    char cache[3072], path[4096];
    const char *env = getenv("VSR_MODEL_CACHE");
    if (env) snprintf(cache, sizeof cache, "%s", env);
    else snprintf(cache, sizeof cache, "%s/.cache/vsr/models", getenv("HOME") ? getenv("HOME") : ".");

    vsr_guard_t g;
    snprintf(path, sizeof path, "%s/llm_guardrail", cache);
    if (vsr_guard_load_dir(path, &g) != VSR_OK) {
        fprintf(stderr, "jailbreak: no classifier package at %s (scripts/setup-deps fetches it): skipped\n", path);
        return 77;
    }
    vsr_use_model_t *use;
    snprintf(path, sizeof path, "%s/use-lite.vsrm", cache);
    if (vsr_use_load(path, &use) != VSR_OK) {
        fprintf(stderr, "jailbreak: no embedding model at %s (scripts/setup-deps makes it): skipped\n", path);
        vsr_guard_free(&g);
        return 77;
    }
    vsr_models_blas_threads(1);
    vsr_head_t *head = NULL, *dev_head = NULL;
    const char *split = getenv("JAILBREAK_DEV_SPLIT"), *dev_head_path = getenv("JAILBREAK_DEV_HEAD");
    snprintf(path, sizeof path, "%s/jailbreak.head", data);
    if (vsr_head_load(path, &head) != VSR_OK || vsr_head_dim(head) != VSR_USE_DIM ||
        vsr_head_label_index(head, "jailbreak") < 0) {
        fprintf(stderr, "jailbreak: %s: not a %d-d head with a \"jailbreak\" class\n", path, VSR_USE_DIM);
        return 1;
    }
    if ((split == NULL) != (dev_head_path == NULL)) {
        fprintf(stderr, "jailbreak: JAILBREAK_DEV_SPLIT and JAILBREAK_DEV_HEAD go together\n");
        return 2;
    }
    vsr_guard_lr_t *lex = NULL, *dev_lex = NULL;
    const char *dev_lex_path = getenv("JAILBREAK_DEV_LEXICAL");
    snprintf(path, sizeof path, "%s/jailbreak_lexical.json", data);
    if (vsr_guard_lr_load(path, &lex) != VSR_OK) {
        fprintf(stderr, "jailbreak: %s: not a lexical model\n", path);
        return 1;
    }
    if (dev_lex_path && vsr_guard_lr_load(dev_lex_path, &dev_lex) != VSR_OK) {
        fprintf(stderr, "jailbreak: %s: not a lexical model\n", dev_lex_path);
        return 1;
    }
    if (dev_head_path && (vsr_head_load(dev_head_path, &dev_head) != VSR_OK || vsr_head_dim(dev_head) != VSR_USE_DIM ||
                          vsr_head_label_index(dev_head, "jailbreak") < 0)) {
        fprintf(stderr, "jailbreak: %s: not a %d-d head with a \"jailbreak\" class\n", dev_head_path, VSR_USE_DIM);
        return 1;
    }

    static set_t jp, bp, dev, ev;
    snprintf(path, sizeof path, "%s/jailbreak_patterns.txt", data);
    if (read_lines(path, &jp, 1, 0)) return 1;
    snprintf(path, sizeof path, "%s/benign_patterns.txt", data);
    if (read_lines(path, &bp, 0, 0)) return 1;
    snprintf(path, sizeof path, "%s/dev.tsv", data);
    if (read_lines(path, &dev, 0, 1)) return 1;
    size_t n_dev_file = dev.n;
    if (split && read_lines(split, &dev, 0, 1)) return 1;
    snprintf(path, sizeof path, "%s/eval_attacks.txt", data);
    if (read_lines(path, &ev, 1, 0)) return 1;
    snprintf(path, sizeof path, "%s/eval_benign.txt", data);
    if (read_lines(path, &ev, 0, 0)) return 1;

    vsr_use_scratch_t *scr = vsr_use_scratch_new();
    float *jv = calloc(jp.n * VSR_USE_DIM, sizeof *jv), *bv = calloc(bp.n * VSR_USE_DIM, sizeof *bv);
    for (size_t i = 0; i < jp.n; i++) vsr_use_embed(use, jp.text[i], strlen(jp.text[i]), jv + i * VSR_USE_DIM, scr);
    for (size_t i = 0; i < bp.n; i++) vsr_use_embed(use, bp.text[i], strlen(bp.text[i]), bv + i * VSR_USE_DIM, scr);

    set_t *sets[2] = {&dev, &ev};
    static double cls[2][MAX_TEXTS], con[2][MAX_TEXTS], pj[2][MAX_TEXTS], pi[2][MAX_TEXTS], ph[2][MAX_TEXTS],
        pl[2][MAX_TEXTS];
    static double lat_cls[MAX_TEXTS], lat_con[MAX_TEXTS], lat_hyb[MAX_TEXTS];
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < sets[s]->n; i++) {
            const char *t = sets[s]->text[i];
            size_t len = strlen(t);
            float q[VSR_USE_DIM];
            double t0 = now_us();
            vsr_guard_score(&g, t, len, &pj[s][i], &pi[s][i]);
            double t1 = now_us();
            vsr_use_embed(use, t, len, q, scr);
            con[s][i] = vsr_guard_contrastive(q, jv, jp.n, bv, bp.n, VSR_USE_DIM);
            const vsr_head_t *hd = s == 0 && dev_head ? dev_head : head;
            float probs[VSR_HEAD_MAX_CLASSES];
            vsr_head_predict(hd, q, VSR_USE_DIM, probs);
            ph[s][i] = probs[vsr_head_label_index(hd, "jailbreak")];
            vsr_guard_lr_score_chunked(s == 0 && dev_lex ? dev_lex : lex, t, len, &pl[s][i], NULL);
            double t2 = now_us();
            cls[s][i] = fmax(pj[s][i], pi[s][i]);
            if (s == 1) {
                lat_cls[i] = t1 - t0;
                lat_con[i] = t2 - t1;
                lat_hyb[i] = t2 - t0;
            }
        }
    }

    /* the hybrid's weights and mapping, from dev only (tune()) */
    tuned_t tn = tune(&dev, ph[0], cls[0], con[0], 0, 0, 0), t = tune(&dev, ph[0], cls[0], con[0], 0, 1, 0);
    tuned_t tf = tune(&dev, ph[0], cls[0], con[0], 0, 1, 1);
    /* the lexical model's weight over the compiled-in hybrid with the head,
     * and the operating point, on dev: the most dev attacks at the lowest
     * threshold with dev FPR <= 2%, then the best AUC; that threshold is
     * VSR_GUARD_OPERATING_POINT, mapped to 0.7 (vsr_guard_calibrate) */
    double best_wl = 0, best_wl_tpr = -1, best_wl_auc = -1, best_wl_thr = 0.7;
    {
        static double h[MAX_TEXTS];
        for (double wl = 0; wl <= 1 + 1e-9; wl += 0.05) {
            for (size_t i = 0; i < dev.n; i++)
                h[i] = vsr_guard_with_lexical(pl[0][i],
                                              mix(ph[0][i], cls[0][i], con[0][i], VSR_GUARD_HEAD_W, VSR_GUARD_HEAD_MIX_W,
                                                  VSR_GUARD_HEAD_MIX_LO, VSR_GUARD_HEAD_MIX_HI),
                                              wl);
            double tpr, fpr, prec;
            point(h, dev.label, dev.n, 0.7, &tpr, &fpr, &prec);
            double auc = auc_of(h, dev.label, dev.n);
            double thr2, fpr2, r2 = recall_at_fpr(h, dev.label, dev.n, 0.02, &thr2, &fpr2);
            printf("lexical weight %.2f: dev TPR at 0.7 %.3f FPR %.3f AUC %.4f; at dev FPR <= 2%%: TPR %.3f "
                   "(threshold %.4f)\n",
                   wl, tpr, fpr, auc, r2, thr2);
            if (r2 > best_wl_tpr + 1e-12 || (r2 > best_wl_tpr - 1e-12 && auc > best_wl_auc + 1e-12)) {
                best_wl = wl;
                best_wl_tpr = r2;
                best_wl_auc = auc;
                best_wl_thr = thr2;
            }
        }
    }
    static double hyb[MAX_TEXTS], hyb0[MAX_TEXTS], hyb_c[MAX_TEXTS];
    for (size_t i = 0; i < ev.n; i++) {
        hyb[i] = mix(ph[1][i], cls[1][i], con[1][i], t.wh, t.w, t.lo, t.hi);
        hyb0[i] = mix(ph[1][i], cls[1][i], con[1][i], 0, tn.w, tn.lo, tn.hi);
        hyb_c[i] = vsr_guard_calibrate(
            vsr_guard_with_lexical(pl[1][i],
                                   mix(ph[1][i], cls[1][i], con[1][i], VSR_GUARD_HEAD_W, VSR_GUARD_HEAD_MIX_W,
                                       VSR_GUARD_HEAD_MIX_LO, VSR_GUARD_HEAD_MIX_HI),
                                   VSR_GUARD_LEXICAL_W),
            VSR_GUARD_OPERATING_POINT);
    }

    size_t P = 0;
    for (size_t i = 0; i < ev.n; i++) P += ev.label[i];
    printf("jailbreak quality: %zu attacks, %zu benign (eval); patterns %zu jailbreak, %zu benign; dev %zu\n", P,
           ev.n - P, jp.n, bp.n, dev.n);
    printf("dev: %zu texts (dev.tsv %zu, held-out split of train.tsv %zu, scored by %s)\n", dev.n, n_dev_file,
           dev.n - n_dev_file, dev_head ? "the head trained without them" : "jailbreak.head");
    printf("hybrid tuned on dev: w_head %.2f w %.2f lo %.3f hi %.3f (dev TPR at 0.7: %.3f, dev AUC %.4f)\n", t.wh, t.w,
           t.lo, t.hi, t.tpr, t.auc);
    printf("hybrid without the head, tuned on dev: w %.2f lo %.3f hi %.3f (dev TPR at 0.7: %.3f, dev AUC %.4f)\n", tn.w,
           tn.lo, tn.hi, tn.tpr, tn.auc);
    printf("w_head alone tuned on dev, w/lo/hi as compiled in: w_head %.2f (dev TPR at 0.7: %.3f, dev AUC %.4f)\n",
           tf.wh, tf.tpr, tf.auc);
    printf("compiled in (guard.h): w_head %.2f w %.2f lo %.3f hi %.3f w_lexical %.2f\n", VSR_GUARD_HEAD_W,
           VSR_GUARD_HEAD_MIX_W, VSR_GUARD_HEAD_MIX_LO, VSR_GUARD_HEAD_MIX_HI, VSR_GUARD_LEXICAL_W);
    printf("lexical weight tuned on dev over the compiled-in hybrid: w_lexical %.2f, operating point %.4f (dev TPR "
           "there: %.3f, dev AUC %.4f); compiled in: %.2f, %.4f\n",
           best_wl, best_wl_thr, best_wl_tpr, best_wl_auc, VSR_GUARD_LEXICAL_W, VSR_GUARD_OPERATING_POINT);

    sweep("classifier (max of both models)", cls[1], ev.label, ev.n, 0.05, 0.95, 0.05);
    sweep("classifier: jailbreak model only", pj[1], ev.label, ev.n, 0.1, 0.9, 0.1);
    sweep("classifier: prompt-injection model only", pi[1], ev.label, ev.n, 0.1, 0.9, 0.1);
    sweep("contrastive", con[1], ev.label, ev.n, -0.2, 0.4, 0.05);
    sweep("head", ph[1], ev.label, ev.n, 0.05, 0.95, 0.05);
    sweep("lexical", pl[1], ev.label, ev.n, 0.05, 0.95, 0.05);
    sweep("hybrid, no head (tuned on dev)", hyb0, ev.label, ev.n, 0.05, 0.95, 0.05);
    sweep("hybrid (tuned on dev)", hyb, ev.label, ev.n, 0.05, 0.95, 0.05);
    sweep("hybrid (compiled in)", hyb_c, ev.label, ev.n, 0.05, 0.95, 0.05);

    printf("\n== at the default threshold 0.7\n");
    const char *names[] = {"classifier", "head", "hybrid, no head", "hybrid", "hybrid (compiled in)"};
    const double *scs[] = {cls[1], ph[1], hyb0, hyb, hyb_c};
    for (int k = 0; k < 5; k++) {
        double tpr, fpr, prec;
        point(scs[k], ev.label, ev.n, 0.7, &tpr, &fpr, &prec);
        printf("%-20s TPR %.3f FPR %.3f precision %.3f\n", names[k], tpr, fpr, prec);
    }
    const char *test_path = getenv("JAILBREAK_TEST");
    if (test_path) {
        static set_t ts;
        if (read_lines(test_path, &ts, 0, 1)) return 1;
        static double tc[MAX_TEXTS], th[MAX_TEXTS];
        size_t tp_n = 0;
        for (size_t i = 0; i < ts.n; i++) {
            const char *txt = ts.text[i];
            size_t len = strlen(txt);
            float q[VSR_USE_DIM], probs[VSR_HEAD_MAX_CLASSES];
            double a, b;
            vsr_guard_score(&g, txt, len, &a, &b);
            vsr_use_embed(use, txt, len, q, scr);
            vsr_head_predict(head, q, VSR_USE_DIM, probs);
            tc[i] = fmax(a, b);
            double p_lex;
            vsr_guard_lr_score_chunked(lex, txt, len, &p_lex, NULL);
            th[i] = vsr_guard_calibrate(
                vsr_guard_with_lexical(p_lex,
                                       mix(probs[vsr_head_label_index(head, "jailbreak")], tc[i],
                                           vsr_guard_contrastive(q, jv, jp.n, bv, bp.n, VSR_USE_DIM),
                                           VSR_GUARD_HEAD_W, VSR_GUARD_HEAD_MIX_W, VSR_GUARD_HEAD_MIX_LO,
                                           VSR_GUARD_HEAD_MIX_HI),
                                       VSR_GUARD_LEXICAL_W),
                VSR_GUARD_OPERATING_POINT);
            tp_n += ts.label[i];
            if (getenv("JAILBREAK_DUMP"))
                printf("test\t%d\t%.3f\t%.3f\t%s\n", ts.label[i], tc[i], th[i], txt);
        }
        printf("\n== test set %s: %zu attacks, %zu benign (scored once, nothing tuned on it)\n", test_path, tp_n,
               ts.n - tp_n);
        const char *tn_names[] = {"classifier", "hybrid (compiled in)"};
        const double *tsc[] = {tc, th};
        for (int k = 0; k < 2; k++) {
            double tpr, fpr, prec, thr, f2;
            point(tsc[k], ts.label, ts.n, 0.7, &tpr, &fpr, &prec);
            double r = recall_at_fpr(tsc[k], ts.label, ts.n, 0.02, &thr, &f2);
            printf("test %-22s at 0.7: TPR %.3f FPR %.3f precision %.3f; AUC %.4f; recall at FPR <= 2%% %.3f "
                   "(threshold %.4f)\n",
                   tn_names[k], tpr, fpr, prec, auc_of(tsc[k], ts.label, ts.n), r, thr);
            for (double x = 0.3; x <= 0.951; x += 0.05) {
                point(tsc[k], ts.label, ts.n, x, &tpr, &fpr, &prec);
                printf("test %-22s %.2f TPR %.3f FPR %.3f\n", tn_names[k], x, tpr, fpr);
            }
        }
        for (size_t i = 0; i < ts.n; i++) free(ts.text[i]);
    }
    if (getenv("JAILBREAK_DUMP")) {
        for (size_t i = 0; i < ev.n; i++)
            printf("dump\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\n", ev.label[i], pj[1][i], pi[1][i], con[1][i], ph[1][i],
                   hyb_c[i], ev.text[i]);
    }
    printf("\n== latency per call, one thread, eval texts (us): p50 / p99\n");
    printf("classifier  %8.1f / %8.1f\n", pct(lat_cls, ev.n, 0.5), pct(lat_cls, ev.n, 0.99));
    printf("contrastive %8.1f / %8.1f (embedding + %zu+%zu cosines + the head)\n", pct(lat_con, ev.n, 0.5),
           pct(lat_con, ev.n, 0.99), jp.n, bp.n);
    printf("hybrid      %8.1f / %8.1f\n", pct(lat_hyb, ev.n, 0.5), pct(lat_hyb, ev.n, 0.99));

    /* long texts: every evaluation text joined, cut at 4 KiB, 64 KiB, 1 MiB */
    {
        size_t cap = 1u << 20, len = 0;
        char *big = malloc(cap);
        while (len < cap) {
            for (size_t i = 0; i < ev.n && len < cap; i++) {
                size_t n = VSR_MIN(strlen(ev.text[i]), cap - len - 1);
                memcpy(big + len, ev.text[i], n);
                len += n;
                big[len++] = ' ';
            }
        }
        static const size_t sizes[] = {4096, 65536, 1u << 20};
        for (size_t k = 0; k < 3; k++) {
            double lat[20], pjl, pil;
            size_t w = 0;
            for (int r = 0; r < 20; r++) {
                double t0 = now_us();
                vsr_guard_score(&g, big, sizes[k], &pjl, &pil);
                lat[r] = now_us() - t0;
            }
            vsr_guard_lr_score_chunked(g.jailbreak, big, sizes[k], &pjl, &w);
            printf("classifier on %7zu bytes (%zu windows) %10.1f / %10.1f\n", sizes[k], w, pct(lat, 20, 0.5),
                   pct(lat, 20, 0.99));
        }
        free(big);
    }

    for (size_t i = 0; i < jp.n; i++) free(jp.text[i]);
    for (size_t i = 0; i < bp.n; i++) free(bp.text[i]);
    for (size_t i = 0; i < dev.n; i++) free(dev.text[i]);
    for (size_t i = 0; i < ev.n; i++) free(ev.text[i]);
    free(jv);
    free(bv);
    vsr_use_scratch_free(scr);
    vsr_use_free(use);
    vsr_guard_free(&g);
    vsr_head_free(head);
    vsr_head_free(dev_head);
    vsr_guard_lr_free(lex);
    vsr_guard_lr_free(dev_lex);
    return 0;
}
