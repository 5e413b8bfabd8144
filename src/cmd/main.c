/*
 * main.c — the command line and the composition root: the only place that
 * wires configuration, gateway and upstream together.
 *
 *   vsr serve [--config FILE] [--workers N] [--gateway standalone] [--log-level LEVEL]
 *   vsr config validate FILE
 *   vsr version
 *
 * Exit codes: 0 success, 1 runtime failure (e.g. a port in use), 2 usage or
 * configuration error (nothing was started).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/base.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "obs/obs.h"
#include "routing/routing.h"
#include "upstream/upstream.h"

#define VSR_VERSION "0.1.0"
#define DEFAULT_CONFIG "config/config.yaml"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vsr serve [--config FILE] [--workers N] [--gateway standalone] [--log-level LEVEL]\n"
            "                 [--drain-timeout SECONDS] [--access-log PATH|-|off] [--metrics-listen ADDR:PORT|off]\n"
            "       vsr config validate FILE\n"
            "       vsr version\n"
            "\n"
            "  serve            run the router: an OpenAI-compatible endpoint and reverse proxy\n"
            "    --config FILE  the v0.3 configuration document (default " DEFAULT_CONFIG ")\n"
            "    --workers N    worker threads, each with its own event loop (default: cores)\n"
            "    --gateway MODE standalone (the only mode so far)\n"
            "    --log-level L  debug, info, warn or error (default info)\n"
            "    --drain-timeout S  on SIGTERM/SIGINT, how long in-flight requests may take (default 30)\n"
            "    --access-log P one JSON line per request to P (a file), - (standard output, default) or off\n"
            "    --metrics-listen A:P  Prometheus /metrics on address:port (default 127.0.0.1:9190), or off\n"
            "  config validate  check a configuration document; exit 0 when valid, 2 when not\n");
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

static int cmd_config(int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "validate") != 0) {
        usage(stderr);
        return 2;
    }
    vsr_config_t *cfg = NULL;
    vsr_engine_t *engine = NULL;
    if (load_config(argv[2], &cfg, &engine) != VSR_OK)
        return 2;
    vsr_config_warn_unimplemented(cfg);
    vsr_engine_unref(engine);
    printf("%s: valid (%zu listener%s, %zu model%s)\n", argv[2], cfg->n_listeners, cfg->n_listeners == 1 ? "" : "s",
           cfg->n_models, cfg->n_models == 1 ? "" : "s");
    vsr_config_free(cfg);
    return 0;
}

typedef struct {
    uv_signal_t sigint, sigterm;
    vsr_gateway_t *gw;
    vsr_upstream_shared_t *shared;
    uint64_t drain_timeout_ms;
    int draining;
} serve_t;

static void shutdown_now(serve_t *sv)
{
    if (sv->gw == NULL)
        return;
    vsr_upstream_health_stop(sv->shared);
    vsr_gateway_stop(sv->gw);
    sv->gw = NULL;
    uv_close((uv_handle_t *)&sv->sigint, NULL);
    uv_close((uv_handle_t *)&sv->sigterm, NULL);
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

static int cmd_serve(int argc, char **argv)
{
    const char *path = DEFAULT_CONFIG;
    long workers = 0;
    double drain_s = 30;
    const char *access_log = "-";
    char maddr[64] = "127.0.0.1"; /* --metrics-listen, default 127.0.0.1:9190 */
    uint16_t mport = 9190;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--config") == 0 && v) {
            path = v;
            i++;
        } else if (strcmp(a, "--workers") == 0 && v) {
            char *end;
            workers = strtol(v, &end, 10);
            if (*end || workers < 1 || workers > 1024) {
                fprintf(stderr, "vsr: --workers takes a number from 1 to 1024\n");
                return 2;
            }
            i++;
        } else if (strcmp(a, "--access-log") == 0 && v) {
            access_log = v;
            i++;
        } else if (strcmp(a, "--metrics-listen") == 0 && v) {
            if (strcmp(v, "off") == 0) {
                mport = 0;
            } else {
                const char *colon = strrchr(v, ':');
                long p = colon ? strtol(colon + 1, NULL, 10) : 0;
                if (colon == NULL || (size_t)(colon - v) >= sizeof(maddr) || p < 1 || p > 65535) {
                    fprintf(stderr, "vsr: --metrics-listen takes ADDRESS:PORT or off\n");
                    return 2;
                }
                memcpy(maddr, v, (size_t)(colon - v));
                maddr[colon - v] = '\0';
                mport = (uint16_t)p;
            }
            i++;
        } else if (strcmp(a, "--drain-timeout") == 0 && v) {
            char *end;
            drain_s = strtod(v, &end);
            if (*end || drain_s < 0 || drain_s > 86400) {
                fprintf(stderr, "vsr: --drain-timeout takes seconds from 0 to 86400\n");
                return 2;
            }
            i++;
        } else if (strcmp(a, "--gateway") == 0 && v) {
            if (strcmp(v, "standalone") != 0) {
                fprintf(stderr, "vsr: --gateway %s is not supported yet (only standalone)\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--log-level") == 0 && v) {
            int lvl = parse_level(v);
            if (lvl < 0) {
                fprintf(stderr, "vsr: --log-level takes debug, info, warn or error\n");
                return 2;
            }
            vsr_log_min_level = (vsr_log_level_t)lvl;
            i++;
        } else {
            fprintf(stderr, "vsr: unknown or incomplete option \"%s\"\n", a);
            usage(stderr);
            return 2;
        }
    }

    vsr_config_t *cfg = NULL;
    vsr_engine_t *engine = NULL;
    if (load_config(path, &cfg, &engine) != VSR_OK)
        return 2;
    vsr_config_warn_unimplemented(cfg);

    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    serve_t sv;
    memset(&sv, 0, sizeof(sv));
    sv.drain_timeout_ms = (uint64_t)(drain_s * 1000);
    /* signal handlers first, so a signal during start-up is not lost */
    uv_signal_init(loop, &sv.sigint);
    uv_signal_init(loop, &sv.sigterm);
    sv.sigint.data = sv.sigterm.data = &sv;
    uv_signal_start(&sv.sigint, on_signal, SIGINT);
    uv_signal_start(&sv.sigterm, on_signal, SIGTERM);

    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 16);
    vsr_gateway_opts_t gopts;
    memset(&gopts, 0, sizeof(gopts));
    gopts.workers = workers ? (unsigned)workers : uv_available_parallelism();
    gopts.metrics_address = maddr;
    gopts.metrics_port = mport;
    gopts.metrics = vsr_metrics_new(gopts.workers);
    vsr_metrics_set_config_version(gopts.metrics, vsr_engine_version(engine));
    vsr_metrics_count_activation(gopts.metrics);
    if (strcmp(access_log, "off") != 0)
        gopts.access_log = vsr_access_log_open(access_log, 0, &err);
    int tracing_ok = 1;
    if (cfg->tracing_enabled) {
        vsr_tracer_opts_t to = {.endpoint = cfg->tracing_endpoint, .service_name = cfg->tracing_service_name,
                                .service_version = cfg->tracing_service_version,
                                .environment = cfg->tracing_environment,
                                .sampling_ratio = cfg->tracing_sampling_ratio};
        gopts.tracer = vsr_tracer_new(&to, &err);
        tracing_ok = gopts.tracer != NULL;
    }
    vsr_metrics_attach(gopts.metrics, gopts.access_log, gopts.tracer);
    sv.shared = tracing_ok ? vsr_upstream_shared_new(cfg, &err) : NULL;
    sv.gw = sv.shared && (gopts.access_log || strcmp(access_log, "off") == 0)
                ? vsr_gateway_start(cfg, engine, sv.shared, &gopts, &err)
                : NULL;
    if (sv.gw == NULL) {
        fprintf(stderr, "vsr: %s", err.len ? err.data : "cannot start\n");
        /* nothing runs: the signal handles close on the loop's last run below */
        uv_close((uv_handle_t *)&sv.sigint, NULL);
        uv_close((uv_handle_t *)&sv.sigterm, NULL);
        rc = 1;
    } else {
        /* the control thread: active health checks run on its loop */
        vsr_upstream_health_start(sv.shared, loop);
        for (size_t i = 0; i < cfg->n_listeners; i++)
            vsr_log_info("vsr", "listener %s on %s:%u", cfg->listeners[i].name, cfg->listeners[i].address,
                         (unsigned)cfg->listeners[i].port);
        vsr_log_info("vsr", "vsr %s serving %s with %u workers", VSR_VERSION, path, vsr_gateway_workers(sv.gw));
    }
    uv_run(loop, UV_RUN_DEFAULT); /* until the signals are closed: after drain, stop, or a failed start */
    uv_loop_close(loop);
    if (rc == 0)
        vsr_log_info("vsr", "stopped");
    vsr_buf_free(&err);
    vsr_upstream_shared_free(sv.shared);
    vsr_access_log_close(gopts.access_log);
    vsr_tracer_free(gopts.tracer); /* flushes what is queued, bounded */
    vsr_metrics_free(gopts.metrics);
    vsr_engine_unref(engine);
    vsr_config_free(cfg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "config") == 0)
        return cmd_config(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("vsr %s\n", VSR_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vsr: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
