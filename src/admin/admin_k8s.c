/*
 * admin_k8s.c — the Kubernetes source (global.router.config_source:
 * kubernetes).
 *
 * The reference router's resources, vllm.ai/v1alpha1 IntelligentPool (the
 * models) and IntelligentRoute (signals and decisions), are read from the
 * pod's namespace through the Kubernetes API with the pod's service account,
 * listed and then watched.  The configuration file stays the base: each new
 * generation of the pair is turned into the file's document with
 * routing.modelCards, routing.signals and routing.decisions (and
 * providers.defaults.model) taken from the resources, and that document goes
 * through vsr_admin_apply like any other (source "kubernetes").  The outcome
 * is written where the reference writes it: the Ready condition,
 * observedGeneration and the counts in each resource's status (a merge patch
 * on the status subresource).  One pool and one route are expected, as in
 * the reference; more of either is a conflict reported in every one's status.
 *
 * Transport: a small blocking HTTP/1.1 client over OpenSSL on two threads of
 * its own (one per resource kind), never on a loop.  Each connection has a
 * connect timeout, a 250 ms receive tick (to notice shutdown) and an overall
 * deadline (a list or a patch: 30 s; a watch: idle for longer than the
 * watch's own timeout plus a margin); everything read is bounded by the
 * management API's document size limit.  A blocking client is simpler than
 * driving upstream/tls.c's loop-bound sessions from a thread, and its waits
 * are all bounded.
 */
#include "admin/admin-int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "json/json.h"

#define K8S_GROUP_VERSION "vllm.ai/v1alpha1"
#define K8S_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define K8S_MAX_OBJECTS 16           /* per kind: more is a conflict all the same */
#define K8S_HEAD_MAX 16384           /* a response's status line and headers */
#define K8S_TOKEN_MAX 65536
#define K8S_TICK_MS 250              /* receive timeout: how soon a stop is seen */
#define K8S_CONNECT_MS 5000
#define K8S_REQUEST_MS 30000         /* a list or a patch, whole */
#define K8S_WATCH_S 300              /* the watch's timeoutSeconds */
#define K8S_WATCH_IDLE_MS ((K8S_WATCH_S + 30) * 1000)
#define K8S_BACKOFF_MIN_MS 500
#define K8S_BACKOFF_MAX_MS 30000
#define K8S_MESSAGE_MAX 32768        /* a condition's message (the CRD's maxLength) */

typedef struct {
    char *name;
    int64_t generation;
    char *json;         /* the object as last listed or watched */
    char *status_memo;  /* what was last written to its status */
} k8s_obj_t;

typedef struct {
    const char *kind;
    const char *plural;
    k8s_obj_t objs[K8S_MAX_OBJECTS];
    size_t n;
    int overflow;       /* more than K8S_MAX_OBJECTS were seen */
    int listed;
} k8s_kind_t;

enum { KIND_POOL, KIND_ROUTE, N_KINDS };

typedef struct {
    vsr_admin_k8s_t *k;
    int kind;
} k8s_thread_arg_t;

struct vsr_admin_k8s_s {
    vsr_admin_t *a;
    char *base_path;
    char *host;
    char *port;
    char *token_path;
    char *ns;
    SSL_CTX *ctx;
    atomic_int stop;
    pthread_mutex_t mu; /* kinds[], applied, reconciles */
    k8s_kind_t kinds[N_KINDS];
    char applied[512];  /* the pool and route generations last applied */
    pthread_t threads[N_KINDS];
    k8s_thread_arg_t args[N_KINDS];
    int n_threads;
};

static int stopping(vsr_admin_k8s_t *k)
{
    return atomic_load(&k->stop) || vsr__admin_closed(k->a);
}

/* Sleeps ms, waking early on stop; 0 when stopped. */
static int nap(vsr_admin_k8s_t *k, uint64_t ms)
{
    uint64_t end = vsr_now_ms() + ms;
    while (!stopping(k)) {
        uint64_t now = vsr_now_ms();
        if (now >= end)
            return 1;
        uint64_t d = VSR_MIN(end - now, (uint64_t)100);
        poll(NULL, 0, (int)d);
    }
    return 0;
}

static char *read_small(const char *path, size_t max)
{
    char *doc = NULL;
    size_t len = 0;
    vsr_buf_t err;
    vsr_buf_init(&err, 1024);
    int rc = vsr_admin_read_file(path, &doc, &len, &err);
    vsr_buf_free(&err);
    if (rc != VSR_OK)
        return NULL;
    if (len > max) {
        vsr_free(doc);
        return NULL;
    }
    while (len > 0 && (doc[len - 1] == '\n' || doc[len - 1] == '\r' || doc[len - 1] == ' ' || doc[len - 1] == '\t'))
        doc[--len] = '\0';
    return doc;
}

/* ---- a connection ------------------------------------------------------------- */

typedef struct {
    vsr_admin_k8s_t *k;
    int fd;
    SSL *ssl;
    char in[16384];
    size_t in_off, in_len;
    uint64_t deadline;   /* monotonic ms */
    uint64_t idle_ms;    /* watch: the deadline moves on with every read */
    int status;
    int chunked;
    int64_t remaining;   /* content-length left (or -1: until EOF); chunked: bytes left in this chunk */
    int body_done;
} k8s_conn_t;

static void conn_close(k8s_conn_t *c)
{
    if (c->ssl) {
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

static int conn_open(vsr_admin_k8s_t *k, k8s_conn_t *c, uint64_t total_ms)
{
    memset(c, 0, sizeof(*c));
    c->k = k;
    c->fd = -1;
    c->deadline = vsr_now_ms() + total_ms;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(k->host, k->port, &hints, &res);
    if (gai != 0) {
        vsr_log_warn("k8s", "the API server %s: %s", k->host, gai_strerror(gai));
        return VSR_ERR_IO;
    }
    for (struct addrinfo *ai = res; ai && c->fd < 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {K8S_CONNECT_MS / 1000, (K8S_CONNECT_MS % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* bounds connect() too */
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            close(fd);
            continue;
        }
        struct timeval tick = {0, K8S_TICK_MS * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof(tick));
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->fd = fd;
    }
    freeaddrinfo(res);
    if (c->fd < 0) {
        vsr_log_warn("k8s", "cannot connect to the API server %s:%s: %s", k->host, k->port, strerror(errno));
        return VSR_ERR_IO;
    }
    c->ssl = SSL_new(k->ctx);
    if (c->ssl == NULL) {
        conn_close(c);
        return VSR_ERR_IO;
    }
    SSL_set_fd(c->ssl, c->fd);
    X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, k->host, ip) == 1 || inet_pton(AF_INET6, k->host, ip) == 1;
    int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, k->host)
                   : SSL_set1_host(c->ssl, k->host) && SSL_set_tlsext_host_name(c->ssl, k->host);
    for (;;) {
        if (!ok)
            break;
        int r = SSL_connect(c->ssl);
        if (r == 1)
            return VSR_OK;
        int e = SSL_get_error(c->ssl, r);
        if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && !stopping(k) && vsr_now_ms() < c->deadline)
            continue;
        unsigned long ec = ERR_peek_last_error();
        long vr = SSL_get_verify_result(c->ssl);
        vsr_log_warn("k8s", "TLS with the API server %s:%s failed: %s", k->host, k->port,
                     vr != X509_V_OK ? X509_verify_cert_error_string(vr)
                     : ec       ? ERR_reason_error_string(ec)
                                : "handshake did not complete");
        break;
    }
    ERR_clear_error();
    conn_close(c);
    return VSR_ERR_IO;
}

