"""Attention as a tuned problem on the CPU: the Problem, its key and round trip, what it refuses,
the mask analysis of compiled graphs, the pattern match of a decomposed attention, and compiled
models against eager, gradients included."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tunesmith
from tunesmith import attention
from tunesmith.attention import attended_pairs
from tunesmith.compile import attention as graph_attention
from tunesmith.compile import swap
from tunesmith.errors import ProblemError
from tunesmith.ops import measured, reference, relative_error
from tunesmith.problem import build_problem, flops
from tunesmith_hookspecs import Problem, from_json, to_json


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    monkeypatch.setenv("TUNESMITH_GRAPH_COMPILER", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def qkv(b=2, hq=4, hkv=4, length=16, s=16, d=8, grad=False):
    q, k, v = torch.randn(b, hq, length, d), torch.randn(b, hkv, s, d), torch.randn(b, hkv, s, d)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def test_the_problem_its_key_and_round_trip():
    q, k, v = qkv(hq=4, hkv=2, s=24)
    mask = torch.rand(2, 1, 1, 24) > 0.3
    problem, inputs = build_problem("attention", [q, k, v], {"attn_mask": mask})
    assert problem.op == "attention" and len(inputs) == 4
    assert problem.output.shape == (2, 4, 16, 8)
    assert dict(problem.scalars) == {"is_causal": False, "scale": 1 / math.sqrt(8), "grad": False}
    assert from_json(to_json(problem), Problem) == problem
    # the same problem from new tensors has the same key; scale=None is 1/sqrt(E) spelled out
    again, _ = build_problem(
        "attention", qkv(hq=4, hkv=2, s=24), {"attn_mask": mask.clone(), "scale": 1 / math.sqrt(8)}
    )
    assert again.key() == problem.key()
    causal, _ = build_problem("attention", [q, k, v], {"is_causal": True})
    trained, _ = build_problem("attention", [q.requires_grad_(), k, v], {})
    assert len({problem.key(), causal.key(), trained.key()}) == 3
    assert trained.scalar("grad") is True


def test_flops_count_the_causal_triangle_and_the_backward():
    q, k, v = qkv(length=8, s=8, d=4)
    plain, _ = build_problem("attention", [q, k, v], {})
    causal, _ = build_problem("attention", [q, k, v], {"is_causal": True})
    train, _ = build_problem("attention", [q, k, v], {"grad": True})
    assert flops(plain) == 2 * 2 * 4 * 64 * (4 + 4)
    assert attended_pairs(causal) == 36 and flops(causal) == flops(plain) * 36 // 64
    assert flops(train) == int(flops(plain) * 3.5)
    longer_keys, _ = build_problem("attention", qkv(length=4, s=8, d=4), {"is_causal": True})
    assert attended_pairs(longer_keys) == 1 + 2 + 3 + 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t, s: (t[:2], s), "3 or 4 tensors"),
        (lambda t, s: ([t[0], t[1][:, :3], t[2][:, :3]], s), "not a multiple"),
        (lambda t, s: ([t[0], t[1], t[2][:, :, :5]], s), "differ in heads or length"),
        (lambda t, s: ([t[0].half(), t[1], t[2]], s), "share one dtype"),
        (lambda t, s: (t, {**s, "dropout_p": 0.1}), "dropout stays torch's"),
        (
            lambda t, s: (t, {**s, "attn_mask": torch.ones(2, 1, 16, 16, dtype=torch.bool), "is_causal": True}),
            "not both",
        ),
        (lambda t, s: (t, {**s, "attn_mask": torch.ones(3, 1, 16, 16)}), "does not broadcast"),
        (lambda t, s: (t, {**s, "attn_mask": torch.ones(2, 1, 16, 16, dtype=torch.int32)}), "must be bool"),
    ],
)
def test_what_a_user_gets_wrong_is_one_clear_error(change, message):
    tensors, scalars = change(qkv(), {})
    with pytest.raises(ProblemError, match=message):
        tunesmith.tune("attention", *tensors, **scalars)


@pytest.mark.parametrize("kind", ["plain", "causal", "gqa", "bool_mask", "bias", "one_row"])
def test_every_choice_matches_float64_forward_and_backward(kind):
    """The training step of every offered choice (output and three gradients) against float64."""
    from tunesmith import hooks
    from tunesmith.settings import current_options

    hkv = 2 if kind == "gqa" else 4
    q, k, v = qkv(hkv=hkv, length=1 if kind == "one_row" else 16, s=20, grad=True)
    scalars: dict = {"is_causal": kind == "causal"}
    if kind == "bool_mask":
        scalars["attn_mask"] = torch.rand(2, 1, 1, 20) > 0.3
    if kind == "bias":
        scalars["attn_mask"] = torch.randn(1, 4, 16, 20)
    problem, inputs = build_problem("attention", [q, k, v], scalars)
    ref = reference(problem, inputs)
    assert isinstance(ref, tuple) and len(ref) == 4  # output, dq, dk, dv
    choices, _ = hooks.choices(problem, current_options())
    assert {c.spec.param("backend") for c in choices if c.spec.backend == "aten"} >= {"default", "math"}
    for choice in choices:
        choice.precompile()
        err = relative_error(measured(problem, choice.kernel())(*inputs), ref)
        assert err < 1e-5, (choice.spec, err)


@pytest.mark.parametrize("mask", [None, "bool", "bias"])
def test_the_reference_in_slices_is_the_reference_whole(mask):
    """The float64 reference over slices of batch and query heads (as a large problem's is
    computed) equals it computed at once, gradients of grouped key heads summed over slices."""
    q, k, v = qkv(hkv=2, length=6, s=9, grad=True)
    tensors = [q, k, v]
    if mask == "bool":
        tensors.append(torch.rand(2, 1, 6, 9) > 0.3)
    if mask == "bias":
        tensors.append(torch.randn(1, 4, 6, 9))
    problem, inputs = build_problem("attention", tensors, {})
    whole = attention.reference(problem, inputs, chunk=10**9)
    for pairs in (1, 2, 3, 4, 5):  # within a key head's group, whole groups, whole batches
        sliced = attention.reference(problem, inputs, chunk=pairs * 6 * 9)
        assert relative_error(sliced, whole) < 1e-12, pairs


def test_a_wrong_gradient_fails_the_check():
    q, k, v = qkv(grad=True)
    problem, inputs = build_problem("attention", [q, k, v], {})
    ref = reference(problem, inputs)

    def wrong_backward(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v)
        return out + (k.sum() - k.sum().detach()) * 1e-2  # the same output, another dk

    assert relative_error(measured(problem, F.scaled_dot_product_attention)(*inputs), ref) < 1e-6
    assert relative_error(measured(problem, wrong_backward)(*inputs), ref) > 1e-3


def test_the_output_gradient_is_laid_out_like_q_with_the_same_values():
    contiguous = torch.randn(2, 3, 5, 4)
    transposed = torch.randn(2, 5, 3, 4).transpose(1, 2)  # a model's (B, L, H, D) seen as (B, H, L, D)
    plain, laid = attention.output_grad(contiguous, contiguous), attention.output_grad(contiguous, transposed)
    assert plain.is_contiguous()
    assert laid.stride() == transposed.stride()
    assert torch.equal(plain, laid)


def test_tune_attention_picks_a_kernel_that_runs_like_torch():
    q, k, v = qkv(hq=4, hkv=2)
    mask = torch.rand(2, 1, 16, 16) > 0.2
    selection = tunesmith.tune("attention", q, k, v, attn_mask=mask, options={"verify": True})
    assert selection.spec.template in ("sdpa", "flash_attention")
    assert len(selection.timings) >= 2
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert torch.allclose(selection.kernel(q, k, v, mask), want, atol=1e-5)
    assert tunesmith.tune("attention", q, k, v, attn_mask=mask).cached


# --- the mask analysis ---


def test_mask_kind():
    tril = torch.ones(6, 8, dtype=torch.bool).tril()
    assert graph_attention.mask_kind(torch.ones(2, 1, 6, 8, dtype=torch.bool), 6, 8) == "none"
    assert graph_attention.mask_kind(torch.zeros(1, 1, 6, 8), 6, 8) == "none"
    assert graph_attention.mask_kind(tril.expand(2, 3, 6, 8), 6, 8) == "causal"
    additive = torch.zeros(6, 8).masked_fill(~tril, torch.finfo(torch.float32).min)
    assert graph_attention.mask_kind(additive, 6, 8) == "causal"
    assert graph_attention.mask_kind(torch.ones(6, 8, dtype=torch.bool).tril(-1), 6, 8) == "other"
    assert graph_attention.mask_kind(torch.full((6, 8), -0.5), 6, 8) == "other"  # a bias, not a mask


class Attention(nn.Module):
    """One self-attention, with its mask built the ways models build one."""

    def __init__(self, mask: str) -> None:
        super().__init__()
        self.mask = mask
        self.proj = nn.Linear(32, 96)
        self.bias = nn.Parameter(torch.randn(1, 4, 16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape
        q, k, v = self.proj(x).view(b, length, 3, 4, 8).permute(2, 0, 3, 1, 4)
        if self.mask == "all_true":  # as transformers builds one from the shapes while tracing
            rows = torch.arange(length, device=x.device)[None, None, :, None] >= 0
            return F.scaled_dot_product_attention(q, k, v, attn_mask=rows.expand(b, -1, length, length))
        if self.mask == "causal":
            tril = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=tril[None, None].expand(b, 1, -1, -1))
        if self.mask == "padding":  # depends on the input: must never be dropped
            keep = x[:, None, None, :, 0] > -0.5
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        if self.mask == "decomposed":  # hand-written, as the math path and eager attention are
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(8)
            scores = scores + torch.zeros(length, length, device=x.device)
            weights = F.softmax(scores.float(), dim=-1).type_as(scores)
            return torch.matmul(F.dropout(weights, p=0.0, training=self.training), v)
        if self.mask == "t5_bias":  # relative position bias added, no scale
            scores = torch.matmul(q, k.transpose(3, 2))
            scores += self.bias
            return torch.matmul(F.softmax(scores.float(), dim=-1).type_as(scores), v)
        raise AssertionError(self.mask)


def compiled_against_eager(mask: str, train: bool = True) -> dict[str, int]:
    torch.manual_seed(0)
    model = Attention(mask)
    x = torch.randn(2, 16, 32, requires_grad=train)
    x.data[1, 3:7, 0] = -1.0  # padding rows the mask leaves out
    out = model(x)
    if train:
        out.square().sum().backward()
        leaves = [t for t in (x, *model.parameters()) if t.grad is not None]
        want = [t.grad.clone() for t in leaves]
        x.grad = None
        model.zero_grad()
    tunesmith.reset()
    with torch.set_grad_enabled(train):
        got = torch.compile(model, backend="tunesmith")(x)
    assert relative_error(got.detach(), out.detach()) < 1e-5
    if train:
        got.square().sum().backward()
        for leaf, ref in zip(leaves, want, strict=True):
            assert relative_error(leaf.grad, ref) < 1e-5
    return dict(tunesmith.counters)


def test_an_all_true_mask_from_shapes_is_dropped():
    counts = compiled_against_eager("all_true")
    assert counts["attention_mask_dropped"] == 1 and counts["attention_rewritten"] == 1


def test_a_lower_triangle_mask_becomes_is_causal():
    counts = compiled_against_eager("causal")
    assert counts["attention_mask_causal"] == 1 and counts["attention_rewritten"] == 1


def test_a_mask_that_depends_on_the_input_is_kept(monkeypatch):
    seen = []

    def watched(problem, inputs, options):  # the compile selects its GEMMs and its attention here
        if problem.op == "attention":
            seen.append(problem)
        return _select(problem, inputs, options)

    monkeypatch.setattr(swap, "select", watched)
    counts = compiled_against_eager("padding")
    assert counts["attention_rewritten"] == 1 and not counts.get("attention_mask_dropped")
    assert len(seen) == 1 and len(seen[0].inputs) == 4  # the mask went into the Problem


def _select(problem, inputs, options):
    from tunesmith.selection import select

    return select(problem, inputs, options)


def test_a_decomposed_attention_is_found_and_its_zero_mask_dropped():
    counts = compiled_against_eager("decomposed")
    assert counts["attention_rewritten"] == 1 and counts["attention_mask_dropped"] == 1


def test_a_learned_bias_is_passed_on_at_inference_and_left_to_torch_in_training():
    assert compiled_against_eager("t5_bias", train=False)["attention_rewritten"] == 1
    assert not compiled_against_eager("t5_bias", train=True).get("attention_rewritten")


def test_only_masks_of_shapes_and_constants_are_evaluated():
    """A buffer or parameter can change between steps and a random draw between calls: such a
    mask is never evaluated (never dropped), whatever its value when compiling."""
    import operator

    root = nn.Module()
    root.register_buffer("zeros", torch.zeros(4, 4))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    shapes = graph.call_function(operator.gt, (graph.call_function(torch.ones, (4, 4)), 0))
    buffer = graph.call_function(operator.add, (graph.get_attr("zeros"), 0))
    random = graph.call_function(operator.gt, (graph.call_function(torch.rand, (4, 4)), 2))
    of_input = graph.call_method("new_ones", (x, (4, 4)))
    graph.output((shapes, buffer, random, of_input))
    gm = torch.fx.GraphModule(root, graph)
    assert bool(graph_attention.constant(shapes, gm).all())
    for node in (buffer, random, of_input):
        assert graph_attention.constant(node, gm) is None, node


def test_through_inductor_the_tuned_attention_trains_like_eager(monkeypatch):
    """The default graph compiler: Inductor traces the chosen kernel, forward and backward."""
    monkeypatch.setenv("TUNESMITH_GRAPH_COMPILER", "inductor")
    counts = compiled_against_eager("causal")
    assert counts["attention_mask_causal"] == 1 and counts["attention_rewritten"] == 1
