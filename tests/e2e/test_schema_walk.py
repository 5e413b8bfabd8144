"""Every key path of the reference's v0.3 schema (shared/reference/v0.3-fields.tsv)
is known to the loader: a minimal valid document with a value of the row's
type placed at the path must not be refused with "unknown key".  It may still
be refused for another reason (a value that needs company) or load as "not
supported yet"; those are counted and printed, not failed."""
import concurrent.futures
import copy
import os
import pathlib
import re
import subprocess
import tempfile

import pytest
import yaml

from conftest import ENV, VSR_BIN

ROOT = pathlib.Path(__file__).resolve().parents[2]
TSV_CANDIDATES = [ROOT / "tests" / "data" / "v0.3-fields.tsv", ROOT.parent.parent / "shared" / "reference" / "v0.3-fields.tsv",
                  pathlib.Path("/work/shared/reference/v0.3-fields.tsv")]
TSV = next((p for p in TSV_CANDIDATES if p.exists()), None)

BASE = {
    "version": "v0.3",
    "listeners": [{"name": "http", "address": "127.0.0.1", "port": 8899}],
    "providers": {"models": [{"name": "chat", "backend_refs": [{"endpoint": "127.0.0.1:18000"}]}]},
    "routing": {"decisions": [{"name": "d", "priority": 1, "rules": {"operator": "AND", "conditions": []},
                               "modelRefs": [{"model": "chat"}]}]},
}


def rows():
    out = []
    with open(TSV) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            cols = line.rstrip("\n").split("\t")
            row = dict(zip(header, cols + [""] * (len(header) - len(cols))))
            if not row["path"].endswith(".*"):  # "the same fields again" of a recursive rule tree
                out.append(row)
    return out


def scalar(row):
    t, enum, default = row["type"], row["enum_or_range"], row["default"]
    if t == "enum" and enum:
        return enum.split("|")[0]
    if t == "boolean":
        return default == "true" if default in ("true", "false") else True
    if t == "integer":
        return int(default) if re.fullmatch(r"-?\d+", default or "") else 1
    if t == "number":
        try:
            return float(default)
        except ValueError:
            return 0.5
    if t == "duration":
        return default if re.fullmatch(r"\d+(ms|s|m|h)", default or "") else "1s"
    if t == "object":
        return {}
    if t == "array":
        return ["x"] if "items string" in enum else [{}]
    if re.fullmatch(r"[A-Za-z0-9_./:-]+", default or ""):
        return default
    return "x"


SEG = re.compile(r"([^.\[]+|<key>)((?:\[[^\]]*\])?)")


def place(path, value):
    """The nested structure holding value at path."""
    segs = []
    for part in re.findall(r"[^.\[\]]+(?:\[[^\]]*\])?|<key>", path.replace(".<key>", ".k1")):
        m = re.fullmatch(r"([^\[]+)(\[([^\]]*)\])?", part)
        segs.append((m.group(1), m.group(2) is not None, m.group(3) or ""))
    node = value
    for name, is_list, sel in reversed(segs):
        if is_list:
            item = node if isinstance(node, dict) else {}
            if sel.startswith("type="):
                item = dict(item)
                item.setdefault("type", sel[5:])
            node = {name: [item]}
        else:
            node = {name: node}
    return node


def merge(base, add):
    for k, v in add.items():
        if k in base and isinstance(base[k], dict) and isinstance(v, dict):
            merge(base[k], v)
        elif k in base and isinstance(base[k], list) and isinstance(v, list) and base[k] and \
                isinstance(base[k][0], dict) and v and isinstance(v[0], dict):
            merge(base[k][0], v[0])
        else:
            base[k] = v
    return base


def document(row):
    path = row["path"]
    value = scalar(row)
    if path.endswith("[]"):
        value = value if isinstance(value, dict) else value
    doc = merge(copy.deepcopy(BASE), place(path, value))
    return doc


def check(row, tmp):
    doc = document(row)
    p = pathlib.Path(tmp) / (re.sub(r"[^A-Za-z0-9]+", "_", row["path"])[:150] + ".yaml")
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = subprocess.run([VSR_BIN, "config", "validate", str(p)], capture_output=True, text=True, env=ENV, timeout=60)
    out = r.stdout + r.stderr
    if "unknown key" in out:
        return "unknown", out
    if "not supported yet" in out:
        return "unsupported", out
    if r.returncode != 0:
        return "refused", out
    return "accepted", out


@pytest.mark.skipif(TSV is None, reason="v0.3-fields.tsv not found")
def test_every_reference_path_is_known():
    rs = rows()
    counts = {"accepted": 0, "unsupported": 0, "refused": 0, "unknown": 0}
    unknown = []
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(4) as ex:
        for row, (verdict, out) in zip(rs, ex.map(lambda r: check(r, tmp), rs)):
            counts[verdict] += 1
            if verdict == "unknown":
                unknown.append((row["path"], [l for l in out.splitlines() if "unknown key" in l][:1]))
    print(f"\n{len(rs)} paths: {counts}")
    if os.environ.get("VSR_WALK_LIST"):
        for p, l in unknown:
            print("UNKNOWN", p, l)
    assert not unknown, f"{len(unknown)} paths refused as unknown keys, e.g. {unknown[:20]}"
