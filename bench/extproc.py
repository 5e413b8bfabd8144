#!/usr/bin/env python3
"""The ext_proc adapter's cost per request against standalone, on the same
request, and a Process stream's memory.

One Messages request (POST /v1/messages to a chat backend: translated both
ways, so the extproc path is the full four messages with a BUFFERED
response body) is sent N times, one at a time:
  - standalone: to vsr over HTTP/1.1 keep-alive; vsr calls fakellm;
  - extproc: a gRPC client plays Envoy over one HTTP/2 connection (request
    headers, request body, the backend called directly with vsr's
    mutations, response headers, response body).
Measured: vsr's CPU time per request (utime+stime of the vsr process, from
/proc, over the whole run: the client's own cost is not in it), and the
wall time of vsr's part of a request (standalone: the round trip minus the
direct backend call measured in the same run; extproc: the four
ProcessingRequest round trips).  Then 64 Process streams held open after
their request body: vsr's RSS before and after, per stream.

  bench/extproc.py [--vsr build/vsr] [--fakellm build/fakellm] [--requests 2000]
"""
import argparse
import http.client
import json
import os
import pathlib
import queue
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import cpu_seconds, free_port, rss_kb, wait_http

ROOT = pathlib.Path(__file__).resolve().parents[1]


def compile_protos(out):
    protos = [str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto" / "envoy").rglob("*.proto")]
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"), f"--python_out={out}",
                    f"--grpc_python_out={out}", *protos], check=True)
    sys.path.insert(0, str(out))


def doc(port, be_port, mgmt):
    return f"""version: v0.3
listeners: [{{name: main, address: 127.0.0.1, port: {port}}}]
providers:
  defaults: {{model: m}}
  models:
    - name: m
      provider_model_id: up-m
      backend_refs: [{{endpoint: "127.0.0.1:{be_port}"}}]
global:
  services:
    management_api: {{port: {mgmt}}}
"""


