/* test_plugins_tools.c — the tools and context_compression plugins on
 * realistic chat bodies: the edited body is re-parsed and asserted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "plugins/plugins.h"

/* ---- fixtures ------------------------------------------------------------- */

typedef struct {
    vsr_json_t j;
    vsr_pool_t pool;
    vsr_chat_view_t chat;
    vsr_json_edits_t ed;
    vsr_plugin_ctx_t ctx;
    const char *src;
    const char *why;
    const char *out; /* after fx_apply */
    vsr_json_t oj;   /* the output, parsed */
} fx_t;

static void fx_open(fx_t *f, const char *src, vsr_api_kind_t api)
{
    memset(f, 0, sizeof(*f));
    f->src = src;
    vsr_pool_init(&f->pool);
    assert_int_equal(vsr_json_parse(&f->j, src, strlen(src), NULL), VSR_OK);
    assert_int_equal(vsr_chat_view_build(&f->j, api, &f->pool, &f->chat, NULL), VSR_OK);
    vsr_json_edits_init(&f->ed);
    vsr_plugin_ctx_init(&f->ctx, &f->j, &f->chat, &f->ed, &f->pool);
}

static void fx_close(fx_t *f)
{
    vsr_json_free(&f->oj);
    vsr_json_edits_free(&f->ed);
    vsr_json_free(&f->j);
    vsr_pool_free(&f->pool);
}

static int fx_run(fx_t *f, vsr_plugin_conf_t *plugins, size_t n)
{
    vsr_decision_conf_t d;
    memset(&d, 0, sizeof(d));
    d.name = (char *)"test";
    d.plugins = plugins;
    d.n_plugins = n;
    f->why = "unset";
    return vsr_plugins_run_request(&d, &f->ctx, &f->why);
}

/* Applies the edits, checks the output parses, returns it. */
static const char *fx_apply(fx_t *f)
{
    size_t n;
    uint64_t total;
    vsr_slice_t *p = vsr_json_edits_apply(&f->ed, f->src, strlen(f->src), &f->pool, &n, &total);
    char *s = vsr_pool_alloc(&f->pool, total + 1);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + w, p[i].p, p[i].len);
        w += p[i].len;
    }
    s[w] = '\0';
    f->out = s;
    vsr_json_free(&f->oj);
    if (vsr_json_parse(&f->oj, s, w, NULL) != VSR_OK)
        fail_msg("output does not parse: %s", s);
    return s;
}

static void expect_out(fx_t *f, const char *want)
{
    const char *got = fx_apply(f);
    if (strcmp(got, want) != 0)
        fail_msg("\n got  %s\n want %s", got, want);
}

/* The unescaped string at a path of the output: keys, or "#N" for an
 * array index; NULL when absent or not a string. */
static const char *out_string(fx_t *f, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    uint32_t t = 0;
    for (char *seg = strtok(buf, "."); seg; seg = strtok(NULL, ".")) {
        if (seg[0] == '#') {
            long idx = strtol(seg + 1, NULL, 10);
            if (vsr_json_type(&f->oj, t) != VSR_JSON_ARRAY || idx >= (long)f->oj.toks[t].count)
                return NULL;
            uint32_t c = t + 1;
            for (long i = 0; i < idx; i++)
                c = f->oj.toks[c].next;
            t = c;
        } else if (vsr_json_object_get(&f->oj, t, seg, &t) != VSR_OK) {
            return NULL;
        }
    }
    vsr_slice_t s;
    if (vsr_json_string(&f->oj, t, &f->pool, &s) != VSR_OK)
        return NULL;
    return vsr_pool_strndup(&f->pool, s.p, s.len);
}

static vsr_plugin_conf_t system_prompt(const char *text, int insert)
{
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_SYSTEM_PROMPT;
    p.enabled = 1;
    p.u.system_prompt.enabled = 1;
    p.u.system_prompt.insert = insert;
    p.u.system_prompt.system_prompt = (char *)text;
    return p;
}


static vsr_plugin_conf_t tools(vsr_tools_mode_t mode)
{
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_TOOLS;
    p.enabled = 1;
    p.u.tools.enabled = 1;
    p.u.tools.mode = mode;
    return p;
}

static vsr_plugin_conf_t compression(uint64_t trigger, uint64_t target, int fail_closed)
{
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_CONTEXT_COMPRESSION;
    p.enabled = 1;
    p.u.context_compression.enabled = 1;
    p.u.context_compression.trigger_tokens = trigger;
    p.u.context_compression.target_tokens = target;
    p.u.context_compression.targets[0] = VSR_CC_TOOL_RESULTS;
    p.u.context_compression.targets[1] = VSR_CC_HISTORY;
    p.u.context_compression.n_targets = 2;
    p.u.context_compression.fail_closed = fail_closed;
    return p;
}

static void expect_unchanged(fx_t *f)
{
    assert_int_equal(f->ed.n, 0);
    expect_out(f, f->src);
}

/* The number of elements of the array at a path of the output (-1: none). */
static long out_count(fx_t *f, const char *key)
{
    uint32_t t;
    if (vsr_json_object_get(&f->oj, 0, key, &t) != VSR_OK || vsr_json_type(&f->oj, t) != VSR_JSON_ARRAY)
        return -1;
    return f->oj.toks[t].count;
}

/* ---- tools ------------------------------------------------------------------------ */

