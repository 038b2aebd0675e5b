"""The cost model of a CUTLASS instance: tiles in waves over the SMs, each tile's main loop at a
fraction of the SM's peak that grows with the tile's arithmetic intensity.

It ranks the valid instances of a GEMM (the first ``cutlass_max_instances`` are offered) and gives
the core's pruning an estimate in milliseconds (``tunesmith_estimate_runtime``), with the roofline
helpers of the plugin API (``tunesmith.plugin``) for the device's peak and the bytes every kernel moves.
The constants are guesses from the kernels' design, not fitted to measurements.
"""

from __future__ import annotations

from tunesmith.plugin import math_dtype, peak_flops, problem_bytes
from tunesmith.plugin.native import spread
from tunesmith_cutlass.arch import Arch
from tunesmith_cutlass.gemm import ELEMENT_BYTES, Gemm
from tunesmith_cutlass.instances import Instance, stage_bytes
from tunesmith_hookspecs import DeviceInfo, Problem

#: fraction of an SM's peak a main loop reaches: wgmma kernels on Hopper, mma.sync kernels on their
#: own generation, and mma.sync kernels on Hopper (no wgmma: about half its tensor throughput)
SM90_EFFICIENCY, SM80_EFFICIENCY, SM80_ON_HOPPER = 0.85, 0.8, 0.45
#: intensity (tile M x N / (M + N)) at which a tile reaches half its family's efficiency
INTENSITY_HALF = 20.0
#: gain of a thread-block cluster (TMA multicast halves the L2 reads of the shared operand) on a
#: grid of at least one full wave
CLUSTER_GAIN = 1.03
#: seconds per wave of tiles (prologue, epilogue) and per launch (host-side argument setup included)
WAVE_S, LAUNCH_S = 1.5e-6, 6e-6
THREADS_PER_SM = 2048


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def efficiency(inst: Instance, arch: Arch) -> float:
    """The fraction of peak one tile's main loop reaches."""
    base = SM90_EFFICIENCY if inst.family == "sm90" else SM80_ON_HOPPER if arch.capability == 90 else SM80_EFFICIENCY
    intensity = inst.tile_m * inst.tile_n / (inst.tile_m + inst.tile_n)
    return base * intensity / (intensity + INTENSITY_HALF)


def waves(inst: Instance, gemm: Gemm, arch: Arch, sms: int) -> tuple[int, int]:
    """Waves of tiles over ``sms`` SMs, and the blocks one SM runs at once (sm90 kernels are
    persistent: one per SM; sm80 blocks share an SM as shared memory and threads allow)."""
    tiles = gemm.batch * _cdiv(gemm.m, inst.tile_m) * _cdiv(gemm.n, inst.tile_n)
    resident = 1
    if inst.family == "sm80":
        smem = stage_bytes(inst, gemm.kind) * inst.stages
        resident = max(1, min(arch.smem_bytes // max(smem, 1), THREADS_PER_SM // inst.threads))
    return _cdiv(tiles, max(sms, 1) * resident), resident


def main_loop_flops(inst: Instance, gemm: Gemm, arch: Arch, sms: int) -> float:
    """FLOPs one SM's main loops run in sequence, over the efficiency they reach: the cost in units
    of one SM's peak."""
    count, resident = waves(inst, gemm, arch, sms)
    k = _cdiv(gemm.k, inst.tile_k) * inst.tile_k
    gain = CLUSTER_GAIN if inst.cluster_m * inst.cluster_n > 1 and count > 1 else 1.0
    return count * resident * 2 * inst.tile_m * inst.tile_n * k / (efficiency(inst, arch) * gain)


def copy_bytes(gemm: Gemm) -> int:
    """Bytes the K-major copies of A and B move (read and written), where the instance reads copies."""
    size = ELEMENT_BYTES[gemm.kind.dtype]
    return sum(2 * gemm.batch * m.rows * m.cols * size for m in (gemm.a, gemm.b) if m.copied)


def estimate_ms(inst: Instance, gemm: Gemm, problem: Problem, arch: Arch, device: DeviceInfo, sms: int) -> float:
    """Milliseconds for one instance: the main loops or every byte once from memory, whichever is
    slower, plus a fixed cost per wave and per launch, after the operand copies it makes (``gemm``
    as :func:`~tunesmith_cutlass.instances.for_family` has it)."""
    main = main_loop_flops(inst, gemm, arch, sms) / (peak_flops(device, math_dtype(problem)) / sms)
    memory = problem_bytes(problem) / device.memory_bandwidth
    copied = copy_bytes(gemm)
    copies = copied / device.memory_bandwidth + (LAUNCH_S if copied else 0.0)
    return (max(main, memory) + copies + waves(inst, gemm, arch, sms)[0] * WAVE_S + LAUNCH_S) * 1e3


def rank(instances: list[Instance], gemm: Gemm, arch: Arch, sms: int) -> list[Instance]:
    """Most promising first (ties: larger tiles), one instance per tile shape before any shape's
    second, so that a short list still spans several tiles."""
    ordered = sorted(instances, key=lambda i: (main_loop_flops(i, gemm, arch, sms), -i.tile_m * i.tile_n, i.name))
    return spread(ordered, lambda inst: (inst.family, inst.tile_m, inst.tile_n))
