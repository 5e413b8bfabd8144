/* trace.c — W3C Trace Context, span encoding, and the OTLP exporter
 * (OTLP/HTTP with JSON bodies, or OTLP/gRPC with protobuf through a
 * transport the caller gives: see vsr_tracer_grpc_t).
 *
 * A worker encodes a request's spans to OTLP JSON on its own thread, then
 * holds the queue's mutex only to store one pointer in a ring (as the access
 * log does); when the ring holds max_queue_spans the spans are dropped and
 * counted.  The exporter thread takes items off in batches (by count, or
 * when the oldest has waited batch_timeout_ms) and POSTs them to the
 * collector over a kept-alive HTTP/1.1 connection with blocking sockets and
 * poll() deadlines: a slow or dead collector costs the exporter time and
 * spans, never a worker. */
#include "obs-int.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h>

#define DEFAULT_QUEUE_SPANS 8192
#define DEFAULT_BATCH_SPANS 512
#define DEFAULT_BATCH_MS 1000
#define DEFAULT_EXPORT_MS 2000
#define DEFAULT_SHUTDOWN_MS 3000
#define ATTR_CAP 256 /* bytes of an attribute's string value kept */

/* ---- traceparent / tracestate ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* uppercase is invalid (W3C: lowercase hex only) */
}

/* Decodes 2n lowercase hex digits into n bytes; -1 on a bad digit. */
static int unhex(const char *p, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int vsr_traceparent_parse(vsr_slice_t v, vsr_trace_parent_t *out)
{
    if (v.len < VSR_TRACEPARENT_LEN)
        return VSR_ERR_INVALID;
    const char *p = v.p;
    uint8_t version;
    if (unhex(p, &version, 1) != 0 || version == 0xff)
        return VSR_ERR_INVALID;
    if (p[2] != '-' || p[35] != '-' || p[52] != '-')
        return VSR_ERR_INVALID;
    if (version == 0 && v.len != VSR_TRACEPARENT_LEN)
        return VSR_ERR_INVALID;
    /* a later version may add fields, each after a '-' */
    if (version != 0 && v.len > VSR_TRACEPARENT_LEN && p[55] != '-')
        return VSR_ERR_INVALID;
    if (unhex(p + 3, out->trace_id, 16) != 0 || unhex(p + 36, out->span_id, 8) != 0 ||
        unhex(p + 53, &out->flags, 1) != 0)
        return VSR_ERR_INVALID;
    if (all_zero(out->trace_id, 16) || all_zero(out->span_id, 8))
        return VSR_ERR_INVALID;
    return VSR_OK;
}

static const char hexdig[] = "0123456789abcdef";

static char *put_hex(char *o, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        *o++ = hexdig[p[i] >> 4];
        *o++ = hexdig[p[i] & 15];
    }
    return o;
}

void vsr_traceparent_format(const uint8_t trace_id[16], const uint8_t span_id[8], uint8_t flags, char out[56])
{
    char *o = out;
    *o++ = '0', *o++ = '0', *o++ = '-';
    o = put_hex(o, trace_id, 16);
    *o++ = '-';
    o = put_hex(o, span_id, 8);
    *o++ = '-';
    uint8_t f = flags & VSR_TRACE_SAMPLED;
    o = put_hex(o, &f, 1);
    *o = '\0';
}

static int lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static int key_char(char c)
{
    return lcalpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/';
}

/* key = simple-key / multi-tenant-key:
 *   simple-key = lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/")
 *   multi-tenant-key = tenant-id "@" system-id
 *   tenant-id = (lcalpha / DIGIT) 0*240(key chars); system-id = lcalpha 0*13(key chars) */
static int valid_key(vsr_slice_t k)
{
    const char *at = memchr(k.p, '@', k.len);
    if (at == NULL) {
        if (k.len < 1 || k.len > 256 || !lcalpha(k.p[0]))
            return 0;
        for (size_t i = 1; i < k.len; i++)
            if (!key_char(k.p[i]))
                return 0;
        return 1;
    }
    size_t tl = (size_t)(at - k.p), sl = k.len - tl - 1;
    if (tl < 1 || tl > 241 || sl < 1 || sl > 14)
        return 0;
    if (!lcalpha(k.p[0]) && !(k.p[0] >= '0' && k.p[0] <= '9'))
        return 0;
    for (size_t i = 1; i < tl; i++)
        if (!key_char(k.p[i]))
            return 0;
    if (!lcalpha(at[1]))
        return 0;
    for (size_t i = 1; i < sl; i++)
        if (!key_char(at[1 + i]))
            return 0;
    return 1;
}

/* value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr = %x21-2B / %x2D-3C / %x3E-7E */
static int valid_value(vsr_slice_t v)
{
    if (v.len < 1 || v.len > 256 || v.p[v.len - 1] == ' ')
        return 0;
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.p[i];
        if (c < 0x20 || c > 0x7e || c == ',' || c == '=')
            return 0;
    }
    return 1;
}

