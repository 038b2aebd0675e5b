"""The hooks of a native-kernel plugin, written once: its options, its status, its choices for a
Problem (the best valid instances on this GPU) and the rebuild of a cached spec. A plugin makes one
:class:`NativeBackend` of what is its own (probing, describing a Problem, its instances, their
ranking and its choice type) and binds its hooks as its module's hook functions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from tunesmith.config import parse_int, parse_optional_str, parse_seconds
from tunesmith.plugin.native.choice import NativeChoice
from tunesmith.plugin.native.environment import Environment
from tunesmith.plugin.native.gemm import OPS, Unsupported
from tunesmith.plugin.native.params import InstanceParams, Rejected
from tunesmith.settings import current_options
from tunesmith_hookspecs import Choice, ChoiceSpec, PluginStatus, Problem, hookimpl

log = logging.getLogger(__name__)


def add_options(
    options: Any, plugin: str, where: str, instances: tuple[int, str], timeout: tuple[float, str] | None = None
) -> None:
    """Declare a plugin's settings: ``<plugin>_dir`` (``where``: its help), ``<plugin>_max_instances``
    (default and help), and, given ``timeout``, ``<plugin>_compile_timeout_s`` (default and help)."""
    options.add(f"{plugin}_dir", None, parse_optional_str, where)
    options.add(f"{plugin}_max_instances", instances[0], parse_int(1), instances[1])
    if timeout is not None:
        options.add(
            f"{plugin}_compile_timeout_s", timeout[0], lambda value: parse_seconds(value, optional=False), timeout[1]
        )


class Instances(Protocol):
    """What a plugin's instances module holds: the instance record, the enumeration of the valid
    instances for a GEMM on a GPU (with the refused ones), and the rules."""

    Instance: type[InstanceParams]

    def enumerate_instances(self, gemm: Any, arch: Any) -> tuple[list[Any], list[Rejected]]: ...

    def validate(self, inst: Any, gemm: Any, arch: Any) -> list[str]: ...


@attrs.frozen
class NativeBackend:
    """A native-kernel plugin's choices and hooks, from its parts: its ``name`` (the ChoiceSpec
    backend, and the prefix of its settings), the input ``dtypes`` served, ``probe`` (the environment
    for the ``<name>_dir`` setting), ``describe`` (a Problem as its GEMM, or :class:`Unsupported`),
    its ``instances`` module, its ``choice_type``, and ``build_timeout_s`` where it has no
    ``<name>_compile_timeout_s`` setting. A subclass supplies :meth:`rank` and :meth:`template`."""

    name: str
    dtypes: tuple[str, ...]
    probe: Callable[[str | None], Environment]
    describe: Callable[[Problem], Any]
    instances: Instances
    choice_type: type[NativeChoice]
    build_timeout_s: float | None = None

    def arch(self, env: Environment) -> Any | None:
        """The GPU as the instances module takes it; None where no instance runs."""
        return env.arch

    def rank(self, valid: list[Any], gemm: Any, arch: Any, env: Environment) -> list[Any]:
        """The valid instances, most promising first."""
        raise NotImplementedError

    def template(self, inst: Any, problem: Problem) -> str | None:
        """The ChoiceSpec template of an instance for a Problem (None: none)."""
        raise NotImplementedError

    def gemm_for(self, gemm: Any, inst: Any) -> Any:
        """The GEMM as ``inst`` computes it (the same, unless the plugin says otherwise)."""
        return gemm

    def served_dtypes(self) -> tuple[str, ...]:
        """The input dtypes served now."""
        return self.dtypes

    # --- written once -----------------------------------------------------------------------------

    def choices_for(
        self, problem: Problem, env: Environment, root: Path, limit: int, timeout_s: float
    ) -> list[NativeChoice]:
        """The best ``limit`` valid instances for ``problem`` on ``env``'s GPU (none where it does not fit)."""
        arch = self.arch(env)
        if problem.device != "cuda" or arch is None:
            return []
        try:
            gemm = self.describe(problem)
        except Unsupported as exc:
            log.debug("%s: no choices for %s: %s", self.name, problem.op, exc)
            return []
        valid, rejected = self.instances.enumerate_instances(gemm, arch)
        if not valid:
            log.debug("%s: no valid instance for %s; first refusal: %s", self.name, problem.op, rejected[:1])
        best = self.rank(valid, gemm, arch, env)[:limit]
        return [self._choice(self.spec(inst, problem), problem, gemm, inst, env, root, timeout_s) for inst in best]

    def rebuild_for(
        self, spec: ChoiceSpec, problem: Problem, env: Environment, root: Path, timeout_s: float
    ) -> NativeChoice | None:
        """The choice a cached spec names, if it is still a valid instance for ``problem`` on this GPU."""
        arch = self.arch(env)
        if spec.backend != self.name or problem.device != "cuda" or arch is None:
            return None
        try:
            inst = self.instances.Instance.from_params(spec.params)
            gemm = self.describe(problem)
        except (TypeError, ValueError):  # params of another version, or a problem no longer served
            return None
        if self.template(inst, problem) != spec.template or self.instances.validate(inst, gemm, arch):
            return None
        return self._choice(spec, problem, gemm, inst, env, root, timeout_s)

    def spec(self, inst: Any, problem: Problem) -> ChoiceSpec:
        """The ChoiceSpec naming ``inst`` for ``problem``: its template, and every parameter."""
        template = self.template(inst, problem)
        if template is None:
            raise ValueError(f"{self.name}: instance {inst} has no template for this problem")
        return ChoiceSpec(self.name, template, inst.params())

    def _choice(
        self, spec: ChoiceSpec, problem: Problem, gemm: Any, inst: Any, env: Environment, root: Path, timeout_s: float
    ) -> NativeChoice:
        return self.choice_type(spec, problem, self.gemm_for(gemm, inst), inst, env, root, timeout_s)

    def timeout_s(self, options: Any) -> float:
        """Seconds one build may take: the plugin's setting, else its fixed limit."""
        if self.build_timeout_s is not None:
            return self.build_timeout_s
        return float(getattr(options, f"{self.name}_compile_timeout_s"))

    def _ready(self, options: Any) -> tuple[Environment, Path]:
        return self.probe(getattr(options, f"{self.name}_dir")), self.choice_type.compiler.root(options.cache_dir)

    def hooks(self) -> tuple[Callable[..., Any], ...]:
        """The hooks the plugin's module binds under their names, where pluggy finds them:
        ``tunesmith_plugin_status``, ``tunesmith_choices`` and ``tunesmith_rebuild_choice``."""
        return self.tunesmith_plugin_status, self.tunesmith_choices, self.tunesmith_rebuild_choice

    @hookimpl
    def tunesmith_plugin_status(self, options: Any) -> PluginStatus:
        env = self.probe(getattr(options, f"{self.name}_dir"))
        return PluginStatus(env.runnable, env.reason, ops=OPS, dtypes=self.served_dtypes(), devices=("cuda",))

    @hookimpl
    def tunesmith_choices(self, problem: Problem, options: Any) -> list[Choice]:
        env, root = self._ready(options)
        if not env.runnable:
            return []
        limit = getattr(options, f"{self.name}_max_instances")
        return list(self.choices_for(problem, env, root, limit, self.timeout_s(options)))

    @hookimpl
    def tunesmith_rebuild_choice(self, spec: ChoiceSpec, problem: Problem) -> Choice | None:
        if spec.backend != self.name:
            return None
        options = current_options()
        env, root = self._ready(options)
        if not env.runnable:
            return None
        return self.rebuild_for(spec, problem, env, root, self.timeout_s(options))
