/*
 * client.c — the router's client of the model runtime: POST /v1/bundle over
 * pooled HTTP/1.1 keep-alive connections on a Unix domain socket, one
 * client per worker loop (client.h has the contract).
 *
 * Each call has a timer for its deadline; a call that ends early (cancel,
 * deadline) closes its connection, since its answer may still come.  A
 * reused connection that the runtime closed while it sat idle fails before
 * any byte of the answer: the call is then sent once more on a new one.
 */
#include "runtime/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "http/http.h"
#include "json/json.h"

#define DEFAULT_MAX_CONNS 64
#define DEFAULT_MAX_IDLE 8
#define DEFAULT_MAX_RESPONSE (16u * 1024 * 1024)

typedef struct rconn_s rconn_t;

struct vsr_rtc_s {
    uv_loop_t *loop;
    char *path;
    int tcp;                      /* connect to addr instead of path */
    struct sockaddr_storage addr;
    unsigned max_conns, max_idle;
    size_t max_response;
    int (*peer_pid)(void *ud);    /* the process a Unix socket's peer must be, or NULL */
    void *peer_ud;
    uint64_t peer_warned_ms;      /* the last warning of a wrong peer (one a second at most) */
    unsigned n_open, n_idle;
    rconn_t *all;       /* every open connection */
    rconn_t *idle;      /* ... of which these carry no call */
    unsigned handles;   /* libuv handles not closed yet */
    int freeing;
};

struct rconn_s {
    union {
        uv_pipe_t pipe;
        uv_tcp_t tcp;
    } h;                /* a Unix socket, or TCP when the client has an address */
    uv_connect_t creq;
    uv_write_t wreq;
    vsr_rtc_t *c;
    rconn_t *prev, *next;
    rconn_t *next_idle;
    vsr_rtc_call_t *call;
    vsr_http_parser_t parser;
    unsigned connected : 1, closing : 1, reused : 1, got_bytes : 1, keep : 1, is_idle : 1, connect_failed : 1;
    char rbuf[16384];
};

struct vsr_rtc_call_s {
    vsr_rtc_t *c;
    rconn_t *conn;
    uv_timer_t timer;
    vsr_buf_t req;
    vsr_buf_t resp;
    int http_status;
    double runtime_ms;
    uint64_t start_us;
    uint64_t deadline_ms;  /* on vsr_now_ms() */
    vsr_rtc_done_fn done;
    void *ud;
    unsigned retried : 1, complete : 1, ended : 1;
};

static void conn_close(rconn_t *k);
static void call_end(vsr_rtc_call_t *call, int status);

/* ---- handles and the client's memory ---- */

static void handle_gone(vsr_rtc_t *c)
{
    if (--c->handles == 0 && c->freeing) {
        vsr_free(c->path);
        vsr_free(c);
    }
}

static void conn_closed(uv_handle_t *h)
{
    rconn_t *k = h->data;
    vsr_rtc_t *c = k->c;
    vsr_http_parser_free(&k->parser);
    vsr_free(k);
    handle_gone(c);
}

static void timer_closed(uv_handle_t *h)
{
    vsr_rtc_call_t *call = h->data;
    vsr_rtc_t *c = call->c;
    vsr_buf_free(&call->req);
    vsr_buf_free(&call->resp);
    vsr_free(call);
    handle_gone(c);
}

vsr_rtc_t *vsr_rtc_new(uv_loop_t *loop, const vsr_rtc_opts_t *o)
{
    vsr_rtc_t *c = vsr_calloc(1, sizeof(*c));
    c->loop = loop;
    c->path = vsr_strdup(o->socket_path ? o->socket_path : "");
    if (o->tcp_host) {
        c->tcp = 1;
        struct sockaddr_in *v4 = (struct sockaddr_in *)&c->addr;
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&c->addr;
        if (uv_ip4_addr(o->tcp_host, o->tcp_port, v4) != 0 && uv_ip6_addr(o->tcp_host, o->tcp_port, v6) != 0)
            memset(&c->addr, 0, sizeof(c->addr)); /* AF_UNSPEC: every connect fails (VSR_ERR_IO) */
    }
    c->max_conns = o->max_conns ? o->max_conns : DEFAULT_MAX_CONNS;
    c->max_idle = o->max_idle ? o->max_idle : DEFAULT_MAX_IDLE;
    c->max_response = o->max_response_bytes ? o->max_response_bytes : DEFAULT_MAX_RESPONSE;
    if (!c->tcp) {
        c->peer_pid = o->peer_pid;
        c->peer_ud = o->peer_ud;
    }
    return c;
}

