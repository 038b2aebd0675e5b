"""Run backend checks in worker processes, so that a kernel that crashes or hangs is reported, not
fatal: the worker streams JSON lines, and when it dies the parent blames the case and the step it
was running, then starts a new worker on the remaining cases.

A choice that crashed or hung two workers is quarantined (reported, not run again); after two
crashes that no choice can be blamed for (inside the plugin's ``tunesmith_choices``, say), the
remaining cases fail without running. Either way a broken plugin costs a few restarts, not one per
case.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from tunesmith.conformance.cases import Case
from tunesmith.conformance.checks import BENCHMARKING

#: crashes that quarantine a choice, or (unblamed) stop the run
CRASH_LIMIT = 2


def _lines(path: Path) -> list[dict[str, Any]]:
    """Complete JSON lines written so far (a line cut short by a crash is left out)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def _death(proc: subprocess.Popen[bytes], stalled_s: float | None, stderr: Path) -> str:
    if stalled_s is not None:
        what = f"hung: no progress for {stalled_s:g} s, the worker process was killed"
    elif proc.returncode is not None and proc.returncode < 0:
        what = f"crashed the worker process ({signal.Signals(-proc.returncode).name})"
    else:
        what = f"the worker process exited with status {proc.returncode}"
    tail = stderr.read_text(errors="replace").strip()[-1500:] if stderr.exists() else ""
    return what + (f"\n--- worker stderr (last lines) ---\n{tail}" if tail else "")


def _worker_env() -> dict[str, str]:
    # Another string-hash seed than ours: keys that depend on hash() differ between processes.
    return {**os.environ, "PYTHONHASHSEED": "random", "PYTHONFAULTHANDLER": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def run_isolated(backend: str, device: str, cases: Sequence[Case], stall_timeout_s: float) -> dict[str, dict[str, Any]]:
    """Check ``backend`` on ``cases`` in worker processes; one result dict per case id."""
    results: dict[str, dict[str, Any]] = {}
    crashes: collections.Counter[str] = collections.Counter()
    todo = list(cases)
    with tempfile.TemporaryDirectory(prefix="tunesmith-conformance-") as tmp:
        for attempt in range(len(cases) + 1):
            if not todo:
                break
            folder = Path(tmp) / str(attempt)
            folder.mkdir()
            (folder / "cases.json").write_text(json.dumps([attrs.asdict(c) for c in todo]))
            quarantined = sorted(s for s, n in crashes.items() if n >= CRASH_LIMIT and s != "")
            (folder / "quarantine.json").write_text(json.dumps(quarantined))
            out, err = folder / "out.jsonl", folder / "stderr.txt"
            with err.open("wb") as stderr:
                argv = [sys.executable, "-m", "tunesmith.conformance.worker", backend, device, str(folder)]
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=_worker_env())
                stalled = _watch(proc, out, stall_timeout_s)
            lines = _lines(out)
            done = {line["result"]["id"]: line["result"] for line in lines if "result" in line}
            results |= done
            started = [line for line in lines if "start" in line]
            running = started[-1]["start"] if started and started[-1]["start"] not in done else None
            if running is None:
                if proc.returncode != 0 or not done:  # it died between cases, or made no progress at all
                    for case in todo:
                        if case.id not in results:
                            results[case.id] = {"id": case.id, "crashed": "not run: " + _death(proc, stalled, err)}
                    break
                todo = [c for c in todo if c.id not in results]
                continue
            steps = [line["choice"] for line in lines[lines.index(started[-1]) :] if "choice" in line]
            step = steps[-1] if steps else ""
            crashes[step if step != BENCHMARKING else ""] += 1
            blame = f" while running {step}" if step else " outside any choice (in tunesmith_choices, or setting up)"
            what, _, tail = _death(proc, stalled, err).partition("\n")
            results[running] = {"id": running, "crashed": what + blame + (f"\n{tail}" if tail else "")}
            todo = [c for c in todo if c.id not in results]
            if crashes[""] >= CRASH_LIMIT:
                for case in todo:
                    why = f"not run: {CRASH_LIMIT} workers crashed outside any choice"
                    results[case.id] = {"id": case.id, "crashed": why}
                break
    return results


def _watch(proc: subprocess.Popen[bytes], out: Path, stall_timeout_s: float) -> float | None:
    """Wait for the worker; kill it when it writes nothing for ``stall_timeout_s``. Returns that if so."""
    seen, last = 0, time.monotonic()
    while proc.poll() is None:
        time.sleep(0.05)
        size = out.stat().st_size if out.exists() else 0
        if size != seen:
            seen, last = size, time.monotonic()
        elif time.monotonic() - last > stall_timeout_s:
            proc.kill()
            proc.wait()
            return stall_timeout_s
    return None
