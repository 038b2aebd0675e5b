"""The pointer template's variants on the GEMM set's short-K and decode cases (GPU): baddbmm's
tiles with the bias loaded first (``BIAS_FIRST``) and last, beside the time to write its output
and to copy its bias (the floors of an output-bound kernel); decode_m16's split-K configs beside
ATen. Each variant is checked against the float64 reference and timed by do_bench medians.

    python benchmarks/pointer_variants.py --json $OUT/pointer_variants.json
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

#: (block_m, block_n, block_k, warps, stages, split_k)
BADDBMM = (
    (64, 128, 64, 4, 2, 1),
    (64, 128, 32, 4, 3, 1),
    (128, 128, 64, 4, 3, 1),
    (128, 128, 32, 4, 4, 1),
    (64, 64, 64, 4, 2, 1),
    (64, 256, 64, 8, 2, 1),
    (128, 128, 64, 8, 2, 1),
)
DECODE = (
    (16, 64, 64, 4, 4, 4),
    (16, 64, 64, 4, 4, 8),
    (16, 64, 128, 4, 4, 4),
    (16, 64, 128, 4, 4, 8),
    (16, 128, 64, 4, 4, 8),
    (16, 32, 256, 2, 4, 8),
)
ROUNDS = 9


def _without_bias_first(choice: TritonChoice) -> None:
    """Make ``choice`` load its bias after the main loop, as before ``BIAS_FIRST``."""
    launches = choice._launches

    def patched(*args: Any) -> Any:
        out = []
        for kernel, grid, kargs, meta in launches(*args):
            if meta.get("BIAS_FIRST"):
                meta = {**meta, "BIAS_FIRST": False, "HAS_BIAS": True}
            out.append((kernel, grid, kargs, meta))
        return out

    choice._launches = patched  # type: ignore[method-assign]


def run_case(name: str, configs: tuple[tuple[int, ...], ...], both: bool) -> dict[str, Any]:
    case = next(c for c in problemset.load(SHAPES) if c.name == name)
    tensors, scalars = problemset.make_inputs(case, "cuda")
    problem, inputs = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    ref = reference(problem, inputs)
    eager = _eager(case)
    paths: dict[str, Any] = {"aten": lambda: eager(scalars, *tensors)}
    out = eager(scalars, *tensors)
    paths["write_output"] = lambda: out.fill_(1.0)
    if case.op == "baddbmm":
        paths["copy_bias"] = lambda: out.copy_(tensors[0])
    rows: dict[str, dict[str, Any]] = {}
    for bm, bn, bk, warps, stages, split in configs:
        for first in (True, False) if both else (True,):
            params = {"block_m": bm, "block_n": bn, "block_k": bk, "group_m": 8, "num_warps": warps}
            params |= {"num_stages": stages} | ({"split_k": split} if split > 1 else {})
            label = f"{bm}x{bn}x{bk} w{warps} s{stages}" + f" split{split}" * (split > 1)
            label += "" if not both else " bias first" if first else " bias last"
            choice = TritonChoice(ChoiceSpec("triton", "gemm", params), problem, "ieee")
            if not first:
                _without_bias_first(choice)
            run = choice.kernel()
            error = relative_error(run(*inputs), ref)
            rows[label] = {"params": params, "bias_first": first, "rel_error": error}
            if error > tolerance(problem):
                rows[label]["error"] = "over tolerance"
                continue
            paths[label] = lambda run=run: run(*inputs)
    times = {name: statistics.median(t) for name, t in interleaved(paths, ROUNDS).items()}
    floors = {k: times[k] for k in ("write_output", "copy_bias") if k in times}
    for label, ms in times.items():
        if label in rows:
            rows[label] |= {"ms": ms, "speedup_vs_aten": times["aten"] / ms}
    shown = ", ".join(f"{k} {v * 1e3:.2f} us" for k, v in floors.items())
    print(f"{name}: aten {times['aten'] * 1e3:.2f} us, {shown}")
    for label, row in sorted(rows.items(), key=lambda kv: kv[1].get("ms", 1e9)):
        ratio = row.get("speedup_vs_aten", 0)
        print(f"  {label:36s} {row.get('ms', 0) * 1e3:8.2f} us {ratio:.3f}x {row.get('error', '')}")
    return {"name": name, "aten_ms": times["aten"], **{f"{k}_ms": v for k, v in floors.items()}, "variants": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "timing": f"median of {ROUNDS} interleaved rounds of do_bench medians (warmup 10 ms, rep 40 ms)",
        "cases": [run_case("baddbmm_attn_scores", BADDBMM, True), run_case("decode_m16", DECODE, False)],
    }
    Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
