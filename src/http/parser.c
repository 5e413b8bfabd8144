/*
 * parser.c — HTTP/1.x message parser (RFC 9112), sans-IO.
 *
 * The head is copied into the parser's own bounded buffer until the empty
 * line that ends it, then parsed in one pass; the body is decoded straight
 * from the caller's bytes without copying.  Every state transition is made
 * before the callback that reports it runs, so a callback may pause (or the
 * input may end) anywhere and the next execute() picks up exactly there:
 * feeding one byte at a time yields the same events as feeding all at once.
 */
#include "http/http.h"
#include "http/http_int.h"

#define DEFAULT_MAX_HEAD (64 * 1024)
#define DEFAULT_MAX_HEADERS 100
#define MAX_CHUNK_LINE 4096  /* chunk-size line (with extensions) or trailer line */
#define MAX_EMPTY_LINES 4    /* CRLFs tolerated before a start line (RFC 9112 §2.2) */

/* Parser states (_state). */
enum {
    ST_START = 0,    /* between messages; _line_len counts empty lines skipped */
    ST_START_LF,     /* saw the CR of an empty line before a start line */
    ST_HEAD,         /* accumulating the head; _scan = start of the current line,
                        _line_len = complete lines so far */
    ST_BODY_CL,      /* _remaining body bytes left */
    ST_BODY_CHUNKED, /* see _chunk_state */
    ST_BODY_CLOSE,   /* response body delimited by the connection closing */
    ST_DONE,         /* message complete, on_complete not yet delivered */
    ST_UPGRADED,     /* after a 101 response the bytes are no longer HTTP/1.x */
};

/* Chunked decoding states (_chunk_state). */
enum {
    CH_SIZE = 0, /* chunk-size hex digits; _remaining accumulates the value */
    CH_SIZE_WS,  /* BWS after the size: only ';' may follow */
    CH_EXT,      /* chunk extensions, up to CR */
    CH_SIZE_LF,  /* LF ending the chunk-size line */
    CH_DATA,     /* _remaining bytes of chunk data */
    CH_DATA_CR,  /* CRLF after the chunk data */
    CH_DATA_LF,
    CH_TR_START, /* start of a trailer line or of the final empty line;
                    _remaining counts trailer fields from here on */
    CH_TR_NAME,
    CH_TR_VALUE,
    CH_TR_LF,
    CH_END_LF, /* LF of the empty line ending the message */
};

const uint8_t vsr__http_cls[256] = {
    0,  0,  0,  0,  0,  0,  0,  0,  0,  2,  0,  0,  0,  0,  0,  0,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    2,  7,  6,  7,  7,  7,  7,  7,  6,  6,  7,  7,  6,  7,  7,  6,
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 6,  6,  6,  6,  6,  6,
    6,  15, 15, 15, 15, 15, 15, 7,  7,  7,  7,  7,  7,  7,  7,  7,
    7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  6,  6,  6,  7,  7,
    7,  15, 15, 15, 15, 15, 15, 7,  7,  7,  7,  7,  7,  7,  7,  7,
    7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  6,  7,  6,  7,  0,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
    6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,  6,
};

/* Kills the parser.  Every error of a response is the upstream's fault, so
 * the status the gateway answers with is 502 whatever the cause. */
static int fail(vsr_http_parser_t *p, int status, const char *msg)
{
    p->error_status = p->kind == VSR_HTTP_RESPONSE ? 502 : status;
    p->error_msg = msg;
    p->_dead = VSR_ERR_INVALID;
    return VSR_ERR_INVALID;
}

/* Maps a callback's return: 0 go on, 1 pause, < 0 abort (parser dead). */
static int cb_result(vsr_http_parser_t *p, int rc)
{
    if (rc == VSR_PAUSED) {
        p->_paused = 1;
        return 1;
    }
    if (rc < 0) {
        p->_dead = rc;
        p->error_msg = "aborted by callback";
        return rc;
    }
    return 0;
}

