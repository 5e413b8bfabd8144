/*
 * embed_use.c — the USE-lite sentence encoder (src/models/) behind the
 * embedder interface: `vsr runtime serve --model PATH`.
 *
 * The model is immutable and shared by every compute thread; each thread
 * keeps its own scratch (a thread-specific key, freed when the thread ends),
 * so a call allocates nothing once its thread has run one.  Inputs go
 * through the model VSR_USE_MAX_BATCH at a time.
 */
#include <pthread.h>
#include <stdio.h>

#include "models/models.h"
#include "runtime-int.h"

typedef struct {
    vsr_use_model_t *model;
    pthread_key_t scratch_key;
} use_impl_t;

static void scratch_dtor(void *p)
{
    vsr_use_scratch_free(p);
}

static vsr_use_scratch_t *thread_scratch(use_impl_t *u)
{
    vsr_use_scratch_t *s = pthread_getspecific(u->scratch_key);
    if (s == NULL) {
        s = vsr_use_scratch_new();
        if (s != NULL && pthread_setspecific(u->scratch_key, s) != 0) {
            vsr_use_scratch_free(s);
            s = NULL;
        }
    }
    return s;
}

static int use_embed(vsr_embedder_t *e, const vsr_slice_t *texts, size_t n, float *out, uint64_t *tokens,
                     vsr_buf_t *err)
{
    use_impl_t *u = e->impl;
    vsr_use_scratch_t *s = thread_scratch(u);
    if (s == NULL) {
        vsr_buf_append_cstr(err, "out of memory");
        return VSR_ERR_NOMEM;
    }
    int rc[VSR_USE_MAX_BATCH];
    for (size_t off = 0; off < n; off += VSR_USE_MAX_BATCH) {
        size_t k = VSR_MIN(n - off, (size_t)VSR_USE_MAX_BATCH);
        int r = vsr_use_embed_batch(u->model, texts + off, k, out + off * VSR_USE_DIM, rc, s);
        if (r != VSR_OK) {
            vsr_buf_printf(err, "the embedding model failed (%d)", r);
            return r;
        }
        for (size_t i = 0; i < k; i++) {
            if (rc[i] == VSR_ERR_INVALID) {
                vsr_buf_printf(err, "input %zu has nothing to embed (empty or white space only)", off + i);
                return VSR_ERR_INVALID;
            }
            if (rc[i] != VSR_OK) {
                vsr_buf_printf(err, "the embedding model failed on input %zu (%d)", off + i, rc[i]);
                return rc[i];
            }
        }
    }
    if (tokens) {
        /* what the model read: the window's tokens of each input */
        int32_t ids[VSR_USE_MAX_TOKENS];
        for (size_t i = 0; i < n; i++) {
            size_t k = 0;
            if (vsr_use_tokenize(u->model, texts[i].p, texts[i].len, ids, VSR_USE_MAX_TOKENS, &k, s) == VSR_OK)
                *tokens += k;
        }
    }
    return VSR_OK;
}

static void use_free(vsr_embedder_t *e)
{
    use_impl_t *u = e->impl;
    if (u == NULL)
        return;
    /* the compute threads have ended (the server stops them first): their
     * scratch went with them through the key's destructor */
    pthread_key_delete(u->scratch_key);
    vsr_use_free(u->model);
    vsr_free(u);
}

static const vsr_embedder_ops_t use_ops = {use_embed, use_free};

vsr_embedder_t *vsr_embedder_use_new(const char *path, const char *name, vsr_buf_t *err)
{
    vsr_use_model_t *m = NULL;
    int rc = vsr_use_load(path, &m);
    if (rc != VSR_OK) {
        vsr_buf_printf(err, "%s: %s", path,
                       rc == VSR_ERR_IO ? "cannot open or map the file"
                       : rc == VSR_ERR_INVALID ? "not a USE-lite model file (see docs/runtime.md)"
                                               : "out of memory");
        return NULL;
    }
    if (!vsr_use_has_weights(m)) {
        vsr_buf_printf(err, "%s: the file holds a vocabulary only", path);
        vsr_use_free(m);
        return NULL;
    }
    vsr_embedder_t *e = vsr_calloc(1, sizeof(*e));
    use_impl_t *u = vsr_calloc(1, sizeof(*u));
    if (e == NULL || u == NULL || pthread_key_create(&u->scratch_key, scratch_dtor) != 0) {
        vsr_free(e);
        vsr_free(u);
        vsr_use_free(m);
        vsr_buf_append_cstr(err, "out of memory");
        return NULL;
    }
    u->model = m;
    /* the compute pool is the parallelism: one BLAS thread per call */
    vsr_models_blas_threads(1);
    e->ops = &use_ops;
    snprintf(e->name, sizeof(e->name), "%s", name && *name ? name : "use-lite");
    e->backend = "use-lite";
    e->dim = VSR_USE_DIM;
    e->impl = u;
    return e;
}
