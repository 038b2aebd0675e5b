#!/usr/bin/env bash
# On the GPU machine: one device call's share of the corpus run (corpus.py). It continues the result
# at $PART (default benchmarks/results/corpus_part.json: the previous call's $OUT/corpus.json, copied
# into the working tree so that it travels) and starts no case after $STOP_AFTER seconds (default
# 400), so that the call ends inside its 10 minutes. Extra arguments go to corpus.py (--split test,
# --shard 1/2). Repeat until it says no case is left; then commit $OUT/corpus.json as
# benchmarks/results/corpus_<device>.json (corpus.py --merge joins the parts of several GPUs).
set -uo pipefail
source scripts/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
PART=${PART:-benchmarks/results/corpus_part.json}
if [ -f "$PART" ]; then cp "$PART" "$OUT/corpus.json"; fi
python3 benchmarks/corpus.py --json "$OUT/corpus.json" --resume --stop-after "${STOP_AFTER:-400}" "$@" 2>&1 | tail -60
