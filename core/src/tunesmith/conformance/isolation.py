"""Run backend checks in worker processes, so that a kernel that crashes or hangs is reported, not
fatal: the worker streams JSON lines, and when it dies the parent blames the case and the choice
it was running, then starts a new worker on the remaining cases."""

from __future__ import annotations

import collections
import json
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

#: a choice that crashed this many workers is no longer run; its later cases fail without it
QUARANTINE_AFTER = 2


def _lines(path: Path) -> list[dict[str, Any]]:
    """Complete JSON lines written so far (a line cut short by a crash is left out)."""
    text = path.read_text() if path.exists() else ""
    out = []
    for line in text.splitlines(keepends=True):
        if line.endswith("\n"):
            out.append(json.loads(line))
    return out


def _death(proc: subprocess.Popen[bytes], timed_out: float | None) -> str:
    if timed_out is not None:
        return f"timed out: no result after {timed_out:g} s, the worker was killed"
    code = proc.returncode
    if code is not None and code < 0:
        return f"crashed the worker process ({signal.Signals(-code).name})"
    return f"the worker process exited with status {code}"


def run_isolated(backend: str, device: str, cases: Sequence[Case], case_timeout_s: float) -> dict[str, dict[str, Any]]:
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
            quarantined = sorted(spec for spec, n in crashes.items() if n >= QUARANTINE_AFTER)
            (folder / "quarantine.json").write_text(json.dumps(quarantined))
            out, err = folder / "out.jsonl", folder / "stderr.txt"
            with err.open("wb") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tunesmith.conformance.worker", backend, device, str(folder)],
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
                timed_out = _watch(proc, out, case_timeout_s)
            lines = _lines(out)
            done = {line["result"]["id"]: line["result"] for line in lines if "result" in line}
            results |= done
            started = [line for line in lines if "start" in line]
            running = started[-1]["start"] if started and started[-1]["start"] not in done else None
            if running is None:
                if proc.returncode != 0 and not done:  # died before any case: nothing will get further
                    tail = err.read_text()[-2000:]
                    for case in todo:
                        results[case.id] = {"id": case.id, "crashed": f"{_death(proc, timed_out)}\n{tail}"}
                    break
                todo = [c for c in todo if c.id not in results]
                continue
            choices = [line["choice"] for line in lines[lines.index(started[-1]) :] if "choice" in line]
            blame = f" while running {choices[-1]}" if choices else ""
            if choices:
                crashes[choices[-1]] += 1
            results[running] = {"id": running, "crashed": _death(proc, timed_out) + blame}
            todo = [c for c in todo if c.id not in results]
    return results


def _watch(proc: subprocess.Popen[bytes], out: Path, case_timeout_s: float) -> float | None:
    """Wait for the worker; kill it when one case runs past the timeout. Returns the timeout if so."""
    seen, last = 0, time.monotonic()
    while proc.poll() is None:
        time.sleep(0.05)
        size = out.stat().st_size if out.exists() else 0
        if size != seen:
            seen, last = size, time.monotonic()
        elif time.monotonic() - last > case_timeout_s:
            proc.kill()
            proc.wait()
            return case_timeout_s
    return None
