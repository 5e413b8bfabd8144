/* signals_bench.c — microbenchmark of signal evaluation.
 *
 * Evaluates every signal of a recipe of 20 keyword signals (exact method,
 * case-insensitive, OR) against prompts of 4 KiB and 64 KiB, with 10 and
 * with 100 keywords per signal, and reports nanoseconds and heap
 * allocations per request.  Two kinds of text: English-like prose with a
 * few keywords in it, and words made of the keywords' own syllables (the
 * matcher is nearly always inside a partial keyword: a worst case).  One request = clear the pool, zero the memo,
 * evaluate the 20 signals.  Also shown: the same without the memo (each
 * signal scans on its own), and the other text signals for scale.
 *
 * Not part of the CMake build.  Build by hand from the repository root:
 *
 *   g++ -O2 -c src/signals/cld2_shim.cc -o /tmp/cld2_shim.o
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/signals_bench.c src/signals/ *.c \
 *       src/base/ *.c /tmp/cld2_shim.o -o /tmp/signals_bench -lpcre2-8 -lcld2 -lstdc++ -lpthread -lm
 *   /tmp/signals_bench
 *
 * (without the spaces before the '*'). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "signals/signals.h"

/* ---- allocation counting: interpose the allocator ---- */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t c, size_t n);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static unsigned long long n_allocs;

void *malloc(size_t n)
{
    n_allocs++;
    return __libc_malloc(n);
}
void *calloc(size_t c, size_t n)
{
    n_allocs++;
    return __libc_calloc(c, n);
}
void *realloc(void *p, size_t n)
{
    n_allocs++;
    return __libc_realloc(p, n);
}
void free(void *p)
{
    __libc_free(p);
}

/* ---- deterministic pseudo-words ---- */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void make_word(char *out, size_t cap)
{
    static const char *const syl[] = {"ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "zu",
                                      "qua", "ber", "don", "fli", "gar", "hex", "jin", "wor", "yel", "ost"};
    size_t n = 2 + next_rand() % 3, o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s", syl[next_rand() % 20]);
}

static const char *const prose_words[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with",
    "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what",
    "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do",
    "how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some",
    "her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see",
    "number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil",
    "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part", "function",
    "error", "please", "explain", "code", "data", "server", "request", "table", "query", "return", "value",
    "string", "list", "file", "system", "user", "model", "test", "build", "change", "should", "because",
};

/* kind 0: words drawn from the keywords' own syllables (the automaton is
 * almost always deep in some keyword: a worst case); kind 1: English-like
 * prose with five of the keywords inserted. */
