"""The ``tunesmith`` command: ``plugins``, ``tune FILE.json``, ``cache stats|clear|export|import``,
``calibrate``, ``report``."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

out = Console()
if not out.is_terminal:  # piped or captured: don't squeeze the tables into 80 columns
    out.width = 180
err = Console(stderr=True, soft_wrap=True)  # messages keep whole lines (paths stay copyable)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM in the main thread: the command stops and exits 128 + ``signum``;
    ``done`` says what was finished (for the one line printed)."""

    def __init__(self, signum: int = signal.SIGINT, done: str = "") -> None:
        super().__init__(signum, done)
        self.signum, self.done = signum, done


def _plugins(args: argparse.Namespace) -> int:
    from tunesmith.hooks import plugin_status
    from tunesmith.plugins import get_system

    system = get_system()
    rows = []
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
        hooks = ", ".join(h.removeprefix("tunesmith_") for h in row["hooks"]) or "-"
        table.add_row(*map(escape, (row["name"], dist, row["version"] or "-", hooks)), state)
    out.print(table)
    return 0


def _tune(args: argparse.Namespace) -> int:
    import tunesmith
    from tunesmith import problemset

    if args.file.endswith(".py"):
        return _tune_model(args)
    cases = problemset.load(args.file)
    if args.only:
        cases = [c for c in cases if c.name in args.only]
    overrides: dict[str, Any] = {}
    if args.backends is not None:
        overrides["backends"] = args.backends
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with (
        tunesmith.options(**overrides) as settings,
        Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress,
    ):
        devices = spread_devices(args.device or "cpu", settings.devices)
        task = progress.add_task(f"tuning on {', '.join(map(str, devices))}", total=len(cases))
        rows = _tune_cases(cases, devices, lambda: progress.advance(task))
    results = [rows[i] for i in range(len(cases))]
    _print_results(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any("error" in r for r in results) else 0


#: how long an interrupted run waits for its threads to leave the case in flight
INTERRUPT_GRACE_S = 1.0


def _tune_cases(cases: Sequence[Any], devices: Sequence[Any], advance: Callable[[], None]) -> dict[int, dict[str, Any]]:
    """Each case's row, tuned on one thread per device, each taking the next case when it is free
    (with this thread's settings). On Ctrl-C no case is started, the workers are killed (the case
    in flight is abandoned) and Interrupted says how many were tuned."""
    import contextvars
    import queue

    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(cases)):
        todo.put(i)
    rows: dict[int, dict[str, Any]] = {}
    stop = threading.Event()
    failed: list[BaseException] = []

    def tune_on(device: Any) -> None:
        try:
            while not stop.is_set():
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                rows[i] = _tune_case(cases[i], device)
                advance()
        except KeyboardInterrupt:  # the workers were stopped under the case in flight
            return
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            failed.append(exc)

    # Daemon threads: an abandoned case (compiling in this process) does not hold up the exit.
    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(tune_on, d), name=f"tune-{d}", daemon=True)
        for d in devices
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():  # in slices: a signal the kernel gave another thread must not wait
                thread.join(0.1)
    except KeyboardInterrupt as exc:
        stop.set()
        _stop_workers()
        _join_all(threads, INTERRUPT_GRACE_S)
        tuned = sum("error" not in row for row in rows.values())
        done = f"{tuned} of {len(cases)} problems tuned; their entries are saved"
        raise Interrupted(_signum(exc), done) from None
    if failed:
        raise failed[0]
    return rows


