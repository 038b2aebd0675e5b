"""The Redis layer: entries as plain strings, locks with redis-py's token lock (SET NX PX)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import redis
from redis.backoff import NoBackoff
from redis.exceptions import LockError
from redis.lock import Lock
from redis.retry import Retry

from tunesmith.cache.remote import ENTRY, LOCK, NAMESPACE, without_password


class RedisLayer:
    """A cache layer named ``redis``. Every call fails within ``timeout_s`` (no retries: the core
    skips a failing layer for a back-off period instead)."""

    name = "redis"

    def __init__(self, url: str, timeout_s: float = 0.5, ttl_s: float | None = None) -> None:
        self.url = url
        self.ttl_ms = int(ttl_s * 1000) if ttl_s else None
        self.client = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self._locks: dict[str, Lock] = {}
        self._locks_guard = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisLayer({without_password(self.url)!r})"

    def ping(self) -> None:
        self.client.ping()

    def get(self, key: str) -> bytes | None:
        return self.client.get(ENTRY + key)

    def put(self, key: str, value: bytes) -> None:
        self.client.set(ENTRY + key, value, px=self.ttl_ms)

    # --- single-flight ---

    def acquire(self, key: str, ttl_s: float) -> str | None:
        lock = Lock(self.client, LOCK + key, timeout=ttl_s, blocking=False, thread_local=False)
        if not lock.acquire(blocking=False):
            return None
        token = lock.local.token.decode()
        with self._locks_guard:
            self._locks[token] = lock
        return token

    def refresh(self, key: str, token: str, ttl_s: float) -> bool:
        with self._locks_guard:
            lock = self._locks.get(token)
        if lock is None:
            return False
        try:
            return lock.extend(ttl_s, replace_ttl=True)
        except LockError:  # expired, or taken by another
            return False

    def release(self, key: str, token: str) -> None:
        with self._locks_guard:
            lock = self._locks.pop(token, None)
        if lock is not None:
            with contextlib.suppress(LockError):  # it expired already: nothing to give back
                lock.release()

    # --- tunesmith cache stats|clear|export ---

    def _scan(self, prefix: str) -> Iterator[bytes]:
        yield from self.client.scan_iter(match=prefix + "*", count=1000)

    def keys(self) -> list[str]:
        return [k.decode()[len(ENTRY) :] for k in self._scan(ENTRY)]

    def stats(self) -> dict[str, object]:
        names = list(self._scan(ENTRY))
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.strlen(name)
        return {"location": without_password(self.url), "entries": len(names), "bytes": sum(pipe.execute())}

    def clear(self) -> int:
        """Delete every key of this tunesmith version (entries and locks); returns the entries."""
        names = list(self._scan(NAMESPACE))
        for start in range(0, len(names), 1000):
            self.client.unlink(*names[start : start + 1000])
        return sum(n.startswith(ENTRY.encode()) for n in names)
