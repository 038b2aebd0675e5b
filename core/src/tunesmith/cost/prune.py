"""Pruning before benchmarking: rank a Problem's choices by the cost model, keep the best few.

ATen's choices are always kept (they are the baseline every answer is measured against), and so
are the choices no plugin estimates: a backend without a model is benchmarked rather than
dropped. Neither counts against ``prune``. A device profile or roofline that fails turns pruning
off for that Problem (logged): the cost model orders work, it must not stop it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from tunesmith import hooks
from tunesmith.counters import bump
from tunesmith.options import Options
from tunesmith_hookspecs import Choice

log = logging.getLogger(__name__)


def prune(choices: Sequence[Choice], options: Options, device: torch.device) -> list[Choice]:
    """The choices worth benchmarking, in their given order: ATen's, those without an estimate,
    and the ``options.prune`` others with the lowest estimates. Every choice when ``prune`` is
    unset or the device has no profile (the CPU). Counts ``choices_pruned``."""
    ranked = [i for i, c in enumerate(choices) if c.spec.backend != hooks.BASELINE_BACKEND]
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
    kept = set(sorted(estimates, key=lambda i: (estimates[i], i))[: options.prune])
    survivors = [c for i, c in enumerate(choices) if i in kept or i not in estimates]
    bump("choices_pruned", len(choices) - len(survivors))
    log.debug("pruned %d of %d choices by the cost model", len(choices) - len(survivors), len(choices))
    return survivors
