"""Inductor's hashes of the torch and Triton installations, remembered across processes.

Every process that compiles hashes torch's Python files (``torch_key``) and Triton's compiler,
language and 415 MB library (``triton_key``) to key Inductor's and Triton's caches: 0.5 to 1 s of a
warm process's first step on an H200, more than all the rest of it for a small model. A process
that computed them stores them in the local cache folder under a fingerprint of every file they
read (path, size, modification and change times, inode); a later process whose files fingerprint
the same sets them, as torch's compile workers and Triton's warm-up workers are handed them,
instead of hashing again. Any file written, replaced or moved since changes its change time, so the
fingerprint, so the keys are computed afresh. See docs/decisions.md.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from tunesmith.cache.entry import BadEntry, load_json
from tunesmith.cache.local import write_atomically
from tunesmith.counting import bump

log = logging.getLogger(__name__)

FOLDER = "install_keys"
MAX_BYTES = 1 << 20  # a memo is one key: far smaller


@attrs.frozen
class InstallKey:
    """One installation hash: the files it reads, how to read it, and how to hand a known value on."""

    name: str
    files: Callable[[], Iterable[str]]  # each file it reads (or more), as ``_stat`` gives it
    version: str
    computed: Callable[[], str | None]  # the value where this process has it (None: not hashed here)
    known: Callable[[str], bool]  # makes this process use a value computed before (False: it had one)


def _package_stats(root: str, top: bool = True) -> Iterator[str]:
    """Path, size, modification and change times, and inode of every file of the package folders under
    ``root``: a superset of the modules that ``pkgutil.iter_modules`` (and ``walk_packages``) find
    there, recursively through packages (folders with an ``__init__``)."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    if not top and not any(inspect.getmodulename(e.name) == "__init__" for e in entries):
        return  # as pkgutil tells a package: not __pycache__, whose __init__.cpython-312.pyc is not one
    for entry in entries:
        if entry.is_dir():
            if "." not in entry.name and entry.name != "__pycache__":
                yield from _package_stats(entry.path, top=False)
        elif entry.is_file():
            yield _stat(entry.path, entry.stat())


def _file_stats(paths: Iterable[str]) -> Iterator[str]:
    for path in paths:
        try:
            yield _stat(path, os.stat(path))
        except OSError:
            continue


def _stat(path: str, st: os.stat_result) -> str:
    return f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}"


def fingerprint(key: InstallKey) -> str:
    """A digest of the key's name and version and of its files' stats: any file written, replaced
    or moved since changes it."""
    digest = hashlib.sha256(f"{key.name}\0{key.version}\0{sys.version}".encode())
    digest.update("\n".join(sorted(key.files())).encode())
    return digest.hexdigest()[:40]


def _torch_key() -> InstallKey | None:
    import torch
    from torch._inductor import codecache

    torch_key = getattr(codecache, "torch_key", None)
    if not callable(getattr(torch_key, "set", None)):
        return None  # torch.compile's workers are handed it through .set: without it, it is not settable
    root = os.path.dirname(torch.__file__)
    inductor = os.path.dirname(codecache.__file__)
    extras = [os.path.join(inductor, "codegen", "aoti_runtime", "interface.cpp"), os.path.join(inductor, "script.ld")]

    def known(value: str) -> bool:
        try:
            torch_key.set(bytes.fromhex(value))  # type: ignore[union-attr]
        except (AssertionError, RuntimeError):  # computed already in this process
            return False
        return True

    def files() -> list[str]:
        return [*_package_stats(root), *_file_stats(extras)]

    # every Inductor compile hashes it (its compile workers' start, its graph caches' keys): asked
    # after one, it is known
    return InstallKey("torch", files, torch.__version__, lambda: torch_key().hex(), known)


