/*
 * fakellm entry point: command line, listening sockets, worker threads and
 * signal handling.  Every worker owns one SO_REUSEPORT socket bound to the
 * same address, so the kernel spreads connections over the loops.
 */
#include "fakellm.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

fl_config_t fl_cfg;
fl_stats_t fl_stats;

static const char usage_text[] =
    "usage: fakellm --port P [options]\n"
    "  --port P              port to listen on (0: ephemeral)\n"
    "  --host H              address to bind (default 127.0.0.1)\n"
    "  --name NAME           backend name (default fakellm-PORT)\n"
    "  --threads N           event-loop threads (default 1)\n"
    "  --port-file FILE      write the bound port to FILE (atomically)\n"
    "  --tls-cert FILE       serve HTTPS: PEM certificate (chain), with --tls-key\n"
    "  --tls-key FILE        PEM private key of --tls-cert\n"
    "process-wide behaviour (per-request x-fakellm-* headers override):\n"
    "  --status CODE         answer every request with CODE and an error body\n"
    "  --retry-after V       add Retry-After: V to answers\n"
    "  --delay-ms MS         wait MS before the response head\n"
    "  --reset-before-headers  reset (RST) connections instead of answering\n"
    "  --drop-after N        reset streams after N content events\n"
    "  --hang                never answer\n"
    "  --fail-first N        the first N requests get --fail-status\n"
    "  --fail-status CODE    status for --fail-first (default 503)\n"
    "  --chunks N            SSE content events per stream (default 5)\n"
    "  --chunk-delay-ms MS   delay between SSE events (default 0)\n"
    "  --chunk-size B        filler bytes per SSE content event (default 0)\n"
    "  --text S              completion text (default \"Hello from NAME\")\n"
    "  --health-status CODE  status of GET /health (default 200)\n"
    "  --h2-max-streams N    HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS (default 1000)\n"
    "  --logprob L           chat logprobs: the chosen tokens' logprob (default -0.1)\n"
    "  --logprob-margin M    chat logprobs: top1 - top2 (default 1.0)\n"
    "  --logprobs-missing    answer \"logprobs\": null even when asked\n"
    "per model (repeatable; MODEL is the request's \"model\"):\n"
    "  --model-text MODEL=TEXT      completion text\n"
    "  --model-delay-ms MODEL=MS    delay before the response head\n"
    "  --model-logprob MODEL=L      the chosen tokens' logprob\n"
    "  --model-status MODEL=CODE    answer with CODE and an error body\n"
    "  --model-logprob-margin MODEL=M  its logprobs' top1 - top2\n"
    "  --model-logprobs-missing MODEL=1  answer logprobs: null even when asked\n"
    "See docs/fakellm.md.\n";

static void die_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "fakellm: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_text);
    exit(2);
}

static int64_t num_arg(const char *opt, const char *v, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        die_usage("invalid value for %s", opt);
    return x;
}

static double real_arg(const char *opt, const char *v, double lo, double hi)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
        die_usage("invalid value for %s", opt);
    return x;
}

/* MODEL=VALUE of a --model-* flag: the entry of MODEL (created on first
 * use) and VALUE. */
static fl_model_opt_t *model_arg(const char *opt, const char *v, const char **value)
{
    static fl_model_opt_t table[FL_MAX_MODELS];
    const char *eq = strchr(v, '=');
    if (!eq || eq == v)
        die_usage("%s expects MODEL=VALUE", opt);
    size_t n = (size_t)(eq - v);
    *value = eq + 1;
    for (int i = 0; i < fl_cfg.nmodels; i++)
        if (strlen(table[i].model) == n && !memcmp(table[i].model, v, n))
            return &table[i];
    if (fl_cfg.nmodels == FL_MAX_MODELS)
        die_usage("%s: too many distinct models (at most 64)", opt);
    fl_model_opt_t *m = &table[fl_cfg.nmodels++];
    char *name = fl_xmalloc(n + 1);
    memcpy(name, v, n);
    name[n] = 0;
    m->model = name;
    m->delay_ms = -1;
    m->logprobs_missing = -1;
    fl_cfg.models = table;
    return m;
}

