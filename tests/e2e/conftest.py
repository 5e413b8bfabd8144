"""Fixtures for the end-to-end suite: the real vsr binary and real fakellm
backends on ephemeral loopback ports.  Every process a test starts is stopped
by the fixture, and must exit cleanly with no sanitizer report."""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import httpx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
VSR_BIN = os.environ.get("VSR_BIN", str(ROOT / "build-asan" / "vsr"))
FAKELLM_BIN = os.environ.get("FAKELLM_BIN", str(ROOT / "build-asan" / "fakellm"))

# The model cache scripts/setup-deps fills (VSR_MODEL_CACHE overrides it).
MODEL_CACHE = pathlib.Path(os.environ.get("VSR_MODEL_CACHE", pathlib.Path.home() / ".cache" / "vsr" / "models"))
USE_MODEL = MODEL_CACHE / "use-lite.vsrm"
GUARD_MODEL = MODEL_CACHE / "llm_guardrail"


def require(paths=(), commands=(), what="model files"):
    """Skips the calling test when a file or command it needs is absent;
    under CI, where scripts/setup-deps has run, that is a failure instead."""
    missing = [str(p) for p in paths if not pathlib.Path(p).exists()]
    missing += [c for c in commands if shutil.which(c) is None]
    if missing:
        reason = f"{what} absent (run scripts/setup-deps): " + ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")
ENV = dict(os.environ,
           ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=66",
           UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=67")


def pytest_configure(config):
    config.addinivalue_line("markers", "looper: multi-model request graphs (confidence, ratings, remom, fusion)")


_handed_out = set()


def free_port():
    """A free loopback port, never one handed out before in this run: the
    kernel may offer a just-released port again, and vsr binds its listeners
    with SO_REUSEPORT, so two of them given the same port would share it."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_until(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Proc:
    def __init__(self, args, logdir, name, env=None):
        self.name = name
        self.log_path = logdir / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=dict(ENV, **(env or {})),
                                  stdin=subprocess.DEVNULL)
        self.rc = None

    def output(self):
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                raise AssertionError(f"{self.name} did not exit within {timeout}s of {sig.name}")
        self.rc = self.p.returncode
        self.log.close()
        return self.rc

    def assert_clean_exit(self):
        out = self.output() if not self.log.closed else self.log_path.read_text(errors="replace")
        for mark in SANITIZER_MARKS:
            assert mark not in out, f"{self.name}: sanitizer report:\n{out[-6000:]}"
        assert self.rc == 0, f"{self.name} exited {self.rc}:\n{out[-3000:]}"


class Backend:
    def __init__(self, proc, port, name):
        self.proc, self.port, self.name = proc, port, name
        self.url = f"http://127.0.0.1:{port}"
        self.endpoint = f"127.0.0.1:{port}"

    def stats(self):
        return httpx.get(self.url + "/stats", timeout=5).json()


@pytest.fixture
def fakellm(tmp_path):
    started = []

    def start(name=None, args=()):
        port_file = tmp_path / f"fakellm-{len(started)}.port"
        name = name or f"backend-{len(started)}"
        proc = Proc([FAKELLM_BIN, "--host", "127.0.0.1", "--port", "0", "--name", name,
                     "--port-file", str(port_file), *args], tmp_path, name)
        started.append(proc)
        wait_until(lambda: port_file.exists() or proc.p.poll() is not None, what=f"{name} port file")
        assert proc.p.poll() is None, proc.output()
        return Backend(proc, int(port_file.read_text().strip()), name)

    yield start
    for proc in started:
        proc.stop()
    for proc in started:
        proc.assert_clean_exit()


def model_yaml(name, backends, provider_model_id=None):
    """backends: list of endpoint strings or dicts of backend_ref fields."""
    lines = [f"    - name: {name}"]
    if provider_model_id:
        lines.append(f"      provider_model_id: {provider_model_id}")
    lines.append("      backend_refs:")
    for i, b in enumerate(backends):
        if isinstance(b, str):
            b = {"endpoint": b}
        b = dict(b)
        b.setdefault("name", f"b{i}")
        first = True
        for k, v in b.items():
            lines.append(f"        {'- ' if first else '  '}{k}: {v}")
            first = False
    return "\n".join(lines)


def config_yaml(port, models, default=None, listener_extra="", global_extra=""):
    """A document with one listener on `port`; its management API gets a free
    port of its own so that parallel runs never collide on the default 8080."""
    text = f"""version: v0.3
listeners:
  - name: main
    address: 127.0.0.1
    port: {port}
{listener_extra}
providers:
"""
    if default:
        text += f"  defaults:\n    model: {default}\n"
    text += "  models:\n" + "\n".join(models) + "\n"
    text += f"""global:
  router:
    include_config_models_in_list: true
  services:
    management_api:
      port: {free_port()}
{global_extra}"""
    return text


def signal_doc(port, backend, models, rest, timeout="30s"):
    """The scaffolding the signal families' tests share: a v0.3 document with
    one listener on `port` (its `timeout`) and a provider model for each name
    in `models` on `backend`, the first one the default (an entry that starts
    with "{" is a model written out in full), followed by `rest` (the routing
    and global blocks) as given."""
    first = models[0]
    lines = ["version: v0.3",
             "listeners:",
             f"  - {{name: l, address: 127.0.0.1, port: {port}, timeout: {timeout}}}",
             "providers:",
             f"  defaults: {{model: {first}}}",
             "  models:"]
    for m in models:
        lines.append(f"    - {m}" if m.startswith("{") else f'    - {{name: {m}, backend_refs: [{{endpoint: "{backend}"}}]}}')
    return "\n".join(lines) + "\n" + rest


def debug_chat(v, messages, timeout=60):
    """One chat request to `v` with model "auto" and x-vsr-debug (so the
    decision's evidence comes back in headers); `messages` is the list, or
    one user turn's text."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    with httpx.Client(base_url=v.url, timeout=timeout) as c:
        return c.post("/v1/chat/completions", headers={"x-vsr-debug": "true"},
                      json={"model": "auto", "messages": messages})


class Vsr:
    def __init__(self, proc, port, config_path):
        self.proc, self.port, self.config_path = proc, port, config_path
        self.url = f"http://127.0.0.1:{port}"

    def client(self, **kw):
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 30), **kw)

    def post_chat(self, body, headers=None, **kw):
        with self.client() as c:
            return c.post("/v1/chat/completions", json=body, headers=headers or {}, **kw)


