"""The Triton convolution template: 2-D convolution as an implicit GEMM, with the Problem's
epilogue compiled in through the GEMM kernels' shared ``_finish``.

Per image n (program axis 1), the GEMM rows are the output pixels ``oh * OW + ow``, its columns
the output channels, and its reduction runs over (kh, kw, c): each step loads a [pixels, channels]
tile of the input straight from memory by its strides (one tap of the filter, one chunk of
channels; padding and edges are masked to zero) and a [channels, out channels] tile of the weight.
Channels are the innermost reduction, so a channels_last (NHWC) input reads contiguous rows.

Served: groups == 1, any kernel size, stride, padding and dilation, any input and weight strides.
Declined (no choice offered): grouped convolution, and epilogue tensors whose (h, w) strides do
not flatten to one stride over the output pixels (a per-row or per-column operand, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from tunesmith.plugin import torch_dtype
from tunesmith_hookspecs import ChoiceSpec, Problem
from tunesmith_triton import inductor
from tunesmith_triton.choice import Config, Launch, TritonChoice, epilogue_plan, finish_args, precision
from tunesmith_triton.configs import Target, _cdiv, affordable, fits, gpu_target, sized
from tunesmith_triton.kernels import _finish, _tile
from tunesmith_triton.served import CONV_TEMPLATE, NAME

#: (BLOCK_M pixels, BLOCK_N out channels, BLOCK_K channels, warps, stages) on a GPU: square and
#: wide tiles for many channels, thin BLOCK_N for few, deeper BLOCK_K for long channel reductions
GPU_CONFIGS = (
    (128, 128, 32, 8, 3),
    (128, 128, 64, 8, 2),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (64, 64, 64, 4, 3),
    (64, 64, 32, 4, 4),
    (128, 32, 32, 4, 4),
    (64, 32, 64, 4, 3),
)
#: the interpreter runs every program instance in numpy, at a cost per loop step more than per
#: element: a small tile (several tiles per image) and a large one (few loop steps)
INTERPRETER_CONFIGS = ((32, 16, 16, 4, 1), (1024, 64, 64, 4, 1))
#: the interpreter's budget of tile iterations (images x tiles x taps x channel chunks) for a
#: config that is not the cheapest: one iteration of this kernel costs it about 10 ms
INTERPRETER_WORK = 128
#: rows of a tile group sharing their weight tiles (see ``kernels._tile``)
GROUP_M = 8


@triton.jit
def conv_kernel(
    x_ptr, w_ptr,
    C, H, W, OH, OW, OC, KW, TAPS,
    s_xn, s_xc, s_xh, s_xw, s_wo, s_wc, s_wh, s_ww,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    b_ptr, s_bb, s_bm, s_bn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
    alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
    HAS_BIAS: tl.constexpr,
    S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
    O0: tl.constexpr, O1: tl.constexpr, O2: tl.constexpr, O3: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
    EVEN_C: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One [BM pixels, BN out channels] tile of image ``program_id(1)``; TAPS = KH * KW."""
    pid, n = tl.program_id(0), tl.program_id(1)
    M = OH * OW
    pm, pn = _tile(pid, M, OC, BM, BN, GROUP)
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    row_ok = om < M
    ih0 = (om // OW) * stride_h - pad_h
    iw0 = (om % OW) * stride_w - pad_w
    x_img = x_ptr + n.to(tl.int64) * s_xn
    w_cols = w_ptr + on[None, :] * s_wo
    chunks = tl.cdiv(C, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for step in range(TAPS * chunks):  # taps outer, channel chunks inner: one pipelined loop
        tap = step // chunks
        ci = (step - tap * chunks) * BK + ok
        kh = tap // KW
        kw = tap - kh * KW
        ih = ih0 + kh * dil_h
        iw = iw0 + kw * dil_w
        inside = row_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        x_ptrs = x_img + (ih * s_xh + iw * s_xw)[:, None] + ci[None, :] * s_xc
        w_ptrs = w_cols + ci[:, None] * s_wc + (kh * s_wh + kw * s_ww)
        if EVEN_C:  # every channel chunk is whole
            x = tl.load(x_ptrs, mask=inside[:, None], other=0.0)
            y = tl.load(w_ptrs, mask=on[None, :] < OC, other=0.0)
        else:
            x = tl.load(x_ptrs, mask=inside[:, None] & (ci[None, :] < C), other=0.0)
            y = tl.load(w_ptrs, mask=(ci[:, None] < C) & (on[None, :] < OC), other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
    _finish(acc, n, om, on, M, OC,
            b_ptr, s_bb, s_bm, s_bn, e0_ptr, s_e0b, s_e0m, s_e0n, e1_ptr, s_e1b, s_e1m, s_e1n,
            alpha, beta, v0, v1, v2, v3, out_ptr, s_ob, s_om, s_on,
            HAS_BIAS, S0, S1, S2, S3, O0, O1, O2, O3)  # fmt: skip


def pixel_strides(shape: Sequence[int], stride: Sequence[int], out_shape: Sequence[int]) -> tuple[int, int, int] | None:
    """(image, pixel, channel) strides of an epilogue operand broadcast to the NCHW output
    ``out_shape``, or None when its (h, w) strides do not flatten to one stride over the pixels
    ``oh * OW + ow``."""
    pad = 4 - len(shape)
    shape, stride = (1,) * pad + tuple(shape), (0,) * pad + tuple(stride)
    sn, sc, sh, sw = (0 if size == 1 else st for size, st in zip(shape, stride, strict=True))
    oh, ow = out_shape[2], out_shape[3]
    if oh == 1:
        return sn, sw, sc
    if ow == 1:
        return sn, sh, sc
    return (sn, sw, sc) if sh == ow * sw else None


def conv_plan(problem: Problem) -> tuple[list[int], list[int], list[float], list[int]] | None:
    """The epilogue plan of a conv Problem the template serves, or None: groups == 1, the chain
    fits, and every epilogue tensor's strides flatten over the output pixels."""
    if problem.op != "conv" or problem.scalar("groups", 1) != 1:
        return None
    plan = epilogue_plan(problem)
    if plan is None:
        return None
    out = problem.output.shape
    metas = [problem.inputs[i] for i in plan[3]]
    return plan if all(pixel_strides(m.shape, m.stride, out) is not None for m in metas) else None


def conv_sizes(problem: Problem) -> tuple[int, int, int, int, int]:
    """(images, output pixels, output channels, input channels, filter taps)."""
    n, oc, oh, ow = problem.output.shape
    _, c, kh, kw = problem.inputs[1].shape
    return n, oh * ow, oc, c, kh * kw


def conv_tiles(problem: Problem) -> list[tuple[int, int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) on a GPU, before the shared-memory check: ours,
    then every tile Inductor's conv template would try (``inductor.py``) not among them. Our
    template tiles one image's pixels, so Inductor's BLOCK_M (cut to every image's pixels) is cut
    to one image's: a taller tile would only hold masked rows."""
    _, m, oc, c, taps = conv_sizes(problem)
    images, _, h, w = problem.inputs[0].shape
    theirs = inductor.conv_configs(images, h * w, oc, c, one_by_one=taps == 1)
    tiles = [(*sized(bm, bn, bk, m, oc, c), warps, stages) for bm, bn, bk, warps, stages in (*GPU_CONFIGS, *theirs)]
    return list(dict.fromkeys(tiles))


def conv_configs(problem: Problem, interpreter: bool, target: Target | None = None) -> list[Config]:
    """Configs worth timing: each tile cut down to twice its dimension (a power of two), and on a
    GPU (``target``, default the current one) only those whose pipeline fits shared memory; in the
    interpreter, those within its work budget (always the one of least work)."""
    n, m, oc, c, taps = conv_sizes(problem)
    size = torch_dtype(problem.inputs[0].dtype).itemsize
    if interpreter:
        tiles, limit = [(*sized(bm, bn, bk, m, oc, c), w, s) for bm, bn, bk, w, s in INTERPRETER_CONFIGS], None
    else:
        tiles, limit = conv_tiles(problem), (target or gpu_target()).shared_memory
    found: list[Config] = []
    for bm, bn, bk, warps, stages in tiles:
        config = Config(bm, bn, bk, GROUP_M, warps, stages)
        if fits(config, size, limit) and config not in found:
            found.append(config)
    if interpreter:

        def work(cfg: Config) -> int:
            return n * _cdiv(m, cfg.block_m) * _cdiv(oc, cfg.block_n) * taps * _cdiv(c, cfg.block_k)

        found = affordable(found, work, INTERPRETER_WORK)
    return found


class ConvChoice(TritonChoice):
    """The conv template with one config for ``problem``: ``precompile()``, ``kernel()`` and the
    launch are the GEMM choice's; this class builds the conv kernel's launch (``_launches``)."""

    def __init__(self, spec: ChoiceSpec, problem: Problem, precision: str) -> None:
        if spec.template != CONV_TEMPLATE:
            raise ValueError(f"not the Triton conv template: {spec.template!r}")
        plan = conv_plan(problem)
        if plan is None:
            raise ValueError("the Triton conv template does not serve this problem")
        self.spec, self.problem, self.precision, self.plan = spec, problem, precision, plan
        self.config = Config(**dict(spec.params))
        self._direct = {}  # TritonChoice._launch's records of the compiled launch, by device

    def _launches(self, tensors: Sequence[torch.Tensor], out: torch.Tensor, ws: Sequence[torch.Tensor]) -> list[Launch]:
        p, cfg = self.problem, self.config
        x, w = tensors[0], tensors[1]
        bias = (tensors[2], (0, 0, tensors[2].stride(0))) if p.num_op_inputs == 3 else None
        n, oc, oh, ow = out.shape
        c, kh, kw = w.shape[1:]
        operands = []
        for i in self.plan[3]:
            strides = pixel_strides(tensors[i].shape, tensors[i].stride(), out.shape)
            assert strides is not None, "conv_plan checked the operand's layout"
            operands.append((tensors[i], strides))
        written = pixel_strides(out.shape, out.stride(), out.shape)  # NCHW or channels-last: both flatten
        assert written is not None, "the Problem's output is dense"
        tail, meta = finish_args(self.plan, bias, operands, (out, written))
        args = (
            x, w, c, x.shape[2], x.shape[3], oh, ow, oc, kw, kh * kw, *x.stride(), *w.stride(),
            *p.scalar("stride"), *p.scalar("padding"), *p.scalar("dilation"), *tail,
        )  # fmt: skip
        meta |= {"BM": cfg.block_m, "BN": cfg.block_n, "BK": cfg.block_k, "GROUP": cfg.group_m}
        meta |= {"EVEN_C": c % cfg.block_k == 0, "PRECISION": self.precision}
        meta |= {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        grid = (triton.cdiv(oh * ow, cfg.block_m) * triton.cdiv(oc, cfg.block_n), n)
        return [(conv_kernel, grid, args, meta)]


def conv_choices(problem: Problem, interpreter: bool) -> list[Any]:
    """Every conv choice for ``problem`` (none when the template does not serve it)."""
    if conv_plan(problem) is None:
        return []
    dot = precision(problem)
    return [
        ConvChoice(ChoiceSpec(NAME, CONV_TEMPLATE, config.params()), problem, dot)
        for config in conv_configs(problem, interpreter)
    ]
