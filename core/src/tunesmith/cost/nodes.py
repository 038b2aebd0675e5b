"""What one node of a traced graph costs: its FLOPs, its bytes, and its roofline on a device.

- Views, allocations and bookkeeping (``view``, ``t``, ``expand``, ``empty``, ``getitem``, a
  collective's ``wait_tensor``, ...) cost nothing.
- The GEMM family (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``, ...), convolution
  of any dimension, transposed or not, and attention count ``2·MACs`` FLOPs against the peak of
  their dtype (``tf32`` for float32 where torch allows it), and read inputs and write outputs once.
- Collectives go to :mod:`tunesmith.cost.collectives`.
- Everything else (pointwise ops, reductions, copies, factories) costs the bytes of its tensor
  inputs and outputs against the memory bandwidth.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_leaves

try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # torch 2.11 has no optimization_hint: a backed size's node keeps its hint

    def optimization_hint(value: torch.SymInt) -> int:
        hint = value.node.hint
        return int(hint) if hint is not None else int(value)


from tunesmith.cost import collectives
from tunesmith.cost.roofline import Cost, roofline
from tunesmith_hookspecs import DeviceInfo

log = logging.getLogger(__name__)

FREE = Cost(0, 0, 0.0, "none")


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Ops that move no data: allocations without a fill, aliases ATen does not annotate, shape
#: queries, asserts.
_FREE_OPS = _names(
    "empty empty_like empty_strided new_empty new_empty_strided empty_permuted _unsafe_view lift_fresh "
    "sym_size sym_stride sym_numel sym_storage_offset sym_constrain_range sym_constrain_range_for_size "
    "_assert_async _assert_scalar _assert_tensor_metadata _functional_assert_async _functional_assert_scalar "
    "_local_scalar_dense _make_dep_token resize_ set_ record_stream"
)

#: Python-level names (``call_method`` targets, torch functions in a Dynamo graph) that are views
#: or shape queries.
_FREE_NAMES = _names(
    "view view_as reshape reshape_as permute transpose t expand expand_as unsqueeze squeeze flatten unflatten "
    "narrow select split chunk unbind movedim swapaxes detach size dim stride numel contiguous getitem getattr "
    "type_as"
)

#: GEMM-family ops to the position and name of the operand whose last dimension is the
#: reduction (K): FLOPs are ``2 · output elements · K`` (times the batch for ``addbmm``).
_GEMM = {
    **dict.fromkeys(("mm", "matmul", "bmm", "mv", "dot", "vdot", "_scaled_mm", "_int_mm"), (0, "self")),
    "linear": (0, "input"),
    "addmm": (1, "mat1"),
    "_addmm_activation": (1, "mat1"),
    "baddbmm": (1, "batch1"),
    "addbmm": (1, "batch1"),
    "addmv": (1, "mat"),
}

#: Convolutions to (position of ``transposed`` in the arguments, or a fixed value).
_CONV: dict[str, int | bool] = {
    "convolution": 6,
    "_convolution": 6,
    "convolution_overrideable": 6,
    "conv1d": False,
    "conv2d": False,
    "conv3d": False,
    "cudnn_convolution": False,
    "conv_transpose1d": True,
    "conv_transpose2d": True,
    "conv_transpose3d": True,
    "cudnn_convolution_transpose": True,
}

_ATTENTION = _names(
    "scaled_dot_product_attention _scaled_dot_product_attention_math _scaled_dot_product_flash_attention "
    "_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_efficient_attention "
    "_scaled_dot_product_cudnn_attention"
)
#: A backward pass of attention recomputes the scores: 2.5 times the forward's FLOPs.
_ATTENTION_BACKWARD = 2.5


def op_name(node: torch.fx.Node) -> str:
    """A readable name of what ``node`` calls: ``aten.mm.default``, ``operator.getitem``, ``relu``."""
    target = node.target
    if node.op == "call_module":
        try:
            sub = node.graph.owning_module.get_submodule(str(target))  # type: ignore[union-attr]
        except AttributeError:
            return str(target)
        return f"{target} ({type(sub).__name__})"
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{module}.{name}" if module and module != "builtins" else name


def _base_name(node: torch.fx.Node) -> str:
    """The op's short name without namespace or overload (``mm`` for ``aten.mm.default``)."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._opname
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[-1]
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", "") or ""


