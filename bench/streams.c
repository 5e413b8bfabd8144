/*
 * streams.c — sustained SSE streams: N keep-alive connections, each posting
 * one chat request after another and reading the chunked SSE answer, so that
 * N streams are in flight for the whole hold time.  Per stream: time to the
 * first event, `data: {` events, whether `data: [DONE]` came, the largest gap
 * between two events, the status.  One libuv loop; the chunked framing and
 * the SSE lines are parsed incrementally, a byte at a time in C, from one
 * shared read buffer.  Prints one JSON object on stdout.
 *
 *   build/stream_load --body FILE [-c N] [--ramp S] [--hold S] [--events E]
 *                     [--stall-ms MS] [--timeout-ms MS] HOST:PORT
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include <uv.h>

#define HEAD_MAX (64 * 1024)
#define RESPONSE_MAX (16 * 1024 * 1024)
#define READ_BUF (256 * 1024)
#define RETRY_MS 100 /* a connection that failed waits this long before the next */

/* what ended a stream; ERR_NONE is a good one */
typedef enum {
    ERR_NONE,
    ERR_CONNECT,
    ERR_WRITE,
    ERR_RESET,
    ERR_CLOSED,
    ERR_TIMEOUT,
    ERR_STATUS,
    ERR_HEAD,
    ERR_FRAMING,
    ERR_TOO_BIG,
    ERR_LOST,
    ERR_NO_DONE,
    ERR_COUNT
} err_kind_t;

static const char *ERR_NAMES[ERR_COUNT] = {"none",    "connect", "write",   "reset",  "closed", "timeout",
                                           "status",  "head",    "framing", "too_big", "lost",  "no_done"};

/* where a connection is in its response */
typedef enum {
    P_IDLE,       /* not connected, or between streams */
    P_CONNECTING,
    P_HEAD,       /* reading the response head */
    P_CHUNK_SIZE, /* hex digits of a chunk size */
    P_CHUNK_EXT,  /* up to the LF of the size line */
    P_CHUNK_DATA,
    P_CHUNK_CR,   /* the CRLF after a chunk's data */
    P_CHUNK_LF,
    P_TRAILER,    /* trailer lines up to an empty one */
    P_LENGTH,     /* a content-length body */
    P_EOF,        /* a body delimited by the close */
    P_CLOSING
} phase_t;

typedef struct conn {
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    phase_t phase;
    int open;    /* tcp initialised and not yet closed */
    int failed;  /* the last stream was an error: reconnect after RETRY_MS */
    uint64_t retry_ns;
    int keep_alive;
    uint64_t last_io_ns; /* for the idle timeout */
    uint64_t sent_ns;    /* the request was handed to the socket */
    uint64_t last_event_ns;
    uint64_t max_gap_ns;
    uint64_t chunk_left; /* bytes of the current chunk, or of a content-length body */
    uint64_t body_bytes;
    unsigned events;
    unsigned gaps_over;
    int status;
    int done;     /* data: [DONE] seen */
    int got_first;
    int trailer_len; /* bytes on the current trailer line */
    unsigned line_pos; /* position in the current SSE line */
    char line_pfx[12];
    char *head;
    size_t head_len;
} conn_t;

static struct {
    const char *host;
    int port;
    const char *body_path;
    const char *path;
    int n;
    double ramp_s, hold_s;
    unsigned events_expected;
    double stall_ms;
    double timeout_ms;
} opt = {.host = "127.0.0.1", .path = "/v1/chat/completions", .n = 100, .ramp_s = 1, .hold_s = 6,
         .stall_ms = 200, .timeout_ms = 5000};

static uv_loop_t *loop;
static struct sockaddr_storage dest;
static char *request;
static size_t request_len;
static conn_t *conns;
static int launched;
static int open_conns;
static uint64_t t_start_ns, t_hold_end_ns;
static int holding = 1; /* new streams may start */
static uv_timer_t ramp_timer, sweep_timer;
static char read_buf[READ_BUF];

