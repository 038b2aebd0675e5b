"""A Problem as Composable Kernel sees it: row- or column-major A and B with one leading dimension
each, the D tensors of the multiple-D epilogue, and the epilogue as steps computed in float."""

from __future__ import annotations

import attrs

from tunesmith.problem import broadcast_strides
from tunesmith_hookspecs import Problem, TensorMeta

#: the ops served: mm and addmm through the GEMM, bmm through the batched GEMM
OPS = ("mm", "addmm", "bmm")
#: the dtypes of A and B
DTYPES = ("float16", "bfloat16")
#: CK's element types of the dtypes an output or a D tensor may have
CK_TYPES = {"float16": "ck::half_t", "bfloat16": "ck::bhalf_t", "float32": "float"}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: CK indexes a matrix with 32-bit ck::index_t
INDEX_MAX = 2**31 - 1
#: D tensors one epilogue may read (bias and tensor operands)
MAX_DS = 4
#: pointwise steps and the CK element-wise op (ck::tensor_operation::element_wise) that computes each
UNARY = {"relu": "Relu", "gelu": "Gelu", "gelu_tanh": "FastGelu", "silu": "Silu", "sigmoid": "Sigmoid", "tanh": "TanH"}


class Unsupported(ValueError):
    """The Problem is not one CK multiple-D GEMM; the message says why."""


@attrs.frozen
class Matrix:
    """One operand: ``Row`` (its second dim has unit stride) or ``Col`` (its first has), its leading
    dimension, batch stride and element offset, as CK's Row/ColumnMajor layouts and strides take them."""

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
        """The length of the unit-stride dimension: what CK's vector loads run along."""
        return self.cols if self.layout == "Row" else self.rows

    @property
    def strided_size(self) -> int:
        return self.rows if self.layout == "Row" else self.cols

    @property
    def extent(self) -> int:
        """Elements one matrix spans: the offsets CK computes in 32-bit index_t."""
        if 0 in (self.rows, self.cols):
            return 0
        return (self.strided_size - 1) * self.ld + self.contiguous_size


@attrs.frozen
class Step:
    """One epilogue step on the float accumulator: a unary op (``relu``...), ``add_d``/``mul_d`` with D
    tensor ``d``, ``add_s``/``mul_s`` with runtime scalar ``slot``, or ``round`` to ``dtype``."""

    op: str
    d: int | None = None
    slot: int | None = None
    dtype: str | None = None


@attrs.frozen
class Gemm:
    """E = epilogue(alpha * A @ B [+ beta * D0]) over ``batch`` matrices, E row-major and contiguous."""

    op: str
    dtype: str
    batch: int
    m: int
    n: int
    k: int
    a: Matrix
    b: Matrix
    ds: tuple[Matrix, ...]
    d_inputs: tuple[int, ...]
    out_dtype: str
    bias: bool
    steps: tuple[Step, ...]
    scalars: tuple[float, ...]

    @property
    def batched(self) -> bool:
        return self.op == "bmm"


def _operand(name: str, meta: TensorMeta, rows: int, cols: int, batched: bool) -> Matrix:
    s0, s1 = meta.stride[-2:]
    batch_stride = meta.stride[0] if batched and meta.shape[0] > 1 else 0
    if cols == 1 or s1 == 1:
        return Matrix(name, rows, cols, "Row", s0 if rows > 1 else cols, batch_stride, meta.storage_offset, meta.dtype)
    if rows == 1 or s0 == 1:
        return Matrix(name, rows, cols, "Col", s1 if cols > 1 else rows, batch_stride, meta.storage_offset, meta.dtype)
    raise Unsupported(
        f"{name} has strides {meta.stride[-2:]}: neither dimension has unit stride, and CK reads "
        "row- or column-major matrices with one leading dimension"
    )


