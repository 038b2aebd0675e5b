"""The local disk layer: one JSON file per entry under ``cache_dir``, written atomically."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import platformdirs

_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


def valid_key(key: str) -> bool:
    """Whether ``key`` can name an entry (letters, digits, ``_.-``; what every layer accepts)."""
    return bool(_KEY.match(key))


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("tunesmith"))


class LocalDiskCache:
    """A cache layer named ``local``: ``<root>/entries/<key[:2]>/<key>.json``."""

    name = "local"

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self.entries = self.root / "entries"

    def _path(self, key: str) -> Path:
        if not valid_key(key):
            raise ValueError(f"invalid cache key {key!r}")
        return self.entries / key[:2] / f"{key}.json"

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, value: bytes) -> None:
        """Write to a temporary file in the same folder, then rename: readers never see half an entry."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
            os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a shared cache_dir needs others to read it
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _files(self) -> list[Path]:
        return list(self.entries.glob("*/*.json")) if self.entries.is_dir() else []

    def keys(self) -> list[str]:
        return [f.stem for f in self._files()]

    def stats(self) -> dict[str, object]:
        files = self._files()
        return {"location": str(self.root), "entries": len(files), "bytes": sum(f.stat().st_size for f in files)}

    def clear(self) -> int:
        """Delete every entry; returns how many there were."""
        count = int(self.stats()["entries"])  # type: ignore[call-overload]
        shutil.rmtree(self.entries, ignore_errors=True)
        return count
