"""Attention choices: each of torch's scaled dot-product attention backends, forced one at a time.

``sdpa`` with ``backend="default"`` is torch's own pick; ``flash``, ``efficient``, ``cudnn`` and
``math`` force one backend (``torch.nn.attention.sdpa_kernel``). A forced backend that cannot run
the Problem says why at its precompile (torch's own checks, on scratch tensors of the Problem's
layout), so it is timed as failed with that reason. Each kernel is differentiable: traced into a
compiled graph, it brings the backend's forward and backward with it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import attrs
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tunesmith.plugin import scratch_like
from tunesmith_hookspecs import ChoiceSpec, Problem

OP = "attention"
TEMPLATE = "sdpa"
#: the backends offered per device type, in the order they are tried on a tie
BACKENDS = {
    "cuda": ("default", "flash", "cudnn", "efficient", "math"),
    "cpu": ("default", "math"),
}
_FORCED = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
_CHECKS = {
    "flash": "can_use_flash_attention",
    "efficient": "can_use_efficient_attention",
    "cudnn": "can_use_cudnn_attention",
}


def sdpa(backend: str, problem: Problem) -> Callable[..., torch.Tensor]:
    """``F.scaled_dot_product_attention`` with the Problem's scalars, through ``backend``."""
    causal, scale = bool(problem.scalar("is_causal")), float(problem.scalar("scale"))
    gqa = problem.inputs[0].shape[1] != problem.inputs[1].shape[1]
    forced = _FORCED.get(backend)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if forced is None:
            return F.scaled_dot_product_attention(q, k, v, mask, is_causal=causal, scale=scale, enable_gqa=gqa)
        with sdpa_kernel(forced):
            return F.scaled_dot_product_attention(q, k, v, mask, is_causal=causal, scale=scale, enable_gqa=gqa)

    return attention


def why_not(backend: str, problem: Problem, device: torch.device) -> str | None:
    """Why torch's ``backend`` cannot run the Problem on ``device`` (its own checks' words), or None."""
    check = getattr(torch.backends.cuda, _CHECKS.get(backend, ""), None)
    if device.type != "cuda" or check is None:
        return None
    grad = bool(problem.scalar("grad"))
    tensors = [scratch_like(m, device).requires_grad_(grad and i < 3) for i, m in enumerate(problem.inputs)]
    q, k, v = tensors[:3]
    mask = tensors[3] if len(tensors) > 3 else None
    params = torch.backends.cuda.SDPAParams(
        q, k, v, mask, 0.0, bool(problem.scalar("is_causal")), q.shape[1] != k.shape[1]
    )
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ok = check(params, True)
    if ok:
        return None
    reasons = [str(w.message).strip() for w in said] or ["torch's check refused it"]
    return f"torch's {backend} attention cannot run this problem: " + "; ".join(reasons)


@attrs.frozen
class AttentionChoice:
    """One of torch's attention backends for an attention Problem."""

    spec: ChoiceSpec
    problem: Problem

    def precompile(self) -> None:
        """Refuse, with torch's reason, a backend that cannot run the Problem here."""
        if self.problem.device != "cuda" or not torch.cuda.is_available():
            return
        why = why_not(self.spec.param("backend"), self.problem, torch.device("cuda", torch.cuda.current_device()))
        if why is not None:
            raise RuntimeError(why)

    def kernel(self) -> Callable[..., torch.Tensor]:
        return sdpa(self.spec.param("backend"), self.problem)


def choices(name: str, problem: Problem) -> list[AttentionChoice]:
    return [AttentionChoice(spec(name, b), problem) for b in BACKENDS.get(problem.device, ())]


def spec(name: str, backend: str) -> ChoiceSpec:
    return ChoiceSpec(name, TEMPLATE, {"backend": backend})


def rebuild(spec_: ChoiceSpec, problem: Problem) -> AttentionChoice | None:
    if spec_.template != TEMPLATE or spec_.param("backend") not in BACKENDS.get(problem.device, ()):
        return None
    return AttentionChoice(spec_, problem)
