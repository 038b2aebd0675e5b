"""``tunesmith cache export|import``: every valid entry of some layers to one JSON file, and back,
so that a tuned database can be shipped to a new fleet.

Entries travel as the JSON objects they are stored as, signature included; each is checked on
the way out and on the way in (shape, key, and the signature when ``cache_secret`` is set), so a
file can carry nothing that the layers would not accept from the core itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from tunesmith.cache.entry import BadEntry, decode
from tunesmith.cache.local import valid_key
from tunesmith.errors import TunesmithError
from tunesmith_hookspecs import CacheLayer, ListableCacheLayer

FORMAT = "tunesmith-cache-export"
VERSION = 1


class TransferError(TunesmithError):
    """An export or import that cannot go on (a layer failed, or the file is not an export)."""


@attrs.define
class Transfer:
    """What an export or import did: entries per layer, and what was left out and why."""

    entries: dict[str, int] = attrs.Factory(dict)
    skipped: list[str] = attrs.Factory(list)


def _checked(key: Any, entry: Any, secret: str | None) -> bytes:
    """The stored bytes of ``entry`` under ``key``, or :class:`BadEntry` saying why it is not one."""
    if not isinstance(key, str) or not valid_key(key):
        raise BadEntry(f"invalid key {key!r}")
    raw = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    decode(raw, None, key, secret)
    return raw


def _layer_call(layer: CacheLayer, action: str, fn: Callable[[], Any]) -> Any:
    """``fn()``; a layer's failure becomes a :class:`TransferError`, a bad entry stays a :class:`BadEntry`."""
    try:
        return fn()
    except BadEntry:
        raise
    except Exception as exc:
        raise TransferError(f"cache layer {layer.name!r} failed to {action}: {type(exc).__name__}: {exc}") from exc


def export_entries(
    layers: Sequence[CacheLayer], secret: str | None, advance: Callable[[], None] = lambda: None
) -> tuple[dict[str, Any], Transfer]:
    """Every valid entry of ``layers`` (the first layer's copy of a key wins), as an export document."""
    found: dict[str, Any] = {}
    report = Transfer()
    for layer in layers:
        if not isinstance(layer, ListableCacheLayer):
            report.skipped.append(f"{layer.name}: cannot list its keys")
            continue
        count = 0
        for key in _layer_call(layer, "list its keys", lambda layer=layer: list(layer.keys())):
            advance()
            if key in found:
                continue
            try:
                raw = _layer_call(layer, "read", lambda layer=layer, key=key: layer.get(key))
                if raw is None:
                    continue  # expired or evicted since the listing
                decode(raw, None, key, secret)
            except BadEntry as exc:
                report.skipped.append(f"{layer.name}: {key[:16]}...: {exc}")
                continue
            found[key] = json.loads(raw)
            count += 1
        report.entries[layer.name] = count
    entries = [{"key": key, "entry": found[key]} for key in sorted(found)]
    return {"format": FORMAT, "version": VERSION, "entries": entries}, report


def import_entries(
    document: Any, layers: Sequence[CacheLayer], secret: str | None, advance: Callable[[], None] = lambda: None
) -> Transfer:
    """Put every valid entry of an export document into every one of ``layers``."""
    if not isinstance(document, dict) or document.get("format") != FORMAT or document.get("version") != VERSION:
        raise TransferError(f"not a tunesmith cache export (format {FORMAT!r}, version {VERSION})")
    items = document.get("entries")
    if not isinstance(items, list):
        raise TransferError("the export has no list of entries")
    report = Transfer({layer.name: 0 for layer in layers})
    for item in items:
        advance()
        key = item.get("key") if isinstance(item, dict) else None
        try:
            if not isinstance(item, dict) or set(item) != {"key", "entry"}:
                raise BadEntry("not a {key, entry} record")
            raw = _checked(key, item["entry"], secret)
        except BadEntry as exc:
            report.skipped.append(f"{str(key)[:16]}...: {exc}")
            continue
        for layer in layers:
            _layer_call(layer, "write", lambda layer=layer, key=key, raw=raw: layer.put(key, raw))
            report.entries[layer.name] += 1
    return report
