#!/usr/bin/env bash
# On the GPU machine: the torch.compile backend's tests on CUDA (test_compile.py, with its multi-GPU
# test, and test_compile_modes.py). The model benchmark is benchmarks/models_gpu.sh. Results go to $OUT.
set -uo pipefail
source benchmarks/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$OUT/env_compile.txt"
export TUNESMITH_CACHE_DIR
TUNESMITH_CACHE_DIR=$(mktemp -d)
python3 -m pytest -q -p no:cacheprovider tests/test_compile.py tests/test_compile_modes.py 2>&1 | tail -5 \
    | tee "$OUT/pytest_compile_gpu.txt"
