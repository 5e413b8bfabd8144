/* test_signals.c — every signal type, operator and method against
 * hand-built configurations and request views. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>

#include "signals/signals.h"

/* ---- helpers ------------------------------------------------------------ */

#define KW(...) ((char *[]){__VA_ARGS__}), (sizeof((char *[]){__VA_ARGS__}) / sizeof(char *))

static vsr_sig_keyword_conf_t kw_conf(const char *name, vsr_kw_operator_t op, vsr_kw_method_t method, char **kws,
                                      size_t n)
{
    vsr_sig_keyword_conf_t c;
    memset(&c, 0, sizeof(c));
    c.name = (char *)name;
    c.op = op;
    c.method = method;
    c.keywords.items = kws;
    c.keywords.n = n;
    return c;
}

/* Compiles a recipe with the given keyword signals (and nothing else). */
static vsr_signals_t *compile_kw(vsr_sig_keyword_conf_t *kws, size_t n)
{
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.name = (char *)"default";
    r.signals.keywords = kws;
    r.signals.n_keywords = n;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_signals_t *s = vsr_signals_compile(&r, &err);
    if (!s)
        fail_msg("compile failed: %.*s", (int)err.len, err.data);
    vsr_buf_free(&err);
    return s;
}

static vsr_signals_t *compile_recipe(const vsr_recipe_conf_t *r)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_signals_t *s = vsr_signals_compile(r, &err);
    if (!s)
        fail_msg("compile failed: %.*s", (int)err.len, err.data);
    vsr_buf_free(&err);
    return s;
}

/* A request whose only message is a user message with `text`. */
typedef struct {
    vsr_chat_message_t msgs[8];
    vsr_chat_view_t chat;
    vsr_signal_input_t in;
    vsr_pool_t pool;
} req_t;

static void req_init(req_t *q, const char *text)
{
    memset(q, 0, sizeof(*q));
    vsr_pool_init(&q->pool);
    q->msgs[0].role = VSR_ROLE_USER;
    q->msgs[0].text = vsr_slice_cstr(text);
    q->chat.messages = q->msgs;
    q->chat.n_messages = 1;
    q->chat.last_user = 0;
    q->in.chat = &q->chat;
    q->in.text = vsr_slice_cstr(text);
    q->in.pool = &q->pool;
}

static vsr_signal_result_t eval_text(const vsr_signals_t *s, const char *type, const char *name, const char *text)
{
    req_t q;
    req_init(&q, text);
    int i = vsr_signals_find(s, type, name);
    if (i < 0)
        fail_msg("no %s signal %s", type, name);
    vsr_signal_result_t r = vsr_signals_eval(s, i, &q.in);
    vsr_pool_free(&q.pool);
    return r;
}

static int kw_match(const vsr_signals_t *s, const char *name, const char *text)
{
    return eval_text(s, "keyword", name, text).matched;
}

/* ---- keyword: exact ------------------------------------------------------ */

static void test_keyword_word_boundaries(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("code", VSR_KW_OP_OR, VSR_KW_EXACT, KW("python", "golang")),
        kw_conf("cpp", VSR_KW_OP_OR, VSR_KW_EXACT, KW("c++")),
        kw_conf("phrase", VSR_KW_OP_OR, VSR_KW_EXACT, KW("machine learning")),
    };
    vsr_signals_t *s = compile_kw(c, 3);
    assert_true(kw_match(s, "code", "I love Python!"));
    assert_true(kw_match(s, "code", "python"));
    assert_true(kw_match(s, "code", "use golang, or PYTHON."));
    assert_true(kw_match(s, "code", "(python)"));
    assert_false(kw_match(s, "code", "pythonic code"));
    assert_false(kw_match(s, "code", "cpython internals"));
    assert_false(kw_match(s, "code", "python_version"));   /* '_' is a word character */
    assert_false(kw_match(s, "code", "python3"));          /* so are digits */
    assert_false(kw_match(s, "code", "nothing here"));
    assert_false(kw_match(s, "code", ""));
    /* Go's \b is ASCII-only: a non-ASCII letter next to the keyword is not a word character */
    assert_true(kw_match(s, "code", "我喜欢python编程"));
    /* keywords ending in a non-word character get no boundary on that side */
    assert_true(kw_match(s, "cpp", "I write c++ daily"));
    assert_true(kw_match(s, "cpp", "c++."));
    assert_true(kw_match(s, "cpp", "c++x"));
    assert_false(kw_match(s, "cpp", "abc++ code")); /* 'c' starts a word: left boundary holds */
    assert_true(kw_match(s, "phrase", "Intro to Machine Learning."));
    assert_false(kw_match(s, "phrase", "machine  learning")); /* literal, spaces included */
    assert_false(kw_match(s, "phrase", "machine learnings"));
    vsr_signals_free(s);
}

static void test_keyword_case_sensitive(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("cs", VSR_KW_OP_OR, VSR_KW_EXACT, KW("Python")),
        kw_conf("ci", VSR_KW_OP_OR, VSR_KW_EXACT, KW("Python")),
        kw_conf("uber", VSR_KW_OP_OR, VSR_KW_EXACT, KW("über")),
        kw_conf("uber_cs", VSR_KW_OP_OR, VSR_KW_EXACT, KW("über")),
    };
    c[0].case_sensitive = 1;
    c[3].case_sensitive = 1;
    vsr_signals_t *s = compile_kw(c, 4);
    assert_true(kw_match(s, "cs", "I love Python"));
    assert_false(kw_match(s, "cs", "I love python"));
    assert_false(kw_match(s, "cs", "I love PYTHON"));
    assert_true(kw_match(s, "ci", "I love pYtHoN"));
    /* non-ASCII case folding on both sides */
    assert_true(kw_match(s, "uber", "ÜBER alles"));
    assert_true(kw_match(s, "uber", "Über alles"));
    assert_false(kw_match(s, "uber_cs", "Über alles"));
    assert_true(kw_match(s, "uber_cs", "über alles"));
    assert_false(kw_match(s, "uber", "überall")); /* the right side is an ASCII letter */
    /* the text is folded when any byte of it is not ASCII: "ÜBER" at every
     * offset of texts long enough for the 64-byte ASCII test and its tail */
    char text[200];
    for (size_t n = 5; n < 180; n += 7)
        for (size_t at = 0; at + 6 <= n; at++) {
            memset(text, 'x', n);
            text[n] = '\0';
            if (at > 0)
                text[at - 1] = ' ';
            memcpy(text + at, "\xc3\x9c" "BER", 5);
            if (at + 5 < n)
                text[at + 5] = ' ';
            if (!kw_match(s, "uber", text))
                fail_msg("\"\xc3\x9c" "BER\" at %zu of %zu bytes: not matched", at, n);
        }
    vsr_signals_free(s);
}

