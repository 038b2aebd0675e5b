"""Compile processes of a benchmark worker: ``precompile()`` run in helper processes first.

Triton generates code in Python, so precompiles on threads take turns on the GIL (about 0.15 s
a config on the H100 machine). The worker sends each precompile to one of ``compile_threads``
helper processes instead; the helper rebuilds the choice from its spec, precompiles it (filling
the backend's disk cache), and the worker's own ``precompile()`` then loads from that cache.
Helpers start with the worker, stay for its Problems, and die with it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import logging
import multiprocessing
import os
import signal
from concurrent.futures.process import BrokenProcessPool
from typing import Any

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Have Linux kill this helper when its worker exits, even by SIGKILL (elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _start(plugins: list[str], device: str, parent: int) -> None:
    """A helper's set-up: the worker's plugins, and the device's context made before any job."""
    _die_with_parent()
    if os.getppid() != parent:  # the worker died before the signal was armed
        os._exit(0)

    import torch

    from tunesmith.plugins import reload_plugins

    reload_plugins(only=plugins)
    if torch.device(device).type == "cuda":
        torch.cuda.init()


def _ready() -> int:
    return os.getpid()


def _precompile(problem: dict[str, Any], spec: dict[str, Any], options: dict[str, Any], fp32: str) -> str | None:
    """In a helper: rebuild one choice and precompile it; its error text, or None."""
    import torch

    from tunesmith import hooks
    from tunesmith.config import from_payload
    from tunesmith.plugins import describe_error
    from tunesmith.settings import current_options
    from tunesmith_hookspecs import ChoiceSpec, Problem, structure

    torch.set_float32_matmul_precision(fp32)
    [choice] = hooks.rebuild_choices(
        [structure(spec, ChoiceSpec)], structure(problem, Problem), from_payload(current_options(), options)
    )
    if choice is None:
        return f"a compile process cannot rebuild {spec}"
    try:
        choice.precompile()
    except Exception as exc:  # noqa: BLE001 - reported as this choice's precompile error
        return f"precompile: {describe_error(exc)}"
    return None


class CompilePool:
    """``size`` helper processes for one worker (started at once, so that they are ready early)."""

    def __init__(self, size: int, plugins: list[str], device: str) -> None:
        self.size = size
        context = multiprocessing.get_context("spawn")  # never fork a process that holds CUDA
        self.executor = concurrent.futures.ProcessPoolExecutor(
            size, mp_context=context, initializer=_start, initargs=(plugins, device, os.getpid())
        )
        for _ in range(size):  # a process is spawned per job submitted while none is idle
            self.executor.submit(_ready)
        self.broken = False

    def precompile(self, problem: dict[str, Any], spec: dict[str, Any], options: dict[str, Any], fp32: str) -> Any:
        """One choice's precompile in a helper: its error text or None, or ``LOST`` when the
        helper died (a crashing compiler); the caller then precompiles it itself."""
        if self.broken:
            return LOST
        try:
            return self.executor.submit(_precompile, problem, spec, options, fp32).result()
        except BrokenProcessPool:
            if not self.broken:
                log.warning("a compile process died; this worker precompiles on its threads from now on")
            self.broken = True
            return LOST

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


#: a helper died before answering
LOST = object()
