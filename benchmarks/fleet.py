"""Fleet tuning's GPU acceptance (issue 30, docs/fleet.md): a 2-rank ``torchrun`` job compiling
the GPT-2 of ``benchmarks/models.py`` with tunesmith, cold, against one rank alone: the slowest
rank's first step at most 0.6x of the lone rank's, the ranks' plans identical (the same spec for
every GEMM), and every problem tuned once across the ranks.

On the GPU machine (two H100s; about 2 minutes: a lone rank's cold first step takes 20 to 30 s,
plus torchrun's start and the imports, then the 2-rank job; commit the file as
``benchmarks/results/fleet_h100x2.json``):

    source scripts/gpu_install.sh && python3 -m pip install -q --no-deps --no-build-isolation -e plugins/triton \\
        && python3 benchmarks/fleet.py --json $OUT/fleet_h100x2.json

    python benchmarks/fleet.py --small --json out.json      # CPU: tiny GPT-2, gloo, aten only (tests)

Each job (``python -m torch.distributed.run --standalone --nproc_per_node N``) starts cold: every
rank gets empty tunesmith, Inductor and Triton cache folders of its own under a temporary folder,
as ranks on hosts of their own have, so the only thing the ranks share is the job's
``torch.distributed`` store, the layer fleet tuning adds once a default process group of two ranks
or more is initialised (``cache/dist_store.py``). Ranks of one host sharing one ``cache_dir`` (the
default) would split the work the same way: the locks come from the store layer, the first shared
one, whenever it is there; the folder would only be a second place to read entries from.

A rank sets its GPU (``cuda:LOCAL_RANK``), initialises the process group (NCCL; gloo on the CPU),
then runs ``models.measure`` as models.py's ``tunesmith_blocking`` variant does (``torch.compile(model,
backend="tunesmith", options={"tuning": "blocking", ...})``: the ranks split the tune that the
first step waits for; a training step forward and backward): one eager
step, a barrier of the ranks, then ``first_step_s`` (compile, tuning and one step, to the device's
last kernel, wall seconds). It writes its row as JSON: the first step, tunesmith's counters, and
its plan (each Problem's chosen specs, from ``models.watch_choices``). ``--small`` runs the tiny
GPT-2 on the CPU with backends aten only and the rest of each graph run eager
(``graph_compiler=eager``: no C++ compile), which checks the jobs, the split and the plans, not
the time.

The exit status is 1 when a job fails (its ranks' output tails are printed), when the ranks' plans
differ or when a problem was not tuned exactly once across the ranks; the time ratio against the
bar is reported (``meets_bar``), not enforced: ``--small`` on the CPU is not made to meet it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from models import describe, measure

HERE = Path(__file__).resolve().parent
MODEL, VARIANT = "gpt2", "tunesmith_blocking"
#: the slowest rank's first step of the 2-rank job over the lone rank's, at most (issue 30)
BAR = 0.6
#: the counters shown in the table (every counter is in the rows)
SHOWN = ("autotune_tuned", "autotune_taken", "autotune_deferred", "autotune_lock_waited", "autotune_lock_timeout")
#: the environment of a ``--small`` job: aten only, the rest of each graph run eager
#: ``--small``: ATen alone, the graphs run eager, and one thread a rank, so that a job's ranks, sharing
#: the cores, time as a lone rank does (an attention winner decides which GEMMs its backward holds:
#: torch's fused CPU kernel, threaded across two ranks on two cores, won alone and lost in the job)
SMALL_ENV = {"TUNESMITH_BACKENDS": "aten", "TUNESMITH_GRAPH_COMPILER": "eager", "OMP_NUM_THREADS": "1"}


# --- one rank (run by torchrun) ---


def rank_main(args: argparse.Namespace) -> None:
    """One rank: cold caches of its own, the process group, models.measure; its row as JSON."""
    rank, local, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    folder = Path(args.rank) / f"rank{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pid").write_text(str(os.getpid()))
    log = os.open(folder / "output.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)  # everything the rank prints, C++ and child processes included, goes to its log
    os.dup2(log, 2)
    for name, sub in (("TUNESMITH_CACHE_DIR", "tunesmith"), ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        os.environ[name] = str(folder / sub)  # before torch or tunesmith reads them
    os.environ["TRITON_CACHE_DIR"] = str(folder / "triton")

    import torch
    import torch.distributed as dist

    import tunesmith
    from tunesmith import hooks
    from tunesmith.cache.dist_store import default_store
    from tunesmith.settings import current_options

    cuda = not args.small
    if cuda:
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo")

    def barrier() -> None:
        dist.barrier(device_ids=[local] if cuda else None)

    plan: dict[str, Any] = {}
    row = measure(MODEL, VARIANT, f"cuda:{local}" if cuda else "cpu", args.small, False, plan=plan, ready=barrier)
    row |= {
        "ranks": world,
        "rank": rank,
        "store_layer": default_store() is not None,
        "backends": list(hooks.backend_names(current_options())),
        "counters": dict(sorted(tunesmith.counters.items())),
        "plan": dict(sorted(plan.items())),
    }
    out = folder / "row.json"
    out.with_suffix(".tmp").write_text(json.dumps(row, indent=1) + "\n")
    out.with_suffix(".tmp").rename(out)
    barrier()  # every rank is done with the job's store before any leaves
    os._exit(0)  # the row is out: skip the process group's and compile pools' teardown


# --- the launcher ---


class JobFailed(Exception):
    """A job that did not give a row for every rank; the message holds what its processes said."""


def run_job(ranks: int, folder: Path, args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """One cold ``torchrun`` job of ``ranks`` ranks; the ranks' rows (by rank) and its wall seconds."""
    folder.mkdir(parents=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(SMALL_ENV if args.small else {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    cmd += [str(Path(__file__).resolve()), "--rank", str(folder)] + (["--small"] if args.small else [])
    start = time.monotonic()
    with (folder / "torchrun.log").open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=args.limit)
        except subprocess.TimeoutExpired:
            stop(proc, folder, ranks)
            code = None
    wall = time.monotonic() - start
    rows = [folder / f"rank{r}" / "row.json" for r in range(ranks)]
    if code == 0 and all(p.exists() for p in rows):
        return [json.loads(p.read_text()) for p in rows], wall
    said = f"did not finish in {args.limit:.0f} s" if code is None else f"exit {code}"
    parts = [f"the {ranks}-rank job {said}; its processes' last lines ({folder}):"]
    for path in [folder / "torchrun.log"] + [folder / f"rank{r}" / "output.log" for r in range(ranks)]:
        keep = 12 if path.name == "torchrun.log" else 25
        lines = path.read_text(errors="replace").strip().splitlines()[-keep:] if path.exists() else ["(no output)"]
        parts += [f"--- {path.relative_to(folder)}", *lines]
    raise JobFailed("\n".join(parts))


def stop(proc: subprocess.Popen[bytes], folder: Path, ranks: int) -> None:
    """End a job past its limit: torchrun, which stops its ranks, then any rank still there."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for r in range(ranks):  # each rank leads a session of its own (torchrun starts them so)
        pid = folder / f"rank{r}" / "pid"
        if pid.exists():
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.killpg(int(pid.read_text()), signal.SIGKILL)


def compare(alone: list[dict[str, Any]], fleet: list[dict[str, Any]]) -> dict[str, Any]:
    """The acceptance: the time ratio, the plans across the fleet's ranks, one tuning a problem."""
    plans = [{key: entry["specs"] for key, entry in row["plan"].items()} for row in fleet]
    problems = set().union(*plans)
    differ = sorted(k for k in problems if len({json.dumps(p.get(k)) for p in plans}) > 1 or len(plans[0][k]) != 1)
    described = {k: e["problem"] for row in fleet for k, e in row["plan"].items()}
    tuned = sum(row["counters"].get("autotune_tuned", 0) for row in fleet)
    ratio = max(row["first_step_s"] for row in fleet) / alone[0]["first_step_s"]
    return {
        "ratio": round(ratio, 3),
        "bar": BAR,
        "meets_bar": ratio <= BAR,
        "plans_identical": not differ,
        "plan_differences": [{"problem": described[k], "specs": [p.get(k) for p in plans]} for k in differ],
        "problems": len(problems),
        "tuned": tuned,
        "tuned_once": tuned == len(problems),
        "store_layer": all(row["store_layer"] for row in fleet),
    }


def table(rows: list[dict[str, Any]], result: dict[str, Any]) -> str:
    """The rows and the verdicts, for the terminal."""
    short = [name.removeprefix("autotune_") for name in SHOWN]
    lines = [f"{'job':<8} {'rank':>4} {'first step s':>12} {'problems':>8} " + " ".join(f"{s:>12}" for s in short)]
    for row in rows:
        counts = " ".join(f"{row['counters'].get(name, 0):>12}" for name in SHOWN)
        job = f"{row['ranks']} rank" + ("s" if row["ranks"] > 1 else "")
        lines.append(f"{job:<8} {row['rank']:>4} {row['first_step_s']:>12.2f} {len(row['plan']):>8} {counts}")
    n = max(row["ranks"] for row in rows)
    verdict = "met" if result["meets_bar"] else "NOT met"
    lines.append(f"slowest of {n} ranks / one rank alone: {result['ratio']:.3f} (bar {BAR}: {verdict})")
    same = "yes" if result["plans_identical"] else f"NO ({len(result['plan_differences'])} problems differ)"
    lines.append(f"plans identical across the {n} ranks: {same} ({result['problems']} problems)")
    once = "yes" if result["tuned_once"] else "NO"
    lines.append(f"each problem tuned once across the ranks: {once} ({result['tuned']} tunings)")
    lines.append("backends: " + ", ".join(rows[-1]["backends"]))
    if not result["store_layer"]:
        lines.append("the torch.distributed store layer was NOT added on every rank")
    return "\n".join(lines)


def commit() -> str | None:
    """The repository's commit (with ``+dirty`` for uncommitted changes), or None without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=HERE, capture_output=True, text=True)
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def device_tag(name: str, ranks: int) -> str:
    """A file-name tag for the device: ``h100x2`` for two NVIDIA H100s, ``cpu`` on the CPU."""
    if name == "cpu":
        return "cpu"
    found = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    return f"{found.group(1).lower() if found else 'gpu'}x{ranks}"


def launch(args: argparse.Namespace) -> int:
    """Both jobs, cold, one after the other; the comparison, printed and written as JSON."""
    meta = describe(args)
    if args.small:
        meta["device"] = "cpu"
    elif meta.get("gpus", 0) < args.ranks:
        print(f"fleet.py needs {args.ranks} GPUs (a rank on each); this machine has {meta.get('gpus', 0)}")
        return 1
    meta |= {
        "benchmark": "fleet",
        "model": MODEL,
        "variant": VARIANT,
        "commit": commit(),
        "caches": "empty tunesmith, Inductor and Triton folders per rank; the ranks share the job's store only",
        "timing": "first_step_s: compile, tuning and one training step (forward and backward) after a barrier "
        "of the ranks, to the device's last kernel, in a fresh torchrun job on empty caches",
    }
    path = Path(args.json or Path(os.environ.get("OUT", ".")) / f"fleet_{device_tag(meta['device'], args.ranks)}.json")
    root = Path(tempfile.mkdtemp(prefix="tunesmith-fleet-"))
    try:
        alone, alone_s = run_job(1, root / "ranks1", args)
        fleet, fleet_s = run_job(args.ranks, root / f"ranks{args.ranks}", args)
    except JobFailed as exc:
        print(exc)
        return 1
    result = compare(alone, fleet)
    jobs_s = {"1": round(alone_s, 1), str(args.ranks): round(fleet_s, 1)}
    body = {**meta, "ranks": args.ranks, **result, "job_s": jobs_s, "rows": alone + fleet}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=1) + "\n")
    print(table(alone + fleet, result))
    print(f"written to {path}")
    shutil.rmtree(root, ignore_errors=True)
    return 0 if result["plans_identical"] and result["tuned_once"] and result["store_layer"] else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the result here (default: $OUT/fleet_<device>.json, or ./)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the fleet job (a GPU each)")
    parser.add_argument("--small", action="store_true", help="tiny GPT-2 on the CPU, gloo, aten only (a smoke test)")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds a job may take")
    parser.add_argument("--rank", help=argparse.SUPPRESS)  # run as one rank, writing under this folder
    args = parser.parse_args()
    if args.ranks < 2:
        parser.error("--ranks: a fleet has two ranks or more")
    if args.rank:
        rank_main(args)
        return
    sys.exit(launch(args))


if __name__ == "__main__":
    main()
