"""The memcached layer: keys spread over the servers by rendezvous hashing, values above the item
limit split into chunks, single-flight locks through ``add``.

A stored value starts with one byte: ``=`` the entry follows, ``#`` a JSON manifest follows
(``{"id", "n", "sha256"}``) naming ``n`` chunks kept on the same server under a per-write ``id``,
so that concurrent writers never mix their chunks and a reader checks what it puts together.
A value over the core's entry size bound is refused (``BadEntry``) from its manifest, unread.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import re
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote

from pymemcache.client.base import PooledClient
from pymemcache.client.rendezvous import RendezvousHash

from tunesmith.plugin import CHUNK, ENTRY, LOCK, MAX_ENTRY_BYTES, NAMESPACE, BadEntry, check_size

log = logging.getLogger(__name__)

#: bytes per stored item: well under memcached's default item limit of 1 MiB (``-I``)
CHUNK_BYTES = 512 * 1024
#: memcached reads an expiry above 30 days as a Unix time
RELATIVE_EXPIRY_LIMIT_S = 30 * 24 * 3600

#: the most chunks one entry may have (64 MiB): a manifest naming more is not ours
MAX_CHUNKS = 128

INLINE, MANIFEST = b"=", b"#"
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def parse_servers(value: object) -> tuple[tuple[str, int], ...] | None:
    """``host:port,host:port`` (or a list of them), or none."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("host:port,host:port, or none")
    servers = []
    for item in items:
        host, _, port = str(item).strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"host:port,host:port, or none ({item!r} is not host:port)")
        servers.append((host.strip("[]"), int(port)))
    return tuple(servers)


def _manifest(text: bytes) -> dict[str, Any] | None:
    """A chunk manifest as written by ``put``, or None for anything else (another writer's bytes
    must not become keys, or a huge list of them)."""
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    ok = (
        isinstance(manifest, dict)
        and set(manifest) == {"id", "n", "sha256"}
        and isinstance(manifest["id"], str)
        and _HEX16.match(manifest["id"])
        and type(manifest["n"]) is int
        and 1 <= manifest["n"] <= MAX_CHUNKS
        and isinstance(manifest["sha256"], str)
    )
    return manifest if ok else None


def _expiry(ttl_s: float | None) -> int:
    if not ttl_s:
        return 0
    seconds = max(1, math.ceil(ttl_s))
    return seconds if seconds <= RELATIVE_EXPIRY_LIMIT_S else int(time.time()) + seconds


