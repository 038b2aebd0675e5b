#!/usr/bin/env bash
# The model benchmark on the GPU machine, within its device budget: installs the repository (and the
# wheels carried in .whl/), then runs benchmarks/models.py on each of two GPUs at once, each on half
# of the CPU cores, a model's rows all on one GPU (GPU 0: gpt2, mlp_decode, then resnet50 with
# max-autotune last; GPU 1: llama, bert), and merges the rows into $OUT/models_<device>.json with its
# chart. Rows are written as they finish, so a run stopped early keeps what it measured.
#   bash benchmarks/models_gpu.sh            # or: setsid bash benchmarks/models_gpu.sh > log 2>&1 &
set -u
source benchmarks/gpu_install.sh || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
export PYTHONUNBUFFERED=1
WORK=${WORK:-/tmp/models}
mkdir -p "$WORK"
N=$(nproc); H=$((N / 2))
ORDER=tunesmith,max_autotune,reduce_overhead,tunesmith_default,inductor,eager,tunesmith_aten_only,max_autotune_nocg
run() {  # GPU CPUS JSON ARGS...
    local gpu=$1 cpus=$2 json=$3; shift 3
    CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" python3 benchmarks/models.py --warm tunesmith --resume --json "$json" "$@"
}
(
    run 0 "0-$((H - 1))" "$WORK/gpu0.json" --models gpt2,mlp_decode --variants "$ORDER"
    run 0 "0-$((H - 1))" "$WORK/gpu0.json" --models resnet50 --variants tunesmith,reduce_overhead,tunesmith_default,inductor,eager,tunesmith_aten_only
    run 0 "0-$((H - 1))" "$WORK/gpu0.json" --models resnet50 --variants max_autotune,max_autotune_nocg
) > "$WORK/gpu0.log" 2>&1 &
run 1 "$H-$((N - 1))" "$WORK/gpu1.json" --models llama,bert --variants "$ORDER" > "$WORK/gpu1.log" 2>&1 &
wait
echo done > "$WORK/done"
