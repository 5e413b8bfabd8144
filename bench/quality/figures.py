#!/usr/bin/env python3
"""The model-backed signals' quality, in-source and out-of-source, side by side.

Each family (domains, jailbreak, pii) is measured on two kinds of set:

  in-source      vsr's own evaluation sets (data/domains/eval.jsonl, data/jailbreak/eval_*.txt,
                 data/pii/heldout2.jsonl), written by the same hands as the data the models were built from;
  out-of-source  data/eval-ref/ (README.md there): the reference router's own test prompts, which nothing in
                 vsr trains or tunes on.

Every text goes through a running `vsr serve` and `POST /api/v1/routing/preview?trace=true`, with a document in the
reference's syntax and vsr's defaults (DOC below: `domains: [{name: X, mmlu_categories: [X]}]`,
`jailbreak: [{name}]`, `pii: [{name}]`), so a figure is what a user's document gets: the same config compile,
defaults, thresholds, text limits and runtime models.  A signal's decision is whether it matched; the evidence
(the classifier's answer) gives the scores the ROC points sweep.

Printed per family: domains top-1, macro F1, the per-class table and the confusion matrix (the predicted class is
the domain signal that matched, "(none)" when none did); jailbreak (the default method and each of classifier,
contrastive, hybrid) and pii: the point at the default threshold, ROC points (threshold, TPR, FPR) and the recall
at FPR <= 2% (the threshold just above the benign score ranked floor(2% of benign)+1).  Before the figures: every
out-of-source text found verbatim in another data/ file (a copy that could flatter a figure).

The figures file data/quality-figures.json records the figures with the SHA-256 of every model file they were
measured with (MODEL_FILES, PINNED) and of every evaluation file; tests/e2e/test_quality_figures.py fails when one
differs (a model changed without its figures being regenerated), and, where the model cache is present, when a
vsr built from the tree answers differently for the recorded probe texts (probe_texts()).

  bench/quality/figures.py [--vsr build/vsr] [--write] [--json OUT]   measure (and write data/quality-figures.json)
  bench/quality/figures.py --check [--figures FILE]                     compare the recorded hashes only (no vsr)

Adding a model or a method: put its files in MODEL_FILES (or PINNED for the model cache), its signal in DOC and,
for a binary family, a line in JAILBREAK_SIGNALS / PII_SIGNALS (its name, the signal's fields, what it is); adding an
evaluation set: a loader in SETS.  Then `bench/quality/run --write`.  A classifier outside the tree (a remote one):
--model-catalog FILE puts FILE's lines under `global.model_catalog:` instead of the runtime's two local models, and
prints (or --json) the figures without touching the record.
Exits 77 without the model cache (scripts/setup-deps)."""
import argparse
import hashlib
import json
import math
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIGURES = "data/quality-figures.json"
COMMAND = "bench/quality/run --write"

# The files whose bytes the three families' models are (compiled in: CMakeLists.txt's VSR_BUILTIN_ITEMS; the PII
# detector is code and compiled-in lists) and the runtime's classify tasks that apply them (their defaults).  A
# change to any of them may change what the figures measure.
MODEL_FILES = {
    "domains": ["data/domains/domain.head", "src/models/domain.c", "src/models/head.c",
                "src/runtime/classify_domain.c"],
    "jailbreak": ["data/jailbreak/jailbreak.head", "data/jailbreak/jailbreak_lexical.json",
                  "data/jailbreak/jailbreak_patterns.txt",
                  "data/jailbreak/benign_patterns.txt", "src/models/guard.c", "src/models/guard.h",
                  "src/models/head.c", "src/runtime/classify_jailbreak.c"],
    "pii": ["src/models/pii.c", "src/models/pii.h", "src/models/pii_lists.h", "src/runtime/classify_pii.c"],
}
# Files of the model cache (scripts/setup-deps checks them against scripts/models.sha256): the pin recorded here
# must be the pin there.
PINNED = {"use-lite.vsrm": ["domains", "jailbreak"], "llm_guardrail-2.1.2.tgz": ["jailbreak"]}

