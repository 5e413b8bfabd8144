"""The parity corpus (after the reference router's §6.1 cases that need no
protocol translation or request graph): same decision, same upstream
request, same client response and headers."""
import json
import pathlib
import string

import httpx
import pytest

from conftest import echo, free_port, sse_events

TEMPLATE = pathlib.Path(__file__).parent / "corpus" / "config.yaml.tmpl"


@pytest.fixture
def corpus(vsr, fakellm):
    small, large, essay = fakellm("small"), fakellm("large"), fakellm("essay")
    port, mgmt = free_port(), free_port()
    cfg = string.Template(TEMPLATE.read_text()).substitute(
        PORT=port, MGMT=mgmt, SMALL=small.endpoint, LARGE=large.endpoint, ESSAY=essay.endpoint)
    v = vsr(cfg, port=port)
    v.small, v.large, v.essay, v.mgmt = small, large, essay, mgmt
    return v


def chat(v, content, model="auto", headers=None, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return v.post_chat(body, headers=headers)


def upstream_body(r):
    return json.loads(echo(r)["body"])


def test_auto_code_route(corpus):
    r = chat(corpus, "Write a python function that reverses a list.")
    assert r.status_code == 200
    assert r.headers["x-fakellm-backend"] == "large"
    assert r.headers["x-vsr-selected-decision"] == "code_route"
    assert r.headers["x-vsr-selected-model"] == "general-large"
    assert r.headers["x-vsr-selected-recipe"] == "default"
    assert r.headers["x-vsr-selected-confidence"] == "1.0000"
    assert r.headers["x-vsr-selected-algorithm"] == "static"
    assert r.headers["x-vsr-response-path"] == "upstream"
    assert r.headers["x-vsr-schema-version"] == "2"
    req = echo(r)
    assert req["path"] == "/v1/chat/completions"
    h = req["headers"]
    assert h["x-route-source"] == "parity-corpus"
    assert h["authorization"] == "Bearer sk-parity-provider"
    assert h["x-tenant"] == "parity-corpus"
    assert h["x-selected-model"] == "general-large"
    assert h["accept-encoding"] == "identity"
    body = upstream_body(r)
    assert body["model"] == "general-large-instruct"
    assert body["messages"][0] == {"role": "system", "content": "You are a careful senior engineer."}
    assert body["messages"][1]["content"] == "Write a python function that reverses a list."


def test_auto_urgent_route_keeps_system_prompt(corpus):
    body = {"model": "auto", "temperature": 0.2,
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "This is urgent, answer asap."}]}
    r = corpus.post_chat(body)
    assert r.status_code == 200
    assert r.headers["x-fakellm-backend"] == "small"
    assert r.headers["x-vsr-selected-decision"] == "urgent_route"
    sent = upstream_body(r)
    assert sent["messages"] == body["messages"]
    assert sent["temperature"] == 0.2
    assert sent["model"] == "general-small-instruct"
    assert "x-route-source" not in echo(r)["headers"]


def test_auto_no_match_uses_default_model(corpus):
    r = chat(corpus, "Hello there.")
    assert r.status_code == 200
    assert r.headers["x-fakellm-backend"] == "small"
    assert r.headers["x-vsr-selected-model"] == "general-small"
    assert "x-vsr-selected-decision" not in r.headers
    assert r.headers["x-vsr-selected-recipe"] == "default"


def test_auto_alias_names(corpus):
    for name in ("vllm-sr/auto", "auto", "MoM"):
        r = chat(corpus, "compile this golang", model=name)
        assert r.status_code == 200, name
        assert r.headers["x-vsr-selected-decision"] == "code_route"


def test_explicit_remote_model_is_passthrough(corpus):
    r = chat(corpus, "Write a python function.", model="general-large",
             headers={"authorization": "Bearer sk-client-secret", "api-key": "client-key"})
    assert r.status_code == 200
    assert r.headers["x-fakellm-backend"] == "large"
    h = echo(r)["headers"]
    assert h["authorization"] == "Bearer sk-parity-provider"   # the client's key never reaches the provider
    assert "api-key" not in h
    assert "x-route-source" not in h                            # no decision, no plugins
    assert upstream_body(r)["messages"] == [{"role": "user", "content": "Write a python function."}]
    assert "x-vsr-selected-recipe" not in r.headers
    assert "x-vsr-selected-decision" not in r.headers
    assert r.headers["x-vsr-selected-model"] == "general-large"


