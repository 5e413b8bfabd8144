/*
 * main.c — the command line and the composition root: the only place that
 * wires configuration, gateway and upstream together.
 *
 *   vsr serve [--config FILE] [--workers N] [--gateway standalone] [--log-level LEVEL]
 *   vsr config validate FILE
 *   vsr config print FILE [--redact]
 *   vsr config migrate FILE [-o OUT]
 *   vsr eval --prompt TEXT [--json] [--endpoint URL | --config FILE]   (docs/cli.md)
 *   vsr runtime serve --socket PATH | --listen ADDR:PORT [...]   (docs/runtime.md)
 *   vsr version
 *
 * Exit codes (nothing was started unless 0): 0 success, 1 runtime failure
 * (e.g. a TLS or tracing set-up that fails), 2 the configuration is invalid,
 * 3 another process already listens on one of the addresses, 64 a usage
 * error (EX_USAGE of sysexits.h).
 */
#include <errno.h>
#if defined(__GLIBC__)
#include <malloc.h>
#include <openssl/rand.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "admin/admin.h"
#include "base/base.h"
#include "config/config.h"
#include "extproc/extproc.h"
#include "gateway/gateway.h"
#include "obs/obs.h"
#include "routing/routing.h"
#include "runtime/runtime.h"
#include "envoy.h"
#include "eval.h"
#include "signals/signals.h"
#include "store/store.h"
#include "upstream/upstream.h"

#define VSR_VERSION "0.1.0"
#define DEFAULT_CONFIG "config/config.yaml"
/* how long the end waits, in all, for the threads on the exit list (base.h):
 * 10 s for the management calls and 6 s more for the router replay writers */
#define EXIT_WAIT_MS 16000

enum { EXIT_RUNTIME = 1, EXIT_CONFIG = 2, EXIT_IN_USE = 3, EXIT_USAGE = 64 };

static const char serve_synopsis[] =
    "usage: vsr serve [--config FILE] [--workers N] [--gateway standalone|extproc] [--log-level LEVEL]\n"
    "                 [--extproc-listen ADDR:PORT]\n"
    "                 [--drain-timeout DURATION] [--access-log PATH|-|off] [--metrics-listen ADDR:PORT|off]\n"
    "                 [--config-audit-log PATH] [--config-watch on|off]\n"
    "                 [--management-token-file PATH | --management-token-env NAME]\n";
static const char config_synopsis[] = "       vsr config validate FILE [--gateway standalone|extproc] [--strict]\n"
                                      "       vsr config print FILE [--redact]\n"
                                      "       vsr config migrate FILE [-o OUT]\n";
static const char serve_help[] =
    "  serve            run the router: an OpenAI-compatible endpoint and reverse proxy\n"
    "   general (every gateway mode):\n"
    "    --config FILE  the v0.3 configuration document (default " DEFAULT_CONFIG ")\n"
    "    --workers N    worker threads, each with its own event loop (default: cores)\n"
    "    --gateway MODE standalone (default): vsr serves the configuration's listeners; extproc: Envoy\n"
    "                   serves them and asks vsr at each phase over ext_proc (gRPC)\n"
    "    --log-level L  debug, info, warn or error (default info)\n"
    "    --drain-timeout D  on SIGTERM/SIGINT, how long in-flight requests may take: seconds (30)\n"
    "                   or a duration (5s, 1500ms, 2m; default 30s)\n"
    "    --access-log P one JSON line per request to P (a file), - (standard output, default) or off\n"
    "    --config-watch W  on (default): apply the configuration file whenever it changes; off\n"
    "    --config-audit-log P  append one JSON line per configuration activation, rejection and\n"
    "                   rollback to P (default: none)\n"
    "   management (the management API, every gateway mode; one of the two):\n"
    "    --management-token-file P  the management API's bearer token, read from file P\n"
    "    --management-token-env N   ... or from environment variable N (either overrides\n"
    "                   global.services.management_api.token_file / token_env)\n"
    "   metrics (every gateway mode):\n"
    "    --metrics-listen A:P  Prometheus /metrics on address:port (default 127.0.0.1:9190), or off\n"
    "   extproc (only with --gateway extproc):\n"
    "    --extproc-listen A:P  the ext_proc gRPC listener (default 127.0.0.1:50051)\n";
static const char runtime_synopsis[] =
    "       vsr runtime serve --socket PATH | --listen ADDR:PORT [--embedder hash] [--model PATH]\n"
    "                 [--remote-embeddings URL --remote-model NAME [--remote-api-key-env VAR]\n"
    "                  [--remote-dim N] [--remote-timeout-ms MS]] [--threads N] [--queue N]\n"
    "                 [--max-queued-inputs N] [--max-tasks N] [--max-body-bytes N] [--cache-entries N]\n"
    "                 [--cache-bytes N]\n"
    "                 [--header-timeout-ms MS] [--body-timeout-ms MS] [--idle-timeout-ms MS]\n"
    "                 [--max-connections N] [--max-buffered-bytes N] [--default-deadline-ms MS]\n"
    "                 [--max-batch N]\n"
    "                 [--default-embedder NAME] [--classifiers LIST] [--guard-model DIR]\n"
    "                 [--log-level L] [--test-delay-ms MS]\n";
static const char config_help[] =
    "  config validate  check a configuration document; exit 0 when valid, 2 when not; --gateway extproc\n"
    "                   also checks what Envoy must carry in that mode; --strict: warnings and keys not\n"
    "                   supported yet fail it too\n"
    "  config print     the effective document (defaults filled in); --redact hides secrets\n"
    "  config migrate   convert a pre-v0.3 document (vllm_endpoints, model_config, flat signal lists, ...)\n"
    "                   to canonical v0.3 YAML on standard output, or atomically into OUT with -o; exit 2\n"
    "                   on bad input, unknown pre-v0.3 keys, or a document that is already v0.3\n";
static const char envoy_synopsis[] = "       vsr envoy render FILE [--extproc ADDR:PORT] [--admin-port N]\n";
static const char envoy_help[] =
    "  envoy render     the Envoy bootstrap for FILE in extproc mode (standard output): its listeners, one route\n"
    "                   per model on x-selected-model, the clusters, the ext_proc filter pointing at vsr\n"
    "                   (--extproc, default 127.0.0.1:50051); exit 2 when FILE cannot serve in extproc mode\n";
static const char eval_synopsis[] = "       vsr eval --prompt TEXT [--model NAME] [--json] [--endpoint URL | --config FILE]\n";
static const char eval_help[] =
    "  eval             what the router decides for one prompt: the signals that fired with their\n"
    "                   confidences, the decision and the model, from a running vsr's routing preview\n"
    "                   (--endpoint, default http://127.0.0.1:8080) or offline (--config); --json for JSON\n";
static const char exit_help[] =
    "\nexit codes: 0 success, 1 runtime failure, 2 invalid configuration, 3 an address is already\n"
    "in use by another process, 64 usage error\n";

static void usage(FILE *f)
{
    fprintf(f, "%s%s%s%s%s       vsr version\n\n%s%s%s%s  runtime serve    the model runtime (docs/runtime.md)\n%s",
            serve_synopsis, config_synopsis, envoy_synopsis, eval_synopsis, runtime_synopsis, serve_help, config_help,
            envoy_help, eval_help, exit_help);
}

/* ADDRESS:PORT (a non-empty address, a port 1..65535) into addr and *port;
 * VSR_ERR_INVALID leaves them untouched. */
static int parse_host_port(const char *v, char *addr, size_t cap, uint16_t *port)
{
    const char *colon = strrchr(v, ':');
    long p = colon ? strtol(colon + 1, NULL, 10) : 0;
    if (colon == NULL || colon == v || (size_t)(colon - v) >= cap || p < 1 || p > 65535)
        return VSR_ERR_INVALID;
    memcpy(addr, v, (size_t)(colon - v));
    addr[colon - v] = '\0';
    *port = (uint16_t)p;
    return VSR_OK;
}

static int is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "help") == 0;
}

/* Loads, validates and compiles a document: the configuration and the
 * routing engine built from it (signals compiled once here). */
static int load_config(const char *path, vsr_config_t **out, vsr_engine_t **engine)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    int rc = vsr_config_load_file(path, out, &err);
    if (rc == VSR_OK) {
        *engine = vsr_engine_new(*out, 1, &err);
        if (*engine == NULL) {
            vsr_config_free(*out);
            *out = NULL;
            rc = VSR_ERR_INVALID;
        }
    }
    if (rc != VSR_OK)
        fprintf(stderr, "%s", err.len ? err.data : "configuration error\n");
    vsr_buf_free(&err);
    return rc;
}

/* vsr config validate: the errors, then the warnings (accepted keys with
 * no effect, deprecated keys, adjusted values), then the accepted keys not
 * supported yet, each a line FILE:LINE:COL on stderr.  0 with *out when the
 * document loads (and, with strict, has neither warnings nor unsupported
 * keys); -1 otherwise. */
static int validate_document(const char *path, int strict, vsr_config_t **out)
{
    vsr_buf_t err, warn, unsup;
    vsr_buf_init(&err, 1 << 20);
    vsr_buf_init(&warn, 1 << 20);
    vsr_buf_init(&unsup, 1 << 20);
    vsr_config_t *cfg = NULL;
    int rc = vsr_config_load_file_notes(path, &cfg, &err, &warn, &unsup);
    if (rc == VSR_OK) {
        vsr_engine_t *engine = vsr_engine_new(cfg, 1, &err);
        if (engine == NULL)
            rc = VSR_ERR_INVALID;
        vsr_engine_unref(engine);
    }
    if (rc != VSR_OK && err.len == 0)
        vsr_buf_append_cstr(&err, "configuration error\n");
    fprintf(stderr, "%.*s%.*s%.*s", (int)err.len, err.data ? err.data : "", (int)warn.len,
            warn.data ? warn.data : "", (int)unsup.len, unsup.data ? unsup.data : "");
    if (rc == VSR_OK && strict && (warn.len || unsup.len)) {
        fprintf(stderr, "%s: not valid with --strict: it has warnings or keys not supported yet\n", path);
        rc = VSR_ERR_INVALID;
    }
    vsr_buf_free(&err);
    vsr_buf_free(&warn);
    vsr_buf_free(&unsup);
    if (rc != VSR_OK) {
        vsr_config_free(cfg);
        return -1;
    }
    *out = cfg;
    return 0;
}

