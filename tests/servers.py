"""Real redis-server and memcached processes on loopback ports, for the remote-cache tests.

Both come from Debian's packages (``.ci/run`` installs them). Each server gets a free port and
keeps it across ``stop()`` and ``start()``, so a test can kill and restart it under a client.
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """One server process; ``url`` and ``setting`` say how tunesmith reaches it."""

    program = ""
    setting = ""

    def __init__(self, workdir: Path) -> None:
        if shutil.which(self.program) is None:
            raise RuntimeError(
                f"{self.program} is not installed: apt-get install -y redis-server memcached (what .ci/run does)"
            )
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def address(self) -> str:
        raise NotImplementedError

    def start(self) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / f"{self.program}.log", "ab")  # noqa: SIM115 - the server owns it
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log, cwd=self.workdir)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        raise RuntimeError(f"{self.program} did not start on port {self.port}: see {self.workdir}")

    def stop(self) -> None:
        """Kill the server at once (SIGKILL: no goodbye to the clients)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


class Redis(Server):
    program = "redis-server"
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
