#!/usr/bin/env python3
"""What the answer-side plugins add to a request, end to end through vsr at
one client: the hallucination plugin (a JSON answer held, the detector
asked, the verdict applied) and shadow_dispatch (a copy sent to a second
backend), each against a baseline decision without plugins, interleaved on
one keep-alive connection.  p50/p99 of the client's wall time.

usage: bench/answer_side.py [--vsr build/vsr] [--fakellm build/fakellm] [--model use-lite.vsrm]
                            [--requests N]

vsr (--workers 1) routes every request on the fact_check signal
needs_fact_check (the runtime's model: computed for every request, the
baseline's included, so the signal's cost cancels out) and a keyword that
picks the decision.  The detector is a small in-process HTTP server that
answers at once with no span (its own time, as it measures it, is printed:
what a real detector model adds comes on top); the shadow model is a second
fakellm.  Not a test: no pass/fail."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUESTION = "In what year did the French Revolution begin?"
CONTEXT = "The French Revolution began in 1789."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Detector:
    def __init__(self):
        self.times = []
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                t0 = time.perf_counter()
                json.loads(self.rfile.read(int(self.headers["content-length"])))
                verdict = json.dumps({"hallucinated_spans": []})
                data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": verdict}}]}
                                  ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                outer.times.append(time.perf_counter() - t0)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def start_fakellm(binary, name, tmp):
    pf = os.path.join(tmp, name + ".port")
    p = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", "0", "--name", name, "--port-file", pf],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(pf) and open(pf).read().strip():
            return p, int(open(pf).read().strip())
        time.sleep(0.05)
    raise SystemExit("fakellm did not start")


def doc(port, be, shadow, det, model):
    def dec(name, kw, plugins):
        return f"""    - name: {name}
      priority: 10
      rules: {{type: keyword, name: {kw}}}
      modelRefs: [{{model: m1}}]
{plugins}"""
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s}}
providers:
  defaults: {{model: m1}}
  models:
    - {{name: m1, backend_refs: [{{endpoint: "127.0.0.1:{be}"}}]}}
    - {{name: shadow, backend_refs: [{{endpoint: "127.0.0.1:{shadow}"}}]}}
routing:
  signals:
    fact_check: [{{name: needs_fact_check}}]
    keywords:
      - {{name: k_base, keywords: [zqbase]}}
      - {{name: k_hal, keywords: [zqhal]}}
      - {{name: k_shadow, keywords: [zqshadow]}}
  decisions:
""" + dec("base", "k_base", "") + dec("hal", "k_hal", """      plugins:
        - {type: hallucination, configuration: {enabled: true}}
""") + dec("shadowed", "k_shadow", """      plugins:
        - {type: shadow_dispatch, configuration: {enabled: true, model: shadow, max_concurrency: 64}}
""") + f"""global:
  model_catalog:
    runtime: {{model: {model}, timeout: 60s}}
    modules:
      hallucination_mitigation:
        enabled: true
        detector: {{backend: endpoint, endpoint: "http://127.0.0.1:{det}/v1", model_id: judge}}
"""


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default=os.path.join(ROOT, "build", "vsr"))
    ap.add_argument("--fakellm", default=os.path.join(ROOT, "build", "fakellm"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/vsr/models/use-lite.vsrm"))
    ap.add_argument("--requests", type=int, default=300)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    det = Detector()
    be, be_port = start_fakellm(a.fakellm, "primary", tmp)
    sh, sh_port = start_fakellm(a.fakellm, "shadow", tmp)
    port = free_port()
    cfg = os.path.join(tmp, "c.yaml")
    open(cfg, "w").write(doc(port, be_port, sh_port, det.port, a.model))
    v = subprocess.Popen([a.vsr, "serve", "--config", cfg, "--workers", "1", "--metrics-listen", "off",
                          "--access-log", "off"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        body = lambda kw: {"model": "auto", "messages": [  # noqa: E731
            {"role": "user", "content": f"{QUESTION} {kw}"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": CONTEXT}]}
        kinds = ["zqbase", "zqhal", "zqshadow"]
        t = {k: [] for k in kinds}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
            for k in kinds * 5:  # warm-up (the first request embeds the fact_check bank)
                c.post("/v1/chat/completions", json=body(k), headers={"x-fakellm-text": CONTEXT})
            for i in range(a.requests):
                for k in kinds:
                    t0 = time.perf_counter()
                    r = c.post("/v1/chat/completions", json=body(k), headers={"x-fakellm-text": CONTEXT})
                    t[k].append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text
        base = t["zqbase"]
        print(f"requests per kind: {a.requests}, 1 client, vsr --workers 1 ({a.vsr})")
        for k, label in (("zqbase", "baseline (no plugin)"), ("zqhal", "hallucination (checked)"),
                         ("zqshadow", "shadow_dispatch")):
            xs = t[k]
            print(f"{label:28s} p50 {pct(xs, .5) * 1e3:7.3f} ms  p99 {pct(xs, .99) * 1e3:7.3f} ms  "
                  f"p50 ratio {pct(xs, .5) / pct(base, .5):5.2f}  p99 ratio {pct(xs, .99) / pct(base, .99):5.2f}  "
                  f"p50 +{(pct(xs, .5) - pct(base, .5)) * 1e3:.3f} ms")
        dt = det.times[5:]
        print(f"detector's own time (in-process stand-in): p50 {statistics.median(dt) * 1e3:.3f} ms, "
              f"calls {len(det.times)}")
        stats = httpx.get(f"http://127.0.0.1:{sh_port}/stats", timeout=5).json()
        print(f"shadow backend stats: {json.dumps(stats)[:200]}")
    finally:
        for p in (v, be, sh):
            p.terminate()
            p.wait(10)
        det.server.shutdown()


if __name__ == "__main__":
    main()
