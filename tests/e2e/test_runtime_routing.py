"""Routing on a model-backed signal end to end: vsr serve with an embeddings
signal, its runtime either supervised by vsr (`vsr runtime serve --embedder
hash` as a child) or started by the test and named by
global.model_catalog.runtime.endpoint.  Covers routing by similarity, the
child killed or frozen under load (every request answered, on_error decides,
the child comes back, /ready follows it), many requests waiting on a slow
runtime while rule-only requests on the same worker are answered, a client
that leaves while its request waits (its runtime call is cancelled), and the
configuration errors of the family."""
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import httpx
import pytest

from conftest import VSR_BIN, ENV, Proc, free_port, wait_until

CANDIDATE = "how do I sort a list in python"


def doc(port, backend, runtime, decision_extra="", timeout="20s"):
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: {timeout}}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: coder, backend_refs: [{{endpoint: "{backend}"}}]}}
routing:
  signals:
    embeddings:
      - name: code
        threshold: 0.6
        aggregation_method: max
        candidates: ["{CANDIDATE}", "write a function in rust"]
  decisions:
    - name: code
      rules: {{operator: AND, conditions: [{{type: embedding, name: code{decision_extra}}}]}}
      modelRefs: [{{model: coder}}]
recipes:
  - name: quick
    routing:
      signals:
        keywords: [{{name: hi, keywords: [hello]}}]
      decisions:
        - {{name: greet, rules: {{type: keyword, name: hi}}, modelRefs: [{{model: coder}}]}}
entrypoints:
  - {{model_names: [quick], recipe: quick}}
global:
  services:
    management_api: {{port: {free_port()}}}
  model_catalog:
    runtime:
{runtime}
"""


def chat(v, text, model="auto", timeout=30):
    with httpx.Client(base_url=v.url, timeout=timeout) as c:
        return c.post("/v1/chat/completions", headers={"x-vsr-debug": "true"},
                      json={"model": model, "messages": [{"role": "user", "content": text}]})


def child_pids(v):
    return [int(p) for p in re.findall(r"started the model runtime \(pid (\d+)\)", v.proc.output())]


@pytest.fixture
def ext_runtime(tmp_path):
    """A runtime the test starts itself (engine mode, not vsr's child)."""
    started = []
    sockdir = pathlib.Path(tempfile.mkdtemp(prefix="vsrrr", dir="/tmp"))

    def start(*args, tcp=False):
        if tcp:
            port = free_port()
            where = ["--listen", f"127.0.0.1:{port}"]
            endpoint = f"http://127.0.0.1:{port}"
        else:
            sock = sockdir / f"rt{len(started)}.sock"
            where = ["--socket", str(sock)]
            endpoint = f"unix://{sock}"
        proc = Proc([VSR_BIN, "runtime", "serve", *where, "--embedder", "hash", *args], tmp_path,
                    f"extrt-{len(started)}")
        started.append(proc)
        if tcp:
            tr = httpx.HTTPTransport()
            base = endpoint
        else:
            tr = httpx.HTTPTransport(uds=str(sock))
            base = "http://runtime"
        proc.http = httpx.Client(transport=tr, base_url=base, timeout=10)

        def up():
            assert proc.p.poll() is None, proc.output()
            try:
                return proc.http.get("/health/live").status_code == 200
            except httpx.TransportError:
                return False
        wait_until(up, what="runtime up")
        proc.endpoint = endpoint
        return proc

    yield start
    for proc in started:
        proc.http.close()
        proc.stop()
    for proc in started:
        proc.assert_clean_exit()


def test_embedding_signal_routes_through_the_managed_runtime(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "      embedder: hash\n"), workers=1, port=port)
    r = chat(v, CANDIDATE)
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-model"] == "coder"
    assert r.headers["x-vsr-selected-decision"] == "code"
    assert r.headers["x-vsr-matched-embeddings"] == "code"
    # shares most words with a candidate: still above the threshold (the candidates are cached by now)
    r = chat(v, "how do I sort a list in python quickly")
    assert r.headers["x-vsr-selected-model"] == "coder"
    assert 0.6 <= float(r.headers["x-vsr-selected-confidence"]) < 1.0
    r = chat(v, "what is the weather like in Lisbon tomorrow")
    assert r.status_code == 200
    assert r.headers["x-vsr-selected-model"] == "general"
    assert "x-vsr-matched-embeddings" not in r.headers
    out = v.proc.output()
    assert len(child_pids(v)) == 1
    # the child's own log, in vsr's at its level, prefixed once
    assert "[runtime] child: serving " in out and "[runtime] [runtime]" not in out


