"""A cache layer that hands back different bytes than it was given."""

from tunesmith_fixture_bad._files import FileLayer, root
from tunesmith_hookspecs import hookimpl


class Corrupt(FileLayer):
    def transform(self, value):
        return value[:-1] + bytes([value[-1] ^ 0xFF]) if value else value


@hookimpl
def tunesmith_cache_layers(options):
    return [Corrupt("fixture_corrupt", root(options))]
