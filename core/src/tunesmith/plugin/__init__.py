"""The plugin API: the part of tunesmith's core that a backend or cache plugin may import.

A plugin imports ``tunesmith_hookspecs`` (hook specs, ``hookimpl``, boundary types) and, for the
helpers below, this package and its submodules; nothing else of ``tunesmith``. The test suite
enforces that for every shipped plugin (``tests/test_plugin_api.py``).

Stability: every name in ``__all__`` keeps its name, signature (arguments may be added, with
defaults) and meaning for as long as :data:`PLUGIN_API_VERSION`'s major number stays. Added names
raise the minor number. A name is removed or changed only with the next major number, after at
least one release in which using it warns with a ``DeprecationWarning``. Every other module of
``tunesmith`` is internal and may change in any release. ``docs/plugin-guide.md`` lists the API.

Settings (for ``tunesmith_add_options``, and hooks that get no ``options``):

- ``current_options()``: the resolved settings of the tune that is running.
- ``parse_optional_str(value)``: a string, or none.
- ``parse_seconds(value, optional=True)``: a positive number of seconds (or none).

Problems and tensors:

- ``torch_dtype(name)``: the ``torch.dtype`` of a :class:`TensorMeta` dtype name.
- ``scratch_like(meta, device)``: an unset tensor of ``meta``'s layout, to compile with, never to compare.
- ``broadcast_strides(meta, shape)``: ``meta``'s strides once broadcast to ``shape`` (0 where broadcast).
- ``flops(problem)``: the op's FLOPs, 2 per multiply-add.
- ``tf32_allowed(problem)``: whether torch may use TF32 for this float32 Problem.
- ``attention_output_like(q, dv, dtype=None)``: an empty attention output laid out in q's dimension
  order, as torch's fused kernels lay theirs out (and as training checks lay out its gradient).

The eager reference:

- ``run(problem, tensors)``: the whole Problem computed by torch, epilogue included.
- ``finish(problem, out, tensors, done=0)``: the epilogue past its first ``done`` steps, in the output's layout.

Cost model (for ``tunesmith_estimate_runtime``):

- ``Cost``: an estimate's ``flops``, ``bytes``, ``ms`` and ``bound``.
- ``roofline(flops, bytes, profile, dtype)``: the Cost at the higher of the compute and memory floors.
- ``peak_flops(profile, dtype)``: a DeviceInfo's peak FLOP/s for a dtype name (or ``"tf32"``).
- ``math_dtype(problem)``: the dtype a Problem's math runs at (``"tf32"`` where allowed).
- ``meta_bytes(meta)``: the bytes a tensor holds.
- ``problem_bytes(problem)``: the bytes a fused kernel moves at least (inputs and output once).

Cache layers (for ``tunesmith_cache_layers``):

- ``MAX_ENTRY_BYTES``: the largest entry a layer reads.
- ``check_size(size)``: raise ``BadEntry`` for an entry over ``MAX_ENTRY_BYTES``, before reading it.
- ``BadEntry``: what a layer raises for stored bytes that are not a valid entry (a miss).
- ``NAMESPACE``, ``ENTRY``, ``LOCK``, ``CHUNK``: key prefixes on a shared server (all, entries, locks, chunks).
- ``without_password(url)``: ``url`` fit to print.

Version: ``PLUGIN_API_VERSION``.

Submodule ``tunesmith.plugin.native``: the framework of the backends that compile native GEMM
instances (cutlass, ck), documented there.
"""

from __future__ import annotations

from tunesmith.attention import output_like as attention_output_like
from tunesmith.cache.entry import MAX_ENTRY_BYTES, BadEntry, check_size
from tunesmith.cache.remote import CHUNK, ENTRY, LOCK, NAMESPACE, without_password
from tunesmith.config import parse_optional_str, parse_seconds
from tunesmith.cost.roofline import Cost, math_dtype, meta_bytes, peak_flops, problem_bytes, roofline
from tunesmith.ops import finish, run, tf32_allowed
from tunesmith.problem import broadcast_strides, flops, scratch_like, torch_dtype
from tunesmith.settings import current_options

#: (major, minor) of this API; independent of ``tunesmith_hookspecs.SPEC_VERSION`` (the hook
#: contract, which enters cache keys), so that adding a helper here invalidates no cache.
PLUGIN_API_VERSION = (1, 1)

__all__ = [
    "CHUNK",
    "ENTRY",
    "LOCK",
    "MAX_ENTRY_BYTES",
    "NAMESPACE",
    "PLUGIN_API_VERSION",
    "BadEntry",
    "Cost",
    "attention_output_like",
    "broadcast_strides",
    "check_size",
    "current_options",
    "finish",
    "flops",
    "math_dtype",
    "meta_bytes",
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
