/* pool.c — per-request arena with cleanup hooks. */
#include "base/base.h"

#include <pthread.h>

#define POOL_CHUNK 4096
#define POOL_ALIGN 16
/* Standard chunks a thread keeps once freed (128 KiB): a request's pools
 * and blocks take theirs from here instead of from malloc. */
#define POOL_CACHE_MAX 32

struct vsr_pool_chunk_s {
    vsr_pool_chunk_t *next;
    size_t size;
    /* data follows, aligned */
};

struct vsr_pool_cleanup_s {
    vsr_pool_cleanup_t *next;
    void (*fn)(void *);
    void *arg;
};

#define CHUNK_HDR ((sizeof(vsr_pool_chunk_t) + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1))

static __thread vsr_pool_chunk_t *cache;
static __thread unsigned cache_n;
static __thread int cache_owned; /* this thread's exit gives the cache back */
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;

static void cache_exit(void *unused)
{
    VSR_UNUSED(unused);
    vsr_pool_trim_cache();
}

static void cache_key_make(void)
{
    if (pthread_key_create(&cache_key, cache_exit) != 0)
        VSR_BUG_ON(1);
}

static vsr_pool_chunk_t *chunk_get(void)
{
    vsr_pool_chunk_t *c = cache;
    if (c == NULL)
        return vsr_malloc(CHUNK_HDR + POOL_CHUNK);
    cache = c->next;
    cache_n--;
    return c;
}

static void chunk_put(vsr_pool_chunk_t *c)
{
    if (c->size != POOL_CHUNK || cache_n >= POOL_CACHE_MAX) {
        vsr_free(c);
        return;
    }
    if (!cache_owned) {
        pthread_once(&cache_once, cache_key_make);
        pthread_setspecific(cache_key, &cache_owned); /* any non-NULL value: the destructor runs */
        cache_owned = 1;
    }
    c->next = cache;
    cache = c;
    cache_n++;
}

void *vsr_block_calloc(size_t n)
{
    VSR_BUG_ON(n > VSR_BLOCK_MAX);
    vsr_pool_chunk_t *c = chunk_get();
    c->size = POOL_CHUNK;
    c->next = NULL;
    void *p = (char *)c + CHUNK_HDR;
    memset(p, 0, n);
    return p;
}

void vsr_block_free(void *p)
{
    if (p != NULL)
        chunk_put((vsr_pool_chunk_t *)(void *)((char *)p - CHUNK_HDR));
}

void vsr_pool_trim_cache(void)
{
    while (cache) {
        vsr_pool_chunk_t *c = cache;
        cache = c->next;
        vsr_free(c);
    }
    cache_n = 0;
}

void vsr_pool_init(vsr_pool_t *pool)
{
    pool->chunks = NULL;
    pool->cleanups = NULL;
    pool->cur = pool->end = NULL;
}

void *vsr_pool_alloc(vsr_pool_t *pool, size_t n)
{
    n = (n + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1);
    if (n == 0)
        n = POOL_ALIGN;
    if ((size_t)(pool->end - pool->cur) >= n && pool->cur) {
        void *p = pool->cur;
        pool->cur += n;
        return p;
    }
    if (n > POOL_CHUNK / 4) {
        /* large: a chunk of its own, linked behind the current one */
        vsr_pool_chunk_t *c = vsr_malloc(CHUNK_HDR + n);
        c->size = n;
        if (pool->chunks) {
            c->next = pool->chunks->next;
            pool->chunks->next = c;
        } else {
            c->next = NULL;
            pool->chunks = c;
        }
        return (char *)c + CHUNK_HDR;
    }
    vsr_pool_chunk_t *c = chunk_get();
    c->size = POOL_CHUNK;
    c->next = pool->chunks;
    pool->chunks = c;
    pool->cur = (char *)c + CHUNK_HDR + n;
    pool->end = (char *)c + CHUNK_HDR + POOL_CHUNK;
    return (char *)c + CHUNK_HDR;
}

char *vsr_pool_strndup(vsr_pool_t *pool, const char *s, size_t n)
{
    char *d = vsr_pool_alloc(pool, n + 1);
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

vsr_slice_t vsr_pool_dup_slice(vsr_pool_t *pool, vsr_slice_t s)
{
    return vsr_slice(vsr_pool_strndup(pool, s.p, s.len), s.len);
}

void vsr_pool_on_clear(vsr_pool_t *pool, void (*fn)(void *), void *arg)
{
    vsr_pool_cleanup_t *c = vsr_pool_alloc(pool, sizeof(*c));
    c->fn = fn;
    c->arg = arg;
    c->next = pool->cleanups;
    pool->cleanups = c;
}

static void run_cleanups(vsr_pool_t *pool)
{
    while (pool->cleanups) {
        vsr_pool_cleanup_t *c = pool->cleanups;
        pool->cleanups = c->next;
        c->fn(c->arg);
    }
}

void vsr_pool_clear(vsr_pool_t *pool)
{
    run_cleanups(pool);
    /* keep one standard-size chunk for reuse */
    vsr_pool_chunk_t *keep = NULL;
    vsr_pool_chunk_t *c = pool->chunks;
    while (c) {
        vsr_pool_chunk_t *next = c->next;
        if (keep == NULL && c->size == POOL_CHUNK) {
            keep = c;
            keep->next = NULL;
        } else {
            chunk_put(c);
        }
        c = next;
    }
    pool->chunks = keep;
    if (keep) {
        pool->cur = (char *)keep + CHUNK_HDR;
        pool->end = pool->cur + POOL_CHUNK;
    } else {
        pool->cur = pool->end = NULL;
    }
}

void vsr_pool_free(vsr_pool_t *pool)
{
    run_cleanups(pool);
    vsr_pool_chunk_t *c = pool->chunks;
    while (c) {
        vsr_pool_chunk_t *next = c->next;
        chunk_put(c);
        c = next;
    }
    vsr_pool_init(pool);
}
