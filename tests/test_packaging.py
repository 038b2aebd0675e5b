"""What ``pip install`` shows of each distribution: its licence (SPDX) and licence file, a readme
as its long description, authors and classifiers (checked in every pyproject.toml, and in one built wheel)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile

import pytest

from conftest import REPO

DISTRIBUTIONS = ["hookspecs", "core", *(f"plugins/{p.name}" for p in sorted((REPO / "plugins").iterdir()))]


@pytest.mark.parametrize("folder", DISTRIBUTIONS)
def test_each_distribution_has_its_licence_readme_authors_and_classifiers(folder):
    root = REPO / folder
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert "Apache License" in (root / "LICENSE").read_text()  # setuptools ships LICENSE* by default
    readme = (root / project["readme"]).read_text()
    assert readme.startswith(f"# {project['name']}\n") and project["description"] in readme
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert project["authors"] and "Programming Language :: Python :: 3" in project["classifiers"]


def test_a_built_wheel_carries_the_licence_and_the_readme(tmp_path):
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path)]
    subprocess.run(
        [*build, str(REPO / "hookspecs")],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith((".dist-info/licenses/LICENSE", ".dist-info/LICENSE")) for n in names), names
    assert "Description-Content-Type: text/markdown" in metadata and "# tunesmith-hookspecs" in metadata
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
