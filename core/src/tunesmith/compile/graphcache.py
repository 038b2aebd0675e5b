"""The compiled-graph cache: a canonical key of a graph, and its plan (the chosen spec per Problem).

The key hashes every node (op, target, arguments with other nodes by position, keyword
arguments sorted, the layout of its value), the values of tensor constants, the settings that
can change a result, the uuids of the graph passes, the plugins and their versions, torch's
version and the devices. The plan is JSON; a hit rebuilds each kernel through
``tunesmith_rebuild_choice``, without tuning. A graph that cannot be keyed safely (higher-order
ops, user Triton kernels, opaque constants) is bypassed, with the reason logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from tunesmith.cache.keys import device_fingerprint
from tunesmith.config import Options, to_payload
from tunesmith.hooks import CACHE_LAYER_HOOKS
from tunesmith.passes import pass_uuid
from tunesmith.plugins import get_system
from tunesmith_hookspecs import SPEC_VERSION, ChoiceSpec, SerdeError, structure, unstructure

log = logging.getLogger(__name__)

#: settings that change where answers are stored, or how fast tuning runs, not which kernel wins
#: (``cudagraphs`` does: without CUDA graphs a call's launch counts too)
STORAGE_SETTINGS = frozenset(
    {"caches", "cache_dir", "cache_secret", "cache_backoff_s", "cache_lock_ttl_s", "cache_lock_wait_s"}
    | {"compile_threads", "devices", "bench_timeout_s", "tuning", "tuning_gap_s", "remember_install_keys"}
)


class Unkeyable(Exception):
    """The graph holds something the key cannot capture; the cache is bypassed."""


def _layout(value: Any) -> Any:
    """A value's layout as the key sees it: a size-1 dimension's stride (arbitrary, and different
    between processes for the same tensor) is left out."""
    if isinstance(value, torch.Tensor):
        pairs = zip(value.shape, value.stride(), strict=True)
        strides = ["*" if isinstance(size, int) and size == 1 else str(st) for size, st in pairs]  # no guard
        return ["tensor", [str(s) for s in value.shape], strides, str(value.dtype)]
    if isinstance(value, list | tuple):
        return [_layout(v) for v in value]
    return str(value) if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool) else None


def _arg(value: Any, index: dict[fx.Node, int]) -> Any:
    if isinstance(value, fx.Node):
        return ["node", index[value]]
    if isinstance(value, list | tuple):
        return [_arg(v, index) for v in value]
    if isinstance(value, dict):
        return {str(k): _arg(v, index) for k, v in sorted(value.items())}
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, torch.dtype | torch.device | torch.layout | torch.memory_format):
        return str(value)
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return ["sym", str(value)]
    if isinstance(value, slice):  # a Dynamo graph's indexing
        return ["slice", _arg(value.start, index), _arg(value.stop, index), _arg(value.step, index)]
    if value is Ellipsis:
        return ["ellipsis"]
    raise Unkeyable(f"an argument of type {type(value).__name__}")


def _target(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        raise Unkeyable(f"the higher-order op {target.name()}")
    if isinstance(target, str | torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"


def _constant(gm: fx.GraphModule, name: str) -> str:
    value = gm
    for part in name.split("."):
        value = getattr(value, part)
    if not isinstance(value, torch.Tensor):
        raise Unkeyable(f"the constant {name} of type {type(value).__name__}")
    try:
        with unset_fake_temporarily():  # the compiler may run under the graph's fake mode
            data = value.detach().cpu().contiguous().reshape(-1)
            digest = hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()
    except Exception as exc:  # noqa: BLE001 - a constant whose bytes cannot be read is not keyed
        raise Unkeyable(f"the constant {name} ({type(exc).__name__}: {exc})") from None
    return f"{digest}{tuple(value.shape)}{value.dtype}"


def result_settings(options: Options) -> dict[str, Any]:
    """The settings that can change which kernel wins: the core's, less where answers are stored,
    and the plugins', less those of plugins that only store answers (redis_url, ...)."""
    system = get_system()

    def only_stores(owner: str) -> bool:
        record = system.records.get(owner)
        if owner == "core" or record is None or not record.loaded:
            return False
        hooks = {caller.name for caller in system.pm.get_hookcallers(record.plugin) or []}
        return bool(hooks & set(CACHE_LAYER_HOOKS)) and "tunesmith_choices" not in hooks

    owners = {name: d.owner for name, d in system.option_defs.items()}
    return {
        k: v
        for k, v in to_payload(options).items()
        if k not in STORAGE_SETTINGS and not only_stores(owners.get(k, "core"))
    }


def graph_key(gm: fx.GraphModule, options: Options, kind: str, passes: list[Any]) -> str:
    """The compiled-graph cache key of ``gm`` (raises :class:`Unkeyable`)."""
    for node in gm.graph.nodes:  # what makes a graph unkeyable, named before anything else
        if "triton_kernel" in str(node.target):
            raise Unkeyable("a user Triton kernel")
        _target(node)
    index: dict[fx.Node, int] = {}
    nodes, devices = [], set()
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        value = node.meta.get("val")
        for v in value if isinstance(value, list | tuple) else [value]:
            if isinstance(v, torch.Tensor):
                devices.add(v.device)
        row = [node.op, _target(node), _arg(node.args, index), _arg(dict(node.kwargs), index), _layout(value)]
        if node.op == "get_attr":
            row.append(_constant(gm, str(node.target)))
        nodes.append(row)
    system = get_system()
    body = {
        "spec_version": SPEC_VERSION,
        "kind": kind,
        "nodes": nodes,
        "settings": result_settings(options),
        "passes": [pass_uuid(p) for p in passes],
        "plugins": sorted((r.name, r.version) for r in system.records.values() if r.loaded),
        "torch": torch.__version__,
        "precision": [torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32],
        "devices": sorted(json.dumps(device_fingerprint(d), sort_keys=True, default=str) for d in devices),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def plan_payload(plan: dict[str, ChoiceSpec]) -> dict[str, Any]:
    return {"problems": {key: unstructure(spec) for key, spec in sorted(plan.items())}}


def parse_plan(payload: Any) -> dict[str, ChoiceSpec]:
    if not isinstance(payload, dict) or set(payload) != {"problems"} or not isinstance(payload["problems"], dict):
        raise SerdeError("not a compiled-graph plan")
    return {str(key): structure(spec, ChoiceSpec) for key, spec in payload["problems"].items()}
