"""Anthropic's Messages API both ways (ref §4.1, parity cases
`anthropic-messages-ingress` and `auto-essay-anthropic-backend`):

- ingress: POST /v1/messages is routed exactly like chat and answered in
  Anthropic's shapes (message, event stream, errors), whatever the backend;
- egress: a model of api_format anthropic gets the chat request as a Messages
  request (x-api-key, anthropic-version) and its answer back as chat.

The clients are httpx (exact bytes) and the official SDKs (tests/tools/sdk_client.js)."""
import http.server
import json
import os
import subprocess
import threading

import httpx
import pytest

from conftest import MODEL_CACHE, ROOT, config_yaml, free_port, model_yaml, require, sse_events

SDK_DIR = MODEL_CACHE / "sdk"
SDK_CLIENT = ROOT / "tests" / "tools" / "sdk_client.js"

ROUTING = """
routing:
  signals:
    keywords:
      - {name: code_keywords, operator: OR, keywords: ["python", "golang"]}
      - {name: essay_keywords, operator: OR, keywords: ["poem", "essay"]}
      - {name: hello_keywords, operator: OR, keywords: ["greetings"]}
  decisions:
    - name: code_route
      priority: 30
      rules: {operator: AND, conditions: [{type: keyword, name: code_keywords}]}
      modelRefs: [{model: general}]
      plugins:
        - type: system_prompt
          configuration: {mode: insert, system_prompt: "You are a careful senior engineer."}
    - name: essay_route
      priority: 10
      rules: {operator: AND, conditions: [{type: keyword, name: essay_keywords}]}
      modelRefs: [{model: claude}]
    - name: hello_fast
      priority: 40
      rules: {operator: AND, conditions: [{type: keyword, name: hello_keywords}]}
      modelRefs: [{model: general}]
      plugins:
        - type: fast_response
          configuration: {message: "Hello from the router."}
"""


def claude_model(endpoint, extra=None):
    b = {"endpoint": endpoint, "api_key": "sk-ant-provider", "provider": "anthropic"}
    b.update(extra or {})
    return model_yaml("claude", [b], "claude-up").replace(
        "      backend_refs:", "      api_format: anthropic\n      backend_refs:", 1)


@pytest.fixture
def both(vsr, fakellm):
    """vsr with an OpenAI backend (`general`, the default) and an Anthropic
    one (`claude`), both fakellm, and the keyword decisions above."""
    oa, an = fakellm("oa"), fakellm("an")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("general", [oa.endpoint], "general-up"), claude_model(an.endpoint)],
                      default="general")
    v = vsr(cfg.replace("\nglobal:", ROUTING + "global:", 1), port=port)
    v.oa, v.an = oa, an
    return v


def last_call(backend):
    return httpx.get(backend.url + "/_fakellm/log", timeout=5).json()["entries"][-1]


def messages(v, body, headers=None, **kw):
    with v.client() as c:
        return c.post("/v1/messages", json=body, headers=headers or {}, **kw)


def user(text, **extra):
    return {"model": "auto", "max_tokens": 64, "messages": [{"role": "user", "content": text}], **extra}