@pytest.fixture
def vsr(tmp_path):
    started = []

    def start(config_text, workers=2, port=None, wait_ready=True, extra_args=(), env=None):
        path = tmp_path / f"config-{len(started)}.yaml"
        path.write_text(config_text)
        metrics_port = free_port()   # never the default 9190: parallel runs must not collide
        proc = Proc([VSR_BIN, "serve", "--config", str(path), "--workers", str(workers),
                     "--metrics-listen", f"127.0.0.1:{metrics_port}", *extra_args],
                    tmp_path, f"vsr-{len(started)}", env=env)
        started.append(proc)
        v = Vsr(proc, port, path)
        v.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        if wait_ready:
            def ready():
                assert proc.p.poll() is None, proc.output()
                try:
                    return httpx.get(v.url + "/ready", timeout=1).status_code == 200
                except httpx.TransportError:
                    return False
            wait_until(ready, what="vsr /ready")
        return v

    yield start
    # every process is stopped before any is judged: a failed check must not leave the others running
    stopped = [proc for proc in started if proc.p.poll() is None]
    errors = []
    for proc in stopped:
        try:
            proc.stop()
        except AssertionError as e:
            errors.append(e)
    for proc in stopped:
        if proc.rc is not None:
            proc.assert_clean_exit()
    if errors:
        raise errors[0]


@pytest.fixture
def stack(vsr, fakellm):
    """vsr in front of two backends of model `m1` (provider id `m1-upstream`)
    and one backend of model `m2`, with m1 the default."""
    a, b, c = fakellm("a"), fakellm("b"), fakellm("c")
    port = free_port()
    cfg = config_yaml(port, [model_yaml("m1", [a.endpoint, b.endpoint], "m1-upstream"),
                             model_yaml("m2", [c.endpoint])], default="m1",
                      global_extra="    response_api:\n      enabled: true\n")
    v = vsr(cfg, port=port)
    v.backends = (a, b, c)
    return v


def echo(resp):
    """The request the backend received, as fakellm echoes it."""
    return resp.json()["fakellm"]["request"]


def sse_events(text):
    return [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]


def raw_request(port, data, read_timeout=5.0):
    """Sends raw bytes and reads until the server closes (or the timeout);
    returns (bytes received, closed_by_server)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(read_timeout)
    s.sendall(data)
    chunks, closed = [], False
    try:
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            chunks.append(d)
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return b"".join(chunks), closed


def json_body(resp_bytes):
    head, _, body = resp_bytes.partition(b"\r\n\r\n")
    return head.decode(), json.loads(body) if body else None
