"""A cache layer that silently drops values over 1 MiB."""

from tunesmith_fixture_bad._files import FileLayer, root
from tunesmith_hookspecs import hookimpl


class DropLarge(FileLayer):
    def keep(self, value):
        return len(value) <= 1 << 20


@hookimpl
def tunesmith_cache_layers(options):
    return [DropLarge("fixture_droplarge", root(options))]
