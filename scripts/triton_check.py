"""Every Triton choice on the GPU against the float64 reference, on a spread of problems: the
dtypes the interpreter cannot check (bfloat16), TMA-aligned and odd shapes, transposed inputs,
decode shapes (split-K), batches, mm + mm and fused epilogues. Each choice and its rebuilt twin.

    python scripts/triton_check.py --json $OUT/triton_check.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import triton
from tunesmith_triton import tunesmith_choices, tunesmith_rebuild_choice

from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.problem import build_problem


def _mat(rows: int, cols: int, dtype: torch.dtype, transposed: bool = False) -> torch.Tensor:
    t = torch.randn(cols, rows, device="cuda").t() if transposed else torch.randn(rows, cols, device="cuda")
    return t.to(dtype)


def _batch(batch: int, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(batch, rows, cols, device="cuda").to(dtype)


def problems() -> list[tuple[str, str, list[torch.Tensor], dict[str, Any], list[Any]]]:
    out = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        square = _mat(256, 256, dtype)
        out += [
            (f"mm-aligned-{name}", "mm", [_mat(384, 256, dtype), _mat(256, 512, dtype)], {}, []),
            (f"mm-one-tensor-twice-{name}", "mm", [square, square], {}, []),
            (f"mm-odd-{name}", "mm", [_mat(300, 270, dtype), _mat(270, 259, dtype)], {}, []),
            (f"mm-at-bt-{name}", "mm", [_mat(256, 192, dtype, True), _mat(192, 320, dtype, True)], {}, []),
            (f"mm-decode-{name}", "mm", [_mat(16, 4096, dtype), _mat(4096, 512, dtype)], {}, []),
            (
                f"addmm-gelu-{name}",
                "addmm",
                [torch.randn(512, device="cuda").to(dtype), _mat(384, 256, dtype), _mat(256, 512, dtype, True)],
                {"alpha": 0.5, "beta": 2.0},
                ["gelu"],
            ),
            (
                f"addmm-decode-relu-{name}",
                "addmm",
                [torch.randn(512, device="cuda").to(dtype), _mat(8, 2048, dtype), _mat(2048, 512, dtype, True)],
                {},
                ["relu", ("mul", 0.5)],
            ),
            (
                f"baddbmm-{name}",
                "baddbmm",
                [_batch(6, 130, 96, dtype), _batch(6, 130, 64, dtype), _batch(6, 64, 96, dtype)],
                {"beta": 0.5},
                [],
            ),
            (
                f"mm_plus_mm-{name}",
                "mm_plus_mm",
                [_mat(200, 64, dtype), _mat(64, 136, dtype), _mat(200, 48, dtype), _mat(48, 136, dtype)],
                {},
                ["silu"],
            ),
        ]
        for layout in ("nchw", "nhwc"):
            x = torch.randn(4, 64, 28, 30, device="cuda").to(dtype)
            if layout == "nhwc":
                x = x.contiguous(memory_format=torch.channels_last)
            w3 = torch.randn(96, 64, 3, 3, device="cuda").to(dtype)
            w1 = torch.randn(96, 64, 1, 1, device="cuda").to(dtype)
            bias = torch.randn(96, device="cuda").to(dtype)
            out += [
                (f"conv3x3-{layout}-relu-{name}", "conv", [x, w3, bias], {"padding": 1}, ["relu"]),
                (f"conv1x1-{layout}-stride2-{name}", "conv", [x, w1], {"stride": 2}, []),
            ]
    return out


def check(name: str, op: str, tensors: list[torch.Tensor], scalars: dict[str, Any], epilogue: list[Any]) -> dict:
    problem, inputs = build_problem(op, tensors, scalars, epilogue)
    ref, tol = reference(problem, inputs), tolerance(problem)
    choices = tunesmith_choices(problem, None)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: c.precompile(), choices))
    compile_s = time.perf_counter() - start
    bad, kinds = [], set()
    # the same layout in new memory: the second call of a kernel replays its recorded launches
    # with these tensors swapped in
    again = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t) for t in inputs]
    for choice in choices:
        kinds.add(choice.spec.template + ("-split" if choice.spec.param("split_k", 1) > 1 else ""))
        kernel = choice.kernel()
        runs = [("first call", kernel, inputs), ("second call, new tensors", kernel, again)]
        runs.append(("rebuilt", tunesmith_rebuild_choice(choice.spec, problem).kernel(), inputs))
        for which, fn, args in runs:
            err = relative_error(fn(*args), ref)
            if not err <= tol:
                bad.append({"spec": str(choice.spec), "which": which, "rel_error": err})
    return {"name": name, "choices": len(choices), "kinds": sorted(kinds), "tolerance": tol,
            "compile_s": compile_s, "bad": bad}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [check(*p) for p in problems()]
    for r in rows:
        print(f"{r['name']:28s} {r['choices']:3d} choices {'+'.join(r['kinds']):30s} "
              f"compile {r['compile_s']:.1f}s  {'OK' if not r['bad'] else r['bad']}")  # fmt: skip
    result = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": rows}
    Path(args.json).write_text(json.dumps(result, indent=1))
    return 1 if any(r["bad"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
