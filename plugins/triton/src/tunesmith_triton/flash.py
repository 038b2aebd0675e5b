"""Flash attention in Triton: torch's ``F.scaled_dot_product_attention`` (no dropout) forward and
backward, with grouped-query heads, a causal mask, and a boolean or additive bias.

- ``_fwd_kernel``: one program per block of query rows of one query head. The Q tile is loaded
  once; K and V tiles stream through an online softmax in float32 (base 2: the scale is folded
  with log2(e)). Key blocks past the causal diagonal are skipped; the blocks wholly below it (and
  wholly inside the keys) run without any mask, the rest with the causal and key-edge masks.
  It also stores each row's log-sum-exp (natural log) for the backward.
- ``_decode_kernel`` and ``_combine_kernel``: split-KV decoding, for few queries over many keys
  (``FlashConfig.split``). One program per ``split`` keys of one kv head takes every query of the
  kv head's group of query heads as its rows (K and V read once for the group); the second
  kernel weights each split's output by its share of the softmax's sum.
- The backward is FA2's: ``_bwd_delta_kernel`` (delta = rowsum(dO * O)), ``_bwd_kv_kernel`` (one
  program per key block of one kv head, looping over the group's query heads, so dK and dV need no
  atomics) and ``_bwd_q_kernel`` (one program per query block of one query head). Each recomputes
  P from the saved log-sum-exp.

A boolean mask costs only the key blocks it keeps (``SPAN``): each forward and dQ program finds
the first and last key that the mask keeps for its queries and loops over the blocks between, and
each dK/dV program likewise over the query blocks that keep any of its keys. A mask of one row for
every query (key padding: ``(B, 1, 1, S)``, or expanded from one, as ``transformers`` builds
padding for SDPA) is scanned in place; any other (causal and padding in one tensor, a sliding
window, documents) through its block map, one byte per 16 x 16 block, that ``_block_map_kernel``
writes first. The results are the same as without skipping: a skipped block would add exactly 0.
Where a mask row's kept keys run unbroken, the blocks it keeps whole are run without reading it.

A query row whose keys are all masked out (a boolean mask, or a bias of -inf) gets output 0, zero
gradients and a log-sum-exp of +inf (so that the backward's P = exp(s - lse) is 0 there), as
torch's math path does since 2.5 (softmax over -inf only gives 0).

``attention`` is differentiable through the custom ops ``tunesmith_triton::flash_fwd`` and
``tunesmith_triton::flash_bwd``, which torch.compile traces as opaque calls.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from typing import Any

import attrs
import torch
import triton
import triton.language as tl

from tunesmith.plugin import attention_output_like as output_like

try:  # host-side TMA descriptors (Triton 3.4 and later)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: the forward reads through pointers only
    TensorDescriptor = None

__all__ = ["FlashConfig", "attention", "backward", "configs", "forward"]

#: log2(e): scores are scaled by it so that the softmax runs on exp2
LOG2E = 1.4426950408889634


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# --------------------------------------------------------------------------------------- kernels


@triton.jit
def _load2(ptrs, r, R, c, C, MASK_R: tl.constexpr, MASK_C: tl.constexpr):
    """A 2-D tile, masked (zeros) where rows ``r >= R`` or columns ``c >= C`` when asked."""
    if MASK_R and MASK_C:
        x = tl.load(ptrs, mask=(r[:, None] < R) & (c[None, :] < C), other=0.0)
    elif MASK_R:
        x = tl.load(ptrs, mask=r[:, None] < R, other=0.0)
    elif MASK_C:
        x = tl.load(ptrs, mask=c[None, :] < C, other=0.0)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _keep(rows, cols, S, CAUSAL: tl.constexpr):
    """[rows, cols]: the key is inside the keys and, when causal, not after the query."""
    keep = cols[None, :] < S
    if CAUSAL:
        keep = keep & (cols[None, :] <= rows[:, None])
    return keep


#: a boolean mask's block map folds this many rows and keys into one entry (every tile is a multiple)
MAP_BLOCK = tl.constexpr(16)
#: bytes a span's scan reads at a time
SPAN_TILE = tl.constexpr(1024)
#: the kernels' SPAN: which key blocks a boolean mask lets them skip
SPAN_NONE, SPAN_ROW, SPAN_MAP = 0, 1, 2


@triton.jit
def _row_span(base, s_x, n):
    """(first, last) index of a row of ``n`` 0/1 bytes at ``base`` that is 1, (n, -1) where none is;
    and [full start, full end), the same run where every byte between them is 1, else empty."""
    offs = tl.arange(0, SPAN_TILE)
    first = tl.zeros([], dtype=tl.int32) + n  # a tensor even where n is specialised to 1
    last = tl.full([], -1, dtype=tl.int32)
    count = tl.zeros([], dtype=tl.int32)
    for start in range(0, n, SPAN_TILE):
        at = start + offs
        kept = tl.load(base + at.to(tl.int64) * s_x, mask=at < n, other=0) != 0
        first = tl.minimum(first, tl.min(tl.where(kept, at, n), 0))
        last = tl.maximum(last, tl.max(tl.where(kept, at, -1), 0))
        count += tl.sum(kept.to(tl.int32), 0)
    whole = count == last - first + 1
    return first, last, tl.where(whole, first, 0), tl.where(whole, last + 1, 0)


@triton.jit
def _span(base, s_along, s_across, n_along, n_across, ACROSS: tl.constexpr):
    """(first, last) index along a 2-D run of 0/1 bytes at ``base`` at which any of its first
    ``n_across`` (at most ACROSS, a power of two) lines across is 1: (n_along, -1) where none is."""
    across = tl.arange(0, ACROSS)
    offs = tl.arange(0, SPAN_TILE // ACROSS)
    first = tl.zeros([], dtype=tl.int32) + n_along  # a tensor even where n_along is specialised to 1
    last = tl.full([], -1, dtype=tl.int32)
    for start in range(0, n_along, SPAN_TILE // ACROSS):
        along = start + offs
        ptrs = base + along.to(tl.int64)[:, None] * s_along + across.to(tl.int64)[None, :] * s_across
        inside = (along[:, None] < n_along) & (across[None, :] < n_across)
        kept = tl.max(tl.load(ptrs, mask=inside, other=0).to(tl.int32), 1) > 0
        first = tl.minimum(first, tl.min(tl.where(kept, along, n_along), 0))
        last = tl.maximum(last, tl.max(tl.where(kept, along, -1), 0))
    return first, last


@triton.jit
def _key_span(
    x_base, s_xn, m_base, NL, NS, m0, S, BM: tl.constexpr, SPAN: tl.constexpr, MAP_ACROSS: tl.constexpr,
):  # fmt: skip
    """(first, last) key that the mask keeps for some query of rows [m0, m0 + BM), last -1 where it
    keeps none: from the one mask row at ``x_base`` (SPAN_ROW), or from the rows of the block map
    at ``m_base`` (SPAN_MAP: NL rows of NS entries; MAP_ACROSS, at least 2, covers BM rows). And,
    for SPAN_ROW, [full start, full end): the keys it keeps where they run unbroken, else empty."""
    if SPAN == 1:
        first, last, full_start, full_end = _row_span(x_base, s_xn, S)
    else:
        i0 = m0 // MAP_BLOCK
        map_rows = tl.minimum(BM // MAP_BLOCK, NL - i0)
        first, last = _span(m_base + i0 * NS, 1, NS, NS, map_rows, MAP_ACROSS)
        first = first * MAP_BLOCK
        last = tl.minimum(last * MAP_BLOCK + MAP_BLOCK - 1, S - 1)
        full_start, full_end = first, first
    return first, last, full_start, full_end


@triton.jit
def _query_span(
    x_base, s_xn, cols, m_base, NL, NS, n0, L,
    BM: tl.constexpr, BN: tl.constexpr, SPAN: tl.constexpr, MAP_ACROSS: tl.constexpr,
):  # fmt: skip
    """(start, stop) of the query blocks that keep any key ``cols`` of a key block at ``n0``: all
    of them or none for one mask row at ``x_base`` (SPAN_ROW); for SPAN_MAP, from the block map's
    columns at ``m_base``, the first block row that keeps one to the last. And, for SPAN_ROW, the
    queries that keep every one of the keys: all of them or none."""
    if SPAN == 1:
        x = (tl.load(x_base + cols.to(tl.int64) * s_xn) != 0).to(tl.int32)
        q_start = tl.zeros([], dtype=tl.int32)
        q_stop = tl.where(tl.max(x, 0) > 0, L, 0)
        full_start, full_end = q_start, tl.where(tl.min(x, 0) > 0, L, 0)
    else:
        j0 = n0 // MAP_BLOCK
        first, last = _span(m_base + j0, NS, 1, NL, tl.minimum(BN // MAP_BLOCK, NS - j0), MAP_ACROSS)
        q_start = (first * MAP_BLOCK // BM) * BM
        q_stop = tl.minimum(last * MAP_BLOCK + MAP_BLOCK, L)
        full_start, full_end = q_start, q_start
    return q_start, q_stop, full_start, full_end


@triton.jit
def _cut(first, last, lo, hi, BN: tl.constexpr):
    """A key loop's two ranges, [0, lo) without masks and [lo, hi) with them, cut to the key
    blocks from the one holding ``first`` to the one holding ``last``: (start, unmasked end,
    masked start, end), empty where ``last`` is -1."""
    start = (first // BN) * BN
    return start, tl.minimum(lo, last + 1), tl.maximum(lo, start), tl.minimum(hi, last + 1)


@triton.jit
def _key_ranges(
    x_base, s_xn, m_base, NL, NS, m0, S, lo, hi,
    BM: tl.constexpr, BN: tl.constexpr, SPAN: tl.constexpr, MAP_ACROSS: tl.constexpr,
):  # fmt: skip
    """The key loop of the query rows [m0, m0 + BM) (the forward's, dQ's), for ``_fwd_ranges``:
    (start, plain start, plain end, unmasked end, masked start, end). Without SPAN, [0, lo) without
    masks and [lo, hi) with them; with SPAN, cut to the key blocks the mask keeps (``_cut``), and
    for a mask row whose kept keys run unbroken, the whole blocks among them plain (no mask read)."""
    if SPAN:
        first, last, full_start, full_end = _key_span(x_base, s_xn, m_base, NL, NS, m0, S, BM, SPAN, MAP_ACROSS)
        start, unmasked_end, masked_start, end = _cut(first, last, lo, hi, BN)
        plain_start, plain_end = unmasked_end, unmasked_end
        if SPAN == 1:
            whole_start = tl.maximum(tl.cdiv(full_start, BN) * BN, start)
            whole_end = tl.minimum((full_end // BN) * BN, unmasked_end)
            some = whole_end > whole_start
            plain_start = tl.where(some, whole_start, unmasked_end)
            plain_end = tl.where(some, whole_end, unmasked_end)
    else:
        start, plain_start, plain_end, unmasked_end, masked_start, end = 0, lo, lo, lo, lo, hi
    return start, plain_start, plain_end, unmasked_end, masked_start, end


@triton.jit
def _block_map_kernel(
    x_ptr, m_ptr, s_xb, s_xh, s_xm, s_xn, HM, L, S, NL, NS,
    BLOCK: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """One row of a boolean mask's block map: 1 where a BLOCK x BLOCK block of the mask keeps any
    key. One program per block row of one (batch, head) of the mask (its own, not broadcast)."""
    i, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // HM).to(tl.int64), (bh % HM).to(tl.int64)
    rows = i * BLOCK + tl.arange(0, BLOCK)
    x_rows = x_ptr + b * s_xb + h * s_xh + rows.to(tl.int64)[:, None] * s_xm
    m_row = m_ptr + (bh.to(tl.int64) * NL + i) * NS
    offs = tl.arange(0, CHUNK)
    for start in range(0, S, CHUNK):
        cols = start + offs
        x = tl.load(x_rows + cols.to(tl.int64)[None, :] * s_xn, mask=(rows[:, None] < L) & (cols[None, :] < S), other=0)
        keys = tl.max((x != 0).to(tl.int32), 0)
        blocks = tl.max(tl.reshape(keys, (CHUNK // BLOCK, BLOCK)), 1)
        j = start // BLOCK + tl.arange(0, CHUNK // BLOCK)
        tl.store(m_row + j, blocks.to(tl.uint8), mask=j < NS)


@triton.jit
def _aligned(stride, ALIGN: tl.constexpr):
    """``stride`` (a multiple of ALIGN, as the launcher checked) written so that the compiler knows
    it: offsets built from it then load 16 bytes at a time (heads of 40 or 80 are not multiples of
    16 elements, the only strides Triton's launcher marks)."""
    if ALIGN > 1:
        stride = (stride // ALIGN) * ALIGN
    return stride


@triton.jit
def _fwd_blocks(
    acc, l_i, m_i, q, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv, b, kvh,
    s_kn, s_vn, s_xm, s_xn, S, qk_scale, lo, hi,
    HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BN: tl.constexpr,
    MASK: tl.constexpr, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr,
    SCALE_FIRST: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr, EMPTY: tl.constexpr,
):  # fmt: skip
    """The online softmax over key blocks [lo, hi): with MASK, the key-edge and causal masks. With
    TMA, ``k_base`` and ``v_base`` are descriptors of K and V (zeros past their edges). EMPTY: a
    row may keep no key of a block (a mask or bias), so its running max may still be -inf."""
    if not TMA:
        k_ptrs = k_base + (lo + offs_n).to(tl.int64)[None, :] * s_kn + offs_d[:, None]
        v_ptrs = v_base + (lo + offs_n).to(tl.int64)[:, None] * s_vn + offs_dv[None, :]
    x_rows = x_base + rows.to(tl.int64)[:, None] * s_xm  # the bias tile's pointers are made per block, only with a bias
    for start in range(lo, hi, BN):
        cols = start + offs_n
        if TMA:
            k = tl.trans(k_base.load([b, kvh, start, 0]).reshape(BN, BLOCK_D))
        else:
            k = _load2(k_ptrs, offs_d, HEAD_D, cols, S, PAD_D, MASK)
        qk = tl.dot(q, k, input_precision=PRECISION)
        if SCALE_FIRST:  # an additive bias (or a scale <= 0): scale, add, then mask
            s = qk * qk_scale
            if HAS_BIAS:
                x = _load2(x_rows + cols.to(tl.int64)[None, :] * s_xn, rows, 0, cols, S, False, MASK)
                if BIAS_BOOL:
                    s = tl.where(x != 0, s, float("-inf"))
                else:
                    s += x.to(tl.float32) * 1.4426950408889634
            if MASK:
                s = tl.where(_keep(offs_m, cols, S, CAUSAL), s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = m_new
            if EMPTY:  # a row masked so far: subtract 0, not -inf (no NaN)
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(s - m_use[:, None])
        else:  # mask the raw scores; the scale goes into one multiply-add with the row max
            if HAS_BIAS:  # (a boolean mask: an additive bias scales first)
                x = _load2(x_rows + cols.to(tl.int64)[None, :] * s_xn, rows, 0, cols, S, False, MASK)
                qk = tl.where(x != 0, qk, float("-inf"))
            if MASK:
                qk = tl.where(_keep(offs_m, cols, S, CAUSAL), qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_use = m_new
            if EMPTY:
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(qk * qk_scale - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        if TMA:
            v = v_base.load([b, kvh, start, 0]).reshape(BN, BLOCK_DV)
        else:
            v = _load2(v_ptrs, cols, S, offs_dv, HEAD_DV, MASK, PAD_DV)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
        if not TMA:
            k_ptrs += BN * s_kn
            v_ptrs += BN * s_vn
    return acc, l_i, m_i


@triton.jit
def _fwd_ranges(
    acc, l_i, m_i, q, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv, b, kvh,
    s_kn, s_vn, s_xm, s_xn, S, qk_scale, start, plain_start, plain_end, unmasked_end, masked_start, end,
    HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr,
    BIAS_BOOL: tl.constexpr, SCALE_FIRST: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
    EMPTY: tl.constexpr, PLAIN: tl.constexpr,
):  # fmt: skip
    """``_fwd_blocks`` over key blocks [start, unmasked_end) without the causal and edge masks (with
    PLAIN, [plain_start, plain_end) of them without the bias either: keys a boolean mask keeps for
    every row), then over [masked_start, end) with them."""
    acc, l_i, m_i = _fwd_blocks(
        acc, l_i, m_i, q, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv, b, kvh,
        s_kn, s_vn, s_xm, s_xn, S, qk_scale, start, plain_start,
        HEAD_D, HEAD_DV, BLOCK_D, BLOCK_DV, PAD_D, PAD_DV, BN, False, CAUSAL, HAS_BIAS, BIAS_BOOL, SCALE_FIRST,
        PRECISION, TMA, EMPTY,
    )  # fmt: skip
    if PLAIN:
        acc, l_i, m_i = _fwd_blocks(
            acc, l_i, m_i, q, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv, b, kvh,
            s_kn, s_vn, s_xm, s_xn, S, qk_scale, plain_start, plain_end,
            HEAD_D, HEAD_DV, BLOCK_D, BLOCK_DV, PAD_D, PAD_DV, BN, False, CAUSAL, False, BIAS_BOOL, SCALE_FIRST,
            PRECISION, TMA, False,
        )  # fmt: skip
        acc, l_i, m_i = _fwd_blocks(
            acc, l_i, m_i, q, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv, b, kvh,
            s_kn, s_vn, s_xm, s_xn, S, qk_scale, plain_end, unmasked_end,
            HEAD_D, HEAD_DV, BLOCK_D, BLOCK_DV, PAD_D, PAD_DV, BN, False, CAUSAL, HAS_BIAS, BIAS_BOOL, SCALE_FIRST,
            PRECISION, TMA, EMPTY,
        )  # fmt: skip
    return _fwd_blocks(
        acc, l_i, m_i, q, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv, b, kvh,
        s_kn, s_vn, s_xm, s_xn, S, qk_scale, masked_start, end,
        HEAD_D, HEAD_DV, BLOCK_D, BLOCK_DV, PAD_D, PAD_DV, BN, True, CAUSAL, HAS_BIAS, BIAS_BOOL, SCALE_FIRST,
        PRECISION, TMA, EMPTY,
    )  # fmt: skip


@triton.jit
def _fwd_kernel(
    q_ptr, k_ptr, v_ptr, x_ptr, m_ptr, o_ptr, lse_ptr,
    s_qb, s_qh, s_qm, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_xb, s_xh, s_xm, s_xn, s_mb, s_mh, s_ob, s_oh, s_om,
    H, L, S, NL, NS, qk_scale,
    GROUP: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr, SCALE_FIRST: tl.constexpr,
    PRECISION: tl.constexpr, ALIGN: tl.constexpr, TMA: tl.constexpr, SPAN: tl.constexpr,
    MAP_ACROSS: tl.constexpr,
):  # fmt: skip
    """With TMA, ``q_ptr``, ``k_ptr`` and ``v_ptr`` are (B, H, L, D) descriptors, not pointers.
    With SPAN, the key blocks before the first key that a boolean mask keeps for the block's
    queries and after the last are skipped (``m_ptr``: the block map, for SPAN_MAP)."""
    s_qb, s_qh, s_qm = _aligned(s_qb, ALIGN), _aligned(s_qh, ALIGN), _aligned(s_qm, ALIGN)
    s_kb, s_kh, s_kn = _aligned(s_kb, ALIGN), _aligned(s_kh, ALIGN), _aligned(s_kn, ALIGN)
    s_vb, s_vh, s_vn = _aligned(s_vb, ALIGN), _aligned(s_vh, ALIGN), _aligned(s_vn, ALIGN)
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    kvh = h // GROUP
    m0 = pid_m * BM
    offs_m = m0 + tl.arange(0, BM)
    rows = tl.minimum(offs_m, L - 1)  # rows past the end read the last row again (never stored)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    b64, h64, kvh64 = b.to(tl.int64), h.to(tl.int64), kvh.to(tl.int64)
    x_base = x_ptr + b64 * s_xb + h64 * s_xh
    if TMA:
        k_base, v_base = k_ptr, v_ptr
        q = q_ptr.load([b, h, m0, 0]).reshape(BM, BLOCK_D)
    else:
        q_base = q_ptr + b64 * s_qb + h64 * s_qh
        k_base = k_ptr + b64 * s_kb + kvh64 * s_kh
        v_base = v_ptr + b64 * s_vb + kvh64 * s_vh
        q = _load2(q_base + rows.to(tl.int64)[:, None] * s_qm + offs_d[None, :], rows, L, offs_d, HEAD_D, False, PAD_D)

    acc = tl.zeros((BM, BLOCK_DV), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    whole = (S // BN) * BN  # key blocks inside the keys
    if CAUSAL:  # keys after the block's last row are skipped; blocks before its first need no mask
        hi = tl.minimum(tl.minimum(m0 + BM, L), S)
        lo = tl.minimum(((m0 + 1) // BN) * BN, whole)
    else:
        hi = S
        lo = whole
    start, plain_start, plain_end, unmasked_end, masked_start, end = _key_ranges(
        x_base, s_xn, m_ptr + b64 * s_mb + h64 * s_mh, NL, NS, m0, S, lo, hi, BM, BN, SPAN, MAP_ACROSS
    )
    acc, l_i, m_i = _fwd_ranges(
        acc, l_i, m_i, q, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv, b, kvh,
        s_kn, s_vn, s_xm, s_xn, S, qk_scale, start, plain_start, plain_end, unmasked_end, masked_start, end,
        HEAD_D, HEAD_DV, BLOCK_D, BLOCK_DV, PAD_D, PAD_DV, BN, CAUSAL, HAS_BIAS, BIAS_BOOL, SCALE_FIRST,
        PRECISION, TMA, HAS_BIAS, SPAN == 1,
    )  # fmt: skip
    if HAS_BIAS:  # rows with every key masked: output 0, log-sum-exp +inf
        empty = l_i == 0.0
        out = acc / tl.where(empty, 1.0, l_i)[:, None]
        lse = tl.where(empty, float("inf"), (m_i + tl.log2(l_i)) * 0.6931471805599453)
    else:
        out = acc / l_i[:, None]
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
    o_ptrs = o_ptr + b64 * s_ob + h64 * s_oh + offs_m.to(tl.int64)[:, None] * s_om + offs_dv[None, :]
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < L) & (offs_dv[None, :] < HEAD_DV))
    tl.store(lse_ptr + bh.to(tl.int64) * L + offs_m, lse, mask=offs_m < L)


@triton.jit
def _decode_kernel(
    q_ptr, k_ptr, v_ptr, x_ptr, po_ptr, plse_ptr,
    s_qb, s_qh, s_qm, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_xb, s_xh, s_xm, s_xn,
    H, HKV, L, S, SPLITS, qk_scale,
    GROUP: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    SPLIT: tl.constexpr, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr,
    SCALE_FIRST: tl.constexpr, PRECISION: tl.constexpr, ALIGN: tl.constexpr, TMA: tl.constexpr, SPAN: tl.constexpr,
    EMPTY: tl.constexpr,
):  # fmt: skip
    """Split-KV decoding: one program per SPLIT keys of one kv head, for every query of its
    group of query heads at once (row r is query r % L of head r // L: K and V are read once for
    the group). Writes each row's output over its keys, normalised, and the log-sum-exp (base 2,
    -inf where it keeps no key) to the split's slot of ``po_ptr`` and ``plse_ptr``, for
    ``_combine_kernel``. With SPAN (one boolean mask row for every query), the key blocks outside
    the span the group's heads keep are skipped."""
    s_qb, s_qh, s_qm = _aligned(s_qb, ALIGN), _aligned(s_qh, ALIGN), _aligned(s_qm, ALIGN)
    s_kb, s_kh, s_kn = _aligned(s_kb, ALIGN), _aligned(s_kh, ALIGN), _aligned(s_kn, ALIGN)
    s_vb, s_vh, s_vn = _aligned(s_vb, ALIGN), _aligned(s_vh, ALIGN), _aligned(s_vn, ALIGN)
    split, bkv = tl.program_id(0), tl.program_id(1)
    b, kvh = bkv // HKV, bkv % HKV
    r = tl.arange(0, BM)
    inside = r < GROUP * L
    g = tl.minimum(r // L, GROUP - 1)  # rows past the group read its last head again (never stored)
    queries = r % L
    h = kvh * GROUP + g
    b64, h64, kvh64 = b.to(tl.int64), h.to(tl.int64), kvh.to(tl.int64)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q_rows = q_ptr + b64 * s_qb + h64[:, None] * s_qh + queries.to(tl.int64)[:, None] * s_qm
    q = _load2(q_rows + offs_d[None, :], r, 0, offs_d, HEAD_D, False, PAD_D)
    x_base = x_ptr + b64 * s_xb + h64[:, None] * s_xh  # a [BM, 1] block of pointers: each row's head
    if TMA:
        k_base, v_base = k_ptr, v_ptr
    else:
        k_base = k_ptr + b64 * s_kb + kvh64 * s_kh
        v_base = v_ptr + b64 * s_vb + kvh64 * s_vh
    s0 = split * SPLIT
    s1 = tl.minimum(s0 + SPLIT, S)
    whole = s0 + ((s1 - s0) // BN) * BN  # blocks inside the split and the keys
    lo, hi = whole, s1
    if CAUSAL:  # torch's top-left triangle: query i keeps keys j <= i < L; every block is masked
        lo = s0
        hi = tl.minimum(s1, L)
    start, unmasked_end, masked_start, end = s0, lo, lo, hi
    if SPAN:  # the keys of this split that any head of the group keeps
        first = tl.zeros([], dtype=tl.int32) + SPLIT
        last = tl.full([], -1, dtype=tl.int32)
        for gg in range(GROUP):
            row = x_ptr + b64 * s_xb + (kvh64 * GROUP + gg) * s_xh + s0.to(tl.int64) * s_xn
            f, e, _, _ = _row_span(row, s_xn, s1 - s0)
            first, last = tl.minimum(first, f), tl.maximum(last, e)
        start, unmasked_end, masked_start, end = _cut(s0 + first, s0 + last, lo, hi, BN)
    acc = tl.zeros((BM, BLOCK_DV), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    acc, l_i, m_i = _fwd_ranges(
        acc, l_i, m_i, q, k_base, v_base, x_base, queries, queries, offs_n, offs_d, offs_dv, b, kvh,
        s_kn, s_vn, s_xm, s_xn, S, qk_scale, start, unmasked_end, unmasked_end, unmasked_end, masked_start, end,
        HEAD_D, HEAD_DV, BLOCK_D, BLOCK_DV, PAD_D, PAD_DV, BN, CAUSAL, HAS_BIAS, BIAS_BOOL, SCALE_FIRST,
        PRECISION, TMA, EMPTY, False,
    )  # fmt: skip
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    slot = ((b64 * H + h64) * L + queries) * SPLITS + split
    stored = inside[:, None] & (offs_dv[None, :] < HEAD_DV)
    tl.store(po_ptr + slot[:, None] * HEAD_DV + offs_dv[None, :], out, mask=stored)
    tl.store(plse_ptr + slot, lse2, mask=inside)


@triton.jit
def _combine_kernel(
    po_ptr, plse_ptr, o_ptr, lse_ptr, s_ob, s_oh, s_om, H, L, SPLITS,
    HEAD_DV: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    """One query row of split-KV decoding: its splits' outputs weighted by their share of the
    softmax's sum (output 0 and log-sum-exp +inf, natural log, where no split keeps a key)."""
    row = tl.program_id(0).to(tl.int64)
    b, h, m = row // (H * L), (row // L) % H, row % L
    parts = tl.arange(0, BLOCK_S)
    offs_dv = tl.arange(0, BLOCK_DV)
    lse2 = tl.load(plse_ptr + row * SPLITS + parts, mask=parts < SPLITS, other=float("-inf"))
    top = tl.max(lse2, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    weight = tl.exp2(lse2 - top)
    total = tl.sum(weight, 0)
    part = tl.load(
        po_ptr + (row * SPLITS + parts)[:, None] * HEAD_DV + offs_dv[None, :],
        mask=(parts[:, None] < SPLITS) & (offs_dv[None, :] < HEAD_DV),
        other=0.0,
    )
    out = tl.sum(part * weight[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    lse = tl.where(total == 0.0, float("inf"), (top + tl.log2(total)) * 0.6931471805599453)
    o_ptrs = o_ptr + b * s_ob + h * s_oh + m * s_om + offs_dv
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=offs_dv < HEAD_DV)
    tl.store(lse_ptr + row, lse)


@triton.jit
def _bwd_delta_kernel(
    o_ptr, do_ptr, delta_ptr, s_ob, s_oh, s_om, s_db, s_dh, s_dm, H, L,
    HEAD_DV: tl.constexpr, BLOCK_DV: tl.constexpr, BM: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    """delta = rowsum(dO * O), float32, one value per query row."""
    s_ob, s_oh, s_om = _aligned(s_ob, ALIGN), _aligned(s_oh, ALIGN), _aligned(s_om, ALIGN)
    s_db, s_dh, s_dm = _aligned(s_db, ALIGN), _aligned(s_dh, ALIGN), _aligned(s_dm, ALIGN)
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask = (offs_m[:, None] < L) & (offs_dv[None, :] < HEAD_DV)
    o = tl.load(
        o_ptr + b * s_ob + h * s_oh + offs_m.to(tl.int64)[:, None] * s_om + offs_dv[None, :], mask=mask, other=0.0
    )
    do = tl.load(
        do_ptr + b * s_db + h * s_dh + offs_m.to(tl.int64)[:, None] * s_dm + offs_dv[None, :], mask=mask, other=0.0
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(delta_ptr + bh.to(tl.int64) * L + offs_m, delta, mask=offs_m < L)


@triton.jit
def _bwd_kv_blocks(
    dk, dv, k, v, q_base, do_base, lse_base, dl_base, x_base, offs_n, cols, offs_m, offs_d, offs_dv,
    s_qm, s_dom, s_xm, s_xn, L, qk_scale, lo, hi, hole_lo, hole_hi,
    HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BM: tl.constexpr,
    MASK_M: tl.constexpr, MASK_CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """dK and dV of one key block from query blocks [lo, hi) but [hole_lo, hole_hi) (empty, or
    whole blocks inside), transposed ([keys, queries]) so that no accumulator is transposed. With
    MASK_M, rows past L read lse = +inf (P = 0 there)."""
    hole = hole_hi - hole_lo
    for at in range(lo, hi - hole, BM):
        start = tl.where(at >= hole_lo, at + hole, at)
        rows = start + offs_m
        qT = _load2(
            q_base + rows.to(tl.int64)[None, :] * s_qm + offs_d[:, None], offs_d, HEAD_D, rows, L, PAD_D, MASK_M
        )
        do = _load2(
            do_base + rows.to(tl.int64)[:, None] * s_dom + offs_dv[None, :], rows, L, offs_dv, HEAD_DV, MASK_M, PAD_DV
        )
        if MASK_M:
            lse = tl.load(lse_base + rows, mask=rows < L, other=float("inf"))
            dl = tl.load(dl_base + rows, mask=rows < L, other=0.0)
        else:
            lse = tl.load(lse_base + rows)
            dl = tl.load(dl_base + rows)
        qkT = tl.dot(k, qT, input_precision=PRECISION)
        lse2 = lse * 1.4426950408889634
        if HAS_BIAS:
            xT = _load2(
                x_base + cols.to(tl.int64)[:, None] * s_xn + rows.to(tl.int64)[None, :] * s_xm,
                cols,
                0,
                rows,
                L,
                False,
                MASK_M,
            )
            if BIAS_BOOL:
                pT = tl.where(xT != 0, tl.exp2(qkT * qk_scale - lse2[None, :]), 0.0)
            else:
                pT = tl.exp2(qkT * qk_scale + xT.to(tl.float32) * 1.4426950408889634 - lse2[None, :])
        else:
            pT = tl.exp2(qkT * qk_scale - lse2[None, :])
        if MASK_CAUSAL:
            pT = tl.where(rows[None, :] >= offs_n[:, None], pT, 0.0)
        dv = tl.dot(pT.to(do.dtype), do, dv, input_precision=PRECISION)
        dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        dsT = pT * (dpT - dl[None, :])
        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _bwd_kv_kernel(
    q_ptr, k_ptr, v_ptr, x_ptr, m_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    s_qb, s_qh, s_qm, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_xb, s_xh, s_xm, s_xn, s_mb, s_mh, s_dob, s_doh, s_dom,
    H, HKV, L, S, NL, NS, scale, qk_scale,
    GROUP: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr, PRECISION: tl.constexpr,
    ALIGN: tl.constexpr, SPAN: tl.constexpr, MAP_ACROSS: tl.constexpr,
):  # fmt: skip
    """dK and dV of one key block of one kv head. With SPAN, only the query blocks from the first
    query for which a boolean mask keeps any of the block's keys to the last are read."""
    s_qb, s_qh, s_qm = _aligned(s_qb, ALIGN), _aligned(s_qh, ALIGN), _aligned(s_qm, ALIGN)
    s_kb, s_kh, s_kn = _aligned(s_kb, ALIGN), _aligned(s_kh, ALIGN), _aligned(s_kn, ALIGN)
    s_vb, s_vh, s_vn = _aligned(s_vb, ALIGN), _aligned(s_vh, ALIGN), _aligned(s_vn, ALIGN)
    s_dob, s_doh, s_dom = _aligned(s_dob, ALIGN), _aligned(s_doh, ALIGN), _aligned(s_dom, ALIGN)
    pid_n, bkv = tl.program_id(0), tl.program_id(1)
    b, kvh = bkv // HKV, bkv % HKV
    n0 = pid_n * BN
    offs_n = n0 + tl.arange(0, BN)
    cols = tl.minimum(offs_n, S - 1)  # keys past the end read the last key again (never stored)
    offs_m = tl.arange(0, BM)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    b64, kvh64 = b.to(tl.int64), kvh.to(tl.int64)
    keys = cols.to(tl.int64)[:, None]
    k = _load2(k_ptr + b64 * s_kb + kvh64 * s_kh + keys * s_kn + offs_d[None, :], cols, S, offs_d, HEAD_D, False, PAD_D)
    v_ptrs = v_ptr + b64 * s_vb + kvh64 * s_vh + keys * s_vn + offs_dv[None, :]
    v = _load2(v_ptrs, cols, S, offs_dv, HEAD_DV, False, PAD_DV)
    dk = tl.zeros((BN, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BN, BLOCK_DV), dtype=tl.float32)
    whole = (L // BM) * BM  # query blocks inside the queries
    if CAUSAL:  # queries before the block's first key are skipped; from its last key on, no mask
        lo = (n0 // BM) * BM
        last = tl.minimum(n0 + BN, S) - 1
        full = tl.cdiv(last, BM) * BM
    else:
        lo = 0
        full = 0
    for g in range(GROUP):
        h64 = kvh64 * GROUP + g
        bh = b64 * H + h64
        q_base = q_ptr + b64 * s_qb + h64 * s_qh
        do_base = do_ptr + b64 * s_dob + h64 * s_doh
        x_base = x_ptr + b64 * s_xb + h64 * s_xh
        lse_base = lse_ptr + bh * L
        dl_base = delta_ptr + bh * L
        # query blocks [lo, full) under the causal mask, [full, whole) unmasked, the rest under the edge's
        causal_lo, causal_hi, plain_lo, plain_hi = lo, tl.minimum(full, L), full, whole
        edge_lo, edge_hi = tl.maximum(full, whole), L
        hole_lo, hole_hi = plain_hi, plain_hi  # the plain query blocks that keep every key of the block
        if SPAN:
            m_base = m_ptr + b64 * s_mb + h64 * s_mh
            q_start, q_stop, full_start, full_end = _query_span(
                x_base, s_xn, cols, m_base, NL, NS, n0, L, BM, BN, SPAN, MAP_ACROSS
            )
            causal_lo, causal_hi = tl.maximum(causal_lo, q_start), tl.minimum(causal_hi, q_stop)
            plain_lo, plain_hi = tl.maximum(plain_lo, q_start), tl.minimum(plain_hi, q_stop)
            edge_lo, edge_hi = tl.maximum(edge_lo, q_start), tl.minimum(edge_hi, q_stop)
        if SPAN == 1:
            whole_lo = tl.maximum(tl.cdiv(full_start, BM) * BM, plain_lo)
            whole_hi = tl.minimum((full_end // BM) * BM, plain_hi)
            some = whole_hi > whole_lo
            hole_lo, hole_hi = tl.where(some, whole_lo, plain_hi), tl.where(some, whole_hi, plain_hi)
        if CAUSAL:
            dk, dv = _bwd_kv_blocks(
                dk, dv, k, v, q_base, do_base, lse_base, dl_base, x_base, offs_n, cols, offs_m, offs_d, offs_dv,
                s_qm, s_dom, s_xm, s_xn, L, qk_scale, causal_lo, causal_hi, causal_hi, causal_hi,
                HEAD_D, HEAD_DV, PAD_D, PAD_DV, BM, True, True, HAS_BIAS, BIAS_BOOL, PRECISION,
            )  # fmt: skip
        dk, dv = _bwd_kv_blocks(
            dk, dv, k, v, q_base, do_base, lse_base, dl_base, x_base, offs_n, cols, offs_m, offs_d, offs_dv,
            s_qm, s_dom, s_xm, s_xn, L, qk_scale, plain_lo, plain_hi, hole_lo, hole_hi,
            HEAD_D, HEAD_DV, PAD_D, PAD_DV, BM, False, False, HAS_BIAS, BIAS_BOOL, PRECISION,
        )  # fmt: skip
        if SPAN == 1:  # the hole, without reading the mask
            dk, dv = _bwd_kv_blocks(
                dk, dv, k, v, q_base, do_base, lse_base, dl_base, x_base, offs_n, cols, offs_m, offs_d, offs_dv,
                s_qm, s_dom, s_xm, s_xn, L, qk_scale, hole_lo, hole_hi, hole_hi, hole_hi,
                HEAD_D, HEAD_DV, PAD_D, PAD_DV, BM, False, False, False, BIAS_BOOL, PRECISION,
            )  # fmt: skip
        dk, dv = _bwd_kv_blocks(
            dk, dv, k, v, q_base, do_base, lse_base, dl_base, x_base, offs_n, cols, offs_m, offs_d, offs_dv,
            s_qm, s_dom, s_xm, s_xn, L, qk_scale, edge_lo, edge_hi, edge_hi, edge_hi,
            HEAD_D, HEAD_DV, PAD_D, PAD_DV, BM, True, False, HAS_BIAS, BIAS_BOOL, PRECISION,
        )  # fmt: skip
    row0 = bkv.to(tl.int64) * S
    inside = offs_n[:, None] < S
    dk_ptrs = dk_ptr + (row0 + offs_n)[:, None] * HEAD_D + offs_d[None, :]
    tl.store(dk_ptrs, (dk * scale).to(dk_ptr.dtype.element_ty), mask=inside & (offs_d[None, :] < HEAD_D))
    dv_ptrs = dv_ptr + (row0 + offs_n)[:, None] * HEAD_DV + offs_dv[None, :]
    tl.store(dv_ptrs, dv.to(dv_ptr.dtype.element_ty), mask=inside & (offs_dv[None, :] < HEAD_DV))


@triton.jit
def _bwd_q_blocks(
    dq, q, do, lse2, dl, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv,
    s_kn, s_vn, s_xm, s_xn, S, qk_scale, lo, hi,
    HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BN: tl.constexpr,
    MASK: tl.constexpr, CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """dQ of one query block from key blocks [lo, hi): with MASK, the key-edge and causal masks."""
    k_ptrs = k_base + (lo + offs_n).to(tl.int64)[None, :] * s_kn + offs_d[:, None]
    v_ptrs = v_base + (lo + offs_n).to(tl.int64)[None, :] * s_vn + offs_dv[:, None]
    x_rows = x_base + rows.to(tl.int64)[:, None] * s_xm
    for start in range(lo, hi, BN):
        cols = start + offs_n
        kT = _load2(k_ptrs, offs_d, HEAD_D, cols, S, PAD_D, MASK)
        vT = _load2(v_ptrs, offs_dv, HEAD_DV, cols, S, PAD_DV, MASK)
        qk = tl.dot(q, kT, input_precision=PRECISION)
        if HAS_BIAS:
            x = _load2(x_rows + cols.to(tl.int64)[None, :] * s_xn, rows, 0, cols, S, False, MASK)
            if BIAS_BOOL:
                p = tl.where(x != 0, tl.exp2(qk * qk_scale - lse2[:, None]), 0.0)
            else:
                p = tl.exp2(qk * qk_scale + x.to(tl.float32) * 1.4426950408889634 - lse2[:, None])
        else:
            p = tl.exp2(qk * qk_scale - lse2[:, None])
        if MASK:
            p = tl.where(_keep(offs_m, cols, S, CAUSAL), p, 0.0)
        dp = tl.dot(do, vT, input_precision=PRECISION)
        ds = p * (dp - dl[:, None])
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq, input_precision=PRECISION)
        k_ptrs += BN * s_kn
        v_ptrs += BN * s_vn
    return dq


@triton.jit
def _bwd_q_kernel(
    q_ptr, k_ptr, v_ptr, x_ptr, m_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    s_qb, s_qh, s_qm, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_xb, s_xh, s_xm, s_xn, s_mb, s_mh, s_dob, s_doh, s_dom,
    H, L, S, NL, NS, scale, qk_scale,
    GROUP: tl.constexpr, HEAD_D: tl.constexpr, HEAD_DV: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr, PRECISION: tl.constexpr,
    ALIGN: tl.constexpr, SPAN: tl.constexpr, MAP_ACROSS: tl.constexpr,
):  # fmt: skip
    s_qb, s_qh, s_qm = _aligned(s_qb, ALIGN), _aligned(s_qh, ALIGN), _aligned(s_qm, ALIGN)
    s_kb, s_kh, s_kn = _aligned(s_kb, ALIGN), _aligned(s_kh, ALIGN), _aligned(s_kn, ALIGN)
    s_vb, s_vh, s_vn = _aligned(s_vb, ALIGN), _aligned(s_vh, ALIGN), _aligned(s_vn, ALIGN)
    s_dob, s_doh, s_dom = _aligned(s_dob, ALIGN), _aligned(s_doh, ALIGN), _aligned(s_dom, ALIGN)
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    kvh = h // GROUP
    m0 = pid_m * BM
    offs_m = m0 + tl.arange(0, BM)
    rows = tl.minimum(offs_m, L - 1)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    b64, h64, kvh64 = b.to(tl.int64), h.to(tl.int64), kvh.to(tl.int64)
    queries = rows.to(tl.int64)[:, None]
    q = _load2(
        q_ptr + b64 * s_qb + h64 * s_qh + queries * s_qm + offs_d[None, :], rows, L, offs_d, HEAD_D, False, PAD_D
    )
    do_ptrs = do_ptr + b64 * s_dob + h64 * s_doh + queries * s_dom + offs_dv[None, :]
    do = _load2(do_ptrs, rows, L, offs_dv, HEAD_DV, False, PAD_DV)
    row0 = bh.to(tl.int64) * L
    lse2 = tl.load(lse_ptr + row0 + rows) * 1.4426950408889634
    dl = tl.load(delta_ptr + row0 + rows)
    k_base = k_ptr + b64 * s_kb + kvh64 * s_kh
    v_base = v_ptr + b64 * s_vb + kvh64 * s_vh
    x_base = x_ptr + b64 * s_xb + h64 * s_xh
    dq = tl.zeros((BM, BLOCK_D), dtype=tl.float32)
    whole = (S // BN) * BN
    if CAUSAL:
        hi = tl.minimum(tl.minimum(m0 + BM, L), S)
        lo = tl.minimum(((m0 + 1) // BN) * BN, whole)
    else:
        hi = S
        lo = whole
    start, plain_start, plain_end, unmasked_end, masked_start, end = _key_ranges(
        x_base, s_xn, m_ptr + b64 * s_mb + h64 * s_mh, NL, NS, m0, S, lo, hi, BM, BN, SPAN, MAP_ACROSS
    )
    dq = _bwd_q_blocks(
        dq, q, do, lse2, dl, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv,
        s_kn, s_vn, s_xm, s_xn, S, qk_scale, start, plain_start,
        HEAD_D, HEAD_DV, PAD_D, PAD_DV, BN, False, CAUSAL, HAS_BIAS, BIAS_BOOL, PRECISION,
    )  # fmt: skip
    if SPAN == 1:
        dq = _bwd_q_blocks(
            dq, q, do, lse2, dl, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv,
            s_kn, s_vn, s_xm, s_xn, S, qk_scale, plain_start, plain_end,
            HEAD_D, HEAD_DV, PAD_D, PAD_DV, BN, False, CAUSAL, False, BIAS_BOOL, PRECISION,
        )  # fmt: skip
        dq = _bwd_q_blocks(
            dq, q, do, lse2, dl, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv,
            s_kn, s_vn, s_xm, s_xn, S, qk_scale, plain_end, unmasked_end,
            HEAD_D, HEAD_DV, PAD_D, PAD_DV, BN, False, CAUSAL, HAS_BIAS, BIAS_BOOL, PRECISION,
        )  # fmt: skip
    dq = _bwd_q_blocks(
        dq, q, do, lse2, dl, k_base, v_base, x_base, offs_m, rows, offs_n, offs_d, offs_dv,
        s_kn, s_vn, s_xm, s_xn, S, qk_scale, masked_start, end,
        HEAD_D, HEAD_DV, PAD_D, PAD_DV, BN, True, CAUSAL, HAS_BIAS, BIAS_BOOL, PRECISION,
    )  # fmt: skip
    dq_ptrs = dq_ptr + (row0 + offs_m)[:, None] * HEAD_D + offs_d[None, :]
    tl.store(dq_ptrs, (dq * scale).to(dq_ptr.dtype.element_ty), mask=(offs_m[:, None] < L) & (offs_d[None, :] < HEAD_D))


# --------------------------------------------------------------------------------------- configs

_CONFIG_TEXT = re.compile(r"(\d+)x(\d+)w(\d+)s(\d+)-(\d+)x(\d+)w(\d+)s(\d+)(t?)(?:k(\d+))?")


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@attrs.frozen
class FlashConfig:
    """Tiles, warps and pipeline stages of the forward kernel and of the backward kernels.

    The backward's ``bwd_block_n`` is the block a program keeps (keys in the dK/dV kernel, queries
    in the dQ kernel) and ``bwd_block_m`` the block it streams (queries for dK/dV, keys for dQ):
    both kernels keep the larger tile and loop over the smaller one, as FA2 does. ``tma`` 1: the
    forward reads Q, K and V through TMA descriptors, on GPUs that have them (sm90 and later) and
    where every stride allows (else it reads them as the pointer path does). ``split`` above 0:
    the forward is split-KV decoding (``_decode_kernel``): each program takes ``split`` keys of one
    kv head for all the queries of its group (at most ``DECODE_ROWS``), and ``_combine_kernel``
    merges the splits; ``block_m`` is then unused.
    ``str(config)`` reads ``"128x64w4s3-32x128w8s2"`` (``t`` after it for TMA, ``k512`` for a split)
    and ``FlashConfig.from_str`` reads it back.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    bwd_block_m: int
    bwd_block_n: int
    bwd_num_warps: int
    bwd_num_stages: int
    tma: int = 0
    split: int = 0

    def __attrs_post_init__(self) -> None:
        for name in ("block_m", "block_n", "bwd_block_m", "bwd_block_n"):
            size = getattr(self, name)
            if not (isinstance(size, int) and size >= 16 and _pow2(size)):
                raise ValueError(f"FlashConfig.{name} must be a power of two of at least 16, not {size!r}")
        for name in ("num_warps", "bwd_num_warps"):
            if not (isinstance(getattr(self, name), int) and _pow2(getattr(self, name))):
                raise ValueError(f"FlashConfig.{name} must be a power of two, not {getattr(self, name)!r}")
        for name in ("num_stages", "bwd_num_stages"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"FlashConfig.{name} must be at least 1, not {getattr(self, name)!r}")
        if self.tma not in (0, 1):
            raise ValueError(f"FlashConfig.tma must be 0 or 1, not {self.tma!r}")
        if self.split and not (isinstance(self.split, int) and _pow2(self.split) and self.split >= self.block_n):
            raise ValueError(f"FlashConfig.split must be 0 or a power of two of at least block_n, not {self.split!r}")

    def __str__(self) -> str:
        return (
            f"{self.block_m}x{self.block_n}w{self.num_warps}s{self.num_stages}-"
            f"{self.bwd_block_m}x{self.bwd_block_n}w{self.bwd_num_warps}s{self.bwd_num_stages}"
            + ("t" if self.tma else "")
            + (f"k{self.split}" if self.split else "")
        )

    @classmethod
    def from_str(cls, text: str) -> FlashConfig:
        """The config ``str(config)`` wrote."""
        match = _CONFIG_TEXT.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"not a FlashConfig: {text!r} (expected e.g. '128x64w4s3-32x128w8s2')")
        *sizes, tma, split = match.groups()
        return cls(*(int(g) for g in sizes), tma=int(tma == "t"), split=int(split or 0))

    def params(self) -> dict[str, int]:
        """The config as a ChoiceSpec's params (``split`` only where set: the specs of one-pass
        configs, and the cache entries naming them, stay what they were before it)."""
        params = attrs.asdict(self)
        if not self.split:
            del params["split"]
        return params

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> FlashConfig:
        """The config of a ChoiceSpec's params (``params()``)."""
        return cls(**params)


#: (block_m, block_n, warps, stages, tma) of the forward on a GPU, best first, for heads of up to
#: 64 and for wider ones. On the H200 (torch 2.11, Triton 3.6, bfloat16, the inference shapes of
#: benchmarks/attention.py, 21 tiles each with and without TMA) the best tile reading through TMA
#: was 1 to 8% faster than the best reading through pointers on every shape, and (64, 128, 4, 2)
#: with TMA was the best tile on four of seven; a short key length (77) wants 32-key blocks. On the
#: H100, with heads over 64, a 128-row tile needs 8 warps (4 spill its float32 accumulator: half
#: the speed)
GPU_FORWARD = {
    64: (
        (64, 128, 4, 2, 1), (64, 64, 4, 3, 1), (128, 64, 4, 3, 1), (128, 32, 4, 3, 1),
        (128, 64, 8, 3, 0), (64, 64, 4, 3, 0), (128, 32, 4, 3, 0), (64, 64, 4, 2, 1),
    ),
    128: (
        (64, 64, 4, 3, 1), (64, 64, 4, 3, 0), (128, 64, 8, 3, 0), (128, 64, 8, 3, 1),
        (128, 32, 4, 3, 0), (128, 128, 8, 2, 0), (128, 64, 8, 4, 0),
    ),
}  # fmt: skip
#: (bwd_block_m, bwd_block_n, warps, stages) of the backward on a GPU, best first, likewise: the
#: kept block (keys of dK/dV, queries of dQ) is 64 or 128, the streamed one 16 to 64
GPU_BACKWARD = {
    64: ((32, 64, 4, 3), (32, 128, 4, 3), (64, 64, 4, 2), (16, 64, 4, 3), (64, 128, 8, 2)),
    128: ((64, 64, 4, 2), (32, 64, 4, 3), (64, 128, 8, 2), (32, 128, 8, 2)),
}
#: what still fits where few of the above do (wide heads, float32)
SMALL_FORWARD = ((64, 64, 4, 2, 0), (64, 32, 4, 2, 0), (32, 32, 4, 2, 0), (16, 16, 4, 1, 0))
SMALL_BACKWARD = ((32, 64, 4, 2), (16, 64, 4, 2), (16, 32, 4, 2), (16, 16, 4, 1))
#: fewer fitting configs than this: the small ones that fit are added
MIN_CONFIGS = 3
#: the interpreter runs every program in numpy: small tiles, a square one and an oblong one
#: (the oblong one reads through TMA descriptors, which the interpreter runs too)
INTERPRETER_CONFIGS = (FlashConfig(16, 16, 4, 1, 16, 16, 4, 1), FlashConfig(32, 16, 4, 1, 16, 32, 4, 1, tma=1))
#: split-KV decoding (a query block of a kv head's group, at most DECODE_ROWS rows): (block_n, warps,
#: stages, keys a program) on a GPU, offered beside the first MIN_CONFIGS - 1 tiles above for an
#: inference Problem of at least DECODE_KEYS keys; a few programs a kv head of a large batch, many
#: of a batch of one
GPU_DECODE = ((64, 4, 3, 512), (64, 4, 3, 2048), (64, 4, 3, 128), (128, 4, 2, 1024))
DECODE_KEYS = 512
#: in the interpreter: one split config where there are at least two splits
INTERPRETER_DECODE = FlashConfig(16, 16, 4, 1, 16, 16, 4, 1, split=32)
#: shared memory a config may plan for (the H100 has 227 KB a block; the rest is the compiler's)
SHARED_LIMIT = 200 * 1024
#: at most this many configs on a GPU
MAX_CONFIGS = 8


def _next_pow2(n: int, floor: int = 16) -> int:
    size = floor
    while size < n:
        size *= 2
    return size


def shared_bytes(kept: int, streamed: int, stages: int, head_dim: int, head_dim_v: int, itemsize: int) -> int:
    """Shared memory of a kernel keeping a ``kept``-row tile and streaming ``streamed``-row tiles of
    K and V (or Q and dO) through ``stages`` buffers, heads padded to powers of two."""
    d, dv = _next_pow2(head_dim), _next_pow2(head_dim_v)
    return itemsize * (kept * d + stages * streamed * (d + dv))


def configs(
    head_dim: int,
    dtype: torch.dtype,
    train: bool,
    device_type: str,
    tma: bool = True,
    rows: int = 0,
    keys: int = 0,
) -> list[FlashConfig]:
    """The search space: a few GPU configs that fit shared memory for this head dim and dtype
    (forward and backward tiles paired by rank when ``train``), or two small ones for the
    interpreter (``device_type`` "cpu"). Without ``tma`` (the GPU or the inputs cannot take it)
    the TMA tiles become pointer tiles, each tile once. Inference with few query ``rows`` a kv
    head (its group's heads times the queries) over many ``keys`` gets split-KV decoding configs."""
    decode = not train and 0 < rows <= DECODE_ROWS
    if device_type != "cuda":
        extra = [INTERPRETER_DECODE] if decode and keys > INTERPRETER_DECODE.split else []
        return [*INTERPRETER_CONFIGS, *extra]
    size = torch.empty((), dtype=dtype).element_size()

    def fits(tiles: tuple[tuple[int, ...], ...], backward: bool) -> list[tuple[int, ...]]:
        # the backward keeps K and V (or Q and dO) and transposes one streamed tile through shared memory
        def need(bm: int, bn: int, s: int) -> int:
            if backward:
                return shared_bytes(bn, bm, s + 1, head_dim, head_dim, size) + bn * _next_pow2(head_dim) * size
            return shared_bytes(bm, bn, s, head_dim, head_dim, size)

        return [t for t in tiles if need(t[0], t[1], t[3]) <= SHARED_LIMIT]

    Tiles = tuple[tuple[int, ...], ...]

    def space(main: Tiles, small: Tiles, backward: bool) -> list[tuple[int, ...]]:
        tiles = fits(main, backward)
        if len(tiles) < MIN_CONFIGS:
            tiles += [t for t in fits(small, backward) if t not in tiles][: MIN_CONFIGS - len(tiles)]
        return tiles or [small[-1]]

    wide = 64 if head_dim <= 64 else 128
    forward_tiles = space(GPU_FORWARD[wide], SMALL_FORWARD, False)
    if not tma:
        forward_tiles = list(dict.fromkeys((*t[:4], 0) for t in forward_tiles))
    backward_tiles = space(GPU_BACKWARD[wide], SMALL_BACKWARD, True)

    def pair(f: tuple[int, ...], b: tuple[int, ...]) -> FlashConfig:
        return FlashConfig(*f[:4], *b, tma=f[4])

    fit = [t for t in GPU_DECODE if shared_bytes(16, t[0], t[2], head_dim, head_dim, size) <= SHARED_LIMIT]
    if decode and keys >= DECODE_KEYS and fit:
        splits = [FlashConfig(16, bn, w, st, *backward_tiles[0], tma=int(tma), split=k) for bn, w, st, k in fit]
        return [*splits, *(pair(f, backward_tiles[0]) for f in forward_tiles[: MIN_CONFIGS - 1])]
    if not train:
        return [pair(f, backward_tiles[0]) for f in forward_tiles[:MAX_CONFIGS]]
    count = min(MAX_CONFIGS, max(len(forward_tiles), len(backward_tiles)))
    return [pair(forward_tiles[i % len(forward_tiles)], backward_tiles[i % len(backward_tiles)]) for i in range(count)]


# ------------------------------------------------------------------------------------- launchers


def _precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision: TF32 for float32 only where torch's matmuls may use it."""
    if dtype != torch.float32 or _interpreting() or torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` as is when its last dim has stride 1 (any other strides are read as they are)."""
    return t if t.stride(-1) == 1 or t.shape[-1] <= 1 else t.contiguous()


def _device(t: torch.Tensor) -> Any:
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int, int, int]:
    """(B, Hq, Hkv, L, S, D, Dv), after checking that q, k and v go together."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D (B, H, L, D), not {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q, k, v must share one of float16, bfloat16, float32, not {q.dtype}, {k.dtype}, {v.dtype}")
    B, Hq, L, D = q.shape
    _, Hkv, S, _ = k.shape
    if k.shape[0] != B or v.shape[0] != B or k.shape[-1] != D or tuple(v.shape[1:3]) != (Hkv, S):
        raise ValueError(f"q, k, v do not go together: {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv})")
    return B, Hq, Hkv, L, S, D, v.shape[-1]


def _bias(
    bias: torch.Tensor | None, shape: tuple[int, int, int, int], q: torch.Tensor
) -> tuple[torch.Tensor, tuple[int, ...], bool, bool]:
    """(tensor, its 4 strides broadcast to ``shape`` (0 where broadcast), has a bias, is boolean);
    a bool mask is read as bytes, no bias as q with zero strides (never read)."""
    if bias is None:
        return q, (0, 0, 0, 0), False, False
    if bias.device != q.device:
        raise ValueError(f"bias is on {bias.device}, q on {q.device}")
    try:
        x = bias.expand(shape)
    except RuntimeError as e:
        raise ValueError(f"bias of shape {tuple(bias.shape)} does not broadcast to {shape}") from e
    if x.dtype == torch.bool:
        return x.view(torch.uint8), tuple(x.stride()), True, True
    if not x.dtype.is_floating_point:
        raise ValueError(f"bias must be bool or floating point, not {x.dtype}")
    return x, tuple(x.stride()), True, False


def span_kind(bias_strides: tuple[int, ...], is_bool: bool, queries: int) -> int:
    """The kernels' SPAN for a mask of these (broadcast) strides: SPAN_ROW for one boolean row of
    keys for every query (key padding, as ``(B, 1, 1, S)`` or ``.expand``-ed to ``(B, H, L, S)``),
    SPAN_MAP for other boolean masks (read through a block map), SPAN_NONE for an additive bias
    or none (every key block is read)."""
    if not is_bool:
        return SPAN_NONE
    return SPAN_ROW if bias_strides[2] == 0 or queries == 1 else SPAN_MAP


#: a block map's scan reads this many keys of a row of the mask at a time
MAP_CHUNK = 512


def _block_map(x: torch.Tensor, xs: tuple[int, ...], span: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """The block map of the boolean mask ``x`` (uint8, broadcast with strides ``xs``), with its
    batch and head strides (0 where the mask broadcasts) and its rows and entries a row; ``x``
    itself, never read as a map, where ``span`` needs none."""
    if span != SPAN_MAP:
        return x, (0, 0, 1, 1)
    block = int(MAP_BLOCK)
    batches, heads, rows, keys = x.shape
    batches, heads = (batches if xs[0] else 1), (heads if xs[1] else 1)
    nl, ns = triton.cdiv(rows, block), triton.cdiv(keys, block)
    blocks = torch.empty((batches, heads, nl, ns), dtype=torch.uint8, device=x.device)
    with _device(x):
        _block_map_kernel[(nl, batches * heads)](
            x, blocks, *xs, heads, rows, keys, nl, ns, BLOCK=block, CHUNK=min(MAP_CHUNK, _next_pow2(keys)),
        )  # fmt: skip
    return blocks, (blocks.stride(0) if batches > 1 else 0, blocks.stride(1) if heads > 1 else 0, nl, ns)


def _map_across(tile: int) -> int:
    """Block-map entries a scan reads across a tile of ``tile`` rows or keys (at least 2)."""
    return max(2, tile // int(MAP_BLOCK))


def _alignment(*tensors: torch.Tensor) -> int:
    """The most elements, up to 16 bytes' worth, that every stride (but the unit last one) and every
    start of ``tensors`` is a multiple of: the kernels' ``ALIGN``."""
    align = 16 // tensors[0].element_size()
    for t in tensors:  # a size-1 dim's stride is never used (its index is 0)
        parts = [s for s, n in zip(t.stride()[:-1], t.shape[:-1], strict=True) if n > 1]
        parts.append(t.data_ptr() // t.element_size())
        while align > 1 and any(p % align for p in parts):
            align //= 2
    return align


def tma_layout(shape: tuple[int, ...], stride: tuple[int, ...], start: int, itemsize: int) -> bool:
    """Whether TMA reads a tensor laid out so (a unit last stride, as the kernels see it): every
    stride of a dim of size > 1 but the last a nonzero multiple of 16 bytes, and its start (bytes)."""
    used = [s for s, n in zip(stride[:-1], shape[:-1], strict=True) if n > 1]
    return start % 16 == 0 and all(s != 0 and (s * itemsize) % 16 == 0 for s in used)


def tma_device(device: torch.device) -> bool:
    """Whether the kernels can read through TMA descriptors on ``device``: Triton has them, and it
    is an NVIDIA GPU of sm90 or later (or the interpreter runs the kernels)."""
    if TensorDescriptor is None or torch.version.hip is not None:
        return False
    return _interpreting() or (device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0))


def _tma_reads(*tensors: torch.Tensor) -> bool:
    """Whether the forward can read ``tensors`` through TMA descriptors: ``tma_device``, and
    layouts TMA reads."""
    if not tma_device(tensors[0].device):
        return False
    return all(tma_layout(tuple(t.shape), t.stride(), t.data_ptr(), t.element_size()) for t in tensors)


def _descriptor(t: torch.Tensor, rows: int, cols: int) -> Any:
    """A descriptor reading (B, H, N, D) ``t`` in [rows, cols] tiles of one head, zeros past its
    edges (size-1 dims get a 16-byte stride: theirs is arbitrary and never used)."""
    unit = 16 // t.element_size()
    strides = [s if n > 1 else unit for s, n in zip(t.stride()[:-1], t.shape[:-1], strict=True)] + [1]
    return TensorDescriptor(t, list(t.shape), strides, [1, 1, rows, cols])


def _head_meta(D: int, Dv: int) -> dict[str, Any]:
    block_d, block_dv = _next_pow2(D), _next_pow2(Dv)
    return {
        "HEAD_D": D,
        "HEAD_DV": Dv,
        "BLOCK_D": block_d,
        "BLOCK_DV": block_dv,
        "PAD_D": block_d != D,
        "PAD_DV": block_dv != Dv,
    }


def forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    causal: bool,
    scale: float,
    config: FlashConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale + bias) v: (out (B, Hq, L, Dv) in q's dtype, laid out as q is
    (:func:`output_like`), lse (B, Hq, L) float32, natural log, +inf for a row with every key masked)."""
    B, Hq, Hkv, L, S, D, Dv = _shapes(q, k, v)
    out = output_like(q, Dv)
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    lse = torch.empty((B, Hq, L), dtype=torch.float32, device=q.device)
    if out.numel() == 0 or S == 0:  # no keys: every row is masked out
        return out.zero_(), lse.fill_(float("inf"))
    x, xs, has_bias, is_bool = _bias(bias, (B, Hq, L, S), q)
    shared = {  # what the one-pass forward and split-KV decoding both specialise on
        **_head_meta(D, Dv),
        "GROUP": Hq // Hkv,
        "CAUSAL": bool(causal),
        "HAS_BIAS": has_bias,
        "BIAS_BOOL": is_bool,
        "SCALE_FIRST": (has_bias and not is_bool) or not scale > 0,
        "PRECISION": _precision(q.dtype),
        "ALIGN": _alignment(q, k, v),
    }
    if config.split:
        return _decode(q, k, v, x, xs, shared, scale, config, out, lse)
    bm = min(config.block_m, _next_pow2(L))
    bn = min(config.block_n, _next_pow2(S))
    meta = {**shared, "BM": bm, "BN": bn, "SPAN": span_kind(xs, is_bool, L), "MAP_ACROSS": _map_across(bm)}
    blocks, ms = _block_map(x, xs, meta["SPAN"])
    meta["TMA"] = bool(config.tma) and _tma_reads(q, k, v)
    reads: tuple[Any, ...] = (q, k, v)
    if meta["TMA"]:
        block_d, block_dv = meta["BLOCK_D"], meta["BLOCK_DV"]
        reads = (_descriptor(q, bm, block_d), _descriptor(k, bn, block_d), _descriptor(v, bn, block_dv))
    with _device(q):
        _fwd_kernel[(triton.cdiv(L, bm), B * Hq)](
            *reads, x, blocks, out, lse, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *xs, *ms[:2],
            *out.stride()[:3], Hq, L, S, *ms[2:], float(scale) * LOG2E, **meta,
            num_warps=config.num_warps, num_stages=config.num_stages,
        )  # fmt: skip
    return out, lse


#: the most query rows (the queries of a kv head's group of query heads) split-KV decoding takes
DECODE_ROWS = 64
#: the most splits a query row is cut into (each program then takes more keys than its config's
#: ``split``): ``_combine_kernel`` holds every split's output of a row in registers at once
MAX_SPLITS = 64


def decode_splits(keys: int, config: FlashConfig) -> tuple[int, int]:
    """(keys a program, programs a kv head) of split-KV decoding over ``keys``: the config's
    ``split``, made larger where it would cut a row into more than ``MAX_SPLITS``."""
    split = max(config.split, min(config.block_n, _next_pow2(keys)), _next_pow2(triton.cdiv(keys, MAX_SPLITS)))
    return split, triton.cdiv(keys, split)


def _decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    x: torch.Tensor,
    xs: tuple[int, ...],
    shared: dict[str, Any],
    scale: float,
    config: FlashConfig,
    out: torch.Tensor,
    lse: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``forward`` by split-KV decoding (``config.split`` keys a program), into ``out`` and ``lse``,
    with ``forward``'s checked inputs and its ``shared`` specialisation."""
    (B, Hq, L, Dv), (Hkv, S) = out.shape, k.shape[1:3]
    group = shared["GROUP"]
    if group * L > DECODE_ROWS:
        raise ValueError(f"split-KV decoding takes at most {DECODE_ROWS} queries a kv head, not {group * L}")
    bn = min(config.block_n, _next_pow2(S))
    split, splits = decode_splits(S, config)
    parts = torch.empty((B, Hq, L, splits, Dv), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((B, Hq, L, splits), dtype=torch.float32, device=q.device)
    meta = {
        **shared,
        "BM": _next_pow2(group * L),
        "BN": bn,
        "SPLIT": split,
        "TMA": bool(config.tma) and _tma_reads(k, v),
        "SPAN": span_kind(xs, shared["BIAS_BOOL"], L) == SPAN_ROW,
        "EMPTY": shared["HAS_BIAS"] or shared["CAUSAL"],
    }
    reads: tuple[Any, ...] = (k, v)
    if meta["TMA"]:
        reads = (_descriptor(k, bn, meta["BLOCK_D"]), _descriptor(v, bn, meta["BLOCK_DV"]))
    with _device(q):
        _decode_kernel[(splits, B * Hkv)](
            q, *reads, x, parts, part_lse, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *xs,
            Hq, Hkv, L, S, splits, float(scale) * LOG2E, **meta,
            num_warps=config.num_warps, num_stages=config.num_stages,
        )  # fmt: skip
        _combine_kernel[(B * Hq * L,)](
            parts, part_lse, out, lse, *out.stride()[:3], Hq, L, splits,
            HEAD_DV=Dv, BLOCK_DV=meta["BLOCK_DV"], BLOCK_S=max(2, _next_pow2(splits, 2)), num_warps=4,
        )  # fmt: skip
    return out, lse


def backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    scale: float,
    config: FlashConfig,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of ``forward``'s out given its gradient ``dout``, from the forward's ``out`` and
    ``lse``: contiguous, in q's dtype."""
    B, Hq, Hkv, L, S, D, Dv = _shapes(q, k, v)
    q, k, v, out = _unit_last(q), _unit_last(k), _unit_last(v), _unit_last(out)
    dout = _unit_last(dout.to(q.dtype))
    lse = lse.to(torch.float32).contiguous()
    dq = torch.empty((B, Hq, L, D), dtype=q.dtype, device=q.device)
    dk = torch.empty((B, Hkv, S, D), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, Hkv, S, Dv), dtype=q.dtype, device=q.device)
    if B * Hq == 0 or L == 0 or S == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    x, xs, has_bias, is_bool = _bias(bias, (B, Hq, L, S), q)
    head = _head_meta(D, Dv)
    masks = {
        "CAUSAL": bool(causal),
        "HAS_BIAS": has_bias,
        "BIAS_BOOL": is_bool,
        "PRECISION": _precision(q.dtype),
        "ALIGN": _alignment(q, k, v, dout),
        "SPAN": span_kind(xs, is_bool, L),
    }
    launch = {"num_warps": config.bwd_num_warps, "num_stages": config.bwd_num_stages}
    streamed, kept = config.bwd_block_m, config.bwd_block_n
    delta = torch.empty((B, Hq, L), dtype=torch.float32, device=q.device)
    blocks, ms = _block_map(x, xs, masks["SPAN"])
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *xs, *ms[:2], *dout.stride()[:3])
    with _device(q):
        rows = 16 if _interpreting() else 64
        _bwd_delta_kernel[(triton.cdiv(L, rows), B * Hq)](
            out, dout, delta, *out.stride()[:3], *dout.stride()[:3], Hq, L,
            HEAD_DV=Dv, BLOCK_DV=head["BLOCK_DV"], BM=rows, ALIGN=_alignment(out, dout), num_warps=4,
        )  # fmt: skip
        bm, bn = min(streamed, _next_pow2(L)), min(kept, _next_pow2(S))
        _bwd_kv_kernel[(triton.cdiv(S, bn), B * Hkv)](
            q, k, v, x, blocks, dout, lse, delta, dk, dv, *strides, Hq, Hkv, L, S, *ms[2:], float(scale),
            float(scale) * LOG2E, GROUP=Hq // Hkv, **head, BM=bm, BN=bn, **masks, MAP_ACROSS=_map_across(bn), **launch,
        )  # fmt: skip
        bm, bn = min(kept, _next_pow2(L)), min(streamed, _next_pow2(S))
        _bwd_q_kernel[(triton.cdiv(L, bm), B * Hq)](
            q, k, v, x, blocks, dout, lse, delta, dq, *strides, Hq, L, S, *ms[2:], float(scale), float(scale) * LOG2E,
            GROUP=Hq // Hkv, **head, BM=bm, BN=bn, **masks, MAP_ACROSS=_map_across(bm), **launch,
        )  # fmt: skip
    return dq, dk, dv


# ------------------------------------------------------------------------------------ custom ops


@functools.lru_cache(maxsize=256)
def _config(text: str) -> FlashConfig:
    return FlashConfig.from_str(text)


def _flash_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    causal: bool,
    scale: float,
    config: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    return forward(q, k, v, bias, causal, scale, _config(config))


def _flash_fwd_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    causal: bool,
    scale: float,
    config: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    B, Hq, L, _ = q.shape
    return output_like(q, v.shape[-1]), q.new_empty((B, Hq, L), dtype=torch.float32)


def _flash_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    scale: float,
    config: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return backward(dout, q, k, v, bias, out, lse, causal, scale, _config(config))


def _flash_bwd_fake(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    scale: float,
    config: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty((*k.shape[:3], v.shape[-1]))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    q, k, v, bias, causal, scale, config = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, bias, out, lse)
    ctx.causal, ctx.scale, ctx.config = causal, scale, config
    ctx.mark_non_differentiable(lse)


def _flash_fwd_backward(ctx: Any, dout: torch.Tensor | None, dlse: torch.Tensor | None) -> tuple[Any, ...]:
    q, k, v, bias, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv = torch.ops.tunesmith_triton.flash_bwd(dout, q, k, v, bias, out, lse, ctx.causal, ctx.scale, ctx.config)
    return dq, dk, dv, None, None, None, None


FWD_SCHEMA = "(Tensor q, Tensor k, Tensor v, Tensor? bias, bool causal, float scale, str config) -> (Tensor, Tensor)"
BWD_SCHEMA = (
    "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor out, Tensor lse, bool causal, float scale, "
    "str config) -> (Tensor, Tensor, Tensor)"
)


def _register() -> None:
    """Define ``tunesmith_triton::flash_fwd`` (differentiable) and ``::flash_bwd``, once a process."""
    namespace = torch.ops.tunesmith_triton
    if hasattr(namespace, "flash_fwd") and hasattr(namespace, "flash_bwd"):
        return  # the module was imported again: the first definitions stay
    bwd = torch.library.custom_op("tunesmith_triton::flash_bwd", _flash_bwd, mutates_args=(), schema=BWD_SCHEMA)
    bwd.register_fake(_flash_bwd_fake)
    fwd = torch.library.custom_op("tunesmith_triton::flash_fwd", _flash_fwd, mutates_args=(), schema=FWD_SCHEMA)
    fwd.register_fake(_flash_fwd_fake)
    fwd.register_autograd(_flash_fwd_backward, setup_context=_setup_context)


_register()


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    causal: bool,
    scale: float,
    config: FlashConfig,
) -> torch.Tensor:
    """Flash attention, differentiable w.r.t. q, k and v (not the bias) through the custom ops,
    which torch.compile traces as opaque calls."""
    if bias is not None and bias.requires_grad:
        raise ValueError("flash attention has no gradient for the bias: pass a bias that does not require grad")
    return torch.ops.tunesmith_triton.flash_fwd(q, k, v, bias, causal, scale, str(config))[0]
