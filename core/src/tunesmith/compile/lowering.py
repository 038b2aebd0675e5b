"""Lowering: GEMM-family ops of an ATen graph, with the pointwise chain after them, become calls
of ``tunesmith::gemm``.

Each node, last first, is offered to the plugins' lowerings (``tunesmith_lowerings``), then to
the built-in ones below; a :class:`LoweringMatch` names the op, its input nodes and its result
node. The chain of single-use pointwise ops after the result (relu, gelu, silu, sigmoid, tanh,
add, mul, dtype casts) joins it as the epilogue, as long as every step keeps the result's shape
and dtype rules. The chain is replaced by one call; nodes left without users are erased.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Sequence
from typing import Any

import attrs
import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from tunesmith.compile.dispatch import Recipe, gemm
from tunesmith.errors import ProblemError
from tunesmith.problem import GEMM_DTYPES, dtype_name
from tunesmith_hookspecs import DTYPES, EpilogueOp, LoweringMatch

log = logging.getLogger(__name__)
aten = torch.ops.aten


@attrs.frozen
class Lowered:
    """One replaced chain: its call node and recipe (the input tensors are the call's args)."""

    node: fx.Node
    recipe: str
    problem_op: str


# --- the built-in lowerings ---


def _kw(node: fx.Node, name: str, index: int, default: Any) -> Any:
    return node.kwargs.get(name, node.args[index] if len(node.args) > index else default)


class AtenLowering:
    """mm, addmm, bmm, baddbmm, ``mm + mm`` and 2-D convolution, as ATen spells them."""

    name = "aten"

    def match(self, node: fx.Node) -> LoweringMatch | None:
        target = node.target
        if target is aten.mm.default:
            return LoweringMatch("mm", node.args[:2], node)
        if target is aten.bmm.default:
            return LoweringMatch("bmm", node.args[:2], node)
        if target in (aten.addmm.default, aten.baddbmm.default):
            op = "addmm" if target is aten.addmm.default else "baddbmm"
            scalars = {"beta": _kw(node, "beta", 3, 1), "alpha": _kw(node, "alpha", 4, 1)}
            return LoweringMatch(op, node.args[:3], node, scalars)
        if target is aten.add.Tensor and node.kwargs.get("alpha", 1) == 1 and len(node.args) == 2:
            a, b = node.args
            mms = all(isinstance(x, fx.Node) and x.target is aten.mm.default and len(x.users) == 1 for x in (a, b))
            if mms and _same_shape(_val(a), _val(b)):  # not a broadcasting add
                return LoweringMatch("mm_plus_mm", (*a.args[:2], *b.args[:2]), node)
        if target is aten.convolution.default:
            x, w, bias, stride, padding, dilation, transposed, _, groups = node.args[:9]
            if transposed or len(stride) != 2:
                return None
            scalars = {"stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups}
            return LoweringMatch("conv", (x, w) if bias is None else (x, w, bias), node, scalars)
        return None


# --- the epilogue chain ---

_UNARY = {
    aten.relu.default: "relu",
    aten.silu.default: "silu",
    aten.sigmoid.default: "sigmoid",
    aten.tanh.default: "tanh",
}
_BINARY = {aten.add.Tensor: "add", aten.mul.Tensor: "mul", aten.add.Scalar: "add", aten.mul.Scalar: "mul"}
_CASTS = (torch.ops.prims.convert_element_type.default, aten._to_copy.default)


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dim() == b.dim() and all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape, strict=True))


def _step(user: fx.Node, tail: fx.Node, running: torch.dtype) -> tuple[EpilogueOp, fx.Node | None] | None:
    """The epilogue step that ``user`` applies to ``tail``, with its tensor operand; None if none."""
    out, val = _val(user), _val(tail)
    if not isinstance(out, torch.Tensor) or not _same_shape(out, val):
        return None
    if user.target in _UNARY and user.args[0] is tail and out.dtype == running:
        return EpilogueOp(_UNARY[user.target]), None
    if user.target is aten.gelu.default and user.args[0] is tail and out.dtype == running:
        name = {"none": "gelu", "tanh": "gelu_tanh"}.get(user.kwargs.get("approximate", "none"))
        return (EpilogueOp(name), None) if name else None
    if user.target in _BINARY and len(user.args) == 2 and user.kwargs.get("alpha", 1) == 1 and out.dtype == running:
        a, b = user.args
        other = b if a is tail else a if b is tail else None
        if other is None or other is tail:
            return None
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return EpilogueOp(_BINARY[user.target], scalar=float(other)), None
        operand = _val(other)
        if isinstance(operand, torch.Tensor) and operand.dtype.is_floating_point and operand.device == val.device:
            return EpilogueOp(_BINARY[user.target], input=-1), other
        return None
    if user.target in _CASTS and user.args[0] is tail:
        dtype = user.args[1] if user.target is not aten._to_copy.default else user.kwargs.get("dtype")
        extra = set(user.kwargs) - {"dtype", "layout", "device"}
        if isinstance(dtype, torch.dtype) and dtype_name(dtype) in DTYPES and not extra and out.device == val.device:
            return EpilogueOp("cast", dtype=dtype_name(dtype)), None
    return None


