#!/usr/bin/env python3
"""Request graphs: what the executor adds per hop, and what streaming the
final hop buys a fusion request.

usage: bench/looper.py [--vsr build/vsr] [--fakellm build/fakellm] [--requests N]

1. Per-hop overhead.  A ReMoM graph of eight sequential calls (seven rounds
   of one call, then the synthesis) against the same eight calls made
   directly to fakellm and through vsr as ordinary routed requests, one at a
   time on a keep-alive connection:

     per hop through the graph   = (graph request time) / 8
     per call through vsr        = one routed request
     per call to the backend     = one direct request

   and a graph of two calls, whose difference over six is what one more hop
   costs inside a graph.  The graph's hops carry growing prompts (each round embeds the previous
   answer), the direct calls a fixed small one, so the graph's figure is an
   upper bound of the executor's own cost.

2. Fusion, streamed and buffered.  A panel of two models (each answering
   after --panel-ms) and a judge whose streamed answer takes --chunks events
   --chunk-ms apart.  For a streaming client it reports the time to the
   first content byte and to the last byte; for a non-streaming client the
   time to the whole answer (fakellm answers a buffered call at once, so that
   figure has no generation time in it: a real judge needs about
   chunks x chunk-ms more).

Everything runs on loopback; vsr runs with --workers 1 and fakellm with one
thread.  Prints one JSON object.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time

import http.client


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=15):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"process exited: {proc.args}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"port {port} did not open")


DOC = """version: v0.3
listeners:
  - {{name: main, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: a}}
  models:
    - {{name: a, provider_model_id: m-a, backend_refs: [{{endpoint: "127.0.0.1:{be}"}}]}}
    - {{name: b, provider_model_id: m-b, backend_refs: [{{endpoint: "127.0.0.1:{be}"}}]}}
    - {{name: judge, provider_model_id: m-judge, backend_refs: [{{endpoint: "127.0.0.1:{be}"}}]}}
entrypoints:
  - {{model_names: [graph], recipe: graph}}
  - {{model_names: [graph2], recipe: graph2}}
  - {{model_names: [fusion], recipe: fusion}}
  - {{model_names: [plain], recipe: plain}}
recipes:
  - name: graph
    routing:
      decisions:
        - name: chain
          modelRefs: [{{model: a}}]
          algorithm:
            type: remom
            remom: {{breadth_schedule: [1, 1, 1, 1, 1, 1, 1], model_distribution: first_only,
                     include_intermediate_responses: false}}
  - name: graph2
    routing:
      decisions:
        - name: chain2
          modelRefs: [{{model: a}}]
          algorithm:
            type: remom
            remom: {{breadth_schedule: [1], model_distribution: first_only,
                     include_intermediate_responses: false}}
  - name: fusion
    routing:
      decisions:
        - name: panel
          modelRefs: [{{model: a}}, {{model: b}}]
          algorithm:
            type: fusion
            fusion: {{model: judge, analysis_mode: none}}
  - name: plain
    routing:
      decisions:
        - name: one
          modelRefs: [{{model: a}}]
global:
  services:
    management_api: {{port: {mgmt}}}
