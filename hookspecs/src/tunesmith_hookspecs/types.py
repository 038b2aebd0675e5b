"""The records that cross the plugin boundary, and the protocols a plugin's objects follow.

Every record is a frozen attrs class: hashable, comparable, and serialisable to JSON with
:mod:`tunesmith_hookspecs.serde`. Nothing here imports torch, so a plugin's metadata can be
read without it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

#: dtypes a Problem may name (as ``str(torch.dtype)`` without the ``torch.`` prefix).
DTYPES = ("float32", "float16", "bfloat16", "float64")

#: dtypes a tensor of a Problem may have: :data:`DTYPES`, and bool for attention's masks.
TENSOR_DTYPES = (*DTYPES, "bool")

#: The operations a Problem may describe, with the torch op each mirrors.
OPS = ("mm", "addmm", "bmm", "baddbmm", "mm_plus_mm", "conv", "attention")

#: Pointwise epilogue operations, applied in order to the op's result.
EPILOGUE_OPS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "add", "mul", "cast")

Params = tuple[tuple[str, Any], ...]


def _canon_value(value: Any) -> Any:
    """A hashable, JSON-able form of one parameter value (lists become tuples)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"parameter value {value!r} is not finite")
        return value
    if isinstance(value, list | tuple):
        return tuple(_canon_value(v) for v in value)
    raise TypeError(
        f"parameter value {value!r} of type {type(value).__name__} is not allowed: "
        "use bool, int, float, str, None or a list/tuple of those"
    )


