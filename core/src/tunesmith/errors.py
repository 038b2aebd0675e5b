"""The exceptions and warnings a user of tunesmith can meet."""

from __future__ import annotations


class TunesmithError(Exception):
    """Base of every error tunesmith raises on purpose."""


class OptionError(TunesmithError, ValueError):
    """An unknown setting, or a value it does not accept; the message names both."""


class ProblemError(TunesmithError, ValueError):
    """Tensors that do not form a valid problem (shapes, dtypes, devices, scalars)."""


class NoValidChoicesError(TunesmithError, RuntimeError):
    """No backend gave a choice that ran; ``reasons`` maps each backend to why."""

    def __init__(self, what: str, reasons: dict[str, str]) -> None:
        self.reasons = dict(reasons)
        lines = [f"no valid choices for {what}:"]
        lines += [f"  - {backend}: {why}" for backend, why in reasons.items()]
        if not reasons:
            lines.append("  - no backend is enabled (the 'backends' setting is empty)")
        super().__init__("\n".join(lines))


class CaptureError(TunesmithError, RuntimeError):
    """Selection was asked for while a CUDA graph was being captured, where tuning cannot run."""


class TunesmithWarning(UserWarning):
    """Something went wrong that tunesmith recovered from (a bad cache entry, a failed layer)."""
