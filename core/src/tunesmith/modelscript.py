"""``tunesmith tune model.py``: compile a script's model with the ``tunesmith`` backend, run it
once, and report every problem it tuned.

The script is ordinary Python that defines:

- ``model``: a ``torch.nn.Module`` or any callable;
- ``example_inputs``: a tuple of its positional arguments, or a function returning one;
- ``train`` (optional, default False): also run a backward pass (of the sum of the outputs), so
  that the backward's GEMMs are tuned too;
- ``compile_options`` (optional): settings for ``torch.compile(..., options=...)``.
"""

from __future__ import annotations

import math
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import torch

import tunesmith
from tunesmith.errors import TunesmithError
from tunesmith.problem import flops
from tunesmith_hookspecs import SelectionReport, hookimpl


@attrs.frozen
class ModelScript:
    model: Any
    inputs: tuple[Any, ...]
    train: bool = False
    options: dict[str, Any] = attrs.Factory(dict)


def load(path: str | Path, device: str | None = None) -> ModelScript:
    """Run the script and take its ``model`` and ``example_inputs`` (moved to ``device`` if given)."""
    names = runpy.run_path(str(path), run_name="__tunesmith_model__")
    missing = [name for name in ("model", "example_inputs") if name not in names]
    if missing:
        raise TunesmithError(
            f"{path} does not define {' and '.join(missing)}: a model script defines `model` (a module or "
            "callable) and `example_inputs` (a tuple of its arguments); see docs/compile.md"
        )
    inputs = names["example_inputs"]
    inputs = inputs() if callable(inputs) else inputs
    inputs = tuple(inputs) if isinstance(inputs, list | tuple) else (inputs,)
    model = names["model"]
    if device is not None:
        model = model.to(device) if isinstance(model, torch.nn.Module) else model
        inputs = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs)
    return ModelScript(model, inputs, bool(names.get("train", False)), dict(names.get("compile_options", {})))


class _Observer:
    """Collects the selections made while the script's model runs."""

    def __init__(self, on_report: Callable[[SelectionReport], None]) -> None:
        self.reports: list[SelectionReport] = []
        self.on_report = on_report

    @hookimpl
    def tunesmith_selection_done(self, report: SelectionReport) -> None:
        self.reports.append(report)
        self.on_report(report)


def tune(script: ModelScript, on_report: Callable[[SelectionReport], None] = lambda r: None) -> list[SelectionReport]:
    """Compile and run the model once (forward, and backward with ``train``); every selection made."""
    observer = _Observer(on_report)
    name = tunesmith.register(observer, "tunesmith-model-script")
    try:
        torch._dynamo.reset()
        out = torch.compile(script.model, backend="tunesmith", options=script.options or None)(*script.inputs)
        if script.train:
            leaves = [t for t in _tensors(out) if t.requires_grad]
            if not leaves:
                raise TunesmithError("train = True, but no output of the model requires grad")
            sum(t.float().sum() for t in leaves).backward()
    finally:
        tunesmith.unregister(name)
    return observer.reports


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def measures(report: SelectionReport) -> dict[str, Any]:
    """The measured columns of a result row (shared by problem sets and model scripts)."""
    ms = next((t.ms for t in report.timings if t.spec == report.chosen), math.nan)
    aten = [t.ms for t in report.timings if t.spec.backend == "aten" and math.isfinite(t.ms)]
    fine = math.isfinite(ms) and ms > 0
    return {
        "chosen": str(report.chosen),
        "ms": ms,
        "tflops": flops(report.problem) / ms / 1e9 if fine else None,
        "speedup_vs_aten": min(aten) / ms if aten and fine else None,
        "choices": len(report.timings),
        "source": report.source,
        "device_name": report.device_name,
    }


def row(report: SelectionReport, name: str) -> dict[str, Any]:
    """One line of the result table for a selection (the columns of ``tunesmith tune FILE.json``)."""
    problem = report.problem
    ops = problem.inputs[: problem.num_op_inputs]
    steps = "".join(f"+{s.name}" for s in problem.epilogue)
    return {
        "name": name,
        "op": problem.op + steps,
        "shape": " x ".join("x".join(map(str, m.shape)) for m in ops),
        "dtype": ops[0].dtype,
        "device": problem.device,
        **measures(report),
    }
