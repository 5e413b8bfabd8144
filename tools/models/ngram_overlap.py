#!/usr/bin/env python3
"""ngram_overlap — fails when a training text shares a word 5-gram with an
evaluation text, so the evaluation set stays unseen by training.

    tools/models/ngram_overlap.py TRAIN EVAL [EVAL ...] [--n 5]

Files: one text a line, or `label<TAB>text` (.tsv); '#' lines and blank lines
are skipped.  Words are runs of letters/digits (Unicode), lowercased.
Exit 0 when no n-gram is shared, 1 (and the shared n-grams printed) otherwise.
"""
import re
import sys


def texts(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line or line.startswith("#"):
                continue
            if path.endswith(".tsv") and "\t" in line:
                line = line.split("\t", 1)[1]
            yield line


def grams(text, n):
    w = re.findall(r"\w+", text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def main(argv):
    n = 5
    if "--n" in argv:
        i = argv.index("--n")
        n = int(argv[i + 1])
        del argv[i:i + 2]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    seen = {}
    for path in argv[1:]:
        for t in texts(path):
            for g in grams(t, n):
                seen.setdefault(g, t)
    bad = 0
    for t in texts(argv[0]):
        for g in sorted(grams(t, n)):
            if g in seen:
                bad += 1
                print(f"shared {n}-gram {' '.join(g)!r}\n  train: {t}\n  eval:  {seen[g]}")
    print(f"{bad} shared {n}-grams")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
