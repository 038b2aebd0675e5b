"""Cache entries are bounded in size and depth in every layer (the local disk, and real Redis and
memcached servers): a bad entry is a miss with a warning, never a crash, and is never read whole
or parsed when too large. A seeded fuzz test of the decoder. Redis's refusal of a client without
its password is said in tunesmith's words."""

from __future__ import annotations

import json
import random
import re
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import torch
from pymemcache.client.base import Client
from servers import Redis, Server, layer_name
from tunesmith_memcache.layer import INLINE, MemcacheLayer

import tunesmith
from tunesmith.cache.entry import MAX_ENTRY_BYTES, MAX_ENTRY_DEPTH, BadEntry, decode, encode
from tunesmith.cache.remote import ENTRY
from tunesmith.cache.stack import CacheStack
from tunesmith.errors import TunesmithWarning
from tunesmith.hooks import plugin_status
from tunesmith.selection import SelectionEntry
from tunesmith_hookspecs import structure

from conftest import REPO, rand

A, B = rand(40, 24), rand(24, 56)
#: the issue's entry: about 400 KB of JSON nested 200,000 levels deep
DEEP = b"[" * 200_000 + b"]" * 200_000
#: the issue's oversized entry
HUGE_BYTES = 105 * 1000 * 1000


def tune_mm() -> tunesmith.Selection:
    selection = tunesmith.tune("mm", A, B)
    torch.testing.assert_close(selection(A, B), A @ B)
    return selection


def padded(raw: bytes, size: int) -> Iterator[bytes]:
    """The pieces of a valid entry ``raw`` whose device name is padded to ``size`` bytes in all: an
    entry that would be a hit but for its size (written piece by piece, never held whole)."""
    data = json.loads(raw)
    data["payload"]["device_name"] = "@PAD@"
    head, tail = json.dumps(data, sort_keys=True, separators=(",", ":")).encode().split(b"@PAD@")
    pad = size - len(head) - len(tail)
    yield head
    for start in range(0, pad, 1 << 20):
        yield b"x" * min(1 << 20, pad - start)
    yield tail


def retunes_after_a_warning(match: str, source: str) -> None:
    """The next tune() (in a fresh process, as far as tunesmith knows) warns ``match``, tunes again
    and stores a good entry, which the one after finds in layer ``source``."""
    tunesmith.reset()
    with pytest.warns(TunesmithWarning, match=match):
        assert tune_mm().report.source == "tuned"
    assert tunesmith.counters["cache_entry_invalid"] == 1
    tunesmith.reset()
    assert tune_mm().report.source == source


