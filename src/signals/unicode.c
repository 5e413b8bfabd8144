/* unicode.c — UTF-8 and Unicode helpers for the text signals. */
#include <locale.h>
#include <pthread.h>
#include <strings.h>
#include <wctype.h>

#include "signals/signals-int.h"

/* The C.UTF-8 locale carries full Unicode classification and case tables;
 * it is built into glibc, so newlocale() does not depend on what locales the
 * machine has generated. */
static locale_t utf8_locale;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;

static void utf8_locale_init(void)
{
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!utf8_locale)
        vsr_log_warn("signals", "C.UTF-8 locale unavailable: non-ASCII letters are not classified");
}

static locale_t uloc(void)
{
    pthread_once(&utf8_once, utf8_locale_init);
    return utf8_locale;
}

uint32_t vsr__utf8_decode(const char *p, size_t len, size_t *adv)
{
    const unsigned char *s = (const unsigned char *)p;
    unsigned char c = s[0];
    uint32_t cp, min;
    size_t n;
    if (c < 0x80) {
        *adv = 1;
        return c;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2; cp = c & 0x1F; min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3; cp = c & 0x0F; min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4; cp = c & 0x07; min = 0x10000;
    } else {
        *adv = 1;
        return 0xFFFD;
    }
    if (len < n) {
        *adv = 1;
        return 0xFFFD;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *adv = 1;
            return 0xFFFD;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        *adv = 1;
        return 0xFFFD;
    }
    *adv = n;
    return cp;
}

uint32_t vsr__utf8_prev(const char *s, size_t pos)
{
    size_t start = pos - 1;
    /* back over at most three continuation bytes to a lead byte */
    while (start > 0 && pos - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80)
        start--;
    size_t adv;
    uint32_t cp = vsr__utf8_decode(s + start, pos - start, &adv);
    if (start + adv != pos)
        return 0xFFFD; /* the byte before pos is not the end of a valid rune */
    return cp;
}

size_t vsr__utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int vsr__is_alnum(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    locale_t l = uloc();
    if (!l || cp == 0xFFFD)
        return 0;
    return iswalnum_l((wint_t)cp, l) != 0;
}

int vsr__is_space(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= '\t' && cp <= '\r');
    locale_t l = uloc();
    return cp == 0x85 || cp == 0xA0 || (l && iswspace_l((wint_t)cp, l));
}

