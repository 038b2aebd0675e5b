"""The plugin under test: loaded alone (with the aten reference), and what kinds of plugin it is."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import attrs

from tunesmith import hooks
from tunesmith.plugins import (
    BUILTIN_NAME,
    ENTRY_POINT_GROUP,
    PluginRecord,
    PluginSystem,
    call_impl,
    describe_error,
    get_system,
    reload_plugins,
)
from tunesmith.settings import current_options
from tunesmith_hookspecs import CacheLayer, PluginStatus

REFERENCE = "aten"
PASS_HOOKS = {
    "tunesmith_pre_grad_passes": (None,),
    "tunesmith_joint_graph_passes": ("pre", "post"),
    "tunesmith_post_grad_passes": ("pre", "post"),
}
KIND_HOOKS = {
    "backend": ("tunesmith_choices",),
    "cache layer": hooks.CACHE_LAYER_HOOKS,
    "graph pass": tuple(PASS_HOOKS),
    "lowering": ("tunesmith_lowerings",),
}


def load_only(name: str, reference: bool = True) -> PluginSystem:
    """Load the plugin ``name`` and (with ``reference``) the aten reference, and no other installed plugin."""
    return reload_plugins(only={name, REFERENCE} if reference else {name})


@attrs.define
class Target:
    """The plugin under test, with the hooks it implements and what it says about itself."""

    name: str
    record: PluginRecord
    hooks: frozenset[str]
    status: PluginStatus
    device: str

    @classmethod
    def load(cls, name: str, device: str, reference: bool = True) -> Target:
        """``name`` loaded alone; without ``reference`` (a cache layer's writer processes) no aten either."""
        system = load_only(name, reference)
        record = system.records.get(name)
        if record is None:
            installed = sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})
            raise LookupError(
                f"no tunesmith plugin named {name!r} is installed (entry points: {', '.join(installed) or 'none'}; "
                f"'{BUILTIN_NAME}' checks the built-in plugin)"
            )
        implemented = (
            frozenset(c.name for c in system.pm.get_hookcallers(record.plugin) or []) if record.loaded else frozenset()
        )
        return cls(name, record, implemented, hooks.plugin_status(name), device)

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, names in KIND_HOOKS.items() if self.hooks & set(names)]

    def describe(self) -> str:
        dist = f"{self.record.dist} {self.record.version}" if self.record.dist else self.record.source
        state = "runs here" if self.status.runnable else f"cannot run here: {self.status.reason}"
        return f"plugin {self.name!r} ({dist}), kinds: {', '.join(self.kinds) or 'none'}, {state}, device {self.device}"

    def _impls(self, hook: str) -> list[Any]:
        return get_system().impls_of(self.name, hook)

    def cache_layers(self, overrides: dict[str, Any] | None = None) -> list[CacheLayer]:
        """The layers this plugin offers under the current settings (with ``overrides`` on top).
        Raises :class:`PluginFault` when its hook raises or returns something else."""
        options = current_options(overrides)
        layers: list[CacheLayer] = []
        for hook in hooks.CACHE_LAYER_HOOKS:
            for impl in self._impls(hook):
                try:
                    layers += hooks.validate_layers(self.name, call_impl(impl, options=options), hook)
                except Exception as exc:
                    raise PluginFault(f"{hook} raised {describe_error(exc)}") from exc
        return layers

    def passes(self) -> list[tuple[str, Any]]:
        """(where, pass) for every graph pass this plugin returns, at every stage.
        Raises :class:`PluginFault` when a pass hook raises."""
        found = []
        for hook, stages in PASS_HOOKS.items():
            for impl in self._impls(hook):
                for stage in stages:
                    where = f"{hook}({stage or ''})"
                    try:
                        result = call_impl(impl, stage=stage) if stage else call_impl(impl)
                    except Exception as exc:
                        raise PluginFault(f"{where} raised {describe_error(exc)}") from exc
                    found += [(where, p) for p in result or []]
        return found


class PluginFault(Exception):
    """A hook of the plugin under test raised or returned the wrong kind of thing."""
