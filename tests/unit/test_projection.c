/* test_projection.c — routing.projections: partitions, scores and mappings
 * against hand-computed values, the load-time checks, and the routing core
 * deciding on projection outputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decision/decision.h"
#include "routing/routing.h"

#define HEAD                                             \
    "version: v0.3\n"                                    \
    "listeners: [{name: l, address: 127.0.0.1, port: 18890}]\n" \
    "providers:\n"                                       \
    "  defaults: {model: small}\n"                       \
    "  models:\n"                                        \
    "    - {name: small, backend_refs: [{endpoint: '127.0.0.1:1'}]}\n" \
    "    - {name: large, backend_refs: [{endpoint: '127.0.0.1:2'}]}\n"
/* HEAD is 7 lines */

#define SIGNALS                                                                 \
    "routing:\n"                                                                \
    "  signals:\n"                                                              \
    "    keywords: [{name: code, operator: OR, keywords: [python]}]\n"          \
    "    context: [{name: long, min_tokens: 1000}]\n"                           \
    "    embeddings:\n"                                                         \
    "      - {name: math, threshold: 0.5, candidates: [algebra]}\n"             \
    "      - {name: chem, threshold: 0.5, candidates: [molecules]}\n"           \
    "      - {name: bio, threshold: 0.5, candidates: [cells]}\n"
/* SIGNALS is lines 8-15 */

static vsr_config_t *load(const char *yaml, vsr_buf_t *err)
{
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, err);
    return rc == VSR_OK ? c : NULL;
}

/* signal indices of the pure tests */
enum { S_CODE, S_LONG, S_MATH, S_CHEM, S_BIO, S_N };

static int find(void *ud, const char *type, const char *name)
{
    (void)ud;
    static const struct {
        const char *type, *name;
    } sigs[S_N] = {{"keyword", "code"}, {"context", "long"}, {"embedding", "math"}, {"embedding", "chem"},
                   {"embedding", "bio"}};
    for (int i = 0; i < S_N; i++)
        if (strcmp(sigs[i].type, type) == 0 && strcmp(sigs[i].name, name) == 0)
            return i;
    return -1;
}

static const char *PURE =
    HEAD SIGNALS
    "  projections:\n"
    "    partitions:\n"
    "      - {name: subject, semantics: softmax_exclusive, temperature: 0.5, members: [math, chem, bio]}\n"
    "    scores:\n"
    "      - name: total\n" /* consumes a score declared after it */
    "        method: weighted_sum\n"
    "        inputs:\n"
    "          - {type: score, name: base, weight: 0.5}\n"
    "          - {type: keyword, name: code, weight: 0.2}\n"
    "      - name: base\n"
    "        inputs:\n"
    "          - {type: keyword, name: code, weight: 0.4, value_source: binary}\n"
    "          - {type: context, name: long, weight: 0.3, miss: 0.1}\n"
    "          - {type: embedding, name: math, weight: 0.3, value_source: confidence}\n"
    "          - {type: kb_metric, kb: docs, metric: best_score, weight: 2, miss: 0.25}\n"
    "      - name: raw\n"
    "        inputs:\n"
    "          - {type: embedding, name: bio, value_source: raw}\n"
    "          - {type: context, name: long, value_source: raw, weight: 0.001}\n"
    "    mappings:\n"
    "      - name: tier\n"
    "        source: total\n"
    "        method: threshold_bands\n"
    "        calibration: {method: sigmoid_distance}\n"
    "        outputs:\n"
    "          - {name: low, lt: 0.5}\n"
    "          - {name: mid, gte: 0.5, lt: 0.95}\n"
    "          - {name: mid2, gte: 0.6}\n"
    "          - {name: high, gte: 0.95}\n"
    "      - name: multi\n"
    "        source: total\n"
    "        method: multi_emit\n"
    "        outputs:\n"
    "          - {name: a, gt: 0.7}\n"
    "          - {name: b, lte: 0.8}\n"
    "          - {name: c, gt: 0.9}\n"
    "      - name: steep\n"
    "        source: raw\n"
    "        calibration: {method: sigmoid_distance, slope: 4}\n"
    "        outputs: [{name: over, gt: 5.2}]\n"
    "  decisions:\n"
    "    - {name: d, rules: {type: projection, name: mid}, modelRefs: [{model: large}]}\n";

