#!/usr/bin/env python3
"""What the rest of the reference's routing surface adds, at 1 client, p50/p99 of the client's wall time, each
against a baseline measured in the same run (interleaved, one keep-alive connection each):

  1. context_compression request_controls: a chat request through a decision whose compression plugin reads
     the client's x-vsr-compression-control header (a target=N directive) against the same decision without
     request_controls (the request is under the trigger: both do the same compression work, nothing is cut);
  2. decisions[].action / candidateIterations: a decision routed by `action` and one whose candidates come
     from an iteration, against one with plain modelRefs (they are resolved at load: expect no difference);
  3. management_api.auth mode bearer with roles (three tokens, the route's permission checked) against the
     management token alone, on POST /api/v1/routing/preview;
  4. `vsr eval --prompt` against a running vsr (one process and one HTTP exchange) and offline (--config: the
     document compiled in process), against `vsr version` (the process alone).

usage: bench/rest_bench.py [--vsr build/vsr] [--fakellm build/fakellm] [--requests N] [--evals N]"""
import argparse
import os
import socket
import statistics
import subprocess
import tempfile
import time

import http.client

TOKEN = "bench-admin-token-0123456789abcdef"
TOKENS = {"BENCH_T_VIEWER": "bench-viewer-token-0123456789abcdef",
          "BENCH_T_OPERATOR": "bench-operator-token-0123456789abcdef",
          "BENCH_T_ADMIN": TOKEN}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def document(port, mport, backend, auth=""):
    return f"""version: v0.3
listeners:
  - {{name: main, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: m1}}
  models:
    - {{name: m1, backend_refs: [{{name: b, endpoint: "{backend}"}}]}}
    - {{name: m2, backend_refs: [{{name: b, endpoint: "{backend}"}}]}}
routing:
  signals:
    keywords:
      - {{name: plain, operator: OR, keywords: ["plainword"]}}
      - {{name: ctl, operator: OR, keywords: ["ctlword"]}}
      - {{name: refs, operator: OR, keywords: ["refsword"]}}
      - {{name: act, operator: OR, keywords: ["actword"]}}
      - {{name: iter, operator: OR, keywords: ["iterword"]}}
  decisions:
    - name: plain
      rules: {{operator: OR, conditions: [{{type: keyword, name: plain}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: context_compression
          configuration: {{budget: {{trigger_tokens: 100000, target_tokens: 50000}}}}
    - name: ctl
      rules: {{operator: OR, conditions: [{{type: keyword, name: ctl}}]}}
      modelRefs: [{{model: m1}}]
      plugins:
        - type: context_compression
          configuration:
            budget: {{trigger_tokens: 100000, target_tokens: 50000}}
            request_controls: {{enabled: true, allowed: [bypass, target], max_target_tokens: 60000}}
    - name: refs
      rules: {{operator: OR, conditions: [{{type: keyword, name: refs}}]}}
      modelRefs: [{{model: m2}}]
    - name: act
      rules: {{operator: OR, conditions: [{{type: keyword, name: act}}]}}
      action: {{type: route, destination: m2}}
    - name: iter
      rules: {{operator: OR, conditions: [{{type: keyword, name: iter}}]}}
      candidateIterations:
        - {{variable: m, source: models, models: [{{model: m2}}], outputs: [{{type: model, value: m}}]}}
global:
  services:
    management_api:
      port: {mport}
{auth}"""


AUTH = """      auth:
        mode: bearer
        tokens:
          - {env: BENCH_T_VIEWER, role: viewer}
          - {env: BENCH_T_OPERATOR, role: operator}
          - {env: BENCH_T_ADMIN, role: admin}
"""


def wait_port(port, proc, what):
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def line(name, xs, base=None):
    p50, p99 = pct(xs, 50) * 1e3, pct(xs, 99) * 1e3
    s = f"  {name:<46} p50 {p50:8.3f} ms  p99 {p99:8.3f} ms"
    if base:
        s += f"   x{p50 / (pct(base, 50) * 1e3):.3f} / x{p99 / (pct(base, 99) * 1e3):.3f}"
    print(s)


def timed(conn, method, path, body, headers):
    t = time.perf_counter()
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    dt = time.perf_counter() - t
    if r.status != 200:
        raise SystemExit(f"{path}: {r.status} {data[:300]!r}")
    return dt, r


