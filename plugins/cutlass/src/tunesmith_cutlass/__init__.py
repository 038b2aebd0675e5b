"""tunesmith-cutlass: CUTLASS GEMM instances for mm, addmm and bmm in float16, bfloat16 and float32
(as TF32) on NVIDIA GPUs, with the Problem's epilogue fused through CUTLASS's epilogue visitor
trees: CUTLASS 3.x warp-specialised TMA/wgmma kernels on Hopper, CUTLASS 2.x multistage kernels
from Ampere on. Each instance is rendered as C++ and built with nvcc into a shared library that
serves every Problem of its kind (sizes and strides are run-time arguments).

It offers choices only with a CUDA GPU of compute capability 8.0 or more, nvcc and the CUTLASS
headers (the nvidia-cutlass package); anywhere else ``tunesmith plugins`` names what is missing
and it offers nothing.

The hooks, the build cache and the choices' plumbing are the plugin API's native-kernel framework
(``tunesmith.plugin.native``); this package keeps what is CUTLASS's own: the GPU generations, the
instances and their rules, the rendered C++, the launch and the cost model.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from tunesmith.plugin import tf32_allowed
from tunesmith.plugin.native import Environment, NativeBackend, add_options
from tunesmith_cutlass import instances
from tunesmith_cutlass.arch import Arch
from tunesmith_cutlass.choice import CutlassChoice
from tunesmith_cutlass.cost import estimate_ms, rank
from tunesmith_cutlass.environment import probe
from tunesmith_cutlass.gemm import DTYPES, Gemm, describe
from tunesmith_cutlass.instances import Instance, for_family
from tunesmith_hookspecs import DeviceInfo, Problem, hookimpl

__all__ = [
    "PLUGIN",
    "CutlassChoice",
    "choices_for",
    "rebuild_for",
    "tunesmith_add_options",
    "tunesmith_choices",
    "tunesmith_estimate_runtime",
    "tunesmith_plugin_status",
    "tunesmith_rebuild_choice",
]

#: the ChoiceSpec template of each kernel family
TEMPLATES = {"sm90": "gemm_sm90_tma_ws", "sm80": "gemm_sm80_multistage"}
#: SMs assumed when the GPU does not say (an H100 SXM has 132)
DEFAULT_SMS = 132
#: seconds one nvcc run may take by default (an sm90 instance takes about 100 s on 2 CPU cores)
DEFAULT_TIMEOUT_S = 600.0


@attrs.frozen
class Cutlass(NativeBackend):
    """CUTLASS's part of the plugin: its ranking, templates, the GEMM each family computes, and TF32."""

    def rank(self, valid: list[Instance], gemm: Gemm, arch: Arch, env: Environment) -> list[Instance]:
        return rank(valid, gemm, arch, env.multiprocessors or DEFAULT_SMS)

    def template(self, inst: Instance, problem: Problem) -> str | None:
        return TEMPLATES.get(inst.family)

    def gemm_for(self, gemm: Gemm, inst: Instance) -> Gemm:
        return for_family(gemm, inst.family)

    def served_dtypes(self) -> tuple[str, ...]:
        """Float32 only while torch lets float32 matmuls use TF32
        (``torch.set_float32_matmul_precision('high')``, or ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``)."""
        if torch.get_float32_matmul_precision() == "highest":
            return tuple(d for d in DTYPES if d != "float32")
        return DTYPES


def _describe(problem: Problem) -> Gemm:
    """The Problem as CUTLASS's GEMM, float32 as TF32 where torch allows it."""
    return describe(problem, tf32_allowed(problem))


PLUGIN = Cutlass("cutlass", DTYPES, probe, _describe, instances, CutlassChoice)
choices_for, rebuild_for = PLUGIN.choices_for, PLUGIN.rebuild_for
tunesmith_plugin_status, tunesmith_choices, tunesmith_rebuild_choice = PLUGIN.hooks()


@hookimpl
def tunesmith_add_options(options: Any) -> None:
    add_options(
        options,
        "cutlass",
        "CUTLASS checkout or install (holds include/cutlass/cutlass.h); none = the nvidia-cutlass package's headers",
        (4, "CUTLASS instances offered per problem (each is one nvcc build)"),
        (DEFAULT_TIMEOUT_S, "seconds one nvcc build of a CUTLASS instance may take"),
    )


@hookimpl
def tunesmith_estimate_runtime(node: Any, device: DeviceInfo) -> float | None:
    """Our choices' estimates (``cost.py``); anything else is left to other plugins."""
    if not isinstance(node, CutlassChoice) or node.env.arch is None:
        return None
    sms = device.multiprocessors or node.env.multiprocessors or DEFAULT_SMS
    return estimate_ms(node.instance, node.gemm, node.problem, node.env.arch, device, sms)
