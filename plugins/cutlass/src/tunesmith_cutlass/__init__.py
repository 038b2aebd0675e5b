"""tunesmith-cutlass: CUTLASS GEMM instances for mm, addmm and bmm in float16, bfloat16 and float32
(as TF32) on NVIDIA GPUs, with the Problem's epilogue fused through CUTLASS's epilogue visitor
trees: CUTLASS 3.x warp-specialised TMA/wgmma kernels on Hopper, CUTLASS 2.x multistage kernels
from Ampere on. Each instance is rendered as C++ and built with nvcc into a shared library that
serves every Problem of its kind (sizes and strides are run-time arguments).

It offers choices only with a CUDA GPU of compute capability 8.0 or more, nvcc and the CUTLASS
headers (the nvidia-cutlass package); anywhere else ``tunesmith plugins`` names what is missing
and it offers nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

import tunesmith
from tunesmith.ops import tf32_allowed
from tunesmith.config import parse_int, parse_optional_str, parse_seconds
from tunesmith_cutlass.build import cache_root
from tunesmith_cutlass.choice import CutlassChoice
from tunesmith_cutlass.cost import estimate_ms, rank
from tunesmith_cutlass.environment import Environment, probe
from tunesmith_cutlass.gemm import DTYPES, OPS, Unsupported, describe
from tunesmith_cutlass.instances import Instance, enumerate_instances, for_family, validate
from tunesmith_hookspecs import Choice, ChoiceSpec, DeviceInfo, PluginStatus, Problem, hookimpl

__all__ = [
    "CutlassChoice",
    "choices_for",
    "rebuild_for",
    "tunesmith_add_options",
    "tunesmith_choices",
    "tunesmith_estimate_runtime",
    "tunesmith_plugin_status",
    "tunesmith_rebuild_choice",
]

log = logging.getLogger(__name__)

NAME = "cutlass"
#: the ChoiceSpec template of each kernel family
TEMPLATES = {"sm90": "gemm_sm90_tma_ws", "sm80": "gemm_sm80_multistage"}
#: SMs assumed when the GPU does not say (an H100 SXM has 132)
DEFAULT_SMS = 132
#: seconds one nvcc run may take by default (an sm90 instance takes about 100 s on 2 CPU cores)
DEFAULT_TIMEOUT_S = 600.0


@hookimpl
def tunesmith_add_options(options: Any) -> None:
    options.add(
        "cutlass_dir",
        None,
        parse_optional_str,
        "CUTLASS checkout or install (holds include/cutlass/cutlass.h); none = the nvidia-cutlass package's headers",
    )
    options.add(
        "cutlass_max_instances", 4, parse_int(1), "CUTLASS instances offered per problem (each is one nvcc build)"
    )
    options.add(
        "cutlass_compile_timeout_s",
        DEFAULT_TIMEOUT_S,
        lambda value: parse_seconds(value, optional=False),
        "seconds one nvcc build of a CUTLASS instance may take",
    )


def served_dtypes() -> tuple[str, ...]:
    """The input dtypes served now: float32 only while torch lets float32 matmuls use TF32
    (``torch.set_float32_matmul_precision('high')``, or ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``)."""
    if torch.get_float32_matmul_precision() == "highest":
        return tuple(d for d in DTYPES if d != "float32")
    return DTYPES


@hookimpl
def tunesmith_plugin_status(options: Any) -> PluginStatus:
    env = probe(options.cutlass_dir)
    return PluginStatus(env.runnable, env.reason, ops=OPS, dtypes=served_dtypes(), devices=("cuda",))


def choices_for(problem: Problem, env: Environment, root: Path, limit: int, timeout_s: float) -> list[CutlassChoice]:
    """The best ``limit`` valid instances for ``problem`` on ``env``'s GPU (none where it does not fit)."""
    if problem.device != "cuda" or env.arch is None:
        return []
    try:
        gemm = describe(problem, tf32_allowed(problem))
    except Unsupported as exc:
        log.debug("cutlass: no choices for %s: %s", problem.op, exc)
        return []
    valid, rejected = enumerate_instances(gemm, env.arch)
    if not valid:
        log.debug("cutlass: no valid instance for %s; first refusal: %s", problem.op, rejected[:1])
    best = rank(valid, gemm, env.arch, env.multiprocessors or DEFAULT_SMS)[:limit]
    return [
        CutlassChoice(
            ChoiceSpec(NAME, TEMPLATES[inst.family], inst.params()),
            problem,
            for_family(gemm, inst.family),
            inst,
            env,
            root,
            timeout_s,
        )
        for inst in best
    ]


@hookimpl
def tunesmith_choices(problem: Problem, options: Any) -> list[Choice]:
    env = probe(options.cutlass_dir)
    if not env.runnable:
        return []
    root = cache_root(options.cache_dir)
    return list(choices_for(problem, env, root, options.cutlass_max_instances, options.cutlass_compile_timeout_s))


def rebuild_for(
    spec: ChoiceSpec, problem: Problem, env: Environment, root: Path, timeout_s: float
) -> CutlassChoice | None:
    """The choice a cached spec names, if it is still a valid instance for ``problem`` on this GPU."""
    if spec.backend != NAME or spec.template not in TEMPLATES.values() or env.arch is None:
        return None
    if problem.device != "cuda":
        return None
    try:
        inst = Instance.from_params(spec.params)
        gemm = describe(problem, tf32_allowed(problem))
    except (TypeError, ValueError):  # params of another version, or a problem no longer served
        return None
    if TEMPLATES.get(inst.family) != spec.template or validate(inst, gemm, env.arch):
        return None
    return CutlassChoice(spec, problem, for_family(gemm, inst.family), inst, env, root, timeout_s)


@hookimpl
def tunesmith_rebuild_choice(spec: ChoiceSpec, problem: Problem) -> Choice | None:
    if spec.backend != NAME:
        return None
    options = tunesmith.current_options()
    env = probe(options.cutlass_dir)
    if not env.runnable:
        return None
    return rebuild_for(spec, problem, env, cache_root(options.cache_dir), options.cutlass_compile_timeout_s)


@hookimpl
def tunesmith_estimate_runtime(node: Any, device: DeviceInfo) -> float | None:
    """Our choices' estimates (``cost.py``); anything else is left to other plugins."""
    if not isinstance(node, CutlassChoice) or node.env.arch is None:
        return None
    sms = device.multiprocessors or node.env.multiprocessors or DEFAULT_SMS
    return estimate_ms(node.instance, node.gemm, node.problem, node.env.arch, device, sms)
