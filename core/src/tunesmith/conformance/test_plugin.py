"""The plugin as a whole: it loads, and some conformance checks apply to it."""

from __future__ import annotations

from typing import Any

import pytest

CHECKED = ("backend", "cache layer", "graph pass")


def test_some_checks_apply(tunesmith_target: Any) -> None:
    if not set(tunesmith_target.kinds) & set(CHECKED):
        hooks = ", ".join(sorted(tunesmith_target.hooks)) or "no hooks"
        pytest.fail(
            f"no conformance checks apply to plugin {tunesmith_target.name!r}: it implements {hooks}; "
            f"checks exist for kinds {', '.join(CHECKED)}",
            pytrace=False,
        )
