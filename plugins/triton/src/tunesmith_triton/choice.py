"""A Triton choice: one config of a GEMM template for one Problem, its kernel launches, and their
direct replay past Triton's argument binding."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import triton

from tunesmith.plugin import scratch_like, tf32_allowed, torch_dtype
from tunesmith_hookspecs import ChoiceSpec, Problem
from tunesmith_triton.kernels import (
    CODES,
    MAX_OPERANDS,
    MAX_STEPS,
    gemm_kernel,
    gemm_tma_kernel,
)
from tunesmith_triton.launchers import built_early
from tunesmith_triton.served import TEMPLATES

try:  # host-side TMA descriptors (Triton 3.4 and later)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: no TMA template
    TensorDescriptor = None

#: the narrowest column slice an epilogue is split into
MIN_SUBTILE_N = 16


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
    #: column slices the epilogue finishes one after another: 1, 2 or 4 ("gemm_tma" only)
    subtile: int = 1
    #: a producer warp loads while the others multiply ("gemm_tma" persistent only)
    warp_specialize: bool = False

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


Strided = tuple[torch.Tensor, tuple[int, int, int]]


def finish_args(
    plan: tuple[list[int], list[int], list[float], list[int]],
    bias: Strided | None,
    operands: Sequence[Strided],
    out: Strided,
    alpha: float = 1.0,
    beta: float = 1.0,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The tail of arguments and the constexprs of ``kernels._finish`` from an epilogue plan and
    each tensor with its (batch, row, col) strides; unused operand slots point at the output."""
    codes, slots, scalars, _ = plan
    unused = (out[0], (0, 0, 0))
    tensors = [bias or unused, *operands] + [unused] * (MAX_OPERANDS - len(operands))
    args = (*[a for t, strides in tensors for a in (t, *strides)], alpha, beta, *scalars, out[0], *out[1])
    meta = {
        "HAS_BIAS": bias is not None,
        **{f"S{i}": code for i, code in enumerate(codes)},
        **{f"O{i}": slot for i, slot in enumerate(slots)},
    }
    return args, meta


def precision(problem: Problem) -> str:
    """``tl.dot``'s input precision: TF32 for float32 where torch's own kernels may use it (the
    float32 matmul precision for GEMMs, cuDNN's allow_tf32 for convolutions)."""
    return "tf32" if problem.inputs[0].dtype == "float32" and tf32_allowed(problem) else "ieee"


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
    """A TMA descriptor reading the (batched) matrix ``t`` in [rows, cols] blocks, or, when its
    rows are the contiguous dimension, its transpose in [cols, rows] blocks; and whether it is
    transposed. The base is ``t`` itself either way (a launch swaps in the next call's tensor)."""
    lead = [(t.shape[0], t.stride(0))] if t.dim() == 3 else []
    block = [1] * len(lead)
    r, c = t.dim() - 2, t.dim() - 1
    transposed = t.stride(c) != 1
    if transposed:
        r, c, rows, cols = c, r, cols, rows
    shape = [n for n, _ in lead] + [t.shape[r], t.shape[c]]
    strides = [s for _, s in lead] + [t.stride(r), 1]
    return TensorDescriptor(t, shape, strides, [*block, rows, cols]), transposed


def _grid3(grid: tuple[int, ...]) -> tuple[int, int, int]:
    return (*grid, 1, 1)[:3]  # type: ignore[return-value]


#: one kernel launch: the JIT function, its grid, its arguments and its constexprs and options
Launch = tuple[Any, tuple[int, ...], tuple[Any, ...], dict[str, Any]]


def _load(launches: Sequence[Launch]) -> None:
    """Compile each launch's kernel for its arguments and load it with its launcher, which Triton
    would otherwise build and load on the first launch (in timing); a new signature's launcher is
    built while its kernel compiles (``launchers.py``)."""
    for kernel, grid, args, meta in launches:
        with built_early(kernel, args):
            compiled = kernel.warmup(*args, grid=grid, **meta)
        load = getattr(compiled, "_init_handles", None)
        if load is not None:
            load()


