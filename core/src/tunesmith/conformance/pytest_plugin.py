"""The pytest plugin behind the conformance suite (entry point ``pytest11``).

It adds the ``--tunesmith-*`` options and does nothing else unless ``--tunesmith-plugin`` is
given. Importing it imports neither torch nor tunesmith, so every other pytest run stays as fast.
"""

from __future__ import annotations

from typing import Any

import pytest

_TARGET = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tunesmith", "tunesmith plugin conformance")
    group.addoption("--tunesmith-plugin", metavar="NAME", help="check the installed tunesmith plugin NAME")
    group.addoption(
        "--tunesmith-device",
        metavar="TYPE",
        help="device type to check backends on (default: cuda if present, else cpu)",
    )
    group.addoption(
        "--tunesmith-unreachable",
        metavar="SETTING=VALUE",
        action="append",
        default=[],
        help="settings that point a cache plugin at a server that is down (e.g. redis_url=redis://127.0.0.1:9)",
    )
    group.addoption(
        "--tunesmith-case-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds a backend worker may go without progress before it is killed",
    )


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("tunesmith_plugin", None)
    if not name:
        return
    import torch

    from tunesmith.conformance.target import Target

    device = config.getoption("tunesmith_device") or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        config.stash[_TARGET] = Target.load(name, device)
    except LookupError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str | None:
    target = config.stash.get(_TARGET, None)
    return f"tunesmith conformance: {target.describe()}" if target else None


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Close a run against a backend that cannot run here by saying so: its checks were skipped, not passed."""
    target = config.stash.get(_TARGET, None)
    if target is None or not target.record.loaded or target.status.runnable or "backend" not in target.kinds:
        return
    terminalreporter.write_sep("=", "tunesmith conformance: backend not checked", yellow=True)
    terminalreporter.write_line(f"plugin {target.name!r} cannot run here: {target.status.reason}")
    terminalreporter.write_line("its backend checks were skipped, not passed: run the suite where the plugin can run")


def get_target(config: pytest.Config) -> Any:
    """The plugin under test, or None when ``--tunesmith-plugin`` was not given."""
    return config.stash.get(_TARGET, None)


@pytest.fixture(scope="session")
def tunesmith_target(request: pytest.FixtureRequest) -> Any:
    """The plugin under test; skips the test when no ``--tunesmith-plugin`` was given, fails it
    when the plugin did not load."""
    target = get_target(request.config)
    if target is None:
        pytest.skip("no --tunesmith-plugin NAME given: the conformance suite checks one installed plugin")
    if target.record.disabled:
        pytest.fail(f"plugin {target.name!r} is in the disabled_plugins setting: enable it to check it", pytrace=False)
    if not target.record.loaded:
        pytest.fail(f"plugin {target.name!r} did not load: {target.record.error}", pytrace=False)
    return target


def require_kind(target: Any, kind: str) -> None:
    if kind not in target.kinds:
        pytest.skip(
            f"plugin {target.name!r} is not a {kind} (it implements {', '.join(sorted(target.hooks)) or 'no hooks'})"
        )


def items_of(target: Any, kind: str, fetch: Any, none_reason: str) -> list[Any]:
    """What ``fetch()`` gets from a plugin of ``kind``: a failure naming the plugin when its hook
    raises, a skip with ``none_reason`` when it gives nothing."""
    from tunesmith.conformance.target import PluginFault

    require_kind(target, kind)
    try:
        found = fetch()
    except PluginFault as exc:
        pytest.fail(f"plugin {target.name!r}: {exc}", pytrace=False)
    if not found:
        pytest.skip(f"plugin {target.name!r} {none_reason}")
    return found
