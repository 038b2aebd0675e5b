"""Whether the GEMM set's large cases rank their choices alike when timed on an idle (cool) GPU
and on one that has run for a while (at its power limit), as kernels in a real program run
(GPU). For each case: ATen and the Triton configs tuning offers there, each timed as tuning
times it (``time_callable``: 2 warm-up calls, the median of 10), in tuning's order, after an
idle second or after the first choice has run for ``--preheat`` milliseconds; then the same
choices by the GEMM set's method (interleaved rounds of do_bench), the run-long reference.

    python benchmarks/hot_tuning.py --json $OUT/hot_tuning.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
from gemm import SHAPES, _eager, interleaved
from tunesmith_triton.choice import TritonChoice

from tunesmith import problemset
from tunesmith.bench.timing import time_callable
from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.problem import build_problem
from tunesmith_hookspecs import ChoiceSpec

CASES = "square_8192_bf16,llama7b_qkv_prefill,llama7b_up_prefill,llama7b_down_prefill,llama70b_qkv_prefill"
WIDE = {"block_m": 128, "block_n": 256, "block_k": 64, "group_m": 8, "num_warps": 8, "subtile": 2}
#: params of the TMA template
CONFIGS = {
    "ws s3": {**WIDE, "num_stages": 3, "persistent": True, "warp_specialize": True},
    "ws s4": {**WIDE, "num_stages": 4, "persistent": True, "warp_specialize": True},
    "tma s3": {**WIDE, "num_stages": 3},
}
TRIALS = 3
ROUNDS = 9


def _clock_mhz() -> int | None:
    try:
        return torch.cuda.clock_rate()
    except Exception:  # noqa: BLE001 - no NVML: the clock is not recorded
        return None


def _keep_busy(fn: Any, ms: float) -> None:
    """Run ``fn`` back to back for ``ms`` milliseconds of wall time."""
    torch.cuda.synchronize()
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        for _ in range(4):
            fn()
        torch.cuda.synchronize()


def _tuning_pass(paths: dict[str, Any], preheat_ms: float) -> dict[str, Any]:
    device = torch.device("cuda")
    first = next(iter(paths.values()))
    if preheat_ms:
        _keep_busy(first, preheat_ms)
    else:
        torch.cuda.synchronize()
        time.sleep(1.0)
    clock_before = _clock_mhz()
    times = {name: time_callable(fn, device, 2, 10).ms for name, fn in paths.items()}
    return {"ms": times, "clock_mhz_before": clock_before, "clock_mhz_after": _clock_mhz()}


def run_case(name: str, preheat: list[float]) -> dict[str, Any]:
    case = next(c for c in problemset.load(SHAPES) if c.name == name)
    tensors, scalars = problemset.make_inputs(case, "cuda")
    problem, inputs = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    ref = reference(problem, inputs)
    eager = _eager(case)
    paths: dict[str, Any] = {"aten": lambda: eager(scalars, *tensors)}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    errors = {}
    for label, params in CONFIGS.items():
        run = TritonChoice(ChoiceSpec("triton", "gemm_tma", params), problem, "ieee", sms=sms).kernel()
        errors[label] = relative_error(run(*inputs), ref)
        if errors[label] <= tolerance(problem):
            paths[label] = lambda run=run: run(*inputs)
    passes = {str(ms): [_tuning_pass(paths, ms) for _ in range(TRIALS)] for ms in preheat}
    rounds = {k: statistics.median(v) for k, v in interleaved(paths, ROUNDS).items()}
    print(f"{name}: interleaved " + ", ".join(f"{k} {v:.4f}" for k, v in rounds.items()), flush=True)
    for ms, trials in passes.items():
        for t in trials:
            shown = ", ".join(f"{k} {v:.4f}" for k, v in t["ms"].items())
            print(f"  preheat {ms:>5} ms: {shown}  clock {t['clock_mhz_before']}->{t['clock_mhz_after']}", flush=True)
    return {"name": name, "rel_error": errors, "interleaved_ms": rounds, "tuning_passes": passes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--cases", default=CASES)
    parser.add_argument("--preheat", default="0,100,300", help="milliseconds, comma-separated (0: an idle second)")
    args = parser.parse_args()
    preheat = [float(x) for x in args.preheat.split(",")]
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "timing": f"tuning passes: time_callable(2 warm-up, median of 10) x {TRIALS} trials per preheat; "
        f"reference: median of {ROUNDS} interleaved rounds of do_bench medians (warmup 10 ms, rep 40 ms)",
        "cases": [run_case(name, preheat) for name in args.cases.split(",")],
    }
    Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
