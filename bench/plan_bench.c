/*
 * plan_bench.c — the routing core alone: a session's request phases (JSON
 * view, model resolution, every referenced signal, the decision, plugins,
 * the body rewrite) for a 4 KB and a 64 KB prompt against a recipe of 20
 * keyword signals and 10 decisions, with 10 and with 100 keywords per
 * signal; and for bench/run's 64 KB request: its English filler against
 * bench/config.yaml's 6 keywords, whose first letters are frequent in it.
 * Prints ns and heap allocations per request.  Last, the response cache's
 * exact key of a chat request (a system prompt, three turns, sampling
 * fields, eight client header fields): ns per key.
 *
 * With `selectors`: the decision time of each single-call selector (static,
 * latency_aware, multi_factor) over 3 and 8 candidates with live statistics:
 * p50 and p99 ns of the selector alone and of a whole request phase.
 *
 *   build/plan_bench [iterations] [english|cachekey|selectors]   (that row only)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "routing/routing-int.h"

/* allocation counting through the linker's --wrap */
void *__real_malloc(size_t n);
void *__real_calloc(size_t c, size_t n);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t c, size_t n);
void *__wrap_realloc(void *p, size_t n);
static unsigned long allocs;
void *__wrap_malloc(size_t n)
{
    allocs++;
    return __real_malloc(n);
}
void *__wrap_calloc(size_t c, size_t n)
{
    allocs++;
    return __real_calloc(c, n);
}
void *__wrap_realloc(void *p, size_t n)
{
    allocs++;
    return __real_realloc(p, n);
}

static const char *WORDS[] = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
                              "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
                              "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"};

static char *make_config(int kw_per_signal)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "version: v0.3\nlisteners:\n  - {name: l, address: 127.0.0.1, port: 18000}\n"
                            "providers:\n  defaults: {model: m0}\n  models:\n");
    for (int m = 0; m < 3; m++)
        vsr_buf_printf(&b, "    - {name: m%d, provider_model_id: m%d-up, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n", m, m);
    vsr_buf_append_cstr(&b, "routing:\n  signals:\n    keywords:\n");
    for (int s = 0; s < 20; s++) {
        vsr_buf_printf(&b, "      - name: sig%d\n        operator: OR\n        keywords: [", s);
        for (int k = 0; k < kw_per_signal; k++)
            vsr_buf_printf(&b, "%s\"kw%dx%d%s\"", k ? ", " : "", s, k, WORDS[k % 26]);
        vsr_buf_append_cstr(&b, "]\n");
    }
    vsr_buf_append_cstr(&b, "  decisions:\n");
    for (int d = 0; d < 10; d++)
        vsr_buf_printf(&b,
                       "    - name: dec%d\n      priority: %d\n      rules: {operator: OR, conditions: "
                       "[{type: keyword, name: sig%d}, {type: keyword, name: sig%d}]}\n"
                       "      modelRefs: [{model: m%d}]\n",
                       d, d, 2 * d, 2 * d + 1, d % 3);
    vsr_buf_append_cstr(&b, "global:\n  services:\n    management_api: {port: 18001}\n");
    return b.data;
}

