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
 * Scoring (docs/signals.md, "Embeddings signals"):
 *  - max (the default): prototype scoring.  The candidates are grouped once,
 *    when their vectors are stored, into at most EMB_MAX_PROTOTYPES
 *    prototypes: in the configured order, a candidate joins the prototype
 *    whose centroid is nearest if that cosine is >= EMB_CLUSTER_SIMILARITY,
 *    else starts a new one (or, with every slot taken, joins the nearest);
 *    a prototype's vector is the normalised mean of its members.  score =
 *    EMB_BEST_WEIGHT * best + (1 - EMB_BEST_WEIGHT) * mean(top EMB_TOP_M),
 *    over the text's cosines to the prototypes (the reference's defaults).
 *  - mean: the mean cosine over every candidate; any: the best candidate's.
 *  - negative_candidates: no match when the best cosine to a negative is >=
 *    the best cosine to a (positive) candidate, whatever the score.
 *  - enable_soft_matching: a score in [min_score_threshold, threshold)
 *    matches too (its confidence is the score, lower than a hard match's).
 * Image candidates are refused by the document decoder.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#include "signals/signals-int.h"

/* Prototype scoring: the reference's defaults (its global prototype_scoring). */
#define EMB_CLUSTER_SIMILARITY 0.9
#define EMB_MAX_PROTOTYPES 8
#define EMB_BEST_WEIGHT 0.75
#define EMB_TOP_M 2

typedef struct {
    char model[128];
    size_t dim;
    float *vecs;   /* n + n_neg rows of dim floats, each scaled to unit length: candidates, then negatives */
    float *protos; /* n_protos rows of dim floats, unit length */
    size_t n_protos;
} emb_store_t;

typedef struct {
    double threshold;
    vsr_emb_aggregation_t agg;
    int soft;
    double min_score;
    char **cands; /* n candidates, then n_neg negatives */
    size_t n, n_neg;
    vsr_slice_t cand_json; /* ",\"c1\",\"c2\"...": the candidates, then the negatives, as JSON array elements */
    _Atomic(emb_store_t *) store;
} emb_t;

int vsr__embedding_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    const vsr_sig_embedding_conf_t *c = conf;
    if (c->candidates.n == 0 || c->candidates.n > VSR_EMB_MAX_CANDIDATES ||
        c->negative_candidates.n > VSR_EMB_MAX_CANDIDATES) {
        vsr_buf_printf(err, "%s: an embeddings signal needs 1 to %d candidates and at most %d negative candidates\n",
                       path, VSR_EMB_MAX_CANDIDATES, VSR_EMB_MAX_CANDIDATES);
        return VSR_ERR_INVALID;
    }
    emb_t *e = vsr_calloc(1, sizeof(*e));
    e->threshold = c->threshold;
    e->agg = c->aggregation;
    e->soft = c->soft_matching;
    e->min_score = VSR_MIN(c->min_score_threshold, c->threshold);
    e->n = c->candidates.n;
    e->n_neg = c->negative_candidates.n;
    e->cands = vsr_calloc(e->n + e->n_neg, sizeof(char *));
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    for (size_t i = 0; i < e->n + e->n_neg; i++) {
        e->cands[i] = vsr_strdup(i < e->n ? c->candidates.items[i] : c->negative_candidates.items[i - e->n]);
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
    for (size_t i = 0; i < e->n + e->n_neg; i++)
        vsr_free(e->cands[i]);
    vsr_free(e->cands);
    vsr_free((void *)e->cand_json.p);
    emb_store_t *st = atomic_load(&e->store);
    if (st) {
        vsr_free(st->vecs);
        vsr_free(st->protos);
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
int vsr__emb_read_vec(const vsr_json_t *j, uint32_t arr, size_t dim, float *v)
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

static double dot(const float *a, const float *b, size_t dim)
{
    double d = 0;
    for (size_t k = 0; k < dim; k++)
        d += (double)a[k] * b[k];
    return d;
}

/* Groups n unit vectors into at most EMB_MAX_PROTOTYPES prototypes (see the
 * file comment); returns their unit vectors (caller frees), *np set. */
static float *make_prototypes(const float *v, size_t n, size_t dim, size_t *np)
{
    float *sum = vsr_calloc(EMB_MAX_PROTOTYPES * dim, sizeof(float));
    float *cent = vsr_calloc(EMB_MAX_PROTOTYPES * dim, sizeof(float));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const float *x = v + i * dim;
        size_t best = 0;
        double bs = -2;
        for (size_t p = 0; p < k; p++) {
            double d = dot(x, cent + p * dim, dim);
            if (d > bs) {
                bs = d;
                best = p;
            }
        }
        if (k == 0 || (bs < EMB_CLUSTER_SIMILARITY && k < EMB_MAX_PROTOTYPES))
            best = k++;
        float *sp = sum + best * dim, *cp = cent + best * dim;
        double norm = 0;
        for (size_t t = 0; t < dim; t++) {
            sp[t] += x[t];
            norm += (double)sp[t] * sp[t];
        }
        /* the members are unit vectors within 0.9 of each other (or the
         * nearest of a full set): their sum is not zero unless two are
         * opposite, and then the first member stands for the prototype */
        float inv = norm > 1e-12 ? (float)(1.0 / sqrt(norm)) : 0;
        for (size_t t = 0; t < dim; t++)
            cp[t] = inv > 0 ? sp[t] * inv : cp[t];
    }
    vsr_free(sum);
    *np = k;
    return cent;
}

/* The score of unit vector q against the stored vectors (see the file
 * comment); *veto set when a negative is at least as near as the nearest
 * candidate. */
static double score_of(const emb_t *e, const float *q, const float *vecs, const float *protos, size_t n_protos,
                       size_t dim, int *veto)
{
    double best = -1, sum = 0, neg = -2;
    for (size_t i = 0; i < e->n; i++) {
        double d = dot(q, vecs + i * dim, dim);
        sum += d;
        best = VSR_MAX(best, d);
    }
    for (size_t i = 0; i < e->n_neg; i++)
        neg = VSR_MAX(neg, dot(q, vecs + (e->n + i) * dim, dim));
    *veto = e->n_neg > 0 && neg >= best;
    if (e->agg == VSR_EMB_AGG_MEAN)
        return sum / (double)e->n;
    if (e->agg == VSR_EMB_AGG_ANY)
        return best;
    return vsr__emb_proto_score(q, protos, n_protos, dim);
}

float *vsr__emb_prototypes(const float *v, size_t n, size_t dim, size_t *np)
{
    return make_prototypes(v, n, dim, np);
}

double vsr__emb_proto_score(const float *q, const float *protos, size_t n_protos, size_t dim)
{
    double top[EMB_TOP_M] = {0};
    size_t nt = 0;
    if (n_protos == 0)
        return -1; /* nothing to be near */
    for (size_t p = 0; p < n_protos; p++) {
        double d = dot(q, protos + p * dim, dim);
        size_t at = nt < EMB_TOP_M ? nt++ : EMB_TOP_M;
        if (at == EMB_TOP_M) {
            if (d <= top[EMB_TOP_M - 1])
                continue;
            at = EMB_TOP_M - 1;
        }
        while (at > 0 && top[at - 1] < d) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = d;
    }
    double m = 0;
    for (size_t t = 0; t < nt; t++)
        m += top[t];
    m /= (double)nt;
    return EMB_BEST_WEIGHT * top[0] + (1 - EMB_BEST_WEIGHT) * m;
}

/* The score of unit vector q against e's candidates: read from the result
 * (the vectors after token *tok, which is advanced past them) when
 * with_cands, else the stored ones, which must come from the same model and
 * length.  The first usable result stores its vectors. */
int vsr__emb_score(void *state, const vsr_json_t *j, uint32_t *tok, int with_cands, const float *q, size_t dim,
                   vsr_slice_t model, double *score, int *veto)
{
    emb_t *e = state;
    int rc = VSR_ERR_INVALID;
    float *cv = NULL, *pv = NULL;
    size_t all = e->n + e->n_neg, n_protos = 0;
    if (model.len >= sizeof(((emb_store_t *)0)->model))
        return VSR_ERR_INVALID;
    emb_store_t *st = atomic_load(&e->store);
    const float *cands = NULL, *protos = NULL;
    if (with_cands) {
        cv = vsr_malloc(all * dim * sizeof(float));
        uint32_t t = *tok;
        for (size_t i = 0; i < all; i++) {
            t = j->toks[t].next;
            if (vsr__emb_read_vec(j, t, dim, cv + i * dim) != VSR_OK)
                goto out;
        }
        *tok = t;
        pv = make_prototypes(cv, e->n, dim, &n_protos);
        cands = cv;
        protos = pv;
        if (st == NULL) {
            emb_store_t *mine = vsr_calloc(1, sizeof(*mine));
            memcpy(mine->model, model.p ? model.p : "", model.len);
            mine->dim = dim;
            mine->vecs = cv;
            mine->protos = pv;
            mine->n_protos = n_protos;
            emb_store_t *expected = NULL;
            if (atomic_compare_exchange_strong(&e->store, &expected, mine)) {
                cv = pv = NULL; /* the store has them now */
            } else {
                vsr_free(mine); /* another request stored first: use our own copy for this one */
            }
        }
    } else {
        if (st == NULL || st->dim != dim || strlen(st->model) != model.len ||
            memcmp(st->model, model.p ? model.p : "", model.len) != 0)
            goto out; /* not the model the candidates were embedded with */
        cands = st->vecs;
        protos = st->protos;
        n_protos = st->n_protos;
    }
    *score = score_of(e, q, cands, protos, n_protos, dim, veto);
    rc = VSR_OK;
out:
    vsr_free(cv);
    vsr_free(pv);
    return rc;
}

int vsr__emb_stored(const void *state)
{
    return atomic_load(&((emb_t *)state)->store) != NULL;
}

size_t vsr__emb_n_texts(const void *state)
{
    const emb_t *e = state;
    return e->n + e->n_neg;
}

vsr_slice_t vsr__emb_cand_json(const void *state)
{
    return ((const emb_t *)state)->cand_json;
}

/* {"model": M, "dim": D, "embeddings": [[...], ...], ...}: the routing
 * text's vector first, then (when the task carried them) the candidates'
 * and the negatives'. */
int vsr__embedding_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    emb_t *e = (emb_t *)state;
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    int rc = VSR_ERR_INVALID;
    float *q = NULL;
    uint32_t m, d, arr;
    double dimv;
    size_t all = e->n + e->n_neg;
    if (vsr_json_parse(&j, result.p ? result.p : "", result.len, NULL) != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT ||
        vsr_json_object_get(&j, 0, "dim", &d) != VSR_OK || vsr_json_number(&j, d, &dimv) != VSR_OK ||
        !(dimv >= 1 && dimv <= 65536) || vsr_json_object_get(&j, 0, "embeddings", &arr) != VSR_OK ||
        vsr_json_type(&j, arr) != VSR_JSON_ARRAY)
        goto out;
    size_t dim = (size_t)dimv, count = j.toks[arr].count;
    vsr_slice_t model = VSR_SLICE_NULL;
    if (vsr_json_object_get(&j, 0, "model", &m) == VSR_OK && vsr_json_type(&j, m) == VSR_JSON_STRING)
        vsr_json_string(&j, m, c->pool, &model);
    if (count != 1 && count != all + 1)
        goto out;
    q = vsr_malloc(dim * sizeof(float));
    uint32_t t = arr + 1;
    if (vsr__emb_read_vec(&j, t, dim, q) != VSR_OK)
        goto out;
    int veto;
    double score;
    if (vsr__emb_score(e, &j, &t, count == all + 1, q, dim, model, &score, &veto) != VSR_OK)
        goto out;
    out->matched = !veto && (score >= e->threshold || (e->soft && score >= e->min_score));
    out->confidence = out->matched ? VSR_MAX(score, 0.0) : 0;
    out->value = score;
    rc = VSR_OK;
out:
    vsr_free(q);
    vsr_json_free(&j);
    return rc;
}
