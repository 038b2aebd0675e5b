"""The persistent layers as one read-through cache: first hit wins and fills the layers above it.

Each layer's errors are caught here, counted (``remote_cache_error``, ``local_cache_error``),
warned about once per back-off period, and the layer (or, for a layer with ``server_for``, the
server of the key) is skipped until the period ends. A bad entry (whatever is wrong with it, a
layer refusing it unread for its size included) is a miss with a warning (``cache_entry_invalid``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tunesmith.cache.dist_store import DistributedStoreLayer
from tunesmith.cache.entry import MAX_ENTRY_BYTES, BadEntry, decode, encode
from tunesmith.cache.filelocks import FileLocks
from tunesmith.cache.local import LocalDiskCache
from tunesmith.counting import bump
from tunesmith.errors import TunesmithWarning
from tunesmith_hookspecs import CacheLayer, SerdeError, SharedCacheLayer

T = TypeVar("T")

#: layer name (or "layer@server") -> monotonic time until which it is skipped
_backoff: dict[str, float] = {}


def reset_backoff() -> None:
    _backoff.clear()


def _scope(layer: CacheLayer) -> str:
    return "local" if layer.name in ("local", FileLocks.name) else "remote"


def _where(layer: CacheLayer, key: str) -> str:
    """What a failure backs off: the layer, or the layer's server for ``key``."""
    server_for = getattr(layer, "server_for", None)
    return f"{layer.name}@{server_for(key)}" if server_for is not None else layer.name


