/* test_plugins.c — the four request-side plugins on realistic bodies: the
 * edited body is re-parsed and its content asserted exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include <time.h>

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

static vsr_plugin_conf_t fast_response(const char *msg)
{
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_FAST_RESPONSE;
    p.enabled = 1;
    p.u.fast_response.message = (char *)msg;
    return p;
}

static vsr_plugin_conf_t request_params(void)
{
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_REQUEST_PARAMS;
    p.enabled = 1;
    return p;
}

static vsr_plugin_conf_t header_mutation(vsr_kv_conf_t *add, size_t n_add, vsr_kv_conf_t *upd, size_t n_upd,
                                         char **del, size_t n_del)
{
    vsr_plugin_conf_t p;
    memset(&p, 0, sizeof(p));
    p.kind = VSR_PLUGIN_HEADER_MUTATION;
    p.enabled = 1;
    p.u.header_mutation.add = add;
    p.u.header_mutation.n_add = n_add;
    p.u.header_mutation.update = upd;
    p.u.header_mutation.n_update = n_upd;
    p.u.header_mutation.delete_.items = del;
    p.u.header_mutation.delete_.n = n_del;
    return p;
}

static const char *CHAT = "{\"model\":\"auto\",\"messages\":["
                          "{\"role\":\"system\",\"content\":\"You are helpful.\"},"
                          "{\"role\":\"user\",\"content\":\"Hi\"}]}";

/* ---- system_prompt --------------------------------------------------------------- */

static void test_system_prompt_replace_existing(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, CHAT, VSR_API_CHAT);
    vsr_plugin_conf_t p = system_prompt("You are a math tutor.", 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_null(f.why);
    assert_int_equal(f.ctx.injected_system_prompt, 1);
    assert_int_equal(f.ctx.imm_status, 0);
    expect_out(&f, "{\"model\":\"auto\",\"messages\":["
                   "{\"role\":\"system\",\"content\":\"You are a math tutor.\"},"
                   "{\"role\":\"user\",\"content\":\"Hi\"}]}");
    fx_close(&f);
}

static void test_system_prompt_escaping(void **state)
{
    (void)state;
    /* quotes, backslash, newline, tab, a control byte, 2-, 3- and 4-byte UTF-8 */
    static const char prompt[] = "Say \"hi\" \\ then\nnew line\tand \x01 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
    fx_t f;
    fx_open(&f, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"model\":\"m\"}", VSR_API_CHAT);
    vsr_plugin_conf_t p = system_prompt(prompt, 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"system\",\"content\":"
                   "\"Say \\\"hi\\\" \\\\ then\\nnew line\\tand \\u0001 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"},"
                   "{\"role\":\"user\",\"content\":\"q\"}],\"model\":\"m\"}");
    assert_string_equal(out_string(&f, "messages.#0.content"), prompt);
    assert_string_equal(out_string(&f, "messages.#0.role"), "system");
    assert_string_equal(out_string(&f, "messages.#1.content"), "q");
    fx_close(&f);
}

static void test_system_prompt_insert_mode(void **state)
{
    (void)state;
    fx_t f;
    /* the old content has escapes: decoded, then re-escaped after the prompt */
    fx_open(&f, "{\"messages\":[{\"role\":\"system\",\"content\":\"Old \\\"rules\\\"\\nline2\"},"
                "{\"role\":\"user\",\"content\":\"x\"}]}",
            VSR_API_CHAT);
    vsr_plugin_conf_t p = system_prompt("New rules.", 1);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"system\",\"content\":\"New rules.\\n\\nOld \\\"rules\\\"\\nline2\"},"
                   "{\"role\":\"user\",\"content\":\"x\"}]}");
    assert_string_equal(out_string(&f, "messages.#0.content"), "New rules.\n\nOld \"rules\"\nline2");
    fx_close(&f);

    /* no system message: created first, like replace mode */
    fx_open(&f, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", VSR_API_CHAT);
    p = system_prompt("New rules.", 1);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"system\",\"content\":\"New rules.\"},"
                   "{\"role\":\"user\",\"content\":\"x\"}]}");
    fx_close(&f);
}

