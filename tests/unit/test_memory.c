/* test_memory.c — the memory plugin's pieces (src/plugins/memory.c): the
 * stored set's form and its bounds, retrieval (threshold, limit, the
 * reflection gate), greetings, and the set after a turn (low-entropy turns,
 * session chunks, max_memories_per_user). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "plugins/plugins.h"

#define DIM 4

static const float E0[DIM] = {1, 0, 0, 0}, E1[DIM] = {0, 1, 0, 0};
static const float E01[DIM] = {0.70710678f, 0.70710678f, 0, 0};

static vsr_memory_item_t item(const char *text, const float *v, uint64_t created, float imp)
{
    return (vsr_memory_item_t){.created_ms = created, .importance = imp, .text = vsr_slice_cstr(text), .vec = v};
}

static void round_trip(vsr_pool_t *pool, const vsr_memory_set_t *in, vsr_memory_set_t *out, vsr_buf_t *b)
{
    vsr_buf_init(b, 0);
    vsr_memory_encode(in, b);
    assert_int_equal(vsr_memory_decode(vsr_buf_slice(b), pool, out), VSR_OK);
}

static void test_codec(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_memory_item_t items[2] = {item("Q: a\nA: b", E0, 1000, 0.5f), item("", E1, 2000, 0.7f)};
    vsr_memory_set_t s = {.dim = DIM, .n = 2, .turns = 7, .items = items}, o;
    vsr_buf_t b;
    round_trip(&pool, &s, &o, &b);
    assert_int_equal(o.n, 2);
    assert_int_equal(o.dim, DIM);
    assert_int_equal(o.turns, 7);
    assert_true(vsr_slice_eq_cstr(o.items[0].text, "Q: a\nA: b"));
    assert_int_equal(o.items[1].created_ms, 2000);
    assert_true(o.items[1].vec[1] == 1.0f);
    /* every truncation, and a byte more, is refused: never a partial set */
    for (size_t len = 0; len < b.len; len++)
        assert_int_equal(vsr_memory_decode(vsr_slice(b.data, len), &pool, &o), VSR_ERR_INVALID);
    vsr_buf_append(&b, "x", 1);
    assert_int_equal(vsr_memory_decode(vsr_buf_slice(&b), &pool, &o), VSR_ERR_INVALID);
    /* a count past the bound */
    b.len--;
    b.data[12] = (char)0xff;
    assert_int_equal(vsr_memory_decode(vsr_buf_slice(&b), &pool, &o), VSR_ERR_INVALID);
    assert_int_equal(vsr_memory_decode(VSR_SLICE_LIT("not a set"), &pool, &o), VSR_ERR_INVALID);
    vsr_buf_free(&b);
    vsr_pool_free(&pool);
}

static void test_select(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    uint64_t now = 100ull * 86400000;
    vsr_memory_item_t items[4] = {
        item("Q: what is my dog called\nA: Biscuit", E0, now, 0.5f),
        item("Q: where do I live\nA: Lisbon", E1, now, 0.5f),
        item("Q: what is my dog called\nA: Biscuit", E0, now - 1000, 0.5f), /* a near-duplicate */
        item("Q: my password is hunter2\nA: ok", E01, now, 0.5f),
    };
    vsr_memory_set_t s = {.dim = DIM, .n = 4, .items = items};
    vsr_plugin_memory_conf_t m = {.enabled = 1, .similarity_threshold = 0.6, .has_similarity_threshold = 1};
    vsr_slice_t *out;
    /* threshold: E1 (cos 0) never; the duplicate goes (dedup 0.9) */
    size_t n = vsr_memory_select(&cfg, &m, &s, E0, DIM, VSR_SLICE_LIT("dog"), now, &pool, &out);
    assert_int_equal(n, 2);
    assert_true(vsr_slice_eq_cstr(out[0], "Q: what is my dog called\nA: Biscuit"));
    assert_true(vsr_slice_eq_cstr(out[1], "Q: my password is hunter2\nA: ok"));
    /* block_patterns drop a memory */
    char *pat[] = {"pass(word)?[[:space:]]+is"};
    m.reflection.block_patterns = (vsr_strlist_conf_t){pat, 1};
    m.reflection.has_block_patterns = 1;
    n = vsr_memory_select(&cfg, &m, &s, E0, DIM, VSR_SLICE_LIT("dog"), now, &pool, &out);
    assert_int_equal(n, 1);
    /* the gate off (algorithm noop): the duplicate stays, limited by retrieval_limit */
    m.reflection.noop = m.reflection.has_algorithm = 1;
    m.retrieval_limit = 2;
    m.has_retrieval_limit = 1;
    n = vsr_memory_select(&cfg, &m, &s, E0, DIM, VSR_SLICE_LIT("dog"), now, &pool, &out);
    assert_int_equal(n, 2);
    assert_true(vsr_slice_eq_cstr(out[1], "Q: what is my dog called\nA: Biscuit"));
    /* another dimension (a changed embedding model): nothing */
    assert_int_equal(vsr_memory_select(&cfg, &m, &s, E0, DIM - 1, VSR_SLICE_LIT("dog"), now, &pool, &out), 0);
    /* the injected text is the reference's */
    vsr_slice_t t = vsr_memory_context(&pool, (vsr_slice_t[]){VSR_SLICE_LIT("a"), VSR_SLICE_LIT("b")}, 2);
    assert_true(vsr_slice_eq_cstr(t, "The following is relevant context from previous conversations with the user:\n\n"
                                     "- a\n- b\n\nUse this context to personalize your response when relevant. "
                                     "Do not repeat it verbatim unless asked."));
    vsr_pool_free(&pool);
}

