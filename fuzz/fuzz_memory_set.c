/* fuzz_memory_set.c — arbitrary bytes as a user's set of memories as the
 * store returns it (what another replica, or anything else with access to the
 * Redis server, wrote).  Beyond "no crash, no leak": a set that decodes stays
 * within its bounds, encodes back to the same bytes, and can be searched and
 * written after a turn. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "plugins/plugins.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_memory_set: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_memory_set_t set;
    if (vsr_memory_decode(vsr_slice((const char *)data, size), &pool, &set) != VSR_OK) {
        vsr_pool_free(&pool);
        return 0;
    }
    check(set.dim >= 1 && set.dim <= VSR_MEMORY_MAX_DIM && set.n <= VSR_MEMORY_MAX_PER_USER, "bounds");
    for (size_t i = 0; i < set.n; i++)
        check(set.items[i].text.len <= VSR_MEMORY_MAX_TEXT, "text bound");
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr_memory_encode(&set, &out);
    check(out.len == size && memcmp(out.data, data, size) == 0, "the set encodes back to its bytes");
    /* searched with a unit query of its dimension, every gate on, hybrid */
    vsr_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    vsr_plugin_memory_conf_t m = {.enabled = 1, .hybrid_search = 1, .has_hybrid_search = 1,
                                  .similarity_threshold = 0, .has_similarity_threshold = 1};
    float *q = vsr_pool_alloc(&pool, set.dim * sizeof(float));
    memset(q, 0, set.dim * sizeof(float));
    q[0] = 1;
    vsr_slice_t *texts;
    size_t n = vsr_memory_select(&cfg, &m, &set, q, set.dim, VSR_SLICE_LIT("what did I say about it"), 1000, &pool,
                                 &texts);
    check(n <= 5, "retrieval_limit");
    /* and written after a turn: the result decodes again */
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"remember that the answer is forty two\"}]}";
    vsr_json_t j;
    vsr_chat_view_t chat;
    if (vsr_json_parse(&j, body, strlen(body), NULL) == VSR_OK &&
        vsr_chat_view_build(&j, VSR_API_CHAT, &pool, &chat, NULL) == VSR_OK) {
        vsr_buf_reset(&out);
        if (vsr_memory_remember(&cfg, &set, q, set.dim, &chat, VSR_SLICE_LIT("Noted: forty two."), 2000, &pool, &out)) {
            vsr_memory_set_t again;
            check(vsr_memory_decode(vsr_buf_slice(&out), &pool, &again) == VSR_OK, "a written set decodes");
            check(again.n >= 1 && again.n <= VSR_MEMORY_DEFAULT_MAX_PER_USER, "the written set's bound");
        }
    }
    vsr_json_free(&j);
    vsr_buf_free(&out);
    vsr_pool_free(&pool);
    return 0;
}
