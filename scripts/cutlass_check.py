"""The CUTLASS plugin on the GPU: the conformance suite for ``cutlass`` (bfloat16, float16, float32
as TF32) with few instances per problem, and the cold compile cost of GEMM-set shapes.

    python scripts/cutlass_check.py --json $OUT/cutlass_check.json [--dtypes bfloat16,float16,float32]
        [--instances 1] [--skip-conformance] [--skip-compile] [--cases NAME,NAME]

Conformance: every library the suite's cases need is built first, all at once on every CPU core
(the suite itself precompiles its cases one after another), into a cache that later calls reuse
(``--cache``, default under the temp folder: a warm GPU machine keeps it between device calls);
then ``pytest --pyargs tunesmith.conformance --tunesmith-plugin cutlass`` runs on the dtypes
asked, with ``cutlass_max_instances`` = ``--instances`` and TF32 allowed for float32
(``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, which every worker process inherits).

Compile cost: per GEMM-set case, in an empty build cache of its own, the wall time of
``tunesmith.tune`` with backends aten + cutlass and the default ``cutlass_max_instances`` (the
first problem of its kind: every instance compiles, in parallel), then of a second problem of the
same kind with other sizes (it loads the libraries the first one built). Each row records both
times, the build seconds, the chosen spec, and ATen's and the best CUTLASS choice's tuning times.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES = Path(__file__).resolve().parent.parent / "benchmarks" / "gemm_shapes.json"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "tunesmith_cutlass_check"
#: GEMM-set cases measured by default, and the sizes of the second problem of each one's kind
SECOND = {
    "llama7b_qkv_prefill": {"M": 2048, "N": 11008, "K": 4096},
    "fp16_transposed_a": {"M": 2048, "N": 3072, "K": 1024},
    "decode_m16": {"M": 32, "N": 8192, "K": 2048},
    "addmm_gelu_mlp": {"M": 1024, "N": 4096, "K": 1024},
    "bmm_32x1024x1024x128": {"B": 16, "M": 512, "N": 2048, "K": 64},
    "fp32_tf32_2048": {"M": 1024, "N": 3072, "K": 512},
}
OPS = ("mm", "addmm", "bmm")


def run_info() -> dict[str, Any]:
    """The device, the versions and the plugin's status."""
    import torch
    import triton
    from tunesmith_cutlass.environment import find_nvcc, probe

    import tunesmith

    nvcc = find_nvcc()
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout if nvcc else ""
    env = probe(tunesmith.current_options().cutlass_dir)
    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "nvcc": nvcc,
        "nvcc_version": next((line for line in version.splitlines() if "release" in line), version.strip()),
        "cutlass_headers": env.headers_version,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "runnable": env.runnable,
        "reason": env.reason,
    }


# --- conformance ------------------------------------------------------------------------------------


def _suite_choices(dtypes: list[str], instances: int) -> list[Any]:
    """One choice per distinct library that the suite's cases on these dtypes are offered."""
    import torch
    import tunesmith_cutlass

    import tunesmith
    from tunesmith.conformance.cases import make, matrix
    from tunesmith.problem import build_problem

    distinct: dict[tuple[Any, Any], Any] = {}
    with tunesmith.options(cutlass_max_instances=instances):
        options = tunesmith.current_options()
        for case in matrix(OPS, tuple(dtypes)):
            tensors, scalars, epilogue = make(case, torch.device("cuda"))
            problem, _ = build_problem(case.op, tensors, scalars, epilogue)
            for choice in tunesmith_cutlass.tunesmith_choices(problem=problem, options=options):
                distinct.setdefault((choice.instance, choice.gemm.kind), choice)
    return list(distinct.values())


def prebuild(dtypes: list[str], instances: int) -> dict[str, Any]:
    """Build every library the suite will ask for, on all CPU cores; how many and how long."""
    choices = _suite_choices(dtypes, instances)
    start = time.perf_counter()
    errors = []

    def one(choice: Any) -> None:
        try:
            choice.precompile()
        except Exception as exc:  # noqa: BLE001 - reported, the suite then shows the failing cases
            errors.append(f"{choice.spec}: {str(exc)[-1500:]}")

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        list(pool.map(one, choices))
    seconds = time.perf_counter() - start
    print(f"prebuilt {len(choices)} libraries in {seconds:.0f} s, {len(errors)} failed", flush=True)
    for error in errors[:5]:
        print(error, flush=True)
    return {"libraries": len(choices), "seconds": seconds, "failed": len(errors), "errors": errors[:20]}