static void parse_args(int argc, char **argv)
{
    fl_config_t *c = &fl_cfg;
    c->host = "127.0.0.1";
    c->port = -1;
    c->threads = 1;
    c->drop_after = -1;
    c->fail_status = 503;
    c->chunks = 5;
    c->health_status = 200;
    c->h2_max_streams = 1000;
    c->logprob = -0.1;
    c->logprob_margin = 1.0;

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        const char *val = NULL;
        char namebuf[64];
        if (strncmp(opt, "--", 2) != 0)
            die_usage("unexpected argument %s", opt);
        const char *eq = strchr(opt, '=');
        if (eq) {
            size_t n = (size_t)(eq - opt);
            if (n >= sizeof namebuf)
                die_usage("unknown option %s", opt);
            memcpy(namebuf, opt, n);
            namebuf[n] = 0;
            val = eq + 1;
            opt = namebuf;
        }
#define FLAG(name) (!strcmp(opt, name) && !val)
#define OPT(name) (!strcmp(opt, name) && (val || (i + 1 < argc ? (val = argv[++i]) : (die_usage("%s needs a value", name), NULL))))
        if (FLAG("--help") || FLAG("-h")) {
            fputs(usage_text, stdout);
            exit(0);
        } else if (OPT("--port")) {
            c->port = (int)num_arg(opt, val, 0, 65535);
        } else if (OPT("--host")) {
            c->host = val;
        } else if (OPT("--name")) {
            c->name = val;
        } else if (OPT("--threads")) {
            c->threads = (int)num_arg(opt, val, 1, 256);
        } else if (OPT("--port-file")) {
            c->port_file = val;
        } else if (OPT("--tls-cert")) {
            c->tls_cert = val;
        } else if (OPT("--tls-key")) {
            c->tls_key = val;
        } else if (OPT("--status")) {
            c->status = (int)num_arg(opt, val, 200, 599);
        } else if (OPT("--retry-after")) {
            c->retry_after = val;
        } else if (OPT("--delay-ms")) {
            c->delay_ms = num_arg(opt, val, 0, FL_MAX_DELAY_MS);
        } else if (FLAG("--reset-before-headers")) {
            c->reset_before_headers = 1;
        } else if (OPT("--drop-after")) {
            c->drop_after = num_arg(opt, val, 0, 1000000000);
        } else if (FLAG("--hang")) {
            c->hang = 1;
        } else if (OPT("--fail-first")) {
            c->fail_first = num_arg(opt, val, 0, INT64_MAX / 2);
        } else if (OPT("--fail-status")) {
            c->fail_status = (int)num_arg(opt, val, 200, 599);
        } else if (OPT("--chunks")) {
            c->chunks = num_arg(opt, val, 0, 1000000000);
        } else if (OPT("--chunk-delay-ms")) {
            c->chunk_delay_ms = num_arg(opt, val, 0, FL_MAX_DELAY_MS);
        } else if (OPT("--chunk-size")) {
            c->chunk_size = num_arg(opt, val, 0, FL_MAX_CHUNK_SIZE);
        } else if (OPT("--text")) {
            c->text = val;
        } else if (OPT("--health-status")) {
            c->health_status = (int)num_arg(opt, val, 200, 599);
        } else if (OPT("--h2-max-streams")) {
            c->h2_max_streams = (int)num_arg(opt, val, 1, 1000000);
        } else if (OPT("--logprob")) {
            c->logprob = real_arg(opt, val, FL_LOGPROB_MIN, 0);
        } else if (OPT("--logprob-margin")) {
            c->logprob_margin = real_arg(opt, val, 0, FL_MARGIN_MAX);
        } else if (FLAG("--logprobs-missing")) {
            c->logprobs_missing = 1;
        } else if (OPT("--model-text")) {
            const char *v;
            fl_model_opt_t *m = model_arg(opt, val, &v);
            m->text = v;
        } else if (OPT("--model-delay-ms")) {
            const char *v;
            fl_model_opt_t *m = model_arg(opt, val, &v);
            m->delay_ms = num_arg(opt, v, 0, FL_MAX_DELAY_MS);
        } else if (OPT("--model-logprob")) {
            const char *v;
            fl_model_opt_t *m = model_arg(opt, val, &v);
            m->logprob = real_arg(opt, v, FL_LOGPROB_MIN, 0);
            m->has_logprob = 1;
        } else if (OPT("--model-logprob-margin")) {
            const char *v;
            fl_model_opt_t *m = model_arg(opt, val, &v);
            m->margin = real_arg(opt, v, 0, FL_MARGIN_MAX);
            m->has_margin = 1;
        } else if (OPT("--model-logprobs-missing")) {
            const char *v;
            fl_model_opt_t *m = model_arg(opt, val, &v);
            m->logprobs_missing = (int)num_arg(opt, v, 0, 1);
        } else if (OPT("--model-status")) {
            const char *v;
            fl_model_opt_t *m = model_arg(opt, val, &v);
            m->status = (int)num_arg(opt, v, 200, 599);
        } else {
            die_usage("unknown option %s", opt);
        }
#undef FLAG
#undef OPT
    }
    if (c->port < 0)
        die_usage("%s is required", "--port");
    if (!c->tls_cert != !c->tls_key)
        die_usage("%s", "--tls-cert and --tls-key go together");
    c->tls = c->tls_cert != NULL;
    if (c->retry_after)
        for (const char *p = c->retry_after; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                die_usage("invalid value for %s", "--retry-after");
}

