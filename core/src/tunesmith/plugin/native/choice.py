"""A native choice: one instance for one Problem, built and loaded by ``precompile()`` and called by
``kernel()`` through its library's C entry points. Where the plugin cannot run, both raise, saying why."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import torch

from tunesmith.plugin.native.build import Compiler
from tunesmith.plugin.native.environment import Environment
from tunesmith.plugin.native.library import Signature, load
from tunesmith_hookspecs import ChoiceSpec, Problem


@attrs.define(eq=False)
class NativeChoice:
    """One instance for one Problem. A plugin's subclass names its :attr:`compiler` and the
    :attr:`entries` of its libraries, and renders the source, names the target and makes the launch."""

    compiler: ClassVar[Compiler]
    entries: ClassVar[Mapping[str, Signature]]

    spec: ChoiceSpec
    problem: Problem
    gemm: Any
    instance: Any
    env: Environment
    cache_root: Path
    timeout_s: float
    _library: dict[str, Any] | None = attrs.field(default=None, init=False)

    def source(self) -> str:
        """The C++ source this choice builds."""
        raise NotImplementedError

    def target(self) -> str:
        """The GPU target the compiler builds for."""
        raise NotImplementedError

    def launch(self, library: dict[str, Any]) -> Callable[..., torch.Tensor]:
        """The call of the loaded library's entry points on the Problem's tensors."""
        raise NotImplementedError

    def precompile(self) -> None:
        """Build (or find in the cache) and load the library; raises where it cannot run."""
        if self._library is not None:
            return
        env = self.env
        if not env.runnable:
            raise RuntimeError(f"{self.spec} cannot be built here: {env.reason}")
        assert env.compiler and env.include  # runnable means both were found
        source, target = self.source(), self.target()
        path = self.compiler.build(
            source, env.compiler, target, env.include, env.headers_version, self.cache_root, self.timeout_s
        )
        self._library = load(path, self.compiler.plugin, self.instance.name, self.entries)

    def kernel(self) -> Callable[..., torch.Tensor]:
        """A callable on the Problem's tensors; raises unless precompile() succeeded here."""
        if self._library is None:
            why = self.env.reason or "precompile() has not built it"
            raise RuntimeError(f"{self.spec} has no built kernel in this process: {why}")
        return self.launch(self._library)


def check_alignment(tensors: Sequence[torch.Tensor], alignment: Sequence[tuple[int, int]]) -> None:
    """ValueError unless each (input index, bytes) of ``alignment`` holds: the instance reads those
    inputs with vector loads that need that alignment."""
    for index, align in alignment:
        if tensors[index].data_ptr() % align:
            raise ValueError(f"input {index} is not {align}-byte aligned, as this instance's vector loads need")
