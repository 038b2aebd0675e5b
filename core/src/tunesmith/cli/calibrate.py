"""``tunesmith calibrate``: measure this GPU and store its profile; ``--show``: the profile in use."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.table import Table

from tunesmith.cli.console import err, num, out

if TYPE_CHECKING:
    from tunesmith_hookspecs import DeviceInfo


def run(args: argparse.Namespace) -> int:
    """Measure the GPU's matmul rates and copy bandwidth and store them (or show the profile)."""
    import tunesmith
    from tunesmith.cost import calibrate

    with tunesmith.options() as settings:
        if args.show:
            return _calibrate_show(args.device, settings)
        device = calibrate.cuda_device(args.device)
        with err.status(f"measuring {device} (matmul rates, copy bandwidth) ..."):
            result = calibrate.calibrate(str(device), settings)
    preset = result.preset.name if result.preset else "no preset"
    table = Table(title=f"tunesmith calibrate: {result.profile.name} ({device})")
    for column in ("measured", "unit", "value", f"preset ({preset})", "fraction"):
        table.add_column(column, justify="left" if column in ("measured", "unit") else "right")
    for row in calibrate.comparison(result.profile, result.preset):
        table.add_row(
            row["what"],
            row["unit"],
            num(row["measured"], ".1f"),
            num(row["preset"], ".1f"),
            num(row["fraction"], ".0%"),
        )
    out.print(table)
    out.print(f"stored in {result.path}: the cost model uses it for every {result.profile.name} from now on")
    return 0


def _calibrate_show(device: str | None, settings: Any) -> int:
    from tunesmith import hooks
    from tunesmith.cost import calibrate
    from tunesmith.cost.profiles import PRESETS

    profile: DeviceInfo | None
    if device in PRESETS:
        name, profile, source = device, PRESETS[device], "preset"
    else:
        import torch

        chosen = calibrate.cuda_device(device)
        name = torch.cuda.get_device_name(chosen)
        named = calibrate.profile_in_use(name, settings)
        profile = hooks.device_info(chosen, settings)
        source = named.source if profile == named.profile else "a plugin's tunesmith_device_info"
    if profile is None:
        out.print(f"{name}: no device profile (no calibration, no preset): run tunesmith calibrate")
        return 0
    table = Table(title=f"device profile of {name}", caption=f"{profile.name}: {source}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for dtype, peak in profile.peak_flops:
        table.add_row(f"{dtype} peak (TFLOP/s)", num(peak / 1e12, ".1f"))
    table.add_row("memory bandwidth (GB/s)", num(profile.memory_bandwidth / 1e9, ".0f"))
    if profile.interconnect_bandwidth is not None:
        table.add_row("interconnect, one way (GB/s)", num(profile.interconnect_bandwidth / 1e9, ".0f"))
    if profile.interconnect_latency_s is not None:
        table.add_row("interconnect latency (us)", num(profile.interconnect_latency_s * 1e6, ".1f"))
    table.add_row("multiprocessors", str(profile.multiprocessors or "-"))
    out.print(table)
    return 0