static char *make_prompt(size_t bytes, int kind, char *const *inject, size_t n_inject)
{
    char *p = malloc(bytes + 64);
    size_t o = 0, injected = 0;
    while (o < bytes) {
        char w[32];
        if (kind == 0)
            make_word(w, sizeof(w));
        else if (injected < n_inject && next_rand() % 97 == 0)
            snprintf(w, sizeof(w), "%s", inject[injected++]);
        else
            snprintf(w, sizeof(w), "%s", prose_words[next_rand() % (sizeof(prose_words) / sizeof(*prose_words))]);
        size_t l = strlen(w);
        if (o + l + 2 > bytes)
            break;
        memcpy(p + o, w, l);
        o += l;
        p[o++] = (next_rand() % 12 == 0) ? '.' : ' ';
    }
    while (o < bytes)
        p[o++] = ' ';
    p[o] = '\0';
    return p;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct {
    vsr_signals_t *s;
    char **words;
    vsr_sig_keyword_conf_t *conf;
    char **lists;
    size_t nsig, nkw;
} kwset_t;

static void kwset_build(kwset_t *k, size_t nsig, size_t nkw)
{
    k->nsig = nsig;
    k->nkw = nkw;
    k->words = malloc(nsig * nkw * sizeof(char *));
    k->conf = calloc(nsig, sizeof(*k->conf));
    for (size_t i = 0; i < nsig * nkw; i++) {
        char w[32];
        make_word(w, sizeof(w));
        k->words[i] = vsr_strdup(w);
    }
    static char names[64][16];
    for (size_t i = 0; i < nsig; i++) {
        snprintf(names[i], sizeof(names[i]), "s%zu", i);
        k->conf[i].name = names[i];
        k->conf[i].op = VSR_KW_OP_OR;
        k->conf[i].method = VSR_KW_EXACT;
        k->conf[i].keywords.items = k->words + i * nkw;
        k->conf[i].keywords.n = nkw;
    }
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.name = "default";
    r.signals.keywords = k->conf;
    r.signals.n_keywords = nsig;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    k->s = vsr_signals_compile(&r, &err);
    if (!k->s) {
        fprintf(stderr, "compile: %.*s\n", (int)err.len, err.data);
        exit(1);
    }
    vsr_buf_free(&err);
}

static void kwset_free(kwset_t *k)
{
    vsr_signals_free(k->s);
    for (size_t i = 0; i < k->nsig * k->nkw; i++)
        vsr_free(k->words[i]);
    free(k->words);
    free(k->conf);
}

/* Runs `iters` requests; returns ns per request and allocations per request. */
static void run(const vsr_signals_t *s, const char *prompt, int use_memo, int iters, double *ns, double *allocs,
                int *matched)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_chat_message_t msg = {.role = VSR_ROLE_USER, .text = vsr_slice_cstr(prompt)};
    vsr_chat_view_t chat = {.messages = &msg, .n_messages = 1, .last_user = 0};
    size_t n = vsr_signals_count(s);
    int m = 0;
    /* warm-up: fault in tables and the pool's first chunk */
    for (int w = 0; w < 3; w++) {
        vsr_signals_memo_t memo = {0};
        vsr_signal_input_t in = {.chat = &chat, .text = msg.text, .pool = &pool, .memo = use_memo ? &memo : NULL};
        for (size_t i = 0; i < n; i++)
            (void)vsr_signals_eval(s, (int)i, &in);
        vsr_pool_clear(&pool);
    }
    unsigned long long a0 = n_allocs;
    double t0 = now_ns();
    for (int it = 0; it < iters; it++) {
        vsr_signals_memo_t memo = {0};
        vsr_signal_input_t in = {.chat = &chat, .text = msg.text, .pool = &pool, .memo = use_memo ? &memo : NULL};
        m = 0;
        for (size_t i = 0; i < n; i++)
            m += vsr_signals_eval(s, (int)i, &in).matched;
        vsr_pool_clear(&pool);
    }
    double t1 = now_ns();
    *ns = (t1 - t0) / iters;
    *allocs = (double)(n_allocs - a0) / iters;
    *matched = m;
    vsr_pool_free(&pool);
}

static int iters_for(size_t bytes)
{
    return bytes <= 8192 ? 20000 : 1500;
}

