#!/usr/bin/env bash
# On the GPU machine: check every Triton choice against float64 (scripts/triton_check.py), then run
# the GEMM set against ATen and Inductor max-autotune (gemm.py) and draw its chart. Extra arguments
# go to gemm.py (split the set with --only NAME,... where a device call's time limit is near, then
# join the parts with gemm.py --merge). Results go to $OUT: commit gemm.json and gemm.png as
# benchmarks/results/gemm_<device>.json and .png.
set -uo pipefail
source scripts/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
python3 scripts/triton_check.py --json "$OUT/triton_check.json" 2>&1 | tail -30
python3 benchmarks/gemm.py --json "$OUT/gemm.json" --chart "$OUT/gemm.png" "$@" 2>&1 | grep -v " \.\.\.$" | tail -60
