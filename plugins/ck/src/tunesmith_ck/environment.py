"""What the plugin needs on this machine, and which of it is missing: a ROCm build of torch, an
AMD GPU with XDL units, hipcc, and the Composable Kernel headers."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from tunesmith.plugin.native import Environment, find_tool, gather
from tunesmith_ck.arch import ARCHS, arch_of

__all__ = ["Environment", "find_ck_include", "find_hipcc", "probe"]

DEFAULT_ROCM = "/opt/rocm"


def rocm_path() -> Path:
    """``$ROCM_PATH``, else ROCm's default prefix."""
    return Path(os.environ.get("ROCM_PATH") or DEFAULT_ROCM)


def find_hipcc() -> str | None:
    """hipcc on PATH, else in ``$ROCM_PATH/bin``."""
    return find_tool("hipcc", [rocm_path() / "bin" / "hipcc"])


def find_ck_include(ck_dir: str | None) -> tuple[str | None, str]:
    """The include folder holding ``ck/ck.hpp`` (from ``ck_dir``, else ROCm's own), or None and why not."""
    places = [Path(ck_dir)] if ck_dir else []
    places.append(rocm_path())
    for place in places:
        include = place / "include"
        if (include / "ck" / "ck.hpp").is_file():
            if not (include / "ck" / "config.h").is_file():
                return None, (
                    f"Composable Kernel's generated include/ck/config.h under {place} (a source checkout: "
                    "install CK with cmake and point ck_dir at the install prefix)"
                )
            return str(include), ""
    where = f"ck_dir={ck_dir}" if ck_dir else "ck_dir / TUNESMITH_CK_DIR (unset)"
    return None, f"Composable Kernel headers (no include/ck/ck.hpp under {where} or {rocm_path()})"


def _gpu() -> tuple[str | None, int | None, list[str]]:
    """The GPU's target id and compute units, and what is missing for it."""
    missing = []
    if torch.version.hip is None:
        missing.append(f"a ROCm build of torch (this is torch {torch.__version__}; torch.version.hip is None)")
    if not torch.cuda.is_available():
        missing.append("an AMD GPU (torch.cuda.is_available() is False)")
        return None, None, missing
    if torch.version.hip is None:
        return None, None, missing
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    target = str(getattr(props, "gcnArchName", "") or "")
    if arch_of(target) is None:
        missing.append(f"a GPU with XDL units ({target or 'unknown gfx target'} is not one of {', '.join(ARCHS)})")
        return None, None, missing
    return target, int(props.multi_processor_count), missing


def probe(ck_dir: str | None) -> Environment:
    """Look for every piece (cheap: no compilation, no device work beyond queries): the GPU's target
    id (``gfx942:sramecc+:xnack-``), hipcc, and the CK include folder."""
    include, why = find_ck_include(ck_dir)
    missing_hipcc = f"hipcc (not on PATH, not in {rocm_path() / 'bin'}; set ROCM_PATH)"
    return gather(_gpu(), find_hipcc(), missing_hipcc, (include, "", why))
