"""Background tuning (``tuning="background"``, the default for compiled models): the first step runs
ATen's kernels, the tuned ones are swapped in at a step boundary, ``tunesmith.wait()`` and
``tunesmith.status()`` say and control when, nothing is timed during a capture, a crashing tune
leaves ATen's kernel running, and a second process finds the graph tuned."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import tunesmith
from tunesmith import background, ops
from tunesmith.bench import pool
from tunesmith_hookspecs import ChoiceSpec

from conftest import rand, run_env


@pytest.fixture(autouse=True)
def background_tuning(
    monkeypatch: pytest.MonkeyPatch, isolated: Path, register: object, blocking_tuning: None
) -> Iterator[None]:
    """Background tuning (the default: conftest's blocking lifted), the ``eager`` graph compiler
    (no C++ build), a fresh Dynamo; after the test, nothing left in flight (before its run-time
    plugins go)."""
    monkeypatch.delenv("TUNESMITH_TUNING")
    monkeypatch.setenv("TUNESMITH_GRAPH_COMPILER", "eager")
    torch._dynamo.reset()
    yield
    assert background.wait(60)
    torch._dynamo.reset()
    pool.shutdown()


class Counted:
    """A run-time backend whose one choice is torch's ops, counting the calls of its kernel: a winner
    that is not ATen's op, whose use after the swap can be seen (``backends=["counted"]``)."""

    name = "counted"

    def __init__(self, precompile_s: float = 0.0) -> None:
        self.calls = 0
        self.threads: set[str] = set()  # the threads its kernel ran on
        self.precompile_s = precompile_s

    @tunesmith.hookimpl
    def tunesmith_choices(self, problem, options):
        return [CountedChoice(self, problem)]


class CountedChoice:
    def __init__(self, owner: Counted, problem) -> None:
        self.owner, self.problem, self.spec = owner, problem, ChoiceSpec("counted", "ops")

    def precompile(self) -> None:
        time.sleep(self.owner.precompile_s)

    def kernel(self):
        def run(*tensors):
            self.owner.calls += 1
            self.owner.threads.add(threading.current_thread().name)
            return ops.run(self.problem, tensors)

        return run


def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w1) @ w2


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.linalg.norm(a - b) <= 1e-5 * torch.linalg.norm(b))


def test_the_first_step_runs_aten_and_the_tuned_kernels_are_swapped_in_at_a_step_boundary(register):
    counted = Counted()
    register(counted)
    x, w1, w2 = rand(32, 16), rand(16, 24, dtype=torch.float32).requires_grad_(), rand(24, 8).requires_grad_()
    expected = mlp(x, w1, w2)
    expected.sum().backward()
    grads = [w1.grad.clone(), w2.grad.clone()]
    compiled = torch.compile(mlp, backend="tunesmith", options={"backends": ["counted"]})

    w1.grad = w2.grad = None
    out = compiled(x, w1, w2)
    out.sum().backward()
    assert counted.calls == 0  # the first step: ATen's ops, nothing tuned yet
    assert close(out, expected) and close(w1.grad, grads[0]) and close(w2.grad, grads[1])
    assert tunesmith.counters["background_queued"] == 5  # two GEMMs forward, three backward
    assert tunesmith.counters["autotune_tuned"] == 0

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # steps: the tuner times in the gaps at their boundaries, then the swap
        w1.grad = w2.grad = None
        out = compiled(x, w1, w2)
        out.sum().backward()
        if tunesmith.status().graphs_swapped:
            break
    assert tunesmith.status().graphs_swapped == 1 and tunesmith.counters["background_swapped"] == 1
    assert tunesmith.counters["background_gap"] >= 1

    before = counted.calls
    w1.grad = w2.grad = None
    out = compiled(x, w1, w2)
    out.sum().backward()
    assert counted.calls == before + 5  # every GEMM now runs the tuned kernel
    assert close(out, expected) and close(w1.grad, grads[0]) and close(w2.grad, grads[1])
    assert tunesmith.counters["autotune_tuned"] == 5 and tunesmith.counters["background_tuned"] == 5
    assert tunesmith.status().idle


def test_a_graph_traced_without_grad_is_compiled_again_without_grad_when_wait_swaps_it(register):
    """An inference model (weights that require grad, stepped under ``no_grad``) whose swap happens
    in ``tunesmith.wait()``, called outside ``no_grad``: its blocking compile is an inference graph
    (one output), not a training forward that saves activations for a backward that never comes."""
    outputs: list[int] = []

    class Outputs:
        @tunesmith.hookimpl
        def tunesmith_post_grad_passes(self, stage):
            return [lambda graph: outputs.append(len(graph.output_node().args[0]))] if stage == "post" else []

    register(Counted())
    register(Outputs(), "outputs")
    x, w1, w2 = rand(32, 16), rand(16, 24).requires_grad_(), rand(24, 8).requires_grad_()
    compiled = torch.compile(mlp, backend="tunesmith", options={"backends": ["counted"]})
    with torch.no_grad():
        compiled(x, w1, w2)
    assert outputs == [1]
    assert tunesmith.wait() is True and tunesmith.counters["background_swapped"] == 1
    assert outputs == [1, 1]
    with torch.no_grad():
        assert close(compiled(x, w1, w2), mlp(x, w1, w2))


