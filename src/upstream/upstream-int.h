/* upstream-int.h — private to upstream/: the state workers share. */
#ifndef VSR_UPSTREAM_INT_H
#define VSR_UPSTREAM_INT_H

#include <stdatomic.h>
#include <sys/socket.h>

#include "upstream/policy.h"
#include "upstream/upstream.h"

typedef struct health_check_s health_check_t;

typedef struct {
    const vsr_model_conf_t *conf;
    vsr_endpoint_state_t *eps;          /* one per backend */
    vsr_endpoint_state_t **ep_ptrs;
    struct sockaddr_storage *addrs;     /* resolved once */
    atomic_uint active_requests;        /* calls in flight, all workers */
    atomic_uint active_retries;
    atomic_uint pending;                /* attempts waiting for a connection */
    atomic_uint connections;            /* upstream connections open, all workers */
    uint32_t max_connections;           /* 1024 */
    uint32_t max_requests;              /* 1024; 4096 once retries or ejection are enabled */
    uint32_t max_pending;               /* 1024 */
    vsr_breaker_t breaker;              /* cross-model fallback's circuit breaker of this model */
} shared_cluster_t;

struct vsr_upstream_shared_s {
    const vsr_config_t *cfg;
    shared_cluster_t *clusters;
    size_t n_clusters;
    health_check_t *checks;
    size_t n_checks;
    struct vsr_tls_ctx_s *tls_ctx;       /* when some endpoint speaks TLS */
};

int vsr__upstream_resolve(const vsr_backend_conf_t *b, struct sockaddr_storage *out, vsr_buf_t *err);

#endif