int vsr_tracestate_valid(vsr_slice_t v)
{
    if (v.len > 512)
        return 0;
    unsigned members = 0;
    vsr_slice_t rest = v;
    while (rest.p != NULL) {
        vsr_slice_t m = vsr_slice_trim(vsr_slice_split(rest, ',', &rest));
        if (m.len == 0)
            continue; /* empty list members are allowed */
        vsr_slice_t val;
        vsr_slice_t key = vsr_slice_split(m, '=', &val);
        if (val.p == NULL || !valid_key(key) || !valid_value(val))
            return 0;
        if (++members > 32)
            return 0;
    }
    return 1;
}

/* ---- ids and sampling ---- */

/* xoshiro256** per thread, seeded from getrandom (a fixed-but-distinct
 * fallback if that fails: ids only need to be unique, not secret). */
static _Thread_local uint64_t rng_s[4];
static _Thread_local int rng_ready;

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(void)
{
    if (VSR_UNLIKELY(!rng_ready)) {
        if (getrandom(rng_s, sizeof(rng_s), 0) != (ssize_t)sizeof(rng_s) || all_zero((uint8_t *)rng_s, sizeof(rng_s))) {
            uint64_t x = (uint64_t)vsr_now_us() ^ (uint64_t)(uintptr_t)&rng_s;
            for (int i = 0; i < 4; i++) { /* splitmix64 */
                x += 0x9e3779b97f4a7c15ull;
                uint64_t z = x;
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                rng_s[i] = z ^ (z >> 31);
            }
        }
        rng_ready = 1;
    }
    uint64_t r = rotl(rng_s[1] * 5, 7) * 9, t = rng_s[1] << 17;
    rng_s[2] ^= rng_s[0];
    rng_s[3] ^= rng_s[1];
    rng_s[1] ^= rng_s[2];
    rng_s[0] ^= rng_s[3];
    rng_s[2] ^= t;
    rng_s[3] = rotl(rng_s[3], 45);
    return r;
}

void vsr_trace_new_trace_id(uint8_t out[16])
{
    do {
        uint64_t a = rng_next(), b = rng_next();
        memcpy(out, &a, 8);
        memcpy(out + 8, &b, 8);
    } while (all_zero(out, 16));
}

void vsr_trace_new_span_id(uint8_t out[8])
{
    do {
        uint64_t a = rng_next();
        memcpy(out, &a, 8);
    } while (all_zero(out, 8));
}

int vsr_trace_sample_root(double ratio, const uint8_t trace_id[16])
{
    if (!(ratio > 0))
        return 0; /* also NaN */
    if (ratio >= 1)
        return 1;
    uint64_t x = 0;
    for (int i = 8; i < 16; i++)
        x = x << 8 | trace_id[i];
    x &= (1ull << 63) - 1;
    return (double)x < ratio * 9223372036854775808.0;
}

/* ---- span encoding ---- */

static int put_hex_string(vsr_buf_t *b, const uint8_t *p, size_t n)
{
    char tmp[40];
    char *e = put_hex(tmp, p, n);
    int rc = vsr_buf_append(b, "\"", 1);
    rc |= vsr_buf_append(b, tmp, (size_t)(e - tmp));
    return rc | vsr_buf_append(b, "\"", 1);
}

static int put_attr_string(vsr_buf_t *b, vsr_slice_t v)
{
    char clean[3 * ATTR_CAP];
    size_t n = vsr__obs_utf8_clean(v, ATTR_CAP, clean);
    return vsr_buf_append_json_string(b, vsr_slice(clean, n));
}

