#!/bin/sh
# domain.sh — rebuilds the domain classifier's Debian-derived training set
# (data/domains/debian.jsonl) and retrains data/domains/domain.head.
#
#   tools/models/domain.sh [BUILD_DIR]      (default build; needs train_head)
#
# Downloads dict-gcide, wordnet-base and dict-foldoc with apt-get download
# (no installation, no root needed) into a temporary folder, unpacks them
# with dpkg -x, generates the questions (tools/models/domain_data.py) and
# trains the head with the hyper-parameters chosen on the dev set
# (docs/signals.md, "The domain classifier").  The package versions used are
# printed; data/domains/README.md records those of the committed files.
# Deterministic for given package versions.
set -eu
build=${1:-build}
model=${VSR_USE_LITE:-$HOME/.cache/vsr/models/use-lite.vsrm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download dict-gcide wordnet-base dict-foldoc)
for deb in "$tmp"/*.deb; do
    dpkg-deb -f "$deb" Package Version | paste -sd' '
    dpkg -x "$deb" "$tmp/root"
done
python3 tools/models/domain_data.py --root "$tmp/root" --per-class 1000 data/domains/debian.jsonl
OPENBLAS_NUM_THREADS=1 "$build/train_head" data/domains/exemplars.jsonl@30,data/domains/debian.jsonl "$model" \
    data/domains/domain.head --dev data/domains/eval.jsonl --balance --l2 3e-4 --lexical 16384 --lex-scale 1
