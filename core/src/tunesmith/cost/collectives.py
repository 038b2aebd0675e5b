"""Collectives in a traced graph, by an alpha-beta model of ring and tree algorithms.

A collective of ``n`` bytes over ``p`` ranks, with per-device link bandwidth ``B`` (one direction)
and per-step latency ``α``, takes the lower of its ring and its tree time (docs/cost-model.md):

- all-reduce: ring ``2(p-1)/p·n/B + 2(p-1)α``, tree ``2n/B + 2⌈log2 p⌉α``;
- all-gather, reduce-scatter (``n`` the gathered or not yet scattered size): ring
  ``(p-1)/p·n/B + (p-1)α``, tree ``n/B + ⌈log2 p⌉α``;
- broadcast ``n/B + ⌈log2 p⌉α``; all-to-all ``(p-1)/p·n/B + (p-1)α``; send/recv ``n/B + α``;
  barrier ``2⌈log2 p⌉α``.

Both spellings are recognised: the functional ``_c10d_functional`` ops (group size or group name
in the arguments) and the legacy ``c10d`` ops that ``torch.distributed`` calls record (a
ProcessGroup in the arguments). A coalesced op is one collective over the sum of its tensors.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_leaves

from tunesmith_hookspecs import DeviceInfo

log = logging.getLogger(__name__)

#: Namespaces of collective ops: the functional ops, their autograd twins, the legacy in-place ops.
NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd", "c10d"})

#: Each kind of collective and its ops in either spelling; ``wait`` costs nothing.
_OPS_BY_KIND = {
    "all_reduce": "all_reduce all_reduce_ all_reduce_coalesced all_reduce_coalesced_ allreduce_ allreduce_coalesced_",
    "all_gather": "all_gather_into_tensor all_gather_into_tensor_out all_gather_into_tensor_coalesced "
    "_allgather_base_ allgather_ allgather_into_tensor_coalesced_ allgather_coalesced_",
    "reduce_scatter": "reduce_scatter_tensor reduce_scatter_tensor_out reduce_scatter_tensor_coalesced "
    "_reduce_scatter_base_ reduce_scatter_ reduce_scatter_tensor_coalesced_",
    "broadcast": "broadcast broadcast_",
    "all_to_all": "all_to_all_single alltoall_base_ alltoall_",
    "p2p": "send recv_ isend irecv",
    "barrier": "barrier",
    "wait": "wait_tensor",
}
#: Op name (either spelling) to the kind of collective.
KINDS: dict[str, str] = {name: kind for kind, names in _OPS_BY_KIND.items() for name in names.split()}

#: Argument names (across both spellings' schemas) that hold the tensors a collective sends.
_INPUT_ARGS = ("input", "inputs", "input_tensor", "input_tensors", "input_list", "tensors", "tensor")
_GROUP_ARGS = ("group_name", "process_group", "group")

#: The deprecated coalesced c10d ops have no fake kernel in torch; ``ensure_traceable`` adds one.
_LEGACY_COALESCED = ("allreduce_coalesced_", "allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_")
_meta_library: Any = None


def ensure_traceable() -> None:
    """Give the legacy coalesced c10d ops a Meta kernel (a fake Work, no data) where torch has
    none, so that ``dist.all_reduce_coalesced`` and ``_coalescing_manager`` blocks trace on fake
    tensors. Real tensors never reach it: it is registered for the Meta key only."""
    global _meta_library
    if _meta_library is not None or not torch.distributed.is_available():
        return
    from torch._C._distributed_c10d import FakeWork

    def fake_work(*_args: Any, **_kwargs: Any) -> Any:
        return FakeWork().boxed()

    library = torch.library.Library("c10d", "IMPL")
    for name in _LEGACY_COALESCED:
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"c10d::{name}", "Meta"):
            library.impl(name, fake_work, "Meta")
    _meta_library = library


def collective_kind(node: torch.fx.Node) -> str | None:
    """The kind of collective ``node`` calls (``all_reduce``, ``wait``, ...), ``unknown`` for another
    op of a collective namespace, None for an op that is no collective."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return None
    if target.namespace not in NAMESPACES:
        return None
    return KINDS.get(target._opname, "unknown")


def _arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by their schema names."""
    schema = node.target._schema  # type: ignore[union-attr]
    named = {arg.name: value for arg, value in zip(schema.arguments, node.args, strict=False)}
    return {**named, **node.kwargs}


def _values(value: Any) -> Iterator[Any]:
    """The runtime values behind ``value`` (fx Nodes replaced by their recorded values), flattened."""
    for leaf in tree_leaves(value, is_leaf=lambda x: isinstance(x, torch.fx.Node)):
        if isinstance(leaf, torch.fx.Node):
            yield from tree_leaves(leaf.meta.get("val", leaf.meta.get("example_value")))
        else:
            yield leaf


def message_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (a Node, or lists of them)."""
    return sum(t.numel() * t.element_size() for t in _values(value) if isinstance(t, torch.Tensor))