static int conn_write(k8s_conn_t *c, const char *p, size_t n)
{
    while (n > 0) {
        int r = SSL_write(c->ssl, p, (int)VSR_MIN(n, (size_t)INT32_MAX));
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        int e = SSL_get_error(c->ssl, r);
        if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && !stopping(c->k) &&
            vsr_now_ms() < c->deadline)
            continue;
        ERR_clear_error();
        return VSR_ERR_IO;
    }
    return VSR_OK;
}

/* More raw bytes into in[]: >0, 0 at EOF, -1 on error, stop or deadline. */
static int conn_fill(k8s_conn_t *c)
{
    if (c->in_off == c->in_len)
        c->in_off = c->in_len = 0;
    if (c->in_len == sizeof(c->in)) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
    for (;;) {
        int r = SSL_read(c->ssl, c->in + c->in_len, (int)(sizeof(c->in) - c->in_len));
        if (r > 0) {
            c->in_len += (size_t)r;
            if (c->idle_ms)
                c->deadline = vsr_now_ms() + c->idle_ms;
            return r;
        }
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && r == 0 && errno == 0)) {
            ERR_clear_error();
            return 0;
        }
        if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ||
             (e == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) &&
            !stopping(c->k) && vsr_now_ms() < c->deadline) {
            ERR_clear_error();
            continue;
        }
        ERR_clear_error();
        if (e == SSL_ERROR_SYSCALL && r == 0)
            return 0; /* the peer went away without close_notify */
        return -1;
    }
}

/* One CRLF-terminated line of raw bytes (without the CRLF) into line[cap]. */
static int conn_line(k8s_conn_t *c, char *line, size_t cap)
{
    size_t n = 0;
    for (;;) {
        while (c->in_off < c->in_len) {
            char ch = c->in[c->in_off++];
            if (ch == '\n') {
                if (n > 0 && line[n - 1] == '\r')
                    n--;
                line[n] = '\0';
                return VSR_OK;
            }
            if (n + 1 >= cap)
                return VSR_ERR_TOO_BIG;
            line[n++] = ch;
        }
        if (conn_fill(c) <= 0)
            return VSR_ERR_IO;
    }
}

/* Sends the request and reads the status line and headers. */
static int conn_request(k8s_conn_t *c, const char *method, const char *target, const char *ctype, const char *body,
                        size_t body_len)
{
    vsr_admin_k8s_t *k = c->k;
    vsr_buf_t req;
    vsr_buf_init(&req, 0);
    int v6 = strchr(k->host, ':') != NULL;
    vsr_buf_printf(&req, "%s %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUser-Agent: vsr\r\nAccept: application/json\r\n"
                   "Connection: close\r\n", method, target, v6 ? "[" : "", k->host, v6 ? "]" : "", k->port);
    char *token = k->token_path ? read_small(k->token_path, K8S_TOKEN_MAX) : NULL; /* projected tokens rotate */
    int token_ok = token && token[0];
    for (const char *p = token; token_ok && *p; p++)
        token_ok = *p > ' ' && *p < 0x7f; /* a header line's worth of visible ASCII, nothing more */
    if (token_ok)
        vsr_buf_printf(&req, "Authorization: Bearer %s\r\n", token);
    else if (token)
        vsr_log_warn("k8s", "%s does not hold a token (visible ASCII); asking without one", k->token_path);
    if (token) {
        memset(token, 0, strlen(token));
        vsr_free(token);
    }
    if (body)
        vsr_buf_printf(&req, "Content-Type: %s\r\nContent-Length: %zu\r\n", ctype, body_len);
    vsr_buf_append_cstr(&req, "\r\n");
    if (body)
        vsr_buf_append(&req, body, body_len);
    int rc = conn_write(c, req.data, req.len);
    memset(req.data, 0, req.len);
    vsr_buf_free(&req);
    if (rc != VSR_OK)
        return rc;

    char line[1024];
    size_t head = 0;
    if (conn_line(c, line, sizeof(line)) != VSR_OK || strncmp(line, "HTTP/1.", 7) != 0 || strlen(line) < 12)
        return VSR_ERR_IO;
    c->status = (int)strtol(line + 9, NULL, 10);
    c->remaining = -1;
    for (;;) {
        if (conn_line(c, line, sizeof(line)) != VSR_OK)
            return VSR_ERR_IO;
        head += strlen(line) + 2;
        if (head > K8S_HEAD_MAX)
            return VSR_ERR_TOO_BIG;
        if (line[0] == '\0')
            break;
        char *colon = strchr(line, ':');
        if (colon == NULL)
            continue;
        *colon = '\0';
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        if (strcasecmp(line, "content-length") == 0)
            c->remaining = strtoll(v, NULL, 10);
        else if (strcasecmp(line, "transfer-encoding") == 0 && strcasestr(v, "chunked") != NULL)
            c->chunked = 1;
    }
    if (c->chunked)
        c->remaining = 0; /* a chunk size line comes first */
    else if (c->remaining == 0)
        c->body_done = 1;
    return VSR_OK;
}

/* Up to n bytes of the (decoded) body: >0, 0 at its end, -1 on error. */
static int conn_body(k8s_conn_t *c, char *dst, size_t n)
{
    if (c->body_done)
        return 0;
    if (c->chunked && c->remaining == 0) {
        char line[128];
        if (conn_line(c, line, sizeof(line)) != VSR_OK)
            return -1;
        char *end;
        long long size = strtoll(line, &end, 16);
        if (end == line || size < 0)
            return -1;
        if (size == 0) {
            c->body_done = 1; /* trailers are not read: the connection is closed */
            return 0;
        }
        c->remaining = size;
    }
    if (c->in_off == c->in_len) {
        int r = conn_fill(c);
        if (r < 0)
            return -1;
        if (r == 0) {
            if (c->chunked || c->remaining > 0)
                return -1; /* cut short */
            c->body_done = 1;
            return 0;
        }
    }
    size_t avail = c->in_len - c->in_off;
    size_t take = VSR_MIN(avail, n);
    if (c->remaining >= 0)
        take = VSR_MIN(take, (size_t)c->remaining);
    memcpy(dst, c->in + c->in_off, take);
    c->in_off += take;
    if (c->remaining >= 0) {
        c->remaining -= (int64_t)take;
        if (c->chunked && c->remaining == 0) {
            char crlf[8];
            if (conn_line(c, crlf, sizeof(crlf)) != VSR_OK)
                return -1;
        } else if (!c->chunked && c->remaining == 0) {
            c->body_done = 1;
        }
    }
    return (int)take;
}

/* The whole body into out (bounded by out's cap). */
static int conn_read_body(k8s_conn_t *c, vsr_buf_t *out)
{
    char tmp[8192];
    for (;;) {
        int r = conn_body(c, tmp, sizeof(tmp));
        if (r == 0)
            return VSR_OK;
        if (r < 0)
            return VSR_ERR_IO;
        if (vsr_buf_append(out, tmp, (size_t)r) != VSR_OK)
            return VSR_ERR_TOO_BIG;
    }
}

