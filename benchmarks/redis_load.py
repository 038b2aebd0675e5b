"""Load test of the Redis layer: many processes doing cache look-ups against one redis-server.

Each look-up is what a tunesmith process does on a memory miss: ``CacheStack.get`` through the
``redis`` layer (GET, the JSON envelope, the HMAC-SHA256 check, strict structuring of the
entry). The database holds ``--keys`` signed entries made from a real tuning result; every
look-up is for a random one of them (all hits). Prints and writes (``--json``) look-ups per
second, p50/p99/max latency and the error count.

    python benchmarks/redis_load.py --json benchmarks/results/redis_load_cpu.json

Starts its own redis-server on a free loopback port unless ``--url`` is given.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SECRET = "load-test-secret"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not installed (apt-get install -y redis-server), or give --url")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.01)
    proc.kill()
    sys.exit("redis-server did not start")


def populate(url: str, keys: int) -> list[str]:
    """``keys`` signed autotune entries, each the payload of one real tuning, under random keys."""
    import torch
    from tunesmith_redis import RedisLayer

    import tunesmith
    from tunesmith.cache.entry import encode
    from tunesmith_hookspecs import unstructure

    with tunesmith.options(caches=[]):
        selection = tunesmith.tune("mm", torch.randn(64, 64), torch.randn(64, 64))
    from tunesmith.selection import SelectionEntry

    report = selection.report
    payload = unstructure(SelectionEntry(report.chosen, report.timings, report.device_name, report.tuning_s))
    layer = RedisLayer(url, timeout_s=2.0)
    names = [os.urandom(32).hex() for _ in range(keys)]
    pipe = layer.client.pipeline(transaction=False)
    for name in names:
        pipe.set("tunesmith:v1:e:" + name, encode("autotune", name, payload, SECRET))
    pipe.execute()
    return names


def worker(url: str, names: list[str], lookups: int, timeout_s: float, start: Any, out: Any) -> None:
    from tunesmith_redis import RedisLayer

    from tunesmith.cache.stack import CacheStack
    from tunesmith.selection import SelectionEntry
    from tunesmith_hookspecs import structure

    stack = CacheStack([RedisLayer(url, timeout_s=timeout_s)], "autotune", SECRET, 30.0)
    rng = random.Random(os.getpid())
    latencies, errors = [], 0
    start.wait()
    for _ in range(lookups):
        key = rng.choice(names)
        t0 = time.perf_counter_ns()
        try:
            found = stack.get(key, lambda payload: structure(payload, SelectionEntry))
        except Exception:  # noqa: BLE001 - counted
            found = None
        latencies.append(time.perf_counter_ns() - t0)
        errors += found is None
    out.put({"latencies_ns": latencies, "errors": errors})


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing Redis (default: start one)")
    parser.add_argument("--processes", type=int, default=32)
    parser.add_argument("--lookups", type=int, default=1000, help="per process")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--timeout-s", type=float, default=0.5, help="redis_timeout_s of the layers")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="redis-load-")
    server, url = (None, args.url) if args.url else start_redis(workdir)
    try:
        names = populate(url, args.keys)
        ctx = mp.get_context("spawn")
        start, out = ctx.Barrier(args.processes + 1), ctx.Queue()
        procs = [
            ctx.Process(target=worker, args=(url, names, args.lookups, args.timeout_s, start, out))
            for _ in range(args.processes)
        ]
        for p in procs:
            p.start()
        start.wait()  # every process is set up: go
        t0 = time.perf_counter()
        parts = [out.get() for _ in procs]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join()
        import redis

        redis_version = redis.Redis.from_url(url).info("server")["redis_version"]
    finally:
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(workdir, ignore_errors=True)

    latencies = sorted(ns / 1e6 for part in parts for ns in part["latencies_ns"])
    total = len(latencies)
    result = {
        "benchmark": "redis_load",
        "device": f"{cpu_name()}, {os.cpu_count()} CPUs (clients and server share them)",
        "redis_server": redis_version,
        "python": platform.python_version(),
        "processes": args.processes,
        "lookups_per_process": args.lookups,
        "keys": args.keys,
        "lookups": total,
        "errors": sum(part["errors"] for part in parts),
        "wall_s": round(wall, 3),
        "lookups_per_s": round(total / wall, 1),
        "latency_ms": {
            "p50": round(percentile(latencies, 0.50), 4),
            "p99": round(percentile(latencies, 0.99), 4),
            "max": round(latencies[-1], 4),
            "mean": round(statistics.fmean(latencies), 4),
        },
        "what": "CacheStack.get through the redis layer: GET, JSON envelope, HMAC-SHA256 check, structuring",
    }
    print(
        f"{total} look-ups by {args.processes} processes in {wall:.2f} s: {result['lookups_per_s']:.0f}/s, "
        f"p50 {result['latency_ms']['p50']:.3f} ms, p99 {result['latency_ms']['p99']:.3f} ms, "
        f"errors {result['errors']}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
