/*
 * eval.c — `vsr eval --prompt TEXT`: the routing preview of one prompt, as
 * the reference's `vllm-sr eval` prints it.  Online it posts to a running
 * vsr's management listener (one blocking HTTP/1.1 exchange, bounded in time
 * and size); offline (--config FILE) it compiles the document and runs the
 * same preview in process, where the signals that need the model runtime or
 * a remote model are not computed (the preview then shows them unmatched).
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin/admin.h"
#include "base/base.h"
#include "config/config.h"
#include "eval.h"
#include "http/http.h"
#include "json/json.h"
#include "routing/routing.h"

enum { EV_OK = 0, EV_RUNTIME = 1, EV_CONFIG = 2, EV_USAGE = 64 };

#define EVAL_MAX_ANSWER (8u << 20)  /* the preview's answer, at most */
#define EVAL_MAX_TOKEN 4096         /* a management token, at most */
#define EVAL_DEFAULT_ENDPOINT "http://127.0.0.1:8080"
#define EVAL_SHOWN 10               /* signals listed in the summary, at most */

static const char eval_usage[] =
    "usage: vsr eval --prompt TEXT [--model NAME] [--json]\n"
    "                [--endpoint URL [--token-file PATH | --token-env NAME] [--timeout SECONDS]\n"
    "                 | --config FILE]\n";

static const char eval_help[] =
    "  eval             what the router decides for one prompt: the signals that fired with their\n"
    "                   confidences, the decision and the model\n"
    "    --prompt TEXT  the user message to evaluate (required)\n"
    "    --model NAME   the model name the request would carry (default: the first auto model name)\n"
    "    --json         the routing preview's JSON answer (with the evaluation trace) instead of a summary\n"
    "    --endpoint URL a running vsr's management listener (default " EVAL_DEFAULT_ENDPOINT ")\n"
    "    --token-file P / --token-env N  its management bearer token, from file P or variable N\n"
    "    --timeout S    how long to wait for the answer (default 30, at most 600)\n"
    "    --config FILE  evaluate offline against a document instead (model-backed signals not computed)\n";

/* ---- the online path: one bounded HTTP/1.1 exchange ---- */

typedef struct {
    vsr_buf_t body;
    int status;
    int complete;
} answer_t;

static int on_head(void *ud, vsr_http_head_t *h)
{
    ((answer_t *)ud)->status = h->status;
    return VSR_OK;
}

static int on_body(void *ud, const char *p, size_t n)
{
    return vsr_buf_append(&((answer_t *)ud)->body, p, n) == VSR_OK ? VSR_OK : VSR_ERR_TOO_BIG;
}

static int on_complete(void *ud)
{
    ((answer_t *)ud)->complete = 1;
    return VSR_PAUSED;
}

/* http://HOST[:PORT][/...] → host, port (default 80).  IPv6 in brackets. */
static int parse_endpoint(const char *url, char *host, size_t cap, char *port, size_t pcap)
{
    if (strncmp(url, "http://", 7) != 0)
        return VSR_ERR_INVALID;
    const char *h = url + 7, *end = h + strcspn(h, "/?#");
    const char *hs = h, *he, *colon = NULL;
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (rb == NULL)
            return VSR_ERR_INVALID;
        hs = h + 1;
        he = rb;
        if (rb + 1 < end) {
            if (rb[1] != ':')
                return VSR_ERR_INVALID;
            colon = rb + 1;
        }
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        he = colon ? colon : end;
    }
    if (he == hs || (size_t)(he - hs) >= cap)
        return VSR_ERR_INVALID;
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    const char *ps = colon ? colon + 1 : "80", *pe = colon ? end : ps + 2;
    if (pe == ps || (size_t)(pe - ps) >= pcap)
        return VSR_ERR_INVALID;
    long v = 0;
    for (const char *q = ps; q < pe; q++) {
        if (*q < '0' || *q > '9')
            return VSR_ERR_INVALID;
        v = v * 10 + (*q - '0');
        if (v > 65535)
            return VSR_ERR_INVALID;
    }
    if (v < 1)
        return VSR_ERR_INVALID;
    memcpy(port, ps, (size_t)(pe - ps));
    port[pe - ps] = '\0';
    return VSR_OK;
}

