/*
 * config_bench.c — what an activation costs for a large document: a v0.3
 * document of N models (each with a backend, a secret and a reliability
 * layer) and one keyword decision per model, applied through the
 * management pipeline (vsr_admin_apply: parse, vet, canonical form and
 * hash, load and validate, compile; no warm hook), forced to a new
 * version every time.  Then the document steps alone, two ways: the
 * string functions, each of which parses the bytes itself (vet, canonical
 * form, load: three parses), and one parse whose tree the same three steps
 * read.  Prints the median ms of each and the parser runs per apply.
 *
 *   build/config_bench [models] [iterations]     (300, 20)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin/admin.h"
#include "config/config.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static void document(vsr_buf_t *b, int models)
{
    vsr_buf_append_cstr(b, "version: v0.3\n"
                           "listeners:\n"
                           "  - {name: l1, address: 127.0.0.1, port: 18899, api_keys: [k1]}\n"
                           "providers:\n"
                           "  models:\n");
    for (int i = 0; i < models; i++)
        vsr_buf_printf(b,
                       "    - name: model-%d\n"
                       "      provider_model_id: provider-model-%d\n"
                       "      backend_refs:\n"
                       "        - {endpoint: '127.0.0.1:%d', api_key: sk-secret-%d}\n"
                       "      reliability:\n"
                       "        retry_count: 2\n"
                       "        retry_on: '5xx,reset,connect-failure'\n"
                       "        per_try_timeout: 5s\n"
                       "        retriable_status_codes: [429, 503]\n",
                       i, i, 10000 + i, i);
    vsr_buf_append_cstr(b, "routing:\n  signals:\n    keywords:\n");
    for (int i = 0; i < models; i++)
        vsr_buf_printf(b, "      - {name: kw-%d, keywords: [word%da, word%db]}\n", i, i, i);
    vsr_buf_append_cstr(b, "  decisions:\n");
    for (int i = 0; i < models; i++)
        vsr_buf_printf(b, "    - {name: d-%d, rules: {type: keyword, name: kw-%d}, modelRefs: [{model: model-%d}]}\n",
                       i, i, i);
}

int main(int argc, char **argv)
{
    int models = argc > 1 ? atoi(argv[1]) : 300;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    if (models < 1 || iters < 1 || iters > 10000)
        return 2;
    vsr_log_min_level = VSR_LOG_WARN; /* no line per activation */
    vsr_buf_t doc, err;
    vsr_buf_init(&doc, 0);
    vsr_buf_init(&err, 0);
    document(&doc, models);

    vsr_admin_hooks_t hooks = {0};
    vsr_admin_opts_t opts = {0};
    vsr_admin_t *a = vsr_admin_new(&hooks, &opts, &err);
    if (a == NULL) {
        fprintf(stderr, "%.*s", (int)err.len, err.data);
        return 1;
    }
    double *apply = calloc((size_t)iters, sizeof(double));
    double *three = calloc((size_t)iters, sizeof(double));
    double *one = calloc((size_t)iters, sizeof(double));
    unsigned long runs0 = vsr_config_parse_runs();
    for (int i = 0; i <= iters; i++) { /* the first, unmeasured, makes the version the others replace */
        vsr_admin_result_t res;
        double t0 = now_ms();
        int rc = vsr_admin_apply(a, "request", doc.data, doc.len, "api", VSR_ADMIN_FORCE, &res);
        double t1 = now_ms();
        if (rc != VSR_OK) {
            fprintf(stderr, "apply failed: %.*s", (int)res.errors.len, res.errors.data);
            return 1;
        }
        vsr_admin_result_free(&res);
        if (i > 0)
            apply[i - 1] = t1 - t0;
    }
    double runs_per_apply = (double)(vsr_config_parse_runs() - runs0) / (iters + 1);

    vsr_config_vet_t vet = {.env_check = 1};
    for (int i = 0; i < iters; i++) {
        vsr_buf_t resolved, canon;
        vsr_buf_init(&resolved, 0);
        vsr_buf_init(&canon, 0);
        vsr_config_t *c = NULL;
        double t0 = now_ms();
        int rc = vsr_config_vet("request", doc.data, doc.len, &vet, &resolved, &err);
        rc |= vsr_config_canonical("request", doc.data, doc.len, &canon, &err);
        rc |= vsr_config_load_string("request", doc.data, doc.len, &c, &err);
        three[i] = now_ms() - t0;
        if (rc != VSR_OK)
            return 1;
        vsr_config_free(c);
        vsr_buf_free(&resolved);
        vsr_buf_free(&canon);

        vsr_buf_init(&canon, 0);
        t0 = now_ms();
        vsr_config_doc_t *d = vsr_config_doc_parse("request", doc.data, doc.len);
        rc = vsr_config_doc_vet(d, &vet, &err);
        rc |= vsr_config_doc_canonical(d, &canon, &err);
        rc |= vsr_config_doc_load(d, &c, &err);
        vsr_config_doc_free(d);
        one[i] = now_ms() - t0;
        if (rc != VSR_OK)
            return 1;
        vsr_config_free(c);
        vsr_buf_free(&canon);
    }
    printf("document: %d models, %zu bytes; %d iterations, medians\n", models, doc.len, iters);
    printf("  management apply (vsr_admin_apply, forced)  %8.2f ms   %.1f parser runs per apply\n",
           median(apply, iters), runs_per_apply);
    printf("  vet + canonical + load, a parse each        %8.2f ms\n", median(three, iters));
    printf("  vet + canonical + load, one parse           %8.2f ms\n", median(one, iters));
    vsr_admin_free(a);
    free(apply);
    free(three);
    free(one);
    vsr_buf_free(&doc);
    vsr_buf_free(&err);
    return 0;
}
