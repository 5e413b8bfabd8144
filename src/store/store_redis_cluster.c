/*
 * store_redis_cluster.c — Redis Cluster for the redis stores: hiredis has no
 * cluster support, so this keeps the slot map and one connection per node.
 *
 * Slots: CRC16 (XMODEM) of the key, or of its hash tag (the bytes between the
 * first '{' and the next '}', when not empty), mod 16384.  The map comes from
 * CLUSTER SLOTS, asked of any reachable node (the configured addresses first)
 * at open, and again after a MOVED reply or a lost node.
 *
 * Commands (async, store_redis.c): each is formatted once and kept until its
 * final reply, so a redirect can send it again: MOVED <slot> <host:port>
 * updates that slot and resends to the named node; ASK sends ASKING and then
 * the command to the named node, for this command only.  At most
 * CL_MAX_REDIRECTS redirects, then the error reply is the answer.  A node's
 * connection is made on first use (its commands queue in hiredis while it
 * connects); a lost node fails what was pending on it (the caller sees no
 * reply: a miss) and is not tried again for the retry interval, while the
 * map is asked again.
 *
 * The blocking client (store_replay.c) keeps every key of its store in one slot
 * (a hash tag in its prefix) and connects to that slot's node.
 */
#include <arpa/inet.h>
#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <strings.h>
#include <uv.h>

#include "store-int.h"

#define CL_SLOTS 16384
#define CL_MAX_NODES 64
#define CL_MAX_REDIRECTS 5
#define CL_RETRY_MS 200     /* a node that failed is not connected again before this */
#define CL_REFRESH_MS 1000  /* the map is asked again at most this often, and retried this often until known */

uint16_t vsr__rcl_crc16(const char *p, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((unsigned char)p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned vsr__rcl_slot(vsr_slice_t key)
{
    const char *open = memchr(key.p, '{', key.len);
    if (open) {
        size_t off = (size_t)(open - key.p) + 1;
        const char *close = memchr(open + 1, '}', key.len - off);
        if (close && close > open + 1)
            return vsr__rcl_crc16(open + 1, (size_t)(close - open - 1)) & (CL_SLOTS - 1);
    }
    return vsr__rcl_crc16(key.p, key.len) & (CL_SLOTS - 1);
}

int vsr__rcl_parse_addr(const char *addr, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(addr, ':');
    uint64_t p;
    if (!colon || colon == addr || vsr_slice_to_u64(vsr_slice_cstr(colon + 1), 65535, &p) != VSR_OK || p == 0)
        return VSR_ERR_INVALID;
    size_t hl = (size_t)(colon - addr);
    if (addr[0] == '[' && hl >= 2 && addr[hl - 1] == ']') {
        addr++;
        hl -= 2;
    }
    if (hl == 0 || hl >= cap)
        return VSR_ERR_INVALID;
    memcpy(host, addr, hl);
    host[hl] = 0;
    if (!strcmp(host, "localhost"))
        snprintf(host, cap, "127.0.0.1");
    *port = (int)p;
    return VSR_OK;
}

/* ---- the map ---- */

typedef struct cl_cmd_s cl_cmd_t;

typedef struct {
    char host[64];     /* an IP literal: what is connected to */
    int port;
    redisAsyncContext *ac;
    uint64_t retry_at; /* monotonic ms */
    char name[64];     /* a configured host name ("" = none): resolved into host before each connect */
    int failing;       /* its last connect failed: the next failures are not logged */
    int resolving;
    uv_getaddrinfo_t gai;
    cl_cmd_t *pend_head, *pend_tail; /* commands waiting for its replies, oldest first */
} cl_node_t;

struct vsr__rcl_s {
    uv_loop_t *loop;
    cl_node_t nodes[CL_MAX_NODES];
    int nnodes, nseeds, next_ask;
    int16_t slot[CL_SLOTS]; /* node index, -1 = unknown */
    int have_map, refreshing, closing, resolving, timer_open;
    int refresh_node;          /* the node asked for the map (while refreshing) */
    uint64_t refresh_deadline; /* monotonic ms */
    uint64_t last_refresh, timeout_ms;
    char *password, *username;
    void (*on_ready)(void *ud);
    void *ud;
    uv_timer_t t_refresh, t_watch;
};

struct cl_cmd_s {
    vsr__rcl_t *cl;
    redisCallbackFn *fn;
    void *priv;
    char *cmd;
    long long len;
    int redirects;
    int node;            /* where it waits for its reply, -1 = nowhere */
    uint64_t deadline;   /* monotonic ms, from its first send */
    cl_cmd_t *prev, *next; /* that node's pending list */
};

static int node_find(vsr__rcl_t *cl, const char *host, int port)
{
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].port == port && !strcmp(cl->nodes[i].host, host))
            return i;
    if (cl->nnodes == CL_MAX_NODES || strlen(host) >= sizeof(cl->nodes[0].host))
        return -1;
    cl_node_t *n = &cl->nodes[cl->nnodes];
    memset(n, 0, sizeof(*n));
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    return cl->nnodes++;
}

