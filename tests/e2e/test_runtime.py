"""The model runtime (`vsr runtime serve`, docs/runtime.md) end to end, over
its Unix socket: /v1/bundle and its results by id, the limits of the API
(tasks, body, queue), deadlines, errors, /v1/embeddings, the embedding cache
in /metrics, remote embeddings against fakellm, and a clean SIGTERM."""
import base64
import http.server
import json
import math
import re
import shutil
import socket
import struct
import tempfile
import threading
import time
import pathlib

import httpx
import pytest

from conftest import Proc, SANITIZER_MARKS, USE_MODEL, VSR_BIN, require, wait_until


class Runtime:
    def __init__(self, proc, sock):
        self.proc, self.sock = proc, sock
        self.c = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://runtime", timeout=30)

    def bundle(self, tasks, **options):
        body = {"tasks": tasks}
        if options:
            body["options"] = options
        return self.c.post("/v1/bundle", json=body)

    def metric(self, name):
        text = self.c.get("/metrics").text
        m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", text, re.M)
        assert m, f"{name} not in /metrics:\n{text}"
        return float(m.group(1))

    def raw(self, data, read_timeout=10.0):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(read_timeout)
        s.connect(str(self.sock))
        try:
            s.sendall(data)
            out = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, socket.timeout):
                    break
                if not chunk:
                    break
                out += chunk
            return out
        finally:
            s.close()


@pytest.fixture
def runtime(tmp_path):
    started = []
    # a short directory: a Unix socket path holds at most 107 bytes
    sockdir = pathlib.Path(tempfile.mkdtemp(prefix="vsrrt", dir="/tmp"))

    def start(*args, env=None, wait=True):
        sock = sockdir / f"rt{len(started)}.sock"
        proc = Proc([VSR_BIN, "runtime", "serve", "--socket", str(sock), *args], tmp_path,
                    f"runtime-{len(started)}", env=env)
        rt = Runtime(proc, sock)
        rt.checked_by_test = not wait
        started.append(rt)
        if wait:
            def up():
                if proc.p.poll() is not None:
                    return True
                try:
                    return rt.c.get("/health/live").status_code == 200
                except httpx.TransportError:
                    return False
            wait_until(up, timeout=20, what="the runtime's socket")
            assert proc.p.poll() is None, proc.output()
        return rt

    yield start
    for rt in started:
        rt.c.close()
        rt.proc.stop()
    for rt in started:
        if rt.checked_by_test:  # a refused start: the test checks the exit code
            out = rt.proc.log_path.read_text(errors="replace")
            assert not any(m in out for m in SANITIZER_MARKS), out
        else:
            rt.proc.assert_clean_exit()
    shutil.rmtree(sockdir, ignore_errors=True)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_bundle_answers_every_task_by_id_in_order(runtime):
    rt = runtime("--embedder", "hash")
    r = rt.bundle([
        {"id": "q", "embed": {"input": ["how do I sort a list", "sort a list"]}},
        {"id": "c", "classify": {"model": "domain", "text": "x"}},
        {"id": "u", "translate": {"text": "x"}},
        {"id": "n"},
        {"id": "m", "embed": {"input": "x", "model": "no-such-model"}},
        {"id": "e", "embed": {"input": []}},
    ], deadline_ms=5000)
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["id"] for x in res] == ["q", "c", "u", "n", "m", "e"]
    q = res[0]["embed"]
    assert q["model"] == "hash-512" and q["dim"] == 512 and q["cached"] == [False, False]
    assert len(q["embeddings"]) == 2 and all(len(v) == 512 for v in q["embeddings"])
    assert all(abs(norm(v) - 1) < 1e-5 for v in q["embeddings"])
    assert q["embeddings"][0] != q["embeddings"][1]
    # no classifier is loaded: the task names a model this runtime does not serve
    assert res[1]["error"]["code"] == "model_not_found" and "domain" in res[1]["error"]["message"]
    assert res[2]["error"]["code"] == "unknown_task"
    assert res[3]["error"]["code"] == "invalid_task"
    assert res[4]["error"]["code"] == "model_not_found"
    assert res[5]["error"]["code"] == "invalid_task" and "empty" in res[5]["error"]["message"]
    st = r.headers["server-timing"]
    assert re.fullmatch(r"queue;dur=\d+\.\d{3}, compute;dur=\d+\.\d{3}", st), st


