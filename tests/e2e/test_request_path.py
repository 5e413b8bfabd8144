"""The request path is normalised once, before routing, and that path is what the backend gets: no spelling of
an API path escapes routing or the listener's model allow-list."""
import json

import pytest

from conftest import config_yaml, free_port, json_body, model_yaml, raw_request


@pytest.fixture
def guarded(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], default="m",
                        listener_extra='    models: ["m"]'), port=port)
    v.be = be
    return v


def send(v, target, model="m", host="127.0.0.1", method="POST"):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    data = (f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    got, _ = raw_request(v.port, data)
    head, js = json_body(got)
    return int(head.split(" ", 2)[1]), js


ROUTED_SPELLINGS = ["/%76%31/chat/completions", "/v1/%63hat/completions", "//v1/chat/completions",
                    "/v1//chat///completions", "/v1/./chat/completions", "/x/../v1/chat/completions",
                    "/x/%2e%2E/v1/chat/completions", "/v1/chat/completions/.",
                    "http://example.com/v1/chat/completions", "HTTP://example.com//%76%31/chat/completions?x=1"]


@pytest.mark.parametrize("target", ROUTED_SPELLINGS)
def test_every_spelling_of_the_chat_path_is_routed(guarded, target):
    status, js = send(guarded, target, model="not-allowed")
    assert status == 403 and js["error"]["code"] == "model_not_allowed", (target, js)
    status, js = send(guarded, target)
    assert status == 200, (target, js)
    req = js["fakellm"]["request"]
    assert req["path"].split("?")[0].rstrip("/") == "/v1/chat/completions", target
    assert req["headers"]["host"] != "example.com"      # the backend's authority, whatever the client named


@pytest.mark.parametrize("target", ["/V1/chat/completions", "/v1;x/chat/completions", "/V1", "/%56%31/models"])
def test_case_and_parameter_variants_of_v1_are_not_passed_through(guarded, target):
    status, js = send(guarded, target, model="not-allowed")
    assert status == 404 and js["error"]["message"] == "endpoint not found", (target, js)
    assert guarded.be.stats()["requests"] == 0


@pytest.mark.parametrize("target", ["/v1%2fchat/completions", "/v1%2Fchat%2Fcompletions", "/v1/chat%00/completions",
                                    "/v1%5cchat/completions", "/../v1/chat/completions",
                                    "/a/../../v1/chat/completions", "/%2e%2e/v1/chat/completions", "/v1/chat%zz",
                                    "http://user@example.com/v1/chat/completions", "http:///v1/chat/completions"])
def test_paths_that_cannot_be_normalised_are_refused(guarded, target):
    status, js = send(guarded, target, model="not-allowed")
    assert status == 400, (target, js)
    assert js["error"]["type"] == "invalid_request_error"
    assert js["error"]["message"].startswith("invalid request path: ")
    assert guarded.be.stats()["requests"] == 0


def test_passthrough_forwards_the_normalised_path(guarded):
    status, js = send(guarded, "//tokenize/./x/../%7Eu%2a?q=%2f//..", method="PUT")
    assert status == 200, js
    req = js["fakellm"]["request"]
    assert req["method"] == "PUT"
    assert req["path"] == "/tokenize/~u%2A?q=%2f//.."     # the query is kept as sent


def test_absolute_form_authority_replaces_host_for_routing(guarded):
    # Host says one thing, the absolute-form target another: the target's authority wins (RFC 9112 §3.2.2)
    status, js = send(guarded, "http://api.example:8080/v1/models", method="GET", host="other.example")
    assert status == 200 and js["object"] == "list"


def h2_body(v, path, model):
    from h2raw import DATA, END_STREAM, RST_STREAM, H2Conn
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    c = H2Conn(v.port)
    try:
        c.request(1, "POST", path, headers=[("content-type", "application/json")], body=body)
        data = b""
        while True:
            f = c.read_until(lambda f: f[2] == 1 and f[0] in (DATA, RST_STREAM))
            assert f is not None and f[0] == DATA, f
            data += f[3]
            if f[1] & END_STREAM:
                return json.loads(data)
    finally:
        c.close()


def test_http2_paths_are_normalised_too(guarded):
    for path in ("/%76%31/chat/completions", "//v1/chat/completions", "/x/../v1/chat/completions"):
        assert h2_body(guarded, path, "not-allowed")["error"]["code"] == "model_not_allowed", path
        assert h2_body(guarded, path, "m")["fakellm"]["request"]["path"] == "/v1/chat/completions", path
    assert h2_body(guarded, "/V1/chat/completions", "not-allowed")["error"]["message"] == "endpoint not found"
    assert h2_body(guarded, "/v1%2Fchat/completions", "m")["error"]["message"].startswith("invalid request path")
    assert guarded.be.stats()["requests"] == 3
