/* exit_wait.c — the list of what the process waits for before it exits. */
#include "base/base.h"

#include <pthread.h>

typedef struct {
    const char *what;
    vsr_exit_wait_fn fn;
    void *arg;
} exit_wait_t;

static pthread_mutex_t ew_mu = PTHREAD_MUTEX_INITIALIZER;
static exit_wait_t ew_list[VSR_EXIT_WAITS_MAX];
static size_t ew_n;

int vsr_exit_wait_add(const char *what, vsr_exit_wait_fn fn, void *arg)
{
    pthread_mutex_lock(&ew_mu);
    int rc = VSR_ERR_TOO_BIG;
    if (ew_n < VSR_EXIT_WAITS_MAX) {
        ew_list[ew_n++] = (exit_wait_t){.what = what, .fn = fn, .arg = arg};
        rc = VSR_OK;
    }
    pthread_mutex_unlock(&ew_mu);
    return rc;
}

void vsr_exit_wait_remove(vsr_exit_wait_fn fn, void *arg)
{
    pthread_mutex_lock(&ew_mu);
    for (size_t i = 0; i < ew_n; i++)
        if (ew_list[i].fn == fn && ew_list[i].arg == arg) {
            memmove(&ew_list[i], &ew_list[i + 1], (ew_n - i - 1) * sizeof(ew_list[0]));
            ew_n--;
            break;
        }
    pthread_mutex_unlock(&ew_mu);
}

unsigned vsr_exit_wait_all(uint64_t timeout_ms, const char **busy)
{
    /* a copy: the waits run without the lock (one may take seconds) */
    exit_wait_t list[VSR_EXIT_WAITS_MAX];
    pthread_mutex_lock(&ew_mu);
    size_t n = ew_n;
    memcpy(list, ew_list, n * sizeof(list[0]));
    pthread_mutex_unlock(&ew_mu);
    uint64_t until = vsr_now_ms() + timeout_ms;
    if (busy)
        *busy = NULL;
    for (size_t i = 0; i < n; i++) {
        uint64_t now = vsr_now_ms();
        unsigned left = list[i].fn(list[i].arg, now < until ? until - now : 0);
        if (left > 0) {
            /* what comes later may be held up by what is still running here
             * (a management call holding the last reference to a store whose
             * writer is listed after it): the process is abandoning both */
            if (busy)
                *busy = list[i].what;
            return left;
        }
    }
    return 0;
}
