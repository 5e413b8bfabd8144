"""Circuit breaking at the reference's fixed limits (ref §1.5: max_requests
1024 per cluster while no retries or ejection are configured): with 1024
calls held in flight by a stalling backend, the 1025th gets the overflow
local reply at once, and the 1024 complete once the backend answers.

Resource-light: raw sockets to vsr, one worker, and an HTTP/2 backend so
the 1024 upstream calls share a couple of connections instead of 1024."""
import resource
import socket
import subprocess
import time

import httpx
import pytest

from conftest import VSR_BIN, config_yaml, free_port, wait_until

HELD = 1024
HOLD_MS = 6000


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"needs {need} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))   # vsr and fakellm inherit it


def request_bytes(delay_ms):
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"x-fakellm-delay-ms: " + str(delay_ms).encode() + b"\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def read_response(s, timeout):
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d:
            break
        data += d
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, val = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(val)
    while len(rest) < length:
        d = s.recv(65536)
        if not d:
            break
        rest += d
    return head.decode(errors="replace"), rest


def test_request_overflow_at_1024_in_flight(vsr, fakellm):
    raise_nofile(3 * HELD + 512)
    be = fakellm("stall")
    port = free_port()
    v = vsr(config_yaml(port, ["    - name: m\n      backend_refs:\n"
                               f"        - {{name: b0, endpoint: '{be.endpoint}', protocol: h2}}"],
                        listener_extra="    timeout: 60s"), port=port, workers=1)
    socks = []
    try:
        req = request_bytes(HOLD_MS)
        for _ in range(HELD):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(req)
            socks.append(s)
        # all 1024 are at the backend, stalled
        wait_until(lambda: be.stats()["requests"] >= HELD, timeout=HOLD_MS / 1000 - 1, what="1024 calls in flight")
        t0 = time.monotonic()
        extra = socket.create_connection(("127.0.0.1", port))
        extra.sendall(request_bytes(0))
        head, body = read_response(extra, timeout=10)
        extra.close()
        assert head.startswith("HTTP/1.1 503 "), head
        assert "x-envoy-overloaded: true" in head.lower()
        assert (b'"message":"upstream connect error or disconnect/reset before headers. reset reason: overflow"'
                in body), body
        assert time.monotonic() - t0 < HOLD_MS / 1000 / 2   # refused at once, not after the stall
        assert be.stats()["requests"] == HELD                 # never reached the backend
        # the backend answers: every held call completes
        ok = 0
        for s in socks:
            head, body = read_response(s, timeout=30)
            ok += head.startswith("HTTP/1.1 200 ")
        assert ok == HELD
    finally:
        for s in socks:
            s.close()
    # and the breaker lets calls through again
    r = httpx.post(v.url + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=10)
    assert r.status_code == 200


def hold(port, n, delay_ms):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(request_bytes(delay_ms))
        socks.append(s)
    return socks


def overflowed(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(request_bytes(0))
    head, body = read_response(s, timeout=10)
    s.close()
    return head.startswith("HTTP/1.1 503 ") and b"reset reason: overflow" in body, head


def drain(socks):
    ok = 0
    for s in socks:
        head, _ = read_response(s, timeout=30)
        ok += head.startswith("HTTP/1.1 200 ")
        s.close()
    return ok


def limited_doc(port, endpoint, reliability, protocol=""):
    proto = f", protocol: {protocol}" if protocol else ""
    return config_yaml(port, ["    - name: m\n      backend_refs:\n"
                              f"        - {{name: b0, endpoint: '{endpoint}'{proto}}}\n"
                              f"      reliability: {{{reliability}}}"], listener_extra="    timeout: 60s")


def test_configured_max_requests_and_reload(vsr, fakellm):
    """reliability.max_requests (vsr's own) replaces the fixed 1024, and a
    reload that raises it applies to the cluster already running."""
    be = fakellm("stall")
    port = free_port()
    text = limited_doc(port, be.endpoint, "max_requests: 3", "h2")
    v = vsr(text, port=port, workers=1)
    socks = hold(port, 3, 3000)
    wait_until(lambda: be.stats()["requests"] >= 3, timeout=5, what="3 calls in flight")
    over, head = overflowed(port)
    assert over, head
    assert be.stats()["requests"] == 3
    assert drain(socks) == 3

    v.config_path.write_text(text.replace("max_requests: 3", "max_requests: 5"))  # the same document otherwise

    def reloaded():
        r = httpx.post(v.url + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=10)
        return r.status_code == 200 and r.headers["x-vsr-config-version"] == "2"
    wait_until(reloaded, timeout=15, what="the raised limit's version")
    before = be.stats()["requests"]
    socks = hold(port, 4, 3000)
    wait_until(lambda: be.stats()["requests"] >= before + 4, timeout=5, what="4 calls in flight")
    over, head = overflowed(port)   # the fifth is within the new limit
    assert not over and head.startswith("HTTP/1.1 200 "), head
    assert drain(socks) == 4


def test_configured_max_connections(vsr, fakellm):
    """reliability.max_connections: an HTTP/1.1 backend takes one connection
    per call in flight, so the third call over a limit of 2 overflows."""
    be = fakellm("stall")
    port = free_port()
    vsr(limited_doc(port, be.endpoint, "max_connections: 2"), port=port, workers=1)
    socks = hold(port, 2, 3000)
    wait_until(lambda: be.stats()["requests"] >= 2, timeout=5, what="2 calls in flight")
    over, head = overflowed(port)
    assert over, head
    assert "x-envoy-overloaded: true" in head.lower()
    assert be.stats()["requests"] == 2
    assert drain(socks) == 2


def test_circuit_limits_are_checked(vsr, tmp_path):
    """0 and more than 1,000,000 are refused with the place and the range."""
    for bad in ("max_connections: 0", "max_pending_requests: 1000001", "max_requests: -1"):
        path = tmp_path / "bad.yaml"
        path.write_text(limited_doc(free_port(), "127.0.0.1:9", bad))
        r = subprocess.run([VSR_BIN, "config", "validate", str(path)], capture_output=True, text=True)
        assert r.returncode == 2, (bad, r.stdout, r.stderr)
        key = bad.split(":")[0]
        assert key in r.stderr + r.stdout and "bad.yaml:" in r.stderr + r.stdout, r.stderr
