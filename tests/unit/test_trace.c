/* test_trace.c — W3C trace context (traceparent, tracestate), ids, the
 * sampler, span JSON and protobuf, the exporter's queue accounting, its
 * OTLP/HTTP POST and its OTLP/gRPC batches (through a stand-in transport),
 * the gRPC answer's parts, and the tracing configuration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "json/json.h"
#include "obs/obs.h"
#include "upstream/upstream.h"

#include <opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h>

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define PID "00f067aa0ba902b7"

static int parse(const char *s, vsr_trace_parent_t *tp)
{
    return vsr_traceparent_parse(vsr_slice_cstr(s), tp);
}

static void test_traceparent_valid(void **state)
{
    vsr_trace_parent_t tp;
    assert_int_equal(parse("00-" TID "-" PID "-01", &tp), VSR_OK);
    assert_int_equal(tp.trace_id[0], 0x4b);
    assert_int_equal(tp.trace_id[15], 0x36);
    assert_int_equal(tp.span_id[0], 0x00);
    assert_int_equal(tp.span_id[7], 0xb7);
    assert_int_equal(tp.flags, 1);
    assert_int_equal(parse("00-" TID "-" PID "-00", &tp), VSR_OK);
    assert_int_equal(tp.flags, 0);
    /* unknown flags are read (and not propagated: see the formatter) */
    assert_int_equal(parse("00-" TID "-" PID "-ff", &tp), VSR_OK);
    assert_int_equal(tp.flags, 0xff);
    /* a future version: exactly 55 bytes, or more after a '-' */
    assert_int_equal(parse("01-" TID "-" PID "-01", &tp), VSR_OK);
    assert_int_equal(parse("cc-" TID "-" PID "-01-what-the-future-will-be-like", &tp), VSR_OK);
    assert_int_equal(tp.flags, 1);
}

static void test_traceparent_invalid(void **state)
{
    vsr_trace_parent_t tp;
    static const char *bad[] = {
        "",
        "00",
        "00-" TID "-" PID "-0",                           /* short */
        "00-" TID "-" PID "-01-",                         /* version 00 is exactly 55 bytes */
        "00-" TID "-" PID "-01 ",
        "ff-" TID "-" PID "-01",                          /* version ff is invalid */
        "0g-" TID "-" PID "-01",
        "01-" TID "-" PID "-01x",                         /* a future version: more only after '-' */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-" PID "-01", /* uppercase */
        "00-" TID "-00F067AA0BA902B7-01",
        "00-" TID "-" PID "-0A",
        "00-00000000000000000000000000000000-" PID "-01", /* all-zero trace id */
        "00-" TID "-0000000000000000-01",                 /* all-zero span id */
        "00_" TID "-" PID "-01",
        "00-" TID "_" PID "-01",
        "00-" TID "-" PID "_01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-" PID "-01",  /* 31 hex digits */
        "00-" TID "-" PID "-1",
        "00- bf92f3577b34da6a3ce929d0e0e4736-" PID "-01",
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++) {
        if (parse(bad[i], &tp) != VSR_ERR_INVALID)
            fail_msg("accepted: \"%s\"", bad[i]);
    }
}

static void test_traceparent_format_roundtrip(void **state)
{
    vsr_trace_parent_t tp, back;
    assert_int_equal(parse("00-" TID "-" PID "-01", &tp), VSR_OK);
    char out[56];
    vsr_traceparent_format(tp.trace_id, tp.span_id, tp.flags, out);
    assert_string_equal(out, "00-" TID "-" PID "-01");
    /* only the sampled bit goes out */
    vsr_traceparent_format(tp.trace_id, tp.span_id, 0xfe, out);
    assert_string_equal(out, "00-" TID "-" PID "-00");
    assert_int_equal(strlen(out), VSR_TRACEPARENT_LEN);
    /* random ids format into something the parser takes back */
    for (int i = 0; i < 1000; i++) {
        uint8_t t[16], s[8];
        vsr_trace_new_trace_id(t);
        vsr_trace_new_span_id(s);
        vsr_traceparent_format(t, s, 1, out);
        assert_int_equal(vsr_traceparent_parse(vsr_slice_cstr(out), &back), VSR_OK);
        assert_memory_equal(back.trace_id, t, 16);
        assert_memory_equal(back.span_id, s, 8);
    }
}

static void test_ids_distinct(void **state)
{
    uint8_t a[8], b[8];
    vsr_trace_new_span_id(a);
    int same = 0;
    for (int i = 0; i < 10000; i++) {
        vsr_trace_new_span_id(b);
        same += memcmp(a, b, 8) == 0;
        memcpy(a, b, 8);
    }
    assert_int_equal(same, 0);
}

