"""mm with four correct choices, each of whose runs sleeps FIXTURE_FLEET_CALL_S (0.0625 s by default):
timed with one warm-up run and three timed ones, a choice costs 0.25 s to benchmark and a problem
one second to tune. Each precompile (four a tuning, one a rebuild from a cache entry) and each run
logs the pid, problem shape, template, time and event to FIXTURE_FLEET_LOG: who tuned what, when."""

import os
import time

from tunesmith_hookspecs import ChoiceSpec, PluginStatus, hookimpl

NAME = "fixture_fleet"
TEMPLATES = ("c0", "c1", "c2", "c3")


class Choice:
    def __init__(self, spec, problem):
        self.spec, self.problem = spec, problem
        m, k = problem.inputs[0].shape
        self.shape = f"{m}x{problem.inputs[1].shape[1]}x{k}"

    def _log(self, event):
        with open(os.environ["FIXTURE_FLEET_LOG"], "a") as log:
            log.write(f"{os.getpid()} {self.shape} {self.spec.template} {time.time():.3f} {event}\n")

    def precompile(self):
        self._log("compile")

    def kernel(self):
        pause = float(os.environ.get("FIXTURE_FLEET_CALL_S", "0.0625"))

        def run(a, b):
            self._log("run")
            time.sleep(pause)
            return a @ b

        return run


@hookimpl
def tunesmith_choices(problem, options):
    if problem.op != "mm" or problem.epilogue:
        return []
    return [Choice(ChoiceSpec(NAME, t), problem) for t in TEMPLATES]


@hookimpl
def tunesmith_rebuild_choice(spec, problem):
    return Choice(spec, problem) if spec.backend == NAME and spec.template in TEMPLATES else None


@hookimpl
def tunesmith_plugin_status():
    return PluginStatus(True, ops=["mm"], dtypes=["float32"])
