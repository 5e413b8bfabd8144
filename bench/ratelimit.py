#!/usr/bin/env python3
"""Rate limits (docs/tenancy.md): how closely two replicas sharing one limit
through Redis hold it, and what a check adds to a request's latency.

1. Shared limit: a real redis-server, one fakellm, two vsr replicas with a
   local-limiter rule of BENCH_LIMIT requests per unit (default 100) whose
   buckets live in Redis; BENCH_CLIENTS threads per replica send requests as
   fast as they are answered for BENCH_WINDOWS whole windows.  Prints the
   requests admitted (200) in each whole window, both replicas together,
   against the limit.  The unit is BENCH_UNIT (default second: the window
   shortened from the issue's minute so that a run takes seconds; the
   script, the key and the count are the same for a minute).
2. Latency: one vsr at a time, no limiter / a local rule / a Redis-backed
   rule (limits never reached), one keep-alive client sending BENCH_N
   requests in sequence, in interleaved rounds (BENCH_ROUNDS).  Prints the
   median over the rounds of each variant's p50 and p99, and their ratio to
   no limiter's (a busy machine spoils single rounds; the median survives).

Environment: BUILD (default build), the BENCH_* above."""
import http.client
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import free_port, wait_http  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("BUILD", ROOT / "build"))
LIMIT = int(os.environ.get("BENCH_LIMIT", "100"))
UNIT = os.environ.get("BENCH_UNIT", "second")
UNIT_S = {"second": 1, "minute": 60}[UNIT]
WINDOWS = int(os.environ.get("BENCH_WINDOWS", "10"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))
N = int(os.environ.get("BENCH_N", "2000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
BODY = json.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "hi"}]})
HEADERS = {"content-type": "application/json", "authorization": "Bearer bench-key"}


def config(port, be_port, rules):
    return f"""version: v0.3
listeners:
  - name: bench
    address: 127.0.0.1
    port: {port}
    api_keys:
      - {{key: bench-key, user: bench-user}}
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
{rules}"""


def rules(limit, unit, redis_port=None):
    redis = f"          redis: {{address: \"127.0.0.1:{redis_port}\", timeout: 50ms}}\n" if redis_port else ""
    return f"""    ratelimit:
      fail_open: false
      providers:
        - type: local-limiter
{redis}          rules:
            - {{name: per-user, match: {{user: "*"}}, requests_per_unit: {limit}, unit: {unit}}}
"""


class Stack:
    def __init__(self, tmp):
        self.tmp, self.procs = tmp, []

    def start(self, args, name):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def vsr(self, be_port, rule_text, name):
        port = free_port()
        path = os.path.join(self.tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write(config(port, be_port, rule_text))
        self.start([str(BUILD / "vsr"), "serve", "--config", path, "--workers", "2",
                    "--metrics-listen", f"127.0.0.1:{free_port()}"], name)
        wait_http(f"http://127.0.0.1:{port}/ready", what=name)
        return port

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def post(conn):
    conn.request("POST", "/v1/chat/completions", body=BODY, headers=HEADERS)
    r = conn.getresponse()
    r.read()
    return r.status


def shared_limit(st, be_port):
    rport = free_port()
    st.start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--dir", st.tmp], "redis")
    time.sleep(0.3)
    ports = [st.vsr(be_port, rules(LIMIT, UNIT, rport), f"replica-{i}") for i in range(2)]
    # start just after a window begins, run whole windows, count 200s by the window they were answered in
    now = time.time()
    first = (int(now) // UNIT_S + 1) * UNIT_S + UNIT_S  # one window of warm-up load before the first counted one
    stop_at = first + WINDOWS * UNIT_S
    admitted, refused = {}, [0]
    lock = threading.Lock()

    def client(port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while True:
            s = post(conn)
            t = time.time()
            if t >= stop_at:
                return
            with lock:
                if s == 200:
                    w = int(t // UNIT_S) * UNIT_S
                    admitted[w] = admitted.get(w, 0) + 1
                else:
                    refused[0] += 1

    time.sleep(max(0.0, first - UNIT_S - time.time()))
    threads = [threading.Thread(target=client, args=(p,)) for p in ports for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counted = [admitted.get(first + i * UNIT_S, 0) for i in range(WINDOWS)]
    print(f"shared limit: {LIMIT} requests per {UNIT}, 2 replicas x {CLIENTS} clients, {WINDOWS} whole windows")
    print(f"  admitted per window: {counted}")
    mean = statistics.mean(counted)
    print(f"  mean {mean:.1f} (limit {LIMIT}: {100 * (mean - LIMIT) / LIMIT:+.2f}%), "
          f"min {min(counted)}, max {max(counted)}; refused (429) in all: {refused[0]}")
    return rport


def latency(st, be_port, rport):
    variants = [("none", ""), ("local", rules(10**9, "minute")), ("redis", rules(10**9, "minute", rport))]
    ports = {name: st.vsr(be_port, text, f"lat-{name}") for name, text in variants}
    res = {name: [] for name, _ in variants}
    for _ in range(ROUNDS):
        for name, _ in variants:
            conn = http.client.HTTPConnection("127.0.0.1", ports[name], timeout=10)
            for _ in range(200):  # warm-up: connections, the script's load in Redis
                post(conn)
            lat = []
            for _ in range(N):
                t0 = time.perf_counter()
                assert post(conn) == 200
                lat.append((time.perf_counter() - t0) * 1e6)
            conn.close()
            lat.sort()
            res[name].append((lat[len(lat) // 2], lat[int(len(lat) * 0.99)]))
    print(f"latency: {N} sequential requests per variant and round, {ROUNDS} interleaved rounds, median over rounds (µs)")
    base50 = statistics.median(p50 for p50, _ in res["none"])
    base99 = statistics.median(p99 for _, p99 in res["none"])
    for name, _ in variants:
        p50 = statistics.median(a for a, _ in res[name])
        p99 = statistics.median(b for _, b in res[name])
        print(f"  {name:6s} p50 {p50:8.0f}  p99 {p99:8.0f}   ratio to none: p50 {p50 / base50:.3f}  "
              f"p99 {p99 / base99:.3f}   (+{p50 - base50:.0f} / +{p99 - base99:.0f} µs)")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        st = Stack(tmp)
        try:
            be_port = free_port()
            st.start([str(BUILD / "fakellm"), "--host", "127.0.0.1", "--port", str(be_port)], "fakellm")
            wait_http(f"http://127.0.0.1:{be_port}/stats", what="fakellm")
            rport = shared_limit(st, be_port)
            latency(st, be_port, rport)
        finally:
            st.stop()


if __name__ == "__main__":
    main()
