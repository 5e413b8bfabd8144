/*
 * complexity.c — the `complexity` family (ref §1.9, condition type
 * `complexity`, named "<signal>:easy|medium|hard" in rules): how near the
 * routing text is to the hard candidates rather than the easy ones.
 *
 * Each bank (hard, easy) is an embeddings signal's state with aggregation
 * max, so its candidates are embedded once per compiled signal, grouped
 * into prototypes and scored as embedding.c says.  margin = score(hard) -
 * score(easy); margin > hard_above is hard, margin < easy_below is easy,
 * anything else medium (hard_above defaults to threshold, easy_below to
 * -threshold).  Exactly one level matches when the text was embedded; none
 * when there is no routing text or the task failed.
 *
 * One configured signal is three compiled signals (its levels) sharing one
 * core: a rule leaf resolves to a level by name like any other signal, and
 * only the levels a rule names are computed.  Two levels of one signal
 * named by the recipe's rules each send the routing text to be embedded
 * (the candidates' vectors are shared).  The core's reference count is
 * touched only while compiling and freeing, which happen on one thread.
 */
#include <stdio.h>

#include "signals/signals-int.h"

typedef struct {
    int refs;
    double hard_above, easy_below;
    void *bank[2]; /* embeddings states: [0] hard, [1] easy */
} cx_core_t;

typedef struct {
    cx_core_t *core;
    int level; /* 0 easy, 1 medium, 2 hard */
} cx_level_t;

static const char *const cx_levels[] = {"easy", "medium", "hard"};

int vsr__complexity_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_complexity_conf_t *c = conf;
    double hard = c->has_hard_above ? c->hard_above : c->threshold;
    double easy = c->has_easy_below ? c->easy_below : -c->threshold;
    if (!(easy <= hard)) {
        vsr_buf_printf(err, "%s: easy_below (%g) is greater than hard_above (%g)\n", path, easy, hard);
        return VSR_ERR_INVALID;
    }
    cx_core_t *k = vsr_calloc(1, sizeof(*k));
    k->hard_above = hard;
    k->easy_below = easy;
    const vsr_cx_bank_conf_t *banks[2] = {&c->hard, &c->easy};
    const char *names[2] = {"hard", "easy"};
    char sub[300];
    for (int b = 0; b < 2; b++) {
        vsr_sig_embedding_conf_t e;
        memset(&e, 0, sizeof(e));
        e.name = c->name;
        e.threshold = 1;
        e.candidates = banks[b]->candidates;
        e.aggregation = VSR_EMB_AGG_MAX;
        snprintf(sub, sizeof(sub), "%s.%s.candidates", path, names[b]);
        if (vsr__embedding_compile(s, &e, sub, &k->bank[b], err) != VSR_OK) {
            vsr__embedding_free(k->bank[0]);
            vsr_free(k);
            return VSR_ERR_INVALID;
        }
    }
    *state = k;
    return VSR_OK;
}

void *vsr__complexity_level(void *core, int level)
{
    cx_core_t *k = core;
    VSR_BUG_ON(k == NULL || level < 0 || level > 2);
    cx_level_t *l = vsr_calloc(1, sizeof(*l));
    l->core = k;
    l->level = level;
    k->refs++;
    return l;
}

void vsr__complexity_free(void *state)
{
    cx_level_t *l = state;
    if (l == NULL)
        return;
    cx_core_t *k = l->core;
    vsr_free(l);
    if (--k->refs > 0)
        return;
    vsr__embedding_free(k->bank[0]);
    vsr__embedding_free(k->bank[1]);
    vsr_free(k);
}

int vsr__complexity_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out)
{
    const cx_core_t *k = ((const cx_level_t *)state)->core;
    if (c->in->text.len == 0)
        return 0; /* no routing text: nothing to embed, no level */
    int with_cands = !vsr__emb_stored(k->bank[0]) || !vsr__emb_stored(k->bank[1]);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_append_slice(&b, vsr__text_json(c->pool, c->in->text, VSR__MODEL_MAX_RUNES));
    if (with_cands) {
        vsr_buf_append_slice(&b, vsr__emb_cand_json(k->bank[0]));
        vsr_buf_append_slice(&b, vsr__emb_cand_json(k->bank[1]));
    }
    vsr_buf_append_cstr(&b, "]}");
    out->type = "embed";
    out->payload = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return 1;
}

/* {"model": M, "dim": D, "embeddings": [...]}: the routing text's vector,
 * then (when the task carried them) the hard and the easy candidates'. */
int vsr__complexity_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    const cx_level_t *l = state;
    cx_core_t *k = l->core;
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    int rc = VSR_ERR_INVALID;
    float *q = NULL;
    uint32_t m, d, arr;
    double dimv;
    size_t nh = vsr__emb_n_texts(k->bank[0]), ne = vsr__emb_n_texts(k->bank[1]);
    if (vsr_json_parse(&j, result.p ? result.p : "", result.len, NULL) != VSR_OK ||
        vsr_json_type(&j, 0) != VSR_JSON_OBJECT || vsr_json_object_get(&j, 0, "dim", &d) != VSR_OK ||
        vsr_json_number(&j, d, &dimv) != VSR_OK || !(dimv >= 1 && dimv <= 65536) ||
        vsr_json_object_get(&j, 0, "embeddings", &arr) != VSR_OK || vsr_json_type(&j, arr) != VSR_JSON_ARRAY)
        goto out;
    size_t dim = (size_t)dimv, count = j.toks[arr].count;
    vsr_slice_t model = VSR_SLICE_NULL;
    if (vsr_json_object_get(&j, 0, "model", &m) == VSR_OK && vsr_json_type(&j, m) == VSR_JSON_STRING)
        vsr_json_string(&j, m, c->pool, &model);
    if (count != 1 && count != nh + ne + 1)
        goto out;
    int with_cands = count != 1;
    q = vsr_malloc(dim * sizeof(float));
    uint32_t t = arr + 1;
    if (vsr__emb_read_vec(&j, t, dim, q) != VSR_OK)
        goto out;
    double sc[2];
    int veto;
    for (int b = 0; b < 2; b++)
        if (vsr__emb_score(k->bank[b], &j, &t, with_cands, q, dim, model, &sc[b], &veto) != VSR_OK)
            goto out;
    double margin = sc[0] - sc[1];
    int level = margin > k->hard_above ? 2 : margin < k->easy_below ? 0 : 1;
    out->matched = level == l->level;
    out->confidence = out->matched ? 1.0 : 0;
    out->value = margin;
    char ev[160];
    int n = snprintf(ev, sizeof(ev), "{\"level\":\"%s\",\"margin\":%.4f,\"hard\":%.4f,\"easy\":%.4f}",
                     cx_levels[level], margin, sc[0], sc[1]);
    if (n > 0 && (size_t)n < sizeof(ev))
        out->evidence = vsr_pool_dup_slice(c->pool, vsr_slice(ev, (size_t)n));
    rc = VSR_OK;
out:
    vsr_free(q);
    vsr_json_free(&j);
    return rc;
}
