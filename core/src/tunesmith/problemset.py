"""Problem sets in the JSON format of ``benchmarks/gemm_shapes.json``: load them, make inputs.

A file is ``{"cases": [...]}`` (or a bare list). A GEMM case has ``name``, ``op`` (mm, addmm,
bmm, baddbmm, mm_plus_mm), ``M``, ``N``, ``K``, ``B`` (bmm and baddbmm), ``dtype``, optional
``epilogue`` (a list of steps: a name, or a pair ``["mul", 0.125]``, ``["add", 1.0]``,
``["cast", "float32"]``; a file holds no tensors) and ``layout_a`` / ``layout_b`` (``row``, or
``col`` for a transposed view). A conv case has ``batch``, ``in_channels``, ``out_channels``,
``height``, ``width``, ``kernel_size`` and optional ``stride``, ``padding``, ``dilation``,
``groups``, ``bias`` (default true) and ``layout`` (``nchw`` or ``nhwc``). An attention case has
``batch``, ``heads``, ``q_len``, ``kv_len``, ``head_dim`` and optional ``kv_heads`` (grouped-query;
default ``heads``), ``causal``, ``mask`` (``padding``: a boolean (B, 1, 1, S) mask, or ``bias``:
an additive (1, H, L, S) one) and ``grad`` (forward and backward). Other fields (the
corpus's ``source`` and ``split``) are kept in ``Case.fields`` and otherwise ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from tunesmith.errors import ProblemError
from tunesmith.problem import GEMM_DTYPES
from tunesmith_hookspecs import EpilogueOp

_GEMM_KEYS = {"mm": "MNK", "addmm": "MNK", "mm_plus_mm": "MNK", "bmm": "BMNK", "baddbmm": "BMNK"}
_CONV_KEYS = ("batch", "in_channels", "out_channels", "height", "width", "kernel_size")
_ATTENTION_KEYS = ("batch", "heads", "q_len", "kv_len", "head_dim")
_NEEDED = {**{op: tuple(keys) for op, keys in _GEMM_KEYS.items()}, "conv": _CONV_KEYS, "attention": _ATTENTION_KEYS}


@attrs.frozen
class Case:
    """One named problem of a set: enough to make its tensors on any device."""

    name: str
    op: str
    dtype: str
    fields: Mapping[str, Any]


def load(path: str | Path) -> list[Case]:
    """Read and check a problem-set file; ProblemError names the case and the missing field."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ProblemError(f"cannot read problem set {path}: {exc}") from None
    cases = data.get("cases") if isinstance(data, dict) else data
    if not isinstance(cases, list):
        raise ProblemError(f"{path}: expected a list of cases, or an object with 'cases'")
    out = []
    for i, raw in enumerate(cases):
        if not isinstance(raw, dict):
            raise ProblemError(f"{path}: case {i} is not an object")
        name, op, dtype = raw.get("name", f"case{i}"), raw.get("op"), raw.get("dtype", "float32")
        if op not in _NEEDED:
            raise ProblemError(f"{path}: case {name!r} has op {op!r}; use one of {', '.join(_NEEDED)}")
        missing = [k for k in _NEEDED[op] if k not in raw]
        if missing:
            raise ProblemError(f"{path}: case {name!r} ({op}) lacks {', '.join(missing)}")
        if dtype not in GEMM_DTYPES:
            raise ProblemError(f"{path}: case {name!r} has dtype {dtype!r}; use one of {', '.join(GEMM_DTYPES)}")
        out.append(Case(name, op, dtype, raw))
    return out


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    if device.type == "meta":  # shapes alone: drawing the values first took seconds a large case
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)


def _matrix(rows: int, cols: int, layout: str, dtype: torch.dtype, device: torch.device, gen: torch.Generator):
    if layout == "col":
        return _randn((cols, rows), dtype, device, gen).t()
    return _randn((rows, cols), dtype, device, gen)


