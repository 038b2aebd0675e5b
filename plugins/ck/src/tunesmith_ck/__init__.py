"""tunesmith-ck: Composable Kernel's universal XDL GEMM (multiple-D epilogue) for mm, addmm and bmm
in float16 and bfloat16 on AMD GPUs, one instance per choice, rendered and built with hipcc.

It offers choices only on a ROCm build of torch with an AMD GPU that has XDL units, hipcc and the
CK headers; anywhere else ``tunesmith plugins`` names what is missing and it offers nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import tunesmith
from tunesmith.config import parse_int, parse_optional_str
from tunesmith_ck.arch import arch_of
from tunesmith_ck.build import cache_root
from tunesmith_ck.choice import CKChoice
from tunesmith_ck.environment import Environment, probe
from tunesmith_ck.gemm import DTYPES, OPS, Unsupported, describe
from tunesmith_ck.instances import Instance, enumerate_instances, rank, validate
from tunesmith_hookspecs import Choice, ChoiceSpec, PluginStatus, Problem, hookimpl

__all__ = [
    "CKChoice",
    "choices_for",
    "rebuild_for",
    "tunesmith_add_options",
    "tunesmith_choices",
    "tunesmith_plugin_status",
    "tunesmith_rebuild_choice",
]

log = logging.getLogger(__name__)

NAME = "ck"
#: the ChoiceSpec template of each op: the CK device operation it instantiates
TEMPLATES = {
    "mm": "gemm_multiple_d_xdl_cshuffle_v3",
    "addmm": "gemm_multiple_d_xdl_cshuffle_v3",
    "bmm": "batched_gemm_multiple_d_xdl_cshuffle_v3",
}
#: compute units assumed when the GPU does not say (an MI300X has 304)
DEFAULT_UNITS = 304


@hookimpl
def tunesmith_add_options(options: Any) -> None:
    options.add(
        "ck_dir",
        None,
        parse_optional_str,
        "Composable Kernel install prefix (holds include/ck/ck.hpp); none = ROCm's own under $ROCM_PATH",
    )
    options.add("ck_max_instances", 8, parse_int(1), "CK instances offered per problem (each is one hipcc build)")


@hookimpl
def tunesmith_plugin_status(options: Any) -> PluginStatus:
    env = probe(options.ck_dir)
    return PluginStatus(env.runnable, env.reason, ops=OPS, dtypes=DTYPES, devices=("cuda",))


def choices_for(problem: Problem, env: Environment, root: Path, limit: int) -> list[CKChoice]:
    """The best ``limit`` valid instances for ``problem`` on ``env``'s GPU (none where it does not fit)."""
    arch = arch_of(env.arch or "")
    if problem.device != "cuda" or arch is None:
        return []
    try:
        gemm = describe(problem)
    except Unsupported as exc:
        log.debug("ck: no choices for %s: %s", problem.op, exc)
        return []
    valid, _ = enumerate_instances(gemm, arch)
    best = rank(valid, gemm, env.multiprocessors or DEFAULT_UNITS)[:limit]
    template = TEMPLATES[problem.op]
    return [CKChoice(ChoiceSpec(NAME, template, inst.params()), problem, gemm, inst, env, root) for inst in best]


@hookimpl
def tunesmith_choices(problem: Problem, options: Any) -> list[Choice]:
    env = probe(options.ck_dir)
    if not env.runnable:
        return []
    return list(choices_for(problem, env, cache_root(options.cache_dir), options.ck_max_instances))


def rebuild_for(spec: ChoiceSpec, problem: Problem, env: Environment, root: Path) -> CKChoice | None:
    """The choice a cached spec names, if it is still a valid instance for ``problem`` on this GPU."""
    arch = arch_of(env.arch or "")
    if spec.backend != NAME or spec.template != TEMPLATES.get(problem.op) or arch is None:
        return None
    try:
        inst = Instance.from_params(spec.params)
        gemm = describe(problem)
    except (TypeError, ValueError):  # params of another version, or a problem no longer served
        return None
    if validate(inst, gemm, arch):
        return None
    return CKChoice(spec, problem, gemm, inst, env, root)


@hookimpl
def tunesmith_rebuild_choice(spec: ChoiceSpec, problem: Problem) -> Choice | None:
    if spec.backend != NAME:
        return None
    options = tunesmith.current_options()
    env = probe(options.ck_dir)
    if not env.runnable:
        return None
    return rebuild_for(spec, problem, env, cache_root(options.cache_dir))
