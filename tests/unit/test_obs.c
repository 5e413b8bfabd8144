/* test_obs.c — the access log (format, caps, concurrency, drops) and the metrics registry (render, sums,
 * histograms, escaping, label bounds, concurrent scrapes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "json/json.h"
#include "obs/obs.h"

/* ---- helpers ------------------------------------------------------------ */

static char *tmp_log_path(char *buf, size_t n)
{
    snprintf(buf, n, "/tmp/vsr-test-obs-XXXXXX");
    int fd = mkstemp(buf);
    assert_true(fd >= 0);
    close(fd);
    return buf;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 4096, n = 0;
    char *p = malloc(cap + 1);
    size_t r;
    while ((r = fread(p + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            p = realloc(p, cap + 1);
        }
    }
    fclose(f);
    p[n] = '\0';
    *len = n;
    return p;
}

static size_t count_char(const char *p, size_t n, char c)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += p[i] == c;
    return k;
}

/* The string member `key` of a parsed line, unescaped into pool; NULL slice for null. */
static vsr_slice_t json_member(vsr_json_t *j, vsr_pool_t *pool, const char *key)
{
    uint32_t v;
    if (vsr_json_object_get(j, 0, key, &v) != VSR_OK)
        fail_msg("member %s missing", key);
    if (vsr_json_type(j, v) == VSR_JSON_NULL)
        return VSR_SLICE_NULL;
    vsr_slice_t out;
    assert_int_equal(vsr_json_string(j, v, pool, &out), VSR_OK);
    return out;
}

/* Every access-log field, in order: a line must hold exactly these keys. */
static const char *const log_keys[] = {
    "start_time", "method", "path", "protocol", "response_code", "response_flags", "bytes_received",
    "bytes_sent", "duration", "upstream_host", "x_request_id", "user_agent", "recipe", "decision",
    "selected_model", "served_model", "fallback_path", "attempts", "config_version", "routing_ms",
    "signal_families_us", "stream_events", "prompt_tokens", "completion_tokens", "looper", "cache",
    "client_protocol", "upstream_protocol", "response_guard",
};

/* 1 when [p, p+n) is one JSON object with exactly the log's keys in order. */
static int valid_log_line(const char *p, size_t n)
{
    vsr_json_t j;
    int ok = vsr_json_parse(&j, p, n, NULL) == VSR_OK && vsr_json_type(&j, 0) == VSR_JSON_OBJECT &&
             j.toks[0].count == VSR_ARRAY_LEN(log_keys);
    if (ok) {
        uint32_t k = 1;
        for (size_t i = 0; i < VSR_ARRAY_LEN(log_keys) && ok; i++) {
            ok = vsr_json_string_eq(&j, k, vsr_slice_cstr(log_keys[i]));
            k = j.toks[k + 1].next;
        }
    }
    vsr_json_free(&j);
    return ok;
}

static const char *const full_families[] = {"keywords", "embeddings"};
static const uint64_t full_family_us[] = {12, 3400};

static vsr_access_entry_t full_entry(void)
{
    vsr_access_entry_t e = {
        .start_time = 1700000000.123,
        .method = VSR_SLICE_LIT("POST"),
        .path = VSR_SLICE_LIT("/v1/chat/completions?x=1"),
        .protocol = VSR_SLICE_LIT("HTTP/1.1"),
        .status = 200,
        .response_flags = VSR_SLICE_LIT("-"),
        .bytes_received = 123,
        .bytes_sent = 4567,
        .duration_ms = 89,
        .upstream_host = VSR_SLICE_LIT("10.0.0.1:8000"),
        .request_id = VSR_SLICE_LIT("req-1"),
        .user_agent = VSR_SLICE_LIT("curl/8.0"),
        .recipe = VSR_SLICE_LIT("default"),
        .decision = VSR_SLICE_LIT("math"),
        .selected_model = VSR_SLICE_LIT("m1"),
        .served_model = VSR_SLICE_LIT("m2"),
        .fallback_path = VSR_SLICE_LIT("m1,m2"),
        .attempts = 2,
        .config_version = 7,
        .routing_ms = 0.1254,
        .family_names = full_families,
        .family_us = full_family_us,
        .n_families = 2,
    };
    return e;
}

/* The largest line a request can cause: every string field full of control bytes (6 bytes escaped each). */
static char worst_bytes[4096];

static vsr_access_entry_t worst_entry(void)
{
    memset(worst_bytes, 0x01, sizeof(worst_bytes));
    vsr_slice_t big = vsr_slice(worst_bytes, sizeof(worst_bytes));
    vsr_access_entry_t e = full_entry();
    e.method = e.path = e.protocol = e.response_flags = e.upstream_host = e.request_id = e.user_agent = big;
    e.recipe = e.decision = e.selected_model = e.served_model = e.fallback_path = big;
    return e;
}

/* ---- access log ---------------------------------------------------------- */

