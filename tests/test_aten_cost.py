"""The ATen plugin's cost model (``tunesmith_aten/cost.py``): the kernels torch runs for a Problem,
each at the roofline plus a launch, on meta tensors and the H100-SXM preset."""

from __future__ import annotations

import pytest
import torch

import tunesmith
from tunesmith import hooks
from tunesmith.cost.profiles import PRESETS
from tunesmith.cost.roofline import problem_cost
from tunesmith.problem import build_problem, on_device
from tunesmith_aten.cost import LAUNCH_S, estimate_ms, kernels
from tunesmith_hookspecs import ChoiceSpec

H100 = PRESETS["H100-SXM"]


def meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, dtype=torch.bfloat16, device="meta")


def problem(op: str, *tensors: torch.Tensor, epilogue=()):
    return on_device(build_problem(op, list(tensors), {}, epilogue)[0], "cuda")


def test_a_large_gemm_is_estimated_at_its_roofline_and_one_launch():
    p = problem("mm", meta(8192, 8192), meta(8192, 8192))
    assert estimate_ms(p, "eager", H100) == pytest.approx(problem_cost(p, H100).ms + LAUNCH_S * 1e3)


@pytest.mark.parametrize(
    ("op", "shapes", "epilogue", "template", "count"),
    [
        ("addmm", [(64,), (32, 48), (48, 64)], ["relu"], "eager", 2),  # bias in cuBLAS's epilogue
        ("addmm", [(64,), (32, 48), (48, 64)], ["relu"], "addmm_activation", 1),
        ("addmm", [(32, 64), (32, 48), (48, 64)], [], "eager", 2),  # a full bias is copied first
        ("baddbmm", [(4, 32, 64), (4, 32, 48), (4, 48, 64)], [], "eager", 2),
        ("mm_plus_mm", [(32, 48), (48, 64), (32, 48), (48, 64)], [], "eager", 3),
        ("mm_plus_mm", [(32, 48), (48, 64), (32, 48), (48, 64)], [], "mm_then_addmm", 3),
    ],
)
def test_each_kernel_torch_runs_is_counted(op, shapes, epilogue, template, count):
    assert len(kernels(problem(op, *(meta(*s) for s in shapes), epilogue=epilogue), template)) == count


def test_a_bias_of_no_dimensions_is_copied_and_two_products_split_their_flops_by_k():
    scalar = torch.empty((), dtype=torch.bfloat16, device="meta")
    assert len(kernels(problem("addmm", scalar, meta(32, 48), meta(48, 64)), "eager")) == 2
    p = problem("mm_plus_mm", meta(32, 16), meta(16, 64), meta(32, 48), meta(48, 64))
    first, second, _ = kernels(p, "eager")
    assert (first[0], second[0]) == (2 * 32 * 64 * 16, 2 * 32 * 64 * 48)


def test_the_plugin_answers_for_its_own_choices_through_the_hook():
    import tunesmith_aten

    p = problem("mm", meta(256, 512), meta(512, 128))
    choice = tunesmith_aten.AtenChoice(ChoiceSpec("aten", "eager"), p)
    assert hooks.estimate_runtime(choice, H100, tunesmith.current_options()) == estimate_ms(p, "eager", H100)
    assert estimate_ms(p, "eager", H100) > LAUNCH_S * 1e3
