/*
 * writer.c — HTTP/1.1 head serialization and chunk framing.
 *
 * Writers refuse bytes that would change the framing of what they write
 * (CR, LF, other controls, a non-token name): a value copied from
 * configuration or from another message must never be able to inject a
 * field or a second message.  On any failure the buffer is left unchanged.
 */
#include "http/http.h"
#include "http/http_int.h"

const char *vsr_http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 305: return "Use Proxy";
    case 306: return "Unused";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 418: return "Unused";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* No branch per byte: the classes of all bytes are ANDed, tested once. */
static int all_of(vsr_slice_t s, int cls)
{
    const unsigned char *p = (const unsigned char *)s.p;
    unsigned acc = (unsigned)cls;
    size_t i = 0;
    for (; i + 4 <= s.len; i += 4)
        acc &= (unsigned)(vsr__http_cls[p[i]] & vsr__http_cls[p[i + 1]] & vsr__http_cls[p[i + 2]] &
                          vsr__http_cls[p[i + 3]]);
    for (; i < s.len; i++)
        acc &= vsr__http_cls[p[i]];
    return (acc & (unsigned)cls) != 0;
}

/* Appends the pieces in one go: reserve first so a failure writes nothing. */
static int put(vsr_buf_t *b, const vsr_slice_t *parts, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += parts[i].len;
    if (vsr_buf_reserve(b, total) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    for (size_t i = 0; i < n; i++)
        if (parts[i].len) {
            memcpy(b->data + b->len, parts[i].p, parts[i].len);
            b->len += parts[i].len;
        }
    b->data[b->len] = '\0'; /* reserve keeps room for it, as vsr_buf_append does */
    return VSR_OK;
}

/* Decimal digits of v at the end of out[20]; returns the first digit. */
static char *u64_digits(char out[20], uint64_t v)
{
    char *d = out + 20;
    do {
        *--d = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return d;
}

int vsr_http_write_status_line(vsr_buf_t *b, int status, vsr_slice_t reason)
{
    if (status < 100 || status > 999)
        return VSR_ERR_INVALID;
    if (reason.p == NULL)
        reason = vsr_slice_cstr(vsr_http_reason(status));
    else if (vsr__http_vchar_span(reason.p, reason.len) != reason.len)
        return VSR_ERR_INVALID;
    char code[4] = {(char)('0' + status / 100), (char)('0' + status / 10 % 10), (char)('0' + status % 10), ' '};
    vsr_slice_t parts[] = {VSR_SLICE_LIT("HTTP/1.1 "), vsr_slice(code, 4), reason, VSR_SLICE_LIT("\r\n")};
    return put(b, parts, VSR_ARRAY_LEN(parts));
}

int vsr_http_write_request_line(vsr_buf_t *b, vsr_slice_t method, vsr_slice_t target)
{
    if (method.len == 0 || target.len == 0 || !all_of(method, VSR__HTTP_TCHAR) ||
        !all_of(target, VSR__HTTP_TARGET))
        return VSR_ERR_INVALID;
    vsr_slice_t parts[] = {method, VSR_SLICE_LIT(" "), target, VSR_SLICE_LIT(" HTTP/1.1\r\n")};
    return put(b, parts, VSR_ARRAY_LEN(parts));
}

int vsr_http_write_header(vsr_buf_t *b, vsr_slice_t name, vsr_slice_t value)
{
    if (name.len == 0 || !all_of(name, VSR__HTTP_TCHAR) || vsr__http_vchar_span(value.p, value.len) != value.len)
        return VSR_ERR_INVALID;
    return vsr_http_write_checked_header(b, name, value);
}

int vsr_http_write_checked_header(vsr_buf_t *b, vsr_slice_t name, vsr_slice_t value)
{
    /* the hottest writer (every field of both heads): one reserve, then
     * the bytes, not put()'s four copies */
    size_t n = name.len + value.len + 4;
    if (vsr_buf_reserve(b, n) != VSR_OK)
        return VSR_ERR_TOO_BIG;
    char *d = b->data + b->len;
    memcpy(d, name.p, name.len);
    d += name.len;
    *d++ = ':';
    *d++ = ' ';
    if (value.len)
        memcpy(d, value.p, value.len);
    d += value.len;
    *d++ = '\r';
    *d++ = '\n';
    *d = '\0'; /* reserve keeps room for it, as vsr_buf_append does */
    b->len += n;
    return VSR_OK;
}

int vsr_http_write_header_u64(vsr_buf_t *b, const char *name, uint64_t value)
{
    char digits[20];
    char *d = u64_digits(digits, value);
    return vsr_http_write_header(b, vsr_slice_cstr(name), vsr_slice(d, (size_t)(digits + 20 - d)));
}

int vsr_http_write_end_head(vsr_buf_t *b)
{
    return vsr_buf_append(b, "\r\n", 2);
}

size_t vsr_http_chunk_head(char out[24], size_t n)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    size_t k = 0;
    do {
        tmp[k++] = hex[n & 15];
        n >>= 4;
    } while (n);
    size_t len = 0;
    while (k)
        out[len++] = tmp[--k];
    out[len++] = '\r';
    out[len++] = '\n';
    out[len] = '\0';
    return len;
}
