"""The command line, run as a user would: a fresh process each time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_env

EXAMPLES = REPO / "examples" / "cpu_problems.json"


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunesmith", *args], capture_output=True, text=True, env=run_env(**env), timeout=300
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

    from tunesmith.cli.tune import spread_devices

    assert spread_devices("cpu", ["cuda:0", "cuda:1"]) == [torch.device("cpu")]
    assert spread_devices("cuda:1", None) == [torch.device("cuda", 1)]
    assert spread_devices("cuda", ["cuda:0", "cuda:1"]) == [torch.device("cuda", 0), torch.device("cuda", 1)]


def test_version_help_and_verbose_say_what_a_new_user_needs(tmp_path, isolated):
    from importlib.metadata import version

    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"tunesmith {version('tunesmith')}"
    proc = cli("--help")
    assert proc.returncode == 0 and "``" not in proc.stdout and "tunesmith tune FILE.json | model.py" in proc.stdout
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "one", "op": "mm", "M": 8, "N": 8, "K": 8, "dtype": "float32"}]))
    proc = cli("-v", "tune", str(path))  # a cold tune says what it tuned
    assert proc.returncode == 0 and "tuned mm (8, 8) x (8, 8)" in proc.stderr and "aten:" in proc.stderr


def test_text_in_square_brackets_is_shown_as_it_is(tmp_path, isolated):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "mm [block_k=64]", "op": "mm", "M": 8, "N": 8, "K": 8, "dtype": "float32"}]))
    proc = cli("tune", str(path))
    assert proc.returncode == 0 and "mm [block_k=64]" in proc.stdout, proc.stdout + proc.stderr
    path.write_text(json.dumps([{"name": "[tool.tunesmith]", "op": "mm", "M": 8, "N": 8, "dtype": "float32"}]))
    proc = cli("tune", str(path))  # an error message keeps its brackets
    assert proc.returncode == 2 and "case '[tool.tunesmith]' (mm) lacks K" in proc.stderr, proc.stderr


def test_a_warning_is_one_line_without_pythons_source(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "one", "op": "mm", "M": 8, "N": 8, "K": 8, "dtype": "float32"}]))
    proc = cli("tune", str(path), TUNESMITH_CACHE_DIR=str(path / "cache"))  # a file: no cache folder there
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 0 and lines, proc.stderr
    assert all(line.startswith("TunesmithWarning: cache layer 'local' failed") for line in lines), proc.stderr


@pytest.fixture
def tmpfs(tmp_path):
    """A real tmpfs mounted at ``tmp_path / "mnt"`` (needs root and mount rights: skipped without)."""
    where = tmp_path / "mnt"
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {proc.stderr.decode().strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_clearing_a_read_only_cache_says_what_stayed_and_fails(tmpfs, tmp_path):
    path = tmp_path / "set.json"
    path.write_text(
        json.dumps([{"name": f"mm{n}", "op": "mm", "M": n, "N": 8, "K": 8, "dtype": "float32"} for n in (8, 9, 10)])
    )
    env = {"TUNESMITH_CACHE_DIR": str(tmpfs / "cache")}
    assert cli("tune", str(path), **env).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    proc = cli("cache", "clear", **env)
    assert proc.returncode == 1 and "removed 0 entries; 3 could not be removed" in proc.stderr, proc.stderr
    assert "Read-only file system" in proc.stderr and "removed 3" not in proc.stdout
    assert len(list((tmpfs / "cache" / "entries").glob("*/*.json"))) == 3


def test_an_unusable_cache_folder_is_shown_as_unusable_not_empty(tmp_path, isolated):
    folder = tmp_path / "not-a-folder"
    folder.write_text("")
    proc = cli("cache", "stats", TUNESMITH_CACHE_DIR=str(folder))
    assert proc.returncode == 0 and "unreachable" in proc.stdout and "NotADirectoryError" in proc.stdout
    # a writer's temporary file, left by a process killed mid-write, is no entry
    entries = isolated / "cache" / "entries" / "ab"
    entries.mkdir(parents=True)
    (entries / ".tmp-x1y2.json").write_text("{")
    from tunesmith.cache.local import LocalDiskCache

    assert LocalDiskCache(isolated / "cache").keys() == []


def test_importing_a_file_nested_past_pythons_stack_is_one_clear_error(tmp_path, isolated):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    proc = cli("cache", "import", str(path))
    assert proc.returncode == 2 and "cannot read the export" in proc.stderr and "Traceback" not in proc.stderr
