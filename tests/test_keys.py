"""Keys hold across processes: the same problem built in two processes, from layouts that differ
only where the layout is arbitrary (the strides of size-1 dimensions), has the same key; a layout
that differs for real does not."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from tunesmith.compile.graphcache import _layout

from conftest import run_env

SCRIPT = """
import json, sys, torch
from tunesmith.problem import build_problem

arbitrary = sys.argv[1] == "other"
x = torch.randn(64, 32, 1, 1)  # a squeeze-and-excitation 1x1 convolution's input
row = torch.randn(1, 8)  # one token's activations
bias = torch.randn(1, 16)
if arbitrary:
    x = torch.randn(64, 1, 1, 32).permute(0, 3, 1, 2)  # channels-last: strides (32, 1, 32, 32)
    row = torch.randn(8, 1).t()
    bias = torch.randn(16, 1).t()
w = torch.randn(16, 32, 1, 1)
print(json.dumps([
    build_problem("conv", [x, w], {})[0].key(),
    build_problem("mm", [row, torch.randn(8, 16)], {})[0].key(),
    build_problem("addmm", [bias, row, torch.randn(8, 16)], {})[0].key(),
]))
"""


def keys(layouts: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, layouts], env=run_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_problem_keys_are_the_same_in_two_processes_whatever_the_size_1_strides():
    assert keys("contiguous") == keys("other")


def test_a_real_layout_difference_still_changes_the_key():
    from tunesmith.problem import build_problem

    a, b = torch.randn(4, 8), torch.randn(8, 16)
    transposed = torch.randn(8, 4).t()
    assert build_problem("mm", [a, b], {})[0].key() != build_problem("mm", [transposed, b], {})[0].key()


def test_graph_keys_leave_out_size_1_strides():
    x = torch.randn(64, 32, 1, 1)
    assert _layout(x) == _layout(torch.randn(64, 1, 1, 32).permute(0, 3, 1, 2))
    assert _layout(x) != _layout(torch.randn(32, 64, 1, 1).transpose(0, 1))
