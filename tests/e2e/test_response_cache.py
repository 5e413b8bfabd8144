"""The response_cache plugin (ref §2) end to end: exact and semantic hits
from the in-memory store and from a real redis-server (started here on a
free loopback port), streamed hits replayed as SSE, only complete answers
stored, TTL, scope, request controls, and Redis down (the request still
succeeds; the failure is counted)."""
import base64
import json
import subprocess
import time

import httpx
import pytest

from conftest import USE_MODEL, config_yaml, free_port, model_yaml, require, sse_events, wait_until


def routing(mode="exact", extra=""):
    return f"""
routing:
  signals:
    keywords:
      - {{name: cached_kw, operator: OR, keywords: ["cacheme"]}}
  decisions:
    - name: cached_route
      priority: 10
      rules: {{operator: AND, conditions: [{{type: keyword, name: cached_kw}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: semantic-cache
          configuration:
            mode: {mode}
            ttl_seconds: 60
            request_controls: {{enabled: true}}
{extra}
"""


def start(vsr, fakellm, mode="exact", store="", extra="", runtime=False, listener_extra="", ttl=60, controls=""):
    be = fakellm("a")
    port = free_port()
    glob = "  stores:\n    response_cache:\n" + (store or "      backend_type: memory\n")
    if runtime:
        glob += f"  model_catalog:\n    runtime:\n      model: {USE_MODEL}\n      timeout: 30s\n"
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1", listener_extra=listener_extra)
    r = routing(mode, extra).replace("ttl_seconds: 60", f"ttl_seconds: {ttl}")
    r = r.replace("request_controls: {enabled: true}", "request_controls: {enabled: true%s}" % controls)
    cfg = cfg.replace("\nglobal:", r + "global:", 1) + glob
    v = vsr(cfg, port=port)
    v.be = be
    return v


def ask(v, text, stream=False, headers=None, **extra):
    body = {"model": "auto", "messages": [{"role": "user", "content": text}], **extra}
    if stream:
        body["stream"] = True
    with v.client() as c:
        r = c.post("/v1/chat/completions", json=body, headers=headers or {})
    return r


def upstream_calls(v):
    return v.be.stats()["requests"]


def cache_metric(v, op, result):
    text = httpx.get(v.metrics_url, timeout=5).text
    for line in text.splitlines():
        if line.startswith("vsr_response_cache_total{") and f'op="{op}"' in line and f'result="{result}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_exact_hit_from_memory(vsr, fakellm):
    v = start(vsr, fakellm)
    r1 = ask(v, "cacheme: what is two plus two?")
    assert r1.status_code == 200 and r1.headers["x-vsr-cache-hit"] == "false"
    assert r1.headers["x-vsr-response-path"] == "upstream"
    r2 = ask(v, "cacheme: what is two plus two?")
    assert r2.status_code == 200
    assert r2.headers["x-vsr-cache-hit"] == "true"
    assert r2.headers["x-vsr-response-path"] == "cache"
    assert r2.headers["x-vsr-selected-decision"] == "cached_route"
    assert r2.json()["choices"][0]["message"]["content"] == r1.json()["choices"][0]["message"]["content"]
    assert r2.json()["id"] == r1.json()["id"]   # the stored answer itself
    assert upstream_calls(v) == 1
    # another question, or other sampling, is another entry
    assert ask(v, "cacheme: what is three plus three?").headers["x-vsr-cache-hit"] == "false"
    assert ask(v, "cacheme: what is two plus two?", temperature=0.1).headers["x-vsr-cache-hit"] == "false"
    assert upstream_calls(v) == 3
    # a request no cache plugin covers is never looked up
    r = ask(v, "plain question")
    assert "x-vsr-cache-hit" not in r.headers
    assert cache_metric(v, "lookup", "hit") == 1 and cache_metric(v, "store", "stored") == 3


