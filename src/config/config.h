/*
 * config — the canonical v0.3 document (YAML, decoded strictly with libyaml)
 * → typed, validated, immutable configuration.
 *
 * Decoding is strict: a wrong type, a missing required field, a bad value or
 * an unknown key fails with "FILE:LINE:COL: what was expected".  Keys that
 * belong to the v0.3 contract but are not implemented yet are accepted and
 * reported once (vsr_config_t.unimplemented), so a user's document loads
 * unchanged and nothing is silently ignored.
 *
 * A loaded vsr_config_t is immutable and may be read from any thread.
 */
#ifndef VSR_CONFIG_H
#define VSR_CONFIG_H

#include "base/base.h"

#define VSR_DEFAULT_LISTENER_TIMEOUT_MS 300000u            /* 300s */
#define VSR_DEFAULT_MAX_BODY_BYTES (32ull * 1024 * 1024)   /* 32 MiB: a long chat with images, base64 */
#define VSR_DEFAULT_MAX_CONNECTIONS 50000u
#define VSR_DEFAULT_HEADER_TIMEOUT_MS 10000u              /* 10s: a request head, first byte to last */
#define VSR_DEFAULT_BODY_TIMEOUT_MS 60000u                /* 60s: a request body, end of head to last byte */
#define VSR_DEFAULT_MAX_HEADER_BYTES (64u * 1024)          /* 64 KiB */
#define VSR_DEFAULT_MAX_HEADERS 100u
#define VSR_DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define VSR_DEFAULT_RUNTIME_TIMEOUT_MS 5000u               /* one model runtime call */
#define VSR_DEFAULT_LISTENER_NAME "http-8899"              /* a document without listeners (ref CLI default) */
#define VSR_DEFAULT_LISTENER_PORT 8899u
#define VSR_CONFIG_HASH_LEN 72  /* "sha256:" + 64 hex digits + NUL */


/* ==== The whole v0.3 document model ======================================
 * Everything below is decoded from the document by config/ (one field table
 * per object) and read-only afterwards.  Strings are NUL-terminated and owned
 * by the config.  `has_X` flags say whether an optional field was present
 * (needed where absent and zero differ, e.g. for merges).  Lists are a pointer
 * plus a count.  "not supported yet" = a capability check: decoding succeeds
 * only when the feature is absent (or explicitly disabled), otherwise an error
 * "<path>: <what> is not supported yet" at the node. */

typedef struct {
    char *name;
    char *value;
} vsr_kv_conf_t;

typedef struct {
    char **items;
    size_t n;
} vsr_strlist_conf_t;

/* management_api.auth.tokens[]: a bearer token's environment variable and its role. */
typedef struct {
    char *env;
    char *role;
} vsr_management_token_conf_t;

/* management_api.auth.roles: a role and the permissions it grants ("*": all). */
typedef struct {
    char *name;
    vsr_strlist_conf_t permissions;
} vsr_management_role_conf_t;

/* The largest circuit-breaker threshold a model may set. */
#define VSR_MAX_CIRCUIT_LIMIT 1000000u

/* retry_on tokens (ref §5.3), compiled at load into
 * vsr_reliability_conf_t.retry_on_mask: the request path reads the mask and
 * never the string. */
enum {
    VSR_RETRY_5XX = 1u << 0,
    VSR_RETRY_GATEWAY_ERROR = 1u << 1,   /* 502, 503, 504 */
    VSR_RETRY_RESET = 1u << 2,
    VSR_RETRY_RESET_BEFORE_REQUEST = 1u << 3,
    VSR_RETRY_CONNECT_FAILURE = 1u << 4,
    VSR_RETRY_REFUSED_STREAM = 1u << 5,
    VSR_RETRY_RETRIABLE_4XX = 1u << 6,   /* 409 */
    VSR_RETRY_RETRIABLE_STATUS_CODES = 1u << 7,
    VSR_RETRY_ENVOY_RATELIMITED = 1u << 8,
};

/* providers.models[].reliability and routing.decisions[].reliability (ref §1.5/§1.6) */
typedef struct {
    char *lb_policy;                 /* "round_robin" (default) | "least_request" */
    uint32_t retry_count;            int has_retry_count;      /* 0..5 */
    char *retry_on;                  /* comma tokens, validated against ref §5.3 */
    uint32_t retry_on_mask;          /* retry_on as VSR_RETRY_* bits (compiled) */
    int least_request;               /* lb_policy is least_request (compiled) */
    int compiled;                    /* set by the loader: retry_on_mask and least_request are valid, and requests
                                      * read them rather than the strings */
    uint32_t *retriable_status_codes; size_t n_retriable_status_codes; /* 100..599 */
    uint64_t per_try_timeout_ms;     int has_per_try_timeout;
    uint64_t total_timeout_ms;       int has_total_timeout;    /* 0 disables */
    uint64_t idle_timeout_ms;        int has_idle_timeout;
    uint64_t first_byte_timeout_ms;  int has_first_byte_timeout;
    uint64_t connect_timeout_ms;     int has_connect_timeout;  /* default 10s */
    uint64_t retry_back_off_base_ms; int has_retry_back_off_base; /* 25ms */
    uint64_t retry_back_off_max_ms;  int has_retry_back_off_max;  /* 10 x base, >= base */
    uint64_t retry_after_max_ms;     int has_retry_after_max;
    uint32_t retry_budget_percent;   int has_retry_budget_percent; /* 0..100 */
    uint32_t retry_budget_min_concurrency; int has_retry_budget_min_concurrency;
    uint32_t consecutive_5xx;        int has_consecutive_5xx;
    uint64_t base_ejection_time_ms;  int has_base_ejection_time; /* 30s */
    uint32_t max_ejection_percent;   int has_max_ejection_percent; /* 0..100, 50 */
    /* vsr's own: ejection on time to first byte (the response head) — an
     * endpoint whose ttft_ejection_percentile over ttft_ejection_window
     * (at least ttft_ejection_min_samples) exceeds ttft_ejection_threshold
     * is ejected as by consecutive_5xx (base_ejection_time, max_ejection_percent) */
    uint64_t ttft_ejection_threshold_ms; int has_ttft_ejection_threshold; /* absent: off */
    uint32_t ttft_ejection_percentile; int has_ttft_ejection_percentile;  /* 1..100, 95 */
    uint64_t ttft_ejection_window_ms; int has_ttft_ejection_window;      /* 30s */
    uint32_t ttft_ejection_min_samples; int has_ttft_ejection_min_samples; /* 10 */
    char *health_check_path;         /* must start with '/' */
    uint64_t health_check_interval_ms; int has_health_check_interval; /* 10s */
    uint64_t health_check_timeout_ms;  int has_health_check_timeout;  /* 2s */
    /* vsr's own: the model's circuit-breaker thresholds (the reference fixes them) */
    uint32_t max_connections;        int has_max_connections;      /* 1024 */
    uint32_t max_pending_requests;   int has_max_pending_requests; /* 1024 */
    uint32_t max_requests;           int has_max_requests;         /* 1024; 4096 with retries or ejection */
} vsr_reliability_conf_t;

/* global.router.fallback, recipes[].routing.fallback, decisions[].fallback (ref §1.7) */
typedef struct {
    int present;
    uint32_t version;                int has_version;          /* only 1 */
    int enabled;                     int has_enabled;          /* tri-state */
    uint32_t max_attempts;           int has_max_attempts;     /* default 3 */
    uint64_t total_timeout_ms;       int has_total_timeout;    /* 30s */
    uint64_t per_attempt_timeout_ms; int has_per_attempt_timeout; /* 10s, <= total */
    uint32_t *retryable_status_codes; size_t n_retryable_status_codes; int has_retryable_status_codes;
    uint32_t cb_consecutive_failures; int has_cb_consecutive_failures; /* circuit_breaker.* */
    uint64_t cb_cooldown_period_ms;   int has_cb_cooldown_period;
    uint32_t cb_half_open_probes;     int has_cb_half_open_probes;
} vsr_fallback_conf_t;

/* ---- signals (routing.signals.<family>[], ref §1.9) ---- */

typedef enum {
    VSR_KW_OP_OR = 0, VSR_KW_OP_AND, VSR_KW_OP_NOR,
} vsr_kw_operator_t;

typedef enum {
    VSR_KW_EXACT = 0, /* method "" : word-boundary match */
    VSR_KW_REGEX, VSR_KW_BM25, VSR_KW_NGRAM, VSR_KW_FUZZY,
} vsr_kw_method_t;

typedef struct {
    char *name;
    vsr_kw_operator_t op;          /* `operator`, default OR */
    vsr_strlist_conf_t keywords;   /* non-empty; for regex each must compile (PCRE2) */
    int case_sensitive;            /* default false */
    vsr_kw_method_t method;
    double bm25_threshold;         /* 0.1 */
    double ngram_threshold;        /* 0.4 */
    uint32_t ngram_arity;          /* 3 */
    int fuzzy_match;               /* default false; method fuzzy implies it */
    uint32_t fuzzy_threshold;      /* edit distance, default 2 */
} vsr_sig_keyword_conf_t;

typedef struct {
    char *name;
    uint64_t min_tokens;           /* K/M suffixes: "32K" = 32000, "1M" = 1000000; integers too */
    uint64_t max_tokens;           int has_max_tokens; /* absent = unbounded */
} vsr_sig_context_conf_t;

typedef struct {
    double gt, gte, lt, lte;
    int has_gt, has_gte, has_lt, has_lte;
} vsr_predicate_conf_t;

typedef struct {
    char *name;
    char *feature_type;            /* count | exists | density | sequence */
    char *source_type;             /* regex | keyword_set | sequence | text_bytes */
    char *pattern;                 /* regex */
    vsr_strlist_conf_t keywords;   /* keyword_set */
    vsr_strlist_conf_t *sequences; size_t n_sequences; /* sequence: lists of keywords in order */
    int case_sensitive;
    vsr_predicate_conf_t predicate;
} vsr_sig_structure_conf_t;

typedef struct {
    char *name;
    char *feature_type;            /* count | exists */
    char *source_type;             /* message | tool_definition | assistant_tool_call | assistant_tool_cycle | active_tool_loop | image_content | tool_choice_required | tool_choice_none */
    char *role;                    /* message: user | assistant | system | developer | tool | non_user; NULL = any */
    vsr_predicate_conf_t predicate;
} vsr_sig_conversation_conf_t;

typedef struct {
    char *name;                    /* ISO 639-1 code, e.g. "en", "zh" */
    double threshold;              /* 0 -> 0.3 */
} vsr_sig_language_conf_t;

typedef struct {
    char *kind;                    /* User | Group */
    char *name;
} vsr_subject_conf_t;

typedef struct {
    char *name;
    char *role;
    vsr_subject_conf_t *subjects; size_t n_subjects;
} vsr_sig_authz_conf_t;

/* routing.signals.embeddings[] (ref §1.9): cosine similarity of the routing
 * text's embedding to each candidate's, aggregated over the candidates. */
typedef enum {
    VSR_EMB_AGG_MAX = 0, VSR_EMB_AGG_MEAN, VSR_EMB_AGG_ANY,
} vsr_emb_aggregation_t;

#define VSR_EMB_MAX_CANDIDATES 256        /* per signal */
#define VSR_EMB_MAX_CANDIDATE_BYTES 8192  /* per candidate text */

typedef struct {
    char *name;
    double threshold;              /* required, 0..1: the score that matches */
    vsr_strlist_conf_t candidates; /* 1..VSR_EMB_MAX_CANDIDATES non-empty texts */
    vsr_emb_aggregation_t aggregation; /* aggregation_method: max (default) | mean | any */
    vsr_strlist_conf_t negative_candidates; /* 0..VSR_EMB_MAX_CANDIDATES texts that veto a match */
    int soft_matching;             /* enable_soft_matching (false) */
    double min_score_threshold;    /* 0..1, the soft-match floor (VSR_EMB_DEFAULT_MIN_SCORE) */
} vsr_sig_embedding_conf_t;

/* routing.signals.metadata[] (ref §1.9): one member of the request's
 * metadata (the body's top-level "metadata" object) against a predicate;
 * every bound given must hold. */
typedef struct {
    char *equals;                  /* a scalar, compared as text (numbers: by value) */
    vsr_strlist_conf_t in;         /* the value is one of these */
    int exists;                    int has_exists; /* exists: true | false */
    double gt, gte, lt, lte;       /* numeric bounds */
    int has_gt, has_gte, has_lt, has_lte;
} vsr_metadata_predicate_conf_t;

typedef struct {
    char *name;
    char *key;                     /* the metadata member */
    vsr_metadata_predicate_conf_t predicate; /* absent = the key exists */
    int has_predicate;
} vsr_sig_metadata_conf_t;

/* routing.signals.events[] (docs/signals.md "Events"): event words in the
 * routing text.  Each configured group (event_types, severities,
 * action_codes, temporal) is one criterion, met when any of its entries
 * stands in the text as a whole word (case-insensitive); the signal matches
 * when one criterion is met, confidence 0.5 + 0.5 x met / configured. */
typedef struct {
    char *name;
    vsr_strlist_conf_t event_types;
    vsr_strlist_conf_t severities;
    vsr_strlist_conf_t action_codes;
    int temporal;                  /* the fixed urgency words count as a criterion */
} vsr_sig_event_conf_t;
/* routing.signals.input_modality[] (docs/signals.md "Input modality"): the
 * user messages' content parts of one modality; matches when there is one. */
