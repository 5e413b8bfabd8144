"""Reference documents vsr refused although the reference runs them: an
empty Looper endpoint, a tools database that does not exist, projection
score inputs in the reference's forms (a complexity level, model-backed
families, `type: projection`), and a provider model named like an auto
name.  Each one (tests/e2e/corpus/refdocs/) validates (test_refdocs.py) and
here serves and routes."""
import httpx

from conftest import GUARD_MODEL, MODEL_CACHE, USE_MODEL, require
from test_refdocs import serve


def chat(v, text, model="auto"):
    return v.post_chat({"model": model, "messages": [{"role": "user", "content": text}]}, timeout=60)


def test_looper_with_empty_endpoint_runs_in_process(vsr, fakellm):
    be = fakellm("be")
    v = serve(vsr, "looper-empty-endpoint.yaml", [be], workers=1)
    r = chat(v, "think hard about the halting problem")
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "escalate"
    assert be.stats()["requests"] >= 1


def test_missing_tools_database_is_a_warning(vsr, fakellm):
    be = fakellm("be")
    v = serve(vsr, "tools-db-missing.yaml", [be], workers=1)
    r = chat(v, "hello there")
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "greet"
    out = v.proc.output()
    assert 'tools_db.json" does not exist: running without the tools database' in out, out[-3000:]


def test_projection_inputs_in_the_reference_forms_route(vsr, fakellm):
    require([USE_MODEL, GUARD_MODEL])
    be = fakellm("be")
    v = serve(vsr, "projections-reference-inputs.yaml", [be], workers=1,
              env={"VSR_MODEL_CACHE": str(MODEL_CACHE)})
    r = chat(v, "Prove the theorem that there are infinitely many primes.")
    assert r.status_code == 200, r.text
    assert (r.headers["x-vsr-selected-decision"], r.headers["x-vsr-selected-model"]) == ("strong_route", "strong"), \
        dict(r.headers)
    r = chat(v, "hello there")
    assert r.status_code == 200, r.text
    assert (r.headers["x-vsr-selected-decision"], r.headers["x-vsr-selected-model"]) == ("fast_route", "fast"), \
        dict(r.headers)
    # the recipe's score reads the top-level block's keyword signal
    r = chat(v, "Prove the theorem that there are infinitely many primes.", model="vsr/careful")
    assert r.status_code == 200, r.text
    assert (r.headers["x-vsr-selected-decision"], r.headers["x-vsr-selected-model"]) == \
        ("careful_strong", "strong"), dict(r.headers)
    assert r.headers["x-vsr-selected-recipe"] == "careful"
    r = chat(v, "hello there", model="vsr/careful")
    assert r.status_code == 200 and "x-vsr-selected-decision" not in r.headers, dict(r.headers)


def test_provider_model_with_an_auto_name_is_routed(vsr, fakellm):
    be = fakellm("be")
    v = serve(vsr, "auto-name-model.yaml", [be], workers=1)
    r = chat(v, "write some python", model="MoM")
    assert r.status_code == 200, r.text
    assert (r.headers["x-vsr-selected-decision"], r.headers["x-vsr-selected-model"]) == ("code", "coder"), \
        dict(r.headers)
    r = chat(v, "write some python", model="coder")  # a concrete model passes through
    assert r.status_code == 200 and r.headers["x-vsr-selected-model"] == "coder"
    assert "x-vsr-selected-decision" not in r.headers


def test_workflow_role_with_several_models_routes(vsr, fakellm):
    be = fakellm("be")
    v = serve(vsr, "looper-role-models.yaml", [be], workers=1)
    r = chat(v, "fix the failing test in parser.c")
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "swe"
    steps = [(s["id"], s["model"]) for s in r.json()["workflow_steps"]]
    assert steps == [("planner", "planner"), ("patcher", "patcher-a"), ("patcher", "patcher-b"),
                     ("verifier", "verifier")], steps
    assert be.stats()["requests"] == 5   # four role calls and the final


def test_router_replay_postgres_without_a_server_block_starts(vsr, fakellm):
    be = fakellm("be")
    v = serve(vsr, "router-replay-postgres-stack.yaml", [be], workers=1)
    r = chat(v, "hello there")
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "everything"
    out = v.proc.output()
    assert "using the reference's local stack defaults on localhost:5432" in out, out[-3000:]
    assert "router-secret" not in out


def test_plugins_without_configuration_do_nothing(vsr, fakellm):
    be = fakellm("be")
    v = serve(vsr, "plugins-without-configuration.yaml", [be], workers=1)
    r = chat(v, "my ssn is 123")
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "block_private"
    assert r.headers["x-vsr-response-path"] == "upstream"   # no fast response: the model answers
    r = chat(v, "hello there")
    assert r.status_code == 200, r.text
    assert r.headers["x-vsr-selected-decision"] == "everything"
    assert be.stats()["requests"] == 2
    log = httpx.get(be.url + "/_fakellm/log", timeout=10).json()["entries"]
    assert all(e["body"].get("system") in (None, "") and e["body"]["n_messages"] == 1 for e in log), log


def test_document_without_provider_models_serves_and_answers_400(vsr):
    v = serve(vsr, "no-provider-models.yaml", [], workers=1)
    r = chat(v, "hello there")
    assert r.status_code == 400, r.text
    assert "no model selected" in r.text, r.text
    assert v.proc.p.poll() is None