def test_streamed_answer_is_stored_and_replayed(vsr, fakellm):
    v = start(vsr, fakellm)
    r1 = ask(v, "cacheme: stream me", stream=True)
    assert r1.status_code == 200
    text1 = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                    for e in sse_events(r1.text)[:-1] if json.loads(e)["choices"])
    # a streaming client gets the hit as SSE, a plain one as JSON
    r2 = ask(v, "cacheme: stream me", stream=True)
    assert r2.headers["x-vsr-cache-hit"] == "true"
    assert r2.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r2.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == text1
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    r3 = ask(v, "cacheme: stream me")
    assert r3.headers["x-vsr-cache-hit"] == "true"
    assert r3.json()["choices"][0]["message"]["content"] == text1
    assert upstream_calls(v) == 1


def test_only_complete_successful_answers_are_stored(vsr, fakellm):
    v = start(vsr, fakellm)
    # a cut stream is never stored
    with pytest.raises(httpx.RemoteProtocolError):  # the cut reaches the client as a cut
        ask(v, "cacheme: cut", stream=True, headers={"x-fakellm-drop-after": "2"})
    # nor an error
    r = ask(v, "cacheme: error", headers={"x-fakellm-status": "500"})
    assert r.status_code == 500
    assert ask(v, "cacheme: cut", stream=True).headers["x-vsr-cache-hit"] == "false"
    assert ask(v, "cacheme: error").headers["x-vsr-cache-hit"] == "false"
    assert upstream_calls(v) == 4


def test_request_controls_and_ttl(vsr, fakellm):
    v = start(vsr, fakellm)
    q = "cacheme: controls"
    assert ask(v, q, headers={"x-vsr-cache-control": "no-store"}).headers["x-vsr-cache-hit"] == "false"
    assert ask(v, q).headers["x-vsr-cache-hit"] == "false"           # nothing was stored; now it is
    assert ask(v, q).headers["x-vsr-cache-hit"] == "true"
    assert ask(v, q, headers={"x-vsr-cache-control": "no-cache"}).headers["x-vsr-cache-hit"] == "false"
    assert "x-vsr-cache-hit" not in ask(v, q, headers={"x-vsr-cache-control": "bypass"}).headers
    assert upstream_calls(v) == 4
    # ttl=1: gone after a second; max-age refuses an entry older than asked
    q2 = "cacheme: short lived"
    ask(v, q2, headers={"x-vsr-cache-control": "ttl=1"})
    assert ask(v, q2).headers["x-vsr-cache-hit"] == "true"
    time.sleep(1.3)
    assert ask(v, q2).headers["x-vsr-cache-hit"] == "false"
    time.sleep(1.1)
    assert ask(v, q2, headers={"x-vsr-cache-control": "max-age=1"}).headers["x-vsr-cache-hit"] == "false"


def test_scope_user_keeps_users_apart(vsr, fakellm):
    v = start(vsr, fakellm, extra="            scope: user\n")
    # identity headers are only read from trusted peers: without trust, no user, no caching
    q = "cacheme: personal"
    assert "x-vsr-cache-hit" not in ask(v, q, headers={"x-authz-user-id": "alice"}).headers


def test_scope_user_with_trusted_identity(vsr, fakellm):
    be = fakellm("a")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1",
                      listener_extra="    identity:\n      trust_headers: true\n")
    cfg = cfg.replace("\nglobal:", routing("exact", "            scope: user\n") + "global:", 1)
    v = vsr(cfg, port=port)
    v.be = be
    q = "cacheme: personal"
    assert ask(v, q, headers={"x-authz-user-id": "alice"}).headers["x-vsr-cache-hit"] == "false"
    assert ask(v, q, headers={"x-authz-user-id": "alice"}).headers["x-vsr-cache-hit"] == "true"
    assert ask(v, q, headers={"x-authz-user-id": "bob"}).headers["x-vsr-cache-hit"] == "false"
    assert upstream_calls(v) == 2


