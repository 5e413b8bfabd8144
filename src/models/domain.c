/* domain.c — see domain.h */
#include "models/domain.h"

int vsr_domain_check(const vsr_head_t *h)
{
    if (vsr_head_dim(h) != VSR_USE_DIM || vsr_head_label_index(h, VSR_DOMAIN_FALLBACK) < 0) return VSR_ERR_INVALID;
    return VSR_OK;
}

int vsr_domain_classify(const vsr_use_model_t *m, const vsr_head_t *h, const char *text, size_t len,
                        vsr_use_scratch_t *scratch, vsr_domain_score_t *out, size_t *n)
{
    *n = 0;
    if (vsr_head_dim(h) != VSR_USE_DIM) return VSR_ERR_INVALID;
    float x[VSR_USE_DIM], p[VSR_HEAD_MAX_CLASSES];
    size_t idx[VSR_HEAD_MAX_CLASSES], c = vsr_head_classes(h);
    int rc = vsr_use_embed(m, text, len, x, scratch);
    if (rc != VSR_OK) return rc;
    if ((rc = vsr_head_predict_text(h, x, VSR_USE_DIM, text, len, p)) != VSR_OK) return rc;
    vsr_head_top_k(p, c, c, idx);
    for (size_t i = 0; i < c; i++) out[i] = (vsr_domain_score_t){vsr_head_label(h, idx[i]), p[idx[i]]};
    *n = c;
    return VSR_OK;
}
