"""Checks behind ``launchers.py`` (Triton 3.6's per-signature launchers), on a CPU or a GPU.

- For every Triton config of a case, compiled for sm90 without a GPU: the launcher C source that
  ``launchers.build_launcher`` makes from the signature alone (before any compile) against the
  one Triton makes from the compiled kernel. Needs a Triton that builds launchers per signature
  (3.6); on a CPU, put its wheel's contents first on PYTHONPATH.
- Two kernel compiles on two threads of one process against one after the other: whether a
  second compile on a thread overlaps the first (any Triton).

    PYTHONPATH=/tmp/t36site:$PYTHONPATH python benchmarks/launcher_check.py [--cases A,B] [--json F]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import triton
from prune_replay import SMS, as_h100
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.compiler import compile as triton_compile
from triton.runtime.jit import create_function_from_signature

SHAPES = Path(__file__).with_name("gemm_shapes.json")
TARGET = GPUTarget("cuda", 90, 32)


def _source(kernel: Any, args: tuple[Any, ...], meta: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The ASTSource Triton's JIT would compile for these arguments, its signature and options."""
    backend = make_backend(TARGET)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **meta)
    options, signature, constexprs, attrs = kernel._pack_args(backend, meta, bound, specialization, options)
    return ASTSource(kernel, signature, constexprs, attrs), signature, options.__dict__


def _launches(case: Any) -> list[tuple[str, Any, tuple[Any, ...], dict[str, Any]]]:
    from tunesmith_triton import configs
    from tunesmith_triton.choice import TritonChoice

    from tunesmith import problemset
    from tunesmith.problem import build_problem, on_device
    from tunesmith_hookspecs import ChoiceSpec

    tensors, scalars = problemset.make_inputs(case, "cpu", seed=1)
    problem, inputs = build_problem(case.op, tensors, scalars, problemset.epilogue(case))
    problem = on_device(problem, "cuda")
    out = []
    for template, config in configs.configs_for(problem, False):
        choice = TritonChoice(ChoiceSpec("triton", template, config.params()), problem, "tf32", SMS)
        result = choice._output(inputs)
        for kernel, _, args, meta in choice._launches(inputs, result, choice._workspace(result)):
            out.append((str(choice.spec), kernel, args, meta))
    return out


def check_sources(case: Any) -> dict[str, Any]:
    from triton.backends.nvidia import driver
    from tunesmith_triton.launchers import build_launcher

    made: list[str] = []
    driver_compile = triton.runtime.build.compile_module_from_src

    def capture(src: str, **_: Any) -> None:
        made.append(src)

    rows = []
    for spec, kernel, args, meta in _launches(case):
        src, signature, options = _source(kernel, args, meta)
        # what build_launcher would compile (no libcuda needed for that)
        triton.runtime.build.compile_module_from_src, library_dirs = capture, driver.library_dirs
        driver.library_dirs = list
        try:
            build_launcher(signature)
        finally:
            triton.runtime.build.compile_module_from_src, driver.library_dirs = driver_compile, library_dirs
        start = time.perf_counter()
        compiled = triton_compile(src, target=TARGET, options=options)
        seconds = time.perf_counter() - start
        real = driver.make_launcher(src.constants, src.signature, getattr(compiled.metadata, "tensordesc_meta", None))
        rows.append({"spec": spec, "compile_s": round(seconds, 3), "same_source": made[-1] == real})
        print(case.name, spec, rows[-1]["compile_s"], "same" if rows[-1]["same_source"] else "DIFFERENT", flush=True)
    return {"case": case.name, "configs": rows, "all_same": all(r["same_source"] for r in rows)}


def compile_overlap(case: Any) -> dict[str, Any]:
    """Two configs of a case: compiled one after the other, then on two threads (each time into
    an empty Triton cache, after a third config's compile has paid for the first one's costs)."""
    jobs = [_source(kernel, args, meta) for _, kernel, args, meta in _launches(case)[:3]]

    def one(job: tuple[Any, Any, dict[str, Any]]) -> None:
        triton_compile(job[0], target=TARGET, options=job[2])

    triton.knobs.cache.dir = tempfile.mkdtemp()
    one(jobs.pop())
    triton.knobs.cache.dir = tempfile.mkdtemp()
    start = time.perf_counter()
    for job in jobs:
        one(job)
    sequential = time.perf_counter() - start
    triton.knobs.cache.dir = tempfile.mkdtemp()
    threads = [threading.Thread(target=one, args=(job,)) for job in jobs]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "case": case.name,
        "sequential_s": round(sequential, 3),
        "two_threads_s": round(time.perf_counter() - start, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="addmm_relu_4096", help="comma-separated case names")
    parser.add_argument("--json", help="where to write the results")
    args = parser.parse_args()
    from triton.backends.nvidia import driver

    from tunesmith import problemset

    as_h100()
    cases = {c.name: c for c in problemset.load(SHAPES)}
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({platform.machine()}, no GPU)"
    result: dict[str, Any] = {"device": device, "triton": triton.__version__, "torch": torch.__version__}
    result["target"] = "sm90"
    chosen = [cases[name] for name in args.cases.split(",")]
    if hasattr(driver, "make_launcher"):
        result["sources"] = [check_sources(case) for case in chosen]
    result["overlap"] = [compile_overlap(case) for case in chosen]
    print(json.dumps({k: v for k, v in result.items() if k != "sources"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if all(s["all_same"] for s in result.get("sources", [])) else 1


if __name__ == "__main__":
    raise SystemExit(main())