CATEGORIES = ["biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
              "history", "law", "math", "other", "philosophy", "physics", "psychology"]
# binary families: signal name -> (the signal's fields besides its name, what it is); each is a signal of DOC
JAILBREAK_SIGNALS = {"jailbreak": ("", "default (`jailbreak: [{name}]`)"),
                     "jb_classifier": (", method: classifier", "method: classifier"),
                     "jb_contrastive": (", method: contrastive", "method: contrastive"),
                     "jb_hybrid": (", method: hybrid", "method: hybrid")}
PII_SIGNALS = {"pii": ("", "default (`pii: [{name}]`)")}
PII_SWEEP = "pii_sweep"  # the same detector with threshold 0.01, for the scores below the default threshold


def yq(s):
    return json.dumps(s)


def doc(port, mport, model, guard, catalog=None):
    sig = []
    for c in CATEGORIES:
        sig.append(f"      - {{name: {yq(c)}, mmlu_categories: [{yq(c)}]}}")
    jb = [f"      - {{name: {n}{f}}}" for n, (f, _) in JAILBREAK_SIGNALS.items()]
    pii = [f"      - {{name: {n}{f}}}" for n, (f, _) in PII_SIGNALS.items()] + \
        [f"      - {{name: {PII_SWEEP}, threshold: 0.01}}"]
    if catalog is None:
        catalog = f"    runtime:\n      model: {model}\n      guard_model: {guard}\n      timeout: 60s\n"
    conds = [("domain", c) for c in CATEGORIES] + [("jailbreak", n) for n in JAILBREAK_SIGNALS] + \
        [("pii", n) for n in list(PII_SIGNALS) + [PII_SWEEP]]
    dec = "\n".join(f"    - {{name: d{i}, priority: 100, rules: {{operator: OR, conditions: [{{type: {t}, "
                    f"name: {yq(n)}}}]}}, modelRefs: [{{model: m}}]}}" for i, (t, n) in enumerate(conds))
    return f"""version: v0.3
listeners:
  - {{name: l, address: 127.0.0.1, port: {port}, timeout: 60s}}
providers:
  defaults: {{model: m}}
  models:
    - {{name: m, backend_refs: [{{endpoint: "127.0.0.1:9"}}]}}
routing:
  signals:
    domains:
{chr(10).join(sig)}
    jailbreak:
{chr(10).join(jb)}
    pii:
{chr(10).join(pii)}
  decisions:
{dec}
global:
  services:
    management_api: {{port: {mport}}}
  model_catalog:
{catalog}"""


# ---- the evaluation sets: (family, source) -> [(text, label)]; label: a category, or 1/0 -------------------------

