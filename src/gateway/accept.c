/*
 * accept.c — a listener's admission of new connections, before there is a
 * connection: the per-listener connection limit (a connection over it is
 * reset, the others untouched), and the back-off when accept() fails — out
 * of descriptors, a descriptor is given up (the worker's reserve, else one
 * of its connections: vsr__conn_shed) and the listener stops accepting for
 * ACCEPT_BACKOFF_MS.  An admitted connection is conn.c's (vsr__conn_accept).
 */
#include "gateway/gateway-int.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define ACCEPT_BACKOFF_MS 200       /* a listener stops accepting this long after a failed accept */
#define ACCEPT_LOG_INTERVAL_MS 5000 /* failed accepts are logged at most this often per worker */

static void refused_close_cb(uv_handle_t *h)
{
    vsr_free(h);
}

/* The next connection of the listener is taken and reset at once. */
static void refuse(listener_t *l)
{
    uv_tcp_t *t = vsr_malloc(sizeof(*t));
    uv_tcp_init(&l->w->loop, t);
    if (uv_accept((uv_stream_t *)&l->tcp, (uv_stream_t *)t) == 0)
        uv_tcp_close_reset(t, refused_close_cb);
    else
        uv_close((uv_handle_t *)t, refused_close_cb);
}

void vsr__gateway_reserve_fd(worker_t *w)
{
    if (w->reserve_fd < 0)
        w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Out of descriptors, libuv retries accept() at once, in a loop that only a
 * successful accept or an empty backlog ends; its own spare descriptor is
 * one per loop and another worker's thread can take it between its close
 * and its accept.  So a descriptor is given up here — the worker's reserve,
 * else one of its idle connections, else its newest one — for the next
 * accept to succeed; the listener backs off, and the connection accepted
 * meanwhile is held (not taken with uv_accept, so libuv stops polling the
 * listener) until the back-off timer takes it. */
static void accept_failed(listener_t *l, int status)
{
    worker_t *w = l->w;
    const char *reason = status == UV_EMFILE ? "emfile" : status == UV_ENFILE ? "enfile" : "other";
    vsr_metrics_accept_error(w->metrics, reason);
    uint64_t now = vsr_now_ms();
    w->accept_unlogged++;
    if (w->accept_log_ms == 0 || now - w->accept_log_ms >= ACCEPT_LOG_INTERVAL_MS) {
        vsr_log_warn("gateway", "worker %u, listener %s: accept failed %u time(s): %s; backing off %d ms", w->id,
                     l->conf->name, w->accept_unlogged, uv_strerror(status), ACCEPT_BACKOFF_MS);
        w->accept_log_ms = now;
        w->accept_unlogged = 0;
    }
    if (!l->paused) {
        l->paused = 1;
        uv_timer_start(&l->backoff, vsr__gateway_accept_backoff_cb, ACCEPT_BACKOFF_MS, 0);
    }
    if (status == UV_EMFILE || status == UV_ENFILE) {
        if (w->reserve_fd >= 0) {
            close(w->reserve_fd);
            w->reserve_fd = -1;
            return;
        }
        if (vsr__conn_shed(w))
            return;
    }
    /* nothing of ours to give up (another thread frees one), or an error a
     * descriptor does not cure: libuv calls again at once, so each call
     * costs a millisecond rather than a spinning core */
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

void vsr__gateway_accept_backoff_cb(uv_timer_t *t)
{
    listener_t *l = t->data;
    worker_t *w = l->w;
    l->paused = 0;
    vsr__gateway_reserve_fd(w);
    if (!l->held)
        return; /* libuv still polls the listener */
    l->held = 0;
    if (w->reserve_fd < 0) {
        /* still out of descriptors: the held connection is refused, which
         * frees one for the reserve; uv_accept lets libuv poll again */
        refuse(l);
        vsr__gateway_reserve_fd(w);
        return;
    }
    vsr__gateway_on_connection((uv_stream_t *)&l->tcp, 0);
}

void vsr__gateway_on_connection(uv_stream_t *server, int status)
{
    listener_t *l = server->data;
    if (status < 0) {
        accept_failed(l, status);
        return;
    }
    if (l->paused) {
        l->held = 1; /* taken when the back-off ends: until then libuv stops polling this listener */
        return;
    }
    if (atomic_fetch_add(l->active, 1) >= l->conf->max_connections) {
        /* over the limit: refuse this one without touching the others */
        atomic_fetch_sub(l->active, 1);
        refuse(l);
        return;
    }
    vsr__conn_accept(l);
}
