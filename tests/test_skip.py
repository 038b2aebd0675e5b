"""Skipping a tune the cost model is sure ATen wins: ATen's kernel, nothing benchmarked, counted,
kept in memory only; off with ``skip_sure_aten`` or ``prune`` none; never without a profile or
where the models are unsure."""

from __future__ import annotations

import json
import subprocess
import sys

import attrs
import pytest
import torch

import tunesmith
from tunesmith.cost.skip import SURE_RATIO, sure_aten
from tunesmith.ops import relative_error, tolerance
from tunesmith_hookspecs import ChoiceSpec, hookimpl

from conftest import REPO, run_env
from test_prune import SMALL_A, SMALL_B, US, A, B, CpuProfile, ModelledBackend

ATEN = ChoiceSpec("aten", "eager")


@attrs.define
class Counted:
    """A modelled choice that counts its compiles and calls (a skipped tune makes neither)."""

    spec: ChoiceSpec
    estimate: float
    log: list[str]

    def precompile(self) -> None:
        self.log.append("precompile")

    def kernel(self):
        def call(a, b):
            self.log.append("call")
            return a @ b

        return call


class CountedBackend(ModelledBackend):
    """``ModelledBackend``'s estimates, on choices that record what was done with them."""

    name = "counted"

    def __init__(self, *estimates: float) -> None:
        super().__init__(*estimates)
        self.log: list[str] = []

    @hookimpl
    def tunesmith_choices(self, problem, options):
        return [Counted(ChoiceSpec(self.name, "mm", {"i": i}), e * US, self.log) for i, e in enumerate(self.estimates)]

    @hookimpl
    def tunesmith_estimate_runtime(self, node, device):
        return node.estimate if isinstance(node, Counted) else None


def aten_us(a: torch.Tensor, b: torch.Tensor) -> float:
    """ATen's estimate of ``a @ b`` on the H100-SXM preset (what ``CpuProfile`` gives the CPU), in µs."""
    from tunesmith.cost.profiles import PRESETS
    from tunesmith.problem import build_problem
    from tunesmith_aten.cost import estimate_ms

    return estimate_ms(build_problem("mm", [a, b], {})[0], "eager", PRESETS["H100-SXM"]) / US


def sure(register, factor: float = 1.0) -> CountedBackend:
    """A backend whose best choice is estimated ``factor`` times the skip's threshold, on the CPU's profile."""
    backend = CountedBackend(*(aten_us(A, B) * SURE_RATIO * factor * f for f in (1.5, 1.0, 1.2)))
    register(backend)
    register(CpuProfile(), "cpu_profile")
    return backend


def test_the_rule_fires_at_the_ratio_and_picks_atens_lowest_estimate():
    backends = {"a": "aten", "b": "aten", "t": "triton", "u": "triton"}
    assert sure_aten({"a": 1.0, "b": 1.0, "t": SURE_RATIO, "u": 5.0}, backends) == "a"  # a tie: the earlier
    assert sure_aten({"a": 2.0, "b": 1.0, "t": SURE_RATIO, "u": 5.0}, backends) == "b"
    assert sure_aten({"a": 1.0, "b": 1.0, "t": SURE_RATIO * 0.999, "u": 5.0}, backends) is None
    assert sure_aten({"a": 1.0, "b": 1.0, "t": 9.0, "u": 5.0}, backends, ["K of 16 is 128 or less"]) is None
    assert sure_aten({"a": 1.0, "b": 1.0, "t": 9.0, "u": None}, backends) is None  # a backend without a model
    assert sure_aten({"a": None, "b": 1.0, "t": 9.0, "u": 5.0}, backends) is None
    assert sure_aten({"a": 1.0, "b": 2.0}, backends) is None  # nothing but ATen: nothing to skip


def test_a_sure_problem_takes_atens_kernel_unbenchmarked_and_is_counted(register):
    backend = sure(register)
    sel = tunesmith.tune("mm", A, B)
    assert sel.spec == ATEN and sel.kernel is torch.mm  # ATen's own function
    assert sel.report.source == "skipped" and not sel.cached and not sel.report.cached
    assert sel.timings == {} and backend.log == []  # nothing compiled, called or timed
    assert tunesmith.counters["tune_skipped_aten"] == 1
    assert tunesmith.counters["autotune_tuned"] == 0
    assert relative_error(sel(A, B), A.double() @ B.double()) <= tolerance(sel.problem)  # against float64
    again = tunesmith.tune("mm", A, B)  # the process's memory answers: no second skip
    assert again.spec == ATEN and again.report.source == "memory"
    assert tunesmith.counters["tune_skipped_aten"] == 1


