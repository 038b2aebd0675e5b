"""Pieces shared by the backends that render native kernel instances and build them with a compiler
(the ck and cutlass plugins): the record of what a machine lacks, the round trip of an instance's
tuning parameters through a ChoiceSpec, and the record of an instance refused with its reasons.
The builds themselves are ``tunesmith.native_build``'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import attrs


class Probed:
    """Mixin of an attrs record of the tools found on this machine: ``missing`` names each piece
    that is not, so the plugin can run exactly when nothing is missing."""

    missing: tuple[str, ...]

    @property
    def runnable(self) -> bool:
        return not self.missing

    @property
    def reason(self) -> str:
        """What ``tunesmith plugins`` shows: empty when runnable, else every missing piece."""
        return "" if self.runnable else "missing " + "; ".join(self.missing)


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