static int lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Case-insensitive compare of s against a lowercase literal. */
static int eq_lit(vsr_slice_t s, const char *lit, size_t n)
{
    if (s.len != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s.p[i]) != (unsigned char)lit[i])
            return 0;
    return 1;
}
#define EQ_LIT(s, lit) eq_lit((s), lit, sizeof(lit) - 1)

void vsr_http_parser_init(vsr_http_parser_t *p, vsr_http_kind_t kind, const vsr_http_limits_t *limits,
                          const vsr_http_callbacks_t *cb, void *ud)
{
    /* all but the head's field array (4 KB, written before it is read):
     * connections take a parser for each request */
    memset(p, 0, offsetof(vsr_http_parser_t, head.headers));
    memset(&p->head.num_headers, 0, sizeof(*p) - offsetof(vsr_http_parser_t, head.num_headers));
    p->kind = kind;
    if (limits)
        p->limits = *limits;
    if (p->limits.max_head_size == 0)
        p->limits.max_head_size = DEFAULT_MAX_HEAD;
    if (p->limits.max_headers == 0)
        p->limits.max_headers = DEFAULT_MAX_HEADERS;
    if (p->limits.max_headers > VSR_HTTP_MAX_HEADERS)
        p->limits.max_headers = VSR_HTTP_MAX_HEADERS;
    p->cb = cb;
    p->ud = ud;
    p->head.content_length = -1;
    p->_state = ST_START;
    vsr_buf_init(&p->_headbuf, p->limits.max_head_size);
}

void vsr_http_parser_free(vsr_http_parser_t *p)
{
    vsr_buf_free(&p->_headbuf);
    p->head.num_headers = 0;
    p->head.method = p->head.target = p->head.reason = VSR_SLICE_NULL;
}

void vsr_http_parser_set_head_request(vsr_http_parser_t *p, int is_head)
{
    p->_req_is_head = is_head != 0;
}

int vsr_http_parser_idle(const vsr_http_parser_t *p)
{
    return p->_dead == 0 && p->_state == ST_START;
}

/* The first byte of a message: the previous head dies here.  The head
 * buffer keeps its memory, so steady traffic allocates nothing. */
static void begin_message(vsr_http_parser_t *p)
{
    vsr_http_head_t *h = &p->head;
    vsr_buf_reset(&p->_headbuf);
    p->_scan = 0;
    p->_line_len = 0;
    p->_remaining = 0;
    p->_body_total = 0;
    p->_chunk_state = CH_SIZE;
    h->method = h->target = h->reason = VSR_SLICE_NULL;
    h->version_minor = 0;
    h->status = 0;
    h->num_headers = 0;
    h->content_length = -1;
    h->chunked = h->keep_alive = h->expect_continue = h->upgrade = 0;
    h->has_body = h->until_close = 0;
    p->_state = ST_HEAD;
}

/* Looks for the empty line ending the head in d[0..n), copying what belongs
 * to the head into _headbuf.  Each byte is looked at once however the head
 * is split (memchr from the last line start).  Only bytes that fit under
 * max_head_size are examined, so the verdict does not depend on how the
 * input was split.  1: head complete; 0: all n bytes taken, need more. */
static int head_scan(vsr_http_parser_t *p, const char *d, size_t n, size_t *used)
{
    vsr_buf_t *b = &p->_headbuf;
    size_t room = p->limits.max_head_size - b->len;
    size_t scan = n < room ? n : room;
    const char *s = d, *end = d + scan;

    while (s < end) {
        const char *lf = memchr(s, '\n', (size_t)(end - s));
        if (lf == NULL)
            break;
        size_t at = b->len + (size_t)(lf - d);
        char prev = lf > d ? lf[-1] : b->data[b->len - 1]; /* b->len > 0: heads start with a non-LF */
        if (prev != '\r')
            return fail(p, 400, "bare LF in head");
        if (at - p->_scan == 1) {
            size_t take = (size_t)(lf - d) + 1;
            VSR_BUG_ON(vsr_buf_append(b, d, take) != VSR_OK);
            *used = take;
            return 1;
        }
        p->_scan = at + 1;
        if (++p->_line_len > p->limits.max_headers + 1)
            return fail(p, 431, "too many header fields");
        s = lf + 1;
    }
    if (n > room)
        return fail(p, 431, "head too large");
    if (n)
        VSR_BUG_ON(vsr_buf_append(b, d, n) != VSR_OK);
    *used = n;
    return 0;
}

