"""The cost model and pruning on one GPU, over the GEMM set: the model's estimates against measured
times, what pruning by it costs and saves in cold tuning, where a cold tune's time goes, and
pruning replayed on measured times.

    python benchmarks/cost_model.py --json $OUT/cost_model.json [--only NAME,NAME] [--prune N]
    python benchmarks/cost_model.py --json all.json --merge part1.json part2.json
    python benchmarks/cost_model.py breakdown [--cases NAME,NAME] [--modes subprocess] [--json FILE]
    python benchmarks/cost_model.py breakdown --compile-split [--cases NAME,NAME] [--json FILE]
    python benchmarks/cost_model.py replay RESULT.json [RESULT.json ...] [--estimate] [--json OUT]
    python benchmarks/cost_model.py replay --rank NAME[,NAME] [--json OUT]
    python benchmarks/cost_model.py skip RESULT.json [RESULT.json ...] [--json OUT]

The run (the first two lines), per case:

- ``tunesmith.estimate`` of the case's eager code (the torch op, then each epilogue op), with the
  preset profile and with the profile ``tunesmith calibrate`` measured (when one is stored), and
  that code's measured time (``do_bench`` median): ``estimate_*_ms / aten_ms``.
- Cold tuning (backends aten + triton) twice, each in a fresh process with empty tunesmith and
  Triton caches: exhaustive (``prune`` off) and pruned (``prune=N``). The fresh process first
  pays what any process pays once (``gemm.warm_process``: the benchmark worker's start with its
  compile processes, Triton's first use in each process, on a small problem of another shape), so
  the times compare tuning work. The exhaustive run also records every choice's tuning time with
  its estimate.
- Both chosen kernels timed again here, in interleaved rounds (the median of do_bench medians):
  ``pruned_ms / exhaustive_ms``.

``breakdown`` (GPU): where a cold tune's time goes, per phase, for a few cases of the GEMM set,
exhaustive and pruned.

Each line is one fresh process with empty tunesmith and Triton caches. Before the clock starts it
pays what a process pays once: CUDA, the benchmark worker's start, and Triton's first use in
both processes (a tune of a small problem of another shape, in memory only). Then it tunes the
case (backends aten + triton) and reports the phases: choice generation, pruning, the benchmark
(with ``benchmark=inprocess``: precompiling, and timing, apart), and loading the winner. With the
worker (``subprocess``) each of its jobs is listed as it finished: its kind, choice and seconds,
and for a precompile the seconds in a compile process and in the worker.
``--compile-split`` instead precompiles every Triton choice of each case in turn in one fresh
process: the kernel's compile, and its launcher's build and load (no launcher built early).

``replay`` (CPU): pruning replayed on measured tuning times: which choices ``prune`` and ``WINDOW``
keep, and how far the best kept time is from the exhaustive tune's best, per case.

The input is a result of the run: its exhaustive tunes timed every choice, each next to
the model's estimate. ``--estimate`` recomputes the Triton estimates with this checkout's model
(for runs made with an older one; only the choices that run timed take part), and ATen's, for the
ceiling (``prune.BASELINE_CEILING``); without it there is no ceiling. A replay says
what pruning would have kept; the tune time it saves is only measured by the run.
``--rank`` instead lists every Triton config the plugin offers a case on an H100, by this
checkout's estimate (no GPU needed).

``skip`` (CPU): the skip of a tune where the cost model is sure ATen wins (``tunesmith.cost.skip``),
fitted and replayed on measured times. The inputs are results of this run (the GEMM set) or of
``corpus.py`` (the shape corpus), whose exhaustive tunes timed every choice. Per case, this
checkout's models estimate every choice the aten and triton plugins offer it now, on the preset of
the GPU the result was measured on (as a GPU with no calibration would; the plugin's configs as on
an H100, whose SMs an H200 shares), and ``sure_aten`` decides as ``tune()`` would. The fit reads
the ``train`` cases (the corpus's ``train`` split and the whole GEMM set, which shares no case with
the corpus): among the cases the models are sure of, the highest estimated ratio (best non-ATen
estimate over ATen's) at which a non-ATen choice won by more than ``tie_tolerance``, and the
lowest above it at which ATen won; ``SURE_RATIO`` is the geometric middle of the two, rounded
down. Reported per split: the share of cases skipped and, for each skipped case, the win lost: the
measured best choice that is not ATen's over ATen's picked choice (and over the best of all),
and the seconds of the default (pruned) cold tunes the skips leave out.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gemm import (
    BACKENDS,
    DEVICE,
    PRECISION,
    SHAPES,
    _eager,
    _fresh_caches,
    _sync,
    finish,
    interleaved,
    merged,
    run_info,
    warm_process,
)

PRUNE = 6
#: the profiles an estimate is made with: the preset of the GPU, and its calibration
KINDS = ("preset", "calibrated")


def _child(args: argparse.Namespace) -> dict[str, Any]:
    """In a fresh process with empty caches: one cold tune of one case at one ``prune``."""
    import torch

    import tunesmith
    from tunesmith import hooks, problemset
    from tunesmith.problem import build_problem

    torch.set_float32_matmul_precision(PRECISION)
    prune = None if args.child_prune == "none" else int(args.child_prune)
    case = {c.name: c for c in problemset.load(SHAPES)}[args.child]
    tensors, scalars = problemset.make_inputs(case, DEVICE, seed=1)
    warm_process()
    options = {"backends": BACKENDS, "prune": prune}
    before = tunesmith.counters["choices_pruned"]
    start = time.perf_counter()
    sel = tunesmith.tune(case.op, *tensors, epilogue=problemset.epilogue(case), options=options, **scalars)
    _sync()
    out = {
        "tune_s": time.perf_counter() - start,
        "benchmarked": len(sel.timings),
        "pruned": tunesmith.counters["choices_pruned"] - before,
    }
    if prune is None:  # every choice's time, next to its estimate
        problem, _ = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
        with tunesmith.options(backends=BACKENDS) as opts:
            profile = hooks.device_info(tensors[0].device, opts)
            choices, _ = hooks.choices(problem, opts)
            estimates = {c.spec: hooks.estimate_runtime(c, profile, opts) for c in choices}
        out["choices"] = [[str(s), ms, estimates.get(s)] for s, ms in sel.timings.items()]
    out["spec"] = [sel.spec.backend, sel.spec.template, dict(sel.spec.params)]
    return out


def _in_child(name: str, prune: int | None) -> dict[str, Any]:
    answer = Path(tempfile.mkdtemp()) / "answer.json"
    root = Path(tempfile.mkdtemp(prefix="cost_cold_"))
    env = {**os.environ, "TUNESMITH_CACHE_DIR": str(root / "ts"), "TRITON_CACHE_DIR": str(root / "triton")}
    command = [sys.executable, __file__, "--json", str(answer), "--child", name, "--child-prune", str(prune).lower()]
    subprocess.run(command, check=True, env=env)
    return json.loads(answer.read_text())


def _estimates(case: Any, tensors: list[Any], scalars: dict[str, Any]) -> dict[str, Any]:
    """The estimate of the case's eager code with the preset and with the calibrated profile."""
    import torch

    import tunesmith
    from tunesmith.cost.profiles import load_calibrated, preset_for

    eager = _eager(case)
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "H100-SXM"
    out: dict[str, Any] = {}
    profiles = {
        "preset": preset_for(name) or "H100-SXM",
        "calibrated": load_calibrated(name, tunesmith.current_options()),
    }
    for kind, profile in profiles.items():
        if profile is None:
            continue
        est = tunesmith.estimate(lambda *t: eager(scalars, *t), *tensors, device=profile)
        out[f"estimate_{kind}_ms"] = est.total_ms
        out[f"estimate_{kind}_rows"] = [[r.op, r.flops, r.bytes, r.bound, r.ms] for r in est.rows if r.ms > 0]
    return out


