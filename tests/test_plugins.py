"""Plugins: installed through entry points (fixture distributions installed with pip), isolated
when they fail, validated in one place, registered and disabled at run time."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import torch

import tunesmith
from tunesmith.hooks import PluginConflictError, plugin_status
from tunesmith_hookspecs import ChoiceSpec, PluginStatus, hookimpl

from conftest import rand, run_env

A, B = rand(32, 16), rand(16, 24)


def test_an_outside_plugin_adds_choices_and_a_cache_layer(install):
    system = install("ext")
    record = system.records["fixture_ext"]
    assert record.loaded and record.dist == "tunesmith-fixture-ext" and record.version == "0.0.1"
    import tunesmith_fixture_ext as ext

    sel = tunesmith.tune("mm", A, B)
    assert {s.backend for s in sel.timings} == {"aten", "fixture_ext"}
    assert next(iter(sel.timings)).backend == "aten"  # aten first by default
    torch.testing.assert_close(sel.kernel(A, B), A @ B)
    assert len(ext.STORE) == 1  # the plugin's layer got the entry, through the core's JSON
    assert json.loads(next(iter(ext.STORE.values())))["format"] == "tunesmith-entry"
    assert tunesmith.counters["autotune_remote_put"] == 1

    # a remote hit fills the local layer above it
    tunesmith.reset()
    with tunesmith.options(caches=["fixture_dict"]):
        assert tunesmith.tune("mm", A, B).report.source == "fixture_dict"
    assert tunesmith.counters["autotune_remote_hit"] == 1


def test_a_plugin_setting_is_declared_layered_and_switches_its_layer(install, monkeypatch):
    install("ext")
    assert tunesmith.current_options().fixture_ext_layer is True
    monkeypatch.setenv("TUNESMITH_FIXTURE_EXT_LAYER", "0")
    assert tunesmith.current_options().fixture_ext_layer is False
    import tunesmith_fixture_ext as ext

    ext.STORE.clear()
    tunesmith.tune("mm", A, B)
    assert ext.STORE == {}


def test_a_plugin_that_fails_to_import_is_recorded_and_breaks_nothing(install, caplog):
    with caplog.at_level(logging.WARNING):
        system = install("broken", "ext")
    record = system.records["fixture_broken"]
    assert not record.loaded and "fails to import on purpose" in record.error
    assert "fixture_broken" in caplog.text
    assert system.records["fixture_ext"].loaded
    assert not plugin_status("fixture_broken").runnable
    sel = tunesmith.tune("mm", A, B)
    assert {s.backend for s in sel.timings} == {"aten", "fixture_ext"}


def test_tunesmith_plugins_lists_a_broken_plugin_and_exits_0(fixture_sites):
    path = f"{fixture_sites['broken']}:{fixture_sites['ext']}"
    proc = subprocess.run(
        [sys.executable, "-m", "tunesmith", "plugins", "--json"],
        capture_output=True,
        text=True,
        env=run_env(PYTHONPATH=path),
    )
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert rows["fixture_broken"]["runnable"] is False
    assert "fails to import on purpose" in rows["fixture_broken"]["reason"]
    assert rows["fixture_ext"]["runnable"] is True and "tunesmith_cache_layers" in rows["fixture_ext"]["hooks"]
    assert rows["aten"]["distribution"] == "tunesmith-aten"


def test_a_backend_whose_only_choice_raises_is_named_in_the_error(install):
    install("raising")
    with pytest.raises(tunesmith.NoValidChoicesError, match=r"fixture_raising: all 1 choice.*fails on purpose") as info:
        tunesmith.tune("mm", A, B, options={"backends": ["fixture_raising"]})
    assert set(info.value.reasons) == {"fixture_raising"}
    assert tunesmith.counters["choice_failed"] == 1
    # with aten beside it, the failing choice is timed as infinite and aten wins
    sel = tunesmith.tune("mm", A, B)
    assert sel.spec.backend == "aten" and sel.timings[ChoiceSpec("fixture_raising", "always_raises")] == float("inf")


def test_no_backends_is_no_valid_choices():
    with pytest.raises(tunesmith.NoValidChoicesError, match="no backend is enabled"):
        tunesmith.tune("mm", A, B, options={"backends": []})


def test_a_missing_backend_is_named():
    with pytest.raises(tunesmith.NoValidChoicesError, match="nonesuch: cannot run here: not installed"):
        tunesmith.tune("mm", A, B, options={"backends": ["nonesuch"]})


class BadOutput:
    """A backend that returns something that is not a choice."""

    name = "bad_output"

    @hookimpl
    def tunesmith_choices(self, problem, options):
        return [3]

    @hookimpl
    def tunesmith_cache_layers(self, options):
        return ["not a layer"]


def test_invalid_hook_output_is_one_error_naming_the_plugin_and_only_its_results_drop(register, caplog):
    register(BadOutput())
    with caplog.at_level(logging.ERROR):
        sel = tunesmith.tune("mm", A, B)
    assert sel.spec.backend == "aten"
    assert "plugin 'bad_output': tunesmith_choices item 0 is 3, not a choice" in caplog.text
    assert "plugin 'bad_output': tunesmith_cache_layers item 0 is 'not a layer'" in caplog.text
    with pytest.raises(tunesmith.NoValidChoicesError, match="bad_output: plugin 'bad_output'"):
        tunesmith.tune("mm", A, B, options={"backends": ["bad_output"]})


class DictLayer:
    """A cache layer in a dict."""

    def __init__(self, name):
        self.name = name
        self.store = {}

    def get(self, key):
        return self.store.get(key)

    def put(self, key, value):
        self.store[key] = value


def layers_plugin(*layers):
    """A run-time plugin offering ``layers``."""

    class Plugin:
        @hookimpl
        def tunesmith_cache_layers(self, options):
            return list(layers)

    return Plugin()


def test_a_cache_layer_name_offered_twice_is_an_error_naming_both_distributions(install, register):
    install("ext")  # tunesmith-fixture-ext offers the layer "fixture_dict"
    register(layers_plugin(DictLayer("fixture_dict")), "twin")
    with pytest.raises(PluginConflictError) as info:
        tunesmith.tune("mm", A, B)
    message = str(info.value)
    assert message.startswith("cache layer 'fixture_dict' is offered by plugin")
    assert "'fixture_ext' (tunesmith-fixture-ext 0.0.1)" in message
    assert "'twin' (registered at run time)" in message and "disabled_plugins" in message
    # the way out that the message names
    assert tunesmith.tune("mm", A, B, options={"disabled_plugins": ["twin"]}).report.source == "tuned"


def test_a_plugin_layer_named_local_clashes_with_the_core(register):
    register(layers_plugin(DictLayer("local")), "shadow")
    with pytest.raises(PluginConflictError, match="cache layer 'local'") as info:
        tunesmith.tune("mm", A, B)
    assert "'core' (tunesmith " in str(info.value) and "'shadow' (registered at run time)" in str(info.value)


def test_one_plugin_offering_two_layers_of_one_name_loses_only_its_layers(register, caplog):
    twice = DictLayer("twice")
    register(layers_plugin(twice, DictLayer("twice")), "doubler")
    with caplog.at_level(logging.ERROR):
        assert tunesmith.tune("mm", A, B).report.source == "tuned"
    assert "plugin 'doubler': tunesmith_cache_layers offers two layers named 'twice'" in caplog.text
    assert twice.store == {}


def test_the_former_cache_hook_name_still_offers_layers_and_warns(register):
    layer = DictLayer("old_style")

    class OldStyle:
        @hookimpl
        def tunesmith_cache_backends(self, options):
            return [layer]

    with pytest.warns(DeprecationWarning, match="rename the implementation to tunesmith_cache_layers"):
        register(OldStyle(), "old_style")
    tunesmith.tune("mm", A, B)
    assert len(layer.store) == 1  # the entry went to the layer offered under the old name


class Impostor:
    name = "impostor"

    @hookimpl
    def tunesmith_choices(self, problem, options):
        from tunesmith_aten import AtenChoice

        return [AtenChoice(ChoiceSpec("aten", "eager"), problem)]


def test_a_choice_must_carry_its_plugins_name(register, caplog):
    register(Impostor())
    with caplog.at_level(logging.ERROR):
        tunesmith.tune("mm", A, B)
    assert "a ChoiceSpec's backend must be the plugin's name 'impostor'" in caplog.text


class Typo:
    @hookimpl
    def tunesmith_choice(self, problem, options):  # missing "s"
        return []


def test_a_hook_name_typo_is_rejected_at_registration():
    with pytest.raises(ValueError, match=r"unknown hook.*tunesmith_choice"):
        tunesmith.register(Typo(), "typo")
    assert "typo" not in tunesmith.plugins.get_system().records


class Slowpoke:
    """A runtime backend, with a status hook and a declared option."""

    name = "slowpoke"

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def tunesmith_add_options(self, options):
        options.add("slowpoke_level", 1, parse=int, help="how slow")

    @hookimpl
    def tunesmith_choices(self, problem, options):
        self.calls += 1
        return []


def test_register_unregister_and_disable_at_run_time(register):
    plugin = Slowpoke()
    assert register(plugin) == "slowpoke"
    assert tunesmith.current_options().slowpoke_level == 1
    with pytest.raises(ValueError, match="already registered"):
        tunesmith.register(Slowpoke())
    tunesmith.tune("mm", A, B)
    assert plugin.calls == 1
    with tunesmith.options(disabled_plugins=["slowpoke"]):
        tunesmith.tune("mm", rand(3, 3), rand(3, 3))
    assert plugin.calls == 1
    tunesmith.unregister("slowpoke")
    with pytest.raises(AttributeError):
        _ = tunesmith.current_options().slowpoke_level
    tunesmith.register(plugin)  # the fixture unregisters it again


def test_disabled_plugins_from_the_environment_are_never_imported(install, monkeypatch):
    monkeypatch.setenv("TUNESMITH_DISABLED_PLUGINS", "fixture_broken")
    system = install("broken")
    assert system.records["fixture_broken"].disabled and system.records["fixture_broken"].error is None
    assert plugin_status("fixture_broken") == PluginStatus(False, "disabled by the disabled_plugins setting")


class NotHere:
    name = "nothere"

    @hookimpl
    def tunesmith_plugin_status(self):
        return PluginStatus(False, "needs an accelerator this machine lacks")

    @hookimpl
    def tunesmith_choices(self, problem, options):
        raise AssertionError("a backend that cannot run here is not asked for choices")


def test_a_backend_that_cannot_run_here_says_why(register):
    register(NotHere())
    sel = tunesmith.tune("mm", A, B)
    assert sel.spec.backend == "aten"
    with pytest.raises(tunesmith.NoValidChoicesError, match="nothere: cannot run here: needs an accelerator"):
        tunesmith.tune("mm", A, B, options={"backends": ["nothere"]})


def test_hookimpl_is_the_contracts_marker():
    import tunesmith_hookspecs

    assert tunesmith.hookimpl is tunesmith_hookspecs.hookimpl


class Misbehaving:
    """Every hook raises: each failure stays inside this plugin."""

    name = "misbehaving"

    @hookimpl
    def tunesmith_cache_layers(self, options):
        raise ConnectionRefusedError("cannot reach the cache server")

    @hookimpl
    def tunesmith_rebuild_choice(self, spec, problem):
        raise RuntimeError("rebuild bug")

    @hookimpl
    def tunesmith_selection_done(self, report):
        raise RuntimeError("dashboard down")


def test_raising_hooks_of_one_plugin_do_not_break_tuning_or_cache_hits(register, caplog):
    register(Misbehaving())
    with caplog.at_level(logging.ERROR):
        assert tunesmith.tune("mm", A, B).report.source == "tuned"
        tunesmith.reset()
        assert tunesmith.tune("mm", A, B).report.source == "local"  # rebuilt by aten despite the raising rebuild
    for text in ("cannot reach the cache server", "rebuild bug", "dashboard down"):
        assert text in caplog.text
    assert "plugin 'misbehaving'" in caplog.text


class SettingsReader:
    """A rebuild hook that records the settings in force while it runs."""

    name = "settings_reader"

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    @hookimpl
    def tunesmith_rebuild_choice(self, spec, problem):
        self.seen.append(tunesmith.current_options().cache_dir)


def test_a_rebuild_hook_reads_the_settings_of_the_tune_that_asks(register, tmp_path):
    reader = SettingsReader()
    register(reader)
    tunesmith.tune("mm", A, B, options={"cache_dir": str(tmp_path / "mine")})
    tunesmith.reset()
    sel = tunesmith.tune("mm", A, B, options={"cache_dir": str(tmp_path / "mine")})
    assert sel.report.source == "local" and reader.seen == [str(tmp_path / "mine")]
    assert tunesmith.current_options().cache_dir != str(tmp_path / "mine")  # only while the hook ran


class BadOptions:
    name = "bad_options"

    @hookimpl
    def tunesmith_add_options(self, options):
        raise KeyError("oops")


def test_a_plugin_whose_settings_hook_raises_is_rejected_alone():
    with pytest.raises(ValueError, match="tunesmith_add_options raised KeyError"):
        tunesmith.register(BadOptions())
    assert "bad_options" not in tunesmith.plugins.get_system().records
    assert tunesmith.tune("mm", A, B).spec.backend == "aten"


def test_the_builtin_plugin_cannot_be_unregistered_and_disabling_it_is_a_clear_error():
    with pytest.raises(ValueError, match="built-in plugin cannot be unregistered"):
        tunesmith.unregister("core")
    with pytest.raises(tunesmith.TunesmithError, match=r"no benchmarker.*'core' in disabled_plugins"):
        tunesmith.tune("mm", A, B, options={"disabled_plugins": ["core"]})


def test_autoload_is_off_only_when_asked(install, monkeypatch):
    monkeypatch.setenv("TUNESMITH_DISABLE_PLUGIN_AUTOLOAD", "0")
    assert "aten" in install().records
    monkeypatch.setenv("TUNESMITH_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert "aten" not in install().records
