"""Errors vsr generates: OpenAI-style JSON with the right status."""
import httpx

from conftest import config_yaml, free_port, model_yaml, raw_request


def err(r):
    return r.json()["error"]


def test_unknown_model(stack):
    r = stack.post_chat({"model": "gpt-x\"y", "messages": []})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": 'model "gpt-x"y" is not available',
                                  "type": "invalid_request_error", "code": "model_not_found"}}
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-vsr-response-path"] == "error"


def test_unknown_model_on_every_api_path(stack):
    """The same 400 and code on each OpenAI path; Anthropic's shape, with its
    own type and no code, on /v1/messages."""
    want = {"error": {"message": 'model "nope" is not available', "type": "invalid_request_error",
                      "code": "model_not_found"}}
    user = [{"role": "user", "content": "hi"}]
    for path, body in (("/v1/chat/completions", {"model": "nope", "messages": user}),
                       ("/v1/completions", {"model": "nope", "prompt": "hi"}),
                       ("/v1/responses", {"model": "nope", "input": "hi"}),
                       ("/v1/embeddings", {"model": "nope", "input": "hi"}),
                       ("/v1/chat/completions", {"model": "nope", "messages": user, "stream": True})):
        r = httpx.post(stack.url + path, json=body, timeout=10)
        assert (r.status_code, r.json()) == (400, want), (path, r.text)
    r = httpx.post(stack.url + "/v1/chat/completions", json={"messages": user}, timeout=10)
    assert r.status_code == 400 and err(r)["code"] == "model_not_found"  # missing: no model either
    r = httpx.post(stack.url + "/v1/messages", json={"model": "nope", "max_tokens": 8, "messages": user},
                   timeout=10)
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": 'model "nope" is not available'}}


def test_malformed_json(stack):
    for bad in (b'{"model": "m1",', b"not json", b"[1,2]", b"", b'{"model":"m1"} x'):
        r = httpx.post(stack.url + "/v1/chat/completions", content=bad)
        assert r.status_code == 400, bad
        assert err(r)["message"] == "malformed JSON body"
        assert err(r)["type"] == "invalid_request_error"


def test_messages_validation(stack):
    r = stack.post_chat({"model": "m1"})
    assert r.status_code == 400 and err(r)["message"] == "messages field is required"
    r = stack.post_chat({"model": "m1", "messages": "hi"})
    assert r.status_code == 400 and err(r)["message"] == "messages field must be an array"


def test_unknown_v1_path_and_wrong_method(stack):
    r = httpx.post(stack.url + "/v1/nope", json={})
    assert r.status_code == 404 and err(r)["message"] == "endpoint not found"
    r = httpx.get(stack.url + "/v1/chat/completions")
    assert r.status_code == 405 and err(r)["message"] == "method not allowed"
    assert r.headers["allow"] == "POST"
    r = httpx.post(stack.url + "/v1/models")
    assert r.status_code == 405


def test_trailing_slash_and_query_ignored_in_matching(stack):
    r = httpx.post(stack.url + "/v1/chat/completions/?x=1", json={"model": "m2", "messages": []})
    assert r.status_code == 200


def test_body_too_large(vsr, fakellm):
    be = fakellm()
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m", [be.endpoint])],
                      listener_extra="    max_request_body_bytes: 1000")
    v = vsr(cfg, port=port)
    r = httpx.post(v.url + "/v1/chat/completions", content=b"x" * 1001)
    assert r.status_code == 413
    assert r.json() == {"error": {"message": "The request body is too large.",
                                  "type": "invalid_request_error", "code": "request_too_large"}}
    # declared length over the limit: answered from the head alone, connection closed
    data, closed = raw_request(port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                                     b"content-length: 5000000000\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 413 ") and closed
    # chunked over the limit
    def gen():
        for _ in range(20):
            yield b"y" * 100
    r = httpx.post(v.url + "/v1/chat/completions", content=gen())
    assert r.status_code == 413
    assert be.stats()["requests"] == 0
    r = httpx.post(v.url + "/v1/chat/completions", content=b'{"model":"m","messages":[]}')
    assert r.status_code == 200
    # an Anthropic path: Anthropic's error shape, before routing has looked at the request
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = httpx.post(v.url + path, content=b"x" * 1001)
        assert r.status_code == 413
        assert r.json() == {"type": "error", "error": {"type": "request_too_large",
                                                        "message": "The request body is too large."}}


def test_upstream_down_is_503_json(vsr):
    dead = free_port()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [f"127.0.0.1:{dead}"])]), port=port)
    r = v.post_chat({"model": "m", "messages": []})
    assert r.status_code == 503
    e = err(r)
    assert e["message"].startswith("upstream connect error or disconnect/reset before headers.")
    assert "connection failure" in e["message"]
    assert e["code"] is None


def test_reset_before_headers_is_503(stack):
    r = stack.post_chat({"model": "m2", "messages": []}, headers={"x-fakellm-reset": "before-headers"})
    assert r.status_code == 503
    assert "reset before headers" in err(r)["message"]


def test_first_byte_timeout_is_504(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra="    timeout: 1s"), port=port)
    r = v.post_chat({"model": "m", "messages": []}, headers={"x-fakellm-hang": "1"})
    assert r.status_code == 504
    assert err(r)["message"] == "upstream request timeout"


def test_error_code_is_a_string_or_null_everywhere(stack):
    """OpenAI's convention: `code` is a string or null, never a number, on
    every error vsr builds (routing, gateway, codec, management preview)."""
    import json as _json
    bodies = [
        stack.post_chat({"model": "nope", "messages": []}),
        httpx.post(stack.url + "/v1/chat/completions", content=b"not json"),
        httpx.get(stack.url + "/v1/nope"),
        httpx.get(stack.url + "/v1/chat/completions"),                      # 405
    ]
    for r in bodies:
        assert r.status_code >= 400, r.text
        code = err(r)["code"]
        assert code is None or isinstance(code, str), (r.status_code, r.text)
    data, _ = raw_request(stack.port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                                      b"transfer-encoding: gzip\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 501 ") and b"\r\nx-vsr-config-version: 1\r\n" in data
    assert _json.loads(data.partition(b"\r\n\r\n")[2])["error"]["code"] is None
    data, _ = raw_request(stack.port, b"GET / HTTP/1.1\r\nhost: x\r\n" + b"x-big: " + b"a" * 70000 + b"\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 431 ")
    assert b"\r\nx-vsr-config-version: 1\r\n" in data
    assert _json.loads(data.partition(b"\r\n\r\n")[2])["error"]["code"] is None


def test_scrapes_are_not_requests(stack):
    """Scraping /metrics does not count itself in vsr_requests_total or the
    active gauges."""
    def scrape():
        return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1])
                for l in httpx.get(stack.metrics_url).text.splitlines() if l and not l.startswith("#")}
    def total(m):
        return sum(v for k, v in m.items() if k.startswith("vsr_requests_total{"))
    before = total(scrape())
    stack.post_chat({"model": "m1", "messages": []})
    for _ in range(5):
        m = scrape()
    assert total(m) == before + 1
    assert m["vsr_active_requests"] == 0 and m["vsr_active_connections"] == 0
