/*
 * plugins_bench.c — the cost of the body-rewriting request plugins on long
 * chat bodies: context_compression (BM25 extraction down to a quarter of the
 * request) and tools (mode none with strip_tool_history), per request, from
 * the parsed body and chat view to the edits (parsing not included).
 *
 *   build/plugins_bench [ROUNDS]     (default 50 per size)
 *
 * Prints, per body size, the median time per request and the throughput in
 * MB/s of message text.  Not a test: no pass/fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plugins/plugins.h"

static const char *sentences[] = {
    "The elephant enclosure was cleaned in the morning.",
    "Penguins need cold water and a steady supply of fish.",
    "An adult kangaroo eats about two kilograms of grass and hay per day.",
    "The giraffe house roof leaked during the storm last week.",
    "Visitors asked many questions about the new tiger cubs.",
    "Flamingos turn pink because of the carotenoids in their food.",
    "Our zebra foal was weighed and is growing well.",
};

/* A conversation of about `bytes` of text: turns of user, assistant with a
 * tool call, tool output, assistant answer; then the question. */
static void build(vsr_buf_t *b, size_t bytes)
{
    vsr_buf_append_cstr(b, "{\"model\":\"auto\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\"}}],"
                           "\"messages\":[{\"role\":\"system\",\"content\":\"You help zoo keepers.\"}");
    size_t k = 0;
    static const char *roles[] = {"user", "assistant", "tool", "assistant"};
    while (b->len < bytes) {
        for (size_t r = 0; r < 4; r++) {
            vsr_buf_append_cstr(b, ",{\"role\":\"");
            vsr_buf_append_cstr(b, roles[r]);
            vsr_buf_append_cstr(b, r == 2 ? "\",\"tool_call_id\":\"c\",\"content\":\"" : "\",\"content\":\"");
            for (size_t s = 0; s < 12; s++) {
                vsr_buf_append_cstr(b, sentences[k++ % VSR_ARRAY_LEN(sentences)]);
                vsr_buf_append_cstr(b, " ");
            }
            vsr_buf_append_cstr(b, r == 1 ? "\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                                            "{\"name\":\"w\",\"arguments\":\"{}\"}}]}"
                                          : "\"}");
        }
    }
    vsr_buf_append_cstr(b, ",{\"role\":\"user\",\"content\":\"How much does a kangaroo eat per day?\"}]}");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double run(const vsr_buf_t *body, vsr_plugin_conf_t *p, int rounds, uint64_t *text_bytes, size_t *n_edits)
{
    double *t = calloc((size_t)rounds, sizeof(*t));
    for (int r = 0; r < rounds; r++) {
        vsr_json_t j;
        vsr_pool_t pool;
        vsr_chat_view_t chat;
        vsr_json_edits_t ed;
        vsr_plugin_ctx_t ctx;
        vsr_pool_init(&pool);
        if (vsr_json_parse(&j, body->data, body->len, NULL) != VSR_OK ||
            vsr_chat_view_build(&j, VSR_API_CHAT, &pool, &chat, NULL) != VSR_OK) {
            fprintf(stderr, "bad body\n");
            exit(1);
        }
        *text_bytes = chat.text_bytes;
        vsr_json_edits_init(&ed);
        vsr_plugin_ctx_init(&ctx, &j, &chat, &ed, &pool);
        vsr_decision_conf_t d = {0};
        d.name = "bench";
        d.plugins = p;
        d.n_plugins = 1;
        const char *why;
        double t0 = now_s();
        int rc = vsr_plugins_run_request(&d, &ctx, &why);
        t[r] = now_s() - t0;
        if (rc != VSR_OK) {
            fprintf(stderr, "plugin failed: %s\n", why);
            exit(1);
        }
        *n_edits = ed.n;
        vsr_json_edits_free(&ed);
        vsr_json_free(&j);
        vsr_pool_free(&pool);
    }
    qsort(t, (size_t)rounds, sizeof(*t), cmp_d);
    double med = t[rounds / 2];
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    if (rounds < 1)
        rounds = 1;
    static const size_t sizes[] = {16u << 10, 256u << 10, 4u << 20};
    printf("%-10s %-22s %12s %10s %8s\n", "body", "plugin", "median_us", "MB/s", "edits");
    for (size_t i = 0; i < VSR_ARRAY_LEN(sizes); i++) {
        vsr_buf_t b;
        vsr_buf_init(&b, 0);
        build(&b, sizes[i]);
        uint64_t est = (b.len + 3) / 4;

        vsr_plugin_conf_t cc = {0};
        cc.kind = VSR_PLUGIN_CONTEXT_COMPRESSION;
        cc.enabled = cc.u.context_compression.enabled = 1;
        cc.u.context_compression.trigger_tokens = est / 2;
        cc.u.context_compression.target_tokens = est / 4;
        cc.u.context_compression.targets[0] = VSR_CC_TOOL_RESULTS;
        cc.u.context_compression.targets[1] = VSR_CC_HISTORY;
        cc.u.context_compression.n_targets = 2;

        vsr_plugin_conf_t tl = {0};
        tl.kind = VSR_PLUGIN_TOOLS;
        tl.enabled = tl.u.tools.enabled = 1;
        tl.u.tools.mode = VSR_TOOLS_NONE;
        tl.u.tools.strip_tool_history = 1;

        struct {
            const char *name;
            vsr_plugin_conf_t *p;
        } cases[] = {{"context_compression", &cc}, {"tools none+strip", &tl}};
        for (size_t c = 0; c < VSR_ARRAY_LEN(cases); c++) {
            uint64_t text = 0;
            size_t edits = 0;
            double med = run(&b, cases[c].p, rounds, &text, &edits);
            printf("%-10zu %-22s %12.1f %10.1f %8zu\n", b.len, cases[c].name, med * 1e6,
                   med > 0 ? (double)text / med / 1e6 : 0.0, edits);
        }
        vsr_buf_free(&b);
    }
    return 0;
}