/* vsr config print FILE [--redact]: the effective document. */
static int cmd_config_print(const char *path, int redact)
{
    vsr_config_t *cfg = NULL;
    vsr_engine_t *engine = NULL;
    if (load_config(path, &cfg, &engine) != VSR_OK)
        return EXIT_CONFIG;
    vsr_engine_unref(engine);
    char *doc = NULL;
    size_t len = 0;
    vsr_buf_t out, err;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 4096);
    int rc = vsr_admin_read_file(path, &doc, &len, &err) == VSR_OK &&
                     vsr_config_print(path, doc, len, cfg, redact, &out) == VSR_OK
                 ? 0
                 : EXIT_CONFIG;
    if (rc == 0)
        fwrite(out.data, 1, out.len, stdout);
    else
        fprintf(stderr, "%s", err.len ? err.data : "vsr: cannot print the document\n");
    vsr_free(doc);
    vsr_buf_free(&out);
    vsr_buf_free(&err);
    vsr_config_free(cfg);
    return rc;
}

/* Writes len bytes to path through a temporary file in the same directory
 * and a rename, so path holds the old document or the whole new one, never
 * a part.  An existing file keeps its permissions; a new one is 0600 (the
 * document may hold API keys).  VSR_OK, or "vsr: PATH: reason" on stderr. */
static int write_atomically(const char *path, const char *data, size_t len)
{
    size_t plen = strlen(path);
    char *tmp = vsr_malloc(plen + sizeof(".tmp.XXXXXX"));
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", sizeof(".tmp.XXXXXX"));
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "vsr: %s: cannot create a temporary file next to it: %s\n", path, strerror(errno));
        vsr_free(tmp);
        return VSR_ERR_IO;
    }
    struct stat st;
    const char *why = NULL;
    if (stat(path, &st) == 0 && fchmod(fd, st.st_mode & 07777) != 0)
        why = strerror(errno);
    for (size_t off = 0; why == NULL && off < len;) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            why = n < 0 ? strerror(errno) : "short write";
        else
            off += (size_t)n;
    }
    if (why == NULL && fsync(fd) != 0)
        why = strerror(errno);
    if (close(fd) != 0 && why == NULL)
        why = strerror(errno);
    if (why == NULL && rename(tmp, path) != 0)
        why = strerror(errno);
    if (why != NULL) {
        fprintf(stderr, "vsr: %s: %s\n", path, why);
        unlink(tmp);
    }
    vsr_free(tmp);
    return why == NULL ? VSR_OK : VSR_ERR_IO;
}

/* vsr config migrate FILE [-o OUT]: a pre-v0.3 document as canonical v0.3. */
static int cmd_config_migrate(int argc, char **argv)
{
    const char *file = NULL, *out_path = NULL;
    for (int i = 2; i < argc; i++) {
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc && out_path == NULL &&
            argv[i + 1][0] != '\0')
            out_path = argv[++i];
        else if (file == NULL && argv[i][0] != '-' && argv[i][0] != '\0')
            file = argv[i];
        else
            file = NULL, i = argc; /* a usage error */
    }
    if (file == NULL) {
        fprintf(stderr, "usage: vsr config migrate FILE [-o OUT]\n");
        return EXIT_USAGE;
    }
    char *doc = NULL;
    size_t len = 0;
    vsr_buf_t out, err, warn;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 1 << 20);
    vsr_buf_init(&warn, 1 << 20);
    int rc = EXIT_CONFIG;
    if (vsr_admin_read_file(file, &doc, &len, &err) == VSR_OK &&
        vsr_config_migrate(file, doc, len, &out, &err, &warn) == VSR_OK) {
        fwrite(warn.data ? warn.data : "", 1, warn.len, stderr);
        if (out_path != NULL)
            rc = write_atomically(out_path, out.data, out.len) == VSR_OK ? 0 : EXIT_RUNTIME;
        else
            rc = fwrite(out.data, 1, out.len, stdout) == out.len && fflush(stdout) == 0 ? 0 : EXIT_RUNTIME;
    } else {
        fprintf(stderr, "%s", err.len ? err.data : "vsr: cannot migrate the document\n");
    }
    vsr_free(doc);
    vsr_buf_free(&out);
    vsr_buf_free(&err);
    vsr_buf_free(&warn);
    return rc;
}

static int cmd_config(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (is_help(argv[i])) {
            printf("usage: %s\n%s%s", config_synopsis + 7, config_help, exit_help);
            return 0;
        }
    if (argc >= 2 && strcmp(argv[1], "migrate") == 0)
        return cmd_config_migrate(argc, argv);
    if (argc >= 3 && strcmp(argv[1], "print") == 0) {
        int redact = 0;
        const char *file = NULL;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--redact") == 0)
                redact = 1;
            else if (file == NULL && argv[i][0] != '-')
                file = argv[i];
            else {
                fprintf(stderr, "usage: vsr config print FILE [--redact]\n");
                return EXIT_USAGE;
            }
        }
        if (file == NULL) {
            fprintf(stderr, "usage: vsr config print FILE [--redact]\n");
            return EXIT_USAGE;
        }
        return cmd_config_print(file, redact);
    }
    const char *file = NULL, *mode = "standalone";
    int strict = 0;
    int ok = argc >= 3 && strcmp(argv[1], "validate") == 0;
    for (int i = 2; ok && i < argc; i++) {
        if (strcmp(argv[i], "--gateway") == 0 && i + 1 < argc &&
            (strcmp(argv[i + 1], "standalone") == 0 || strcmp(argv[i + 1], "extproc") == 0))
            mode = argv[++i];
        else if (strcmp(argv[i], "--strict") == 0)
            strict = 1;
        else if (file == NULL && argv[i][0] != '-')
            file = argv[i];
        else
            ok = 0;
    }
    if (!ok || file == NULL) {
        fprintf(stderr, "%s", config_synopsis);
        return EXIT_USAGE;
    }
    vsr_config_t *cfg = NULL;
    if (validate_document(file, strict, &cfg) != 0)
        return EXIT_CONFIG;
    if (strcmp(mode, "extproc") == 0) {
        vsr_buf_t err;
        vsr_buf_init(&err, 0);
        size_t bad = vsr_config_check_extproc(cfg, &err);
        if (bad) {
            fprintf(stderr, "%s: not valid for --gateway extproc:\n%.*s", file, (int)err.len, err.data);
            vsr_buf_free(&err);
            vsr_config_free(cfg);
            return EXIT_CONFIG;
        }
        vsr_buf_free(&err);
    }
    printf("%s: valid%s (%zu listener%s, %zu model%s)\n", file, strcmp(mode, "extproc") == 0 ? " for extproc" : "",
           cfg->n_listeners, cfg->n_listeners == 1 ? "" : "s", cfg->n_models, cfg->n_models == 1 ? "" : "s");
    vsr_config_free(cfg);
    return 0;
}

/* ---- the model runtime: each worker's runtime port, and the child ----
 * The gateway lends every worker a port built here (vsr_gateway_runtime_t):
 * a runtime client on that worker's loop (vsr_rtc_*), behind the routing
 * core's "call the runtime" shape.  The supervisor (vsr_rts_*) runs the
 * child on the control loop; /ready follows it. */

typedef struct rt_call_s rt_call_t;

typedef struct {
    vsr_rtc_t *rtc;
    rt_call_t *calls; /* in flight: freed when the port closes (the client drops them without done) */
} rt_port_t;

struct rt_call_s {
    rt_port_t *port;
    vsr_rtc_call_t *call;
    rt_call_t *prev, *next;
    vsr_runtime_done_fn done;
    void *done_ud;
};

typedef struct {
    int enabled;             /* the workers get a runtime port */
    char socket_path[108];   /* a Unix socket: the endpoint's, or the managed child's */
    char socket_dir[108];    /* the managed child's: a directory of its own (0700, made here), or "" */
    char tcp_host[64];       /* or TCP (endpoint http://IP:PORT) */
    uint16_t tcp_port;
    uint64_t timeout_ms;     /* one call at most (global.model_catalog.runtime.timeout) */
    vsr_rts_t *sup;          /* the managed child, or NULL */
} rt_wire_t;

static void rt_unlink(rt_call_t *rc)
{
    if (rc->prev)
        rc->prev->next = rc->next;
    else
        rc->port->calls = rc->next;
    if (rc->next)
        rc->next->prev = rc->prev;
}

/* The process the managed child's socket must be served by: the child. */
static int rt_peer_pid(void *ud)
{
    const rt_wire_t *rw = ud;
    return rw->sup ? vsr_rts_pid(rw->sup) : 0;
}

static void *rt_open(void *ud, uv_loop_t *loop, unsigned worker)
{
    VSR_UNUSED(worker);
    const rt_wire_t *rw = ud;
    rt_port_t *p = vsr_calloc(1, sizeof(*p));
    vsr_rtc_opts_t o = {.socket_path = rw->socket_path};
    if (rw->sup) {
        o.peer_pid = rt_peer_pid;
        o.peer_ud = (void *)rw;
    }
    if (rw->tcp_host[0]) {
        o.tcp_host = rw->tcp_host;
        o.tcp_port = rw->tcp_port;
    }
    p->rtc = vsr_rtc_new(loop, &o);
    return p;
}