@attrs.frozen
class _Direct:
    """A choice's launches replayed on the compiled kernels, past Triton's per-call binding of
    ~45 arguments (tens of microseconds a launch). Shapes, strides and scalars are the
    Problem's, so only the tensors change: each call puts its tensors (inputs, output,
    workspace) into the recorded argument slots, which hold no tensor in between (the record
    keeps no memory alive). Valid for tensors of the recorded layout and 16-byte alignment on the
    recorded device (a compiled kernel is loaded on one GPU)."""

    launches: tuple[tuple[Any, tuple[int, int, int], tuple[Any, ...], tuple[tuple[int, int], ...]], ...]
    descriptors: tuple[tuple[int, int, int, Any], ...]  # (launch, argument, source, emptied descriptor)
    layout: tuple[tuple[Any, ...], ...]

    @classmethod
    def record(cls, launches: Sequence[Launch], compiled: Sequence[Any], sources: Sequence[torch.Tensor]) -> _Direct:
        def source(t: Any) -> int:
            return next(i for i, s in enumerate(sources) if s is t)

        steps, descriptors = [], []
        for n, ((kernel, grid, args, meta), binary) in enumerate(zip(launches, compiled, strict=True)):
            # the compiled kernel takes every parameter in order: constexprs (the last ones) too
            constants = tuple(meta[p.name] for p in kernel.params if p.is_constexpr)
            slots = tuple((i, source(a)) for i, a in enumerate(args) if isinstance(a, torch.Tensor))
            values = [None if isinstance(a, torch.Tensor) else a for a in args]
            for i, a in enumerate(args):
                if isinstance(a, TensorDescriptor or ()):
                    descriptors.append((n, i, source(a.base), _emptied(a)))
                    values[i] = None
            steps.append((binary, _grid3(grid), (*values, *constants), slots))
        return cls(tuple(steps), tuple(descriptors), layout(sources))

    def launch(self, sources: Sequence[torch.Tensor]) -> None:
        args = [list(step[2]) for step in self.launches]
        for n, i, j, empty in self.descriptors:
            desc = copy.copy(empty)
            desc.base = sources[j]
            args[n][i] = desc
        for (binary, grid, _, slots), values in zip(self.launches, args, strict=True):
            for i, j in slots:
                values[i] = sources[j]
            binary[grid](*values)


def _emptied(desc: Any) -> Any:
    """A copy of a TMA descriptor without its tensor."""
    empty = copy.copy(desc)
    empty.base = None
    return empty


def layout(tensors: Sequence[torch.Tensor]) -> tuple[tuple[Any, ...], ...]:
    """What a compiled launch depends on beyond the Problem: each tensor's device, shape,
    strides and 16-byte alignment."""
    return tuple((t.device, t.shape, t.stride(), t.data_ptr() % 16 == 0) for t in tensors)


