"""Every op, in float32, float16 and bfloat16 on the CPU, matches the float64 reference by
relative norm error; odd sizes, transposed and strided inputs, epilogues and zero sizes included."""

from __future__ import annotations

import pytest
import torch

import tunesmith
from tunesmith import attention
from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.problem import build_problem, on_device

from conftest import rand

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
SIZES = [1, 17, 127]
LAYOUTS = ["contiguous", "transposed", "strided"]


def matrix(rows: int, cols: int, dtype: torch.dtype, layout: str) -> torch.Tensor:
    if layout == "transposed":
        return rand(cols, rows, dtype=dtype).t()
    if layout == "strided":  # every other column of a wider matrix, at an offset
        return rand(rows, 2 * cols + 1, dtype=dtype)[:, 1::2]
    return rand(rows, cols, dtype=dtype)


def batched(b: int, rows: int, cols: int, dtype: torch.dtype, layout: str) -> torch.Tensor:
    if layout == "transposed":
        return rand(b, cols, rows, dtype=dtype).transpose(1, 2)
    if layout == "strided":
        return rand(b, rows, 2 * cols, dtype=dtype)[:, :, ::2]
    return rand(b, rows, cols, dtype=dtype)


def case(op: str, n: int, dtype: torch.dtype, layout: str):
    """(tensors, scalars, epilogue) of one op at size ``n`` (M = n, N = n + 2, K = n + 1)."""
    M, N, K = n, n + 2, n + 1
    if op == "mm":
        extra = rand(M, N, dtype=dtype)
        return (
            [matrix(M, K, dtype, layout), matrix(K, N, dtype, layout)],
            {},
            ["gelu", ("add", extra), ("mul", 0.5), "silu"],
        )
    if op == "addmm":
        return (
            [rand(N, dtype=dtype), matrix(M, K, dtype, layout), matrix(K, N, dtype, layout)],
            {"alpha": 0.5, "beta": 2.0},
            ["relu"],
        )
    if op == "bmm":
        return [batched(3, M, K, dtype, layout), batched(3, K, N, dtype, layout)], {}, ["sigmoid"]
    if op == "baddbmm":
        return (
            [rand(3, 1, N, dtype=dtype), batched(3, M, K, dtype, layout), batched(3, K, N, dtype, layout)],
            {"beta": 0.5},
            ["tanh", ("mul", rand(N, dtype=dtype))],
        )
    if op == "mm_plus_mm":
        tensors = [
            matrix(M, K, dtype, layout),
            matrix(K, N, dtype, layout),
            matrix(M, K + 3, dtype, layout),
            matrix(K + 3, N, dtype, layout),
        ]
        return tensors, {}, ["gelu_tanh"]
    # conv: NCHW, or channels_last for "transposed", or a sliced input for "strided"
    x = rand(2, 4, n + 2, n + 3, dtype=dtype)
    if layout == "transposed":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "strided":
        x = rand(2, 8, n + 2, n + 3, dtype=dtype)[:, ::2]
    w, b = rand(6, 2, 3, 3, dtype=dtype), rand(6, dtype=dtype)
    return [x, w, b], {"stride": (2, 1), "padding": 1, "groups": 2}, ["relu", ("cast", torch.float32)]


def check(op, tensors, scalars, epilogue):
    sel = tunesmith.tune(op, *tensors, epilogue=epilogue, **scalars)
    problem, inputs = build_problem(op, tensors, scalars, epilogue)
    for spec in sel.timings:  # the winner and the kernel of every other choice
        assert sel.timings[spec] > 0, spec
    out = sel.kernel(*inputs)
    ref = reference(problem, inputs)
    assert out.dtype == getattr(torch, problem.output.dtype)
    assert tuple(out.shape) == tuple(ref.shape)
    err = relative_error(out, ref)
    assert err <= tolerance(problem), f"{sel.spec}: relative error {err:.3g} > {tolerance(problem):g}"
    return sel


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["mm", "addmm", "bmm", "baddbmm", "mm_plus_mm", "conv"])
@pytest.mark.parametrize("device", DEVICES)
def test_matches_float64_reference(device, op, dtype, n, layout):
    with torch.device(device):  # factory functions in case() make their tensors there
        tensors, scalars, epilogue = case(op, n, dtype, layout)
    assert tensors[0].device.type == device
    sel = check(op, tensors, scalars, epilogue)
    assert sel.report.device_name.startswith("cpu") == (device == "cpu")