def peak_traced(fn: Callable[[], Any]) -> int:
    """The peak of memory that Python allocated while ``fn()`` ran, in bytes."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- the local disk layer ------------------------------------------------------------------


def local_entry(isolated: Path) -> Path:
    """The file of the entry that a first tune() writes."""
    key = tune_mm().report.key
    return isolated / "cache" / "entries" / key[:2] / f"{key}.json"


def test_a_deeply_nested_local_entry_is_a_miss_and_a_warning(isolated):
    local_entry(isolated).write_bytes(DEEP)
    retunes_after_a_warning(rf"invalid autotune entry.*nested deeper than {MAX_ENTRY_DEPTH} levels", "local")


def test_a_105_mb_local_entry_is_refused_unread_in_bounded_memory(isolated):
    path = local_entry(isolated)
    raw = path.read_bytes()
    with path.open("wb") as f:
        f.writelines(padded(raw, HUGE_BYTES))
    assert path.stat().st_size == HUGE_BYTES
    tunesmith.reset()
    sources: list[str] = []
    with pytest.warns(TunesmithWarning, match=r"invalid autotune entry.*105,000,000 bytes, over the limit"):
        peak = peak_traced(lambda: sources.append(tune_mm().report.source))
    assert sources == ["tuned"]
    assert peak < 16 * 2**20, f"reading a 105 MB entry took {peak / 2**20:.0f} MiB"
    tunesmith.reset()
    assert tune_mm().report.source == "local"


def test_the_core_stores_no_entry_over_the_bound(isolated):
    stack = CacheStack([], "autotune", None, 30.0)
    with pytest.warns(TunesmithWarning, match="not caching autotune entry.*over the limit"):
        stack.put("key", {"pad": "x" * MAX_ENTRY_BYTES})
    assert tunesmith.counters["cache_entry_too_large"] == 1


# --- Redis and memcached -------------------------------------------------------------------


def write_raw(server: Server, key: str, value: bytes) -> None:
    """Store ``value`` under the entry key the core reads, with the server's own client, as the
    layer of a peer process would (memcached's values carry the layer's one-byte prefix)."""
    if server.setting == "redis_url":
        with redis.Redis.from_url(server.address) as client:
            client.set(ENTRY + key, value)
    else:
        client = Client(("127.0.0.1", server.port))
        try:
            assert client.set(ENTRY + key, INLINE + value, noreply=False)
        finally:
            client.close()


def read_raw(server: Server, key: str) -> bytes:
    if server.setting == "redis_url":
        with redis.Redis.from_url(server.address) as client:
            return client.get(ENTRY + key)
    client = Client(("127.0.0.1", server.port))
    try:
        return client.get(ENTRY + key)[1:]
    finally:
        client.close()


def test_a_deeply_nested_remote_entry_is_a_miss_and_a_warning(remote):
    key = tune_mm().report.key
    write_raw(remote, key, DEEP)
    retunes_after_a_warning(rf"invalid autotune entry.*nested deeper than {MAX_ENTRY_DEPTH} levels", layer_name(remote))


def test_a_remote_entry_over_the_bound_is_refused_unread(remote):
    key = tune_mm().report.key
    value = b"".join(padded(read_raw(remote, key), 8 * MAX_ENTRY_BYTES))
    if remote.setting == "redis_url":
        write_raw(remote, key, value)
    else:  # over memcached's item size limit: chunks under a manifest, as a peer's layer writes them
        MemcacheLayer([("127.0.0.1", remote.port)], timeout_s=30).put(key, value)
    del value
    tunesmith.reset()
    sources: list[str] = []
    with pytest.warns(TunesmithWarning, match=r"invalid autotune entry.*over the limit"):
        peak = peak_traced(lambda: sources.append(tune_mm().report.source))
    assert sources == ["tuned"]
    # memcached's layer reads nothing of it; Redis's at most the bound and a byte (redis-py copies it twice)
    assert peak < 4 * MAX_ENTRY_BYTES, f"reading a {8 * MAX_ENTRY_BYTES:,} byte entry took {peak / 2**20:.0f} MiB"
    assert tunesmith.counters["remote_cache_error"] == 0
    tunesmith.reset()
    assert tune_mm().report.source == layer_name(remote)


# --- Redis with a password -----------------------------------------------------------------


class PasswordRedis(Redis):
    def command(self) -> list[str]:
        return [*super().command(), "--requirepass", "s3cret"]


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[PasswordRedis]:
    server = PasswordRedis(tmp_path / "redis").start()
    yield server
    server.stop()


def test_redis_without_its_password_says_so(password_redis, monkeypatch):
    monkeypatch.setenv("TUNESMITH_REDIS_URL", password_redis.address)
    monkeypatch.setenv("TUNESMITH_CACHES", "redis")
    needs = r"Redis needs a password \(set it in redis_url\)"
    with pytest.warns(TunesmithWarning, match=rf"cache layer 'redis' failed to read \(RedisAuthError: {needs}\)"):
        assert tune_mm().report.source == "tuned"
    status = plugin_status("redis")
    assert not status.runnable and re.search(needs, status.reason) and "HELLO" not in status.reason

    monkeypatch.setenv("TUNESMITH_REDIS_URL", password_redis.address.replace("//", "//:wrong@"))
    tunesmith.reset()
    status = plugin_status("redis")
    assert "Redis refused the password in redis_url" in status.reason and "wrong" not in status.reason

    monkeypatch.setenv("TUNESMITH_REDIS_URL", password_redis.address.replace("//", "//:s3cret@"))
    tunesmith.reset()
    assert plugin_status("redis").runnable
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunesmithWarning)
        assert tune_mm().report.source == "tuned"
        tunesmith.reset()
        assert tune_mm().report.source == "redis"


# --- fuzz ----------------------------------------------------------------------------------

FUZZ_ROUNDS = 1300  # of 8 inputs each
KEY = "k" * 64
SECRETS = (None, "s3cret")
#: kinds of input that can never be a valid entry (the others may happen to leave it valid)
ALWAYS_BAD = {"random bytes", "deep nesting", "truncation"}
_DIGITS = bytes.maketrans(bytes(range(256)), bytes(b"0123456789"[i % 10] for i in range(256)))


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value of any type (containers only near the top)."""
    pick = rng.randrange(8 if depth < 3 else 6)
    if pick == 6:
        return [_json_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if pick == 7:
        return {str(i): _json_value(rng, depth + 1) for i in range(rng.randrange(3))}
    text = "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(8)))
    return [None, rng.random() < 0.5, rng.randint(-(2**70), 2**70), rng.uniform(-1e308, 1e308), text, ""][pick]


def _nested(rng: random.Random) -> bytes:
    """A value nested around the depth bound or far past it (the issue's 200,000 levels), closed or
    not, with brackets in strings or not."""
    depth = rng.choice([MAX_ENTRY_DEPTH - 8, MAX_ENTRY_DEPTH, MAX_ENTRY_DEPTH + 1, 1000, 5000, 200_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'["[\\",', b"]")])
    if depth == 200_000 and rng.random() < 0.9:  # the entry, mostly; the others cost more time
        opener, closer = b"[", b"]"
    return opener * depth + b"0" + closer * (depth if rng.random() < 0.8 else rng.randrange(depth))


