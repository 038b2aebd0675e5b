"""Turn ``tune(op, *tensors, **scalars)`` arguments into a validated Problem.

Every mistake a user can make here (wrong count or rank, mismatched shapes, an unsupported
dtype, tensors on different devices, an unknown scalar) ends in one ProblemError naming it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from tunesmith import attention
from tunesmith.errors import ProblemError
from tunesmith_hookspecs import EpilogueOp, Problem, TensorMeta

#: dtypes a GEMM may take; float64 is only a cast target and the reference's dtype.
GEMM_DTYPES = ("float32", "float16", "bfloat16")

#: (min, max) tensors per op, in the torch op's order, and the scalars each accepts.
_ARITY = {
    "mm": ((2, 2), ()),
    "addmm": ((3, 3), ("alpha", "beta")),
    "bmm": ((2, 2), ()),
    "baddbmm": ((3, 3), ("alpha", "beta")),
    "mm_plus_mm": ((4, 4), ()),
    "conv": ((2, 3), ("stride", "padding", "dilation", "groups")),
}
_TENSOR_NAMES = {
    "mm": ("mat1", "mat2"),
    "addmm": ("bias", "mat1", "mat2"),
    "bmm": ("batch1", "batch2"),
    "baddbmm": ("bias", "batch1", "batch2"),
    "mm_plus_mm": ("a", "b", "c", "d"),
    "conv": ("input", "weight", "bias"),
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def tensor_meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(t.shape), tuple(t.stride()), dtype_name(t.dtype), t.device.type, t.storage_offset())


def on_device(problem: Problem, device: str) -> Problem:
    """The same Problem with every tensor on device type ``device``: choices are offered and
    estimated from metadata alone, so a CPU can see what a GPU would be offered."""
    import attrs

    moved = [attrs.evolve(meta, device=device) for meta in problem.inputs]
    return attrs.evolve(problem, inputs=moved, output=attrs.evolve(problem.output, device=device))


def _storage_size(meta: TensorMeta) -> int:
    """Elements of the storage that ``meta``'s view reaches (its offset included)."""
    size = meta.storage_offset + 1 + sum((n - 1) * st for n, st in zip(meta.shape, meta.stride, strict=True))
    return size if 0 not in meta.shape else meta.storage_offset


def scratch_like(meta: TensorMeta, device: torch.device) -> torch.Tensor:
    """A tensor of ``meta``'s layout (offset, so alignment, included) on ``device`` with unset
    values: for a call that only compiles or loads a kernel, never for one whose result counts."""
    storage = torch.empty(_storage_size(meta), dtype=torch_dtype(meta.dtype), device=device)
    return storage.as_strided(meta.shape, meta.stride, meta.storage_offset)


def tensor_like(meta: TensorMeta, device: torch.device) -> torch.Tensor:
    """A tensor of ``meta``'s layout on ``device`` holding random values (never zeros)."""
    dtype = torch_dtype(meta.dtype)
    size = _storage_size(meta)
    if dtype == torch.bool:  # a mask: mostly attending, some keys masked out
        storage = torch.rand(size, device=device) < 0.75
    elif dtype.is_floating_point or dtype.is_complex:
        storage = torch.randn(size, device=device).to(dtype)
    else:
        storage = torch.randint(1, 8, (size,), device=device).to(dtype)
    return storage.as_strided(meta.shape, meta.stride, meta.storage_offset)


def _pair(name: str, value: Any, minimum: int) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value) if isinstance(value, list | tuple) else None
    if pair is None or len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise ProblemError(f"conv {name}={value!r}: expected an int or a pair of ints")
    if min(pair) < minimum:
        raise ProblemError(f"conv {name}={value!r}: must be >= {minimum}")
    return pair  # type: ignore[return-value]


def _check_rank(op: str, tensors: Sequence[torch.Tensor], ranks: Sequence[int]) -> None:
    for name, t, rank in zip(_TENSOR_NAMES[op], tensors, ranks, strict=False):
        if t.dim() != rank:
            raise ProblemError(f"{op}: {name} must be {rank}-D, got shape {tuple(t.shape)}")