def _triton_key() -> InstallKey | None:
    try:
        import triton
        import triton.runtime.cache as triton_cache
    except ImportError:
        return None
    original = getattr(triton_cache, "triton_key", None)
    if not callable(original):
        return None
    root = os.path.dirname(triton.__file__)

    def files() -> list[str]:
        native = os.path.join(root, "_C")
        libs = [os.path.join(native, n) for n in os.listdir(native)]
        found = list(_file_stats([triton_cache.__file__, *(p for p in libs if "libtriton." in p)]))
        for sub in ("compiler", "backends", "language"):
            found.extend(_package_stats(os.path.join(root, sub)))
        return found

    def known(value: str) -> bool:
        def remembered() -> str:
            return value

        # as Triton's own warm-up workers are handed it: the module's name, and each module that
        # bound the function by name at its import (triton.runtime.autotuner, torch's triton_compat)
        for module in list(sys.modules.values()):
            if getattr(module, "__dict__", {}).get("triton_key") is original:  # no module __getattr__ runs
                module.triton_key = remembered
        return True

    def computed() -> str | None:
        info = getattr(original, "cache_info", None)  # functools.lru_cache's
        return str(original()) if info is not None and info().currsize else None

    return InstallKey("triton", files, str(getattr(triton, "__version__", "")), computed, known)


def _keys() -> list[InstallKey]:
    found = []
    for make in (_torch_key, _triton_key):
        try:
            key = make()
        except Exception as exc:  # noqa: BLE001 - an optimisation only: without it, each process hashes
            log.debug("tunesmith: %s cannot be remembered: %s", make.__name__, exc)
            key = None
        if key is not None:
            found.append(key)
    return found


class Memo:
    """The installation keys of this process: those found in ``root`` set at :meth:`use`, the others
    stored by :meth:`store` once Inductor has computed them."""

    def __init__(self, root: Path, keys: Callable[[], list[InstallKey]] = lambda: _keys()) -> None:
        self.folder = root / FOLDER
        self._keys = keys
        self._missing: list[tuple[InstallKey, str]] = []  # each with its files' fingerprint before hashing
        self.used: list[str] = []

    def _path(self, key: InstallKey, digest: str) -> Path:
        return self.folder / f"{key.name}-{digest}.json"

    def use(self) -> None:
        for key in self._keys():
            try:
                digest = fingerprint(key)
            except Exception as exc:  # noqa: BLE001 - a file gone mid-scan (an install running): hashed as usual
                log.debug("tunesmith: the %s installation cannot be fingerprinted: %s", key.name, exc)
                continue
            try:
                value = _read(self._path(key, digest))
                if value is not None and key.known(value):
                    self.used.append(key.name)
                    continue
            except Exception as exc:  # noqa: BLE001 - not a value this key can take: hashed and stored anew
                log.debug("tunesmith: the stored %s installation key is not usable: %s", key.name, exc)
            self._missing.append((key, digest))
        if self.used:
            bump("install_keys_remembered", len(self.used))
            log.debug("tunesmith: remembered installation keys: %s", ", ".join(self.used))

    def store(self) -> None:
        """After an Inductor compile: store each key this process hashed and found no memo of, where
        its files fingerprint as they did before it was hashed (else the value may be of other files)."""
        missing, self._missing = self._missing, []
        for key, digest in missing:
            try:
                value = key.computed()
                if value is None:
                    self._missing.append((key, digest))  # not hashed yet: at the next compile
                elif fingerprint(key) == digest:
                    _write(self._path(key, digest), value)
                else:
                    log.debug("tunesmith: the %s installation changed while it was hashed: not stored", key.name)
            except Exception as exc:  # noqa: BLE001 - the next process hashes again
                log.debug("tunesmith: the %s installation key was not stored: %s", key.name, exc)


def _read(path: Path) -> str | None:
    """The value stored at ``path``: only from a file of this user (a cache folder shared by the users
    of a machine gives none of them another's keys)."""
    try:
        with path.open("rb") as f:
            if hasattr(os, "getuid") and os.fstat(f.fileno()).st_uid != os.getuid():
                return None
            raw = f.read(MAX_BYTES + 1)
        data: Any = load_json(raw) if len(raw) <= MAX_BYTES else None
    except (OSError, BadEntry):
        return None
    value = data.get("key") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


def _write(path: Path, value: str) -> None:
    write_atomically(path, json.dumps({"key": value}).encode())


_memo: Memo | None = None


def remember(root: Path | None) -> Memo | None:
    """Once a process, before Inductor hashes: set the keys stored in ``root`` (the local cache folder;
    None: none is kept). Returns the memo whose :meth:`Memo.store` stores the rest."""
    global _memo
    if _memo is None and root is not None:
        _memo = Memo(root)
        _memo.use()
    return _memo