static void test_keyword_cjk_substring(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("zh", VSR_KW_OP_OR, VSR_KW_EXACT, KW("编程")),
        kw_conf("mixed", VSR_KW_OP_OR, VSR_KW_EXACT, KW("Python教程")),
        kw_conf("ko", VSR_KW_OP_OR, VSR_KW_EXACT, KW("프로그래밍")),
    };
    vsr_signals_t *s = compile_kw(c, 3);
    assert_true(kw_match(s, "zh", "我喜欢编程语言"));
    assert_true(kw_match(s, "zh", "编程"));
    assert_false(kw_match(s, "zh", "我喜欢编写程序"));
    /* a keyword containing CJK gets no boundary at all, even on its ASCII side */
    assert_true(kw_match(s, "mixed", "cpython教程很好"));
    assert_true(kw_match(s, "ko", "파이썬프로그래밍입니다"));
    vsr_signals_free(s);
}

static void test_keyword_operators(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("or", VSR_KW_OP_OR, VSR_KW_EXACT, KW("urgent", "asap")),
        kw_conf("and", VSR_KW_OP_AND, VSR_KW_EXACT, KW("refund", "invoice")),
        kw_conf("nor", VSR_KW_OP_NOR, VSR_KW_EXACT, KW("password", "ssn")),
        kw_conf("and_empty", VSR_KW_OP_AND, VSR_KW_EXACT, KW("", "hello")),
    };
    vsr_signals_t *s = compile_kw(c, 4);
    assert_true(kw_match(s, "or", "reply asap"));
    assert_true(kw_match(s, "or", "URGENT: reply"));
    assert_false(kw_match(s, "or", "reply when you can"));
    assert_true(kw_match(s, "and", "refund for invoice 12"));
    assert_false(kw_match(s, "and", "refund please"));
    assert_false(kw_match(s, "and", "invoice attached"));
    assert_true(kw_match(s, "nor", "hello there"));
    assert_false(kw_match(s, "nor", "my password is"));
    assert_false(kw_match(s, "nor", "SSN: 123"));
    assert_true(kw_match(s, "nor", ""));
    /* an empty keyword matches everywhere, as an empty regex does */
    assert_true(kw_match(s, "and_empty", "hello"));
    assert_false(kw_match(s, "and_empty", "bye"));
    vsr_signal_result_t r = eval_text(s, "keyword", "or", "urgent and asap");
    assert_true(r.matched);
    assert_true(r.confidence == 1.0);
    assert_true(r.value == 2.0);
    r = eval_text(s, "keyword", "or", "nothing");
    assert_false(r.matched);
    assert_true(r.confidence == 0.0);
    vsr_signals_free(s);
}

static void test_keyword_overlapping_keywords(void **st)
{
    (void)st;
    /* keywords that are prefixes/suffixes of each other, shared across signals */
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("a", VSR_KW_OP_AND, VSR_KW_EXACT, KW("he", "she", "hers")),
        kw_conf("b", VSR_KW_OP_OR, VSR_KW_EXACT, KW("his")),
        kw_conf("c", VSR_KW_OP_OR, VSR_KW_EXACT, KW("she")),
    };
    c[2].case_sensitive = 1;
    vsr_signals_t *s = compile_kw(c, 3);
    assert_true(kw_match(s, "a", "he said she took hers"));
    assert_false(kw_match(s, "a", "ushers")); /* substrings only, no whole word */
    assert_false(kw_match(s, "b", "this"));
    assert_true(kw_match(s, "b", "His hat"));
    assert_false(kw_match(s, "c", "SHE"));
    assert_true(kw_match(s, "c", "yes she"));
    vsr_signals_free(s);
}

/* ---- keyword: regex ------------------------------------------------------- */

static void test_keyword_regex(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("re", VSR_KW_OP_OR, VSR_KW_REGEX, KW("^def\\s+\\w+\\(", "\\bSELECT\\b.*\\bFROM\\b")),
        kw_conf("re_cs", VSR_KW_OP_OR, VSR_KW_REGEX, KW("ERROR-\\d{3}")),
        kw_conf("re_and", VSR_KW_OP_AND, VSR_KW_REGEX, KW("\\d{4}-\\d{2}-\\d{2}", "[A-Z]{3}")),
        kw_conf("re_nor", VSR_KW_OP_NOR, VSR_KW_REGEX, KW("\\bdrop\\s+table\\b")),
    };
    c[1].case_sensitive = 1;
    vsr_signals_t *s = compile_kw(c, 4);
    assert_true(kw_match(s, "re", "def foo(x):"));
    assert_false(kw_match(s, "re", "  def foo(x):"));
    assert_true(kw_match(s, "re", "select * from users"));
    assert_false(kw_match(s, "re", "selection from here"));
    assert_true(kw_match(s, "re_cs", "got ERROR-404"));
    assert_false(kw_match(s, "re_cs", "got error-404"));
    assert_true(kw_match(s, "re_and", "on 2024-01-31 in usd"));
    assert_false(kw_match(s, "re_and", "on 2024-01-31"));
    assert_true(kw_match(s, "re_nor", "create table x"));
    assert_false(kw_match(s, "re_nor", "DROP  TABLE x"));
    /* invalid UTF-8 in the text does not break matching */
    assert_true(kw_match(s, "re_cs", "\xff\xfe ERROR-500"));
    vsr_signals_free(s);
}