#define TOOL(n) "{\"type\":\"function\",\"function\":{\"name\":\"" n "\",\"parameters\":{}}}"

static const char *TOOLS_BODY = "{\"model\":\"auto\",\"tools\":[" TOOL("search") "," TOOL("calc") "," TOOL("shell")
                                "],\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,"
                                "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":0}";

static void test_tools_none(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    vsr_plugin_conf_t p = tools(VSR_TOOLS_NONE);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_applied, 1);
    assert_int_equal(f.ctx.tools_before, 3);
    assert_int_equal(f.ctx.tools_after, 0);
    expect_out(&f, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":0}");
    fx_close(&f);

    /* the legacy functions too; a body without tools is left alone */
    fx_open(&f, "{\"functions\":[{\"name\":\"f\"}],\"function_call\":\"auto\",\"messages\":[]}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[]}");
    fx_close(&f);
    fx_open(&f, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_before, 0);
    expect_unchanged(&f);
    fx_close(&f);
}

/* a tool loop: the calls and their results go, the answers stay */
static const char *HISTORY_BODY =
    "{\"model\":\"auto\",\"tools\":[" TOOL("weather") "],\"messages\":["
    "{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"weather\",\"arguments\":\"{}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"18C, sunny\"},"
    "{\"role\":\"assistant\",\"content\":\"Sunny, 18C. Checking Rome.\",\"tool_calls\":[{\"id\":\"c2\","
    "\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"{}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"25C\"},"
    "{\"role\":\"function\",\"name\":\"weather\",\"content\":\"25C\"},"
    "{\"role\":\"assistant\",\"tool_calls\":[]},"
    "{\"role\":\"user\",\"content\":\"Thanks. And tomorrow?\"}]}";

static void test_tools_strip_history(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, HISTORY_BODY, VSR_API_CHAT);
    vsr_plugin_conf_t p = tools(VSR_TOOLS_NONE);
    p.u.tools.strip_tool_history = 1;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"model\":\"auto\",\"messages\":["
                   "{\"role\":\"system\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
                   "{\"role\":\"assistant\",\"content\":\"Sunny, 18C. Checking Rome.\"},"
                   "{\"role\":\"user\",\"content\":\"Thanks. And tomorrow?\"}]}");
    fx_close(&f);

    /* without strip_tool_history the history stays */
    fx_open(&f, HISTORY_BODY, VSR_API_CHAT);
    p.u.tools.strip_tool_history = 0;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_int_equal(out_count(&f, "tools"), -1);
    assert_int_equal(out_count(&f, "messages"), 9);
    fx_close(&f);

    /* a conversation of tool messages only would be left empty: refused */
    fx_open(&f, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", VSR_API_CHAT);
    p.u.tools.strip_tool_history = 1;
    assert_int_equal(fx_run(&f, &p, 1), VSR_ERR_INVALID);
    assert_string_equal(f.why, "tools: strip_tool_history would leave no messages");
    fx_close(&f);

    /* the removed tail: the comma before it goes with it, whitespace kept valid */
    fx_open(&f, "{ \"messages\" : [ {\"role\":\"user\",\"content\":\"a\"} ,\n  {\"role\":\"tool\",\"content\":\"b\"} ,"
                " {\"role\":\"tool\",\"content\":\"c\"} ] }",
            VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{ \"messages\" : [ {\"role\":\"user\",\"content\":\"a\"} ] }");
    fx_close(&f);
}

/* the call members of a message with content, wherever they sit */
static void test_tools_strip_call_members(void **state)
{
    (void)state;
    fx_t f;
    vsr_plugin_conf_t p = tools(VSR_TOOLS_NONE);
    p.u.tools.strip_tool_history = 1;
    fx_open(&f, "{\"messages\":[{\"tool_calls\":[{\"id\":\"a\"}],\"role\":\"assistant\",\"function_call\":{},"
                "\"content\":\"x\"},{\"role\":\"assistant\", \"content\":[{\"type\":\"text\",\"text\":\"y\"}],"
                " \"tool_calls\":[1] , \"function_call\":null },{\"role\":\"user\",\"content\":\"q\"}]}",
            VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"},{\"role\":\"assistant\", "
                   "\"content\":[{\"type\":\"text\",\"text\":\"y\"}] },{\"role\":\"user\",\"content\":\"q\"}]}");
    fx_close(&f);

    /* an earlier edit inside the message: the general path, same result */
    fx_open(&f, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[]},"
                "{\"role\":\"user\",\"content\":\"q\"}]}",
            VSR_API_CHAT);
    uint32_t msgs, c;
    assert_int_equal(vsr_json_object_get(&f.j, 0, "messages", &msgs), VSR_OK);
    assert_int_equal(vsr_json_object_get(&f.j, msgs + 1, "content", &c), VSR_OK);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, c, VSR_SLICE_LIT("\"z\"")), VSR_OK);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"z\"},"
                   "{\"role\":\"user\",\"content\":\"q\"}]}");
    fx_close(&f);
}

/* with system_prompt inserting a first message in the same array */
static void test_tools_strip_with_system_prompt(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "{\"messages\":[{\"role\":\"tool\",\"content\":\"r\"},{\"role\":\"user\",\"content\":\"q\"},"
                "{\"role\":\"tool\",\"content\":\"r2\"}]}",
            VSR_API_CHAT);
    vsr_plugin_conf_t p[2] = {system_prompt("S", 0), tools(VSR_TOOLS_NONE)};
    p[1].u.tools.strip_tool_history = 1;
    assert_int_equal(fx_run(&f, p, 2), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"q\"}]}");
    fx_close(&f);
}

