"""Where a cold tune's time goes, per phase, for a few cases of the GEMM set, exhaustive and pruned.

Each line is one fresh process with empty tunesmith and Triton caches. Before the clock starts it
pays what a process pays once: CUDA, the benchmark worker's start, and Triton's first use in
both processes (a tune of a small problem of another shape, in memory only). Then it tunes the
case (backends aten + triton) and reports the phases: choice generation, pruning, the benchmark
(with ``benchmark=inprocess``: precompiling, and timing, apart), and loading the winner. With the
worker (``subprocess``) each of its jobs is listed as it finished: its kind, choice and seconds,
and for a precompile the seconds in a compile process and in the worker.
``--compile-split`` instead precompiles every Triton choice of each case in turn in one fresh
process: the kernel's compile, and its launcher's build and load (no launcher built early).

    python benchmarks/tune_breakdown.py [--cases NAME,NAME] [--modes subprocess] [--json FILE]
    python benchmarks/tune_breakdown.py --compile-split [--cases NAME,NAME] [--json FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gemm import BACKENDS, DEVICE, PRECISION, SHAPES, _sync, run_info, warm_process

CASES = ("baddbmm_attn_scores", "square_8192_bf16", "decode_m16", "addmm_relu_4096")


def _child(name: str, prune: str, mode: str, profile: bool = False) -> dict[str, Any]:
    import torch

    import tunesmith
    from tunesmith import problemset, selection
    from tunesmith.bench import inprocess, isolated

    torch.set_float32_matmul_precision(PRECISION)
    warm_process()
    phases: dict[str, float] = {}

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases[key] = phases.get(key, 0.0) + time.perf_counter() - start

        return run

    benchmarker = selection.hooks.benchmarker

    class Timed:
        def __init__(self, options: Any) -> None:
            self.inner = benchmarker(options)

        def benchmark(self, *args: Any) -> Any:
            return timed("benchmark_s", self.inner.benchmark)(*args)

    selection.hooks.benchmarker = Timed
    selection.hooks.choices = timed("choices_s", selection.hooks.choices)
    selection.prune = timed("prune_s", selection.prune)
    selection.runnable = timed("load_winner_s", selection.runnable)
    inprocess.precompile_all = timed("precompile_s", inprocess.precompile_all)
    inprocess.measure = timed("time_s", inprocess.measure)
    isolated.IsolatedRun.precompile = timed("precompile_s", isolated.IsolatedRun.precompile)
    isolated.IsolatedRun.time = timed("time_s", isolated.IsolatedRun.time)
    jobs: list[list[Any]] = []  # the worker's jobs, as they finish: kind, choice, seconds, and its split

    def record(run: Any, kind: str, index: int, seconds: float, result: dict[str, Any]) -> None:
        spec = str(run.specs[index]) if index >= 0 else ""
        jobs.append([kind, spec, round(seconds, 3), *(round(result.get(k, 0.0), 3) for k in ("away_s", "here_s"))])

    isolated.IsolatedRun._log_job = record
    case = {c.name: c for c in problemset.load(SHAPES)}[name]
    tensors, scalars = problemset.make_inputs(case, DEVICE, seed=1)
    options = {"backends": BACKENDS, "prune": None if prune == "none" else int(prune), "benchmark": mode}
    profiler = cProfile.Profile() if profile else None
    _sync()
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    sel = tunesmith.tune(case.op, *tensors, epilogue=problemset.epilogue(case), options=options, **scalars)
    _sync()
    total = time.perf_counter() - start
    if profiler:
        profiler.disable()
        for order in ("cumulative", "tottime"):
            pstats.Stats(profiler, stream=sys.stderr).sort_stats(order).print_stats(30)
    return {
        "case": name,
        "prune": prune,
        "benchmark": mode,
        "tune_s": round(total, 3),
        **{k: round(v, 3) for k, v in phases.items()},
        "choices": len(sel.timings),
        "spec": str(sel.spec),
        "jobs": jobs,
    }


def _compile_split(name: str) -> dict[str, Any]:
    """In a fresh process with empty caches: every Triton choice of the case precompiled in turn,
    the kernel's compile apart from its launcher's build and load (``_init_handles``)."""
    import torch
    from triton.compiler import compiler
    from tunesmith_triton import choice as choice_module

    import tunesmith
    from tunesmith import hooks, problemset
    from tunesmith.problem import build_problem

    torch.set_float32_matmul_precision(PRECISION)
    warm_process()
    handles: list[float] = []
    init = compiler.CompiledKernel._init_handles

    def timed_init(self: Any) -> Any:
        start = time.perf_counter()
        try:
            return init(self)
        finally:
            handles.append(time.perf_counter() - start)

    compiler.CompiledKernel._init_handles = timed_init
    choice_module.build_early = lambda *args: None  # each launcher built by the first of its signature
    case = {c.name: c for c in problemset.load(SHAPES)}[name]
    tensors, scalars = problemset.make_inputs(case, DEVICE, seed=1)
    problem, _ = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    rows = []
    with tunesmith.options(backends=["triton"]) as opts:
        choices, _ = hooks.choices(problem, opts)
        for choice in choices:
            handles.clear()
            start = time.perf_counter()
            choice.precompile()
            total = time.perf_counter() - start
            rows.append([str(choice.spec), round(total - sum(handles), 3), round(sum(handles), 3)])
    return {"case": name, "compile_then_handles_s": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json", help="also write the lines, with the run's device and versions, here")
    parser.add_argument("--profile", action="store_true", help="profile one in-process pruned tune per case instead")
    parser.add_argument("--modes", default="subprocess,inprocess", help="benchmark modes to run each case in")
    parser.add_argument(
        "--compile-split", action="store_true", help="instead: each Triton choice's compile and launcher, in turn"
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = _compile_split(args.child[0]) if args.compile_split else _child(*args.child, profile=args.profile)
        print(json.dumps(out))
        return 0
    if args.profile:  # the profile goes to stderr
        for name in args.cases.split(","):
            root = tempfile.mkdtemp(prefix="breakdown_")
            env = {**os.environ, "TUNESMITH_CACHE_DIR": f"{root}/ts", "TRITON_CACHE_DIR": f"{root}/triton"}
            command = [sys.executable, __file__, "--profile", "--child", name, "6", "inprocess"]
            subprocess.run(command, env=env, check=True)
        return 0
    lines = []
    runs = [(prune, mode) for prune in ("6", "none") for mode in args.modes.split(",")]
    for name in args.cases.split(","):
        for prune, mode in [("-", "-")] if args.compile_split else runs:
            root = tempfile.mkdtemp(prefix="breakdown_")
            env = {**os.environ, "TUNESMITH_CACHE_DIR": f"{root}/ts", "TRITON_CACHE_DIR": f"{root}/triton"}
            command = [sys.executable, __file__, "--child", name, prune, mode]
            command += ["--compile-split"] if args.compile_split else []
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if out.returncode:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            lines.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(lines[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({**run_info(6), "runs": lines}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
