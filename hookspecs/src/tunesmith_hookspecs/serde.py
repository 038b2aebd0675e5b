"""JSON (de)serialisation of the boundary types with cattrs: canonical, and strict on the way in.

Params become JSON objects, an infinite time becomes ``null``. ``from_json`` raises
:class:`SerdeError` on anything that is not a well-formed record of the asked type, which is how
a corrupt cache entry is recognised.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from tunesmith_hookspecs.types import ChoiceSpec, DeviceInfo, Problem, Timing

T = TypeVar("T")


class SerdeError(ValueError):
    """Text that is not a well-formed JSON record of the asked type."""


def _params_out(params: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params}


def _params_in(value: Any, _type: Any) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object of params, got {type(value).__name__}")
    return value


def _ms_in(value: Any, _type: Any) -> float:
    if value is None:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a time in ms, got {value!r}")
    return float(value)


def _strict(kind: type, accepted: tuple[type, ...]) -> Any:
    def hook(value: Any, _type: Any) -> Any:
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accepted):
            raise TypeError(f"expected {kind.__name__}, got {value!r}")
        return kind(value)

    return hook


converter = cattrs.Converter(forbid_extra_keys=True)
# cattrs coerces by default (str(1) == "1"); an entry read back must have the exact types.
for _kind, _accepted in ((str, (str,)), (int, (int,)), (float, (int, float)), (bool, (bool,))):
    converter.register_structure_hook(_kind, _strict(_kind, _accepted))
for _cls, _fields in (
    (ChoiceSpec, ("params",)),
    (Problem, ("scalars",)),
    (DeviceInfo, ("peak_flops",)),
):
    _over: dict[str, Any] = {f: override(unstruct_hook=_params_out) for f in _fields}
    converter.register_unstructure_hook(_cls, make_dict_unstructure_fn(_cls, converter, **_over))
    _over = {f: override(struct_hook=_params_in) for f in _fields}
    converter.register_structure_hook(_cls, make_dict_structure_fn(_cls, converter, **_over))

converter.register_unstructure_hook(
    Timing,
    make_dict_unstructure_fn(Timing, converter, ms=override(unstruct_hook=lambda v: v if math.isfinite(v) else None)),
)
converter.register_structure_hook(Timing, make_dict_structure_fn(Timing, converter, ms=override(struct_hook=_ms_in)))


def unstructure(obj: Any) -> Any:
    """Plain JSON-able data for a boundary record."""
    return converter.unstructure(obj)


def structure(data: Any, cls: type[T]) -> T:
    """A record of ``cls`` from plain data; :class:`SerdeError` when the data has another shape."""
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError, AttributeError) as exc:
        detail = "; ".join(cattrs.transform_error(exc)) if isinstance(exc, cattrs.BaseValidationError) else exc
        raise SerdeError(f"not a valid {cls.__name__}: {detail}") from exc


def to_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, so equal records give equal text."""
    return json.dumps(unstructure(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def from_json(text: str | bytes, cls: type[T]) -> T:
    """Parse and validate; :class:`SerdeError` on bad JSON or a wrong shape."""
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SerdeError(f"not JSON: {exc}") from exc
    return structure(data, cls)
