"""The code base is ruff clean (the configuration is the root pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: scripts/dev-install installs it")
    proc = subprocess.run([ruff, "check", str(REPO)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
