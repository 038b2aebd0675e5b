"""Instances of CK's universal XDL GEMM (``DeviceGemmMultiD_Xdl_CShuffle_V3`` and its batched twin):
their tuning parameters, the arguments CK derives from them, the rules that reject an invalid
combination with a reason, and the enumeration of the valid ones for a GEMM.

The rules follow CK's own checks (``GridwiseGemmMultiD_xdl_cshuffle_v3::CheckValidity``,
``IsSupportedArgument``, the static asserts of its block transfers and LDS allocation), so that an
instance rejected here would be refused or miscompiled there, and one accepted here should build.
"""

from __future__ import annotations

import math

import attrs

from tunesmith.plugin.native import InstanceParams, Rejected, instance_params, sift, spread
from tunesmith_ck.arch import Arch
from tunesmith_ck.gemm import ELEMENT_BYTES, INDEX_MAX, Gemm, Matrix

WAVE = 64
#: BlockSize values a kernel may launch (CK's kernels use __launch_bounds__(256))
BLOCK_SIZES = (64, 128, 256)
#: MPerXDL/NPerXDL of the fp16/bf16 MFMA instructions, and the K each consumes
XDL_K = {32: 8, 16: 16}
#: K blocks each pipeline prefetches (BlockwiseGemmXdlops_pipeline_vN::PrefetchStages)
PREFETCH = {"v1": 1, "v3": 2, "v4": 3}
#: LDS buffers each pipeline allocates (v4 runs the kernel with two LDS buffers)
LDS_BUFFERS = {"v1": 1, "v3": 1, "v4": 2}
#: pipelines that CK specialises for the Intrawave scheduler only
INTRAWAVE_ONLY = ("v3", "v4")
SCHEDULERS = ("Intrawave", "Interwave")
#: global loads are at most 16 bytes a lane
VECTOR_BYTES = 16
#: GemmSpecialization names by which dimensions are padded
SPECS = {
    (False, False, False): "Default",
    (True, False, False): "MPadding",
    (False, True, False): "NPadding",
    (False, False, True): "KPadding",
    (True, True, False): "MNPadding",
    (True, False, True): "MKPadding",
    (False, True, True): "NKPadding",
    (True, True, True): "MNKPadding",
}
CSHUFFLE_DTYPE = "float32"  # the accumulator goes through LDS in float, so the epilogue sees it unrounded


@instance_params
class Instance(InstanceParams):
    """The tuning parameters of one instance (CK's template arguments before derivation)."""

    block_size: int
    m_per_block: int
    n_per_block: int
    k_per_block: int
    ak1: int
    bk1: int
    m_per_xdl: int
    n_per_xdl: int
    m_xdl_per_wave: int
    n_xdl_per_wave: int
    a_vector: int
    b_vector: int
    e_vector: int
    pipeline: str
    scheduler: str
    gemm_spec: str
    cshuffle_m: int = 1
    cshuffle_n: int = 1

    @property
    def name(self) -> str:
        return (
            f"ck_b{self.block_size}_{self.m_per_block}x{self.n_per_block}x{self.k_per_block}"
            f"_x{self.m_per_xdl}_w{self.m_xdl_per_wave}x{self.n_xdl_per_wave}_k{self.ak1}{self.bk1}"
            f"_v{self.a_vector}{self.b_vector}{self.e_vector}_s{self.cshuffle_m}{self.cshuffle_n}"
            f"_{self.pipeline}{self.scheduler[:5].lower()}_{self.gemm_spec.lower()}"
        )

    @property
    def waves(self) -> tuple[int, int]:
        """Waves along M and N (CK's MWave, NWave)."""
        return (
            self.m_per_block // max(self.m_per_xdl * self.m_xdl_per_wave, 1),
            self.n_per_block // max(self.n_per_xdl * self.n_xdl_per_wave, 1),
        )


@attrs.frozen
class Transfer:
    """One operand's global-to-LDS copy, as CK's ``?BlockTransfer*`` template arguments."""

    cluster: tuple[int, int, int]  # ThreadClusterLengths_K0_MN_K1
    order: tuple[int, int, int]  # ThreadClusterArrangeOrder (and SrcAccessOrder)
    vector_dim: int  # SrcVectorDim: 2 when K has unit stride, 1 when M (or N) has
    src_vector: int  # SrcScalarPerVector
    dst_vector: int  # DstScalarPerVector_K1
    lds_extra: int = 0  # LdsExtraM / LdsExtraN


