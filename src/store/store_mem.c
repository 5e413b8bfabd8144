/*
 * store_mem.c — the memory table: a chained hash table over the keys, the
 * eviction order (LRU and FIFO: one doubly linked list, which a read moves
 * to the front for LRU only; LFU: a list of buckets by read count, each a
 * list of its entries, so a read moves its entry to the next count's
 * bucket), and the semantic index (a contiguous float32
 * matrix whose rows point back to their entries; a removed row takes the
 * last row's place, so the matrix stays dense).  get/put/del are O(1);
 * search is one pass over the rows.
 */
#include <cblas.h>
#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "store-int.h"

#define ROW_BYTES (VSR_STORE_DIM * sizeof(float))
#define EXPIRED_REAP 64 /* rows found dead in one search and dropped after it */
#define Q_SCALE 127.0f  /* int8 rows: round(x * 127); unit vectors' components are in [-1, 1] */
#define Q_MARGIN 0.02f  /* int8 estimates this close to the threshold are rescored */
#define Q_CANDIDATES 8  /* at most this many rescored per search, the best estimates */

size_t vsr__mtab_cost(size_t klen, size_t vlen, size_t slen, size_t plen, int has_emb)
{
    size_t c = sizeof(vsr__mentry_t) + klen + vlen + slen + plen + sizeof(void *); /* + its bucket slot */
    if (has_emb)
        c += ROW_BYTES + VSR_STORE_DIM + sizeof(void *) + 2 * sizeof(uint64_t);
    return c;
}

void vsr__mtab_init(vsr__mtab_t *t, size_t max_entries, size_t max_bytes, vsr_store_kernel_t kernel,
                    vsr_store_eviction_t policy, vsr__store_ctr_t *ctr)
{
    memset(t, 0, sizeof(*t));
    t->max_entries = max_entries;
    t->max_bytes = max_bytes;
    t->nbuckets = 16;
    while (t->nbuckets < max_entries && t->nbuckets < ((size_t)1 << 30))
        t->nbuckets <<= 1;
    t->buckets = vsr_calloc(t->nbuckets, sizeof(*t->buckets));
    t->lru.next = t->lru.prev = &t->lru;
    t->fb.next = t->fb.prev = &t->fb;
    t->policy = policy;
    t->seed = 0xcbf29ce484222325ULL ^ ((uint64_t)(uintptr_t)t * 0x9e3779b97f4a7c15ULL) ^ vsr_now_us();
    t->kernel = kernel;
    t->ctr = ctr;
}

static uint64_t tag_of(const vsr__mtab_t *t, vsr_slice_t scope, vsr_slice_t part)
{
    uint64_t h = vsr__store_hash(t->seed, scope);
    h ^= 0xff; /* separates ("ab","c") from ("a","bc") with the lengths below */
    h *= 0x100000001b3ULL;
    h = vsr__store_hash(h ^ (scope.len << 16) ^ part.len, part);
    return h;
}

static void row_remove(vsr__mtab_t *t, vsr__mentry_t *e)
{
    if (e->row < 0)
        return;
    size_t r = (size_t)e->row, last = t->rows - 1;
    if (r != last) {
        memcpy(t->mat + r * VSR_STORE_DIM, t->mat + last * VSR_STORE_DIM, ROW_BYTES);
        if (t->qmat)
            memcpy(t->qmat + r * VSR_STORE_DIM, t->qmat + last * VSR_STORE_DIM, VSR_STORE_DIM);
        t->row_entry[r] = t->row_entry[last];
        t->row_expiry[r] = t->row_expiry[last];
        t->row_tag[r] = t->row_tag[last];
        t->row_entry[r]->row = (int64_t)r;
    }
    t->rows--;
    e->row = -1;
}

static void quantise(int8_t *out, const float *v)
{
    for (size_t i = 0; i < VSR_STORE_DIM; i++) {
        float x = v[i] * Q_SCALE;
        x = x > Q_SCALE ? Q_SCALE : x < -Q_SCALE ? -Q_SCALE : x;
        out[i] = (int8_t)lrintf(x);
    }
}

