#!/usr/bin/env python3
"""Domains described in words: how well a domain signal that names no
MMLU-Pro class, only a `description`, is told apart by that description's
similarity to the text (the runtime's domain classifier with the task
option "description"; USE-lite cosine).

Each of the 14 categories of data/domains/eval.jsonl (280 held-out questions,
written apart from the exemplars the classifier was built from) is played by
a custom domain whose description is one sentence written here, below; for
each threshold it prints the share of questions whose own domain reaches it
(recall) and the share of (question, other domain) pairs that reach it (false
positives), and top-1 accuracy when the most similar description wins.

usage: bench/quality/domain_descriptions.py [--vsr build/vsr] [--model ~/.cache/vsr/models/use-lite.vsrm]
Exits 77 without the model."""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

DESCRIPTIONS = {
    "biology": "Questions about living things: cells, genetics, evolution, plants, animals and ecosystems.",
    "business": "Questions about running companies: management, marketing, accounting and corporate finance.",
    "chemistry": "Questions about chemical elements, compounds, reactions, bonds and laboratory chemistry.",
    "computer science": "Questions about programming, algorithms, data structures, software and computers.",
    "economics": "Questions about markets, prices, supply and demand, inflation, trade and economic policy.",
    "engineering": "Questions about designing machines, circuits, structures and engineering calculations.",
    "health": "Questions about medicine, diseases, symptoms, treatments, nutrition and the human body.",
    "history": "Questions about past events, wars, empires, historical figures and dates.",
    "law": "Questions about legal rules, courts, contracts, crimes, rights and legal procedure.",
    "math": "Questions about numbers, algebra, geometry, calculus, probability and proofs.",
    "other": "General questions about everyday topics, trivia, culture and miscellaneous subjects.",
    "philosophy": "Questions about ethics, logic, knowledge, mind and the ideas of philosophers.",
    "physics": "Questions about forces, motion, energy, electricity, waves, light and the universe.",
    "psychology": "Questions about the mind and behaviour: cognition, emotion, learning and mental health.",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def classify(port, text, description):
    body = json.dumps({"model": "domain", "text": text, "description": description}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/classify", body, {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["description_similarity"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr", default="build/vsr")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/vsr/models/use-lite.vsrm"))
    ap.add_argument("--eval", default="data/domains/eval.jsonl")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"skipped: no model at {a.model}")
        sys.exit(77)
    port = free_port()
    p = subprocess.Popen([a.vsr, "runtime", "serve", "--listen", f"127.0.0.1:{port}", "--model", a.model,
                          "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        rows = [json.loads(line) for line in open(a.eval) if line.strip()]
        sims = []  # (own label, {label: sim})
        for r in rows:
            sims.append((r["label"], {lab: classify(port, r["text"], d) for lab, d in DESCRIPTIONS.items()}))
    finally:
        p.terminate()
        p.wait(10)
    top1 = sum(max(s, key=s.get) == lab for lab, s in sims) / len(sims)
    print(f"questions {len(sims)}, domains {len(DESCRIPTIONS)}, top-1 by the most similar description: {top1:.3f}")
    print("threshold  recall  false-positive rate")
    for t in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6):
        rec = sum(s[lab] >= t for lab, s in sims) / len(sims)
        fp = sum(v >= t for lab, s in sims for k, v in s.items() if k != lab) / (len(sims) * (len(DESCRIPTIONS) - 1))
        print(f"{t:9.2f}  {rec:6.3f}  {fp:6.3f}")


if __name__ == "__main__":
    main()