static uint64_t max_bytes(vsr_admin_k8s_t *k)
{
    uint64_t max = VSR_CONFIG_MAX_DOCUMENT_BYTES;
    vsr_engine_t *e = vsr_admin_active(k->a);
    if (e) {
        uint64_t m = vsr_engine_config(e)->management_max_document_bytes;
        if (m > 0 && m < max)
            max = m;
        vsr_engine_unref(e);
    }
    return max;
}

/* ---- the objects -------------------------------------------------------------- */

static void obj_clear(k8s_obj_t *o)
{
    vsr_free(o->name);
    vsr_free(o->json);
    vsr_free(o->status_memo);
    memset(o, 0, sizeof(*o));
}

/* metadata.name, metadata.generation and metadata.resourceVersion of object o. */
static int obj_meta(const vsr_json_t *j, uint32_t o, vsr_pool_t *pool, vsr_slice_t *name, int64_t *gen,
                    vsr_slice_t *rv)
{
    uint32_t md, t;
    *gen = 0;
    if (rv)
        *rv = vsr_slice(NULL, 0);
    if (vsr_json_object_get(j, o, "metadata", &md) != VSR_OK || vsr_json_object_get(j, md, "name", &t) != VSR_OK ||
        vsr_json_string(j, t, pool, name) != VSR_OK || name->len == 0 || name->len > 253)
        return VSR_ERR_INVALID;
    double d;
    if (vsr_json_object_get(j, md, "generation", &t) == VSR_OK && vsr_json_number(j, t, &d) == VSR_OK)
        *gen = (int64_t)d;
    if (rv && vsr_json_object_get(j, md, "resourceVersion", &t) == VSR_OK)
        vsr_json_string(j, t, pool, rv);
    return VSR_OK;
}

static k8s_obj_t *kind_find(k8s_kind_t *kd, vsr_slice_t name)
{
    for (size_t i = 0; i < kd->n; i++)
        if (strlen(kd->objs[i].name) == name.len && memcmp(kd->objs[i].name, name.p, name.len) == 0)
            return &kd->objs[i];
    return NULL;
}

static void kind_put(k8s_kind_t *kd, vsr_slice_t name, int64_t gen, vsr_slice_t json)
{
    k8s_obj_t *o = kind_find(kd, name);
    if (o == NULL) {
        if (kd->n == K8S_MAX_OBJECTS) {
            kd->overflow = 1;
            return;
        }
        o = &kd->objs[kd->n++];
        o->name = vsr_strndup(name.p, name.len);
    }
    vsr_free(o->json);
    o->json = vsr_strndup(json.p, json.len);
    o->generation = gen;
}

static void kind_remove(k8s_kind_t *kd, vsr_slice_t name)
{
    k8s_obj_t *o = kind_find(kd, name);
    if (o == NULL)
        return;
    obj_clear(o);
    size_t i = (size_t)(o - kd->objs);
    memmove(&kd->objs[i], &kd->objs[i + 1], (kd->n - i - 1) * sizeof(*o));
    kd->n--;
    memset(&kd->objs[kd->n], 0, sizeof(*o));
}

static void kind_reset(k8s_kind_t *kd)
{
    for (size_t i = 0; i < kd->n; i++)
        obj_clear(&kd->objs[i]);
    kd->n = 0;
    kd->overflow = 0;
}

/* ---- status ------------------------------------------------------------------- */

static int key_is(const vsr_json_t *j, uint32_t k, const char *s)
{
    return vsr_json_string_eq(j, k, vsr_slice_cstr(s));
}

/* Counts for the status: the route's statistics, the pool's modelCount. */
static size_t spec_count(const vsr_json_t *j, const char *a, const char *b)
{
    uint32_t spec, t;
    if (vsr_json_object_get(j, 0, "spec", &spec) != VSR_OK)
        return 0;
    if (vsr_json_object_get(j, spec, a, &t) != VSR_OK)
        return 0;
    if (b && vsr_json_object_get(j, t, b, &t) != VSR_OK)
        return 0;
    return vsr_json_type(j, t) == VSR_JSON_ARRAY ? j->toks[t].count : 0;
}

static void patch_status(vsr_admin_k8s_t *k, int kind, k8s_obj_t *o, int ready, const char *reason, vsr_slice_t msg)
{
    vsr_buf_t memo;
    vsr_buf_init(&memo, 0);
    vsr_buf_printf(&memo, "%lld/%d/%s/", (long long)o->generation, ready, reason);
    vsr_buf_append_slice(&memo, msg);
    if (o->status_memo && strcmp(o->status_memo, memo.data) == 0) { /* already written */
        vsr_buf_free(&memo);
        return;
    }
    vsr_json_t j;
    int parsed = vsr_json_parse(&j, o->json, strlen(o->json), NULL) == VSR_OK;
    char ts[64];
    vsr__admin_rfc3339(vsr_wall_time(), ts);
    ts[19] = 'Z'; /* metav1.Time: seconds */
    ts[20] = '\0';
    vsr_buf_t body;
    vsr_buf_init(&body, 0);
    vsr_buf_printf(&body, "{\"status\":{\"observedGeneration\":%lld,\"conditions\":[{\"type\":\"Ready\","
                   "\"status\":\"%s\",\"reason\":\"%s\",\"message\":", (long long)o->generation,
                   ready ? "True" : "False", reason);
    vsr_buf_t text; /* valid UTF-8, cut to the CRD's bound */
    vsr_buf_init(&text, 0);
    vsr_json_append_client_text(&text, msg, K8S_MESSAGE_MAX - 16);
    vsr_buf_append_json_string(&body, vsr_buf_slice(&text));
    vsr_buf_free(&text);
    vsr_buf_printf(&body, ",\"lastTransitionTime\":\"%s\",\"observedGeneration\":%lld}", ts, (long long)o->generation);
    /* a merge patch replaces the list: the other writers' conditions go back as they are */
    uint32_t stt, conds;
    if (parsed && vsr_json_object_get(&j, 0, "status", &stt) == VSR_OK &&
        vsr_json_object_get(&j, stt, "conditions", &conds) == VSR_OK && vsr_json_type(&j, conds) == VSR_JSON_ARRAY) {
        uint32_t c = conds + 1;
        for (uint32_t i = 0; i < j.toks[conds].count; i++, c = j.toks[c].next) {
            uint32_t ty;
            if (vsr_json_type(&j, c) == VSR_JSON_OBJECT && vsr_json_object_get(&j, c, "type", &ty) == VSR_OK &&
                !key_is(&j, ty, "Ready")) {
                vsr_buf_append_cstr(&body, ",");
                vsr_buf_append_slice(&body, vsr_json_raw(&j, c));
            }
        }
    }
    vsr_buf_append_cstr(&body, "]");
    if (parsed && kind == KIND_POOL)
        vsr_buf_printf(&body, ",\"modelCount\":%zu", spec_count(&j, "models", NULL));
    else if (parsed)
        vsr_buf_printf(&body, ",\"statistics\":{\"decisions\":%zu,\"keywords\":%zu,\"embeddings\":%zu,\"domains\":%zu}",
                       spec_count(&j, "decisions", NULL), spec_count(&j, "signals", "keywords"),
                       spec_count(&j, "signals", "embeddings"), spec_count(&j, "signals", "domains"));
    vsr_buf_append_cstr(&body, "}}");
    vsr_json_free(&j);

    char target[1024];
    snprintf(target, sizeof(target), "/apis/%s/namespaces/%s/%s/%s/status", K8S_GROUP_VERSION, k->ns,
             k->kinds[kind].plural, o->name);
    k8s_conn_t c;
    int ok = 0;
    if (conn_open(k, &c, K8S_REQUEST_MS) == VSR_OK) {
        if (conn_request(&c, "PATCH", target, "application/merge-patch+json", body.data, body.len) == VSR_OK) {
            vsr_buf_t resp;
            vsr_buf_init(&resp, 1 << 20);
            conn_read_body(&c, &resp);
            ok = c.status >= 200 && c.status < 300;
            if (!ok)
                vsr_log_warn("k8s", "cannot write the status of %s %s (HTTP %d): %.*s", k->kinds[kind].kind, o->name,
                             c.status, (int)VSR_MIN(resp.len, (size_t)300), resp.data ? resp.data : "");
            vsr_buf_free(&resp);
        }
        conn_close(&c);
    }
    if (ok) {
        vsr_free(o->status_memo);
        o->status_memo = vsr_strndup(memo.data, memo.len);
    }
    vsr_buf_free(&memo);
    vsr_buf_free(&body);
}

