"""The search space: template configs that fit the device and make sense for the shape."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch

from tunesmith.plugin import torch_dtype
from tunesmith_hookspecs import Problem, TensorMeta
from tunesmith_triton import inductor
from tunesmith_triton.choice import MIN_SUBTILE_N, Config, TensorDescriptor

#: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) of the pointer template: large tiles for large
#: problems, thin ones for small M (decode), deep K tiles for long reductions, short pipelines
#: for short ones
GPU_CONFIGS = (
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 128, 64, 4, 3),
    (128, 128, 32, 4, 4),
    (64, 256, 64, 8, 3),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 128, 64, 4, 2),
    (64, 128, 32, 4, 3),
    (64, 64, 64, 4, 4),
    (64, 64, 128, 4, 3),
    (32, 64, 128, 4, 3),
    (16, 64, 256, 4, 3),
    (16, 128, 128, 4, 4),
    (16, 256, 64, 4, 4),
)
#: narrow tiles that stream the weights of a decode GEMM (M of ``DECODE_M`` rows or fewer: tokens
#: times a weight read as W.T), tried first there. Timed under CUDA graphs on the H200 on Llama-7B's
#: MLP at 16 tokens (``benchmarks/decode_sweep.py``, results/decode_sweep_h200.json): the down
#: projection (K 11008) ran in 0.90x cuBLAS's time with 32-column tiles and no split, against 1.01x
#: for the best split-K config; the gate (K 4096) ran at cuBLAS's speed
DECODE_M = 32
DECODE_CONFIGS = (
    (16, 32, 256, 2, 4),
    (16, 32, 256, 2, 5),
    (16, 32, 512, 4, 4),
    (16, 16, 512, 2, 3),
    (16, 32, 256, 2, 3),
    (16, 32, 128, 4, 5),
)
DECODE_TMA_CONFIGS = (
    (16, 32, 256, 4, 4, False, 1, False),
    (16, 64, 256, 4, 5, False, 1, False),
    (16, 32, 128, 4, 4, False, 1, False),
)
#: thin tiles that split K when the output has fewer tiles than the GPU has SMs
SPLIT_K_CONFIGS = (
    (16, 64, 128, 4, 4),
    (16, 64, 256, 4, 4),
    (16, 64, 256, 4, 5),
    (16, 32, 256, 2, 4),
    (16, 128, 128, 4, 4),
    (32, 64, 128, 4, 4),
    (64, 64, 64, 4, 4),
)
#: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, persistent, subtile, warp_specialize) of the TMA
#: template (Hopper). Three-stage 128 x 128 tiles fit two programs on an SM, so one's epilogue
#: overlaps the other's main loop. Wide tiles finish in two column slices, and persistent ones have
#: a producer warp: on the H100 each was as fast or faster on every single-matrix case timed
#: (tma_variants_h100.json, benchmarks/README.md), and a GELU epilogue no longer spills. Batched problems get no
#: producer warp: with it the best persistent config was 40% slower on bmm and 9% on baddbmm.
TMA_CONFIGS = (
    (128, 256, 64, 8, 3, True, 2, True),
    (128, 256, 64, 8, 4, True, 2, True),
    (128, 256, 64, 8, 3, False, 2, False),
    (256, 128, 64, 8, 3, False, 2, False),
    (128, 128, 64, 8, 4, True, 2, True),
    (128, 128, 64, 8, 3, False, 2, False),
    (128, 128, 64, 4, 3, False, 1, False),
    (128, 128, 64, 4, 4, False, 1, False),
    (128, 128, 128, 8, 3, False, 1, False),
    (64, 128, 64, 4, 4, False, 1, False),
    (64, 128, 64, 4, 3, True, 1, False),
)
#: the interpreter runs every program instance in numpy: few, small tiles
INTERPRETER_CONFIGS = ((32, 32, 32, 4, 1), (128, 128, 64, 4, 1))
INTERPRETER_SPLIT_K = ((16, 32, 16, 4, 1),)
INTERPRETER_TMA = ((32, 32, 32, 4, 1, True, 1, True), (64, 64, 32, 4, 1, False, 2, False))
#: the interpreter's budget of tile iterations (programs x K steps) for a config that is not
#: the largest: small tiles over large problems take minutes there
INTERPRETER_WORK = 512


@functools.cache
def shared_memory(device: int) -> int:
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024


@functools.cache
def multiprocessors(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@attrs.frozen
class Target:
    """The GPU a search space is built for: its shared memory per block (bytes), its SMs, and
    whether it has TMA (Hopper or later). Given explicitly, a space can be built without one."""

    shared_memory: int
    sms: int
    tma: bool


#: an H100 SXM's figures: what the tests build spaces for on the CPU
H100 = Target(232448, 132, True)


def gpu_target() -> Target:
    """The current CUDA device as a Target."""
    device = torch.cuda.current_device()
    return Target(shared_memory(device), multiprocessors(device), torch.cuda.get_device_capability(device)[0] >= 9)


def _pow2_at_least(n: int, floor: int = 16) -> int:
    size = floor
    while size < n:
        size *= 2
    return size


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def dims(problem: Problem) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of the problem's first product."""
    out = problem.output
    mat1 = problem.inputs[1] if problem.op in ("addmm", "baddbmm") else problem.inputs[0]
    batch = out.shape[0] if len(out.shape) == 3 else 1
    return batch, out.shape[-2], out.shape[-1], mat1.shape[-1]


