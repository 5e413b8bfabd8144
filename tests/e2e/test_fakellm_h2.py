"""fakellm's HTTP/2 side, driven by curl (an independent HTTP/2 client):
h2c with prior knowledge on the plain port, h2 by ALPN on the TLS port, the
same answers, knobs, call log and SSE streams as over HTTP/1.1, and the two
HTTP/2 faults (refuse-stream, goaway)."""
import json
import subprocess
import threading
import uuid

import httpx

from conftest import sse_events
from test_upstream_tls import make_certs

CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
STREAM = json.dumps({"model": "m", "stream": True, "messages": []})


def curl(url, *args, body=CHAT, headers=(), tls_ca=None, h2=True):
    cmd = ["curl", "-sS", "-D", "-", "--max-time", "20"]
    cmd += ["--http2-prior-knowledge"] if h2 and not tls_ca else (["--http2"] if h2 else ["--http1.1"])
    if tls_ca:
        cmd += ["--cacert", str(tls_ca)]
    for h in headers:
        cmd += ["-H", h]
    if body is not None:
        cmd += ["-H", "content-type: application/json", "--data-binary", body]
    cmd += [*args, url]
    p = subprocess.run(cmd, capture_output=True, timeout=30)
    out = p.stdout.decode(errors="replace")
    head, _, rest = out.partition("\r\n\r\n")
    return p.returncode, head, rest, p.stderr.decode(errors="replace")


def log(be, key=None, verify=True):
    base = be.url if verify is True else f"https://127.0.0.1:{be.port}"
    r = httpx.get(base + "/_fakellm/log", params={"key": key} if key else None, timeout=10, verify=verify)
    return r.json()["entries"]


def test_h2c_prior_knowledge_chat(fakellm):
    be = fakellm("h2")
    rc, head, body, err = curl(be.url + "/v1/chat/completions", headers=["x-request-id: r-1"])
    assert rc == 0, err
    assert head.startswith("HTTP/2 200")
    assert "x-fakellm-backend: h2" in head
    assert "connection:" not in head.lower() and "transfer-encoding" not in head.lower()
    j = json.loads(body)
    assert j["choices"][0]["message"]["content"] == "Hello from h2"
    req = j["fakellm"]["request"]
    assert req["version"] == "HTTP/2" and req["method"] == "POST" and req["path"] == "/v1/chat/completions"
    assert req["headers"]["host"] == f"127.0.0.1:{be.port}"
    assert json.loads(req["body"]) == json.loads(CHAT)
    (e,) = [e for e in log(be) if e["path"] == "/v1/chat/completions"]
    assert e["protocol"] == "h2" and e["request_id"] == "r-1" and e["model"] == "m"
    # HTTP/1.1 still served on the same port, and logged as such
    assert httpx.post(be.url + "/v1/chat/completions", content=CHAT).status_code == 200
    assert [e["protocol"] for e in log(be) if e["path"] == "/v1/chat/completions"] == ["h2", "http/1.1"]


def test_h2c_streams_and_knobs(fakellm):
    be = fakellm("h2s")
    rc, head, body, err = curl(be.url + "/v1/chat/completions", body=STREAM,
                               headers=["x-fakellm-chunks: 4", "x-fakellm-chunk-delay-ms: 20"])
    assert rc == 0, err
    assert head.startswith("HTTP/2 200") and "text/event-stream" in head
    ev = sse_events(body)
    assert ev[-1] == "[DONE]" and sum(1 for e in ev if '"content":"tok' in e) == 4
    # an injected status with retry-after, and a GET control path
    rc, head, body, err = curl(be.url + "/v1/chat/completions", headers=["x-fakellm-status: 503",
                                                                         "x-fakellm-retry-after: 7"])
    assert head.startswith("HTTP/2 503") and "retry-after: 7" in head
    assert json.loads(body)["error"]["code"] == 503
    rc, head, body, err = curl(be.url + "/stats", body=None)
    assert head.startswith("HTTP/2 200") and json.loads(body)["requests"] == 2
    # a bad knob value: 400, logged
    rc, head, body, err = curl(be.url + "/v1/chat/completions", headers=["x-fakellm-chunks: lots"])
    assert head.startswith("HTTP/2 400")


