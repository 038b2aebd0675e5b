"""``tunesmith report``: for each tuned problem in the local cache, what was chosen and how good it is.

A row holds the chosen spec and its time, the speedup over ATen's best, the achieved TFLOP/s and
GB/s, and the fraction of the roofline (the roofline's time over the measured one) on a device
profile. Entries written before the Problem was stored in them still get a row, with no figure
that needs the Problem.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from tunesmith.cache.entry import BadEntry, decode, load_json
from tunesmith.cost.roofline import problem_bytes, problem_cost
from tunesmith.errors import TunesmithError
from tunesmith.problem import flops
from tunesmith.selection import SelectionEntry
from tunesmith_hookspecs import DeviceInfo, ListableCacheLayer, Problem, SerdeError, structure

log = logging.getLogger(__name__)

#: the backend whose best time a speedup is measured against
BASELINE = "aten"


@attrs.frozen
class ReportRow:
    """One tuned problem: ``None`` where a figure cannot be had (no Problem, no ATen time, no profile)."""

    key: str
    op: str | None  #: the op, with its epilogue steps as ``+name``
    shape: str | None
    dtype: str | None
    device_name: str
    chosen: str
    ms: float | None
    aten_ms: float | None
    speedup: float | None  #: ATen's best time over the chosen time
    tflops: float | None
    gbps: float | None
    profile: str | None  #: the device profile of the roofline
    roofline_ms: float | None
    roofline_fraction: float | None  #: the roofline's time over the chosen time
    bound: str | None  #: what bounds the roofline: compute or memory

    @property
    def label(self) -> str:
        """A short name for the problem (a plot's tick label)."""
        return f"{self.op} {self.shape} {self.dtype}" if self.op else f"{self.key[:12]} (no problem stored)"


@attrs.define
class Entries:
    """The autotune entries read from a layer, and what was skipped as invalid."""

    found: list[tuple[str, SelectionEntry]] = attrs.Factory(list)
    skipped: list[str] = attrs.Factory(list)


def read_entries(layer: ListableCacheLayer, secret: str | None) -> Entries:
    """Every valid autotune entry of a listable layer; a bad one is skipped and logged, not fatal."""
    result = Entries()
    for key in sorted(layer.keys()):
        try:
            raw = layer.get(key)  # BadEntry: refused unread, over the size bound
            if raw is None:
                continue  # removed since the listing
            if _kind(raw) not in ("autotune", None):
                continue  # a compiled graph's plan: not a tuned problem
            entry = structure(decode(raw, "autotune", key, secret), SelectionEntry)
        except (BadEntry, SerdeError) as exc:
            log.warning("skipping invalid autotune entry %s... in cache layer %r: %s", key[:16], layer.name, exc)
            result.skipped.append(f"{key[:16]}...: {exc}")
            continue
        result.found.append((key, entry))
    return result


def _kind(raw: bytes) -> str | None:
    """The ``kind`` an entry's bytes name, or None when they name none (a bad entry)."""
    try:
        kind = load_json(raw).get("kind")
    except (BadEntry, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den is not None else None


def _problem_columns(problem: Problem) -> tuple[str, str, str]:
    ops = problem.inputs[: problem.num_op_inputs]
    op = problem.op + "".join(f"+{step.name}" for step in problem.epilogue)
    return op, " x ".join("x".join(map(str, m.shape)) for m in ops), ops[0].dtype


def row(key: str, entry: SelectionEntry, profile: DeviceInfo | None) -> ReportRow:
    """The report row of one entry, its roofline on ``profile`` (None: no roofline)."""
    ms = _finite(next((t.ms for t in entry.timings if t.spec == entry.chosen), None))
    aten = [t.ms for t in entry.timings if t.spec.backend == BASELINE and _finite(t.ms)]
    # ATen's own pick when it won (it may win a tie against a faster-measured ATen choice), else its best
    aten_ms = ms if entry.chosen.backend == BASELINE else min(aten) if aten else None
    problem = entry.problem
    op = shape = dtype = None
    tflops = gbps = roofline_ms = fraction = bound = None
    if problem is not None:
        op, shape, dtype = _problem_columns(problem)
        tflops = _ratio(flops(problem) / 1e9, ms)  # FLOPs per ms / 1e9 = TFLOP/s
        gbps = _ratio(problem_bytes(problem) / 1e6, ms)  # bytes per ms / 1e6 = GB/s
        if profile is not None:
            cost = problem_cost(problem, profile)
            roofline_ms, bound = cost.ms, cost.bound
            fraction = _ratio(cost.ms, ms)
    return ReportRow(
        key=key,
        op=op,
        shape=shape,
        dtype=dtype,
        device_name=entry.device_name,
        chosen=str(entry.chosen),
        ms=ms,
        aten_ms=aten_ms,
        speedup=_ratio(aten_ms, ms),
        tflops=tflops,
        gbps=gbps,
        profile=profile.name if profile is not None and problem is not None else None,
        roofline_ms=roofline_ms,
        roofline_fraction=fraction,
        bound=bound,
    )


def rows(
    entries: Iterable[tuple[str, SelectionEntry]], profile_of: Callable[[str], DeviceInfo | None]
) -> list[ReportRow]:
    """The rows of ``(key, entry)`` pairs, by device, op, shape and dtype; ``profile_of`` maps an
    entry's device name to the profile of its roofline (None: none)."""
    found = [row(key, entry, profile_of(entry.device_name)) for key, entry in entries]
    return sorted(found, key=lambda r: (r.device_name, r.op is None, r.op or "", r.shape or "", r.dtype or "", r.key))


def as_json(report: Sequence[ReportRow]) -> list[dict[str, Any]]:
    """Plain data of the rows (``None`` for a missing figure)."""
    return [attrs.asdict(r) for r in report]


def _text(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def plot(report: Sequence[ReportRow], path: Path) -> None:
    """A PNG bar chart: the speedup over ATen and the roofline fraction of every problem."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise TunesmithError("--plot needs matplotlib: pip install matplotlib") from None
    labels = [r.label for r in report]
    positions = list(range(len(report)))
    fig = Figure(figsize=(max(6.0, 0.6 * len(report) + 2), 7.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    bars = top.bar(positions, [r.speedup or 0.0 for r in report], color="tab:blue")
    top.bar_label(bars, [_text(r.speedup, "{:.2f}x") for r in report], fontsize=8)
    top.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    top.set_ylabel("speedup over ATen (x)")
    top.set_title("tunesmith report")
    profiles = sorted({r.profile for r in report if r.profile})
    bars = bottom.bar(positions, [r.roofline_fraction or 0.0 for r in report], color="tab:orange")
    bottom.bar_label(bars, [_text(r.roofline_fraction, "{:.1%}") for r in report], fontsize=8)
    bottom.set_ylabel(f"fraction of the roofline ({', '.join(profiles) or 'no device profile'})")
    bottom.set_ylim(0, max([1.0, *(r.roofline_fraction or 0.0 for r in report)]))
    bottom.set_xticks(positions, labels, rotation=60, ha="right", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=120)