/* The listening socket, bound and listening before any worker runs so that
 * connections made right after "listening on" is printed are queued. */
static int make_listener(const struct addrinfo *ai, int port)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        goto fail;
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) < 0 || listen(fd, 4096) < 0)
        goto fail;
    return fd;
fail:;
    int e = errno;
    close(fd);
    return -e;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* SO_REUSEPORT would let our group silently share a port with another
 * process (say, a stale fakellm from an earlier test run) and split its
 * traffic.  So first claim the port with a plain socket: that fails if
 * anything listens there, and for port 0 picks a port nobody uses.  The
 * probe is closed just before the group binds. */
static int reserve_port(const struct addrinfo *ai, int port)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_storage ss;
    if (fd < 0) {
        perror("fakellm: socket");
        exit(1);
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) < 0) {
        fprintf(stderr, "fakellm: cannot listen on %s:%d: %s\n", fl_cfg.host, port, strerror(errno));
        exit(1);
    }
    port = bound_port(fd);
    close(fd);
    return port;
}

static void write_port_file(const char *path, int port)
{
    size_t n = strlen(path) + 32;
    char *tmp = fl_xmalloc(n);
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, path) < 0) {
        fprintf(stderr, "fakellm: cannot write port file %s: %s\n", path, strerror(errno));
        unlink(tmp);
        exit(1);
    }
    free(tmp);
}

static void *worker_main(void *arg)
{
    fl_worker_run(arg);
    return NULL;
}

static void derive_config(void)
{
    fl_config_t *c = &fl_cfg;
    fl_json_str(&c->name_json, c->name, strlen(c->name));
    fl_buf_adds(&c->backend_hdr, "x-fakellm-backend: ");
    fl_buf_adds(&c->backend_hdr, c->name);
    fl_buf_adds(&c->backend_hdr, "\r\n");
    fl_buf_adds(&c->default_text, "Hello from ");
    fl_buf_adds(&c->default_text, c->name);
    atomic_store(&fl_stats.health_status, c->health_status);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    if (fl_cfg.tls && fl_tls_setup(fl_cfg.tls_cert, fl_cfg.tls_key) < 0)
        return 1;

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(fl_cfg.host, "0", &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "fakellm: cannot resolve %s: %s\n", fl_cfg.host, gai_strerror(gai));
        return 1;
    }

    int nthreads = fl_cfg.threads;
    fl_worker_t *workers = calloc((size_t)nthreads, sizeof *workers);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    if (!workers || !tids)
        abort();
    int port = reserve_port(ai, fl_cfg.port);
    for (int i = 0; i < nthreads; i++) {
        int fd = make_listener(ai, port);
        if (fd < 0) {
            fprintf(stderr, "fakellm: cannot listen on %s:%d: %s\n", fl_cfg.host, port, strerror(-fd));
            return 1;
        }
        workers[i].index = i;
        workers[i].fd = fd;
    }
    freeaddrinfo(ai);
    fl_cfg.port = port;

    char defname[32];
    if (!fl_cfg.name) {
        snprintf(defname, sizeof defname, "fakellm-%d", port);
        fl_cfg.name = defname;
    }
    derive_config();
    fl_log_init();

    /* SIGPIPE: writes to a vanished client must fail with EPIPE, not kill us.
     * SIGINT/SIGTERM are taken synchronously by this thread (sigwait), so the
     * workers inherit a mask with them blocked. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    for (int i = 0; i < nthreads; i++)
        fl_worker_init(&workers[i]);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&tids[i], NULL, worker_main, &workers[i]) != 0) {
            fprintf(stderr, "fakellm: cannot start thread\n");
            return 1;
        }
    }

    if (fl_cfg.port_file)
        write_port_file(fl_cfg.port_file, port);
    printf("listening on %s:%d\n", fl_cfg.host, port);
    fflush(stdout);

    int sig = 0;
    sigwait(&set, &sig);

    /* Close every connection and let the loops end; a worker that does not
     * finish in time is not waited for. */
    for (int i = 0; i < nthreads; i++)
        fl_worker_stop(&workers[i]);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 3;
    for (int i = 0; i < nthreads; i++) {
        if (pthread_timedjoin_np(tids[i], NULL, &deadline) != 0) {
            fprintf(stderr, "fakellm: worker %d did not stop; exiting anyway\n", i);
            fflush(stderr);
            _exit(0);
        }
    }
    free(workers);
    free(tids);
    fl_buf_free(&fl_cfg.name_json);
    fl_buf_free(&fl_cfg.backend_hdr);
    fl_buf_free(&fl_cfg.default_text);
    for (int i = 0; i < fl_cfg.nmodels; i++)
        free((char *)fl_cfg.models[i].model);
    fl_log_free();
    fl_tls_teardown();
    return 0;
}
