"""A Problem as CUTLASS sees it: row- or column-major A and B with one leading dimension each, the
tensors the epilogue reads (broadcast rows, broadcast columns or full matrices), and the epilogue
as a chain of steps computed in float.

What a compiled library depends on is split off as the :class:`Kind` (dtypes, layouts, vector
widths, the epilogue's structure); sizes, strides, offsets and the epilogue's numbers are run-time
arguments, so one library serves every problem of its kind.
"""

from __future__ import annotations

import attrs

from tunesmith.problem import broadcast_strides
from tunesmith_hookspecs import Problem, TensorMeta

#: the ops served: mm and addmm as one GEMM, bmm batched over L
OPS = ("mm", "addmm", "bmm")
#: the dtypes of A and B (float32 only as TF32, where torch allows TF32 for float32 matmuls)
DTYPES = ("float16", "bfloat16", "float32")
#: CUTLASS's element types of the dtypes a tensor may have
CUTLASS_TYPES = {"float16": "cutlass::half_t", "bfloat16": "cutlass::bfloat16_t", "float32": "float"}
#: the element type the tensor cores read each input dtype as
MMA_TYPES = {"float16": "cutlass::half_t", "bfloat16": "cutlass::bfloat16_t", "float32": "cutlass::tfloat32_t"}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: the widest vector access (bytes), and the alignments tried from widest to narrowest
VECTOR_BYTES = 16
#: pointwise steps and the CUTLASS functor (cutlass/epilogue/thread/activation.h) that computes each
UNARY = {
    "relu": "cutlass::epilogue::thread::ReLu",
    "gelu": "cutlass::epilogue::thread::GELU",
    "gelu_tanh": "cutlass::epilogue::thread::GELU_taylor",
    "silu": "cutlass::epilogue::thread::SiLu",
    "sigmoid": "cutlass::epilogue::thread::Sigmoid",
    "tanh": "cutlass::epilogue::thread::Tanh",
}
#: CUTLASS runs M, N and K as int; strides and offsets are 64-bit
INT_MAX = 2**31 - 1


class Unsupported(ValueError):
    """The Problem is not one CUTLASS GEMM with an epilogue visitor tree; the message says why."""


@attrs.frozen
class Matrix:
    """A or B: ``row`` (its second dim has unit stride) or ``col`` (its first has), its leading
    dimension, batch stride and element offset, and the widest vector (elements) its layout allows;
    ``copied``: read from a K-major copy that each call makes (:func:`with_k_major_operands`)."""

    name: str
    rows: int
    cols: int
    layout: str
    ld: int
    batch_stride: int
    offset: int
    dtype: str
    alignment: int
    copied: bool = False

    @property
    def k_major(self) -> bool:
        """Whether K is the unit-stride dimension (a row-major A, a column-major B)."""
        return (self.layout == "row") == (self.name == "A")


@attrs.frozen
class Operand:
    """A tensor the epilogue reads, broadcast to the output: ``row`` (one value per column n: a bias
    of shape (N,)), ``col`` (one per row m: shape (M, 1)) or ``full`` (a row-major M x N matrix)."""

    index: int
    kind: str
    ld: int
    batch_stride: int
    offset: int
    dtype: str
    alignment: int


@attrs.frozen
class Step:
    """One epilogue step on the float value: a unary op (``relu``...), ``add``/``mul`` with operand
    ``operand`` or with run-time scalar ``slot``, or ``round`` to ``dtype``."""

    op: str
    operand: int | None = None
    slot: int | None = None
    dtype: str | None = None


@attrs.frozen
class OperandKind:
    """What the source knows of an epilogue operand: how it broadcasts, its type, its vector width."""

    kind: str
    dtype: str
    alignment: int


@attrs.frozen
class Kind:
    """Everything a compiled library depends on besides the instance: one library serves every
    Problem of the same kind, whatever its sizes, strides and scalars."""

    dtype: str
    out_dtype: str
    batched: bool
    a_layout: str
    b_layout: str
    a_alignment: int
    b_alignment: int
    out_alignment: int
    operands: tuple[OperandKind, ...]
    bias: bool
    steps: tuple[Step, ...]
    scalars: int

    @property
    def full_operands(self) -> int:
        return sum(1 for o in self.operands if o.kind == "full")