def test_h2c_faults(fakellm):
    be = fakellm("h2f")
    # drop mid-stream: curl sees the stream reset, never [DONE]
    rc, head, body, err = curl(be.url + "/v1/chat/completions", body=STREAM,
                               headers=["x-fakellm-chunks: 10", "x-fakellm-drop-after: 3",
                                        "x-fakellm-chunk-delay-ms: 50"])
    assert rc != 0 and "INTERNAL_ERROR" in err
    assert "[DONE]" not in body and '"content":"tok1' in body
    # reset before headers
    rc, head, body, err = curl(be.url + "/v1/chat/completions", headers=["x-fakellm-reset: before-headers"])
    assert rc != 0 and not head.startswith("HTTP/2 200")
    outs = [e["outcome"] for e in log(be) if e["path"] == "/v1/chat/completions"]
    assert outs == ["drop", "reset"]


def test_h2_refuse_stream_once(fakellm):
    """refuse-stream with a fault budget of 1: curl retries a refused stream
    on its own, and the second attempt is answered."""
    be = fakellm("h2r")
    key = str(uuid.uuid4())
    rc, head, body, err = curl(be.url + "/v1/chat/completions", "-v",
                               headers=[f"x-fakellm-key: {key}", "x-fakellm-fail-count: 1",
                                        "x-fakellm-refuse-stream: 1"])
    assert "REFUSED_STREAM" in err
    assert rc == 0 and head.startswith("HTTP/2 200")
    assert [e["outcome"] for e in log(be, key)] == ["refused", "ok"]
    assert all(e["protocol"] == "h2" for e in log(be, key))


def test_h2_goaway(fakellm):
    be = fakellm("h2g")
    key = str(uuid.uuid4())
    rc, head, body, err = curl(be.url + "/v1/chat/completions", "-v",
                               headers=[f"x-fakellm-key: {key}", "x-fakellm-goaway: 1"])
    assert rc != 0
    assert not head.startswith("HTTP/2 200")
    assert [e["outcome"] for e in log(be, key)] == ["goaway"]
    # HTTP/1.1 ignores the HTTP/2-only knobs
    r = httpx.post(be.url + "/v1/chat/completions", content=CHAT,
                   headers={"x-fakellm-goaway": "1", "x-fakellm-refuse-stream": "1"})
    assert r.status_code == 200


def test_h2_many_streams_one_connection(fakellm):
    """Parallel requests multiplexed on one connection (nghttp, nghttp2's
    client; curl 7.88's --parallel does not multiplex over prior
    knowledge): the log shows one connection id for all of them."""
    be = fakellm("h2m")
    urls = [be.url + f"/v1/models?n={i}" for i in range(20)]
    p = subprocess.run(["nghttp", "-n", "-H", "x-fakellm-delay-ms: 200", *urls], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    es = [e for e in log(be) if e["path"].startswith("/v1/models")]
    assert len(es) == 20
    assert len({e["conn"] for e in es}) == 1


def test_h2_over_tls_by_alpn(fakellm, tmp_path):
    ca, cert, key = make_certs(tmp_path)
    be = fakellm("h2t", args=("--tls-cert", str(cert), "--tls-key", str(key)))
    url = f"https://127.0.0.1:{be.port}/v1/chat/completions"
    rc, head, body, err = curl(url, "-v", tls_ca=ca)
    assert rc == 0, err
    assert "ALPN: server accepted h2" in err or "ALPN, server accepted to use h2" in err
    assert head.startswith("HTTP/2 200")
    assert json.loads(body)["fakellm"]["request"]["version"] == "HTTP/2"
    rc, head, body, err = curl(url, body=STREAM, tls_ca=ca)
    assert sse_events(body)[-1] == "[DONE]"
    # a client that offers http/1.1 only still gets it
    rc, head, body, err = curl(url, tls_ca=ca, h2=False)
    assert head.startswith("HTTP/1.1 200")
    protos = [e["protocol"] for e in log(be, verify=str(ca)) if e["path"] == "/v1/chat/completions"]
    assert protos == ["h2", "h2", "http/1.1"]