/* results */
static uint64_t streams_done, streams_ok, errors, error_kinds[ERR_COUNT];
static uint64_t stalls, stalled_streams, events_total;
static uint64_t status_count[600]; /* answers by status code (other codes at 0) */
static double *ttfb_ms, *gap_ms, *dur_ms;
static size_t n_ttfb, cap_ttfb, n_gap, cap_gap, n_dur, cap_dur;
static uint64_t max_gap_ns;

static void conn_start(conn_t *c);
static void conn_request(conn_t *c);

static void push(double **xs, size_t *n, size_t *cap, double v)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4096;
        double *p = realloc(*xs, *cap * sizeof **xs);
        if (p == NULL) {
            fprintf(stderr, "stream_load: out of memory\n");
            exit(1);
        }
        *xs = p;
    }
    (*xs)[(*n)++] = v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *xs, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return xs[i < n ? i : n - 1];
}

/* ---- a stream's end ------------------------------------------------------ */

static void on_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    c->open = 0;
    open_conns--;
    free(c->head);
    c->head = NULL;
    c->head_len = 0;
    c->phase = P_IDLE;
    if (!holding)
        return; /* the sweep ends the run once all are closed */
    if (c->failed)
        c->retry_ns = uv_hrtime() + RETRY_MS * 1000000ull; /* the sweep starts it again */
    else
        conn_start(c);
}

static void conn_close(conn_t *c)
{
    if (c->open && c->phase != P_CLOSING) {
        c->phase = P_CLOSING;
        uv_close((uv_handle_t *)&c->tcp, on_closed);
    }
}

/* Records the stream the connection was on (err: why it ended badly, or
 * ERR_NONE for a complete answer, which is then judged on its events). */
static void stream_end(conn_t *c, err_kind_t err)
{
    if (err == ERR_NONE) {
        if (c->status != 200)
            err = ERR_STATUS;
        else if (c->events < opt.events_expected)
            err = ERR_LOST;
        else if (!c->done)
            err = ERR_NO_DONE;
    }
    streams_done++;
    events_total += c->events;
    stalls += c->gaps_over;
    stalled_streams += c->gaps_over > 0;
    if (err != ERR_NONE) {
        errors++;
        error_kinds[err]++;
    } else {
        streams_ok++;
    }
    if (err == ERR_NONE)
        push(&dur_ms, &n_dur, &cap_dur, (double)(c->last_event_ns - c->sent_ns) / 1e6);
    if (c->events > 0) {
        push(&gap_ms, &n_gap, &cap_gap, (double)c->max_gap_ns / 1e6);
        if (c->max_gap_ns > max_gap_ns)
            max_gap_ns = c->max_gap_ns;
    }
    c->phase = P_IDLE;
    c->failed = err != ERR_NONE;
    if (err != ERR_NONE || !c->keep_alive || !holding)
        conn_close(c);
    else
        conn_request(c);
}

/* A failure before any stream was under way (connect): counted as a stream
 * with no events, then the connection starts over. */
static void conn_fail(conn_t *c, err_kind_t err)
{
    c->events = 0;
    c->gaps_over = 0;
    c->max_gap_ns = 0;
    c->done = 0;
    c->status = 0;
    stream_end(c, err);
}

/* ---- parsing --------------------------------------------------------------- */

static int ci_prefix(const char *line, size_t len, const char *name)
{
    size_t n = strlen(name);
    return len >= n && strncasecmp(line, name, n) == 0;
}

/* The status line and the fields that frame the body; 0, or -1 if it is not
 * an HTTP/1.x response head. */
static int parse_head(conn_t *c, const char *h, size_t len)
{
    if (len < 12 || memcmp(h, "HTTP/1.", 7) != 0)
        return -1;
    c->status = atoi(h + 9);
    status_count[c->status > 0 && c->status < 600 ? c->status : 0]++;
    c->keep_alive = h[7] == '1';
    int chunked = 0, have_length = 0;
    uint64_t length = 0;
    const char *p = memchr(h, '\n', len), *end = h + len;
    while (p != NULL && ++p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t l = (size_t)((e ? e : end) - p);
        if (ci_prefix(p, l, "transfer-encoding:"))
            chunked = memmem(p, l, "chunked", 7) != NULL;
        else if (ci_prefix(p, l, "content-length:")) {
            have_length = 1;
            length = strtoull(p + 15, NULL, 10);
        } else if (ci_prefix(p, l, "connection:")) {
            if (memmem(p, l, "close", 5) != NULL)
                c->keep_alive = 0;
        }
        p = e;
    }
    if (chunked) {
        c->phase = P_CHUNK_SIZE;
        c->chunk_left = 0;
    } else if (have_length) {
        if (length > RESPONSE_MAX)
            return -2;
        c->phase = P_LENGTH;
        c->chunk_left = length;
    } else {
        c->phase = P_EOF;
        c->keep_alive = 0;
    }
    return 0;
}

