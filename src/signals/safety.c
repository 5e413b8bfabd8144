/* safety.c — the safety signal (docs/signals.md "Safety"): one
 * classification of the routing text, by a remote classifier (the
 * reference's http_classify: POST /classify {"inputs": T} ->
 * [{"label": L, "score": P}, ...]) or by the built-in prompt guard (its
 * jailbreak score read as the label "unsafe", the rest as "safe").
 *
 *   risk    = the sum of the scores of unsafe_labels (labels by name,
 *             case-insensitive; an answer naming none of the rule's labels is
 *             unusable: the signal is unknown)
 *   matched = risk >= threshold, and with a hazard stage the largest score
 *             among hazard.categories (never summed) >= hazard.threshold,
 *             read from the same answer (one naming no hazard label is
 *             unusable when the binary stage matched), or with a
 *             hazard.model of its own from a hidden companion signal that
 *             asks it in parallel (vsr_signals_combine joins the two)
 * confidence = value = risk (confidence 0 when not matched).
 */
#include <strings.h>

#include "signals/signals-int.h"

/* the text a remote safety classifier reads (the reference's Vela default reads up to 8,192 tokens) */
#define SAFETY_MAX_RUNES 8192

typedef struct {
    vsr__remote_t remote;  /* model NULL: the built-in prompt guard */
    char **labels, **unsafe, **hz_labels, **hz_cats;
    size_t n_labels, n_unsafe, n_hz_labels, n_hz_cats;
    double threshold, hz_threshold;
    int hazard;            /* the hazard stage is read from this signal's own answer */
    int separate;          /* the hazard stage is its companion's (hazard.model): vsr_signals_combine applies it */
    int stage;             /* a companion: its answer is the hazard head's; value = the largest category score */
} safety_t;

static char **copy(const vsr_strlist_conf_t *l, size_t *n)
{
    char **v = vsr_calloc(l->n + 1, sizeof(char *));
    for (size_t i = 0; i < l->n; i++)
        v[i] = vsr_strdup(l->items[i]);
    *n = l->n;
    return v;
}

static void drop(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        vsr_free(v[i]);
    vsr_free(v);
}

void vsr__safety_free(void *state)
{
    safety_t *k = state;
    if (k == NULL)
        return;
    vsr__remote_free(&k->remote);
    drop(k->labels, k->n_labels);
    drop(k->unsafe, k->n_unsafe);
    drop(k->hz_labels, k->n_hz_labels);
    drop(k->hz_cats, k->n_hz_cats);
    vsr_free(k);
}

int vsr__safety_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    VSR_UNUSED(s);
    const vsr_sig_safety_conf_t *c = conf;
    if (c->model && (c->remote.protocol == 0 || c->remote.runtime_model == NULL)) {
        vsr_buf_printf(err, "%s: model %s is not a usable classifier\n", path, c->model);
        return VSR_ERR_INVALID;
    }
    if (c->has_hazard && c->hazard_model && (c->hazard_remote.protocol == 0 || c->hazard_remote.runtime_model == NULL)) {
        vsr_buf_printf(err, "%s: hazard.model %s is not a usable classifier\n", path, c->hazard_model);
        return VSR_ERR_INVALID;
    }
    safety_t *k = vsr_calloc(1, sizeof(*k));
    if (c->model)
        vsr__remote_init(&k->remote, &c->remote, SAFETY_MAX_RUNES, "safety");
    k->labels = copy(&c->labels, &k->n_labels);
    k->unsafe = copy(&c->unsafe_labels, &k->n_unsafe);
    k->threshold = c->threshold;
    k->separate = c->has_hazard && c->hazard_model != NULL;
    k->hazard = c->has_hazard && !k->separate;
    if (c->has_hazard) {
        k->hz_labels = copy(&c->hazard_labels, &k->n_hz_labels);
        k->hz_cats = copy(&c->hazard_categories, &k->n_hz_cats);
        k->hz_threshold = c->hazard_threshold;
    }
    *state = k;
    return VSR_OK;
}

void *vsr__safety_hazard_compile(const vsr_sig_safety_conf_t *c)
{
    if (!c->has_hazard || c->hazard_model == NULL || c->hazard_remote.protocol == 0)
        return NULL;
    safety_t *k = vsr_calloc(1, sizeof(*k));
    vsr__remote_init(&k->remote, &c->hazard_remote, SAFETY_MAX_RUNES, "safety");
    k->stage = 1;
    k->hz_labels = copy(&c->hazard_labels, &k->n_hz_labels);
    k->hz_cats = copy(&c->hazard_categories, &k->n_hz_cats);
    k->hz_threshold = c->hazard_threshold;
    return k;
}

