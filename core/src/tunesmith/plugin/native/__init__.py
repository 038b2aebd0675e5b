"""The native-kernel framework of the plugin API: what the plugins that render kernel instances as
C++ and build them with a compiler (cutlass with nvcc, ck with hipcc) share, written once.

- :mod:`.gemm`: a Problem as one GEMM (A, B, their layouts, the output, the epilogue as steps);
- :mod:`.params`: instance parameters as ChoiceSpec params, the sifting and spreading of instances;
- :mod:`.render`: the source's header line and the entry point naming the instance;
- :mod:`.build`: the build cache (SHA-256 keys, trusted libraries, one compile per key, timeouts);
- :mod:`.library`: loading a library once per process and binding its entry points;
- :mod:`.environment`: what the plugin needs on this machine, and what is missing;
- :mod:`.choice`: the choice that builds, loads and calls one instance;
- :mod:`.backend`: the plugin's options, status, choices and rebuild hooks.

A plugin keeps only what is its own: its GPU generations, its kernel library's rules for an instance,
the C++ it renders, its launch, and its cost model.
"""

from __future__ import annotations

from tunesmith.plugin.native.backend import NativeBackend, add_options
from tunesmith.plugin.native.build import (
    STDERR_TAIL,
    BuildError,
    Compiler,
    build,
    build_key,
    cache_root,
    compiler_version,
    trusted,
)
from tunesmith.plugin.native.choice import NativeChoice, check_alignment
from tunesmith.plugin.native.environment import Environment, Probed, find_tool, gather
from tunesmith.plugin.native.gemm import (
    OPS,
    UNARY_OPS,
    Epilogue,
    Gemm,
    Matrix,
    Product,
    Step,
    Unsupported,
    ab_inputs,
    epilogue_of,
    listing,
    matrix_of,
    product_of,
)
from tunesmith.plugin.native.library import Signature, load, name_entry
from tunesmith.plugin.native.params import InstanceParams, Rejected, instance_params, sift, spread
from tunesmith.plugin.native.render import banner, dist_version, name_function

__all__ = [
    "OPS",
    "STDERR_TAIL",
    "UNARY_OPS",
    "BuildError",
    "Compiler",
    "Environment",
    "Epilogue",
    "Gemm",
    "InstanceParams",
    "Matrix",
    "NativeBackend",
    "NativeChoice",
    "Probed",
    "Product",
    "Rejected",
    "Signature",
    "Step",
    "Unsupported",
    "ab_inputs",
    "add_options",
    "banner",
    "build",
    "build_key",
    "cache_root",
    "check_alignment",
    "compiler_version",
    "dist_version",
    "epilogue_of",
    "find_tool",
    "gather",
    "instance_params",
    "listing",
    "load",
    "matrix_of",
    "name_entry",
    "name_function",
    "product_of",
    "sift",
    "spread",
    "trusted",
]
