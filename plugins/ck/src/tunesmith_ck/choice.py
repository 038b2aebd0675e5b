"""A CK choice: one instance for one Problem, built by precompile() and called through ctypes on the
Problem's tensors. It runs only on a ROCm machine; anywhere else both steps raise, saying why (the
building, loading and honest failures are ``tunesmith.plugin.native``'s)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import attrs
import torch

from tunesmith.plugin.native import NativeChoice, ab_inputs, check_alignment
from tunesmith_ck.gemm import ELEMENT_BYTES, Gemm
from tunesmith_ck.instances import Instance, d_vectors
from tunesmith_ck.render import COMPILER, ENTRY, render_source
from tunesmith_hookspecs import Problem

#: what the entry point's return codes mean
RETURN_CODES = {
    1: "CK refused the arguments (IsSupportedArgument is false)",
    2: "CK threw an exception",
    3: "the kernel launch failed (hipGetLastError)",
}
_ARGTYPES = [ctypes.c_void_p] * 2 + [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p] + [ctypes.c_int64] * 4
_ARGTYPES += [ctypes.POINTER(ctypes.c_int64)] * 2 + [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p]
#: the library's entry point and its signature
ENTRIES = {ENTRY: (_ARGTYPES, ctypes.c_int)}


@attrs.define(eq=False)
class CKChoice(NativeChoice):
    """One instance for one Problem: ``precompile()`` builds and loads it, ``kernel()`` calls it."""

    compiler = COMPILER
    entries = ENTRIES

    def source(self) -> str:
        """The C++ source this choice builds."""
        return render_source(self.instance, self.gemm)

    def target(self) -> str:
        return self.env.arch

    def launch(self, library: dict[str, Any]) -> Callable[..., torch.Tensor]:
        return _Launch(library[ENTRY], self.problem, self.gemm, self.instance)


class _Launch:
    """The call of one built instance, with the Problem's constant arguments packed once."""

    def __init__(self, entry: Any, problem: Problem, gemm: Gemm, inst: Instance) -> None:
        self.entry, self.problem, self.gemm = entry, problem, gemm
        self.operands = ab_inputs(problem.op)
        g = gemm
        strides = (g.a.ld, g.b.ld, g.n, g.a.batch_stride, g.b.batch_stride, g.m * g.n)
        self.strides = (ctypes.c_int64 * 6)(*strides)
        d_strides = [s for d in g.ds for s in (d.ld, d.batch_stride)] or [0]
        self.d_strides = (ctypes.c_int64 * len(d_strides))(*d_strides)
        self.scalars = (ctypes.c_float * len(g.scalars))(*g.scalars)
        #: (input index, required byte alignment) of every tensor read with vector loads
        self.alignment = [
            (self.operands[0], inst.a_vector * ELEMENT_BYTES[g.a.dtype]),
            (self.operands[1], inst.b_vector * ELEMENT_BYTES[g.b.dtype]),
            *((i, v * ELEMENT_BYTES[d.dtype]) for i, d, v in zip(g.d_inputs, g.ds, d_vectors(inst, g), strict=True)),
        ]

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        check_alignment(tensors, self.alignment)
        a, b = (tensors[i] for i in self.operands)
        out = self.problem.output
        e = torch.empty(out.shape, dtype=getattr(torch, out.dtype), device=a.device)
        ds = [tensors[i].data_ptr() for i in self.gemm.d_inputs] or [0]
        g = self.gemm
        code = self.entry(
            a.data_ptr(),
            b.data_ptr(),
            (ctypes.c_void_p * len(ds))(*ds),
            e.data_ptr(),
            g.batch,
            g.m,
            g.n,
            g.k,
            self.strides,
            self.d_strides,
            self.scalars,
            torch.cuda.current_stream(a.device).cuda_stream,
        )
        if code:
            raise RuntimeError(f"CK instance failed: {RETURN_CODES.get(code, f'return code {code}')}")
        return e
