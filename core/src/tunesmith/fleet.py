"""Split a cold tune across processes instead of waiting: of many Problems (a graph's GEMMs, a
problem set), each process tunes those no other process holds, and only then waits for the ones
others are tuning, taking over any whose holder died (its lock freed or expired).

The locks and the entries are the caches' own: a shared layer's (Redis, memcached, a
``torch.distributed`` store) or, on one host, file locks in the local cache folder
(``cache/flight.py``). Inside :func:`deferring`, a selection that finds its Problem held raises
``HeldElsewhere`` instead of waiting. A Problem put off is watched (:class:`Arrivals`): once its
holder publishes the entry, its winner is rebuilt and precompiled here on a background thread,
while this process tunes its own share, so that taking it at the end costs nothing; in the first
pass, one whose entry is there but whose winner is not built here yet is put off the same way. Counters:
``autotune_tuned`` (tuned here), ``autotune_deferred`` (found held, put off), ``autotune_taken``
(tuned by another process while this one held off), ``autotune_built_ahead`` (of those, rebuilt
here as their entries arrived), ``autotune_lock_waited`` (waited at the end).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import attrs

from tunesmith.cache.flight import MAX_POLL_S, HeldElsewhere
from tunesmith.cache.stack import CacheStack
from tunesmith.counting import bump

log = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")

_defer: contextvars.ContextVar[bool] = contextvars.ContextVar("tunesmith_defer", default=False)
#: a split's first pass: Problems are left to tune, so a winner not built here yet is put off too
_ahead: contextvars.ContextVar[bool] = contextvars.ContextVar("tunesmith_build_ahead", default=False)
#: the longest a selection here waits for another process's entry (None: ``cache_lock_wait_s``)
_patience: contextvars.ContextVar[float | None] = contextvars.ContextVar("tunesmith_patience", default=None)


def defers() -> bool:
    """Whether a selection here should put off a Problem another process holds."""
    return _defer.get()


def builds_ahead() -> bool:
    """Whether a selection here should also put off a Problem whose entry is found but whose winner
    is not built here yet (it is built on a thread meanwhile, :class:`Arrivals`)."""
    return _defer.get() and _ahead.get()


def patience(wait_s: float) -> float:
    """How long a selection here may wait for another process's entry, at most ``wait_s``."""
    limit = _patience.get()
    return wait_s if limit is None else min(wait_s, limit)


@contextlib.contextmanager
def deferring(on: bool = True, ahead: bool = False) -> Iterator[None]:
    """Within the block (this thread or task), selections put off held Problems (``on``), and
    with ``ahead`` those whose winner is still to be built here."""
    token, ahead_token = _defer.set(on), _ahead.set(ahead)
    try:
        yield
    finally:
        _ahead.reset(ahead_token)
        _defer.reset(token)


def run_split(
    indices: Iterable[int], run: Callable[[int], None], wait_s: float, stop: threading.Event | None = None
) -> None:
    """``run(i)`` for every index (``indices`` may be shared with other threads), first each with
    deferral (of a winner to build too: it is built on a thread meanwhile); those put off again in
    rounds, still deferring (one whose holder died is taken over, one published is read), the
    pause between rounds growing with their number; past ``wait_s`` in all, the rest are tuned
    here too, with a warning each. ``stop`` ends it between two runs."""
    held: list[int] = []
    for i in indices:
        if stop is not None and stop.is_set():
            return
        if not _try(run, i, ahead=True):
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


def _try(run: Callable[[int], None], i: int, ahead: bool = False) -> bool:
    """Run ``i`` deferring (``ahead``: a winner to build too); False where it was put off."""
    try:
        with deferring(ahead=ahead):
            run(i)
    except HeldElsewhere:
        return False
    return True


@attrs.define(eq=False)
class _Watch(Generic[T, R]):
    """One key put off here: where to look for its entry, and what to do with the entry found."""

    stack: CacheStack
    parse: Callable[[Any], T]
    build: Callable[[T], R]
    threads: int
    until: float
    context: contextvars.Context
    #: the entry found and its build (pending until a thread is free), once the entry arrived
    entry: T | None = None
    built: concurrent.futures.Future[R] | None = None