static void row_add(vsr__mtab_t *t, vsr__mentry_t *e, const float *emb)
{
    if (t->rows == t->row_cap) {
        size_t cap = t->row_cap ? t->row_cap * 2 : 64;
        if (cap > t->max_entries)
            cap = t->max_entries;
        VSR_BUG_ON(cap <= t->rows);
        t->mat = vsr_realloc(t->mat, cap * ROW_BYTES);
        t->row_entry = vsr_realloc(t->row_entry, cap * sizeof(*t->row_entry));
        t->row_expiry = vsr_realloc(t->row_expiry, cap * sizeof(*t->row_expiry));
        t->row_tag = vsr_realloc(t->row_tag, cap * sizeof(*t->row_tag));
        t->scores = vsr_realloc(t->scores, cap * sizeof(*t->scores));
        if (t->kernel == VSR_STORE_KERNEL_INT8)
            t->qmat = vsr_realloc(t->qmat, cap * VSR_STORE_DIM);
        t->row_cap = cap;
    }
    size_t r = t->rows++;
    memcpy(t->mat + r * VSR_STORE_DIM, emb, ROW_BYTES);
    if (t->qmat)
        quantise(t->qmat + r * VSR_STORE_DIM, emb);
    t->row_entry[r] = e;
    t->row_expiry[r] = e->expiry;
    t->row_tag[r] = tag_of(t, vsr__me_scope(e), vsr__me_part(e));
    e->row = (int64_t)r;
}

static vsr__mentry_t **find_slot(vsr__mtab_t *t, vsr_slice_t key, uint64_t h)
{
    vsr__mentry_t **pp = &t->buckets[h & (t->nbuckets - 1)];
    while (*pp && !((*pp)->hash == h && vsr_slice_eq(vsr__me_key(*pp), key)))
        pp = &(*pp)->hnext;
    return pp;
}

static void lru_unlink(vsr__mentry_t *e)
{
    e->lru.prev->next = e->lru.next;
    e->lru.next->prev = e->lru.prev;
}

static void lru_front(vsr__mtab_t *t, vsr__mentry_t *e)
{
    e->lru.next = t->lru.next;
    e->lru.prev = &t->lru;
    t->lru.next->prev = &e->lru;
    t->lru.next = &e->lru;
}

/* LFU: a bucket for `count` right after `after` (the sentinel or a bucket) */
static vsr__fbucket_t *fb_after(vsr__mtab_t *t, vsr__fbucket_t *after, uint64_t count)
{
    vsr__fbucket_t *n = after->next;
    if (n != &t->fb && n->count == count)
        return n;
    vsr__fbucket_t *b = vsr_malloc(sizeof(*b));
    b->count = count;
    b->list.next = b->list.prev = &b->list;
    b->prev = after;
    b->next = n;
    n->prev = b;
    after->next = b;
    return b;
}

static void fb_push(vsr__fbucket_t *b, vsr__mentry_t *e)
{
    e->fb = b;
    e->lru.next = b->list.next;
    e->lru.prev = &b->list;
    b->list.next->prev = &e->lru;
    b->list.next = &e->lru;
}

/* takes e off its order; LFU frees its bucket when it empties */
static void order_unlink(vsr__mtab_t *t, vsr__mentry_t *e)
{
    VSR_UNUSED(t);
    lru_unlink(e);
    vsr__fbucket_t *b = e->fb;
    if (b && b->list.next == &b->list) {
        b->prev->next = b->next;
        b->next->prev = b->prev;
        vsr_free(b);
    }
    e->fb = NULL;
}

/* a new entry: the most recent, or one read */
static void order_insert(vsr__mtab_t *t, vsr__mentry_t *e)
{
    if (t->policy == VSR_STORE_EVICT_LFU)
        fb_push(fb_after(t, &t->fb, 1), e);
    else
        lru_front(t, e);
}

/* a read of e */
static void order_touch(vsr__mtab_t *t, vsr__mentry_t *e)
{
    if (t->policy == VSR_STORE_EVICT_FIFO)
        return;
    if (t->policy == VSR_STORE_EVICT_LRU) {
        lru_unlink(e);
        lru_front(t, e);
        return;
    }
    vsr__fbucket_t *b = e->fb;
    if (b->count == UINT64_MAX)
        return;
    vsr__fbucket_t *nb = fb_after(t, b, b->count + 1); /* before b can go */
    order_unlink(t, e);
    fb_push(nb, e);
}

/* the entry the policy evicts first */
static vsr__mentry_t *order_victim(vsr__mtab_t *t)
{
    if (t->policy == VSR_STORE_EVICT_LFU) {
        VSR_BUG_ON(t->fb.next == &t->fb);
        return (vsr__mentry_t *)t->fb.next->list.prev;
    }
    VSR_BUG_ON(t->lru.prev == &t->lru);
    return (vsr__mentry_t *)t->lru.prev;
}

