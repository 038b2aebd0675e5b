#!/usr/bin/env bash
# On the GPU machine: one device call's share of the corpus run (corpus.py), on every GPU of the
# machine at once: a shard of the cases each (--shard i/N), on its share of the CPU cores. Each
# shard continues the result at $PART (default benchmarks/results/corpus_part.json: the previous
# call's $OUT/corpus.json, copied into the working tree so that it travels) and starts no case after
# $STOP_AFTER seconds (default 400), so that the call ends inside its 10 minutes; the shards are
# then merged into $OUT/corpus.json. Extra arguments go to corpus.py (--split test). Repeat until no
# shard has a case left; then commit $OUT/corpus.json as benchmarks/results/corpus_<device>.json.
# GPUS sets how many GPUs to use (default: all). The shards share the host: a cold tune's and a
# compile's seconds are taken on 1/N of its cores, the same for tunesmith and Inductor.
set -uo pipefail
source scripts/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
PART=${PART:-benchmarks/results/corpus_part.json}
N=${GPUS:-$(python3 -c 'import torch; print(max(torch.cuda.device_count(), 1))')}
PER=$(($(nproc) / N))
for ((i = 0; i < N; i++)); do
    if [ -f "$PART" ]; then cp "$PART" "$OUT/shard$i.json"; fi
    CUDA_VISIBLE_DEVICES=$i taskset -c "$((i * PER))-$(((i + 1) * PER - 1))" python3 benchmarks/corpus.py \
        --json "$OUT/shard$i.json" --resume --stop-after "${STOP_AFTER:-400}" --shard "$((i + 1))/$N" "$@" \
        > "$OUT/shard$i.log" 2>&1 &
done
wait
for ((i = 0; i < N; i++)); do echo "shard $((i + 1))/$N:"; grep -E "no case left|stopped after|failed" "$OUT/shard$i.log"; done
python3 benchmarks/corpus.py --merge "$OUT"/shard*.json --json "$OUT/corpus.json" 2>&1 | tail -40
rm -f "$OUT"/shard*.json
