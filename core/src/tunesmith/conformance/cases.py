"""The matrix of problems a backend is checked on, as plain records a worker process can rebuild.

Per op: float32, float16 and bfloat16; sizes 1, odd (17, 127), zero, and two of several tiles
(one odd, one aligned to 128 as TMA- and CUTLASS-style kernels need);
contiguous, transposed (channels_last for conv) and strided inputs; batches for bmm and baddbmm;
every epilogue step alone, and one chain of them. Attention has its own variants
(``ATTENTION``): causal (square, and with fewer or more keys than queries), grouped-query heads, a
padding mask, a fully masked query row, an additive bias, one query row, odd lengths, head dims
64, 80 and 128, transposed q, k and v, and training (outputs and the three gradients) of several
of these. Inputs are random normal values (never zeros),
seeded from the case id, so every process makes the same tensors. Size "one" uses positive random
values: with a single output element, terms that cancel would make any relative error meaningless.
"""

from __future__ import annotations

import zlib
from typing import Any

import attrs
import torch

from tunesmith_hookspecs import OPS

DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("contiguous", "transposed", "strided")
#: name -> (M, N, K); conv reads them as (spatial size, output channels, input channels)
SIZES = {
    "one": (1, 1, 1),
    "odd17": (17, 19, 18),
    "odd127": (127, 129, 131),
    "zero": (0, 24, 16),
    "tiles": (300, 260, 270),
    "aligned": (256, 512, 384),
}
EPILOGUE_STEPS = (
    "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
    "add_tensor", "mul_tensor", "add_scalar", "mul_scalar", "cast_float32",
)  # fmt: skip
EPILOGUE_CHAIN = ("gelu", "add_tensor", "mul_scalar", "silu", "cast_float32")
BATCH = 3
#: attention variants: name -> (batch, query heads, kv heads, query length, key length, head dim,
#: causal, mask ("", "padding", "full_row", "bias"), training, q/k/v as transposed views)
ATTENTION = {
    "plain": (2, 2, 2, 16, 16, 16, False, "", False, False),
    "causal": (1, 2, 2, 17, 17, 16, True, "", False, False),
    "causal_more_keys": (1, 2, 2, 9, 23, 16, True, "", False, False),
    "causal_fewer_keys": (1, 2, 2, 23, 9, 16, True, "", False, False),
    "gqa": (1, 4, 2, 16, 16, 16, False, "", False, True),
    "padding": (2, 2, 2, 16, 19, 16, False, "padding", False, False),
    "full_row": (1, 2, 2, 8, 16, 16, False, "full_row", False, False),
    "bias": (1, 2, 2, 16, 16, 16, False, "bias", False, True),
    "one_row": (2, 2, 1, 1, 33, 16, False, "", False, False),
    "odd": (1, 1, 1, 17, 77, 16, False, "", False, False),
    "head64": (1, 1, 1, 16, 16, 64, True, "", False, False),
    "head80": (1, 1, 1, 16, 16, 80, False, "padding", False, False),
    "head128": (1, 1, 1, 16, 16, 128, False, "", False, False),
    "train": (1, 2, 2, 16, 16, 16, False, "", True, True),
    "train_causal_gqa": (1, 4, 2, 17, 17, 16, True, "", True, False),
    "train_padding": (2, 2, 2, 16, 19, 16, False, "padding", True, False),
    "train_bias": (1, 2, 2, 16, 16, 16, False, "bias", True, False),
}


@attrs.frozen
class Case:
    """One problem of the matrix; ``id`` names it in test ids and failure messages."""

    op: str
    dtype: str
    size: str
    layout: str = "contiguous"
    epilogue: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    @property
    def id(self) -> str:
        steps = "+".join(self.epilogue) or "none"
        return f"{self.op}-{self.dtype}-{self.size}-{self.layout}-{steps}"


def matrix(ops: tuple[str, ...] = OPS, dtypes: tuple[str, ...] = DTYPES) -> list[Case]:
    """Every case for these ops and dtypes."""
    cases = []
    for op in ops:
        for dtype in dtypes:
            if op == "attention":
                cases += [Case(op, dtype, variant) for variant in ATTENTION]
                continue
            cases += [Case(op, dtype, size, layout) for size in SIZES for layout in LAYOUTS]
            cases += [Case(op, dtype, "odd17", "contiguous", (step,)) for step in EPILOGUE_STEPS]
            cases.append(Case(op, dtype, "odd17", "contiguous", EPILOGUE_CHAIN))
    return cases


@attrs.frozen
class _Source:
    """Seeded random values for one case."""

    gen: torch.Generator
    positive: bool

    def __call__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if self.positive:
            return (torch.rand(shape, generator=self.gen) + 0.5).to(device=device, dtype=dtype)
        return torch.randn(shape, generator=self.gen).to(device=device, dtype=dtype)


def _gen(case: Case) -> _Source:
    return _Source(torch.Generator().manual_seed(zlib.crc32(case.id.encode())), positive=case.size == "one")