def make_inputs(case: Case, device: torch.device | str, seed: int = 0) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Random tensors (never zeros) and scalars for ``tunesmith.tune(case.op, *tensors, **scalars)``."""
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, case.dtype)
    f = case.fields
    la, lb = f.get("layout_a", "row"), f.get("layout_b", "row")
    if case.op == "attention":
        return _attention_inputs(f, dtype, device, gen)
    if case.op == "conv":
        k = f["kernel_size"]
        kh, kw = (k, k) if isinstance(k, int) else k
        x = _randn((f["batch"], f["in_channels"], f["height"], f["width"]), dtype, device, gen)
        if f.get("layout", "nchw") == "nhwc":
            x = x.to(memory_format=torch.channels_last)
        groups = f.get("groups", 1)
        w = _randn((f["out_channels"], f["in_channels"] // groups, kh, kw), dtype, device, gen)
        tensors = [x, w] + ([_randn((f["out_channels"],), dtype, device, gen)] if f.get("bias", True) else [])
        scalars = {key: f[key] for key in ("stride", "padding", "dilation", "groups") if key in f}
        return tensors, scalars
    M, N, K = f["M"], f["N"], f["K"]
    if case.op in ("bmm", "baddbmm"):
        B = f["B"]
        a, b = _randn((B, M, K), dtype, device, gen), _randn((B, K, N), dtype, device, gen)
        if la == "col":
            a = _randn((B, K, M), dtype, device, gen).transpose(1, 2)
        if lb == "col":
            b = _randn((B, N, K), dtype, device, gen).transpose(1, 2)
        return ([_randn((B, M, N), dtype, device, gen), a, b] if case.op == "baddbmm" else [a, b]), {}
    a, b = _matrix(M, K, la, dtype, device, gen), _matrix(K, N, lb, dtype, device, gen)
    if case.op == "addmm":
        return [_randn((N,), dtype, device, gen), a, b], {}
    if case.op == "mm_plus_mm":
        return [a, b, _matrix(M, K, la, dtype, device, gen), _matrix(K, N, lb, dtype, device, gen)], {}
    return [a, b], {}


def _attention_inputs(
    f: Mapping[str, Any], dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> tuple[list[torch.Tensor], dict[str, Any]]:
    b, h, hkv, length, s, d = (
        f["batch"],
        f["heads"],
        f.get("kv_heads", f["heads"]),
        f["q_len"],
        f["kv_len"],
        f["head_dim"],
    )
    tensors = [_randn((b, h, length, d), dtype, device, gen)]
    tensors += [_randn((b, hkv, s, d), dtype, device, gen) for _ in range(2)]
    scalars: dict[str, Any] = {"is_causal": bool(f.get("causal", False)), "grad": bool(f.get("grad", False))}
    if f.get("mask") == "padding":
        lengths = torch.randint(max(1, s * 3 // 4), s + 1, (b, 1), generator=gen)
        scalars["attn_mask"] = (torch.arange(s)[None, :] < lengths)[:, None, None, :].to(device)
    elif f.get("mask") == "bias":
        scalars["attn_mask"] = _randn((1, h, length, s), dtype, device, gen)
    elif f.get("mask") is not None:
        raise ProblemError(f"attention mask {f['mask']!r}: use 'padding' or 'bias'")
    return tensors, scalars


def epilogue(case: Case) -> list[Any]:
    """The case's steps as ``tune(epilogue=...)`` takes them: names, and [name, number or dtype] pairs."""
    steps = case.fields.get("epilogue", [])
    if not isinstance(steps, list) or not all(_is_step(s) for s in steps):
        raise ProblemError(
            f"case {case.name!r}: epilogue must be a list of step names or [name, number or dtype] pairs"
        )
    return steps


def epilogue_ops(case: Case) -> list[EpilogueOp]:
    """The case's steps as the core's records, for :func:`tunesmith.ops.apply_steps` (the eager path)."""
    out = []
    for step in epilogue(case):
        name, arg = (step, None) if isinstance(step, str) else step
        if name in ("add", "mul") and not isinstance(arg, int | float):
            raise ProblemError(f"case {case.name!r}: epilogue {name!r} needs a number, got {arg!r}")
        try:
            out.append(EpilogueOp(name, scalar=float(arg)) if name in ("add", "mul") else EpilogueOp(name, dtype=arg))
        except ValueError as exc:
            raise ProblemError(f"case {case.name!r}: bad epilogue step {step!r}: {exc}") from None
    return out


def _is_step(step: Any) -> bool:
    if isinstance(step, str):
        return True
    return (
        isinstance(step, list)
        and len(step) == 2
        and isinstance(step[0], str)
        and isinstance(step[1], int | float | str)
        and not isinstance(step[1], bool)
    )


def shape_text(case: Case) -> str:
    f = case.fields
    if case.op == "conv":
        return f"{f['batch']}x{f['in_channels']}x{f['height']}x{f['width']} * {f['out_channels']}x{f['kernel_size']}"
    if case.op == "attention":
        heads = f"{f['heads']}/{f['kv_heads']}" if "kv_heads" in f else f"{f['heads']}"
        return f"{f['batch']}x{heads}x{f['q_len']}x{f['kv_len']}x{f['head_dim']}"
    batch = f"{f['B']}x" if "B" in _GEMM_KEYS[case.op] else ""
    return f"{batch}{f['M']}x{f['N']}x{f['K']}"
