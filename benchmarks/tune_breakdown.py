"""Where a cold tune's time goes (one problem, baddbmm 64 x 512 x 512 x 64 fp16): the benchmark
phase (precompile and time in the worker) and loading the winner in the tuning process, with
``prune`` 6, 1 and off, each in a fresh process with empty tunesmith and Triton caches, with and
without Triton already used in both processes. Prints one JSON line per run.

    python benchmarks/tune_breakdown.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def _child(prune: str, warm_triton: bool) -> None:
    import torch

    import tunesmith
    from tunesmith import selection

    tiny = torch.randn(8, 8, device="cuda")
    tunesmith.tune("mm", tiny, tiny, options={"backends": ["aten"], "caches": []})  # starts the worker
    if warm_triton:  # a Triton kernel of another problem: Triton's first use in both processes
        t = torch.randn(24, 40, device="cuda")
        tunesmith.tune("mm", t, t.t().contiguous(), options={"backends": ["aten", "triton"], "prune": 1})
    torch.cuda.synchronize()
    marks: dict[str, object] = {}

    def timed(name: str, fn):
        def run(*args):
            start = time.perf_counter()
            result = fn(*args)
            marks[name] = round(time.perf_counter() - start, 3)
            return result

        return run

    benchmarker = selection.hooks.benchmarker

    class Timed:
        def __init__(self, options) -> None:
            self.inner = benchmarker(options)

        def benchmark(self, *args):
            return timed("benchmark_s", self.inner.benchmark)(*args)

    selection.hooks.benchmarker = Timed
    selection.runnable = timed("load_winner_s", selection.runnable)
    torch.manual_seed(0)
    half = torch.float16
    bias = torch.randn(64, 512, 512, device="cuda", dtype=half)
    a, b = torch.randn(64, 512, 64, device="cuda", dtype=half), torch.randn(64, 64, 512, device="cuda", dtype=half)
    start = time.perf_counter()
    options = {"backends": ["aten", "triton"], "prune": None if prune == "none" else int(prune)}
    sel = tunesmith.tune("baddbmm", bias, a, b, options=options)
    torch.cuda.synchronize()
    marks |= {"tune_s": round(time.perf_counter() - start, 3), "choices": len(sel.timings), "spec": str(sel.spec)}
    print(json.dumps({"prune": prune, "triton_used_before": warm_triton, **marks}))


def main() -> int:
    if len(sys.argv) == 3:
        _child(sys.argv[1], sys.argv[2] == "warm")
        return 0
    import torch

    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    for prune, warm in (("6", "cold"), ("1", "cold"), ("none", "cold"), ("6", "warm"), ("none", "warm")):
        root = tempfile.mkdtemp()
        env = {**os.environ, "TUNESMITH_CACHE_DIR": f"{root}/ts", "TRITON_CACHE_DIR": f"{root}/triton"}
        out = subprocess.run([sys.executable, __file__, prune, warm], env=env, capture_output=True, text=True)
        print(out.stdout.strip().splitlines()[-1] if out.returncode == 0 else out.stderr[-2000:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
