"""The benchmark worker processes: one per device, started on first use and reused.

A worker for ``cuda:k`` sees only that GPU (``CUDA_VISIBLE_DEVICES``), loads the same entry-point
plugins as this process, and is replaced when it dies, hangs, or this process's plugins change.
Its stderr goes to a log file whose tail explains a crash.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

import torch

from tunesmith.plugins import get_system

log = logging.getLogger(__name__)


class WorkerDied(Exception):
    """The worker process exited; the message says how, with the end of its stderr."""


class WorkersStopped(KeyboardInterrupt):
    """The workers were stopped (Ctrl-C, SIGTERM: :func:`stop`): the benchmark waiting on one is
    abandoned, not retried; a KeyboardInterrupt, so that no ``except Exception`` takes it."""


def isolatable_plugins() -> list[str]:
    """The plugins a worker loads: those this process loaded from entry points (plugins added
    with ``tunesmith.register`` exist only here, so their choices are timed here)."""
    return sorted(r.name for r in get_system().records.values() if r.source == "entry point" and r.loaded)


def _visible_gpus() -> list[str]:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def _env(device: torch.device) -> dict[str, str]:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    # The worker finds what this process finds, plugins added to sys.path at run time included.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).exists())
    if device.type == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = _visible_gpus()[device.index or 0]
    return env


def signature(env: dict[str, str], plugins: list[str]) -> tuple[Any, ...]:
    """What a worker was started with: a worker whose signature differs from now is replaced."""
    return (tuple(plugins), tuple(sorted(env.items())))


class WorkerProcess:
    """One running worker, and a thread that turns its reply lines into a queue."""

    def __init__(self, device: torch.device, plugins: list[str]) -> None:
        env = _env(device)
        self.signature = signature(env, plugins)
        fd, log = tempfile.mkstemp(prefix="tunesmith-worker-", suffix=".log")
        os.close(fd)
        self.log = Path(log)
        with self.log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tunesmith.bench.worker", device.type, json.dumps(plugins)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env,
                text=True,
                start_new_session=True,  # kill() takes the worker's own children (compilers) too
            )
        self.ids = itertools.count()  # job ids, unique over the worker's life
        self.used = False  # whether a job was ever sent
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.requests: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()
        threading.Thread(target=self._write, args=(self.proc.stdin,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        with contextlib.suppress(OSError, ValueError):  # closed under us by kill()
            for line in stream:
                try:
                    self.replies.put(json.loads(line))
                except ValueError:
                    log.warning("benchmark worker %d wrote a line that is not JSON: %r", self.proc.pid, line[:200])
        self.replies.put(None)

    def _write(self, stream: IO[str]) -> None:
        # A thread of its own: a worker that never reads (stuck starting) cannot block the caller.
        while (line := self.requests.get()) is not None:
            try:
                stream.write(line)
                stream.flush()
            except (OSError, ValueError):
                return  # it died; receive() says how
        with contextlib.suppress(OSError, ValueError):
            stream.close()

    def send(self, job: dict[str, Any]) -> int:
        """Queue ``job`` for the worker under a new id; returns the id."""
        job_id = next(self.ids)
        self.used = True
        self.requests.put(json.dumps({**job, "job": job_id}) + "\n")
        return job_id

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next reply, or None after ``timeout`` seconds; WorkerDied when the process is gone."""
        try:
            reply = self.replies.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            _refuse_if_stopped()
            return None
        _refuse_if_stopped()  # a worker killed by stop(): its death is no crash to retry
        if reply is None:
            self.replies.put(None)  # every later receive() sees the death too
            raise WorkerDied(self.death())
        return reply

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def death(self) -> str:
        code = self.proc.wait()
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            what = f"the worker process died of {name}"
        else:
            what = f"the worker process exited with status {code}"
        tail = self.log.read_text(errors="replace").strip()[-1200:] if self.log.exists() else ""
        return what + (f"; its stderr ends:\n{tail}" if tail else "")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._cleanup()

    def close(self) -> None:
        """Ask the worker to finish (end of its input), then make sure it did; one that never had a
        job (started ahead, not needed) has nothing to finish and is stopped at once."""
        if not self.used:
            self.kill()
            return
        self.requests.put(None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.kill()

    def _cleanup(self) -> None:
        self.requests.put(None)
        if self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
        self.log.unlink(missing_ok=True)


class Slot:
    """The worker of one device. A caller holds ``lock`` while it benchmarks one Problem there."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.lock = threading.Lock()
        self.worker: WorkerProcess | None = None

    def worker_process(self, plugins: list[str]) -> WorkerProcess:
        """The running worker, or a new one when there is none, or when this process's
        plugins or environment changed since it started."""
        current = self.worker
        if current is not None and current.alive and current.signature == signature(_env(self.device), plugins):
            return current
        self.discard()
        with _spawning:  # stop() waits for a worker being started, and so sees it
            _refuse_if_stopped()
            self.worker = WorkerProcess(self.device, plugins)
        return self.worker

    def discard(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None


_slots: dict[str, Slot] = {}
_slots_lock = threading.Lock()
_stopped = threading.Event()
#: held while a worker process is started and given its slot
_spawning = threading.Lock()


def _refuse_if_stopped() -> None:
    """Raise WorkersStopped once :func:`stop` ran: no worker is waited on or started after it."""
    if _stopped.is_set():
        raise WorkersStopped("the benchmark workers were stopped")


def slot(device: torch.device) -> Slot:
    """The worker slot of ``device`` (``cuda`` means ``cuda:0``)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    with _slots_lock:
        return _slots.setdefault(str(device), Slot(device))


@atexit.register
def shutdown() -> None:
    """Stop every worker (at exit, and for tests)."""
    with _slots_lock:
        for s in _slots.values():
            if s.worker is not None:
                s.worker.close()
                s.worker = None


def stop() -> None:
    """Kill every worker now and start none again in this process (Ctrl-C, SIGTERM): unlike
    :func:`shutdown`, it waits for no job; a benchmark in flight ends with WorkersStopped."""
    with _spawning:  # a worker being started has its slot before the slots are read
        _stopped.set()
    with _slots_lock:
        workers = [s.worker for s in _slots.values() if s.worker is not None]
    for worker in workers:
        worker.kill()  # its group: the compile helpers too (they also die with it by PDEATHSIG)
