"""The Triton plugin's flash attention (``flash.py``), run in Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``, in a subprocess: the flag is read when the kernels are defined): forward,
log-sum-exp and backward against torch's float64 math path, float32 and float16, causal (square
and oblong), grouped-query heads, boolean and additive masks, key padding (and that the key
blocks it masks whole are never read), fully masked rows, odd sizes, decode, transposed inputs,
wide and unequal heads; ``attention`` under autograd and under torch.compile; and, without the
interpreter, the configs and the argument checks."""

from __future__ import annotations

import pytest
import torch

from conftest import run_interpreted

COMMON = r"""
import json, math, time, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tunesmith_triton import flash

torch.manual_seed(0)

def reference(q, k, v, bias, causal, scale, dout):
    '''(out, lse, dq, dk, dv) in float64 through torch's math path (lse by hand).'''
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    L, S = q.shape[2], k.shape[2]
    mask = None if bias is None else bias if bias.dtype == torch.bool else bias.double()
    if causal:  # torch takes no mask beside is_causal: the triangle goes into the mask
        tri = torch.ones(L, S, dtype=torch.bool).tril()
        if mask is None:
            mask = tri
        elif mask.dtype == torch.bool:
            mask = mask & tri
        else:
            mask = mask + torch.zeros(L, S, dtype=torch.float64).masked_fill(~tri, float("-inf"))
    gqa = q.shape[1] != k.shape[1]
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout.double())
    group = q.shape[1] // k.shape[1]
    scores = q @ k.repeat_interleave(group, 1).transpose(-1, -2) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return out.detach(), torch.logsumexp(scores, -1).detach(), dq, dk, dv

def rel(x, ref):
    '''||x - ref|| / ||ref|| (0 when both are 0).'''
    diff, norm = (x.double() - ref).norm().item(), ref.norm().item()
    return diff / norm if norm else diff
"""

