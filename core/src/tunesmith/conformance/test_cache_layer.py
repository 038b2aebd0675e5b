"""Cache-layer checks: every layer the plugin offers under the current settings (configure it,
e.g. ``TUNESMITH_REDIS_URL``, before running the suite) stores bytes faithfully and safely."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
import warnings
from typing import Any

import pytest

from tunesmith.conformance.pytest_plugin import items_of

LARGE = 4 * 1024 * 1024 + 17
UNREACHABLE_BOUND_S = 5.0
#: a lock's expiry in the lock check, and how late past it the lock may still be held (a server
#: whose clock ticks once a second, as memcached's, may round an expiry up by a second)
LOCK_TTL_S = 2.0
LOCK_EXPIRY_SLACK_S = 1.2


def stamped(tag: str, size: int) -> bytes:
    """``size`` random bytes that carry their own checksum, so a torn or mixed value is detectable."""
    body = tag.encode() + b":" + os.urandom(max(size - len(tag) - 33, 1))
    return body + b":" + hashlib.sha256(body).digest()


def intact(value: bytes) -> bool:
    body, digest = value[:-33], value[-32:]
    return value[-33:-32] == b":" and hashlib.sha256(body).digest() == digest


def fresh_key(label: str) -> str:
    return f"conformance{label}{os.urandom(8).hex()}"


@pytest.fixture(scope="session")
def layers(tunesmith_target: Any) -> list[Any]:
    reason = "offers no cache layer under the current settings: configure it"
    return items_of(tunesmith_target, "cache layer", tunesmith_target.cache_layers, reason)


def test_round_trip_miss_and_overwrite(layers: list[Any]) -> None:
    for layer in layers:
        key = fresh_key("rt")
        assert layer.get(key) is None, f"layer {layer.name!r}: a key never written is not a miss"
        first, second = stamped("first", 300), stamped("second", 500)
        layer.put(key, first)
        assert layer.get(key) == first, f"layer {layer.name!r}: get() does not return what put() stored"
        layer.put(key, second)
        assert layer.get(key) == second, f"layer {layer.name!r}: put() does not overwrite"


def test_large_value(layers: list[Any]) -> None:
    for layer in layers:
        key, value = fresh_key("large"), stamped("large", LARGE)
        layer.put(key, value)
        got = layer.get(key)
        assert got == value, (
            f"layer {layer.name!r}: a value of {LARGE} bytes came back as "
            f"{'a miss' if got is None else f'{len(got)} other bytes'}; store it whole, or split it"
        )


def test_arbitrary_bytes_and_a_corrupt_entry_is_a_miss(layers: list[Any]) -> None:
    from tunesmith.cache.stack import CacheStack
    from tunesmith.errors import TunesmithWarning

    garbage = b"\x00\xff\xfe not json \x80" + os.urandom(64)
    for layer in layers:
        key = fresh_key("corrupt")
        layer.put(key, garbage)
        assert layer.get(key) == garbage, f"layer {layer.name!r}: bytes that are not UTF-8 do not round-trip"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert CacheStack([layer], "autotune", None, 30.0).get(key, lambda payload: payload) is None
        assert any(issubclass(w.category, TunesmithWarning) for w in caught), "a corrupt entry gave no warning"


def _torn_reads_while_threads_write(layer: Any, key: str, size: int, writes: int) -> tuple[int, list[str]]:
    """Six threads each write ``writes`` stamped values of ``size`` bytes to ``key`` while two threads
    read it; how many reads were torn, and what any thread raised."""
    torn, errors, stop = [], [], threading.Event()

    def guarded(fn: Any) -> Any:
        def run(*args: Any) -> None:
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(f"{type(exc).__name__}: {exc}")

        return run

    @guarded
    def write(tag: str) -> None:
        for i in range(writes):
            layer.put(key, stamped(f"{tag}-{i}", size))

    @guarded
    def read() -> None:
        while not stop.is_set():
            value = layer.get(key)
            if value is not None and not intact(value):
                torn.append(len(value))

    readers = [threading.Thread(target=read) for _ in range(2)]
    writers = [threading.Thread(target=write, args=(f"w{n}",)) for n in range(6)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    return len(torn), errors


@pytest.mark.parametrize(("size", "writes"), [(64 * 1024, 10), (LARGE, 2)], ids=["64KiB", "4MiB"])
def test_concurrent_writers_in_threads(layers: list[Any], size: int, writes: int) -> None:
    for layer in layers:
        key = fresh_key("threads")
        torn, errors = _torn_reads_while_threads_write(layer, key, size, writes)
        assert not errors, f"layer {layer.name!r} raised under concurrent use: {errors[:3]}"
        assert not torn, f"layer {layer.name!r}: {torn} torn or mixed values read while threads wrote"
        last = layer.get(key)
        assert last is not None and intact(last), f"layer {layer.name!r}: the last value written is not there intact"


WRITER = """
import pathlib, sys, time
from tunesmith.conformance.target import Target
from tunesmith.conformance.test_cache_layer import stamped
target = Target.load(sys.argv[1], "cpu", reference=False)  # a layer needs no aten (nor torch)
layer = next(l for l in target.cache_layers() if l.name == sys.argv[2])
barrier = pathlib.Path(sys.argv[5])
(barrier / f"ready-{sys.argv[4]}").touch()
while not (barrier / "go").exists():  # start together
    time.sleep(0.005)
