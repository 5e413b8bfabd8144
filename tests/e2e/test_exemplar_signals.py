"""The fact_check, user_feedbacks and modality families end to end with the
runtime as vsr's child and the real sentence-embedding model (the banks are
built in: the test embedder would say nothing about them): evident cases
route to their decisions.  Without the model the routing test skips, and
fails under CI=1.  And a name that is not a label is refused at its place."""
import subprocess

import pytest

from conftest import ENV, USE_MODEL, VSR_BIN, debug_chat, free_port, require, signal_doc

MODEL = USE_MODEL


def doc(port, backend):
    return signal_doc(port, backend, ["general", "checker", "fixer", "painter"], f"""routing:
  signals:
    fact_check:
      - {{name: needs_fact_check, description: "factual questions"}}
    user_feedbacks:
      - {{name: wrong_answer}}
    modality:
      - {{name: DIFFUSION}}
  decisions:
    - name: fix
      priority: 30
      rules: {{type: user_feedback, name: wrong_answer}}
      modelRefs: [{{model: fixer}}]
    - name: paint
      priority: 20
      rules: {{type: modality, name: DIFFUSION}}
      modelRefs: [{{model: painter}}]
    - name: check
      priority: 10
      rules: {{type: fact_check, name: needs_fact_check}}
      modelRefs: [{{model: checker}}]
global:
  services:
    management_api: {{port: {free_port()}}}
  model_catalog:
    runtime:
      model: {MODEL}
      timeout: 60s   # the first request embeds the banks: seconds under the sanitizers on a loaded machine
""")


def chat(v, messages):
    r = debug_chat(v, messages)
    assert r.status_code == 200, r.text
    return r.headers["x-vsr-selected-model"]


def test_real_model_routes_the_evident_cases(vsr, fakellm):
    require([MODEL], what="embedding model")
    be = fakellm("be")
    port = free_port()
    v = vsr(doc(port, be.endpoint), workers=1, port=port)
    u = lambda t: {"role": "user", "content": t}  # noqa: E731
    assert chat(v, [u("In what year did the French Revolution begin?")]) == "checker"
    assert chat(v, [u("Write a funny poem about my neighbour's goat.")]) == "general"
    assert chat(v, [u("Generate an image of a red fox in a snowy forest.")]) == "painter"
    prior = [u("What is 12 times 12?"), {"role": "assistant", "content": "12 times 12 is 124."}]
    assert chat(v, prior + [u("That's wrong, your answer is incorrect.")]) == "fixer"
    assert chat(v, prior + [u("Thanks, perfect!")]) == "general"
    # no assistant reply before it: user_feedbacks asks nothing
    assert chat(v, [u("That's wrong, your answer is incorrect.")]) != "fixer"


@pytest.mark.parametrize("family,cond,name,needle", [
    ("modality", "modality", "image", 'must be "AR", "DIFFUSION" or "BOTH"'),
])
def test_a_name_that_is_not_a_label_is_refused_at_its_place(tmp_path, family, cond, name, needle):
    path = tmp_path / "c.yaml"
    path.write_text(f"""version: v0.3
providers:
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
routing:
  signals:
    {family}:
      - name: {name}
  decisions:
    - {{name: d, rules: {{type: {cond}, name: {name}}}, modelRefs: [{{model: m}}]}}
""")
    p = subprocess.run([VSR_BIN, "config", "validate", str(path)], env=ENV, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"c.yaml:8:15: name {needle}" in p.stderr, p.stderr
