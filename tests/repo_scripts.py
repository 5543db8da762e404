"""Load a script of the repository (benchmarks/, experiments/) as a module for its tests.

The scripts are not part of the installed package; tests import them by path.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str) -> ModuleType:
    """The module of ``ROOT / relative_path`` (registered in sys.modules under its stem)."""
    path = ROOT / relative_path
    name = f"_script_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def run_script(relative_path: str, *args: str, timeout: float = 600, check: bool = True):
    """Run ``ROOT / relative_path`` with ``args`` in a fresh interpreter; its completed process
    (stdout and stderr as text), raising where it fails and ``check``."""
    import subprocess

    return subprocess.run(
        [sys.executable, str(ROOT / relative_path), *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )
