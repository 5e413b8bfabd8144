/* test_responses.c — the Responses API codec: requests (input items,
 * instructions, the prior conversation, tools, formats) to chat bodies, chat
 * answers to Response objects, errors, streams fed whole and cut at every
 * byte, and limits.  JSON in this file is written with ' for " (J()). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "json/json.h"
#include "proto/responses.h"

/* ---- helpers ------------------------------------------------------------ */

/* s with every ' turned into " (8 rotating static buffers). */
static const char *J(const char *s)
{
    static char bufs[8][16384];
    static int next;
    char *b = bufs[next++ & 7];
    size_t n = strlen(s);
    assert_true(n < sizeof(bufs[0]));
    for (size_t i = 0; i <= n; i++)
        b[i] = s[i] == '\'' ? '"' : s[i];
    return b;
}

static void assert_json(const char *s, size_t n)
{
    vsr_json_t j;
    int rc = vsr_json_parse(&j, s, n, NULL);
    if (rc != VSR_OK)
        fprintf(stderr, "not JSON: %.*s\n", (int)n, s);
    assert_int_equal(rc, VSR_OK);
    uint32_t dup;
    assert_int_equal(vsr_json_find_duplicate_key(&j, &dup), 0);
    vsr_json_free(&j);
}

static void assert_buf(const vsr_buf_t *b, const char *want)
{
    if (b->len != strlen(want) || memcmp(b->data, want, b->len) != 0)
        fprintf(stderr, "got  %.*s\nwant %s\n", (int)b->len, b->data, want);
    assert_int_equal(b->len, strlen(want));
    assert_memory_equal(b->data, want, b->len);
}

typedef struct {
    vsr_buf_t chat, items, conv, echo;
    vsr_responses_error_t err;
    int rc;
} req_t;

static void req_run(req_t *r, const char *body, const char *prior, const vsr_responses_limits_t *lim)
{
    vsr_buf_init(&r->chat, 1 << 20);
    vsr_buf_init(&r->items, 1 << 20);
    vsr_buf_init(&r->conv, 1 << 20);
    vsr_buf_init(&r->echo, 1 << 20);
    vsr_responses_out_t out = {&r->chat, &r->items, &r->conv, &r->echo};
    r->rc = vsr_responses_request_to_chat(body, strlen(body), prior, prior ? strlen(prior) : 0, lim, &out, &r->err);
    if (r->rc == VSR_OK) {
        assert_json(r->chat.data, r->chat.len);
        assert_json(r->items.data, r->items.len);
        assert_json(r->conv.data, r->conv.len);
        assert_json(r->echo.data, r->echo.len);
        assert_null(r->err.type);
    } else {
        assert_non_null(r->err.type);
        assert_true(r->err.message[0] != '\0');
    }
}

static void req_free(req_t *r)
{
    vsr_buf_free(&r->chat);
    vsr_buf_free(&r->items);
    vsr_buf_free(&r->conv);
    vsr_buf_free(&r->echo);
}

static void assert_req_err(const char *body, int rc, int status, const char *param, const char *message)
{
    req_t r;
    req_run(&r, body, NULL, NULL);
    if (r.rc != rc || strcmp(r.err.message, message) != 0)
        fprintf(stderr, "rc %d status %d param '%s' message '%s'\n", r.rc, r.err.status, r.err.param, r.err.message);
    assert_int_equal(r.rc, rc);
    assert_int_equal(r.err.status, status);
    assert_string_equal(r.err.param, param);
    assert_string_equal(r.err.message, message);
    req_free(&r);
}

/* ---- request → chat --------------------------------------------------------- */

static void test_request_simple(void **state)
{
    (void)state;
    req_t r;
    req_run(&r, J("{'model':'gpt-4.1','instructions':'Be brief.','input':'Tell me a joke.'}"), NULL, NULL);
    assert_int_equal(r.rc, VSR_OK);
    assert_buf(&r.chat, J("{'model':'gpt-4.1','messages':[{'role':'system','content':'Be brief.'},"
                          "{'role':'user','content':'Tell me a joke.'}]}"));
    assert_buf(&r.items, J("[{'type':'message','role':'user','content':[{'type':'input_text','text':'Tell me a joke.'}]}]"));
    assert_buf(&r.conv, J("[{'role':'user','content':'Tell me a joke.'}]"));
    assert_buf(&r.echo, J("{'instructions':'Be brief.','max_output_tokens':null,'metadata':{},'parallel_tool_calls':true,"
                          "'previous_response_id':null,'reasoning':{'effort':null,'summary':null},'store':true,"
                          "'temperature':1,'text':{'format':{'type':'text'}},'tool_choice':'auto','tools':[],'top_p':1,"
                          "'truncation':'disabled','user':null}"));
    req_free(&r);
}