def conformance(dtypes: list[str], instances: int, timeout_s: float) -> dict[str, Any]:
    """The suite on these dtypes (mm, addmm and bmm: the ops served), its counts and its tail."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs"]
    argv += ["--pyargs", "tunesmith.conformance", "--tunesmith-plugin", "cutlass"]
    if set(dtypes) != {"bfloat16", "float16", "float32"}:  # "float16" is also part of "bfloat16"
        words = {"bfloat16": "bfloat16", "float16": "(float16 and not bfloat16)", "float32": "float32"}
        argv += ["-k", " or ".join(words[d] for d in dtypes)]
    env = {**os.environ, "TUNESMITH_CUTLASS_MAX_INSTANCES": str(instances)}
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s)
        out, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout or ""
        out, code = partial.decode() if isinstance(partial, bytes) else partial, "timeout"
    lines = out.strip().splitlines()
    counts = {w: int(n) for n, w in re.findall(r"(\d+) (passed|failed|skipped|error)", lines[-1] if lines else "")}
    print("\n".join(lines[-40:]), flush=True)
    # the failures' own messages (the skips' reasons alone can fill the tail)
    # (pytest's "E" lines of each failure, and the FAILED and ERROR lines of its short summary)
    failures = [line for line in lines if line.startswith(("E ", "FAILED ", "ERROR "))]
    return {
        "returncode": code,
        "counts": counts,
        "seconds": time.perf_counter() - start,
        "failures": failures[:200],
        "tail": lines[-80:],
    }


# --- compile cost -----------------------------------------------------------------------------------


def _tune(case: Any, overrides: dict[str, int], cache_dir: str) -> dict[str, Any]:
    """One tune with aten + cutlass in ``cache_dir``: wall time, winner, and per-backend best times."""
    import torch

    import tunesmith
    from tunesmith import problemset

    fields = {**case.fields, **overrides}
    variant = problemset.Case(case.name, case.op, case.dtype, fields) if overrides else case
    tensors, scalars = problemset.make_inputs(variant, "cuda", seed=1)
    options = {"backends": ["aten", "cutlass"], "cache_dir": cache_dir, "caches": []}
    torch.cuda.synchronize()
    start = time.perf_counter()
    sel = tunesmith.tune(case.op, *tensors, epilogue=problemset.epilogue(case), options=options, **scalars)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    best: dict[str, float] = {}
    for spec, ms in sel.timings.items():
        best[spec.backend] = min(ms, best.get(spec.backend, float("inf")))
    failed = [f"{spec}: inf" for spec, ms in sel.timings.items() if spec.backend == "cutlass" and ms == float("inf")]
    return {
        "sizes": {k: fields[k] for k in ("B", "M", "N", "K") if k in fields},
        "tune_s": seconds,
        "spec": str(sel.spec),
        "aten_ms": best.get("aten"),
        "cutlass_best_ms": best.get("cutlass"),
        "cutlass_choices": sum(1 for spec in sel.timings if spec.backend == "cutlass"),
        "cutlass_failed": failed,
    }


def compile_cost(names: list[str]) -> list[dict[str, Any]]:
    """Per case: the first problem of its kind in an empty build cache, then a second of the same kind."""
    import tunesmith
    from tunesmith import problemset

    cases = {c.name: c for c in problemset.load(SHAPES)}
    rows = []
    for name in names:
        cache_dir = tempfile.mkdtemp(prefix="cutlass_cold_")
        tunesmith.reset()
        try:
            first = _tune(cases[name], {}, cache_dir)
            second = _tune(cases[name], SECOND.get(name, {}), cache_dir)
            libraries = len(list(Path(cache_dir, "cutlass").glob("*.so")))
            row = {"case": name, "first": first, "second": second, "libraries_built": libraries}
        except Exception as exc:  # noqa: BLE001 - a case that fails is recorded, the others go on
            row = {"case": name, "error": f"{type(exc).__name__}: {exc}"[-2000:]}
        shutil.rmtree(cache_dir, ignore_errors=True)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where to write the result")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32", help="the conformance suite's dtypes")
    parser.add_argument("--instances", type=int, default=1, help="cutlass_max_instances for the conformance suite")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="the build cache of the conformance run")
    parser.add_argument("--suite-timeout", type=float, default=420.0, help="seconds the suite may take")
    parser.add_argument("--cases", default=",".join(SECOND), help="GEMM-set cases whose compile cost is measured")
    parser.add_argument("--skip-conformance", action="store_true")
    parser.add_argument("--skip-compile", action="store_true")
    args = parser.parse_args(argv)

    # TF32 for float32 matmuls in this process and in every process it starts (the suite's workers)
    os.environ["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = "1"
    os.environ["TUNESMITH_CACHE_DIR"] = args.cache
    result: dict[str, Any] = {"run": run_info()}
    print(json.dumps(result["run"], indent=1), flush=True)
    if not result["run"]["runnable"]:
        Path(args.json).write_text(json.dumps(result, indent=1))
        return 1
    dtypes = [d for d in args.dtypes.split(",") if d]
    if not args.skip_conformance:
        result["prebuild"] = prebuild(dtypes, args.instances)
        result["conformance"] = conformance(dtypes, args.instances, args.suite_timeout)
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not args.skip_compile:
        result["compile_cost"] = compile_cost([n for n in args.cases.split(",") if n])
    Path(args.json).write_text(json.dumps(result, indent=1))
    failed = not args.skip_conformance and result["conformance"]["returncode"] != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
