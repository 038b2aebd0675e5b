"""The plugin manager: loads the ``tunesmith`` entry points, registers plugins at run time.

Each entry point is loaded in its own try: a plugin that fails to import (or implements a hook
that does not exist, or clashes with another plugin's name) is recorded with its error and
skipped, and every other plugin still works. ``disabled_plugins`` from the config files and the
environment keeps a plugin from being imported at all; ``disabled_plugins`` set later (an
``options()`` block) keeps it from being called.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
import traceback
from collections.abc import Collection
from typing import Any

import attrs
import pluggy

import tunesmith_hookspecs
from tunesmith.config import OptionDef, OptionRegistry, core_option_defs, env_layer, file_layers, parse_value
from tunesmith.errors import OptionError
from tunesmith_hookspecs import hookspecs

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "tunesmith"
BUILTIN_NAME = "core"


@attrs.define
class PluginRecord:
    """What ``tunesmith plugins`` shows about one plugin."""

    name: str
    source: str  # "entry point", "register" or "builtin"
    dist: str | None = None
    version: str | None = None
    target: str | None = None  # the entry point's value, or the object's type
    plugin: Any = None
    error: str | None = None
    disabled: bool = False

    @property
    def loaded(self) -> bool:
        return self.plugin is not None


class PluginSystem:
    """A pluggy PluginManager with the tunesmith specs, plus what it knows about each plugin."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(tunesmith_hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self.option_defs: dict[str, OptionDef] = core_option_defs()
        self._lock = threading.RLock()

    # -- loading --

    def load_entry_points(self, disabled: tuple[str, ...], only: Collection[str] | None = None) -> None:
        """Load every installed plugin (or those named in ``only``), each in its own try."""
        by_name: dict[str, list[importlib.metadata.EntryPoint]] = {}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if only is None or ep.name in only:
                by_name.setdefault(ep.name, []).append(ep)
        for name, eps in sorted(by_name.items()):
            dists = sorted({_dist_name(ep) or "?" for ep in eps})
            record = PluginRecord(name, "entry point", _dist_name(eps[0]), _dist_version(eps[0]), eps[0].value)
            if name == BUILTIN_NAME:
                record.error = f"the name {name!r} is reserved for tunesmith's built-in plugin"
                self.records[f"{name} ({record.dist})"] = record
                log.error("tunesmith plugin %s of %s not loaded: %s", name, record.dist, record.error)
                continue
            self.records[name] = record
            if len(dists) > 1:
                record.error = f"entry point {name!r} is declared by several distributions: {', '.join(dists)}"
                log.error("tunesmith plugin %s not loaded: %s", name, record.error)
            elif name in disabled:
                record.disabled = True
            else:
                try:
                    module = eps[0].load()
                except Exception as exc:  # noqa: BLE001 - one broken plugin must not stop start-up
                    record.error = describe_error(exc)
                    log.warning("tunesmith plugin %s (%s) failed to import: %s", name, record.dist, record.error)
                else:
                    self._register(module, record)

    def register(self, plugin: Any, name: str | None = None, source: str = "register") -> str:
        """Register an object or module carrying hookimpls; returns its name. Errors raise here."""
        name = name or _default_name(plugin)
        with self._lock:
            existing = self.records.get(name)
            if existing is not None and existing.loaded:
                raise ValueError(f"a plugin named {name!r} is already registered ({existing.target})")
            record = PluginRecord(name, source, target=_target(plugin))
            self._register(plugin, record, raise_errors=True)
            self.records[name] = record
        return name

    def unregister(self, plugin: Any) -> None:
        """Remove a plugin registered at run time (by object or by name)."""
        with self._lock:
            record = next((r for r in self.records.values() if r.plugin is plugin or r.name == plugin), None)
            if record is None or not record.loaded:
                raise ValueError(f"{plugin!r} is not a registered tunesmith plugin")
            if record.source == "builtin":
                raise ValueError("the built-in plugin cannot be unregistered; register a plugin that overrides it")
            self.pm.unregister(record.plugin, name=record.name)
            self.option_defs = {k: d for k, d in self.option_defs.items() if d.owner != record.name}
            del self.records[record.name]

    def _register(self, plugin: Any, record: PluginRecord, raise_errors: bool = False) -> None:
        try:
            self.pm.register(plugin, name=record.name)
        except Exception as exc:
            record.error = describe_error(exc)
            if raise_errors:
                raise
            log.warning("tunesmith plugin %s rejected: %s", record.name, record.error)
            return
        unknown = [c.name for c in self.pm.get_hookcallers(plugin) or [] if not c.has_spec()]
        error: Exception | None = None
        if unknown:
            error = ValueError(f"implements unknown hook(s) {', '.join(unknown)} (a typo?)")
        else:
            try:
                self._add_options(plugin, record.name)
            except Exception as exc:  # noqa: BLE001 - a plugin's bad settings hook rejects only that plugin
                error = (
                    exc
                    if isinstance(exc, OptionError)
                    else ValueError(f"tunesmith_add_options raised {describe_error(exc)}")
                )
        if error is not None:
            self.pm.unregister(plugin, name=record.name)
            record.error = str(error)
            if raise_errors:
                raise error
            log.warning("tunesmith plugin %s rejected: %s", record.name, record.error)
            return
        record.plugin = plugin

    def impls_of(self, name: str, hook: str) -> list[pluggy.HookImpl]:
        """The implementations of ``hook`` by the plugin registered as ``name``."""
        return [impl for impl in getattr(self.pm.hook, hook).get_hookimpls() if impl.plugin_name == name]

    def _add_options(self, plugin: Any, name: str) -> None:
        defs = dict(self.option_defs)
        for impl in self.impls_of(name, "tunesmith_add_options"):
            call_impl(impl, options=OptionRegistry(defs, name))
        self.option_defs = defs