/* "HTTP/1.1" → 1, "HTTP/1.0" → 0, other HTTP-version-shaped → -505, else -400. */
static int parse_version(const char *s, size_t n)
{
    if (n != 8 || memcmp(s, "HTTP/", 5) != 0 || s[5] < '0' || s[5] > '9' || s[6] != '.' || s[7] < '0' ||
        s[7] > '9')
        return -400;
    if (s[5] != '1' || (s[7] != '0' && s[7] != '1'))
        return -505;
    return s[7] - '0';
}

static int parse_request_line(vsr_http_parser_t *p, const char *s, size_t n)
{
    vsr_http_head_t *h = &p->head;
    size_t i = 0;
    while (i < n && vsr__http_is((unsigned char)s[i], VSR__HTTP_TCHAR))
        i++;
    if (i == 0 || i == n || s[i] != ' ')
        return fail(p, 400, "invalid method");
    h->method = vsr_slice(s, i);
    size_t t = ++i;
    while (i < n && vsr__http_is((unsigned char)s[i], VSR__HTTP_TARGET))
        i++;
    if (i == t || i == n || s[i] != ' ')
        return fail(p, 400, "invalid request-target");
    h->target = vsr_slice(s + t, i - t);
    i++;
    int v = parse_version(s + i, n - i);
    if (v == -400)
        return fail(p, 400, "invalid HTTP version");
    if (v == -505)
        return fail(p, 505, "HTTP version not supported");
    h->version_minor = v;

    vsr_slice_t tg = h->target;
    if (vsr_slice_eq_cstr(h->method, "CONNECT"))
        return fail(p, 501, "CONNECT not supported");
    if (tg.p[0] == '/')
        return VSR_OK;
    if (tg.len == 1 && tg.p[0] == '*') {
        if (!vsr_slice_eq_cstr(h->method, "OPTIONS"))
            return fail(p, 400, "asterisk-form only with OPTIONS");
        return VSR_OK;
    }
    if ((tg.len > 7 && eq_lit(vsr_slice(tg.p, 7), "http://", 7)) ||
        (tg.len > 8 && eq_lit(vsr_slice(tg.p, 8), "https://", 8)))
        return VSR_OK;
    return fail(p, 400, "invalid request-target");
}

static int parse_status_line(vsr_http_parser_t *p, const char *s, size_t n)
{
    vsr_http_head_t *h = &p->head;
    if (n < 12 || s[8] != ' ')
        return fail(p, 502, "invalid status line");
    int v = parse_version(s, 8);
    if (v < 0)
        return fail(p, 502, v == -505 ? "HTTP version not supported" : "invalid HTTP version");
    h->version_minor = v;
    if (s[9] < '1' || s[9] > '5' || s[10] < '0' || s[10] > '9' || s[11] < '0' || s[11] > '9')
        return fail(p, 502, "invalid status code");
    h->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    /* "HTTP/1.1 200\r\n" (no SP before the empty reason) is common enough to accept */
    if (n == 12) {
        h->reason = vsr_slice(s + 12, 0);
        return VSR_OK;
    }
    if (s[12] != ' ')
        return fail(p, 502, "invalid status line");
    if (vsr__http_vchar_span(s + 13, n - 13) != n - 13)
        return fail(p, 502, "invalid character in reason phrase");
    h->reason = vsr_slice(s + 13, n - 13);
    return VSR_OK;
}

/* What the framing-relevant fields said. */
typedef struct {
    int cl_count;
    int cl_bad;
    uint64_t cl;
    int te_count;
    int te_chunked;
    int host_count;
    int conn_close;
    int conn_keep_alive;
    int conn_upgrade;
    int conn_other;      /* a Connection token other than keep-alive and upgrade */
    int upgrade_field;
    int expect_continue;
} fields_t;

