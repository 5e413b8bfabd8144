/* sse.c — server-sent events: the WHATWG event stream interpretation,
 * incremental; the one SSE parser of the tree (the gateway, routing and the
 * stream codecs of this module all frame through it).  A line wholly inside
 * the fed bytes is processed in place; only a line split across feeds is
 * gathered in _line.  The data of an event accumulates in _data (it spans
 * lines). */
#include "proto/sse.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define DEFAULT_MAX (1024 * 1024)

static const char bom[3] = {(char)0xef, (char)0xbb, (char)0xbf};

/* The first CR or LF at or after i, or len: every byte of a relayed stream
 * is looked at here, sixteen at a time where there is SSE2. */
static size_t line_end(const char *s, size_t i, size_t len)
{
#if defined(__SSE2__)
    const __m128i cr = _mm_set1_epi8('\r'), lf = _mm_set1_epi8('\n');
    for (; i + 16 <= len; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, cr), _mm_cmpeq_epi8(x, lf)));
        if (m)
            return i + (size_t)__builtin_ctz(m);
    }
#endif
    while (i < len && s[i] != '\n' && s[i] != '\r')
        i++;
    return i;
}

void vsr_sse_init(vsr_sse_parser_t *p, size_t max_line, const vsr_sse_callbacks_t *cb, void *ud)
{
    memset(p, 0, sizeof(*p));
    p->cb = cb;
    p->ud = ud;
    p->_max = max_line ? max_line : DEFAULT_MAX;
    /* +1: room for the LF that joins data lines before the check trims it */
    vsr_buf_init(&p->_line, p->_max);
    vsr_buf_init(&p->_data, p->_max + 1);
    vsr_buf_init(&p->_type, p->_max);
    vsr_buf_init(&p->_id, p->_max);
}

void vsr_sse_free(vsr_sse_parser_t *p)
{
    vsr_buf_free(&p->_line);
    vsr_buf_free(&p->_data);
    vsr_buf_free(&p->_type);
    vsr_buf_free(&p->_id);
}

static int dispatch(vsr_sse_parser_t *p)
{
    int rc = VSR_OK;
    if (p->_has_data) {
        /* the data buffer ends with the LF of its last line: removed */
        vsr_slice_t data = vsr_slice(p->_data.data, p->_data.len - 1);
        vsr_slice_t type = p->_type.len ? vsr_buf_slice(&p->_type) : VSR_SLICE_LIT("message");
        p->events++;
        if (p->cb && p->cb->on_event)
            rc = p->cb->on_event(p->ud, type, data, vsr_buf_slice(&p->_id));
    }
    vsr_buf_reset(&p->_data);
    vsr_buf_reset(&p->_type);
    p->_has_data = 0;
    return rc;
}

static int all_digits(vsr_slice_t v)
{
    if (v.len == 0)
        return 0;
    for (size_t i = 0; i < v.len; i++)
        if (v.p[i] < '0' || v.p[i] > '9')
            return 0;
    return 1;
}

static int process_line(vsr_sse_parser_t *p, vsr_slice_t line)
{
    if (line.len == 0)
        return dispatch(p);
    if (line.p[0] == ':')
        return VSR_OK; /* a comment */
    const char *colon = memchr(line.p, ':', line.len);
    vsr_slice_t name = line, value = VSR_SLICE_NULL;
    if (colon) {
        name = vsr_slice(line.p, (size_t)(colon - line.p));
        value = vsr_slice(colon + 1, line.len - name.len - 1);
        if (value.len && value.p[0] == ' ')
            value = vsr_slice(value.p + 1, value.len - 1);
    }
    if (vsr_slice_eq_cstr(name, "data")) {
        if (vsr_buf_append_slice(&p->_data, value) != VSR_OK || vsr_buf_append(&p->_data, "\n", 1) != VSR_OK)
            return VSR_ERR_TOO_BIG;
        p->_has_data = 1;
    } else if (vsr_slice_eq_cstr(name, "event")) {
        vsr_buf_reset(&p->_type);
        vsr_buf_append_slice(&p->_type, value); /* value <= a line <= max */
    } else if (vsr_slice_eq_cstr(name, "id")) {
        if (value.len == 0 || memchr(value.p, '\0', value.len) == NULL) {
            vsr_buf_reset(&p->_id);
            vsr_buf_append_slice(&p->_id, value);
        }
    } else if (vsr_slice_eq_cstr(name, "retry")) {
        uint64_t ms;
        if (all_digits(value) && vsr_slice_to_u64(value, UINT64_MAX, &ms) == VSR_OK) {
            p->retry_ms = ms;
            p->has_retry = 1;
        }
    }
    return VSR_OK; /* other fields are ignored */
}

int vsr_sse_feed(vsr_sse_parser_t *p, const char *data, size_t len)
{
    if (p->_dead)
        return VSR_ERR_INVALID;
    size_t i = 0;
    /* the BOM, possibly split across feeds */
    while (p->_bom >= 0 && i < len) {
        if (data[i] != bom[p->_bom]) {
            /* a partial BOM that was not one: those bytes are line bytes */
            if (p->_bom > 0 && vsr_buf_append(&p->_line, bom, (size_t)p->_bom) != VSR_OK) {
                p->_dead = 1;
                return VSR_ERR_TOO_BIG;
            }
            p->_bom = -1;
            break;
        }
        i++;
        if (++p->_bom == 3)
            p->_bom = -1;
    }
    while (i < len) {
        if (p->_cr) {
            p->_cr = 0;
            if (data[i] == '\n') {
                i++;
                continue;
            }
        }
        /* the end of this line, if it is in these bytes */
        size_t j = line_end(data, i, len);
        if (j == len) {
            if (vsr_buf_append(&p->_line, data + i, j - i) != VSR_OK) {
                p->_dead = 1;
                return VSR_ERR_TOO_BIG;
            }
            break;
        }
        vsr_slice_t line;
        if (p->_line.len) {
            if (vsr_buf_append(&p->_line, data + i, j - i) != VSR_OK) {
                p->_dead = 1;
                return VSR_ERR_TOO_BIG;
            }
            line = vsr_buf_slice(&p->_line);
        } else {
            if (j - i > p->_max) {
                p->_dead = 1;
                return VSR_ERR_TOO_BIG;
            }
            line = vsr_slice(data + i, j - i);
        }
        p->_cr = data[j] == '\r';
        int rc = process_line(p, line);
        vsr_buf_reset(&p->_line);
        if (rc != VSR_OK) {
            p->_dead = 1;
            return rc;
        }
        i = j + 1;
    }
    return VSR_OK;
}