static void test_system_prompt_array_content(void **state)
{
    (void)state;
    const char *body = "{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"A\"},"
                       "{\"type\":\"text\",\"text\":\"B\"}]},{\"role\":\"user\",\"content\":\"u\"}]}";
    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    vsr_plugin_conf_t p = system_prompt("P", 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"system\",\"content\":\"P\"},{\"role\":\"user\",\"content\":\"u\"}]}");
    fx_close(&f);

    fx_open(&f, body, VSR_API_CHAT);
    p = system_prompt("P", 1);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"messages\":[{\"role\":\"system\",\"content\":\"P\\n\\nA\\nB\"},"
                   "{\"role\":\"user\",\"content\":\"u\"}]}");
    fx_close(&f);
}

static void test_system_prompt_shapes(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int insert;
        const char *want;
    } cases[] = {
        /* a system message without content gets one */
        {"{\"messages\":[{\"role\":\"system\"},{\"role\":\"user\",\"content\":\"u\"}]}", 0,
         "{\"messages\":[{\"content\":\"P\",\"role\":\"system\"},{\"role\":\"user\",\"content\":\"u\"}]}"},
        /* null content, insert mode: the old text is empty */
        {"{\"messages\":[{\"role\":\"system\",\"content\":null}]}", 1,
         "{\"messages\":[{\"role\":\"system\",\"content\":\"P\\n\\n\"}]}"},
        /* only the first message counts: a later system message stays */
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"system\",\"content\":\"S\"}]}", 0,
         "{\"messages\":[{\"role\":\"system\",\"content\":\"P\"},{\"role\":\"user\",\"content\":\"u\"},"
         "{\"role\":\"system\",\"content\":\"S\"}]}"},
        /* a developer message is not the system message */
        {"{\"messages\":[{\"role\":\"developer\",\"content\":\"D\"}]}", 0,
         "{\"messages\":[{\"role\":\"system\",\"content\":\"P\"},{\"role\":\"developer\",\"content\":\"D\"}]}"},
        {"{\"messages\":[]}", 0, "{\"messages\":[{\"role\":\"system\",\"content\":\"P\"}]}"},
        {"{\"messages\":[ ]}", 1, "{\"messages\":[{\"role\":\"system\",\"content\":\"P\"} ]}"},
        /* pretty-printed body */
        {"{\n  \"messages\": [\n    {\"role\": \"system\", \"content\": \"S\"}\n  ]\n}", 0,
         "{\n  \"messages\": [\n    {\"role\": \"system\", \"content\": \"P\"}\n  ]\n}"},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(cases); i++) {
        fx_t f;
        fx_open(&f, cases[i].body, VSR_API_CHAT);
        vsr_plugin_conf_t p = system_prompt("P", cases[i].insert);
        assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
        expect_out(&f, cases[i].want);
        assert_int_equal(f.ctx.injected_system_prompt, 1);
        fx_close(&f);
    }
}

static void test_system_prompt_skipped(void **state)
{
    (void)state;
    fx_t f;
    vsr_plugin_conf_t p;

    fx_open(&f, CHAT, VSR_API_CHAT);
    p = system_prompt("P", 0);
    p.enabled = 0; /* configuration.enabled: false at the entry level */
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    p = system_prompt("P", 0);
    p.u.system_prompt.enabled = 0;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    p = system_prompt("", 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    p = system_prompt(NULL, 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    assert_int_equal(f.ctx.injected_system_prompt, 0);
    fx_close(&f);

    fx_open(&f, "{\"model\":\"m\",\"prompt\":\"p\"}", VSR_API_COMPLETIONS);
    p = system_prompt("P", 0);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    fx_close(&f);

    fx_open(&f, "{\"model\":\"m\",\"input\":\"p\",\"instructions\":\"i\"}", VSR_API_RESPONSES);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    assert_int_equal(f.ctx.injected_system_prompt, 0);
    fx_close(&f);
}

static void test_system_prompt_first_wins(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, CHAT, VSR_API_CHAT);
    vsr_plugin_conf_t p[2] = {system_prompt("first", 0), system_prompt("second", 1)};
    assert_int_equal(fx_run(&f, p, 2), VSR_OK);
    expect_out(&f, "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"first\"},"
                   "{\"role\":\"user\",\"content\":\"Hi\"}]}");
    fx_close(&f);

    /* the first one disabled: the second applies */
    fx_open(&f, CHAT, VSR_API_CHAT);
    p[0].enabled = 0;
    assert_int_equal(fx_run(&f, p, 2), VSR_OK);
    assert_string_equal(fx_apply(&f), "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":"
                                      "\"second\\n\\nYou are helpful.\"},{\"role\":\"user\",\"content\":\"Hi\"}]}");
    fx_close(&f);

    /* an edit by someone else on the same content is a conflict, not corruption */
    fx_open(&f, CHAT, VSR_API_CHAT);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, f.chat.messages[0].content_tok, VSR_SLICE_LIT("\"x\"")),
                     VSR_OK);
    vsr_plugin_conf_t one = system_prompt("P", 0);
    assert_int_equal(fx_run(&f, &one, 1), VSR_ERR_INVALID);
    assert_string_equal(f.why, "system_prompt: the system message was already edited by an earlier plugin");
    expect_out(&f, "{\"model\":\"auto\",\"messages\":[{\"role\":\"system\",\"content\":\"x\"},"
                   "{\"role\":\"user\",\"content\":\"Hi\"}]}");
    fx_close(&f);
}

