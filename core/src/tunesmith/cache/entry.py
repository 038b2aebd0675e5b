"""Cache entries: JSON records, signed with HMAC-SHA256 when ``cache_secret`` is set.

An entry is ``{"format", "version", "kind", "key", "payload", "sig"}``. Decoding checks all of it
and raises :class:`BadEntry` on anything else (not JSON, another shape, another key, a bad or
missing signature), which the core treats as a miss with a warning. Nothing is unpickled or run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from tunesmith_hookspecs import SPEC_VERSION

FORMAT = "tunesmith-entry"


class BadEntry(ValueError):
    """Bytes read from a cache that are not a valid entry for the asked key."""


def _signature(secret: str, body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def encode(kind: str, key: str, payload: Any, secret: str | None) -> bytes:
    """The bytes stored for ``payload`` (plain JSON data) under ``key``."""
    body = {"format": FORMAT, "version": SPEC_VERSION, "kind": kind, "key": key, "payload": payload}
    sig = _signature(secret, body) if secret else None
    return json.dumps({**body, "sig": sig}, sort_keys=True, separators=(",", ":")).encode()


def decode(raw: bytes, kind: str | None, key: str, secret: str | None) -> Any:
    """The payload of an entry, after checking its shape, its kind (None: any), its key and (with a
    secret) its signature."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEntry(f"not JSON ({exc})") from None
    if not isinstance(data, dict) or set(data) != {"format", "version", "kind", "key", "payload", "sig"}:
        raise BadEntry("not a tunesmith entry")
    sig = data.pop("sig")
    if data["format"] != FORMAT or data["version"] != SPEC_VERSION or data["kind"] != (kind or data["kind"]):
        raise BadEntry(f"an entry of another format, version or kind ({data['kind']!r} v{data['version']!r})")
    if data["key"] != key:
        raise BadEntry("stored under another key")
    if secret:
        if not isinstance(sig, str):
            raise BadEntry("unsigned, but cache_secret is set")
        if not hmac.compare_digest(sig, _signature(secret, data)):
            raise BadEntry("bad signature (another cache_secret, or tampered with)")
    return data["payload"]
