"""Benchmarking: the core's default implementation of the ``tunesmith_benchmarker`` hook.

``benchmark="subprocess"`` times choices in a crash-isolated worker process per device
(:mod:`tunesmith.bench.isolated`); ``"inprocess"`` times them here
(:mod:`tunesmith.bench.inprocess`); ``"auto"`` (the default) is subprocess on a GPU and inprocess on
the CPU, where a worker's start-up would cost more than the tuning. Choices of plugins registered at
run time exist only in this process and are always timed here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence

import torch

from tunesmith import hooks
from tunesmith.bench import masks, pool
from tunesmith.bench.inprocess import BUDGET_EXHAUSTED, InprocessBenchmarker, mark_compiled, time_inprocess
from tunesmith.bench.isolated import time_isolated
from tunesmith.bench.timing import check_output
from tunesmith.config import Options
from tunesmith_hookspecs import Choice, Problem, Timing

__all__ = ["BUDGET_EXHAUSTED", "DefaultBenchmarker", "InprocessBenchmarker", "check_output", "mode"]


def mode(options: Options, device: torch.device) -> str:
    """``subprocess`` or ``inprocess``: the ``benchmark`` setting, with ``auto`` decided by device."""
    if options.benchmark == "auto":
        return "subprocess" if device.type == "cuda" else "inprocess"
    return options.benchmark


class DefaultBenchmarker:
    """Times each choice in the worker of the inputs' device, or here (see the module docstring)."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def prepare(self, device: torch.device) -> Callable[[], None] | None:
        """Start ``device``'s worker now, where its choices would be timed in one, so that it
        boots (seconds) while the graph is traced; what to call once the graph is compiled stops
        that worker if no Problem used it (it holds GPU memory). A busy worker is left be."""
        if mode(self.options, device) != "subprocess":
            return None
        slot = pool.slot(device)
        if not slot.lock.acquire(blocking=False):
            return None
        try:
            worker = slot.worker_process(pool.isolatable_plugins())
        finally:
            slot.lock.release()

        def unless_used() -> None:
            with slot.lock:
                if slot.worker is worker and not worker.used:
                    slot.discard()

        return unless_used

    def benchmark(self, problem: Problem, choices: Sequence[Choice], inputs: Sequence[torch.Tensor]) -> list[Timing]:
        start = time.monotonic()  # the budget covers precompiling too
        device = inputs[0].device if inputs else torch.device("cpu")
        if mode(self.options, device) == "inprocess":
            return time_inprocess(problem, choices, inputs, self.options, start)
        isolatable = set(pool.isolatable_plugins())
        away = [i for i, c in enumerate(choices) if c.spec.backend in isolatable]
        here = sorted(set(range(len(choices))) - set(away))
        timings: list[Timing | None] = [None] * len(choices)
        if away:
            specs = [choices[i].spec for i in away]
            baseline = [choices[i] for i in away if choices[i].spec.backend == hooks.BASELINE_BACKEND]
            ready = _ready_here(problem, baseline, device)
            values = masks.payload(problem.inputs, inputs)
            isolated, start = time_isolated(problem, specs, self.options, device, start, ready, values)
            for i, timing in zip(away, isolated, strict=True):
                timings[i] = timing
        if here:
            best = min((t.ms for t in timings if t is not None and t.ok), default=None)
            local = time_inprocess(problem, [choices[i] for i in here], inputs, self.options, start, best)
            for i, timing in zip(here, local, strict=True):
                timings[i] = timing
        return [t for t in timings if t is not None]


def _ready_here(problem: Problem, choices: Sequence[Choice], device: torch.device) -> Callable[[], Callable[[], None]]:
    """A start for precompiling ``choices`` in this process on a thread, while the worker compiles:
    the winner is loaded here after timing, and ATen's first call of a shape (its library kernel's
    loading, 0.06 to 0.22 s on an H100) then costs nothing more. The start returns the wait for
    that thread, which the worker's timing follows, so that the two processes never share the GPU
    while it times. Not during CUDA-graph capture, nor for a conv that cuDNN would time itself."""
    if not choices or (problem.op == "conv" and torch.backends.cudnn.benchmark):
        return lambda: lambda: None

    def start() -> Callable[[], None]:
        on_gpu = device.type == "cuda"
        if on_gpu and torch.cuda.is_current_stream_capturing():
            return lambda: None

        def work() -> None:
            with torch.cuda.device(device) if on_gpu else contextlib.nullcontext():
                for choice in choices:
                    try:
                        choice.precompile()
                    except Exception:  # noqa: BLE001 - the choice's own error, met again where it runs
                        continue
                    mark_compiled(choice)

        thread = threading.Thread(target=work, name="tunesmith-ready-here", daemon=True)
        thread.start()
        return thread.join

    return start