@pytest.mark.parametrize("model", ["no-such-model", "vllm-sr/flow"])
def test_unknown_and_unpublished_models(corpus, model):
    # the reference sends the status as a number; vsr keeps OpenAI's convention (a string naming the error)
    r = chat(corpus, "hi", model=model)
    assert r.status_code == 400
    assert r.json() == {"error": {"message": f'model "{model}" is not available',
                                  "type": "invalid_request_error", "code": "model_not_found"}}
    assert r.headers["x-vsr-response-path"] == "error"


def test_entrypoint_support_recipe(corpus):
    r = chat(corpus, "I need a refund for my last invoice", model="vllm-sr/support")
    assert r.status_code == 200
    assert r.headers["x-vsr-selected-recipe"] == "support"
    assert r.headers["x-vsr-selected-decision"] == "billing_route"
    assert r.headers["x-fakellm-backend"] == "small"
    # the recipe has its own signals: code keywords do nothing there
    r = chat(corpus, "python python", model="vllm-sr/support")
    assert "x-vsr-selected-decision" not in r.headers
    assert r.headers["x-fakellm-backend"] == "small"


def test_streaming_code_route(corpus):
    with corpus.client() as c:
        with c.stream("POST", "/v1/chat/completions", headers={"x-fakellm-chunks": "3"},
                      json={"model": "auto", "stream": True,
                            "messages": [{"role": "user", "content": "Explain golang generics"}]}) as r:
            assert r.status_code == 200
            assert r.headers["x-vsr-selected-decision"] == "code_route"
            text = r.read().decode()
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    first = json.loads(events[0])
    assert first["fakellm"]["backend"] == "large"
    assert json.loads(first["fakellm"]["request"]["body"])["messages"][0]["role"] == "system"


def test_models_list(corpus):
    r = httpx.get(corpus.url + "/v1/models")
    assert r.status_code == 200
    data = r.json()["data"]
    ids = [m["id"] for m in data]
    assert ids == ["vllm-sr/auto", "auto", "MoM", "vllm-sr/support", "general-small", "general-large", "general-essay"]
    auto = data[0]
    assert auto["owned_by"] == "vllm-semantic-router"
    assert auto["routing"]["resolution"] == "virtual"
    support = data[3]
    assert support["description"] == "customer support"
    assert support["routing"]["recipe"] == "support"
    small = data[4]
    assert small["owned_by"] == "upstream-endpoint"
    assert small["routing"] == {"resolution": "passthrough", "default_route": True}
    assert data[5]["routing"] == {"resolution": "passthrough"}


def test_invalid_json_and_missing_model(corpus):
    r = httpx.post(corpus.url + "/v1/chat/completions", content=b'{"model": "auto", "messages": [')
    assert r.status_code == 400 and r.json()["error"]["message"] == "malformed JSON body"
    r = corpus.post_chat({"messages": [{"role": "user", "content": "hi"}]})
    assert 400 <= r.status_code < 500
    assert r.json()["error"]["type"] == "invalid_request_error"
    for be in (corpus.small, corpus.large, corpus.essay):
        assert be.stats()["requests"] == 0


def test_upstream_503_and_429_relayed_without_decision_headers(corpus):
    r = chat(corpus, "compile my python", headers={"x-fakellm-status": "503",
                                                   "x-fakellm-body": '{"error":{"message":"backend overloaded","type":"server_error"}}'})
    assert r.status_code == 503
    assert r.json() == {"error": {"message": "backend overloaded", "type": "server_error"}}
    assert "x-vsr-selected-decision" not in r.headers
    r = chat(corpus, "hello", model="general-small", headers={"x-fakellm-status": "429", "x-fakellm-retry-after": "2"})
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2"


