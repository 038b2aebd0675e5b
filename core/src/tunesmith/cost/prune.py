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

Where the models are unsure of a GEMM (``unsure``: a dimension not a multiple of ``ALIGNED``,
a reduction of ``SMALL_K`` or less, or sizes ``FAR`` outside those the constants were set on),
the kept set widens: ``UNSURE_PRUNE`` times ``prune`` choices within ``UNSURE_WINDOW`` of the
best, and each modelled backend's ``UNSURE_FLOOR`` best whatever the window, the count and the
ceiling say, so that no backend is dropped whole on a model's word alone.
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
from tunesmith_hookspecs import Choice, DeviceInfo, Problem

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

#: a dimension (M, N, K; a convolution's pixels and channels) that is not a multiple of this many
#: elements makes a Problem unsure: every dimension of the GEMM set is a multiple of 8 (odd_1000's
#: too), and odd ones defeat vector loads, TMA and cuBLAS's fast kernels alike (an fp16 GEMM of
#: odd M, N and K about 500, on which Inductor's Triton kernel beat cuBLAS by 28%, had every
#: Triton choice dropped by the ceiling)
ALIGNED = 8
#: a reduction this long or shorter makes a Problem unsure: a few K steps are all prologue and
#: epilogue, which the models price least well (on a bmm of ~100 heads with K 64 Inductor's Triton
#: kernel beat cuBLAS by 8%, and the best Triton config pruning kept ran 18% slower than cuBLAS)
SMALL_K = 128
#: the output elements (batch x M x N) and the K of the GEMM set the constants were set on
#: (``benchmarks/gemm_shapes.json``: decode_m16 to llama70b_qkv_prefill, 64 to 11008)
FITTED_OUTPUT, FITTED_K = (16 * 4096, 8192 * 10240), (64, 11008)
#: how many times outside those ranges a Problem is far from them, and unsure
FAR = 4
#: where unsure: this many times ``prune`` choices are kept, within this window of the best, and
#: each modelled backend's best this many (at most ``prune``) whatever else says
UNSURE_PRUNE, UNSURE_WINDOW, UNSURE_FLOOR = 2, 0.5, 3
#: ops whose ceiling has measured evidence behind it wherever they are: every convolution of
#: ResNet-50 (bf16, channels-last, batch 32; the stem's 3 input channels and the 1 x 1 convs of 64
#: included) chose cuDNN over every kept Triton config in both full model runs (H100 and H200,
#: benchmarks/results/models_*.json), and widening would add Triton compiles to its cold start
SURE_OPS = frozenset({"conv"})

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


def gemm_shape(problem: Problem) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(output elements, the dimensions whose alignment counts, the reduction lengths) of a
    Problem's GEMM: M, N and each K; a convolution's as an implicit GEMM (pixels of every image,
    output channels, input channels; the reduction runs over the channels and the filter taps)."""
    ins, out = problem.inputs, problem.output
    if problem.op == "conv":
        images, out_channels, oh, ow = out.shape
        _, in_channels, kh, kw = ins[1].shape
        return out.numel, (images * oh * ow, out_channels, in_channels), (in_channels * kh * kw,)
    first = 1 if problem.op in ("addmm", "baddbmm") else 0
    m, n = out.shape[-2], out.shape[-1]
    ks = [ins[first].shape[-1]]
    if problem.op == "mm_plus_mm":
        ks.append(ins[2].shape[-1])
    return out.numel, (m, n, *ks), tuple(ks)


def unsure(problem: Problem) -> list[str]:
    """Why the cost models are unsure of ``problem`` (nothing: they are not): dimensions not a
    multiple of ``ALIGNED``, a reduction of ``SMALL_K`` or less, sizes ``FAR`` from the fitted;
    never of ``SURE_OPS``."""
    if problem.op in SURE_OPS:
        return []
    try:
        outputs, aligned, ks = gemm_shape(problem)
    except (IndexError, ValueError):  # an op this does not know the GEMM of
        return []
    why = []
    if any(d % ALIGNED for d in aligned):
        why.append(f"a dimension of {aligned} is not a multiple of {ALIGNED}")
    if min(ks) <= SMALL_K:
        why.append(f"K of {min(ks)} is {SMALL_K} or less")
    if not FITTED_OUTPUT[0] / FAR <= outputs <= FITTED_OUTPUT[1] * FAR or max(ks) > FITTED_K[1] * FAR:
        why.append(f"{outputs} outputs and K {max(ks)} are far from the shapes the models were fitted on")
    return why


def keep(
    estimates: Mapping[K, float], backends: Mapping[K, str], count: int, ceiling: float, sure: bool = True
) -> set[K]:
    """The keys pruning keeps of these estimates (each of a choice of ``backends[key]``): the
    ``count`` lowest within ``WINDOW`` and under ``ceiling`` where the models are ``sure``; else
    ``UNSURE_PRUNE`` times as many within ``UNSURE_WINDOW``, and each backend's
    ``UNSURE_FLOOR`` lowest (at most ``count``) whatever the window, count and ceiling say."""
    if sure:
        return lowest(estimates, count, WINDOW, ceiling)
    kept = lowest(estimates, UNSURE_PRUNE * count, UNSURE_WINDOW, ceiling)
    for backend in dict.fromkeys(backends[k] for k in estimates):
        own = {k: ms for k, ms in estimates.items() if backends[k] == backend}
        kept |= lowest(own, min(UNSURE_FLOOR, count), window=None)
    return kept


def prune(
    choices: Sequence[Choice], options: Options, device: torch.device, problem: Problem | None = None
) -> list[Choice]:
    """The choices worth benchmarking, in their given order: ATen's, those without an estimate,
    and of the others those ``keep`` keeps (the ``options.prune`` with the lowest estimates, less
    any beyond ``WINDOW`` of the lowest or beyond ``BASELINE_CEILING`` times ATen's best; more
    where the models are unsure of ``problem``). Every choice when ``prune`` is unset or the device
    has no profile (the CPU). Counts ``choices_pruned`` (and ``prune_unsure``)."""
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
    return kept_choices(choices, profile, options, problem)


def kept_choices(
    choices: Sequence[Choice], profile: DeviceInfo, options: Options, problem: Problem | None = None
) -> list[Choice]:
    """``prune``'s answer on a device ``profile`` (``options.prune`` set)."""
    assert options.prune is not None, "prune() returns every choice without a prune count"
    ranked = [i for i, c in enumerate(choices) if c.spec.backend != BASELINE]
    estimates = {}
    for i in ranked:
        ms = hooks.estimate_runtime(choices[i], profile, options)
        if ms is not None:
            estimates[i] = ms
    baseline = [hooks.estimate_runtime(c, profile, options) for c in choices if c.spec.backend == BASELINE]
    why = unsure(problem) if problem is not None else []
    if why:
        bump("prune_unsure")
        log.debug("the cost models are unsure of %s (%s): keeping more choices", problem.op, "; ".join(why))
    backends = {i: choices[i].spec.backend for i in estimates}
    kept = keep(estimates, backends, options.prune, baseline_ceiling(baseline), sure=not why)
    survivors = [c for i, c in enumerate(choices) if i in kept or i not in estimates]
    bump("choices_pruned", len(choices) - len(survivors))
    log.debug("pruned %d of %d choices by the cost model", len(choices) - len(survivors), len(choices))
    return survivors