def canonical_params(params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> Params:
    """Sort ``params`` by name and canonicalise each value, so equal params compare equal."""
    if params is None:
        return ()
    items = params.items() if isinstance(params, Mapping) else params
    out = {}
    for name, value in items:
        if not isinstance(name, str):
            raise TypeError(f"parameter name {name!r} is not a str")
        out[name] = _canon_value(value)
    return tuple(sorted(out.items()))


def _int_tuple(values: Iterable[int]) -> tuple[int, ...]:
    out = tuple(int(v) for v in values)
    if any(v < 0 for v in out):
        raise ValueError(f"negative size in {out}")
    return out


def _is_dtype(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value not in TENSOR_DTYPES:
        raise ValueError(f"{attribute.name}={value!r} is not one of {', '.join(TENSOR_DTYPES)}")


@attrs.frozen
class TensorMeta:
    """Shape, strides, dtype and device type of a tensor: everything a kernel's choice depends on.

    ``device`` is the device type (``"cpu"``, ``"cuda"``); the index is a run-time matter and
    never part of a key.
    """

    shape: tuple[int, ...] = attrs.field(converter=_int_tuple)
    stride: tuple[int, ...] = attrs.field(converter=_int_tuple)
    dtype: str = attrs.field(validator=_is_dtype)
    device: str = attrs.field(default="cpu", validator=attrs.validators.instance_of(str))
    storage_offset: int = attrs.field(default=0, converter=int)

    def __attrs_post_init__(self) -> None:
        if len(self.shape) != len(self.stride):
            raise ValueError(f"shape {self.shape} and stride {self.stride} differ in rank")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def keyed(self) -> TensorMeta:
        """This layout as keys see it: a dimension of size 1 has stride 0, since any stride of it
        addresses the same elements (its stride varies between processes for the same tensor)."""
        stride = tuple(0 if size == 1 else st for size, st in zip(self.shape, self.stride, strict=True))
        return attrs.evolve(self, stride=stride)

    @classmethod
    def contiguous(cls, shape: Sequence[int], dtype: str, device: str = "cpu") -> TensorMeta:
        """The row-major layout of ``shape``."""
        stride, step = [], 1
        for size in reversed(shape):
            stride.append(step)
            step *= max(size, 1)
        return cls(tuple(shape), tuple(reversed(stride)), dtype, device)


@attrs.frozen
class EpilogueOp:
    """One pointwise step after the GEMM: ``name`` from :data:`EPILOGUE_OPS`.

    ``add`` and ``mul`` take either ``input`` (the index of a tensor in ``Problem.inputs``,
    broadcast to the output) or ``scalar``; ``cast`` takes ``dtype``; ``gelu`` is the erf form
    and ``gelu_tanh`` the tanh approximation.
    """

    name: str = attrs.field(validator=attrs.validators.in_(EPILOGUE_OPS))
    input: int | None = None
    scalar: float | None = None
    dtype: str | None = None

    def __attrs_post_init__(self) -> None:
        binary = self.name in ("add", "mul")
        if binary and (self.input is None) == (self.scalar is None):
            raise ValueError(f"epilogue {self.name!r} needs exactly one of input= or scalar=")
        if not binary and (self.input is not None or self.scalar is not None):
            raise ValueError(f"epilogue {self.name!r} takes no operand")
        if (self.name == "cast") != (self.dtype is not None):
            raise ValueError("only the 'cast' epilogue takes dtype=, and it needs one")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"cast dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")


@attrs.frozen
class Problem:
    """One GEMM-shaped operation with its epilogue chain: what is tuned, and what keys caches.

    ``inputs`` lists the op's tensors in the torch op's order (addmm: bias, mat1, mat2;
    mm_plus_mm: a, b, c, d; conv: input, weight and optionally bias; attention: query, key, value
    and optionally the mask), followed by the tensors that epilogue steps refer to by index.
    ``scalars`` holds alpha/beta, the convolution's stride, padding, dilation and groups, or
    attention's ``is_causal``, ``scale`` and ``grad`` (a training problem: forward and backward).
    """

    op: str = attrs.field(validator=attrs.validators.in_(OPS))
    inputs: tuple[TensorMeta, ...] = attrs.field(converter=tuple)
    output: TensorMeta
    epilogue: tuple[EpilogueOp, ...] = attrs.field(default=(), converter=tuple)
    scalars: Params = attrs.field(default=(), converter=canonical_params)

    def scalar(self, name: str, default: Any = None) -> Any:
        """The value of one scalar, or ``default`` when the Problem has none of that name."""
        return dict(self.scalars).get(name, default)

    @property
    def num_op_inputs(self) -> int:
        """How many of ``inputs`` belong to the op itself (the rest are epilogue operands)."""
        extra = {step.input for step in self.epilogue if step.input is not None}
        return len(self.inputs) - len(extra)

    @property
    def device(self) -> str:
        return self.output.device

    def key(self) -> str:
        """A stable hex digest of this Problem: the same in every process and on every machine, and
        for layouts that differ only in the strides of size-1 dimensions (:meth:`TensorMeta.keyed`)."""
        from tunesmith_hookspecs.serde import to_json

        # mypy's attrs plugin reads a converter=tuple field's argument as an unsolved type variable
        inputs = tuple(m.keyed() for m in self.inputs)
        keyed = attrs.evolve(self, inputs=inputs, output=self.output.keyed())  # type: ignore[arg-type]
        return hashlib.sha256(to_json(keyed).encode()).hexdigest()


@attrs.frozen
class LoweringMatch:
    """What a lowering of the ``torch.compile`` backend found at one FX node.

    ``op`` is the GEMM-family op (one of :data:`OPS`); ``inputs`` are the FX nodes of its tensors in
    the torch op's order (addmm: bias, mat1, mat2; mm_plus_mm: a, b, c, d; conv: input, weight and
    optionally bias); ``root`` is the node whose value is the op's result (the core then takes in
    the chain of pointwise ops that follows it); ``scalars`` are alpha/beta or the convolution's
    stride, padding, dilation and groups, as ``tunesmith.tune`` takes them.
    """

    op: str = attrs.field(validator=attrs.validators.in_(OPS))
    inputs: tuple[Any, ...] = attrs.field(converter=tuple)
    root: Any
    scalars: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ChoiceSpec:
    """Names one candidate kernel: its backend (the plugin's entry-point name), template, params.

    ``params`` accepts a dict or pairs and is stored sorted and canonical (lists become tuples),
    so that two specs with the same content are equal and hash alike.
    """

    backend: str = attrs.field(validator=attrs.validators.instance_of(str))
    template: str = attrs.field(validator=attrs.validators.instance_of(str))
    params: Params = attrs.field(default=(), converter=canonical_params)

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)

    def key(self) -> str:
        """A stable hex digest of this spec, the same in every process (``hash()`` is salted per process)."""
        from tunesmith_hookspecs.serde import to_json

        return hashlib.sha256(to_json(self).encode()).hexdigest()

    def __str__(self) -> str:
        inner = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.backend}:{self.template}" + (f"[{inner}]" if inner else "")


@attrs.frozen
class Timing:
    """The measured time of one choice in milliseconds: ``math.inf`` with ``error`` when it failed.

    ``noise`` is the relative spread of the samples (interquartile range over the median of
    ``bench_repeat`` samples, 0 when unknown): selection widens its tie margin by it (to twice
    the standard error of the two medians' difference), and a tie goes to the earlier backend.
    """

    spec: ChoiceSpec
    ms: float
    error: str | None = None
    noise: float = 0.0

    @property
    def ok(self) -> bool:
        return math.isfinite(self.ms)


@attrs.frozen
class SelectionReport:
    """What one selection did: the winner, every timing, and where the answer came from.

    ``source`` is ``"tuned"`` for a fresh tuning, ``"empty"`` for a problem with an empty output or
    reduction (computed directly, never tuned or cached), ``"skipped"`` for ATen's choice taken
    without a tune where the cost model is sure it wins (no timings, kept in memory only),
    ``"plan"`` for a compiled graph's problem answered by its compiled-graph cache entry (no
    timings), else the cache layer that answered (``"memory"``, ``"local"``, or a plugin layer's
    name).
    """

    problem: Problem
    key: str
    chosen: ChoiceSpec
    timings: tuple[Timing, ...] = attrs.field(converter=tuple)
    source: str = "tuned"
    device_name: str = ""
    tuning_s: float = 0.0
    budget_exhausted: bool = False

    @property
    def cached(self) -> bool:
        return self.source not in ("tuned", "empty", "skipped")