/* Body bytes (the chunks' data): SSE lines.  A line is judged by its first
 * twelve bytes, `data: {` (an event) or `data: [DONE]`. */
static void sse(conn_t *c, const char *p, size_t n, uint64_t now)
{
    const char *end = p + n;
    while (p < end) {
        if (c->line_pos >= sizeof c->line_pfx) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (nl == NULL)
                return;
            p = nl + 1;
            c->line_pos = 0;
            continue;
        }
        char ch = *p++;
        if (ch == '\n') {
            c->line_pos = 0;
            continue;
        }
        c->line_pfx[c->line_pos++] = ch;
        int event = 0;
        if (c->line_pos == 7 && memcmp(c->line_pfx, "data: {", 7) == 0) {
            c->events++;
            event = 1;
        } else if (c->line_pos == 12 && memcmp(c->line_pfx, "data: [DONE]", 12) == 0) {
            c->done = 1;
            event = 1;
        }
        if (event) {
            if (!c->got_first) {
                c->got_first = 1;
                push(&ttfb_ms, &n_ttfb, &cap_ttfb, (double)(now - c->sent_ns) / 1e6);
            } else {
                uint64_t gap = now - c->last_event_ns;
                if (gap > c->max_gap_ns)
                    c->max_gap_ns = gap;
                if ((double)gap > opt.stall_ms * 1e6)
                    c->gaps_over++;
            }
            c->last_event_ns = now;
        }
    }
}

/* Feeds read bytes through the head, the chunked framing and the SSE lines;
 * returns 1 if the stream ended (it is then recorded). */
