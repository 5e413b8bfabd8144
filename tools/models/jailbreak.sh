#!/bin/sh
# jailbreak.sh — trains the jailbreak head (data/jailbreak/jailbreak.head) and
# measures it: a logistic head over USE-lite embeddings of
# data/jailbreak/train.tsv, by tools/models/train_head.c.
#
#   tools/models/jailbreak.sh [BUILD_DIR]     (default build; release build)
#
# The training set is train.tsv (written by hand) followed by train_gen.tsv
# (tools/models/jailbreak_gen.py; regenerated here), in that order.
# 1. checks that no training text shares a word 5-gram with the evaluation
#    set (tools/models/ngram_overlap.py);
# 2. holds out every fifth line of each label of the training set (the dev
#    split) and trains a head on the other four fifths, for tuning only; the
#    dev split also gets the ordinary questions of data/domains/eval.jsonl
#    as benign texts (a third source: no jailbreak text was trained on them),
#    so the operating point is chosen against everyday questions too;
# 3. trains data/jailbreak/jailbreak.head on the whole training set, and its
#    lexical partner data/jailbreak/jailbreak_lexical.json (TF-IDF over word
#    uni- and bigrams + logistic regression, tools/models/train_lexical.py),
#    both also on the four fifths for the dev scores;
# 4. runs bench/quality/jailbreak.c with the dev split and its head: the
#    hybrid's weights are chosen on dev.tsv + the dev split, the evaluation
#    set is only scored.  Copy the "hybrid tuned on dev" values into
#    src/models/guard.h (VSR_GUARD_HEAD_*) when they change, rebuild, run
#    again, and copy the "lexical weight tuned on dev" values
#    (VSR_GUARD_LEXICAL_W, VSR_GUARD_OPERATING_POINT): the second stage is
#    chosen over the compiled-in first.
# Needs the model cache ($VSR_MODEL_CACHE, default ~/.cache/vsr/models).
set -eu
B=${1:-build}
D=data/jailbreak
M=${VSR_MODEL_CACHE:-$HOME/.cache/vsr/models}
export OPENBLAS_NUM_THREADS=1
cmake --build "$B" -j2 --target train_head jailbreak_quality >/dev/null
python3 tools/models/jailbreak_gen.py > $D/train_gen.tsv
python3 tools/models/ngram_overlap.py $D/train.tsv $D/eval_attacks.txt $D/eval_benign.txt
python3 tools/models/ngram_overlap.py $D/train_gen.tsv $D/eval_attacks.txt $D/eval_benign.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat $D/train.tsv $D/train_gen.tsv > "$tmp/train.tsv"
awk -F'\t' -v fit="$tmp/fit.tsv" -v dev="$tmp/dev.tsv" '
    /^#/ || NF < 2 { next }
    { n[$1]++; print > ((n[$1] % 5 == 0) ? dev : fit) }' "$tmp/train.tsv"
python3 -c 'import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    if line.strip(): print("benign\t" + " ".join(json.loads(line)["text"].split()))' data/domains/eval.jsonl > "$tmp/dev_q.tsv"
"$B/train_head" "$tmp/fit.tsv" "$M/use-lite.vsrm" "$tmp/dev.head"
"$B/train_head" "$tmp/train.tsv" "$M/use-lite.vsrm" $D/jailbreak.head
python3 tools/models/train_lexical.py "$tmp/fit.tsv" "$tmp/dev_lexical.json"
python3 tools/models/train_lexical.py "$tmp/train.tsv" $D/jailbreak_lexical.json
cat "$tmp/dev_q.tsv" >> "$tmp/dev.tsv"
JAILBREAK_DEV_SPLIT="$tmp/dev.tsv" JAILBREAK_DEV_HEAD="$tmp/dev.head" JAILBREAK_DEV_LEXICAL="$tmp/dev_lexical.json" \
    "$B/jailbreak_quality" $D
