"""Names that explain themselves: no submodule of ``tunesmith`` is hidden behind a public
attribute of the same name (``import tunesmith.x as m`` must give the module)."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import types

import pytest

import tunesmith


def test_no_public_attribute_shadows_a_submodule():
    for info in pkgutil.iter_modules(tunesmith.__path__):
        if info.name == "__main__":  # runs the command line
            continue
        module = importlib.import_module(f"tunesmith.{info.name}")
        attribute = getattr(tunesmith, info.name)
        assert attribute is module, f"tunesmith.{info.name} is {attribute!r}, not the module"
        assert isinstance(attribute, types.ModuleType)


def test_the_public_functions_users_call_keep_their_names():
    assert callable(tunesmith.tune) and callable(tunesmith.options)
    assert tunesmith.tune.__module__ == "tunesmith.direct"
    assert tunesmith.options.__module__ == "tunesmith.settings"


def test_import_tunesmith_is_light_and_every_public_name_loads_on_use():
    """``import tunesmith`` imports no torch (the command line handles Ctrl-C before it does);
    each name of ``__all__`` loads on first use, and a submodule is reachable as an attribute."""
    script = """if True:
        import json, sys
        import tunesmith
        light = "torch" not in sys.modules and sorted(m for m in sys.modules if m.startswith("tunesmith"))
        listed = set(tunesmith.__all__) <= set(dir(tunesmith))
        exec("from tunesmith import " + ", ".join(tunesmith.__all__))
        print(json.dumps({"light": light, "listed": listed, "hooks": type(tunesmith.hooks).__name__,
                          "counters": type(tunesmith.counters).__name__, "tune": tunesmith.tune.__module__}))
    """
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {
        "light": ["tunesmith"],
        "listed": True,
        "hooks": "module",
        "counters": "Counter",
        "tune": "tunesmith.direct",
    }


def test_the_cores_plugin_and_its_disk_layer_load_without_torch():
    """A process that only reads and writes the local cache (the conformance suite's writer
    processes) loads the core's plugin and uses its layer without importing torch."""
    script = """if True:
        import json, sys
        from tunesmith.conformance.target import Target
        layers = Target.load("core", "cpu", reference=False).cache_layers()
        layers[0].put("k", b"value")
        print(json.dumps({"torch": "torch" in sys.modules, "got": layers[0].get("k").decode()}))
    """
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"torch": False, "got": "value"}


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        tunesmith.no_such_name  # noqa: B018
    assert not hasattr(tunesmith, "__no_such_dunder__")
