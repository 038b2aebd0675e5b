"""What happened to the compiled graphs of every process sharing a local cache folder, kept for
``tunesmith report``: how many were compiled cold (their plan tuned or looked up), how many were
served warm by tunesmith's plan cache, and how many of those by Inductor's own caches (a warm
start that runs no tunesmith stage at all, so that nothing else in the folder would tell of it).

One small JSON object of counts in ``<cache_dir>/tally.json``, added to under an exclusive
``flock`` of ``tally.lock`` and replaced whole (a temporary file, then a rename). It is read like
any entry: bounded in size before it is parsed, and anything wrong with it reads as no counts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from tunesmith.cache.entry import BadEntry, load_json
from tunesmith.cache.local import LocalDiskCache

try:
    import fcntl
except ImportError:  # not POSIX: no lock, the counts may lose a concurrent update
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: the counters kept, each as ``tunesmith.counters`` names it
KEPT = ("compiled_graph_cache_miss", "compiled_graph_cache_hit", "compiled_graph_inductor_hit")
FILE, LOCK = "tally.json", "tally.lock"
#: far more than the counts of ``KEPT`` take
MAX_BYTES = 4096


def local_root(layers: Iterable[object]) -> Path | None:
    """The folder of the ``local`` layer among ``layers`` (None without one: nothing is kept)."""
    return next((layer.root for layer in layers if isinstance(layer, LocalDiskCache)), None)


def read(root: Path) -> dict[str, int]:
    """The counts kept in ``root`` (every name of ``KEPT``; 0 where there are none)."""
    counts = dict.fromkeys(KEPT, 0)
    try:
        with (root / FILE).open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError:
        return counts
    try:
        data = load_json(raw) if len(raw) <= MAX_BYTES else None
    except BadEntry:
        data = None
    if not isinstance(data, dict):
        log.warning("ignoring the unreadable tally %s", root / FILE)
        return counts
    for name in KEPT:
        value = data.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            counts[name] = value
    return counts


def add(root: Path | None, counts: Mapping[str, int]) -> None:
    """Add ``counts`` to those kept in ``root``; a folder that cannot be written is logged, never raised."""
    counts = {name: n for name, n in counts.items() if name in KEPT and n}
    if root is None or not counts:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        with (root / LOCK).open("a") as held:
            if fcntl is not None:
                fcntl.flock(held, fcntl.LOCK_EX)
            kept = read(root)
            for name, n in counts.items():
                kept[name] += n
            fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-tally-", suffix=".json")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(kept, f)
                os.chmod(tmp, 0o644)
                os.replace(tmp, root / FILE)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    except OSError as exc:
        log.info("could not keep the compiled-graph counts in %s: %s", root, exc)


def clear(root: Path) -> None:
    """Forget the counts (``tunesmith cache clear``)."""
    for name in (FILE, LOCK):
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()