CASES = (
    COMMON
    + r"""
DTYPE = getattr(torch, "%s")
SMALL, OBLONG = flash.INTERPRETER_CONFIGS
SPLIT = flash.INTERPRETER_DECODE  # split-KV decoding, 32 keys a program
SPLIT_TMA = flash.FlashConfig(16, 16, 4, 1, 16, 16, 4, 1, tma=1, split=32)  # reading K and V through descriptors

def heads(B, H, N, D, layout="contiguous"):
    if layout == "transposed":  # (B, N, H, D) read as (B, H, N, D)
        return torch.randn(B, N, H, D).to(DTYPE).transpose(1, 2)
    if layout == "strided":  # every other element of the last dim: copied by the launcher
        return torch.randn(B, H, N, 2 * D).to(DTYPE)[..., ::2]
    if layout == "offset":  # starting one element into its storage: the kernels' ALIGN is 1
        return torch.randn(B * H * N * D + 1).to(DTYPE)[1:].view(B, H, N, D)
    if layout == "expanded":  # one head broadcast to all (stride 0): no TMA
        return torch.randn(B, 1, N, D).to(DTYPE).expand(B, H, N, D)
    return torch.randn(B, H, N, D).to(DTYPE)

def bool_rows(B, L, S):
    '''A random (B, 1, L, S) mask with row 3 all False, every other row keeping key 0.'''
    mask = torch.rand(B, 1, L, S) > 0.5
    mask[..., 0] = True
    mask[:, :, 3] = False
    return mask

def bias_of(kind, B, H, L, S):
    if kind == "padding":  # (B, 1, 1, S): the last keys of each batch masked out
        mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
        for b in range(B):
            mask[b, ..., S - 5 - 6 * b:] = False
        return mask
    if kind == "left_padding":  # (B, 1, 1, S): the first keys masked out (a batch padded on the left)
        mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
        for b in range(B):
            mask[b, ..., : 17 + 19 * b] = False
        return mask
    if kind == "head_padding":  # (B, H, L, S) expanded from one row of keys a head: holes, a head keeping none
        mask = torch.rand(B, H, 1, S) > 0.3
        mask[:, :, :, 16:32] = False
        mask[:, :, :, 0] = True
        mask[-1, -1] = False
        return mask.expand(B, H, L, S)
    if kind == "rows":
        return bool_rows(B, L, S)
    if kind == "causal_padding":  # (B, 1, L, S): causal and left padding in one tensor, as transformers builds it
        keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
        for b in range(B):
            keep[b, ..., : 7 + 18 * b] = False
        return keep & torch.ones(L, S, dtype=torch.bool).tril(S - L)
    if kind == "band":  # (1, H, L, S): a sliding window of a different width in every head
        i, j = torch.arange(L)[:, None] + S - L, torch.arange(S)[None, :]
        return torch.stack([(j <= i) & (j > i - 9 - 8 * h) for h in range(H)])[None]
    if kind == "relative":  # (1, H, L, S): a learned-looking relative position bias
        pos = torch.arange(S)[None, :] - torch.arange(L)[:, None]
        return (torch.randn(H, 1, 1) * pos.abs().float().sqrt() / 4 + torch.randn(1, H, L, S) / 4).to(DTYPE)
    if kind == "keys":  # (B, 1, 1, S) additive, in float32 whatever q's dtype
        return torch.randn(B, 1, 1, S)
    if kind == "neg_inf_rows":  # additive -inf: row 3 fully, other rows partly
        bias = torch.randn(B, 1, L, S).to(DTYPE)
        return bias.masked_fill(~bool_rows(B, L, S), float("-inf"))
    return None

# name, (B, Hq, Hkv, L, S, D, Dv), causal, bias kind, layout, config, scale (None: 1/sqrt(D))
cases = [
    ("plain", (2, 2, 2, 64, 64, 32, 32), False, None, "contiguous", SMALL, None),
    ("causal_square", (2, 2, 2, 64, 64, 32, 32), True, None, "contiguous", SMALL, None),
    ("causal_square_oblong_tiles", (1, 2, 2, 61, 61, 16, 16), True, None, "contiguous", OBLONG, None),
    ("causal_fewer_queries", (2, 2, 2, 20, 50, 16, 16), True, None, "contiguous", OBLONG, None),
    ("causal_more_queries", (2, 2, 2, 50, 20, 16, 16), True, None, "contiguous", SMALL, None),
    ("gqa", (2, 4, 2, 33, 33, 16, 16), True, None, "contiguous", SMALL, None),
    ("gqa_oblong_tiles", (1, 4, 2, 40, 24, 16, 16), False, None, "contiguous", OBLONG, None),
    ("mqa", (2, 4, 1, 17, 40, 16, 16), False, None, "contiguous", SMALL, None),
    ("padding_mask", (2, 2, 2, 24, 40, 16, 16), False, "padding", "contiguous", SMALL, None),
    ("padding_mask_causal", (2, 2, 2, 40, 40, 16, 16), True, "padding", "contiguous", OBLONG, None),
    ("left_padding", (2, 2, 2, 24, 56, 16, 16), False, "left_padding", "contiguous", SMALL, None),
    ("head_padding_gqa", (2, 4, 2, 20, 48, 16, 16), False, "head_padding", "contiguous", OBLONG, None),
    ("causal_padding", (2, 2, 2, 40, 56, 16, 16), False, "causal_padding", "contiguous", SMALL, None),
    ("band_gqa", (1, 4, 2, 50, 50, 16, 16), False, "band", "contiguous", OBLONG, None),
    ("masked_row", (2, 2, 2, 20, 24, 16, 16), False, "rows", "contiguous", SMALL, None),
    ("masked_row_causal_gqa", (2, 4, 2, 20, 24, 16, 16), True, "rows", "contiguous", OBLONG, None),
    ("neg_inf_row", (2, 2, 2, 20, 24, 16, 16), False, "neg_inf_rows", "contiguous", SMALL, None),
    ("relative_bias", (1, 2, 2, 24, 40, 16, 16), False, "relative", "contiguous", SMALL, None),
    ("relative_bias_causal", (1, 2, 2, 40, 40, 16, 16), True, "relative", "contiguous", OBLONG, None),
    ("key_bias", (2, 2, 2, 24, 33, 16, 16), False, "keys", "contiguous", SMALL, None),
    ("head_80", (1, 2, 2, 40, 40, 80, 80), True, None, "contiguous", SMALL, None),
    ("head_40", (1, 2, 2, 24, 40, 40, 40), False, None, "contiguous", OBLONG, None),
    ("head_40_pointers", (1, 2, 2, 24, 40, 40, 40), True, None, "contiguous", SMALL, None),
    ("head_40_offset", (1, 2, 2, 24, 40, 40, 40), True, None, "offset", OBLONG, None),
    ("expanded", (2, 4, 2, 17, 40, 16, 16), False, None, "expanded", OBLONG, None),
    ("d_ne_dv", (2, 2, 2, 24, 40, 32, 16), False, None, "contiguous", SMALL, None),
    ("d_ne_dv_80", (1, 2, 1, 24, 24, 16, 80), True, "keys", "contiguous", OBLONG, None),
    ("odd", (2, 2, 2, 17, 33, 16, 16), False, None, "contiguous", SMALL, None),
    ("odd_causal", (2, 2, 2, 17, 33, 16, 16), True, None, "contiguous", OBLONG, None),
    ("decode", (2, 4, 2, 1, 37, 16, 16), False, None, "contiguous", SMALL, None),
    ("decode_causal", (2, 2, 2, 1, 37, 16, 16), True, None, "contiguous", SMALL, None),
    ("decode_padding", (2, 2, 2, 1, 40, 16, 16), False, "padding", "contiguous", SMALL, None),
    ("transposed", (2, 4, 2, 24, 33, 16, 16), True, None, "transposed", SMALL, None),
    ("transposed_bias", (2, 2, 2, 24, 33, 16, 16), False, "keys", "transposed", OBLONG, None),
    ("strided_last_dim", (1, 2, 2, 20, 20, 16, 16), False, None, "strided", SMALL, None),
    ("scale", (1, 2, 2, 20, 30, 16, 16), True, None, "contiguous", SMALL, 0.37),
    ("negative_scale", (1, 2, 2, 20, 30, 16, 16), True, "padding", "contiguous", SMALL, -0.2),
    ("head_64", (1, 1, 1, 32, 32, 64, 64), True, None, "contiguous", OBLONG, None),
    ("head_128", (1, 1, 1, 32, 32, 128, 128), False, None, "contiguous", SMALL, None),
    ("split_decode_gqa", (2, 8, 2, 1, 70, 16, 16), False, None, "contiguous", SPLIT, None),
    ("split_decode_tma", (2, 8, 2, 1, 70, 16, 16), False, "padding", "contiguous", SPLIT_TMA, None),
    ("split_decode_padding", (2, 4, 2, 1, 90, 16, 16), False, "left_padding", "transposed", SPLIT, None),
    ("split_decode_bias", (2, 2, 1, 1, 50, 16, 16), False, "keys", "contiguous", SPLIT, None),
    ("split_queries_causal", (1, 4, 2, 3, 70, 16, 16), True, None, "contiguous", SPLIT, None),
    ("split_queries_rows", (2, 2, 1, 5, 40, 16, 16), False, "rows", "contiguous", SPLIT, None),
    ("split_head_80", (1, 4, 1, 2, 64, 80, 80), False, None, "contiguous", SPLIT, None),
]

rows = []
descriptors = 0
_descriptor = flash._descriptor

def counting_descriptor(*args):
    global descriptors
    descriptors += 1
    return _descriptor(*args)

flash._descriptor = counting_descriptor
for name, (B, Hq, Hkv, L, S, D, Dv), causal, kind, layout, config, scale in cases:
    start = time.perf_counter()
    q, k, v = heads(B, Hq, L, D, layout), heads(B, Hkv, S, D, layout), heads(B, Hkv, S, Dv, layout)
    bias = bias_of(kind, B, Hq, L, S)
    scale = D ** -0.5 if scale is None else scale
    before = descriptors
    out, lse = flash.forward(q, k, v, bias, causal, scale, config)
    tma = descriptors - before
    dout = torch.randn_like(out)
    dq, dk, dv = flash.backward(dout, q, k, v, bias, out, lse, causal, scale, config)
    ref_out, ref_lse, ref_dq, ref_dk, ref_dv = reference(q, k, v, bias, causal, scale, dout)
    empty = torch.isinf(ref_lse)  # rows with every key masked out
    got = (out, dq, dk, dv)
    rows.append({
        "case": name,
        "errors": {
            "out": rel(out, ref_out), "lse": rel(lse[~empty], ref_lse[~empty]),
            "dq": rel(dq, ref_dq), "dk": rel(dk, ref_dk), "dv": rel(dv, ref_dv),
        },
        "finite": all(bool(torch.isfinite(t).all()) for t in got),
        "empty_rows": int(empty.sum()),
        "empty_lse_inf": bool((lse[empty] == float("inf")).all()),
        "empty_out_zero": bool((out[empty] == 0).all()),
        "empty_dq_zero": bool((dq[empty] == 0).all()),
        "shapes_right": [tuple(t.shape) for t in (out, lse, dq, dk, dv)]
        == [(B, Hq, L, Dv), (B, Hq, L), (B, Hq, L, D), (B, Hkv, S, D), (B, Hkv, S, Dv)],
        "dtypes_right": all(t.dtype == DTYPE for t in got) and lse.dtype == torch.float32,
        "out_layout": "BHLD" if out.is_contiguous() else "BLHD" if out.transpose(1, 2).is_contiguous() else "other",
        "tma_reads": tma,
        "seconds": round(time.perf_counter() - start, 2),
    })
print(json.dumps({"rows": rows}))
"""
)

