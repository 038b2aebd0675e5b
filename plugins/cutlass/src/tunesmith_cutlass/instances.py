"""Instances of the two kernel families, the rules that reject an impossible one with a reason, and
the enumeration of the valid ones for a GEMM.

- ``sm90``: a CUTLASS 3.x kernel built by ``CollectiveBuilder`` (TMA loads, a warp-specialised
  wgmma mainloop, the TMA epilogue with the visitor tree), with the cooperative or the ping-pong
  kernel schedule, a block tile and a thread-block cluster shape; the stage count is left to the
  builder (``StageCountAutoCarveout``).
- ``sm80``: a CUTLASS 2.x ``GemmUniversal`` with the multistage (cp.async) mainloop, a block tile,
  warps along M and N, and a stage count, with the 2.x visitor-tree epilogue.

The rules follow the builders' static asserts and ``can_implement`` checks (tile and schedule
shapes, TMA's 16-byte alignment, cp.async's access sizes, shared memory), so that an instance
accepted here builds and accepts the problem.
"""

from __future__ import annotations

import math

from tunesmith.plugin.native import InstanceParams, Rejected, instance_params, sift
from tunesmith_cutlass.arch import Arch
from tunesmith_cutlass.gemm import ELEMENT_BYTES, VECTOR_BYTES, Gemm, Kind, with_k_major_operands

SCHEDULES = {"sm90": ("cooperative", "pingpong"), "sm80": ("multistage",)}
#: threads of a warp group, and accumulator registers a thread may hold before spilling
WARPGROUP = 128
MAX_ACC_REGISTERS = 128
#: wgmma's K per instruction by input size (bytes), and mma.sync's instruction shape (sm80)
WGMMA_K = {2: 16, 4: 8}
MMA_SHAPE = {2: (16, 8, 16), 4: (16, 8, 8)}
#: cp.async copies 4, 8 or 16 bytes
CP_ASYNC_BYTES = (4, 8, 16)
#: bytes of barriers and bookkeeping per mainloop stage (sm90 pipelines)
STAGE_OVERHEAD = 32


@instance_params
class Instance(InstanceParams):
    """The tuning parameters of one instance. ``cluster_*`` are sm90's, ``warps_*`` and ``stages``
    sm80's (sm90 stages come from the builder); the other family's fields keep their defaults."""

    family: str
    tile_m: int
    tile_n: int
    tile_k: int
    schedule: str
    cluster_m: int = 1
    cluster_n: int = 1
    warps_m: int = 0
    warps_n: int = 0
    stages: int = 0

    @property
    def name(self) -> str:
        tile = f"{self.tile_m}x{self.tile_n}x{self.tile_k}"
        if self.family == "sm90":
            return f"cutlass_sm90_{tile}_c{self.cluster_m}x{self.cluster_n}_{self.schedule}"
        return f"cutlass_sm80_{tile}_w{self.warps_m}x{self.warps_n}_s{self.stages}"

    @property
    def threads(self) -> int:
        """Threads of a block: one producer and two consumer warp groups (sm90), or the warps (sm80)."""
        if self.family == "sm90":
            return 3 * WARPGROUP
        return 32 * self.warps_m * self.warps_n


# --- shared memory ------------------------------------------------------------------------------


def sm90_epilogue_tile(inst: Instance) -> tuple[int, int]:
    """The epilogue's subtile as ``EpilogueTileAuto`` picks it (sm90_compute_tile_shape_or_override)."""
    rows = min(128 if inst.schedule == "cooperative" else 64, inst.tile_m)
    return rows, math.gcd(min(32, inst.tile_n), inst.tile_n)


