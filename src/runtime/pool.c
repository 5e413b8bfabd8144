/*
 * pool.c — the runtime's compute pool: N threads over one bounded FIFO.
 * An item whose deadline has passed when a thread takes it is not run
 * (expired = 1).  Finished items go back to the loop through one uv_async.
 */
#include <pthread.h>
#include <time.h>

#include "runtime-int.h"

struct vsr_rt_pool_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    vsr_rt_work_t *qhead, *qtail; /* waiting */
    size_t depth, max;
    vsr_rt_work_t *dhead, *dtail; /* finished, for the loop */
    pthread_t *threads;
    unsigned n_threads;
    int stopping;
    int stopped;
    uint64_t test_delay_ms;
    uv_async_t async;
};

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void *worker(void *arg)
{
    vsr_rt_pool_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->qhead == NULL && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping)
            break;
        vsr_rt_work_t *w = p->qhead;
        p->qhead = w->_next;
        if (p->qhead == NULL)
            p->qtail = NULL;
        p->depth--;
        pthread_mutex_unlock(&p->mu);

        w->started_us = vsr_now_us();
        if (w->deadline_us && w->started_us >= w->deadline_us) {
            w->expired = 1;
        } else {
            if (p->test_delay_ms)
                sleep_ms(p->test_delay_ms);
            w->run(w);
        }
        w->finished_us = vsr_now_us();

        pthread_mutex_lock(&p->mu);
        w->_next = NULL;
        if (p->dtail)
            p->dtail->_next = w;
        else
            p->dhead = w;
        p->dtail = w;
        uv_async_send(&p->async);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void on_async(uv_async_t *a)
{
    vsr_rt_pool_t *p = a->data;
    pthread_mutex_lock(&p->mu);
    vsr_rt_work_t *w = p->dhead;
    p->dhead = p->dtail = NULL;
    pthread_mutex_unlock(&p->mu);
    while (w) {
        vsr_rt_work_t *n = w->_next;
        w->done(w);
        w = n;
    }
}

vsr_rt_pool_t *vsr__rt_pool_new(uv_loop_t *loop, unsigned threads, size_t queue, uint64_t test_delay_ms)
{
    vsr_rt_pool_t *p = vsr_calloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->max = queue ? queue : 1;
    p->test_delay_ms = test_delay_ms;
    if (uv_async_init(loop, &p->async, on_async) != 0) {
        vsr_free(p);
        return NULL;
    }
    p->async.data = p;
    p->threads = vsr_calloc(threads ? threads : 1, sizeof *p->threads);
    for (unsigned i = 0; i < (threads ? threads : 1); i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0)
            break;
        p->n_threads++;
    }
    if (p->n_threads == 0) {
        vsr_log_error("runtime", "cannot start a compute thread");
        vsr__rt_pool_free(p);
        return NULL;
    }
    return p;
}

int vsr__rt_pool_submit(vsr_rt_pool_t *p, vsr_rt_work_t **items, size_t n)
{
    uint64_t now = vsr_now_us();
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        return VSR_ERR;
    }
    if (p->depth + n > p->max) {
        pthread_mutex_unlock(&p->mu);
        return VSR_ERR_TOO_BIG;
    }
    for (size_t i = 0; i < n; i++) {
        vsr_rt_work_t *w = items[i];
        w->enqueued_us = now;
        w->expired = w->cancelled = 0;
        w->_next = NULL;
        if (p->qtail)
            p->qtail->_next = w;
        else
            p->qhead = w;
        p->qtail = w;
    }
    p->depth += n;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return VSR_OK;
}

size_t vsr__rt_pool_depth(vsr_rt_pool_t *p)
{
    pthread_mutex_lock(&p->mu);
    size_t d = p->depth;
    pthread_mutex_unlock(&p->mu);
    return d;
}

void vsr__rt_pool_stop(vsr_rt_pool_t *p)
{
    if (p->stopped)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    p->stopped = 1;
    on_async(&p->async); /* what finished before the stop */
    vsr_rt_work_t *w = p->qhead;
    p->qhead = p->qtail = NULL;
    p->depth = 0;
    while (w) {
        vsr_rt_work_t *n = w->_next;
        w->cancelled = 1;
        w->done(w);
        w = n;
    }
}

static void free_after_close(uv_handle_t *h)
{
    vsr_rt_pool_t *p = h->data;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    vsr_free(p->threads);
    vsr_free(p);
}

void vsr__rt_pool_free(vsr_rt_pool_t *p)
{
    if (p == NULL)
        return;
    vsr__rt_pool_stop(p);
    uv_close((uv_handle_t *)&p->async, free_after_close);
}
