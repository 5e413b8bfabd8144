#!/usr/bin/env python3
"""Start-up time of a document with four model-backed signal families
(tests/e2e/corpus/refdocs/installed-models.yaml: domains, jailbreak, pii,
embeddings, and no model_catalog: the managed runtime serves the installed
models): from the spawn of `vsr serve` to its first /ready 200, which waits
for the runtime child.  Prints each run, then min and median.

usage: bench/startup_models.py [--vsr build/vsr] [--fakellm build/fakellm] [--runs 5]"""
import argparse
import pathlib
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from benchlib import free_port

DOC = pathlib.Path(__file__).resolve().parents[1] / "tests" / "e2e" / "corpus" / "refdocs" / "installed-models.yaml"


def ready(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--fakellm", default="build/fakellm")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    bport = free_port()
    backend = subprocess.Popen([a.fakellm, "--host", "127.0.0.1", "--port", str(bport), "--name", "b"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = []
    try:
        with tempfile.TemporaryDirectory(prefix="vsrstart") as tmp:
            for i in range(a.runs):
                port = free_port()
                cfg = pathlib.Path(tmp) / f"c{i}.yaml"
                cfg.write_text(DOC.read_text().replace("127.0.0.1:18000", f"127.0.0.1:{bport}")
                               .replace("port: 8899", f"port: {port}"))
                t0 = time.monotonic()
                v = subprocess.Popen([a.vsr, "serve", "--config", str(cfg), "--metrics-listen", "off"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    while not ready(f"http://127.0.0.1:{port}/ready"):
                        if v.poll() is not None:
                            raise SystemExit(f"vsr exited with {v.returncode} (are the models installed? "
                                             "scripts/setup-deps)")
                        if time.monotonic() - t0 > 60:
                            raise SystemExit("vsr not ready within 60 s")
                        time.sleep(0.005)
                    times.append(time.monotonic() - t0)
                finally:
                    v.send_signal(signal.SIGTERM)
                    v.wait(30)
    finally:
        backend.terminate()
        backend.wait()
    print("runs (s):", " ".join(f"{t:.3f}" for t in times))
    print(f"min {min(times):.3f} s, median {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
