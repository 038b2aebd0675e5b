"""Skipping a tune the cost model is sure ATen wins: ATen's choice is taken, nothing is benchmarked.

The rule (:func:`sure_aten`) fires where the models are sure of the Problem (``prune.unsure``
finds nothing), ATen and every other choice are estimated, and the best estimate that is not
ATen's is at least ``SURE_RATIO`` times ATen's best. It picks ATen's choice of lowest estimate
(ties: the earlier, ATen's ``eager``). Like pruning it needs a device profile, so on the CPU
nothing is skipped; ``skip_sure_aten`` off, or ``prune`` none (every choice benchmarked), turns
it off. A skip is kept in this process's memory only (docs/decisions.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TypeVar

import torch

from tunesmith import hooks
from tunesmith.config import Options
from tunesmith.cost.prune import unsure
from tunesmith_hookspecs import Choice, DeviceInfo, Problem

log = logging.getLogger(__name__)
BASELINE = hooks.BASELINE_BACKEND

#: the best non-ATen estimate over ATen's best at and above which ATen is sure to win. Fitted on
#: measured data outside the corpus's test split (``benchmarks/cost_model.py skip``: the corpus's
#: train rows and the GEMM set's H100 run, this checkout's models on the device's preset): among
#: the Problems the models are sure of, a non-ATen choice won by more than ``tie_tolerance`` at
#: ratios up to 1.106 (decode_m16: Triton 4.5% faster) and lost at every ratio from 1.376 up; the
#: threshold is the geometric middle of that gap (1.234), rounded down.
SURE_RATIO = 1.23

K = TypeVar("K")


def sure_aten(
    estimates: Mapping[K, float | None], backends: Mapping[K, str], why_unsure: Sequence[str] = ()
) -> K | None:
    """The key of the ATen choice to take without benchmarking (its lowest estimate; ties: the
    earlier key), or None: the models are unsure (``why_unsure``), a choice has no estimate,
    nothing but ATen is offered, or the best other estimate is under ``SURE_RATIO`` times ATen's."""
    if why_unsure or any(ms is None for ms in estimates.values()):
        return None
    known = {k: ms for k, ms in estimates.items() if ms is not None}
    aten = {k: ms for k, ms in known.items() if backends[k] == BASELINE}
    others = [ms for k, ms in known.items() if backends[k] != BASELINE]
    if not aten or not others:
        return None
    best = min(aten, key=aten.__getitem__)  # stable: ties keep their order
    return best if min(others) >= SURE_RATIO * aten[best] else None


def skips(options: Options) -> bool:
    """Whether the rule may fire under ``options``: ``skip_sure_aten`` on and ``prune`` set."""
    return bool(options.skip_sure_aten) and options.prune is not None


def skip_to_aten(choices: Sequence[Choice], options: Options, device: torch.device, problem: Problem) -> Choice | None:
    """ATen's choice to take without a tune where :func:`sure_aten` fires on the device's profile;
    None where it does not, where :func:`skips` says no, or without a profile."""
    if not skips(options):
        return None
    try:
        profile = hooks.device_info(device, options)
    except Exception as exc:  # noqa: BLE001 - the cost model orders work, it must not stop it
        log.warning("no device profile for %s (%s): not skipping", device, exc)
        return None
    return None if profile is None else sure_choice(choices, profile, options, problem)


def sure_choice(choices: Sequence[Choice], profile: DeviceInfo, options: Options, problem: Problem) -> Choice | None:
    """:func:`skip_to_aten`'s answer on a device ``profile``."""
    estimates = {i: hooks.estimate_runtime(c, profile, options) for i, c in enumerate(choices)}
    picked = sure_aten(estimates, {i: c.spec.backend for i, c in enumerate(choices)}, unsure(problem))
    return None if picked is None else choices[picked]
