"""The tunesmith plugin contract: hook specifications, the ``hookimpl`` marker and boundary types.

Every plugin imports it; the few helpers of the core a plugin may also use are in
``tunesmith.plugin``, and nothing else of tunesmith is for plugins::

    from tunesmith_hookspecs import ChoiceSpec, hookimpl

Importing this package does not import torch.
"""

import pluggy

from tunesmith_hookspecs.hookspecs import PROJECT_NAME
from tunesmith_hookspecs.serde import SerdeError, from_json, structure, to_json, unstructure
from tunesmith_hookspecs.types import (
    DTYPES,
    EPILOGUE_OPS,
    OPS,
    TENSOR_DTYPES,
    Benchmarker,
    CacheLayer,
    Choice,
    ChoiceSpec,
    DeviceInfo,
    EpilogueOp,
    ListableCacheLayer,
    LoweringMatch,
    OptionRegistry,
    PluginStatus,
    Problem,
    SelectionReport,
    SharedCacheLayer,
    TensorMeta,
    Timing,
)

#: Version of this contract. It enters every cache key, so entries written under another
#: contract are never read back. Raised only when a change breaks plugins or stored entries (a hook
#: or type field removed, a meaning changed); new hooks, new arguments and a hook renamed with its
#: old name kept (deprecated) leave it as it is.
SPEC_VERSION = 1

#: Marks a plugin's hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = [
    "DTYPES",
    "EPILOGUE_OPS",
    "OPS",
    "PROJECT_NAME",
    "SPEC_VERSION",
    "TENSOR_DTYPES",
    "Benchmarker",
    "CacheLayer",
    "Choice",
    "ChoiceSpec",
    "DeviceInfo",
    "EpilogueOp",
    "ListableCacheLayer",
    "LoweringMatch",
    "OptionRegistry",
    "PluginStatus",
    "Problem",
    "SelectionReport",
    "SerdeError",
    "SharedCacheLayer",
    "TensorMeta",
    "Timing",
    "from_json",
    "hookimpl",
    "structure",
    "to_json",
    "unstructure",
]
