"""A backend whose tunesmith_choices itself raises."""

from tunesmith_hookspecs import PluginStatus, hookimpl


@hookimpl
def tunesmith_plugin_status():
    return PluginStatus(True, ops=["mm"], dtypes=["float32"])


@hookimpl
def tunesmith_choices(problem, options):
    raise RuntimeError("choice table corrupt")
