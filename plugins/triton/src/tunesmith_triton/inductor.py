"""Inductor's max-autotune search space, written down as tunesmith's own data and rules: the
Triton configs Inductor's GEMM and conv templates try for a problem on a CUDA GPU, which
tunesmith's search space (``configs.py``, ``conv.py``) must contain.

Nothing here imports Inductor: its heuristics are private and change between torch versions.
The lists are torch 2.13's (``torch/_inductor/template_heuristics/triton.py``), which hold those
of earlier versions; ``tests/test_triton_space.py`` checks them against the installed torch's own
where it can import them. With the default settings
(``max_autotune_gemm_search_space = "DEFAULT"``, no pruning by shared memory, no persistent TMA
template) Inductor, on a CUDA GPU:

- mm, addmm, bmm, baddbmm: each config of ``MM`` with each block cut to the problem (no more than
  its dimension rounded up to a power of two, at least 16), and its warps cut to one per 256
  elements of the output tile; duplicates are tried once. A float32, float16 or bfloat16 problem
  gets the same list (dtype only matters to shared memory, which Inductor learns by failing to
  compile). mm also gets decompose-K (a split-K by batched GEMM) where K >= 32 M and K >= 32 N,
  and no template at all where K >= 64 M and K >= 64 N (tunesmith's split-K serves that region
  where the output has fewer tiles than the GPU has SMs).
- mm + mm: each config of ``MM_PLUS_MM`` as it is (not cut to the problem), only if its BLOCK_K is
  less than K, its warps cut as above.
- conv (2-D, forward): each config of ``CONV`` cut as for mm with M = images x input pixels,
  N = output channels, K = input channels; then no more than 4 warps unless the kernel is 1 x 1.

Configs are (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages), the order of ``configs.py``'s tables
(Inductor writes stages before warps).
"""

from __future__ import annotations

from collections.abc import Iterable

#: the mm and bmm template's configs (torch 2.13 added 128 x 256 x 64 with 4 stages, 8 warps)
MM = (
    (32, 32, 16, 2, 1),
    (32, 32, 128, 4, 2),
    (32, 64, 32, 8, 5),
    (64, 32, 32, 8, 5),
    (64, 32, 128, 4, 5),
    (64, 64, 16, 4, 2),
    (64, 64, 32, 4, 2),
    (64, 64, 64, 8, 3),
    (64, 64, 128, 4, 5),
    (64, 128, 32, 4, 3),
    (64, 128, 32, 8, 4),
    (64, 128, 64, 4, 3),
    (64, 128, 128, 4, 4),
    (128, 64, 32, 4, 3),
    (128, 64, 32, 8, 4),
    (128, 128, 32, 8, 2),
    (128, 128, 32, 4, 3),
    (128, 128, 64, 4, 3),
    (128, 128, 64, 8, 5),
    (128, 128, 128, 8, 4),
    (128, 256, 64, 8, 4),
)
#: the mm + mm template's configs, not cut to the problem
MM_PLUS_MM = (
    (64, 64, 32, 4, 2),
    (64, 64, 32, 8, 3),
    (64, 64, 32, 16, 4),
    (64, 32, 32, 8, 4),
    (32, 64, 32, 8, 4),
    (128, 128, 32, 8, 1),
    (64, 64, 64, 8, 1),
    (32, 32, 128, 8, 1),
    (64, 64, 16, 4, 2),
    (32, 32, 16, 2, 1),
)
#: the conv template's configs (earlier versions had the first seven)
CONV = (
    (64, 256, 16, 4, 2),
    (256, 64, 16, 4, 2),
    (1024, 16, 16, 8, 1),
    (128, 128, 32, 8, 2),
    (64, 64, 32, 4, 2),
    (64, 256, 32, 8, 2),
    (256, 64, 32, 8, 2),
    (128, 128, 64, 8, 3),
    (64, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
    (256, 128, 64, 8, 2),
    (128, 256, 64, 8, 2),
    (128, 128, 128, 8, 2),
    (128, 128, 128, 8, 3),
    (64, 128, 128, 4, 4),
    (256, 128, 128, 8, 2),
    (128, 256, 128, 8, 2),
)
#: the smallest block Inductor cuts to, and the elements of the output tile per warp
MIN_BLOCK, ELEMENTS_PER_WARP = 16, 256
#: the most warps Inductor gives a conv whose kernel is not 1 x 1
CONV_WARPS = 4

Tile = tuple[int, int, int, int, int]


def _cap(size: int) -> int:
    """The largest block Inductor gives a dimension of ``size``: size rounded up to a power of two."""
    block = MIN_BLOCK
    while block < size:
        block *= 2
    return block


def _warps(bm: int, bn: int, warps: int) -> int:
    return max(1, min(warps, bm * bn // ELEMENTS_PER_WARP))


def _unique(tiles: Iterable[Tile]) -> list[Tile]:
    return list(dict.fromkeys(tiles))


def scaled(configs: Iterable[Tile], m: int, n: int, k: int) -> list[Tile]:
    """Each config with its blocks cut to an M x N x K problem and its warps to its tile, once."""
    out = []
    for bm, bn, bk, warps, stages in configs:
        bm, bn, bk = min(bm, _cap(m)), min(bn, _cap(n)), min(bk, _cap(k))
        out.append((bm, bn, bk, _warps(bm, bn, warps), stages))
    return _unique(out)


def mm_configs(m: int, n: int, k: int) -> list[Tile]:
    """What Inductor's mm and bmm templates try for (batches of) M x K by K x N products."""
    return scaled(MM, m, n, k)


def mm_plus_mm_configs(k: int) -> list[Tile]:
    """What Inductor's mm + mm template tries, for a first product of depth K."""
    return _unique((bm, bn, bk, _warps(bm, bn, w), s) for bm, bn, bk, w, s in MM_PLUS_MM if bk < k)


def conv_configs(images: int, in_pixels: int, out_channels: int, in_channels: int, one_by_one: bool) -> list[Tile]:
    """What Inductor's 2-D conv template tries: rows are every input pixel of every image."""
    tiles = scaled(CONV, images * in_pixels, out_channels, in_channels)
    if one_by_one:
        return tiles
    return _unique((bm, bn, bk, min(w, CONV_WARPS), s) for bm, bn, bk, w, s in tiles)
