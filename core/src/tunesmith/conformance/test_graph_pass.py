"""Graph-pass checks: every pass the plugin returns has a uuid of its own, the same in another
process, and leaves sample graphs that still lint: torch-level graphs for pre-grad passes, aten-level
graphs (as AOTAutograd makes them) for joint-graph and post-grad passes."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tunesmith.conformance.pytest_plugin import items_of


def _samples(aten: bool) -> dict[str, Any]:
    import torch
    import torch.fx
    from torch.fx.experimental.proxy_tensor import make_fx

    def mlp(x, w, b):
        return torch.relu(torch.addmm(b, x, w)) * 0.5

    def pointwise(x, w, b):
        return torch.cos(x) + torch.sin(x).sum() + b.sum()

    def two_mm(x, w, b):
        return torch.cat([torch.mm(x, w), torch.mm(x * 2, w)], 0) + b

    args = (torch.randn(8, 16), torch.randn(16, 4), torch.randn(4))
    trace = (lambda f: make_fx(f)(*args)) if aten else torch.fx.symbolic_trace
    return {f.__name__: trace(f) for f in (mlp, pointwise, two_mm)}


@pytest.fixture(scope="session")
def passes(tunesmith_target: Any) -> list[tuple[str, Any]]:
    return items_of(tunesmith_target, "graph pass", tunesmith_target.passes, "returns no passes")


UUIDS = """
import json, sys
from tunesmith.conformance.target import Target
from tunesmith.passes import pass_uuid
print(json.dumps([pass_uuid(p) for _, p in Target.load(sys.argv[1], "cpu").passes()]))
"""


def test_uuids_are_stable_across_processes(tunesmith_target: Any, passes: list[tuple[str, Any]]) -> None:
    from tunesmith.passes import pass_uuid

    env = {**os.environ, "PYTHONHASHSEED": "random"}
    proc = subprocess.run([sys.executable, "-c", UUIDS, tunesmith_target.name], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"listing the passes in another process failed:\n{proc.stderr[-1500:]}"
    here = [pass_uuid(p) for _, p in passes]
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    changed = [f"{where} {p!r}" for (where, p), a, b in zip(passes, here, there, strict=True) if a != b]
    assert not changed, f"pass uuids differ between processes: {changed}"


def test_uuids_are_unique_within_the_plugin(passes: list[tuple[str, Any]]) -> None:
    """Two passes may share a uuid only when they are the same function, or objects of one class."""
    import inspect

    from tunesmith.passes import pass_uuid

    seen: dict[str, tuple[Any, str]] = {}
    for where, graph_pass in passes:
        kind = graph_pass if inspect.isfunction(graph_pass) else (type(graph_pass), getattr(graph_pass, "func", None))
        first_kind, first = seen.setdefault(pass_uuid(graph_pass), (kind, f"{where} {graph_pass!r}"))
        assert first_kind == kind, f"{where} {graph_pass!r} and {first} share a uuid: give each pass its own"


def test_graphs_still_lint_after_each_pass(passes: list[tuple[str, Any]]) -> None:
    from tunesmith.plugins import describe_error

    samples = {False: _samples(aten=False), True: _samples(aten=True)}
    for where, graph_pass in passes:
        for name, gm in samples[not where.startswith("tunesmith_pre_grad")].items():
            gm = copy.deepcopy(gm)
            try:
                graph_pass(gm.graph)
            except Exception as exc:  # noqa: BLE001 - reported with the pass and the graph
                pytest.fail(f"{where} pass {graph_pass!r} raised on sample graph {name!r}: {describe_error(exc)}")
            try:
                gm.graph.lint()
            except Exception as exc:  # noqa: BLE001 - reported with the pass and the graph
                pytest.fail(f"{where} pass {graph_pass!r} broke sample graph {name!r}: {exc}", pytrace=False)
