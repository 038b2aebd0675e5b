"""Ctrl-C and SIGTERM for the command: one line printed, exit 130 or 143. Only the standard library
here, so that the handlers are up before rich, torch and the core are imported."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any

#: the signals the command handles
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM in the main thread: the command stops and exits 128 + ``signum``;
    ``done`` says what was finished (for the one line printed)."""

    def __init__(self, signum: int = signal.SIGINT, done: str = "") -> None:
        super().__init__(signum, done)
        self.signum, self.done = signum, done


def _line(signum: int, done: str = "") -> str:
    """The one line an interrupted command prints."""
    what = "interrupted" if signum == signal.SIGINT else "terminated"
    return f"{what}: {done}\n" if done else f"{what}\n"


def _ignore_signals() -> None:
    """A second Ctrl-C must not cut the exit short."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def _exit_now(signum: int, frame: Any) -> None:
    """While the command loads: nothing to clean up yet, and an exception raised inside an import
    can be lost in the C code running it (torch's ``_C`` importing numpy), so leave at once."""
    _ignore_signals()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the main thread may be writing to it
            stream.flush()
    os.write(2, _line(signum).encode())
    os._exit(128 + signum)


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def catch_signals(previous: dict[int, Any]) -> None:
    """From now on SIGINT and SIGTERM end the process at once, with one line (the command is loading;
    SIGTERM would otherwise kill it silently); ``previous`` gets each handler replaced, for
    :func:`restore_signals`. Elsewhere than the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNALS:
        previous[s] = signal.signal(s, _exit_now)


def raise_on_signals() -> None:
    """From now on (the command loaded) SIGINT and SIGTERM raise Interrupted in the main thread, so
    that the command stops its work cleanly; only where :func:`catch_signals` set the handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNALS:
        if signal.getsignal(s) is _exit_now:
            signal.signal(s, _raise_interrupted)


def restore_signals(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`catch_signals` replaced."""
    for s, handler in previous.items():
        signal.signal(s, handler)


def signum_of(exc: BaseException) -> int:
    """The signal behind an interrupt: Interrupted's own, else SIGINT (Python's KeyboardInterrupt)."""
    return exc.signum if isinstance(exc, Interrupted) else signal.SIGINT


def stop_workers() -> None:
    """Kill the benchmark workers at once (if any was ever started), so that no orphan outlives us."""
    pool = sys.modules.get("tunesmith.bench.pool")
    if pool is not None:
        pool.stop()


def interrupted(exc: KeyboardInterrupt) -> int:
    """Stop the workers, print one line, and give the exit status of a signal: 130 or 143."""
    signum = signum_of(exc)
    _ignore_signals()
    stop_workers()
    sys.stderr.write(_line(signum, exc.done if isinstance(exc, Interrupted) else ""))
    code = 128 + signum
    if threading.active_count() > 1:
        # A thread abandoned in native code can abort the interpreter's teardown ("terminate
        # called without an active exception"): the entries are on disk, so leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