def test_every_aten_choice_of_mm_plus_mm_is_right():
    tensors = [rand(33, 20), rand(20, 40), rand(33, 7), rand(7, 40)]
    sel = tunesmith.tune("mm_plus_mm", *tensors)
    problem, inputs = build_problem("mm_plus_mm", tensors, {})
    from tunesmith_aten import AtenChoice

    assert {s.template for s in sel.timings} == {"eager", "mm_then_addmm"}
    for spec in sel.timings:
        out = AtenChoice(spec, problem).kernel()(*inputs)
        assert relative_error(out, reference(problem, inputs)) <= 1e-5


ADDMM_ACTIVATION = "addmm_activation"


@pytest.mark.parametrize(
    ("op", "bias_shape", "epilogue", "dtype", "beta", "fused"),
    [
        ("addmm", (40,), ["relu"], torch.float32, 1.0, True),
        ("addmm", (40,), ["gelu_tanh", ("mul", 2.0)], torch.bfloat16, 1.0, True),
        ("addmm", (40,), ["gelu_tanh"], torch.float32, 1.0, False),
        ("addmm", (40,), ["gelu"], torch.float16, 1.0, False),
        ("addmm", (40,), [("mul", 2.0), "relu"], torch.float32, 1.0, False),
        ("addmm", (40,), [], torch.float32, 1.0, False),
        ("addmm", (33, 40), ["relu"], torch.float32, 1.0, False),
        ("addmm", (1,), ["relu"], torch.float32, 1.0, False),
        ("addmm", (40,), ["relu"], torch.float32, 1.5, False),
        ("baddbmm", (40,), ["relu"], torch.float32, 1.0, False),
    ],
)
def test_aten_offers_addmm_activation_where_cublaslt_finishes_the_step(op, bias_shape, epilogue, dtype, beta, fused):
    """On a GPU, torch's ``_addmm_activation`` applies relu, or tanh-GELU (its only GELU there),
    in cuBLASLt's epilogue for beta 1 and a bias of length N; offered there, in half types only for
    GELU, and nowhere else (the CPU included)."""
    from tunesmith_aten import tunesmith_choices, tunesmith_rebuild_choice
    from tunesmith_hookspecs import ChoiceSpec

    a, b = rand(33, 20, dtype=dtype), rand(20, 40, dtype=dtype)
    if op == "baddbmm":  # (K = N, so that only the op tells it from an addmm)
        a, b = rand(2, 33, 40, dtype=dtype), rand(2, 40, 40, dtype=dtype)
    problem, _ = build_problem(op, [rand(*bias_shape, dtype=dtype), a, b], {"beta": beta}, epilogue)
    spec = ChoiceSpec("aten", ADDMM_ACTIVATION)
    assert spec not in [c.spec for c in tunesmith_choices(problem, None)]
    assert tunesmith_rebuild_choice(spec, problem) is None
    gpu = on_device(problem, "cuda")
    assert (spec in [c.spec for c in tunesmith_choices(gpu, None)]) == fused
    assert (tunesmith_rebuild_choice(spec, gpu) is not None) == fused