@attrs.frozen
class Gemm:
    """D = epilogue(alpha * A @ B [+ beta * bias]) over ``batch`` matrices, D row-major and contiguous."""

    op: str
    batch: int
    m: int
    n: int
    k: int
    a: Matrix
    b: Matrix
    operands: tuple[Operand, ...]
    scalars: tuple[float, ...]
    kind: Kind

    @property
    def out_bytes(self) -> int:
        return ELEMENT_BYTES[self.kind.out_dtype]


def alignment(dtype: str, contiguous: int, *divisible: int) -> int:
    """The widest vector (elements, at most 16 bytes) that divides the unit-stride extent and every
    other number given (leading dimension, batch stride, offset)."""
    width = VECTOR_BYTES // ELEMENT_BYTES[dtype]
    while width > 1 and (contiguous % width or any(v % width for v in divisible)):
        width //= 2
    return width


def _matrix(name: str, meta: TensorMeta, rows: int, cols: int, batched: bool) -> Matrix:
    s0, s1 = meta.stride[-2:]
    batch_stride = meta.stride[0] if batched and meta.shape[0] > 1 else 0
    if cols == 1 or s1 == 1:
        layout, ld, contiguous = "row", s0 if rows > 1 else max(cols, 1), cols
    elif rows == 1 or s0 == 1:
        layout, ld, contiguous = "col", s1 if cols > 1 else max(rows, 1), rows
    else:
        raise Unsupported(
            f"{name} has strides {meta.stride[-2:]}: neither dimension has unit stride (CUTLASS reads "
            "row- or column-major matrices with one leading dimension; a copy is not made)"
        )
    width = alignment(meta.dtype, contiguous, ld, batch_stride, meta.storage_offset)
    return Matrix(name, rows, cols, layout, ld, batch_stride, meta.storage_offset, meta.dtype, width)


def _operand(index: int, meta: TensorMeta, shape: tuple[int, ...]) -> Operand:
    """An epilogue tensor broadcast to the output ``shape`` ((M, N) or (L, M, N))."""
    what = "the bias" if index == 0 else f"epilogue operand {index}"
    if meta.dtype not in CUTLASS_TYPES:
        raise Unsupported(f"{what} is {meta.dtype}; epilogue tensors here are float16, bfloat16 or float32")
    strides = broadcast_strides(meta, shape)
    m, n = shape[-2:]
    sm, sn = strides[-2:]
    batch = strides[0] if len(shape) == 3 and shape[0] > 1 else 0
    offset = meta.storage_offset
    if (sm == 0 or m == 1) and (sn == 1 or n == 1):
        kind, ld, contiguous = "row", 0, n
    elif (sn == 0 or n == 1) and (sm == 1 or m == 1):
        kind, ld, contiguous = "col", 0, m
    elif sn == 1 or n == 1:
        kind, ld, contiguous = "full", sm, n
    else:
        raise Unsupported(
            f"{what} of shape {meta.shape} and strides {meta.stride}, broadcast to {shape}, is neither a row "
            "vector, a column vector nor a row-major matrix (the epilogue visitors read those)"
        )
    width = 1 if kind == "col" else alignment(meta.dtype, contiguous, ld, batch, offset)
    return Operand(index, kind, ld, batch, offset, meta.dtype, width)


def _steps(problem: Problem, scalars: list[float], operand_of: dict[int, int]) -> list[Step]:
    """The Problem's epilogue as steps; tensors go to ``operand_of`` (input index -> operand), numbers
    to ``scalars``."""
    steps = []
    for step in problem.epilogue:
        if step.name in UNARY:
            steps.append(Step(step.name))
        elif step.name in ("add", "mul") and step.input is not None:
            operand_of.setdefault(step.input, len(operand_of))
            steps.append(Step(step.name, operand=operand_of[step.input]))
        elif step.name in ("add", "mul"):
            scalars.append(float(step.scalar))  # type: ignore[arg-type]
            steps.append(Step(step.name, slot=len(scalars) - 1))
        elif step.dtype == "float32":
            continue  # the epilogue computes in float already
        elif step.dtype in ("float16", "bfloat16"):
            steps.append(Step("round", dtype=step.dtype))
        else:
            raise Unsupported(f"epilogue step {step.name} to {step.dtype} has no CUTLASS mapping here")
    return steps