class Arrivals(Generic[T, R]):
    """Keys this process put off (another holds them): a daemon thread polls the caches for their
    entries and, as each arrives, runs ``build(entry)`` (rebuild and precompile the winner) on
    one of at most ``threads`` daemon threads, so that the rebuilds run beside this process's own
    tuning instead of one after another at its end; :meth:`claim` takes the build."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[str, _Watch[T, R]] = {}
        self._running = 0
        self._poller: threading.Thread | None = None

    def watch(
        self,
        key: str,
        stack: CacheStack,
        parse: Callable[[Any], T],
        build: Callable[[T], R],
        threads: int,
        wait_s: float,
        entry: T | None = None,
    ) -> None:
        """Look for ``key``'s entry (for ``wait_s`` at most), unless it is given (``entry``), and
        build it once found; a key watched already keeps its watch, but builds a given entry
        that differs from the one it found. ``build`` runs in a copy of this context."""
        context = contextvars.copy_context()
        with self._lock:
            watch = self._watched.setdefault(
                key, _Watch(stack, parse, build, max(threads, 1), time.monotonic() + wait_s, context)
            )
            if entry is not None and watch.entry != entry:
                watch.entry, watch.built = entry, None  # a build of the other one ends unused
            if self._poller is None or not self._poller.is_alive():
                self._poller = threading.Thread(target=self._poll, name="tunesmith-arrivals", daemon=True)
                self._poller.start()
        self._start_builds()

    def building(self, key: str) -> bool:
        """Whether an entry found for ``key`` is being built (or waits for a thread)."""
        with self._lock:
            watch = self._watched.get(key)
            return watch is not None and watch.entry is not None and not (watch.built and watch.built.done())

    def ready(self, key: str, entry: T) -> bool:
        """Whether the build of ``entry`` for ``key`` has ended (:meth:`claim` then returns it at once)."""
        with self._lock:
            watch = self._watched.get(key)
            return watch is not None and watch.entry == entry and watch.built is not None and watch.built.done()

    def claim(self, key: str, entry: T) -> concurrent.futures.Future[R] | None:
        """Stop watching ``key``; the build of ``entry`` begun for it (its ``result()`` waits for
        one still running), or None where none began (the caller builds it itself)."""
        with self._lock:
            watch = self._watched.pop(key, None)
        if watch is None or watch.built is None or watch.entry != entry:
            return None
        bump("autotune_built_ahead")
        return watch.built

    def forget(self, key: str) -> None:
        """Stop watching ``key`` (selected here by other means: tuned, or found at once); a build
        begun for it ends unused."""
        with self._lock:
            self._watched.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._watched.clear()

    def _poll(self) -> None:
        """Look for the watched entries, the pause between two looks growing (as ``run_split``'s),
        start the builds of those found while threads are free; end when nothing is watched."""
        pause = 0.02
        while True:
            with self._lock:
                now = time.monotonic()
                for key in [k for k, w in self._watched.items() if w.until < now]:
                    del self._watched[key]
                if not self._watched:
                    self._poller = None
                    return
                looking = [(k, w) for k, w in self._watched.items() if w.entry is None]
            for key, watch in looking:
                found = watch.stack.get(key, watch.parse, peek=True)
                if found is not None:
                    with self._lock:
                        watch.entry = watch.entry if watch.entry is not None else found[0]
            self._start_builds()
            time.sleep(pause)
            pause = min(pause * 1.5, MAX_POLL_S * max(1.0, len(looking) / 8))

    def _start_builds(self) -> None:
        """Start the builds of the entries found, while fewer than their ``threads`` run."""
        with self._lock:
            for key, watch in self._watched.items():
                if watch.entry is None or watch.built is not None or self._running >= watch.threads:
                    continue
                watch.built = concurrent.futures.Future()
                watch.built.set_running_or_notify_cancel()
                self._running += 1
                args = (watch.build, watch.entry, watch.built, watch.context.copy())
                threading.Thread(target=self._build, args=args, name=f"tunesmith-build-{key[:8]}", daemon=True).start()

    def _build(
        self, build: Callable[[T], R], entry: T, built: concurrent.futures.Future[R], context: contextvars.Context
    ) -> None:
        try:
            built.set_result(context.run(build, entry))
        except BaseException as exc:  # noqa: BLE001 - the claimant meets it where it takes the entry
            log.debug("building an entry that arrived failed: %s", exc)
            built.set_exception(exc)
        finally:
            with self._lock:
                self._running -= 1
            self._start_builds()
