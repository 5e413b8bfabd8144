/* text.c — UTF-8 repair for text that leaves the process in logs and metrics. */
#include "obs-int.h"

/* Length of the well-formed sequence at s[0..n), or 0 when s[0] does not
 * start one. */
static size_t seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

size_t vsr__obs_utf8_clean(vsr_slice_t in, size_t max_in, char *out)
{
    const unsigned char *s = (const unsigned char *)in.p;
    size_t i = 0, o = 0;
    while (i < in.len) {
        size_t k = seq_len(s + i, in.len - i);
        if (k == 0) {
            if (i + 1 > max_in)
                break;
            out[o++] = (char)0xef, out[o++] = (char)0xbf, out[o++] = (char)0xbd;
            i++;
            continue;
        }
        if (i + k > max_in)
            break;
        memcpy(out + o, s + i, k);
        o += k;
        i += k;
    }
    return o;
}
