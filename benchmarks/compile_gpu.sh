#!/usr/bin/env bash
# On the GPU machine: the torch.compile backend's tests on CUDA, then the GPT-2 block benchmark
# (eager, Inductor default, tunesmith with the eager and the inductor graph compiler; with
# "max_autotune" as the first argument, Inductor max-autotune alone). Results go to $OUT.
set -uo pipefail
source benchmarks/gpu_install.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/env_compile.txt"
if [ "${1:-}" = max_autotune ]; then
    python3 benchmarks/gpt2_block.py --variants max_autotune --json "$OUT/gpt2_block_max_autotune.json"
    exit
fi
export TUNESMITH_CACHE_DIR
TUNESMITH_CACHE_DIR=$(mktemp -d)
python3 -m pytest -q -p no:cacheprovider tests/test_compile.py 2>&1 | tail -5 | tee "$OUT/pytest_compile_gpu.txt"
python3 benchmarks/gpt2_block.py --variants eager,inductor,tunesmith_eager,tunesmith_inductor --json "$OUT/gpt2_block.json"
