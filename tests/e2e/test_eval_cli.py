"""`vsr eval --prompt TEXT`: the signals that fired, the decision and the model, from a running vsr's routing
preview (--endpoint) or offline from a document (--config); a summary, or --json."""
import json
import subprocess

from conftest import VSR_BIN, free_port

TOKEN = "eval-token-0123456789abcdef"


def document(port, mport, backend, mgmt_extra=""):
    return f"""version: v0.3
listeners:
  - name: main
    address: 127.0.0.1
    port: {port}
providers:
  defaults:
    model: m1
  models:
    - name: m1
      backend_refs:
        - name: b0
          endpoint: {backend}
    - name: m2
      backend_refs:
        - name: b0
          endpoint: {backend}
routing:
  signals:
    keywords:
      - {{name: math, operator: OR, keywords: ["integral", "derivative"]}}
      - {{name: urgent, operator: OR, keywords: ["asap"]}}
  decisions:
    - name: math_route
      priority: 10
      rules: {{operator: AND, conditions: [{{type: keyword, name: math}}, {{type: keyword, name: urgent}}]}}
      modelRefs: [{{model: m2}}]
      plugins:
        - type: system_prompt
          configuration: {{system_prompt: "You are a mathematician."}}
global:
  services:
    management_api:
      port: {mport}
{mgmt_extra}"""


def run(*args, env=None):
    return subprocess.run([VSR_BIN, "eval", *args], capture_output=True, text=True, timeout=60, env=env)


def offline_doc(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text(document(free_port(), free_port(), "127.0.0.1:9"))
    return str(path)


def test_offline_summary_names_signals_decision_and_model(tmp_path):
    path = offline_doc(tmp_path)
    r = run("--config", path, "--prompt", "the integral of x, asap")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "decision: math_route" in lines and "selected model: m2" in lines, r.stdout
    assert "plugins: system_prompt" in lines and "selection: matched" in lines
    assert "matched signals: 2" in lines and "  - keywords:math: 1.00" in lines and "  - keywords:urgent: 1.00" in lines
    # no decision: the default model, and the signal that fired alone
    r = run("--config", path, "--prompt", "the integral of x")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "decision: (none)" in lines and "selected model: m1" in lines and "selection: default" in lines
    assert "matched signals: 1" in lines and "unmatched signals: 1" in lines


def test_offline_json_is_the_preview_with_its_trace(tmp_path):
    r = run("--config", offline_doc(tmp_path), "--prompt", "derivative asap", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["decision_result"]["decision_name"] == "math_route" and out["selected_model"] == "m2"
    assert out["signal_confidences"] == {"keywords:math": 1.0, "keywords:urgent": 1.0}
    assert out["eval_trace"][0]["decision"] == "math_route" and out["eval_trace"][0]["matched"] is True


def test_online_matches_offline(vsr, fakellm, tmp_path):
    b = fakellm("b")
    port, mport = free_port(), free_port()
    v = vsr(document(port, mport, b.endpoint), port=port)
    online = run("--endpoint", f"http://127.0.0.1:{mport}", "--prompt", "the integral of x, asap", "--json")
    assert online.returncode == 0, online.stderr
    offline = run("--config", str(v.config_path), "--prompt", "the integral of x, asap", "--json")
    assert json.loads(online.stdout) == json.loads(offline.stdout)
    r = run("--endpoint", f"http://127.0.0.1:{mport}/", "--prompt", "asap", "--model", "m1")
    assert r.returncode == 0 and "selection: passthrough" in r.stdout and "selected model: m1" in r.stdout, r.stdout
    r = run("--endpoint", f"http://127.0.0.1:{mport}", "--prompt", "asap", "--model", "nope")
    assert r.returncode == 1 and "the router answered 400" in r.stderr and '"nope" is not available' in r.stderr


def test_online_with_a_management_token(vsr, fakellm, tmp_path):
    b = fakellm("b")
    port, mport = free_port(), free_port()
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    vsr(document(port, mport, b.endpoint), port=port, extra_args=("--management-token-file", str(tf)))
    url = f"http://127.0.0.1:{mport}"
    r = run("--endpoint", url, "--prompt", "derivative asap")
    assert r.returncode == 1 and "the router answered 401" in r.stderr, r.stderr
    r = run("--endpoint", url, "--prompt", "derivative asap", "--token-file", str(tf))
    assert r.returncode == 0 and "decision: math_route" in r.stdout, r.stderr
    r = run("--endpoint", url, "--prompt", "derivative asap", "--token-env", "VSR_EVAL_TOKEN",
            env={"VSR_EVAL_TOKEN": TOKEN})
    assert r.returncode == 0 and "decision: math_route" in r.stdout, r.stderr
    assert TOKEN not in r.stdout + r.stderr


def test_errors_and_usage(tmp_path):
    assert run("--prompt", "x", "--endpoint", f"http://127.0.0.1:{free_port()}").returncode == 1
    assert run("--prompt", "   ").returncode == 64
    assert run().returncode == 64
    assert run("--prompt", "x", "--config", "a.yaml", "--endpoint", "http://127.0.0.1:1").returncode == 64
    assert run("--prompt", "x", "--endpoint", "https://127.0.0.1:1").returncode == 64
    assert run("--prompt", "x", "--timeout", "0").returncode == 64
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v0.3\nlisteners: 3\n")
    r = run("--prompt", "x", "--config", str(bad))
    assert r.returncode == 2 and "bad.yaml:" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "--prompt TEXT" in r.stdout
    r = subprocess.run([VSR_BIN, "--help"], capture_output=True, text=True, timeout=20)
    assert "vsr eval --prompt TEXT" in r.stdout
