"""Settings: one frozen attrs object, resolved from layers.

Layers, lowest first: defaults < user config file (platformdirs) < ``[tool.tunesmith]`` in the
nearest pyproject.toml < ``TUNESMITH_<NAME>`` environment variables < ``tunesmith.options(...)``
blocks (per thread and task, through a ContextVar) < per-call overrides. Every value goes
through its option's parser, so a bad value fails with one message naming the option, where the
value came from, and what it accepts.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import tomllib
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import platformdirs

from tunesmith.errors import OptionError, TunesmithWarning

ENV_PREFIX = "TUNESMITH_"
#: Environment variables that are not settings (read before settings exist).
NON_OPTION_ENV = frozenset({"TUNESMITH_DISABLE_PLUGIN_AUTOLOAD"})


# --- parsers: raw value (Python, TOML or an environment string) -> value ---------------------


def parse_names(value: Any) -> tuple[str, ...] | None:
    """None, a comma-separated string, or a list of names."""
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError("a list of names, or a comma-separated string")


def parse_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a non-empty name")
    return value.strip()


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("true or false (1/0, yes/no, on/off)")


def _none_word(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "none"))


def parse_int(minimum: int, optional: bool = False) -> Callable[[Any], int | None]:
    def parse(value: Any) -> int | None:
        if optional and _none_word(value):
            return None
        try:
            number = int(value) if not isinstance(value, bool | float) else None
        except (TypeError, ValueError):
            number = None
        if number is None or number < minimum:
            raise ValueError(f"an integer >= {minimum}" + (", or none" if optional else ""))
        return number

    return parse


def parse_seconds(value: Any, optional: bool = True) -> float | None:
    """A positive number of seconds, or (where ``optional``) none for no limit."""
    if optional and _none_word(value):
        return None
    try:
        number = float(value) if not isinstance(value, bool) else -1.0
    except (TypeError, ValueError):
        number = -1.0
    if not number > 0:
        raise ValueError("a positive number of seconds" + (", or none" if optional else ""))
    return number


def parse_fraction(value: Any) -> float:
    """A number in [0, 1)."""
    try:
        number = float(value) if not isinstance(value, bool) else -1.0
    except (TypeError, ValueError):
        number = -1.0
    if not 0 <= number < 1:
        raise ValueError("a number from 0 up to (not including) 1")
    return number


def parse_optional_str(value: Any) -> str | None:
    if _none_word(value):
        return None
    if isinstance(value, str | os.PathLike):
        return str(value)
    raise ValueError("a string, or none")


def parse_one_of(*allowed: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in allowed:
            raise ValueError("one of " + ", ".join(repr(a) for a in allowed))
        return value

    return parse


def _field(default: Any, parse: Callable[[Any], Any], help: str, **kw: Any) -> Any:
    return attrs.field(default=default, metadata={"parse": parse, "help": help}, **kw)


@attrs.frozen
class Options:
    """The resolved settings. Plugin-declared settings read as attributes too (``options.redis_url``)."""

    backends: tuple[str, ...] | None = _field(
        None, parse_names, "ordered backend plugins by entry-point name; none = aten, then every other installed"
    )
    benchmark: str = _field(
        "auto",
        parse_one_of("auto", "subprocess", "inprocess"),
        "how choices are timed: subprocess (crash-isolated worker per GPU), inprocess, or auto "
        "(subprocess on a GPU, inprocess on the CPU)",
    )
    devices: tuple[str, ...] | None = _field(None, parse_names, "devices to benchmark on; none = all visible")
    compile_threads: int = _field(min(8, os.cpu_count() or 1), parse_int(1), "parallel precompile() calls")
    compile_in: str = _field(
        "auto",
        parse_one_of("auto", "processes", "threads"),
        "where a benchmark worker runs precompile(): first in compile processes, which fill the backends' "
        "disk caches, then on its threads, which load; or on its threads alone; auto = processes on a GPU",
    )
    caches: tuple[str, ...] | None = _field(
        None, parse_names, "ordered persistent cache layers; none = 'local' and every plugin layer"
    )
    budget_s: float | None = _field(None, parse_seconds, "wall-clock budget for tuning one problem")
    tuning: str = _field(
        "background",
        parse_one_of("background", "blocking"),
        "compiled models: background (the first step runs the kernels known and ATen's elsewhere; tuned ones are "
        "swapped in at a step boundary) or blocking (every kernel tuned before the first step)",
    )
    tuning_gap_s: float = _field(
        0.25,
        lambda v: parse_seconds(v, optional=False),
        "seconds a compiled model's step boundary lets background tuning time choices on the idle GPU",
    )
    graph_compiler: str = _field(
        "inductor", parse_name, "what compiles the rest of a graph: inductor, eager, or a plugin's"
    )
    cudagraphs: bool = _field(
        False,
        parse_bool,
        "run compiled graphs under CUDA graphs (torch.compile's modes reduce-overhead and max-autotune set it)",
    )
    pointwise_autotune: bool = _field(
        False,
        parse_bool,
        "let Inductor time its pointwise kernels' launch configs at their first run (its timings of small kernels "
        "are mostly host time, so its picks vary between processes); off, each takes the one config Inductor's "
        "heuristics give",
    )
    remember_install_keys: bool = _field(
        True,
        parse_bool,
        "keep Inductor's hashes of the torch and Triton installations in the local cache folder, so that a later "
        "process with the same files skips hashing them",
    )
    cache_dir: str | None = _field(None, parse_optional_str, "local cache folder; none = the user cache dir")
    cache_secret: str | None = _field(
        None, parse_optional_str, "HMAC-SHA256 key that signs and checks cache entries", repr=False
    )
    prune: int | None = _field(
        6, parse_int(1, optional=True), "choices besides ATen's kept by the cost model (none: benchmark all)"
    )
    skip_sure_aten: bool = _field(
        True,
        parse_bool,
        "take ATen's choice without tuning where the cost model is sure ATen wins (needs a device profile and prune)",
    )
    verify: bool = _field(False, parse_bool, "check the winner against a float64 reference")
    disabled_plugins: tuple[str, ...] = _field((), lambda v: parse_names(v) or (), "plugins not to load or call")
    bench_warmup: int = _field(2, parse_int(0), "untimed runs of each choice before timing")
    bench_repeat: int = _field(10, parse_int(1), "timed runs of each choice; the median is kept")
    bench_graph: bool = _field(
        True,
        parse_bool,
        "on a GPU, time a choice as a CUDA graph of calls over rotating input copies, as a compiled model runs it",
    )
    bench_timeout_s: float = _field(
        180.0,
        lambda v: parse_seconds(v, optional=False),
        "seconds one choice may spend precompiling, or being timed, before its worker is killed (subprocess)",
    )
    tie_tolerance: float = _field(
        0.01,
        parse_fraction,
        "times this close to the best (relative; widened by the measured noise, to twice the standard error) are ties",
    )
    cache_backoff_s: float = _field(
        30.0, lambda v: parse_seconds(v, optional=False), "seconds a failing cache layer is skipped"
    )
    cache_lock_ttl_s: float | None = _field(
        30.0,
        parse_seconds,
        "expiry of the single-flight lock on a shared layer (refreshed while tuning); none = no single-flight",
    )
    cache_lock_wait_s: float = _field(
        600.0,
        lambda v: parse_seconds(v, optional=False),
        "the longest a process waits for another to tune the same problem before tuning it too",
    )
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False)

    def __getattr__(self, name: str) -> Any:
        try:
            extra = object.__getattribute__(self, "extra")
        except AttributeError:
            raise AttributeError(name) from None
        if name in extra:
            return extra[name]
        raise AttributeError(f"no setting named {name!r}")


CORE_FIELDS = tuple(f for f in attrs.fields(Options) if f.name != "extra")


@attrs.frozen
class OptionDef:
    """One declared setting: its default, its parser, its help, and who declared it."""

    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str
    owner: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def core_option_defs() -> dict[str, OptionDef]:
    return {f.name: OptionDef(f.name, f.default, f.metadata["parse"], f.metadata["help"], "core") for f in CORE_FIELDS}


class OptionRegistry:
    """What ``tunesmith_add_options`` receives: plugins declare settings with ``add``."""

    def __init__(self, defs: dict[str, OptionDef], owner: str) -> None:
        self._defs = defs
        self._owner = owner

    def add(self, name: str, default: Any, parse: Callable[[Any], Any] | None = None, help: str = "") -> None:
        if not name.isidentifier() or name.startswith("_"):
            raise OptionError(f"plugin {self._owner!r} declared a setting named {name!r}: use a Python identifier")
        if name in self._defs:
            raise OptionError(
                f"plugin {self._owner!r} declared setting {name!r}, already declared by {self._defs[name].owner!r}"
            )
        self._defs[name] = OptionDef(name, default, parse or (lambda v: v), help, self._owner)


# --- the layers ------------------------------------------------------------------------------

_overrides: contextvars.ContextVar[tuple[Mapping[str, Any], ...]] = contextvars.ContextVar(
    "tunesmith_options", default=()
)
_file_cache: dict[Path, tuple[float, dict[str, Any]]] = {}


def user_config_path() -> Path:
    return Path(platformdirs.user_config_dir("tunesmith")) / "config.toml"


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` (the working directory)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _read_toml(path: Path, table: tuple[str, ...]) -> dict[str, Any]:
    """The table at ``table`` in a TOML file, re-read only when the file changes."""
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return {}
    cached = _file_cache.get(path)
    if cached is None or cached[0] != mtime:
        try:
            data: Any = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise OptionError(f"cannot read settings from {path}: {exc}") from exc
        for name in table:
            data = data.get(name, {}) if isinstance(data, dict) else {}
        if not isinstance(data, dict):
            raise OptionError(f"{path}: [{'.'.join(table)}] must be a table")
        _file_cache[path] = cached = (mtime, data)
    return cached[1]


def file_layers() -> list[tuple[str, Mapping[str, Any]]]:
    """(source, values) of the two file layers, lowest first."""
    layers: list[tuple[str, Mapping[str, Any]]] = []
    user = user_config_path()
    if user.is_file():
        layers.append((str(user), _read_toml(user, ())))
    project = find_pyproject()
    if project is not None:
        layers.append((f"{project} [tool.tunesmith]", _read_toml(project, ("tool", "tunesmith"))))
    return layers


def env_layer() -> dict[str, str]:
    prefix = len(ENV_PREFIX)
    return {
        key[prefix:].lower(): value
        for key, value in os.environ.items()
        if key.startswith(ENV_PREFIX) and key not in NON_OPTION_ENV
    }


def parse_value(defs: Mapping[str, OptionDef], name: str, raw: Any, source: str) -> Any:
    """Parse one raw value with its option's parser; OptionError names option, source and domain."""
    try:
        return defs[name].parse(raw)
    except (ValueError, TypeError) as exc:
        raise OptionError(f"setting {name!r} = {raw!r} (from {source}) is not valid: expected {exc}") from None


