"""Pruning before benchmarking: rank a Problem's choices by the cost model, keep the best few.

Of more than ``prune`` modelled choices, at most ``prune`` are kept, and none whose estimate is
more than ``WINDOW`` above the best one: where the model sees a clear gap, benchmarking the far
side of it costs compile time (the largest part of a cold tune) and does not change the answer.
The window compares every backend's estimates alike, so it trusts each model's scale as much as
the ranking does. ATen's choices are always kept (they are the baseline every answer is measured
against), and so are the choices no plugin estimates: a backend without a model is benchmarked
rather than dropped. Neither counts against ``prune``. Where ATen estimates its own choices, no
choice estimated more than ``BASELINE_CEILING`` times ATen's best is kept either (any backend's:
ATen is timed anyway, and the models are not that far off). A device profile or roofline that
fails turns pruning off for that Problem (logged): the cost model orders work, it must not stop it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

import torch

from tunesmith import hooks
from tunesmith.config import Options
from tunesmith.counting import bump
from tunesmith_hookspecs import Choice

log = logging.getLogger(__name__)
BASELINE = hooks.BASELINE_BACKEND

#: how far above the best estimate a choice may be estimated and still be benchmarked (a fraction).
#: Replayed on the H100's exhaustive tunes of the GEMM set, 10% leaves out a quarter of the
#: choices and no case's best (``benchmarks/cost_model.py replay``; prune_replay_*.json, benchmarks/README.md).
WINDOW = 0.10

#: how many times ATen's best estimate a choice may be estimated and still be benchmarked. On the
#: GEMM set (H100-SXM preset), ATen's estimate is 0.5 to 1.2x its measured time on the H100 and
#: the best Triton config's estimate 0.4 to 2.1x ATen's; the ceiling drops every Triton choice of
#: float32 (4.8x; measured 3.8x slower) and odd_1000 (2.1x; measured 1.2x slower) alone
#: (``benchmarks/results/cost_model_h100.json``).
BASELINE_CEILING = 2.0

K = TypeVar("K")


def lowest(
    estimates: Mapping[K, float], count: int, window: float | None = WINDOW, ceiling: float = math.inf
) -> set[K]:
    """The ``count`` keys of lowest estimate (ties: the earlier key), less any more than ``window``
    above the lowest (None: no window) or above ``ceiling``."""
    order = sorted(estimates, key=estimates.__getitem__)  # stable: ties keep their order
    best = estimates[order[0]] if order else 0.0
    bound = best * (1 + window) if window is not None and best > 0 else math.inf
    return {k for k in order[:count] if estimates[k] <= min(bound, ceiling)}


def baseline_ceiling(baseline_estimates: Sequence[float | None]) -> float:
    """``BASELINE_CEILING`` times the best of ATen's estimates (no ceiling without one)."""
    known = [ms for ms in baseline_estimates if ms is not None and ms > 0]
    return BASELINE_CEILING * min(known) if known else math.inf


def prune(choices: Sequence[Choice], options: Options, device: torch.device) -> list[Choice]:
    """The choices worth benchmarking, in their given order: ATen's, those without an estimate,
    and of the others the ``options.prune`` with the lowest estimates, less any beyond ``WINDOW``
    of the lowest or beyond ``BASELINE_CEILING`` times ATen's best. Every choice when ``prune`` is
    unset or the device has no profile (the CPU). Counts ``choices_pruned``."""
    ranked = [i for i, c in enumerate(choices) if c.spec.backend != BASELINE]
    if options.prune is None or len(ranked) <= options.prune:
        return list(choices)
    try:
        profile = hooks.device_info(device, options)
    except Exception as exc:  # noqa: BLE001 - see the module docstring
        log.warning("no device profile for %s (%s): benchmarking every choice", device, exc)
        return list(choices)
    if profile is None:
        log.debug("no device profile for %s: benchmarking all %d choices", device, len(choices))
        return list(choices)
    estimates = {}
    for i in ranked:
        ms = hooks.estimate_runtime(choices[i], profile, options)
        if ms is not None:
            estimates[i] = ms
    baseline = [hooks.estimate_runtime(c, profile, options) for c in choices if c.spec.backend == BASELINE]
    kept = lowest(estimates, options.prune, ceiling=baseline_ceiling(baseline))
    survivors = [c for i, c in enumerate(choices) if i in kept or i not in estimates]
    bump("choices_pruned", len(choices) - len(survivors))
    log.debug("pruned %d of %d choices by the cost model", len(choices) - len(survivors), len(choices))
    return survivors