static void test_access_log_format(void **state)
{
    (void)state;
    char path[64];
    tmp_log_path(path, sizeof(path));
    vsr_buf_t err;
    vsr_buf_init(&err, 256);
    vsr_access_log_t *log = vsr_access_log_open(path, 0, &err);
    assert_non_null(log);

    vsr_access_entry_t e = full_entry();
    vsr_access_log_write(log, &e);
    vsr_access_entry_t empty = {0};
    vsr_access_log_write(log, &empty);
    vsr_access_entry_t odd = {.start_time = -1, .status = 499, .routing_ms = NAN};
    vsr_access_log_write(log, &odd);
    /* 1.005 * 1000 is 1004.999… in doubles: still millisecond 5 */
    vsr_access_entry_t inexact = {.start_time = 1.005, .routing_ms = -0.25, .method = VSR_SLICE_LIT("GET")};
    vsr_access_log_write(log, &inexact);
    /* a stream: its events, and the usage it reported (or nulls without one) */
    vsr_access_entry_t st = {.streamed = 1, .stream_events = 9, .has_usage = 1, .prompt_tokens = 3,
                             .completion_tokens = 5};
    vsr_access_log_write(log, &st);
    vsr_access_entry_t st2 = {.streamed = 1, .stream_events = 2, .prompt_tokens = 3};
    vsr_access_log_write(log, &st2);
    /* a request graph's calls */
    vsr_access_entry_t lo = {.looper_algorithm = "fusion", .looper_calls = 4, .looper_models = VSR_SLICE_LIT("a,\"b"),
                             .looper_prompt_tokens = 30, .looper_completion_tokens = 7};
    vsr_access_log_write(log, &lo);
    vsr_access_log_close(log);

    size_t n;
    char *text = slurp(path, &n);
    const char *want =
        "{\"start_time\":\"2023-11-14T22:13:20.123Z\",\"method\":\"POST\",\"path\":\"/v1/chat/completions?x=1\","
        "\"protocol\":\"HTTP/1.1\",\"response_code\":200,\"response_flags\":\"-\",\"bytes_received\":123,"
        "\"bytes_sent\":4567,\"duration\":89,\"upstream_host\":\"10.0.0.1:8000\",\"x_request_id\":\"req-1\","
        "\"user_agent\":\"curl/8.0\",\"recipe\":\"default\",\"decision\":\"math\",\"selected_model\":\"m1\","
        "\"served_model\":\"m2\",\"fallback_path\":\"m1,m2\",\"attempts\":2,\"config_version\":7,"
        "\"routing_ms\":0.125,\"signal_families_us\":{\"keywords\":12,\"embeddings\":3400},\"stream_events\":null,\"prompt_tokens\":null,\"completion_tokens\":null,\"looper\":null,\"cache\":null,\"client_protocol\":null,\"upstream_protocol\":null,\"response_guard\":null}\n"
        "{\"start_time\":\"1970-01-01T00:00:00.000Z\",\"method\":null,\"path\":null,\"protocol\":null,"
        "\"response_code\":0,\"response_flags\":null,\"bytes_received\":0,\"bytes_sent\":0,\"duration\":0,"
        "\"upstream_host\":null,\"x_request_id\":null,\"user_agent\":null,\"recipe\":null,\"decision\":null,"
        "\"selected_model\":null,\"served_model\":null,\"fallback_path\":null,\"attempts\":0,\"config_version\":0,"
        "\"routing_ms\":0.000,\"signal_families_us\":null,\"stream_events\":null,\"prompt_tokens\":null,\"completion_tokens\":null,\"looper\":null,\"cache\":null,\"client_protocol\":null,\"upstream_protocol\":null,\"response_guard\":null}\n"
        "{\"start_time\":null,\"method\":null,\"path\":null,\"protocol\":null,"
        "\"response_code\":499,\"response_flags\":null,\"bytes_received\":0,\"bytes_sent\":0,\"duration\":0,"
        "\"upstream_host\":null,\"x_request_id\":null,\"user_agent\":null,\"recipe\":null,\"decision\":null,"
        "\"selected_model\":null,\"served_model\":null,\"fallback_path\":null,\"attempts\":0,\"config_version\":0,"
        "\"routing_ms\":null,\"signal_families_us\":null,\"stream_events\":null,\"prompt_tokens\":null,\"completion_tokens\":null,\"looper\":null,\"cache\":null,\"client_protocol\":null,\"upstream_protocol\":null,\"response_guard\":null}\n"
        "{\"start_time\":\"1970-01-01T00:00:01.005Z\",\"method\":\"GET\",\"path\":null,\"protocol\":null,"
        "\"response_code\":0,\"response_flags\":null,\"bytes_received\":0,\"bytes_sent\":0,\"duration\":0,"
        "\"upstream_host\":null,\"x_request_id\":null,\"user_agent\":null,\"recipe\":null,\"decision\":null,"
        "\"selected_model\":null,\"served_model\":null,\"fallback_path\":null,\"attempts\":0,\"config_version\":0,"
        "\"routing_ms\":0.000,\"signal_families_us\":null,\"stream_events\":null,\"prompt_tokens\":null,\"completion_tokens\":null,\"looper\":null,\"cache\":null,\"client_protocol\":null,\"upstream_protocol\":null,\"response_guard\":null}\n"
        "{\"start_time\":\"1970-01-01T00:00:00.000Z\",\"method\":null,\"path\":null,\"protocol\":null,"
        "\"response_code\":0,\"response_flags\":null,\"bytes_received\":0,\"bytes_sent\":0,\"duration\":0,"
        "\"upstream_host\":null,\"x_request_id\":null,\"user_agent\":null,\"recipe\":null,\"decision\":null,"
        "\"selected_model\":null,\"served_model\":null,\"fallback_path\":null,\"attempts\":0,\"config_version\":0,"
        "\"routing_ms\":0.000,\"signal_families_us\":null,\"stream_events\":9,\"prompt_tokens\":3,\"completion_tokens\":5,\"looper\":null,\"cache\":null,\"client_protocol\":null,\"upstream_protocol\":null,\"response_guard\":null}\n"
        "{\"start_time\":\"1970-01-01T00:00:00.000Z\",\"method\":null,\"path\":null,\"protocol\":null,"
        "\"response_code\":0,\"response_flags\":null,\"bytes_received\":0,\"bytes_sent\":0,\"duration\":0,"
        "\"upstream_host\":null,\"x_request_id\":null,\"user_agent\":null,\"recipe\":null,\"decision\":null,"
        "\"selected_model\":null,\"served_model\":null,\"fallback_path\":null,\"attempts\":0,\"config_version\":0,"
        "\"routing_ms\":0.000,\"signal_families_us\":null,\"stream_events\":2,\"prompt_tokens\":null,\"completion_tokens\":null,\"looper\":null,\"cache\":null,\"client_protocol\":null,\"upstream_protocol\":null,\"response_guard\":null}\n"
        "{\"start_time\":\"1970-01-01T00:00:00.000Z\",\"method\":null,\"path\":null,\"protocol\":null,"
        "\"response_code\":0,\"response_flags\":null,\"bytes_received\":0,\"bytes_sent\":0,\"duration\":0,"
        "\"upstream_host\":null,\"x_request_id\":null,\"user_agent\":null,\"recipe\":null,\"decision\":null,"
        "\"selected_model\":null,\"served_model\":null,\"fallback_path\":null,\"attempts\":0,\"config_version\":0,"
        "\"routing_ms\":0.000,\"signal_families_us\":null,\"stream_events\":null,\"prompt_tokens\":null,\"completion_tokens\":null,"
        "\"looper\":{\"algorithm\":\"fusion\",\"calls\":4,\"models\":\"a,\\\"b\",\"prompt_tokens\":30,"
        "\"completion_tokens\":7},\"cache\":null,\"client_protocol\":null,\"upstream_protocol\":null,\"response_guard\":null}\n";
    assert_string_equal(text, want);
    const char *line = text;
    for (int i = 0; i < 4; i++) {
        const char *nl = strchr(line, '\n');
        assert_true(valid_log_line(line, (size_t)(nl - line)));
        line = nl + 1;
    }
    free(text);
    unlink(path);
    vsr_buf_free(&err);
}

