"""Pruning replayed on measured tuning times (CPU): which choices ``prune`` and ``WINDOW`` keep,
and how far the best kept time is from the exhaustive tune's best, per case.

The input is a ``cost_model.py`` result: its exhaustive tunes timed every choice, each next to
the model's estimate. ``--estimate`` recomputes the Triton estimates with this checkout's model
(for runs made with an older one; only the choices that run timed take part), and ATen's, for the
ceiling (``prune.BASELINE_CEILING``); without it there is no ceiling. A replay says
what pruning would have kept; the tune time it saves is only measured by ``cost_model.py``.
``--rank`` instead lists every Triton config the plugin offers a case on an H100, by this
checkout's estimate (no GPU needed).

    python benchmarks/prune_replay.py RESULT.json [RESULT.json ...] [--estimate] [--json OUT]
    python benchmarks/prune_replay.py --rank NAME[,NAME] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from gemm import PRECISION, SHAPES

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


def _estimates(case_name: str, specs: list[str]) -> tuple[dict[str, float], float]:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="*")
    parser.add_argument("--rank", help="comma-separated case names: their configs by estimate")
    parser.add_argument("--prune", type=int, default=6)
    parser.add_argument("--estimate", action="store_true", help="estimate with this checkout's model")
    parser.add_argument("--json", help="write the replay here")
    args = parser.parse_args()
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
                estimates, ceiling = _estimates(case["name"], specs)
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


if __name__ == "__main__":
    sys.exit(main())
