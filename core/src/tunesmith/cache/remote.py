"""What the server layers (the redis and memcache plugins) share: the key namespace.

Every key carries the spec version, so that a fleet upgrading tunesmith never reads entries of
another format, and a kind letter: ``e`` an entry, ``l`` a single-flight lock, ``c`` a chunk.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from tunesmith_hookspecs import SPEC_VERSION

NAMESPACE = f"tunesmith:v{SPEC_VERSION}:"
ENTRY = NAMESPACE + "e:"
LOCK = NAMESPACE + "l:"
CHUNK = NAMESPACE + "c:"


def without_password(url: str) -> str:
    """``url`` fit to print: a password in it is replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))
