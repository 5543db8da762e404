"""Package discovery for the one import name ``vgcsim``.

pyproject.toml maps each repository folder to its import name
(``[tool.setuptools.package-dir]``: ``traces/`` installs as ``vgcsim.traces``, ...).
setuptools' own discovery does not follow such renames, so every folder holding an
``__init__.py`` below a mapped folder is found here and installed under its mapped name:
a new subpackage needs no edit anywhere. The data folders below ``vgcsim/data`` are listed
as namespace packages, so that the build does not warn about each of them.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent


def discover_packages(root: Path = ROOT) -> list[str]:
    """Every package of the distribution by import name, from pyproject's package-dir."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    found: set[str] = set()
    for name, folder in mapping.items():
        found.add(name)
        found.update(f"{name}.{sub}" for sub in find_packages(str(root / folder)))
    # the folders of vgcsim/data hold package data only (the demo traces); setuptools warns
    # about every data folder that is not listed as a package, so they are listed, as
    # namespace packages
    data = find_namespace_packages(str(root / "vgcsim"), include=["data", "data.*"])
    found.update(f"vgcsim.{sub}" for sub in data)
    return sorted(found)


if __name__ == "__main__":
    setup(packages=discover_packages())
