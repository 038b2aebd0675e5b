"""``scripts/install-servers`` (the last step of ``scripts/dev-install``): the servers that the
remote-cache tests start are installed where missing, as root on Debian or Ubuntu, and otherwise
one line says the command to run. Run with a PATH of stand-ins (``id``, ``apt-get``, the servers)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

SCRIPT = REPO / "scripts" / "install-servers"
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n'
FEDORA = 'NAME="Fedora Linux"\nID=fedora\n'


def run(tmp_path: Path, os_release: str, uid: int, present: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The script's output and the apt-get calls it made, with ``present`` servers on PATH."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "apt-get.calls"
    bin_dir.mkdir()
    stand_ins = {"id": f"echo {uid}", "apt-get": f'echo "$*" >> {calls}', "uname": "echo Linux"}
    stand_ins |= {program: "exit 0" for program in present}
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "os-release").write_text(os_release)
    env = {"PATH": str(bin_dir), "INSTALL_SERVERS_OS_RELEASE": str(tmp_path / "os-release")}
    bash = shutil.which("bash")
    proc = subprocess.run([bash, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc.stdout, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("os_release", [DEBIAN, UBUNTU])
def test_as_root_on_debian_or_ubuntu_the_missing_servers_are_installed_with_apt_get(tmp_path, os_release):
    out, calls = run(tmp_path, os_release, uid=0)
    assert calls == ["update -qq", "install -y -qq redis-server memcached"]
    assert out.splitlines() == [
        "install-servers: installing redis-server memcached with apt-get: the remote-cache tests need "
        "redis-server memcached"
    ]


def test_only_the_missing_one_is_installed(tmp_path):
    _, calls = run(tmp_path, DEBIAN, uid=0, present=("redis-server",))
    assert calls == ["update -qq", "install -y -qq memcached"]


def test_without_root_one_line_says_the_command_and_nothing_is_installed(tmp_path):
    out, calls = run(tmp_path, DEBIAN, uid=1000)
    assert calls == []
    assert out.splitlines() == [
        "install-servers: the remote-cache tests need redis-server memcached; "
        "run: sudo apt-get install -y redis-server memcached"
    ]


def test_on_another_system_the_line_names_its_package_manager(tmp_path):
    out, calls = run(tmp_path, FEDORA, uid=0, present=("memcached",))
    assert calls == [] and out.splitlines() == [
        "install-servers: the remote-cache tests need redis-server; run: sudo dnf install -y redis"
    ]


def test_with_both_servers_there_it_does_nothing(tmp_path):
    assert run(tmp_path, DEBIAN, uid=0, present=("redis-server", "memcached")) == ("", [])


# --- the suite's time limit per test ------------------------------------------------------------

HANGS = """
import fcntl, pathlib

def test_waits_on_a_lock_it_holds(tmp_path):
    held = (tmp_path / "turn.lock").open("w")
    fcntl.flock(held, fcntl.LOCK_EX)
    fcntl.flock((tmp_path / "turn.lock").open("w"), fcntl.LOCK_EX)  # what the fleet tests did

def test_the_next_one_runs():
    pass
"""


def test_a_test_that_hangs_fails_with_its_stack_and_the_run_goes_on(tmp_path, pytestconfig):
    assert float(pytestconfig.getini("timeout")) >= 60  # pyproject.toml sets the suite's limit
    (tmp_path / "test_hangs.py").write_text(HANGS)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "timeout=2", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-3000:]
    assert "Timeout (>2.0s)" in proc.stdout and "fcntl.flock" in proc.stdout  # where it hung
