"""``benchmarks/models.py`` end to end on the CPU (``--small``): rows, the warm process, and
``--processes``, which times a variant in several processes and takes the median (of its first
steps too, cold on fresh caches and warm)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_env

MODELS_PY = Path(__file__).resolve().parents[1] / "benchmarks" / "models.py"


@pytest.mark.timeout(600)  # nine processes that import torch, five of them compiling: 40 s here, over 300 s once on CI
def test_models_py_times_the_retimed_variants_in_several_processes(tmp_path):
    result = tmp_path / "models.json"
    command = [sys.executable, str(MODELS_PY), "--device", "cpu", "--small", "--models", "mlp_decode"]
    command += ["--variants", "eager,tunesmith", "--warm", "tunesmith", "--processes", "2"]
    samples = tmp_path / "samples"
    command += ["--retime", "tunesmith", "--first-step-samples", str(samples), "--json", str(result)]
    proc = subprocess.run(command, capture_output=True, text=True, env=run_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads(result.read_text())
    assert body["processes"] == 2 and "medians over 2 processes" in body["timing"]
    rows = {r["variant"]: r for r in body["rows"]}
    assert set(rows) == {"eager", "tunesmith"} and not any("error" in r for r in rows.values())
    mine = rows["tunesmith"]
    assert len(mine["step_ms_processes"]) == 2 and "retime_errors" not in mine
    assert mine["step_ms"] == round(statistics.median(mine["step_ms_processes"]), 4)
    assert mine["out_rel_err"] < 2e-2 and mine["warm_first_step_s"] > 0  # bfloat16 against eager
    for gc_key in ("first_step_gc", "warm_first_step_gc"):  # the step's own collections, by generation
        collected = mine[gc_key]
        assert len(collected["collections"]) == len(collected["s"]) == 3 and collected["collections"][0] > 0
    winners = mine["winners"]  # by Problem, only where a spec is not ATen's
    assert all(any(not spec.startswith("aten:") for spec in specs) for specs in winners.values())
    fastest = mine["fastest"]  # every Problem tuned in the first process: its three fastest, best first
    assert fastest and all(0 < len(top) <= 3 for top in fastest.values())
    assert all([us for _, us, _ in top] == sorted(us for _, us, _ in top) for top in fastest.values())
    for key, count in (("first_step_s", 2), ("warm_first_step_s", 3)):  # --warm's: cold and warm first steps
        assert len(mine[f"{key}_processes"]) == count
        assert mine[key] == round(statistics.median(mine[f"{key}_processes"]), 3)
    assert min(mine["first_step_s_processes"]) > max(mine["warm_first_step_s_processes"])  # fresh caches
    sampled = [path.read_text().splitlines() for path in samples.glob("mlp_decode-tunesmith-*.txt")]
    seconds = sorted(float(head.split()[1]) for head, *_ in sampled)  # every process's first step, sampled
    assert seconds == sorted(mine["first_step_s_processes"] + mine["warm_first_step_s_processes"])
    for _, *lines in sampled:
        within = lines[lines.index("within (share, function):") + 1 :]
        assert int(lines[0].split()[0]) > 0 and within[0].split()[0] == "100.0%"  # the step, in every sample
        assert any("tunesmith/compile/backend.py" in line for line in within)
    assert len(list(samples.glob("mlp_decode-eager-*.txt"))) == 1
    assert "step_ms_processes" not in rows["eager"]  # not in --retime: one process
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=run_env(), timeout=600)
    assert resumed.returncode == 0 and json.loads(result.read_text())["rows"] == body["rows"]  # nothing left to run
    other = [*command[:-2], "--processes", "3", "--json", str(result), "--resume"]
    refused = subprocess.run(other, capture_output=True, text=True, env=run_env(), timeout=600)
    assert refused.returncode != 0 and "processes 2 (now 3)" in refused.stderr