/* ---- the document ------------------------------------------------------------- */

/* camelCase → snake_case (the canonical layout's spelling). */
static void put_key(vsr_buf_t *b, vsr_slice_t key, int keep)
{
    if (keep) {
        vsr_buf_append_json_string(b, key);
        return;
    }
    char tmp[256];
    size_t n = 0;
    for (size_t i = 0; i < key.len && n + 2 < sizeof(tmp); i++) {
        char ch = key.p[i];
        if (ch >= 'A' && ch <= 'Z') {
            if (n > 0)
                tmp[n++] = '_';
            ch = (char)(ch - 'A' + 'a');
        }
        tmp[n++] = ch;
    }
    vsr_buf_append_json_string(b, vsr_slice(tmp, n));
}

/* Value t with its object keys respelled (raw: copied as it is). */
static void put_value(vsr_buf_t *b, const vsr_json_t *j, uint32_t t, vsr_pool_t *pool)
{
    vsr_json_type_t ty = vsr_json_type(j, t);
    if (ty != VSR_JSON_OBJECT && ty != VSR_JSON_ARRAY) {
        vsr_buf_append_slice(b, vsr_json_raw(j, t));
        return;
    }
    vsr_buf_append_cstr(b, ty == VSR_JSON_OBJECT ? "{" : "[");
    uint32_t c = t + 1;
    for (uint32_t i = 0; i < j->toks[t].count; i++) {
        if (i)
            vsr_buf_append_cstr(b, ",");
        if (ty == VSR_JSON_OBJECT) {
            vsr_slice_t key;
            vsr_json_string(j, c, pool, &key);
            put_key(b, key, 0);
            vsr_buf_append_cstr(b, ":");
            c = j->toks[c].next;
        }
        put_value(b, j, c, pool);
        c = j->toks[c].next;
    }
    vsr_buf_append_cstr(b, ty == VSR_JSON_OBJECT ? "}" : "]");
}

/* IntelligentPool spec → modelCards (into cards) and the default model. */
static int convert_pool(const vsr_json_t *j, vsr_pool_t *pool, const char *name, vsr_buf_t *cards,
                        vsr_buf_t *models_out, vsr_slice_t *default_model, vsr_buf_t *err)
{
    uint32_t spec, models, t;
    *default_model = vsr_slice(NULL, 0);
    if (vsr_json_object_get(j, 0, "spec", &spec) != VSR_OK || vsr_json_type(j, spec) != VSR_JSON_OBJECT) {
        vsr_buf_printf(err, "IntelligentPool %s has no spec\n", name);
        return VSR_ERR_INVALID;
    }
    if (vsr_json_object_get(j, spec, "defaultModel", &t) == VSR_OK && vsr_json_type(j, t) == VSR_JSON_STRING)
        vsr_json_string(j, t, pool, default_model);
    vsr_buf_append_cstr(cards, "[");
    vsr_buf_append_cstr(models_out, "[");
    if (vsr_json_object_get(j, spec, "models", &models) == VSR_OK && vsr_json_type(j, models) == VSR_JSON_ARRAY) {
        uint32_t m = models + 1;
        for (uint32_t i = 0; i < j->toks[models].count; i++, m = j->toks[m].next) {
            if (vsr_json_type(j, m) != VSR_JSON_OBJECT) {
                vsr_buf_printf(err, "IntelligentPool %s: spec.models[%u] is not an object\n", name, i);
                return VSR_ERR_INVALID;
            }
            vsr_buf_append_cstr(cards, i ? ",{" : "{");
            uint32_t c = m + 1;
            for (uint32_t f = 0; f < j->toks[m].count; f++) {
                uint32_t v = j->toks[c].next;
                vsr_slice_t key;
                vsr_json_string(j, c, pool, &key);
                if (!key_is(j, c, "name") && !key_is(j, c, "loras")) {
                    vsr_buf_printf(err, "IntelligentPool %s: spec.models[%u].%.*s is not supported yet (vsr maps name "
                                   "and loras; set pricing and reasoning in the file's providers.models)\n",
                                   name, i, (int)VSR_MIN(key.len, (size_t)100), key.p);
                    return VSR_ERR_INVALID;
                }
                if (key_is(j, c, "name")) { /* a provider model of that name, for a base without models */
                    vsr_buf_append_cstr(models_out, vsr_buf_slice(models_out).len > 1 ? ",{\"name\":" : "{\"name\":");
                    put_value(models_out, j, v, pool);
                    vsr_buf_append_cstr(models_out, "}");
                }
                if (f)
                    vsr_buf_append_cstr(cards, ",");
                put_key(cards, key, 0);
                vsr_buf_append_cstr(cards, ":");
                put_value(cards, j, v, pool);
                c = j->toks[v].next;
            }
            vsr_buf_append_cstr(cards, "}");
        }
    }
    vsr_buf_append_cstr(cards, "]");
    vsr_buf_append_cstr(models_out, "]");
    return VSR_OK;
}

/* The route's signal families → the canonical names. */
static void put_signal_family(vsr_buf_t *b, const vsr_json_t *j, uint32_t k, vsr_pool_t *pool)
{
    if (key_is(j, k, "contextRules"))
        vsr_buf_append_cstr(b, "\"context\"");
    else if (key_is(j, k, "factCheckRules"))
        vsr_buf_append_cstr(b, "\"fact_check\"");
    else {
        vsr_slice_t key;
        vsr_json_string(j, k, pool, &key);
        put_key(b, key, 0);
    }
}

