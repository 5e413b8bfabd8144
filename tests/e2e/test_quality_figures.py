"""The recorded quality figures (data/quality-figures.json, written by
`bench/quality/run --write`) belong to the models in the tree: the SHA-256 of
every model file they were measured with matches the file's, every
compiled-in file of the three families is among them, and a vsr built from
the tree answers the recorded probe texts as it did when the figures were
measured.  A model, a list or a default that changes without the figures
being regenerated fails here."""
import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import httpx
import pytest

from conftest import GUARD_MODEL, ROOT, USE_MODEL, free_port, require

FIG = ROOT / "bench" / "quality" / "figures.py"
RECORD = ROOT / "data" / "quality-figures.json"


def figures_module():
    spec = importlib.util.spec_from_file_location("figures", FIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check(path):
    return subprocess.run([sys.executable, str(FIG), "--check", "--figures", str(path)], capture_output=True,
                          text=True, timeout=60)


def test_recorded_hashes_match_the_tree():
    r = check(RECORD)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("how", ["changed", "missing", "extra"])
def test_a_model_file_that_differs_from_the_record_fails(tmp_path, how):
    rec = json.loads(RECORD.read_text())
    if how == "changed":
        rec["sha256"]["data/domains/domain.head"] = "0" * 64
    elif how == "missing":
        del rec["sha256"]["data/domains/domain.head"]
    else:
        rec["sha256"]["data/domains/old.head"] = "0" * 64
    bad = tmp_path / "figures.json"
    bad.write_text(json.dumps(rec))
    r = check(bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("old.head" if how == "extra" else "data/domains/domain.head") in r.stderr
    assert "bench/quality/run --write" in r.stderr


def test_every_compiled_in_file_of_the_three_families_is_recorded():
    rec = json.loads(RECORD.read_text())
    items = re.search(r"set\(VSR_BUILTIN_ITEMS(.*?)\)", (ROOT / "CMakeLists.txt").read_text(), re.S).group(1)
    paths = re.findall(r'"(\w+)=\$\{CMAKE_SOURCE_DIR\}/([^"]+)"', items)
    fams = [p for name, p in paths if name.startswith(("domain", "jailbreak", "benign", "pii"))]
    assert len(fams) >= 4, paths
    for p in fams:
        assert p in rec["sha256"], f"{p} is compiled in but not among the figures' model files"
    pinned = {ln.split()[1] for ln in (ROOT / "scripts" / "models.sha256").read_text().splitlines() if ln.strip()}
    for name in ("use-lite.vsrm",) + tuple(n for n in pinned if n.startswith("llm_guardrail")):
        assert f"$VSR_MODEL_CACHE/{name}" in rec["sha256"], name


def test_vsr_answers_the_probes_as_recorded(vsr):
    """the signals of the figures' own document, asked through the preview, give the recorded scores"""
    require([USE_MODEL, GUARD_MODEL])
    fig = figures_module()
    rec = json.loads(RECORD.read_text())
    assert len(rec["probes"]) >= 10
    port, mport = free_port(), free_port()
    v = vsr(fig.doc(port, mport, USE_MODEL, GUARD_MODEL), workers=1, port=port)
    assert v
    with httpx.Client(base_url=f"http://127.0.0.1:{mport}", timeout=60) as c:
        for probe in rec["probes"]:
            r = c.post("/api/v1/routing/preview?trace=true", json={"model": "auto", "text": probe["text"]})
            assert r.status_code == 200, r.text
            got = fig.fingerprint(r.json())
            for k, want in probe.items():
                if k == "text":
                    continue
                if isinstance(want, float):
                    assert abs(got[k] - want) <= 0.002, (k, got[k], want, probe["text"][:80],
                                                         "regenerate: bench/quality/run --write")
                else:
                    assert got[k] == want, (k, got[k], want, probe["text"][:80],
                                            "regenerate: bench/quality/run --write")
