/* admin-int.h — private to admin/. */
#ifndef VSR_ADMIN_INT_H
#define VSR_ADMIN_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "admin/admin.h"

typedef struct admin_watch_s admin_watch_t;
typedef struct vsr_admin_k8s_s vsr_admin_k8s_t;

typedef struct admin_auth_s admin_auth_t;

struct vsr_admin_s {
    vsr_admin_hooks_t hooks;
    int audit_fd;                  /* -1: no audit log */
    char *token;                   /* the management API's bearer token; NULL = none */
    admin_auth_t *auth;            /* management_api.auth mode bearer (admin_auth.c); NULL = disabled */
    atomic_int refs;               /* the owner's and one per job thread */
    atomic_uint jobs;              /* management calls on their threads now */
    atomic_int watch_busy;         /* a thread is applying the file ... */
    atomic_int watch_again;        /* ... and should read it once more */
    pthread_mutex_t mu;            /* serializes activations (held for a whole apply) */
    pthread_mutex_t state_mu;      /* guards what answers read, below; held briefly, never across an apply */
    vsr_config_history_t hist;     /* written under both locks */
    vsr_engine_t *active;          /* a reference to the active version; written under both locks */
    char last_source_hash[VSR_CONFIG_HASH_LEN]; /* the last document any source submitted */
    int last_rejected;             /* ... and whether it was NACKed */
    char last_code[32];
    char **env_names;              /* *_env values the configuration files named (under mu) */
    size_t n_env_names;
    pthread_mutex_t hook_mu;       /* guards closed; held while activate and outcome run */
    int closed;                    /* vsr_admin_close: no hook runs any more */
    pthread_mutex_t live_mu;       /* guards live; live_cv is signalled as each thread ends */
    pthread_cond_t live_cv;
    unsigned live;                 /* threads started by vsr__admin_spawn and still running */
    admin_watch_t *watch;
    vsr_admin_k8s_t *k8s;          /* the Kubernetes source (admin_k8s.c), when started */
    /* more endpoints (vsr_admin_set_extra), set before the listener starts */
    int (*extra_owns)(vsr_slice_t target);
    void (*extra_handle)(void *ud, vsr_engine_t *active, const vsr_admin_request_t *req, vsr_admin_response_t *resp);
    void *extra_ud;
};

/* management_api.auth mode bearer (admin_auth.c).  vsr__admin_authorize:
 * 1 when the request may go on, else 0 with r filled (401 or 403). */
int vsr__admin_authorize(const vsr_admin_t *a, const vsr_admin_access_t *req, vsr_admin_response_t *r);
void vsr__admin_auth_free(admin_auth_t *auth);
/* The token of "authorization: Bearer TOKEN" (scheme case-insensitive, white
 * space trimmed); p NULL when the value has no such form (admin_http.c). */
vsr_slice_t vsr__admin_bearer(vsr_slice_t authorization);
/* r filled with a JSON error answer (admin_http.c). */
void vsr__admin_refuse(vsr_admin_response_t *r, int status, const char *type, const char *code, const char *msg);

/* Drops a reference; the last one frees the admin. */
void vsr__admin_unref(vsr_admin_t *a);
/* Runs fn(arg) on a new detached thread holding a reference to a; fn's
 * last act is vsr__admin_thread_end. */
int vsr__admin_spawn(vsr_admin_t *a, void *(*fn)(void *), void *arg);
/* A spawned thread's end: counted out (vsr_admin_wait), then its reference. */
void vsr__admin_thread_end(vsr_admin_t *a);
int vsr__admin_closed(vsr_admin_t *a);

/* "2026-01-02T03:04:05.678Z" */
void vsr__admin_rfc3339(double t, char out[64]);

#endif