static void test_tracestate(void **state)
{
    assert_true(vsr_tracestate_valid(vsr_slice_cstr("congo=t61rcWkgMzE")));
    assert_true(vsr_tracestate_valid(vsr_slice_cstr("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")));
    assert_true(vsr_tracestate_valid(vsr_slice_cstr("a=1 , ,b=2")));            /* OWS, empty members */
    assert_true(vsr_tracestate_valid(vsr_slice_cstr("fw529a3039@dt=abc")));      /* multi-tenant key */
    assert_true(vsr_tracestate_valid(vsr_slice_cstr("")));
    assert_false(vsr_tracestate_valid(vsr_slice_cstr("Congo=x")));               /* uppercase key */
    assert_false(vsr_tracestate_valid(vsr_slice_cstr("congo")));                 /* no value */
    assert_false(vsr_tracestate_valid(vsr_slice_cstr("congo=")));
    assert_false(vsr_tracestate_valid(vsr_slice_cstr("congo=a=b")));
    assert_false(vsr_tracestate_valid(vsr_slice_cstr("a@=1")));
    assert_false(vsr_tracestate_valid(vsr_slice_cstr("congo=x\x01")));
    char many[1024] = "";
    for (int i = 0; i < 33; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sk%d=v", i ? "," : "", i);
    assert_false(vsr_tracestate_valid(vsr_slice_cstr(many)));                  /* 33 members */
    *strrchr(many, ',') = '\0';
    assert_true(vsr_tracestate_valid(vsr_slice_cstr(many)));                   /* 32 */
    char big[600];
    memset(big, 'a', sizeof(big));
    big[0] = 'k', big[1] = '=';
    big[sizeof(big) - 1] = '\0';
    assert_false(vsr_tracestate_valid(vsr_slice_cstr(big)));                   /* over 512 bytes */
}

static void test_sampler(void **state)
{
    uint8_t id[16];
    int hits = 0;
    for (int i = 0; i < 20000; i++) {
        vsr_trace_new_trace_id(id);
        assert_false(vsr_trace_sample_root(0, id));
        assert_true(vsr_trace_sample_root(1, id));
        hits += vsr_trace_sample_root(0.25, id);
        /* a function of the id: the same answer twice */
        assert_int_equal(vsr_trace_sample_root(0.5, id), vsr_trace_sample_root(0.5, id));
    }
    assert_true(hits > 4000 && hits < 6000);
    /* the low 63 bits decide */
    memset(id, 0, 16);
    id[15] = 1;
    assert_true(vsr_trace_sample_root(1e-9, id));
    memset(id + 8, 0xff, 8);
    assert_false(vsr_trace_sample_root(0.999999, id));
}

static void make_span(vsr_span_t *s, vsr_span_attr_t *attrs)
{
    memset(s, 0, sizeof(*s));
    vsr_trace_parent_t tp;
    assert_int_equal(parse("00-" TID "-" PID "-01", &tp), VSR_OK);
    memcpy(s->trace_id, tp.trace_id, 16);
    memcpy(s->span_id, tp.span_id, 8);
    s->name = "vsr.request";
    s->start_ns = 1700000000123456789ull;
    s->end_ns = 1700000000223456789ull;
    s->kind = VSR_SPAN_SERVER;
    s->status = VSR_SPAN_ERROR;
    attrs[0] = (vsr_span_attr_t){.key = "url.path", .str = vsr_slice_cstr("/v1/\"x\"\xff")};
    attrs[1] = (vsr_span_attr_t){.key = "http.response.status_code", .num = 503, .is_num = 1};
    s->attrs = attrs;
    s->n_attrs = 2;
}

static void test_span_json(void **state)
{
    vsr_span_t s;
    vsr_span_attr_t attrs[2];
    make_span(&s, attrs);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr_span_to_json(&b, &s), VSR_OK);
    vsr_buf_append(&b, "", 1);
    assert_string_equal(b.data,
                        "{\"traceId\":\"" TID "\",\"spanId\":\"" PID "\",\"name\":\"vsr.request\",\"kind\":2,"
                        "\"startTimeUnixNano\":\"1700000000123456789\",\"endTimeUnixNano\":\"1700000000223456789\","
                        "\"attributes\":[{\"key\":\"url.path\",\"value\":{\"stringValue\":\"/v1/\\\"x\\\"\xef\xbf\xbd\"}},"
                        "{\"key\":\"http.response.status_code\",\"value\":{\"intValue\":\"503\"}}],"
                        "\"status\":{\"code\":2}}");
    /* a child names its parent; an end before the start is clamped */
    vsr_buf_reset(&b);
    memset(s.parent_id, 0xab, 8);
    s.end_ns = 1;
    s.n_attrs = 0;
    assert_int_equal(vsr_span_to_json(&b, &s), VSR_OK);
    vsr_buf_append(&b, "", 1);
    assert_non_null(strstr(b.data, "\"parentSpanId\":\"abababababababab\""));
    assert_non_null(strstr(b.data, "\"endTimeUnixNano\":\"1700000000123456789\""));
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, b.data, b.len - 1, NULL), VSR_OK);
    vsr_json_free(&j);
    vsr_buf_free(&b);
}

