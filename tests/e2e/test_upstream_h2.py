"""HTTP/2 to backends: vsr -> fakellm with `protocol: h2` (cleartext, prior
knowledge) and over TLS (ALPN h2).  fakellm's call log names the protocol
and the connection of every request, so the tests see what was on the wire:
HTTP/2, and how many connections carried it."""
import json
import socket
import threading
import time
import uuid

import httpx
import pytest

from conftest import config_yaml, free_port, sse_events, wait_until
from test_streaming import rss_kb
from test_upstream_tls import make_certs


def h2_model(name, backends, rel=None):
    lines = [f"    - name: {name}"]
    if rel:
        lines.append("      reliability:")
        lines += [f"        {k}: {v}" for k, v in rel.items()]
    lines.append("      backend_refs:")
    for i, b in enumerate(backends):
        lines.append(f"        - name: b{i}")
        for k, val in b.items():
            lines.append(f"          {k}: {val}")
    return "\n".join(lines)


@pytest.fixture
def h2stack(vsr, fakellm):
    def make(rel=None, workers=2, backend_args=(), listener_extra="    timeout: 20s"):
        be = fakellm("h2-be", args=backend_args)
        port = free_port()
        v = vsr(config_yaml(port, [h2_model("m", [{"endpoint": be.endpoint, "protocol": "h2"}], rel)],
                            listener_extra=listener_extra), port=port, workers=workers)
        v.be = be
        return v
    return make


def ask(v, headers=None, stream=False, timeout=30, client=None):
    key = str(uuid.uuid4())
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body["stream"] = True
    h = {"x-fakellm-key": key, **(headers or {})}
    r = (client or httpx).post(v.url + "/v1/chat/completions", json=body, headers=h, timeout=timeout)
    return r, key


def entries(be, key=None, verify=None):
    q = f"?key={key}" if key else ""
    url = be.url if verify is None else f"https://127.0.0.1:{be.port}"
    return httpx.get(url + "/_fakellm/log" + q, timeout=5, verify=verify if verify else True).json()["entries"]


def outcomes(be, key):
    return [e["outcome"] for e in sorted(entries(be, key), key=lambda e: e["seq"])]


def test_chat_goes_over_http2(h2stack):
    v = h2stack()
    r, key = ask(v)
    assert r.status_code == 200, r.text
    req = r.json()["fakellm"]["request"]
    assert req["version"] == "HTTP/2"
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["host"] == v.be.endpoint          # :authority
    assert "connection" not in req["headers"]
    assert json.loads(req["body"])["model"] == "m"
    (e,) = entries(v.be, key)
    assert e["protocol"] == "h2" and e["outcome"] == "ok"
    assert r.headers["x-fakellm-backend"] == "h2-be"
    assert r.headers["content-length"] == str(len(r.content))


def test_sse_stream_over_http2(h2stack):
    v = h2stack()
    arrivals = []
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", v.url + "/v1/chat/completions",
                      headers={"x-fakellm-chunks": "6", "x-fakellm-chunk-delay-ms": "100"},
                      json={"model": "m", "stream": True, "messages": []}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            text = ""
            for part in r.iter_text():
                text += part
                arrivals.append(time.monotonic())
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    assert sum(1 for e in events if '"content":"tok' in e) == 6
    assert arrivals[-1] - arrivals[0] > 0.3   # relayed as produced, not buffered to the end


