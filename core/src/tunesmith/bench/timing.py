"""Timing one callable: warm-up, then the median of repeats, with the spread as the noise.

On a GPU each repeat is timed with CUDA events, every repeat enqueued back to back behind a short
spin kernel and one sync at the end, so that the GPU never waits for Python to launch the next
call (a small kernel would otherwise be timed with that gap); the L2 cache is flushed before each
repeat so that a small problem does not run from a cache the real program would have evicted.
A choice whose first repeats are already far slower than the best so far is not timed further:
it cannot win.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from tunesmith_hookspecs import Problem

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

_flush_buffers: dict[torch.device, torch.Tensor] = {}
_sleep_rates: dict[torch.device, float] = {}


@attrs.frozen
class Measurement:
    """The median milliseconds of ``samples`` repeats, and their relative interquartile spread."""

    ms: float
    noise: float
    samples: int


def _flush_buffer(device: torch.device) -> torch.Tensor:
    buf = _flush_buffers.get(device)
    if buf is None:
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or _FALLBACK_L2_BYTES
        buf = _flush_buffers[device] = torch.empty(FLUSH_FACTOR * l2 // 4, dtype=torch.int32, device=device)
    return buf


def _cycles_per_ms(device: torch.device) -> float:
    """The rate of ``torch.cuda._sleep``'s spin loop on ``device``, measured once."""
    if device not in _sleep_rates:
        cycles, best = 2_000_000, math.inf
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end))
        _sleep_rates[device] = cycles / best
    return _sleep_rates[device]


def _hold(device: torch.device, ms: float) -> None:
    """Keep the GPU busy for ``ms`` while this thread enqueues work behind it, so that the timed
    kernels run back to back instead of waiting for Python to launch each one."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(min(ms, MAX_HOLD_MS) * _cycles_per_ms(device)))


def _cuda_samples(fn: Callable[[], Any], device: torch.device, repeat: int, launch_ms: float) -> list[float]:
    with torch.cuda.device(device):
        flush = _flush_buffer(device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
        torch.cuda.synchronize()
        _hold(device, 2 * repeat * (launch_ms + HOLD_PER_REPEAT_MS))
        for start, end in events:
            flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


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

    samples = sample(min(PROBE_REPEATS, repeat))
    if repeat > len(samples) and (give_up_ms is None or statistics.median(samples) <= give_up_ms):
        samples += sample(repeat - len(samples))
    return Measurement(statistics.median(samples), noise(samples), len(samples))


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


def synchronize(device: torch.device) -> None:
    """Wait for the device, so that an asynchronous kernel error surfaces here."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
