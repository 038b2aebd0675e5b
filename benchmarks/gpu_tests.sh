#!/usr/bin/env bash
# On the GPU machine: pytest over test files (default: those with CUDA cases), one file at a time
# under its own time limit (LIMIT seconds, default 150), so that one slow file cannot hide the
# others' results. Each file's whole output goes to $OUT/pytest_<file>.txt as it runs; one line
# per file is printed when it ends (its exit status, then pytest's summary line).
#     bash benchmarks/gpu_tests.sh [tests/test_x.py ...]
set -uo pipefail
source benchmarks/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
export TUNESMITH_CACHE_DIR
TUNESMITH_CACHE_DIR=$(mktemp -d)
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=(tests/test_correctness.py tests/test_selection.py tests/test_cache.py tests/test_triton.py tests/test_calibrate.py)
fi
for file in "${files[@]}"; do
    log="$OUT/pytest_$(basename "$file" .py).txt"
    timeout "${LIMIT:-150}" python3 -m pytest -q -p no:cacheprovider --durations=5 "$file" >"$log" 2>&1
    echo "$file: exit $? ($(grep -E 'passed|failed|error' "$log" | tail -1))"
done
