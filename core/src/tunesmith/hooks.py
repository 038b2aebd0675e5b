"""The one place the core calls plugin hooks: a typed function per hook, validating what returns.

A plugin whose hook returns something that is not a choice (or not a cache layer) gets one
error in the log naming the plugin, and only that plugin's results are dropped. Plugins in the
current ``disabled_plugins`` are never called.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pluggy

from tunesmith.config import Options, overriding, to_payload
from tunesmith.errors import TunesmithError
from tunesmith.plugins import PluginSystem, call_impl, describe_error, get_system
from tunesmith.settings import current_options
from tunesmith_hookspecs import (
    Benchmarker,
    CacheLayer,
    Choice,
    ChoiceSpec,
    DeviceInfo,
    PluginStatus,
    Problem,
    SelectionReport,
)

log = logging.getLogger(__name__)

BASELINE_BACKEND = "aten"
_status_cache: dict[str, PluginStatus] = {}
_warned_layers: set[str] = set()

#: the hook that offers cache layers, then its deprecated former name (still called the same way)
CACHE_LAYER_HOOKS = ("tunesmith_cache_layers", "tunesmith_cache_backends")


class PluginOutputError(TunesmithError, TypeError):
    """A hook returned something of the wrong kind; the message names the plugin."""


class PluginConflictError(TunesmithError, ValueError):
    """Two plugins claim one name; the message names both and where each comes from."""


def _impls(system: PluginSystem, hook: str, options: Options) -> Iterator[pluggy.HookImpl]:
    """The implementations of ``hook`` in pluggy's call order, disabled plugins left out."""
    caller: pluggy.HookCaller = getattr(system.pm.hook, hook)
    for impl in reversed(caller.get_hookimpls()):
        if impl.plugin_name not in options.disabled_plugins:
            yield impl


def _subset(system: PluginSystem, hook: str, options: Options) -> pluggy.HookCaller:
    disabled = [r.plugin for r in system.records.values() if r.loaded and r.name in options.disabled_plugins]
    return system.pm.subset_hook_caller(hook, disabled) if disabled else getattr(system.pm.hook, hook)


def _sequence(plugin: str, hook: str, result: Any) -> list[Any]:
    """A hook's result as a list (None is empty); anything but an iterable of items is an error."""
    if result is None:
        return []
    if isinstance(result, str | bytes | Mapping) or not isinstance(result, Iterable):
        raise PluginOutputError(f"plugin {plugin!r}: {hook} returned {type(result).__name__}, not a list")
    return list(result)


def validate_choices(plugin: str, result: Any) -> list[Choice]:
    """The choices of one plugin, or PluginOutputError naming it and the bad item."""
    items = _sequence(plugin, "tunesmith_choices", result)
    for i, item in enumerate(items):
        spec = getattr(item, "spec", None)
        if not isinstance(item, Choice) or not isinstance(spec, ChoiceSpec):
            raise PluginOutputError(
                f"plugin {plugin!r}: tunesmith_choices item {i} is {item!r}, not a choice "
                "(needs spec: ChoiceSpec, precompile() and kernel())"
            )
        if spec.backend != plugin:
            raise PluginOutputError(
                f"plugin {plugin!r}: choice {spec} names backend {spec.backend!r}; "
                f"a ChoiceSpec's backend must be the plugin's name {plugin!r}"
            )
    return items


def plugin_status(name: str, options: Options | None = None) -> PluginStatus:
    """Whether plugin ``name`` can run here (remembered per process unless it depends on the
    settings; ``tunesmith.reset()`` forgets it)."""
    if name in _status_cache:
        return _status_cache[name]
    system = get_system()
    record = system.records.get(name)
    status, remember = PluginStatus(True), True
    if record is None:
        status = PluginStatus(False, "not installed")
    elif record.disabled:
        status = PluginStatus(False, "disabled by the disabled_plugins setting")
    elif not record.loaded:
        status = PluginStatus(False, f"failed to load: {record.error}")
    else:
        for impl in system.impls_of(name, "tunesmith_plugin_status"):
            remember = remember and "options" not in impl.argnames
            try:
                answer = call_impl(impl, options=options if options is not None else current_options())
            except Exception as exc:  # noqa: BLE001 - reported as "cannot run here"
                answer = PluginStatus(False, f"tunesmith_plugin_status raised {describe_error(exc)}")
            if answer is not None and not isinstance(answer, PluginStatus):
                answer = PluginStatus(False, f"tunesmith_plugin_status returned {answer!r}, not a PluginStatus")
            status = answer or status
    if remember:
        _status_cache[name] = status
    return status


def backend_names(options: Options) -> list[str]:
    """The enabled backends in order: ``backends``, or aten then every other backend by name."""
    if options.backends is not None:
        return list(options.backends)
    system = get_system()
    offered = sorted({impl.plugin_name for impl in _impls(system, "tunesmith_choices", options)})
    return sorted(offered, key=lambda name: name != BASELINE_BACKEND)


