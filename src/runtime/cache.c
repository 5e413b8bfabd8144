/*
 * cache.c — the embedding cache: a chained hash table over (model, text)
 * with an LRU list, bounded by entries and bytes, one mutex.
 */
#include <pthread.h>

#include "runtime-int.h"

typedef struct entry_s {
    struct entry_s *chain;       /* next in the bucket */
    struct entry_s *prev, *next; /* LRU list: head = most recent */
    uint64_t hash;
    size_t model_len, text_len, dim, bytes;
    float *vec;                  /* into data, aligned */
    char data[];                 /* vec, model, text */
} entry_t;

struct vsr_emb_cache_s {
    pthread_mutex_t mu;
    entry_t **buckets;
    size_t mask;
    entry_t *head, *tail;
    size_t max_entries, max_bytes;
    vsr_emb_cache_stats_t st;
};

vsr_emb_cache_t *vsr_emb_cache_new(size_t max_entries, size_t max_bytes)
{
    if (max_entries == 0 || max_bytes == 0)
        return NULL;
    vsr_emb_cache_t *c = vsr_calloc(1, sizeof *c);
    size_t nb = 16;
    while (nb < max_entries && nb < ((size_t)1 << 20))
        nb <<= 1;
    c->buckets = vsr_calloc(nb, sizeof *c->buckets);
    c->mask = nb - 1;
    c->max_entries = max_entries;
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void unlink_lru(vsr_emb_cache_t *c, entry_t *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(vsr_emb_cache_t *c, entry_t *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (c->tail == NULL)
        c->tail = e;
}

static void remove_entry(vsr_emb_cache_t *c, entry_t *e)
{
    entry_t **pp = &c->buckets[e->hash & c->mask];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    unlink_lru(c, e);
    c->st.entries--;
    c->st.bytes -= e->bytes;
    vsr_free(e);
}

void vsr_emb_cache_free(vsr_emb_cache_t *c)
{
    if (c == NULL)
        return;
    for (entry_t *e = c->head, *n; e; e = n) {
        n = e->next;
        vsr_free(e);
    }
    vsr_free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    vsr_free(c);
}

static const char *e_model(const entry_t *e)
{
    return e->data + e->dim * sizeof(float);
}

static entry_t *find(vsr_emb_cache_t *c, uint64_t h, vsr_slice_t model, vsr_slice_t text, size_t dim)
{
    for (entry_t *e = c->buckets[h & c->mask]; e; e = e->chain)
        if (e->hash == h && e->dim == dim && e->model_len == model.len && e->text_len == text.len &&
            memcmp(e_model(e), model.p, model.len) == 0 && memcmp(e_model(e) + model.len, text.p, text.len) == 0)
            return e;
    return NULL;
}

int vsr_emb_cache_get(vsr_emb_cache_t *c, vsr_slice_t model, vsr_slice_t text, float *out, size_t dim)
{
    if (c == NULL)
        return 0;
    uint64_t h = vsr__rt_hash(model, text);
    pthread_mutex_lock(&c->mu);
    entry_t *e = find(c, h, model, text, dim);
    if (e) {
        memcpy(out, e->vec, dim * sizeof *out);
        unlink_lru(c, e);
        push_front(c, e);
        c->st.hits++;
    } else {
        c->st.misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return e != NULL;
}

void vsr_emb_cache_put(vsr_emb_cache_t *c, vsr_slice_t model, vsr_slice_t text, const float *vec, size_t dim)
{
    if (c == NULL)
        return;
    size_t bytes = sizeof(entry_t) + dim * sizeof(float) + model.len + text.len;
    if (bytes > c->max_bytes)
        return;
    uint64_t h = vsr__rt_hash(model, text);
    entry_t *n = vsr_malloc(bytes);
    memset(n, 0, sizeof *n);
    n->hash = h;
    n->model_len = model.len;
    n->text_len = text.len;
    n->dim = dim;
    n->bytes = bytes;
    n->vec = (float *)n->data; /* data follows size_t fields: float-aligned */
    memcpy(n->vec, vec, dim * sizeof(float));
    memcpy(n->data + dim * sizeof(float), model.p, model.len);
    memcpy(n->data + dim * sizeof(float) + model.len, text.p, text.len);
    pthread_mutex_lock(&c->mu);
    entry_t *old = find(c, h, model, text, dim);
    if (old)
        remove_entry(c, old);
    while (c->tail && (c->st.entries + 1 > c->max_entries || c->st.bytes + bytes > c->max_bytes)) {
        remove_entry(c, c->tail);
        c->st.evictions++;
    }
    n->chain = c->buckets[h & c->mask];
    c->buckets[h & c->mask] = n;
    push_front(c, n);
    c->st.entries++;
    c->st.bytes += bytes;
    pthread_mutex_unlock(&c->mu);
}

void vsr_emb_cache_stats(vsr_emb_cache_t *c, vsr_emb_cache_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}
