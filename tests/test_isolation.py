"""The subprocess benchmarker: crashes and hangs survived, parallel precompile in the worker,
verify against a fast wrong kernel, worker reuse, and run-time plugins timed in-process.

Each test installs real fixture plugins (tests/fixture_plugins/bad and bench) and benchmarks on
the CPU with ``benchmark="subprocess"``, so real worker processes start, crash and restart.
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import tunesmith
from tunesmith.bench import pool
from tunesmith_hookspecs import ChoiceSpec, hookimpl

from conftest import rand

SUBPROCESS = {"benchmark": "subprocess"}


@pytest.fixture(autouse=True, scope="module")
def stop_workers() -> Iterator[None]:
    yield
    pool.shutdown()


def by_backend(sel: tunesmith.Selection, backend: str) -> list[tuple[ChoiceSpec, float]]:
    return [(spec, ms) for spec, ms in sel.timings.items() if spec.backend == backend]


def test_a_segfaulting_kernel_gets_an_infinite_time_and_aten_wins(install):
    install("bad")
    options = {**SUBPROCESS, "backends": ["aten", "fixture_segv"]}
    sel = tunesmith.tune("mm", rand(48, 32), rand(32, 40), options=options)
    assert sel.spec.backend == "aten"
    [(spec, ms)] = by_backend(sel, "fixture_segv")
    assert ms == math.inf
    error = next(t.error for t in sel.report.timings if t.spec == spec)
    assert "SIGSEGV" in error and error.startswith("run: ")
    assert tunesmith.counters["benchmark_crash"] == 1
    # This process survived, and the next tune() works with a fresh worker.
    again = tunesmith.tune("mm", rand(20, 30), rand(30, 10), options=options)
    assert again.spec.backend == "aten" and tunesmith.counters["benchmark_crash"] == 2


def test_a_kernel_past_the_timeout_is_killed_and_timed_as_infinite(install):
    install("bench")
    options = {**SUBPROCESS, "backends": ["aten", "fixture_sleep"], "bench_timeout_s": 2}
    start = time.monotonic()
    sel = tunesmith.tune("mm", rand(16, 16), rand(16, 16), options=options)
    assert time.monotonic() - start < 30  # the kernel sleeps for 60 s
    assert sel.spec.backend == "aten"
    [(spec, ms)] = by_backend(sel, "fixture_sleep")
    assert ms == math.inf
    assert "timed out" in next(t.error for t in sel.report.timings if t.spec == spec)
    assert tunesmith.counters["benchmark_timeout"] == 1 and tunesmith.counters["benchmark_crash"] == 1


@pytest.mark.parametrize("compile_in", ["threads", "processes"])
def test_a_crash_among_parallel_precompiles_is_blamed_on_its_choice_only(install, compile_in):
    install("bench")
    options = {
        **SUBPROCESS,
        "backends": ["aten", "fixture_compilecrash"],
        "compile_threads": 3,
        "compile_in": compile_in,
    }
    sel = tunesmith.tune("mm", rand(16, 16), rand(16, 16), options=options)
    times = {spec.template: ms for spec, ms in by_backend(sel, "fixture_compilecrash")}
    assert times["crash"] == math.inf
    assert math.isfinite(times["slow1"]) and math.isfinite(times["slow2"])
    error = next(t.error for t in sel.report.timings if t.spec.template == "crash")
    assert error.startswith("precompile: ") and "SIGSEGV" in error
    assert tunesmith.counters["benchmark_crash"] >= 1


@pytest.mark.parametrize("mode", ["subprocess", "inprocess"])
def test_compile_threads_run_precompiles_on_that_many_threads_off_the_main_thread(install, tmp_path, monkeypatch, mode):
    log = tmp_path / "compile.log"
    monkeypatch.setenv("FIXTURE_COMPILE_LOG", str(log))
    install("bench")
    options = {"benchmark": mode, "backends": ["fixture_compile"], "compile_threads": 4, "compile_in": "threads"}
    tunesmith.tune("mm", rand(16, 16), rand(16, 16), options=options)
    rows = [line.split() for line in log.read_text().splitlines()]
    here = [r for r in rows if int(r[0]) == os.getpid()]
    away = [r for r in rows if int(r[0]) != os.getpid()]
    compiled = away if mode == "subprocess" else here
    assert sorted(r[3] for r in compiled) == [f"config{i}" for i in range(8)]
    assert len({r[1] for r in compiled}) == 4
    assert all(r[2] != "MainThread" for r in compiled)
    # In subprocess mode the winner is compiled once more here, to run it; in-process, only once.
    assert len(here) == (1 if mode == "subprocess" else 8)
    assert tunesmith.counters["precompile"] == 8


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"  # a zombie is dead
    except (FileNotFoundError, IndexError):
        return True


def test_compile_processes_precompile_first_then_the_worker_loads_and_they_die_with_it(
    install, tmp_path, monkeypatch, caplog
):
    log = tmp_path / "compile.log"
    monkeypatch.setenv("FIXTURE_COMPILE_LOG", str(log))
    install("bench")
    caplog.set_level(logging.DEBUG, logger="tunesmith.bench.isolated")
    options = {**SUBPROCESS, "backends": ["fixture_compile"], "compile_threads": 3, "compile_in": "processes"}
    tunesmith.tune("mm", rand(16, 16), rand(16, 16), options=options)
    # each finished job is logged with where its time went: a fixture compile sleeps 0.3 s, in a
    # compile process and again in the worker
    jobs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precompile of fixture_compile")]
    assert len(jobs) == 8
    for message in jobs:
        assert all(float(re.search(rf"{part} ([0-9.]+)", message)[1]) >= 0.3 for part in ("away_s", "here_s"))
    worker = pool.slot(rand(1).device).worker
    assert worker is not None
    rows = [line.split() for line in log.read_text().splitlines()]
    helpers = [r for r in rows if int(r[0]) not in (os.getpid(), worker.proc.pid)]
    loads = [r for r in rows if int(r[0]) == worker.proc.pid]
    configs = [f"config{i}" for i in range(8)]
    # every choice compiled first in a compile process (their main threads), then in the worker
    assert sorted(r[3] for r in helpers) == configs and all(r[2] == "MainThread" for r in helpers)
    assert 1 <= len({r[0] for r in helpers}) <= 3
    assert sorted(r[3] for r in loads) == configs and all(r[2] != "MainThread" for r in loads)
    for config in configs:
        assert rows.index(next(r for r in helpers if r[3] == config)) < rows.index(
            next(r for r in loads if r[3] == config)
        )
    # the compile processes outlive a Problem, and die with their worker even when it is killed
    log.write_text("")
    tunesmith.tune("mm", rand(17, 16), rand(16, 16), options=options)
    again = {r[0] for r in (line.split() for line in log.read_text().splitlines())} - {str(worker.proc.pid)}
    assert again - {str(os.getpid())} <= {r[0] for r in helpers}
    os.kill(worker.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while not all(_gone(int(pid)) for pid in {r[0] for r in helpers}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(int(pid)) for pid in {r[0] for r in helpers})


def test_verify_rejects_a_wrong_kernel_that_is_fastest(install):
    install("bench")
    options = {**SUBPROCESS, "backends": ["aten", "fixture_fastwrong"]}
    a, b = rand(256, 256), rand(256, 256)
    unverified = tunesmith.tune("mm", a, b, options=options)
    assert unverified.spec.backend == "fixture_fastwrong"  # fastest, so it wins unchecked
    tunesmith.reset()
    with pytest.warns(tunesmith.TunesmithWarning, match="relative error"):
        sel = tunesmith.tune("mm", a, b, options={**options, "verify": True, "caches": []})
    assert sel.spec.backend == "aten"
    assert by_backend(sel, "fixture_fastwrong")[0][1] == math.inf
    assert tunesmith.counters["verify_rejected"] == 1
    assert (sel(a, b) - a @ b).abs().max() < 1e-3


def test_the_worker_is_reused_across_problems(install):
    install("bench")
    options = {**SUBPROCESS, "backends": ["aten"]}
    tunesmith.tune("mm", rand(8, 8), rand(8, 8), options=options)
    worker = pool.slot(rand(1).device).worker
    assert worker is not None and worker.alive
    tunesmith.tune("mm", rand(9, 8), rand(8, 8), options=options)
    assert pool.slot(rand(1).device).worker is worker
    assert worker.proc.pid != os.getpid()


def test_atens_choices_are_readied_here_while_the_worker_compiles_and_before_it_times(install, monkeypatch):
    import tunesmith_aten
    from tunesmith.bench import isolated

    events: list[tuple[str, str]] = []
    precompile, time_one = tunesmith_aten.AtenChoice.precompile, isolated.IsolatedRun.time

    def readied(self):
        held = pool.slot(torch.device("cpu")).lock.locked()  # another tune's timing cannot be running
        events.append(("aten precompile", threading.current_thread().name if held else "lock not held"))
        return precompile(self)

    def timed(self, i, best_ms):
        events.append(("worker times", threading.current_thread().name))
        return time_one(self, i, best_ms)

    monkeypatch.setattr(tunesmith_aten.AtenChoice, "precompile", readied)
    monkeypatch.setattr(isolated.IsolatedRun, "time", timed)
    install("bench")
    sel = tunesmith.tune("mm", rand(16, 16), rand(16, 16), options={**SUBPROCESS, "backends": ["aten"]})
    assert sel.spec.backend == "aten"
    # Once, off the main thread, before the first timing; loading the winner does not repeat it.
    assert events[0] == ("aten precompile", "tunesmith-ready-here")
    assert [e for e, _ in events].count("aten precompile") == 1
    assert events[1][0] == "worker times"


def test_choices_of_a_run_time_plugin_are_timed_in_this_process(register):
    ran: list[tuple[int, int]] = []

    class Local:
        spec = ChoiceSpec("local_mm", "mm")

        def precompile(self) -> None:
            pass

        def kernel(self):
            def run(a, b):
                ran.append((os.getpid(), threading.get_ident()))
                return a @ b

            return run

    class Plugin:
        @hookimpl
        def tunesmith_choices(self, problem, options):
            return [Local()] if problem.op == "mm" else []

    register(Plugin(), "local_mm")
    sel = tunesmith.tune("mm", rand(8, 8), rand(8, 8), options={**SUBPROCESS, "backends": ["aten", "local_mm"]})
    assert math.isfinite(sel.timings[Local.spec])
    assert ran and {pid for pid, _ in ran} == {os.getpid()}


def test_a_budget_skips_precompiles_not_yet_started(install, tmp_path, monkeypatch):
    monkeypatch.setenv("FIXTURE_COMPILE_LOG", str(tmp_path / "compile.log"))
    install("bench")
    options = {**SUBPROCESS, "backends": ["aten", "fixture_compile"], "compile_threads": 1, "budget_s": 0.5}
    sel = tunesmith.tune("mm", rand(8, 8), rand(8, 8), options=options)
    assert sel.report.budget_exhausted
    assert sel.spec.backend == "aten"
    compiled = Path(tmp_path / "compile.log").read_text().splitlines()
    assert 1 <= len(compiled) < 8


def test_the_worker_uses_the_callers_float32_matmul_precision(install):
    install("bench")
    options = {**SUBPROCESS, "backends": ["fixture_precision"]}
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        sel = tunesmith.tune("mm", rand(24, 16), rand(16, 8), options=options)
    finally:
        torch.set_float32_matmul_precision(before)
    # the kernel raises in a worker left at the default "highest"
    assert [math.isfinite(ms) for ms in sel.timings.values()] == [True]


def test_the_worker_times_a_mask_with_the_callers_values(install):
    """A kernel may skip what a mask masks, so its time depends on the mask: the worker gets the
    caller's boolean inputs (tunesmith.bench.masks), here a key-padding view expanded over the
    queries, whose kernel raises on any other mask."""
    install("bench")
    q, k, v = rand(2, 2, 4, 8), rand(2, 2, 16, 8), rand(2, 2, 16, 8)
    mask = (torch.arange(16) < 8)[None, None, None, :].expand(2, 1, 4, 16)
    sel = tunesmith.tune("attention", q, k, v, attn_mask=mask, options={**SUBPROCESS, "backends": ["fixture_mask"]})
    assert [math.isfinite(ms) for ms in sel.timings.values()] == [True], sel.timings


def test_a_graph_that_may_hold_a_gemm_starts_the_worker_while_it_compiles_and_tuning_uses_it():
    from tunesmith.compile.backend import _prepare_benchmarker
    from tunesmith.settings import current_options

    pool.shutdown()
    settings = current_options(SUBPROCESS)
    x = rand(8, 16)
    slot = pool.slot(x.device)
    _prepare_benchmarker(torch.fx.symbolic_trace(lambda t: t.relu() + 1), [x], settings)()
    assert slot.worker is None  # nothing to tune there: no process
    compiled = _prepare_benchmarker(torch.fx.symbolic_trace(torch.nn.Linear(16, 4)), [x], settings)
    started = slot.worker
    assert started is not None and started.alive and not started.used
    tunesmith.tune("mm", rand(8, 16), rand(16, 4), options=SUBPROCESS)
    compiled()
    assert slot.worker is started and started.alive and started.used
    # one that no Problem used (every choice cached) stops once the graph is compiled, at once
    pool.shutdown()
    compiled = _prepare_benchmarker(torch.fx.symbolic_trace(torch.nn.Linear(16, 4)), [x], settings)
    unused = slot.worker
    began = time.monotonic()
    compiled()
    assert time.monotonic() - began < 2 and not unused.alive and slot.worker is None


def test_a_stop_while_a_worker_starts_kills_that_worker_too(monkeypatch):
    """Ctrl-C while a tuning thread starts the worker: ``stop()`` waits until the new worker has
    its slot, and kills it with the rest; none outlives the command (which exits at once after)."""
    monkeypatch.setattr(pool, "_stopped", threading.Event())  # this test's stop() stays its own
    real, spawned = pool.subprocess.Popen, []

    def slow_to_register(*args, **kwargs):
        proc = real(*args, **kwargs)
        spawned.append(proc)
        time.sleep(0.5)  # the signal comes between the process's start and its slot
        return proc

    monkeypatch.setattr(pool.subprocess, "Popen", slow_to_register)
    starter = threading.Thread(target=pool.slot(torch.device("cpu")).worker_process, args=(pool.isolatable_plugins(),))
    starter.start()
    deadline = time.monotonic() + 30
    while not spawned and time.monotonic() < deadline:
        time.sleep(0.005)
    assert spawned, "no worker was started"
    pool.stop()
    assert spawned[0].poll() is not None, "a worker started as the workers were stopped is still running"
    starter.join()
