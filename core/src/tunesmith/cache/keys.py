"""Cache keys: the Problem, the device, the enabled backends and versions, the spec version."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Sequence
from typing import Any

import torch

from tunesmith_hookspecs import SPEC_VERSION, Problem


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _static_fingerprint(device: str) -> tuple[tuple[str, Any], ...]:
    dev = torch.device(device)
    info: dict[str, Any] = {"type": dev.type, "torch": torch.__version__}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
        info |= {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "cuda": torch.version.cuda,
            "driver": get_driver() if get_driver else None,
            "triton": _version("triton"),
        }
    else:
        info |= {"name": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    return tuple(sorted(info.items()))


def device_fingerprint(device: torch.device) -> dict[str, Any]:
    """What about a device can change which kernel is fastest."""
    info = dict(_static_fingerprint(str(device)))
    if device.type == "cpu":
        info["threads"] = torch.get_num_threads()
    return info


def device_name(device: torch.device) -> str:
    info = device_fingerprint(device)
    return info["name"] if device.type == "cuda" else f"cpu ({info['name']}, {info['threads']} threads)"


def selection_key(problem: Problem, device: torch.device, backends: Sequence[tuple[str, str | None]]) -> str:
    """The autotune cache key of ``problem`` on ``device`` with these (backend, version) pairs."""
    body = {
        "spec_version": SPEC_VERSION,
        "problem": problem.key(),
        "device": device_fingerprint(device),
        "backends": [list(b) for b in backends],
        "fp32_precision": torch.get_float32_matmul_precision(),
    }
    if problem.op == "conv":  # a float32 convolution may use TF32 when cuDNN may
        body["cudnn_tf32"] = torch.backends.cudnn.allow_tf32
    if torch.are_deterministic_algorithms_enabled():  # backends offer fewer kernels (no atomic sums)
        body["deterministic"] = True
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