static void test_access_log_hostile_fields(void **state)
{
    (void)state;
    char path[64];
    tmp_log_path(path, sizeof(path));
    vsr_access_log_t *log = vsr_access_log_open(path, 16, NULL);
    assert_non_null(log);

    char long_path[5000];
    memset(long_path, 'p', sizeof(long_path));
    long_path[0] = '/';
    long_path[100] = '?';
    /* control bytes, quotes and backslashes, then an invalid byte, then a 2-byte sequence straddling the cap */
    char ua[300];
    memset(ua, 'u', sizeof(ua));
    memcpy(ua, "a\nb\r\"c\\\x01\x1f\x7f\xff", 11);
    ua[254] = 'z';
    ua[255] = (char)0xc3, ua[256] = (char)0xa9; /* "é" at bytes 255..256: past the 256-byte cap as a whole */
    char rid[] = "id\xe0\x80\x80-\xed\xa0\x80-\xf4\x90\x80\x80-\xe2\x82\xac"; /* overlong, surrogate, too big, € */

    vsr_access_entry_t e = full_entry();
    e.path = vsr_slice(long_path, sizeof(long_path));
    e.user_agent = vsr_slice(ua, sizeof(ua));
    e.request_id = vsr_slice(rid, sizeof(rid) - 1);
    e.method = VSR_SLICE_LIT("GET\r\nX-Injected: 1");
    vsr_access_log_write(log, &e);
    vsr_access_entry_t worst = worst_entry();
    vsr_access_log_write(log, &worst);
    assert_int_equal(vsr_access_log_dropped(log), 0); /* the worst line still fits the line buffer */
    vsr_access_log_close(log);

    size_t n;
    char *text = slurp(path, &n);
    assert_int_equal(count_char(text, n, '\n'), 2); /* one line per entry, whatever the fields held */
    char *second = strchr(text, '\n') + 1;
    size_t n2 = (size_t)(text + n - second);
    /* 2048 path bytes and 11 fields of 256, each escaped to 6 bytes, plus the frame */
    assert_true(n2 > (2048 + 11 * 256) * 6 && n2 < (2048 + 11 * 256) * 6 + 600);
    assert_true(valid_log_line(second, n2 - 1));
    n = (size_t)(second - text);
    assert_true(n < 20000);
    assert_true(valid_log_line(text, n - 1));

    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, text, n - 1, NULL), VSR_OK);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_slice_t p = json_member(&j, &pool, "path");
    assert_int_equal(p.len, 2048);
    assert_memory_equal(p.p, long_path, 2048); /* the query string is kept */
    vsr_slice_t u = json_member(&j, &pool, "user_agent");
    /* 10 bytes kept as they are, 0xff became U+FFFD (3 bytes), 243 'u', the 'z', and not the cut "é" */
    assert_int_equal(u.len, 10 + 3 + 243 + 1);
    assert_memory_equal(u.p, "a\nb\r\"c\\\x01\x1f\x7f\xef\xbf\xbd", 13);
    assert_int_equal(u.p[u.len - 1], 'z');
    vsr_slice_t r = json_member(&j, &pool, "x_request_id");
    const char want_rid[] = "id\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd-\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd-"
                            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd-\xe2\x82\xac";
    assert_int_equal(r.len, sizeof(want_rid) - 1);
    assert_memory_equal(r.p, want_rid, r.len);
    assert_true(vsr_slice_eq_cstr(json_member(&j, &pool, "method"), "GET\r\nX-Injected: 1"));
    vsr_pool_free(&pool);
    vsr_json_free(&j);
    free(text);
    unlink(path);
}

typedef struct {
    vsr_access_log_t *log;
    int id;
    int lines;
} writer_arg_t;

static void *log_writer(void *arg)
{
    writer_arg_t *a = arg;
    for (int i = 0; i < a->lines; i++) {
        char rid[64], ua[64];
        int rn = snprintf(rid, sizeof(rid), "t%d-%d", a->id, i);
        int un = snprintf(ua, sizeof(ua), "agent\n%d\"\x02\\", i);
        vsr_access_entry_t e = full_entry();
        e.request_id = vsr_slice(rid, (size_t)rn);
        e.user_agent = vsr_slice(ua, (size_t)un);
        e.bytes_sent = (uint64_t)i;
        vsr_access_log_write(a->log, &e);
    }
    return NULL;
}

#define LOG_THREADS 8
#define LOG_LINES 1500

static void test_access_log_concurrent_writers(void **state)
{
    (void)state;
    char path[64];
    tmp_log_path(path, sizeof(path));
    /* room for every line: nothing may be dropped, so every line must arrive */
    vsr_access_log_t *log = vsr_access_log_open(path, LOG_THREADS * LOG_LINES, NULL);
    assert_non_null(log);
    pthread_t th[LOG_THREADS];
    writer_arg_t args[LOG_THREADS];
    for (int i = 0; i < LOG_THREADS; i++) {
        args[i] = (writer_arg_t){log, i, LOG_LINES};
        assert_int_equal(pthread_create(&th[i], NULL, log_writer, &args[i]), 0);
    }
    for (int i = 0; i < LOG_THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(vsr_access_log_dropped(log), 0);
    vsr_access_log_close(log);

    size_t n;
    char *text = slurp(path, &n);
    assert_int_equal(count_char(text, n, '\n'), LOG_THREADS * LOG_LINES);
    static unsigned char seen[LOG_THREADS][LOG_LINES];
    memset(seen, 0, sizeof(seen));
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    for (char *line = text, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        assert_true(valid_log_line(line, (size_t)(nl - line)));
        vsr_json_t j;
        assert_int_equal(vsr_json_parse(&j, line, (size_t)(nl - line), NULL), VSR_OK);
        vsr_slice_t rid = json_member(&j, &pool, "x_request_id");
        char buf[64];
        assert_true(rid.len < sizeof(buf));
        memcpy(buf, rid.p, rid.len);
        buf[rid.len] = '\0';
        int t, i;
        assert_int_equal(sscanf(buf, "t%d-%d", &t, &i), 2);
        assert_true(t >= 0 && t < LOG_THREADS && i >= 0 && i < LOG_LINES);
        assert_int_equal(seen[t][i], 0);
        seen[t][i] = 1;
        char ua[64];
        snprintf(ua, sizeof(ua), "agent\n%d\"\x02\\", i);
        assert_true(vsr_slice_eq_cstr(json_member(&j, &pool, "user_agent"), ua));
        vsr_json_free(&j);
        vsr_pool_clear(&pool);
    }
    vsr_pool_free(&pool);
    free(text);
    unlink(path);
}

typedef struct {
    int fd;
    char *data;
    size_t len;
} drain_arg_t;

static void *pipe_drain(void *arg)
{
    drain_arg_t *a = arg;
    size_t cap = 1 << 16;
    a->data = malloc(cap);
    for (;;) {
        if (a->len == cap) {
            cap *= 2;
            a->data = realloc(a->data, cap);
        }
        ssize_t r = read(a->fd, a->data + a->len, cap - a->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        a->len += (size_t)r;
    }
    return NULL;
}

static void test_access_log_drops_when_writer_stalls(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    int pipe_size = fcntl(p[1], F_GETPIPE_SZ);
    assert_true(pipe_size > 0);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", p[1]);
    const size_t queue = 8;
    vsr_access_log_t *log = vsr_access_log_open(path, queue, NULL);
    assert_non_null(log);
    close(p[1]); /* the log holds its own descriptor: EOF for the reader once the log closes */

    /* Nobody reads the pipe yet: once it is full the writer blocks in write(), and the queue fills. */
    char ua[200];
    memset(ua, 'u', sizeof(ua));
    const size_t total = 3000;
    for (size_t i = 0; i < total; i++) {
        vsr_access_entry_t e = full_entry();
        e.user_agent = vsr_slice(ua, sizeof(ua));
        vsr_access_log_write(log, &e);
    }
    /* At most a pipe's worth of lines got out (each line is > 400 bytes), plus one batch the writer holds
     * (at most the queue) and a full queue: everything else was dropped, without blocking this thread. */
    uint64_t dropped = vsr_access_log_dropped(log);
    assert_true(dropped >= total - (size_t)pipe_size / 400 - 2 * queue);

    drain_arg_t d = {.fd = p[0]};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pipe_drain, &d), 0);
    vsr_access_log_close(log); /* drains what is queued into the pipe, then closes its end */
    pthread_join(th, NULL);
    close(p[0]);

    size_t lines = count_char(d.data, d.len, '\n');
    assert_int_equal(lines + dropped, total); /* every line is either written whole or counted */
    for (char *line = d.data, *end = d.data + d.len; line < end;) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        assert_non_null(nl);
        assert_true(valid_log_line(line, (size_t)(nl - line)));
        line = nl + 1;
    }
    free(d.data);
}