/* IntelligentRoute spec → routing.signals and routing.decisions. */
static int convert_route(const vsr_json_t *j, vsr_pool_t *pool, const char *name, vsr_buf_t *signals,
                         vsr_buf_t *decisions, vsr_buf_t *err)
{
    uint32_t spec, t;
    if (vsr_json_object_get(j, 0, "spec", &spec) != VSR_OK || vsr_json_type(j, spec) != VSR_JSON_OBJECT) {
        vsr_buf_printf(err, "IntelligentRoute %s has no spec\n", name);
        return VSR_ERR_INVALID;
    }
    vsr_buf_append_cstr(signals, "{");
    if (vsr_json_object_get(j, spec, "signals", &t) == VSR_OK && vsr_json_type(j, t) == VSR_JSON_OBJECT) {
        uint32_t c = t + 1;
        for (uint32_t i = 0; i < j->toks[t].count; i++) {
            if (i)
                vsr_buf_append_cstr(signals, ",");
            put_signal_family(signals, j, c, pool);
            vsr_buf_append_cstr(signals, ":");
            c = j->toks[c].next;
            put_value(signals, j, c, pool);
            c = j->toks[c].next;
        }
    }
    vsr_buf_append_cstr(signals, "}");
    vsr_buf_append_cstr(decisions, "[");
    if (vsr_json_object_get(j, spec, "decisions", &t) == VSR_OK && vsr_json_type(j, t) == VSR_JSON_ARRAY) {
        uint32_t d = t + 1;
        for (uint32_t i = 0; i < j->toks[t].count; i++, d = j->toks[d].next) {
            if (vsr_json_type(j, d) != VSR_JSON_OBJECT) {
                vsr_buf_printf(err, "IntelligentRoute %s: spec.decisions[%u] is not an object\n", name, i);
                return VSR_ERR_INVALID;
            }
            vsr_buf_append_cstr(decisions, i ? ",{" : "{");
            uint32_t c = d + 1;
            for (uint32_t f = 0; f < j->toks[d].count; f++) {
                uint32_t v = j->toks[c].next;
                if (f)
                    vsr_buf_append_cstr(decisions, ",");
                vsr_slice_t key;
                vsr_json_string(j, c, pool, &key);
                if (key_is(j, c, "signals")) {
                    vsr_buf_append_cstr(decisions, "\"rules\":");
                    put_value(decisions, j, v, pool);
                } else if (key_is(j, c, "modelRefs")) {
                    vsr_buf_append_cstr(decisions, "\"modelRefs\":");
                    put_value(decisions, j, v, pool);
                } else if (key_is(j, c, "plugins") && vsr_json_type(j, v) == VSR_JSON_ARRAY) {
                    /* a plugin's configuration is the plugin's own layout: as it is */
                    vsr_buf_append_cstr(decisions, "\"plugins\":[");
                    uint32_t p = v + 1;
                    for (uint32_t n = 0; n < j->toks[v].count; n++, p = j->toks[p].next) {
                        if (n)
                            vsr_buf_append_cstr(decisions, ",");
                        if (vsr_json_type(j, p) != VSR_JSON_OBJECT) {
                            put_value(decisions, j, p, pool);
                            continue;
                        }
                        vsr_buf_append_cstr(decisions, "{");
                        uint32_t pc = p + 1;
                        for (uint32_t m = 0; m < j->toks[p].count; m++) {
                            uint32_t pv = j->toks[pc].next;
                            vsr_slice_t pk;
                            vsr_json_string(j, pc, pool, &pk);
                            if (m)
                                vsr_buf_append_cstr(decisions, ",");
                            put_key(decisions, pk, 0);
                            vsr_buf_append_cstr(decisions, ":");
                            if (key_is(j, pc, "configuration"))
                                vsr_buf_append_slice(decisions, vsr_json_raw(j, pv));
                            else
                                put_value(decisions, j, pv, pool);
                            pc = j->toks[pv].next;
                        }
                        vsr_buf_append_cstr(decisions, "}");
                    }
                    vsr_buf_append_cstr(decisions, "]");
                } else {
                    put_key(decisions, key, 0);
                    vsr_buf_append_cstr(decisions, ":");
                    put_value(decisions, j, v, pool);
                }
                c = j->toks[v].next;
            }
            vsr_buf_append_cstr(decisions, "}");
        }
    }
    vsr_buf_append_cstr(decisions, "]");
    return VSR_OK;
}

/* Object obj's members except the named ones, each followed by a comma. */
static void put_members_except(vsr_buf_t *b, const vsr_json_t *j, uint32_t obj, const char *const *skip, size_t n_skip)
{
    uint32_t c = obj + 1;
    for (uint32_t i = 0; i < j->toks[obj].count; i++) {
        uint32_t v = j->toks[c].next;
        int drop = 0;
        for (size_t s = 0; s < n_skip && !drop; s++)
            drop = key_is(j, c, skip[s]);
        if (!drop) {
            vsr_buf_append_slice(b, vsr_json_raw(j, c));
            vsr_buf_append_cstr(b, ":");
            vsr_buf_append_slice(b, vsr_json_raw(j, v));
            vsr_buf_append_cstr(b, ",");
        }
        c = j->toks[v].next;
    }
}