typedef struct {
    char *name;
    int modality;                  /* VSR_MODALITY_TEXT | IMAGE | AUDIO | VIDEO (json.h) */
} vsr_sig_input_modality_conf_t;

/* A severity's level: 0 critical, 1 high, 2 medium, 3 low (trimmed,
 * case-insensitive); -1 for any other text, which never matches. */
int vsr_event_severity_level(const char *s);
/* The soft-match floor when enable_soft_matching is on and
 * min_score_threshold is absent. */
#define VSR_EMB_DEFAULT_MIN_SCORE 0.5

/* routing.signals.preferences[] (ref §1.9): prototype scoring of the routing
 * text against the examples and the description (an embeddings signal with
 * aggregation max over them). */
#define VSR_PREF_DEFAULT_THRESHOLD 0.7

typedef struct {
    char *name;
    char *description;             /* optional; a candidate when not blank */
    vsr_strlist_conf_t examples;   /* 0..VSR_EMB_MAX_CANDIDATES - 1 texts */
    double threshold;              /* 0..1, VSR_PREF_DEFAULT_THRESHOLD when absent */
} vsr_sig_preference_conf_t;

/* routing.signals.complexity[] (ref §1.9): margin = score(hard candidates)
 * - score(easy candidates), each scored as an embeddings signal with
 * aggregation max (prototype scoring); margin > hard_above is hard, margin <
 * easy_below is easy, anything else medium.  hard_above defaults to
 * threshold and easy_below to -threshold.  A rule names one level of it:
 * `{type: complexity, name: "<signal>:easy|medium|hard"}`. */
#define VSR_CX_DEFAULT_THRESHOLD 0.1

typedef struct {
    vsr_strlist_conf_t candidates; /* 1..VSR_EMB_MAX_CANDIDATES non-empty texts */
} vsr_cx_bank_conf_t;

typedef struct {
    char *name;
    double threshold;              /* 0..2, VSR_CX_DEFAULT_THRESHOLD when absent */
    double hard_above, easy_below; /* -2..2 */
    int has_hard_above, has_easy_below;
    vsr_cx_bank_conf_t hard, easy;
    /* composer: a rule over the recipe's other signals that must hold for
     * the signal to apply (NULL: always).  The decoder gates every rule leaf
     * naming a level with it: the leaf becomes AND(leaf, composer). */
    struct vsr_rule_conf_s *composer;
} vsr_sig_complexity_conf_t;

/* routing.signals.reasks[] (ref §1.9): the current user turn's embedding
 * similarity to each of the previous lookback_turns user turns. */
#define VSR_REASK_DEFAULT_THRESHOLD 0.8
#define VSR_REASK_MAX_LOOKBACK 16

typedef struct {
    char *name;
    double threshold;              /* 0..1, VSR_REASK_DEFAULT_THRESHOLD when absent */
    uint32_t lookback_turns;       /* 1..VSR_REASK_MAX_LOOKBACK, default 1 */
} vsr_sig_reask_conf_t;

/* routing.signals.fact_check[], user_feedbacks[], modality[] (ref §1.9):
 * the routing text's prototype score against built-in exemplar banks, one
 * per label; the signal's name is its label (fact_check: needs_fact_check,
 * no_fact_check_needed; user_feedbacks: wrong_answer, need_clarification,
 * want_different, satisfied; modality: AR, DIFFUSION, BOTH), and it
 * matches when its label's bank is the nearest and its score >= threshold. */
#define VSR_FACT_CHECK_DEFAULT_THRESHOLD 0.3
#define VSR_USER_FEEDBACK_DEFAULT_THRESHOLD 0.3
#define VSR_MODALITY_DEFAULT_THRESHOLD 0.3

typedef struct {
    char *name;                    /* one of the family's labels */
    char *description;             /* informational */
    double threshold;              /* 0..1, the family's default when absent */
} vsr_sig_exemplar_conf_t;

/* A remote classifier a family's scores come from instead of the runtime's
 * built-in model (docs/signals.md "Bring a bigger model"): the name of a
 * global.model_catalog.external[] entry and what the signals need of it,
 * copied at load (the signals compiled from it outlive the document). */
typedef enum {
    VSR_REMOTE_HTTP_CLASSIFY = 1, /* POST <endpoint>/classify {"inputs": T} → [{"label","score"}, ...] */
    VSR_REMOTE_RUNTIME,           /* POST <endpoint>/v1/classify {"model": M, "text": T} → the runtime's answer */
} vsr_remote_protocol_t;
typedef struct {
    char *model;                   /* the external entry's name; NULL: the built-in model */
    vsr_remote_protocol_t protocol;
    uint64_t timeout_ms;           /* backend.deadline_ms, else the entry's llm_timeout_seconds (5 s) */
    uint64_t max_request_bytes;    /* the entry's max_request_bytes (128 KiB): the text is shortened to fit */
    int distribution;              /* contract label_distribution: the scores must add up to 1 (±0.02) */
    char *runtime_model;           /* runtime_classify: the classifier named in the request (the entry's
                                    * llm_model_name, else the family's: domain, jailbreak, pii) */
} vsr_remote_cls_conf_t;

/* routing.signals.safety[] (docs/signals.md "Safety"): risk = the summed
 * probability of unsafe_labels from one classification of the routing text,
 * by a remote classifier (`model`: a global.model_catalog.external[] entry,
 * http_classify) or the built-in prompt guard (no model: labels safe and
 * unsafe); matches when risk >= threshold and, with a hazard stage, the
 * largest probability among hazard.categories >= hazard.threshold (read
 * from the same answer, or asked of hazard.model in parallel). */
#define VSR_SAFETY_DEFAULT_HAZARD_THRESHOLD 0.5
#define VSR_SAFETY_MAX_LABELS 64
typedef struct {
    char *name;
    char *model;                   /* NULL: the built-in prompt guard */
    vsr_strlist_conf_t labels;     /* default [safe, unsafe] */
    vsr_strlist_conf_t unsafe_labels; /* default [unsafe]; each one of labels */
    double threshold;              /* required, 0..1 */
    int has_hazard;
    char *hazard_model;            /* NULL (the rule's model answers both stages) or another classifier */
    vsr_strlist_conf_t hazard_labels, hazard_categories; /* categories: each one of hazard_labels */
    double hazard_threshold;       /* default VSR_SAFETY_DEFAULT_HAZARD_THRESHOLD */
    vsr_remote_cls_conf_t remote;  /* model's classifier, resolved at load */
    vsr_remote_cls_conf_t hazard_remote; /* hazard_model's, when it is another one */
} vsr_sig_safety_conf_t;

/* routing.signals.classifiers[] (ref §1.9).  type local: a labelled bank
 * of example texts, inline (labels: [{name, examples: [...]}]) or read at
 * load from model_path, a JSONL file of {"text": T, "label": L} lines
 * (relative to the configuration file's directory); the routing text's
 * prototype score against each label's examples, the nearest label wins and
 * the signal matches when its score >= threshold.  A condition may name the
 * label it wants (`label`) and replace the threshold with a `predicate` on
 * the score.  type llm: loaded, evaluated as unknown (its on_error decides)
 * until the router calls a model from the signal phase. */
#define VSR_CLS_DEFAULT_THRESHOLD 0.3
#define VSR_CLS_MAX_LABELS 64          /* per signal */
#define VSR_CLS_MAX_FILE_LINES 10000   /* model_path: lines (non-blank) */
#define VSR_CLS_MAX_TEXT_BYTES 4096    /* model_path: one text */
#define VSR_CLS_MAX_FILE_BYTES (64u << 20) /* model_path: the whole file */
typedef enum { VSR_CLS_LOCAL = 0, VSR_CLS_LLM } vsr_cls_type_t;

typedef struct {
    char *text;
    uint32_t label;                /* index into labels */
} vsr_cls_example_conf_t;

typedef struct {
    char *name;
    vsr_cls_type_t type;           /* local (default) | llm */
    double threshold;              /* 0..1, VSR_CLS_DEFAULT_THRESHOLD when absent */
    char *model_path;              /* local: the bank file as written (NULL: inline labels) */
    char *model;                   /* llm: the model it would ask */
    char *instructions;            /* llm */
    uint64_t timeout_ms;           /* llm: 0 = the routing wait */
    int use_cpu;                   /* informational */
    char **labels;                 size_t n_labels;   /* label names, document or file order */
    vsr_cls_example_conf_t *examples; size_t n_examples; /* local: every label has one at least */
    vsr_remote_cls_conf_t remote;  /* backend (a vsr extension): a remote classifier's label scores decide */
} vsr_sig_classifier_conf_t;

/* What a condition on a signal that could not be computed (its model task
 * failed or came late) means: DEFAULT defers to the next policy (the
 * condition's on_error, then its signal's family, then the decision's
 * rules.on_unknown, then no_match). */
typedef enum {
    VSR_ON_ERROR_DEFAULT = 0, VSR_ON_ERROR_MATCH, VSR_ON_ERROR_NO_MATCH,
} vsr_on_error_t;

/* routing.signals.domains[] (ref §1.9): the built-in domain classifier's
 * top class (MMLU-Pro categories); a signal matches when its name or one of
 * its mmlu_categories is the predicted class. */
/* domains[].model_scores[]: the static selector's score of a candidate
 * model while the domain is the decision's matched one (docs/signals.md
 * "Model scores"). */
typedef struct {
    char *model;                   /* a modelRef's model (or LoRA) name as written */
    double score;
    int use_reasoning;             int has_use_reasoning; /* carried, not read (as the reference) */
} vsr_model_score_conf_t;

typedef struct {
    char *name;
    vsr_strlist_conf_t categories; /* mmlu_categories */
    vsr_model_score_conf_t *model_scores; size_t n_model_scores;
    char *description;             /* extra evidence: its similarity to the text; a domain naming no MMLU-Pro
                                    * category matches on it (docs/signals.md) */
} vsr_sig_domain_conf_t;

/* routing.signals.jailbreak[] (ref §1.9). */
typedef enum { VSR_JB_CLASSIFIER = 0, VSR_JB_CONTRASTIVE, VSR_JB_HYBRID } vsr_jb_method_t;
#define VSR_JB_MAX_PATTERNS 256 /* per list */
/* the method of a rule that names none: the best-measured one (docs/signals.md, "The jailbreak classifier") */
#define VSR_JB_DEFAULT_METHOD VSR_JB_HYBRID
typedef struct {
    char *name;
    vsr_jb_method_t method;        /* classifier | contrastive | hybrid; without has_method, VSR_JB_DEFAULT_METHOD */
    int has_method;
    double threshold;              /* default: global.model_catalog.modules.prompt_guard.threshold */
    int has_threshold;
    int include_history;           /* also scan the earlier messages */
    vsr_strlist_conf_t jailbreak_patterns, benign_patterns; /* contrastive/hybrid; empty: the built-in sets */
} vsr_sig_jailbreak_conf_t;

/* routing.signals.pii[] (ref §1.9). */
typedef struct {
    char *name;
    double threshold;              /* default: global.model_catalog.modules.classifier.pii.threshold */
    int has_threshold;
    int include_history;
    vsr_strlist_conf_t allowed;    /* pii_types_allowed: entity types that do not match */
} vsr_sig_pii_conf_t;

/* global.model_catalog.kbs[] (ref §1.13): named banks of texts, each with
 * a label and a group, that kb signals compare the routing text with. */
#define VSR_KB_MAX_ENTRIES 256 /* per kb */

typedef struct {
    char *text;                    /* non-blank, at most VSR_EMB_MAX_CANDIDATE_BYTES */
    char *label, *group;           /* optional */
} vsr_kb_entry_conf_t;

typedef struct {
    char *name;
    vsr_kb_entry_conf_t *entries;  size_t n_entries; /* 1..VSR_KB_MAX_ENTRIES ("entries" or "documents") */
} vsr_kb_conf_t;

/* routing.signals.kb[] (ref §1.9): the routing text's nearest entries of a
 * kb.  best: the nearest entry has the target's label/group (and, with a
 * threshold, a similarity >= it); any: an entry with the target's
 * label/group has a similarity >= threshold. */
#define VSR_KB_DEFAULT_THRESHOLD 0.5 /* match: any */
typedef enum { VSR_KB_TARGET_GROUP = 0, VSR_KB_TARGET_LABEL } vsr_kb_target_kind_t;
typedef enum { VSR_KB_MATCH_BEST = 0, VSR_KB_MATCH_ANY } vsr_kb_match_t;

typedef struct {
    vsr_kb_target_kind_t kind;
    char *value;
} vsr_kb_target_conf_t;

typedef struct {
    char *name;
    char *kb;                      /* a global.model_catalog.kbs[].name */
    vsr_kb_target_conf_t target;
    vsr_kb_match_t match;
    double threshold;              /* -1..1 */
    int has_threshold;
} vsr_sig_kb_conf_t;

/* global.model_catalog.modules (ref §1.9): the settings the model-backed
 * families take when a signal does not set its own.  Copied into every
 * recipe's signals (and part of their hash: a change recompiles them). */