/* ---- header_mutation ---------------------------------------------------------------- */

static void assert_slice(vsr_slice_t s, const char *want)
{
    if (!vsr_slice_eq_cstr(s, want))
        fail_msg("'%.*s' want '%s'", VSR_SLICE_ARG(s), want);
}

static void test_header_mutation(void **state)
{
    (void)state;
    vsr_kv_conf_t add[] = {{(char *)"x-team", (char *)"math"}, {(char *)"X-Trace", (char *)"on"}};
    vsr_kv_conf_t upd[] = {{(char *)"x-team", (char *)"science"}, {(char *)"user-agent", (char *)"vsr"}};
    char *del[] = {(char *)"x-trace", (char *)"cookie", (char *)"Cookie"};
    fx_t f;
    fx_open(&f, CHAT, VSR_API_CHAT);
    vsr_plugin_conf_t p = header_mutation(add, 2, upd, 2, del, 3);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    /* delete first, then add, then update: x-trace is deleted and set again,
     * x-team ends with the updated value */
    assert_int_equal(f.ctx.n_set_headers, 3);
    assert_slice(f.ctx.set_headers[0].name, "x-team");
    assert_slice(f.ctx.set_headers[0].value, "science");
    assert_slice(f.ctx.set_headers[1].name, "X-Trace");
    assert_slice(f.ctx.set_headers[1].value, "on");
    assert_slice(f.ctx.set_headers[2].name, "user-agent");
    assert_slice(f.ctx.set_headers[2].value, "vsr");
    assert_int_equal(f.ctx.n_remove_headers, 2);
    assert_slice(f.ctx.remove_headers[0], "x-trace");
    assert_slice(f.ctx.remove_headers[1], "cookie");
    assert_int_equal(f.ed.n, 0);
    fx_close(&f);

    /* a later plugin deleting a header set by an earlier one wins */
    vsr_kv_conf_t add2[] = {{(char *)"x-a", (char *)"1"}, {(char *)"x-b", (char *)"2"}};
    char *del2[] = {(char *)"X-A"};
    fx_open(&f, CHAT, VSR_API_CHAT);
    vsr_plugin_conf_t two[2] = {header_mutation(add2, 2, NULL, 0, NULL, 0), header_mutation(NULL, 0, NULL, 0, del2, 1)};
    assert_int_equal(fx_run(&f, two, 2), VSR_OK);
    assert_int_equal(f.ctx.n_set_headers, 1);
    assert_slice(f.ctx.set_headers[0].name, "x-b");
    assert_int_equal(f.ctx.n_remove_headers, 1);
    assert_slice(f.ctx.remove_headers[0], "X-A");
    fx_close(&f);

    /* many headers: the arrays grow */
    fx_open(&f, CHAT, VSR_API_CHAT);
    char names[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof(names[i]), "x-h%d", i);
        vsr_plugin_set_header(&f.ctx, vsr_slice_cstr(names[i]), VSR_SLICE_LIT("v"));
        if (i % 2)
            vsr_plugin_remove_header(&f.ctx, vsr_slice_cstr(names[i - 1]));
    }
    assert_int_equal(f.ctx.n_set_headers, 20);
    assert_int_equal(f.ctx.n_remove_headers, 20);
    for (size_t i = 0; i < 20; i++)
        assert_slice(f.ctx.set_headers[i].name, names[2 * i + 1]);
    fx_close(&f);
}

/* ---- fast_response ---------------------------------------------------------------------- */

