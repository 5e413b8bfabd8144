#!/usr/bin/env python3
"""What the newer signal families add to one routed chat request, end to end through vsr, at one client:
p50/p99 of the client's wall time per recipe, against a keyword-signal recipe measured in the same run
(requests interleaved, so a noisy machine slows every recipe alike).

usage: bench/signal_families.py [--vsr build/vsr] [--fakellm build/fakellm] [--requests N] [--text-bytes B]

--text-bytes B repeats the prompt to about B bytes (events then read its 2,048-rune window; the remote
classifiers get their bounded share of it).

Recipes (entrypoints: the request's model names the recipe), each routing the same body (a text part and an
image part) to model `coder`:
  kw   one keyword signal (the baseline)
  ev   one events signal of four criteria (event_types, severities, action_codes, temporal)
  im   one input_modality signal (image)
  sf   one safety signal through a remote classifier (a stand-in http_classify server here, answering at once:
       what vsr adds around the call, not a real model's time)
  dm   one domain signal through a remote classifier, two modelRefs, no model_scores
  ms   the same with domains[].model_scores picking the second modelRef (ms - dm: the static selector's scoring)
"""
import argparse
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEXT = "our python deploy failed with a critical error, rollback now please"
RECIPES = ["kw", "ev", "im", "sf", "dm", "ms"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Classifier:
    """A stand-in http_classify endpoint: POST /classify {"inputs": T} -> a fixed label list."""

    def __init__(self, labels):
        data = json.dumps(labels).encode()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", "0")))
                # one write: a head and a body in two small segments meet Nagle and a delayed ACK (40 ms)
                self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                                 % len(data) + data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def recipe(name, signals, rule, refs="[{model: coder}]"):
    return f"""  - name: {name}
    routing:
      signals:
{signals}
      decisions:
        - {{name: d, rules: {rule}, modelRefs: {refs}}}
"""


def doc(port, backend, mgmt, dom_port, safety_port):
    recipes = "".join([
        recipe("kw", "        keywords: [{name: code, keywords: [python]}]", "{type: keyword, name: code}"),
        recipe("ev", "        events: [{name: e, event_types: [deploy, outage], severities: [critical], "
                     "action_codes: [ROLLBACK], temporal: true}]", "{type: event, name: e}"),
        recipe("im", "        input_modality: [{name: img, modality: image}]", "{type: input_modality, name: img}"),
        recipe("sf", "        safety: [{name: s, model: safety-cls, threshold: 0.5}]", "{type: safety, name: s}"),
        recipe("dm", "        domains: [{name: cs, mmlu_categories: [computer science]}]", "{type: domain, name: cs}",
               "[{model: coder}, {model: general}]"),
        recipe("ms", "        domains: [{name: cs, mmlu_categories: [computer science], model_scores: "
                     "[{model: general, score: 0.4}, {model: coder, score: 0.9}]}]", "{type: domain, name: cs}",
               "[{model: general}, {model: coder}]"),
    ])
    entry = "".join(f"  - {{model_names: [{r}], recipe: {r}}}\n" for r in RECIPES)
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: coder, backend_refs: [{{endpoint: "{backend}"}}]}}
recipes:
{recipes}entrypoints:
{entry}global:
  services:
    management_api: {{port: {mgmt}}}
  model_catalog:
    external:
      - {{name: domain-cls, model_role: classification, llm_endpoint: {{address: 127.0.0.1, port: {dom_port}}}}}
      - {{name: safety-cls, model_role: classification, llm_endpoint: {{address: 127.0.0.1, port: {safety_port}}}}}
    modules:
      classifier:
        domain:
          backend: {{protocol: http_classify, model: domain-cls}}
"""


def wait_port(port, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


class Conn:
    def __init__(self, port, model, text):
        content = [{"type": "text", "text": text},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}).encode()
        self.req = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n" % len(body)) + body
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.settimeout(10)

    def call(self):
        t0 = time.perf_counter_ns()
        self.s.sendall(self.req)
        buf = b""
        while True:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise SystemExit("vsr closed the connection")
            buf += chunk
            i = buf.find(b"\r\n\r\n")
            if i >= 0:
                head = buf[:i]
                m = re.search(rb"content-length: (\d+)", head, re.I)
                if len(buf) >= i + 4 + int(m.group(1)):
                    break
        dt = (time.perf_counter_ns() - t0) / 1e6
        assert b"x-vsr-selected-model: coder" in head, head
        return dt


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--requests", type=int, default=2000, help="requests per recipe")
    ap.add_argument("--text-bytes", type=int, default=0, help="the prompt repeated to about this many bytes")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vsrsf", dir="/tmp")
    dom = Classifier([{"label": "computer science", "score": 0.85}, {"label": "other", "score": 0.15}])
    saf = Classifier([{"label": "safe", "score": 0.1}, {"label": "unsafe", "score": 0.9}])
    fl_port, port = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen([a.fakellm, "--host", "127.0.0.1", "--port", str(fl_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(doc(port, f"127.0.0.1:{fl_port}", free_port(), dom.port, saf.port))
        wait_port(fl_port)
        procs.append(subprocess.Popen([a.vsr, "serve", "--config", cfg, "--workers", "1", "--access-log", "off",
                                       "--metrics-listen", "off", "--config-watch", "off"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(port)
        text = TEXT if a.text_bytes <= len(TEXT) else " ".join([TEXT] * (a.text_bytes // (len(TEXT) + 1)))
        conns = {r: Conn(port, r, text) for r in RECIPES}
        for _ in range(200):  # warm-up
            for r in RECIPES:
                conns[r].call()
        t = {r: [] for r in RECIPES}
        for _ in range(a.requests):
            for r in RECIPES:
                t[r].append(conns[r].call())
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(20)
    base50, base99 = pct(t["kw"], 50), pct(t["kw"], 99)
    print(f"requests={a.requests} per recipe, 1 client, prompt {max(len(TEXT), a.text_bytes)} bytes; baseline kw (one keyword signal) p50={base50:.3f} ms "
          f"p99={base99:.3f} ms")
    for r in RECIPES[1:]:
        p50, p99 = pct(t[r], 50), pct(t[r], 99)
        print(f"{r}: p50={p50:.3f} ms p99={p99:.3f} ms; vs kw: p50 {p50 / base50:.2f}x ({p50 - base50:+.3f} ms), "
              f"p99 {p99 / base99:.2f}x ({p99 - base99:+.3f} ms)")
    d50, d99 = pct(t["dm"], 50), pct(t["dm"], 99)
    print(f"model_scores (ms vs dm): p50 {pct(t['ms'], 50) - d50:+.3f} ms, p99 {pct(t['ms'], 99) - d99:+.3f} ms")


if __name__ == "__main__":
    main()