static int feed(conn_t *c, const char *p, size_t n, uint64_t now)
{
    const char *end = p + n;
    if (c->phase == P_HEAD) {
        const char *h = p, *e;
        size_t avail = n, old = c->head_len;
        if (old == 0 && (e = memmem(p, n, "\r\n\r\n", 4)) != NULL) {
            avail = (size_t)(e - p) + 4; /* the whole head in this read: parsed in place */
            if (avail > HEAD_MAX) {
                stream_end(c, ERR_HEAD);
                return 1;
            }
        } else {
            /* a head split over reads gathers in its own buffer */
            size_t room = HEAD_MAX - old, take = n < room ? n : room;
            if (c->head == NULL && (c->head = malloc(HEAD_MAX)) == NULL) {
                stream_end(c, ERR_HEAD);
                return 1;
            }
            size_t from = old >= 3 ? old - 3 : 0;
            memcpy(c->head + old, p, take);
            c->head_len += take;
            e = memmem(c->head + from, c->head_len - from, "\r\n\r\n", 4);
            if (e == NULL) {
                if (c->head_len >= HEAD_MAX) {
                    stream_end(c, ERR_HEAD);
                    return 1;
                }
                return 0;
            }
            h = c->head;
            avail = (size_t)(e - c->head) + 4;
        }
        int rc = parse_head(c, h, avail);
        free(c->head);
        c->head = NULL;
        c->head_len = 0;
        if (rc < 0) {
            stream_end(c, rc == -2 ? ERR_TOO_BIG : ERR_HEAD);
            return 1;
        }
        p += avail - old;
        if (c->phase == P_LENGTH && c->chunk_left == 0) {
            stream_end(c, ERR_NONE);
            return 1;
        }
    }
    c->body_bytes += (uint64_t)(end - p);
    if (c->body_bytes > RESPONSE_MAX) {
        stream_end(c, ERR_TOO_BIG);
        return 1;
    }
    while (p < end) {
        switch (c->phase) {
        case P_CHUNK_SIZE: {
            char ch = *p++;
            int d = ch >= '0' && ch <= '9' ? ch - '0'
                    : (ch | 0x20) >= 'a' && (ch | 0x20) <= 'f' ? (ch | 0x20) - 'a' + 10
                                                               : -1;
            if (d >= 0) {
                c->chunk_left = c->chunk_left * 16 + (uint64_t)d;
                if (c->chunk_left > RESPONSE_MAX) {
                    stream_end(c, ERR_TOO_BIG);
                    return 1;
                }
            } else if (ch == ';' || ch == ' ' || ch == '\t' || ch == '\r') {
                c->phase = P_CHUNK_EXT;
            } else if (ch == '\n') {
                c->phase = c->chunk_left ? P_CHUNK_DATA : P_TRAILER;
                c->trailer_len = 0;
            } else {
                stream_end(c, ERR_FRAMING);
                return 1;
            }
            break;
        }
        case P_CHUNK_EXT: {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (nl == NULL)
                return 0;
            p = nl + 1;
            c->phase = c->chunk_left ? P_CHUNK_DATA : P_TRAILER;
            c->trailer_len = 0;
            break;
        }
        case P_CHUNK_DATA: {
            size_t take = (size_t)(end - p) < c->chunk_left ? (size_t)(end - p) : (size_t)c->chunk_left;
            sse(c, p, take, now);
            p += take;
            c->chunk_left -= take;
            if (c->chunk_left == 0)
                c->phase = P_CHUNK_CR;
            break;
        }
        case P_CHUNK_CR:
            if (*p == '\r') {
                p++;
                c->phase = P_CHUNK_LF;
                break;
            }
            /* a bare LF */
            __attribute__((fallthrough));
        case P_CHUNK_LF:
            if (*p++ != '\n') {
                stream_end(c, ERR_FRAMING);
                return 1;
            }
            c->phase = P_CHUNK_SIZE;
            c->chunk_left = 0;
            break;
        case P_TRAILER: {
            char ch = *p++;
            if (ch == '\n') {
                if (c->trailer_len == 0) {
                    if (p != end) { /* bytes after the answer: not ours to read */
                        stream_end(c, ERR_FRAMING);
                        return 1;
                    }
                    stream_end(c, ERR_NONE);
                    return 1;
                }
                c->trailer_len = 0;
            } else if (ch != '\r') {
                if (++c->trailer_len > HEAD_MAX) {
                    stream_end(c, ERR_HEAD);
                    return 1;
                }
            }
            break;
        }
        case P_LENGTH: {
            size_t take = (size_t)(end - p) < c->chunk_left ? (size_t)(end - p) : (size_t)c->chunk_left;
            sse(c, p, take, now);
            p += take;
            c->chunk_left -= take;
            if (c->chunk_left == 0) {
                if (p != end) {
                    stream_end(c, ERR_FRAMING);
                    return 1;
                }
                stream_end(c, ERR_NONE);
                return 1;
            }
            break;
        }
        case P_EOF:
            sse(c, p, (size_t)(end - p), now);
            return 0;
        default: /* bytes while no request is out */
            stream_end(c, ERR_FRAMING);
            return 1;
        }
    }
    return 0;
}

/* ---- libuv callbacks ------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    /* one buffer for all: libuv hands each read to on_read before it asks
     * for the next buffer, and on_read keeps nothing of it */
    buf->base = read_buf;
    buf->len = sizeof read_buf;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    if (nread == 0 || c->phase == P_CLOSING)
        return;
    uint64_t now = uv_hrtime();
    c->last_io_ns = now;
    if (nread < 0) {
        if (c->phase == P_EOF && nread == UV_EOF)
            stream_end(c, ERR_NONE);
        else if (c->phase == P_IDLE)
            conn_close(c); /* the server closed a keep-alive connection */
        else
            stream_end(c, nread == UV_EOF ? ERR_CLOSED : ERR_RESET);
        return;
    }
    feed(c, buf->base, (size_t)nread, now);
}