static void test_endpoint_parse(void **state)
{
    char host[64], path[64];
    uint16_t port;
    const char *why = NULL;
    assert_int_equal(vsr_tracer_parse_endpoint("http://127.0.0.1:4318", host, sizeof(host), &port, path,
                                               sizeof(path), &why), VSR_OK);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 4318);
    assert_string_equal(path, "/v1/traces");
    assert_int_equal(vsr_tracer_parse_endpoint("http://collector/otlp/v1/traces", host, sizeof(host), &port, path,
                                               sizeof(path), &why), VSR_OK);
    assert_string_equal(host, "collector");
    assert_int_equal(port, 4318);
    assert_string_equal(path, "/otlp/v1/traces");
    assert_int_equal(vsr_tracer_parse_endpoint("http://[::1]:9/", host, sizeof(host), &port, path, sizeof(path),
                                               &why), VSR_OK);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 9);
    static const char *bad[] = {"https://c:4318", "c:4317", "http://", "http://:80", "http://h:0", "http://h:x",
                                "http://h:70000", "http://h/p?q", "http://u@h", "http://[::1"};
    for (size_t i = 0; i < VSR_ARRAY_LEN(bad); i++) {
        why = NULL;
        if (vsr_tracer_parse_endpoint(bad[i], host, sizeof(host), &port, path, sizeof(path), &why) !=
            VSR_ERR_INVALID)
            fail_msg("accepted: %s", bad[i]);
        assert_non_null(why);
    }
}

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd); /* nothing listens there now */
    return ntohs(a.sin_port);
}

static void test_queue_drops_counted(void **state)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", closed_port());
    /* a batch that never fills and never times out: everything stays queued */
    vsr_tracer_opts_t o = {.endpoint = ep, .sampling_ratio = 1, .max_queue_spans = 5, .max_batch_spans = 100,
                           .batch_timeout_ms = 600000, .shutdown_timeout_ms = 2000};
    vsr_tracer_t *t = vsr_tracer_new(&o, NULL);
    assert_non_null(t);
    vsr_span_t s[3];
    vsr_span_attr_t attrs[3][2];
    for (int i = 0; i < 3; i++)
        make_span(&s[i], attrs[i]);
    vsr_tracer_emit(t, s, 2); /* 2 queued */
    vsr_tracer_emit(t, s, 3); /* 5 queued */
    vsr_tracer_emit(t, s, 1); /* dropped */
    vsr_tracer_emit(t, s, 3); /* dropped */
    vsr_tracer_stats_t st;
    vsr_tracer_stats(t, &st);
    assert_int_equal(st.spans_dropped, 4);
    assert_int_equal(st.spans_exported, 0);
    assert_int_equal(st.export_failures, 0);
    /* the same counters in the metrics text */
    vsr_metrics_t *m = vsr_metrics_new(1);
    vsr_metrics_attach(m, NULL, t);
    vsr_metrics_tokens(vsr_metrics_shard(m, 0), vsr_slice_cstr("m1"), 3, 5);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr_metrics_render(m, &out);
    vsr_buf_append(&out, "", 1);
    assert_non_null(strstr(out.data, "\nvsr_tracing_spans_dropped_total{reason=\"queue_full\"} 4\n"));
    assert_non_null(strstr(out.data, "\nvsr_tracing_spans_dropped_total{reason=\"export_failed\"} 0\n"));
    assert_non_null(strstr(out.data, "\nvsr_tracing_export_failures_total 0\n"));
    assert_non_null(strstr(out.data, "\nvsr_tracing_spans_exported_total 0\n"));
    assert_non_null(strstr(out.data, "\nvsr_access_log_dropped_total 0\n"));
    assert_non_null(strstr(out.data, "\nvsr_tokens_total{model=\"m1\",type=\"completion\"} 5\n"));
    assert_non_null(strstr(out.data, "\nvsr_tokens_total{model=\"m1\",type=\"prompt\"} 3\n"));
    vsr_buf_free(&out);
    vsr_metrics_free(m);
    vsr_tracer_free(t); /* the flush fails fast: nothing listens */
    vsr_tracer_stats(NULL, &st);
    assert_int_equal(st.spans_dropped, 0);
    vsr_tracer_emit(NULL, s, 1); /* no-op */
}

typedef struct {
    int lfd;
    char body[65536];
    size_t body_len;
    char head[4096];
    int requests;
} collector_t;

/* Answers requests on one kept-alive connection with 200 until EOF. */
static void *collector_main(void *arg)
{
    collector_t *c = arg;
    int fd = accept(c->lfd, NULL, NULL);
    char buf[131072];
    size_t len = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + len, sizeof(buf) - len, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
        for (;;) {
            buf[len < sizeof(buf) ? len : sizeof(buf) - 1] = '\0';
            char *end = strstr(buf, "\r\n\r\n");
            if (end == NULL)
                break;
            char *cl = strstr(buf, "content-length: ");
            size_t n = cl ? strtoul(cl + 16, NULL, 10) : 0;
            size_t hl = (size_t)(end + 4 - buf);
            if (len < hl + n)
                break;
            snprintf(c->head, sizeof(c->head), "%.*s", (int)hl, buf);
            memcpy(c->body, end + 4, n < sizeof(c->body) ? n : sizeof(c->body) - 1);
            c->body_len = n;
            c->requests++;
            const char *ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
            send(fd, ok, strlen(ok), 0);
            memmove(buf, buf + hl + n, len - hl - n);
            len -= hl + n;
        }
    }
    close(fd);
    return NULL;
}