static void test_request_full(void **state)
{
    (void)state;
    req_t r;
    const char *body = J(
        "{'model':'auto','stream':true,'store':false,'temperature':0.2,'top_p':0.9,'max_output_tokens':256,"
        "'parallel_tool_calls':false,'user':'u-1','metadata':{'k':'v'},'reasoning':{'effort':'low','summary':'auto'},"
        "'include':['reasoning.encrypted_content'],'service_tier':'auto','truncation':'disabled',"
        "'tools':[{'type':'function','name':'get_weather','description':'Weather now',"
        "'parameters':{'type':'object','properties':{'city':{'type':'string'}}},'strict':true}],"
        "'tool_choice':{'type':'function','name':'get_weather'},"
        "'text':{'format':{'type':'json_schema','name':'w','schema':{'type':'object'},'strict':true},'verbosity':'low'},"
        "'input':["
        "{'role':'developer','content':'Use tools.'},"
        "{'type':'message','role':'user','content':[{'type':'input_text','text':'What is this?'},"
        "{'type':'input_image','image_url':'https://e.x/a.png','detail':'low'}]},"
        "{'type':'reasoning','id':'rs_1','summary':[]},"
        "{'role':'assistant','content':'Checking.'},"
        "{'type':'function_call','id':'fc_1','call_id':'call_1','name':'get_weather','arguments':'{\\'city\\':\\'Oslo\\'}'},"
        "{'type':'function_call','call_id':'call_2','name':'get_weather','arguments':'{}'},"
        "{'type':'function_call_output','call_id':'call_1','output':'-3 C'},"
        "{'type':'function_call_output','call_id':'call_2','output':[{'type':'input_text','text':'a'},"
        "{'type':'input_text','text':'b'}]},"
        "{'type':'message','role':'assistant','content':[{'type':'output_text','text':'Cold.','annotations':[]}]}"
        "]}");
    req_run(&r, body, NULL, NULL);
    assert_int_equal(r.rc, VSR_OK);
    const char *msgs =
        "{'role':'system','content':'Use tools.'},"
        "{'role':'user','content':[{'type':'text','text':'What is this?'},"
        "{'type':'image_url','image_url':{'url':'https://e.x/a.png','detail':'low'}}]},"
        "{'role':'assistant','content':'Checking.','tool_calls':["
        "{'id':'call_1','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':\\'Oslo\\'}'}},"
        "{'id':'call_2','type':'function','function':{'name':'get_weather','arguments':'{}'}}]},"
        "{'role':'tool','tool_call_id':'call_1','content':'-3 C'},"
        "{'role':'tool','tool_call_id':'call_2','content':'a\\nb'},"
        "{'role':'assistant','content':'Cold.'}";
    char want[8192];
    snprintf(want, sizeof(want),
             "{'model':'auto','messages':[%s],"
             "'tools':[{'type':'function','function':{'name':'get_weather','description':'Weather now',"
             "'parameters':{'type':'object','properties':{'city':{'type':'string'}}},'strict':true}}],"
             "'tool_choice':{'type':'function','function':{'name':'get_weather'}},'parallel_tool_calls':false,"
             "'max_tokens':256,'temperature':0.2,'top_p':0.9,"
             "'response_format':{'type':'json_schema','json_schema':{'name':'w','schema':{'type':'object'},'strict':true}},"
             "'reasoning_effort':'low','user':'u-1','stream':true,'stream_options':{'include_usage':true}}",
             msgs);
    assert_buf(&r.chat, J(want));
    snprintf(want, sizeof(want), "[%s]", msgs);
    assert_buf(&r.conv, J(want));
    assert_buf(&r.items,
               J("[{'type':'message','role':'developer','content':[{'type':'input_text','text':'Use tools.'}]},"
                 "{'type':'message','role':'user','content':[{'type':'input_text','text':'What is this?'},"
                 "{'type':'input_image','image_url':'https://e.x/a.png','detail':'low'}]},"
                 "{'type':'reasoning','id':'rs_1','summary':[]},"
                 "{'type':'message','role':'assistant','content':[{'type':'output_text','text':'Checking.','annotations':[]}]},"
                 "{'id':'fc_1','type':'function_call','call_id':'call_1','name':'get_weather',"
                 "'arguments':'{\\'city\\':\\'Oslo\\'}','status':'completed'},"
                 "{'type':'function_call','call_id':'call_2','name':'get_weather','arguments':'{}','status':'completed'},"
                 "{'type':'function_call_output','call_id':'call_1','output':'-3 C'},"
                 "{'type':'function_call_output','call_id':'call_2','output':[{'type':'input_text','text':'a'},"
                 "{'type':'input_text','text':'b'}]},"
                 "{'type':'message','role':'assistant','content':[{'type':'output_text','text':'Cold.','annotations':[]}]}]"));
    /* echo keeps what the client sent */
    assert_non_null(strstr(r.echo.data, J("'store':false")));
    assert_non_null(strstr(r.echo.data, J("'metadata':{'k':'v'}")));
    assert_non_null(strstr(r.echo.data, J("'tool_choice':{'type':'function','name':'get_weather'}")));
    req_free(&r);

    /* text.format json_object; tool_choice strings; a function call with no assistant message before it */
    req_run(&r, J("{'model':'m','text':{'format':{'type':'json_object'}},'tool_choice':'required','input':["
                  "{'type':'function_call','call_id':'c','name':'f','arguments':''},"
                  "{'type':'function_call_output','call_id':'c','output':'ok'}]}"),
            NULL, NULL);
    assert_int_equal(r.rc, VSR_OK);
    assert_buf(&r.chat, J("{'model':'m','messages':[{'role':'assistant','content':null,'tool_calls':[{'id':'c','type':"
                          "'function','function':{'name':'f','arguments':''}}]},{'role':'tool','tool_call_id':'c',"
                          "'content':'ok'}],'tool_choice':'required','response_format':{'type':'json_object'}}"));
    req_free(&r);

    /* text parts alone become one string; a refusal keeps the parts */
    req_run(&r, J("{'model':'m','input':[{'role':'user','content':[{'type':'input_text','text':'a'},"
                  "{'type':'input_text','text':'b'}]},{'role':'assistant','content':[{'type':'output_text','text':'c'},"
                  "{'type':'refusal','refusal':'no'}]}]}"),
            NULL, NULL);
    assert_int_equal(r.rc, VSR_OK);
    assert_buf(&r.chat, J("{'model':'m','messages':[{'role':'user','content':'a\\nb'},{'role':'assistant','content':"
                          "[{'type':'text','text':'c'},{'type':'refusal','refusal':'no'}]}]}"));
    req_free(&r);
}

static void test_request_prior(void **state)
{
    (void)state;
    req_t r;
    const char *prior = J("[{'role':'user','content':'Hi'},{'role':'assistant','content':'Hello!'}]");
    req_run(&r, J("{'model':'m','instructions':'New rules.','previous_response_id':'resp_1','input':'And you?'}"), prior,
            NULL);
    assert_int_equal(r.rc, VSR_OK);
    assert_buf(&r.chat, J("{'model':'m','messages':[{'role':'system','content':'New rules.'},{'role':'user','content':'Hi'},"
                          "{'role':'assistant','content':'Hello!'},{'role':'user','content':'And you?'}]}"));
    assert_buf(&r.conv, J("[{'role':'user','content':'Hi'},{'role':'assistant','content':'Hello!'},"
                          "{'role':'user','content':'And you?'}]"));
    assert_non_null(strstr(r.echo.data, J("'previous_response_id':'resp_1'")));
    req_free(&r);

    /* an empty prior array; input as an empty item list */
    req_run(&r, J("{'model':'m','input':[]}"), "[]", NULL);
    assert_int_equal(r.rc, VSR_OK);
    assert_buf(&r.chat, J("{'model':'m','messages':[]}"));
    assert_buf(&r.conv, "[]");
    req_free(&r);

    /* a stored conversation that is not an array is the store's fault */
    req_run(&r, J("{'model':'m','input':'x'}"), "{}", NULL);
    assert_int_equal(r.rc, VSR_ERR_INVALID);
    assert_int_equal(r.err.status, 500);
    req_free(&r);
}