def k1_for(matrix: Matrix) -> int:
    """K1 (elements of K kept together in LDS): 8 where K has unit stride, 4 where M or N has (CK's choices)."""
    return 8 if matrix.k_major else 4


def transfer(inst: Instance, operand: str, matrix: Matrix) -> Transfer | str:
    """The copy of A or B for this instance, or why no thread cluster fits."""
    mn = inst.m_per_block if operand == "A" else inst.n_per_block
    k1 = inst.ak1 if operand == "A" else inst.bk1
    vector = inst.a_vector if operand == "A" else inst.b_vector
    dim = "M" if operand == "A" else "N"
    k0 = inst.k_per_block // k1
    if matrix.k_major:
        if k1 % vector:
            return f"{operand} vector width {vector} does not divide {operand}K1={k1} (the vector runs along K)"
        k0_threads = math.gcd(k0, inst.block_size)
        mn_threads = inst.block_size // k0_threads
        if mn % mn_threads:
            return f"{operand}'s thread cluster: {mn_threads} threads along {dim} do not divide {dim}PerBlock={mn}"
        return Transfer((k0_threads, mn_threads, 1), (1, 0, 2), 2, vector, k1)
    if mn % vector:
        return f"{operand} vector width {vector} does not divide {dim}PerBlock={mn} (the vector runs along {dim})"
    mn_threads = mn // vector
    if inst.block_size % mn_threads:
        return (
            f"{operand}'s thread cluster: {dim}PerBlock={mn} / vector {vector} = {mn_threads} threads along {dim} "
            f"do not divide BlockSize={inst.block_size}"
        )
    k0_threads = inst.block_size // mn_threads
    if k0 % k0_threads:
        return f"{operand}'s thread cluster: {k0_threads} threads along K0 do not divide K0={k0}"
    return Transfer((k0_threads, mn_threads, 1), (0, 2, 1), 1, vector, k1)


