/* regex.c — PCRE2 with the options that bring it closest to the reference's
 * Go (RE2) regexps: UTF mode, \b \w \d ASCII-only (no UCP, like Go), `$`
 * only at the very end, and tolerance of invalid UTF-8 in the subject. */
#include <stdio.h>

#include "signals/signals-int.h"

pcre2_code *vsr__re_compile(const char *pat, int caseless, vsr_buf_t *msg)
{
    int errcode;
    PCRE2_SIZE erroff;
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
    if (caseless)
        opts |= PCRE2_CASELESS;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR text[256];
        if (pcre2_get_error_message(errcode, text, sizeof(text)) < 0)
            snprintf((char *)text, sizeof(text), "error %d", errcode);
        vsr_buf_printf(msg, "%s at offset %zu", (const char *)text, (size_t)erroff);
        return NULL;
    }
    /* JIT where the platform has it; the interpreter otherwise */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

int vsr__re_match(const pcre2_code *re, const char *s, size_t len, pcre2_match_data *md)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)(s ? s : ""), len, 0, 0, md, NULL);
    return rc >= 0;
}

static size_t rune_width(const char *s, size_t len, size_t at)
{
    size_t adv;
    (void)vsr__utf8_decode(s + at, len - at, &adv);
    return adv;
}

size_t vsr__re_count(const pcre2_code *re, const char *s, size_t len, pcre2_match_data *md)
{
    if (!s)
        s = "";
    size_t count = 0, off = 0;
    size_t prev_end = SIZE_MAX;
    while (off <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, off, 0, md, NULL);
        if (rc < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t st = ov[0], en = ov[1];
        if (en < st) /* \K tricks can report an end before the start */
            en = st;
        /* Go ignores an empty match that abuts the previous match */
        if (!(en == st && st == prev_end)) {
            count++;
            prev_end = en;
        }
        if (en > st) {
            off = en;
        } else {
            if (en >= len)
                break;
            off = en + rune_width(s, len, en);
        }
    }
    return count;
}
