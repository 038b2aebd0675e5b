"""Split a cold tune across processes instead of waiting: of many Problems (a graph's GEMMs, a
problem set), each process tunes those no other process holds, and only then waits for the ones
others are tuning, taking over any whose holder died (its lock freed or expired).

The locks and the entries are the caches' own: a shared layer's (Redis, memcached, a
``torch.distributed`` store) or, on one host, file locks in the local cache folder
(``cache/flight.py``). Inside :func:`deferring`, a selection that finds its Problem held raises
``HeldElsewhere`` instead of waiting. Counters: ``autotune_tuned`` (tuned here),
``autotune_deferred`` (found held, put off), ``autotune_taken`` (tuned by another process while
this one held off), ``autotune_lock_waited`` (waited at the end).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from tunesmith.cache.flight import MAX_POLL_S, HeldElsewhere

R = TypeVar("R")
T = TypeVar("T")

_defer: contextvars.ContextVar[bool] = contextvars.ContextVar("tunesmith_defer", default=False)
#: the longest a selection here waits for another process's entry (None: ``cache_lock_wait_s``)
_patience: contextvars.ContextVar[float | None] = contextvars.ContextVar("tunesmith_patience", default=None)


def defers() -> bool:
    """Whether a selection here should put off a Problem another process holds."""
    return _defer.get()


def patience(wait_s: float) -> float:
    """How long a selection here may wait for another process's entry, at most ``wait_s``."""
    limit = _patience.get()
    return wait_s if limit is None else min(wait_s, limit)


@contextlib.contextmanager
def deferring(on: bool = True) -> Iterator[None]:
    """Within the block (this thread or task), selections put off held Problems (``on``)."""
    token = _defer.set(on)
    try:
        yield
    finally:
        _defer.reset(token)


def run_split(
    indices: Iterable[int], run: Callable[[int], None], wait_s: float, stop: threading.Event | None = None
) -> None:
    """``run(i)`` for every index (``indices`` may be shared with other threads), first each with
    deferral; those held elsewhere again in rounds, still deferring (one whose holder died is
    taken over, one published is read), the pause between rounds growing with their number; past
    ``wait_s`` in all, the rest are tuned here too, with a warning each. ``stop`` ends it between
    two runs."""
    held: list[int] = []
    for i in indices:
        if stop is not None and stop.is_set():
            return
        if not _try(run, i):
            held.append(i)
    deadline, pause = time.monotonic() + wait_s, 0.02
    while held and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        time.sleep(pause)
        pause = min(pause * 1.5, MAX_POLL_S * max(1.0, len(held) / 8))  # many held: poll less
        held = [i for i in held if not _try(run, i)]
    patience_token = _patience.set(0.0)  # waited long enough: no second wait per problem
    try:
        for i in held:
            if stop is not None and stop.is_set():
                return
            with deferring(False):
                run(i)
    finally:
        _patience.reset(patience_token)


def select_each(items: Sequence[T], select_one: Callable[[T], R], wait_s: float) -> list[R]:
    """``select_one(item)`` for every item, split with other processes (:func:`run_split`); the
    ranks of a ``torch.distributed`` job each start at their own share of the items."""
    done: dict[int, R] = {}

    def run(i: int) -> None:
        done[i] = select_one(items[i])

    count = len(items)
    start = _rank_start(count)
    run_split([(start + i) % count for i in range(count)], run, wait_s)
    return [done[i] for i in range(count)]


def _rank_start(count: int) -> int:
    """Where this rank of a ``torch.distributed`` job of several starts walking ``count`` items
    (rank r of w: r * count // w), so that the ranks begin on different Problems; 0 outside one."""
    import sys

    dist = sys.modules.get("torch.distributed")  # imported by the job already, if there is one
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 0
    world = dist.get_world_size()
    return dist.get_rank() * count // world if world > 1 else 0


def _try(run: Callable[[int], None], i: int) -> bool:
    """Run ``i`` deferring; False where its Problem is held elsewhere."""
    try:
        with deferring():
            run(i)
    except HeldElsewhere:
        return False
    return True