def test_hash_embedder_is_deterministic_and_shares_words(runtime):
    rt = runtime("--embedder", "hash", "--cache-entries", "0")
    a = rt.bundle([{"id": "a", "embed": {"input": ["Sort a list", "sort A LIST!", "bake bread"]}}]).json()
    v = a["results"][0]["embed"]["embeddings"]
    assert v[0] == v[1]  # case and punctuation do not matter
    dot = sum(x * y for x, y in zip(v[0], v[2]))
    assert abs(dot) < 0.5


def test_bundle_limits_tasks(runtime):
    rt = runtime("--embedder", "hash")
    ok = rt.bundle([{"id": str(i), "embed": {"input": "x"}} for i in range(64)])
    assert ok.status_code == 200 and len(ok.json()["results"]) == 64
    r = rt.bundle([{"id": str(i), "embed": {"input": "x"}} for i in range(65)])
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "too_many_tasks"
    r = rt.bundle([{"id": "a", "embed": {"input": ["x"] * 2048}}, {"id": "b", "embed": {"input": "y"}}])
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_many_inputs"
    rt2 = runtime("--embedder", "hash", "--max-tasks", "2")
    assert rt2.bundle([{"id": str(i), "embed": {"input": "x"}} for i in range(3)]).status_code == 413


def test_body_over_8_mib_is_413(runtime):
    rt = runtime("--embedder", "hash")
    head = (b"POST /v1/bundle HTTP/1.1\r\nhost: rt\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % (8 * 1024 * 1024 + 1))
    out = rt.raw(head)
    assert out.startswith(b"HTTP/1.1 413"), out[:200]
    assert b'"code":"request_too_large"' in out
    # exactly 8 MiB is read and served
    pre, post = b'{"tasks":[{"id":"a","embed":{"input":"', b'"}}]}'
    body = pre + b"a" * (8 * 1024 * 1024 - len(pre) - len(post)) + post
    assert len(body) == 8 * 1024 * 1024
    r = rt.c.post("/v1/bundle", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text[:300]


def test_request_errors_have_the_runtime_error_shape(runtime):
    rt = runtime("--embedder", "hash")
    cases = [
        (rt.c.post("/v1/bundle", content=b"{nope"), 400, "invalid_json"),
        (rt.c.post("/v1/bundle", content=b'{"tasks":[],"tasks":[]}'), 400, "invalid_json"),
        (rt.c.post("/v1/bundle", json=[1]), 400, "invalid_request"),
        (rt.c.post("/v1/bundle", json={"tasks": {}}), 400, "invalid_request"),
        (rt.c.post("/v1/bundle", json={"tasks": []}), 400, "invalid_request"),
        (rt.c.post("/v1/bundle", json={"tasks": [{"embed": {"input": "x"}}]}), 400, "invalid_request"),
        (rt.c.post("/v1/bundle", json={"tasks": [{"id": "a", "embed": {"input": "x"}},
                                                 {"id": "a", "embed": {"input": "y"}}]}), 400, "invalid_request"),
        (rt.bundle([{"id": "a", "embed": {"input": "x"}}], deadline_ms=-1), 422, "invalid_input"),
        (rt.c.get("/v1/nothing"), 404, "not_found"),
        (rt.c.get("/v1/bundle"), 405, "method_not_allowed"),
        (rt.c.post("/v1/classify", json={"text": "x"}), 400, "invalid_request"),
        (rt.c.post("/v1/classify", json={"model": "domain", "text": "x"}), 404, "model_not_found"),
        (rt.c.post("/v1/classify", json={"model": "domain", "text": ""}), 422, "invalid_input"),
        (rt.c.post("/v1/decisions", json={}), 501, "not_supported"),
        (rt.c.post("/v1/rerank", json={}), 501, "not_supported"),
        (rt.c.post("/v1/embeddings", json={"input": "x", "model": "gpt-9"}), 404, "model_not_found"),
        (rt.c.post("/v1/embeddings", json={"input": ""}), 422, "invalid_input"),
        (rt.c.post("/v1/embeddings", json={"input": [1, 2]}), 422, "invalid_input"),
        (rt.c.post("/v1/embeddings", json={"input": ["x"] * 2049}), 422, "invalid_input"),
        (rt.c.post("/v1/embeddings", json={"input": "x", "encoding_format": "int8"}), 422, "invalid_input"),
        (rt.c.post("/v1/embeddings", json={"model": "hash-512"}), 400, "invalid_request"),
    ]
    for r, status, code in cases:
        assert r.status_code == status, (r.request.url, r.text)
        err = r.json()["error"]
        assert err["code"] == code and err["message"], r.text
    assert rt.c.get("/v1/bundle").headers["allow"] == "POST"
    # the connection survives a refused request
    assert rt.c.get("/health").json()["status"] == "ok"


def test_embeddings_openai_shape_float_and_base64(runtime):
    rt = runtime("--embedder", "hash")
    r = rt.c.post("/v1/embeddings", json={"input": ["hello world", "good bye"], "model": "hash-512"})
    assert r.status_code == 200
    j = r.json()
    assert j["object"] == "list" and j["model"] == "hash-512"
    assert [d["index"] for d in j["data"]] == [0, 1]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 512 for d in j["data"])
    assert j["usage"]["prompt_tokens"] == 4 and j["usage"]["total_tokens"] == 4
    assert "server-timing" in r.headers
    b = rt.c.post("/v1/embeddings", json={"input": "hello world", "encoding_format": "base64"}).json()
    raw = base64.b64decode(b["data"][0]["embedding"])
    vec = struct.unpack("<512f", raw)
    assert all(abs(x - y) < 1e-6 for x, y in zip(vec, j["data"][0]["embedding"]))
    models = rt.c.get("/v1/models").json()
    assert models["data"][0]["id"] == "hash-512" and models["data"][0]["dim"] == 512


def test_cache_hits_show_in_metrics(runtime):
    rt = runtime("--embedder", "hash", "--cache-entries", "2")
    first = rt.bundle([{"id": "a", "embed": {"input": ["one", "two"]}}]).json()["results"][0]["embed"]
    again = rt.bundle([{"id": "a", "embed": {"input": ["two", "one"]}}]).json()["results"][0]["embed"]
    assert first["cached"] == [False, False] and again["cached"] == [True, True]
    assert again["embeddings"] == first["embeddings"][::-1]
    assert rt.metric("vsr_runtime_embedding_cache_hits_total") == 2
    assert rt.metric("vsr_runtime_embedding_cache_misses_total") == 2
    assert rt.metric("vsr_runtime_embedding_cache_hit_ratio") == 0.5
    assert rt.metric("vsr_runtime_embedding_cache_entries") == 2
    rt.bundle([{"id": "a", "embed": {"input": "three"}}])  # bound of 2: evicts the least recent ("two")
    assert rt.metric("vsr_runtime_embedding_cache_entries") == 2
    assert rt.metric("vsr_runtime_embedding_cache_evictions_total") == 1
    assert rt.bundle([{"id": "a", "embed": {"input": ["one", "two"]}}]).json()["results"][0]["embed"]["cached"] == \
        [True, False]
    # no cache: every lookup is computed
    rt0 = runtime("--embedder", "hash", "--cache-bytes", "0")
    rt0.bundle([{"id": "a", "embed": {"input": "one"}}])
    r = rt0.bundle([{"id": "a", "embed": {"input": "one"}}]).json()
    assert r["results"][0]["embed"]["cached"] == [False]


def test_queue_full_is_429(runtime):
    rt = runtime("--embedder", "hash", "--threads", "1", "--queue", "2", "--test-delay-ms", "5000")
    # three work items never fit a queue of two, whatever the thread is doing
    r = rt.bundle([{"id": str(i), "embed": {"input": str(i)}} for i in range(3)])
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "queue_full" and r.headers["retry-after"] == "1"
    # two items fill it while the thread sleeps on the first: the next bundle does not fit
    results = {}
    t = threading.Thread(target=lambda: results.update(
        a=rt.bundle([{"id": "a", "embed": {"input": "a"}}, {"id": "b", "embed": {"input": "b"}}])))
    t.start()
    other = httpx.Client(transport=httpx.HTTPTransport(uds=str(rt.sock)), base_url="http://runtime", timeout=30)
    try:
        wait_until(lambda: "vsr_runtime_queue_depth 1" in other.get("/metrics").text, timeout=10,
                   what="one item running and one waiting")
        r2 = other.post("/v1/bundle", json={"tasks": [{"id": "x", "embed": {"input": "x"}},
                                                      {"id": "y", "embed": {"input": "y"}}]})
        assert r2.status_code == 429
        assert re.search(r"^vsr_runtime_rejected_total 2$", other.get("/metrics").text, re.M)
    finally:
        other.close()
        t.join(30)
    assert results["a"].status_code == 200
    assert [x["id"] for x in results["a"].json()["results"]] == ["a", "b"]


def test_task_past_its_deadline_is_dropped_not_computed(runtime):
    rt = runtime("--embedder", "hash", "--threads", "1", "--test-delay-ms", "4000")
    r = rt.bundle([{"id": "first", "embed": {"input": "a"}}, {"id": "late", "embed": {"input": "b"}}],
                  deadline_ms=2000)
    assert r.status_code == 200
    res = {x["id"]: x for x in r.json()["results"]}
    assert "embed" in res["first"]
    assert res["late"]["error"]["code"] == "deadline_exceeded"
    text = rt.c.get("/metrics").text
    assert re.search(r'^vsr_runtime_tasks_total\{type="embed",result="deadline_exceeded"\} 1$', text, re.M)
    assert re.search(r"^vsr_runtime_compute_seconds_count 1$", text, re.M)  # the late one never ran
    # it was not computed, so not cached either
    assert rt.metric("vsr_runtime_embedding_cache_entries") == 1


def test_slow_head_gets_408(runtime):
    rt = runtime("--embedder", "hash", "--header-timeout-ms", "300")
    t0 = time.monotonic()
    out = rt.raw(b"POST /v1/bundle HTTP/1.1\r\nhost: rt\r\n")
    assert out.startswith(b"HTTP/1.1 408"), out
    assert time.monotonic() - t0 < 8


def test_slow_body_gets_408(runtime):
    rt = runtime("--embedder", "hash", "--body-timeout-ms", "300")
    out = rt.raw(b"POST /v1/bundle HTTP/1.1\r\nhost: rt\r\ncontent-length: 100\r\n\r\n{")
    assert out.startswith(b"HTTP/1.1 408"), out


def test_keep_alive_and_pipelining(runtime):
    rt = runtime("--embedder", "hash")
    req = b"GET /health/live HTTP/1.1\r\nhost: rt\r\n\r\n"
    last = b"GET /health HTTP/1.1\r\nhost: rt\r\nconnection: close\r\n\r\n"
    out = rt.raw(req * 3 + last)
    assert out.count(b"HTTP/1.1 200") == 4
    assert out.endswith(b'{"status":"ok","models":3}')  # the embedder, the jailbreak and pii classifiers


class _EmbedHandler(http.server.BaseHTTPRequestHandler):
    seen = []
    dup_index = False

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _EmbedHandler.seen.append((self.path, self.headers.get("authorization"), body))
        data = [{"object": "embedding", "index": 0 if _EmbedHandler.dup_index else i,
                 "embedding": [0.5, -0.5, 0.5, -0.5]} for i in range(len(body["input"]))]
        out = json.dumps({"object": "list", "data": data, "model": body["model"],
                          "usage": {"prompt_tokens": 7, "total_tokens": 7}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


def test_remote_embeddings_from_fakellm(runtime, fakellm):
    be = fakellm()
    rt = runtime("--remote-embeddings", be.url + "/v1", "--remote-model", "gte-remote", "--embedder", "hash")
    models = [m["id"] for m in rt.c.get("/v1/models").json()["data"] if m["task"] == "embed"]
    assert models == ["gte-remote", "hash-512"]  # the first named is the default
    r = rt.bundle([{"id": "r", "embed": {"input": ["alpha beta", "gamma"]}},
                   {"id": "h", "embed": {"input": "alpha beta", "model": "hash-512"}}])
    res = r.json()["results"]
    assert res[0]["embed"]["model"] == "gte-remote" and res[0]["embed"]["dim"] == 16
    e = rt.c.post("/v1/embeddings", json={"input": "gamma"}).json()
    direct = httpx.post(be.url + "/v1/embeddings", json={"input": ["alpha beta", "gamma"], "model": "gte-remote"},
                        timeout=10).json()
    for got, want in zip(res[0]["embed"]["embeddings"], direct["data"]):
        assert all(abs(a - b) < 1e-6 for a, b in zip(got, want["embedding"]))
    assert res[1]["embed"]["dim"] == 512
    assert e["model"] == "gte-remote" and e["data"][0]["embedding"] == res[0]["embed"]["embeddings"][1]
    log = httpx.get(be.url + "/_fakellm/log", timeout=5).json()["entries"][:-1]  # not the direct call
    # the dimension probe and one call: the /v1/embeddings call was a cache hit
    assert [x["path"] for x in log] == ["/v1/embeddings"] * 2 and all(x["model"] == "gte-remote" for x in log)


def test_remote_embeddings_errors_are_per_task(runtime, fakellm):
    be = fakellm()
    rt = runtime("--remote-embeddings", be.url + "/v1", "--remote-model", "m", "--remote-dim", "16")
    httpx.get(be.url + "/_fakellm/log", timeout=5)
    r = rt.bundle([{"id": "r", "embed": {"input": "x"}}])
    assert "embed" in r.json()["results"][0]
    # the backend fails: the task says so, the bundle still answers
    be.proc.stop()
    be.proc.assert_clean_exit()
    r = rt.bundle([{"id": "r", "embed": {"input": "not cached"}}])
    assert r.status_code == 200
    err = r.json()["results"][0]["error"]
    assert err["code"] == "embedding_failed" and "connect" in err["message"]
    e = rt.c.post("/v1/embeddings", json={"input": "not cached either"})
    assert e.status_code == 500 and e.json()["error"]["code"] == "embedding_failed"


def test_remote_embeddings_send_the_api_key_from_env(runtime):
    _EmbedHandler.seen = []
    _EmbedHandler.dup_index = False
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EmbedHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/openai/v1/"
        rt = runtime("--remote-embeddings", url, "--remote-model", "text-embedding-3-small",
                     "--remote-api-key-env", "VSR_TEST_EMBED_KEY", env={"VSR_TEST_EMBED_KEY": "sk-test-123"})
        r = rt.c.post("/v1/embeddings", json={"input": ["a", "b"]}).json()
        assert [d["embedding"] for d in r["data"]] == [[0.5, -0.5, 0.5, -0.5]] * 2
        assert r["usage"]["prompt_tokens"] == 7
        path, auth, body = _EmbedHandler.seen[-1]
        assert path == "/openai/v1/embeddings" and auth == "Bearer sk-test-123"
        assert body == {"model": "text-embedding-3-small", "encoding_format": "float", "input": ["a", "b"]}
        # an answer that names one index twice leaves a vector unset: refused
        _EmbedHandler.dup_index = True
        r = rt.c.post("/v1/embeddings", json={"input": ["c", "d"]})
        assert r.status_code == 500 and "index 0 twice" in r.json()["error"]["message"]
    finally:
        srv.shutdown()
        srv.server_close()


def test_remote_embeddings_refuse_https_and_missing_key(runtime, tmp_path):
    rt = runtime("--remote-embeddings", "https://api.example.com/v1", "--remote-model", "m", wait=False)
    assert rt.proc.p.wait(20) == 1
    assert "https:// is not supported" in rt.proc.output()
    rt2 = runtime("--remote-embeddings", "http://127.0.0.1:9/v1", "--remote-model", "m", "--remote-dim", "8",
                  "--remote-api-key-env", "VSR_TEST_NO_SUCH_VAR", wait=False)
    assert rt2.proc.p.wait(20) == 1
    assert "VSR_TEST_NO_SUCH_VAR" in rt2.proc.output()


def test_usage_errors(runtime):
    # (no model flag at all serves the installed model: test_installed_models.py)
    for args in (["--embedder", "magic"], ["--queue", "x", "--embedder", "hash"],
                 ["--remote-embeddings", "http://127.0.0.1:9"]):
        rt = runtime(*args, wait=False)
        assert rt.proc.p.wait(20) == 64, rt.proc.output()


def test_sigterm_finishes_work_in_flight_and_removes_the_socket(runtime):
    rt = runtime("--embedder", "hash", "--threads", "1", "--test-delay-ms", "3000")
    results = {}
    t = threading.Thread(target=lambda: results.update(r=rt.bundle([{"id": "a", "embed": {"input": "a"}}])))
    t.start()
    other = httpx.Client(transport=httpx.HTTPTransport(uds=str(rt.sock)), base_url="http://runtime", timeout=30)
    try:
        wait_until(lambda: re.search(r"^vsr_runtime_connections 2$", other.get("/metrics").text, re.M) and
                   "vsr_runtime_queue_depth 0" in other.get("/metrics").text, timeout=10,
                   what="the request in flight")
    finally:
        other.close()
    rt.proc.p.send_signal(15)
    t.join(30)
    assert results["r"].status_code == 200 and "embed" in results["r"].json()["results"][0]
    assert rt.proc.p.wait(20) == 0
    assert not rt.sock.exists()


def test_stale_socket_is_replaced_and_live_one_refused(runtime):
    rt = runtime("--embedder", "hash")
    # a second runtime on the same, live, socket: exit 3, the first keeps serving
    clash = Proc([VSR_BIN, "runtime", "serve", "--socket", str(rt.sock), "--embedder", "hash"],
                 rt.proc.log_path.parent, "runtime-clash")
    assert clash.p.wait(20) == 3
    clash.stop()
    assert rt.c.get("/health").status_code == 200
    # a socket file left by a dead process is taken over
    stale = rt.sock.parent / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    p = Proc([VSR_BIN, "runtime", "serve", "--socket", str(stale), "--embedder", "hash"],
             rt.proc.log_path.parent, "runtime-stale")
    c = httpx.Client(transport=httpx.HTTPTransport(uds=str(stale)), base_url="http://runtime", timeout=10)

    def up():
        try:
            return c.get("/health").status_code == 200
        except httpx.TransportError:
            return False
    try:
        wait_until(up, timeout=20, what="the runtime on the stale socket")
    finally:
        c.close()
        p.stop()
    p.assert_clean_exit()


def test_tcp_listen_engine_mode(tmp_path):
    p = Proc([VSR_BIN, "runtime", "serve", "--listen", "127.0.0.1:0", "--embedder", "hash"], tmp_path, "rt-tcp")
    try:
        wait_until(lambda: "listening on" in p.output() or p.p.poll() is not None, what="listening line")
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", p.output())
        assert m, p.output()
        r = httpx.post(f"http://127.0.0.1:{m.group(1)}/v1/embeddings", json={"input": "tcp"}, timeout=10)
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 512
    finally:
        p.stop()
    p.assert_clean_exit()


def test_client_gone_while_its_work_runs(runtime):
    rt = runtime("--embedder", "hash", "--threads", "1", "--test-delay-ms", "800")
    body = json.dumps({"tasks": [{"id": "a", "embed": {"input": "a"}}, {"id": "b", "embed": {"input": "b"}}]})
    for _ in range(3):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(rt.sock))
        s.sendall(b"POST /v1/bundle HTTP/1.1\r\nhost: rt\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body.encode()))
        s.close()  # gone before the answer
    # the work still finishes (and is dropped); the runtime keeps serving
    wait_until(lambda: rt.metric("vsr_runtime_compute_seconds_count") == 6, timeout=30, what="the orphaned work")
    assert rt.c.post("/v1/embeddings", json={"input": "still here"}).status_code == 200
    assert rt.metric("vsr_runtime_connections") == 1


def test_connection_limit(runtime):
    rt = runtime("--embedder", "hash", "--max-connections", "2")
    held = []
    try:
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(rt.sock))
            held.append(s)
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.settimeout(10)
        extra.connect(str(rt.sock))
        try:
            extra.sendall(b"GET /health HTTP/1.1\r\nhost: rt\r\n\r\n")
            got = extra.recv(100)
        except (BrokenPipeError, ConnectionResetError):
            got = b""
        extra.close()
        assert got == b""  # accepted and closed at once
    finally:
        for s in held:
            s.close()
    wait_until(lambda: rt.c.get("/health").status_code == 200, what="a connection once the others closed")


def test_idle_keep_alive_connection_is_closed(runtime):
    rt = runtime("--embedder", "hash", "--idle-timeout-ms", "300")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(rt.sock))
    try:
        s.sendall(b"GET /health/live HTTP/1.1\r\nhost: rt\r\n\r\n")
        out = b""
        t0 = time.monotonic()
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
        assert out.startswith(b"HTTP/1.1 200") and out.endswith(b'{"status":"live"}')
        assert time.monotonic() - t0 < 8  # closed by the runtime, not by our timeout
    finally:
        s.close()


def test_oversized_head_is_431_and_expect_continue_is_answered(runtime):
    rt = runtime("--embedder", "hash")
    out = rt.raw(b"GET /health HTTP/1.1\r\nhost: rt\r\nx-big: " + b"a" * 20000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431"), out[:100]
    body = b'{"input":"continue"}'
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(rt.sock))
    try:
        s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nhost: rt\r\nexpect: 100-continue\r\nconnection: close\r\n"
                  b"content-length: %d\r\n\r\n" % len(body))
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        assert out.startswith(b"HTTP/1.1 200"), out[:200]
    finally:
        s.close()