/* Checks "chatcmpl-fast-" + 32 hex at s, returns the length of the id. */
static size_t check_id(const char *s)
{
    assert_memory_equal(s, "chatcmpl-fast-", 14);
    for (int i = 0; i < 32; i++)
        assert_non_null(strchr("0123456789abcdef", s[14 + i]));
    return 46;
}

/* Replaces every "chatcmpl-fast-<hex>" by ID and the digits after
 * "created": by T, so a body can be compared exactly. */
static char *normalise(const char *body, size_t len, long long t0, long long t1)
{
    char *out = malloc(len + 1);
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        if (len - i >= 14 && memcmp(body + i, "chatcmpl-fast-", 14) == 0) {
            i += check_id(body + i);
            memcpy(out + w, "ID", 2);
            w += 2;
        } else if (len - i >= 10 && memcmp(body + i, "\"created\":", 10) == 0) {
            memcpy(out + w, body + i, 10);
            w += 10;
            i += 10;
            char *end;
            long long c = strtoll(body + i, &end, 10);
            assert_true(c >= t0 && c <= t1);
            i = (size_t)(end - body);
            out[w++] = 'T';
        } else {
            out[w++] = body[i++];
        }
    }
    out[w] = '\0';
    return out;
}

static void test_fast_response_json(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, CHAT, VSR_API_CHAT);
    vsr_plugin_conf_t p = fast_response("Blocked: \"policy\"\n\xc3\xa9");
    long long t0 = (long long)time(NULL);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    long long t1 = (long long)time(NULL);
    assert_int_equal(f.ctx.imm_status, 200);
    assert_slice(f.ctx.imm_content_type, "application/json");
    assert_int_equal(f.ctx.n_imm_headers, 1);
    assert_slice(f.ctx.imm_headers[0].name, "x-vsr-fast-response");
    assert_slice(f.ctx.imm_headers[0].value, "true");
    char *n = normalise(f.ctx.imm_body.p, f.ctx.imm_body.len, t0, t1);
    assert_string_equal(n, "{\"id\":\"ID\",\"object\":\"chat.completion\",\"created\":T,\"model\":\"router\","
                           "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
                           "\"Blocked: \\\"policy\\\"\\n\xc3\xa9\"},\"finish_reason\":\"stop\"}],"
                           "\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0}}");
    free(n);
    /* valid JSON whose content decodes to the message */
    vsr_json_t j;
    assert_int_equal(vsr_json_parse(&j, f.ctx.imm_body.p, f.ctx.imm_body.len, NULL), VSR_OK);
    uint32_t choices, msg, content;
    assert_int_equal(vsr_json_object_get(&j, 0, "choices", &choices), VSR_OK);
    assert_int_equal(vsr_json_object_get(&j, choices + 1, "message", &msg), VSR_OK);
    assert_int_equal(vsr_json_object_get(&j, msg, "content", &content), VSR_OK);
    vsr_slice_t s;
    assert_int_equal(vsr_json_string(&j, content, &f.pool, &s), VSR_OK);
    assert_slice(s, "Blocked: \"policy\"\n\xc3\xa9");
    vsr_json_free(&j);
    fx_close(&f);
}

static void test_fast_response_sse(void **state)
{
    (void)state;
    fx_t f;
    fx_open(&f, "{\"model\":\"auto\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
            VSR_API_CHAT);
    assert_int_equal(f.ctx.stream, 1);
    vsr_plugin_conf_t p = fast_response("No.");
    long long t0 = (long long)time(NULL);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    long long t1 = (long long)time(NULL);
    assert_int_equal(f.ctx.imm_status, 200);
    assert_slice(f.ctx.imm_content_type, "text/event-stream");
    assert_slice(f.ctx.imm_headers[0].name, "x-vsr-fast-response");
    char *n = normalise(f.ctx.imm_body.p, f.ctx.imm_body.len, t0, t1);
    assert_string_equal(n, "data: {\"id\":\"ID\",\"object\":\"chat.completion.chunk\",\"created\":T,"
                           "\"model\":\"router\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                           "\"content\":\"No.\"},\"finish_reason\":null}]}\n\n"
                           "data: {\"id\":\"ID\",\"object\":\"chat.completion.chunk\",\"created\":T,"
                           "\"model\":\"router\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}"
                           "\n\n"
                           "data: [DONE]\n\n");
    free(n);
    /* both chunks carry the same id */
    const char *b = f.ctx.imm_body.p;
    const char *second = strstr(b + 1, "data: {");
    assert_non_null(second);
    assert_memory_equal(strstr(b, "chatcmpl-fast-"), strstr(second, "chatcmpl-fast-"), 46);
    fx_close(&f);
}

