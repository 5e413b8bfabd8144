/* test_metadata_signal.c — metadata signals over the request's "metadata"
 * object, events signals over the routing text, and their load-time
 * checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "signals/signals.h"

#define HEAD                                                        \
    "version: v0.3\n"                                               \
    "listeners: [{name: l, address: 127.0.0.1, port: 18891}]\n"     \
    "providers:\n"                                                  \
    "  models: [{name: m, backend_refs: [{endpoint: '127.0.0.1:1'}]}]\n"

static const char *DOC =
    HEAD
    "routing:\n"
    "  signals:\n"
    "    metadata:\n"
    "      - {name: tier_gold, key: tier, predicate: {equals: gold}}\n"
    "      - {name: has_tenant, key: tenant}\n"
    "      - {name: big_budget, key: budget, predicate: {gte: 100, lt: 1000}}\n"
    "      - {name: region_eu, key: region, predicate: {in: [eu-west, eu-north]}}\n"
    "      - {name: no_trace, key: trace, predicate: {exists: false}}\n"
    "      - {name: level_two, key: level, predicate: {equals: 2}}\n"
    "    events:\n"
    "      - {name: outage, event_types: [incident, outage], severities: [critical, high]}\n"
    "      - {name: rollback, action_codes: [ROLLBACK, \"c++\"]}\n"
    "      - {name: urgent, temporal: true}\n"
    "      - {name: all4, event_types: [outage], severities: [High, bogus], action_codes: [page], temporal: true}\n"
    "  decisions:\n"
    "    - {name: d, rules: {operator: OR, conditions: [{type: metadata, name: tier_gold}, {type: event, name: outage}]},"
    " modelRefs: [{model: m}]}\n";

static vsr_config_t *cfg;
static vsr_signals_t *sigs;

static int setup(void **state)
{
    (void)state;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    if (vsr_config_load_string("t.yaml", DOC, strlen(DOC), &cfg, &err) != VSR_OK) {
        fprintf(stderr, "%.*s", (int)err.len, err.data);
        return -1;
    }
    sigs = vsr_signals_compile(&cfg->recipes[0], &err);
    vsr_buf_free(&err);
    return sigs ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    vsr_signals_free(sigs);
    vsr_config_free(cfg);
    return 0;
}

static int match(const char *type, const char *name, const char *metadata)
{
    vsr_chat_view_t chat;
    memset(&chat, 0, sizeof(chat));
    chat.last_user = -1;
    chat.metadata = metadata ? vsr_slice_cstr(metadata) : vsr_slice(NULL, 0);
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.chat = &chat;
    int i = vsr_signals_find(sigs, type, name);
    assert_true(i >= 0);
    vsr_signal_result_t r = vsr_signals_eval(sigs, i, &in);
    assert_true(r.confidence == (r.matched ? 1.0 : 0.0));
    return r.matched;
}

static void test_metadata_predicates(void **state)
{
    (void)state;
    assert_true(match("metadata", "tier_gold", "{\"tier\":\"gold\"}"));
    assert_true(match("metadata", "tier_gold", "{\"tier\":\"g\\u006fld\"}")); /* unescaped */
    assert_false(match("metadata", "tier_gold", "{\"tier\":\"silver\"}"));
    assert_false(match("metadata", "tier_gold", NULL));
    assert_false(match("metadata", "tier_gold", "{\"tier\":\"gold\""));    /* malformed: no metadata */
    assert_true(match("metadata", "has_tenant", "{\"tenant\":\"acme\"}"));
    assert_false(match("metadata", "has_tenant", "{\"tenant\":null}"));
    assert_false(match("metadata", "has_tenant", "{\"other\":1}"));
    assert_true(match("metadata", "big_budget", "{\"budget\":100}"));
    assert_true(match("metadata", "big_budget", "{\"budget\":\"999.5\"}")); /* OpenAI metadata values are strings */
    assert_false(match("metadata", "big_budget", "{\"budget\":1000}"));
    assert_false(match("metadata", "big_budget", "{\"budget\":\"lots\"}"));
    assert_true(match("metadata", "region_eu", "{\"region\":\"eu-north\"}"));
    assert_false(match("metadata", "region_eu", "{\"region\":\"us-east\"}"));
    assert_true(match("metadata", "no_trace", "{}"));
    assert_true(match("metadata", "no_trace", NULL));
    assert_false(match("metadata", "no_trace", "{\"trace\":\"1\"}"));
    assert_true(match("metadata", "level_two", "{\"level\":2.0}")); /* numbers by value */
    assert_true(match("metadata", "level_two", "{\"level\":\"2\"}"));
    assert_false(match("metadata", "level_two", "{\"level\":3}"));
}

static void test_metadata_bounded(void **state)
{
    (void)state;
    size_t n = VSR_SIGNALS_MAX_METADATA_BYTES + 64;
    char *big = malloc(n + 1);
    int off = snprintf(big, n, "{\"tier\":\"gold\",\"pad\":\"");
    memset(big + off, 'x', n - (size_t)off - 2);
    big[n - 2] = '"';
    big[n - 1] = '}';
    big[n] = 0;
    assert_false(match("metadata", "tier_gold", big));
    big[VSR_SIGNALS_MAX_METADATA_BYTES - 2] = '"';
    big[VSR_SIGNALS_MAX_METADATA_BYTES - 1] = '}';
    big[VSR_SIGNALS_MAX_METADATA_BYTES] = 0;
    assert_true(match("metadata", "tier_gold", big));
    free(big);
}

