"""Cache entries: JSON records, signed with HMAC-SHA256 when ``cache_secret`` is set.

An entry is ``{"format", "version", "kind", "key", "payload", "sig"}``. Decoding checks all of it
and raises :class:`BadEntry` on anything else (over :data:`MAX_ENTRY_BYTES`, nested deeper than
:data:`MAX_ENTRY_DEPTH`, not JSON, another shape, another key, a bad or missing signature, or any
exception the parser raises), which the core treats as a miss with a warning. Nothing is unpickled
or run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from itertools import accumulate
from typing import Any

from tunesmith_hookspecs import SPEC_VERSION

FORMAT = "tunesmith-entry"

#: the largest entry a layer reads or the decoder parses: a tuned problem's entry is a few KB,
#: a compiled graph's plan of a thousand problems about 300 KB
MAX_ENTRY_BYTES = 8 * 1024 * 1024
#: the deepest nesting of JSON arrays and objects in an entry (real entries nest 6 or 7 deep)
MAX_ENTRY_DEPTH = 64

_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_MARKS = bytes(sorted(set(range(256)) - set(b'[]{}"')))
_STEP = [{ord("["): 1, ord("]"): -1}.get(byte, 0) for byte in range(256)]
_TOO_DEEP = b"[" * (MAX_ENTRY_DEPTH + 1)


class BadEntry(ValueError):
    """Bytes read from a cache that are not a valid entry for the asked key."""


def check_size(size: int) -> None:
    """Refuse an entry of ``size`` bytes over :data:`MAX_ENTRY_BYTES` (layers call it before reading)."""
    if size > MAX_ENTRY_BYTES:
        raise BadEntry(f"{size:,} bytes, over the limit of {MAX_ENTRY_BYTES:,}")


def _brackets(raw: bytes) -> bytes:
    """The brackets of JSON text ``raw`` outside its strings, as ``[`` and ``]``, by bytes operations
    (linear, with no object per token): escapes go, then all but quotes and brackets, then strings."""
    marks = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(_SQUARE, _NOT_MARKS).replace(b'""', b"")
    kept, start = bytearray(), 0
    while (opening := marks.find(b'"', start)) >= 0:  # only strings with brackets in them are left
        kept += marks[start:opening]
        start = marks.find(b'"', opening + 1) + 1
        if start == 0:  # unterminated: the rest is inside it
            return bytes(kept)
    return bytes(kept + marks[start:])


def _check_depth(raw: bytes) -> None:
    """Refuse nesting deeper than :data:`MAX_ENTRY_DEPTH` before ``json`` (which recurses) sees it:
    the depth is the highest running count of the brackets outside strings (a long run of openers
    answers at once)."""
    brackets = _brackets(raw)
    if _TOO_DEEP in brackets or max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_ENTRY_DEPTH:
        raise BadEntry(f"nested deeper than {MAX_ENTRY_DEPTH} levels")


def _short(value: Any) -> str:
    """``repr(value)``, cut to fit in a warning."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _why(exc: BaseException) -> str:
    """What went wrong, for a warning: the message of a ValueError, else the exception's type too."""
    return str(exc) if isinstance(exc, ValueError) and str(exc) else f"{type(exc).__name__}: {exc}"


def load_json(raw: bytes) -> Any:
    """The JSON value of an entry's bytes within the size and depth bounds; :class:`BadEntry` on
    anything else, whatever the parser raises (a cache entry must never crash its reader)."""
    if not isinstance(raw, bytes | bytearray):
        raise BadEntry(f"not bytes but {type(raw).__name__}")
    check_size(len(raw))
    raw = bytes(raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadEntry(f"not UTF-8 ({exc})") from None
    _check_depth(raw)
    try:
        return json.loads(text)
    except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, huge numbers: all a bad entry
        raise BadEntry(f"not JSON ({_why(exc)})") from None


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
    secret) its signature. :class:`BadEntry` on anything else, whatever goes wrong checking it."""
    data = load_json(raw)
    try:
        return _checked(data, kind, key, secret)
    except BadEntry:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a signature that is not ASCII: a bad entry too
        raise BadEntry(f"malformed ({_why(exc)})") from None


def _checked(data: Any, kind: str | None, key: str, secret: str | None) -> Any:
    """The payload of parsed entry ``data``, checked as :func:`decode` says."""
    if not isinstance(data, dict) or set(data) != {"format", "version", "kind", "key", "payload", "sig"}:
        raise BadEntry("not a tunesmith entry")
    sig = data.pop("sig")
    if data["format"] != FORMAT or data["version"] != SPEC_VERSION or data["kind"] != (kind or data["kind"]):
        found = f"{_short(data['kind'])} v{_short(data['version'])}"
        raise BadEntry(f"an entry of another format, version or kind ({found})")
    if data["key"] != key:
        raise BadEntry("stored under another key")
    if secret:
        if not isinstance(sig, str):
            raise BadEntry("unsigned, but cache_secret is set")
        if not hmac.compare_digest(sig.encode(), _signature(secret, data).encode()):
            raise BadEntry("bad signature (another cache_secret, or tampered with)")
    return data["payload"]
