"""A right mm whose rebuild hook raises: cache hits would silently fall back to enumerating."""

from tunesmith_fixture_bad._mm import backend
from tunesmith_hookspecs import hookimpl

_hooks = backend("fixture_badrebuild", lambda a, b: (a @ b).contiguous(), dtypes=["float32"])
tunesmith_choices = hookimpl(_hooks[0])
tunesmith_plugin_status = hookimpl(_hooks[2])


@hookimpl
def tunesmith_rebuild_choice(spec, problem):
    raise KeyError("rebuild table lost")