static void test_request_errors(void **state)
{
    (void)state;
    const int E = VSR_ERR_INVALID;
    assert_req_err(J("{'input':'x'}"), E, 400, "model", "Missing required parameter: 'model'.");
    assert_req_err(J("{'model':'m'}"), E, 400, "input", "Missing required parameter: 'input'.");
    assert_req_err(J("{'model':3,'input':'x'}"), E, 400, "model",
                   "Invalid type for 'model': expected a string, but got a number instead.");
    assert_req_err(J("{'model':'m','input':'x','foo':1}"), E, 400, "foo", "Unknown parameter: 'foo'.");
    assert_req_err(J("{'model':'m','input':'x','tools':[{'type':'web_search'}]}"), E, 400, "tools[0].type",
                   "Tools of type 'web_search' are not supported here: only function tools have a chat form.");
    assert_req_err(J("{'model':'m','input':'x','tools':[{'type':'function'}]}"), E, 400, "tools[0].name",
                   "Missing required parameter: 'tools[0].name'.");
    assert_req_err(J("{'model':'m','input':'x','tool_choice':{'type':'file_search'}}"), E, 400, "tool_choice.type",
                   "A tool_choice of type 'file_search' is not supported here: only function tools have a chat form.");
    assert_req_err(J("{'model':'m','input':'x','tool_choice':'any'}"), E, 400, "tool_choice",
                   "Invalid value: 'any'. Supported values are: 'none', 'auto', and 'required'.");
    assert_req_err(J("{'model':'m','input':'x','background':true}"), E, 400, "background",
                   "Background responses are not supported here.");
    assert_req_err(J("{'model':'m','input':'x','truncation':'auto'}"), E, 400, "truncation",
                   "truncation 'auto' is not supported here: the backend would drop input without saying so.");
    assert_req_err(J("{'model':'m','input':'x','prompt':{'id':'p'}}"), E, 400, "prompt",
                   "The 'prompt' parameter is not supported here.");
    assert_req_err(J("{'model':'m','input':'x','temperature':'hot'}"), E, 400, "temperature",
                   "Invalid type for 'temperature': expected a decimal, but got a string instead.");
    assert_req_err(J("{'model':'m','input':'x','temperature':3}"), E, 400, "temperature",
                   "Invalid 'temperature': must be between 0 and 2.");
    assert_req_err(J("{'model':'m','input':'x','max_output_tokens':8}"), E, 400, "max_output_tokens",
                   "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 8 instead.");
    assert_req_err(J("{'model':'m','input':'x','stream':'yes'}"), E, 400, "stream",
                   "Invalid type for 'stream': expected a boolean, but got a string instead.");
    assert_req_err(J("{'model':'m','input':'x','text':{'format':{'type':'xml'}}}"), E, 400, "text.format.type",
                   "Invalid value: 'xml'. Supported values are: 'text', 'json_schema', and 'json_object'.");
    assert_req_err(J("{'model':'m','input':'x','text':{'format':{'type':'json_schema','name':'n'}}}"), E, 400,
                   "text.format.schema", "Missing required parameter: 'text.format.schema'.");
    assert_req_err(J("{'model':'m','input':'x','metadata':{'a':1}}"), E, 400, "metadata.a",
                   "Invalid type for 'metadata.a': expected a string.");
    assert_req_err(J("{'model':'m','input':[{'role':'tool','content':'x'}]}"), E, 400, "input[0].role",
                   "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer', and 'user'.");
    assert_req_err(J("{'model':'m','input':[{'role':'user'}]}"), E, 400, "input[0].content",
                   "Missing required parameter: 'input[0].content'.");
    assert_req_err(J("{'model':'m','input':[{'role':'user','content':[{'type':'input_file','file_id':'f'}]}]}"), E, 400,
                   "input[0].content[0].type", "Content of type 'input_file' is not supported here.");
    assert_req_err(J("{'model':'m','input':[{'role':'user','content':[{'type':'input_image','file_id':'f'}]}]}"), E,
                   400, "input[0].content[0].file_id", "Images by file_id are not supported here; give an image_url.");
    assert_req_err(J("{'model':'m','input':[{'role':'system','content':[{'type':'input_image','image_url':'u'}]}]}"), E,
                   400, "input[0].content[0].type", "Image content is only supported in user messages.");
    assert_req_err(J("{'model':'m','input':[{'role':'user','content':[{'type':'output_text','text':'t'}]}]}"), E, 400,
                   "input[0].content[0].type",
                   "Invalid value: 'output_text'. Supported values are: 'input_text', 'input_image', and 'input_file'.");
    assert_req_err(J("{'model':'m','input':[{'type':'item_reference','id':'msg_1'}]}"), E, 400, "input[0].type",
                   "Input items of type 'item_reference' are not supported here.");
    assert_req_err(J("{'model':'m','input':[{'type':'function_call','call_id':'c','name':'f'}]}"), E, 400,
                   "input[0].arguments", "Missing required parameter: 'input[0].arguments'.");
    assert_req_err(J("{'model':'m','input':[{'type':'function_call_output','call_id':'c','output':3}]}"), E, 400,
                   "input[0].output",
                   "Invalid type for 'input[0].output': expected a string or an array of content parts, but got a number "
                   "instead.");
    assert_req_err(J("{'model':'m','input':5}"), E, 400, "input",
                   "Invalid type for 'input': expected a string or an array of input items, but got a number instead.");
    assert_req_err(J("{'model':'m','input':'x','previous_response_id':7}"), E, 400, "previous_response_id",
                   "Invalid type for 'previous_response_id': expected a string, but got a number instead.");
    assert_req_err(J("{'model':'m','model':'n','input':'x'}"), E, 400, "", "Duplicate parameter: 'model'.");
    assert_req_err("[1]", E, 400, "", "The request body must be a JSON object.");
    assert_req_err("{\"model\":", E, 400, "", "We could not parse the JSON body of your request (unexpected end of input, expected a value at byte 9).");
    /* client text is cut and kept printable */
    req_t r;
    req_run(&r, J("{'model':'m','input':'x','\\u0001\\'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx':1}"), NULL,
            NULL);
    assert_int_equal(r.rc, VSR_ERR_INVALID);
    assert_string_equal(r.err.message, "Unknown parameter: '??xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'.");
    req_free(&r);
    /* null for a refused parameter is its default */
    req_run(&r, J("{'model':'m','input':'x','prompt':null,'conversation':null,'background':false}"), NULL, NULL);
    assert_int_equal(r.rc, VSR_OK);
    req_free(&r);
}