#define VSR_DEFAULT_GUARD_THRESHOLD 0.7
#define VSR_DEFAULT_DOMAIN_THRESHOLD 0.5
#define VSR_DEFAULT_PII_THRESHOLD 0.5 /* the reference says 0.9 for its token classifier; see docs/signals.md */
typedef struct {
    double guard_threshold;        /* prompt_guard.threshold */
    vsr_on_error_t guard_on_error; /* prompt_guard.on_error: allow = no_match, block = match */
    double domain_threshold;       /* classifier.domain.threshold */
    char *domain_fallback;         /* classifier.domain.fallback_category: "other" */
    double pii_threshold;          /* classifier.pii.threshold */
    vsr_on_error_t domain_on_error, pii_on_error;
    /* remote classifiers: prompt_guard.protocol (the external entry of model_role guardrail),
     * classifier.domain.backend, classifier.pii.backend (a vsr extension) */
    vsr_remote_cls_conf_t guard_remote, domain_remote, pii_remote;
    vsr_strlist_conf_t guard_positive; /* prompt_guard.positive_labels: the labels whose scores add up to the
                                        * jailbreak score; empty = ["jailbreak"] */
    const vsr_kb_conf_t *kbs;      /* global.model_catalog.kbs (not owned) */
    size_t n_kbs;
} vsr_modules_conf_t;

/* routing.signals.hallucination[] (ref §1.3): a response-stage signal (the
 * answer checked by the hallucination detector); a decision may not read it. */
typedef struct {
    char *name;
    int use_nli;                   /* accepted; the reference retired its NLI explainer */
} vsr_sig_hallucination_conf_t;

/* A signal of a family registered at run time (vsr_signals_register_family):
 * the document decoder never fills these; code that registers a family
 * declares its signals here. */
typedef struct {
    char *name;
    char *type;                    /* the family's condition type */
    char *params;                  /* the family's own settings (JSON text), or NULL */
    vsr_on_error_t on_error;       /* the family's policy (global.model_catalog.modules.*.on_error) */
} vsr_sig_ext_conf_t;

typedef struct {
    vsr_sig_keyword_conf_t *keywords;           size_t n_keywords;
    vsr_sig_context_conf_t *context;            size_t n_context;
    vsr_sig_structure_conf_t *structure;        size_t n_structure;
    vsr_sig_conversation_conf_t *conversation;  size_t n_conversation;
    vsr_sig_language_conf_t *language;          size_t n_language;
    vsr_sig_authz_conf_t *role_bindings;        size_t n_role_bindings;
    vsr_sig_embedding_conf_t *embeddings;       size_t n_embeddings;  /* model-backed */
    vsr_sig_domain_conf_t *domains;             size_t n_domains;     /* model-backed */
    vsr_sig_jailbreak_conf_t *jailbreak;        size_t n_jailbreak;   /* model-backed */
    vsr_sig_pii_conf_t *pii;                    size_t n_pii;         /* model-backed */
    vsr_sig_preference_conf_t *preferences;     size_t n_preferences; /* model-backed */
    vsr_sig_reask_conf_t *reasks;               size_t n_reasks;      /* model-backed */
    vsr_sig_exemplar_conf_t *fact_check;        size_t n_fact_check;  /* model-backed */
    vsr_sig_exemplar_conf_t *user_feedbacks;    size_t n_user_feedbacks; /* model-backed */
    vsr_sig_exemplar_conf_t *modality;          size_t n_modality;    /* model-backed */
    vsr_sig_complexity_conf_t *complexity;      size_t n_complexity;  /* model-backed */
    vsr_sig_kb_conf_t *kb;                      size_t n_kb;          /* model-backed */
    vsr_sig_classifier_conf_t *classifiers;     size_t n_classifiers; /* model-backed */
    vsr_sig_metadata_conf_t *metadata;          size_t n_metadata;
    vsr_sig_event_conf_t *events;               size_t n_events;
    vsr_sig_input_modality_conf_t *input_modality; size_t n_input_modality;
    vsr_sig_safety_conf_t *safety;              size_t n_safety;      /* model-backed (or a remote classifier) */
    vsr_modules_conf_t modules;                 /* from global.model_catalog.modules */
    /* other model-backed families (safety, hallucination, input_modality):
     * not supported yet (capability check at load). */
    vsr_sig_ext_conf_t *ext;                    size_t n_ext;
    /* response-stage: declared for the hallucination plugin, never read by a decision */
    vsr_sig_hallucination_conf_t *hallucination; size_t n_hallucination;
} vsr_signals_conf_t;

/* ---- projections (routing.projections, ref §1.10) ---- */

/* partitions[]: among the matched domain / embedding members keep one. */
typedef struct {
    char *name;
    int softmax;                   /* semantics: exclusive (0, default) | softmax_exclusive (1) */
    double temperature;            /* softmax_exclusive: > 0, default 1.0 */
    vsr_strlist_conf_t members;    /* names of domain or embedding signals, >= 2 */
    char *default_;                /* `default`: a member, or NULL */
} vsr_partition_conf_t;

typedef enum {
    VSR_VALUE_BINARY = 0, VSR_VALUE_CONFIDENCE, VSR_VALUE_RAW, VSR_VALUE_SCORE,
} vsr_value_source_t;

/* scores[].inputs[]: type is a condition type (keyword, embedding, ...),
 * "score" (an earlier score of the same recipe, by name) or "kb_metric":
 * a metric of a kb signal over kb `kb` (`name`, or the recipe's first kb
 * signal over it, resolved at load; none: the input gives `miss`). */
typedef enum {
    VSR_KB_METRIC_SCORE = 0,       /* best_score | score | the signal's target value: its similarity */
    VSR_KB_METRIC_CONFIDENCE,      /* confidence when matched, else miss */
    VSR_KB_METRIC_MATCHED,         /* match / miss */
} vsr_kb_metric_t;

typedef struct {
    char *type;
    char *name;
    double weight;                 /* default 1.0 */
    vsr_value_source_t value_source; /* default binary */
    double match, miss;            /* defaults 1.0, 0.0 */
    char *kb, *metric;             /* kb_metric inputs */
    vsr_kb_metric_t kb_metric;     /* kb_metric inputs: metric, decoded */
} vsr_score_input_conf_t;

typedef struct {
    char *name;
    char *method;                  /* weighted_sum (the only one) or NULL */
    vsr_score_input_conf_t *inputs; size_t n_inputs;
} vsr_score_conf_t;

typedef struct {
    char *name;                    /* a projection output: conditions name it with type: projection */
    vsr_predicate_conf_t band;     /* gt/gte/lt/lte, a conjunction; at least one */
} vsr_mapping_output_conf_t;

typedef struct {
    char *name;
    char *source;                  /* a score name */
    int multi_emit;                /* method: threshold_bands (0, default) | multi_emit (1) */
    int calibrated;                /* calibration {method: sigmoid_distance} given */
    char *calibration_method;
    double slope;                  /* calibration.slope, default 12 */
    vsr_mapping_output_conf_t *outputs; size_t n_outputs;
} vsr_mapping_conf_t;

typedef struct {
    vsr_partition_conf_t *partitions; size_t n_partitions;
    vsr_score_conf_t *scores;         size_t n_scores;
    vsr_mapping_conf_t *mappings;     size_t n_mappings;
} vsr_projections_conf_t;

/* ---- decisions (ref §1.11) ---- */

typedef enum { VSR_RULE_LEAF = 0, VSR_RULE_AND, VSR_RULE_OR, VSR_RULE_NOT } vsr_rule_kind_t;

typedef struct vsr_rule_conf_s {
    vsr_rule_kind_t kind;
    char *type;                    /* leaf: condition type (keyword, context, structure, conversation, language, authz,
                                    * embedding, metadata, event; projection: a routing.projections output) */
    char *name;                    /* leaf: signal name, resolved within the same recipe */
    struct vsr_rule_conf_s *children; size_t n_children; /* composite; NOT has exactly one */
    vsr_on_error_t on_error;       /* leaf: `on_error: match | no_match` */
    char *label;                   /* classifier leaf: the label that must win (NULL: any) */
    vsr_predicate_conf_t predicate; /* classifier leaf: on the score, in place of the signal's threshold */
    int has_predicate;
    int on_unknown_fail;           /* root: `on_unknown: fail_request` (else no_match) */
    uint32_t line, col;            /* for messages */
} vsr_rule_conf_t;

typedef struct {
    char *model;                   /* a providers.models[].name; a ref naming a card's LoRA is stored
                                    * as {model: <card = provider model>, lora_name: <LoRA>} */
    int use_reasoning;             int has_use_reasoning;
    char *reasoning_effort;
    char *lora_name;
    double weight;                 int has_weight;
} vsr_model_ref_conf_t;

typedef enum {
    VSR_PLUGIN_SYSTEM_PROMPT = 1, VSR_PLUGIN_HEADER_MUTATION, VSR_PLUGIN_FAST_RESPONSE, VSR_PLUGIN_REQUEST_PARAMS,
    VSR_PLUGIN_TOOLS, VSR_PLUGIN_CONTEXT_COMPRESSION, VSR_PLUGIN_RESPONSE_CACHE, VSR_PLUGIN_RESPONSE_JAILBREAK,
    VSR_PLUGIN_ROUTER_REPLAY, VSR_PLUGIN_TOOL_SELECTION, VSR_PLUGIN_MEMORY,
    VSR_PLUGIN_HALLUCINATION, VSR_PLUGIN_SHADOW_DISPATCH, VSR_PLUGIN_RAG,
    /* a catalogue type vsr does not implement, kept only because its entry
     * says configuration.enabled: false (enabled is then always 0; the
     * configuration is not decoded) */
    VSR_PLUGIN_UNSUPPORTED,
} vsr_plugin_kind_t;

typedef struct {
    int enabled;                   /* default true */
    int insert;                    /* mode: insert (1, default) | replace (0) */
    char *system_prompt;
} vsr_plugin_system_prompt_conf_t;

typedef struct {
    vsr_kv_conf_t *add;    size_t n_add;    /* the five x-envoy reliability headers are dropped at load with a warning */
    vsr_kv_conf_t *update; size_t n_update;
    vsr_strlist_conf_t delete_;             /* `delete` */
} vsr_plugin_header_mutation_conf_t;

typedef struct {
    char *message;
} vsr_plugin_fast_response_conf_t;

typedef struct {
    vsr_strlist_conf_t blocked_params;
    uint64_t max_tokens_limit;     int has_max_tokens_limit;
    uint64_t max_n;                int has_max_n;
    int strip_unknown;
    vsr_strlist_conf_t allowed_params; /* extra allow-list entries for strip_unknown */
    uint64_t default_max_tokens;   int has_default_max_tokens;
} vsr_plugin_request_params_conf_t;

/* tools (ref §2): mode filtered (default) | none | passthrough. */
typedef enum { VSR_TOOLS_FILTERED = 0, VSR_TOOLS_NONE, VSR_TOOLS_PASSTHROUGH } vsr_tools_mode_t;

typedef struct {
    int enabled;                   /* = the entry's enabled */
    int mode;                      /* vsr_tools_mode_t */
    vsr_strlist_conf_t allow_tools; /* filtered: tool names kept (empty = all) */
    vsr_strlist_conf_t block_tools; /* filtered: tool names removed (wins over allow_tools) */
    int strip_tool_history;        /* none: also drop tool calls and tool results from messages */
    /* semantic_selection (filtered): after allow/block, keep the top_k tools
     * most similar to the routing text, at or above similarity_threshold.
     * `true` or a block; unset fields take global.integrations.tools' values */
    int semantic;                  /* semantic_selection.enabled */
    uint32_t top_k;                /* 1..VSR_TOOLS_MAX_SELECT */
    double similarity_threshold;   /* -1..1 */
    int fallback_to_empty;         /* = global.integrations.tools.fallback_to_empty */
    int has_top_k, has_similarity_threshold; /* set in the plugin's block */
} vsr_plugin_tools_conf_t;

/* tool_selection (ref §2): mode add (tools of the tools database most
 * similar to the routing text join the request's) | filter (the request's
 * tools below relevance_threshold go, preserve_count at least stay). */
typedef enum { VSR_TOOLSEL_ADD = 0, VSR_TOOLSEL_FILTER } vsr_toolsel_mode_t;

typedef struct {
    int enabled;                   /* = the entry's enabled */
    int mode;                      /* vsr_toolsel_mode_t, default add */
    uint32_t top_k;                /* add: default global.integrations.tools.top_k */
    double similarity_threshold;   /* add: default global.integrations.tools.similarity_threshold */
    double relevance_threshold;    /* filter: default global.integrations.tools.similarity_threshold */
    uint32_t preserve_count;       /* filter: default 1 */
    int fallback_to_empty;         /* the plugin's, else global.integrations.tools.fallback_to_empty */
    int has_top_k, has_similarity_threshold, has_relevance_threshold, has_preserve_count, has_fallback_to_empty;
    /* advanced_filtering (mode add, retrieval_strategy weighted): the candidates at or above
     * similarity_threshold (the candidate_pool_size most similar; 0: all) pass allow/block and the
     * category filter, then rank by (w_embed * similarity + w_lexical * lexical + w_tag * tag +
     * w_name * name + w_category * category) / the weights' sum (tool_rank.c) */
    int advanced;                  /* advanced_filtering.enabled */
    uint32_t candidate_pool_size;
    uint32_t min_lexical_overlap;  /* distinct query words a tool's name, description or category must share */
    double min_combined_score;
    double w_embed, w_lexical, w_tag, w_name, w_category; /* none set: embed 1, the others 0 */
    int use_category_filter;       /* only tools of the matched domain's category (if any is) */
    double category_confidence_threshold; /* the domain signal's confidence the category needs */
    vsr_strlist_conf_t af_allow, af_block; /* advanced_filtering.allow_tools / block_tools (case-insensitive) */
} vsr_plugin_tool_selection_conf_t;