static void test_export_posts_otlp_json(void **state)
{
    collector_t *c = calloc(1, sizeof(*c));
    c->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    assert_int_equal(bind(c->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    listen(c->lfd, 4);
    getsockname(c->lfd, (struct sockaddr *)&a, &l);
    pthread_t th;
    pthread_create(&th, NULL, collector_main, c);

    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d/custom/traces", ntohs(a.sin_port));
    vsr_tracer_opts_t o = {.endpoint = ep, .service_name = "svc", .environment = "test", .sampling_ratio = 1,
                           .max_batch_spans = 2, .batch_timeout_ms = 50};
    vsr_tracer_t *t = vsr_tracer_new(&o, NULL);
    vsr_span_t s[2];
    vsr_span_attr_t attrs[2][2];
    make_span(&s[0], attrs[0]);
    make_span(&s[1], attrs[1]);
    vsr_tracer_emit(t, s, 2);
    vsr_tracer_stats_t st;
    for (int i = 0; i < 500; i++) {
        vsr_tracer_stats(t, &st);
        if (st.spans_exported == 2)
            break;
        usleep(10000);
    }
    assert_int_equal(st.spans_exported, 2);
    vsr_tracer_emit(t, s, 1); /* the same connection, kept alive */
    vsr_tracer_free(t);       /* flushes it */
    pthread_join(th, NULL);
    close(c->lfd);
    assert_int_equal(c->requests, 2);
    assert_non_null(strstr(c->head, "POST /custom/traces HTTP/1.1\r\n"));
    assert_non_null(strstr(c->head, "content-type: application/json\r\n"));
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, c->body, c->body_len, NULL), VSR_OK);
    uint32_t rs, arr;
    assert_int_equal(vsr_json_object_get(&j, 0, "resourceSpans", &rs), VSR_OK);
    assert_int_equal(vsr_json_type(&j, rs), VSR_JSON_ARRAY);
    assert_int_equal(vsr_json_object_get(&j, rs + 1, "scopeSpans", &arr), VSR_OK);
    vsr_json_free(&j);
    c->body[c->body_len] = '\0';
    assert_non_null(strstr(c->body, "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"svc\"}}"));
    assert_non_null(strstr(c->body, "{\"key\":\"deployment.environment\",\"value\":{\"stringValue\":\"test\"}}"));
    assert_non_null(strstr(c->body, "\"spans\":[{\"traceId\":\"" TID "\""));
    free(c);
}

typedef struct {
    vsr_tracer_t *t;
    int n;
} emitter_t;

static void *emitter_main(void *arg)
{
    emitter_t *e = arg;
    vsr_span_t s;
    vsr_span_attr_t attrs[2];
    make_span(&s, attrs);
    for (int i = 0; i < e->n; i++)
        vsr_tracer_emit(e->t, &s, 1);
    return NULL;
}

