/*
 * signals-int.h — what the signal types share inside the module: the
 * registry entry, the compiled object, the per-request memo, the literal
 * matcher (one Aho-Corasick pass for every literal keyword of a recipe),
 * regex and Unicode helpers.
 */
#ifndef VSR_SIGNALS_INT_H
#define VSR_SIGNALS_INT_H

#include "signals/signals.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define VSR__NO_PAT UINT32_MAX

/* ---- Unicode (unicode.c) ----------------------------------------------------
 * Classification and case mapping follow the C.UTF-8 locale's tables (the
 * same letters/digits and simple lower-case mapping as Go's unicode package
 * for practical purposes); without that locale only ASCII is classified. */

/* Decodes one rune at p (len > 0); invalid or truncated sequences decode as
 * U+FFFD with *adv = 1, as Go's range-over-string does. */
uint32_t vsr__utf8_decode(const char *p, size_t len, size_t *adv);
/* The rune that ends at byte `pos` of s (pos > 0). */
uint32_t vsr__utf8_prev(const char *s, size_t pos);
size_t vsr__utf8_encode(uint32_t cp, char *out); /* out has room for 4 */
int vsr__is_alnum(uint32_t cp);                  /* Unicode letter or digit */
int vsr__is_space(uint32_t cp);
/* Han, Hiragana, Katakana or Hangul (the reference's isCJK). */
int vsr__is_cjk(uint32_t cp);
int vsr__has_cjk(const char *s, size_t len);
/* Simple lower-case mapping; a non-ASCII rune whose lower case is ASCII
 * (KELVIN SIGN, dotted capital I) is kept as is, so folding never changes
 * which bytes are ASCII word characters. */