def test_bodies_held_at_once_are_bounded(runtime):
    rt = runtime("--embedder", "hash", "--max-buffered-bytes", "100000")
    body = json.dumps({"input": "x" * 89980}).encode()
    assert len(body) < 100000
    a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    a.settimeout(10)
    a.connect(str(rt.sock))
    try:
        a.sendall(b"POST /v1/embeddings HTTP/1.1\r\nhost: rt\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
                  % len(body) + body[:80000])
        # the runtime holds 80000 bytes of a's body: another 50000 do not fit the 100000 budget
        other = json.dumps({"input": "y" * 49980}).encode()
        deadline = time.monotonic() + 10
        while True:
            out = rt.raw(b"POST /v1/embeddings HTTP/1.1\r\nhost: rt\r\ncontent-length: %d\r\n\r\n" % len(other)
                         + other)
            if out.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # a's bytes may not all have been read yet
        assert out.startswith(b"HTTP/1.1 503"), out[:200]
        assert b'"code":"overloaded"' in out and b"retry-after: 1" in out
        # a's request completes normally, and the budget is given back
        a.sendall(body[80000:])
        got = b""
        while True:
            chunk = a.recv(65536)
            if not chunk:
                break
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
    finally:
        a.close()
    assert rt.c.post("/v1/embeddings", content=other).status_code == 200


