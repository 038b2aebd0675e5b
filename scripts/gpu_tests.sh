#!/usr/bin/env bash
# On the GPU machine (no network): the tests that only a GPU runs in full. Installs the repository
# (scripts/gpu_install.sh) and the Triton plugin, records the device and versions in $OUT/env.txt,
# then runs pytest over test files one at a time, each under its own time limit (LIMIT seconds,
# default 150), so that one slow file cannot hide the others' results. Each file's whole output goes
# to $OUT/pytest_<file>.txt as it runs; one line per file is printed when it ends (its exit status,
# then pytest's summary line). An argument conformance:PLUGIN runs the conformance suite for that
# plugin on CUDA instead of a file (docs/conformance.md). Default: the test files with CUDA cases,
# the torch.compile backend's among them (its multi-GPU test too), and the conformance suite for aten.
#     bash scripts/gpu_tests.sh [tests/test_x.py | conformance:PLUGIN ...]
#     LIMIT=480 bash scripts/gpu_tests.sh tests/test_correctness.py
# The CUTLASS plugin's suite needs its libraries built first: scripts/cutlass_check.py. Every Triton
# choice against float64 on the GPU: scripts/triton_check.py.
set -uo pipefail
source scripts/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
export TUNESMITH_CACHE_DIR
TUNESMITH_CACHE_DIR=$(mktemp -d)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee -a "$OUT/env.txt"
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(tests/test_timing.py tests/test_correctness.py tests/test_selection.py tests/test_cache.py tests/test_triton.py
        tests/test_calibrate.py tests/test_compile.py tests/test_compile_modes.py conformance:aten)
fi
for file in "${files[@]}"; do
    if [[ $file == conformance:* ]]; then
        plugin=${file#conformance:}
        log="$OUT/conformance_${plugin}_cuda.txt"
        command=(--pyargs tunesmith.conformance --tunesmith-plugin "$plugin" --tunesmith-device cuda)
    else
        log="$OUT/pytest_$(basename "$file" .py).txt"
        command=(--durations=5 "$file")
    fi
    timeout "${LIMIT:-150}" python3 -m pytest -q -p no:cacheprovider "${command[@]}" >"$log" 2>&1
    echo "$file: exit $? ($(grep -E 'passed|failed|error' "$log" | tail -1))"
done
