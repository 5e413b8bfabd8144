/*
 * preference.c — the `preferences` family (ref §1.9, condition type
 * `preference`): the routing text matched against the signal's examples
 * and description by embedding similarity.  The reference scores
 * preferences by contrastive/prototype embedding match (or asks an LLM);
 * vsr does the former only: the examples and the (non-blank) description
 * are the candidates of an embeddings signal with aggregation max, so they
 * are embedded once per compiled signal, grouped into prototypes and scored
 * as embedding.c says, and a score >= threshold matches.
 */
#include <stdio.h>

#include "signals/signals-int.h"

static int blank(const char *s)
{
    for (; s && *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
            return 0;
    return 1;
}

int vsr__preference_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_preference_conf_t *p = conf;
    int with_desc = !blank(p->description);
    size_t n = p->examples.n + (size_t)with_desc;
    if (n == 0 || n > VSR_EMB_MAX_CANDIDATES) {
        vsr_buf_printf(err, "%s: a preferences signal needs examples or a description (at most %d texts together)\n",
                       path, VSR_EMB_MAX_CANDIDATES);
        return VSR_ERR_INVALID;
    }
    if (with_desc && strlen(p->description) > VSR_EMB_MAX_CANDIDATE_BYTES) {
        vsr_buf_printf(err, "%s: a description is at most %d bytes\n", path, VSR_EMB_MAX_CANDIDATE_BYTES);
        return VSR_ERR_INVALID;
    }
    char **items = vsr_calloc(n, sizeof(char *));
    for (size_t i = 0; i < p->examples.n; i++)
        items[i] = p->examples.items[i];
    if (with_desc)
        items[n - 1] = p->description;
    vsr_sig_embedding_conf_t e;
    memset(&e, 0, sizeof(e));
    e.name = p->name;
    e.threshold = p->threshold;
    e.candidates.items = items;
    e.candidates.n = n;
    e.aggregation = VSR_EMB_AGG_MAX;
    int rc = vsr__embedding_compile(s, &e, path, state, err); /* copies the texts */
    vsr_free(items);
    return rc;
}
