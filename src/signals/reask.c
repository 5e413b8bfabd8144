/*
 * reask.c — the `reasks` family (ref §1.9, condition type `reask`): the
 * user asks again.  The current user turn (the routing text) is embedded
 * with the previous user turns of the conversation, the nearest first, and
 * the signal matches when its cosine similarity to each of the previous
 * lookback_turns user turns is >= threshold.  A conversation with fewer
 * previous user turns compares with those it has; one with none (or no
 * routing text) asks nothing and does not match.  User messages without
 * text are not turns.  The score is the lowest of those similarities.
 * Nothing is stored: every request embeds its own turns (the runtime's
 * embedding cache makes a repeated turn cheap).  Model-backed and pure, as
 * embedding.c.
 */
#include <math.h>
#include <stdio.h>

#include "signals/signals-int.h"

typedef struct {
    double threshold;
    uint32_t lookback;
} reask_t;

int vsr__reask_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    const vsr_sig_reask_conf_t *c = conf;
    if (c->lookback_turns < 1 || c->lookback_turns > VSR_REASK_MAX_LOOKBACK) {
        vsr_buf_printf(err, "%s: lookback_turns is 1 to %d\n", path, VSR_REASK_MAX_LOOKBACK);
        return VSR_ERR_INVALID;
    }
    reask_t *r = vsr_calloc(1, sizeof(*r));
    r->threshold = c->threshold;
    r->lookback = c->lookback_turns;
    *state = r;
    return VSR_OK;
}

void vsr__reask_free(void *state)
{
    vsr_free(state);
}

/* The previous user turns, nearest first: up to max indexes into
 * chat->messages written to idx; returns how many. */
static size_t previous_turns(const vsr_chat_view_t *chat, uint32_t max, size_t *idx)
{
    size_t n = 0;
    if (chat == NULL || chat->last_user < 0)
        return 0;
    for (size_t i = (size_t)chat->last_user; i-- > 0 && n < max;)
        if (chat->messages[i].role == VSR_ROLE_USER && chat->messages[i].text.len > 0)
            idx[n++] = i;
    return n;
}

int vsr__reask_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out)
{
    const reask_t *r = state;
    size_t idx[VSR_REASK_MAX_LOOKBACK];
    size_t n = previous_turns(c->in->chat, r->lookback, idx);
    if (c->in->text.len == 0 || n == 0)
        return 0; /* nothing to compare: no match */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"input\":[");
    vsr_buf_append_slice(&b, vsr__text_json(c->pool, c->in->text, VSR__MODEL_MAX_RUNES));
    for (size_t k = 0; k < n; k++) {
        vsr_buf_append(&b, ",", 1);
        vsr_buf_append_slice(&b,
                             vsr__text_json(c->pool, c->in->chat->messages[idx[k]].text, VSR__MODEL_MAX_RUNES));
    }
    vsr_buf_append_cstr(&b, "]}");
    out->type = "embed";
    out->payload = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&b));
    vsr_buf_free(&b);
    return 1;
}

/* {"model": M, "dim": D, "embeddings": [current, previous 1, ...]} */
int vsr__reask_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    const reask_t *r = state;
    size_t idx[VSR_REASK_MAX_LOOKBACK];
    size_t n = previous_turns(c->in->chat, r->lookback, idx);
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    int rc = VSR_ERR_INVALID;
    float *v = NULL;
    uint32_t d, arr;
    double dimv;
    if (n == 0 || vsr_json_parse(&j, result.p ? result.p : "", result.len, NULL) != VSR_OK ||
        vsr_json_type(&j, 0) != VSR_JSON_OBJECT || vsr_json_object_get(&j, 0, "dim", &d) != VSR_OK ||
        vsr_json_number(&j, d, &dimv) != VSR_OK || !(dimv >= 1 && dimv <= 65536) ||
        vsr_json_object_get(&j, 0, "embeddings", &arr) != VSR_OK || vsr_json_type(&j, arr) != VSR_JSON_ARRAY ||
        j.toks[arr].count != n + 1)
        goto out;
    size_t dim = (size_t)dimv;
    v = vsr_malloc(2 * dim * sizeof(float));
    uint32_t t = arr + 1;
    if (vsr__emb_read_vec(&j, t, dim, v) != VSR_OK)
        goto out;
    double low = 2;
    for (size_t k = 0; k < n; k++) {
        t = j.toks[t].next;
        if (vsr__emb_read_vec(&j, t, dim, v + dim) != VSR_OK)
            goto out;
        double dot = 0;
        for (size_t x = 0; x < dim; x++)
            dot += (double)v[x] * v[dim + x];
        low = VSR_MIN(low, dot);
    }
    out->matched = low >= r->threshold;
    out->confidence = out->matched ? VSR_MAX(low, 0.0) : 0;
    out->value = low;
    rc = VSR_OK;
out:
    vsr_free(v);
    vsr_json_free(&j);
    return rc;
}
