"""Build a rendered instance into a shared library with hipcc, once per source: libraries are cached
on disk under the hash of everything that goes into them."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import platformdirs

from tunesmith_ck.render import HIPCC_FLAGS, hipcc_command

log = logging.getLogger(__name__)

#: seconds one hipcc run may take (CK instances are template-heavy; never measured here)
BUILD_TIMEOUT_S = 900
STDERR_TAIL = 2000


class BuildError(RuntimeError):
    """hipcc could not build an instance; the message carries the end of its output."""


def cache_root(cache_dir: str | None) -> Path:
    """Where libraries live: ``<cache_dir>/ck`` (the core's ``cache_dir`` setting), else the user cache dir."""
    base = Path(cache_dir) if cache_dir else Path(platformdirs.user_cache_dir("tunesmith"))
    return base / "ck"


def _trusted(path: Path) -> bool:
    """Whether a cached library may be loaded (loading runs its code): owned by this user and
    writable by nobody else, so another user of a shared cache_dir cannot plant one."""
    info = path.stat()
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def build_key(source: str, hipcc: str, arch: str, ck_include: str) -> str:
    """SHA-256 of the source, the compiler, the target and the CK headers used: equal keys, equal libraries."""
    parts = (source, os.path.realpath(hipcc), arch, ck_include, " ".join(HIPCC_FLAGS))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def build(source: str, hipcc: str, arch: str, ck_include: str, root: Path) -> Path:
    """The library built from ``source``: from the cache when present, else compiled now (the source is
    kept beside it). Raises :class:`BuildError` when hipcc cannot start, fails or times out."""
    key = build_key(source, hipcc, arch, ck_include)
    library = root / f"{key}.so"
    if library.is_file():
        if _trusted(library):
            log.debug("ck: library %s found in the cache", library.name)
            return library
        log.warning("ck: %s is not ours alone (owner or write permission): building it again", library)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as folder:
        src, out = Path(folder) / f"{key}.cpp", Path(folder) / f"{key}.so"
        src.write_text(source)
        command = hipcc_command(hipcc, str(src), str(out), arch, ck_include)
        log.info("ck: building %s for %s", key[:12], arch)
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        except OSError as exc:
            raise BuildError(f"hipcc could not start ({hipcc}): {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"hipcc ran past {BUILD_TIMEOUT_S} s building {key[:12]}") from exc
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout or "")[-STDERR_TAIL:]
            raise BuildError(f"hipcc failed (exit {proc.returncode}) building {key[:12]}:\n{tail}")
        os.replace(src, root / f"{key}.cpp")
        os.replace(out, library)  # atomic: a concurrent build of the same key writes the same file
    return library
