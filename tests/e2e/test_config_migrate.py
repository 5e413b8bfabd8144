"""vsr config migrate: a pre-v0.3 document (tests/e2e/data/legacy-config.yaml,
the flat layout: vllm_endpoints + model_config, flat signal lists, top-level
decisions and global blocks) becomes a v0.3 document that validates, puts
each field where v0.3 keeps it, and routes as the legacy one meant."""
import os
import pathlib
import subprocess

import httpx
import yaml

from conftest import VSR_BIN, echo, free_port

LEGACY = pathlib.Path(__file__).parent / "data" / "legacy-config.yaml"


def migrate(*args, cwd=None):
    return subprocess.run([VSR_BIN, "config", "migrate", *map(str, args)], capture_output=True, text=True,
                          timeout=30, cwd=cwd)


def test_realistic_document_migrates_validates_and_lands_in_place(tmp_path):
    r = migrate(LEGACY)
    assert r.returncode == 0, r.stderr
    # the one value whose meaning changed is named, with its position
    assert f"{LEGACY}:9:12: note: semantic_cache.enabled is not carried" in r.stderr
    out = tmp_path / "migrated.yaml"
    out.write_text(r.stdout)
    v = subprocess.run([VSR_BIN, "config", "validate", str(out)], capture_output=True, text=True, timeout=30)
    assert v.returncode == 0, v.stderr
    assert "valid (1 listener, 3 models)" in v.stdout

    doc = yaml.safe_load(r.stdout)
    assert list(doc) == ["version", "providers", "routing", "global"]
    assert doc["version"] == "v0.3"
    prov = doc["providers"]
    assert prov["defaults"]["model"] == "qwen3-8b"
    assert prov["defaults"]["reasoning_effort"] == "medium"
    assert prov["defaults"]["reasoning_families"]["qwen3"] == {"type": "chat_template_kwargs",
                                                               "parameter": "enable_thinking"}
    models = {m["name"]: m for m in prov["models"]}
    assert list(models) == ["qwen3-8b", "deepseek-coder", "llama-3.1-70b"]
    assert models["qwen3-8b"]["backend_refs"] == [{"name": "local-gpu", "endpoint": "127.0.0.1:18000", "weight": 1}]
    assert models["qwen3-8b"]["pricing"] == {"currency": "USD", "prompt_per_1m": 0.1, "completion_per_1m": 0.3}
    assert models["qwen3-8b"]["reasoning_family"] == "qwen3"
    coder = models["deepseek-coder"]
    assert coder["provider_model_id"] == "deepseek-coder-v2-instruct"
    assert coder["backend_refs"] == [{"name": "remote-gpu", "endpoint": "127.0.0.1:18001", "weight": 2,
                                      "api_key": "sk-legacy-coder"}]
    assert [b["name"] for b in models["llama-3.1-70b"]["backend_refs"]] == ["local-gpu", "remote-gpu"]

    routing = doc["routing"]
    cards = {c["name"]: c for c in routing["modelCards"]}
    assert cards["qwen3-8b"] == {"name": "qwen3-8b", "description": "fast general model", "param_size": "8B"}
    assert cards["llama-3.1-70b"]["context_window_size"] == 131072
    assert cards["llama-3.1-70b"]["capabilities"] == ["chat", "math"]
    sig = routing["signals"]
    assert [k["name"] for k in sig["keywords"]] == ["code_keywords", "urgent_keywords"]
    assert sig["keywords"][0]["keywords"] == ["python", "golang", "stack trace"]
    assert sig["embeddings"][0]["threshold"] == 0.72
    assert [d["name"] for d in sig["domains"]] == ["math", "law"]
    assert [d["name"] for d in routing["decisions"]] == ["code_route", "math_route", "urgent_route"]

    g = doc["global"]
    assert g["stores"]["response_cache"] == {"backend_type": "memory", "similarity_threshold": 0.8,
                                             "max_entries": 1000, "ttl_seconds": 3600, "eviction_policy": "lru"}
    guard = g["model_catalog"]["modules"]["prompt_guard"]
    assert guard["threshold"] == 0.7 and guard["model_ref"] == "prompt_guard"
    assert guard["use_modernbert"] is True
    semantic = g["model_catalog"]["embeddings"]["semantic"]
    assert semantic == {"bert_model_path": "models/all-MiniLM-L12-v2",
                        "embedding_config": {"min_score_threshold": 0.6}, "use_cpu": True}
    assert g["router"]["auto_model_names"] == ["auto", "MoM"]
    # comments are not kept
    assert "#" not in r.stdout


def test_migrated_document_routes_a_keyword_request(tmp_path, fakellm, vsr):
    local, remote = fakellm("local"), fakellm("remote")
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(LEGACY.read_text().replace("port: 18000", f"port: {local.port}")
                      .replace("port: 18001", f"port: {remote.port}"))
    r = migrate(legacy)
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    # what a test run needs besides the migrated document: its own ports and
    # the hash embedder for the model-backed signals
    port = free_port()
    doc["listeners"] = [{"name": "main", "address": "127.0.0.1", "port": port}]
    doc["global"]["services"] = {"management_api": {"port": free_port()}}
    doc["global"]["model_catalog"]["runtime"] = {"embedder": "hash"}
    v = vsr(yaml.safe_dump(doc, sort_keys=False), port=port)
    resp = v.post_chat({"model": "auto", "messages": [{"role": "user", "content": "why does my python loop hang"}]})
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-vsr-selected-model"] == "deepseek-coder"
    assert resp.headers["x-vsr-selected-decision"] == "code_route"
    req = echo(resp)
    assert '"deepseek-coder-v2-instruct"' in req["body"]
    assert req["headers"]["authorization"] == "Bearer sk-legacy-coder"
    assert remote.stats()["requests"] == 1 and local.stats()["requests"] == 0