def _python_calls(fn, *args) -> int:
    """The Python and C calls one call of ``fn`` makes (after a first call)."""
    fn(*args)
    count = 0

    def seen(frame, event, arg):
        nonlocal count
        count += event in ("call", "c_call")

    sys.setprofile(seen)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("compiler", ["eager", "inductor"])
def test_a_swapped_graph_costs_a_step_one_python_call_more_than_its_blocking_compile(register, monkeypatch, compiler):
    """After the swap a background graph runs the blocking compile through its own ``__call__``
    alone: a second ``torch._dynamo.disable`` wrapper around it cost each step nine calls more, a
    host-bound decode step's microseconds."""
    monkeypatch.setenv("TUNESMITH_GRAPH_COMPILER", compiler)
    register(Counted())
    x, w1, w2 = rand(8, 16), rand(16, 24), rand(24, 8)
    background_fn = torch.compile(lambda *a: mlp(*a), backend="tunesmith", options={"backends": ["counted"]})
    with torch.no_grad():
        background_fn(x, w1, w2)
        assert tunesmith.wait() is True and tunesmith.counters["background_swapped"] == 1
        blocking = {"backends": ["counted"], "tuning": "blocking"}
        blocking_fn = torch.compile(lambda *a: mlp(*a), backend="tunesmith", options=blocking)
        calls = _python_calls(background_fn, x, w1, w2), _python_calls(blocking_fn, x, w1, w2)
    assert calls[0] - calls[1] <= 1, calls


def test_no_worker_boots_beside_the_first_step_the_tuner_starts_it_and_a_known_graph_needs_none(monkeypatch):
    """A benchmark worker booting beside the first step slowed it (docs/decisions.md): in background
    mode the compile starts none; the tuner's first job does, and a graph already marked tuned
    never needs one."""
    monkeypatch.setenv("TUNESMITH_BENCHMARK", "subprocess")
    cpu = torch.device("cpu")
    x, w1, w2 = rand(32, 16), rand(16, 24), rand(24, 8)
    torch.compile(mlp, backend="tunesmith", options={"backends": ["aten"]})(x, w1, w2)
    assert tunesmith.counters["background_queued"] == 2
    assert pool.slot(cpu).worker is None
    assert tunesmith.wait() is True and tunesmith.counters["background_tuned"] == 2
    assert pool.slot(cpu).worker is not None  # the tuner's jobs started it
    pool.shutdown()
    torch._dynamo.reset()
    again = torch.compile(mlp, backend="tunesmith", options={"backends": ["aten"]})
    assert close(again(x, w1, w2), mlp(x, w1, w2))
    assert tunesmith.counters["background_graph_known"] == 1
    assert pool.slot(cpu).worker is None


def test_cpu_problems_are_tuned_on_the_thread_that_opens_the_gap(register):
    """CPU ops on the tuner thread would give the process a second OpenMP team, after which libgomp
    stops spinning between parallel regions: the model's small CPU kernels ran 2x to 40x slower
    for the rest of the run. So a CPU Problem is timed at a step boundary, on the model's thread."""
    counted = Counted()
    register(counted)
    x, w1, w2 = rand(32, 16), rand(16, 24), rand(24, 8)
    compiled = torch.compile(mlp, backend="tunesmith", options={"backends": ["counted"]})
    for _ in range(3):  # the tuner starts at the second step, whose boundary tunes
        compiled(x, w1, w2)
    assert tunesmith.counters["background_tuned"] == 2
    assert tunesmith.wait() is True
    assert counted.calls > 0 and counted.threads == {threading.main_thread().name}, counted.threads


def test_blocking_tunes_every_kernel_before_the_first_step(register):
    counted = Counted()
    register(counted)
    x, w1, w2 = rand(32, 16), rand(16, 24), rand(24, 8)
    compiled = torch.compile(mlp, backend="tunesmith", options={"backends": ["counted"], "tuning": "blocking"})
    assert close(compiled(x, w1, w2), mlp(x, w1, w2))
    assert counted.calls >= 2  # timed, and run by the first step
    assert tunesmith.counters["autotune_tuned"] == 2 and tunesmith.counters["background_queued"] == 0
    assert tunesmith.status() == tunesmith.Status(0, 0, 0, 0, 0, 0)


def test_wait_gives_up_at_its_timeout_then_returns_once_all_is_tuned_and_swapped(register):
    register(Counted(precompile_s=1.5))
    x, w1, w2 = rand(8, 16), rand(16, 24), rand(24, 8)
    compiled = torch.compile(mlp, backend="tunesmith", options={"backends": ["counted"]})
    compiled(x, w1, w2)
    state = tunesmith.status()
    assert state.pending + state.running == 2 and state.graphs_waiting == 1
    start = time.monotonic()
    assert tunesmith.wait(timeout=0.2) is False  # CPU jobs are tuned by the waiting thread: the one begun ends
    assert time.monotonic() - start < 2.5
    assert tunesmith.status().done == 1
    assert tunesmith.wait() is True
    assert tunesmith.status() == tunesmith.Status(0, 0, 2, 0, 0, 1)
    assert close(compiled(x, w1, w2), mlp(x, w1, w2))