def _huge_number(rng: random.Random) -> bytes:
    digits = rng.randbytes(rng.choice([20, 4300, 4301, 20_000])).translate(_DIGITS)
    return rng.choice([digits, b"-" + digits, b"1e" + digits, b"0." + digits, b"1" + digits + b"e-" + digits[:6]])


def _one_field(rng: random.Random, body: dict[str, Any], value: Callable[[str], Any]) -> tuple[str, bytes]:
    """``body`` with one field (or one field of its payload) set to ``value(field)``."""
    field = rng.choice([*body, "payload.device_name", "payload.timings", "payload.chosen", "payload.tuning_s"])
    changed = {**body, "payload": dict(body["payload"])}
    if field.startswith("payload."):
        changed["payload"][field[8:]] = value(field)
    else:
        changed[field] = value(field)
    return field, json.dumps(changed).encode()


def fuzz_inputs(rng: random.Random, payload: dict[str, Any], rounds: int) -> Iterator[tuple[str, bytes, str | None]]:
    """(kind, bytes, secret) of every kind: random bytes, deep nesting, huge numbers, wrong types,
    truncations, one byte changed, valid entries with one field changed, valid entries; one at a time."""
    other = {"format": "tunesmith-other", "version": 2, "kind": "compiled_graph", "key": "0" * 64, "sig": "0" * 64}
    signed = {secret: encode("autotune", KEY, payload, secret) for secret in SECRETS}
    for _ in range(rounds):
        secret = rng.choice(SECRETS)
        valid = signed[secret]
        body = json.loads(valid)
        yield "random bytes", rng.randbytes(rng.randrange(1, 64)), secret
        yield "deep nesting", rng.choice([b"", b'{"payload":']) + _nested(rng), secret
        number = _huge_number(rng)
        yield "huge number", rng.choice([number, valid.replace(b'"tuning_s":0', b'"tuning_s":' + number, 1)]), secret
        field, raw = _one_field(rng, body, lambda field: _json_value(rng))
        yield f"wrong type of {field}", raw, secret
        yield "truncation", valid[: rng.randrange(len(valid))], secret
        flipped = bytearray(valid)
        flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        yield "one byte changed", bytes(flipped), secret
        field, raw = _one_field(rng, body, lambda field: other.get(field, "changed"))
        yield f"{field} changed", raw, secret
        yield "valid", json.dumps(body, indent=rng.choice([None, 1]), sort_keys=rng.random() < 0.5).encode(), secret


