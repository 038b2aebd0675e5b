"""Tuning in the background (``tuning="background"``, the default for compiled models).

A compiled graph runs at once with the kernels already known and ATen's elsewhere; each Problem
nobody has tuned yet is a :class:`Job` for the one tuner thread of the process. The tuner
precompiles a Problem's choices whenever it likes (in the benchmark worker: CPU work), but it
touches the GPU (times choices, loads and checks the winner) only inside a *gap*: a window that a
compiled model opens at a step boundary (:func:`gap_at_boundary`), after synchronising its
device, for at most ``tuning_gap_s``, and that :func:`wait` opens for as long as it waits. So its
timings are taken on an idle GPU, as blocking tuning's are, and nothing is timed or allocated
while the model's step (or a CUDA graph's capture) is running. What a job finds is stored in every
cache layer as blocking tuning stores it, and handed to whoever queued it (a compiled graph, which
swaps its winners in at its next step boundary: ``compile/swap.py``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch

from tunesmith.capture import capturing
from tunesmith.config import Options
from tunesmith.counting import bump, counters
from tunesmith.errors import TunesmithWarning
from tunesmith.problem import tensor_like
from tunesmith_hookspecs import ChoiceSpec, Problem

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class Job:
    """One Problem to tune in the background, and what to call with its winner (None: it failed)."""

    problem: Problem
    options: Options
    device: torch.device
    done: Callable[[ChoiceSpec | None], None]
    state: str = "pending"  # pending, running, done, failed


@attrs.frozen
class Status:
    """What background tuning is doing (``tunesmith.status()``): Problems pending, running, tuned
    and failed, and compiled graphs waiting for their winners or swapped."""

    pending: int
    running: int
    done: int
    failed: int
    graphs_waiting: int
    graphs_swapped: int

    @property
    def idle(self) -> bool:
        return self.pending == 0 and self.running == 0 and self.graphs_waiting == 0


class Tuner:
    """The process's background tuner: a queue of jobs, one thread, and the gaps it times in."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._here: collections.deque[Job] = collections.deque()  # CPU jobs: tuned by the gap's opener
        self._jobs: list[Job] = []
        self._thread: threading.Thread | None = None
        self._local = threading.local()
        self._open = 0  # openers of the gap (a step boundary, or wait())
        self._wanting = 0  # tuner threads waiting for a gap
        self._inside = 0  # tuner threads inside one
        self.graphs: list[Any] = []  # compile/swap.py's records, for status() and wait()

    # -- the tuner thread --

    def submit(self, job: Job) -> None:
        """Queue ``job``; it waits for :meth:`start` (a graph's second call, or ``wait()``), so that
        tuning takes no time from the compile and the first step."""
        with self._cond:
            (self._here if job.device.type == "cpu" else self._queue).append(job)
            self._jobs.append(job)
            self._cond.notify_all()
        bump("background_queued")

    def start(self) -> None:
        """Start the tuner thread, where jobs are queued and it is not running."""
        with self._cond:
            if self._queue and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="tunesmith-tuner", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                job = self._queue.popleft()
                job.state = "running"
            self._finish(job, self.gap)

    def _run_here(self, deadline: float | None) -> None:
        """Tune the CPU jobs on this thread, the gap's opener, until ``deadline`` (a job begun is
        finished): torch's CPU ops on a second thread give the process a second OpenMP team,
        after which libgomp, counting more threads than cores, stops spinning between parallel
        regions, and the model's small CPU kernels ran 2x to 40x slower for the rest of the run."""
        while True:
            with self._cond:
                if not self._here or (deadline is not None and time.monotonic() >= deadline):
                    return
                job = self._here.popleft()
                job.state = "running"
            self._finish(job, contextlib.nullcontext)

    def _finish(self, job: Job, gap: Callable[[], contextlib.AbstractContextManager[None]]) -> None:
        """Tune ``job`` (its GPU work inside ``gap``), hand its winner over and mark it done."""
        spec = None
        try:
            spec = self._tune(job, gap)
        except Exception:  # the thread serves every later job too
            log.exception("tunesmith: background tuning of a problem failed")
        finally:
            job.done(spec)  # first: once the job reads done, its graph knows the winner
            with self._cond:
                job.state = "done" if spec is not None else "failed"
                self._cond.notify_all()

    def _tune(self, job: Job, gap: Callable[[], contextlib.AbstractContextManager[None]]) -> ChoiceSpec | None:
        from tunesmith.selection import describe, select

        crashes = counters["benchmark_crash"]
        try:
            with gap():
                inputs = [tensor_like(meta, job.device) for meta in job.problem.inputs]
                with torch.no_grad():
                    selection = select(job.problem, inputs, job.options)
                if job.device.type == "cuda":
                    torch.cuda.synchronize(job.device)
        except Exception as exc:  # noqa: BLE001 - the graph keeps the kernel it runs
            bump("background_failed")
            _warn(
                f"tunesmith: background tuning of {describe(job.problem)} failed ({type(exc).__name__}: {exc}); "
                "it keeps running ATen's kernel"
            )
            return None
        bump("background_tuned")
        if counters["benchmark_crash"] > crashes:
            _warn(
                f"tunesmith: a choice crashed the benchmark worker while {describe(job.problem)} was tuned in the "
                f"background; {selection.spec} runs"
            )
        return selection.spec

    # -- gaps: when the tuner may use the GPU --

    @contextlib.contextmanager
    def gap(self) -> Iterator[None]:
        """Held by the tuner while it uses the GPU: entered only while a gap is open."""
        self._enter()
        self._local.inside = True
        try:
            yield
        finally:
            self._local.inside = False
            self._leave()

    @contextlib.contextmanager
    def outside_gap(self) -> Iterator[None]:
        """Around work that needs no GPU (precompiles in the worker): the gap is given back
        meanwhile, and entered again after. Does nothing on other threads."""
        if not getattr(self._local, "inside", False):
            yield
            return
        self._leave()
        try:
            yield
        finally:
            self._enter()

    def _enter(self) -> None:
        with self._cond:
            self._wanting += 1
            try:
                while not self._open:
                    self._cond.wait()
            finally:
                self._wanting -= 1
            self._inside += 1

    def _leave(self) -> None:
        with self._cond:
            self._inside -= 1
            self._cond.notify_all()

    def open_gap(self, seconds: float | None, devices: list[torch.device], until_idle: bool = False) -> None:
        """Let the tuner use the idle GPU: synchronise ``devices``, open the gap until the tuner
        neither waits for it nor is inside (``until_idle``: nor has a job left), or until ``seconds``
        have passed (None: no limit), then wait for the tuner to finish what it is timing."""
        for device in devices:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        deadline = None if seconds is None else time.monotonic() + seconds
        self._run_here(deadline)
        with self._cond:
            self._open += 1
            self._cond.notify_all()
            try:
                while self._wanting or self._inside or (until_idle and self._busy()):
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._cond.wait(0.05 if left is None else min(left, 0.05))
            finally:
                self._open -= 1
                while self._inside and not self._open:
                    self._cond.wait()
        bump("background_gap")

    def _busy(self) -> bool:
        return bool(self._queue) or any(j.state == "running" for j in self._jobs)

    def wants_gap(self) -> bool:
        """Whether the tuner waits for the GPU, or CPU jobs wait for a gap's opener (read without the
        lock: a hint for the fast path)."""
        return self._wanting > 0 or bool(self._here)

    def status(self) -> Status:
        with self._cond:
            states = collections.Counter(j.state for j in self._jobs)
            waiting = sum(1 for g in self.graphs if g.waiting())
            swapped = sum(1 for g in self.graphs if g.swapped)
        return Status(states["pending"], states["running"], states["done"], states["failed"], waiting, swapped)

    def clear(self) -> None:
        """Forget finished jobs and graphs (``tunesmith.reset()``); jobs in flight go on."""
        with self._cond:
            self._jobs = [j for j in self._jobs if j.state in ("pending", "running")]
            self.graphs.clear()


