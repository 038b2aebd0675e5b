"""Writes the hook reference (``docs/hooks.md``) from the hook specifications and boundary types.

The docstrings of :mod:`tunesmith_hookspecs` are the one description of the plugin contract;
this module turns them into Markdown, so the published reference cannot drift from the code.
Run it from the repository root::

    python -m tunesmith_hookspecs.reference > docs/hooks.md

``tests/test_docs.py`` fails when the committed page differs from what this prints.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Protocol

import attrs

import tunesmith_hookspecs
from tunesmith_hookspecs import hookspecs, serde, types

COMMAND = "python -m tunesmith_hookspecs.reference > docs/hooks.md"

_INTRO = """\
# Hook reference

<!-- Generated from the docstrings of hookspecs/src/tunesmith_hookspecs/ by
     `{command}`: edit the docstrings, then rerun it. -->

Every hook is declared in `hookspecs/src/tunesmith_hookspecs/hookspecs.py`. A plugin implements a
hook with a function (or method) of the hook's name, decorated with `tunesmith_hookspecs.hookimpl`
(`tunesmith.hookimpl` is the same object).

{module_doc}

When a plugin is registered, the core rejects the whole plugin (and loads the others) if a
marked function's name matches no hook (a typo), if an implementation takes a parameter its
spec lacks, or if its `tunesmith_add_options` fails. Plugins named in the resolved
`disabled_plugins` setting are never called by a tune (`tunesmith plugins` still asks for their
status). How plugins are found and loaded: [architecture.md](architecture.md).
"""

_ROLE = re.compile(r":(?:class|func|data|mod|meth|attr|exc):`~?([^`]+)`")
_FIELD = re.compile(r"^:(param|returns?|raises?)\s*([^:]*):\s*(.*)$")


def _inline(text: str) -> str:
    """reST inline markup as Markdown: ``code`` and cross-reference roles become code spans."""

    def role(match: re.Match[str]) -> str:
        target = match.group(1)
        return f"`{target.rsplit('.', 1)[-1] if match.group(0).count('~') else target}`"

    return _ROLE.sub(role, text).replace("``", "`")


def markdown(doc: str | None) -> str:
    """A docstring in the project's reST subset (fields, ``::`` blocks, roles) as Markdown."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            lead = line.rstrip()[:-2].rstrip()
            if lead:
                out.append(_inline(lead) + ":")
                out.append("")
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            out.extend(["```python", *inspect.cleandoc("\n".join(block)).splitlines(), "```"])
            if i < len(lines) and lines[i].strip():
                out.append("")
            continue
        field = _FIELD.match(line)
        if field:
            kind, name, text = field.groups()
            i += 1
            while i < len(lines) and lines[i].startswith(" ") and lines[i].strip():
                text += " " + lines[i].strip()
                i += 1
            label = {"param": f"`{name.strip()}`", "returns": "Returns", "return": "Returns"}.get(kind, "Raises")
            if kind.startswith("raise") and name.strip():
                label = f"Raises `{name.strip()}`"
            out.append(f"- **{label}**: {_inline(text)}")
            continue
        out.append(_inline(line))
        i += 1
    return "\n".join(out).strip()


def _source_lines(module: ModuleType) -> list[str]:
    return inspect.getsource(module).splitlines()


def _sections(module: ModuleType) -> list[tuple[int, str]]:
    """The ``# --- title ---`` comments of a module, with their line numbers (1-based)."""
    found = []
    for number, line in enumerate(_source_lines(module), 1):
        match = re.match(r"^# --- (.+?) -+$", line)
        if match:
            found.append((number, match.group(1)))
    return found


def _doc_comments(module: ModuleType) -> dict[str, str]:
    """The ``#:`` comments above a module's top-level assignments, by the assigned name."""
    lines = _source_lines(module)
    comments = {}
    for node in ast.parse("\n".join(lines)).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            above: list[str] = []
            number = node.lineno - 2
            while number >= 0 and lines[number].startswith("#:"):
                above.insert(0, lines[number][2:].strip())
                number -= 1
            for target in targets:
                if isinstance(target, ast.Name) and above:
                    comments[target.id] = " ".join(above)
    return comments