def call_impl(impl: pluggy.HookImpl, **kwargs: Any) -> Any:
    """Call one plugin's implementation, passing only the arguments it asks for."""
    return impl.function(*[kwargs[name] for name in impl.argnames])


def _dist_name(ep: importlib.metadata.EntryPoint) -> str | None:
    return ep.dist.name if ep.dist is not None else None


def _dist_version(ep: importlib.metadata.EntryPoint) -> str | None:
    return ep.dist.version if ep.dist is not None else None


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe_error(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _default_name(plugin: Any) -> str:
    name = getattr(plugin, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(plugin, "__name__", None) or type(plugin).__name__


def _target(plugin: Any) -> str:
    return getattr(plugin, "__name__", None) or f"{type(plugin).__module__}.{type(plugin).__qualname__}"


# --- the process-wide system, created on first use -------------------------------------------

_system: PluginSystem | None = None
_system_lock = threading.Lock()


def startup_disabled() -> tuple[str, ...]:
    """``disabled_plugins`` from the file and environment layers (read before plugins load)."""
    names: tuple[str, ...] = ()
    for source, layer in [*file_layers(), ("TUNESMITH_DISABLED_PLUGINS", env_layer())]:
        if "disabled_plugins" in layer:
            names = parse_value(core_option_defs(), "disabled_plugins", layer["disabled_plugins"], source)
    return names


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _new_system(only: Collection[str] | None) -> PluginSystem:
    from tunesmith import builtin

    system = PluginSystem()
    system.register(builtin, BUILTIN_NAME, source="builtin")
    system.records[BUILTIN_NAME].dist = "tunesmith"
    system.records[BUILTIN_NAME].version = _installed_version("tunesmith")
    if only is not None:
        system.load_entry_points(startup_disabled(), only=set(only))
    elif not _env_flag("TUNESMITH_DISABLE_PLUGIN_AUTOLOAD"):
        system.load_entry_points(startup_disabled())
    return system


def get_system() -> PluginSystem:
    """The plugin system, loading the built-in plugin and every entry point on first use."""
    global _system
    with _system_lock:
        if _system is None:
            _system = _new_system(None)
        return _system


def reload_plugins(only: Collection[str] | None = None) -> PluginSystem:
    """Forget every plugin and load them again (for tests, and after installing a plugin);
    with ``only``, load just the entry points of those names (the conformance suite's isolation)."""
    global _system
    with _system_lock:
        _system = _new_system(only)
        return _system
