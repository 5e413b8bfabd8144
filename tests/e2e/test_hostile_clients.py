"""Hostile clients at the edge: a body sent without the key, several keys in
one request, credentials meant for others, HPACK bombs, rapid reset and
HTTP/2 streams whose client grants no window.  Each attack is bounded in
time and size; the assertions say what vsr must refuse, and how early."""
import json
import socket
import struct
import time

import httpx

from conftest import config_yaml, free_port, model_yaml, wait_until
from h2raw import (DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, H2Conn, _int, encode_headers,
                   frame)

KEY = "sk-good"
BODY = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
ENHANCE_YOUR_CALM = 0xB


def start(vsr, fakellm, listener_extra="", args=()):
    be = fakellm(args=args)
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint])],
                        listener_extra=f"    api_keys: [\"{KEY}\"]\n" + listener_extra), port=port)
    return v, be


def metric(v, series):
    for line in httpx.get(v.metrics_url, timeout=10).text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0


def recv_until_closed(s, limit=1 << 20, timeout=10.0):
    s.settimeout(timeout)
    data = b""
    while len(data) < limit:
        d = s.recv(65536)
        if not d:
            return data, True
        data += d
    return data, False


# ---- the key is checked on the head ----

def test_bad_key_gets_401_before_the_body_and_no_100_continue(vsr, fakellm):
    v, be = start(vsr, fakellm)
    s = socket.create_connection(("127.0.0.1", v.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer wrong\r\n"
              b"content-type: application/json\r\nexpect: 100-continue\r\ncontent-length: 10000000\r\n\r\n")
    s.settimeout(10)
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 401 "), first[:80]      # no 100 Continue first
    assert b"invalid_api_key" in first or b"\r\n\r\n" in first
    # the client sends some of its body anyway: the connection still closes (lingering close)
    try:
        s.sendall(b"x" * 1_000_000)
    except OSError:
        pass
    rest, closed = recv_until_closed(s)
    assert closed, "the connection stays open after an unauthenticated body"
    assert b"connection: close" in (first + rest).lower()
    s.close()
    # without Expect: the 401 comes while the body is still being sent
    s = socket.create_connection(("127.0.0.1", v.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\napi-key: wrong\r\ncontent-length: 10000000\r\n\r\n"
              + b"{" * 65536)
    s.settimeout(10)
    assert s.recv(65536).startswith(b"HTTP/1.1 401 ")
    s.close()
    # the right key is served as before
    r = v.post_chat(BODY, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 200
    assert be.stats()["requests"] == 1


def test_bad_key_over_h2_is_answered_before_the_body_and_the_body_refused(vsr, fakellm):
    v, be = start(vsr, fakellm)
    c = H2Conn(v.port)
    fields = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "x"),
              ("authorization", "Bearer wrong"), ("content-length", "10000000")]
    c.s.sendall(frame(HEADERS, END_HEADERS, 1, encode_headers(fields)))
    # the 401's head arrives while not one body byte was sent
    f = c.read_until(lambda f: f[2] == 1 and f[0] in (HEADERS, RST_STREAM))
    assert f is not None and f[0] == HEADERS, f
    assert f[3][:1] != b"\x88"                                   # not :status 200 (static index 8)
    # a body that goes on is refused with RST_STREAM(NO_ERROR), not read to its end
    for _ in range(8):
        c.s.sendall(frame(DATA, 0, 1, b"x" * 16384))
    f = c.read_until(lambda f: f[2] == 1 and f[0] == RST_STREAM)
    assert f is not None and int.from_bytes(f[3], "big") == 0
    # the connection goes on: a request with the key on another stream is served
    c.request(3, "POST", "/v1/chat/completions", headers=[("authorization", f"Bearer {KEY}")],
              body=json.dumps(BODY).encode())
    f = c.read_until(lambda f: f[2] == 3 and (f[0] == RST_STREAM or f[1] & END_STREAM))
    assert f is not None and f[0] != RST_STREAM
    c.close()
    assert be.stats()["requests"] == 1


def test_one_key_per_request_and_foreign_credentials_stripped(vsr, fakellm):
    v, be = start(vsr, fakellm)
    with v.client() as cl:
        # several different keys: refused, whichever is right
        hdrs = [("authorization", "Bearer guess-1"), ("api-key", KEY)]
        assert cl.post("/v1/chat/completions", json=BODY, headers=hdrs).status_code == 401
        hdrs = [("api-key", "guess-1"), ("api-key", "guess-2"), ("api-key", KEY)]
        r = cl.post("/v1/chat/completions", json=BODY, headers=hdrs)
        assert r.status_code == 401 and "more than one" in r.json()["error"]["message"]
        # the same key twice is one key
        hdrs = [("authorization", f"Bearer {KEY}"), ("api-key", KEY)]
        r = cl.post("/v1/chat/completions", json=BODY, headers=hdrs)
        assert r.status_code == 200
        # x-api-key (Anthropic's field) is a client key too: a different one is a second key
        hdrs = [("authorization", f"Bearer {KEY}"), ("x-api-key", "sk-other-api")]
        assert cl.post("/v1/chat/completions", json=BODY, headers=hdrs).status_code == 401
        # credentials, and credentials meant for a proxy, never reach the backend
        hdrs = [("authorization", f"Bearer {KEY}"), ("proxy-authorization", "Basic c2VjcmV0"),
                ("x-api-key", KEY)]
        r = cl.post("/v1/chat/completions", json=BODY, headers=hdrs)
        assert r.status_code == 200
        seen = {k.lower() for k in r.json()["fakellm"]["request"]["headers"]}
        assert not seen & {"proxy-authorization", "x-api-key", "api-key"}, seen
    assert be.stats()["requests"] == 2


def test_default_body_limit_is_32_mib(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m1", [be.endpoint])]), port=port)
    s = socket.create_connection(("127.0.0.1", v.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % (32 * 1024 * 1024 + 1))
    s.settimeout(10)
    assert s.recv(65536).startswith(b"HTTP/1.1 413 ")
    s.close()


# ---- HPACK bomb ----

def test_hpack_bomb_gets_goaway_and_a_canary_is_served(vsr, fakellm):
    v, be = start(vsr, fakellm)
    c = H2Conn(v.port, timeout=20)
    base = [(":method", "GET"), (":scheme", "http"), (":path", "/health"), (":authority", "x")]
    big = b"v" * 4000
    # stream 1 puts a 4 KB field in the dynamic table (index 62); every later
    # block repeats it 1000 times, one byte each: 4 MB decoded per 1 KB sent
    add = b"\x40" + _int(5, 7) + b"x-big" + _int(len(big), 7) + big
    c.s.sendall(frame(HEADERS, END_HEADERS | END_STREAM, 1, encode_headers(base) + add))
    t0 = time.monotonic()
    got, sid = None, 3
    try:
        while time.monotonic() - t0 < 15 and sid < 2000:
            c.s.sendall(frame(HEADERS, END_HEADERS | END_STREAM, sid, encode_headers(base) + b"\xbe" * 1000))
            sid += 2
    except OSError:
        pass                                                  # vsr closed the connection: fine
    try:
        got = c.read_until(lambda f: f[0] == GOAWAY)
    except OSError:
        got = None
    assert got is not None, "no GOAWAY for an HPACK bomb"
    assert int.from_bytes(got[3][4:8], "big") == ENHANCE_YOUR_CALM
    last = int.from_bytes(got[3][:4], "big") & 0x7FFFFFFF
    # ended within the first reads (64 KiB each, ~60 blocks), not after the 1000 blocks sent
    assert last < 400, f"stream {last} processed before the GOAWAY"
    assert metric(v, 'vsr_edge_refusals_total{reason="h2_header_abuse"}') == 1
    c.close()
    # a well-behaved client on another connection is served
    c2 = H2Conn(v.port)
    c2.request(1, "GET", "/health")
    f = c2.read_until(lambda f: f[2] == 1 and (f[0] == RST_STREAM or f[1] & END_STREAM))
    assert f is not None and f[0] != RST_STREAM
    c2.close()


def test_hpack_bomb_in_trailers_gets_goaway(vsr, fakellm):
    """The same bomb in trailers, which vsr does not use but must bound."""
    v, be = start(vsr, fakellm)
    c = H2Conn(v.port, timeout=20)
    base = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "x"),
            ("authorization", f"Bearer {KEY}")]
    big = b"v" * 4000
    add = b"\x40" + _int(5, 7) + b"x-big" + _int(len(big), 7) + big
    c.s.sendall(frame(HEADERS, END_HEADERS | END_STREAM, 1, encode_headers(base) + add))
    try:
        for sid in range(3, 400, 2):
            c.s.sendall(frame(HEADERS, END_HEADERS, sid, encode_headers(base)) + frame(DATA, 0, sid, b"{}")
                        + frame(HEADERS, END_HEADERS | END_STREAM, sid, b"\xbe" * 1000))
    except OSError:
        pass
    try:
        got = c.read_until(lambda f: f[0] == GOAWAY)
    except OSError:
        got = None
    assert got is not None, "no GOAWAY for an HPACK bomb in trailers"
    assert int.from_bytes(got[3][4:8], "big") == ENHANCE_YOUR_CALM
    c.close()
    assert be.stats()["requests"] <= 1


# ---- rapid reset ----

def test_rapid_reset_costs_no_backend_connections_and_gets_goaway(vsr, fakellm):
    v, be = start(vsr, fakellm, args=("--delay-ms", "200"))
    before = be.stats()["connections_accepted"]
    c = H2Conn(v.port, timeout=20)
    body = json.dumps(BODY).encode()
    fields = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"), (":authority", "x"),
              ("authorization", f"Bearer {KEY}"), ("content-type", "application/json")]
    block = encode_headers(fields)
    goaway, sent = None, 0
    try:
        for batch in range(20):
            out = b""
            for i in range(50):
                sid = 1 + 2 * (batch * 50 + i)
                out += frame(HEADERS, END_HEADERS, sid, block) + frame(DATA, END_STREAM, sid, body)
                out += frame(RST_STREAM, 0, sid, struct.pack(">I", 0x8))
            c.s.sendall(out)
            sent += 50
    except OSError:
        pass
    try:
        goaway = c.read_until(lambda f: f[0] == GOAWAY)
    except OSError:
        goaway = None
    c.close()
    assert goaway is not None, f"no GOAWAY after {sent} reset streams"
    assert int.from_bytes(goaway[3][4:8], "big") == ENHANCE_YOUR_CALM
    assert metric(v, 'vsr_edge_refusals_total{reason="h2_rapid_reset"}') == 1
    time.sleep(0.5)
    opened = be.stats()["connections_accepted"] - before
    assert opened <= 5, f"{opened} backend connections for {sent} streams reset as they were sent"
    # a normal request is served as before
    r = v.post_chat(BODY, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 200


# ---- a stream whose client grants no window ----

def test_h2_stream_paused_past_the_timeout_is_cut_and_its_call_cancelled(vsr, fakellm):
    v, be = start(vsr, fakellm, listener_extra="    timeout: 2s\n")
    c = H2Conn(v.port, timeout=20)
    stream = dict(BODY, stream=True)
    c.request(1, "POST", "/v1/chat/completions",
              headers=[("authorization", f"Bearer {KEY}"), ("x-fakellm-chunks", "4096"),
                       ("x-fakellm-chunk-size", "16384")], body=json.dumps(stream).encode())
    assert c.read_until(lambda f: f[0] == DATA and f[2] == 1) is not None
    wait_until(lambda: be.stats()["connections_open"] >= 1, what="the upstream call")
    # the client never grants more window (but keeps the connection alive with PINGs)
    t0 = time.monotonic()
    rst = None
    while time.monotonic() - t0 < 15:
        c.s.sendall(frame(6, 0, 0, b"\0" * 8))                # PING: not idle, just not reading the stream
        c.s.settimeout(1.0)
        try:
            f = c.next_frame()
        except socket.timeout:
            continue
        if f is None:
            break
        if f[0] == RST_STREAM and f[2] == 1:
            rst = f
            break
        assert not (f[0] == DATA and f[2] == 1 and f[1] & END_STREAM), "a cut stream must not end cleanly"
    took = time.monotonic() - t0
    assert rst is not None, "a stream paused past the timeout was not reset"
    assert int.from_bytes(rst[3], "big") != 0
    assert took < 12, took
    # the request ended (its upstream call cancelled): the access log has it, cut (DC)
    def ended():
        return any(json.loads(l).get("path") == "/v1/chat/completions" and json.loads(l)["response_flags"] == "DC"
                   for l in v.proc.output().splitlines() if l.startswith("{"))
    wait_until(ended, what="the request's access-log line")
    assert metric(v, "vsr_active_requests") == 0                 # a scrape does not count itself
    assert metric(v, 'vsr_edge_refusals_total{reason="h2_stream_stalled"}') == 1
    c.close()


def test_call_cancelled_while_connecting_leaves_its_connection_to_the_pool(vsr):
    """A backend whose accept queue is full keeps vsr's connect pending; the
    client resets its stream meanwhile.  The connection, once it completes,
    waits in the pool and serves the next request: no connect per reset."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    fillers = []
    for _ in range(2):                         # fill the accept queue: vsr's SYN is dropped (retried after ~1 s)
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(srv.getsockname())
        fillers.append(f)
    time.sleep(0.2)
    port = free_port()
    # one worker: the pool is the worker's, and the next request must come to the same one
    v = vsr(config_yaml(port, [model_yaml("m1", [f"127.0.0.1:{srv.getsockname()[1]}"])],
                        listener_extra=f"    api_keys: [\"{KEY}\"]\n"), port=port, workers=1)
    try:
        pooled_after_cancel(v, srv, fillers)
    finally:
        srv.close()
        for f in fillers:
            f.close()


def pooled_after_cancel(v, srv, fillers):
    c = H2Conn(v.port)
    c.request(1, "POST", "/v1/chat/completions", headers=[("authorization", f"Bearer {KEY}")],
              body=json.dumps(BODY).encode())
    time.sleep(0.3)                            # the stream is dispatched: its connect is pending
    c.reset(1)
    time.sleep(0.2)
    for f in fillers:
        f.close()
    srv_conn = None
    srv.settimeout(5)
    while srv_conn is None:                    # the fillers leave the queue; then vsr's retried SYN completes
        a, _ = srv.accept()
        a.settimeout(0.2)
        try:
            gone = a.recv(1) == b""
        except socket.timeout:
            gone = False
        if gone:
            a.close()
        else:
            srv_conn = a                       # open and silent: vsr's connection
    srv_conn.settimeout(0.5)
    try:
        first = srv_conn.recv(1)
    except socket.timeout:
        first = None
    assert first is None, f"the cancelled call's connection carried {first!r} or was closed"
    # the next request reuses it: it arrives on that connection, and no other one is opened
    result = {}

    def client():
        result["r"] = v.post_chat(BODY, headers={"authorization": f"Bearer {KEY}"})
    th = __import__("threading").Thread(target=client)
    th.start()
    srv_conn.settimeout(10)
    req = srv_conn.recv(65536)
    assert req.startswith(b"POST "), req[:60]
    while b"\r\n\r\n" not in req:
        req += srv_conn.recv(65536)
    resp = json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode()
    srv_conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(resp)
                     + resp)
    th.join(15)
    assert result["r"].status_code == 200
    srv.settimeout(0.3)
    try:
        extra, _ = srv.accept()
        extra.close()
        raise AssertionError("a second backend connection was opened")
    except socket.timeout:
        pass
    c.close()
    srv_conn.close()


def test_h2_queued_bytes_have_a_process_wide_cap(vsr, fakellm):
    """80 streams whose clients grant no window would queue ~90 MB (1 MiB each
    before their upstream reads pause): past the 64 MiB process cap, streams
    that fall behind are cut, and vsr's memory stays bounded."""
    v, be = start(vsr, fakellm)
    conns = []
    stream = json.dumps(dict(BODY, stream=True)).encode()
    for i in range(8):
        c = H2Conn(v.port, timeout=20)
        c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        for k in range(10):
            c.request(1 + 2 * k, "POST", "/v1/chat/completions",
                      headers=[("authorization", f"Bearer {KEY}"), ("x-fakellm-chunks", "2000"),
                               ("x-fakellm-chunk-size", "16384")], body=stream)
        conns.append(c)
    wait_until(lambda: metric(v, 'vsr_edge_refusals_total{reason="h2_queue_memory"}') >= 1, timeout=30,
               what="a stream cut by the process-wide queue cap")
    cut = 0
    for c in conns:                               # the cut streams are reset (never a clean end)
        c.s.settimeout(0.5)
        try:
            while True:
                f = c.next_frame()
                if f is None:
                    break
                if f[0] == RST_STREAM:
                    assert int.from_bytes(f[3], "big") != 0
                    cut += 1
                assert not (f[0] == DATA and f[1] & END_STREAM), "a stream ended cleanly"
        except socket.timeout:
            pass
    assert cut >= 1
    for c in conns:
        c.close()
