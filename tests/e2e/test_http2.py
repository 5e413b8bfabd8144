"""HTTP/2 from clients on the plain listener: prior knowledge and
`Upgrade: h2c` on the same port as HTTP/1.1, and every behaviour that
matters over HTTP/1.1 again over streams: keys, ingress hygiene, many
streams on one connection, SSE with backpressure, a client's RST_STREAM,
drain (GOAWAY, then the streams finish), limits, idle timeout."""
import json
import signal
import subprocess
import time

import pytest

from conftest import config_yaml, free_port, model_yaml, sse_events, wait_until
from h2raw import DATA, END_STREAM, GOAWAY, HEADERS, RST_STREAM, H2Conn
from test_streaming import rss_kb

BODY = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {"model": "m2", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def curl(*args, timeout=30):
    """curl's -i output, body and all: (status line list, headers dict, body)."""
    r = subprocess.run(["curl", "-sS", "-i", "--max-time", str(timeout), *args], capture_output=True,
                       timeout=timeout + 5)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode(errors="replace")
    statuses, headers, body = [], {}, text
    # one head per interim response (101) plus the final one
    while body.startswith("HTTP/"):
        head, _, body = body.partition("\r\n\r\n")
        lines = head.split("\r\n")
        statuses.append(lines[0].strip())
        headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    return statuses, headers, body


def post_args(url, body, *extra):
    return [url, "-H", "content-type: application/json", "--data-binary", json.dumps(body), *extra]


def test_prior_knowledge_and_upgrade_on_the_http1_port(stack):
    st, h, body = curl("--http2-prior-knowledge", stack.url + "/health")
    assert st == ["HTTP/2 200"] and json.loads(body) == {"status": "ok"}
    st, h, body = curl("--http2-prior-knowledge", *post_args(stack.url + "/v1/chat/completions", BODY))
    assert st == ["HTTP/2 200"]
    assert h["x-vsr-selected-model"] == "m1"
    req = json.loads(body)["fakellm"]["request"]
    assert json.loads(req["body"])["model"] == "m1-upstream"
    assert req["headers"]["host"] != "x"          # the backend gets its own authority, as over HTTP/1.1
    # Upgrade: h2c (curl --http2 on http://): 101, then the answer on stream 1, body included
    st, h, body = curl("--http2", *post_args(stack.url + "/v1/chat/completions", BODY))
    assert st == ["HTTP/1.1 101 Switching Protocols", "HTTP/2 200"]
    assert json.loads(body)["fakellm"]["request"]["method"] == "POST"
    # and HTTP/1.1 still works on the same port
    st, _, _ = curl("--http1.1", stack.url + "/health")
    assert st == ["HTTP/1.1 200 OK"]
    # the access log names the protocol
    def protocols():
        return {json.loads(l).get("protocol") for l in stack.proc.output().splitlines() if l.startswith("{")}
    wait_until(lambda: {"HTTP/2", "HTTP/1.1"} <= protocols(), what="access-log lines of both protocols")


def test_api_key_and_ingress_hygiene_over_h2(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint])], listener_extra='    api_keys: ["k-one"]'),
            port=port)
    url = v.url + "/v1/chat/completions"
    st, h, body = curl("--http2-prior-knowledge", *post_args(url, BODY))
    assert st == ["HTTP/2 401"]
    assert json.loads(body)["error"]["code"] == "invalid_api_key"
    assert h["www-authenticate"] == 'Bearer realm="vllm-semantic-router"'
    st, h, body = curl("--http2-prior-knowledge", *post_args(url, BODY, "-H", "authorization: Bearer k-one",
                                                             "-H", "x-envoy-retry-on: 5xx",
                                                             "-H", "x-vsr-selected-model: evil", "-H", "x-keep: yes"))
    assert st == ["HTTP/2 200"]
    sent = json.loads(body)["fakellm"]["request"]["headers"]
    assert "authorization" not in sent                    # the client's key goes no further
    assert "x-envoy-retry-on" not in sent and "x-vsr-selected-model" not in sent
    assert sent["x-keep"] == "yes"
    assert be.stats()["requests"] == 1


