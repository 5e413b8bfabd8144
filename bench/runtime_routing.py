#!/usr/bin/env python3
"""One chat request routed on one embeddings signal, end to end through vsr,
against the same request routed on one keyword signal: what the runtime call
adds (p50/p99 of the client's wall time), the runtime child's RSS with its
model (loaded, and after the load), and the runtime call's own split (its
wall time as vsr's runtime client measures it against the runtime's
Server-Timing queue + compute).

usage: bench/runtime_routing.py [--vsr build/vsr] [--fakellm build/fakellm] [--requests N]
                                [--clients C] [--runtime-threads T]
                                [--model use-lite.vsrm [--classifiers [--guard-model DIR]
                                 [--jailbreak-method classifier|contrastive|hybrid]]]

With --classifiers the model-backed recipe routes on a `domains`, a
`jailbreak` (method classifier, or --jailbreak-method) and a `pii` signal
together instead (one bundle of three classify tasks per request; needs
--model).

It starts fakellm, `vsr runtime serve --embedder hash --threads 1
--cache-entries 0` (every call computes) on a temporary socket, and vsr
(--workers 1) whose recipe `emb` routes on an embeddings signal and recipe
`kw` on a keyword signal (entrypoints: model emb / model kw), then sends the
two kinds of request interleaved, one at a time on one keep-alive connection
each.  With --clients C, C such clients run at once (threads; each sends
requests/C of each kind), so the runtime's queue is measured too.  A second, shorter pass runs vsr at --log-level debug and reads its
`bundle call: ... wall W ms, runtime R ms` lines for the split."""
import argparse
import os
import threading
import re
import socket
import statistics
import subprocess
import tempfile
import time

TEXT = "how do I sort a list of tuples by the second element in python"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLASSIFIERS = """      signals:
        domains: [{name: coding, mmlu_categories: [computer science]}]
        jailbreak: [{name: jb, method: JB_METHOD}]
        pii: [{name: p, threshold: 0.5}]
      decisions:
        - name: d
          rules:
            operator: AND
            conditions:
              - {type: domain, name: coding}
              - {operator: NOT, conditions: [{type: jailbreak, name: jb}]}
              - {operator: NOT, conditions: [{type: pii, name: p}]}
          modelRefs: [{model: coder}]
"""


def doc(port, backend, sock, mgmt, classifiers=False, jb_method="classifier"):
    emb = (CLASSIFIERS.replace("JB_METHOD", jb_method) if classifiers else
           f"""      signals:
        embeddings: [{{name: code, threshold: 0.6, candidates: ["{TEXT}", "write a function in rust"]}}]
      decisions:
        - {{name: d, rules: {{type: embedding, name: code}}, modelRefs: [{{model: coder}}]}}
""")
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: general}}
  models:
    - {{name: general, backend_refs: [{{endpoint: "{backend}"}}]}}
    - {{name: coder, backend_refs: [{{endpoint: "{backend}"}}]}}
recipes:
  - name: emb
    routing:
{emb}  - name: kw
    routing:
      signals:
        keywords: [{{name: code, keywords: [python]}}]
      decisions:
        - {{name: d, rules: {{type: keyword, name: code}}, modelRefs: [{{model: coder}}]}}
entrypoints:
  - {{model_names: [emb], recipe: emb}}
  - {{model_names: [kw], recipe: kw}}
global:
  services:
    management_api: {{port: {mgmt}}}
  model_catalog:
    runtime: {{endpoint: "unix://{sock}"}}
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
    def __init__(self, port, model):
        body = ('{"model":"%s","messages":[{"role":"user","content":"%s"}]}' % (model, TEXT)).encode()
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


