"""Shared fixtures: every test runs with its own cache folder, config folder, working directory
and a clean TUNESMITH_* environment; fixture plugins are installed for real into temp folders."""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from servers import KINDS, Server, layer_name

import tunesmith
from tunesmith import ops, plugins
from tunesmith_hookspecs import ChoiceSpec

TESTS = Path(__file__).parent
REPO = TESTS.parent
FIXTURE_PLUGINS = TESTS / "fixture_plugins"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a process per core, at most 4 (each test may start servers, workers and compilers)."""
    return max(1, min(4, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def isolated(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private cache dir, config dir and cwd; fast benchmark settings; a clean tunesmith state;
    random inputs seeded by the test's id, so that a failure can be reproduced."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    for key in list(os.environ):
        if key.startswith("TUNESMITH_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNESMITH_BENCH_WARMUP", "1")
    monkeypatch.setenv("TUNESMITH_BENCH_REPEAT", "3")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    tunesmith.reset()
    yield tmp_path
    tunesmith.reset()


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
    """Each fixture plugin installed with pip into a folder of its own (built once per session;
    one pytest-xdist worker at a time, as pip builds in the plugin's source folder)."""
    sites = {}
    lock = tmp_path_factory.getbasetemp().parent / "fixture-plugins.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for name in ("ext", "broken", "raising", "bad", "bench"):
            sites[name] = _pip_install(FIXTURE_PLUGINS / name, tmp_path_factory.mktemp(f"site-{name}"))
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
def install(fixture_sites: dict[str, Path]) -> Iterator[Callable[..., plugins.PluginSystem]]:
    """``install("ext", "broken")``: put those installed fixture plugins on sys.path and reload plugins."""
    added: list[str] = []

    def _install(*names: str) -> plugins.PluginSystem:
        for name in names:
            path = str(fixture_sites[name])
            sys.path.insert(0, path)
            added.append(path)
        importlib.invalidate_caches()
        return plugins.reload_plugins()

    try:
        yield _install
    finally:
        for path in added:
            sys.path.remove(path)
        for module in [m for m in sys.modules if m.startswith("tunesmith_fixture_")]:
            del sys.modules[module]
        importlib.invalidate_caches()
        with pytest.MonkeyPatch.context() as mp:  # the test's own env changes are undone after this
            for name in ("TUNESMITH_DISABLE_PLUGIN_AUTOLOAD", "TUNESMITH_DISABLED_PLUGINS"):
                mp.delenv(name, raising=False)
            plugins.reload_plugins()


@pytest.fixture
def register() -> Iterator[Callable[..., str]]:
    """``register(obj, name=None)``: a run-time plugin, unregistered after the test."""
    names: list[str] = []

    def _register(plugin: object, name: str | None = None) -> str:
        names.append(tunesmith.register(plugin, name))
        return names[-1]

    yield _register
    for name in names:
        tunesmith.unregister(name)


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