def test_skip_processing_header_ignored_when_disabled(corpus):
    r = chat(corpus, "This is urgent!", headers={"x-vsr-skip-processing": "true"})
    assert r.headers["x-vsr-selected-decision"] == "urgent_route"


def test_client_selected_model_overwritten(corpus):
    r = chat(corpus, "This is urgent!", headers={"x-selected-model": "general-large"})
    assert r.headers["x-fakellm-backend"] == "small"
    assert echo(r)["headers"]["x-selected-model"] == "general-small"


def test_client_envoy_control_headers_dropped(corpus):
    headers = {"x-envoy-internal": "true", "x-envoy-max-retries": "5", "x-envoy-retry-on": "5xx",
               "x-envoy-upstream-rq-timeout-ms": "1", "x-envoy-force-trace": "1",
               "x-envoy-original-path": "/original"}
    r = chat(corpus, "hello", headers=headers)
    h = echo(r)["headers"]
    for gone in ("x-envoy-internal", "x-envoy-max-retries", "x-envoy-retry-on",
                 "x-envoy-upstream-rq-timeout-ms", "x-envoy-force-trace"):
        assert gone not in h, gone
    assert h["x-envoy-original-path"] == "/original"


def test_identity_headers_stripped_when_untrusted(corpus):
    r = chat(corpus, "hello", headers={"x-authz-user-id": "mallory", "x-authz-user-groups": "admins",
                                       "x-vsr-looper-request": "1"})
    h = echo(r)["headers"]
    assert "x-authz-user-id" not in h and "x-authz-user-groups" not in h
    assert "x-vsr-looper-request" not in h


def test_responses_api_not_enabled(corpus):
    r = httpx.post(corpus.url + "/v1/responses", json={"model": "auto", "input": "hi"})
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "endpoint not found"


def test_fast_response_plugin(corpus):
    r = chat(corpus, "urgent: write me a poem")
    assert r.status_code == 200
    assert r.headers["x-vsr-fast-response"] == "true"
    assert r.headers["x-vsr-response-path"] == "fast_response"
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "Please send one request at a time."
    for be in (corpus.small, corpus.large, corpus.essay):
        assert be.stats()["requests"] == 0


def test_fast_response_streams_when_asked(corpus):
    r = chat(corpus, "urgent: write me a poem", stream=True)
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert "Please send one request at a time." in "".join(events)


def test_debug_headers(corpus):
    r = chat(corpus, "urgent python help", headers={"x-vsr-debug": "true"})
    assert r.headers["x-vsr-matched-keywords"] == "code_keywords,urgent_keywords"
    assert int(r.headers["x-vsr-context-token-count"]) >= 1
    r = chat(corpus, "urgent python help")
    assert "x-vsr-matched-keywords" not in r.headers


def test_routing_preview(corpus):
    url = f"http://127.0.0.1:{corpus.mgmt}/api/v1/routing/preview"
    r = httpx.post(url, json={"model": "auto", "text": "write a python script"})
    assert r.status_code == 200
    p = r.json()
    assert p["recipe"] == "default"
    assert p["decision_result"]["decision_name"] == "code_route"
    assert p["decision_result"]["plugins"] == ["system_prompt", "header_mutation"]
    assert p["selected_model"] == "general-large"
    assert p["signal_confidences"]["keywords:code_keywords"] == 1.0
    assert p["signal_confidences"]["keywords:urgent_keywords"] == 0.0
    assert "eval_trace" not in p
    r = httpx.post(url + "?trace=true", json={"model": "auto", "text": "hello"})
    p = r.json()
    assert p["decision_result"] is None and p["selected_model"] == "general-small"
    code = [t for t in p["eval_trace"] if t["decision"] == "code_route"][0]
    assert code["matched"] is False
    assert code["rules"]["operator"] == "AND"
    r = httpx.post(url, json={"model": "nope", "text": "x"})
    assert r.status_code == 400
    # the public listener does not serve the management API: the path goes to the default backend
    r = httpx.post(corpus.url + "/api/v1/routing/preview", json={"text": "x"})
    assert r.headers["x-fakellm-backend"] == "small"