def test_nothing_is_timed_while_a_cuda_graph_is_captured(register, monkeypatch):
    """At a step boundary during a capture the tuner gets no gap: it waits, untouched, for one."""
    register(Counted())
    x, w1, w2 = rand(8, 16), rand(16, 24), rand(24, 8)
    compiled = torch.compile(mlp, backend="tunesmith", options={"backends": ["counted"]})
    compiled(x, w1, w2)
    monkeypatch.setattr(background, "capturing", lambda: True)
    for _ in range(5):
        compiled(x, w1, w2)
        time.sleep(0.05)
    assert background.tuner.wants_gap()
    assert tunesmith.counters["background_gap"] == 0 and tunesmith.counters["autotune_tuned"] == 0
    monkeypatch.setattr(background, "capturing", lambda: False)
    compiled(x, w1, w2)
    assert tunesmith.counters["background_gap"] >= 1


def test_a_background_tune_that_crashes_its_worker_leaves_aten_running_with_a_warning(install):
    install("bad")
    a, b = rand(48, 32), rand(32, 40)
    passes = ["fixture_goodpass", "fixture_badpass", "fixture_corrupt", "fixture_droplarge", "fixture_badlock"]
    options = {"backends": ["aten", "fixture_segv"], "benchmark": "subprocess", "disabled_plugins": passes}
    compiled = torch.compile(torch.mm, backend="tunesmith", options=options)
    with pytest.warns(tunesmith.TunesmithWarning, match="crashed the benchmark worker"):
        assert close(compiled(a, b), a @ b)
        assert tunesmith.wait(120)
    assert tunesmith.counters["benchmark_crash"] >= 1 and tunesmith.counters["background_tuned"] == 1
    assert close(compiled(a, b), a @ b)


def test_a_failed_background_tune_keeps_the_placeholder_with_a_warning(register):
    class Failing:
        name = "failing"

        @tunesmith.hookimpl
        def tunesmith_choices(self, problem, options):
            return []

    register(Failing())
    a, b = rand(16, 16), rand(16, 16)
    compiled = torch.compile(torch.mm, backend="tunesmith", options={"backends": ["failing"]})
    with pytest.warns(tunesmith.TunesmithWarning, match="background tuning of mm .* failed"):
        assert close(compiled(a, b), a @ b)
        assert tunesmith.wait(60)
    assert tunesmith.status().failed == 1 and tunesmith.counters["background_failed"] == 1
    assert close(compiled(a, b), a @ b)


PROGRAM = """
import json, sys, torch, tunesmith
torch.manual_seed(0)
x, w1, w2 = torch.randn(32, 16), torch.randn(16, 24), torch.randn(24, 8)
compiled = torch.compile(lambda x, w1, w2: (x @ w1) @ w2, backend="tunesmith")
compiled(x, w1, w2)
compiled(x, w1, w2)
assert tunesmith.wait(120)
compiled(x, w1, w2)
json.dump(dict(tunesmith.counters), open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("compiler", ["eager", "inductor"])
def test_a_second_process_finds_the_graph_tuned_and_tunes_nothing(tmp_path: Path, compiler: str):
    """With Inductor, the second compile in the first process is the one Inductor's caches (FX
    graph and AOTAutograd) serve to the second process whole (two mms: no C++ to build)."""
    env = run_env(TUNESMITH_GRAPH_COMPILER=compiler, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    counts = []
    for i in range(2):
        out = tmp_path / f"counters{i}.json"
        subprocess.run([sys.executable, "-c", PROGRAM, str(out)], env=env, check=True, timeout=240)
        counts.append(json.loads(out.read_text()))
    cold, warm = counts
    assert cold["background_queued"] == 2 and cold["background_swapped"] == 1 and cold["autotune_tuned"] == 2
    assert warm.get("background_graph_known") == 1
    assert warm.get("background_queued", 0) == 0 and warm.get("autotune_tuned", 0) == 0
    if compiler == "inductor":
        assert cold.get("compiled_graph_inductor_hit", 0) == 0 and warm.get("compiled_graph_inductor_hit") == 1


def test_status_is_readable_from_another_thread_while_tuning(register):
    register(Counted(precompile_s=0.5))
    compiled = torch.compile(mlp, backend="tunesmith", options={"backends": ["counted"]})
    compiled(rand(8, 16), rand(16, 24), rand(24, 8))
    seen: list[tunesmith.Status] = []
    reader = threading.Thread(target=lambda: seen.append(tunesmith.status()))
    reader.start()
    reader.join(5)
    assert seen and seen[0].pending + seen[0].running + seen[0].done == 2