class MemcacheLayer:
    """A cache layer named ``memcache`` over one or more memcached servers."""

    name = "memcache"

    def __init__(self, servers: Sequence[tuple[str, int]], timeout_s: float = 0.5, ttl_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self.expire = _expiry(ttl_s)
        self.clients = {
            f"{host}:{port}": PooledClient(
                (host, port), connect_timeout=timeout_s, timeout=timeout_s, no_delay=True, default_noreply=False
            )
            for host, port in servers
        }
        self._ring = RendezvousHash(nodes=list(self.clients))

    def __repr__(self) -> str:
        return f"MemcacheLayer({','.join(self.clients)!r})"

    def server_for(self, key: str) -> str:
        return self._ring.get_node(key)

    def _client(self, key: str) -> PooledClient:
        return self.clients[self.server_for(key)]

    def get(self, key: str) -> bytes | None:
        """The entry's bytes; :class:`BadEntry` for one over the size bound (chunks left unread)."""
        client = self._client(key)
        raw = client.get(ENTRY + key)
        if raw is not None:
            check_size(len(raw) - 1)  # an item is at most memcached's item size limit (-I)
        if raw is None or raw[:1] != MANIFEST:
            return raw[1:] if raw is not None and raw[:1] == INLINE else raw
        manifest = _manifest(raw[1:])
        if manifest is None:
            return raw  # not ours: the core reads it as an invalid entry
        if (manifest["n"] - 1) * CHUNK_BYTES >= MAX_ENTRY_BYTES:
            raise BadEntry(f"{manifest['n']} chunks of {CHUNK_BYTES:,} bytes, over the limit of {MAX_ENTRY_BYTES:,}")
        names = [f"{CHUNK}{key}:{manifest['id']}:{i}" for i in range(manifest["n"])]
        digest = manifest["sha256"]
        chunks = client.get_many(names)
        value = b"".join(chunks.get(n, b"") for n in names)
        check_size(len(value))  # chunks of another writer may be larger
        if len(chunks) != len(names) or hashlib.sha256(value).hexdigest() != digest:
            log.debug("entry %s...: chunks evicted or overwritten; a miss", key[:16])
            return None
        return value

    def put(self, key: str, value: bytes) -> None:
        client = self._client(key)
        if len(value) < CHUNK_BYTES:
            client.set(ENTRY + key, INLINE + value, expire=self.expire)
            return
        write = os.urandom(8).hex()
        parts = {
            f"{CHUNK}{key}:{write}:{i}": value[start : start + CHUNK_BYTES]
            for i, start in enumerate(range(0, len(value), CHUNK_BYTES))
        }
        failed = client.set_many(parts, expire=self.expire)
        if failed:
            raise OSError(f"memcached stored {len(parts) - len(failed)} of {len(parts)} chunks")
        manifest = {"id": write, "n": len(parts), "sha256": hashlib.sha256(value).hexdigest()}
        client.set(ENTRY + key, MANIFEST + json.dumps(manifest).encode(), expire=self.expire)

    # --- single-flight ---

    # memcached's clock ticks once a second, so an expiry of n seconds lasts between n-1 and n:
    # a lock gets one second more, so that it never lasts less than asked.

    def acquire(self, key: str, ttl_s: float) -> str | None:
        token = os.urandom(16).hex()
        return token if self._client(key).add(LOCK + key, token.encode(), expire=_expiry(ttl_s + 1)) else None

    def refresh(self, key: str, token: str, ttl_s: float) -> bool:
        client = self._client(key)
        held, cas = client.gets(LOCK + key)
        return held == token.encode() and bool(client.cas(LOCK + key, held, cas, expire=_expiry(ttl_s + 1)))

    def release(self, key: str, token: str) -> None:
        client = self._client(key)
        if client.get(LOCK + key) == token.encode():
            client.delete(LOCK + key)

    # --- tunesmith cache stats|clear|export ---

    def _dump(self) -> Iterator[tuple[str, str, int]]:
        """(server, key, size) of every key of this tunesmith version, on every server."""
        for server in self.clients:
            for key, size in metadump(server, max(self.timeout_s, 5.0)):
                if key.startswith(NAMESPACE):
                    yield server, key, size

    def keys(self) -> list[str]:
        return [key[len(ENTRY) :] for _, key, _ in self._dump() if key.startswith(ENTRY)]

    def stats(self) -> dict[str, object]:
        found = list(self._dump())
        return {
            "location": ",".join(self.clients),
            "entries": sum(key.startswith(ENTRY) for _, key, _ in found),
            "bytes": sum(size for _, _, size in found),
        }

    def clear(self) -> int:
        """Delete every key of this tunesmith version (entries, chunks, locks); returns the entries."""
        found = list(self._dump())
        for server, key, _ in found:
            self.clients[server].delete(key)
        return sum(key.startswith(ENTRY) for _, key, _ in found)


def metadump(server: str, timeout_s: float, busy_tries: int = 50) -> Iterator[tuple[str, int]]:
    """Every (key, size) a memcached server holds, by its ``lru_crawler metadump all`` command
    (memcached 1.4.31 and later), which pymemcache does not speak. The crawler serves one dump
    at a time: a ``BUSY`` server is asked again, a little later."""
    host, _, port = server.rpartition(":")
    for _ in range(busy_tries):
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.sendall(b"lru_crawler metadump all\r\n")
            lines = _lines(sock, server)
            first = next(lines)
            if first.startswith(b"BUSY"):
                time.sleep(0.1)
                continue
            for line in itertools.chain([first], lines):
                if line == b"END":
                    return
                if not line.startswith(b"key="):
                    raise ConnectionError(f"memcached {server} refused metadump: {line.decode(errors='replace')}")
                fields = dict(f.split(b"=", 1) for f in line.split() if b"=" in f)
                yield unquote(fields[b"key"].decode()), int(fields.get(b"size", b"0"))
    raise ConnectionError(f"memcached {server} stayed busy with another metadump")


def _lines(sock: socket.socket, server: str) -> Iterator[bytes]:
    """The lines of a reply (records end in \\n, the closing END in \\r\\n)."""
    buffer = b""
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"memcached {server} closed the connection during metadump")
        *lines, buffer = (buffer + data).split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r")
