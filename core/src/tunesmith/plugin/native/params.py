"""Instances of a native kernel template: their tuning parameters (a ChoiceSpec's params, round
trip included), the sifting of the candidates into valid ones and refused ones with every reason,
and the order that spreads a short list over several tiles."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Self, TypeVar

import attrs

log = logging.getLogger(__name__)

T = TypeVar("T")
#: the types a parameter may have, by the name its annotation gives
_TYPES = {"int": int, "str": str}


def _typed(cls: type, fields: list[attrs.Attribute]) -> list[attrs.Attribute]:
    """Each field checked to be of its annotated type."""
    kinds: list[Any] = [_TYPES[f.type] if isinstance(f.type, str) else f.type for f in fields]
    return [f.evolve(validator=attrs.validators.instance_of(kind)) for f, kind in zip(fields, kinds, strict=True)]


def instance_params(cls: type[T]) -> type[T]:
    """A frozen attrs record of tuning parameters (annotated ``int`` or ``str``), each checked to be of
    its type, so that the params of a spec cached by another version are refused, not rendered."""
    return attrs.frozen(cls, field_transformer=_typed)


class InstanceParams:
    """Mixin of an attrs record of an instance's tuning parameters, which are its ChoiceSpec's params:
    every field, so that a spec names exactly one instance."""

    def params(self) -> dict[str, Any]:
        """The ChoiceSpec params."""
        return attrs.asdict(self)  # type: ignore[arg-type]

    @classmethod
    def from_params(cls, params: tuple[tuple[str, object], ...] | Mapping[str, object]) -> Self:
        """The instance a spec names; TypeError (or the fields' ValueError) when the params are not
        an instance's, say a spec cached by another version of the plugin."""
        return cls(**dict(params))


@attrs.frozen
class Rejected:
    """An instance tried and refused, with every reason."""

    instance: Any
    reasons: tuple[str, ...]


def sift(candidates: Iterable[T], validate: Callable[[T], list[str]], plugin: str) -> tuple[list[T], list[Rejected]]:
    """The valid candidates (each once, in order), and the others with every reason they were refused."""
    valid: list[T] = []
    rejected: list[Rejected] = []
    for inst in candidates:
        reasons = validate(inst)
        if reasons:
            rejected.append(Rejected(inst, tuple(reasons)))
            log.debug("%s: %s rejected: %s", plugin, getattr(inst, "name", inst), "; ".join(reasons))
        elif inst not in valid:
            valid.append(inst)
    return valid, rejected


def spread(ordered: Iterable[T], tile: Callable[[T], Hashable]) -> list[T]:
    """``ordered`` with the first instance of each tile before any tile's second (order kept
    otherwise), so that a short list still spans several tiles."""
    seen: set[Hashable] = set()
    first: list[T] = []
    rest: list[T] = []
    for inst in ordered:
        key = tile(inst)
        (rest if key in seen else first).append(inst)
        seen.add(key)
    return first + rest