static void scan_connection(vsr_slice_t v, fields_t *f)
{
    while (v.len) {
        vsr_slice_t rest;
        vsr_slice_t tok = vsr_slice_trim(vsr_slice_split(v, ',', &rest));
        if (EQ_LIT(tok, "close"))
            f->conn_close = f->conn_other = 1; /* a field named close is hop-by-hop too */
        else if (EQ_LIT(tok, "keep-alive"))
            f->conn_keep_alive = 1;
        else if (EQ_LIT(tok, "upgrade"))
            f->conn_upgrade = 1;
        else if (tok.len)
            f->conn_other = 1;
        v = rest;
    }
}

static void note_field(vsr_slice_t name, vsr_slice_t value, fields_t *f)
{
    switch (name.len) {
    case 4:
        if (EQ_LIT(name, "host"))
            f->host_count++;
        break;
    case 6:
        if (EQ_LIT(name, "expect") && EQ_LIT(value, "100-continue"))
            f->expect_continue = 1;
        break;
    case 7:
        if (EQ_LIT(name, "upgrade"))
            f->upgrade_field = 1;
        break;
    case 10:
        if (EQ_LIT(name, "connection"))
            scan_connection(value, f);
        break;
    case 14:
        if (EQ_LIT(name, "content-length") && ++f->cl_count == 1)
            f->cl_bad = vsr_slice_to_u64(value, INT64_MAX, &f->cl) != VSR_OK;
        break;
    case 17:
        if (EQ_LIT(name, "transfer-encoding")) {
            f->te_count++;
            f->te_chunked = EQ_LIT(value, "chunked");
        }
        break;
    }
}

/* field-line = field-name ":" OWS field-value OWS */
static int parse_field(vsr_http_parser_t *p, const char *s, size_t n, fields_t *f)
{
    vsr_http_head_t *h = &p->head;
    if (s[0] == ' ' || s[0] == '\t')
        return fail(p, 400, "obs-fold in head");
    size_t i = 0;
    while (i < n && vsr__http_is((unsigned char)s[i], VSR__HTTP_TCHAR))
        i++;
    if (i == n)
        return fail(p, 400, "field line without colon");
    if (s[i] != ':') {
        if (s[i] == ' ' || s[i] == '\t')
            return fail(p, 400, "whitespace before colon");
        return fail(p, 400, "invalid field name");
    }
    if (i == 0)
        return fail(p, 400, "empty field name");
    vsr_slice_t name = vsr_slice(s, i);
    i++;
    size_t j = i + vsr__http_vchar_span(s + i, n - i);
    if (j < n)
        return fail(p, 400, s[j] == '\r' ? "bare CR in head" : "invalid character in field value");
    vsr_slice_t value = vsr_slice_trim(vsr_slice(s + i, n - i));
    if (h->num_headers >= p->limits.max_headers)
        return fail(p, 431, "too many header fields");
    h->headers[h->num_headers].name = name;
    h->headers[h->num_headers].value = value;
    h->num_headers++;
    note_field(name, value, f);
    return VSR_OK;
}

