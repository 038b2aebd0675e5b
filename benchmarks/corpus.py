"""The shape corpus on one GPU (issue 29): per problem of ``benchmarks/corpus/corpus.json``, ATen,
tunesmith's pruned choice, the exhaustive best and Inductor ``max-autotune-no-cudagraphs``.

    python benchmarks/corpus.py --json $OUT/corpus.json --split test [--resume] [--stop-after 450]
    python benchmarks/corpus.py --json benchmarks/results/corpus_h100.json --merge a.json b.json --chart c.png
    python benchmarks/corpus.py --chart-only benchmarks/results/corpus_h100.json --chart out.png
    python benchmarks/corpus.py --small --json small.json --cases NAME,NAME    # on the CPU: a smoke test

Per problem:

- tunesmith's cold tune with its default settings (backends aten + triton, ``prune`` 6) and the
  exhaustive one (``prune`` none: every candidate benchmarked), each in a fresh process with empty
  tunesmith and Triton caches of its own, after what a process pays once (``gemm.warm_process``):
  ``tunesmith_tune_s``, ``exhaustive_tune_s`` and the chosen specs;
- Inductor's compile of the op and its epilogue (``torch.compile`` of gemm.py's eager function,
  its first call, in this process after ``torch.compiler.reset()``): ``inductor_compile_s``;
- the kernel time of ATen (eager), both tunesmith choices and Inductor's, two ways, in interleaved
  rounds: ``*_gpu_ms``, GPU time alone: one CUDA graph of many calls over a few rotating copies of
  the inputs (so most calls find their inputs out of L2), its replays timed by CUDA events, per
  call; and ``*_do_bench_ms``, ``triton.testing.do_bench`` (median, L2 flushed, host time
  included). Where both tunes chose the same spec, the exhaustive times are tunesmith's.

The summary, per split: the regret of pruning (pruned over exhaustive GPU time: the share within
1.02, the worst), tunesmith's geomean and worst speedup over ATen and over Inductor, and the median
tune time against Inductor's median compile time. ``--chart`` draws the speedups per problem, sorted.

A device call lasts at most 10 minutes and a case takes, by estimate, most of a minute (two fresh
processes, Inductor's compile, the timings), so a run is many calls. Rows are written as each case
finishes; ``--resume`` skips the cases already in the ``--json`` file (retrying rows with an error;
a file made on another device, versions or settings is refused) and ``--stop-after`` stops
starting cases after that many seconds. Each call carries the previous call's file in the working
tree and continues it (``benchmarks/corpus_gpu.sh`` does both). Runs on several GPUs take disjoint
cases (``--shard 1/2``, ``--cases``) and join with ``--merge``.

``--small`` runs each case at a tiny size derived from it (dimensions cut to at most 64, float32)
on the CPU, with backends aten (``--backends aten,triton`` with ``TRITON_INTERPRET=1`` for Triton),
Inductor in its default mode and wall-clock times in place of GPU times: it checks the script, it
measures nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gemm

CORPUS = Path(__file__).with_name("corpus") / "corpus.json"
#: the tunesmith paths: the pruned choice (default settings) and the exhaustive best
VARIANTS: dict[str, dict[str, Any]] = {"tunesmith": {}, "exhaustive": {"prune": None}}
PATHS = ("aten", "tunesmith", "exhaustive", "inductor")
ROUNDS = 5
#: copies of the inputs a graph rotates over: enough to hold this many bytes, 2 to MAX_COPIES
ROTATE_BYTES, MAX_COPIES = 256 * 2**20, 4
#: calls captured per graph: enough for a replay of about GRAPH_MS, at most MAX_CALLS
GRAPH_MS, MAX_CALLS = 2.0, 200
#: a case within this of the exhaustive best counts as no regret
REGRET_OK = 1.02
#: the longest one cold tune (a fresh process) may take before its case is recorded as failed
CHILD_TIMEOUT_S = 300


def small_case(case: Any) -> Any:
    """A tiny float32 problem of the case's kind: dimensions over 64 cut to 32..64 (odd stays odd),
    at most 3 batches; a conv at most 2 images of 12 x 12 (or the kernel's size) and 16 channels."""
    from tunesmith import problemset

    f = dict(case.fields, dtype="float32")
    if case.op == "conv":
        groups = f.get("groups", 1)
        cin, cout = f["in_channels"], f["out_channels"]
        if groups > 1:  # the same channels per group, fewer groups
            f["groups"] = min(groups, 4)
            f["in_channels"], f["out_channels"] = cin // groups * f["groups"], cout // groups * f["groups"]
        else:
            f["in_channels"], f["out_channels"] = min(cin, 16), min(cout, 16)
        k = f["kernel_size"] if isinstance(f["kernel_size"], int) else max(f["kernel_size"])
        f["batch"] = min(f["batch"], 2)
        f["height"], f["width"] = min(f["height"], max(12, k)), min(f["width"], max(12, k))
    else:
        for key in "MNK":
            f[key] = f[key] if f[key] <= 64 else 32 + f[key] % 33
        if "B" in f:
            f["B"] = min(f["B"], 3)
    return problemset.Case(case.name, case.op, "float32", f)


def load_cases(path: Path, small: bool) -> dict[str, Any]:
    """The corpus's cases by name (their tiny forms with ``small``)."""
    from tunesmith import problemset

    cases = problemset.load(path)
    return {c.name: small_case(c) if small else c for c in cases}


# ----------------------------------------------------------------------------- cold tunes
def _child(args: argparse.Namespace) -> dict[str, Any]:
    """In a fresh process with empty tunesmith and Triton caches: one cold tune of one case."""
    import torch

    import tunesmith
    from tunesmith import problemset

    torch.set_float32_matmul_precision(gemm.PRECISION)
    case = load_cases(Path(args.corpus), args.small)[args.child]
    tensors, scalars = problemset.make_inputs(case, gemm.DEVICE, seed=1)
    backends = args.backends.split(",")
    gemm.warm_process(backends)
    options = {"backends": backends, **VARIANTS[args.variant]}
    before = tunesmith.counters["choices_pruned"]
    start = time.perf_counter()
    sel = tunesmith.tune(case.op, *tensors, epilogue=problemset.epilogue(case), options=options, **scalars)
    gemm._sync()
    answer = {
        "tune_s": time.perf_counter() - start,
        "source": sel.report.source,
        "spec": [sel.spec.backend, sel.spec.template, dict(sel.spec.params)],
        "benchmarked": len(sel.timings),
        "pruned": tunesmith.counters["choices_pruned"] - before,
    }
    if args.variant == "exhaustive":  # every choice's tuning time next to its estimate: what a refit works from
        answer["choices"] = _choices(case, tensors, scalars, sel, backends)
    return answer


def _choices(case: Any, tensors: list[Any], scalars: dict[str, Any], sel: Any, backends: list[str]) -> list[Any]:
    """``[spec, tuning ms, estimated ms]`` of every choice a tune timed (no estimate without a device profile)."""
    import tunesmith
    from tunesmith import hooks, problemset
    from tunesmith.problem import build_problem

    problem, _ = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    with tunesmith.options(backends=backends) as opts:
        profile = hooks.device_info(tensors[0].device, opts)
        choices, _ = hooks.choices(problem, opts)
        estimates = {c.spec: hooks.estimate_runtime(c, profile, opts) for c in choices} if profile else {}
    return [[str(spec), ms, estimates.get(spec)] for spec, ms in sel.timings.items()]


def _in_child(name: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`_child` in a fresh process, with caches of its own (removed after)."""
    root = Path(tempfile.mkdtemp(prefix="corpus_cold_"))
    env = {**os.environ, "TUNESMITH_CACHE_DIR": str(root / "tunesmith"), "TRITON_CACHE_DIR": str(root / "triton")}
    command = [sys.executable, __file__, "--json", str(root / "answer.json"), "--child", name, "--variant", variant]
    command += ["--corpus", args.corpus, "--backends", args.backends] + (["--small"] if args.small else [])
    try:
        try:
            subprocess.run(command, check=True, env=env, timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the {variant} tune did not finish in {CHILD_TIMEOUT_S} s") from None
        return json.loads((root / "answer.json").read_text())
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------------- timing
def _copies(tensors: list[Any]) -> list[list[Any]]:
    """The inputs and copies of them (same strides) to rotate over: 2 to ``MAX_COPIES`` in all."""
    import torch

    size = sum(t.numel() * t.element_size() for t in tensors)
    count = min(MAX_COPIES, max(2, math.ceil(ROTATE_BYTES / max(size, 1))))
    out = [tensors]
    for _ in range(count - 1):
        out.append([torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t) for t in tensors])
    return out


class Timer:
    """One path's two clocks: a CUDA graph of calls over the rotating copies, and ``do_bench``."""

    def __init__(self, call: Any, copies: list[list[Any]]) -> None:
        self.call, self.copies, self.graph, self.calls, self.error = call, copies, None, 0, None
        for inputs in copies:  # compiled and loaded before any capture
            call(inputs)
        gemm._sync()
        if gemm.DEVICE != "cuda":
            return
        self.graph, self.calls = self._capture(len(copies)), len(copies)
        if self.graph is None:  # an extra clock: do_bench's time stands
            self.error = "the calls could not be captured in a CUDA graph (see the log)"
            print(f"no CUDA graph time: {self.error}", file=sys.stderr)
            return
        per_pass = self._replay_ms() * len(copies)
        reps = max(1, min(MAX_CALLS // len(copies), math.ceil(GRAPH_MS / max(per_pass, 1e-4))))
        if reps > 1:
            self.graph = None
            self.graph, self.calls = self._capture(reps * len(copies)), reps * len(copies)

    def _capture(self, count: int) -> Any:
        """The core's capture of ``count`` calls over the copies (a failed capture leaves no state behind)."""
        import torch

        from tunesmith.bench.timing import capture_calls

        calls = [lambda inputs=inputs: self.call(inputs) for inputs in self.copies]
        return capture_calls(calls, count, torch.device("cuda"))

    def _replay_ms(self) -> float:
        import torch

        from tunesmith.cost.calibrate import time_ms

        return time_ms(self.graph.replay, torch.device("cuda"), warmup=1, repeat=5) / self.calls

    def gpu_ms(self) -> float | None:
        """Per call, GPU time alone (on the CPU: the median wall time of a pass over the copies)."""
        if gemm.DEVICE != "cuda":
            return _wall_ms(lambda: [self.call(inputs) for inputs in self.copies]) / len(self.copies)
        return self._replay_ms() if self.graph is not None else None

    def do_bench_ms(self) -> float:
        if gemm.DEVICE != "cuda":
            return _wall_ms(lambda: self.call(self.copies[0]))
        from triton.testing import do_bench

        return float(do_bench(lambda: self.call(self.copies[0]), warmup=10, rep=40, return_mode="median"))


def _wall_ms(fn: Any, repeat: int = 5) -> float:
    """The CPU's stand-in: the median wall time of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


# ------------------------------------------------------------------------------- one case
def measure(case: Any, split: str, source: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every column of one case's row."""
    import torch

    import tunesmith
    from tunesmith import hooks, problemset
    from tunesmith.ops import relative_error
    from tunesmith.problem import build_problem
    from tunesmith_hookspecs import ChoiceSpec

    row: dict[str, Any] = {"name": case.name, "split": split, "source": source, "op": case.op}
    row |= {"shape": problemset.shape_text(case), "dtype": case.dtype, "epilogue": problemset.epilogue(case)}
    colds = {variant: _in_child(case.name, variant, args) for variant in VARIANTS}
    tensors, scalars = problemset.make_inputs(case, gemm.DEVICE, seed=1)
    eager = gemm._eager(case)
    ref = gemm._reference(eager, scalars, tensors).double().cpu()
    problem, inputs = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    calls: dict[str, Any] = {"aten": lambda t: eager(scalars, *t)}
    with tunesmith.options(backends=args.backends.split(",")) as opts:
        for variant, cold in colds.items():
            spec = ChoiceSpec(cold["spec"][0], cold["spec"][1], cold["spec"][2])
            row[f"{variant}_spec"], row[f"{variant}_tune_s"] = str(spec), cold["tune_s"]
            row[f"{variant}_benchmarked"], row[f"{variant}_cold_source"] = cold["benchmarked"], cold["source"]
            if "choices" in cold:
                row[f"{variant}_choices"] = cold["choices"]
            if variant == "exhaustive" and row["exhaustive_spec"] == row["tunesmith_spec"]:
                continue
            choice = hooks.rebuild_choice(spec, problem, opts)
            if choice is None:
                raise RuntimeError(f"no plugin rebuilds {spec}")
            choice.precompile()
            kernel = choice.kernel()
            calls[variant] = lambda t, kernel=kernel: kernel(*t)
    row["tunesmith_pruned"] = colds["tunesmith"]["pruned"]
    row["same_spec"] = row["exhaustive_spec"] == row["tunesmith_spec"]
    torch.compiler.reset()
    compiled = torch.compile(eager, mode=inductor_mode(args), dynamic=False)
    start = time.perf_counter()
    out = compiled(scalars, *tensors)
    gemm._sync()
    row["inductor_compile_s"] = time.perf_counter() - start
    calls["inductor"] = lambda t: compiled(scalars, *t)
    del out
    for name, call in calls.items():
        row[f"{name}_rel_error"] = relative_error(call(inputs), ref)
    copies = _copies(inputs)
    timers = {name: Timer(call, copies) for name, call in calls.items()}
    row["copies"], row["graph_calls"] = len(copies), {n: t.calls for n, t in timers.items()}
    row["graph_errors"] = {n: t.error for n, t in timers.items() if t.error}
    gpu: dict[str, list[float]] = {name: [] for name in timers}
    bench: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    for i in range(ROUNDS):  # each round starts with the next path: a drifting clock weighs on all alike
        for name in names[i % len(names) :] + names[: i % len(names)]:
            ms = timers[name].gpu_ms()
            if ms is not None:
                gpu[name].append(ms)
            bench[name].append(timers[name].do_bench_ms())
    for name in PATHS:
        source_path = name if name in timers else "tunesmith"  # the same spec: the same kernel
        row[f"{name}_gpu_ms"] = statistics.median(gpu[source_path]) if gpu[source_path] else None
        row[f"{name}_do_bench_ms"] = statistics.median(bench[source_path])
        row[f"{name}_gpu_rounds_ms"] = gpu[source_path]
        row.setdefault(f"{name}_rel_error", row[f"{source_path}_rel_error"])
    row |= ratios(row)
    return row


def inductor_mode(args: argparse.Namespace) -> str:
    """Inductor's mode: max-autotune without CUDA graphs; in ``--small``, the default mode (on the
    CPU, max-autotune compiles and times C++ GEMM templates, tens of seconds a smoke test need not pay)."""
    return "default" if args.small else "max-autotune-no-cudagraphs"


def ratios(row: dict[str, Any]) -> dict[str, Any]:
    """Regret and speedups of a row, by GPU time (by do_bench's where a path has none) and by do_bench."""
    out: dict[str, Any] = {}
    graphed = all(row.get(f"{p}_gpu_ms") for p in PATHS)
    for clock in ("gpu", "do_bench"):
        ms = {p: row[f"{p}_{clock if graphed else 'do_bench'}_ms"] for p in PATHS}
        prefix = "" if clock == "gpu" else "do_bench_"
        out[f"{prefix}regret"] = ms["tunesmith"] / ms["exhaustive"]
        out[f"{prefix}speedup_vs_aten"] = ms["aten"] / ms["tunesmith"]
        out[f"{prefix}speedup_vs_inductor"] = ms["inductor"] / ms["tunesmith"]
        out[f"{prefix}exhaustive_speedup_vs_aten"] = ms["aten"] / ms["exhaustive"]
        out[f"{prefix}inductor_speedup_vs_aten"] = ms["aten"] / ms["inductor"]
    return out


# ------------------------------------------------------------------------------- a result
def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per split (and over all): pruning's regret, speedups over ATen and Inductor, tune and compile times."""
    out: dict[str, Any] = {}
    for split in ("test", "train", "all"):
        rs = [r for r in rows if "error" not in r and split in ("all", r["split"])]
        failed = [r["name"] for r in rows if "error" in r and split in ("all", r["split"])]
        if not rs:
            continue

        def worst(key: str, rs: list[dict[str, Any]] = rs, low: bool = True) -> list[Any]:
            r = (min if low else max)(rs, key=lambda r: r[key])
            return [r[key], r["name"]]

        s: dict[str, Any] = {"cases": len(rs), "errors": failed}
        s["regret_share_within_1.02"] = sum(r["regret"] <= REGRET_OK for r in rs) / len(rs)
        s["regret_max"] = worst("regret", low=False)
        s["same_spec_share"] = sum(r["same_spec"] for r in rs) / len(rs)
        for key in ("speedup_vs_aten", "speedup_vs_inductor", "exhaustive_speedup_vs_aten", "inductor_speedup_vs_aten"):
            s[f"geomean_{key}"] = _geomean([r[key] for r in rs])
            s[f"min_{key}"] = worst(key)
        for key in ("speedup_vs_aten", "speedup_vs_inductor"):
            s[f"do_bench_geomean_{key}"] = _geomean([r[f"do_bench_{key}"] for r in rs])
        s["do_bench_regret_share_within_1.02"] = sum(r["do_bench_regret"] <= REGRET_OK for r in rs) / len(rs)
        for key in ("tunesmith_tune_s", "exhaustive_tune_s", "inductor_compile_s"):
            s[f"median_{key}"] = statistics.median(r[key] for r in rs)
        s["median_tune_over_median_compile"] = s["median_tunesmith_tune_s"] / s["median_inductor_compile_s"]
        s["graph_time_missing"] = [r["name"] for r in rs if any(r.get(f"{p}_gpu_ms") is None for p in PATHS)]
        out[split] = s
    return out


def print_summary(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"corpus on {result['device']}: tunesmith (pruned) against each, by GPU time alone")
    rows = [
        ("cases", "cases", "{}"),
        ("regret <= 1.02", "regret_share_within_1.02", "{:.0%}"),
        ("worst regret", "regret_max", "{:.3f}"),
        ("geomean vs ATen", "geomean_speedup_vs_aten", "{:.3f}x"),
        ("worst vs ATen", "min_speedup_vs_aten", "{:.3f}x"),
        ("geomean vs Inductor", "geomean_speedup_vs_inductor", "{:.3f}x"),
        ("worst vs Inductor", "min_speedup_vs_inductor", "{:.3f}x"),
        ("do_bench: vs ATen", "do_bench_geomean_speedup_vs_aten", "{:.3f}x"),
        ("do_bench: vs Inductor", "do_bench_geomean_speedup_vs_inductor", "{:.3f}x"),
        ("median tune s", "median_tunesmith_tune_s", "{:.2f}"),
        ("median exhaustive tune s", "median_exhaustive_tune_s", "{:.2f}"),
        ("median Inductor compile s", "median_inductor_compile_s", "{:.2f}"),
    ]
    splits = [s for s in ("test", "train", "all") if s in result["summary"]]
    table.add_column("")
    for split in splits:
        table.add_column(split, justify="right")
    for label, key, fmt in rows:
        cells = []
        for split in splits:
            value = result["summary"][split][key]
            cells.append(fmt.format(value[0]) + f" ({value[1]})" if isinstance(value, list) else fmt.format(value))
        table.add_row(label, *cells)
    Console(width=200).print(table)


def chart(result: dict[str, Any], target: str) -> None:
    """Tunesmith's speedup over ATen and over Inductor per problem, each sorted, coloured by split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["cases"] if "error" not in r]
    colors = {"test": "#ee854a", "train": "#4878d0"}
    fig, axes = plt.subplots(2, 1, figsize=(14, 8))
    for ax, (key, label) in zip(axes, (("speedup_vs_aten", "ATen"), ("speedup_vs_inductor", "Inductor")), strict=True):
        ranked = sorted(rows, key=lambda r: r[key])
        ax.bar(range(len(ranked)), [r[key] for r in ranked], color=[colors[r["split"]] for r in ranked], width=0.9)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel(f"over {label} (x)")
        ax.set_xticks([])
        parts = [
            f"{split} {s[f'geomean_{key}']:.3f}x (worst {s[f'min_{key}'][0]:.2f})"
            for split, s in result["summary"].items()
            if split != "all"
        ]
        title = f"tunesmith's speedup over {label} by GPU time, {len(ranked)} problems sorted: "
        ax.set_title(title + ", ".join(parts))
        for split, color in colors.items():
            ax.bar([], [], color=color, label=split)
        ax.legend(loc="upper left")
    fig.suptitle(f"shape corpus on {result['device']}, torch {result.get('torch')}, triton {result.get('triton')}")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


#: what a resumed run must share with the rows it keeps (its date may differ)
RESUME_SAME = ("device", "torch", "triton", "backends", "prune", "small", "inductor_mode", "corpus", "timing")


def run_info(args: argparse.Namespace) -> dict[str, Any]:
    """What a result records about its run: gemm.py's (device, versions, date) and this script's settings."""
    info = gemm.run_info(6)
    return {
        **info,
        "backends": args.backends.split(","),
        "prune": {"tunesmith": "default (6)", "exhaustive": None},
        "small": args.small,
        "inductor_mode": inductor_mode(args),
        "corpus": args.corpus,
        "timing": (
            f"median of {ROUNDS} interleaved rounds: gpu_ms, CUDA-graph replays over rotating input copies "
            "(CUDA events, per call); do_bench_ms, triton.testing.do_bench median (warmup 10 ms, rep 40 ms)"
            if not args.small
            else "CPU wall-clock stand-ins (--small): a smoke test, not a measurement"
        ),
    }


def write(path: str, info: dict[str, Any], rows: list[dict[str, Any]], partial: bool) -> None:
    """The result as it stands: rows so far, and their summary."""
    body = {**info, "partial": partial, "summary": summary(rows), "cases": rows}
    Path(path).write_text(json.dumps(body, indent=1))


def merge(paths: list[str], corpus: str) -> dict[str, Any]:
    """Parts of a run (separate GPU calls or GPUs) as one result, in the corpus's order; a case in
    several parts keeps its row without an error, the later one of two."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    devices = {p["device"] for p in parts}
    if len(devices) > 1:
        raise SystemExit(f"the parts ran on different devices: {sorted(devices)}")
    rows: dict[str, dict[str, Any]] = {}
    for part in parts:
        for row in part["cases"]:
            if "error" not in row or "error" in rows.get(row["name"], {"error": 1}):
                rows[row["name"]] = row
    order = {name: i for i, name in enumerate(load_cases(Path(corpus), False))}
    merged = sorted(rows.values(), key=lambda r: order.get(r["name"], len(order)))
    info = {k: v for k, v in parts[0].items() if k not in ("cases", "summary", "partial")}
    partial = any(p.get("partial") for p in parts)  # a part stopped with cases left
    return {**info, "partial": partial, "parts": len(parts), "summary": summary(merged), "cases": merged}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="the result file (written as each case finishes)")
    parser.add_argument("--corpus", default=str(CORPUS), help="the problem set (default: the corpus)")
    parser.add_argument("--split", choices=("test", "train", "all"), default="all", help="which cases (default all)")
    parser.add_argument("--cases", help="comma-separated case names")
    parser.add_argument("--limit", type=int, help="at most this many cases (after --resume's skips)")
    parser.add_argument("--shard", help="I/N: every N-th case from the I-th (a GPU's share of the cases)")
    parser.add_argument("--resume", action="store_true", help="keep the --json file's rows, skip their cases")
    parser.add_argument("--stop-after", type=float, help="start no case after this many seconds")
    parser.add_argument("--backends", help="tunesmith's backends (default aten,triton; --small: aten)")
    parser.add_argument("--small", action="store_true", help="tiny float32 forms of the cases, on the CPU")
    parser.add_argument("--merge", nargs="+", help="join these results into --json")
    parser.add_argument("--chart", help="draw the speedup chart (PNG) here")
    parser.add_argument("--chart-only", help="print the summary and redraw the chart of this result")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one cold tune in a fresh process
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.backends = args.backends or ("aten" if args.small else ",".join(gemm.BACKENDS))
    if args.small:
        gemm.DEVICE = "cpu"
    if args.chart_only:
        result = json.loads(Path(args.chart_only).read_text())
        print_summary(result)
        if args.chart:
            chart(result, args.chart)
        return 0
    if not args.json:
        parser.error("--json is required")
    if args.child:
        Path(args.json).write_text(json.dumps(_child(args)))
        return 0
    if args.merge:
        result = merge(args.merge, args.corpus)
        Path(args.json).write_text(json.dumps(result, indent=1))
        return _finish(result, args)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Measure the chosen cases, writing the result after each."""
    started = time.perf_counter()
    gemm._fresh_caches()
    import torch

    torch.set_float32_matmul_precision(gemm.PRECISION)
    raw = {c["name"]: c for c in json.loads(Path(args.corpus).read_text())["cases"]}
    cases = list(load_cases(Path(args.corpus), args.small).values())
    if args.split != "all":
        cases = [c for c in cases if raw[c.name].get("split") == args.split]
    if args.cases:
        wanted = args.cases.split(",")
        unknown = sorted(set(wanted) - set(raw))
        if unknown:
            raise SystemExit(f"no such case: {', '.join(unknown)}")
        cases = [c for c in cases if c.name in wanted]
    if args.shard:
        i, n = map(int, args.shard.split("/"))
        cases = cases[i - 1 :: n]
    info = run_info(args)
    rows: list[dict[str, Any]] = []
    if args.resume and Path(args.json).is_file():
        before = json.loads(Path(args.json).read_text())
        gemm.refuse_unlike(args.json, before, info, RESUME_SAME)
        rows = [r for r in before["cases"] if "error" not in r]  # a case that failed is tried again
        done = {r["name"] for r in rows}
        print(f"resuming: {len(done)} cases done", file=sys.stderr)
        cases = [c for c in cases if c.name not in done]
    if args.limit is not None:
        cases = cases[: args.limit]
    for i, case in enumerate(cases):
        if args.stop_after is not None and time.perf_counter() - started > args.stop_after:
            print(f"stopped after {args.stop_after:.0f} s: {len(cases) - i} cases left", file=sys.stderr)
            write(args.json, info, rows, partial=True)
            return _finish(json.loads(Path(args.json).read_text()), args)
        print(f"[{i + 1}/{len(cases)}] {case.name} ...", file=sys.stderr, flush=True)
        case_start = time.perf_counter()
        split, source = raw[case.name].get("split", "?"), raw[case.name].get("source", "")
        try:
            row = measure(case, split, source, args)
        except (RuntimeError, subprocess.CalledProcessError) as exc:  # the case's row says why; the run goes on
            print(f"{case.name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            row = {"name": case.name, "split": split, "source": source, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        row["case_s"] = time.perf_counter() - case_start
        rows.append(row)
        write(args.json, info, rows, partial=True)
        _release()
    write(args.json, info, rows, partial=False)
    print(f"no case left: {len(rows)} rows in {args.json}", file=sys.stderr)
    return _finish(json.loads(Path(args.json).read_text()), args)


def _release() -> None:
    """Free what a case held (compiled graphs, selections, cached GPU memory) before the next."""
    import torch

    import tunesmith

    torch.compiler.reset()
    tunesmith.reset()
    gc.collect()
    if gemm.DEVICE == "cuda":
        torch.cuda.empty_cache()


def _finish(result: dict[str, Any], args: argparse.Namespace) -> int:
    if result["summary"]:
        print_summary(result)
    if args.chart and result["summary"]:
        chart(result, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
