"""The TMA template's variants on cases of the GEMM set (GPU): one- and multi-tile programs,
the epilogue in column slices, a warp-specialised producer; each checked against the float64
reference and timed against ATen by do_bench medians, with its registers and spills. It tells
which variants the search space should offer.

    python benchmarks/tma_variants.py --json $OUT/tma_variants.json [--cases addmm_gelu_mlp,...]
"""

from __future__ import annotations

import argparse
import itertools
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

CASES = "addmm_gelu_mlp,addmm_relu_4096,square_8192_bf16,llama7b_down_prefill"
#: (block_m, block_n, block_k, warps)
TILES = ((128, 256, 64, 8), (256, 128, 64, 8), (128, 128, 64, 8))
#: (stages, persistent, subtile, warp_specialize)
SHAPES_OF_LOOP = (
    (3, False, 1, False),
    (3, False, 2, False),
    (3, True, 1, False),
    (3, True, 2, False),
    (3, True, 4, False),
    (4, True, 2, False),
    (3, True, 1, True),
    (3, True, 2, True),
    (4, True, 2, True),
)
#: interleaved rounds of do_bench medians (``gemm.interleaved``): fewer than the GEMM set's, as
#: each case here has 28 paths
ROUNDS = 5


def run_case(case: Any) -> dict[str, Any]:
    tensors, scalars = problemset.make_inputs(case, "cuda")
    problem, inputs = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    ref = reference(problem, inputs)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    eager = _eager(case)
    paths: dict[str, Any] = {"aten": lambda: eager(scalars, *tensors)}
    rows: dict[str, dict[str, Any]] = {}
    for (bm, bn, bk, warps), (stages, persistent, subtile, ws) in itertools.product(TILES, SHAPES_OF_LOOP):
        params = {"block_m": bm, "block_n": bn, "block_k": bk, "group_m": 8, "num_warps": warps}
        params |= {"num_stages": stages, "persistent": persistent, "subtile": subtile, "warp_specialize": ws}
        label = f"{bm}x{bn}x{bk} w{warps} s{stages}" + " pers" * persistent + f" sub{subtile}" + " ws" * ws
        try:
            choice = TritonChoice(ChoiceSpec("triton", "gemm_tma", params), problem, "ieee", sms=sms)
            run = choice.kernel()
            out = run(*inputs)
            torch.cuda.synchronize()
            compiled = next(iter(choice._direct.values())).launches[0][0]
            rows[label] = {
                "params": params,
                "rel_error": relative_error(out, ref),
                "registers": getattr(compiled, "n_regs", None),
                "spills": getattr(compiled, "n_spills", None),
            }
            if rows[label]["rel_error"] > tolerance(problem):
                rows[label]["error"] = "over tolerance"
                continue
            paths[label] = lambda run=run: run(*inputs)
        except Exception as exc:  # noqa: BLE001 - a variant this Triton cannot build: recorded, not fatal
            rows[label] = {"params": params, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    times = {name: statistics.median(t) for name, t in interleaved(paths, ROUNDS).items()}
    for label, ms in times.items():
        if label != "aten":
            rows[label] |= {"ms": ms, "speedup_vs_aten": times["aten"] / ms}
    print(f"{case.name}: aten {times['aten']:.4f} ms", flush=True)
    for label, row in sorted(rows.items(), key=lambda kv: kv[1].get("ms", 1e9)):
        extra = f"{row['ms']:.4f} ms {row['speedup_vs_aten']:.3f}x" if "ms" in row else row.get("error", "")
        print(f"  {label:40s} {extra} regs {row.get('registers')} spills {row.get('spills')}", flush=True)
    return {"name": case.name, "aten_ms": times["aten"], "variants": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--cases", default=CASES)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    wanted = args.cases.split(",")
    cases = [c for c in problemset.load(SHAPES) if c.name in wanted]
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "timing": f"median of {ROUNDS} interleaved rounds of do_bench medians (warmup 10 ms, rep 40 ms)",
        "cases": [run_case(case) for case in cases],
    }
    Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
