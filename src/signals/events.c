/* events.c — the events signal (docs/signals.md "Events"): event words in
 * the routing text, as the reference's event classifier reads them.
 *
 * The text is what the model-backed families see of it (VSR__MODEL_MAX_RUNES
 * runes: head, middle and tail).  Each configured group is one criterion,
 * one case-insensitive regex of its entries as whole words:
 *   event_types, action_codes  (?i)(?:\b<entry>\b|...), entries quoted; as
 *                              for keywords, a side gets its \b only where
 *                              the entry has a word character ("c++")
 *   severities                 the same over the valid levels (critical,
 *                              high, medium, low), trimmed and lower-cased
 *   temporal: true             the fixed urgency words of VSR__EVENT_TEMPORAL
 * `\b` and `\w` are ASCII, as Go's RE2.  The signal matches when one
 * criterion is met; confidence 0.5 + 0.5 x met / configured; value: the
 * number of criteria met.
 */
#include <stdio.h>

#include "signals/signals-int.h"

/* the reference's (Go RE2, where '.' is any rune: "time-sensitive",
 * "time sensitive" and "critical window" all match) */
#define VSR__EVENT_TEMPORAL "\\b(?:urgent|immediate|asap|deadline|time.sensitive|now|critical.window)\\b"

enum { EV_TYPES, EV_SEVERITIES, EV_ACTIONS, EV_TEMPORAL, EV_GROUPS };

typedef struct {
    pcre2_code *re[EV_GROUPS]; /* NULL: the group is not configured */
    size_t configured;
} ev_t;

/* Appends s with every ASCII punctuation byte escaped (Go's QuoteMeta). */
static void quote_meta(vsr_buf_t *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x80 && !vsr__is_word_ascii(ch) && ch != ' ')
            vsr_buf_append_cstr(b, "\\");
        vsr_buf_append(b, (const char *)&ch, 1);
    }
}

static void trim(const char **s, size_t *len)
{
    while (*len > 0 && (**s == ' ' || **s == '\t' || **s == '\n' || **s == '\r')) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t' || (*s)[*len - 1] == '\n' ||
                        (*s)[*len - 1] == '\r'))
        (*len)--;
}

/* One group's regex, or NULL when no entry of it can match.  Entries are
 * trimmed (the reference skips blank ones); severities are the levels. */
static int group_re(const vsr_strlist_conf_t *l, int severities, const char *path, pcre2_code **out, vsr_buf_t *err)
{
    static const char *const levels[] = {"critical", "high", "medium", "low"};
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "(?:");
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        const char *s = l->items[i];
        size_t len = strlen(s);
        if (severities) {
            int lv = vsr_event_severity_level(s);
            if (lv < 0)
                continue;
            s = levels[lv];
            len = strlen(s);
        } else {
            trim(&s, &len);
            if (len == 0)
                continue;
        }
        if (n++)
            vsr_buf_append_cstr(&b, "|");
        /* a side is a word boundary only where the entry has a word character ("c++" matches "c++ code") */
        if (vsr__is_word_ascii((unsigned char)s[0]))
            vsr_buf_append_cstr(&b, "\\b");
        quote_meta(&b, s, len);
        if (vsr__is_word_ascii((unsigned char)s[len - 1]))
            vsr_buf_append_cstr(&b, "\\b");
    }
    vsr_buf_append_cstr(&b, ")");
    vsr_buf_append(&b, "", 1);
    int rc = VSR_OK;
    *out = NULL;
    if (n > 0) {
        vsr_buf_t msg;
        vsr_buf_init(&msg, 0);
        *out = vsr__re_compile(b.data, 1, &msg);
        if (*out == NULL) {
            vsr_buf_printf(err, "%s: an entry does not compile: %.*s\n", path, (int)msg.len, msg.data ? msg.data : "");
            rc = VSR_ERR_INVALID;
        }
        vsr_buf_free(&msg);
    }
    vsr_buf_free(&b);
    return rc;
}

void vsr__event_free(void *state)
{
    ev_t *e = state;
    if (e == NULL)
        return;
    for (int g = 0; g < EV_GROUPS; g++)
        pcre2_code_free(e->re[g]);
    vsr_free(e);
}

int vsr__event_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_event_conf_t *ec = conf;
    VSR_UNUSED(s);
    ev_t *e = vsr_calloc(1, sizeof(*e));
    const vsr_strlist_conf_t *l[3] = {&ec->event_types, &ec->severities, &ec->action_codes};
    int rc = VSR_OK;
    for (int g = 0; g < 3 && rc == VSR_OK; g++)
        rc = group_re(l[g], g == EV_SEVERITIES, path, &e->re[g], err);
    if (rc == VSR_OK && ec->temporal) {
        vsr_buf_t msg;
        vsr_buf_init(&msg, 0);
        e->re[EV_TEMPORAL] = vsr__re_compile(VSR__EVENT_TEMPORAL, 1, &msg);
        VSR_BUG_ON(e->re[EV_TEMPORAL] == NULL);
        vsr_buf_free(&msg);
    }
    for (int g = 0; g < EV_GROUPS; g++)
        e->configured += e->re[g] != NULL;
    if (rc == VSR_OK && e->configured == 0) {
        vsr_buf_printf(err, "%s: an events signal needs an entry that can match\n", path);
        rc = VSR_ERR_INVALID;
    }
    if (rc != VSR_OK) {
        vsr__event_free(e);
        return rc;
    }
    *state = e;
    return VSR_OK;
}

vsr_signal_result_t vsr__event_eval(vsr__ctx_t *c, const void *state)
{
    const ev_t *e = state;
    vsr_signal_result_t r = {0};
    vsr_slice_t text = vsr__text_window(c->pool, c->in->text, VSR__MODEL_MAX_RUNES);
    pcre2_match_data *md = vsr__memo_md(c);
    size_t met = 0;
    for (int g = 0; g < EV_GROUPS; g++)
        met += e->re[g] != NULL && vsr__re_match(e->re[g], text.p, text.len, md);
    r.matched = met > 0;
    r.confidence = met ? 0.5 + 0.5 * (double)met / (double)e->configured : 0.0;
    r.value = (double)met;
    return r;
}
