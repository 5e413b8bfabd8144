/*
 * store_bench.c — the response cache's stores: hit latency of an exact get
 * and of a semantic search (index scan + value) at 1k and 100k entries, for
 * the memory backend (both index kernels) and for redis (a redis-server this
 * program starts on a unix socket in a temporary directory, no persistence,
 * killed at the end).  Also the time a fresh replica takes to load the
 * index from the stream.  Prints a table (p50 / p99 in microseconds).
 *
 *   build/store_bench [queries]      (default 2000 per row)
 *
 * Entries: 512-float random unit vectors, 200-byte values, one partition;
 * the semantic queries are stored vectors with noise (similarity ~0.95),
 * threshold 0.9, so every query is a hit.  OpenBLAS runs on one thread, as
 * on a worker.
 */
#include <cblas.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "store/store.h"

static uint64_t rng = 88172645463325252ULL;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static double grand(void)
{
    double u = urand() + 1e-12, v = urand();
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}
static void normalize(float *v)
{
    double n = 0;
    for (int i = 0; i < VSR_STORE_DIM; i++)
        n += (double)v[i] * v[i];
    n = sqrt(n);
    for (int i = 0; i < VSR_STORE_DIM; i++)
        v[i] = (float)(v[i] / n);
}
static void random_unit(float *v)
{
    for (int i = 0; i < VSR_STORE_DIM; i++)
        v[i] = (float)grand();
    normalize(v);
}
/* v plus noise: similarity about 0.95 to v */
static void near_of(const float *v, float *out)
{
    for (int i = 0; i < VSR_STORE_DIM; i++)
        out[i] = v[i] + (float)(grand() * 0.0145);
    normalize(out);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *backend, const char *op, size_t n, uint64_t *lat, int q, int hits)
{
    qsort(lat, (size_t)q, sizeof(*lat), cmp_u64);
    printf("| %-14s | %-22s | %7zu | %9.2f | %9.2f | %5.1f%% |\n", backend, op, n, lat[q / 2] / 1000.0,
           lat[(size_t)q * 99 / 100] / 1000.0, 100.0 * hits / q);
    fflush(stdout);
}

typedef struct {
    int calls, status, pending;
} res_t;

static void on_done(void *ud, int status, const vsr_store_hit_t *hit)
{
    VSR_UNUSED(hit);
    res_t *r = ud;
    r->calls++;
    r->status = status;
    r->pending--;
}

static float *vectors; /* n x DIM */
static char value[200];

static void key_of(char *k, size_t i)
{
    snprintf(k, 32, "key-%zu", i);
}

static void bench_memory(size_t n, int q, vsr_store_kernel_t kernel, int exact)
{
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.max_entries = n;
    cfg.max_bytes = (size_t)8 << 30;
    cfg.kernel = kernel;
    vsr_store_t *s = vsr_store_open(NULL, &cfg, NULL);
    res_t r = {0};
    char k[32];
    for (size_t i = 0; i < n; i++) {
        key_of(k, i);
        vsr_store_put(s, vsr_slice_cstr(k), vsr_slice(value, sizeof(value)), 3600000, vectors + i * VSR_STORE_DIM,
                      VSR_SLICE_NULL, VSR_SLICE_LIT("rev1"), on_done, &r, NULL);
    }
    uint64_t *lat = malloc(sizeof(*lat) * (size_t)q);
    float qv[VSR_STORE_DIM];
    int hits = 0;
    for (int i = 0; i < q; i++) {
        size_t pick = (size_t)(urand() * (double)n);
        if (exact) {
            key_of(k, pick);
            uint64_t t0 = now_ns();
            vsr_store_get(s, vsr_slice_cstr(k), on_done, &r, NULL);
            lat[i] = now_ns() - t0;
        } else {
            near_of(vectors + pick * VSR_STORE_DIM, qv);
            uint64_t t0 = now_ns();
            vsr_store_search(s, qv, VSR_SLICE_NULL, VSR_SLICE_LIT("rev1"), 0.9f, on_done, &r, NULL);
            lat[i] = now_ns() - t0;
        }
        hits += r.status == VSR_OK;
    }
    report(kernel == VSR_STORE_KERNEL_BLAS   ? "memory (blas)"
           : kernel == VSR_STORE_KERNEL_INT8 ? "memory (int8)"
                                             : "memory (loop)", exact ? "exact get" : "semantic search", n,
           lat, q, hits);
    free(lat);
    vsr_store_close(s);
}

/* ---- redis ---- */

static pid_t redis_pid = -1;
static char rdir[64], rsock[100];

static void redis_stop(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        redis_pid = -1;
    }
    if (rdir[0]) {
        unlink(rsock);
        rmdir(rdir);
        rdir[0] = 0;
    }
}

static int redis_start(void)
{
    snprintf(rdir, sizeof(rdir), "/tmp/vsr-store-bench-XXXXXX");
    if (!mkdtemp(rdir))
        return -1;
    snprintf(rsock, sizeof(rsock), "%s/redis.sock", rdir);
    redis_pid = fork();
    if (redis_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", rsock, "--save", "", "--appendonly",
               "no", "--dir", rdir, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", rsock);
        int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(fd);
        if (ok)
            return 0;
        usleep(10000);
    }
    return -1;
}

