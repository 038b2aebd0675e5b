#!/usr/bin/env bash
# The model benchmark on the GPU machine, within its device budget: installs the repository (and the
# wheels carried in .whl/), then runs benchmarks/models.py on every GPU at once, a group of models
# each, on its share of the CPU cores (a model's rows on one GPU, unless split as below), and
# merges the rows into $OUT/models.json with its chart (commit them as benchmarks/results/models_<device>.json and .png).
# Groups: on four GPUs or more gpt2,t5 | mlp_decode,llama,bert | bert_train | resnet50; on two
# gpt2,mlp_decode,llama,t5 | bert,bert_train,resnet50; on one, all. resnet50's max-autotune rows run last in their group (its compile
# took over 200 s when the issue was filed). Rows are written as they finish, so a run stopped
# early keeps what it measured. Without the max-autotune rows (VARIANTS=tunesmith,
# tunesmith_blocking,reduce_overhead,eager) and with three processes, a model needs about 5 to 7
# minutes of a GPU on an H200 and BERT training about 10 (estimated from one process of each), so
# on four GPUs, within a device call's 10 minutes, two calls of MODEL_GROUPS=
# "bert_train:tunesmith+tunesmith_blocking;bert_train:reduce_overhead+eager;t5;bert" and
# "gpt2;llama;mlp_decode;resnet50".
# On one GPU, VARIANTS=tunesmith,reduce_overhead,eager PROCESSES=3 WARM=none (the warm first steps
# then come from the timed processes alone) needs about 15 minutes (estimated from the H200 rows'
# process times): start it with setsid in one device call and collect it in the next.
#   bash benchmarks/models_gpu.sh            # or: setsid bash benchmarks/models_gpu.sh > log 2>&1 &
# MODEL_GROUPS changes the groups (";" between GPUs, "," within; MODEL:VARIANT+VARIANT runs only
# those of a model's rows, so that its variants can share two GPUs), LAST_MODELS the models whose
# max-autotune rows run last (resnet50), VARIANTS the rows (in the order they run:
# max_autotune_nocg after max_autotune starts on its warm caches), LIMIT the seconds a max-autotune
# process may take (600) and LAST_LIMIT that for LAST_MODELS (450), PROCESSES how many processes
# time each of the variants the bars compare (3); WORK is where rows and logs go (/tmp/models),
# WARM the variants also timed in a warm process (tunesmith,reduce_overhead), KERNELS where each
# row's table of profiled kernels and host profile goes (WORK/kernels), COLD, where set, where
# each warm-timed row's cold and warm first-step cProfile goes (none by default: two more processes
# a row, before its repeats, which in a device call's 10 minutes left no time for the repeats of
# three models), SAMPLES, where set, where every process's first step's sampled stacks go (no
# extra processes); all are packed into $OUT/profiles.tar.gz at the end. Rows already in WORK's
# gpu<i>.json are kept (--resume): copy a stopped run's files there to finish it.
set -u
source scripts/gpu_install.sh || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
export PYTHONUNBUFFERED=1
WORK=${WORK:-/tmp/models}
KERNELS=${KERNELS:-$WORK/kernels} COLD=${COLD:-} SAMPLES=${SAMPLES:-}
mkdir -p "$WORK" "$KERNELS" ${COLD:+"$COLD"} ${SAMPLES:+"$SAMPLES"}
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [ "$N" -ge 4 ]; then DEFAULT="gpt2,t5;mlp_decode,llama,bert;bert_train;resnet50"
elif [ "$N" -ge 2 ]; then DEFAULT="gpt2,mlp_decode,llama,t5;bert,bert_train,resnet50"
else DEFAULT="gpt2,mlp_decode,llama,bert,bert_train,t5,resnet50"; fi
IFS=';' read -ra GROUP <<< "${MODEL_GROUPS:-$DEFAULT}"
PER=$(($(nproc) / ${#GROUP[@]}))
ORDER=${VARIANTS:-tunesmith,tunesmith_blocking,max_autotune,reduce_overhead,tunesmith_aten_only,tunesmith_default,inductor,eager,max_autotune_nocg}
LAST=",${LAST_MODELS:-resnet50},"
run() {  # GPU ARGS...
    local gpu=$1 pin=(); shift
    if [ "$PER" -ge 1 ]; then pin=(taskset -c "$((gpu * PER))-$(((gpu + 1) * PER - 1))"); fi
    CUDA_VISIBLE_DEVICES=$gpu "${pin[@]}" python3 benchmarks/models.py \
        --warm "${WARM:-tunesmith,reduce_overhead}" --resume --limit "${LIMIT:-600}" --kernels "$KERNELS" ${COLD:+--cold-profile "$COLD"} ${SAMPLES:+--first-step-samples "$SAMPLES"} \
        --processes "${PROCESSES:-3}" --json "$WORK/gpu$gpu.json" "$@"
}
group() {  # GPU ITEMS: each item's rows (MODEL, or MODEL:VARIANT+VARIANT), one item after another
    local gpu=$1 item model order not_ma
    for item in ${2//,/ }; do
        model=${item%%:*} order=$ORDER
        if [[ $item == *:* ]]; then order=$(tr + , <<< "${item#*:}"); fi
        if [[ $LAST == *",$model,"* ]]; then
            not_ma=$(tr , '\n' <<< "$order" | grep -v '^max_autotune' | paste -sd,)
            if [ -n "$not_ma" ]; then run "$gpu" --models "$model" --variants "$not_ma"; fi
            run "$gpu" --models "$model" --variants "$order" --limit "${LAST_LIMIT:-450}"
        else
            run "$gpu" --models "$model" --variants "$order"
        fi
    done
}
for i in "${!GROUP[@]}"; do
    group "$i" "${GROUP[$i]}" > "$WORK/gpu$i.log" 2>&1 &
done
wait
python3 benchmarks/models.py --merge "$WORK"/gpu*.json --json "$OUT/models.json" --chart "$OUT/models.png"
tar -czf "$OUT/profiles.tar.gz" -C "$WORK" "$(basename "$KERNELS")" ${COLD:+"$(basename "$COLD")"} ${SAMPLES:+"$(basename "$SAMPLES")"}  # one file travels back
echo done > "$WORK/done"
