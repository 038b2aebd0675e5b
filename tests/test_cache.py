"""The memory and local disk layers: hits, and every kind of bad entry being a miss and a warning."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

import tunesmith
from tunesmith.cache.keys import selection_key
from tunesmith.cache.local import LocalDiskCache
from tunesmith.problem import build_problem
from tunesmith_hookspecs import hookimpl

from conftest import rand

A, B = rand(40, 24), rand(24, 56)


def entries(tmp: Path) -> list[Path]:
    return sorted((tmp / "cache" / "entries").glob("*/*.json"))


def tune_mm():
    sel = tunesmith.tune("mm", A, B)
    torch.testing.assert_close(sel.kernel(A, B), A @ B)
    return sel


def test_first_tune_misses_and_stores_then_memory_then_disk(isolated):
    first = tune_mm()
    assert not first.cached and first.report.source == "tuned"
    assert tunesmith.counters["autotune_local_miss"] == 1 and tunesmith.counters["autotune_local_put"] == 1
    assert len(entries(isolated)) == 1

    again = tune_mm()
    assert again.cached and again.report.source == "memory"
    assert tunesmith.counters["autotune_memory_hit"] == 1

    tunesmith.reset()
    assert tunesmith.counters["autotune_local_hit"] == 0
    from_disk = tune_mm()
    assert from_disk.cached and from_disk.report.source == "local"
    assert from_disk.spec == first.spec and from_disk.timings == first.timings
    assert tunesmith.counters["autotune_local_hit"] == 1 and tunesmith.counters["autotune_local_miss"] == 0


def test_entries_are_plain_json_written_atomically(isolated):
    tune_mm()
    (path,) = entries(isolated)
    data = json.loads(path.read_text())
    assert data["format"] == "tunesmith-entry" and data["kind"] == "autotune" and data["sig"] is None
    assert data["payload"]["chosen"]["backend"] == "aten"
    assert not list(path.parent.glob(".tmp-*"))


class Evil:
    """Unpickling this would create a file: proof that nothing read back is unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _corruptions(tmp: Path):
    return {
        "garbage": lambda raw: b"\x00\xffnot json at all",
        "truncated": lambda raw: raw[: len(raw) // 2],
        "pickle": lambda raw: pickle.dumps(Evil(tmp / "pwned")),
        "wrong_shape": lambda raw: raw.replace(b'"chosen"', b'"chosen_spec"'),
        "wrong_types": lambda raw: raw.replace(b'"tuning_s":', b'"tuning_s":"slow","x":'),
        "other_key": lambda raw: raw.replace(b'"key":"', b'"key":"0'),
        "not_an_entry": lambda raw: b'{"chosen": "aten:eager"}',
    }


@pytest.mark.parametrize("kind", list(_corruptions(Path())))
def test_a_corrupt_entry_is_a_miss_and_a_warning(isolated, kind):
    tune_mm()
    (path,) = entries(isolated)
    path.write_bytes(_corruptions(isolated)[kind](path.read_bytes()))
    tunesmith.reset()
    with pytest.warns(tunesmith.TunesmithWarning, match="invalid autotune entry"):
        sel = tune_mm()
    assert sel.report.source == "tuned"
    assert tunesmith.counters["cache_entry_invalid"] == 1
    assert tunesmith.counters["autotune_local_miss"] == 1
    assert not (isolated / "pwned").exists()
    # the re-tuned result replaced the bad entry
    tunesmith.reset()
    assert tune_mm().report.source == "local"


def test_signed_entries_hit_with_the_same_secret_and_miss_otherwise(isolated):
    with tunesmith.options(cache_secret="s3cret"):
        tune_mm()
        (path,) = entries(isolated)
        assert len(json.loads(path.read_text())["sig"]) == 64
        tunesmith.reset()
        assert tune_mm().report.source == "local"

    tunesmith.reset()
    with tunesmith.options(cache_secret="another"), pytest.warns(tunesmith.TunesmithWarning, match="bad signature"):
        assert tune_mm().report.source == "tuned"


def test_a_tampered_signed_entry_is_a_miss(isolated):
    with tunesmith.options(cache_secret="s3cret"):
        tune_mm()
        (path,) = entries(isolated)
        data = json.loads(path.read_text())
        data["payload"]["tuning_s"] = 123.0
        path.write_text(json.dumps(data))
        tunesmith.reset()
        with pytest.warns(tunesmith.TunesmithWarning, match="bad signature"):
            assert tune_mm().report.source == "tuned"


def test_an_unsigned_entry_is_a_miss_once_a_secret_is_set(isolated):
    tune_mm()
    tunesmith.reset()
    with tunesmith.options(cache_secret="s3cret"), pytest.warns(tunesmith.TunesmithWarning, match="unsigned"):
        assert tune_mm().report.source == "tuned"


def test_a_cached_choice_that_cannot_be_rebuilt_is_tuned_again(isolated):
    tune_mm()
    (path,) = entries(isolated)
    path.write_bytes(path.read_bytes().replace(b'"template":"eager"', b'"template":"gone"'))
    tunesmith.reset()
    with pytest.warns(tunesmith.TunesmithWarning, match="aten:gone.*cannot run here"):
        assert tune_mm().report.source == "tuned"
    assert tunesmith.counters["cache_rebuild_failed"] == 1


def test_cache_dir_option_and_empty_caches(isolated, tmp_path):
    with tunesmith.options(cache_dir=str(tmp_path / "elsewhere")):
        tune_mm()
    assert len(list((tmp_path / "elsewhere" / "entries").glob("*/*.json"))) == 1
    tunesmith.reset()
    with tunesmith.options(caches=[]):
        assert tune_mm().report.source == "tuned"
    assert not entries(isolated)


def test_key_covers_problem_device_backends_and_spec_version():
    problem, _ = build_problem("mm", [A, B], {})
    half, _ = build_problem("mm", [A.half(), B.half()], {})
    cpu = torch.device("cpu")
    base = selection_key(problem, cpu, [("aten", "0.1.0")])
    assert base == selection_key(problem, cpu, [("aten", "0.1.0")])
    assert base != selection_key(half, cpu, [("aten", "0.1.0")])
    assert base != selection_key(problem, cpu, [("aten", "0.2.0")])
    assert base != selection_key(problem, cpu, [("aten", "0.1.0"), ("triton", "3.6")])
    threads = torch.get_num_threads()
    torch.set_num_threads(threads - 1 if threads > 1 else 2)
    try:
        assert base != selection_key(problem, cpu, [("aten", "0.1.0")])
    finally:
        torch.set_num_threads(threads)


class FlakyLayer:
    """A layer whose server is down: every call raises."""

    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    def get(self, key):
        self.calls += 1
        raise ConnectionError("server down")

    def put(self, key, value):
        self.calls += 1
        raise ConnectionError("server down")


def test_a_failing_layer_is_counted_warned_and_backed_off(register):
    layer = FlakyLayer()

    class Plugin:
        @hookimpl
        def tunesmith_cache_layers(self, options):
            return [layer]

    register(Plugin(), "flaky_plugin")
    with pytest.warns(tunesmith.TunesmithWarning, match="'flaky' failed to read"):
        sel = tune_mm()
    assert sel.report.source == "tuned"
    assert tunesmith.counters["remote_cache_error"] == 1 and layer.calls == 1  # the put was skipped
    tunesmith.counters.clear()
    tunesmith.tune("mm", rand(8, 8), rand(8, 8))  # within the back-off: not called
    assert layer.calls == 1 and tunesmith.counters["remote_cache_error"] == 0
    tunesmith.reset()  # clears the back-off
    with pytest.warns(tunesmith.TunesmithWarning):
        tunesmith.tune("mm", rand(9, 9), rand(9, 9))  # a new problem: the local layer misses
    assert layer.calls == 2


def test_local_layer_rejects_keys_that_are_paths(tmp_path):
    layer = LocalDiskCache(tmp_path)
    with pytest.raises(ValueError, match="invalid cache key"):
        layer.put("../../etc/passwd", b"x")
    layer.put("ab" * 32, b"{}")
    assert layer.get("ab" * 32) == b"{}" and layer.get("cd" * 32) is None
    assert layer.stats()["entries"] == 1 and layer.clear() == 1 and layer.stats()["entries"] == 0


def test_key_covers_the_tf32_permissions():
    """A float32 GEMM may use TF32 when torch's matmul precision allows it, a convolution when
    cuDNN's flag does: each is in its key."""
    cpu = torch.device("cpu")
    mm, _ = build_problem("mm", [A, B], {})
    conv, _ = build_problem("conv", [torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)], {})
    precision, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    keys = {name: selection_key(p, cpu, [("aten", "0.1.0")]) for name, p in (("mm", mm), ("conv", conv))}
    try:
        torch.set_float32_matmul_precision("high" if precision == "highest" else "highest")
        assert selection_key(mm, cpu, [("aten", "0.1.0")]) != keys["mm"]
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = not cudnn
        assert selection_key(conv, cpu, [("aten", "0.1.0")]) != keys["conv"]
        assert selection_key(mm, cpu, [("aten", "0.1.0")]) == keys["mm"]
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn
