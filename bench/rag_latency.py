#!/usr/bin/env python3
"""What the rag plugin adds to a chat request, end to end through vsr: p50/p99 of the client's wall time at one
client, for the same request routed to

  plain   a decision without plugins (the baseline),
  rag     a decision whose rag plugin asks an Elasticsearch-shaped backend (external_api) and injects as tool_role,
  cached  the same with cache_results (every request after the first is a cache hit: vsr's own cost),

interleaved one request of each kind per round, each kind on its own keep-alive connection.  The backend is
tests/e2e/rag_server.py's stand-in (Python, on loopback); its own round trip, asked directly by this script on a
keep-alive connection, is printed too, so what vsr adds on top of the backend can be told apart.

usage: bench/rag_latency.py [--vsr build/vsr] [--fakellm build/fakellm] [--requests N]

Not a test: no pass/fail.  The machine may be shared: compare the ratios to the baseline of the same run."""
import argparse
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from rag_server import RagServer  # noqa: E402

DOCS = ["Paris is the capital of France. " * 8, "The Seine flows through Paris. " * 8, "Lyon is on the Rhone. " * 8]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def doc(port, backend, mgmt, rag_url):
    def plugin(cache):
        return ("      plugins:\n        - type: rag\n          configuration:\n            backend: external_api\n"
                "            on_failure: block\n" + ("            cache_results: true\n" if cache else "") +
                f'            backend_config: {{endpoint: "{rag_url}/docs/_search", request_format: elasticsearch}}\n')
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: m}}
  models:
    - {{name: m, backend_refs: [{{endpoint: "{backend}"}}]}}
routing:
  signals:
    keywords:
      - {{name: plain, keywords: [plainq]}}
      - {{name: rag, keywords: [ragq]}}
      - {{name: cached, keywords: [cachedq]}}
  decisions:
    - name: plain
      rules: {{type: keyword, name: plain}}
      modelRefs: [{{model: m}}]
    - name: rag
      rules: {{type: keyword, name: rag}}
      modelRefs: [{{model: m}}]
{plugin(False)}    - name: cached
      rules: {{type: keyword, name: cached}}
      modelRefs: [{{model: m}}]
{plugin(True)}global:
  services:
    management_api: {{port: {mgmt}}}
"""


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--requests", type=int, default=2000)
    a = ap.parse_args()
    srv = RagServer(DOCS)
    tmp = tempfile.mkdtemp(prefix="rag-bench-")
    fport, vport = free_port(), free_port()
    procs = [subprocess.Popen([a.fakellm, "--host", "127.0.0.1", "--port", str(fport), "--name", "be"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        wait_port(fport)
        cfg = os.path.join(tmp, "c.yaml")
        pathlib.Path(cfg).write_text(doc(vport, f"127.0.0.1:{fport}", free_port(), srv.url))
        procs.append(subprocess.Popen([a.vsr, "serve", "--config", cfg, "--workers", "1", "--log-level", "warn",
                                       "--metrics-listen", f"127.0.0.1:{free_port()}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(vport)
        kinds = ["plain", "rag", "cached"]
        conns = {k: http.client.HTTPConnection("127.0.0.1", vport, timeout=10) for k in kinds}
        direct = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        bodies = {k: json.dumps({"model": "auto", "messages": [
            {"role": "user", "content": f"{k}q where does the Seine flow and what is the capital of France"}]})
            for k in kinds}
        es = json.dumps({"query": {"match": {"content": "x"}}, "size": 5})
        times = {k: [] for k in kinds + ["backend"]}
        for i in range(a.requests + 50):
            for k in kinds:
                t0 = time.perf_counter_ns()
                conns[k].request("POST", "/v1/chat/completions", bodies[k], {"content-type": "application/json"})
                r = conns[k].getresponse()
                r.read()
                dt = (time.perf_counter_ns() - t0) / 1e6
                assert r.status == 200, (k, r.status)
                if i >= 50:
                    times[k].append(dt)
            t0 = time.perf_counter_ns()
            direct.request("POST", "/docs/_search", es, {"content-type": "application/json"})
            direct.getresponse().read()
            if i >= 50:
                times["backend"].append((time.perf_counter_ns() - t0) / 1e6)
        base50, base99 = pct(times["plain"], 50), pct(times["plain"], 99)
        print(f"{a.requests} requests per kind, 1 client, after 50 warm-up rounds (ms)")
        print(f"{'kind':<10}{'p50':>9}{'p99':>9}{'p50/plain':>11}{'p99/plain':>11}{'p50 - plain':>13}")
        for k in kinds:
            p50, p99 = pct(times[k], 50), pct(times[k], 99)
            print(f"{k:<10}{p50:9.3f}{p99:9.3f}{p50 / base50:11.2f}{p99 / base99:11.2f}{p50 - base50:13.3f}")
        b50, b99 = pct(times["backend"], 50), pct(times["backend"], 99)
        print(f"{'backend':<10}{b50:9.3f}{b99:9.3f}   (the stand-in asked directly: its own round trip)")
        print(f"rag adds {pct(times['rag'], 50) - base50:.3f} ms at p50, of which the backend's round trip is about "
              f"{b50:.3f} ms; a cache hit adds {pct(times['cached'], 50) - base50:.3f} ms")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        srv.close()


if __name__ == "__main__":
    main()