def start_vsr(args, tmp, name, extra):
    port, mgmt, metrics = free_port(), free_port(), free_port()
    cfg = pathlib.Path(tmp) / f"{name}.yaml"
    cfg.write_text(doc(port, args.be_port, mgmt))
    p = subprocess.Popen([args.vsr, "serve", "--config", str(cfg), "--workers", "1", "--access-log", "off",
                          "--metrics-listen", f"127.0.0.1:{metrics}", *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{metrics}/ready", what=name)
    return p, port


BODY = json.dumps({"model": "m", "max_tokens": 64,
                   "messages": [{"role": "user", "content": "Rivers carve the land; say so in one line."}]}).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default=str(ROOT / "build" / "vsr"))
    ap.add_argument("--fakellm", default=str(ROOT / "build" / "fakellm"))
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vsr-bench-extproc-")
    compile_protos(tmp)
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2 as m
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as g

    args.be_port = free_port()
    be = subprocess.Popen([args.fakellm, "--host", "127.0.0.1", "--port", str(args.be_port), "--threads", "1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [be]
    try:
        wait_http(f"http://127.0.0.1:{args.be_port}/health", what="fakellm")
        sa, sa_port = start_vsr(args, tmp, "standalone", [])
        xport = free_port()
        xp, _ = start_vsr(args, tmp, "extproc", ["--gateway", "extproc", "--extproc-listen", f"127.0.0.1:{xport}"])
        procs += [sa, xp]
        n = args.requests

        # ---- direct and standalone, interleaved ----
        direct = http.client.HTTPConnection("127.0.0.1", args.be_port)
        vsr_c = http.client.HTTPConnection("127.0.0.1", sa_port)
        chat = json.dumps({"model": "up-m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        t_direct, t_sa = [], []
        cpu0 = cpu_seconds([sa.pid])
        for _ in range(n):
            t0 = time.perf_counter()
            direct.request("POST", "/v1/chat/completions", chat, {"content-type": "application/json"})
            direct.getresponse().read()
            t1 = time.perf_counter()
            vsr_c.request("POST", "/v1/messages", BODY, {"content-type": "application/json"})
            r = vsr_c.getresponse()
            r.read()
            assert r.status == 200
            t2 = time.perf_counter()
            t_direct.append(t1 - t0)
            t_sa.append(t2 - t1)
        sa_cpu = (cpu_seconds([sa.pid]) - cpu0) / n

        # ---- extproc: one gRPC connection, one Process stream per request ----
        chan = grpc.insecure_channel(f"127.0.0.1:{xport}")
        stub = g.ExternalProcessorStub(chan)
        t_xp = []

        def headers(pairs, eos=False):
            hm = m.HttpHeaders(end_of_stream=eos)
            for k, v in pairs:
                hm.headers.headers.add(key=k, raw_value=v.encode())
            return hm
        cpu0 = cpu_seconds([xp.pid])
        for _ in range(n):
            q = queue.Queue()
            calls = stub.Process(iter(q.get, None), timeout=30)
            vsr_time = 0.0
            t0 = time.perf_counter()
            q.put(m.ProcessingRequest(request_headers=headers(
                [(":method", "POST"), (":path", "/v1/messages"), ("content-type", "application/json")])))
            next(calls)
            q.put(m.ProcessingRequest(request_body=m.HttpBody(body=BODY, end_of_stream=True)))
            a = next(calls)
            vsr_time += time.perf_counter() - t0
            up_body = a.request_body.response.body_mutation.body
            direct.request("POST", "/v1/chat/completions", up_body, {"content-type": "application/json"})
            resp = direct.getresponse()
            out = resp.read()
            t0 = time.perf_counter()
            q.put(m.ProcessingRequest(response_headers=headers(
                [(":status", "200"), ("content-type", "application/json"), ("content-length", str(len(out)))])))
            next(calls)
            q.put(m.ProcessingRequest(response_body=m.HttpBody(body=out, end_of_stream=True)))
            a = next(calls)
            assert b'"type":"message"' in a.response_body.response.body_mutation.body
            q.put(None)
            list(calls)
            vsr_time += time.perf_counter() - t0
            t_xp.append(vsr_time)
        xp_cpu = (cpu_seconds([xp.pid]) - cpu0) / n

        # ---- memory: Process streams held open after their request body ----
        before = rss_kb(xp.pid)
        held = []
        for _ in range(64):
            q = queue.Queue()
            calls = stub.Process(iter(q.get, None), timeout=60)
            q.put(m.ProcessingRequest(request_headers=headers(
                [(":method", "POST"), (":path", "/v1/messages"), ("content-type", "application/json")])))
            next(calls)
            q.put(m.ProcessingRequest(request_body=m.HttpBody(body=BODY, end_of_stream=True)))
            next(calls)
            held.append((q, calls))
        time.sleep(0.5)
        after = rss_kb(xp.pid)
        for q, calls in held:
            q.put(None)
            list(calls)
        chan.close()

        def p50(v):
            return statistics.median(v) * 1000
        def p90(v):
            return sorted(v)[int(len(v) * 0.9)] * 1000
        added = [s - d for s, d in zip(t_sa, t_direct)]
        print(f"requests={n} (a Messages request translated both ways, one at a time, vsr --workers 1)")
        print(f"standalone: vsr CPU {sa_cpu * 1e6:.0f} us/request; added wall p50 {p50(added):.3f} ms "
              f"p90 {p90(added):.3f} ms (round trip p50 {p50(t_sa):.3f} ms, direct {p50(t_direct):.3f} ms)")
        print(f"extproc:    vsr CPU {xp_cpu * 1e6:.0f} us/request; its four round trips p50 {p50(t_xp):.3f} ms "
              f"p90 {p90(t_xp):.3f} ms; ratio of CPU extproc/standalone {xp_cpu / sa_cpu:.2f}")
        print(f"streams held: 64 after their request body: RSS {before} kB -> {after} kB, "
              f"{(after - before) / 64:.1f} kB per stream")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=20)


if __name__ == "__main__":
    main()
