/*
 * obs — observability: the access log and the metrics registry.
 *
 * Access log: one JSON line per request, written off the worker threads: a
 * worker formats its line into a bounded queue and a writer thread drains
 * it to standard output (or a file).  When the queue is full the line is
 * dropped and counted — a slow disk never blocks a request.  Lines never
 * hold prompt or completion text, nor credentials.
 *
 * Metrics: per-worker counters and histograms (no locks and no atomic
 * read-modify-write on the request path: plain relaxed loads and stores);
 * a scrape sums every worker's shard and renders Prometheus
 * text.  Label sets are bounded: status class, model, decision, outcome —
 * never request ids.
 */
#ifndef VSR_OBS_H
#define VSR_OBS_H

#include "base/base.h"

/* ---- access log ---- */

typedef struct vsr_access_log_s vsr_access_log_t;

/* path NULL or "-" = standard output.  queue_lines bounds the queue (0 =
 * 65536; at most 4194304).  NULL with a message in err when the file cannot be
 * opened.  A file is opened for appending and created (0644) if missing.
 * The queue also holds at most 64 MiB of lines, whatever queue_lines says.
 * Each string field is cut to 256 bytes (the path to 2048), never inside a
 * UTF-8 sequence; bytes that are not valid UTF-8 become U+FFFD. */
vsr_access_log_t *vsr_access_log_open(const char *path, size_t queue_lines, vsr_buf_t *err);
/* Flushes what is queued, stops the writer thread, closes the file
 * (never standard output).  Waits for the writes: when nobody reads the pipe
 * the log goes to, it waits for as long.  NULL is a no-op. */
void vsr_access_log_close(vsr_access_log_t *log);
/* Lines dropped because the queue was full.  Lines that a failed write
 * loses are not counted here: they are reported in the error log. */
uint64_t vsr_access_log_dropped(const vsr_access_log_t *log);

/* One request.  Slices are borrowed for the call only (copied into the line). */
typedef struct {
    double start_time;          /* wall clock, seconds since the epoch */
    vsr_slice_t method, path, protocol; /* protocol: "HTTP/1.1" */
    int status;                 /* 0 when no response was sent */
    vsr_slice_t response_flags; /* Envoy-style: "-", "UF" (connect failure), "UT" (timeout), "UC" (reset), "UO" (overflow), "DC" (client left), "LR" (local reply) */
    uint64_t bytes_received;    /* request body bytes */
    uint64_t bytes_sent;        /* response bytes written (head and body) */
    uint64_t duration_ms;
    vsr_slice_t upstream_host;  /* "host:port" of the endpoint that answered, or empty */
    vsr_slice_t request_id;
    vsr_slice_t user_agent;
    /* vsr's own */
    vsr_slice_t recipe, decision, selected_model, served_model;
    vsr_slice_t fallback_path;  /* "a,b" or empty */
    unsigned attempts;
    uint64_t config_version;
    double routing_ms;
} vsr_access_entry_t;

/* Formats e as one JSON line and queues it; never blocks.  Thread-safe.
 * log NULL (no access log) is a no-op.  Empty slices are logged as null, and
 * so are a start_time before 1970 or past 9999 and a routing_ms that is not
 * a finite number (a negative one is logged as 0.000). */
void vsr_access_log_write(vsr_access_log_t *log, const vsr_access_entry_t *e);

/* ---- metrics ---- */

typedef struct vsr_metrics_s vsr_metrics_t;   /* the registry: one per process */
typedef struct vsr_metrics_shard_s vsr_metrics_shard_t; /* one per worker thread */

/* The functions below accept a NULL registry or shard and do nothing, so a
 * caller without metrics needs no checks.  Label values (model, decision,
 * outcome, endpoint; "from" and "to" are models) are cut to 256 bytes;
 * each kind keeps at most 256 distinct values for the life of the registry,
 * and the values that come after are counted under "other". */
vsr_metrics_t *vsr_metrics_new(unsigned n_shards);
void vsr_metrics_free(vsr_metrics_t *m);
/* Worker i's shard: written only by that worker's thread. */
vsr_metrics_shard_t *vsr_metrics_shard(vsr_metrics_t *m, unsigned i);

/* A finished request (status 0 = no response; model/decision may be empty).
 * status_class is "1xx".."5xx", "none" for 0, "other" past 599.  A duration
 * that is negative (or not a finite number) is not observed: pass -1 for
 * routing_seconds when the request was not routed and for upstream_seconds
 * when no upstream attempt was made. */
void vsr_metrics_request(vsr_metrics_shard_t *s, int status, vsr_slice_t model, vsr_slice_t decision,
                         double total_seconds, double routing_seconds, double upstream_seconds);
/* Time to the first response byte of a stream (negative: not observed). */
void vsr_metrics_ttfb(vsr_metrics_shard_t *s, vsr_slice_t model, double seconds);
/* One upstream attempt: outcome "ok", "5xx", "4xx", "connect_failure", "reset", "timeout", "protocol", "overflow". */
void vsr_metrics_attempt(vsr_metrics_shard_t *s, vsr_slice_t model, const char *outcome);
void vsr_metrics_retry(vsr_metrics_shard_t *s, vsr_slice_t model);
void vsr_metrics_fallback(vsr_metrics_shard_t *s, vsr_slice_t from_model, vsr_slice_t to_model);
void vsr_metrics_overflow(vsr_metrics_shard_t *s, vsr_slice_t model);
/* Gauges owned by the shard: add +1 / -1. */
void vsr_metrics_connections(vsr_metrics_shard_t *s, int delta);
void vsr_metrics_active_requests(vsr_metrics_shard_t *s, int delta);

/* Process-wide values set from the control thread (atomics; the
 * per-endpoint values are behind a mutex, so any thread may set them). */
void vsr_metrics_set_config_version(vsr_metrics_t *m, uint64_t version);
void vsr_metrics_set_endpoint_health(vsr_metrics_t *m, vsr_slice_t model, vsr_slice_t endpoint, int healthy,
                                     int ejected);
void vsr_metrics_count_ejection(vsr_metrics_t *m, vsr_slice_t model);
/* A configuration became active (vsr_config_activations_total). */
void vsr_metrics_count_activation(vsr_metrics_t *m);
/* A configuration document was submitted: result "ack" (activated), "nack"
 * (rejected) or "unchanged" (vsr_config_updates_total{result}). */
void vsr_metrics_count_config_update(vsr_metrics_t *m, const char *result);

/* Renders every metric (shards summed) in the Prometheus text format 0.0.4,
 * appended to out (when out's cap is reached, only whole lines are kept).
 * Safe while workers write (a scrape may see a counter mid-update, never a
 * torn value: counters are 64-bit aligned and written with relaxed atomics)
 * and from several threads at once.  Families with labels appear once they
 * have a series; the others always.  Series are sorted by label value. */
void vsr_metrics_render(vsr_metrics_t *m, vsr_buf_t *out);

#endif /* VSR_OBS_H */
