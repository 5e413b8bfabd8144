/* admin-int.h — private to admin/. */
#ifndef VSR_ADMIN_INT_H
#define VSR_ADMIN_INT_H

#include <pthread.h>

#include "admin/admin.h"

typedef struct admin_watch_s admin_watch_t;

struct vsr_admin_s {
    vsr_admin_hooks_t hooks;
    int audit_fd;                  /* -1: no audit log */
    pthread_mutex_t mu;            /* serializes activations; guards everything below */
    vsr_config_history_t hist;
    vsr_engine_t *active;          /* a reference to the active version */
    char last_source_hash[VSR_CONFIG_HASH_LEN]; /* the last document any source submitted */
    int last_rejected;             /* ... and whether it was NACKed */
    char last_code[32];
    admin_watch_t *watch;
};

/* "2026-01-02T03:04:05.678Z" */
void vsr__admin_rfc3339(double t, char out[64]);

#endif
