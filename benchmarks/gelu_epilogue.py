"""Where addmm_gelu_mlp's fused Triton kernel spends its time (GPU): the same configs with no
epilogue step, relu and GELU, against ATen's addmm alone and addmm then GELU. Each kernel is
checked against the float64 reference; times are interleaved rounds of do_bench medians.

    python benchmarks/gelu_epilogue.py --json $OUT/gelu_epilogue.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import triton
from gemm import SHAPES, _eager, interleaved
from tunesmith_triton.choice import TritonChoice

from tunesmith import problemset
from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.problem import build_problem
from tunesmith_hookspecs import ChoiceSpec

WIDE = {"block_m": 128, "block_n": 256, "block_k": 64, "group_m": 8, "num_warps": 8, "persistent": True}
SQUARE = {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 4}
CONFIGS = {
    "ws s3 sub2": {**WIDE, "num_stages": 3, "subtile": 2, "warp_specialize": True},
    "ws s4 sub2": {**WIDE, "num_stages": 4, "subtile": 2, "warp_specialize": True},
    "ws s4 sub4": {**WIDE, "num_stages": 4, "subtile": 4, "warp_specialize": True},
    # one warpgroup per 128 x 128 tile, two or three programs an SM: one's epilogue can overlap
    # another's main loop
    "128x128 w4 s3": {**SQUARE, "num_stages": 3},
    "128x128 w4 s4": {**SQUARE, "num_stages": 4},
    "128x128 w4 s3 sub2": {**SQUARE, "num_stages": 3, "subtile": 2},
    "128x128 w4 s2": {**SQUARE, "num_stages": 2},
    "128x128 w8 s3 sub2": {**SQUARE, "num_warps": 8, "num_stages": 3, "subtile": 2},
}
#: label: epilogue steps
EPILOGUES = {"bias only": [], "relu": ["relu"], "gelu erf": ["gelu"]}
ROUNDS = 9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    case = next(c for c in problemset.load(SHAPES) if c.name == "addmm_gelu_mlp")
    tensors, scalars = problemset.make_inputs(case, "cuda")
    bias, a, b = tensors
    eager = _eager(case)  # the GEMM set's ATen path: addmm, then GELU
    paths: dict[str, Any] = {
        "aten addmm": lambda: torch.addmm(bias, a, b),
        "aten addmm, gelu": lambda: eager(scalars, *tensors),
    }
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: dict[str, dict[str, Any]] = {}
    for elabel, steps in EPILOGUES.items():
        problem, inputs = build_problem(case.op, tensors, scalars, steps)
        ref = reference(problem, inputs)
        for clabel, params in CONFIGS.items():
            label = f"{clabel}, {elabel}"
            run = TritonChoice(ChoiceSpec("triton", "gemm_tma", params), problem, "ieee", sms=sms).kernel()
            error = relative_error(run(*inputs), ref)
            rows[label] = {"params": params, "epilogue": steps, "rel_error": error}
            if error > tolerance(problem):
                rows[label]["error"] = "over tolerance"
                continue
            paths[label] = lambda run=run, inputs=inputs: run(*inputs)
    times = {name: statistics.median(t) for name, t in interleaved(paths, ROUNDS).items()}
    for label, row in rows.items():
        if label in times:
            row["ms"] = times[label]
    for name, ms in sorted(times.items(), key=lambda kv: kv[1]):
        error = rows.get(name, {}).get("rel_error")
        print(f"  {name:28s} {ms * 1e3:8.2f} us" + (f"  rel error {error:.2e}" if error is not None else ""))
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "timing": f"median of {ROUNDS} interleaved rounds of do_bench medians (warmup 10 ms, rep 40 ms)",
        "case": case.name,
        "aten_ms": {k: times[k] for k in ("aten addmm", "aten addmm, gelu")},
        "variants": rows,
    }
    Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
