"""decisions[].action {type: route, destination} and decisions[].candidateIterations, with the reference's
meaning: the action names the model the decision routes to; an iteration over `models` that outputs its
variable adds those models to the decision's candidates (as the reference's DSL compiler does), and every
iteration is checked as the reference's validator checks it. The keys that stay refused say why."""
import subprocess

from conftest import VSR_BIN, config_yaml, free_port, model_yaml


def document(decision, backend="127.0.0.1:9", port=None):
    cfg = config_yaml(port or free_port(), [model_yaml("m1", [backend]), model_yaml("m2", [backend]),
                                            model_yaml("m3", [backend])], default="m1")
    return cfg.replace("\nglobal:", f"""
routing:
  signals:
    keywords:
      - {{name: math, operator: OR, keywords: ["integral"]}}
  decisions:
    - name: math_route
      rules: {{operator: OR, conditions: [{{type: keyword, name: math}}]}}
{decision}
global:""", 1)


def validate(tmp_path, decision):
    path = tmp_path / "c.yaml"
    path.write_text(document(decision))
    return subprocess.run([VSR_BIN, "config", "validate", str(path)], capture_output=True, text=True, timeout=30)


def selected(tmp_path, decision, prompt="the integral of x"):
    path = tmp_path / "c.yaml"
    path.write_text(document(decision))
    r = subprocess.run([VSR_BIN, "eval", "--config", str(path), "--prompt", prompt], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return [l.split(": ", 1)[1] for l in r.stdout.splitlines() if l.startswith("selected model: ")][0]


def test_action_routes_to_its_destination(vsr, fakellm, tmp_path):
    assert selected(tmp_path, "      action: {type: route, destination: m2}") == "m2"
    b = fakellm("b")
    port = free_port()
    v = vsr(document("      action: {type: route, destination: m3}", backend=b.endpoint, port=port), port=port)
    r = v.post_chat({"model": "auto", "messages": [{"role": "user", "content": "the integral of x"}]})
    assert r.status_code == 200 and r.headers["x-vsr-selected-model"] == "m3"
    assert r.headers["x-vsr-selected-decision"] == "math_route"


def test_action_errors(tmp_path):
    r = validate(tmp_path, "      action: {type: route, destination: nope}")
    assert r.returncode == 2 and 'model "nope" is not defined' in r.stderr, r.stderr
    r = validate(tmp_path, "      action: {type: redirect, destination: m2}")
    assert r.returncode == 2 and 'type must be "route"' in r.stderr, r.stderr
    r = validate(tmp_path, "      action: {type: route}")
    assert r.returncode == 2 and 'missing required key "destination"' in r.stderr, r.stderr
    r = validate(tmp_path, "      modelRefs: [{model: m1}]\n      action: {type: route, destination: m2}")
    assert r.returncode == 2 and "action.destination and modelRefs both say" in r.stderr, r.stderr
    # the same model both ways is one statement
    assert validate(tmp_path, "      modelRefs: [{model: m2}]\n      action: {type: route, destination: m2}"
                    ).returncode == 0


def test_iteration_over_models_adds_candidates(tmp_path):
    it = ("      candidateIterations:\n"
          "        - {variable: m, source: models, models: [{model: m3}, {model: m2}],"
          " outputs: [{type: model, value: m}]}")
    assert selected(tmp_path, it) == "m3"
    # after the decision's own refs, each model once
    assert selected(tmp_path, "      modelRefs: [{model: m2}]\n" + it) == "m2"
    # without a model output it is metadata only: no candidate, the default model
    meta = ("      candidateIterations:\n"
            "        - {variable: m, source: models, models: [{model: m3}]}")
    assert selected(tmp_path, meta) == "m1"
    # over the decision's candidates: metadata, the refs decide
    cand = ("      modelRefs: [{model: m2}]\n      candidateIterations:\n"
            "        - {variable: m, source: decision.candidates, outputs: [{type: model, value: m}]}")
    assert selected(tmp_path, cand) == "m2"


def test_iteration_errors(tmp_path):
    cases = [
        ("{variable: m, source: everything}", 'source must be "decision.candidates" or "models"'),
        ("{variable: m, source: models}", "source models requires at least one model"),
        ("{variable: m, source: decision.candidates}", "source decision.candidates requires non-empty modelRefs"),
        ("{source: models, models: [{model: m2}]}", 'missing required key "variable"'),
        ("{variable: m, source: models, models: [{model: m2}], outputs: [{type: list, value: m}]}",
         'unsupported output type "list"'),
        ("{variable: m, source: models, models: [{model: m2}], outputs: [{type: model, value: x}]}",
         'a model output must reference the variable "m"'),
        ("{variable: m, source: models, models: [{model: zz}], outputs: [{type: model, value: m}]}",
         'model "zz" is not defined'),
    ]
    for it, want in cases:
        r = validate(tmp_path, f"      candidateIterations: [{it}]")
        assert r.returncode == 2 and want in r.stderr, (it, r.stderr)


def test_refused_keys_say_why(tmp_path):
    cases = [
        ("routing:\n  data_policy: {allowed_regions: [eu]}\n", "routing.data_policy is not supported yet ("),
        ("routing:\n  candidate_requirements: {capabilities: [vision]}\n",
         "routing.candidate_requirements is not supported yet ("),
        ("entrypoints: [{model_names: [x], rules: [{name: r, recipe: default}]}]\n",
         "entrypoints[].rules is not supported yet ("),
        ("routing:\n  signals:\n    conversation:\n"
         "      - {name: c, feature: {type: exists, source: {type: flow_tool_state}}}\n",
         'conversation source type "flow_tool_state" is not supported yet ('),
    ]
    for extra, want in cases:
        path = tmp_path / "c.yaml"
        path.write_text(config_yaml(free_port(), [model_yaml("m1", ["127.0.0.1:9"])], default="m1") + extra)
        r = subprocess.run([VSR_BIN, "config", "validate", str(path)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and want in r.stderr, (extra, r.stderr)