static void rt_close(void *ud, void *port)
{
    VSR_UNUSED(ud);
    rt_port_t *p = port;
    while (p->calls) {
        rt_call_t *rc = p->calls;
        rt_unlink(rc);
        vsr_free(rc);
    }
    vsr_rtc_free(p->rtc); /* its handles close on the worker's loop */
    vsr_free(p);
}

static void rt_done(void *ud, int status, const vsr_rtc_result_t *res, size_t n, const vsr_rtc_timing_t *t)
{
    rt_call_t *rc = ud;
    vsr_runtime_done_fn done = rc->done;
    void *done_ud = rc->done_ud;
    if (rc->port) {
        rt_unlink(rc);
        vsr_free(rc);
    } else {
        rc->done = NULL; /* answered before vsr_rtc_bundle returned: rt_call frees it */
    }
    vsr_log_debug("runtime", "bundle call: status %d, http %d, wall %.3f ms, runtime %.3f ms", status, t->http_status,
                  t->wall_ms, t->runtime_ms);
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_runtime_result_t *out = n ? vsr_pool_alloc(&pool, n * sizeof(*out)) : NULL;
    for (size_t i = 0; i < n; i++)
        out[i] = (vsr_runtime_result_t){vsr_pool_strndup(&pool, res[i].id.p ? res[i].id.p : "", res[i].id.len),
                                        res[i].status == VSR_OK ? VSR_OK : VSR_ERR, res[i].result};
    if (status == VSR_ERR_INVALID)
        status = VSR_ERR;
    done(done_ud, status, out, n);
    vsr_pool_free(&pool);
}

static void *rt_call(void *ud, void *port, const vsr_runtime_bundle_t *b, uint64_t deadline_ms,
                     vsr_runtime_done_fn done, void *done_ud)
{
    const rt_wire_t *rw = ud;
    rt_port_t *p = port;
    uint64_t cap = vsr_now_ms() + rw->timeout_ms;
    if (deadline_ms > cap)
        deadline_ms = cap; /* the request's deadline, or the call's own bound when that comes first */
    rt_call_t *rc = vsr_calloc(1, sizeof(*rc));
    rc->done = done;
    rc->done_ud = done_ud;
    vsr_rtc_task_t *tasks = vsr_calloc(b->n_tasks ? b->n_tasks : 1, sizeof(*tasks));
    for (size_t i = 0; i < b->n_tasks; i++)
        tasks[i] = (vsr_rtc_task_t){vsr_slice_cstr(b->tasks[i].id), vsr_slice_cstr(b->tasks[i].type),
                                    b->tasks[i].payload};
    vsr_rtc_call_t *call = vsr_rtc_bundle(p->rtc, tasks, b->n_tasks, deadline_ms, rt_done, rc);
    vsr_free(tasks);
    if (call == NULL) { /* done has run */
        vsr_free(rc);
        return NULL;
    }
    rc->call = call;
    rc->port = p;
    rc->next = p->calls;
    if (p->calls)
        p->calls->prev = rc;
    p->calls = rc;
    return rc;
}

static void rt_cancel(void *ud, void *port, void *handle)
{
    VSR_UNUSED(ud);
    VSR_UNUSED(port);
    rt_call_t *rc = handle;
    vsr_rtc_cancel(rc->call);
    rt_unlink(rc);
    vsr_free(rc);
}

static int rt_ready(void *ud)
{
    const rt_wire_t *rw = ud;
    return rw->sup == NULL || vsr_rts_ready(rw->sup);
}

/* 1 when a recipe declares model-backed signals, or a decision a response
 * cache that looks up by meaning (the request's embedding), a
 * response_jailbreak plugin, a memory plugin, a tool plugin that selects by
 * similarity, or a rag plugin that searches by vector; or a decision
 * whose algorithm is router_dc (the query's and the descriptions'
 * embeddings). */
static int needs_runtime(const vsr_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_recipes; i++) {
        const vsr_recipe_conf_t *r = &cfg->recipes[i];
        if (vsr_signals_conf_model_backed(&r->signals))
            return 1;
        for (size_t d = 0; d < r->n_decisions; d++) {
            if (r->decisions[d].algo.kind == VSR_ALGO_ROUTER_DC && r->decisions[d].n_model_refs > 0)
                return 1;
            for (size_t p = 0; p < r->decisions[d].n_plugins; p++) {
                const vsr_plugin_conf_t *pl = &r->decisions[d].plugins[p];
                if (pl->kind == VSR_PLUGIN_RESPONSE_CACHE && pl->enabled && pl->u.response_cache.mode != VSR_RC_EXACT)
                    return 1;
                if (pl->kind == VSR_PLUGIN_RESPONSE_JAILBREAK && pl->enabled)
                    return 1; /* the answer goes to the prompt guard */
                if (pl->kind == VSR_PLUGIN_MEMORY && pl->enabled)
                    return 1; /* memories are found by the query's embedding */
                if (pl->enabled && (pl->kind == VSR_PLUGIN_TOOL_SELECTION ||
                                    (pl->kind == VSR_PLUGIN_TOOLS && pl->u.tools.semantic &&
                                     pl->u.tools.mode == VSR_TOOLS_FILTERED)))
                    return 1;
                if (pl->kind == VSR_PLUGIN_RAG && pl->enabled && vsr_rag_conf_embeds(pl->u.rag))
                    return 1; /* pinecone and weaviate search by the query's embedding */
            }
        }
    }
    return 0;
}

static void on_runtime_ready(void *ud, int ready)
{
    VSR_UNUSED(ud);
    if (ready)
        vsr_log_info("vsr", "model runtime ready");
    else
        vsr_log_warn("vsr", "model runtime not ready: /ready answers 503 until it is back");
}

/* The managed child's socket, in a directory made for it alone (mkdtemp:
 * 0700, a name nobody can guess) under $XDG_RUNTIME_DIR, else $TMPDIR, else
 * /tmp, the first where one can be made: no other user can bind the socket
 * before the child, or connect to it.  runtime_cleanup removes both. */
static int runtime_socket_dir(rt_wire_t *rw, vsr_buf_t *err)
{
    const char *bases[] = {getenv("XDG_RUNTIME_DIR"), getenv("TMPDIR"), "/tmp"};
    static const char sock[] = "/runtime.sock";
    for (size_t i = 0; i < VSR_ARRAY_LEN(bases); i++) {
        const char *base = bases[i];
        if (base == NULL || *base == '\0')
            continue;
        int n = snprintf(rw->socket_dir, sizeof(rw->socket_dir), "%s/vsr-runtime-XXXXXX", base);
        if (n < 0 || (size_t)n + sizeof(sock) > sizeof(rw->socket_path)) {
            vsr_log_warn("vsr", "the runtime's socket path under %s would be too long", base);
            continue;
        }
        if (mkdtemp(rw->socket_dir) == NULL) {
            vsr_log_warn("vsr", "cannot make the runtime's socket directory under %s: %s", base, strerror(errno));
            continue;
        }
        memcpy(rw->socket_path, rw->socket_dir, (size_t)n); /* it fits: n + sizeof(sock) is checked above */
        memcpy(rw->socket_path + n, sock, sizeof(sock));
        return VSR_OK;
    }
    rw->socket_dir[0] = '\0';
    vsr_buf_printf(err, "cannot make a directory for the model runtime's socket (XDG_RUNTIME_DIR, TMPDIR, /tmp)\n");
    return VSR_ERR;
}

/* The managed child's socket and its directory, once the child is gone. */
static void runtime_cleanup(rt_wire_t *rw)
{
    if (rw->socket_dir[0] == '\0')
        return;
    unlink(rw->socket_path); /* left by a child that was killed */
    if (rmdir(rw->socket_dir) != 0)
        vsr_log_warn("vsr", "cannot remove the runtime's socket directory %s: %s", rw->socket_dir, strerror(errno));
    rw->socket_dir[0] = '\0';
}

/* vsr's installed models (docs/runtime.md, "Installed models"): the
 * directory named by $VSR_MODEL_CACHE when it is set, and only that one;
 * otherwise ~/.cache/vsr/models (what scripts/setup-deps fills), then
 * /usr/share/vsr/models (the image's).  The first place NAME exists at goes
 * into buf (VSR_OK); VSR_ERR_NOT_FOUND otherwise, with the places searched
 * in `where`, for the message. */
#define VSR_SYSTEM_MODEL_DIR "/usr/share/vsr/models"
static int installed_model(const char *name, char *buf, size_t cap, char *where, size_t wcap)
{
    const char *cache = getenv("VSR_MODEL_CACHE"), *home = getenv("HOME");
    char dirs[2][4096];
    size_t n_dirs = 0;
    if (cache != NULL && *cache != '\0') {
        snprintf(dirs[n_dirs++], sizeof(dirs[0]), "%s", cache);
    } else {
        if (home != NULL && *home != '\0')
            snprintf(dirs[n_dirs++], sizeof(dirs[0]), "%s/.cache/vsr/models", home);
        snprintf(dirs[n_dirs++], sizeof(dirs[0]), "%s", VSR_SYSTEM_MODEL_DIR);
    }
    size_t wl = 0;
    if (wcap > 0)
        where[0] = '\0';
    for (size_t i = 0; i < n_dirs; i++) {
        int n = snprintf(buf, cap, "%s/%s", dirs[i], name);
        if (wcap > wl) {
            int w = snprintf(where + wl, wcap - wl, "%s%s", i ? ", " : "", dirs[i]);
            wl = w < 0 ? wl : VSR_MIN(wcap - 1, wl + (size_t)w);
        }
        if (n < 0 || (size_t)n >= cap)
            continue;
        uv_fs_t req;
        int st = uv_fs_stat(NULL, &req, buf, NULL);
        uv_fs_req_cleanup(&req);
        if (st == 0)
            return VSR_OK;
    }
    if (cap > 0)
        buf[0] = '\0';
    return VSR_ERR_NOT_FOUND;
}