def _chain(root: fx.Node, dtype: torch.dtype) -> tuple[list[fx.Node], list[EpilogueOp], list[fx.Node]]:
    """The single-use pointwise nodes after ``root``, their steps and their tensor operands."""
    nodes: list[fx.Node] = []
    steps: list[EpilogueOp] = []
    operands: list[fx.Node] = []
    tail, running = root, dtype
    while len(tail.users) == 1:
        user = next(iter(tail.users))
        found = _step(user, tail, running)
        if found is None:
            break
        step, operand = found
        if operand is not None:
            operands.append(operand)
        steps.append(step)
        nodes.append(user)
        running = getattr(torch, step.dtype) if step.dtype else running
        tail = user
    return nodes, steps, operands


# --- the pass ---


def _lowerable(match: LoweringMatch) -> str | None:
    """Why the tensors of ``match`` cannot form a Problem (None when they can)."""
    vals = [_val(n) for n in match.inputs]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return "an input is not a tensor"
    dtypes = {dtype_name(v.dtype) for v in vals}
    if len(dtypes) != 1 or not dtypes <= set(GEMM_DTYPES):
        return f"dtypes {sorted(dtypes)}"
    if len({v.device for v in vals}) != 1:
        return "tensors on several devices"
    return None


def lower(gm: fx.GraphModule, lowerings: Sequence[Any], options_id: str) -> list[Lowered]:
    """Replace every GEMM-family chain of ``gm`` with a ``tunesmith::gemm`` call; returns them."""
    graph = gm.graph
    done: list[Lowered] = []
    gone: set[fx.Node] = set()
    for node in reversed(list(graph.nodes)):
        if node in gone or node.op != "call_function":
            continue
        match = next((m for lowering in lowerings if (m := lowering.match(node)) is not None), None)
        if match is None:
            continue
        why = _lowerable(match)
        if why is not None:
            log.debug("not lowering %s at %s: %s", match.op, node.name, why)
            continue
        nodes, steps, operands = _chain(match.root, _val(match.inputs[0]).dtype)
        n = len(match.inputs)
        numbered = []
        for step in steps:
            if step.input is not None:
                step = attrs.evolve(step, input=n + len([s for s in numbered if s.input is not None]))
            numbered.append(step)
        tail = nodes[-1] if nodes else match.root
        order = _order(_val(tail))
        if order is False:
            log.debug("not lowering %s at %s: its result's layout is not dense", match.op, node.name)
            continue
        recipe_of = Recipe(match.op, dict(match.scalars), tuple(numbered), n, options_id, order)
        vals = [_val(x) for x in (*match.inputs, *operands)]
        if not any(symbolic(v) for v in vals):
            try:  # the shapes are known: the Problem must build (the call is tuned right after)
                problem, _ = recipe_of.problem(vals)
            except ProblemError as exc:
                log.debug("not lowering %s at %s: %s", match.op, node.name, exc)
                continue
            recipe_of = attrs.evolve(recipe_of, key=problem.key())
        recipe = recipe_of.to_json()
        with graph.inserting_before(tail):
            call = graph.call_function(gemm, (recipe, [*match.inputs, *operands]))
        call.meta["val"] = gemm(recipe, vals)
        tail.replace_all_uses_with(call)
        for dead in reversed([*_between(match), *nodes]):
            if not dead.users:
                graph.erase_node(dead)
                gone.add(dead)
        done.append(Lowered(call, recipe, match.op))
    graph.lint()
    gm.recompile()
    return done


# --- giving a call back to the graph ---

_RESTORED_UNARY = {name: target for target, name in _UNARY.items()}


