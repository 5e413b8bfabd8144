#!/usr/bin/env python3
"""The model runtime's call, measured from its client's side: one /v1/bundle
with one embed task over the Unix socket, on one keep-alive connection, one
call at a time.  Prints the wall time of the call (p50/p99) next to the
runtime's own Server-Timing (queue, compute), and the share of the call spent
outside them (socket, HTTP, JSON on both sides, this client).

usage: bench/runtime_call.py [--vsr build/vsr] [--calls N] [--embedder-args ...]
It starts `vsr runtime serve --embedder hash --threads 1 --cache-entries 0`
on a temporary socket (or uses --socket PATH of a runtime already running)."""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--socket", help="a runtime already serving on this socket")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--text", default="how do I sort a list of tuples by the second element in python")
    a = ap.parse_args()
    proc = None
    tmp = tempfile.mkdtemp(prefix="vsrrtb", dir="/tmp")
    sock = a.socket
    if sock is None:
        sock = os.path.join(tmp, "rt.sock")
        proc = subprocess.Popen([a.vsr, "runtime", "serve", "--socket", sock, "--embedder", "hash", "--threads", "1",
                                 "--cache-entries", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.02)
    try:
        body = json.dumps({"tasks": [{"id": "q", "embed": {"input": [a.text]}}],
                           "options": {"deadline_ms": 1000}}).encode()
        req = (b"POST /v1/bundle HTTP/1.1\r\nhost: runtime\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\n\r\n%s" % (len(body), body))
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(sock)

        def call():
            t0 = time.perf_counter_ns()
            s.sendall(req)
            buf = b""
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise SystemExit("the runtime closed the connection")
                buf += chunk
                i = buf.find(b"\r\n\r\n")
                if i >= 0:
                    m = re.search(rb"content-length: (\d+)", buf[:i])
                    if len(buf) >= i + 4 + int(m.group(1)):
                        break
            wall = (time.perf_counter_ns() - t0) / 1e6
            st = re.search(rb"queue;dur=([\d.]+), compute;dur=([\d.]+)", buf)
            return wall, float(st.group(1)), float(st.group(2))

        for _ in range(min(200, a.calls)):
            call()
        rows = [call() for _ in range(a.calls)]
        w = sorted(r[0] for r in rows)
        q = statistics.median(r[1] for r in rows)
        c = statistics.median(r[2] for r in rows)
        p50, p99 = w[len(w) // 2], w[int(len(w) * 0.99)]
        print(f"calls={len(rows)} wall p50={p50:.3f} ms p99={p99:.3f} ms; server-timing p50 queue={q:.3f} ms "
              f"compute={c:.3f} ms; outside the runtime's queue+compute: {p50 - q - c:.3f} ms "
              f"({(p50 - q - c) / p50 * 100:.0f}% of the call)")
    finally:
        if proc:
            proc.terminate()
            proc.wait(10)
        try:
            os.unlink(os.path.join(tmp, "rt.sock"))
        except OSError:
            pass
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