def test_killed_child_degrades_per_on_error_and_comes_back(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "      embedder: hash\n      timeout: 2s\n"), workers=2, port=port)
    pid = child_pids(v)[0]
    results, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            try:
                r = chat(v, CANDIDATE, timeout=20)
                results.append((r.status_code, r.headers.get("x-vsr-selected-model")))
            except httpx.HTTPError as e:  # an unanswered request fails the test below
                results.append((repr(e), None))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(results) >= 20, timeout=30, what="load before the kill")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len(child_pids(v)) >= 2, timeout=30, what="the supervisor starting a new child")
    wait_until(lambda: httpx.get(v.url + "/ready", timeout=5).status_code == 200, timeout=30,
               what="/ready after the restart")
    n = len(results)
    wait_until(lambda: len(results) >= n + 20, timeout=30, what="load after the restart")
    stop.set()
    for t in threads:
        t.join(30)
    assert all(s == 200 for s, _ in results), [r for r in results if r[0] != 200][:5]
    models = [m for _, m in results]
    assert set(models) <= {"coder", "general"}  # general: the signal was unknown (on_error no_match)
    assert models[-5:] == ["coder"] * 5          # routed by the new child again
    assert child_pids(v)[1] != pid


def test_ready_follows_a_frozen_child_and_on_error_match(vsr, fakellm):
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "      embedder: hash\n      timeout: 1s\n", decision_extra=", on_error: match"),
            workers=1, port=port)
    pid = child_pids(v)[0]
    os.kill(pid, signal.SIGSTOP)  # alive but silent: the probes fail, the calls time out
    try:
        t0 = time.monotonic()
        r = chat(v, "nothing like any candidate", timeout=20)
        assert r.status_code == 200
        assert time.monotonic() - t0 < 10                   # bounded by the runtime timeout, not the listener's
        assert r.headers["x-vsr-selected-model"] == "coder"  # unknown + on_error: match
        wait_until(lambda: httpx.get(v.url + "/ready", timeout=5).status_code == 503, timeout=30,
                   what="/ready 503 while the runtime is down")
        body = httpx.get(v.url + "/ready", timeout=5)
        assert body.status_code == 200 or "model runtime" in body.text
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    wait_until(lambda: len(child_pids(v)) >= 2, timeout=30, what="the frozen child replaced")
    wait_until(lambda: httpx.get(v.url + "/ready", timeout=5).status_code == 200, timeout=30, what="/ready again")
    r = chat(v, "nothing like any candidate")
    assert r.headers["x-vsr-selected-model"] == "general"  # computed again: no match