def _check_inner(op: str, a: torch.Tensor, b: torch.Tensor, names: tuple[str, str]) -> None:
    if a.shape[-1] != b.shape[-2]:
        raise ProblemError(
            f"{op}: {names[0]} {tuple(a.shape)} and {names[1]} {tuple(b.shape)} cannot be multiplied"
            f" (inner sizes {a.shape[-1]} and {b.shape[-2]} differ)"
        )


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts to exactly ``target`` (plain Python: torch.broadcast_shapes
    imports torch's symbolic-shape machinery on first use, seconds on a cold process)."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


def broadcast_strides(meta: TensorMeta, shape: Sequence[int]) -> tuple[int, ...]:
    """``meta``'s strides once the tensor is broadcast to ``shape``: broadcast dimensions get stride 0."""
    pad = len(shape) - len(meta.shape)
    out = []
    for i, size in enumerate(shape):
        j = i - pad
        out.append(0 if j < 0 or (meta.shape[j] == 1 and size != 1) else meta.stride[j])
    return tuple(out)


def _check_broadcast(op: str, name: str, t: torch.Tensor, shape: tuple[int, ...]) -> None:
    if not broadcasts_to(tuple(t.shape), shape):
        raise ProblemError(f"{op}: {name} of shape {tuple(t.shape)} does not broadcast to the output {shape}")


def _output_shape(op: str, t: Sequence[torch.Tensor], scalars: dict[str, Any]) -> tuple[int, ...]:
    if op == "mm":
        _check_rank(op, t, (2, 2))
        _check_inner(op, t[0], t[1], ("mat1", "mat2"))
        return (t[0].shape[0], t[1].shape[1])
    if op == "addmm":
        _check_rank(op, t[1:], (2, 2))
        _check_inner(op, t[1], t[2], ("mat1", "mat2"))
        shape = (t[1].shape[0], t[2].shape[1])
        _check_broadcast(op, "bias", t[0], shape)
        return shape
    if op in ("bmm", "baddbmm"):
        a, b = t[-2:]
        if a.dim() != 3 or b.dim() != 3:
            raise ProblemError(f"{op}: batch1 and batch2 must be 3-D, got {tuple(a.shape)} and {tuple(b.shape)}")
        if a.shape[0] != b.shape[0]:
            raise ProblemError(f"{op}: batch sizes {a.shape[0]} and {b.shape[0]} differ")
        _check_inner(op, a, b, ("batch1", "batch2"))
        shape = (a.shape[0], a.shape[1], b.shape[2])
        if op == "baddbmm":
            _check_broadcast(op, "bias", t[0], shape)
        return shape
    if op == "mm_plus_mm":
        _check_rank(op, t, (2, 2, 2, 2))
        _check_inner(op, t[0], t[1], ("a", "b"))
        _check_inner(op, t[2], t[3], ("c", "d"))
        ab, cd = (t[0].shape[0], t[1].shape[1]), (t[2].shape[0], t[3].shape[1])
        if ab != cd:
            raise ProblemError(f"mm_plus_mm: a@b has shape {ab} but c@d has shape {cd}")
        return ab
    # conv2d
    x, w = t[0], t[1]
    _check_rank(op, t, (4, 4, 1))
    groups = scalars["groups"]
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ProblemError(
            f"conv: input channels {x.shape[1]} and weight {tuple(w.shape)} do not match groups={groups}"
        )
    if len(t) == 3 and t[2].shape[0] != w.shape[0]:
        raise ProblemError(f"conv: bias has {t[2].shape[0]} elements, the weight has {w.shape[0]} output channels")
    size = []
    for i in range(2):
        span = scalars["dilation"][i] * (w.shape[2 + i] - 1) + 1
        out = (x.shape[2 + i] + 2 * scalars["padding"][i] - span) // scalars["stride"][i] + 1
        if out < 0:
            raise ProblemError(
                f"conv: kernel {tuple(w.shape[2:])} is larger than the padded input {tuple(x.shape[2:])}"
            )
        size.append(out)
    return (x.shape[0], w.shape[0], *size)


def _scalars(op: str, given: dict[str, Any]) -> dict[str, Any]:
    allowed = _ARITY[op][1]
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        accepted = ", ".join(allowed) or "none"
        raise ProblemError(f"{op} takes no scalar {', '.join(unknown)} (accepted: {accepted})")
    if op == "conv":
        groups = given.get("groups", 1)
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
            raise ProblemError(f"conv groups={groups!r}: expected an int >= 1")
        return {
            "stride": _pair("stride", given.get("stride", 1), 1),
            "padding": _pair("padding", given.get("padding", 0), 0),
            "dilation": _pair("dilation", given.get("dilation", 1), 1),
            "groups": groups,
        }
    out = {}
    for name in allowed:
        value = given.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ProblemError(f"{op} {name}={value!r}: expected a number")
        out[name] = float(value)
    return out


_EPILOGUE_HELP = (
    "steps are names (relu, gelu, gelu_tanh, silu, sigmoid, tanh) or pairs "
    "('add' or 'mul', a tensor or a number) and ('cast', a dtype)"
)


def _split_step(item: Any) -> tuple[str, Any]:
    if isinstance(item, str):
        return item, None
    if isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str):
        return item[0], item[1]
    raise ProblemError(f"bad epilogue step {item!r}: {_EPILOGUE_HELP}")


