"""A client that leaves while vsr waits on its backend: the backend call is
cancelled at once, whatever vsr is waiting for — the response head, the
first body byte, or the next event of a paused stream — and the request
graph's hops in flight likewise.  The backend (fakellm) logs when it saw
its client go away (`client_left_ms`, on a clock whose zero it reports as a
CLOCK_MONOTONIC reading), so each test measures the backend's close time
minus the client's close time, on one clock, and holds it to 100 ms."""
import json
import socket
import time
import uuid

import httpx
import pytest

from conftest import config_yaml, free_port, model_yaml, wait_until
from h2raw import DATA, HEADERS, H2Conn, encode_headers, frame, END_HEADERS, END_STREAM

BOUND_MS = 100   # the backend sees the close within this of the client's close
PAUSE_MS = 5000  # every wait the client leaves in is this long: a cancel that waits it out fails
CC = "/v1/chat/completions"

# what the backend does, per wait the client leaves in
WAITS = {
    "head": [("x-fakellm-delay-ms", str(PAUSE_MS))],
    "first_byte": [("x-fakellm-stall-after", "0"), ("x-fakellm-stall-ms", str(PAUSE_MS))],
    "mid_stream": [("x-fakellm-chunks", "5"), ("x-fakellm-stall-after", "2"),
                   ("x-fakellm-stall-ms", str(PAUSE_MS))],
}


