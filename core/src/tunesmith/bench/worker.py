"""``python -m tunesmith.bench.worker DEVICE PLUGINS``: a benchmark worker process (one per GPU).

It loads the entry-point plugins named in PLUGINS (a JSON list), then serves jobs read as JSON
lines on stdin, answering on the stdout it had at start (anything else printed goes to stderr):

- ``{"job": j, "kind": "setup", "problem", "specs", "options", "bool_inputs"}``: make random
  inputs of the Problem's layout, but the boolean ones (masks) from the caller's values in
  ``bool_inputs`` (:mod:`tunesmith.bench.masks`), and rebuild every spec into a choice (choices
  never cross the process boundary);
- ``{"job": j, "kind": "precompile", "index": i, "budget_left_s"}``: precompile choice ``i`` on one
  of ``compile_threads`` threads (with ``compile_in`` processes, first in a compile process, see
  :mod:`tunesmith.bench.compile_pool`, then here, where it loads what that one compiled);
- ``{"job": j, "kind": "time", "index": i, "give_up_ms"}``: check and time choice ``i``.

Each job answers ``{"job": j, "started": true}`` when it starts and ``{"job": j, "result": {...}}``
when it ends. After a CUDA error that leaves the context unusable (an illegal memory access) the
result carries ``"fatal": true`` and the worker exits, so that the parent starts a fresh one.
"""

from __future__ import annotations

import concurrent.futures
import faulthandler
import json
import os
import sys
import threading
import time
from typing import IO, Any

from tunesmith.bench.compile_pool import LOST, CompilePool

FATAL_EXIT = 70


