"""The Triton plugin's conv template, run in Triton's interpreter on the CPU (``TRITON_INTERPRET=1``,
in a subprocess: the flag is read when the kernels are defined): 1x1, 3x3 and other kernels,
NCHW and channels_last inputs (and outputs), stride, padding and dilation, bias, float32 and float16, an epilogue
chain, each choice and its rebuilt twin against the float64 reference; and what it declines."""

from __future__ import annotations

import pytest

from conftest import run_interpreted

CHECK = r"""
import json, torch
from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.problem import build_problem
from tunesmith_hookspecs import ChoiceSpec
from tunesmith_triton import tunesmith_choices, tunesmith_rebuild_choice

torch.manual_seed(0)
N, C, H, W, OC = 2, 5, 7, 6, 6

def image(channels, dtype, layout):
    if layout == "strided":  # every other channel of a wider image
        return torch.randn(N, 2 * channels, H, W).to(dtype)[:, ::2]
    x = torch.randn(N, channels, H, W).to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x

def operand(kind, shape, dtype):
    if kind == "full":
        return torch.randn(shape).to(dtype)
    if kind == "full_cl":  # a channels_last tensor: its pixels still flatten to one stride
        return torch.randn(shape).to(dtype).contiguous(memory_format=torch.channels_last)
    if kind == "channel":
        return torch.randn(shape[1], 1, 1).to(dtype)
    return torch.randn(shape[-1]).to(dtype)  # "column": one value per output column (declined)

def step(item, shape, dtype):
    return (item[0], operand(item[1], shape, dtype)) if isinstance(item, tuple) and isinstance(item[1], str) else item

CHAIN = ["relu", ("add", "full"), ("mul", 0.5), ("add", "channel")]
# (kernel (kh, kw), layout, scalars, bias, dtype, epilogue, input channels)
cases = [
    ((1, 1), "contiguous", {}, True, torch.float32, [], C),
    ((1, 1), "channels_last", {"stride": 2}, False, torch.float32, [], C),
    ((1, 1), "contiguous", {}, False, torch.float16, [], C),
    ((3, 3), "contiguous", {"padding": 1}, True, torch.float32, [], C),
    ((3, 3), "channels_last", {"padding": 1}, True, torch.float32, [], C),
    ((3, 3), "channels_last", {"padding": 1}, True, torch.float16, [], C),
    ((3, 3), "contiguous", {"stride": 2, "padding": 1}, False, torch.float32, [], C),
    ((3, 3), "channels_last", {"padding": 1, "dilation": 2}, True, torch.float16, [], C),
    ((3, 3), "strided", {"padding": 1, "stride": [2, 1]}, True, torch.float32, [], C),
    ((2, 3), "contiguous", {"padding": [0, 1], "stride": [1, 2]}, True, torch.float32, [], C),
    ((3, 3), "channels_last", {"padding": 1}, False, torch.float32, [], 16),  # whole channel chunks
    ((3, 3), "channels_last", {"padding": 1}, True, torch.float32, CHAIN, C),
    ((3, 3), "contiguous", {"padding": 1}, True, torch.float16, CHAIN, C),
    ((1, 1), "channels_last", {}, False, torch.float32, [("mul", "full_cl"), "sigmoid"], C),
    ((3, 3), "contiguous", {}, True, torch.float16, [("cast", torch.float32), "gelu"], C),
]

rows = []
for kernel, layout, scalars, bias, dtype, chain, channels in cases:
    x = image(channels, dtype, layout)
    w = torch.randn(OC, channels, *kernel).to(dtype)
    ts = [x, w, torch.randn(OC).to(dtype)] if bias else [x, w]
    shape = build_problem("conv", ts, scalars)[0].output.shape
    problem, inputs = build_problem("conv", ts, scalars, [step(s, shape, dtype) for s in chain])
    ref = reference(problem, inputs)
    choices = tunesmith_choices(problem, None)
    errors, layouts = [], set()
    for choice in choices:
        choice.precompile()
        for c in (choice, tunesmith_rebuild_choice(choice.spec, problem)):
            out = c.kernel()(*inputs)
            errors.append(relative_error(out, ref))
            layouts.add(tuple(out.stride()) == problem.output.stride)
    rows.append({"case": f"{kernel}-{layout}-{scalars}-bias={bias}-{str(dtype)[6:]}-{chain}-C={channels}",
                 "choices": len(choices), "worst": max(errors, default=None), "tolerance": tolerance(problem),
                 "layouts_right": layouts == {True}, "channel_stride": problem.output.stride[1]})

def offered(ts, scalars, epilogue=()):
    problem = build_problem("conv", ts, scalars, list(epilogue))[0]
    return problem, len(tunesmith_choices(problem, None))

x, w = torch.randn(N, 4, H, W), torch.randn(OC, 2, 3, 3)
plain, _ = offered([torch.randn(N, C, H, W), torch.randn(OC, C, 3, 3)], {})
declined = {
    "groups2": offered([x, w], {"groups": 2})[1],
    "bfloat16": offered([torch.randn(N, C, H, W).bfloat16(), torch.randn(OC, C, 3, 3).bfloat16()], {})[1],
    "column_operand": offered([torch.randn(N, C, H, W), torch.randn(OC, C, 3, 3)], {},
                              [("add", torch.randn(W - 2))])[1],
    "gemm_spec": tunesmith_rebuild_choice(ChoiceSpec("triton", "gemm", {"block_m": 16, "block_n": 16, "block_k": 16,
                                          "group_m": 8, "num_warps": 4, "num_stages": 1}), plain) is not None,
}
print(json.dumps({"rows": rows, "declined": declined}))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return run_interpreted(CHECK)


def test_every_conv_case_is_right_in_the_interpreter(interpreted):
    rows = interpreted["rows"]
    assert len(rows) == 15
    empty = [r["case"] for r in rows if not r["choices"]]
    assert not empty, f"no Triton conv choice for {empty}"
    wrong = [r for r in rows if not r["worst"] <= r["tolerance"]]
    assert not wrong, f"wrong results: {wrong[:5]}"
    misplaced = [r["case"] for r in rows if not r["layouts_right"]]
    assert not misplaced, f"output not in the Problem's layout: {misplaced}"
    last = [r["channel_stride"] == 1 for r in rows if "channels_last" in r["case"]]
    assert last and all(last), "a channels_last input's conv Problem does not ask for a channels_last output"


def test_grouped_bfloat16_and_unflattenable_operands_get_no_conv_choice(interpreted):
    assert interpreted["declined"] == {"groups2": 0, "bfloat16": 0, "column_operand": 0, "gemm_spec": False}