def shuffle(inst: Instance) -> tuple[int, int] | str:
    """CK's CShuffle cluster (threads along M, along N) that writes E, or why none fits."""
    m_waves, n_waves = inst.waves
    width = inst.cshuffle_n * n_waves * inst.n_per_xdl
    height = inst.cshuffle_m * m_waves * inst.m_per_xdl
    if inst.m_xdl_per_wave % inst.cshuffle_m or inst.n_xdl_per_wave % inst.cshuffle_n:
        return (
            f"CShuffle {inst.cshuffle_m}x{inst.cshuffle_n} XDLs per shuffle do not divide "
            f"the {inst.m_xdl_per_wave}x{inst.n_xdl_per_wave} XDLs per wave"
        )
    if width % inst.e_vector:
        return f"E vector width {inst.e_vector} does not divide the shuffled tile's width {width}"
    along_n = width // inst.e_vector
    if inst.block_size % along_n or height % (inst.block_size // along_n):
        return (
            f"E's shuffle cluster: {along_n} threads along N leave {inst.block_size / along_n:g} along M, "
            f"which do not tile the shuffled tile's height {height}"
        )
    return inst.block_size // along_n, along_n


def gemm_spec_for(gemm: Gemm, m_per_block: int, n_per_block: int, k_per_block: int, ak1: int, bk1: int) -> str:
    """The GemmSpecialization that pads exactly the dimensions that the tile does not divide."""
    pad_k = gemm.k % k_per_block != 0 or gemm.k % ak1 != 0 or gemm.k % bk1 != 0
    return SPECS[(gemm.m % m_per_block != 0, gemm.n % n_per_block != 0, pad_k)]


def _aligned(matrix: Matrix, vector: int, batch: int, what: str) -> list[str]:
    """Why ``vector``-wide loads of ``matrix`` would be misaligned or cross its rows (empty: they are fine)."""
    reasons = []
    if vector * ELEMENT_BYTES[matrix.dtype] > VECTOR_BYTES:
        reasons.append(
            f"{what} vector width {vector} x {ELEMENT_BYTES[matrix.dtype]} bytes exceeds {VECTOR_BYTES}-byte loads"
        )
    if matrix.contiguous_size % vector:
        reasons.append(
            f"{what} is {matrix.layout}-major with {matrix.contiguous_size} elements along its unit-stride "
            f"dimension, not a multiple of the vector width {vector}"
        )
    if matrix.strided_size > 1 and matrix.ld % vector:
        reasons.append(
            f"{what}'s leading dimension {matrix.ld} is not a multiple of the vector width {vector} "
            f"(each {'row' if matrix.layout == 'row' else 'column'} would start misaligned)"
        )
    if batch > 1 and matrix.batch_stride % vector:
        reasons.append(f"{what}'s batch stride {matrix.batch_stride} is not a multiple of the vector width {vector}")
    if matrix.offset % vector:
        reasons.append(f"{what} starts at element offset {matrix.offset}, not a multiple of the vector width {vector}")
    return reasons


def d_vectors(inst: Instance, gemm: Gemm) -> tuple[int, ...]:
    """Each D tensor's vector width in the epilogue: the widest aligned divisor of E's (1 for column-major)."""
    out = []
    for d in gemm.ds:
        width = 1
        if d.layout == "row":
            for v in (inst.e_vector, 8, 4, 2):
                if inst.e_vector % v == 0 and not _aligned(d, v, gemm.batch, d.name):
                    width = v
                    break
        out.append(width)
    return tuple(out)


def lds_bytes(inst: Instance, gemm: Gemm) -> int:
    """Bytes of LDS the kernel allocates: the A and B tiles or the float C shuffle, whichever is larger,
    per buffer of the pipeline (GridwiseGemm::GetSharedMemoryNumberOfByte)."""
    element = ELEMENT_BYTES[gemm.dtype]
    align = math.lcm(inst.ak1, inst.bk1)
    a = -(-inst.m_per_block * inst.k_per_block // align) * align
    b = -(-inst.n_per_block * inst.k_per_block // align) * align
    m_waves, n_waves = inst.waves
    c = (inst.cshuffle_m * m_waves * inst.m_per_xdl) * (inst.cshuffle_n * n_waves * inst.n_per_xdl)
    per_buffer = max((a + b) * element, c * ELEMENT_BYTES[CSHUFFLE_DTYPE])
    return per_buffer * LDS_BUFFERS.get(inst.pipeline, 1)


def k_loops(inst: Instance, gemm: Gemm) -> int:
    """Iterations of the main K loop (K padded up to KPerBlock where the spec pads K)."""
    return -(-gemm.k // inst.k_per_block)


def _tile_reasons(inst: Instance) -> list[str]:
    """Rules on the parameters alone."""
    reasons = []
    if inst.block_size not in BLOCK_SIZES:
        reasons.append(f"BlockSize {inst.block_size} is not one of {BLOCK_SIZES} (CK launches at most 256 threads)")
    if inst.m_per_xdl not in XDL_K or inst.n_per_xdl != inst.m_per_xdl:
        reasons.append(f"XDL tile {inst.m_per_xdl}x{inst.n_per_xdl} is not 32x32 or 16x16")
    for dim, per_block, xdl, per_wave in (
        ("M", inst.m_per_block, inst.m_per_xdl, inst.m_xdl_per_wave),
        ("N", inst.n_per_block, inst.n_per_xdl, inst.n_xdl_per_wave),
    ):
        if per_wave < 1 or xdl < 1 or per_block % (xdl * per_wave):
            reasons.append(
                f"{dim}PerBlock={per_block} is not a multiple of {dim}PerXDL*{dim}XdlPerWave = {xdl}*{per_wave}"
            )
    if not reasons:
        m_waves, n_waves = inst.waves
        if m_waves * n_waves * WAVE != inst.block_size:
            reasons.append(
                f"{m_waves}x{n_waves} waves of {WAVE} lanes are {m_waves * n_waves * WAVE} threads, "
                f"not BlockSize={inst.block_size}"
            )
    for name, k1 in (("AK1", inst.ak1), ("BK1", inst.bk1)):
        if k1 < 1 or inst.k_per_block % k1:
            reasons.append(f"KPerBlock={inst.k_per_block} is not a multiple of {name}={k1}")
    xdl_k = XDL_K.get(inst.m_per_xdl, 8)
    if inst.k_per_block % xdl_k:
        reasons.append(
            f"KPerBlock={inst.k_per_block} is not a multiple of the {inst.m_per_xdl}x{inst.m_per_xdl} MFMA's K={xdl_k}"
        )
    if inst.pipeline not in PREFETCH:
        reasons.append(f"pipeline {inst.pipeline!r} is not one of {', '.join(PREFETCH)}")
    if inst.scheduler not in SCHEDULERS:
        reasons.append(f"scheduler {inst.scheduler!r} is not one of {', '.join(SCHEDULERS)}")
    elif inst.pipeline in INTRAWAVE_ONLY and inst.scheduler != "Intrawave":
        reasons.append(f"pipeline {inst.pipeline} exists only with the Intrawave scheduler in CK")
    if inst.gemm_spec not in SPECS.values():
        reasons.append(f"GemmSpecialization {inst.gemm_spec!r} is not one of {', '.join(SPECS.values())}")
    return reasons


def _problem_reasons(inst: Instance, gemm: Gemm) -> list[str]:
    """Rules on the parameters against this GEMM's sizes, layouts, strides and alignment."""
    reasons = []
    spec = inst.gemm_spec
    for dim, size, per_block in (
        ("M", gemm.m, inst.m_per_block),
        ("N", gemm.n, inst.n_per_block),
        ("K", gemm.k, inst.k_per_block),
    ):
        if dim not in spec and size % per_block:
            reasons.append(
                f"{dim}={size} is not a multiple of {dim}PerBlock={per_block} and "
                f"GemmSpecialization::{spec} does not pad {dim}"
            )
    if "K" not in spec:
        for name, k1 in (("AK1", inst.ak1), ("BK1", inst.bk1)):
            if k1 and gemm.k % k1:
                reasons.append(
                    f"K={gemm.k} is not a multiple of {name}={k1} and GemmSpecialization::{spec} does not pad K"
                )
    for operand, matrix, vector in (("A", gemm.a, inst.a_vector), ("B", gemm.b, inst.b_vector)):
        reasons += _aligned(matrix, vector, gemm.batch, operand)
        k1 = inst.ak1 if operand == "A" else inst.bk1
        if k1 != k1_for(matrix):
            reasons.append(f"{operand}K1={k1} does not suit a {matrix.layout}-major {operand} (use {k1_for(matrix)})")
        found = transfer(inst, operand, matrix)
        if isinstance(found, str):
            reasons.append(found)
    out_bytes = ELEMENT_BYTES[gemm.out_dtype]
    if inst.e_vector * out_bytes > VECTOR_BYTES:
        reasons.append(f"E vector width {inst.e_vector} x {out_bytes} bytes exceeds {VECTOR_BYTES}-byte stores")
    if gemm.n % inst.e_vector:
        reasons.append(f"N={gemm.n} is not a multiple of the E vector width {inst.e_vector} (E is row-major)")
    found = shuffle(inst)
    if isinstance(found, str):
        reasons.append(found)
    loops, stages = k_loops(inst, gemm), PREFETCH.get(inst.pipeline, 1)
    if inst.pipeline != "v1" and loops <= stages:
        reasons.append(
            f"pipeline {inst.pipeline} prefetches {stages} K blocks and needs more K-loop iterations than that; "
            f"K={gemm.k} with KPerBlock={inst.k_per_block} gives {loops}"
        )
    for what, value in (
        ("M", gemm.m),
        ("N", gemm.n),
        ("K", gemm.k),
        ("A's extent", gemm.a.extent),
        ("B's extent", gemm.b.extent),
        ("E's extent", gemm.m * gemm.n),
        *((f"{d.name}'s extent", d.extent) for d in gemm.ds),
        *((f"{m.name}'s batch stride", m.batch_stride) for m in (gemm.a, gemm.b, *gemm.ds)),
    ):
        if value > INDEX_MAX:
            reasons.append(f"{what} {value} exceeds CK's 32-bit index_t")
    return reasons


def validate(inst: Instance, gemm: Gemm, arch: Arch) -> list[str]:
    """Every reason why ``inst`` cannot compute ``gemm`` on ``arch``; empty when it can."""
    reasons = _tile_reasons(inst)
    if reasons:
        return reasons  # the derived quantities below would be meaningless
    reasons = _problem_reasons(inst, gemm)
    need = lds_bytes(inst, gemm)
    if need > arch.lds_bytes:
        reasons.append(
            f"LDS: needs {need} bytes ({LDS_BUFFERS[inst.pipeline]} buffer(s) of A, B and the C shuffle), "
            f"{arch.name} has {arch.lds_bytes}"
        )
    return reasons


# --- enumeration ----------------------------------------------------------------------------------


@attrs.frozen
class Tile:
    """A block tile of the search space: threads, M x N x K per block, XDL size, XDLs per wave."""

    block: int
    m: int
    n: int
    k: int
    xdl: int
    m_xdl: int
    n_xdl: int


#: compute-bound tiles first (256 threads, deep K), then the latency-bound ones for thin problems
TILES = (
    Tile(256, 256, 256, 32, 32, 4, 4),
    Tile(256, 224, 256, 64, 16, 7, 8),
    Tile(256, 256, 224, 64, 16, 8, 7),
    Tile(256, 256, 128, 32, 32, 4, 2),
    Tile(256, 128, 256, 32, 32, 2, 4),
    Tile(256, 128, 128, 64, 32, 2, 2),
    Tile(256, 128, 128, 32, 32, 2, 2),
    Tile(256, 128, 64, 64, 32, 2, 1),
    Tile(256, 64, 128, 64, 32, 1, 2),
    Tile(128, 64, 64, 64, 32, 2, 1),
    Tile(128, 32, 64, 64, 16, 1, 4),
    Tile(128, 32, 16, 64, 16, 1, 1),
    Tile(64, 16, 16, 128, 16, 1, 1),
    Tile(64, 16, 16, 64, 16, 1, 1),
)
#: (pipeline, scheduler) pairs tried on every tile
SCHEDULES = (("v3", "Intrawave"), ("v4", "Intrawave"), ("v1", "Intrawave"), ("v1", "Interwave"))
WIDTHS = (8, 4, 2, 1)
CSHUFFLES = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 1))


def _a_or_b_fits(inst: Instance, operand: str, gemm: Gemm) -> bool:
    matrix = gemm.a if operand == "A" else gemm.b
    vector = inst.a_vector if operand == "A" else inst.b_vector
    return not _aligned(matrix, vector, gemm.batch, operand) and not isinstance(transfer(inst, operand, matrix), str)


def _e_fits(inst: Instance, gemm: Gemm) -> bool:
    fits_store = inst.e_vector * ELEMENT_BYTES[gemm.out_dtype] <= VECTOR_BYTES and gemm.n % inst.e_vector == 0
    return fits_store and not isinstance(shuffle(inst), str)


def candidate(tile: Tile, pipeline: str, scheduler: str, gemm: Gemm) -> Instance:
    """The instance of one tile and schedule for ``gemm``: the padding it needs, and the widest vector
    widths (and the smallest C shuffle) that its layouts, strides and alignment allow."""
    ak1, bk1 = k1_for(gemm.a), k1_for(gemm.b)
    spec = gemm_spec_for(gemm, tile.m, tile.n, tile.k, ak1, bk1)
    inst = Instance(
        tile.block, tile.m, tile.n, tile.k, ak1, bk1, tile.xdl, tile.xdl, tile.m_xdl, tile.n_xdl,
        WIDTHS[0], WIDTHS[0], WIDTHS[0], pipeline, scheduler, spec,
    )  # fmt: skip
    if _tile_reasons(inst):
        return inst
    for field, operand in (("a_vector", "A"), ("b_vector", "B")):
        widths = (attrs.evolve(inst, **{field: v}) for v in WIDTHS)
        inst = next((c for c in widths if _a_or_b_fits(c, operand, gemm)), inst)
    shuffles = (attrs.evolve(inst, e_vector=v, cshuffle_m=cm, cshuffle_n=cn) for v in WIDTHS for cm, cn in CSHUFFLES)
    return next((c for c in shuffles if _e_fits(c, gemm)), inst)


def enumerate_instances(gemm: Gemm, arch: Arch) -> tuple[list[Instance], list[Rejected]]:
    """The valid instance of every tile and schedule, and the others with every reason they were refused."""
    candidates = (candidate(tile, pipe, sched, gemm) for tile in TILES for pipe, sched in SCHEDULES)
    return sift(candidates, lambda inst: validate(inst, gemm, arch), "ck")


#: a block tile's time is modelled as max(M x N, BALANCE x (M + N)) per K: compute, or loading A and B
BALANCE = 64


def estimate(inst: Instance, gemm: Gemm, compute_units: int) -> int:
    """A relative time: waves of tiles over the compute units (padding included) times one tile's cost."""
    tiles = gemm.batch * -(-gemm.m // inst.m_per_block) * -(-gemm.n // inst.n_per_block)
    waves = -(-tiles // max(compute_units, 1))
    mb, nb = inst.m_per_block, inst.n_per_block
    return waves * max(mb * nb, BALANCE * (mb + nb))


def rank(instances: list[Instance], gemm: Gemm, compute_units: int) -> list[Instance]:
    """Most promising first by :func:`estimate` (ties: larger tiles), one instance per tile before
    any tile's second, so that a short list still spans several tiles."""
    ordered = sorted(instances, key=lambda i: (estimate(i, gemm, compute_units), -i.m_per_block * i.n_per_block))
    return spread(ordered, lambda i: (i.block_size, i.m_per_block, i.n_per_block, i.k_per_block, i.m_per_xdl))