/* Waits for fd to be ready for events until deadline; 1 ready, 0 timed out. */
static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = vsr_now_ms();
        if (now >= deadline_ms)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)(deadline_ms - now));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 0;
    }
}

/* Connects (non-blocking, bounded by deadline) to host:port; the fd or -1. */
static int dial(const char *host, const char *port, uint64_t deadline_ms, vsr_buf_t *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g != 0) {
        vsr_buf_printf(err, "cannot resolve %s: %s", host, gai_strerror(g));
        return -1;
    }
    int fd = -1, last = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            int soerr = ETIMEDOUT;
            socklen_t sl = sizeof(soerr);
            if (wait_fd(fd, POLLOUT, deadline_ms))
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            rc = soerr ? -1 : 0;
            errno = soerr;
        }
        if (rc != 0) {
            last = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        vsr_buf_printf(err, "cannot connect to %s:%s: %s", host, port, strerror(last ? last : ECONNREFUSED));
    return fd;
}

/* POSTs body to path on host:port and reads the answer into a->body. */
static int exchange(const char *host, const char *port, const char *path, const char *token, vsr_slice_t body,
                    uint64_t deadline_ms, answer_t *a, vsr_buf_t *err)
{
    int fd = dial(host, port, deadline_ms, err);
    if (fd < 0)
        return VSR_ERR_IO;
    vsr_buf_t req;
    vsr_buf_init(&req, 0);
    vsr_buf_printf(&req, "POST %s HTTP/1.1\r\nhost: %s%s%s:%s\r\ncontent-type: application/json\r\n"
                   "content-length: %zu\r\nconnection: close\r\n", path, strchr(host, ':') ? "[" : "", host,
                   strchr(host, ':') ? "]" : "", port, body.len);
    if (token)
        vsr_buf_printf(&req, "authorization: Bearer %s\r\n", token);
    vsr_buf_append_cstr(&req, "\r\n");
    vsr_buf_append_slice(&req, body);
    int rc = VSR_OK;
    for (size_t off = 0; rc == VSR_OK && off < req.len;) {
        ssize_t n = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && (errno == EAGAIN || errno == EINTR) && wait_fd(fd, POLLOUT, deadline_ms))
            continue;
        else
            rc = VSR_ERR_IO;
    }
    if (token)
        memset(req.data, 0, req.len);
    vsr_buf_free(&req);
    vsr_http_limits_t lim = {.max_body = EVAL_MAX_ANSWER};
    vsr_http_callbacks_t cb = {on_head, on_body, on_complete};
    vsr_http_parser_t p;
    vsr_http_parser_init(&p, VSR_HTTP_RESPONSE, &lim, &cb, a);
    char chunk[16384];
    while (rc == VSR_OK && !a->complete) {
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_fd(fd, POLLIN, deadline_ms)) {
                vsr_buf_printf(err, "no answer from %s:%s in time", host, port);
                rc = VSR_ERR_IO;
            }
            continue;
        }
        if (n < 0) {
            vsr_buf_printf(err, "reading from %s:%s: %s", host, port, strerror(errno));
            rc = VSR_ERR_IO;
        } else if (n == 0) {
            if (vsr_http_parser_finish(&p) != VSR_OK || !a->complete) {
                vsr_buf_printf(err, "%s:%s closed the connection before its answer was complete", host, port);
                rc = VSR_ERR_IO;
            }
            break;
        } else if (vsr_http_parser_execute(&p, chunk, (size_t)n) < 0) {
            vsr_buf_printf(err, "%s:%s: %s", host, port,
                           a->body.len >= EVAL_MAX_ANSWER ? "the answer is too large" : "not an HTTP/1.1 answer");
            rc = VSR_ERR_INVALID;
        }
    }
    vsr_http_parser_free(&p);
    close(fd);
    return rc;
}

/* The management token from a file or a variable (trailing white space
 * dropped); NULL with a message in err when the named source has none. */
