"""The benchmark's own parts: bench/config.yaml routes the three bench
requests as docs/performance.md says it does, and bench/run reads wrk's
output, de-chunks streams and computes its intervals correctly.  The
benchmark itself never runs here (it needs nginx, HAProxy and minutes)."""
import importlib.machinery
import importlib.util
import json
import math
import subprocess

from conftest import ROOT, VSR_BIN, echo, free_port


def load_bench():
    loader = importlib.machinery.SourceFileLoader("bench_run", str(ROOT / "bench" / "run"))
    spec = importlib.util.spec_from_loader("bench_run", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


bench = load_bench()


def test_bench_config_validates_as_committed():
    r = subprocess.run([VSR_BIN, "config", "validate", str(ROOT / "bench" / "config.yaml")],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stdout + r.stderr


def test_bench_requests_route_as_documented(vsr, fakellm, tmp_path):
    be = fakellm("bench")
    port = free_port()
    cfg = bench.vsr_conf(tmp_path, "bench", port, be.port)
    v = vsr(cfg.read_text(), workers=1, port=port)
    bodies = bench.make_bodies()
    assert len(bodies["64k"]) == 64 * 1024

    with v.client() as c:
        small = c.post("/v1/chat/completions", content=bodies["small"],
                       headers={"content-type": "application/json"})
        keyword = c.post("/v1/chat/completions", content=bodies["keyword"],
                         headers={"content-type": "application/json"})
        big = c.post("/v1/chat/completions", content=bodies["64k"],
                     headers={"content-type": "application/json"})

    assert small.status_code == 200
    assert "x-vsr-selected-decision" not in small.headers
    assert small.headers["x-vsr-selected-model"] == "bench-small"
    assert json.loads(echo(small)["body"])["messages"][0]["role"] == "user"

    assert keyword.status_code == 200
    assert keyword.headers["x-vsr-selected-decision"] == "code_route"
    sent = json.loads(echo(keyword)["body"])
    assert sent["model"] == "bench-large-upstream"
    assert sent["messages"][0] == {"role": "system", "content": "You are a careful senior engineer. Answer briefly."}

    assert big.status_code == 200
    assert "x-vsr-selected-decision" not in big.headers
    assert len(echo(big)["body"]) >= 64 * 1024 - 16  # relayed whole; only the model name changed


WRK_OUT = """Running 1s test @ http://127.0.0.1:1/v1/chat/completions
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   142.00us   50.00us   2.10ms   90.00%
  Latency Distribution
     50%  131.00us
     75%  150.00us
     90%  180.00us
     99%    1.25ms
  49034 requests in 1.00s, 40.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  49034.12
Transfer/sec:     40.00MB
"""


def test_parse_wrk_reads_percentiles_in_their_units():
    r = bench.parse_wrk(WRK_OUT)
    assert r["rps"] == 49034.12
    assert r["requests"] == 49034
    assert math.isclose(r["p50_ms"], 0.131)
    assert math.isclose(r["p99_ms"], 1.25)
    assert r["non2xx"] == 7
    assert r["socket_errors"] == 3


def test_ci95_uses_student_t():
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]  # sd 1.5811, n 5: t(4) = 2.776
    assert math.isclose(bench.ci95(xs), 2.776 * 1.5811388 / math.sqrt(5), rel_tol=1e-3)
    assert math.isnan(bench.ci95([3.0]))


def test_dechunk_joins_chunks_split_anywhere():
    raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\ndata\r\na;x=1\r\n: {}\n\nda\r\n\r\n0\r\n\r\n"
    assert bench.dechunk(raw) == b"data: {}\n\nda\r\n"
