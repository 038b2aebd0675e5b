"""The Triton GEMM kernels: (batched) A @ B, optionally + C @ D and a bias, then up to
``MAX_STEPS`` epilogue steps, in one kernel.

- ``gemm_kernel`` reads A and B through pointers with any strides. With ``SPLIT`` > 1 each
  program reduces one slice of K and adds it atomically to the tile's float32 sums; the last
  slice to arrive (a per-tile counter says which) reads the sums, leaves zeros and a zero count
  for the next call, and applies the epilogue: one launch, as small M with large K has too few
  output tiles to fill the GPU and a second kernel's launch would cost as much as the work.
- ``gemm_tma_kernel`` reads A and B through TMA tensor descriptors (Hopper), one tile per
  program or, with fewer programs than tiles, persistently looping over them.

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
def _finish(
    acc, b, om, on, M, N,
    x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
    alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
    HAS_BIAS: tl.constexpr,
    S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
    O0: tl.constexpr, O1: tl.constexpr, O2: tl.constexpr, O3: tl.constexpr,
):  # fmt: skip
    """alpha * acc + beta * bias, the epilogue steps, and the store of one output tile."""
    mask = (om[:, None] < M) & (on[None, :] < N)
    if HAS_BIAS:
        bias = tl.load(x_ptr + b * s_xb + om[:, None] * s_xm + on[None, :] * s_xn, mask=mask, other=0.0)
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


@triton.jit
def _tile(tile, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
    """Row and column block of ``tile`` in grouped order: GROUP row blocks share their B tiles in L2."""
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = GROUP * grid_n
    first_m = (tile // width) * GROUP
    rows = min(grid_m - first_m, GROUP)
    return first_m + (tile % width) % rows, (tile % width) // rows


@triton.jit
def _dot_loop(
    acc, x_ptr, y_ptr, s_xb, s_xm, s_xk, s_yb, s_yk, s_yn, b, om, on, M, N, k_lo, k_hi,
    BK: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    # rows and columns past the edge read rows and columns inside it again (their sums are never
    # stored), so that no load needs a mask but K's last slice: fewer predicates on every load
    ok = k_lo + tl.arange(0, BK)
    x_ptrs = x_ptr + b * s_xb + (om % M)[:, None] * s_xm + ok[None, :] * s_xk
    y_ptrs = y_ptr + b * s_yb + ok[:, None] * s_yk + (on % N)[None, :] * s_yn
    for k in range(k_lo, k_hi, BK):
        if EVEN_K:  # every slice of K is whole
            x = tl.load(x_ptrs)
            y = tl.load(y_ptrs)
        else:
            kk = k - k_lo + ok
            x = tl.load(x_ptrs, mask=kk[None, :] < k_hi, other=0.0)
            y = tl.load(y_ptrs, mask=kk[:, None] < k_hi, other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
        x_ptrs += BK * s_xk
        y_ptrs += BK * s_yk
    return acc


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, c_ptr, d_ptr, ws_ptr, count_ptr,
    M, N, K, K2,
    s_ab, s_am, s_ak, s_bb, s_bk, s_bn,
    s_cb, s_cm, s_ck, s_db, s_dk, s_dn,
    x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
    alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
    HAS_SECOND: tl.constexpr, HAS_BIAS: tl.constexpr,
    S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
    O0: tl.constexpr, O1: tl.constexpr, O2: tl.constexpr, O3: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
    SPLIT: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    pid, b, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    pm, pn = _tile(pid, M, N, BM, BN, GROUP)
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    chunk = tl.cdiv(tl.cdiv(K, BK), SPLIT) * BK
    k_lo = split * chunk
    k_hi = min(K, k_lo + chunk)
    acc = _dot_loop(
        acc, a_ptr, b_ptr, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, b, om, on, M, N, k_lo, k_hi, BK, EVEN_K, PRECISION
    )
    if HAS_SECOND:  # never split: the host offers SPLIT > 1 only for one product
        acc = _dot_loop(
            acc, c_ptr, d_ptr, s_cb, s_cm, s_ck, s_db, s_dk, s_dn, b, om, on, M, N, 0, K2, BK, EVEN_K, PRECISION
        )
    if SPLIT == 1:
        _finish(acc, b, om, on, M, N,
                x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
                alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
                HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3)  # fmt: skip
    else:  # into the tile's sums ([batch, M, N] float32, zeroed for the call); the last slice finishes
        inside = (om[:, None] < M) & (on[None, :] < N)
        sums = ws_ptr + b.to(tl.int64) * M * N + om[:, None] * N + on[None, :]
        tl.atomic_add(sums, acc, mask=inside, sem="relaxed")
        tl.debug_barrier()  # every thread's sums are in before the count says so
        count = count_ptr + b * tl.num_programs(0) + pid
        if tl.atomic_add(count, 1, sem="acq_rel") == SPLIT - 1:
            zeros = tl.zeros_like(acc)
            total = tl.atomic_add(sums, zeros, mask=inside, sem="relaxed")  # read where the atomics landed
            tl.store(sums, zeros, mask=inside)
            tl.store(count, 0)
            _finish(total, b, om, on, M, N,
                    x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
                    alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
                    HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3)  # fmt: skip


@triton.jit
def _tma_block(desc, b, r, c, ROWS: tl.constexpr, COLS: tl.constexpr, T: tl.constexpr, BATCHED: tl.constexpr):
    """The [ROWS, COLS] block at (r, c) of matrix ``b``: read as stored, or with ``T`` as the
    transpose of the [COLS, ROWS] block of a descriptor over the transposed matrix."""
    if BATCHED:
        x = desc.load([b, c, r]).reshape(COLS, ROWS).T if T else desc.load([b, r, c]).reshape(ROWS, COLS)
    else:
        x = desc.load([c, r]).T if T else desc.load([r, c])
    return x


@triton.jit
def _finish_halves(
    acc, b, om, n0, M, N,
    x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
    alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
    HAS_BIAS: tl.constexpr,
    S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
    O0: tl.constexpr, O1: tl.constexpr, O2: tl.constexpr, O3: tl.constexpr,
    W: tl.constexpr,
):  # fmt: skip
    """``_finish`` of the tile's left and right halves (columns ``n0`` on, ``W`` wide), one after
    the other, so that the epilogue holds half the temporaries."""
    left, right = acc.reshape(acc.shape[0], 2, W // 2).permute(0, 2, 1).split()
    on = n0 + tl.arange(0, W // 2)
    _finish(left, b, om, on, M, N,
            x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
            alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
            HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3)  # fmt: skip
    _finish(right, b, om, on + W // 2, M, N,
            x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
            alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
            HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3)  # fmt: skip


@triton.jit
def gemm_tma_kernel(
    a_desc, b_desc, M, N, K, BATCH,
    x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
    alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
    HAS_BIAS: tl.constexpr,
    S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
    O0: tl.constexpr, O1: tl.constexpr, O2: tl.constexpr, O3: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
    A_T: tl.constexpr, B_T: tl.constexpr, BATCHED: tl.constexpr, FLATTEN: tl.constexpr, PRECISION: tl.constexpr,
    SUBTILE: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    """A is read as [M, K] blocks, or with ``A_T`` as [K, M] blocks of its transpose (likewise B
    as [K, N] or [N, K]), with a leading batch index when ``BATCHED``; TMA fills what lies
    outside the tensor with zeros. Tiles are numbered over the batch too. With ``FLATTEN``
    (persistent programs) the tile and K loops are pipelined as one, so the next tile's loads
    overlap this tile's epilogue; with ``WS`` a producer warp loads while the others multiply
    and finish. ``SUBTILE`` (1, 2 or 4) finishes the tile in that many column slices."""
    per_batch = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), per_batch * BATCH, tl.num_programs(0), flatten=FLATTEN, warp_specialize=WS):
        b = tile // per_batch
        pm, pn = _tile(tile % per_batch, M, N, BM, BN, GROUP)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = _tma_block(a_desc, b, pm * BM, k, BM, BK, A_T, BATCHED)
            y = _tma_block(b_desc, b, k, pn * BN, BK, BN, B_T, BATCHED)
            acc = tl.dot(x, y, acc, input_precision=PRECISION)
        om = pm * BM + tl.arange(0, BM)
        if SUBTILE == 1:
            on = pn * BN + tl.arange(0, BN)
            _finish(acc, b, om, on, M, N,
                    x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
                    alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
                    HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3)  # fmt: skip
        elif SUBTILE == 2:
            _finish_halves(acc, b, om, pn * BN, M, N,
                           x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
                           alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
                           HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3, BN)  # fmt: skip
        else:
            left, right = acc.reshape(BM, 2, BN // 2).permute(0, 2, 1).split()
            _finish_halves(left, b, om, pn * BN, M, N,
                           x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
                           alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
                           HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3, BN // 2)  # fmt: skip
            _finish_halves(right, b, om, pn * BN + BN // 2, M, N,
                           x_ptr, s_xb, s_xm, s_xn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
                           alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
                           HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3, BN // 2)  # fmt: skip