def test_many_streams_on_one_connection_h2load(stack, tmp_path):
    body = tmp_path / "body.json"
    body.write_text(json.dumps(BODY))
    before = sum(b.stats()["requests"] for b in stack.backends)
    r = subprocess.run(["h2load", "-c", "1", "-m", "32", "-n", "300", "-d", str(body),
                        "-H", "content-type: application/json", stack.url + "/v1/chat/completions"],
                       capture_output=True, text=True, timeout=60)
    assert "300 succeeded, 0 failed, 0 errored" in r.stdout, r.stdout
    assert "300 2xx" in r.stdout
    after = sum(b.stats()["requests"] for b in stack.backends)
    assert after - before == 300
    # a short load run: several connections, many streams each
    r = subprocess.run(["h2load", "-c", "4", "-m", "8", "-n", "2000", stack.url + "/health"],
                       capture_output=True, text=True, timeout=60)
    assert "2000 succeeded, 0 failed, 0 errored" in r.stdout, r.stdout


def test_sse_over_h2(stack):
    st, h, body = curl("--http2-prior-knowledge", "-N", "-H", "x-fakellm-chunks: 7",
                       *post_args(stack.url + "/v1/chat/completions", STREAM))
    assert st == ["HTTP/2 200"]
    assert h["content-type"].startswith("text/event-stream")
    assert "transfer-encoding" not in h
    events = sse_events(body)
    assert events[-1] == "[DONE]"
    contents = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1]]
    assert [c for c in contents if c] == [f"tok{i} " for i in range(7)]


def stream_request(conn, sid, extra=()):
    conn.request(sid, "POST", "/v1/chat/completions",
                 headers=[("content-type", "application/json"), *extra], body=json.dumps(STREAM).encode())


def test_h2_client_that_stops_reading_bounds_memory(stack):
    """64 MB streamed to an HTTP/2 client that opened huge windows and then
    stops reading: vsr must stop reading the backend instead of buffering."""
    pid = stack.proc.p.pid
    c = H2Conn(stack.port, window=(1 << 31) - 1, timeout=30)
    c.s.setsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_RCVBUF, 65536)
    stream_request(c, 1, [("x-fakellm-chunks", "1024"), ("x-fakellm-chunk-size", "65536")])
    assert c.read_until(lambda f: f[0] == DATA and f[2] == 1) is not None
    base = rss_kb(pid)
    time.sleep(2.0)  # the backend could push all 64 MB in this time if nothing held it back
    grown = rss_kb(pid) - base
    assert grown < 16 * 1024, f"vsr grew {grown} KiB while its HTTP/2 client was not reading"
    total, tail = 0, b""
    while True:
        f = c.next_frame()
        assert f is not None, "connection closed mid-stream"
        if f[0] == DATA and f[2] == 1:
            total += len(f[3])
            tail = (tail + f[3])[-64:]
            if f[1] & END_STREAM:
                break
    c.close()
    assert total > 64 * 1024 * 1024
    assert b"[DONE]" in tail


def test_h2_stream_window_backpressure_bounds_memory(stack):
    """The same with the default 64 KiB stream window: flow control holds
    the stream, and the upstream read pauses behind it."""
    pid = stack.proc.p.pid
    c = H2Conn(stack.port)
    stream_request(c, 1, [("x-fakellm-chunks", "1024"), ("x-fakellm-chunk-size", "65536")])
    assert c.read_until(lambda f: f[0] == DATA and f[2] == 1) is not None
    base = rss_kb(pid)
    time.sleep(2.0)
    grown = rss_kb(pid) - base
    assert grown < 16 * 1024, f"vsr grew {grown} KiB behind a closed HTTP/2 window"
    c.close()


def test_rst_stream_cancels_the_upstream_call_and_spares_siblings(stack):
    be = stack.backends[2]
    before = be.stats()["connections_open"]
    c = H2Conn(stack.port)
    stream_request(c, 1, [("x-fakellm-chunks", "1000"), ("x-fakellm-chunk-delay-ms", "50")])
    assert c.read_until(lambda f: f[0] == DATA and f[2] == 1 and b"tok1 " in f[3]) is not None
    assert be.stats()["connections_open"] == before + 1
    c.reset(1)
    wait_until(lambda: be.stats()["connections_open"] == before,
               what="the backend to see the reset stream's connection closed")
    # the connection itself is fine: another stream on it is answered
    c.request(3, "GET", "/health")
    f = c.read_until(lambda f: f[2] == 3 and (f[1] & END_STREAM or f[0] == RST_STREAM))
    assert f is not None and f[0] in (DATA, HEADERS) and f[1] & END_STREAM
    c.close()
    # and the access log says the client went away first
    wait_until(lambda: any(json.loads(l).get("response_flags") == "DC" and json.loads(l).get("protocol") == "HTTP/2"
                           for l in stack.proc.output().splitlines() if l.startswith("{")),
               what="a DC access-log line")


