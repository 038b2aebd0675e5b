"""The cost model on one GPU, over the GEMM set: its estimates against measured times, and what
pruning by it costs and saves.

    python benchmarks/cost_model.py --json $OUT/cost_model.json [--only NAME,NAME] [--prune N]
    python benchmarks/cost_model.py --json all.json --merge part1.json part2.json

Per case:

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
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
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


if __name__ == "__main__":
    sys.exit(main())
