"""The plugin API contract: shipped plugins import from tunesmith only ``tunesmith.plugin`` (and its
submodules), and that API is what ``docs/plugin-guide.md`` lists.

The check reads each plugin source file's syntax tree (every import statement, those inside
functions and ``TYPE_CHECKING`` blocks too, and ``importlib.import_module`` / ``__import__`` calls
with a literal name), so it sees what a plugin imports without importing it.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import tunesmith.plugin

from conftest import REPO

PLUGINS = sorted(p.parent for p in (REPO / "plugins").glob("*/src"))
ALLOWED = "tunesmith.plugin"


def _allowed(module: str) -> bool:
    return module == ALLOWED or module.startswith(ALLOWED + ".")


def _core(module: str) -> bool:
    return module == "tunesmith" or module.startswith("tunesmith.")


def _imported(node: ast.AST) -> list[str]:
    """The tunesmith modules (or ``tunesmith.<name>`` of a name taken from the package) that one node imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if _core(alias.name)]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _core(node.module):
        if node.module == "tunesmith":  # ``from tunesmith import plugin`` is the API; any other name is not
            return [f"tunesmith.{alias.name}" for alias in node.names]
        return [node.module]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tunesmith":
        return [f"tunesmith.{node.attr}"]  # ``import tunesmith.plugin`` binds ``tunesmith``: its other names
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        target = node.args[0].value
        if name in ("import_module", "__import__") and isinstance(target, str) and _core(target):
            return [target]
    return []


def _unexported(node: ast.AST) -> list[str]:
    """Names taken from ``tunesmith.plugin`` itself that it does not export (nor are its submodules)."""
    if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == ALLOWED):
        return []
    submodules = {m.name for m in pkgutil.iter_modules(tunesmith.plugin.__path__)}
    return [a.name for a in node.names if a.name not in tunesmith.plugin.__all__ and a.name not in submodules]


def violations(root: Path) -> list[str]:
    """``file:line: what`` for every import under ``root`` that reaches past the plugin API."""
    found = []
    for path in sorted(root.rglob("*.py")):
        here = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            here += [(node.lineno, f"imports {m}") for m in _imported(node) if not _allowed(m)]
            here += [(node.lineno, f"{n} is not exported by {ALLOWED}") for n in _unexported(node)]
        found += [f"{path.relative_to(root)}:{line}: {what}" for line, what in sorted(here)]
    return found


def test_every_shipped_plugin_is_checked():
    assert {p.name for p in PLUGINS} >= {"aten", "triton", "cutlass", "ck", "redis", "memcache"}


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_a_shipped_plugin_imports_only_the_plugin_api(plugin):
    found = violations(plugin / "src")
    assert not found, f"plugins/{plugin.name} imports tunesmith internals; use tunesmith.plugin:\n" + "\n".join(found)


def test_the_check_catches_every_way_of_importing_a_core_internal(tmp_path):
    package = tmp_path / "src" / "tunesmith_bad"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import importlib\n"
        "import tunesmith\n"  # 2
        "import tunesmith.cache.entry\n"  # 3
        "from tunesmith import current_options\n"  # 4
        "from tunesmith.config import parse_int\n"  # 5
        "from tunesmith.plugin import parse_nothing\n"  # 6: not in the API
        "def later():\n"
        "    from tunesmith.ops import run\n"  # 8: inside a function
        "    return importlib.import_module('tunesmith.native_build')\n"  # 9
    )
    (package / "sneaky.py").write_text("import tunesmith.plugin\noptions = tunesmith.current_options()\n")
    (package / "fine.py").write_text(
        "import tunesmith.plugin\n"
        "from tunesmith import plugin\n"
        "from tunesmith.plugin import flops, roofline\n"
        "options = tunesmith.plugin.current_options()\n"
        "from tunesmith_hookspecs import hookimpl\n"
        "from tunesmith_bad import fine\n"
        "from . import fine as again\n"
    )
    assert violations(tmp_path / "src") == [
        "tunesmith_bad/__init__.py:2: imports tunesmith",
        "tunesmith_bad/__init__.py:3: imports tunesmith.cache.entry",
        "tunesmith_bad/__init__.py:4: imports tunesmith.current_options",
        "tunesmith_bad/__init__.py:5: imports tunesmith.config",
        "tunesmith_bad/__init__.py:6: parse_nothing is not exported by tunesmith.plugin",
        "tunesmith_bad/__init__.py:8: imports tunesmith.ops",
        "tunesmith_bad/__init__.py:9: imports tunesmith.native_build",
        "tunesmith_bad/sneaky.py:2: imports tunesmith.current_options",
    ]
    with pytest.raises(AssertionError, match=r"imports tunesmith internals.*\n.*imports tunesmith\n"):
        test_a_shipped_plugin_imports_only_the_plugin_api(tmp_path)


def test_the_api_exports_what_it_lists_and_the_guide_documents_it():
    api = tunesmith.plugin
    assert all(hasattr(api, name) for name in api.__all__)
    guide = (REPO / "docs" / "plugin-guide.md").read_text()
    for name in api.__all__:
        assert f"``{name}" in api.__doc__, f"{name} is not described in tunesmith.plugin's docstring"
        assert f"`{name}" in guide, f"{name} is not in docs/plugin-guide.md"
    major, minor = api.PLUGIN_API_VERSION
    assert f"`PLUGIN_API_VERSION` is `({major}, {minor})`" in guide
