/*
 * embedding.c — the `embeddings` family (ref §1.9, condition type
 * `embedding`): the cosine similarity of the routing text's embedding to
 * each candidate's, aggregated over the candidates (max, mean or any) and
 * compared with the signal's threshold.  Model-backed: the vectors come
 * from the model runtime's `embed` task; this file stays pure.
 *
 * The candidates are embedded once per compiled signal (and compiled
 * signals are shared by every version whose recipe's signals are
 * unchanged): as long as no vectors are cached, a request's task asks for
 * [routing text, candidate 1, ..., candidate n] and the first usable answer
 * stores the candidates' vectors; afterwards a task asks for the routing
 * text alone.  The store is published once with a compare-and-swap and
 * never changes after, so readers on other threads need no lock.  A
 * runtime whose answers change model or vector length from the stored
 * ones makes the signal unknown (the model behind a compiled signal is
 * fixed for its life; a configuration change to the signal recompiles it).
 *
 * Not yet: prototype scoring, soft matching, negative_candidates and image
 * candidates (the document decoder refuses them).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#include "signals/signals-int.h"

typedef struct {
    char model[128];
    size_t dim;
    float *vecs; /* n_candidates rows of dim floats, each scaled to unit length */
} emb_store_t;

typedef struct {
    double threshold;
    vsr_emb_aggregation_t agg;
    char **cands;
    size_t n;
    vsr_slice_t cand_json; /* ",\"c1\",\"c2\"...": the candidates as JSON array elements */
    _Atomic(emb_store_t *) store;
} emb_t;

int vsr__embedding_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    const vsr_sig_embedding_conf_t *c = conf;
    if (c->candidates.n == 0 || c->candidates.n > VSR_EMB_MAX_CANDIDATES) {
        vsr_buf_printf(err, "%s: an embeddings signal needs 1 to %d candidates\n", path, VSR_EMB_MAX_CANDIDATES);
        return VSR_ERR_INVALID;
    }
    emb_t *e = vsr_calloc(1, sizeof(*e));
    e->threshold = c->threshold;
    e->agg = c->aggregation;
    e->n = c->candidates.n;
    e->cands = vsr_calloc(e->n, sizeof(char *));
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (size_t i = 0; i < e->n; i++) {
        e->cands[i] = vsr_strdup(c->candidates.items[i]);
        vsr_buf_append(&b, ",", 1);
        vsr_buf_append_json_string(&b, vsr_slice_cstr(e->cands[i]));
    }
    e->cand_json = vsr_slice(b.data, b.len); /* owned: freed with the state */
    atomic_init(&e->store, NULL);
    *state = e;
    return VSR_OK;
}

void vsr__embedding_free(void *state)
{
    emb_t *e = state;
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->n; i++)
        vsr_free(e->cands[i]);
    vsr_free(e->cands);
    vsr_free((void *)e->cand_json.p);
    emb_store_t *st = atomic_load(&e->store);
    if (st) {
        vsr_free(st->vecs);
        vsr_free(st);
    }
    vsr_free(e);
}

/* Without a vector there is nothing to compare: no match. */
vsr_signal_result_t vsr__embedding_eval(vsr__ctx_t *c, const void *state)
{
    VSR_UNUSED(c);
    VSR_UNUSED(state);
    vsr_signal_result_t r = {0};
    return r;
}

int vsr__embedding_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out)
{
    const emb_t *e = state;
    vsr_slice_t text = c->in->text;
    if (text.len == 0)
        return 0; /* no routing text: nothing to embed, no match */
    vsr_slice_t q = vsr__text_json(c->pool, text, VSR__MODEL_MAX_RUNES);
    int with_cands = atomic_load(&((emb_t *)e)->store) == NULL;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_append_slice(&b, q);
    if (with_cands)
        vsr_buf_append_slice(&b, e->cand_json);
    vsr_buf_append_cstr(&b, "]}");
    out->type = "embed";
    out->payload = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return 1;
}

/* Reads embeddings[k] (an array of dim numbers) into v, scaled to unit
 * length.  VSR_OK, or VSR_ERR_INVALID (wrong shape, or a zero vector). */