typedef struct {
    vsr_config_t *cfg;
    vsr_projections_t *p;
    vsr_signal_result_t sig[S_N];
    unsigned char known[S_N];
    vsr_pool_t pool;
    vsr_projections_run_t run;
} fixture_t;

static void fixture(fixture_t *f)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    f->cfg = load(PURE, &err);
    if (f->cfg == NULL)
        fprintf(stderr, "%.*s", (int)err.len, err.data ? err.data : "");
    assert_non_null(f->cfg);
    vsr_buf_free(&err);
    f->p = vsr_projections_compile(&f->cfg->recipes[0].projections, find, NULL);
    memset(f->sig, 0, sizeof(f->sig));
    f->sig[S_CODE] = (vsr_signal_result_t){1, 1.0, 0, VSR_SLICE_NULL, NULL};
    f->sig[S_LONG] = (vsr_signal_result_t){0, 0, 5000, VSR_SLICE_NULL, NULL};
    f->sig[S_MATH] = (vsr_signal_result_t){1, 0.9, 0.9, VSR_SLICE_NULL, NULL};
    f->sig[S_CHEM] = (vsr_signal_result_t){1, 0.6, 0.6, VSR_SLICE_NULL, NULL};
    f->sig[S_BIO] = (vsr_signal_result_t){0, 0, 0.3, VSR_SLICE_NULL, NULL};
    memset(f->known, 1, sizeof(f->known));
    vsr_pool_init(&f->pool);
}

static void fixture_free(fixture_t *f)
{
    vsr_pool_free(&f->pool);
    vsr_projections_free(f->p);
    vsr_config_free(f->cfg);
}

static int out(fixture_t *f, const char *name, double *conf)
{
    int o = vsr_projections_find_output(f->p, name);
    assert_true(o >= 0);
    vsr_projection_out_t r = vsr_projections_output(f->p, &f->run, o);
    *conf = r.confidence;
    return r.matched;
}

static void test_softmax_partition(void **state)
{
    (void)state;
    fixture_t f;
    fixture(&f);
    vsr_projections_partition(f.p, f.sig, f.known);
    /* exp(0.9/0.5) / (exp(0.9/0.5) + exp(0.6/0.5)) */
    assert_true(f.sig[S_MATH].matched);
    assert_true(fabs(f.sig[S_MATH].confidence - 0.6456563062) < 1e-9);
    assert_false(f.sig[S_CHEM].matched);
    assert_true(f.sig[S_CHEM].confidence == 0);
    assert_false(f.sig[S_BIO].matched);
    /* one match is left alone */
    f.sig[S_MATH] = (vsr_signal_result_t){0, 0, 0.2, VSR_SLICE_NULL, NULL};
    f.sig[S_CHEM] = (vsr_signal_result_t){1, 0.6, 0.6, VSR_SLICE_NULL, NULL};
    vsr_projections_partition(f.p, f.sig, f.known);
    assert_true(f.sig[S_CHEM].matched);
    assert_true(f.sig[S_CHEM].confidence == 0.6);
    fixture_free(&f);
}

static void test_exclusive_partition_and_default(void **state)
{
    (void)state;
    vsr_partition_conf_t pc = {0};
    char *members[] = {"math", "chem", "bio"};
    pc.members = (vsr_strlist_conf_t){members, 3};
    pc.default_ = "bio";
    pc.temperature = 1;
    vsr_projections_conf_t c = {.partitions = &pc, .n_partitions = 1};
    vsr_projections_t *p = vsr_projections_compile(&c, find, NULL);
    vsr_signal_result_t sig[S_N] = {{0}};
    unsigned char known[S_N];
    memset(known, 1, sizeof(known));
    sig[S_MATH] = (vsr_signal_result_t){1, 0.7, 0.7, VSR_SLICE_NULL, NULL};
    sig[S_CHEM] = (vsr_signal_result_t){1, 0.8, 0.8, VSR_SLICE_NULL, NULL};
    vsr_projections_partition(p, sig, known);
    assert_false(sig[S_MATH].matched);
    assert_true(sig[S_CHEM].matched);
    assert_true(sig[S_CHEM].confidence == 0.8); /* exclusive: the winner keeps its confidence */
    memset(sig, 0, sizeof(sig));
    vsr_projections_partition(p, sig, known);
    assert_true(sig[S_BIO].matched); /* none matched: the default */
    assert_true(sig[S_BIO].confidence == 1.0);
    /* a member that was not computed is not emitted by default */
    memset(sig, 0, sizeof(sig));
    known[S_BIO] = 0;
    vsr_projections_partition(p, sig, known);
    assert_false(sig[S_BIO].matched);
    vsr_projections_free(p);
}