static void test_keyword_regex_compile_error(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("good", VSR_KW_OP_OR, VSR_KW_REGEX, KW("fine")),
        kw_conf("bad_regex", VSR_KW_OP_OR, VSR_KW_REGEX, KW("ok", "(unclosed")),
    };
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.name = (char *)"default";
    r.signals.keywords = c;
    r.signals.n_keywords = 2;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_null(vsr_signals_compile(&r, &err));
    assert_non_null(err.data);
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "routing.signals.keywords[1].keywords[1]"));
    assert_non_null(strstr(err.data, "bad_regex"));
    assert_non_null(strstr(err.data, "(unclosed"));
    assert_null(strstr(err.data, "good"));
    vsr_buf_free(&err);
}

/* ---- keyword: fuzzy ------------------------------------------------------- */

static void test_keyword_fuzzy(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("f2", VSR_KW_OP_OR, VSR_KW_FUZZY, KW("python")),
        kw_conf("f1", VSR_KW_OP_OR, VSR_KW_EXACT, KW("python")),
        kw_conf("exact", VSR_KW_OP_OR, VSR_KW_EXACT, KW("python")),
        kw_conf("and", VSR_KW_OP_AND, VSR_KW_FUZZY, KW("kubernetes", "deployment")),
        kw_conf("nor", VSR_KW_OP_NOR, VSR_KW_FUZZY, KW("password")),
    };
    c[1].fuzzy_match = 1;
    c[1].fuzzy_threshold = 1;
    vsr_signals_t *s = compile_kw(c, 5);
    /* "pyhton" is two edits from "python" (a transposition) */
    assert_true(kw_match(s, "f2", "I code in pyhton"));
    assert_false(kw_match(s, "f1", "I code in pyhton"));
    assert_false(kw_match(s, "exact", "I code in pyhton"));
    /* one edit */
    assert_true(kw_match(s, "f1", "I code in pythn"));
    assert_true(kw_match(s, "f1", "I code in PYTHONS"));
    /* three edits: no */
    assert_false(kw_match(s, "f2", "I code in pthn3x"));
    /* exact matches still count */
    assert_true(kw_match(s, "f1", "python"));
    assert_true(kw_match(s, "and", "my kubernets deploymnt"));
    assert_false(kw_match(s, "and", "my kubernets only"));
    assert_false(kw_match(s, "nor", "the pasword is"));
    assert_true(kw_match(s, "nor", "no secrets"));
    vsr_signals_free(s);
}

/* ---- keyword: ngram --------------------------------------------------------- */

static void test_keyword_ngram(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("ng", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("urgent")),
        kw_conf("ng_high", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("urgent")),
        kw_conf("ng_and", VSR_KW_OP_AND, VSR_KW_NGRAM, KW("urgent", "invoice")),
        kw_conf("ng_cs", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("urgent")),
        kw_conf("ng_phrase", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("credit card")),
        kw_conf("ng_07", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("urgent")),
        kw_conf("ng_025", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("urgent")),
        kw_conf("ng_bi", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("urgent")),
    };
    c[1].ngram_threshold = 0.8;
    c[3].case_sensitive = 1;
    c[3].ngram_threshold = 0.9;
    c[4].ngram_threshold = 0.9;
    c[5].ngram_threshold = 0.7;
    c[6].ngram_threshold = 0.25;
    c[7].ngram_arity = 2;
    c[7].ngram_threshold = 0.8;
    vsr_signals_t *s = compile_kw(c, 8);
    /* the similarity is ngrammatic's 1 - (1 - s/all)^2, not plain Jaccard
     * (0.5 and 0.15 for these two) */
    assert_true(kw_match(s, "ng_07", "urgnt"));
    assert_true(kw_match(s, "ng_025", "urban"));
    assert_false(kw_match(s, "ng_025", "uranium"));
    /* bigrams: " u","ur","rg","gn","nt","t " vs 7 of "urgent": 5 shared of 8 -> 0.86 */
    assert_true(kw_match(s, "ng_bi", "urgnt"));
    /* "urgnt" vs "urgent", trigrams padded: 5 shared of 10 -> 1 - 0.5^2 = 0.75 */
    assert_true(kw_match(s, "ng", "this is urgnt please"));
    assert_false(kw_match(s, "ng_high", "this is urgnt please"));
    assert_true(kw_match(s, "ng_high", "this is URGENT please"));
    /* "urban": 2 shared of 13 -> 0.28 */
    assert_false(kw_match(s, "ng", "an urban legend"));
    assert_true(kw_match(s, "ng_and", "urgent: invoce overdue"));
    assert_false(kw_match(s, "ng_and", "urgent: payment overdue"));
    assert_false(kw_match(s, "ng_cs", "this is URGENT"));
    assert_true(kw_match(s, "ng_cs", "this is urgent"));
    /* words may contain '-' */
    assert_true(kw_match(s, "ng", "urg-ent"));
    /* the whole text is compared too: no single word of it reaches 0.9
     * against "credit card" ("credit" scores 0.75), the text does */
    assert_true(kw_match(s, "ng_phrase", "Credit Card"));
    assert_false(kw_match(s, "ng_phrase", "credit"));
    vsr_signals_free(s);
}

/* ---- keyword: bm25 ------------------------------------------------------- */

static void test_keyword_bm25(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("bm", VSR_KW_OP_OR, VSR_KW_BM25, KW("refund", "invoice")),
        kw_conf("bm_high", VSR_KW_OP_OR, VSR_KW_BM25, KW("refund", "invoice")),
        kw_conf("bm_and", VSR_KW_OP_AND, VSR_KW_BM25, KW("refund", "invoice")),
        kw_conf("bm_cs", VSR_KW_OP_OR, VSR_KW_BM25, KW("refund", "invoice")),
    };
    /* with two one-word keywords, a text token that is a keyword scores
     * idf = ln(1 + 1.5/1.5) = ln 2 ~ 0.693 per occurrence */
    c[1].bm25_threshold = 0.8;
    c[3].case_sensitive = 1;
    vsr_signals_t *s = compile_kw(c, 4);
    assert_true(kw_match(s, "bm", "I need a refund"));
    assert_false(kw_match(s, "bm", "I need a refunds")); /* no stemming */
    assert_false(kw_match(s, "bm", "hello"));
    assert_false(kw_match(s, "bm_high", "I need a refund"));
    assert_true(kw_match(s, "bm_high", "refund, refund!"));
    assert_true(kw_match(s, "bm_and", "Refund my invoice"));
    assert_false(kw_match(s, "bm_and", "Refund my order"));
    assert_false(kw_match(s, "bm_cs", "REFUND please"));
    assert_true(kw_match(s, "bm_cs", "refund please"));
    vsr_signals_free(s);
}

