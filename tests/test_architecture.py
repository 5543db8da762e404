"""The house layout as tests: one-way data flow, torch only where it belongs, unique test names."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module_level_imports(path: Path) -> set[str]:
    """Top-level package names imported at module level (not inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _all_imports(path: Path) -> set[str]:
    """Top-level packages imported anywhere in the module; ``vgcsim`` itself (for its
    ``__version__``) does not count, its submodules (the CLI) do."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return {m.split(".")[0] for m in modules if m != "vgcsim"}


def _py_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    ("package", "forbidden"), [("models", "simulator"), ("simulator", "models")]
)
def test_models_and_simulator_never_import_each_other(package, forbidden):
    offenders = [p.relative_to(ROOT) for p in _py_files(package) if forbidden in _all_imports(p)]
    assert not offenders, f"{package} imports {forbidden}: {offenders}"


@pytest.mark.parametrize("package", ["traces", "models", "simulator"])
def test_no_stage_imports_a_later_one(package):
    later = {
        "traces": {"models", "simulator", "reports", "vgcsim"},
        "models": {"reports", "vgcsim"},
        "simulator": {"reports", "vgcsim"},
    }[package]
    offenders = {
        str(p.relative_to(ROOT)): sorted(_all_imports(p) & later) for p in _py_files(package)
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"later stages imported from {package}: {offenders}"


def test_torch_only_in_compression_and_training():
    allowed = (ROOT / "traces" / "compression", ROOT / "traces" / "training")
    offenders = []
    for package in ("traces", "models", "simulator", "reports"):
        for path in _py_files(package):
            if any(a in path.parents for a in allowed):
                continue
            if "torch" in _module_level_imports(path):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, (
        f"module-level torch imports outside traces/compression|training: {offenders}"
    )


def test_torch_free_stages_do_not_load_torch():
    code = (
        "import sys, vgcsim.cli, traces.io, traces.results, models.predict, simulator.replay, "
        "reports.render; vgcsim.cli.build_parser(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_test_module_basenames_are_unique():
    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
    assert not list((ROOT / "tests").rglob("__init__.py")), "tests/**/__init__.py shadows packages"
