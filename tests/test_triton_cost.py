"""The Triton plugin's cost model (``tunesmith_triton/cost.py``), through the core's hook, on
Problems of meta tensors and the H100-SXM preset: no GPU needed."""

from __future__ import annotations

import attrs
import pytest
import torch
from tunesmith_triton.choice import Config, TritonChoice

import tunesmith
from tunesmith import hooks
from tunesmith.cost.profiles import PRESETS
from tunesmith.cost.roofline import problem_cost
from tunesmith.problem import build_problem
from tunesmith_hookspecs import ChoiceSpec, Problem

H100 = PRESETS["H100-SXM"]
BIG = dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)
THIN = dict(block_m=16, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=4)


def problem(m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16) -> Problem:
    """An mm Problem on "cuda" built from meta tensors (nothing is allocated)."""
    a, b = torch.empty(m, k, dtype=dtype, device="meta"), torch.empty(k, n, dtype=dtype, device="meta")
    built, _ = build_problem("mm", [a, b], {})
    return attrs.evolve(built, output=attrs.evolve(built.output, device="cuda"))


def estimate(p: Problem, template: str, device=H100, **params) -> float:
    choice = TritonChoice(ChoiceSpec("triton", template, Config(**params).params()), p, "tf32", 132)
    ms = hooks.estimate_runtime(choice, device, tunesmith.current_options())
    assert ms is not None, "the triton plugin answers for its own choices"
    return ms


@pytest.mark.parametrize(
    ("template", "params"),
    [("gemm", BIG), ("gemm", THIN), ("gemm_tma", BIG | {"persistent": True}), ("gemm", THIN | {"split_k": 4})],
)
@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (16, 4096, 4096), (1000, 1000, 1000)])
def test_no_estimate_beats_the_roofline(template, params, shape):
    p = problem(*shape)
    assert estimate(p, template, **params) >= problem_cost(p, H100).ms


def test_large_tiles_win_large_problems_and_split_k_wins_thin_ones():
    square = problem(8192, 8192, 8192)
    assert estimate(square, "gemm_tma", **BIG, persistent=True) < estimate(square, "gemm", **BIG)
    assert estimate(square, "gemm", **BIG) < estimate(square, "gemm", **THIN) / 4
    decode = problem(16, 4096, 4096)
    assert estimate(decode, "gemm", **THIN, split_k=4) < estimate(decode, "gemm", **THIN) / 1.5


def test_a_faster_device_gets_lower_estimates():
    p = problem(4096, 4096, 4096)
    assert estimate(p, "gemm", PRESETS["B200"], **BIG) < estimate(p, "gemm", H100, **BIG)
    assert estimate(p, "gemm", H100, **BIG) < estimate(p, "gemm", PRESETS["A100-SXM"], **BIG)