/* ---- context ---------------------------------------------------------------- */

static void test_context(void **st)
{
    (void)st;
    vsr_sig_context_conf_t c[3];
    memset(c, 0, sizeof(c));
    c[0].name = (char *)"mid";      /* 1K .. 2K */
    c[0].min_tokens = 1000;
    c[0].max_tokens = 2000;
    c[0].has_max_tokens = 1;
    c[1].name = (char *)"long";     /* 1M .. unbounded */
    c[1].min_tokens = 1000000;
    c[2].name = (char *)"any";
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.context = c;
    r.signals.n_context = 3;
    vsr_signals_t *s = compile_recipe(&r);
    int mid = vsr_signals_find(s, "context", "mid");
    int lng = vsr_signals_find(s, "context", "long");
    int any = vsr_signals_find(s, "context", "any");

    char *big = malloc(8002);
    memset(big, 'x', 8001);
    big[8001] = '\0';
    struct { size_t bytes; int mid; } cases[] = {
        {3996, 0}, {3997, 1}, {4000, 1}, {8000, 1}, {8001, 0},
    };
    for (size_t k = 0; k < VSR_ARRAY_LEN(cases); k++) {
        req_t q;
        req_init(&q, "");
        q.msgs[0].text = vsr_slice(big, cases[k].bytes);
        q.in.text = q.msgs[0].text;
        vsr_signal_result_t res = vsr_signals_eval(s, mid, &q.in);
        if (res.matched != cases[k].mid)
            fail_msg("%zu bytes: matched %d", cases[k].bytes, res.matched);
        assert_true(res.value == (double)((cases[k].bytes + 3) / 4));
        assert_false(vsr_signals_eval(s, lng, &q.in).matched);
        assert_true(vsr_signals_eval(s, any, &q.in).matched);
        vsr_pool_free(&q.pool);
    }
    /* all messages count, not only the routing text; text_bytes can exceed them */
    req_t q;
    req_init(&q, "hi");
    q.msgs[0].role = VSR_ROLE_SYSTEM;
    q.msgs[0].text = vsr_slice(big, 3000);
    q.msgs[1].role = VSR_ROLE_USER;
    q.msgs[1].text = vsr_slice(big, 1000);
    q.chat.n_messages = 2;
    q.chat.last_user = 1;
    q.in.text = q.msgs[1].text;
    assert_int_equal(vsr_signals_token_estimate(&q.chat), 1000);
    assert_true(vsr_signals_eval(s, mid, &q.in).matched);
    q.chat.text_bytes = 4000000;
    assert_int_equal(vsr_signals_token_estimate(&q.chat), 1000000);
    assert_true(vsr_signals_eval(s, lng, &q.in).matched);
    assert_false(vsr_signals_eval(s, mid, &q.in).matched);
    vsr_pool_free(&q.pool);
    assert_int_equal(vsr_signals_token_estimate(NULL), 0);
    free(big);
    vsr_signals_free(s);
}

/* ---- structure -------------------------------------------------------------- */

static vsr_sig_structure_conf_t st_conf(const char *name, const char *feat, const char *src)
{
    vsr_sig_structure_conf_t c;
    memset(&c, 0, sizeof(c));
    c.name = (char *)name;
    c.feature_type = (char *)feat;
    c.source_type = (char *)src;
    return c;
}

static void test_structure(void **st)
{
    (void)st;
    char *kws[] = {"at most", "不超过", "within"};
    char *seq1[] = {"first", "then"};
    char *seq2[] = {"首先", "然后"};
    vsr_strlist_conf_t seqs[] = {{seq1, 2}, {seq2, 2}};
    vsr_sig_structure_conf_t c[] = {
        st_conf("digits", "count", "regex"),
        st_conf("digits3", "count", "regex"),
        st_conf("limits", "count", "keyword_set"),
        st_conf("dense", "density", "keyword_set"),
        st_conf("ordered", "sequence", "sequence"),
        st_conf("short", "count", "text_bytes"),
        st_conf("has_code", "exists", "regex"),
        st_conf("range", "count", "regex"),
    };
    c[0].pattern = (char *)"\\d+";
    c[1].pattern = (char *)"\\d+";
    c[1].predicate.gte = 3;
    c[1].predicate.has_gte = 1;
    c[2].keywords.items = kws;
    c[2].keywords.n = 3;
    c[3].keywords.items = kws;
    c[3].keywords.n = 3;
    c[3].predicate.gt = 0.2;
    c[3].predicate.has_gt = 1;
    c[4].sequences = seqs;
    c[4].n_sequences = 2;
    c[5].predicate.lt = 10;
    c[5].predicate.has_lt = 1;
    c[6].pattern = (char *)"```";
    c[7].pattern = (char *)"x";
    c[7].predicate.gte = 2;
    c[7].predicate.has_gte = 1;
    c[7].predicate.lte = 3;
    c[7].predicate.has_lte = 1;
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.structure = c;
    r.signals.n_structure = VSR_ARRAY_LEN(c);
    vsr_signals_t *s = compile_recipe(&r);

    vsr_signal_result_t res = eval_text(s, "structure", "digits", "a 1 b 22 c 333");
    assert_true(res.matched);
    assert_true(res.value == 3);
    assert_true(res.confidence == 1.0);
    res = eval_text(s, "structure", "digits", "no digits");
    assert_false(res.matched);
    assert_true(res.value == 0);
    /* predicate: value 3, gte 3 holds at distance 0 -> confidence 0.5 */
    res = eval_text(s, "structure", "digits3", "a 1 b 22 c 333");
    assert_true(res.matched);
    assert_true(fabs(res.confidence - 0.5) < 1e-9);
    res = eval_text(s, "structure", "digits3", "1 2 3 4 5");
    assert_true(res.matched);
    assert_true(fabs(res.confidence - 1.0 / (1.0 + exp(-8.0))) < 1e-9);
    assert_false(eval_text(s, "structure", "digits3", "1 2").matched);

    /* keyword_set: letters on either side block; CJK keywords are substrings */
    res = eval_text(s, "structure", "limits", "At most 5, utmost 6, at mostly 7, 不超过十个, within");
    assert_true(res.value == 3);
    res = eval_text(s, "structure", "limits", "within_reach"); /* '_' does not block here */
    assert_true(res.value == 1);
    res = eval_text(s, "structure", "limits", "within within within");
    assert_true(res.value == 3);

    /* density: 2 hits over 6 units ("at", "most", "5", "within", "one", "day") */
    res = eval_text(s, "structure", "dense", "at most 5 within one day");
    assert_true(fabs(res.value - 2.0 / 6.0) < 1e-9);
    assert_true(res.matched);
    /* CJK runes are one unit each: 1 hit over 6 units */
    res = eval_text(s, "structure", "dense", "不超过十个字");
    assert_true(fabs(res.value - 1.0 / 6.0) < 1e-9);
    assert_false(res.matched);

    assert_true(eval_text(s, "structure", "ordered", "First read it, then write").matched);
    assert_false(eval_text(s, "structure", "ordered", "then read it first").matched);
    assert_true(eval_text(s, "structure", "ordered", "首先读，然后写").matched);

    res = eval_text(s, "structure", "short", "hello");
    assert_true(res.matched);
    assert_true(res.value == 5);
    assert_false(eval_text(s, "structure", "short", "hello world").matched);

    assert_true(eval_text(s, "structure", "has_code", "see ```c\nint x;\n```").matched);
    assert_false(eval_text(s, "structure", "has_code", "no code").matched);

    assert_false(eval_text(s, "structure", "range", "x").matched);
    assert_true(eval_text(s, "structure", "range", "x x").matched);
    assert_true(eval_text(s, "structure", "range", "X x X").matched); /* case-insensitive by default */
    assert_false(eval_text(s, "structure", "range", "xxxx").matched);

    /* empty or blank text matches nothing, not even text_bytes < 10 */
    assert_false(eval_text(s, "structure", "short", "   \n\t ").matched);
    assert_false(eval_text(s, "structure", "short", "").matched);
    vsr_signals_free(s);
}

