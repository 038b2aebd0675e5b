"""tunesmith: picks the fastest kernel for every matmul-shaped operation, and remembers it.

import tunesmith
sel = tunesmith.tune("addmm", bias, a, b, epilogue=["relu"])
out = sel.kernel(bias, a, b)

``import tunesmith`` itself imports nothing heavy (no torch): each public name is loaded on first
use (PEP 562), so that the command line can handle Ctrl-C before torch is imported.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads these
    from tunesmith.background import Status, status, wait
    from tunesmith.config import Options
    from tunesmith.cost.graph import Estimate, estimate
    from tunesmith.counting import counters
    from tunesmith.direct import tune
    from tunesmith.errors import (
        CaptureError,
        NoValidChoicesError,
        OptionError,
        ProblemError,
        TunesmithError,
        TunesmithWarning,
    )
    from tunesmith.selection import Selection
    from tunesmith.settings import current_options, options
    from tunesmith_hookspecs import SPEC_VERSION, hookimpl

__version__ = "0.1.0"

#: each lazily loaded public name -> the module that defines it
_LAZY = {
    "CaptureError": "tunesmith.errors",
    "NoValidChoicesError": "tunesmith.errors",
    "OptionError": "tunesmith.errors",
    "ProblemError": "tunesmith.errors",
    "TunesmithError": "tunesmith.errors",
    "TunesmithWarning": "tunesmith.errors",
    "Options": "tunesmith.config",
    "counters": "tunesmith.counting",
    "current_options": "tunesmith.settings",
    "options": "tunesmith.settings",
    "tune": "tunesmith.direct",
    "wait": "tunesmith.background",
    "status": "tunesmith.background",
    "Status": "tunesmith.background",
    "Selection": "tunesmith.selection",
    "SPEC_VERSION": "tunesmith_hookspecs",
    "hookimpl": "tunesmith_hookspecs",
    "estimate": "tunesmith.cost.graph",  # the tracing machinery (torch.fx, sympy): about a second
    "Estimate": "tunesmith.cost.graph",
}


def register(plugin: Any, name: str | None = None) -> str:
    """Add, at run time, an object or module carrying hookimpls; returns the name it goes by.

    The name defaults to the object's ``name`` attribute, else its ``__name__``, else its type's
    name. A backend's ChoiceSpecs must carry that name as their ``backend``.
    """
    from tunesmith.plugins import get_system

    return get_system().register(plugin, name)


def unregister(plugin: Any) -> None:
    """Remove a plugin added with :func:`register` (by object or name)."""
    from tunesmith import hooks
    from tunesmith.plugins import get_system

    get_system().unregister(plugin)
    hooks._status_cache.clear()


def reset() -> None:
    """Clear in-memory state: selections (compiled graphs' kernels too), counters, cache back-off,
    plugin status answers.

    Settings, active ``options()`` blocks and registered plugins stay.
    """
    from tunesmith import hooks
    from tunesmith.cache.stack import reset_backoff
    from tunesmith.counting import counters
    from tunesmith.selection import clear_memory

    dispatch = sys.modules.get("tunesmith.compile.dispatch")  # imported only once something compiles
    if dispatch is not None:
        dispatch.clear()
    attention = sys.modules.get("tunesmith.compile.attention")
    if attention is not None:
        attention.clear()
    background = sys.modules.get("tunesmith.background")
    if background is not None:
        background.tuner.clear()
    clear_memory()
    counters.clear()
    reset_backoff()
    hooks._status_cache.clear()


def __getattr__(name: str) -> Any:
    """A public name, loaded from its module on first use (then kept here); else a submodule, as
    ``tunesmith.hooks`` was reachable after a plain ``import tunesmith`` when it imported it."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":  # the submodule exists but lacks something
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The loaded names and the lazy ones (``dir(tunesmith)`` lists every public name)."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "SPEC_VERSION",
    "CaptureError",
    "Estimate",
    "NoValidChoicesError",
    "OptionError",
    "Options",
    "ProblemError",
    "Selection",
    "Status",
    "TunesmithError",
    "TunesmithWarning",
    "counters",
    "current_options",
    "estimate",
    "hookimpl",
    "options",
    "register",
    "reset",
    "status",
    "tune",
    "unregister",
    "wait",
]