static char *read_token(const char *file, const char *env, vsr_buf_t *err)
{
    char *tok = NULL;
    size_t len = 0;
    if (file) {
        if (vsr_admin_read_file(file, &tok, &len, err) != VSR_OK)
            return NULL;
    } else {
        const char *v = getenv(env);
        if (v == NULL) {
            vsr_buf_printf(err, "environment variable %s is not set\n", env);
            return NULL;
        }
        tok = vsr_strdup(v);
        len = strlen(tok);
    }
    while (len > 0 && (tok[len - 1] == '\n' || tok[len - 1] == '\r' || tok[len - 1] == ' ' || tok[len - 1] == '\t'))
        tok[--len] = '\0';
    int ok = len > 0 && len <= EVAL_MAX_TOKEN;
    for (size_t i = 0; ok && i < len; i++)
        ok = tok[i] > 0x20 && tok[i] < 0x7f;
    if (!ok) {
        vsr_buf_printf(err, "the management token must be 1 to %d visible ASCII characters\n", EVAL_MAX_TOKEN);
        memset(tok, 0, len);
        vsr_free(tok);
        return NULL;
    }
    return tok;
}

/* ---- the summary ---- */

typedef struct {
    vsr_slice_t key;
    double conf;
} fired_sig_t;

static int sig_cmp(const void *a, const void *b)
{
    const fired_sig_t *x = a, *y = b;
    if (x->conf != y->conf)
        return x->conf < y->conf ? 1 : -1;
    size_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
    int c = memcmp(x->key.p, y->key.p, n);
    return c ? c : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

static void print_str(const vsr_json_t *j, uint32_t t, vsr_pool_t *pool, const char *label, const char *none)
{
    vsr_slice_t s = VSR_SLICE_NULL;
    if (vsr_json_is(j, t, VSR_JSON_STRING))
        vsr_json_string(j, t, pool, &s);
    if (s.len)
        printf("%s: %.*s\n", label, (int)s.len, s.p);
    else if (none)
        printf("%s: %s\n", label, none);
}

/* The readable form of a preview answer (the reference's `eval` layout):
 * the model the request named, the recipe, the decision, its algorithm and
 * plugins, the model selected, then the signals that fired (highest
 * confidence first) and how many were evaluated without firing. */
static int print_summary(const char *model, vsr_slice_t answer)
{
    vsr_json_t j;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    int rc = vsr_json_parse(&j, answer.p, answer.len, NULL);
    if (rc != VSR_OK || vsr_json_type(&j, 0) != VSR_JSON_OBJECT) {
        fprintf(stderr, "vsr: the routing preview's answer is not a JSON object\n");
        vsr_json_free(&j);
        vsr_pool_free(&pool);
        return EV_RUNTIME;
    }
    if (model)
        printf("model: %s\n", model);
    print_str(&j, vsr_json_member(&j, 0, "recipe"), &pool, "recipe", NULL);
    uint32_t dr = vsr_json_member(&j, 0, "decision_result");
    print_str(&j, vsr_json_member(&j, dr, "decision_name"), &pool, "decision", "(none)");
    if (vsr_json_is(&j, dr, VSR_JSON_OBJECT)) {
        print_str(&j, vsr_json_member(&j, dr, "algorithm"), &pool, "algorithm", NULL);
        double c;
        if (vsr_json_number(&j, vsr_json_member(&j, dr, "confidence"), &c) == VSR_OK)
            printf("confidence: %.2f\n", c);
        uint32_t pl = vsr_json_member(&j, dr, "plugins");
        if (vsr_json_is(&j, pl, VSR_JSON_ARRAY) && j.toks[pl].count) {
            printf("plugins: ");
            uint32_t t = pl + 1;
            for (uint32_t i = 0; i < j.toks[pl].count; i++, t = j.toks[t].next) {
                vsr_slice_t s = VSR_SLICE_NULL;
                if (vsr_json_is(&j, t, VSR_JSON_STRING))
                    vsr_json_string(&j, t, &pool, &s);
                printf("%s%.*s", i ? ", " : "", (int)s.len, s.p ? s.p : "");
            }
            printf("\n");
        }
    }
    print_str(&j, vsr_json_member(&j, 0, "selected_model"), &pool, "selected model", "(none)");
    print_str(&j, vsr_json_member(&j, 0, "selection_status"), &pool, "selection", NULL);
    uint32_t sc = vsr_json_member(&j, 0, "signal_confidences");
    size_t n = vsr_json_is(&j, sc, VSR_JSON_OBJECT) ? j.toks[sc].count : 0, fired = 0;
    fired_sig_t *sigs = n ? vsr_malloc(n * sizeof(*sigs)) : NULL;
    uint32_t k = sc + 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = j.toks[k].next;
        double c = 0;
        if (vsr_json_number(&j, v, &c) == VSR_OK && c > 0) {
            vsr_json_string(&j, k, &pool, &sigs[fired].key);
            sigs[fired++].conf = c;
        }
        k = j.toks[v].next;
    }
    if (fired)
        qsort(sigs, fired, sizeof(*sigs), sig_cmp);
    printf("matched signals: %zu\n", fired);
    for (size_t i = 0; i < fired && i < EVAL_SHOWN; i++)
        printf("  - %.*s: %.2f\n", (int)sigs[i].key.len, sigs[i].key.p, sigs[i].conf);
    if (fired > EVAL_SHOWN)
        printf("  ... and %zu more\n", fired - EVAL_SHOWN);
    printf("unmatched signals: %zu\n", n - fired);
    vsr_free(sigs);
    vsr_json_free(&j);
    vsr_pool_free(&pool);
    return EV_OK;
}

