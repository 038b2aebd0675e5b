"""The Triton GEMM template: (batched) A @ B, optionally + C @ D and a bias, then up to
``MAX_STEPS`` epilogue steps, in one kernel.

The epilogue is compiled in through ``tl.constexpr`` step codes (no generated source): each
step slot holds an op code, and tensor steps name one of two operand slots, read with their own
(broadcast: zero) strides. The accumulator is float32; a cast step rounds it to its dtype and
goes on; the store rounds to the output dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl

MAX_STEPS = 4
MAX_OPERANDS = 2

#: epilogue op codes (0: no step)
CODES = {
    "relu": 1,
    "gelu": 2,
    "gelu_tanh": 3,
    "silu": 4,
    "sigmoid": 5,
    "tanh": 6,
    "add": 7,  # + 2 when the operand is a number: 9
    "mul": 8,  # + 2: 10
    "cast:float16": 11,
    "cast:bfloat16": 12,
    "cast:float32": 13,
}


@triton.jit
def _tanh(x):
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _step(acc, CODE: tl.constexpr, scalar, e_ptr, s_b, s_m, s_n, b, om, on, mask):
    if CODE == 1:
        acc = tl.maximum(acc, 0.0)
    elif CODE == 2:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif CODE == 3:
        acc = 0.5 * acc * (1.0 + _tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)))
    elif CODE == 4:
        acc = acc * tl.sigmoid(acc)
    elif CODE == 5:
        acc = tl.sigmoid(acc)
    elif CODE == 6:
        acc = _tanh(acc)
    elif CODE == 7 or CODE == 8:
        operand = tl.load(e_ptr + b * s_b + om[:, None] * s_m + on[None, :] * s_n, mask=mask, other=0.0)
        operand = operand.to(tl.float32)
        acc = acc + operand if CODE == 7 else acc * operand
    elif CODE == 9:
        acc = acc + scalar
    elif CODE == 10:
        acc = acc * scalar
    elif CODE == 11:
        acc = acc.to(tl.float16).to(tl.float32)
    elif CODE == 12:
        acc = acc.to(tl.bfloat16).to(tl.float32)
    return acc


@triton.jit
def _dot_loop(
    acc, x_ptr, y_ptr, s_xb, s_xm, s_xk, s_yb, s_yk, s_yn, b, om, on, M, N, K, BK: tl.constexpr, PRECISION: tl.constexpr
):
    ok = tl.arange(0, BK)
    x_ptrs = x_ptr + b * s_xb + om[:, None] * s_xm + ok[None, :] * s_xk
    y_ptrs = y_ptr + b * s_yb + ok[:, None] * s_yk + on[None, :] * s_yn
    for k0 in range(0, K, BK):
        x = tl.load(x_ptrs, mask=(om[:, None] < M) & (ok[None, :] + k0 < K), other=0.0)
        y = tl.load(y_ptrs, mask=(ok[:, None] + k0 < K) & (on[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
        x_ptrs += BK * s_xk
        y_ptrs += BK * s_yk
    return acc


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, c_ptr, d_ptr, bias_ptr, e0_ptr, e1_ptr, out_ptr,
    M, N, K, K2,
    s_ab, s_am, s_ak, s_bb, s_bk, s_bn,
    s_cb, s_cm, s_ck, s_db, s_dk, s_dn,
    s_xb, s_xm, s_xn,
    s_e0b, s_e0m, s_e0n, s_e1b, s_e1m, s_e1n,
    s_ob, s_om, s_on,
    alpha, beta, v0, v1, v2, v3,
    HAS_SECOND: tl.constexpr, HAS_BIAS: tl.constexpr,
    S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
    O0: tl.constexpr, O1: tl.constexpr, O2: tl.constexpr, O3: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    pid, b = tl.program_id(0), tl.program_id(1)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = GROUP * grid_n  # grouped ordering: GROUP row-blocks share their B tiles in L2
    first_m = (pid // width) * GROUP
    rows = min(grid_m - first_m, GROUP)
    pm = first_m + (pid % width) % rows
    pn = (pid % width) // rows
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    acc = _dot_loop(acc, a_ptr, b_ptr, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, b, om, on, M, N, K, BK, PRECISION)
    if HAS_SECOND:
        acc = _dot_loop(acc, c_ptr, d_ptr, s_cb, s_cm, s_ck, s_db, s_dk, s_dn, b, om, on, M, N, K2, BK, PRECISION)
    mask = (om[:, None] < M) & (on[None, :] < N)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + b * s_xb + om[:, None] * s_xm + on[None, :] * s_xn, mask=mask, other=0.0)
        acc = alpha * acc + beta * bias.to(tl.float32)
    acc = _step(acc, S0, v0, e0_ptr if O0 == 0 else e1_ptr, s_e0b if O0 == 0 else s_e1b, s_e0m if O0 == 0 else s_e1m,
                s_e0n if O0 == 0 else s_e1n, b, om, on, mask)  # fmt: skip
    acc = _step(acc, S1, v1, e0_ptr if O1 == 0 else e1_ptr, s_e0b if O1 == 0 else s_e1b, s_e0m if O1 == 0 else s_e1m,
                s_e0n if O1 == 0 else s_e1n, b, om, on, mask)  # fmt: skip
    acc = _step(acc, S2, v2, e0_ptr if O2 == 0 else e1_ptr, s_e0b if O2 == 0 else s_e1b, s_e0m if O2 == 0 else s_e1m,
                s_e0n if O2 == 0 else s_e1n, b, om, on, mask)  # fmt: skip
    acc = _step(acc, S3, v3, e0_ptr if O3 == 0 else e1_ptr, s_e0b if O3 == 0 else s_e1b, s_e0m if O3 == 0 else s_e1m,
                s_e0n if O3 == 0 else s_e1n, b, om, on, mask)  # fmt: skip
    out = out_ptr + b * s_ob + om[:, None] * s_om + on[None, :] * s_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