for i in range(20):
    layer.put(sys.argv[3], stamped(f"p{sys.argv[4]}-{i}", 64 * 1024))
"""
WRITERS = 4


def test_concurrent_writers_in_processes(tunesmith_target: Any, layers: list[Any], tmp_path: Any) -> None:
    for layer in layers:
        key, torn, reads = fresh_key("procs"), 0, 0
        barrier = tmp_path / layer.name
        barrier.mkdir()
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, tunesmith_target.name, layer.name, key, str(n), str(barrier)],
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(WRITERS)
        ]
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("ready-*"))) < WRITERS and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        (barrier / "go").touch()
        while any(p.poll() is None for p in procs):
            value = layer.get(key)
            reads += 1
            torn += value is not None and not intact(value)
        failed = [p.stderr.read()[-500:] for p in procs if p.returncode != 0]
        assert not failed, f"a writer process failed: {failed[0]}"
        assert torn == 0, f"layer {layer.name!r}: {torn} of {reads} reads torn or mixed while processes wrote"
        last = layer.get(key)
        assert last is not None and intact(last), f"layer {layer.name!r}: the last value written is not there intact"


def test_an_unreachable_server_is_a_miss_with_a_warning_in_bounded_time(
    tunesmith_target: Any, layers: list[Any], request: pytest.FixtureRequest
) -> None:
    """Set up, a read and a write against a dead server: misses, a TunesmithWarning, bounded time."""
    from tunesmith.cache.stack import CacheStack, reset_backoff
    from tunesmith.errors import TunesmithWarning

    settings = request.config.getoption("tunesmith_unreachable")
    if not settings:
        pytest.skip("give --tunesmith-unreachable SETTING=VALUE (settings pointing the layer at a dead server)")
    overrides = dict(item.split("=", 1) for item in settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        dead = tunesmith_target.cache_layers(overrides)
        assert dead, f"plugin {tunesmith_target.name!r} offers no layer under {overrides}"
        for action in ("get", "put"):
            reset_backoff()  # so that the put reaches the layer too
            stack = CacheStack(dead, "autotune", None, 30.0)
            if action == "get":
                assert stack.get(fresh_key("dead"), lambda payload: payload) is None
            else:
                stack.put(fresh_key("dead"), {"x": 1})
        elapsed = time.monotonic() - start
    reset_backoff()
    assert elapsed < UNREACHABLE_BOUND_S, f"a dead server cost {elapsed:.1f} s (bound {UNREACHABLE_BOUND_S:g} s)"
    assert any(issubclass(w.category, TunesmithWarning) for w in caught), "a dead server gave no TunesmithWarning"


def test_listing_finds_what_was_put(layers: list[Any]) -> None:
    """A ``ListableCacheLayer`` (``keys``, ``stats``) sees the keys written to it."""
    from tunesmith_hookspecs import ListableCacheLayer

    listable = [layer for layer in layers if isinstance(layer, ListableCacheLayer)]
    if not listable:
        pytest.skip("no layer has keys(), stats() and clear(): tunesmith cache export cannot list it")
    for layer in listable:
        key = fresh_key("listed")
        layer.put(key, stamped("listed", 100))
        assert key in set(layer.keys()), f"layer {layer.name!r}: keys() does not list a key just written"
        stats = layer.stats()
        assert isinstance(stats.get("entries"), int) and stats["entries"] >= 1, f"layer {layer.name!r}: {stats}"


def test_a_lock_has_one_holder_and_expires(layers: list[Any]) -> None:
    """A ``SharedCacheLayer``'s lock: one holder at a time, freed only by its token or its expiry."""
    from tunesmith_hookspecs import SharedCacheLayer

    shared = [layer for layer in layers if isinstance(layer, SharedCacheLayer)]
    if not shared:
        pytest.skip("no layer has acquire(), refresh() and release(): no single-flight through it")
    for layer in shared:
        key = fresh_key("lock")
        token = layer.acquire(key, LOCK_TTL_S)
        assert token is not None, f"layer {layer.name!r}: a free lock was not acquired"
        assert layer.acquire(key, LOCK_TTL_S) is None, f"layer {layer.name!r}: a held lock was acquired again"
        layer.release(key, "not-the-token")
        assert layer.acquire(key, LOCK_TTL_S) is None, f"layer {layer.name!r}: a wrong token released the lock"
        assert layer.refresh(key, token, LOCK_TTL_S), f"layer {layer.name!r}: the holder could not refresh its lock"
        assert not layer.refresh(key, "not-the-token", LOCK_TTL_S), f"layer {layer.name!r}: a wrong token refreshed it"
        time.sleep(LOCK_TTL_S + LOCK_EXPIRY_SLACK_S)
        assert not layer.refresh(key, token, LOCK_TTL_S), f"layer {layer.name!r}: an expired lock was refreshed"
        again = layer.acquire(key, 5.0)
        assert again is not None and again != token, f"layer {layer.name!r}: an expired lock was not freed"
        layer.release(key, again)
        assert layer.acquire(key, 5.0) is not None, f"layer {layer.name!r}: release() did not free the lock"
