/* rbuf.c — refcounted receive buffers with a per-thread free list. */
#include "base/base.h"

#define RBUF_CACHE_MAX 256

static __thread vsr_rbuf_t *free_list;
static __thread unsigned free_count;

vsr_rbuf_t *vsr_rbuf_get(void)
{
    vsr_rbuf_t *b = free_list;
    if (b != NULL) {
        free_list = b->_next_free;
        free_count--;
    } else {
        b = vsr_malloc(sizeof(*b));
    }
    b->_next_free = NULL;
    b->refs = 1;
    return b;
}

void vsr_rbuf_unref(vsr_rbuf_t *b)
{
    if (b == NULL)
        return;
    VSR_BUG_ON(b->refs == 0);
    if (--b->refs > 0)
        return;
    if (free_count < RBUF_CACHE_MAX) {
        b->_next_free = free_list;
        free_list = b;
        free_count++;
    } else {
        vsr_free(b);
    }
}

void vsr_rbuf_trim_cache(void)
{
    while (free_list) {
        vsr_rbuf_t *b = free_list;
        free_list = b->_next_free;
        vsr_free(b);
    }
    free_count = 0;
}