static void test_tools_filtered(void **state)
{
    (void)state;
    char *allow[] = {(char *)"search", (char *)"shell"};
    char *block[] = {(char *)"shell"};
    fx_t f;

    /* allow-list */
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    vsr_plugin_conf_t p = tools(VSR_TOOLS_FILTERED);
    p.u.tools.allow_tools = (vsr_strlist_conf_t){allow, 2};
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_before, 3);
    assert_int_equal(f.ctx.tools_after, 2);
    expect_out(&f, "{\"model\":\"auto\",\"tools\":[" TOOL("search") "," TOOL("shell")
                   "],\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,"
                   "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":0}");
    fx_close(&f);

    /* block wins over allow */
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    p.u.tools.block_tools = (vsr_strlist_conf_t){block, 1};
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_after, 1);
    fx_apply(&f);
    assert_int_equal(out_count(&f, "tools"), 1);
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "search");
    assert_string_equal(out_string(&f, "tool_choice"), "auto");
    fx_close(&f);

    /* block only: the others stay */
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    p.u.tools.allow_tools = (vsr_strlist_conf_t){NULL, 0};
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_int_equal(out_count(&f, "tools"), 2);
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "search");
    assert_string_equal(out_string(&f, "tools.#1.function.name"), "calc");
    fx_close(&f);

    /* nothing to filter: no edit */
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    p.u.tools.block_tools = (vsr_strlist_conf_t){NULL, 0};
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_after, 3);
    expect_unchanged(&f);
    fx_close(&f);

    /* passthrough ignores the lists */
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    p = tools(VSR_TOOLS_PASSTHROUGH);
    p.u.tools.block_tools = (vsr_strlist_conf_t){block, 1};
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_before, 3);
    assert_int_equal(f.ctx.tools_after, 3);
    expect_unchanged(&f);
    fx_close(&f);
}

static void test_tools_filtered_all_removed(void **state)
{
    (void)state;
    char *allow[] = {(char *)"nothing-matches"};
    fx_t f;
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    vsr_plugin_conf_t p = tools(VSR_TOOLS_FILTERED);
    p.u.tools.allow_tools = (vsr_strlist_conf_t){allow, 1};
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_after, 0);
    expect_out(&f, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":0}");
    fx_close(&f);
}

static void test_tools_filtered_tool_choice(void **state)
{
    (void)state;
    char *block[] = {(char *)"calc"};
    static const char *body = "{\"tools\":[" TOOL("search") ",{\"type\":\"function\",\"function\":{\"name\":\"calc\"}}],"
                              "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"%s\"}},"
                              "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
    char buf[512];
    fx_t f;
    vsr_plugin_conf_t p = tools(VSR_TOOLS_FILTERED);
    p.u.tools.block_tools = (vsr_strlist_conf_t){block, 1};

    /* it names the removed tool: it goes */
    snprintf(buf, sizeof(buf), body, "calc");
    fx_open(&f, buf, VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"tools\":[" TOOL("search") "],\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}");
    fx_close(&f);

    /* it names a kept tool: it stays */
    snprintf(buf, sizeof(buf), body, "search");
    fx_open(&f, buf, VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_int_equal(out_count(&f, "tools"), 1);
    assert_string_equal(out_string(&f, "tool_choice.function.name"), "search");
    fx_close(&f);
}

static void test_tools_skipped(void **state)
{
    (void)state;
    fx_t f;
    vsr_plugin_conf_t p = tools(VSR_TOOLS_NONE);
    /* not a chat request */
    fx_open(&f, "{\"model\":\"m\",\"prompt\":\"hi\",\"tools\":[]}", VSR_API_COMPLETIONS);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.tools_applied, 0);
    expect_unchanged(&f);
    fx_close(&f);
    /* switched off */
    fx_open(&f, TOOLS_BODY, VSR_API_CHAT);
    p.enabled = 0;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_unchanged(&f);
    fx_close(&f);
}

/* ---- context_compression ------------------------------------------------------------ */

/* The token estimate of a body (ceil(text bytes / 4), as the plugin's). */
static uint64_t tokens_of_body(const char *s)
{
    vsr_json_t j;
    vsr_pool_t pool;
    vsr_chat_view_t chat;
    vsr_pool_init(&pool);
    assert_int_equal(vsr_json_parse(&j, s, strlen(s), NULL), VSR_OK);
    assert_int_equal(vsr_chat_view_build(&j, VSR_API_CHAT, &pool, &chat, NULL), VSR_OK);
    uint64_t b = 0;
    for (size_t i = 0; i < chat.n_messages; i++)
        b += chat.messages[i].text.len;
    vsr_json_free(&j);
    vsr_pool_free(&pool);
    return (b + 3) / 4;
}

static const char *SYS = "You are a careful assistant for zoo keepers.";
static const char *LAST = "How much does an adult kangaroo eat per day?";

/* A long conversation: five old messages of sentences about many animals
 * (kangaroos among them), a short last answer, then the question. */
