/*
 * guard — jailbreak and prompt-injection classifiers: TF-IDF features and a
 * logistic regression, as shipped by the npm package llm_guardrail@2.1.2
 * (ISC; model/jailbreak_model.json and model/prompt_injection_model.json,
 * fetched by scripts/setup-deps into $VSR_MODEL_CACHE/llm_guardrail).  The
 * arithmetic is the package's own JavaScript (model/tfidf.js,
 * model/logistic_regression.js), so a text scores what the package says
 * (within 1e-6; tests/e2e/test_guard_oracle.py runs the JS with node):
 *
 *   tokens   runs of two or more word characters [A-Za-z0-9_] after
 *            lowercasing (the JS /\b\w\w+\b/g without the u flag): every
 *            other character separates.  JS toLowerCase turns two non-ASCII
 *            characters into ASCII letters, and so does this: U+212A (Kelvin)
 *            is "k", U+0130 is "i" followed by a separator (U+0307).
 *   terms    the n-grams of ngram_range (1..2 in both files), words joined
 *            by one space; terms not in the vocabulary are dropped.
 *   weight   raw count x idf, then the vector is L2-normalised.
 *   score    p = 1 / (1 + exp(-(intercept + coefficients . x))).
 *
 * Long texts (vsr_guard_lr_score_chunked): a text of more than
 * VSR_GUARD_CHUNK_TOKENS tokens (tokens as above, the unit this model
 * reads) is scored in windows of VSR_GUARD_CHUNK_TOKENS tokens, each
 * starting with the first token that begins within the last
 * VSR_GUARD_CHUNK_OVERLAP_RUNES runes (code points) of the window before it
 * (so windows overlap by about 64 runes and no token is cut); the score is
 * the maximum over the windows.  A shorter text is one window: the same
 * score as the unchunked call.  Work and memory are linear in the text.
 *
 * The model file is JSON read by a bounded, strict parser: at most
 * VSR_GUARD_MAX_FILE_BYTES, nesting depth 8, terms of at most
 * VSR_GUARD_MAX_TERM_BYTES bytes, at most VSR_GUARD_MAX_FEATURES features,
 * n-grams of at most VSR_GUARD_MAX_NGRAM words; every vocabulary index in
 * range and used once, idf and coefficients the same length, every number
 * finite.  Anything else is VSR_ERR_INVALID.
 *
 * Text: any bytes (UTF-8 expected; a byte that is not part of U+212A or
 * U+0130 and is not ASCII is a separator, so invalid UTF-8 cannot harm).
 *
 * Ownership and threading: a model is immutable once loaded and may be used
 * by any number of threads at once; each scoring call allocates and frees
 * its own working memory.  vsr_guard_lr_free() when no thread uses it.
 *
 * Return codes: VSR_OK; VSR_ERR_IO when a file can't be read;
 * VSR_ERR_INVALID for a malformed model file; VSR_ERR_TOO_BIG for a file
 * over VSR_GUARD_MAX_FILE_BYTES; VSR_ERR_NOMEM.  Scoring never fails
 * except VSR_ERR_NOMEM (empty text scores the intercept alone).
 */
#ifndef VSR_GUARD_H
#define VSR_GUARD_H

#include "base/base.h"

#define VSR_GUARD_MAX_FILE_BYTES (32u << 20)
#define VSR_GUARD_MAX_FEATURES 1000000
#define VSR_GUARD_MAX_TERM_BYTES 256
#define VSR_GUARD_MAX_NGRAM 4
#define VSR_GUARD_CHUNK_TOKENS 384
#define VSR_GUARD_CHUNK_OVERLAP_RUNES 64

/* the model files of the package directory (under model/) */
#define VSR_GUARD_JAILBREAK_FILE "model/jailbreak_model.json"
#define VSR_GUARD_INJECTION_FILE "model/prompt_injection_model.json"

typedef struct vsr_guard_lr_s vsr_guard_lr_t;

/* Reads and parses one model file.  *out on VSR_OK only.
 * VSR_OK | VSR_ERR_IO | VSR_ERR_TOO_BIG | VSR_ERR_INVALID | VSR_ERR_NOMEM */
int vsr_guard_lr_load(const char *path, vsr_guard_lr_t **out);
/* The same from memory (copied what it needs; `data` may go after).
 * VSR_OK | VSR_ERR_TOO_BIG | VSR_ERR_INVALID | VSR_ERR_NOMEM */
int vsr_guard_lr_load_mem(const char *data, size_t len, vsr_guard_lr_t **out);
void vsr_guard_lr_free(vsr_guard_lr_t *m); /* accepts NULL */

size_t vsr_guard_lr_features(const vsr_guard_lr_t *m);
double vsr_guard_lr_threshold(const vsr_guard_lr_t *m); /* the file's own (0.5) */

/* Probability of the positive class for the whole text, as the JS computes
 * it.  VSR_OK | VSR_ERR_NOMEM */
int vsr_guard_lr_score(const vsr_guard_lr_t *m, const char *text, size_t len, double *p);
/* The maximum over windows (above).  *n_windows (may be NULL) says how many
 * were scored.  VSR_OK | VSR_ERR_NOMEM */
