"""Pruning before benchmarking: rank a Problem's choices by the cost model, keep the best few.

ATen's choices are always kept (they are the baseline every answer is measured against) and do
not count against ``prune``. A choice no plugin estimates ranks at the Problem's roofline, the
best any kernel can do, so a backend without a model is benchmarked rather than dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from tunesmith import hooks
from tunesmith.cost.roofline import problem_cost
from tunesmith.counters import bump
from tunesmith.options import Options
from tunesmith_hookspecs import Choice, Problem

log = logging.getLogger(__name__)


def prune(problem: Problem, choices: Sequence[Choice], options: Options, device: torch.device) -> list[Choice]:
    """The choices worth benchmarking, in their given order: ATen's, and the ``options.prune``
    others with the lowest estimates. Every choice when ``prune`` is unset or the device has no
    profile (the CPU). Counts ``choices_pruned``."""
    ranked = [i for i, c in enumerate(choices) if c.spec.backend != hooks.BASELINE_BACKEND]
    if options.prune is None or len(ranked) <= options.prune:
        return list(choices)
    profile = hooks.device_info(device, options)
    if profile is None:
        log.debug("no device profile for %s: benchmarking all %d choices", device, len(choices))
        return list(choices)
    floor = problem_cost(problem, profile).ms
    estimates = {}
    for i in ranked:
        ms = hooks.estimate_runtime(choices[i], profile, options)
        estimates[i] = floor if ms is None else ms
    kept = set(sorted(ranked, key=lambda i: (estimates[i], i))[: options.prune])
    survivors = [c for i, c in enumerate(choices) if i in kept or i not in estimates]
    bump("choices_pruned", len(choices) - len(survivors))
    log.debug("pruned %d of %d choices by the cost model", len(choices) - len(survivors), len(choices))
    return survivors