uint32_t vsr__to_lower(uint32_t cp);
static inline int vsr__is_word_ascii(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
/* Lower-cases UTF-8 text (invalid bytes are copied).  The result is
 * NUL-terminated and comes from pool, or from vsr_malloc when pool is NULL. */
char *vsr__fold(const char *s, size_t len, size_t *out_len, vsr_pool_t *pool);
/* Decodes s into runes (out has room for len runes), lower-cased if asked. */
size_t vsr__runes(const char *s, size_t len, int lower, uint32_t *out);
uint64_t vsr__hash_runes(const uint32_t *r, size_t n);

/* What a model-backed signal sees of a long text (ref §1.9): at most
 * VSR__MODEL_MAX_RUNES runes, the head, middle and tail thirds joined by an
 * omission marker. */
#define VSR__MODEL_MAX_RUNES 2048
/* domains: a domain naming no MMLU-Pro class matches when its description's
 * cosine similarity to the text reaches this (USE-lite; docs/signals.md). */
#define VSR__DOMAIN_DESCRIPTION_MIN 0.45
#define VSR__OMISSION " ... "
/* text as a JSON string (quoted, escaped, valid UTF-8) of at most max_runes
 * runes (head, middle and tail thirds of a longer one), from pool. */
vsr_slice_t vsr__text_json(vsr_pool_t *pool, vsr_slice_t text, size_t max_runes);
/* The same text as it is (not quoted): text itself when it is valid UTF-8
 * of at most max_runes runes, else a copy from pool. */
vsr_slice_t vsr__text_window(vsr_pool_t *pool, vsr_slice_t text, size_t max_runes);

/* ---- remote classifiers (remote.c; docs/signals.md "Bring a bigger model") ----
 * A family's remote classifier as its compiled signals keep it (copied from
 * the document's vsr_remote_cls_conf_t: the signals outlive the document). */
typedef struct {
    char *model;         /* the external entry's name; NULL: none (the built-in model) */
    vsr_remote_protocol_t protocol;
    uint64_t timeout_ms;
    size_t runes;        /* the text's bound: the family's, within the entry's max_request_bytes */
    int distribution;
    char *runtime_model; /* runtime_classify: the classifier named (family: its default) */
} vsr__remote_t;
void vsr__remote_init(vsr__remote_t *r, const vsr_remote_cls_conf_t *conf, size_t max_runes, const char *family);
void vsr__remote_free(vsr__remote_t *r);
/* The VSR_SIGNAL_TASK_REMOTE task for text: http_classify {"inputs": T},
 * runtime_classify {"model": M, "text": T` extra`} (extra: JSON members or
 * NULL), from pool. */
void vsr__remote_task(vsr_pool_t *pool, const vsr__remote_t *r, vsr_slice_t text, const char *extra,
                      vsr_signal_task_t *out);

/* ---- regex (regex.c): PCRE2 in UTF mode, Go/RE2-like options ---------- */
/* NULL on failure with the reason and offset written to msg. */
pcre2_code *vsr__re_compile(const char *pat, int caseless, vsr_buf_t *msg);
/* 1 when re matches somewhere in s, else 0. */
int vsr__re_match(const pcre2_code *re, const char *s, size_t len, pcre2_match_data *md);
/* Number of non-overlapping matches, counted as Go's FindAllStringIndex. */
size_t vsr__re_count(const pcre2_code *re, const char *s, size_t len, pcre2_match_data *md);

/* ---- the literal matcher (literal.c) -----------------------------------
 * Every literal keyword of a recipe (keyword signals of the exact and fuzzy
 * methods, structure keyword_set sources) is a pattern; all case-insensitive
 * patterns go into one automaton run over the folded text, all
 * case-sensitive ones into another run over the raw text, so a request costs
 * at most two passes whatever the number of keywords. */
typedef enum {
    VSR__BOUND_NONE = 0,
    VSR__BOUND_ASCII,   /* keyword signals: Go's \b, [0-9A-Za-z_] are word characters */
    VSR__BOUND_UNICODE, /* structure keyword_set: a letter/digit that is not CJK blocks */
} vsr__bound_t;

typedef struct {
    char *bytes;       /* folded when ci */
    size_t len;
    uint8_t ci;
    uint8_t bound;     /* vsr__bound_t */
    uint8_t left, right; /* which sides are checked */
    uint8_t counted;   /* 1: occurrences are counted (structure), 0: presence bit */
    uint32_t slot;     /* index into the memo's bits (presence) or counts (counted) */
} vsr__pat_t;

typedef struct vsr__ac_s vsr__ac_t;
vsr__ac_t *vsr__ac_build(const vsr__pat_t *pats, const uint32_t *ids, size_t n, int ci);
void vsr__ac_free(vsr__ac_t *ac);
/* Scans buf (raw text for the case-sensitive automaton, folded text for the
 * other), setting presence bits and counting occurrences.  last_end has one
 * entry per counted slot, all zero before the first scan of a buffer. */
void vsr__ac_scan(const vsr__ac_t *ac, const vsr__pat_t *pats, const char *buf, size_t len, uint64_t *bits,
                  uint32_t *counts, uint32_t *last_end);

/* ---- the compiled object ---------------------------------------------- */
typedef struct vsr__sig_type_s vsr__sig_type_t;

typedef struct {
    const vsr__sig_type_t *type;
    char *name;
    char *report;       /* the name evidence reports when not `name`: an authz binding's role (owned; signals
                         * outlive the configuration they were compiled from) */
    void *state;
    vsr_on_error_t on_error; /* the family's policy for this signal */
    int companion;      /* 1 + the index of a hidden signal computed with this one (a safety hazard stage), or 0 */
    int hidden;         /* a companion: no rule names it (vsr_signals_find skips it) */
} vsr__sig_t;

struct vsr_signals_s {
    vsr__sig_t *sigs;
    size_t n;
    vsr__pat_t *pats;
    uint32_t n_pats, cap_pats;
    uint32_t n_bits, n_counts; /* slots */
    vsr__ac_t *ac_cs, *ac_ci;
    const vsr_modules_conf_t *modules; /* while compiling only: the families' defaults */
};

/* Registers a literal pattern while compiling; returns its id, or
 * VSR__NO_PAT for an empty keyword (which callers treat specially).
 * bound VSR__BOUND_ASCII checks a side only when the keyword's byte on that
 * side is an ASCII word character; VSR__BOUND_UNICODE checks both sides;
 * keywords containing CJK get no boundary at all. */
uint32_t vsr__add_pattern(vsr_signals_t *s, const char *kw, int ci, vsr__bound_t bound, int counted);

/* ---- per-request memo ----------------------------------------------------
 * Work several signals share for one request, computed on first use. */
typedef struct {
    const vsr_signals_t *owner;
    const char *text_p;
    size_t text_len;
    const vsr_chat_view_t *chat;

    int scanned;
    uint64_t *bits;     /* presence, one bit per uncounted pattern slot */
    uint32_t *counts;   /* occurrences per counted slot */

    const char *low;    /* the routing text lower-cased (may alias the text when nothing changes) */
    size_t low_len;
    int low_done;

    uint32_t *runes[2]; /* [0] as is, [1] lower-cased */
    size_t n_runes;
    int runes_done[2];

    /* unique lower-cased words (letter/digit runs) for fuzzy matching */
    uint32_t *word_off, *word_len;
    size_t n_words;
    int words_done;

    pcre2_match_data *md;
    pcre2_general_context *gctx;

    int lang_done;
    int lang_found;
    char lang_code[16];  /* full detector code, lower-case ("zh-hant") */
    double lang_conf;
} vsr__memo_t;

typedef struct {
    const vsr_signals_t *s;
    const vsr_signal_input_t *in;
    vsr__memo_t *m;
    vsr_pool_t *pool;
} vsr__ctx_t;

void vsr__memo_scan(vsr__ctx_t *c);
static inline int vsr__memo_bit(const vsr__memo_t *m, uint32_t slot)
{
    return (int)((m->bits[slot >> 6] >> (slot & 63)) & 1u);
}
const char *vsr__memo_low(vsr__ctx_t *c, size_t *len);
const uint32_t *vsr__memo_runes(vsr__ctx_t *c, int lower, size_t *n);
void vsr__memo_words(vsr__ctx_t *c);
pcre2_match_data *vsr__memo_md(vsr__ctx_t *c);

/* ---- registry ------------------------------------------------------------- */
struct vsr__sig_type_s {
    const char *cond_type;  /* rule leaf `type` */
    const char *family;     /* for x-vsr-matched-<family> */
    const char *yaml;       /* routing.signals.<yaml> */
    size_t list_off, count_off, elem_size; /* where the family lives in vsr_signals_conf_t */
    /* Compiles one signal into *state; on error appends "path: message\n" lines. */
    int (*compile)(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
    vsr_signal_result_t (*eval)(vsr__ctx_t *c, const void *state);
    void (*free)(void *state);
    /* model-backed families (NULL for rule-based ones): see vsr_signals_task / vsr_signals_consume */
    int (*task)(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out);
    int (*consume)(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out);
    const vsr_signal_family_t *ext; /* a family registered at run time */
    ptrdiff_t on_error_off; /* where the family's on_error policy lives in vsr_modules_conf_t; -1: none */
};

/* the runtime's classifiers (classify.c) */
int vsr__domain_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
int vsr__jailbreak_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
int vsr__pii_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
void vsr__classify_free(void *state);
vsr_signal_result_t vsr__classify_eval(vsr__ctx_t *c, const void *state);
int vsr__classify_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out);
int vsr__classify_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out);