/* bench/config.yaml's keyword signals and bench/run's filler */
static const char ENGLISH_DOC[] =
    "version: v0.3\nlisteners:\n  - {name: l, address: 127.0.0.1, port: 18000}\n"
    "providers:\n  defaults: {model: m0}\n  models:\n"
    "    - {name: m0, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "    - {name: m1, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n"
    "routing:\n  signals:\n    keywords:\n"
    "      - {name: code_keywords, operator: OR, keywords: [\"python\", \"golang\", \"compile\", \"function\"]}\n"
    "      - {name: urgent_keywords, operator: OR, keywords: [\"urgent\", \"asap\"]}\n"
    "  decisions:\n"
    "    - {name: code, priority: 2, rules: {operator: OR, conditions: [{type: keyword, name: code_keywords}]},"
    " modelRefs: [{model: m1}]}\n"
    "    - {name: urgent, priority: 1, rules: {operator: OR, conditions: [{type: keyword, name: urgent_keywords}]},"
    " modelRefs: [{model: m1}]}\n"
    "global:\n  services:\n    management_api: {port: 18001}\n";
static const char FILLER[] =
    "The quiet river runs past the old stone mill near the village, and the miller counts the sacks. ";

static char *make_body(size_t prompt_bytes, int english)
{
    vsr_buf_t p;
    vsr_buf_init(&p, 0);
    size_t i = 0;
    while (p.len < prompt_bytes) {
        if (english)
            vsr_buf_append_cstr(&p, FILLER);
        else
            vsr_buf_printf(&p, "%s ", WORDS[i++ % 26]);
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                            "{\"role\":\"user\",\"content\":\"");
    vsr_buf_append_slice(&b, vsr_buf_slice(&p));
    vsr_buf_append_cstr(&b, " kw19x3delta\"}],\"temperature\":0.2}");
    vsr_buf_free(&p);
    return b.data;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void run(vsr_engine_t *e, const vsr_config_t *cfg, size_t prompt, int iters, int kw)
{
    char *body = make_body(prompt, kw == 0);
    size_t len = strlen(body);
    vsr_session_opts_t o = {.listener = &cfg->listeners[0]};
    const char *decision = "-";
    for (int i = 0; i < iters / 10 + 1; i++) { /* warm-up */
        vsr_session_t *s = vsr_session_open(e, &o);
        vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), NULL, 0);
        vsr_session_request_body(s, body, len);
        decision = vsr_session_evidence(s)->decision ? "matched" : "none";
        vsr_session_finish(s);
    }
    unsigned long a0 = allocs;
    double t0 = now_ns();
    for (int i = 0; i < iters; i++) {
        vsr_session_t *s = vsr_session_open(e, &o);
        vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), NULL, 0);
        vsr_session_request_body(s, body, len);
        vsr_session_finish(s);
    }
    double ns = (now_ns() - t0) / iters;
    if (kw)
        printf("| %3d keywords/signal | %6zu B prompt |", kw, prompt);
    else
        printf("| bench/config.yaml   | %6zu B English |", prompt);
    printf(" %9.0f ns/request | %5.1f allocations/request | decision %s |\n", ns, (double)(allocs - a0) / iters,
           decision);
    free(body);
}

static const char CACHE_BODY[] =
    "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"You are a careful assistant for the "
    "billing team. Answer in two sentences.\"},{\"role\":\"user\",\"content\":\"How do I read my invoice?\"},"
    "{\"role\":\"assistant\",\"content\":\"The invoice lists each service, its usage and the total.\"},"
    "{\"role\":\"user\",\"content\":\"And where is the due date printed on it?\"}],\"temperature\":0.2,"
    "\"top_p\":0.9,\"max_tokens\":256,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
    "\"user\":\"u-1842\",\"seed\":7}";

static void run_cache_key(int iters)
{
    vsr_json_t j;
    if (vsr_json_parse(&j, CACHE_BODY, sizeof(CACHE_BODY) - 1, NULL) != VSR_OK) {
        fprintf(stderr, "cache key body does not parse\n");
        exit(1);
    }
    static const vsr_header_t hdrs[] = {
        {VSR_SLICE_LIT("content-type"), VSR_SLICE_LIT("application/json")},
        {VSR_SLICE_LIT("accept"), VSR_SLICE_LIT("text/event-stream")},
        {VSR_SLICE_LIT("user-agent"), VSR_SLICE_LIT("OpenAI/Python 1.54.0")},
        {VSR_SLICE_LIT("x-request-id"), VSR_SLICE_LIT("9b51b9e8-af0c-4e2d-8b3a-0c1f5e2d7a11")},
        {VSR_SLICE_LIT("x-stainless-lang"), VSR_SLICE_LIT("python")},
        {VSR_SLICE_LIT("x-stainless-retry-count"), VSR_SLICE_LIT("0")},
        {VSR_SLICE_LIT("openai-organization"), VSR_SLICE_LIT("org-billing")},
        {VSR_SLICE_LIT("accept-encoding"), VSR_SLICE_LIT("gzip, deflate")},
    };
    vsr_slice_t model = VSR_SLICE_LIT("auto"), scope = VSR_SLICE_LIT("k:3f9a0c1d2e4b5a6978"),
                partition = VSR_SLICE_LIT("d=billing|m=m1|e=|mr=|pr=|po=");
    char key[VSR_CONFIG_HASH_LEN], ctx[VSR_CONFIG_HASH_LEN];
    unsigned long a0 = 0;
    double t0 = 0;
    for (int i = 0; i < iters + iters / 10; i++) {
        if (i == iters / 10) { /* after the warm-up */
            a0 = allocs;
            t0 = now_ns();
        }
        vsr__rc_key(&j, 3, hdrs, VSR_ARRAY_LEN(hdrs), model, partition, scope, VSR_SLICE_NULL, key, ctx);
    }
    double ns = (now_ns() - t0) / iters;
    printf("| response cache key  | %6zu B body    | %9.0f ns/key     | %5.1f allocations/key     | %.15s |\n",
           sizeof(CACHE_BODY) - 1, ns, (double)(allocs - a0) / iters, key);
    vsr_json_free(&j);
}

