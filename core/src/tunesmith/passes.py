"""Graph passes: how a pass is identified in cache keys."""

from __future__ import annotations

import functools
import hashlib
import inspect
from typing import Any


def pass_uuid(graph_pass: Any) -> str:
    """A pass's ``uuid`` (an attribute, or a method as on Inductor's custom passes), else a hash of
    its source: a plain function changes its key when its code changes."""
    uuid = getattr(graph_pass, "uuid", None)
    if uuid is not None:
        return str(uuid() if callable(uuid) else uuid)
    return hashlib.sha256(_identity(graph_pass).encode()).hexdigest()


def _identity(graph_pass: Any) -> str:
    """Source text plus what makes two passes with the same source differ (bound arguments, closures)."""
    if isinstance(graph_pass, functools.partial):
        return f"{_identity(graph_pass.func)}|{graph_pass.args!r}|{sorted(graph_pass.keywords.items())!r}"
    target = graph_pass if inspect.isfunction(graph_pass) or inspect.ismethod(graph_pass) else type(graph_pass)
    try:
        source = inspect.getsource(target)
    except (OSError, TypeError):
        source = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
    cells = getattr(inspect.unwrap(target), "__closure__", None) or ()
    return source + "|" + "|".join(repr(c.cell_contents) for c in cells)