static int node_of(vsr__rcl_t *cl, const redisAsyncContext *ac)
{
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i].ac == ac)
            return i;
    return -1;
}

static void schedule_refresh(vsr__rcl_t *cl);
static void refresh(vsr__rcl_t *cl);
static void resolve(vsr__rcl_t *cl, int i);

static void on_node_connect(const redisAsyncContext *ac, int status)
{
    vsr__rcl_t *cl = ac->data;
    int i = node_of(cl, ac);
    if (i < 0)
        return;
    if (status == REDIS_OK) {
        if (cl->nodes[i].failing)
            vsr_log_info("store", "redis cluster: %s:%d is back", cl->nodes[i].host, cl->nodes[i].port);
        cl->nodes[i].failing = 0;
        return;
    }
    if (!cl->nodes[i].failing) /* once per outage: a dead node is tried again every CL_RETRY_MS */
        vsr_log_warn("store", "redis cluster: connect to %s:%d failed: %s", cl->nodes[i].host, cl->nodes[i].port,
                     ac->errstr);
    cl->nodes[i].failing = 1;
    cl->nodes[i].ac = NULL; /* hiredis frees it, failing what was queued */
    cl->nodes[i].retry_at = vsr_now_ms() + CL_RETRY_MS;
    if (cl->nodes[i].name[0])
        cl->nodes[i].host[0] = 0; /* a name: looked up again (the server may have moved) */
    schedule_refresh(cl);
}

static void on_node_disconnect(const redisAsyncContext *ac, int status)
{
    VSR_UNUSED(status);
    vsr__rcl_t *cl = ac->data;
    int i = node_of(cl, ac);
    if (i < 0)
        return;
    if (!cl->closing)
        vsr_log_warn("store", "redis cluster: lost %s:%d%s%s", cl->nodes[i].host, cl->nodes[i].port,
                     ac->errstr[0] ? ": " : "", ac->errstr);
    cl->nodes[i].ac = NULL;
    cl->nodes[i].retry_at = vsr_now_ms() + CL_RETRY_MS;
    schedule_refresh(cl);
}

static void cl_free(vsr__rcl_t *cl);

/* A configured name is looked up on libuv's thread pool (hiredis would
 * block the loop); once known, the map is asked for. */
static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    vsr__rcl_t *cl = req->data;
    cl_node_t *n = NULL;
    for (int i = 0; i < cl->nnodes; i++)
        if (&cl->nodes[i].gai == req)
            n = &cl->nodes[i];
    VSR_BUG_ON(n == NULL);
    n->resolving = 0;
    cl->resolving--;
    if (status == 0 && res) {
        const void *a = res->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
                                                    : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
        if (!inet_ntop(res->ai_family, a, n->host, sizeof(n->host)))
            n->host[0] = 0;
    }
    if (res)
        uv_freeaddrinfo(res);
    if (cl->closing) {
        if (cl->resolving == 0 && !cl->timer_open)
            cl_free(cl);
        return;
    }
    if (!n->host[0]) {
        vsr_log_warn("store", "redis cluster: cannot resolve \"%s\": %s", n->name,
                     status ? uv_strerror(status) : "no address");
        n->retry_at = vsr_now_ms() + CL_RETRY_MS;
    }
    if (!cl->have_map)
        refresh(cl); /* unless one is in flight already */
}