def _spec(raw: list[Any]) -> Any:
    from tunesmith_hookspecs import ChoiceSpec

    return ChoiceSpec(raw[0], raw[1], raw[2])


def _case_row(case: Any, prune: int) -> dict[str, Any]:
    import tunesmith
    from tunesmith import hooks, problemset
    from tunesmith.ops import reference, relative_error
    from tunesmith.problem import build_problem

    tensors, scalars = problemset.make_inputs(case, DEVICE, seed=1)
    eager = _eager(case)
    row: dict[str, Any] = {"name": case.name, "op": case.op, "shape": problemset.shape_text(case), "dtype": case.dtype}
    row |= _estimates(case, tensors, scalars)
    exhaustive, pruned = _in_child(case.name, None), _in_child(case.name, prune)
    row["exhaustive_tune_s"], row["pruned_tune_s"] = exhaustive["tune_s"], pruned["tune_s"]
    row["exhaustive_benchmarked"], row["pruned_benchmarked"] = exhaustive["benchmarked"], pruned["benchmarked"]
    row["choices_pruned"] = pruned["pruned"]
    row["choices"] = exhaustive["choices"]
    problem, inputs = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    ref = reference(problem, inputs)
    with tunesmith.options(backends=BACKENDS) as opts:
        kernels = {}
        for kind, answer in (("exhaustive", exhaustive), ("pruned", pruned)):
            spec = _spec(answer["spec"])
            row[f"{kind}_spec"] = str(spec)
            choice = hooks.rebuild_choice(spec, problem, opts)
            choice.precompile()
            kernels[kind] = choice.kernel()
            row[f"{kind}_rel_error"] = relative_error(kernels[kind](*inputs), ref)
    paths = {"aten": lambda: eager(scalars, *tensors)} | {k: (lambda f=f: f(*inputs)) for k, f in kernels.items()}
    for name, values in interleaved(paths).items():
        row[f"{name}_ms"] = statistics.median(values)
    for kind in KINDS:
        if f"estimate_{kind}_ms" in row:
            row[f"estimate_{kind}_vs_measured"] = row[f"estimate_{kind}_ms"] / row["aten_ms"]
    row["pruned_vs_exhaustive"] = row["pruned_ms"] / row["exhaustive_ms"]
    row["same_spec"] = row["pruned_spec"] == row["exhaustive_spec"]
    row["tune_speedup"] = row["exhaustive_tune_s"] / row["pruned_tune_s"]
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def geomean(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values))

    out: dict[str, Any] = {"cases": len(rows)}
    for kind in KINDS:
        ratios = [r[f"estimate_{kind}_vs_measured"] for r in rows if f"estimate_{kind}_vs_measured" in r]
        if ratios:
            out[f"estimate_{kind}_vs_measured"] = {"min": min(ratios), "max": max(ratios), "geomean": geomean(ratios)}
    out["worst_pruned_vs_exhaustive"] = max(r["pruned_vs_exhaustive"] for r in rows)
    out["same_spec"] = sum(r["same_spec"] for r in rows)
    # where both tunings chose the same kernel, the two times are one kernel measured twice
    differing = [r["pruned_vs_exhaustive"] for r in rows if not r["same_spec"]]
    out["worst_pruned_vs_exhaustive_where_specs_differ"] = max(differing, default=None)
    out["choices_benchmarked"] = {
        "exhaustive": sum(r["exhaustive_benchmarked"] for r in rows),
        "pruned": sum(r["pruned_benchmarked"] for r in rows),
    }
    out["total_exhaustive_tune_s"] = sum(r["exhaustive_tune_s"] for r in rows)
    out["total_pruned_tune_s"] = sum(r["pruned_tune_s"] for r in rows)
    out["tune_time_drop"] = out["total_exhaustive_tune_s"] / out["total_pruned_tune_s"]
    out["median_tune_speedup"] = statistics.median(r["tune_speedup"] for r in rows)
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="cost model: estimate / measured (eager ATen); pruned against exhaustive tuning")
    cols = ("case", "est/meas preset", "est/meas calib", "pruned/exh ms", "same", "exh tune s", "pruned tune s", "drop")
    for col in cols:
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        table.add_row(
            r["name"],
            *(
                f"{r[k]:.2f}" if k in r else "-"
                for k in ("estimate_preset_vs_measured", "estimate_calibrated_vs_measured")
            ),
            f"{r['pruned_vs_exhaustive']:.3f}",
            "yes" if r["same_spec"] else "no",
            f"{r['exhaustive_tune_s']:.2f}",
            f"{r['pruned_tune_s']:.2f}",
            f"{r['tune_speedup']:.1f}x",
        )
    Console(width=160).print(table)