def fake_log(be):
    r = httpx.get(be.url + "/_fakellm/log", timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def calls_of(be, rid):
    return [e for e in fake_log(be)["entries"] if e["request_id"] == rid and e["path"] == CC]


def left_ms_after_close(be, pred, t_close_ns, n=1):
    """Waits until the n backend calls pred picks have seen their client
    leave; returns, per call, the backend's close time minus the client's
    (t_close_ns, time.monotonic_ns()), in ms."""
    def left():
        log = fake_log(be)
        es = [e for e in log["entries"] if e["path"] == CC and pred(e)]
        if len(es) >= n and all(e["client_left_ms"] is not None for e in es):
            return log["clock_zero_ns"], es
        return None
    wait_until(lambda: left() is not None, timeout=PAUSE_MS / 1000 - 1,
               what="the backend to see its client leave")
    zero, es = left()
    for e in es:
        assert e["end_ms"] is None, e  # never answered whole
    # client_left_ms is whole milliseconds, cut down: at most 1 ms early
    deltas = [(zero + e["client_left_ms"] * 1_000_000 - t_close_ns) / 1e6 for e in es]
    print("backend saw the close after (ms):", ", ".join(f"{d:.1f}" for d in deltas))   # pytest -s shows it
    return deltas


def access_line(v, rid):
    found = []

    def find():
        found[:] = [json.loads(l) for l in v.proc.output().splitlines()
                    if l.startswith("{") and json.loads(l).get("x_request_id") == rid]
        return found
    wait_until(find, what="the access-log line")
    return found[0]


def check_access(v, rid, t_start_ns, t_close_ns):
    line = access_line(v, rid)
    assert line["response_flags"] == "DC", line
    # the duration runs to when the client left, not to the end of the backend's pause
    elapsed = (t_close_ns - t_start_ns) / 1e6
    assert elapsed - 50 <= line["duration"] <= elapsed + BOUND_MS, (line, elapsed)
    return line


def start_one(vsr, fakellm, upstream="http1"):
    """vsr in front of one backend, reached over HTTP/1.1 or HTTP/2 (h2c)."""
    be = fakellm("be")
    port = free_port()
    ref = {"endpoint": be.endpoint, "protocol": "h2"} if upstream == "h2" else be.endpoint
    v = vsr(config_yaml(port, [model_yaml("m", [ref])], default="m"), port=port)
    v.be = be
    return v


@pytest.fixture
def one(vsr, fakellm):
    return start_one(vsr, fakellm)


def chat_body(stream):
    return json.dumps({"model": "m", "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()


def http1_request(port, rid, fields, body):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    head = b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-request-id: %s\r\n" % (
        CC.encode(), rid.encode())
    head += b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in fields)
    s.sendall(head + b"content-length: %d\r\n\r\n" % len(body) + body)
    return s


def read_until(s, marker):
    got = b""
    while marker not in got:
        d = s.recv(65536)
        assert d, got
        got += d
    return got


@pytest.mark.parametrize("upstream", ["http1", "h2"])
@pytest.mark.parametrize("wait", list(WAITS))
def test_http1_client_close_cancels_the_backend_call(vsr, fakellm, wait, upstream):
    """Over an HTTP/2 upstream the cancel is the stream's RST_STREAM, which
    the backend logs as its client leaving."""
    one = start_one(vsr, fakellm, upstream)
    rid = str(uuid.uuid4())
    t_start = time.monotonic_ns()
    s = http1_request(one.port, rid, WAITS[wait], chat_body(wait != "head"))
    if wait == "head":
        wait_until(lambda: calls_of(one.be, rid), what="the backend call")
        time.sleep(0.2)
    elif wait == "first_byte":
        got = read_until(s, b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 200"), got
        time.sleep(0.2)
    else:
        got = read_until(s, b"tok1 ")
        assert b"tok2 " not in got
        time.sleep(0.2)
    t_close = time.monotonic_ns()
    s.close()   # a FIN: vsr reads EOF, as it would from a half-close
    (delta,) = left_ms_after_close(one.be, lambda e: e["request_id"] == rid, t_close)
    assert -1 <= delta <= BOUND_MS, f"the backend saw the close {delta:.1f} ms after the client's"
    line = check_access(one, rid, t_start, t_close)
    assert line["response_code"] == (0 if wait == "head" else 200), line


def test_http1_half_close_is_a_client_gone(one):
    """shutdown(SHUT_WR) after the request: vsr cannot tell it from a close,
    so the call is cancelled and the client gets no answer (nginx's
    proxy_ignore_client_abort off)."""
    rid = str(uuid.uuid4())
    t_start = time.monotonic_ns()
    s = http1_request(one.port, rid, WAITS["head"], chat_body(False))
    wait_until(lambda: calls_of(one.be, rid), what="the backend call")
    t_close = time.monotonic_ns()
    s.shutdown(socket.SHUT_WR)
    (delta,) = left_ms_after_close(one.be, lambda e: e["request_id"] == rid, t_close)
    assert -1 <= delta <= BOUND_MS, delta
    assert s.recv(65536) == b""   # closed without an answer
    s.close()
    check_access(one, rid, t_start, t_close)


def test_http1_close_behind_held_pipelined_bytes(one):
    """A client that pipelined past the 1 MiB vsr holds (its reads stopped
    there) and then closes: the FIN waits behind bytes vsr has not read, and
    is noticed all the same."""
    rid = str(uuid.uuid4())
    t_start = time.monotonic_ns()
    s = http1_request(one.port, rid, WAITS["head"], chat_body(False))
    wait_until(lambda: calls_of(one.be, rid), what="the backend call")
    extra = (1 << 20) + (64 << 10)   # past the bound, and little enough to sit in vsr's socket buffer
    s.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
              % (CC.encode(), extra) + b"x" * extra)
    time.sleep(0.3)
    t_close = time.monotonic_ns()
    s.close()
    (delta,) = left_ms_after_close(one.be, lambda e: e["request_id"] == rid, t_close)
    assert -1 <= delta <= BOUND_MS, f"the backend saw the close {delta:.1f} ms after the client's"
    check_access(one, rid, t_start, t_close)


def test_tls_client_close_mid_stream(vsr, fakellm, tmp_path):
    """Over a TLS listener the close is the same read EOF, under the TLS
    layer."""
    import ssl
    from test_upstream_tls import make_certs
    ca, cert, key = make_certs(tmp_path)
    be = fakellm("be")
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], default="m",
                        listener_extra=f"    tls:\n      cert_file: {cert}\n      key_file: {key}\n"),
            port=port, wait_ready=False)
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.set_alpn_protocols(["http/1.1"])

    def connect():
        return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")

    def ready():
        try:
            connect().close()
            return True
        except OSError:
            return False
    wait_until(ready, what="vsr's TLS listener")
    rid = str(uuid.uuid4())
    body = chat_body(True)
    t_start = time.monotonic_ns()
    s = connect()
    s.settimeout(10)
    s.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-request-id: %s\r\n"
              % (CC.encode(), rid.encode()) + b"".join(b"%s: %s\r\n" % (k.encode(), x.encode())
                                                       for k, x in WAITS["mid_stream"])
              + b"content-length: %d\r\n\r\n" % len(body) + body)
    got = read_until(s, b"tok1 ")
    assert b"tok2 " not in got
    time.sleep(0.2)
    t_close = time.monotonic_ns()
    s.shutdown(socket.SHUT_WR)   # no close_notify: a TCP FIN under TLS (close() could send a reset)
    (delta,) = left_ms_after_close(be, lambda e: e["request_id"] == rid, t_close)
    s.close()
    assert -1 <= delta <= BOUND_MS, f"the backend saw the close {delta:.1f} ms after the client's"
    check_access(v, rid, t_start, t_close)