static void test_weighted_sums_in_topological_order(void **state)
{
    (void)state;
    fixture_t f;
    fixture(&f);
    vsr_projections_run_init(f.p, &f.run, &f.pool, f.sig, f.known);
    /* total is declared first and reads base: base = 0.4*1 + 0.3*0.1 (miss) + 0.3*0.9 + 2*0.25 (kb_metric: miss) */
    assert_true(fabs(vsr_projections_score(f.p, &f.run, 0) - (0.5 * 1.2 + 0.2)) < 1e-12);
    assert_true(fabs(vsr_projections_score(f.p, &f.run, 1) - 1.2) < 1e-12);
    /* raw: the measured values, matched or not */
    assert_true(fabs(vsr_projections_score(f.p, &f.run, 2) - (0.3 + 5.0)) < 1e-12);
    fixture_free(&f);
}

static void test_bands_calibration_multi_emit(void **state)
{
    (void)state;
    fixture_t f;
    fixture(&f);
    vsr_projections_run_init(f.p, &f.run, &f.pool, f.sig, f.known);
    double c;
    /* total = 0.8: mid [0.5, 0.95), d = min(0.3, 0.15); mid2 holds too but threshold_bands emits the first */
    assert_false(out(&f, "low", &c));
    assert_true(out(&f, "mid", &c));
    assert_true(fabs(c - 1.0 / (1.0 + exp(-12 * 0.15))) < 1e-9);
    assert_true(fabs(c - 0.8581489351) < 1e-9);
    assert_false(out(&f, "mid2", &c));
    assert_false(out(&f, "high", &c));
    /* multi_emit, no calibration: every band that holds, confidence 1 */
    assert_true(out(&f, "a", &c));
    assert_true(c == 1.0);
    assert_true(out(&f, "b", &c)); /* lte 0.8 holds at 0.8 */
    assert_false(out(&f, "c", &c));
    /* slope 4, raw = 5.3 > 5.2: d = 0.1 */
    assert_true(out(&f, "over", &c));
    assert_true(fabs(c - 0.5986876601) < 1e-9);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_projections_describe(f.p, &f.run, 1, &b);
    vsr_buf_append(&b, "", 1);
    assert_non_null(strstr(b.data, "{\"name\":\"total\",\"score\":0.8000,\"inputs\":["));
    assert_non_null(strstr(b.data, "{\"type\":\"kb_metric\",\"name\":\"docs\",\"value_source\":\"binary\",\"value\":0.2500"));
    assert_non_null(strstr(b.data, "{\"name\":\"mid\",\"mapping\":\"tier\",\"matched\":true,\"confidence\":0.8581}"));
    vsr_buf_reset(&b);
    assert_int_equal(vsr_projections_matched_names(f.p, &f.run, &b), 4);
    vsr_buf_append(&b, "", 1);
    assert_string_equal(b.data, "mid,a,b,over");
    vsr_buf_free(&b);
    fixture_free(&f);
}

static void test_uncomputed_signal_is_a_miss(void **state)
{
    (void)state;
    fixture_t f;
    fixture(&f);
    memset(f.known, 0, sizeof(f.known));
    vsr_projections_run_init(f.p, &f.run, &f.pool, f.sig, f.known);
    /* base = 0 + 0.3*0.1 + 0 + 0.5 */
    assert_true(fabs(vsr_projections_score(f.p, &f.run, 1) - 0.53) < 1e-12);
    fixture_free(&f);
}

/* ---- load-time checks ---- */