static char *long_conversation(void)
{
    static const char *filler[] = {
        "The elephant enclosure was cleaned in the morning.",
        "Penguins need cold water and a steady supply of fish.",
        "The giraffe house roof leaked during the storm last week.",
        "Visitors asked many questions about the new tiger cubs.",
        "An adult kangaroo eats about two kilograms of grass and hay per day.",
        "The lion pride sleeps most of the afternoon in the shade.",
        "Flamingos turn pink because of the carotenoids in their food.",
        "Our zebra foal was weighed and is growing well.",
    };
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(SYS));
    vsr_buf_append_cstr(&b, "}");
    static const char *roles[] = {"user", "assistant", "tool", "assistant", "user"};
    for (size_t m = 0; m < VSR_ARRAY_LEN(roles); m++) {
        vsr_buf_t c;
        vsr_buf_init(&c, 0);
        for (size_t r = 0; r < 6; r++)
            for (size_t i = 0; i < VSR_ARRAY_LEN(filler); i++) {
                vsr_buf_append_cstr(&c, filler[(i + m + r) % VSR_ARRAY_LEN(filler)]);
                vsr_buf_append_cstr(&c, (i % 3 == 2) ? "\n" : " ");
            }
        vsr_buf_append_cstr(&b, ",{\"role\":\"");
        vsr_buf_append_cstr(&b, roles[m]);
        vsr_buf_append_cstr(&b, "\",\"content\":");
        vsr_buf_append_json_string(&b, vsr_buf_slice(&c));
        vsr_buf_append_cstr(&b, "}");
        vsr_buf_free(&c);
    }
    vsr_buf_append_cstr(&b, ",{\"role\":\"assistant\",\"content\":\"Noted. The feeding log is up to date.\"}");
    vsr_buf_append_cstr(&b, ",{\"role\":\"user\",\"content\":");
    vsr_buf_append_json_string(&b, vsr_slice_cstr(LAST));
    vsr_buf_append_cstr(&b, "}]}");
    char *s = strndup(b.data, b.len);
    vsr_buf_free(&b);
    return s;
}

/* Every sentence of `got` but the marks is a sentence of `orig`, in the
 * same order. */
static void assert_extract_of(const char *got, const char *orig)
{
    const char *at = orig;
    char *copy = strdup(got);
    for (char *save = NULL, *s = strtok_r(copy, "\xe2\x80\xa6", &save); s; s = strtok_r(NULL, "\xe2\x80\xa6", &save)) {
        while (*s == ' ')
            s++;
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == ' ')
            n--;
        if (n == 0)
            continue;
        /* each run of kept sentences: its sentences appear in order */
        char *run = strndup(s, n);
        for (char *p = run; *p;) {
            char *end = strstr(p, ". ");
            size_t len = end ? (size_t)(end - p) + 1 : strlen(p);
            char *sent = strndup(p, len);
            const char *hit = strstr(at, sent);
            if (hit == NULL)
                fail_msg("sentence out of order or not from the original: %s", sent);
            at = hit + len;
            free(sent);
            p += len;
            while (*p == ' ')
                p++;
        }
        free(run);
    }
    free(copy);
}

static void test_compression_long_conversation(void **state)
{
    (void)state;
    char *body = long_conversation();
    uint64_t before = tokens_of_body(body);
    assert_true(before > 1500);
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    vsr_plugin_conf_t p = compression(1000, 700, 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.compression_applied, 1);
    assert_int_equal(f.ctx.compression_tokens_before, before);
    fx_apply(&f);
    uint64_t after = tokens_of_body(f.out);
    assert_true(after <= 700);
    assert_int_equal(f.ctx.compression_tokens_after, after);
    assert_true(f.ctx.compression_messages >= 1);

    /* same messages, same roles, same order */
    assert_int_equal(out_count(&f, "messages"), 8);
    static const char *roles[] = {"system", "user", "assistant", "tool", "assistant", "user", "assistant", "user"};
    char path[64];
    for (size_t i = 0; i < 8; i++) {
        snprintf(path, sizeof(path), "messages.#%zu.role", i);
        assert_string_equal(out_string(&f, path), roles[i]);
    }
    /* system, last user and the turn before it are intact */
    assert_string_equal(out_string(&f, "messages.#0.content"), SYS);
    assert_string_equal(out_string(&f, "messages.#7.content"), LAST);
    fx_t g;
    fx_open(&g, body, VSR_API_CHAT);
    g.oj = g.j; /* read the original through out_string */
    const char *orig6 = out_string(&g, "messages.#6.content");
    const char *orig3 = out_string(&g, "messages.#3.content");
    g.oj = (vsr_json_t){0};
    assert_string_equal(out_string(&f, "messages.#6.content"), orig6);
    /* the tool output went first, then the oldest turns: all cut to the
     * mark; the newest old turn keeps its best sentences, in order */
    assert_true(strlen(orig3) > 1000);
    assert_string_equal(out_string(&f, "messages.#3.content"), "\xe2\x80\xa6");
    assert_string_equal(out_string(&f, "messages.#1.content"), "\xe2\x80\xa6");
    const char *newest = out_string(&f, "messages.#5.content");
    assert_non_null(strstr(newest, "An adult kangaroo eats about two kilograms of grass and hay per day."));
    assert_non_null(strstr(newest, "\xe2\x80\xa6"));
    for (size_t i = 1; i <= 5; i++) {
        snprintf(path, sizeof(path), "messages.#%zu.content", i);
        const char *c = out_string(&f, path);
        assert_non_null(c);
        g.oj = g.j;
        const char *o = out_string(&g, path);
        g.oj = (vsr_json_t){0};
        assert_extract_of(c, o);
    }
    fx_close(&g);
    fx_close(&f);
    free(body);
}

