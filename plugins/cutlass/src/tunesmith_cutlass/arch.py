"""The NVIDIA GPU generations the instances target: compute capability, shared memory per block,
and the nvcc code generation for each kernel family on each."""

from __future__ import annotations

import attrs

KIB = 1024

#: kernel families: CUTLASS 3.x warp-specialised TMA/wgmma kernels, and CUTLASS 2.x multistage kernels
FAMILIES = ("sm90", "sm80")


@attrs.frozen
class Arch:
    """One GPU generation: its compute capability (major * 10 + minor) and the shared memory one
    thread block may allocate (the opt-in maximum, in bytes)."""

    capability: int
    smem_bytes: int

    @property
    def name(self) -> str:
        return f"sm{self.capability}"

    def families(self) -> tuple[str, ...]:
        """The kernel families that run here: sm90 kernels need Hopper itself (wgmma and TMA are
        sm_90a features), sm80 kernels run on every GPU from Ampere on."""
        if self.capability == 90:
            return FAMILIES
        return ("sm80",) if self.capability >= 80 else ()

    def gencode(self, family: str) -> str:
        """nvcc's ``-gencode`` for a family on this GPU: ``sm_90a`` for Hopper's own kernels; sm80
        kernels are compiled from compute_80 for this GPU's own SASS (SASS of one major version
        does not run on another)."""
        if family == "sm90":
            return "arch=compute_90a,code=sm_90a"
        return f"arch=compute_80,code=sm_{self.capability}"


#: opt-in shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin) by compute capability
SMEM_BYTES = {80: 163 * KIB, 86: 99 * KIB, 87: 163 * KIB, 89: 99 * KIB, 90: 227 * KIB}
#: what an unknown later GPU is assumed to give a block
DEFAULT_SMEM = 99 * KIB


def arch_of(major: int, minor: int, smem_optin: int | None = None) -> Arch | None:
    """The Arch of a compute capability, or None below 8.0 (no cp.async, no bfloat16 tensor cores)."""
    capability = major * 10 + minor
    if capability < 80:
        return None
    return Arch(capability, smem_optin or SMEM_BYTES.get(capability, DEFAULT_SMEM))


SM90 = Arch(90, SMEM_BYTES[90])
SM80 = Arch(80, SMEM_BYTES[80])
