"""A Triton choice: one tile config of the GEMM template for one Problem, and its launch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import triton

from tunesmith_hookspecs import ChoiceSpec, Problem
from tunesmith_triton.kernels import (
    CODES,
    MAX_OPERANDS,
    MAX_STEPS,
    gemm_kernel,
    gemm_tma_kernel,
    splitk_reduce_kernel,
)

try:  # host-side TMA descriptors (Triton 3.4 and later)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: no TMA template
    TensorDescriptor = None

NAME = "triton"
#: the ops the GEMM templates serve (convolution comes later)
OPS = ("mm", "addmm", "bmm", "baddbmm", "mm_plus_mm")
#: the templates: pointer loads with any strides (and split-K), and TMA descriptor loads
TEMPLATES = ("gemm", "gemm_tma")
#: tiles of the split-K reduction kernel
REDUCE_BLOCK = (32, 128)


@attrs.frozen
class Config:
    """Tile sizes, grouping, warps and pipeline stages of one kernel instance."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    #: slices of K reduced by separate programs ("gemm" only)
    split_k: int = 1
    #: one program per SM looping over the tiles ("gemm_tma" only)
    persistent: bool = False

    def params(self) -> dict[str, int | bool]:
        """The spec's params: fields at their defaults are left out, so specs stay short and
        specs cached before a field existed still name the same kernel."""
        defaults = {f.name: f.default for f in attrs.fields(Config)}
        return {k: v for k, v in attrs.asdict(self).items() if defaults[k] is attrs.NOTHING or v != defaults[k]}


def epilogue_plan(problem: Problem) -> tuple[list[int], list[int], list[float], list[int]] | None:
    """Step codes, operand slots, scalars and the operand tensors' input indices, or None when the
    chain does not fit the template (more than ``MAX_STEPS`` steps or ``MAX_OPERANDS`` tensors)."""
    codes, slots, scalars, operands = [], [], [], []
    for step in problem.epilogue:
        if step.name == "cast" and step.dtype == "float32":
            continue  # the accumulator is float32: nothing to round
        if step.name == "cast":
            code = CODES.get(f"cast:{step.dtype}")
            if code is None:
                return None
        elif step.name in ("add", "mul") and step.scalar is not None:
            code = CODES[step.name] + 2
        else:
            code = CODES[step.name]
        slot = 0
        if step.input is not None:
            slot = len(operands)
            operands.append(step.input)
        codes.append(code)
        slots.append(slot)
        scalars.append(step.scalar if step.scalar is not None else 0.0)
    if len(codes) > MAX_STEPS or len(operands) > MAX_OPERANDS:
        return None
    pad = MAX_STEPS - len(codes)
    return codes + [0] * pad, slots + [0] * pad, scalars + [0.0] * pad, operands


def _strides3(t: torch.Tensor) -> tuple[int, int, int]:
    """(batch, row, col) strides of ``t`` broadcast to [batch?, rows, cols] (0 where broadcast)."""
    shape, stride = list(t.shape), list(t.stride())
    while len(shape) < 3:
        shape.insert(0, 1)
        stride.insert(0, 0)
    return tuple(0 if n == 1 else s for n, s in zip(shape, stride, strict=True))  # type: ignore[return-value]


def _mat(t: torch.Tensor) -> tuple[int, int, int]:
    """(batch, row, col) strides of a 2-D or 3-D operand of the op."""
    return (0, *t.stride()) if t.dim() == 2 else tuple(t.stride())  # type: ignore[return-value]


def _descriptor(t: torch.Tensor, rows: int, cols: int) -> tuple[Any, bool]:
    """A TMA descriptor reading ``t`` as [rows, cols] blocks, or [cols, rows] blocks of its
    transpose when its rows are the contiguous dimension; and whether it was transposed."""
    if t.stride(-1) == 1:
        return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], [rows, cols]), False
    tt = t.t()
    return TensorDescriptor(tt, list(tt.shape), [tt.stride(0), 1], [cols, rows]), True


