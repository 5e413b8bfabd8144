"""Requests/s steady vs during a reload storm (a PUT /api/v1/config every
10 ms), with wrk -t2 -c32 posting chat completions.

    VSR_REL=build-rel python3 bench/config/reload_storm.py [N_MODELS]
"""
import http.client, os, pathlib, subprocess, sys, time, threading, re
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from activation_latency import doc, free_port, REL, D
LUA = str(pathlib.Path(__file__).parent / "post.lua")
def wrk(port, secs):
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{secs}s", "-s", LUA, f"http://127.0.0.1:{port}/v1/chat/completions"], capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    return rps, non2xx.group(1) if non2xx else "0", errs.group(1) if errs else "none"
pf = f"{D}/fake2.port"
if os.path.exists(pf): os.remove(pf)
fake = subprocess.Popen([f"{REL}/fakellm", "--host", "127.0.0.1", "--port", "0", "--port-file", pf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not os.path.exists(pf): time.sleep(0.01)
time.sleep(0.05); bport = int(open(pf).read())
port, mport = free_port(), free_port()
n_models = int(sys.argv[1]) if len(sys.argv) > 1 else 1
path = f"{D}/storm.yaml"; open(path, "w").write(doc(port, mport, bport, "t0", n_models))
vsr = subprocess.Popen([f"{REL}/vsr", "serve", "--config", path, "--workers", "2", "--metrics-listen", "off", "--access-log", "off", "--log-level", "warn"])
time.sleep(1)
steady = wrk(port, 10)
stop = False; n = [0]
def storm():
    i = 0
    m = http.client.HTTPConnection("127.0.0.1", mport)
    while not stop:
        m.request("PUT", "/api/v1/config", doc(port, mport, bport, f"s{i}", n_models).encode(), {"content-type": "application/yaml"})
        r = m.getresponse(); r.read(); assert r.status == 200, r.status
        i += 1; n[0] += 1
        time.sleep(0.01)
t = threading.Thread(target=storm); t.start()
stormy = wrk(port, 10)
stop = True; t.join()
print(f"{n_models} models: steady {steady[0]:.0f} req/s (non-2xx {steady[1]}, socket errors {steady[2]}); "
      f"during a reload storm ({n[0]} activations in 10 s) {stormy[0]:.0f} req/s (non-2xx {stormy[1]}, socket errors {stormy[2]})")
vsr.terminate(); vsr.wait(); fake.terminate(); fake.wait()