static void test_structure_errors(void **st)
{
    (void)st;
    vsr_sig_structure_conf_t c[] = {
        st_conf("bad_feature", "median", "regex"),
        st_conf("bad_source", "count", "xml"),
        st_conf("no_pattern", "count", "regex"),
        st_conf("bad_pattern", "count", "regex"),
    };
    c[0].pattern = (char *)"a";
    c[3].pattern = (char *)"[a-";
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.name = (char *)"support";
    r.signals.structure = c;
    r.signals.n_structure = 4;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_null(vsr_signals_compile(&r, &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "recipes.support.signals.structure[0].feature.type"));
    assert_non_null(strstr(err.data, "structure[1].feature.source.type"));
    assert_non_null(strstr(err.data, "structure[2].feature.source.pattern"));
    assert_non_null(strstr(err.data, "\"bad_pattern\": regex \"[a-\" does not compile"));
    vsr_buf_free(&err);
}

/* ---- conversation -------------------------------------------------------------- */

static vsr_sig_conversation_conf_t conv_conf(const char *name, const char *feat, const char *src, const char *role)
{
    vsr_sig_conversation_conf_t c;
    memset(&c, 0, sizeof(c));
    c.name = (char *)name;
    c.feature_type = (char *)feat;
    c.source_type = (char *)src;
    c.role = (char *)role;
    return c;
}

static void test_conversation(void **st)
{
    (void)st;
    vsr_sig_conversation_conf_t c[] = {
        conv_conf("users", "count", "message", "user"),
        conv_conf("non_user", "count", "message", "non_user"),
        conv_conf("all", "count", "message", NULL),
        conv_conf("dev", "count", "message", "developer"),
        conv_conf("tools2", "count", "tool_definition", NULL),
        conv_conf("calls", "exists", "assistant_tool_call", NULL),
        conv_conf("loop", "exists", "active_tool_loop", NULL),
        conv_conf("images", "count", "image_content", NULL),
        conv_conf("required", "exists", "tool_choice_required", NULL),
        conv_conf("none", "exists", "tool_choice_none", NULL),
        conv_conf("many_users", "count", "message", "user"),
        conv_conf("assistants", "exists", "message", "assistant"),
        conv_conf("cycles", "count", "assistant_tool_cycle", NULL),
    };
    c[12].predicate.gte = 1;
    c[12].predicate.has_gte = 1;
    c[4].predicate.gte = 2;
    c[4].predicate.has_gte = 1;
    c[7].predicate.gt = 0;
    c[7].predicate.has_gt = 1;
    c[10].predicate.gt = 2;
    c[10].predicate.has_gt = 1;
    c[10].predicate.lte = 3;
    c[10].predicate.has_lte = 1;
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.conversation = c;
    r.signals.n_conversation = VSR_ARRAY_LEN(c);
    vsr_signals_t *s = compile_recipe(&r);

    req_t q;
    req_init(&q, "now fix it");
    vsr_role_t roles[] = {VSR_ROLE_SYSTEM, VSR_ROLE_DEVELOPER, VSR_ROLE_DEVELOPER, VSR_ROLE_USER,
                          VSR_ROLE_ASSISTANT, VSR_ROLE_TOOL, VSR_ROLE_USER, VSR_ROLE_OTHER};
    for (size_t i = 0; i < 8; i++) {
        q.msgs[i].role = roles[i];
        q.msgs[i].text = VSR_SLICE_LIT("m");
    }
    q.msgs[4].has_tool_calls = 1;
    q.msgs[3].has_image = 1;
    q.chat.n_messages = 8;
    q.chat.n_tools = 2;
    q.chat.tool_choice = VSR_SLICE_LIT("required");
#define EV(name) vsr_signals_eval(s, vsr_signals_find(s, "conversation", name), &q.in)
    assert_true(EV("users").value == 2);
    assert_true(EV("users").matched); /* a count without a predicate always matches */
    assert_true(EV("non_user").value == 4); /* system + assistant + tool + developer (once) */
    assert_true(EV("all").value == 6);
    assert_true(EV("dev").value == 1);
    assert_true(EV("tools2").matched);
    assert_true(EV("calls").matched);
    assert_true(EV("images").matched);
    assert_true(EV("required").matched);
    assert_false(EV("none").matched);
    assert_false(EV("many_users").matched);
    assert_true(EV("assistants").matched);
    assert_true(EV("cycles").value == 1); /* one tool result */
    assert_true(EV("cycles").matched);
    /* the last message has another role: not in a tool loop */
    assert_false(EV("loop").matched);
    /* last message a user message right after a tool result */
    q.chat.n_messages = 7;
    assert_true(EV("loop").matched);
    assert_true(EV("loop").confidence == 1.0);
    /* last message the tool result itself */
    q.chat.n_messages = 6;
    assert_true(EV("loop").matched);
    /* last message an assistant message calling tools */
    q.chat.n_messages = 5;
    assert_true(EV("loop").matched);
    assert_false(EV("cycles").matched); /* the call is outstanding: no completed cycle yet */
    q.msgs[4].has_tool_calls = 0;
    assert_false(EV("loop").matched);
    assert_false(EV("calls").matched);
    assert_true(EV("assistants").matched);
    q.chat.n_messages = 4;
    assert_false(EV("loop").matched);

    q.chat.n_tools = 1;
    assert_false(EV("tools2").matched);
    q.chat.tool_choice = VSR_SLICE_LIT("none");
    assert_false(EV("required").matched);
    assert_true(EV("none").matched);
    q.msgs[3].has_image = 0;
    assert_false(EV("images").matched);
    /* "many_users" is gt 2 and lte 3: three users pass, four do not */
    q.chat.n_messages = 4;
    q.msgs[0].role = VSR_ROLE_USER;
    q.msgs[1].role = VSR_ROLE_USER;
    assert_true(EV("many_users").matched);
    q.msgs[2].role = VSR_ROLE_USER;
    assert_false(EV("many_users").matched);
#undef EV
    vsr_pool_free(&q.pool);
    vsr_signals_free(s);

    vsr_sig_conversation_conf_t bad = conv_conf("bad", "count", "message", "robot");
    memset(&r, 0, sizeof(r));
    r.signals.conversation = &bad;
    r.signals.n_conversation = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_null(vsr_signals_compile(&r, &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "routing.signals.conversation[0].feature.source.role"));
    vsr_buf_free(&err);
}

