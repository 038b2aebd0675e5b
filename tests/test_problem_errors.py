"""Every mistake in the arguments of tune() ends in one ProblemError that says what is wrong."""

from __future__ import annotations

import pytest
import torch

import tunesmith

from conftest import rand


@pytest.mark.parametrize(
    ("op", "make", "scalars", "message"),
    [
        ("matmul", lambda: [rand(2, 3), rand(3, 4)], {}, "unknown op 'matmul'"),
        ("mm", lambda: [rand(2, 3), rand(4, 5)], {}, "inner sizes 3 and 4 differ"),
        ("mm", lambda: [rand(2, 3)], {}, "mm takes 2 tensors"),
        ("mm", lambda: [rand(2, 3, 1), rand(3, 4)], {}, "mat1 must be 2-D"),
        ("addmm", lambda: [rand(5), rand(2, 3), rand(3, 4)], {}, "does not broadcast"),
        ("bmm", lambda: [rand(2, 3, 4), rand(3, 4, 5)], {}, "batch sizes 2 and 3 differ"),
        ("mm_plus_mm", lambda: [rand(2, 3), rand(3, 4), rand(2, 3), rand(3, 5)], {}, "c@d has shape (2, 5)"),
        ("mm", lambda: [rand(2, 3).int(), rand(3, 4).int()], {}, "unsupported dtype int32"),
        ("mm", lambda: [rand(2, 3).double(), rand(3, 4).double()], {}, "unsupported dtype float64"),
        ("mm", lambda: [rand(2, 3), rand(3, 4).half()], {}, "different dtypes"),
        ("mm", lambda: [rand(2, 3), torch.empty(3, 4, device="meta")], {}, "different devices"),
        ("mm", lambda: [rand(2, 3), rand(3, 4)], {"alpha": 2}, "mm takes no scalar alpha"),
        ("addmm", lambda: [rand(4), rand(2, 3), rand(3, 4)], {"alpha": "x"}, "expected a number"),
        ("conv", lambda: [rand(1, 4, 8, 8), rand(6, 3, 3, 3)], {}, "do not match groups=1"),
        ("conv", lambda: [rand(1, 4, 2, 2), rand(6, 4, 5, 5)], {}, "larger than the padded input"),
        ("conv", lambda: [rand(1, 4, 8, 8), rand(6, 4, 3, 3)], {"stride": 0}, "must be >= 1"),
        ("conv", lambda: [rand(1, 4, 8, 8), rand(6, 4, 3, 3)], {"padding": "same"}, "an int or a pair"),
        ("conv", lambda: [rand(1, 4, 8, 8), rand(6, 4, 3, 3), rand(5)], {}, "bias has 5 elements"),
        ("mm", lambda: [rand(2, 3).to_sparse(), rand(3, 4)], {}, "mat1 is a sparse_coo tensor"),
        ("mm", lambda: [rand(2, 3), rand(3, 4).to_sparse_csr()], {}, "mat2 is a sparse_csr tensor"),
        ("bmm", lambda: [torch.nested.nested_tensor([rand(2, 3)] * 2), rand(2, 3, 4)], {}, "batch1 is a nested"),
        # a view of 2^40 rows over one row: a few bytes of input, an output no machine holds
        ("mm", lambda: [rand(1, 3).expand(2**40, 3), rand(3, 4)], {}, "GiB: it cannot be allocated"),
    ],
)
def test_bad_arguments_raise_one_clear_error(op, make, scalars, message):
    with pytest.raises(tunesmith.ProblemError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tunesmith.tune(op, *make(), **scalars)


@pytest.mark.parametrize(
    ("epilogue", "message"),
    [
        (["softmax"], "bad epilogue step"),
        ([("add",)], "bad epilogue step"),
        ([("add", "x")], "needs a tensor or a number"),
        ([("relu", 2.0)], "takes no operand"),
        ([("cast", "int8")], "bad epilogue step"),
        ([("add", rand(5, 5))], "does not broadcast"),
        ([("add", torch.ones(2, 4, dtype=torch.int32))], "not floating point"),
        ([("mul", torch.empty(4, device="meta"))], "tensor on meta"),
    ],
)
def test_bad_epilogues_raise_one_clear_error(epilogue, message):
    with pytest.raises(tunesmith.ProblemError, match=message):
        tunesmith.tune("mm", rand(2, 3), rand(3, 4), epilogue=epilogue)


def test_broadcast_rule():
    from tunesmith.problem import broadcasts_to

    assert broadcasts_to((4,), (3, 4)) and broadcasts_to((1, 4), (3, 4)) and broadcasts_to((3, 1), (3, 4))
    assert broadcasts_to((), (3, 4)) and broadcasts_to((2, 1, 4), (2, 3, 4))
    assert not broadcasts_to((3,), (3, 4)) and not broadcasts_to((2, 3, 4), (3, 4))
    assert not broadcasts_to((0,), (3, 4)) and broadcasts_to((0,), (3, 0))


def test_a_sparse_epilogue_operand_is_refused():
    with pytest.raises(tunesmith.ProblemError, match="epilogue: add operand is a sparse_coo tensor"):
        tunesmith.tune("mm", rand(2, 3), rand(3, 4), epilogue=[("add", rand(2, 4).to_sparse())])