/* "auto" limits (the reference's CompressionTokenLimit): the request is cut
 * to fit the selected model's context window less the output it asks for;
 * with no window known, nothing is cut. */
static char *with_fields(const char *body, const char *fields)
{
    const char *head = "{\"model\":\"auto\",";
    assert_int_equal(strncmp(body, head, strlen(head)), 0);
    size_t n = strlen(body) + strlen(fields) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%s%s%s", head, fields, body + strlen(head));
    return s;
}

static void test_compression_auto(void **state)
{
    (void)state;
    char *body = long_conversation();
    uint64_t before = tokens_of_body(body);
    vsr_plugin_conf_t p = compression(0, 0, 1);
    p.u.context_compression.trigger_auto = 1;
    p.u.context_compression.target_auto = 1;
    p.u.context_compression.reserve_auto = 1;
    static const struct {
        uint64_t window;
        const char *fields;  /* added to the body */
        int64_t budget;      /* -1: unchanged */
    } rows[] = {
        {0, "", -1},                                                     /* no window known */
        {0, "\"max_tokens\":10,", -1},
        {1000, "", 1000},                                                /* no output asked for */
        {1000, "\"max_tokens\":300,", 700},
        {1000, "\"max_completion_tokens\":400,\"max_tokens\":100,", 600}, /* the reference's order */
        {1000, "\"max_tokens\":\"lots\",", 1000},                         /* not a number: none */
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(rows); i++) {
        char *b = with_fields(body, rows[i].fields);
        fx_t f;
        fx_open(&f, b, VSR_API_CHAT);
        f.ctx.context_window = rows[i].window;
        assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
        assert_int_equal(f.ctx.compression_tokens_before, before);
        if (rows[i].budget < 0) {
            assert_int_equal(f.ctx.compression_messages, 0);
            expect_unchanged(&f);
        } else {
            fx_apply(&f);
            uint64_t after = tokens_of_body(f.out);
            assert_true(after <= (uint64_t)rows[i].budget);
            assert_true(after > (uint64_t)rows[i].budget / 2); /* cut to the budget, not below it */
        }
        fx_close(&f);
        free(b);
    }
    /* the window is big enough: nothing to do */
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    f.ctx.context_window = before + 1;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_unchanged(&f);
    fx_close(&f);
    /* an explicit trigger with an auto target; an auto reserve is not taken
     * from an explicit target */
    p.u.context_compression.trigger_auto = 0;
    p.u.context_compression.trigger_tokens = before - 1;
    fx_open(&f, body, VSR_API_CHAT);
    f.ctx.context_window = 800;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_true(tokens_of_body(f.out) <= 800);
    fx_close(&f);
    p.u.context_compression.target_auto = 0;
    p.u.context_compression.target_tokens = 900;
    char *b = with_fields(body, "\"max_tokens\":500,");
    fx_open(&f, b, VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    uint64_t after = tokens_of_body(f.out);
    assert_true(after <= 900 && after > 500);
    fx_close(&f);
    free(b);
    free(body);
}

static void test_compression_under_trigger(void **state)
{
    (void)state;
    char *body = long_conversation();
    uint64_t before = tokens_of_body(body);
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    vsr_plugin_conf_t p = compression(before, 100, 1);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.compression_tokens_before, before);
    assert_int_equal(f.ctx.compression_tokens_after, before);
    assert_int_equal(f.ctx.compression_messages, 0);
    expect_unchanged(&f);
    fx_close(&f);
    free(body);
}

/* tool outputs are cut before the history; targets [history] leaves them */
static void test_compression_targets(void **state)
{
    (void)state;
    char *body = long_conversation();
    uint64_t before = tokens_of_body(body);
    fx_t f, g;
    fx_open(&g, body, VSR_API_CHAT);
    g.oj = g.j;
    const char *orig1 = out_string(&g, "messages.#1.content");
    const char *orig3 = out_string(&g, "messages.#3.content");
    g.oj = (vsr_json_t){0};

    /* a small cut: the tool output alone covers it */
    fx_open(&f, body, VSR_API_CHAT);
    vsr_plugin_conf_t p = compression(before - 10, before - 50, 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.compression_messages, 1);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "messages.#1.content"), orig1);
    /* cut by relevance to the question: every kangaroo sentence stays */
    const char *tool = out_string(&f, "messages.#3.content");
    assert_true(strlen(tool) < strlen(orig3));
    assert_non_null(strstr(tool, "\xe2\x80\xa6"));
    size_t k_orig = 0, k_tool = 0;
    for (const char *x = orig3; (x = strstr(x, "adult kangaroo eats")) != NULL; x++)
        k_orig++;
    for (const char *x = tool; (x = strstr(x, "adult kangaroo eats")) != NULL; x++)
        k_tool++;
    assert_true(k_orig >= 6);
    assert_int_equal(k_tool, k_orig);
    assert_extract_of(tool, orig3);
    fx_close(&f);

    /* history only: the oldest user message goes first, the tool output stays */
    fx_open(&f, body, VSR_API_CHAT);
    p.u.context_compression.targets[0] = VSR_CC_HISTORY;
    p.u.context_compression.n_targets = 1;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "messages.#3.content"), orig3);
    assert_true(strlen(out_string(&f, "messages.#1.content")) < strlen(orig1));
    fx_close(&f);
    fx_close(&g);
    free(body);
}

