"""Backend checks: every choice of the plugin on the problem matrix, against a float64 reference.

The cases run in worker processes (a crash or hang fails its case, naming the choice, and the
rest go on). Each case checks, for every choice the plugin offers: the output's layout and its
relative error against the tolerance of the dtype (output poisoned with NaN first on CUDA), the
spec's JSON round trip, the choice rebuilt from that JSON, and that the benchmarker times a
failing choice as infinite.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tunesmith.conformance.cases import DTYPES, Case, make, matrix
from tunesmith.conformance.checks import failures
from tunesmith.conformance.isolation import run_isolated
from tunesmith.conformance.pytest_plugin import get_target, require_kind
from tunesmith_hookspecs import OPS


def _offered_ops(target: Any) -> tuple[str, ...]:
    """The ops the plugin declares, else those it offers any choice for on a small problem."""
    if target.status.ops is not None:
        return tuple(op for op in OPS if op in target.status.ops)
    from tunesmith import hooks
    from tunesmith.problem import build_problem
    from tunesmith.settings import current_options

    options = current_options({"backends": [target.name]})
    offered = []
    for op, dtype in itertools.product(OPS, DTYPES):
        if op in offered:
            continue
        tensors, scalars, epilogue = make(Case(op, dtype, "odd17"), target.device)
        if hooks.choices(build_problem(op, tensors, scalars, epilogue)[0], options)[0]:
            offered.append(op)
    return tuple(offered)


def _plan(config: pytest.Config) -> tuple[list[Case], list[tuple[str, str]]]:
    target = get_target(config)
    if target is None or "backend" not in target.kinds or not target.record.loaded or not target.status.runnable:
        return [], []
    ops = _offered_ops(target)
    return matrix(ops), list(itertools.product(ops, DTYPES))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cases, pairs = _plan(metafunc.config)
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", cases or [None], ids=[c.id for c in cases] or ["no-cases"])
    if "op_dtype" in metafunc.fixturenames:
        metafunc.parametrize("op_dtype", pairs or [None], ids=["-".join(p) for p in pairs] or ["no-cases"])


@pytest.fixture(scope="session")
def backend(tunesmith_target: Any) -> Any:
    require_kind(tunesmith_target, "backend")
    if not tunesmith_target.status.runnable:
        pytest.skip(f"plugin {tunesmith_target.name!r} cannot run here: {tunesmith_target.status.reason}")
    return tunesmith_target


@pytest.fixture(scope="session")
def results(backend: Any, request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """The result of every selected case (``-k`` narrows it), computed once in worker processes."""
    selected = {
        item.callspec.params["case"]
        for item in request.session.items
        if "case" in getattr(getattr(item, "callspec", None), "params", {})
    }
    op_dtypes = {
        item.callspec.params["op_dtype"]
        for item in request.session.items
        if "op_dtype" in getattr(getattr(item, "callspec", None), "params", {})
    }
    cases, _ = _plan(request.config)
    wanted = [c for c in cases if c in selected or (c.op, c.dtype) in op_dtypes]
    todo = [c for c in wanted if not backend.status.supports(c.op, c.dtype, backend.device)]
    timeout = request.config.getoption("tunesmith_case_timeout")
    return run_isolated(backend.name, backend.device, todo, timeout)


def test_case(backend: Any, results: dict[str, dict[str, Any]], case: Case) -> None:
    why = backend.status.supports(case.op, case.dtype, backend.device)
    if why:
        pytest.skip(why)
    result = results[case.id]
    if "skip" in result:
        pytest.skip(result["skip"])
    problems = failures(result)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    if "no_choices" in result:
        pytest.skip(f"{backend.name} {result['no_choices']} ({result['problem']})")


def test_every_op_and_dtype_gets_choices(backend: Any, results: dict[str, dict[str, Any]], op_dtype: Any) -> None:
    """A supported op and dtype with no choice on any problem of the matrix is a silent gap."""
    if op_dtype is None:
        pytest.fail(f"plugin {backend.name!r} offers no choices for any op: declare ops in tunesmith_plugin_status")
    op, dtype = op_dtype
    why = backend.status.supports(op, dtype, backend.device)
    if why:
        pytest.skip(why)
    mine = [r for r in results.values() if r["id"].startswith(f"{op}-{dtype}-")]
    if not any(r.get("choices") for r in mine):
        reasons = sorted(
            {r.get("no_choices") or r.get("error") or r.get("crashed") or r.get("skip", "?") for r in mine}
        )
        pytest.fail(
            f"{backend.name} gave no choices for {op} {dtype} on {backend.device} on any of {len(mine)} "
            f"problems ({'; '.join(reasons)}); declare what it supports in tunesmith_plugin_status",
            pytrace=False,
        )


def test_keys_are_stable_across_processes(backend: Any, results: dict[str, dict[str, Any]]) -> None:
    """Problem keys and spec keys computed here equal those the worker process computed."""
    from tunesmith import hooks
    from tunesmith.problem import build_problem
    from tunesmith.settings import current_options

    options = current_options({"backends": [backend.name]})
    checked = 0
    for op in {r["id"].split("-")[0] for r in results.values() if r.get("choices")}:
        result = next(r for r in results.values() if r["id"].startswith(f"{op}-") and r.get("choices"))
        case = next(c for c in matrix((op,)) if c.id == result["id"])
        tensors, scalars, epilogue = make(case, backend.device)
        problem = build_problem(op, tensors, scalars, epilogue)[0]
        assert problem.key() == result["problem_key"], f"Problem.key() of {result['problem']} differs between processes"
        here = sorted(c.spec.key() for c in hooks.choices(problem, options)[0])
        there = sorted(row["spec_key"] for row in result["choices"] if "spec_key" in row)
        assert here == there, f"{backend.name}'s choices for {result['problem']} differ between processes"
        checked += 1
    if not checked:
        pytest.skip("no case gave choices to compare")
