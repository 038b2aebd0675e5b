"""The docs keep up with the contract: every hook with its signature, every setting, the README's commands."""

from __future__ import annotations

import inspect
import re

import attrs
import pytest

from tunesmith.config import CORE_FIELDS
from tunesmith_hookspecs import hookspecs

from conftest import REPO

HOOKS = sorted(n for n in dir(hookspecs) if n.startswith("tunesmith_"))


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_is_in_the_reference_with_its_signature(name):
    params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
    text = (REPO / "docs" / "hooks.md").read_text()
    assert f"## `{name}({params})`" in text.splitlines()


@pytest.mark.parametrize("field", [f.name for f in CORE_FIELDS])
def test_every_setting_is_in_the_options_reference(field):
    text = (REPO / "docs" / "options.md").read_text()
    assert re.search(rf"^\| `{field}` \|", text, re.M), field
    assert f"TUNESMITH_{field.upper()}" in text


def test_settings_reference_defaults_match_the_code():
    text = (REPO / "docs" / "options.md").read_text()
    for field in CORE_FIELDS:
        if field.name == "compile_threads" or field.default is None or isinstance(field.default, attrs.Factory):
            continue
        default = str(field.default).lower() if isinstance(field.default, bool) else str(field.default)
        row = re.search(rf"^\| `{field.name}` \|([^\n]*)", text, re.M).group(1)
        assert default.strip("()") in row or (field.default == () and "`[]`" in row), (field.name, row)


def test_readme_starts_with_the_setup_and_test_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    commands = [line for line in lines[:6] if line.startswith("bash scripts/dev-install")]
    assert len(commands) == 2 and "tunesmith tune" in commands[0] and "pytest" in commands[1]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[1].split("#")[0].strip() in ci  # CI runs exactly the README's test command
