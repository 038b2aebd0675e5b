#!/usr/bin/env bash
# The model benchmark on the GPU machine, within its device budget: installs the repository (and the
# wheels carried in .whl/), then runs benchmarks/models.py on each of two GPUs at once, each on half
# of the CPU cores, a model's rows all on one GPU (GPU 0: gpt2, mlp_decode, llama; GPU 1: bert, then
# resnet50, whose max-autotune rows run last), and merges the rows into $OUT/models.json with its
# chart (commit them as benchmarks/results/models_<device>.json and .png). Rows are written as they
# finish, so a run stopped early keeps what it measured. About 22 minutes on an H100 pair.
#   bash benchmarks/models_gpu.sh            # or: setsid bash benchmarks/models_gpu.sh > log 2>&1 &
# GPU0_MODELS, GPU1_MODELS and LAST_MODELS change the split, VARIANTS the rows (in the order they
# run: max_autotune_nocg after max_autotune starts on its warm caches), LIMIT the seconds a
# max-autotune process may take (600) and LAST_LIMIT that for LAST_MODELS (450); WORK is where rows
# and logs go (/tmp/models), KERNELS where each row's table of profiled kernels goes ($OUT/kernels),
# PROCESSES how many processes time each of the variants the bars compare (3; about 5 minutes more).
# Rows already in WORK's gpu0.json and gpu1.json are kept (--resume): copy a stopped run's files
# there to finish it.
set -u
source scripts/gpu_install.sh || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
export PYTHONUNBUFFERED=1
WORK=${WORK:-/tmp/models}
mkdir -p "$WORK"
N=$(nproc); H=$((N / 2))
ORDER=${VARIANTS:-tunesmith,max_autotune,reduce_overhead,tunesmith_aten_only,tunesmith_default,inductor,eager,max_autotune_nocg}
NOT_MA=$(echo "$ORDER" | tr , '\n' | grep -v '^max_autotune' | paste -sd,)
run() {  # GPU CPUS JSON ARGS...
    local gpu=$1 cpus=$2 json=$3; shift 3
    CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" python3 benchmarks/models.py --warm tunesmith --resume \
        --limit "${LIMIT:-600}" --kernels "${KERNELS:-$OUT/kernels}" --processes "${PROCESSES:-3}" \
        --json "$json" "$@"
}
run 0 "0-$((H - 1))" "$WORK/gpu0.json" --models "${GPU0_MODELS:-gpt2,mlp_decode,llama}" --variants "$ORDER" \
    > "$WORK/gpu0.log" 2>&1 &
(
    run 1 "$H-$((N - 1))" "$WORK/gpu1.json" --models "${GPU1_MODELS:-bert}" --variants "$ORDER"
    # resnet50's max-autotune compile took over 200 s when the issue was filed: last, capped
    LAST=${LAST_MODELS:-resnet50}
    run 1 "$H-$((N - 1))" "$WORK/gpu1.json" --models "$LAST" --variants "$NOT_MA"
    run 1 "$H-$((N - 1))" "$WORK/gpu1.json" --models "$LAST" --variants "$ORDER" --limit "${LAST_LIMIT:-450}"
) > "$WORK/gpu1.log" 2>&1 &
wait
python3 benchmarks/models.py --merge "$WORK"/gpu*.json --json "$OUT/models.json" --chart "$OUT/models.png"
echo done > "$WORK/done"