int vsr__keyword_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__keyword_eval(vsr__ctx_t *c, const void *state);
void vsr__keyword_free(void *state);

int vsr__metadata_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__metadata_eval(vsr__ctx_t *c, const void *state);
void vsr__metadata_free(void *state);
int vsr__event_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__event_eval(vsr__ctx_t *c, const void *state);
void vsr__event_free(void *state);

int vsr__input_modality_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__input_modality_eval(vsr__ctx_t *c, const void *state);
void vsr__input_modality_free(void *state);

/* safety.c: a remote classifier's or the prompt guard's answer (docs/signals.md "Safety") */
int vsr__safety_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__safety_eval(vsr__ctx_t *c, const void *state);
void vsr__safety_free(void *state);
int vsr__safety_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out);
int vsr__safety_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out);
/* A rule with a hazard.model of its own: the state of its companion signal
 * (the hazard head's call; value = the largest category score), else NULL;
 * and the hazard threshold the rule's combine step applies (-1: none). */
void *vsr__safety_hazard_compile(const vsr_sig_safety_conf_t *c);
double vsr__safety_hazard_threshold(const void *state);

int vsr__context_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__context_eval(vsr__ctx_t *c, const void *state);
void vsr__context_free(void *state);

int vsr__structure_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__structure_eval(vsr__ctx_t *c, const void *state);
void vsr__structure_free(void *state);