/* The queue also holds at most 64 MiB: a stalled writer and the largest lines drop long before the line count
 * is reached. */
static void test_access_log_queue_bytes_bound(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    int pipe_size = fcntl(p[1], F_GETPIPE_SZ);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", p[1]);
    vsr_access_log_t *log = vsr_access_log_open(path, 1 << 20, NULL);
    assert_non_null(log);
    close(p[1]);
    vsr_access_entry_t e = worst_entry();
    const size_t total = 2600, line = (2048 + 11 * 256) * 6; /* a line is a little longer than this */
    for (size_t i = 0; i < total; i++)
        vsr_access_log_write(log, &e);
    /* kept: the pipe's worth, a writer batch (64 lines), and 64 MiB queued */
    size_t kept_max = (size_t)pipe_size / line + 1 + 64 + (64u << 20) / line;
    uint64_t dropped = vsr_access_log_dropped(log);
    assert_true(dropped >= total - kept_max);

    drain_arg_t d = {.fd = p[0]};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pipe_drain, &d), 0);
    vsr_access_log_close(log);
    pthread_join(th, NULL);
    close(p[0]);
    assert_int_equal(count_char(d.data, d.len, '\n') + dropped, total);
    free(d.data);
}

static void test_access_log_open_and_null(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 512);
    assert_null(vsr_access_log_open("/nonexistent-dir-vsr/access.log", 0, &err));
    const char *msg = "cannot open /nonexistent-dir-vsr/access.log";
    assert_non_null(memmem(err.data, err.len, msg, strlen(msg)));
    assert_null(vsr_access_log_open("/nonexistent-dir-vsr/access.log", 0, NULL));
    vsr_buf_free(&err);

    /* standard output: opened by name or by NULL, and left open by close */
    int stdout_open = fcntl(1, F_GETFD) != -1;
    vsr_access_log_t *log = vsr_access_log_open("-", 0, NULL);
    assert_non_null(log);
    vsr_access_log_close(log);
    log = vsr_access_log_open(NULL, 4, NULL);
    assert_non_null(log);
    vsr_access_log_close(log);
    assert_int_equal(fcntl(1, F_GETFD) != -1, stdout_open);

    /* no log: everything is a no-op */
    vsr_access_entry_t e = full_entry();
    vsr_access_log_write(NULL, &e);
    assert_int_equal(vsr_access_log_dropped(NULL), 0);
    vsr_access_log_close(NULL);
}

/* ---- metrics -------------------------------------------------------------- */

static char *render(vsr_metrics_t *m)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_metrics_render(m, &b);
    char *s = vsr_strndup(b.data ? b.data : "", b.len);
    vsr_buf_free(&b);
    return s;
}

/* 1 when `line` is one whole line of text. */
static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return 1;
    return 0;
}

static void assert_line(const char *text, const char *line)
{
    if (!has_line(text, line))
        fail_msg("missing line: %s\n--- rendered:\n%s", line, text);
}

