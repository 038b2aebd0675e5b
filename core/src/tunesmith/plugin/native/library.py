"""Load a built library once per process and bind its ``extern "C"`` entry points, after checking
that it holds the instance it was built for (a library of another instance is refused, not called)."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: an entry point's signature: its argument types and its result type
Signature = tuple[Sequence[Any], Any]

_loaded: dict[Path, dict[str, Any]] = {}
_loaded_lock = threading.Lock()


def name_entry(plugin: str) -> str:
    """The symbol of the ``const char* ()`` that names a plugin's instance in its library."""
    return f"tunesmith_{plugin}_instance"


def load(path: Path, plugin: str, instance: str, entries: Mapping[str, Signature]) -> dict[str, Any]:
    """The entry points of the library at ``path`` by symbol, typed as ``entries`` says (loaded once
    per process), checked to hold ``instance``; RuntimeError when it holds another."""
    with _loaded_lock:
        if path in _loaded:
            return _loaded[path]
        library = ctypes.CDLL(str(path))
        named = getattr(library, name_entry(plugin))
        named.restype = ctypes.c_char_p
        if named().decode() != instance:
            raise RuntimeError(f"{path} holds instance {named().decode()}, not {instance}")
        functions = {}
        for symbol, (argtypes, restype) in entries.items():
            function = getattr(library, symbol)
            function.argtypes, function.restype = list(argtypes), restype
            functions[symbol] = function
        _loaded[path] = functions
        return functions