static void test_request_limits(void **state)
{
    (void)state;
    req_t r;
    const char *body = J("{'model':'m','input':[{'role':'user','content':'a'},{'role':'user','content':'b'},"
                         "{'role':'user','content':'c'}]}");
    vsr_responses_limits_t lim = {.max_items = 2};
    req_run(&r, body, NULL, &lim);
    assert_int_equal(r.rc, VSR_ERR_TOO_BIG);
    assert_int_equal(r.err.status, 413);
    assert_string_equal(r.err.message, "The request has more than 2 input items, content parts and tools.");
    req_free(&r);
    lim.max_items = 3;
    req_run(&r, body, NULL, &lim);
    assert_int_equal(r.rc, VSR_OK);
    req_free(&r);
    lim.max_input = 20;
    req_run(&r, body, NULL, &lim);
    assert_int_equal(r.rc, VSR_ERR_TOO_BIG);
    assert_string_equal(r.err.message, "Request body is larger than 20 bytes.");
    req_free(&r);

    char deep[400];
    size_t n = (size_t)snprintf(deep, sizeof(deep), "{\"model\":\"m\",\"input\":");
    for (int i = 0; i < 100; i++)
        deep[n++] = '[';
    for (int i = 0; i < 100; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    req_run(&r, deep, NULL, NULL);
    assert_int_equal(r.rc, VSR_ERR_TOO_BIG);
    assert_string_equal(r.err.message, "Request body is nested deeper than 64 levels.");
    req_free(&r);

    /* the chat buffer's cap */
    vsr_buf_t chat;
    vsr_buf_init(&chat, 20);
    vsr_responses_out_t out = {.chat = &chat};
    vsr_responses_error_t e;
    assert_int_equal(vsr_responses_request_to_chat(body, strlen(body), NULL, 0, NULL, &out, &e), VSR_ERR_TOO_BIG);
    assert_int_equal(e.status, 413);
    vsr_buf_free(&chat);
}

static void test_request_info(void **state)
{
    (void)state;
    vsr_responses_info_t info;
    vsr_responses_error_t e;
    const char *b = J("{'model':'m','input':'x','stream':true,'store':false,'previous_response_id':'resp_abc'}");
    assert_int_equal(vsr_responses_request_info(b, strlen(b), NULL, &info, &e), VSR_OK);
    assert_int_equal(info.stream, 1);
    assert_int_equal(info.store, 0);
    assert_string_equal(info.previous_response_id, "resp_abc");
    b = J("{'model':'m','input':'x'}");
    assert_int_equal(vsr_responses_request_info(b, strlen(b), NULL, &info, &e), VSR_OK);
    assert_int_equal(info.stream, 0);
    assert_int_equal(info.store, 1);
    assert_string_equal(info.previous_response_id, "");
    char longid[300];
    snprintf(longid, sizeof(longid), "{\"previous_response_id\":\"%0200d\"}", 1);
    assert_int_equal(vsr_responses_request_info(longid, strlen(longid), NULL, &info, &e), VSR_ERR_INVALID);
    assert_string_equal(e.param, "previous_response_id");
    assert_int_equal(vsr_responses_request_info("{", 1, NULL, &info, &e), VSR_ERR_INVALID);
}

/* ---- chat answer → Response --------------------------------------------------- */

static const char *ECHO_MIN = "{\"store\":true}";

static void resp_run(const char *chat, const char *conv_in, vsr_buf_t *out, vsr_buf_t *conv, int want_rc)
{
    vsr_responses_meta_t meta = {.id = VSR_SLICE_LIT("resp_42"), .created_at = 1700000000,
                                 .model = VSR_SLICE_LIT("fallback"), .echo = vsr_slice_cstr(ECHO_MIN),
                                 .conv = conv_in ? vsr_slice_cstr(conv_in) : VSR_SLICE_NULL};
    vsr_responses_error_t e;
    int rc = vsr_responses_response_from_chat(chat, strlen(chat), &meta, NULL, out, conv, &e);
    if (rc != want_rc)
        fprintf(stderr, "rc %d: %s\n", rc, e.message);
    assert_int_equal(rc, want_rc);
    if (rc == VSR_OK) {
        assert_json(out->data, out->len);
        if (conv)
            assert_json(conv->data, conv->len);
    }
}

static void test_response_text(void **state)
{
    (void)state;
    vsr_buf_t out, conv;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&conv, 0);
    resp_run(J("{'id':'chatcmpl-1','object':'chat.completion','created':1,'model':'qwen3',"
               "'choices':[{'index':0,'message':{'role':'assistant','content':'Hi there.'},'finish_reason':'stop'}],"
               "'usage':{'prompt_tokens':9,'completion_tokens':3,'total_tokens':12,"
               "'prompt_tokens_details':{'cached_tokens':4},'completion_tokens_details':{'reasoning_tokens':1}}}"),
             J("[{'role':'user','content':'Hi'}]"), &out, &conv, VSR_OK);
    assert_buf(&out, J("{'id':'resp_42','object':'response','created_at':1700000000,'status':'completed','error':null,"
                       "'incomplete_details':null,'model':'qwen3','output':[{'id':'msg_42_0','type':'message',"
                       "'status':'completed','role':'assistant','content':[{'type':'output_text','text':'Hi there.',"
                       "'annotations':[]}]}],'usage':{'input_tokens':9,'input_tokens_details':{'cached_tokens':4},"
                       "'output_tokens':3,'output_tokens_details':{'reasoning_tokens':1},'total_tokens':12},'store':true}"));
    assert_buf(&conv, J("[{'role':'user','content':'Hi'},{'role':'assistant','content':'Hi there.'}]"));

    /* length → incomplete; no model, no usage */
    vsr_buf_reset(&out);
    resp_run(J("{'choices':[{'message':{'content':'Once upon'},'finish_reason':'length'}]}"), NULL, &out, NULL, VSR_OK);
    assert_buf(&out, J("{'id':'resp_42','object':'response','created_at':1700000000,'status':'incomplete','error':null,"
                       "'incomplete_details':{'reason':'max_output_tokens'},'model':'fallback','output':[{'id':'msg_42_0',"
                       "'type':'message','status':'incomplete','role':'assistant','content':[{'type':'output_text',"
                       "'text':'Once upon','annotations':[]}]}],'usage':null,'store':true}"));
    /* a refusal */
    vsr_buf_reset(&out);
    vsr_buf_reset(&conv);
    resp_run(J("{'choices':[{'message':{'content':null,'refusal':'No.'},'finish_reason':'stop'}]}"), "[]", &out, &conv,
             VSR_OK);
    assert_non_null(strstr(out.data, J("'content':[{'type':'refusal','refusal':'No.'}]")));
    assert_buf(&conv, J("[{'role':'assistant','content':null,'refusal':'No.'}]"));
    /* content as text parts */
    vsr_buf_reset(&out);
    vsr_buf_reset(&conv);
    resp_run(J("{'choices':[{'message':{'content':[{'type':'text','text':'a'},{'type':'image'},{'type':'text','text':'b'}]},"
               "'finish_reason':'stop'}]}"),
             "[]", &out, &conv, VSR_OK);
    assert_non_null(strstr(out.data, J("'content':[{'type':'output_text','text':'a\\nb','annotations':[]}]")));
    assert_buf(&conv, J("[{'role':'assistant','content':'a\\nb'}]"));
    vsr_buf_free(&out);
    vsr_buf_free(&conv);
}

