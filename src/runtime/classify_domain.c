/*
 * classify_domain.c — the built-in domain classifier (`domain`): the
 * routing text's embedding from the runtime's USE-lite embedder (through
 * the embedding cache), then a linear softmax head over the 14 MMLU-Pro
 * categories (src/models/head.h; data/domains/, docs/signals.md).  Its
 * answer lists every class, highest probability first:
 *   ,"labels":[{"label":"math","score":0.83},...]
 * With the task option "description": D (a domain signal's description),
 * also D's cosine similarity to the text, clamped to [0, 1]:
 *   ,"description_similarity":0.41
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "builtin.h"
#include "models/models.h"
#include "runtime-int.h"

typedef struct {
    size_t i;
    float p;
} ranked_t;

static int by_prob(const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The task's "description" string (pool-free: unescaped into *out, owned by the caller), or 0. */
static int task_description(vsr_slice_t task, vsr_buf_t *out)
{
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_depth = 8};
    uint32_t t;
    int found = 0;
    if (vsr_json_parse(&j, task.p ? task.p : "", task.len, &lim) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
        vsr_json_object_get(&j, 0, "description", &t) == VSR_OK && vsr_json_type(&j, t) == VSR_JSON_STRING) {
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        vsr_slice_t d;
        if (vsr_json_string(&j, t, &pool, &d) == VSR_OK && d.len > 0) {
            vsr_buf_append_slice(out, d);
            found = 1;
        }
        vsr_pool_free(&pool);
    }
    vsr_json_free(&j);
    return found;
}

static int domain_classify(vsr_classifier_t *c, const vsr_classify_env_t *env, vsr_slice_t text, vsr_slice_t task,
                           vsr_buf_t *out, vsr_buf_t *err)
{
    const vsr_head_t *h = c->impl;
    size_t dim = vsr_head_dim(h), n = vsr_head_classes(h);
    if (env->embed == NULL || env->dim != dim) {
        vsr_buf_printf(err, "the domain classifier needs a %zu-d embedder", dim);
        return VSR_ERR;
    }
    float *v = vsr_malloc(dim * sizeof(float) + n * sizeof(float));
    ranked_t *r = vsr_malloc(n * sizeof(*r));
    float *p = v + dim;
    int rc = env->embed(env->ud, text, v, err);
    if (rc == VSR_OK && (rc = vsr_head_predict_text(h, v, dim, text.p, text.len, p)) != VSR_OK)
        vsr_buf_printf(err, "the domain head refused the embedding");
    if (rc == VSR_OK) {
        for (size_t i = 0; i < n; i++)
            r[i] = (ranked_t){i, p[i]};
        qsort(r, n, sizeof(*r), by_prob);
        vsr_buf_append_cstr(out, ",\"labels\":[");
        for (size_t i = 0; i < n; i++) {
            vsr_buf_append_cstr(out, i ? ",{\"label\":" : "{\"label\":");
            vsr_buf_append_json_string(out, vsr_slice_cstr(vsr_head_label(h, r[i].i)));
            vsr_buf_append_cstr(out, ",\"score\":");
            vsr__rt_append_float(out, r[i].p);
            vsr_buf_append_cstr(out, "}");
        }
        vsr_buf_append_cstr(out, "]");
        vsr_buf_t desc;
        vsr_buf_init(&desc, 0);
        if (task_description(task, &desc)) {
            float *dv = vsr_malloc(dim * sizeof(float));
            rc = env->embed(env->ud, vsr_buf_slice(&desc), dv, err);
            if (rc == VSR_OK) {
                double dot = 0, na = 0, nb = 0;
                for (size_t i = 0; i < dim; i++) {
                    dot += (double)v[i] * dv[i];
                    na += (double)v[i] * v[i];
                    nb += (double)dv[i] * dv[i];
                }
                double cs = na > 0 && nb > 0 ? dot / sqrt(na * nb) : 0;
                vsr_buf_append_cstr(out, ",\"description_similarity\":");
                vsr__rt_append_float(out, (float)(cs < 0 ? 0 : cs > 1 ? 1 : cs));
            }
            vsr_free(dv);
        }
        vsr_buf_free(&desc);
    }
    vsr_free(v);
    vsr_free(r);
    return rc;
}

static void domain_free(vsr_classifier_t *c)
{
    vsr_head_free(c->impl);
}

static const vsr_classifier_ops_t domain_ops = {domain_classify, domain_free};

vsr_classifier_t *vsr_classifier_domain_new(const char *head_path, vsr_buf_t *err)
{
    vsr_head_t *h = NULL;
    int rc = head_path ? vsr_head_load(head_path, &h)
                       : vsr_head_load_mem(vsr_builtin_domain_head, vsr_builtin_domain_head_len, &h);
    if (rc != VSR_OK) {
        vsr_buf_printf(err, "cannot load the domain head %s (%s)", head_path ? head_path : "(built in)",
                       rc == VSR_ERR_IO ? "cannot read it" : rc == VSR_ERR_TOO_BIG ? "too big" : "malformed");
        return NULL;
    }
    vsr_classifier_t *c = vsr_calloc(1, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "domain");
    c->backend = "linear-head";
    c->output = "labels";
    c->needs_dim = vsr_head_dim(h);
    c->embeds_text = 1;
    c->ops = &domain_ops;
    c->impl = h;
    return c;
}