def jsonl(path):
    with open(ROOT / path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def lines(path):
    with open(ROOT / path, encoding="utf-8") as f:
        return [ln.rstrip("\r\n") for ln in f if ln.strip() and not ln.startswith("#")]


REF_DOMAINS = ["data/eval-ref/domain_classify_cases.jsonl", "data/eval-ref/bench_test_data.jsonl"]
REF_JAILBREAK = ["data/eval-ref/jailbreak_detection_cases.jsonl"]
REF_PII = ["data/eval-ref/pii_detection_cases.jsonl"]


def ref_domains():
    out = [(r["question"], r["category"]) for r in jsonl(REF_DOMAINS[0])]
    return out + [(r["text"], r["true_label"]) for r in jsonl(REF_DOMAINS[1])]


SETS = {
    ("domains", "in-source"): (["data/domains/eval.jsonl"],
                               lambda: [(r["text"], r["label"]) for r in jsonl("data/domains/eval.jsonl")]),
    ("domains", "out-of-source"): (REF_DOMAINS, ref_domains),
    ("jailbreak", "in-source"): (["data/jailbreak/eval_attacks.txt", "data/jailbreak/eval_benign.txt"],
                                 lambda: [(t, 1) for t in lines("data/jailbreak/eval_attacks.txt")] +
                                 [(t, 0) for t in lines("data/jailbreak/eval_benign.txt")]),
    ("jailbreak", "out-of-source"): (REF_JAILBREAK + REF_DOMAINS,
                                     lambda: [(r["question"], 1) for r in jsonl(REF_JAILBREAK[0])] +
                                     [(t, 0) for t, _ in ref_domains()]),
    ("pii", "in-source"): (["data/pii/heldout2.jsonl"],
                           lambda: [(r["text"], int(bool(r["entities"]))) for r in jsonl("data/pii/heldout2.jsonl")]),
    ("pii", "out-of-source"): (REF_PII + REF_DOMAINS,
                               lambda: [(r["question"], 1) for r in jsonl(REF_PII[0])] +
                               [(t, 0) for t, _ in ref_domains()]),
}
SOURCES = ["in-source", "out-of-source"]


# ---- hashes ----------------------------------------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pins():
    out = {}
    for ln in (ROOT / "scripts/models.sha256").read_text().splitlines():
        if ln.strip():
            h, name = ln.split()
            out[name] = h
    return out


def current_hashes():
    """{path: sha256} of every model file and evaluation file; the cache's files as `$VSR_MODEL_CACHE/NAME`
    with the pin of scripts/models.sha256"""
    files = sorted({p for fs in MODEL_FILES.values() for p in fs} |
                   {p for paths, _ in SETS.values() for p in paths})
    out = {p: sha256(ROOT / p) for p in files}
    pin = pins()
    for name in PINNED:
        out[f"$VSR_MODEL_CACHE/{name}"] = pin[name]
    return out


def check(figures_path):
    try:
        rec = json.loads(pathlib.Path(figures_path).read_text())
    except (OSError, ValueError) as e:
        print(f"figures: {figures_path}: {e}", file=sys.stderr)
        return 1
    recorded, now = rec.get("sha256", {}), current_hashes()
    bad = []
    for p in sorted(set(recorded) | set(now)):
        if recorded.get(p) != now.get(p):
            what = "not recorded" if p not in recorded else "no longer measured" if p not in now else "changed"
            bad.append(f"  {p}: {what} (recorded {recorded.get(p, '-')[:16]}, now {now.get(p, '-')[:16]})")
    if bad:
        print(f"figures: {figures_path} was measured with other files than these:\n" + "\n".join(bad) +
              f"\nregenerate it: {COMMAND} (a release build and the model cache), and update the figures quoted in "
              "docs/signals.md", file=sys.stderr)
        return 1
    print(f"figures: {figures_path}: the {len(now)} recorded hashes match")
    return 0


# ---- leak check: an out-of-source text verbatim in another data/ file ---------------------------------------------

def leaks():
    ref = set()
    for paths, load in (SETS[(f, "out-of-source")] for f in ("domains", "jailbreak", "pii")):
        ref |= {t for t, _ in load() if len(t) >= 20}
    out = []
    for p in sorted((ROOT / "data").rglob("*")):
        if not p.is_file() or "eval-ref" in p.parts or p.name == "quality-figures.json":
            continue
        try:
            body = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for t in sorted(ref):
            if t in body or json.dumps(t)[1:-1] in body:
                out.append((str(p.relative_to(ROOT)), t))
    return out


# ---- measuring -----------------------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def preview(mport, text):
    body = json.dumps({"model": "auto", "text": text}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{mport}/api/v1/routing/preview?trace=true", body,
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def measure_texts(vsr, texts, model, guard, catalog=None):
    """{text: preview answer} from one vsr serve with DOC"""
    port, mport = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="vsr-figures") as tmp:
        cfg = pathlib.Path(tmp) / "config.yaml"
        cfg.write_text(doc(port, mport, model, guard, catalog))
        log = open(pathlib.Path(tmp) / "vsr.log", "wb")
        p = subprocess.Popen([vsr, "serve", "--config", str(cfg), "--workers", "1"], stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{mport}/ready", timeout=2)
                    break
                except (OSError, urllib.error.URLError):
                    if p.poll() is not None or time.monotonic() > deadline:
                        log.flush()
                        sys.exit("figures: vsr did not start:\n" + (pathlib.Path(tmp) / "vsr.log").read_text())
                    time.sleep(0.1)
            out = {}
            for t in texts:
                if t not in out:
                    out[t] = preview(mport, t)
            return out
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()


def matched(ans, family, name):
    return ans["signal_confidences"].get(f"{family}:{name}", 0) > 0


def evidence(ans, family, name):
    return ans.get("signal_evidence", {}).get(f"{family}:{name}", {})


def jailbreak_score(ans, name):
    """the score the signal compares with its threshold: the evidence's value"""
    ev = evidence(ans, "jailbreak", name)
    return float(ev.get("value", 0.0))


def pii_score(ans):
    """the highest entity score of the low-threshold signal (no type allowed, as the default)"""
    ents = evidence(ans, "pii", PII_SWEEP).get("result", {}).get("entities", [])
    return max((float(e["score"]) for e in ents), default=0.0)


def domain_figures(items, answers):
    labels = CATEGORIES + ["(none)"]
    idx = {c: i for i, c in enumerate(labels)}
    cm = [[0] * len(labels) for _ in CATEGORIES]
    argmax_ok = 0
    for text, truth in items:
        ans = answers[text]
        got = [c for c in CATEGORIES if matched(ans, "domains", c)]
        pred = got[0] if len(got) == 1 else "(none)"
        cm[idx[truth]][idx[pred]] += 1
        lab = evidence(ans, "domains", CATEGORIES[0]).get("result", {}).get("labels", [])
        argmax_ok += bool(lab) and lab[0]["label"] == truth
    n = len(items)
    correct = sum(cm[i][i] for i in range(len(CATEGORIES)))
    per = {}
    for i, c in enumerate(CATEGORIES):
        tp, row, col = cm[i][i], sum(cm[i]), sum(cm[k][i] for k in range(len(CATEGORIES)))
        p = tp / col if col else 0.0
        r = tp / row if row else 0.0
        per[c] = {"precision": round(p, 4), "recall": round(r, 4),
                  "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0, "support": row, "correct": tp}
    return {"items": n, "top1": round(correct / n, 4), "correct": correct,
            "top1_argmax": round(argmax_ok / n, 4),
            "macro_f1": round(sum(v["f1"] for v in per.values()) / len(per), 4), "per_class": per,
            "confusion": {"columns": labels, "rows": {c: cm[i] for i, c in enumerate(CATEGORIES)}}}


THRESHOLDS = [round(0.05 * k, 2) for k in range(1, 20)]


def binary_figures(items, scores, flags):
    pos = [s for (t, y), s in zip(items, scores) if y]
    neg = sorted(s for (t, y), s in zip(items, scores) if not y)
    P, N = len(pos), len(neg)

    def pt(thr):
        tp, fp = sum(s >= thr for s in pos), sum(s >= thr for s in neg)
        return {"threshold": thr, "tpr": round(tp / P, 4), "fpr": round(fp / N, 4), "tp": tp, "fp": fp}

    k = math.floor(0.02 * N)
    thr = math.nextafter(neg[N - 1 - k], math.inf) if N > k else -math.inf
    at2 = pt(thr)
    at2["threshold"] = round(thr, 6)
    if N > k and neg[N - 1 - k] >= 1.0:
        at2["note"] = "unreachable: more than 2% of the negatives score 1, the score's maximum"
    tp = sum(f for (t, y), f in zip(items, flags) if y)
    fp = sum(f for (t, y), f in zip(items, flags) if not y)
    return {"positives": P, "negatives": N,
            "default": {"tpr": round(tp / P, 4), "fpr": round(fp / N, 4), "tp": tp, "fp": fp},
            "recall_at_fpr_2pct": at2, "roc": [pt(t) for t in THRESHOLDS]}


def fingerprint(ans):
    """what the signals answered for one text, rounded: the probes' record"""
    lab = evidence(ans, "domains", CATEGORIES[0]).get("result", {}).get("labels", [])
    out = {"domain": lab[0]["label"] if lab else None, "domain_score": round(lab[0]["score"], 3) if lab else None}
    for n in JAILBREAK_SIGNALS:
        out[f"jailbreak:{n}"] = round(jailbreak_score(ans, n), 3)
    out["pii"] = round(pii_score(ans), 3)
    return out


def probe_texts():
    """a few texts of every set: tests/e2e/test_quality_figures.py asks a vsr built from the tree for them and
    compares with the record, so a changed model or default fails even where no recorded file changed"""
    return [t for _, load in SETS.values() for t, _ in load()[:2]] + \
        [t for t, y in SETS[("jailbreak", "out-of-source")][1]() if y][:4] + \
        [t for t, y in SETS[("pii", "out-of-source")][1]() if y][:4]


def measure(vsr, model, guard, catalog=None):
    loaded = {key: load() for key, (_, load) in SETS.items()}
    texts = [t for items in loaded.values() for t, _ in items]
    answers = measure_texts(vsr, texts, model, guard, catalog)
    probes = {t: fingerprint(answers[t]) for t in probe_texts()}
    fig = {"domains": {}, "jailbreak": {}, "pii": {}}
    for src in SOURCES:
        fig["domains"][src] = domain_figures(loaded[("domains", src)], answers)
        items = loaded[("jailbreak", src)]
        fig["jailbreak"][src] = {
            n: binary_figures(items, [jailbreak_score(answers[t], n) for t, _ in items],
                              [matched(answers[t], "jailbreak", n) for t, _ in items]) for n in JAILBREAK_SIGNALS}
        items = loaded[("pii", src)]
        fig["pii"][src] = {
            n: binary_figures(items, [pii_score(answers[t]) for t, _ in items],
                              [matched(answers[t], "pii", n) for t, _ in items]) for n in PII_SIGNALS}
    return fig, probes


# ---- printing ------------------------------------------------------------------------------------------------------

def show(fig, leak):
    print("# model-backed signals: in-source vs out-of-source (POST /api/v1/routing/preview, the reference's syntax, "
          "vsr's defaults)")
    for key, (paths, _) in SETS.items():
        print(f"  {key[0]:<10} {key[1]:<14} {', '.join(paths)}")
    print("\n## out-of-source texts found verbatim in other data/ files" + ("" if leak else ": none"))
    for p, t in leak:
        print(f"  {p}: {t[:100]}")

    d = fig["domains"]
    print("\n## domains (predicted: the domain signal that matched)")
    print(f"{'':24} {'in-source':>14} {'out-of-source':>14}")
    for k, name in (("top1", "top-1"), ("macro_f1", "macro F1"), ("top1_argmax", "top-1 of the labels")):
        print(f"{name:24} {d['in-source'][k]:>14.3f} {d['out-of-source'][k]:>14.3f}")
    print(f"{'items':24} {d['in-source']['items']:>14} {d['out-of-source']['items']:>14}")
    print(f"\n{'class':18} {'P in':>6} {'R in':>6} {'F1 in':>6} {'n':>4} | {'P out':>6} {'R out':>6} {'F1 out':>6} "
          f"{'n':>4}")
    for c in CATEGORIES:
        a, b = d["in-source"]["per_class"][c], d["out-of-source"]["per_class"][c]
        print(f"{c:18} {a['precision']:6.3f} {a['recall']:6.3f} {a['f1']:6.3f} {a['support']:4} | "
              f"{b['precision']:6.3f} {b['recall']:6.3f} {b['f1']:6.3f} {b['support']:4}")
    for src in SOURCES:
        cm = d[src]["confusion"]
        print(f"\nconfusion, {src} (rows true, columns predicted)\n{'':5}" +
              "".join(f" {c[:4]:>4}" for c in cm["columns"]))
        for c in CATEGORIES:
            print(f"{c[:5]:5}" + "".join(f" {v:4}" for v in cm["rows"][c]))

    for fam, sigs in (("jailbreak", JAILBREAK_SIGNALS), ("pii", PII_SIGNALS)):
        names = {n: what for n, (_, what) in sigs.items()}
        print(f"\n## {fam}")
        print(f"{'signal':16} {'source':14} {'P':>4} {'N':>4}  {'default TPR (tp)':>17} {'FPR (fp)':>13}  "
              f"{'recall at FPR<=2%':>18} {'thr':>7}")
        for n in names:
            for src in SOURCES:
                f = fig[fam][src][n]
                df, r2 = f["default"], f["recall_at_fpr_2pct"]
                print(f"{n:16} {src:14} {f['positives']:4} {f['negatives']:4}  {df['tpr']:10.3f} ({df['tp']:3})"
                      f" {df['fpr']:6.3f} ({df['fp']:3})  {r2['tpr']:11.3f} ({r2['tp']:3}) {r2['threshold']:7.4f}"
                      + (f"  ({r2['note']})" if "note" in r2 else ""))
        for n, what in names.items():
            print(f"\nROC points, {n} ({what}): threshold, TPR / FPR in-source, TPR / FPR out-of-source")
            for a, b in zip(fig[fam]["in-source"][n]["roc"], fig[fam]["out-of-source"][n]["roc"]):
                print(f"  {a['threshold']:5.2f}   {a['tpr']:.3f} / {a['fpr']:.3f}   {b['tpr']:.3f} / {b['fpr']:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--write", action="store_true", help=f"write {FIGURES}")
    ap.add_argument("--json", help="write the figures (with the hashes) to this file as well")
    ap.add_argument("--check", action="store_true", help="compare the recorded hashes with the files' (no vsr)")
    ap.add_argument("--figures", default=str(ROOT / FIGURES))
    ap.add_argument("--model-catalog", help="lines for `global.model_catalog:` (indented four spaces) in place of "
                    "the local runtime's models; the figures are not recorded")
    a = ap.parse_args()
    if a.check:
        return check(a.figures)
    catalog = pathlib.Path(a.model_catalog).read_text() if a.model_catalog else None
    if catalog is not None and a.write:
        print("figures: --write records the built-in models only, not a --model-catalog", file=sys.stderr)
        return 2
    cache = pathlib.Path(os.environ.get("VSR_MODEL_CACHE", pathlib.Path.home() / ".cache/vsr/models"))
    model, guard = cache / "use-lite.vsrm", cache / "llm_guardrail"
    if not model.exists() or not guard.exists():
        print(f"figures: skipped: no model files in {cache} (scripts/setup-deps)")
        return 77
    pin = pins()
    if sha256(model) != pin["use-lite.vsrm"]:
        print(f"figures: {model} is not the pinned file (scripts/models.sha256): run scripts/setup-deps",
              file=sys.stderr)
        return 1
    leak = leaks()
    fig, probes = measure(str(pathlib.Path(a.vsr).resolve()), model, guard, catalog)
    show(fig, leak)
    rec = {"command": COMMAND,
           "how": "bench/quality/figures.py: POST /api/v1/routing/preview?trace=true on vsr serve, the reference's "
                  "syntax, vsr's defaults; in-source = vsr's own evaluation sets, out-of-source = data/eval-ref/",
           "sha256": current_hashes(),
           "model_files": {f: fs + [f"$VSR_MODEL_CACHE/{n}" for n, fams in PINNED.items() if f in fams]
                           for f, fs in MODEL_FILES.items()},
           "sets": {f"{k[0]}/{k[1]}": paths for k, (paths, _) in SETS.items()},
           "verbatim_overlap": [{"file": p, "text": t} for p, t in leak],
           "probes": [{"text": t, **v} for t, v in probes.items()],
           "figures": fig}
    body = json.dumps(rec, indent=1, ensure_ascii=False) + "\n"
    if a.write:
        (ROOT / FIGURES).write_text(body)
        print(f"\nwrote {FIGURES}")
    if a.json:
        pathlib.Path(a.json).write_text(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
