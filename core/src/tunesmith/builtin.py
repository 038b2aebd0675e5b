"""The core's own plugin (registered as ``core``): the local disk layer and the default benchmarker.

They go through the same hooks as any plugin's, so a plugin can replace the benchmarker, and the
``caches`` setting orders ``local`` among the other layers.
"""

from __future__ import annotations

from collections.abc import Sequence

from tunesmith.bench import DefaultBenchmarker
from tunesmith.cache.local import LocalDiskCache
from tunesmith.options import Options
from tunesmith_hookspecs import Benchmarker, CacheLayer, hookimpl


@hookimpl
def tunesmith_cache_backends(options: Options) -> Sequence[CacheLayer]:
    return [LocalDiskCache(options.cache_dir)]


@hookimpl(trylast=True)
def tunesmith_benchmarker(options: Options) -> Benchmarker:
    return DefaultBenchmarker(options)