/* The tools database (global.integrations.tools.tools_db_path): a JSON
 * array of {"tool": {"type": "function", "function": {"name", "description",
 * "parameters"}}, "description", "category", "tags": [..]}, loaded and
 * checked with the document; part of the snapshot, read-only. */
#define VSR_TOOLS_DB_MAX_BYTES (4u << 20)
#define VSR_TOOLS_DB_MAX_TOOLS 256u
#define VSR_TOOLS_MAX_SELECT 64u  /* top_k at most */
typedef struct {
    char *name;                    /* tool.function.name (unique in the file) */
    char *description;             /* the entry's description, else the function's */
    char *text;                    /* what is embedded: "name: description" (the entry's description, else the
                                    * function's), then the category and the tags */
    char *category;                /* NULL = none */
    vsr_strlist_conf_t tags;
    vsr_slice_t json;              /* the `tool` object as written in the file: added to requests as is */
} vsr_tool_entry_t;

typedef struct {
    vsr_tool_entry_t *tools;
    size_t n;
} vsr_tools_db_t;

/* Parses a tools database (`name` stands in for FILE in messages) into db,
 * allocated from pool.  VSR_OK, or VSR_ERR_INVALID with one line
 * "NAME:LINE:COL: message\n" per problem appended to err (may be NULL). */
int vsr_tools_db_parse(const char *name, const char *data, size_t len, vsr_pool_t *pool, vsr_tools_db_t *db,
                       vsr_buf_t *err);

/* global.integrations.tools (ref §1.13): defaults for the semantic tool
 * plugins and the tools database of tool_selection's mode add. */
typedef struct {
    int present;                   /* the block was given */
    int enabled;                   /* default true when the block is given */
    uint32_t top_k;                /* default 3 */
    double similarity_threshold;   /* default 0.2 */
    char *tools_db_path;           /* as written; relative to the configuration file's directory */
    int fallback_to_empty;         /* default false: no similarities (runtime down): tools unchanged */
    vsr_tools_db_t db;             /* loaded at load time (n 0 when no path) */
    int db_missing;                /* tools_db_path names no file: warned, and run without the database */
} vsr_tools_integration_conf_t;

/* context_compression (ref §2): what may be compressed, in the order given. */
typedef enum { VSR_CC_TOOL_RESULTS = 0, VSR_CC_HISTORY } vsr_cc_target_t;
#define VSR_CC_MAX_TARGETS 2

typedef struct {
    int enabled;                   /* = the entry's enabled */
    /* budget: each an integer, or "auto" (also 0; the flag is set, the value
     * 0): derived per request from the selected model's context window
     * (routing.modelCards[].context_window_size), see context_compression.c */
    uint64_t trigger_tokens;       /* budget.trigger_tokens (required; explicit: >= target_tokens) */
    uint64_t target_tokens;        /* budget.target_tokens (required) */
    uint64_t reserve_output_tokens; /* budget.reserve_output_tokens (explicit: < target_tokens) */
    int trigger_auto, target_auto;
    int reserve_auto;              /* also when absent: the request's max_completion_tokens / max_tokens */
    uint8_t targets[VSR_CC_MAX_TARGETS]; size_t n_targets; /* default [tool_results, history] */
    int fail_closed;               /* failure_mode: fail_open (0, default) | fail_closed (1) */
    /* request_controls: the client's directives in one header (plugins.md#context_compression) */
    int controls;                  /* request_controls.enabled, default false */
    char *control_header;          /* request_controls.header; NULL: x-vsr-compression-control */
    unsigned allowed;              /* request_controls.allowed: VSR_CC_CTL_* bits; none when absent (as the reference) */
    uint64_t max_target_tokens;    /* request_controls.max_target_tokens: a target directive's cap; 0 = none */
} vsr_plugin_context_compression_conf_t;

/* The request_controls directives of context_compression. */
enum { VSR_CC_CTL_BYPASS = 1u << 0, VSR_CC_CTL_TARGET = 1u << 1 };

/* response_cache (ref §2): lookup before the call, store after a complete,
 * successful answer.  Modes: exact (a hash of the request), semantic (the
 * last user message's embedding, threshold), exact_then_semantic. */
typedef enum { VSR_RC_SEMANTIC = 0, VSR_RC_EXACT, VSR_RC_EXACT_THEN_SEMANTIC } vsr_rc_mode_t;

/* Whose requests share entries: everyone's (global), one user's (a trusted
 * x-authz-user-id), or one API key's (the key the listener checked).  The
 * default is api_key on a listener with api_keys, else global. */
typedef enum { VSR_RC_SCOPE_GLOBAL = 0, VSR_RC_SCOPE_USER, VSR_RC_SCOPE_API_KEY } vsr_rc_scope_t;

typedef struct {
    int enabled;                   /* = the entry's enabled */
    int mode;                      /* vsr_rc_mode_t, default semantic */
    int scope;                     /* vsr_rc_scope_t; personalized: true = user */
    int has_scope;                 /* given (else: api_key where the listener has keys, else global) */
    double similarity_threshold;   /* semantic.similarity_threshold; default global.stores.response_cache's (0.8) */
    int has_similarity_threshold;
    uint64_t ttl_seconds;          /* default global.stores.response_cache.ttl_seconds (3600) */
    int has_ttl_seconds;
    int request_controls;          /* request_controls.enabled: x-vsr-cache-control is read */
    int allow_replace;             /* request_controls.allow_replace (vsr): a no-cache answer replaces a fresh entry */
    char *control_header;          /* request_controls.header: default x-vsr-cache-control */
    unsigned allowed;              /* request_controls.allowed: VSR_RC_CTL_* bits; 0 (absent) allows every directive */
    uint64_t max_ttl_seconds;      /* request_controls.max_ttl_seconds: a ttl directive's cap; 0 = none */
    /* revision keys: part of every key, so changing one retires what was stored under the old value */
    char *cache_epoch, *model_revision, *prompt_revision, *policy_revision;
} vsr_plugin_response_cache_conf_t;

/* The request_controls directives (request_controls.allowed). */
enum {
    VSR_RC_CTL_NO_CACHE = 1u << 0,
    VSR_RC_CTL_NO_STORE = 1u << 1,
    VSR_RC_CTL_BYPASS = 1u << 2,
    VSR_RC_CTL_MAX_AGE = 1u << 3,
    VSR_RC_CTL_TTL = 1u << 4,
};

/* response_jailbreak (ref §2): the answer scanned by the prompt guard (the
 * jailbreak signal's classifier).  action: header (default) adds the
 * warning code response_jailbreak to x-vsr-response-warnings, block answers
 * 403 instead, none only counts. */
typedef enum { VSR_RJ_HEADER = 0, VSR_RJ_BLOCK, VSR_RJ_NONE } vsr_rj_action_t;

typedef struct {
    int enabled;                   /* = the entry's enabled */
    double threshold;              /* default global.model_catalog.modules.prompt_guard.threshold */
    int has_threshold;
    int action;                    /* vsr_rj_action_t */
    int method;                    /* vsr_jb_method_t (a vsr extension), default classifier */
} vsr_plugin_response_jailbreak_conf_t;
/* router_replay (ref §2): a record of the request and its answer, kept in
 * global.services.router_replay's store and read through the management API. */
typedef struct {
    int enabled;                   /* = the entry's enabled */
    uint64_t max_records;          /* default 1000: the store keeps at most this many (oldest evicted) */
    int capture_request_body;      /* default true */
    int capture_response_body;     /* default true */
    uint64_t max_body_bytes;       /* default 65536: each body is cut there (`truncated`) */
    uint64_t max_tool_trace_bytes; /* default 16384: the tool calls recorded, in bytes of JSON */
    uint64_t max_tool_trace_steps; /* default 32: ... and in calls */
} vsr_plugin_router_replay_conf_t;

#define VSR_MEMORY_DEFAULT_MAX_PER_USER 200u /* memories kept per user when quality_scoring does not say */
#define VSR_MEMORY_MAX_PER_USER 500u         /* max_memories_per_user at most */
#define VSR_MEMORY_MAX_LIMIT 50u             /* retrieval_limit at most */

/* memory (ref §2.1): the reflection gate over retrieved memories.  Each
 * field is tri-state: a plugin's overrides global.stores.memory.reflection's,
 * which overrides the defaults in brackets. */
typedef struct {
    int enabled;                   int has_enabled;           /* [true] */
    int noop;                      int has_algorithm;         /* algorithm noop: no gate [heuristic] */
    uint64_t max_inject_tokens;    int has_max_inject_tokens; /* [2048] */
    uint64_t recency_decay_days;   int has_recency_decay_days; /* the half-life [30] */
    double dedup_threshold;        int has_dedup_threshold;   /* word Jaccard [0.90] */
    vsr_strlist_conf_t block_patterns; int has_block_patterns; /* POSIX extended regexes, case-insensitive */
} vsr_memory_reflection_conf_t;

/* memory (ref §2.1): per-user memories retrieved and injected before the
 * call, and the turn stored after the answer (docs/plugins.md). */
typedef struct {
    int enabled;                   /* = the entry's enabled */
    uint32_t retrieval_limit;      int has_retrieval_limit;   /* [global default_retrieval_limit, 5] */
    double similarity_threshold;   int has_similarity_threshold; /* [global default_similarity_threshold, 0.6] */
    int auto_store;                int has_auto_store;        /* [global auto_store] */
    int hybrid_search;             int has_hybrid_search;     /* [global hybrid_search] */
    int hybrid_rrf;                int has_hybrid_mode;       /* hybrid_mode rrf (1) | weighted (0) */
    vsr_memory_reflection_conf_t reflection;
} vsr_plugin_memory_conf_t;
/* hallucination (ref §2.3, cfg_hallucination.c): the answer checked against
 * the request's grounding context by the detector of
 * global.model_catalog.modules.hallucination_mitigation; what a finding does. */
typedef enum { VSR_HAL_HEADER = 0, VSR_HAL_BODY, VSR_HAL_NONE } vsr_hal_action_t;

typedef struct {
    int enabled;                   /* = the entry's enabled */
    int action;                    /* hallucination_action: vsr_hal_action_t, default header */
    int unverified_action;         /* unverified_factual_action: vsr_hal_action_t, default header */
    int include_details;           /* include_hallucination_details: the body warning names the spans */
} vsr_plugin_hallucination_conf_t;

/* shadow_dispatch (ref §3, cfg_hallucination.c): a copy of the request to
 * another model, its answer read and dropped. */
#define VSR_SHADOW_MAX_FORWARD 16
typedef struct {
    int enabled;                   /* = the entry's enabled */
    char *model;                   /* a providers.models[] name (required when enabled) */
    double sample_rate;            /* 0..1, default 1 */
    uint32_t max_concurrency;      /* default 2: copies in flight per worker; more are dropped (counted) */
    uint32_t max_queue_depth;      /* default 8: accepted; vsr queues nothing (a copy past the bound is dropped) */
    uint64_t timeout_ms;           /* timeout_seconds, default 30 s */
    uint64_t max_response_bytes;   /* default 1 MiB: a longer shadow answer fails the copy */
    vsr_strlist_conf_t forward_headers; /* client headers copied (never credentials) */
} vsr_plugin_shadow_dispatch_conf_t;

typedef struct {
    vsr_plugin_kind_t kind;
    char *type;                    /* the catalogue type, aliases normalised (semantic-cache -> response_cache) */
    int enabled;                   /* `configuration.enabled`, default true; disabled entries are kept but skipped */
    union {
        vsr_plugin_system_prompt_conf_t system_prompt;
        vsr_plugin_header_mutation_conf_t header_mutation;
        vsr_plugin_fast_response_conf_t fast_response;
        vsr_plugin_request_params_conf_t request_params;
        vsr_plugin_tools_conf_t tools;
        vsr_plugin_context_compression_conf_t context_compression;
        vsr_plugin_response_cache_conf_t response_cache;
        vsr_plugin_response_jailbreak_conf_t response_jailbreak;
        vsr_plugin_router_replay_conf_t router_replay;
        vsr_plugin_tool_selection_conf_t tool_selection;
        vsr_plugin_memory_conf_t memory;
        vsr_plugin_hallucination_conf_t hallucination;
        vsr_plugin_shadow_dispatch_conf_t shadow_dispatch;
        struct vsr_plugin_rag_conf_s *rag; /* rag: defined below (it holds its backends' model entries) */
    } u;
} vsr_plugin_conf_t;

/* routing.decisions[].emits[] of kind retention (ref §1.11): the decision's
 * retention directive.  Tri-state: only the fields the document sets are
 * reported (x-vsr-retention-*); vsr has no response cache or session-aware
 * selection yet, so the directive has no other effect. */
typedef struct {
    int present;
    int drop;                      int has_drop;
    uint64_t ttl_turns;            int has_ttl_turns;    /* >= 0; drop and ttl_turns > 0 exclude each other */
    int keep_current_model;        int has_keep_current_model;
    int prefer_prefix_retention;   int has_prefer_prefix_retention;
} vsr_retention_conf_t;

