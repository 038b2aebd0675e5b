"""The docs keep up with the code: the hook reference is the generator's output, every setting is in the
options reference with its default, and the README starts with the commands CI runs."""

from __future__ import annotations

import inspect
import re

import attrs
import pytest

from tunesmith.config import CORE_FIELDS
from tunesmith_hookspecs import hookspecs, reference

from conftest import REPO

HOOKS = sorted(n for n in dir(hookspecs) if n.startswith("tunesmith_"))


def test_the_hook_reference_is_the_generators_output():
    committed = (REPO / "docs" / "hooks.md").read_text()
    assert committed == reference.render(), (
        f"docs/hooks.md differs from the hookspecs' docstrings: regenerate it with `{reference.COMMAND}`"
    )


@pytest.mark.parametrize("name", HOOKS)
def test_the_generated_reference_has_every_hook_with_its_signature_and_docstring(name):
    hook = getattr(hookspecs, name)
    params = ", ".join(inspect.signature(hook).parameters)
    text = reference.render()
    assert f"## `{name}({params})`" in text.splitlines()
    summary = inspect.cleandoc(hook.__doc__).splitlines()[0].replace("``", "`")
    summary = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?(\w+)`", r"`\1`", summary)  # :func:`~a.b.name` -> `name`
    assert summary in text


def test_the_reference_turns_the_docstring_markup_into_markdown():
    doc = """Do a thing with :class:`~pkg.mod.Thing` and ``code``.

    :param x: first line
        continued.
    :returns: nothing.

    Example::

        call(x)
    """
    assert reference.markdown(doc).splitlines() == [
        "Do a thing with `Thing` and `code`.",
        "",
        "- **`x`**: first line continued.",
        "- **Returns**: nothing.",
        "",
        "Example:",
        "",
        "```python",
        "call(x)",
        "```",
    ]


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