class CacheStack:
    """Persistent layers in order, for entries of one ``kind`` (``autotune``, ``compiled_graph``)."""

    def __init__(self, layers: Sequence[CacheLayer], kind: str, secret: str | None, backoff_s: float) -> None:
        self.layers = list(layers)
        self.kind = kind
        self.secret = secret
        self.backoff_s = backoff_s

    def usable(self, layer: CacheLayer, key: str) -> bool:
        """Whether ``layer`` (or its server for ``key``) is not being skipped after a failure."""
        return _backoff.get(_where(layer, key), 0.0) <= time.monotonic()

    def failed(self, layer: CacheLayer, key: str, action: str, exc: Exception) -> None:
        """Count and warn about a layer's error, and skip that layer (or server) for a while."""
        where = _where(layer, key)
        bump(f"{_scope(layer)}_cache_error")
        _backoff[where] = time.monotonic() + self.backoff_s
        warnings.warn(
            f"cache layer {where!r} failed to {action} ({type(exc).__name__}: {exc}); "
            f"skipping it for {self.backoff_s:g} s",
            TunesmithWarning,
            stacklevel=3,
        )

    def invalid(self, layer: CacheLayer, key: str, exc: Exception, quiet: bool) -> None:
        """Count and warn about a bad entry (unless ``quiet``); the caller takes it as a miss."""
        if quiet:
            return
        bump("cache_entry_invalid")
        why = str(exc) if isinstance(exc, BadEntry | SerdeError) else f"{type(exc).__name__}: {exc}"
        warnings.warn(
            f"ignoring invalid {self.kind} entry {key[:16]}... in cache layer {layer.name!r}: {why}",
            TunesmithWarning,
            stacklevel=3,
        )

    def lock_layer(self, key: str) -> SharedCacheLayer | FileLocks | None:
        """The first layer that offers single-flight locks and is not being skipped for ``key``;
        without one, file locks in the local layer's folder (the processes of one host share it)."""
        shared = next((x for x in self.layers if isinstance(x, SharedCacheLayer) and self.usable(x, key)), None)
        if shared is not None:
            return shared
        local = next((x for x in self.layers if isinstance(x, LocalDiskCache)), None)
        if local is None:
            return None
        locks = FileLocks(local.root)
        return locks if self.usable(locks, key) else None

    def job_layer(self, key: str) -> DistributedStoreLayer | None:
        """The store of this process's ``torch.distributed`` job among the layers, unless skipped."""
        return next((x for x in self.layers if isinstance(x, DistributedStoreLayer) and self.usable(x, key)), None)

    def get(self, key: str, parse: Callable[[Any], T], quiet: bool = False, peek: bool = False) -> tuple[T, str] | None:
        """The first valid entry for ``key`` and the name of its layer; bad entries are misses.
        ``quiet`` leaves misses and bad entries unreported (a process polling for another's entry);
        ``peek`` is quiet and leaves hits uncounted and the layers above unfilled (a look ahead:
        the selection that takes the entry later counts and fills).
        In a ``torch.distributed`` job the job's store is asked first: its entry is the job's answer
        (an entry found elsewhere is the caller's to :meth:`publish` once it has run it)."""
        job = self.job_layer(key)
        for layer in [job, *(x for x in self.layers if x is not job)] if job else self.layers:
            if not self.usable(layer, key):
                continue
            try:
                raw = layer.get(key)
            except BadEntry as exc:  # refused unread (over the size bound): a bad entry, not a layer failure
                raw = None
                self.invalid(layer, key, exc, quiet or peek)
            except Exception as exc:  # noqa: BLE001 - a layer's failure is a miss, never a crash
                self.failed(layer, key, "read", exc)
                continue
            value = None if raw is None else self._parse(layer, key, raw, parse, quiet or peek)
            if value is None:
                if not (quiet or peek):
                    bump(f"{self.kind}_{_scope(layer)}_miss")
                continue
            if peek:
                return value, layer.name
            bump(f"{self.kind}_{_scope(layer)}_hit")
            above = self.layers[: self.layers.index(layer)]
            self._put_into([x for x in above if x is not job], key, raw)
            return value, layer.name
        return None

    def put(self, key: str, payload: Any, parse: Callable[[Any], T] | None = None) -> tuple[T, str] | None:
        """Store ``payload`` (plain JSON data) in every layer, unless it is over the size bound
        (no reader would take it). With ``parse``, the job's store of a ``torch.distributed`` job
        takes it only where it holds no entry yet (:meth:`publish`), and the entry it holds instead
        is returned: the caller runs the job's answer where it runs here."""
        raw = self._encode(key, payload)
        if raw is None:
            return None
        job = self.job_layer(key) if parse is not None else None
        self._put_into([x for x in self.layers if x is not job], key, raw)
        return self._publish(job, key, raw, parse) if job is not None and parse is not None else None

    def publish(self, key: str, payload: Any, parse: Callable[[Any], T]) -> tuple[T, str] | None:
        """In a ``torch.distributed`` job: ``payload`` becomes the job's entry for ``key`` unless the
        job's store holds a valid one already (the first rank to publish fixes the job's answer);
        that one, parsed, with its layer's name, or None. An invalid one (another ``cache_secret``,
        damaged) is replaced. Nothing outside a job."""
        job = self.job_layer(key)
        raw = self._encode(key, payload) if job is not None else None
        return self._publish(job, key, raw, parse) if job is not None and raw is not None else None

    def _publish(
        self, job: DistributedStoreLayer, key: str, raw: bytes, parse: Callable[[Any], T]
    ) -> tuple[T, str] | None:
        try:
            theirs = job.publish(key, raw)
            if theirs != raw:
                value = self._parse(job, key, theirs, parse, quiet=False)
                if value is not None:
                    return value, job.name
                theirs = job.replace(key, theirs, raw)
        except Exception as exc:  # noqa: BLE001 - a layer's failure must not lose the result
            self.failed(job, key, "write", exc)
            return None
        if theirs == raw:
            bump(f"{self.kind}_remote_put")
        return None

    def _encode(self, key: str, payload: Any) -> bytes | None:
        """The entry's bytes, or None (with a warning) over the size bound."""
        raw = encode(self.kind, key, payload, self.secret)
        if len(raw) <= MAX_ENTRY_BYTES:
            return raw
        bump("cache_entry_too_large")
        warnings.warn(
            f"not caching {self.kind} entry {key[:16]}...: {len(raw):,} bytes, over the limit of {MAX_ENTRY_BYTES:,}",
            TunesmithWarning,
            stacklevel=3,
        )
        return None

    def _parse(self, layer: CacheLayer, key: str, raw: bytes, parse: Callable[[Any], T], quiet: bool) -> T | None:
        """``raw`` decoded and parsed; None, reported as invalid, where anything is wrong with it."""
        try:
            return parse(decode(raw, self.kind, key, self.secret))
        except Exception as exc:  # noqa: BLE001 - whatever is wrong in an entry, it is a miss
            self.invalid(layer, key, exc, quiet)
            return None

    def _put_into(self, layers: Sequence[CacheLayer], key: str, raw: bytes) -> None:
        for layer in layers:
            if not self.usable(layer, key):
                continue
            try:
                layer.put(key, raw)
            except Exception as exc:  # noqa: BLE001 - a layer's failure must not lose the result
                self.failed(layer, key, "write", exc)
            else:
                bump(f"{self.kind}_{_scope(layer)}_put")