class Server:
    """The state of one worker: the current Problem's inputs and choices, and the reply channel."""

    def __init__(self, device: str, replies: IO[str], plugins: list[str]) -> None:
        import torch

        self.device = torch.device(device)
        self.replies = replies
        self.lock = threading.Lock()
        self.session: dict[str, Any] | None = None
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.plugins = plugins  # the compile processes load these too
        self.compilers: CompilePool | None = None

    def reply(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.replies.write(json.dumps(record) + "\n")
            self.replies.flush()

    def serve(self, requests: IO[str]) -> None:
        self.reply({"ready": True, "pid": os.getpid()})
        for line in requests:
            job = json.loads(line)
            job["_received"] = time.monotonic()  # the precompile budget counts from here
            if job["kind"] == "precompile" and self.pool is not None:
                self.pool.submit(self.run, job)
            else:
                self.run(job)
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        if self.compilers is not None:
            self.compilers.close()

    def run(self, job: dict[str, Any]) -> None:
        from tunesmith.plugins import describe_error

        self.reply({"job": job["job"], "started": True})
        try:
            result = getattr(self, "_" + job["kind"])(job)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as this job's error
            result = {"error": describe_error(exc)}
            if self._cuda_broken():
                self.reply({"job": job["job"], "result": result, "fatal": True})
                os._exit(FATAL_EXIT)
        self.reply({"job": job["job"], "result": result})

    def _cuda_broken(self) -> bool:
        """Whether the CUDA context is unusable (a sticky error such as an illegal memory access)."""
        import torch

        if self.device.type != "cuda":
            return False
        try:
            torch.cuda.synchronize(self.device)
            torch.ones(1, device=self.device).add_(1).item()
        except Exception:  # noqa: BLE001 - any failure here means the context is gone
            return True
        return False

    def _setup(self, job: dict[str, Any]) -> dict[str, Any]:
        import torch

        from tunesmith import hooks
        from tunesmith.bench import masks
        from tunesmith.config import from_payload
        from tunesmith.problem import tensor_like
        from tunesmith.settings import current_options
        from tunesmith_hookspecs import ChoiceSpec, Problem, structure

        if self.pool is not None:
            self.pool.shutdown(wait=True)
        options = from_payload(current_options(), job["options"])
        torch.set_float32_matmul_precision(job.get("fp32_precision", "highest"))
        torch.backends.cudnn.allow_tf32 = job.get("cudnn_tf32", True)
        problem = structure(job["problem"], Problem)
        specs = [structure(raw, ChoiceSpec) for raw in job["specs"]]
        choices = hooks.rebuild_choices(specs, problem, options)
        inputs = [tensor_like(meta, self.device) for meta in problem.inputs]
        masks.apply(problem.inputs, inputs, job.get("bool_inputs", {}), self.device)
        self.session = {
            "problem": problem,
            "options": options,
            "inputs": inputs,
            "choices": choices,
            "precompiled": set(),
            # what a compile process rebuilds the choices from
            "raw": (job["problem"], job["specs"], job["options"], job.get("fp32_precision", "highest")),
        }
        self.pool = concurrent.futures.ThreadPoolExecutor(options.compile_threads, "tunesmith-compile")
        self.compile_processes(options)
        missing = {i: f"the worker process cannot rebuild {specs[i]}" for i, c in enumerate(choices) if c is None}
        return {"missing": missing}

    def compile_processes(self, options: Any) -> None:
        """Start, keep or stop the compile processes, as ``compile_in`` and ``compile_threads`` say."""
        wanted = options.compile_in == "processes" or (options.compile_in == "auto" and self.device.type == "cuda")
        current = self.compilers
        if current is not None and (not wanted or current.broken or current.size != options.compile_threads):
            current.close()
            self.compilers = current = None
        if wanted and current is None:
            self.compilers = CompilePool(options.compile_threads, self.plugins, str(self.device))

    def _choice(self, index: int) -> Any:
        assert self.session is not None, "a job before setup"
        choice = self.session["choices"][index]
        if choice is None:
            raise LookupError("this choice could not be rebuilt in the worker process")
        return choice

    def _precompile(self, job: dict[str, Any]) -> dict[str, Any]:
        from tunesmith.bench.inprocess import BUDGET_EXHAUSTED, precompile_one
        from tunesmith.bench.timing import synchronize
        from tunesmith.hooks import BASELINE_BACKEND

        left = job.get("budget_left_s")
        if left is not None and time.monotonic() - job["_received"] > left:
            return {"error": BUDGET_EXHAUSTED, "skipped": True}
        choice = self._choice(job["index"])
        began = time.monotonic()
        # ATen's choices compile nothing: their precompile loads a library's kernel, of use only here
        if self.compilers is not None and choice.spec.backend != BASELINE_BACKEND:
            problem, specs, options, fp32 = self.session["raw"]  # type: ignore[index]
            away = self.compilers.precompile(problem, specs[job["index"]], options, fp32)
            if away is not LOST and away is not None:
                return {"error": away}
        here = time.monotonic()
        error = precompile_one(choice)  # after a compile process, this loads what it compiled
        synchronize(self.device)  # a kernel launched while compiling fails here, not later
        if error is None:
            self.session["precompiled"].add(job["index"])  # type: ignore[index]
        # where the time went: in a compile process, and here (loading, or the whole compile)
        return {"error": error, "away_s": here - began, "here_s": time.monotonic() - here}

    def _time(self, job: dict[str, Any]) -> dict[str, Any]:
        from tunesmith.bench.inprocess import input_sets, measure

        session = self.session
        assert session is not None, "a job before setup"
        choice = self._choice(job["index"])
        if job["index"] not in session["precompiled"]:
            choice.precompile()  # a fresh worker after a crash: compile caches make this cheap
            session["precompiled"].add(job["index"])
        if "sets" not in session:  # the timed calls' input copies, made at the Problem's first timing
            session["sets"] = input_sets(session["problem"], session["inputs"], session["options"])
        m = measure(session["problem"], choice, session["sets"], self.device, session["options"], job["give_up_ms"])
        return {"ms": m.ms, "noise": m.noise}


def main(argv: list[str]) -> int:
    device, names = argv[0], json.loads(argv[1])
    # The protocol keeps the original stdout; prints from plugins (and C code) go to stderr.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()

    from tunesmith.plugins import reload_plugins
    from tunesmith.settings import current_options

    reload_plugins(only=names)
    server = Server(device, replies, names)
    # the compile processes boot now, beside this one's first Problem (each imports torch and
    # the backends and makes a CUDA context: seconds, which a cold tune would otherwise wait for)
    server.compile_processes(current_options())
    server.serve(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
