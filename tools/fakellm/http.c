/*
 * A strict, incremental HTTP/1.1 request parser (RFC 9112).  Strictness is
 * the point: fakellm sits behind vsr in tests, so anything vsr frames
 * sloppily (bare LF, obs-fold, space before the colon, conflicting
 * Content-Length, Content-Length together with Transfer-Encoding, missing
 * Host) is refused with a 400 rather than silently accepted.
 */
#include "fakellm.h"

#include <string.h>
#include <strings.h>

static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
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

void fl_req_reset(fl_req_t *r)
{
    /* the header array is large and fully rewritten by the next parse */
    memset(r, 0, offsetof(fl_req_t, hdrs));
    memset(&r->nhdrs, 0, sizeof *r - offsetof(fl_req_t, nhdrs));
    r->phase = FL_P_HEAD;
}

static fl_phase_t fail(fl_req_t *r, int status, const char *msg)
{
    r->phase = FL_P_ERROR;
    r->err_status = status;
    r->err_msg = msg;
    return r->phase;
}

static int eq_ci(const char *a, size_t alen, const char *lit)
{
    size_t n = strlen(lit);
    return alen == n && strncasecmp(a, lit, n) == 0;
}

/* Call fn for each comma-separated, OWS-trimmed element of v[0..n). */
static int list_has(const char *v, size_t n, const char *token)
{
    size_t i = 0;
    while (i < n) {
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (s < e && (v[s] == ' ' || v[s] == '\t'))
            s++;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (eq_ci(v + s, e - s, token))
            return 1;
        i++;
    }
    return 0;
}

/* The last non-empty element of a comma list (for Transfer-Encoding). */
static void list_last(const char *v, size_t n, const char **out, size_t *outlen, int *count)
{
    size_t i = 0;
    *out = NULL;
    *outlen = 0;
    while (i < n) {
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (s < e && (v[s] == ' ' || v[s] == '\t'))
            s++;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e > s) {
            *out = v + s;
            *outlen = e - s;
            (*count)++;
        }
        i++;
    }
}

