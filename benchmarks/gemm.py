"""The GEMM set on one GPU: ATen, tunesmith (backends aten + triton) and Inductor
``max-autotune-no-cudagraphs``, in one process on the same inputs.

    python benchmarks/gemm.py --json $OUT/gemm.json [--only NAME,NAME] [--no-inductor] [--chart $OUT/gemm.png]
    python benchmarks/gemm.py --json all.json --merge part1.json part2.json --chart all.png
    python benchmarks/gemm.py --chart-only benchmarks/results/gemm_h100.json --chart out.png

Per case: each path's kernel time (``triton.testing.do_bench`` median, L2 flushed between runs;
tunesmith's chosen kernel is timed again here, not taken from its tuning run) and its GPU time
alone (CUDA-graph replays: the difference is host overhead), tunesmith's cold tuning time (in a
fresh process with an empty Triton cache of its own), Inductor's cold compile time (first call
of the compiled function), the relative error by norm of each path against a float32 reference,
and the time a fresh process with the warm tunesmith cache takes to get each kernel (what a
process pays once reported apart). Every cache (tunesmith, Inductor, Triton) starts empty in a
temporary folder. ``GEMM_BENCH_DEVICE=cpu`` with ``TRITON_INTERPRET=1`` runs it on a CPU (a
smoke test of the script, not a measurement). ``--chart`` draws tunesmith's speedup over ATen
and over Inductor per case (needs matplotlib); ``--chart-only`` redraws it from a result, anywhere.
"""

from __future__ import annotations

import argparse
import importlib.util
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

SHAPES = Path(__file__).with_name("gemm_shapes.json")
BACKENDS = ["aten", "triton"]
#: the paths that tunesmith takes, by the field prefix of their results: ``--cutlass`` adds the second
VARIANTS = {"tunesmith": BACKENDS, "tunesmith_cutlass": [*BACKENDS, "cutlass"]}
#: float32 matmuls may use TF32 (the set's float32 case is named for it), on every path
PRECISION = "high"
DEVICE = os.environ.get("GEMM_BENCH_DEVICE", "cuda")
ROUNDS = 25


def _fresh_caches() -> Path:
    """Empty tunesmith, Inductor and Triton caches for this run (set before torch is imported,
    over any the environment names); the folder they are in."""
    root = Path(tempfile.mkdtemp(prefix="gemm_bench_"))
    for var, name in (("TUNESMITH_CACHE_DIR", "tunesmith"), ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        os.environ[var] = str(root / name)
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    # Inductor points Triton at torch's own ptxas on its first compile (when nothing names one);
    # Triton keys its cache by the ptxas, so every process of the run uses that one from the start
    torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]  # type: ignore[index, union-attr]
    ptxas = Path(torch_dir) / "bin" / "ptxas"
    if ptxas.is_file():
        os.environ.setdefault("TRITON_PTXAS_PATH", str(ptxas))
    return root


def warm_process(backends: list[str] = BACKENDS) -> None:
    """Pay what a process pays once, whatever it tunes, before any clock starts: CUDA, the benchmark
    worker's start with its compile processes, and Triton's first use in each of them and here (an
    exhaustive tune of a small problem of another shape, which reaches every compile process; kept
    in memory only: a hit in a shared cache would start nothing). CUTLASS has no such cost: its
    compiler is a fresh nvcc for each library."""
    import torch

    import tunesmith

    t = torch.randn(24, 40, device=DEVICE, dtype=torch.float16)
    tunesmith.tune("mm", t, t.t().contiguous(), options={"backends": backends, "caches": [], "prune": None})
    _sync()


def _cold_tune(name: str, variant: str) -> dict[str, Any]:
    """In this fresh process, with an empty Triton cache of its own: the time ``tune()`` takes for
    one case. Compiled Triton kernels do not depend on sizes, so tuning the cases one after the
    other in one process would reuse earlier cases' kernels, which Inductor (sizes compiled in)
    cannot. (CUTLASS's libraries, under the shared tunesmith cache folder, are reused by design:
    one serves every problem of its kind.) What any process pays once is paid before the clock
    starts (:func:`warm_process`)."""
    import torch

    from tunesmith import problemset

    torch.set_float32_matmul_precision(PRECISION)
    case = {c.name: c for c in problemset.load(SHAPES)}[name]
    tensors, scalars = problemset.make_inputs(case, DEVICE, seed=1)
    warm_process()
    libraries = Path(os.environ["TUNESMITH_CACHE_DIR"]) / "cutlass"
    before = len(list(libraries.glob("*.so")))
    start = time.perf_counter()
    sel = _tune(case, tensors, scalars, VARIANTS[variant])
    _sync()
    return {
        "tune_s": time.perf_counter() - start,
        "spec": str(sel.spec),
        "source": sel.report.source,
        "libraries_built": len(list(libraries.glob("*.so"))) - before,
    }


