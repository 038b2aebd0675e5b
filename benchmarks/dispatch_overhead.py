"""CPU cost of reaching a Python kernel from a graph: ``torch.library.custom_op`` against a plain
``torch.library.Library`` op (what ``tunesmith::gemm`` is) and a direct call, on a tiny addmm so
that the call, not the math, is measured. Writes ``--json``.

    python benchmarks/dispatch_overhead.py --json benchmarks/results/dispatch_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

CALLS, ROUNDS = 20000, 5


def kernel(recipe: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.addmm(*tensors)


@torch.library.custom_op("overhead::custom", mutates_args=())
def custom(recipe: str, tensors: list[torch.Tensor]) -> torch.Tensor:
    return kernel(recipe, tensors)


_lib = torch.library.Library("overhead", "DEF")
_lib.define("plain(str recipe, Tensor[] tensors) -> Tensor")
_lib.impl("plain", kernel, "CompositeExplicitAutograd")


def per_call_us(fn) -> float:
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    t = [torch.randn(8), torch.randn(4, 4), torch.randn(4, 8)]
    rows = {
        "torch.addmm": per_call_us(lambda: torch.addmm(*t)),
        "direct Python kernel": per_call_us(lambda: kernel("r", t)),
        "torch.library.Library op": per_call_us(lambda: torch.ops.overhead.plain.default("r", t)),
        "torch.library.custom_op": per_call_us(lambda: torch.ops.overhead.custom.default("r", t)),
    }
    for name, us in rows.items():
        print(f"{name:<28} {us:7.2f} us per call")
    if args.json:
        result = {
            "benchmark": "dispatch_overhead",
            "device": f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
            "torch": torch.__version__,
            "timing": f"median of {ROUNDS} rounds of {CALLS} calls, per call",
            "us_per_call": rows,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