static void expect_error(const char *yaml, const char *expected)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = load(yaml, &err);
    vsr_buf_append(&err, "", 1);
    if (c != NULL || strstr(err.data, expected) == NULL)
        fprintf(stderr, "expected \"%s\" in:\n%s", expected, err.data);
    assert_null(c);
    assert_non_null(strstr(err.data, expected));
    vsr_buf_free(&err);
}

static void test_cycle_refused(void **state)
{
    (void)state;
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores:\n"
                 "      - name: a\n"                                  /* line 18 */
                 "        inputs: [{type: score, name: b}]\n"
                 "      - name: b\n"
                 "        inputs: [{type: score, name: a}]\n",
                 "t.yaml:18:15: score \"a\" depends on itself (a cycle of scores)\n");
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores:\n"
                 "      - {name: self, inputs: [{type: score, name: self}]}\n",
                 "t.yaml:18:16: score \"self\" depends on itself");
}

static void test_reference_errors(void **state)
{
    (void)state;
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores:\n"
                 "      - {name: s, inputs: [{type: keyword, name: nope}]}\n",
                 "t.yaml:18:28: score input: keyword signal \"nope\" is not declared in routing.signals (nor in another "
                 "recipe)\n");
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores:\n"
                 "      - {name: s, inputs: [{type: score, name: nope}]}\n",
                 "t.yaml:18:28: score input names an unknown score \"nope\"\n");
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores: [{name: s, inputs: [{type: keyword, name: code}]}]\n"
                 "    mappings:\n"
                 "      - {name: m, source: t, outputs: [{name: x, gt: 0}]}\n",
                 "t.yaml:19:27: mapping source names an unknown score \"t\"\n");
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores: [{name: s, inputs: [{type: keyword, name: code}]}]\n"
                 "    mappings:\n"
                 "      - {name: m, source: s, outputs: [{name: x, gt: 0}, {name: x, lt: 0}]}\n",
                 "t.yaml:19:65: duplicate projection output name \"x\" (first defined at 19:47)\n");
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores: [{name: s, inputs: [{type: keyword, name: code}]}]\n"
                 "    mappings:\n"
                 "      - {name: m, source: s, outputs: [{name: x}]}\n",
                 "t.yaml:19:40: output \"x\" has no bound (give gt, gte, lt or lte)\n");
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    partitions: [{name: p, members: [math, code]}]\n",
                 "t.yaml:17:44: \"code\" is not a domain or embedding signal of routing.signals\n");
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    partitions: [{name: p, members: [math, chem], default: zz}]\n",
                 "t.yaml:17:60: partition default \"zz\" is not one of its members\n");
    expect_error(HEAD SIGNALS
                 "  decisions:\n"
                 "    - {name: d, rules: {type: projection, name: nope}, modelRefs: [{model: large}]}\n",
                 "t.yaml:17:24: projection output \"nope\" is not declared in routing.projections.mappings\n");
}

#define RECIPE_R                                                                                        \
    "recipes:\n"                                                                                        \
    "  - name: r\n"                                                                                     \
    "    routing:\n"                                                                                    \
    "      signals:\n"                                                                                  \
    "        keywords: [{name: code, operator: OR, keywords: [python]}]\n"
#define RECIPE_R_DECISION \
    "      decisions: [{name: d, rules: {type: projection, name: yes}, modelRefs: [{model: large}]}]\n"