int vsr_admin_k8s_document(const char *base_name, const char *base, size_t base_len, const char *pool_json,
                           const char *route_json, vsr_buf_t *out, vsr_buf_t *err)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_json_t pj, rj, bj;
    memset(&pj, 0, sizeof(pj));
    memset(&rj, 0, sizeof(rj));
    memset(&bj, 0, sizeof(bj));
    vsr_json_limits_t lim = {.max_depth = 64};
    vsr_buf_t canon, cards, pmodels, signals, decisions, routing, providers;
    vsr_buf_init(&canon, 0);
    vsr_buf_init(&cards, 0);
    vsr_buf_init(&pmodels, 0);
    vsr_buf_init(&signals, 0);
    vsr_buf_init(&decisions, 0);
    vsr_buf_init(&routing, 0);
    vsr_buf_init(&providers, 0);
    vsr_json_edits_t ed;
    vsr_json_edits_init(&ed);
    int rc = VSR_ERR_INVALID;
    vsr_slice_t pname = vsr_slice_cstr("?"), rname = vsr_slice_cstr("?"), dm;
    int64_t gen;
    if (vsr_json_parse(&pj, pool_json, strlen(pool_json), &lim) != VSR_OK ||
        vsr_json_parse(&rj, route_json, strlen(route_json), &lim) != VSR_OK) {
        vsr_buf_printf(err, "a resource is not valid JSON\n");
        goto out;
    }
    obj_meta(&pj, 0, &pool, &pname, &gen, NULL);
    obj_meta(&rj, 0, &pool, &rname, &gen, NULL);
    char pn[256], rn[256];
    snprintf(pn, sizeof(pn), "%.*s", (int)VSR_MIN(pname.len, (size_t)253), pname.p);
    snprintf(rn, sizeof(rn), "%.*s", (int)VSR_MIN(rname.len, (size_t)253), rname.p);
    if (convert_pool(&pj, &pool, pn, &cards, &pmodels, &dm, err) != VSR_OK ||
        convert_route(&rj, &pool, rn, &signals, &decisions, err) != VSR_OK)
        goto out;
    if (vsr_config_canonical(base_name, base, base_len, &canon, err) != VSR_OK)
        goto out;
    if (vsr_json_parse(&bj, canon.data, canon.len, NULL) != VSR_OK || vsr_json_type(&bj, 0) != VSR_JSON_OBJECT) {
        vsr_buf_printf(err, "%s:1:1: the document is not a mapping\n", base_name);
        goto out;
    }
    /* routing: the file's, with the three lists from the resources */
    uint32_t rt;
    int has_routing =
        vsr_json_object_get(&bj, 0, "routing", &rt) == VSR_OK && vsr_json_type(&bj, rt) == VSR_JSON_OBJECT;
    if (!has_routing)
        vsr_buf_append_cstr(&routing, "\"routing\":");
    vsr_buf_append_cstr(&routing, "{");
    static const char *const routing_skip[] = {"modelCards", "signals", "decisions"};
    if (has_routing)
        put_members_except(&routing, &bj, rt, routing_skip, VSR_ARRAY_LEN(routing_skip));
    vsr_buf_printf(&routing, "\"modelCards\":%s,\"signals\":%s,\"decisions\":%s}", cards.data, signals.data,
                   decisions.data);
    if (has_routing)
        vsr_json_edit_replace(&ed, &bj, rt, vsr_buf_slice(&routing));
    else
        vsr_json_edit_insert_member(&ed, &bj, 0, vsr_buf_slice(&routing));
    /* providers.defaults.model: the pool's defaultModel; providers.models,
     * when the file names none (a base written for the reference, whose
     * models come from the pool): the pool's models, by name, without
     * backends (Envoy routes them in extproc mode) */
    uint32_t pv, dv, mv;
    int has_prov = vsr_json_object_get(&bj, 0, "providers", &pv) == VSR_OK && vsr_json_type(&bj, pv) == VSR_JSON_OBJECT;
    int no_models = !has_prov || vsr_json_object_get(&bj, pv, "models", &mv) != VSR_OK ||
                    vsr_json_type(&bj, mv) != VSR_JSON_ARRAY || bj.toks[mv].count == 0;
    if (dm.len > 0 || no_models) {
        int has_def = has_prov && vsr_json_object_get(&bj, pv, "defaults", &dv) == VSR_OK &&
                      vsr_json_type(&bj, dv) == VSR_JSON_OBJECT;
        if (!has_prov)
            vsr_buf_append_cstr(&providers, "\"providers\":");
        vsr_buf_append_cstr(&providers, "{");
        static const char *const prov_skip[] = {"defaults", "models"}, *const def_skip[] = {"model"};
        if (has_prov)
            put_members_except(&providers, &bj, pv, prov_skip, no_models ? 2 : 1);
        if (no_models)
            vsr_buf_printf(&providers, "\"models\":%s,", pmodels.data);
        vsr_buf_append_cstr(&providers, "\"defaults\":{");
        if (has_def)
            put_members_except(&providers, &bj, dv, def_skip, dm.len > 0);
        if (dm.len > 0) {
            vsr_buf_append_cstr(&providers, "\"model\":");
            vsr_buf_append_json_string(&providers, dm);
        } else if (vsr_buf_slice(&providers).p[vsr_buf_slice(&providers).len - 1] == ',') {
            providers.len--; /* the last member of defaults was followed by a comma */
        }
        vsr_buf_append_cstr(&providers, "}}");
        if (has_prov)
            vsr_json_edit_replace(&ed, &bj, pv, vsr_buf_slice(&providers));
        else
            vsr_json_edit_insert_member(&ed, &bj, 0, vsr_buf_slice(&providers));
    }
    size_t n = 0;
    uint64_t total = 0;
    vsr_slice_t *pieces = vsr_json_edits_apply(&ed, canon.data, canon.len, &pool, &n, &total);
    rc = VSR_OK;
    for (size_t i = 0; i < n && rc == VSR_OK; i++)
        rc = vsr_buf_append_slice(out, pieces[i]);
    if (rc == VSR_OK)
        rc = vsr_buf_append_cstr(out, "\n");
    if (rc != VSR_OK)
        vsr_buf_printf(err, "the document from the resources is too large\n");
out:
    vsr_json_edits_free(&ed);
    vsr_json_free(&pj);
    vsr_json_free(&rj);
    vsr_json_free(&bj);
    vsr_buf_free(&canon);
    vsr_buf_free(&cards);
    vsr_buf_free(&pmodels);
    vsr_buf_free(&signals);
    vsr_buf_free(&decisions);
    vsr_buf_free(&routing);
    vsr_buf_free(&providers);
    vsr_pool_free(&pool);
    return rc;
}

/* ---- reconcile ---------------------------------------------------------------- */

static void patch_all(vsr_admin_k8s_t *k, int kind, int ready, const char *reason, vsr_slice_t msg)
{
    for (size_t i = 0; i < k->kinds[kind].n; i++)
        patch_status(k, kind, &k->kinds[kind].objs[i], ready, reason, msg);
}

/* Under k->mu.  Applies the pair once per new generation of either. */
static void reconcile(vsr_admin_k8s_t *k)
{
    k8s_kind_t *pk = &k->kinds[KIND_POOL], *rk = &k->kinds[KIND_ROUTE];
    if (!pk->listed || !rk->listed || stopping(k))
        return;
    if (pk->n == 0 || rk->n == 0) {
        if (strcmp(k->applied, "waiting") != 0)
            vsr_log_info("k8s", "waiting for an IntelligentPool and an IntelligentRoute in namespace %s", k->ns);
        snprintf(k->applied, sizeof(k->applied), "waiting");
        return;
    }
    if (pk->n > 1 || rk->n > 1 || pk->overflow || rk->overflow) {
        char key[sizeof(k->applied)];
        snprintf(key, sizeof(key), "conflict %zu/%d %zu/%d", pk->n, pk->overflow, rk->n, rk->overflow);
        if (strcmp(key, k->applied) == 0)
            return; /* reported */
        snprintf(k->applied, sizeof(k->applied), "%s", key);
        for (int kind = 0; kind < N_KINDS; kind++) {
            k8s_kind_t *kd = &k->kinds[kind];
            if (kd->n < 2 && !kd->overflow)
                continue;
            char msg[512];
            snprintf(msg, sizeof(msg), "found %s%zu %ss in namespace %s, expected exactly 1; resolve the conflict so "
                     "a single configuration can be applied", kd->overflow ? "more than " : "", kd->n, kd->kind, k->ns);
            vsr_log_warn("k8s", "%s", msg);
            patch_all(k, kind, 0, "Conflict", vsr_slice_cstr(msg));
        }
        return;
    }
    k8s_obj_t *po = &pk->objs[0], *ro = &rk->objs[0];
    char key[sizeof(k->applied)];
    snprintf(key, sizeof(key), "%.200s/%lld %.200s/%lld", po->name, (long long)po->generation, ro->name,
             (long long)ro->generation);
    if (strcmp(key, k->applied) == 0)
        return;
    snprintf(k->applied, sizeof(k->applied), "%s", key);

    vsr_buf_t err, doc;
    vsr_buf_init(&err, 1 << 16);
    vsr_buf_init(&doc, max_bytes(k) + 1);
    char *base = NULL;
    size_t base_len = 0;
    const char *reason = "ValidationFailed";
    int ok = 0;
    if (vsr_admin_read_file(k->base_path, &base, &base_len, &err) == VSR_OK &&
        vsr_admin_k8s_document(k->base_path, base, base_len, po->json, ro->json, &doc, &err) == VSR_OK) {
        vsr_admin_result_t res;
        if (vsr_admin_apply(k->a, "kubernetes", doc.data, doc.len, "kubernetes", 0, &res) == VSR_OK) {
            ok = 1;
            vsr_log_info("k8s", "%s and %s applied: configuration version %llu", po->name, ro->name,
                         (unsigned long long)res.version);
        } else {
            if (res.code && (strcmp(res.code, "build_failed") == 0 || strcmp(res.code, "warmup_failed") == 0 ||
                             strcmp(res.code, "restart_required") == 0))
                reason = "UpdateFailed";
            vsr_buf_printf(&err, "%s: ", res.code ? res.code : "rejected");
            vsr_buf_append_slice(&err, vsr_buf_slice(&res.errors));
        }
        vsr_admin_result_free(&res);
    }
    vsr_free(base);
    if (!ok) {
        while (err.len > 0 && err.data[err.len - 1] == '\n')
            err.data[--err.len] = '\0';
        vsr_log_warn("k8s", "%s and %s rejected; the active version keeps serving: %.*s", po->name, ro->name,
                     (int)err.len, err.data ? err.data : "");
    }
    vsr_slice_t msg = ok ? vsr_slice_cstr("Configuration applied successfully") : vsr_buf_slice(&err);
    patch_all(k, KIND_POOL, ok, ok ? "Ready" : reason, msg);
    patch_all(k, KIND_ROUTE, ok, ok ? "Ready" : reason, msg);
    vsr_buf_free(&err);
    vsr_buf_free(&doc);
}

