/* runtime-int.h — private to src/runtime/. */
#ifndef VSR_RUNTIME_INT_H
#define VSR_RUNTIME_INT_H

#include <uv.h>

#include "json/json.h"
#include "runtime.h"

/* The "input" member of an embed task or an /v1/embeddings body (token t of
 * j): a string or an array of 1 to VSR_RT_MAX_INPUTS strings, none empty,
 * unescaped into pool.  VSR_OK, or VSR_ERR_INVALID with *why (static). */
int vsr__rt_parse_inputs(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, vsr_slice_t **out, size_t *n,
                         const char **why);

/* FNV-1a 64 of model and text (a 0xff byte between them). */
uint64_t vsr__rt_hash(vsr_slice_t model, vsr_slice_t text);

/* Base64 (RFC 4648, padded) of n bytes, appended to b. */
int vsr__rt_base64(vsr_buf_t *b, const void *p, size_t n);

/* A float as JSON: shortest "%.9g" form (round-trips a float32); NaN and
 * infinities (which JSON cannot hold) as 0. */
int vsr__rt_append_float(vsr_buf_t *b, float f);

/* ---- the compute pool ----
 * N threads run work items FIFO.  submit() is called on the loop thread;
 * run() on a pool thread; done() back on the loop thread (through
 * uv_async), in completion order.  A pool never holds more than `queue`
 * items waiting.
 *
 * Batching: an item with a batch_key and a prepare() may take waiting items
 * of the same key along when a thread takes it, up to max_batch weight in
 * all (the first item counts whatever its weight).  The thread calls
 * prepare() once on the batch (the first item first), then each item's
 * run() and done() as if it had been taken alone.  Only waiting work is
 * taken, never waited for, so a lone item runs at once; with idle threads
 * the waiting items are shared out between them instead.  prepare() may do
 * nothing: run() must not depend on it. */
#define VSR_RT_MAX_BATCH 256 /* the most max_batch can be */
typedef struct vsr_rt_work_s vsr_rt_work_t;
struct vsr_rt_work_s {
    void (*run)(vsr_rt_work_t *w);   /* pool thread */
    void (*done)(vsr_rt_work_t *w);  /* loop thread */
    void (*prepare)(vsr_rt_work_t **items, size_t n); /* pool thread; NULL: never batched */
    const void *batch_key;           /* items of one key may share a prepare(); NULL: never batched */
    size_t batch_weight;             /* what it adds to a batch (its texts); 0 counts as 1 */
    uint64_t deadline_us;            /* vsr_now_us() clock; past it when dequeued → run not called */
    uint64_t enqueued_us, started_us, finished_us;
    int expired;                     /* set when dropped for its deadline */
    int cancelled;                   /* set when the pool stopped before it ran */
    vsr_rt_work_t *_next;
};
typedef struct vsr_rt_pool_s vsr_rt_pool_t;

/* threads >= 1, queue >= 1, max_batch >= 1 (1: no batching).  Starts the
 * threads.  NULL on failure.  test_delay_ms: each thread sleeps that long
 * after taking an item, before taking its batch (a test knob). */
vsr_rt_pool_t *vsr__rt_pool_new(uv_loop_t *loop, unsigned threads, size_t queue, size_t max_batch,
                                uint64_t test_delay_ms);
/* Queues all n items or none: VSR_OK, or VSR_ERR_TOO_BIG when they do not
 * fit (the queue holds `queue` waiting items), VSR_ERR when stopped. */
int vsr__rt_pool_submit(vsr_rt_pool_t *p, vsr_rt_work_t **items, size_t n);
size_t vsr__rt_pool_depth(vsr_rt_pool_t *p);
/* Batches of two or more items prepared so far, and the items in them. */
void vsr__rt_pool_batches(vsr_rt_pool_t *p, uint64_t *batches, uint64_t *items);
/* Stops the threads after their current item; waiting items get done()
 * with cancelled = 1 (from within this call).  Idempotent. */
void vsr__rt_pool_stop(vsr_rt_pool_t *p);
/* Stops, then frees; the loop must still run uv_close callbacks after. */
void vsr__rt_pool_free(vsr_rt_pool_t *p);

#endif /* VSR_RUNTIME_INT_H */
