"""mm whose kernel runs only under the float32 matmul precision "high": the benchmark worker must
use its caller's TF32 permission."""

import torch

from tunesmith_fixture_bench._mm import backend, nothing


def _high_only(a, b):
    precision = torch.get_float32_matmul_precision()
    if precision != "high":
        raise RuntimeError(f"float32 matmul precision is {precision!r}, not the caller's 'high'")
    return a @ b


tunesmith_choices, tunesmith_rebuild_choice, tunesmith_plugin_status = backend(
    "fixture_precision", {"high_only": (nothing, _high_only)}
)
