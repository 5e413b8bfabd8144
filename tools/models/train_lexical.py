#!/usr/bin/env python3
"""train_lexical.py — trains the jailbreak head's lexical partner: TF-IDF over
word uni- and bigrams and a logistic regression, written in the JSON layout of
the llm_guardrail package's models, so src/models/guard.c reads and scores it
(vsr_guard_lr_load_mem, vsr_guard_lr_score_chunked) with the package's own
arithmetic:

    tools/models/train_lexical.py TRAIN.tsv OUT.json

TRAIN.tsv: `label<TAB>text` (jailbreak / benign), '#' lines skipped.
Tokens are guard.c's: runs of two or more [A-Za-z0-9_] after lowercasing.
Vocabulary: the terms in at least two texts, the 20,000 most frequent (ties
by term); idf = ln((1 + n) / (1 + df)) + 1; a text is count x idf,
L2-normalised.  The regression minimises the mean log-loss + (l2/2)|w|^2
(intercept not penalised) by full-batch gradient descent with Nesterov
momentum from zero for a fixed number of steps; l2 is chosen from a small
grid by 5-fold cross-validation (the j-th text of a label in fold j mod 5),
best out-of-fold log-loss.  Pure Python, no randomness: the same bytes on
every run.  The evaluation sets are never read here.  The file records the
SHA-256 of TRAIN.tsv ("exemplars_sha256"), so a test can tell when data and
model drift apart.
"""
import hashlib
import json
import math
import re
import sys

TOKEN = re.compile(r"[a-z0-9_]{2,}")
MAX_FEATURES = 20000
GRID = [1e-4, 3e-4, 1e-3, 3e-3]
STEPS = 400


def tokens(text):
    return TOKEN.findall("".join(c if c < "\x80" else " " for c in text.lower()))


def terms(text):
    w = tokens(text)
    return w + [w[i] + " " + w[i + 1] for i in range(len(w) - 1)]


def read(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line or line.startswith("#") or "\t" not in line:
                continue
            label, text = line.split("\t", 1)
            out.append((1 if label == "jailbreak" else 0, text))
    return out


def vectorise(rows, vocab, idf):
    xs = []
    for _, text in rows:
        counts = {}
        for t in terms(text):
            j = vocab.get(t)
            if j is not None:
                counts[j] = counts.get(j, 0) + 1
        v = {j: c * idf[j] for j, c in counts.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        xs.append(sorted((j, x / norm) for j, x in v.items()))
    return xs


def sigmoid(z):
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


def fit(xs, ys, d, l2):
    w, b = [0.0] * d, 0.0
    vw, vb = [0.0] * d, 0.0
    lr, mu, n = 2.0, 0.9, len(xs)
    for _ in range(STEPS):
        # Nesterov: the gradient at the look-ahead point
        lw = [w[j] + mu * vw[j] for j in range(d)] if vw else w
        lb = b + mu * vb
        gw, gb = [l2 * x for x in lw], 0.0
        for x, y in zip(xs, ys):
            r = (sigmoid(lb + sum(lw[j] * v for j, v in x)) - y) / n
            gb += r
            for j, v in x:
                gw[j] += r * v
        vw = [mu * vw[j] - lr * gw[j] for j in range(d)]
        vb = mu * vb - lr * gb
        w = [w[j] + vw[j] for j in range(d)]
        b += vb
    return w, b


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = read(argv[0])
    df = {}
    for _, text in rows:
        for t in set(terms(text)):
            df[t] = df.get(t, 0) + 1
    kept = sorted((t for t, c in df.items() if c >= 2), key=lambda t: (-df[t], t))[:MAX_FEATURES]
    kept.sort()
    vocab = {t: i for i, t in enumerate(kept)}
    n = len(rows)
    idf = [math.log((1 + n) / (1 + df[t])) + 1 for t in kept]
    xs, ys = vectorise(rows, vocab, idf), [y for y, _ in rows]
    pos = {0: 0, 1: 0}
    fold = []
    for y in ys:
        fold.append(pos[y] % 5)
        pos[y] += 1
    best = None
    for l2 in GRID:
        loss = 0.0
        for k in range(5):
            tr = [i for i in range(n) if fold[i] != k]
            w, b = fit([xs[i] for i in tr], [ys[i] for i in tr], len(kept), l2)
            for i in range(n):
                if fold[i] == k:
                    p = min(max(sigmoid(b + sum(w[j] * v for j, v in xs[i])), 1e-9), 1 - 1e-9)
                    loss -= math.log(p if ys[i] else 1 - p)
        loss /= n
        print(f"l2 {l2:g}  5-fold log-loss {loss:.4f}", file=sys.stderr)
        if best is None or loss < best[1]:
            best = (l2, loss)
    w, b = fit(xs, ys, len(kept), best[0])
    model = {
        "coefficients": [[float(f"{x:.9g}") for x in w]],
        "intercept": [float(f"{b:.9g}")],
        "classes": [0, 1],
        "vocabulary": vocab,
        "idf": [float(f"{x:.9g}") for x in idf],
        "ngram_range": [1, 2],
        "lowercase": True,
        "max_features": MAX_FEATURES,
        "threshold": 0.5,
        "l2": best[0],
        "exemplars_sha256": hashlib.sha256(open(argv[0], "rb").read()).hexdigest(),
    }
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(model, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    print(f"wrote {argv[1]} ({len(kept)} terms, {n} texts, l2 {best[0]:g})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