/* hybrid_search: among equally similar memories, the one sharing the query's words wins (weighted and rrf) */
static void test_hybrid(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    vsr_memory_item_t items[3] = {item("apples and oranges", E0, 0, 0.5f), item("pears and plums", E0, 0, 0.5f),
                                  item("the dog is called Biscuit", E0, 0, 0.5f)};
    vsr_memory_set_t s = {.dim = DIM, .n = 3, .items = items};
    vsr_plugin_memory_conf_t m = {.enabled = 1, .retrieval_limit = 1, .has_retrieval_limit = 1};
    m.reflection.noop = m.reflection.has_algorithm = 1;
    vsr_slice_t *out;
    assert_int_equal(vsr_memory_select(&cfg, &m, &s, E0, DIM, VSR_SLICE_LIT("Biscuit the dog"), 0, &pool, &out), 1);
    assert_true(vsr_slice_eq_cstr(out[0], "apples and oranges")); /* vector only: a tie, the first */
    m.hybrid_search = m.has_hybrid_search = 1;
    assert_int_equal(vsr_memory_select(&cfg, &m, &s, E0, DIM, VSR_SLICE_LIT("Biscuit the dog"), 0, &pool, &out), 1);
    assert_true(vsr_slice_eq_cstr(out[0], "the dog is called Biscuit"));
    /* rrf: vector ranks apples, dog, pears; BM25 ranks dog, pears ("the"), apples: dog has the best sum */
    static const float P[DIM] = {0.65f, 0.76f, 0, 0};
    vsr_memory_item_t r[3] = {item("apples and oranges", E0, 0, 0.5f), item("the dog is called Biscuit", E01, 0, 0.5f),
                              item("the pears and plums", P, 0, 0.5f)};
    vsr_memory_set_t rs = {.dim = DIM, .n = 3, .items = r};
    m.hybrid_rrf = m.has_hybrid_mode = 1;
    assert_int_equal(vsr_memory_select(&cfg, &m, &rs, E0, DIM, VSR_SLICE_LIT("Biscuit the dog"), 0, &pool, &out), 1);
    assert_true(vsr_slice_eq_cstr(out[0], "the dog is called Biscuit"));
    m.hybrid_search = 0; /* vector only */
    assert_int_equal(vsr_memory_select(&cfg, &m, &rs, E0, DIM, VSR_SLICE_LIT("Biscuit the dog"), 0, &pool, &out), 1);
    assert_true(vsr_slice_eq_cstr(out[0], "apples and oranges"));
    vsr_pool_free(&pool);
}

