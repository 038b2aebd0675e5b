"""Device profiles: datasheet presets, a calibrated profile per local GPU, and the lookup of both.

Peaks are dense (no structured sparsity) per dtype; sources are in docs/cost-model.md. A
calibrated profile (``tunesmith calibrate``) is JSON under ``<cache_dir>/profiles/`` and wins over
the preset of the same GPU, since it is what this machine measured.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from tunesmith.cache.local import default_cache_dir
from tunesmith.config import Options
from tunesmith_hookspecs import DeviceInfo, structure, unstructure

log = logging.getLogger(__name__)

T = 1e12
G = 1e9

#: Datasheet profiles by preset name (docs/cost-model.md gives each number's source).
PRESETS: dict[str, DeviceInfo] = {
    p.name: p
    for p in (
        DeviceInfo(
            "H100-SXM",
            {
                "float8": 1979 * T,
                "bfloat16": 989 * T,
                "float16": 989 * T,
                "tf32": 495 * T,
                "float32": 67 * T,
                "float64": 67 * T,
            },
            memory_bandwidth=3350 * G,
            interconnect_bandwidth=450 * G,
            interconnect_latency_s=3e-6,
            multiprocessors=132,
        ),
        DeviceInfo(
            "H100-PCIe",
            {
                "float8": 1513 * T,
                "bfloat16": 756 * T,
                "float16": 756 * T,
                "tf32": 378 * T,
                "float32": 51 * T,
                "float64": 51 * T,
            },
            memory_bandwidth=2000 * G,
            interconnect_bandwidth=64 * G,
            interconnect_latency_s=5e-6,
            multiprocessors=114,
        ),
        DeviceInfo(
            "H200",
            {
                "float8": 1979 * T,
                "bfloat16": 989 * T,
                "float16": 989 * T,
                "tf32": 495 * T,
                "float32": 67 * T,
                "float64": 67 * T,
            },
            memory_bandwidth=4800 * G,
            interconnect_bandwidth=450 * G,
            interconnect_latency_s=3e-6,
            multiprocessors=132,
        ),
        DeviceInfo(
            "A100-SXM",
            {"bfloat16": 312 * T, "float16": 312 * T, "tf32": 156 * T, "float32": 19.5 * T, "float64": 19.5 * T},
            memory_bandwidth=2039 * G,
            interconnect_bandwidth=300 * G,
            interconnect_latency_s=3e-6,
            multiprocessors=108,
        ),
        DeviceInfo(
            "L40S",
            {
                "float8": 733 * T,
                "bfloat16": 362 * T,
                "float16": 362 * T,
                "tf32": 183 * T,
                "float32": 91.6 * T,
                "float64": 1.4 * T,
            },
            memory_bandwidth=864 * G,
            interconnect_bandwidth=32 * G,
            interconnect_latency_s=5e-6,
            multiprocessors=142,
        ),
        DeviceInfo(
            "MI300X",
            {
                "float8": 2615 * T,
                "bfloat16": 1307 * T,
                "float16": 1307 * T,
                "tf32": 654 * T,
                "float32": 163 * T,
                "float64": 163 * T,
            },
            memory_bandwidth=5300 * G,
            interconnect_bandwidth=448 * G,
            interconnect_latency_s=4e-6,
            multiprocessors=304,
        ),
        DeviceInfo(
            "B200",
            {
                "float8": 4500 * T,
                "bfloat16": 2250 * T,
                "float16": 2250 * T,
                "tf32": 1100 * T,
                "float32": 75 * T,
                "float64": 37 * T,
            },
            memory_bandwidth=8000 * G,
            interconnect_bandwidth=900 * G,
            interconnect_latency_s=3e-6,
            multiprocessors=148,
        ),
    )
}

#: GPU names (``torch.cuda.get_device_name``) to presets: the first pattern found wins.
_NAMES = (
    (r"H100.*PCIe", "H100-PCIe"),
    (r"H100", "H100-SXM"),
    (r"H200", "H200"),
    (r"A100", "A100-SXM"),
    (r"L40S", "L40S"),
    (r"MI300X", "MI300X"),
    (r"B200", "B200"),
)


def preset_for(gpu_name: str) -> DeviceInfo | None:
    """The preset of a GPU by its reported name (``NVIDIA H100 80GB HBM3`` is H100-SXM), or None."""
    for pattern, preset in _NAMES:
        if re.search(pattern, gpu_name, re.IGNORECASE):
            return PRESETS[preset]
    return None


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "device"


def profile_path(gpu_name: str, options: Options) -> Path:
    """Where the calibrated profile of a GPU model is stored."""
    root = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
    return root / "profiles" / f"{_slug(gpu_name)}.json"


def save_calibrated(profile: DeviceInfo, options: Options) -> Path:
    """Store a measured profile (plain JSON) for its GPU model; its path."""
    path = profile_path(profile.name, options)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(unstructure(profile), indent=1))
    return path


def load_calibrated(gpu_name: str, options: Options) -> DeviceInfo | None:
    """The calibrated profile of a GPU model, or None (none stored, or unreadable: logged)."""
    path = profile_path(gpu_name, options)
    if not path.is_file():
        return None
    try:
        return structure(json.loads(path.read_text()), DeviceInfo)
    except Exception as exc:  # noqa: BLE001 - a bad file means no calibration, not a crash
        log.warning("ignoring the calibrated profile %s: %s", path, exc)
        return None


def builtin_profile(device: object, options: Options) -> DeviceInfo | None:
    """The core's answer to ``tunesmith_device_info``: a preset by name, else for a CUDA device its
    calibrated profile, else the preset its name matches; None for a CPU or an unknown GPU."""
    if isinstance(device, DeviceInfo):
        return device
    if isinstance(device, str) and device in PRESETS:
        return PRESETS[device]
    import torch  # here, not at import: the core's plugin loads without torch where only caches are used

    try:
        device = torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError):
        return None
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return load_calibrated(name, options) or preset_for(name)