@pytest.fixture
def redis(tmp_path):
    require(commands=["redis-server"], what="redis-server")
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", str(tmp_path)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up():
        try:
            import socket
            s = socket.create_connection(("127.0.0.1", port), timeout=0.5)
            s.sendall(b"PING\r\n")
            ok = s.recv(16).startswith(b"+PONG")
            s.close()
            return ok
        except OSError:
            return False
    wait_until(up, what="redis-server")
    p.port = port
    yield p
    if p.poll() is None:
        p.terminate()
        p.wait(timeout=10)


def redis_store(port):
    return f"      backend_type: redis\n      redis: {{address: \"127.0.0.1:{port}\", key_prefix: \"t:\"}}\n"


def test_redis_shared_by_two_replicas(vsr, fakellm, redis):
    a = start(vsr, fakellm, store=redis_store(redis.port))
    b = start(vsr, fakellm, store=redis_store(redis.port))
    q = "cacheme: shared answer"
    r1 = ask(a, q)
    assert r1.headers["x-vsr-cache-hit"] == "false"
    wait_until(lambda: cache_metric(a, "store", "stored") == 1, what="the store's put")
    r2 = ask(b, q)   # the other replica, its own backend never called
    assert r2.headers["x-vsr-cache-hit"] == "true"
    assert r2.json()["choices"][0]["message"]["content"] == r1.json()["choices"][0]["message"]["content"]
    assert upstream_calls(b) == 0


def test_redis_down_requests_still_succeed(vsr, fakellm, redis):
    v = start(vsr, fakellm, store=redis_store(redis.port))
    redis.terminate()
    redis.wait(timeout=10)
    for _ in range(3):
        r = ask(v, "cacheme: redis is gone")
        assert r.status_code == 200 and r.headers["x-vsr-cache-hit"] == "false"
    assert upstream_calls(v) == 3
    assert cache_metric(v, "lookup", "error") >= 3


@pytest.mark.parametrize("policy", ["fifo", "lfu"])
def test_redis_eviction_policy_bounds_the_entries(vsr, fakellm, redis, policy):
    store = ("      backend_type: redis\n      max_entries: 2\n"
             f"      eviction_policy: {policy}\n"
             f"      redis: {{address: \"127.0.0.1:{redis.port}\", key_prefix: \"e{policy}:\"}}\n")
    v = start(vsr, fakellm, store=store)
    stored = 0

    def put(q):
        nonlocal stored
        assert ask(v, q).headers["x-vsr-cache-hit"] == "false"
        stored += 1
        wait_until(lambda: cache_metric(v, "store", "stored") == stored, what="the store's put")
        time.sleep(0.1)  # the trim after the put

    put("cacheme: one")
    assert ask(v, "cacheme: one").headers["x-vsr-cache-hit"] == "true"   # one read
    put("cacheme: two")
    put("cacheme: three")   # past max_entries: fifo drops one (oldest), lfu drops two (fewest reads)
    gone, kept = ("one", "two") if policy == "fifo" else ("two", "one")
    assert ask(v, "cacheme: three").headers["x-vsr-cache-hit"] == "true"
    assert ask(v, f"cacheme: {kept}").headers["x-vsr-cache-hit"] == "true"
    assert ask(v, f"cacheme: {gone}").headers["x-vsr-cache-hit"] == "false"
    keys = subprocess.run(["redis-cli", "-p", str(redis.port), "keys", f"e{policy}:k:*"], capture_output=True,
                          text=True, timeout=10).stdout.split()
    assert len(keys) <= 2


def test_semantic_hit(vsr, fakellm):
    require([USE_MODEL], what="embedding model")
    v = start(vsr, fakellm, mode="semantic", runtime=True,
              extra="            semantic: {similarity_threshold: 0.8}\n")
    r1 = ask(v, "cacheme: How do I reset my password?")
    assert r1.headers["x-vsr-cache-hit"] == "false"
    r2 = ask(v, "cacheme: how do i reset my password", headers={"x-vsr-debug": "true"})
    assert r2.headers["x-vsr-cache-hit"] == "true", r2.headers
    assert 0.8 <= float(r2.headers["x-vsr-cache-similarity"]) <= 1.0
    r3 = ask(v, "cacheme: What is the capital of France?")
    assert r3.headers["x-vsr-cache-hit"] == "false"
    assert upstream_calls(v) == 2


