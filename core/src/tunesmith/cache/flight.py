"""Single-flight across processes: of many processes that miss the same key at once, one tunes
while the others wait for its entry.

The lock lives in the first shared layer (Redis, memcached, a ``torch.distributed`` store) and has
a token and an expiry; the holder refreshes it while it tunes, so a holder that dies frees it
within ``cache_lock_ttl_s`` and a waiter takes over. Without a shared layer, processes of one host
lock files in the local cache folder (freed when the holder dies). A waiter gives up after
``cache_lock_wait_s`` and tunes itself. With ``defer``, a process that finds the lock held does
not wait: it raises :class:`HeldElsewhere` and tunes another problem first (``fleet.py``).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

from tunesmith.cache.filelocks import FileLocks, NoFileLocks
from tunesmith.cache.stack import CacheStack
from tunesmith.counting import bump
from tunesmith.errors import TunesmithWarning
from tunesmith_hookspecs import SharedCacheLayer

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the longest pause between two looks for another process's entry
MAX_POLL_S = 0.5


_warned_no_file_locks: list[bool] = []


def _no_file_locks(exc: Exception) -> None:
    """Say once per process that the cache folder offers no file locks (some network file
    systems), so processes sharing it tune the same problems."""
    bump("file_lock_unavailable")
    if not _warned_no_file_locks:
        _warned_no_file_locks.append(True)
        log.warning("no file locks in the local cache folder (%s): processes sharing it tune alone", exc)


class HeldElsewhere(Exception):
    """Another process holds the lock of this key (and has not stored its entry yet)."""


class SingleFlight(Generic[T]):
    """``with SingleFlight(stack, key, parse, ttl_s, wait_s) as found:`` ``found`` is the entry
    another process stored while this one waited, or None: then tune, put, and leave the block,
    which releases the lock (if this process got one). An entry equal to ``seen`` (the caller's
    own look-up found it, and could not use it) is not another process's."""

    def __init__(
        self,
        stack: CacheStack,
        key: str,
        parse: Callable[[Any], T],
        ttl_s: float | None,
        wait_s: float,
        defer: bool = False,
        seen: tuple[T, str] | None = None,
    ) -> None:
        self.stack, self.key, self.parse, self.ttl_s, self.wait_s = stack, key, parse, ttl_s, wait_s
        self.defer, self.seen = defer, seen
        self._held: tuple[SharedCacheLayer | FileLocks, str] | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def __enter__(self) -> tuple[T, str] | None:
        if not self.ttl_s:
            return None
        deadline = time.monotonic() + self.wait_s
        pause, waiting = 0.02, False
        while True:
            layer = self.stack.lock_layer(self.key)
            if layer is None:
                return None  # no shared layer (or it is failing): tune alone
            try:
                token = layer.acquire(self.key, self.ttl_s)
            except Exception as exc:  # noqa: BLE001 - a failing lock is no lock, never a crash
                if isinstance(layer, FileLocks):  # no file locks here: tune alone, as without a lock
                    if isinstance(exc, NoFileLocks):
                        _no_file_locks(exc)
                    else:  # an unusable folder: the local layer warns about it
                        log.debug("no file lock for %s...: %s", self.key[:16], exc)
                    return None
                self.stack.failed(layer, self.key, "take a lock", exc)
                continue
            if token is not None:
                try:
                    found = self._new()  # stored since our miss?
                    if found is None:
                        self._hold(layer, token)
                        return None
                except BaseException:  # not held: never leave the lock taken
                    self._release(layer, token)
                    raise
                self._release(layer, token)
                return found
            if self.defer:
                found = self._new()
                if found is not None:
                    return found
                raise HeldElsewhere(self.key)
            if not waiting:
                waiting = True
                bump("autotune_lock_waited")
                log.info("another process is tuning %s...; waiting for its result", self.key[:16])
            found = self._new()
            if found is not None:
                return found
            if time.monotonic() > deadline:
                bump("autotune_lock_timeout")
                warnings.warn(
                    f"waited cache_lock_wait_s for another process to tune {self.key[:16]}...; tuning it here too",
                    TunesmithWarning,
                    stacklevel=3,
                )
                return None
            time.sleep(pause)
            pause = min(pause * 1.5, MAX_POLL_S)

    def _new(self) -> tuple[T, str] | None:
        """An entry in the caches other than the one the caller saw."""
        found = self.stack.get(self.key, self.parse, quiet=True)
        return found if found is not None and (self.seen is None or found[0] != self.seen[0]) else None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._held is not None:
            self._stop.set()
            if self._heartbeat is not None:
                self._heartbeat.join()
            self._release(*self._held)
            self._held = None

    def _hold(self, layer: SharedCacheLayer | FileLocks, token: str) -> None:
        """Keep the lock alive (refreshed every third of its expiry) until the block ends; a file
        lock lives as long as its holder, with nothing to refresh."""
        bump("autotune_lock_held")
        if not isinstance(layer, FileLocks):
            self._heartbeat = threading.Thread(target=self._refresh, args=(layer, token), daemon=True)
            self._heartbeat.start()
        self._held = (layer, token)

    def _refresh(self, layer: SharedCacheLayer | FileLocks, token: str) -> None:
        """Refresh until the block ends or the lock is lost; a failed refresh is retried next time
        (while the layer is skipped after a failure, the lock may expire: tuning goes on)."""
        assert self.ttl_s
        while not self._stop.wait(self.ttl_s / 3):
            if not self.stack.usable(layer, self.key):
                continue
            try:
                if not layer.refresh(self.key, token, self.ttl_s):
                    log.warning("lost the tuning lock of %s... (it expired); others may tune it too", self.key[:16])
                    return
            except Exception as exc:  # noqa: BLE001 - counted; the next period tries again
                self.stack.failed(layer, self.key, "refresh a lock", exc)

    def _release(self, layer: SharedCacheLayer | FileLocks, token: str) -> None:
        """Give the lock back, unless the layer is failing (then it expires on its own; a file
        lock, which never expires, is always given back)."""
        if not isinstance(layer, FileLocks) and not self.stack.usable(layer, self.key):
            return
        try:
            layer.release(self.key, token)
        except Exception as exc:  # noqa: BLE001 - counted; the lock then expires on its own
            self.stack.failed(layer, self.key, "release a lock", exc)