static void test_recipes_have_their_own_projections(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = load(HEAD SIGNALS RECIPE_R
                           "      projections:\n"
                           "        scores: [{name: s, inputs: [{type: keyword, name: code}]}]\n"
                           "        mappings: [{name: m, source: s, outputs: [{name: yes, gte: 1}]}]\n"
                           RECIPE_R_DECISION,
                           &err);
    if (c == NULL)
        fprintf(stderr, "%.*s", (int)err.len, err.data ? err.data : "");
    assert_non_null(c);
    assert_int_equal(c->n_recipes, 2);
    const vsr_recipe_conf_t *r = strcmp(c->recipes[0].name, "r") == 0 ? &c->recipes[0] : &c->recipes[1];
    assert_int_equal(r->projections.n_mappings, 1);
    vsr_config_free(c);
    /* a score input naming a signal of another recipe (here the top-level
     * block's context signal "long"): the reference's registry is global, so
     * the recipe takes a copy of that declaration and computes it itself */
    vsr_buf_reset(&err);
    c = load(HEAD SIGNALS RECIPE_R
             "      projections:\n"
             "        scores: [{name: s, inputs: [{type: keyword, name: code}, {type: context, name: long}]}]\n"
             "        mappings: [{name: m, source: s, outputs: [{name: yes, gte: 1}]}]\n"
             RECIPE_R_DECISION,
             &err);
    if (c == NULL)
        fprintf(stderr, "%.*s", (int)err.len, err.data ? err.data : "");
    assert_non_null(c);
    r = strcmp(c->recipes[0].name, "r") == 0 ? &c->recipes[0] : &c->recipes[1];
    assert_int_equal(r->signals.n_context, 1);
    assert_string_equal(r->signals.context[0].name, "long");
    assert_int_equal(r->signals.n_keywords, 1);
    vsr_config_free(c);
    vsr_buf_free(&err);
    /* a signal no recipe declares is still an error */
    expect_error(HEAD SIGNALS RECIPE_R
                 "      projections:\n"
                 "        scores: [{name: s, inputs: [{type: context, name: nowhere}]}]\n"
                 "        mappings: [{name: m, source: s, outputs: [{name: yes, gte: 1}]}]\n"
                 RECIPE_R_DECISION,
                 "score input: context signal \"nowhere\" is not declared in recipe \"r\": routing.signals (nor in "
                 "another recipe)\n");
    /* the default recipe's outputs are not the recipe's */
    expect_error(HEAD SIGNALS
                 "  projections:\n"
                 "    scores: [{name: s, inputs: [{type: keyword, name: code}]}]\n"
                 "    mappings: [{name: m, source: s, outputs: [{name: yes, gte: 1}]}]\n"
                 RECIPE_R RECIPE_R_DECISION,
                 "projection output \"yes\" is not declared in recipe \"r\": routing.projections.mappings\n");
}

/* ---- the routing core deciding on projection outputs ---- */

static const char *ROUTED =
    HEAD
    "routing:\n"
    "  signals:\n"
    "    keywords:\n"
    "      - {name: code, operator: OR, keywords: [python, golang]}\n"
    "      - {name: urgent, operator: OR, keywords: [urgent]}\n"
    "    context: [{name: big, min_tokens: 8}]\n"
    "  projections:\n"
    "    scores:\n"
    "      - name: difficulty\n"
    "        inputs:\n"
    "          - {type: keyword, name: code, weight: 0.5}\n"
    "          - {type: context, name: big, weight: 0.4}\n"
    "    mappings:\n"
    "      - name: band\n"
    "        source: difficulty\n"
    "        calibration: {method: sigmoid_distance}\n"
    "        outputs:\n"
    "          - {name: hard, gte: 0.8}\n"
    "          - {name: easy, lt: 0.8}\n"
    "  decisions:\n"
    "    - {name: hard_route, priority: 2, rules: {type: projection, name: hard}, modelRefs: [{model: large}]}\n"
    "    - {name: easy_route, priority: 1, rules: {type: projection, name: easy}, modelRefs: [{model: small}]}\n";

static void test_engine_routes_on_projection(void **state)
{
    (void)state;
    vsr_buf_t err, o;
    vsr_buf_init(&err, 0);
    vsr_buf_init(&o, 0);
    vsr_config_t *c = load(ROUTED, &err);
    if (c == NULL)
        fprintf(stderr, "%.*s", (int)err.len, err.data ? err.data : "");
    assert_non_null(c);
    vsr_engine_t *e = vsr_engine_new(c, 1, &err);
    assert_non_null(e);
    /* code (0.5) + big (0.4) = 0.9 >= 0.8 */
    assert_int_equal(vsr_engine_preview(e, VSR_SLICE_LIT("auto"),
                                        VSR_SLICE_LIT("please write golang code for a long long task"), 1, &o),
                     200);
    vsr_buf_append(&o, "", 1);
    assert_non_null(strstr(o.data, "\"decision_name\":\"hard_route\""));
    assert_non_null(strstr(o.data, "{\"name\":\"difficulty\",\"score\":0.9000,\"inputs\":["));
    assert_non_null(strstr(o.data, "{\"name\":\"hard\",\"mapping\":\"band\",\"matched\":true,\"confidence\":0.7685}"));
    assert_non_null(strstr(o.data, "{\"type\":\"projection\",\"name\":\"hard\",\"matched\":true,\"confidence\":0.7685}"));
    /* only code: 0.5 < 0.8 */
    vsr_buf_reset(&o);
    assert_int_equal(vsr_engine_preview(e, VSR_SLICE_LIT("auto"), VSR_SLICE_LIT("golang"), 0, &o), 200);
    vsr_buf_append(&o, "", 1);
    assert_non_null(strstr(o.data, "\"decision_name\":\"easy_route\""));
    assert_null(strstr(o.data, "\"inputs\""));
    vsr_buf_free(&o);
    vsr_buf_free(&err);
    vsr_engine_unref(e);
    vsr_config_free(c);
}