int vsr__conversation_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__conversation_eval(vsr__ctx_t *c, const void *state);
void vsr__conversation_free(void *state);

int vsr__language_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__language_eval(vsr__ctx_t *c, const void *state);
void vsr__language_free(void *state);

int vsr__authz_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__authz_eval(vsr__ctx_t *c, const void *state);
void vsr__authz_free(void *state);
/* A role as a signal: matches when any of the bindings[0..n) granting
 * `role` matches (the union of their subjects).  Its state for
 * vsr__authz_eval/free. */
void *vsr__authz_role_compile(const vsr_sig_authz_conf_t *bindings, size_t n, const char *role);

int vsr__embedding_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
vsr_signal_result_t vsr__embedding_eval(vsr__ctx_t *c, const void *state);
void vsr__embedding_free(void *state);
int vsr__embedding_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out);
int vsr__embedding_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out);
/* preference.c: a preferences signal compiles to an embeddings signal's
 * state (the examples and the description as candidates, prototype
 * scoring); the embedding functions above evaluate it. */
int vsr__preference_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
/* embedding.c's helper for the families that embed texts of their own
 * (their texts go out through vsr__text_json): one vector of an embed
 * result read into v, scaled to unit length (VSR_OK, or VSR_ERR_INVALID for
 * a wrong shape or a zero vector). */
int vsr__emb_read_vec(const vsr_json_t *j, uint32_t arr, size_t dim, float *v);
/* Prototype scoring (docs/signals.md, "Embeddings signals"): n unit
 * vectors grouped into at most 8 prototypes (caller frees the returned
 * rows, *np set; n >= 1), and the score of unit vector q against them
 * (-1 without prototypes). */
float *vsr__emb_prototypes(const float *v, size_t n, size_t dim, size_t *np);
double vsr__emb_proto_score(const float *q, const float *protos, size_t n_protos, size_t dim);

/* exemplar.c: fact_check, user_feedbacks and modality, prototype scoring
 * of the routing text against built-in exemplar banks, one per label
 * (data/<family>/exemplars.jsonl); the signal's name is its label. */
/* The banks, written by cmake/embed.cmake from data/<family>/exemplars.jsonl
 * (each followed by a NUL byte its length does not count). */
extern const unsigned char vsr_builtin_fact_check_exemplars[];
extern const size_t vsr_builtin_fact_check_exemplars_len;
extern const unsigned char vsr_builtin_user_feedbacks_exemplars[];
extern const size_t vsr_builtin_user_feedbacks_exemplars_len;
extern const unsigned char vsr_builtin_modality_exemplars[];
extern const size_t vsr_builtin_modality_exemplars_len;
int vsr__fact_check_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
int vsr__user_feedback_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
int vsr__modality_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
void vsr__exemplar_free(void *state);
int vsr__exemplar_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out);
int vsr__exemplar_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out);
/* exemplar.c's classifiers (routing.signals.classifiers): type local is
 * the exemplar method over the configured bank, every label competing;
 * type llm is unknown on every request.  The number of texts a compiled
 * one embeds with its first request. */
int vsr__classifier_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
size_t vsr__classifier_bank_size(const vsr_sig_classifier_conf_t *c);
/* The number of exemplars a compiled signal of family ("fact_check",
 * "user_feedbacks", "modality") embeds; 0 for another. */
size_t vsr__exemplar_bank_size(const char *family);
/* modality's image cues: 1 when text holds one ("draw", "image",
 * "picture", ...) as whole words, ASCII case-insensitively.  Such a text has
 * VSR__MODALITY_CUE_BONUS added to its DIFFUSION and BOTH scores, a text
 * without one has it subtracted. */
