#!/usr/bin/env bash
# On the GPU machine: check every Triton choice against float64 (triton_check.py), then run the
# GEMM set against ATen and Inductor max-autotune (gemm.py). Extra arguments go to gemm.py.
# Results go to $OUT.
set -uo pipefail
source benchmarks/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
python3 benchmarks/triton_check.py --json "$OUT/triton_check.json" 2>&1 | tail -30
python3 benchmarks/gemm.py --json "$OUT/gemm.json" "$@" 2>&1 | grep -v " \.\.\.$" | tail -60
