"""The proxy path: what vsr sends upstream and what the client gets back."""
import json

import httpx

from conftest import config_yaml, echo, free_port, model_yaml

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


def test_chat_round_trip_rewrites_model_and_keeps_answer(stack):
    r = stack.post_chat(CHAT)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    req = echo(r)
    assert req["method"] == "POST"
    assert req["path"] == "/v1/chat/completions"
    sent = json.loads(req["body"])
    assert sent["model"] == "m1-upstream"          # provider_model_id
    assert sent["messages"] == CHAT["messages"]
    assert body["model"] == "m1-upstream"
    assert r.headers["x-fakellm-backend"] in ("a", "b")


def test_body_spliced_byte_exact_around_model(stack):
    raw = b'{"messages": [{"role":"user","content":"caf\\u00e9 \xc3\xa9"}],  "model" : "m1", "n":1 }'
    r = httpx.post(stack.url + "/v1/chat/completions", content=raw,
                   headers={"content-type": "application/json"})
    assert r.status_code == 200
    sent = echo(r)["body"].encode()
    assert sent == raw.replace(b'"m1"', b'"m1-upstream"')
    assert echo(r)["headers"]["content-length"] == str(len(sent))


def test_body_unchanged_when_model_id_is_the_name(stack):
    raw = b'{"model":"m2","messages":[{"role":"user","content":"x"}],"temperature":0.5}'
    r = httpx.post(stack.url + "/v1/chat/completions", content=raw)
    assert r.status_code == 200
    assert echo(r)["body"].encode() == raw
    assert r.headers["x-fakellm-backend"] == "c"


def test_missing_model_is_a_client_error(stack):
    # an empty model is neither an auto alias nor a known model (reference parity)
    r = stack.post_chat({"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == 'model "" is not available'


def test_auto_name_without_decisions_goes_to_default_model(stack):
    r = stack.post_chat({"model": "auto", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200
    assert json.loads(echo(r)["body"])["model"] == "m1-upstream"
    assert r.headers["x-vsr-selected-model"] == "m1"


def test_upstream_headers_host_hop_by_hop_request_id(stack):
    headers = {"x-custom": "kept", "connection": "keep-alive, x-drop-me", "x-drop-me": "1",
               "keep-alive": "timeout=5", "te": "trailers", "proxy-connection": "x"}
    r = stack.post_chat(CHAT, headers=headers)
    h = echo(r)["headers"]
    backend = stack.backends[0] if r.headers["x-fakellm-backend"] == "a" else stack.backends[1]
    assert h["host"] == backend.endpoint
    assert h["x-custom"] == "kept"
    for gone in ("connection", "x-drop-me", "keep-alive", "te", "proxy-connection", "transfer-encoding"):
        assert gone not in h, gone
    assert len(h["x-request-id"]) == 36
    r2 = stack.post_chat(CHAT, headers={"x-request-id": "client-id-1"})
    assert echo(r2)["headers"]["x-request-id"] == "client-id-1"


def test_weighted_round_robin_spreads_over_both_backends(stack):
    # one keep-alive connection stays on one worker, whose round robin alternates
    with stack.client() as c:
        seen = [c.post("/v1/chat/completions", json=CHAT).headers["x-fakellm-backend"] for _ in range(20)]
    assert seen.count("a") == 10 and seen.count("b") == 10
    assert all(seen[i] != seen[i + 1] for i in range(19))


def test_completions_and_responses_are_proxied(stack):
    with stack.client() as c:
        r = c.post("/v1/completions", json={"model": "m1", "prompt": "x"})
        assert r.status_code == 200 and echo(r)["path"] == "/v1/completions"
        # the Responses API is served by vsr (translated to chat, kept for GET): the backend gets chat
        r = c.post("/v1/responses", json={"model": "m2", "input": "x"})
        assert r.status_code == 200 and r.json()["object"] == "response"
        last = httpx.get(stack.backends[2].url + "/_fakellm/log").json()["entries"][-1]
        assert last["path"] == "/v1/chat/completions" and last["model"] == "m2"


def test_models_list(stack):
    r = httpx.get(stack.url + "/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["vllm-sr/auto", "auto", "MoM", "m1", "m2"]
    assert all(m["object"] == "model" for m in body["data"])
    assert [m["owned_by"] for m in body["data"]][3:] == ["upstream-endpoint"] * 2


def test_non_v1_path_goes_to_default_backend_unchanged(stack):
    r = httpx.get(stack.url + "/some/other/path?q=1")
    assert r.status_code == 200
    assert echo(r)["path"] == "/some/other/path?q=1"
    assert r.headers["x-fakellm-backend"] in ("a", "b")


def test_base_url_prefix_replaces_v1(vsr, fakellm):
    be = fakellm("p")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("pm", [{"base_url": f"http://{be.endpoint}/openai/v1"}])])
    v = vsr(cfg, port=port)
    r = v.post_chat({"model": "pm", "messages": []})
    assert r.status_code == 200
    assert echo(r)["path"] == "/openai/v1/chat/completions"


def test_health_and_ready(stack):
    assert httpx.get(stack.url + "/health").status_code == 200
    r = httpx.get(stack.url + "/ready")
    assert r.status_code == 200 and r.json()["status"] == "ready"


def test_upstream_error_status_and_body_pass_through(stack):
    r = stack.post_chat(CHAT, headers={"x-fakellm-status": "429", "x-fakellm-retry-after": "7"})
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7"
    assert r.json()["error"]["code"] == 429


def test_large_body_relayed_byte_exact(stack):
    filler = "".join(chr(0x61 + (i % 26)) for i in range(5 * 1024 * 1024))
    raw = json.dumps({"model": "m2", "messages": [{"role": "user", "content": filler}]}).encode()
    r = httpx.post(stack.url + "/v1/chat/completions", content=raw, timeout=60)
    assert r.status_code == 200
    assert echo(r)["body"].encode() == raw


def test_chunked_request_body_is_relayed(stack):
    def gen():
        yield b'{"model":"m2",'
        yield b'"messages":[]}'
    r = httpx.post(stack.url + "/v1/chat/completions", content=gen())
    assert r.status_code == 200
    assert echo(r)["body"] == '{"model":"m2","messages":[]}'
    assert echo(r)["headers"]["content-length"] == str(len('{"model":"m2","messages":[]}'))
    assert "transfer-encoding" not in echo(r)["headers"]


def test_auto_without_a_default_model_is_400_as_the_reference(vsr, fakellm):
    """Without providers.defaults.model an auto request that matches no
    decision has no model: 400 (ref §1.11).  Paths outside /v1 still take
    Envoy's default route, the first model, which /v1/models marks."""
    a, b = fakellm("a"), fakellm("b")
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("first", [a.endpoint]), model_yaml("second", [b.endpoint])]), port=port)
    r = v.post_chat({"model": "auto", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == \
        "unable to route request: no model selected and no default model configured"
    assert v.post_chat({"model": "second", "messages": []}).headers["x-fakellm-backend"] == "b"   # passthrough
    r = httpx.get(v.url + "/other/path")
    assert r.status_code == 200 and r.headers["x-fakellm-backend"] == "a"
    models = {m["id"]: m["routing"] for m in httpx.get(v.url + "/v1/models").json()["data"]}
    assert models["auto"]["default_route"] is True and models["auto"]["recipe"] == "default"
    assert models["first"]["default_route"] is True and not models["second"].get("default_route")