#: relative error by norm against float64, per dtype
TOLERANCE = {"float32": 1e-4, "float16": 5e-3}


@pytest.mark.parametrize("dtype", sorted(TOLERANCE))
def test_forward_lse_and_backward_match_the_float64_math_path(dtype):
    rows = run_interpreted(CASES % dtype)["rows"]
    assert len(rows) == 46
    # the TMA config reads through descriptors where the strides allow, through pointers elsewhere
    tma = {r["case"]: r["tma_reads"] for r in rows}
    assert tma["head_40"] == tma["transposed_bias"] == 3 and tma["head_40_pointers"] == 0
    assert tma["head_40_offset"] == tma["expanded"] == 0
    assert tma["split_decode_tma"] == 2 and tma["split_decode_gqa"] == 0  # decoding reads only K and V so
    wrong = [(r["case"], r["errors"]) for r in rows if not max(r["errors"].values()) < TOLERANCE[dtype]]
    assert not wrong, wrong
    assert all(r["finite"] and r["shapes_right"] and r["dtypes_right"] for r in rows), rows
    # the output lies in memory as q does (a head broadcast from one has the innermost dim but D):
    # a model that transposed (B, L, H, D) into q transposes the output back without a copy
    transposed = {"transposed", "transposed_bias", "expanded"}  # (one query row: either reads as BHLD)
    layouts = {r["case"]: r["out_layout"] for r in rows}
    assert layouts == {case: "BLHD" if case in transposed else "BHLD" for case in layouts}, layouts
    # a query row with every key masked out (a bool mask, or a bias of -inf): output 0 and dq 0
    # (as torch's math path gives), lse +inf, no NaN anywhere
    empty = {r["case"]: r for r in rows if r["empty_rows"]}
    masked = {"masked_row", "masked_row_causal_gqa", "neg_inf_row", "head_padding_gqa", "causal_padding"}
    assert set(empty) == masked | {"split_queries_rows"}
    assert all(r["empty_lse_inf"] and r["empty_out_zero"] and r["empty_dq_zero"] for r in empty.values()), empty


