"""mm with one correct choice besides ATen's, whose precompile sleeps FIXTURE_SLOWBUILD_S (1 s by
default), as a compiler would, and whose kernel keeps its last product (right while the inputs
are unchanged), so that it beats ATen's and wins: a process taking the winner builds it too. Each
precompile logs the
pid, problem shape, time and where it ran (``tune``: a tuning's worker or thread; ``load``: a
process taking the winner) to FIXTURE_SLOWBUILD_LOG, if set."""

import os
import threading
import time

from tunesmith_hookspecs import ChoiceSpec, PluginStatus, hookimpl

NAME = "fixture_slowbuild"


class Choice:
    def __init__(self, spec, problem):
        self.spec = spec
        m, k = problem.inputs[0].shape
        self.shape = f"{m}x{problem.inputs[1].shape[1]}x{k}"

    def precompile(self):
        began = time.time()
        time.sleep(float(os.environ.get("FIXTURE_SLOWBUILD_S", "1.0")))
        path = os.environ.get("FIXTURE_SLOWBUILD_LOG")
        if path:
            with open(path, "a") as log:
                where = threading.current_thread().name.replace(" ", "_")
                log.write(f"{os.getpid()} {self.shape} {began:.3f} {time.time():.3f} {where}\n")

    def kernel(self):
        last = {}

        def run(a, b):
            key = (a.data_ptr(), a._version, b.data_ptr(), b._version)
            if key not in last:
                last.clear()
                last[key] = a @ b
            return last[key]

        return run


@hookimpl
def tunesmith_choices(problem, options):
    if problem.op != "mm" or problem.epilogue:
        return []
    return [Choice(ChoiceSpec(NAME, "build"), problem)]


@hookimpl
def tunesmith_rebuild_choice(spec, problem):
    return Choice(spec, problem) if spec.backend == NAME and spec.template == "build" else None


@hookimpl
def tunesmith_plugin_status():
    return PluginStatus(True, ops=["mm"], dtypes=["float32"])
