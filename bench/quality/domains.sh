#!/usr/bin/env bash
# The domain classifier's offline quality: builds the evaluator (release,
# without the unit tests) and scores data/domains/eval.jsonl on one core.
#   bench/quality/domains.sh [--misses]
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVSR_TESTS=OFF >/dev/null
cmake --build build -j2 --target quality_domains >/dev/null
OPENBLAS_NUM_THREADS=1 exec taskset -c 0 build/quality_domains data/domains/domain.head data/domains/eval.jsonl "$@"
