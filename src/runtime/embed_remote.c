/*
 * embed_remote.c — the remote embedder: POST <base>/embeddings to an
 * OpenAI-compatible server (vLLM, TEI, OpenAI), blocking, from a compute
 * thread.  Plain HTTP/1.1, one connection per call (Connection: close),
 * every step bounded by the call's timeout; the response body by 64 MiB.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/http.h"
#include "runtime-int.h"

#define REMOTE_MAX_BODY (64u << 20)

typedef struct {
    char host[300];
    char port[8];
    char path[512];   /* the full request path of the embeddings endpoint */
    char model[128];
    char *api_key;
    uint64_t timeout_ms;
} remote_t;

typedef struct {
    vsr_buf_t body;
    int status;
    int complete;
} resp_t;

static int on_head(void *ud, vsr_http_head_t *h)
{
    ((resp_t *)ud)->status = h->status;
    return VSR_OK;
}
static int on_body(void *ud, const char *p, size_t n)
{
    return vsr_buf_append(&((resp_t *)ud)->body, p, n) == VSR_OK ? VSR_OK : VSR_ERR_TOO_BIG;
}
static int on_complete(void *ud)
{
    ((resp_t *)ud)->complete = 1;
    return VSR_PAUSED;
}
static const vsr_http_callbacks_t resp_cb = {on_head, on_body, on_complete};

static int dial(remote_t *r, uint64_t deadline, vsr_buf_t *err)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(r->host, r->port, &hints, &res);
    if (g != 0) {
        vsr_buf_printf(err, "cannot resolve %s: %s", r->host, gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS && vsr_fd_wait(fd, POLLOUT, deadline) == 0) {
            int so = 0;
            socklen_t sl = sizeof so;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so == 0)
                break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        vsr_buf_printf(err, "cannot connect to %s:%s", r->host, r->port);
    return fd;
}

/* One call: the vectors of texts into out (n * dim), or when dim is 0 (the
 * probe) the length of the first vector into *dim_out. */
