"""tunesmith-aten: torch's own kernels (cuBLAS, cuDNN, the CPU's) as choices.

The always-correct baseline: every op on every device torch supports. More choices where torch
offers more ways: mm_plus_mm as two mm and an add, or an mm fed into addmm; on a GPU, addmm
followed by relu or tanh-GELU as one ``torch._addmm_activation`` call, which cuBLASLt can finish
in its epilogue. Attention: each of torch's scaled dot-product attention backends
(:mod:`tunesmith_aten.attention`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs
import torch

from tunesmith.plugin import finish, run, scratch_like
from tunesmith_aten import attention, cost
from tunesmith_aten.attention import AttentionChoice
from tunesmith_hookspecs import Choice, ChoiceSpec, DeviceInfo, Problem, hookimpl

NAME = "aten"

log = logging.getLogger(__name__)


def _mm_then_addmm(problem: Problem, t: Sequence[torch.Tensor]) -> torch.Tensor:
    return finish(problem, torch.addmm(torch.mm(t[0], t[1]), t[2], t[3]), t)


#: the first epilogue step ``torch._addmm_activation`` computes, to its ``use_gelu``. On CUDA torch
#: takes its GELU for the tanh form (never the erf ``gelu``); cuBLASLt does not document its
#: formula, so that one is offered only in half types, whose tolerance covers either form.
ACTIVATIONS = {"relu": False, "gelu_tanh": True}


def _fuses_activation(problem: Problem) -> bool:
    """An addmm on a GPU whose first epilogue step cuBLASLt applies in its epilogue: torch takes
    that path for beta 1, a contiguous bias of length N and M, K, N over 1 (elsewhere
    ``_addmm_activation`` is addmm and the step apart, which ``eager`` already is)."""
    if problem.op != "addmm" or problem.device != "cuda" or not problem.epilogue:
        return False
    bias, a, b = problem.inputs[:3]
    first = problem.epilogue[0].name
    return (
        first in ACTIVATIONS
        and (not ACTIVATIONS[first] or a.dtype in ("float16", "bfloat16"))
        and problem.scalar("beta", 1.0) == 1
        and bias.shape == (b.shape[1],)
        and bias.stride == (1,)
        and min(*a.shape, b.shape[1]) > 1
    )


def _addmm_activation(problem: Problem, t: Sequence[torch.Tensor]) -> torch.Tensor:
    alpha, beta = problem.scalar("alpha", 1.0), problem.scalar("beta", 1.0)
    use_gelu = ACTIVATIONS[problem.epilogue[0].name]
    return finish(problem, torch._addmm_activation(t[0], t[1], t[2], beta=beta, alpha=alpha, use_gelu=use_gelu), t, 1)


#: template -> whether it serves a Problem, and its implementation
TEMPLATES: dict[str, tuple[Callable[[Problem], bool], Callable[[Problem, Sequence[torch.Tensor]], torch.Tensor]]] = {
    "eager": (lambda p: p.op in ("mm", "addmm", "bmm", "baddbmm", "mm_plus_mm", "conv"), run),
    "mm_then_addmm": (lambda p: p.op == "mm_plus_mm", _mm_then_addmm),
    "addmm_activation": (_fuses_activation, _addmm_activation),
}


@attrs.frozen
class AtenChoice:
    """One torch-eager way to compute a Problem."""

    spec: ChoiceSpec
    problem: Problem

    def precompile(self) -> None:
        """Nothing to build, but on a GPU torch loads a library's kernel (cuBLAS's, cuDNN's) at
        its first call: one call on scratch tensors of the Problem's layout pays for that here,
        beside the other choices' compiles, instead of in the first timed call (best effort: a
        failure here is left to the real call)."""
        if self.problem.device != "cuda" or not torch.cuda.is_available() or torch.cuda.is_current_stream_capturing():
            return  # (a call made while a CUDA graph is captured would join the graph)
        device = torch.device("cuda", torch.cuda.current_device())
        try:
            with torch.no_grad():
                self.kernel()(*(scratch_like(m, device) for m in self.problem.inputs))
        except Exception as exc:  # noqa: BLE001 - only a head start: the real call will say what fails
            log.debug("ATen's warm-up call for %s failed: %s", self.problem.op, exc)

    def kernel(self) -> Callable[..., torch.Tensor]:
        fn, problem = TEMPLATES[self.spec.template][1], self.problem
        if self.spec.template == "eager" and (direct := _direct(problem)) is not None:
            return direct

        def call(*tensors: torch.Tensor) -> torch.Tensor:
            return fn(problem, tensors)

        return call


def _direct(problem: Problem) -> Callable[..., torch.Tensor] | None:
    """torch's own function, called with nothing around it, where the Problem is the op alone:
    a compiled graph calls the kernel once per GEMM per step, so every microsecond shows."""
    if problem.epilogue:
        return None
    alpha, beta = problem.scalar("alpha", 1.0), problem.scalar("beta", 1.0)
    if problem.op == "mm":
        return torch.mm
    if problem.op == "bmm":
        return torch.bmm
    if problem.op == "addmm":
        return lambda bias, a, b: torch.addmm(bias, a, b, beta=beta, alpha=alpha)
    if problem.op == "baddbmm":
        return lambda bias, a, b: torch.baddbmm(bias, a, b, beta=beta, alpha=alpha)
    return None  # mm_plus_mm and conv (whose output torch may lay out channels-last) go through run


@hookimpl
def tunesmith_choices(problem: Problem, options: object) -> list[Choice]:
    if problem.op == attention.OP:
        return list(attention.choices(NAME, problem))
    return [AtenChoice(ChoiceSpec(NAME, t), problem) for t, (serves, _) in TEMPLATES.items() if serves(problem)]


@hookimpl
def tunesmith_estimate_runtime(node: object, device: DeviceInfo) -> float | None:
    """ATen's choices by :mod:`tunesmith_aten.cost` (the kernels torch runs, at the roofline)."""
    if isinstance(node, attention.AttentionChoice):
        return cost.attention_ms(node.problem, node.spec.param("backend"), device)
    if not isinstance(node, AtenChoice):
        return None
    return cost.estimate_ms(node.problem, node.spec.template, device)


@hookimpl
def tunesmith_rebuild_choice(spec: ChoiceSpec, problem: Problem) -> Choice | None:
    if spec.backend == NAME and problem.op == attention.OP:
        return attention.rebuild(spec, problem)
    if spec.backend != NAME or spec.template not in TEMPLATES or not TEMPLATES[spec.template][0](problem):
        return None
    return AtenChoice(spec, problem)


__all__ = [
    "AtenChoice",
    "AttentionChoice",
    "tunesmith_choices",
    "tunesmith_estimate_runtime",
    "tunesmith_rebuild_choice",
]