def _group_size(value: Any, node: torch.fx.Node) -> int | None:
    """The size of the process group that ``value`` names: a get_attr of a ProcessGroup script
    object, a ProcessGroup, or a registered group's name."""
    if isinstance(value, torch.fx.Node):
        if value.op == "get_attr" and value.graph.owning_module is not None:
            obj: Any = value.graph.owning_module
            for part in str(value.target).split("."):
                obj = getattr(obj, part)
            value = obj
        else:
            value = value.meta.get("val")
    value = getattr(value, "real_obj", value)  # a FakeScriptObject wraps the real one
    try:
        from torch.distributed import ProcessGroup
        from torch.distributed.distributed_c10d import _resolve_process_group

        if isinstance(value, torch.ScriptObject):
            value = ProcessGroup.unbox(value)
        if isinstance(value, ProcessGroup):
            return int(value.size())
        if isinstance(value, str | int):
            return int(_resolve_process_group(str(value)).size())
    except Exception as exc:  # noqa: BLE001 - an unresolvable group falls back to the world size
        log.debug("cannot resolve the process group %r of %s: %s", value, node, exc)
    return None


def world_size(node: torch.fx.Node) -> int | None:
    """How many ranks the collective at ``node`` spans: its ``group_size`` argument, else the size of
    its process group, else the default group's world size; None when none is known."""
    args = _arguments(node)
    if isinstance(args.get("group_size"), int):
        return int(args["group_size"])
    for name in _GROUP_ARGS:
        if name in args:
            size = _group_size(args[name], node)
            if size is not None:
                return size
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return None


def collective_ms(kind: str, nbytes: int, ranks: int, profile: DeviceInfo) -> tuple[float, str]:
    """Milliseconds of one collective and the algorithm that gives them (``ring`` or ``tree``; the
    faster of the two), by the alpha-beta model in this module's docstring."""
    if kind == "wait" or ranks <= 1:
        return 0.0, "none"
    bandwidth = float(profile.interconnect_bandwidth or 0.0)
    alpha = float(profile.interconnect_latency_s or 0.0)
    if bandwidth <= 0:
        raise ValueError(f"device profile {profile.name!r} has no interconnect bandwidth")
    p, n = ranks, float(nbytes)
    steps = math.ceil(math.log2(p))
    share = (p - 1) / p
    if kind == "all_reduce":
        times = {"ring": 2 * share * n / bandwidth + 2 * (p - 1) * alpha, "tree": 2 * n / bandwidth + 2 * steps * alpha}
    elif kind in ("all_gather", "reduce_scatter"):
        times = {"ring": share * n / bandwidth + (p - 1) * alpha, "tree": n / bandwidth + steps * alpha}
    elif kind == "broadcast":
        times = {"tree": n / bandwidth + steps * alpha}
    elif kind == "all_to_all":
        times = {"ring": share * n / bandwidth + (p - 1) * alpha}
    elif kind == "p2p":
        times = {"ring": n / bandwidth + alpha}
    elif kind == "barrier":
        times = {"tree": 2 * steps * alpha}
    else:
        raise ValueError(f"no model for collective kind {kind!r}")
    algorithm = min(times, key=lambda k: times[k])
    return times[algorithm] * 1e3, algorithm


def collective_cost(node: torch.fx.Node, profile: DeviceInfo) -> tuple[int, float] | None:
    """(bytes sent, ms) of the collective at ``node``; None when its kind, world size or the
    profile's interconnect is unknown (logged)."""
    kind = collective_kind(node)
    if kind is None or kind == "unknown":
        log.debug("no collective model for %s", node.target)
        return None
    if kind == "wait":
        return 0, 0.0
    ranks = world_size(node)
    if ranks is None:
        log.warning("cannot tell the world size of %s (%s): no group in its arguments", node.name, node.target)
        return None
    if not profile.interconnect_bandwidth:
        log.warning("device profile %r has no interconnect bandwidth: %s is not estimated", profile.name, node.name)
        return None
    args = _arguments(node)
    sent = next((args[name] for name in _INPUT_ARGS if name in args), None)
    nbytes = message_bytes(sent)
    if kind == "all_gather":
        nbytes *= ranks
    ms, algorithm = collective_ms(kind, nbytes, ranks, profile)
    log.debug("%s: %s of %d bytes over %d ranks, %s, %.4g ms", node.name, kind, nbytes, ranks, algorithm, ms)
    return nbytes, ms