/* Decides the framing of the message (RFC 9112 §6.3) and the next state. */
static int apply_fields(vsr_http_parser_t *p, const fields_t *f)
{
    vsr_http_head_t *h = &p->head;
    int req = p->kind == VSR_HTTP_REQUEST;

    if (f->te_count && f->cl_count)
        return fail(p, 400, "Content-Length with Transfer-Encoding");
    if (f->cl_count > 1)
        return fail(p, 400, "duplicate Content-Length");
    if (f->cl_count && f->cl_bad)
        return fail(p, 400, "invalid Content-Length");
    if (f->te_count) {
        if (h->version_minor == 0)
            return fail(p, 400, "Transfer-Encoding in HTTP/1.0");
        if (f->te_count > 1 || !f->te_chunked)
            return fail(p, 501, "unsupported Transfer-Encoding");
        h->chunked = 1;
    }
    if (req && (f->host_count > 1 || (f->host_count == 0 && h->version_minor == 1)))
        return fail(p, 400, f->host_count ? "duplicate Host" : "missing Host");
    if (f->cl_count)
        h->content_length = (int64_t)f->cl;
    h->keep_alive = !f->conn_close && (h->version_minor == 1 || f->conn_keep_alive);
    h->upgrade = f->conn_upgrade && f->upgrade_field;
    h->conn_plain = !f->conn_other;
    h->fields_checked = 1; /* parse_field checked each name and value as the writer does */
    h->expect_continue = req && f->expect_continue && h->version_minor == 1;

    int bodiless = !req && (h->status < 200 || h->status == 204 || h->status == 304 || p->_req_is_head);
    if (bodiless) {
        p->_state = ST_DONE;
    } else if (h->chunked) {
        h->has_body = 1;
        p->_state = ST_BODY_CHUNKED;
        p->_chunk_state = CH_SIZE;
        p->_remaining = 0;
        p->_line_len = 0;
    } else if (h->content_length > 0) {
        if (p->limits.max_body && (uint64_t)h->content_length > p->limits.max_body)
            return fail(p, 413, "body too large");
        h->has_body = 1;
        p->_state = ST_BODY_CL;
        p->_remaining = (uint64_t)h->content_length;
    } else if (h->content_length == 0 || req) {
        p->_state = ST_DONE;
    } else {
        h->has_body = 1;
        h->until_close = 1;
        h->keep_alive = 0;
        p->_state = ST_BODY_CLOSE;
    }
    return VSR_OK;
}

/* The head buffer holds a complete head whose every LF follows a CR. */
static int parse_head(vsr_http_parser_t *p)
{
    const char *s = p->_headbuf.data;
    const char *end = s + p->_headbuf.len;
    const char *lf = memchr(s, '\n', (size_t)(end - s));
    int rc = p->kind == VSR_HTTP_REQUEST ? parse_request_line(p, s, (size_t)(lf - 1 - s))
                                         : parse_status_line(p, s, (size_t)(lf - 1 - s));
    if (rc != VSR_OK)
        return rc;
    fields_t f;
    memset(&f, 0, sizeof(f));
    for (;;) {
        s = lf + 1;
        lf = memchr(s, '\n', (size_t)(end - s));
        size_t n = (size_t)(lf - 1 - s);
        if (n == 0)
            break;
        if ((rc = parse_field(p, s, n, &f)) != VSR_OK)
            return rc;
    }
    return apply_fields(p, &f);
}

/* Consumes chunk framing (size lines, CRLFs after data, trailers) from
 * d[*pos..n).  1: state changed (chunk data or message end) — go on;
 * 0: input exhausted; < 0: error. */