@attrs.frozen
class DeviceInfo:
    """A device profile for the cost model: peaks per dtype (FLOP/s), bytes/s, interconnect.

    ``peak_flops`` is keyed by dtype name (``bfloat16``, ``float16``, ``float32``, ``tf32`` for
    float32 matmuls on TF32 units, ``float64``, ``float8``); ``memory_bandwidth`` and
    ``interconnect_bandwidth`` (one direction, per device) are bytes per second;
    ``multiprocessors`` counts SMs (CUs on AMD), for models of wave quantisation.
    """

    name: str
    peak_flops: Params = attrs.field(converter=canonical_params)
    memory_bandwidth: float
    interconnect_bandwidth: float | None = None
    interconnect_latency_s: float | None = None
    multiprocessors: int | None = None


def _optional_names(values: Iterable[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"expected a list of names, got {values!r}")
    return tuple(values)


def _known(allowed: tuple[str, ...]) -> Any:
    def check(_inst: Any, attribute: attrs.Attribute, values: tuple[str, ...] | None) -> None:
        unknown = sorted(set(values or ()) - set(allowed))
        if unknown:
            raise ValueError(f"{attribute.name}: unknown {', '.join(unknown)} (known: {', '.join(allowed)})")

    return check


@attrs.frozen
class PluginStatus:
    """Whether a plugin can run on this machine, and if not, why (shown by ``tunesmith plugins``).

    A backend may also declare what it supports: ``ops``, ``dtypes`` and ``devices`` (device
    types), each ``None`` for "all". The conformance suite skips, with the reason, what a plugin
    declares it does not support, and fails a declared op or dtype that gets no choices.
    """

    runnable: bool
    reason: str = ""
    ops: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names, validator=_known(OPS))
    dtypes: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names, validator=_known(DTYPES))
    devices: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names)

    def supports(self, op: str, dtype: str, device: str) -> str | None:
        """None when (op, dtype, device type) is declared supported, else why not."""
        for kind, value, allowed in (
            ("op", op, self.ops),
            ("dtype", dtype, self.dtypes),
            ("device", device, self.devices),
        ):
            if allowed is not None and value not in allowed:
                return f"the plugin declares no support for {kind} {value} (supports {', '.join(allowed) or 'none'})"
        return None


# --- Protocols: plugins need not subclass anything ------------------------------------------


@runtime_checkable
class Choice(Protocol):
    """A candidate kernel for one Problem."""

    spec: ChoiceSpec

    def precompile(self) -> None:
        """Do the slow work (compile, load); may run in a worker thread or a worker process.
        Raise on failure. It may be called again (before the winner runs here, say): make a
        repeated call cheap."""

    def kernel(self) -> Callable[..., Any]:
        """A callable taking the Problem's input tensors in order and returning its output."""


@runtime_checkable
class CacheLayer(Protocol):
    """A persistent store of cache entries (bytes) by key (a hex string)."""

    name: str

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...


@runtime_checkable
class SharedCacheLayer(CacheLayer, Protocol):
    """A layer shared by many processes (a server) that also offers single-flight locks.

    ``acquire`` returns a token when this process now holds the lock of ``key`` for ``ttl_s``
    seconds, ``None`` when another holder has it; ``refresh`` extends a held lock (``False`` if it
    was lost); ``release`` gives it up, only if the token still holds it. ``server_for`` names the
    server that stores ``key``, so that a failing server is skipped alone.
    """

    def acquire(self, key: str, ttl_s: float) -> str | None: ...

    def refresh(self, key: str, token: str, ttl_s: float) -> bool: ...

    def release(self, key: str, token: str) -> None: ...


@runtime_checkable
class ListableCacheLayer(CacheLayer, Protocol):
    """A layer that ``tunesmith cache stats|clear|export`` can walk: its keys, a summary, a wipe."""

    def keys(self) -> Iterable[str]: ...

    def stats(self) -> dict[str, Any]: ...

    def clear(self) -> int: ...


@runtime_checkable
class Benchmarker(Protocol):
    """Times candidate choices of one Problem."""

    def benchmark(self, problem: Problem, choices: Sequence[Choice], inputs: Sequence[Any]) -> list[Timing]: ...


class OptionRegistry(Protocol):
    """What ``tunesmith_add_options`` receives: plugins declare settings on it."""

    def add(
        self,
        name: str,
        default: Any,
        parse: Callable[[Any], Any] | None = None,
        help: str = "",
    ) -> None: ...