static void resolve(vsr__rcl_t *cl, int i)
{
    cl_node_t *n = &cl->nodes[i];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    n->gai.data = cl;
    if (uv_getaddrinfo(cl->loop, &n->gai, on_resolved, n->name, NULL, &hints) != 0) {
        n->retry_at = vsr_now_ms() + CL_RETRY_MS;
        return;
    }
    n->resolving = 1;
    cl->resolving++;
}

/* node i's connection, made now when there is none (NULL while it is in
 * its retry interval or cannot be made) */
static redisAsyncContext *node_conn(vsr__rcl_t *cl, int i)
{
    cl_node_t *n = &cl->nodes[i];
    if (n->ac || cl->closing)
        return n->ac;
    if (vsr_now_ms() < n->retry_at || n->resolving)
        return NULL;
    if (n->name[0] && !n->host[0]) {
        resolve(cl, i);
        return NULL;
    }
    redisAsyncContext *ac = redisAsyncConnect(n->host, n->port);
    if (!ac || ac->err) {
        if (ac)
            redisAsyncFree(ac);
        n->retry_at = vsr_now_ms() + CL_RETRY_MS;
        return NULL;
    }
    ac->data = cl;
    if (redisLibuvAttach(ac, cl->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        n->retry_at = vsr_now_ms() + CL_RETRY_MS;
        return NULL;
    }
    redisAsyncSetConnectCallback(ac, on_node_connect);
    redisAsyncSetDisconnectCallback(ac, on_node_disconnect);
    n->ac = ac;
    if (cl->password) {
        const char *argv[3] = {"AUTH", cl->username ? cl->username : cl->password, cl->password};
        size_t lens[3] = {4, strlen(argv[1]), strlen(cl->password)};
        redisAsyncCommandArgv(ac, NULL, NULL, cl->username ? 3 : 2, argv, lens);
    }
    return ac;
}

static void on_slots(redisAsyncContext *ac, void *reply, void *priv)
{
    vsr__rcl_t *cl = priv;
    const redisReply *rep = reply;
    cl->refreshing = 0;
    if (cl->closing)
        return;
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements == 0) {
        if (rep && rep->type == REDIS_REPLY_ERROR)
            vsr_log_warn("store", "redis cluster: CLUSTER SLOTS: %.*s", (int)VSR_MIN(rep->len, 200), rep->str);
        schedule_refresh(cl);
        return;
    }
    int asked = node_of(cl, ac);
    for (int i = 0; i < CL_SLOTS; i++)
        cl->slot[i] = -1;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        const redisReply *m = e->element[2];
        char host[64];
        if (m->element[0]->len == 0 || (m->element[0]->len == 1 && m->element[0]->str[0] == '?')) {
            if (asked < 0)
                continue;
            snprintf(host, sizeof(host), "%s", cl->nodes[asked].host); /* "": the node that answered */
        } else {
            snprintf(host, sizeof(host), "%.*s", (int)VSR_MIN(m->element[0]->len, sizeof(host) - 1),
                     m->element[0]->str);
        }
        int n = node_find(cl, host, (int)m->element[1]->integer);
        if (n < 0 || lo < 0 || hi >= CL_SLOTS || lo > hi)
            continue;
        for (long long s = lo; s <= hi; s++)
            cl->slot[s] = (int16_t)n;
    }
    cl->last_refresh = vsr_now_ms();
    if (!cl->have_map) {
        cl->have_map = 1;
        if (cl->on_ready)
            cl->on_ready(cl->ud);
    }
}

/* Asks one reachable node for the map (the configured addresses and the
 * known nodes in turn). */
static void refresh(vsr__rcl_t *cl)
{
    if (cl->refreshing || cl->closing)
        return;
    for (int k = 0; k < cl->nnodes; k++) {
        int i = (cl->next_ask + k) % cl->nnodes;
        redisAsyncContext *ac = node_conn(cl, i);
        if (!ac)
            continue;
        cl->next_ask = i + 1;
        if (redisAsyncCommand(ac, on_slots, cl, "CLUSTER SLOTS") == REDIS_OK) {
            cl->refreshing = 1;
            cl->refresh_node = i;
            cl->refresh_deadline = vsr_now_ms() + cl->timeout_ms;
            return;
        }
    }
    schedule_refresh(cl);
}

static void refresh_timer_cb(uv_timer_t *t)
{
    refresh(t->data);
}

