"""``tunesmith report``: every tuned problem in the local cache, as a table, JSON or a chart."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from tunesmith.cli.console import err, num, out


def run(args: argparse.Namespace) -> int:
    """Read the local cache's autotune entries and show each against ATen and the roofline."""
    import tunesmith
    from tunesmith.cache import tally
    from tunesmith.cache.local import LocalDiskCache
    from tunesmith.cost import report

    with tunesmith.options() as settings:
        layer = LocalDiskCache(settings.cache_dir)
        entries = report.read_entries(layer, settings.cache_secret)
        rows = report.rows(entries.found, _report_profiles(args.device, settings))
    if args.plot:
        report.plot(rows, Path(args.plot))
    if args.json:
        print(json.dumps(report.as_json(rows), indent=1))
    else:
        _print_report(rows, layer.root)
    graphs = compiled_graphs(tally.read(layer.root))
    if graphs:
        (err if args.json else out).print(graphs)
    if args.plot:
        err.print(f"wrote the chart to {args.plot}")
    if entries.skipped:
        err.print(f"[yellow]skipped {len(entries.skipped)} invalid entries[/] (run with -v to see why)")
    return 0


def compiled_graphs(counts: dict[str, int]) -> str | None:
    """The line on the compiled graphs of every process that used this cache folder (None if none):
    a warm start that Inductor's own cache served ran no tunesmith stage, and is told of here."""
    cold, warm = counts["compiled_graph_cache_miss"], counts["compiled_graph_cache_hit"]
    if not cold and not warm:
        return None
    inductor = counts["compiled_graph_inductor_hit"]
    return (
        f"compiled graphs: {cold} compiled cold, {warm} served warm from a cache "
        f"({inductor} of them by Inductor's own cache, a warm start that runs no tunesmith stage)"
    )


def _report_profiles(device: str | None, settings: Any) -> Any:
    """A device name -> profile function: ``device``'s profile for every entry, else each GPU's own."""
    import functools

    from tunesmith import hooks
    from tunesmith.cost.calibrate import profile_in_use
    from tunesmith.cost.profiles import PRESETS
    from tunesmith.errors import TunesmithError

    if device is not None:
        try:
            profile = hooks.device_info(device, settings)
        except (RuntimeError, TypeError, ValueError):
            profile = None
        if profile is None:
            raise TunesmithError(
                f"no device profile for --device {device!r}: name a preset ({', '.join(PRESETS)}) or a GPU "
                "that has a preset or a calibration"
            )
        return lambda _name: profile

    @functools.cache
    def own(name: str) -> Any:
        return None if name.startswith("cpu") else profile_in_use(name, settings).profile

    return own


def _fraction(value: float | None) -> str:
    """A fraction as a percentage, with two significant digits below 1% (a CPU on a GPU's roofline)."""
    if value is None:
        return "-"
    return f"{value:.1%}" if value >= 0.01 else f"{value * 100:.2g}%"


def _print_report(rows: Sequence[Any], location: Path) -> None:
    table = Table(title=f"tunesmith report: {len(rows)} tuned problems in {location}")
    numeric = ("ms", "aten ms", "vs aten", "TFLOP/s", "GB/s", "roofline")
    for column in ("problem", "shape", "dtype", "device", "chosen", *numeric, "bound", "profile"):
        table.add_column(column, justify="right" if column in numeric else "left", overflow="fold")
    for r in rows:
        table.add_row(
            escape(r.op) if r.op else f"[dim]{r.key[:12]}[/]",
            *(escape(v or "-") for v in (r.shape, r.dtype, r.device_name, r.chosen)),
            num(r.ms, ".4f"),
            num(r.aten_ms, ".4f"),
            num(r.speedup, ".2f") + ("x" if r.speedup is not None else ""),
            num(r.tflops, ".3f"),
            num(r.gbps, ".1f"),
            _fraction(r.roofline_fraction),
            r.bound or "-",
            r.profile or "-",
        )
    out.print(table)
    if not rows:
        out.print("nothing tuned yet: tunesmith tune FILE.json, or tunesmith.tune(...), fills the cache")