int vsr_guard_lr_score_chunked(const vsr_guard_lr_t *m, const char *text, size_t len, double *p, size_t *n_windows);

/* Both models of the package directory `dir` (the unpacked npm package).
 * Ownership and threading as above. */
typedef struct {
    vsr_guard_lr_t *jailbreak;
    vsr_guard_lr_t *injection;
} vsr_guard_t;

/* VSR_OK | VSR_ERR_IO | VSR_ERR_TOO_BIG | VSR_ERR_INVALID | VSR_ERR_NOMEM;
 * on failure *g is left empty. */
int vsr_guard_load_dir(const char *dir, vsr_guard_t *g);
void vsr_guard_free(vsr_guard_t *g); /* accepts an empty one */

/* Chunked scores of both models; the classifier's jailbreak score is their
 * maximum (an injection is an attempt to leave the instructions too).
 * VSR_OK | VSR_ERR_NOMEM */
int vsr_guard_score(const vsr_guard_t *g, const char *text, size_t len, double *p_jailbreak, double *p_injection);

/* The contrastive score of a query embedding: the highest cosine with the
 * jailbreak patterns minus the highest with the benign ones (an empty set
 * counts 0; a zero vector has cosine 0).  Vectors are `dim` floats each,
 * stored one after the other.  Pure; any thread. */
double vsr_guard_contrastive(const float *q, const float *jailbreak, size_t n_jailbreak, const float *benign,
                             size_t n_benign, size_t dim);

/* The hybrid score: w * p_classifier + (1 - w) * m, where m is the
 * contrastive score mapped to [0, 1] by (c - lo) / (hi - lo), clamped (a NaN
 * maps to 0).  VSR_GUARD_HYBRID_W/LO/HI are the values tuned on
 * data/jailbreak/dev.tsv by bench/quality/jailbreak.c (docs/signals.md). */
#define VSR_GUARD_HYBRID_W 0.3
#define VSR_GUARD_HYBRID_LO (-0.175)
#define VSR_GUARD_HYBRID_HI 0.05
double vsr_guard_hybrid(double p_classifier, double contrastive, double w, double lo, double hi);

/* The hybrid score with the jailbreak head (data/jailbreak/jailbreak.head, a
 * logistic head over the same USE-lite embedding): w_head * p_head +
 * (1 - w_head) * hybrid, both clamped to [0, 1] (NaN maps to 0).  Pure.
 * With the head, the hybrid is
 *   vsr_guard_with_head(p_head, vsr_guard_hybrid(p_classifier, contrastive,
 *       VSR_GUARD_HEAD_MIX_W, VSR_GUARD_HEAD_MIX_LO, VSR_GUARD_HEAD_MIX_HI),
 *       VSR_GUARD_HEAD_W)
 * (the four tuned together on dev.tsv + a held-out fifth of train.tsv by
 * bench/quality/jailbreak.c, run by tools/models/jailbreak.sh;
 * docs/signals.md); without it (an embedder of another width), the
 * VSR_GUARD_HYBRID_* formula above. */
#define VSR_GUARD_HEAD_W 0.9
#define VSR_GUARD_HEAD_MIX_W 0.0
#define VSR_GUARD_HEAD_MIX_LO (-0.2)
#define VSR_GUARD_HEAD_MIX_HI (-0.15)
double vsr_guard_with_head(double p_head, double hybrid, double w_head);

/* The lexical partner of the head (data/jailbreak/jailbreak_lexical.json, a
 * model in this file's JSON layout: TF-IDF over word uni- and bigrams and a
 * logistic regression trained on the head's training set by
 * tools/models/train_lexical.py, compiled in) mixed into the hybrid:
 * w_lexical * p_lexical + (1 - w_lexical) * score, both clamped to [0, 1]
 * (NaN maps to 0).  Pure.  The hybrid with the head and the lexical model is
 *   vsr_guard_with_lexical(p_lexical, <the hybrid with the head, above>,
 *       VSR_GUARD_LEXICAL_W)
 * with VSR_GUARD_LEXICAL_W chosen on the same dev texts as the head's
 * weights (bench/quality/jailbreak.c). */
#define VSR_GUARD_LEXICAL_W 0.4
double vsr_guard_with_lexical(double p_lexical, double score, double w_lexical);

/* The operating point: the hybrid with the head and the lexical model is
 * mapped so that the dev threshold VSR_GUARD_OPERATING_POINT (the lowest at
 * which dev false positives stay <= 2%, bench/quality/jailbreak.c) lands on
 * the prompt guard's default threshold VSR_GUARD_CALIBRATED_AT (0.7),
 * piecewise linearly: [0, t] -> [0, 0.7], [t, 1] -> [0.7, 1].  Monotone, so
 * every other threshold keeps its order; a rule that gives its own threshold
 * picks another point of the same curve (docs/signals.md).  NaN maps to 0. */
#define VSR_GUARD_OPERATING_POINT 0.4847
#define VSR_GUARD_CALIBRATED_AT 0.7
double vsr_guard_calibrate(double score, double operating_point);

#endif
