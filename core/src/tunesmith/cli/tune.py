"""``tunesmith tune``: a problem set (FILE.json) spread over the devices, or a model script (model.py)
compiled and run once; a table of the selections."""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tunesmith.cli.console import err, out
from tunesmith.cli.interrupts import Interrupted, signum_of, stop_workers

#: how long an interrupted run waits for its threads to leave the case in flight
INTERRUPT_GRACE_S = 1.0


def run(args: argparse.Namespace) -> int:
    """Tune the file's cases (or model); 1 if a case failed to tune."""
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
        rows = _tune_cases(cases, devices, lambda: progress.advance(task), settings.cache_lock_wait_s)
    results = [rows[i] for i in range(len(cases))]
    _print_results(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any("error" in r for r in results) else 0


def _tune_cases(
    cases: Sequence[Any], devices: Sequence[Any], advance: Callable[[], None], wait_s: float
) -> dict[int, dict[str, Any]]:
    """Each case's row, tuned on one thread per device, each taking the next case when it is free
    (with this thread's settings), and split with other processes tuning the same set: a case
    another process is tuning waits until the end (``fleet.run_split``, at most ``wait_s`` before
    waiting on it alone). On Ctrl-C no case is started, the workers are killed (the case in flight
    is abandoned) and Interrupted says how many were tuned."""
    import contextvars
    import queue

    from tunesmith.fleet import run_split

    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(len(cases)):
        todo.put(i)
    rows: dict[int, dict[str, Any]] = {}
    stop = threading.Event()
    failed: list[BaseException] = []

    def pending() -> Iterator[int]:
        while True:
            try:
                yield todo.get_nowait()
            except queue.Empty:
                return

    def tune_on(device: Any) -> None:
        def tune_one(i: int) -> None:
            rows[i] = _tune_case(cases[i], device)
            advance()

        try:
            run_split(pending(), tune_one, wait_s, stop)
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
        stop_workers()
        _join_all(threads, INTERRUPT_GRACE_S)
        tuned = sum("error" not in row for row in rows.values())
        done = f"{tuned} of {len(cases)} problems tuned; their entries are saved"
        raise Interrupted(signum_of(exc), done) from None
    if failed:
        raise failed[0]
    return rows


def _join_all(threads: Sequence[threading.Thread], seconds: float) -> None:
    """Wait up to ``seconds`` in all for ``threads`` to end."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))


def _tune_model(args: argparse.Namespace) -> int:
    """``tunesmith tune model.py``: compile the script's model, run it once, show every selection."""
    import tunesmith
    from tunesmith import modelscript

    script = modelscript.load(args.file, args.device)
    overrides: dict[str, Any] = {"tuning": "blocking"}  # the command tunes: every kernel before it returns
    if args.backends is not None:
        overrides["backends"] = args.backends
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed} problems"))
    progress = Progress(*columns, TimeElapsedColumn(), console=err, transient=True)
    served = tunesmith.counters["compiled_graph_inductor_hit"]
    with tunesmith.options(**overrides), progress:
        task = progress.add_task(f"compiling and tuning {Path(args.file).name}", total=None)
        reports = modelscript.tune(script, lambda report: progress.advance(task))
    served = tunesmith.counters["compiled_graph_inductor_hit"] - served
    rows = [modelscript.row(r, f"#{i + 1}") for i, r in enumerate(reports)]
    if args.only:
        rows = [r for r in rows if r["name"] in args.only]
    _print_results(rows)
    if served:
        out.print(f"a warm start: Inductor's cache served {served} of the model's compiled graphs, as they were")
    if not rows and not served:
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
