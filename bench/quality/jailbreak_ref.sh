#!/bin/sh
# jailbreak_ref.sh — the out-of-source figure of the jailbreak classifier:
# the reference router's e2e prompts (attacks: jailbreak_detection_cases.json;
# benign: the questions of domain_classify_cases.json), which nothing in vsr
# was trained, tuned or thresholded on, scored once by build/jailbreak_quality
# (JAILBREAK_TEST) after the dev-chosen weights are compiled in.
#
#   bench/quality/jailbreak_ref.sh REF_REPO_DIR [BUILD_DIR]
#
# REF_REPO_DIR: a git checkout of vllm-project/semantic-router (its HEAD is read).
set -eu
R=$1
B=${2:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in jailbreak_detection_cases domain_classify_cases; do
    git -C "$R" show "HEAD:e2e/testcases/testdata/$f.json" > "$tmp/$f.json"
done
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
with open(d + "/test.tsv", "w", encoding="utf-8") as out:
    for name, label in (("jailbreak_detection_cases", "jailbreak"), ("domain_classify_cases", "benign")):
        for case in json.load(open(f"{d}/{name}.json", encoding="utf-8")):
            if label == "jailbreak" and not case.get("expected_blocked", True):
                label_here = "benign"
            else:
                label_here = label
            out.write(label_here + "\t" + " ".join(case["question"].split()) + "\n")
PY
OPENBLAS_NUM_THREADS=1 JAILBREAK_TEST="$tmp/test.tsv" "$B/jailbreak_quality" data/jailbreak | grep -E '^(== test set|test )'
