"""Timing one kernel: warm-up, then the median of repeats, with the spread as the noise.

On a GPU a kernel is timed as a compiled model runs it: many calls captured in one CUDA graph,
reading rotating copies of the inputs (so that no call finds its operands in L2), each replay a
repeat (:func:`time_in_graph`). Without a graph (``bench_graph`` off, or calls that cannot be
captured), each repeat is one call between CUDA events, all enqueued back to back behind a short
spin kernel so that the GPU never waits for Python, with the L2 cache flushed before each
(:func:`time_callable`). A choice whose first repeats are already far slower than the best so far
is not timed further: it cannot win.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from tunesmith.problem import tensor_like
from tunesmith_hookspecs import Problem, TensorMeta

log = logging.getLogger(__name__)

#: a choice slower than this times the best so far stops after its probe repeats
EARLY_STOP_FACTOR = 2.0
#: repeats timed before deciding whether to stop early
PROBE_REPEATS = 3
#: size of the buffer written between repeats, as a multiple of the L2 cache
FLUSH_FACTOR = 2
_FALLBACK_L2_BYTES = 64 << 20
#: GPU time held per repeat beyond the launch cost (the flush and the kernel's own launch)
HOLD_PER_REPEAT_MS = 0.05
MAX_HOLD_MS = 100.0
#: GPU time one graph replay aims at: enough calls that a replay's launch is noise
GRAPH_TARGET_MS = 1.0
MAX_GRAPH_CALLS = 256
#: most copies of a Problem's inputs that a graph's calls read in turn
MAX_INPUT_COPIES = 32

_flush_buffers: dict[torch.device, torch.Tensor] = {}
_sleep_rates: dict[torch.device, float] = {}


@attrs.frozen
class Measurement:
    """The median milliseconds of ``samples`` repeats, and their relative interquartile spread."""

    ms: float
    noise: float
    samples: int


def _l2_bytes(device: torch.device) -> int:
    return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or _FALLBACK_L2_BYTES


def _flush_buffer(device: torch.device) -> torch.Tensor:
    buf = _flush_buffers.get(device)
    if buf is None:
        buf = _flush_buffers[device] = torch.empty(
            FLUSH_FACTOR * _l2_bytes(device) // 4, dtype=torch.int32, device=device
        )
    return buf


def _cycles_per_ms(device: torch.device) -> float:
    """The rate of ``torch.cuda._sleep``'s spin loop on ``device``, measured once."""
    if device not in _sleep_rates:
        cycles = 2_000_000
        _sleep_rates[device] = cycles / min(_event_ms(lambda: torch.cuda._sleep(cycles)) for _ in range(3))
    return _sleep_rates[device]


def _hold(device: torch.device, ms: float) -> None:
    """Keep the GPU busy for ``ms`` while this thread enqueues work behind it, so that the timed
    kernels run back to back instead of waiting for Python to launch each one."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(min(ms, MAX_HOLD_MS) * _cycles_per_ms(device)))


def _back_to_back(
    run: Callable[[], Any], device: torch.device, repeat: int, hold_ms: float, before: Callable[[], Any] | None = None
) -> list[float]:
    """Milliseconds of ``repeat`` runs, each between a pair of CUDA events (after ``before``,
    untimed), all enqueued behind ``hold_ms`` of spinning and one synchronize at the end."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
    torch.cuda.synchronize()
    _hold(device, hold_ms)
    for start, end in events:
        if before is not None:
            before()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def _cuda_samples(fn: Callable[[], Any], device: torch.device, repeat: int, launch_ms: float) -> list[float]:
    with torch.cuda.device(device):
        flush = _flush_buffer(device)
        return _back_to_back(fn, device, repeat, 2 * repeat * (launch_ms + HOLD_PER_REPEAT_MS), flush.zero_)


def _cpu_samples(fn: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def noise(samples: Sequence[float]) -> float:
    """Interquartile range over the median (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return (q3 - q1) / median if median > 0 else 0.0


def time_callable(
    fn: Callable[[], Any], device: torch.device, warmup: int, repeat: int, give_up_ms: float | None = None
) -> Measurement:
    """Time ``fn()``: ``warmup`` untimed runs, then ``repeat`` timed ones, or only the first
    ``PROBE_REPEATS`` when their median already exceeds ``give_up_ms``."""
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    launch_ms = (time.perf_counter() - t0) * 1e3 / max(warmup, 1)  # what Python takes to enqueue one call

    def sample(n: int) -> list[float]:
        return _cuda_samples(fn, device, n, launch_ms) if device.type == "cuda" else _cpu_samples(fn, n)

    return _probed(sample, repeat, give_up_ms)


def _probed(sample: Callable[[int], list[float]], repeat: int, give_up_ms: float | None) -> Measurement:
    """The median and noise of ``repeat`` samples, or of the first ``PROBE_REPEATS`` when their
    median already exceeds ``give_up_ms``."""
    samples = sample(min(PROBE_REPEATS, repeat))
    if repeat > len(samples) and (give_up_ms is None or statistics.median(samples) <= give_up_ms):
        samples += sample(repeat - len(samples))
    return Measurement(statistics.median(samples), noise(samples), len(samples))


def _span_bytes(t: torch.Tensor) -> int:
    """The bytes a tensor's elements span in its storage (a view of a larger buffer: its part)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((size - 1) * abs(step) for size, step in zip(t.shape, t.stride(), strict=True))) * t.element_size()


def rotating_inputs(problem: Problem, inputs: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, ...]]:
    """``inputs`` and enough random copies of the Problem's inputs that reading them all in turn
    evicts the L2 cache (``FLUSH_FACTOR`` times its size, at most ``MAX_INPUT_COPIES`` sets). A
    boolean input (a mask) is the caller's own in every set (``tunesmith.bench.masks``)."""
    device = inputs[0].device if inputs else torch.device("cpu")
    if device.type != "cuda":
        return [tuple(inputs)]
    nbytes = sum(_span_bytes(t) for t in inputs if t.dtype != torch.bool) or 1
    copies = min(MAX_INPUT_COPIES, max(1, math.ceil(FLUSH_FACTOR * _l2_bytes(device) / nbytes)))

    def copy(index: int, meta: TensorMeta) -> torch.Tensor:
        given = inputs[index] if index < len(inputs) else None
        return given if given is not None and given.dtype == torch.bool else tensor_like(meta, device)

    return [tuple(inputs)] + [tuple(copy(i, meta) for i, meta in enumerate(problem.inputs)) for _ in range(copies - 1)]