/* ---- selectors ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static vsr_model_stats_t *bench_stats;
static const vsr_model_stats_t *bench_model_stats(void *ud)
{
    (void)ud;
    return bench_stats;
}

static void pcts(double *v, int n, double *p50, double *p99)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    *p50 = v[n / 2];
    *p99 = v[(int)((double)n * 0.99)];
}

static void run_selector(const char *algo, int n_models, int iters)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "version: v0.3\nlisteners:\n  - {name: l, address: 127.0.0.1, port: 18000}\n"
                            "providers:\n  defaults: {model: m0}\n  models:\n");
    for (int m = 0; m < n_models; m++)
        vsr_buf_printf(&b, "    - {name: m%d, backend_refs: [{endpoint: '127.0.0.1:1'}], "
                           "pricing: {prompt_per_1m: %d.5, completion_per_1m: %d}}\n", m, n_models - m, m + 1);
    vsr_buf_append_cstr(&b, "routing:\n  modelCards:\n");
    for (int m = 0; m < n_models; m++)
        vsr_buf_printf(&b, "    - {name: m%d, quality_score: 0.%d}\n", m, m + 1);
    vsr_buf_append_cstr(&b, "  decisions:\n    - name: pick\n      modelRefs: [");
    for (int m = 0; m < n_models; m++)
        vsr_buf_printf(&b, "%s{model: m%d}", m ? ", " : "", m);
    vsr_buf_printf(&b, "]\n      algorithm: %s\n", algo);
    vsr_config_t *cfg = NULL;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    if (vsr_config_load_string("bench.yaml", b.data, b.len, &cfg, &err) != VSR_OK) {
        fprintf(stderr, "%s", err.data);
        exit(1);
    }
    vsr_engine_t *e = vsr_engine_new(cfg, 1, &err);
    /* a full window of samples for each model: 1000 TTFTs and TPOTs */
    bench_stats = vsr_model_stats_new(4, 0);
    for (int m = 0; m < n_models; m++) {
        char name[16];
        int nl = snprintf(name, sizeof(name), "m%d", m);
        for (int i = 0; i < 1000; i++) {
            vsr_model_obs_t o = {.ttft_ms = 20.0 * (m + 1) + i % 50, .tpot_ms = 5.0 + m + (i % 7), .latency_ms = 900};
            vsr_model_stats_observe(bench_stats, (unsigned)i % 4, vsr_slice(name, (size_t)nl), &o);
        }
    }
    const vsr_decision_conf_t *d = &cfg->recipes[0].decisions[0];
    double *v = malloc(sizeof(double) * (size_t)iters);
    double sel50 = 0, sel99 = 0;
    vsr_pool_t pool;
    /* router_dc: fixed similarities, one per candidate (the embeddings are the runtime's cost) */
    double cosine[VSR_SELECT_MAX_CANDIDATES];
    unsigned char has[VSR_SELECT_MAX_CANDIDATES];
    for (int m = 0; m < n_models && m < VSR_SELECT_MAX_CANDIDATES; m++) {
        cosine[m] = 0.1 + 0.01 * m;
        has[m] = 1;
    }
    vsr__select_aux_t dc = {.cosine = cosine, .has = has, .n = (size_t)n_models, .ok = 1};
    if (vsr__select_is_selector(d)) {
        for (int i = 0; i < iters; i++) {
            vsr_pool_init(&pool);
            const vsr_selection_t *sel;
            double t0 = now_ns();
            vsr__select_run(cfg, d, bench_stats, &dc, &pool, &sel);
            v[i] = now_ns() - t0;
            vsr_pool_free(&pool);
        }
        pcts(v, iters, &sel50, &sel99);
    }
    static const vsr_ports_t ports = {.model_stats = bench_model_stats};
    vsr_session_opts_t o = {.listener = &cfg->listeners[0], .ports = &ports};
    static const char body[] = "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"pick a model\"}]}";
    const char *chosen = "-";
    for (int i = 0; i < iters; i++) {
        double t0 = now_ns();
        vsr_session_t *s = vsr_session_open(e, &o);
        vsr_session_request_headers(s, VSR_SLICE_LIT("POST"), VSR_SLICE_LIT("/v1/chat/completions"), NULL, 0);
        vsr_session_request_body(s, body, sizeof(body) - 1);
        v[i] = now_ns() - t0;
        chosen = vsr_session_evidence(s)->selected_model;
        vsr_session_finish(s);
    }
    double req50, req99;
    pcts(v, iters, &req50, &req99);
    char label[32], sp50[16] = "-", sp99[16] = "-";
    snprintf(label, sizeof(label), "%s", algo + strlen("{type: "));
    label[strcspn(label, ",}")] = '\0';
    if (vsr__select_is_selector(d)) {
        snprintf(sp50, sizeof(sp50), "%.0f", sel50);
        snprintf(sp99, sizeof(sp99), "%.0f", sel99);
    }
    printf("| %-13s | %d | %7s | %7s | %7.0f | %7.0f | %s |\n", label, n_models, sp50, sp99, req50, req99,
           chosen ? chosen : "-");
    free(v);
    vsr_model_stats_free(bench_stats);
    vsr_engine_unref(e);
    vsr_config_free(cfg);
    vsr_buf_free(&err);
    vsr_buf_free(&b);
}