def test_below_the_ratio_the_problem_is_tuned(register):
    backend = sure(register, factor=0.98)
    sel = tunesmith.tune("mm", A, B)
    assert sel.report.source == "tuned" and "precompile" in backend.log
    assert tunesmith.counters["tune_skipped_aten"] == 0


@pytest.mark.parametrize("off", [{"skip_sure_aten": False}, {"prune": None}])
def test_the_off_switch_tunes(register, off):
    backend = sure(register)
    sel = tunesmith.tune("mm", A, B, options=off)
    assert sel.report.source == "tuned" and len(sel.timings) == 4 and "call" in backend.log
    assert tunesmith.counters["tune_skipped_aten"] == 0


def test_the_environment_turns_it_off(register, monkeypatch):
    sure(register)
    monkeypatch.setenv("TUNESMITH_SKIP_SURE_ATEN", "off")
    assert tunesmith.tune("mm", A, B).report.source == "tuned"
    assert tunesmith.counters["tune_skipped_aten"] == 0


def test_a_skip_is_cached_nowhere_so_turning_it_off_tunes(register):
    """Skipped, then off in the same process (the memory's skip is passed over) and in a fresh one
    (no cache layer holds it): both tune; the tuned entry then answers, skipping on or off."""
    sure(register)
    assert tunesmith.tune("mm", A, B).report.source == "skipped"
    assert tunesmith.tune("mm", A, B, options={"skip_sure_aten": False}).report.source == "tuned"
    tunesmith.reset()
    assert tunesmith.tune("mm", A, B).report.source == "local"  # the tune's entry beats a skip
    tunesmith.reset()
    assert tunesmith.tune("mm", A, B, options={"caches": []}).report.source == "skipped"
    tunesmith.reset()
    assert tunesmith.tune("mm", A, B, options={"caches": [], "skip_sure_aten": False}).report.source == "tuned"


def test_a_repeated_skip_costs_no_tune(register):
    """Each fresh process (memory cleared) skips again: the rule, not a cache entry, answers."""
    backend = sure(register)
    for _ in range(3):
        tunesmith.reset()
        assert tunesmith.tune("mm", A, B).report.source == "skipped"
        assert tunesmith.counters["tune_skipped_aten"] == 1  # reset clears the counters too
    assert backend.log == []


def test_no_profile_or_an_unsure_problem_is_tuned(register):
    backend = CountedBackend(*(aten_us(A, B) * SURE_RATIO * f for f in (2.0, 3.0)))
    register(backend)
    assert tunesmith.tune("mm", A, B).report.source == "tuned"  # the CPU has no profile
    register(CpuProfile(), "cpu_profile")
    huge = CountedBackend(*(aten_us(SMALL_A, SMALL_B) * SURE_RATIO * f for f in (20.0, 30.0)))
    huge.name = "huge"
    register(huge)
    sel = tunesmith.tune("mm", SMALL_A, SMALL_B)  # K of 16: the models are unsure
    assert sel.report.source == "tuned"
    assert tunesmith.counters["tune_skipped_aten"] == 0


def test_verify_checks_the_skipped_kernel(register):
    sure(register)
    sel = tunesmith.tune("mm", A, B, options={"verify": True})
    assert sel.report.source == "skipped" and tunesmith.counters["verify_rejected"] == 0


def test_the_committed_replay_is_the_scripts_output_and_the_threshold_its_fit(tmp_path):
    """``cost_model.py skip`` over the committed measured runs: it fits ``SURE_RATIO`` on train (exit 0:
    the code's constant is the fit), no skipped train case lost a win, and its summary is the one
    committed in benchmarks/results/cost_model_skip_h200.json."""
    results = REPO / "benchmarks" / "results"
    out = tmp_path / "skip.json"
    inputs = [str(results / name) for name in ("cost_model_h100.json", "corpus_h200.json")]
    command = [sys.executable, str(REPO / "benchmarks" / "cost_model.py"), "skip", *inputs, "--json", str(out)]
    proc = subprocess.run(command, env=run_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    replay = json.loads(out.read_text())
    assert replay["fit"]["fitted"] == SURE_RATIO and replay["summary"]["train"]["wins_lost"] == 0
    committed = json.loads((results / "cost_model_skip_h200.json").read_text())
    assert replay["summary"] == committed["summary"] and replay["fit"] == committed["fit"]
