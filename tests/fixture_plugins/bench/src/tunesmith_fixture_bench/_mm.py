"""A small mm backend to build the others from: named choices, each with its own precompile and kernel."""

from tunesmith_hookspecs import ChoiceSpec, PluginStatus, hookimpl


class Choice:
    def __init__(self, spec, precompile, fn):
        self.spec, self._precompile, self.fn = spec, precompile, fn

    def precompile(self):
        self._precompile(self.spec)

    def kernel(self):
        return self.fn


def matmul(a, b):
    return a @ b


def nothing(spec):
    pass


def backend(name, variants):
    """Hookimpls offering, for plain float32 mm, one choice per ``variants`` entry
    ``template -> (precompile(spec), kernel)``."""

    def make(spec):
        precompile, fn = variants[spec.template]
        return Choice(spec, precompile, fn)

    @hookimpl
    def tunesmith_choices(problem, options):
        if problem.op != "mm" or problem.epilogue:
            return []
        return [make(ChoiceSpec(name, template)) for template in variants]

    @hookimpl
    def tunesmith_rebuild_choice(spec, problem):
        return make(spec) if spec.backend == name and spec.template in variants else None

    @hookimpl
    def tunesmith_plugin_status():
        return PluginStatus(True, ops=["mm"], dtypes=["float32"])

    return tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status
