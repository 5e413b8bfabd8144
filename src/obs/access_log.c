/* access_log.c — JSON access log lines, written by a thread of their own.
 *
 * A worker formats its line into a buffer of its own, then holds the queue's
 * mutex only to store one pointer in a ring (O(1)); the writer thread takes
 * lines off in batches and writes them with writev.  Nothing on the worker's
 * side waits for the disk: when the ring is full, the line is dropped and
 * counted. */
#include "obs-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PATH_CAP 2048            /* bytes of the request target kept */
#define FIELD_CAP 256            /* bytes kept of every other string field */
#define LINE_CAP (64 * 1024)     /* above the largest line the caps allow (~42 KiB) */
#define FAMILIES_CAP 32          /* signal families logged a line */
#define FAMILY_NAME_CAP 64       /* bytes kept of a family's name */
#define DEFAULT_QUEUE_LINES 65536
#define MAX_QUEUE_LINES (1u << 22)
#define MAX_QUEUED_BYTES (64u << 20)
#define BATCH 64                 /* lines per writev */

typedef struct {
    char *p;
    size_t len;
} line_t;

struct vsr_access_log_s {
    int fd;
    int owns_fd; /* 0 for standard output: it outlives the log */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    line_t *ring;
    size_t cap, head, count, bytes;
    int stop;
    /* writer thread only */
    int last_errno;
    _Atomic uint64_t dropped;
};

/* ---- the writer thread ---- */

static void write_failed(vsr_access_log_t *log, int err, size_t lost)
{
    /* One message per run of the same error, not one per batch. */
    if (err != log->last_errno)
        vsr_log_warn("obs", "access log write failed: %s (%zu lines lost; more are not reported)", strerror(err),
                     lost);
    log->last_errno = err;
}

static void write_batch(vsr_access_log_t *log, struct iovec *iov, int n)
{
    int left = n;
    while (left > 0) {
        ssize_t w = writev(log->fd, iov, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* standard output may have been made non-blocking by someone else */
                struct pollfd pfd = {.fd = log->fd, .events = POLLOUT};
                (void)poll(&pfd, 1, -1);
                continue;
            }
            write_failed(log, errno, (size_t)left);
            return;
        }
        size_t done = (size_t)w;
        while (left > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            left--;
        }
        if (left > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    log->last_errno = 0;
}

static void *writer_main(void *arg)
{
    vsr_access_log_t *log = arg;
    line_t batch[BATCH];
    struct iovec iov[BATCH];
    for (;;) {
        pthread_mutex_lock(&log->mu);
        while (log->count == 0 && !log->stop)
            pthread_cond_wait(&log->cv, &log->mu);
        if (log->count == 0) { /* stopping, and everything is written */
            pthread_mutex_unlock(&log->mu);
            break;
        }
        size_t n = VSR_MIN(log->count, (size_t)BATCH);
        for (size_t i = 0; i < n; i++) {
            batch[i] = log->ring[log->head];
            log->head = log->head + 1 == log->cap ? 0 : log->head + 1;
            log->bytes -= batch[i].len;
        }
        log->count -= n;
        pthread_mutex_unlock(&log->mu);

        for (size_t i = 0; i < n; i++)
            iov[i] = (struct iovec){.iov_base = batch[i].p, .iov_len = batch[i].len};
        write_batch(log, iov, (int)n);
        for (size_t i = 0; i < n; i++)
            vsr_free(batch[i].p);
    }
    return NULL;
}

/* ---- open / close ---- */

vsr_access_log_t *vsr_access_log_open(const char *path, size_t queue_lines, vsr_buf_t *err)
{
    int fd = 1, owns = 0;
    if (path != NULL && strcmp(path, "-") != 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (err)
                vsr_buf_printf(err, "access log: cannot open %s: %s", path, strerror(errno));
            return NULL;
        }
        owns = 1;
    }
    vsr_access_log_t *log = vsr_calloc(1, sizeof(*log));
    log->fd = fd;
    log->owns_fd = owns;
    log->cap = queue_lines == 0 ? DEFAULT_QUEUE_LINES : VSR_MIN(queue_lines, (size_t)MAX_QUEUE_LINES);
    log->ring = vsr_calloc(log->cap, sizeof(line_t));
    atomic_init(&log->dropped, 0);
    pthread_mutex_init(&log->mu, NULL);
    pthread_cond_init(&log->cv, NULL);

    /* The writer takes no signals: they belong to the event loops, and a
     * reader that went away must give EPIPE here, not a SIGPIPE. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&log->thread, NULL, writer_main, log);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        if (err)
            vsr_buf_printf(err, "access log: cannot start the writer thread: %s", strerror(rc));
        pthread_cond_destroy(&log->cv);
        pthread_mutex_destroy(&log->mu);
        if (owns)
            close(fd);
        vsr_free(log->ring);
        vsr_free(log);
        return NULL;
    }
    return log;
}

void vsr_access_log_close(vsr_access_log_t *log)
{
    if (log == NULL)
        return;
    pthread_mutex_lock(&log->mu);
    log->stop = 1;
    pthread_cond_signal(&log->cv);
    pthread_mutex_unlock(&log->mu);
    pthread_join(log->thread, NULL); /* the writer drains the ring before it exits */
    if (log->owns_fd)
        close(log->fd);
    pthread_cond_destroy(&log->cv);
    pthread_mutex_destroy(&log->mu);
    vsr_free(log->ring);
    vsr_free(log);
}