/* routing.decisions[].algorithm (ref §1.6, §3): the selector or Looper
 * algorithm of a decision.  `static` picks the first modelRef; the five
 * Looper kinds run a request graph (several model calls).  Every string
 * below is owned by the config; model names are validated (a provider model
 * or one of the decision's modelRefs). */
typedef enum {
    VSR_ALGO_STATIC = 0,
    VSR_ALGO_CONFIDENCE,
    VSR_ALGO_RATINGS,
    VSR_ALGO_REMOM,
    VSR_ALGO_FUSION,
    VSR_ALGO_WORKFLOWS,
    VSR_ALGO_GRAPH,                /* type: graph (a vsr extension): algorithm.graph */
    VSR_ALGO_LATENCY_AWARE,        /* single-call selectors (ref §3.8): pick one candidate */
    VSR_ALGO_MULTI_FACTOR,
    VSR_ALGO_ROUTER_DC,
    VSR_ALGO_PROMPT
} vsr_algo_kind_t;

/* algorithm.budget: every physical model exchange (retries included) counts
 * against max_calls (unset: what the algorithm's configuration implies);
 * deadline bounds the whole graph; max_upstream_bytes bounds the request
 * bytes all its hops send upstream together (unset: 64 MiB).  0 = unset. */
typedef struct {
    uint64_t max_calls;
    uint64_t deadline_ms;
    uint64_t max_upstream_bytes;
} vsr_algo_budget_conf_t;

/* algorithm.confidence (ref §3.3) */
typedef struct {
    char *method;                 /* confidence_method: avg_logprob (default) | margin | hybrid | self_verify |
                                   * automix_entailment */
    double threshold; int has_threshold; /* [0,1]; 0/omitted = the method's default (executor applies it) */
    char *escalation_order;       /* size (default; small_to_large normalised to size) | declared | cost | automix */
    double logprob_weight, margin_weight; /* hybrid_weights, default 0.5 / 0.5, each >= 0 */
    char *token_filter;           /* NULL | "tool_call_args" */
    int on_error_fail;            /* on_error: fail (default skip) */
    char *verifier_server_url;    /* automix_entailment's verifier (http(s) URL), NULL = none */
    uint64_t verifier_timeout_ms; /* verifier_timeout_seconds; 0 = unset */
    double cost_quality_tradeoff; /* default 0.3, in [0,1] */
} vsr_algo_confidence_conf_t;

/* algorithm.ratings (ref §3.4) */
typedef struct {
    uint64_t max_concurrent;      /* 0 = #modelRefs */
    int on_error_fail;            /* default skip */
} vsr_algo_ratings_conf_t;

/* algorithm.remom (ref §3.5) */
typedef struct {
    uint32_t *breadth_schedule; size_t n_breadth_schedule; /* default [4]; each >= 1 */
    char *model_distribution;     /* weighted (default) | equal | round_robin | first_only */
    char *synthesis_model;        /* NULL = the distribution's choice */
    char *synthesis_template;     /* NULL = built-in */
    char *compaction_strategy;    /* full (default) | last_n_tokens */
    uint64_t compaction_tokens;   /* default 1000 */
    int include_reasoning;        /* default false */
    double temperature;           /* default 1.0 */
    uint64_t max_completion_tokens, max_concurrent, round_timeout_ms, min_successful_responses,
             max_responses_per_round; /* 0 = unset */
    uint64_t shuffle_seed;        /* default 42 */
    int on_error_fail;            /* default skip */
    int include_intermediate_responses; /* default true */
} vsr_algo_remom_conf_t;

/* algorithm.fusion.analysis_overrides[] */
typedef struct {
    char *model;                  /* required: a panel model */
    double temperature; int has_temperature;
    uint64_t max_completion_tokens; /* 0 = unset */
} vsr_algo_fusion_override_conf_t;

/* algorithm.fusion (ref §3.6) */
typedef struct {
    vsr_strlist_conf_t analysis_models; /* empty = every modelRef */
    char *model;                  /* judge; NULL = the first analysis model */
    vsr_algo_fusion_override_conf_t *analysis_overrides; size_t n_analysis_overrides;
    uint64_t max_concurrent, round_timeout_ms, max_completion_tokens; /* 0 = unset */
    double temperature; int has_temperature;
    uint64_t min_successful_responses; /* 0 = panel size; at load, a value above the panel size is capped to it */
    int quorum_fallback;          /* quorum_failure_policy: fallback (default fail) */
    char *quorum_fallback_target; /* required with fallback: a provider model */
    char *analysis_mode;          /* separate (default) | one_call | none */
    char *analysis_template, *synthesis_template; /* NULL = built-in */
    char *judge_prompt_version;   /* default "fusion-v1" */
    int include_analysis, include_intermediate_responses; /* default false */
    int on_error_fail;            /* default skip */
    int grounding_enabled;        /* grounding.enabled: recorded as not implemented when true */
} vsr_algo_fusion_conf_t;

/* algorithm.workflows.roles[] (static mode) */
#define VSR_FLOW_ROLE_MAX_MODELS 16u  /* a role's models */
#define VSR_FLOW_MAX_CALLS 64u        /* the role calls of one round of a flow, every role's models counted */
typedef struct {
    char *name;                   /* required, unique in the decision */
    char *model;                  /* NULL = the decision's first modelRef */
    vsr_strlist_conf_t models;    /* the reference's form: each model answers the role (a fan-out); with
                                   * model, not both; at most VSR_FLOW_ROLE_MAX_MODELS */
    char *prompt;                 /* required: the role's instructions */
    vsr_strlist_conf_t access_list; /* names of earlier roles whose outputs this role sees; empty = none */
} vsr_algo_flow_step_conf_t;

/* algorithm.workflows (ref §3.7) */
typedef struct {
    int dynamic;                  /* mode: dynamic (default static) */
    char *template_name;          /* `template`, default micro_agent */
    char *planner_model; uint64_t planner_max_completion_tokens; /* planner{model (NULL = first modelRef),
                                                                  * max_completion_tokens (2048)} */
    uint64_t max_steps;           /* 3 */
    uint64_t max_parallel;        /* 2 */
    uint64_t max_completion_tokens, round_timeout_ms, min_successful_responses; /* 0 = unset */
    double temperature; int has_temperature;
    int include_intermediate_responses; /* true */
    int on_error_fail;            /* default fail */
    vsr_algo_flow_step_conf_t *roles; size_t n_roles; /* static mode: roles[] (name, model(s), prompt, access_list) */
    char *final_model; char *final_prompt;            /* final{model, prompt}; NULL = first modelRef / built-in */
} vsr_algo_workflows_conf_t;

/* algorithm.graph (type: graph, a vsr extension): a request graph written in
 * YAML (docs/graphs.md).  A node is a one-key mapping naming its kind, or a
 * list (a seq).
 *
 * A loaded graph holds: nodes nested at most VSR_GRAPH_MAX_DEPTH deep and at
 * most VSR_GRAPH_MAX_NODES nodes, both counted from the root with every
 * subgraph node followed to its `resolved` node (a subgraph counts at each
 * use); `resolved` set on every subgraph node; no subgraph reaching itself;
 * at least one call or parallel reachable from the root. */
#define VSR_GRAPH_MAX_DEPTH 16u
#define VSR_GRAPH_MAX_NODES 256u
#define VSR_GRAPH_MAX_FANOUT 64u        /* models of a call or parallel; a parallel's calls */
#define VSR_GRAPH_MAX_ROUNDS 100u       /* loop.max_rounds */
typedef enum {
    VSR_GNODE_SEQ = 1, VSR_GNODE_CALL, VSR_GNODE_PARALLEL, VSR_GNODE_LOOP, VSR_GNODE_BRANCH, VSR_GNODE_TRANSFORM,
    VSR_GNODE_RESPOND, VSR_GNODE_SUBGRAPH,
} vsr_gnode_kind_t;

/* loop.until and branch.if */
typedef enum {
    VSR_GPRED_NONE = 0,
    VSR_GPRED_SUCCEEDED,           /* {succeeded: true}: the latest call or parallel had a success */
    VSR_GPRED_CONFIDENCE_GTE,      /* {confidence_gte: X}: the latest answer's avg_logprob confidence >= X */
    VSR_GPRED_AGREE,               /* {answers_agree: true}: the latest parallel's answers are all the same */
    VSR_GPRED_SIGNAL,              /* {signal: {type: T, name: N}}: that signal of the request matched */
    VSR_GPRED_ROUNDS_GTE,          /* {rounds_gte: N}: the enclosing loop has run N rounds */
} vsr_gpred_kind_t;

typedef struct {
    vsr_gpred_kind_t kind;
    int negate;                    /* the value was false ({succeeded: false}) */
    double value;
    char *signal_type, *signal_name;
} vsr_gpred_conf_t;

typedef struct vsr_gnode_conf_s vsr_gnode_conf_t;
struct vsr_gnode_conf_s {
    vsr_gnode_kind_t kind;
    char *name;                    /* `name:` of the node (evidence, metrics), or its kind */
    vsr_gnode_conf_t *kids; size_t n_kids; /* seq: in order; loop: kids[0] = body; branch: kids[0] then, kids[1] else */
    /* call, parallel: the models (a call tries them in order, the next when one fails: fallback inside the hop;
     * a parallel calls each, `count` times in turn when count > models.n) */
    vsr_strlist_conf_t models;     /* provider models or the decision's modelRefs; empty = the decision's modelRefs */
    uint64_t count;                /* parallel: calls (0 = one per model) */
    double temperature; int has_temperature;
    uint64_t max_completion_tokens;
    uint64_t timeout_ms;           /* `timeout`: the hop's own (0 = global.integrations.looper.timeout) */
    int logprobs; uint32_t top_logprobs;
    int strip_tools;
    int stream;                    /* call: the final hop, streamed when the client streams */
    /* parallel */
    uint64_t max_concurrency, first_k, min_success;
    int on_error_fail;             /* on_error: fail (default skip) */
    /* loop */
    uint64_t max_rounds;           /* required, 1..100 */
    vsr_gpred_conf_t until;        /* loop.until / branch.if */
    /* transform: any of */
    char *system_prompt;           /* replaces (or adds) the leading system message */
    char *prompt;                  /* replaces the latest user message; {question}, {responses} */
    char *append;                  /* appends a user message; {question}, {responses} */
    /* respond */
    char *aggregate;               /* last (default) | first | vote | concat | choices | longest */
    /* subgraph */
    char *subgraph;
    const vsr_gnode_conf_t *resolved; /* the subgraph's node (after validation) */
    uint32_t line, col;
};

typedef struct {
    char *name;
    vsr_gnode_conf_t node;
} vsr_gsub_conf_t;

typedef struct {
    vsr_gnode_conf_t root;         /* algorithm.graph.root */
    vsr_gsub_conf_t *subgraphs; size_t n_subgraphs; /* algorithm.graph.subgraphs: {name: node} */
} vsr_graph_conf_t;

/* algorithm.latency_aware (ref §3.8): the lowest TPOT / TTFT percentile
 * among the candidates, from live statistics.  0 = unset; both unset: the
 * first candidate (the reference's rule). */
typedef struct {
    uint32_t tpot_percentile, ttft_percentile; /* 1..100 */
    char *description;
} vsr_algo_latency_conf_t;

/* algorithm.multi_factor.objective.priorities[] */
typedef struct {
    char *factor;                  /* quality | latency | cost | load */
    double tolerance;              /* [0,1] of the factor's normalised score, default 0 */
} vsr_algo_priority_conf_t;

/* algorithm.multi_factor (ref §3.8): weighted quality/latency/cost/load over
 * the candidates that pass the SLO ceilings.  Weights are normalised at load
 * (all unset or all 0: 0.25 each). */
typedef struct {
    double w_quality, w_latency, w_cost, w_load;
    double max_ttft_ms, max_tpot_ms, max_cost_per_1m; /* 0 = no ceiling */
    uint64_t max_inflight;                             /* 0 = no ceiling */
    uint32_t latency_percentile;   /* default 95 */
    char *on_no_candidates;        /* cheapest (default) | first | fail */
    char *strategy;                /* objective.strategy: weighted (default) | lexicographic */
    vsr_algo_priority_conf_t *priorities; size_t n_priorities;
    char *quality_index;           /* quality.index: model_cards (default: modelCards[].quality_score) */
    double min_score; int has_min_score; /* quality.min_score: a candidate below it is dropped */
    double min_coverage;           /* quality.min_coverage: share of candidates with a score for the
                                    * quality factor to count (default 0) */
    char *on_missing;              /* quality.on_missing: zero (default: the reference's 0) | neutral (0.5) | exclude */
} vsr_algo_multi_factor_conf_t;

/* algorithm.router_dc (ref §3.8): the query's embedding against each
 * candidate's modelCards description (and capabilities). */
typedef struct {
    double temperature;            /* default 0.07, > 0 */
    double min_similarity;         /* default 0.3: a best score below it takes the first candidate */
    uint32_t dimension_size;       /* default 768; read, the runtime's embedding model decides */
    int use_query_contrastive, use_model_contrastive; /* default 1; read, as by the reference, not used */
    int require_descriptions;      /* 1: every candidate needs a description or capabilities */
    int use_capabilities;          /* default 1: "Capabilities: a, b" joins the description text */
} vsr_algo_router_dc_conf_t;

