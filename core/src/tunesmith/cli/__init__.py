"""The ``tunesmith`` command: ``plugins``, ``tune FILE.json``, ``cache stats|clear|export|import``,
``calibrate``, ``report``; one module per command. Only the standard library is imported here, so
that Ctrl-C is handled before rich, torch and the core are loaded."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tunesmith.cli import interrupts

DESCRIPTION = """Picks the fastest kernel for every matmul-shaped operation, and remembers it.

  tunesmith plugins                      installed plugins, and whether each runs here
  tunesmith tune FILE.json | model.py    tune a problem set, or compile a model script and tune its GEMMs
  tunesmith cache stats|clear|export|import
  tunesmith calibrate                    measure this GPU for the cost model
  tunesmith report                       every tuned problem against ATen and the roofline"""


def build_parser() -> argparse.ArgumentParser:
    """The command's parser: each subcommand's arguments, and its module's ``run`` as ``func``."""
    from importlib.metadata import version

    from tunesmith.cli import cache, calibrate, plugins, report, tune

    parser = argparse.ArgumentParser(
        prog="tunesmith", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"tunesmith {version('tunesmith')}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what tunesmith does (each tuned problem)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="installed plugins, their hooks, and whether each runs here")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=plugins.run)
    p = sub.add_parser(
        "tune",
        help="tune a problem set (the JSON format of benchmarks/gemm_shapes.json) or a model script (model.py)",
        description="FILE.json: a problem set. FILE.py: a script defining `model` and `example_inputs` (and "
        "optionally `train = True`, `compile_options`), compiled with the tunesmith backend and run once.",
    )
    p.add_argument("file", help="problem-set JSON file, or model script (.py)")
    p.add_argument(
        "--device",
        default=None,
        help="device to tune on (problem sets: default cpu; cuda spreads the cases over every GPU of the devices "
        "setting); a model script's model and inputs are moved there (default: where the script puts them)",
    )
    p.add_argument("--backends", type=lambda s: [b for b in s.split(",") if b], help="comma-separated backends")
    p.add_argument("--only", nargs="+", metavar="NAME", help="tune only these cases")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    p.set_defaults(func=tune.run)
    p = sub.add_parser(
        "cache",
        help="inspect, clear, export or import the cache layers",
        description="stats: entries per layer; clear: delete them; export FILE: every valid entry to a JSON "
        "file; import FILE: such a file into every layer (check signatures with cache_secret)",
    )
    p.add_argument("action", choices=("stats", "clear", "export", "import"))
    p.add_argument("file", nargs="?", help="the JSON file to export to or import from")
    p.add_argument(
        "--layers", type=lambda s: [x for x in s.split(",") if x], help="comma-separated layers (default: caches)"
    )
    p.add_argument("--yes", action="store_true", help="clear shared layers (Redis, memcached) without asking")
    p.set_defaults(func=cache.run)
    p = sub.add_parser(
        "calibrate",
        help="measure this GPU's matmul rates and copy bandwidth and store them as its profile",
        description="Times large square matmuls (bf16, fp16, tf32, fp32) and a device-to-device copy, and stores "
        "them as the profile of this GPU model (<cache_dir>/profiles/), used by the cost model from then on.",
    )
    p.add_argument("--device", default=None, help="the GPU to measure (default: cuda, the current one); cuda:N")
    p.add_argument(
        "--show", action="store_true", help="print the profile in use (calibrated or preset) instead of measuring"
    )
    p.set_defaults(func=calibrate.run)
    p = sub.add_parser(
        "report",
        help="every tuned problem: the chosen kernel, its speedup over ATen, TFLOP/s, GB/s, roofline fraction",
        description="Reads the autotune entries of the local disk cache. The roofline is that of --device, else "
        "of each entry's GPU (its calibrated profile, else its preset); CPU entries have none.",
    )
    p.add_argument("--device", default=None, help="a preset (H100-SXM, ...) or cuda:N whose roofline to use")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the speedups and roofline fractions (matplotlib)")
    p.set_defaults(func=report.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its exit status: 0 done, 1 a problem failed to tune, 2 a usage error or
    an error (printed on one line), 130 Ctrl-C, 143 SIGTERM."""
    previous: dict[int, object] = {}
    try:
        interrupts.catch_signals(previous)  # first: a signal while torch is imported ends it at once
        return _run(argv)
    except KeyboardInterrupt as exc:
        return interrupts.interrupted(exc)
    finally:
        interrupts.restore_signals(previous)


def _run(argv: Sequence[str] | None) -> int:
    """Parse the arguments, set up logging and warnings, load the core, and run the command."""
    import logging
    import warnings

    from rich.markup import escape

    from tunesmith.cli.console import err, one_line_warning
    from tunesmith.errors import TunesmithError

    args = build_parser().parse_args(argv)
    warnings.formatwarning = one_line_warning
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        _load()  # a bad config file is an error like any other (OptionError)
        interrupts.raise_on_signals()  # loaded: a signal now stops the command's work cleanly
        return args.func(args)
    except TunesmithError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2


def _load() -> None:
    """Import what every command uses (torch, the core, the plugins: seconds), while a signal still
    ends the process at once."""
    import importlib

    for name in ("torch", "tunesmith.direct", "tunesmith.selection", "tunesmith.settings", "tunesmith.cache.stack"):
        importlib.import_module(name)
    from tunesmith.plugins import get_system

    get_system()
