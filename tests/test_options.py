"""Settings: each layer overrides the one below it; bad names and values fail clearly."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import tunesmith
from tunesmith_hookspecs import hookimpl

from conftest import rand


def user_config(isolated: Path) -> Path:
    path = isolated / "config" / "tunesmith" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_each_layer_overrides_the_one_below(isolated, monkeypatch, register):
    assert tunesmith.current_options().prune == 6  # default

    user_config(isolated).write_text("prune = 2\nverify = true\n")
    assert tunesmith.current_options().prune == 2

    Path("pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.tunesmith]\nprune = 3\n")
    options = tunesmith.current_options()
    assert options.prune == 3 and options.verify is True  # the user file still fills what the project omits

    monkeypatch.setenv("TUNESMITH_PRUNE", "4")
    assert tunesmith.current_options().prune == 4

    with tunesmith.options(prune=5) as resolved:
        assert resolved.prune == 5 and tunesmith.current_options().prune == 5
        with tunesmith.options(prune=16):
            assert tunesmith.current_options().prune == 16
        assert tunesmith.current_options().prune == 5
        assert tunesmith.current_options({"prune": 7}).prune == 7

        seen = []

        class Spy:
            @hookimpl
            def tunesmith_choices(self, problem, options):
                seen.append(options.prune)
                return []

        register(Spy(), "spy")
        tunesmith.tune("mm", rand(4, 4), rand(4, 4), options={"prune": 8})
        assert seen == [8]
    assert tunesmith.current_options().prune == 4


def test_pyproject_is_found_above_the_working_directory(isolated, monkeypatch):
    Path("pyproject.toml").write_text("[tool.tunesmith]\nbackends = ['aten']\n")
    sub = Path("a/b")
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert tunesmith.current_options().backends == ("aten",)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"prunes": 3}, "unknown setting 'prunes' .*known settings: .*prune"),
        ({"prune": 0}, r"'prune' = 0 \(from tunesmith.options\(\)\) is not valid: expected an integer >= 1, or none"),
        ({"benchmark": "gpu"}, "expected one of 'auto', 'subprocess', 'inprocess'"),
        ({"verify": "maybe"}, "expected true or false"),
        ({"backends": [1, 2]}, "expected a list of names"),
        ({"budget_s": -1}, "a positive number of seconds"),
        ({"compile_threads": 1.5}, "an integer >= 1"),
        ({"cache_backoff_s": None}, "a positive number of seconds$"),
        ({"prune": [3]}, "an integer >= 1, or none$"),
        ({"graph_compiler": ""}, "a non-empty name"),
    ],
)
def test_bad_names_and_values_raise_one_error(overrides, message):
    with pytest.raises(tunesmith.OptionError, match=message), tunesmith.options(**overrides):
        pass


def test_a_bad_value_names_where_it_came_from(isolated, monkeypatch):
    monkeypatch.setenv("TUNESMITH_COMPILE_THREADS", "many")
    with pytest.raises(tunesmith.OptionError, match="from TUNESMITH_COMPILE_THREADS"):
        tunesmith.current_options()
    monkeypatch.delenv("TUNESMITH_COMPILE_THREADS")
    Path("pyproject.toml").write_text("[tool.tunesmith]\nverify = 'sometimes'\n")
    with pytest.raises(tunesmith.OptionError, match=r"pyproject.toml \[tool.tunesmith\]"):
        tunesmith.current_options()
    Path("pyproject.toml").write_text("[tool.tunesmith\n")
    with pytest.raises(tunesmith.OptionError, match="cannot read settings"):
        tunesmith.current_options()


def test_per_call_unknown_setting_raises():
    with pytest.raises(tunesmith.OptionError, match="unknown setting 'fast'"):
        tunesmith.tune("mm", rand(2, 2), rand(2, 2), options={"fast": True})


def test_unknown_settings_in_the_environment_warn_once(monkeypatch):
    monkeypatch.setenv("TUNESMITH_NOT_A_SETTING_XYZ", "1")
    with pytest.warns(tunesmith.TunesmithWarning, match="TUNESMITH_NOT_A_SETTING_XYZ"):
        tunesmith.current_options()


def test_environment_values_are_parsed(monkeypatch):
    monkeypatch.setenv("TUNESMITH_BACKENDS", "aten, triton")
    monkeypatch.setenv("TUNESMITH_VERIFY", "yes")
    monkeypatch.setenv("TUNESMITH_BUDGET_S", "2.5")
    monkeypatch.setenv("TUNESMITH_CACHE_SECRET", "hush")
    options = tunesmith.current_options()
    assert options.backends == ("aten", "triton") and options.verify is True and options.budget_s == 2.5
    assert "hush" not in repr(options)


def test_options_blocks_do_not_leak_across_threads():
    inside, other = threading.Event(), []
    release = threading.Event()

    def hold():
        with tunesmith.options(prune=9):
            inside.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    inside.wait(5)
    reader = threading.Thread(target=lambda: other.append(tunesmith.current_options().prune))
    reader.start()
    reader.join()
    assert tunesmith.current_options().prune == 6 and other == [6]  # the default
    release.set()
    holder.join()


def test_settings_travel_to_a_worker_as_json_and_come_back_equal(register):
    import json

    from tunesmith.config import from_payload, to_payload

    class Declares:
        @hookimpl
        def tunesmith_add_options(self, options):
            options.add("my_threshold", 3)
            options.add("my_callback", None)

    register(Declares(), "declares")
    with tunesmith.options(backends=["aten"], budget_s=2.5, my_threshold=7, my_callback=print) as settings:
        payload = json.loads(json.dumps(to_payload(settings)))
    assert "my_callback" not in payload  # not JSON: left out, the worker keeps its own value
    back = from_payload(tunesmith.current_options(), payload)
    assert back.backends == ("aten",) and back.budget_s == 2.5 and back.my_threshold == 7
    assert back == tunesmith.current_options(payload)