/* algorithm.prompt (ref §3.8): a model picks one candidate from their
 * modelCards descriptions. */
typedef struct {
    char *model;                   /* required: the provider model asked */
    char *instructions;            /* required: the system prompt's opening */
    uint32_t timeout_seconds;      /* 0: the reference's 5 */
} vsr_algo_prompt_conf_t;

typedef struct {
    vsr_algo_kind_t kind;
    uint32_t minimum_candidates;  /* a selector ranks only when at least this many candidates have live
                                   * statistics (0 = 1); fewer: the first candidate, with a warning */
    char *on_error;               /* algorithm.on_error: NULL | skip | fail | fallback; for a Looper kind the
                                   * default of its block's on_error when the block does not set one */
    vsr_algo_budget_conf_t budget;
    union {
        vsr_algo_confidence_conf_t confidence;
        vsr_algo_ratings_conf_t ratings;
        vsr_algo_remom_conf_t remom;
        vsr_algo_fusion_conf_t fusion;
        vsr_algo_workflows_conf_t workflows;
        vsr_graph_conf_t graph;
        vsr_algo_latency_conf_t latency_aware;
        vsr_algo_multi_factor_conf_t multi_factor;
        vsr_algo_router_dc_conf_t router_dc;
        vsr_algo_prompt_conf_t prompt;
    } u;
} vsr_algo_conf_t;

/* decisions[].candidateIterations[] */
typedef struct {
    char *variable;
    int source_models;             /* source: models (1) | decision.candidates (0); -1 while invalid */
    vsr_model_ref_conf_t *models; size_t n_models;
    int emits_model;               /* an output {type: model, value: <variable>} */
} vsr_candidate_iteration_conf_t;

typedef struct {
    char *name;                    /* unique per recipe */
    char *description;
    int64_t priority;              /* default 0 */
    int64_t tier;                  /* default 0 */
    vsr_rule_conf_t *rules;        /* NULL = always matches with confidence 0 */
    vsr_model_ref_conf_t *model_refs; size_t n_model_refs;
    char *algorithm;               /* the type name ("static", "confidence", ...) or NULL; the other catalogue
                                    * types: not supported yet */
    vsr_algo_conf_t algo;          /* the decoded algorithm (kind static when absent) */
    vsr_plugin_conf_t *plugins; size_t n_plugins;
    vsr_reliability_conf_t reliability; int has_reliability;
    vsr_fallback_conf_t fallback;
    vsr_retention_conf_t retention; /* emits: [{kind: retention, retention: {...}}] */
    /* candidateIterations (the reference's FOR ... IN metadata): checked as the reference checks them; an
     * iteration over `models` whose output is its variable adds those models to model_refs (cfg_decision.c) */
    vsr_candidate_iteration_conf_t *candidate_iterations; size_t n_candidate_iterations;
    char *action_destination;      /* action {type: route, destination}: the model the decision routes to */
} vsr_decision_conf_t;

typedef struct {
    char *name;
    char *description;
    char *param_size;
    double param_size_value; int has_param_size_value; /* param_size read at load (vsr_config_param_size), when it reads */
    double quality_score; int has_quality_score; /* quality_score, in [0,1] (escalation by automix) */
    uint64_t context_window_size;  /* tokens; 0 = unknown (context_compression's auto budget) */
    vsr_strlist_conf_t loras;      /* loras[].name: LoRA adapters served by the model of the same name */
    vsr_strlist_conf_t capabilities; /* the router_dc selector reads them with the description */
} vsr_model_card_conf_t;

/* A recipe: the top-level `routing` block is the recipe named "default". */
typedef struct {
    char *name;
    char *description;
    int strategy_confidence;       /* strategy: confidence (1) | priority (0, default); recipes inherit routing.strategy unless set */
    int has_strategy;              /* the recipe's own routing block set strategy (else it is inherited) */
    vsr_signals_conf_t signals;
    vsr_projections_conf_t projections;
    vsr_decision_conf_t *decisions; size_t n_decisions;
    vsr_fallback_conf_t fallback;
    char signals_hash[VSR_CONFIG_HASH_LEN]; /* content hash of the recipe's `signals` block (canonical form):
                                             * equal hashes compile to the same signals, so a new version
                                             * reuses them */
} vsr_recipe_conf_t;

typedef struct {
    vsr_strlist_conf_t model_names;
    char *recipe;                  /* a recipe name, or "default" */
    const vsr_recipe_conf_t *resolved;
} vsr_entrypoint_conf_t;

/* A global.services.ratelimit local-limiter rule.  match fields: NULL =
 * any request; "*" = any value, one bucket per value; else that value. */
typedef struct {
    char *name;                 /* unique among the rules */
    char *match_user, *match_group, *match_model;
    uint64_t requests_per_unit; /* 0 = no request limit */
    uint64_t tokens_per_unit;   /* prompt + completion tokens; 0 = no token limit */
    uint32_t unit_s;            /* second, minute, hour, day: the window, in seconds */
    int shared;                 /* its provider has `redis`: the buckets live there, shared by replicas */
} vsr_ratelimit_rule_conf_t;

/* An api_keys entry with identity (docs/tenancy.md).  Only the key's
 * SHA-256 is kept: the secret itself never stays in the snapshot. */
typedef struct {
    char *name;                /* a label for logs; NULL = none */
    char *user;                /* the authenticated user the key stands for; NULL = none */
    char *groups;              /* its groups, comma-separated as x-authz-user-groups carries them; NULL = none */
    unsigned char sha256[32];  /* SHA-256 of the key */
    int64_t expires;           /* Unix seconds after which the key is refused; 0 = never */
} vsr_api_key_conf_t;

typedef struct {
    char *name;               /* required, unique */
    char *address;            /* default "0.0.0.0" */
    uint16_t port;            /* required, 1..65535 */
    uint64_t timeout_ms;      /* `timeout`, default 300s: client idle + upstream budget */
    uint64_t max_body_bytes;  /* vsr extension `max_request_body_bytes`, default 32 MiB */
    uint32_t max_connections; /* vsr extension `max_connections`, default 50,000 */
    uint32_t max_header_bytes; /* vsr extension `max_header_bytes`: request head size (→ 431), default 64 KiB */
    uint32_t max_headers;     /* vsr extension `max_headers`: request header fields (→ 431), default 100 */
    uint64_t header_timeout_ms; /* vsr extension `header_timeout`: a request head's deadline (→ 408), default 10s */
    uint64_t body_timeout_ms;   /* vsr extension `body_timeout`: a request body's deadline (→ 408), default 60s */
    vsr_strlist_conf_t api_keys;       /* the list-of-strings form; both empty = no authentication */
    vsr_api_key_conf_t *key_entries;   /* api_keys entries with identity ({key | key_env | key_sha256, ...}) */
    size_t n_key_entries;
    vsr_strlist_conf_t models;         /* allow-list of request `model` values; empty = any */
    char *tls_cert_file;               /* tls.cert_file; NULL = plain HTTP */
    char *tls_key_file;                /* tls.key_file */
    int identity_trust_headers;        /* identity.trust_headers, default false */
    vsr_strlist_conf_t identity_trusted_peers; /* identity.trusted_peers: CIDRs, validated */
} vsr_listener_conf_t;

typedef struct {
    char *name;          /* endpoint name; unnamed refs become "primary" (first) or "backend-N" */
    char *host;          /* from `endpoint` (host[:port]) or `base_url` */
    uint16_t port;       /* default 80, or 443 for https */
    int tls;             /* protocol https / base_url scheme https */
    int h2;              /* protocol h2 (a vsr extension): HTTP/2; cleartext with prior knowledge, or over
                          * TLS (an https base_url) offered by ALPN "h2,http/1.1" */
    char *authority;     /* Host header value sent upstream: host, or host:port when port is not the default */
    int has_base_url;    /* the ref was given as base_url (then path_prefix replaces "/v1") */
    char *path_prefix;   /* from base_url's path, "" when none; replaces the leading "/v1" */
    uint32_t weight;     /* default 1, >= 1 */
    char *type;          /* e.g. "chat" */
    char *provider;      /* vllm, openai, anthropic, ... */
    char *auth_header;   /* NULL = "Authorization" when a key is set */
    char *auth_prefix;   int has_auth_prefix; /* present-aware: explicit "" means none; default "Bearer" */
    char *api_key;       /* literal key */
    char *api_key_env;   /* environment variable holding the key, read at load (missing var = error) */
    char *resolved_api_key; /* api_key, or the value of api_key_env; NULL when none */
    vsr_kv_conf_t *extra_headers; size_t n_extra_headers;
    char *api_version;
    char *chat_path;
} vsr_backend_conf_t;

typedef struct {
    char *name;                /* logical name, required, unique */
    char *provider_model_id;   /* sent upstream as `model`; defaults to name */
    vsr_backend_conf_t *backends;
    size_t n_backends;         /* 0: no backend_refs (a gateway-routed model): requests routed to it get 503 */
    char *api_format;          /* "openai" (default) or "anthropic" (Messages: the request and its answer are translated) */
    unsigned messages_api : 1; /* api_format "anthropic", compiled at load: what a request reads, never the string */
    vsr_reliability_conf_t reliability; int has_reliability;
    /* pricing (ref §1.4): per million tokens; escalation by cost/automix reads prompt_per_1m */
    int has_pricing;
    char *pricing_currency;            /* NULL = unset */
    double prompt_per_1m, completion_per_1m, cached_input_per_1m, cache_write_per_1m; /* >= 0 */
    int has_prompt_per_1m, has_completion_per_1m, has_cached_input_per_1m, has_cache_write_per_1m;
} vsr_model_conf_t;

/* One global.model_catalog.external[] entry (ref §1.9). */
#define VSR_EXTERNAL_DEFAULT_TIMEOUT_MS 5000
#define VSR_EXTERNAL_DEFAULT_MAX_REQUEST ((uint64_t)128 << 10)
#define VSR_EXTERNAL_DEFAULT_MAX_RESPONSE ((uint64_t)1 << 20)
typedef struct {
    char *name;                /* required, unique */
    char *role;                /* model_role: guardrail | classification | scoring | ... */
    char *model_name;          /* llm_model_name, NULL when unset */
    char *address;             /* llm_endpoint.address */
    uint32_t port;             /* llm_endpoint.port */
    char *protocol;            /* llm_endpoint.protocol: http | https */
    char *access_key;          /* sent as a bearer token */
    uint64_t timeout_ms;       /* llm_timeout_seconds; default 5 s */
    uint64_t max_request_bytes, max_response_bytes;
    vsr_backend_conf_t backend;
    vsr_model_conf_t model;    /* name, provider_model_id = model_name, backends = &backend */
} vsr_external_conf_t;

/* One retrieval backend of the rag plugin (ref §2.2, docs/plugins.md "rag"):
 * an HTTP endpoint called through the upstream layer as a model of one
 * backend (its pool, deadline and response bound). */
typedef enum { VSR_RAG_EXTERNAL_API = 1, VSR_RAG_MCP, VSR_RAG_OPENAI } vsr_rag_backend_kind_t;
typedef enum { VSR_RAG_FMT_PINECONE = 0, VSR_RAG_FMT_WEAVIATE, VSR_RAG_FMT_ELASTICSEARCH, VSR_RAG_FMT_CUSTOM } vsr_rag_format_t;
#define VSR_RAG_DEFAULT_MAX_RESPONSE ((uint64_t)4 << 20) /* external_api's max_response_bytes default */
#define VSR_RAG_DEFAULT_TIMEOUT_MS 30000                 /* the reference's HTTP client timeout */
#define VSR_RAG_MCP_DEFAULT_TIMEOUT_MS 10000
typedef struct {
    int kind;                      /* vsr_rag_backend_kind_t */
    int format;                    /* external_api: request_format (vsr_rag_format_t) */
    char *endpoint;                /* external_api / mcp: the URL as written; openai: base_url */
    char *path;                    /* the request path on the endpoint ("/" when none) */
    char *request_template;        /* external_api custom */
    char *server_name, *tool_name; /* mcp */
    char *tool_arguments;          /* mcp: the arguments object as JSON text, placeholders unexpanded */
    char *vector_store_id;         /* openai */
    uint32_t max_num_results;      /* openai: default 20 */
    char *filter;                  /* openai: the filters object as JSON text, NULL = none */
    uint64_t timeout_ms;
    uint64_t max_response_bytes;
    vsr_kv_conf_t *headers; size_t n_headers; /* external_api headers (the backend's extra_headers) */
    vsr_backend_conf_t backend;
    vsr_model_conf_t model;        /* name "rag:<decision>", backends = &backend */
} vsr_rag_backend_conf_t;

typedef enum { VSR_RAG_TOOL_ROLE = 0, VSR_RAG_SYSTEM_PROMPT } vsr_rag_injection_t;
typedef enum { VSR_RAG_SKIP = 0, VSR_RAG_WARN, VSR_RAG_BLOCK } vsr_rag_on_failure_t;

