"""``tunesmith cache stats|clear|export|import``: inspect, clear, export or import the cache layers."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tunesmith.cli.console import err, out


def run(args: argparse.Namespace) -> int:
    """Do the action on the layers (``--layers``, else the ``caches`` setting); 1 if one could not be cleared."""
    import tunesmith
    from tunesmith.errors import TunesmithError
    from tunesmith.hooks import cache_layers

    overrides = {"caches": args.layers} if args.layers else {}
    with tunesmith.options(**overrides) as settings:
        layers = cache_layers(settings)
        if args.action == "stats":
            _cache_stats(layers)
        elif args.action == "clear":
            _confirm_shared(layers, args.yes)
            if not all([_cache_clear(layer) for layer in layers]):
                return 1
        elif args.file is None:
            raise TunesmithError(f"tunesmith cache {args.action} needs a FILE: tunesmith cache {args.action} FILE")
        else:
            _cache_transfer(args.action, Path(args.file), layers, settings.cache_secret)
    return 0


def _confirm_shared(layers: Sequence[Any], yes: bool) -> None:
    """A shared layer (a server the fleet tunes into) is cleared only with ``--yes`` or a "y" typed
    at a terminal: one command would re-tune every host's problems."""
    from tunesmith.errors import TunesmithError
    from tunesmith_hookspecs import SharedCacheLayer

    shared = ", ".join(layer.name for layer in layers if isinstance(layer, SharedCacheLayer))
    if not shared or yes:
        return
    asked = f"clear the shared layers {shared} for every host? [y/N] "
    if sys.stdin.isatty() and input(asked).strip().lower() in ("y", "yes"):
        return
    raise TunesmithError(f"not clearing the shared layers {shared}: pass --yes (or --layers local to keep them)")


def _cache_clear(layer: Any) -> bool:
    """Clear one layer and say what was removed; False where something could not be."""
    if not hasattr(layer, "clear"):
        out.print(f"{escape(layer.name)}: this layer cannot be cleared from here")
        return True
    try:
        out.print(f"{escape(layer.name)}: removed {layer.clear()} entries")
    except Exception as exc:  # noqa: BLE001 - one layer down does not stop the others
        err.print(f"[red]{escape(layer.name)}: cannot clear it[/]: {type(exc).__name__}: {escape(str(exc))}")
        return False
    return True


def _cache_stats(layers: Sequence[Any]) -> None:
    table = Table(title="tunesmith caches")
    for column in ("layer", "location", "entries", "bytes"):
        table.add_column(column)
    for layer in layers:
        try:
            stats = layer.stats() if hasattr(layer, "stats") else {}
            location = escape(str(stats.get("location", "-")))
        except Exception as exc:  # noqa: BLE001 - one layer down does not hide the others
            stats, location = {}, f"[red]unreachable[/]: {type(exc).__name__}: {escape(str(exc))}"
        table.add_row(
            escape(layer.name),
            location,
            str(stats.get("entries", "?")),
            str(stats.get("bytes", "?")),
        )
    out.print(table)


def _cache_transfer(action: str, path: Path, layers: Sequence[Any], secret: str | None) -> None:
    """``export``: every valid entry of the layers to ``path``; ``import``: ``path`` into every layer."""
    from tunesmith.cache.transfer import TransferError, export_entries, import_entries

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
        if action == "export":
            task = progress.add_task("exporting", total=None)
            document, report = export_entries(layers, secret, lambda: progress.advance(task))
            path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
            total = f"{len(document['entries'])} entries to {path}"
        else:
            try:
                document = json.loads(path.read_text())
            except (OSError, ValueError, RecursionError) as exc:  # nested past Python's stack: no export of ours
                raise TransferError(f"cannot read the export {path}: {type(exc).__name__}: {exc}") from None
            entries = document.get("entries") if isinstance(document, dict) else None
            size = len(entries) if isinstance(entries, list) else None
            task = progress.add_task("importing", total=size)
            report = import_entries(document, layers, secret, lambda: progress.advance(task))
            total = f"{size} entries from {path}"
    out.print(f"{action}ed {total}: " + (", ".join(f"{n} {k}" for k, n in report.entries.items()) or "no layers"))
    for why in report.skipped:
        err.print(f"[yellow]skipped[/] {escape(str(why))}")