def test_output_file_is_written_atomically(tmp_path):
    out = tmp_path / "new.yaml"
    r = migrate(LEGACY, "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert out.read_text() == migrate(LEGACY).stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.yaml"]
    # a failed migration leaves an existing OUT as it was, and no temporary file
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_config: {m: {preferred_endpoints: [nowhere]}}\n")
    before = out.read_text()
    r = migrate(bad, "-o", out)
    assert r.returncode == 2
    assert out.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "new.yaml"]
    # an OUT that cannot be written is a runtime failure, and nothing is left behind
    r = migrate(LEGACY, "-o", tmp_path / "missing-dir" / "x.yaml")
    assert r.returncode == 1 and "missing-dir" in r.stderr


def test_bad_inputs_exit_2_with_positions(tmp_path):
    cases = {
        "malformed.yaml": ("keyword_rules: [\n  {name: a\n", ":3:1: "),
        "types.yaml": ("vllm_endpoints: {a: 1}\n", ":1:17: vllm_endpoints: expected a list, got a mapping"),
        "unknown.yaml": ("default_model: m\nrouter_mode: fast\n", ':2:1: unknown pre-v0.3 key "router_mode"'),
        "dup.yaml": ("default_model: a\ndefault_model: b\n", ':2:1: duplicate key "default_model" (first at 1:1)'),
        "v03.yaml": ("version: v0.3\nproviders: {models: [{name: m}]}\n",
                     ":1:10: version is already v0.3; nothing to migrate"),
    }
    for name, (text, want) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        r = migrate(path)
        assert r.returncode == 2, (name, r.stderr)
        assert r.stdout == ""
        assert f"{path}{want}" in r.stderr, (name, r.stderr)


def test_usage_errors_exit_64(tmp_path):
    for args in ([], ["a.yaml", "b.yaml"], ["a.yaml", "-o"], ["--bogus", "a.yaml"]):
        r = migrate(*args, cwd=tmp_path)
        assert r.returncode == 64, (args, r.stderr)
        assert "usage: vsr config migrate FILE [-o OUT]" in r.stderr
    r = migrate(tmp_path / "absent.yaml")
    assert r.returncode == 2 and "absent.yaml" in r.stderr


def test_help_lists_migrate():
    r = subprocess.run([VSR_BIN, "config", "--help"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0
    assert "vsr config migrate FILE [-o OUT]" in r.stdout and "config migrate" in r.stdout
    r = subprocess.run([VSR_BIN, "--help"], capture_output=True, text=True, timeout=20)
    assert "vsr config migrate FILE [-o OUT]" in r.stdout


WORDS = ["yes", "no", "on", "off", "y", "N", "null", "Null", "~", "true", "False", "1e5", "0x1f", "0o17", ".inf",
         "-.5", "012", "1_000", "12:30", "-", "---", "...", "? x", "- x", "a: b", "a #b", "#c", "@x", "`x", "%x",
         "!x", "&x", "*x", "|", ">", "'", '"', "\\", "", " ", " x", "x ", "8B", "127.0.0.1:8000", "[::1]:80",
         "<<", "=", "{}", "[]", "x,y"]
CHARS = "aZ09 :#-?\"'\\\n\t\x01\x7f\x85\u2028\u00e9\U0001F600{}[],&*!|>%@`\ufeff"


def random_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice(WORDS)
    if kind == 1:
        return "".join(rng.choice(CHARS) for _ in range(rng.randrange(0, 12)))
    if kind == 2:
        return rng.choice([0, 1, -7, 2**63 - 1, -(2**63), 10**20, 8080])
    if kind == 3:
        return rng.choice([0.5, -1.25, 3.0, 1e-3, 123.456])
    if kind == 4:
        return rng.choice([True, False, None])
    if kind == 5:
        return rng.choice(WORDS) + rng.choice(CHARS)
    if kind in (6, 7):
        return {random_key(rng): random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]


def random_key(rng):
    return rng.choice(WORDS) if rng.randrange(2) else "".join(rng.choice(CHARS) for _ in range(rng.randrange(1, 6)))


def test_values_and_types_round_trip(tmp_path):
    """Carried values come out with the same value and type, read by PyYAML
    (YAML 1.1) from the migrated document. The input is JSON, which both
    YAML versions read alike."""
    import json
    import random
    rng = random.Random(20261203)
    path = tmp_path / "rt.yaml"
    for case in range(150):
        value = {random_key(rng): random_value(rng) for _ in range(rng.randrange(1, 5))}
        text = json.dumps(value, ensure_ascii=False)
        for raw in "\u2028\u2029\x85\ufeff\x7f":   # what a YAML reader takes for a break or refuses raw
            text = text.replace(raw, "\\u%04x" % ord(raw))
        path.write_text("model_selection: " + text + "\n")
        r = migrate(path)
        assert r.returncode == 0, (case, value, r.stderr)
        got = yaml.safe_load(r.stdout)["global"]["router"]["model_selection"]
        assert got == value and repr(got) == repr(value), (case, value, r.stdout)