class DictLayer:
    """A cache layer over a dict, for feeding the stack bytes."""

    name = "fuzz"

    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.store.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.store[key] = value


def test_fuzz_every_input_is_a_valid_entry_or_a_miss_with_a_warning(isolated):
    payload = json.loads(local_entry(isolated).read_bytes())["payload"]
    expected = structure(payload, SelectionEntry)
    layer = DictLayer()
    stacks = {secret: CacheStack([layer], "autotune", secret, 30.0) for secret in SECRETS}
    counts = {"hit": 0, "miss": 0}

    def run(seed: str, rounds: int) -> None:
        for kind, raw, secret in fuzz_inputs(random.Random(seed), payload, rounds):
            try:
                decode(raw, "autotune", KEY, secret)
            except BadEntry:
                pass
            except Exception as exc:  # noqa: BLE001 - what the test looks for
                pytest.fail(f"{kind}: decode raised {type(exc).__name__}: {exc}"[:500])
            layer.store[KEY] = raw
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                found = stacks[secret].get(KEY, lambda p: structure(p, SelectionEntry))
            if found is None:
                assert kind != "valid" and [w.category for w in caught] == [TunesmithWarning], (kind, raw[:200])
                counts["miss"] += 1
            else:
                assert kind not in ALWAYS_BAD and not caught, (kind, raw[:200])
                assert kind != "valid" or found[0] == expected
                counts["hit"] += 1

    run("entry-fuzz", FUZZ_ROUNDS)
    assert counts["hit"] + counts["miss"] == 8 * FUZZ_ROUNDS >= 10_000
    assert counts["hit"] >= FUZZ_ROUNDS and counts["miss"] >= 5 * FUZZ_ROUNDS, counts
    peak = peak_traced(lambda: run("entry-fuzz-memory", FUZZ_ROUNDS // 10))  # tracing costs 5 times the time
    assert peak < 16 * 2**20, f"the fuzz inputs took {peak / 2**20:.0f} MiB"


def test_a_signature_that_is_not_ascii_is_a_bad_entry():
    raw = encode("autotune", KEY, {}, None).replace(b'"sig":null', '"sig":"é"'.encode())
    with pytest.raises(BadEntry, match="bad signature"):
        decode(raw, "autotune", KEY, "s3cret")


def test_any_exception_parsing_a_payload_is_a_miss_with_a_warning():
    layer = DictLayer()
    layer.put(KEY, encode("autotune", KEY, {}, None))

    def parse(payload: Any) -> Any:
        raise RecursionError("a parser that recursed too far")

    with pytest.warns(TunesmithWarning, match="invalid autotune entry.*RecursionError"):
        assert CacheStack([layer], "autotune", None, 30.0).get(KEY, parse) is None
    assert tunesmith.counters["cache_entry_invalid"] == 1


@pytest.mark.parametrize("doc", ["architecture.md", "remote-caches.md"])
def test_the_docs_state_the_bounds(doc):
    text = " ".join((REPO / "docs" / doc).read_text().split())
    assert f"{MAX_ENTRY_BYTES >> 20} MiB" in text and f"{MAX_ENTRY_DEPTH} levels" in text
