/*
 * gateway.c — worker threads and listeners.
 *
 * Each worker binds its own socket per listener with SO_REUSEPORT, so the
 * kernel spreads connections over the workers and no accept lock or
 * cross-thread hand-off exists.  Start-up is all or nothing: the starting
 * thread waits until every worker has bound every listener (or failed).
 */
#include "gateway/gateway-int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static int bind_listener(worker_t *w, listener_t *l)
{
    const vsr_listener_conf_t *lc = l->conf;
    struct sockaddr_storage ss;
    socklen_t slen;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, lc->address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(lc->port);
        slen = sizeof(*v4);
    } else if (inet_pton(AF_INET6, lc->address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(lc->port);
        slen = sizeof(*v6);
    } else {
        vsr_buf_printf(&w->start_err, "listener %s: bad address \"%s\"\n", lc->name, lc->address);
        return VSR_ERR;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, slen) < 0 || listen(fd, 4096) < 0) {
        vsr_buf_printf(&w->start_err, "listener %s: cannot listen on %s:%u: %s\n", lc->name, lc->address,
                       (unsigned)lc->port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return VSR_ERR;
    }
    uv_tcp_init(&w->loop, &l->tcp);
    l->tcp.data = l;
    l->bound = 1;
    int rc = uv_tcp_open(&l->tcp, fd);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->tcp, 4096, vsr__gateway_on_connection);
    if (rc < 0) {
        vsr_buf_printf(&w->start_err, "listener %s: %s\n", lc->name, uv_strerror(rc));
        return VSR_ERR;
    }
    return VSR_OK;
}

static void close_noop(uv_handle_t *h)
{
    VSR_UNUSED(h);
}

static void stop_cb(uv_async_t *a)
{
    worker_t *w = a->data;
    for (size_t i = 0; i < w->n_listeners; i++)
        if (w->listeners[i].bound && !uv_is_closing((uv_handle_t *)&w->listeners[i].tcp))
            uv_close((uv_handle_t *)&w->listeners[i].tcp, close_noop);
    vsr__gateway_close_all(w);
    vsr_upstream_free(w->up);
    w->up = NULL;
    uv_close((uv_handle_t *)&w->stop_async, close_noop);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    vsr_gateway_t *gw = w->gw;
    int rc = VSR_OK;

    w->up = vsr_upstream_new(&w->loop, gw->cfg, gw->shared);
    for (size_t i = 0; rc == VSR_OK && i < w->n_listeners; i++)
        rc = bind_listener(w, &w->listeners[i]);

    pthread_mutex_lock(&gw->mu);
    w->start_rc = rc;
    gw->n_started++;
    pthread_cond_broadcast(&gw->cv);
    pthread_mutex_unlock(&gw->mu);

    if (rc != VSR_OK)
        stop_cb(&w->stop_async); /* close what was opened, then let the loop drain */
    uv_run(&w->loop, UV_RUN_DEFAULT);
    vsr__gateway_worker_cleanup(w);
    vsr_rbuf_trim_cache();
    return NULL;
}

static worker_t *worker_new(vsr_gateway_t *gw, unsigned id)
{
    worker_t *w = vsr_calloc(1, sizeof(*w));
    w->gw = gw;
    w->id = id;
    uv_loop_init(&w->loop);
    uv_async_init(&w->loop, &w->stop_async, stop_cb);
    w->stop_async.data = w;
    vsr_buf_init(&w->start_err, 4096);
    size_t n = gw->cfg->n_listeners;
    w->n_listeners = n + (gw->cfg->management_enabled ? 1 : 0);
    w->listeners = vsr_calloc(w->n_listeners, sizeof(listener_t));
    for (size_t i = 0; i < w->n_listeners; i++) {
        w->listeners[i].w = w;
        w->listeners[i].conf = i < n ? &gw->cfg->listeners[i] : &gw->mgmt;
        w->listeners[i].active = &gw->listener_active[i];
        w->listeners[i].management = i >= n;
    }
    return w;
}

static void worker_free(worker_t *w)
{
    int rc = uv_loop_close(&w->loop);
    VSR_BUG_ON(rc != 0);
    vsr_buf_free(&w->start_err);
    vsr_free(w->listeners);
    vsr_free(w);
}

static void stop_and_join(vsr_gateway_t *gw, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (gw->workers[i]->start_rc == VSR_OK)
            uv_async_send(&gw->workers[i]->stop_async);
    for (unsigned i = 0; i < n; i++) {
        pthread_join(gw->workers[i]->thread, NULL);
        worker_free(gw->workers[i]);
    }
}

static void gateway_free(vsr_gateway_t *gw)
{
    pthread_mutex_destroy(&gw->mu);
    pthread_cond_destroy(&gw->cv);
    vsr_free(gw->listener_active);
    vsr_free(gw->workers);
    vsr_free(gw);
}

vsr_gateway_t *vsr_gateway_start(const vsr_config_t *cfg, vsr_engine_t *engine, vsr_upstream_shared_t *shared,
                                 unsigned workers, vsr_buf_t *err)
{
    if (workers == 0)
        workers = uv_available_parallelism();
    vsr_gateway_t *gw = vsr_calloc(1, sizeof(*gw));
    gw->cfg = cfg;
    gw->engine = engine;
    gw->shared = shared;
    gw->n_workers = workers;
    gw->mgmt = (vsr_listener_conf_t){
        .name = (char *)"management",
        .address = cfg->management_address ? cfg->management_address : (char *)"127.0.0.1",
        .port = cfg->management_port,
        .timeout_ms = VSR_DEFAULT_LISTENER_TIMEOUT_MS,
        .max_body_bytes = 16u << 20,
        .max_connections = 1024,
    };
    gw->listener_active = vsr_calloc(cfg->n_listeners + 1, sizeof(atomic_uint));
    gw->workers = vsr_calloc(workers, sizeof(worker_t *));
    pthread_mutex_init(&gw->mu, NULL);
    pthread_cond_init(&gw->cv, NULL);

    unsigned created = 0;
    for (; created < workers; created++) {
        worker_t *w = worker_new(gw, created);
        gw->workers[created] = w;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            vsr_buf_printf(err, "cannot start worker thread %u\n", created);
            uv_close((uv_handle_t *)&w->stop_async, NULL);
            uv_run(&w->loop, UV_RUN_DEFAULT);
            worker_free(w);
            break;
        }
    }
    pthread_mutex_lock(&gw->mu);
    while (gw->n_started < created)
        pthread_cond_wait(&gw->cv, &gw->mu);
    pthread_mutex_unlock(&gw->mu);

    int ok = created == workers;
    for (unsigned i = 0; i < created; i++) {
        if (gw->workers[i]->start_rc != VSR_OK) {
            if (ok) /* every worker reports the same failure: say it once */
                vsr_buf_append_slice(err, vsr_buf_slice(&gw->workers[i]->start_err));
            ok = 0;
        }
    }
    if (!ok) {
        stop_and_join(gw, created);
        gateway_free(gw);
        return NULL;
    }
    atomic_store(&gw->ready, 1);
    return gw;
}

void vsr_gateway_stop(vsr_gateway_t *gw)
{
    if (gw == NULL)
        return;
    atomic_store(&gw->ready, 0);
    stop_and_join(gw, gw->n_workers);
    gateway_free(gw);
}

unsigned vsr_gateway_workers(const vsr_gateway_t *gw)
{
    return gw->n_workers;
}
