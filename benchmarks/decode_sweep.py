"""Decode GEMMs: Triton tile configs against cuBLAS on the GEMMs of a Llama-7B MLP at 16 tokens
(M = 16, weights read as W.T), each timed as a CUDA graph of many calls replays it, as a compiled
model runs them (cuBLAS also without a graph). The source of the decode tiles in the Triton
plugin's ``configs.py``.

    python benchmarks/decode_sweep.py            # writes $OUT/decode_sweep.json (or ./)

Three weight copies are read in turn, so no call finds its weights in L2. Every config is checked
against a float64 product (``rel_err``).
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tunesmith_triton.choice import Config, TritonChoice, precision

from tunesmith.bench.timing import time_in_graph
from tunesmith.cost.calibrate import time_ms
from tunesmith.problem import build_problem
from tunesmith_hookspecs import ChoiceSpec

#: (M, N, K) of each GEMM
SHAPES = {"gate_up": (16, 11008, 4096), "down": (16, 4096, 11008)}
COPIES, REPS, ROUNDS = 3, 10, 7
SHARED_MEMORY = 220 * 1024


def timed_us(call: Callable[..., Any], args: Sequence[tuple[torch.Tensor, ...]], graph: bool) -> float:
    """Microseconds per call over ``args`` in turn: with ``graph``, as tunesmith times a choice (a
    CUDA graph of many calls, its replays timed); else the median of ``ROUNDS`` runs of ``REPS``
    passes launched one by one."""
    device = torch.device("cuda")
    if graph:
        timed = time_in_graph([functools.partial(call, *a) for a in args], device, warmup=1, repeat=ROUNDS)
        if timed is None:
            raise RuntimeError("the calls could not be captured in a CUDA graph")
        return timed.ms * 1e3

    def passes() -> None:
        for _ in range(REPS):
            for a in args:
                call(*a)

    return time_ms(passes, device, warmup=1, repeat=ROUNDS) * 1e3 / (REPS * len(args))


def grid(n: int) -> list[tuple[str, Config]]:
    """The configs swept: 16-row tiles of every width, depth, warp count and pipeline, split-K, TMA."""
    out = []
    for bn in (16, 32, 64, 128):
        for bk in (64, 128, 256, 512):
            for warps in (2, 4) if bn <= 32 else (4, 8):
                out += [("gemm", Config(16, bn, bk, 8, warps, stages)) for stages in (3, 4, 5)]
    for split in (2, 4) if n > 8000 else (2, 4, 8):
        for bn in (32, 64, 128):
            for bk in (128, 256):
                out += [("gemm", Config(16, bn, bk, 8, 4, stages, split_k=split)) for stages in (3, 4, 5)]
    for bn in (32, 64, 128):
        for bk in (128, 256):
            out += [("gemm_tma", Config(16, bn, bk, 8, 4, stages)) for stages in (3, 4, 5)]
    return [(t, c) for t, c in out if c.num_stages * (16 + c.block_n) * c.block_k * 2 <= SHARED_MEMORY]


def sweep(name: str, m: int, n: int, k: int, sms: int) -> list[dict[str, Any]]:
    """cuBLAS's rows and every config's, for one shape."""
    torch.manual_seed(0)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(COPIES)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(COPIES)]
    args = [(x, w.t()) for x, w in zip(xs, ws, strict=True)]
    ref = xs[0].double() @ ws[0].t().double()
    problem, _ = build_problem("mm", list(args[0]), {})
    gb = (n * k + m * k + m * n) * 2 / 1e9
    rows = []
    for graph in (False, True):
        us = timed_us(torch.mm, args, graph)
        rows.append({"shape": name, "kind": "cublas", "graph": graph, "us": us, "tbs": gb / us * 1e3})
    choices = [(t, c, TritonChoice(ChoiceSpec("triton", t, c.params()), problem, precision(problem), sms))
               for t, c in grid(n)]  # fmt: skip

    def compile_one(item: tuple[str, Config, TritonChoice]) -> str | None:
        try:
            item[2].precompile()
        except Exception as exc:  # noqa: BLE001 - recorded in the row
            return repr(exc)[:200]
        return None

    with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("THREADS", "8"))) as pool:
        errors = list(pool.map(compile_one, choices))
    for (template, config, choice), error in zip(choices, errors, strict=True):
        row: dict[str, Any] = {"shape": name, "kind": template, "config": config.params(), "graph": True}
        if error is None:
            run = choice.kernel()
            out = run(*args[0])
            row["rel_err"] = ((out.double() - ref).norm() / ref.norm()).item()
            row["us"] = timed_us(run, args, True)
            row["tbs"] = gb / row["us"] * 1e3
        else:
            row["error"] = error
        rows.append(row)
    return rows


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [row for name, shape in SHAPES.items() for row in sweep(name, *shape, sms)]
    for name in SHAPES:
        cublas = next(r["us"] for r in rows if r["shape"] == name and r["kind"] == "cublas" and r["graph"])
        timed = sorted((r for r in rows if r["shape"] == name and "us" in r and r["kind"] != "cublas"),
                       key=lambda r: r["us"])  # fmt: skip
        print(f"{name}: cuBLAS {cublas:.2f} us under a CUDA graph; best configs (time / cuBLAS's):")
        for r in timed[:10]:
            print(f"  {r['kind']:<9} {r['config']}  {r['us']:.2f} us  {r['us'] / cublas:.3f}  err {r['rel_err']:.1e}")
    body = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}
    path = os.path.join(os.environ.get("OUT", "."), "decode_sweep.json")
    with open(path, "w") as f:
        json.dump(body, f, indent=1)


if __name__ == "__main__":
    main()
