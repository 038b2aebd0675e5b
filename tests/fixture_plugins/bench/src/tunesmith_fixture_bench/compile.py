"""mm with eight correct choices whose precompile takes 0.3 s and logs where it ran
(pid, thread id, thread name) to the file named by FIXTURE_COMPILE_LOG."""

import os
import threading
import time

from tunesmith_fixture_bench._mm import backend, matmul


def _compile(spec):
    time.sleep(0.3)
    with open(os.environ["FIXTURE_COMPILE_LOG"], "a") as log:
        log.write(f"{os.getpid()} {threading.get_ident()} {threading.current_thread().name} {spec.template}\n")


_variants = {f"config{i}": (_compile, matmul) for i in range(8)}
tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = backend("fixture_compile", _variants)
