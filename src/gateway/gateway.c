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
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* A listener's address as a socket address; 0 when it is not a numeric one. */
static socklen_t listener_sockaddr(const vsr_listener_conf_t *lc, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, lc->address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(lc->port);
        return sizeof(*v4);
    }
    if (inet_pton(AF_INET6, lc->address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(lc->port);
        return sizeof(*v6);
    }
    return 0;
}

static int bind_listener(worker_t *w, listener_t *l)
{
    const vsr_listener_conf_t *lc = l->conf;
    struct sockaddr_storage ss;
    socklen_t slen = listener_sockaddr(lc, &ss);
    if (slen == 0) {
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
    uv_timer_init(&w->loop, &l->backoff);
    l->backoff.data = l;
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

static void close_listeners(worker_t *w)
{
    for (size_t i = 0; i < w->n_listeners; i++)
        if (w->listeners[i].bound && !uv_is_closing((uv_handle_t *)&w->listeners[i].tcp)) {
            uv_close((uv_handle_t *)&w->listeners[i].tcp, close_noop); /* a held connection closes with it */
            uv_close((uv_handle_t *)&w->listeners[i].backoff, close_noop);
        }
}

/* Closes everything the worker holds; its loop then ends. */
static void teardown(worker_t *w)
{
    if (w->torn_down)
        return;
    w->torn_down = 1;
    close_listeners(w);
    vsr__gateway_close_all(w);
    if (w->rt_port && w->gw->opts.runtime.close)
        w->gw->opts.runtime.close(w->gw->opts.runtime.ud, w->rt_port); /* every call it carried is cancelled */
    w->rt_port = NULL;
    vsr__gateway_cache_close(w);
    vsr_upstream_free(w->up);
    w->up = NULL;
    uv_close((uv_handle_t *)&w->drain_deadline, close_noop);
    uv_close((uv_handle_t *)&w->drain_check, close_noop);
    uv_close((uv_handle_t *)&w->trim_timer, close_noop);
    uv_close((uv_handle_t *)&w->posted_check, close_noop);
    uv_close((uv_handle_t *)&w->posted_idle, close_noop);
    uv_close((uv_handle_t *)&w->clock_prepare, close_noop);
    uv_close((uv_handle_t *)&w->clock_check, close_noop);
    pthread_mutex_lock(&w->async_mu);
    w->async_closed = 1;
    uv_close((uv_handle_t *)&w->stop_async, close_noop);
    pthread_mutex_unlock(&w->async_mu);
    if (w->draining && w->gw->drained_async) {
        atomic_fetch_add(&w->gw->n_drained, 1);
        uv_async_send(w->gw->drained_async);
    }
}

/* Idle keep-alive connections stay open this long into a drain, so that a
 * load balancer probing /ready on one sees 503 (and any request they send is
 * still served, with connection: close). */
#define DRAIN_IDLE_GRACE_MS 1000

static void drain_check_cb(uv_timer_t *t)
{
    worker_t *w = t->data;
    if (vsr__gateway_busy(w))
        return; /* the next request to finish pokes again */
    uint64_t since = vsr_now_ms() - w->drain_started_ms;
    uint64_t grace = VSR_MIN(DRAIN_IDLE_GRACE_MS, w->gw->drain_timeout_ms);
    if (w->conns && since < grace) {
        uv_timer_start(&w->drain_check, drain_check_cb, grace - since, 0);
        return;
    }
    teardown(w); /* every request in flight has been answered */
}

static void drain_deadline_cb(uv_timer_t *t)
{
    worker_t *w = t->data;
    vsr_log_warn("gateway", "worker %u: drain timeout, closing the connections still open", w->id);
    teardown(w);
}

void vsr__gateway_drain_poke(worker_t *w)
{
    if (w->draining && !w->torn_down)
        uv_timer_start(&w->drain_check, drain_check_cb, 0, 0);
}

static void stop_cb(uv_async_t *a)
{
    worker_t *w = a->data;
    if (atomic_load(&w->cmd) == CMD_STOP || w->start_rc != VSR_OK) {
        teardown(w);
        return;
    }
    if (w->draining)
        return;
    /* drain: no new connection (the listening sockets close, so the kernel
     * refuses them); requests in flight finish, each reply closes its
     * connection; idle connections close once nothing is in flight */
    w->draining = 1;
    w->drain_started_ms = vsr_now_ms();
    close_listeners(w);
    vsr__gateway_goaway_all(w); /* HTTP/2 clients learn it now and open no new stream */
    uv_timer_start(&w->drain_deadline, drain_deadline_cb, w->gw->drain_timeout_ms, 0);
    vsr__gateway_drain_poke(w);
}

static void send_cmd(worker_t *w, int cmd)
{
    pthread_mutex_lock(&w->async_mu);
    if (!w->async_closed) {
        if (cmd > atomic_load(&w->cmd))
            atomic_store(&w->cmd, cmd);
        uv_async_send(&w->stop_async);
    }
    pthread_mutex_unlock(&w->async_mu);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    vsr_gateway_t *gw = w->gw;
    int rc = VSR_OK;

    vsr_clock_cache(1); /* the loop ticks it (worker_new) */
    w->up = vsr_upstream_new(&w->loop, NULL, NULL); /* clusters come from each request's version */
    if (gw->opts.runtime.open)
        w->rt_port = gw->opts.runtime.open(gw->opts.runtime.ud, &w->loop, w->id);
    for (size_t i = 0; rc == VSR_OK && i < w->n_listeners; i++)
        rc = bind_listener(w, &w->listeners[i]);

    pthread_mutex_lock(&gw->mu);
    w->start_rc = rc;
    gw->n_started++;
    pthread_cond_broadcast(&gw->cv);
    pthread_mutex_unlock(&gw->mu);

    if (rc != VSR_OK)
        teardown(w); /* close what was opened, then let the loop run out */
    uv_run(&w->loop, UV_RUN_DEFAULT);
    vsr__gateway_worker_cleanup(w);
    vsr_rbuf_trim_cache();
    vsr_pool_trim_cache();
    return NULL;
}

static void clock_prepare_cb(uv_prepare_t *h)
{
    VSR_UNUSED(h);
    vsr_clock_tick();
}

static void clock_check_cb(uv_check_t *h)
{
    VSR_UNUSED(h);
    vsr_clock_tick();
}

static worker_t *worker_new(vsr_gateway_t *gw, unsigned id)
{
    worker_t *w = vsr_calloc(1, sizeof(*w));
    w->gw = gw;
    w->id = id;
    uv_loop_init(&w->loop);
    uv_async_init(&w->loop, &w->stop_async, stop_cb);
    w->stop_async.data = w;
    uv_timer_init(&w->loop, &w->drain_deadline);
    uv_timer_init(&w->loop, &w->drain_check);
    w->drain_deadline.data = w->drain_check.data = w;
    uv_timer_init(&w->loop, &w->trim_timer);
    uv_unref((uv_handle_t *)&w->trim_timer);
    w->trim_timer.data = w;
    uv_check_init(&w->loop, &w->posted_check);
    w->posted_check.data = w;
    uv_idle_init(&w->loop, &w->posted_idle);
    w->posted_idle.data = w;
    /* the clock's ticks run every round but keep no loop alive */
    uv_prepare_init(&w->loop, &w->clock_prepare);
    uv_prepare_start(&w->clock_prepare, clock_prepare_cb);
    uv_unref((uv_handle_t *)&w->clock_prepare);
    uv_check_init(&w->loop, &w->clock_check);
    uv_check_start(&w->clock_check, clock_check_cb);
    uv_unref((uv_handle_t *)&w->clock_check);
    pthread_mutex_init(&w->async_mu, NULL);
    vsr_buf_init(&w->start_err, 4096);
    w->reserve_fd = -1;
    vsr__gateway_reserve_fd(w);
    w->metrics = vsr_metrics_shard(gw->opts.metrics, id);
    size_t n = gw->n_listeners;
    w->n_listeners = n + (gw->management_enabled ? 1 : 0) + (gw->opts.metrics_port ? 1 : 0);
    w->listeners = vsr_calloc(w->n_listeners, sizeof(listener_t));
    size_t k = 0;
    for (size_t i = 0; i < w->n_listeners; i++)
        w->listeners[i].index = -1;
    for (size_t i = 0; i < n; i++, k++) {
        w->listeners[k].conf = &gw->listeners[i];
        w->listeners[k].index = (long)i;
        w->listeners[k].tls = gw->listener_tls[i];
        w->listeners[k].extproc = gw->opts.extproc_port != 0;
    }
    if (gw->management_enabled) {
        w->listeners[k].conf = &gw->mgmt;
        w->listeners[k++].management = 1;
    }
    if (gw->opts.metrics_port) {
        w->listeners[k].conf = &gw->metrics_listener;
        w->listeners[k++].metrics = 1;
    }
    for (size_t i = 0; i < w->n_listeners; i++) {
        w->listeners[i].w = w;
        w->listeners[i].active = &gw->listener_active[i];
    }
    return w;
}

static void worker_free(worker_t *w)
{
    int rc = uv_loop_close(&w->loop);
    VSR_BUG_ON(rc != 0);
    vsr_buf_free(&w->start_err);
    if (w->reserve_fd >= 0)
        close(w->reserve_fd);
    pthread_mutex_destroy(&w->async_mu);
    vsr_free(w->listeners);
    vsr_free(w);
}

static void stop_and_join(vsr_gateway_t *gw, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (gw->workers[i]->start_rc == VSR_OK)
            send_cmd(gw->workers[i], CMD_STOP);
    for (unsigned i = 0; i < n; i++) {
        pthread_join(gw->workers[i]->thread, NULL);
        worker_free(gw->workers[i]);
    }
}

/* Descriptors: the soft limit is raised to the hard one, and a warning says
 * when the listeners' max_connections cannot all be open at once (each client
 * connection may hold an upstream one too).  Past the limit accepting backs
 * off (conn.c), so this only tells the operator early. */
static void check_fd_limit(const vsr_gateway_t *gw)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur != RLIM_INFINITY && (rl.rlim_max == RLIM_INFINITY || rl.rlim_cur < rl.rlim_max)) {
        struct rlimit raised = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
            rl = raised;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        return;
    uint64_t conns = 0;
    for (size_t i = 0; i < gw->n_listeners; i++)
        conns += gw->listeners[i].max_connections;
    uint64_t need = 2 * conns + 64 + 8 * (uint64_t)gw->n_workers; /* + the process's own and each worker's */
    if (need > (uint64_t)rl.rlim_cur)
        vsr_log_warn("gateway",
                     "the listeners allow %llu connections (each may need an upstream one: %llu descriptors) but "
                     "RLIMIT_NOFILE is %llu: raise it (ulimit -n, LimitNOFILE=) or lower max_connections; "
                     "at the limit accepting backs off",
                     (unsigned long long)conns, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
}

static char *dup_or_null(const char *s)
{
    return s ? vsr_strdup(s) : NULL;
}

/* The settings a listener keeps until a restart; api_keys and models are
 * read from each request's version instead (left empty here). */
static void listener_copy(vsr_listener_conf_t *dst, const vsr_listener_conf_t *src)
{
    *dst = *src;
    dst->name = dup_or_null(src->name);
    dst->address = dup_or_null(src->address);
    dst->tls_cert_file = dup_or_null(src->tls_cert_file);
    dst->tls_key_file = dup_or_null(src->tls_key_file);
    memset(&dst->api_keys, 0, sizeof(dst->api_keys));
    dst->key_entries = NULL;
    dst->n_key_entries = 0;
    memset(&dst->models, 0, sizeof(dst->models));
    dst->identity_trusted_peers.items = vsr_calloc(src->identity_trusted_peers.n + 1, sizeof(char *));
    for (size_t i = 0; i < src->identity_trusted_peers.n; i++)
        dst->identity_trusted_peers.items[i] = vsr_strdup(src->identity_trusted_peers.items[i]);
}

static void listener_copy_free(vsr_listener_conf_t *l)
{
    vsr_free(l->name);
    vsr_free(l->address);
    vsr_free(l->tls_cert_file);
    vsr_free(l->tls_key_file);
    for (size_t i = 0; i < l->identity_trusted_peers.n; i++)
        vsr_free(l->identity_trusted_peers.items[i]);
    vsr_free(l->identity_trusted_peers.items);
}

vsr_engine_t *vsr__gateway_pin(vsr_gateway_t *gw)
{
    pthread_mutex_lock(&gw->snap_mu);
    vsr_engine_t *e = vsr_engine_ref(gw->current);
    pthread_mutex_unlock(&gw->snap_mu);
    return e;
}

vsr_engine_t *vsr_gateway_current(vsr_gateway_t *gw)
{
    return vsr__gateway_pin(gw);
}

void vsr_gateway_publish(vsr_gateway_t *gw, vsr_engine_t *engine)
{
    vsr_engine_ref(engine);
    pthread_mutex_lock(&gw->snap_mu);
    vsr_engine_t *old = gw->current;
    gw->current = engine; /* the swap: the next pin gets the new version */
    pthread_mutex_unlock(&gw->snap_mu);
    vsr_engine_unref(old); /* freed here or when its last request finishes */
}

static void gateway_free(vsr_gateway_t *gw)
{
    for (size_t i = 0; gw->listener_tls && i < gw->n_listeners; i++)
        vsr_tls_server_ctx_free(gw->listener_tls[i]);
    vsr_free(gw->listener_tls);
    vsr_engine_unref(gw->current);
    for (size_t i = 0; i < gw->n_listeners; i++)
        listener_copy_free(&gw->listeners[i]);
    vsr_free(gw->listeners);
    vsr_free(gw->mgmt.address);
    pthread_mutex_destroy(&gw->snap_mu);
    pthread_mutex_destroy(&gw->mu);
    pthread_cond_destroy(&gw->cv);
    vsr__gateway_cache_free(gw);
    vsr__ratelimit_free(gw->ratelimit);
    vsr__keystore_free(gw->keystore);
    vsr__gateway_replay_free(gw);
    vsr_free(gw->listener_active);
    vsr_free(gw->workers);
    vsr_model_stats_free(gw->model_stats);
    vsr_free(gw);
}

/* SO_REUSEPORT would let the workers' sockets join those of another process
 * listening on the same address (a second vsr, say) and the kernel would
 * split the traffic between two configurations.  So each address is first
 * claimed with a plain socket (no SO_REUSEPORT), which fails when anything
 * listens there; the probe is closed before the workers bind.  Returns
 * VSR_OK, or VSR_ERR with a message (*in_use set when the address is taken). */
static int probe_addresses(const vsr_listener_conf_t *const *ls, size_t n, int *in_use, vsr_buf_t *err)
{
    for (size_t i = 0; i < n; i++) {
        struct sockaddr_storage ss;
        socklen_t slen = listener_sockaddr(ls[i], &ss);
        if (slen == 0)
            continue; /* bind_listener says so */
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            bind(fd, (struct sockaddr *)&ss, slen) == 0) {
            close(fd);
            continue;
        }
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (e == EADDRINUSE) {
            *in_use = 1;
            vsr_buf_printf(err,
                           "listener %s: cannot listen on %s:%u: another process already listens there "
                           "(is another vsr running?)\n",
                           ls[i]->name, ls[i]->address, (unsigned)ls[i]->port);
        } else {
            vsr_buf_printf(err, "listener %s: cannot listen on %s:%u: %s\n", ls[i]->name, ls[i]->address,
                           (unsigned)ls[i]->port, strerror(e));
        }
        return VSR_ERR;
    }
    return VSR_OK;
}

static int wildcard(const char *a)
{
    return a == NULL || strcmp(a, "0.0.0.0") == 0 || strcmp(a, "::") == 0;
}

/* Every listening socket is bound with SO_REUSEPORT (one per worker), so two
 * listeners given the same port would both bind and the kernel would split
 * their connections between them: refuse it instead. */
static int ports_clash(const vsr_listener_conf_t *const *ls, size_t n, vsr_buf_t *err)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (ls[i]->port == ls[j]->port &&
                (wildcard(ls[i]->address) || wildcard(ls[j]->address) || strcmp(ls[i]->address, ls[j]->address) == 0)) {
                vsr_buf_printf(err, "listeners %s and %s both use port %u\n", ls[i]->name, ls[j]->name,
                               (unsigned)ls[i]->port);
                return 1;
            }
    return 0;
}

