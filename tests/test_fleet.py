"""Fleet tuning's parts, in one process: file locks, the ``torch.distributed`` store layer, and
the split that tunes unheld problems first (the many-process runs are in test_fleet_runs.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import tunesmith
from tunesmith import plugins
from tunesmith.cache.dist_store import DistributedStoreLayer
from tunesmith.cache.filelocks import FileLocks
from tunesmith.cache.flight import HeldElsewhere
from tunesmith.fleet import deferring, defers, run_split, select_each
from tunesmith_hookspecs import ChoiceSpec, Timing

from conftest import Mine, MineChoice, rand


def test_a_file_lock_has_one_holder_until_released(tmp_path):
    mine, other = FileLocks(tmp_path), FileLocks(tmp_path)
    token = mine.acquire("k" * 64, 30.0)
    assert token is not None and mine.refresh("k" * 64, token, 30.0)
    assert other.acquire("k" * 64, 30.0) is None
    assert other.acquire("j" * 64, 30.0) is not None  # another key is another lock
    mine.release("k" * 64, token)
    assert not mine.refresh("k" * 64, token, 30.0)
    assert other.acquire("k" * 64, 30.0) is not None


def test_clearing_the_cache_removes_the_lock_files_nobody_holds(tmp_path):
    from tunesmith.cache.local import LocalDiskCache

    held, done = FileLocks(tmp_path), FileLocks(tmp_path)
    token = held.acquire("k" * 64, 30.0)
    done.release("j" * 64, done.acquire("j" * 64, 30.0))
    assert LocalDiskCache(tmp_path).clear() == 0
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["k" * 64 + ".lock"]
    assert done.acquire("k" * 64, 30.0) is None  # the holder's lock is still the lock
    held.release("k" * 64, token)
    assert FileLocks(tmp_path).clear() == 1 and not list((tmp_path / "locks").iterdir())


def test_a_lock_file_removed_between_open_and_lock_is_not_taken_for_the_lock(tmp_path, monkeypatch):
    """Another process may clear the lock file this one just opened: locking it would lock nothing
    (a third process locks the new file), so this one locks the file the path names."""
    import tunesmith.cache.filelocks as filelocks

    real, calls = filelocks.fcntl.flock, []

    def flock_after_a_clear(fd, how):
        calls.append(fd)
        if len(calls) == 1:
            (tmp_path / "locks" / ("k" * 64 + ".lock")).unlink()
        return real(fd, how)

    monkeypatch.setattr(filelocks.fcntl, "flock", flock_after_a_clear)
    mine = FileLocks(tmp_path)
    assert mine.acquire("k" * 64, 30.0) is not None and len(calls) == 2
    monkeypatch.setattr(filelocks.fcntl, "flock", real)
    assert FileLocks(tmp_path).acquire("k" * 64, 30.0) is None


def test_a_file_lock_dies_with_its_holder(tmp_path):
    """The OS frees the lock of a killed process: no expiry to wait for."""
    code = (
        "import sys, time; from tunesmith.cache.filelocks import FileLocks; "
        f"assert FileLocks({str(tmp_path)!r}).acquire('k' * 64, 30.0); print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert FileLocks(tmp_path).acquire("k" * 64, 30.0) is None
    finally:
        proc.kill()
        proc.wait()
    assert FileLocks(tmp_path).acquire("k" * 64, 30.0) is not None


def test_the_store_layer_keeps_entries_and_one_lock_holder_with_expiry():
    store = dist.HashStore()
    a, b = DistributedStoreLayer(store), DistributedStoreLayer(store)
    assert a.get("e" * 64) is None
    a.put("e" * 64, b'{"x": 1}')
    assert b.get("e" * 64) == b'{"x": 1}'
    token = a.acquire("k" * 64, 30.0)
    assert token is not None and b.acquire("k" * 64, 30.0) is None
    assert a.refresh("k" * 64, token, 30.0)
    a.release("k" * 64, token)
    assert not a.refresh("k" * 64, token, 30.0)
    short = b.acquire("k" * 64, 0.05)
    assert short is not None
    time.sleep(0.1)
    taken = a.acquire("k" * 64, 30.0)  # the holder stopped refreshing: its lock expired
    assert taken is not None
    assert not b.refresh("k" * 64, short, 30.0)
    b.release("k" * 64, short)  # no longer its lock: left alone
    assert b.acquire("k" * 64, 30.0) is None


def test_the_split_runs_unheld_items_first_then_comes_back_for_the_held():
    """Items held elsewhere are put off; each comes back in a later round, in order."""
    held_for = {1: 2, 3: 1}  # item -> how many deferring tries find it held
    calls: list[tuple[int, bool]] = []

    def select_one(i: int) -> int:
        calls.append((i, defers()))
        if defers() and held_for.get(i, 0) > 0:
            held_for[i] -= 1
            raise HeldElsewhere(str(i))
        return i * 10

    assert select_each(list(range(5)), select_one, wait_s=5.0) == [0, 10, 20, 30, 40]
    assert [i for i, _ in calls[:5]] == [0, 1, 2, 3, 4]
    assert all(deferred for _, deferred in calls)
    assert [i for i, _ in calls[5:]] == [1, 3, 1]


def test_past_its_wait_the_split_selects_the_held_without_deferring():
    calls: list[bool] = []

    def run(i: int) -> None:
        calls.append(defers())
        if defers():
            raise HeldElsewhere("always")

    run_split([0], run, wait_s=0.1)
    assert calls[0] and not calls[-1]
    with deferring():
        assert defers()
        with deferring(False):
            assert not defers()
    assert not defers()


def _held_elsewhere(cache: Path, a: torch.Tensor, b: torch.Tensor) -> tuple[FileLocks, str, str, Path, bytes]:
    """``mm(a, b)`` tuned into the cache folder, then its entry taken away and its lock held, as by
    another process still tuning it: the holder, the key, the lock's token, the entry's file and
    the entry's bytes (to publish it again)."""
    key = tunesmith.tune("mm", a, b).report.key
    tunesmith.reset()
    entry = next((cache / "entries").glob(f"*/{key}.json"))
    saved = entry.read_bytes()
    entry.unlink()
    holder = FileLocks(cache)
    return holder, key, holder.acquire(key, 30.0), entry, saved