/* Lines that start with prefix. */
static size_t count_prefix(const char *text, const char *prefix)
{
    size_t k = 0, n = strlen(prefix);
    for (const char *p = text; *p;) {
        if (strncmp(p, prefix, n) == 0)
            k++;
        const char *nl = strchr(p, '\n');
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    return k;
}

#define S(x) VSR_SLICE_LIT(x)

static void test_metrics_counters_sum_across_shards(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(3);
    vsr_metrics_shard_t *s0 = vsr_metrics_shard(m, 0), *s1 = vsr_metrics_shard(m, 1), *s2 = vsr_metrics_shard(m, 2);
    vsr_metrics_request(s0, 200, S("m1"), S("d1"), 0.1, 0.001, 0.05);
    vsr_metrics_request(s0, 201, S("m1"), S("d1"), 0.1, 0.001, 0.05);
    vsr_metrics_request(s1, 204, S("m1"), S("d1"), 0.1, 0.001, 0.05);
    vsr_metrics_request(s1, 503, S("m1"), S("d1"), 0.1, 0.001, 0.05);
    vsr_metrics_request(s2, 0, VSR_SLICE_NULL, VSR_SLICE_NULL, 0.1, -1, -1);
    vsr_metrics_request(s2, 404, S("m2"), S("d2"), 0.1, -1, -1);
    vsr_metrics_request(s2, 99, S("m1"), S("d1"), 0.1, -1, -1);
    vsr_metrics_request(s0, 600, S("m1"), S("d1"), 0.1, -1, -1);

    vsr_metrics_attempt(s0, S("m1"), "ok");
    vsr_metrics_attempt(s1, S("m1"), "ok");
    vsr_metrics_attempt(s1, S("m1"), "5xx");
    vsr_metrics_attempt(s2, S("m2"), "connect_failure");
    vsr_metrics_retry(s0, S("m1"));
    vsr_metrics_retry(s2, S("m1"));
    vsr_metrics_fallback(s1, S("m1"), S("m2"));
    vsr_metrics_fallback(s2, S("m1"), S("m2"));
    vsr_metrics_fallback(s2, S("m2"), S("m1"));
    vsr_metrics_overflow(s0, S("m2"));

    char *t = render(m);
    const char *want_requests =
        "# HELP vsr_requests_total Requests answered, by status class, selected model and decision.\n"
        "# TYPE vsr_requests_total counter\n"
        "vsr_requests_total{status_class=\"2xx\",model=\"m1\",decision=\"d1\"} 3\n"
        "vsr_requests_total{status_class=\"4xx\",model=\"m2\",decision=\"d2\"} 1\n"
        "vsr_requests_total{status_class=\"5xx\",model=\"m1\",decision=\"d1\"} 1\n"
        "vsr_requests_total{status_class=\"none\",model=\"\",decision=\"\"} 1\n"
        "vsr_requests_total{status_class=\"other\",model=\"m1\",decision=\"d1\"} 2\n"
        "# HELP vsr_request_duration_seconds ";
    assert_non_null(strstr(t, want_requests));
    assert_true(strncmp(t, "# HELP vsr_requests_total ", 26) == 0); /* the first family */

    assert_line(t, "# TYPE vsr_upstream_attempts_total counter");
    assert_line(t, "vsr_upstream_attempts_total{model=\"m1\",outcome=\"5xx\"} 1");
    assert_line(t, "vsr_upstream_attempts_total{model=\"m1\",outcome=\"ok\"} 2");
    assert_line(t, "vsr_upstream_attempts_total{model=\"m2\",outcome=\"connect_failure\"} 1");
    assert_int_equal(count_prefix(t, "vsr_upstream_attempts_total{"), 3);
    assert_line(t, "# TYPE vsr_upstream_retries_total counter");
    assert_line(t, "vsr_upstream_retries_total{model=\"m1\"} 2");
    assert_int_equal(count_prefix(t, "vsr_upstream_retries_total{"), 1);
    assert_line(t, "# TYPE vsr_fallbacks_total counter");
    assert_line(t, "vsr_fallbacks_total{from=\"m1\",to=\"m2\"} 2");
    assert_line(t, "vsr_fallbacks_total{from=\"m2\",to=\"m1\"} 1");
    assert_line(t, "# TYPE vsr_upstream_overflow_total counter");
    assert_line(t, "vsr_upstream_overflow_total{model=\"m2\"} 1");

    /* upstream durations: observed for the 4 routed requests only (the others passed -1) */
    assert_line(t, "vsr_upstream_duration_seconds_count{model=\"m1\"} 4");
    assert_int_equal(count_prefix(t, "vsr_upstream_duration_seconds_count{"), 1);
    assert_line(t, "vsr_routing_duration_seconds_count 4");
    assert_line(t, "vsr_request_duration_seconds_count{model=\"m1\"} 6");
    assert_line(t, "vsr_request_duration_seconds_count{model=\"\"} 1");
    assert_line(t, "vsr_request_duration_seconds_count{model=\"m2\"} 1");
    /* no streams: the family is absent */
    assert_null(strstr(t, "vsr_stream_ttfb_seconds"));
    vsr_free(t);
    vsr_metrics_free(m);
}

static void test_metrics_histograms(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(2);
    vsr_metrics_shard_t *s0 = vsr_metrics_shard(m, 0), *s1 = vsr_metrics_shard(m, 1);
    /* sums are kept in whole nanoseconds, so that they are exact */
    vsr_metrics_request(s0, 200, S("m"), S("d"), 0.25, 0.00000762939453125, -1); /* 0.25 is a bound: its bucket */
    vsr_metrics_request(s0, 200, S("m"), S("d"), 0.5, 0.25, -1); /* routing past its last bound */
    vsr_metrics_request(s1, 200, S("m"), S("d"), 2, 0.00390625, -1);
    vsr_metrics_request(s1, 200, S("m"), S("d"), 1000, -1, -1);        /* past the last bound: +Inf only */
    vsr_metrics_request(s1, 200, S("m"), S("d"), 0.0009765625, -1, -1); /* 2^-10 <= 0.001 */
    vsr_metrics_request(s1, 200, S("m"), S("d"), -1, -1, -1);          /* not observed */
    vsr_metrics_request(s1, 200, S("m"), S("d"), NAN, -1, -1);         /* not observed */
    vsr_metrics_ttfb(s0, S("m"), 0.0078125);
    vsr_metrics_ttfb(s1, S("m"), 0.75);
    vsr_metrics_ttfb(s1, S("m"), -0.5);

    char *t = render(m);
    const char *want_req =
        "# HELP vsr_request_duration_seconds Time from the request's first byte to its end, by model.\n"
        "# TYPE vsr_request_duration_seconds histogram\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.001\"} 1\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.0025\"} 1\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.005\"} 1\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.01\"} 1\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.025\"} 1\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.05\"} 1\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.1\"} 1\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.25\"} 2\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"0.5\"} 3\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"1\"} 3\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"2.5\"} 4\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"5\"} 4\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"10\"} 4\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"30\"} 4\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"60\"} 4\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"120\"} 4\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"300\"} 4\n"
        "vsr_request_duration_seconds_bucket{model=\"m\",le=\"+Inf\"} 5\n"
        "vsr_request_duration_seconds_sum{model=\"m\"} 1002.750976563\n"
        "vsr_request_duration_seconds_count{model=\"m\"} 5\n"
        "# HELP vsr_routing_duration_seconds Time spent choosing the model of a request.\n"
        "# TYPE vsr_routing_duration_seconds histogram\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.00001\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.000025\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.00005\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.0001\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.00025\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.0005\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.001\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.0025\"} 1\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.005\"} 2\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.01\"} 2\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.025\"} 2\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.05\"} 2\n"
        "vsr_routing_duration_seconds_bucket{le=\"0.1\"} 2\n"
        "vsr_routing_duration_seconds_bucket{le=\"+Inf\"} 3\n"
        "vsr_routing_duration_seconds_sum 0.253913879\n"
        "vsr_routing_duration_seconds_count 3\n"
        "# HELP vsr_stream_ttfb_seconds Time to the first response byte of a streamed response, by model.\n"
        "# TYPE vsr_stream_ttfb_seconds histogram\n"
        "vsr_stream_ttfb_seconds_bucket{model=\"m\",le=\"0.001\"} 0\n"
        "vsr_stream_ttfb_seconds_bucket{model=\"m\",le=\"0.0025\"} 0\n"
        "vsr_stream_ttfb_seconds_bucket{model=\"m\",le=\"0.005\"} 0\n"
        "vsr_stream_ttfb_seconds_bucket{model=\"m\",le=\"0.01\"} 1\n";
    if (strstr(t, want_req) == NULL)
        fail_msg("histograms differ; rendered:\n%s", t);
    assert_line(t, "vsr_stream_ttfb_seconds_bucket{model=\"m\",le=\"0.5\"} 1");
    assert_line(t, "vsr_stream_ttfb_seconds_bucket{model=\"m\",le=\"1\"} 2");
    assert_line(t, "vsr_stream_ttfb_seconds_bucket{model=\"m\",le=\"+Inf\"} 2");
    assert_line(t, "vsr_stream_ttfb_seconds_sum{model=\"m\"} 0.7578125");
    assert_line(t, "vsr_stream_ttfb_seconds_count{model=\"m\"} 2");
    assert_int_equal(count_prefix(t, "vsr_request_duration_seconds_bucket{"), 18);
    assert_null(strstr(t, "vsr_upstream_duration_seconds"));
    vsr_free(t);
    vsr_metrics_free(m);
}

/* Sums are exact decimals: no float noise from adding 0.1 and 0.2. */
static void test_metrics_sum_without_float_noise(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(2);
    vsr_metrics_ttfb(vsr_metrics_shard(m, 0), S("m"), 0.1);
    vsr_metrics_ttfb(vsr_metrics_shard(m, 1), S("m"), 0.2);
    vsr_metrics_ttfb(vsr_metrics_shard(m, 1), S("n"), 3);
    vsr_metrics_ttfb(vsr_metrics_shard(m, 1), S("o"), 0.000123);
    char *t = render(m);
    assert_line(t, "vsr_stream_ttfb_seconds_sum{model=\"m\"} 0.3");
    assert_line(t, "vsr_stream_ttfb_seconds_sum{model=\"n\"} 3");
    assert_line(t, "vsr_stream_ttfb_seconds_sum{model=\"o\"} 0.000123");
    vsr_free(t);
    vsr_metrics_free(m);
}

static void test_metrics_label_escaping(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(1);
    vsr_metrics_shard_t *s = vsr_metrics_shard(m, 0);
    vsr_metrics_retry(s, S("a\"b\\c\nd"));
    vsr_metrics_retry(s, S("bad\xff\xc3"));
    vsr_metrics_retry(s, S("caf\xc3\xa9"));
    vsr_metrics_fallback(s, S("x\ty"), S("{}=,"));
    vsr_metrics_set_endpoint_health(m, S("m\"1"), S("http://h:1/\\"), 1, 0);
    char *t = render(m);
    assert_line(t, "vsr_upstream_retries_total{model=\"a\\\"b\\\\c\\nd\"} 1");
    assert_line(t, "vsr_upstream_retries_total{model=\"bad\xef\xbf\xbd\xef\xbf\xbd\"} 1");
    assert_line(t, "vsr_upstream_retries_total{model=\"caf\xc3\xa9\"} 1");
    assert_line(t, "vsr_fallbacks_total{from=\"x\ty\",to=\"{}=,\"} 1");
    assert_line(t, "vsr_endpoint_healthy{model=\"m\\\"1\",endpoint=\"http://h:1/\\\\\"} 1");
    assert_line(t, "vsr_endpoint_ejected{model=\"m\\\"1\",endpoint=\"http://h:1/\\\\\"} 0");
    vsr_free(t);

    /* long values are cut to 256 bytes; two values equal in those bytes share a series */
    char big[400];
    memset(big, 'v', sizeof(big));
    vsr_metrics_overflow(s, vsr_slice(big, sizeof(big)));
    vsr_metrics_overflow(s, vsr_slice(big, 300));
    t = render(m);
    char want[400];
    snprintf(want, sizeof(want), "vsr_upstream_overflow_total{model=\"%.256s\"} 2", big);
    assert_line(t, want);
    vsr_free(t);
    vsr_metrics_free(m);
}

static void test_metrics_label_overflow_other(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(2);
    vsr_metrics_shard_t *s0 = vsr_metrics_shard(m, 0), *s1 = vsr_metrics_shard(m, 1);
    /* a model configured as "other" is the overflow's series, and takes none of the 256 places */
    vsr_metrics_request(s1, 200, S("other"), S("d"), 0.1, -1, -1);
    for (int i = 0; i < 300; i++) {
        char name[16];
        int n = snprintf(name, sizeof(name), "m%03d", i);
        vsr_metrics_request(i % 2 ? s1 : s0, 200, vsr_slice(name, (size_t)n), S("d"), 0.1, -1, -1);
    }
    /* a value first seen after the cap, on another family: also "other" */
    vsr_metrics_retry(s0, S("late"));
    /* values seen before the cap keep their own series */
    vsr_metrics_request(s1, 200, S("m000"), S("d"), 0.1, -1, -1);

    char *t = render(m);
    assert_int_equal(count_prefix(t, "vsr_requests_total{"), 257);
    assert_line(t, "vsr_requests_total{status_class=\"2xx\",model=\"m000\",decision=\"d\"} 2");
    assert_line(t, "vsr_requests_total{status_class=\"2xx\",model=\"m255\",decision=\"d\"} 1");
    assert_null(strstr(t, "m256"));
    assert_null(strstr(t, "late"));
    assert_line(t, "vsr_requests_total{status_class=\"2xx\",model=\"other\",decision=\"d\"} 45");
    assert_line(t, "vsr_request_duration_seconds_count{model=\"other\"} 45");
    assert_line(t, "vsr_upstream_retries_total{model=\"other\"} 1");
    /* other label kinds have their own budget */
    vsr_metrics_attempt(s0, S("m000"), "timeout");
    vsr_free(t);
    t = render(m);
    assert_line(t, "vsr_upstream_attempts_total{model=\"m000\",outcome=\"timeout\"} 1");
    vsr_free(t);
    vsr_metrics_free(m);
}

/* Labels that share a length and their end bytes fall on the same place of
 * a shard's memo: each still counts on its own series, in any order, and a
 * label's bytes reused at the same address under another value do too. */
static void test_metrics_label_memo_collisions(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(1);
    vsr_metrics_shard_t *s0 = vsr_metrics_shard(m, 0);
    char name[4] = "m?x";
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 20; i++) {
            name[1] = (char)('A' + (i * 7) % 20); /* one buffer, its bytes changed: the address repeats */
            for (int k = 0; k <= i % 3; k++)
                vsr_metrics_request(s0, 200, vsr_slice(name, 3), S("d"), 0.1, -1, -1);
        }
    char *t = render(m);
    for (int i = 0; i < 20; i++) {
        char line[128];
        int c = 'A' + (i * 7) % 20;
        snprintf(line, sizeof(line), "vsr_requests_total{status_class=\"2xx\",model=\"m%cx\",decision=\"d\"} %d", c,
                 3 * (i % 3 + 1));
        assert_line(t, line);
    }
    assert_int_equal(count_prefix(t, "vsr_requests_total{"), 20);
    vsr_free(t);
    vsr_metrics_free(m);
}