static void test_response_tools(void **state)
{
    (void)state;
    vsr_buf_t out, conv;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&conv, 0);
    resp_run(J("{'model':'m','choices':[{'message':{'content':null,'tool_calls':["
               "{'id':'call_a','type':'function','function':{'name':'f','arguments':'{\\'x\\':1}'}},"
               "{'type':'function','function':{'name':'g','arguments':{'y':2}}}]},'finish_reason':'tool_calls'}]}"),
             NULL, &out, &conv, VSR_OK);
    assert_buf(&out, J("{'id':'resp_42','object':'response','created_at':1700000000,'status':'completed','error':null,"
                       "'incomplete_details':null,'model':'m','output':["
                       "{'id':'fc_42_0','type':'function_call','status':'completed','call_id':'call_a','name':'f',"
                       "'arguments':'{\\'x\\':1}'},"
                       "{'id':'fc_42_1','type':'function_call','status':'completed','call_id':'call_42_1','name':'g',"
                       "'arguments':'{\\'y\\':2}'}],'usage':null,'store':true}"));
    assert_buf(&conv, J("[{'role':'assistant','content':null,'tool_calls':["
                        "{'id':'call_a','type':'function','function':{'name':'f','arguments':'{\\'x\\':1}'}},"
                        "{'id':'call_42_1','type':'function','function':{'name':'g','arguments':'{\\'y\\':2}'}}]}]"));
    /* the conversation round-trips into the next request */
    req_t r;
    req_run(&r, J("{'model':'m','input':[{'type':'function_call_output','call_id':'call_a','output':'1'}]}"), conv.data,
            NULL);
    assert_int_equal(r.rc, VSR_OK);
    assert_non_null(strstr(r.chat.data, J("{'role':'tool','tool_call_id':'call_a','content':'1'}")));
    req_free(&r);

    /* not a chat completion */
    vsr_responses_meta_t meta = {.id = VSR_SLICE_LIT("resp_1")};
    vsr_responses_error_t e;
    vsr_buf_reset(&out);
    assert_int_equal(vsr_responses_response_from_chat("{}", 2, &meta, NULL, &out, NULL, &e), VSR_ERR_INVALID);
    assert_int_equal(e.status, 502);
    assert_string_equal(e.type, "server_error");
    assert_int_equal(vsr_responses_response_from_chat("nope", 4, &meta, NULL, &out, NULL, &e), VSR_ERR_INVALID);
    assert_int_equal(e.status, 502);
    const char *bad = J("{'choices':[{'message':{'tool_calls':[{'function':{}}]}}]}");
    assert_int_equal(vsr_responses_response_from_chat(bad, strlen(bad), &meta, NULL, &out, NULL, &e), VSR_ERR_INVALID);
    vsr_buf_free(&out);
    vsr_buf_free(&conv);
}

static void test_errors(void **state)
{
    (void)state;
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    const char *body = J("{'error':{'message':'Rate limit reached','type':'requests','param':null,'code':'rate_limit_exceeded'}}");
    assert_int_equal(vsr_responses_error_from_chat(429, body, strlen(body), &b), VSR_OK);
    assert_buf(&b, J("{'error':{'message':'Rate limit reached','type':'requests','param':null,'code':'rate_limit_exceeded'}}"));
    vsr_buf_reset(&b);
    assert_int_equal(vsr_responses_error_from_chat(503, "<html>", 6, &b), VSR_OK);
    assert_buf(&b, J("{'error':{'message':'upstream answered with status 503','type':'server_error','param':null,'code':null}}"));
    vsr_buf_reset(&b);
    body = J("{'error':{'message':'bad','code':400}}");
    assert_int_equal(vsr_responses_error_from_chat(400, body, strlen(body), &b), VSR_OK);
    assert_buf(&b, J("{'error':{'message':'bad','type':'invalid_request_error','param':null,'code':'400'}}"));
    vsr_buf_reset(&b);
    vsr_responses_error_t e = {.status = 400, .type = "invalid_request_error", .param = "input", .message = "Say \"why\""};
    assert_int_equal(vsr_responses_error_body(&b, &e), VSR_OK);
    assert_buf(&b, J("{'error':{'message':'Say \\'why\\'','type':'invalid_request_error','param':'input','code':null}}"));
    vsr_buf_free(&b);
}

/* ---- streams ------------------------------------------------------------------- */

