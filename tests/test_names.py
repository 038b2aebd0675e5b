"""Names that explain themselves: no submodule of ``tunesmith`` is hidden behind a public
attribute of the same name (``import tunesmith.x as m`` must give the module)."""

from __future__ import annotations

import importlib
import pkgutil
import types

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
