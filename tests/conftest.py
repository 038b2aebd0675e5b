"""Shared fixtures: every test runs with its own cache folder, config folder, working directory
and a clean TUNESMITH_* environment (tunesmith.testing, the kit plugin authors use too); fixture
plugins are installed for real into temp folders."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import alone
import pytest
import servers
import torch
from servers import KINDS, Server, layer_name

import tunesmith
from tunesmith import ops, plugins
from tunesmith_hookspecs import ChoiceSpec

if TYPE_CHECKING:  # imported by pytest as a plugin below, before its first use (assert rewriting)
    from tunesmith.testing import PluginLoader

pytest_plugins = ["tunesmith.testing"]

TESTS = Path(__file__).parent
REPO = TESTS.parent
FIXTURE_PLUGINS = TESTS / "fixture_plugins"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a process per core and one more, at most 4 (many tests wait on processes,
    servers or sleeping backends, and a core would sit idle; each test may start servers, workers
    and compilers of its own). See docs/decisions.md."""
    return max(1, min(4, (os.cpu_count() or 1) + 1))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{alone.MARKER}: runs while no other test of the session runs (tests/alone.py)")
    # One compute thread a process (unless set), here and in every worker and subprocess the tests
    # start: their tensors are small, and on 2 cores shared by several processes torch's idle
    # threads spin (the suite took 517 s with torch's default, 395 s with one; docs/decisions.md)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that run alone go last: the workers then wait for one only at the session's end."""
    items.sort(key=lambda item: item.get_closest_marker(alone.MARKER) is not None)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def turn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test runs in a turn: shared, or alone where it is marked so (tests/alone.py)."""
    whole = request.node.get_closest_marker(alone.MARKER) is not None
    with alone.turn(alone.session_folder(tmp_path_factory), whole):
        yield


@pytest.fixture(autouse=True)
def no_server_outlives_its_test() -> Iterator[None]:
    """Stops every server that the test (or a helper that failed halfway) started and left running."""
    before = servers.running()
    yield
    for server in servers.running() - before:
        server.stop()


@pytest.fixture(autouse=True)
def blocking_tuning(tunesmith_isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled models tune every kernel before their first step here (``tuning="blocking"``), so
    that a test sees after one call what the compile tuned; the tests of background tuning, the
    default, lift it (tests/test_background.py). Subprocesses inherit it (``run_env``)."""
    monkeypatch.setenv("TUNESMITH_TUNING", "blocking")


@pytest.fixture
def isolated(tunesmith_isolated: Path) -> Path:
    """The test's folder (cache/, config/, work/): ``tunesmith_isolated`` of tunesmith.testing, which
    isolates every test (autouse) and seeds torch by the test's id."""
    return tunesmith_isolated


def run_env(**extra: str) -> dict[str, str]:
    """The environment of the test (isolated above) for a subprocess, plus ``extra``."""
    return {**os.environ, **extra}


def run_interpreted(script: str) -> dict:
    """Run ``script`` in a subprocess with Triton's interpreter on (the flag is read when kernels
    are defined); the JSON object of its last output line."""
    proc = subprocess.run(
        [sys.executable, "-c", script], env=run_env(TRITON_INTERPRET="1"), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def fixture_sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each fixture plugin installed with pip into a folder of its own, once per test run: the
    first pytest-xdist worker to ask installs them (pip builds in the plugin's source folder, so
    one at a time), the others find them; tests only read these folders."""
    shared = alone.session_folder(tmp_path_factory)
    sites = {}
    with (shared / "fixture-plugins.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for name in ("ext", "broken", "raising", "bad", "bench"):
            site, done = shared / f"fixture-site-{name}", shared / f"fixture-site-{name}.done"
            if not done.exists():
                shutil.rmtree(site, ignore_errors=True)
                _pip_install(FIXTURE_PLUGINS / name, site)
                done.touch()
            sites[name] = site
    return sites


def _pip_install(source: Path, target: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture
def install(fixture_sites: dict[str, Path], tunesmith_plugins: PluginLoader) -> Callable[..., plugins.PluginSystem]:
    """``install("ext", "broken")``: those installed fixture plugins on sys.path, plugins reloaded
    (until the end of the test)."""
    return lambda *names: tunesmith_plugins(*(fixture_sites[name] for name in names))


@pytest.fixture
def register(tunesmith_register: Callable[..., str]) -> Callable[..., str]:
    """``register(obj, name=None)``: a run-time plugin, unregistered after the test."""
    return tunesmith_register


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random normal values (never zeros) of ``shape``."""
    return torch.randn(*shape).to(dtype)


class Mine:
    """A run-time backend whose one choice is torch's ops under another name: a winner that is
    not ATen's plain op, so that its calls stay tunesmith calls (``backends=["mine"]``)."""

    name = "mine"

    @tunesmith.hookimpl
    def tunesmith_choices(self, problem, options):
        return [MineChoice(problem)]


class MineChoice:
    def __init__(self, problem):
        self.spec, self.problem = ChoiceSpec("mine", "ops"), problem

    def precompile(self):
        pass

    def kernel(self):
        return lambda *tensors: ops.run(self.problem, tensors)


@pytest.fixture(params=sorted(KINDS))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """A fresh Redis or memcached server (one test each), stopped after the test."""
    srv = KINDS[request.param](tmp_path / "server").start()
    yield srv
    srv.stop()


@pytest.fixture
def remote(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The server configured through the environment, as the only persistent layer."""
    monkeypatch.setenv(f"TUNESMITH_{server.setting.upper()}", server.address)
    monkeypatch.setenv("TUNESMITH_CACHES", layer_name(server))
    return server