/* what must stay is already over budget */
static void test_compression_budget_not_met(void **state)
{
    (void)state;
    char *body = long_conversation();
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    vsr_plugin_conf_t p = compression(100, 10, 1);
    assert_int_equal(fx_run(&f, &p, 1), VSR_ERR_INVALID);
    assert_string_equal(f.why, "context_compression: the request does not fit its token budget even compressed");
    assert_int_equal(f.ed.n, 0);
    fx_close(&f);

    /* fail_open: the best it can do goes on */
    fx_open(&f, body, VSR_API_CHAT);
    p.u.context_compression.fail_closed = 0;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    uint64_t after = tokens_of_body(f.out);
    assert_true(after > 10);
    assert_true(after < f.ctx.compression_tokens_before);
    assert_int_equal(f.ctx.compression_tokens_after, after);
    assert_string_equal(out_string(&f, "messages.#7.content"), LAST);
    fx_close(&f);
    free(body);
}

/* reserve_output_tokens is taken from the target */
static void test_compression_reserve(void **state)
{
    (void)state;
    char *body = long_conversation();
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    vsr_plugin_conf_t p = compression(1000, 900, 1);
    p.u.context_compression.reserve_output_tokens = 300;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_true(tokens_of_body(f.out) <= 600);
    fx_close(&f);
    free(body);
}

/* content arrays, edited contents and non-chat bodies are left alone */
static void test_compression_leaves_alone(void **state)
{
    (void)state;
    char big[1500];
    memset(big, 0, sizeof(big));
    for (size_t i = 0; i < 60; i++)
        strcat(big, "Some sentence here. ");
    char body[4096];
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"%s\"}]},"
             "{\"role\":\"assistant\",\"content\":\"%s\"},{\"role\":\"user\",\"content\":\"q\"}]}",
             big, big);
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    /* an earlier edit of the assistant content: not a candidate any more */
    uint32_t msgs, m1, c;
    assert_int_equal(vsr_json_object_get(&f.j, 0, "messages", &msgs), VSR_OK);
    m1 = f.j.toks[msgs + 1].next;
    assert_int_equal(vsr_json_object_get(&f.j, m1, "content", &c), VSR_OK);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, c, VSR_SLICE_LIT("\"x\"")), VSR_OK);
    vsr_plugin_conf_t p = compression(10, 5, 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 1);
    assert_int_equal(f.ctx.compression_messages, 0);
    fx_close(&f);

    fx_open(&f, "{\"model\":\"m\",\"prompt\":\"a long prompt. with sentences. and more of them.\"}", VSR_API_COMPLETIONS);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ctx.compression_applied, 0);
    expect_unchanged(&f);
    fx_close(&f);
}

/* one sentence longer than the budget, without any space: cut to the mark,
 * never inside a UTF-8 sequence */
static void test_compression_unbreakable(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    vsr_buf_append_cstr(&b, "{\"messages\":[{\"role\":\"tool\",\"content\":\"");
    for (size_t i = 0; i < 1000; i++)
        vsr_buf_append_cstr(&b, "\xc3\xa9");
    vsr_buf_append_cstr(&b, "\"},{\"role\":\"user\",\"content\":\"q\"}]}");
    char *body = strndup(b.data, b.len);
    vsr_buf_free(&b);
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    vsr_plugin_conf_t p = compression(100, 100, 1);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    const char *c = out_string(&f, "messages.#0.content");
    assert_true(strlen(c) <= 400);
    assert_true(strlen(c) >= 3);
    /* whole characters only: é pieces and marks */
    for (const char *s = c; *s;) {
        if (strncmp(s, "\xc3\xa9", 2) == 0)
            s += 2;
        else if (strncmp(s, "\xe2\x80\xa6", 3) == 0)
            s += 3;
        else if (*s == ' ')
            s++;
        else
            fail_msg("broken text at %zu: %s", (size_t)(s - c), c);
    }
    fx_close(&f);
    free(body);
}


/* ---- semantic selection on given similarities ---- */

#define STOOL(n, d) "{\"type\":\"function\",\"function\":{\"name\":\"" n "\",\"description\":\"" d "\"}}"
static const char sem_body[] =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"weather in Paris?\"}],\"tools\":["
    STOOL("get_weather", "weather") "," STOOL("send_email", "mail") "," STOOL("calc", "math") "],"
    "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"send_email\"}}}";