static const char *SSE_TEXT =
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"qwen3\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\r\n\r\n"
    ": keep-alive\n\n"
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\\"x\\\"\"},\"finish_reason\":null}]}\r\r"
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
    "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n"
    "data: [DONE]\n\n";

static void stream_meta(vsr_responses_meta_t *m)
{
    memset(m, 0, sizeof(*m));
    m->id = VSR_SLICE_LIT("resp_7");
    m->created_at = 1700000001;
    m->model = VSR_SLICE_LIT("auto");
    m->echo = vsr_slice_cstr(ECHO_MIN);
    m->conv = VSR_SLICE_LIT("[{\"role\":\"user\",\"content\":\"Hi\"}]");
}

/* Runs a stream fed in pieces of `step` bytes (0: whole); returns finish's rc. */
static int stream_run(const char *in, size_t n, size_t cut, const vsr_responses_limits_t *lim, vsr_buf_t *out,
                      vsr_buf_t *final, vsr_buf_t *conv)
{
    vsr_responses_meta_t m;
    stream_meta(&m);
    vsr_responses_stream_t s;
    vsr_responses_stream_init(&s, &m, lim);
    vsr_buf_reset(out);
    vsr_responses_stream_feed(&s, in, cut, out);
    vsr_responses_stream_feed(&s, in + cut, n - cut, out);
    int rc = vsr_responses_stream_finish(&s, out);
    if (final) {
        vsr_buf_reset(final);
        vsr_buf_append_slice(final, vsr_buf_slice(&s.final));
    }
    if (conv) {
        vsr_buf_reset(conv);
        vsr_buf_append_slice(conv, vsr_buf_slice(&s.conv));
    }
    vsr_responses_stream_free(&s);
    return rc;
}

/* Checks the event framing: each event is "event: T\ndata: J\n\n" with J a
 * JSON object whose type is T and sequence_number counts from 0; writes the
 * event types, space-separated, into types. */
static void check_events(const vsr_buf_t *out, char *types, size_t cap)
{
    size_t i = 0, k = 0;
    uint64_t seq = 0;
    types[0] = '\0';
    while (i < out->len) {
        const char *p = out->data + i;
        assert_true(out->len - i > 7 && memcmp(p, "event: ", 7) == 0);
        const char *nl = memchr(p, '\n', out->len - i);
        assert_non_null(nl);
        size_t tlen = (size_t)(nl - p) - 7;
        const char *d = nl + 1;
        assert_true(memcmp(d, "data: ", 6) == 0);
        const char *end = strstr(d, "\n\n");
        assert_non_null(end);
        assert_null(memchr(d, '\n', (size_t)(end - d))); /* one data line */
        assert_json(d + 6, (size_t)(end - d - 6));
        char want[160];
        snprintf(want, sizeof(want), "{\"type\":\"%.*s\",\"sequence_number\":%llu", (int)tlen, p + 7,
                 (unsigned long long)seq++);
        assert_true(strncmp(d + 6, want, strlen(want)) == 0);
        assert_true(k + tlen + 2 < cap);
        if (k)
            types[k++] = ' ';
        memcpy(types + k, p + 7, tlen);
        k += tlen;
        types[k] = '\0';
        i = (size_t)(end + 2 - out->data);
    }
}

static void test_stream_text(void **state)
{
    (void)state;
    vsr_buf_t out, final, conv, cut;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&final, 0);
    vsr_buf_init(&conv, 0);
    vsr_buf_init(&cut, 0);
    size_t n = strlen(SSE_TEXT);
    assert_int_equal(stream_run(SSE_TEXT, n, n, NULL, &out, &final, &conv), VSR_OK);
    char types[2048];
    check_events(&out, types, sizeof(types));
    assert_string_equal(types, "response.created response.in_progress response.output_item.added "
                               "response.content_part.added response.output_text.delta response.output_text.delta "
                               "response.output_text.done response.content_part.done response.output_item.done "
                               "response.completed");
    const char *want_final =
        "{\"id\":\"resp_7\",\"object\":\"response\",\"created_at\":1700000001,\"status\":\"completed\",\"error\":null,"
        "\"incomplete_details\":null,\"model\":\"qwen3\",\"output\":[{\"id\":\"msg_7_0\",\"type\":\"message\","
        "\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":"
        "\"Hello \\\"x\\\"\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":5,\"input_tokens_details\":"
        "{\"cached_tokens\":0},\"output_tokens\":2,\"output_tokens_details\":{\"reasoning_tokens\":0},"
        "\"total_tokens\":7},\"store\":true}";
    assert_buf(&final, want_final);
    assert_buf(&conv, "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello \\\"x\\\"\"}]");
    /* the last event carries the final object */
    char tail[4096];
    snprintf(tail, sizeof(tail), ",\"response\":%s}\n\n", want_final);
    assert_true(out.len > strlen(tail) && strcmp(out.data + out.len - strlen(tail), tail) == 0);
    assert_non_null(strstr(out.data, "\"item_id\":\"msg_7_0\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hel\""));

    /* split at every byte position: the same bytes */
    for (size_t c = 0; c <= n; c++) {
        assert_int_equal(stream_run(SSE_TEXT, n, c, NULL, &cut, NULL, NULL), VSR_OK);
        assert_int_equal(cut.len, out.len);
        assert_memory_equal(cut.data, out.data, out.len);
    }
    /* one byte at a time */
    vsr_responses_meta_t m;
    stream_meta(&m);
    vsr_responses_stream_t s;
    vsr_responses_stream_init(&s, &m, NULL);
    vsr_buf_reset(&cut);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(vsr_responses_stream_feed(&s, SSE_TEXT + i, 1, &cut), VSR_OK);
    assert_int_equal(vsr_responses_stream_finish(&s, &cut), VSR_OK);
    vsr_responses_stream_free(&s);
    assert_int_equal(cut.len, out.len);
    assert_memory_equal(cut.data, out.data, out.len);

    /* a stream without [DONE] that sent its finish ends normally; bytes after [DONE] are ignored */
    const char *no_done = strstr(SSE_TEXT, "data: [DONE]");
    assert_int_equal(stream_run(SSE_TEXT, (size_t)(no_done - SSE_TEXT), 0, NULL, &cut, NULL, NULL), VSR_OK);
    assert_int_equal(cut.len, out.len);
    vsr_buf_t more;
    vsr_buf_init(&more, 0);
    vsr_buf_append_cstr(&more, SSE_TEXT);
    vsr_buf_append_cstr(&more, "data: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n");
    assert_int_equal(stream_run(more.data, more.len, 0, NULL, &cut, NULL, NULL), VSR_OK);
    assert_int_equal(cut.len, out.len);
    vsr_buf_free(&more);

    vsr_buf_free(&out);
    vsr_buf_free(&final);
    vsr_buf_free(&conv);
    vsr_buf_free(&cut);
}