static fl_phase_t parse_head(fl_req_t *r, const char *buf, size_t len)
{
    /* RFC 9112 2.2: ignore at least one empty line before the request line */
    size_t start = 0;
    while (start + 1 < len && buf[start] == '\r' && buf[start + 1] == '\n' && start < 64)
        start += 2;
    size_t from = r->scan > start + 3 ? r->scan - 3 : start;
    const char *end = from < len ? memmem(buf + from, len - from, "\r\n\r\n", 4) : NULL;
    if (!end) {
        if (len > FL_MAX_HEAD)
            return fail(r, 431, "request header section too large");
        r->scan = len;
        return FL_P_HEAD;
    }
    size_t head_len = (size_t)(end - buf) + 4;
    if (head_len > FL_MAX_HEAD)
        return fail(r, 431, "request header section too large");
    r->head_len = head_len;

    /* request line: method SP request-target SP HTTP-version CRLF */
    size_t p = start;
    const unsigned char *u = (const unsigned char *)buf;
    while (p < head_len && is_tchar(u[p]))
        p++;
    if (p == start || buf[p] != ' ')
        return fail(r, 400, "malformed request line (method)");
    r->method_off = (uint32_t)start;
    r->method_len = (uint32_t)(p - start);
    size_t t = ++p;
    while (p < head_len && u[p] > 0x20 && u[p] != 0x7f)
        p++;
    if (p == t || buf[p] != ' ')
        return fail(r, 400, "malformed request line (target)");
    r->target_off = (uint32_t)t;
    r->target_len = (uint32_t)(p - t);
    p++;
    if (head_len - p < 10 || memcmp(buf + p, "HTTP/", 5) != 0)
        return fail(r, 400, "malformed request line (version)");
    if (!(buf[p + 5] >= '0' && buf[p + 5] <= '9') || buf[p + 6] != '.' ||
        !(buf[p + 7] >= '0' && buf[p + 7] <= '9') || buf[p + 8] != '\r' || buf[p + 9] != '\n')
        return fail(r, 400, "malformed request line (version)");
    if (buf[p + 5] != '1' || buf[p + 7] > '1')
        return fail(r, 505, "HTTP version not supported");
    r->minor = buf[p + 7] - '0';
    p += 10;

    /* header fields */
    int host_count = 0, te_count = 0, conn_close = 0, conn_keep = 0;
    const char *te_last = NULL;
    size_t te_last_len = 0;
    while (p < head_len - 2) {
        if (r->nhdrs == FL_MAX_HEADERS)
            return fail(r, 431, "too many header fields");
        size_t ns = p;
        if (buf[p] == ' ' || buf[p] == '\t')
            return fail(r, 400, "obsolete line folding is not accepted");
        while (p < head_len && is_tchar(u[p]))
            p++;
        if (p == ns || buf[p] != ':')
            return fail(r, 400, "malformed header field name");
        size_t nl = p - ns;
        p++;
        while (buf[p] == ' ' || buf[p] == '\t')
            p++;
        size_t vs = p;
        while (buf[p] != '\r') {
            unsigned char c = u[p];
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return fail(r, 400, "invalid character in header field value");
            p++;
        }
        if (buf[p + 1] != '\n')
            return fail(r, 400, "bare CR in header section");
        size_t ve = p;
        while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t'))
            ve--;
        p += 2;

        fl_hdr_t *h = &r->hdrs[r->nhdrs++];
        h->name_off = (uint32_t)ns;
        h->name_len = (uint32_t)nl;
        h->value_off = (uint32_t)vs;
        h->value_len = (uint32_t)(ve - vs);
        const char *name = buf + ns, *val = buf + vs;
        size_t vl = ve - vs;

        if (eq_ci(name, nl, "content-length")) {
            uint64_t v = 0;
            if (vl == 0 || vl > 18)
                return fail(r, 400, "invalid Content-Length");
            for (size_t i = 0; i < vl; i++) {
                if (val[i] < '0' || val[i] > '9')
                    return fail(r, 400, "invalid Content-Length");
                v = v * 10 + (uint64_t)(val[i] - '0');
            }
            if (r->has_cl && v != r->content_length)
                return fail(r, 400, "conflicting Content-Length fields");
            r->has_cl = 1;
            r->content_length = v;
        } else if (eq_ci(name, nl, "transfer-encoding")) {
            list_last(val, vl, &te_last, &te_last_len, &te_count);
        } else if (eq_ci(name, nl, "host")) {
            host_count++;
        } else if (eq_ci(name, nl, "connection")) {
            conn_close |= list_has(val, vl, "close");
            conn_keep |= list_has(val, vl, "keep-alive");
        } else if (eq_ci(name, nl, "expect")) {
            if (eq_ci(val, vl, "100-continue"))
                r->expect_continue = 1;
        }
    }

    if (r->minor == 1 && host_count != 1)
        return fail(r, 400, host_count ? "multiple Host fields" : "missing Host field");
    if (te_count) {
        if (r->has_cl)
            return fail(r, 400, "both Transfer-Encoding and Content-Length");
        if (te_count != 1 || !eq_ci(te_last, te_last_len, "chunked"))
            return fail(r, 501, "unsupported Transfer-Encoding");
        r->chunked = 1;
    }
    r->keep_alive = r->minor == 1 ? !conn_close : (conn_keep && !conn_close);
    if (r->has_cl && r->content_length > FL_MAX_BODY)
        return fail(r, 413, "request body too large");

    if (r->chunked) {
        r->phase = FL_P_BODY_CHUNKED;
        r->scan = head_len;
        r->ck_state = CK_SIZE;
    } else if (r->has_cl && r->content_length > 0) {
        r->phase = FL_P_BODY_CL;
    } else {
        r->phase = FL_P_DONE;
        r->total_len = head_len;
    }
    return r->phase;
}

