/*
 * supervisor.c — the model runtime as the router's child (client.h has the
 * contract): spawned with uv_spawn, probed on GET /health/live over its
 * Unix socket (an answer counts only from the child itself: the socket's
 * peer, SO_PEERCRED, is its pid), restarted with exponential back-off when
 * it exits, does not become ready in time, or stops answering; its output
 * goes to vsr's log.
 *
 * One timer drives the child's life: while no child runs it is the
 * back-off before the next start; while one runs it is the probe interval.
 */
#include "runtime/client.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>

#define START_PROBE_MS 200
#define KILL_AFTER_MS 5000
#define LINE_MAX_BYTES 1024

typedef struct {
    uv_pipe_t pipe;
    struct vsr_rts_s *s;
    char line[LINE_MAX_BYTES];
    size_t len;
    int open;
    char rbuf[4096];
} out_t;

struct vsr_rts_s {
    uv_loop_t *loop;
    vsr_rts_opts_t o;
    char *exe, *path;
    char **argv;
    uv_process_t proc;
    int proc_open;     /* the handle is not closed yet */
    int running;
    atomic_int pid;    /* read by the workers' runtime clients (their peer check) */
    out_t out[2];
    uv_timer_t timer;
    uv_timer_t probe_timer;
    uv_timer_t kill_timer;
    /* the probe in flight */
    uv_pipe_t ppipe;
    uv_connect_t pconn;
    uv_write_t pwrite;
    char pbuf[32];
    size_t plen;
    int probing;       /* ppipe is open */
    int probe_done;
    atomic_int ready;
    unsigned starts;
    unsigned failures;
    uint64_t backoff;
    uint64_t started_ms;
    int stopping;
    unsigned handles;
};

static void tick(uv_timer_t *t);

static void handle_closed(uv_handle_t *h)
{
    vsr_rts_t *s = h->data;
    if (h == (uv_handle_t *)&s->proc)
        s->proc_open = 0;
    if (--s->handles > 0 || !s->stopping)
        return;
    for (char **a = s->argv; a && *a; a++)
        vsr_free(*a);
    vsr_free(s->argv);
    vsr_free(s->exe);
    vsr_free(s->path);
    vsr_free(s);
}

static void close_handle(vsr_rts_t *s, uv_handle_t *h)
{
    h->data = s;
    uv_close(h, handle_closed);
}

static void set_ready(vsr_rts_t *s, int ready)
{
    if (atomic_load(&s->ready) == ready)
        return;
    atomic_store(&s->ready, ready);
    vsr_log_info("runtime", "the model runtime is %s", ready ? "ready" : "not ready");
    if (s->o.on_ready && !s->stopping)
        s->o.on_ready(s->o.ud, ready);
}

/* ---- the child's output ---- */

/* A line of the child's own log ("TIME LEVEL [runtime] message") is logged
 * again at its level as "[runtime] child: message"; any other output line
 * at info, as it is. */
static void relog(const char *line, size_t len)
{
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    const char *sp1 = memchr(line, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - line)) : NULL;
    static const char tag[] = " [runtime] ";
    if (sp1 && sp2 && (size_t)(line + len - sp2) >= sizeof(tag) - 1 && memcmp(sp2, tag, sizeof(tag) - 1) == 0) {
        for (int l = 0; l < 4; l++) {
            size_t n = strlen(levels[l]);
            if ((size_t)(sp2 - sp1 - 1) == n && memcmp(sp1 + 1, levels[l], n) == 0) {
                const char *msg = sp2 + sizeof(tag) - 1;
                vsr_log((vsr_log_level_t)l, "runtime", "child: %.*s", (int)(line + len - msg), msg);
                return;
            }
        }
    }
    vsr_log_info("runtime", "child: %.*s", (int)len, line);
}

static void emit(out_t *o)
{
    vsr_rts_t *s = o->s;
    if (s->o.log_line)
        s->o.log_line(s->o.ud, o->line, o->len);
    else
        relog(o->line, o->len);
    o->len = 0;
}

static void out_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    VSR_UNUSED(suggested);
    out_t *o = h->data;
    *buf = uv_buf_init(o->rbuf, sizeof(o->rbuf));
}

static void out_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    out_t *o = st->data;
    vsr_rts_t *s = o->s;
    if (n < 0) {
        if (o->len)
            emit(o);
        o->open = 0;
        close_handle(s, (uv_handle_t *)&o->pipe);
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        char c = buf->base[i];
        if (c == '\n') {
            emit(o);
            continue;
        }
        if (c != '\r')
            o->line[o->len++] = c;
        if (o->len == sizeof(o->line))
            emit(o); /* a longer line is cut */
    }
}

/* ---- the child ---- */

static void kill_child(vsr_rts_t *s, int sig)
{
    if (s->running)
        uv_process_kill(&s->proc, sig);
}