def _addmm_activation_case(dtype, first, device="cpu"):
    """An addmm (alpha 0.75) whose epilogue goes on past ``first``: a tensor operand, a cast."""
    with torch.device(device):
        tensors = [rand(40, dtype=dtype), rand(33, 20, dtype=dtype), rand(20, 40, dtype=dtype)]
        epilogue = [first, ("add", rand(33, 40, dtype=dtype)), ("mul", 0.5), ("cast", torch.float32)]
    return build_problem("addmm", tensors, {"alpha": 0.75}, epilogue)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_aten_addmm_activation_matches_the_reference(dtype):
    """Its kernel, in the relu form (on the CPU, where relu means the same): the step, the rest of
    the epilogue after it with its tensor operand, alpha, and the output dtype."""
    from tunesmith_aten import AtenChoice
    from tunesmith_hookspecs import ChoiceSpec

    problem, inputs = _addmm_activation_case(dtype, "relu")
    out = AtenChoice(ChoiceSpec("aten", ADDMM_ACTIVATION), problem).kernel()(*inputs)
    assert out.dtype == torch.float32 and out.is_contiguous()
    assert relative_error(out, reference(problem, inputs)) <= tolerance(problem)


@pytest.mark.parametrize(("first", "use_gelu"), [("relu", False), ("gelu_tanh", True)])
def test_aten_addmm_activation_asks_torch_for_its_step(monkeypatch, first, use_gelu):
    """Which activation the kernel asks ``_addmm_activation`` for, and that only the steps after it
    follow (recorded around the real call: on the CPU its GELU is the erf form, so only the GPU
    test below checks GELU's values)."""
    from tunesmith_aten import AtenChoice
    from tunesmith_hookspecs import ChoiceSpec

    asked, real = [], torch._addmm_activation

    def record(*args, **kwargs):
        asked.append((kwargs["use_gelu"], real(*args, **kwargs)))
        return asked[-1][1]

    monkeypatch.setattr(torch, "_addmm_activation", record)
    problem, inputs = _addmm_activation_case(torch.float32, first)
    out = AtenChoice(ChoiceSpec("aten", ADDMM_ACTIVATION), problem).kernel()(*inputs)
    [(asked_gelu, activated)] = asked
    assert asked_gelu == use_gelu
    assert torch.equal(out, ((activated + inputs[3]) * 0.5).float())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cuBLASLt's epilogue needs a GPU")
@pytest.mark.parametrize(
    ("dtype", "first"), [(torch.bfloat16, "gelu_tanh"), (torch.float16, "gelu_tanh"), (torch.float32, "relu")]
)
def test_aten_addmm_activation_matches_the_reference_on_a_gpu(dtype, first):
    from tunesmith_aten import tunesmith_rebuild_choice
    from tunesmith_hookspecs import ChoiceSpec

    problem, inputs = _addmm_activation_case(dtype, first, "cuda")
    choice = tunesmith_rebuild_choice(ChoiceSpec("aten", ADDMM_ACTIVATION), problem)
    assert relative_error(choice.kernel()(*inputs), reference(problem, inputs)) <= tolerance(problem)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="an attention problem on a GPU has its reference there")
def test_attention_reference_on_a_gpu_is_the_cpus():
    """A training attention problem's float64 reference, computed on its GPU in slices (grouped
    key heads, a padding mask), is the CPU's, and comes back on the CPU."""
    q, k, v = rand(2, 8, 40, 64), rand(2, 2, 56, 64), rand(2, 2, 56, 64)
    mask = torch.rand(2, 1, 1, 56) > 0.3
    tensors = [t.to("cuda", torch.bfloat16).requires_grad_() for t in (q, k, v)] + [mask.cuda()]
    problem, inputs = build_problem("attention", tensors, {})
    on_cpu = attention.reference(problem, [t.detach().cpu() for t in inputs])
    for pairs in (2, 4, 8):  # (batch, head) pairs a slice: within a key head's group, one group, a batch
        on_gpu = attention.reference(problem, inputs, chunk=pairs * 40 * 56)
        assert all(t.device.type == "cpu" for t in on_gpu)
        assert relative_error(on_gpu, on_cpu) < 1e-12, pairs