SKIPPED = (
    COMMON
    + r"""
config = flash.INTERPRETER_CONFIGS[0]  # blocks of 16 keys, forward and backward
B, Hq, Hkv, S, D = 2, 4, 2, 64, 16
keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
keep[0, ..., 48:] = False  # batch 0: its last key block padded
keep[1, ..., :32] = False  # batch 1: its first two, and the tail of its last (a block it keeps part of)
keep[1, ..., 60:] = False
padded = torch.zeros(B, 1, S, 1, dtype=torch.bool)  # the whole blocks of padding, which hold NaN
padded[0, :, 48:] = padded[1, :, :32] = True
rows = {}
causal_padding = keep & torch.ones(48, S, dtype=torch.bool).tril(S - 48)  # (B, 1, 48, S), read through a block map
cases = (("prefill", 20, keep, config), ("decode", 1, keep, config), ("causal_and_padding", 48, causal_padding, config),
         ("split_decode", 1, keep, flash.INTERPRETER_DECODE))
for name, L, mask, config in cases:
    q = torch.randn(B, Hq, L, D)
    k, v = torch.randn(B, Hkv, S, D), torch.randn(B, Hkv, S, D)
    scale, dout = D ** -0.5, torch.randn(B, Hq, L, D)
    nan_k, nan_v = k.masked_fill(padded, float("nan")), v.masked_fill(padded, float("nan"))
    out, lse = flash.forward(q, nan_k, nan_v, mask, False, scale, config)
    dq, dk, dv = flash.backward(dout, q, nan_k, nan_v, mask, out, lse, False, scale, config)
    ref_out, _, ref_dq, ref_dk, ref_dv = reference(q, k, v, mask, False, scale, dout)
    rows[name] = {
        "finite": all(bool(torch.isfinite(t).all()) for t in (out, dq, dk, dv)) and not lse.isnan().any(),
        "errors": [rel(x, r) for x, r in ((out, ref_out), (dq, ref_dq), (dk, ref_dk), (dv, ref_dv))],
        "padded_grads_zero": bool((dk.masked_select(padded) == 0).all() and (dv.masked_select(padded) == 0).all()),
    }
print(json.dumps(rows))
"""
)


def test_the_kernels_never_read_a_key_block_that_a_boolean_mask_masks_whole():
    """NaN in the key blocks that a boolean mask masks for every query (torch's math path would
    give NaN) leaves every output and gradient finite and right: a key-padding mask read as one
    row, and causal and padding in one mask, read through its block map."""
    got = run_interpreted(SKIPPED)
    for name, row in got.items():
        assert row["finite"] and row["padded_grads_zero"], (name, row)
        assert max(row["errors"]) < 1e-4, (name, row)


