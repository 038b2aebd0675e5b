"""The core's own plugin (registered as ``core``): the local disk layer (and, in a job with an
initialised ``torch.distributed`` process group, a layer in the job's store), the default
benchmarker, the ``eager`` graph compiler, and the cost model's device profiles and roofline
estimates.

They go through the same hooks as any plugin's, so a plugin can replace the benchmarker, and the
``caches`` setting orders ``local`` among the other layers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tunesmith.cache.dist_store import DistributedStoreLayer, default_store
from tunesmith.cache.local import LocalDiskCache
from tunesmith.config import Options
from tunesmith.cost.profiles import builtin_profile
from tunesmith.settings import current_options
from tunesmith_hookspecs import Benchmarker, CacheLayer, DeviceInfo, hookimpl


@hookimpl
def tunesmith_cache_layers(options: Options) -> Sequence[CacheLayer]:
    store = default_store()
    return [LocalDiskCache(options.cache_dir), *([DistributedStoreLayer(store)] if store is not None else [])]


@hookimpl(trylast=True)
def tunesmith_benchmarker(options: Options) -> Benchmarker:
    from tunesmith.bench import DefaultBenchmarker  # imports torch: not for a process that only reads caches

    return DefaultBenchmarker(options)


@hookimpl(trylast=True)
def tunesmith_graph_compiler(options: Options) -> Callable[..., Any] | None:
    """``eager``: the lowered graph runs as it is (``inductor`` drives its own pipeline instead)."""
    if options.graph_compiler != "eager":
        return None
    from tunesmith.compile.backend import eager

    return eager


@hookimpl(trylast=True)
def tunesmith_device_info(device: Any) -> DeviceInfo | None:
    return builtin_profile(device, current_options())


@hookimpl(trylast=True)
def tunesmith_estimate_runtime(node: Any, device: DeviceInfo) -> float | None:
    """The core's node model (``tunesmith.cost.nodes``) for a traced ``torch.fx.Node``; None for
    anything else (choices are left to their backends and to the Problem's roofline)."""
    import torch.fx

    from tunesmith.cost.nodes import node_cost

    if not isinstance(node, torch.fx.Node):
        return None
    cost = node_cost(node, device)
    return None if cost is None else cost.ms
