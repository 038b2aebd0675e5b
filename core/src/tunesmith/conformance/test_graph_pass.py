"""Graph-pass checks: every pass the plugin returns has a uuid stable across processes, and leaves
graphs that still lint."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from tunesmith.conformance.pytest_plugin import require_kind


def _samples() -> list[Any]:
    import torch
    import torch.fx

    def mlp(x, w, b):
        return torch.relu(torch.addmm(b, x, w)) * 0.5

    def pointwise(x):
        return torch.cos(x) + torch.sin(x).sum()

    def two_mm(x1, x2, w):
        return torch.cat([torch.mm(x1, w), torch.mm(x2, w)], 1)

    return [torch.fx.symbolic_trace(f) for f in (mlp, pointwise, two_mm)]


@pytest.fixture(scope="session")
def passes(tunesmith_target: Any) -> list[tuple[str, Any]]:
    require_kind(tunesmith_target, "graph pass")
    found = tunesmith_target.passes()
    if not found:
        pytest.skip(f"plugin {tunesmith_target.name!r} returns no passes")
    return found


def test_uuids_are_stable_across_processes(tunesmith_target: Any, passes: list[tuple[str, Any]]) -> None:
    from tunesmith.passes import pass_uuid

    code = (
        "import json, sys\n"
        "from tunesmith.conformance.target import Target\n"
        "from tunesmith.passes import pass_uuid\n"
        "print(json.dumps([pass_uuid(p) for _, p in Target.load(sys.argv[1], 'cpu').passes()]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, tunesmith_target.name], capture_output=True, text=True, check=True
    )
    here = [pass_uuid(p) for _, p in passes]
    assert json.loads(out.stdout) == here, f"pass uuids differ between processes: {here} here"


def test_graphs_still_lint_after_each_pass(passes: list[tuple[str, Any]]) -> None:
    for where, graph_pass in passes:
        for gm in _samples():
            gm = copy.deepcopy(gm)
            graph_pass(gm.graph)
            try:
                gm.graph.lint()
            except Exception as exc:  # noqa: BLE001 - reported with the pass and the graph
                pytest.fail(f"{where} pass {graph_pass!r} broke graph {gm.__class__.__name__}: {exc}", pytrace=False)
