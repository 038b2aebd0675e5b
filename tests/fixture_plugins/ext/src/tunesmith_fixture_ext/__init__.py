"""A third-party plugin that imports only tunesmith_hookspecs: a backend, a cache layer, a setting.

The backend offers ``torch.matmul`` for mm problems without an epilogue. The cache layer keeps
entries in a dict of this module, so tests can look inside.
"""

import torch

from tunesmith_hookspecs import ChoiceSpec, PluginStatus, hookimpl

NAME = "fixture_ext"
STORE: dict[str, bytes] = {}


class MatmulChoice:
    def __init__(self, spec, problem):
        self.spec = spec
        self.problem = problem

    def precompile(self):
        pass

    def kernel(self):
        return lambda a, b: torch.matmul(a, b).contiguous()


class DictLayer:
    name = "fixture_dict"

    def get(self, key):
        return STORE.get(key)

    def put(self, key, value):
        STORE[key] = value


@hookimpl
def tunesmith_add_options(options):
    options.add("fixture_ext_layer", True, parse=lambda v: str(v).lower() in ("1", "true"), help="offer the layer")


@hookimpl
def tunesmith_plugin_status():
    return PluginStatus(True)


@hookimpl
def tunesmith_choices(problem, options):
    if problem.op != "mm" or problem.epilogue:
        return []
    return [MatmulChoice(ChoiceSpec(NAME, "matmul"), problem)]


@hookimpl
def tunesmith_rebuild_choice(spec, problem):
    return MatmulChoice(spec, problem) if spec.backend == NAME else None


@hookimpl
def tunesmith_cache_layers(options):
    return [DictLayer()] if options.fixture_ext_layer else []
