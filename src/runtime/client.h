/*
 * client.h — the router's client of the model runtime (private to
 * runtime/): one POST /v1/bundle per request phase, over HTTP/1.1 on the
 * runtime's Unix domain socket, with connections pooled per worker loop.
 *
 * A bundle is sent as
 *   {"tasks":[{"id":ID,TYPE:PAYLOAD},...],"options":{"deadline_ms":REMAINING}}
 * where REMAINING is what is left of the caller's deadline when the call
 * starts, and its answer ({"results":[{"id":ID,TYPE:RESULT} | {"id":ID,
 * "error":{"code","message"}}]}) is handed back per task, the result as the
 * raw JSON text of the task type's member.
 *
 * Threading: a client belongs to one libuv loop (a worker's); every
 * function and callback runs on that loop's thread.  Memory: tasks are
 * borrowed for the call to vsr_rtc_bundle only (the request is serialised
 * there); results are borrowed for the duration of done.
 */
#ifndef VSR_RUNTIME_CLIENT_H
#define VSR_RUNTIME_CLIENT_H

#include <uv.h>

#include "base/base.h"

typedef struct vsr_rtc_s vsr_rtc_t;
typedef struct vsr_rtc_call_s vsr_rtc_call_t;

typedef struct {
    const char *socket_path;   /* copied */
    unsigned max_conns;        /* connections open at once; 0 → 64.  A call past it fails at once (VSR_ERR_TOO_BIG) */
    unsigned max_idle;         /* idle connections kept for the next calls; 0 → 8 */
    size_t max_response_bytes; /* a larger answer fails the call (VSR_ERR_TOO_BIG); 0 → 16 MiB */
} vsr_rtc_opts_t;

typedef struct {
    vsr_slice_t id;            /* unique within the bundle */
    vsr_slice_t type;          /* embed, classify, ... */
    vsr_slice_t payload;       /* a JSON value, copied as is */
} vsr_rtc_task_t;

typedef struct {
    vsr_slice_t id;
    int status;                /* VSR_OK, or VSR_ERR: the runtime answered this task with an error */
    vsr_slice_t result;        /* VSR_OK: the task type's member, raw JSON */
    vsr_slice_t error_code;    /* VSR_ERR: error.code ("deadline_exceeded", ...) */
} vsr_rtc_result_t;

typedef struct {
    int http_status;           /* 0 when no answer came */
    double wall_ms;            /* the call, start to end */
    double runtime_ms;         /* the runtime's own time (server-timing: queue + compute); -1 when not given */
} vsr_rtc_timing_t;

/* The end of a call (exactly once, unless cancelled): VSR_OK with the
 * results; VSR_ERR_IO (the runtime cannot be reached, closed the
 * connection, or its answer is not HTTP), VSR_ERR_TOO_BIG (429 or 413, or
 * an answer over the limit), VSR_ERR_INVALID (an answer that is not the
 * bundle shape), VSR_ERR (the deadline passed, or any other status). */
typedef void (*vsr_rtc_done_fn)(void *ud, int status, const vsr_rtc_result_t *results, size_t n_results,
                                const vsr_rtc_timing_t *timing);

vsr_rtc_t *vsr_rtc_new(uv_loop_t *loop, const vsr_rtc_opts_t *opts);
/* Closes every connection; calls in flight end without done (as if
 * cancelled).  The memory goes once libuv has closed the handles (run the
 * loop). */
void vsr_rtc_free(vsr_rtc_t *c);

/* Starts one bundle call with the deadline deadline_ms (absolute, on
 * vsr_now_ms()).  Returns the call, or NULL when done has already run (it
 * could not start: VSR_ERR_TOO_BIG past max_conns, VSR_ERR past the
 * deadline). */
vsr_rtc_call_t *vsr_rtc_bundle(vsr_rtc_t *c, const vsr_rtc_task_t *tasks, size_t n_tasks, uint64_t deadline_ms,
                               vsr_rtc_done_fn done, void *ud);
/* Before done: the call ends, done never runs; its connection is closed
 * (an answer may be on its way). */
void vsr_rtc_cancel(vsr_rtc_call_t *call);

/* Connections open and idle (for tests and metrics). */
unsigned vsr_rtc_open_conns(const vsr_rtc_t *c);
unsigned vsr_rtc_idle_conns(const vsr_rtc_t *c);

/* ---- the supervisor: the runtime as the router's child ----
 * Starts the runtime (exe + args, e.g. `vsr runtime serve --socket PATH`)
 * with uv_spawn, probes GET /health/live on its socket, and restarts it with
 * exponential back-off when it exits or stops answering.  Its stdout and
 * stderr go to vsr's log line by line, prefixed.  Ready is true from the
 * first good probe of a child until that child fails; on_ready tells each
 * change.  Everything runs on the loop's thread; vsr_rts_ready() may be
 * read from any thread. */
typedef struct vsr_rts_s vsr_rts_t;

typedef struct {
    const char *exe;               /* copied */
    const char *const *args;       /* the arguments after exe, NULL-terminated; copied */
    const char *socket_path;       /* probed; copied */
    uint64_t probe_interval_ms;    /* 0 → 1000 (200 while starting) */
    uint64_t probe_timeout_ms;     /* 0 → 1000 */
    unsigned probe_failures;       /* consecutive failed probes that make a ready child restart; 0 → 3 */
    uint64_t start_timeout_ms;     /* a child not ready by then is restarted; 0 → 60000 */
    uint64_t backoff_initial_ms;   /* 0 → 100; doubles after each failed start ... */
    uint64_t backoff_max_ms;       /* ... up to this; 0 → 30000.  A child that became ready resets it */
    void (*on_ready)(void *ud, int ready);
    void (*log_line)(void *ud, const char *line, size_t len); /* NULL: vsr_log_info("runtime", ...) */
    void *ud;
} vsr_rts_opts_t;

vsr_rts_t *vsr_rts_start(uv_loop_t *loop, const vsr_rts_opts_t *opts);
int vsr_rts_ready(const vsr_rts_t *s);
unsigned vsr_rts_starts(const vsr_rts_t *s); /* children started so far */
int vsr_rts_pid(const vsr_rts_t *s);         /* the child's, 0 when none runs */
/* Stops the child (SIGTERM, SIGKILL after 5 s) and frees everything once
 * libuv has closed the handles (run the loop); on_ready is not called. */
void vsr_rts_stop(vsr_rts_t *s);

#endif /* VSR_RUNTIME_CLIENT_H */
