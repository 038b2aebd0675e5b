"""A shared layer whose lock ignores tokens and never expires, and whose listing is empty."""

import os

from tunesmith_fixture_bad._files import FileLayer, root
from tunesmith_hookspecs import hookimpl


class BadLock(FileLayer):
    def _lock(self, key):
        return self.root / f"lock-{key}"

    def acquire(self, key, ttl_s):
        try:
            os.close(os.open(self._lock(key), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return None
        return "token"

    def refresh(self, key, token, ttl_s):
        return True

    def release(self, key, token):
        self._lock(key).unlink(missing_ok=True)

    def keys(self):
        return []

    def stats(self):
        return {"entries": 0}

    def clear(self):
        return 0


@hookimpl
def tunesmith_cache_layers(options):
    return [BadLock("fixture_badlock", root(options))]
