"""The persistent layers as one read-through cache: first hit wins and fills the layers above it.

Each layer's errors are caught here, counted (``remote_cache_error``, ``local_cache_error``),
warned about once per back-off period, and the layer is skipped until the period ends.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tunesmith.cache.entry import BadEntry, decode, encode
from tunesmith.counters import bump
from tunesmith.errors import TunesmithWarning
from tunesmith_hookspecs import CacheLayer, SerdeError

T = TypeVar("T")

#: layer name -> monotonic time until which it is skipped
_backoff: dict[str, float] = {}


def reset_backoff() -> None:
    _backoff.clear()


def _scope(layer: CacheLayer) -> str:
    return "local" if layer.name == "local" else "remote"


class CacheStack:
    """Persistent layers in order, for entries of one ``kind`` (``autotune``, ``compiled_graph``)."""

    def __init__(self, layers: Sequence[CacheLayer], kind: str, secret: str | None, backoff_s: float) -> None:
        self.layers = list(layers)
        self.kind = kind
        self.secret = secret
        self.backoff_s = backoff_s

    def _usable(self, layer: CacheLayer) -> bool:
        return _backoff.get(layer.name, 0.0) <= time.monotonic()

    def _failed(self, layer: CacheLayer, action: str, exc: Exception) -> None:
        bump(f"{_scope(layer)}_cache_error")
        _backoff[layer.name] = time.monotonic() + self.backoff_s
        warnings.warn(
            f"cache layer {layer.name!r} failed to {action} ({type(exc).__name__}: {exc}); "
            f"skipping it for {self.backoff_s:g} s",
            TunesmithWarning,
            stacklevel=3,
        )

    def get(self, key: str, parse: Callable[[Any], T]) -> tuple[T, str] | None:
        """The first valid entry for ``key`` and the name of its layer; bad entries are misses."""
        for i, layer in enumerate(self.layers):
            if not self._usable(layer):
                continue
            try:
                raw = layer.get(key)
            except Exception as exc:  # noqa: BLE001 - a layer's failure is a miss, never a crash
                self._failed(layer, "read", exc)
                continue
            value = None
            if raw is not None:
                try:
                    value = parse(decode(raw, self.kind, key, self.secret))
                except (BadEntry, SerdeError) as exc:
                    bump("cache_entry_invalid")
                    warnings.warn(
                        f"ignoring invalid {self.kind} entry {key[:16]}... in cache layer {layer.name!r}: {exc}",
                        TunesmithWarning,
                        stacklevel=2,
                    )
            if value is None:
                bump(f"{self.kind}_{_scope(layer)}_miss")
                continue
            bump(f"{self.kind}_{_scope(layer)}_hit")
            self._put_into(self.layers[:i], key, raw)
            return value, layer.name
        return None

    def put(self, key: str, payload: Any) -> None:
        """Store ``payload`` (plain JSON data) in every layer."""
        self._put_into(self.layers, key, encode(self.kind, key, payload, self.secret))

    def _put_into(self, layers: Sequence[CacheLayer], key: str, raw: bytes) -> None:
        for layer in layers:
            if not self._usable(layer):
                continue
            try:
                layer.put(key, raw)
            except Exception as exc:  # noqa: BLE001 - a layer's failure must not lose the result
                self._failed(layer, "write", exc)
            else:
                bump(f"{self.kind}_{_scope(layer)}_put")
