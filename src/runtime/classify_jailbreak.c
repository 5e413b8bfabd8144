/*
 * classify_jailbreak.c — the built-in prompt guard (`jailbreak`,
 * src/models/guard.h).  Task options beside the text:
 *   "method": "classifier" (default) | "contrastive" | "hybrid"
 *   "jailbreak_patterns", "benign_patterns": arrays of texts (contrastive
 *     and hybrid; absent or empty: the built-in sets, data/jailbreak/)
 * classifier: the llm_guardrail TF-IDF + logistic-regression models
 * (jailbreak and prompt injection, the higher of the two; texts longer than
 * 384 tokens scored in overlapping windows, the maximum).  contrastive: the
 * highest cosine of the text's embedding with the jailbreak patterns minus
 * the highest with the benign ones, mapped to [0, 1].  hybrid: a weighted
 * mix of the two and of the jailbreak head's p(jailbreak) on the same
 * embedding (data/jailbreak/jailbreak.head, compiled in; VSR_GUARD_HEAD_*,
 * tuned offline) and of its lexical partner's (TF-IDF + logistic regression,
 * data/jailbreak/jailbreak_lexical.json, compiled in; VSR_GUARD_LEXICAL_W);
 * when the default embedder's width is not the head's, the mix of the two
 * alone (VSR_GUARD_HYBRID_*).  The answer:
 *   ,"labels":[{"label":"jailbreak","score":S},{"label":"benign","score":1-S}],
 *    "method":M,"scores":{"classifier":P,"injection":Q,"contrastive":C,"head":H,"lexical":L}
 * (scores holds what the method computed).  Pattern vectors come from the
 * default embedder through the embedding cache; the built-in sets' vectors
 * are computed once, on first use, and kept.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>

#include "builtin.h"
#include "models/models.h"
#include "runtime-int.h"

#define JB_MAX_PATTERNS 256 /* per list in a task */

typedef struct {
    vsr_guard_t guard;
    int have_guard;
    /* the built-in pattern sets, split into lines of the compiled-in files */
    vsr_slice_t *builtin[2];
    size_t n_builtin[2];
    pthread_mutex_t mu;
    float *builtin_vecs[2]; /* embedded on first use (under mu); then read-only */
    size_t builtin_dim;
    vsr_head_t *head; /* the built-in jailbreak head (immutable) */
    size_t head_jb;   /* its "jailbreak" class */
    vsr_guard_lr_t *lexical; /* the head's lexical partner (data/jailbreak/jailbreak_lexical.json; immutable) */
} jb_t;

enum { M_CLASSIFIER, M_CONTRASTIVE, M_HYBRID };

/* Lines of a built-in text file (blank lines and '#' comments skipped). */
static void split_lines(const unsigned char *data, size_t len, vsr_slice_t **out, size_t *n)
{
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    const char *p = (const char *)data, *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        const char *s = p;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        const char *t = e;
        while (t > s && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r'))
            t--;
        if (t > s && *s != '#') {
            if (*n == cap) {
                cap = cap ? 2 * cap : 64;
                *out = vsr_realloc(*out, cap * sizeof(**out));
            }
            (*out)[(*n)++] = vsr_slice(s, (size_t)(t - s));
        }
        p = e + 1;
    }
}

/* Embeds n texts into vecs (n * dim); the contrastive score is a cosine,
 * so the vectors need no scaling. */
static int embed_all(const vsr_classify_env_t *env, const vsr_slice_t *texts, size_t n, float *vecs, vsr_buf_t *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = env->embed(env->ud, texts[i], vecs + i * env->dim, err);
        if (rc != VSR_OK)
            return rc;
    }
    return VSR_OK;
}