double vsr__safety_hazard_threshold(const void *state)
{
    const safety_t *k = state;
    return k->separate ? k->hz_threshold : -1;
}

vsr_signal_result_t vsr__safety_eval(vsr__ctx_t *c, const void *state)
{
    VSR_UNUSED(c);
    VSR_UNUSED(state);
    vsr_signal_result_t r = {0};
    return r; /* without the classifier's answer: no match */
}

int vsr__safety_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out)
{
    const safety_t *k = state;
    vsr_slice_t text = c->in->text;
    if (text.len == 0)
        return 0; /* nothing to classify: no match */
    if (k->remote.model)
        vsr__remote_task(c->pool, &k->remote, text, NULL, out);
    else
        vsr_signals_guard_task(c->pool, text, VSR_JB_DEFAULT_METHOD, out);
    return 1;
}

static int find(char *const *v, size_t n, vsr_slice_t s)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(v[i]) == s.len && strncasecmp(v[i], s.p ? s.p : "", s.len) == 0)
            return 1;
    return 0;
}

int vsr__safety_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out)
{
    const safety_t *k = state;
    vsr_pool_t *pool = c->pool;
    double risk = 0, hz = -1;
    int known = 0;
    if (!k->remote.model) { /* the prompt guard: unsafe = its jailbreak score */
        double p;
        if (vsr_signals_guard_score(result, pool, &p) != VSR_OK)
            return VSR_ERR_INVALID;
        for (size_t i = 0; i < k->n_unsafe; i++)
            risk += strcasecmp(k->unsafe[i], "unsafe") == 0 ? p : 1.0 - p;
        known = 1;
    } else {
        vsr_buf_t conv;
        vsr_buf_init(&conv, 0);
        const char *why;
        vsr_json_t j;
        memset(&j, 0, sizeof(j));
        vsr_json_limits_t lim = {.max_depth = 8};
        int rc = VSR_ERR_INVALID;
        if (vsr_signals_remote_answer(result, 0, 0, pool, &conv, &why) != VSR_OK) {
            vsr_log_debug("signals", "safety classifier %s: the answer is unusable: %s", k->remote.model, why);
        } else if (vsr_json_parse(&j, conv.data, conv.len, &lim) == VSR_OK) {
            uint32_t arr;
            if (vsr_json_object_get(&j, 0, "labels", &arr) == VSR_OK) {
                uint32_t t = arr + 1;
                for (uint32_t i = 0; i < j.toks[arr].count; i++, t = j.toks[t].next) {
                    uint32_t lt, st;
                    vsr_slice_t label;
                    double p;
                    if (vsr_json_object_get(&j, t, "label", &lt) != VSR_OK ||
                        vsr_json_string(&j, lt, pool, &label) != VSR_OK ||
                        vsr_json_object_get(&j, t, "score", &st) != VSR_OK || vsr_json_number(&j, st, &p) != VSR_OK)
                        continue;
                    if (find(k->labels, k->n_labels, label) || (k->stage && find(k->hz_labels, k->n_hz_labels, label)))
                        known = 1;
                    if (find(k->unsafe, k->n_unsafe, label))
                        risk += p;
                    if ((k->hazard || k->stage) && find(k->hz_cats, k->n_hz_cats, label) && p > hz)
                        hz = p;
                    if ((k->hazard || k->stage) && hz < 0 && find(k->hz_labels, k->n_hz_labels, label))
                        hz = 0; /* the head answered; no category scored yet */
                }
                rc = VSR_OK;
            }
        }
        vsr_json_free(&j);
        if (rc == VSR_OK && c->pool)
            out->evidence = vsr_pool_dup_slice(c->pool, vsr_buf_slice(&conv));
        vsr_buf_free(&conv);
        if (rc != VSR_OK)
            return VSR_ERR_INVALID;
    }
    if (!known)
        return VSR_ERR_INVALID; /* an answer about other labels: the classification failed */
    if (k->stage) { /* a hazard head's answer: never a match of its own, its signal reads the score */
        out->matched = 0;
        out->confidence = 0;
        out->value = hz < 0 ? 0 : hz;
        return VSR_OK;
    }
    risk = VSR_MIN(1.0, risk);
    out->value = risk;
    out->matched = risk >= k->threshold;
    if (out->matched && k->hazard) {
        if (hz < 0)
            return VSR_ERR_INVALID; /* the hazard stage could not be read */
        out->matched = hz >= k->hz_threshold;
    }
    out->confidence = out->matched ? risk : 0;
    return VSR_OK;
}
