"""Activation latency: a configuration document written (file renamed over
the old one, or PUT to the management API) -> the first response served on
the new version, for a 1-model and a 1,000-model document.

    VSR_REL=build-rel python3 bench/config/activation_latency.py

VSR_REL is a release build directory holding vsr and fakellm."""
import http.client, os, pathlib, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchlib import free_port  # noqa: E402
REL = os.environ.get("VSR_REL", "build-rel")
D = tempfile.mkdtemp(prefix="vsr-activation-")


def doc(port, mport, bport, tag, n_models):
    models = "\n".join(f"    - name: m{i}\n      backend_refs: [{{endpoint: '127.0.0.1:{bport}'}}]" for i in range(n_models))
    return f"""version: v0.3
listeners:
  - {{name: main, address: 127.0.0.1, port: {port}}}
providers:
  defaults: {{model: m0}}
  models:
{models}
routing:
  decisions:
    - name: stamp
      modelRefs: [{{model: m0}}]
      plugins:
        - type: header_mutation
          configuration:
            add: [{{name: x-doc, value: "{tag}"}}]
global:
  services:
    management_api: {{port: {mport}}}
"""

BODY = b'{"model":"auto","messages":[{"role":"user","content":"hi"}]}'

def version(conn):
    conn.request("POST", "/v1/chat/completions", BODY, {"content-type": "application/json"})
    r = conn.getresponse(); r.read()
    return int(r.getheader("x-vsr-config-version"))

def run(n_models, reps=5):
    bport, port, mport = free_port(), free_port(), free_port()
    pf = f"{D}/fake.port"
    if os.path.exists(pf): os.remove(pf)
    fake = subprocess.Popen([f"{REL}/fakellm", "--host", "127.0.0.1", "--port", "0", "--port-file", pf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(pf): time.sleep(0.01)
    time.sleep(0.05); bport = int(open(pf).read())
    path = f"{D}/c-{n_models}.yaml"
    open(path, "w").write(doc(port, mport, bport, "t0", n_models))
    vsr = subprocess.Popen([f"{REL}/vsr", "serve", "--config", path, "--workers", "2", "--metrics-listen", "off", "--access-log", "off", "--log-level", "warn"])
    for _ in range(500):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port); v = version(c); break
        except Exception: time.sleep(0.02)
    file_lat, api_lat = [], []
    cur = v
    for i in range(reps):
        # file: written -> first request on the new version
        text = doc(port, mport, bport, f"f{i}", n_models)
        tmp = path + ".new"; open(tmp, "w").write(text)
        t0 = time.monotonic(); os.rename(tmp, path)
        while version(c) == cur: pass
        file_lat.append(time.monotonic() - t0); cur += 1
        # API: PUT sent -> first request on the new version
        text = doc(port, mport, bport, f"a{i}", n_models).encode()
        m = http.client.HTTPConnection("127.0.0.1", mport)
        t0 = time.monotonic()
        m.request("PUT", "/api/v1/config", text, {"content-type": "application/yaml"}); r = m.getresponse(); r.read()
        assert r.status == 200
        while version(c) == cur: pass
        api_lat.append(time.monotonic() - t0); cur += 1
        time.sleep(0.2)
    vsr.terminate(); vsr.wait(); fake.terminate(); fake.wait()
    ms = lambda xs: f"median {statistics.median(xs)*1000:.1f} ms (min {min(xs)*1000:.1f}, max {max(xs)*1000:.1f})"
    print(f"{n_models} models: file write -> first request on new version: {ms(file_lat)}; PUT -> first request: {ms(api_lat)}")

if __name__ == "__main__":
    for n in (1, 1000):
        run(n)