/* ---- list and watch ----------------------------------------------------------- */

/* Lists kind; on success *rv holds the list's resourceVersion (malloc'd). */
static int list_kind(vsr_admin_k8s_t *k, int kind, char **rv)
{
    k8s_kind_t *kd = &k->kinds[kind];
    char target[512];
    snprintf(target, sizeof(target), "/apis/%s/namespaces/%s/%s", K8S_GROUP_VERSION, k->ns, kd->plural);
    k8s_conn_t c;
    if (conn_open(k, &c, K8S_REQUEST_MS) != VSR_OK)
        return VSR_ERR_IO;
    vsr_buf_t body;
    vsr_buf_init(&body, max_bytes(k));
    int rc = conn_request(&c, "GET", target, NULL, NULL, 0);
    if (rc == VSR_OK)
        rc = conn_read_body(&c, &body);
    conn_close(&c);
    if (rc == VSR_ERR_TOO_BIG)
        vsr_log_warn("k8s", "the %s list is larger than %llu bytes (global.services.management_api."
                     "max_document_bytes)", kd->kind, (unsigned long long)body.cap);
    if (rc == VSR_OK && c.status != 200) {
        vsr_log_warn("k8s", "listing %s: HTTP %d: %.*s", target, c.status, (int)VSR_MIN(body.len, (size_t)300),
                     body.data ? body.data : "");
        rc = VSR_ERR_IO;
    }
    vsr_json_t j;
    memset(&j, 0, sizeof(j));
    vsr_json_limits_t lim = {.max_depth = 64};
    uint32_t items, md, t;
    if (rc == VSR_OK && (vsr_json_parse(&j, body.data, body.len, &lim) != VSR_OK ||
                         vsr_json_object_get(&j, 0, "items", &items) != VSR_OK ||
                         vsr_json_type(&j, items) != VSR_JSON_ARRAY)) {
        vsr_log_warn("k8s", "listing %s: not a list", target);
        rc = VSR_ERR_INVALID;
    }
    if (rc == VSR_OK) {
        vsr_pool_t pool;
        vsr_pool_init(&pool);
        vsr_slice_t lrv = vsr_slice(NULL, 0);
        if (vsr_json_object_get(&j, 0, "metadata", &md) == VSR_OK &&
            vsr_json_object_get(&j, md, "resourceVersion", &t) == VSR_OK)
            vsr_json_string(&j, t, &pool, &lrv);
        *rv = vsr_strndup(lrv.p ? lrv.p : "", lrv.len);
        pthread_mutex_lock(&k->mu);
        /* keep what was written to the status of objects that are still there */
        k8s_kind_t old = *kd;
        memset(kd->objs, 0, sizeof(kd->objs));
        kd->n = 0;
        kd->overflow = 0;
        uint32_t it = items + 1;
        for (uint32_t i = 0; i < j.toks[items].count; i++, it = j.toks[it].next) {
            vsr_slice_t name;
            int64_t gen;
            if (obj_meta(&j, it, &pool, &name, &gen, NULL) != VSR_OK)
                continue;
            kind_put(kd, name, gen, vsr_json_raw(&j, it));
            k8s_obj_t *prev = kind_find(&old, name), *now = kind_find(kd, name);
            if (prev && now) {
                now->status_memo = prev->status_memo;
                prev->status_memo = NULL;
            }
        }
        kind_reset(&old);
        kd->listed = 1;
        reconcile(k);
        pthread_mutex_unlock(&k->mu);
        vsr_pool_free(&pool);
    }
    vsr_json_free(&j);
    vsr_buf_free(&body);
    return rc;
}

enum { WATCH_AGAIN, WATCH_RELIST, WATCH_FAILED };

/* One watch event (a line).  Updates *rv. */
static int watch_event(vsr_admin_k8s_t *k, int kind, const char *line, size_t len, char **rv)
{
    vsr_json_t j;
    vsr_json_limits_t lim = {.max_depth = 64};
    uint32_t ty, obj, t;
    int rc = WATCH_AGAIN;
    if (vsr_json_parse(&j, line, len, &lim) != VSR_OK || vsr_json_object_get(&j, 0, "type", &ty) != VSR_OK ||
        vsr_json_object_get(&j, 0, "object", &obj) != VSR_OK) {
        vsr_log_warn("k8s", "a %s watch event is not valid; listing again", k->kinds[kind].kind);
        vsr_json_free(&j);
        return WATCH_RELIST;
    }
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    if (key_is(&j, ty, "ERROR")) {
        double code = 0;
        if (vsr_json_object_get(&j, obj, "code", &t) == VSR_OK)
            vsr_json_number(&j, t, &code);
        if ((int)code == 410)
            vsr_log_info("k8s", "the %s watch expired (410 Gone); listing again", k->kinds[kind].kind);
        else
            vsr_log_warn("k8s", "the %s watch failed (%d); listing again", k->kinds[kind].kind, (int)code);
        rc = (int)code == 410 ? WATCH_RELIST : WATCH_FAILED;
    } else {
        vsr_slice_t name, orv = vsr_slice(NULL, 0);
        int64_t gen;
        uint32_t md;
        if (vsr_json_object_get(&j, obj, "metadata", &md) == VSR_OK &&
            vsr_json_object_get(&j, md, "resourceVersion", &t) == VSR_OK &&
            vsr_json_string(&j, t, &pool, &orv) == VSR_OK && orv.len > 0 && orv.len < 256) {
            vsr_free(*rv);
            *rv = vsr_strndup(orv.p, orv.len);
        }
        if (obj_meta(&j, obj, &pool, &name, &gen, NULL) == VSR_OK) {
            if (!key_is(&j, ty, "BOOKMARK")) {
                pthread_mutex_lock(&k->mu);
                if (key_is(&j, ty, "DELETED"))
                    kind_remove(&k->kinds[kind], name);
                else
                    kind_put(&k->kinds[kind], name, gen, vsr_json_raw(&j, obj));
                reconcile(k);
                pthread_mutex_unlock(&k->mu);
            }
        }
    }
    vsr_pool_free(&pool);
    vsr_json_free(&j);
    return rc;
}