def _eager(case: Any) -> Any:
    """The ATen path: the torch op, then its epilogue as separate torch calls (the core's own
    semantics, ``ops.apply_steps``, so every step a problem file allows runs here)."""
    from tunesmith import ops, problemset

    steps = problemset.epilogue_ops(case)

    def run(scalars: dict[str, Any], *tensors: Any) -> Any:
        return ops.apply_steps(steps, ops.compute(case.op, _conv_scalars(case.op, scalars), tensors), tensors)

    return run


def _conv_scalars(op: str, scalars: dict[str, Any]) -> dict[str, Any]:
    """A conv's scalars as ``ops.compute`` takes them (pairs, every one present); a file may leave
    them out or give one int, as ``tune`` accepts."""
    if op != "conv":
        return scalars
    pair = {name: scalars.get(name, default) for name, default in (("stride", 1), ("padding", 0), ("dilation", 1))}
    return {**{k: [v, v] if isinstance(v, int) else v for k, v in pair.items()}, "groups": scalars.get("groups", 1)}


def _reference(fn: Any, scalars: dict[str, Any], tensors: list[Any]) -> Any:
    """The case in float32 without TF32: the yardstick of every path's error."""
    import torch

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return fn(scalars, *[t.float() for t in tensors])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _time(fn: Any) -> float:
    from triton.testing import do_bench

    if DEVICE != "cuda":  # the smoke test's stand-in
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    return float(do_bench(fn, warmup=10, rep=40, return_mode="median"))


