"""mm with three choices precompiling at once; the precompile of ``crash`` reads through a null
pointer. Only that one may be blamed."""

import ctypes
import time

from tunesmith_fixture_bench._mm import backend, matmul


def _slow(spec):
    time.sleep(1.0)


def _crash(spec):
    time.sleep(0.2)
    ctypes.string_at(0)


_variants = {"slow1": (_slow, matmul), "crash": (_crash, matmul), "slow2": (_slow, matmul)}
tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = backend("fixture_compilecrash", _variants)