def test_inputs_in_flight_are_bounded(runtime):
    rt = runtime("--embedder", "hash", "--max-queued-inputs", "3")
    r = rt.bundle([{"id": "a", "embed": {"input": ["1", "2"]}}, {"id": "b", "embed": {"input": ["3", "4"]}}])
    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
    e = rt.c.post("/v1/embeddings", json={"input": ["1", "2", "3", "4"]})
    assert e.status_code == 429
    # what fits is served, and its inputs are given back when it is done
    for _ in range(3):
        assert rt.c.post("/v1/embeddings", json={"input": ["1", "2", "3"]}).status_code == 200


def use_model():
    require([USE_MODEL], what="embedding model")
    return str(USE_MODEL)


def test_model_serves_real_sentence_embeddings(runtime):
    rt = runtime("--model", use_model(), "--threads", "2")
    models = rt.c.get("/v1/models").json()["data"]
    assert models[0]["id"] == "use-lite"
    texts = ["What is the capital of France?", "Which city is France's capital?",
             "How do I reverse a linked list in C?", "Write a function that reverses a singly linked list."]
    r = rt.c.post("/v1/embeddings", json={"model": "use-lite", "input": texts})
    assert r.status_code == 200, r.text
    assert "compute;dur=" in r.headers["server-timing"]
    v = [d["embedding"] for d in r.json()["data"]]
    assert all(len(x) == 512 and abs(norm(x) - 1) < 1e-4 for x in v)
    cos = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    # the values the model's own JavaScript runtime gives (docs/runtime.md)
    assert abs(cos(v[0], v[1]) - 0.904) < 0.002
    assert abs(cos(v[2], v[3]) - 0.648) < 0.002
    assert cos(v[0], v[2]) < 0.3
    assert r.json()["usage"]["prompt_tokens"] > 20
    # the bundle path gives the same vectors, and an empty text is the task's own error
    b = rt.bundle([{"id": "a", "embed": {"input": texts[0]}}, {"id": "b", "embed": {"input": "  "}}], deadline_ms=5000)
    assert b.status_code == 200, b.text
    res = {x["id"]: x for x in b.json()["results"]}
    assert max(abs(x - y) for x, y in zip(res["a"]["embed"]["embeddings"][0], v[0])) < 1e-6
    assert "error" in res["b"]
    bad = rt.c.post("/v1/embeddings", json={"model": "use-lite", "input": ""})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"