def test_a_boolean_mask_is_read_as_one_row_or_through_a_block_map_and_a_bias_in_full():
    from tunesmith_triton.flash import SPAN_MAP, SPAN_NONE, SPAN_ROW, span_kind

    padding = torch.ones(2, 1, 1, 64, dtype=torch.bool)
    assert span_kind(padding.expand(2, 4, 20, 64).stride(), True, 20) == SPAN_ROW
    assert span_kind(padding.expand(2, 4, 1, 64).stride(), True, 1) == SPAN_ROW  # decode: one row whatever its stride
    rows = torch.ones(2, 1, 20, 64, dtype=torch.bool).expand(2, 4, 20, 64)
    assert span_kind(rows.stride(), True, 20) == SPAN_MAP
    assert span_kind(padding.expand(2, 4, 20, 64).stride(), False, 20) == SPAN_NONE  # additive: read in full
    assert span_kind(rows.stride(), False, 20) == SPAN_NONE


AUTOGRAD = (
    COMMON
    + r"""
from tunesmith_triton.flash import FlashConfig, attention

config = flash.INTERPRETER_CONFIGS[1]
B, Hq, Hkv, L, S, D = 2, 4, 2, 24, 40, 16
q = torch.randn(B, L, Hq, D).transpose(1, 2).requires_grad_()
k = torch.randn(B, S, Hkv, D).transpose(1, 2).requires_grad_()
v = torch.randn(B, S, Hkv, D).transpose(1, 2).requires_grad_()
bias = torch.randn(1, Hq, L, S)
dout = torch.randn(B, Hq, L, D)
scale = D ** -0.5
ref = reference(q, k, v, bias, True, scale, dout)

def grads(fn):
    for t in (q, k, v):
        t.grad = None
    out = fn(q, k, v, bias)
    out.backward(dout)
    return [out.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone()]

def errors(got):
    return [rel(x, r) for x, r in zip(got, (ref[0], *ref[2:]))]

def fn(q, k, v, bias):
    return attention(q, k, v, bias, True, scale, config)

eager = grads(fn)
compiled = grads(torch.compile(fn, backend="aot_eager", fullgraph=True))
grad_shapes = [tuple(t.shape) for t in eager[1:]] == [tuple(q.shape), tuple(k.shape), tuple(v.shape)]

# the graph AOTAutograd traces holds the two custom ops, opaque
from torch._functorch.aot_autograd import aot_function
seen = []
def compiler(gm, _):
    seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
    return gm
out = aot_function(fn, fw_compiler=compiler, bw_compiler=compiler)(q, k, v, bias)
out.backward(dout)

try:
    attention(q, k, v, bias.clone().requires_grad_(), False, scale, config)
    bias_refused = False
except ValueError as e:
    bias_refused = "bias" in str(e)

# the ops' schema, fake (meta) functions and autograd registration, as torch checks custom ops
small = [torch.randn(1, 2, 17, 16, requires_grad=True), torch.randn(1, 1, 20, 16, requires_grad=True),
         torch.randn(1, 1, 20, 16, requires_grad=True)]
opcheck = {}
# (B, L, H, D) tensors read as (B, H, L, D): the fake output must lie in memory as the real one does
transposed = [torch.randn(1, n, h, 16).transpose(1, 2) for n, h in ((17, 2), (20, 1), (20, 1))]
for name, args in (("fwd", (*small, None, True, 0.25, str(config))),
                   ("fwd_mask", (*small, torch.rand(1, 1, 1, 20) > 0.3, False, 0.25, str(config))),
                   ("fwd_transposed", (*transposed, None, False, 0.25, str(config)))):
    report = torch.library.opcheck(torch.ops.tunesmith_triton.flash_fwd.default, args)
    opcheck[name] = sorted(k for k, v in report.items() if v != "SUCCESS")
o, lse = torch.ops.tunesmith_triton.flash_fwd(*[t.detach() for t in small], None, True, 0.25, str(config))
bwd_args = (torch.randn_like(o), *[t.detach() for t in small], None, o, lse, True, 0.25, str(config))
report = torch.library.opcheck(torch.ops.tunesmith_triton.flash_bwd.default, bwd_args,
                               test_utils=("test_schema", "test_faketensor"))
opcheck["bwd"] = sorted(k for k, v in report.items() if v != "SUCCESS")

print(json.dumps({"eager": errors(eager), "compiled": errors(compiled),
                  "compiled_vs_eager": [rel(c, e.double()) for c, e in zip(compiled, eager)],
                  "grad_shapes": grad_shapes, "ops": sorted(set(seen)), "bias_refused": bias_refused,
                  "opcheck": opcheck}))
"""
)


def test_attention_is_differentiable_and_traced_by_torch_compile_as_custom_ops():
    got = run_interpreted(AUTOGRAD)
    assert max(got["eager"]) < 1e-4, got["eager"]
    assert max(got["compiled"]) < 1e-4 and max(got["compiled_vs_eager"]) == 0.0, got
    assert got["grad_shapes"]
    assert {"tunesmith_triton.flash_fwd.default", "tunesmith_triton.flash_bwd.default"} <= set(got["ops"]), got["ops"]
    assert got["bias_refused"]
    assert got["opcheck"] == {"fwd": [], "fwd_mask": [], "fwd_transposed": [], "bwd": []}, got["opcheck"]