static void test_metrics_gauges_and_globals(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(2);
    char *t = render(m);
    /* a fresh registry: label-less metrics are there, labelled families are not */
    const char *want_fresh =
        "# HELP vsr_routing_duration_seconds Time spent choosing the model of a request.\n"
        "# TYPE vsr_routing_duration_seconds histogram\n";
    assert_true(strncmp(t, want_fresh, strlen(want_fresh)) == 0);
    assert_line(t, "vsr_routing_duration_seconds_bucket{le=\"+Inf\"} 0");
    assert_line(t, "vsr_routing_duration_seconds_sum 0");
    assert_line(t, "vsr_active_connections 0");
    assert_line(t, "vsr_active_requests 0");
    assert_line(t, "vsr_config_version 0");
    assert_line(t, "vsr_config_activations_total 0");
    assert_null(strstr(t, "vsr_requests_total"));
    assert_null(strstr(t, "vsr_endpoint_healthy"));
    assert_null(strstr(t, "vsr_outlier_ejections_total"));
    vsr_free(t);

    vsr_metrics_shard_t *s0 = vsr_metrics_shard(m, 0), *s1 = vsr_metrics_shard(m, 1);
    vsr_metrics_connections(s0, 1);
    vsr_metrics_connections(s0, 1);
    vsr_metrics_connections(s1, 1);
    vsr_metrics_connections(s0, -1);
    vsr_metrics_active_requests(s1, 1);
    vsr_metrics_active_requests(s1, 1);
    vsr_metrics_active_requests(s0, -1); /* a shard's own sum may go negative; the total is what counts */
    vsr_metrics_set_config_version(m, 42);
    vsr_metrics_count_activation(m);
    vsr_metrics_set_endpoint_health(m, S("m2"), S("b"), 1, 0);
    vsr_metrics_set_endpoint_health(m, S("m1"), S("a"), 1, 0);
    vsr_metrics_set_endpoint_health(m, S("m2"), S("b"), 0, 1); /* updated in place */
    vsr_metrics_count_ejection(m, S("m2"));
    vsr_metrics_count_ejection(m, S("m2"));
    vsr_metrics_count_ejection(m, S("m1"));
    t = render(m);
    const char *want =
        "# HELP vsr_outlier_ejections_total Endpoints ejected by outlier detection, by model.\n"
        "# TYPE vsr_outlier_ejections_total counter\n"
        "vsr_outlier_ejections_total{model=\"m1\"} 1\n"
        "vsr_outlier_ejections_total{model=\"m2\"} 2\n"
        "# HELP vsr_endpoint_healthy 1 while the endpoint passes its health checks.\n"
        "# TYPE vsr_endpoint_healthy gauge\n"
        "vsr_endpoint_healthy{model=\"m1\",endpoint=\"a\"} 1\n"
        "vsr_endpoint_healthy{model=\"m2\",endpoint=\"b\"} 0\n"
        "# HELP vsr_endpoint_ejected 1 while outlier detection keeps the endpoint out of rotation.\n"
        "# TYPE vsr_endpoint_ejected gauge\n"
        "vsr_endpoint_ejected{model=\"m1\",endpoint=\"a\"} 0\n"
        "vsr_endpoint_ejected{model=\"m2\",endpoint=\"b\"} 1\n"
        "# HELP vsr_active_connections Open client connections.\n"
        "# TYPE vsr_active_connections gauge\n"
        "vsr_active_connections 2\n"
        "# HELP vsr_active_requests Requests in progress.\n"
        "# TYPE vsr_active_requests gauge\n"
        "vsr_active_requests 1\n"
        "# HELP vsr_config_version Version of the active configuration.\n"
        "# TYPE vsr_config_version gauge\n"
        "vsr_config_version 42\n"
        "# HELP vsr_config_activations_total Configurations activated since the start.\n"
        "# TYPE vsr_config_activations_total counter\n"
        "vsr_config_activations_total 1\n"
        "# HELP vsr_access_log_dropped_total Access log lines dropped because the writer's queue was full.\n"
        "# TYPE vsr_access_log_dropped_total counter\n"
        "vsr_access_log_dropped_total 0\n";
    size_t tl = strlen(t), wl = strlen(want);
    assert_true(tl >= wl);
    if (strcmp(t + tl - wl, want) != 0)
        fail_msg("tail differs; rendered:\n%s", t);
    vsr_free(t);

    /* a capped output keeps whole lines only */
    vsr_buf_t small;
    vsr_buf_init(&small, 100);
    vsr_metrics_render(m, &small);
    assert_true(small.len > 0 && small.len <= 100);
    assert_int_equal(small.data[small.len - 1], '\n');
    vsr_buf_free(&small);

    /* no registry, no shard: no-ops */
    vsr_metrics_request(NULL, 200, S("m"), S("d"), 1, 1, 1);
    vsr_metrics_ttfb(NULL, S("m"), 1);
    vsr_metrics_attempt(NULL, S("m"), "ok");
    vsr_metrics_retry(NULL, S("m"));
    vsr_metrics_fallback(NULL, S("a"), S("b"));
    vsr_metrics_overflow(NULL, S("m"));
    vsr_metrics_connections(NULL, 1);
    vsr_metrics_active_requests(NULL, 1);
    vsr_metrics_set_config_version(NULL, 1);
    vsr_metrics_count_activation(NULL);
    vsr_metrics_set_endpoint_health(NULL, S("m"), S("e"), 1, 0);
    vsr_metrics_count_ejection(NULL, S("m"));
    assert_null(vsr_metrics_shard(NULL, 0));
    vsr_metrics_free(NULL);
    vsr_metrics_free(m);
}

