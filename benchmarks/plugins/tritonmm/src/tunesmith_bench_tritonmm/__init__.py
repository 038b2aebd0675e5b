"""A benchmark-only backend for the benchmarking issue: a plain Triton mm (no epilogue) over a
handful of tile configs, so that precompiling costs real compile time, plus, when
``BENCH_TRITONMM_OOB=1``, one choice whose kernel writes far out of bounds (an illegal memory
access on the GPU). It is not the Triton plugin: no fused epilogues, no search space."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from tunesmith_hookspecs import ChoiceSpec, PluginStatus, hookimpl

NAME = "bench_tritonmm"
#: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)
CONFIGS = [
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 4, 4),
    (128, 128, 64, 8, 3),
    (128, 128, 32, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 64, 64, 4, 4),
    (64, 64, 128, 4, 3),
    (32, 64, 128, 4, 3),
    (16, 64, 256, 4, 3),
    (16, 128, 128, 4, 4),
]
SMEM_BYTES = 220 * 1024


@triton.jit
def _mm(
    a,
    b,
    c,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    far,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * grid_n)
    first_m = group * GROUP
    rows = min(grid_m - first_m, GROUP)
    pm = first_m + (pid % (GROUP * grid_n)) % rows
    pn = (pid % (GROUP * grid_n)) // rows
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + ok
        x = tl.load(a + om[:, None] * sam + kk[None, :] * sak, mask=(om[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * sbk + on[None, :] * sbn, mask=(kk[:, None] < K) & (on[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
    out = c + om[:, None] * scm + on[None, :] * scn + far
    tl.store(out, acc.to(c.dtype.element_ty), mask=(om[:, None] < M) & (on[None, :] < N))


class TritonMM:
    def __init__(self, spec: ChoiceSpec, problem) -> None:
        self.spec, self.problem = spec, problem
        self.bm, self.bn, self.bk, self.warps, self.stages = spec.param("config")
        self.far = (1 << 40) if spec.template == "oob" else 0
        self.precision = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"

    def _launch(self, a, b, c, warmup=False):
        M, K = a.shape
        N = b.shape[1]
        grid = (triton.cdiv(M, self.bm) * triton.cdiv(N, self.bn),)
        args = (a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), self.far)
        kw = dict(
            BM=self.bm,
            BN=self.bn,
            BK=self.bk,
            GROUP=8,
            PRECISION=self.precision,
            num_warps=self.warps,
            num_stages=self.stages,
        )
        if warmup:
            _mm.warmup(*args, grid=grid, **kw)
        else:
            _mm[grid](*args, **kw)

    def precompile(self) -> None:
        a_meta, b_meta = self.problem.inputs[:2]
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        a, b = (
            torch.empty_strided(m.shape, m.stride, dtype=getattr(torch, m.dtype), device=dev) for m in (a_meta, b_meta)
        )
        c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=dev)
        if dev == "cuda":
            self._launch(a, b, c, warmup=True)

    def kernel(self):
        def run(a, b):
            c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
            self._launch(a, b, c)
            return c

        return run


def _fits(config, dtype: str) -> bool:
    bm, bn, bk, _, stages = config
    size = 4 if dtype == "float32" else 2
    return stages * (bm * bk + bk * bn) * size <= SMEM_BYTES


def _spec(template: str, config) -> ChoiceSpec:
    return ChoiceSpec(NAME, template, {"config": list(config)})


@hookimpl
def tunesmith_choices(problem, options):
    if problem.op != "mm" or problem.epilogue or problem.device != "cuda":
        return []
    dtype = problem.inputs[0].dtype
    found = [TritonMM(_spec("mm", c), problem) for c in CONFIGS if _fits(c, dtype)]
    if os.environ.get("BENCH_TRITONMM_OOB") == "1":
        found.append(TritonMM(_spec("oob", CONFIGS[2]), problem))
    return found


@hookimpl
def tunesmith_rebuild_choice(spec, problem):
    return TritonMM(spec, problem) if spec.backend == NAME else None


@hookimpl
def tunesmith_plugin_status():
    if not torch.cuda.is_available():
        return PluginStatus(False, "needs a CUDA GPU")
    return PluginStatus(True, ops=["mm"], dtypes=["float32", "float16", "bfloat16"], devices=["cuda"])