static uv_loop_t loop;

static vsr_store_t *redis_open(size_t n, const char *prefix)
{
    vsr_store_config_t cfg;
    vsr_store_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    char addr[128];
    snprintf(addr, sizeof(addr), "unix:%s", rsock);
    cfg.address = addr;
    cfg.key_prefix = prefix;
    cfg.max_entries = n;
    cfg.command_timeout_ms = 5000;
    cfg.max_inflight = 256;
    vsr_store_t *s = vsr_store_open(&loop, &cfg, NULL);
    vsr_store_stats_t st;
    do {
        uv_run(&loop, UV_RUN_ONCE);
        vsr_store_stats(s, &st);
    } while (!st.connected);
    return s;
}

static void wait_all(res_t *r)
{
    while (r->pending > 0)
        uv_run(&loop, UV_RUN_ONCE);
}

static void bench_redis(size_t n, int q)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "b%zu:", n);
    vsr_store_t *s = redis_open(n, prefix);
    res_t r = {0};
    char k[32];
    for (size_t i = 0; i < n; i++) {
        key_of(k, i);
        r.pending++;
        if (vsr_store_put(s, vsr_slice_cstr(k), vsr_slice(value, sizeof(value)), 3600000,
                          vectors + i * VSR_STORE_DIM, VSR_SLICE_NULL, VSR_SLICE_LIT("rev1"), on_done, &r,
                          NULL) == VSR_OK && r.status != VSR_OK) {
            fprintf(stderr, "store_bench: put failed: %s\n", vsr_strerror(r.status));
            exit(1);
        }
        if (r.pending >= 200)
            while (r.pending > 100)
                uv_run(&loop, UV_RUN_ONCE);
    }
    wait_all(&r);
    /* a fresh replica loads the index */
    uint64_t t0 = now_ns();
    vsr_store_t *b = redis_open(n, prefix);
    vsr_store_stats_t st;
    do {
        uv_run(&loop, UV_RUN_ONCE);
        vsr_store_stats(b, &st);
    } while (st.index_entries < n);
    printf("| %-14s | %-22s | %7zu | %9.0f | %9s | %6s |\n", "redis", "replica index load (ms)", n,
           (now_ns() - t0) / 1e6, "", "");
    uint64_t *lat = malloc(sizeof(*lat) * (size_t)q);
    float qv[VSR_STORE_DIM];
    for (int pass = 0; pass < 2; pass++) {
        int hits = 0;
        for (int i = 0; i < q; i++) {
            size_t pick = (size_t)(urand() * (double)n);
            r.pending = 1;
            uint64_t t1 = now_ns();
            if (pass == 0) {
                key_of(k, pick);
                vsr_store_get(b, vsr_slice_cstr(k), on_done, &r, NULL);
            } else {
                near_of(vectors + pick * VSR_STORE_DIM, qv);
                t1 = now_ns();
                vsr_store_search(b, qv, VSR_SLICE_NULL, VSR_SLICE_LIT("rev1"), 0.9f, on_done, &r, NULL);
            }
            wait_all(&r);
            lat[i] = now_ns() - t1;
            hits += r.status == VSR_OK;
        }
        report("redis", pass == 0 ? "exact get" : "semantic search + GET", n, lat, q, hits);
    }
    free(lat);
    vsr_store_close(s);
    vsr_store_close(b);
    uv_run(&loop, UV_RUN_DEFAULT);
}

int main(int argc, char **argv)
{
    int q = argc > 1 ? atoi(argv[1]) : 2000;
    if (q < 10)
        q = 10;
    openblas_set_num_threads(1);
    memset(value, 'v', sizeof(value));
    size_t sizes[2] = {1000, 100000};
    vectors = malloc(sizes[1] * VSR_STORE_DIM * sizeof(float));
    for (size_t i = 0; i < sizes[1]; i++)
        random_unit(vectors + i * VSR_STORE_DIM);
    printf("| backend        | operation              | entries |  p50 (us) |  p99 (us) |   hits |\n");
    printf("|----------------|------------------------|---------|-----------|-----------|--------|\n");
    for (int i = 0; i < 2; i++) {
        bench_memory(sizes[i], q, VSR_STORE_KERNEL_LOOP, 1);
        bench_memory(sizes[i], q, VSR_STORE_KERNEL_LOOP, 0);
        bench_memory(sizes[i], q, VSR_STORE_KERNEL_BLAS, 0);
        bench_memory(sizes[i], q, VSR_STORE_KERNEL_INT8, 0);
    }
    uv_loop_init(&loop);
    if (redis_start() != 0) {
        fprintf(stderr, "store_bench: cannot start redis-server (scripts/setup-deps installs it)\n");
        redis_stop();
        return 1;
    }
    for (int i = 0; i < 2; i++)
        bench_redis(sizes[i], q);
    redis_stop();
    uv_loop_close(&loop);
    free(vectors);
    return 0;
}