static void add_dep(void *ud, int sig)
{
    struct { int *d; int *n; } *acc = ud;
    if (*acc->n < 8)
        acc->d[(*acc->n)++] = sig;
}

/* kb_metric inputs read their kb signal, resolved at load (by name, or the
 * recipe's first kb signal over the kb): best_score its value, the target
 * value the same, confidence and matched; miss when it was not computed. */
static int find_kb(void *ud, const char *type, const char *name)
{
    (void)ud;
    if (strcmp(type, "kb") != 0)
        return -1;
    return strcmp(name, "acct") == 0 ? 0 : strcmp(name, "money") == 0 ? 1 : -1;
}

#define KB_DOC(inputs)                                                                                         \
    HEAD "routing:\n"                                                                                          \
         "  signals:\n"                                                                                        \
         "    kb:\n"                                                                                           \
         "      - {name: acct, kb: support, target: {kind: label, value: account}}\n"                          \
         "      - {name: money, kb: support, target: {kind: group, value: finance}, match: any}\n"             \
         "  projections:\n"                                                                                    \
         "    scores:\n"                                                                                       \
         "      - name: s\n"                                                                                   \
         "        inputs:\n" inputs                                                                            \
         "    mappings: [{name: m, source: s, outputs: [{name: hi, gte: 0.5}]}]\n"                             \
         "  decisions:\n"                                                                                      \
         "    - {name: d, rules: {type: projection, name: hi}, modelRefs: [{model: large}]}\n"                 \
         "global:\n"                                                                                           \
         "  model_catalog:\n"                                                                                  \
         "    kbs: [{name: support, entries: [{text: reset password, label: account, group: it},\n"            \
         "                                    {text: refund, label: billing, group: finance}]}]\n"