class TritonChoice:
    """One template with one config for ``problem``."""

    def __init__(self, spec: ChoiceSpec, problem: Problem, precision: str, sms: int = 1) -> None:
        if spec.template not in TEMPLATES:
            raise ValueError(f"unknown Triton template {spec.template!r}")
        self.spec, self.problem, self.precision, self.sms = spec, problem, precision, sms
        self.config = Config(**dict(spec.params))
        plan = epilogue_plan(problem)
        if plan is None:
            raise ValueError(f"the epilogue of {problem.op} does not fit the Triton template")
        self.codes, self.slots, self.scalars, self.operands = plan

    def _epilogue(self, tensors: Sequence[torch.Tensor], out: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The kernels' shared tail of arguments (bias, epilogue operands, scalars, output) and
        their epilogue constexprs."""
        p = self.problem
        bias = tensors[0] if p.op in ("addmm", "baddbmm") else None
        e = [tensors[i] for i in self.operands] + [out] * (MAX_OPERANDS - len(self.operands))
        args = (
            bias if bias is not None else out, *(_strides3(bias) if bias is not None else (0, 0, 0)),
            e[0], *_strides3(e[0]), e[1], *_strides3(e[1]),
            float(p.scalar("alpha", 1.0)), float(p.scalar("beta", 1.0)), *self.scalars,
            out, *_mat(out),
        )  # fmt: skip
        meta = {
            "HAS_BIAS": bias is not None,
            **{f"S{i}": code for i, code in enumerate(self.codes)},
            **{f"O{i}": slot for i, slot in enumerate(self.slots)},
        }
        return args, meta

    def _launch(self, tensors: Sequence[torch.Tensor], out: torch.Tensor, warmup: bool = False) -> None:
        t, cfg = tensors, self.config
        bias = self.problem.op in ("addmm", "baddbmm")
        a, b = (t[1], t[2]) if bias else (t[0], t[1])
        m, n, k = out.shape[-2], out.shape[-1], a.shape[-1]
        tail, meta = self._epilogue(tensors, out)
        meta |= {"BM": cfg.block_m, "BN": cfg.block_n, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
        if self.spec.template == "gemm_tma":
            a_desc, a_t = _descriptor(a, cfg.block_m, cfg.block_k)
            b_desc, b_t = _descriptor(b.t(), cfg.block_n, cfg.block_k)
            grid = (min(tiles, self.sms) if cfg.persistent else tiles,)
            args = (a_desc, b_desc, m, n, k, *tail)
            meta |= {"BK": cfg.block_k, "GROUP": cfg.group_m, "A_T": a_t, "B_T": not b_t}
            meta |= {"PRECISION": self.precision}
            self._run(gemm_tma_kernel, grid, args, meta, warmup)
            return
        c, d = (t[2], t[3]) if self.problem.op == "mm_plus_mm" else (a, b)
        batch = out.shape[0] if out.dim() == 3 else 1
        split = cfg.split_k
        ws = torch.empty((split, batch, m, n), dtype=torch.float32, device=out.device) if split > 1 else out
        args = (a, b, c, d, ws, m, n, k, c.shape[-1], *_mat(a), *_mat(b), *_mat(c), *_mat(d), *tail)
        even = k % cfg.block_k == 0 and c.shape[-1] % cfg.block_k == 0
        meta_gemm = meta | {"HAS_SECOND": self.problem.op == "mm_plus_mm", "BK": cfg.block_k, "GROUP": cfg.group_m}
        meta_gemm |= {"SPLIT": split, "EVEN_K": even, "PRECISION": self.precision}
        self._run(gemm_kernel, (tiles, batch, split), args, meta_gemm, warmup)
        if split > 1:
            rm, rn = REDUCE_BLOCK
            grid = (triton.cdiv(m, rm) * triton.cdiv(n, rn), batch)
            meta |= {"BM": rm, "BN": rn, "SPLIT": split, "num_warps": 4, "num_stages": 1}
            self._run(splitk_reduce_kernel, grid, (ws, m, n, *tail), meta, warmup)

    @staticmethod
    def _run(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], meta: dict[str, Any], warmup: bool) -> None:
        if warmup:
            kernel.warmup(*args, grid=grid, **meta)
        else:
            kernel[grid](*args, **meta)

    def _output(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        out = self.problem.output
        return torch.empty(out.shape, dtype=getattr(torch, out.dtype), device=tensors[0].device)

    def precompile(self) -> None:
        """Compile the kernels for this Problem's layout (on a GPU; the interpreter compiles nothing)."""
        if self.problem.device != "cuda" or not torch.cuda.is_available():
            return
        device = torch.device("cuda", torch.cuda.current_device())
        tensors = [
            torch.empty_strided(m.shape, m.stride, dtype=getattr(torch, m.dtype), device=device)
            for m in self.problem.inputs
        ]
        self._launch(tensors, self._output(tensors), warmup=True)

    def kernel(self) -> Callable[..., torch.Tensor]:
        def run(*tensors: torch.Tensor) -> torch.Tensor:
            out = self._output(tensors)
            if out.numel():
                with torch.cuda.device(out.device) if out.is_cuda else contextlib.nullcontext():
                    self._launch(tensors, out)
            return out

        return run