/* The built-in set k's vectors, embedded once. */
static const float *builtin_vecs(jb_t *j, int k, const vsr_classify_env_t *env, vsr_buf_t *err)
{
    pthread_mutex_lock(&j->mu);
    if (j->builtin_vecs[k] == NULL || j->builtin_dim != env->dim) {
        float *v = vsr_malloc((j->n_builtin[k] ? j->n_builtin[k] : 1) * env->dim * sizeof(float));
        if (embed_all(env, j->builtin[k], j->n_builtin[k], v, err) != VSR_OK) {
            vsr_free(v);
            pthread_mutex_unlock(&j->mu);
            return NULL;
        }
        vsr_free(j->builtin_vecs[k]);
        j->builtin_vecs[k] = v;
        j->builtin_dim = env->dim;
    }
    const float *v = j->builtin_vecs[k];
    pthread_mutex_unlock(&j->mu);
    return v;
}

/* A task's pattern list: absent/null → 0 entries; else 1..JB_MAX_PATTERNS non-empty strings. */
static int read_patterns(const vsr_json_t *jt, const char *key, vsr_pool_t *pool, vsr_slice_t **out, size_t *n,
                         vsr_buf_t *err)
{
    uint32_t a;
    *out = NULL;
    *n = 0;
    if (vsr_json_object_get(jt, 0, key, &a) != VSR_OK || vsr_json_type(jt, a) == VSR_JSON_NULL)
        return VSR_OK;
    if (vsr_json_type(jt, a) != VSR_JSON_ARRAY || jt->toks[a].count > JB_MAX_PATTERNS) {
        vsr_buf_printf(err, "\"%s\" must be an array of at most %d strings", key, JB_MAX_PATTERNS);
        return VSR_ERR_INVALID;
    }
    size_t cnt = jt->toks[a].count;
    *out = vsr_pool_alloc(pool, (cnt ? cnt : 1) * sizeof(**out));
    uint32_t t = a + 1;
    for (size_t i = 0; i < cnt; i++, t = jt->toks[t].next) {
        if (vsr_json_type(jt, t) != VSR_JSON_STRING || vsr_json_string(jt, t, pool, &(*out)[i]) != VSR_OK ||
            (*out)[i].len == 0) {
            vsr_buf_printf(err, "\"%s\" must hold non-empty strings", key);
            return VSR_ERR_INVALID;
        }
    }
    *n = cnt;
    return VSR_OK;
}

