/* upstream-int.h — private to upstream/: the state workers share. */
#ifndef VSR_UPSTREAM_INT_H
#define VSR_UPSTREAM_INT_H

#include <stdatomic.h>
#include <sys/socket.h>

#include "upstream/policy.h"
#include "upstream/upstream.h"

typedef struct health_check_s health_check_t;

/* A cluster's state shared by every worker and by every configuration
 * version whose model has the same identity (name and, in order, each
 * endpoint's host, port and TLS): health, ejection, load, breaker and
 * resolved addresses survive a reload that leaves them alone.  Lives in a
 * process-wide registry; refs counts the snapshots' shared states and the
 * workers' clusters that hold it, snap_refs the snapshots only (at 0 the
 * workers drop their pools for it). */
typedef struct shared_cluster_s shared_cluster_t;
struct shared_cluster_s {
    shared_cluster_t *reg_next;         /* registry list, under the registry lock */
    uint64_t hash;                      /* of the identity */
    char *name;                         /* identity: the model's name ... */
    char **hosts;                       /* ... and each endpoint's host, port and TLS */
    uint16_t *ports;
    uint8_t *tls;
    size_t n_eps;
    atomic_uint refs;
    atomic_uint snap_refs;
    struct vsr_tls_ctx_s *tls_ctx;      /* a reference when some endpoint speaks TLS */
    vsr_endpoint_state_t *eps;          /* one per backend */
    vsr_endpoint_state_t **ep_ptrs;
    struct sockaddr_storage *addrs;     /* resolved once */
    atomic_uint active_requests;        /* calls in flight, all workers */
    atomic_uint active_retries;
    atomic_uint pending;                /* attempts waiting for a connection */
    atomic_uint connections;            /* upstream connections open, all workers */
    uint32_t max_connections;           /* 1024 */
    uint32_t max_pending;               /* 1024 */
    vsr_breaker_t breaker;              /* cross-model fallback's circuit breaker of this model */
};

typedef struct health_set_s health_set_t;

/* One configuration's view: clusters[i] is the registry's state for
 * cfg->models[i] (a reference), reused from whatever earlier version had the
 * same identity. */
struct vsr_upstream_shared_s {
    const vsr_config_t *cfg;
    shared_cluster_t **clusters;
    size_t n_clusters;
    size_t n_reused;                     /* clusters found in the registry rather than created */
    health_set_t *health;                /* the running active health checks, or NULL */
    struct vsr_tls_ctx_s *tls_ctx;       /* when some endpoint speaks TLS (a reference) */
};

/* The identity of a provider model's cluster, and whether sc has it. */
uint64_t vsr__upstream_identity_hash(const vsr_model_conf_t *m);
int vsr__upstream_identity_eq(const shared_cluster_t *sc, const vsr_model_conf_t *m);
/* The registry's cluster for m's identity with a reference taken, or NULL
 * when no live configuration has that identity. */
shared_cluster_t *vsr__upstream_registry_find(const vsr_model_conf_t *m);
void vsr__upstream_cluster_unref(shared_cluster_t *sc);

int vsr__upstream_resolve(const vsr_backend_conf_t *b, struct sockaddr_storage *out, vsr_buf_t *err);

#endif