def _matrix(gen, rows: int, cols: int, case: Case, dtype, device) -> torch.Tensor:
    if case.layout == "transposed":
        return gen((cols, rows), dtype, device).t()
    if case.layout == "strided":
        return gen((rows, 2 * cols + 1), dtype, device)[:, 1::2]
    return gen((rows, cols), dtype, device)


def _batched(gen, rows: int, cols: int, case: Case, dtype, device) -> torch.Tensor:
    batch = 0 if case.size == "zero" else BATCH
    if case.layout == "transposed":
        return gen((batch, cols, rows), dtype, device).transpose(1, 2)
    if case.layout == "strided":
        return gen((batch, rows, 2 * cols), dtype, device)[:, :, ::2]
    return gen((batch, rows, cols), dtype, device)


def _conv(gen, case: Case, dtype, device) -> tuple[list[torch.Tensor], dict[str, Any]]:
    m, n, k = SIZES[case.size]
    batch, channels, out_channels = (0, 4, 6) if case.size == "zero" else (2, max(k // 16, 1), max(n // 8, 1))
    side = max(m // 4, 1) if case.size in ("tiles", "aligned") else max(m, 1)
    kernel = 1 if case.size == "one" else 3
    shape = (batch, channels * (2 if case.layout == "strided" else 1), side, side + 1)
    x = gen(shape, dtype, device)
    if case.layout == "strided":
        x = x[:, ::2]
    elif case.layout == "transposed":
        x = x.contiguous(memory_format=torch.channels_last)
    w = gen((out_channels, channels, kernel, kernel), dtype, device)
    scalars = {"padding": kernel // 2, "stride": 2 if case.size == "odd127" else 1}
    return [x, w, gen((out_channels,), dtype, device)], scalars


def _attention(gen, case: Case, dtype, device) -> tuple[list[torch.Tensor], dict[str, Any]]:
    b, hq, hkv, length, s, d, causal, mask, train, transposed = ATTENTION[case.size]

    def heads(h: int, n: int) -> torch.Tensor:
        return gen((b, n, h, d), dtype, device).transpose(1, 2) if transposed else gen((b, h, n, d), dtype, device)

    tensors = [heads(hq, length), heads(hkv, s), heads(hkv, s)]
    scalars: dict[str, Any] = {"is_causal": causal, "grad": train}
    if mask in ("padding", "full_row"):
        keep = torch.ones(b, 1, length if mask == "full_row" else 1, s, dtype=torch.bool)
        keep[..., s - s // 3 :] = False  # the last keys are padding
        if mask == "full_row":
            keep[:, :, 2, :] = False  # a query row that attends nothing: torch gives it zeros
        scalars["attn_mask"] = keep.to(device)
    elif mask == "bias":
        scalars["attn_mask"] = gen((1, hq, length, s), dtype, device)
    return tensors, scalars


def make(case: Case, device: torch.device | str) -> tuple[list[torch.Tensor], dict[str, Any], list[Any]]:
    """(tensors, scalars, epilogue) for ``tunesmith``'s problem builder, the same in every process."""
    device = torch.device(device)
    gen = _gen(case)
    dtype = getattr(torch, case.dtype)
    if case.op == "attention":
        return (*_attention(gen, case, dtype, device), [])
    m, n, k = SIZES[case.size]
    if case.op == "conv":
        tensors, scalars = _conv(gen, case, dtype, device)
    elif case.op in ("bmm", "baddbmm"):
        a, b = _batched(gen, m, k, case, dtype, device), _batched(gen, k, n, case, dtype, device)
        tensors = [gen((a.shape[0], 1, n), dtype, device), a, b] if case.op == "baddbmm" else [a, b]
        scalars = {"alpha": 0.5, "beta": 2.0} if case.op == "baddbmm" else {}
    else:
        a, b = _matrix(gen, m, k, case, dtype, device), _matrix(gen, k, n, case, dtype, device)
        if case.op == "addmm":
            tensors, scalars = [gen((n,), dtype, device), a, b], {"alpha": 2.0, "beta": 0.5}
        elif case.op == "mm_plus_mm":
            c, d = _matrix(gen, m, k + 3, case, dtype, device), _matrix(gen, k + 3, n, case, dtype, device)
            tensors, scalars = [a, b, c, d], {}
        else:
            tensors, scalars = [a, b], {}
    return tensors, scalars, _epilogue(case, gen, dtype, device, tensors, scalars)


def _epilogue(case: Case, gen, dtype, device, tensors, scalars) -> list[Any]:
    if not case.epilogue:
        return []
    from tunesmith.problem import build_problem

    out_shape = build_problem(case.op, tensors, scalars)[0].output.shape
    row = (out_shape[-1],)  # a per-column operand, broadcast over the rest
    steps: list[Any] = []
    for token in case.epilogue:
        if token.endswith("_tensor"):
            steps.append((token.removesuffix("_tensor"), gen(row, dtype, device)))
        elif token.endswith("_scalar"):
            steps.append((token.removesuffix("_scalar"), 0.75))
        elif token.startswith("cast_"):
            steps.append(("cast", token.removeprefix("cast_")))
        else:
            steps.append(token)
    return steps