def gemm_operands(problem: Problem) -> list[TensorMeta]:
    """The matrices the main loop reads (A and B; C and D too for mm + mm)."""
    if problem.op in ("addmm", "baddbmm"):
        return list(problem.inputs[1:3])
    return list(problem.inputs[:4] if problem.op == "mm_plus_mm" else problem.inputs[:2])


def _tma_readable(meta: TensorMeta) -> bool:
    """Whether TMA can read this (batched) matrix: one of its two last strides is 1 and every
    other stride 16-byte aligned, an aligned start (the allocator aligns storage to at least 16
    bytes) and no empty dimension."""
    size = torch_dtype(meta.dtype).itemsize
    *lead, rows, cols = meta.stride
    outer = rows if cols == 1 else cols if rows == 1 else None
    if outer is None or 0 in meta.shape:
        return False
    return all((s * size) % 16 == 0 for s in (outer, *lead, meta.storage_offset))


def tma_fits(problem: Problem) -> bool:
    """Whether the TMA template serves this problem: one product (not mm + mm) of two matrices
    TMA can read."""
    if TensorDescriptor is None or problem.op == "mm_plus_mm":
        return False
    return all(_tma_readable(m) for m in gemm_operands(problem))


def sized(bm: int, bn: int, bk: int, m: int, n: int, k: int) -> tuple[int, int, int]:
    """A tile no more than twice each dimension (rounded up to a power of two)."""
    return min(bm, _pow2_at_least(m)), min(bn, _pow2_at_least(n)), min(bk, _pow2_at_least(k))


def _splits(tiles: int, k: int, bk: int, sms: int) -> Iterator[int]:
    """Split counts worth trying: the first that fills the SMs, twice and four times it, each
    slice at least two K tiles deep."""
    split = 2
    while tiles * split < sms:
        split *= 2
    for s in (split, 2 * split, 4 * split):
        if k >= 2 * bk * s:
            yield s


