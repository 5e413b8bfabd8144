/*
 * compute_pool.c — the runtime's compute pool: N threads over one bounded FIFO.
 * An item whose deadline has passed when a thread takes it is not run
 * (expired = 1).  Finished items go back to the loop through one uv_async.
 * A thread that takes a batchable item takes waiting items of its key
 * along (runtime-int.h), its share of them when other threads are idle.
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
    unsigned idle;                 /* threads waiting for work */
    size_t max_batch;
    uint64_t batches, batched;     /* batches of two or more, their items */
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

static size_t weight(const vsr_rt_work_t *w)
{
    return w->batch_weight ? w->batch_weight : 1;
}

static int same_batch(const vsr_rt_work_t *a, const vsr_rt_work_t *b)
{
    return b->batch_key == a->batch_key && b->prepare == a->prepare;
}

/* Under mu: unlinks into out[1..] the waiting items that go with out[0],
 * first come first, skipping those past their deadline (they are taken
 * alone, to expire).  Returns the batch's size. */
static size_t take_batch(vsr_rt_pool_t *p, vsr_rt_work_t **out, size_t cap, uint64_t now)
{
    vsr_rt_work_t *first = out[0];
    size_t m = 1;
    for (vsr_rt_work_t *w = p->qhead; w; w = w->_next)
        if (same_batch(first, w) && !(w->deadline_us && now >= w->deadline_us))
            m++;
    /* idle threads get their share of what waits */
    size_t want = (m + p->idle) / (p->idle + 1), n = 1, load = weight(first);
    vsr_rt_work_t **link = &p->qhead, *prev = NULL;
    while (*link && n < want && n < cap) {
        vsr_rt_work_t *w = *link;
        if (!same_batch(first, w) || (w->deadline_us && now >= w->deadline_us)) {
            prev = w;
            link = &w->_next;
            continue;
        }
        if (load + weight(w) > p->max_batch)
            break;
        load += weight(w);
        *link = w->_next;
        if (p->qtail == w)
            p->qtail = prev;
        p->depth--;
        out[n++] = w;
    }
    if (n > 1) {
        p->batches++;
        p->batched += n;
    }
    return n;
}

static void finish(vsr_rt_pool_t *p, vsr_rt_work_t *w)
{
    w->finished_us = vsr_now_us();
    pthread_mutex_lock(&p->mu);
    w->_next = NULL;
    if (p->dtail)
        p->dtail->_next = w;
    else
        p->dhead = w;
    p->dtail = w;
    uv_async_send(&p->async);
    pthread_mutex_unlock(&p->mu);
}

static void *worker(void *arg)
{
    vsr_rt_pool_t *p = arg;
    vsr_rt_work_t *batch[VSR_RT_MAX_BATCH];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        p->idle++;
        while (p->qhead == NULL && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        p->idle--;
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
            finish(p, w);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        if (p->test_delay_ms)
            sleep_ms(p->test_delay_ms);
        size_t n = 1;
        batch[0] = w;
        if (w->prepare && w->batch_key && p->max_batch > weight(w)) {
            uint64_t now = vsr_now_us();
            pthread_mutex_lock(&p->mu);
            n = take_batch(p, batch, p->max_batch, now);
            pthread_mutex_unlock(&p->mu);
            for (size_t i = 1; i < n; i++)
                batch[i]->started_us = now;
        }
        if (n > 1)
            w->prepare(batch, n);
        for (size_t i = 0; i < n; i++) {
            batch[i]->run(batch[i]);
            finish(p, batch[i]);
        }
        pthread_mutex_lock(&p->mu);
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

vsr_rt_pool_t *vsr__rt_pool_new(uv_loop_t *loop, unsigned threads, size_t queue, size_t max_batch,
                                uint64_t test_delay_ms)
{
    vsr_rt_pool_t *p = vsr_calloc(1, sizeof *p);
    p->max_batch = max_batch ? VSR_MIN(max_batch, (size_t)VSR_RT_MAX_BATCH) : 1;
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

void vsr__rt_pool_batches(vsr_rt_pool_t *p, uint64_t *batches, uint64_t *items)
{
    pthread_mutex_lock(&p->mu);
    *batches = p->batches;
    *items = p->batched;
    pthread_mutex_unlock(&p->mu);
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
