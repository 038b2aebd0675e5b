"""The attention op family: scaled dot-product attention as a Problem.

Its tensors are q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), with Hq a multiple of Hkv
(grouped-query heads), and an optional mask that broadcasts to (B, Hq, L, S): boolean (True
attends) or additive, in q's dtype. Its scalars are ``is_causal`` (torch's top-left lower
triangle), ``scale`` (1/sqrt(E) where none is given) and ``grad``: a training problem, whose
kernel runs forward and backward. An attention kernel is a differentiable callable on
(q, k, v[, mask]) returning the output, as ``F.scaled_dot_product_attention`` is; for a training
problem what is timed and checked is :func:`step`: the output and the gradients of q, k and v for
one fixed random gradient of the output. Dropout is torch's own and never a Problem.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tunesmith.errors import ProblemError
from tunesmith_hookspecs import Problem, TensorMeta

OP = "attention"
TENSOR_NAMES = ("query", "key", "value", "attn_mask")
SCALARS = ("attn_mask", "is_causal", "scale", "grad")
DTYPES = ("float32", "float16", "bfloat16")
#: backward's matrix products (recompute the scores, dV, dP, dQ, dK) over forward's two
BACKWARD_WORK = 2.5


def build(tensors: Sequence[torch.Tensor], scalars: Mapping[str, Any]) -> tuple[Problem, list[torch.Tensor]]:
    """The Problem of ``F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal, scale)``;
    the mask may come as a fourth tensor or as ``attn_mask``."""
    from tunesmith.problem import broadcasts_to, dtype_name, tensor_meta  # (problem.py imports this module)

    unknown = sorted(set(scalars) - set(SCALARS))
    if unknown:
        extra = " (dropout stays torch's: tunesmith tunes attention without it)" if "dropout_p" in unknown else ""
        raise ProblemError(f"attention takes no argument {', '.join(unknown)}{extra} (accepted: {', '.join(SCALARS)})")
    mask = scalars.get("attn_mask")
    tensors = list(tensors)
    if mask is not None:
        if len(tensors) != 3:
            raise ProblemError("attention: give the mask once, as the fourth tensor or as attn_mask")
        tensors.append(mask)
    if not 3 <= len(tensors) <= 4 or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ProblemError(
            f"attention takes 3 or 4 tensors (query, key, value, attn_mask), got {[type(t).__name__ for t in tensors]}"
        )
    q, k, v = tensors[:3]
    for name, t in zip(TENSOR_NAMES, tensors, strict=False):
        if t.layout != torch.strided or t.is_nested:
            raise ProblemError(f"attention: {name} is not a dense tensor (use .to_dense())")
    for name, t in zip(TENSOR_NAMES, (q, k, v), strict=False):
        if t.dim() != 4:
            raise ProblemError(f"attention: {name} must be 4-D (batch, heads, length, head dim), got {tuple(t.shape)}")
    if len({t.device for t in tensors}) > 1:
        raise ProblemError(
            f"attention: tensors are on different devices ({', '.join(sorted({str(t.device) for t in tensors}))})"
        )
    dtypes = {dtype_name(t.dtype) for t in (q, k, v)}
    if len(dtypes) > 1 or not dtypes <= set(DTYPES):
        raise ProblemError(
            f"attention: query, key and value must share one dtype of {', '.join(DTYPES)}, got {sorted(dtypes)}"
        )
    (b, hq, length, e), (bk, hkv, s, ek), (bv, hv, sv, ev) = q.shape, k.shape, v.shape
    if not b == bk == bv:
        raise ProblemError(f"attention: batch sizes {b}, {bk} and {bv} differ")
    if hkv != hv or s != sv:
        raise ProblemError(f"attention: key {tuple(k.shape)} and value {tuple(v.shape)} differ in heads or length")
    if e != ek:
        raise ProblemError(f"attention: query head dim {e} and key head dim {ek} differ")
    if hkv == 0 or hq % hkv:
        raise ProblemError(f"attention: {hq} query heads are not a multiple of {hkv} key/value heads")
    causal = scalars.get("is_causal", False)
    if not isinstance(causal, bool):
        raise ProblemError(f"attention is_causal={causal!r}: expected True or False")
    scores = (b, hq, length, s)
    if len(tensors) == 4:
        mask = tensors[3]
        if causal:
            raise ProblemError("attention: give either attn_mask or is_causal=True, not both (as torch)")
        if mask.dtype != torch.bool and mask.dtype != q.dtype:
            raise ProblemError(f"attention: attn_mask must be bool or {q.dtype} (the query's dtype), got {mask.dtype}")
        if not broadcasts_to(tuple(mask.shape), scores):
            raise ProblemError(f"attention: attn_mask of shape {tuple(mask.shape)} does not broadcast to {scores}")
        if mask.requires_grad and torch.is_grad_enabled() and scalars.get("grad") is not False:
            raise ProblemError("attention: a mask that needs its own gradient is not tuned (torch computes it)")
        if mask.dim() < 4:  # kernels read four strides: the leading dimensions it broadcasts over come as size 1
            tensors[3] = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    scale = scalars.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(e) if e else 1.0
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise ProblemError(f"attention scale={scale!r}: expected a finite number")
    grad = scalars.get("grad")
    grad = any(t.requires_grad for t in (q, k, v)) if grad is None else grad
    if not isinstance(grad, bool):
        raise ProblemError(f"attention grad={grad!r}: expected True or False")
    output = TensorMeta.contiguous((b, hq, length, ev), dtype_name(q.dtype), q.device.type)
    values = {"is_causal": causal, "scale": float(scale), "grad": grad}
    return Problem(OP, tuple(tensor_meta(t) for t in tensors), output, (), values), tensors


# --- semantics ---


def compute(scalars: Mapping[str, Any], tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The forward, with torch's own kernels (fake tensors work too)."""
    q, k, v = tensors[:3]
    mask = tensors[3] if len(tensors) > 3 else None
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=bool(scalars.get("is_causal", False)),
        scale=scalars.get("scale"),
        enable_gqa=q.shape[1] != k.shape[1],
    )


