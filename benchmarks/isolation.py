"""The benchmarking issue's GPU measurements, each in fresh processes, written as one JSON file.

1. Cold tuning of the GEMM set (backends aten + bench_tritonmm, verify on, empty tunesmith and
   Triton caches) with ``compile_threads`` 1 and 16 on one GPU.
2. The same with 16 threads spread over every visible GPU (when there are two or more).
3. A kernel that makes an illegal memory access (bench_tritonmm's ``oob`` choice) is survived:
   the process goes on, ``benchmark_crash`` counts it, a correct kernel wins, the next tune works.
4. The same problems tuned cold in 5 fresh processes: the spec each picks, and its time.

Usage (on the GPU machine): ``python benchmarks/isolation.py OUT.json``. ``bench_tritonmm``
(benchmarks/plugins/tritonmm) must be installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

HERE = Path(__file__).parent
SHAPES = HERE / "gemm_shapes.json"
BACKENDS = "aten,bench_tritonmm"
DETERMINISM_CASES = ["llama7b_down_prefill", "odd_1000", "decode_m16", "fp16_transposed_a"]
PROCESSES = 5


def run(argv: list[str], env: dict[str, str], timeout: float = 540) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
    return proc, wall


def fresh_env(**extra: str) -> dict[str, str]:
    """An environment with new, empty tunesmith and Triton caches."""
    return {
        **os.environ,
        "TUNESMITH_CACHE_DIR": tempfile.mkdtemp(prefix="ts-cache-"),
        "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="triton-cache-"),
        "TUNESMITH_VERIFY": "1",
        **extra,
    }


def tune_set(device: str, threads: int, only: list[str] | None = None, env: dict | None = None) -> dict:
    out = Path(tempfile.mkdtemp()) / "rows.json"
    argv = [sys.executable, "-m", "tunesmith", "tune", str(SHAPES), "--device", device, "--backends", BACKENDS]
    argv += ["--json", str(out)] + (["--only", *only] if only else [])
    env = env or fresh_env()
    env["TUNESMITH_COMPILE_THREADS"] = str(threads)
    proc, wall = run(argv, env)
    rows = json.loads(out.read_text()) if out.exists() else []
    return {
        "device": device,
        "compile_threads": threads,
        "exit_code": proc.returncode,
        "process_wall_s": round(wall, 2),
        "sum_tune_s": round(sum(r.get("wall_s", 0.0) for r in rows), 2),
        "rows": rows,
        "stderr_tail": proc.stderr[-1500:] if proc.returncode else "",
    }


ILLEGAL = r"""
import json, math, torch, tunesmith
out = {}
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
sel = tunesmith.tune("mm", a, b, options={"backends": ["aten", "bench_tritonmm"], "verify": True})
oob = [t for t in sel.report.timings if t.spec.template == "oob"]
ref = a.double() @ b.double()
out["chosen"] = str(sel.spec)
out["oob_ms"] = oob[0].ms if oob else None
out["oob_error"] = oob[0].error if oob else None
out["benchmark_crash"] = tunesmith.counters["benchmark_crash"]
out["rel_error_chosen"] = ((sel(a, b).double() - ref).norm() / ref.norm()).item()
again = tunesmith.tune("mm", a[:1000, :1000], b[:1000, :1000], options={"backends": ["aten", "bench_tritonmm"]})
out["next_tune_chosen"] = str(again.spec)
out["finite_timings_after"] = sum(math.isfinite(v) for v in again.timings.values())
print("RESULT " + json.dumps(out))
"""


def illegal_access() -> dict:
    proc, wall = run([sys.executable, "-c", ILLEGAL], fresh_env(BENCH_TRITONMM_OOB="1"))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    result = json.loads(line[7:]) if line else {"stderr_tail": proc.stderr[-2000:]}
    return {"exit_code": proc.returncode, "process_wall_s": round(wall, 2), **result}


def determinism(triton_cache: str) -> dict:
    picks: dict[str, list] = {name: [] for name in DETERMINISM_CASES}
    for _ in range(PROCESSES):
        env = fresh_env(TRITON_CACHE_DIR=triton_cache)  # compiled kernels may be reused; tuning is cold
        result = tune_set("cuda:0", 16, DETERMINISM_CASES, env)
        for row in result["rows"]:
            picks[row["name"]].append({"chosen": row.get("chosen"), "ms": row.get("ms"), "error": row.get("error")})
    summary = {}
    for name, rows in picks.items():
        specs = {r["chosen"] for r in rows}
        times = [r["ms"] for r in rows if r["ms"]]
        spread = max(times) / min(times) - 1 if times else None
        summary[name] = {"picks": rows, "distinct_specs": len(specs), "time_spread": spread}
    return summary


def main() -> None:
    target = Path(sys.argv[1])
    result: dict = {
        "device_name": torch.cuda.get_device_name(0),
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    one = tune_set("cuda:0", 1)
    sixteen_env = fresh_env()
    sixteen = tune_set("cuda:0", 16, env=sixteen_env)
    result["compile_threads"] = {"1": one, "16": sixteen}
    if torch.cuda.device_count() >= 2:
        result["two_gpus"] = tune_set("cuda", 16)
    result["illegal_memory_access"] = illegal_access()
    result["determinism"] = determinism(sixteen_env["TRITON_CACHE_DIR"])
    target.write_text(json.dumps(result, indent=1))
    print(f"compile_threads 1: {one['process_wall_s']} s, 16: {sixteen['process_wall_s']} s")
    if "two_gpus" in result:
        print(f"2 GPUs, 16 threads: {result['two_gpus']['process_wall_s']} s")
    print("illegal access:", {k: v for k, v in result["illegal_memory_access"].items() if k != "stderr_tail"})
    for name, s in result["determinism"].items():
        spread = s["time_spread"]
        print(f"{name}: {s['distinct_specs']} distinct spec(s) in {PROCESSES} processes, time spread {spread}")


if __name__ == "__main__":
    main()
