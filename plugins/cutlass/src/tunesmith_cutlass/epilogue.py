"""The epilogue as a CUTLASS epilogue visitor tree (EVT), for either kernel family.

The tree computes, in float, ``alpha * acc``, then ``+ beta * bias`` for addmm, then the Problem's
steps in order, and converts the result to D's type. Both families have the same node kinds under
different names (``cutlass::epilogue::fusion::Sm90*`` for CUTLASS 3.x, ``cutlass::epilogue::
threadblock::Visitor*`` with ``Sm80EVT`` for 2.x); a :class:`Flavor` names them. Every node is a
``using`` of its own with its arguments built beside it, so the rendered source reads top-down.
Numbers (alpha, beta, the steps' scalars) and the operands' pointers and strides are run-time
arguments: problems that differ only in them share a library.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from tunesmith_cutlass.gemm import CUTLASS_TYPES, UNARY, Kind, OperandKind, Step

ROUND = "cutlass::FloatRoundStyle::round_to_nearest"
BINARY = {"add": "cutlass::plus", "mul": "cutlass::multiplies"}


@attrs.frozen
class Flavor:
    """One family's node templates. ``operand`` renders an operand node's type from (its kind record,
    its index); ``operand_args`` its arguments from (kind record, index)."""

    acc: str
    scalar: str
    compute: str
    evt: str
    operand: Callable[[OperandKind, int], str]
    operand_args: Callable[[OperandKind, int], str]


@attrs.define
class _Tree:
    """The node declarations (namespace scope) and argument statements (in the entry point) as
    they are written, with a counter naming the nodes N0, N1, ..."""

    flavor: Flavor
    types: list[str] = attrs.field(factory=list)
    args: list[str] = attrs.field(factory=list)
    count: int = 0

    def node(self, type_: str, args: str) -> str:
        name = f"N{self.count}"
        self.count += 1
        self.types.append(f"using {name} = {type_};")
        self.args.append(f"typename {name}::Arguments {name.lower()}{args};")
        return name

    def scalar(self, slot: int) -> str:
        return self.node(f"{self.flavor.scalar}<float>", f"{{{{scalars[{slot}]}}}}")

    def compute(self, fn: str, out: str, *children: str) -> str:
        kids = ", ".join(children)
        args = ", ".join(c.lower() for c in children)
        return self.node(
            f"{self.flavor.evt}<{self.flavor.compute}<{fn}, {out}, float, {ROUND}>, {kids}>", f"{{{args}, {{}}}}"
        )


def _step(tree: _Tree, kind: Kind, step: Step, x: str, operands: list[str]) -> str:
    if step.op in UNARY:
        return tree.compute(UNARY[step.op], "float", x)
    if step.op in BINARY and step.operand is not None:
        return tree.compute(BINARY[step.op], "float", x, operands[step.operand])
    if step.op in BINARY:
        return tree.compute(BINARY[step.op], "float", x, tree.scalar(step.slot))  # type: ignore[arg-type]
    if step.op == "round":
        return tree.compute("cutlass::epilogue::thread::Identity", CUTLASS_TYPES[step.dtype], x)  # type: ignore[index]
    raise ValueError(f"unknown epilogue step {step.op!r}")


@attrs.frozen
class Tree:
    """A rendered tree: ``using`` lines of its nodes, the statements building their arguments
    (reading ``scalars``, ``operands`` and ``strides`` of the entry point), and the root's name
    (its arguments are the variable of the same name in lower case)."""

    types: tuple[str, ...]
    args: tuple[str, ...]
    root: str


def render_tree(kind: Kind, flavor: Flavor, out_type: str) -> Tree:
    """The visitor tree of ``kind``'s epilogue in ``flavor``, whose root outputs ``out_type``."""
    tree = _Tree(flavor)
    acc = tree.node(flavor.acc, "{}")
    operands = [tree.node(flavor.operand(o, i), flavor.operand_args(o, i)) for i, o in enumerate(kind.operands)]
    x = tree.compute("cutlass::multiplies", "float", acc, tree.scalar(0))  # alpha * acc
    if kind.bias:
        # beta * bias + x, as CUTLASS's own linear combination computes it
        x = tree.compute("cutlass::homogeneous_multiply_add", "float", tree.scalar(1), operands[0], x)
    for step in kind.steps:
        x = _step(tree, kind, step, x, operands)
    root = tree.compute("cutlass::epilogue::thread::Identity", out_type, x)
    return Tree(tuple(tree.types), tuple(tree.args), root)


def describe_steps(kind: Kind) -> str:
    """A one-line summary of the epilogue for the source's header comment."""
    parts = ["alpha * acc"] + (["+ beta * bias"] if kind.bias else [])
    for step in kind.steps:
        if step.op == "round":
            parts.append(f"round to {step.dtype}")
        elif step.operand is not None:
            parts.append(f"{step.op} operand {step.operand} ({kind.operands[step.operand].kind})")
        elif step.slot is not None:
            parts.append(f"{step.op} scalar {step.slot}")
        else:
            parts.append(step.op)
    return ", ".join(parts)
