"""``tunesmith calibrate``: the stored profile wins over the preset; without a GPU, one clear error."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch

from tunesmith import hooks
from tunesmith.cost import calibrate
from tunesmith.cost.profiles import PRESETS, builtin_profile, load_calibrated, profile_path, save_calibrated
from tunesmith.settings import current_options
from tunesmith_hookspecs import DeviceInfo

from conftest import run_env

GPU_NAME = "NVIDIA H100 80GB HBM3"
MEASURED = DeviceInfo(
    GPU_NAME,
    {"bfloat16": 750e12, "float16": 760e12, "tf32": 380e12, "float32": 51e12, "float8": 1979e12},
    memory_bandwidth=2900e9,
    interconnect_bandwidth=450e9,
    interconnect_latency_s=3e-6,
    multiprocessors=132,
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = run_env(CUDA_VISIBLE_DEVICES="")  # no GPU, even on a machine that has one
    return subprocess.run(
        [sys.executable, "-m", "tunesmith", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "needs a CUDA GPU"),
        (("--show",), "needs a CUDA GPU"),
        (("--device", "cuda:1"), "needs a CUDA GPU"),
        (("--device", "cpu"), "measures a CUDA GPU, not cpu"),
    ],
)
def test_without_a_gpu_calibrate_is_one_clear_error(args, message):
    proc = cli("calibrate", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr.replace("\n", " ") and "Traceback" not in proc.stderr
    assert not proc.stdout


def test_show_prints_a_preset_by_name_without_a_gpu():
    proc = cli("calibrate", "--show", "--device", "A100-SXM")
    assert proc.returncode == 0, proc.stderr
    assert "device profile of A100-SXM" in proc.stdout and "A100-SXM: preset" in proc.stdout
    assert "156.0" in proc.stdout and "2039" in proc.stdout and "108" in proc.stdout


def test_a_saved_profile_round_trips_under_the_cache_dir(isolated):
    options = current_options()
    path = save_calibrated(MEASURED, options)
    assert path == profile_path(GPU_NAME, options) == isolated / "cache" / "profiles" / "NVIDIA_H100_80GB_HBM3.json"
    assert load_calibrated(GPU_NAME, options) == MEASURED
    in_use = calibrate.profile_in_use(GPU_NAME, options)
    assert in_use.profile == MEASURED and in_use.source == f"calibrated ({path})"
    assert load_calibrated("NVIDIA A100-SXM4-80GB", options) is None
    other = calibrate.profile_in_use("NVIDIA A100-SXM4-80GB", options)
    assert other.profile is PRESETS["A100-SXM"] and other.source == "preset"


@pytest.fixture
def fake_h100(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch reports one H100 (the lookup under test is tunesmith's, not torch's)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU_NAME)


def test_the_core_prefers_the_calibrated_profile_over_the_preset(isolated, fake_h100):
    options = current_options()
    cuda = torch.device("cuda", 0)
    assert builtin_profile(cuda, options) is PRESETS["H100-SXM"]
    assert hooks.device_info(cuda, options) is PRESETS["H100-SXM"]
    save_calibrated(MEASURED, options)
    assert builtin_profile(cuda, options) == MEASURED
    assert hooks.device_info(cuda, options) == MEASURED
    assert hooks.device_info("H100-SXM", options) is PRESETS["H100-SXM"]  # a preset asked by name stays the preset


@pytest.mark.parametrize("text", ["{not json", '{"name": "NVIDIA H100 80GB HBM3"}', '{"name": 1, "peak_flops": []}'])
def test_a_corrupt_profile_is_ignored_with_a_warning(isolated, fake_h100, caplog, text):
    options = current_options()
    path = profile_path(GPU_NAME, options)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="tunesmith.cost.profiles"):
        assert load_calibrated(GPU_NAME, options) is None
    assert f"ignoring the calibrated profile {path}" in caplog.text
    assert builtin_profile(torch.device("cuda", 0), options) is PRESETS["H100-SXM"]
    assert calibrate.profile_in_use(GPU_NAME, options).source == "preset"


def test_the_comparison_is_measured_over_preset():
    rows = {r["what"]: r for r in calibrate.comparison(MEASURED, PRESETS["H100-SXM"])}
    assert list(rows) == ["bfloat16 matmul", "float16 matmul", "tf32 matmul", "float32 matmul", "copy"]
    assert rows["bfloat16 matmul"]["measured"] == pytest.approx(750)
    assert rows["bfloat16 matmul"]["preset"] == pytest.approx(989)
    assert rows["bfloat16 matmul"]["fraction"] == pytest.approx(750 / 989)
    assert rows["copy"] == pytest.approx({"what": "copy", "unit": "GB/s", "measured": 2900, "preset": 3350,
                                          "fraction": 2900 / 3350})  # fmt: skip
    alone = calibrate.comparison(MEASURED, None)
    assert all(r["preset"] is None and r["fraction"] is None and r["measured"] for r in alone)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="measures a real GPU")
def test_measure_a_real_gpu_on_small_problems():
    device = calibrate.cuda_device(None)
    precision = torch.get_float32_matmul_precision()
    profile = calibrate.measure(device, sizes=dict.fromkeys(calibrate.MATMULS, 1024), copy_bytes=64 << 20)
    peaks = dict(profile.peak_flops)
    assert profile.name == torch.cuda.get_device_name(device)
    assert all(peaks[name] > 1e11 for name in calibrate.MATMULS) and profile.memory_bandwidth > 1e10
    assert profile.multiprocessors == torch.cuda.get_device_properties(device).multi_processor_count
    assert torch.get_float32_matmul_precision() == precision  # restored after the tf32 and fp32 runs