def anthropic_events(text):
    """[(event name, data object)] of an Anthropic event stream."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if name:
            out.append((name, json.loads("\n".join(data))))
    return out


# ---- ingress: /v1/messages ----

def test_messages_ingress_routed_like_chat(both):
    r = messages(both, user("Write a python function that reverses a list."))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-vsr-selected-decision"] == "code_route"
    assert r.headers["x-vsr-selected-model"] == "general"
    assert r.headers["x-vsr-client-protocol"] == "anthropic"
    assert r.headers["x-vsr-upstream-protocol"] == "openai"
    m = r.json()
    assert m["type"] == "message" and m["role"] == "assistant"
    assert m["content"] == [{"type": "text", "text": "Hello from oa"}]
    assert m["stop_reason"] == "end_turn"
    assert m["usage"]["output_tokens"] == 3 and m["usage"]["input_tokens"] > 0
    assert int(r.headers["content-length"]) == len(r.content)
    call = last_call(both.oa)
    assert call["path"] == "/v1/chat/completions"          # the chat path, not the client's
    assert call["model"] == "general-up"
    assert call["body"]["system"].startswith("You are a careful senior engineer.")
    assert call["body"]["last_user"] == "Write a python function that reverses a list."
    assert call["body"]["max_tokens"] == 64


def test_messages_ingress_system_and_history_translated(both):
    body = {"model": "general", "max_tokens": 10, "system": "Be brief.",
            "messages": [{"role": "user", "content": "first"},
                         {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                         {"role": "user", "content": [{"type": "text", "text": "second"}]}]}
    r = messages(both, body)
    assert r.status_code == 200, r.text
    call = last_call(both.oa)
    assert call["body"]["system"] == "Be brief."
    assert call["body"]["n_messages"] == 4
    assert call["body"]["last_user"] == "second"
    assert "x-vsr-selected-decision" not in r.headers  # an explicit model: passthrough


def test_messages_ingress_stream(both):
    with both.client() as c, c.stream("POST", "/v1/messages", json=user("golang generics", stream=True)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in r.headers
        text = r.read().decode()
    ev = anthropic_events(text)
    names = [n for n, _ in ev]
    assert names[0] == "message_start" and names[1] == "content_block_start"
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    deltas = "".join(d["delta"]["text"] for n, d in ev if n == "content_block_delta")
    assert deltas == "tok0 tok1 tok2 tok3 tok4 "
    md = dict(ev)["message_delta"]
    assert md["delta"]["stop_reason"] == "end_turn"
    assert md["usage"]["output_tokens"] == 5
    assert last_call(both.oa)["body"]["stream"] is True


def test_messages_ingress_errors_in_anthropic_shape(both):
    def err(r, status, etype):
        assert r.status_code == status, r.text
        b = r.json()
        assert b["type"] == "error" and b["error"]["type"] == etype, b
        return b["error"]["message"]

    assert err(messages(both, {"model": "auto", "messages": []}), 400,
               "invalid_request_error") == "max_tokens: Field required"
    assert err(messages(both, {"max_tokens": 5, "messages": []}), 400,
               "invalid_request_error") == "model field is required"
    assert "not available" in err(messages(both, user("x", model="no-such-model")), 400, "invalid_request_error")
    with both.client() as c:
        r = c.post("/v1/messages", content=b'{"model": "auto", "max_tokens": 5, "messages": [')
    assert "malformed JSON" in err(r, 400, "invalid_request_error")
    with both.client() as c:
        r = c.get("/v1/messages")
    err(r, 405, "invalid_request_error")
    # an upstream error status: relayed with its status, in Anthropic's shape
    r = messages(both, user("golang", model="general"), headers={"x-fakellm-status": "503"})
    assert err(r, 503, "api_error") == "fakellm injected 503"
    r = messages(both, user("golang", model="general"), headers={"x-fakellm-status": "429"})
    err(r, 429, "rate_limit_error")


def test_messages_ingress_fast_response(both):
    r = messages(both, user("greetings!"))
    assert r.status_code == 200
    assert r.headers["x-vsr-response-path"] == "fast_response"
    m = r.json()
    assert m["type"] == "message" and m["content"][0]["text"] == "Hello from the router."
    with both.client() as c, c.stream("POST", "/v1/messages", json=user("greetings!", stream=True)) as r:
        ev = anthropic_events(r.read().decode())
    assert [n for n, _ in ev][-1] == "message_stop"
    assert "".join(d["delta"]["text"] for n, d in ev if n == "content_block_delta") == "Hello from the router."


def test_messages_ingress_cut_stream_ends_with_error_event(both):
    with both.client() as c, c.stream("POST", "/v1/messages", json=user("golang", stream=True),
                                      headers={"x-fakellm-drop-after": "2"}) as r:
        assert r.status_code == 200
        text = r.read().decode()  # a well-framed end: the error is in the stream
    ev = anthropic_events(text)
    names = [n for n, _ in ev]
    assert "message_stop" not in names
    assert names[-1] == "error", names
    assert ev[-1][1]["error"]["type"] == "api_error"


def test_messages_ingress_backend_down(vsr):
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("general", [f"127.0.0.1:{free_port()}"])], default="general"), port=port)
    r = messages(v, user("hi", model="general"))
    assert r.status_code == 503
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"


def test_messages_x_api_key_is_the_client_key(vsr, fakellm):
    be = fakellm("oa")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("general", [be.endpoint])], default="general",
                      listener_extra="    api_keys: [sk-client-1]")
    v = vsr(cfg, port=port)
    r = messages(v, user("hi", model="general"), headers={"x-api-key": "sk-client-1"})
    assert r.status_code == 200, r.text
    r = messages(v, user("hi", model="general"), headers={"x-api-key": "wrong"})
    assert r.status_code == 401
    assert r.json() == {"type": "error", "error": {"type": "authentication_error",
                                                    "message": "Unauthorized: missing or invalid API key"}}
    with v.client() as c:  # every /v1/messages path
        r = c.post("/v1/messages/count_tokens", json=user("hi", model="general"), headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "authentication_error"
    # the chat path takes it as well, and answers in OpenAI's shape
    r = v.post_chat({"model": "general", "messages": [{"role": "user", "content": "x"}]},
                    headers={"x-api-key": "sk-client-1"})
    assert r.status_code == 200
    r = v.post_chat({"model": "general", "messages": [{"role": "user", "content": "x"}]},
                    headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


# ---- egress: api_format anthropic ----

def test_chat_to_anthropic_backend(both):
    r = both.post_chat({"model": "auto", "max_tokens": 64,
                        "messages": [{"role": "system", "content": "Write well."},
                                     {"role": "user", "content": "Write a short poem about rivers."}]})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "essay_route"
    assert r.headers["x-vsr-selected-model"] == "claude"
    assert r.headers["x-vsr-upstream-protocol"] == "anthropic"
    c = r.json()
    assert c["object"] == "chat.completion"
    assert c["choices"][0]["message"] == {"role": "assistant", "content": "Hello from an"}
    assert c["choices"][0]["finish_reason"] == "stop"
    u = c["usage"]
    assert u["completion_tokens"] == 3 and u["total_tokens"] == u["prompt_tokens"] + 3
    call = last_call(both.an)
    assert call["path"] == "/v1/messages"
    assert call["model"] == "claude-up"
    assert call["body"]["max_tokens"] == 64
    assert call["body"]["n_messages"] == 1           # the system prompt went to `system`
    assert call["body"]["last_user"] == "Write a short poem about rivers."


def test_chat_to_anthropic_backend_default_max_tokens_and_stream(both):
    body = {"model": "claude", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}]}
    with both.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    content = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
    assert content == "tok0 tok1 tok2 tok3 tok4 "
    assert [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
    call = last_call(both.an)
    assert call["body"]["max_tokens"] == 4096 and call["body"]["stream"] is True


def test_chat_to_anthropic_backend_errors(both):
    r = both.post_chat({"model": "claude", "messages": [{"role": "user", "content": "x"}]},
                       headers={"x-fakellm-status": "429"})
    assert r.status_code == 429
    assert r.json()["error"]["type"] == "rate_limit_error"
    # what Messages cannot say is refused before any call
    before = len(httpx.get(both.an.url + "/_fakellm/log").json()["entries"])
    r = both.post_chat({"model": "claude", "n": 2, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "api_format anthropic" in r.json()["error"]["message"]
    assert len(httpx.get(both.an.url + "/_fakellm/log").json()["entries"]) == before


def test_chat_to_anthropic_cut_stream(both):
    body = {"model": "claude", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with both.client() as c, c.stream("POST", "/v1/chat/completions", json=body,
                                      headers={"x-fakellm-drop-after": "1"}) as r:
        text = r.read().decode()
    events = sse_events(text)
    assert "[DONE]" not in events
    assert "error" in json.loads(events[-1])


class _Capture(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        body = self.rfile.read(n)
        _Capture.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(body)))
        out = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-up",
                          "content": [{"type": "text", "text": "Rivers carve the land."}],
                          "stop_reason": "end_turn", "stop_sequence": None,
                          "usage": {"input_tokens": 10, "output_tokens": 5}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


def test_anthropic_provider_auth_and_body(vsr):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        port = free_port()
        v = vsr(config_yaml(port, [claude_model(f"127.0.0.1:{srv.server_address[1]}")]), port=port)
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                                   "parameters": {"type": "object", "properties": {}}}}]
        r = v.post_chat({"model": "claude", "temperature": 0.5, "stop": ["END"], "tools": tools,
                         "messages": [{"role": "system", "content": "Sys."},
                                      {"role": "user", "content": "poem"}]},
                        headers={"authorization": "Bearer client-secret"})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "Rivers carve the land."
        assert r.json()["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        path, headers, body = _Capture.seen[-1]
        assert path == "/v1/messages"
        assert headers["x-api-key"] == "sk-ant-provider"
        assert headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in headers  # neither the client's key nor a Bearer form of the provider's
        assert body["model"] == "claude-up" and body["system"] == "Sys."
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "poem"}]}]
        assert body["temperature"] == 0.5 and body["stop_sequences"] == ["END"]
        assert body["tools"][0]["name"] == "get_weather" and "input_schema" in body["tools"][0]
    finally:
        srv.shutdown()
        srv.server_close()


def test_messages_both_sides_anthropic_relays_the_answer(both):
    """A Messages client and a Messages backend: the answer passes as the backend sent it."""
    r = messages(both, user("Write a poem"))
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-model"] == "claude"
    assert "x-vsr-client-protocol" not in r.headers
    m = r.json()
    assert m["type"] == "message" and m["content"][0]["text"] == "Hello from an"
    assert m["model"] == "claude-up"
    assert last_call(both.an)["path"] == "/v1/messages"


# ---- the official SDKs ----

def sdk(cmd):
    require([SDK_DIR / "node_modules" / "openai", SDK_DIR / "node_modules" / "@anthropic-ai" / "sdk"], ["node"],
            what="client SDKs")
    out = subprocess.run(["node", str(SDK_CLIENT), json.dumps(cmd)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, VSR_SDK_DIR=str(SDK_DIR)))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_anthropic_sdk_against_vsr(both):
    base = both.url
    out = sdk({"sdk": "anthropic", "base": base, "op": "create",
               "params": user("Write a python function")})
    assert "error" not in out, out
    assert out["message"]["content"][0]["text"] == "Hello from oa"
    out = sdk({"sdk": "anthropic", "base": base, "op": "stream", "params": user("golang please")})
    assert "error" not in out, out
    assert out["text"] == "tok0 tok1 tok2 tok3 tok4 "
    assert out["events"][0] == "message_start" and out["events"][-1] == "message_stop"
    assert out["message"]["stop_reason"] == "end_turn" and out["message"]["usage"]["output_tokens"] == 5
    out = sdk({"sdk": "anthropic", "base": base, "op": "create", "params": user("x", model="no-such-model")})
    assert out["error"]["status"] == 400 and out["error"]["name"] == "BadRequestError"
    assert out["error"]["body"]["error"]["type"] == "invalid_request_error"


def test_openai_sdk_against_anthropic_backend(both):
    base = both.url + "/v1"
    params = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    out = sdk({"sdk": "openai", "base": base, "op": "chat", "params": params})
    assert "error" not in out, out
    assert out["completion"]["choices"][0]["message"]["content"] == "Hello from an"
    out = sdk({"sdk": "openai", "base": base, "op": "chat_stream",
               "params": {**params, "stream_options": {"include_usage": True}}})
    assert "error" not in out, out
    assert out["text"] == "tok0 tok1 tok2 tok3 tok4 "
    assert out["chunks"][-1]["usage"]["completion_tokens"] == 5


def test_translation_over_http2(both, tmp_path):
    """h2c prior knowledge (nghttp): the buffered answer gets its own length, the stream its events."""
    require(commands=["nghttp"], what="nghttp2-client")
    for body, want in ((user("golang"), b'"type":"message"'), (user("golang", stream=True), b"event: message_stop")):
        f = tmp_path / "body.json"
        f.write_text(json.dumps(body))
        p = subprocess.run(["nghttp", "-v", "-d", str(f), "-H", "content-type: application/json",
                            both.url + "/v1/messages"], capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert want in p.stdout, p.stdout[-2000:]
        assert b":status: 200" in p.stdout
    chat = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    f.write_text(json.dumps(chat))
    p = subprocess.run(["nghttp", "-d", str(f), both.url + "/v1/chat/completions"], capture_output=True, timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout)["choices"][0]["message"]["content"] == "Hello from an"


# ---- POST /v1/messages/count_tokens ----

def count_body(text, **extra):
    return {"model": "auto", "messages": [{"role": "user", "content": text}], **extra}


def test_count_tokens_forwarded_to_anthropic_backend(both):
    """Routed like a message; a Messages backend counts the client's body, its model rewritten."""
    body = count_body("Write a poem about rivers.", system=[{"type": "text", "text": "Sys.",
                                                             "cache_control": {"type": "ephemeral"}}],
                      thinking={"type": "enabled", "budget_tokens": 1024})
    with both.client() as c:
        r = c.post("/v1/messages/count_tokens", json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-model"] == "claude"
    assert r.headers["x-vsr-selected-decision"] == "essay_route"
    assert "x-vsr-token-count" not in r.headers
    call = last_call(both.an)
    assert call["path"] == "/v1/messages/count_tokens"
    assert call["model"] == "claude-up"
    got = r.json()  # the backend's own answer, relayed
    raw = got["fakellm"]["request"]["body"]
    assert got["input_tokens"] == -(-len(raw.encode()) // 4)
    sent = json.loads(raw)
    assert sent == {**body, "model": "claude-up"}  # no field lost or added: thinking, cache_control kept
    assert got["fakellm"]["request"]["headers"]["anthropic-version"] == "2023-06-01"


def test_count_tokens_estimated_for_a_chat_backend(both):
    before = len(httpx.get(both.oa.url + "/_fakellm/log").json()["entries"])
    text = "Write a python function that reverses a list."
    with both.client() as c:
        r = c.post("/v1/messages/count_tokens", json=count_body(text, system="Be brief."))
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-token-count"] == "estimate"
    assert r.headers["x-vsr-selected-model"] == "general"
    assert r.json() == {"input_tokens": -(-(len(text) + len("Be brief.")) // 4)}
    assert len(httpx.get(both.oa.url + "/_fakellm/log").json()["entries"]) == before  # no call


def test_messages_paths_errors_in_anthropic_shape(both):
    def err(r, status, etype):
        assert r.status_code == status, r.text
        b = r.json()
        assert b["type"] == "error" and b["error"]["type"] == etype, b
        return b["error"]["message"]

    with both.client() as c:
        err(c.get("/v1/messages/count_tokens"), 405, "invalid_request_error")
        err(c.post("/v1/messages/batches", json={}), 404, "not_found_error")
        assert err(c.post("/v1/messages/count_tokens", json={"model": "auto"}), 400,
                   "invalid_request_error") == "messages: Field required"
        assert "not available" in err(c.post("/v1/messages/count_tokens", json=count_body("x", model="nope")),
                                      400, "invalid_request_error")
        err(c.post("/v1/messages/count_tokens", content=b"{"), 400, "invalid_request_error")


def test_count_tokens_sdk(both):
    out = sdk({"sdk": "anthropic", "base": both.url, "op": "count_tokens",
               "params": count_body("Write an essay on tides.")})
    assert "error" not in out, out
    assert out["count"]["input_tokens"] > 0
    assert last_call(both.an)["path"] == "/v1/messages/count_tokens"
    out = sdk({"sdk": "anthropic", "base": both.url, "op": "count_tokens", "params": count_body("golang generics")})
    assert out["count"] == {"input_tokens": 4}


# ---- the Responses API and Completions to api_format anthropic ----

@pytest.fixture
def both_r(vsr, fakellm):
    """`both`, with the Responses API served."""
    oa, an = fakellm("oa"), fakellm("an")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("general", [oa.endpoint], "general-up"), claude_model(an.endpoint)],
                      default="general", global_extra="    response_api:\n      enabled: true\n")
    v = vsr(cfg.replace("\nglobal:", ROUTING + "global:", 1), port=port)
    v.oa, v.an = oa, an
    return v


def test_responses_to_anthropic_backend(both_r):
    body = {"model": "auto", "input": "Write a poem about rivers.", "instructions": "Write well.",
            "max_output_tokens": 50}
    with both_r.client() as c:
        r = c.post("/v1/responses", json=body)
        assert r.status_code == 200, r.text
        assert r.headers["x-vsr-selected-model"] == "claude"
        assert r.headers["x-vsr-client-protocol"] == "openai-responses"
        assert r.headers["x-vsr-upstream-protocol"] == "anthropic"
        resp = r.json()
        assert resp["object"] == "response" and resp["status"] == "completed"
        assert resp["output"][0]["content"][0]["text"] == "Hello from an"
        assert resp["usage"]["output_tokens"] == 3 and resp["usage"]["input_tokens"] > 0
        call = last_call(both_r.an)
        assert call["path"] == "/v1/messages" and call["model"] == "claude-up"
        assert call["body"]["max_tokens"] == 50 and call["body"]["last_user"] == "Write a poem about rivers."
        got = c.get(f"/v1/responses/{resp['id']}")  # kept like any other
        assert got.status_code == 200 and got.json()["output"] == resp["output"]
        # the backend's error: its status, in OpenAI's shape
        r = c.post("/v1/responses", json={"model": "claude", "input": "x"}, headers={"x-fakellm-status": "429"})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["type"] == "rate_limit_error"


def test_openai_sdk_responses_to_anthropic_backend(both_r):
    out = sdk({"sdk": "openai", "base": both_r.url + "/v1", "op": "responses",
               "params": {"model": "claude", "input": "hi"}})
    assert "error" not in out, out
    assert out["first"]["output"][0]["content"][0]["text"] == "Hello from an"
    assert out["next"]["previous_response_id"] == out["first"]["id"]
    call = last_call(both_r.an)  # the continuation: the first turn, its answer, the new input
    assert call["body"]["n_messages"] == 3 and call["body"]["last_user"] == "and then?"
    assert out["after_delete_status"] == 404


def test_responses_stream_to_anthropic_backend(both_r):
    out = sdk({"sdk": "openai", "base": both_r.url + "/v1", "op": "responses_stream",
               "params": {"model": "claude", "input": "stream please"}})
    assert "error" not in out, out
    assert out["types"][0] == "response.created" and out["types"][-1] == "response.completed"
    assert out["text"] == "tok0 tok1 tok2 tok3 tok4 "
    assert out["final"]["usage"]["output_tokens"] == 5
    assert out["got"]["id"] == out["final"]["id"]
    call = last_call(both_r.an)
    assert call["path"] == "/v1/messages" and call["body"]["stream"] is True
    # a cut stream ends failed, never completed
    with both_r.client() as c, c.stream("POST", "/v1/responses", json={"model": "claude", "input": "x", "stream": True},
                                        headers={"x-fakellm-drop-after": "2"}) as r:
        text = r.read().decode()
    assert "response.completed" not in text and "response.failed" in text


def test_completions_to_anthropic_backend(both):
    with both.client() as c:
        r = c.post("/v1/completions", json={"model": "claude", "prompt": ["Say hi"], "max_tokens": 20,
                                            "temperature": 0.3, "stop": ["END"]})
        assert r.status_code == 200, r.text
        assert r.headers["x-vsr-upstream-protocol"] == "anthropic"
        comp = r.json()
        assert comp["object"] == "text_completion"
        assert comp["choices"] == [{"index": 0, "text": "Hello from an", "logprobs": None, "finish_reason": "stop"}]
        assert comp["usage"]["completion_tokens"] == 3
        call = last_call(both.an)
        assert call["path"] == "/v1/messages" and call["model"] == "claude-up"
        assert call["body"]["max_tokens"] == 20 and call["body"]["last_user"] == "Say hi"
        # what has no chat form is refused before any call; an error of the backend keeps its status
        before = len(httpx.get(both.an.url + "/_fakellm/log").json()["entries"])
        r = c.post("/v1/completions", json={"model": "claude", "prompt": ["a", "b"]})
        assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]
        r = c.post("/v1/completions", json={"model": "claude", "prompt": "a", "echo": True})
        assert r.status_code == 400 and "echo" in r.json()["error"]["message"]
        assert len(httpx.get(both.an.url + "/_fakellm/log").json()["entries"]) == before
        r = c.post("/v1/completions", json={"model": "claude", "prompt": "a"}, headers={"x-fakellm-status": "529"})
        assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error"


def test_completions_stream_to_anthropic_backend(both):
    params = {"model": "claude", "prompt": "Say hi", "max_tokens": 20, "stream_options": {"include_usage": True}}
    out = sdk({"sdk": "openai", "base": both.url + "/v1", "op": "completions", "params": {**params,
                                                                                       "stream_options": None}})
    assert "error" not in out, out
    assert out["completion"]["choices"][0]["text"] == "Hello from an"
    out = sdk({"sdk": "openai", "base": both.url + "/v1", "op": "completions_stream", "params": params})
    assert "error" not in out, out
    assert out["text"] == "tok0 tok1 tok2 tok3 tok4 "
    assert all(ch["object"] == "text_completion" for ch in out["chunks"])
    assert [ch["choices"][0]["finish_reason"] for ch in out["chunks"] if ch["choices"]][-1] == "stop"
    assert out["chunks"][-1]["usage"]["completion_tokens"] == 5
    assert last_call(both.an)["body"]["stream"] is True
    with both.client() as c, c.stream("POST", "/v1/completions", json={"model": "claude", "prompt": "x",
                                                                      "stream": True}) as r:
        events = sse_events(r.read().decode())
    assert events[-1] == "[DONE]"
    with both.client() as c, c.stream("POST", "/v1/completions", json={"model": "claude", "prompt": "x", "stream": True},
                                      headers={"x-fakellm-drop-after": "1"}) as r:
        events = sse_events(r.read().decode())
    assert "[DONE]" not in events and "error" in json.loads(events[-1])


# ---- a Messages client and a Messages model: the client's body, with vsr's edits only ----

RICH = {"model": "auto", "max_tokens": 64,
        "system": [{"type": "text", "text": "Sys.", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
        "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Tides rise."}},
            {"type": "text", "text": "Write a poem about this.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                              {"type": "text", "text": "A draft."}]},
            {"role": "user", "content": "Again, a poem."}]}


def test_messages_to_anthropic_backend_passes_the_body_through(both):
    r = messages(both, RICH, headers={"anthropic-beta": "prompt-caching-2024-07-31"})
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-model"] == "claude"
    req = r.json()["fakellm"]["request"]
    assert json.loads(req["body"]) == {**RICH, "model": "claude-up"}  # thinking, cache_control, document kept
    assert req["headers"]["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert req["headers"]["x-api-key"] == "sk-ant-provider"
    # the same request routed to a chat model cannot carry the document: refused, and no call
    before = len(httpx.get(both.oa.url + "/_fakellm/log").json()["entries"])
    r = messages(both, {**RICH, "messages": RICH["messages"][:2] + [{"role": "user", "content": "in python"}]})
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error"
    msg = r.json()["error"]["message"]
    assert "general" in msg and "'document' block has no chat form" in msg, msg
    assert len(httpx.get(both.oa.url + "/_fakellm/log").json()["entries"]) == before


def test_messages_to_anthropic_backend_keeps_plugin_edits(vsr, fakellm):
    an = fakellm("an")
    port = free_port()
    routing = ROUTING.replace("      modelRefs: [{model: claude}]\n",
                              "      modelRefs: [{model: claude}]\n      plugins:\n        - type: system_prompt\n"
                              "          configuration: {mode: insert, system_prompt: \"Answer in verse.\"}\n", 1)
    cfg = config_yaml(port, [model_yaml("general", [an.endpoint], "general-up"), claude_model(an.endpoint)],
                      default="general")
    v = vsr(cfg.replace("\nglobal:", routing + "global:", 1), port=port)
    body = {**RICH, "system": "Be brief."}
    r = messages(v, body)
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "essay_route"
    sent = json.loads(r.json()["fakellm"]["request"]["body"])
    assert sent["system"].startswith("Answer in verse.") and "Be brief." in sent["system"]  # the plugin's edit
    rest = {k: x for k, x in sent.items() if k != "system"}
    assert rest == {k: x for k, x in body.items() if k != "system"} | {"model": "claude-up"}  # the rest as sent


def test_anthropic_sdk_thinking_and_caching_reach_the_backend(both):
    params = {"model": "auto", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
              "system": [{"type": "text", "text": "Long context.", "cache_control": {"type": "ephemeral"}}],
              "messages": [{"role": "user", "content": "Write a poem about rivers."}]}
    out = sdk({"sdk": "anthropic", "base": both.url, "op": "create", "params": params})
    assert "error" not in out, out
    sent = json.loads(out["message"]["fakellm"]["request"]["body"])
    assert sent["thinking"] == params["thinking"] and sent["system"] == params["system"]
    assert sent["model"] == "claude-up"


def test_messages_with_a_document_skip_the_response_cache(vsr, fakellm):
    an = fakellm("an")
    port = free_port()
    routing = ROUTING.replace("      modelRefs: [{model: claude}]\n",
                              "      modelRefs: [{model: claude}]\n      plugins:\n        - type: semantic-cache\n"
                              "          configuration: {mode: exact, ttl_seconds: 60}\n", 1)
    cfg = config_yaml(port, [model_yaml("general", [an.endpoint], "general-up"), claude_model(an.endpoint)],
                      default="general")
    v = vsr(cfg.replace("\nglobal:", routing + "global:", 1) + "  stores:\n    response_cache:\n"
            "      backend_type: memory\n", port=port)

    def ask(doc):
        body = {"model": "auto", "max_tokens": 64, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": doc}},
            {"type": "text", "text": "Write a poem about this."}]}]}
        r = messages(v, body)
        assert r.status_code == 200, r.text
        assert r.headers.get("x-vsr-cache-hit") != "true", "answered about another document, from the cache"
        return json.loads(r.json()["fakellm"]["request"]["body"])["messages"][0]["content"][0]["source"]["data"]

    # a chat client's answer to the same text, kept; then the same text with documents: each answered by the
    # model about its own document, never from the cache
    with v.client() as c:
        for _ in range(2):
            r = c.post("/v1/chat/completions", content=b'{"model":"auto","messages":[{"role":"user","content":'
                       b'"Write a poem about this."}],"max_tokens":64}')  # the bytes of the documents' chat form
        assert r.headers["x-vsr-cache-hit"] == "true"
    assert ask("Tides rise.") == "Tides rise."
    assert ask("Rivers run.") == "Rivers run."
    assert an.stats()["requests"] == 3