# ------------------------------------------------------------------ no interpreter: configs, checks


def test_a_config_round_trips_through_its_string_and_its_params():
    from tunesmith_triton.flash import FlashConfig

    config = FlashConfig(128, 64, 4, 3, 32, 128, 8, 2)
    assert str(config) == "128x64w4s3-32x128w8s2"
    assert FlashConfig.from_str(str(config)) == config
    assert FlashConfig.from_params(config.params()) == config
    assert all(isinstance(v, int) for v in config.params().values())
    tma = FlashConfig(64, 128, 4, 2, 32, 64, 4, 3, tma=1)
    assert str(tma) == "64x128w4s2-32x64w4s3t"
    assert FlashConfig.from_str(str(tma)) == tma and FlashConfig.from_params(tma.params()) == tma
    assert FlashConfig.from_params({k: v for k, v in config.params().items() if k != "tma"}) == config  # older specs
    split = FlashConfig(16, 64, 4, 3, 32, 64, 4, 3, tma=1, split=512)
    assert str(split) == "16x64w4s3-32x64w4s3tk512"
    assert FlashConfig.from_str(str(split)) == split and FlashConfig.from_params(split.params()) == split
    with pytest.raises(ValueError, match="split"):
        FlashConfig(16, 64, 4, 3, 32, 64, 4, 3, split=32)  # fewer keys a program than a block
    for text in ("128x64w4s3", "128x64w4s3-32x128w8", "big"):
        with pytest.raises(ValueError, match="FlashConfig"):
            FlashConfig.from_str(text)
    with pytest.raises(ValueError, match="power of two"):
        FlashConfig(96, 64, 4, 3, 32, 128, 8, 2)
    with pytest.raises(ValueError, match="num_stages"):
        FlashConfig(128, 64, 4, 0, 32, 128, 8, 2)
    with pytest.raises(ValueError, match="tma"):
        FlashConfig(128, 64, 4, 3, 32, 128, 8, 2, tma=2)


