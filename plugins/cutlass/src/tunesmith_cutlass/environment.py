"""What the plugin needs on this machine, and which of it is missing: a CUDA build of torch with an
NVIDIA GPU of compute capability 8.0 or more, nvcc, and the CUTLASS and CuTe headers."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path

import torch

from tunesmith.plugin.native import Environment, find_tool, gather
from tunesmith_cutlass.arch import Arch, arch_of

__all__ = ["Environment", "find_include", "find_nvcc", "probe"]

DEFAULT_NVCC = "/usr/local/cuda/bin/nvcc"
#: files whose presence proves an include folder holds CUTLASS and CuTe
MARKERS = ("cutlass/cutlass.h", "cute/tensor.hpp")


def find_nvcc() -> str | None:
    """nvcc on PATH, else in ``$CUDA_HOME/bin`` (or ``$CUDA_PATH/bin``), else CUDA's default place."""
    places = [Path(os.environ[v]) / "bin" / "nvcc" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return find_tool("nvcc", [*places, Path(DEFAULT_NVCC)])


def _package_include() -> Path | None:
    """The header folder the ``nvidia-cutlass`` wheel installs (``cutlass_library/source/include``),
    found without importing the package (its import pulls in cuda-python and more)."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "source" / "include"


def find_include(cutlass_dir: str | None) -> tuple[str | None, str, str]:
    """The include folder holding CUTLASS and CuTe (from ``cutlass_dir``, else the nvidia-cutlass
    package), its version for the build key, and why none was found."""
    if cutlass_dir:
        for place in (Path(cutlass_dir) / "include", Path(cutlass_dir)):
            if all((place / m).is_file() for m in MARKERS):
                return str(place), f"cutlass_dir={place}", ""
        return (
            None,
            "",
            f"CUTLASS headers (no include/cutlass/cutlass.h and cute/tensor.hpp under cutlass_dir={cutlass_dir})",
        )
    include = _package_include()
    if include is None:
        return None, "", "CUTLASS headers (the nvidia-cutlass package is not installed: pip install nvidia-cutlass)"
    if not all((include / m).is_file() for m in MARKERS):
        return None, "", f"CUTLASS headers (nvidia-cutlass has no {MARKERS[0]} under {include})"
    return str(include), "nvidia-cutlass " + importlib.metadata.version("nvidia-cutlass"), ""


def _gpu() -> tuple[Arch | None, int | None, list[str]]:
    """The GPU's generation and SM count, and what is missing for it."""
    if torch.version.cuda is None:
        return None, None, [f"a CUDA build of torch (this is torch {torch.__version__}; torch.version.cuda is None)"]
    if not torch.cuda.is_available():
        return None, None, ["an NVIDIA GPU (torch.cuda.is_available() is False)"]
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    smem = getattr(props, "shared_memory_per_block_optin", None)
    arch = arch_of(props.major, props.minor, int(smem) if smem else None)
    if arch is None:
        return None, None, [f"a GPU of compute capability 8.0 or more ({props.name} is {props.major}.{props.minor})"]
    return arch, int(props.multi_processor_count), []


def probe(cutlass_dir: str | None) -> Environment:
    """Look for every piece (cheap: no compilation, no device work beyond queries): the GPU's
    :class:`~tunesmith_cutlass.arch.Arch`, nvcc, and the headers with their version."""
    missing_nvcc = f"nvcc (not on PATH, not in $CUDA_HOME/bin, not {DEFAULT_NVCC}; set CUDA_HOME)"
    return gather(_gpu(), find_nvcc(), missing_nvcc, find_include(cutlass_dir))
