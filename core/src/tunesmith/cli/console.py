"""Where the command writes (tables to stdout, messages to stderr) and how it shows numbers and
warnings."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console

out = Console()
if not out.is_terminal:  # piped or captured: don't squeeze the tables into 80 columns
    out.width = 180
err = Console(stderr=True, soft_wrap=True)  # messages keep whole lines (paths stay copyable)


def num(value: Any, fmt: str) -> str:
    """A finite number formatted with ``fmt``; anything else (None, nan, inf) as ``-``."""
    return format(value, fmt) if isinstance(value, int | float) and math.isfinite(value) else "-"


def one_line_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> str:
    """A warning as the command shows it: its category and message, not Python's source line."""
    return f"{category.__name__}: {message}\n"