static void test_stream_tools(void **state)
{
    (void)state;
    const char *in =
        "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me see.\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
        "data: [DONE]\n\n";
    vsr_buf_t out, final, conv;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&final, 0);
    vsr_buf_init(&conv, 0);
    assert_int_equal(stream_run(in, strlen(in), 0, NULL, &out, &final, &conv), VSR_OK);
    char types[4096];
    check_events(&out, types, sizeof(types));
    assert_string_equal(types,
                        "response.created response.in_progress response.output_item.added response.content_part.added "
                        "response.output_text.delta response.output_text.done response.content_part.done "
                        "response.output_item.done response.output_item.added response.function_call_arguments.delta "
                        "response.function_call_arguments.delta response.function_call_arguments.done "
                        "response.output_item.done response.output_item.added response.function_call_arguments.delta "
                        "response.function_call_arguments.done response.output_item.done response.completed");
    assert_json(final.data, final.len);
    assert_non_null(strstr(final.data, "{\"id\":\"fc_7_1\",\"type\":\"function_call\",\"status\":\"completed\","
                                       "\"call_id\":\"call_1\",\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}"));
    assert_non_null(strstr(final.data, "{\"id\":\"fc_7_2\",\"type\":\"function_call\",\"status\":\"completed\","
                                       "\"call_id\":\"call_7_2\",\"name\":\"g\",\"arguments\":\"{}\"}"));
    assert_buf(&conv, "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Let me see.\","
                      "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                      "\"arguments\":\"{\\\"a\\\":1}\"}},{\"id\":\"call_7_2\",\"type\":\"function\",\"function\":"
                      "{\"name\":\"g\",\"arguments\":\"{}\"}}]}]");
    vsr_buf_free(&out);
    vsr_buf_free(&final);
    vsr_buf_free(&conv);
}

/* A request's echo (here with line breaks inside its tools) goes into every
 * event's response object, so it must not break the one-line data rule. */
static void test_stream_echo(void **state)
{
    (void)state;
    req_t r;
    req_run(&r, "{\"model\":\"m\",\"input\":\"x\",\"tools\":[\n {\"type\": \"function\",\r\n\t\"name\":\"a b\"}\n]}",
            NULL, NULL);
    assert_int_equal(r.rc, VSR_OK);
    assert_null(memchr(r.echo.data, '\n', r.echo.len));
    assert_non_null(strstr(r.echo.data, "\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]"));
    vsr_responses_meta_t m;
    stream_meta(&m);
    m.echo = vsr_buf_slice(&r.echo);
    vsr_responses_stream_t s;
    vsr_responses_stream_init(&s, &m, NULL);
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    size_t n = strlen(SSE_TEXT);
    assert_int_equal(vsr_responses_stream_feed(&s, SSE_TEXT, n, &out), VSR_OK);
    char types[2048];
    check_events(&out, types, sizeof(types));
    assert_non_null(strstr(types, "response.completed"));
    assert_json(s.final.data, s.final.len);
    vsr_responses_stream_free(&s);
    vsr_buf_free(&out);
    req_free(&r);
}

static void test_stream_refusal(void **state)
{
    (void)state;
    const char *in = "data: {\"choices\":[{\"delta\":{\"refusal\":\"I can\"}}]}\n\n"
                     "data: {\"choices\":[{\"delta\":{\"refusal\":\"not.\"},\"finish_reason\":\"stop\"}]}\n\n"
                     "data: [DONE]\n\n";
    vsr_buf_t out, final, conv;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&final, 0);
    vsr_buf_init(&conv, 0);
    assert_int_equal(stream_run(in, strlen(in), 0, NULL, &out, &final, &conv), VSR_OK);
    char types[2048];
    check_events(&out, types, sizeof(types));
    assert_string_equal(types, "response.created response.in_progress response.output_item.added "
                               "response.content_part.added response.refusal.delta response.refusal.delta "
                               "response.refusal.done response.content_part.done response.output_item.done "
                               "response.completed");
    assert_non_null(strstr(out.data, "\"part\":{\"type\":\"refusal\",\"refusal\":\"\"}"));
    assert_non_null(strstr(final.data, "\"content\":[{\"type\":\"refusal\",\"refusal\":\"I cannot.\"}]"));
    assert_buf(&conv, "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
                      "\"refusal\":\"I cannot.\"}]");
    /* text, then a refusal: two parts of one message */
    const char *both = "data: {\"choices\":[{\"delta\":{\"content\":\"Well\"}}]}\n\n"
                       "data: {\"choices\":[{\"delta\":{\"refusal\":\"no\"},\"finish_reason\":\"stop\"}]}\n\n";
    assert_int_equal(stream_run(both, strlen(both), 0, NULL, &out, &final, NULL), VSR_OK);
    assert_non_null(strstr(out.data, "\"content_index\":1,\"delta\":\"no\""));
    assert_non_null(strstr(final.data, "\"content\":[{\"type\":\"output_text\",\"text\":\"Well\",\"annotations\":[]},"
                                       "{\"type\":\"refusal\",\"refusal\":\"no\"}]"));
    vsr_buf_free(&out);
    vsr_buf_free(&final);
    vsr_buf_free(&conv);
}

