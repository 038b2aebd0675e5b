"""The search space: tile configs that fit the device and make sense for the shape."""

from __future__ import annotations

import functools

import torch

from tunesmith_hookspecs import Problem
from tunesmith_triton.choice import Config

#: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): large tiles for large problems, thin ones for
#: small M (decode), deep K tiles for long reductions
GPU_CONFIGS = (
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (128, 128, 32, 4, 4),
    (64, 256, 64, 8, 3),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 64, 4, 4),
    (64, 64, 128, 4, 3),
    (32, 64, 128, 4, 3),
    (16, 64, 256, 4, 3),
    (16, 128, 128, 4, 4),
    (16, 256, 64, 4, 4),
)
#: the interpreter runs every program instance in numpy: few, small tiles
INTERPRETER_CONFIGS = ((32, 32, 32, 4, 1), (128, 128, 64, 4, 1))


@functools.cache
def _shared_memory(device: int) -> int:
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024


def _pow2_at_least(n: int, floor: int = 16) -> int:
    size = floor
    while size < n:
        size *= 2
    return size


def configs_for(problem: Problem, interpreter: bool) -> list[Config]:
    """The configs worth timing for ``problem``: each fits shared memory, and no tile is more than
    twice the size of its dimension (rounded up to a power of two)."""
    out = problem.output
    m, n = out.shape[-2], out.shape[-1]
    k = problem.inputs[0].shape[-1] if problem.op not in ("addmm", "baddbmm") else problem.inputs[1].shape[-1]
    size = 4 if problem.inputs[0].dtype == "float32" else 2
    if interpreter:
        candidates, limit = INTERPRETER_CONFIGS, None
    else:
        candidates, limit = GPU_CONFIGS, _shared_memory(torch.cuda.current_device())
    found, seen = [], set()
    for bm, bn, bk, warps, stages in candidates:
        bm, bn, bk = min(bm, _pow2_at_least(m)), min(bn, _pow2_at_least(n)), min(bk, _pow2_at_least(k))
        if limit is not None and stages * (bm * bk + bk * bn) * size > limit:
            continue
        config = Config(bm, bn, bk, 8, warps, stages)
        if config not in seen:
            seen.add(config)
            found.append(config)
    return found