/* The runtime's jailbreak classifier is asked: a jailbreak signal that is
 * not contrastive only, or a response_jailbreak plugin. */
static int needs_guard(const vsr_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_recipes; i++) {
        const vsr_recipe_conf_t *r = &cfg->recipes[i];
        for (size_t j = 0; j < r->signals.n_jailbreak; j++)
            if (r->signals.jailbreak[j].method != VSR_JB_CONTRASTIVE)
                return 1;
        for (size_t d = 0; d < r->n_decisions; d++)
            for (size_t p = 0; p < r->decisions[d].n_plugins; p++)
                if (r->decisions[d].plugins[p].kind == VSR_PLUGIN_RESPONSE_JAILBREAK &&
                    r->decisions[d].plugins[p].enabled)
                    return 1;
    }
    return 0;
}

#define VSR_INSTALL_MODELS "install them with scripts/setup-deps (make deps), or set VSR_MODEL_CACHE to the " \
                           "directory that holds them"

/* global.model_catalog.runtime → rw (and the child's start on loop).
 * VSR_OK, or VSR_ERR_INVALID with a message in err (a configuration that
 * needs a runtime it cannot have). */
static int runtime_setup(const vsr_config_t *cfg, uv_loop_t *loop, rt_wire_t *rw, vsr_buf_t *err)
{
    memset(rw, 0, sizeof(*rw));
    rw->timeout_ms = cfg->runtime_timeout_ms ? cfg->runtime_timeout_ms : VSR_DEFAULT_RUNTIME_TIMEOUT_MS;
    const char *ep = cfg->runtime_endpoint;
    int managed = cfg->has_runtime_managed ? cfg->runtime_managed : (ep == NULL && needs_runtime(cfg));
    if (ep != NULL) {
        rw->enabled = 1;
        if (strncmp(ep, "unix://", 7) == 0) {
            snprintf(rw->socket_path, sizeof(rw->socket_path), "%s", ep + 7);
        } else { /* http://IP:PORT, checked by the decoder */
            const char *colon = strrchr(ep + 7, ':');
            size_t hl = (size_t)(colon - (ep + 7));
            memcpy(rw->tcp_host, ep + 7, VSR_MIN(hl, sizeof(rw->tcp_host) - 1));
            rw->tcp_port = (uint16_t)atoi(colon + 1);
        }
        vsr_log_info("vsr", "model runtime at %s (not managed by vsr)", ep);
        return VSR_OK;
    }
    if (!managed)
        return VSR_OK;
    /* the models: the document's, else vsr's installed ones */
    char model[4096], guard[4096], where[4096];
    const char *model_path = cfg->runtime_model, *guard_path = cfg->runtime_guard_model;
    if (cfg->runtime_embedder == NULL && model_path == NULL && cfg->remote_embed_url == NULL) {
        if (installed_model("use-lite.vsrm", model, sizeof(model), where, sizeof(where)) != VSR_OK) {
            vsr_buf_printf(err, "the configuration has model-backed signals and vsr's installed embedding model "
                                "use-lite.vsrm is not in %s: " VSR_INSTALL_MODELS ", or name a model "
                                "(global.model_catalog.runtime.model)\n", where);
            return VSR_ERR_NOT_FOUND;
        }
        model_path = model;
    } else if (model_path != NULL) {
        uv_fs_t req;
        int st = uv_fs_stat(NULL, &req, model_path, NULL);
        uv_fs_req_cleanup(&req);
        if (st != 0) {
            vsr_buf_printf(err, "global.model_catalog.runtime.model: %s: %s\n", model_path, uv_strerror(st));
            return VSR_ERR_NOT_FOUND;
        }
    }
    if (guard_path == NULL && needs_guard(cfg)) {
        /* missing: an error when every model is the installed one; a document
         * that names its embedder gets the runtime's warning (contrastive only) */
        if (installed_model("llm_guardrail", guard, sizeof(guard), where, sizeof(where)) != VSR_OK &&
            model_path == model) {
            vsr_buf_printf(err, "the configuration has jailbreak signals and vsr's installed jailbreak classifier "
                                "llm_guardrail is not in %s: " VSR_INSTALL_MODELS ", or name it "
                                "(global.model_catalog.runtime.guard_model)\n", where);
            return VSR_ERR_NOT_FOUND;
        }
        if (guard[0] != '\0')
            guard_path = guard;
    }
    if (runtime_socket_dir(rw, err) != VSR_OK)
        return VSR_ERR;
    char exe[4096];
    size_t exe_len = sizeof(exe);
    if (uv_exepath(exe, &exe_len) != 0) {
        vsr_buf_printf(err, "cannot find vsr's own executable to start the model runtime\n");
        return VSR_ERR;
    }
    static const char *levels[] = {"debug", "info", "warn", "error"};
    char threads[16];
    const char *args[32];
    size_t k = 0;
    args[k++] = "runtime";
    args[k++] = "serve";
    args[k++] = "--socket";
    args[k++] = rw->socket_path;
    if (model_path) {
        args[k++] = "--model";
        args[k++] = model_path;
    }
    if (cfg->runtime_embedder) {
        args[k++] = "--embedder";
        args[k++] = cfg->runtime_embedder;
    }
    if (cfg->remote_embed_url) { /* global.model_catalog.embeddings.semantic.endpoint: the default embedder */
        args[k++] = "--remote-embeddings";
        args[k++] = cfg->remote_embed_url;
        args[k++] = "--remote-model";
        args[k++] = cfg->remote_embed_model;
        args[k++] = "--default-embedder";
        args[k++] = cfg->remote_embed_model;
        if (cfg->remote_embed_key_env) {
            args[k++] = "--remote-api-key-env";
            args[k++] = cfg->remote_embed_key_env;
        }
    }
    if (guard_path) {
        args[k++] = "--guard-model";
        args[k++] = guard_path;
    }
    if (cfg->runtime_threads) {
        snprintf(threads, sizeof(threads), "%u", (unsigned)cfg->runtime_threads);
        args[k++] = "--threads";
        args[k++] = threads;
    }
    args[k++] = "--log-level";
    args[k++] = levels[vsr_log_min_level <= VSR_LOG_ERROR ? vsr_log_min_level : VSR_LOG_ERROR];
    args[k] = NULL;
    vsr_rts_opts_t so = {.exe = exe, .args = args, .socket_path = rw->socket_path, .on_ready = on_runtime_ready};
    rw->sup = vsr_rts_start(loop, &so);
    rw->enabled = 1;
    vsr_log_info("vsr", "starting the model runtime on %s", rw->socket_path);
    return VSR_OK;
}

typedef struct {
    uv_signal_t sigint, sigterm;
    uv_async_t activated;     /* a version was activated (on any thread): move the health checks */
    vsr_gateway_t *gw;
    vsr_admin_t *admin;
    vsr_metrics_t *metrics;
    vsr_engine_t *health_eng; /* the version whose health checks run on the control loop (a reference) */
    uv_loop_t *loop;
    uint64_t drain_timeout_ms;
    int draining;
    rt_wire_t rt;             /* the model runtime the workers call */
    int extproc;              /* --gateway extproc: a version must be one Envoy can carry */
} serve_t;

/* ---- the version pipeline's hooks (admin/ calls them under its lock) ---- */

static void free_shared(void *p)
{
    vsr_upstream_shared_free(p);
}

/* Warm: the version's upstream state, reusing every cluster whose identity
 * an earlier version already has (pools, health, ejection survive). */
static int warm_version(void *ud, vsr_engine_t *e, int dry_run, vsr_buf_t *err)
{
    serve_t *sv = ud;
    if (sv->extproc && vsr_config_check_extproc(vsr_engine_config(e), err) > 0)
        return VSR_ERR; /* at start-up, on reload and on a management PUT alike */
    vsr_upstream_shared_t *sh = vsr_upstream_shared_new(vsr_engine_config(e), err);
    if (sh == NULL)
        return VSR_ERR;
    if (dry_run) {
        vsr_upstream_shared_free(sh);
        return VSR_OK;
    }
    vsr_engine_set_part(e, sh, free_shared);
    return VSR_OK;
}

static void activate_version(void *ud, vsr_engine_t *e)
{
    serve_t *sv = ud;
    if (sv->gw)
        vsr_gateway_publish(sv->gw, e); /* the swap */
    vsr_metrics_set_config_version(sv->metrics, vsr_engine_version(e));
    vsr_metrics_count_activation(sv->metrics);
    if (sv->loop)
        uv_async_send(&sv->activated);
}

static void count_outcome(void *ud, const char *result)
{
    serve_t *sv = ud;
    vsr_metrics_count_config_update(sv->metrics, result);
}

static void health_stop(serve_t *sv)
{
    if (sv->health_eng == NULL)
        return;
    vsr_upstream_health_stop(vsr_engine_part(sv->health_eng));
    vsr_engine_unref(sv->health_eng);
    sv->health_eng = NULL;
}

/* On the control loop: active health checks follow the active version (the
 * endpoint states they feed are shared, so nothing is lost on the move). */
static void on_activated(uv_async_t *a)
{
    serve_t *sv = a->data;
    if (sv->gw == NULL)
        return;
    vsr_engine_t *cur = vsr_admin_active(sv->admin);
    if (cur == sv->health_eng || cur == NULL) {
        vsr_engine_unref(cur);
        return;
    }
    health_stop(sv);
    sv->health_eng = cur;
    vsr_upstream_health_start(vsr_engine_part(cur), sv->loop);
}