def test_drain_sends_goaway_then_finishes_the_stream(stack):
    c = H2Conn(stack.port)
    stream_request(c, 1, [("x-fakellm-chunks", "20"), ("x-fakellm-chunk-delay-ms", "100")])
    assert c.read_until(lambda f: f[0] == DATA and f[2] == 1) is not None
    stack.proc.p.send_signal(signal.SIGTERM)
    got_goaway, data, ended = False, b"", False
    while True:
        f = c.next_frame()
        if f is None:
            break
        if f[0] == GOAWAY:
            got_goaway = True
            assert int.from_bytes(f[3][4:8], "big") == 0       # NO_ERROR
        if f[0] == DATA and f[2] == 1:
            data += f[3]
            if f[1] & END_STREAM:
                ended = True
        assert f[0] != RST_STREAM, "stream reset during drain"
    assert got_goaway, "no GOAWAY during drain"
    assert ended and b"[DONE]" in data, "stream cut during drain"
    c.close()
    assert stack.proc.stop() == 0
    stack.proc.assert_clean_exit()


def test_limits_over_both_protocols(vsr, fakellm, tmp_path):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint])],
                        listener_extra="    max_request_body_bytes: 100000\n    max_headers: 20\n"
                                       "    max_header_bytes: 4096"), port=port)
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 3_000_000)
    url = v.url + "/v1/chat/completions"
    for mode in ("--http2-prior-knowledge", "--http1.1"):
        st, h, body = curl(mode, url, "--data-binary", "@" + str(big))
        assert st[-1].split()[1] == "413", (mode, st)
        assert json.loads(body)["error"]["code"] == "request_too_large"
        many = []
        for i in range(25):
            many += ["-H", f"x-h{i}: v"]
        st, _, body = curl(mode, v.url + "/health", *many)
        assert st[-1].split()[1] == "431", (mode, st)
        st, _, _ = curl(mode, v.url + "/health", "-H", "x-big: " + "b" * 5000)
        assert st[-1].split()[1] == "431", (mode, st)
        st, _, _ = curl(mode, v.url + "/health", *many[:20])      # 10 fields: within the limit
        assert st[-1].split()[1] == "200", (mode, st)
    # chunked over HTTP/2 (no content-length): the limit holds as the body comes
    st, _, _ = curl("--http2-prior-knowledge", url, "-H", "transfer-encoding: chunked", "--data-binary", "@" + str(big))
    assert st[-1] == "HTTP/2 413"
    assert be.stats()["requests"] == 0


def test_idle_h2_connection_gets_goaway_and_closes(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint])], listener_extra="    timeout: 1s"), port=port)
    c = H2Conn(v.port, timeout=15)
    c.request(1, "GET", "/health")
    assert c.read_until(lambda f: f[2] == 1 and f[1] & END_STREAM) is not None
    start = time.monotonic()
    f = c.read_until(lambda f: f[0] == GOAWAY)
    assert f is not None, "closed without GOAWAY"
    assert c.next_frame() is None          # then the connection closes
    assert time.monotonic() - start < 10   # generous: the timeout is 1s
    c.close()


def test_fields_http2_forbids_reset_only_their_stream(stack):
    """Smuggling shapes over HTTP/2: upper-case names, connection-specific
    fields, CR/LF in a value.  Each stream is reset (PROTOCOL_ERROR), no
    backend sees it, and the connection goes on."""
    before = sum(b.stats()["requests"] for b in stack.backends)
    c = H2Conn(stack.port)
    sid = 1
    for hdrs in ([("X-Upper", "1")], [("connection", "close")], [("transfer-encoding", "chunked")],
                 [("te", "gzip")], [("x-ok", "a\r\nb")], [("upgrade", "h2c")]):
        stream_request(c, sid, hdrs)
        f = c.read_until(lambda f: f[2] == sid and (f[0] == RST_STREAM or f[1] & END_STREAM))
        assert f is not None and f[0] == RST_STREAM, hdrs
        assert int.from_bytes(f[3][:4], "big") == 1, hdrs          # PROTOCOL_ERROR
        sid += 2
    c.request(sid, "GET", "/health")
    f = c.read_until(lambda f: f[2] == sid and (f[0] == RST_STREAM or f[1] & END_STREAM))
    assert f is not None and f[0] != RST_STREAM
    c.close()
    assert sum(b.stats()["requests"] for b in stack.backends) == before


