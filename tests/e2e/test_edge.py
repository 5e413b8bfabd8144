"""The edge: API keys and trusted identity headers."""
import httpx

from conftest import config_yaml, echo, free_port, model_yaml

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_api_keys(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra='    api_keys: ["k-one", "k-two"]'),
            port=port)
    url = v.url + "/v1/chat/completions"
    for headers in ({}, {"authorization": "Bearer nope"}, {"api-key": "k-one2"}, {"authorization": "k-one"},
                    {"authorization": "Basic k-one"}, {"authorization": "Bearer"}):
        r = httpx.post(url, json=BODY, headers=headers)
        assert r.status_code == 401, headers
        assert r.json() == {"error": {"message": "Unauthorized: missing or invalid API key",
                                      "type": "authentication_error", "code": "invalid_api_key"}}
        assert r.headers["www-authenticate"] == 'Bearer realm="vllm-semantic-router"'
    for headers in ({"authorization": "Bearer k-two"}, {"authorization": "bearer  \tk-one"}, {"api-key": "k-one"}):
        r = httpx.post(url, json=BODY, headers=headers)
        assert r.status_code == 200, headers
        h = echo(r)["headers"]
        assert "authorization" not in h and "api-key" not in h   # the client's key goes no further
    assert httpx.get(v.url + "/health").status_code == 200    # probes need no key
    assert be.stats()["requests"] == 3


def identity_stack(vsr, fakellm, peers):
    be = fakellm()
    port = free_port()
    extra = "    identity:\n      trust_headers: true\n" + (f"      trusted_peers: {peers}\n" if peers else "")
    return vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra=extra), port=port)


def test_identity_trusted_only_from_trusted_peers(vsr, fakellm):
    ident = {"x-authz-user-id": "alice", "x-authz-user-groups": "admins"}
    v = identity_stack(vsr, fakellm, '["10.0.0.0/8"]')       # the client (127.0.0.1) is not in it
    h = echo(httpx.post(v.url + "/v1/chat/completions", json=BODY, headers=ident))["headers"]
    assert "x-authz-user-id" not in h and "x-authz-user-groups" not in h
    v = identity_stack(vsr, fakellm, '["127.0.0.0/8"]')
    h = echo(httpx.post(v.url + "/v1/chat/completions", json=BODY, headers=ident))["headers"]
    assert h["x-authz-user-id"] == "alice" and h["x-authz-user-groups"] == "admins"
    # X-Forwarded-For never makes a peer trusted
    v = identity_stack(vsr, fakellm, '["10.0.0.0/8"]')
    h = echo(httpx.post(v.url + "/v1/chat/completions", json=BODY,
                        headers={**ident, "x-forwarded-for": "10.1.2.3"}))["headers"]
    assert "x-authz-user-id" not in h


def test_connection_limit_refuses_only_the_extra_connections(vsr, fakellm):
    import socket
    import time
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra="    max_connections: 2"),
            port=port, workers=1)
    time.sleep(0.3)  # the fixture's readiness probe connection must be closed and uncounted first
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    time.sleep(0.2)
    extra = socket.create_connection(("127.0.0.1", port))
    extra.settimeout(5)
    try:
        extra.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        got = extra.recv(100)
    except (ConnectionResetError, BrokenPipeError):
        got = b""
    assert got == b""                      # refused: closed (reset) without an answer
    extra.close()
    for s in held:                         # the others are unharmed
        s.settimeout(5)
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")
    held[0].close()
    time.sleep(0.2)
    fresh = socket.create_connection(("127.0.0.1", port))   # a slot is free again
    fresh.settimeout(5)
    fresh.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    assert fresh.recv(100).startswith(b"HTTP/1.1 200")
    fresh.close()
    held[1].close()