static void shutdown_now(serve_t *sv)
{
    if (sv->gw == NULL)
        return;
    vsr_admin_close(sv->admin); /* a call still running never reaches sv again */
    vsr_admin_watch_stop(sv->admin);
    health_stop(sv);
    vsr_gateway_stop(sv->gw);
    sv->gw = NULL;
    vsr_rts_stop(sv->rt.sup); /* the child gets SIGTERM; the loop runs until it is gone */
    sv->rt.sup = NULL;
    uv_close((uv_handle_t *)&sv->activated, NULL);
    uv_close((uv_handle_t *)&sv->sigint, NULL);
    uv_close((uv_handle_t *)&sv->sigterm, NULL);
    /* closing the handles restored the default action: a signal now would
     * kill a process that is already leaving (bounded: the access log and
     * trace flushes) and turn its exit status 0 into a signal */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
}

static void on_drained(void *ud)
{
    serve_t *sv = ud;
    vsr_log_info("vsr", "drained");
    shutdown_now(sv);
}

/* The first SIGTERM or SIGINT drains: no new connections, in-flight requests
 * and streams finish (within --drain-timeout), then exit 0.  A second one
 * exits at once. */
static void on_signal(uv_signal_t *s, int signum)
{
    serve_t *sv = s->data;
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
    if (sv->gw == NULL)
        return;
    if (sv->draining) {
        vsr_log_info("vsr", "%s received again, stopping now", name);
        shutdown_now(sv);
        return;
    }
    sv->draining = 1;
    vsr_log_info("vsr", "%s received, draining (up to %llu ms; send it again to stop at once)", name,
                 (unsigned long long)sv->drain_timeout_ms);
    vsr_gateway_drain(sv->gw, s->loop, sv->drain_timeout_ms, on_drained, sv);
}

static int parse_level(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* --drain-timeout: plain seconds (the old form) or a duration ("5s"). */
static int parse_drain(const char *v, uint64_t *ms)
{
    char *end;
    double s = strtod(v, &end);
    if (end != v && *end == '\0') {
        if (!(s >= 0 && s <= 86400))
            return VSR_ERR_INVALID;
        *ms = (uint64_t)(s * 1000);
        return VSR_OK;
    }
    if (vsr_parse_duration_ms(vsr_slice(v, strlen(v)), ms) != VSR_OK || *ms > 86400000ull)
        return VSR_ERR_INVALID;
    return VSR_OK;
}

#define MAX_TOKEN_BYTES 4096

/* The management token: from the command line's file or variable, else the
 * document's token_file / token_env; NULL (no token) when none is named.
 * Trailing white space (a file's newline) is dropped; the token must be
 * 16 to 4096 visible ASCII characters.  *bad is set, with a message in err,
 * when a named source cannot be read or holds no usable token. */
static char *management_token(const char *file, const char *env, const vsr_config_t *cfg, int *bad, vsr_buf_t *err)
{
    *bad = 0;
    const char *from = file ? "--management-token-file" : env ? "--management-token-env" : NULL;
    if (from == NULL) {
        file = cfg->management_token_file;
        env = file ? NULL : cfg->management_token_env;
        from = file ? "global.services.management_api.token_file" : "global.services.management_api.token_env";
    }
    if (file == NULL && env == NULL)
        return NULL;
    char *tok = NULL;
    size_t len = 0;
    if (file) {
        vsr_buf_t ferr;
        vsr_buf_init(&ferr, 4096);
        if (vsr_admin_read_file(file, &tok, &len, &ferr) != VSR_OK) {
            vsr_buf_printf(err, "%s: %.*s", from, (int)ferr.len, ferr.data ? ferr.data : "");
            vsr_buf_free(&ferr);
            *bad = 1;
            return NULL;
        }
        vsr_buf_free(&ferr);
    } else {
        const char *v = getenv(env);
        if (v == NULL) {
            vsr_buf_printf(err, "%s: environment variable %s is not set\n", from, env);
            *bad = 1;
            return NULL;
        }
        tok = vsr_strdup(v);
        len = strlen(tok);
    }
    while (len > 0 && (tok[len - 1] == '\n' || tok[len - 1] == '\r' || tok[len - 1] == ' ' || tok[len - 1] == '\t'))
        tok[--len] = '\0';
    int ok = len >= 16 && len <= MAX_TOKEN_BYTES;
    for (size_t i = 0; ok && i < len; i++)
        ok = tok[i] > 0x20 && tok[i] < 0x7f;
    if (!ok) {
        /* never the value itself */
        vsr_buf_printf(err, "%s: the management token must be 16 to %d visible ASCII characters (no spaces)\n", from,
                       MAX_TOKEN_BYTES);
        memset(tok, 0, len);
        vsr_free(tok);
        *bad = 1;
        return NULL;
    }
    return tok;
}

/* What `vsr serve` flags set; cmd_serve reads it once parsing is done. */
typedef struct {
    const char *path;
    int path_given;
    long workers;
    uint64_t drain_ms;
    const char *access_log, *audit_log;
    int watch;
    const char *token_file, *token_env;
    char maddr[64]; /* --metrics-listen, default 127.0.0.1:9190 */
    uint16_t mport;
    char xaddr[64]; /* --extproc-listen, default 127.0.0.1:50051: the port has no authentication */
    uint16_t xport;
    int extproc;
} serve_args_t;

/* A handler takes the flag's value; on a bad one it prints the flag's
 * message and returns EXIT_USAGE, else 0. */
static int sf_config(serve_args_t *s, const char *v)
{
    s->path = v;
    s->path_given = 1;
    return 0;
}
static int sf_workers(serve_args_t *s, const char *v)
{
    char *end;
    s->workers = strtol(v, &end, 10);
    if (*end || s->workers < 1 || s->workers > 1024) {
        fprintf(stderr, "vsr: --workers takes a number from 1 to 1024\n");
        return EXIT_USAGE;
    }
    return 0;
}
static int sf_audit_log(serve_args_t *s, const char *v)
{
    s->audit_log = v;
    return 0;
}
static int sf_config_watch(serve_args_t *s, const char *v)
{
    if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
        fprintf(stderr, "vsr: --config-watch takes on or off\n");
        return EXIT_USAGE;
    }
    s->watch = strcmp(v, "on") == 0;
    return 0;
}
static int sf_token_file(serve_args_t *s, const char *v)
{
    s->token_file = v;
    return 0;
}
static int sf_token_env(serve_args_t *s, const char *v)
{
    s->token_env = v;
    return 0;
}
static int sf_access_log(serve_args_t *s, const char *v)
{
    s->access_log = v;
    return 0;
}
static int sf_metrics_listen(serve_args_t *s, const char *v)
{
    if (strcmp(v, "off") == 0) {
        s->mport = 0;
        return 0;
    }
    const char *colon = strrchr(v, ':');
    long p = colon ? strtol(colon + 1, NULL, 10) : 0;
    if (colon == NULL || (size_t)(colon - v) >= sizeof(s->maddr) || p < 1 || p > 65535) {
        fprintf(stderr, "vsr: --metrics-listen takes ADDRESS:PORT or off\n");
        return EXIT_USAGE;
    }
    memcpy(s->maddr, v, (size_t)(colon - v));
    s->maddr[colon - v] = '\0';
    s->mport = (uint16_t)p;
    return 0;
}
static int sf_drain_timeout(serve_args_t *s, const char *v)
{
    if (parse_drain(v, &s->drain_ms) != VSR_OK) {
        fprintf(stderr, "vsr: --drain-timeout takes seconds or a duration (5s, 1500ms, 2m) up to 24h\n");
        return EXIT_USAGE;
    }
    return 0;
}
static int sf_gateway(serve_args_t *s, const char *v)
{
    if (strcmp(v, "standalone") != 0 && strcmp(v, "extproc") != 0) {
        fprintf(stderr, "vsr: --gateway takes standalone or extproc\n");
        return EXIT_USAGE;
    }
    s->extproc = strcmp(v, "extproc") == 0;
    return 0;
}
static int sf_extproc_listen(serve_args_t *s, const char *v)
{
    if (parse_host_port(v, s->xaddr, sizeof(s->xaddr), &s->xport) != VSR_OK) {
        fprintf(stderr, "vsr: --extproc-listen takes ADDRESS:PORT\n");
        return EXIT_USAGE;
    }
    return 0;
}
static int sf_log_level(serve_args_t *s, const char *v)
{
    (void)s;
    int lvl = parse_level(v);
    if (lvl < 0) {
        fprintf(stderr, "vsr: --log-level takes debug, info, warn or error\n");
        return EXIT_USAGE;
    }
    vsr_log_min_level = (vsr_log_level_t)lvl;
    return 0;
}

/* Where a serve flag applies; serve_help prints the flags under these groups. */
typedef enum { SG_GENERAL, SG_MANAGEMENT, SG_METRICS, SG_EXTPROC } serve_group_t;

/* --gateway extproc: the ext_proc listener's Process calls are extproc/'s
 * streams, lent to the gateway as its stream handler (vsr_gateway_xp_t). */
static void *xp_open(void *ud, vsr_engine_t *e, const vsr_session_opts_t *session, uint32_t max_message,
                     const vsr_gateway_xp_io_t *io)
{
    VSR_UNUSED(ud);
    vsr_xp_stream_opts_t o = {.session = *session, .max_message = max_message};
    vsr_xp_io_t xio = {.send = io->send, .finish = io->finish, .ud = io->ud};
    return vsr_xp_stream_open(e, &o, &xio);
}

static void xp_data(void *st, const uint8_t *p, size_t n)
{
    vsr_xp_stream_data(st, p, n); /* a failure has finished the call through io */
}

static void xp_end(void *st)
{
    vsr_xp_stream_end(st);
}

static void xp_free(void *st)
{
    vsr_xp_stream_free(st);
}

static vsr_session_t *xp_session(const void *st)
{
    return vsr_xp_stream_session(st);
}

static void xp_info(const void *st, vsr_gateway_xp_info_t *out)
{
    vsr_xp_info_t in;
    vsr_xp_stream_info(st, &in);
    *out = (vsr_gateway_xp_info_t){.method = in.method, .path = in.path, .request_id = in.request_id,
                                   .user_agent = in.user_agent, .status = in.status,
                                   .request_bytes = in.request_bytes, .response_bytes = in.response_bytes,
                                   .answered = in.answered};
}

