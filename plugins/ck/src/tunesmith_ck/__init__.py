"""tunesmith-ck: Composable Kernel's universal XDL GEMM (multiple-D epilogue) for mm, addmm and bmm
in float16 and bfloat16 on AMD GPUs, one instance per choice, rendered and built with hipcc.

It offers choices only on a ROCm build of torch with an AMD GPU that has XDL units, hipcc and the
CK headers; anywhere else ``tunesmith plugins`` names what is missing and it offers nothing.

The hooks, the build cache and the choices' plumbing are the plugin API's native-kernel framework
(``tunesmith.plugin.native``); this package keeps what is CK's own: the gfx targets, the instances
and their rules, the rendered C++ and the launch.
"""

from __future__ import annotations

from typing import Any

import attrs

from tunesmith.plugin.native import Environment, NativeBackend, add_options
from tunesmith_ck import instances
from tunesmith_ck.arch import Arch, arch_of
from tunesmith_ck.choice import CKChoice
from tunesmith_ck.environment import probe
from tunesmith_ck.gemm import DTYPES, Gemm, describe
from tunesmith_ck.instances import Instance
from tunesmith_hookspecs import Problem, hookimpl

__all__ = [
    "PLUGIN",
    "CKChoice",
    "choices_for",
    "rebuild_for",
    "tunesmith_add_options",
    "tunesmith_choices",
    "tunesmith_plugin_status",
    "tunesmith_rebuild_choice",
]

#: the ChoiceSpec template of each op: the CK device operation it instantiates
TEMPLATES = {
    "mm": "gemm_multiple_d_xdl_cshuffle_v3",
    "addmm": "gemm_multiple_d_xdl_cshuffle_v3",
    "bmm": "batched_gemm_multiple_d_xdl_cshuffle_v3",
}
#: compute units assumed when the GPU does not say (an MI300X has 304)
DEFAULT_UNITS = 304
#: seconds one hipcc run may take (CK instances are template-heavy; never measured here)
BUILD_TIMEOUT_S = 900.0


@attrs.frozen
class CK(NativeBackend):
    """CK's part of the plugin: its GPUs by target id, its ranking and its templates (one per op)."""

    def arch(self, env: Environment) -> Arch | None:
        """The Arch of the GPU's target id (``env.arch``), or None without XDL units."""
        return arch_of(env.arch or "")

    def rank(self, valid: list[Instance], gemm: Gemm, arch: Arch, env: Environment) -> list[Instance]:
        return instances.rank(valid, gemm, env.multiprocessors or DEFAULT_UNITS)

    def template(self, inst: Instance, problem: Problem) -> str | None:
        return TEMPLATES.get(problem.op)


PLUGIN = CK("ck", DTYPES, probe, describe, instances, CKChoice, build_timeout_s=BUILD_TIMEOUT_S)
choices_for, rebuild_for = PLUGIN.choices_for, PLUGIN.rebuild_for
tunesmith_plugin_status, tunesmith_choices, tunesmith_rebuild_choice = PLUGIN.hooks()


@hookimpl
def tunesmith_add_options(options: Any) -> None:
    where = "Composable Kernel install prefix (holds include/ck/ck.hpp); none = ROCm's own under $ROCM_PATH"
    add_options(options, "ck", where, (8, "CK instances offered per problem (each is one hipcc build)"))
