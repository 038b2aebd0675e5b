"""The AMD GPU architectures whose XDL (MFMA) units the instances target, with their LDS size."""

from __future__ import annotations

import attrs

KIB = 1024


@attrs.frozen
class Arch:
    """One gfx target: its name and the LDS (shared memory) one workgroup may allocate, in bytes."""

    name: str
    lds_bytes: int


#: CDNA targets with XDL units (ck::is_xdl_supported): MI100, MI200, MI300, MI350.
ARCHS = {
    "gfx908": Arch("gfx908", 64 * KIB),
    "gfx90a": Arch("gfx90a", 64 * KIB),
    "gfx940": Arch("gfx940", 64 * KIB),
    "gfx941": Arch("gfx941", 64 * KIB),
    "gfx942": Arch("gfx942", 64 * KIB),
    "gfx950": Arch("gfx950", 160 * KIB),
}


def base_name(target: str) -> str:
    """The gfx name of a target id: ``gfx942:sramecc+:xnack-`` -> ``gfx942``."""
    return target.split(":", 1)[0].strip()


def arch_of(target: str) -> Arch | None:
    """The Arch of a target id (as torch's ``gcnArchName`` gives it), or None when it has no XDL units."""
    return ARCHS.get(base_name(target))
