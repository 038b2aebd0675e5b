"""The plugin API: what a backend or cache plugin may use from tunesmith's core, besides
``tunesmith_hookspecs``. Everything else in the core may change between releases.

(Being filled in for issue 28: documentation and version to come.)
"""

from __future__ import annotations

from tunesmith.cache.entry import MAX_ENTRY_BYTES, BadEntry, check_size
from tunesmith.cache.remote import CHUNK, ENTRY, LOCK, NAMESPACE, without_password
from tunesmith.config import parse_int, parse_optional_str, parse_seconds
from tunesmith.cost.roofline import math_dtype, meta_bytes, peak_flops, problem_bytes, roofline
from tunesmith.ops import finish, run, tf32_allowed
from tunesmith.problem import broadcast_strides, flops, scratch_like, torch_dtype

__all__ = [
    "CHUNK",
    "ENTRY",
    "LOCK",
    "MAX_ENTRY_BYTES",
    "NAMESPACE",
    "BadEntry",
    "broadcast_strides",
    "check_size",
    "finish",
    "flops",
    "math_dtype",
    "meta_bytes",
    "parse_int",
    "parse_optional_str",
    "parse_seconds",
    "peak_flops",
    "problem_bytes",
    "roofline",
    "run",
    "scratch_like",
    "tf32_allowed",
    "torch_dtype",
    "without_password",
]
