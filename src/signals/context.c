/* context.c — context signals: the request's token estimate, ceil(bytes / 4)
 * over all messages' text, within [min_tokens, max_tokens] (both inclusive;
 * no max_tokens = unbounded).  Confidence 1.0 on a match; the value is the
 * estimate. */
#include "signals/signals-int.h"

typedef struct {
    uint64_t min, max;
    int has_max;
} ctx_t;

int vsr__context_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_context_conf_t *cc = conf;
    VSR_UNUSED(s);
    if (cc->has_max_tokens && cc->max_tokens < cc->min_tokens) {
        vsr_buf_printf(err, "%s: signal \"%s\": max_tokens %llu is below min_tokens %llu\n", path, cc->name,
                       (unsigned long long)cc->max_tokens, (unsigned long long)cc->min_tokens);
        return VSR_ERR_INVALID;
    }
    ctx_t *c = vsr_calloc(1, sizeof(*c));
    c->min = cc->min_tokens;
    c->max = cc->max_tokens;
    c->has_max = cc->has_max_tokens;
    *state = c;
    return VSR_OK;
}

vsr_signal_result_t vsr__context_eval(vsr__ctx_t *c, const void *state)
{
    const ctx_t *cx = state;
    uint64_t n = vsr_signals_token_estimate(c->in->chat);
    vsr_signal_result_t r = {0};
    r.value = (double)n;
    r.matched = n >= cx->min && (!cx->has_max || n <= cx->max);
    r.confidence = r.matched ? 1.0 : 0.0;
    return r;
}

void vsr__context_free(void *state)
{
    vsr_free(state);
}
