"""The default benchmarker: precompile in parallel threads, then time each choice in this process.

A choice that raises in ``precompile()``, ``kernel()`` or its run, or returns the wrong shape or
dtype, gets an infinite time and its error; it never stops the others. Times are the median of
``bench_repeat`` runs after ``bench_warmup`` untimed ones: CUDA events on a GPU, a monotonic
clock on the CPU.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tunesmith.counters import bump
from tunesmith.options import Options
from tunesmith.plugins import describe_error
from tunesmith_hookspecs import Choice, Problem, Timing

log = logging.getLogger(__name__)

BUDGET_EXHAUSTED = "not timed: budget_s ran out"


def precompile_all(choices: Sequence[Choice], threads: int) -> list[str | None]:
    """Run every ``precompile()`` on ``threads`` worker threads; the error text of each, or None."""

    def one(choice: Choice) -> str | None:
        bump("precompile")
        try:
            choice.precompile()
        except Exception as exc:  # noqa: BLE001 - a failing candidate is timed as infinite
            bump("choice_failed")
            return f"precompile: {describe_error(exc)}"
        return None

    with concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tunesmith-compile") as pool:
        return list(pool.map(one, choices))


def time_callable(fn: Callable[[], Any], device: torch.device, warmup: int, repeat: int) -> float:
    """Median milliseconds of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    samples = []
    if device.type == "cuda":
        # Enqueue every repeat back to back and synchronise once: a sync per repeat would leave the
        # GPU idle while Python launches the next call, and time that gap too.
        with torch.cuda.device(device):
            torch.cuda.synchronize()
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)
            ]
            for start, end in events:
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
        samples = [start.elapsed_time(end) for start, end in events]
    else:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def _strides(shape: Sequence[int], stride: Sequence[int]) -> tuple[int, ...]:
    """Strides that matter: none for an empty tensor, none of a dimension of size 1."""
    if 0 in shape:
        return ()
    return tuple(st if size > 1 else -1 for size, st in zip(shape, stride, strict=True))


def check_output(problem: Problem, out: Any, strides: bool = False) -> None:
    """Raise when a kernel's result is not a tensor of the Problem's output shape and dtype (and,
    with ``strides``, its layout and device type)."""
    meta = problem.output
    want: tuple[Any, ...] = (tuple(meta.shape), meta.dtype)
    got: tuple[Any, ...] | None = None
    if isinstance(out, torch.Tensor):
        got = (tuple(out.shape), str(out.dtype).removeprefix("torch."))
        if strides:
            want += (_strides(meta.shape, meta.stride), meta.device)
            got += (_strides(out.shape, out.stride()), out.device.type)
    if got != want:
        what = "shape, dtype, strides and device" if strides else "shape and dtype"
        raise TypeError(f"kernel returned {got or type(out).__name__}, expected {what} {want}")


class InprocessBenchmarker:
    """Times choices in the calling process (``benchmark="inprocess"``)."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def benchmark(self, problem: Problem, choices: Sequence[Choice], inputs: Sequence[torch.Tensor]) -> list[Timing]:
        start = time.monotonic()  # the budget covers precompiling too
        errors = precompile_all(choices, self.options.compile_threads)
        device = inputs[0].device if inputs else torch.device("cpu")
        budget = self.options.budget_s
        timings = []
        for choice, error in zip(choices, errors, strict=True):
            out_of_budget = budget is not None and time.monotonic() - start > budget
            if error is None and out_of_budget and any(t.ok for t in timings):
                timings.append(Timing(choice.spec, math.inf, BUDGET_EXHAUSTED))
                continue
            if error is None:
                try:
                    timings.append(Timing(choice.spec, self._time(problem, choice, inputs, device)))
                    continue
                except Exception as exc:  # noqa: BLE001 - a failing candidate is timed as infinite
                    bump("choice_failed")
                    error = f"run: {describe_error(exc)}"
            log.info("choice %s failed: %s", choice.spec, error)
            timings.append(Timing(choice.spec, math.inf, error))
        return timings

    def _time(self, problem: Problem, choice: Choice, inputs: Sequence[torch.Tensor], device: torch.device) -> float:
        kernel = choice.kernel()
        with torch.no_grad():
            check_output(problem, kernel(*inputs))
            return time_callable(lambda: kernel(*inputs), device, self.options.bench_warmup, self.options.bench_repeat)
