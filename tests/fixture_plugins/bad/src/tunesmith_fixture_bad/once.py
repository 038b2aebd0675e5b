"""mm whose choice builds its kernel once: the callable of a second ``kernel()`` call raises, as a
plugin's would that frees its module after the first launch. Only the benchmarker's run shows it."""

import torch

from tunesmith_fixture_bad._mm import MatmulChoice, backend
from tunesmith_hookspecs import hookimpl


def _freed(*tensors):
    raise RuntimeError("fixture_once's kernel was freed after its first build")


class OnceChoice(MatmulChoice):
    built = False

    def kernel(self):
        if self.built:
            return _freed
        self.built = True
        return self.fn


_hooks = backend("fixture_once", torch.mm, dtypes=["float32"], choice=OnceChoice)
tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = map(hookimpl, _hooks)
