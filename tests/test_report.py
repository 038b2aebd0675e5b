"""``tunesmith report``: rows read back from the local cache, checked against figures computed here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import tunesmith
from tunesmith.cache import tally
from tunesmith.cache.entry import encode
from tunesmith.cache.local import LocalDiskCache
from tunesmith.cli import main
from tunesmith.cost import report
from tunesmith.cost.profiles import PRESETS, save_calibrated
from tunesmith.cost.roofline import problem_cost
from tunesmith.selection import SelectionEntry
from tunesmith.settings import current_options
from tunesmith_hookspecs import ChoiceSpec, DeviceInfo, Problem, TensorMeta, Timing, unstructure

from conftest import rand

H100 = PRESETS["H100-SXM"]
GPU_NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def tuned(isolated: Path) -> dict[str, tunesmith.Selection]:
    """Three small problems tuned on the CPU, by their cache keys."""
    selections = [
        tunesmith.tune("mm", rand(64, 32), rand(32, 48)),
        tunesmith.tune("addmm", rand(48), rand(64, 32), rand(32, 48), epilogue=["relu"]),
        tunesmith.tune("mm_plus_mm", rand(16, 8), rand(8, 24), rand(16, 40), rand(40, 24)),
    ]
    return {s.report.key: s for s in selections}


def layer(isolated: Path) -> LocalDiskCache:
    return LocalDiskCache(isolated / "cache")


def report_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    capsys.readouterr()
    assert main(["report", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


# Independent figures: (FLOPs, bytes moved) of the three tuned problems, float32 (4 bytes).
EXPECTED = {
    "mm": (2 * 64 * 48 * 32, 4 * (64 * 32 + 32 * 48 + 64 * 48)),
    "addmm+relu": (2 * 64 * 48 * 32, 4 * (48 + 64 * 32 + 32 * 48 + 64 * 48)),
    "mm_plus_mm": (2 * 16 * 24 * (8 + 40), 4 * (16 * 8 + 8 * 24 + 16 * 40 + 40 * 24 + 16 * 24)),
}


def test_each_tuned_problem_is_a_row_with_its_choice_time_and_rates(isolated, tuned):
    entries = report.read_entries(layer(isolated), None)
    assert not entries.skipped
    assert {key: entry.problem for key, entry in entries.found} == {k: s.problem for k, s in tuned.items()}
    rows = report.rows(entries.found, lambda name: None)
    assert sorted(r.op for r in rows) == sorted(EXPECTED)
    for r in rows:
        sel = tuned[r.key]
        ms = sel.timings[sel.spec]
        assert r.chosen == str(sel.spec) and r.ms == ms and r.device_name == sel.report.device_name
        assert sel.spec.backend == "aten" and r.speedup == 1.0  # ATen wins on the CPU: no speedup
        flop_count, byte_count = EXPECTED[r.op]
        assert r.tflops == pytest.approx(flop_count / (ms * 1e-3) / 1e12)
        assert r.gbps == pytest.approx(byte_count / (ms * 1e-3) / 1e9)
        assert r.dtype == "float32" and r.roofline_fraction is None and r.profile is None  # a CPU has no profile


def test_a_preset_gives_each_row_its_roofline_fraction(isolated, tuned, capsys):
    rows = {r["key"]: r for r in report_json(capsys, "--device", "H100-SXM")}
    assert rows.keys() == tuned.keys()
    for key, sel in tuned.items():
        r, ms = rows[key], sel.timings[sel.spec]
        flop_count, byte_count = EXPECTED[r["op"]]
        floor_ms = max(flop_count / 67e12, byte_count / 3350e9) * 1e3  # float32 on the CPU: no TF32
        assert r["roofline_ms"] == pytest.approx(floor_ms)
        assert r["roofline_fraction"] == pytest.approx(problem_cost(sel.problem, H100).ms / ms)
        assert 0 < r["roofline_fraction"] < 1 and r["profile"] == "H100-SXM" and r["bound"] == "memory"
    assert all(r["roofline_fraction"] is None for r in report_json(capsys))  # CPU entries, no --device


def test_the_table_names_every_problem_and_its_choice(tuned, capsys):
    capsys.readouterr()
    assert main(["report", "--device", "H100-SXM"]) == 0
    text = capsys.readouterr().out
    assert "tunesmith report: 3 tuned problems" in text
    for op in ("mm", "addmm+relu", "mm_plus_mm"):
        assert f"│ {op} " in text
    assert "aten:eager" in text and "1.00x" in text and "H100-SXM" in text


def test_an_unknown_device_is_one_clear_error(tuned, capsys):
    assert main(["report", "--device", "H900-XL"]) == 2
    assert "no device profile for --device 'H900-XL'" in capsys.readouterr().err.replace("\n", " ")


def test_plot_writes_a_png(tuned, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "charts" / "report.png"
    assert main(["report", "--device", "H100-SXM", "--plot", str(path)]) == 0
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and path.stat().st_size > 5000
    assert f"wrote the chart to {path}" in capsys.readouterr().err.replace("\n", "")


def test_plot_without_matplotlib_says_how_to_get_it(tuned, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.figure", None)
    assert main(["report", "--plot", str(tmp_path / "r.png")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "r.png").exists()


def _drop_problem(path: Path) -> None:
    """Rewrite an entry as it was before entries stored their Problem."""
    data = json.loads(path.read_bytes())
    payload = {k: v for k, v in data["payload"].items() if k != "problem"}
    path.write_bytes(encode("autotune", data["key"], payload, None))


def test_an_entry_without_its_problem_still_reports_and_still_hits(isolated, tuned, capsys):
    key = next(k for k, s in tuned.items() if s.problem.op == "mm")
    (path,) = (isolated / "cache" / "entries").glob(f"*/{key}.json")
    _drop_problem(path)
    rows = {r["key"]: r for r in report_json(capsys, "--device", "H100-SXM")}
    assert rows.keys() == tuned.keys()
    old = rows[key]
    assert old["chosen"] == str(tuned[key].spec) and old["ms"] == tuned[key].timings[tuned[key].spec]
    assert old["speedup"] == 1.0
    assert old["op"] is None and old["tflops"] is None and old["roofline_fraction"] is None
    assert all(r["roofline_fraction"] is not None for k, r in rows.items() if k != key)
    assert main(["report"]) == 0
    assert key[:12] in capsys.readouterr().out
    # the selection itself still reads the old entry
    tunesmith.reset()
    sel = tunesmith.tune("mm", rand(64, 32), rand(32, 48))
    assert sel.report.source == "local" and sel.spec == tuned[key].spec


def test_invalid_entries_are_skipped_and_counted_and_plans_are_not_problems(isolated, tuned, capsys):
    disk = layer(isolated)
    disk.put("ab" + "0" * 62, b"\x00 not json")
    disk.put("cd" + "0" * 62, encode("autotune", "cd" + "0" * 62, {"chosen": "aten:eager"}, None))
    disk.put("ef" + "0" * 62, encode("compiled_graph", "ef" + "0" * 62, {"problems": {}}, None))
    entries = report.read_entries(disk, None)
    assert len(entries.found) == 3 and len(entries.skipped) == 2
    capsys.readouterr()
    assert main(["report", "--json"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)) == 3 and "skipped 2 invalid entries" in captured.err
    # signed with another secret: every entry is invalid
    assert not report.read_entries(disk, "another-secret").found


def _entry(chosen: str, times: dict[str, float], device_name: str, problem: Problem | None) -> SelectionEntry:
    timings = tuple(Timing(ChoiceSpec(*spec.split(":")), ms) for spec, ms in times.items())
    return SelectionEntry(ChoiceSpec(*chosen.split(":")), timings, device_name, 1.0, False, problem)


def _bf16_mm(m: int, n: int, k: int) -> Problem:
    a, b = TensorMeta.contiguous((m, k), "bfloat16", "cuda"), TensorMeta.contiguous((k, n), "bfloat16", "cuda")
    return Problem("mm", (a, b), TensorMeta.contiguous((m, n), "bfloat16", "cuda"))


def test_speedup_is_against_atens_best_and_missing_without_aten_times():
    problem = _bf16_mm(4096, 4096, 4096)
    faster = _entry("triton:mm", {"aten:eager": 2.0, "aten:other": 1.0, "triton:mm": 0.5}, GPU_NAME, problem)
    (r,) = report.rows([("k1", faster)], lambda name: None)
    assert r.speedup == 2.0 and r.aten_ms == 1.0 and r.tflops == pytest.approx(2 * 4096**3 / 0.5e-3 / 1e12)
    no_aten = _entry("triton:mm", {"aten:eager": math.inf, "triton:mm": 0.5}, GPU_NAME, problem)
    failed = _entry("triton:mm", {"triton:mm": math.inf}, GPU_NAME, problem)
    rows = report.rows([("k2", no_aten), ("k3", failed)], lambda name: None)
    assert [(r.aten_ms, r.speedup) for r in rows] == [(None, None), (None, None)]
    assert rows[1].ms is None and rows[1].tflops is None


def test_a_gpu_entry_uses_its_calibrated_profile_else_its_preset(isolated, capsys):
    problem = _bf16_mm(8192, 8192, 8192)
    key = "9" * 64
    entry = _entry("aten:eager", {"aten:eager": 2.0}, GPU_NAME, problem)
    layer(isolated).put(key, encode("autotune", key, unstructure(entry), None))
    (r,) = report_json(capsys)
    assert r["profile"] == "H100-SXM" and r["roofline_fraction"] == pytest.approx(problem_cost(problem, H100).ms / 2.0)
    assert r["bound"] == "compute" and r["roofline_fraction"] == pytest.approx(2 * 8192**3 / 989e12 * 1e3 / 2.0)

    measured = DeviceInfo(GPU_NAME, {"bfloat16": 700e12, "float32": 50e12}, memory_bandwidth=3000e9)
    save_calibrated(measured, current_options())
    (r,) = report_json(capsys)
    assert r["profile"] == GPU_NAME and r["roofline_fraction"] == pytest.approx(2 * 8192**3 / 700e12 * 1e3 / 2.0)
    (r,) = report_json(capsys, "--device", "A100-SXM")  # --device wins over the entry's own GPU
    assert r["profile"] == "A100-SXM" and r["roofline_fraction"] == pytest.approx(2 * 8192**3 / 312e12 * 1e3 / 2.0)


def test_an_empty_cache_reports_nothing(capsys):
    assert report_json(capsys) == []
    assert main(["report"]) == 0
    assert "nothing tuned yet" in capsys.readouterr().out


# --- the compiled graphs' counts (tally.json) ----------------------------------------------------


def test_the_compiled_graph_counts_add_up_across_writers_and_a_bad_file_reads_as_none(isolated, capsys):
    root = isolated / "cache"
    for _ in range(3):
        tally.add(root, {"compiled_graph_cache_miss": 1})
    tally.add(root, {"compiled_graph_cache_hit": 2, "compiled_graph_inductor_hit": 1, "autotune_tuned": 5})
    kept = {"compiled_graph_cache_miss": 3, "compiled_graph_cache_hit": 2, "compiled_graph_inductor_hit": 1}
    assert tally.read(root) == kept
    assert json.loads((root / "tally.json").read_text()) == tally.read(root)  # nothing else is kept
    assert main(["report", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == []  # the JSON rows stay a list: the line goes to stderr
    assert "compiled graphs: 3 compiled cold, 2 served warm from a cache (1 of them by Inductor's" in captured.err
    for bad in (b"[" * 5000, b"not json", b'{"compiled_graph_cache_hit": -4}', b"7" * 10_000):
        (root / "tally.json").write_bytes(bad)
        assert tally.read(root) == dict.fromkeys(tally.KEPT, 0)
    tally.add(root, {"compiled_graph_cache_hit": 1})  # starts again from nothing
    assert tally.read(root)["compiled_graph_cache_hit"] == 1


def test_a_folder_that_cannot_hold_the_counts_never_fails_a_compile(tmp_path):
    (tmp_path / "file").write_text("")
    tally.add(tmp_path / "file" / "cache", {"compiled_graph_cache_hit": 1})  # a file where the folder goes
    tally.add(None, {"compiled_graph_cache_hit": 1})  # no local layer: nothing kept
