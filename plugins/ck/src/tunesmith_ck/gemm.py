"""A Problem as Composable Kernel sees it: row- or column-major A and B with one leading dimension
each, the D tensors of the multiple-D epilogue, and the epilogue as steps computed in float (the
reading of the Problem is the plugin API's, ``tunesmith.plugin.native``; CK's limits are here)."""

from __future__ import annotations

import attrs

from tunesmith.plugin import broadcast_strides
from tunesmith.plugin.native import Gemm as NativeGemm
from tunesmith.plugin.native import Matrix, Step, Unsupported, epilogue_of, matrix_of, product_of
from tunesmith_hookspecs import Problem, TensorMeta

#: the dtypes of A and B
DTYPES = ("float16", "bfloat16")
#: CK's element types of the dtypes an output or a D tensor may have
CK_TYPES = {"float16": "ck::half_t", "bfloat16": "ck::bhalf_t", "float32": "float"}
#: CK's layout types of a row- and a column-major matrix
CK_LAYOUTS = {"row": "Row", "col": "Col"}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: CK indexes a matrix with 32-bit ck::index_t
INDEX_MAX = 2**31 - 1
#: D tensors one epilogue may read (bias and tensor operands)
MAX_DS = 4
#: pointwise steps and the CK element-wise op (ck::tensor_operation::element_wise) that computes each
UNARY = {"relu": "Relu", "gelu": "Gelu", "gelu_tanh": "FastGelu", "silu": "Silu", "sigmoid": "Sigmoid", "tanh": "TanH"}


@attrs.frozen
class Gemm(NativeGemm):
    """E = epilogue(alpha * A @ B [+ beta * D0]) over ``batch`` matrices, E row-major and contiguous:
    the D tensors ``ds`` are the Problem's inputs ``d_inputs``, and a step's ``operand`` is a D tensor."""

    dtype: str
    ds: tuple[Matrix, ...]
    d_inputs: tuple[int, ...]
    out_dtype: str
    bias: bool
    steps: tuple[Step, ...]


def _d_tensor(name: str, meta: TensorMeta, gemm_shape: tuple[int, ...]) -> Matrix:
    if meta.dtype not in CK_TYPES:
        raise Unsupported(f"{name} is {meta.dtype}; CK's D tensors here are float16, bfloat16 or float32")
    strides = broadcast_strides(meta, gemm_shape)
    m, n = gemm_shape[-2:]
    sm, sn = strides[-2:]
    batch_stride = strides[0] if len(gemm_shape) == 3 else 0
    if n == 1 or sn == 1:
        return Matrix(name, m, n, "row", sm if m > 1 else n, batch_stride, meta.storage_offset, meta.dtype)
    if m == 1 or sm == 1:
        return Matrix(name, m, n, "col", sn if n > 1 else m, batch_stride, meta.storage_offset, meta.dtype)
    raise Unsupported(
        f"{name} of shape {meta.shape} and strides {meta.stride} has no unit stride along M or N "
        f"once broadcast to {gemm_shape} (a scalar-like tensor): CK's D tensors are row- or column-major"
    )


def describe(problem: Problem) -> Gemm:
    """The Problem as one CK GEMM; raises :class:`Unsupported` naming what does not fit."""
    p = product_of(problem, DTYPES, tuple(CK_TYPES), "CK's E")
    a = matrix_of("A", p.a, p.m, p.k, p.batched)
    b = matrix_of("B", p.b, p.k, p.n, p.batched)
    epilogue = epilogue_of(problem, UNARY)
    if len(epilogue.inputs) > MAX_DS:
        raise Unsupported(f"the epilogue reads {len(epilogue.inputs)} tensors; at most {MAX_DS} D tensors are served")
    names = ["bias" if epilogue.bias and i == 0 else f"epilogue operand {i}" for i in epilogue.inputs]
    ds = tuple(_d_tensor(name, problem.inputs[i], p.shape) for name, i in zip(names, epilogue.inputs, strict=True))
    return Gemm(
        problem.op, p.batch, p.m, p.n, p.k, a, b, epilogue.scalars, p.dtype, ds, epilogue.inputs, p.out.dtype,
        epilogue.bias, epilogue.steps,
    )  # fmt: skip
