# Sourced by the GPU scripts (scripts/gpu_tests.sh, benchmarks/gemm_gpu.sh, benchmarks/models_gpu.sh):
# on the GPU machine (no network), install the wheels carried in .whl/ (docs/development.md) and this
# repository's distributions, and make $OUT. Run from the repository's root.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e hookspecs -e core -e plugins/aten || exit 1
