"""Process-wide named counts that tests and users assert on (``tunesmith.counters``)."""

from __future__ import annotations

import threading
from collections import Counter

counters: Counter[str] = Counter()
_lock = threading.Lock()


def bump(name: str, n: int = 1) -> None:
    """Add ``n`` to one counter, safely across threads."""
    with _lock:
        counters[name] += n