def _epilogue(
    items: Sequence[Any] | None, out_shape: tuple[int, ...], device: torch.device, first_index: int
) -> tuple[list[EpilogueOp], list[torch.Tensor]]:
    """Parse ``["relu", ("add", t), ("mul", 0.5), ("cast", torch.float16)]``; tensors are appended."""
    steps: list[EpilogueOp] = []
    extra: list[torch.Tensor] = []
    for item in items or ():
        name, arg = _split_step(item)
        if name in ("add", "mul") and isinstance(arg, torch.Tensor):
            if arg.device != device:
                raise ProblemError(f"epilogue {name}: tensor on {arg.device}, the problem is on {device}")
            if not arg.dtype.is_floating_point:
                raise ProblemError(f"epilogue {name}: tensor dtype {arg.dtype} is not floating point")
            _dense("epilogue", f"{name} operand", arg)
            _check_broadcast("epilogue", f"{name} operand", arg, out_shape)
            step = dict(input=first_index + len(extra))
            extra.append(arg)
        elif name in ("add", "mul"):
            if isinstance(arg, bool) or not isinstance(arg, int | float):
                raise ProblemError(f"epilogue {name} needs a tensor or a number, got {arg!r}")
            step = dict(scalar=float(arg))
        elif name == "cast":
            step = dict(dtype=dtype_name(arg) if isinstance(arg, torch.dtype) else arg)
        elif arg is not None:
            raise ProblemError(f"epilogue {name!r} takes no operand, got {arg!r}")
        else:
            step = {}
        try:
            steps.append(EpilogueOp(name, **step))
        except ValueError as exc:
            raise ProblemError(f"bad epilogue step {item!r}: {exc}; {_EPILOGUE_HELP}") from None
    return steps, extra


def build_problem(
    op: str, tensors: Sequence[torch.Tensor], scalars: dict[str, Any], epilogue: Sequence[Any] | None = None
) -> tuple[Problem, list[torch.Tensor]]:
    """Validate the arguments of ``tune`` and return the Problem and its input tensors in order."""
    if op == attention.OP:
        if epilogue:
            raise ProblemError("attention takes no epilogue")
        return attention.build(tensors, scalars)
    if op not in _ARITY:
        raise ProblemError(f"unknown op {op!r}: use one of {', '.join([*_ARITY, attention.OP])}")
    lo, hi = _ARITY[op][0]
    if not lo <= len(tensors) <= hi or not all(isinstance(t, torch.Tensor) for t in tensors):
        names = ", ".join(_TENSOR_NAMES[op][:hi])
        count = f"{lo}" if lo == hi else f"{lo} or {hi}"
        raise ProblemError(f"{op} takes {count} tensors ({names}), got {[type(t).__name__ for t in tensors]}")
    for name, t in zip(_TENSOR_NAMES[op], tensors, strict=False):
        _dense(op, name, t)
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ProblemError(f"{op}: tensors are on different devices ({', '.join(sorted(map(str, devices)))})")
    dtypes = {dtype_name(t.dtype) for t in tensors}
    bad = sorted(dtypes - set(GEMM_DTYPES))
    if bad:
        raise ProblemError(f"{op}: unsupported dtype {', '.join(bad)}; use one of {', '.join(GEMM_DTYPES)}")
    if len(dtypes) > 1:
        raise ProblemError(f"{op}: tensors have different dtypes ({', '.join(sorted(dtypes))}); cast them to one")
    parsed = _scalars(op, scalars)
    shape = _output_shape(op, tensors, parsed)
    device = tensors[0].device
    steps, extra = _epilogue(epilogue, shape, device, len(tensors))
    out_dtype = dtype_name(tensors[0].dtype)
    for step in steps:
        out_dtype = step.dtype or out_dtype
    inputs = [*tensors, *extra]
    output = TensorMeta.contiguous(shape, out_dtype, device.type)
    if op == "conv":
        output = TensorMeta(output.shape, _conv_strides(tensors, shape), out_dtype, device.type)
    scalar_values = {k: list(v) if isinstance(v, tuple) else v for k, v in parsed.items()}
    problem = Problem(op, tuple(tensor_meta(t) for t in inputs), output, tuple(steps), scalar_values)
    return problem, inputs


