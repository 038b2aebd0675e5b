"""A CUTLASS choice: one instance for one Problem, built by precompile() and called through ctypes on
the Problem's tensors (raw device pointers and torch's current stream; no torch headers are
compiled). A library is loaded once per process and serves every Problem of its kind; the building,
loading and honest failures are ``tunesmith.plugin.native``'s."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import attrs
import torch

from tunesmith.plugin.native import NativeChoice, ab_inputs, check_alignment
from tunesmith_cutlass.gemm import ELEMENT_BYTES, Gemm
from tunesmith_cutlass.render import CAN_IMPLEMENT, COMPILER, RUN, WORKSPACE, render_source
from tunesmith_hookspecs import Problem

#: what the run entry point's return codes mean
RETURN_CODES = {
    1: "CUTLASS refused the arguments (can_implement)",
    2: "CUTLASS could not initialise the launch (workspace or TMA descriptors)",
    3: "the kernel launch failed",
    4: "CUTLASS threw an exception",
}
_ARGS = [ctypes.c_void_p] * 3 + [ctypes.POINTER(ctypes.c_void_p)] + [ctypes.c_int64] * 4
_ARGS += [ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_float)]
#: the library's entry points and their signatures
ENTRIES = {
    CAN_IMPLEMENT: (_ARGS, ctypes.c_int),
    WORKSPACE: (_ARGS, ctypes.c_int64),
    RUN: ([*_ARGS, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], ctypes.c_int),
}


@attrs.define(eq=False)
class CutlassChoice(NativeChoice):
    """One instance for one Problem: ``precompile()`` builds and loads it, ``kernel()`` calls it
    (``gemm`` as :func:`~tunesmith_cutlass.instances.for_family` has it)."""

    compiler = COMPILER
    entries = ENTRIES

    def source(self) -> str:
        """The C++ source this choice builds (the same for every Problem of its kind)."""
        return render_source(self.instance, self.gemm.kind)

    def target(self) -> str:
        return self.env.arch.gencode(self.instance.family)

    def launch(self, library: dict[str, Any]) -> Callable[..., torch.Tensor]:
        return _Launch(library, self.problem, self.gemm)


class _Launch:
    """The call of one built instance, with the Problem's constant arguments packed once."""

    def __init__(self, library: dict[str, Any], problem: Problem, gemm: Gemm) -> None:
        self.library, self.problem, self.gemm = library, problem, gemm
        self.operands = ab_inputs(problem.op)
        g = gemm
        strides = [g.a.ld, g.b.ld, g.n, g.a.batch_stride, g.b.batch_stride, g.m * g.n]
        strides += [s for o in g.operands for s in (o.ld, o.batch_stride)]
        self.strides = (ctypes.c_int64 * len(strides))(*strides)
        self.scalars = (ctypes.c_float * len(g.scalars))(*g.scalars)
        self.out_dtype = getattr(torch, problem.output.dtype)
        #: (input index, byte alignment) of every tensor read with vector loads (copies are aligned)
        matrices = zip(self.operands, (g.a, g.b), strict=True)
        self.alignment = [
            *((i, m.alignment * ELEMENT_BYTES[m.dtype]) for i, m in matrices if not m.copied),
            *((o.index, o.alignment * ELEMENT_BYTES[o.dtype]) for o in g.operands),
        ]
        self.workspace: int | None = None

    def matrices(self, tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """A and B as the instance reads them: the inputs, or their K-major copies (``copied``)."""
        a, b = (tensors[i] for i in self.operands)
        if self.gemm.a.copied:
            a = a.contiguous()
        if self.gemm.b.copied:
            b = b.transpose(-1, -2).contiguous().transpose(-1, -2)
        return a, b

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        check_alignment(tensors, self.alignment)
        a, b = self.matrices(tensors)
        g = self.gemm
        d = torch.empty(self.problem.output.shape, dtype=self.out_dtype, device=a.device)
        if not d.numel():  # nothing to compute, and a launch of no blocks is an error
            return d
        pointers = [tensors[o.index].data_ptr() for o in g.operands] or [0]
        args = (
            a.data_ptr(),
            b.data_ptr(),
            d.data_ptr(),
            (ctypes.c_void_p * len(pointers))(*pointers),
            g.m,
            g.n,
            g.k,
            g.batch,
            self.strides,
            self.scalars,
        )
        if self.workspace is None:
            size = self.library[WORKSPACE](*args)
            if size < 0:
                raise RuntimeError("CUTLASS could not size the workspace")
            self.workspace = size
        workspace = torch.empty(self.workspace, dtype=torch.uint8, device=a.device) if self.workspace else None
        # the library launches on the current device: make it the tensors' one
        with torch.cuda.device(a.device):
            code = self.library[RUN](
                *args,
                workspace.data_ptr() if workspace is not None else None,
                self.workspace,
                torch.cuda.current_stream(a.device).cuda_stream,
            )
        if code:
            raise RuntimeError(f"CUTLASS instance failed: {RETURN_CODES.get(code, f'return code {code}')}")
        return d
