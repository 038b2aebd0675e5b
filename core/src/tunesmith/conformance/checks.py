"""Check one backend on one case, in this process: every choice against the float64 reference,
its spec's JSON round trip and rebuild, and the benchmarker's handling of its failures.

The result is plain JSON data (the worker streams it to the pytest process). ``on_choice`` is
called before a choice runs, so that a crash can be blamed on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

import torch

from tunesmith import hooks
from tunesmith.bench import InprocessBenchmarker
from tunesmith.conformance.cases import Case, make
from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.plugins import _describe
from tunesmith.problem import build_problem
from tunesmith.selection import describe
from tunesmith.settings import current_options
from tunesmith_hookspecs import Choice, ChoiceSpec, Problem, SerdeError, from_json, to_json


def poison(device: torch.device, nbytes: int) -> None:
    """Leave NaNs where the next allocation of about ``nbytes`` will likely land, so elements a
    kernel never writes show up as NaN (on CUDA the caching allocator hands the block back)."""
    if nbytes and device.type == "cuda":
        torch.full((nbytes // 4 + 1,), math.nan, dtype=torch.float32, device=device)


def _run(choice: Choice, problem: Problem, inputs: list[torch.Tensor], ref: torch.Tensor) -> dict[str, Any]:
    """Precompile and run one choice; its relative error, or the error it raised, and the layout it gave."""
    device = inputs[0].device
    nbytes = problem.output.numel * torch.empty((), dtype=getattr(torch, problem.output.dtype)).element_size()
    try:
        choice.precompile()
        kernel = choice.kernel()
        poison(device, nbytes)
        with torch.no_grad():
            out = kernel(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - reported as this choice's failure
        return {"error": _describe(exc)}
    want = (tuple(problem.output.shape), tuple(problem.output.stride), problem.output.dtype, device.type)
    got = (
        (tuple(out.shape), tuple(out.stride()), str(out.dtype).removeprefix("torch."), out.device.type)
        if isinstance(out, torch.Tensor)
        else type(out).__name__
    )
    if got != want:
        return {"error": f"returned {got}, expected (shape, stride, dtype, device) {want}"}
    return {"rel_error": relative_error(out, ref)}


def check_case(
    backend: str,
    case: Case,
    device: torch.device,
    on_choice: Callable[[str], None] = lambda spec: None,
    quarantine: Collection[str] = (),
) -> dict[str, Any]:
    """Everything the suite asserts about ``backend`` on ``case``, as JSON-able data. Choices named
    in ``quarantine`` (they crashed earlier workers) are reported as failed without running."""
    tensors, scalars, epilogue = make(case, device)
    problem, inputs = build_problem(case.op, tensors, scalars, epilogue)
    result: dict[str, Any] = {"id": case.id, "problem": describe(problem), "problem_key": problem.key()}
    status = hooks.plugin_status(backend)
    why = status.supports(case.op, case.dtype, device.type) if status.runnable else status.reason
    if why:
        return {**result, "skip": why}
    options = current_options({"backends": [backend], "bench_warmup": 0, "bench_repeat": 1, "caches": []})
    choices, reasons = hooks.choices(problem, options)
    if backend in reasons and not choices:
        reason = reasons[backend]
        return {**result, "no_choices": reason} if reason.startswith("offered no") else {**result, "error": reason}
    ref = reference(problem, inputs)
    tol = tolerance(problem)
    rows = []
    crashed = [c for c in choices if str(c.spec) in quarantine]
    choices = [c for c in choices if str(c.spec) not in quarantine]
    for choice in crashed:
        error = "not run: it crashed the worker process on earlier cases"
        rows.append({"spec": str(choice.spec), "error": error, "roundtrip": True, "timed": "inf", "tolerance": tol})
    for choice in choices:
        spec = choice.spec
        on_choice(str(spec))
        row: dict[str, Any] = {"spec": str(spec), "spec_key": spec.key(), "tolerance": tol}
        row |= _run(choice, problem, inputs, ref)
        try:
            row["roundtrip"] = from_json(to_json(spec), ChoiceSpec) == spec
        except SerdeError as exc:
            row["roundtrip"] = False
            row["roundtrip_error"] = str(exc)
        rebuilt = (
            hooks.rebuild_choice(from_json(to_json(spec), ChoiceSpec), problem, options) if row["roundtrip"] else None
        )
        if rebuilt is None:
            row["rebuild_error"] = "neither tunesmith_rebuild_choice nor tunesmith_choices gave a choice with this spec"
        else:
            again = _run(rebuilt, problem, inputs, ref)
            if "error" in again or again["rel_error"] > tol:
                row["rebuild_error"] = again.get("error") or f"relative error {again['rel_error']:.3g} > {tol:g}"
        rows.append(row)
    timings = InprocessBenchmarker(options).benchmark(problem, choices, inputs)
    for row, timing in zip(rows[len(crashed) :], timings, strict=True):
        row["timed"] = "inf" if not timing.ok else "finite"
    return {**result, "choices": rows}


def failures(result: dict[str, Any]) -> list[str]:
    """What is wrong in one case's result, one line per problem, naming the choice and the numbers."""
    where = result.get("problem", result["id"])
    if "crashed" in result:
        return [f"{result['id']}: {result['crashed']}"]
    if "error" in result:
        return [f"{where}: {result['error']}"]
    lines = []
    for row in result.get("choices", []):
        spec = row["spec"]
        if "error" in row:
            lines.append(f"{spec} on {where}: {row['error']}")
            if row.get("timed") != "inf":
                lines.append(f"{spec} on {where}: failed, yet the benchmarker gave it a finite time")
        elif not row["rel_error"] <= row["tolerance"]:
            lines.append(
                f"{spec} on {where}: relative error {row['rel_error']:.3g} > tolerance {row['tolerance']:g}"
                " (against the float64 reference; NaN or inf means unwritten or non-finite elements)"
            )
        if not row["roundtrip"]:
            lines.append(f"{spec}: does not round-trip through JSON ({row.get('roundtrip_error', 'unequal')})")
        if "rebuild_error" in row:
            lines.append(f"{spec} rebuilt from its JSON on {where}: {row['rebuild_error']}")
    return lines