def test_upstream_failing_mid_stream_resets_only_that_stream(stack):
    """A backend that drops after the head: that stream ends with
    RST_STREAM (INTERNAL_ERROR), never a clean end; its sibling finishes."""
    c = H2Conn(stack.port)
    stream_request(c, 1, [("x-fakellm-chunks", "10"), ("x-fakellm-drop-after", "3")])
    stream_request(c, 3, [("x-fakellm-chunks", "5"), ("x-fakellm-chunk-delay-ms", "50")])
    ends, data = {}, {1: b"", 3: b""}
    while len(ends) < 2:
        f = c.next_frame()
        assert f is not None, "connection closed"
        if f[2] in data and f[0] == DATA:
            data[f[2]] += f[3]
            if f[1] & END_STREAM:
                ends[f[2]] = "end"
        elif f[2] in data and f[0] == RST_STREAM:
            ends[f[2]] = int.from_bytes(f[3][:4], "big")
    assert ends == {1: 2, 3: "end"}                 # 2 = INTERNAL_ERROR
    assert b"[DONE]" not in data[1] and b"[DONE]" in data[3]
    c.close()


def test_idle_timeout_after_upgrade(vsr, fakellm):
    """An upgraded connection is idle as HTTP/2: GOAWAY, then closed."""
    import socket
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint])], listener_extra="    timeout: 1s"), port=port)
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(15)
    s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
              b"http2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(4096)
    assert got.startswith(b"HTTP/1.1 101 ")
    c = H2Conn(port, sock=s, timeout=15)
    c.buf = got.split(b"\r\n\r\n", 1)[1]
    assert c.read_until(lambda f: f[2] == 1 and f[1] & END_STREAM) is not None   # the answer, on stream 1
    start = time.monotonic()
    assert c.read_until(lambda f: f[0] == GOAWAY) is not None
    assert c.next_frame() is None
    assert time.monotonic() - start < 10
    c.close()


def test_connection_limit_counts_h2_connections_not_streams(vsr, fakellm):
    """max_connections: 2 — two HTTP/2 connections with streams in flight
    fill it; a third connection is refused; the two go on, and many streams
    on one of them do not count."""
    import socket
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint])], listener_extra="    max_connections: 2"),
            port=port, workers=1)
    time.sleep(0.3)  # the readiness probe's connection must be closed and uncounted first
    conns = [H2Conn(port) for _ in range(2)]
    for c in conns:
        c.request(1, "POST", "/v1/chat/completions", body=json.dumps({**STREAM, "model": "m1"}).encode(),
                  headers=[("content-type", "application/json"), ("x-fakellm-chunks", "10"),
                           ("x-fakellm-chunk-delay-ms", "50")])
        f = c.read_until(lambda f: f[0] == DATA and f[2] == 1)
        assert f is not None and not f[1] & END_STREAM     # a stream in flight
    extra = socket.create_connection(("127.0.0.1", port))
    extra.settimeout(5)
    try:
        extra.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        got = extra.recv(100)
    except (ConnectionResetError, BrokenPipeError):
        got = b""
    assert got == b""
    extra.close()
    for c in conns:
        for sid in range(3, 3 + 2 * 20, 2):
            c.request(sid, "GET", "/health")
        done = set()
        while len(done) < 21:
            f = c.next_frame()
            assert f is not None
            assert f[0] != RST_STREAM
            if f[1] & END_STREAM and f[0] in (DATA, HEADERS):
                done.add(f[2])
        c.close()


def test_connect_is_refused_and_host_kept_without_authority(stack):
    from h2raw import END_HEADERS, encode_headers, frame
    c = H2Conn(stack.port)
    c.s.sendall(frame(HEADERS, END_HEADERS | END_STREAM, 1,
                      encode_headers([(":method", "CONNECT"), (":authority", "example.com:443")])))
    f = c.read_until(lambda f: f[2] == 1 and f[0] in (HEADERS, RST_STREAM))
    assert f is not None and f[0] == HEADERS
    assert f[3][0] == 0x80 | 12          # HPACK static entry 12: ":status: 400"
    # no :authority, a host field: the request keeps it (and is served)
    c.s.sendall(frame(HEADERS, END_HEADERS | END_STREAM, 3,
                      encode_headers([(":method", "GET"), (":scheme", "http"), (":path", "/health"),
                                      ("host", "h.example")])))
    f = c.read_until(lambda f: f[2] == 3 and f[0] in (HEADERS, RST_STREAM))
    assert f is not None and f[0] == HEADERS and f[3][0] == 0x80 | 8     # ":status: 200"
    c.close()
