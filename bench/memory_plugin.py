#!/usr/bin/env python3
"""What the memory plugin adds to a chat request, end to end through vsr:
p50/p99 of the client's wall time for a request routed to a decision with a
memory plugin (the query embedded by the runtime, the user's set read from
the in-process store and searched, the memories injected, the turn stored)
against the same request routed to a decision without one, interleaved, at
one client.  Before measuring, the user's set is filled to --memories
memories (the store's bound per user), so every measured request reads and
searches a full set.  Also prints the bytes of that set (what one request
reads) and the bytes injected.

usage: bench/memory_plugin.py [--vsr build/vsr] [--fakellm build/fakellm] [--model ~/.cache/vsr/models/use-lite.vsrm]
                              [--requests N] [--memories M] [--hybrid off|weighted|rrf]

The client sends each request with http.client (head and body in one
write) on one keep-alive connection; vsr runs one worker and the runtime
its default threads; the user's set lives in the in-process store."""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from benchlib import free_port, wait_http

DOC = """version: v0.3
listeners:
  - {{name: main, address: 127.0.0.1, port: {port}, api_keys: [bench-key, bench-key-empty]}}
providers:
  defaults: {{model: m1}}
  models:
    - name: m1
      backend_refs: [{{name: b, endpoint: "127.0.0.1:{be}"}}]
routing:
  signals:
    keywords: [{{name: mem, operator: OR, keywords: ["remember"]}}]
  decisions:
    - name: with_memory
      priority: 10
      rules: {{operator: AND, conditions: [{{type: keyword, name: mem}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: memory
          configuration: {{enabled: true, auto_store: true, similarity_threshold: 0.0, retrieval_limit: 5{hybrid}}}
    - name: without
      priority: 1
      rules: {{operator: AND, conditions: []}}
      modelRefs: [{{model: m1}}]
global:
  services: {{management_api: {{port: {mgmt}}}}}
  model_catalog:
    runtime: {{model: {model}, timeout: 30s}}
  stores:
    memory:
      backend: memory
      quality_scoring: {{max_memories_per_user: {memories}}}
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/vsr/models/use-lite.vsrm"))
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--memories", type=int, default=200)
    ap.add_argument("--hybrid", choices=["off", "weighted", "rrf"], default="off")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vsr-membench-")
    procs = []
    try:
        pf = os.path.join(tmp, "be.port")
        procs.append(subprocess.Popen([a.fakellm, "--host", "127.0.0.1", "--port", "0", "--port-file", pf],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(100):
            if os.path.exists(pf) and open(pf).read().strip():
                break
            time.sleep(0.05)
        port = free_port()
        cfg = os.path.join(tmp, "c.yaml")
        with open(cfg, "w") as f:
            f.write(DOC.format(port=port, be=open(pf).read().strip(), mgmt=free_port(), model=a.model,
                               memories=a.memories,
                               hybrid="" if a.hybrid == "off" else f", hybrid_search: true, hybrid_mode: {a.hybrid}"))
        log = open(os.path.join(tmp, "vsr.log"), "w")
        procs.append(subprocess.Popen([a.vsr, "serve", "--config", cfg, "--workers", "1",
                                       "--metrics-listen", f"127.0.0.1:{free_port()}", *os.environ.get("MEMBENCH_VSR_ARGS", "").split()], stdout=log, stderr=log))
        wait_http(f"http://127.0.0.1:{port}/ready", timeout=60, what="vsr")
        h = {"authorization": "Bearer bench-key", "x-vsr-debug": "true", "content-type": "application/json"}
        # http.client sends a bytes body with its head in one write (no delayed-ACK wait on a split request)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        if True:
            def ask(text, answer, key="bench-key"):
                body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": text}],
                                   "fakellm": {"text": answer}}).encode()
                t0 = time.perf_counter()
                c.request("POST", "/v1/chat/completions", body=body, headers={**h, "authorization": f"Bearer {key}"})
                r = c.getresponse()
                data = r.read()
                dt = (time.perf_counter() - t0) * 1000
                assert r.status == 200, data
                return dt, r
            deadline = time.time() + 60  # the runtime loads its model after /ready
            while ask("remember nothing", "I'm sorry, I cannot tell.")[1].getheader("x-vsr-memory") == "unavailable":
                assert time.time() < deadline, "the runtime never answered"
                time.sleep(0.2)
            for i in range(a.memories):  # fill the user's set to its bound
                ask(f"remember fact number {i}: the item {i} is stored in drawer {i % 17} of cabinet {i % 5}",
                    f"Noted: item {i} is in drawer {i % 17} of cabinet {i % 5}.")
            time.sleep(0.5)
            mem, empty, base, injected = [], [], [], 0
            for i in range(a.requests):
                # every text new (the runtime caches embeddings); a refusal answer is not stored, so the set
                # stays at its bound
                dt, r = ask(f"remember where item {i % a.memories} is, question {i}", "I'm sorry, I cannot tell.")
                mem.append(dt)
                assert r.getheader("x-vsr-memory") == "used", r.getheaders()
                injected = max(injected, int(r.getheader("x-vsr-memory-injected")))
                # the same plugin for a user with no memories: the embedding and an empty read
                dt, r = ask(f"remember where thing {i % a.memories} is, query {i}", "I'm sorry, I cannot tell.",
                            key="bench-key-empty")
                assert r.getheader("x-vsr-memory") == "missing", r.getheaders()
                empty.append(dt)
                dt, _ = ask(f"where is item {i % a.memories}, asked {i}", "I'm sorry, I cannot tell.")
                base.append(dt)
        set_bytes = 20 + sum(16 + len(f"Q: remember fact number {i}: the item {i} is stored in drawer {i % 17} of "
                                      f"cabinet {i % 5}\nA: Noted: item {i} is in drawer {i % 17} of cabinet {i % 5}.")
                             + 4 * 512 for i in range(a.memories))
        print(json.dumps({
            "requests": a.requests, "memories_per_user": a.memories, "hybrid": a.hybrid,
            "baseline_ms": {"p50": round(pct(base, 50), 3), "p99": round(pct(base, 99), 3)},
            "memory_ms": {"p50": round(pct(mem, 50), 3), "p99": round(pct(mem, 99), 3)},
            "memory_empty_set_ms": {"p50": round(pct(empty, 50), 3), "p99": round(pct(empty, 99), 3)},
            "added_ms": {"p50": round(pct(mem, 50) - pct(base, 50), 3), "p99": round(pct(mem, 99) - pct(base, 99), 3)},
            "ratio_p50": round(pct(mem, 50) / pct(base, 50), 2),
            "ratio_p99": round(pct(mem, 99) / pct(base, 99), 2),
            "set_bytes_read_per_request": set_bytes,
            "memories_injected": injected,
            "mean_ms": {"baseline": round(statistics.mean(base), 3), "memory": round(statistics.mean(mem), 3),
                        "memory_empty_set": round(statistics.mean(empty), 3)},
        }, indent=1))
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
