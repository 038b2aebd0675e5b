"""A shared cache layer over a ``torch.distributed`` store: the ranks of one job (``torchrun``, an
initialised default process group) publish their entries and take single-flight locks in the
job's own TCP store, with no Redis or memcached configured. Entries are the same signed JSON as
every layer holds; they live as long as the job's store. The first entry published for a key is
the job's answer (``publish``, compare-and-set from absent), asked before a rank's own layers.

A lock is the value ``<token>|<expiry>`` (wall-clock seconds) under the key's lock name, set and
replaced only by compare-and-set, so one rank holds it at a time; a rank that dies stops
refreshing it and another takes it once the expiry passes. Ranks on several hosts compare expiries
made by different clocks: keep ``cache_lock_ttl_s`` well above their skew.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from typing import Any

log = logging.getLogger(__name__)

NAME = "torch_distributed"
#: prefix of every key tunesmith writes in the job's store (``PrefixStore`` adds the "/")
PREFIX = "tunesmith"


def default_store() -> Any | None:
    """The store of the initialised default process group of more than one rank, or None (none,
    one rank, a fake group, or a torch without it). Asked on every cache look-up: one attribute
    check where no job has started."""
    dist = sys.modules.get("torch.distributed")  # a job imported it to start its process group
    if dist is None or not (dist.is_available() and dist.is_initialized()):
        return None
    get = getattr(dist.distributed_c10d, "_get_default_store", None)  # no public accessor in torch
    try:
        if get is None or dist.get_world_size() < 2 or dist.get_backend() == "fake":
            return None
        return get()
    except Exception as exc:  # noqa: BLE001 - no store layer, never a failed look-up
        log.debug("no torch.distributed store layer: %s", exc)
        return None


class DistributedStoreLayer:
    """``get``/``put`` and ``acquire``/``refresh``/``release`` (a ``SharedCacheLayer``) over a c10d
    ``Store`` (``TCPStore``, ``FileStore``, ``HashStore``)."""

    name = NAME

    def __init__(self, store: Any) -> None:
        import torch.distributed as dist

        self.store = dist.PrefixStore(PREFIX, store)
        self._mine: dict[str, str] = {}  # token -> the lock value this process last wrote

    def get(self, key: str) -> bytes | None:
        name = f"entry/{key}"
        return bytes(self.store.get(name)) if self.store.check([name]) else None

    def put(self, key: str, value: bytes) -> None:
        self.store.set(f"entry/{key}", value)

    def publish(self, key: str, value: bytes) -> bytes:
        """Store ``value`` unless the job holds an entry for ``key`` already; the job's entry either
        way (compare-and-set from absent: the first rank to publish fixes the job's answer)."""
        return bytes(self.store.compare_set(f"entry/{key}", "", value))

    def replace(self, key: str, old: bytes, value: bytes) -> bytes:
        """Store ``value`` where the job holds ``old`` for ``key``; the job's entry either way."""
        return bytes(self.store.compare_set(f"entry/{key}", old, value))

    def acquire(self, key: str, ttl_s: float) -> str | None:
        name = f"lock/{key}"
        current = self.store.get(name).decode() if self.store.check([name]) else ""
        if current and float(current.rpartition("|")[2]) > time.time():
            return None  # held, and not expired
        token = uuid.uuid4().hex
        mine = f"{token}|{time.time() + ttl_s}"
        if self.store.compare_set(name, current, mine).decode() != mine:
            return None  # another rank took it first
        self._mine[token] = mine
        return token

    def refresh(self, key: str, token: str, ttl_s: float) -> bool:
        mine = self._mine.get(token)
        if mine is None:
            return False
        renewed = f"{token}|{time.time() + ttl_s}"
        if self.store.compare_set(f"lock/{key}", mine, renewed).decode() != renewed:
            del self._mine[token]  # expired and taken by another rank
            return False
        self._mine[token] = renewed
        return True

    def release(self, key: str, token: str) -> None:
        mine = self._mine.pop(token, None)
        if mine is not None:
            self.store.compare_set(f"lock/{key}", mine, "")  # "": free