int vsr_span_to_json(vsr_buf_t *b, const vsr_span_t *s)
{
    int rc = vsr_buf_append_cstr(b, "{\"traceId\":");
    rc |= put_hex_string(b, s->trace_id, 16);
    rc |= vsr_buf_append_cstr(b, ",\"spanId\":");
    rc |= put_hex_string(b, s->span_id, 8);
    if (!all_zero(s->parent_id, 8)) {
        rc |= vsr_buf_append_cstr(b, ",\"parentSpanId\":");
        rc |= put_hex_string(b, s->parent_id, 8);
    }
    rc |= vsr_buf_append_cstr(b, ",\"name\":");
    rc |= put_attr_string(b, vsr_slice_cstr(s->name ? s->name : ""));
    rc |= vsr_buf_printf(b, ",\"kind\":%d,\"startTimeUnixNano\":\"%" PRIu64 "\",\"endTimeUnixNano\":\"%" PRIu64 "\"",
                         (int)s->kind, s->start_ns, s->end_ns >= s->start_ns ? s->end_ns : s->start_ns);
    rc |= vsr_buf_append_cstr(b, ",\"attributes\":[");
    for (size_t i = 0; i < s->n_attrs; i++) {
        const vsr_span_attr_t *a = &s->attrs[i];
        rc |= vsr_buf_append_cstr(b, i ? ",{\"key\":" : "{\"key\":");
        rc |= vsr_buf_append_json_string(b, vsr_slice_cstr(a->key));
        if (a->is_num) {
            rc |= vsr_buf_printf(b, ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", a->num);
        } else {
            rc |= vsr_buf_append_cstr(b, ",\"value\":{\"stringValue\":");
            rc |= put_attr_string(b, a->str);
            rc |= vsr_buf_append_cstr(b, "}}");
        }
    }
    rc |= vsr_buf_printf(b, "],\"status\":{\"code\":%d}}", (int)s->status);
    return rc ? VSR_ERR : VSR_OK;
}

/* protobuf's wire form, for the wrappers around pre-encoded spans */
static void put_varint(vsr_buf_t *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    vsr_buf_append(b, tmp, n);
}

/* field `field` (wire type 2, length-delimited) holding n bytes */
static void put_len_field(vsr_buf_t *b, unsigned field, const void *p, size_t n)
{
    put_varint(b, (uint64_t)field << 3 | 2);
    put_varint(b, n);
    vsr_buf_append(b, p, n);
}

typedef Opentelemetry__Proto__Common__V1__KeyValue pb_kv_t;
typedef Opentelemetry__Proto__Common__V1__AnyValue pb_any_t;

/* one attribute; the string (cleaned like the JSON form's) lives in clean */
static void pb_attr(pb_kv_t *kv, pb_any_t *v, const char *key, const vsr_span_attr_t *a, vsr_slice_t str,
                    char *clean)
{
    opentelemetry__proto__common__v1__key_value__init(kv);
    opentelemetry__proto__common__v1__any_value__init(v);
    kv->key = (char *)key;
    kv->value = v;
    if (a != NULL && a->is_num) {
        v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
        v->int_value = a->num;
    } else {
        size_t n = vsr__obs_utf8_clean(str, ATTR_CAP, clean);
        clean[n] = '\0';
        v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
        v->string_value = clean;
    }
}

/* a ProtobufCBuffer that appends to a vsr_buf_t */
typedef struct {
    ProtobufCBuffer base;
    vsr_buf_t *b;
} pb_sink_t;

static void pb_sink_append(ProtobufCBuffer *pb, size_t len, const uint8_t *data)
{
    vsr_buf_append(((pb_sink_t *)pb)->b, data, len);
}

int vsr_span_to_proto(vsr_buf_t *b, const vsr_span_t *s)
{
    enum { MAX_ATTRS = 64 };
    Opentelemetry__Proto__Trace__V1__Span sp;
    Opentelemetry__Proto__Trace__V1__Status st;
    opentelemetry__proto__trace__v1__span__init(&sp);
    opentelemetry__proto__trace__v1__status__init(&st);
    size_t n = VSR_MIN(s->n_attrs, (size_t)MAX_ATTRS);
    pb_kv_t kv[MAX_ATTRS], *kvp[MAX_ATTRS];
    pb_any_t val[MAX_ATTRS];
    char *clean = vsr_malloc((n + 1) * (3 * ATTR_CAP + 1));
    char *name = clean + n * (3 * ATTR_CAP + 1);
    size_t nl = vsr__obs_utf8_clean(vsr_slice_cstr(s->name ? s->name : ""), ATTR_CAP, name);
    name[nl] = '\0';
    for (size_t i = 0; i < n; i++) {
        pb_attr(&kv[i], &val[i], s->attrs[i].key, &s->attrs[i], s->attrs[i].str, clean + i * (3 * ATTR_CAP + 1));
        kvp[i] = &kv[i];
    }
    sp.trace_id = (ProtobufCBinaryData){16, (uint8_t *)s->trace_id};
    sp.span_id = (ProtobufCBinaryData){8, (uint8_t *)s->span_id};
    if (!all_zero(s->parent_id, 8))
        sp.parent_span_id = (ProtobufCBinaryData){8, (uint8_t *)s->parent_id};
    sp.name = name;
    sp.kind = (Opentelemetry__Proto__Trace__V1__Span__SpanKind)s->kind;
    sp.start_time_unix_nano = s->start_ns;
    sp.end_time_unix_nano = s->end_ns >= s->start_ns ? s->end_ns : s->start_ns;
    sp.n_attributes = n;
    sp.attributes = kvp;
    sp.dropped_attributes_count = (uint32_t)(s->n_attrs - n);
    st.code = (Opentelemetry__Proto__Trace__V1__Status__StatusCode)s->status;
    sp.status = &st;
    size_t before = b->len;
    pb_sink_t sink = {{pb_sink_append}, b};
    size_t want = opentelemetry__proto__trace__v1__span__get_packed_size(&sp);
    opentelemetry__proto__trace__v1__span__pack_to_buffer(&sp, &sink.base);
    vsr_free(clean);
    return b->len - before == want ? VSR_OK : VSR_ERR; /* a buffer that hit its bound */
}

int vsr_tracer_grpc_answer(const uint8_t *p, size_t n, int64_t *rejected, char *msg, size_t msg_cap)
{
    *rejected = 0;
    if (msg_cap)
        msg[0] = '\0';
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse *r =
        opentelemetry__proto__collector__trace__v1__export_trace_service_response__unpack(NULL, n, p);
    if (r == NULL)
        return VSR_ERR_INVALID;
    if (r->partial_success != NULL) {
        *rejected = r->partial_success->rejected_spans;
        const char *m = r->partial_success->error_message ? r->partial_success->error_message : "";
        size_t k = 0;
        for (; m[k] && k + 1 < msg_cap; k++)
            msg[k] = m[k] >= 0x20 && m[k] < 0x7f ? m[k] : '?';
        if (msg_cap)
            msg[k] = '\0';
    }
    opentelemetry__proto__collector__trace__v1__export_trace_service_response__free_unpacked(r, NULL);
    return VSR_OK;
}

/* ---- the tracer ---- */

typedef struct {
    char *data; /* JSON: span objects joined by ','; gRPC: ScopeSpans.spans fields, each a Span */
    size_t len;
    unsigned n_spans;
    uint64_t queued_ms;
} item_t;

struct vsr_tracer_s {
    char host[256];
    uint16_t port;
    char path[1024];
    char *envelope_head; /* {"resourceSpans":[{"resource":...,"scopeSpans":[{"scope":...,"spans":[ */
    vsr_tracer_grpc_t grpc;   /* .export non-NULL: OTLP/gRPC */
    char *endpoint;           /* as configured, for logs */
    vsr_buf_t pb_resource;    /* gRPC: ResourceSpans.resource, a Resource message */
    vsr_buf_t pb_scope;       /* gRPC: ScopeSpans.scope, an InstrumentationScope message */
    double ratio;
    size_t max_queue_spans, max_batch_spans;
    uint64_t batch_ms, export_ms, shutdown_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    item_t *ring;
    size_t cap, head, count, spans;
    int stop;
    /* exporter thread only */
    int fd;
    int last_failed;
    _Atomic uint64_t exported, dropped, failed, failures;
};

/* host[:port] (an IPv6 literal in brackets) of hp_len bytes at p */
static int parse_hostport(const char *p, size_t hp_len, char *host, size_t host_len, uint16_t *port,
                          uint16_t default_port, const char **why)
{
    const char *hs = p, *he;
    const char *port_s = NULL;
    if (hp_len > 0 && p[0] == '[') {
        const char *close = memchr(p, ']', hp_len);
        if (close == NULL) {
            *why = "unterminated IPv6 address in the exporter endpoint";
            return VSR_ERR_INVALID;
        }
        hs = p + 1;
        he = close;
        if (close + 1 < p + hp_len) {
            if (close[1] != ':') {
                *why = "bad port in the exporter endpoint";
                return VSR_ERR_INVALID;
            }
            port_s = close + 2;
        }
    } else {
        const char *colon = memchr(p, ':', hp_len);
        he = colon ? colon : p + hp_len;
        if (colon)
            port_s = colon + 1;
    }
    if (he == hs || (size_t)(he - hs) >= host_len || memchr(hs, '@', (size_t)(he - hs)) != NULL) {
        *why = "the exporter endpoint has no usable host";
        return VSR_ERR_INVALID;
    }
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    *port = default_port;
    if (port_s) {
        uint64_t v;
        if (vsr_slice_to_u64(vsr_slice(port_s, (size_t)(p + hp_len - port_s)), 65535, &v) != VSR_OK || v == 0) {
            *why = "bad port in the exporter endpoint";
            return VSR_ERR_INVALID;
        }
        *port = (uint16_t)v;
    }
    return VSR_OK;
}

int vsr_tracer_parse_endpoint(const char *url, char *host, size_t host_len, uint16_t *port, char *path,
                              size_t path_len, const char **why)
{
    const char *p = url ? url : "";
    if (strncmp(p, "https://", 8) == 0) {
        *why = "https collector endpoints are not supported: point the exporter at a local collector over http://";
        return VSR_ERR_INVALID;
    }
    if (strncmp(p, "http://", 7) != 0) {
        *why = "the exporter endpoint must be an http:// URL (OTLP/HTTP, e.g. http://127.0.0.1:4318)";
        return VSR_ERR_INVALID;
    }
    p += 7;
    const char *slash = strchr(p, '/');
    size_t hp_len = slash ? (size_t)(slash - p) : strlen(p);
    if (parse_hostport(p, hp_len, host, host_len, port, 4318, why) != VSR_OK)
        return VSR_ERR_INVALID;
    const char *ps = slash ? slash : "";
    if (strpbrk(ps, "?# \t\r\n") != NULL) {
        *why = "the exporter endpoint may not hold a query, a fragment or spaces";
        return VSR_ERR_INVALID;
    }
    if (ps[0] == '\0' || strcmp(ps, "/") == 0)
        ps = "/v1/traces";
    if (strlen(ps) >= path_len) {
        *why = "the exporter endpoint's path is too long";
        return VSR_ERR_INVALID;
    }
    strcpy(path, ps);
    return VSR_OK;
}

int vsr_tracer_parse_grpc_endpoint(const char *ep, char *host, size_t host_len, uint16_t *port, const char **why)
{
    static const char *const schemes[] = {"grpc://", "grpcs://", "http://", "https://"};
    const char *p = ep ? ep : "";
    const char *sep = strstr(p, "://");
    if (sep != NULL) {
        size_t i = 0;
        while (i < VSR_ARRAY_LEN(schemes) && strncmp(p, schemes[i], strlen(schemes[i])) != 0)
            i++;
        if (i == VSR_ARRAY_LEN(schemes)) {
            *why = "an OTLP/gRPC endpoint is host:port, or a grpc://, grpcs://, http:// or https:// URL";
            return VSR_ERR_INVALID;
        }
        p = sep + 3;
    }
    size_t hp_len = strlen(p);
    if (hp_len > 0 && p[hp_len - 1] == '/')
        hp_len--;
    if (memchr(p, '/', hp_len) != NULL || strpbrk(p, "?# \t\r\n") != NULL) {
        *why = "an OTLP/gRPC endpoint has no path, query or spaces (the service's method is fixed)";
        return VSR_ERR_INVALID;
    }
    return parse_hostport(p, hp_len, host, host_len, port, 4317, why);
}

static void put_resource_attr(vsr_buf_t *b, int first, const char *key, const char *val)
{
    vsr_buf_append_cstr(b, first ? "{\"key\":" : ",{\"key\":");
    vsr_buf_append_json_string(b, vsr_slice_cstr(key));
    vsr_buf_append_cstr(b, ",\"value\":{\"stringValue\":");
    put_attr_string(b, vsr_slice_cstr(val));
    vsr_buf_append_cstr(b, "}}");
}

/* ---- the exporter's HTTP client ---- */

static void drop_conn(vsr_tracer_t *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
}

static int connect_collector(vsr_tracer_t *t, uint64_t deadline)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", t->port);
    int fd = vsr_tcp_dial(t->host, port, deadline);
    t->fd = fd;
    return fd >= 0 ? 0 : -1;
}