static int call(remote_t *r, const vsr_slice_t *texts, size_t n, float *out, size_t dim, size_t *dim_out,
                uint64_t *tokens, vsr_buf_t *err)
{
    uint64_t deadline = vsr_now_ms() + r->timeout_ms;
    vsr_buf_t req;
    vsr_buf_init(&req, 0);
    vsr_buf_append_cstr(&req, "{\"model\":");
    vsr_buf_append_json_string(&req, vsr_slice_cstr(r->model));
    vsr_buf_append_cstr(&req, ",\"encoding_format\":\"float\",\"input\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            vsr_buf_append_cstr(&req, ",");
        vsr_buf_append_json_string(&req, texts[i]);
    }
    vsr_buf_append_cstr(&req, "]}");
    vsr_buf_t head;
    vsr_buf_init(&head, 0);
    vsr_buf_printf(&head,
                   "POST %s HTTP/1.1\r\nhost: %s:%s\r\ncontent-type: application/json\r\naccept: "
                   "application/json\r\nconnection: close\r\nuser-agent: vsr-runtime\r\ncontent-length: %zu\r\n",
                   r->path, r->host, r->port, req.len);
    if (r->api_key)
        vsr_buf_printf(&head, "authorization: Bearer %s\r\n", r->api_key);
    vsr_buf_append_cstr(&head, "\r\n");

    resp_t resp = {.status = 0};
    vsr_buf_init(&resp.body, REMOTE_MAX_BODY);
    vsr_http_parser_t hp;
    vsr_http_parser_init(&hp, VSR_HTTP_RESPONSE, NULL, &resp_cb, &resp);
    int rc = VSR_ERR_IO;
    int fd = dial(r, deadline, err);
    if (fd < 0)
        goto out;
    /* send head then body */
    const vsr_buf_t *parts[2] = {&head, &req};
    for (int k = 0; k < 2; k++) {
        size_t off = 0;
        while (off < parts[k]->len) {
            ssize_t w = send(fd, parts[k]->data + off, parts[k]->len - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && (errno == EAGAIN || errno == EINTR) && vsr_fd_wait(fd, POLLOUT, deadline) == 0)
                continue;
            vsr_buf_printf(err, "sending to %s:%s failed or timed out", r->host, r->port);
            goto out;
        }
    }
    char buf[16384];
    while (!resp.complete) {
        ssize_t got = recv(fd, buf, sizeof buf, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (vsr_fd_wait(fd, POLLIN, deadline) != 0) {
                vsr_buf_printf(err, "no answer from %s:%s within %llu ms", r->host, r->port,
                               (unsigned long long)r->timeout_ms);
                goto out;
            }
            continue;
        }
        if (got < 0) {
            vsr_buf_printf(err, "reading from %s:%s failed", r->host, r->port);
            goto out;
        }
        if (got == 0) {
            if (vsr_http_parser_finish(&hp) != VSR_OK || !resp.complete) {
                vsr_buf_printf(err, "%s:%s closed before a complete answer", r->host, r->port);
                goto out;
            }
            break;
        }
        ssize_t used = vsr_http_parser_execute(&hp, buf, (size_t)got);
        if (used < 0) {
            vsr_buf_printf(err, "invalid HTTP answer from %s:%s", r->host, r->port);
            goto out;
        }
    }
    if (resp.status != 200) {
        vsr_buf_printf(err, "%s:%s answered %d", r->host, r->port, resp.status);
        goto out;
    }
    /* {"data":[{"index":i,"embedding":[...]}...], "usage":{"prompt_tokens":N}} */
    vsr_json_t j;
    if (vsr_json_parse(&j, resp.body.data ? resp.body.data : "", resp.body.len, NULL) != VSR_OK) {
        vsr_json_free(&j);
        vsr_buf_printf(err, "the answer from %s:%s is not JSON", r->host, r->port);
        goto out;
    }
    uint32_t data;
    unsigned char *seen = NULL; /* per index: a vector came for it */
    rc = VSR_ERR;
    if (vsr_json_type(&j, 0) != VSR_JSON_OBJECT || vsr_json_object_get(&j, 0, "data", &data) != VSR_OK ||
        vsr_json_type(&j, data) != VSR_JSON_ARRAY || j.toks[data].count != n) {
        vsr_buf_printf(err, "the answer from %s:%s has no \"data\" array of %zu embeddings", r->host, r->port, n);
        goto jout;
    }
    seen = vsr_calloc(n ? n : 1, 1);
    uint32_t d = data + 1;
    for (size_t i = 0; i < n; i++, d = j.toks[d].next) {
        uint32_t emb, idx;
        double di = (double)i;
        if (vsr_json_type(&j, d) != VSR_JSON_OBJECT || vsr_json_object_get(&j, d, "embedding", &emb) != VSR_OK ||
            vsr_json_type(&j, emb) != VSR_JSON_ARRAY) {
            vsr_buf_printf(err, "embedding %zu of the answer from %s:%s is not an array of numbers", i, r->host,
                           r->port);
            goto jout;
        }
        if (vsr_json_object_get(&j, d, "index", &idx) == VSR_OK &&
            (vsr_json_number(&j, idx, &di) != VSR_OK || di < 0 || di >= (double)n || di != floor(di))) {
            vsr_buf_printf(err, "embedding %zu of the answer from %s:%s has a bad index", i, r->host, r->port);
            goto jout;
        }
        size_t len = j.toks[emb].count;
        if (dim == 0) { /* the probe */
            if (len == 0 || len > VSR_RT_MAX_DIM) {
                vsr_buf_printf(err, "the probe's embedding from %s:%s has %zu components", r->host, r->port, len);
                goto jout;
            }
            *dim_out = len;
            rc = VSR_OK;
            goto jout;
        }
        if (len != dim) {
            vsr_buf_printf(err, "embedding %zu from %s:%s has %zu components, not %zu", i, r->host, r->port, len,
                           dim);
            goto jout;
        }
        if (seen[(size_t)di]++) {
            vsr_buf_printf(err, "the answer from %s:%s holds index %zu twice", r->host, r->port, (size_t)di);
            goto jout;
        }
        float *v = out + (size_t)di * dim;
        uint32_t c = emb + 1;
        for (size_t k = 0; k < len; k++, c = j.toks[c].next) {
            double x;
            if (vsr_json_type(&j, c) != VSR_JSON_NUMBER || vsr_json_number(&j, c, &x) != VSR_OK) {
                vsr_buf_printf(err, "embedding %zu from %s:%s holds a non-number", i, r->host, r->port);
                goto jout;
            }
            v[k] = (float)x;
        }
    }
    if (tokens) {
        uint32_t u, pt;
        double x;
        if (vsr_json_object_get(&j, 0, "usage", &u) == VSR_OK && vsr_json_type(&j, u) == VSR_JSON_OBJECT &&
            vsr_json_object_get(&j, u, "prompt_tokens", &pt) == VSR_OK && vsr_json_number(&j, pt, &x) == VSR_OK &&
            x >= 0 && x < 1e12)
            *tokens += (uint64_t)x;
    }
    rc = VSR_OK;
jout:
    vsr_free(seen);
    vsr_json_free(&j);
out:
    if (fd >= 0)
        close(fd);
    vsr_http_parser_free(&hp);
    vsr_buf_free(&resp.body);
    vsr_buf_free(&req);
    vsr_buf_free(&head);
    return rc;
}

