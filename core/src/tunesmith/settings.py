"""The public face of settings: ``tunesmith.options(...)`` and the resolved settings in force."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from tunesmith.config import Options, check_overrides, overriding, resolve
from tunesmith.plugins import get_system


def current_options(call: Mapping[str, Any] | None = None) -> Options:
    """The settings in force in this thread, with ``call`` (per-call overrides) on top."""
    return resolve(get_system().option_defs, call)


@contextlib.contextmanager
def options(**overrides: Any) -> Iterator[Options]:
    """Override settings inside a ``with`` block, for this thread or task only.

    Names and values are checked on entry; the block yields the resolved settings.
    """
    checked = check_overrides(get_system().option_defs, overrides, "tunesmith.options()")
    with overriding(checked):
        yield current_options()
