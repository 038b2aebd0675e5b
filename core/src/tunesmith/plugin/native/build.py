"""Build native sources (C++, CUDA, HIP) into shared libraries, once per machine: a library is cached
on disk under the SHA-256 of everything that goes into it, and loaded from there afterwards.

A plugin describes its compiler once as a :class:`Compiler` (the tool, its flags, how it names the
GPU target); the rest is shared:

- :func:`build_key`: the SHA-256 of the parts (source, compiler version, flags, target, headers);
- :func:`trusted`: whether a cached library may be loaded (loading runs its code);
- :func:`build`: the cached library of a key, or a fresh compile into a temporary folder of the cache,
  renamed into place atomically (a concurrent build of the same key writes the same file, and the
  last rename wins), with a timeout that kills the compiler's whole process group, and the end of
  its output in the error. Builds of one key take turns (a lock file per key; the second finds
  the first's library), so a key compiles once even across processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import attrs
import platformdirs

try:  # POSIX: builds of one key take turns across processes
    import fcntl
except ImportError:  # pragma: no cover - Windows: threads of one process still take turns
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: characters of the compiler's output kept in a BuildError
STDERR_TAIL = 3000


class BuildError(RuntimeError):
    """The compiler could not build a library; the message carries the end of its output."""


def cache_root(cache_dir: str | None, name: str) -> Path:
    """Where a plugin's libraries live: ``<cache_dir>/<name>`` (the core's ``cache_dir`` setting),
    else the user cache dir of tunesmith."""
    base = Path(cache_dir) if cache_dir else Path(platformdirs.user_cache_dir("tunesmith"))
    return base / name


def build_key(*parts: str) -> str:
    """SHA-256 of the parts, in order: equal keys, equal libraries."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@cache
def _version(compiler: str, mtime_ns: int) -> str:
    proc = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60, check=False)
    return proc.stdout + proc.stderr


def compiler_version(compiler: str) -> str:
    """The compiler's ``--version`` output (asked once per compiler binary and process), so that a
    new toolkit in the same place builds new libraries; empty when it cannot be run."""
    path = os.path.realpath(compiler)
    try:
        return _version(path, os.stat(path).st_mtime_ns)
    except (OSError, subprocess.SubprocessError):
        return ""


def trusted(path: Path) -> bool:
    """Whether a cached library may be loaded: a regular file (not a link, which could point at a
    library built for another key) owned by this user and writable by nobody else, so that another
    user of a shared cache_dir cannot plant one."""
    info = path.lstat()
    ours = info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return stat.S_ISREG(info.st_mode) and ours


#: keys whose compile failed in this process, with the error: not compiled again (a failure of
#: the same source, compiler and flags repeats; a timeout is not remembered)
_failed: dict[str, str] = {}
_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@contextlib.contextmanager
def _turn(root: Path, key: str, timeout_s: float, tool: str) -> Iterator[None]:
    """Hold the build of ``key``: a lock per key among this process's threads, and a lock file
    (beside ``root``, so that ``root`` holds only sources and libraries) among processes. Waiting
    for another build of the key (a stopped or hung process may hold it) ends after ``timeout_s``
    with a :class:`BuildError`."""
    with _thread_locks_guard:
        lock = _thread_locks.setdefault(key, threading.Lock())
    deadline = time.monotonic() + timeout_s
    if not lock.acquire(timeout=timeout_s):
        raise BuildError(f"{tool}: another thread's build of {key[:12]} held it for {timeout_s:.0f} s")
    try:
        if fcntl is None:
            yield
            return
        folder = root.with_name(f".{root.name}-locks")
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{key}.lock", "a") as handle:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise BuildError(
                            f"{tool}: another process's build of {key[:12]} held it for {timeout_s:.0f} s"
                        ) from None
                    time.sleep(0.1)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        lock.release()


def _cached(library: Path, what: str) -> bool:
    if not library.is_file():
        return False
    if trusted(library):
        log.debug("%s: library %s found in the cache", what, library.name)
        return True
    log.warning(
        "%s: %s is not ours alone (a link, another owner, or writable by others): building it again", what, library
    )
    return False


