#!/usr/bin/env python3
"""Single-call selectors against backends of different speed and price:
which model each algorithm sends the traffic to, the p95 latency clients
see against the SLO, and what the tokens cost.

usage: bench/model_selection.py [--vsr build/vsr] [--fakellm build/fakellm]
                          [--requests N] [--concurrency C] [--slo-ms MS]

One fakellm plays three models (--model-delay-ms: the time before each
response head, i.e. the time to first token; 8 streamed events 2 ms apart
after it):

    m-premium   30 ms   $10.00 / 1M prompt tokens
    m-standard 150 ms    $1.00
    m-budget   700 ms    $0.10    (over the SLO)

Each algorithm gets a fresh vsr (no statistics yet) and the same N
streamed requests, C at a time, to a decision over [m-budget, m-standard,
m-premium]:

    static           the first modelRef (m-budget): the cheapest, too slow
    static premium   modelRefs reordered so the first is m-premium
    latency_aware    ttft_percentile 95
    multi_factor     weights cost 0.7 latency 0.3, slo.max_ttft_ms = SLO

The client measures each request's time to its last byte; the traffic
split comes from x-vsr-selected-model; the cost from vsr's own
/api/v1/models/stats.  Prints a Markdown table and one JSON object.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, wait_http  # noqa: E402

MODELS = {  # name -> (ttft ms, prompt $/1M)
    "m-premium": (30, 10.0),
    "m-standard": (150, 1.0),
    "m-budget": (700, 0.1),
}


def doc(port, admin, endpoint, refs, algorithm):
    models = "\n".join(
        f'    - {{name: {n}, provider_model_id: {n}-id, backend_refs: [{{name: b, endpoint: "{endpoint}"}}],'
        f' pricing: {{currency: USD, prompt_per_1m: {p}, completion_per_1m: {p * 4}}}}}'
        for n, (_, p) in MODELS.items())
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s}}
providers:
  defaults: {{model: m-standard}}
  models:
{models}
routing:
  decisions:
    - name: pick
      modelRefs: [{", ".join(f"{{model: {r}}}" for r in refs)}]
      algorithm: {json.dumps(algorithm)}
global:
  services:
    management_api: {{port: {admin}}}
"""


def one(url):
    body = json.dumps({"model": "auto", "stream": True, "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "route me somewhere sensible"}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
        model = r.headers.get("x-vsr-selected-model", "?")
    return model, (time.perf_counter() - t0) * 1000


def p95(v):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * 0.95))]


def run(args, name, refs, algorithm, fake_port, tmp):
    port, admin = free_port(), free_port()
    path = os.path.join(tmp, f"{name.replace(' ', '_')}.yaml")
    with open(path, "w") as f:
        f.write(doc(port, admin, f"127.0.0.1:{fake_port}", refs, algorithm))
    log = open(os.path.join(tmp, "vsr.log"), "ab")
    vsr = subprocess.Popen([args.vsr, "serve", "--config", path, "--workers", "2", "--metrics-listen",
                            f"127.0.0.1:{free_port()}"], stdout=log, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/ready", what="vsr")
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            got = list(pool.map(lambda _: one(url), range(args.requests)))
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/api/v1/models/stats", timeout=10) as r:
            stats = json.load(r)
    finally:
        vsr.terminate()
        vsr.wait(timeout=20)
    split = {m: sum(1 for g in got if g[0] == m) for m in MODELS}
    lat = [g[1] for g in got]
    cost = sum(m["cost"] for m in stats["models"])
    return {"algorithm": name, "split": split, "p50_ms": round(sorted(lat)[len(lat) // 2], 1),
            "p95_ms": round(p95(lat), 1), "within_slo": p95(lat) <= args.slo_ms, "cost_usd": cost}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--slo-ms", type=float, default=400)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vsr-selectors-")
    fake_port = free_port()
    fargs = [args.fakellm, "--port", str(fake_port), "--threads", "2", "--chunks", "8", "--chunk-delay-ms", "2"]
    for n, (ttft, _) in MODELS.items():
        fargs += ["--model-delay-ms", f"{n}-id={ttft}"]
    fake = subprocess.Popen(fargs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{fake_port}/health", what="fakellm")
        cheap_first = ["m-budget", "m-standard", "m-premium"]
        runs = [
            ("static", cheap_first, {"type": "static"}),
            ("static premium", ["m-premium", "m-standard", "m-budget"], {"type": "static"}),
            ("latency_aware", cheap_first, {"type": "latency_aware", "latency_aware": {"ttft_percentile": 95}}),
            ("multi_factor", cheap_first,
             {"type": "multi_factor", "multi_factor": {"weights": {"cost": 0.7, "latency": 0.3},
                                                       "slo": {"max_ttft_ms": args.slo_ms}}}),
        ]
        results = [run(args, *r, fake_port, tmp) for r in runs]
    finally:
        fake.terminate()
        fake.wait(timeout=20)
    print(f"{args.requests} streamed requests, {args.concurrency} at a time; SLO p95 <= {args.slo_ms:.0f} ms\n")
    print("| algorithm | m-budget | m-standard | m-premium | p50 ms | p95 ms | within SLO | cost (USD) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["split"]
        print(f"| {r['algorithm']} | {s['m-budget']} | {s['m-standard']} | {s['m-premium']} | {r['p50_ms']} "
              f"| {r['p95_ms']} | {'yes' if r['within_slo'] else 'no'} | {r['cost_usd']:.6f} |")
    print(json.dumps({"requests": args.requests, "concurrency": args.concurrency, "slo_ms": args.slo_ms,
                      "results": results}))


if __name__ == "__main__":
    main()