static void schedule_refresh(vsr__rcl_t *cl)
{
    if (cl->closing || uv_is_active((uv_handle_t *)&cl->t_refresh))
        return;
    /* known map: at most one refresh per CL_REFRESH_MS; none yet: retry soon */
    uint64_t now = vsr_now_ms(), due = cl->last_refresh + CL_REFRESH_MS, wait = CL_RETRY_MS;
    if (cl->have_map)
        wait = due > now ? due - now : 0;
    uv_timer_start(&cl->t_refresh, refresh_timer_cb, wait, 0);
}

/* ---- commands ---- */

static void pend_unlink(vsr__rcl_t *cl, cl_cmd_t *c)
{
    if (c->node < 0)
        return;
    cl_node_t *n = &cl->nodes[c->node];
    if (c->prev)
        c->prev->next = c->next;
    else
        n->pend_head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        n->pend_tail = c->prev;
    c->prev = c->next = NULL;
    c->node = -1;
}

static void pend_link(vsr__rcl_t *cl, cl_cmd_t *c, int node)
{
    cl_node_t *n = &cl->nodes[node];
    c->node = node;
    c->next = NULL;
    c->prev = n->pend_tail;
    if (n->pend_tail)
        n->pend_tail->next = c;
    else
        n->pend_head = c;
    n->pend_tail = c;
}

static void cmd_free(cl_cmd_t *c)
{
    redisFreeCommand(c->cmd);
    vsr_free(c);
}

static void on_cmd_reply(redisAsyncContext *ac, void *reply, void *priv);

static int cmd_send(vsr__rcl_t *cl, int node, cl_cmd_t *c, int asking)
{
    redisAsyncContext *ac = node >= 0 ? node_conn(cl, node) : NULL;
    if (!ac)
        return VSR_ERR_IO;
    if (asking && redisAsyncCommand(ac, NULL, NULL, "ASKING") != REDIS_OK)
        return VSR_ERR_IO;
    if (redisAsyncFormattedCommand(ac, on_cmd_reply, c, c->cmd, (size_t)c->len) != REDIS_OK)
        return VSR_ERR_IO;
    pend_link(cl, c, node);
    return VSR_OK;
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the slot and the node, or -1 */
static int parse_redirect(vsr__rcl_t *cl, const redisReply *rep, int *ask, int *slot)
{
    char buf[160], addr[128];
    snprintf(buf, sizeof(buf), "%.*s", (int)VSR_MIN(rep->len, sizeof(buf) - 1), rep->str);
    char kind[8];
    if (sscanf(buf, "%7s %d %127s", kind, slot, addr) != 3 || *slot < 0 || *slot >= CL_SLOTS)
        return -1;
    if (!strcmp(kind, "MOVED"))
        *ask = 0;
    else if (!strcmp(kind, "ASK"))
        *ask = 1;
    else
        return -1;
    char host[64];
    int port;
    if (vsr__rcl_parse_addr(addr, host, sizeof(host), &port) != VSR_OK)
        return -1;
    return node_find(cl, host, port);
}

static void on_cmd_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    cl_cmd_t *c = priv;
    vsr__rcl_t *cl = c->cl;
    redisReply *rep = reply;
    pend_unlink(cl, c);
    if (rep && rep->type == REDIS_REPLY_ERROR && !cl->closing && c->redirects < CL_MAX_REDIRECTS) {
        int ask = 0, slot = -1;
        int n = parse_redirect(cl, rep, &ask, &slot);
        if (n >= 0) {
            c->redirects++;
            if (!ask) {
                cl->slot[slot] = (int16_t)n; /* at once; the whole map on the next refresh */
                schedule_refresh(cl);
            }
            if (cmd_send(cl, n, c, ask) == VSR_OK)
                return;
            rep = NULL; /* the target cannot be reached: no reply */
        }
    }
    c->fn(ac, rep, c->priv);
    cmd_free(c);
}

/* The key a command routes by: EVAL's first key, else the first argument. */
static vsr_slice_t cmd_key(int argc, const char **argv, const size_t *lens)
{
    if (argc >= 4 && (!strcasecmp(argv[0], "EVAL") || !strcasecmp(argv[0], "EVALSHA")))
        return vsr_slice(argv[3], lens[3]);
    return argc >= 2 ? vsr_slice(argv[1], lens[1]) : VSR_SLICE_NULL;
}