def choices(problem: Problem, options: Options) -> tuple[list[Choice], dict[str, str]]:
    """Every enabled backend's choices in ``backends`` order, and why each empty backend gave none."""
    system = get_system()
    impls = {impl.plugin_name: impl for impl in _impls(system, "tunesmith_choices", options)}
    found: list[Choice] = []
    reasons: dict[str, str] = {}
    for name in backend_names(options):
        if name in options.disabled_plugins:
            reasons[name] = "disabled by the disabled_plugins setting"
            continue
        status = plugin_status(name, options)
        if not status.runnable:
            reasons[name] = f"cannot run here: {status.reason}"
            continue
        impl = impls.get(name)
        if impl is None:
            reasons[name] = "is not a backend (it implements no tunesmith_choices)"
            continue
        offered, why = offered_by(impl, problem, options)
        if not offered:
            reasons[name] = why or "offered no choices for this problem"
        found.extend(offered)
    return found, reasons


def offered_by(impl: pluggy.HookImpl, problem: Problem, options: Options) -> tuple[list[Choice], str | None]:
    """One backend's validated choices and None, or no choices and the error (logged, naming the plugin)."""
    try:
        return validate_choices(impl.plugin_name, call_impl(impl, problem=problem, options=options)), None
    except PluginOutputError as exc:
        log.error("%s", exc)
        return [], str(exc)
    except Exception as exc:
        log.exception("tunesmith_choices of plugin %r raised", impl.plugin_name)
        return [], f"tunesmith_choices raised {describe_error(exc)}"


def rebuild_choice(spec: ChoiceSpec, problem: Problem, options: Options) -> Choice | None:
    """A runnable choice for a cached spec: the rebuild hook, else enumerate-and-match."""
    return rebuild_choices([spec], problem, options)[0]


def rebuild_choices(specs: Sequence[ChoiceSpec], problem: Problem, options: Options) -> list[Choice | None]:
    """Runnable choices for ``specs`` (None where no plugin rebuilds one): each through the rebuild
    hook, the rest by enumerating each backend's choices once and matching."""
    system = get_system()
    found: list[Choice | None] = [None] * len(specs)
    backends = {s.backend for s in specs}
    usable = {b for b in backends if b not in options.disabled_plugins and plugin_status(b, options).runnable}
    rebuilders = list(_impls(system, "tunesmith_rebuild_choice", options))
    # the hook takes no settings: a plugin reads them with current_options(), which must be these
    # (a tune's own options, or a benchmark worker's from its parent), not this thread's
    with overriding(to_payload(options)):
        for i, spec in enumerate(specs):
            if spec.backend in usable:
                found[i] = _rebuilt(rebuilders, spec, problem)
    left = {specs[i].backend for i, c in enumerate(found) if c is None and specs[i].backend in usable}
    for impl in _impls(system, "tunesmith_choices", options):
        if impl.plugin_name in left:
            offered = {c.spec: c for c in offered_by(impl, problem, options)[0]}
            for i, spec in enumerate(specs):
                if found[i] is None and spec.backend == impl.plugin_name:
                    found[i] = offered.get(spec)
    return found


def _rebuilt(rebuilders: Sequence[pluggy.HookImpl], spec: ChoiceSpec, problem: Problem) -> Choice | None:
    for impl in rebuilders:
        try:
            choice = call_impl(impl, spec=spec, problem=problem)
        except Exception:
            log.exception("tunesmith_rebuild_choice of plugin %r raised", impl.plugin_name)
            continue
        if choice is None:
            continue
        if isinstance(choice, Choice) and getattr(choice, "spec", None) == spec:
            return choice
        log.error(
            "plugin %r: tunesmith_rebuild_choice(%s) returned %r, not a choice with that spec",
            impl.plugin_name,
            spec,
            choice,
        )
    return None


def validate_layers(plugin: str, result: Any, hook: str = "tunesmith_cache_layers") -> list[CacheLayer]:
    """The cache layers of one plugin, or PluginOutputError naming it and the bad item."""
    items = _sequence(plugin, hook, result)
    names: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, CacheLayer) or not isinstance(getattr(item, "name", None), str):
            raise PluginOutputError(
                f"plugin {plugin!r}: {hook} item {i} is {item!r}, not a cache layer "
                "(needs name: str, get(key) and put(key, value))"
            )
        if item.name in names:
            raise PluginOutputError(f"plugin {plugin!r}: {hook} offers two layers named {item.name!r}")
        names.add(item.name)
    return items


def _origin(system: PluginSystem, plugin: str) -> str:
    """Where a plugin comes from, for an error: its distribution and version, else how it was added."""
    record = system.records.get(plugin)
    if record is None:
        return "unknown origin"
    if record.dist:
        return f"{record.dist} {record.version or '(no version)'}"
    return "registered at run time" if record.source == "register" else record.source


