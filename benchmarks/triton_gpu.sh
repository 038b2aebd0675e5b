#!/usr/bin/env bash
# On the GPU machine: a first look at the Triton plugin on CUDA: tune the GEMM set with aten and
# triton (winners verified against float64), then show where each case landed against ATen.
# Results go to $OUT.
set -uo pipefail
source benchmarks/gpu_install.sh
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton || exit 1
export TUNESMITH_CACHE_DIR
TUNESMITH_CACHE_DIR=$(mktemp -d)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env_triton.txt"
TUNESMITH_VERIFY=1 python3 -m tunesmith tune benchmarks/gemm_shapes.json --device cuda --backends aten,triton \
    --json "$OUT/triton_gemm_first.json" 2>&1 | tail -25