static int read_vec(const vsr_json_t *j, uint32_t arr, size_t dim, float *v)
{
    if (vsr_json_type(j, arr) != VSR_JSON_ARRAY || j->toks[arr].count != dim)
        return VSR_ERR_INVALID;
    double norm = 0;
    uint32_t t = arr + 1;
    for (size_t i = 0; i < dim; i++, t = j->toks[t].next) {
        double x;
        if (vsr_json_type(j, t) != VSR_JSON_NUMBER || vsr_json_number(j, t, &x) != VSR_OK || !isfinite(x))
            return VSR_ERR_INVALID;
        v[i] = (float)x;
        norm += x * x;
    }
    if (!(norm > 0))
        return VSR_ERR_INVALID;
    float inv = (float)(1.0 / sqrt(norm));
    for (size_t i = 0; i < dim; i++)
        v[i] *= inv;
    return VSR_OK;
}

/* {"model": M, "dim": D, "embeddings": [[...], ...], ...}: the routing
 * text's vector first, then (when the task carried them) the candidates'. */
int vsr__embedding_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    emb_t *e = (emb_t *)state;
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    int rc = VSR_ERR_INVALID;
    float *q = NULL, *cv = NULL;
    uint32_t m, d, arr;
    double dimv;
    if (vsr_json_parse(&j, result.p ? result.p : "", result.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT ||
        vsr_json_object_get(&j, 0, "dim", &d) != VSR_OK || vsr_json_number(&j, d, &dimv) != VSR_OK ||
        !(dimv >= 1 && dimv <= 65536) || vsr_json_object_get(&j, 0, "embeddings", &arr) != VSR_OK ||
        vsr_json_type(&j, arr) != VSR_JSON_ARRAY)
        goto out;
    size_t dim = (size_t)dimv, count = j.toks[arr].count;
    vsr_slice_t model = VSR_SLICE_NULL;
    if (vsr_json_object_get(&j, 0, "model", &m) == VSR_OK && vsr_json_type(&j, m) == VSR_JSON_STRING)
        vsr_json_string(&j, m, c->pool, &model);
    if (model.len >= sizeof(((emb_store_t *)0)->model))
        goto out;
    if (count != 1 && count != e->n + 1)
        goto out;
    q = vsr_malloc(dim * sizeof(float));
    uint32_t t = arr + 1;
    if (read_vec(&j, t, dim, q) != VSR_OK)
        goto out;
    emb_store_t *st = atomic_load(&e->store);
    const float *cands = NULL;
    if (count == e->n + 1) {
        cv = vsr_malloc(e->n * dim * sizeof(float));
        for (size_t i = 0; i < e->n; i++) {
            t = j.toks[t].next;
            if (read_vec(&j, t, dim, cv + i * dim) != VSR_OK)
                goto out;
        }
        cands = cv;
        if (st == NULL) {
            emb_store_t *mine = vsr_calloc(1, sizeof(*mine));
            memcpy(mine->model, model.p ? model.p : "", model.len);
            mine->dim = dim;
            mine->vecs = cv;
            emb_store_t *expected = NULL;
            if (atomic_compare_exchange_strong(&e->store, &expected, mine)) {
                cv = NULL; /* the store has it now */
                cands = mine->vecs;
            } else {
                vsr_free(mine); /* another request stored first: use our own copy for this one */
            }
        }
    } else {
        if (st == NULL || st->dim != dim || strlen(st->model) != model.len ||
            memcmp(st->model, model.p ? model.p : "", model.len) != 0)
            goto out; /* not the model the candidates were embedded with */
        cands = st->vecs;
    }
    double best = -1, sum = 0;
    for (size_t i = 0; i < e->n; i++) {
        const float *v = cands + i * dim;
        double dot = 0;
        for (size_t k = 0; k < dim; k++)
            dot += (double)q[k] * v[k];
        sum += dot;
        if (dot > best)
            best = dot;
    }
    double score = e->agg == VSR_EMB_AGG_MEAN ? sum / (double)e->n : best;
    out->matched = score >= e->threshold;
    out->confidence = out->matched ? VSR_MAX(score, 0.0) : 0;
    out->value = score;
    rc = VSR_OK;
out:
    vsr_free(q);
    vsr_free(cv);
    vsr_json_free(&j);
    return rc;
}
