"""Benchmarking in a worker process, so that a kernel that crashes or hangs costs only its own time.

The choices of one Problem are precompiled in parallel in the device's worker, then timed there one
at a time. When the worker dies (a segfault, an abort, an illegal memory access) or a job runs past
``bench_timeout_s``, the job it was running gets an infinite time, ``benchmark_crash`` is counted,
a fresh worker is started and the run goes on. When several precompiles were running at once, each
is retried alone, so that only the guilty one is blamed. A backend that crashes workers
``BACKEND_CRASH_LIMIT`` times in one run has its remaining choices skipped.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from tunesmith.background import tuner
from tunesmith.bench import pool
from tunesmith.bench.inprocess import BUDGET_EXHAUSTED, out_of_budget
from tunesmith.bench.timing import give_up_after
from tunesmith.config import Options, to_payload
from tunesmith.counting import bump
from tunesmith_hookspecs import ChoiceSpec, Problem, Timing, unstructure

log = logging.getLogger(__name__)

BACKEND_CRASH_LIMIT = 3
#: worker deaths that no job can be blamed for before the run gives up
UNBLAMED_CRASH_LIMIT = 2
#: the least time a new worker gets to start (import torch, load plugins, set up the Problem)
STARTUP_TIMEOUT_S = 120.0


class SetupFailed(Exception):
    """A fresh worker could not start or set up the Problem."""


@attrs.define
class Outcome:
    """What one batch of jobs came to."""

    results: dict[int, dict[str, Any]] = attrs.Factory(dict)
    blamed: dict[int, str] = attrs.Factory(dict)  # choice -> why it killed the worker
    suspects: list[int] = attrs.Factory(list)  # running together when the worker died
    requeue: list[int] = attrs.Factory(list)  # not started, or stopped with the worker through no fault
    unblamed: str | None = None  # the worker died with nothing running


class IsolatedRun:
    """One Problem's choices, precompiled and timed in the worker of one device."""

    def __init__(
        self,
        slot: pool.Slot,
        problem: Problem,
        specs: Sequence[ChoiceSpec],
        options: Options,
        start: float,
        bool_inputs: dict[str, str] | None = None,
    ):
        self.slot = slot
        self.problem = problem
        self.bool_inputs = bool_inputs or {}
        self.specs = list(specs)
        self.options = options
        self.start = start
        self.plugins = pool.isolatable_plugins()
        self.worker: pool.WorkerProcess | None = None
        self.missing: dict[int, str] = {}
        self.backend_crashes: collections.Counter[str] = collections.Counter()
        self.unblamed = 0

    # -- the worker --

    def _ready_worker(self) -> pool.WorkerProcess:
        """The worker, set up for this Problem (a new one after a crash)."""
        if self.worker is not None and self.worker.alive:
            return self.worker
        began = time.monotonic()
        worker = self.slot.worker_process(self.plugins)
        setup = {
            "kind": "setup",
            "problem": unstructure(self.problem),
            "specs": [unstructure(s) for s in self.specs],
            "options": to_payload(self.options),
            # the caller's TF32 permissions: they decide which kernels a float32 problem may use
            "fp32_precision": torch.get_float32_matmul_precision(),
            "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            # the caller's masks (tunesmith.bench.masks): a kernel's time may depend on them
            "bool_inputs": self.bool_inputs,
        }
        outcome = self._jobs(worker, [("setup", -1, setup)], max(self.options.bench_timeout_s, STARTUP_TIMEOUT_S))
        reply = outcome.results.get(-1)
        if reply is None or "error" in reply:
            self.slot.discard()
            why = (reply or {}).get("error") or next(iter(outcome.blamed.values()), None) or outcome.unblamed
            raise SetupFailed(f"the benchmark worker could not set up the problem: {why}")
        self.missing = {int(i): why for i, why in reply["missing"].items()}
        self.worker = worker
        self.start += time.monotonic() - began  # starting a worker does not count against the budget
        return worker

    def _jobs(self, worker: pool.WorkerProcess, jobs: list[tuple[str, int, dict[str, Any]]], limit: float) -> Outcome:
        """Send ``jobs`` (kind, choice, fields) and collect their results, or how the worker died."""
        sent = {worker.send({"kind": kind, "index": index, **fields}): (kind, index) for kind, index, fields in jobs}
        by_id = {job: index for job, (_, index) in sent.items()}
        started: dict[int, float] = {}
        out = Outcome()
        finished: set[int] = set()
        while len(finished) < len(by_id):
            running = [j for j in started if j not in finished]
            now = time.monotonic()
            wait = min(started[j] for j in running) + limit - now if running else limit
            try:
                reply = worker.receive(wait)
            except pool.WorkerDied as died:
                return self._lost(out, by_id, running, finished, str(died))
            if reply is None:  # the oldest running job is past the limit (or nothing started at all)
                worker.kill()
                if len(running) == 1:
                    bump("benchmark_timeout")
                why = f"timed out: still running after {limit:g} s, the worker was killed"
                # Several running at once: any of them may have held up the rest, so each runs alone.
                return self._lost(out, by_id, running, finished, why)
            job = reply.get("job")
            if job not in by_id:
                continue
            if reply.get("started"):
                started[job] = time.monotonic()
                continue
            finished.add(job)
            if reply.get("fatal"):  # the worker exits; a job running beside it may have caused it
                worker.kill()
                finished.discard(job)
                return self._lost(out, by_id, running, finished, "crashed the GPU context: " + reply["result"]["error"])
            out.results[by_id[job]] = reply["result"]
            self._log_job(*sent[job], time.monotonic() - started.get(job, now), reply["result"])
        return out

    def _log_job(self, kind: str, index: int, seconds: float, result: dict[str, Any]) -> None:
        """One finished job at debug level: what it was, and where its time went."""
        if log.isEnabledFor(logging.DEBUG):
            parts = ", ".join(f"{k} {v:.3f}" for k, v in result.items() if k.endswith("_s") or k == "ms")
            what = self.specs[index] if index >= 0 else "the problem"
            log.debug("%s of %s: %.3f s in the worker (%s)", kind, what, seconds, parts)

    def _lost(self, out: Outcome, by_id: dict[int, int], running: list[int], finished: set[int], why: str) -> Outcome:
        """Sort the unfinished jobs of a dead worker into blamed, suspects and requeue."""
        if len(running) == 1:
            out.blamed[by_id[running[0]]] = why
        elif running:
            out.suspects = [by_id[j] for j in running]
        else:
            out.unblamed = why
        out.requeue += [by_id[j] for j in by_id if j not in finished and j not in running]
        return out

    def _settle(self, outcome: Outcome, errors: dict[int, str | None], stage: str) -> None:
        """Record the choices blamed for a worker's death, and count it."""
        if outcome.blamed or outcome.suspects or outcome.unblamed:
            bump("benchmark_crash")
            self.worker = None
        for i, why in outcome.blamed.items():
            self.backend_crashes[self.specs[i].backend] += 1
            errors[i] = f"{stage}: {why}"
        if outcome.unblamed:
            self.unblamed += 1

    def _skip(self, i: int) -> str | None:
        """Why choice ``i`` is not run at all, or None."""
        if i in self.missing:
            return self.missing[i]
        backend = self.specs[i].backend
        if self.backend_crashes[backend] >= BACKEND_CRASH_LIMIT:
            return f"not run: backend {backend!r} crashed {BACKEND_CRASH_LIMIT} benchmark workers for this problem"
        if self.unblamed >= UNBLAMED_CRASH_LIMIT:
            return f"not run: the benchmark worker died {UNBLAMED_CRASH_LIMIT} times between jobs"
        return None

    # -- the stages --

    def precompile(self) -> dict[int, str | None]:
        """Precompile every choice, ``compile_threads`` at a time; the error of each, or None."""
        errors: dict[int, str | None] = {}
        todo, suspects = list(range(len(self.specs))), []
        while todo or suspects:
            batch, todo = (todo, []) if todo else ([suspects.pop(0)], todo)
            worker = self._ready_worker()
            for i in batch:
                if (why := self._skip(i)) is not None:
                    errors[i] = why
            batch = [i for i in batch if i not in errors]
            left = None if self.options.budget_s is None else self.options.budget_s - (time.monotonic() - self.start)
            # The first choice (aten's, by default) is never cut by the budget: something must win.
            jobs = [("precompile", i, {"budget_left_s": left if i else None}) for i in batch]
            outcome = self._jobs(worker, jobs, self.options.bench_timeout_s)
            for i, result in outcome.results.items():
                if not result.get("skipped"):
                    bump("precompile")
                    if result["error"] is not None:
                        bump("choice_failed")
                errors[i] = result["error"]
            self._settle(outcome, errors, "precompile")
            suspects += outcome.suspects
            todo += outcome.requeue
        return errors

    def time(self, i: int, best_ms: float | None) -> Timing:
        """Time choice ``i`` (retried once on a fresh worker if the worker died between jobs)."""
        for _ in range(UNBLAMED_CRASH_LIMIT):
            errors: dict[int, str | None] = {}
            if (why := self._skip(i)) is not None:
                return Timing(self.specs[i], math.inf, why)
            job = [("time", i, {"give_up_ms": give_up_after(best_ms)})]
            outcome = self._jobs(self._ready_worker(), job, self.options.bench_timeout_s)
            self._settle(outcome, errors, "run")
            if i in errors:
                return Timing(self.specs[i], math.inf, errors[i])
            if i in outcome.results:
                result = outcome.results[i]
                if "error" in result:
                    bump("choice_failed")
                    return Timing(self.specs[i], math.inf, "run: " + result["error"])
                return Timing(self.specs[i], result["ms"], noise=result["noise"])
        return Timing(self.specs[i], math.inf, "not run: the benchmark worker kept dying")


