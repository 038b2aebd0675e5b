"""Selection: a replaceable benchmarker, deterministic ties, verify, budgets, parallel precompile,
failing choices timed as infinite, observers."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import attrs
import pytest
import torch

import tunesmith
from tunesmith.bench import BUDGET_EXHAUSTED
from tunesmith_hookspecs import ChoiceSpec, Timing, hookimpl

from conftest import rand, run_env

A, B = rand(24, 16), rand(16, 20)


@attrs.define
class FnChoice:
    spec: ChoiceSpec
    fn: object
    before: object = None

    def precompile(self):
        if self.before:
            self.before()

    def kernel(self):
        return self.fn


class Backend:
    """A run-time backend offering the given (template, fn[, precompile]) choices for every problem."""

    def __init__(self, name, *choices):
        self.name = name
        self.choices = choices

    @hookimpl
    def tunesmith_choices(self, problem, options):
        return [FnChoice(ChoiceSpec(self.name, t, {"i": i}), *rest) for i, (t, *rest) in enumerate(self.choices)]


class FixedTimes:
    """A benchmarker plugin: every choice takes the time its backend is given."""

    def __init__(self, ms_by_backend):
        self.ms_by_backend = ms_by_backend

    @hookimpl
    def tunesmith_benchmarker(self, options):
        return self

    def benchmark(self, problem, choices, inputs):
        return [Timing(c.spec, self.ms_by_backend[c.spec.backend]) for c in choices]


def mm(a, b):
    return a @ b


def test_a_plugin_replaces_the_benchmarker_and_ties_go_to_the_earlier_backend(register):
    register(Backend("twin", ("mm", mm)))
    register(FixedTimes({"aten": 1.0, "twin": 1.0}), "fixed_times")
    assert tunesmith.tune("mm", A, B).spec.backend == "aten"
    tunesmith.reset()
    assert tunesmith.tune("mm", A, B, options={"backends": ["twin", "aten"]}).spec.backend == "twin"


def test_the_fastest_choice_wins(register):
    register(Backend("quick", ("mm", mm)))
    register(FixedTimes({"aten": 1.0, "quick": 0.5}), "fixed_times")
    sel = tunesmith.tune("mm", A, B)
    assert sel.spec == ChoiceSpec("quick", "mm", {"i": 0})
    assert sel.timings == {ChoiceSpec("aten", "eager"): 1.0, sel.spec: 0.5}


def test_verify_rejects_a_wrong_winner_fresh_or_cached(register):
    register(Backend("wrong", ("mm_off_by_1pct", lambda a, b: (a @ b) * 1.01)))
    register(FixedTimes({"aten": 1.0, "wrong": 0.1}), "fixed_times")
    assert tunesmith.tune("mm", A, B).spec.backend == "wrong"  # without verify, speed is all

    # The wrong answer sits in memory and on disk; verify checks it, then tunes and checks again.
    with pytest.warns(tunesmith.TunesmithWarning, match=r"wrong:mm_off_by_1pct\[i=0\] is wrong"):
        sel = tunesmith.tune("mm", A, B, options={"verify": True})
    assert sel.spec.backend == "aten" and sel.report.source == "tuned"
    assert sel.timings[ChoiceSpec("wrong", "mm_off_by_1pct", {"i": 0})] == math.inf
    assert tunesmith.counters["verify_rejected"] >= 2

    # The verified answer replaced the wrong one in every layer.
    tunesmith.reset()
    sel = tunesmith.tune("mm", A, B, options={"verify": True})
    assert sel.spec.backend == "aten" and sel.report.source == "local"
    assert tunesmith.counters["verify_rejected"] == 0


def test_verify_with_only_wrong_choices_is_no_valid_choices(register):
    register(Backend("wrong", ("off", lambda a, b: (a @ b) * 1.01)))
    with pytest.warns(tunesmith.TunesmithWarning), pytest.raises(tunesmith.NoValidChoicesError, match="verify"):
        tunesmith.tune("mm", A, B, options={"verify": True, "backends": ["wrong"]})


def test_failing_choices_are_timed_as_infinite(register):
    def boom():
        raise RuntimeError("nvcc exploded")

    register(
        Backend(
            "flaky",
            ("precompile_fails", mm, boom),
            ("wrong_shape", lambda a, b: (a @ b)[:1]),
            ("wrong_dtype", lambda a, b: (a @ b).double()),
            ("runs", mm),
        )
    )
    sel = tunesmith.tune("mm", A, B, options={"backends": ["flaky"]})
    assert sel.spec.template == "runs"
    errors = {t.spec.template: t.error for t in sel.report.timings}
    assert "precompile: RuntimeError: nvcc exploded" in errors["precompile_fails"]
    assert "expected shape and dtype" in errors["wrong_shape"] and "expected shape and dtype" in errors["wrong_dtype"]
    assert tunesmith.counters["choice_failed"] == 3


def test_precompile_runs_in_parallel_worker_threads(register):
    names, lock = set(), threading.Lock()

    def record():
        with lock:
            names.add(threading.current_thread().name)
        time.sleep(0.05)

    register(Backend("compiled", *[(f"k{i}", mm, record) for i in range(8)]))
    tunesmith.tune("mm", A, B, options={"compile_threads": 4})
    assert 2 <= len(names) <= 4 and threading.main_thread().name not in names
    assert all(n.startswith("tunesmith-compile") for n in names)
    assert tunesmith.counters["precompile"] == 9  # 8 + aten's


def test_budget_cuts_the_search_and_the_best_so_far_wins(register):
    def slow(a, b):
        time.sleep(0.02)
        return a @ b

    register(Backend("slow", *[(f"s{i}", slow) for i in range(5)]))
    sel = tunesmith.tune("mm", A, B, options={"budget_s": 0.05})
    assert sel.report.budget_exhausted
    skipped = [t for t in sel.report.timings if t.error == BUDGET_EXHAUSTED]
    timed = [t for t in sel.report.timings if t.ok]
    # How many slow choices fit before the budget ends depends on the machine's load; the first one
    # timed (ATen's) never is skipped, and it wins over every choice left untimed.
    assert skipped and all(t.spec.backend == "slow" for t in skipped)
    assert timed and timed[0].spec.backend == "aten" and sel.spec.backend == "aten"
    tunesmith.reset()
    assert not tunesmith.tune("mm", rand(5, 5), rand(5, 5)).report.budget_exhausted


def test_selection_done_sees_every_selection(register):
    reports = []

    class Observer:
        @hookimpl
        def tunesmith_selection_done(self, report):
            reports.append(report)

    register(Observer(), "observer")
    tunesmith.tune("mm", A, B)
    tunesmith.tune("mm", A, B)
    assert [r.source for r in reports] == ["tuned", "memory"]
    assert reports[0].chosen == ChoiceSpec("aten", "eager") and reports[0].tuning_s > 0
    assert reports[0].device_name.startswith("cpu")


def test_the_kernel_of_a_selection_runs_on_new_tensors_of_the_same_layout():
    sel = tunesmith.tune("addmm", rand(20), A, B, epilogue=["relu"])
    bias, a, b = rand(20), rand(24, 16), rand(16, 20)
    torch.testing.assert_close(sel(bias, a, b), torch.relu(torch.addmm(bias, a, b)))


def test_tune_does_not_pull_in_heavy_modules():
    """A first tune() in a process must not import torch's symbolic-shape machinery (sympy):
    on a cold machine that alone took 2.4 s (earlier results in benchmarks/README.md)."""
    code = (
        "import sys, torch, tunesmith\n"
        "before = set(sys.modules)\n"
        "tunesmith.tune('addmm', torch.randn(4), torch.randn(3, 2), torch.randn(2, 4), epilogue=['relu'],"
        " options={'caches': []})\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'sympy'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_env(), check=True)
    assert out.stdout.strip() == "[]"


def test_verify_accepts_inputs_holding_nan_and_infinities():
    a, b = rand(16, 24), rand(24, 8)
    a[0, 0], a[1, 1], a[2, 2] = math.nan, math.inf, -math.inf
    sel = tunesmith.tune("mm", a, b, options={"verify": True})
    assert sel.spec.backend == "aten"


def test_relative_error_asks_for_the_references_nan_and_infinities_where_it_has_them():
    from tunesmith.ops import relative_error

    ref = torch.tensor([[1.0, math.nan], [math.inf, -math.inf]], dtype=torch.float64)
    out = ref.clone().float()
    out[0, 0] = 1.001
    assert relative_error(out, ref) == pytest.approx(0.001, rel=1e-3)
    for where, value in (((0, 1), 2.0), ((1, 0), -math.inf), ((1, 1), math.nan), ((0, 0), math.nan)):
        wrong = out.clone()
        wrong[where] = value
        assert relative_error(wrong, ref) == math.inf


def test_attention_winners_are_checked_without_verify(register):
    """A wrong attention kernel never wins, verify on or off: the next-fastest right one does."""
    q, k, v = (rand(*shape) for shape in ((2, 4, 8, 16), (2, 2, 8, 16), (2, 2, 8, 16)))

    def off(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True) * 1.05

    register(Backend("wrong", ("attention_off_by_5pct", off)))
    register(FixedTimes({"aten": 1.0, "wrong": 0.1}), "fixed_times")
    with pytest.warns(tunesmith.TunesmithWarning, match=r"wrong:attention_off_by_5pct\[i=0\] is wrong"):
        sel = tunesmith.tune("attention", q, k, v, options={"backends": ["wrong", "aten"]})
    assert sel.spec.backend == "aten"
    assert sel.timings[ChoiceSpec("wrong", "attention_off_by_5pct", {"i": 0})] == math.inf
    assert tunesmith.counters["verify_rejected"] == 1
