"""Fleet tuning's parts, in one process: file locks, the ``torch.distributed`` store layer, and
the split that tunes unheld problems first (the many-process runs are in test_fleet_runs.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch.distributed as dist

import tunesmith
from tunesmith.cache.dist_store import DistributedStoreLayer
from tunesmith.cache.filelocks import FileLocks
from tunesmith.cache.flight import HeldElsewhere
from tunesmith.fleet import deferring, defers, run_split, select_each


def test_a_file_lock_has_one_holder_until_released(tmp_path):
    mine, other = FileLocks(tmp_path), FileLocks(tmp_path)
    token = mine.acquire("k" * 64, 30.0)
    assert token is not None and mine.refresh("k" * 64, token, 30.0)
    assert other.acquire("k" * 64, 30.0) is None
    assert other.acquire("j" * 64, 30.0) is not None  # another key is another lock
    mine.release("k" * 64, token)
    assert not mine.refresh("k" * 64, token, 30.0)
    assert other.acquire("k" * 64, 30.0) is not None


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


def test_a_problem_held_by_another_process_is_put_off_then_taken(tmp_path, monkeypatch):
    """Two processes on one cache folder: while one holds a problem's file lock, the other's
    deferring selection raises HeldElsewhere; once the holder's entry is in, it is read
    (``autotune_taken``), not tuned."""
    import torch

    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path))
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    problem_key = tunesmith.tune("mm", a, b).report.key
    tunesmith.reset()
    entry = next((tmp_path / "entries").glob(f"*/{problem_key}.json"))
    saved = entry.read_bytes()
    entry.unlink()
    holder = FileLocks(tmp_path)
    token = holder.acquire(problem_key, 30.0)
    with deferring(), pytest.raises(HeldElsewhere):
        tunesmith.tune("mm", a, b)
    assert tunesmith.counters["autotune_deferred"] == 1
    entry.write_bytes(saved)  # the holder publishes, and lets go
    holder.release(problem_key, token)
    with deferring():
        assert tunesmith.tune("mm", a, b).report.source != "tuned"
    assert tunesmith.counters["autotune_taken"] == 1 and tunesmith.counters["autotune_tuned"] == 0


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