/* OTLP/gRPC trace export: the tracer's transport is upstream/'s blocking
 * gRPC client, used on the exporter thread only. */
static vsr_grpc_client_t *otlp_grpc_client(const vsr_config_t *cfg, vsr_buf_t *err)
{
    char host[256];
    uint16_t port;
    const char *why = NULL;
    if (vsr_tracer_parse_grpc_endpoint(cfg->tracing_endpoint, host, sizeof(host), &port, &why) != VSR_OK) {
        vsr_buf_printf(err, "tracing: %s: %s", cfg->tracing_endpoint ? cfg->tracing_endpoint : "", why);
        return NULL;
    }
    vsr_buf_t tls_err;
    vsr_buf_init(&tls_err, 0);
    vsr_grpc_client_t *c = vsr_grpc_client_new(host, port, cfg->tracing_grpc_tls, &tls_err);
    if (c == NULL)
        vsr_buf_printf(err, "tracing: %s: TLS: %.*s", cfg->tracing_endpoint, (int)tls_err.len,
                       tls_err.data ? tls_err.data : "");
    vsr_buf_free(&tls_err);
    return c;
}

static int otlp_grpc_export(void *ud, const uint8_t *msg, size_t len, uint64_t deadline_ms, const uint8_t **answer,
                            size_t *answer_len, char *why, size_t why_cap)
{
    vsr_grpc_client_result_t res;
    int rc = vsr_grpc_client_call(ud, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", msg, len,
                                  deadline_ms, &res);
    snprintf(why, why_cap, "%s", res.message);
    if (rc != VSR_OK)
        return -1;
    if (res.http_status != 200) {
        snprintf(why, why_cap, "HTTP status %d", res.http_status);
        return -1;
    }
    *answer = res.answer;
    *answer_len = res.answer_len;
    if (res.grpc_status < 0)
        snprintf(why, why_cap, "no grpc-status in the answer");
    return res.grpc_status;
}

/* Every `vsr serve` flag takes one value. `excludes` names a flag that may not
 * be given with this one. */
static const struct {
    const char *name;
    serve_group_t group;
    int (*set)(serve_args_t *, const char *);
    const char *excludes;
} serve_flags[] = {
    {"--config", SG_GENERAL, sf_config, NULL},
    {"--workers", SG_GENERAL, sf_workers, NULL},
    {"--gateway", SG_GENERAL, sf_gateway, NULL},
    {"--log-level", SG_GENERAL, sf_log_level, NULL},
    {"--drain-timeout", SG_GENERAL, sf_drain_timeout, NULL},
    {"--access-log", SG_GENERAL, sf_access_log, NULL},
    {"--config-watch", SG_GENERAL, sf_config_watch, NULL},
    {"--config-audit-log", SG_GENERAL, sf_audit_log, NULL},
    {"--management-token-file", SG_MANAGEMENT, sf_token_file, "--management-token-env"},
    {"--management-token-env", SG_MANAGEMENT, sf_token_env, "--management-token-file"},
    {"--metrics-listen", SG_METRICS, sf_metrics_listen, NULL},
    {"--extproc-listen", SG_EXTPROC, sf_extproc_listen, NULL},
};
#define N_SERVE_FLAGS (sizeof(serve_flags) / sizeof(serve_flags[0]))

static int cmd_serve(int argc, char **argv)
{
    serve_args_t sa = {.path = DEFAULT_CONFIG, .drain_ms = 30000, .access_log = "-", .watch = 1,
                       .maddr = "127.0.0.1", .mport = 9190, .xaddr = "127.0.0.1", .xport = 50051};
    int given[N_SERVE_FLAGS] = {0};
    int rc = 0;
    /* OpenSSL's shared random generator is made here, on this thread, before
     * any other starts: libpq (a replay writer's connect) would otherwise
     * make it on its own thread, racing the exit's cleanup */
    (void)RAND_status();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (is_help(a)) {
            printf("%s\n%s%s", serve_synopsis, serve_help, exit_help);
            return 0;
        }
        size_t f = 0;
        while (f < N_SERVE_FLAGS && strcmp(a, serve_flags[f].name) != 0)
            f++;
        int clash = 0;
        for (size_t g = 0; f < N_SERVE_FLAGS && serve_flags[f].excludes && g < N_SERVE_FLAGS; g++)
            clash |= given[g] && strcmp(serve_flags[g].name, serve_flags[f].excludes) == 0;
        if (f == N_SERVE_FLAGS || v == NULL || clash) {
            fprintf(stderr, "vsr: unknown or incomplete option \"%s\"\n%s", a, serve_synopsis);
            return EXIT_USAGE;
        }
        if ((rc = serve_flags[f].set(&sa, v)) != 0)
            return rc;
        given[f] = 1;
        i++;
    }
    for (size_t f = 0; f < N_SERVE_FLAGS; f++)
        if (given[f] && serve_flags[f].group == SG_EXTPROC && !sa.extproc) {
            fprintf(stderr, "vsr: %s applies to --gateway extproc only\n", serve_flags[f].name);
            return EXIT_USAGE;
        }
    const char *path = sa.path, *access_log = sa.access_log, *audit_log = sa.audit_log;
    const char *token_file = sa.token_file, *token_env = sa.token_env;
    int path_given = sa.path_given, watch = sa.watch, extproc = sa.extproc;
    long workers = sa.workers;
    uint64_t drain_ms = sa.drain_ms;
    uint16_t mport = sa.mport, xport = sa.xport;
    char maddr[64], xaddr[64];
    memcpy(maddr, sa.maddr, sizeof(maddr));
    memcpy(xaddr, sa.xaddr, sizeof(xaddr));
    if (!path_given && access(path, F_OK) != 0) {
        fprintf(stderr, "vsr: no configuration: the default %s does not exist here; name the document with "
                        "--config FILE\n", path);
        return EXIT_USAGE;
    }

    serve_t sv;
    memset(&sv, 0, sizeof(sv));
    sv.drain_timeout_ms = drain_ms;
    sv.extproc = extproc;
    unsigned n_workers = workers ? (unsigned)workers : uv_available_parallelism();
    sv.metrics = vsr_metrics_new(n_workers);

    /* the first version goes through the same pipeline as every later one */
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_admin_hooks_t hooks = {.warm = warm_version, .activate = activate_version, .outcome = count_outcome, .ud = &sv};
    vsr_admin_opts_t aopts = {.audit_path = audit_log};
    sv.admin = vsr_admin_new(&hooks, &aopts, &err);
    char *doc = NULL;
    size_t doc_len = 0;
    vsr_engine_t *engine = NULL;
    if (sv.admin && vsr_admin_read_file(path, &doc, &doc_len, &err) == VSR_OK) {
        vsr_admin_result_t res;
        if (vsr_admin_apply(sv.admin, path, doc, doc_len, "file", 0, &res) == VSR_OK)
            engine = vsr_admin_active(sv.admin);
        else
            vsr_buf_append_slice(&err, vsr_buf_slice(&res.errors));
        vsr_admin_result_free(&res);
    }
    vsr_free(doc);
    if (engine == NULL) {
        fprintf(stderr, "%s", err.len ? err.data : "configuration error\n");
        vsr_buf_free(&err);
        vsr_admin_free(sv.admin);
        vsr_metrics_free(sv.metrics);
        return EXIT_CONFIG;
    }
    vsr_buf_reset(&err);
    const vsr_config_t *cfg = vsr_engine_config(engine);
    vsr_config_warn_unimplemented(cfg);
    /* the management API: a token when one is named; one is required off loopback */
    int bad_token = 0;
    char *token = cfg->management_enabled ? management_token(token_file, token_env, cfg, &bad_token, &err) : NULL;
    /* management_api.auth: its tokens from their variables, now */
    if (!bad_token && cfg->management_enabled && vsr_admin_set_auth(sv.admin, cfg, &err) != VSR_OK)
        bad_token = 1;
    if (!bad_token && cfg->management_enabled && token == NULL && !vsr_admin_has_auth_tokens(sv.admin) &&
        !vsr_admin_loopback(cfg->management_address)) {
        vsr_buf_printf(&err, "global.services.management_api: bind_address %s is not a loopback address: the "
                             "management API needs a token there (--management-token-file, --management-token-env, "
                             "token_file, token_env or auth.tokens)\n", cfg->management_address);
        bad_token = 1;
    }
    if (bad_token) {
        fprintf(stderr, "vsr: %s", err.data);
        vsr_buf_free(&err);
        vsr_engine_unref(engine);
        vsr_admin_free(sv.admin);
        vsr_metrics_free(sv.metrics);
        return EXIT_CONFIG;
    }
    vsr_admin_set_token(sv.admin, token);
    if (token) {
        memset(token, 0, strlen(token));
        vsr_free(token);
    }

    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    /* signal handlers first, so a signal during start-up is not lost */
    uv_signal_init(loop, &sv.sigint);
    uv_signal_init(loop, &sv.sigterm);
    sv.sigint.data = sv.sigterm.data = &sv;
    uv_signal_start(&sv.sigint, on_signal, SIGINT);
    uv_signal_start(&sv.sigterm, on_signal, SIGTERM);
    uv_async_init(loop, &sv.activated, on_activated);
    sv.activated.data = &sv;

    vsr_gateway_opts_t gopts;
    memset(&gopts, 0, sizeof(gopts));
    gopts.workers = n_workers;
    int rt_rc = runtime_setup(cfg, loop, &sv.rt, &err), rt_ok = rt_rc == VSR_OK;
    if (sv.rt.enabled)
        gopts.runtime = (vsr_gateway_runtime_t){rt_open, rt_close, rt_call, rt_cancel, rt_ready, &sv.rt};
    if (extproc) {
        gopts.extproc_address = xaddr;
        gopts.extproc_port = xport;
        gopts.extproc = (vsr_gateway_xp_t){xp_open, xp_data, xp_end, xp_free, xp_session, xp_info, NULL};
    }
    gopts.metrics_address = maddr;
    gopts.metrics_port = mport;
    gopts.metrics = sv.metrics;
    gopts.admin = sv.admin;
    int in_use = 0;
    gopts.addr_in_use = &in_use;
    if (strcmp(access_log, "off") != 0)
        gopts.access_log = vsr_access_log_open(access_log, 0, &err);
    int tracing_ok = 1;
    vsr_grpc_client_t *otlp_grpc = NULL;
    if (cfg->tracing_enabled) {
        vsr_tracer_opts_t to = {.endpoint = cfg->tracing_endpoint, .service_name = cfg->tracing_service_name,
                                .service_version = cfg->tracing_service_version,
                                .environment = cfg->tracing_environment,
                                .sampling_ratio = cfg->tracing_sampling_ratio};
        vsr_tracer_grpc_t grpc = {NULL, otlp_grpc_export};
        if (cfg->tracing_grpc) {
            otlp_grpc = otlp_grpc_client(cfg, &err);
            grpc.ud = otlp_grpc;
            to.grpc = &grpc;
        }
        gopts.tracer = cfg->tracing_grpc && otlp_grpc == NULL ? NULL : vsr_tracer_new(&to, &err);
        tracing_ok = gopts.tracer != NULL;
    }
    vsr_metrics_attach(gopts.metrics, gopts.access_log, gopts.tracer);
    sv.gw = rt_ok && tracing_ok && (gopts.access_log || strcmp(access_log, "off") == 0)
                ? vsr_gateway_start(cfg, engine, &gopts, &err)
                : NULL;
    /* config_source kubernetes: the file is the base the cluster's resources
     * complete; they are watched instead of the file */
    int k8s = cfg->config_source_kubernetes;
    if (sv.gw != NULL && k8s && vsr_admin_k8s_start(sv.admin, path, &err) != VSR_OK) {
        vsr_gateway_stop(sv.gw);
        sv.gw = NULL;
    }
    if (sv.gw != NULL && watch && !k8s && vsr_admin_watch_start(sv.admin, loop, path, 100, &err) != VSR_OK) {
        vsr_gateway_stop(sv.gw);
        sv.gw = NULL;
    }
    if (sv.gw == NULL) {
        fprintf(stderr, "vsr: cannot start, nothing is serving: %s", err.len ? err.data : "\n");
        /* nothing runs: the handles close on the loop's last run below */
        uv_close((uv_handle_t *)&sv.activated, NULL);
        uv_close((uv_handle_t *)&sv.sigint, NULL);
        uv_close((uv_handle_t *)&sv.sigterm, NULL);
        vsr_rts_stop(sv.rt.sup);
        sv.rt.sup = NULL;
        rc = rt_rc == VSR_ERR_INVALID ? EXIT_CONFIG : in_use ? EXIT_IN_USE : EXIT_RUNTIME;
    } else {
        sv.loop = loop;
        /* the control thread: active health checks run on its loop, and
         * follow the active version (see on_activated) */
        sv.health_eng = vsr_engine_ref(engine);
        vsr_upstream_health_start(vsr_engine_part(engine), loop);
        uv_async_send(&sv.activated); /* a version activated during the start is taken up now */
        for (size_t i = 0; i < cfg->n_listeners; i++)
            vsr_log_info("vsr", "listener %s on %s:%u", cfg->listeners[i].name, cfg->listeners[i].address,
                         (unsigned)cfg->listeners[i].port);
        if (cfg->management_enabled)
            vsr_log_info("vsr", "management API on %s:%u", cfg->management_address ? cfg->management_address : "127.0.0.1",
                         (unsigned)cfg->management_port);
        if (mport)
            vsr_log_info("vsr", "metrics on http://%s:%u/metrics", maddr, (unsigned)mport);
        vsr_log_info("vsr", "vsr %s serving %s (configuration version %llu) with %u workers%s", VSR_VERSION, path,
                     (unsigned long long)vsr_engine_version(engine), vsr_gateway_workers(sv.gw),
                     k8s ? ", watching the cluster's resources" : watch ? ", watching the file" : "");
    }
    vsr_engine_unref(engine);
    uv_run(loop, UV_RUN_DEFAULT); /* until the handles are closed: after drain, stop, or a failed start */
    uv_loop_close(loop);
    vsr_admin_close(sv.admin);
    vsr_admin_k8s_stop(sv.admin); /* its threads see the admin closed */
    /* the threads on the exit list (base.h): management calls, then the
     * router replay stores' writers (a call that held a store's last
     * reference has just closed it: its writer ends its connection first) */
    const char *busy = NULL;
    unsigned left = vsr_exit_wait_all(EXIT_WAIT_MS, &busy);
    if (left > 0) {
        /* exit handlers would unload what those threads are inside */
        vsr_log_warn("vsr", "stopped with %u %s still running; they are abandoned", left, busy);
        _exit(rc);
    }
    runtime_cleanup(&sv.rt); /* the child is gone */
    if (rc == 0)
        vsr_log_info("vsr", "stopped");
    vsr_buf_free(&err);
    vsr_access_log_close(gopts.access_log);
    vsr_tracer_free(gopts.tracer); /* flushes what is queued, bounded */
    vsr_grpc_client_free(otlp_grpc); /* after the exporter thread that used it */
    vsr_admin_free(sv.admin); /* the last references: versions and their upstream state go */
    vsr_metrics_free(sv.metrics);
    return rc;
}

