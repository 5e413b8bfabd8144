"""The reference's v0.3 field inventory (tests/data/v0.3-fields.tsv) and a
minimal vsr document holding a value of a row's type at the row's path:
shared by tests/e2e/test_schema_walk.py and scripts/config-keys-table."""
import copy
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
TSV = ROOT / "tests" / "data" / "v0.3-fields.tsv"

BASE = {
    "version": "v0.3",
    "listeners": [{"name": "http", "address": "127.0.0.1", "port": 8899}],
    "providers": {"models": [{"name": "chat", "backend_refs": [{"endpoint": "127.0.0.1:18000"}]}]},
    "routing": {"decisions": [{"name": "d", "priority": 1, "rules": {"operator": "AND", "conditions": []},
                               "modelRefs": [{"model": "chat"}]}]},
}


def rows():
    """Every row but the "same fields again" markers of recursive rule trees."""
    out = []
    with open(TSV) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            cols = line.rstrip("\n").split("\t")
            row = dict(zip(header, cols + [""] * (len(header) - len(cols))))
            if not row["path"].endswith(".*"):
                out.append(row)
    return out


def scalar(row):
    """A value of the row's type: its default or first allowed value where given."""
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


def place(path, value):
    """The nested structure holding value at path ("a.b[].c", "[type=x]"
    selects a plugin, ".<key>" a map key)."""
    segs = []
    for part in re.findall(r"[^.\[\]]+(?:\[[^\]]*\])?", path.replace(".<key>", ".k1")):
        m = re.fullmatch(r"([^\[]+)(\[([^\]]*)\])?", part)
        segs.append((m.group(1), m.group(2) is not None, m.group(3) or ""))
    node = value
    for name, is_list, sel in reversed(segs):
        if is_list:
            item = dict(node) if isinstance(node, dict) else {}
            if sel.startswith("type="):
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


def document(row, value=None):
    return merge(copy.deepcopy(BASE), place(row["path"], scalar(row) if value is None else value))


def validate(vsr_bin, row, tmpdir, env=None, value=None):
    """(verdict, output): unknown | unsupported | refused | accepted."""
    import yaml
    p = pathlib.Path(tmpdir) / (re.sub(r"[^A-Za-z0-9]+", "_", row["path"])[:150] + ".yaml")
    p.write_text(yaml.safe_dump(document(row, value), sort_keys=False))
    r = subprocess.run([vsr_bin, "config", "validate", str(p)], capture_output=True, text=True, env=env, timeout=60)
    out = r.stdout + r.stderr
    if "unknown key" in out:
        return "unknown", out
    if "not supported yet" in out:
        return "unsupported", out
    if r.returncode != 0:
        return "refused", out
    return "accepted", out
