/*
 * fuzz_h2_upstream.c — arbitrary bytes as an HTTP/2 backend's side of the
 * connection carrying one vsr call: the real upstream (upstream.c + h2_client.c)
 * on a libuv loop, against an in-process listener that writes the input
 * and closes.  Whatever the bytes, the call must end exactly once (head at
 * most once, then complete or error) and leak nothing.
 *
 * Input byte 0: bit 0 pauses the call at its head and resumes it from the
 * loop (the held-DATA path), bit 1 makes the request a HEAD, bit 2 cancels
 * the call at its first body bytes.  The rest is written to vsr.
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "upstream/upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t loop;
static uv_tcp_t listener;
static vsr_config_t *cfg;
static vsr_upstream_shared_t *sh;
static vsr_upstream_t *up;

static const uint8_t *in_data;
static size_t in_size;

typedef struct {
    uv_tcp_t tcp;
    uv_write_t w;
    uv_shutdown_t sd;
    char rbuf[4096];
} server_conn_t;

static struct {
    vsr_upstream_call_t *call;
    int heads, ends, paused, cancel_on_body;
    uv_timer_t resume;
} st;

static void sc_closed(uv_handle_t *h)
{
    free(h->data);
}

static void sc_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    (void)s;
    server_conn_t *c = h->data;
    *b = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void sc_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n < 0 && !uv_is_closing((uv_handle_t *)s))
        uv_close((uv_handle_t *)s, sc_closed); /* the client is done */
}

static void sc_shut(uv_shutdown_t *r, int status)
{
    (void)r;
    (void)status; /* reading goes on until the client closes */
}

static void sc_written(uv_write_t *w, int status)
{
    server_conn_t *c = w->data;
    if (status == 0 && !uv_is_closing((uv_handle_t *)&c->tcp))
        uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, sc_shut);
}

static void on_conn(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    server_conn_t *c = calloc(1, sizeof(*c));
    uv_tcp_init(&loop, &c->tcp);
    c->tcp.data = c->w.data = c->sd.data = c;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, sc_closed);
        return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, sc_alloc, sc_read);
    uv_buf_t b = uv_buf_init((char *)in_data, (unsigned)in_size);
    if (uv_write(&c->w, (uv_stream_t *)&c->tcp, &b, 1, sc_written) != 0)
        uv_close((uv_handle_t *)&c->tcp, sc_closed);
}

static void resume_cb(uv_timer_t *t)
{
    (void)t;
    if (st.call && st.paused) {
        st.paused = 0;
        vsr_upstream_call_resume(st.call);
    }
}

static void on_head(void *ud, const vsr_http_head_t *h)
{
    (void)ud;
    if (++st.heads != 1 || h->status < 200 || h->status > 999)
        abort();
    if (st.paused) {
        vsr_upstream_call_pause(st.call);
        uv_timer_start(&st.resume, resume_cb, 0, 0);
    }
}

static void on_body(void *ud, const char *p, size_t n, vsr_rbuf_t *owner)
{
    (void)ud;
    if (st.heads != 1 || n == 0 || owner == NULL || p < owner->data || p + n > owner->data + VSR_RBUF_SIZE)
        abort();
    if (st.cancel_on_body) {
        vsr_upstream_call_cancel(st.call);
        st.call = NULL;
        st.ends++;
    }
}

static void on_complete(void *ud)
{
    (void)ud;
    if (st.heads != 1)
        abort();
    st.call = NULL;
    st.ends++;
}

static void on_error(void *ud, vsr_upstream_error_t err, const char *detail, int retried)
{
    (void)ud;
    (void)err;
    (void)detail;
    (void)retried;
    st.call = NULL;
    st.ends++;
}

static const vsr_upstream_callbacks_t cbs = {on_head, on_body, on_complete, on_error, NULL};

static void setup(void)
{
    uv_loop_init(&loop);
    uv_tcp_init(&loop, &listener);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    if (uv_tcp_bind(&listener, (const struct sockaddr *)&a, 0) != 0 ||
        uv_listen((uv_stream_t *)&listener, 64, on_conn) != 0)
        abort();
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&listener, (struct sockaddr *)&ss, &len);
    int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    char yaml[1024];
    int n = snprintf(yaml, sizeof(yaml),
                     "version: v0.3\n"
                     "listeners:\n  - {name: l, address: 127.0.0.1, port: 1}\n"
                     "providers:\n  models:\n"
                     "    - name: m\n"
                     "      reliability: {retry_count: 1, retry_on: \"refused-stream,reset-before-request\","
                     " idle_timeout: 2s, total_timeout: 3s}\n"
                     "      backend_refs: [{endpoint: \"127.0.0.1:%d\", protocol: h2}]\n",
                     port);
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    if (vsr_config_load_string("fuzz.yaml", yaml, (size_t)n, &cfg, &err) != VSR_OK ||
        (sh = vsr_upstream_shared_new(cfg, &err)) == NULL) {
        fprintf(stderr, "%.*s", (int)err.len, err.data);
        abort();
    }
    vsr_buf_free(&err);
    up = vsr_upstream_new(&loop, cfg, sh);
    uv_timer_init(&loop, &st.resume);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (up == NULL)
        setup();
    uint8_t flags = size ? data[0] : 0;
    in_data = size ? data + 1 : data;
    in_size = size ? size - 1 : 0;
    memset(&st, 0, offsetof(__typeof__(st), resume));
    st.paused = flags & 1;
    st.cancel_on_body = (flags & 4) != 0;

    static const char body[] = "{\"model\":\"m\",\"messages\":[]}";
    vsr_slice_t piece = vsr_slice(body, sizeof(body) - 1);
    vsr_upstream_request_t req = {
        .method = (flags & 2) ? VSR_SLICE_LIT("HEAD") : VSR_SLICE_LIT("POST"),
        .path = VSR_SLICE_LIT("/v1/chat/completions"),
        .body = (flags & 2) ? NULL : &piece,
        .n_body = (flags & 2) ? 0 : 1,
        .head_request = (flags & 2) != 0,
        .listener_timeout_ms = 3000,
    };
    st.call = vsr_upstream_call_start(up, &cfg->models[0], &req, &cbs, NULL);
    while (st.ends == 0)
        uv_run(&loop, UV_RUN_ONCE);
    if (st.ends != 1 || st.heads > 1)
        abort();
    /* let the connection's close and the server's side finish */
    for (int i = 0; i < 4; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    return 0;
}