def _d_tensor(name: str, meta: TensorMeta, gemm_shape: tuple[int, ...]) -> Matrix:
    if meta.dtype not in CK_TYPES:
        raise Unsupported(f"{name} is {meta.dtype}; CK's D tensors here are float16, bfloat16 or float32")
    strides = broadcast_strides(meta, gemm_shape)
    m, n = gemm_shape[-2:]
    sm, sn = strides[-2:]
    batch_stride = strides[0] if len(gemm_shape) == 3 else 0
    if n == 1 or sn == 1:
        return Matrix(name, m, n, "Row", sm if m > 1 else n, batch_stride, meta.storage_offset, meta.dtype)
    if m == 1 or sm == 1:
        return Matrix(name, m, n, "Col", sn if n > 1 else m, batch_stride, meta.storage_offset, meta.dtype)
    raise Unsupported(
        f"{name} of shape {meta.shape} and strides {meta.stride} has no unit stride along M or N "
        f"once broadcast to {gemm_shape} (a scalar-like tensor): CK's D tensors are row- or column-major"
    )


def describe(problem: Problem) -> Gemm:
    """The Problem as one CK GEMM; raises :class:`Unsupported` naming what does not fit."""
    if problem.op not in OPS:
        raise Unsupported(f"op {problem.op} is not served (only {', '.join(OPS)})")
    ins = problem.inputs
    a_meta, b_meta = (ins[1], ins[2]) if problem.op == "addmm" else (ins[0], ins[1])
    dtype = a_meta.dtype
    if dtype not in DTYPES or b_meta.dtype != dtype:
        raise Unsupported(f"A and B are {a_meta.dtype} and {b_meta.dtype}; the instances take {' or '.join(DTYPES)}")
    batched = problem.op == "bmm"
    batch = a_meta.shape[0] if batched else 1
    m, k = a_meta.shape[-2:]
    n = b_meta.shape[-1]
    out = problem.output
    if out.dtype not in CK_TYPES:
        raise Unsupported(f"the output is {out.dtype}; CK's E here is float16, bfloat16 or float32")
    if out != TensorMeta.contiguous(out.shape, out.dtype, out.device):
        raise Unsupported(f"the output layout {out.stride} is not contiguous")
    a = _operand("A", a_meta, m, k, batched)
    b = _operand("B", b_meta, k, n, batched)
    gemm_shape = (batch, m, n) if batched else (m, n)

    ds: list[Matrix] = []
    d_inputs: list[int] = []
    alpha, beta = float(problem.scalar("alpha", 1.0)), float(problem.scalar("beta", 1.0))
    bias = problem.op == "addmm" and beta != 0.0
    if bias:
        ds.append(_d_tensor("bias", ins[0], gemm_shape))
        d_inputs.append(0)
    scalars = [alpha, beta if bias else 0.0]
    steps = []
    for step in problem.epilogue:
        if step.name in UNARY:
            steps.append(Step(step.name))
        elif step.name in ("add", "mul") and step.input is not None:
            if step.input not in d_inputs:
                ds.append(_d_tensor(f"epilogue operand {step.input}", ins[step.input], gemm_shape))
                d_inputs.append(step.input)
            steps.append(Step(f"{step.name}_d", d=d_inputs.index(step.input)))
        elif step.name in ("add", "mul"):
            scalars.append(float(step.scalar))  # type: ignore[arg-type]
            steps.append(Step(f"{step.name}_s", slot=len(scalars) - 1))
        elif step.dtype == "float32":
            continue  # the accumulator is float already
        elif step.dtype in ("float16", "bfloat16"):
            steps.append(Step("round", dtype=step.dtype))
        else:
            raise Unsupported(f"epilogue step cast to {step.dtype} is not served")
    if len(ds) > MAX_DS:
        raise Unsupported(f"the epilogue reads {len(ds)} tensors; at most {MAX_DS} D tensors are served")
    return Gemm(
        problem.op,
        dtype,
        batch,
        m,
        n,
        k,
        a,
        b,
        tuple(ds),
        tuple(d_inputs),
        out.dtype,
        bias,
        tuple(steps),
        tuple(scalars),
    )