int vsr__rcl_command(vsr__rcl_t *cl, void (*fn)(struct redisAsyncContext *, void *, void *), void *priv, int argc,
                     const char **argv, const size_t *lens)
{
    if (cl->closing)
        return VSR_ERR_IO;
    cl_cmd_t *c = vsr_calloc(1, sizeof(*c));
    c->cl = cl;
    c->node = -1;
    c->deadline = vsr_now_ms() + cl->timeout_ms;
    c->fn = fn;
    c->priv = priv;
    c->len = redisFormatCommandArgv(&c->cmd, argc, argv, lens);
    if (c->len < 0) {
        vsr_free(c);
        return VSR_ERR_IO;
    }
    int node = cl->slot[vsr__rcl_slot(cmd_key(argc, argv, lens))];
    if (node < 0) { /* not in the map (or none yet): any node answers, or redirects with MOVED */
        schedule_refresh(cl);
        for (int i = 0; i < cl->nnodes && node < 0; i++)
            if (cl->nodes[i].ac)
                node = i;
    }
    if (cmd_send(cl, node, c, 0) != VSR_OK) {
        cmd_free(c);
        return VSR_ERR_IO;
    }
    return VSR_OK;
}

static void drop_node(vsr__rcl_t *cl, int i, const char *why)
{
    redisAsyncContext *ac = cl->nodes[i].ac;
    if (!ac)
        return;
    vsr_log_warn("store", "redis cluster: dropping %s:%d: %s", cl->nodes[i].host, cl->nodes[i].port, why);
    cl->nodes[i].ac = NULL;
    cl->nodes[i].retry_at = vsr_now_ms() + CL_RETRY_MS;
    if (cl->refreshing && cl->refresh_node == i)
        cl->refreshing = 0; /* its on_slots gets no reply */
    redisAsyncFree(ac); /* its pending commands are called back without a reply */
    schedule_refresh(cl);
}

/* Each node's oldest command, and the map's request, against their
 * deadlines: a node past one is dropped alone, the others go on. */
static void watch_cb(uv_timer_t *t)
{
    vsr__rcl_t *cl = t->data;
    uint64_t now = vsr_now_ms();
    for (int i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i].pend_head && cl->nodes[i].pend_head->deadline <= now)
            drop_node(cl, i, "a command timed out");
        else if (cl->refreshing && cl->refresh_node == i && cl->refresh_deadline <= now)
            drop_node(cl, i, "CLUSTER SLOTS timed out");
    }
}

int vsr__rcl_ready(const vsr__rcl_t *cl)
{
    if (cl->closing)
        return 0;
    if (cl->have_map)
        return 1;
    for (int i = 0; i < cl->nnodes; i++) /* before the map: a node connecting takes the commands */
        if (cl->nodes[i].ac)
            return 1;
    return 0;
}

void vsr__rcl_drop(vsr__rcl_t *cl)
{
    for (int i = 0; i < cl->nnodes; i++) {
        redisAsyncContext *ac = cl->nodes[i].ac;
        cl->nodes[i].ac = NULL;
        if (ac)
            redisAsyncFree(ac); /* its pending commands are called back without a reply */
    }
    cl->refreshing = 0;
    schedule_refresh(cl);
}