static void on_written(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    if (status < 0 && c->phase != P_CLOSING && status != UV_ECANCELED)
        stream_end(c, ERR_WRITE);
}

static void conn_request(conn_t *c)
{
    c->phase = P_HEAD;
    c->events = 0;
    c->gaps_over = 0;
    c->max_gap_ns = 0;
    c->done = 0;
    c->got_first = 0;
    c->status = 0;
    c->line_pos = 0;
    c->body_bytes = 0;
    c->head_len = 0;
    c->keep_alive = 1;
    uv_buf_t b = uv_buf_init(request, (unsigned)request_len);
    c->sent_ns = c->last_io_ns = uv_hrtime();
    int rc = uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (rc < 0)
        stream_end(c, ERR_WRITE);
}

static void on_connect(uv_connect_t *req, int status)
{
    conn_t *c = req->data;
    if (c->phase == P_CLOSING)
        return;
    if (status < 0) {
        conn_fail(c, ERR_CONNECT);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) {
        conn_fail(c, ERR_CONNECT);
        return;
    }
    conn_request(c);
}

static void conn_start(conn_t *c)
{
    int rc = uv_tcp_init(loop, &c->tcp);
    if (rc < 0) {
        fprintf(stderr, "stream_load: uv_tcp_init: %s\n", uv_strerror(rc));
        exit(1);
    }
    c->tcp.data = c;
    c->connect.data = c;
    c->write.data = c;
    c->open = 1;
    c->failed = 0;
    open_conns++;
    c->phase = P_CONNECTING;
    c->last_io_ns = uv_hrtime();
    rc = uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&dest, on_connect);
    if (rc < 0) {
        /* no socket (EMFILE, no port): counted, then tried again after the close */
        conn_fail(c, ERR_CONNECT);
    }
}

static void on_ramp(uv_timer_t *t)
{
    uint64_t now = uv_hrtime();
    double due = opt.ramp_s > 0 ? (double)(now - t_start_ns) / 1e9 / opt.ramp_s * opt.n : opt.n;
    while (launched < opt.n && launched < due && holding)
        conn_start(&conns[launched++]);
    if (launched == opt.n || !holding) {
        launched = opt.n; /* those never started count as done */
        uv_timer_stop(t);
    }
}

static void on_sweep(uv_timer_t *t)
{
    uint64_t now = uv_hrtime();
    if (holding && now >= t_hold_end_ns)
        holding = 0;
    uint64_t limit = (uint64_t)(opt.timeout_ms * 1e6);
    for (int i = 0; i < launched; i++) {
        conn_t *c = &conns[i];
        if (!c->open) {
            if (holding && c->failed && now >= c->retry_ns)
                conn_start(c);
            continue;
        }
        if (c->phase == P_CLOSING)
            continue;
        if (c->phase == P_IDLE) {
            if (!holding)
                conn_close(c);
        } else if (now - c->last_io_ns > limit) {
            if (c->phase == P_CONNECTING)
                conn_fail(c, ERR_TIMEOUT);
            else
                stream_end(c, ERR_TIMEOUT);
            /* conn_fail/stream_end close it; closing cancels the connect */
            conn_close(c);
        }
    }
    if (!holding && open_conns == 0 && !uv_is_closing((uv_handle_t *)t)) {
        uv_close((uv_handle_t *)&ramp_timer, NULL);
        uv_close((uv_handle_t *)t, NULL);
    }
}

/* ---- setup ----------------------------------------------------------------- */

