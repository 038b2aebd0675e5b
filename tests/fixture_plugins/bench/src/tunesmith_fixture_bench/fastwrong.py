"""mm that returns the same preallocated tensor of ones: right shape, wrong values, faster than
any real matmul. Only verification catches it."""

import torch

from tunesmith_fixture_bench._mm import backend, nothing

_outputs = {}


def _ones(a, b):
    key = (a.shape[0], b.shape[1], a.dtype, a.device)
    if key not in _outputs:
        _outputs[key] = torch.ones(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    return _outputs[key]


tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = backend(
    "fixture_fastwrong", {"ones": (nothing, _ones)}
)