def chat(word):
    text = ("The keepers met in the morning to plan the week. " * 40) + word
    return ('{"model":"auto","messages":[{"role":"user","content":"%s"}]}' % text).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--evals", type=int, default=60)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rest-bench-")
    procs = []
    try:
        pf = os.path.join(tmp, "fake.port")
        fake = subprocess.Popen([a.fakellm, "--host", "127.0.0.1", "--port", "0", "--port-file", pf],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(fake)
        for _ in range(200):
            if os.path.exists(pf) and open(pf).read().strip():
                break
            time.sleep(0.05)
        backend = "127.0.0.1:" + open(pf).read().strip()
        env = dict(os.environ, **TOKENS)
        tf = os.path.join(tmp, "token")
        with open(tf, "w") as f:
            f.write(TOKEN + "\n")
        inst = {}
        for name, auth in (("token", ""), ("roles", AUTH)):
            port, mport = free_port(), free_port()
            path = os.path.join(tmp, f"{name}.yaml")
            with open(path, "w") as f:
                f.write(document(port, mport, backend, auth))
            p = subprocess.Popen([a.vsr, "serve", "--config", path, "--workers", "1", "--metrics-listen", "off",
                                  "--access-log", "off", "--management-token-file", tf],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            procs.append(p)
            wait_port(port, p, "vsr")
            wait_port(mport, p, "vsr management")
            inst[name] = (port, mport, path)

        port, mport, path = inst["token"]
        c = http.client.HTTPConnection("127.0.0.1", port)
        hj = {"content-type": "application/json"}
        kinds = {"plain": (chat("plainword"), hj),
                 "ctl": (chat("ctlword"), dict(hj, **{"x-vsr-compression-control": "target=55000"})),
                 "refs": (chat("refsword"), hj), "act": (chat("actword"), hj), "iter": (chat("iterword"), hj)}
        res = {k: [] for k in kinds}
        for k, (b, h) in kinds.items():  # warm up
            for _ in range(50):
                timed(c, "POST", "/v1/chat/completions", b, h)
        for _ in range(a.requests):
            for k, (b, h) in kinds.items():
                res[k].append(timed(c, "POST", "/v1/chat/completions", b, h)[0])
        print(f"chat requests through vsr (1 client, {a.requests} each, interleaved, ~2 KiB prompt):")
        line("compression, no request_controls (baseline)", res["plain"])
        line("compression + request_controls target=N", res["ctl"], res["plain"])
        line("modelRefs [m2] (baseline)", res["refs"])
        line("action {type: route, destination: m2}", res["act"], res["refs"])
        line("candidateIterations over [m2]", res["iter"], res["refs"])

        pv = b'{"model":"auto","text":"the keepers plan the week ctlword"}'
        conns = {k: http.client.HTTPConnection("127.0.0.1", inst[k][1]) for k in inst}
        hv = {"content-type": "application/json", "authorization": "Bearer " + TOKEN}
        hr = {"content-type": "application/json", "authorization": "Bearer " + TOKENS["BENCH_T_VIEWER"]}
        mres = {"token": [], "roles": []}
        for _ in range(50):
            timed(conns["token"], "POST", "/api/v1/routing/preview", pv, hv)
            timed(conns["roles"], "POST", "/api/v1/routing/preview", pv, hr)
        for _ in range(a.requests):
            mres["token"].append(timed(conns["token"], "POST", "/api/v1/routing/preview", pv, hv)[0])
            mres["roles"].append(timed(conns["roles"], "POST", "/api/v1/routing/preview", pv, hr)[0])
        print(f"routing preview on the management listener (1 client, {a.requests} each, interleaved):")
        line("management token only (baseline)", mres["token"])
        line("auth.mode bearer, 3 tokens, viewer role", mres["roles"], mres["token"])

        eres = {"version": [], "online": [], "offline": []}
        cmds = {"version": [a.vsr, "version"],
                "online": [a.vsr, "eval", "--prompt", "the keepers plan ctlword", "--endpoint",
                           f"http://127.0.0.1:{mport}", "--token-file", tf],
                "offline": [a.vsr, "eval", "--prompt", "the keepers plan ctlword", "--config", path]}
        for _ in range(a.evals):
            for k, cmd in cmds.items():
                t = time.perf_counter()
                r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                eres[k].append(time.perf_counter() - t)
                if r.returncode != 0:
                    raise SystemExit(f"{cmd}: exit {r.returncode}")
        print(f"vsr eval, one process per run ({a.evals} runs each, interleaved):")
        line("vsr version (baseline: the process alone)", eres["version"])
        line("vsr eval --endpoint (online)", eres["online"], eres["version"])
        line("vsr eval --config (offline)", eres["offline"], eres["version"])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)


if __name__ == "__main__":
    main()
