#!/bin/sh
# ref.sh — the out-of-source figure of the PII detector: the reference
# router's e2e prompts (positives: pii_detection_cases.json; negatives: the
# questions of domain_classify_cases.json), which nothing in vsr was written,
# tuned or thresholded on, scored once by build/pii_eval at the default
# threshold.  Text level only (the cases name a type, not a span, so the
# entity figures pii_eval prints for this set mean nothing).
#
#   bench/quality/pii/ref.sh REF_REPO_DIR [BUILD_DIR] [pii_eval options]
#
# REF_REPO_DIR: a git checkout of vllm-project/semantic-router (its HEAD is read).
set -eu
R=$1
B=${2:-build}
[ $# -ge 2 ] && shift 2 || shift 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in pii_detection_cases domain_classify_cases; do
    git -C "$R" show "HEAD:e2e/testcases/testdata/$f.json" > "$tmp/$f.json"
done
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
with open(d + "/test.jsonl", "w", encoding="utf-8") as out:
    for case in json.load(open(d + "/pii_detection_cases.json", encoding="utf-8")):
        q = case["question"]
        ents = [{"type": case.get("pii_type", "PERSON"), "text": q[:1], "start": 0, "end": len(q[:1].encode())}]
        out.write(json.dumps({"text": case["question"], "entities": ents if case.get("expected_blocked", True) else []}) + "\n")
    for case in json.load(open(d + "/domain_classify_cases.json", encoding="utf-8")):
        out.write(json.dumps({"text": case["question"], "entities": []}) + "\n")
PY
"$B/pii_eval" -n 1 "$@" "$tmp/test.jsonl" | grep -E "^(texts:|thr|  *0\.[0-9]+ )|texts \("