/* ---- concurrent updates and scrapes ---- */

#define STRESS_SHARDS 3
#define STRESS_ITERS 20000

typedef struct {
    vsr_metrics_t *m;
    unsigned shard;
} stress_arg_t;

static atomic_int stress_writers_left;

static void *stress_writer(void *arg)
{
    stress_arg_t *a = arg;
    vsr_metrics_shard_t *s = vsr_metrics_shard(a->m, a->shard);
    for (int i = 0; i < STRESS_ITERS; i++) {
        /* new label sets keep appearing while the scraper walks the tables */
        char model[16], dec[16];
        int mn = snprintf(model, sizeof(model), "m%d", (i * 7 + (int)a->shard) % 41);
        int dn = snprintf(dec, sizeof(dec), "d%d", (i / 3) % 13);
        vsr_slice_t mo = vsr_slice(model, (size_t)mn);
        vsr_metrics_connections(s, 1);
        vsr_metrics_active_requests(s, 1);
        vsr_metrics_request(s, i % 10 ? 200 : 503, mo, vsr_slice(dec, (size_t)dn), (i % 100) / 50.0, 0.0001,
                            0.01);
        vsr_metrics_attempt(s, mo, i % 10 ? "ok" : "5xx");
        vsr_metrics_ttfb(s, mo, 0.02);
        if (i % 97 == 0)
            vsr_metrics_fallback(s, mo, S("m0"));
        vsr_metrics_active_requests(s, -1);
        vsr_metrics_connections(s, -1);
    }
    atomic_fetch_sub(&stress_writers_left, 1);
    return NULL;
}