def h2_request(port, rid, fields, body):
    c = H2Conn(port)
    hdrs = [(":method", "POST"), (":scheme", "http"), (":path", CC), (":authority", "x"),
            ("content-type", "application/json"), ("x-request-id", rid)] + list(fields)
    c.s.sendall(frame(HEADERS, END_HEADERS, 1, encode_headers(hdrs)) + frame(DATA, END_STREAM, 1, body))
    return c


@pytest.mark.parametrize("how", ["reset", "close"])
@pytest.mark.parametrize("wait", list(WAITS))
def test_h2_client_reset_or_close_cancels_the_backend_call(one, wait, how):
    rid = str(uuid.uuid4())
    t_start = time.monotonic_ns()
    c = h2_request(one.port, rid, WAITS[wait], chat_body(wait != "head"))
    if wait == "head":
        wait_until(lambda: calls_of(one.be, rid), what="the backend call")
    elif wait == "first_byte":
        assert c.read_until(lambda f: f[0] == HEADERS and f[2] == 1) is not None
    else:
        got = b""
        while b"tok1 " not in got:
            f = c.read_until(lambda f: f[0] == DATA and f[2] == 1)
            assert f is not None and not f[1] & END_STREAM, got
            got += f[3]
        assert b"tok2 " not in got
    time.sleep(0.2)
    t_close = time.monotonic_ns()
    if how == "reset":
        c.reset(1)
    else:
        c.close()
    (delta,) = left_ms_after_close(one.be, lambda e: e["request_id"] == rid, t_close)
    assert -1 <= delta <= BOUND_MS, f"the backend saw the close {delta:.1f} ms after the client's"
    if how == "reset":
        # the connection goes on: another stream on it is answered
        c.request(3, "GET", "/health")
        f = c.read_until(lambda f: f[2] == 3 and f[1] & END_STREAM)
        assert f is not None
        c.close()
    line = check_access(one, rid, t_start, t_close)
    assert line["protocol"] == "HTTP/2"


def graph_doc(port, endpoint):
    """fusion over two panel models and a judge, all on one backend."""
    models = "\n".join(
        f'    - {{name: {n}, provider_model_id: {n}-v1, backend_refs: [{{name: b, endpoint: "{endpoint}"}}]}}'
        for n in ("m-small", "m-mid", "m-large"))
    algo = {"type": "fusion", "fusion": {"analysis_models": ["m-small", "m-mid"], "model": "m-large"}}
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s}}
providers:
  defaults: {{model: m-small}}
  models:
{models}
routing:
  signals:
    keywords:
      - {{name: kw, operator: OR, keywords: [looper]}}
  decisions:
    - name: multi
      rules: {{operator: AND, conditions: [{{type: keyword, name: kw}}]}}
      modelRefs: [{{model: m-small}}, {{model: m-mid}}, {{model: m-large}}]
      algorithm: {json.dumps(algo)}
global:
  services:
    management_api: {{port: {free_port()}}}
"""


@pytest.mark.looper
@pytest.mark.parametrize("proto", ["http1", "h2"])
def test_graph_hops_in_flight_are_cancelled(vsr, fakellm, proto):
    be = fakellm("llm", args=["--model-delay-ms", f"m-small-v1={PAUSE_MS}", "--model-delay-ms",
                              f"m-mid-v1={PAUSE_MS}"])
    port = free_port()
    v = vsr(graph_doc(port, be.endpoint), port=port)
    rid = str(uuid.uuid4())
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "looper: two plus two?"}]}).encode()
    t_start = time.monotonic_ns()
    if proto == "http1":
        c = http1_request(port, rid, [], body)
    else:
        c = h2_request(port, rid, [], body)

    def panel():
        return [e for e in fake_log(be)["entries"] if e["path"] == CC and e["model"] in ("m-small-v1", "m-mid-v1")]
    wait_until(lambda: len(panel()) == 2, what="both panel calls")
    time.sleep(0.2)
    t_close = time.monotonic_ns()
    c.close()
    deltas = left_ms_after_close(be, lambda e: e["model"] in ("m-small-v1", "m-mid-v1"), t_close, n=2)
    assert len(deltas) == 2 and all(-1 <= d <= BOUND_MS for d in deltas), deltas
    assert not [e for e in fake_log(be)["entries"] if e["model"] == "m-large-v1"]   # no judge call
    check_access(v, rid, t_start, t_close)
