"""The redis and memcache plugins against real servers (redis-server and memcached on loopback
ports): read-through layering, a dead or hung server, bad entries, single-flight across
processes, back-off and recovery, export and import, and the conformance suite's cache checks."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from servers import Memcached, Redis, Server, layer_name, missing
from test_conformance import conformance, outcomes

import tunesmith
from tunesmith.cache.entry import encode
from tunesmith.cache.remote import ENTRY
from tunesmith.cache.stack import CacheStack
from tunesmith.cli import main
from tunesmith.errors import TunesmithWarning
from tunesmith.hooks import cache_layers, plugin_status
from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.settings import current_options
from tunesmith_hookspecs import ChoiceSpec, hookimpl

from conftest import rand, run_env

#: the issue's bound on what a dead server may add to one tune() call
DEAD_SERVER_EXTRA_S = 2.0


def the_layer(server: Server):
    return next(layer for layer in cache_layers(current_options()) if layer.name == layer_name(server))


def check(selection: tunesmith.Selection, *inputs: torch.Tensor) -> None:
    err = relative_error(selection(*inputs), reference(selection.problem, inputs))
    assert err <= tolerance(selection.problem), f"{selection.spec}: relative error {err:.3g}"


def mm_inputs(m: int = 33, k: int = 20, n: int = 17) -> tuple[torch.Tensor, torch.Tensor]:
    return rand(m, k), rand(k, n)


# --- the servers the tests start ---------------------------------------------------------------


@pytest.mark.parametrize("kind", [Redis, Memcached])
def test_a_missing_server_fails_its_test_at_once_with_one_line_naming_the_package(kind, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither program is there
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        kind(tmp_path / "server")
    assert time.monotonic() - start < 1 and not failed.value.pytrace
    assert str(failed.value) == missing(kind.program, kind.package)
    assert "\n" not in str(failed.value) and f"apt-get install -y {kind.package}" in str(failed.value)


# --- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "setting"), [("redis", "redis_url"), ("memcache", "memcache_servers")])
def test_unconfigured_a_plugin_offers_no_layer_and_says_why(name, setting):
    assert [layer.name for layer in cache_layers(current_options())] == ["local"]
    status = plugin_status(name)
    assert not status.runnable and setting in status.reason and setting.upper() in status.reason


def test_configured_the_status_reaches_the_server(remote):
    assert plugin_status(layer_name(remote)).runnable
    remote.stop()
    status = plugin_status(layer_name(remote))  # asked again: it depends on the settings
    assert not status.runnable and "cannot reach" in status.reason


def test_a_bad_memcache_servers_setting_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("TUNESMITH_MEMCACHE_SERVERS", "cache-1:11211,cache-2")
    with pytest.raises(tunesmith.errors.OptionError, match=r"memcache_servers.*'cache-2' is not host:port"):
        current_options()


# --- layering and counters -----------------------------------------------------------------


def test_four_fresh_starts_give_one_put_and_three_remote_hits(remote):
    a, b = mm_inputs()
    totals: dict[str, int] = {}
    sources = []
    for _ in range(4):
        tunesmith.reset()  # a fresh process, as far as tunesmith knows; the local disk layer is off
        selection = tunesmith.tune("mm", a, b)
        check(selection, a, b)
        sources.append(selection.report.source)
        for name in ("autotune_remote_put", "autotune_remote_hit", "autotune_remote_miss"):
            totals[name] = totals.get(name, 0) + tunesmith.counters[name]
    assert sources == ["tuned"] + [layer_name(remote)] * 3
    assert totals == {"autotune_remote_put": 1, "autotune_remote_hit": 3, "autotune_remote_miss": 1}


def test_a_remote_hit_fills_the_local_layer_above_it(remote, monkeypatch, tmp_path):
    monkeypatch.setenv("TUNESMITH_CACHES", f"local,{layer_name(remote)}")
    a, b = mm_inputs()
    tunesmith.tune("mm", a, b)
    assert tunesmith.counters["autotune_local_put"] == 1 and tunesmith.counters["autotune_remote_put"] == 1
    monkeypatch.setenv("TUNESMITH_CACHE_DIR", str(tmp_path / "another-machine"))
    tunesmith.reset()
    assert tunesmith.tune("mm", a, b).report.source == layer_name(remote)
    assert tunesmith.counters["autotune_local_miss"] == 1 and tunesmith.counters["autotune_local_put"] == 1
    tunesmith.reset()
    assert tunesmith.tune("mm", a, b).report.source == "local"
    assert tunesmith.counters["autotune_remote_hit"] == 0


# --- a server that fails -------------------------------------------------------------------


def hung_server() -> tuple[socket.socket, int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize("failure", ["killed", "hung"])
def test_a_dead_server_costs_at_most_one_timeout(remote, monkeypatch, failure):
    a, b = mm_inputs()
    tunesmith.tune("mm", *mm_inputs(5, 6, 7))  # warm-up
    with tunesmith.options(caches=[]):
        start = time.monotonic()
        check(tunesmith.tune("mm", a, b), a, b)
        alone = time.monotonic() - start
    remote.stop()
    if failure == "hung":
        hung, port = hung_server()
        address = f"127.0.0.1:{port}"
        monkeypatch.setenv(
            f"TUNESMITH_{remote.setting.upper()}", remote.address.replace(f"127.0.0.1:{remote.port}", address)
        )
    tunesmith.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        for shape in [(33, 20, 17), (40, 21, 9), (8, 8, 8)]:  # the later calls skip the layer
            x, y = mm_inputs(*shape)
            check(tunesmith.tune("mm", x, y), x, y)
            if shape == (33, 20, 17):
                first = time.monotonic() - start
        elapsed = time.monotonic() - start
    if failure == "hung":
        hung.close()
    assert first - alone < DEAD_SERVER_EXTRA_S, (
        f"one call with a {failure} server took {first:.2f} s, alone {alone:.2f} s"
    )
    assert elapsed < 3 * alone + DEAD_SERVER_EXTRA_S
    assert tunesmith.counters["remote_cache_error"] == 1
    assert sum(issubclass(w.category, TunesmithWarning) and "skipping it" in str(w.message) for w in caught) == 1


def test_a_restarted_server_is_used_again_after_the_back_off(remote, monkeypatch):
    monkeypatch.setenv("TUNESMITH_CACHE_BACKOFF_S", "2")
    remote.stop()
    with pytest.warns(TunesmithWarning, match="skipping it for 2 s"):
        tunesmith.tune("mm", *mm_inputs(9, 9, 9))
    failed_at = time.monotonic()
    assert tunesmith.counters["remote_cache_error"] == 1
    remote.start()
    tunesmith.tune("mm", *mm_inputs(10, 10, 10))
    if time.monotonic() - failed_at < 2:  # within the back-off: the layer was skipped
        assert tunesmith.counters["autotune_remote_put"] == 0
    time.sleep(max(0.0, failed_at + 2.1 - time.monotonic()))
    a, b = mm_inputs(11, 11, 11)
    before = tunesmith.counters["autotune_remote_put"]
    tunesmith.tune("mm", a, b)
    assert tunesmith.counters["autotune_remote_put"] == before + 1 and tunesmith.counters["remote_cache_error"] == 1
    tunesmith.reset()
    assert tunesmith.tune("mm", a, b).report.source == layer_name(remote)


def test_a_server_that_hangs_while_a_process_tunes_costs_one_timeout(remote, register):
    """The process holds the lock when the server stops answering: the put times out once, and
    neither the release nor anything after it waits on the server again."""

    class Hang:
        spec = ChoiceSpec("hang", "mm")

        def precompile(self):
            os.kill(remote.proc.pid, signal.SIGSTOP)

        def kernel(self):
            return torch.mm

    class Plugin:
        @hookimpl
        def tunesmith_choices(self, problem):
            return [Hang()]

    register(Plugin(), "hang")
    a, b = mm_inputs()
    try:
        with pytest.warns(TunesmithWarning, match="failed to write"):
            start = time.monotonic()
            selection = tunesmith.tune("mm", a, b, options={"backends": ["hang"]})
            elapsed = time.monotonic() - start
    finally:
        os.kill(remote.proc.pid, signal.SIGCONT)
    check(selection, a, b)
    assert tunesmith.counters["autotune_lock_held"] == 1 and tunesmith.counters["remote_cache_error"] == 1
    assert elapsed < 0.9, f"{elapsed:.2f} s: more than one timeout of 0.5 s"


def test_a_dead_memcached_server_is_skipped_alone(tmp_path):
    servers = [Memcached(tmp_path / f"mc{i}").start() for i in range(2)]
    try:
        with tunesmith.options(memcache_servers=",".join(s.address for s in servers)):
            layer = the_layer(servers[0])
            keys = [f"key{i:02d}" for i in range(40)]
            on = {s.address: [k for k in keys if layer.server_for(k) == s.address] for s in servers}
            assert all(on.values()), f"rendezvous hashing left a server without keys: {on}"
            servers[1].stop()
            stack = CacheStack([layer], "autotune", None, 30.0)
            with pytest.warns(TunesmithWarning, match=servers[1].address):
                for key in keys:
                    stack.put(key, {"key": key})
            assert tunesmith.counters["remote_cache_error"] == 1
            assert tunesmith.counters["autotune_remote_put"] == len(on[servers[0].address])
            assert all(stack.get(k, dict)[0] == {"key": k} for k in on[servers[0].address])
    finally:
        for s in servers:
            s.stop()


# --- what is read back ---------------------------------------------------------------------


class Exploit:
    """Unpickling this would create the file ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_garbage_pickle_and_a_wrong_signature_are_misses(remote, monkeypatch, tmp_path):
    monkeypatch.setenv("TUNESMITH_CACHE_SECRET", "fleet-secret")
    a, b = mm_inputs()
    key = tunesmith.tune("mm", a, b).report.key
    payload = json.loads(the_layer(remote).get(key))["payload"]
    planted = tmp_path / "unpickled"
    bad = {
        "garbage": b"\x00\xff not json at all " + os.urandom(32),
        "pickle": pickle.dumps(Exploit(planted)),
        "wrong signature": encode("autotune", key, payload, "another-secret"),
        "unsigned": encode("autotune", key, payload, None),
    }
    for what, value in bad.items():
        the_layer(remote).put(key, value)
        tunesmith.reset()
        with pytest.warns(TunesmithWarning, match="ignoring invalid autotune entry"):
            selection = tunesmith.tune("mm", a, b)
        assert selection.report.source == "tuned", what
        check(selection, a, b)
        assert tunesmith.counters["cache_entry_invalid"] == 1, what
    assert not planted.exists()