static void entry_remove(vsr__mtab_t *t, vsr__mentry_t *e)
{
    vsr__mentry_t **pp = find_slot(t, vsr__me_key(e), e->hash);
    VSR_BUG_ON(*pp != e);
    *pp = e->hnext;
    order_unlink(t, e);
    row_remove(t, e);
    t->n--;
    t->bytes -= e->cost;
    vsr_free(e);
}

void vsr__mtab_free(vsr__mtab_t *t)
{
    for (size_t i = 0; t->buckets && i < t->nbuckets; i++)
        for (vsr__mentry_t *e = t->buckets[i], *next; e; e = next) {
            next = e->hnext;
            vsr_free(e);
        }
    for (vsr__fbucket_t *b = t->fb.next, *next; b && b != &t->fb; b = next) {
        next = b->next;
        vsr_free(b);
    }
    vsr_free(t->buckets);
    vsr_free(t->mat);
    vsr_free(t->qmat);
    vsr_free(t->row_entry);
    vsr_free(t->row_expiry);
    vsr_free(t->row_tag);
    vsr_free(t->scores);
    memset(t, 0, sizeof(*t));
}

vsr__mentry_t *vsr__mtab_get(vsr__mtab_t *t, vsr_slice_t key, uint64_t now)
{
    uint64_t h = vsr__store_hash(t->seed, key);
    vsr__mentry_t *e = *find_slot(t, key, h);
    if (!e)
        return NULL;
    if (e->expiry <= now) {
        entry_remove(t, e);
        vsr__ctr_inc(&t->ctr->expired);
        return NULL;
    }
    order_touch(t, e);
    return e;
}

int vsr__mtab_del(vsr__mtab_t *t, vsr_slice_t key)
{
    uint64_t h = vsr__store_hash(t->seed, key);
    vsr__mentry_t *e = *find_slot(t, key, h);
    if (!e)
        return 0;
    entry_remove(t, e);
    return 1;
}

int vsr__mtab_put(vsr__mtab_t *t, vsr_slice_t key, vsr_slice_t value, uint64_t expiry, const float *emb,
                  vsr_slice_t scope, vsr_slice_t part, uint64_t now)
{
    size_t cost = vsr__mtab_cost(key.len, value.len, scope.len, part.len, emb != NULL);
    if (cost > t->max_bytes || t->max_entries == 0)
        return VSR_ERR_TOO_BIG;
    vsr__mtab_del(t, key);
    /* room: the policy's victims, counted as expired when already dead */
    while (t->n >= t->max_entries || t->bytes + cost > t->max_bytes) {
        vsr__mentry_t *victim = order_victim(t);
        if (victim->expiry <= now)
            vsr__ctr_inc(&t->ctr->expired);
        else
            vsr__ctr_inc(&t->ctr->evictions);
        entry_remove(t, victim);
    }
    vsr__mentry_t *e = vsr_malloc(sizeof(*e) + key.len + value.len + scope.len + part.len);
    e->hash = vsr__store_hash(t->seed, key);
    e->expiry = expiry;
    e->cost = cost;
    e->row = -1;
    e->fb = NULL;
    e->klen = (uint32_t)key.len;
    e->vlen = (uint32_t)value.len;
    e->slen = (uint8_t)scope.len;
    e->plen = (uint8_t)part.len;
    char *p = e->data;
    if (key.len)
        memcpy(p, key.p, key.len);
    p += key.len;
    if (value.len)
        memcpy(p, value.p, value.len);
    p += value.len;
    if (scope.len)
        memcpy(p, scope.p, scope.len);
    p += scope.len;
    if (part.len)
        memcpy(p, part.p, part.len);
    vsr__mentry_t **pp = &t->buckets[e->hash & (t->nbuckets - 1)];
    e->hnext = *pp;
    *pp = e;
    order_insert(t, e);
    t->n++;
    t->bytes += cost;
    if (emb)
        row_add(t, e, emb);
    return VSR_OK;
}

static float dot(const float *a, const float *b)
{
    float acc[16] = {0};
    for (size_t j = 0; j < VSR_STORE_DIM; j += 16)
        for (size_t k = 0; k < 16; k++)
            acc[k] += a[j + k] * b[j + k];
    float s = 0;
    for (size_t k = 0; k < 16; k++)
        s += acc[k];
    return s;
}

