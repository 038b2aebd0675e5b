"""Backend checks: every choice of the plugin on the problem matrix, against a float64 reference.

The cases run in worker processes (a crash or hang fails its case, naming the choice, and the
rest go on). Each case checks, for every choice the plugin offers: the output's layout and its
relative error against the tolerance of the dtype (new memory is NaN-filled, so unwritten output
fails), the spec's JSON round trip, the choice rebuilt from that JSON, and that the benchmarker
times a choice that raises as infinite (and the first that ran as finite).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from tunesmith.conformance.cases import DTYPES, Case, make, matrix
from tunesmith.conformance.checks import failures
from tunesmith.conformance.isolation import run_isolated
from tunesmith.conformance.pytest_plugin import get_target, require_kind
from tunesmith_hookspecs import OPS

_PLAN = pytest.StashKey[tuple[list[Case], list[tuple[str, str]]]]()


def _plan(config: pytest.Config) -> tuple[list[Case], list[tuple[str, str]]]:
    """The cases to check: every declared op (or every op, when none are declared) and dtype."""
    if _PLAN not in config.stash:
        target = get_target(config)
        if target is None or "backend" not in target.kinds or not target.record.loaded or not target.status.runnable:
            config.stash[_PLAN] = ([], [])
        else:
            ops = tuple(op for op in OPS if target.status.ops is None or op in target.status.ops)
            config.stash[_PLAN] = (matrix(ops), list(itertools.product(ops, DTYPES)))
    return config.stash[_PLAN]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cases, pairs = _plan(metafunc.config)
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", cases or [None], ids=[c.id for c in cases] or ["no-cases"])
    if "op_dtype" in metafunc.fixturenames:
        metafunc.parametrize("op_dtype", pairs or [None], ids=["-".join(p) for p in pairs] or ["no-cases"])


def _device_type(backend: Any) -> str:
    return torch.device(backend.device).type


@pytest.fixture(scope="session")
def backend(tunesmith_target: Any) -> Any:
    require_kind(tunesmith_target, "backend")
    if not tunesmith_target.status.runnable:
        pytest.skip(f"plugin {tunesmith_target.name!r} cannot run here: {tunesmith_target.status.reason}")
    return tunesmith_target


def _selected(request: pytest.FixtureRequest, name: str) -> set[Any]:
    params = (getattr(getattr(item, "callspec", None), "params", {}) for item in request.session.items)
    return {p[name] for p in params if name in p}


@pytest.fixture(scope="session")
def results(backend: Any, request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """The result of every selected case (``-k`` narrows it), computed once in worker processes."""
    cases, _ = _plan(request.config)
    cases_wanted, pairs_wanted = _selected(request, "case"), _selected(request, "op_dtype")
    wanted = [c for c in cases if c in cases_wanted or (c.op, c.dtype) in pairs_wanted]
    todo = [c for c in wanted if not backend.status.supports(c.op, c.dtype, _device_type(backend))]
    return run_isolated(backend.name, backend.device, todo, request.config.getoption("tunesmith_case_timeout"))


def test_case(backend: Any, results: dict[str, dict[str, Any]], case: Case | None) -> None:
    if case is None:
        pytest.fail(f"no cases were planned for backend {backend.name!r}", pytrace=False)
    why = backend.status.supports(case.op, case.dtype, _device_type(backend))
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
    """A declared op and dtype with no choice on any non-empty problem of the matrix is a silent gap."""
    if op_dtype is None:
        pytest.fail(f"no ops were planned for backend {backend.name!r}", pytrace=False)
    op, dtype = op_dtype
    why = backend.status.supports(op, dtype, _device_type(backend))
    if why:
        pytest.skip(why)
    mine = [r for r in results.values() if r["id"].startswith(f"{op}-{dtype}-")]
    if any(r.get("choices") and "-zero-" not in r["id"] for r in mine):
        return
    if backend.status.ops is None and not any(r.get("choices") or r.get("error") or r.get("crashed") for r in mine):
        pytest.skip(
            f"{backend.name} offers nothing for {op} {dtype} (declare ops in tunesmith_plugin_status to say so)"
        )
    why = sorted({r.get("no_choices") or r.get("error") or r.get("crashed") or r.get("skip", "?") for r in mine})
    pytest.fail(
        f"{backend.name} gave no choices for {op} {dtype} on {backend.device} on any non-empty problem of "
        f"{len(mine)} ({'; '.join(why)[:500]}); declare what it supports in tunesmith_plugin_status",
        pytrace=False,
    )


def test_keys_are_stable_across_processes(backend: Any, results: dict[str, dict[str, Any]]) -> None:
    """Problem keys and the specs offered, computed here, equal those of the worker process."""
    from tunesmith import hooks
    from tunesmith.conformance.checks import hooks_options
    from tunesmith.problem import build_problem

    options = hooks_options(backend.name)
    checked = 0
    for op in sorted({r["id"].split("-")[0] for r in results.values() if r.get("choices")}):
        result = next(r for r in results.values() if r["id"].startswith(f"{op}-") and r.get("choices"))
        case = next(c for c in matrix((op,)) if c.id == result["id"])
        tensors, scalars, epilogue = make(case, backend.device)
        problem = build_problem(op, tensors, scalars, epilogue)[0]
        assert problem.key() == result["problem_key"], f"Problem.key() of {result['problem']} differs between processes"
        here = sorted((str(c.spec), c.spec.key()) for c in hooks.choices(problem, options)[0])
        there = sorted((row["spec"], row["spec_key"]) for row in result["choices"])
        assert here == there, f"{backend.name}'s choices for {result['problem']} differ between processes"
        checked += 1
    if not checked:
        pytest.skip("no case gave choices to compare")
