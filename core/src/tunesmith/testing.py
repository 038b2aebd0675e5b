"""Pytest fixtures for a tunesmith plugin's own tests: an isolated tunesmith per test, plugins
loaded or registered for one test only. Opt in (like ``pytester``) from the top conftest.py::

    pytest_plugins = ["tunesmith.testing"]

``tunesmith_isolated`` is autouse: once the kit is on, no test reads or writes the user's cache,
config files or ``TUNESMITH_*`` environment. See "Testing your plugin" in docs/plugin-guide.md.
"""

from __future__ import annotations

import importlib
import os
import sys
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

import tunesmith
from tunesmith import plugins

__all__ = ["PluginLoader", "tunesmith_isolated", "tunesmith_plugins", "tunesmith_register"]

#: the benchmark settings every test runs with (one warm-up, three timed runs: fast, still timed)
FAST_BENCH = {"TUNESMITH_BENCH_WARMUP": "1", "TUNESMITH_BENCH_REPEAT": "3"}


@pytest.fixture(autouse=True)
def tunesmith_isolated(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Per test: ``tmp_path/cache`` as cache_dir, ``tmp_path/config`` as the user's config folder,
    ``tmp_path/work`` as the working directory (no pyproject.toml above it), no ``TUNESMITH_*``
    variable but the fast benchmark settings, cleared in-memory state, and torch's generator seeded
    by the test's id (a failure reproduces). Yields ``tmp_path``."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    for key in list(os.environ):
        if key.startswith("TUNESMITH_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path / "cache"))
    for key, value in FAST_BENCH.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    tunesmith.reset()
    yield tmp_path
    tunesmith.reset()


@pytest.fixture
def tunesmith_register(tunesmith_isolated: Path) -> Iterator[Callable[..., str]]:
    """``tunesmith_register(obj, name=None)``: :func:`tunesmith.register` for this test only;
    returns the plugin's name. What is still registered at the end is unregistered."""
    registered: list[tuple[plugins.PluginSystem, str, object]] = []

    def register(plugin: object, name: str | None = None) -> str:
        system = plugins.get_system()
        registered.append((system, system.register(plugin, name), plugin))
        return registered[-1][1]

    yield register
    for system, name, plugin in reversed(registered):
        record = system.records.get(name)
        if record is not None and record.plugin is plugin:  # the test may have unregistered it
            system.unregister(name)
    tunesmith.reset()


class PluginLoader:
    """Loads tunesmith's plugins anew for one test, from the entry points of what is installed,
    optionally from extra folders; :meth:`restore` puts the plugin system of before back."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._called = False
        self._before: plugins.PluginSystem | None = None

    def __call__(self, *paths: str | os.PathLike[str], only: Collection[str] | None = None) -> plugins.PluginSystem:
        """Put ``paths`` (folders holding installed distributions, such as ``pip install --target``
        makes) first on sys.path, then load the plugins: all that autoload finds, or with ``only``
        the built-in plugin and the entry points of those names. Returns the new plugin system."""
        if not self._called:
            with plugins._system_lock:
                self._called, self._before = True, plugins._system
        for path in paths:
            self.paths.append(os.path.abspath(path))
            sys.path.insert(0, self.paths[-1])
        importlib.invalidate_caches()
        tunesmith.reset()
        return plugins.reload_plugins(only)

    def restore(self) -> None:
        """Take the folders off sys.path, forget the modules imported from them, and put the plugin
        system that was there before the first call back (a no-op when never called)."""
        for path in self.paths:
            if path in sys.path:
                sys.path.remove(path)
        if self.paths:
            roots = [Path(path) for path in self.paths]
            for name, module in list(sys.modules.items()):
                if any(_is_under(location, roots) for location in _locations(module)):
                    del sys.modules[name]
            importlib.invalidate_caches()
        if self._called:
            with plugins._system_lock:
                plugins._system = self._before
            tunesmith.reset()
        self.paths.clear()
        self._called, self._before = False, None


def _locations(module: ModuleType) -> list[str]:
    """The files and folders a module was loaded from (a namespace package has only folders)."""
    found = [getattr(module, "__file__", None)]
    search = getattr(module, "__path__", None)
    if isinstance(search, Iterable) and not isinstance(search, str):  # some entries are odd objects
        found.extend(search)
    return [location for location in found if isinstance(location, str)]


def _is_under(location: str, roots: list[Path]) -> bool:
    """Whether ``location`` is inside one of ``roots`` (module paths derive from the sys.path entry,
    so absolute paths compare without resolving links, which would cost a stat per component)."""
    path = Path(os.path.abspath(location))
    return any(path.is_relative_to(root) for root in roots)


@pytest.fixture
def tunesmith_plugins(tunesmith_isolated: Path) -> Iterator[PluginLoader]:
    """``tunesmith_plugins(*paths, only=None)``: load the plugins anew for this test (see
    :class:`PluginLoader`); after it, sys.path, the modules and the plugin system are as before."""
    loader = PluginLoader()
    try:
        yield loader
    finally:
        loader.restore()