static fl_phase_t parse_chunked(fl_req_t *r, const char *buf, size_t len, fl_buf_t *body)
{
    size_t p = r->scan;
    while (p < len && r->phase == FL_P_BODY_CHUNKED) {
        unsigned char c = (unsigned char)buf[p];
        switch (r->ck_state) {
        case CK_SIZE: {
            int v = hexval(c);
            if (v >= 0) {
                if (++r->ck_digits > 15)
                    return fail(r, 413, "chunk size too large");
                r->ck_rem = r->ck_rem * 16 + (uint64_t)v;
                p++;
            } else if (r->ck_digits == 0) {
                return fail(r, 400, "malformed chunk size");
            } else if (c == ';' || c == ' ' || c == '\t') {
                r->ck_state = CK_EXT;
                r->ck_linelen = 0;
            } else if (c == '\r') {
                r->ck_state = CK_SIZE_LF;
                p++;
            } else {
                return fail(r, 400, "malformed chunk size");
            }
            break;
        }
        case CK_EXT:
            if (c == '\r') {
                r->ck_state = CK_SIZE_LF;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
                return fail(r, 400, "invalid character in chunk extension");
            } else if (++r->ck_linelen > 4096) {
                return fail(r, 400, "chunk extension too long");
            }
            p++;
            break;
        case CK_SIZE_LF:
            if (c != '\n')
                return fail(r, 400, "bare CR in chunk size line");
            p++;
            if (r->ck_rem == 0) {
                r->ck_state = CK_TRAILER_START;
            } else {
                if (body->len + r->ck_rem > FL_MAX_BODY)
                    return fail(r, 413, "request body too large");
                fl_buf_reserve(body, (size_t)r->ck_rem);
                r->ck_state = CK_DATA;
            }
            break;
        case CK_DATA: {
            size_t n = len - p;
            if (n > r->ck_rem)
                n = (size_t)r->ck_rem;
            fl_buf_add(body, buf + p, n);
            p += n;
            r->ck_rem -= n;
            if (r->ck_rem == 0)
                r->ck_state = CK_DATA_CR;
            break;
        }
        case CK_DATA_CR:
            if (c != '\r')
                return fail(r, 400, "chunk data not followed by CRLF");
            r->ck_state = CK_DATA_LF;
            p++;
            break;
        case CK_DATA_LF:
            if (c != '\n')
                return fail(r, 400, "chunk data not followed by CRLF");
            r->ck_state = CK_SIZE;
            r->ck_digits = 0;
            r->ck_rem = 0;
            p++;
            break;
        case CK_TRAILER_START:
            if (c == '\r') {
                r->ck_state = CK_FINAL_LF;
                p++;
            } else {
                r->ck_state = CK_TRAILER;
            }
            break;
        case CK_TRAILER:
            if (c == '\r') {
                r->ck_state = CK_TRAILER_LF;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
                return fail(r, 400, "invalid character in trailer section");
            } else if (++r->trailer_bytes > FL_MAX_HEAD) {
                return fail(r, 431, "trailer section too large");
            }
            p++;
            break;
        case CK_TRAILER_LF:
            if (c != '\n')
                return fail(r, 400, "bare CR in trailer section");
            r->ck_state = CK_TRAILER_START;
            p++;
            break;
        case CK_FINAL_LF:
            if (c != '\n')
                return fail(r, 400, "bare CR after last chunk");
            p++;
            r->phase = FL_P_DONE;
            r->total_len = p;
            break;
        }
    }
    r->scan = p;
    return r->phase;
}

fl_phase_t fl_req_parse(fl_req_t *r, const char *buf, size_t len, fl_buf_t *body)
{
    if (r->phase == FL_P_HEAD && parse_head(r, buf, len) == FL_P_HEAD)
        return FL_P_HEAD;
    if (r->phase == FL_P_BODY_CL) {
        if (len - r->head_len >= r->content_length) {
            r->phase = FL_P_DONE;
            r->total_len = r->head_len + (size_t)r->content_length;
        }
    } else if (r->phase == FL_P_BODY_CHUNKED) {
        parse_chunked(r, buf, len, body);
    }
    return r->phase;
}
