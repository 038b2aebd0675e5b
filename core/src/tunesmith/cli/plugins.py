"""``tunesmith plugins``: the installed plugins, their hooks, and whether each runs here."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.markup import escape
from rich.table import Table

from tunesmith.cli.console import out


def run(args: argparse.Namespace) -> int:
    """Print the plugins as a table, or as JSON with ``--json``."""
    from tunesmith.hooks import plugin_status
    from tunesmith.plugins import get_system

    system = get_system()
    rows: list[dict[str, Any]] = []
    for record in sorted(system.records.values(), key=lambda r: (r.source != "builtin", r.name)):
        hooks = sorted(c.name for c in system.pm.get_hookcallers(record.plugin) or []) if record.loaded else []
        status = plugin_status(record.name)
        rows.append(
            {
                "name": record.name,
                "source": record.source,
                "distribution": record.dist,
                "version": record.version,
                "hooks": hooks,
                "runnable": status.runnable,
                "reason": status.reason or None,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    table = Table(title="tunesmith plugins")
    for column in ("name", "distribution", "version", "hooks", "runs here"):
        table.add_column(column, overflow="fold")
    for row in rows:
        state = "[green]yes[/]" if row["runnable"] else f"[red]no[/]: {escape(str(row['reason']))}"
        dist = row["distribution"] or f"({row['source']})"
        names = ", ".join(h.removeprefix("tunesmith_") for h in row["hooks"]) or "-"
        table.add_row(*map(escape, (row["name"], dist, row["version"] or "-", names)), state)
    out.print(table)
    return 0
