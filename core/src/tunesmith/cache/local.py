"""The local disk layer: one JSON file per entry under ``cache_dir``, written atomically."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import platformdirs

from tunesmith.cache.entry import MAX_ENTRY_BYTES, check_size
from tunesmith.cache.filelocks import FileLocks

_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


def valid_key(key: str) -> bool:
    """Whether ``key`` can name an entry (letters, digits, ``_.-``; what every layer accepts)."""
    return bool(_KEY.match(key))


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("tunesmith"))


def write_atomically(path: Path, value: bytes) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
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
        """The entry's bytes; :class:`~tunesmith.cache.entry.BadEntry` for a file over the size bound,
        refused from its size before reading it (and never more than the bound read)."""
        try:
            with self._path(key).open("rb") as f:
                check_size(os.fstat(f.fileno()).st_size)
                return f.read(MAX_ENTRY_BYTES + 1)  # grown since: the decoder refuses it by its size
        except FileNotFoundError:
            return None

    def put(self, key: str, value: bytes) -> None:
        write_atomically(self._path(key), value)

    def _files(self) -> list[Path]:
        """Every entry's file (a writer's temporary file is not one); an error where the folder is
        there but cannot be listed (a file in its place, no permission), not an empty cache."""
        if not self.root.exists():
            return []
        for folder in (self.root, self.entries):
            if folder.exists() and not folder.is_dir():
                raise NotADirectoryError(f"{folder} is not a folder")
        if not self.entries.exists():
            return []
        if not os.access(self.entries, os.R_OK | os.X_OK):
            raise PermissionError(f"cannot read the folder {self.entries}")
        return [f for f in self.entries.glob("*/*.json") if not f.name.startswith(".")]

    def keys(self) -> list[str]:
        return [f.stem for f in self._files()]

    def stats(self) -> dict[str, object]:
        files = self._files()
        return {"location": str(self.root), "entries": len(files), "bytes": sum(f.stat().st_size for f in files)}

    def clear(self) -> int:
        """Delete every entry; returns how many were deleted, or raises :class:`NotCleared` saying
        how many were and how many could not be (a read-only folder)."""
        removed, failed = 0, []
        for f in self._files():
            try:
                f.unlink()
                removed += 1
            except FileNotFoundError:
                continue  # another process removed it
            except OSError as exc:
                failed.append(exc)
        if failed:
            raise NotCleared(removed, len(failed), failed[0])
        shutil.rmtree(self.entries, ignore_errors=True)  # the emptied folders
        FileLocks(self.root).clear()  # the single-flight lock files nobody holds
        from tunesmith.cache import tally  # (it reads this module)

        tally.clear(self.root)  # the compiled-graph counts of tunesmith report
        return removed


class NotCleared(OSError):
    """Some entries of a layer could not be deleted: ``removed`` were, ``left`` were not."""

    def __init__(self, removed: int, left: int, first: OSError) -> None:
        super().__init__(f"removed {removed} entries; {left} could not be removed ({type(first).__name__}: {first})")
        self.removed, self.left = removed, left
