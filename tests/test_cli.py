"""The command line, run as a user would: a fresh process each time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, run_env

EXAMPLES = REPO / "examples" / "cpu_problems.json"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunesmith", *args], capture_output=True, text=True, env=run_env(), timeout=300
    )


def test_tune_a_problem_set_prints_a_table_and_caches_it(isolated):
    first = cli("tune", str(EXAMPLES), "--json", "first.json")
    assert first.returncode == 0, first.stderr
    names = [c["name"] for c in json.loads(EXAMPLES.read_text())["cases"]]
    assert "tunesmith selections" in first.stdout
    assert all(name in first.stdout for name in names)
    rows = json.loads(Path("first.json").read_text())
    assert [r["name"] for r in rows] == names
    assert all(r["chosen"].startswith("aten:") and r["ms"] > 0 and r["source"] == "tuned" for r in rows)

    second = cli("tune", str(EXAMPLES), "--json", "second.json", "--only", names[0], names[-1])
    assert second.returncode == 0, second.stderr
    rows = json.loads(Path("second.json").read_text())
    assert [r["source"] for r in rows] == ["local", "local"]

    stats = cli("cache", "stats")
    assert stats.returncode == 0 and str(isolated / "cache") in stats.stdout
    assert f"│ {len(names)} " in stats.stdout
    cleared = cli("cache", "clear")
    assert cleared.returncode == 0 and f"removed {len(names)} entries" in cleared.stdout
    assert not list((isolated / "cache" / "entries").glob("*/*.json"))


def test_tune_the_gemm_set_format_with_a_bad_case_reports_it_cleanly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cases": [{"name": "no_k", "op": "mm", "M": 4, "N": 4, "dtype": "bfloat16"}]}))
    proc = cli("tune", str(bad))
    assert proc.returncode == 2 and "case 'no_k' (mm) lacks K" in proc.stderr
    proc = cli("tune", str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and "cannot read problem set" in proc.stderr


def test_the_repository_keeps_a_copy_of_the_gemm_set():
    cases = json.loads((REPO / "benchmarks" / "gemm_shapes.json").read_text())["cases"]
    assert len(cases) == 16 and {c["op"] for c in cases} == {"mm", "addmm", "mm_plus_mm", "bmm", "baddbmm"}


def test_a_failing_case_gives_a_row_and_exit_1(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "ok", "op": "mm", "M": 8, "N": 8, "K": 8, "dtype": "float32"}]))
    proc = cli("tune", str(path), "--backends", "nothing_installed", "--json", "out.json")
    assert proc.returncode == 1 and "no valid choices" in proc.stdout
    (row,) = json.loads(Path("out.json").read_text())
    assert "nothing_installed: cannot run here: not installed" in row["error"]


def test_plugins_table():
    proc = cli("plugins")
    assert proc.returncode == 0, proc.stderr
    assert "tunesmith-aten" in proc.stdout and "choices, estimate_runtime, rebuild_choice" in proc.stdout


def test_tune_spreads_a_set_over_the_devices_of_the_setting_and_pins_an_indexed_device():
    import torch

    from tunesmith.cli import spread_devices

    assert spread_devices("cpu", ["cuda:0", "cuda:1"]) == [torch.device("cpu")]
    assert spread_devices("cuda:1", None) == [torch.device("cuda", 1)]
    assert spread_devices("cuda", ["cuda:0", "cuda:1"]) == [torch.device("cuda", 0), torch.device("cuda", 1)]