def main() -> int:
    if sys.argv[1:2] == ["skip"]:
        return skip_main(sys.argv[2:])
    if sys.argv[1:2] == ["breakdown"]:
        return breakdown_main(sys.argv[2:])
    if sys.argv[1:2] == ["replay"]:
        return replay_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--only", help="comma-separated case names (default: every case)")
    parser.add_argument("--prune", type=int, default=PRUNE, help=f"choices kept besides ATen's (default {PRUNE})")
    parser.add_argument("--merge", nargs="+", help="merge the JSON files of runs split with --only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-prune", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        Path(args.json).write_text(json.dumps(_child(args)))
        return 0
    if args.merge:
        return finish(args.json, merged(args.merge, summary), print_table)
    root = _fresh_caches()
    import torch

    from tunesmith import problemset

    torch.set_float32_matmul_precision(PRECISION)
    calibration = None
    if DEVICE == "cuda":  # measured into this run's cache, where the calibrated estimates find it
        subprocess.run([sys.executable, "-m", "tunesmith", "calibrate"], check=True)
        calibration = json.loads(next((root / "tunesmith" / "profiles").glob("*.json")).read_text())
    cases = problemset.load(SHAPES)
    if args.only:
        cases = [c for c in cases if c.name in set(args.only.split(","))]
    rows = []
    for case in cases:
        print(f"{case.name} ...", file=sys.stderr, flush=True)
        rows.append(_case_row(case, args.prune))
        Path(args.json).write_text(json.dumps({"partial": True, "cases": rows}, indent=1))
    result = {
        **run_info(args.prune),
        "calibrated_profile": calibration,
        "summary": summary(rows),
        "cases": rows,
    }
    return finish(args.json, result, print_table)


BREAKDOWN_CASES = ("baddbmm_attn_scores", "square_8192_bf16", "decode_m16", "addmm_relu_4096")


def _breakdown_child(name: str, prune: str, mode: str, profile: bool = False) -> dict[str, Any]:
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


def breakdown_main(argv: list[str]) -> int:
    """``breakdown``: where a cold tune's time goes (see the module's docstring)."""
    parser = argparse.ArgumentParser(
        prog="cost_model.py breakdown", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(BREAKDOWN_CASES))
    parser.add_argument("--json", help="also write the lines, with the run's device and versions, here")
    parser.add_argument("--profile", action="store_true", help="profile one in-process pruned tune per case instead")
    parser.add_argument("--modes", default="subprocess,inprocess", help="benchmark modes to run each case in")
    parser.add_argument(
        "--compile-split", action="store_true", help="instead: each Triton choice's compile and launcher, in turn"
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.compile_split:
            out = _compile_split(args.child[0])
        else:
            out = _breakdown_child(*args.child, profile=args.profile)
        print(json.dumps(out))
        return 0
    if args.profile:  # the profile goes to stderr
        for name in args.cases.split(","):
            root = tempfile.mkdtemp(prefix="breakdown_")
            env = {**os.environ, "TUNESMITH_CACHE_DIR": f"{root}/ts", "TRITON_CACHE_DIR": f"{root}/triton"}
            command = [sys.executable, __file__, "breakdown", "--profile", "--child", name, "6", "inprocess"]
            subprocess.run(command, env=env, check=True)
        return 0
    lines = []
    runs = [(prune, mode) for prune in ("6", "none") for mode in args.modes.split(",")]
    for name in args.cases.split(","):
        for prune, mode in [("-", "-")] if args.compile_split else runs:
            root = tempfile.mkdtemp(prefix="breakdown_")
            env = {**os.environ, "TUNESMITH_CACHE_DIR": f"{root}/ts", "TRITON_CACHE_DIR": f"{root}/triton"}
            command = [sys.executable, __file__, "breakdown", "--child", name, prune, mode]
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


WINDOWS = (None, 0.05, 0.10, 0.15, 0.20)


SMS, SHARED = 132, 232448  # an H100's


def as_h100() -> None:
    """What the Triton plugin reads of the GPU, as an H100's (so that configs are made without one)."""
    import torch
    from tunesmith_triton import configs

    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    configs.shared_memory = lambda device: SHARED
    configs.multiprocessors = lambda device: SMS


def _problem(case_name: str) -> Any:
    """The case's Problem, on "cuda" (from meta tensors)."""
    from tunesmith import problemset
    from tunesmith.problem import build_problem, on_device

    case = {c.name: c for c in problemset.load(SHAPES)}[case_name]
    tensors, scalars = problemset.make_inputs(case, "meta", seed=1)
    return on_device(build_problem(case.op, tensors, scalars, problemset.epilogue(case))[0], "cuda")


def _estimate(problem: Any, template: str, params: dict[str, Any]) -> float:
    """This checkout's estimate of one Triton config, as on an H100 (SXM preset)."""
    from tunesmith_triton.choice import TritonChoice, precision
    from tunesmith_triton.cost import SHARED_MEMORY, estimate_ms, work_of

    from tunesmith.cost.profiles import PRESETS
    from tunesmith_hookspecs import ChoiceSpec

    profile = PRESETS["H100-SXM"]
    choice = TritonChoice(ChoiceSpec("triton", template, params), problem, precision(problem), SMS)
    return estimate_ms(
        template, choice.config, work_of(choice), problem, profile, profile.multiprocessors, SHARED_MEMORY
    )


def _replay_estimates(case_name: str, specs: list[str]) -> tuple[dict[str, float], float]:
    """This checkout's estimate of each Triton spec of the case, and the ceiling ATen's estimate
    sets (H100-SXM preset)."""
    import torch

    from tunesmith.cost.profiles import PRESETS
    from tunesmith.cost.prune import baseline_ceiling
    from tunesmith_aten.cost import estimate_ms

    torch.set_float32_matmul_precision(PRECISION)  # as the runs had it: float32 estimates at TF32's peak
    problem, out = _problem(case_name), {}
    aten = [s.split(":", 1)[1] for s in specs if s.startswith("aten:")]
    ceiling = baseline_ceiling([estimate_ms(problem, template, PRESETS["H100-SXM"]) for template in aten])
    for spec in specs:
        m = re.fullmatch(r"triton:(\w+)\[(.*)\]", spec)
        if m is None:
            continue
        params = {k: json.loads(v.lower()) for k, v in (kv.split("=") for kv in m.group(2).split(","))}
        out[spec] = _estimate(problem, m.group(1), params)
    return out, ceiling


def rank(case_name: str) -> list[tuple[str, float, float]]:
    """Every Triton config offered for the case on an H100: (spec, estimate ms, over the best), best first."""
    from tunesmith_triton import configs

    from tunesmith_hookspecs import ChoiceSpec

    as_h100()
    problem = _problem(case_name)
    found = [
        (str(ChoiceSpec("triton", t, c.params())), _estimate(problem, t, dict(c.params())))
        for t, c in configs.configs_for(problem, False)
    ]
    found.sort(key=lambda row: row[1])
    return [(spec, ms, ms / found[0][1]) for spec, ms in found]


def replay(
    case: dict[str, Any], prune: int, window: float | None, estimates: dict[str, float], ceiling: float = math.inf
) -> dict[str, Any]:
    """The choices pruning keeps from the case's exhaustive timings (ATen's always); the best kept
    time over the best of all, and the same among the modelled choices alone (what pruning
    decides, whichever wins)."""
    from tunesmith.cost.prune import lowest

    times = {spec: ms for spec, ms, _ in case["choices"]}
    modelled = [s for s in times if s in estimates]
    kept = lowest({s: estimates[s] for s in modelled}, prune, window, ceiling)
    out = {"kept": len(kept) + len(times) - len(modelled)}  # ATen's, and anything without an estimate
    out["best_kept_vs_best"] = min([times[s] for s in kept] + [t for s, t in times.items() if s not in estimates])
    out["best_kept_vs_best"] /= min(times.values())
    if kept:
        out["modelled_best_kept_vs_best"] = min(times[s] for s in kept) / min(times[s] for s in modelled)
    return out


def replay_main(argv: list[str]) -> int:
    """``replay``: pruning replayed on a result's measured times (see the module's docstring)."""
    parser = argparse.ArgumentParser(
        prog="cost_model.py replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="*")
    parser.add_argument("--rank", help="comma-separated case names: their configs by estimate")
    parser.add_argument("--prune", type=int, default=6)
    parser.add_argument("--estimate", action="store_true", help="estimate with this checkout's model")
    parser.add_argument("--json", help="write the replay here")
    args = parser.parse_args(argv)
    if args.rank:
        ranked = {name: rank(name) for name in args.rank.split(",")}
        for name, rows_ in ranked.items():
            print(name, *(f"  {over:.3f} {ms:.4f} {spec}" for spec, ms, over in rows_), sep="\n")
        if args.json:
            out = {"device": "CPU: the estimates for an H100 (H100-SXM preset, 132 SMs)", "cases": ranked}
            Path(args.json).write_text(json.dumps(out, indent=1))
        return 0
    rows = []
    for path in args.results:
        for case in json.loads(Path(path).read_text())["cases"]:
            specs = [spec for spec, _, _ in case["choices"]]
            ceiling = math.inf
            if args.estimate:
                estimates, ceiling = _replay_estimates(case["name"], specs)
            else:
                estimates = {spec: est for spec, _, est in case["choices"] if est is not None}
            row: dict[str, Any] = {"source": Path(path).name, "name": case["name"], "choices": len(specs)}
            for window in WINDOWS:
                row[f"window_{window}"] = replay(case, args.prune, window, estimates, ceiling)
            rows.append(row)
            cells = "  ".join(
                f"{w}: {r['kept']}, {r['best_kept_vs_best']:.3f}/{r.get('modelled_best_kept_vs_best', 1):.3f}"
                for w in WINDOWS
                for r in [row[f"window_{w}"]]
            )
            print(f"{case['name']:26s} {cells}")
    summary = {}
    for key in ("best_kept_vs_best", "modelled_best_kept_vs_best", "kept"):
        pick = sum if key == "kept" else max
        summary[key] = {str(w): pick(r[f"window_{w}"].get(key, 1) for r in rows) for w in WINDOWS}
        print(f"{key} ({pick.__name__} over the cases), by window: {summary[key]}")
    if args.json:
        out = {"device": "CPU replay of the inputs' measured times", "inputs": args.results, "prune": args.prune}
        out |= {"estimated_here": args.estimate, "summary": summary, "cases": rows}
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


#: a win by less than this (the default ``tie_tolerance``) is a tie, which goes to ATen anyway
TIE = 0.01


def _skip_estimates(problem: Any, profile: Any) -> tuple[dict[str, float | None], dict[str, str]]:
    """This checkout's estimate of every choice the aten and triton plugins offer ``problem`` now
    (the Triton configs as on an H100: ``as_h100``), on ``profile``; and each spec's backend."""
    from tunesmith_triton import configs
    from tunesmith_triton.choice import TritonChoice, precision
    from tunesmith_triton.conv import conv_choices
    from tunesmith_triton.cost import SHARED_MEMORY, estimate_ms, work_of

    from tunesmith_aten import TEMPLATES
    from tunesmith_aten.cost import estimate_ms as aten_ms
    from tunesmith_hookspecs import ChoiceSpec

    out: dict[str, float | None] = {}
    for template, (serves, _) in TEMPLATES.items():
        if serves(problem):
            out[str(ChoiceSpec("aten", template))] = aten_ms(problem, template, profile)
    if problem.op == "conv":
        choices = conv_choices(problem, False)
    else:
        dot, offered = precision(problem), configs.configs_for(problem, False)
        choices = [TritonChoice(ChoiceSpec("triton", t, c.params()), problem, dot, SMS) for t, c in offered]
    for c in choices:
        out[str(c.spec)] = estimate_ms(
            c.spec.template, c.config, work_of(c), problem, profile, profile.multiprocessors, SHARED_MEMORY
        )
    return out, {spec: spec.split(":", 1)[0] for spec in out}


def skip_case(case: dict[str, Any], problem: Any, profile: Any, times: dict[str, float]) -> dict[str, Any]:
    """One measured case through ``sure_aten``: its estimated ratio, whether the models are sure,
    whether it is skipped, and the measured times that say what a skip loses."""
    from tunesmith.cost.prune import unsure
    from tunesmith.cost.skip import sure_aten

    estimates, backends = _skip_estimates(problem, profile)
    why = unsure(problem)
    aten = [ms for s, ms in estimates.items() if backends[s] == "aten" and ms is not None]
    others = [ms for s, ms in estimates.items() if backends[s] != "aten" and ms is not None]
    picked = sure_aten(estimates, backends, why)
    measured_aten = {s: ms for s, ms in times.items() if s.startswith("aten:")}
    measured_others = [ms for s, ms in times.items() if not s.startswith("aten:")]
    row: dict[str, Any] = {"name": case["name"], "split": case["split"], "op": case["op"], "shape": case["shape"]}
    row |= {"dtype": case["dtype"], "unsure": why, "choices_offered": len(estimates), "choices_timed": len(times)}
    row["estimated_ratio"] = min(others) / min(aten) if aten and others else None
    row["aten_ms"] = min(measured_aten.values())
    row["best_other_ms"] = min(measured_others) if measured_others else None
    row["other_wins_by"] = row["aten_ms"] / row["best_other_ms"] - 1 if measured_others else None
    row["skipped"] = picked is not None
    row["tune_s"] = case.get("tunesmith_tune_s", case.get("pruned_tune_s"))  # the default (pruned) cold tune
    if picked is not None:
        row["picked"] = picked
        row["picked_ms"] = times.get(picked, math.nan)  # an ATen choice the run did not time: nan
        best = min(times.values())
        row["win_lost"] = max(0.0, row["picked_ms"] / row["best_other_ms"] - 1) if measured_others else 0.0
        row["picked_over_best"] = row["picked_ms"] / best
        row["exhaustive_picked_it"] = case.get("exhaustive_spec") == picked  # the run's exhaustive tune chose it too
    return row


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``SURE_RATIO`` from ``rows`` (the train cases): the geometric middle between the highest
    estimated ratio at which a non-ATen choice won by more than ``TIE`` on a case the models are
    sure of, and the lowest ratio above it at which none did."""
    sure = [r for r in rows if not r["unsure"] and r["estimated_ratio"] is not None and r["other_wins_by"] is not None]
    wins = [r for r in sure if r["other_wins_by"] > TIE]
    top = max(wins, key=lambda r: r["estimated_ratio"], default=None)
    floor = top["estimated_ratio"] if top else 0.0
    above = [r for r in sure if r["estimated_ratio"] > floor and r["other_wins_by"] <= TIE]
    low = min(above, key=lambda r: r["estimated_ratio"], default=None)
    out: dict[str, Any] = {"sure_cases": len(sure), "other_won": len(wins)}
    out["highest_ratio_other_won"] = [top["estimated_ratio"], top["name"], top["other_wins_by"]] if top else None
    out["lowest_ratio_above_it_aten_won"] = [low["estimated_ratio"], low["name"]] if low else None
    out["fitted"] = math.floor(100 * math.sqrt(floor * low["estimated_ratio"])) / 100 if top and low else None
    return out


def skip_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split: the cases, those skipped and their share, and the wins the skips lost."""
    skipped = [r for r in rows if r["skipped"]]
    lost = [r for r in skipped if r["win_lost"] > TIE]
    return {
        "cases": len(rows),
        "with_other_choices": sum(r["best_other_ms"] is not None for r in rows),
        "skipped": len(skipped),
        "skipped_share": len(skipped) / len(rows) if rows else None,
        "skipped_cases": [r["name"] for r in skipped],
        "wins_lost": len(lost),
        "skipped_as_exhaustive_chose": sum(r["exhaustive_picked_it"] for r in skipped),
        "tune_s_skipped": sum(r["tune_s"] or 0.0 for r in skipped),
        "tune_s_all": sum(r["tune_s"] or 0.0 for r in rows),
        "worst_win_lost": max([[r["win_lost"], r["name"]] for r in skipped], default=None),
        "worst_picked_over_best": max([[r["picked_over_best"], r["name"]] for r in skipped], default=None),
        "missed_sure_skips": [r["name"] for r in rows if not r["skipped"] and (r["other_wins_by"] or 0) < -TIE],
    }


def skip_main(argv: list[str]) -> int:
    """``skip``: the skip's threshold fitted on train, replayed on every split (the docstring)."""
    import torch

    from tunesmith import problemset
    from tunesmith.cost.profiles import preset_for
    from tunesmith.cost.skip import SURE_RATIO
    from tunesmith.problem import build_problem, on_device

    parser = argparse.ArgumentParser(
        prog="cost_model.py skip", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", help="results of cost_model.py (GEMM set) or corpus.py (corpus)")
    parser.add_argument("--json", help="write the replay here")
    args = parser.parse_args(argv)
    as_h100()
    torch.set_float32_matmul_precision(PRECISION)  # as the runs had it: float32 estimates at TF32's peak
    corpus = Path(__file__).with_name("corpus") / "corpus.json"
    known = {c.name: c for path in (SHAPES, corpus) for c in problemset.load(path)}
    rows, devices = [], {}
    for path in args.results:
        result = json.loads(Path(path).read_text())
        devices[Path(path).name] = result["device"]
        profile = preset_for(result["device"])
        for case in result["cases"]:
            choices = case.get("exhaustive_choices", case.get("choices"))
            if not choices:  # a corpus row whose tunes failed
                continue
            spec = known[case["name"]]
            tensors, scalars = problemset.make_inputs(spec, "meta", seed=1)
            problem = on_device(build_problem(spec.op, tensors, scalars, problemset.epilogue(spec))[0], "cuda")
            case = {**case, "split": case.get("split", "train")}  # the GEMM set is no corpus case: train
            row = skip_case(case, problem, profile, {s: ms for s, ms, _ in choices if math.isfinite(ms)})
            row |= {"source": Path(path).name, "profile": profile.name}
            rows.append(row)
            ratio = "-" if row["estimated_ratio"] is None else f"{row['estimated_ratio']:.3f}"
            wins = "-" if row["other_wins_by"] is None else f"{row['other_wins_by']:+.3f}"
            print(f"{row['split']:5s} {row['name']:46s} ratio {ratio:>6s}  other wins by {wins:>6s}  "
                  f"{'unsure' if row['unsure'] else 'sure':6s} {'SKIPPED' if row['skipped'] else ''}")  # fmt: skip
    fitted = fit([r for r in rows if r["split"] == "train"])
    summary = {s: skip_summary([r for r in rows if r["split"] == s]) for s in ("train", "test")}
    print(f"SURE_RATIO {SURE_RATIO}; fitted on train: {json.dumps(fitted)}")
    for split, part in summary.items():
        print(f"{split}: {json.dumps(part)}")
    if args.json:
        measured = ", ".join(sorted(set(devices.values())))
        out = {"device": f"CPU replay of times measured on {measured}", "data_devices": devices, "inputs": args.results}
        out |= {"sure_ratio": SURE_RATIO, "tie": TIE, "fit": fitted, "summary": summary, "cases": rows}
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if fitted["fitted"] is None or fitted["fitted"] == SURE_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