/* the int8 row against the query widened to int16 */
#if defined(__SSE2__)
static int32_t dot_i8(const int8_t *a, const int16_t *b)
{
    __m128i acc0 = _mm_setzero_si128(), acc1 = _mm_setzero_si128();
    for (size_t j = 0; j < VSR_STORE_DIM; j += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(a + j));
        /* sign-extend the bytes to words: each byte in a word's high half, then shift */
        __m128i lo = _mm_srai_epi16(_mm_unpacklo_epi8(x, x), 8);
        __m128i hi = _mm_srai_epi16(_mm_unpackhi_epi8(x, x), 8);
        acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(lo, _mm_loadu_si128((const __m128i *)(b + j))));
        acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(hi, _mm_loadu_si128((const __m128i *)(b + j + 8))));
    }
    __m128i acc = _mm_add_epi32(acc0, acc1);
    acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, 0x4E));
    acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, 0xB1));
    return _mm_cvtsi128_si32(acc);
}
#else
static int32_t dot_i8(const int8_t *a, const int16_t *b)
{
    int32_t s = 0;
    for (size_t j = 0; j < VSR_STORE_DIM; j++)
        s += a[j] * b[j];
    return s;
}
#endif

vsr__mentry_t *vsr__mtab_search(vsr__mtab_t *t, const float *q, vsr_slice_t scope, vsr_slice_t part,
                                float threshold, uint64_t now, float *sim)
{
    int8_t qq[VSR_STORE_DIM];
    int16_t qw[VSR_STORE_DIM];
    size_t cand[Q_CANDIDATES];
    int32_t cand_est[Q_CANDIDATES];
    size_t ncand = 0;
    int int8 = t->kernel == VSR_STORE_KERNEL_INT8;
    int32_t floor_est = 0;
    if (int8) {
        quantise(qq, q);
        for (size_t i = 0; i < VSR_STORE_DIM; i++)
            qw[i] = qq[i];
        float f = (threshold - Q_MARGIN) * Q_SCALE * Q_SCALE;
        floor_est = f < -1e9f ? INT32_MIN : (int32_t)floorf(f);
    }
    uint64_t tag = tag_of(t, scope, part);
    size_t dead[EXPIRED_REAP], ndead = 0;
    ssize_t best = -1;
    float best_sim = threshold;
    int blas = t->kernel == VSR_STORE_KERNEL_BLAS;
    if (blas && t->rows)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)t->rows, VSR_STORE_DIM, 1.0f, t->mat, VSR_STORE_DIM, q, 1,
                    0.0f, t->scores, 1);
    for (size_t r = 0; r < t->rows; r++) {
        if (t->row_tag[r] != tag)
            continue;
        if (t->row_expiry[r] <= now) {
            if (ndead < EXPIRED_REAP)
                dead[ndead++] = r;
            continue;
        }
        if (int8) {
            int32_t est = dot_i8(t->qmat + r * VSR_STORE_DIM, qw);
            if (est < floor_est || (ncand == Q_CANDIDATES && est <= cand_est[ncand - 1]))
                continue;
            size_t i = ncand < Q_CANDIDATES ? ncand++ : Q_CANDIDATES - 1; /* sorted, best first */
            while (i > 0 && cand_est[i - 1] < est) {
                cand[i] = cand[i - 1];
                cand_est[i] = cand_est[i - 1];
                i--;
            }
            cand[i] = r;
            cand_est[i] = est;
            continue;
        }
        float d = blas ? t->scores[r] : dot(t->mat + r * VSR_STORE_DIM, q);
        if (d < best_sim || (best >= 0 && d == best_sim))
            continue;
        vsr__mentry_t *e = t->row_entry[r];
        if (!vsr_slice_eq(vsr__me_scope(e), scope) || !vsr_slice_eq(vsr__me_part(e), part))
            continue; /* a tag collision */
        best = (ssize_t)r;
        best_sim = d;
    }
    for (size_t i = 0; i < ncand; i++) { /* int8: the float32 similarity decides */
        float d = dot(t->mat + cand[i] * VSR_STORE_DIM, q);
        if (d < best_sim || (best >= 0 && d == best_sim))
            continue;
        vsr__mentry_t *e = t->row_entry[cand[i]];
        if (!vsr_slice_eq(vsr__me_scope(e), scope) || !vsr_slice_eq(vsr__me_part(e), part))
            continue;
        best = (ssize_t)cand[i];
        best_sim = d;
    }
    vsr__mentry_t *hit = best >= 0 ? t->row_entry[best] : NULL;
    /* drop the dead, highest row first: a removal moves the last row into
     * the hole, which never disturbs the lower rows still to drop */
    while (ndead > 0) {
        vsr__mentry_t *e = t->row_entry[dead[--ndead]];
        VSR_ASSERT(e != hit);
        entry_remove(t, e);
        vsr__ctr_inc(&t->ctr->expired);
    }
    if (hit) {
        order_touch(t, hit);
        *sim = best_sim;
    }
    return hit;
}