static int chunk_framing(vsr_http_parser_t *p, const char *d, size_t n, size_t *pos)
{
    size_t i = *pos;
    while (i < n) {
        unsigned char c = (unsigned char)d[i++];
        switch (p->_chunk_state) {
        case CH_SIZE:
            if (vsr__http_is(c, VSR__HTTP_HEX)) {
                if (p->_remaining >> 59)
                    return fail(p, 400, "chunk size overflow");
                p->_remaining = p->_remaining << 4 | (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
            } else if (p->_line_len == 0) {
                return fail(p, 400, "invalid chunk size");
            } else if (c == '\r') {
                p->_chunk_state = CH_SIZE_LF;
                break;
            } else if (c == ';') {
                p->_chunk_state = CH_EXT;
            } else if (c == ' ' || c == '\t') {
                p->_chunk_state = CH_SIZE_WS;
            } else {
                return fail(p, 400, "invalid chunk size");
            }
            if (++p->_line_len > MAX_CHUNK_LINE)
                return fail(p, 400, "chunk size line too long");
            break;
        case CH_SIZE_WS:
            if (c == ';')
                p->_chunk_state = CH_EXT;
            else if (c != ' ' && c != '\t')
                return fail(p, 400, "invalid chunk extension");
            if (++p->_line_len > MAX_CHUNK_LINE)
                return fail(p, 400, "chunk size line too long");
            break;
        case CH_EXT:
            if (c == '\r') {
                p->_chunk_state = CH_SIZE_LF;
                break;
            }
            if (!vsr__http_is(c, VSR__HTTP_VCHAR))
                return fail(p, 400, "invalid chunk extension");
            if (++p->_line_len > MAX_CHUNK_LINE)
                return fail(p, 400, "chunk size line too long");
            break;
        case CH_SIZE_LF:
            if (c != '\n')
                return fail(p, 400, "bare CR in chunk size line");
            p->_line_len = 0;
            if (p->_remaining == 0) {
                p->_chunk_state = CH_TR_START; /* _remaining now counts trailer fields */
                break;
            }
            if (p->limits.max_body && p->_remaining > p->limits.max_body - p->_body_total)
                return fail(p, 413, "body too large");
            p->_chunk_state = CH_DATA;
            *pos = i;
            return 1;
        case CH_DATA_CR:
            if (c != '\r')
                return fail(p, 400, "chunk data not followed by CRLF");
            p->_chunk_state = CH_DATA_LF;
            break;
        case CH_DATA_LF:
            if (c != '\n')
                return fail(p, 400, "chunk data not followed by CRLF");
            p->_chunk_state = CH_SIZE;
            p->_remaining = 0;
            p->_line_len = 0;
            break;
        case CH_TR_START:
            if (c == '\r') {
                p->_chunk_state = CH_END_LF;
                break;
            }
            if (c == ' ' || c == '\t')
                return fail(p, 400, "obs-fold in trailer");
            if (c == ':')
                return fail(p, 400, "empty field name");
            if (!vsr__http_is(c, VSR__HTTP_TCHAR))
                return fail(p, 400, "invalid trailer field name");
            if (++p->_remaining > p->limits.max_headers)
                return fail(p, 431, "too many trailer fields");
            p->_line_len = 1;
            p->_chunk_state = CH_TR_NAME;
            break;
        case CH_TR_NAME:
            if (c == ':')
                p->_chunk_state = CH_TR_VALUE;
            else if (c == ' ' || c == '\t')
                return fail(p, 400, "whitespace before colon");
            else if (!vsr__http_is(c, VSR__HTTP_TCHAR))
                return fail(p, 400, "invalid trailer field name");
            if (++p->_line_len > MAX_CHUNK_LINE)
                return fail(p, 400, "trailer line too long");
            break;
        case CH_TR_VALUE:
            if (c == '\r') {
                p->_chunk_state = CH_TR_LF;
                break;
            }
            if (!vsr__http_is(c, VSR__HTTP_VCHAR))
                return fail(p, 400, "invalid character in trailer");
            if (++p->_line_len > MAX_CHUNK_LINE)
                return fail(p, 400, "trailer line too long");
            break;
        case CH_TR_LF:
            if (c != '\n')
                return fail(p, 400, "bare CR in trailer");
            p->_chunk_state = CH_TR_START;
            p->_line_len = 0;
            break;
        case CH_END_LF:
            if (c != '\n')
                return fail(p, 400, "bare CR in trailer");
            p->_state = ST_DONE;
            *pos = i;
            return 1;
        default:
            VSR_BUG_ON(1);
        }
    }
    *pos = i;
    return 0;
}

/* Ends the current message: the state moves on before on_complete runs so
 * that a pause there leaves the parser idle, with the head still intact. */
static int complete(vsr_http_parser_t *p)
{
    p->_state = ST_START;
    p->_line_len = 0;
    if (p->kind == VSR_HTTP_RESPONSE && (p->head.status >= 200 || p->head.status == 101)) {
        p->_req_is_head = 0; /* interim responses keep it for the final one */
        if (p->head.status == 101)
            p->_state = ST_UPGRADED;
    }
    if (p->cb && p->cb->on_complete)
        return p->cb->on_complete(p->ud);
    return VSR_OK;
}

ssize_t vsr_http_parser_execute(vsr_http_parser_t *p, const char *data, size_t len)
{
    size_t pos = 0;
    int r;

    if (p->_dead)
        return p->_dead;
    p->_paused = 0;
    for (;;) {
        switch (p->_state) {
        case ST_START:
            if (pos == len)
                return (ssize_t)pos;
            if (data[pos] == '\r') {
                if (++p->_line_len > MAX_EMPTY_LINES)
                    return fail(p, 400, "too many empty lines before message");
                pos++;
                p->_state = ST_START_LF;
                break;
            }
            if (data[pos] == '\n')
                return fail(p, 400, "bare LF in head");
            begin_message(p);
            break;

        case ST_START_LF:
            if (pos == len)
                return (ssize_t)pos;
            if (data[pos] != '\n')
                return fail(p, 400, "bare CR in head");
            pos++;
            p->_state = ST_START;
            break;

        case ST_HEAD: {
            size_t used = 0;
            r = head_scan(p, data + pos, len - pos, &used);
            pos += used;
            if (r <= 0)
                return r < 0 ? r : (ssize_t)pos;
            if ((r = parse_head(p)) != VSR_OK)
                return r;
            if (p->cb && p->cb->on_head && (r = cb_result(p, p->cb->on_head(p->ud, &p->head))) != 0)
                return r > 0 ? (ssize_t)pos : r;
            break;
        }

        case ST_BODY_CL: {
            if (pos == len)
                return (ssize_t)pos;
            size_t n = len - pos;
            if (n > p->_remaining)
                n = (size_t)p->_remaining;
            const char *b = data + pos;
            pos += n;
            p->_remaining -= n;
            p->_body_total += n;
            if (p->_remaining == 0)
                p->_state = ST_DONE;
            if (p->cb && p->cb->on_body && (r = cb_result(p, p->cb->on_body(p->ud, b, n))) != 0)
                return r > 0 ? (ssize_t)pos : r;
            break;
        }

        case ST_BODY_CHUNKED:
            if (p->_chunk_state == CH_DATA) {
                if (pos == len)
                    return (ssize_t)pos;
                size_t n = len - pos;
                if (n > p->_remaining)
                    n = (size_t)p->_remaining;
                const char *b = data + pos;
                pos += n;
                p->_remaining -= n;
                p->_body_total += n;
                if (p->_remaining == 0)
                    p->_chunk_state = CH_DATA_CR;
                if (p->cb && p->cb->on_body && (r = cb_result(p, p->cb->on_body(p->ud, b, n))) != 0)
                    return r > 0 ? (ssize_t)pos : r;
                break;
            }
            r = chunk_framing(p, data, len, &pos);
            if (r <= 0)
                return r < 0 ? r : (ssize_t)pos;
            break;

        case ST_BODY_CLOSE: {
            if (pos == len)
                return (ssize_t)pos;
            size_t n = len - pos;
            if (p->limits.max_body) {
                /* deliver up to the limit, fail on the first byte past it */
                uint64_t room = p->limits.max_body - p->_body_total;
                if (room == 0)
                    return fail(p, 413, "body too large");
                if (n > room)
                    n = (size_t)room;
            }
            const char *b = data + pos;
            pos += n;
            p->_body_total += n;
            if (p->cb && p->cb->on_body && (r = cb_result(p, p->cb->on_body(p->ud, b, n))) != 0)
                return r > 0 ? (ssize_t)pos : r;
            break;
        }

        case ST_DONE:
            if ((r = cb_result(p, complete(p))) != 0)
                return r > 0 ? (ssize_t)pos : r;
            break;

        case ST_UPGRADED:
            return (ssize_t)pos;

        default:
            VSR_BUG_ON(1);
        }
    }
}

int vsr_http_parser_finish(vsr_http_parser_t *p)
{
    if (p->_dead)
        return p->_dead;
    switch (p->_state) {
    case ST_START:
    case ST_START_LF:
    case ST_UPGRADED:
        return VSR_OK;
    case ST_BODY_CLOSE:
    case ST_DONE: {
        int r = cb_result(p, complete(p));
        return r < 0 ? r : VSR_OK;
    }
    default:
        return fail(p, 400, "truncated message");
    }
}