def test_a_problem_held_by_another_process_is_put_off_then_taken(tmp_path, monkeypatch):
    """Two processes on one cache folder: while one holds a problem's file lock, the other's
    deferring selection raises HeldElsewhere; once the holder's entry is in, it is read
    (``autotune_taken``), not tuned."""
    import torch

    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path))
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    holder, problem_key, token, entry, saved = _held_elsewhere(tmp_path, a, b)
    with deferring(), pytest.raises(HeldElsewhere):
        tunesmith.tune("mm", a, b)
    assert tunesmith.counters["autotune_deferred"] == 1
    entry.write_bytes(saved)  # the holder publishes, and lets go
    holder.release(problem_key, token)
    with deferring():
        assert tunesmith.tune("mm", a, b).report.source != "tuned"
    assert tunesmith.counters["autotune_taken"] == 1 and tunesmith.counters["autotune_tuned"] == 0


class Built:
    """A run-time backend whose one choice records the thread of each precompile (``where``)."""

    name = "built"

    def __init__(self) -> None:
        self.where: list[str] = []

    @tunesmith.hookimpl
    def tunesmith_choices(self, problem, options):
        return [BuiltChoice(problem, self.where)]


class BuiltChoice(MineChoice):
    def __init__(self, problem, where):
        super().__init__(problem)
        self.spec, self.where = ChoiceSpec("built", "ops"), where

    def precompile(self):
        self.where.append(threading.current_thread().name)


def _wait_for(what: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not what():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.01)


def test_a_winner_published_while_put_off_is_built_on_a_thread_as_it_arrives(tmp_path, monkeypatch, register):
    """A problem held by another process is put off; once the holder publishes its entry, the
    winner is rebuilt and precompiled here on a thread, before the problem comes back, and taking
    it then builds nothing more (``autotune_built_ahead``)."""
    backend = Built()
    register(backend)
    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TUNESMITH_BACKENDS", "built")
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    holder, key, token, entry, saved = _held_elsewhere(tmp_path, a, b)
    backend.where.clear()
    with deferring(ahead=True), pytest.raises(HeldElsewhere):
        tunesmith.tune("mm", a, b)
    entry.write_bytes(saved)  # the holder publishes, and lets go
    holder.release(key, token)
    _wait_for(lambda: len(backend.where) == 1)
    assert backend.where[0].startswith("tunesmith-build-")
    with deferring():
        assert tunesmith.tune("mm", a, b).report.source == "local"
    assert len(backend.where) == 1  # built once, on the thread
    counts = tunesmith.counters
    assert (counts["autotune_taken"], counts["autotune_built_ahead"], counts["autotune_tuned"]) == (1, 1, 0)