def test_a_file_that_is_no_model_is_refused_at_start(runtime, tmp_path):
    junk = tmp_path / "junk.vsrm"
    junk.write_bytes(b"not a model" * 100)
    rt = runtime("--model", str(junk), wait=False)
    rt.proc.p.wait(20)
    assert rt.proc.p.returncode not in (0, None)
    assert "not a USE-lite model file" in rt.proc.output()


def test_waiting_work_shares_one_embedding_pass(runtime):
    """Work that waits for the compute thread is taken together when it
    frees: one embed() call computes every waiting bundle's texts (each text
    once), and the answers are the ones each bundle gets alone."""
    args = ("--embedder", "hash", "--classifiers", "domain,pii", "--cache-entries", "0")
    rt = runtime(*args, "--threads", "1", "--test-delay-ms", "4000")
    alone = runtime(*args, "--max-batch", "1")
    bundles = [
        [{"id": "e", "embed": {"input": ["alpha beta", "gamma"]}},
         {"id": "d", "classify": {"model": "domain", "text": "alpha beta"}},
         {"id": "p", "classify": {"model": "pii", "text": "mail me at a@b.example"}}],
        [{"id": "d", "classify": {"model": "domain", "text": "what is the derivative of x squared"}},
         {"id": "e", "embed": {"input": "gamma"}}],
        [{"id": "e", "embed": {"input": "delta"}}],
    ]
    results = {}

    def send(key, tasks):
        c = httpx.Client(transport=httpx.HTTPTransport(uds=str(rt.sock)), base_url="http://runtime", timeout=60)
        try:
            results[key] = c.post("/v1/bundle", json={"tasks": tasks})
        finally:
            c.close()
    threads = [threading.Thread(target=send, args=("first", [{"id": "w", "embed": {"input": "warm up"}}]))]
    threads[0].start()
    # the thread has taken the first item and sleeps on it
    wait_until(lambda: re.search(r"^vsr_runtime_connections 2$", rt.c.get("/metrics").text, re.M) and
               "vsr_runtime_queue_depth 0" in rt.c.get("/metrics").text, timeout=10, what="the first item taken")
    for i, b in enumerate(bundles):
        threads.append(threading.Thread(target=send, args=(i, b)))
        threads[-1].start()
    # 2 + 2 + 1 + the pii task: all wait behind the first
    wait_until(lambda: "vsr_runtime_queue_depth 6" in rt.c.get("/metrics").text, timeout=10,
               what="the bundles queued")
    for t in threads:
        t.join(60)
    assert results["first"].status_code == 200
    # the first item took the five over the embedder along, not the pii task;
    # the texts: warm up, alpha beta, gamma, the question, delta
    assert rt.metric("vsr_runtime_batches_total") == 1
    assert rt.metric("vsr_runtime_batched_tasks_total") == 6
    assert rt.metric("vsr_runtime_batch_passes_total") == 1
    assert rt.metric("vsr_runtime_batch_texts_total") == 5
    assert rt.metric("vsr_runtime_compute_seconds_count") == 7
    for i, b in enumerate(bundles):
        got = results[i]
        assert got.status_code == 200, got.text
        want = alone.bundle(b).json()["results"]
        assert got.json()["results"] == want
    for r in results[0].json()["results"] + results[1].json()["results"]:
        if "embed" in r:
            assert not any(r["embed"]["cached"])
    assert alone.metric("vsr_runtime_batches_total") == 0


def test_max_batch_one_takes_items_alone(runtime):
    rt = runtime("--embedder", "hash", "--threads", "1", "--test-delay-ms", "300", "--max-batch", "1")
    r = rt.bundle([{"id": str(i), "embed": {"input": f"text {i}"}} for i in range(3)])
    assert r.status_code == 200 and len(r.json()["results"]) == 3
    assert rt.metric("vsr_runtime_batches_total") == 0
    assert rt.metric("vsr_runtime_compute_seconds_count") == 3
