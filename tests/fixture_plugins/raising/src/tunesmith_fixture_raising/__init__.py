"""A backend whose only choice raises when it runs."""

from tunesmith_hookspecs import ChoiceSpec, hookimpl


class RaisingChoice:
    def __init__(self, problem):
        self.spec = ChoiceSpec("fixture_raising", "always_raises")
        self.problem = problem

    def precompile(self):
        pass

    def kernel(self):
        def run(*tensors):
            raise RuntimeError("fixture_raising's kernel fails on purpose")

        return run


@hookimpl
def tunesmith_choices(problem, options):
    return [RaisingChoice(problem)]