def time_isolated(
    problem: Problem,
    specs: Sequence[ChoiceSpec],
    options: Options,
    device: torch.device,
    start: float,
    beside: Callable[[], Callable[[], None]] = lambda: lambda: None,
    bool_inputs: dict[str, str] | None = None,
) -> tuple[list[Timing], float]:
    """Precompile and time ``specs`` in ``device``'s worker: one Timing each, in order, and the
    budget's start moved past any worker start-up (for the choices timed after these).
    ``bool_inputs`` are the caller's masks (``tunesmith.bench.masks.payload``), which the worker
    uses instead of random ones.
    ``beside`` starts the caller's own work once the device is this run's, to run beside the
    precompiles; the wait it returns is called before the first timing."""
    slot = pool.slot(device)
    with slot.lock:
        run = IsolatedRun(slot, problem, specs, options, start, bool_inputs)
        try:
            return _precompile_and_time(run, specs, options, beside()), run.start
        except BaseException:
            slot.discard()  # interrupted mid-job: its late replies must not reach the next run
            raise


def _precompile_and_time(
    run: IsolatedRun, specs: Sequence[ChoiceSpec], options: Options, wait: Callable[[], None]
) -> list[Timing]:
    try:
        with tuner.outside_gap():  # background tuning: compiling needs no GPU, so the model may run
            errors = run.precompile()
    except SetupFailed as exc:
        bump("benchmark_crash")
        return [Timing(s, math.inf, str(exc)) for s in specs]
    finally:
        began = time.monotonic()
        wait()
        run.start += time.monotonic() - began  # the caller's work is not the budget's
    timings: list[Timing] = []
    best: float | None = None
    broken: str | None = None
    for i, spec in enumerate(specs):
        if broken is not None or errors.get(i) is not None:
            timings.append(Timing(spec, math.inf, broken or errors[i]))
            continue
        if out_of_budget(options, run.start) and best is not None:
            timings.append(Timing(spec, math.inf, BUDGET_EXHAUSTED))
            continue
        try:
            timing = run.time(i, best)
        except SetupFailed as exc:  # no worker will start: the rest cannot be timed either
            bump("benchmark_crash")
            broken = str(exc)
            timing = Timing(spec, math.inf, broken)
        timings.append(timing)
        if timing.ok:
            best = timing.ms if best is None else min(best, timing.ms)
    return timings