static void test_semantic_texts_and_topk(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, sem_body, VSR_API_CHAT);
    vsr_plugin_conf_t p = tools(VSR_TOOLS_FILTERED);
    p.u.tools.semantic = 1;
    p.u.tools.top_k = 1;
    p.u.tools.similarity_threshold = 0.3;
    vsr_decision_conf_t d = {.name = (char *)"t", .plugins = &p, .n_plugins = 1};
    vsr_slice_t *texts;
    size_t n;
    int with_db;
    assert_int_equal(vsr_plugins_tool_texts(&d, &f.ctx, &texts, &n, &with_db), 1);
    assert_int_equal(n, 3);
    assert_int_equal(with_db, 0);
    assert_true(vsr_slice_eq_cstr(texts[1], "send_email: mail"));
    static const double sims[] = {0.9, 0.5, 0.1};
    vsr_tool_scores_t sc = {.ok = 1, .request = sims, .n_request = 3};
    f.ctx.tool_scores = &sc;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "get_weather");
    assert_null(out_string(&f, "tools.#1.function.name"));
    assert_null(out_string(&f, "tool_choice.function.name")); /* named a removed tool */
    assert_int_equal(f.ctx.tools_selection, VSR_TOOLSEL_SEMANTIC);
    assert_int_equal(f.ctx.tools_after, 1);
    assert_true(vsr_slice_eq_cstr(f.ctx.tools_selected, "get_weather"));
    fx_close(&f);

    /* threshold: nothing reaches it, every tool goes */
    fx_open(&f, sem_body, VSR_API_CHAT);
    static const double low[] = {0.1, 0.2, 0.05};
    vsr_tool_scores_t sl = {.ok = 1, .request = low, .n_request = 3};
    f.ctx.tool_scores = &sl;
    p.u.tools.top_k = 3;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_null(out_string(&f, "tools.#0.function.name"));
    assert_int_equal(f.ctx.tools_after, 0);
    fx_close(&f);

    /* no similarities: unchanged (fail open), or with fallback_to_empty none left */
    fx_open(&f, sem_body, VSR_API_CHAT);
    vsr_tool_scores_t bad = {.ok = 0};
    f.ctx.tool_scores = &bad;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    assert_int_equal(f.ctx.tools_selection, VSR_TOOLSEL_UNAVAILABLE);
    assert_int_equal(f.ctx.tools_after, 3);
    fx_close(&f);
    fx_open(&f, sem_body, VSR_API_CHAT);
    f.ctx.tool_scores = NULL;
    p.u.tools.fallback_to_empty = 1;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_null(out_string(&f, "tools.#0.function.name"));
    fx_close(&f);
}

