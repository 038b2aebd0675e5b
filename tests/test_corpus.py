"""Problem files on the CPU: every epilogue step through the benchmarks' eager path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from tunesmith import problemset
from tunesmith.errors import ProblemError
from tunesmith_hookspecs import EPILOGUE_OPS

from conftest import REPO

BENCHMARKS = REPO / "benchmarks"
#: one step of each kind, with the operand the problem-set format gives it, and what it must compute
STEPS = {
    "relu": ("relu", torch.relu),
    "gelu": ("gelu", F.gelu),
    "gelu_tanh": ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    "silu": ("silu", F.silu),
    "sigmoid": ("sigmoid", torch.sigmoid),
    "tanh": ("tanh", torch.tanh),
    "add": (["add", 1.5], lambda x: x + 1.5),
    "mul": (["mul", 0.125], lambda x: x * 0.125),
    "cast": (["cast", "bfloat16"], lambda x: x.to(torch.bfloat16)),
}


def _module(path: Path) -> ModuleType:
    """A benchmark script imported as a module (benchmarks/ on sys.path, for its own imports)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("name", EPILOGUE_OPS)
def test_every_epilogue_step_runs_through_the_benchmarks_eager_path(name):
    gemm = _module(BENCHMARKS / "gemm.py")
    step, expected = STEPS[name]
    case = problemset.Case(f"addmm_{name}", "addmm", "float32", {"M": 5, "N": 7, "K": 3, "epilogue": [step]})
    tensors, scalars = problemset.make_inputs(case, "cpu", seed=1)
    out = gemm._eager(case)(scalars, *tensors)
    want = expected(torch.addmm(*tensors))
    assert out.dtype == want.dtype
    torch.testing.assert_close(out, want)


def test_a_problem_file_takes_numbers_and_dtypes_as_step_operands_and_nothing_else():
    def case(steps):
        return problemset.Case("c", "mm", "float32", {"M": 2, "N": 2, "K": 2, "epilogue": steps})

    ops = problemset.epilogue_ops(case(["tanh", ["mul", 2], ["cast", "float16"]]))
    want = [("tanh", None, None), ("mul", 2.0, None), ("cast", None, "float16")]
    assert [(s.name, s.scalar, s.dtype) for s in ops] == want
    for bad in (["mul"], [["mul", "x"]], [["cast", "int8"]], [["relu", 1.0]], [["mul", 1, 2]], [["mul", True]]):
        with pytest.raises(ProblemError):
            problemset.epilogue_ops(case(bad))


def test_a_bmm_case_can_take_a_transposed_b():
    case = problemset.Case("b", "bmm", "float32", {"B": 2, "M": 3, "N": 5, "K": 4, "layout_b": "col"})
    _, b = problemset.make_inputs(case, "cpu")[0]
    assert b.shape == (2, 4, 5) and b.stride() == (20, 1, 4)