typedef struct vsr_plugin_rag_conf_s {
    int enabled;                   /* = the entry's enabled */
    const char *backend_name;      /* the backend as written: external_api | mcp | openai | hybrid */
    vsr_rag_backend_conf_t primary;
    vsr_rag_backend_conf_t fallback; int has_fallback; /* hybrid */
    int hybrid, parallel;          /* hybrid: strategy sequential (0, default) | parallel (1) */
    double similarity_threshold;   /* default 0.7 */
    uint32_t top_k;                /* default 5 */
    uint64_t max_context_length;   /* runes, default 10000 */
    int injection_mode;            /* vsr_rag_injection_t */
    int on_failure;                /* vsr_rag_on_failure_t */
    int cache_results;
    uint64_t cache_ttl_ms;         /* cache_ttl_seconds; default 3600 s */
    double min_confidence_threshold; int has_min_confidence;
    char scope[VSR_CONFIG_HASH_LEN]; /* the result cache's key prefix: a hash of the backends' settings */
} vsr_plugin_rag_conf_t;

/* 1 when a backend of r searches by the query's embedding (external_api pinecone or weaviate). */
static inline int vsr_rag_conf_embeds(const vsr_plugin_rag_conf_t *r)
{
    const vsr_rag_backend_conf_t *b[2] = {&r->primary, r->has_fallback ? &r->fallback : NULL};
    for (int i = 0; i < 2; i++)
        if (b[i] && b[i]->kind == VSR_RAG_EXTERNAL_API &&
            (b[i]->format == VSR_RAG_FMT_PINECONE || b[i]->format == VSR_RAG_FMT_WEAVIATE))
            return 1;
    return 0;
}

/* global.integrations.looper (ref §1.13, §3.1): standalone runs the graphs in
 * process, so endpoint, retry_count, headers and grpc_max_msg_size_mb are
 * accepted and unused; timeout and max_response_bytes are in force. */
typedef struct {
    char *endpoint;                    /* unused in standalone */
    uint64_t timeout_ms;               /* timeout_seconds, default 120 s: a hop's timeout when its model
                                        * sets none */
    uint32_t retry_count;              /* unused in standalone */
    vsr_kv_conf_t *headers; size_t n_headers; /* unused in standalone */
    uint64_t max_response_bytes;       /* max_response_bytes_mb, default 32 MiB: a buffered hop's response cap */
    uint64_t grpc_max_msg_size_mb;     /* default 16; unused in standalone */
    vsr_strlist_conf_t remom_model_names, fusion_model_names, flow_model_names; /* {remom,fusion,flow}.model_names */
    char *flow_state_store_backend;    /* flow.state.store_backend: file | redis, NULL = unset (recorded) */
    uint64_t flow_state_ttl_ms;        /* flow.state.ttl_seconds, 0 = unset */
} vsr_looper_integration_conf_t;

#define VSR_LOOPER_DEFAULT_TIMEOUT_MS (120u * 1000u)
#define VSR_LOOPER_DEFAULT_MAX_RESPONSE_BYTES (32ull * 1024 * 1024)

/* global.model_catalog.modules.hallucination_mitigation (ref §2.3): the
 * detector the hallucination plugin calls.  backend endpoint: an
 * OpenAI-compatible chat completions server (its URL, model_id) carried by
 * the upstream layer as a model of one backend; candle (the reference's
 * local token classifier) is a model vsr does not have: checks then fail open. */
#define VSR_HAL_DEFAULT_TIMEOUT_MS 10000u
#define VSR_HAL_MAX_RESPONSE ((uint64_t)1 << 20)
#define VSR_HAL_DETECTOR_NAME "hallucination_mitigation.detector" /* its global.model_catalog.external[] entry */
typedef struct {
    int enabled;                   /* enabled (default false) */
    int endpoint;                  /* detector.backend: endpoint (1) | candle (0, default) */
    char *url;                     /* detector.endpoint: http(s)://host[:port][/prefix]; POST {url}/chat/completions */
    char *model_id;                /* detector.model_id (required with backend endpoint) */
    int include_explanation;       /* detector.include_explanation */
    vsr_backend_conf_t backend;    /* from url */
    vsr_model_conf_t model;        /* as loaded; the one the router calls is the external[] entry
                                    * VSR_HAL_DETECTOR_NAME (vsr_config_find_external) */
} vsr_hallucination_module_conf_t;

typedef struct {
    char *path;            /* the file it was read from (a string's: the name given, else "<string>") */
    char *version;         /* "v0.3" */
    vsr_listener_conf_t *listeners;
    size_t n_listeners;    /* >= 1: without `listeners` (absent or []), the default listener */
    int listeners_defaulted; /* ... "http-8899" on 0.0.0.0:8899 was supplied (a warning says so at load) */
    char *default_model;   /* providers.defaults.model (alias default_model); NULL when absent.  Written as a
                            * LoRA of a model card, it is stored as the card's provider model ... */
    char *default_lora;    /* ... with the LoRA here (sent upstream as the model id); else NULL */
    vsr_model_conf_t *models;
    size_t n_models;
    /* global.model_catalog.external[]: models the router calls for itself (remote classifiers), never
     * routed to; each is a model of one backend for the upstream layer, after the provider models */
    vsr_external_conf_t *externals;
    size_t n_externals;
    /* endpoints plugins call for themselves (the rag plugin's backends): models of one backend each, after
     * the external models in the upstream layer; they point into the plugins' configurations */
    const vsr_model_conf_t **plugin_models;
    size_t n_plugin_models;

    /* routing: recipes[0] is "default" (the top-level `routing` block, present
     * even when the block is absent), then recipes[] in document order. */
    vsr_recipe_conf_t *recipes;
    size_t n_recipes;
    vsr_model_card_conf_t *model_cards; size_t n_model_cards;
    vsr_entrypoint_conf_t *entrypoints; size_t n_entrypoints;

    /* global.router */
    vsr_strlist_conf_t auto_model_names; /* effective list: default ["vllm-sr/auto","auto", auto_model_name ("MoM")];
                                          * an explicit auto_model_names replaces it; names trimmed */
    int include_config_models_in_list;   /* default false */
    int clear_route_cache;               /* default true */
    int config_source_kubernetes;        /* config_source: kubernetes (default file) */
    int skip_processing_enabled;         /* skip_processing.enabled, default false */
    vsr_fallback_conf_t global_fallback;
    /* global.services */
    char *management_address;            /* management_api.bind_address, default 127.0.0.1 */
    uint16_t management_port;            /* management_api.port, default 8080 */
    int management_enabled;              /* management_api.enabled; default true when the management_api
                                          * block is present, false when it is absent */
    uint64_t management_max_document_bytes; /* management_api.max_document_bytes (vsr), default
                                          * VSR_CONFIG_DEFAULT_MAX_DOCUMENT_BYTES */
    char *management_token_file;         /* management_api.token_file (vsr): the bearer token's file, NULL = none */
    char *management_token_env;          /* management_api.token_env (vsr): ... or its environment variable */
    /* management_api.auth (docs/security.md#management-api-roles): mode bearer (1) or disabled (0, default);
     * each token read from an environment variable at start and bound to a role; the roles' permissions
     * (absent: the built-in viewer, operator and admin) */
    int management_auth_bearer;
    vsr_management_token_conf_t *management_auth_tokens;
    size_t n_management_auth_tokens;
    vsr_management_role_conf_t *management_auth_roles;
    size_t n_management_auth_roles;
    int response_api_enabled;            /* services.response_api.enabled, default false */
    /* services.response_api: where stored Response objects live (store_backend memory | redis) */
    struct {
        int redis;
        uint64_t ttl_seconds;            /* default 86400 */
        uint64_t max_responses;          /* default 1000 (memory entries; redis index rows) */
        char *redis_address, *redis_password, *redis_key_prefix; /* defaults 127.0.0.1:6379, none, "vsr:resp:" */
        uint64_t redis_db, redis_timeout_ms;
        int redis_cluster;               /* redis.cluster_mode: Redis Cluster via redis_cluster_addresses */
        vsr_strlist_conf_t redis_cluster_addresses; /* redis.cluster_addresses: "host:port" of some nodes */
    } resp_store;
    /* services.router_replay: where router_replay plugins' records go (store_backend memory | redis | postgres) */
    struct {
        int enabled;                     /* default true: false turns every router_replay plugin off */
        int redis;
        int postgres;                    /* store_backend: postgres (redis is then 0) */
        uint64_t ttl_seconds;            /* default 86400 */
        int async_writes;                /* default true; writes never wait in any case (docs/configuration.md) */
        char *redis_address, *redis_password, *redis_key_prefix; /* defaults 127.0.0.1:6379, none, "vsr:replay:" */
        uint64_t redis_db, redis_timeout_ms; /* 0, 250 ms */
        int redis_cluster;
        vsr_strlist_conf_t redis_cluster_addresses;
        /* router_replay.postgres: the reference's fields and defaults (database and user required) */
        char *pg_host, *pg_database, *pg_user, *pg_password, *pg_ssl_mode, *pg_table_name; /* localhost, -, -,
                                          * none, "disable", "router_replay_records" */
        uint64_t pg_port, pg_conn_max_lifetime; /* 5432; 300 (seconds, 0 = never) */
    } replay_store;
    /* global.stores.response_cache: where response_cache plugins keep answers */
#define VSR_RC_DEFAULT_THRESHOLD 0.8 /* a response_cache plugin's semantic.similarity_threshold when unset */
    struct {
        int enabled;                     /* default true: false turns every response_cache plugin off */
        int redis;                       /* backend_type: memory (0, default) | redis / valkey (1) */
        double similarity_threshold;     /* default 0.5; a plugin's own threshold defaults to 0.8 */
        uint64_t max_entries;            /* default 1000 */
        uint64_t ttl_seconds;            /* default 3600 */
        uint64_t max_bytes;              /* memory backend: default 64 MiB (a vsr key) */
        int eviction;                    /* eviction_policy: 0 lru, 1 lfu, 2 fifo (vsr_store_eviction_t's order) */
        int has_eviction;                /* set in the document; unset: memory fifo (the reference's default),
                                          * redis lru (the server's maxmemory-policy) */
        char *redis_address;             /* redis.address, "host:port" or "unix:/path"; default 127.0.0.1:6379 */
        char *redis_password;
        uint64_t redis_db;
        char *redis_key_prefix;          /* default "vsr:rc:" */
        uint64_t redis_timeout_ms;       /* redis.timeout: per command, default 250ms */
        int redis_cluster;
        vsr_strlist_conf_t redis_cluster_addresses;
    } rc_store;
    /* global.stores.memory: where memory plugins keep each user's memories
     * (backend memory, the default in vsr, or valkey / redis); 0 = the
     * default in brackets */
    struct {
        int enabled;                     /* [false]; a memory plugin's enabled overrides it */
        int redis;                       /* backend valkey | redis (1); memory (0) */
        int auto_store;                  /* [false] */
        vsr_strlist_conf_t disabled_routes, disabled_models; /* exact :path / request model */
        uint64_t default_retrieval_limit;  /* [5] */
        double default_similarity_threshold; int has_default_similarity_threshold; /* [0.6] */
        int hybrid_search, hybrid_rrf;
        uint64_t max_memories_per_user;  /* quality_scoring.max_memories_per_user [VSR_MEMORY_DEFAULT_MAX_PER_USER] */
        uint64_t initial_strength_days;  /* quality_scoring.initial_strength_days [30] */
        double prune_threshold;          /* quality_scoring.prune_threshold: weaker memories go on a write [0] */
        vsr_memory_reflection_conf_t reflection;
        char *redis_host;                /* valkey.host [localhost] */
        uint64_t redis_port, redis_db;   /* valkey.port [6379], valkey.database [0] */
        char *redis_password;
        char *redis_key_prefix;          /* valkey.collection_prefix [mem:] */
        uint64_t redis_timeout_ms;       /* valkey.timeout (seconds in the document) [250 ms] */
    } mem_store;
    char *authz_user_id_header;          /* default x-authz-user-id */
    char *authz_user_groups_header;      /* default x-authz-user-groups */
    int authz_fail_open;
    /* services.ratelimit (docs/tenancy.md): the local limiter's rules */
    int ratelimit_fail_open;
    vsr_ratelimit_rule_conf_t *ratelimit_rules; /* every local-limiter provider's rules, in document order */
    size_t n_ratelimit_rules;
    char *ratelimit_redis_host, *ratelimit_redis_port; /* providers[].redis.address (vsr extension); NULL = none */
    uint64_t ratelimit_redis_timeout_ms;               /* providers[].redis.timeout: a check's bound, default 50ms */
    /* an envoy-ratelimit provider: Envoy's rate limit service (gRPC ShouldRateLimit); host NULL = none */
    char *ratelimit_envoy_host;
    uint16_t ratelimit_envoy_port;
    char *ratelimit_envoy_domain;
    uint64_t ratelimit_envoy_timeout_ms;               /* providers[].timeout (vsr extension), default 100ms */
    /* services.observability.tracing */
    int tracing_enabled;                 /* enabled, default false */
    char *tracing_endpoint;              /* exporter.endpoint: http://host[:port][/path] (OTLP/HTTP JSON), or
                                          * with tracing_grpc [scheme://]host[:port] */
    int tracing_grpc;                    /* export OTLP/gRPC: type otlp-grpc, a grpc(s):// or bare host:port endpoint */
    int tracing_grpc_tls;                /* OTLP/gRPC over TLS: https:// or grpcs://, or insecure: false */
    double tracing_sampling_ratio;       /* new roots: always_on 1, always_off 0, probabilistic: rate (default 1) */
    char *tracing_service_name;          /* resource.service_name, default "vllm-sr" */
    char *tracing_service_version;       /* resource.service_version, NULL = none */
    char *tracing_environment;           /* resource.deployment_environment, NULL = none */
    /* global.model_catalog.runtime (vsr): the model runtime the router calls.  Read at start only. */
    char *runtime_endpoint;              /* endpoint: "unix:///PATH" or "http://IP:PORT" of a runtime run
                                          * elsewhere; NULL = none (a managed child, when needed) */
    int runtime_managed;                 /* managed: start `vsr runtime serve` as a child; default: true when
                                          * a recipe has model-backed signals and no endpoint is set */
    int has_runtime_managed;
    char *runtime_embedder;              /* embedder: the child's --embedder (only "hash", the test embedder) */
    char *runtime_model;                 /* model: the child's --model PATH */
    uint32_t runtime_threads;            /* threads: the child's --threads; 0 = its default (cores) */
    uint64_t runtime_timeout_ms;         /* timeout: one runtime call at most (within the request's deadline),
                                          * default VSR_DEFAULT_RUNTIME_TIMEOUT_MS */
    /* global.model_catalog.embeddings.semantic.endpoint: an OpenAI-compatible /v1/embeddings the
     * managed runtime serves embeddings from (its default embedder) */
    char *remote_embed_url;              /* base_url: http://host:port[/prefix] */
    char *remote_embed_model;            /* model */
    char *remote_embed_key_env;          /* api_key_env */
    char *runtime_guard_model;           /* guard_model: the child's --guard-model DIR (the jailbreak classifier) */
    vsr_modules_conf_t modules;          /* global.model_catalog.modules */
    vsr_looper_integration_conf_t looper; /* global.integrations.looper */
    vsr_tools_integration_conf_t tools;   /* global.integrations.tools */
    vsr_hallucination_module_conf_t hallucination; /* global.model_catalog.modules.hallucination_mitigation */

    /* dotted key paths present in the document that vsr accepts but does not
     * implement yet, in document order, each once (e.g. "routing", "listeners[].api_keys") */
    char **unimplemented;
    size_t n_unimplemented;
    uint32_t *unimplemented_line, *unimplemented_col; /* where each was first given (1-based) */
} vsr_config_t;

