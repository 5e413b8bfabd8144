/*
 * pii_eval — quality and latency of the PII detector (src/models/pii.c) on
 * an evaluation set (data/pii/eval.jsonl: one {"text", "entities": [{"type",
 * "start", "end"}]} a line, byte offsets).
 *
 * Entity level: a detected entity is a true positive when it has the type
 * of a labelled entity not yet matched and their spans overlap by at least
 * half of the shorter one; every other detection is a false positive and
 * every unmatched label a false negative.  Text level: a text is flagged
 * when it has at least one detection; recall over the texts with labels, the
 * false-positive rate over the texts without.  Printed: per-type
 * precision/recall/F1 at the chosen threshold, a sweep of the threshold,
 * and the latency of one vsr_pii_detect() per text (p50/p99 over every text,
 * best of ITER passes each) and on the whole set joined into one text.
 * With -v, every miss and false alarm.
 *
 *   build/pii_eval [-v] [-t THRESHOLD] [-n ITER] [data/pii/eval.jsonl]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json/json.h"
#include "models/pii.h"

#define MAX_ENT 64

typedef struct {
    char *text;
    size_t len;
    size_t n;
    vsr_pii_type_t type[MAX_ENT];
    size_t start[MAX_ENT], end[MAX_ENT];
} item_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

_Noreturn static void die(const char *what, size_t line)
{
    fprintf(stderr, "pii_eval: line %zu: %s\n", line, what);
    exit(2);
}

static size_t load(const char *path, item_t **out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t n = 0, cap = 0, lineno = 0;
    item_t *items = NULL;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    while ((got = getline(&line, &lcap, f)) > 0) {
        lineno++;
        vsr_json_t j;
        if (vsr_json_parse(&j, line, (size_t)got, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT)
            die("not a JSON object", lineno);
        if (n == cap) {
            cap = cap ? 2 * cap : 512;
            items = realloc(items, cap * sizeof *items);
            if (!items)
                exit(3);
        }
        item_t *it = &items[n++];
        memset(it, 0, sizeof *it);
        uint32_t t, ents;
        vsr_slice_t s;
        if (vsr_json_object_get(&j, 0, "text", &t) != VSR_OK || vsr_json_string(&j, t, &pool, &s) != VSR_OK)
            die("no text", lineno);
        it->text = malloc(s.len + 1);
        memcpy(it->text, s.p, s.len);
        it->text[s.len] = 0;
        it->len = s.len;
        if (vsr_json_object_get(&j, 0, "entities", &ents) != VSR_OK || vsr_json_type(&j, ents) != VSR_JSON_ARRAY)
            die("no entities", lineno);
        for (uint32_t c = ents + 1, k = 0; k < j.toks[ents].count; k++, c = j.toks[c].next) {
            uint32_t ty, st, en;
            double a = 0, b = 0;
            if (it->n == MAX_ENT)
                die("too many entities", lineno);
            if (vsr_json_object_get(&j, c, "type", &ty) != VSR_OK || vsr_json_string(&j, ty, &pool, &s) != VSR_OK ||
                vsr_pii_type_parse(s.p, s.len, &it->type[it->n]) != VSR_OK)
                die("bad entity type", lineno);
            if (vsr_json_object_get(&j, c, "start", &st) != VSR_OK || vsr_json_number(&j, st, &a) != VSR_OK ||
                vsr_json_object_get(&j, c, "end", &en) != VSR_OK || vsr_json_number(&j, en, &b) != VSR_OK ||
                a < 0 || b <= a || b > (double)it->len)
                die("bad entity span", lineno);
            it->start[it->n] = (size_t)a;
            it->end[it->n] = (size_t)b;
            it->n++;
        }
        vsr_json_free(&j);
        vsr_pool_clear(&pool);
    }
    vsr_pool_free(&pool);
    free(line);
    fclose(f);
    *out = items;
    return n;
}

typedef struct {
    long tp[VSR_PII_N_TYPES], fp[VSR_PII_N_TYPES], fn[VSR_PII_N_TYPES];
    long text_tp, text_pos, text_fp, text_neg;
} score_t;

static int overlaps(size_t a0, size_t a1, size_t b0, size_t b1)
{
    size_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    size_t shorter = (a1 - a0) < (b1 - b0) ? a1 - a0 : b1 - b0;
    return hi > lo && 2 * (hi - lo) >= shorter;
}

static void evaluate(const item_t *items, size_t n, float thr, score_t *sc, int verbose)
{
    memset(sc, 0, sizeof *sc);
    for (size_t i = 0; i < n; i++) {
        const item_t *it = &items[i];
        vsr_pii_entity_t e[VSR_PII_MAX_ENTITIES];
        size_t ne = 0;
        vsr_pii_detect(it->text, it->len, thr, e, VSR_PII_MAX_ENTITIES, &ne, NULL);
        int used[MAX_ENT] = {0};
        for (size_t k = 0; k < ne; k++) {
            int hit = 0;
            for (size_t g = 0; g < it->n && !hit; g++)
                if (!used[g] && it->type[g] == e[k].type && overlaps(e[k].start, e[k].end, it->start[g], it->end[g]))
                    used[g] = hit = 1;
            if (hit) {
                sc->tp[e[k].type]++;
            } else {
                sc->fp[e[k].type]++;
                if (verbose)
                    printf("FP  %-15s %.2f [%.*s]  in: %s\n", vsr_pii_type_name(e[k].type), e[k].score,
                           (int)(e[k].end - e[k].start), it->text + e[k].start, it->text);
            }
        }
        for (size_t g = 0; g < it->n; g++)
            if (!used[g]) {
                sc->fn[it->type[g]]++;
                if (verbose)
                    printf("FN  %-15s      [%.*s]  in: %s\n", vsr_pii_type_name(it->type[g]),
                           (int)(it->end[g] - it->start[g]), it->text + it->start[g], it->text);
            }
        if (it->n) {
            sc->text_pos++;
            sc->text_tp += ne > 0;
        } else {
            sc->text_neg++;
            sc->text_fp += ne > 0;
        }
    }
}

static void prf(long tp, long fp, long fn, double *p, double *r, double *f)
{
    *p = tp + fp ? (double)tp / (double)(tp + fp) : 1.0;
    *r = tp + fn ? (double)tp / (double)(tp + fn) : 1.0;
    *f = *p + *r > 0 ? 2 * *p * *r / (*p + *r) : 0;
}

int main(int argc, char **argv)
{
    const char *path = "data/pii/eval.jsonl";
    float thr = VSR_PII_DEFAULT_THRESHOLD;
    int verbose = 0, iters = 20;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-v"))
            verbose = 1;
        else if (!strcmp(argv[a], "-t") && a + 1 < argc)
            thr = (float)atof(argv[++a]);
        else if (!strcmp(argv[a], "-n") && a + 1 < argc)
            iters = atoi(argv[++a]);
        else
            path = argv[a];
    }
    if (iters < 1)
        iters = 1;
    item_t *items;
    size_t n = load(path, &items);
    score_t sc;
    evaluate(items, n, thr, &sc, verbose);
    long tot = 0;
    for (int t = 0; t < VSR_PII_N_TYPES; t++)
        tot += sc.tp[t] + sc.fn[t];
    printf("%s: %zu texts (%ld with personal data, %ld without), %ld labelled entities; threshold %.2f\n\n", path,
           n, sc.text_pos, sc.text_neg, tot, thr);
    printf("%-15s %6s %6s %6s %5s %5s %5s\n", "type", "prec", "recall", "F1", "tp", "fp", "fn");
    long TP = 0, FP = 0, FN = 0;
    for (int t = 0; t < VSR_PII_N_TYPES; t++) {
        double p, r, f;
        prf(sc.tp[t], sc.fp[t], sc.fn[t], &p, &r, &f);
        if (sc.tp[t] + sc.fp[t] + sc.fn[t])
            printf("%-15s %6.3f %6.3f %6.3f %5ld %5ld %5ld\n", vsr_pii_type_name((vsr_pii_type_t)t), p, r, f,
                   sc.tp[t], sc.fp[t], sc.fn[t]);
        TP += sc.tp[t];
        FP += sc.fp[t];
        FN += sc.fn[t];
    }
    double p, r, f;
    prf(TP, FP, FN, &p, &r, &f);
    printf("%-15s %6.3f %6.3f %6.3f %5ld %5ld %5ld\n", "all (micro)", p, r, f, TP, FP, FN);
    printf("\ntexts: recall %.3f (%ld/%ld), false-positive rate %.3f (%ld/%ld)\n\n",
           (double)sc.text_tp / (double)(sc.text_pos ? sc.text_pos : 1), sc.text_tp, sc.text_pos,
           (double)sc.text_fp / (double)(sc.text_neg ? sc.text_neg : 1), sc.text_fp, sc.text_neg);
    printf("threshold sweep\n%5s %6s %6s %6s %11s %8s\n", "thr", "prec", "recall", "F1", "text-recall", "text-FPR");
    for (int k = 1; k <= 9; k++) {
        score_t s2;
        evaluate(items, n, (float)k / 10, &s2, 0);
        long a = 0, b = 0, c = 0;
        for (int t = 0; t < VSR_PII_N_TYPES; t++) {
            a += s2.tp[t];
            b += s2.fp[t];
            c += s2.fn[t];
        }
        prf(a, b, c, &p, &r, &f);
        printf("%5.2f %6.3f %6.3f %6.3f %11.3f %8.3f\n", (double)k / 10, p, r, f,
               (double)s2.text_tp / (double)(s2.text_pos ? s2.text_pos : 1),
               (double)s2.text_fp / (double)(s2.text_neg ? s2.text_neg : 1));
    }
    double *lat = malloc(n * sizeof *lat);
    double total_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        double best = 1e18;
        for (int k = 0; k < iters; k++) {
            vsr_pii_entity_t e[VSR_PII_MAX_ENTITIES];
            size_t ne;
            double t0 = now_us();
            vsr_pii_detect(items[i].text, items[i].len, thr, e, VSR_PII_MAX_ENTITIES, &ne, NULL);
            double dt = now_us() - t0;
            if (dt < best)
                best = dt;
        }
        lat[i] = best;
        total_bytes += (double)items[i].len;
    }
    qsort(lat, n, sizeof *lat, cmp_d);
    printf("\nlatency per text (%.0f bytes on average, best of %d): p50 %.1f us  p99 %.1f us  max %.1f us\n",
           total_bytes / (double)(n ? n : 1), iters, lat[n / 2], lat[(n * 99) / 100], lat[n - 1]);
    /* throughput on one long text: every text of the set joined by newlines */
    char *all = malloc((size_t)total_bytes + n + 1);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(all + off, items[i].text, items[i].len);
        off += items[i].len;
        all[off++] = '\n';
    }
    static vsr_pii_entity_t many[4096];
    double best = 1e18;
    size_t ne = 0;
    for (int k = 0; k < iters; k++) {
        double t0 = now_us();
        vsr_pii_detect(all, off, thr, many, 4096, &ne, NULL);
        double dt = now_us() - t0;
        if (dt < best)
            best = dt;
    }
    printf("one text of %zu bytes (the set joined): %.1f us, %.1f MB/s, %zu entities\n", off, best,
           (double)off / best, ne);
    free(all);
    for (size_t i = 0; i < n; i++)
        free(items[i].text);
    free(items);
    free(lat);
    return 0;
}