static int jb_classify(vsr_classifier_t *c, const vsr_classify_env_t *env, vsr_slice_t text, vsr_slice_t task,
                       vsr_buf_t *out, vsr_buf_t *err)
{
    jb_t *j = c->impl;
    vsr_json_t jt;
    vsr_json_limits_t lim = {.max_depth = 8};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    int rc = VSR_ERR_INVALID, method = M_CLASSIFIER;
    float *q = NULL, *pv[2] = {NULL, NULL};
    if (vsr_json_parse(&jt, task.p ? task.p : "", task.len, &lim) != VSR_OK || vsr_json_type(&jt, 0) != VSR_JSON_OBJECT) {
        vsr_buf_printf(err, "the task is not a JSON object");
        goto out;
    }
    uint32_t m;
    if (vsr_json_object_get(&jt, 0, "method", &m) == VSR_OK && vsr_json_type(&jt, m) != VSR_JSON_NULL) {
        if (vsr_json_string_eq(&jt, m, VSR_SLICE_LIT("classifier")))
            method = M_CLASSIFIER;
        else if (vsr_json_string_eq(&jt, m, VSR_SLICE_LIT("contrastive")))
            method = M_CONTRASTIVE;
        else if (vsr_json_string_eq(&jt, m, VSR_SLICE_LIT("hybrid")))
            method = M_HYBRID;
        else {
            vsr_buf_printf(err, "\"method\" must be \"classifier\", \"contrastive\" or \"hybrid\"");
            goto out;
        }
    }
    double p_cls = 0, p_inj = 0, contrast = 0, score = 0, p_head = -1, p_lex = -1;
    if (method != M_CONTRASTIVE) {
        if (!j->have_guard) {
            vsr_buf_printf(err, "the jailbreak classifier's model is not loaded (the runtime's --guard-model)");
            rc = VSR_ERR;
            goto out;
        }
        if ((rc = vsr_guard_score(&j->guard, text.p, text.len, &p_cls, &p_inj)) != VSR_OK) {
            vsr_buf_printf(err, "the jailbreak classifier failed");
            goto out;
        }
        p_cls = p_cls > p_inj ? p_cls : p_inj;
        rc = VSR_ERR_INVALID;
    }
    if (method != M_CLASSIFIER) {
        if (env->embed == NULL || env->dim == 0) {
            vsr_buf_printf(err, "the contrastive method needs an embedder");
            rc = VSR_ERR;
            goto out;
        }
        static const char *const keys[2] = {"jailbreak_patterns", "benign_patterns"};
        const float *sets[2];
        size_t ns[2];
        for (int k = 0; k < 2; k++) {
            vsr_slice_t *given;
            if ((rc = read_patterns(&jt, keys[k], &pool, &given, &ns[k], err)) != VSR_OK)
                goto out;
            if (ns[k] == 0) {
                ns[k] = j->n_builtin[k];
                sets[k] = builtin_vecs(j, k, env, err);
            } else {
                pv[k] = vsr_malloc(ns[k] * env->dim * sizeof(float));
                sets[k] = embed_all(env, given, ns[k], pv[k], err) == VSR_OK ? pv[k] : NULL;
            }
            if (sets[k] == NULL) {
                rc = VSR_ERR;
                goto out;
            }
        }
        q = vsr_malloc(env->dim * sizeof(float));
        if ((rc = embed_all(env, &text, 1, q, err)) != VSR_OK)
            goto out;
        contrast = vsr_guard_contrastive(q, sets[0], ns[0], sets[1], ns[1], env->dim);
        float probs[2];
        if (method == M_HYBRID && env->dim == vsr_head_dim(j->head) &&
            vsr_head_predict(j->head, q, env->dim, probs) == VSR_OK) {
            p_head = probs[j->head_jb];
            if ((rc = vsr_guard_lr_score_chunked(j->lexical, text.p, text.len, &p_lex, NULL)) != VSR_OK) {
                vsr_buf_printf(err, "the jailbreak lexical model failed");
                goto out;
            }
            rc = VSR_ERR_INVALID;
        }
    }
    if (method == M_CLASSIFIER)
        score = p_cls;
    else if (method == M_CONTRASTIVE)
        score = vsr_guard_hybrid(0, contrast, 0, VSR_GUARD_HYBRID_LO, VSR_GUARD_HYBRID_HI);
    else if (p_head >= 0) {
        double mix = vsr_guard_hybrid(p_cls, contrast, VSR_GUARD_HEAD_MIX_W, VSR_GUARD_HEAD_MIX_LO, VSR_GUARD_HEAD_MIX_HI);
        score = vsr_guard_calibrate(
            vsr_guard_with_lexical(p_lex, vsr_guard_with_head(p_head, mix, VSR_GUARD_HEAD_W), VSR_GUARD_LEXICAL_W),
            VSR_GUARD_OPERATING_POINT);
    }
    else
        score = vsr_guard_hybrid(p_cls, contrast, VSR_GUARD_HYBRID_W, VSR_GUARD_HYBRID_LO, VSR_GUARD_HYBRID_HI);
    if (!(score >= 0))
        score = 0;
    if (score > 1)
        score = 1;
    static const char *const names[] = {"classifier", "contrastive", "hybrid"};
    int jb_first = score >= 0.5;
    vsr_buf_append_cstr(out, ",\"labels\":[");
    for (int k = 0; k < 2; k++) {
        int is_jb = (k == 0) == jb_first;
        vsr_buf_printf(out, "%s{\"label\":\"%s\",\"score\":", k ? "," : "", is_jb ? "jailbreak" : "benign");
        vsr__rt_append_float(out, (float)(is_jb ? score : 1 - score));
        vsr_buf_append_cstr(out, "}");
    }
    vsr_buf_printf(out, "],\"method\":\"%s\",\"scores\":{", names[method]);
    if (method != M_CONTRASTIVE) {
        vsr_buf_append_cstr(out, "\"classifier\":");
        vsr__rt_append_float(out, (float)p_cls);
        vsr_buf_append_cstr(out, ",\"injection\":");
        vsr__rt_append_float(out, (float)p_inj);
    }
    if (method != M_CLASSIFIER) {
        vsr_buf_append_cstr(out, method == M_HYBRID ? ",\"contrastive\":" : "\"contrastive\":");
        vsr__rt_append_float(out, (float)contrast);
    }
    if (p_head >= 0) {
        vsr_buf_append_cstr(out, ",\"head\":");
        vsr__rt_append_float(out, (float)p_head);
        vsr_buf_append_cstr(out, ",\"lexical\":");
        vsr__rt_append_float(out, (float)p_lex);
    }
    vsr_buf_append_cstr(out, "}");
    rc = VSR_OK;
out:
    vsr_free(q);
    vsr_free(pv[0]);
    vsr_free(pv[1]);
    vsr_json_free(&jt);
    vsr_pool_free(&pool);
    return rc;
}

