"""Host time per GEMM call: what calling a tuned GEMM costs inside a compiled graph, against
Inductor's own extern-kernel call and a bare launch, on GEMMs so small that the host, not the GPU,
sets the pace. Writes ``--json``.

    python benchmarks/dispatch_overhead.py --json $OUT/dispatch_overhead_h100.json   # on a GPU
    python benchmarks/dispatch_overhead.py --json benchmarks/results/dispatch_overhead_cpu.json

``op`` rows (any device): the mechanism alone, a tiny addmm reached directly, through a plain
``torch.library.Library`` op (what ``tunesmith::gemm`` is) and through ``torch.library.custom_op``.
``graph`` rows (a GPU): a chain of ``CHAIN`` 64x64x64 bf16 matmuls compiled each way, wall time per
matmul with steps enqueued back to back: eager (a bare ATen launch each), Inductor default
(``extern_kernels.mm``), tunesmith with no options (where ATen wins, the graph gets ATen's op back),
tunesmith with only Triton (a bound ``tunesmith::gemm`` call, with Inductor and with ``eager``), and
the chosen Triton kernel called in a plain Python loop (a bare launch of the same kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

CALLS, ROUNDS = 20000, 5
CHAIN, STEPS = 64, 200


def kernel(recipe: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.addmm(*tensors)


@torch.library.custom_op("overhead::custom", mutates_args=())
def custom(recipe: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    return kernel(recipe, tensors)


_lib = torch.library.Library("overhead", "DEF")
_lib.define("plain(str recipe, Tensor[] tensors) -> Tensor")
_lib.impl("plain", kernel, "CompositeExplicitAutograd")


def per_call_us(fn: Callable[[], Any], calls: int = CALLS, sync: Callable[[], None] = lambda: None) -> float:
    rounds = []
    for _ in range(ROUNDS):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(rounds)


def op_rows() -> dict[str, float]:
    t = [torch.randn(8), torch.randn(4, 4), torch.randn(4, 8)]
    return {
        "torch.addmm": per_call_us(lambda: torch.addmm(*t)),
        "direct Python kernel": per_call_us(lambda: kernel("r", t)),
        "torch.library.Library op": per_call_us(lambda: torch.ops.overhead.plain.default("r", t)),
        "torch.library.custom_op": per_call_us(lambda: torch.ops.overhead.custom.default("r", t)),
    }


def graph_rows() -> dict[str, float]:
    """Wall microseconds per matmul of a compiled chain of ``CHAIN`` small matmuls."""
    import tunesmith

    torch.manual_seed(0)
    weights = [torch.randn(64, 64, device="cuda", dtype=torch.bfloat16) / 8 for _ in range(CHAIN)]
    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)

    def chain(x: torch.Tensor) -> torch.Tensor:
        for w in weights:
            x = x @ w
        return x

    triton_only = {"backends": ["triton"]}
    ways = {
        "eager (bare ATen launches)": lambda: chain,
        "Inductor default (extern_kernels.mm)": lambda: torch.compile(chain),
        "tunesmith, no options": lambda: torch.compile(chain, backend="tunesmith"),
        "tunesmith, Triton, bound call in Inductor": lambda: torch.compile(
            chain, backend="tunesmith", options=triton_only
        ),
        "tunesmith, Triton, bound call, eager graph": lambda: torch.compile(
            chain, backend="tunesmith", options={**triton_only, "graph_compiler": "eager"}
        ),
    }
    rows = {}
    with torch.no_grad():
        for name, make in ways.items():
            torch._dynamo.reset()
            fn = make()
            fn(x)
            tunesmith.wait()  # tunesmith's kernels tuned in the background and swapped in
            fn(x)
            rows[name] = per_call_us(lambda fn=fn: fn(x), STEPS, torch.cuda.synchronize) / CHAIN
        selected = tunesmith.tune("mm", x, weights[0], options=triton_only)
        launch = selected.kernel
        rows[f"bare launch of the chosen Triton kernel ({selected.spec})"] = per_call_us(
            lambda: launch(x, weights[0]), STEPS * CHAIN, torch.cuda.synchronize
        )
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain(x)
        start.record()
        for _ in range(STEPS):
            graph.replay()
        end.record()
        end.synchronize()
        rows["GPU time of one matmul (eager chain replayed in a CUDA graph)"] = (
            start.elapsed_time(end) * 1e3 / (STEPS * CHAIN)
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = {"op": op_rows()}
    if torch.cuda.is_available():
        rows["graph"] = graph_rows()
    for kind, values in rows.items():
        for name, us in values.items():
            print(f"{kind:<6} {name:<72} {us:7.2f} us per call")
    if args.json:
        cpu = f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
        result = {
            "benchmark": "dispatch_overhead",
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else cpu,
            "host": cpu,
            "torch": torch.__version__,
            "timing": f"op: median of {ROUNDS} rounds of {CALLS} calls, per call; graph: median of {ROUNDS} "
            f"rounds of {STEPS} steps of a {CHAIN}-matmul chain, synchronised, wall time per matmul",
            "us_per_call": rows,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