static void call_drop(vsr_rtc_call_t *call)
{
    call->ended = 1;
    uv_timer_stop(&call->timer);
    uv_close((uv_handle_t *)&call->timer, timer_closed);
}

void vsr_rtc_free(vsr_rtc_t *c)
{
    if (c == NULL)
        return;
    c->freeing = 1;
    while (c->all) {
        rconn_t *k = c->all;
        if (k->call) {
            vsr_rtc_call_t *call = k->call;
            k->call = NULL;
            call->conn = NULL;
            call_drop(call);
        }
        conn_close(k);
    }
    if (c->handles == 0) {
        vsr_free(c->path);
        vsr_free(c);
    }
}

unsigned vsr_rtc_open_conns(const vsr_rtc_t *c)
{
    return c->n_open;
}

unsigned vsr_rtc_idle_conns(const vsr_rtc_t *c)
{
    return c->n_idle;
}

/* ---- connections ---- */

static void idle_remove(rconn_t *k)
{
    if (!k->is_idle)
        return;
    rconn_t **pp = &k->c->idle;
    while (*pp && *pp != k)
        pp = &(*pp)->next_idle;
    if (*pp)
        *pp = k->next_idle;
    k->is_idle = 0;
    k->c->n_idle--;
}

static void conn_close(rconn_t *k)
{
    if (k->closing)
        return;
    k->closing = 1;
    idle_remove(k);
    if (k->prev)
        k->prev->next = k->next;
    else
        k->c->all = k->next;
    if (k->next)
        k->next->prev = k->prev;
    k->c->n_open--;
    uv_close((uv_handle_t *)&k->h, conn_closed);
}

static int on_head(void *ud, vsr_http_head_t *h)
{
    rconn_t *k = ud;
    vsr_rtc_call_t *call = k->call;
    call->http_status = h->status;
    k->keep = h->keep_alive;
    vsr_slice_t st;
    if (vsr_http_head_get(h, "server-timing", &st)) {
        /* "queue;dur=0.052, compute;dur=1.234": the runtime's own time is the sum */
        double sum = 0;
        int any = 0;
        vsr_slice_t rest = st;
        while (rest.p) {
            vsr_slice_t metric = vsr_slice_split(rest, ',', &rest);
            vsr_slice_t param;
            vsr_slice_split(metric, ';', &param);
            while (param.p) {
                vsr_slice_t one = vsr_slice_trim(vsr_slice_split(param, ';', &param));
                if (vsr_slice_starts_with(one, VSR_SLICE_LIT("dur="))) {
                    char num[32];
                    size_t n = VSR_MIN(one.len - 4, sizeof(num) - 1);
                    memcpy(num, one.p + 4, n);
                    num[n] = '\0';
                    char *end;
                    double v = strtod(num, &end);
                    if (end != num && v >= 0) {
                        sum += v;
                        any = 1;
                    }
                }
            }
        }
        call->runtime_ms = any ? sum : -1;
    }
    return VSR_OK;
}

static int on_body(void *ud, const char *p, size_t n)
{
    rconn_t *k = ud;
    if (k->call->resp.len + n > k->c->max_response)
        return VSR_ERR_TOO_BIG;
    vsr_buf_append(&k->call->resp, p, n);
    return VSR_OK;
}

static int on_complete(void *ud)
{
    rconn_t *k = ud;
    k->call->complete = 1;
    return VSR_PAUSED;
}

static const vsr_http_callbacks_t parser_cb = {on_head, on_body, on_complete};

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    VSR_UNUSED(suggested);
    rconn_t *k = h->data;
    *buf = uv_buf_init(k->rbuf, sizeof(k->rbuf));
}

static void send_on(rconn_t *k);
static rconn_t *conn_new(vsr_rtc_t *c);

/* The call's connection failed: once more on a new one when the runtime
 * closed a reused connection before answering, else the call fails. */