tuner = Tuner()


def _warn(message: str) -> None:
    """A warning from the tuner thread, logged instead where the filters turn it into an error."""
    try:
        warnings.warn(message, TunesmithWarning, stacklevel=1)
    except Exception:  # noqa: BLE001 - raising here would only end the thread
        log.warning("%s", message)


def gap_at_boundary(options: Options, devices: list[torch.device]) -> None:
    """A compiled graph's step boundary: where the tuner waits for the GPU, let it time there for up
    to ``tuning_gap_s`` (never while a CUDA graph is captured)."""
    if tuner.wants_gap() and not capturing():
        tuner.open_gap(options.tuning_gap_s, devices)


def wait(timeout: float | None = None) -> bool:
    """Block until every Problem queued for background tuning is tuned and every compiled graph
    waiting for its winners has them in use; True when all is done, False at ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    devices = _devices()
    tuner.start()
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        state = tuner.status()
        if state.pending or state.running:
            tuner.open_gap(left, devices, until_idle=True)
            continue
        for graph in list(tuner.graphs):
            graph.swap_now()
        if tuner.status().idle:
            return True


def status() -> Status:
    """What background tuning is doing now."""
    return tuner.status()


def _devices() -> list[torch.device]:
    if not torch.cuda.is_available():
        return []
    return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