"""


def timed(conn, body, stream=False):
    """(seconds to the first body byte, seconds to the end) of one POST."""
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", data, {"content-type": "application/json"})
    r = conn.getresponse()
    first = None
    while True:
        chunk = r.read1(65536) if stream else r.read()
        if first is None:
            first = time.perf_counter() - t0
        if not chunk or not stream:
            break
        if stream and b"content" in chunk and first is None:
            first = time.perf_counter() - t0
    if r.status != 200:
        raise SystemExit(f"status {r.status}: {body.get('model')}")
    return first, time.perf_counter() - t0


def first_content(conn, body):
    """Streamed: seconds to the first event with content, and to the end."""
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", data, {"content-type": "application/json"})
    r = conn.getresponse()
    first = None
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        if first is None and b'"content":"' in buf:
            first = time.perf_counter() - t0
    if r.status != 200:
        raise SystemExit(f"status {r.status}")
    return first, time.perf_counter() - t0


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def summary(v):
    return {"p50_ms": round(pct(v, 50) * 1000, 3), "p99_ms": round(pct(v, 99) * 1000, 3),
            "mean_ms": round(statistics.mean(v) * 1000, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--panel-ms", type=int, default=100)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--chunk-ms", type=int, default=20)
    a = ap.parse_args()

    be, port, mgmt = free_port(), free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="vsr-looper-bench-")
    cfg = os.path.join(tmp, "vsr.yaml")
    with open(cfg, "w") as f:
        f.write(DOC.format(port=port, be=be, mgmt=mgmt))
    fl = subprocess.Popen([a.fakellm, "--port", str(be), "--model-text", "m-a=a short answer",
                           "--model-text", "m-b=another short answer",
                           "--model-text", "m-judge=" + " ".join(f"w{i}" for i in range(a.chunks))],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    vs = subprocess.Popen([a.vsr, "serve", "--config", cfg, "--workers", "1", "--access-log", "off",
                           "--metrics-listen", "off"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(be, fl)
        wait_port(port, vs)
        msgs = [{"role": "user", "content": "what is two plus two?"}]
        direct = http.client.HTTPConnection("127.0.0.1", be)
        through = http.client.HTTPConnection("127.0.0.1", port)
        d_calls, v_calls, g_calls, g2_calls = [], [], [], []
        for _ in range(20):  # warm the pools
            timed(direct, {"model": "m-a", "messages": msgs})
            timed(through, {"model": "plain", "messages": msgs})
            timed(through, {"model": "graph", "messages": msgs})
            timed(through, {"model": "graph2", "messages": msgs})
        for _ in range(a.requests):  # interleaved, so drift hits all three alike
            d_calls.append(timed(direct, {"model": "m-a", "messages": msgs})[1])
            v_calls.append(timed(through, {"model": "plain", "messages": msgs})[1])
            g_calls.append(timed(through, {"model": "graph", "messages": msgs})[1])
            g2_calls.append(timed(through, {"model": "graph2", "messages": msgs})[1])
        hop = [g / 8 for g in g_calls]
        out = {
            "per_call_direct": summary(d_calls),
            "per_call_through_vsr": summary(v_calls),
            "per_hop_in_graph_of_8": summary(hop),
            "graph_of_8": summary(g_calls),
            "graph_of_2": summary(g2_calls),
            # what one more hop costs inside a graph: the slope between the two graphs
            "per_extra_hop_p50_ms": round((pct(g_calls, 50) - pct(g2_calls, 50)) / 6 * 1000, 3),
            # eight calls made by the client through vsr, against the graph of eight
            "eight_routed_calls_over_graph_of_8_p50": round(8 * pct(v_calls, 50) / pct(g_calls, 50), 2),
            "hop_over_direct_p50_ms": round((pct(hop, 50) - pct(d_calls, 50)) * 1000, 3),
            "routed_over_direct_p50_ms": round((pct(v_calls, 50) - pct(d_calls, 50)) * 1000, 3),
        }
        # fusion: panel members answer after panel-ms; the judge streams chunks x chunk-ms
        knobs = {"chunks": a.chunks, "chunk-delay-ms": a.chunk_ms}
        fus = {"model": "fusion", "messages": msgs, "fakellm": knobs}
        n = max(10, a.requests // 20)
        ttfb, ttlb, buffered = [], [], []
        for _ in range(n):
            f1, t1 = first_content(through, dict(fus, stream=True, fakellm=dict(knobs, **{"delay-ms": a.panel_ms})))
            ttfb.append(f1)
            ttlb.append(t1)
            buffered.append(timed(through, dict(fus, fakellm=dict(knobs, **{"delay-ms": a.panel_ms})))[1])
        out["fusion"] = {"panel_ms": a.panel_ms, "judge_stream": f"{a.chunks} x {a.chunk_ms} ms",
                         "streamed_first_content": summary(ttfb), "streamed_last_byte": summary(ttlb),
                         "buffered_whole_answer_no_generation_time": summary(buffered)}
        print(json.dumps(out, indent=2))
    finally:
        for p in (vs, fl):
            p.terminate()
        for p in (vs, fl):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