def cache_layers(options: Options) -> list[CacheLayer]:
    """The persistent cache layers in ``caches`` order (default: ``local``, then plugins' by name).

    A layer name offered by two plugins raises :class:`PluginConflictError` naming both."""
    system = get_system()
    offered: dict[str, tuple[str, CacheLayer]] = {}
    for hook in CACHE_LAYER_HOOKS:
        for impl in _impls(system, hook, options):
            try:
                layers = validate_layers(impl.plugin_name, call_impl(impl, options=options), hook)
            except PluginOutputError as exc:
                log.error("%s", exc)
                continue
            except Exception:
                log.exception("%s of plugin %r raised; its layers are left out", hook, impl.plugin_name)
                continue
            for layer in layers:
                if layer.name in offered:
                    first = offered[layer.name][0]
                    raise PluginConflictError(
                        f"cache layer {layer.name!r} is offered by plugin {first!r} ({_origin(system, first)}) "
                        f"and by plugin {impl.plugin_name!r} ({_origin(system, impl.plugin_name)}); "
                        "leave one of them out with the disabled_plugins setting"
                    )
                offered[layer.name] = (impl.plugin_name, layer)
    if options.caches is None:
        names = sorted(offered, key=lambda n: (n != "local", n))
    else:
        names = list(options.caches)
        for missing in [n for n in names if n not in offered and n not in _warned_layers]:
            _warned_layers.add(missing)
            log.warning("cache layer %r is not offered by any plugin under the current settings", missing)
    return [offered[n][1] for n in names if n in offered]


def benchmarker(options: Options) -> Benchmarker:
    result = _subset(get_system(), "tunesmith_benchmarker", options)(options=options)
    if not isinstance(result, Benchmarker):
        raise PluginOutputError(
            f"no benchmarker: tunesmith_benchmarker gave {result!r}, not an object with benchmark() "
            "(is the built-in plugin 'core' in disabled_plugins?)"
        )
    return result


def device_info(device: Any, options: Options) -> DeviceInfo | None:
    """The profile of ``device`` (a torch.device or a preset name) from the first plugin that knows
    it; the core answers last (calibration, then presets). None: no profile, so no cost model."""
    result = _subset(get_system(), "tunesmith_device_info", options)(device=device)
    if result is not None and not isinstance(result, DeviceInfo):
        raise PluginOutputError(f"tunesmith_device_info gave {result!r}, not a DeviceInfo")
    return result


def estimate_runtime(node: Any, device: DeviceInfo, options: Options) -> float | None:
    """The first plugin's estimate for ``node`` (an fx Node or a choice) in ms, or None. A plugin
    whose estimate raises or is not a non-negative number is logged and skipped: a cost model
    orders work, it must not stop it."""
    for impl in _impls(get_system(), "tunesmith_estimate_runtime", options):
        try:
            result = call_impl(impl, node=node, device=device)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("tunesmith_estimate_runtime of plugin %r raised %s", impl.plugin_name, describe_error(exc))
            continue
        if result is None:
            continue
        if isinstance(result, bool) or not isinstance(result, int | float) or not result >= 0:
            log.warning("tunesmith_estimate_runtime of plugin %r gave %r, not milliseconds", impl.plugin_name, result)
            continue
        return float(result)
    return None


def selection_done(report: SelectionReport, options: Options) -> None:
    """Tell every observer; an observer that raises is logged and does not fail the selection."""
    for impl in _impls(get_system(), "tunesmith_selection_done", options):
        try:
            call_impl(impl, report=report)
        except Exception:
            log.exception("tunesmith_selection_done of plugin %r raised", impl.plugin_name)


def _collected(hook: str, options: Options, **kwargs: Any) -> list[tuple[str, Any]]:
    """(plugin, item) for every item of a sequence hook, in pluggy's call order. A plugin whose
    hook raises or returns no sequence fails the compile, naming it: a pass left out silently
    would change results."""
    found = []
    for impl in _impls(get_system(), hook, options):
        try:
            result = call_impl(impl, **kwargs)
        except Exception as exc:
            raise PluginOutputError(f"{hook} of plugin {impl.plugin_name!r} raised {describe_error(exc)}") from exc
        found.extend((impl.plugin_name, item) for item in _sequence(impl.plugin_name, hook, result))
    return found


def graph_passes(hook: str, options: Options, stage: str | None = None) -> list[Any]:
    """The passes of one of the pass hooks (``tunesmith_pre_grad_passes``, ...), each callable."""
    passes = []
    for plugin, item in _collected(hook, options, **({"stage": stage} if stage else {})):
        if not callable(item):
            raise PluginOutputError(f"{hook} of plugin {plugin!r} gave {item!r}, which is not callable")
        passes.append(item)
    return passes


def lowerings(options: Options) -> list[Any]:
    """Every plugin's extra lowerings (objects with ``name`` and ``match(node)``)."""
    found = []
    for plugin, item in _collected("tunesmith_lowerings", options):
        if not callable(getattr(item, "match", None)) or not isinstance(getattr(item, "name", None), str):
            raise PluginOutputError(f"tunesmith_lowerings of plugin {plugin!r} gave {item!r}: no name and match()")
        found.append(item)
    return found


def graph_compiler(options: Options) -> Any:
    """What compiles the rest of a graph (``graph_compiler``), from the first plugin that answers."""
    result = _subset(get_system(), "tunesmith_graph_compiler", options)(options=options)
    if not callable(result):
        raise TunesmithError(
            f"graph_compiler={options.graph_compiler!r}: no plugin compiles graphs by that name "
            f"(the core has 'eager' and 'inductor')"
        )
    return result