@pytest.mark.parametrize("head_dim", [64, 80, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_the_gpu_space_is_small_distinct_and_fits_shared_memory(head_dim, dtype):
    from tunesmith_triton.flash import MAX_CONFIGS, SHARED_LIMIT, configs, shared_bytes

    size = torch.empty((), dtype=dtype).element_size()
    for train in (False, True):
        space = configs(head_dim, dtype, train, "cuda")
        assert 1 <= len(space) <= MAX_CONFIGS <= 8 and len(set(space)) == len(space)
        for c in space:
            assert shared_bytes(c.block_m, c.block_n, c.num_stages, head_dim, head_dim, size) <= SHARED_LIMIT
            assert (
                shared_bytes(c.bwd_block_n, c.bwd_block_m, c.bwd_num_stages, head_dim, head_dim, size) <= SHARED_LIMIT
            )
    if dtype != torch.float32 and head_dim <= 128:
        assert len(configs(head_dim, dtype, True, "cuda")) >= 4
        assert (128, 64) in {(c.block_m, c.block_n) for c in configs(head_dim, dtype, False, "cuda")}


def test_decoding_gets_split_configs_and_nothing_else_does():
    from tunesmith_triton.flash import DECODE_KEYS, DECODE_ROWS, MAX_CONFIGS, SHARED_LIMIT, configs, shared_bytes

    space = configs(128, torch.bfloat16, False, "cuda", rows=4, keys=8192)  # Llama 8B: 4 query heads a kv head
    splits = [c for c in space if c.split]
    assert len(splits) >= 3 and len({c.split for c in splits}) == len(splits) and len(space) <= MAX_CONFIGS
    assert any(not c.split for c in space)  # the one-pass forward still competes
    assert all(shared_bytes(16, c.block_n, c.num_stages, 128, 128, 2) <= SHARED_LIMIT for c in splits)
    for rows, keys, train in ((4, 8192, True), (DECODE_ROWS + 1, 8192, False), (4, DECODE_KEYS - 1, False)):
        assert not any(c.split for c in configs(128, torch.bfloat16, train, "cuda", rows=rows, keys=keys))
    assert any(c.split for c in configs(64, torch.float32, False, "cpu", rows=2, keys=33))  # the interpreter's
    assert not any(c.split for c in configs(64, torch.float32, False, "cpu", rows=2, keys=32))


def test_split_decoding_cuts_a_row_into_at_most_max_splits():
    from tunesmith_triton.flash import MAX_SPLITS, FlashConfig, decode_splits

    config = FlashConfig(16, 64, 4, 3, 32, 64, 4, 3, split=128)
    assert decode_splits(8192, config) == (128, 64)
    assert decode_splits(100, config) == (128, 1)
    for keys in (8193, 131072, 10**6):
        split, splits = decode_splits(keys, config)
        assert splits <= MAX_SPLITS and split * splits >= keys and split >= 128 and split & (split - 1) == 0


def test_alignment_is_what_every_stride_and_start_allows():
    from tunesmith_triton.flash import _alignment

    x = torch.empty(2, 8, 64, 40, dtype=torch.bfloat16)  # heads of 40: 8 elements = 16 bytes
    assert _alignment(x, x.transpose(1, 2)) == 8
    assert _alignment(torch.empty(2, 8, 64, 40)) == 4  # float32: 16 bytes are 4 elements
    assert _alignment(x, torch.empty(2, 8, 64, 36, dtype=torch.bfloat16)) == 4
    assert _alignment(x, torch.empty(2 * 8 * 64 * 40 + 1, dtype=torch.bfloat16)[1:].view(2, 8, 64, 40)) == 1
    assert _alignment(torch.empty(1, 1, 64, 40, dtype=torch.bfloat16).expand(2, 8, 64, 40)) == 8  # broadcast: 0


def test_tma_reads_only_where_every_stride_and_start_allows(monkeypatch):
    from tunesmith_triton.flash import _tma_reads

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter reads descriptors on any host

    def reads(t: torch.Tensor) -> bool:
        return _tma_reads(t)

    assert reads(torch.empty(2, 8, 64, 40, dtype=torch.float16))
    assert reads(torch.empty(2, 64, 8, 64, dtype=torch.bfloat16).transpose(1, 2))
    assert reads(torch.empty(1, 8, 64, 64, dtype=torch.float16).as_strided((1, 8, 64, 64), (3, 4096, 64, 1)))
    assert not reads(torch.empty(2, 1, 64, 64, dtype=torch.float16).expand(2, 8, 64, 64))  # a broadcast head
    assert not reads(torch.empty(2 * 8 * 64 * 64 + 1, dtype=torch.float16)[1:].view(2, 8, 64, 64))
    assert not reads(torch.empty(2, 8, 64, 36, dtype=torch.float16))  # 72-byte rows


def test_without_tma_the_space_has_each_pointer_tile_once():
    from tunesmith_triton.flash import configs

    for head_dim in (64, 128):
        with_tma = configs(head_dim, torch.bfloat16, False, "cuda")
        without = configs(head_dim, torch.bfloat16, False, "cuda", tma=False)
        assert any(c.tma for c in with_tma) and not any(c.tma for c in without)
        tiles = [(c.block_m, c.block_n, c.num_warps, c.num_stages) for c in without]
        assert len(set(tiles)) == len(tiles) < len(with_tma)
        assert set(tiles) == {(c.block_m, c.block_n, c.num_warps, c.num_stages) for c in with_tma}


def test_the_interpreter_gets_small_tiles():
    from tunesmith_triton.flash import configs

    space = configs(64, torch.float32, True, "cpu")
    assert 1 <= len(space) <= 2 and all(c.block_m <= 32 and c.bwd_block_n <= 32 for c in space)


def test_inputs_that_do_not_go_together_are_refused_before_any_launch():
    from tunesmith_triton.flash import INTERPRETER_CONFIGS, forward

    config = INTERPRETER_CONFIGS[0]
    q, k = torch.randn(1, 4, 8, 16), torch.randn(1, 3, 8, 16)
    with pytest.raises(ValueError, match="multiple"):
        forward(q, k, k, None, False, 0.25, config)
    with pytest.raises(ValueError, match="go together"):
        forward(q, torch.randn(1, 2, 8, 32), torch.randn(1, 2, 8, 16), None, False, 0.25, config)
    with pytest.raises(ValueError, match="share"):
        forward(q, torch.randn(1, 2, 8, 16).half(), torch.randn(1, 2, 8, 16), None, False, 0.25, config)
    with pytest.raises(ValueError, match="broadcast"):
        forward(q, q, q, torch.randn(1, 1, 8, 7), False, 0.25, config)
    with pytest.raises(ValueError, match="bool or floating"):
        forward(q, q, q, torch.ones(1, 1, 8, 8, dtype=torch.int32), False, 0.25, config)


def _dot_loops_reading_bytes(ttir: str) -> list[bool]:
    """For each innermost loop of Triton IR that has a ``tt.dot``, whether it loads bytes (a mask)."""
    lines, out = ttir.splitlines(), []
    for i, line in enumerate(lines):
        if "scf.for" not in line:
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for inner in lines[i + 1 :]:
            if inner.startswith(" " * indent + "}") and len(inner) - len(inner.lstrip()) == indent:
                break
            body.append(inner)
        if any("tt.dot" in b for b in body) and not any("scf.for" in b for b in body):
            out.append(any("tt.load" in b and "ptr<i8>" in b for b in body))
    return out


def test_every_kernel_compiles_for_hopper_with_a_mask_read_either_way():
    """The interpreter checks what the kernels compute, not that Triton can compile them: each
    kernel that reads a boolean mask's span (a row, or the block map), and split-KV decoding's two,
    are compiled here for sm90, as
    a launch specialises it (16-byte aligned pointers and strides, a unit key stride), through
    the interpreter-free path the GPU takes (no GPU needed: Triton ships ptxas)."""
    import inspect

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from tunesmith_triton import flash

    types = {n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "do_ptr", "dq_ptr", "dk_ptr", "dv_ptr")}
    types |= {"x_ptr": "*u8", "m_ptr": "*u8", "lse_ptr": "*fp32", "delta_ptr": "*fp32"}
    types |= {"qk_scale": "fp32", "scale": "fp32", "po_ptr": "*fp32", "plse_ptr": "*fp32"}
    descriptors = {"q_ptr": "tensordesc<bf16[1, 1, 64, 64]>", "k_ptr": "tensordesc<bf16[1, 1, 64, 64]>"}
    descriptors["v_ptr"] = descriptors["k_ptr"]

    def compile_for_hopper(kernel, consts, tma=()):
        names = list(inspect.signature(kernel.fn).parameters)
        signature, constants, attrs = {}, dict(consts), {}
        for i, name in enumerate(names):
            if name in consts or name == "s_xn":
                signature[name] = "constexpr"
                constants.setdefault(name, 1)  # a contiguous mask: Triton specialises a stride of 1
            elif name in tma:
                signature[name] = descriptors[name]
            else:
                signature[name] = types.get(name, "i32")
                if signature[name].startswith("*") or (name.startswith("s_") and name not in ("s_xm", "s_mb", "s_mh")):
                    attrs[(i,)] = [["tt.divisibility", 16]]
        source = ASTSource(kernel, signature, {(names.index(k),): v for k, v in constants.items()}, attrs)
        return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 2})

    head = dict(HEAD_D=64, HEAD_DV=64, BLOCK_D=64, BLOCK_DV=64, PAD_D=False, PAD_DV=False, CAUSAL=False)
    head |= dict(HAS_BIAS=True, BIAS_BOOL=True, PRECISION="ieee", ALIGN=8, GROUP=2)
    for span in (flash.SPAN_ROW, flash.SPAN_MAP):
        common = dict(head, SPAN=span, MAP_ACROSS=4)
        forward = dict(common, BM=64, BN=64, SCALE_FIRST=False)
        compiled = [
            compile_for_hopper(flash._fwd_kernel, dict(forward, TMA=True), tma=("q_ptr", "k_ptr", "v_ptr")),
            compile_for_hopper(flash._fwd_kernel, dict(forward, TMA=False, CAUSAL=True)),
            compile_for_hopper(flash._bwd_kv_kernel, dict(common, BM=32, BN=64)),
            compile_for_hopper(flash._bwd_q_kernel, dict(common, BM=64, BN=32)),
        ]
        assert all(k.asm.get("cubin") for k in compiled), span
        # a key-padding row is read only on the blocks it does not keep whole: each kernel has a
        # loop of blocks that loads no byte of it; the block map's kernels read the mask on all
        reads = [_dot_loops_reading_bytes(k.asm["ttir"]) for k in compiled]
        if span == flash.SPAN_ROW:
            assert all(False in loops and True in loops for loops in reads), reads
        else:
            assert all(loops and all(loops) for loops in reads), reads
    assert compile_for_hopper(flash._block_map_kernel, {"BLOCK": 16, "CHUNK": 512}).asm.get("cubin")
    decode = dict(head, BM=16, BN=64, SPLIT=512, SCALE_FIRST=False, SPAN=True, EMPTY=True, GROUP=4)
    kv = ("k_ptr", "v_ptr")  # decoding reads its queries through pointers
    assert compile_for_hopper(flash._decode_kernel, dict(decode, TMA=True), tma=kv).asm.get("cubin")
    causal = dict(decode, TMA=False, CAUSAL=True, HAS_BIAS=False, SPAN=False)
    assert compile_for_hopper(flash._decode_kernel, causal).asm.get("cubin")
    combine = {"HEAD_DV": 64, "BLOCK_DV": 64, "BLOCK_S": 16}
    assert compile_for_hopper(flash._combine_kernel, combine).asm.get("cubin")
