"""The roofline: a kernel takes at least its FLOPs over the peak and its bytes over the bandwidth."""

from __future__ import annotations

import attrs

from tunesmith import attention
from tunesmith.ops import tf32_allowed
from tunesmith.problem import flops, torch_dtype
from tunesmith_hookspecs import DeviceInfo, Problem, TensorMeta


@attrs.frozen
class Cost:
    """What a piece of work needs, and the time the roofline gives it on one device."""

    flops: int
    bytes: int
    ms: float
    bound: str  #: "compute" or "memory" (whichever floor is higher), "none" for free work


def peak_flops(profile: DeviceInfo, dtype: str) -> float:
    """The profile's peak for ``dtype`` (a dtype name, or ``tf32``); the float32 peak for a dtype
    it does not list, since that is the slowest any GEMM unit runs."""
    peaks = dict(profile.peak_flops)
    value = peaks.get(dtype) or peaks.get("float32") or max(peaks.values(), default=0.0)
    if not value:
        raise ValueError(f"device profile {profile.name!r} lists no peak FLOP/s")
    return float(value)


def roofline(flop_count: int, byte_count: int, profile: DeviceInfo, dtype: str) -> Cost:
    """Milliseconds at the higher of the compute floor and the memory floor."""
    compute = flop_count / peak_flops(profile, dtype) if flop_count else 0.0
    memory = byte_count / profile.memory_bandwidth if byte_count else 0.0
    if not compute and not memory:
        return Cost(flop_count, byte_count, 0.0, "none")
    return Cost(flop_count, byte_count, max(compute, memory) * 1e3, "compute" if compute >= memory else "memory")


def math_dtype(problem: Problem) -> str:
    """The peak a Problem's op runs at: its input dtype, or ``tf32`` for float32 where allowed."""
    dtype = problem.inputs[0].dtype
    return "tf32" if dtype == "float32" and tf32_allowed(problem) else dtype


def meta_bytes(meta: TensorMeta) -> int:
    """Bytes a tensor of this shape and dtype holds."""
    return meta.numel * torch_dtype(meta.dtype).itemsize


def problem_bytes(problem: Problem) -> int:
    """Bytes a fused kernel must move at least: every input (epilogue tensors included) once,
    and the output once (attention: :func:`tunesmith.attention.min_bytes`)."""
    if problem.op == attention.OP:
        return attention.min_bytes(problem)
    return sum(meta_bytes(m) for m in problem.inputs) + meta_bytes(problem.output)


def problem_cost(problem: Problem, profile: DeviceInfo) -> Cost:
    """The roofline of a whole Problem (op and epilogue in one kernel) on ``profile``."""
    return roofline(flops(problem), problem_bytes(problem), profile, math_dtype(problem))
