"""tunesmith: picks the fastest kernel for every matmul-shaped operation, and remembers it.

import tunesmith
sel = tunesmith.tune("addmm", bias, a, b, epilogue=["relu"])
out = sel.kernel(bias, a, b)
"""

from __future__ import annotations

import sys
from typing import Any

from tunesmith import hooks
from tunesmith.cache.stack import reset_backoff
from tunesmith.counting import counters
from tunesmith.errors import (
    CaptureError,
    NoValidChoicesError,
    OptionError,
    ProblemError,
    TunesmithError,
    TunesmithWarning,
)
from tunesmith.config import Options
from tunesmith.plugins import get_system
from tunesmith.selection import Selection, clear_memory
from tunesmith.settings import current_options, options
from tunesmith.direct import tune
from tunesmith_hookspecs import SPEC_VERSION, hookimpl

__version__ = "0.1.0"


def register(plugin: Any, name: str | None = None) -> str:
    """Add, at run time, an object or module carrying hookimpls; returns the name it goes by.

    The name defaults to the object's ``name`` attribute, else its ``__name__``, else its type's
    name. A backend's ChoiceSpecs must carry that name as their ``backend``.
    """
    return get_system().register(plugin, name)


def unregister(plugin: Any) -> None:
    """Remove a plugin added with :func:`register` (by object or name)."""
    get_system().unregister(plugin)
    hooks._status_cache.clear()


def reset() -> None:
    """Clear in-memory state: selections (compiled graphs' kernels too), counters, cache back-off,
    plugin status answers.

    Settings, active ``options()`` blocks and registered plugins stay.
    """
    dispatch = sys.modules.get("tunesmith.compile.dispatch")  # imported only once something compiles
    if dispatch is not None:
        dispatch.clear()
    clear_memory()
    counters.clear()
    reset_backoff()
    hooks._status_cache.clear()


def __getattr__(name: str) -> Any:
    """``estimate`` and ``Estimate`` load the tracing machinery (torch.fx, sympy: about a second)
    on first use, not with every ``import tunesmith`` (benchmark workers, CLI calls)."""
    if name in ("estimate", "Estimate"):
        from tunesmith.cost import graph

        return getattr(graph, name)
    raise AttributeError(f"module 'tunesmith' has no attribute {name!r}")


__all__ = [
    "SPEC_VERSION",
    "CaptureError",
    "Estimate",
    "NoValidChoicesError",
    "OptionError",
    "Options",
    "ProblemError",
    "Selection",
    "TunesmithError",
    "TunesmithWarning",
    "counters",
    "current_options",
    "estimate",
    "hookimpl",
    "options",
    "register",
    "reset",
    "tune",
    "unregister",
]
