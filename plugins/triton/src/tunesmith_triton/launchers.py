"""A kernel signature's launcher, built beside its first compile instead of after it.

Triton before 3.7 compiles a C launcher for each new kernel signature (about half a second on the
H100 machine), on the first load of a kernel with that signature. Every config of a template
shares the Problem's signature, and a tune's configs all finish compiling at about the same time,
so each compile process would build that launcher only after its compile. Instead, the first
precompile of a signature claims it (a marker file in Triton's cache folder), and as its compile
starts, the launcher is built from the signature alone on a thread, while the kernel compiles:
no kernel is compiled for it, so it is ready about one C compile after the tune starts, and the
other configs find it in Triton's cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
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


def build_launcher(signature: dict[str, Any]) -> None:
    """Build and cache the launcher of a kernel of this signature (Triton's, as the compile hook
    sees it) as Triton 3.6 would at the kernel's first load: its C source depends only on the
    arguments' types, and on whether tensor descriptors were lowered to TMA ones, which they are
    wherever this plugin passes them (Hopper and later)."""
    from triton.backends.nvidia import driver
    from triton.runtime.build import compile_module_from_src

    descriptors = sum(isinstance(kind, str) and kind.startswith("tensordesc") for kind in signature.values())
    source = driver.make_launcher({}, signature, [True] * descriptors or None)
    compile_module_from_src(
        src=source,
        name="__triton_launcher",
        library_dirs=driver.library_dirs(),
        include_dirs=driver.include_dirs,
        libraries=driver.libraries,
    )


class _CompileHook:
    """Triton's compile hook (one per process, installed while a ``built_early`` is open): it
    starts what the compiling thread left pending, then calls the hook it displaced."""

    def __init__(self) -> None:
        self.lock, self.open, self.displaced = threading.Lock(), 0, None
        self.pending = threading.local()

    def __call__(self, **kwargs: Any) -> Any:
        start = getattr(self.pending, "start", None)
        if start is not None:
            self.pending.start = None
            start(dict(kwargs["compile"]["signature"]))
        return self.displaced(**kwargs) if self.displaced is not None else None

    def enter(self) -> None:
        with self.lock:
            if self.open == 0:
                self.displaced, triton.knobs.runtime.jit_cache_hook = triton.knobs.runtime.jit_cache_hook, self
            self.open += 1

    def leave(self) -> None:
        self.pending.start = None
        with self.lock:
            self.open -= 1
            if self.open == 0 and triton.knobs.runtime.jit_cache_hook is self:
                triton.knobs.runtime.jit_cache_hook = self.displaced


_HOOK = _CompileHook()


@contextlib.contextmanager
def built_early(kernel: Any, args: Sequence[Any]) -> Iterator[None]:
    """Around the compile of ``kernel`` for ``args``: when this Triton builds launchers and this is
    the first of its signature here, build that launcher on a thread as the compile starts
    (joined on leaving; best effort: the kernel's load builds it otherwise)."""
    if not compiled_per_signature() or not claim(cache_folder(), signature_key(kernel, args)):
        yield
        return
    threads: list[threading.Thread] = []

    def build(signature: dict[str, Any]) -> None:
        try:
            build_launcher(signature)
        except Exception as exc:  # noqa: BLE001 - the kernel's load builds it then
            log.debug("early launcher build failed: %s", exc)

    def start(signature: dict[str, Any]) -> None:
        threads.append(threading.Thread(target=build, args=(signature,), name="tunesmith-launcher", daemon=True))
        threads[0].start()

    _HOOK.enter()
    _HOOK.pending.start = start
    try:
        yield
    finally:
        _HOOK.leave()
        for thread in threads:
            thread.join()