int vsr__is_cjk(uint32_t cp)
{
    /* Unicode script ranges of Han, Hiragana, Katakana and Hangul */
    static const uint32_t ranges[][2] = {
        {0x1100, 0x11FF},   {0x2E80, 0x2E99},   {0x2E9B, 0x2EF3},   {0x2F00, 0x2FD5},   {0x3005, 0x3005},
        {0x3007, 0x3007},   {0x3021, 0x3029},   {0x302E, 0x302F},   {0x3038, 0x303B},   {0x3041, 0x3096},
        {0x309D, 0x309F},   {0x30A1, 0x30FA},   {0x30FD, 0x30FF},   {0x3131, 0x318E},   {0x31F0, 0x31FF},
        {0x3200, 0x321E},   {0x3260, 0x327E},   {0x32D0, 0x32FE},   {0x3300, 0x3357},   {0x3400, 0x4DBF},
        {0x4E00, 0x9FFF},   {0xA960, 0xA97C},   {0xAC00, 0xD7A3},   {0xD7B0, 0xD7C6},   {0xD7CB, 0xD7FB},
        {0xF900, 0xFA6D},   {0xFA70, 0xFAD9},   {0xFF66, 0xFF6F},   {0xFF71, 0xFF9D},   {0xFFA0, 0xFFBE},
        {0xFFC2, 0xFFDC},   {0x16FE2, 0x16FE3}, {0x1AFF0, 0x1B122}, {0x1F200, 0x1F200}, {0x20000, 0x2A6DF},
        {0x2A700, 0x2EE5D}, {0x2F800, 0x2FA1D}, {0x30000, 0x323AF},
    };
    if (cp < 0x1100)
        return 0;
    size_t lo = 0, hi = VSR_ARRAY_LEN(ranges);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < ranges[mid][0])
            hi = mid;
        else if (cp > ranges[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int vsr__has_cjk(const char *s, size_t len)
{
    size_t i = 0, adv;
    while (i < len) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        if (vsr__is_cjk(vsr__utf8_decode(s + i, len - i, &adv)))
            return 1;
        i += adv;
    }
    return 0;
}

uint32_t vsr__to_lower(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    locale_t l = uloc();
    if (!l)
        return cp;
    uint32_t lo = (uint32_t)towlower_l((wint_t)cp, l);
    return lo < 0x80 ? cp : lo;
}

char *vsr__fold(const char *s, size_t len, size_t *out_len, vsr_pool_t *pool)
{
    /* a rune's lower case takes at most one byte more than the rune (e.g. the
     * two-byte U+023A becomes the three-byte U+2C65), so 2x is ample */
    size_t cap = len * 2 + 1;
    char *out = pool ? vsr_pool_alloc(pool, cap) : vsr_malloc(cap);
    size_t i = 0, o = 0, adv;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            out[o++] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
            i++;
            continue;
        }
        uint32_t cp = vsr__utf8_decode(s + i, len - i, &adv);
        if (cp == 0xFFFD && adv == 1) {
            out[o++] = (char)c; /* keep invalid bytes as they are */
        } else {
            o += vsr__utf8_encode(vsr__to_lower(cp), out + o);
        }
        i += adv;
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

size_t vsr__runes(const char *s, size_t len, int lower, uint32_t *out)
{
    size_t i = 0, n = 0, adv;
    while (i < len) {
        uint32_t cp = vsr__utf8_decode(s + i, len - i, &adv);
        out[n++] = lower ? vsr__to_lower(cp) : cp;
        i += adv;
    }
    return n;
}

uint64_t vsr__hash_runes(const uint32_t *r, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    for (size_t i = 0; i < n; i++) {
        h ^= r[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

int vsr__signal_lookup(const char *v, const char *const *names, size_t n)
{
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(v, names[i]) == 0)
            return (int)i;
    return -1;
}

/* Appends runes [from, to) of s (re-encoded: an invalid byte becomes U+FFFD). */
static void append_runes(vsr_buf_t *b, const char *s, size_t len, size_t from, size_t to)
{
    size_t pos = 0, r = 0;
    while (pos < len && r < to) {
        size_t adv = 1;
        uint32_t cp = vsr__utf8_decode(s + pos, len - pos, &adv);
        if (r >= from) {
            char u[4];
            vsr_buf_append(b, u, vsr__utf8_encode(cp, u));
        }
        pos += adv;
        r++;
    }
}

vsr_slice_t vsr__text_window(vsr_pool_t *pool, vsr_slice_t text, size_t max_runes)
{
    size_t runes = 0;
    int valid = 1;
    for (size_t pos = 0, adv; pos < text.len; pos += adv, runes++) {
        vsr__utf8_decode(text.p + pos, text.len - pos, &adv);
        valid &= (unsigned char)text.p[pos] < 0x80 || adv > 1; /* an invalid byte decodes alone */
    }
    if (valid && runes <= max_runes)
        return text;
    vsr_buf_t t;
    vsr_buf_init(&t, 0);
    if (runes <= max_runes) {
        append_runes(&t, text.p, text.len, 0, runes);
    } else {
        size_t third = max_runes / 3, mid = (runes - third) / 2;
        append_runes(&t, text.p, text.len, 0, third);
        vsr_buf_append_cstr(&t, VSR__OMISSION);
        append_runes(&t, text.p, text.len, mid, mid + third);
        vsr_buf_append_cstr(&t, VSR__OMISSION);
        append_runes(&t, text.p, text.len, runes - (max_runes - 2 * third), runes);
    }
    vsr_slice_t out = vsr_pool_dup_slice(pool, vsr_buf_slice(&t));
    vsr_buf_free(&t);
    return out;
}

vsr_slice_t vsr__text_json(vsr_pool_t *pool, vsr_slice_t text, size_t max_runes)
{
    vsr_buf_t q;
    vsr_buf_init(&q, 0);
    vsr_buf_append_json_string(&q, vsr__text_window(pool, text, max_runes));
    vsr_slice_t out = vsr_pool_dup_slice(pool, vsr_buf_slice(&q));
    vsr_buf_free(&q);
    return out;
}