def _event_ms(fn: Callable[[], Any]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _record(graph: torch.cuda.CUDAGraph, stream: torch.cuda.Stream, body: Callable[[], Any]) -> None:
    """Capture ``body`` into ``graph`` on ``stream``; only this thread's unsafe calls fail it, and
    the caller's stream is current again after, also when it fails (``torch.cuda.graph`` would
    also empty the allocator's cache and collect garbage, once per choice)."""
    with torch.cuda.stream(stream):
        stream.synchronize()
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            body()
        finally:
            graph.capture_end()


def capture_calls(calls: Sequence[Callable[[], Any]], count: int, device: torch.device) -> torch.cuda.CUDAGraph | None:
    """One CUDA graph of ``count`` calls, in turn, after a warm-up pass on its stream; None (logged)
    when they cannot be captured. The calls must launch on the current stream, as any kernel
    that runs inside a compiled model's CUDA graph must."""
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream(device)
    try:
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):  # libraries set up their per-stream state before the capture
            for call in calls:
                call()
        _record(graph, stream, lambda: [calls[i % len(calls)]() for i in range(count)])
        torch.cuda.current_stream(device).wait_stream(stream)
    except Exception as exc:  # noqa: BLE001 - such a kernel is timed without a graph
        log.debug("not timed in a CUDA graph: %s", exc)
        _end_capture_state(device)
        return None
    return graph


def _end_capture_state(device: torch.device) -> None:
    """After a failed capture, capture one trivial graph: torch leaves the CUDA random generator in
    its capture state when a capture fails, and only a capture that ends well takes it out."""
    try:
        torch.cuda.synchronize(device)
        scratch = torch.zeros(1, device=device)
        _record(torch.cuda.CUDAGraph(), torch.cuda.Stream(device), lambda: scratch.add_(1))
    except Exception as exc:  # noqa: BLE001 - the choice is timed without a graph all the same
        log.warning("a CUDA graph capture failed and could not be ended cleanly: %s", exc)


def time_in_graph(
    calls: Sequence[Callable[[], Any]], device: torch.device, warmup: int, repeat: int, give_up_ms: float | None = None
) -> Measurement | None:
    """Time one kernel's ``calls`` (the same kernel on different inputs) as a CUDA graph replays
    them: per call, from ``repeat`` replays of a graph of many calls (or the first
    ``PROBE_REPEATS`` when their median already exceeds ``give_up_ms``). None when the calls
    cannot be captured."""
    with torch.cuda.device(device):
        for _ in range(max(warmup, 1)):
            for call in calls:
                call()
        per_call = _event_ms(lambda: [call() for call in calls]) / len(calls)
        count = min(MAX_GRAPH_CALLS, max(1, math.ceil(GRAPH_TARGET_MS / max(per_call, 1e-6))))
        graph = capture_calls(calls, count, device)
        if graph is None:
            return None
        graph.replay()  # the first replay uploads the graph

        def sample(n: int) -> list[float]:
            return [ms / count for ms in _back_to_back(graph.replay, device, n, 2 * n * HOLD_PER_REPEAT_MS)]

        return _probed(sample, repeat, give_up_ms)


def give_up_after(best_ms: float | None) -> float | None:
    """The time past which a choice stops early, given the best so far."""
    return None if best_ms is None else best_ms * EARLY_STOP_FACTOR


def _strides(shape: Sequence[int], stride: Sequence[int]) -> tuple[int, ...]:
    """Strides that matter: none for an empty tensor, none of a dimension of size 1."""
    if 0 in shape:
        return ()
    return tuple(st if size > 1 else -1 for size, st in zip(shape, stride, strict=True))


def check_output(problem: Problem, out: Any, strides: bool = False) -> None:
    """Raise when a kernel's result is not a tensor of the Problem's output shape and dtype (and,
    with ``strides``, its layout and device type). Of a training step's results (the output and
    gradients) the output is checked; attention's output may take any layout (its consumers,
    traced with it, take what it gives)."""
    meta = problem.output
    if isinstance(out, tuple) and out:
        out = out[0]
    strides = strides and problem.op != "attention"
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


def synchronize(device: torch.device) -> None:
    """Wait for the device, so that an asynchronous kernel error surfaces here."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
