"""The reference docs name things that exist.

Every ``vgcsim.…`` dotted name in backticks in README.md and docs/*.md resolves to a module of
the package or to a name defined at the top level of one (or to a class attribute of such a
name), and every repository path in backticks (``traces/training/distributed_hook.py``,
``tests/data/sample_trace``, ``tests/…/test_x.py::test_y``) exists. Names are resolved from
the source files (``ast``), without importing them, so the check needs neither torch nor the
simulator's dependencies. docs/journal/ is history and is not checked. Every internal link of a
doc's table of contents (``[…](#anchor)``) names a heading of that doc.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

#: Top-level folders of the repository a path in backticks may start with, and the package
#: folders that docs name relative to ``vgcsim/`` (``core/cluster.py``, ``commands/…``).
REPO_DIRS = (
    "vgcsim",
    "traces",
    "models",
    "simulator",
    "reports",
    "benchmarks",
    "experiments",
    "tests",
    "tools",
    "docs",
)
PACKAGE_DIRS = {"core": "vgcsim/core", "commands": "vgcsim/commands"}

SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"^vgcsim(\.[A-Za-z_][A-Za-z0-9_]*)+(\(\))?$")
PATH = re.compile(r"^[A-Za-z0-9_.\-/]+(::[A-Za-z0-9_\[\]\-.]+)?$")


def spans(doc: Path) -> list[str]:
    """Backticked spans outside fenced code blocks (code blocks hold commands and outputs)."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    return SPAN.findall(text)


@cache
def module_tree(origin: str) -> ast.Module:
    return ast.parse(Path(origin).read_text(encoding="utf-8"))


def top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    """Names bound at a module's top level (or inside its top-level if/try blocks)."""
    names: dict[str, ast.AST] = {}

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            names[name.id] = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names[(alias.asname or alias.name).split(".")[0]] = node
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    return names


def find_module(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def placeholder(segments: list[str], pattern: str) -> bool:
    """A span such as ``vgcsim.X`` or ``tools/mutation-results/AREA/`` stands for a family."""
    return any(re.fullmatch(pattern, s) for s in segments)


def resolves(dotted: str) -> bool:
    """``dotted`` is a module of the package, or a module plus names defined in it."""
    parts = dotted.removesuffix("()").split(".")
    if placeholder(parts, r"[A-Z]"):
        return True
    for cut in range(len(parts), 0, -1):
        spec = find_module(".".join(parts[:cut]))
        if spec is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        if spec.origin is None or not spec.origin.endswith(".py"):
            return False
        names = top_level_names(module_tree(spec.origin))
        node = names.get(rest[0])
        if node is None:
            # a submodule the package does not import at its top level
            return find_module(".".join(parts[: cut + 1])) is not None and len(rest) == 1
        if len(rest) == 1 or not isinstance(node, ast.ClassDef):
            return True
        members = top_level_names(ast.Module(body=node.body, type_ignores=[]))
        return rest[1] in members
    return False


#: Folders git ignores (run output such as tools/mutation-results/): named, never shipped.
IGNORED = tuple(
    line.strip().strip("/") + "/"
    for line in (ROOT / ".gitignore").read_text().splitlines()
    if line.strip() and not line.startswith("#") and "*" not in line
)


def repo_path(span: str) -> Path | None:
    """The repository path a span names, or None when it names none (a command, an output
    file of an example such as ``runs/x/results.csv``, a module name, run output that git
    ignores)."""
    if "/" not in span or not PATH.match(span) or "*" in span:
        return None
    path = span.split("::")[0].rstrip("/")
    if (path + "/").startswith(IGNORED):
        return None
    if placeholder(path.split("/"), r"[A-Z]+"):
        return None
    head, _, tail = path.partition("/")
    if head in PACKAGE_DIRS and not (ROOT / path).exists():
        return ROOT / PACKAGE_DIRS[head] / tail
    if head in REPO_DIRS:
        return ROOT / path
    return None


#: The example modules docs/extending.md shows whole; each recipe's test uses its module.
EXTENDING_EXAMPLES = (
    "tests/compression/_toy_compressor.py",
    "tests/simulator/_toy_topology.py",
    "tests/reports/_toy_section.py",
)


@pytest.mark.parametrize("module", EXTENDING_EXAMPLES)
def test_extending_shows_each_example_module_whole(module):
    doc = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    text = (ROOT / module).read_text(encoding="utf-8")
    assert f"```python\n{text}```\n" in doc


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_dotted_names_in_docs_resolve(doc):
    wrong = sorted({s for s in spans(doc) if DOTTED.match(s) and not resolves(s)})
    assert not wrong, f"{doc.name} names what does not exist: {wrong}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_repository_paths_in_docs_exist(doc):
    wrong = sorted({s for s in spans(doc) if (p := repo_path(s)) is not None and not p.exists()})
    assert not wrong, f"{doc.name} names paths that do not exist: {wrong}"


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_contents_links_name_headings(doc):
    text = doc.read_text(encoding="utf-8")
    body = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    headings = {anchor(h) for h in re.findall(r"^#{1,6} (.+)$", body, flags=re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links <= headings, f"{doc.name}: links to no heading: {sorted(links - headings)}"


def test_long_docs_have_contents():
    long = [
        d.name for d in DOCS if d.parent.name == "docs" and len(d.read_text().splitlines()) > 300
    ]
    missing = [name for name in long if "](#" not in (ROOT / "docs" / name).read_text()]
    assert not missing, f"docs over 300 lines without a table of contents: {missing}"


def test_the_checks_catch_a_wrong_name_and_a_wrong_path():
    assert resolves("vgcsim.core.collectives.COLLECTIVE_KEYS")
    assert resolves("vgcsim.traces.training.distributed_hook.VGCState")
    assert not resolves("vgcsim.traces.schema.COLLECTIVE_KEYS")
    assert not resolves("vgcsim.core.preload")
    assert repo_path("traces/training/distributed_hook.py").exists()
    assert not repo_path("vgcsim/core/forkserver.py").exists()
    assert repo_path("runs/myjob") is None
    assert repo_path("tools/mutation-results/AREA/") is None
    assert anchor("The fit and what its error means") == "the-fit-and-what-its-error-means"
    assert anchor("Real DDP jobs against the prediction (`benchmarks/real_ddp.py`)") == (
        "real-ddp-jobs-against-the-prediction-benchmarksreal_ddppy"
    )