int vsr__modality_cue(vsr_slice_t text);
#define VSR__MODALITY_CUE_BONUS 0.1
/* A text longer than twice this is scanned for cues in its first and last
 * VSR__MODALITY_CUE_SCAN_BYTES bytes only (the scan is linear in them). */
#define VSR__MODALITY_CUE_SCAN_BYTES 4096

/* embedding.c's scoring for families made of several candidate banks
 * (complexity): the score of unit vector q against the state's candidates,
 * read from result j after token *tok (advanced past them) when with_cands,
 * else the stored ones (VSR_ERR_INVALID when there are none, or they come
 * from another model or length); whether the state has stored vectors; its
 * number of texts (candidates and negatives) and those texts as JSON array
 * elements (",\"c1\",..."). */
int vsr__emb_score(void *state, const vsr_json_t *j, uint32_t *tok, int with_cands, const float *q, size_t dim,
                   vsr_slice_t model, double *score, int *veto);
int vsr__emb_stored(const void *state);
size_t vsr__emb_n_texts(const void *state);
vsr_slice_t vsr__emb_cand_json(const void *state);

/* complexity.c: one complexity signal compiles to three signals, its
 * levels "<name>:easy", "<name>:medium" and "<name>:hard", sharing one
 * state (freed with the last of them); a level's task embeds the routing
 * text (and, until they are stored, the hard then the easy candidates). */
int vsr__complexity_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
/* The state of level 0 (easy), 1 (medium) or 2 (hard) of a compiled
 * complexity signal; takes a reference on it. */
void *vsr__complexity_level(void *core, int level);
void vsr__complexity_free(void *state);
int vsr__complexity_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out);
int vsr__complexity_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out);

/* kb.c: a kb signal compiles to an embeddings signal's state (the target
 * entries as candidates; with match best, the others as negatives); the
 * embedding functions evaluate it.  vsr__kb_entries: the number of entries
 * of kb `kb` in m (0 when absent). */
int vsr__kb_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
size_t vsr__kb_entries(const vsr_modules_conf_t *m, const char *kb);

/* reask.c: the reasks family (no stored vectors: every request embeds its
 * current and previous user turns). */
int vsr__reask_compile(vsr_signals_t *s, const void *conf, const char *path, void **state, vsr_buf_t *err);
void vsr__reask_free(void *state);
int vsr__reask_task(vsr__ctx_t *c, const void *state, vsr_signal_task_t *out);
int vsr__reask_consume(vsr__ctx_t *c, const void *state, vsr_slice_t result, vsr_signal_result_t *out);

/* ---- keyword similarity methods (kw_ngram.c, kw_bm25.c) -------------------
 * Both mark which keywords of a signal matched (matched[i] = 1). */
typedef struct vsr__ngram_s vsr__ngram_t;
vsr__ngram_t *vsr__ngram_build(char *const *keywords, size_t n, int case_sensitive, uint32_t arity, double threshold);
void vsr__ngram_free(vsr__ngram_t *g);
void vsr__ngram_match(const vsr__ngram_t *g, vsr__ctx_t *c, uint8_t *matched);

typedef struct vsr__bm25_s vsr__bm25_t;
vsr__bm25_t *vsr__bm25_build(char *const *keywords, size_t n, int case_sensitive, double threshold);
void vsr__bm25_free(vsr__bm25_t *b);
void vsr__bm25_match(const vsr__bm25_t *b, vsr__ctx_t *c, uint8_t *matched);

/* ---- the language detector (cld2_shim.cc) --------------------------------
 * Detects the language of UTF-8 text.  Returns 1 with the detector's code
 * (e.g. "en", "zh-Hant") in code, its percent of the text (0..100) and whether
 * the detector calls the result reliable; 0 when nothing was recognised. */
#ifdef __cplusplus
extern "C" {
#endif
int vsr__cld2_detect(const char *text, size_t len, char *code, size_t code_cap, int *percent, int *reliable);
#ifdef __cplusplus
}
#endif

/* Index of v among names (case-insensitive), -1 when absent or v is NULL. */
int vsr__signal_lookup(const char *v, const char *const *names, size_t n);

#endif /* VSR_SIGNALS_INT_H */