static void test_fast_response_stops_chain(void **state)
{
    (void)state;
    vsr_kv_conf_t add[] = {{(char *)"x-after", (char *)"1"}};
    fx_t f;
    fx_open(&f, CHAT, VSR_API_CHAT);
    vsr_plugin_conf_t p[3] = {fast_response("stop"), header_mutation(add, 1, NULL, 0, NULL, 0),
                              system_prompt("P", 0)};
    assert_int_equal(fx_run(&f, p, 3), VSR_OK);
    assert_int_equal(f.ctx.imm_status, 200);
    assert_int_equal(f.ctx.n_set_headers, 0);
    assert_int_equal(f.ed.n, 0);
    fx_close(&f);

    /* a disabled fast_response does nothing */
    fx_open(&f, CHAT, VSR_API_CHAT);
    p[0].enabled = 0;
    assert_int_equal(fx_run(&f, p, 3), VSR_OK);
    assert_int_equal(f.ctx.imm_status, 0);
    assert_int_equal(f.ctx.n_set_headers, 1);
    assert_int_equal(f.ctx.injected_system_prompt, 1);
    fx_close(&f);

    /* two answers get two different ids */
    fx_open(&f, CHAT, VSR_API_CHAT);
    p[0].enabled = 1;
    assert_int_equal(fx_run(&f, p, 1), VSR_OK);
    vsr_slice_t first = f.ctx.imm_body;
    assert_int_equal(fx_run(&f, p, 1), VSR_OK);
    assert_memory_not_equal(first.p + 7, f.ctx.imm_body.p + 7, 46);
    fx_close(&f);
}

/* ---- request_params ---------------------------------------------------------------------- */

static void test_request_params_blocked_and_clamps(void **state)
{
    (void)state;
    char *blocked[] = {(char *)"user", (char *)"logit_bias", (char *)"model", (char *)"messages", (char *)"seed"};
    fx_t f;
    fx_open(&f, "{\"user\":\"bob\",\"model\":\"auto\",\"max_tokens\":9000,\"messages\":[{\"role\":\"user\","
                "\"content\":\"hi\"}],\"n\":8,\"logit_bias\":{\"50256\":-100},\"max_completion_tokens\":2048.5,"
                "\"temperature\":0.2,\"seed\":7}",
            VSR_API_CHAT);
    vsr_plugin_conf_t p = request_params();
    p.u.request_params.blocked_params.items = blocked;
    p.u.request_params.blocked_params.n = 5;
    p.u.request_params.max_tokens_limit = 1024;
    p.u.request_params.has_max_tokens_limit = 1;
    p.u.request_params.max_n = 2;
    p.u.request_params.has_max_n = 1;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"model\":\"auto\",\"max_tokens\":1024,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                   "\"n\":2,\"max_completion_tokens\":1024,\"temperature\":0.2}");
    fx_close(&f);

    /* under the limits, or not numbers: untouched */
    fx_open(&f, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":1024,\"n\":\"3\",\"max_completion_tokens\":-5}",
            VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    fx_close(&f);
}