def test_reference_catches_a_wrong_result():
    """The measure used above fails a result off by 1e-2, and any NaN."""
    tensors = [rand(30, 40), rand(40, 50)]
    problem, inputs = build_problem("mm", tensors, {})
    ref = reference(problem, inputs)
    good = inputs[0] @ inputs[1]
    assert relative_error(good, ref) <= tolerance(problem)
    assert relative_error(good * 1.01, ref) > tolerance(problem)
    poisoned = good.clone()
    poisoned[3, 4] = float("nan")
    assert relative_error(poisoned, ref) == float("inf")


@pytest.mark.parametrize("bias", [True, False])
def test_a_conv_epilogue_tensor_is_never_taken_for_its_bias(bias):
    """The reference and the eager run of a conv pass only the op's tensors to conv2d: with one
    epilogue tensor a biasless conv has three inputs, and with a bias it has four."""
    x, w, b, extra = rand(2, 3, 6, 5), rand(4, 3, 3, 3), rand(4), rand(2, 4, 4, 3)
    tensors = [x, w, b] if bias else [x, w]
    problem, inputs = build_problem("conv", tensors, {}, [("add", extra)])
    expected = torch.nn.functional.conv2d(x, w, b if bias else None) + extra
    assert relative_error(reference(problem, inputs), expected.double()) <= 1e-6
    assert relative_error(tunesmith.ops.run(problem, inputs), expected) <= 1e-5


ZERO_CASES = {
    "mm_empty_m": ("mm", lambda: [rand(0, 5), rand(5, 7)], {}),
    "mm_k0": ("mm", lambda: [rand(4, 0), rand(0, 7)], {}),
    "addmm_k0": ("addmm", lambda: [rand(7), rand(4, 0), rand(0, 7)], {"beta": 3.0}),
    "bmm_b0": ("bmm", lambda: [rand(0, 4, 5), rand(0, 5, 6)], {}),
    "baddbmm_k0": ("baddbmm", lambda: [rand(2, 4, 6), rand(2, 4, 0), rand(2, 0, 6)], {}),
    "mm_plus_mm_k0": ("mm_plus_mm", lambda: [rand(4, 0), rand(0, 6), rand(4, 3), rand(3, 6)], {}),
    "conv_n0": ("conv", lambda: [rand(0, 4, 8, 8), rand(6, 4, 3, 3)], {}),
}


@pytest.mark.parametrize("name", ZERO_CASES)
@pytest.mark.parametrize("device", DEVICES)
def test_zero_sizes_give_the_right_output_without_benchmarking(device, name):
    op, make, scalars = ZERO_CASES[name]
    with torch.device(device):
        tensors = make()
    sel = tunesmith.tune(op, *tensors, epilogue=["relu"], **scalars)
    problem, inputs = build_problem(op, tensors, scalars, ["relu"])
    out = sel.kernel(*inputs)
    ref = reference(problem, inputs)
    assert tuple(out.shape) == tuple(ref.shape)
    assert relative_error(out, ref) <= 1e-6
    assert sel.spec.template == "empty" and sel.timings == {}
    assert sel.report.source == "empty" and not sel.cached and not sel.report.cached
    assert tunesmith.counters["precompile"] == 0


@pytest.mark.parametrize(
    "view", [torch.randn(6, 5).t(), torch.randn(4, 9)[1:, ::2], torch.randn(3, 0, 2)[1:], torch.randn(7)[3:]]
)
def test_scratch_tensors_keep_the_layout_offset_included(view):
    """``scratch_like`` (what precompiles run on): the Problem's shape, strides and storage offset."""
    from tunesmith.problem import scratch_like
    from tunesmith_hookspecs import TensorMeta

    meta = TensorMeta(view.shape, view.stride(), "float32", storage_offset=view.storage_offset())
    t = scratch_like(meta, torch.device("cpu"))
    assert (t.shape, t.stride(), t.storage_offset()) == (view.shape, view.stride(), view.storage_offset())