def gemm_tiles(problem: Problem) -> list[tuple[int, int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) of the pointer template on a GPU, before the
    shared-memory check: the decode tiles first for few rows, our own tiles cut to the problem,
    then every tile Inductor's template would try (``inductor.py``) that is not among them."""
    _, m, n, k = dims(problem)
    own = DECODE_CONFIGS + GPU_CONFIGS if m <= DECODE_M else GPU_CONFIGS
    tiles = [(*sized(bm, bn, bk, m, n, k), warps, stages) for bm, bn, bk, warps, stages in own]
    if problem.op == "mm_plus_mm":
        tiles += inductor.mm_plus_mm_configs(k)
    else:
        tiles += inductor.mm_configs(m, n, k)
    return list(dict.fromkeys(tiles))


def configs_for(problem: Problem, interpreter: bool, target: Target | None = None) -> list[tuple[str, Config]]:
    """(template, config) pairs worth timing for ``problem`` on ``target`` (default: the current
    GPU; unused in the interpreter): each fits shared memory, and no tile of ours is more than
    twice the size of its dimension."""
    batch, m, n, k = dims(problem)
    size = torch_dtype(problem.inputs[0].dtype).itemsize
    if interpreter:
        plain = [(*sized(bm, bn, bk, m, n, k), w, s) for bm, bn, bk, w, s in INTERPRETER_CONFIGS]
        split_k, tma = INTERPRETER_SPLIT_K, INTERPRETER_TMA
        limit, sms = None, 2
    else:
        target = target or gpu_target()
        plain, split_k, limit, sms = gemm_tiles(problem), SPLIT_K_CONFIGS, target.shared_memory, target.sms
        tma = (DECODE_TMA_CONFIGS + TMA_CONFIGS if m <= DECODE_M else TMA_CONFIGS) if target.tma else ()
    found: list[tuple[str, Config]] = []

    def offer(template: str, config: Config) -> None:
        if fits(config, size, limit) and (template, config) not in found:
            found.append((template, config))

    for bm, bn, bk, warps, stages in plain:
        offer("gemm", Config(bm, bn, bk, 8, warps, stages))
    # split-K's slices add up in the order they finish: not offered where results must repeat bit for bit
    if problem.op != "mm_plus_mm" and not torch.are_deterministic_algorithms_enabled():
        for bm, bn, bk, warps, stages in split_k:
            bm, bn, bk = sized(bm, bn, bk, m, n, k)
            tiles = batch * _cdiv(m, bm) * _cdiv(n, bn)
            if 0 < tiles < sms:
                for split in _splits(tiles, k, bk, sms):
                    offer("gemm", Config(bm, bn, bk, 8, warps, stages, split_k=split))
    if tma_fits(problem):
        for bm, bn, bk, warps, stages, persistent, subtile, ws in tma:
            bm, bn, bk = sized(bm, bn, bk, m, n, k)
            subtile = subtile if bn // subtile >= MIN_SUBTILE_N else 1
            ws = persistent and ws and batch == 1
            config = Config(bm, bn, bk, 8, warps, stages, persistent=persistent, subtile=subtile, warp_specialize=ws)
            if persistent and batch * _cdiv(m, config.block_m) * _cdiv(n, config.block_n) <= sms:
                continue  # one tile per program already: the same kernel as the plain one
            offer("gemm_tma", config)
    if interpreter:

        def work(item: tuple[str, Config]) -> int:
            config = item[1]
            return batch * _cdiv(m, config.block_m) * _cdiv(n, config.block_n) * _cdiv(k, config.block_k)

        found = affordable(found, work, INTERPRETER_WORK)
    return found


def pipeline_bytes(config: Config, size: int) -> int:
    """Shared memory of the config's pipeline: an A and a B tile of ``size``-byte elements per stage."""
    return config.num_stages * (config.block_m + config.block_n) * config.block_k * size


def fits(config: Config, size: int, limit: int | None) -> bool:
    """Whether the config's pipeline fits ``limit`` bytes of shared memory (None: no limit, the
    interpreter)."""
    return limit is None or pipeline_bytes(config, size) <= limit


def affordable(items: list[Any], work: Callable[[Any], int], budget: int) -> list[Any]:
    """In the interpreter, the items whose work (tile iterations) is within ``budget``, and
    always the one of least work."""
    least = min(work(item) for item in items)
    return [item for item in items if work(item) <= max(budget, least)]
