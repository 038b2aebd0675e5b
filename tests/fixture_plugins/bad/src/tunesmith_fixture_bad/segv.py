"""mm whose only choice reads through a null pointer: the suite must survive and report it."""

import ctypes

from tunesmith_fixture_bad._mm import backend
from tunesmith_hookspecs import hookimpl


def _crash(a, b):
    ctypes.string_at(0)


_hooks = backend("fixture_segv", _crash, dtypes=["float32"])
tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = map(hookimpl, _hooks)
