"""Build a rendered instance into a shared library with nvcc, once per machine: libraries are cached
under ``<cache_dir>/cutlass/`` by the SHA-256 of the source, nvcc's ``--version`` output, the flags
and the headers' version (``tunesmith.native_build`` does the caching, the trust check, the lock
per key and the atomic compile; this module supplies nvcc's part)."""

from __future__ import annotations

from pathlib import Path

from tunesmith import native_build
from tunesmith.native_build import BuildError
from tunesmith_cutlass.render import NVCC_FLAGS, nvcc_command

__all__ = ["BuildError", "build", "build_key", "cache_root"]


def cache_root(cache_dir: str | None) -> Path:
    """Where libraries live: ``<cache_dir>/cutlass`` (the core's ``cache_dir`` setting), else the user cache dir."""
    return native_build.cache_root(cache_dir, "cutlass")


def build_key(source: str, nvcc: str, gencode: str, include: str, headers_version: str) -> str:
    """SHA-256 of everything the library depends on: equal keys, equal libraries."""
    version = native_build.compiler_version(nvcc)
    return native_build.build_key(source, version, " ".join(NVCC_FLAGS), gencode, include, headers_version)


def build(
    source: str, nvcc: str, gencode: str, include: str, headers_version: str, root: Path, timeout_s: float
) -> Path:
    """The library built from ``source``: from the cache when present, else compiled now (the ``.cu``
    is kept beside it). Raises :class:`BuildError` when nvcc cannot start, fails or times out."""
    return native_build.build(
        source,
        build_key(source, nvcc, gencode, include, headers_version),
        root,
        lambda src, out: nvcc_command(nvcc, src, out, gencode, include),
        suffix=".cu",
        tool="nvcc",
        timeout_s=timeout_s,
        what=f"cutlass ({gencode})",
    )
