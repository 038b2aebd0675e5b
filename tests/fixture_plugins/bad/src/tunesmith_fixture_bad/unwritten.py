"""mm that never writes the last row of its output: only poisoned memory shows it."""

import torch

from tunesmith_fixture_bad._mm import backend
from tunesmith_hookspecs import hookimpl


def _mm(a, b):
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    if a.shape[0] > 1:
        torch.mm(a[:-1], b, out=out[:-1])
    return out


_hooks = backend("fixture_unwritten", _mm, dtypes=["float32"])
tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = map(hookimpl, _hooks)
