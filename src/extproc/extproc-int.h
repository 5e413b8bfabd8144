/*
 * extproc-int.h — the pieces of the ext_proc adapter below its server: the
 * gRPC message framing, the grpc-timeout and grpc-message forms, and the
 * codec between Envoy's ext_proc messages (proto/, protobuf-c) and the
 * routing core's phase inputs and Effects.
 *
 * The codec applies the standalone adapter's rules to what it encodes, so
 * both modes change a request the same way (routing.h "Effect"):
 *   - header removals, then sets; a set overwrites (append false, and the
 *     matching append_action for forward compatibility); values go in
 *     raw_value, the only field Envoy reads;
 *   - host, :authority, :method and :scheme are never mutated, and of the
 *     x-envoy-* headers only the five a decision's reliability override
 *     becomes (the five-header rule);
 *   - a replaced body carries its content-length; a new upstream path is a
 *     :path set; clear_route_cache only on request-path answers;
 *   - an immediate answer is an ImmediateResponse with its headers and body.
 *
 * Memory: a decoded message lives in the pool it was decoded with (its
 * slices point there) until the pool is cleared.  Encoders append to a
 * vsr_buf_t and fail with VSR_ERR_TOO_BIG when its cap is reached.
 * Nothing here blocks or keeps state between calls except the deframer.
 */
#ifndef VSR_EXTPROC_INT_H
#define VSR_EXTPROC_INT_H

#include "base/base.h"
#include "extproc/extproc.h"
#include "routing/routing.h"

/* ---- gRPC length-prefixed messages ---- */

#define VSR_GRPC_PREFIX 5                    /* compressed flag (1 byte) + length (4, big endian) */
#define VSR_GRPC_DEFAULT_MAX (64u << 20)     /* bytes of one message: a buffered body rides in one */

/* Splits a stream's DATA into messages.  Bytes are fed as they come; each
 * whole message goes to on_msg (borrowed for the call).  max bounds one
 * message's length (0 = VSR_GRPC_DEFAULT_MAX); what is held between calls
 * is at most one message. */
typedef struct {
    uint32_t max;
    uint8_t prefix[VSR_GRPC_PREFIX];
    size_t have_prefix;     /* bytes of the prefix read so far */
    uint32_t need;          /* the current message's length, once the prefix is whole */
    vsr_buf_t msg;          /* the current message's bytes read so far */
} vsr_grpc_deframer_t;

void vsr__grpc_deframer_init(vsr_grpc_deframer_t *d, uint32_t max);
void vsr__grpc_deframer_free(vsr_grpc_deframer_t *d);
/* VSR_OK (everything fed was taken), or, with *grpc_status set and nothing
 * more to be fed: VSR_ERR_TOO_BIG (a message over max: RESOURCE_EXHAUSTED),
 * VSR_ERR_INVALID (a compressed message: none was negotiated, UNIMPLEMENTED;
 * a bad flag byte: INTERNAL), or on_msg's own error (its non-zero return,
 * status INTERNAL unless on_msg set it). */
int vsr__grpc_deframe(vsr_grpc_deframer_t *d, const uint8_t *p, size_t n,
                      int (*on_msg)(void *ud, const uint8_t *msg, size_t len, int *grpc_status), void *ud,
                      int *grpc_status);
/* 1 when the stream may end here (no partial message held). */
int vsr__grpc_deframer_idle(const vsr_grpc_deframer_t *d);
/* Appends the 5-byte prefix for a message of len bytes (uncompressed). */
int vsr__grpc_frame_prefix(vsr_buf_t *out, size_t len);


/* ---- ProcessingRequest ---- */

typedef enum {
    VSR_XP_NONE = 0,          /* no part set: a protocol error */
    VSR_XP_REQUEST_HEADERS,
    VSR_XP_RESPONSE_HEADERS,
    VSR_XP_REQUEST_BODY,
    VSR_XP_RESPONSE_BODY,
    VSR_XP_REQUEST_TRAILERS,
    VSR_XP_RESPONSE_TRAILERS,
} vsr_xp_kind_t;

/* Envoy's BodySendMode values. */
typedef enum {
    VSR_XP_BODY_NONE = 0,
    VSR_XP_BODY_STREAMED = 1,
    VSR_XP_BODY_BUFFERED = 2,
    VSR_XP_BODY_BUFFERED_PARTIAL = 3,
    VSR_XP_BODY_FULL_DUPLEX = 4,
    VSR_XP_BODY_GRPC = 5,
} vsr_xp_body_mode_t;

#define VSR_XP_MAX_HEADERS 1024   /* fields in one decoded header map */

typedef struct {
    vsr_xp_kind_t kind;
    /* headers and trailers: names as sent (Envoy lower-cases them), values
     * from raw_value, else value; pseudo-headers (:method, :path, :status,
     * ...) included, in order */
    vsr_header_t *headers;
    size_t n_headers;
    vsr_slice_t body;              /* bodies */
    int end_of_stream;             /* headers: no body follows; bodies: the last chunk */
    int observability_mode;        /* Envoy ignores answers: none is sent */
    int has_protocol_config;       /* the first message's body modes */
    vsr_xp_body_mode_t request_body_mode, response_body_mode;
    int send_body_without_waiting;
} vsr_xp_message_t;

/* Decodes one ProcessingRequest.  VSR_OK, or VSR_ERR_INVALID with *why
 * (static text) for bytes that are not one, a header map over
 * VSR_XP_MAX_HEADERS, or an empty header name.  Unknown fields are skipped.
 * A message with no part set decodes as VSR_XP_NONE (the caller refuses
 * it).  Everything *out points to lives in pool. */
int vsr__xp_decode(const uint8_t *p, size_t n, vsr_pool_t *pool, vsr_xp_message_t *out, const char **why);
/* The value of a header of a decoded message (first match, name compared
 * case-insensitively), or 0. */
int vsr__xp_header(const vsr_xp_message_t *m, const char *name, vsr_slice_t *value);

/* ---- ProcessingResponse ---- */

/* A per-request processing mode override (on a headers answer). */
typedef struct {
    int set;                       /* 0: no mode_override */
    vsr_xp_body_mode_t request_body_mode, response_body_mode;
} vsr_xp_mode_t;

/* Encodes the answer to a message of kind `to` from a phase's effect (NULL
 * = an empty CONTINUE): an ImmediateResponse when eff->status != 0, else
 * the headers or body answer of that kind with the effect's header
 * mutation, body mutation (a body phase; or a headers phase with
 * CONTINUE_AND_REPLACE) and clear_route_cache.  mode may be NULL.  The
 * ProcessingResponse bytes are appended to out (no gRPC prefix).  VSR_OK,
 * VSR_ERR_INVALID (kind NONE or a trailers kind with a body), or
 * VSR_ERR_TOO_BIG (out's cap). */
int vsr__xp_encode(vsr_xp_kind_t to, const vsr_effect_t *eff, const vsr_xp_mode_t *mode, vsr_buf_t *out);

/* Encodes an ImmediateResponse of the adapter's own (an error it answers
 * itself): status, content-type and body, plus `details` for Envoy's
 * access log (may be empty). */
int vsr__xp_encode_immediate(int status, vsr_slice_t content_type, vsr_slice_t body, vsr_slice_t details,
                             vsr_buf_t *out);

/* 1 when Envoy applies a set of this header from an ext_proc answer under
 * the rendered template (the standalone rules plus the five-header rule). */
int vsr__xp_settable(vsr_slice_t name);

#endif /* VSR_EXTPROC_INT_H */