uint64_t vsr_access_log_dropped(const vsr_access_log_t *log)
{
    return log ? atomic_load_explicit(&log->dropped, memory_order_relaxed) : 0;
}

/* ---- formatting ---- */

static int put_key(vsr_buf_t *b, const char *key)
{
    int rc = vsr_buf_append(b, b->len > 1 ? ",\"" : "\"", b->len > 1 ? 2 : 1);
    rc |= vsr_buf_append_cstr(b, key);
    rc |= vsr_buf_append(b, "\":", 2);
    return rc;
}

static int put_str(vsr_buf_t *b, const char *key, vsr_slice_t v, size_t cap)
{
    int rc = put_key(b, key);
    if (v.len == 0)
        return rc | vsr_buf_append(b, "null", 4);
    char clean[3 * PATH_CAP];
    size_t n = vsr__obs_utf8_clean(v, VSR_MIN(cap, (size_t)PATH_CAP), clean);
    return rc | vsr_buf_append_json_string(b, vsr_slice(clean, n));
}

static int put_u64(vsr_buf_t *b, const char *key, uint64_t v)
{
    int rc = put_key(b, key);
    return rc | vsr_buf_printf(b, "%" PRIu64, v);
}

static int put_time(vsr_buf_t *b, const char *key, double t)
{
    int rc = put_key(b, key);
    /* year 0..9999 only: the format has four digits */
    if (!(t >= 0 && t < 253402300800.0))
        return rc | vsr_buf_append(b, "null", 4);
    /* The product is inexact (…123 ms may come out as …122.9999); a microsecond
     * of slack keeps the millisecond the caller meant. */
    int64_t ms = (int64_t)floor(t * 1000.0 + 1e-3);
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    return rc | vsr_buf_printf(b, "\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\"", tm.tm_year + 1900, tm.tm_mon + 1,
                               tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* Formats the line into b; non-zero when it did not fit (the caps make that
 * impossible, but a dropped line beats a cut one). */
static int format_line(vsr_buf_t *b, const vsr_access_entry_t *e)
{
    int rc = vsr_buf_append(b, "{", 1);
    rc |= put_time(b, "start_time", e->start_time);
    rc |= put_str(b, "method", e->method, FIELD_CAP);
    rc |= put_str(b, "path", e->path, PATH_CAP);
    rc |= put_str(b, "protocol", e->protocol, FIELD_CAP);
    rc |= put_key(b, "response_code");
    rc |= vsr_buf_printf(b, "%d", e->status);
    rc |= put_str(b, "response_flags", e->response_flags, FIELD_CAP);
    rc |= put_u64(b, "bytes_received", e->bytes_received);
    rc |= put_u64(b, "bytes_sent", e->bytes_sent);
    rc |= put_u64(b, "duration", e->duration_ms);
    rc |= put_str(b, "upstream_host", e->upstream_host, FIELD_CAP);
    rc |= put_str(b, "x_request_id", e->request_id, FIELD_CAP);
    rc |= put_str(b, "user_agent", e->user_agent, FIELD_CAP);
    rc |= put_str(b, "recipe", e->recipe, FIELD_CAP);
    rc |= put_str(b, "decision", e->decision, FIELD_CAP);
    rc |= put_str(b, "selected_model", e->selected_model, FIELD_CAP);
    rc |= put_str(b, "served_model", e->served_model, FIELD_CAP);
    rc |= put_str(b, "fallback_path", e->fallback_path, FIELD_CAP);
    rc |= put_u64(b, "attempts", e->attempts);
    rc |= put_u64(b, "config_version", e->config_version);
    rc |= put_key(b, "routing_ms");
    if (isfinite(e->routing_ms))
        rc |= vsr_buf_printf(b, "%.3f", e->routing_ms > 0 ? e->routing_ms : 0.0);
    else
        rc |= vsr_buf_append(b, "null", 4);
    rc |= put_key(b, "signal_families_us");
    if (e->n_families == 0) {
        rc |= vsr_buf_append(b, "null", 4);
    } else {
        rc |= vsr_buf_append(b, "{", 1);
        for (size_t i = 0; i < e->n_families && i < FAMILIES_CAP; i++) {
            if (i)
                rc |= vsr_buf_append(b, ",", 1);
            vsr_slice_t name = vsr_slice_cstr(e->family_names[i] ? e->family_names[i] : "");
            char clean[3 * FAMILY_NAME_CAP];
            size_t cn = vsr__obs_utf8_clean(name, FAMILY_NAME_CAP, clean);
            rc |= vsr_buf_append_json_string(b, vsr_slice(clean, cn));
            rc |= vsr_buf_printf(b, ":%" PRIu64, e->family_us[i]);
        }
        rc |= vsr_buf_append(b, "}", 1);
    }
    rc |= put_key(b, "stream_events");
    rc |= e->streamed ? vsr_buf_printf(b, "%" PRIu64, e->stream_events) : vsr_buf_append(b, "null", 4);
    rc |= put_key(b, "prompt_tokens");
    rc |= e->has_usage ? vsr_buf_printf(b, "%" PRIu64, e->prompt_tokens) : vsr_buf_append(b, "null", 4);
    rc |= put_key(b, "completion_tokens");
    rc |= e->has_usage ? vsr_buf_printf(b, "%" PRIu64, e->completion_tokens) : vsr_buf_append(b, "null", 4);
    rc |= put_key(b, "looper");
    if (e->looper_algorithm) {
        rc |= vsr_buf_append_cstr(b, "{\"algorithm\":"); /* put_key would open with a comma */
        rc |= vsr_buf_append_json_string(b, vsr_slice_cstr(e->looper_algorithm));
        rc |= put_u64(b, "calls", e->looper_calls);
        rc |= put_str(b, "models", e->looper_models, FIELD_CAP);
        rc |= put_u64(b, "prompt_tokens", e->looper_prompt_tokens);
        rc |= put_u64(b, "completion_tokens", e->looper_completion_tokens);
        rc |= vsr_buf_append(b, "}", 1);
    } else {
        rc |= vsr_buf_append(b, "null", 4);
    }
    rc |= put_str(b, "cache", e->cache, FIELD_CAP);
    rc |= put_str(b, "client_protocol", e->client_protocol, FIELD_CAP);
    rc |= put_str(b, "upstream_protocol", e->upstream_protocol, FIELD_CAP);
    rc |= put_str(b, "response_guard", e->response_guard, FIELD_CAP);
    rc |= vsr_buf_append(b, "}\n", 2);
    return rc;
}

void vsr_access_log_write(vsr_access_log_t *log, const vsr_access_entry_t *e)
{
    if (log == NULL)
        return;
    vsr_buf_t b;
    vsr_buf_init(&b, LINE_CAP);
    vsr_buf_reserve(&b, 768);
    if (format_line(&b, e) != VSR_OK) {
        vsr_buf_free(&b);
        atomic_fetch_add_explicit(&log->dropped, 1, memory_order_relaxed);
        return;
    }
    /* The line's memory goes to the writer thread as it is: no copy. */
    line_t line = {b.data, b.len};
    int queued = 0;
    pthread_mutex_lock(&log->mu);
    if (log->count < log->cap && log->bytes + line.len <= MAX_QUEUED_BYTES) {
        size_t tail = log->head + log->count;
        log->ring[tail >= log->cap ? tail - log->cap : tail] = line;
        log->bytes += line.len;
        if (log->count++ == 0)
            pthread_cond_signal(&log->cv); /* the writer only ever sleeps on an empty ring */
        queued = 1;
    }
    pthread_mutex_unlock(&log->mu);
    if (!queued) {
        vsr_free(line.p);
        atomic_fetch_add_explicit(&log->dropped, 1, memory_order_relaxed);
    }
}