/* ---- the command ---- */

static int eval_offline(const char *path, vsr_slice_t model, vsr_slice_t text, vsr_buf_t *out)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 1 << 20);
    vsr_config_t *cfg = NULL;
    vsr_engine_t *engine = NULL;
    int rc = vsr_config_load_file(path, &cfg, &err);
    if (rc == VSR_OK && (engine = vsr_engine_new(cfg, 1, &err)) == NULL)
        rc = VSR_ERR_INVALID;
    if (rc != VSR_OK) {
        fprintf(stderr, "%s", err.len ? err.data : "configuration error\n");
        vsr_buf_free(&err);
        vsr_config_free(cfg);
        return EV_CONFIG;
    }
    vsr_buf_free(&err);
    if (model.len == 0)
        model = vsr_slice_cstr(cfg->auto_model_names.n ? cfg->auto_model_names.items[0] : "");
    int status = vsr_engine_preview(engine, model, text, 1, out);
    vsr_engine_unref(engine);
    vsr_config_free(cfg);
    if (status != 200) {
        fprintf(stderr, "vsr: %.*s\n", (int)out->len, out->data ? out->data : "");
        return EV_RUNTIME;
    }
    return EV_OK;
}

static int eval_online(const char *endpoint, const char *token, vsr_slice_t model, vsr_slice_t text,
                       uint64_t timeout_ms, vsr_buf_t *out)
{
    char host[256], port[8];
    if (parse_endpoint(endpoint, host, sizeof(host), port, sizeof(port)) != VSR_OK) {
        fprintf(stderr, "vsr: --endpoint takes http://HOST:PORT (the management listener), got \"%s\"\n", endpoint);
        return EV_USAGE;
    }
    vsr_buf_t body, err;
    vsr_buf_init(&body, 0);
    vsr_buf_init(&err, 0);
    vsr_buf_append_cstr(&body, "{\"text\":");
    vsr_buf_append_json_string(&body, text);
    if (model.len) {
        vsr_buf_append_cstr(&body, ",\"model\":");
        vsr_buf_append_json_string(&body, model);
    }
    vsr_buf_append_cstr(&body, "}");
    answer_t a = {.status = 0};
    vsr_buf_init(&a.body, EVAL_MAX_ANSWER);
    int rc = exchange(host, port, "/api/v1/routing/preview?trace=true", token, vsr_buf_slice(&body),
                      vsr_now_ms() + timeout_ms, &a, &err);
    int code = EV_OK;
    if (rc != VSR_OK) {
        fprintf(stderr, "vsr: %.*s\n", (int)err.len, err.data ? err.data : "");
        code = EV_RUNTIME;
    } else if (a.status != 200) {
        /* the router's own error message, when it sent one */
        vsr_json_t j;
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        vsr_slice_t msg = VSR_SLICE_NULL;
        if (vsr_json_parse(&j, a.body.data ? a.body.data : "", a.body.len, NULL) == VSR_OK)
            vsr_json_string(&j, vsr_json_member(&j, vsr_json_member(&j, 0, "error"), "message"), &pool, &msg);
        vsr_buf_t m;
        vsr_buf_init(&m, 0);
        vsr_json_append_client_text(&m, msg.len ? msg : vsr_buf_slice(&a.body), 1024);
        fprintf(stderr, "vsr: the router answered %d: %.*s\n", a.status, (int)m.len, m.data ? m.data : "");
        vsr_buf_free(&m);
        vsr_json_free(&j);
        vsr_pool_free(&pool);
        code = EV_RUNTIME;
    } else {
        vsr_buf_append_slice(out, vsr_buf_slice(&a.body));
    }
    vsr_buf_free(&a.body);
    vsr_buf_free(&body);
    vsr_buf_free(&err);
    return code;
}