def _join_all(threads: Sequence[threading.Thread], seconds: float) -> None:
    """Wait up to ``seconds`` in all for ``threads`` to end."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))


def _stop_workers() -> None:
    """Kill the benchmark workers at once (if any was ever started), so that no orphan outlives us."""
    pool = sys.modules.get("tunesmith.bench.pool")
    if pool is not None:
        pool.stop()


def _signum(exc: BaseException) -> int:
    """The signal behind an interrupt: Interrupted's own, else SIGINT (Python's KeyboardInterrupt)."""
    return exc.signum if isinstance(exc, Interrupted) else signal.SIGINT


def _tune_model(args: argparse.Namespace) -> int:
    """``tunesmith tune model.py``: compile the script's model, run it once, show every selection."""
    import tunesmith
    from tunesmith import modelscript

    script = modelscript.load(args.file, args.device)
    overrides: dict[str, Any] = {"backends": args.backends} if args.backends is not None else {}
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed} problems"))
    progress = Progress(*columns, TimeElapsedColumn(), console=err, transient=True)
    with tunesmith.options(**overrides), progress:
        task = progress.add_task(f"compiling and tuning {Path(args.file).name}", total=None)
        reports = modelscript.tune(script, lambda report: progress.advance(task))
    rows = [modelscript.row(r, f"#{i + 1}") for i, r in enumerate(reports)]
    if args.only:
        rows = [r for r in rows if r["name"] in args.only]
    _print_results(rows)
    if not rows:
        out.print("no GEMM-family problem was found in the model")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def spread_devices(device: str, devices: Sequence[str] | None) -> list[Any]:
    """The devices a problem set is spread over: ``cuda`` (no index) means every GPU in the
    ``devices`` setting, or every visible one; anything else is that one device."""
    import torch

    chosen = torch.device(device)
    if chosen.type != "cuda" or chosen.index is not None:
        return [chosen]
    if devices:
        return [torch.device(d) for d in devices]
    return [torch.device("cuda", i) for i in range(max(torch.cuda.device_count(), 1))]


def _tune_case(case: Any, device: Any) -> dict[str, Any]:
    """Tune one case of a problem set on ``device``: its result row (with ``error`` on failure)."""
    import tunesmith
    from tunesmith import problemset
    from tunesmith.modelscript import measures

    row: dict[str, Any] = {
        "name": case.name,
        "op": case.op,
        "shape": problemset.shape_text(case),
        "dtype": case.dtype,
        "device": str(device),
    }
    try:
        tensors, scalars = problemset.make_inputs(case, device)
        epilogue = problemset.epilogue(case)
        start = time.perf_counter()
        sel = tunesmith.tune(case.op, *tensors, epilogue=epilogue, **scalars)
        wall_s = time.perf_counter() - start
    except tunesmith.TunesmithError as exc:
        return row | {"error": str(exc)}
    return row | measures(sel.report) | {"wall_s": wall_s}


def _print_results(results: Sequence[dict[str, Any]]) -> None:
    table = Table(title="tunesmith selections")
    for column in ("case", "op", "shape", "dtype", "chosen", "ms", "TFLOP/s", "vs aten", "choices", "from"):
        table.add_column(column, justify="right" if column in ("ms", "TFLOP/s", "vs aten", "choices") else "left")

    def num(value: Any, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, float) and math.isfinite(value) else "-"

    for r in results:
        if "error" in r:
            names = (escape(r[k]) for k in ("name", "op", "shape", "dtype"))
            table.add_row(*names, f"[red]{escape(r['error'])}[/]", *["-"] * 5)
            continue
        table.add_row(
            *(escape(r[k]) for k in ("name", "op", "shape", "dtype", "chosen")),
            num(r["ms"], ".4f"),
            num(r["tflops"], ".3f"),
            num(r["speedup_vs_aten"], ".2f") + "x",
            str(r["choices"]),
            escape(r["source"]),
        )
    out.print(table)


def _cache(args: argparse.Namespace) -> int:
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


def _calibrate(args: argparse.Namespace) -> int:
    """``tunesmith calibrate``: measure this GPU and store its profile; ``--show``: the profile in use."""
    import tunesmith
    from tunesmith.cost import calibrate

    with tunesmith.options() as settings:
        if args.show:
            return _calibrate_show(args.device, settings)
        device = calibrate.cuda_device(args.device)
        with err.status(f"measuring {device} (matmul rates, copy bandwidth) ..."):
            result = calibrate.calibrate(str(device), settings)
    preset = result.preset.name if result.preset else "no preset"
    table = Table(title=f"tunesmith calibrate: {result.profile.name} ({device})")
    for column in ("measured", "unit", "value", f"preset ({preset})", "fraction"):
        table.add_column(column, justify="left" if column in ("measured", "unit") else "right")
    for row in calibrate.comparison(result.profile, result.preset):
        table.add_row(
            row["what"],
            row["unit"],
            _num(row["measured"], ".1f"),
            _num(row["preset"], ".1f"),
            _num(row["fraction"], ".0%"),
        )
    out.print(table)
    out.print(f"stored in {result.path}: the cost model uses it for every {result.profile.name} from now on")
    return 0