static void run_selectors(int iters)
{
    static const char *const algos[] = {
        "{type: static}",
        "{type: latency_aware, latency_aware: {ttft_percentile: 95, tpot_percentile: 90}}",
        "{type: multi_factor, multi_factor: {slo: {max_ttft_ms: 120}}}",
        "{type: router_dc}",
    };
    printf("latency_aware: ttft_percentile 95, tpot_percentile 90; multi_factor: default weights, "
           "slo.max_ttft_ms 120; 1000 samples a model\n");
    printf("| algorithm | candidates | selector p50 ns | p99 ns | request phase p50 ns | p99 ns | chosen |\n"
           "|---|---|---|---|---|---|---|\n");
    for (size_t a = 0; a < VSR_ARRAY_LEN(algos); a++)
        for (int n = 3; n <= 8; n += 5)
            run_selector(algos[a], n, iters);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    vsr_log_min_level = VSR_LOG_ERROR;
    printf("plan_bench: 20 keyword signals, 10 decisions, %d iterations\n", iters);
    if (argc > 2 && strcmp(argv[2], "cachekey") == 0) {
        run_cache_key(iters * 10);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "selectors") == 0) {
        run_selectors(iters);
        return 0;
    }
    for (int kw = 10; kw <= 1000; kw *= 10) {
        int english = kw == 1000;
        if (argc > 2 && strcmp(argv[2], "english") == 0 && !english)
            continue;
        char *doc = english ? strdup(ENGLISH_DOC) : make_config(kw);
        vsr_config_t *cfg = NULL;
        vsr_buf_t err;
        vsr_buf_init(&err, 0);
        if (vsr_config_load_string("bench.yaml", doc, strlen(doc), &cfg, &err) != VSR_OK) {
            fprintf(stderr, "%s", err.data);
            return 1;
        }
        vsr_engine_t *e = vsr_engine_new(cfg, 1, &err);
        if (e == NULL) {
            fprintf(stderr, "%s", err.data);
            return 1;
        }
        if (!english)
            run(e, cfg, 4096, iters, kw);
        run(e, cfg, 65536, iters / 8 + 1, english ? 0 : kw);
        vsr_engine_unref(e);
        vsr_config_free(cfg);
        vsr_buf_free(&err);
        free(doc);
    }
    run_cache_key(iters * 10);
    return 0;
}
