"""Build a rendered instance into a shared library with hipcc, once per source: libraries are cached
on disk under the hash of everything that goes into them (``tunesmith.native_build`` does the
caching, the trust check and the atomic compile; this module supplies hipcc's part)."""

from __future__ import annotations

import os
from pathlib import Path

from tunesmith import native_build
from tunesmith.native_build import BuildError
from tunesmith_ck.render import HIPCC_FLAGS, hipcc_command

__all__ = ["BUILD_TIMEOUT_S", "BuildError", "build", "build_key", "cache_root"]

#: seconds one hipcc run may take (CK instances are template-heavy; never measured here)
BUILD_TIMEOUT_S = 900


def cache_root(cache_dir: str | None) -> Path:
    """Where libraries live: ``<cache_dir>/ck`` (the core's ``cache_dir`` setting), else the user cache dir."""
    return native_build.cache_root(cache_dir, "ck")


def build_key(source: str, hipcc: str, arch: str, ck_include: str) -> str:
    """SHA-256 of the source, the compiler, the target and the CK headers used: equal keys, equal libraries."""
    return native_build.build_key(source, os.path.realpath(hipcc), arch, ck_include, " ".join(HIPCC_FLAGS))


def build(source: str, hipcc: str, arch: str, ck_include: str, root: Path) -> Path:
    """The library built from ``source``: from the cache when present, else compiled now (the source is
    kept beside it). Raises :class:`BuildError` when hipcc cannot start, fails or times out."""
    return native_build.build(
        source,
        build_key(source, hipcc, arch, ck_include),
        root,
        lambda src, out: hipcc_command(hipcc, src, out, arch, ck_include),
        suffix=".cpp",
        tool="hipcc",
        timeout_s=BUILD_TIMEOUT_S,
        what=f"ck ({arch})",
    )
