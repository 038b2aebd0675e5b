"""A kernel signature's launcher, built beside a tune's compiles instead of after them.

Triton before 3.7 compiles a C launcher for each new kernel signature (about half a second on the
H100 machine), on the first load of a kernel with that signature. Every config of a template
shares the Problem's signature, and a tune's configs all finish compiling at about the same time,
so each compile process would build that launcher only after its compile. Instead, the first
precompile of a signature claims it (a marker file in Triton's cache folder) and compiles a small
config of the same template on a thread: that compile is short, so the launcher is built while
the real configs are still compiling, and they find it in Triton's cache.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import triton

log = logging.getLogger(__name__)

#: the folder in Triton's cache holding one marker per claimed signature
MARKERS = "tunesmith-launchers"


def compiled_per_signature() -> bool:
    """Whether this Triton compiles a launcher for each kernel signature (3.6 does, 3.9 does not)."""
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return False
    return hasattr(driver, "make_launcher")


def signature_key(kernel: Any, args: Sequence[Any]) -> str:
    """What a launcher depends on: the kernel, and each argument's kind as Triton specialises it
    (a pointer, a descriptor of so many dimensions, a bool, an int equal to 1 (a constant), a 32-
    or 64-bit int, a float, None); never its value or dtype."""
    kinds = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            kinds.append("p")
        elif isinstance(arg, bool):
            kinds.append("b")
        elif arg is None:
            kinds.append("c")
        elif isinstance(arg, int):
            kinds.append("c" if arg == 1 else "l" if not -(2**31) <= arg < 2**31 else "i")
        elif isinstance(arg, float):
            kinds.append("f")
        else:  # a tensor descriptor
            kinds.append(f"d{len(getattr(arg, 'shape', ()))}")
    text = f"{triton.__version__}:{getattr(kernel, '__name__', kernel)}:{''.join(kinds)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cache_folder() -> Path:
    """Triton's cache folder, as Triton finds it."""
    knobs = getattr(triton, "knobs", None)
    folder = getattr(getattr(knobs, "cache", None), "dir", None)
    return Path(folder or os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def claim(folder: Path, key: str) -> bool:
    """True for the first caller with ``key`` in ``folder`` (across processes), False after."""
    markers = folder / MARKERS
    try:
        markers.mkdir(parents=True, exist_ok=True)
        os.close(os.open(markers / key, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError as exc:  # a read-only cache: the launcher is built the usual way
        log.debug("cannot claim a launcher in %s: %s", markers, exc)
        return False
    return True


def build_early(
    kernel: Any, args: Sequence[Any], probe: Callable[[], None], device: int = 0
) -> threading.Thread | None:
    """Run ``probe`` (a small config's compile and load on GPU ``device``) on a thread when this
    Triton compiles launchers and ``kernel`` with ``args`` is the first of its signature here;
    the thread (to join), or None."""
    if not compiled_per_signature() or not claim(cache_folder(), signature_key(kernel, args)):
        return None

    def run() -> None:
        try:
            with torch.cuda.device(device):  # a new thread starts on GPU 0
                probe()
        except Exception as exc:  # noqa: BLE001 - the real compile builds the launcher then
            log.debug("early launcher build failed: %s", exc)

    thread = threading.Thread(target=run, name="tunesmith-launcher", daemon=True)
    thread.start()
    return thread
