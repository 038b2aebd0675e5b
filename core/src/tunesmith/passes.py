"""Graph passes: how a pass is identified in cache keys."""

from __future__ import annotations

import hashlib
import inspect
from typing import Any


def pass_uuid(graph_pass: Any) -> str:
    """A pass's ``uuid`` (an attribute, or a method as on Inductor's custom passes), else a hash of
    its source: a plain function changes its key when its code changes."""
    uuid = getattr(graph_pass, "uuid", None)
    if uuid is not None:
        return str(uuid() if callable(uuid) else uuid)
    target = graph_pass if inspect.isfunction(graph_pass) or inspect.ismethod(graph_pass) else type(graph_pass)
    try:
        source = inspect.getsource(target)
    except (OSError, TypeError):
        source = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
    return hashlib.sha256(source.encode()).hexdigest()