def test_a_foreign_chunk_manifest_is_an_invalid_entry_not_a_server_error(tmp_path):
    server = Memcached(tmp_path / "mc").start()
    try:
        with tunesmith.options(memcache_servers=server.address):
            layer = the_layer(server)
        stack = CacheStack([layer], "autotune", None, 30.0)
        client = layer.clients[server.address]
        for manifest in ('{"id": "a b", "n": 1, "sha256": ""}', '{"id": "00", "n": 1e400}', '{"n": 99999999}'):
            client.set(ENTRY + "key", b"#" + manifest.encode())  # as another writer of the pool might
            with pytest.warns(TunesmithWarning, match="ignoring invalid autotune entry"):
                assert stack.get("key", dict) is None
    finally:
        server.stop()
    assert tunesmith.counters["remote_cache_error"] == 0 and tunesmith.counters["cache_entry_invalid"] == 3


# --- single-flight across processes --------------------------------------------------------

TUNER = """
import json, os, pathlib, sys, time
import torch, tunesmith
from tunesmith.ops import reference, relative_error
from tunesmith_hookspecs import ChoiceSpec, hookimpl

barrier = pathlib.Path(sys.argv[1])

class Slow:
    spec = ChoiceSpec("slow", "mm")
    def precompile(self):
        (barrier / f"tuning-{os.getpid()}").touch()
        time.sleep(float(os.environ["SLOW_S"]))
    def kernel(self):
        return torch.mm

class Plugin:
    @hookimpl
    def tunesmith_choices(self, problem):
        return [Slow()] if problem.op == "mm" else []

tunesmith.register(Plugin(), "slow")
g = torch.Generator().manual_seed(0)
a, b = torch.randn(64, 48, generator=g), torch.randn(48, 40, generator=g)
(barrier / f"ready-{os.getpid()}").touch()
while not (barrier / "go").exists():
    time.sleep(0.005)
selection = tunesmith.tune("mm", a, b, options={"backends": ["slow"]})
err = relative_error(selection(a, b), reference(selection.problem, [a, b]))
print(json.dumps({"source": selection.report.source, "error": err, "counters": dict(tunesmith.counters)}))
"""