def test_messages_client_gets_hits_in_anthropic_shape(vsr, fakellm):
    v = start(vsr, fakellm)
    body = {"model": "auto", "max_tokens": 32, "messages": [{"role": "user", "content": "cacheme: anthropic"}]}
    with v.client() as c:
        r1 = c.post("/v1/messages", json=body)
        r2 = c.post("/v1/messages", json=body)
        r3 = c.post("/v1/messages", json={**body, "stream": True})
    assert r1.headers["x-vsr-cache-hit"] == "false" and r2.headers["x-vsr-cache-hit"] == "true"
    assert r2.json()["type"] == "message"
    assert r2.json()["content"] == r1.json()["content"]
    assert r3.headers["x-vsr-cache-hit"] == "true"
    assert "event: message_stop" in r3.text
    assert upstream_calls(v) == 1


def test_access_log_names_the_cache_and_protocols(vsr, fakellm):
    v = start(vsr, fakellm)
    ask(v, "cacheme: logged", headers={"x-request-id": "rc-1"})
    ask(v, "cacheme: logged", headers={"x-request-id": "rc-2"})
    ask(v, "not cached", headers={"x-request-id": "rc-3"})
    with v.client() as c:
        c.post("/v1/messages", headers={"x-request-id": "rc-4"},
               json={"model": "m1", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})

    def lines():
        out = {}
        for l in v.proc.output().splitlines():
            if l.startswith("{"):
                d = json.loads(l)
                out[d.get("x_request_id")] = d
        return out
    wait_until(lambda: {"rc-1", "rc-2", "rc-3", "rc-4"} <= set(lines()), what="four log lines")
    got = lines()
    assert got["rc-1"]["cache"] == "miss" and got["rc-2"]["cache"] == "hit" and got["rc-3"]["cache"] is None
    assert got["rc-1"]["client_protocol"] is None
    assert (got["rc-4"]["client_protocol"], got["rc-4"]["upstream_protocol"]) == ("anthropic", "openai")


# ---- only what the first client saw, and only good answers ----

def chunk(text=None, finish=None):
    delta = {"content": text} if text is not None else {}
    return "data: " + json.dumps({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                                  "model": "m1", "choices": [{"index": 0, "delta": delta,
                                                              "finish_reason": finish}]}) + "\n\n"


def crafted(body, ctype="text/event-stream"):
    """fakellm answers these bytes (base64 in a header field: they may hold newlines)."""
    raw = body if isinstance(body, bytes) else body.encode()
    return {"x-fakellm-body-base64": base64.b64encode(raw).decode(), "x-fakellm-content-type": ctype}


@pytest.mark.parametrize("stream", [
    chunk("BEFORE") + chunk(finish="stop") + "data: [DONE]\n\n" + chunk(" AFTERDONE") + chunk(finish="stop"),
    chunk("BEFORE") + 'event: error\ndata: {"error":{"message":"overloaded"}}\n\n' + chunk(finish="stop")
    + "data: [DONE]\n\n",
    chunk("BEFORE") + 'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n' + chunk(finish="stop")
    + "data: [DONE]\n\n",
    chunk("BEFO") + chunk(finish="content_filter") + "data: [DONE]\n\n",
], ids=["data-after-done", "error-event", "error-object", "content-filter"])
def test_streams_not_kept(vsr, fakellm, stream):
    v = start(vsr, fakellm)
    q = "cacheme: a stream"
    r1 = ask(v, q, stream=True, headers=crafted(stream))
    assert r1.status_code == 200 and r1.headers["x-vsr-cache-hit"] == "false"
    r2 = ask(v, q, stream=True, headers=crafted(stream))
    assert r2.headers["x-vsr-cache-hit"] == "false", "a stream that was not a good answer was kept"
    assert "AFTERDONE" not in r2.text.split("[DONE]")[0]
    assert upstream_calls(v) == 2