static void exit_cb(uv_process_t *p, int64_t status, int sig)
{
    vsr_rts_t *s = p->data;
    int was_ready = atomic_load(&s->ready);
    s->running = 0;
    atomic_store(&s->pid, 0);
    close_handle(s, (uv_handle_t *)&s->proc);
    if (s->stopping) {
        uv_timer_stop(&s->kill_timer);
        close_handle(s, (uv_handle_t *)&s->kill_timer);
        return;
    }
    vsr_log_warn("runtime", "the model runtime exited (status %lld, signal %d)", (long long)status, sig);
    set_ready(s, 0);
    if (was_ready)
        s->backoff = s->o.backoff_initial_ms;
    uint64_t delay = s->backoff;
    s->backoff = VSR_MIN(s->backoff * 2, s->o.backoff_max_ms);
    uv_timer_start(&s->timer, tick, delay, 0);
}

static void spawn_child(vsr_rts_t *s)
{
    if (s->proc_open || s->out[0].open || s->out[1].open) {
        uv_timer_start(&s->timer, tick, 10, 0); /* the last child's handles are still closing */
        return;
    }
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE;
    for (int i = 0; i < 2; i++) {
        out_t *o = &s->out[i];
        o->s = s;
        o->len = 0;
        uv_pipe_init(s->loop, &o->pipe, 0);
        s->handles++;
        o->open = 1;
        stdio[i + 1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
        stdio[i + 1].data.stream = (uv_stream_t *)&o->pipe;
    }
    uv_process_options_t po;
    memset(&po, 0, sizeof(po));
    po.file = s->exe;
    po.args = s->argv;
    po.exit_cb = exit_cb;
    po.stdio_count = 3;
    po.stdio = stdio;
    s->proc.data = s;
    s->handles++;
    s->proc_open = 1;
    s->starts++;
    int rc = uv_spawn(s->loop, &s->proc, &po);
    if (rc < 0) {
        vsr_log_error("runtime", "cannot start the model runtime %s: %s", s->exe, uv_strerror(rc));
        close_handle(s, (uv_handle_t *)&s->proc);
        for (int i = 0; i < 2; i++) {
            s->out[i].open = 0;
            close_handle(s, (uv_handle_t *)&s->out[i].pipe);
        }
        uint64_t delay = s->backoff;
        s->backoff = VSR_MIN(s->backoff * 2, s->o.backoff_max_ms);
        uv_timer_start(&s->timer, tick, delay, 0);
        return;
    }
    s->running = 1;
    atomic_store(&s->pid, s->proc.pid);
    s->failures = 0;
    s->started_ms = vsr_now_ms();
    vsr_log_info("runtime", "started the model runtime (pid %d)", s->proc.pid);
    for (int i = 0; i < 2; i++) {
        s->out[i].pipe.data = &s->out[i];
        uv_read_start((uv_stream_t *)&s->out[i].pipe, out_alloc, out_read);
    }
    uv_timer_start(&s->timer, tick, START_PROBE_MS, START_PROBE_MS);
}

/* ---- the probe ---- */

static void ppipe_closed(uv_handle_t *h)
{
    vsr_rts_t *s = h->data;
    s->probing = 0;
    handle_closed(h);
}

static void probe_end(vsr_rts_t *s, int ok)
{
    if (s->probe_done)
        return;
    s->probe_done = 1;
    uv_timer_stop(&s->probe_timer);
    uv_close((uv_handle_t *)&s->ppipe, ppipe_closed); /* ppipe.data is s */
    if (s->stopping || !s->running)
        return;
    if (ok) {
        s->failures = 0;
        if (!atomic_load(&s->ready)) {
            set_ready(s, 1);
            uv_timer_start(&s->timer, tick, s->o.probe_interval_ms, s->o.probe_interval_ms);
        }
        return;
    }
    if (atomic_load(&s->ready) && ++s->failures >= s->o.probe_failures) {
        vsr_log_warn("runtime", "the model runtime does not answer /health/live: restarting it");
        set_ready(s, 0);
        kill_child(s, SIGKILL);
    }
}

static void probe_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    VSR_UNUSED(suggested);
    vsr_rts_t *s = h->data;
    *buf = uv_buf_init(s->pbuf + s->plen, (unsigned)(sizeof(s->pbuf) - 1 - s->plen));
}

static int probe_ok(const vsr_rts_t *s)
{
    return s->plen >= 12 && (memcmp(s->pbuf, "HTTP/1.1 200", 12) == 0 || memcmp(s->pbuf, "HTTP/1.0 200", 12) == 0);
}

static void probe_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    VSR_UNUSED(buf);
    vsr_rts_t *s = st->data;
    if (n < 0) {
        probe_end(s, probe_ok(s));
        return;
    }
    s->plen += (size_t)n;
    if (s->plen >= 12 || s->plen == sizeof(s->pbuf) - 1)
        probe_end(s, probe_ok(s));
}

static void probe_written(uv_write_t *w, int status)
{
    vsr_rts_t *s = w->data;
    if (status < 0)
        probe_end(s, 0);
}