/* ---- language ---------------------------------------------------------------- */

static void test_language(void **st)
{
    (void)st;
    static const struct {
        const char *code, *text;
    } samples[] = {
        {"en", "Can you help me write a short poem about the sea?"},
        {"es", "¿Puedes ayudarme a escribir un poema corto sobre el mar?"},
        {"fr", "Peux-tu m'aider à écrire un court poème sur la mer ?"},
        {"de", "Kannst du mir helfen, ein kurzes Gedicht über das Meer zu schreiben?"},
        {"it", "Puoi aiutarmi a scrivere una breve poesia sul mare?"},
        {"pt", "Você pode me ajudar a escrever um pequeno poema sobre o mar?"},
        {"zh", "你能帮我写一首关于大海的短诗吗？"},
        {"zh", "請幫我翻譯這段文字。"},
        {"ja", "海についての短い詩を書くのを手伝ってくれますか？"},
        {"ru", "Можешь помочь мне написать короткое стихотворение о море?"},
        {"ar", "هل يمكنك مساعدتي في كتابة قصيدة قصيرة عن البحر؟"},
    };
    const char *codes[] = {"en", "es", "fr", "de", "it", "pt", "zh", "ja", "ru", "ar", "ZH-hant"};
    vsr_sig_language_conf_t c[VSR_ARRAY_LEN(codes)];
    memset(c, 0, sizeof(c));
    for (size_t i = 0; i < VSR_ARRAY_LEN(codes); i++)
        c[i].name = (char *)codes[i];
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.language = c;
    r.signals.n_language = VSR_ARRAY_LEN(codes);
    vsr_signals_t *s = compile_recipe(&r);
    for (size_t k = 0; k < VSR_ARRAY_LEN(samples); k++) {
        for (size_t i = 0; i < VSR_ARRAY_LEN(codes); i++) {
            vsr_signal_result_t res = eval_text(s, "language", codes[i], samples[k].text);
            int want = strcmp(codes[i], samples[k].code) == 0 || (k == 7 && i == 10);
            if (res.matched != want)
                fail_msg("text %zu (%s) vs %s: matched %d, confidence %f", k, samples[k].code, codes[i], res.matched,
                         res.confidence);
            if (want) {
                assert_true(res.confidence >= 0.3 && res.confidence <= 1.0);
                assert_true(res.value == res.confidence);
            } else {
                assert_true(res.confidence == 0);
            }
        }
    }
    assert_false(eval_text(s, "language", "en", "").matched);
    /* invalid UTF-8 is blanked before detection (this input crashed CLD2) */
    (void)eval_text(s, "language", "en", "C)!eF\xd6\x9a\xf5" "A");
    assert_true(eval_text(s, "language", "en", "\xff\xfe Can you help me write a short poem about the sea?\xc3").matched);
    vsr_signals_free(s);

    /* a threshold above the detector's confidence */
    vsr_sig_language_conf_t strict = {.name = (char *)"en", .threshold = 1.0};
    memset(&r, 0, sizeof(r));
    r.signals.language = &strict;
    r.signals.n_language = 1;
    s = compile_recipe(&r);
    vsr_signal_result_t res = eval_text(s, "language", "en", "Can you help me write a short poem about the sea?");
    assert_false(res.matched);
    assert_true(res.value > 0.5); /* detected as English, just below 1.0 */
    vsr_signals_free(s);
}

/* ---- authz ------------------------------------------------------------------ */

