/* language.c — language signals: the routing text's language, detected by
 * CLD2 (Debian's libcld2), against the signal's name, an ISO 639-1 code.
 *
 * The name matches the detected code's primary subtag ("zh" matches both
 * "zh" and "zh-Hant") or the whole code ("zh-Hant" only traditional
 * Chinese), ignoring case; CLD2's legacy codes are mapped to ISO 639-1 (iw ->
 * he, jw -> jv).  Confidence = the share of the text CLD2 attributes to the
 * language (its percent / 100) when CLD2 calls the result reliable; an
 * unreliable guess (typically a couple of words) scores a quarter of that,
 * below the default threshold.  Match when the language is the signal's and
 * the confidence reaches the threshold (0 -> 0.3).  Empty text matches
 * nothing.  The value is the confidence.  Detection runs once per request
 * (memo) on the first KiB of the text: CLD2 costs about 20 ns per byte, and
 * a kilobyte settles the language of a prompt as well as the whole would
 * (CLD2 reports the language holding most of the text). */
#include <strings.h>

#include "signals/signals-int.h"

#define LANG_MAX_BYTES 1024 /* see above */

typedef struct {
    char *name;
    double threshold;
} lang_t;

int vsr__language_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err)
{
    const vsr_sig_language_conf_t *lc = conf;
    VSR_UNUSED(s);
    if (lc->threshold < 0 || lc->threshold > 1) {
        vsr_buf_printf(err, "%s.threshold: signal \"%s\": expected a value in [0, 1]\n", path, lc->name);
        return VSR_ERR_INVALID;
    }
    lang_t *l = vsr_calloc(1, sizeof(*l));
    l->name = vsr_strdup(lc->name);
    l->threshold = lc->threshold > 0 ? lc->threshold : 0.3;
    *state = l;
    return VSR_OK;
}

static void detect(vsr__ctx_t *c)
{
    vsr__memo_t *m = c->m;
    if (m->lang_done)
        return;
    m->lang_done = 1;
    const char *text = c->in->text.p;
    size_t len = c->in->text.len;
    if (!text || len == 0)
        return;
    if (len > LANG_MAX_BYTES) {
        len = LANG_MAX_BYTES;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80)
            len--; /* cut on a rune boundary */
    }
    /* CLD2 trusts its input more than it should (invalid UTF-8 crashed it
     * under fuzzing), so it gets a copy holding only interchange-valid UTF-8:
     * anything else becomes a space; zero padding follows the text. */
    char clean[LANG_MAX_BYTES + 16];
    size_t o = 0, i = 0, adv;
    while (i < len) {
        uint32_t cp = vsr__utf8_decode(text + i, len - i, &adv);
        int bad = (cp == 0xFFFD && adv == 1) || (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') ||
                  (cp >= 0x7F && cp <= 0x9F) || (cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE;
        if (bad) {
            clean[o++] = ' ';
        } else {
            memcpy(clean + o, text + i, adv);
            o += adv;
        }
        i += adv;
    }
    memset(clean + o, 0, sizeof(clean) - o);
    char code[sizeof(m->lang_code)];
    int percent, reliable;
    if (!vsr__cld2_detect(clean, o, code, sizeof(code), &percent, &reliable))
        return;
    for (char *p = code; *p; p++) {
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p + 32);
    }
    static const char *const legacy[][2] = {{"iw", "he"}, {"jw", "jv"}, {"in", "id"}, {"ji", "yi"}};
    for (size_t l = 0; l < VSR_ARRAY_LEN(legacy); l++) {
        size_t n = strlen(legacy[l][0]);
        if (strncmp(code, legacy[l][0], n) == 0 && (code[n] == '\0' || code[n] == '-')) {
            memcpy(code, legacy[l][1], n);
            break;
        }
    }
    memcpy(m->lang_code, code, sizeof(code));
    m->lang_found = 1;
    m->lang_conf = (double)percent / 100.0 * (reliable ? 1.0 : 0.25);
}

static int code_matches(const char *want, const char *code)
{
    if (strcasecmp(want, code) == 0)
        return 1;
    size_t primary = strcspn(code, "-_");
    return strlen(want) == primary && strncasecmp(want, code, primary) == 0;
}

vsr_signal_result_t vsr__language_eval(vsr__ctx_t *c, const void *state)
{
    const lang_t *l = state;
    vsr_signal_result_t r = {0};
    detect(c);
    if (!c->m->lang_found || !code_matches(l->name, c->m->lang_code))
        return r;
    r.value = c->m->lang_conf;
    if (c->m->lang_conf >= l->threshold) {
        r.matched = 1;
        r.confidence = c->m->lang_conf;
    }
    return r;
}

void vsr__language_free(void *state)
{
    lang_t *l = state;
    if (!l)
        return;
    vsr_free(l->name);
    vsr_free(l);
}