int vsr_cmd_eval(int argc, char **argv)
{
    const char *prompt = NULL, *model = NULL, *endpoint = NULL, *config = NULL, *tfile = NULL, *tenv = NULL;
    int json = 0, ok = 1;
    long timeout_s = 30;
    for (int i = 1; ok && i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("%s%s", eval_usage, eval_help);
            return EV_OK;
        }
        const char **slot = strcmp(a, "--prompt") == 0       ? &prompt
                            : strcmp(a, "--model") == 0      ? &model
                            : strcmp(a, "--endpoint") == 0   ? &endpoint
                            : strcmp(a, "--config") == 0     ? &config
                            : strcmp(a, "--token-file") == 0 ? &tfile
                            : strcmp(a, "--token-env") == 0  ? &tenv
                                                             : NULL;
        if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--timeout") == 0 && v) {
            char *end;
            timeout_s = strtol(v, &end, 10);
            ok = *end == '\0' && timeout_s >= 1 && timeout_s <= 600;
            i++;
        } else if (slot && v && *slot == NULL) {
            *slot = v;
            i++;
        } else {
            ok = 0;
        }
    }
    vsr_slice_t text = vsr_slice_trim(vsr_slice_cstr(prompt ? prompt : ""));
    if (!ok || text.len == 0 || (config && (endpoint || tfile || tenv)) || (tfile && tenv)) {
        fprintf(stderr, "%s", eval_usage);
        if (ok && text.len == 0)
            fprintf(stderr, "vsr: --prompt must be non-empty\n");
        else if (ok && config && (endpoint || tfile || tenv))
            fprintf(stderr, "vsr: --config evaluates offline; it does not go with --endpoint or a token\n");
        return EV_USAGE;
    }
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    int code;
    if (config) {
        code = eval_offline(config, vsr_slice_cstr(model ? model : ""), text, &out);
    } else {
        char *token = NULL;
        if (tfile || tenv) {
            vsr_buf_t err;
            vsr_buf_init(&err, 0);
            token = read_token(tfile, tenv, &err);
            if (token == NULL) {
                fprintf(stderr, "vsr: %s: %.*s", tfile ? "--token-file" : "--token-env", (int)err.len,
                        err.data ? err.data : "\n");
                vsr_buf_free(&err);
                vsr_buf_free(&out);
                return EV_USAGE;
            }
            vsr_buf_free(&err);
        }
        code = eval_online(endpoint ? endpoint : EVAL_DEFAULT_ENDPOINT, token, vsr_slice_cstr(model ? model : ""),
                           text, (uint64_t)timeout_s * 1000, &out);
        if (token) {
            memset(token, 0, strlen(token));
            vsr_free(token);
        }
    }
    if (code == EV_OK) {
        if (json)
            printf("%.*s\n", (int)out.len, out.data);
        else
            code = print_summary(model, vsr_buf_slice(&out));
    }
    vsr_buf_free(&out);
    return code;
}
