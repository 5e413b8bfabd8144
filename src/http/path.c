/*
 * path.c — request-target normalisation (see http.h).
 *
 * One pass over the path, segment by segment: each segment is
 * percent-decoded into the output (unreserved characters decoded, other
 * escapes kept with upper-case hex), then judged on its decoded bytes, so an
 * encoded dot-segment is a dot-segment and an encoded '/' never becomes a
 * separator.  The output is its own segment stack: ".." pops back to the
 * previous '/'.  The query is kept as sent.
 */
#include <string.h>

#include "http/http.h"
#include "http/http_int.h"

static int is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A byte that may stand raw in a path or query: visible ASCII or obs-text,
 * but no fragment ('#') and no backslash (which some servers read as '/'). */
static int raw_ok(unsigned char c)
{
    return c > 0x20 && c != 0x7f && c != '#' && c != '\\';
}

static int authority_ok(unsigned char c)
{
    return is_unreserved(c) || strchr("!$&'()*+,;=:[]%", c) != NULL;
}

static int fail(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return VSR_ERR_INVALID;
}

int vsr_http_normalize_target(vsr_slice_t target, char *out, size_t cap, size_t *out_len, vsr_slice_t *authority,
                              const char **why)
{
    static const char hex[] = "0123456789ABCDEF";
    int encoded_sep = 0;
    const unsigned char *s = (const unsigned char *)target.p;
    size_t n = target.len;
    if (authority)
        *authority = VSR_SLICE_NULL;
    if (why)
        *why = NULL;
    if (cap < n)
        return VSR_ERR_TOO_BIG;
    if (n == 0)
        return fail(why, "empty request-target");
    if (n == 1 && s[0] == '*') { /* asterisk-form (OPTIONS) */
        out[0] = '*';
        *out_len = 1;
        return VSR_OK;
    }

    size_t i = 0;
    if (s[0] != '/') {
        /* absolute-form (RFC 9112 §3.2.2): the path is taken from it, the
         * authority replaces Host */
        size_t sl = 0;
        if (n >= 7 && vsr_slice_case_eq_cstr(vsr_slice(target.p, 7), "http://"))
            sl = 7;
        else if (n >= 8 && vsr_slice_case_eq_cstr(vsr_slice(target.p, 8), "https://"))
            sl = 8;
        else
            return fail(why, "invalid request-target");
        size_t a = sl;
        while (a < n && s[a] != '/' && s[a] != '?' && s[a] != '#') {
            if (s[a] == '@')
                return fail(why, "userinfo in request-target");
            if (!authority_ok(s[a]))
                return fail(why, "invalid authority in request-target");
            a++;
        }
        if (a == sl)
            return fail(why, "empty authority in request-target");
        if (authority)
            *authority = vsr_slice(target.p + sl, a - sl);
        i = a;
    }

    /* the path: [i, pe) */
    size_t pe = i;
    while (pe < n && s[pe] != '?')
        pe++;
    size_t o = 0;
    if (i == pe) { /* absolute-form without a path: "/" */
        out[o++] = '/';
    } else if (s[i] != '/') {
        return fail(why, "invalid request-target");
    }
    while (i < pe) {
        while (i < pe && s[i] == '/') /* merge duplicate slashes */
            i++;
        size_t seg = o + 1; /* the decoded segment goes after a '/' */
        out[o] = '/';
        size_t w = seg;
        while (i < pe && s[i] != '/') {
            unsigned char c = s[i];
            if (c == '%') {
                int hi = i + 2 < pe ? hexval(s[i + 1]) : -1;
                int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
                if (lo < 0)
                    return fail(why, "invalid percent-encoding in path");
                unsigned char d = (unsigned char)(hi << 4 | lo);
                if (d == 0)
                    return fail(why, "encoded NUL in path");
                if (d == '/' || d == '\\')
                    encoded_sep = 1; /* kept encoded: data, not a separator */
                if (is_unreserved(d)) {
                    out[w++] = (char)d;
                } else {
                    out[w++] = '%';
                    out[w++] = hex[d >> 4];
                    out[w++] = hex[d & 15];
                }
                i += 3;
                continue;
            }
            if (!raw_ok(c))
                return fail(why, "invalid character in path");
            out[w++] = (char)c;
            i++;
        }
        size_t len = w - seg;
        int last = i >= pe;
        if (len == 0 || (len == 1 && out[seg] == '.')) {
            /* an empty segment (trailing slash) or ".": only a trailing '/' stays */
            if (last)
                o++;
        } else if (len == 2 && out[seg] == '.' && out[seg + 1] == '.') {
            if (o == 0)
                return fail(why, "path escapes the root");
            while (o > 0 && out[o - 1] != '/')
                o--;
            o--; /* back onto the previous segment's '/' */
            if (last)
                o++;
        } else {
            o = w;
        }
    }
    if (o == 0)
        out[o++] = '/'; /* "/.", "/a/.." without a trailing segment cannot reach here, but stay safe */

    /* the query, as sent */
    for (size_t q = pe; q < n; q++) {
        if (!raw_ok(s[q]))
            return fail(why, "invalid character in query");
        out[o++] = (char)s[q];
    }
    *out_len = o;
    if (encoded_sep) {
        /* only if one is still there: a ".." may have removed its segment */
        encoded_sep = 0;
        for (size_t k = 0; k + 2 < o && out[k] != '?'; k++)
            if (out[k] == '%' && ((out[k + 1] == '2' && out[k + 2] == 'F') || (out[k + 1] == '5' && out[k + 2] == 'C')))
                encoded_sep = 1;
    }
    if (encoded_sep) {
        if (why)
            *why = "encoded path separator in path";
        return VSR_DECLINED;
    }
    return VSR_OK;
}
