"""The Triton flash-attention template's tile sweep: every candidate forward config on the
inference shapes of ``attention.py`` and every candidate backward config on its training shapes,
the data that ranks ``flash.GPU_FORWARD`` and ``flash.GPU_BACKWARD``.

    python benchmarks/attention_tiles.py --json $OUT/attention_tiles_h200.json
    python benchmarks/attention_tiles.py --only bert_infer_8x512 --forward-only --json out.json

Forward candidates are ``FORWARD_TILES``, each through pointers and through TMA; backward
candidates are ``BACKWARD_TILES`` after the space's first forward config. Each is timed as
``attention.py`` times a column (its kernels in a CUDA graph, over rotating inputs, against cuDNN
in the same process) and checked against float64; a config that fails to compile or to match is
listed in ``errors``. ``--space`` sweeps the tuner's own configs for each shape instead (what
``tunesmith.tune`` would choose from). The kernels are compiled first in ``--workers`` processes
(into Triton's cache), each config with a deadline, then timed one by one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention  # the shapes and the timing of benchmarks/attention.py

#: (block_m, block_n, warps, stages) of the forward: the space's tiles and their neighbours
FORWARD_TILES = (
    (64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 4, 2), (64, 128, 4, 3), (128, 32, 4, 3), (128, 64, 4, 2),
    (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 4, 2), (128, 128, 8, 2), (64, 32, 4, 3), (32, 32, 4, 2),
)  # fmt: skip
#: (bwd_block_m, bwd_block_n, warps, stages) of the backward (streamed, kept)
BACKWARD_TILES = (
    (16, 64, 4, 3), (32, 64, 4, 3), (64, 64, 4, 2), (32, 128, 4, 3), (32, 128, 8, 3),
    (32, 128, 8, 2), (64, 128, 8, 2), (64, 128, 8, 3),
)  # fmt: skip


def candidates(name: str, space: bool = False) -> list[Any]:
    """The FlashConfigs swept on one shape: forward ones for inference, backward ones for training
    (with ``space``, the tuner's own configs for the shape instead)."""
    from tunesmith_triton import flash

    train = attention.SHAPES[name][-1]
    head = attention.SHAPES[name][6]
    configs = flash.configs(head, torch.bfloat16, train, "cuda")
    first = configs[0]
    if space:
        return configs
    if train:
        fwd = (first.block_m, first.block_n, first.num_warps, first.num_stages)
        return [flash.FlashConfig(*fwd, *t, tma=first.tma) for t in BACKWARD_TILES]
    bwd = (first.bwd_block_m, first.bwd_block_n, first.bwd_num_warps, first.bwd_num_stages)
    return [flash.FlashConfig(*tile, *bwd, tma=t) for tile in FORWARD_TILES for t in (0, 1)]


def _problem(name: str) -> tuple[Any, list[torch.Tensor]]:
    from tunesmith.problem import build_problem

    tensors, scalars = attention.make(name, "cuda")
    return build_problem("attention", tensors, scalars)


def _kernel(problem: Any, config: Any) -> Any:
    from tunesmith_triton import flash

    causal, scale = bool(problem.scalar("is_causal")), float(problem.scalar("scale"))

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return flash.attention(q, k, v, mask, causal, scale, config)

    return call


def _said(exc: Exception) -> str:
    """An error in one line: its type and its message's first line."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _label(task: tuple[str, str]) -> str:
    """A task as its errors name it: the shape and the config."""
    return " ".join(task)


def _compile(task: tuple[str, str]) -> str | None:
    """Run one config once (in a compile lane: its kernels land in Triton's cache); its error or None."""
    from tunesmith_triton import flash

    from tunesmith.ops import measured

    name, text = task
    problem, inputs = _problem(name)
    try:
        measured(problem, _kernel(problem, flash.FlashConfig.from_str(text)))(*inputs)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported, the sweep goes on
        return f"{_label(task)}: {_said(exc)}"
    return None


def _compile_lane(conn: Connection) -> None:
    """A compile process: configs from ``conn`` until None; it stops after an error (its CUDA
    context may be broken) and the parent starts another."""
    while (task := conn.recv()) is not None:
        error = _compile(task)
        conn.send(error)
        if error:
            return


def precompile(tasks: list[tuple[str, str]], workers: int, timeout_s: float) -> dict[tuple[str, str], str]:
    """Run every task once in ``workers`` spawned processes, each task in a process of its own
    choosing; a task whose process dies (a compiler abort) or takes over ``timeout_s`` (a hang)
    fails alone. The failed tasks and why."""
    ctx = multiprocessing.get_context("spawn")
    todo, errors = list(reversed(tasks)), {}
    busy: dict[Connection, tuple[Any, tuple[str, str], float]] = {}
    start, done = time.monotonic(), 0

    def lane() -> tuple[Connection, Any]:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_compile_lane, args=(child,), daemon=True)
        process.start()
        child.close()
        return parent, process

    def feed(conn: Connection, process: Any) -> None:
        if todo:
            task = todo.pop()
            conn.send(task)
            busy[conn] = (process, task, time.monotonic())
        else:
            conn.send(None)

    for _ in range(min(workers, len(tasks))):
        feed(*lane())
    while busy:
        ready = wait(list(busy), timeout=5)
        for conn in list(busy):
            process, task, sent = busy[conn]
            if conn in ready:
                try:
                    error = conn.recv()
                except EOFError:
                    process.join(5)
                    error = f"{_label(task)}: its process died (exit code {process.exitcode})"
            elif time.monotonic() - sent > timeout_s:
                process.kill()
                error = f"{_label(task)}: no answer in {timeout_s:.0f} s (killed)"
            else:
                continue
            del busy[conn]
            done += 1
            if error:
                errors[task] = error
                print(error, flush=True)
                process.join(5)
                if process.is_alive():
                    process.kill()
                conn.close()
                if todo:
                    feed(*lane())
            else:
                feed(conn, process)
            if done % 20 == 0 or done == len(tasks):
                print(
                    f"compiled {done}/{len(tasks)} ({len(errors)} failed) in {time.monotonic() - start:.0f} s",
                    flush=True,
                )
    return errors


def sweep(name: str, configs: list[Any], failed: set[str]) -> dict[str, Any]:
    """One shape: cuDNN's time and every one of ``configs``' (ms) but the ``failed`` ones (they may
    hang or abort this process), with the errors."""
    from tunesmith.bench.timing import rotating_inputs
    from tunesmith.ops import measured, reference, relative_error, tolerance
    from tunesmith_aten.attention import sdpa

    problem, inputs = _problem(name)
    sets = rotating_inputs(problem, inputs)
    ref, tol = reference(problem, inputs), tolerance(problem)
    row: dict[str, Any] = {"cudnn_ms": None, "ms": {}, "errors": {}}
    columns = [("cudnn", sdpa("cudnn", problem))] + [
        (str(c), _kernel(problem, c)) for c in configs if str(c) not in failed
    ]
    for label, kernel in columns:
        call = measured(problem, kernel)
        try:
            err = relative_error(call(*inputs), ref)
            if not err <= tol:  # as the tuner verifies a choice
                raise ValueError(f"relative error {err:.3g} against float64 (tolerance {tol:g})")
            ms = round(attention.time_ms(call, sets), 5)
        except Exception as exc:  # noqa: BLE001 - a config that fails is reported, not fatal
            row["errors"][label] = _said(exc)
            continue
        if label == "cudnn":
            row["cudnn_ms"] = ms
        else:
            row["ms"][label] = ms
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated shape names (default: all)")
    parser.add_argument("--forward-only", action="store_true", help="only the inference shapes")
    parser.add_argument("--space", action="store_true", help="the tuner's configs for each shape, not the tiles")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="compile processes")
    parser.add_argument("--compile-timeout", type=float, default=240.0, help="seconds a config may compile")
    parser.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "attention_tiles.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("the tile sweep needs a CUDA GPU")
    names = [n for n in args.only.split(",") if n] or list(attention.SHAPES)
    unknown = sorted(set(names) - set(attention.SHAPES))
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; known: {', '.join(attention.SHAPES)}")
    if args.forward_only:
        names = [n for n in names if not attention.SHAPES[n][-1]]
    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    with open(args.json, "w") as f:  # a path that cannot be written fails now, not after the compiles
        json.dump({}, f)
    import triton

    swept = {n: candidates(n, args.space) for n in names}
    tasks = [(n, str(c)) for n in names for c in swept[n]]
    failed = precompile(tasks, args.workers, args.compile_timeout)
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "compile_errors": sorted(failed.values()),
        "rows": {},
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    for name in names:
        row = out["rows"][name] = sweep(name, swept[name], {t for n, t in failed if n == name})
        best = sorted(row["ms"].items(), key=lambda kv: kv[1])[:3]
        print(f"{name}: cudnn {row['cudnn_ms']} ms; best " + ", ".join(f"{c} {ms}" for c, ms in best), flush=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