static int send_all(int fd, const char *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (vsr_fd_wait(fd, POLLOUT, deadline) != 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Reads the answer: its status, and its body when it has a content-length
 * (then the connection is kept); -1 on a failure or when the connection
 * must be dropped after a status was read (*status is then set). */
static int read_answer(vsr_tracer_t *t, uint64_t deadline, int *status)
{
    char buf[8192];
    size_t len = 0;
    char *end = NULL;
    *status = 0;
    while (end == NULL) {
        if (len == sizeof(buf) - 1 || vsr_fd_wait(t->fd, POLLIN, deadline) != 0)
            return -1;
        ssize_t r = recv(t->fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return -1;
        len += (size_t)r;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0)
        return -1;
    *status = atoi(buf + 9);
    /* the body: skipped when its length is known, else the connection goes */
    long long clen = -1;
    int keep = 1;
    for (char *line = strstr(buf, "\r\n") + 2; line < end; line = strstr(line, "\r\n") + 2) {
        if (strncasecmp(line, "content-length:", 15) == 0)
            clen = atoll(line + 15);
        else if (strncasecmp(line, "transfer-encoding:", 18) == 0 ||
                 (strncasecmp(line, "connection:", 11) == 0 && strstr(line, "close") != NULL &&
                  strstr(line, "close") < strstr(line, "\r\n")))
            keep = 0;
    }
    if (clen < 0 || !keep)
        return -1;
    size_t have = len - (size_t)(end + 4 - buf);
    while ((long long)have < clen) {
        if (vsr_fd_wait(t->fd, POLLIN, deadline) != 0)
            return -1;
        ssize_t r = recv(t->fd, buf, VSR_MIN(sizeof(buf), (size_t)(clen - (long long)have)), 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return -1;
        have += (size_t)r;
    }
    return 0;
}

/* One POST; 0 when the collector answered 2xx. */
static int post_batch(vsr_tracer_t *t, const vsr_buf_t *body, uint64_t deadline)
{
    char head[1536];
    int hl = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.1\r\nhost: %s%s%s:%u\r\ncontent-type: application/json\r\n"
                      "content-length: %zu\r\nuser-agent: vsr\r\n\r\n",
                      t->path, strchr(t->host, ':') ? "[" : "", t->host, strchr(t->host, ':') ? "]" : "",
                      t->port, body->len);
    for (int tries = 0; tries < 2; tries++) {
        int reused = t->fd >= 0;
        if (t->fd < 0 && connect_collector(t, deadline) != 0)
            return -1;
        int status = 0;
        if (send_all(t->fd, head, (size_t)hl, deadline) == 0 && send_all(t->fd, body->data, body->len, deadline) == 0) {
            int rc = read_answer(t, deadline, &status);
            if (rc != 0)
                drop_conn(t);
            if (status)
                return status >= 200 && status < 300 ? 0 : -1;
        } else {
            drop_conn(t);
        }
        /* a kept-alive connection the collector closed meanwhile: once more on a new one */
        if (!reused)
            return -1;
    }
    return -1;
}

/* ExportTraceServiceRequest{resource_spans: [{resource, scope_spans: [{scope, spans}]}]}
 * around the items' pre-encoded spans; one call.  0 when the collector took
 * it (grpc-status OK); *rejected its partial_success's count. */
static int export_grpc(vsr_tracer_t *t, item_t *items, size_t n, uint64_t deadline, int64_t *rejected)
{
    vsr_buf_t scope_spans, resource_spans, req;
    vsr_buf_init(&scope_spans, 0);
    vsr_buf_init(&resource_spans, 0);
    vsr_buf_init(&req, 0);
    put_len_field(&scope_spans, 1, t->pb_scope.data, t->pb_scope.len); /* ScopeSpans.scope */
    for (size_t i = 0; i < n; i++)
        vsr_buf_append(&scope_spans, items[i].data, items[i].len); /* ScopeSpans.spans, each */
    put_len_field(&resource_spans, 1, t->pb_resource.data, t->pb_resource.len);  /* ResourceSpans.resource */
    put_len_field(&resource_spans, 2, scope_spans.data, scope_spans.len);        /* ResourceSpans.scope_spans */
    put_len_field(&req, 1, resource_spans.data, resource_spans.len); /* ExportTraceServiceRequest.resource_spans */
    vsr_buf_free(&scope_spans);
    vsr_buf_free(&resource_spans);
    const uint8_t *answer = NULL;
    size_t answer_len = 0;
    char why[256] = "";
    int st = t->grpc.export(t->grpc.ud, (const uint8_t *)req.data, req.len, deadline, &answer, &answer_len, why,
                            sizeof(why));
    vsr_buf_free(&req);
    *rejected = 0;
    if (st == 0) {
        char msg[128];
        if (answer_len > 0 && vsr_tracer_grpc_answer(answer, answer_len, rejected, msg, sizeof(msg)) == VSR_OK &&
            *rejected > 0 && !t->last_failed)
            vsr_log_warn("obs", "the collector at %s rejected %" PRId64 " spans: %s", t->endpoint, *rejected, msg);
        return 0;
    }
    if (!t->last_failed) {
        if (st > 0)
            vsr_log_warn("obs", "trace export to %s failed: grpc-status %d%s%s (spans lost; more are not reported)",
                         t->endpoint, st, why[0] ? ": " : "", why);
        else
            vsr_log_warn("obs", "trace export to %s failed: %s (spans lost; more are not reported)", t->endpoint,
                         why[0] ? why : "no answer");
    }
    return -1;
}

static void export_items(vsr_tracer_t *t, item_t *items, size_t n, uint64_t deadline)
{
    unsigned spans = 0;
    for (size_t i = 0; i < n; i++)
        spans += items[i].n_spans;
    int ok;
    int64_t rejected = 0;
    if (t->grpc.export != NULL) {
        ok = export_grpc(t, items, n, deadline, &rejected) == 0;
        for (size_t i = 0; i < n; i++)
            vsr_free(items[i].data);
    } else {
        vsr_buf_t body;
        vsr_buf_init(&body, 0);
        vsr_buf_append_cstr(&body, t->envelope_head);
        for (size_t i = 0; i < n; i++) {
            if (i)
                vsr_buf_append(&body, ",", 1);
            vsr_buf_append(&body, items[i].data, items[i].len);
            vsr_free(items[i].data);
        }
        vsr_buf_append_cstr(&body, "]}]}]}");
        ok = post_batch(t, &body, deadline) == 0;
        if (!ok && !t->last_failed)
            vsr_log_warn("obs", "trace export to http://%s:%u%s failed (%u spans lost; more are not reported)",
                         t->host, t->port, t->path, spans);
        vsr_buf_free(&body);
    }
    if (ok) {
        uint64_t bad = rejected > 0 ? VSR_MIN((uint64_t)rejected, (uint64_t)spans) : 0;
        atomic_fetch_add_explicit(&t->exported, spans - bad, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->failed, bad, memory_order_relaxed);
        t->last_failed = bad > 0;
    } else {
        atomic_fetch_add_explicit(&t->failed, spans, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->failures, 1, memory_order_relaxed);
        t->last_failed = 1;
    }
}

static void timespec_at(struct timespec *ts, uint64_t ms_from_now)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms_from_now / 1000);
    ts->tv_nsec += (long)(ms_from_now % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *exporter_main(void *arg)
{
    vsr_tracer_t *t = arg;
    item_t *batch = vsr_malloc(t->max_batch_spans * sizeof(*batch));
    uint64_t stop_deadline = 0;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        for (;;) {
            if (t->stop || t->spans >= t->max_batch_spans)
                break;
            if (t->count > 0) {
                uint64_t age = vsr_now_ms() - t->ring[t->head].queued_ms;
                if (age >= t->batch_ms)
                    break;
                struct timespec ts;
                timespec_at(&ts, t->batch_ms - age);
                pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            } else {
                pthread_cond_wait(&t->cv, &t->mu);
            }
        }
        if (t->stop && stop_deadline == 0)
            stop_deadline = vsr_now_ms() + t->shutdown_ms;
        if (t->count == 0 || (stop_deadline && vsr_now_ms() >= stop_deadline)) {
            /* stopping: what could not be sent in time is dropped */
            size_t left = t->spans;
            while (t->count > 0) {
                vsr_free(t->ring[t->head].data);
                t->head = t->head + 1 == t->cap ? 0 : t->head + 1;
                t->count--;
            }
            t->spans = 0;
            pthread_mutex_unlock(&t->mu);
            atomic_fetch_add_explicit(&t->dropped, left, memory_order_relaxed);
            break;
        }
        size_t n = 0, spans = 0;
        while (t->count > 0 && n < t->max_batch_spans &&
               (n == 0 || spans + t->ring[t->head].n_spans <= t->max_batch_spans)) {
            batch[n] = t->ring[t->head];
            spans += batch[n].n_spans;
            n++;
            t->head = t->head + 1 == t->cap ? 0 : t->head + 1;
            t->count--;
        }
        t->spans -= spans;
        pthread_mutex_unlock(&t->mu);
        uint64_t deadline = vsr_now_ms() + t->export_ms;
        if (stop_deadline && stop_deadline < deadline)
            deadline = stop_deadline;
        export_items(t, batch, n, deadline);
    }
    drop_conn(t);
    vsr_free(batch);
    return NULL;
}

/* the Resource and InstrumentationScope every gRPC batch carries, the same
 * attributes as the JSON envelope's */
static void encode_pb_envelope(vsr_tracer_t *t, const vsr_tracer_opts_t *o)
{
    const char *keys[5], *vals[5];
    size_t n = 0;
    keys[n] = "service.name", vals[n++] = o->service_name && o->service_name[0] ? o->service_name : "vsr";
    if (o->service_version && o->service_version[0])
        keys[n] = "service.version", vals[n++] = o->service_version;
    if (o->environment && o->environment[0])
        keys[n] = "deployment.environment", vals[n++] = o->environment;
    keys[n] = "telemetry.sdk.name", vals[n++] = "vsr";
    keys[n] = "telemetry.sdk.language", vals[n++] = "c";
    pb_kv_t kv[5], *kvp[5];
    pb_any_t val[5];
    char *clean = vsr_malloc(n * (3 * ATTR_CAP + 1));
    for (size_t i = 0; i < n; i++) {
        pb_attr(&kv[i], &val[i], keys[i], NULL, vsr_slice_cstr(vals[i]), clean + i * (3 * ATTR_CAP + 1));
        kvp[i] = &kv[i];
    }
    Opentelemetry__Proto__Resource__V1__Resource res;
    opentelemetry__proto__resource__v1__resource__init(&res);
    res.n_attributes = n;
    res.attributes = kvp;
    vsr_buf_init(&t->pb_resource, 0);
    pb_sink_t sink = {{pb_sink_append}, &t->pb_resource};
    opentelemetry__proto__resource__v1__resource__pack_to_buffer(&res, &sink.base);
    vsr_free(clean);

    Opentelemetry__Proto__Common__V1__InstrumentationScope scope;
    opentelemetry__proto__common__v1__instrumentation_scope__init(&scope);
    scope.name = "vsr";
    vsr_buf_init(&t->pb_scope, 0);
    sink.b = &t->pb_scope;
    opentelemetry__proto__common__v1__instrumentation_scope__pack_to_buffer(&scope, &sink.base);
}

static void free_envelope(vsr_tracer_t *t)
{
    vsr_free(t->envelope_head);
    vsr_free(t->endpoint);
    vsr_buf_free(&t->pb_resource);
    vsr_buf_free(&t->pb_scope);
}

vsr_tracer_t *vsr_tracer_new(const vsr_tracer_opts_t *o, vsr_buf_t *err)
{
    vsr_tracer_t *t = vsr_calloc(1, sizeof(*t));
    const char *why = NULL;
    int bad = o->grpc != NULL
                  ? vsr_tracer_parse_grpc_endpoint(o->endpoint, t->host, sizeof(t->host), &t->port, &why) != VSR_OK
                  : vsr_tracer_parse_endpoint(o->endpoint, t->host, sizeof(t->host), &t->port, t->path,
                                              sizeof(t->path), &why) != VSR_OK;
    if (!bad && o->grpc != NULL && o->grpc->export == NULL) {
        why = "no gRPC transport";
        bad = 1;
    }
    if (bad) {
        if (err)
            vsr_buf_printf(err, "tracing: %s: %s", o->endpoint ? o->endpoint : "(no endpoint)", why);
        vsr_free(t);
        return NULL;
    }
    t->ratio = o->sampling_ratio;
    t->max_queue_spans = o->max_queue_spans ? o->max_queue_spans : DEFAULT_QUEUE_SPANS;
    t->max_batch_spans = o->max_batch_spans ? o->max_batch_spans : DEFAULT_BATCH_SPANS;
    t->batch_ms = o->batch_timeout_ms ? o->batch_timeout_ms : DEFAULT_BATCH_MS;
    t->export_ms = o->export_timeout_ms ? o->export_timeout_ms : DEFAULT_EXPORT_MS;
    t->shutdown_ms = o->shutdown_timeout_ms ? o->shutdown_timeout_ms : DEFAULT_SHUTDOWN_MS;
    t->cap = t->max_queue_spans; /* an item holds at least one span */
    t->ring = vsr_calloc(t->cap, sizeof(item_t));
    t->fd = -1;

    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    put_resource_attr(&b, 1, "service.name", o->service_name && o->service_name[0] ? o->service_name : "vsr");
    if (o->service_version && o->service_version[0])
        put_resource_attr(&b, 0, "service.version", o->service_version);
    if (o->environment && o->environment[0])
        put_resource_attr(&b, 0, "deployment.environment", o->environment);
    put_resource_attr(&b, 0, "telemetry.sdk.name", "vsr");
    put_resource_attr(&b, 0, "telemetry.sdk.language", "c");
    vsr_buf_append_cstr(&b, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"vsr\"},\"spans\":[");
    vsr_buf_append(&b, "", 1);
    t->envelope_head = b.data;
    t->endpoint = vsr_strdup(o->endpoint);
    if (o->grpc != NULL) {
        t->grpc = *o->grpc;
        encode_pb_envelope(t, o);
    }

    atomic_init(&t->exported, 0);
    atomic_init(&t->dropped, 0);
    atomic_init(&t->failed, 0);
    atomic_init(&t->failures, 0);
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);

    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t->thread, NULL, exporter_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        if (err)
            vsr_buf_printf(err, "tracing: cannot start the exporter thread: %s", strerror(rc));
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free_envelope(t);
        vsr_free(t->ring);
        vsr_free(t);
        return NULL;
    }
    return t;
}

