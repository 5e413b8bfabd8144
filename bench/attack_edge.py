#!/usr/bin/env python3
"""Hostile clients at the edge, measured: vsr's peak RSS, its CPU time and a
canary client's latency (GET /health on its own keep-alive connection, once
every 20 ms) while one attack runs, then whether vsr still answers and stops
on SIGTERM.  Everything is on loopback and bounded in time and count.

  fd         waves of plain connects (held, then closed) past a low descriptor limit
             (vsr runs under `prlimit --nofile=N:N`)
  pipeline   connections that pipeline GET /health without ever reading the replies
  slowloris  connections that send a request head one byte at a time

usage: bench/attack_edge.py --vsr build/vsr --fakellm build/fakellm [--attack fd|pipeline|slowloris|all]
"""
import argparse
import json
import os
import pathlib
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import cpu_seconds, free_port, rss_kb, wait_http  # noqa: E402

HEALTH = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"


def vsr_pid(proc):
    """The vsr process (prlimit execs it, so it is the same pid)."""
    return proc.pid


class Canary(threading.Thread):
    """GET /health on one keep-alive connection, reconnecting on failure."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.lat, self.errors = port, threading.Event(), [], 0

    def run(self):
        s = None
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                    s.settimeout(2)
                s.sendall(HEALTH)
                data = b""
                while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                    d = s.recv(4096)
                    if not d:
                        raise ConnectionError("closed")
                    data += d
                self.lat.append(time.monotonic() - t0)
            except OSError:
                self.errors += 1
                if s:
                    s.close()
                s = None
            self.stop.wait(0.02)
        if s:
            s.close()


def attack_fd(port, duration, stop):
    waves = 0
    end = time.monotonic() + duration
    while time.monotonic() < end and not stop.is_set() and waves < 5:
        held = []
        for _ in range(1100):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        time.sleep(3)
        for s in held:
            s.close()
        waves += 1
        time.sleep(0.5)
    return {"waves": waves, "connects_per_wave": 1100}


def attack_pipeline(port, duration, stop, conns=4, per_conn=32 << 20):
    blob = HEALTH * (65536 // len(HEALTH))
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.setblocking(False)
        socks.append([s, 0])
    end = time.monotonic() + duration
    while time.monotonic() < end and not stop.is_set():
        progressed = False
        for e in socks:
            if e[0] is None or e[1] >= per_conn:
                continue
            try:
                e[1] += e[0].send(blob)
                progressed = True
            except BlockingIOError:
                pass
            except OSError:
                e[0].close()
                e[0] = None
        if not progressed:
            time.sleep(0.01)
    sent = sum(e[1] for e in socks)
    closed = sum(1 for e in socks if e[0] is None)
    for e in socks:
        if e[0]:
            e[0].close()
    return {"connections": conns, "bytes_sent": sent, "closed_by_vsr": closed}


def attack_slowloris(port, duration, stop, conns=1000):
    socks = []
    for _ in range(conns):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    time.sleep(0.5)
    for s in socks:
        try:
            s.send(b"GET /health HTTP/1.1\r\nhost: x\r\nx-a: ")
        except OSError:
            pass
    end = time.monotonic() + duration
    while time.monotonic() < end and not stop.is_set():
        time.sleep(1)
        for s in socks:
            try:
                s.send(b"a")
            except OSError:
                pass
    # how many vsr closed: a read sees EOF/RST (or a 408) on those
    closed = 0
    for s in socks:
        try:
            d = s.recv(4096)
            closed += 1 if (not d or d.startswith(b"HTTP/1.1 408")) else 0
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    return {"connections": conns, "trickle_s": duration, "closed_by_vsr": closed}


def run(args, attack):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="attack-edge-"))
    port_file = tmp / "fakellm.port"
    fk = subprocess.Popen([args.fakellm, "--port", "0", "--port-file", str(port_file)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    while not port_file.exists():
        time.sleep(0.05)
    be = int(port_file.read_text())
    port, mport = free_port(), free_port()
    (tmp / "c.yaml").write_text(f"""version: v0.3
listeners:
  - name: main
    address: 127.0.0.1
    port: {port}
providers:
  models:
    - name: m
      backend_refs:
        - name: b
          endpoint: 127.0.0.1:{be}
global:
  services:
    management_api:
      port: {mport}
""")
    cmd = [args.vsr, "serve", "--config", str(tmp / "c.yaml"), "--workers", str(args.workers),
           "--metrics-listen", f"127.0.0.1:{free_port()}"]
    if attack == "fd":
        cmd = ["prlimit", f"--nofile={args.nofile}:{args.nofile}"] + cmd
    log = open(tmp / "vsr.log", "wb")
    vp = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health", what="vsr")
    pid = vsr_pid(vp)
    time.sleep(0.5)
    rss0, cpu0 = rss_kb(pid), cpu_seconds([pid])
    canary = Canary(port)
    canary.start()
    time.sleep(1)
    base_lat = list(canary.lat)
    stop = threading.Event()
    peak = [rss0]

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kb(pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    n_before = len(canary.lat)
    err_before = canary.errors
    t0 = time.monotonic()
    info = {"fd": attack_fd, "pipeline": attack_pipeline, "slowloris": attack_slowloris}[attack](
        port, args.duration, threading.Event())
    attack_s = time.monotonic() - t0
    cpu1 = cpu_seconds([pid])
    during = canary.lat[n_before:]
    errors = canary.errors - err_before
    stop.set()
    canary.stop.set()
    canary.join(5)
    # afterwards: does it still answer, and does SIGTERM stop it?
    recovered = None
    t1 = time.monotonic()
    while time.monotonic() - t1 < 15:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.settimeout(2)
                s.sendall(HEALTH)
                if s.recv(4096).startswith(b"HTTP/1.1 200"):
                    recovered = round(time.monotonic() - t1, 2)
                    break
        except OSError:
            time.sleep(0.2)
    vp.send_signal(signal.SIGTERM)
    try:
        vp.wait(20)
        term = "exited %d" % vp.returncode
    except subprocess.TimeoutExpired:
        vp.kill()
        vp.wait()
        term = "ignored SIGTERM (killed)"
    fk.terminate()
    fk.wait(10)
    log.close()
    q = lambda xs, p: round(1000 * statistics.quantiles(xs, n=100)[p - 1], 2) if len(xs) >= 2 else None  # noqa: E731
    return {
        "attack": attack, "vsr": args.vsr, "workers": args.workers, **info,
        "attack_seconds": round(attack_s, 1),
        "rss_mb_before": round(rss0 / 1024, 1), "rss_mb_peak": round(peak[0] / 1024, 1),
        "cpu_seconds_during": round(cpu1 - cpu0, 2),
        "canary_p50_ms_idle": q(base_lat, 50),
        "canary_p50_ms": q(during, 50), "canary_p99_ms": q(during, 99),
        "canary_ok": len(during), "canary_errors": errors,
        "health_after_s": recovered, "sigterm": term,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vsr", required=True)
    ap.add_argument("--fakellm", required=True)
    ap.add_argument("--attack", default="all", choices=["fd", "pipeline", "slowloris", "all"])
    ap.add_argument("--duration", type=float, default=15, help="seconds each attack lasts (at most)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--nofile", type=int, default=1024, help="vsr's descriptor limit for the fd attack")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    for attack in (["fd", "pipeline", "slowloris"] if args.attack == "all" else [args.attack]):
        print(json.dumps(run(args, attack)), flush=True)


if __name__ == "__main__":
    main()