class TritonChoice:
    """One template with one config for ``problem``."""

    def __init__(self, spec: ChoiceSpec, problem: Problem, precision: str, sms: int = 1) -> None:
        if spec.template not in TEMPLATES:
            raise ValueError(f"unknown Triton template {spec.template!r}")
        self.spec, self.problem, self.precision, self.sms = spec, problem, precision, sms
        self.config = Config(**dict(spec.params))
        if self.config.split_k > 1 and (spec.template != "gemm" or problem.op == "mm_plus_mm"):
            raise ValueError("split_k > 1 is for the gemm template of one product")
        if self.config.persistent and spec.template != "gemm_tma":
            raise ValueError("persistent is for the gemm_tma template")
        if self.config.subtile not in (1, 2, 4) or self.config.block_n // self.config.subtile < MIN_SUBTILE_N:
            raise ValueError(f"subtile is 1, 2 or 4, and leaves slices of {MIN_SUBTILE_N} columns or more")
        if self.config.subtile > 1 and spec.template != "gemm_tma":
            raise ValueError("subtile is for the gemm_tma template")
        if self.config.warp_specialize and not self.config.persistent:
            raise ValueError("warp_specialize is for persistent gemm_tma programs")
        plan = epilogue_plan(problem)
        if plan is None:
            raise ValueError(f"the epilogue of {problem.op} does not fit the Triton template")
        self.codes, self.slots, self.scalars, self.operands = plan
        self._direct: dict[int, _Direct] = {}  # by device index

    def _epilogue(self, tensors: Sequence[torch.Tensor], out: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The kernels' shared tail of arguments (bias, epilogue operands, scalars, output) and
        their epilogue constexprs."""
        p = self.problem
        bias = (tensors[0], _strides3(tensors[0])) if p.op in ("addmm", "baddbmm") else None
        operands = [(tensors[i], _strides3(tensors[i])) for i in self.operands]
        plan = (self.codes, self.slots, self.scalars, self.operands)
        return finish_args(plan, bias, operands, (out, _mat(out)), p.scalar("alpha", 1.0), p.scalar("beta", 1.0))

    def _workspace(self, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Split-K's float32 tile sums [batch, M, N] and per-tile arrival counts, zeroed for each
        call (nothing without split-K). A pair kept between calls would be allocated in a CUDA
        graph's pool during the graph trees' warm-up and outlive it, which the trees refuse; and
        streams and graphs must not share one."""
        return () if self.config.split_k == 1 else self._zeroed(out)

    def _zeroed(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = out.shape[0] if out.dim() == 3 else 1
        m, n = out.shape[-2:]
        tiles = triton.cdiv(m, self.config.block_m) * triton.cdiv(n, self.config.block_n)
        sums = torch.zeros((batch, m, n), dtype=torch.float32, device=out.device)
        return sums, torch.zeros(batch * tiles, dtype=torch.int32, device=out.device)

    def _launches(self, tensors: Sequence[torch.Tensor], out: torch.Tensor, ws: Sequence[torch.Tensor]) -> list[Launch]:
        """The kernel launch computing ``out`` (a list: the conv template's subclass has its own)."""
        t, cfg = tensors, self.config
        bias = self.problem.op in ("addmm", "baddbmm")
        a, b = (t[1], t[2]) if bias else (t[0], t[1])
        m, n, k = out.shape[-2], out.shape[-1], a.shape[-1]
        tail, meta = self._epilogue(tensors, out)
        meta |= {"BM": cfg.block_m, "BN": cfg.block_n, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
        if self.spec.template == "gemm_tma":
            a_desc, a_t = _descriptor(a, cfg.block_m, cfg.block_k)
            b_desc, b_t = _descriptor(b, cfg.block_k, cfg.block_n)
            batch = out.shape[0] if out.dim() == 3 else 1
            grid = (min(batch * tiles, self.sms) if cfg.persistent else batch * tiles,)
            meta |= {"BK": cfg.block_k, "GROUP": cfg.group_m, "A_T": a_t, "B_T": b_t, "BATCHED": out.dim() == 3}
            meta |= {"FLATTEN": cfg.persistent and not cfg.warp_specialize, "PRECISION": self.precision}
            meta |= {"SUBTILE": cfg.subtile, "WS": cfg.warp_specialize}
            return [(gemm_tma_kernel, grid, (a_desc, b_desc, m, n, k, batch, *tail), meta)]
        c, d = (t[2], t[3]) if self.problem.op == "mm_plus_mm" else (a, b)
        batch, split = (out.shape[0] if out.dim() == 3 else 1), cfg.split_k
        sums, counts = ws or (out, out)  # without split-K the kernel touches neither
        args = (a, b, c, d, sums, counts, m, n, k, c.shape[-1], *_mat(a), *_mat(b), *_mat(c), *_mat(d), *tail)
        even = k % cfg.block_k == 0 and c.shape[-1] % cfg.block_k == 0
        meta |= {"HAS_SECOND": self.problem.op == "mm_plus_mm", "BK": cfg.block_k, "GROUP": cfg.group_m}
        meta |= {"SPLIT": split, "EVEN_K": even, "PRECISION": self.precision}
        return [(gemm_kernel, (tiles, batch, split), args, meta)]

    def _launch(self, tensors: Sequence[torch.Tensor], out: torch.Tensor) -> None:
        ws = self._workspace(out)
        sources = (*tensors, out, *ws)
        direct = self._direct.get(out.device.index or 0)
        if direct is not None and direct.layout == layout(sources):
            direct.launch(sources)
            return
        launches = self._launches(tensors, out, ws)
        compiled = [kernel[grid](*args, **meta) for kernel, grid, args, meta in launches]
        # recorded only from distinct tensors (an argument's slot is found by identity) that the
        # kernels were compiled for, not interpreted
        if len({id(t) for t in sources}) == len(sources) and all(hasattr(c, "run") for c in compiled):
            self._direct[out.device.index or 0] = _Direct.record(launches, compiled, sources)

    def _output(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        out = self.problem.output
        return torch.empty_strided(out.shape, out.stride, dtype=torch_dtype(out.dtype), device=tensors[0].device)

    def precompile(self) -> None:
        """Compile the kernels for this Problem's layout and load them, with their launcher (on a
        GPU; the interpreter compiles nothing)."""
        if self.problem.device != "cuda" or not torch.cuda.is_available():
            return
        device = torch.device("cuda", torch.cuda.current_device())
        tensors = [scratch_like(m, device) for m in self.problem.inputs]
        out = self._output(tensors)
        _load(self._launches(tensors, out, self._workspace(out)))

    def kernel(self) -> Callable[..., torch.Tensor]:
        def run(*tensors: torch.Tensor) -> torch.Tensor:
            out = self._output(tensors)
            if out.numel():
                other = out.is_cuda and out.device.index != torch.cuda.current_device()
                with torch.cuda.device(out.device) if other else contextlib.nullcontext():
                    self._launch(tensors, out)
            return out

        return run