def _meta(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return value.meta.get("val", value.meta.get("example_value"))
    return value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors recorded for ``value``: a Node, a constant, or lists of them."""
    for leaf in tree_leaves(value, is_leaf=lambda x: isinstance(x, torch.fx.Node)):
        for item in tree_leaves(_meta(leaf)):
            if isinstance(item, torch.Tensor):
                yield item


def _tensor(value: Any) -> torch.Tensor | None:
    return next(_tensors(value), None)


def _int(value: int | torch.SymInt) -> int:
    """A size as an int; a symbolic size by its hint, adding no guard."""
    return value if isinstance(value, int) else optimization_hint(value)


def _numel(t: torch.Tensor) -> int:
    return _int(t.numel())


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(_int(n) for n in t.shape)


def _stride(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(_int(n) for n in t.stride())


def footprint(t: torch.Tensor) -> int:
    """Bytes of memory a tensor covers: its elements, or fewer where strides repeat them (an
    ``expand``ed tensor is read once)."""
    numel = _numel(t)
    if numel == 0:
        return 0
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(_shape(t), _stride(t), strict=True))
    return min(numel, span) * t.element_size()


def _is_free(node: torch.fx.Node, name: str) -> bool:
    """Whether a node moves no data: not an op, a view or allocation of ATen, a Python-level view,
    or Python arithmetic on sizes (no tensor comes out)."""
    target = node.target
    if node.op not in ("call_function", "call_method", "call_module"):
        return True
    if isinstance(target, torch._ops.OpOverload):
        returns = target._schema.returns
        view = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        return view or name in _FREE_OPS
    if name in _FREE_NAMES or name in _FREE_OPS:
        return True
    return _has_meta(node) and _tensor(node) is None


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if index < len(node.args) else default


def math_dtype(t: torch.Tensor, *, conv: bool = False) -> str:
    """The profile key of the peak a matmul or convolution on ``t``'s dtype runs at: its dtype
    name, ``float8`` for any float8, ``tf32`` for float32 where torch allows TF32 (for matmuls the
    float32 matmul precision, for convolutions ``torch.backends.cudnn.allow_tf32``)."""
    name = str(t.dtype).removeprefix("torch.")
    if name.startswith("float8"):
        return "float8"
    if name == "float32":
        allowed = torch.backends.cudnn.allow_tf32 if conv else torch.get_float32_matmul_precision() != "highest"
        return "tf32" if allowed else name
    return name


def _conv_flops(transposed: bool, inp: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> int:
    """2 × MACs: each output element (each input element when transposed) meets
    ``weight.shape[1:]`` weights (``C/groups`` channels times the kernel)."""
    return 2 * _numel(inp if transposed else out) * math.prod(_shape(weight)[1:])


def _flops(node: torch.fx.Node, name: str) -> tuple[int, str] | None:
    """(FLOPs, the dtype of the peak) of a GEMM, convolution or attention node; None otherwise."""
    out = _tensor(node)
    if out is None:
        return None
    if name in _GEMM:
        a = _tensor(_arg(node, *_GEMM[name]))
        if a is None or a.dim() == 0:
            return None
        shape = _shape(a)
        batches = shape[0] if name == "addbmm" else 1
        return 2 * _numel(out) * shape[-1] * batches, math_dtype(a)
    if name in _CONV:
        inp, weight = _tensor(_arg(node, 0, "input")), _tensor(_arg(node, 1, "weight"))
        where = _CONV[name]
        transposed = bool(_arg(node, where, "transposed", False)) if not isinstance(where, bool) else where
        if inp is None or weight is None:
            return None
        return _conv_flops(transposed, inp, weight, out), math_dtype(inp, conv=True)
    if name == "convolution_backward":
        grad_out, inp, weight = (_tensor(a) for a in node.args[:3])
        if grad_out is None or inp is None or weight is None:
            return None
        mask = _arg(node, 10, "output_mask", (True, True, True))
        passes = int(bool(mask[0])) + int(bool(mask[1]))  # the input's gradient, the weight's
        forward = _conv_flops(bool(_arg(node, 7, "transposed")), inp, weight, grad_out)
        return passes * forward, math_dtype(inp, conv=True)
    backward = name.endswith("_backward") and name.removesuffix("_backward") in _ATTENTION
    if name in _ATTENTION or backward:
        q, k, v = (_tensor(_arg(node, i + int(backward), name)) for i, name in enumerate(("query", "key", "value")))
        if q is None or k is None or v is None or q.dim() < 2:
            return None
        head, keys = _shape(q)[-1], _shape(k)[-2]
        forward = 2 * (_numel(q) // head) * keys * (head + _shape(v)[-1])  # 2·batch·heads·L·S·(E+Ev)
        return int(forward * (_ATTENTION_BACKWARD if backward else 1)), math_dtype(q)
    return None


def moved_bytes(node: torch.fx.Node) -> int:
    """Bytes a node reads and writes at least: each distinct tensor argument once, each output once."""
    seen: set[int] = set()
    total = 0
    for arg in (*node.args, *node.kwargs.values()):
        for t in _tensors(arg):
            if id(t) not in seen:
                seen.add(id(t))
                total += footprint(t)
    return total + sum(footprint(t) for t in _tensors(node))


def _has_meta(node: torch.fx.Node) -> bool:
    return "val" in node.meta or "example_value" in node.meta


def node_cost(node: torch.fx.Node, profile: DeviceInfo) -> Cost | None:
    """The cost of one node on ``profile``; None where the node cannot be modelled (no recorded
    shapes, a collective whose world size is unknown, no interconnect in the profile)."""
    name = _base_name(node)
    kind = collectives.collective_kind(node)
    if kind is not None:
        found = collectives.collective_cost(node, profile)
        if found is None:
            return None
        nbytes, ms = found
        return Cost(0, nbytes, ms, "network" if ms else "none")
    if _is_free(node, name):
        return FREE
    if not _has_meta(node):
        log.debug("no recorded shapes for %s: not estimated", node.name)
        return None
    nbytes = moved_bytes(node)
    counted = _flops(node, name)
    if counted is None:
        return roofline(0, nbytes, profile, "float32")
    flops, dtype = counted
    return roofline(flops, nbytes, profile, dtype)
