/* test_trace.c — W3C trace context (traceparent, tracestate), ids, the
 * sampler, span JSON, the exporter's queue accounting and its OTLP/HTTP
 * POST, and the tracing configuration. */
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
    assert_null(load(DOC("        enabled: true\n"), &err));
    assert_non_null(strstr(err.data, "exporter.endpoint is required"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          endpoint: jaeger:4317\n"), &err));
    assert_non_null(strstr(err.data, "t.yaml:16:21: "));
    assert_non_null(strstr(err.data, "OTLP over gRPC (type otlp with a host:port endpoint such as \"jaeger:4317\") is "
                                     "not supported yet; export OTLP/HTTP instead"));
    vsr_buf_free(&err);
    assert_null(load(DOC("        enabled: true\n        exporter:\n          type: otlp-grpc\n"
                         "          endpoint: http://jaeger:4317\n"), &err));
    assert_non_null(strstr(err.data, "OTLP over gRPC"));
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
