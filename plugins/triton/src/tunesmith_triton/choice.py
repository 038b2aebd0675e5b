"""A Triton choice: one tile config of the GEMM template for one Problem, and its launch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import triton

from tunesmith_hookspecs import ChoiceSpec, Problem
from tunesmith_triton.kernels import CODES, MAX_OPERANDS, MAX_STEPS, gemm_kernel

NAME = "triton"
#: the ops the template serves (convolution comes later)
OPS = ("mm", "addmm", "bmm", "baddbmm", "mm_plus_mm")


@attrs.frozen
class Config:
    """Tile sizes, grouping, warps and pipeline stages of one kernel instance."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def params(self) -> dict[str, int]:
        return attrs.asdict(self)


def epilogue_plan(problem: Problem) -> tuple[list[int], list[int], list[float], list[int]] | None:
    """Step codes, operand slots, scalars and the operand tensors' input indices, or None when the
    chain does not fit the template (more than ``MAX_STEPS`` steps or ``MAX_OPERANDS`` tensors)."""
    codes, slots, scalars, operands = [], [], [], []
    for step in problem.epilogue:
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


class TritonChoice:
    """The GEMM template with ``config`` for ``problem``."""

    def __init__(self, spec: ChoiceSpec, problem: Problem, precision: str) -> None:
        self.spec, self.problem, self.precision = spec, problem, precision
        self.config = Config(**dict(spec.params))
        plan = epilogue_plan(problem)
        if plan is None:
            raise ValueError(f"the epilogue of {problem.op} does not fit the Triton template")
        self.codes, self.slots, self.scalars, self.operands = plan

    def _launch(self, tensors: Sequence[torch.Tensor], out: torch.Tensor, warmup: bool = False) -> None:
        p, t, cfg = self.problem, tensors, self.config
        op = p.op
        bias = t[0] if op in ("addmm", "baddbmm") else None
        a, b = (t[1], t[2]) if bias is not None else (t[0], t[1])
        c, d = (t[2], t[3]) if op == "mm_plus_mm" else (a, b)
        batch = out.shape[0] if out.dim() == 3 else 1
        m, n = out.shape[-2], out.shape[-1]
        e = [t[i] for i in self.operands] + [out] * (MAX_OPERANDS - len(self.operands))
        grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n), batch)
        args = (
            a, b, c, d, bias if bias is not None else out, e[0], e[1], out,
            m, n, a.shape[-1], c.shape[-1],
            *_mat(a), *_mat(b), *_mat(c), *_mat(d),
            *(_strides3(bias) if bias is not None else (0, 0, 0)),
            *_strides3(e[0]), *_strides3(e[1]),
            *_mat(out),
            float(p.scalar("alpha", 1.0)), float(p.scalar("beta", 1.0)), *self.scalars,
        )  # fmt: skip
        meta: dict[str, Any] = dict(
            HAS_SECOND=op == "mm_plus_mm",
            HAS_BIAS=bias is not None,
            **{f"S{i}": code for i, code in enumerate(self.codes)},
            **{f"O{i}": slot for i, slot in enumerate(self.slots)},
            BM=cfg.block_m,
            BN=cfg.block_n,
            BK=cfg.block_k,
            GROUP=cfg.group_m,
            PRECISION=self.precision,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        if warmup:
            gemm_kernel.warmup(*args, grid=grid, **meta)
        else:
            gemm_kernel[grid](*args, **meta)

    def _output(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        out = self.problem.output
        return torch.empty(out.shape, dtype=getattr(torch, out.dtype), device=tensors[0].device)

    def precompile(self) -> None:
        """Compile the kernel for this Problem's layout (on a GPU; the interpreter compiles nothing)."""
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