def _graph_time(fn: Any) -> float | None:
    """The GPU time alone: replays of a CUDA graph of the call (no host work between launches,
    no L2 flush), to tell a path's kernel time from its host overhead; None where the call cannot
    be captured."""
    if DEVICE != "cuda":
        return None
    from triton.testing import do_bench_cudagraph

    try:
        return float(do_bench_cudagraph(fn, rep=40, return_mode="median"))
    except Exception as exc:  # noqa: BLE001 - an extra column; the do_bench times stand
        print(f"no CUDA graph time: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _in_fresh_process(flag: str, value: str, **env: str) -> dict[str, Any]:
    """Run this script with ``flag value`` in a new process; its JSON answer."""
    answer = Path(tempfile.mkdtemp()) / "answer.json"
    command = [sys.executable, __file__, "--json", str(answer), flag, value]
    subprocess.run(command, check=True, env={**os.environ, **env})
    return json.loads(answer.read_text())


def interleaved(paths: dict[str, Any], rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Each path's time in ``rounds`` short rounds, each round starting with the next path in turn:
    the clock of a long run (power and heat) then weighs on every path alike."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(_time(paths[name]))
    return times


def _launch_us(fn: Any, calls: int = 50) -> float:
    """Host time per call, enqueueing back to back (what a kernel costs the CPU)."""
    _sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    _sync()
    return elapsed / calls * 1e6


def _sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _tune(case: Any, tensors: list[Any], scalars: dict[str, Any], backends: list[str] = BACKENDS) -> Any:
    import tunesmith
    from tunesmith import problemset

    steps = problemset.epilogue(case)
    return tunesmith.tune(case.op, *tensors, epilogue=steps, options={"backends": backends}, **scalars)


def _cold(case: Any, variant: str) -> dict[str, Any]:
    """The case's cold tune, in a fresh process with an empty Triton cache of its own."""
    triton_cache = tempfile.mkdtemp(prefix="triton_cold_")
    return _in_fresh_process("--cold", f"{case.name}:{variant}", TRITON_CACHE_DIR=triton_cache)


def paired(numerator: list[float], denominator: list[float]) -> float:
    """The median over rounds of one path's time over another's in the same round: a drift of the
    clock (power, heat) between rounds weighs on both of a pair alike."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def _case_row(case: Any, colds: dict[str, dict[str, Any]], inductor: bool) -> dict[str, Any]:
    import torch

    from tunesmith import problemset
    from tunesmith.ops import relative_error
    from tunesmith.problem import flops

    tensors, scalars = problemset.make_inputs(case, DEVICE, seed=1)
    eager = _eager(case)
    ref = _reference(eager, scalars, tensors).double().cpu()
    row: dict[str, Any] = {"name": case.name, "op": case.op, "shape": problemset.shape_text(case), "dtype": case.dtype}
    row["aten_rel_error"] = relative_error(eager(scalars, *tensors), ref)

    paths = {"aten": lambda: eager(scalars, *tensors)}
    selections = {}
    for variant, cold in colds.items():
        row[f"{variant}_tune_s"] = cold["tune_s"]
        row[f"{variant}_libraries_built"] = cold["libraries_built"]
        sel = selections[variant] = _tune(case, tensors, scalars, VARIANTS[variant])  # the fresh process's entry
        assert sel.cached and str(sel.spec) == cold["spec"], (sel.report.source, sel.spec, cold)
        row[f"{variant}_spec"] = str(sel.spec)
        row[f"{variant}_choices"] = len(sel.timings)
        ranked = sorted((ms, str(spec)) for spec, ms in sel.timings.items() if math.isfinite(ms))
        row[f"{variant}_tuning_top5_ms"] = [[spec, ms] for ms, spec in ranked[:5]]
        noise = {str(t.spec): t.noise for t in sel.report.timings}
        row[f"{variant}_tuning_top5_noise"] = [noise.get(spec) for spec, _ in row[f"{variant}_tuning_top5_ms"]]
        row[f"{variant}_failed"] = {str(t.spec): t.error for t in sel.report.timings if getattr(t, "error", None)}
        row[f"{variant}_tuning_aten_ms"] = min((ms for ms, spec in ranked if spec.startswith("aten")), default=None)
        row[f"{variant}_rel_error"] = relative_error(sel.kernel(*tensors), ref)
        paths[variant] = lambda sel=sel: sel.kernel(*tensors)
    if inductor:
        torch.compiler.reset()
        compiled = torch.compile(eager, mode="max-autotune-no-cudagraphs", dynamic=False)
        start = time.perf_counter()
        out = compiled(scalars, *tensors)
        _sync()
        row["inductor_compile_s"] = time.perf_counter() - start
        row["inductor_rel_error"] = relative_error(out, ref)
        paths["inductor"] = lambda: compiled(scalars, *tensors)
    for name, values in interleaved(paths).items():
        row[f"{name}_ms"] = statistics.median(values)
        row[f"{name}_best_ms"] = min(values)  # the clock drops under the power limit, never rises
        row[f"{name}_rounds_ms"] = values
        row[f"{name}_launch_us"] = _launch_us(paths[name])
        row[f"{name}_graph_ms"] = _graph_time(paths[name])
    for variant, sel in selections.items():
        # again through the launcher that the timed calls used
        error = relative_error(sel.kernel(*tensors), ref)
        row[f"{variant}_rel_error"] = max(row[f"{variant}_rel_error"], error)
        prefix = "" if variant == "tunesmith" else f"{variant}_"
        row[f"{prefix}tflops"] = flops(sel.problem) / row[f"{variant}_ms"] / 1e9
        row[f"{prefix}speedup_vs_aten"] = row["aten_ms"] / row[f"{variant}_ms"]
        row[f"{prefix}paired_speedup_vs_aten"] = paired(row["aten_rounds_ms"], row[f"{variant}_rounds_ms"])
        if inductor:
            row[f"{prefix}speedup_vs_inductor"] = row["inductor_ms"] / row[f"{variant}_ms"]
            row[f"{prefix}paired_speedup_vs_inductor"] = paired(row["inductor_rounds_ms"], row[f"{variant}_rounds_ms"])
    return row


def _warm(names: list[str]) -> dict[str, Any]:
    """In this fresh process: the time to get each case's kernel (``name:variant``) from the warm
    cache (tune, then its first call, synchronised). What a process pays once, whatever it runs, is timed apart:
    imports, plugin loading, and the first use of CUDA, of cuBLAS in each dtype and of Triton."""
    start = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    from tunesmith import hooks, problemset

    @triton.jit
    def _touch(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1)

    hooks.plugin_status("triton")
    torch.set_float32_matmul_precision(PRECISION)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.ones(16, 16, device=DEVICE, dtype=dtype)
        torch.mm(x, x)
    _touch[(1,)](torch.zeros(1, device=DEVICE))
    _sync()
    setup_s = time.perf_counter() - start
    cases = {c.name: c for c in problemset.load(SHAPES)}
    triton_cache = Path(os.environ["TRITON_CACHE_DIR"])
    rows = {}
    for entry in names:
        name, variant = entry.split(":")
        case = cases[name]
        tensors, scalars = problemset.make_inputs(case, DEVICE, seed=2)
        files = sum(1 for _ in triton_cache.rglob("*"))
        _sync()
        start = time.perf_counter()
        sel = _tune(case, tensors, scalars, VARIANTS[variant])
        got = time.perf_counter()
        sel.kernel(*tensors)
        _sync()
        end = time.perf_counter()
        rows[entry] = {
            "warm_s": end - start,
            "select_s": got - start,
            "first_call_s": end - got,
            # files Triton wrote: a compile (a miss in its cache), where the warm cache should have hit
            "triton_files_written": sum(1 for _ in triton_cache.rglob("*")) - files,
            "cached": sel.cached,
            "spec": str(sel.spec),
        }
    env = {k: v for k, v in os.environ.items() if k.startswith(("TRITON", "TORCHINDUCTOR", "TUNESMITH"))}
    return {"setup_s": setup_s, "cases": rows, "env": env}


def run_info(prune: int | None) -> dict[str, Any]:
    """What a result file records about its run: the device, the versions, the date and the settings."""
    import torch
    import triton

    return {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "backends": BACKENDS,
        "prune": prune,
        "float32_matmul_precision": PRECISION,
    }


def refuse_unlike(path: str, before: dict[str, Any], now: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Stop a run resuming ``path`` (``before``) where any of ``keys`` (device, versions, settings)
    differs from this run's (``now``): the rows kept would not compare with those to come."""
    differ = [k for k in keys if before.get(k) != now.get(k)]
    if differ:
        were = ", ".join(f"{k} {before.get(k)!r} (now {now.get(k)!r})" for k in differ)
        raise SystemExit(f"{path} ran with {were}: its rows do not compare, use another file")


def merged(paths: list[str], summarize: Any) -> dict[str, Any]:
    """The parts of a run split with ``--only`` (a device call has a time limit) as one result."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    result = {**parts[0], "cases": [row for part in parts for row in part["cases"]]}
    result["summary"] = summarize(result["cases"])
    return result


def finish(path: str, result: dict[str, Any], table: Any) -> int:
    """Write the result as JSON, print its table and its summary."""
    Path(path).write_text(json.dumps(result, indent=1))
    table(result["cases"])
    print(json.dumps(result["summary"], indent=1))
    return 0


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def best_candidate_geomean(rows: list[dict[str, Any]], variant: str) -> float:
    """The geomean over cases of ATen's tuning time over the fastest tuning time of any candidate:
    what a perfect choice among the candidates a tune timed would reach, by the tune's clock."""
    ratios = [r[f"{variant}_tuning_aten_ms"] / min(ms for _, ms in r[f"{variant}_tuning_top5_ms"]) for r in rows]
    return _geomean(ratios)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geomean speedups, the worst case, and median tuning and compile times."""
    out: dict[str, Any] = {"cases": len(rows)}
    vs_aten = [r["speedup_vs_aten"] for r in rows]
    out["geomean_speedup_vs_aten"] = _geomean(vs_aten)
    out["min_speedup_vs_aten"] = min(vs_aten)
    if all("paired_speedup_vs_aten" in r for r in rows):  # per-round ratios
        paired_aten = [r["paired_speedup_vs_aten"] for r in rows]
        out["paired_geomean_speedup_vs_aten"], out["paired_min_speedup_vs_aten"] = (
            _geomean(paired_aten),
            min(paired_aten),
        )
    if all("aten_best_ms" in r for r in rows):  # the fastest round of each path
        best = [r["aten_best_ms"] / r["tunesmith_best_ms"] for r in rows]
        out["best_round_geomean_speedup_vs_aten"], out["best_round_min_speedup_vs_aten"] = _geomean(best), min(best)
    if all(r.get("tunesmith_tuning_top5_ms") for r in rows):
        out["best_candidate_geomean_vs_aten"] = best_candidate_geomean(rows, "tunesmith")
    out["median_tunesmith_tune_s"] = statistics.median(r["tunesmith_tune_s"] for r in rows)
    warm = [r["tunesmith_warm_s"] for r in rows if r.get("tunesmith_warm_s") is not None]
    if warm:
        out["max_tunesmith_warm_s"] = max(warm)
    if all("inductor_ms" in r for r in rows):
        out["geomean_speedup_vs_inductor"] = _geomean([r["speedup_vs_inductor"] for r in rows])
        out["geomean_inductor_vs_aten"] = _geomean([r["aten_ms"] / r["inductor_ms"] for r in rows])
        out["median_inductor_compile_s"] = statistics.median(r["inductor_compile_s"] for r in rows)
        if all("inductor_best_ms" in r for r in rows):
            best = [r["inductor_best_ms"] / r["tunesmith_best_ms"] for r in rows]
            out["best_round_geomean_speedup_vs_inductor"] = _geomean(best)
        if all("paired_speedup_vs_inductor" in r for r in rows):
            out["paired_geomean_speedup_vs_inductor"] = _geomean([r["paired_speedup_vs_inductor"] for r in rows])
    if all("tunesmith_cutlass_ms" in r for r in rows):
        for key in ("speedup_vs_aten", "paired_speedup_vs_aten"):
            ratios = [r[f"tunesmith_cutlass_{key}"] for r in rows]
            out[f"cutlass_geomean_{key}"], out[f"cutlass_min_{key}"] = _geomean(ratios), min(ratios)
        out["median_tunesmith_cutlass_tune_s"] = statistics.median(r["tunesmith_cutlass_tune_s"] for r in rows)
        out["max_tunesmith_cutlass_tune_s"] = max(r["tunesmith_cutlass_tune_s"] for r in rows)
        out["cutlass_best_candidate_geomean_vs_aten"] = best_candidate_geomean(rows, "tunesmith_cutlass")
    graphed = [r for r in rows if r.get("tunesmith_graph_ms") and r.get("aten_graph_ms")]
    if len(graphed) == len(rows):  # GPU time alone: no host overhead on any path
        out["graph_geomean_speedup_vs_aten"] = _geomean([r["aten_graph_ms"] / r["tunesmith_graph_ms"] for r in rows])
        if all(r.get("inductor_graph_ms") for r in rows):
            ratios = [r["inductor_graph_ms"] / r["tunesmith_graph_ms"] for r in rows]
            out["graph_geomean_speedup_vs_inductor"] = _geomean(ratios)
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="GEMM set: time in ms, speedup = other path's time / tunesmith's")
    formats = [
        ("aten", "aten_ms", "{:.4f}"), ("tunesmith", "tunesmith_ms", "{:.4f}"), ("inductor", "inductor_ms", "{:.4f}"),
        ("vs aten", "speedup_vs_aten", "{:.3f}x"), ("paired", "paired_speedup_vs_aten", "{:.3f}x"),
        ("vs inductor", "speedup_vs_inductor", "{:.3f}x"), ("tune s", "tunesmith_tune_s", "{:.2f}"),
        ("compile s", "inductor_compile_s", "{:.1f}"), ("warm s", "tunesmith_warm_s", "{:.3f}"),
    ]  # fmt: skip
    if any("tunesmith_cutlass_ms" in r for r in rows):
        formats += [
            ("+cutlass", "tunesmith_cutlass_ms", "{:.4f}"), ("vs aten", "tunesmith_cutlass_speedup_vs_aten", "{:.3f}x"),
            ("tune s", "tunesmith_cutlass_tune_s", "{:.1f}"),
        ]  # fmt: skip
    for col, _, _ in [("case", "", ""), *formats]:
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        table.add_row(r["name"], *(fmt.format(r[k]) if r.get(k) is not None else "-" for _, k, fmt in formats))
    Console(width=160).print(table)


def chart(result: dict[str, Any], target: str) -> None:
    """Bar chart of a result: tunesmith's speedup over ATen and over Inductor max-autotune, per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, summary_ = result["cases"], result["summary"]
    names = [r["name"] for r in rows]
    series = [
        ("over ATen", "speedup_vs_aten", "#4878d0"),
        ("over Inductor max-autotune", "speedup_vs_inductor", "#ee854a"),
    ]
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.4
    for i, (label, key, color) in enumerate(series):
        xs = [j + (i - 0.5) * width for j in range(len(rows))]
        ax.bar(xs, [r.get(key, 0) for r in rows], width, label=label, color=color)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup (time of the other / tunesmith's)")
    ax.set_title(
        f"tunesmith (aten + triton) on {result['device']}, torch {result['torch']}, triton {result['triton']}: "
        f"geomean {summary_['geomean_speedup_vs_aten']:.4f}x over ATen, "
        f"{summary_.get('geomean_speedup_vs_inductor', float('nan')):.4f}x over Inductor",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="where to write the results")
    parser.add_argument("--only", help="comma-separated case names (default: every case)")
    parser.add_argument("--chart", help="draw the speedup chart (PNG) here")
    parser.add_argument("--chart-only", help="redraw the chart and table from this JSON file, measure nothing")
    parser.add_argument("--no-inductor", action="store_true", help="skip Inductor max-autotune")
    parser.add_argument("--cold-only", action="store_true", help="only each case's cold tuning time")
    parser.add_argument("--cutlass", action="store_true", help="add the path with backends aten + triton + cutlass")
    parser.add_argument("--merge", nargs="+", help="merge the JSON files of runs split with --only")
    parser.add_argument("--warm", help=argparse.SUPPRESS)  # the fresh warm-cache process
    parser.add_argument("--cold", help=argparse.SUPPRESS)  # a case's cold tune in a fresh process
    args = parser.parse_args()
    if args.chart_only:
        result = json.loads(Path(args.chart_only).read_text())
        print_table(result["cases"])
        if args.chart:
            chart(result, args.chart)
        return 0
    if not args.json:
        parser.error("--json is required")
    if args.warm:
        Path(args.json).write_text(json.dumps(_warm(args.warm.split(","))))
        return 0
    if args.cold:
        Path(args.json).write_text(json.dumps(_cold_tune(*args.cold.split(":"))))
        return 0
    if args.merge:
        result = merged(args.merge, summary)
        setups = [json.loads(Path(p).read_text())["warm_process_setup_s"] for p in args.merge]
        result["warm_process_setup_s"] = max(setups)
        return _finish(args, result)
    _fresh_caches()
    import torch

    import tunesmith
    from tunesmith import problemset

    torch.set_float32_matmul_precision(PRECISION)
    cases = problemset.load(SHAPES)
    if args.only:
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c.name in wanted]
    variants = list(VARIANTS) if args.cutlass else ["tunesmith"]
    # Every cold tune first, before anything of Inductor's runs in this process beside them.
    colds = {case.name: {v: _cold(case, v) for v in variants} for case in cases}
    info = {**run_info(tunesmith.current_options().prune), "variants": {v: VARIANTS[v] for v in variants}}
    if args.cold_only:
        rows = [
            {"name": n, **{f"{v}_{k}": c[v][k] for v in variants for k in ("tune_s", "spec", "libraries_built")}}
            for n, c in colds.items()
        ]
        medians = {f"median_{v}_tune_s": statistics.median(c[v]["tune_s"] for c in colds.values()) for v in variants}
        Path(args.json).write_text(json.dumps({**info, "summary": medians, "cases": rows}, indent=1))
        print(json.dumps(medians), *(json.dumps(r) for r in rows), sep="\n")
        return 0
    rows = []
    env_before = dict(os.environ)
    for case in cases:
        print(f"{case.name} ...", file=sys.stderr, flush=True)
        rows.append(_case_row(case, colds[case.name], not args.no_inductor))
        Path(args.json).write_text(json.dumps({"partial": True, "cases": rows}, indent=1))
    # what this process's runs (Inductor's) changed in the environment the warm process inherits
    env_changed = {k: v for k, v in os.environ.items() if env_before.get(k) != v}
    warm = _in_fresh_process("--warm", ",".join(f"{r['name']}:{v}" for r in rows for v in variants))
    for r in rows:
        for v in variants:
            w = warm["cases"][f"{r['name']}:{v}"]
            r[f"{v}_warm_s"], r[f"{v}_warm_cached"] = w["warm_s"], w["cached"]
            r[f"{v}_warm_select_s"], r[f"{v}_warm_first_call_s"] = w["select_s"], w["first_call_s"]
            r[f"{v}_warm_triton_files_written"] = w["triton_files_written"]
            r[f"{v}_warm_same_spec"] = w["spec"] == r[f"{v}_spec"]
    result = {
        **info,
        "timing": f"median of {ROUNDS} interleaved rounds of do_bench medians (warmup 10 ms, rep 40 ms)",
        "warm_process_setup_s": warm["setup_s"],
        "warm_process_env": warm["env"],
        "env_changed_by_run": env_changed,
        "warm_process_setup": "imports, plugin loading, first CUDA, cuBLAS (per dtype) and Triton use",
        "summary": summary(rows),
        "cases": rows,
    }
    return _finish(args, result)


def _finish(args: Any, result: dict[str, Any]) -> int:
    finish(args.json, result, print_table)
    if args.chart:
        chart(result, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