def _dense(op: str, name: str, t: torch.Tensor) -> None:
    """Refuse a layout tunesmith does not tune (sparse, nested, ...): its strides would not say
    where its values are, and it would share a cache key with an unrelated dense tensor."""
    if t.layout != torch.strided or t.is_nested:
        layout = "nested" if t.is_nested else str(t.layout).removeprefix("torch.")
        raise ProblemError(f"{op}: {name} is a {layout} tensor; tunesmith tunes dense tensors (use .to_dense())")


def check_fits(problem: Problem, device: torch.device) -> None:
    """Refuse up front a Problem whose inputs (as timing makes them) and output need more memory
    than ``device`` has at all, rather than fail later in every choice's allocation."""
    metas = [*problem.inputs, problem.output]
    need = sum(_storage_size(m) * torch_dtype(m.dtype).itemsize for m in metas)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > total:
        raise ProblemError(
            f"{problem.op}: its inputs and output need {need / 2**30:.1f} GiB, more than {device.type}'s "
            f"{total / 2**30:.1f} GiB: it cannot be allocated"
        )


def _conv_strides(tensors: Sequence[torch.Tensor], shape: Sequence[int]) -> tuple[int, ...]:
    """The strides torch's conv (cuDNN's, oneDNN's) gives its output for these inputs:
    channels-last when the input or the weight is channels-last. A network's graph expects that
    layout, so every kernel writes it."""

    def last(t: torch.Tensor) -> bool:
        return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()

    out = torch.empty(shape, device="meta")
    if last(tensors[0]) or last(tensors[1]):
        out = out.contiguous(memory_format=torch.channels_last)
    return tuple(out.stride())


def same_layout(tensor: torch.Tensor, meta: TensorMeta) -> bool:
    """Whether ``tensor`` is laid out as ``meta`` says (strides of size-1 dimensions aside)."""
    return tuple(tensor.shape) == meta.shape and all(
        size == 1 or st == want for size, st, want in zip(meta.shape, tensor.stride(), meta.stride, strict=True)
    )


def is_empty(problem: Problem) -> bool:
    """True when the output or the reduction is empty: the answer needs no kernel tuning."""
    if problem.op == attention.OP:
        return attention.is_empty(problem)
    if problem.output.numel == 0:
        return True
    if problem.op == "conv":
        return problem.inputs[0].numel == 0 or problem.inputs[1].numel == 0
    return any(meta.numel == 0 for meta in problem.inputs[: problem.num_op_inputs])


def flops(problem: Problem) -> int:
    """Multiply-add FLOPs of the op (2 per MAC), for TFLOP/s columns."""
    if problem.op == attention.OP:
        return attention.flops(problem)
    ins = problem.inputs
    if problem.op in ("mm", "addmm"):
        mat1 = ins[0] if problem.op == "mm" else ins[1]
        return 2 * problem.output.numel * mat1.shape[1]
    if problem.op in ("bmm", "baddbmm"):
        return 2 * problem.output.numel * ins[problem.num_op_inputs - 2].shape[2]
    if problem.op == "mm_plus_mm":
        return 2 * problem.output.numel * (ins[0].shape[1] + ins[2].shape[1])
    w = ins[1]
    return 2 * problem.output.numel * w.shape[1] * w.shape[2] * w.shape[3]