def _run(command: list[str], timeout_s: float, tool: str, key: str) -> subprocess.CompletedProcess[str]:
    """Run the compiler in a process group of its own, killed whole on timeout (nvcc and hipcc
    start the real compilers as children)."""
    try:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except OSError as exc:
        raise BuildError(f"{tool} could not start ({command[0]}): {exc}") from exc
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise BuildError(f"{tool} ran past {timeout_s:g} s building {key[:12]}") from exc
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def build(
    source: str,
    key: str,
    root: Path,
    command: Callable[[str, str], list[str]],
    *,
    suffix: str,
    tool: str,
    timeout_s: float,
    what: str = "native build",
) -> Path:
    """The library ``<root>/<key>.so`` built from ``source``: from the cache when present and
    trusted, else compiled now (the source is kept beside it as ``<key><suffix>``).
    ``command(source_path, output_path)`` is the compiler's argv; ``tool`` names it in errors.
    Raises :class:`BuildError` when the compiler cannot start, fails or runs past ``timeout_s``."""
    library = root / f"{key}.so"
    if _cached(library, what):
        return library
    if key in _failed:
        raise BuildError(f"{_failed[key]}\n(failed before in this process: not compiled again)")
    root.mkdir(parents=True, exist_ok=True)
    with _turn(root, key, timeout_s, tool):
        if _cached(library, what):  # built by another thread or process while this one waited
            return library
        with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as folder:
            src, out = Path(folder) / f"{key}{suffix}", Path(folder) / f"{key}.so"
            src.write_text(source)
            log.info("%s: building %s", what, key[:12])
            proc = _run(command(str(src), str(out)), timeout_s, tool, key)
            if proc.returncode != 0 or not out.is_file():
                tail = ((proc.stderr or "") + (proc.stdout or ""))[-STDERR_TAIL:]
                _failed[key] = f"{tool} failed (exit {proc.returncode}) building {key[:12]}:\n{tail}"
                raise BuildError(_failed[key])
            out.chmod(out.stat().st_mode & ~(stat.S_IWGRP | stat.S_IWOTH))
            os.replace(src, root / f"{key}{suffix}")
            os.replace(out, library)  # atomic: a concurrent build of the same key writes the same file
    return library


@attrs.frozen
class Compiler:
    """A plugin's compiler: ``tool`` names it in errors, ``plugin`` names the cache folder and the logs,
    sources are written with ``suffix``, every build passes ``flags``, and ``target`` is the option
    naming the GPU target, with ``{}`` where the target goes (``--offload-arch={}``)."""

    plugin: str
    tool: str
    suffix: str
    flags: tuple[str, ...]
    target: str

    def root(self, cache_dir: str | None) -> Path:
        """Where this plugin's libraries live (:func:`cache_root`)."""
        return cache_root(cache_dir, self.plugin)

    def command(self, compiler: str, source: str, output: str, target: str, include: str) -> list[str]:
        """The command line building ``source`` into the shared library ``output`` for ``target``."""
        return [compiler, *self.flags, self.target.format(target), "-I", include, "-o", output, source]

    def key(self, source: str, compiler: str, target: str, include: str, headers_version: str = "") -> str:
        """SHA-256 of everything the library depends on: the source, the compiler's ``--version``
        output (a new toolkit in the same place builds anew), the flags, the target and the headers."""
        version = compiler_version(compiler)
        return build_key(source, version, " ".join(self.flags), target, include, headers_version)

    def build(
        self, source: str, compiler: str, target: str, include: str, headers_version: str, root: Path, timeout_s: float
    ) -> Path:
        """The library built from ``source``: from the cache when present, else compiled now (the
        source is kept beside it). Raises :class:`BuildError` when the compiler cannot start, fails
        or runs past ``timeout_s``."""
        return build(
            source,
            self.key(source, compiler, target, include, headers_version),
            root,
            lambda src, out: self.command(compiler, src, out, target, include),
            suffix=self.suffix,
            tool=self.tool,
            timeout_s=timeout_s,
            what=f"{self.plugin} ({target})",
        )
