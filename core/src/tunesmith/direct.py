"""``tunesmith.tune(op, *tensors, **scalars)``: tune one problem directly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tunesmith import hooks, ops
from tunesmith.problem import build_problem, is_empty
from tunesmith.selection import Selection, select
from tunesmith.settings import current_options
from tunesmith_hookspecs import ChoiceSpec, SelectionReport

#: The spec of a problem with an empty output or reduction: computed eagerly, never tuned.
EMPTY_SPEC = ChoiceSpec("core", "empty")


def tune(
    op: str,
    *tensors: torch.Tensor,
    epilogue: Sequence[Any] | None = None,
    options: Mapping[str, Any] | None = None,
    **scalars: Any,
) -> Selection:
    """Pick the fastest kernel for ``op`` on tensors like these.

    :param op: mm, addmm, bmm, baddbmm, mm_plus_mm, conv (conv2d) or attention.
    :param tensors: in the torch op's order (addmm: bias, mat1, mat2; mm_plus_mm: a, b, c, d;
        conv: input, weight[, bias]; attention: query, key, value).
    :param epilogue: pointwise steps after the op, e.g. ``["relu", ("add", t), ("mul", 0.5),
        ("cast", torch.float16)]``.
    :param options: per-call settings, over every other layer.
    :param scalars: alpha and beta (addmm, baddbmm); stride, padding, dilation, groups (conv);
        attn_mask, is_causal, scale (attention, as ``F.scaled_dot_product_attention``) and grad
        (a training problem: forward and backward; by default, whether q, k or v requires grad).
    :raises ProblemError: the tensors do not form a valid problem.
    :raises NoValidChoicesError: no backend gave a choice that ran.
    """
    settings = current_options(options)
    problem, inputs = build_problem(op, tensors, scalars, epilogue)
    if is_empty(problem):
        report = SelectionReport(problem, problem.key(), EMPTY_SPEC, (), source="empty")
        hooks.selection_done(report, settings)
        return Selection(problem, EMPTY_SPEC, {}, lambda *t: ops.run(problem, t), False, report)
    with torch.no_grad():
        return select(problem, inputs, settings)
