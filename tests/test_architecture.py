"""The house layout as tests: one-way data flow, torch only where it belongs, unique test names."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


#: The layers, bottom up, and what each may import. Every name is installed under ``vgcsim``:
#: the repository folders traces/, models/, simulator/ and reports/ are vgcsim.traces, ...;
#: ``vgcsim.core`` is the shared bottom; ``front`` is the CLI, the notebook API and the hook.
ALLOWED = {
    "core": {"core", "root"},
    "traces": {"core", "traces"},
    "models": {"core", "traces", "models"},
    "simulator": {"core", "traces", "simulator"},
    "reports": {"core", "traces", "reports"},
    "front": {"core", "traces", "models", "simulator", "reports", "front", "root"},
}
STAGES = ("core", "traces", "models", "simulator", "reports")
SOURCE_DIRS = {
    "traces": "traces",
    "models": "models",
    "simulator": "simulator",
    "reports": "reports",
}


def _layer_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    if rel[0] == "vgcsim":
        return "core" if rel[1] == "core" else "front"
    return rel[0]


def _module_name(path: Path) -> str:
    rel = list(path.relative_to(ROOT).with_suffix("").parts)
    if rel[-1] == "__init__":
        rel = rel[:-1]
    return ".".join(rel if rel[0] == "vgcsim" else ["vgcsim", *rel])


def _layer_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "vgcsim":
        return None
    if len(parts) == 1 or not _is_module(".".join(parts[:2])):
        return "root"  # the package itself (its __version__)
    return parts[1] if parts[1] in STAGES else "front"


def _imports(path: Path, module_level_only: bool = False, runtime_only: bool = False) -> set[str]:
    """Absolute module names imported by ``path`` (anywhere, or at module level only; with
    ``runtime_only``, not those under ``if TYPE_CHECKING:``, annotations that import nothing
    when the code runs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                node.body = []
    nodes = tree.body if module_level_only else ast.walk(tree)
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import f`` imports mod
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.add(sub if _is_module(sub) else node.module)
    return names


def _is_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != "vgcsim" or len(parts) < 2:
        return False
    top = SOURCE_DIRS.get(parts[1])
    base = ROOT / top if top else ROOT / "vgcsim" / parts[1]
    path = base.joinpath(*parts[2:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _first_party_files() -> list[Path]:
    files = sorted((ROOT / "vgcsim").rglob("*.py"))
    for folder in SOURCE_DIRS.values():
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_every_layer_imports_only_layers_below_it():
    offenders = {}
    for path in _first_party_files():
        layer = _layer_of_file(path)
        used = {_layer_of_module(m) for m in _imports(path)} - {None}
        bad = sorted(used - ALLOWED[layer])
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert not offenders, f"imports against the layering: {offenders}"


#: What core must not name (a stage's import name); a string in core that names one is an import
#: done by someone else on core's behalf (a fork server's preload, a Dask preload, importlib).
STAGE_NAMES = tuple(f"vgcsim.{stage}" for stage in STAGES if stage != "core")


def _names_of_stages(path: Path) -> list[str]:
    """The stages ``path`` names: imported (``from vgcsim import simulator`` too), or spelled
    in any string or comment."""
    text = path.read_text(encoding="utf-8")
    imported = {f"vgcsim.{_layer_of_module(m)}" for m in _imports(path)}
    return sorted(name for name in STAGE_NAMES if name in imported or name in text)


def test_core_names_no_stage_not_even_in_a_string():
    offenders = {}
    for path in sorted((ROOT / "vgcsim" / "core").rglob("*.py")):
        named = _names_of_stages(path)
        if named:
            offenders[str(path.relative_to(ROOT))] = named
    assert not offenders, f"vgcsim/core names a stage: {offenders}"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("from vgcsim import simulator\n", ["vgcsim.simulator"]),
        ("def f():\n    import vgcsim.reports.render\n", ["vgcsim.reports"]),
        ('PRELOAD = ["vgcsim.models.predict"]\n', ["vgcsim.models"]),
        ("# written by vgcsim.traces.io\n", ["vgcsim.traces"]),
        ("from vgcsim.core.units import parse_time_s\nimport vgcsim\n", []),
    ],
)
def test_the_stage_name_check_sees_imports_strings_and_comments(tmp_path, code, expected):
    """The check above on a module it must refuse, and on one it must pass."""
    module = tmp_path / "module.py"
    module.write_text(code, encoding="utf-8")
    assert _names_of_stages(module) == expected


def test_the_api_is_the_one_front_door_that_commands_call():
    """``vgcsim/api.py`` imports no command (commands import the API, never the other way),
    and the replay commands reach the stages' run and save functions only through it."""
    api = _imports(ROOT / "vgcsim" / "api.py")
    assert not sorted(m for m in api if m.startswith(("vgcsim.commands", "vgcsim.cli")))
    orchestration = {"predict_trace", "simulate_trace", "save_results", "run_sweep"}
    for name in ("predict", "simulate", "demo", "sweep"):
        tree = ast.parse((ROOT / "vgcsim" / "commands" / f"{name}.py").read_text("utf-8"))
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        assert not imported & orchestration, (name, sorted(imported & orchestration))


#: Commands that are parse → api → print: they import no stage module (traces, models,
#: simulator, reports), not even lazily, and reach every stage through ``vgcsim.api``.
THROUGH_THE_API = tuple(
    sorted(p.stem for p in (ROOT / "vgcsim" / "commands").glob("*.py") if p.stem != "__init__")
)


def _stage_imports(path: Path) -> list[str]:
    """The stage modules ``path`` imports, lazily or not (annotations under ``if
    TYPE_CHECKING:`` aside: they import nothing when the code runs)."""
    return sorted(m for m in _imports(path, runtime_only=True) if _layer_of_module(m) in STAGES[1:])


@pytest.mark.parametrize("name", THROUGH_THE_API)
def test_a_command_reaches_the_stages_only_through_the_api(name):
    assert _stage_imports(ROOT / "vgcsim" / "commands" / f"{name}.py") == []


def test_the_stage_import_check_sees_a_lazy_stage_import(tmp_path):
    module = tmp_path / "command.py"
    module.write_text(
        "from vgcsim import api\nfrom vgcsim.core.config import apply_overrides\n\n"
        "def run(args):\n    from vgcsim.reports.render import render_report\n",
        encoding="utf-8",
    )
    assert _stage_imports(module) == ["vgcsim.reports.render"]


def test_models_and_simulator_never_import_each_other():
    assert "simulator" not in ALLOWED["models"] and "models" not in ALLOWED["simulator"]


def test_no_first_party_import_cycle():
    """Module graph over every import (lazy ones included): no cycle anywhere. ``from pkg
    import sub`` counts as an edge to pkg.sub only (Python runs pkg/__init__ first: a package
    __init__ must therefore not import the submodules that import it back)."""
    modules = {_module_name(p): p for p in _first_party_files()}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for imported in _imports(path):
            # ``from pkg import sub`` names a submodule; ``from mod import func`` names mod.
            if imported in modules and imported != name:
                graph.add_edge(name, imported)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"first-party import cycles: {cycles[:5]}"


def _python_prints(code: str, cwd=ROOT) -> str:
    """What ``python -c code`` prints (stripped), run in ``cwd``; it must exit 0."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_only_vgcsim_is_importable_from_outside_the_repository(tmp_path):
    """The installed distribution provides one import name: the stage folders are vgcsim.*."""
    code = (
        "import importlib.util as u, vgcsim.traces, vgcsim.models, vgcsim.simulator, "
        "vgcsim.reports, vgcsim.core; "
        "print([n for n in ('traces', 'models', 'simulator', 'reports', 'core') "
        "if u.find_spec(n) is not None])"
    )
    assert _python_prints(code, tmp_path) == "[]"
    failed = subprocess.run(
        [sys.executable, "-c", "import models"], capture_output=True, text=True, cwd=tmp_path
    )
    assert failed.returncode != 0 and "No module named 'models'" in failed.stderr


def test_torch_only_in_compression_and_training():
    allowed = (ROOT / "traces" / "compression", ROOT / "traces" / "training")
    offenders = []
    for path in _first_party_files():
        if _layer_of_file(path) == "front" or any(a in path.parents for a in allowed):
            continue
        if "torch" in {m.split(".")[0] for m in _imports(path, module_level_only=True)}:
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, (
        f"module-level torch imports outside traces/compression|training: {offenders}"
    )


def test_torch_free_stages_do_not_load_torch():
    code = (
        "import sys, vgcsim.cli, vgcsim.traces.io, vgcsim.core.results, vgcsim.models.predict, vgcsim.simulator.replay, "
        "vgcsim.reports.render; vgcsim.cli.build_parser(); print('torch' in sys.modules)"
    )
    assert _python_prints(code) == "False"


def test_the_command_line_parser_imports_no_numerical_library():
    # vgcsim --help and every command's argument parsing stay light; `vgcsim sweep` starts
    # its fork server only after the parser is built, so what the parser imports delays it
    code = (
        "import sys, vgcsim.cli; vgcsim.cli.build_parser(); "
        "print(sorted(m for m in ('numpy', 'pandas', 'torch', 'simpy', 'matplotlib') "
        "if m in sys.modules))"
    )
    assert _python_prints(code) == "[]"


def test_test_module_basenames_are_unique():
    names = Counter(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
    assert not list((ROOT / "tests").rglob("__init__.py")), "tests/**/__init__.py shadows packages"
