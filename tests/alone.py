"""Turns across a test session's pytest-xdist workers: a test whose times are held to a bar (a
fleet's share of one process's time) runs alone, and the others run side by side.

On CI's two cores, shared with three workers, a fleet of four processes measured against one
process alone lost the bar by other tests' load, not by its own work. Every test takes a shared
turn; a test marked ``alone`` (and the yardsticks it is compared with) takes the whole session.
Two ``flock``ed files make it writer-first: whoever waits for the whole session holds the gate,
so that no test starts while it waits for the running ones to end. The marked tests are collected
last (``conftest.py``), so that the workers wait for one only at the session's end, not while a
long test of another worker runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

#: the marker of a test that runs while no other test of the session runs
MARKER = "alone"


def session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test session that every pytest-xdist worker shares."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def turn(folder: Path, whole: bool) -> Iterator[None]:
    """A turn in the session of ``folder``: shared with the other tests, or (``whole``) alone."""
    with (folder / "turn-gate.lock").open("w") as gate, (folder / "turn.lock").open("w") as running:
        fcntl.flock(gate, fcntl.LOCK_EX)  # a whole turn waiting here keeps new tests out
        if whole:
            fcntl.flock(running, fcntl.LOCK_EX)
        else:
            fcntl.flock(running, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