static void test_authz(void **st)
{
    (void)st;
    vsr_subject_conf_t subj[] = {{(char *)"User", (char *)"alice"}, {(char *)"Group", (char *)"admins"}};
    vsr_sig_authz_conf_t c = {.name = (char *)"admin", .role = (char *)"admin", .subjects = subj, .n_subjects = 2};
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.role_bindings = &c;
    r.signals.n_role_bindings = 1;
    vsr_signals_t *s = compile_recipe(&r);
    int i = vsr_signals_find(s, "authz", "admin");
    assert_true(i >= 0);
    assert_string_equal(vsr_signals_family(s, i), "authz");
    req_t q;
    req_init(&q, "hello");
    assert_false(vsr_signals_eval(s, i, &q.in).matched); /* no identity */
    q.in.identity_present = 1;
    q.in.user_id = VSR_SLICE_LIT("alice");
    vsr_signal_result_t res = vsr_signals_eval(s, i, &q.in);
    assert_true(res.matched);
    assert_true(res.confidence == 1.0);
    q.in.user_id = VSR_SLICE_LIT("Alice");
    assert_false(vsr_signals_eval(s, i, &q.in).matched);
    vsr_slice_t groups[] = {VSR_SLICE_LIT("dev"), VSR_SLICE_LIT("admins")};
    q.in.groups = groups;
    q.in.n_groups = 2;
    assert_true(vsr_signals_eval(s, i, &q.in).matched);
    q.in.n_groups = 1;
    assert_false(vsr_signals_eval(s, i, &q.in).matched);
    q.in.identity_present = 0;
    q.in.user_id = VSR_SLICE_LIT("alice");
    q.in.n_groups = 2;
    assert_false(vsr_signals_eval(s, i, &q.in).matched);
    vsr_pool_free(&q.pool);
    vsr_signals_free(s);

    vsr_subject_conf_t bad[] = {{(char *)"Robot", (char *)"r2"}};
    c.subjects = bad;
    c.n_subjects = 1;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_null(vsr_signals_compile(&r, &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "routing.signals.role_bindings[0].subjects[0].kind"));
    vsr_buf_free(&err);
}

/* ---- registry, memo, threads -------------------------------------------------- */

static void test_registry(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t kw[] = {kw_conf("same", VSR_KW_OP_OR, VSR_KW_EXACT, KW("a"))};
    vsr_sig_context_conf_t cx[] = {{.name = (char *)"same"}};
    vsr_sig_language_conf_t lg[] = {{.name = (char *)"en"}};
    vsr_recipe_conf_t r;
    memset(&r, 0, sizeof(r));
    r.signals.keywords = kw;
    r.signals.n_keywords = 1;
    r.signals.context = cx;
    r.signals.n_context = 1;
    r.signals.language = lg;
    r.signals.n_language = 1;
    vsr_signals_t *s = compile_recipe(&r);
    assert_int_equal(vsr_signals_count(s), 3);
    int k = vsr_signals_find(s, "keyword", "same");
    int c = vsr_signals_find(s, "context", "same");
    assert_true(k >= 0 && c >= 0 && k != c);
    assert_string_equal(vsr_signals_name(s, k), "same");
    assert_string_equal(vsr_signals_family(s, k), "keywords");
    assert_string_equal(vsr_signals_family(s, c), "context");
    assert_string_equal(vsr_signals_family(s, vsr_signals_find(s, "language", "en")), "language");
    assert_int_equal(vsr_signals_find(s, "keyword", "other"), -1);
    assert_int_equal(vsr_signals_find(s, "keywords", "same"), -1);
    assert_int_equal(vsr_signals_find(NULL, "keyword", "same"), -1);
    vsr_signals_free(s);
    vsr_signals_free(NULL);

    /* a recipe without signals compiles to an empty set */
    memset(&r, 0, sizeof(r));
    s = compile_recipe(&r);
    assert_int_equal(vsr_signals_count(s), 0);
    vsr_signals_free(s);

    /* duplicate names within one type are refused */
    vsr_sig_keyword_conf_t dup[] = {kw_conf("x", VSR_KW_OP_OR, VSR_KW_EXACT, KW("a")),
                                    kw_conf("x", VSR_KW_OP_OR, VSR_KW_EXACT, KW("b"))};
    memset(&r, 0, sizeof(r));
    r.signals.keywords = dup;
    r.signals.n_keywords = 2;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    assert_null(vsr_signals_compile(&r, &err));
    vsr_buf_append(&err, "", 1);
    assert_non_null(strstr(err.data, "keywords[1]: duplicate keyword signal name \"x\""));
    vsr_buf_free(&err);
}

static void test_memo_and_no_pool(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("a", VSR_KW_OP_OR, VSR_KW_EXACT, KW("alpha")),
        kw_conf("b", VSR_KW_OP_OR, VSR_KW_EXACT, KW("beta")),
        kw_conf("g", VSR_KW_OP_OR, VSR_KW_FUZZY, KW("gamma")),
    };
    vsr_signals_t *s = compile_kw(c, 3);
    req_t q;
    req_init(&q, "alpha and gamm");
    vsr_signals_memo_t memo = {0};
    q.in.memo = &memo;
    assert_true(vsr_signals_eval(s, 0, &q.in).matched);
    void *state = memo._state;
    assert_non_null(state);
    assert_false(vsr_signals_eval(s, 1, &q.in).matched);
    assert_true(vsr_signals_eval(s, 2, &q.in).matched);
    assert_ptr_equal(memo._state, state); /* reused within the request */
    /* a different text in the same request object: the memo is rebuilt */
    q.in.text = VSR_SLICE_LIT("beta only");
    assert_false(vsr_signals_eval(s, 0, &q.in).matched);
    assert_true(vsr_signals_eval(s, 1, &q.in).matched);
    assert_ptr_not_equal(memo._state, state);
    /* no pool: a temporary one per evaluation, the memo left alone */
    void *before = memo._state;
    q.in.pool = NULL;
    assert_true(vsr_signals_eval(s, 1, &q.in).matched);
    assert_false(vsr_signals_eval(s, 0, &q.in).matched);
    assert_ptr_equal(memo._state, before);
    vsr_pool_free(&q.pool);
    vsr_signals_free(s);
}

/* Many keyword signals sharing one scan give the same answers with and
 * without a memo. */
