/*
 * head — a linear softmax classifier over an embedding: logits = W·x + b,
 * probabilities = softmax(logits / T).  Generic: any number of classes, any
 * input width, any labels.  The built-in domain classifier is one such head
 * (data/domains/domain.head, trained by tools/models/train_head.c over
 * USE-lite embeddings).
 *
 * File format ("vsr-head 1"): UTF-8 text, '\n'-terminated lines, fields
 * separated by one ASCII space, in this order and nothing else:
 *
 *   vsr-head 1
 *   dim D                      1 <= D <= VSR_HEAD_MAX_DIM
 *   classes C                  2 <= C <= VSR_HEAD_MAX_CLASSES
 *   temperature T              finite, VSR_HEAD_MIN_TEMP <= T <= VSR_HEAD_MAX_TEMP
 *   meta KEY VALUE             0..VSR_HEAD_MAX_META lines; KEY [a-z0-9_-]{1,32},
 *                              VALUE 1..128 bytes of printable ASCII, no space
 *   class LABEL                C lines; LABEL 1..VSR_HEAD_MAX_LABEL bytes, the
 *                              rest of the line, no control byte, no space
 *                              at either end, unique
 *   bias B1 ... BC             C numbers
 *   row W1 ... WD              C lines of D numbers (class order)
 *   end
 *
 * Format "vsr-head 2" is the same with a lexical part before "end":
 *
 *   lexical K SCALE            K hash buckets, a power of two,
 *                              VSR_HEAD_MIN_LEX <= K <= VSR_HEAD_MAX_LEX;
 *                              0 < SCALE <= 100
 *   lrow V1 ... VK             C lines of K numbers (class order)
 *
 * and the logits then also count the text's words (vsr_head_lex_features):
 * logits = W·x + b + Σ_{bucket k of the text} L[c][k]·SCALE/sqrt(n), n the
 * number of distinct buckets.  A "vsr-head 1" file has no lexical part.
 *
 * Numbers are C-locale decimal floats (strtod syntax, at most 64 bytes each;
 * "%.9g" round-trips a float exactly); every one must be finite, with
 * |v| <= VSR_HEAD_MAX_ABS.
 * A file larger than VSR_HEAD_MAX_BYTES is refused before it is read.  The
 * loader checks all of this and refuses anything else (VSR_ERR_INVALID):
 * the file is untrusted input.
 *
 * Ownership and threading: a head is immutable once loaded; any number of
 * threads may predict with it at once, with no lock and no allocation.
 * vsr_head_free() when no thread uses it.  Strings returned by the accessors
 * belong to the head.
 *
 * Return codes: VSR_OK; VSR_ERR_INVALID (malformed file, wrong input width);
 * VSR_ERR_TOO_BIG (file larger than VSR_HEAD_MAX_BYTES); VSR_ERR_IO (can't
 * open or read); VSR_ERR_NOMEM.
 */
#ifndef VSR_MODELS_HEAD_H
#define VSR_MODELS_HEAD_H

#include "base/base.h"

#define VSR_HEAD_VERSION 1
#define VSR_HEAD_VERSION_LEX 2
#define VSR_HEAD_MIN_LEX 256
#define VSR_HEAD_MAX_LEX (1u << 18)
#define VSR_HEAD_LEX_MAX_WORDS 256 /* words of a text read by the lexical part */
#define VSR_HEAD_LEX_MAX_FEATURES (2 * VSR_HEAD_LEX_MAX_WORDS)
#define VSR_HEAD_MAX_DIM 4096
#define VSR_HEAD_MAX_CLASSES 256
#define VSR_HEAD_MAX_LABEL 64
#define VSR_HEAD_MAX_META 16
#define VSR_HEAD_MAX_BYTES (32u << 20) /* 32 MiB */
#define VSR_HEAD_MIN_TEMP 1e-3
#define VSR_HEAD_MAX_TEMP 1e3
#define VSR_HEAD_MAX_ABS 1e6 /* bound on any weight or bias */

typedef struct vsr_head_s vsr_head_t;

/* Reads and checks a head file.  *out on VSR_OK only.
 * VSR_OK | VSR_ERR_IO | VSR_ERR_TOO_BIG | VSR_ERR_INVALID | VSR_ERR_NOMEM */
int vsr_head_load(const char *path, vsr_head_t **out);

/* The same from memory (copied: data need not outlive the call).
 * VSR_OK | VSR_ERR_TOO_BIG | VSR_ERR_INVALID | VSR_ERR_NOMEM */
int vsr_head_load_mem(const void *data, size_t len, vsr_head_t **out);

void vsr_head_free(vsr_head_t *h); /* accepts NULL */

size_t vsr_head_dim(const vsr_head_t *h);
size_t vsr_head_classes(const vsr_head_t *h);
double vsr_head_temperature(const vsr_head_t *h);
/* class i's label (NUL-terminated), i < classes; NULL when out of range */
const char *vsr_head_label(const vsr_head_t *h, size_t i);
/* the index of `label`, or -1 */
int vsr_head_label_index(const vsr_head_t *h, const char *label);
/* a meta line's value (NUL-terminated), or NULL when the file has none */
const char *vsr_head_meta(const vsr_head_t *h, const char *key);

/* probs[classes] = softmax((W·x + b) / T) for x[dim] (dim must equal the
 * head's; non-finite components are refused).  The probabilities are
 * non-negative and sum to 1 within float rounding.
 * VSR_OK | VSR_ERR_INVALID (probs then zeroed) */
int vsr_head_predict(const vsr_head_t *h, const float *x, size_t dim, float *probs);

/* The same with the raw logits W·x + b (before the temperature), for
 * trainers calibrating a temperature.  VSR_OK | VSR_ERR_INVALID */
int vsr_head_logits(const vsr_head_t *h, const float *x, size_t dim, float *logits);

/* The lexical part's bucket count K (0 for a "vsr-head 1" file) and SCALE. */
size_t vsr_head_lex_buckets(const vsr_head_t *h);
double vsr_head_lex_scale(const vsr_head_t *h);

/* The lexical features of text[0..len): its words (runs of ASCII letters
 * and digits and of bytes >= 0x80, ASCII lower-cased, every digit read as
 * '0'; the first VSR_HEAD_LEX_MAX_WORDS words), each word and each pair of
 * adjacent words hashed (FNV-1a, 32 bits) to a bucket in [0, buckets);
 * the distinct buckets are written to idx[] in increasing order and their
 * count returned (at most VSR_HEAD_LEX_MAX_FEATURES; idx must hold that
 * many).  buckets must be a power of two.  Pure; shared with the trainer. */
size_t vsr_head_lex_features(const char *text, size_t len, size_t buckets, uint32_t *idx);

/* vsr_head_predict plus the lexical part for text[0..len) (which a
 * "vsr-head 1" head ignores).  VSR_OK | VSR_ERR_INVALID (probs zeroed) */
int vsr_head_predict_text(const vsr_head_t *h, const float *x, size_t dim, const char *text, size_t len,
                          float *probs);

/* The indexes of the k largest of probs[0..n) in idx[], largest first, ties
 * to the lower index; returns min(k, n).  Pure: any array of scores. */
size_t vsr_head_top_k(const float *probs, size_t n, size_t k, size_t *idx);

#endif