def sm90_epilogue_bytes(inst: Instance, kind: Kind) -> int:
    """Shared memory of the TMA epilogue: D's store stages, C's load stages (the full operand, when
    there is one), and one tile row of each broadcast row."""
    rows, cols = sm90_epilogue_tile(inst)
    tiles = (inst.tile_m // rows) * (inst.tile_n // cols)
    out = ELEMENT_BYTES[kind.out_dtype]
    stages_d = min(tiles, 2)
    total = stages_d * rows * cols * out
    full = [o for o in kind.operands if o.kind == "full"]
    if full:
        c_bytes = ELEMENT_BYTES[full[0].dtype]
        reuse = c_bytes == out
        stages_c = max(min(tiles, 4), stages_d + 1) if reuse else min(tiles, 4)
        total = max(total, stages_c * rows * cols * c_bytes) if reuse else total + stages_c * rows * cols * c_bytes
    total += sum(inst.tile_n * ELEMENT_BYTES[o.dtype] for o in kind.operands if o.kind == "row")
    return total


def stage_bytes(inst: Instance, kind: Kind) -> int:
    """Bytes of one mainloop stage: an A tile and a B tile."""
    return (inst.tile_m + inst.tile_n) * inst.tile_k * ELEMENT_BYTES[kind.dtype]


def sm90_stages(inst: Instance, kind: Kind, arch: Arch) -> int:
    """The stage count ``StageCountAutoCarveout`` gives: what fits beside the epilogue."""
    free = arch.smem_bytes - sm90_epilogue_bytes(inst, kind)
    return max(free, 0) // (stage_bytes(inst, kind) + STAGE_OVERHEAD)


# --- validation ---------------------------------------------------------------------------------


def _sm90_tile_reasons(inst: Instance, kind: Kind) -> list[str]:
    reasons = []
    size = ELEMENT_BYTES[kind.dtype]
    if inst.schedule not in SCHEDULES["sm90"]:
        reasons.append(f"sm90 schedule {inst.schedule!r} is not one of {', '.join(SCHEDULES['sm90'])}")
    if inst.tile_m not in (64, 128, 256):
        reasons.append(f"tile M {inst.tile_m} is not 64, 128 or 256 (wgmma covers 64 rows a warp group)")
    if inst.tile_n % 16 or not 16 <= inst.tile_n <= 256:
        reasons.append(f"tile N {inst.tile_n} is not a multiple of 16 in 16..256 (wgmma's N)")
    if inst.tile_k % WGMMA_K[size] or inst.tile_k * size not in (64, 128, 256):
        reasons.append(
            f"tile K {inst.tile_k} x {size} bytes is not 64, 128 or 256 bytes of whole wgmma K steps ({WGMMA_K[size]})"
        )
    if inst.schedule == "cooperative" and inst.tile_m % 128:
        reasons.append(
            f"the cooperative schedule splits tile M over two consumer warp groups of 64 rows: tile M {inst.tile_m} "
            "is not a multiple of 128 (use the ping-pong schedule)"
        )
    groups = 2 if inst.schedule == "cooperative" else 1
    registers = inst.tile_m * inst.tile_n // (WARPGROUP * groups)
    if registers > MAX_ACC_REGISTERS:
        reasons.append(
            f"a {inst.tile_m}x{inst.tile_n} tile on {groups} consumer warp group(s) ({inst.schedule}) needs "
            f"{registers} float accumulators a thread, over {MAX_ACC_REGISTERS}"
        )
    for dim, value in (("M", inst.cluster_m), ("N", inst.cluster_n)):
        if value not in (1, 2, 4):
            reasons.append(f"cluster {dim} {value} is not 1, 2 or 4")
    if inst.cluster_m * inst.cluster_n > 4:
        reasons.append(f"cluster {inst.cluster_m}x{inst.cluster_n} has more than 4 blocks")
    if (inst.warps_m, inst.warps_n, inst.stages) != (0, 0, 0):
        reasons.append("sm90 instances take no warps or stages (the builder picks them)")
    if kind.dtype == "float32" and (inst.tile_m % inst.tile_k or inst.tile_n % inst.tile_k):
        reasons.append(f"TF32 tiles must be multiples of tile K {inst.tile_k} along M and N (smem layouts)")
    return reasons


def _sm90_problem_reasons(inst: Instance, gemm: Gemm, arch: Arch) -> list[str]:
    kind = gemm.kind
    reasons = []
    if arch.capability != 90:
        reasons.append(f"sm90 kernels (wgmma, TMA: sm_90a) run on Hopper only, not on {arch.name}")
    size = ELEMENT_BYTES[kind.dtype]
    for matrix in (gemm.a, gemm.b):
        if matrix.alignment * size != VECTOR_BYTES:
            reasons.append(
                f"TMA needs 16-byte aligned {matrix.name}: its {matrix.layout}-major layout (extent, leading "
                f"dimension {matrix.ld}, batch stride, offset) allows {matrix.alignment * size}-byte vectors"
            )
    if kind.out_alignment * gemm.out_bytes != VECTOR_BYTES:
        reasons.append(f"TMA stores D in 16-byte rows: N={gemm.n} allows {kind.out_alignment * gemm.out_bytes}")
    full = [o for o in gemm.operands if o.kind == "full"]
    if len(full) > 1:
        reasons.append(f"the epilogue reads {len(full)} full matrices; the sm90 epilogue reads one (as C)")
    for o in full:
        if o.alignment * ELEMENT_BYTES[o.dtype] != VECTOR_BYTES:
            reasons.append(f"TMA needs 16-byte aligned rows of epilogue operand {o.index} (leading dimension {o.ld})")
        if gemm.batch > 1 and o.batch_stride == 0:
            reasons.append(f"epilogue operand {o.index} is shared by every batch (stride 0), which TMA cannot load")
    return reasons


def _sm80_tile_reasons(inst: Instance, kind: Kind) -> list[str]:
    reasons = []
    size = ELEMENT_BYTES[kind.dtype]
    mma_m, mma_n, mma_k = MMA_SHAPE[size]
    if inst.schedule != "multistage":
        reasons.append(f"sm80 schedule {inst.schedule!r} is not 'multistage'")
    warps = inst.warps_m * inst.warps_n
    if warps not in (2, 4, 8):
        reasons.append(f"{inst.warps_m}x{inst.warps_n} warps: a block has 2, 4 or 8 warps")
        return reasons
    if inst.tile_m % inst.warps_m or inst.tile_n % inst.warps_n:
        reasons.append(f"tile {inst.tile_m}x{inst.tile_n} does not split into {inst.warps_m}x{inst.warps_n} warp tiles")
        return reasons
    warp_m, warp_n = inst.tile_m // inst.warps_m, inst.tile_n // inst.warps_n
    if warp_m % mma_m or warp_n % mma_n or warp_m < 16 or warp_n < 16:
        reasons.append(f"warp tile {warp_m}x{warp_n} is not a multiple of the {mma_m}x{mma_n} mma.sync shape (>= 16)")
    if inst.tile_k % mma_k or inst.tile_k * size not in (32, 64, 128):
        reasons.append(f"tile K {inst.tile_k} x {size} bytes is not 32, 64 or 128 bytes of whole mma K steps")
    if not 3 <= inst.stages <= 7:
        reasons.append(f"{inst.stages} stages: the multistage mainloop takes 3 to 7")
    if (inst.cluster_m, inst.cluster_n) != (1, 1):
        reasons.append("sm80 instances have no clusters")
    return reasons


def _sm80_problem_reasons(inst: Instance, gemm: Gemm, arch: Arch) -> list[str]:
    kind = gemm.kind
    reasons = []
    size = ELEMENT_BYTES[kind.dtype]
    for matrix in (gemm.a, gemm.b):
        width = matrix.alignment * size
        if width not in CP_ASYNC_BYTES:
            reasons.append(
                f"cp.async copies 4, 8 or 16 bytes: {matrix.name}'s {matrix.layout}-major layout (extent, leading "
                f"dimension {matrix.ld}, batch stride, offset) allows {width}-byte vectors"
            )
            continue
        rows = inst.tile_m if matrix.name == "A" else inst.tile_n
        if (rows * inst.tile_k // matrix.alignment) % inst.threads:
            reasons.append(
                f"{matrix.name}'s {rows}x{inst.tile_k} tile in {matrix.alignment}-element vectors does not divide "
                f"among {inst.threads} threads"
            )
    if gemm.batch > 1:  # on the H100 (cutlass_conformance_c2f8f26.json, benchmarks/README.md): not yet found why
        reasons.append("sm80 batched launches fail on the GPU (conformance, 2026-11-23): not offered until fixed")
    need = stage_bytes(inst, kind) * inst.stages
    if need > arch.smem_bytes:
        reasons.append(
            f"shared memory: {inst.stages} stages of {stage_bytes(inst, kind)} bytes need {need}, "
            f"{arch.name} gives a block {arch.smem_bytes}"
        )
    return reasons


def epilogue_vector(gemm_kind: Kind) -> int:
    """The sm80 epilogue's vector width (elements): D and every row or full operand are read and
    written through one thread map, so the narrowest of them sets it."""
    widths = [gemm_kind.out_alignment] + [o.alignment for o in gemm_kind.operands if o.kind != "col"]
    return min(widths)


def for_family(gemm: Gemm, family: str) -> Gemm:
    """The GEMM as instances of ``family`` compute it: sm90 TF32 (wgmma reads K-major tiles only)
    reads other layouts from K-major copies."""
    if family == "sm90" and gemm.kind.dtype == "float32":
        return with_k_major_operands(gemm)
    return gemm


def validate(inst: Instance, gemm: Gemm, arch: Arch) -> list[str]:
    """Every reason why ``inst`` cannot compute ``gemm`` on ``arch`` (as :func:`for_family` has it);
    empty when it can."""
    gemm = for_family(gemm, inst.family)
    if inst.family == "sm90":
        reasons = _sm90_tile_reasons(inst, gemm.kind)
        if reasons:
            return reasons
        reasons = _sm90_problem_reasons(inst, gemm, arch)
        stages = sm90_stages(inst, gemm.kind, arch)
        if stages < 2:
            reasons.append(
                f"shared memory: the epilogue takes {sm90_epilogue_bytes(inst, gemm.kind)} bytes and a stage "
                f"{stage_bytes(inst, gemm.kind)}; {arch.name}'s {arch.smem_bytes} leave {stages} stage(s), fewer than 2"
            )
        return reasons
    if inst.family == "sm80":
        reasons = _sm80_tile_reasons(inst, gemm.kind)
        return reasons or _sm80_problem_reasons(inst, gemm, arch)
    return [f"family {inst.family!r} is not one of sm90, sm80"]


# --- enumeration --------------------------------------------------------------------------------

#: sm90 (tile M, tile N, K bytes, cluster M, cluster N, schedule), large tiles first
SM90_SPACE = (
    (128, 256, 128, 2, 1, "cooperative"),
    (256, 128, 128, 1, 2, "cooperative"),
    (128, 128, 128, 1, 2, "pingpong"),
    (128, 128, 128, 2, 1, "cooperative"),
    (128, 256, 128, 1, 1, "cooperative"),
    (256, 128, 128, 1, 1, "cooperative"),
    (64, 128, 128, 1, 1, "pingpong"),
    (128, 128, 128, 1, 1, "pingpong"),
    (128, 128, 128, 1, 1, "cooperative"),
    (64, 256, 128, 1, 1, "pingpong"),
    (128, 64, 128, 1, 1, "pingpong"),
    (64, 64, 128, 1, 1, "pingpong"),
)
#: sm80 (tile M, tile N, K bytes, warps M, warps N, stages), as CUTLASS's own sm80 generator lists them
SM80_SPACE = (
    (128, 256, 64, 2, 4, 3),
    (256, 128, 64, 4, 2, 3),
    (128, 128, 64, 2, 2, 4),
    (128, 128, 64, 2, 2, 3),
    (128, 64, 64, 2, 2, 4),
    (64, 128, 64, 2, 2, 4),
    (64, 64, 64, 2, 2, 5),
    (128, 128, 128, 2, 2, 3),
    (64, 64, 128, 2, 2, 4),
    (64, 32, 64, 2, 1, 6),
)


def space(family: str, kind: Kind) -> list[Instance]:
    """Every instance of a family tried for a kind (tile K set from the element size)."""
    size = ELEMENT_BYTES[kind.dtype]
    if family == "sm90":
        return [Instance("sm90", m, n, kb // size, sched, cm, cn) for m, n, kb, cm, cn, sched in SM90_SPACE]
    return [Instance("sm80", m, n, kb // size, "multistage", 1, 1, wm, wn, s) for m, n, kb, wm, wn, s in SM80_SPACE]


def enumerate_instances(gemm: Gemm, arch: Arch) -> tuple[list[Instance], list[Rejected]]:
    """The valid instances of every family that runs on ``arch``, and the others with their reasons."""
    candidates = (inst for family in arch.families() for inst in space(family, gemm.kind))
    return sift(candidates, lambda inst: validate(inst, gemm, arch), "cutlass")