static void test_greetings(void **state)
{
    (void)state;
    assert_true(vsr_memory_is_greeting(VSR_SLICE_LIT("Hello!")));
    assert_true(vsr_memory_is_greeting(VSR_SLICE_LIT("  thank you. ")));
    assert_true(vsr_memory_is_greeting(VSR_SLICE_LIT("good morning")));
    assert_true(vsr_memory_is_greeting(VSR_SLICE_LIT("what's up?")));
    assert_false(vsr_memory_is_greeting(VSR_SLICE_LIT("hello, what is my dog called?")));
    assert_false(vsr_memory_is_greeting(VSR_SLICE_LIT("okay okay okay okay okay okay")));
    assert_true(vsr_memory_personal(VSR_SLICE_LIT("What did I say about the budget?")));
    assert_true(vsr_memory_personal(VSR_SLICE_LIT("where is MY car")));
    assert_true(vsr_memory_personal(VSR_SLICE_LIT("I've moved; remind me")));
    assert_false(vsr_memory_personal(VSR_SLICE_LIT("What is the capital of France?")));
    assert_false(vsr_memory_personal(VSR_SLICE_LIT("mystery of the island")));
}

static void chat_of(vsr_pool_t *pool, const char *src, vsr_json_t *j, vsr_chat_view_t *chat)
{
    assert_int_equal(vsr_json_parse(j, src, strlen(src), NULL), VSR_OK);
    assert_int_equal(vsr_chat_view_build(j, VSR_API_CHAT, pool, chat, NULL), VSR_OK);
}

static void test_remember(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    vsr_json_t j;
    vsr_chat_view_t chat;
    vsr_memory_set_t empty = {0}, o;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    chat_of(&pool, "{\"messages\":[{\"role\":\"user\",\"content\":\"My dog is called Biscuit.\"}]}", &j, &chat);
    /* the Q/A pair, <think> removed */
    vsr_slice_t said = VSR_SLICE_LIT("<think>hm</think> Noted, Biscuit.");
    assert_int_equal(vsr_memory_remember(&cfg, &empty, E0, DIM, &chat, said, 5000, &pool, &b), 1);
    assert_int_equal(vsr_memory_decode(vsr_buf_slice(&b), &pool, &o), VSR_OK);
    assert_int_equal(o.n, 1);
    assert_true(vsr_slice_eq_cstr(o.items[0].text, "Q: My dog is called Biscuit.\nA: Noted, Biscuit."));
    assert_true(o.items[0].importance == 0.5f);
    /* a refusal, or a greeting, is not kept */
    vsr_buf_reset(&b);
    assert_int_equal(vsr_memory_remember(&cfg, &empty, E0, DIM, &chat,
                                         VSR_SLICE_LIT("I'm sorry, I can't help with that."), 5000, &pool, &b), 0);
    vsr_json_free(&j);
    chat_of(&pool, "{\"messages\":[{\"role\":\"user\",\"content\":\"thanks!\"}]}", &j, &chat);
    assert_int_equal(vsr_memory_remember(&cfg, &empty, E0, DIM, &chat,
                                         VSR_SLICE_LIT("You are welcome, any time at all."), 5000, &pool, &b), 0);
    vsr_json_free(&j);
    /* the third user turn: the pair and the session chunk of the turns so far */
    chat_of(&pool,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"u1\"},{\"role\":\"assistant\",\"content\":\"a1\"},"
            "{\"role\":\"user\",\"content\":\"u2\"},{\"role\":\"assistant\",\"content\":\"a2\"},"
            "{\"role\":\"user\",\"content\":\"and what about the third question here?\"}]}",
            &j, &chat);
    vsr_buf_reset(&b);
    assert_int_equal(vsr_memory_remember(&cfg, &empty, E0, DIM, &chat, VSR_SLICE_LIT("the third answer"), 5000, &pool,
                                         &b), 1);
    assert_int_equal(vsr_memory_decode(vsr_buf_slice(&b), &pool, &o), VSR_OK);
    assert_int_equal(o.n, 2);
    assert_true(vsr_slice_eq_cstr(o.items[1].text, "Q: u1\nA: a1\n---\nQ: u2\nA: a2\n---\n"
                                                   "Q: and what about the third question here?\nA: the third answer"));
    assert_true(o.items[1].importance == 0.7f);
    /* max_memories_per_user: the weakest (lowest importance, then oldest) go */
    cfg.mem_store.max_memories_per_user = 2;
    vsr_memory_item_t items[2] = {item("old pair", E1, 1000, 0.5f), item("old chunk", E1, 1000, 0.7f)};
    vsr_memory_set_t full = {.dim = DIM, .n = 2, .items = items};
    vsr_buf_reset(&b);
    assert_int_equal(vsr_memory_remember(&cfg, &full, E0, DIM, &chat, VSR_SLICE_LIT("the third answer"), 5000, &pool,
                                         &b), 1);
    assert_int_equal(vsr_memory_decode(vsr_buf_slice(&b), &pool, &o), VSR_OK);
    assert_int_equal(o.n, 2);
    assert_true(vsr_slice_eq_cstr(o.items[0].text, "old chunk"));
    assert_true(o.items[1].importance == 0.7f);
    /* prune_threshold: weaker memories go on a write whatever the count */
    cfg.mem_store.max_memories_per_user = 0;
    cfg.mem_store.prune_threshold = 0.6;
    vsr_buf_reset(&b);
    assert_int_equal(vsr_memory_remember(&cfg, &full, E0, DIM, &chat, VSR_SLICE_LIT("the third answer"), 5000, &pool,
                                         &b), 1);
    assert_int_equal(vsr_memory_decode(vsr_buf_slice(&b), &pool, &o), VSR_OK);
    assert_int_equal(o.n, 3); /* old chunk (0.7), the new pair and chunk; the old pair (0.5) went */
    assert_true(vsr_slice_eq_cstr(o.items[0].text, "old chunk"));
    vsr_json_free(&j);
    vsr_buf_free(&b);
    vsr_pool_free(&pool);
}

