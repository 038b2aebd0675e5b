"""``tunesmith calibrate``: measure the local GPU's matmul rates and copy bandwidth, store them as its profile.

Each rate is the median of CUDA-event timings of a large square ``torch.mm`` after a warm-up; the
bandwidth is that of a large device-to-device copy, counting the bytes read and written. What is not
measured (float8 and float64 peaks, the interconnect) is kept from the GPU's preset.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import torch

from tunesmith.config import Options
from tunesmith.cost.profiles import PRESETS, load_calibrated, preset_for, profile_path, save_calibrated
from tunesmith.errors import TunesmithError
from tunesmith_hookspecs import DeviceInfo

log = logging.getLogger(__name__)

#: peak name -> (torch dtype, float32 matmul precision, side of the square matmul)
MATMULS: dict[str, tuple[torch.dtype, str | None, int]] = {
    "bfloat16": (torch.bfloat16, None, 8192),
    "float16": (torch.float16, None, 8192),
    "tf32": (torch.float32, "high", 4096),
    "float32": (torch.float32, "highest", 4096),
}

#: bytes of the copied buffer (read once, written once); at most an eighth of the GPU's memory
COPY_BYTES = 1 << 30


class CalibrationError(TunesmithError):
    """Calibration cannot run here (no CUDA device, or not the one asked for)."""


@attrs.frozen
class Calibration:
    """A measured profile, the preset it is compared with, and where it was stored."""

    profile: DeviceInfo
    preset: DeviceInfo | None
    path: Path


@attrs.frozen
class ProfileInUse:
    """The profile the cost model uses for a device, and where it comes from."""

    profile: DeviceInfo | None
    source: str  #: "calibrated (PATH)", "preset", or "none"


def cuda_device(device: str | None) -> torch.device:
    """The CUDA device to calibrate (``cuda`` means the current one); CalibrationError when there is none."""
    try:
        chosen = torch.device(device or "cuda")
    except (RuntimeError, TypeError) as exc:
        raise CalibrationError(f"--device {device!r} is not a device: {exc}") from None
    if chosen.type != "cuda":
        raise CalibrationError(f"tunesmith calibrate measures a CUDA GPU, not {chosen}: pass --device cuda:N")
    if not torch.cuda.is_available():
        raise CalibrationError(
            "tunesmith calibrate needs a CUDA GPU, and torch sees none here (a CPU-only torch, no driver, "
            "or CUDA_VISIBLE_DEVICES hides them); the CPU has no device profile"
        )
    index = torch.cuda.current_device() if chosen.index is None else chosen.index
    count = torch.cuda.device_count()
    if index >= count:
        raise CalibrationError(f"no device cuda:{index} here: torch sees {count} GPU(s), cuda:0 to cuda:{count - 1}")
    return torch.device("cuda", index)


@contextlib.contextmanager
def _matmul_precision(precision: str | None) -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    if precision is not None:
        torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def time_ms(fn: Callable[[], Any], device: torch.device, warmup: int, repeat: int) -> float:
    """The median time of ``fn`` on ``device`` in milliseconds, by CUDA events, after ``warmup`` calls."""
    with torch.cuda.device(device):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(device)
        pairs = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(device)
    return statistics.median(start.elapsed_time(end) for start, end in pairs)


def matmul_rate(peak: str, device: torch.device, size: int | None = None, warmup: int = 5, repeat: int = 20) -> float:
    """Achieved FLOP/s of a square ``torch.mm`` for a peak name of :data:`MATMULS`."""
    dtype, precision, default_size = MATMULS[peak]
    n = size or default_size
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    with _matmul_precision(precision):
        ms = time_ms(lambda: torch.mm(a, b, out=out), device, warmup, repeat)
    return 2 * n**3 / (ms * 1e-3)


def copy_bandwidth(device: torch.device, nbytes: int | None = None, warmup: int = 5, repeat: int = 20) -> float:
    """Achieved bytes/s of a device-to-device copy, counting the bytes read and the bytes written."""
    total = torch.cuda.get_device_properties(device).total_memory
    n = nbytes or min(COPY_BYTES, total // 8)
    src = torch.empty(n, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, warmup, repeat)
    return 2 * n / (ms * 1e-3)


def measure(device: torch.device, sizes: dict[str, int] | None = None, copy_bytes: int | None = None) -> DeviceInfo:
    """The profile of ``device`` as measured now: its name is the GPU's, as ``builtin_profile`` looks it up."""
    name = torch.cuda.get_device_name(device)
    preset = preset_for(name)
    peaks = dict(preset.peak_flops) if preset else {}
    for peak in MATMULS:
        peaks[peak] = matmul_rate(peak, device, (sizes or {}).get(peak))
        log.info("%s: %s matmul at %.1f TFLOP/s", name, peak, peaks[peak] / 1e12)
    bandwidth = copy_bandwidth(device, copy_bytes)
    log.info("%s: device-to-device copy at %.0f GB/s", name, bandwidth / 1e9)
    torch.cuda.empty_cache()
    return DeviceInfo(
        name,
        peaks,
        memory_bandwidth=bandwidth,
        interconnect_bandwidth=preset.interconnect_bandwidth if preset else None,
        interconnect_latency_s=preset.interconnect_latency_s if preset else None,
        multiprocessors=torch.cuda.get_device_properties(device).multi_processor_count,
    )


def calibrate(device: str | None, options: Options) -> Calibration:
    """Measure the GPU ``device`` (default: the current one) and store its profile, used from then on."""
    dev = cuda_device(device)
    profile = measure(dev)
    return Calibration(profile, preset_for(profile.name), save_calibrated(profile, options))


def profile_in_use(gpu_name: str, options: Options) -> ProfileInUse:
    """The core's profile for a GPU model by name: its calibrated profile, else its preset."""
    calibrated = load_calibrated(gpu_name, options)
    if calibrated is not None:
        return ProfileInUse(calibrated, f"calibrated ({profile_path(gpu_name, options)})")
    preset = PRESETS.get(gpu_name) or preset_for(gpu_name)
    return ProfileInUse(preset, "preset" if preset else "none")


def comparison(measured: DeviceInfo, preset: DeviceInfo | None) -> list[dict[str, Any]]:
    """What ``tunesmith calibrate`` prints: each measured figure, the preset's, and their ratio."""
    ours, theirs = dict(measured.peak_flops), dict(preset.peak_flops) if preset else {}
    rows = [(f"{peak} matmul", "TFLOP/s", ours.get(peak), theirs.get(peak), 1e12) for peak in MATMULS]
    rows.append(("copy", "GB/s", measured.memory_bandwidth, preset.memory_bandwidth if preset else None, 1e9))
    return [
        {
            "what": what,
            "unit": unit,
            "measured": value / scale if value else None,
            "preset": base / scale if base else None,
            "fraction": value / base if value and base else None,
        }
        for what, unit, value, base, scale in rows
    ]