def test_waiting_requests_do_not_block_rule_only_ones_on_the_worker(vsr, fakellm, ext_runtime):
    be = fakellm("be")
    rt = ext_runtime("--test-delay-ms", "3000", "--threads", "32")
    port = free_port()
    v = vsr(doc(port, be.endpoint, f"      endpoint: {rt.endpoint}\n"), workers=1, port=port)
    slow = []

    def one():
        t0 = time.monotonic()
        r = chat(v, CANDIDATE, timeout=60)
        slow.append((r.status_code, r.headers.get("x-vsr-selected-model"), time.monotonic()))

    threads = [threading.Thread(target=one) for _ in range(24)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the slow ones are waiting on the runtime now
    fast_done = []
    for _ in range(10):
        t0 = time.monotonic()
        r = chat(v, "hello there", model="quick")
        assert r.status_code == 200 and r.headers["x-vsr-selected-decision"] == "greet"
        fast_done.append(time.monotonic())
        assert fast_done[-1] - t0 < 2.0
    for t in threads:
        t.join(60)
    assert len(slow) == 24 and all(s == 200 and m == "coder" for s, m, _ in slow), slow
    assert max(fast_done) < min(t for _, _, t in slow)  # served while every slow one still waited


def test_client_gone_cancels_its_runtime_call(vsr, fakellm, ext_runtime):
    be = fakellm("be")
    rt = ext_runtime("--test-delay-ms", "2500", "--threads", "16")
    port = free_port()
    v = vsr(doc(port, be.endpoint, f"      endpoint: {rt.endpoint}\n"), workers=1, port=port)
    body = ('{"model":"auto","messages":[{"role":"user","content":"%s"}]}' % CANDIDATE).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: %d\r\n\r\n" % len(body)) + body
    socks = []
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(req)
        socks.append(s)
    time.sleep(0.5)
    for s in socks:  # gone for good: a reset (a FIN would do as well)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    time.sleep(3.5)  # the runtime has finished the work by now

    def conns():
        text = rt.http.get("/metrics").text
        return float(re.search(r"^vsr_runtime_connections ([0-9.]+)$", text, re.M).group(1))
    # a cancelled call closes its connection; calls left to finish would have gone back to vsr's idle pool
    wait_until(lambda: conns() <= 1, timeout=10, what="the cancelled calls' connections closed")
    r = chat(v, CANDIDATE)
    assert r.status_code == 200 and r.headers["x-vsr-selected-model"] == "coder"


def test_external_runtime_over_tcp(vsr, fakellm, ext_runtime):
    be = fakellm("be")
    rt = ext_runtime(tcp=True)
    port = free_port()
    v = vsr(doc(port, be.endpoint, f"      endpoint: {rt.endpoint}\n"), workers=2, port=port)
    assert chat(v, CANDIDATE).headers["x-vsr-selected-model"] == "coder"
    assert chat(v, "the weather in Lisbon").headers["x-vsr-selected-model"] == "general"
    assert not child_pids(v)


def test_managed_runtime_needs_an_installed_model(tmp_path, fakellm):
    be = fakellm("be")
    path = tmp_path / "c.yaml"
    path.write_text(doc(free_port(), be.endpoint, "      threads: 2\n"))
    empty = tmp_path / "models"
    empty.mkdir()
    p = subprocess.run([VSR_BIN, "serve", "--config", str(path), "--metrics-listen", "off"],
                       env=dict(ENV, VSR_MODEL_CACHE=str(empty)), capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "global.model_catalog.runtime.model" in p.stderr and "scripts/setup-deps" in p.stderr


@pytest.mark.parametrize("field,needle", [
    ("threshold: 2", "threshold"),
    ("aggregation_method: median", "aggregation_method"),
    ("image_candidates: [x]", "image_candidates is not supported yet"),
    ("min_score_threshold: 1.5", "min_score_threshold"),
    ("candidates: []", "candidates"),
    ("query_modality: image", "query_modality"),
])
def test_embedding_field_errors_name_their_place(tmp_path, field, needle):
    text = f"""version: v0.3
providers:
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
routing:
  signals:
    embeddings:
      - name: e
        threshold: 0.5
        candidates: [a]
        {field}
"""
    text = text.replace("        threshold: 0.5\n        threshold: 2\n", "        threshold: 2\n")
    text = text.replace("        candidates: [a]\n        candidates: []\n", "        candidates: []\n")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert re.search(re.escape(str(path)) + r":\d+:\d+: .*" + re.escape(needle), p.stderr), p.stderr


def test_bad_runtime_endpoint_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""version: v0.3
providers:
  models:
    - {name: m, backend_refs: [{endpoint: "127.0.0.1:9"}]}
global:
  model_catalog:
    runtime: {endpoint: "http://runtime.example:8100"}
""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2
    assert re.search(r":7:\d+: endpoint must be unix:///", p.stderr), p.stderr



def socket_of(v):
    """The managed child's socket, as vsr names it in its log."""
    m = re.search(r"starting the model runtime on (\S+)", v.proc.output())
    assert m, v.proc.output()
    return pathlib.Path(m.group(1))


def test_managed_runtime_socket_is_in_a_private_directory(vsr, fakellm):
    be = fakellm("be")
    base = pathlib.Path(tempfile.mkdtemp(prefix="vsrx", dir="/tmp"))  # short: a socket path holds 107 bytes
    try:
        started = []
        for env in ({"XDG_RUNTIME_DIR": str(base)}, {"XDG_RUNTIME_DIR": "", "TMPDIR": str(base)}):
            port = free_port()
            v = vsr(doc(port, be.endpoint, "      embedder: hash\n"), workers=1, port=port, env=env)
            sock = socket_of(v)
            assert sock.parent.parent == base
            assert str(v.proc.p.pid) not in sock.name and str(v.proc.p.pid) not in sock.parent.name
            st = sock.parent.stat()
            assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.getuid()  # nobody else can bind or connect
            assert sock.is_socket()
            assert chat(v, CANDIDATE).headers["x-vsr-selected-model"] == "coder"
            started.append((v, sock))
        assert started[0][1].parent != started[1][1].parent  # a fresh directory each time
        for v, sock in started:  # the directory goes with vsr
            assert v.proc.stop() == 0
            assert not sock.parent.exists()
        assert list(base.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_socket_served_by_another_process_is_refused(vsr, fakellm):
    """Another process serving the child's socket (here, the test, which may
    enter the directory) gets no prompt: the call fails as the runtime's
    failure (on_error), it is not sent to whoever answers."""
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint, "      embedder: hash\n"), workers=1, port=port)
    sock = socket_of(v)
    sock.unlink()
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(str(sock))
    squatter.listen(64)
    received, accepted, stop = [], [], threading.Event()

    def serve():
        squatter.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = squatter.accept()
            except socket.timeout:
                continue
            accepted.append(c)
            c.settimeout(0.5)
            try:
                data = c.recv(65536)
            except socket.timeout:
                continue
            if data:
                received.append(data)
                c.sendall(b'HTTP/1.1 200 OK\r\ncontent-length: 14\r\n\r\n{"results":[]}')

    t = threading.Thread(target=serve)
    t.start()
    try:
        r = chat(v, "my social security number is 078-05-1120, how do I sort a list in python")
        assert r.status_code == 200, r.text
        assert r.headers["x-vsr-selected-model"] == "general"  # the signal failed: on_error no_match
        wait_until(lambda: httpx.get(v.url + "/ready", timeout=5).status_code == 503, timeout=30,
                   what="/ready 503: the answers on the socket are not the child's")
        assert accepted  # it was connected to ...
        assert received == []  # ... and sent nothing
        assert "is served by process" in v.proc.output()
    finally:
        stop.set()
        t.join(10)
        for c in accepted:
            c.close()
        squatter.close()
