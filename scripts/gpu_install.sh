# Sourced by the GPU scripts (scripts/gpu_tests.sh, benchmarks/gemm_gpu.sh, benchmarks/models_gpu.sh):
# on the GPU machine (no network), install the wheels carried in .whl/ (docs/development.md) and this
# repository's distributions, and make $OUT. Run from the repository's root. The machine's image sets
# PYTHONDONTWRITEBYTECODE=1, so every process compiled each module it imports from source (0.17 to
# 0.74 s of a warm process's first step under cProfile in the H200 model run, more where tunesmith's
# Triton plugin loads). It is unset here, as on a user's machine: the first process writes the
# bytecode that the later ones read.
unset PYTHONDONTWRITEBYTECODE
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e hookspecs -e core -e plugins/aten || exit 1
