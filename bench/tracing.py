#!/usr/bin/env python3
"""The cost of tracing: wrk against vsr with tracing off and with every
request sampled (sampling always_on, spans exported to a local OTLP/HTTP
collector stand-in: a second fakellm, which answers any POST with 200), in
interleaved rounds.  Prints requests/s, p99 and vsr's CPU time per request
(user + system, all threads, from /proc) per round and the means, and the
tracing counters of the sampled run (spans exported, dropped).  CPU per
request is the figure that survives a busy machine; requests/s does not.

Environment: BENCH_ROUNDS (default 3), BENCH_SECONDS (default 4), BENCH_CONNS
(default 64), BENCH_WORKERS (vsr workers, default 1), BUILD (default build)."""
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import cpu_seconds, free_port, wait_http  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("BUILD", ROOT / "build"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SECONDS = int(os.environ.get("BENCH_SECONDS", "4"))
CONNS = int(os.environ.get("BENCH_CONNS", "64"))
WORKERS = int(os.environ.get("BENCH_WORKERS", "1"))
BODY = '{"model":"bench-model","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
LUA = f"""
wrk.method = "POST"
wrk.body = '{BODY}'
wrk.headers["Content-Type"] = "application/json"
"""


def config(port, be_port, collector_port):
    text = f"""version: v0.3
listeners:
  - name: bench
    address: 127.0.0.1
    port: {port}
providers:
  defaults:
    model: bench-model
  models:
    - name: bench-model
      backend_refs:
        - endpoint: 127.0.0.1:{be_port}
global:
  services:
    management_api:
      enabled: false
"""
    if collector_port:
        text += f"""    observability:
      tracing:
        enabled: true
        exporter:
          endpoint: http://127.0.0.1:{collector_port}
        sampling:
          type: always_on
"""
    return text


def wrk(url, script):
    out = subprocess.run(["wrk", "-t1", f"-c{CONNS}", f"-d{SECONDS}s", "--latency", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    p99 = float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, p99, int(errors.group(1)) if errors else 0


def main():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="vsr-bench-tracing-"))
    script = tmp / "post.lua"
    script.write_text(LUA)
    be_port, sink_port = free_port(), free_port()
    procs = []
    try:
        for port in (be_port, sink_port):
            procs.append(subprocess.Popen([str(BUILD / "fakellm"), "--host", "127.0.0.1", "--port", str(port),
                                           "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_http(f"http://127.0.0.1:{port}/health")
        modes = {}
        pids = {}
        for name, cport in (("off", 0), ("sampled", sink_port)):
            port, mport = free_port(), free_port()
            cfg = tmp / f"{name}.yaml"
            cfg.write_text(config(port, be_port, cport))
            procs.append(subprocess.Popen([str(BUILD / "vsr"), "serve", "--config", str(cfg), "--workers",
                                           str(WORKERS), "--log-level", "warn", "--access-log", "off",
                                           "--metrics-listen", f"127.0.0.1:{mport}"]))
            pids[name] = procs[-1].pid
            wait_http(f"http://127.0.0.1:{port}/health")
            modes[name] = (f"http://127.0.0.1:{port}/v1/chat/completions", f"http://127.0.0.1:{mport}/metrics")
        for url, _ in modes.values():
            wrk(url, str(script))  # warm-up, not recorded
        results = {name: [] for name in modes}
        cpu = {name: [] for name in modes}
        print(f"wrk -t1 -c{CONNS} -d{SECONDS}s, {ROUNDS} interleaved rounds, vsr --workers {WORKERS}, "
              f"{os.cpu_count()} cores")
        for r in range(ROUNDS):
            for name, (url, _) in modes.items():
                c0 = cpu_seconds([pids[name]])
                rps, p99, errors = wrk(url, str(script))
                us = (cpu_seconds([pids[name]]) - c0) / (rps * SECONDS) * 1e6
                results[name].append(rps)
                cpu[name].append(us)
                print(f"round {r + 1} {name:8s} {rps:10.0f} req/s  p99 {p99:6.2f} ms  {us:6.1f} us CPU/request  "
                      f"non-2xx {errors}")
        for name, v in results.items():
            print(f"mean {name:8s} {statistics.mean(v):10.0f} req/s  {statistics.mean(cpu[name]):6.1f} us CPU/request")
        off, on = statistics.mean(results["off"]), statistics.mean(results["sampled"])
        print(f"sampled/off: {on / off:.3f}")
        time.sleep(2)  # the last batch
        metrics = urllib.request.urlopen(modes["sampled"][1]).read().decode()
        for line in metrics.splitlines():
            if line.startswith("vsr_tracing_"):
                print(line)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=20)


if __name__ == "__main__":
    sys.exit(main())