static void test_stream_incomplete_and_failures(void **state)
{
    (void)state;
    vsr_buf_t out, final, conv;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&final, 0);
    vsr_buf_init(&conv, 0);
    char types[2048];

    /* length → response.incomplete */
    const char *len_in = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
    assert_int_equal(stream_run(len_in, strlen(len_in), 0, NULL, &out, &final, NULL), VSR_OK);
    check_events(&out, types, sizeof(types));
    assert_non_null(strstr(types, "response.output_item.done response.incomplete"));
    assert_non_null(strstr(final.data, "\"status\":\"incomplete\",\"error\":null,\"incomplete_details\":{\"reason\":"
                                       "\"max_output_tokens\"},\"model\":\"auto\""));

    /* malformed upstream SSE → response.failed, later bytes ignored */
    const char *bad = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {nope\n\n"
                      "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n";
    vsr_responses_meta_t m;
    stream_meta(&m);
    vsr_responses_stream_t s;
    vsr_responses_stream_init(&s, &m, NULL);
    vsr_buf_reset(&out);
    assert_int_equal(vsr_responses_stream_feed(&s, bad, strlen(bad), &out), VSR_ERR_INVALID);
    size_t len = out.len;
    assert_int_equal(vsr_responses_stream_feed(&s, "data: [DONE]\n\n", 14, &out), VSR_ERR_INVALID);
    assert_int_equal(vsr_responses_stream_finish(&s, &out), VSR_ERR_INVALID);
    assert_int_equal(out.len, len);
    check_events(&out, types, sizeof(types));
    assert_string_equal(types, "response.created response.in_progress response.output_item.added "
                               "response.content_part.added response.output_text.delta response.failed");
    assert_non_null(strstr(s.final.data, "\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":"
                                         "\"upstream sent an event that is not a JSON object\"}"));
    assert_int_equal(s.conv.len, 0);
    vsr_responses_stream_free(&s);

    /* an upstream error event */
    const char *err_in = "data: {\"error\":{\"message\":\"overloaded\"}}\n\n";
    assert_int_equal(stream_run(err_in, strlen(err_in), 0, NULL, &out, &final, NULL), VSR_ERR_INVALID);
    check_events(&out, types, sizeof(types));
    assert_string_equal(types, "response.created response.in_progress response.failed");
    assert_non_null(strstr(final.data, "\"message\":\"overloaded\""));

    /* ended before its finish; [DONE] before a finish */
    const char *early = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    assert_int_equal(stream_run(early, strlen(early), 0, NULL, &out, &final, &conv), VSR_ERR_INVALID);
    assert_non_null(strstr(final.data, "upstream stream ended before its end"));
    assert_int_equal(conv.len, 0);
    assert_int_equal(stream_run("data: [DONE]\n\n", 14, 0, NULL, &out, &final, NULL), VSR_ERR_INVALID);
    check_events(&out, types, sizeof(types));
    assert_string_equal(types, "response.created response.in_progress response.failed");
    /* an empty stream */
    assert_int_equal(stream_run("", 0, 0, NULL, &out, NULL, NULL), VSR_ERR_INVALID);
    check_events(&out, types, sizeof(types));
    assert_string_equal(types, "response.created response.in_progress response.failed");

    /* interleaved tool calls */
    const char *inter =
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"name\":\"f\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"g\"}}]}}]}\n\n";
    assert_int_equal(stream_run(inter, strlen(inter), 0, NULL, &out, &final, NULL), VSR_ERR_INVALID);
    assert_non_null(strstr(final.data, "upstream interleaved its tool calls"));
    /* a finished answer with no content still has a message item */
    const char *empty = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    assert_int_equal(stream_run(empty, strlen(empty), 0, NULL, &out, &final, NULL), VSR_OK);
    check_events(&out, types, sizeof(types));
    assert_non_null(strstr(types, "response.output_item.added response.content_part.added response.output_text.done"));
    vsr_buf_free(&out);
    vsr_buf_free(&final);
    vsr_buf_free(&conv);
}

static void test_stream_limits(void **state)
{
    (void)state;
    vsr_buf_t out, final;
    vsr_buf_init(&out, 0);
    vsr_buf_init(&final, 0);
    char types[2048];
    /* an event longer than max_event */
    vsr_responses_limits_t lim = {.max_event = 64};
    size_t n = strlen(SSE_TEXT);
    assert_int_equal(stream_run(SSE_TEXT, n, 0, &lim, &out, &final, NULL), VSR_ERR_INVALID);
    check_events(&out, types, sizeof(types));
    assert_string_equal(types, "response.created response.in_progress response.failed");
    assert_non_null(strstr(final.data, "upstream sent an event larger than the limit"));
    /* an answer longer than max_output */
    lim.max_event = 0;
    lim.max_output = 4;
    assert_int_equal(stream_run(SSE_TEXT, n, 0, &lim, &out, &final, NULL), VSR_ERR_INVALID);
    assert_non_null(strstr(final.data, "upstream answer is larger than the limit"));
    /* too many output items */
    vsr_responses_limits_t l2 = {.max_items = 1};
    const char *two = "data: {\"choices\":[{\"delta\":{\"content\":\"a\",\"tool_calls\":[{\"index\":0,\"function\":"
                      "{\"name\":\"f\"}}]}}]}\n\n";
    assert_int_equal(stream_run(two, strlen(two), 0, &l2, &out, &final, NULL), VSR_ERR_INVALID);
    assert_non_null(strstr(final.data, "too many output items"));
    /* the output buffer's cap */
    vsr_responses_meta_t m;
    stream_meta(&m);
    vsr_responses_stream_t s;
    vsr_responses_stream_init(&s, &m, NULL);
    vsr_buf_t small;
    vsr_buf_init(&small, 100);
    assert_int_equal(vsr_responses_stream_feed(&s, SSE_TEXT, n, &small), VSR_ERR_TOO_BIG);
    assert_int_equal(vsr_responses_stream_feed(&s, SSE_TEXT, n, &small), VSR_ERR_INVALID);
    vsr_responses_stream_free(&s);
    vsr_buf_free(&small);
    vsr_buf_free(&out);
    vsr_buf_free(&final);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_simple),
        cmocka_unit_test(test_request_full),
        cmocka_unit_test(test_request_prior),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_request_limits),
        cmocka_unit_test(test_request_info),
        cmocka_unit_test(test_response_text),
        cmocka_unit_test(test_response_tools),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_stream_text),
        cmocka_unit_test(test_stream_tools),
        cmocka_unit_test(test_stream_echo),
        cmocka_unit_test(test_stream_refusal),
        cmocka_unit_test(test_stream_incomplete_and_failures),
        cmocka_unit_test(test_stream_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