def check_overrides(defs: Mapping[str, OptionDef], values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Parse explicit overrides, where an unknown name is an error."""
    out = {}
    for name, raw in values.items():
        if name not in defs:
            known = ", ".join(sorted(defs))
            raise OptionError(f"unknown setting {name!r} (from {source}); known settings: {known}")
        out[name] = parse_value(defs, name, raw, source)
    return out


_warned_unknown: set[tuple[str, str]] = set()


def resolve(defs: Mapping[str, OptionDef], call: Mapping[str, Any] | None = None) -> Options:
    """The settings in force here: every layer applied over the defaults."""
    values = {name: d.default for name, d in defs.items()}
    env = env_layer()
    loose = [*file_layers(), ("environment", env)]
    for source, layer in loose:
        for name, raw in layer.items():
            if name not in defs:
                # A file or the environment may name a setting of a plugin that is not loaded.
                if (source, name) not in _warned_unknown:
                    _warned_unknown.add((source, name))
                    where = ENV_PREFIX + name.upper() if source == "environment" else source
                    warnings.warn(f"ignoring unknown tunesmith setting {name!r} in {where}", TunesmithWarning, 2)
                continue
            where = defs[name].env if source == "environment" else source
            values[name] = parse_value(defs, name, raw, where)
    for layer in _overrides.get():
        values.update(layer)
    if call:
        values.update(check_overrides(defs, call, "per-call options"))
    core = {f.name: values.pop(f.name) for f in CORE_FIELDS}
    return Options(**core, extra=values)


def to_payload(options: Options) -> dict[str, Any]:
    """The settings as JSON data, for a worker process (plugin settings that are not JSON left out)."""
    payload: dict[str, Any] = {f.name: getattr(options, f.name) for f in CORE_FIELDS}
    for name, value in options.extra.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        payload[name] = value
    return payload


def from_payload(base: Options, payload: Mapping[str, Any]) -> Options:
    """``base`` with the values of :func:`to_payload` put back (lists become tuples where the core
    expects them)."""
    core = {f.name: getattr(base, f.name) for f in CORE_FIELDS}
    extra = dict(base.extra)
    for name, value in payload.items():
        if name in core:
            core[name] = tuple(value) if isinstance(value, list) else value
        else:
            extra[name] = value
    return Options(**core, extra=extra)


@contextlib.contextmanager
def overriding(checked: Mapping[str, Any]) -> Iterator[None]:
    """Push already-checked overrides for the current thread or task."""
    token = _overrides.set((*_overrides.get(), dict(checked)))
    try:
        yield
    finally:
        _overrides.reset(token)