/* A document's size bounds (bytes) and the collections it may nest. */
#define VSR_CONFIG_DEFAULT_MAX_DOCUMENT_BYTES (2u * 1024 * 1024)
#define VSR_CONFIG_MAX_DOCUMENT_BYTES (16u * 1024 * 1024)
#define VSR_CONFIG_MAX_DEPTH 128u /* room for rules nested 32 deep (two collections a level) */

/* Loads and validates a document.  On success *out owns a new config and
 * VSR_OK is returned.  On failure every problem found is appended to err as
 * one line "FILE:LINE:COL: message\n" and VSR_ERR_INVALID (document) or
 * VSR_ERR_IO (unreadable file, message "FILE: strerror") is returned. */
int vsr_config_load_file(const char *path, vsr_config_t **out, vsr_buf_t *err);
/* Same, with the document's notes for `vsr config validate`: each warning
 * (accepted-inert and deprecated keys, adjusted values) as a line
 * "FILE:LINE:COL: warning: ..." into warnings instead of the log, and each
 * accepted key that is not implemented yet as "FILE:LINE:COL: not supported
 * yet: PATH" into unsupported, whether or not the document loads.  Either
 * buffer may be NULL (warnings then go to the log, as with
 * vsr_config_load_file). */
int vsr_config_load_file_notes(const char *path, vsr_config_t **out, vsr_buf_t *err, vsr_buf_t *warnings,
                               vsr_buf_t *unsupported);
/* Same, from memory; `name` stands in for FILE in messages. */
int vsr_config_load_string(const char *name, const char *yaml, size_t len, vsr_config_t **out, vsr_buf_t *err);
void vsr_config_free(vsr_config_t *c); /* accepts NULL */

/* The recipe named `name` ("default" = the top-level routing block), or NULL. */
const vsr_recipe_conf_t *vsr_config_find_recipe(const vsr_config_t *c, vsr_slice_t name);

/* The fallback policy in force for a decision (ref §1.7): the defaults, then
 * global.router.fallback, then the recipe's routing.fallback, then the
 * decision's fallback, later layers replacing the fields they set.  recipe
 * and decision may be NULL.  In *out every has_ flag is set and `present` is
 * 1; its arrays point into the config (read-only). */
void vsr_config_effective_fallback(const vsr_config_t *c, const vsr_recipe_conf_t *recipe,
                                   const vsr_decision_conf_t *decision, vsr_fallback_conf_t *out);

/* The provider model whose `name` equals `name`, or NULL. */
const vsr_model_conf_t *vsr_config_find_model(const vsr_config_t *c, vsr_slice_t name);
/* The global.model_catalog.external[] entry named `name`, or NULL. */
const vsr_external_conf_t *vsr_config_find_external(const vsr_config_t *c, vsr_slice_t name);
/* The default model (providers.defaults.model), else the first model. */
const vsr_model_conf_t *vsr_config_default_model(const vsr_config_t *c);

/* Logs one warning listing c->unimplemented ("FILE: accepted but not
 * implemented yet, ...: routing, listeners[].api_keys"); nothing when the
 * list is empty.  Meant to be called once at startup after a load. */
void vsr_config_warn_unimplemented(const vsr_config_t *c);
/* --gateway extproc: what of the document Envoy cannot carry (a decision's
 * reliability fields beyond the five Envoy takes per request), a line each
 * appended to err; returns how many (0: the document serves in extproc). */
size_t vsr_config_check_extproc(const vsr_config_t *c, vsr_buf_t *err);

/* ==== Versions ==============================================================
 * A document becomes a version in three steps: its canonical form (the YAML
 * tree as JSON, keys in document order; formatting and comments do not
 * count), the SHA-256 of that form (the content hash), and an entry in the
 * history.  Nothing here is thread-safe: the caller serializes activations. */

#define VSR_CONFIG_HISTORY 10   /* activated versions kept for rollback (ref §1.14) */

/* The canonical form of a YAML (or JSON) document appended to out; the
 * result is valid JSON and valid YAML.  VSR_OK, or VSR_ERR_INVALID with
 * "NAME:LINE:COL: message" lines in err (syntax errors only: no schema
 * check here). */
int vsr_config_canonical(const char *name, const char *doc, size_t len, vsr_buf_t *out, vsr_buf_t *err);
/* "sha256:<hex>" of data. */
void vsr_config_hash(const char *data, size_t len, char out[VSR_CONFIG_HASH_LEN]);

typedef struct {
    uint64_t version;              /* monotonic, from 1 */
    char hash[VSR_CONFIG_HASH_LEN];
    char source[16];               /* file, api, rollback */
    double time;                   /* activation, seconds since the epoch */
    char *doc;                     /* the canonical document (owned, NUL-terminated) */
    size_t len;
} vsr_config_version_t;

typedef struct {
    vsr_config_version_t v[VSR_CONFIG_HISTORY]; /* oldest first; v[n-1] is the active version */
    size_t n;
    uint64_t last;                 /* the last version number handed out */
} vsr_config_history_t;

void vsr_config_history_init(vsr_config_history_t *h);
void vsr_config_history_free(vsr_config_history_t *h);
/* Records an activation: the next version number (never reused, also when
 * the content equals an earlier version's), a copy of doc; the oldest entry
 * goes when VSR_CONFIG_HISTORY are kept.  Returns the new version. */
uint64_t vsr_config_history_push(vsr_config_history_t *h, const char *hash, const char *source, double time,
                                 const char *doc, size_t len);
/* The entry of `version`, or NULL when it is not (or no longer) kept. */
const vsr_config_version_t *vsr_config_history_find(const vsr_config_history_t *h, uint64_t version);
/* The newest entry (the active version), or NULL. */
const vsr_config_version_t *vsr_config_history_active(const vsr_config_history_t *h);

/* What `next` changes that a running process applies only on a restart:
 * the set and order of listeners, a listener's address, port, timeout, tls,
 * max_request_body_bytes, max_connections or identity, and the management
 * API's enabled/bind_address/port.  One line per finding appended to why;
 * returns how many (0: next can be activated live).  api_keys and models
 * of a listener change live. */
int vsr_config_restart_required(const vsr_config_t *running, const vsr_config_t *next, vsr_buf_t *why);

/* The effective document of c (loaded from doc): the document as written,
 * in canonical order, with the defaults vsr applied filled in where the
 * document left them out (listeners' address, timeout and limits, models'
 * provider_model_id and api_format, the management API's address and port)
 * and, with redact, every secret (api_key, api_keys, passwords, tokens,
 * anything named *secret*) replaced by "<redacted>".  Rendered as indented
 * JSON, itself a valid document.  c may be NULL: no defaults then (the
 * document as written, e.g. redacted for the management API).  VSR_OK or
 * VSR_ERR_INVALID. */
int vsr_config_print(const char *name, const char *doc, size_t len, const vsr_config_t *c, int redact, vsr_buf_t *out);

/* `vsr config migrate` (migrate.c): converts a pre-v0.3 document (data, len;
 * `file` names it in messages) to the canonical v0.3 layout.  On success
 * VSR_OK and the YAML document appended to out; notes on values whose
 * meaning changed appended to warn (may be NULL) as "FILE:LINE:COL: note:
 * ...".  On bad input (malformed YAML, wrong types, unknown pre-v0.3 keys,
 * two sources for one v0.3 place, a document already at v0.3)
 * VSR_ERR_INVALID, "FILE:LINE:COL: message" lines in err and nothing in
 * out.  docs/cli.md lists what is mapped. */
int vsr_config_migrate(const char *file, const char *data, size_t len, vsr_buf_t *out, vsr_buf_t *err,
                       vsr_buf_t *warn);

/* What stands for a secret in a redacted document (vsr_config_print). */
#define VSR_CONFIG_REDACTED "<redacted>"

/* Checks on a submitted document before it is loaded (admin/ runs them).
 *
 * Placeholders: a VSR_CONFIG_REDACTED scalar where redaction would put one
 * (a secret key's value or list item, an extra_headers value) stands for the
 * secret at the same position of `active` (a list item that is a mapping with
 * a "name" is matched by name, anything else by index).  When the active
 * document has one there, it is put in; when not, the document is refused:
 * a placeholder is never taken as a literal secret.
 *
 * Environment variables: every *_env value names one.  When env_allowed is
 * set, each must be in env_allowed[0..n_env_allowed); env_seen, when set, is
 * called with each name. */
typedef struct {
    const char *active;           /* the active version's document; NULL = none */
    size_t active_len;
    int env_check;                /* restrict *_env values to env_allowed */
    char *const *env_allowed;
    size_t n_env_allowed;
    void (*env_seen)(void *ud, const char *name);
    void *ud;
} vsr_config_vet_t;

/* VSR_OK: when a placeholder was resolved, *resolved holds the whole document
 * with the secrets put in (canonical form; the caller loads that instead);
 * otherwise resolved is left empty.  A document that does not parse is left
 * to the loader (VSR_OK, nothing done).  VSR_ERR_INVALID with
 * "NAME:LINE:COL: message" lines in err when a placeholder has no secret to
 * stand for or an *_env value is not allowed. */
int vsr_config_vet(const char *name, const char *doc, size_t len, const vsr_config_vet_t *v, vsr_buf_t *resolved,
                   vsr_buf_t *err);

/* A model card's param_size ("8B", "120M", "1.5k", "7", " 2T ") → the
 * number of parameters: digits with an optional fraction, then an optional
 * k, M, B or T (any case); surrounding blanks are allowed, 32 bytes at most.
 * VSR_OK, or VSR_ERR_INVALID (*out untouched). */
int vsr_config_param_size(const char *s, double *out);

/* ---- one parse per document ----
 * An activation parses the submitted bytes once into their YAML tree;
 * vetting, the canonical form and the loader all read that tree, with the
 * messages (and NAME:LINE:COL) the string functions above give. */
typedef struct vsr_config_doc vsr_config_doc_t;

/* Parses doc (NAME in messages): never NULL.  Syntax errors are kept and
 * reported by vsr_config_doc_canonical and vsr_config_doc_load. */
vsr_config_doc_t *vsr_config_doc_parse(const char *name, const char *doc, size_t len);
/* vsr_config_vet on the tree: a placeholder is replaced in the tree itself
 * (nothing is rendered or parsed again); the active document is parsed only
 * when the tree holds a placeholder.  A document that did not parse is left
 * to the next steps (VSR_OK). */
int vsr_config_doc_vet(vsr_config_doc_t *d, const vsr_config_vet_t *v, vsr_buf_t *err);
/* vsr_config_canonical of the tree (of the vetted tree once vetted). */
int vsr_config_doc_canonical(const vsr_config_doc_t *d, vsr_buf_t *out, vsr_buf_t *err);
/* vsr_config_load_string of the tree. */
int vsr_config_doc_load(const vsr_config_doc_t *d, vsr_config_t **out, vsr_buf_t *err);
void vsr_config_doc_free(vsr_config_doc_t *d);
/* How many times this process has run the YAML parser (tests). */
unsigned long vsr_config_parse_runs(void);

#endif /* VSR_CONFIG_H */