static void probe_connected(uv_connect_t *c, int status)
{
    vsr_rts_t *s = c->data;
    if (s->probe_done)
        return;
    if (status < 0) {
        probe_end(s, 0);
        return;
    }
    int peer = vsr__rt_peer_pid((uv_stream_t *)&s->ppipe);
    if (peer != atomic_load(&s->pid)) { /* another process serves the socket: not our child's answer */
        vsr_log_warn("runtime", "the runtime's socket %s is served by process %d, not the model runtime (%d)", s->path,
                     peer, atomic_load(&s->pid));
        probe_end(s, 0);
        return;
    }
    static const char req[] = "GET /health/live HTTP/1.1\r\nhost: runtime\r\nconnection: close\r\n\r\n";
    uv_buf_t b = uv_buf_init((char *)req, sizeof(req) - 1);
    s->pwrite.data = s;
    if (uv_write(&s->pwrite, (uv_stream_t *)&s->ppipe, &b, 1, probe_written) < 0 ||
        uv_read_start((uv_stream_t *)&s->ppipe, probe_alloc, probe_read) < 0)
        probe_end(s, 0);
}

static void probe_timeout(uv_timer_t *t)
{
    probe_end(t->data, 0);
}

static void probe_start(vsr_rts_t *s)
{
    s->probing = 1;
    s->probe_done = 0;
    s->plen = 0;
    uv_pipe_init(s->loop, &s->ppipe, 0);
    s->handles++;
    s->ppipe.data = s;
    s->pconn.data = s;
    uv_timer_start(&s->probe_timer, probe_timeout, s->o.probe_timeout_ms, 0);
    uv_pipe_connect(&s->pconn, &s->ppipe, s->path, probe_connected);
}

static void tick(uv_timer_t *t)
{
    vsr_rts_t *s = t->data;
    if (s->stopping)
        return;
    if (!s->running) {
        spawn_child(s);
        return;
    }
    if (!atomic_load(&s->ready) && vsr_now_ms() - s->started_ms > s->o.start_timeout_ms) {
        vsr_log_warn("runtime", "the model runtime is not ready after %llu ms: restarting it",
                     (unsigned long long)s->o.start_timeout_ms);
        kill_child(s, SIGKILL);
        return;
    }
    if (!s->probing)
        probe_start(s);
}

/* ---- lifecycle ---- */

vsr_rts_t *vsr_rts_start(uv_loop_t *loop, const vsr_rts_opts_t *opts)
{
    vsr_rts_t *s = vsr_calloc(1, sizeof(*s));
    s->loop = loop;
    s->o = *opts;
    s->exe = vsr_strdup(opts->exe);
    s->path = vsr_strdup(opts->socket_path ? opts->socket_path : "");
    size_t n = 0;
    while (opts->args && opts->args[n])
        n++;
    s->argv = vsr_calloc(n + 2, sizeof(char *));
    s->argv[0] = vsr_strdup(opts->exe);
    for (size_t i = 0; i < n; i++)
        s->argv[i + 1] = vsr_strdup(opts->args[i]);
    if (!s->o.probe_interval_ms)
        s->o.probe_interval_ms = 1000;
    if (!s->o.probe_timeout_ms)
        s->o.probe_timeout_ms = 1000;
    if (!s->o.probe_failures)
        s->o.probe_failures = 3;
    if (!s->o.start_timeout_ms)
        s->o.start_timeout_ms = 60000;
    if (!s->o.backoff_initial_ms)
        s->o.backoff_initial_ms = 100;
    if (!s->o.backoff_max_ms)
        s->o.backoff_max_ms = 30000;
    s->backoff = s->o.backoff_initial_ms;
    atomic_init(&s->ready, 0);
    atomic_init(&s->pid, 0);
    uv_timer_t *timers[] = {&s->timer, &s->probe_timer, &s->kill_timer};
    for (size_t i = 0; i < VSR_ARRAY_LEN(timers); i++) {
        uv_timer_init(loop, timers[i]);
        timers[i]->data = s;
        s->handles++;
    }
    spawn_child(s);
    return s;
}

int vsr_rts_ready(const vsr_rts_t *s)
{
    return atomic_load(&((vsr_rts_t *)s)->ready);
}

unsigned vsr_rts_starts(const vsr_rts_t *s)
{
    return s->starts;
}

int vsr_rts_pid(const vsr_rts_t *s)
{
    return atomic_load(&((vsr_rts_t *)s)->pid);
}

static void kill_timeout(uv_timer_t *t)
{
    kill_child(t->data, SIGKILL);
}

void vsr_rts_stop(vsr_rts_t *s)
{
    if (s == NULL || s->stopping)
        return;
    s->stopping = 1;
    atomic_store(&s->ready, 0);
    uv_timer_stop(&s->timer);
    close_handle(s, (uv_handle_t *)&s->timer);
    if (s->probing && !s->probe_done)
        probe_end(s, 0);
    uv_timer_stop(&s->probe_timer);
    close_handle(s, (uv_handle_t *)&s->probe_timer);
    if (s->running) {
        kill_child(s, SIGTERM);
        uv_timer_start(&s->kill_timer, kill_timeout, KILL_AFTER_MS, 0); /* closed by exit_cb */
    } else {
        close_handle(s, (uv_handle_t *)&s->kill_timer);
    }
}