def describe(problem: Problem, tf32: bool) -> Gemm:
    """The Problem as one CUTLASS GEMM; raises :class:`Unsupported` naming what does not fit.
    ``tf32``: whether float32 inputs may be multiplied as TF32 (torch's float32 matmul precision)."""
    if problem.op not in OPS:
        raise Unsupported(f"op {problem.op} is not served (only {', '.join(OPS)})")
    ins = problem.inputs
    a_meta, b_meta = (ins[1], ins[2]) if problem.op == "addmm" else (ins[0], ins[1])
    dtype = a_meta.dtype
    if dtype not in DTYPES or b_meta.dtype != dtype:
        raise Unsupported(f"A and B are {a_meta.dtype} and {b_meta.dtype}; the instances take {', '.join(DTYPES)}")
    if dtype == "float32" and not tf32:
        raise Unsupported(
            "float32 is multiplied as TF32 only, and torch's float32 matmul precision is 'highest' "
            "(torch.set_float32_matmul_precision('high') allows it)"
        )
    batched = problem.op == "bmm"
    batch = a_meta.shape[0] if batched else 1
    m, k = a_meta.shape[-2:]
    n = b_meta.shape[-1]
    out = problem.output
    if out.dtype not in CUTLASS_TYPES:
        raise Unsupported(f"the output is {out.dtype}; D here is float16, bfloat16 or float32")
    if out != TensorMeta.contiguous(out.shape, out.dtype, out.device):
        raise Unsupported(f"the output layout {out.stride} is not contiguous")
    if k == 0:  # the mainloop waits for a first K tile that never comes: the kernel would hang
        raise Unsupported("K is 0: the product is all zeros, and the sm90 mainloop needs a K tile")
    for what, value in (("M", m), ("N", n), ("K", k), ("the batch", batch)):
        if value > INT_MAX:
            raise Unsupported(f"{what} {value} exceeds CUTLASS's 32-bit problem sizes")
    a = _matrix("A", a_meta, m, k, batched)
    b = _matrix("B", b_meta, k, n, batched)
    shape = (batch, m, n) if batched else (m, n)

    alpha, beta = float(problem.scalar("alpha", 1.0)), float(problem.scalar("beta", 1.0))
    bias = problem.op == "addmm" and beta != 0.0  # beta = 0 reads no bias, as in torch
    operand_of: dict[int, int] = {0: 0} if bias else {}
    scalars = [alpha, beta if bias else 0.0]
    steps = _steps(problem, scalars, operand_of)
    while steps and steps[-1].op == "round" and steps[-1].dtype == out.dtype:
        steps.pop()  # the conversion to D's type rounds the same way
    operands = tuple(_operand(i, ins[i], shape) for i in sorted(operand_of, key=operand_of.__getitem__))
    out_alignment = alignment(out.dtype, n, m * n if batched else 0)
    kind = Kind(
        dtype=dtype,
        out_dtype=out.dtype,
        batched=batched,
        a_layout=a.layout,
        b_layout=b.layout,
        a_alignment=a.alignment,
        b_alignment=b.alignment,
        out_alignment=out_alignment,
        operands=tuple(OperandKind(o.kind, o.dtype, o.alignment) for o in operands),
        bias=bias,
        steps=tuple(steps),
        scalars=len(scalars),
    )
    return Gemm(problem.op, batch, m, n, k, a, b, operands, tuple(scalars), kind)


def _k_major_copy(matrix: Matrix, batch: int) -> Matrix:
    """``matrix`` as its dense K-major copy: A row-major, B column-major, leading dimension K."""
    if matrix.k_major:
        return matrix
    k, other = (matrix.cols, matrix.rows) if matrix.name == "A" else (matrix.rows, matrix.cols)
    layout = "row" if matrix.name == "A" else "col"
    batch_stride = k * other if batch > 1 else 0
    width = alignment(matrix.dtype, k, batch_stride)
    return Matrix(matrix.name, matrix.rows, matrix.cols, layout, k, batch_stride, 0, matrix.dtype, width, copied=True)


def with_k_major_operands(gemm: Gemm) -> Gemm:
    """The GEMM with A and B read from K-major copies where they are not K-major: TF32 wgmma reads
    only K-major operands, and a copy costs one pass over the operand."""
    a, b = _k_major_copy(gemm.a, gemm.batch), _k_major_copy(gemm.b, gemm.batch)
    kind = attrs.evolve(
        gemm.kind, a_layout=a.layout, b_layout=b.layout, a_alignment=a.alignment, b_alignment=b.alignment
    )
    return attrs.evolve(gemm, a=a, b=b, kind=kind)