static void conn_failed(rconn_t *k, int status)
{
    vsr_rtc_call_t *call = k->call;
    int retry = call && k->reused && !k->got_bytes && !call->retried && !k->c->freeing;
    if (call) {
        k->call = NULL;
        call->conn = NULL;
    }
    conn_close(k);
    if (call == NULL)
        return;
    if (retry && k->c->n_open < k->c->max_conns) {
        call->retried = 1;
        rconn_t *fresh = conn_new(k->c);
        fresh->call = call;
        call->conn = fresh;
        if (fresh->connect_failed)
            conn_failed(fresh, VSR_ERR_IO); /* retried already: the call ends */
        return; /* sent once connected */
    }
    call_end(call, status);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    rconn_t *k = s->data;
    if (nread == 0 || k->closing)
        return;
    if (nread < 0) {
        conn_failed(k, VSR_ERR_IO);
        return;
    }
    vsr_rtc_call_t *call = k->call;
    if (call == NULL) {
        conn_close(k); /* bytes nobody asked for: the connection is no longer in step */
        return;
    }
    k->got_bytes = 1;
    ssize_t n = vsr_http_parser_execute(&k->parser, buf->base, (size_t)nread);
    if (n < 0) {
        k->call = NULL;
        call->conn = NULL;
        conn_close(k);
        call_end(call, n == VSR_ERR_TOO_BIG ? VSR_ERR_TOO_BIG : VSR_ERR_IO);
        return;
    }
    if (!call->complete)
        return;
    /* the answer is in: the connection goes back to the pool when it can carry another */
    k->call = NULL;
    call->conn = NULL;
    if (k->keep && (size_t)n == (size_t)nread && k->c->n_idle < k->c->max_idle && !k->c->freeing) {
        vsr_http_parser_execute(&k->parser, NULL, 0); /* ends the paused message */
        k->is_idle = 1;
        k->reused = 1;
        k->got_bytes = 0;
        k->next_idle = k->c->idle;
        k->c->idle = k;
        k->c->n_idle++;
    } else {
        conn_close(k);
    }
    call_end(call, VSR_OK);
}

int vsr__rt_peer_pid(const uv_stream_t *s)
{
    uv_os_fd_t fd;
    if (uv_fileno((const uv_handle_t *)s, &fd) != 0)
        return -1;
#if defined(SO_PEERCRED)
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred))
        return -1;
    return (int)cred.pid;
#elif defined(LOCAL_PEERPID)
    pid_t pid;
    socklen_t len = sizeof(pid);
    if (getsockopt(fd, SOL_LOCAL, LOCAL_PEERPID, &pid, &len) != 0)
        return -1;
    return (int)pid;
#else
    return -1;
#endif
}

static void connect_cb(uv_connect_t *req, int status)
{
    rconn_t *k = req->data;
    if (k->closing)
        return;
    if (status < 0) {
        conn_failed(k, VSR_ERR_IO);
        return;
    }
    if (k->c->peer_pid) {
        int want = k->c->peer_pid(k->c->peer_ud), got = vsr__rt_peer_pid((uv_stream_t *)&k->h);
        if (want <= 0 || got != want) {
            /* not the runtime vsr started: nothing is sent to whoever answers */
            uint64_t now = vsr_now_ms();
            if (now - k->c->peer_warned_ms >= 1000) {
                k->c->peer_warned_ms = now;
                vsr_log_warn("runtime", "the runtime's socket %s is served by process %d, not the model runtime (%d): "
                                        "refused", k->c->path, got, want);
            }
            conn_failed(k, VSR_ERR_IO);
            return;
        }
    }
    k->connected = 1;
    uv_read_start((uv_stream_t *)&k->h, alloc_cb, read_cb);
    if (k->call)
        send_on(k);
}

static rconn_t *conn_new(vsr_rtc_t *c)
{
    rconn_t *k = vsr_calloc(1, sizeof(*k));
    k->c = c;
    if (c->tcp)
        uv_tcp_init(c->loop, &k->h.tcp);
    else
        uv_pipe_init(c->loop, &k->h.pipe, 0);
    c->handles++;
    k->h.pipe.data = k; /* the handle's data, whichever member */
    k->creq.data = k;
    k->wreq.data = k;
    vsr_http_limits_t lim = {.max_body = c->max_response};
    vsr_http_parser_init(&k->parser, VSR_HTTP_RESPONSE, &lim, &parser_cb, k);
    k->next = c->all;
    if (c->all)
        c->all->prev = k;
    c->all = k;
    c->n_open++;
    if (c->tcp) {
        int rc = uv_tcp_connect(&k->creq, &k->h.tcp, (const struct sockaddr *)&c->addr, connect_cb);
        if (rc < 0)
            k->connect_failed = 1; /* reported from the loop (conn_new's caller still sets the call) */
    } else {
        uv_pipe_connect(&k->creq, &k->h.pipe, c->path, connect_cb);
    }
    return k;
}