static void test_many_signals_shared_scan(void **st)
{
    (void)st;
    enum { NSIG = 20, NKW = 10 };
    static char words[NSIG * NKW][32];
    static char *lists[NSIG][NKW];
    vsr_sig_keyword_conf_t c[NSIG];
    for (unsigned i = 0; i < NSIG; i++) {
        for (unsigned j = 0; j < NKW; j++) {
            snprintf(words[i * NKW + j], sizeof(words[0]), "w%ux%u", i, j);
            lists[i][j] = words[i * NKW + j];
        }
        c[i] = kw_conf("", i % 3 == 1 ? VSR_KW_OP_AND : VSR_KW_OP_OR, VSR_KW_EXACT, lists[i], NKW);
        c[i].case_sensitive = i % 2;
        static char names[NSIG][16];
        snprintf(names[i], sizeof(names[i]), "s%u", i);
        c[i].name = names[i];
    }
    vsr_signals_t *s = compile_kw(c, NSIG);
    const char *text = "start w0x3 W2X9 w4x4 w6x0 xw8x1 w10x2, w12x5 w1x1 "
                       "w7x0 w7x1 w7x2 w7x3 w7x4 w7x5 w7x6 w7x7 w7x8 w7x9 end";
    req_t q;
    req_init(&q, text);
    vsr_signals_memo_t memo = {0};
    for (int i = 0; i < NSIG; i++) {
        q.in.memo = NULL;
        vsr_signal_result_t a = vsr_signals_eval(s, i, &q.in);
        q.in.memo = &memo;
        vsr_signal_result_t b = vsr_signals_eval(s, i, &q.in);
        assert_int_equal(a.matched, b.matched);
        /* expected: OR signals (i % 3 != 1) with one of their words present
         * as a whole word (s2 is case-insensitive, s8 only inside "xw8x1"),
         * and the AND signal s7 whose ten words are all there */
        int want = i == 0 || i == 2 || i == 6 || i == 7 || i == 12;
        if (a.matched != want)
            fail_msg("signal s%d matched %d", i, a.matched);
    }
    vsr_pool_free(&q.pool);
    vsr_signals_free(s);
}

/* The scan against a plain search on random texts: keywords that share
 * prefixes and suffixes, over an alphabet dense in their letters, so the
 * automaton leaves and re-enters its root state at every kind of place. */
static int word_byte(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

static int naive_word_match(const char *text, const char *kw)
{
    size_t n = strlen(text), k = strlen(kw);
    for (size_t i = 0; i + k <= n; i++) {
        size_t j = 0;
        while (j < k && (text[i + j] | 0x20) == kw[j])
            j++;
        if (j == k && (i == 0 || !word_byte(text[i - 1])) && (i + k == n || !word_byte(text[i + k])))
            return 1;
    }
    return 0;
}

static void test_keyword_scan_matches_plain_search(void **st)
{
    (void)st;
    static char *kws[] = {"ab", "abc", "bca", "c", "cab", "aab"};
    enum { NK = sizeof(kws) / sizeof(kws[0]) };
    vsr_sig_keyword_conf_t c[NK];
    static char names[NK][8];
    for (unsigned i = 0; i < NK; i++) {
        c[i] = kw_conf("", VSR_KW_OP_OR, VSR_KW_EXACT, &kws[i], 1);
        snprintf(names[i], sizeof(names[i]), "k%u", i);
        c[i].name = names[i];
    }
    vsr_signals_t *s = compile_kw(c, NK);
    static const char alphabet[] = "aAbBcx .";
    unsigned seed = 12345;
    for (int round = 0; round < 3000; round++) {
        char text[48];
        seed = seed * 1103515245u + 12345u;
        size_t len = (seed >> 16) % (sizeof(text) - 1);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            text[i] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
        }
        text[len] = '\0';
        for (unsigned i = 0; i < NK; i++)
            if (kw_match(s, names[i], text) != naive_word_match(text, kws[i]))
                fail_msg("keyword %s over \"%s\": the scan says %d", kws[i], text, !naive_word_match(text, kws[i]));
    }
    vsr_signals_free(s);
}

typedef struct {
    const vsr_signals_t *s;
    int ok;
} thread_arg_t;

static void *thread_main(void *p)
{
    thread_arg_t *a = p;
    a->ok = 1;
    for (int n = 0; n < 200; n++) {
        const char *text = n % 2 ? "please refund my invoice, urgnt" : "nothing to see";
        req_t q;
        req_init(&q, text);
        vsr_signals_memo_t memo = {0};
        q.in.memo = &memo;
        for (size_t i = 0; i < vsr_signals_count(a->s); i++) {
            vsr_signal_result_t r = vsr_signals_eval(a->s, (int)i, &q.in);
            if (r.matched != (n % 2))
                a->ok = 0;
        }
        vsr_pool_free(&q.pool);
    }
    return NULL;
}

static void test_threads(void **st)
{
    (void)st;
    vsr_sig_keyword_conf_t c[] = {
        kw_conf("exact", VSR_KW_OP_AND, VSR_KW_EXACT, KW("refund", "invoice")),
        kw_conf("regex", VSR_KW_OP_OR, VSR_KW_REGEX, KW("ref+und")),
        kw_conf("fuzzy", VSR_KW_OP_OR, VSR_KW_FUZZY, KW("urgent")),
        kw_conf("ngram", VSR_KW_OP_OR, VSR_KW_NGRAM, KW("invoices")),
        kw_conf("bm25", VSR_KW_OP_OR, VSR_KW_BM25, KW("refund")),
    };
    vsr_signals_t *s = compile_kw(c, VSR_ARRAY_LEN(c));
    pthread_t th[4];
    thread_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i].s = s;
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(args[i].ok);
    }
    vsr_signals_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keyword_word_boundaries),
        cmocka_unit_test(test_keyword_case_sensitive),
        cmocka_unit_test(test_keyword_cjk_substring),
        cmocka_unit_test(test_keyword_operators),
        cmocka_unit_test(test_keyword_overlapping_keywords),
        cmocka_unit_test(test_keyword_regex),
        cmocka_unit_test(test_keyword_regex_compile_error),
        cmocka_unit_test(test_keyword_fuzzy),
        cmocka_unit_test(test_keyword_ngram),
        cmocka_unit_test(test_keyword_bm25),
        cmocka_unit_test(test_context),
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_structure_errors),
        cmocka_unit_test(test_conversation),
        cmocka_unit_test(test_language),
        cmocka_unit_test(test_authz),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_memo_and_no_pool),
        cmocka_unit_test(test_many_signals_shared_scan),
        cmocka_unit_test(test_keyword_scan_matches_plain_search),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
