"""mm whose result is off by 1% (relative): a subtle bug the reference must catch."""

from tunesmith_fixture_bad._mm import backend
from tunesmith_hookspecs import hookimpl

_hooks = backend("fixture_wrong", lambda a, b: (a @ b * 1.01).contiguous())
tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = map(hookimpl, _hooks)