def _aliases(module: ModuleType) -> dict[str, str]:
    """Module-level type aliases (``Name = generic[...]``) with the source's spelling."""
    aliases = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id[:1].isupper() and not target.id.isupper():
                    aliases[target.id] = ast.unparse(node.value)
    return aliases


def _line(obj: Any) -> int:
    return inspect.getsourcelines(obj)[1]


def hooks() -> list[Callable[..., Any]]:
    """Every hook specification, in the order of the source."""
    found = [
        getattr(hookspecs, name)
        for name in dir(hookspecs)
        if name.startswith("tunesmith_") and callable(getattr(hookspecs, name))
    ]
    return sorted(found, key=_line)


def _spec_options(hook: Callable[..., Any]) -> dict[str, Any]:
    return getattr(hook, f"{hookspecs.PROJECT_NAME}_spec", None) or {}


def _kind(hook: Callable[..., Any]) -> str:
    opts = _spec_options(hook)
    kind = "historic" if opts.get("historic") else "firstresult" if opts.get("firstresult") else "all results"
    return kind + (", deprecated (warns when implemented)" if opts.get("warn_on_impl") else "")


def _summary(obj: Any) -> str:
    return _inline(inspect.cleandoc(obj.__doc__ or "").split("\n\n")[0].replace("\n", " "))


def _hook_section(hook: Callable[..., Any]) -> str:
    sections = _sections(hookspecs)
    line = _line(hook)
    return next((title for number, title in reversed(sections) if number < line), "")


def _render_hooks() -> Iterator[str]:
    yield "| hook | kind | group | what it is for |"
    yield "|---|---|---|---|"
    for hook in hooks():
        yield f"| [`{hook.__name__}`](#{hook.__name__}) | {_kind(hook)} | {_hook_section(hook)} | {_summary(hook)} |"
    for hook in hooks():
        signature = inspect.signature(hook)
        params = ", ".join(signature.parameters)
        yield ""
        yield f'<a id="{hook.__name__}"></a>'
        yield ""
        yield f"## `{hook.__name__}({params})`"
        yield ""
        yield f"**Kind:** {_kind(hook)}."
        yield ""
        yield "```python"
        yield f"def {hook.__name__}{_format(signature)}"
        yield "```"
        yield ""
        yield markdown(hook.__doc__)


def _attrs_signature(cls: type) -> str:
    parts = []
    spelled = inspect.get_annotations(cls)  # the source's text: cattrs may have resolved field.type
    for field in attrs.fields(cls):
        text = f"{field.name}: {spelled[field.name]}" if field.name in spelled else field.name
        if isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            text += f" = {field.default.factory.__name__}()"
        elif field.default is not attrs.NOTHING:
            text += f" = {_value(field.default)}"
        parts.append(text)
    return f"{cls.__name__}({', '.join(parts)})"


def _value(value: Any) -> str:
    """A default or constant as Python source with double quotes, as the project writes it."""
    return repr(value).replace("'", '"')


def _members(cls: type) -> Iterator[str]:
    """One bullet per public method, property or annotated attribute defined on ``cls`` itself."""
    own = inspect.get_annotations(cls)  # this class's own, not its bases'
    for name in own if _is_protocol(cls) else ():
        yield f"- `{name}: {own[name]}`"
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        doc = ""
        if isinstance(member, property):
            text = f"`.{name}`"
            doc = member.__doc__ or ""
        elif isinstance(member, classmethod | staticmethod):
            function = member.__func__
            text = f"`{cls.__name__}.{name}{_short_signature(function)}`"
            doc = function.__doc__ or ""
        elif inspect.isfunction(member):
            text = f"`.{name}{_short_signature(member)}`"
            doc = member.__doc__ or ""
        else:
            continue
        yield f"- {text}" + (f": {markdown(doc).replace(chr(10), ' ')}" if doc else "")


