"""mm whose kernel sleeps for a minute: the benchmarker must kill it at its timeout."""

import time

from tunesmith_fixture_bench._mm import backend, nothing


def _slow(a, b):
    time.sleep(60)
    return a @ b


tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = backend(
    "fixture_sleep", {"sleep": (nothing, _slow)}
)