def rss_mb(pid):
    """The process's resident set in MB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run(a, tmp, level, n):
    sock = os.path.join(tmp, "rt.sock")
    fl_port, port = free_port(), free_port()
    procs = []
    log = open(os.path.join(tmp, f"vsr-{level}.log"), "w+")
    try:
        procs.append(subprocess.Popen([a.fakellm, "--host", "127.0.0.1", "--port", str(fl_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        model = ["--model", a.model] if a.model else ["--embedder", "hash"]
        if a.guard_model:
            model += ["--guard-model", a.guard_model]
        procs.append(subprocess.Popen([a.vsr, "runtime", "serve", "--socket", sock, *model,
                                       "--threads", str(a.runtime_threads), "--cache-entries", "0",
                                       *(["--max-batch", str(a.runtime_max_batch)] if a.runtime_max_batch else [])],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(doc(port, f"127.0.0.1:{fl_port}", sock, free_port(), a.classifiers, a.jailbreak_method))
        wait_port(fl_port)
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.02)
        rss = {"loaded": rss_mb(procs[1].pid)}  # the runtime child with its model, before any call
        procs.append(subprocess.Popen([a.vsr, "serve", "--config", cfg, "--workers", "1", "--access-log", "off",
                                       "--metrics-listen", "off", "--config-watch", "off", "--log-level", level],
                                      stdout=log, stderr=subprocess.STDOUT))
        wait_port(port)
        clients = max(1, a.clients)
        conns = [(Conn(port, "emb"), Conn(port, "kw")) for _ in range(clients)]
        te, tk, failed = [], [], []
        start = threading.Barrier(clients)

        def client(emb, kw, count):
            try:
                start.wait()
                for _ in range(200 // clients + 1):  # warm-up: pools, the candidates' vectors
                    emb.call()
                    kw.call()
                e, k = [], []
                for _ in range(count):
                    e.append(emb.call())
                    k.append(kw.call())
                te.extend(e)
                tk.extend(k)
            except BaseException as exc:  # noqa: B036 - reported by the main thread
                failed.append(exc)

        th = [threading.Thread(target=client, args=(e, k, max(1, n // clients))) for e, k in conns]
        for t in th:
            t.start()
        for t in th:
            t.join()
        if failed:
            raise SystemExit(f"a client failed: {failed[0]!r}")
        log.flush()
        rss["after"] = rss_mb(procs[1].pid)
        return te, tk, open(log.name).read(), rss
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(20)
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--clients", type=int, default=1, help="clients sending at once (each one request at a time)")
    ap.add_argument("--runtime-threads", type=int, default=1, help="the runtime's compute threads")
    ap.add_argument("--runtime-max-batch", type=int, default=0,
                    help="the runtime's --max-batch (default: the runtime's own; 1: no batches)")
    ap.add_argument("--model", help="the USE-lite file (use-lite.vsrm) instead of the test embedder")
    ap.add_argument("--classifiers", action="store_true", help="route on domains + jailbreak + pii (needs --model)")
    ap.add_argument("--guard-model", help="the llm_guardrail directory (default: the runtime's)")
    ap.add_argument("--jailbreak-method", default="classifier", choices=["classifier", "contrastive", "hybrid"],
                    help="the jailbreak signal's method with --classifiers")
    a = ap.parse_args()
    if a.classifiers and not a.model:
        raise SystemExit("--classifiers needs --model")
    tmp = tempfile.mkdtemp(prefix="vsrrb", dir="/tmp")
    te, tk, _, rss = run(a, tmp, "info", a.requests)
    what = "domains+jailbreak+pii signals" if a.classifiers else "embeddings signal"
    print(f"clients={a.clients} runtime-threads={a.runtime_threads} max-batch={a.runtime_max_batch or 'default'} requests={len(te)} each; {what} p50={pct(te, 50):.3f} ms p99={pct(te, 99):.3f} ms; "
          f"keyword signal p50={pct(tk, 50):.3f} ms p99={pct(tk, 99):.3f} ms; "
          f"added p50={pct(te, 50) - pct(tk, 50):.3f} ms p99={pct(te, 99) - pct(tk, 99):.3f} ms")
    print(f"runtime child RSS: {rss['loaded']:.1f} MB with its model loaded, {rss['after']:.1f} MB after the load")
    _, _, out, _ = run(a, tmp, "debug", max(500, a.requests // 3))
    calls = [(float(w), float(r)) for w, r in re.findall(r"bundle call: status 0, http 200, wall ([0-9.]+) ms, "
                                                         r"runtime ([0-9.]+) ms", out)]
    calls = calls[200:]  # past the warm-up
    wall = [w for w, _ in calls]
    rt = [r for _, r in calls]
    share = statistics.median([(w - r) / w for w, r in calls if w > 0])
    print(f"runtime calls={len(calls)} (debug pass) wall p50={pct(wall, 50):.3f} ms p99={pct(wall, 99):.3f} ms; "
          f"server-timing (queue+compute) p50={pct(rt, 50):.3f} ms; transport (wall - server-timing) "
          f"p50={statistics.median([w - r for w, r in calls]):.3f} ms = {share * 100:.0f}% of the call")


if __name__ == "__main__":
    main()
