"""Circuit breaking at the reference's fixed limits (ref §1.5: max_requests
1024 per cluster while no retries or ejection are configured): with 1024
calls held in flight by a stalling backend, the 1025th gets the overflow
local reply at once, and the 1024 complete once the backend answers.

Resource-light: raw sockets to vsr, one worker, and an HTTP/2 backend so
the 1024 upstream calls share a couple of connections instead of 1024."""
import resource
import socket
import time

import httpx
import pytest

from conftest import config_yaml, free_port, wait_until

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
