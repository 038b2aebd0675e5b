"""Benchmarking in the calling process: precompile in parallel threads, then time each choice.

A choice that raises in ``precompile()``, ``kernel()`` or its run, or returns the wrong shape or
dtype, gets an infinite time and its error; it never stops the others. It cannot survive a kernel
that crashes the process: that is what the subprocess benchmarker is for.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import math
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tunesmith.background import tuner
from tunesmith.bench.timing import (
    Measurement,
    check_output,
    give_up_after,
    rotating_inputs,
    synchronize,
    time_callable,
    time_in_graph,
)
from tunesmith.config import Options
from tunesmith.counting import bump
from tunesmith.ops import measured
from tunesmith.plugins import describe_error
from tunesmith_hookspecs import Choice, Problem, Timing

log = logging.getLogger(__name__)

BUDGET_EXHAUSTED = "not timed: budget_s ran out"


#: choices precompiled in this process, by identity (a choice may be unhashable)
_compiled_here: dict[int, weakref.ref[Any]] = {}


def mark_compiled(choice: Choice) -> None:
    """Note that ``choice`` was precompiled in this process (:func:`runnable` then skips it)."""
    key = id(choice)
    with contextlib.suppress(TypeError):  # a choice that takes no weak reference is compiled again
        _compiled_here[key] = weakref.ref(choice, lambda _: _compiled_here.pop(key, None))


def precompile_one(choice: Choice) -> str | None:
    """Run one ``precompile()``; its error text, or None."""
    bump("precompile")
    try:
        choice.precompile()
    except Exception as exc:  # noqa: BLE001 - a failing candidate is timed as infinite
        bump("choice_failed")
        return f"precompile: {describe_error(exc)}"
    mark_compiled(choice)
    return None


def runnable(choice: Choice) -> Callable[..., Any]:
    """The kernel of ``choice``, precompiling it first unless that was done in this process."""
    ref = _compiled_here.get(id(choice))
    if ref is None or ref() is not choice:
        choice.precompile()
    return choice.kernel()


def precompile_all(choices: Sequence[Choice], threads: int) -> list[str | None]:
    """Run every ``precompile()`` on ``threads`` worker threads; the error text of each, or None."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tunesmith-compile") as pool:
        return list(pool.map(precompile_one, choices))


def input_sets(problem: Problem, inputs: Sequence[torch.Tensor], options: Options) -> list[tuple[torch.Tensor, ...]]:
    """The input sets a choice's timed calls read in turn: ``inputs``, and on a GPU timed in CUDA
    graphs, random copies enough to evict the L2 cache (made once per Problem)."""
    on_gpu = bool(inputs) and inputs[0].device.type == "cuda"
    return rotating_inputs(problem, inputs) if on_gpu and options.bench_graph else [tuple(inputs)]


def measure(
    problem: Problem,
    choice: Choice,
    sets: Sequence[Sequence[torch.Tensor]],
    device: torch.device,
    options: Options,
    give_up_ms: float | None = None,
) -> Measurement:
    """Check one (precompiled) choice's output layout, then time it over the input ``sets``
    (:func:`input_sets`; the first is the Problem's own inputs)."""
    kernel = measured(problem, choice.kernel())
    inputs = sets[0]
    warmup, repeat = options.bench_warmup, options.bench_repeat
    with torch.no_grad():
        out = kernel(*inputs)
        synchronize(device)
        check_output(problem, out)
        del out
        if device.type == "cuda" and options.bench_graph:
            calls = [functools.partial(kernel, *each) for each in sets]
            timed = time_in_graph(calls, device, warmup, repeat, give_up_ms)
            if timed is not None:
                return timed
            bump("bench_graph_failed")
        return time_callable(lambda: kernel(*inputs), device, warmup, repeat, give_up_ms)


def out_of_budget(options: Options, start: float) -> bool:
    return options.budget_s is not None and time.monotonic() - start > options.budget_s


def time_inprocess(
    problem: Problem,
    choices: Sequence[Choice],
    inputs: Sequence[torch.Tensor],
    options: Options,
    start: float,
    best_ms: float | None = None,
) -> list[Timing]:
    """Precompile and time ``choices`` here; the budget counts from ``start``, and the choice to beat
    so far (for the early stop) is ``best_ms``."""
    with tuner.outside_gap():  # background tuning: compiling needs no idle GPU, so the model may run
        errors = precompile_all(choices, options.compile_threads)
    device = inputs[0].device if inputs else torch.device("cpu")
    sets = input_sets(problem, inputs, options)
    timings = []
    for choice, error in zip(choices, errors, strict=True):
        if error is None and out_of_budget(options, start) and (best_ms is not None or any(t.ok for t in timings)):
            timings.append(Timing(choice.spec, math.inf, BUDGET_EXHAUSTED))
            continue
        if error is None:
            try:
                m = measure(problem, choice, sets, device, options, give_up_after(best_ms))
            except Exception as exc:  # noqa: BLE001 - a failing candidate is timed as infinite
                bump("choice_failed")
                error = f"run: {describe_error(exc)}"
            else:
                timings.append(Timing(choice.spec, m.ms, noise=m.noise))
                best_ms = m.ms if best_ms is None else min(best_ms, m.ms)
                continue
        log.info("choice %s failed: %s", choice.spec, error)
        timings.append(Timing(choice.spec, math.inf, error))
    return timings


class InprocessBenchmarker:
    """Times choices in the calling process (``benchmark="inprocess"``)."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def benchmark(self, problem: Problem, choices: Sequence[Choice], inputs: Sequence[torch.Tensor]) -> list[Timing]:
        return time_inprocess(problem, choices, inputs, self.options, time.monotonic())