static void test_request_params_default_max_tokens(void **state)
{
    (void)state;
    fx_t f;
    vsr_plugin_conf_t p = request_params();
    p.u.request_params.default_max_tokens = 512;
    p.u.request_params.has_default_max_tokens = 1;

    fx_open(&f, "{\"model\":\"m\",\"messages\":[]}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"max_tokens\":512,\"model\":\"m\",\"messages\":[]}");
    fx_close(&f);

    /* max_completion_tokens counts as present */
    fx_open(&f, "{\"model\":\"m\",\"messages\":[],\"max_completion_tokens\":10}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    fx_close(&f);

    /* a blocked max_tokens is replaced by the default, capped by the limit */
    char *blocked[] = {(char *)"max_tokens"};
    p.u.request_params.blocked_params.items = blocked;
    p.u.request_params.blocked_params.n = 1;
    p.u.request_params.max_tokens_limit = 300;
    p.u.request_params.has_max_tokens_limit = 1;
    fx_open(&f, "{\"model\":\"m\",\"max_tokens\":100000,\"messages\":[]}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"max_tokens\":300,\"model\":\"m\",\"messages\":[]}");
    fx_close(&f);

    /* two such plugins insert it once */
    vsr_plugin_conf_t two[2] = {request_params(), request_params()};
    two[0].u.request_params.default_max_tokens = 100;
    two[0].u.request_params.has_default_max_tokens = 1;
    two[1].u.request_params.default_max_tokens = 200;
    two[1].u.request_params.has_default_max_tokens = 1;
    fx_open(&f, "{\"model\":\"m\",\"messages\":[]}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, two, 2), VSR_OK);
    expect_out(&f, "{\"max_tokens\":100,\"model\":\"m\",\"messages\":[]}");
    fx_close(&f);

    /* not for other APIs */
    fx_open(&f, "{\"model\":\"m\",\"prompt\":\"p\"}", VSR_API_COMPLETIONS);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    assert_int_equal(f.ed.n, 0);
    fx_close(&f);
}

static void test_request_params_strip_unknown(void **state)
{
    (void)state;
    char *allowed[] = {(char *)"top_k"};
    fx_t f;
    fx_open(&f, "{\"model\":\"auto\",\"foo\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                "\"top_k\":40,\"repetition_penalty\":1.1,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                "\"guided_json\":{},\"tools\":[],\"bar\":null}",
            VSR_API_CHAT);
    vsr_plugin_conf_t p = request_params();
    p.u.request_params.strip_unknown = 1;
    p.u.request_params.allowed_params.items = allowed;
    p.u.request_params.allowed_params.n = 1;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_k\":40,"
                   "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"tools\":[]}");
    fx_close(&f);

    /* everything but model/messages unknown, pretty-printed */
    fx_open(&f, "{\n  \"a\": 1,\n  \"model\": \"m\",\n  \"b\": 2,\n  \"messages\": [],\n  \"c\": 3\n}", VSR_API_CHAT);
    p.u.request_params.allowed_params.n = 0;
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\n  \"model\": \"m\",\n  \"messages\": []\n}");
    fx_close(&f);

    /* responses bodies are not stripped (the allow-list is the chat one),
     * but blocked parameters still go */
    char *blocked[] = {(char *)"store"};
    p.u.request_params.blocked_params.items = blocked;
    p.u.request_params.blocked_params.n = 1;
    fx_open(&f, "{\"model\":\"m\",\"input\":\"hi\",\"store\":true,\"max_output_tokens\":10}", VSR_API_RESPONSES);
    assert_int_equal(fx_run(&f, &p, 1), VSR_OK);
    expect_out(&f, "{\"model\":\"m\",\"input\":\"hi\",\"max_output_tokens\":10}");
    fx_close(&f);
}