static const char USAGE[] =
    "usage: stream_load --body FILE [options] HOST:PORT\n"
    "\n"
    "Opens N keep-alive connections to HOST:PORT, ramped evenly over the ramp time;\n"
    "each POSTs the body (HTTP/1.1, Content-Type: application/json) and reads the\n"
    "chunked SSE answer, then posts again on the same connection until the hold time\n"
    "(counted from the start of the ramp plus the ramp) is over; the streams then in\n"
    "flight are read to their end. Prints one JSON object on stdout.\n"
    "\n"
    "  --body FILE        request body (required)\n"
    "  -c, --conns N      concurrent connections, so streams in flight (default 100)\n"
    "  --ramp S           seconds over which the connections are opened (default 1)\n"
    "  --hold S           seconds of load after the ramp (default 6)\n"
    "  --events E         `data: {` events a stream must carry; fewer is a lost frame\n"
    "                     (default 0: not checked)\n"
    "  --stall-ms MS      a gap between two events longer than this is a stall (default 200)\n"
    "  --timeout-ms MS    no byte for this long ends a stream as an error (default 5000)\n"
    "  --path PATH        request path (default /v1/chat/completions)\n"
    "  -h, --help         this text\n"
    "\n"
    "A stream is an error if the status is not 200, the connection is reset or closed\n"
    "before the end, no byte comes for the timeout, it has fewer events than --events,\n"
    "no `data: [DONE]`, a head over 64 KB or an answer over 16 MB.\n"
    "\n"
    "Output: {\"n\", \"streams\", \"ok\", \"errors\", \"error_kinds\", \"statuses\" (answers\n"
    "by status code), \"stalls\" (gaps over --stall-ms), \"stalled_streams\", \"events\",\n"
    "\"ttfb_ms\" {p50, p90, p99, max} (request written to first event), \"max_gap_ms\",\n"
    "\"gap_p99_ms\" (p99 over streams of each stream's largest gap), \"duration_ms\"\n"
    "{p50, p99} (request written to the last event, good streams: how far the pace\n"
    "slipped), \"wall_s\", \"cpu_s_client\", \"nofile\"}.\n";

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t got;
    while (b != NULL && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(b, cap * 2);
            if (nb == NULL) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

static double num(const char *flag, const char *v, double lo, double hi)
{
    char *e;
    double x = v ? strtod(v, &e) : 0;
    if (v == NULL || *e != '\0' || x < lo || x > hi) {
        fprintf(stderr, "stream_load: %s wants a number from %g to %g\n", flag, lo, hi);
        exit(2);
    }
    return x;
}

static void parse_args(int argc, char **argv)
{
    const char *target = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            exit(0);
        } else if (strcmp(a, "--body") == 0 && v) {
            opt.body_path = v;
            i++;
        } else if ((strcmp(a, "-c") == 0 || strcmp(a, "--conns") == 0) && v) {
            opt.n = (int)num(a, v, 1, 1000000);
            i++;
        } else if (strcmp(a, "--ramp") == 0) {
            opt.ramp_s = num(a, v, 0, 3600);
            i++;
        } else if (strcmp(a, "--hold") == 0) {
            opt.hold_s = num(a, v, 0, 86400);
            i++;
        } else if (strcmp(a, "--events") == 0) {
            opt.events_expected = (unsigned)num(a, v, 0, 1e9);
            i++;
        } else if (strcmp(a, "--stall-ms") == 0) {
            opt.stall_ms = num(a, v, 0, 1e9);
            i++;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            opt.timeout_ms = num(a, v, 1, 1e9);
            i++;
        } else if (strcmp(a, "--path") == 0 && v) {
            opt.path = v;
            i++;
        } else if (a[0] != '-' && target == NULL) {
            target = a;
        } else {
            fprintf(stderr, "stream_load: unknown or incomplete option %s\n%s", a, USAGE);
            exit(2);
        }
    }
    if (target == NULL || opt.body_path == NULL) {
        fputs(USAGE, stderr);
        exit(2);
    }
    static char host[256];
    const char *colon = strrchr(target, ':');
    if (colon == NULL || (size_t)(colon - target) >= sizeof host) {
        fprintf(stderr, "stream_load: %s is not HOST:PORT\n", target);
        exit(2);
    }
    memcpy(host, target, (size_t)(colon - target));
    host[colon - target] = '\0';
    if (host[0] != '\0')
        opt.host = host;
    opt.port = (int)num("port", colon + 1, 1, 65535);
}

static int raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return -1;
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
    return (int)r.rlim_cur;
}