static int remote_embed(vsr_embedder_t *e, const vsr_slice_t *texts, size_t n, float *out, uint64_t *tokens,
                        vsr_buf_t *err)
{
    return call(e->impl, texts, n, out, e->dim, NULL, tokens, err);
}

static void remote_free(vsr_embedder_t *e)
{
    remote_t *r = e->impl;
    if (r) {
        if (r->api_key)
            vsr_free(r->api_key);
        vsr_free(r);
    }
}

static const vsr_embedder_ops_t remote_ops = {remote_embed, remote_free};

vsr_embedder_t *vsr_embedder_remote_new(const char *base_url, const char *model, const char *api_key, size_t dim,
                                        uint64_t timeout_ms, vsr_buf_t *err)
{
    if (strncmp(base_url, "https://", 8) == 0) {
        vsr_buf_printf(err, "remote embeddings: https:// is not supported (plain http:// only); put a TLS proxy "
                            "on loopback in front of the endpoint");
        return NULL;
    }
    if (strncmp(base_url, "http://", 7) != 0) {
        vsr_buf_printf(err, "remote embeddings: the URL must start with http://");
        return NULL;
    }
    if (model == NULL || *model == '\0' || strlen(model) >= 128) {
        vsr_buf_printf(err, "remote embeddings: a model name (1 to 127 bytes) is required");
        return NULL;
    }
    if (dim > VSR_RT_MAX_DIM) {
        vsr_buf_printf(err, "remote embeddings: a dimension above %d is not supported", VSR_RT_MAX_DIM);
        return NULL;
    }
    for (const char *k = api_key; k && *k; k++)
        if ((unsigned char)*k < 0x21 || *k == 0x7f) {
            vsr_buf_printf(err, "remote embeddings: the API key holds a space or a control byte");
            return NULL;
        }
    remote_t *r = vsr_calloc(1, sizeof *r);
    const char *h = base_url + 7;
    const char *slash = strchr(h, '/');
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    const char *path = slash ? slash : "";
    char hostport[300];
    if (hl == 0 || hl >= sizeof hostport || memchr(h, '@', hl)) {
        vsr_buf_printf(err, "remote embeddings: bad host in %s", base_url);
        vsr_free(r);
        return NULL;
    }
    memcpy(hostport, h, hl);
    hostport[hl] = '\0';
    char *colon = NULL;
    if (hostport[0] == '[') { /* [v6]:port */
        char *close_b = strchr(hostport, ']');
        if (close_b == NULL) {
            vsr_buf_printf(err, "remote embeddings: bad host in %s", base_url);
            vsr_free(r);
            return NULL;
        }
        *close_b = '\0';
        snprintf(r->host, sizeof r->host, "%s", hostport + 1);
        colon = close_b[1] == ':' ? close_b + 1 : NULL;
    } else {
        colon = strrchr(hostport, ':');
        if (colon)
            *colon = '\0';
        snprintf(r->host, sizeof r->host, "%s", hostport);
    }
    snprintf(r->port, sizeof r->port, "%s", colon && colon[1] ? colon + 1 : "80");
    size_t pl = strlen(path);
    while (pl > 0 && path[pl - 1] == '/')
        pl--;
    if (pl >= 3 && memcmp(path + pl - 3, "/v1", 3) == 0)
        snprintf(r->path, sizeof r->path, "%.*s/embeddings", (int)pl, path);
    else
        snprintf(r->path, sizeof r->path, "%.*s/v1/embeddings", (int)pl, path);
    snprintf(r->model, sizeof r->model, "%s", model);
    r->api_key = api_key && *api_key ? vsr_strdup(api_key) : NULL;
    r->timeout_ms = timeout_ms ? timeout_ms : 10000;

    vsr_embedder_t *e = vsr_calloc(1, sizeof *e);
    e->ops = &remote_ops;
    e->impl = r;
    e->backend = "remote";
    snprintf(e->name, sizeof e->name, "%s", model);
    e->dim = dim;
    if (dim == 0) {
        vsr_slice_t probe = VSR_SLICE_LIT("dimension probe");
        size_t got = 0;
        if (call(r, &probe, 1, NULL, 0, &got, NULL, err) != VSR_OK) {
            vsr_embedder_free(e);
            return NULL;
        }
        e->dim = got;
    }
    return e;
}