def completion(text, finish="stop"):
    return json.dumps({"id": "chatcmpl-y", "object": "chat.completion", "created": 1, "model": "m1",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": finish}]})


def test_filtered_and_invalid_utf8_answers_not_kept(vsr, fakellm):
    v = start(vsr, fakellm)
    filtered = crafted(completion("partial", "content_filter"), "application/json")
    assert ask(v, "cacheme: filtered", headers=filtered).headers["x-vsr-cache-hit"] == "false"
    assert ask(v, "cacheme: filtered", headers=filtered).headers["x-vsr-cache-hit"] == "false"
    bad = completion("caf\u00e9 BAD").encode().replace("BAD".encode(), b"\xff\xfe")
    h = crafted(bad, "application/json")
    assert ask(v, "cacheme: bad bytes", headers=h).headers["x-vsr-cache-hit"] == "false"
    assert ask(v, "cacheme: bad bytes", headers=h).headers["x-vsr-cache-hit"] == "false"
    ev = chunk("ok ") + chunk("BAD") + chunk(finish="stop") + "data: [DONE]\n\n"
    hs = crafted(ev.encode().replace(b"BAD", b"\xc3\x28"))
    assert ask(v, "cacheme: bad stream", stream=True, headers=hs).headers["x-vsr-cache-hit"] == "false"
    assert ask(v, "cacheme: bad stream", stream=True, headers=hs).headers["x-vsr-cache-hit"] == "false"
    assert upstream_calls(v) == 6
    # a good crafted answer is kept: the checks above are not refusing everything
    good = crafted(completion("fine"), "application/json")
    ask(v, "cacheme: good", headers=good)
    assert ask(v, "cacheme: good", headers=good).headers["x-vsr-cache-hit"] == "true"


def test_translated_answers_replace_invalid_utf8(vsr, fakellm):
    """A backend's bytes that are not UTF-8 never reach a client inside JSON
    vsr wrote: a Messages client gets U+FFFD in their place, whole or streamed."""
    v = start(vsr, fakellm)
    body = {"model": "auto", "max_tokens": 16, "messages": [{"role": "user", "content": "not cached"}]}
    bad = completion("caf BAD").encode().replace(b"BAD", b"\xff\xfe")
    ev = (chunk("ok BAD") + chunk(finish="stop") + "data: [DONE]\n\n").encode().replace(b"BAD", b"\xc3\x28")
    with v.client() as c:
        r = c.post("/v1/messages", json=body, headers=crafted(bad, "application/json"))
        s = c.post("/v1/messages", json={**body, "stream": True}, headers=crafted(ev))
    assert r.status_code == 200
    assert r.content.decode("utf-8")  # strict: raises on a stray byte
    assert r.json()["content"][0]["text"] == "caf \ufffd\ufffd"
    assert s.status_code == 200
    text = "".join(json.loads(e)["delta"].get("text", "") for e in sse_events(s.content.decode("utf-8"))
                   if json.loads(e)["type"] == "content_block_delta")
    assert text == "ok \ufffd("


# ---- the key is the whole request; clients cannot pin answers ----

def content(r):
    return r.json()["choices"][0]["message"]["content"]


def test_every_answer_changing_field_is_in_the_key(vsr, fakellm):
    """A body member or a header field the key does not know still changes
    what a backend answers: each one is part of the key, so a request that
    carries it cannot plant its answer for requests without it."""
    v = start(vsr, fakellm)
    q = "cacheme: pick a colour"
    poisons = [
        ({"guided_choice": ["red"], "fakellm": {"text": "POISON-1"}}, {}),
        ({"chat_template": "{{ 'POISON' }}", "fakellm": {"text": "POISON-2"}}, {}),
        ({"structured_outputs": {"choice": ["x"]}, "fakellm": {"text": "POISON-3"}}, {}),
        ({}, {"x-fakellm-text": "POISON-4"}),   # a header the backend acts on
    ]
    for extra, headers in poisons:
        r = ask(v, q, headers=headers, **extra)
        assert r.headers["x-vsr-cache-hit"] == "false" and content(r).startswith("POISON")
    clean = ask(v, q)
    assert clean.headers["x-vsr-cache-hit"] == "false", "a poisoned entry was served"
    assert "POISON" not in content(clean)
    assert upstream_calls(v) == 5
    # what does not change the answer does not split the cache: member order,
    # stream options, the request id, the client's user agent and SDK fields
    body = {"messages": [{"role": "user", "content": q}], "model": "auto", "user": "u1"}
    with v.client() as c:
        r = c.post("/v1/chat/completions", json=body, headers={"x-request-id": "other", "user-agent": "sdk/2",
                                                                "x-stainless-retry-count": "1"})
    assert r.headers["x-vsr-cache-hit"] == "true" and content(r) == content(clean)
    # a value's own spelling is kept: the same member with another value is another entry
    assert ask(v, q, seed=1).headers["x-vsr-cache-hit"] == "false"


def test_client_ttl_is_capped_by_the_configured_ttl(vsr, fakellm):
    v = start(vsr, fakellm, ttl=1)
    q = "cacheme: pin me"
    ask(v, q, headers={"x-vsr-cache-control": "ttl=31536000"})
    assert ask(v, q).headers["x-vsr-cache-hit"] == "true"
    time.sleep(1.3)
    assert ask(v, q).headers["x-vsr-cache-hit"] == "false", "a client's ttl outlived the operator's"


def test_no_cache_revalidates_but_never_replaces_a_fresh_entry(vsr, fakellm):
    v = start(vsr, fakellm)
    q = "cacheme: keep the first answer"
    first = ask(v, q)
    assert first.headers["x-vsr-cache-hit"] == "false"
    # no-cache goes to the model (each fakellm answer has a new id) ...
    again = ask(v, q, headers={"x-vsr-cache-control": "no-cache, ttl=31536000"})
    assert again.headers["x-vsr-cache-hit"] == "false" and again.json()["id"] != first.json()["id"]
    assert upstream_calls(v) == 2
    # ... and the entry everyone else gets is still the first one
    hit = ask(v, q)
    assert hit.headers["x-vsr-cache-hit"] == "true" and hit.json()["id"] == first.json()["id"]
    # the look no-cache took is not counted as a hit
    assert cache_metric(v, "revalidate", "hit") == 1 and cache_metric(v, "lookup", "hit") == 1
    # with no entry, a no-cache answer is stored as any other
    q2 = "cacheme: nothing stored yet"
    made = ask(v, q2, headers={"x-vsr-cache-control": "no-cache"})
    assert ask(v, q2).json()["id"] == made.json()["id"]


def test_no_cache_replaces_where_the_operator_allows_it(vsr, fakellm):
    v = start(vsr, fakellm, controls=", allow_replace: true")
    q = "cacheme: refresh"
    first = ask(v, q)
    fresh = ask(v, q, headers={"x-vsr-cache-control": "no-cache"})
    hit = ask(v, q)
    assert hit.headers["x-vsr-cache-hit"] == "true"
    assert hit.json()["id"] == fresh.json()["id"] != first.json()["id"]


# ---- scope ----

def test_default_scope_is_per_api_key(vsr, fakellm):
    v = start(vsr, fakellm, listener_extra="    api_keys: [key-one, key-two]")
    q = "cacheme: per key"
    k1 = {"authorization": "Bearer key-one"}
    k2 = {"authorization": "Bearer key-two"}
    r1 = ask(v, q, headers=k1, fakellm={"text": "answer for key one"})
    assert r1.headers["x-vsr-cache-hit"] == "false"
    assert ask(v, q, headers=k1, fakellm={"text": "answer for key one"}).headers["x-vsr-cache-hit"] == "true"
    r2 = ask(v, q, headers=k2, fakellm={"text": "answer for key one"})
    assert r2.headers["x-vsr-cache-hit"] == "false", "another key's answer was served"
    # the same key sent in another field is the same scope
    assert ask(v, q, headers={"api-key": "key-two"},
               fakellm={"text": "answer for key one"}).headers["x-vsr-cache-hit"] == "true"
    assert upstream_calls(v) == 2


def test_scope_global_is_shared_across_keys(vsr, fakellm):
    v = start(vsr, fakellm, extra="            scope: global\n", listener_extra="    api_keys: [key-one, key-two]")
    q = "cacheme: shared on purpose"
    assert ask(v, q, headers={"authorization": "Bearer key-one"}).headers["x-vsr-cache-hit"] == "false"
    assert ask(v, q, headers={"authorization": "Bearer key-two"}).headers["x-vsr-cache-hit"] == "true"


def test_scope_api_key_without_keys_caches_nothing(vsr, fakellm):
    v = start(vsr, fakellm, extra="            scope: api_key\n")
    assert "x-vsr-cache-hit" not in ask(v, "cacheme: nobody").headers


def test_semantic_key_covers_the_conversation(vsr, fakellm):
    """Two conversations that end in the same question are two entries: the
    system prompt and the earlier turns are part of what a hit must share."""
    require([USE_MODEL], what="embedding model")
    v = start(vsr, fakellm, mode="semantic", runtime=True, extra="            semantic: {similarity_threshold: 0.8}\n")

    def conv(system, text):
        body = {"model": "auto", "messages": [{"role": "system", "content": system},
                                              {"role": "user", "content": "cacheme: what is the code?"}],
                "fakellm": {"text": text}}
        with v.client() as c:
            return c.post("/v1/chat/completions", json=body)
    a = conv("The code is SECRET-ALPHA.", "It is SECRET-ALPHA.")
    assert a.headers["x-vsr-cache-hit"] == "false"
    b = conv("You know no codes.", "It is SECRET-ALPHA.")
    assert b.headers["x-vsr-cache-hit"] == "false", "another conversation's answer was served"
    assert conv("The code is SECRET-ALPHA.", "It is SECRET-ALPHA.").headers["x-vsr-cache-hit"] == "true"


def test_request_controls_header_allowed_and_max_ttl(vsr, fakellm):
    """The reference's request_controls.{header, allowed, max_ttl_seconds}: the
    directives come in the named header, only the allowed ones count, and a
    ttl directive is capped by max_ttl_seconds."""
    v = start(vsr, fakellm, ttl=600,
              controls=", header: x-cache-control, allowed: [bypass, ttl], max_ttl_seconds: 1")
    q = "cacheme: header named"
    # vsr's own header is not the one named: ignored, so this answer is stored
    ask(v, q, headers={"x-vsr-cache-control": "bypass"})
    assert ask(v, q).headers["x-vsr-cache-hit"] == "true"
    # the named header's bypass is allowed
    assert "x-vsr-cache-hit" not in ask(v, q, headers={"x-cache-control": "bypass"}).headers
    # no-store is not in allowed: ignored, the answer is served from the cache
    assert ask(v, q, headers={"x-cache-control": "no-store"}).headers["x-vsr-cache-hit"] == "true"
    # ttl=60 under max_ttl_seconds 1: gone after a second although the plugin keeps 600
    q2 = "cacheme: capped ttl"
    ask(v, q2, headers={"x-cache-control": "ttl=60"})
    assert ask(v, q2).headers["x-vsr-cache-hit"] == "true"
    time.sleep(1.3)
    assert ask(v, q2).headers["x-vsr-cache-hit"] == "false"


def test_store_disabled_turns_the_plugins_off(vsr, fakellm):
    """global.stores.response_cache.enabled: false (its older name
    semantic_cache loads the same block)."""
    be = fakellm("a")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [be.endpoint])], default="m1")
    cfg = cfg.replace("\nglobal:", routing() + "global:", 1) + \
        "  stores:\n    semantic_cache:\n      enabled: false\n      backend_type: memory\n"
    v = vsr(cfg, port=port)
    v.be = be
    q = "cacheme: not kept"
    assert "x-vsr-cache-hit" not in ask(v, q).headers
    assert "x-vsr-cache-hit" not in ask(v, q).headers
    assert upstream_calls(v) == 2
