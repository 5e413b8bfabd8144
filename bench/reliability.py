#!/usr/bin/env python3
"""Reliability layer: (1) overhead on the happy path — wrk against vsr with a
model whose reliability block enables retries, outlier ejection and active
health checks, and against the same model without it, in the same run,
interleaved; (2) failover time — clients keep sending while one of two
backends is killed; the time from the kill to the last failed request.

Environment: BENCH_ROUNDS (3), BENCH_SECONDS (5), BUILD (build)."""
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import free_port, wait_http  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = ROOT / os.environ.get("BUILD", "build")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SECONDS = int(os.environ.get("BENCH_SECONDS", "5"))
BODY = '{"model":"%s","messages":[{"role":"user","content":"Say hello."}]}'


def wrk(url, model, tmp):
    script = tmp / f"{model}.lua"
    script.write_text('wrk.method = "POST"\nwrk.body = \'%s\'\nwrk.headers["Content-Type"] = "application/json"\n'
                      % (BODY % model))
    out = subprocess.run(["wrk", "-t1", "-c8", f"-d{SECONDS}s", "-s", str(script), url + "/v1/chat/completions"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="vsr-rel-"))
    be = [free_port(), free_port()]
    port, mgmt = free_port(), free_port()
    eps = "\n".join(f"        - {{name: b{i}, endpoint: '127.0.0.1:{p}'}}" for i, p in enumerate(be))
    (tmp / "c.yaml").write_text(f"""version: v0.3
listeners: [{{name: l, address: 127.0.0.1, port: {port}}}]
providers:
  models:
    - name: plain
      backend_refs:
{eps}
    - name: reliable
      reliability:
        retry_count: 2
        retry_on: 5xx,reset,connect-failure
        per_try_timeout: 5s
        consecutive_5xx: 3
        base_ejection_time: 30s
        health_check_path: /health
        health_check_interval: 1s
        health_check_timeout: 500ms
      backend_refs:
{eps}
global:
  services:
    management_api: {{port: {mgmt}}}
""")
    procs = [subprocess.Popen([str(BUILD / "fakellm"), "--port", str(p), "--name", f"b{i}"], stdout=subprocess.DEVNULL)
             for i, p in enumerate(be)]
    vsr = subprocess.Popen([str(BUILD / "vsr"), "serve", "--config", str(tmp / "c.yaml"), "--workers", "1",
                            "--log-level", "error", "--access-log", "off", "--metrics-listen", "off"])
    procs.append(vsr)
    try:
        for p in be:
            wait_http(f"http://127.0.0.1:{p}/health")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/ready")
        res = {"plain": [], "reliable": []}
        for r in range(ROUNDS):
            for m in (["plain", "reliable"] if r % 2 == 0 else ["reliable", "plain"]):
                res[m].append(wrk(url, m, tmp))
        p, q = statistics.mean(res["plain"]), statistics.mean(res["reliable"])
        print(f"happy path, {ROUNDS} interleaved rounds x {SECONDS}s, 8 connections, vsr --workers 1:")
        print(f"  without reliability block: {p:,.0f} req/s   rounds {[round(x) for x in res['plain']]}")
        print(f"  retries+ejection+health:   {q:,.0f} req/s   rounds {[round(x) for x in res['reliable']]}")
        print(f"  ratio: {q / p:.3f}")

        # failover: 8 clients on `plain` (no retries) and on `reliable`; kill b0
        for model in ("plain", "reliable"):
            fails, stop = [], threading.Event()
            def client():
                while not stop.is_set():
                    req = urllib.request.Request(url + "/v1/chat/completions", data=(BODY % model).encode(),
                                                 headers={"content-type": "application/json"})
                    try:
                        urllib.request.urlopen(req, timeout=10).read()
                    except Exception:
                        fails.append(time.monotonic())
            if model == "reliable":
                procs[0] = subprocess.Popen([str(BUILD / "fakellm"), "--port", str(be[0]), "--name", "b0"],
                                            stdout=subprocess.DEVNULL)
                wait_http(f"http://127.0.0.1:{be[0]}/health")
                time.sleep(2.5)  # health checks see it up again
            ts = [threading.Thread(target=client) for _ in range(8)]
            for t in ts:
                t.start()
            time.sleep(1.0)
            killed = time.monotonic()
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            time.sleep(4.0)
            stop.set()
            for t in ts:
                t.join()
            last = max(fails) - killed if fails else 0.0
            print(f"failover ({model}): {len(fails)} failed requests; last failure {last * 1000:.0f} ms after the kill")
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)
        for pr in procs:
            try:
                pr.wait(10)
            except subprocess.TimeoutExpired:
                pr.kill()


if __name__ == "__main__":
    main()
