"""A Problem as CUTLASS sees it: row- or column-major A and B with one leading dimension each, the
tensors the epilogue reads (broadcast rows, broadcast columns or full matrices), and the epilogue
as a chain of steps computed in float.

What a compiled library depends on is split off as the :class:`Kind` (dtypes, layouts, vector
widths, the epilogue's structure); sizes, strides, offsets and the epilogue's numbers are run-time
arguments, so one library serves every problem of its kind.
"""

from __future__ import annotations

import attrs

from tunesmith.plugin import broadcast_strides
from tunesmith.plugin.native import Gemm as NativeGemm
from tunesmith.plugin.native import Matrix as NativeMatrix
from tunesmith.plugin.native import Step, Unsupported, epilogue_of, matrix_of, product_of
from tunesmith_hookspecs import Problem, TensorMeta

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


@attrs.frozen
class Matrix(NativeMatrix):
    """A or B with the widest vector (elements) its layout allows; ``copied``: read from a K-major
    copy that each call makes (:func:`with_k_major_operands`)."""

    alignment: int
    copied: bool = False


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
class Gemm(NativeGemm):
    """D = epilogue(alpha * A @ B [+ beta * bias]) over ``batch`` matrices, D row-major and contiguous:
    A and B are this module's :class:`Matrix`, the epilogue reads ``operands``."""

    operands: tuple[Operand, ...]
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
    m = matrix_of(name, meta, rows, cols, batched)
    width = alignment(meta.dtype, m.contiguous_size, m.ld, m.batch_stride, m.offset)
    return Matrix(**attrs.asdict(m, recurse=False), alignment=width)


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


def describe(problem: Problem, tf32: bool) -> Gemm:
    """The Problem as one CUTLASS GEMM; raises :class:`Unsupported` naming what does not fit.
    ``tf32``: whether float32 inputs may be multiplied as TF32 (torch's float32 matmul precision)."""
    p = product_of(problem, DTYPES, tuple(CUTLASS_TYPES), "D")
    if p.dtype == "float32" and not tf32:
        raise Unsupported(
            "float32 is multiplied as TF32 only, and torch's float32 matmul precision is 'highest' "
            "(torch.set_float32_matmul_precision('high') allows it)"
        )
    if p.k == 0:  # the mainloop waits for a first K tile that never comes: the kernel would hang
        raise Unsupported("K is 0: the product is all zeros, and the sm90 mainloop needs a K tile")
    for what, value in (("M", p.m), ("N", p.n), ("K", p.k), ("the batch", p.batch)):
        if value > INT_MAX:
            raise Unsupported(f"{what} {value} exceeds CUTLASS's 32-bit problem sizes")
    a = _matrix("A", p.a, p.m, p.k, p.batched)
    b = _matrix("B", p.b, p.k, p.n, p.batched)
    epilogue = epilogue_of(problem, UNARY)
    steps = list(epilogue.steps)
    while steps and steps[-1].op == "round" and steps[-1].dtype == p.out.dtype:
        steps.pop()  # the conversion to D's type rounds the same way
    operands = tuple(_operand(i, problem.inputs[i], p.shape) for i in epilogue.inputs)
    kind = Kind(
        dtype=p.dtype,
        out_dtype=p.out.dtype,
        batched=p.batched,
        a_layout=a.layout,
        b_layout=b.layout,
        a_alignment=a.alignment,
        b_alignment=b.alignment,
        out_alignment=alignment(p.out.dtype, p.n, p.m * p.n if p.batched else 0),
        operands=tuple(OperandKind(o.kind, o.dtype, o.alignment) for o in operands),
        bias=epilogue.bias,
        steps=tuple(steps),
        scalars=len(epilogue.scalars),
    )
    return Gemm(problem.op, p.batch, p.m, p.n, p.k, a, b, epilogue.scalars, operands, kind)


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
