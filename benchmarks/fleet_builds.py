"""Fleet wall time on one host (issue 36's fleet acceptance, on the CPU): a set of 16 mm problems
whose one choice besides ATen's takes a second to build (``fixture_slowbuild``, a plugin of
``tests/fixture_plugins/bench``: its precompile sleeps, as a compiler would, and it wins, so every
process that takes the winner builds it too), tuned by one ``tunesmith tune`` process alone and
by four at once, on one local cache folder and with Redis (a ``redis-server`` on a loopback port),
each with default settings but ``benchmark="subprocess"`` (a worker process times the choices, as
on a GPU). The bar: four processes take at most half one process's wall time, in both setups.

    python benchmarks/fleet_builds.py --json benchmarks/results/fleet_builds_cpu.json

Every process imports torch and tunesmith, says it is ready and waits (``tests/fleet_worker.py``);
the clock starts when all are ready, and a run's wall time ends when its last process has
finished, so the imports of four processes sharing the cores are not counted against the fleet.
Each setup runs ``--runs`` times (3) on empty cache folders, in turns; the medians are compared.
About 3 minutes on 2 cores. Needs ``redis-server`` on PATH (``scripts/install-servers``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet import commit
from redis_load import start_redis

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "fleet_worker.py"
PLUGIN = ROOT / "tests" / "fixture_plugins" / "bench"
#: the set of tests/test_fleet_runs.py's build runs: 16 mm problems, M 8 to 23, N = K = 256 (ATen's
#: mm takes about 36 us on one core there, fixture_slowbuild's kept product a few)
CASES = ROOT / "tests" / "fleet_build_set.json"
PROBLEMS, PROCESSES, BUILD_S = len(json.loads(CASES.read_text())["cases"]), 4, 1.0
BAR = 0.5
SETUPS = ("one", "local", "redis")


def install_plugin(target: Path) -> Path:
    """``fixture_slowbuild`` (and the rest of its distribution) installed into ``target``."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    command += ["--disable-pip-version-check", "--target", str(target), str(PLUGIN)]
    subprocess.run(command, check=True, capture_output=True)
    return target


def run(setup: str, folder: Path, site: Path, cases: Path) -> dict[str, Any]:
    """One run of ``setup`` in ``folder`` (empty): its wall time and each process's counters."""
    processes = 1 if setup == "one" else PROCESSES
    folder.mkdir(parents=True)
    server, url = start_redis(str(folder)) if setup == "redis" else (None, "")
    start_file, end_file = folder / "start", folder / "end"
    procs = []
    try:
        for rank in range(processes):
            env = {k: v for k, v in os.environ.items() if not k.startswith("TUNESMITH_")}
            env |= {
                "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
                "TUNESMITH_BENCHMARK": "subprocess",
                "FIXTURE_SLOWBUILD_S": str(BUILD_S),
                "OMP_NUM_THREADS": "1",
                # one folder shared on one host; with Redis, a folder each, as on hosts of their own
                "TUNESMITH_CACHE_DIR": str(folder / ("cache" if setup != "redis" else f"cache{rank}")),
            }
            if server is not None:
                env |= {"TUNESMITH_REDIS_URL": url, "TUNESMITH_CACHES": "local,redis"}
            command = [sys.executable, str(WORKER), str(folder / f"out{rank}.json"), str(start_file), str(end_file)]
            command += ["--", "tune", str(cases), "--backends", "aten,fixture_slowbuild"]
            procs.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        deadline = time.monotonic() + 180
        while not all((folder / f"out{r}.ready").exists() for r in range(processes)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"{setup}: a process did not get ready: " + _said(procs))
            time.sleep(0.02)
        start_file.touch()
        for proc in procs:
            if proc.wait(timeout=300) != 0:
                raise SystemExit(f"{setup}: a process failed: " + _said(procs))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if server is not None:
            server.kill()
            server.wait()
    outs = [json.loads((folder / f"out{r}.json").read_text()) for r in range(processes)]
    counters = [o["counters"] for o in outs]
    return {
        "wall_s": round(max(o["end"] for o in outs) - min(o["start"] for o in outs), 3),
        "tuned": [c.get("autotune_tuned", 0) for c in counters],
        "built_ahead": [c.get("autotune_built_ahead", 0) for c in counters],
    }


def _said(procs: list[subprocess.Popen[bytes]]) -> str:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    return " | ".join(p.communicate()[1].decode()[-800:] for p in procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--runs", type=int, default=3, help="runs of each setup (medians compared)")
    args = parser.parse_args()
    import torch

    root = Path(tempfile.mkdtemp(prefix="tunesmith-fleet-builds-"))
    try:
        site = install_plugin(root / "site")
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SETUPS}
        for i in range(args.runs):  # in turns: a slower minute of the machine falls on every setup alike
            for setup in SETUPS:
                result = run(setup, root / f"{setup}{i}", site, CASES)
                if sum(result["tuned"]) != PROBLEMS:
                    raise SystemExit(f"{setup}: {sum(result['tuned'])} problems tuned, not {PROBLEMS}: {result}")
                runs[setup].append(result)
                print(f"{setup:<6} run {i}: {result['wall_s']:6.2f} s  tuned {result['tuned']}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {s: statistics.median(r["wall_s"] for r in runs[s]) for s in SETUPS}
    ratios = {s: round(median[s] / median["one"], 3) for s in ("local", "redis")}
    body = {
        "device": "cpu",
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "commit": commit(),
        "problems": PROBLEMS,
        "processes": PROCESSES,
        "build_s": BUILD_S,
        "bar": BAR,
        "median_wall_s": median,
        "ratio_to_one_process": ratios,
        "meets_bar": all(r <= BAR for r in ratios.values()),
        "runs": runs,
    }
    print(f"one process: {median['one']:.2f} s; four, one folder: {ratios['local']:.3f}x", end="")
    print(f"; four with Redis: {ratios['redis']:.3f}x (bar {BAR})")
    if args.json:
        Path(args.json).write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    main()