void vsr_tracer_free(vsr_tracer_t *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free_envelope(t);
    vsr_free(t->ring);
    vsr_free(t);
}

double vsr_tracer_ratio(const vsr_tracer_t *t)
{
    return t ? t->ratio : 0;
}

void vsr_tracer_emit(vsr_tracer_t *t, const vsr_span_t *spans, size_t n)
{
    if (t == NULL || n == 0)
        return;
    if (n > t->max_batch_spans) {
        atomic_fetch_add_explicit(&t->dropped, n, memory_order_relaxed);
        return;
    }
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_reserve(&b, 512 * n);
    if (t->grpc.export != NULL) {
        vsr_buf_t one;
        vsr_buf_init(&one, 0);
        for (size_t i = 0; i < n; i++) {
            vsr_buf_reset(&one);
            vsr_span_to_proto(&one, &spans[i]);
            put_len_field(&b, 2, one.data, one.len); /* ScopeSpans.spans */
        }
        vsr_buf_free(&one);
    } else {
        for (size_t i = 0; i < n; i++) {
            if (i)
                vsr_buf_append(&b, ",", 1);
            vsr_span_to_json(&b, &spans[i]);
        }
    }
    item_t it = {b.data, b.len, (unsigned)n, vsr_now_ms()};
    int queued = 0;
    pthread_mutex_lock(&t->mu);
    if (!t->stop && t->count < t->cap && t->spans + n <= t->max_queue_spans) {
        size_t tail = t->head + t->count;
        t->ring[tail >= t->cap ? tail - t->cap : tail] = it;
        t->count++;
        t->spans += n;
        /* the exporter sleeps on an empty ring, or waits for a full batch */
        if (t->count == 1 || t->spans >= t->max_batch_spans)
            pthread_cond_signal(&t->cv);
        queued = 1;
    }
    pthread_mutex_unlock(&t->mu);
    if (!queued) {
        vsr_free(it.data);
        atomic_fetch_add_explicit(&t->dropped, n, memory_order_relaxed);
    }
}

void vsr_tracer_stats(const vsr_tracer_t *t, vsr_tracer_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (t == NULL)
        return;
    vsr_tracer_t *m = (vsr_tracer_t *)t;
    out->spans_exported = atomic_load_explicit(&m->exported, memory_order_relaxed);
    out->spans_dropped = atomic_load_explicit(&m->dropped, memory_order_relaxed);
    out->spans_failed = atomic_load_explicit(&m->failed, memory_order_relaxed);
    out->export_failures = atomic_load_explicit(&m->failures, memory_order_relaxed);
}