def test_in_a_first_pass_a_winner_found_but_not_built_here_is_put_off_and_built_on_a_thread(
    tmp_path, monkeypatch, register
):
    """A process that comes late finds others' entries: in the split's first pass each is put off
    (the process tunes what is left meanwhile) while a thread builds its winner; out of the first
    pass, the selection waits for the build instead."""
    backend = Built()
    register(backend)
    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TUNESMITH_BACKENDS", "built")
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    tunesmith.tune("mm", a, b)
    tunesmith.reset()
    backend.where.clear()
    with deferring(ahead=True), pytest.raises(HeldElsewhere):
        tunesmith.tune("mm", a, b)
    _wait_for(lambda: len(backend.where) == 1)
    with deferring(ahead=True):
        assert tunesmith.tune("mm", a, b).report.source == "local"
    assert backend.where[0].startswith("tunesmith-build-") and len(backend.where) == 1
    assert tunesmith.counters["autotune_built_ahead"] == 1 and not tunesmith.counters["autotune_deferred"]
    tunesmith.reset()
    with deferring():  # no first pass: taken at once, built here
        assert tunesmith.tune("mm", a, b).report.source == "local"
    assert backend.where[1] == threading.current_thread().name


def test_without_file_locks_a_process_tunes_alone_and_says_so_once(tmp_path, monkeypatch, caplog):
    """A folder whose file system has no flock (or a platform without fcntl): no waiting on a
    lock nobody holds; each cold problem is tuned here, with one warning for the process."""
    import torch

    from tunesmith.cache import filelocks, flight

    monkeypatch.setattr(filelocks, "fcntl", None)
    monkeypatch.setattr(flight, "_warned_no_file_locks", [])
    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path))
    for m in (8, 9):
        assert tunesmith.tune("mm", torch.randn(m, 8), torch.randn(8, 8)).report.source == "tuned"
    assert tunesmith.counters["file_lock_unavailable"] == 2 and tunesmith.counters["autotune_tuned"] == 2
    assert sum("no file locks" in r.message for r in caplog.records) == 1


