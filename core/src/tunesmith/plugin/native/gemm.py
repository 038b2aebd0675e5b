"""A Problem as one GEMM, as every native-kernel plugin reads it before its own rules: which inputs
are A and B, their sizes and layouts (row- or column-major with one leading dimension), the output,
and the epilogue as steps computed in float (alpha, the bias, pointwise ops, epilogue tensors and
scalars, roundings)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

from tunesmith_hookspecs import Problem, TensorMeta

#: the ops served: mm and addmm as one GEMM, bmm batched over its first dimension
OPS = ("mm", "addmm", "bmm")
#: the pointwise epilogue steps every plugin maps to a functor of its kernel library
UNARY_OPS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")


class Unsupported(ValueError):
    """The Problem is not one GEMM that the plugin's instances compute; the message says why."""


def listing(names: Sequence[str]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def ab_inputs(op: str) -> tuple[int, int]:
    """The indices of A and B among an op's inputs (addmm's first input is its bias)."""
    return (1, 2) if op == "addmm" else (0, 1)


@attrs.frozen
class Product:
    """The product a Problem computes: ``batch`` times A (M x K) @ B (K x N), into a contiguous output;
    ``dtype`` is A's and B's."""

    op: str
    batch: int
    m: int
    n: int
    k: int
    a: TensorMeta
    b: TensorMeta
    dtype: str
    out: TensorMeta

    @property
    def batched(self) -> bool:
        return self.op == "bmm"

    @property
    def shape(self) -> tuple[int, ...]:
        """The output's shape, that epilogue tensors are broadcast to."""
        return (self.batch, self.m, self.n) if self.batched else (self.m, self.n)


def product_of(problem: Problem, dtypes: Sequence[str], out_dtypes: Sequence[str], output: str) -> Product:
    """The Problem's product, where its op, A's and B's dtypes (``dtypes``) and its output (contiguous,
    of ``out_dtypes``; ``output`` names it in messages) are served; else :class:`Unsupported`."""
    if problem.op not in OPS:
        raise Unsupported(f"op {problem.op} is not served (only {', '.join(OPS)})")
    a, b = (problem.inputs[i] for i in ab_inputs(problem.op))
    if a.dtype not in dtypes or b.dtype != a.dtype:
        raise Unsupported(f"A and B are {a.dtype} and {b.dtype}; the instances take {listing(dtypes)}")
    out = problem.output
    if out.dtype not in out_dtypes:
        raise Unsupported(f"the output is {out.dtype}; {output} here is {listing(out_dtypes)}")
    if out != TensorMeta.contiguous(out.shape, out.dtype, out.device):
        raise Unsupported(f"the output layout {out.stride} is not contiguous")
    batch = a.shape[0] if problem.op == "bmm" else 1
    m, k = a.shape[-2:]
    return Product(problem.op, batch, m, b.shape[-1], k, a, b, a.dtype, out)


@attrs.frozen
class Matrix:
    """A matrix as a kernel reads it: ``row`` (its second dim has unit stride) or ``col`` (its first
    has), its leading dimension, batch stride and element offset."""

    name: str
    rows: int
    cols: int
    layout: str
    ld: int
    batch_stride: int
    offset: int
    dtype: str

    @property
    def contiguous_size(self) -> int:
        """The length of the unit-stride dimension: what vector loads run along."""
        return self.cols if self.layout == "row" else self.rows

    @property
    def strided_size(self) -> int:
        return self.rows if self.layout == "row" else self.cols

    @property
    def extent(self) -> int:
        """Elements one matrix spans (what 32-bit offsets must reach)."""
        if 0 in (self.rows, self.cols):
            return 0
        return (self.strided_size - 1) * self.ld + self.contiguous_size

    @property
    def k_major(self) -> bool:
        """Whether K is the unit-stride dimension (a row-major A, a column-major B)."""
        return (self.layout == "row") == (self.name == "A")


def matrix_of(name: str, meta: TensorMeta, rows: int, cols: int, batched: bool) -> Matrix:
    """A or B (``rows`` x ``cols``) as a row- or column-major matrix; :class:`Unsupported` when neither
    dimension has unit stride (no copy is made)."""
    s0, s1 = meta.stride[-2:]
    batch_stride = meta.stride[0] if batched and meta.shape[0] > 1 else 0
    if cols == 1 or s1 == 1:
        layout, ld = "row", s0 if rows > 1 else max(cols, 1)
    elif rows == 1 or s0 == 1:
        layout, ld = "col", s1 if cols > 1 else max(rows, 1)
    else:
        raise Unsupported(
            f"{name} has strides {meta.stride[-2:]}: neither dimension has unit stride (the instances read "
            "row- or column-major matrices with one leading dimension; a copy is not made)"
        )
    return Matrix(name, rows, cols, layout, ld, batch_stride, meta.storage_offset, meta.dtype)


@attrs.frozen
class Gemm:
    """What every plugin's GEMM holds: ``batch`` products of A (M x K) and B (K x N), and the numbers of
    the epilogue (alpha, beta, the steps' scalars); a plugin's own GEMM adds what its instances need."""

    op: str
    batch: int
    m: int
    n: int
    k: int
    a: Matrix
    b: Matrix
    scalars: tuple[float, ...]

    @property
    def batched(self) -> bool:
        return self.op == "bmm"


@attrs.frozen
class Step:
    """One epilogue step on the float value: a unary op (``relu``...), ``add``/``mul`` with epilogue
    tensor ``operand`` or with run-time scalar ``slot``, or ``round`` to ``dtype``."""

    op: str
    operand: int | None = None
    slot: int | None = None
    dtype: str | None = None


@attrs.frozen
class Epilogue:
    """What follows alpha * A @ B: ``+ beta * bias`` where ``bias`` (addmm with beta not 0: beta = 0
    reads no bias, as in torch), then the steps. ``inputs``: the Problem input of each epilogue tensor
    (the bias first); ``scalars``: alpha, beta (0 without a bias), then the steps' numbers."""

    bias: bool
    inputs: tuple[int, ...]
    steps: tuple[Step, ...]
    scalars: tuple[float, ...]


def epilogue_of(problem: Problem, unary: Collection[str] = UNARY_OPS) -> Epilogue:
    """The Problem's epilogue as steps; :class:`Unsupported` for a step with no mapping."""
    alpha, beta = float(problem.scalar("alpha", 1.0)), float(problem.scalar("beta", 1.0))
    bias = problem.op == "addmm" and beta != 0.0
    inputs = [0] if bias else []
    scalars = [alpha, beta if bias else 0.0]
    steps = []
    for step in problem.epilogue:
        if step.name in unary:
            steps.append(Step(step.name))
        elif step.name in ("add", "mul") and step.input is not None:
            if step.input not in inputs:
                inputs.append(step.input)
            steps.append(Step(step.name, operand=inputs.index(step.input)))
        elif step.name in ("add", "mul"):
            scalars.append(float(step.scalar))  # type: ignore[arg-type]
            steps.append(Step(step.name, slot=len(scalars) - 1))
        elif step.dtype == "float32":
            continue  # the epilogue computes in float already
        elif step.dtype in ("float16", "bfloat16"):
            steps.append(Step("round", dtype=step.dtype))
        else:
            raise Unsupported(f"epilogue step {step.name} to {step.dtype} is not served")
    return Epilogue(bias, tuple(inputs), tuple(steps), tuple(scalars))