@pytest.fixture
def start_tuners() -> Iterator[Callable[[int, Path, float], list[subprocess.Popen[str]]]]:
    """``start_tuners(count, barrier, slow_s)``: processes that tune one mm at the barrier's "go";
    those still running when the test ends (it failed halfway) are killed."""
    started: list[subprocess.Popen[str]] = []

    def start(count: int, barrier: Path, slow_s: float) -> list[subprocess.Popen[str]]:
        barrier.mkdir(exist_ok=True)
        env = run_env(SLOW_S=str(slow_s))
        for _ in range(count):
            started.append(
                subprocess.Popen(
                    [sys.executable, "-c", TUNER, str(barrier)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        return started[-count:]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def wait_for(barrier: Path, pattern: str, count: int, procs: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 120
    while len(list(barrier.glob(pattern))) < count:
        failed = [p for p in procs if p.poll() not in (None, 0)]
        assert not failed and time.monotonic() < deadline, failed and failed[0].stderr.read()[-2000:]
        time.sleep(0.02)


def results(procs: list[subprocess.Popen[str]]) -> list[dict]:
    found = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-2000:]
        found.append(json.loads(stdout.strip().splitlines()[-1]))
    return found


def test_eight_processes_on_one_cold_problem_tune_it_once(remote, tmp_path, start_tuners):
    barrier = tmp_path / "barrier"
    procs = start_tuners(8, barrier, slow_s=1.5)
    wait_for(barrier, "ready-*", 8, procs)
    (barrier / "go").touch()
    found = results(procs)
    sources = sorted(r["source"] for r in found)
    assert sources == sorted(["tuned"] + [layer_name(remote)] * 7)
    assert sum(r["counters"].get("autotune_lock_held", 0) for r in found) == 1
    assert sum(r["counters"].get("autotune_lock_waited", 0) for r in found) == 7
    assert sum(r["counters"].get("autotune_remote_put", 0) for r in found) == 1
    assert all(r["error"] < 1e-5 for r in found)


def test_killing_the_lock_holder_lets_another_process_finish(remote, monkeypatch, tmp_path, start_tuners):
    monkeypatch.setenv("TUNESMITH_CACHE_LOCK_TTL_S", "1.5")
    barrier = tmp_path / "barrier"
    (barrier).mkdir()
    (barrier / "go").touch()
    holder = start_tuners(1, barrier, slow_s=600)
    wait_for(barrier, "tuning-*", 1, holder)  # it holds the lock and is tuning
    waiter = start_tuners(1, barrier, slow_s=0)
    wait_for(barrier, "ready-*", 2, holder + waiter)
    time.sleep(1.0)  # the waiter is waiting on the lock now
    os.kill(holder[0].pid, signal.SIGKILL)
    holder[0].wait()
    start = time.monotonic()
    [result] = results(waiter)
    assert result["source"] == "tuned" and result["error"] < 1e-5
    assert result["counters"]["autotune_lock_waited"] == 1 and result["counters"]["autotune_lock_held"] == 1
    assert time.monotonic() - start < 30


# --- export and import ---------------------------------------------------------------------


def test_export_and_import_ship_a_tuned_database_to_a_new_fleet(remote, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TUNESMITH_CACHE_SECRET", "fleet-secret")
    problems = [mm_inputs(n, n + 1, n + 2) for n in (5, 9, 13)]
    for a, b in problems:
        tunesmith.tune("mm", a, b)
    export = tmp_path / "tuned.json"
    assert main(["cache", "export", str(export)]) == 0
    assert f"exported 3 entries to {export}: 3 {layer_name(remote)}" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 2  # a shared layer: not without --yes (no terminal to ask at)
    assert "pass --yes" in capsys.readouterr().err and len(the_layer(remote).keys()) == 3
    assert main(["cache", "clear", "--yes"]) == 0
    assert the_layer(remote).keys() == []
    document = json.loads(export.read_text())
    document["entries"][0]["entry"]["payload"]["chosen"]["template"] = "tampered"
    export.write_text(json.dumps(document))
    assert main(["cache", "import", str(export)]) == 0
    captured = capsys.readouterr()
    assert f"imported 3 entries from {export}: 2 {layer_name(remote)}" in captured.out
    assert "bad signature" in captured.err
    tunesmith.reset()
    sources = [tunesmith.tune("mm", a, b).report.source for a, b in problems]
    assert sorted(sources) == sorted([layer_name(remote)] * 2 + ["tuned"])


def test_stats_of_a_dead_server_name_it_without_failing(remote, capsys):
    tunesmith.tune("mm", *mm_inputs())
    assert main(["cache", "stats"]) == 0
    assert re.search(rf"│ {layer_name(remote)}\s+│ \S+\s+│ 1\s+│", capsys.readouterr().out)
    remote.stop()
    assert main(["cache", "stats"]) == 0
    assert "unreachable" in capsys.readouterr().out


# --- the conformance suite -----------------------------------------------------------------


def test_the_plugin_passes_the_conformance_cache_checks(remote, monkeypatch):
    monkeypatch.delenv("TUNESMITH_CACHES")
    dead = {"redis_url": "redis://127.0.0.1:9/0", "memcache_servers": "127.0.0.1:9"}[remote.setting]
    proc = conformance(
        "-v", "--tunesmith-plugin", layer_name(remote), "--tunesmith-unreachable", f"{remote.setting}={dead}"
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert len(outcomes(proc, "test_cache_layer.py", "PASSED")) == 9  # locks and listing included


def test_four_fresh_compiles_share_the_plan_through_the_server(remote):
    """Four compiles as four fresh hosts make them: Inductor's own caches (local to a host) off, so
    that each compile reaches tunesmith's plan, which only the server holds after the first."""
    a, b = mm_inputs()
    totals = {"compiled_graph_remote_put": 0, "compiled_graph_remote_hit": 0}
    for _ in range(4):
        torch._dynamo.reset()
        tunesmith.reset()
        with (
            torch._inductor.config.patch(fx_graph_cache=False),
            torch._functorch.config.patch(enable_autograd_cache=False),
        ):
            out = torch.compile(lambda a, b: torch.relu(a @ b), backend="tunesmith")(a, b)
        assert torch.allclose(out, torch.relu(a @ b))
        for name in totals:
            totals[name] += tunesmith.counters[name]
    torch._dynamo.reset()
    assert totals == {"compiled_graph_remote_put": 1, "compiled_graph_remote_hit": 3}