static void test_tool_selection_filter_and_add(void **state)
{
    (void)state;
    fx_t f;
    /* filter: below relevance_threshold goes, preserve_count best stay */
    fx_open(&f, sem_body, VSR_API_CHAT);
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_TOOL_SELECTION;
    p.enabled = 1;
    p.u.tool_selection.enabled = 1;
    p.u.tool_selection.mode = VSR_TOOLSEL_FILTER;
    p.u.tool_selection.relevance_threshold = 0.95;
    p.u.tool_selection.preserve_count = 2;
    static const double sims[] = {0.2, 0.9, 0.5};
    vsr_tool_scores_t sc = {.ok = 1, .request = sims, .n_request = 3};
    f.ctx.tool_scores = &sc;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "send_email");
    assert_string_equal(out_string(&f, "tools.#1.function.name"), "calc");
    assert_null(out_string(&f, "tools.#2.function.name"));
    assert_true(vsr_slice_eq_cstr(f.ctx.tools_selected, "send_email,calc"));
    fx_close(&f);

    /* add: the database's best, not duplicating the request's, not blocked */
    static vsr_tool_entry_t entries[] = {
        {.name = (char *)"get_weather", .text = (char *)"get_weather: w", .json = VSR_SLICE_LIT(STOOL("get_weather", "db"))},
        {.name = (char *)"search_web", .text = (char *)"search_web: s", .json = VSR_SLICE_LIT(STOOL("search_web", "db"))},
        {.name = (char *)"shell", .text = (char *)"shell: x", .json = VSR_SLICE_LIT(STOOL("shell", "db"))},
        {.name = (char *)"translate", .text = (char *)"translate: t", .json = VSR_SLICE_LIT(STOOL("translate", "db"))},
    };
    vsr_tools_db_t db = {entries, 4};
    static const double dbs[] = {0.99, 0.8, 0.95, 0.1};
    vsr_plugin_conf_t two[2];
    two[0] = tools(VSR_TOOLS_FILTERED);
    static char *blocked[] = {(char *)"shell"};
    two[0].u.tools.block_tools.items = blocked;
    two[0].u.tools.block_tools.n = 1;
    two[1] = p;
    two[1].u.tool_selection.mode = VSR_TOOLSEL_ADD;
    two[1].u.tool_selection.top_k = 2;
    two[1].u.tool_selection.similarity_threshold = 0.5;
    fx_open(&f, sem_body, VSR_API_CHAT);
    f.ctx.tools_db = &db;
    vsr_tool_scores_t sa = {.ok = 1, .db = dbs, .n_db = 4};
    f.ctx.tool_scores = &sa;
    vsr_decision_conf_t d = {.name = (char *)"t", .plugins = two, .n_plugins = 2};
    vsr_slice_t *texts;
    size_t n;
    int with_db;
    assert_int_equal(vsr_plugins_tool_texts(&d, &f.ctx, &texts, &n, &with_db), 1);
    assert_int_equal(with_db, 1);
    assert_int_equal(n, 0);
    assert_int_equal(fx_run(&f, two, 2), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "tools.#2.function.name"), "calc");
    assert_string_equal(out_string(&f, "tools.#3.function.name"), "search_web"); /* get_weather already there, shell blocked */
    assert_null(out_string(&f, "tools.#4.function.name")); /* translate is below the threshold */
    assert_int_equal(f.ctx.tools_added, 1);
    assert_int_equal(f.ctx.tools_after, 4);
    fx_close(&f);

    /* add to a request without tools: the member is created */
    fx_open(&f, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", VSR_API_CHAT);
    f.ctx.tools_db = &db;
    f.ctx.tool_scores = &sa;
    assert_int_equal(fx_run(&f, &two[1], 1), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "get_weather");
    assert_string_equal(out_string(&f, "tools.#1.function.name"), "shell");
    assert_null(out_string(&f, "tools.#2.function.name"));
    fx_close(&f);

    /* no similarities: nothing added */
    fx_open(&f, sem_body, VSR_API_CHAT);
    f.ctx.tools_db = &db;
    assert_int_equal(fx_run(&f, &two[1], 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    assert_int_equal(f.ctx.tools_selection, VSR_TOOLSEL_UNAVAILABLE);
    fx_close(&f);
}

/* advanced_filtering: allow/block, the category filter, the weighted score, min_lexical_overlap */
static void test_tool_selection_advanced(void **state)
{
    (void)state;
    fx_t f;
    static char *tags_w[] = {(char *)"forecast", (char *)"paris"};
    static vsr_tool_entry_t entries[] = {
        {.name = (char *)"city_weather", .description = (char *)"current weather for a city", .category = (char *)"weather",
         .tags = {tags_w, 2}, .json = VSR_SLICE_LIT(STOOL("city_weather", "db"))},
        {.name = (char *)"search_web", .description = (char *)"search the web", .category = (char *)"search",
         .json = VSR_SLICE_LIT(STOOL("search_web", "db"))},
        {.name = (char *)"stock_quote", .description = (char *)"price of a stock", .category = (char *)"finance",
         .json = VSR_SLICE_LIT(STOOL("stock_quote", "db"))},
        {.name = (char *)"shell", .description = (char *)"run in Paris weather", .category = (char *)"weather",
         .json = VSR_SLICE_LIT(STOOL("shell", "db"))},
    };
    vsr_tools_db_t db = {entries, 4};
    /* by similarity alone: stock_quote, search_web, city_weather */
    static const double dbs[] = {0.5, 0.7, 0.9, 0.6};
    vsr_tool_scores_t sa = {.ok = 1, .db = dbs, .n_db = 4};
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_TOOL_SELECTION;
    p.enabled = 1;
    vsr_plugin_tool_selection_conf_t *t = &p.u.tool_selection;
    t->enabled = 1;
    t->mode = VSR_TOOLSEL_ADD;
    t->top_k = 2;
    t->similarity_threshold = 0.3;
    t->advanced = 1;
    t->w_embed = 1;
    t->w_lexical = 2; /* "weather in Paris?": city_weather shares "weather", shell "in", "paris", "weather" */
    static char *blocked[] = {(char *)"Shell"};
    t->af_block = (vsr_strlist_conf_t){blocked, 1};
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"weather in Paris?\"}]}";
    fx_open(&f, body, VSR_API_CHAT);
    f.ctx.tools_db = &db;
    f.ctx.tool_scores = &sa;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    /* city_weather (1*0.5 + 2*1/3)/3 = 0.389 > stock_quote 0.9/3 = 0.3 > search_web 0.7/3 */
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "city_weather");
    assert_string_equal(out_string(&f, "tools.#1.function.name"), "stock_quote");
    assert_null(out_string(&f, "tools.#2.function.name"));
    fx_close(&f);
    /* min_lexical_overlap 1: only tools sharing a word with the query */
    t->min_lexical_overlap = 1;
    fx_open(&f, body, VSR_API_CHAT);
    f.ctx.tools_db = &db;
    f.ctx.tool_scores = &sa;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "city_weather");
    assert_null(out_string(&f, "tools.#1.function.name"));
    fx_close(&f);
    /* the category filter: the matched domain's tools only */
    t->min_lexical_overlap = 0;
    t->w_lexical = 0;
    t->use_category_filter = 1;
    t->category_confidence_threshold = 0.5;
    fx_open(&f, body, VSR_API_CHAT);
    f.ctx.tools_db = &db;
    f.ctx.tool_scores = &sa;
    f.ctx.category = VSR_SLICE_LIT("Finance");
    f.ctx.category_confidence = 0.8;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "tools.#0.function.name"), "stock_quote");
    assert_null(out_string(&f, "tools.#1.function.name"));
    fx_close(&f);
    /* ... not when the domain's confidence is under category_confidence_threshold */
    fx_open(&f, body, VSR_API_CHAT);
    f.ctx.tools_db = &db;
    f.ctx.tool_scores = &sa;
    f.ctx.category = VSR_SLICE_LIT("finance");
    f.ctx.category_confidence = 0.4;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    fx_apply(&f);
    assert_string_equal(out_string(&f, "tools.#1.function.name"), "search_web");
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tools_none),
        cmocka_unit_test(test_tools_strip_history),
        cmocka_unit_test(test_tools_strip_call_members),
        cmocka_unit_test(test_tools_strip_with_system_prompt),
        cmocka_unit_test(test_tools_filtered),
        cmocka_unit_test(test_tools_filtered_all_removed),
        cmocka_unit_test(test_tools_filtered_tool_choice),
        cmocka_unit_test(test_tools_skipped),
        cmocka_unit_test(test_tool_selection_advanced),
        cmocka_unit_test(test_compression_long_conversation),
        cmocka_unit_test(test_compression_under_trigger),
        cmocka_unit_test(test_compression_auto),
        cmocka_unit_test(test_compression_targets),
        cmocka_unit_test(test_compression_budget_not_met),
        cmocka_unit_test(test_compression_reserve),
        cmocka_unit_test(test_compression_leaves_alone),
        cmocka_unit_test(test_compression_unbreakable),
        cmocka_unit_test(test_semantic_texts_and_topk),
        cmocka_unit_test(test_tool_selection_filter_and_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