def _format(signature: inspect.Signature) -> str:
    """A signature as the source spells it (``from __future__ import annotations`` leaves strings)."""

    def spelled(annotation: Any) -> str:
        return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)

    parts = []
    for param in signature.parameters.values():
        text = param.name
        if param.annotation is not inspect.Parameter.empty:
            text += f": {spelled(param.annotation)}"
        if param.default is not inspect.Parameter.empty:
            spaced = param.annotation is not inspect.Parameter.empty
            text += f" = {_value(param.default)}" if spaced else f"={_value(param.default)}"
        parts.append(text)
    returns = signature.return_annotation
    return f"({', '.join(parts)})" + ("" if returns is inspect.Signature.empty else f" -> {spelled(returns)}")


def _short_signature(function: Callable[..., Any]) -> str:
    signature = inspect.signature(function)
    params = [p for p in signature.parameters.values() if p.name not in ("self", "cls")]
    return _format(signature.replace(parameters=params))


def _is_protocol(cls: type) -> bool:
    return Protocol in cls.__mro__[1:] and getattr(cls, "_is_protocol", False)


def _described(cls: type) -> Iterator[str]:
    """A class's docstring, then its members (if any)."""
    yield markdown(cls.__doc__)
    members = list(_members(cls))
    if members:
        yield ""
        yield from members


def _render_types() -> Iterator[str]:
    comments = _doc_comments(types)
    yield "# Types that cross the boundary"
    yield ""
    yield markdown(types.__doc__)
    yield ""
    yield "Constants:"
    yield ""
    for name, value in vars(types).items():
        if name.isupper() and name in comments:
            yield f"- `{name} = {_value(value)}`: {_inline(comments[name])}"
    for name, spelled in _aliases(types).items():
        yield f"- `{name} = {spelled}`: a type alias of the signatures below."
    classes = sorted(
        (c for c in vars(types).values() if inspect.isclass(c) and c.__module__ == types.__name__),
        key=_line,
    )
    cls: type  # both loops below: attrs classes, then protocols
    for cls in (c for c in classes if attrs.has(c)):
        yield ""
        yield f"## {cls.__name__}"
        yield ""
        yield "```python"
        yield _attrs_signature(cls)
        yield "```"
        yield ""
        yield from _described(cls)
    yield ""
    yield "# Protocols"
    yield ""
    yield (
        "Plugins subclass nothing: the core checks their objects structurally (`isinstance` against "
        "these `runtime_checkable` protocols checks that the attributes exist)."
    )
    for cls in (c for c in classes if _is_protocol(c)):
        bases = [b.__name__ for b in cls.__bases__ if b is not Protocol]
        yield ""
        yield f"## {cls.__name__}" + (f" (a {', '.join(bases)})" if bases else "")
        yield ""
        yield from _described(cls)


def _render_serde() -> Iterator[str]:
    yield "# Serialisation"
    yield ""
    yield markdown(serde.__doc__)
    yield ""
    for name in ("to_json", "from_json", "unstructure", "structure"):
        function = getattr(serde, name)
        yield f"- `{name}{_format(inspect.signature(function))}`: {markdown(function.__doc__)}"
    yield f"- `SerdeError` (a `ValueError`): {markdown(serde.SerdeError.__doc__)}"


def _render_package() -> Iterator[str]:
    comments = _doc_comments(tunesmith_hookspecs)
    yield "# The package"
    yield ""
    yield markdown(tunesmith_hookspecs.__doc__)
    yield ""
    for name in ("SPEC_VERSION", "hookimpl"):
        value = getattr(tunesmith_hookspecs, name)
        shown = repr(value) if isinstance(value, int | str) else type(value).__name__
        yield f"- `{name}` (`{shown}`): {_inline(comments.get(name, ''))}"


def render() -> str:
    """The whole hook reference as Markdown, ending with one newline."""
    rules = markdown(hookspecs.__doc__).partition("\n\n")[2]  # the first paragraph is the module's title
    intro = _INTRO.format(command=COMMAND, module_doc=rules)
    parts = [
        intro.rstrip(),
        "\n".join(_render_hooks()),
        "\n".join(_render_types()),
        "\n".join(_render_serde()),
        "\n".join(_render_package()),
    ]
    return "\n\n".join(parts).rstrip() + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
