"""A CK choice: one instance for one Problem, built by precompile() and called through ctypes on the
Problem's tensors. It runs only on a ROCm machine; anywhere else both steps raise, saying why."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import torch

from tunesmith import native_build
from tunesmith_ck.build import build
from tunesmith_ck.environment import Environment
from tunesmith_ck.gemm import ELEMENT_BYTES, Gemm
from tunesmith_ck.instances import Instance, d_vectors
from tunesmith_ck.render import ENTRY, NAME_ENTRY, render_source
from tunesmith_hookspecs import ChoiceSpec, Problem

#: what the entry point's return codes mean
RETURN_CODES = {
    1: "CK refused the arguments (IsSupportedArgument is false)",
    2: "CK threw an exception",
    3: "the kernel launch failed (hipGetLastError)",
}
_ARGTYPES = [ctypes.c_void_p] * 2 + [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p] + [ctypes.c_int64] * 4
_ARGTYPES += [ctypes.POINTER(ctypes.c_int64)] * 2 + [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p]


@attrs.define(eq=False)
class CKChoice:
    """One instance for one Problem: ``precompile()`` builds and loads it, ``kernel()`` calls it."""

    spec: ChoiceSpec
    problem: Problem
    gemm: Gemm
    instance: Instance
    env: Environment
    cache_root: Path
    _entry: Any = attrs.field(default=None, init=False)

    def source(self) -> str:
        """The C++ source this choice builds."""
        return render_source(self.instance, self.gemm)

    def precompile(self) -> None:
        """Build (or find in the cache) and load the library; raises where it cannot run."""
        if self._entry is not None:
            return
        if not self.env.runnable:
            raise RuntimeError(f"{self.spec} cannot be built here: {self.env.reason}")
        assert self.env.hipcc and self.env.arch and self.env.ck_include  # runnable means all were found
        path = build(self.source(), self.env.hipcc, self.env.arch, self.env.ck_include, self.cache_root)
        library = native_build.load(path, NAME_ENTRY, self.instance.name)
        entry = getattr(library, ENTRY)
        entry.argtypes, entry.restype = _ARGTYPES, ctypes.c_int
        self._entry = entry

    def kernel(self) -> Callable[..., torch.Tensor]:
        """A callable on the Problem's tensors returning E; raises unless precompile() succeeded here."""
        if self._entry is None:
            why = self.env.reason or "precompile() has not built it"
            raise RuntimeError(f"{self.spec} has no built kernel in this process: {why}")
        return _Launch(self._entry, self.problem, self.gemm, self.instance)


class _Launch:
    """The call of one built instance, with the Problem's constant arguments packed once."""

    def __init__(self, entry: Any, problem: Problem, gemm: Gemm, inst: Instance) -> None:
        self.entry, self.problem, self.gemm = entry, problem, gemm
        self.operands = (1, 2) if problem.op == "addmm" else (0, 1)
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
        for index, align in self.alignment:
            if tensors[index].data_ptr() % align:
                raise ValueError(f"input {index} is not {align}-byte aligned, as this instance's vector loads need")
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