static int watch_kind(vsr_admin_k8s_t *k, int kind, char **rv)
{
    k8s_kind_t *kd = &k->kinds[kind];
    char target[1024];
    snprintf(target, sizeof(target), "/apis/%s/namespaces/%s/%s?watch=1&resourceVersion=%s&allowWatchBookmarks=true"
             "&timeoutSeconds=%d", K8S_GROUP_VERSION, k->ns, kd->plural, *rv, K8S_WATCH_S);
    k8s_conn_t c;
    if (conn_open(k, &c, K8S_REQUEST_MS) != VSR_OK)
        return WATCH_FAILED;
    int rc = WATCH_FAILED;
    vsr_buf_t line;
    vsr_buf_init(&line, max_bytes(k));
    if (conn_request(&c, "GET", target, NULL, NULL, 0) != VSR_OK)
        goto out;
    if (c.status == 410) {
        vsr_log_info("k8s", "the %s watch expired (410 Gone); listing again", kd->kind);
        rc = WATCH_RELIST;
        goto out;
    }
    if (c.status != 200) {
        vsr_log_warn("k8s", "watching %s: HTTP %d", target, c.status);
        goto out;
    }
    c.idle_ms = K8S_WATCH_IDLE_MS;
    c.deadline = vsr_now_ms() + c.idle_ms;
    char tmp[8192];
    for (;;) {
        int r = conn_body(&c, tmp, sizeof(tmp));
        if (r == 0) {
            rc = WATCH_AGAIN; /* the server ended the watch: go on from rv */
            break;
        }
        if (r < 0)
            break;
        for (int i = 0; i < r; i++) {
            if (tmp[i] != '\n') {
                if (vsr_buf_append(&line, &tmp[i], 1) != VSR_OK) {
                    vsr_log_warn("k8s", "a %s watch event is larger than %llu bytes (global.services.management_api."
                                 "max_document_bytes); listing again", kd->kind, (unsigned long long)line.cap);
                    rc = WATCH_RELIST;
                    goto out;
                }
                continue;
            }
            if (line.len > 0) {
                int er = watch_event(k, kind, line.data, line.len, rv);
                vsr_buf_reset(&line);
                if (er != WATCH_AGAIN) {
                    rc = er;
                    goto out;
                }
            }
        }
    }
out:
    vsr_buf_free(&line);
    conn_close(&c);
    return rc;
}

static void *kind_main(void *arg)
{
    k8s_thread_arg_t *ta = arg;
    vsr_admin_k8s_t *k = ta->k;
    int kind = ta->kind;
    uint64_t backoff = K8S_BACKOFF_MIN_MS;
    char *rv = NULL;
    while (!stopping(k)) {
        if (rv == NULL) {
            if (list_kind(k, kind, &rv) != VSR_OK) {
                nap(k, backoff);
                backoff = VSR_MIN(backoff * 2, (uint64_t)K8S_BACKOFF_MAX_MS);
                continue;
            }
            backoff = K8S_BACKOFF_MIN_MS;
        }
        uint64_t t0 = vsr_now_ms();
        int w = watch_kind(k, kind, &rv);
        if (stopping(k))
            break;
        if (w == WATCH_RELIST) {
            vsr_free(rv);
            rv = NULL;
        }
        if (w == WATCH_FAILED || vsr_now_ms() - t0 < 1000) { /* back off; a quick end counts as a failure */
            nap(k, backoff);
            backoff = VSR_MIN(backoff * 2, (uint64_t)K8S_BACKOFF_MAX_MS);
        } else {
            backoff = K8S_BACKOFF_MIN_MS;
        }
    }
    vsr_free(rv);
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------- */

static char *sa_path(const char *dir, const char *file)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = vsr_malloc(n);
    snprintf(p, n, "%s/%s", dir, file);
    return p;
}

int vsr_admin_k8s_start(vsr_admin_t *a, const char *base_path, vsr_buf_t *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (host == NULL || host[0] == '\0') {
        vsr_buf_printf(err, "global.router.config_source is kubernetes but KUBERNETES_SERVICE_HOST is not set "
                            "(vsr reads the resources through the API server of the cluster it runs in)\n");
        return VSR_ERR_INVALID;
    }
    const char *dir = getenv("VSR_K8S_SERVICEACCOUNT_DIR");
    if (dir == NULL || dir[0] == '\0')
        dir = K8S_SA_DIR;
    vsr_admin_k8s_t *k = vsr_calloc(1, sizeof(*k));
    k->a = a;
    k->base_path = vsr_strdup(base_path);
    k->host = vsr_strdup(host);
    k->port = vsr_strdup(port && port[0] ? port : "443");
    k->token_path = sa_path(dir, "token");
    atomic_init(&k->stop, 0);
    pthread_mutex_init(&k->mu, NULL);
    k->kinds[KIND_POOL].kind = "IntelligentPool";
    k->kinds[KIND_POOL].plural = "intelligentpools";
    k->kinds[KIND_ROUTE].kind = "IntelligentRoute";
    k->kinds[KIND_ROUTE].plural = "intelligentroutes";
    a->k8s = k;

    const char *ns = getenv("VSR_K8S_NAMESPACE");
    char *ns_path = sa_path(dir, "namespace");
    k->ns = ns && ns[0] ? vsr_strdup(ns) : read_small(ns_path, 253);
    vsr_free(ns_path);
    int bad_ns = k->ns == NULL || k->ns[0] == '\0';
    for (const char *p = k->ns; !bad_ns && *p; p++)
        bad_ns = !((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.');
    if (bad_ns) {
        vsr_buf_printf(err, "config_source kubernetes: no valid namespace in %s/namespace (or VSR_K8S_NAMESPACE)\n",
                       dir);
        vsr_admin_k8s_stop(a);
        return VSR_ERR_INVALID;
    }
    char *ca = sa_path(dir, "ca.crt");
    k->ctx = SSL_CTX_new(TLS_client_method());
    if (k->ctx == NULL || !SSL_CTX_set_min_proto_version(k->ctx, TLS1_2_VERSION) ||
        SSL_CTX_load_verify_locations(k->ctx, ca, NULL) != 1) {
        ERR_clear_error();
        vsr_buf_printf(err, "config_source kubernetes: cannot load the cluster's CA from %s\n", ca);
        vsr_free(ca);
        vsr_admin_k8s_stop(a);
        return VSR_ERR_INVALID;
    }
    vsr_free(ca);
    SSL_CTX_set_verify(k->ctx, SSL_VERIFY_PEER, NULL);
    for (int kind = 0; kind < N_KINDS; kind++) {
        k->args[kind] = (k8s_thread_arg_t){k, kind};
        if (pthread_create(&k->threads[kind], NULL, kind_main, &k->args[kind]) != 0) {
            vsr_buf_printf(err, "config_source kubernetes: cannot start a thread\n");
            vsr_admin_k8s_stop(a);
            return VSR_ERR;
        }
        k->n_threads++;
    }
    vsr_log_info("k8s", "watching %s IntelligentPool and IntelligentRoute in namespace %s via %s:%s",
                 K8S_GROUP_VERSION, k->ns, k->host, k->port);
    return VSR_OK;
}

void vsr_admin_k8s_stop(vsr_admin_t *a)
{
    vsr_admin_k8s_t *k = a->k8s;
    if (k == NULL)
        return;
    a->k8s = NULL;
    atomic_store(&k->stop, 1);
    for (int i = 0; i < k->n_threads; i++)
        pthread_join(k->threads[i], NULL); /* each sees the stop within a receive tick */
    for (int kind = 0; kind < N_KINDS; kind++)
        kind_reset(&k->kinds[kind]);
    pthread_mutex_destroy(&k->mu);
    SSL_CTX_free(k->ctx);
    vsr_free(k->base_path);
    vsr_free(k->host);
    vsr_free(k->port);
    vsr_free(k->token_path);
    vsr_free(k->ns);
    vsr_free(k);
}
