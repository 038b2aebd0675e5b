"""tunesmith.testing from the outside: a third-party plugin's test suite that opts in to the kit
(pytester, in a fresh process) passes with a working plugin, fails with a broken one, and leaks
neither the caller's TUNESMITH_* environment in nor its plugins, sys.path or cache out."""

from __future__ import annotations

import importlib.metadata
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PLUGIN = """
import torch
from tunesmith_hookspecs import ChoiceSpec, hookimpl

OFFSET = {offset}  # 0: a right answer; anything else: the bug the plugin's tests must catch


class TinyChoice:
    def __init__(self):
        self.spec = ChoiceSpec("tiny", "mm")

    def precompile(self):
        pass

    def kernel(self):
        return lambda a, b: torch.mm(a, b) + OFFSET


@hookimpl
def tunesmith_choices(problem, options):
    return [TinyChoice()] if problem.op == "mm" and not problem.epilogue else []
"""

# The plugin author's tests: what a conftest with the kit gives them.
TESTS = """
import os
import sys
from pathlib import Path

import torch

import tunesmith
from tunesmith.plugins import get_system
from tunesmith_hookspecs import ChoiceSpec, hookimpl

SITE = {site!r}


def test_the_plugin_alone_gives_the_right_answer(tunesmith_plugins, tunesmith_isolated):
    system = tunesmith_plugins(SITE, only=["tiny"])
    assert system.records["tiny"].loaded and system.records["tiny"].dist == "tunesmith-tiny"
    assert sorted(system.records) == ["core", "tiny"]  # no other installed plugin, aten included
    a, b = torch.randn(17, 9), torch.randn(9, 5)
    sel = tunesmith.tune("mm", a, b, options={{"backends": ["tiny"]}})
    assert sel.spec == ChoiceSpec("tiny", "mm")
    torch.testing.assert_close(sel.kernel(a, b), a @ b)
    assert list((tunesmith_isolated / "cache").rglob("*.json"))  # the entry went to the test's cache


class Doubler:
    name = "doubler"

    @hookimpl
    def tunesmith_choices(self, problem, options):
        return []


def test_a_registered_plugin_and_the_environment(tunesmith_register, tunesmith_isolated):
    assert tunesmith_register(Doubler()) == "doubler"
    assert "doubler" in get_system().records
    assert "TUNESMITH_BACKENDS" not in os.environ  # the caller's setting does not reach the test
    assert Path.cwd() == tunesmith_isolated / "work" and not any(Path.cwd().iterdir())
    assert Path(os.environ["TUNESMITH_CACHE_DIR"]) == tunesmith_isolated / "cache"


def test_nothing_is_left_behind():
    assert {{"tiny", "doubler"}}.isdisjoint(get_system().records)
    assert SITE not in sys.path and "tunesmith_tiny" not in sys.modules
    assert "aten" in get_system().records  # the plugin system of before the first test is back
"""


def third_party(pytester: pytest.Pytester, offset: int) -> None:
    """A plugin distribution installed in ``site/`` (its entry point too) and its test suite."""
    site = pytester.path / "site"
    (site / "tunesmith_tiny").mkdir(parents=True)
    (site / "tunesmith_tiny" / "__init__.py").write_text(PLUGIN.format(offset=offset))
    info = site / "tunesmith_tiny-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tunesmith-tiny\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[tunesmith]\ntiny = tunesmith_tiny\n")
    pytester.makeconftest('pytest_plugins = ["tunesmith.testing"]\n')
    pytester.makepyfile(test_tiny=textwrap.dedent(TESTS.format(site=str(site))))


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, isolated: Path) -> pytest.RunResult:
    """Run the suite in a fresh process, with a TUNESMITH_* setting and cache the kit must keep out."""
    monkeypatch.setenv("TUNESMITH_BACKENDS", "nonesuch")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly")
    assert not list((isolated / "cache").rglob("*.json"))  # nothing was written to the caller's cache
    return result


def test_a_working_plugin_passes_with_the_kit(pytester, monkeypatch, isolated):
    third_party(pytester, offset=0)
    result = run(pytester, monkeypatch, isolated)
    result.assert_outcomes(passed=3)


def test_a_broken_plugin_fails_its_tests_under_the_kit(pytester, monkeypatch, isolated):
    third_party(pytester, offset=1)
    result = run(pytester, monkeypatch, isolated)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_the_plugin_alone_gives_the_right_answer*", "*Tensor-likes are not close*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_the_kit_is_opt_in():
    """Not a pytest11 entry point: a user's test run does not load it unless its conftest asks."""
    values = [ep.value for ep in importlib.metadata.entry_points(group="pytest11")]
    assert not [value for value in values if value.startswith("tunesmith.testing")], values
