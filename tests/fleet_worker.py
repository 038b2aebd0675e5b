"""One process of a fleet run (test_fleet_runs.py): joins a gloo process group when FLEET_GLOO
names one, says it is ready, waits for the start file, runs ``tunesmith tune`` in-process, and
writes when it started and ended, its exit status and its counters as JSON.

    python fleet_worker.py OUT.json START END -- tune SET.json --backends ...
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    out, start_file, end_file = (Path(a) for a in sys.argv[1:4])
    args = sys.argv[5:]
    import torch.distributed as dist

    import tunesmith
    from tunesmith import selection  # noqa: F401 - torch and the core loaded before the clock starts
    from tunesmith.cli import main as cli
    from tunesmith.plugins import get_system

    get_system()  # the plugins too

    init = os.environ.get("FLEET_GLOO")
    if init:
        rank, world = int(os.environ["FLEET_RANK"]), int(os.environ["FLEET_WORLD"])
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    out.with_suffix(".ready").touch()
    while not start_file.exists():
        time.sleep(0.005)
    start = time.time()
    code = cli(args)
    end = time.time()
    body = {"code": code, "start": start, "end": end, "pid": os.getpid(), "counters": dict(tunesmith.counters)}
    out.write_text(json.dumps(body))
    while init and not end_file.exists():  # rank 0 serves the job's store: every rank stays to the end
        time.sleep(0.05)
    sys.stdout.flush()
    os._exit(0)  # no process-group teardown: the ranks end as a job's would, each on its own


if __name__ == "__main__":
    main()
