"""The Redis layer: entries as plain strings, locks with redis-py's token lock (SET NX PX).

An entry is read only up to the core's size bound (``GETRANGE``): a longer one is refused
(``BadEntry``). A server that wants a password, or refuses the one given, says so in
tunesmith's words (:class:`RedisAuthError`), not redis-py's.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, LockError, ResponseError
from redis.lock import Lock
from redis.retry import Retry

from tunesmith.plugin import ENTRY, LOCK, MAX_ENTRY_BYTES, NAMESPACE, check_size, without_password

F = TypeVar("F", bound=Callable[..., Any])


class RedisAuthError(AuthenticationError):
    """The server wants a password that ``redis_url`` lacks, or refuses the one it has."""


def _auth_refused(exc: Exception) -> bool:
    """Whether ``exc`` is the server refusing the client for want of (the right) password."""
    if isinstance(exc, AuthenticationError):
        return True
    text = str(exc)
    return isinstance(exc, ResponseError) and (text.startswith(("NOAUTH", "WRONGPASS")) or "authenticat" in text)


def _explained(method: F) -> F:
    """``method``, with an authentication failure said as :class:`RedisAuthError`."""

    @functools.wraps(method)
    def call(self: RedisLayer, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (AuthenticationError, ResponseError) as exc:
            if not _auth_refused(exc) or isinstance(exc, RedisAuthError):
                raise
            if urlsplit(self.url).password is None:
                raise RedisAuthError("Redis needs a password (set it in redis_url)") from None
            raise RedisAuthError(f"Redis refused the password in redis_url ({exc})") from None

    return call  # type: ignore[return-value]


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

    @_explained
    def ping(self) -> None:
        self.client.ping()

    @_explained
    def get(self, key: str) -> bytes | None:
        """The entry's bytes, of which at most the size bound and one byte more are read (one round
        trip); :class:`BadEntry` for a longer one."""
        pipe = self.client.pipeline(transaction=True)
        pipe.exists(ENTRY + key)
        pipe.strlen(ENTRY + key)
        pipe.getrange(ENTRY + key, 0, MAX_ENTRY_BYTES)
        found, size, head = pipe.execute()
        if not found:
            return None
        check_size(max(size, len(head)))
        return head

    @_explained
    def put(self, key: str, value: bytes) -> None:
        self.client.set(ENTRY + key, value, px=self.ttl_ms)

    # --- single-flight ---

    @_explained
    def acquire(self, key: str, ttl_s: float) -> str | None:
        lock = Lock(self.client, LOCK + key, timeout=ttl_s, blocking=False, thread_local=False)
        if not lock.acquire(blocking=False):
            return None
        token = lock.local.token.decode()
        with self._locks_guard:
            self._locks[token] = lock
        return token

    @_explained
    def refresh(self, key: str, token: str, ttl_s: float) -> bool:
        with self._locks_guard:
            lock = self._locks.get(token)
        if lock is None:
            return False
        try:
            return lock.extend(ttl_s, replace_ttl=True)
        except LockError:  # expired, or taken by another
            return False

    @_explained
    def release(self, key: str, token: str) -> None:
        with self._locks_guard:
            lock = self._locks.pop(token, None)
        if lock is not None:
            with contextlib.suppress(LockError):  # it expired already: nothing to give back
                lock.release()

    # --- tunesmith cache stats|clear|export ---

    def _scan(self, prefix: str) -> Iterator[bytes]:
        yield from self.client.scan_iter(match=prefix + "*", count=1000)

    @_explained
    def keys(self) -> list[str]:
        return [k.decode()[len(ENTRY) :] for k in self._scan(ENTRY)]

    @_explained
    def stats(self) -> dict[str, object]:
        names = list(self._scan(ENTRY))
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.strlen(name)
        return {"location": without_password(self.url), "entries": len(names), "bytes": sum(pipe.execute())}

    @_explained
    def clear(self) -> int:
        """Delete every key of this tunesmith version (entries and locks); returns the entries."""
        names = list(self._scan(NAMESPACE))
        for start in range(0, len(names), 1000):
            self.client.unlink(*names[start : start + 1000])
        return sum(n.startswith(ENTRY.encode()) for n in names)
