"""A tiny mm backend to build the wrong ones from."""

from tunesmith_hookspecs import ChoiceSpec, PluginStatus


class MatmulChoice:
    def __init__(self, spec, problem, fn):
        self.spec, self.problem, self.fn = spec, problem, fn

    def precompile(self):
        pass

    def kernel(self):
        return self.fn


def backend(name, fn, dtypes=None, choice=MatmulChoice):
    """(choices, rebuild, status) hookimpl bodies for a backend offering ``fn`` for plain mm."""

    def choices(problem, options):
        if problem.op != "mm" or problem.epilogue:
            return []
        return [choice(ChoiceSpec(name, "mm"), problem, fn)]

    def rebuild(spec, problem):
        return choice(spec, problem, fn) if spec.backend == name else None

    def status():
        return PluginStatus(True, ops=["mm"], dtypes=dtypes)

    return choices, rebuild, status