static void jb_free(vsr_classifier_t *c)
{
    jb_t *j = c->impl;
    if (j == NULL)
        return;
    if (j->have_guard)
        vsr_guard_free(&j->guard);
    for (int k = 0; k < 2; k++) {
        vsr_free(j->builtin[k]);
        vsr_free(j->builtin_vecs[k]);
    }
    vsr_head_free(j->head);
    vsr_guard_lr_free(j->lexical);
    pthread_mutex_destroy(&j->mu);
    vsr_free(j);
}

static const vsr_classifier_ops_t jb_ops = {jb_classify, jb_free};

vsr_classifier_t *vsr_classifier_jailbreak_new(const char *guard_dir, vsr_buf_t *err)
{
    jb_t *j = vsr_calloc(1, sizeof(*j));
    if (guard_dir) {
        int rc = vsr_guard_load_dir(guard_dir, &j->guard);
        if (rc != VSR_OK) {
            vsr_buf_printf(err, "cannot load the guard model from %s (%s)", guard_dir,
                           rc == VSR_ERR_IO        ? "a model file can't be read"
                           : rc == VSR_ERR_TOO_BIG ? "a model file is too big"
                                                   : "a model file is malformed");
            vsr_free(j);
            return NULL;
        }
        j->have_guard = 1;
    }
    int li;
    if (vsr_head_load_mem(vsr_builtin_jailbreak_head, vsr_builtin_jailbreak_head_len, &j->head) != VSR_OK ||
        vsr_head_classes(j->head) != 2 || (li = vsr_head_label_index(j->head, "jailbreak")) < 0) {
        vsr_buf_printf(err, "the built-in jailbreak head is malformed");
        vsr_head_free(j->head);
        if (j->have_guard)
            vsr_guard_free(&j->guard);
        vsr_free(j);
        return NULL;
    }
    if (vsr_guard_lr_load_mem((const char *)vsr_builtin_jailbreak_lexical, vsr_builtin_jailbreak_lexical_len,
                              &j->lexical) != VSR_OK) {
        vsr_buf_printf(err, "the built-in jailbreak lexical model is malformed");
        vsr_head_free(j->head);
        if (j->have_guard)
            vsr_guard_free(&j->guard);
        vsr_free(j);
        return NULL;
    }
    j->head_jb = (size_t)li;
    pthread_mutex_init(&j->mu, NULL);
    split_lines(vsr_builtin_jailbreak_patterns, vsr_builtin_jailbreak_patterns_len, &j->builtin[0], &j->n_builtin[0]);
    split_lines(vsr_builtin_benign_patterns, vsr_builtin_benign_patterns_len, &j->builtin[1], &j->n_builtin[1]);
    vsr_classifier_t *c = vsr_calloc(1, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "jailbreak");
    c->backend = j->have_guard ? "tfidf-lr+contrastive" : "contrastive";
    c->output = "labels";
    c->ops = &jb_ops;
    c->impl = j;
    return c;
}
