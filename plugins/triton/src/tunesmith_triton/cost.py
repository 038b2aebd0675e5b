"""The cost model of a Triton choice: tiles, waves, and the traffic of its tiles.

A program computes one ``block_m x block_n`` tile (of one K slice, with split-K). Its main loop
runs at a fraction of the SM's peak that grows with the tile's arithmetic intensity; the SMs take
the programs in waves, so a ragged last wave costs a whole one. The estimate is the slowest of
three floors (the main loops plus the output stores they do not hide, the tiles' loads from L2,
every byte once from HBM), plus a fixed cost per wave and per launch. The pointer template's
loads are vector loads only where Triton can prove them aligned; elsewhere its main loop reads an
element at a time. The constants below were set against the time of every config of the GEMM set
on the H100 (the per-choice times that ``benchmarks/cost_model.py`` records); the model ranks
configs, it does not predict cuBLAS.
"""

from __future__ import annotations

import attrs

from tunesmith.plugin import math_dtype, peak_flops, problem_bytes, torch_dtype
from tunesmith_hookspecs import DeviceInfo, Problem
from tunesmith_triton.choice import Config, TritonChoice
from tunesmith_triton.configs import _cdiv, dims, gemm_operands, pipeline_bytes
from tunesmith_triton.conv import conv_sizes
from tunesmith_triton.served import CONV_TEMPLATE

#: fraction of the SM's peak a tile's main loop reaches: warpgroup MMA (tiles of 64 rows or
#: more) and the older MMA, each scaled by intensity / (intensity + INTENSITY_HALF)
WGMMA_EFFICIENCY, MMA_EFFICIENCY, INTENSITY_HALF = 0.85, 0.35, 20.0
#: TMA loads, persistent programs, and float32 operands (TF32 from 4-byte tiles)
TMA_GAIN, PERSISTENT_GAIN, FLOAT32_EFFICIENCY = 1.05, 1.05, 0.3
#: the share of output stores a main loop does not hide: one program per SM, two or more, persistent
EXPOSED_ONE, EXPOSED_SHARED, EXPOSED_PERSISTENT = 1.0, 0.5, 0.2
#: L2-to-SM bandwidth per SM (bytes/s): about 9 TB/s over an H100's 132 SMs
L2_BYTES_PER_SM = 68e9
#: seconds per wave of programs (prologue, epilogue) and per launch
WAVE_S, LAUNCH_S = 1.5e-6, 4e-6
#: bytes a thread loads at once where Triton can prove the addresses aligned; it can when the
#: start is 16-byte aligned and every stride but the unit one, and the size along the unit one,
#: are multiples of ALIGNED_ELEMENTS (it specialises integer arguments by divisibility by 16).
#: Otherwise the pointer template loads element by element: odd_1000's pointer configs ran 2.5 to
#: 135x slower than its TMA ones.
VECTOR_BYTES, ALIGNED_ELEMENTS = 16, 16
#: what an SM holds when the device does not say (H100: 228 KiB, 2048 threads, 64 Ki registers)
SHARED_MEMORY, THREADS, REGISTERS = 232448, 2048, 65536


@attrs.frozen
class Work:
    """A kernel's work in GEMM terms: ``batch`` outputs of ``m x n``, each the sum over
    ``products`` products of ``taps`` reductions of length ``k`` (conv: taps are filter taps)."""

    batch: int
    m: int
    n: int
    k: int
    products: int = 1
    taps: int = 1


def work_of(choice: TritonChoice) -> Work:
    """The GEMM-terms work of a choice's problem (conv as implicit GEMM over output pixels)."""
    problem = choice.problem
    if choice.spec.template == CONV_TEMPLATE:
        images, pixels, out_channels, in_channels, taps = conv_sizes(problem)
        return Work(images, pixels, out_channels, in_channels, taps=taps)
    batch, m, n, k = dims(problem)
    return Work(batch, m, n, k, products=2 if problem.op == "mm_plus_mm" else 1)


def vector_loads(problem: Problem) -> bool:
    """Whether the pointer template's loads of every GEMM operand are vector loads (see
    ``ALIGNED_ELEMENTS``)."""
    for meta in gemm_operands(problem):
        spans = [d for d, n in enumerate(meta.shape) if n > 1]  # a dimension of one has no stride to speak of
        unit = next((d for d in reversed(spans) if meta.stride[d] == 1), None)
        if spans and (unit is None or meta.shape[unit] % ALIGNED_ELEMENTS):
            return False
        if any(meta.stride[d] % ALIGNED_ELEMENTS for d in spans if d != unit):
            return False
        if meta.storage_offset * torch_dtype(meta.dtype).itemsize % VECTOR_BYTES:
            return False
    return True


def _resident(config: Config, size: int, shared_memory: int) -> int:
    """Programs of this config an SM holds at once (shared memory, threads, registers)."""
    threads = config.num_warps * 32
    pipeline = pipeline_bytes(config, size)
    registers = max(64, min(255, config.block_m * config.block_n // threads + 32))
    return max(1, min(shared_memory // max(pipeline, 1), THREADS // threads, REGISTERS // (threads * registers)))


def estimate_ms(
    template: str, config: Config, work: Work, problem: Problem, device: DeviceInfo, sms: int, shared_memory: int
) -> float:
    """Milliseconds for one config of a template on ``problem``, by the model above, on a device
    of ``sms`` SMs with ``shared_memory`` bytes each."""
    size = torch_dtype(problem.inputs[0].dtype).itemsize
    tiles = work.batch * _cdiv(work.m, config.block_m) * _cdiv(work.n, config.block_n)
    programs = tiles * config.split_k
    k_steps = work.products * work.taps * _cdiv(_cdiv(work.k, config.split_k), config.block_k)
    intensity = config.block_m * config.block_n / (config.block_m + config.block_n)
    wgmma = config.block_m >= 64 and config.num_warps >= 4
    efficiency = (WGMMA_EFFICIENCY if wgmma else MMA_EFFICIENCY) * intensity / (intensity + INTENSITY_HALF)
    efficiency *= (TMA_GAIN if template == "gemm_tma" else 1.0) * (PERSISTENT_GAIN if config.persistent else 1.0)
    efficiency *= FLOAT32_EFFICIENCY if size == 4 else 1.0
    if template == "gemm" and not vector_loads(problem):
        efficiency *= size / VECTOR_BYTES
    if config.persistent:
        resident, waves = 1, _cdiv(tiles, sms)
    else:
        resident = _resident(config, size, shared_memory)
        waves = _cdiv(programs, sms * resident)
    sm_peak = peak_flops(device, math_dtype(problem)) / sms
    main = waves * resident * 2 * config.block_m * config.block_n * k_steps * config.block_k / (sm_peak * efficiency)
    out_bytes = work.batch * work.m * work.n * (4 if config.split_k > 1 else size)
    exposed = EXPOSED_PERSISTENT if config.persistent else EXPOSED_ONE if resident == 1 else EXPOSED_SHARED
    stores = out_bytes / device.memory_bandwidth * exposed
    l2 = programs * k_steps * config.block_k * (config.block_m + config.block_n) * size / (L2_BYTES_PER_SM * sms)
    workspace = 2 * config.split_k * out_bytes if config.split_k > 1 else 0  # partial sums written, read back
    hbm = (problem_bytes(problem) + workspace) / device.memory_bandwidth
    return (max(main + stores, l2, hbm) + waves * WAVE_S + LAUNCH_S) * 1e3