/* The guard model's default place: vsr's installed models. */
static const char *default_guard_dir(char *buf, size_t cap)
{
    char where[4096];
    return installed_model("llm_guardrail", buf, cap, where, sizeof(where)) == VSR_OK ? buf : NULL;
}

/* --classifiers LIST ("domain,jailbreak,pii", "none") into cls[3]; without
 * the flag, jailbreak and pii, and domain when a USE-lite embedder is served
 * (its head is trained on those vectors). */
static int load_classifiers(const char *list, const char *guard_dir, vsr_embedder_t *const *emb, size_t n_emb,
                            vsr_classifier_t **cls, size_t *n)
{
    static const char *const names[] = {"domain", "jailbreak", "pii"};
    int want[3] = {0, 1, 1};
    if (list == NULL) {
        for (size_t i = 0; i < n_emb; i++)
            if (strcmp(emb[i]->backend, "use-lite") == 0)
                want[0] = 1;
    } else if (strcmp(list, "none") == 0) {
        want[1] = want[2] = 0;
    } else {
        want[1] = want[2] = 0;
        const char *p = list;
        while (*p) {
            size_t len = strcspn(p, ",");
            int found = 0;
            for (int k = 0; k < 3; k++)
                if (len == strlen(names[k]) && memcmp(p, names[k], len) == 0)
                    want[k] = found = 1;
            if (!found) {
                fprintf(stderr, "vsr runtime serve: --classifiers: \"%.*s\" is not a classifier (domain, jailbreak, pii, "
                                "or none)\n", (int)len, p);
                return VSR_ERR_INVALID;
            }
            p += len;
            if (*p == ',')
                p++;
        }
    }
    char gbuf[4096];
    if (want[1] && guard_dir == NULL) {
        guard_dir = default_guard_dir(gbuf, sizeof(gbuf));
        if (guard_dir == NULL)
            vsr_log_warn("runtime", "jailbreak: no guard model (--guard-model DIR, or llm_guardrail in the model "
                                    "cache): only the contrastive method is served");
    }
    for (int k = 0; k < 3; k++) {
        if (!want[k])
            continue;
        vsr_buf_t err;
        vsr_buf_init(&err, 4096);
        vsr_classifier_t *c = k == 0   ? vsr_classifier_domain_new(NULL, &err)
                              : k == 1 ? vsr_classifier_jailbreak_new(guard_dir, &err)
                                       : vsr_classifier_pii_new(&err);
        if (c == NULL) {
            fprintf(stderr, "vsr runtime serve: classifier %s: %.*s\n", names[k], (int)err.len, err.data ? err.data : "");
            vsr_buf_free(&err);
            return VSR_ERR_INVALID;
        }
        vsr_buf_free(&err);
        cls[(*n)++] = c;
    }
    return VSR_OK;
}

/* vsr runtime serve ...: the model runtime (src/runtime/, docs/runtime.md).
 * Builds the embedders named on the command line and hands them over. */
