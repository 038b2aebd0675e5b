"""Real redis-server and memcached processes on loopback ports, for the remote-cache tests.

Both come from Debian's packages (``scripts/dev-install`` installs them as root on Debian or
Ubuntu, else says what to run). Each server gets a free port and keeps it across ``stop()`` and
``start()``, so a test can kill and restart it under a client. A missing program fails the test
at once with one line naming its package; a server that does not come up is killed, not left
behind, and ``running()`` lists every server started and not stopped, so that a fixture can stop
what a test left running.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

#: the servers started and not stopped yet
_RUNNING: set[Server] = set()


def running() -> set[Server]:
    """Every server started (by any test or helper) and not stopped since."""
    return set(_RUNNING)


def missing(program: str, package: str) -> str:
    """The one line that a test needing ``program`` fails with where it is not on PATH."""
    return (
        f"{program} is not installed (not on PATH): install the package {package} "
        f"(apt-get install -y {package}, which scripts/dev-install runs as root on Debian or Ubuntu)"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """One server process; ``url`` and ``setting`` say how tunesmith reaches it."""

    program = ""
    #: the Debian (and Ubuntu) package that installs ``program``
    package = ""
    setting = ""

    def __init__(self, workdir: Path) -> None:
        if shutil.which(self.program) is None:
            pytest.fail(missing(self.program, self.package), pytrace=False)
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def address(self) -> str:
        raise NotImplementedError

    def start(self) -> Server:
        """Start the server and wait until it takes connections; one that does not within 10 s
        is killed, and the error quotes its log."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"{self.program}.log"
        with log.open("ab") as out:  # the server has its own copy of the descriptor
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=out, cwd=self.workdir)
        _RUNNING.add(self)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        self.stop()
        said = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{self.program} did not start on port {self.port}: {' | '.join(said) or 'no output'}")

    def stop(self) -> None:
        """Kill the server at once (SIGKILL: no goodbye to the clients)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        _RUNNING.discard(self)


class Redis(Server):
    program = "redis-server"
    package = "redis-server"
    setting = "redis_url"

    def command(self) -> list[str]:
        return [
            self.program,
            "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--protected-mode", "no", "--dir", str(self.workdir),
        ]  # fmt: skip

    @property
    def address(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


class Memcached(Server):
    program = "memcached"
    package = "memcached"
    setting = "memcache_servers"

    def command(self) -> list[str]:
        user = ["-u", getpass.getuser()] if os.geteuid() == 0 else []  # memcached will not run as root unasked
        return [self.program, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "256", *user]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


KINDS = {"redis": Redis, "memcache": Memcached}


def layer_name(server: Server) -> str:
    """The name of the tunesmith cache layer that reaches ``server``."""
    return next(name for name, kind in KINDS.items() if isinstance(server, kind))