def test_each_rank_of_a_distributed_job_starts_on_its_own_share(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    walked: list[int] = []

    def select_one(item: int) -> int:
        walked.append(item)
        return item * 10

    # rank 1 of 2 walks 3, 4, 5, 0, 1, 2 and still answers in the items' order
    assert select_each(list(range(6)), select_one, wait_s=5.0) == [0, 10, 20, 30, 40, 50]
    assert walked == [3, 4, 5, 0, 1, 2]
    monkeypatch.setattr(dist, "get_world_size", lambda: 1)
    walked.clear()
    select_each(list(range(6)), select_one, wait_s=5.0)
    assert walked == [0, 1, 2, 3, 4, 5]


class JobStore:
    """A run-time plugin: one rank's view of a job's store, a real ``TCPStore`` on loopback (no
    layer before the job starts). ``late`` makes its next look-up miss, as when another rank
    publishes between this rank's look-up and its own publishing."""

    def __init__(self, store: dist.Store | None) -> None:
        self.layer = Late(store) if store is not None else None

    @tunesmith.hookimpl
    def tunesmith_cache_layers(self, options):
        return [self.layer] if self.layer is not None else []


class Late(DistributedStoreLayer):
    late = False

    def get(self, key):
        if self.late:
            self.late = False
            return None
        return super().get(key)


class Timed:
    """A benchmarker plugin: each choice takes its backend's time; ``meanwhile`` runs as it times
    (another rank publishing while this one tunes)."""

    def __init__(self, ms_by_backend: dict[str, float], meanwhile=lambda: None) -> None:
        self.ms_by_backend, self.meanwhile = ms_by_backend, meanwhile

    @tunesmith.hookimpl
    def tunesmith_benchmarker(self, options):
        return self

    def benchmark(self, problem, choices, inputs):
        self.meanwhile()
        return [Timing(c.spec, self.ms_by_backend[c.spec.backend]) for c in choices]


@pytest.fixture
def job_store() -> Iterator[Callable[[], dist.Store]]:
    """``job_store()``: a client of one job's store (its server started here, on a free port)."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield lambda: dist.TCPStore("127.0.0.1", server.port, is_master=False)
    server = None  # the last reference: the server stops


def _seed(register, folder, ms_by_backend) -> None:
    """Fill ``folder`` with a tuning of ``A @ B`` made before the job (no job store)."""
    name = register(Timed(ms_by_backend), "seed")
    tunesmith.tune("mm", A, B, options={"backends": ["aten", "mine"], "cache_dir": str(folder)})
    plugins.get_system().unregister(name)
    tunesmith.reset()


def _entry(folder, kind: bytes = b'"autotune"'):
    """The one entry of ``kind`` in a local cache ``folder``."""
    return next(f for f in (folder / "entries").glob("*/*.json") if kind in f.read_bytes())


A, B = rand(16, 8), rand(8, 12)
OPTIONS = {"backends": ["aten", "mine"]}


def test_a_rank_runs_the_answer_its_job_published_first_not_its_own_folders(register, job_store, tmp_path):
    """Ranks whose folders hold different answers from before the job: the first to publish fixes
    the job's answer; a rank after it reads the job's store first, and one that published late
    (the job's answer came between its look-up and its publishing) takes the job's."""
    register(Mine())
    _seed(register, tmp_path / "rank0", {"aten": 2.0, "mine": 1.0})
    for rank in ("rank1", "rank2"):
        _seed(register, tmp_path / rank, {"aten": 1.0, "mine": 2.0})
    job = JobStore(None)
    register(job, "job")
    job.layer = Late(job_store())
    first = tunesmith.tune("mm", A, B, options={**OPTIONS, "cache_dir": str(tmp_path / "rank0")})
    assert first.spec.backend == "mine" and first.report.source == "local"
    tunesmith.reset()
    job.layer = Late(job_store())
    second = tunesmith.tune("mm", A, B, options={**OPTIONS, "cache_dir": str(tmp_path / "rank1")})
    assert second.spec.backend == "mine" and second.report.source == "torch_distributed"
    tunesmith.reset()
    job.layer = Late(job_store())
    job.layer.late = True
    third = tunesmith.tune("mm", A, B, options={**OPTIONS, "cache_dir": str(tmp_path / "rank2")})
    assert third.spec.backend == "mine" and third.report.source == "torch_distributed"
    assert tunesmith.counters["autotune_job_answer"] == 1
    tunesmith.reset()
    job.layer = None  # after the job: rank 1's folder holds the job's answer (read through)
    alone = tunesmith.tune("mm", A, B, options={**OPTIONS, "cache_dir": str(tmp_path / "rank1")})
    assert alone.spec.backend == "mine" and alone.report.source == "local"


def test_a_rank_that_tunes_while_another_publishes_runs_the_published_answer(register, job_store, tmp_path):
    """No folder holds an answer: this rank tunes (ATen wins here), but another rank published
    first while it timed; the job's answer is the one it runs."""
    register(Mine())
    _seed(register, tmp_path / "other", {"aten": 2.0, "mine": 1.0})
    published = _entry(tmp_path / "other")
    store = job_store()
    register(JobStore(store), "job")
    publish = lambda: DistributedStoreLayer(store).publish(published.stem, published.read_bytes())  # noqa: E731
    register(Timed({"aten": 1.0, "mine": 2.0}, publish), "timed")
    chosen = tunesmith.tune("mm", A, B, options={**OPTIONS, "cache_dir": str(tmp_path / "mine")})
    assert chosen.spec.backend == "mine" and tunesmith.counters["autotune_job_answer"] == 1
    assert tunesmith.counters["autotune_tuned"] == 1
    assert torch.allclose(chosen.kernel(A, B), A @ B, rtol=1e-5, atol=1e-5)


class Fragile:
    """Mine's backend, whose choice cannot be readied while ``broken`` (as on a rank that lacks
    what it needs)."""

    broken = False

    @tunesmith.hookimpl
    def tunesmith_choices(self, problem, options):
        choice = MineChoice(problem)
        if self.broken:

            def precompile():
                raise RuntimeError("not on this rank")

            choice.precompile = precompile
        return [choice]


def test_a_job_answer_that_cannot_run_here_is_not_taken_and_a_bad_one_is_replaced(register, job_store, tmp_path):
    """An answer this rank cannot ready leaves the rank its own; one that is not a valid entry
    (made with another cache_secret, say) is replaced by the rank's."""
    fragile = Fragile()
    register(fragile, "mine")
    _seed(register, tmp_path / "other", {"aten": 2.0, "mine": 1.0})
    published = _entry(tmp_path / "other")
    store = job_store()
    DistributedStoreLayer(store).publish(published.stem, published.read_bytes())
    job = register(JobStore(store), "job")
    fragile.broken = True
    with pytest.warns(tunesmith.TunesmithWarning, match="cannot run here"):
        own = tunesmith.tune("mm", A, B, options={**OPTIONS, "cache_dir": str(tmp_path / "a")})
    assert own.spec.backend == "aten" and tunesmith.counters["autotune_job_answer"] == 0
    tunesmith.reset()
    plugins.get_system().unregister(job)
    bad = dist.PrefixStore("job2", job_store())
    DistributedStoreLayer(bad).publish(published.stem, b"not an entry")
    register(JobStore(bad), "job2")
    with pytest.warns(tunesmith.TunesmithWarning, match="invalid"):
        tunesmith.tune("mm", A, B, options={**OPTIONS, "cache_dir": str(tmp_path / "b")})
    assert DistributedStoreLayer(bad).get(published.stem) == _entry(tmp_path / "b").read_bytes()


class Chosen:
    """A run-time plugin recording the backend of every selection and plan entry used."""

    def __init__(self) -> None:
        self.specs: list[str] = []

    @tunesmith.hookimpl
    def tunesmith_selection_done(self, report):
        self.specs.append(report.chosen.backend)


def _compile_run(folder, **extra):
    """``relu(A @ B)`` compiled cold in this process (its Dynamo and memory reset), cached in
    ``folder``; the result."""
    torch._dynamo.reset()
    tunesmith.reset()
    options = {**OPTIONS, "cache_dir": str(folder), "graph_compiler": "eager", **extra}
    return torch.compile(lambda a, b: torch.relu(a @ b), backend="tunesmith", options=options)(A, B)


def test_a_graphs_plan_is_the_one_its_job_published_first(register, job_store, tmp_path):
    """A compiled graph's plan follows the same rule: found in a rank's folder and published late,
    or made while another rank published first, the plan that runs is the job's."""
    register(Mine())
    chosen = Chosen()
    register(chosen, "chosen")
    timed, job = Timed({}), JobStore(None)
    register(timed, "timed")  # registered throughout: the graph's key names the plugins
    register(job, "job")
    for folder, times in (("rank0", {"aten": 2.0, "mine": 1.0}), ("rank1", {"aten": 1.0, "mine": 2.0})):
        timed.ms_by_backend = times
        _compile_run(tmp_path / folder)
    job.layer = Late(job_store())
    _compile_run(tmp_path / "rank0")
    job.layer = Late(job_store())
    job.layer.late = True
    chosen.specs.clear()
    out = _compile_run(tmp_path / "rank1")
    assert torch.allclose(out, torch.relu(A @ B), rtol=1e-5, atol=1e-5)
    assert tunesmith.counters["compiled_graph_job_answer"] == 1 and chosen.specs == ["mine"]
    # a rank with an empty folder makes its own plan (ATen wins here) while rank 0's is published
    plan = _entry(tmp_path / "rank0", b'"compiled_graph"')
    store = dist.PrefixStore("next-job", job_store())
    job.layer = Late(store)
    timed.meanwhile = lambda: DistributedStoreLayer(store).publish(plan.stem, plan.read_bytes())
    chosen.specs.clear()
    out = _compile_run(tmp_path / "rank2")
    assert torch.allclose(out, torch.relu(A @ B), rtol=1e-5, atol=1e-5)
    assert tunesmith.counters["compiled_graph_job_answer"] == 1 and chosen.specs == ["aten", "mine"]