static int cmd_runtime(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "serve") != 0) {
        if (argc >= 2 && is_help(argv[1])) {
            printf("usage:\n%s", runtime_synopsis);
            return 0;
        }
        fprintf(stderr, "usage:\n%s", runtime_synopsis);
        return EXIT_USAGE;
    }
    vsr_runtime_opts_t o;
    vsr_runtime_opts_init(&o);
    const char *embedder = NULL, *model_path = NULL, *remote_url = NULL, *remote_model = NULL, *key_env = NULL;
    const char *default_embedder = NULL, *classifiers = NULL, *guard_dir = NULL;
    uint64_t remote_dim = 0, remote_timeout = 10000;
    struct {
        const char *flag;
        uint64_t max;
        uint64_t *u64;
        size_t *sz;
        unsigned *u;
    } nums[] = {
        {"--threads", 256, NULL, NULL, &o.threads},
        {"--queue", 1u << 20, NULL, &o.queue, NULL},
        {"--max-queued-inputs", 1u << 24, NULL, &o.max_inputs, NULL},
        {"--max-tasks", 4096, NULL, &o.max_tasks, NULL},
        {"--max-body-bytes", 1ull << 30, NULL, &o.max_body, NULL},
        {"--cache-entries", 1ull << 24, NULL, &o.cache_entries, NULL},
        {"--cache-bytes", 1ull << 36, NULL, &o.cache_bytes, NULL},
        {"--header-timeout-ms", 3600000, &o.header_timeout_ms, NULL, NULL},
        {"--body-timeout-ms", 3600000, &o.body_timeout_ms, NULL, NULL},
        {"--idle-timeout-ms", 3600000, &o.idle_timeout_ms, NULL, NULL},
        {"--max-connections", 1u << 20, NULL, &o.max_connections, NULL},
        {"--max-buffered-bytes", 1ull << 36, NULL, &o.max_buffered, NULL},
        {"--default-deadline-ms", 3600000, &o.default_deadline_ms, NULL, NULL},
        {"--max-batch", 256, NULL, &o.max_batch, NULL},
        {"--test-delay-ms", 600000, &o.test_delay_ms, NULL, NULL},
        {"--remote-dim", VSR_RT_MAX_DIM, &remote_dim, NULL, NULL},
        {"--remote-timeout-ms", 3600000, &remote_timeout, NULL, NULL},
    };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            printf("usage:\n%sSee docs/runtime.md.\n", runtime_synopsis);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "vsr runtime serve: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        const char *v = argv[++i];
        int found = 0;
        for (size_t k = 0; k < VSR_ARRAY_LEN(nums) && !found; k++) {
            if (strcmp(a, nums[k].flag) != 0)
                continue;
            uint64_t n;
            if (vsr_slice_to_u64(vsr_slice_cstr(v), nums[k].max, &n) != VSR_OK) {
                fprintf(stderr, "vsr runtime serve: %s wants a number from 0 to %llu\n", a,
                        (unsigned long long)nums[k].max);
                return EXIT_USAGE;
            }
            if (nums[k].u64)
                *nums[k].u64 = n;
            else if (nums[k].sz)
                *nums[k].sz = (size_t)n;
            else
                *nums[k].u = (unsigned)n;
            found = 1;
        }
        if (found)
            continue;
        if (strcmp(a, "--socket") == 0)
            o.socket_path = v;
        else if (strcmp(a, "--listen") == 0)
            o.listen = v;
        else if (strcmp(a, "--embedder") == 0)
            embedder = v;
        else if (strcmp(a, "--model") == 0)
            model_path = v;
        else if (strcmp(a, "--remote-embeddings") == 0)
            remote_url = v;
        else if (strcmp(a, "--remote-model") == 0)
            remote_model = v;
        else if (strcmp(a, "--remote-api-key-env") == 0)
            key_env = v;
        else if (strcmp(a, "--default-embedder") == 0)
            default_embedder = v;
        else if (strcmp(a, "--classifiers") == 0)
            classifiers = v;
        else if (strcmp(a, "--guard-model") == 0)
            guard_dir = v;
        else if (strcmp(a, "--log-level") == 0) {
            int lvl = parse_level(v);
            if (lvl < 0) {
                fprintf(stderr, "vsr runtime serve: --log-level is debug, info, warn or error\n");
                return EXIT_USAGE;
            }
            vsr_log_min_level = (vsr_log_level_t)lvl;
        } else {
            fprintf(stderr, "vsr runtime serve: unknown flag %s\n%s", a, runtime_synopsis);
            return EXIT_USAGE;
        }
    }
    if (!o.socket_path == !o.listen) {
        fprintf(stderr, "vsr runtime serve: give exactly one of --socket PATH and --listen ADDR:PORT\n");
        return EXIT_USAGE;
    }
    if (embedder && strcmp(embedder, "hash") != 0) {
        fprintf(stderr, "vsr runtime serve: --embedder knows only \"hash\" (the test embedder)\n");
        return EXIT_USAGE;
    }
    char default_model[4096];
    if (!embedder && !model_path && !remote_url) { /* vsr's installed embedding model */
        char where[4096];
        if (installed_model("use-lite.vsrm", default_model, sizeof(default_model), where, sizeof(where)) != VSR_OK) {
            fprintf(stderr, "vsr runtime serve: the installed embedding model use-lite.vsrm is not in %s: "
                            VSR_INSTALL_MODELS ", or name a model (--model PATH, --remote-embeddings URL or "
                            "--embedder hash)\n", where);
            return EXIT_RUNTIME;
        }
        model_path = default_model;
        vsr_log_info("runtime", "serving the installed embedding model %s", model_path);
    }
    if (remote_url && !remote_model) {
        fprintf(stderr, "vsr runtime serve: --remote-embeddings needs --remote-model NAME\n");
        return EXIT_USAGE;
    }
    vsr_embedder_t *emb[3];
    vsr_classifier_t *cls[3];
    size_t n = 0, n_cls = 0;
    int rc = EXIT_RUNTIME;
    if (model_path) {
        /* the embedding model (src/models/): the default, ahead of the others */
        vsr_buf_t err;
        vsr_buf_init(&err, 4096);
        emb[n] = vsr_embedder_use_new(model_path, NULL, &err);
        if (emb[n] == NULL) {
            fprintf(stderr, "vsr runtime serve: --model %.*s\n", (int)err.len, err.data ? err.data : "");
            vsr_buf_free(&err);
            goto out;
        }
        vsr_buf_free(&err);
        n++;
    }
    if (remote_url) {
        const char *key = key_env ? getenv(key_env) : NULL;
        if (key_env && (key == NULL || *key == '\0')) {
            fprintf(stderr, "vsr runtime serve: --remote-api-key-env %s: the variable is not set\n", key_env);
            goto out;
        }
        vsr_buf_t err;
        vsr_buf_init(&err, 4096);
        emb[n] = vsr_embedder_remote_new(remote_url, remote_model, key, (size_t)remote_dim, remote_timeout, &err);
        if (emb[n] == NULL) {
            fprintf(stderr, "vsr runtime serve: %.*s\n", (int)err.len, err.data ? err.data : "");
            vsr_buf_free(&err);
            goto out;
        }
        vsr_buf_free(&err);
        n++;
    }
    if (embedder)
        emb[n++] = vsr_embedder_hash_new();
    if (default_embedder) { /* the one a task that names no model gets: first */
        size_t d = n;
        for (size_t i = 0; i < n; i++)
            if (strcmp(emb[i]->name, default_embedder) == 0)
                d = i;
        if (d == n) {
            fprintf(stderr, "vsr runtime serve: --default-embedder %s names no embedder given\n", default_embedder);
            goto out;
        }
        vsr_embedder_t *e = emb[d];
        memmove(emb + 1, emb, d * sizeof(*emb));
        emb[0] = e;
    }
    if (load_classifiers(classifiers, guard_dir, emb, n, cls, &n_cls) != VSR_OK)
        goto out;
    o.embedders = emb;
    o.n_embedders = n;
    o.classifiers = cls;
    o.n_classifiers = n_cls;
    return vsr_runtime_serve(&o);
out:
    for (size_t i = 0; i < n; i++)
        vsr_embedder_free(emb[i]);
    for (size_t i = 0; i < n_cls; i++)
        vsr_classifier_free(cls[i]);
    return rc;
}

/* vsr envoy render FILE [--extproc ADDR:PORT] [--admin-port N] */
static int cmd_envoy(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (is_help(argv[i])) {
            printf("usage: %s\n%s%s", envoy_synopsis + 7, envoy_help, exit_help);
            return 0;
        }
    vsr_envoy_render_opts_t o = {0};
    char xaddr[64] = "127.0.0.1";
    const char *file = NULL;
    int ok = argc >= 3 && strcmp(argv[1], "render") == 0;
    for (int i = 2; ok && i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--extproc") == 0 && v) {
            ok = parse_host_port(v, xaddr, sizeof(xaddr), &o.extproc_port) == VSR_OK;
            i++;
        } else if (strcmp(a, "--admin-port") == 0 && v) {
            long p = strtol(v, NULL, 10);
            ok = p >= 1 && p <= 65535;
            o.admin_port = (uint16_t)p;
            i++;
        } else if (file == NULL && a[0] != '-') {
            file = a;
        } else {
            ok = 0;
        }
    }
    if (!ok || file == NULL) {
        fprintf(stderr, "usage: %s", envoy_synopsis + 7);
        return EXIT_USAGE;
    }
    o.extproc_address = xaddr;
    vsr_config_t *cfg = NULL;
    vsr_engine_t *engine = NULL;
    if (load_config(file, &cfg, &engine) != VSR_OK)
        return EXIT_CONFIG;
    vsr_engine_unref(engine);
    vsr_buf_t out, err;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&err, 0);
    int rc = vsr_envoy_render(cfg, &o, &out, &err);
    if (rc == VSR_OK)
        fwrite(out.data, 1, out.len, stdout);
    else
        fprintf(stderr, "%s: cannot be served in extproc mode:\n%.*s", file, (int)err.len, err.data ? err.data : "");
    vsr_buf_free(&out);
    vsr_buf_free(&err);
    vsr_config_free(cfg);
    return rc == VSR_OK ? 0 : EXIT_CONFIG;
}

/* glibc returns the free top of a thread's heap to the kernel as soon as it
 * passes the trim threshold (128 KiB, or twice the last mmapped size): one
 * request with a 64 KiB body frees a 128 KiB buffer and then faults the
 * pages back in on the next, a madvise and dozens of page faults per
 * request.  Fixed thresholds keep that memory for the next request; the
 * gateway still trims explicitly once a worker's connections are gone. */
static void malloc_tune(void)
{
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 2 << 20); /* fixed values end glibc's dynamic ones */
    mallopt(M_TRIM_THRESHOLD, 8 << 20);
#endif
}

int main(int argc, char **argv)
{
    malloc_tune();
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "config") == 0)
        return cmd_config(argc - 1, argv + 1);
    if (strcmp(cmd, "runtime") == 0)
        return cmd_runtime(argc - 1, argv + 1);
    if (strcmp(cmd, "envoy") == 0)
        return cmd_envoy(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0)
        return vsr_cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("vsr %s\n", VSR_VERSION);
        return 0;
    }
    if (is_help(cmd)) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vsr: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