vsr__rcl_t *vsr__rcl_open(uv_loop_t *loop, const char *const *addrs, size_t n, const char *password,
                          const char *username, uint64_t timeout_ms, void (*on_ready)(void *ud), void *ud,
                          vsr_buf_t *err)
{
    if (n == 0) {
        vsr_buf_printf(err, "store: redis cluster mode needs cluster_addresses");
        return NULL;
    }
    vsr__rcl_t *cl = vsr_calloc(1, sizeof(*cl));
    for (size_t i = 0; i < n; i++) {
        char host[64];
        int port;
        unsigned char a[16];
        if (vsr__rcl_parse_addr(addrs[i], host, sizeof(host), &port) != VSR_OK) {
            vsr_buf_printf(err, "store: redis cluster address \"%s\": want host:port", addrs[i]);
            vsr_free(cl);
            return NULL;
        }
        int literal = inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
        if (literal ? node_find(cl, host, port) < 0 : cl->nnodes == CL_MAX_NODES) {
            vsr_buf_printf(err, "store: more than %d redis cluster addresses", CL_MAX_NODES);
            vsr_free(cl);
            return NULL;
        }
        if (!literal) { /* a node of its own, its host "" until resolved */
            cl_node_t *nd = &cl->nodes[cl->nnodes++];
            memset(nd, 0, sizeof(*nd));
            nd->port = port;
            snprintf(nd->name, sizeof(nd->name), "%s", host);
        }
    }
    cl->nseeds = cl->nnodes;
    for (int i = 0; i < CL_SLOTS; i++)
        cl->slot[i] = -1;
    cl->loop = loop;
    cl->password = password ? vsr_strdup(password) : NULL;
    cl->username = username ? vsr_strdup(username) : NULL;
    cl->on_ready = on_ready;
    cl->ud = ud;
    cl->timeout_ms = timeout_ms ? timeout_ms : 250;
    uv_timer_init(loop, &cl->t_refresh);
    uv_timer_init(loop, &cl->t_watch);
    cl->t_refresh.data = cl->t_watch.data = cl;
    cl->timer_open = 2;
    uint64_t every = cl->timeout_ms / 4 ? cl->timeout_ms / 4 : 1;
    uv_timer_start(&cl->t_watch, watch_cb, every, every);
    refresh(cl);
    return cl;
}

static void cl_free(vsr__rcl_t *cl)
{
    vsr_free(cl->password);
    vsr_free(cl->username);
    vsr_free(cl);
}

static void on_refresh_closed(uv_handle_t *h)
{
    vsr__rcl_t *cl = h->data;
    if (--cl->timer_open == 0 && cl->resolving == 0)
        cl_free(cl);
}

void vsr__rcl_close(vsr__rcl_t *cl)
{
    cl->closing = 1;
    for (int i = 0; i < cl->nnodes; i++) {
        redisAsyncContext *ac = cl->nodes[i].ac;
        cl->nodes[i].ac = NULL;
        if (ac)
            redisAsyncFree(ac);
        if (cl->nodes[i].resolving)
            uv_cancel((uv_req_t *)&cl->nodes[i].gai); /* its callback still runs, and frees the last */
    }
    uv_close((uv_handle_t *)&cl->t_refresh, on_refresh_closed);
    uv_close((uv_handle_t *)&cl->t_watch, on_refresh_closed);
}

/* ---- the blocking client ---- */

static redisContext *sync_open(const char *host, int port, struct timeval tv, const char *password)
{
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c)
        return NULL;
    if (c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    if (password) {
        redisReply *r = redisCommand(c, "AUTH %s", password);
        int bad = !r || r->type == REDIS_REPLY_ERROR;
        if (r)
            freeReplyObject(r);
        if (bad) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

redisContext *vsr__rcl_sync_connect(const char *const *addrs, size_t n, unsigned slot, uint64_t timeout_ms,
                                    const char *password)
{
    struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
    for (size_t i = 0; i < n; i++) {
        char host[64], target[64] = "";
        int port, tport = 0;
        if (vsr__rcl_parse_addr(addrs[i], host, sizeof(host), &port) != VSR_OK)
            continue;
        redisContext *c = sync_open(host, port, tv, password);
        if (!c)
            continue;
        redisReply *r = redisCommand(c, "CLUSTER SLOTS");
        for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
            const redisReply *e = r->element[j];
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
                e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
                e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
                e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
                continue;
            if ((long long)slot < e->element[0]->integer || (long long)slot > e->element[1]->integer)
                continue;
            const redisReply *h = e->element[2]->element[0];
            if (h->len == 0 || (h->len == 1 && h->str[0] == '?'))
                snprintf(target, sizeof(target), "%s", host);
            else
                snprintf(target, sizeof(target), "%.*s", (int)VSR_MIN(h->len, sizeof(target) - 1), h->str);
            tport = (int)e->element[2]->element[1]->integer;
        }
        if (r)
            freeReplyObject(r);
        if (!target[0]) {
            redisFree(c);
            continue;
        }
        if (tport == port && !strcmp(target, host))
            return c;
        redisFree(c);
        c = sync_open(target, tport, tv, password);
        if (c)
            return c;
    }
    return NULL;
}
