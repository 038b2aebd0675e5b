"""A plugin whose import fails: tunesmith must list it with this error and keep working."""

raise RuntimeError("fixture_broken fails to import on purpose")