def _calibrate_show(device: str | None, settings: Any) -> int:
    from tunesmith import hooks
    from tunesmith.cost import calibrate
    from tunesmith.cost.profiles import PRESETS

    if device in PRESETS:
        name, profile, source = device, PRESETS[device], "preset"
    else:
        import torch

        chosen = calibrate.cuda_device(device)
        name = torch.cuda.get_device_name(chosen)
        named = calibrate.profile_in_use(name, settings)
        profile = hooks.device_info(chosen, settings)
        source = named.source if profile == named.profile else "a plugin's tunesmith_device_info"
    if profile is None:
        out.print(f"{name}: no device profile (no calibration, no preset): run tunesmith calibrate")
        return 0
    table = Table(title=f"device profile of {name}", caption=f"{profile.name}: {source}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for dtype, peak in profile.peak_flops:
        table.add_row(f"{dtype} peak (TFLOP/s)", _num(peak / 1e12, ".1f"))
    table.add_row("memory bandwidth (GB/s)", _num(profile.memory_bandwidth / 1e9, ".0f"))
    if profile.interconnect_bandwidth is not None:
        table.add_row("interconnect, one way (GB/s)", _num(profile.interconnect_bandwidth / 1e9, ".0f"))
    if profile.interconnect_latency_s is not None:
        table.add_row("interconnect latency (us)", _num(profile.interconnect_latency_s * 1e6, ".1f"))
    table.add_row("multiprocessors", str(profile.multiprocessors or "-"))
    out.print(table)
    return 0


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, int | float) and math.isfinite(value) else "-"


def _fraction(value: float | None) -> str:
    """A fraction as a percentage, with two significant digits below 1% (a CPU on a GPU's roofline)."""
    if value is None:
        return "-"
    return f"{value:.1%}" if value >= 0.01 else f"{value * 100:.2g}%"


def _report(args: argparse.Namespace) -> int:
    """``tunesmith report``: every tuned problem in the local cache, as a table, JSON or a chart."""
    import tunesmith
    from tunesmith.cache.local import LocalDiskCache
    from tunesmith.cost import report

    with tunesmith.options() as settings:
        layer = LocalDiskCache(settings.cache_dir)
        entries = report.read_entries(layer, settings.cache_secret)
        rows = report.rows(entries.found, _report_profiles(args.device, settings))
    if args.plot:
        report.plot(rows, Path(args.plot))
    if args.json:
        print(json.dumps(report.as_json(rows), indent=1))
    else:
        _print_report(rows, layer.root)
    if args.plot:
        err.print(f"wrote the chart to {args.plot}")
    if entries.skipped:
        err.print(f"[yellow]skipped {len(entries.skipped)} invalid entries[/] (run with -v to see why)")
    return 0


def _report_profiles(device: str | None, settings: Any) -> Any:
    """A device name -> profile function: ``device``'s profile for every entry, else each GPU's own."""
    import functools

    from tunesmith import hooks
    from tunesmith.cost.calibrate import profile_in_use
    from tunesmith.cost.profiles import PRESETS
    from tunesmith.errors import TunesmithError

    if device is not None:
        try:
            profile = hooks.device_info(device, settings)
        except (RuntimeError, TypeError, ValueError):
            profile = None
        if profile is None:
            raise TunesmithError(
                f"no device profile for --device {device!r}: name a preset ({', '.join(PRESETS)}) or a GPU "
                "that has a preset or a calibration"
            )
        return lambda _name: profile

    @functools.cache
    def own(name: str) -> Any:
        return None if name.startswith("cpu") else profile_in_use(name, settings).profile

    return own


