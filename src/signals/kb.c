/*
 * kb.c — the `kb` family (ref §1.9, condition type `kb`): the routing
 * text's nearest entries of a knowledge base (global.model_catalog.kbs[]).
 *
 * A kb signal compiles to an embeddings signal's state: the kb's entries
 * whose label (or group, as target.kind says) is target.value are the
 * candidates, scored by the best cosine (aggregation any).
 *  - match: best (the default): the other entries are negative candidates,
 *    so the signal matches when the single nearest entry is a target one
 *    (a tie goes to the other entries), and, with a threshold, when that
 *    cosine is >= it;
 *  - match: any: a target entry's cosine >= threshold (default 0.5).
 * The entries are embedded once per compiled signal, as embedding.c says;
 * the score and confidence are the nearest target entry's cosine.
 */
#include <stdio.h>

#include "signals/signals-int.h"

static const vsr_kb_conf_t *find_kb(const vsr_modules_conf_t *m, const char *name)
{
    for (size_t i = 0; m && name && i < m->n_kbs; i++)
        if (m->kbs[i].name && strcmp(m->kbs[i].name, name) == 0)
            return &m->kbs[i];
    return NULL;
}

size_t vsr__kb_entries(const vsr_modules_conf_t *m, const char *kb)
{
    const vsr_kb_conf_t *k = find_kb(m, kb);
    return k ? k->n_entries : 0;
}

int vsr__kb_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_kb_conf_t *c = conf;
    const vsr_kb_conf_t *kb = find_kb(s->modules, c->kb);
    if (kb == NULL) {
        vsr_buf_printf(err, "%s: kb \"%s\" is not declared in global.model_catalog.kbs\n", path, c->kb ? c->kb : "");
        return VSR_ERR_INVALID;
    }
    char **pos = vsr_calloc(kb->n_entries + 1, sizeof(char *));
    char **neg = vsr_calloc(kb->n_entries + 1, sizeof(char *));
    size_t np = 0, nn = 0;
    for (size_t i = 0; i < kb->n_entries; i++) {
        const vsr_kb_entry_conf_t *e = &kb->entries[i];
        const char *v = c->target.kind == VSR_KB_TARGET_GROUP ? e->group : e->label;
        if (v && c->target.value && strcmp(v, c->target.value) == 0)
            pos[np++] = e->text;
        else
            neg[nn++] = e->text;
    }
    int rc = VSR_ERR_INVALID;
    if (np == 0) {
        vsr_buf_printf(err, "%s: no entry of kb \"%s\" has %s \"%s\"\n", path, kb->name,
                       c->target.kind == VSR_KB_TARGET_GROUP ? "group" : "label",
                       c->target.value ? c->target.value : "");
    } else {
        vsr_sig_embedding_conf_t e;
        memset(&e, 0, sizeof(e));
        e.name = c->name;
        e.aggregation = VSR_EMB_AGG_ANY;
        e.candidates.items = pos;
        e.candidates.n = np;
        if (c->match == VSR_KB_MATCH_BEST) {
            e.negative_candidates.items = neg;
            e.negative_candidates.n = nn;
            e.threshold = c->has_threshold ? c->threshold : -1; /* the nearest entry decides alone */
        } else {
            e.threshold = c->has_threshold ? c->threshold : VSR_KB_DEFAULT_THRESHOLD;
        }
        e.min_score_threshold = e.threshold;
        rc = vsr__embedding_compile(s, &e, path, state, err); /* copies the texts */
    }
    vsr_free(pos);
    vsr_free(neg);
    return rc;
}
