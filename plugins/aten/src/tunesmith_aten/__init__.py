"""tunesmith-aten: torch's own kernels (cuBLAS, cuDNN, the CPU's) as choices.

The always-correct baseline: every op on every device torch supports. Two choices where torch
offers two ways (mm_plus_mm as two mm and an add, or an mm fed into addmm).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import torch

from tunesmith.ops import finish, run
from tunesmith_hookspecs import Choice, ChoiceSpec, Problem, hookimpl

NAME = "aten"


def _mm_then_addmm(problem: Problem, t: Sequence[torch.Tensor]) -> torch.Tensor:
    return finish(problem, torch.addmm(torch.mm(t[0], t[1]), t[2], t[3]), t)


#: template -> the ops it serves and its implementation
TEMPLATES: dict[str, tuple[tuple[str, ...], Callable[[Problem, Sequence[torch.Tensor]], torch.Tensor]]] = {
    "eager": (("mm", "addmm", "bmm", "baddbmm", "mm_plus_mm", "conv"), run),
    "mm_then_addmm": (("mm_plus_mm",), _mm_then_addmm),
}


@attrs.frozen
class AtenChoice:
    """One torch-eager way to compute a Problem."""

    spec: ChoiceSpec
    problem: Problem

    def precompile(self) -> None:
        """Nothing to build: torch's kernels are already there."""

    def kernel(self) -> Callable[..., torch.Tensor]:
        fn, problem = TEMPLATES[self.spec.template][1], self.problem

        def call(*tensors: torch.Tensor) -> torch.Tensor:
            return fn(problem, tensors)

        return call


@hookimpl
def tunesmith_choices(problem: Problem, options: object) -> list[Choice]:
    return [
        AtenChoice(ChoiceSpec(NAME, template), problem) for template, (ops, _) in TEMPLATES.items() if problem.op in ops
    ]


@hookimpl
def tunesmith_rebuild_choice(spec: ChoiceSpec, problem: Problem) -> Choice | None:
    if spec.backend != NAME or spec.template not in TEMPLATES or problem.op not in TEMPLATES[spec.template][0]:
        return None
    return AtenChoice(spec, problem)


__all__ = ["AtenChoice", "tunesmith_choices", "tunesmith_rebuild_choice"]