static void test_kb_metric_reads_its_kb_signal(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *cfg = load(KB_DOC("          - {type: kb_metric, kb: support, weight: 2, miss: 0.05}\n"
                                    "          - {type: kb_metric, kb: support, name: money, metric: confidence}\n"
                                    "          - {type: kb_metric, kb: support, name: money, metric: matched,"
                                    " match: 0.5, weight: 0.1}\n"
                                    "          - {type: kb_metric, kb: support, metric: account, weight: -1}\n"
                                    "          - {type: kb_metric, kb: support, name: money,"
                                    " metric: best_matched_score, weight: 0}\n"),
                             &err);
    if (cfg == NULL)
        fprintf(stderr, "%.*s", (int)err.len, err.data ? err.data : "");
    assert_non_null(cfg);
    const vsr_score_input_conf_t *in = cfg->recipes[0].projections.scores[0].inputs;
    assert_string_equal(in[0].name, "acct"); /* the first kb signal over the kb */
    assert_int_equal(in[1].kb_metric, VSR_KB_METRIC_CONFIDENCE);
    assert_int_equal(in[3].kb_metric, VSR_KB_METRIC_SCORE);
    assert_int_equal(in[4].kb_metric, VSR_KB_METRIC_CONFIDENCE); /* the reference's best_matched_score */
    vsr_projections_t *p = vsr_projections_compile(&cfg->recipes[0].projections, find_kb, NULL);
    vsr_signal_result_t sig[2] = {{1, 0.8, 0.8, VSR_SLICE_NULL, NULL}, {1, 0.6, 0.6, VSR_SLICE_NULL, NULL}};
    unsigned char known[2] = {1, 1};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_projections_run_t run;
    vsr_projections_run_init(p, &run, &pool, sig, known);
    /* 2*0.8 + 0.6 + 0.1*0.5 - 0.8 = 1.45 */
    assert_true(fabs(vsr_projections_score(p, &run, 0) - 1.45) < 1e-9);
    /* money unmatched (value 0.3): 1.6 + 0 (miss) + 0 (miss) - 0.8 = 0.8 */
    sig[1] = (vsr_signal_result_t){0, 0, 0.3, VSR_SLICE_NULL, NULL};
    vsr_projections_run_init(p, &run, &pool, sig, known);
    assert_true(fabs(vsr_projections_score(p, &run, 0) - 0.8) < 1e-9);
    /* acct not computed: its two inputs give their miss: 2*0.05 + 0 + 0 - 0 = 0.1 */
    known[0] = 0;
    vsr_projections_run_init(p, &run, &pool, sig, known);
    assert_true(fabs(vsr_projections_score(p, &run, 0) - 0.1) < 1e-9);
    /* the output's dependencies include the kb signals, so they are evaluated */
    int deps[8], nd = 0;
    struct { int *d; int *n; } acc = {deps, &nd};
    vsr_projections_output_deps(p, 0, add_dep, &acc);
    int saw0 = 0, saw1 = 0;
    for (int i = 0; i < nd; i++) {
        saw0 |= deps[i] == 0;
        saw1 |= deps[i] == 1;
    }
    assert_true(saw0 && saw1);
    vsr_pool_free(&pool);
    vsr_projections_free(p);
    vsr_config_free(cfg);
    vsr_buf_reset(&err);
    /* a named signal that is not a kb signal over the kb, and a metric it does not have */
    assert_null(load(KB_DOC("          - {type: kb_metric, kb: support, name: nope}\n"), &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "kb_metric input: kb signal \"nope\" over kb \"support\" is not declared in "
                                     "routing.signals.kb"));
    vsr_buf_reset(&err);
    assert_null(load(KB_DOC("          - {type: kb_metric, kb: support, name: acct, metric: billing}\n"), &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "metric \"billing\" is not supported yet (a kb's own metrics, "
                                     "global.model_catalog.kbs[].metrics, are not computed): it must be best_score, "
                                     "best_matched_score, score, confidence, matched or \"account\" (the target of kb "
                                     "signal \"acct\")"));
    vsr_buf_free(&err);
}
#undef KB_DOC

/* The reference's input forms: a complexity level, the model-backed
 * families, type projection (a score's value, a mapping output's
 * confidence) and kb_metric best_matched_score. */
#define REF_DOC(extra)                                                                               \
    HEAD "routing:\n"                                                                                \
         "  signals:\n"                                                                              \
         "    keywords: [{name: code, operator: OR, keywords: [python]}]\n"                          \
         "    domains: [{name: math, description: Mathematics}]\n"                                   \
         "    jailbreak: [{name: attack}]\n"                                                         \
         "    pii: [{name: personal}]\n"                                                             \
         "    complexity:\n"                                                                         \
         "      - {name: general_reasoning, threshold: 0.1, hard: {candidates: [prove it]},"         \
         " easy: {candidates: [hi]}}\n"                                                              \
         "  projections:\n"                                                                          \
         "    scores:\n"                                                                             \
         "      - name: difficulty\n"                                                                \
         "        inputs:\n"                                                                         \
         "          - {type: complexity, name: \"general_reasoning:hard\", weight: 0.5}\n"            \
         "          - {type: domain, name: math, weight: 0.2}\n"                                     \
         "          - {type: jailbreak, name: attack, weight: 0.1}\n"                                \
         "          - {type: pii, name: personal, weight: 0.1}\n"                                    \
         "      - name: derived\n"                                                                   \
         "        inputs:\n"                                                                         \
         "          - {type: projection, name: difficulty, weight: 2}\n"                             \
         "          - {type: projection, name: hard_band, value_source: confidence, weight: 10}\n"   \
         extra                                                                                       \
         "    mappings:\n"                                                                           \
         "      - {name: band, source: difficulty, outputs: [{name: hard_band, gte: 0.5}]}\n"

enum { R_LEVEL, R_MATH, R_ATTACK, R_PERSONAL, R_N };

