"""What a native-kernel plugin needs on this machine (a GPU it can target, its compiler, the kernel
library's headers) and which of it is missing: the plugin runs exactly when nothing is."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs


class Probed:
    """Mixin of an attrs record of the tools found on this machine: ``missing`` names each piece
    that is not, so the plugin can run exactly when nothing is missing."""

    missing: tuple[str, ...]

    @property
    def runnable(self) -> bool:
        return not self.missing

    @property
    def reason(self) -> str:
        """What ``tunesmith plugins`` shows: empty when runnable, else every missing piece."""
        return "" if self.runnable else "missing " + "; ".join(self.missing)


@attrs.frozen
class Environment(Probed):
    """The tools found here: the GPU as the plugin describes it (``arch``), the compiler, the headers'
    include folder and their version (part of the build key), and the GPU's multiprocessors."""

    arch: Any = None
    compiler: str | None = None
    include: str | None = None
    multiprocessors: int | None = None
    headers_version: str = ""
    missing: tuple[str, ...] = ()


def find_tool(name: str, places: Iterable[Path]) -> str | None:
    """``name`` on PATH, else the first of ``places`` that is an executable file."""
    found = shutil.which(name)
    if found:
        return found
    return next((str(p) for p in places if p.is_file() and os.access(p, os.X_OK)), None)


def gather(
    gpu: tuple[Any, int | None, list[str]],
    compiler: str | None,
    no_compiler: str,
    headers: tuple[str | None, str, str],
) -> Environment:
    """The environment of what was probed: ``gpu`` (its arch, multiprocessors and what is missing for
    it), the compiler (``no_compiler`` says what is missing without it) and ``headers`` (the include
    folder, its version, and why none was found)."""
    arch, units, missing = gpu
    if compiler is None:
        missing.append(no_compiler)
    include, version, why = headers
    if include is None:
        missing.append(why)
    return Environment(arch, compiler, include, units, version, tuple(missing))
