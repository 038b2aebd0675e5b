"""Single-flight locks for the processes of one host that share a local cache folder, where no
shared layer (Redis, memcached, a ``torch.distributed`` store) offers locks: an exclusive ``flock``
on one file per key, under ``locks/`` in the folder. The operating system frees a lock when its
holder dies, so a crashed tuner never holds a problem past its own end and no expiry is needed."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no file locks (acquire raises), each process tunes alone
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: descriptors holding a lock in this process: a forked child closes its copies, so that a lock
#: is freed when its holder ends even while a child (a data loader, a compile pool) lives on
_OPEN: set[int] = set()


def _close_in_child() -> None:
    for fd in list(_OPEN):
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN.clear()


os.register_at_fork(after_in_child=_close_in_child)


class NoFileLocks(OSError):
    """The folder's file system (or the platform) offers no ``flock``."""


class FileLocks:
    """The lock half of a ``SharedCacheLayer`` (``acquire``, ``refresh``, ``release``) on files."""

    name = "local-locks"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.folder = Path(root) / "locks"
        self._held: dict[str, int] = {}  # token -> open descriptor holding the flock

    def acquire(self, key: str, ttl_s: float) -> str | None:
        """A token when this process now holds ``key``'s lock, None when another holder has it
        (``ttl_s`` is not needed: the lock lives as long as its holder)."""
        if fcntl is None:
            raise NoFileLocks("file locks need POSIX (fcntl)")
        path = self.folder / f"{key}.lock"
        while True:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except OSError as exc:  # a file system without flock (some network mounts): tuned alone
                os.close(fd)
                raise NoFileLocks(f"{self.folder}: {exc.strerror or exc}") from exc
            if _names(path, fd):
                break
            os.close(fd)  # the file was removed (by clear) after it was opened: lock the new one
        token = uuid.uuid4().hex
        self._held[token] = fd
        _OPEN.add(fd)
        return token

    def refresh(self, key: str, token: str, ttl_s: float) -> bool:
        return token in self._held

    def release(self, key: str, token: str) -> None:
        fd = self._held.pop(token, None)
        if fd is not None:
            _OPEN.discard(fd)
            os.close(fd)  # closing the descriptor drops the flock

    def clear(self) -> int:
        """Remove the lock files nobody holds (each is locked while it is removed); how many."""
        if fcntl is None or not self.folder.is_dir():
            return 0
        removed = 0
        for path in self.folder.glob("*.lock"):
            try:
                fd = os.open(path, os.O_RDWR)
            except OSError:  # removed meanwhile, or not ours to open: left alone
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _names(path, fd):
                    path.unlink()
                    removed += 1
            except OSError:  # held (or no flock here): left alone
                continue
            finally:
                os.close(fd)
        return removed


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a removed lock file locks nothing)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False