/* Several workers emit at once; every span reaches the collector once. */
static void test_concurrent_emitters(void **state)
{
    collector_t *c = calloc(1, sizeof(*c));
    c->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    assert_int_equal(bind(c->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    listen(c->lfd, 4);
    getsockname(c->lfd, (struct sockaddr *)&a, &l);
    pthread_t th;
    pthread_create(&th, NULL, collector_main, c);
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", ntohs(a.sin_port));
    vsr_tracer_opts_t o = {.endpoint = ep, .sampling_ratio = 1, .max_queue_spans = 100000, .max_batch_spans = 64,
                           .batch_timeout_ms = 10};
    vsr_tracer_t *t = vsr_tracer_new(&o, NULL);
    enum { THREADS = 4, EACH = 500 };
    pthread_t em[THREADS];
    emitter_t e = {t, EACH};
    for (int i = 0; i < THREADS; i++)
        pthread_create(&em[i], NULL, emitter_main, &e);
    for (int i = 0; i < THREADS; i++)
        pthread_join(em[i], NULL);
    vsr_tracer_stats_t st;
    for (int i = 0; i < 1000; i++) {
        vsr_tracer_stats(t, &st);
        if (st.spans_exported == THREADS * EACH)
            break;
        usleep(10000);
    }
    assert_int_equal(st.spans_exported, THREADS * EACH);
    assert_int_equal(st.spans_dropped + st.spans_failed + st.export_failures, 0);
    assert_true(c->requests >= THREADS * EACH / 64);
    vsr_tracer_free(t);
    pthread_join(th, NULL);
    close(c->lfd);
    free(c);
}

/* ---- configuration ---- */

#define DOC(tracing)                                                                                         \
    "version: v0.3\nlisteners:\n  - name: l\n    port: 8080\nproviders:\n  models:\n    - name: m\n"       \
    "      backend_refs:\n        - endpoint: 127.0.0.1:8000\nglobal:\n  services:\n    observability:\n" \
    "      tracing:\n" tracing

static vsr_config_t *load(const char *yaml, vsr_buf_t *err)
{
    vsr_config_t *c = NULL;
    vsr_buf_init(err, 1 << 16);
    vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, err);
    vsr_buf_append(err, "", 1);
    return c;
}

static void test_config_tracing(void **state)
{
    vsr_buf_t err;
    vsr_config_t *c = load(DOC("        enabled: true\n        provider: opentelemetry\n"
                               "        exporter:\n          type: otlp\n          endpoint: http://127.0.0.1:4318\n"
                               "          insecure: true\n"
                               "        sampling:\n          type: probabilistic\n          rate: 0.25\n"
                               "        resource:\n          service_name: svc\n          service_version: v1\n"
                               "          deployment_environment: prod\n"),
                           &err);
    assert_non_null(c);
    assert_true(c->tracing_enabled);
    assert_string_equal(c->tracing_endpoint, "http://127.0.0.1:4318");
    assert_true(c->tracing_sampling_ratio == 0.25);
    assert_string_equal(c->tracing_service_name, "svc");
    assert_string_equal(c->tracing_service_version, "v1");
    assert_string_equal(c->tracing_environment, "prod");
    vsr_config_free(c);
    vsr_buf_free(&err);

    c = load(DOC("        enabled: true\n        exporter:\n          endpoint: http://c\n"
                 "        sampling:\n          type: always_off\n"), &err);
    assert_non_null(c);
    assert_true(c->tracing_sampling_ratio == 0);
    assert_string_equal(c->tracing_service_name, "vllm-sr");
    vsr_config_free(c);
    vsr_buf_free(&err);

    /* enabled with no exporter (otlp_endpoint: '' is none): the reference
     * cannot make an exporter and runs untraced, and so does vsr */
    c = load(DOC("        enabled: true\n        sampling_ratio: 0.1\n        otlp_endpoint: ''\n"), &err);
    assert_non_null(c);
    assert_false(c->tracing_enabled);
    assert_null(c->tracing_endpoint);
    vsr_config_free(c);
    vsr_buf_free(&err);

    /* disabled: no endpoint needed */
    c = load(DOC("        enabled: false\n"), &err);
    assert_non_null(c);
    assert_false(c->tracing_enabled);
    vsr_config_free(c);
    vsr_buf_free(&err);
}

static void test_config_tracing_errors(void **state)
{
    vsr_buf_t err;
    assert_null(load(DOC("        enabled: true\n        exporter:\n          endpoint: https://c:4318\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:16:21: "));
    assert_non_null(strstr(err.data, "https collectors are not supported"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: otlp-http\n"), &err));
    assert_non_null(strstr(err.data, "exporter.endpoint is required"));
    vsr_buf_free(&err);
    /* OTLP/gRPC: the scheme and insecure may not contradict; no path */
    assert_null(load(DOC("        enabled: true\n        exporter:\n          endpoint: grpcs://jaeger:4317\n"
                         "          insecure: true\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:17:21: "));
    assert_non_null(strstr(err.data, "exporter.insecure: true contradicts the endpoint's scheme (TLS)"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: otlp-grpc\n"
                         "          endpoint: http://jaeger:4317\n          insecure: false\n"), &err));
    assert_non_null(strstr(err.data, "exporter.insecure: false contradicts the endpoint's scheme (plaintext)"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: otlp-grpc\n"
                         "          endpoint: http://jaeger:4317/v1/traces\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:17:21: "));
    assert_non_null(strstr(err.data, "no path, query, fragment or user info"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: otlp-grpc\n"
                         "          endpoint: ftp://jaeger:4317\n"), &err));
    assert_non_null(strstr(err.data, "the scheme must be grpc://, grpcs://, http:// or https://"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: otlp-http\n"
                         "          endpoint: grpc://jaeger:4317\n"), &err));
    assert_non_null(strstr(err.data, "type otlp-http exports OTLP/HTTP, but the endpoint is a gRPC one"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: otlp-grpc\n"), &err));
    assert_non_null(strstr(err.data, "an OTLP/gRPC collector, e.g. 127.0.0.1:4317"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: stdout\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:16:17: "));
    assert_non_null(strstr(err.data, "exporter.type \"stdout\" is not supported yet; export OTLP/HTTP instead"));
    vsr_buf_free(&err);
    /* disabled, a reference exporter loads: nothing is exported */
    vsr_config_t *c = load(DOC("        enabled: false\n        exporter:\n          type: stdout\n"), &err);
    assert_non_null(c);
    vsr_config_free(c);
    vsr_buf_free(&err);
    assert_null(load(DOC("        sampling:\n          rate: 1.5\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:15:17: "));
    vsr_buf_free(&err);
    assert_null(load(DOC("        provider: zipkin\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:14:19: "));
    vsr_buf_free(&err);
    assert_null(load(DOC("        sampling:\n          type: sometimes\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:15:17: "));
    vsr_buf_free(&err);
}

/* ---- OTLP/gRPC ---- */

static void test_grpc_config(void **state)
{
    static const struct {
        const char *exporter;
        int grpc, tls;
    } cases[] = {
        {"          endpoint: jaeger:4317\n", 1, 0}, /* the reference's form: type otlp, insecure by default */
        {"          type: otlp\n          endpoint: jaeger:4317\n          insecure: true\n", 1, 0},
        {"          endpoint: jaeger:4317\n          insecure: false\n", 1, 1},
        {"          endpoint: grpc://jaeger:4317\n", 1, 0},
        {"          endpoint: grpcs://jaeger\n", 1, 1},
        {"          type: otlp-grpc\n          endpoint: http://jaeger:4317/\n", 1, 0},
        {"          type: otlp-grpc\n          endpoint: https://[::1]:4317\n          insecure: false\n", 1, 1},
        {"          type: otlp\n          endpoint: http://jaeger:4318\n", 0, 0}, /* OTLP/HTTP as before */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char doc[1024];
        snprintf(doc, sizeof(doc), DOC("        enabled: true\n        exporter:\n%s"), cases[i].exporter);
        vsr_buf_t err;
        vsr_config_t *c = load(doc, &err);
        if (c == NULL)
            fail_msg("case %zu: %s", i, err.data);
        assert_int_equal(c->tracing_grpc, cases[i].grpc);
        assert_int_equal(c->tracing_grpc_tls, cases[i].tls);
        vsr_config_free(c);
        vsr_buf_free(&err);
    }
}

static void test_grpc_change_needs_restart(void **state)
{
    /* the same endpoint text, another protocol or TLS: the exporter thread is built once */
    vsr_buf_t err, why;
    vsr_config_t *a = load(DOC("        enabled: true\n        exporter:\n          endpoint: jaeger:4317\n"), &err);
    vsr_buf_free(&err);
    vsr_config_t *b = load(DOC("        enabled: true\n        exporter:\n          endpoint: jaeger:4317\n"
                               "          insecure: false\n"), &err);
    vsr_buf_free(&err);
    assert_non_null(a);
    assert_non_null(b);
    vsr_buf_init(&why, 0);
    assert_int_equal(vsr_config_restart_required(a, a, &why), 0);
    assert_int_equal(vsr_config_restart_required(a, b, &why), 1);
    vsr_buf_append(&why, "", 1);
    assert_non_null(strstr(why.data, "global.services.observability.tracing changed"));
    vsr_buf_free(&why);
    vsr_config_free(a);
    vsr_config_free(b);
}

static void test_grpc_endpoint_parse(void **state)
{
    char host[64];
    uint16_t port = 0;
    const char *why = NULL;
    assert_int_equal(vsr_tracer_parse_grpc_endpoint("jaeger:4317", host, sizeof(host), &port, &why), VSR_OK);
    assert_string_equal(host, "jaeger");
    assert_int_equal(port, 4317);
    assert_int_equal(vsr_tracer_parse_grpc_endpoint("grpcs://c.example", host, sizeof(host), &port, &why), VSR_OK);
    assert_string_equal(host, "c.example");
    assert_int_equal(port, 4317);
    assert_int_equal(vsr_tracer_parse_grpc_endpoint("http://[::1]:9/", host, sizeof(host), &port, &why), VSR_OK);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 9);
    assert_int_equal(vsr_tracer_parse_grpc_endpoint("grpc://h:1/x", host, sizeof(host), &port, &why),
                     VSR_ERR_INVALID);
    assert_int_equal(vsr_tracer_parse_grpc_endpoint("tcp://h:1", host, sizeof(host), &port, &why), VSR_ERR_INVALID);
    assert_int_equal(vsr_tracer_parse_grpc_endpoint("h:0", host, sizeof(host), &port, &why), VSR_ERR_INVALID);
    assert_int_equal(vsr_tracer_parse_grpc_endpoint("", host, sizeof(host), &port, &why), VSR_ERR_INVALID);
}

static void test_span_proto(void **state)
{
    vsr_span_t s;
    vsr_span_attr_t attrs[2];
    make_span(&s, attrs);
    memset(s.parent_id, 0x11, 8);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr_span_to_proto(&b, &s), VSR_OK);
    Opentelemetry__Proto__Trace__V1__Span *sp =
        opentelemetry__proto__trace__v1__span__unpack(NULL, b.len, (const uint8_t *)b.data);
    assert_non_null(sp);
    assert_int_equal(sp->trace_id.len, 16);
    assert_memory_equal(sp->trace_id.data, s.trace_id, 16);
    assert_memory_equal(sp->span_id.data, s.span_id, 8);
    assert_int_equal(sp->parent_span_id.len, 8);
    assert_string_equal(sp->name, "vsr.request");
    assert_int_equal(sp->kind, 2);
    assert_true(sp->start_time_unix_nano == 1700000000123456789ull);
    assert_true(sp->end_time_unix_nano == 1700000000223456789ull);
    assert_int_equal(sp->status->code, 2);
    assert_int_equal(sp->n_attributes, 2);
    assert_string_equal(sp->attributes[0]->key, "url.path");
    assert_string_equal(sp->attributes[0]->value->string_value, "/v1/\"x\"\xef\xbf\xbd"); /* valid UTF-8 */
    assert_string_equal(sp->attributes[1]->key, "http.response.status_code");
    assert_int_equal(sp->attributes[1]->value->value_case, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
    assert_int_equal(sp->attributes[1]->value->int_value, 503);
    opentelemetry__proto__trace__v1__span__free_unpacked(sp, NULL);
    vsr_buf_free(&b);
}

/* A stand-in transport: records each request; answers with `status`
 * (and `rejected` in partial_success); `block` holds every call until
 * released. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int status, block, calls;
    int64_t rejected;
    size_t spans;
    char service[64];
    uint8_t answer[64];
} fake_grpc_t;

static int fake_export(void *ud, const uint8_t *msg, size_t len, uint64_t deadline_ms, const uint8_t **answer,
                       size_t *answer_len, char *why, size_t why_cap)
{
    fake_grpc_t *f = ud;
    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest *r =
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(NULL, len, msg);
    pthread_mutex_lock(&f->mu);
    while (f->block)
        pthread_cond_wait(&f->cv, &f->mu);
    f->calls++;
    if (r != NULL && r->n_resource_spans == 1) {
        Opentelemetry__Proto__Trace__V1__ResourceSpans *rs = r->resource_spans[0];
        for (size_t i = 0; i < rs->resource->n_attributes; i++)
            if (strcmp(rs->resource->attributes[i]->key, "service.name") == 0)
                snprintf(f->service, sizeof(f->service), "%s", rs->resource->attributes[i]->value->string_value);
        for (size_t i = 0; i < rs->n_scope_spans; i++) {
            assert_string_equal(rs->scope_spans[i]->scope->name, "vsr");
            f->spans += rs->scope_spans[i]->n_spans;
        }
    }
    int st = f->status;
    if (st == 0 && f->rejected) {
        Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse resp =
            OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_SERVICE_RESPONSE__INIT;
        Opentelemetry__Proto__Collector__Trace__V1__ExportTracePartialSuccess ps =
            OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_PARTIAL_SUCCESS__INIT;
        ps.rejected_spans = f->rejected;
        ps.error_message = "too old";
        resp.partial_success = &ps;
        *answer_len = opentelemetry__proto__collector__trace__v1__export_trace_service_response__pack(&resp,
                                                                                                     f->answer);
        *answer = f->answer;
    }
    pthread_mutex_unlock(&f->mu);
    if (st != 0)
        snprintf(why, why_cap, "unavailable");
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(r, NULL);
    return st;
}

static void fake_init(fake_grpc_t *f, int status)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->status = status;
}

static void fake_release(fake_grpc_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->block = 0;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void test_grpc_export_batches(void **state)
{
    fake_grpc_t f;
    fake_init(&f, 0);
    vsr_tracer_grpc_t g = {&f, fake_export};
    vsr_tracer_opts_t o = {.endpoint = "127.0.0.1:4317", .grpc = &g, .service_name = "svc", .sampling_ratio = 1,
                           .max_batch_spans = 4, .batch_timeout_ms = 20};
    vsr_tracer_t *t = vsr_tracer_new(&o, NULL);
    assert_non_null(t);
    vsr_span_t s[3];
    vsr_span_attr_t attrs[3][2];
    for (int i = 0; i < 3; i++)
        make_span(&s[i], attrs[i]);
    for (int i = 0; i < 5; i++)
        vsr_tracer_emit(t, s, 2);
    vsr_tracer_free(t); /* flushes */
    assert_int_equal(f.spans, 10);
    assert_true(f.calls >= 3); /* at most 4 spans a batch */
    assert_string_equal(f.service, "svc");

    /* UNAVAILABLE: every span failed, each batch a failure */
    fake_init(&f, 14);
    t = vsr_tracer_new(&o, NULL);
    vsr_tracer_emit(t, s, 3);
    vsr_tracer_emit(t, s, 3);
    vsr_tracer_stats_t st;
    for (int i = 0; i < 500; i++) {
        vsr_tracer_stats(t, &st);
        if (st.spans_failed == 6)
            break;
        usleep(10000);
    }
    assert_int_equal(st.spans_failed, 6);
    assert_int_equal(st.spans_exported, 0);
    assert_int_equal(st.export_failures, f.calls);
    vsr_tracer_free(t);

    /* partial success: the rejected spans count as failed, not as a failed batch */
    fake_init(&f, 0);
    f.rejected = 1;
    t = vsr_tracer_new(&o, NULL);
    vsr_tracer_emit(t, s, 3);
    for (int i = 0; i < 500; i++) {
        vsr_tracer_stats(t, &st);
        if (st.spans_exported + st.spans_failed == 3)
            break;
        usleep(10000);
    }
    assert_int_equal(st.spans_exported, 2);
    assert_int_equal(st.spans_failed, 1);
    assert_int_equal(st.export_failures, 0);
    vsr_tracer_free(t);
    assert_int_equal(f.spans, 3);
}

static void test_grpc_queue_bound(void **state)
{
    /* a collector that never answers: the queue fills and the rest is dropped and counted */
    fake_grpc_t f;
    fake_init(&f, 0);
    f.block = 1;
    vsr_tracer_grpc_t g = {&f, fake_export};
    vsr_tracer_opts_t o = {.endpoint = "127.0.0.1:4317", .grpc = &g, .sampling_ratio = 1, .max_queue_spans = 6,
                           .max_batch_spans = 2, .batch_timeout_ms = 1, .shutdown_timeout_ms = 100};
    vsr_tracer_t *t = vsr_tracer_new(&o, NULL);
    vsr_span_t s[2];
    vsr_span_attr_t attrs[2][2];
    for (int i = 0; i < 2; i++)
        make_span(&s[i], attrs[i]);
    for (int i = 0; i < 50; i++)
        vsr_tracer_emit(t, s, 2);
    vsr_tracer_stats_t st;
    vsr_tracer_stats(t, &st);
    /* at most one batch (2) at the transport and 6 queued; the rest dropped */
    assert_true(st.spans_dropped >= 100 - 8);
    fake_release(&f);
    vsr_tracer_free(t);
}

static void test_grpc_answer_parts(void **state)
{
    assert_int_equal(vsr_grpc_status_parse(vsr_slice_cstr("0")), 0);
    assert_int_equal(vsr_grpc_status_parse(vsr_slice_cstr("14")), 14);
    assert_int_equal(vsr_grpc_status_parse(vsr_slice_cstr("99")), 2); /* unknown: UNKNOWN */
    assert_int_equal(vsr_grpc_status_parse(vsr_slice_cstr("")), -1);
    assert_int_equal(vsr_grpc_status_parse(vsr_slice_cstr("1a")), -1);
    assert_int_equal(vsr_grpc_status_parse(vsr_slice_cstr("0000")), -1);
    char m[8];
    assert_int_equal(vsr_grpc_message_decode(vsr_slice_cstr("a%20b%0A%zz"), m, sizeof(m)), 7);
    assert_string_equal(m, "a b?%zz");
    assert_int_equal(vsr_grpc_message_decode(vsr_slice_cstr("%4"), m, sizeof(m)), 2);
    assert_string_equal(m, "%4");
    const uint8_t *msg;
    size_t n;
    static const uint8_t one[] = {0, 0, 0, 0, 2, 8, 1};
    assert_int_equal(vsr_grpc_unary_answer(one, sizeof(one), &msg, &n), VSR_OK);
    assert_int_equal(n, 2);
    assert_ptr_equal(msg, one + 5);
    assert_int_equal(vsr_grpc_unary_answer(one, 0, &msg, &n), VSR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(vsr_grpc_unary_answer(one, 6, &msg, &n), VSR_ERR_INVALID); /* cut short */
    static const uint8_t compressed[] = {1, 0, 0, 0, 0};
    assert_int_equal(vsr_grpc_unary_answer(compressed, 5, &msg, &n), VSR_ERR_INVALID);
    /* the collector's answer */
    int64_t rejected;
    char text[16];
    static const uint8_t partial[] = {0x0a, 0x06, 0x08, 0x03, 0x12, 0x02, 'n', 'o'};
    assert_int_equal(vsr_tracer_grpc_answer(partial, sizeof(partial), &rejected, text, sizeof(text)), VSR_OK);
    assert_int_equal(rejected, 3);
    assert_string_equal(text, "no");
    assert_int_equal(vsr_tracer_grpc_answer(partial, 3, &rejected, text, sizeof(text)), VSR_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traceparent_valid),
        cmocka_unit_test(test_traceparent_invalid),
        cmocka_unit_test(test_traceparent_format_roundtrip),
        cmocka_unit_test(test_ids_distinct),
        cmocka_unit_test(test_tracestate),
        cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_span_json),
        cmocka_unit_test(test_endpoint_parse),
        cmocka_unit_test(test_queue_drops_counted),
        cmocka_unit_test(test_export_posts_otlp_json),
        cmocka_unit_test(test_concurrent_emitters),
        cmocka_unit_test(test_config_tracing),
        cmocka_unit_test(test_config_tracing_errors),
        cmocka_unit_test(test_grpc_config),
        cmocka_unit_test(test_grpc_change_needs_restart),
        cmocka_unit_test(test_grpc_endpoint_parse),
        cmocka_unit_test(test_span_proto),
        cmocka_unit_test(test_grpc_export_batches),
        cmocka_unit_test(test_grpc_queue_bound),
        cmocka_unit_test(test_grpc_answer_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
