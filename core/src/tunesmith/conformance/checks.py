"""Check one backend on one case, in this process: every choice against the float64 reference,
its output layout, its spec's JSON round trip and rebuild, and the benchmarker's handling of its
failures.

The result is plain JSON data (the worker streams it to the pytest process). ``on_choice`` is
called before each step that runs plugin code, so that a crash can be blamed on it. The worker
turns on torch's NaN fill of uninitialized memory (:func:`poison_uninitialized_memory`), so an
output element a kernel never writes is NaN and fails the check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

import torch

from tunesmith import hooks
from tunesmith.bench import InprocessBenchmarker, check_output
from tunesmith.config import Options
from tunesmith.conformance.cases import Case, make
from tunesmith.ops import measured, reference, relative_error, tolerance
from tunesmith.plugins import call_impl, describe_error, get_system
from tunesmith.problem import build_problem
from tunesmith.selection import describe
from tunesmith_hookspecs import Choice, ChoiceSpec, Problem, SerdeError, from_json, to_json

#: what ``on_choice`` is told before the benchmarker times the choices that raised and one that ran
BENCHMARKING = "(the benchmarker, timing the choices)"
QUARANTINED = "not run: it crashed or hung a worker process on earlier cases"


def poison_uninitialized_memory() -> None:
    """Make torch fill new tensors (``torch.empty`` and friends) with NaN, on every device."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def _run(choice: Choice, problem: Problem, inputs: list[torch.Tensor], ref: Any) -> dict[str, Any]:
    """Precompile and run one choice: its relative error, or what went wrong."""
    try:
        choice.precompile()
        kernel = measured(problem, choice.kernel())
        with torch.no_grad():
            out = kernel(*inputs)
        if inputs and inputs[0].device.type == "cuda":
            torch.cuda.synchronize(inputs[0].device)
    except Exception as exc:  # noqa: BLE001 - reported as this choice's failure
        return {"error": describe_error(exc), "raised": True}
    try:
        check_output(problem, out, strides=True)
    except TypeError as exc:
        return {"error": str(exc)}
    return {"rel_error": relative_error(out, ref)}


def _rebuild(backend: str, spec: ChoiceSpec, problem: Problem, options: Options) -> Choice | str:
    """The plugin's own ``tunesmith_rebuild_choice`` when it has one (its errors are the plugin's),
    else enumerate-and-match; a choice, or what went wrong."""
    impls = get_system().impls_of(backend, "tunesmith_rebuild_choice")
    if not impls:
        choice = hooks.rebuild_choice(spec, problem, options)
        return choice if choice is not None else "tunesmith_choices did not offer this spec again"
    try:
        choice = call_impl(impls[0], spec=spec, problem=problem)
    except Exception as exc:  # noqa: BLE001 - reported as this choice's failure
        return f"tunesmith_rebuild_choice raised {describe_error(exc)}"
    if getattr(choice, "spec", None) != spec:
        return f"tunesmith_rebuild_choice returned {choice!r}, not a choice with this spec"
    return choice


def check_case(
    backend: str,
    case: Case,
    device: torch.device,
    on_choice: Callable[[str], None] = lambda spec: None,
    quarantine: Collection[str] = (),
) -> dict[str, Any]:
    """Everything the suite asserts about ``backend`` on ``case``, as JSON-able data. Choices named
    in ``quarantine`` (they crashed or hung earlier workers) are reported as failed, not run."""
    tensors, scalars, epilogue = make(case, device)
    problem, inputs = build_problem(case.op, tensors, scalars, epilogue)
    result: dict[str, Any] = {"id": case.id, "problem": describe(problem), "problem_key": problem.key()}
    status = hooks.plugin_status(backend)
    why = status.supports(case.op, case.dtype, device.type) if status.runnable else status.reason
    if why:
        return {**result, "skip": why}
    options = hooks_options(backend)
    (impl,) = get_system().impls_of(backend, "tunesmith_choices")
    choices, error = hooks.offered_by(impl, problem, options)
    if error:
        return {**result, "error": error}
    if not choices:
        return {**result, "no_choices": "offered no choices for this problem"}
    ref, tol = reference(problem, inputs), tolerance(problem)
    rows, ran, raised = [], [], []
    for choice in choices:
        spec = choice.spec
        row: dict[str, Any] = {"spec": str(spec), "spec_key": spec.key(), "tolerance": tol, "roundtrip": True}
        if str(spec) in quarantine:
            rows.append({**row, "error": QUARANTINED, "raised": True, "timed": "inf"})
            continue
        on_choice(str(spec))
        row |= _run(choice, problem, inputs, ref)
        if row.get("raised"):
            raised.append(choice)
        elif "error" not in row:
            ran.append(choice)
        try:
            again = from_json(to_json(spec), ChoiceSpec)
            row["roundtrip"] = again == spec
        except SerdeError as exc:
            again, row["roundtrip"], row["roundtrip_error"] = None, False, str(exc)
        if row["roundtrip"]:
            rebuilt = _rebuild(backend, again, problem, options)
            outcome = {"error": rebuilt} if isinstance(rebuilt, str) else _run(rebuilt, problem, inputs, ref)
            if "error" in outcome or outcome["rel_error"] > tol:
                row["rebuild_error"] = outcome.get("error") or f"relative error {outcome['rel_error']:.4g} > {tol:g}"
        rows.append(row)
    on_choice(BENCHMARKING)
    timed = {str(t.spec): t for t in InprocessBenchmarker(options).benchmark(problem, ran[:1] + raised, inputs)}
    for row in rows:
        if row["spec"] in timed:
            timing = timed[row["spec"]]
            row["timed"] = "finite" if timing.ok else "inf"
            if timing.error:
                row["timed_error"] = timing.error
    return {**result, "choices": rows}


def hooks_options(backend: str) -> Options:
    """Settings for checking ``backend``: only it, one quick timing, no persistent cache."""
    from tunesmith.settings import current_options

    return current_options({"backends": [backend], "bench_warmup": 0, "bench_repeat": 1, "caches": []})


def failures(result: dict[str, Any]) -> list[str]:
    """What is wrong in one case's result, one line each, naming the case, the choice and the numbers."""
    case = result["id"]
    if "crashed" in result:
        return [f"[{case}] {result['crashed']}"]
    where = f"{result['problem']} [{case}]"
    if "error" in result:
        return [f"{where}: {result['error']}"]
    lines = []
    for row in result.get("choices", []):
        spec = row["spec"]
        if "error" in row:
            lines.append(f"{spec} on {where}: {row['error']}")
            if row.get("raised") and row.get("timed") == "finite":
                lines.append(f"{spec} on {where}: raised, yet the benchmarker gave it a finite time")
        elif not row["rel_error"] <= row["tolerance"]:
            err, tol = row["rel_error"], row["tolerance"]
            how = f"{err / tol:.3g}x the tolerance" if math.isfinite(err) else "NaN, inf or unwritten elements"
            lines.append(
                f"{spec} on {where}: relative error {err:.4g} > tolerance {tol:g} ({how}; vs the float64 reference)"
            )
        if "error" not in row and row.get("timed") == "inf":
            why = row.get("timed_error", "no error given")
            lines.append(f"{spec} on {where}: ran, yet the benchmarker timed it as infinite ({why})")
        if not row["roundtrip"]:
            lines.append(f"{spec}: does not round-trip through JSON ({row.get('roundtrip_error', 'unequal')})")
        if "rebuild_error" in row:
            lines.append(f"{spec} rebuilt from its JSON on {where}: {row['rebuild_error']}")
    return lines