static void print_results(double wall_s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                 (double)ru.ru_stime.tv_usec / 1e6;
    qsort(ttfb_ms, n_ttfb, sizeof *ttfb_ms, cmp_double);
    qsort(gap_ms, n_gap, sizeof *gap_ms, cmp_double);
    qsort(dur_ms, n_dur, sizeof *dur_ms, cmp_double);
    printf("{\"n\":%d,\"streams\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"error_kinds\":{", opt.n,
           streams_done, streams_ok, errors);
    int first = 1;
    for (int k = 1; k < ERR_COUNT; k++) {
        if (error_kinds[k]) {
            printf("%s\"%s\":%" PRIu64, first ? "" : ",", ERR_NAMES[k], error_kinds[k]);
            first = 0;
        }
    }
    printf("},\"statuses\":{");
    first = 1;
    for (int k = 0; k < 600; k++) {
        if (status_count[k]) {
            printf("%s\"%d\":%" PRIu64, first ? "" : ",", k, status_count[k]);
            first = 0;
        }
    }
    printf("},\"stalls\":%" PRIu64 ",\"stalled_streams\":%" PRIu64 ",\"events\":%" PRIu64
           ",\"ttfb_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f},\"max_gap_ms\":%.3f,"
           "\"gap_p99_ms\":%.3f,\"duration_ms\":{\"p50\":%.1f,\"p99\":%.1f},\"wall_s\":%.3f,"
           "\"cpu_s_client\":%.3f,\"nofile\":%d}\n",
           stalls, stalled_streams, events_total, pct(ttfb_ms, n_ttfb, 0.5), pct(ttfb_ms, n_ttfb, 0.9),
           pct(ttfb_ms, n_ttfb, 0.99), n_ttfb ? ttfb_ms[n_ttfb - 1] : 0.0, (double)max_gap_ns / 1e6,
           pct(gap_ms, n_gap, 0.99), pct(dur_ms, n_dur, 0.5), pct(dur_ms, n_dur, 0.99), wall_s, cpu,
           raise_nofile());
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    int nofile = raise_nofile();
    if (nofile > 0 && opt.n + 16 > nofile) {
        fprintf(stderr, "stream_load: RLIMIT_NOFILE is %d, too low for %d connections\n", nofile, opt.n);
        return 2;
    }
    size_t body_len;
    char *body = read_file(opt.body_path, &body_len);
    if (body == NULL) {
        fprintf(stderr, "stream_load: cannot read %s: %s\n", opt.body_path, strerror(errno));
        return 2;
    }
    char head[1024];
    int hl = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                      "Accept: text/event-stream\r\nContent-Length: %zu\r\n\r\n",
                      opt.path, opt.host, opt.port, body_len);
    if (hl < 0 || (size_t)hl >= sizeof head) {
        fprintf(stderr, "stream_load: path or host too long\n");
        return 2;
    }
    request_len = (size_t)hl + body_len;
    request = malloc(request_len);
    if (request == NULL)
        return 1;
    memcpy(request, head, (size_t)hl);
    memcpy(request + hl, body, body_len);
    free(body);

    int rc = uv_ip4_addr(opt.host, opt.port, (struct sockaddr_in *)&dest);
    if (rc < 0 && uv_ip6_addr(opt.host, opt.port, (struct sockaddr_in6 *)&dest) < 0) {
        fprintf(stderr, "stream_load: %s is not a numeric address\n", opt.host);
        return 2;
    }
    conns = calloc((size_t)opt.n, sizeof *conns);
    if (conns == NULL)
        return 1;
    loop = uv_default_loop();
    t_start_ns = uv_hrtime();
    t_hold_end_ns = t_start_ns + (uint64_t)((opt.ramp_s + opt.hold_s) * 1e9);
    uv_timer_init(loop, &ramp_timer);
    uv_timer_init(loop, &sweep_timer);
    uv_timer_start(&ramp_timer, on_ramp, 0, 1);
    uv_timer_start(&sweep_timer, on_sweep, 50, 50);
    uv_run(loop, UV_RUN_DEFAULT);
    double wall = (double)(uv_hrtime() - t_start_ns) / 1e9;
    print_results(wall);
    free(conns);
    free(request);
    free(ttfb_ms);
    free(gap_ms);
    free(dur_ms);
    return 0;
}
