/*
 * proto/sse — server-sent events framing: the one text/event-stream parser,
 * shared by the gateway (usage in relayed streams), routing (the cache and
 * the response guard) and the stream codecs of this module.  Sans-IO.
 */
#ifndef VSR_PROTO_SSE_H
#define VSR_PROTO_SSE_H

#include "base/base.h"

/* ---- server-sent events (WHATWG HTML, "event stream interpretation") ----
 * An incremental, sans-IO parser of a text/event-stream body: bytes in any
 * pieces, lines ended by CRLF, LF or CR (a CRLF split across pieces is one
 * end), a leading UTF-8 BOM skipped, comment lines (":") ignored, fields
 * event, data, id (ignored when it holds NUL) and retry (ASCII digits only);
 * a blank line dispatches the event when its data is not empty (data lines
 * joined by LF).  An event not ended by a blank line when the stream ends is
 * never dispatched, as the spec says.  Lines and an event's data are
 * bounded (max_line): past it the parser fails with VSR_ERR_TOO_BIG and
 * stays dead. */
typedef struct {
    /* type: the event field or "message"; id: the last event id so far.
     * Slices are valid during the call.  Return VSR_OK to go on, or a
     * negative code to stop (vsr_sse_feed returns it; the parser is dead). */
    int (*on_event)(void *ud, vsr_slice_t type, vsr_slice_t data, vsr_slice_t id);
} vsr_sse_callbacks_t;

typedef struct {
    const vsr_sse_callbacks_t *cb;
    void *ud;
    uint64_t events;     /* dispatched so far */
    uint64_t retry_ms;   /* the last valid retry field; has_retry says whether one came */
    int has_retry;
    /* private */
    size_t _max;
    vsr_buf_t _line, _data, _type, _id;
    int _bom;            /* bytes of the BOM matched so far; -1 once past it */
    unsigned _cr : 1;    /* the last byte was CR: a following LF belongs to it */
    unsigned _dead : 1;
    unsigned _has_data : 1;
} vsr_sse_parser_t;

/* max_line 0 = 1 MiB.  The parser borrows cb and ud. */
void vsr_sse_init(vsr_sse_parser_t *p, size_t max_line, const vsr_sse_callbacks_t *cb, void *ud);
void vsr_sse_free(vsr_sse_parser_t *p);
/* Feeds bytes; every complete event is dispatched before it returns.
 * VSR_OK, VSR_ERR_TOO_BIG (a line or an event's data over max_line), the
 * callback's negative code, or VSR_ERR_INVALID when called on a dead parser. */
int vsr_sse_feed(vsr_sse_parser_t *p, const char *data, size_t len);

#endif /* VSR_PROTO_SSE_H */
