#!/usr/bin/env bash
# On the GPU machine (no network): install this repository, run the CPU test files that also
# cover CUDA (every op against float64 on the GPU, CUDA-event timing, caches) and the conformance
# suite for aten on CUDA, then tune the
# GEMM set with the aten backend: cold, warm in a fresh process, and cold again on a new cache.
# Missing Python packages travel as wheels in .whl/ (docs/development.md). Results go to $OUT.
set -uo pipefail
source benchmarks/gpu_install.sh
export TUNESMITH_CACHE_DIR
TUNESMITH_CACHE_DIR=$(mktemp -d)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee -a "$OUT/env.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_correctness.py tests/test_selection.py tests/test_cache.py 2>&1 | tail -15 | tee "$OUT/pytest_gpu.txt"
python3 -m pytest -q -p no:cacheprovider --pyargs tunesmith.conformance --tunesmith-plugin aten --tunesmith-device cuda \
    2>&1 | tail -5 | tee "$OUT/conformance_aten_cuda.txt"
for run in cold warm cold2; do
    if [ "$run" = cold2 ]; then TUNESMITH_CACHE_DIR=$(mktemp -d); fi  # tuned again: run-to-run spread
    start=$(python3 -c 'import time; print(time.time())')
    python3 -m tunesmith tune benchmarks/gemm_shapes.json --device cuda --json "$OUT/aten_gemm_$run.json" | tail -25
    python3 -c "import time; print('$run process wall: %.2f s' % (time.time() - $start))" | tee -a "$OUT/env.txt"
done