static int find_ref(void *ud, const char *type, const char *name)
{
    (void)ud;
    static const struct {
        const char *type, *name;
    } sigs[R_N] = {{"complexity", "general_reasoning:hard"}, {"domain", "math"}, {"jailbreak", "attack"},
                   {"pii", "personal"}};
    for (int i = 0; i < R_N; i++)
        if (strcmp(sigs[i].type, type) == 0 && strcmp(sigs[i].name, name) == 0)
            return i;
    return -1;
}

static void test_reference_input_forms(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *cfg = load(REF_DOC(""), &err);
    if (cfg == NULL)
        fprintf(stderr, "%.*s", (int)err.len, err.data ? err.data : "");
    assert_non_null(cfg);
    vsr_projections_t *p = vsr_projections_compile(&cfg->recipes[0].projections, find_ref, NULL);
    vsr_signal_result_t sig[R_N] = {{1, 0.9, 0.9, VSR_SLICE_NULL, NULL}, {1, 0.7, 0.7, VSR_SLICE_NULL, NULL},
                                    {0, 0, 0.1, VSR_SLICE_NULL, NULL}, {0, 0, 0, VSR_SLICE_NULL, NULL}};
    unsigned char known[R_N] = {1, 1, 1, 1};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_projections_run_t run;
    vsr_projections_run_init(p, &run, &pool, sig, known);
    /* difficulty = 0.5 (the hard level) + 0.2 (math) = 0.7; derived = 2*0.7 + 10*1 (hard_band emitted) */
    assert_true(fabs(vsr_projections_score(p, &run, 0) - 0.7) < 1e-12);
    assert_true(fabs(vsr_projections_score(p, &run, 1) - 11.4) < 1e-12);
    /* the level not matched: difficulty 0.2, hard_band not emitted: its confidence reads 0 */
    sig[R_LEVEL].matched = 0;
    vsr_projections_run_init(p, &run, &pool, sig, known);
    assert_true(fabs(vsr_projections_score(p, &run, 1) - 0.4) < 1e-12);
    /* derived's dependencies reach the signals through both projection inputs */
    int deps[16], nd = 0;
    struct { int *d; int *n; } acc = {deps, &nd};
    vsr_projections_output_deps(p, 0, add_dep, &acc);
    int saw_level = 0;
    for (int i = 0; i < nd; i++)
        saw_level |= deps[i] == R_LEVEL;
    assert_true(saw_level);
    vsr_pool_free(&pool);
    vsr_projections_free(p);
    vsr_config_free(cfg);
    /* a projection input naming no score, or no output, and a cycle through an output */
    vsr_buf_reset(&err);
    assert_null(load(REF_DOC("          - {type: projection, name: nope}\n"), &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "projection input names an unknown score \"nope\""));
    vsr_buf_reset(&err);
    assert_null(load(REF_DOC("          - {type: projection, name: nope, value_source: confidence}\n"), &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "projection input (value_source confidence) names an unknown mapping output "
                                     "\"nope\""));
    vsr_buf_reset(&err);
    assert_null(load(HEAD "routing:\n"
                          "  signals: {keywords: [{name: code, operator: OR, keywords: [python]}]}\n"
                          "  projections:\n"
                          "    scores:\n"
                          "      - {name: s, inputs: [{type: keyword, name: code},"
                          " {type: projection, name: o, value_source: confidence}]}\n"
                          "    mappings: [{name: m, source: s, outputs: [{name: o, gt: 0}]}]\n",
                     &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "score \"s\" depends on itself"));
    vsr_buf_free(&err);
}
#undef REF_DOC

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_partition),
        cmocka_unit_test(test_kb_metric_reads_its_kb_signal),
        cmocka_unit_test(test_reference_input_forms),
        cmocka_unit_test(test_exclusive_partition_and_default),
        cmocka_unit_test(test_weighted_sums_in_topological_order),
        cmocka_unit_test(test_bands_calibration_multi_emit),
        cmocka_unit_test(test_uncomputed_signal_is_a_miss),
        cmocka_unit_test(test_cycle_refused),
        cmocka_unit_test(test_reference_errors),
        cmocka_unit_test(test_recipes_have_their_own_projections),
        cmocka_unit_test(test_engine_routes_on_projection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
