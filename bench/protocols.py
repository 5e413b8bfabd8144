#!/usr/bin/env python3
"""What protocol translation and the response cache cost, measured against
the plain relay in the same run.

usage: bench/protocols.py [--vsr build/vsr] [--fakellm build/fakellm] [--requests N] [--entries N]
                          [--stream-mb M]

1. Per request (one at a time on a keep-alive connection, rounds interleaved
   so that load drifts hit every path alike), p50 and p90 in ms:
     direct      POST /v1/chat/completions to fakellm itself
     relay       the same through vsr (chat client, chat backend)
     ingress     POST /v1/messages through vsr to the chat backend
     egress      a chat request through vsr to an api_format: anthropic model
2. Per streamed MB: one answer of --stream-mb MiB (fakellm's chunk-size knob)
   streamed through each path; ms per MiB, best of 3.
3. The response cache: --entries distinct questions stored, then hits on
   them (exact, from the memory store, and from Redis when redis-server is
   installed), against a miss that goes to the backend.

Everything runs on loopback; vsr runs with --workers 1 and fakellm with one
thread.  Prints one JSON object."""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, wait_http  # noqa: E402


DOC = """version: v0.3
listeners:
  - {{name: main, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: oa}}
  models:
    - {{name: oa, provider_model_id: m-oa, backend_refs: [{{endpoint: "127.0.0.1:{be}"}}]}}
    - {{name: an, provider_model_id: m-an, api_format: anthropic, backend_refs: [{{endpoint: "127.0.0.1:{be}"}}]}}
routing:
  signals:
    keywords: [{{name: c, operator: OR, keywords: ["cacheme"]}}]
  decisions:
    - name: cached
      rules: {{operator: AND, conditions: [{{type: keyword, name: c}}]}}
      modelRefs: [{{model: oa}}]
      plugins: [{{type: response_cache, configuration: {{mode: exact}}}}]
global:
  services:
    management_api: {{port: {mgmt}}}
  stores:
    response_cache:
{store}
"""


def post(conn, path, body, headers=None):
    data = json.dumps(body).encode()
    h = {"content-type": "application/json", **(headers or {})}
    t0 = time.perf_counter()
    conn.request("POST", path, data, h)
    r = conn.getresponse()
    n = 0
    while True:
        chunk = r.read(1 << 20)
        if not chunk:
            break
        n += len(chunk)
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise SystemExit(f"{path} {body.get('model')}: status {r.status}")
    return dt, n, r.getheader("x-vsr-cache-hit")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def start(args, store):
    tmp = tempfile.mkdtemp(prefix="vsr-bench-")
    be_port, port, mgmt = free_port(), free_port(), free_port()
    fl = subprocess.Popen([args.fakellm, "--host", "127.0.0.1", "--port", str(be_port), "--threads", "1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{be_port}/health", what="fakellm")
    cfg = os.path.join(tmp, "c.yaml")
    with open(cfg, "w") as f:
        f.write(DOC.format(port=port, be=be_port, mgmt=mgmt, store=store))
    v = subprocess.Popen([args.vsr, "serve", "--config", cfg, "--workers", "1", "--metrics-listen", "off",
                          "--access-log", "off"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{port}/health", what="vsr")
    return fl, v, be_port, port, tmp


def stop(*procs):
    for p in procs:
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def chat(text, **kw):
    return {"model": "oa", "messages": [{"role": "user", "content": text}], **kw}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--stream-mb", type=int, default=8)
    args = ap.parse_args()
    out = {"requests": args.requests}

    fl, v, be_port, port, tmp = start(args, "      backend_type: memory\n")
    try:
        direct = http.client.HTTPConnection("127.0.0.1", be_port)
        via = http.client.HTTPConnection("127.0.0.1", port)
        paths = {
            "direct": (direct, "/v1/chat/completions", chat("hello there")),
            "relay": (via, "/v1/chat/completions", chat("hello there")),
            "ingress": (via, "/v1/messages", {**chat("hello there"), "max_tokens": 64}),
            "egress": (via, "/v1/chat/completions", chat("hello there", model="an")),
        }
        times = {k: [] for k in paths}
        for _ in range(20):  # warm
            for c, p, b in paths.values():
                post(c, p, b)
        for _ in range(args.requests):
            for k, (c, p, b) in paths.items():
                times[k].append(post(c, p, b)[0] * 1000)
        out["per_request_ms"] = {k: {"p50": round(pct(t, .5), 3), "p90": round(pct(t, .9), 3)} for k, t in times.items()}
        base = pct(times["relay"], .5)
        out["per_request_over_relay_ms"] = {k: round(pct(times[k], .5) - base, 3) for k in ("ingress", "egress")}

        # streamed MB: chunk-size filler per content event
        chunks, size = 64, args.stream_mb * (1 << 20) // 64
        knobs = {"x-fakellm-chunks": str(chunks), "x-fakellm-chunk-size": str(size)}
        per_mb = {}
        for k in ("direct", "relay", "ingress", "egress"):
            c, p, b = paths[k]
            best = None
            for _ in range(3):
                dt, n, _ = post(c, p, {**b, "stream": True}, knobs)
                best = dt if best is None else min(best, dt)
            per_mb[k] = round(best * 1000 / (n / (1 << 20)), 2)
        out["stream_ms_per_mib"] = per_mb

        # the cache, memory
        out["cache_memory"] = cache_run(via, args.entries)
    finally:
        stop(v, fl)
        shutil.rmtree(tmp, ignore_errors=True)

    if shutil.which("redis-server"):
        rport = free_port()
        rd = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_redis(rport)
            fl, v, be_port, port, tmp = start(args, f"      backend_type: redis\n      redis: {{address: \"127.0.0.1:{rport}\"}}\n")
            try:
                out["cache_redis"] = cache_run(http.client.HTTPConnection("127.0.0.1", port), args.entries)
            finally:
                stop(v, fl)
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            stop(rd)
    print(json.dumps(out, indent=1))


def wait_redis(port, timeout=15):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("bench: redis-server did not come up")


def cache_run(conn, entries):
    for i in range(entries):
        post(conn, "/v1/chat/completions", chat(f"cacheme question number {i}", model="auto"))
    time.sleep(0.2)
    hits, misses = [], []
    for i in range(min(entries, 400)):
        dt, _, hit = post(conn, "/v1/chat/completions", chat(f"cacheme question number {i}", model="auto"))
        if hit == "true":
            hits.append(dt * 1000)
        dt, _, hit = post(conn, "/v1/chat/completions", chat(f"cacheme new question {i} {time.time()}", model="auto"))
        misses.append(dt * 1000)
    return {"entries": entries, "hits": len(hits), "hit_p50_ms": round(pct(hits, .5), 3) if hits else None,
            "miss_p50_ms": round(pct(misses, .5), 3)}


if __name__ == "__main__":
    main()
