/*
 * dns.c — backend host names looked up again while vsr runs, as Envoy's
 * LOGICAL_DNS clusters do (the reference's rendered Envoy uses them for
 * every named backend).
 *
 * A version's shared state resolves each name once when it is built
 * (upstream.c); a name that does not resolve then leaves its endpoint
 * "unresolved": out of rotation, and /ready says so.  This file keeps
 * looking: one timer on the control thread's loop ticks every
 * VSR_DNS_RETRY_MS; an endpoint is looked up on a tick when it has not
 * resolved yet, or when its last lookup is VSR_DNS_REFRESH_MS old.  The
 * lookup runs on libuv's thread pool (uv_getaddrinfo), never on a worker or
 * blocking the control loop; its result is written under the cluster's
 * addr_mu, which connects read through vsr__upstream_addr().  A failed
 * lookup keeps the last good address (Envoy does the same).  At most one
 * lookup per endpoint is in flight.
 *
 * Threading: start, stop and every callback run on the control loop.  Each
 * job holds a reference on its shared cluster, so a version freed while a
 * lookup is in flight leaves nothing dangling; the set's memory goes with
 * the last callback after stop.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>

#include "upstream/upstream-int.h"

typedef struct {
    dns_set_t *set;
    shared_cluster_t *sc;   /* a reference */
    size_t j;               /* the endpoint */
    char *model;            /* for logs */
    uv_getaddrinfo_t req;
    uint64_t last_ms;       /* when the last lookup finished, 0 = never */
    int in_flight;
} dns_job_t;

struct dns_set_s {
    uv_timer_t timer;
    dns_job_t *jobs;
    size_t n;
    unsigned pending;       /* lookups in flight + the timer's close */
    int stopped;
};

static void set_put(dns_set_t *set)
{
    if (--set->pending > 0)
        return;
    for (size_t i = 0; i < set->n; i++) {
        vsr__upstream_cluster_unref(set->jobs[i].sc);
        vsr_free(set->jobs[i].model);
    }
    vsr_free(set->jobs);
    vsr_free(set);
}

static void resolved_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    dns_job_t *job = req->data;
    dns_set_t *set = job->set;
    job->in_flight = 0;
    job->last_ms = vsr_now_ms();
    if (!set->stopped) {
        shared_cluster_t *sc = job->sc;
        vsr_endpoint_state_t *ep = &sc->eps[job->j];
        int was_unresolved = atomic_load(&ep->unresolved);
        if (status == 0 && res != NULL && res->ai_addrlen <= sizeof(struct sockaddr_storage)) {
            pthread_mutex_lock(&sc->addr_mu);
            memset(&sc->addrs[job->j], 0, sizeof(sc->addrs[job->j]));
            memcpy(&sc->addrs[job->j], res->ai_addr, res->ai_addrlen);
            pthread_mutex_unlock(&sc->addr_mu);
            if (was_unresolved) {
                atomic_store(&ep->unresolved, 0);
                vsr_log_info("upstream", "model %s: backend host \"%s\" resolved; the endpoint is available",
                             job->model, sc->hosts[job->j]);
            }
        } else if (was_unresolved) {
            vsr_log_debug("upstream", "model %s: backend host \"%s\" still does not resolve: %s", job->model,
                          sc->hosts[job->j], status ? uv_strerror(status) : "no address");
        } else {
            vsr_log_debug("upstream", "model %s: re-resolving \"%s\" failed (%s); keeping the last address",
                          job->model, sc->hosts[job->j], status ? uv_strerror(status) : "no address");
        }
    }
    if (res != NULL)
        uv_freeaddrinfo(res);
    set_put(set);
}

static void tick_cb(uv_timer_t *t)
{
    dns_set_t *set = t->data;
    uint64_t now = vsr_now_ms();
    for (size_t i = 0; i < set->n; i++) {
        dns_job_t *job = &set->jobs[i];
        int unresolved = atomic_load(&job->sc->eps[job->j].unresolved);
        if (job->in_flight || (!unresolved && job->last_ms && now - job->last_ms < VSR_DNS_REFRESH_MS))
            continue;
        struct addrinfo hints;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        char port[8];
        snprintf(port, sizeof(port), "%u", (unsigned)job->sc->ports[job->j]);
        job->req.data = job;
        if (uv_getaddrinfo(t->loop, &job->req, resolved_cb, job->sc->hosts[job->j], port, &hints) == 0) {
            job->in_flight = 1;
            set->pending++;
        }
    }
}

static void timer_closed(uv_handle_t *h)
{
    set_put(h->data);
}

dns_set_t *vsr__dns_start(vsr_upstream_shared_t *sh, uv_loop_t *loop)
{
    size_t n = 0;
    for (size_t i = 0; i < sh->n_clusters; i++)
        for (size_t j = 0; j < sh->clusters[i]->n_eps; j++)
            n += sh->clusters[i]->named[j];
    if (n == 0)
        return NULL;
    dns_set_t *set = vsr_calloc(1, sizeof(*set));
    set->jobs = vsr_calloc(n, sizeof(dns_job_t));
    for (size_t i = 0; i < sh->n_clusters; i++) {
        shared_cluster_t *sc = sh->clusters[i];
        for (size_t j = 0; j < sc->n_eps; j++) {
            if (!sc->named[j])
                continue;
            dns_job_t *job = &set->jobs[set->n++];
            job->set = set;
            job->sc = sc;
            job->j = j;
            job->model = vsr_strdup(sc->name);
            /* resolved when the version was built: the first refresh is a full period away */
            job->last_ms = atomic_load(&sc->eps[j].unresolved) ? 0 : vsr_now_ms();
            vsr__upstream_cluster_ref(sc);
        }
    }
    set->pending = 1; /* the timer */
    uv_timer_init(loop, &set->timer);
    set->timer.data = set;
    uv_timer_start(&set->timer, tick_cb, VSR_DNS_RETRY_MS, VSR_DNS_RETRY_MS);
    return set;
}

void vsr__dns_stop(dns_set_t *set)
{
    if (set == NULL)
        return;
    set->stopped = 1;
    for (size_t i = 0; i < set->n; i++)
        if (set->jobs[i].in_flight)
            uv_cancel((uv_req_t *)&set->jobs[i].req); /* its callback still runs (UV_ECANCELED) */
    uv_close((uv_handle_t *)&set->timer, timer_closed);
}

size_t vsr_upstream_unresolved(vsr_upstream_shared_t *sh, vsr_buf_t *names, size_t max_names)
{
    size_t n = 0;
    for (size_t i = 0; sh != NULL && i < sh->n_clusters; i++) {
        shared_cluster_t *sc = sh->clusters[i];
        const vsr_model_conf_t *m = vsr__upstream_cluster_model(sh->cfg, i);
        for (size_t j = 0; j < sc->n_eps; j++) {
            if (!atomic_load(&sc->eps[j].unresolved))
                continue;
            if (names != NULL && n < max_names && j < m->n_backends) {
                char one[512];
                int len = snprintf(one, sizeof(one), "%s/%s (%s)", m->name, m->backends[j].name, sc->hosts[j]);
                if (n)
                    vsr_buf_append_cstr(names, ",");
                vsr_buf_append_json_string(names, vsr_slice(one, len < 0 ? 0 : VSR_MIN((size_t)len, sizeof(one) - 1)));
            }
            n++;
        }
    }
    return n;
}
