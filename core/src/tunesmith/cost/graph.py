"""``tunesmith.estimate``: trace a callable on fake tensors and estimate each node on a device.

Nothing runs on a device: inputs (real, meta or fake tensors) become fake tensors, the callable is
traced to ATen ops with ``make_fx``, and every operation node gets the first answer of
``tunesmith_estimate_runtime`` (a plugin's, else the core's node model in
:mod:`tunesmith.cost.nodes`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import rich.box
import torch
import torch.fx
from rich.console import Console
from rich.table import Table
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_map_only

from tunesmith import hooks
from tunesmith.config import Options
from tunesmith.cost import collectives
from tunesmith.cost.nodes import node_cost, op_name
from tunesmith.cost.profiles import PRESETS
from tunesmith.errors import TunesmithError
from tunesmith.settings import current_options
from tunesmith_hookspecs import DeviceInfo

log = logging.getLogger(__name__)

#: Node kinds that are work; placeholders, constants (get_attr) and the output are not.
_WORK = ("call_function", "call_method", "call_module")


@attrs.frozen
class Row:
    """One operation node: what it calls, its FLOPs and bytes, what bounds it, and its estimate.

    ``bound`` is ``compute``, ``memory``, ``network`` (a collective), ``none`` (free: a view, an
    allocation, a wait) or ``unknown`` (no plugin estimated the node; ``ms`` is then 0).
    """

    node: str
    op: str
    flops: int
    bytes: int
    bound: str
    ms: float


@attrs.frozen
class Estimate:
    """The cost model's estimate of a program on one device: one row per operation node."""

    device: str
    rows: tuple[Row, ...] = attrs.field(converter=tuple)
    graph: torch.fx.GraphModule | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def total_ms(self) -> float:
        """The sum of the rows: nodes run one after another, with no overlap."""
        return sum(row.ms for row in self.rows)

    @property
    def total_flops(self) -> int:
        return sum(row.flops for row in self.rows)

    @property
    def total_bytes(self) -> int:
        return sum(row.bytes for row in self.rows)

    def table(self, *, free: bool = False, box: rich.box.Box | None = rich.box.HEAVY_HEAD) -> Table:
        """A rich table of the rows (free rows too with ``free=True``) and the total."""
        title = f"estimate on {self.device}: {self.total_ms:.4g} ms"
        table = Table(title=title, title_justify="left", box=box)
        for header in ("node", "op", "FLOPs", "bytes", "bound", "ms"):
            table.add_column(header, justify="right" if header in ("FLOPs", "bytes", "ms") else "left")
        shown = [row for row in self.rows if free or row.bound != "none"]
        for row in shown:
            table.add_row(row.node, row.op, f"{row.flops:.3g}", f"{row.bytes:.3g}", row.bound, f"{row.ms:.4g}")
        hidden = len(self.rows) - len(shown)
        note = f"({hidden} free nodes not shown)" if hidden else ""
        table.add_row("total", note, f"{self.total_flops:.3g}", f"{self.total_bytes:.3g}", "", f"{self.total_ms:.4g}")
        return table

    def __rich__(self) -> Table:
        return self.table()

    def __str__(self) -> str:
        console = Console(width=160, color_system=None, force_terminal=False)
        with console.capture() as capture:
            console.print(self.table(box=rich.box.MARKDOWN))
        return "\n".join(line.rstrip() for line in capture.get().splitlines())


def resolve_profile(device: Any, options: Options) -> DeviceInfo:
    """The profile to estimate on: a DeviceInfo as given, else ``tunesmith_device_info``'s answer
    for a preset name or a torch.device; a clear error when there is none."""
    if isinstance(device, DeviceInfo):
        return device
    profile = hooks.device_info(device, options)
    if profile is None:
        raise TunesmithError(
            f"no device profile for device={device!r}: pass a preset name ({', '.join(PRESETS)}), a "
            "tunesmith_hookspecs.DeviceInfo, or a GPU that a plugin or `tunesmith calibrate` describes"
        )
    return profile


def trace(fn: Callable[..., Any], *example_inputs: Any) -> torch.fx.GraphModule:
    """``fn`` traced to ATen ops on fake tensors (real, meta and fake inputs all work; tensors
    ``fn`` closes over, a module's parameters say, become fake constants)."""
    collectives.ensure_traceable()
    mode = detect_fake_mode(example_inputs) or FakeTensorMode(allow_non_fake_inputs=True)
    inputs = tree_map_only(
        torch.Tensor, lambda t: t if isinstance(t, FakeTensor) else mode.from_tensor(t), example_inputs
    )
    name = getattr(fn, "__name__", None) or type(fn).__name__
    try:
        return make_fx(fn, tracing_mode="fake")(*inputs)
    except Exception as exc:
        raise TunesmithError(
            f"tunesmith.estimate could not trace {name}: {type(exc).__name__}: {exc} (it runs the function on "
            "fake tensors, shapes without data: a branch on tensor values, or an op without a fake or meta "
            "implementation, cannot be traced; estimate a function without them)"
        ) from exc


def estimate_graph(graph: torch.fx.GraphModule, profile: DeviceInfo, options: Options) -> Estimate:
    """The estimate of an already traced graph (nodes need recorded values, ``meta["val"]``)."""
    rows = []
    unknown = []
    for node in graph.graph.nodes:
        if node.op not in _WORK:
            continue
        cost = node_cost(node, profile)
        ms = hooks.estimate_runtime(node, profile, options)
        if ms is None:
            unknown.append(node.name)
        bound = "unknown" if ms is None else (cost.bound if cost is not None else "unknown")
        flops, nbytes = (cost.flops, cost.bytes) if cost is not None else (0, 0)
        rows.append(Row(node.name, op_name(node), flops, nbytes, bound, ms or 0.0))
    if unknown:
        log.warning("no estimate for %d nodes (counted as 0 ms): %s", len(unknown), ", ".join(unknown[:10]))
    return Estimate(profile.name, rows, graph)


def estimate(fn: Callable[..., Any], *example_inputs: Any, device: Any = "H100-SXM") -> Estimate:
    """The cost model's runtime estimate of ``fn(*example_inputs)`` on ``device`` (a preset name, a
    DeviceInfo or a torch.device), traced on fake tensors: nothing runs, no GPU is needed."""
    options = current_options()
    profile = resolve_profile(device, options)
    graph = trace(fn, *example_inputs)
    result = estimate_graph(graph, profile, options)
    log.debug("estimated %d nodes on %s: %.4g ms", len(result.rows), profile.name, result.total_ms)
    return result