/* The rewrite's request: the last five non-system messages with text, the
 * current turn as the query; its answer: <think>, spaces and quotes gone. */
static void test_rewrite(void **state)
{
    (void)state;
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_json_t j, r;
    vsr_chat_view_t chat;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    chat_of(&pool,
            "{\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"u1\"},"
            "{\"role\":\"assistant\",\"content\":\"a1\"},{\"role\":\"user\",\"content\":\"u2\"},"
            "{\"role\":\"assistant\",\"content\":\"\"},{\"role\":\"assistant\",\"content\":\"a2\"},"
            "{\"role\":\"user\",\"content\":\"u3\"},{\"role\":\"user\",\"content\":\"when?\"}]}",
            &j, &chat);
    vsr_memory_rewrite_request(&b, "rw", &chat);
    assert_int_equal(vsr_json_parse(&r, b.data, b.len, NULL), VSR_OK);
    uint32_t model;
    vsr_slice_t t;
    assert_int_equal(vsr_json_object_get(&r, 0, "model", &model), VSR_OK);
    assert_int_equal(vsr_json_string(&r, model, &pool, &t), VSR_OK);
    assert_true(vsr_slice_eq_cstr(t, "rw"));
    vsr_chat_view_t sent;
    assert_int_equal(vsr_chat_view_build(&r, VSR_API_CHAT, &pool, &sent, NULL), VSR_OK);
    assert_int_equal(sent.n_messages, 2);
    assert_int_equal(sent.messages[0].role, VSR_ROLE_SYSTEM);
    assert_true(vsr_slice_starts_with(sent.messages[0].text, VSR_SLICE_LIT("You are a query rewriter for semantic")));
    assert_true(vsr_slice_eq_cstr(sent.messages[1].text, "History:\n[assistant]: a1\n[user]: u2\n[assistant]: a2\n[user]: u3\n[user]: "
                                     "when?\n\nQuery: when?\n\nRewritten query:"));
    vsr_json_free(&r);
    vsr_json_free(&j);
    assert_true(vsr_slice_eq_cstr(vsr_memory_rewrite_result(&pool, VSR_SLICE_LIT("<think>x</think> \"'When is it?'\" ")),
                                  "When is it?"));
    assert_int_equal(vsr_memory_rewrite_result(&pool, VSR_SLICE_NULL).len, 0);
    assert_int_equal(vsr_memory_rewrite_result(&pool, VSR_SLICE_LIT(" \"\" ")).len, 0);
    vsr_buf_free(&b);
    vsr_pool_free(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_hybrid),
        cmocka_unit_test(test_greetings),
        cmocka_unit_test(test_remember),
        cmocka_unit_test(test_rewrite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