int main(void)
{
    size_t sizes[] = {4096, 65536};
    char *prompts[2];
    for (int i = 0; i < 2; i++)
        prompts[i] = make_prompt(sizes[i], 0, NULL, 0);

    printf("keyword signals, exact method, case-insensitive, OR; one request = all signals evaluated\n");
    printf("%-30s %-8s %6s %12s %10s %10s %8s\n", "recipe", "text", "prompt", "ns/request", "ns/KiB", "allocs/req",
           "matched");
    size_t kws[] = {10, 100};
    for (int kind = 1; kind >= 0; kind--) {
        for (int k = 0; k < 2; k++) {
            kwset_t set;
            kwset_build(&set, 20, kws[k]);
            for (int p = 0; p < 2; p++) {
                char *prompt = kind == 0 ? prompts[p] : make_prompt(sizes[p], 1, set.words, 5);
                for (int memo = 1; memo >= 0; memo--) {
                    double ns, allocs;
                    int matched;
                    int iters = iters_for(sizes[p]) / (memo ? 1 : 10);
                    run(set.s, prompt, memo, iters, &ns, &allocs, &matched);
                    char label[64];
                    snprintf(label, sizeof(label), "20 x %zu keywords%s", kws[k], memo ? "" : " (no memo)");
                    printf("%-30s %-8s %5zuK %12.0f %10.1f %10.2f %8d\n", label, kind ? "prose" : "syllable",
                           sizes[p] / 1024, ns, ns / (sizes[p] / 1024.0), allocs, matched);
                }
                if (kind == 1)
                    free(prompt);
            }
            kwset_free(&set);
        }
    }

    /* other text signals, one at a time, for scale */
    printf("\nother signals, one signal per request (syllable text)\n");
    printf("%-26s %8s %12s %10s\n", "signal", "prompt", "ns/request", "allocs/req");
    char *re_kw[] = {"\\b(?:error|exception|traceback)\\b", "\\d{4}-\\d{2}-\\d{2}"};
    char *fz_kw[] = {"kubernetes", "deployment", "terraform", "ansible", "prometheus"};
    char *ng_kw[] = {"urgent", "immediately", "asap"};
    char *bm_kw[] = {"refund policy", "invoice", "chargeback"};
    char *st_kw[] = {"at most", "at least", "within"};
    vsr_sig_keyword_conf_t kc[] = {
        {.name = "regex", .method = VSR_KW_REGEX, .keywords = {re_kw, 2}},
        {.name = "fuzzy", .method = VSR_KW_FUZZY, .keywords = {fz_kw, 5}},
        {.name = "ngram", .method = VSR_KW_NGRAM, .keywords = {ng_kw, 3}},
        {.name = "bm25", .method = VSR_KW_BM25, .keywords = {bm_kw, 3}},
    };
    vsr_sig_structure_conf_t sc[] = {
        {.name = "density", .feature_type = "density", .source_type = "keyword_set", .keywords = {st_kw, 3}},
        {.name = "regex_count", .feature_type = "count", .source_type = "regex", .pattern = "\\d+"},
    };
    vsr_sig_language_conf_t lc[] = {{.name = "en"}};
    vsr_sig_context_conf_t cc[] = {{.name = "long", .min_tokens = 1000}};
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.keywords = kc;
    r.signals.n_keywords = 4;
    r.signals.structure = sc;
    r.signals.n_structure = 2;
    r.signals.language = lc;
    r.signals.n_language = 1;
    r.signals.context = cc;
    r.signals.n_context = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    if (!s) {
        fprintf(stderr, "compile: %.*s\n", (int)err.len, err.data);
        return 1;
    }
    for (size_t i = 0; i < vsr_signals_count(s); i++) {
        for (int p = 0; p < 2; p++) {
            vsr_pool_t pool;
            vsr_pool_init(&pool);
            vsr_chat_message_t msg = {.role = VSR_ROLE_USER, .text = vsr_slice_cstr(prompts[p])};
            vsr_chat_view_t chat = {.messages = &msg, .n_messages = 1};
            int iters = iters_for(sizes[p]) / 10;
            for (int w = 0; w < 3; w++) {
                vsr_signal_input_t in = {.chat = &chat, .text = msg.text, .pool = &pool};
                (void)vsr_signals_eval(s, (int)i, &in);
                vsr_pool_clear(&pool);
            }
            unsigned long long a0 = n_allocs;
            double t0 = now_ns();
            for (int it = 0; it < iters; it++) {
                vsr_signal_input_t in = {.chat = &chat, .text = msg.text, .pool = &pool};
                (void)vsr_signals_eval(s, (int)i, &in);
                vsr_pool_clear(&pool);
            }
            double ns = (now_ns() - t0) / iters;
            printf("%-26s %7zuK %12.0f %10.2f\n", vsr_signals_name(s, (int)i), sizes[p] / 1024, ns,
                   (double)(n_allocs - a0) / iters);
            vsr_pool_free(&pool);
        }
    }
    vsr_signals_free(s);
    vsr_buf_free(&err);
    for (int i = 0; i < 2; i++)
        free(prompts[i]);
    return 0;
}