vsr_gateway_t *vsr_gateway_start(const vsr_config_t *cfg, vsr_engine_t *engine, const vsr_gateway_opts_t *opts,
                                 vsr_buf_t *err)
{
    if (opts->extproc_port && (opts->extproc.open == NULL || opts->extproc.data == NULL ||
                               opts->extproc.end == NULL || opts->extproc.free == NULL ||
                               opts->extproc.session == NULL || opts->extproc.info == NULL)) {
        vsr_buf_printf(err, "the ext_proc listener needs its stream handler (vsr_gateway_opts_t.extproc)\n");
        return NULL;
    }
    unsigned workers = opts->workers ? opts->workers : uv_available_parallelism();
    vsr_gateway_t *gw = vsr_calloc(1, sizeof(*gw));
    gw->opts = *opts;
    gw->metrics_listener = (vsr_listener_conf_t){
        .name = (char *)"metrics",
        .address = (char *)(opts->metrics_address ? opts->metrics_address : "127.0.0.1"),
        .port = opts->metrics_port,
        .timeout_ms = VSR_DEFAULT_LISTENER_TIMEOUT_MS,
        .max_body_bytes = 1u << 16,
        .max_connections = 256,
        .max_header_bytes = VSR_DEFAULT_MAX_HEADER_BYTES,
        .max_headers = VSR_DEFAULT_MAX_HEADERS,
        .header_timeout_ms = VSR_DEFAULT_HEADER_TIMEOUT_MS,
        .body_timeout_ms = VSR_DEFAULT_BODY_TIMEOUT_MS,
    };
    gw->n_listeners = cfg->n_listeners;
    gw->listeners = vsr_calloc(cfg->n_listeners ? cfg->n_listeners : 1, sizeof(vsr_listener_conf_t));
    for (size_t i = 0; i < cfg->n_listeners; i++)
        listener_copy(&gw->listeners[i], &cfg->listeners[i]);
    if (opts->extproc_port) {
        /* ext_proc: Envoy serves the configuration's listeners; vsr serves
         * one gRPC listener, with the first listener's timeouts and limits */
        for (size_t i = 1; i < gw->n_listeners; i++)
            listener_copy_free(&gw->listeners[i]);
        gw->n_listeners = 1;
        vsr_listener_conf_t *x = &gw->listeners[0];
        vsr_free(x->name);
        vsr_free(x->address);
        vsr_free(x->tls_cert_file);
        vsr_free(x->tls_key_file);
        x->name = vsr_strdup("extproc");
        x->address = vsr_strdup(opts->extproc_address ? opts->extproc_address : "127.0.0.1");
        x->port = opts->extproc_port;
        x->tls_cert_file = x->tls_key_file = NULL;
        x->max_body_bytes = VSR_MAX(x->max_body_bytes, (uint64_t)64 << 20);
    }
    gw->management_enabled = cfg->management_enabled;
    pthread_mutex_init(&gw->snap_mu, NULL);
    vsr__gateway_cache_init(gw);
    gw->ratelimit = vsr__ratelimit_new();
    gw->keystore = vsr__keystore_new();
    vsr__gateway_replay_init(gw);
    gw->current = vsr_engine_ref(engine);
    gw->n_workers = workers;
    gw->model_stats = vsr_model_stats_new(workers, 0);
    gw->mgmt = (vsr_listener_conf_t){
        .name = (char *)"management",
        .address = vsr_strdup(cfg->management_address ? cfg->management_address : "127.0.0.1"),
        .port = cfg->management_port,
        .timeout_ms = VSR_DEFAULT_LISTENER_TIMEOUT_MS,
        /* a document bigger than the limit gets 413 before it is read */
        .max_body_bytes = cfg->management_max_document_bytes ? cfg->management_max_document_bytes
                                                             : VSR_CONFIG_DEFAULT_MAX_DOCUMENT_BYTES,
        .max_connections = 1024,
        .max_header_bytes = VSR_DEFAULT_MAX_HEADER_BYTES,
        .max_headers = VSR_DEFAULT_MAX_HEADERS,
        .header_timeout_ms = VSR_DEFAULT_HEADER_TIMEOUT_MS,
        .body_timeout_ms = VSR_DEFAULT_BODY_TIMEOUT_MS,
    };
    const vsr_listener_conf_t **all = vsr_calloc(gw->n_listeners + 2, sizeof(*all));
    size_t n_all = 0;
    for (size_t i = 0; i < gw->n_listeners; i++)
        all[n_all++] = &gw->listeners[i];
    if (gw->management_enabled)
        all[n_all++] = &gw->mgmt;
    if (gw->metrics_listener.port)
        all[n_all++] = &gw->metrics_listener;
    int in_use = 0;
    int clash = ports_clash(all, n_all, err) || probe_addresses(all, n_all, &in_use, err) != VSR_OK;
    if (opts->addr_in_use)
        *opts->addr_in_use = in_use;
    vsr_free(all);
    gw->listener_active = vsr_calloc(cfg->n_listeners + 2, sizeof(atomic_uint));
    gw->workers = vsr_calloc(workers, sizeof(worker_t *));
    pthread_mutex_init(&gw->mu, NULL);
    pthread_cond_init(&gw->cv, NULL);
    /* listeners[].tls: loaded once, shared by every worker (an SSL_CTX is thread-safe) */
    gw->listener_tls = vsr_calloc(cfg->n_listeners + 1, sizeof(vsr_tls_ctx_t *));
    if (clash) {
        gateway_free(gw);
        return NULL;
    }
    for (size_t i = 0; i < cfg->n_listeners && !opts->extproc_port; i++) {
        const vsr_listener_conf_t *lc = &cfg->listeners[i];
        if (lc->tls_cert_file == NULL)
            continue;
        vsr_buf_t msg;
        vsr_buf_init(&msg, 1024);
        gw->listener_tls[i] = vsr_tls_server_ctx_new(lc->tls_cert_file, lc->tls_key_file, &msg);
        if (gw->listener_tls[i] == NULL) {
            vsr_buf_printf(err, "listener %s: tls: %.*s\n", lc->name, (int)msg.len, msg.data ? msg.data : "");
            vsr_buf_free(&msg);
            gateway_free(gw);
            return NULL;
        }
        vsr_buf_free(&msg);
    }

    check_fd_limit(gw);
    unsigned created = 0;
    for (; created < workers; created++) {
        worker_t *w = worker_new(gw, created);
        gw->workers[created] = w;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            vsr_buf_printf(err, "cannot start worker thread %u\n", created);
            uv_close((uv_handle_t *)&w->stop_async, NULL);
            uv_close((uv_handle_t *)&w->drain_deadline, NULL);
            uv_close((uv_handle_t *)&w->drain_check, NULL);
            uv_close((uv_handle_t *)&w->trim_timer, NULL);
            uv_close((uv_handle_t *)&w->posted_check, NULL);
            uv_close((uv_handle_t *)&w->posted_idle, NULL);
            uv_close((uv_handle_t *)&w->clock_prepare, NULL);
            uv_close((uv_handle_t *)&w->clock_check, NULL);
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

static void drained_cb(uv_async_t *a)
{
    vsr_gateway_t *gw = a->data;
    if (atomic_load(&gw->n_drained) == gw->n_workers && gw->on_drained) {
        void (*fn)(void *) = gw->on_drained;
        gw->on_drained = NULL;
        fn(gw->drained_ud);
    }
}

void vsr_gateway_drain(vsr_gateway_t *gw, uv_loop_t *loop, uint64_t timeout_ms, void (*on_drained)(void *ud),
                       void *ud)
{
    if (gw->drained_async)
        return;
    atomic_store(&gw->ready, 0); /* /ready answers 503 from now on */
    gw->drain_timeout_ms = timeout_ms;
    gw->on_drained = on_drained;
    gw->drained_ud = ud;
    gw->drained_async = vsr_malloc(sizeof(uv_async_t));
    uv_async_init(loop, gw->drained_async, drained_cb);
    gw->drained_async->data = gw;
    for (unsigned i = 0; i < gw->n_workers; i++)
        send_cmd(gw->workers[i], CMD_DRAIN);
}

static void free_handle(uv_handle_t *h)
{
    vsr_free(h);
}

void vsr_gateway_stop(vsr_gateway_t *gw)
{
    if (gw == NULL)
        return;
    atomic_store(&gw->ready, 0);
    stop_and_join(gw, gw->n_workers);
    if (gw->drained_async)
        uv_close((uv_handle_t *)gw->drained_async, free_handle);
    gateway_free(gw);
}

unsigned vsr_gateway_workers(const vsr_gateway_t *gw)
{
    return gw->n_workers;
}