@functools.lru_cache(maxsize=8)
def _output_grad_cpu(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0x5D9A), dtype=torch.float64)


_grads_on_device: dict[tuple[Any, ...], torch.Tensor] = {}


def _dims_order(q: torch.Tensor) -> list[int]:
    """q's dims 0 to 2 from outermost to innermost in memory (ties keep dim order), then 3."""
    return [*sorted(range(3), key=lambda d: -q.stride(d)), 3]


def output_like(q: torch.Tensor, dv: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An empty (B, Hq, L, dv) attention output whose batch, head and row dims lie in memory in
    the order of q's strides, as torch's fused kernels lay theirs out: a model that made q by
    transposing (B, L, H, D) to (B, H, L, D) transposes the output back for free."""
    return torch.empty_permuted((*q.shape[:3], dv), _dims_order(q), dtype=dtype or q.dtype, device=q.device)


def output_grad(out: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The gradient of the output that every training check uses: random (never zeros), the same
    values on every device and in every process, made once per shape, dtype, device and layout.
    It is laid out as :func:`output_like`, as a model that transposes q from (B, L, H, D) and the
    output back hands it: a fused backward timed on another layout can run slower than in the
    model (cuDNN's did on GPT-2)."""
    key = (tuple(out.shape), out.dtype, out.device, tuple(_dims_order(q)))
    grad = _grads_on_device.get(key)
    if grad is None:
        if len(_grads_on_device) >= 8:
            _grads_on_device.clear()
        grad = output_like(q, out.shape[3], out.dtype).copy_(_output_grad_cpu(tuple(out.shape)))
        _grads_on_device[key] = grad
    return grad


def step(problem: Problem, kernel: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    """What is timed and checked of ``kernel``: itself, or for a training problem its forward and
    backward, returning (out, dq, dk, dv)."""
    if not problem.scalar("grad", False):
        return kernel

    def forward_backward(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves = [t.detach().requires_grad_() for t in tensors[:3]]
        with torch.enable_grad():
            out = kernel(*leaves, *tensors[3:])
            grads = torch.autograd.grad(out, leaves, output_grad(out, leaves[0]))
        return (out.detach(), *grads)

    return forward_backward


#: score elements a reference slice holds at most (float64: 256 MiB): a 4k-token Llama prefill's
#: scores for its 32 heads at once take 4 GiB of the model's GPU, more with softmax and gradients
REFERENCE_CHUNK = 1 << 25


def reference(
    problem: Problem, tensors: Sequence[torch.Tensor], *, chunk: int = REFERENCE_CHUNK
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The float64 result (with the gradients, for a training problem), on the CPU. It is computed
    on the problem's GPU where it has one (a 4k-token prefill is 275 GFLOP), over slices of batch
    and query heads of at most ``chunk`` scores each (or one head's, where that is more)."""
    device = tensors[0].device if tensors[0].is_cuda else torch.device("cpu")
    q, k, v, *mask = (t.detach().to(device, torch.float64) if t.is_floating_point() else t.detach() for t in tensors)
    scalars = dict(problem.scalars)
    train = bool(problem.scalar("grad", False))
    b, hq, length, _ = q.shape
    group, s = hq // k.shape[1], k.shape[2]  # query heads a key head serves
    out = q.new_empty((b, hq, length, v.shape[3]))
    grad = _output_grad_cpu(tuple(out.shape)).to(device) if train else None
    dq, dk, dv = (torch.zeros_like(t) if train else None for t in (q, k, v))
    for batches, heads in _reference_slices(b, hq, group, max(1, chunk // max(1, length * s))):
        kv = slice(heads.start // group, (heads.stop - 1) // group + 1)
        part = [q[batches, heads], k[batches, kv], v[batches, kv]]
        if mask:  # a mask's dimensions of size 1 broadcast: only the others are sliced
            m = mask[0]
            part.append(m[batches if m.shape[0] > 1 else slice(None), heads if m.shape[1] > 1 else slice(None)])
        if not train:
            with torch.no_grad():
                out[batches, heads] = compute(scalars, part)
            continue
        leaves = [t.requires_grad_() for t in part[:3]]
        with torch.enable_grad():
            result = compute(scalars, [*leaves, *part[3:]])
            gq, gk, gv = torch.autograd.grad(result, leaves, grad[batches, heads])  # type: ignore[index]
        out[batches, heads] = result.detach()
        dq[batches, heads] = gq  # type: ignore[index]
        dk[batches, kv] += gk  # type: ignore[index]  # query heads of one key head come in several slices
        dv[batches, kv] += gv  # type: ignore[index]
    results = (out, dq, dk, dv) if train else (out,)
    cpu = tuple(t.cpu() for t in results)  # type: ignore[union-attr]
    return cpu if train else cpu[0]


def _reference_slices(batch: int, heads: int, group: int, pairs: int) -> list[tuple[slice, slice]]:
    """(batch, query heads) slices covering all, each of at most ``pairs`` (batch, head) pairs
    where it can be, whose heads are whole key-head groups or lie within one."""
    if pairs >= heads:
        step = pairs // heads
        return [(slice(i, min(i + step, batch)), slice(0, heads)) for i in range(0, batch, step)]
    width = (pairs // group) * group or max(d for d in range(1, group + 1) if group % d == 0 and d <= pairs)
    return [(slice(i, i + 1), slice(h, min(h + width, heads))) for i in range(batch) for h in range(0, heads, width)]


def tolerance(problem: Problem) -> float:
    """Relative-norm tolerance: that of the inputs' dtype (float32 on a GPU may use TF32)."""
    dtype = problem.inputs[0].dtype
    if dtype == "bfloat16":
        return 1e-2
    if dtype == "float16":
        return 5e-3
    tf32 = problem.device == "cuda" and torch.get_float32_matmul_precision() != "highest"
    return 1e-3 if tf32 else 1e-4


# --- size and work ---


def dims(problem: Problem) -> tuple[int, int, int, int, int, int, int]:
    """(B, Hq, Hkv, L, S, E, Ev)."""
    (b, hq, length, e), (_, hkv, s, _), ev = (
        problem.inputs[0].shape,
        problem.inputs[1].shape,
        problem.inputs[2].shape[3],
    )
    return b, hq, hkv, length, s, e, ev


def attended_pairs(problem: Problem) -> int:
    """Query-key pairs computed per head: all L x S, or under the causal mask those with j <= i."""
    _, _, _, length, s, _, _ = dims(problem)
    if not problem.scalar("is_causal", False):
        return length * s
    full = max(0, min(length, s))  # rows 0 .. min(L, S)-1 attend i+1 keys; later rows all S
    return full * (full + 1) // 2 + max(0, length - s) * s


def flops(problem: Problem) -> int:
    """FLOPs of the two products (2 per multiply-add), and the backward's five for training."""
    b, hq, _, _, _, e, ev = dims(problem)
    forward = 2 * b * hq * attended_pairs(problem) * (e + ev)
    return int(forward * (1 + BACKWARD_WORK)) if problem.scalar("grad", False) else forward


def min_bytes(problem: Problem) -> int:
    """Bytes a fused kernel must move: each input read once and the output written once; for
    training, the output's gradient read and the three gradients written too."""

    from tunesmith.cost.roofline import meta_bytes  # (which imports this module)

    moved = sum(meta_bytes(m) for m in problem.inputs) + meta_bytes(problem.output)
    if problem.scalar("grad", False):
        moved += 2 * meta_bytes(problem.output) + sum(meta_bytes(m) for m in problem.inputs[:3])
    return moved


def is_empty(problem: Problem) -> bool:
    """An empty output, or no keys to attend: computed eagerly, never tuned."""
    _, _, _, _, s, e, _ = dims(problem)
    return problem.output.numel == 0 or s == 0 or e == 0