static vsr_signal_result_t event(const char *name, const char *text)
{
    vsr_chat_view_t chat;
    memset(&chat, 0, sizeof(chat));
    chat.last_user = -1;
    chat.metadata = vsr_slice_cstr("{\"event_type\":\"outage\",\"severity\":\"critical\"}"); /* not read */
    vsr_signal_input_t in;
    memset(&in, 0, sizeof(in));
    in.chat = &chat;
    in.text = vsr_slice_cstr(text);
    int i = vsr_signals_find(sigs, "event", name);
    assert_true(i >= 0);
    return vsr_signals_eval(sigs, i, &in);
}

static void test_events(void **state)
{
    (void)state;
    /* two criteria configured (event_types, severities): one met 0.75, both 1.0 */
    vsr_signal_result_t r = event("outage", "We have an Incident in eu-west");
    assert_true(r.matched);
    assert_true(r.confidence == 0.75);
    r = event("outage", "CRITICAL outage of the API");
    assert_true(r.matched && r.confidence == 1.0);
    r = event("outage", "the incidents list"); /* whole words only */
    assert_false(r.matched);
    assert_true(r.confidence == 0.0);
    assert_false(event("outage", "").matched); /* the metadata object is not read */
    /* action codes are literals, case-insensitive */
    assert_true(event("rollback", "please rollback now").matched);
    assert_true(event("rollback", "compile it with c++ today").matched);
    assert_false(event("rollback", "compile it with cxx today").matched);
    /* temporal: the fixed words; '.' is any rune as in Go's RE2 */
    assert_true(event("urgent", "this is time-sensitive").matched);
    assert_true(event("urgent", "a critical window opens").matched);
    assert_true(event("urgent", "ASAP please").matched);
    assert_false(event("urgent", "nowhere to go, urgently").matched);
    /* four criteria (the bogus severity is dropped): one met 0.625, all 1.0 */
    r = event("all4", "an outage");
    assert_true(r.matched && r.confidence == 0.625);
    r = event("all4", "high priority outage: page the on-call now");
    assert_true(r.matched && r.confidence == 1.0);
    assert_true(r.value == 4.0);
    assert_false(event("all4", "bogus").matched);
    /* the text is sampled to 2,048 runes (head, middle, tail): a word in the cut part is not seen */
    size_t n = 20000;
    char *big = malloc(n + 1);
    memset(big, 'a', n);
    memcpy(big + 1000, " urgent ", 8);
    big[n] = 0;
    assert_false(event("urgent", big).matched);
    memcpy(big + 100, " urgent ", 8);
    assert_true(event("urgent", big).matched);
    free(big);
}

static void expect_error(const char *yaml, const char *expected)
{
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = NULL;
    int rc = vsr_config_load_string("t.yaml", yaml, strlen(yaml), &c, &err);
    vsr_buf_append(&err, "", 1);
    if (rc == VSR_OK || strstr(err.data, expected) == NULL)
        fprintf(stderr, "expected \"%s\" in:\n%s", expected, err.data);
    assert_int_not_equal(rc, VSR_OK);
    assert_non_null(strstr(err.data, expected));
    vsr_buf_free(&err);
}

static void test_config_errors(void **state)
{
    (void)state;
    expect_error(HEAD "routing:\n  signals:\n    events: [{name: e}]\n",
                 "t.yaml:7:14: an events signal needs event_types, severities, action_codes or temporal: true\n");
    expect_error(HEAD "routing:\n  signals:\n    events: [{name: e, severities: [severe], temporal: false}]\n",
                 "an events signal needs event_types, severities, action_codes or temporal: true\n");
    expect_error(HEAD "routing:\n  signals:\n    events: [{name: e, severities: [high], temporal: {within: 1h}}]\n",
                 "expected");
    expect_error(HEAD "routing:\n  signals:\n    events: [{name: e, temporal: true}]\n"
                      "    event_context: [{name: f, temporal: true}]\n",
                 "t.yaml:8:5: event_context and events are one family: write its signals under events\n");
    expect_error(HEAD "routing:\n  signals:\n    metadata: [{name: m, key: k, predicate: {}}]\n",
                 "t.yaml:7:45: a metadata predicate needs equals, in, exists, gt, gte, lt or lte\n");
    expect_error(HEAD "routing:\n  signals:\n    metadata: [{name: m}]\n", "missing required key \"key\"");
    expect_error(HEAD "routing:\n  signals:\n    metadata: [{name: m, key: k}]\n"
                      "  decisions: [{name: d, rules: {type: metadata, name: nope}, modelRefs: [{model: m}]}]\n",
                 "metadata signal \"nope\" is not declared in routing.signals.metadata");
}

/* event_context: the reference docs' other name for events */
static void test_event_context_alias(void **state)
{
    (void)state;
    static const char doc[] = HEAD "routing:\n  signals:\n    event_context: [{name: e, temporal: true}]\n"
                                   "  decisions: [{name: d, rules: {type: event, name: e}, modelRefs: [{model: m}]}]\n";
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_config_t *c = NULL;
    assert_int_equal(vsr_config_load_string("t.yaml", doc, strlen(doc), &c, &err), VSR_OK);
    assert_int_equal(c->recipes[0].signals.n_events, 1);
    assert_true(c->recipes[0].signals.events[0].temporal);
    vsr_config_free(c);
    vsr_buf_free(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_predicates),
        cmocka_unit_test(test_metadata_bounded),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_event_context_alias),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
