"""What a Problem means, in plain torch: the eager run, the float64 reference, the error measure.

Backends use :func:`run_op` and :func:`apply_epilogue` as their semantics; tests and ``verify``
compare any kernel's output with :func:`reference` through :func:`relative_error` and
:func:`tolerance`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tunesmith import attention
from tunesmith.problem import same_layout
from tunesmith_hookspecs import EpilogueOp, Problem

_UNARY = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def run_op(problem: Problem, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The op alone (no epilogue), with torch's own kernels, in the tensors' dtype; ``tensors``
    may include the epilogue's operands (a conv's optional bias is told apart by the count)."""
    return compute(problem.op, dict(problem.scalars), tensors[: problem.num_op_inputs])


def compute(op: str, scalars: Mapping[str, Any], tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """:func:`run_op` from the op's name and scalars (fake tensors work too)."""
    if op == attention.OP:
        return attention.compute(scalars, tensors)
    t = tensors
    alpha, beta = scalars.get("alpha", 1.0), scalars.get("beta", 1.0)
    if op == "mm":
        return torch.mm(t[0], t[1])
    if op == "addmm":
        return torch.addmm(t[0], t[1], t[2], beta=beta, alpha=alpha)
    if op == "bmm":
        return torch.bmm(t[0], t[1])
    if op == "baddbmm":
        return torch.baddbmm(t[0], t[1], t[2], beta=beta, alpha=alpha)
    if op == "mm_plus_mm":
        return torch.mm(t[0], t[1]) + torch.mm(t[2], t[3])
    return F.conv2d(
        t[0],
        t[1],
        t[2] if len(t) == 3 else None,
        stride=tuple(scalars["stride"]),
        padding=tuple(scalars["padding"]),
        dilation=tuple(scalars["dilation"]),
        groups=scalars["groups"],
    )


def apply_epilogue(
    problem: Problem, out: torch.Tensor, tensors: Sequence[torch.Tensor], exact: bool = False
) -> torch.Tensor:
    """Apply the epilogue chain to ``out``. The running dtype changes only at a ``cast`` step;
    with ``exact`` (the float64 reference) values stay float64 and a cast only rounds them."""
    return apply_steps(problem.epilogue, out, tensors, exact)


def apply_steps(
    steps: Sequence[EpilogueOp], out: torch.Tensor, tensors: Sequence[torch.Tensor], exact: bool = False
) -> torch.Tensor:
    """:func:`apply_epilogue` from the steps alone (fake tensors work too)."""
    for step in steps:
        if step.name in _UNARY:
            out = _UNARY[step.name](out)
        elif step.name == "cast":
            dtype = getattr(torch, step.dtype)
            out = out.to(dtype).to(torch.float64) if exact else out.to(dtype)
        else:
            operand = tensors[step.input].to(out.dtype) if step.input is not None else step.scalar
            out = out + operand if step.name == "add" else out * operand
    return out


def finish(problem: Problem, out: torch.Tensor, tensors: Sequence[torch.Tensor], done: int = 0) -> torch.Tensor:
    """Apply the epilogue to the op's result ``out``, past its first ``done`` steps (which a kernel
    applied itself); return the output in the Problem's layout and dtype (row-major, or for a
    conv, the layout torch's conv gives: channels-last from channels-last inputs)."""
    want = problem.output
    out = apply_steps(problem.epilogue[done:], out, tensors).to(getattr(torch, want.dtype))
    if same_layout(out, want):
        return out
    return torch.empty_strided(want.shape, want.stride, dtype=out.dtype, device=out.device).copy_(out)


def run(problem: Problem, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The eager result of the whole Problem, as a fresh tensor in the Problem's layout."""
    with torch.no_grad():
        return finish(problem, run_op(problem, tensors), tensors)


def reference(problem: Problem, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The float64 result on the CPU: what every kernel is checked against (for a training
    attention problem, the output and its inputs' gradients: :func:`measured`)."""
    if problem.op == attention.OP:
        return attention.reference(problem, tensors)
    wide = [t.detach().to("cpu", torch.float64) for t in tensors]
    with torch.no_grad():
        return apply_epilogue(problem, run_op(problem, wide), wide, exact=True)


def measured(problem: Problem, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """What timing and checks run of a kernel: the kernel itself, or for a training attention
    problem its forward and backward (:func:`tunesmith.attention.step`)."""
    return attention.step(problem, kernel) if problem.op == attention.OP else kernel


def relative_error(out: Any, ref: Any) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 over the reference's finite values; infinite when ``out`` is
    not a tensor of the reference's shape, or where its NaN and infinities are not the reference's
    (inputs holding them give some: those must match). Of a tuple of results (a training
    problem's output and gradients), the largest."""
    if isinstance(ref, tuple):
        if not isinstance(out, tuple) or len(out) != len(ref):
            return math.inf
        return max(relative_error(o, r) for o, r in zip(out, ref, strict=True))
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(ref.shape):
        return math.inf
    out = out.detach().to("cpu", torch.float64)
    finite = torch.isfinite(ref)
    if not finite.all():
        same = torch.where(torch.isnan(ref), torch.isnan(out), out == ref)  # an infinity by its sign
        if not same[~finite].all():
            return math.inf
        out, ref = out[finite], ref[finite]
    diff = out - ref
    if not torch.isfinite(diff).all():
        return math.inf
    scale = float(ref.norm())
    return float(diff.norm()) / scale if scale > 0 else float(diff.norm())


def tf32_allowed(problem: Problem) -> bool:
    """Whether torch may use TF32 for this float32 problem on a CUDA device."""
    if problem.device != "cuda":
        return False
    if problem.op == "conv":
        return bool(torch.backends.cudnn.allow_tf32)
    return torch.get_float32_matmul_precision() != "highest"


def tolerance(problem: Problem) -> float:
    """The relative-norm tolerance for the lowest precision the Problem passes through."""
    if problem.op == attention.OP:
        return attention.tolerance(problem)
    dtypes = {meta.dtype for meta in problem.inputs[: problem.num_op_inputs]}
    dtypes |= {step.dtype for step in problem.epilogue if step.dtype}
    if "bfloat16" in dtypes:
        return 1e-2
    if "float16" in dtypes:
        return 5e-3
    return 1e-3 if tf32_allowed(problem) else 1e-5
