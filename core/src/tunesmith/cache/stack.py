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

from tunesmith.cache.dist_store import NAME as JOB_LAYER
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

    def get(self, key: str, parse: Callable[[Any], T], quiet: bool = False) -> tuple[T, str] | None:
        """The first valid entry for ``key`` and the name of its layer; bad entries are misses.
        ``quiet`` leaves misses and bad entries unreported (a process polling for another's entry).
        In a ``torch.distributed`` job, an entry found above the job's store is published there, and
        the job's own entry, where it holds another, is taken instead (:meth:`_job_entry`)."""
        for i, layer in enumerate(self.layers):
            if not self.usable(layer, key):
                continue
            try:
                raw = layer.get(key)
            except BadEntry as exc:  # refused unread (over the size bound): a bad entry, not a layer failure
                raw = None
                self.invalid(layer, key, exc, quiet)
            except Exception as exc:  # noqa: BLE001 - a layer's failure is a miss, never a crash
                self.failed(layer, key, "read", exc)
                continue
            value = None if raw is None else self._parse(layer, key, raw, parse, quiet)
            if value is None:
                if not quiet:
                    bump(f"{self.kind}_{_scope(layer)}_miss")
                continue
            bump(f"{self.kind}_{_scope(layer)}_hit")
            theirs = self._job_entry(key, raw, self.layers[i + 1 :], parse)
            if theirs is not None:  # the job's answer, which replaces this layer's entry too
                self._put_into(self.layers[: i + 1], key, theirs[1])
                return theirs[0], JOB_LAYER
            self._put_into(self.layers[:i], key, raw)
            return value, layer.name
        return None

    def put(self, key: str, payload: Any, parse: Callable[[Any], T] | None = None) -> tuple[T, str] | None:
        """Store ``payload`` (plain JSON data) in every layer, unless it is over the size bound
        (no reader would take it). In a ``torch.distributed`` job whose store already holds another
        entry for ``key`` (another rank published first), that entry is stored instead and returned
        with its layer's name (when ``parse`` is given): the caller runs the job's answer."""
        raw = encode(self.kind, key, payload, self.secret)
        if len(raw) > MAX_ENTRY_BYTES:
            bump("cache_entry_too_large")
            warnings.warn(
                f"not caching {self.kind} entry {key[:16]}...: {len(raw):,} bytes, over the limit of "
                f"{MAX_ENTRY_BYTES:,}",
                TunesmithWarning,
                stacklevel=2,
            )
            return None
        theirs = self._job_entry(key, raw, self.layers, parse)  # the job's store: published there
        others = [x for x in self.layers if not isinstance(x, DistributedStoreLayer)]
        self._put_into(others, key, raw if theirs is None else theirs[1])
        return None if theirs is None else (theirs[0], JOB_LAYER)

    def _parse(self, layer: CacheLayer, key: str, raw: bytes, parse: Callable[[Any], T], quiet: bool) -> T | None:
        """``raw`` decoded and parsed; None, reported as invalid, where anything is wrong with it."""
        try:
            return parse(decode(raw, self.kind, key, self.secret))
        except Exception as exc:  # noqa: BLE001 - whatever is wrong in an entry, it is a miss
            self.invalid(layer, key, exc, quiet)
            return None

    def _job_entry(
        self, key: str, raw: bytes, layers: Sequence[CacheLayer], parse: Callable[[Any], T] | None
    ) -> tuple[T, bytes] | None:
        """Publish ``raw`` to the job's store among ``layers``, unless the job holds an entry for
        ``key`` already; that entry, parsed and as bytes, where it differs from ``raw`` and is valid.
        The first rank to publish fixes the job's answer, so that every rank runs the same kernel
        whatever its own layers held (``{kind}_job_answer``)."""
        job = next((x for x in layers if isinstance(x, DistributedStoreLayer) and self.usable(x, key)), None)
        if job is None:
            return None
        try:
            theirs = job.publish(key, raw)
        except Exception as exc:  # noqa: BLE001 - a layer's failure must not lose the result
            self.failed(job, key, "write", exc)
            return None
        if theirs == raw:
            bump(f"{self.kind}_remote_put")
            return None
        if parse is None:
            return None
        value = self._parse(job, key, theirs, parse, quiet=False)
        if value is None:
            return None
        bump(f"{self.kind}_job_answer")
        return value, theirs

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
