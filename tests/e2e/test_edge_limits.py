"""The edge under hostile clients: descriptors running out, clients that never
read, trickling heads and bodies, half-closes, and response heads a slow body
must not hold back."""
import json
import resource
import signal
import socket
import threading
import time

import httpx
from test_http2 import curl

from conftest import ENV, FAKELLM_BIN, VSR_BIN, Proc, Vsr, config_yaml, free_port, model_yaml, wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def health_ok(v, timeout=5):
    try:
        return httpx.get(v.url + "/health", timeout=timeout).status_code == 200
    except httpx.TransportError:
        return False


def metric(v, name):
    total = 0.0
    for line in httpx.get(v.metrics_url, timeout=5).text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def read_head(s, timeout):
    """Reads until the end of a response head; returns (head, the rest read)."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d:
            break
        data += d
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode(errors="replace"), rest


def read_to_close(s, limit_s):
    """Everything until the server closes (or limit_s pass): (bytes, closed)."""
    deadline = time.monotonic() + limit_s
    chunks = []
    while time.monotonic() < deadline:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            d = s.recv(1 << 20)
        except socket.timeout:
            return b"".join(chunks), False
        except ConnectionResetError:
            return b"".join(chunks), True
        if not d:
            return b"".join(chunks), True
        chunks.append(d)
    return b"".join(chunks), False


# ---- descriptors running out ----

def test_accept_backs_off_when_descriptors_run_out(tmp_path, fakellm):
    be = fakellm()
    port = free_port()
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(port, [model_yaml("m", [be.endpoint])]))
    metrics_port = free_port()
    # a hard limit too: vsr raises the soft limit to the hard one
    proc = Proc(["prlimit", "--nofile=160:160", VSR_BIN, "serve", "--config", str(path), "--workers", "3",
                 "--metrics-listen", f"127.0.0.1:{metrics_port}"], tmp_path, "vsr-lowfd")
    v = Vsr(proc, port, path)
    v.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    try:
        wait_until(lambda: proc.p.poll() is not None or health_ok(v, 1), what="vsr /health")
        assert proc.p.poll() is None, proc.output()
        for _ in range(4):
            held = []
            for _ in range(400):   # far more than the 160 descriptors vsr has
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                held.append(s)
            time.sleep(1.0)
            for s in held:
                s.close()
            # once the flood is gone, every worker serves again by itself
            wait_until(lambda: health_ok(v, 2), timeout=15, what="/health after a connect flood")
        # the kernel spreads these over every worker: all of them serve again
        wait_until(lambda: all(health_ok(v, 2) for _ in range(12)), timeout=30, what="every worker serving")
        assert httpx.post(v.url + "/v1/chat/completions", json=CHAT, timeout=10).status_code == 200
        # libuv's own spare descriptor absorbs some floods unseen; those vsr sees are counted and logged
        failed = metric(v, "vsr_accept_errors_total")
        out = proc.output()
        assert ("accept failed" in out) == (failed > 0)
        assert "RLIMIT_NOFILE is 160" in out   # the start-up warning: 50000 connections cannot fit
    finally:
        rc = proc.stop(signal.SIGTERM, timeout=20)   # no worker is wedged: SIGTERM is heard
    assert rc == 0, proc.output()[-3000:]
    proc.assert_clean_exit()
