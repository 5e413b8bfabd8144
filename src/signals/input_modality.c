/* input_modality.c — the input_modality signal (docs/signals.md "Input
 * modality"): the content parts of one modality in the user messages
 * (system, assistant and tool messages never count), as the request view
 * counts them (json.h, vsr_chat_message_t.n_parts).  No model.  Matches
 * when the count is at least 1, confidence 1.0; the value is the count
 * (0 included). */
#include "signals/signals-int.h"

typedef struct {
    int modality;
} im_t;

int vsr__input_modality_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_input_modality_conf_t *c = conf;
    VSR_UNUSED(s);
    if (c->modality < VSR_MODALITY_TEXT || c->modality > VSR_MODALITY_VIDEO) {
        vsr_buf_printf(err, "%s: modality must be text, image, audio or video\n", path);
        return VSR_ERR_INVALID;
    }
    im_t *m = vsr_calloc(1, sizeof(*m));
    m->modality = c->modality;
    *state = m;
    return VSR_OK;
}

void vsr__input_modality_free(void *state)
{
    vsr_free(state);
}

vsr_signal_result_t vsr__input_modality_eval(vsr__ctx_t *c, const void *state)
{
    const im_t *m = state;
    vsr_signal_result_t r = {0};
    const vsr_chat_view_t *chat = c->in->chat;
    uint64_t n = 0;
    for (size_t i = 0; chat && i < chat->n_messages; i++)
        if (chat->messages[i].role == VSR_ROLE_USER)
            n += chat->messages[i].n_parts[m->modality];
    r.matched = n > 0;
    r.confidence = r.matched ? 1.0 : 0.0;
    r.value = (double)n;
    return r;
}