static void test_request_params_two_plugins(void **state)
{
    (void)state;
    char *blocked_user[] = {(char *)"user"};
    char *blocked_max[] = {(char *)"max_tokens"};
    vsr_plugin_conf_t a = request_params(), b = request_params();
    fx_t f;

    /* both remove the same parameter: fine */
    a.u.request_params.blocked_params.items = blocked_user;
    a.u.request_params.blocked_params.n = 1;
    b.u.request_params.blocked_params.items = blocked_user;
    b.u.request_params.blocked_params.n = 1;
    b.u.request_params.strip_unknown = 1;
    vsr_plugin_conf_t ab[2] = {a, b};
    fx_open(&f, "{\"model\":\"m\",\"user\":\"u\",\"messages\":[],\"x\":1}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, ab, 2), VSR_OK);
    expect_out(&f, "{\"model\":\"m\",\"messages\":[]}");
    fx_close(&f);

    /* the first removes max_tokens, the second would clamp it: skipped */
    a.u.request_params.blocked_params.items = blocked_max;
    b = request_params();
    b.u.request_params.max_tokens_limit = 10;
    b.u.request_params.has_max_tokens_limit = 1;
    ab[0] = a;
    ab[1] = b;
    fx_open(&f, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":500}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, ab, 2), VSR_OK);
    expect_out(&f, "{\"model\":\"m\",\"messages\":[]}");
    fx_close(&f);

    /* both clamp the same value: the second is refused, the body stays valid */
    a = request_params();
    a.u.request_params.max_tokens_limit = 100;
    a.u.request_params.has_max_tokens_limit = 1;
    ab[0] = a;
    ab[1] = b;
    fx_open(&f, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":500}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, ab, 2), VSR_ERR_INVALID);
    assert_string_equal(f.why, "request_params: a parameter to clamp was already rewritten by an earlier plugin");
    expect_out(&f, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":100}");
    fx_close(&f);

    /* the first clamps, the second would remove it: refused too */
    b = request_params();
    b.u.request_params.blocked_params.items = blocked_max;
    b.u.request_params.blocked_params.n = 1;
    ab[1] = b;
    fx_open(&f, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":500}", VSR_API_CHAT);
    assert_int_equal(fx_run(&f, ab, 2), VSR_ERR_INVALID);
    assert_string_equal(f.why, "request_params: a parameter to remove was already rewritten by an earlier plugin");
    expect_out(&f, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":100}");
    fx_close(&f);
}

/* ---- all together, as the engine runs them ---------------------------------------------- */

static void test_combination_with_model_rewrite(void **state)
{
    (void)state;
    const char *body = "{\n"
                       "  \"model\": \"auto\",\n"
                       "  \"messages\": [\n"
                       "    {\"role\": \"system\", \"content\": \"Be nice.\"},\n"
                       "    {\"role\": \"user\", \"content\": \"Solve x^2 = 4 \\u2014 quickly\"}\n"
                       "  ],\n"
                       "  \"max_tokens\": 8192,\n"
                       "  \"user\": \"alice\",\n"
                       "  \"vendor_flag\": true\n"
                       "}";
    char *blocked[] = {(char *)"user"};
    vsr_kv_conf_t add[] = {{(char *)"x-route", (char *)"math"}};
    vsr_plugin_conf_t p[3] = {system_prompt("You are a \"math\" expert.\nShow steps.", 1), request_params(),
                              header_mutation(add, 1, NULL, 0, NULL, 0)};
    p[1].u.request_params.blocked_params.items = blocked;
    p[1].u.request_params.blocked_params.n = 1;
    p[1].u.request_params.max_tokens_limit = 4096;
    p[1].u.request_params.has_max_tokens_limit = 1;
    p[1].u.request_params.strip_unknown = 1;

    fx_t f;
    fx_open(&f, body, VSR_API_CHAT);
    assert_int_equal(fx_run(&f, p, 3), VSR_OK);
    /* the engine's own edit: the selected model */
    uint32_t model;
    assert_int_equal(vsr_json_object_get(&f.j, 0, "model", &model), VSR_OK);
    assert_int_equal(vsr_json_edit_replace(&f.ed, &f.j, model, VSR_SLICE_LIT("\"qwen-math-7b\"")), VSR_OK);
    expect_out(&f, "{\n"
                   "  \"model\": \"qwen-math-7b\",\n"
                   "  \"messages\": [\n"
                   "    {\"role\": \"system\", \"content\": "
                   "\"You are a \\\"math\\\" expert.\\nShow steps.\\n\\nBe nice.\"},\n"
                   "    {\"role\": \"user\", \"content\": \"Solve x^2 = 4 \\u2014 quickly\"}\n"
                   "  ],\n"
                   "  \"max_tokens\": 4096\n"
                   "}");
    assert_string_equal(out_string(&f, "messages.#0.content"), "You are a \"math\" expert.\nShow steps.\n\nBe nice.");
    assert_string_equal(out_string(&f, "messages.#1.content"), "Solve x^2 = 4 \xe2\x80\x94 quickly");
    assert_int_equal(f.ctx.n_set_headers, 1);
    assert_int_equal(f.ctx.injected_system_prompt, 1);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_system_prompt_replace_existing),
        cmocka_unit_test(test_system_prompt_escaping),
        cmocka_unit_test(test_system_prompt_insert_mode),
        cmocka_unit_test(test_system_prompt_array_content),
        cmocka_unit_test(test_system_prompt_shapes),
        cmocka_unit_test(test_system_prompt_skipped),
        cmocka_unit_test(test_system_prompt_first_wins),
        cmocka_unit_test(test_header_mutation),
        cmocka_unit_test(test_fast_response_json),
        cmocka_unit_test(test_fast_response_sse),
        cmocka_unit_test(test_fast_response_stops_chain),
        cmocka_unit_test(test_request_params_blocked_and_clamps),
        cmocka_unit_test(test_request_params_default_max_tokens),
        cmocka_unit_test(test_request_params_strip_unknown),
        cmocka_unit_test(test_request_params_two_plugins),
        cmocka_unit_test(test_combination_with_model_rewrite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