static void write_cb(uv_write_t *w, int status)
{
    rconn_t *k = w->data;
    if (k->closing || status >= 0)
        return;
    conn_failed(k, VSR_ERR_IO);
}

static void send_on(rconn_t *k)
{
    uv_buf_t b = uv_buf_init(k->call->req.data, (unsigned)k->call->req.len);
    int rc = uv_write(&k->wreq, (uv_stream_t *)&k->h, &b, 1, write_cb);
    if (rc < 0)
        conn_failed(k, VSR_ERR_IO);
}

/* ---- calls ---- */

/* The call leaves its connection, which closes: what it was reading can
 * carry no other call (a deadline passed, or the call was cancelled). */
static void abandon_conn(vsr_rtc_call_t *call)
{
    rconn_t *k = call->conn;
    if (k) {
        k->call = NULL;
        call->conn = NULL;
        conn_close(k);
    }
}

static void timer_cb(uv_timer_t *t)
{
    vsr_rtc_call_t *call = t->data;
    uint64_t now = vsr_now_ms();
    if (now < call->deadline_ms) { /* libuv's clock may run behind ours by its resolution */
        uv_timer_start(&call->timer, timer_cb, call->deadline_ms - now, 0);
        return;
    }
    abandon_conn(call);
    call_end(call, VSR_ERR); /* the deadline passed */
}

/* The answer as per-task results: {"results":[{"id":..., TYPE: RESULT | "error": {...}}]}. */
static int parse_results(vsr_rtc_call_t *call, vsr_json_t *j, vsr_pool_t *pool, vsr_rtc_result_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    uint32_t arr;
    if (vsr_json_parse(j, call->resp.data ? call->resp.data : "", call->resp.len, NULL) != VSR_OK ||
        vsr_json_type(j, 0) != VSR_JSON_OBJECT || vsr_json_object_get(j, 0, "results", &arr) != VSR_OK ||
        vsr_json_type(j, arr) != VSR_JSON_ARRAY)
        return VSR_ERR_INVALID;
    uint32_t count = j->toks[arr].count;
    vsr_rtc_result_t *r = vsr_pool_alloc(pool, sizeof(*r) * (count ? count : 1));
    size_t m = 0;
    for (uint32_t e = arr + 1, i = 0; i < count; i++, e = j->toks[e].next) {
        if (vsr_json_type(j, e) != VSR_JSON_OBJECT)
            continue;
        vsr_rtc_result_t one;
        memset(&one, 0, sizeof(one));
        one.status = VSR_ERR;
        int has_id = 0, has_value = 0;
        for (uint32_t key = e + 1, f = 0; f < j->toks[e].count; f++, key = j->toks[key + 1].next) {
            uint32_t val = key + 1;
            vsr_slice_t name;
            if (vsr_json_string(j, key, pool, &name) != VSR_OK)
                continue;
            if (vsr_slice_eq_cstr(name, "id")) {
                has_id = vsr_json_type(j, val) == VSR_JSON_STRING && vsr_json_string(j, val, pool, &one.id) == VSR_OK;
            } else if (vsr_slice_eq_cstr(name, "error")) {
                uint32_t code;
                if (vsr_json_type(j, val) == VSR_JSON_OBJECT && vsr_json_object_get(j, val, "code", &code) == VSR_OK &&
                    vsr_json_type(j, code) == VSR_JSON_STRING)
                    vsr_json_string(j, code, pool, &one.error_code);
                one.status = VSR_ERR;
                has_value = 0;
                break;
            } else if (!has_value) {
                one.result = vsr_slice(j->src + j->toks[val].start, j->toks[val].end - j->toks[val].start);
                one.status = VSR_OK;
                has_value = 1;
            }
        }
        if (has_id)
            r[m++] = one;
    }
    *out = r;
    *n = m;
    return VSR_OK;
}