def restore(graph: fx.Graph, call: fx.Node) -> bool:
    """Put ATen's ops back in place of a lowered call (its winner was ATen's own ops, which the
    graph compiler then runs, and fuses, as it would without tunesmith). Left as it is, and
    False, where the ops would not give the layout the graph expects of the call."""
    recipe = Recipe.from_json(call.args[0])
    tensors = list(call.args[1])
    made: list[fx.Node] = []

    def emit(target: Any, *args: Any, **kwargs: Any) -> fx.Node:
        node = graph.call_function(target, args, kwargs)
        node.meta["val"] = target(*fx.map_arg(args, _val), **kwargs)
        node.meta["stack_trace"] = call.meta.get("stack_trace")
        made.append(node)
        return node

    with graph.inserting_before(call):
        out = _restored_op(emit, recipe, tensors)
        for step in recipe.epilogue:
            out = _restored_step(emit, step, out, tensors)
    want, got = _val(call), _val(out)
    if got.shape != want.shape or got.dtype != want.dtype or got.stride() != want.stride():
        for node in reversed(made):
            graph.erase_node(node)
        return False
    call.replace_all_uses_with(out)
    graph.erase_node(call)
    return True


def _restored_op(emit: Any, recipe: Recipe, t: Sequence[Any]) -> fx.Node:
    scalars = {k: v for k, v in recipe.scalars.items() if k in ("alpha", "beta") and v != 1}
    if recipe.op in ("mm", "bmm"):
        return emit(aten.mm.default if recipe.op == "mm" else aten.bmm.default, t[0], t[1])
    if recipe.op in ("addmm", "baddbmm"):
        return emit(aten.addmm.default if recipe.op == "addmm" else aten.baddbmm.default, *t[:3], **scalars)
    if recipe.op == "mm_plus_mm":
        return emit(aten.add.Tensor, emit(aten.mm.default, t[0], t[1]), emit(aten.mm.default, t[2], t[3]))
    s = recipe.scalars
    bias = t[2] if recipe.num_op_inputs == 3 else None
    args = (s["stride"], s["padding"], s["dilation"], False, [0] * len(s["stride"]), s["groups"])
    return emit(aten.convolution.default, t[0], t[1], bias, *args)


def _restored_step(emit: Any, step: EpilogueOp, out: fx.Node, t: Sequence[Any]) -> fx.Node:
    if step.name in _RESTORED_UNARY:
        return emit(_RESTORED_UNARY[step.name], out)
    if step.name in ("gelu", "gelu_tanh"):
        return emit(aten.gelu.default, out, approximate="tanh" if step.name == "gelu_tanh" else "none")
    if step.name == "cast":
        return emit(torch.ops.prims.convert_element_type.default, out, getattr(torch, step.dtype))
    other = t[step.input] if step.input is not None else step.scalar
    return emit(aten.add.Tensor if step.name == "add" else aten.mul.Tensor, out, other)


def symbolic(value: Any) -> bool:
    """Whether a value's shape, strides or offset are symbolic (``dynamic=True``)."""
    return isinstance(value, torch.Tensor) and any(
        not isinstance(x, int) for x in (*value.shape, *value.stride(), value.storage_offset())
    )


def _order(value: torch.Tensor) -> tuple[int, ...] | bool | None:
    """The memory order of a result the graph expects: None when contiguous, else its dims from
    outermost to innermost; False when it is not dense or cannot be known (symbolic strides)."""
    shape, stride = value.shape, value.stride()
    if symbolic(value):
        expected, ok = 1, True
        for size, st in reversed(list(zip(shape, stride, strict=True))):
            ok = ok and (statically_known_true(size == 1) or statically_known_true(st == expected))
            expected = expected * size
        return None if ok else False
    order = sorted(range(len(shape)), key=lambda d: (-stride[d], d))
    dense = torch.empty_permuted(tuple(shape), order, device="meta").stride()
    if all(shape[d] == 1 or stride[d] == dense[d] for d in range(len(shape))):
        return None if order == list(range(len(shape))) else tuple(order)
    return False


def _between(match: LoweringMatch) -> list[fx.Node]:
    """The nodes from the op's inputs to its result, in graph order (for ``mm + mm``: both mms)."""
    inner = [a for a in match.root.args if isinstance(a, fx.Node) and a not in match.inputs]
    return [*inner, match.root] if match.op == "mm_plus_mm" else [match.root]