static void *stress_control(void *arg)
{
    vsr_metrics_t *m = arg;
    for (int i = 0; atomic_load(&stress_writers_left) > 0; i++) {
        char ep[16];
        int n = snprintf(ep, sizeof(ep), "e%d", i % 7);
        vsr_metrics_set_endpoint_health(m, S("m1"), vsr_slice(ep, (size_t)n), i % 2, i % 3 == 0);
        if (i % 5 == 0)
            vsr_metrics_count_ejection(m, S("m1"));
        vsr_metrics_set_config_version(m, (uint64_t)i);
    }
    return NULL;
}

/* Sum of the values of the lines starting with prefix; -1 when a sample line is malformed. */
static double sum_samples(const char *text, const char *prefix)
{
    double total = 0;
    size_t n = strlen(prefix);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        if (nl == NULL)
            return -1; /* every line ends with a newline */
        if (*p != '#') {
            const char *sp = memrchr(p, ' ', (size_t)(nl - p));
            if (sp == NULL || sp == p)
                return -1;
            char *end;
            double v = strtod(sp + 1, &end);
            if (end != nl)
                return -1;
            if (strncmp(p, prefix, n) == 0)
                total += v;
        }
        p = nl + 1;
    }
    return total;
}

static void test_metrics_concurrent_scrapes(void **state)
{
    (void)state;
    vsr_metrics_t *m = vsr_metrics_new(STRESS_SHARDS);
    pthread_t w[STRESS_SHARDS], ctl;
    stress_arg_t args[STRESS_SHARDS];
    atomic_store(&stress_writers_left, STRESS_SHARDS);
    for (unsigned i = 0; i < STRESS_SHARDS; i++) {
        args[i] = (stress_arg_t){m, i};
        assert_int_equal(pthread_create(&w[i], NULL, stress_writer, &args[i]), 0);
    }
    assert_int_equal(pthread_create(&ctl, NULL, stress_control, m), 0);

    /* scrape while they write: every counter only grows, every line is well-formed */
    double last_requests = 0, last_attempts = 0, last_count = 0;
    int scrapes = 0, bad = 0;
    while (atomic_load(&stress_writers_left) > 0 || scrapes == 0) {
        char *t = render(m);
        double req = sum_samples(t, "vsr_requests_total{");
        double att = sum_samples(t, "vsr_upstream_attempts_total{");
        double cnt = sum_samples(t, "vsr_request_duration_seconds_count{");
        double conns = sum_samples(t, "vsr_active_connections ");
        if (req < last_requests || att < last_attempts || cnt < last_count || req < 0 || conns < 0 ||
            conns > STRESS_SHARDS)
            bad++;
        last_requests = req, last_attempts = att, last_count = cnt;
        scrapes++;
        vsr_free(t);
    }
    for (unsigned i = 0; i < STRESS_SHARDS; i++)
        pthread_join(w[i], NULL);
    pthread_join(ctl, NULL);
    assert_int_equal(bad, 0);

    char *t = render(m);
    const double total = (double)STRESS_SHARDS * STRESS_ITERS;
    assert_true(sum_samples(t, "vsr_requests_total{") == total);
    assert_true(sum_samples(t, "vsr_requests_total{status_class=\"5xx\"") == total / 10);
    assert_true(sum_samples(t, "vsr_upstream_attempts_total{") == total);
    assert_true(sum_samples(t, "vsr_request_duration_seconds_count{") == total);
    assert_true(sum_samples(t, "vsr_request_duration_seconds_bucket{model=\"m0\",le=\"+Inf\"}") ==
                sum_samples(t, "vsr_request_duration_seconds_count{model=\"m0\"}"));
    assert_true(sum_samples(t, "vsr_stream_ttfb_seconds_count{") == total);
    assert_true(sum_samples(t, "vsr_routing_duration_seconds_count") == total);
    assert_line(t, "vsr_active_connections 0");
    assert_line(t, "vsr_active_requests 0");
    /* 41 models, each with one duration series summed over the shards */
    assert_int_equal(count_prefix(t, "vsr_request_duration_seconds_count{"), 41);
    vsr_free(t);
    vsr_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_access_log_format),
        cmocka_unit_test(test_access_log_hostile_fields),
        cmocka_unit_test(test_access_log_concurrent_writers),
        cmocka_unit_test(test_access_log_drops_when_writer_stalls),
        cmocka_unit_test(test_access_log_queue_bytes_bound),
        cmocka_unit_test(test_access_log_open_and_null),
        cmocka_unit_test(test_metrics_counters_sum_across_shards),
        cmocka_unit_test(test_metrics_sum_without_float_noise),
        cmocka_unit_test(test_metrics_histograms),
        cmocka_unit_test(test_metrics_label_escaping),
        cmocka_unit_test(test_metrics_label_overflow_other),
        cmocka_unit_test(test_metrics_label_memo_collisions),
        cmocka_unit_test(test_metrics_gauges_and_globals),
        cmocka_unit_test(test_metrics_concurrent_scrapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