static void call_end(vsr_rtc_call_t *call, int status)
{
    if (call->ended)
        return;
    vsr_rtc_timing_t t = {call->http_status, (double)(vsr_now_us() - call->start_us) / 1000.0, call->runtime_ms};
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    int parsed = 0;
    vsr_rtc_result_t *res = NULL;
    size_t n = 0;
    if (status == VSR_OK) {
        if (call->http_status == 200) {
            parsed = 1;
            status = parse_results(call, &j, &pool, &res, &n);
        } else {
            status = call->http_status == 429 || call->http_status == 413 ? VSR_ERR_TOO_BIG : VSR_ERR;
        }
    }
    vsr_rtc_done_fn done = call->done;
    void *ud = call->ud;
    call_drop(call);
    done(ud, status, status == VSR_OK ? res : NULL, status == VSR_OK ? n : 0, &t);
    if (parsed)
        vsr_json_free(&j);
    vsr_pool_free(&pool);
}

vsr_rtc_call_t *vsr_rtc_bundle(vsr_rtc_t *c, const vsr_rtc_task_t *tasks, size_t n_tasks, uint64_t deadline_ms,
                               vsr_rtc_done_fn done, void *ud)
{
    vsr_rtc_timing_t t0 = {0, 0, -1};
    uint64_t now = vsr_now_ms();
    if (c->freeing || now >= deadline_ms) {
        done(ud, VSR_ERR, NULL, 0, &t0);
        return NULL;
    }
    if (c->idle == NULL && c->n_open >= c->max_conns) {
        done(ud, VSR_ERR_TOO_BIG, NULL, 0, &t0);
        return NULL;
    }
    vsr_rtc_call_t *call = vsr_calloc(1, sizeof(*call));
    call->c = c;
    call->done = done;
    call->ud = ud;
    call->runtime_ms = -1;
    call->start_us = vsr_now_us();
    call->deadline_ms = deadline_ms;
    vsr_buf_init(&call->resp, 0);
    vsr_buf_t body;
    vsr_buf_init(&body, 0);
    vsr_buf_append_cstr(&body, "{\"tasks\":[");
    for (size_t i = 0; i < n_tasks; i++) {
        vsr_buf_append_cstr(&body, i ? ",{\"id\":" : "{\"id\":");
        vsr_buf_append_json_string(&body, tasks[i].id);
        vsr_buf_append(&body, ",", 1);
        vsr_buf_append_json_string(&body, tasks[i].type);
        vsr_buf_append(&body, ":", 1);
        vsr_buf_append_slice(&body, tasks[i].payload.len ? tasks[i].payload : VSR_SLICE_LIT("{}"));
        vsr_buf_append(&body, "}", 1);
    }
    vsr_buf_printf(&body, "],\"options\":{\"deadline_ms\":%llu}}", (unsigned long long)(deadline_ms - now));
    vsr_buf_init(&call->req, 0);
    vsr_buf_printf(&call->req,
                   "POST /v1/bundle HTTP/1.1\r\nhost: runtime\r\ncontent-type: application/json\r\n"
                   "content-length: %zu\r\n\r\n",
                   body.len);
    vsr_buf_append(&call->req, body.data, body.len);
    vsr_buf_free(&body);

    uv_timer_init(c->loop, &call->timer);
    c->handles++;
    call->timer.data = call;
    /* the loop's clock is the time of its last turn: brought up to date, a
     * timer counted from it does not fire before the deadline */
    uv_update_time(c->loop);
    uv_timer_start(&call->timer, timer_cb, deadline_ms - now, 0);

    rconn_t *k = c->idle;
    if (k) {
        idle_remove(k);
        k->call = call;
        call->conn = k;
        send_on(k);
    } else {
        k = conn_new(c);
        k->call = call;
        call->conn = k;
        if (k->connect_failed)
            conn_failed(k, VSR_ERR_IO); /* done runs now */
    }
    if (call->ended)
        return NULL; /* failed on the spot: done has run */
    return call;
}

void vsr_rtc_cancel(vsr_rtc_call_t *call)
{
    if (call == NULL || call->ended)
        return;
    abandon_conn(call);
    call_drop(call);
}