def _print_report(rows: Sequence[Any], location: Path) -> None:
    table = Table(title=f"tunesmith report: {len(rows)} tuned problems in {location}")
    numeric = ("ms", "aten ms", "vs aten", "TFLOP/s", "GB/s", "roofline")
    for column in ("problem", "shape", "dtype", "device", "chosen", *numeric, "bound", "profile"):
        table.add_column(column, justify="right" if column in numeric else "left", overflow="fold")
    for r in rows:
        table.add_row(
            escape(r.op) if r.op else f"[dim]{r.key[:12]}[/]",
            *(escape(v or "-") for v in (r.shape, r.dtype, r.device_name, r.chosen)),
            _num(r.ms, ".4f"),
            _num(r.aten_ms, ".4f"),
            _num(r.speedup, ".2f") + ("x" if r.speedup is not None else ""),
            _num(r.tflops, ".3f"),
            _num(r.gbps, ".1f"),
            _fraction(r.roofline_fraction),
            r.bound or "-",
            r.profile or "-",
        )
    out.print(table)
    if not rows:
        out.print("nothing tuned yet: tunesmith tune FILE.json, or tunesmith.tune(...), fills the cache")


DESCRIPTION = """Picks the fastest kernel for every matmul-shaped operation, and remembers it.

  tunesmith plugins                      installed plugins, and whether each runs here
  tunesmith tune FILE.json | model.py    tune a problem set, or compile a model script and tune its GEMMs
  tunesmith cache stats|clear|export|import
  tunesmith calibrate                    measure this GPU for the cost model
  tunesmith report                       every tuned problem against ATen and the roofline"""


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import version

    parser = argparse.ArgumentParser(
        prog="tunesmith", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"tunesmith {version('tunesmith')}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what tunesmith does (each tuned problem)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="installed plugins, their hooks, and whether each runs here")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_plugins)
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
    p.set_defaults(func=_tune)
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
    p.set_defaults(func=_cache)
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
    p.set_defaults(func=_calibrate)
    p = sub.add_parser(
        "report",
        help="every tuned problem: the chosen kernel, its speedup over ATen, TFLOP/s, GB/s, roofline fraction",
        description="Reads the autotune entries of the local disk cache. The roofline is that of --device, else "
        "of each entry's GPU (its calibrated profile, else its preset); CPU entries have none.",
    )
    p.add_argument("--device", default=None, help="a preset (H100-SXM, ...) or cuda:N whose roofline to use")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the speedups and roofline fractions (matplotlib)")
    p.set_defaults(func=_report)
    return parser


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise Interrupted in the main thread (SIGTERM would
    otherwise kill the process with no clean-up); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _interrupted(exc: KeyboardInterrupt) -> int:
    """Stop the workers, print one line, and give the exit status of a signal: 130 or 143."""
    signum = _signum(exc)
    if threading.current_thread() is threading.main_thread():  # a second Ctrl-C must not cut this short
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
    _stop_workers()
    done = exc.done if isinstance(exc, Interrupted) else ""
    what = "interrupted" if signum == signal.SIGINT else "terminated"
    err.print(f"{what}: {done}" if done else what, markup=False, highlight=False)
    code = 128 + signum
    if threading.active_count() > 1:
        # A thread abandoned in native code can abort the interpreter's teardown ("terminate
        # called without an active exception"): the entries are on disk, so leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _one_line_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> str:
    """A warning as the command shows it: its category and message, not Python's source line."""
    return f"{category.__name__}: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its exit status: 0 done, 1 a problem failed to tune, 2 a usage error or
    an error (printed on one line), 130 Ctrl-C, 143 SIGTERM."""
    from tunesmith.errors import TunesmithError

    args = build_parser().parse_args(argv)
    warnings.formatwarning = _one_line_warning
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    with _signals_interrupt():
        try:
            return args.func(args)
        except TunesmithError as exc:
            err.print(f"[red]error:[/] {escape(str(exc))}")
            return 2
        except KeyboardInterrupt as exc:
            return _interrupted(exc)


if __name__ == "__main__":
    sys.exit(main())
