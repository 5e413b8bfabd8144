/*
 * domain — the built-in domain classifier: the USE-lite embedding of a text
 * (models.h) through a linear softmax head (head.h) trained on the 14
 * MMLU-Pro categories (data/domains/domain.head, docs/signals.md "Domains").
 * This is the call the model runtime makes for a classify task with model
 * "domain", and the one bench/quality/domains.c measures.
 *
 * Ownership and threading: borrows the model and the head (both immutable,
 * shareable across threads); `scratch` is the caller's per-thread USE-lite
 * scratch (or NULL).  Labels in the result point into the head.
 *
 * Return codes: VSR_OK; VSR_ERR_INVALID for text with nothing to embed
 * (empty or white space only: the caller falls back to "other") and for a
 * head that is not a USE-lite domain head (vsr_domain_check); the embedding's
 * VSR_ERR_NOT_FOUND / VSR_ERR_NOMEM.
 */
#ifndef VSR_MODELS_DOMAIN_H
#define VSR_MODELS_DOMAIN_H

#include "models/head.h"
#include "models/models.h"

#define VSR_DOMAIN_FALLBACK "other" /* the reference's fallback_category */

typedef struct {
    const char *label; /* the head's */
    float score;       /* probability */
} vsr_domain_score_t;

/* VSR_OK when h reads USE-lite embeddings (width VSR_USE_DIM) and has an
 * "other" class; else VSR_ERR_INVALID.  Call once after loading. */
int vsr_domain_check(const vsr_head_t *h);

/* Every class of h with its probability for `text`, highest first (ties in
 * the head's class order): out[] holds vsr_head_classes(h) entries, *n is
 * set to that count on VSR_OK (0 otherwise). */
int vsr_domain_classify(const vsr_use_model_t *m, const vsr_head_t *h, const char *text, size_t len,
                        vsr_use_scratch_t *scratch, vsr_domain_score_t *out, size_t *n);

#endif