def test_concurrent_calls_share_few_connections(h2stack):
    """64 slow calls at once from one worker: multiplexed as streams on one
    connection, not one connection each."""
    v = h2stack(workers=1)
    results = []

    def one():
        r, _ = ask(v, {"x-fakellm-delay-ms": "400"})
        results.append(r.status_code)
    threads = [threading.Thread(target=one) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 64
    es = [e for e in entries(v.be) if e["path"] == "/v1/chat/completions"]
    assert len(es) == 64 and all(e["protocol"] == "h2" for e in es)
    conns = {e["conn"] for e in es}
    assert len(conns) <= 2, conns
    assert v.be.stats()["connections_accepted"] <= 2 + 2   # the log and stats requests of this test add theirs


def test_more_streams_than_the_server_allows_open_another_connection(vsr, fakellm):
    """A server that allows 10 concurrent streams: 40 calls held at once
    spread over more connections, and none fails, with no retry policy
    (streams sent before the server's SETTINGS were known and refused for
    it go again, not counted as attempts; others wait for a free stream)."""
    be = fakellm("h2-few", args=("--h2-max-streams", "10"))
    port = free_port()
    v = vsr(config_yaml(port, [h2_model("m", [{"endpoint": be.endpoint, "protocol": "h2"}])],
                        listener_extra="    timeout: 20s"), port=port, workers=1)
    results = []

    def one():
        r, _ = ask(v, {"x-fakellm-delay-ms": "500"})
        results.append((r.status_code, r.headers.get("x-vsr-upstream-attempts")))
    threads = [threading.Thread(target=one) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [(200, "1")] * 40
    es = [e for e in entries(be) if e["path"] == "/v1/chat/completions"]
    assert all(e["outcome"] in ("delay", "refused") for e in es)
    conns = {e["conn"] for e in es if e["outcome"] == "delay"}
    assert len(conns) >= 2, conns   # a full connection takes no more streams: another one opens


def test_refused_stream_is_retried_under_refused_stream(h2stack):
    v = h2stack({"retry_count": 1, "retry_on": "refused-stream"})
    t0 = time.monotonic()
    r, key = ask(v, {"x-fakellm-refuse-stream": "1", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200, r.text
    assert outcomes(v.be, key) == ["refused", "ok"]
    assert r.headers["x-vsr-upstream-attempts"] == "2"
    assert time.monotonic() - t0 < 5


def test_refused_stream_not_retried_without_the_token(h2stack):
    v = h2stack({"retry_count": 1, "retry_on": "connect-failure"})
    r, key = ask(v, {"x-fakellm-refuse-stream": "1", "x-fakellm-fail-count": "1"})
    assert r.status_code == 503
    assert "upstream connect error or disconnect/reset before headers" in r.json()["error"]["message"]
    assert outcomes(v.be, key) == ["refused"]


def test_goaway_before_our_stream_is_retried_as_reset_before_request(h2stack):
    v = h2stack({"retry_count": 1, "retry_on": "reset-before-request"})
    r, key = ask(v, {"x-fakellm-goaway": "1", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200, r.text
    es = sorted(entries(v.be, key), key=lambda e: e["seq"])
    assert [e["outcome"] for e in es] == ["goaway", "ok"]
    assert es[0]["conn"] != es[1]["conn"]    # the GOAWAY'd connection takes no new stream
    # and the pool keeps working afterwards
    r, _ = ask(v)
    assert r.status_code == 200


def test_503_once_is_retried(h2stack):
    v = h2stack({"retry_count": 2, "retry_on": "5xx"})
    r, key = ask(v, {"x-fakellm-status": "503", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    assert outcomes(v.be, key) == ["status:503", "ok"]
    assert r.headers["x-vsr-upstream-attempts"] == "2"
    # the connection survived the retriable answer: both went over one
    assert len({e["conn"] for e in entries(v.be, key)}) == 1


def test_reset_before_headers_and_per_try_timeout(h2stack):
    v = h2stack({"retry_count": 1, "retry_on": "reset", "per_try_timeout": "300ms"})
    r, key = ask(v, {"x-fakellm-reset": "before-headers", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    assert outcomes(v.be, key) == ["reset", "ok"]
    r, key = ask(v, {"x-fakellm-hang": "1", "x-fakellm-fail-count": "1"})
    assert r.status_code == 200
    assert outcomes(v.be, key) == ["hang", "ok"]


def test_mid_stream_drop_ends_visibly(h2stack):
    """A stream reset after some events must not end cleanly for the client
    (no terminating chunk, no [DONE]) and is not retried."""
    v = h2stack({"retry_count": 2, "retry_on": "5xx,reset"})
    key = str(uuid.uuid4())
    text = ""
    with httpx.Client(timeout=30) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            with c.stream("POST", v.url + "/v1/chat/completions",
                          headers={"x-fakellm-key": key, "x-fakellm-chunks": "10", "x-fakellm-drop-after": "3"},
                          json={"model": "m", "stream": True, "messages": []}) as r:
                assert r.status_code == 200
                for part in r.iter_text():
                    text += part
    assert "[DONE]" not in text
    assert '"content":"tok2' in text
    assert outcomes(v.be, key) == ["drop"]


def test_idle_timeout_cuts_a_stalled_h2_stream(h2stack):
    v = h2stack({"idle_timeout": "400ms"})
    key = str(uuid.uuid4())
    with httpx.Client(timeout=30) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            with c.stream("POST", v.url + "/v1/chat/completions",
                          headers={"x-fakellm-key": key, "x-fakellm-chunks": "4", "x-fakellm-stall-after": "2",
                                   "x-fakellm-stall-ms": "5000"},
                          json={"model": "m", "stream": True, "messages": []}) as r:
                for _ in r.iter_text():
                    pass


def test_idle_timeout_restarts_with_every_h2_data_frame(h2stack):
    # 8 events 600 ms apart under a 1 s idle timeout: the stream lasts about 5 s, four times the timeout, each gap
    # under it, so it is never cut (the clock restarts lazily, as over HTTP/1.1)
    v = h2stack({"idle_timeout": "1s"})
    t0 = time.monotonic()
    with httpx.Client(timeout=30) as c:
        r = c.post(v.url + "/v1/chat/completions",
                   headers={"x-fakellm-chunks": "8", "x-fakellm-chunk-delay-ms": "600"},
                   json={"model": "m", "stream": True, "messages": []})
    assert r.status_code == 200
    assert r.text.rstrip().endswith("data: [DONE]")
    assert r.text.count('"content":"tok') == 8
    assert time.monotonic() - t0 > 4


def test_client_cancel_resets_only_its_stream(h2stack):
    """A client that goes away mid-stream: its stream is reset, the shared
    connection keeps serving the others."""
    v = h2stack(workers=1)
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", v.url + "/v1/chat/completions",
                      headers={"x-fakellm-chunks": "50", "x-fakellm-chunk-delay-ms": "100"},
                      json={"model": "m", "stream": True, "messages": []}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    break
    r, key = ask(v)
    assert r.status_code == 200
    conns = {e["conn"] for e in entries(v.be)}
    assert len(conns) == 1


def test_h2_over_tls_by_alpn(vsr, fakellm, tmp_path):
    ca, cert, key = make_certs(tmp_path)
    be = fakellm("tls-h2", args=("--tls-cert", str(cert), "--tls-key", str(key)))
    port = free_port()
    cfg = config_yaml(port, [
        h2_model("h2tls", [{"base_url": f"https://127.0.0.1:{be.port}/v1", "protocol": "h2"}]),
        h2_model("h1tls", [{"base_url": f"https://127.0.0.1:{be.port}/v1"}]),
    ])
    v = vsr(cfg, port=port, env={"SSL_CERT_FILE": str(ca)})
    r = v.post_chat({"model": "h2tls", "messages": []})
    assert r.status_code == 200, r.text
    assert r.json()["fakellm"]["request"]["version"] == "HTTP/2"
    with v.client() as c:
        with c.stream("POST", "/v1/chat/completions", json={"model": "h2tls", "stream": True, "messages": []}) as s:
            text = "".join(s.iter_text())
    assert sse_events(text)[-1] == "[DONE]"
    # https without the opt-in stays HTTP/1.1
    r = v.post_chat({"model": "h1tls", "messages": []})
    assert r.status_code == 200
    assert r.json()["fakellm"]["request"]["version"] == "HTTP/1.1"
    protos = [e["protocol"] for e in entries(be, verify=str(ca)) if e["path"] == "/v1/chat/completions"]
    assert protos == ["h2", "h2", "http/1.1"]


def test_h2_tls_server_without_h2_falls_back_to_http1(vsr, tmp_path):
    """A TLS server that answers ALPN with http/1.1: the call goes over
    HTTP/1.1 instead (no failure, no retry spent)."""
    import ssl
    ca, cert, key = make_certs(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    ctx.set_alpn_protocols(["http/1.1"])
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    bport = srv.getsockname()[1]
    seen = []

    def serve():
        for _ in range(2):
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            try:
                tls = ctx.wrap_socket(conn, server_side=True)
                seen.append(tls.selected_alpn_protocol())
                data = b""
                while b"\r\n\r\n" not in data:
                    d = tls.recv(65536)
                    if not d:
                        break
                    data += d
                head, _, rest = data.partition(b"\r\n\r\n")
                length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                while length and len(rest) < length[0]:   # all of it: unread bytes would turn the close into a RST
                    d = tls.recv(65536)
                    if not d:
                        break
                    rest += d
                if data:
                    body = b'{"ok":true}'
                    tls.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                                + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
                tls.close()
            except (ssl.SSLError, OSError):
                conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = free_port()
    v = vsr(config_yaml(port, [h2_model("m", [{"base_url": f"https://127.0.0.1:{bport}/v1", "protocol": "h2"}],
                                        {"retry_count": 0})]),
            port=port, workers=1, env={"SSL_CERT_FILE": str(ca)})
    r = v.post_chat({"model": "m", "messages": []})
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True}
    assert r.headers["x-vsr-upstream-attempts"] == "1"
    srv.close()
    t.join(5)
    assert seen and set(seen) == {"http/1.1"}


def test_slow_client_bounds_memory_over_h2(h2stack):
    """64 MB streamed over HTTP/2 to a client that does not read: vsr stops
    acknowledging the stream's DATA (its window closes) instead of buffering."""
    v = h2stack(workers=1)
    pid = v.proc.p.pid
    body = json.dumps({"model": "m", "stream": True, "messages": []}).encode()
    s = socket.create_connection(("127.0.0.1", v.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"x-fakellm-chunks: 1024\r\nx-fakellm-chunk-size: 65536\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.recv(1024)
    base = rss_kb(pid)
    time.sleep(2.0)
    grown = rss_kb(pid) - base
    assert grown < 16 * 1024, f"vsr grew {grown} KiB while its client was not reading"
    # other calls on the same connection are not held up by the paused stream
    r, _ = ask(v, timeout=10)
    assert r.status_code == 200
    s.settimeout(30)
    total, tail = 0, b""
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        total += len(d)
        tail = (tail + d)[-64:]
        if tail.endswith(b"0\r\n\r\n"):
            break
    s.close()
    assert total > 64 * 1024 * 1024
    assert b"[DONE]" in tail or tail.endswith(b"0\r\n\r\n")


def test_health_checks_speak_h2(vsr, fakellm, tmp_path):
    """An h2 endpoint is health-checked over HTTP/2 (cleartext with prior
    knowledge, and by ALPN over TLS), and a failing check takes it out."""
    ca, cert, key = make_certs(tmp_path)
    plain = fakellm("h2-hc")
    tls = fakellm("h2-hc-tls", args=("--tls-cert", str(cert), "--tls-key", str(key)))
    port = free_port()
    rel = {"health_check_path": "/health", "health_check_interval": "100ms", "health_check_timeout": "500ms"}
    cfg = config_yaml(port, [h2_model("m", [{"endpoint": plain.endpoint, "protocol": "h2"},
                                            {"base_url": f"https://127.0.0.1:{tls.port}/v1", "protocol": "h2"}],
                                      rel)])
    v = vsr(cfg, port=port, env={"SSL_CERT_FILE": str(ca)})

    def health_protocols(be, verify=None):
        return [e["protocol"] for e in entries(be, verify=verify) if e["outcome"] == "health"]
    wait_until(lambda: len(health_protocols(plain)) >= 3 and len(health_protocols(tls, str(ca))) >= 3,
               what="three health checks each")
    assert set(health_protocols(plain)) == {"h2"}
    assert set(health_protocols(tls, str(ca))) == {"h2"}
    # the plain one fails its checks: after three it gets no more calls
    httpx.post(plain.url + "/_fakellm/health-status", content="503", timeout=5).raise_for_status()
    time.sleep(0.8)
    with v.client() as c:
        seen = {c.post("/v1/chat/completions", json={"model": "m", "messages": []}).headers["x-fakellm-backend"]
                for _ in range(6)}
    assert seen == {"h2-hc-tls"}


def test_connection_loss_aborts_the_streams_in_flight(h2stack):
    """The backend's connection goes away (a GOAWAY from another stream, then
    the close) while a response streams on it: that response ends visibly
    (no [DONE]), as a lost HTTP/1.1 connection would end it; the call that
    caused it is retried on a new connection."""
    v = h2stack({"retry_count": 1, "retry_on": "reset-before-request"}, workers=1)
    text, sent = "", False
    with httpx.Client(timeout=30) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            with c.stream("POST", v.url + "/v1/chat/completions",
                          headers={"x-fakellm-chunks": "50", "x-fakellm-chunk-delay-ms": "100"},
                          json={"model": "m", "stream": True, "messages": []}) as r:
                assert r.status_code == 200
                for part in r.iter_text():
                    text += part
                    if '"content":"tok1' in text and not sent:
                        sent = True
                        r2, k2 = ask(v, {"x-fakellm-goaway": "1", "x-fakellm-fail-count": "1"})
                        assert r2.status_code == 200
                        assert outcomes(v.be, k2) == ["goaway", "ok"]
    assert sent and "[DONE]" not in text


def test_invalid_response_head_is_a_protocol_error(vsr):
    """A HEADERS frame without :status: the attempt ends as a protocol error,
    as an invalid HTTP/1.1 head does (retried under reset, then the local
    reply names it)."""
    import struct

    def frame(t, flags, sid, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([t, flags]) + struct.pack(">I", sid) + payload
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    bport = srv.getsockname()[1]
    accepted = []

    def serve():
        conn, _ = srv.accept()
        accepted.append(conn)
        buf = b""
        conn.sendall(frame(4, 0, 0))                  # our SETTINGS
        while True:
            try:
                d = conn.recv(65536)
            except OSError:
                return
            if not d:
                return
            buf += d
            if buf.startswith(b"PRI * HTTP/2.0"):
                buf = buf[24:]
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                n, t, sid = int.from_bytes(buf[:3], "big"), buf[3], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                buf = buf[9 + n:]
                if t == 1:   # a request: HEADERS without :status (only cache-control, static index 24)
                    conn.sendall(frame(1, 4, sid, b"\x98"))
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    port = free_port()
    v = vsr(config_yaml(port, [h2_model("m", [{"endpoint": f"127.0.0.1:{bport}", "protocol": "h2"}],
                                        {"retry_count": 1, "retry_on": "reset"})]), port=port, workers=1)
    r = v.post_chat({"model": "m", "messages": []})
    srv.close()
    for c in accepted:
        c.close()
    assert r.status_code == 503
    assert r.json()["error"]["message"] == ("upstream connect error or disconnect/reset before headers. "
                                            "retried and the latest reset reason: protocol error")
    assert r.headers.get("x-vsr-upstream-attempts") is None   # a local reply
