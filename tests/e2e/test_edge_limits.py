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
import pytest
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


# ---- a client that never reads ----

def test_pipelined_replies_are_bounded_when_the_client_never_reads(vsr, fakellm):
    be = fakellm()
    port = free_port()
    # ASan's quarantine of freed memory would count in RSS: kept small here
    asan = ENV.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4:thread_local_quarantine_size_kb=64"
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra="    timeout: 4s"), port=port,
            workers=1, env={"ASAN_OPTIONS": asan})
    pid = v.proc.p.pid
    before = rss_kb(pid)
    req = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
    blob = req * (65536 // len(req))
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.setblocking(False)
    sent, deadline, peak = 0, time.monotonic() + 8, before
    while sent < 64 * 1024 * 1024 and time.monotonic() < deadline:   # 64 MB, ~1.8M requests, never reading
        try:
            sent += s.send(blob)
        except BlockingIOError:
            time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            break   # the listener's timeout passed with nothing read: vsr closed it
        peak = max(peak, rss_kb(pid))
    # another client is served meanwhile
    assert health_ok(v, 5)
    # vsr stopped reading: far less than everything was taken, and memory stayed bounded
    assert sent < 48 * 1024 * 1024, sent
    assert peak - before < 120 * 1024, (before, peak)
    # the client never drains: the connection is closed after the listener's timeout
    time.sleep(6)
    data, closed = read_to_close(s, 20)
    s.close()
    assert closed
    assert len(data) < 24 * 1024 * 1024
    assert metric(v, 'vsr_client_timeouts_total{reason="write"}') >= 1


def test_paused_stream_is_cut_when_the_client_never_reads(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra="    timeout: 3s"), port=port,
            workers=1)
    body = json.dumps({**CHAT, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    # 2,000 events of 16 KiB: about 32 MB, far more than the socket buffers and vsr's queue
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"x-fakellm-chunks: 2000\r\nx-fakellm-chunk-size: 16384\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(8)   # never reading: vsr pauses the upstream, then gives up on the client
    data, closed = read_to_close(s, 30)
    s.close()
    assert data.startswith(b"HTTP/1.1 200")
    assert closed
    assert not data.endswith(b"0\r\n\r\n")   # visibly cut: no terminating chunk
    assert len(data) < 16 * 1024 * 1024
    assert metric(v, 'vsr_client_timeouts_total{reason="write"}') >= 1
    wait_until(lambda: be.stats().get("connections_open", 0) <= 1, timeout=10, what="the upstream call cancelled")
    assert health_ok(v)


@pytest.mark.parametrize("direction", ["messages-to-chat", "chat-to-messages"])
def test_translated_stream_is_bounded_when_the_client_never_reads(vsr, fakellm, direction):
    """A translated stream (each event parsed and written anew) is held to the
    same bounds as a relayed one: the upstream is paused, memory stays bounded,
    and the client that never drains is cut after the listener's timeout."""
    be = fakellm()
    port = free_port()
    asan = ENV.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=4:thread_local_quarantine_size_kb=64"
    models = model_yaml("m", [be.endpoint])
    if direction == "chat-to-messages":
        models = models.replace("      backend_refs:", "      api_format: anthropic\n      backend_refs:", 1)
    v = vsr(config_yaml(port, [models], listener_extra="    timeout: 3s"), port=port, workers=1,
            env={"ASAN_OPTIONS": asan})
    pid = v.proc.p.pid
    before = rss_kb(pid)
    if direction == "messages-to-chat":
        path = b"/v1/messages"
        body = json.dumps({"model": "m", "max_tokens": 64, "stream": True,
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
    else:
        path = b"/v1/chat/completions"
        body = json.dumps({**CHAT, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    # 2,000 events of 16 KiB: about 32 MB before translation
    s.sendall(b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"x-fakellm-chunks: 2000\r\nx-fakellm-chunk-size: 16384\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    peak, deadline = before, time.monotonic() + 8
    while time.monotonic() < deadline:   # never reading
        peak = max(peak, rss_kb(pid))
        time.sleep(0.1)
    data, closed = read_to_close(s, 30)
    s.close()
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert closed
    assert not data.endswith(b"0\r\n\r\n")   # visibly cut: no terminating chunk
    assert len(data) < 16 * 1024 * 1024
    assert peak - before < 64 * 1024, (before, peak)   # not the 32 MB the backend had to give
    assert metric(v, 'vsr_client_timeouts_total{reason="write"}') >= 1
    wait_until(lambda: be.stats().get("connections_open", 0) <= 1, timeout=10, what="the upstream call cancelled")
    assert health_ok(v)


# ---- slowloris ----

def trickle(port, first, byte, every_s, limit_s):
    """Sends `first`, then `byte` every every_s seconds, reading whatever comes
    back, until the server closes or limit_s pass: (bytes received, seconds)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(first)
    s.settimeout(every_s)
    start = time.monotonic()
    data = b""
    try:
        while time.monotonic() - start < limit_s:
            try:
                d = s.recv(65536)
                if not d:
                    break
                data += d
            except socket.timeout:
                try:
                    s.sendall(byte)
                except (BrokenPipeError, ConnectionResetError):
                    break
    except ConnectionResetError:
        pass
    s.close()
    return data, time.monotonic() - start


def test_trickling_head_gets_408_at_the_header_deadline(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])],
                        listener_extra="    timeout: 60s\n    header_timeout: 1s"), port=port)
    data, took = trickle(port, b"GET /health HTTP/1.1\r\nhost: x\r\nx-a: ", b"a", 0.2, 20)
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert b"request_timeout" in data and b"connection: close" in data
    assert took < 12   # the deadline (1s), then at most the lingering close
    assert metric(v, 'vsr_client_timeouts_total{reason="header"}') >= 1
    assert health_ok(v)


def test_trickling_body_gets_408_at_the_body_deadline(vsr, fakellm):
    be = fakellm()
    port = free_port()
    v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])],
                        listener_extra="    timeout: 60s\n    body_timeout: 1500ms"), port=port)
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 100000\r\n\r\n{")
    data, took = trickle(port, head, b" ", 0.2, 20)
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert b"request body" in data
    assert took < 12
    assert metric(v, 'vsr_client_timeouts_total{reason="body"}') >= 1
    assert be.stats()["requests"] == 0


def test_keep_alive_requests_each_get_their_own_head_deadline(vsr, fakellm):
    be = fakellm()
    port = free_port()
    vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra="    header_timeout: 1s"), port=port)
    s = socket.create_connection(("127.0.0.1", port))
    for _ in range(3):   # slower than the deadline in total, each request well within it
        s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        head, _ = read_head(s, 5)
        assert head.startswith("HTTP/1.1 200"), head
        time.sleep(0.6)
    s.close()


# ---- half-close ----

def test_half_closed_client_is_a_client_gone(vsr, fakellm):
    """A half-close after a complete request (`nc -N`) is an EOF, all a proxy
    can tell of a client that closed: the backend call is cancelled and the
    connection closes without an answer (nginx's proxy_ignore_client_abort
    off).  test_cancellation.py times the cancel."""
    be = fakellm()
    port = free_port()
    vsr(config_yaml(port, [model_yaml("m", [be.endpoint])]), port=port)
    body = json.dumps(CHAT).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              b"x-fakellm-delay-ms: 3000\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    def calls():
        return [e for e in httpx.get(be.url + "/_fakellm/log", timeout=5).json()["entries"]
                if e["path"] == "/v1/chat/completions"]
    wait_until(calls, what="the backend call")
    s.shutdown(socket.SHUT_WR)   # as `nc -N`: nothing more to send
    t0 = time.monotonic()
    data, closed = read_to_close(s, 10)
    s.close()
    assert data == b"" and closed
    assert time.monotonic() - t0 < 2   # not after the backend's answer
    wait_until(lambda: calls()[0]["client_left_ms"] is not None, what="the backend to see its client leave")
    assert calls()[0]["end_ms"] is None


# ---- response heads ----

class RawBackend:
    """A backend that answers every request with `reply` (bytes), then does
    what `after` says: "keep" (keep-alive) or "hang"."""

    def __init__(self, reply, after="keep"):
        self.reply, self.after = reply, after
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.srv.settimeout(0.2)
        self.endpoint = "127.0.0.1:%d" % self.srv.getsockname()[1]
        self.stop = threading.Event()
        self.conns = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                c, _ = self.srv.accept()
            except socket.timeout:
                continue
            self.conns.append(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        c.settimeout(0.2)
        buf = b""
        while not self.stop.is_set():
            try:
                d = c.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not d:
                return
            buf += d
            while b"\r\n\r\n" in buf:
                head, _, rest = buf.partition(b"\r\n\r\n")
                n = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, val = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        n = int(val.strip())
                if len(rest) < n:
                    break
                buf = rest[n:]
                c.sendall(self.reply)
                if self.after == "hang":
                    while not self.stop.wait(0.2):
                        pass
                    return

    def close(self):
        self.stop.set()
        self.t.join(5)
        for c in self.conns:
            c.close()
        self.srv.close()


def chat_request(body=CHAT):
    b = json.dumps(body).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(b)).encode() + b"\r\n\r\n" + b)


def test_response_head_is_sent_before_a_slow_body(vsr):
    be = RawBackend(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                    after="hang")
    try:
        port = free_port()
        vsr(config_yaml(port, [model_yaml("m", [be.endpoint])], listener_extra="    timeout: 4s"), port=port)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(chat_request())
        start = time.monotonic()
        head, rest = read_head(s, 3)   # well before the 4 s idle timeout cuts the stream
        assert head.startswith("HTTP/1.1 200"), head
        assert "transfer-encoding: chunked" in head.lower()
        assert time.monotonic() - start < 3
        # the backend hangs: the stream is cut at the idle timeout, never ended cleanly
        data, closed = read_to_close(s, 20)
        s.close()
        assert closed
        assert not (rest + data).endswith(b"0\r\n\r\n")
    finally:
        be.close()


def test_204_and_304_are_relayed_without_content_length(vsr):
    for reply, status in ((b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nx-b: 1\r\n\r\n", "204"),
                          (b"HTTP/1.1 304 Not Modified\r\ncontent-length: 42\r\nx-b: 1\r\n\r\n", "304")):
        be = RawBackend(reply)
        try:
            port = free_port()
            v = vsr(config_yaml(port, [model_yaml("m", [be.endpoint])]), port=port)
            s = socket.create_connection(("127.0.0.1", port))
            for _ in range(2):   # the connection stays usable: no body was expected or sent
                s.sendall(chat_request())
                head, rest = read_head(s, 5)
                assert head.startswith("HTTP/1.1 " + status), head
                assert "x-b: 1" in head.lower()
                assert "content-length" not in head.lower(), head
                assert "transfer-encoding" not in head.lower(), head
                assert rest == b""
            s.close()
            st, h, _ = curl("--http2-prior-knowledge", v.url + "/v1/chat/completions", "-H",
                            "content-type: application/json", "--data-binary", json.dumps(CHAT))
            assert st == ["HTTP/2 " + status], st
            assert "content-length" not in h and h["x-b"] == "1", h
        finally:
            be.close()
