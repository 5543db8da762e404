"""Mutation testing per area: run mutmut on a copy of the tree and print the score of each area.

Usage (from the repository root)::

    python tools/mutation.py                 # every area of tools/mutation.toml
    python tools/mutation.py validate inputs # some areas
    python tools/mutation.py --list          # the areas and what they cover
    python tools/mutation.py validate --mutants 'vgcsim.traces.validate.x_check_trace__*'
                                             # only the mutants matching a glob (a quick check)
    python tools/mutation.py simulator --resume
                                             # go on with an interrupted run in its copy,
                                             # with the tree's tests (new ones included)
    python tools/mutation.py simulator --resume --retry
                                             # the same, and run the survivors again
    python tools/mutation.py simulator --resume --refresh
                                             # the same after the mutated code changed:
                                             # only the changed functions run again
    python tools/mutation.py compression --save
                                             # keep the copy's results beside the tree
                                             # (tools/mutation-results/, ignored by git),
                                             # also mid-run

``make mutation`` and ``make mutation AREA=models`` call this. Each area runs in its own copy
of the working tree (tracked and untracked, not ignored, files) under ``out/mutation/AREA/``
so that the working tree is never mutated, with a ``setup.cfg`` ``[mutmut]`` section written
from the area's entry in ``tools/mutation.toml``. mutmut itself runs at low CPU priority
(``nice``).

The copy is laid out by import name: a stage folder installed as ``vgcsim.X`` (pyproject's
``[tool.setuptools.package-dir]``, e.g. ``traces/`` -> ``vgcsim.traces``) is copied to
``vgcsim/X/``. mutmut names each mutant after its file's path, so ``vgcsim/traces/inputs.py``
gives mutants of module ``vgcsim.traces.inputs``, the name the tests import; and mutmut puts
``mutants/`` first on ``sys.path``, where the path finder resolves ``vgcsim`` and every
subpackage to the mutated copy before the editable install's finder (appended to
``sys.meta_path``) could map them to the working tree. ``PYTHONPATH`` names the same folder so
that test subprocesses (``python -m vgcsim ...``) import the mutated copy too. Before mutmut
starts, a child interpreter checks that every ``vgcsim`` subpackage imports from the copy. The
score counts killed and timed-out mutants over all mutants less the argued equivalents (the
``[[rule]]``s of the same file, by kind of change and by function: :func:`classify_survivors`);
surviving mutants that no rule argues are printed with their diff, and the exit status is 1
when an area scores below the target.

An area takes hours on 2 cores, longer than a working session, and ``out/`` is rebuilt:
``--save`` writes each mutant's result and each mutated function's source hash (mutmut's
``.meta`` files, less their timings) to ``tools/mutation-results/AREA/`` (ignored by git: run
output, not source). A run that starts a new copy seeds it with them: mutmut keeps the result of every
mutant whose function's source hash is unchanged and runs the others, so a run stopped in one
session goes on in the next (``--fresh`` ignores them and runs every mutant again).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tools" / "mutation.toml"
OUT = ROOT / "out" / "mutation"
#: results kept between runs, one folder per area (``--save``; a new copy is seeded from it;
#: ignored by git)
RESULTS = ROOT / "tools" / "mutation-results"
#: the keys of a mutmut ``.meta`` file that are kept: results and function source hashes
KEPT_META_KEYS = ("exit_code_by_key", "hash_by_function_name")
PYPROJECT = ROOT / "pyproject.toml"
#: what mutmut's own run leaves at the top of a copy, never copied into ``mutants/`` again
NOT_COPIED = ("mutants", "mutmut.log", "report.json", "setup.cfg")

#: mutmut exit codes (mutmut.stats.status_by_exit_code) that count as a detected mutant
DETECTED = ("killed", "timeout", "caught by type check", "segfault")


@dataclass
class AreaResult:
    area: str
    counts: dict[str, int] = field(default_factory=dict)
    equivalent: list[str] = field(default_factory=list)
    survivors: list[tuple[str, str]] = field(default_factory=list)  # (name, diff)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def detected(self) -> int:
        return sum(self.counts.get(s, 0) for s in DETECTED)

    @property
    def score(self) -> float:
        denom = self.total - len(self.equivalent)
        return 100.0 * self.detected / denom if denom > 0 else 100.0


def load_config(path: Path = CONFIG) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


def package_dirs(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """Repository folder -> folder in the copy, from ``[tool.setuptools.package-dir]``:
    ``{"traces": "vgcsim/traces", ...}`` (folders installed under their own name are left out)."""
    with pyproject.open("rb") as f:
        mapping = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    out = {}
    for name, folder in mapping.items():
        target = name.replace(".", "/")
        if folder.strip("/") != target:
            out[folder.strip("/")] = target
    return out


def copy_path(rel: str, dirs: dict[str, str]) -> str:
    """Where repository path ``rel`` lies in the copy (``traces/inputs.py`` ->
    ``vgcsim/traces/inputs.py``); paths outside a remapped folder keep their place."""
    for folder in sorted(dirs, key=len, reverse=True):
        if rel == folder or rel.startswith(folder + "/"):
            return dirs[folder] + rel[len(folder) :]
    return rel


def _tree_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    # the saved results stay out of the copies (git ignores them; this also holds where a
    # checkout tracks them): mutmut would find their .meta files in the copy's mutants/
    # folder and report mutants of other versions of the code
    kept = RESULTS.relative_to(ROOT).as_posix() + "/"
    return [p for p in out.split("\0") if p and (ROOT / p).is_file() and not p.startswith(kept)]


def _copy_tree(dest: Path, dirs: dict[str, str]) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    for rel in _tree_files():
        target = dest / copy_path(rel, dirs)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)


def pytest_args(area: dict, settings: dict) -> list[str]:
    """The pytest options of an area's mutant sessions: its own ``pytest_args`` where it has
    them (an area whose tests are all marked slow runs them), else the settings' ones."""
    return list(area.get("pytest_args", settings.get("pytest_args", [])))


def _setup_cfg(area: dict, settings: dict, dirs: dict[str, str], top: list[str]) -> str:
    """The ``[mutmut]`` section: the area's paths as they lie in the copy, and every other
    top-level entry of the copy (the whole ``vgcsim`` package, tests, data, benchmarks) copied
    into ``mutants/`` so that the mutated tree imports and reads nothing outside it."""

    def block(key: str, values: list[str]) -> str:
        return f"{key} =\n" + "".join(f"    {v}\n" for v in values)

    text = "[mutmut]\n"
    text += block("source_paths", [copy_path(p, dirs) for p in area["paths"]])
    text += block("also_copy", [p for p in top if p not in NOT_COPIED])
    text += block("pytest_add_cli_args", pytest_args(area, settings))
    text += block("pytest_add_cli_args_test_selection", area["tests"])
    if "process_isolation" in area:
        text += f"process_isolation = {area['process_isolation']}\n"
    return text


def _diff_lines(diff: str) -> tuple[str, str]:
    """The removed and the added source lines of a mutant's diff, stripped and joined."""
    minus = [
        ln[1:].strip()
        for ln in diff.splitlines()
        if ln.startswith("-") and not ln.startswith("---")
    ]
    plus = [
        ln[1:].strip()
        for ln in diff.splitlines()
        if ln.startswith("+") and not ln.startswith("+++")
    ]
    return "\n".join(minus), "\n".join(plus)


def _module_of(mutant: str) -> str:
    """``vgcsim.traces.extrapolate.x_rank_workers__mutmut_3`` -> ``vgcsim.traces.extrapolate``
    (mutants are named by import name: the copy is laid out by it)."""
    head = mutant.split("__mutmut_")[0]
    parts = head.split(".")
    # drop the mangled function (x_name, or xǁClassǁmethod for methods)
    return ".".join(parts[:-1])


def _read_meta(meta: Path, tries: int = 20) -> dict:
    """A mutmut ``.meta`` file; read again while mutmut, still running (a report during a
    run), is half-way through writing it."""
    for _ in range(tries - 1):
        try:
            return json.loads(meta.read_text())
        except json.JSONDecodeError:
            time.sleep(0.05)
    return json.loads(meta.read_text())


def _statuses(copy: Path, only: list[str] | None = None) -> dict[str, str]:
    """Status of every mutant of the last run (``only``: those matching one of these globs)."""
    from mutmut.stats import status_by_exit_code

    out: dict[str, str] = {}
    for meta in sorted((copy / "mutants").rglob("*.meta")):
        data = _read_meta(meta)
        for name, code in data.get("exit_code_by_key", {}).items():
            if only and not any(fnmatch.fnmatchcase(name, g) for g in only):
                continue
            out[name] = status_by_exit_code[code]
    return out


def run_area(
    name: str,
    area: dict,
    settings: dict,
    rules: list[dict],
    nice: int,
    jobs: int,
    rerun: bool = True,
    only: list[str] | None = None,
    resume: bool = False,
    retry: bool = False,
    refresh: bool = False,
    fresh: bool = False,
    save: bool = False,
):
    copy = OUT / name
    if resume and (copy / "mutants").is_dir():
        _resume(name, area, copy, nice, jobs, only, retry, refresh, settings)
    elif resume or rerun:
        if resume:
            print(f"[{name}] no copy in {_shown(copy)}: starting one from the saved results")
        _mutate(name, area, settings, copy, nice, jobs, only, seed=not fresh)
    elif not (copy / "mutants").is_dir():
        raise SystemExit(
            f"[{name}] no earlier run in {copy.relative_to(ROOT)}: run without --report"
        )
    if save:
        kept = save_results(name, copy)
        print(f"[{name}] saved {kept} results to {_shown(RESULTS / name)}")
    return _classify(name, copy, rules, only)


def _slim_meta(data: dict) -> dict:
    return {k: data.get(k, {}) for k in KEPT_META_KEYS}


def save_results(name: str, copy: Path, results: Path | None = None) -> int:
    """Write the copy's mutmut results (``mutants/**/*.meta``, results and source hashes only)
    to ``results/`` (default ``tools/mutation-results/NAME``), replacing what was there; the
    number of mutants with a result."""
    dest = results if results is not None else RESULTS / name
    metas = sorted((copy / "mutants").rglob("*.meta"))
    if not metas:
        raise SystemExit(f"[{name}] nothing to save: no results in {_shown(copy)}")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # the settings the results were obtained with (mutmut reruns everything when they change)
    shutil.copyfile(copy / "setup.cfg", dest / "setup.cfg")
    kept = 0
    for meta in metas:
        data = _slim_meta(_read_meta(meta))
        kept += sum(code is not None for code in data["exit_code_by_key"].values())
        target = dest / meta.relative_to(copy / "mutants")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return kept


def mutmut_settings(text: str) -> dict[str, list[str]]:
    """The ``[mutmut]`` section of a ``setup.cfg`` (its text): each key's non-blank lines,
    stripped (a one-line value is a list of one); empty without the section."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read_string(text)
    section = cfg["mutmut"] if cfg.has_section("mutmut") else {}
    return {k: [v.strip() for v in section[k].splitlines() if v.strip()] for k in section}


def tests_added(saved_cfg: str, new_cfg: str) -> list[str] | None:
    """The test files a new ``setup.cfg`` adds to a saved one's selection, when that is all
    that differs (``[]`` when nothing does); ``None`` when anything else changed (a test
    file dropped, pytest options, paths, process isolation)."""
    old, new = mutmut_settings(saved_cfg), mutmut_settings(new_cfg)
    key = "pytest_add_cli_args_test_selection"
    old_tests, new_tests = old.pop(key, []), new.pop(key, [])
    if old != new or not set(old_tests) <= set(new_tests):
        return None
    return [t for t in new_tests if t not in old_tests]


def seed_results(name: str, copy: Path, results: Path | None = None) -> int:
    """Put the saved results of ``results/`` (default ``tools/mutation-results/NAME``) into a
    new copy's ``mutants/`` before mutmut starts; the number of mutants with a result. mutmut
    keeps a mutant's result only while its function's source hash is the one saved.

    Where the area's ``setup.cfg`` differs from the one the results were saved with only by
    test files added to the selection, only the detections (killed, timed out) are seeded:
    a test that failed still runs, so a kill stays a kill, while a survivor may be caught by
    an added test and runs again (mutmut, handed the longer list in a copy it ran, would
    rerun every mutant). Nothing is seeded when anything else differs (its paths, a test
    file dropped, pytest options)."""
    from mutmut.stats import status_by_exit_code

    src = results if results is not None else RESULTS / name
    if not (src / "setup.cfg").is_file():
        return 0
    added = tests_added((src / "setup.cfg").read_text(), (copy / "setup.cfg").read_text())
    if added is None:
        print(f"[{name}] the area's settings changed since its results were saved: not used")
        return 0
    if added:
        print(
            f"[{name}] the area's tests gained {', '.join(added)} since its results were saved: "
            "kills and timeouts kept, every other mutant runs again"
        )
    kept = 0
    for meta in sorted(src.rglob("*.meta")):
        data = _slim_meta(json.loads(meta.read_text()))
        if added:
            data["exit_code_by_key"] = {
                key: code if status_by_exit_code[code] in DETECTED else None
                for key, code in data["exit_code_by_key"].items()
            }
        kept += sum(code is not None for code in data["exit_code_by_key"].values())
        target = copy / "mutants" / meta.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        # the layout mutmut's SourceFileMutationData.load expects (it requires every key)
        full = {
            **data,
            "type_check_error_by_key": {},
            "durations_by_key": {},
            "estimated_durations_by_key": {},
        }
        target.write_text(json.dumps(full))
    return kept


def _run_env(tree: Path) -> dict[str, str]:
    """The environment of a run on ``tree``: ``PYTHONPATH`` is that tree alone."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    return env


def check_imports_from(tree: Path, dirs: dict[str, str]) -> None:
    """Fail unless a fresh interpreter with ``tree`` first on its path imports ``vgcsim`` and
    every remapped subpackage from ``tree`` (not from the editable install's folders)."""
    names = ["vgcsim", *sorted(d.replace("/", ".") for d in dirs.values())]
    code = "import importlib, json; print(json.dumps({n: importlib.import_module(n).__file__ for n in %r}))"
    out = subprocess.run(
        [sys.executable, "-c", code % names],
        cwd=tree,
        env={**_run_env(tree), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"cannot import the copy in {tree}: {out.stderr.strip().splitlines()[-1]}")
    files = json.loads(out.stdout)
    outside = {n: f for n, f in files.items() if not Path(f).resolve().is_relative_to(tree)}
    if outside:
        raise SystemExit(
            f"the copy in {tree} is not what the tests would import: "
            + ", ".join(f"{n} from {f}" for n, f in outside.items())
        )


def _mutate(
    name: str,
    area: dict,
    settings: dict,
    copy: Path,
    nice: int,
    jobs: int,
    only: list[str] | None = None,
    seed: bool = True,
) -> None:
    dirs = package_dirs()
    _copy_tree(copy, dirs)
    if "mutmut" in tomllib.loads((copy / "pyproject.toml").read_text()).get("tool", {}):
        raise SystemExit(
            "pyproject.toml must not hold [tool.mutmut]: areas live in tools/mutation.toml"
        )
    check_imports_from(copy.resolve(), dirs)
    top = sorted(p.name for p in copy.iterdir() if not p.name.startswith("."))
    (copy / "setup.cfg").write_text(_setup_cfg(area, settings, dirs, top))
    # It must exist before mutmut starts: Python caches a missing sys.path folder as holding
    # nothing, and mutmut's own entry for it would then be skipped, falling back to the
    # editable install (the working tree, unmutated).
    (copy / "mutants").mkdir()
    if seed:
        kept = seed_results(name, copy)
        if kept:
            print(
                f"[{name}] {kept} results from {_shown(RESULTS / name)}: kept where the "
                "function's source is unchanged (--fresh runs every mutant again)"
            )
    _run_mutmut(name, area, copy, nice, jobs, only, "w")


def _run_mutmut(
    name: str,
    area: dict,
    copy: Path,
    nice: int,
    jobs: int,
    only: list[str] | None,
    log_mode: str,
) -> None:
    log = copy / "mutmut.log"
    cmd = [
        "nice",
        "-n",
        str(nice),
        sys.executable,
        "-m",
        "mutmut",
        "run",
        "--max-children",
        str(jobs),
        *(only or []),
    ]
    print(f"[{name}] mutating {', '.join(area['paths'])} against {', '.join(area['tests'])}")
    print(f"[{name}] {' '.join(cmd[3:])} in {copy.relative_to(ROOT)} (log: mutmut.log)", flush=True)
    env = _run_env((copy / "mutants").resolve())
    # mutmut's timeout is a CPU-time limit; on loaded cores idle OpenMP threads (torch, BLAS)
    # spin and exhaust it, so surviving mutants were counted as timed out: one thread each
    env.setdefault("OMP_NUM_THREADS", "1")
    with log.open(log_mode) as fh:
        rc = subprocess.run(cmd, cwd=copy, stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0 or not _statuses(copy, only):
        tail = log.read_text(errors="replace")[-3000:].replace("\r", "\n")
        raise SystemExit(f"[{name}] mutmut failed (exit {rc}); end of its log:\n{tail}")


def changed_since_copy(area: dict, copy: Path, dirs: dict[str, str]) -> list[str]:
    """The files under the area's mutated paths that differ between the working tree and
    ``copy`` (added, removed or edited), as repository paths."""
    mine = {
        copy_path(r, dirs): r for r in _tree_files() if any(_under(r, p) for p in area["paths"])
    }
    theirs = set()
    for p in area["paths"]:
        top = copy / copy_path(p, dirs)
        found = [top] if top.is_file() else top.rglob("*")
        theirs |= {
            str(f.relative_to(copy)) for f in found if f.is_file() and "__pycache__" not in f.parts
        }
    changed = [
        r
        for c, r in mine.items()
        if c not in theirs or (copy / c).read_bytes() != (ROOT / r).read_bytes()
    ]
    changed += [c for c in theirs if c not in mine]  # only in the copy (its own path)
    return sorted(changed)


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _under(rel: str, path: str) -> bool:
    path = path.rstrip("/")
    return rel == path or rel.startswith(path + "/")


#: The statuses ``--resume --retry`` runs again: a new test may now catch them.
RETRY_STATUSES = ("survived", "no tests", "not checked", "check was interrupted by user")


def _resume(
    name: str,
    area: dict,
    copy: Path,
    nice: int,
    jobs: int,
    only: list[str] | None,
    retry: bool = False,
    refresh: bool = False,
    settings: dict | None = None,
) -> None:
    """Go on with the run in ``copy``: mutmut keeps the results it has and runs the mutants
    that have none (and those named by ``only``), with the working tree's tests. Refused
    when the mutated code changed since the copy was taken (the results would mix two
    versions of it), unless ``refresh``: the changed files are then copied in, and mutmut
    mutates them again and runs again the mutants of every function whose source changed
    (it compares each function's hash with the one it stored), keeping the others' results.

    Refused too when the area's test list or pytest options in ``tools/mutation.toml``
    differ from the copy's (``selection_changed``): the copy would go on running the old
    list, so a test file added to the area would never run; given the new list, mutmut
    itself would reset every result and run the whole area again."""
    if not (copy / "mutants").is_dir():
        raise SystemExit(f"[{name}] no earlier run in {_shown(copy)} to resume")
    changed_settings = selection_changed(area, settings or {}, copy)
    if changed_settings:
        raise SystemExit(
            f"[{name}] cannot resume: the area's {' and '.join(changed_settings)} in "
            "tools/mutation.toml changed since the copy was taken, and the copy would run the "
            "old ones; run without --resume (every mutant again), or add tests to files the "
            "area already lists"
        )
    dirs = package_dirs()
    changed = changed_since_copy(area, copy, dirs)
    if changed and not refresh:
        raise SystemExit(
            f"[{name}] cannot resume: {', '.join(changed[:5])}"
            + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            + " changed since the copy was taken; add --refresh to run again the changed "
            "functions' mutants, or run without --resume"
        )
    if changed:
        _refresh_sources(name, changed, copy, dirs)
    synced = _sync_support(copy, dirs, area)
    print(f"[{name}] resuming in {_shown(copy)}; {synced} file(s) outside the area new or changed")
    if retry:  # mutmut runs again every mutant it is given by name
        statuses = _statuses(copy, only)
        only = sorted(m for m, st in statuses.items() if st in RETRY_STATUSES)
        print(f"[{name}] running again the {len(only)} mutants not caught yet")
        if not only:
            return
    _run_mutmut(name, area, copy, nice, jobs, only, "a")


def selection_changed(area: dict, settings: dict, copy: Path) -> list[str]:
    """What of the area's test selection differs between ``tools/mutation.toml`` (``area``,
    ``settings``) and the ``setup.cfg`` of ``copy``: "tests", "pytest options" and
    "process isolation" (the settings mutmut's own fingerprint watches); empty when none,
    or when the copy has no ``setup.cfg`` to compare with."""
    if not (copy / "setup.cfg").is_file():
        return []
    section = mutmut_settings((copy / "setup.cfg").read_text())
    changed = []
    if section.get("pytest_add_cli_args_test_selection", []) != list(area["tests"]):
        changed.append("tests")
    if section.get("pytest_add_cli_args", []) != pytest_args(area, settings):
        changed.append("pytest options")
    isolation = area.get("process_isolation")
    if section.get("process_isolation") != (None if isolation is None else [str(isolation)]):
        changed.append("process isolation")
    return changed


def _refresh_sources(name: str, changed: list[str], copy: Path, dirs: dict[str, str]) -> None:
    """Copy the changed source files ``changed`` (repository paths) from the tree into
    ``copy``, each with a fresh modification time: mutmut mutates a file again when its
    source is newer than its mutated version. A file the tree no longer has is refused:
    its mutants would stay in the results."""
    gone = [c for c in changed if not (ROOT / c).is_file()]
    if gone:
        raise SystemExit(
            f"[{name}] cannot refresh: {', '.join(gone[:5])} no longer in the tree; "
            "run without --resume"
        )
    for rel in changed:
        target = copy / copy_path(rel, dirs)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, target)
        os.utime(target)
    print(f"[{name}] refreshed {len(changed)} changed source file(s): {', '.join(changed)}")


def _sync_support(copy: Path, dirs: dict[str, str], area: dict) -> int:
    """Copy the working tree's files outside the area's mutated paths that are new or changed
    into ``copy`` (the tests, and the rest of the package they and the area import); their
    count. mutmut copies the package into its ``mutants/`` folder at the start of each run.

    Tests only added or sharpened since the copy was taken can only turn survivors into
    kills: mutmut keeps every result it has, runs its statistics for the new tests, and
    runs again the mutants named with ``--mutants`` (e.g. the survivors). The rest of the
    package travels too, so that a new test, or the area's code brought in by
    ``--refresh``, finds what it imports; a result kept from before may then belong to an
    older version of that code (a fresh run is the one to quote after large changes)."""
    count = 0
    for rel in _tree_files():
        if any(_under(rel, p) for p in area["paths"]):
            continue
        target = copy / copy_path(rel, dirs)
        if target.is_file() and target.read_bytes() == (ROOT / rel).read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
        count += 1
    return count


def _diffs(copy: Path, mutants: list[str], env: dict[str, str]) -> dict[str, str]:
    """Each mutant's diff, from one child interpreter in the copy (``mutmut show`` per mutant
    would start one per mutant)."""
    # A report during a run: mutmut may be half-way through writing a .meta file; read again.
    code = (
        "import json, sys, time\n"
        "from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant\n"
        "def diff(n, tries=50):\n"
        "    for _ in range(tries):\n"
        "        try:\n"
        "            return get_diff_for_mutant(n, path=find_mutant(n).path)\n"
        "        except json.JSONDecodeError:\n"
        "            time.sleep(0.05)\n"
        "    return get_diff_for_mutant(n, path=find_mutant(n).path)\n"
        "names = json.load(sys.stdin)\n"
        "print(json.dumps({n: diff(n) for n in names}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy,
        input=json.dumps(mutants),
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        raise SystemExit(f"cannot read the mutants' diffs in {copy}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


#: the kinds of change :func:`change_of` names
CHANGE_KINDS = ("argument", "string-case", "string", "operator", "number", "other")

_OPERATORS = {
    "<", ">", "<=", ">=", "==", "!=", "+", "-", "*", "/", "//", "%", "**", "<<", ">>",
    "&", "|", "^", "~", "and", "or", "not", "in", "is",
}  # fmt: skip


@dataclass(frozen=True)
class Change:
    """What a mutant changes on its line(s): ``kind`` (one of :data:`CHANGE_KINDS`), and for
    an argument dropped or set to None/False its keyword (``strict``) or, for a positional
    argument, its call (``astype()``); for a string its call (``float``)."""

    kind: str
    argument: str = ""
    call: str = ""


def _tokens(text: str) -> list[str]:
    import io
    import tokenize

    skip = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    skip += (tokenize.COMMENT,)
    try:
        return [
            t.string
            for t in tokenize.generate_tokens(io.StringIO(text + "\n").readline)
            if t.type not in skip
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):  # a line cut mid-call
        return text.split()


def _call_before(tokens: list[str], i: int) -> str:
    """The name of the call whose parentheses hold position ``i`` (``""`` if none)."""
    depth = 0
    for k in range(i - 1, -1, -1):
        if tokens[k] in ")]}":
            depth += 1
        elif tokens[k] in "([{":
            if depth == 0:
                return tokens[k - 1] if tokens[k] == "(" and k > 0 else ""
            depth -= 1
    return ""


def change_of(minus: str, plus: str) -> Change:
    """Classify the change from the removed source ``minus`` to the added ``plus`` (a
    mutant's diff, :func:`_diff_lines`) by its tokens: one argument dropped or its value set
    to ``None``/``False`` (``argument``), one string literal changed only in letter case
    (``string-case``) or otherwise (``string``), one operator or number swapped, or other."""
    import difflib

    a, b = _tokens(minus), _tokens(plus)
    ops = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()]
    diff = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in ops if tag != "equal"]
    if len(diff) != 1:
        return Change("other")
    i1, i2, j1, j2 = diff[0]
    old, new = a[i1:i2], b[j1:j2]
    if len(old) == 1 and len(new) == 1 and old[0][:1] in "\"'" and new[0][:1] in "\"'":
        kind = "string-case" if old[0].lower() == new[0].lower() else "string"
        return Change(kind, call=_call_before(a, i1))
    if len(old) == 1 and len(new) == 1 and old[0] in _OPERATORS and new[0] in _OPERATORS:
        return Change("operator")
    if len(old) == 1 and len(new) == 1 and old[0][:1].isdigit() and new[0][:1].isdigit():
        return Change("number")
    call = _call_before(a, i1)
    if call and new in ([], ["None"], ["False"]) and old:
        if "=" in old:  # a keyword argument dropped: [","] name "=" value [","]
            return Change("argument", argument=old[old.index("=") - 1], call=call)
        if i1 >= 2 and a[i1 - 1] == "=":  # a keyword argument's value replaced
            return Change("argument", argument=a[i1 - 2], call=call)
        if new and i1 >= 1 and a[i1 - 1] in "(,":  # a positional argument replaced
            return Change("argument", argument=f"{call}()", call=call)
    return Change("other")


def function_of(mutant: str) -> str:
    """``vgcsim.simulator.paths.round.x_run_rounds__mutmut_3`` -> ``vgcsim.simulator.paths.round.run_rounds``
    and, for a method, ``...network.xǁFairNetworkǁ_reshare__mutmut_1`` ->
    ``...network.FairNetwork._reshare`` (mutmut's mangled names)."""
    head = mutant.split("__mutmut_")[0]
    module, _, mangled = head.rpartition(".")
    if mangled.startswith("x\u01c1"):
        name = ".".join(p for p in mangled[2:].split("\u01c1") if p)
    else:
        name = mangled[2:] if mangled.startswith("x_") else mangled
    return f"{module}.{name}"


def rule_matches(rule: dict, change: Change, minus: str) -> bool:
    """Whether a ``[[rule]]`` of ``tools/mutation.toml`` argues a survivor with this change
    equivalent (``function`` rules are counted apart: :func:`classify_survivors`)."""
    kind = rule["kind"]
    if kind == "argument":
        return (
            change.kind == "argument"
            and change.argument in rule["arguments"]
            and (not rule.get("calls") or change.call in rule["calls"])
        )
    if kind == "string-case":
        return change.kind == "string-case" and change.call in rule["calls"]
    if kind == "logging":
        first = minus.strip().splitlines()[0] if minus.strip() else ""
        return any(first.startswith(prefix) for prefix in rule["lines_starting"])
    return False


def classify_survivors(
    survivors: dict[str, tuple[str, str]], rules: list[dict]
) -> tuple[list[str], dict[str, str]]:
    """Split surviving mutants (name -> (removed, added) source) into argued equivalents and
    the rest (name -> why it is not argued, for the report).

    A category rule (``argument``, ``string-case``, ``logging``) argues every survivor whose
    change it describes, anywhere. A ``function`` rule argues, per function it lists, up to
    the number of survivors its reason covers: when a function has more survivors than
    that, none of them is argued (a new one hides among them: read them all, then raise the
    number or add the test)."""
    equivalent: list[str] = []
    left: dict[str, list[str]] = {}
    for name, (minus, plus) in sorted(survivors.items()):
        change = change_of(minus, plus)
        if any(rule_matches(r, change, minus) for r in rules if r["kind"] != "function"):
            equivalent.append(name)
        else:
            left.setdefault(function_of(name), []).append(name)
    budget: dict[str, int] = {}
    for r in rules:
        if r["kind"] == "function":
            for fn, n in r["functions"].items():
                budget[fn] = budget.get(fn, 0) + int(n)
    why: dict[str, str] = {}
    for fn, names in left.items():
        argued = budget.get(fn, 0)
        if names and len(names) <= argued:
            equivalent.extend(names)
            continue
        note = (
            f"{len(names)} survivors in {fn}, {argued} argued in tools/mutation.toml"
            if argued
            else f"no rule argues survivors of {fn}"
        )
        why.update({n: note for n in names})
    return sorted(equivalent), why


def _classify(
    name: str, copy: Path, rules: list[dict], only: list[str] | None = None
) -> AreaResult:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    statuses = _statuses(copy, only)
    result = AreaResult(name)
    for status in statuses.values():
        result.counts[status] = result.counts.get(status, 0) + 1
    undetected = sorted(m for m, status in statuses.items() if status not in DETECTED)
    # a mutant not run yet has no diff worth reading (and thousands cost minutes)
    diffs = _diffs(copy, [m for m in undetected if statuses[m] != "not checked"], env)
    survived = {m: _diff_lines(diffs.get(m, "")) for m in undetected if statuses[m] == "survived"}
    result.equivalent, why = classify_survivors(survived, rules)
    argued = set(result.equivalent)
    for mutant in undetected:
        if mutant in argued:
            continue
        status, diff = statuses[mutant], diffs.get(mutant, "")
        note = f"; {why[mutant]}" if mutant in why else ""
        result.survivors.append((f"{mutant} ({status}{note})", diff))
    report = {
        "area": name,
        "counts": result.counts,
        "equivalent": result.equivalent,
        "survivors": [s for s, _ in result.survivors],
        "score_percent": result.score,
        "only": only or [],
    }
    (copy / "report.json").write_text(json.dumps(report, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("areas", nargs="*", help="areas of tools/mutation.toml (default: all)")
    ap.add_argument("--list", action="store_true", help="list the areas and exit")
    ap.add_argument("--jobs", type=int, default=2, help="mutmut worker processes (default 2)")
    ap.add_argument("--nice", type=int, default=19, help="nice level of mutmut (default 19)")
    ap.add_argument("--quiet", action="store_true", help="do not print surviving mutants' diffs")
    ap.add_argument(
        "--report",
        action="store_true",
        help="do not run mutmut again: classify the last run of each area (after editing the "
        "equivalents of tools/mutation.toml)",
    )
    ap.add_argument(
        "--mutants",
        nargs="+",
        metavar="GLOB",
        default=None,
        help="run (and count) only the mutants whose names match these globs, e.g. "
        "'vgcsim.traces.validate.x_check_trace__*'",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="go on with the last run of each area in its copy (mutants with a result keep it); "
        "refused where the mutated code changed since, unless --refresh",
    )
    ap.add_argument(
        "--refresh",
        action="store_true",
        help="with --resume: copy the changed source files in; mutmut then runs again the "
        "mutants of each function whose source changed and keeps the other results (a "
        "function that only calls a changed one keeps its results: after large changes, run "
        "without --resume)",
    )
    ap.add_argument(
        "--retry",
        action="store_true",
        help="with --resume: also run again the mutants that survived or had no test (after "
        "new tests were written)",
    )
    ap.add_argument(
        "--save",
        action="store_true",
        help="write each area's results to tools/mutation-results/AREA/ (with --report: the "
        "results so far, also while a run goes on); a new copy is seeded from them",
    )
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="start the copy without the saved results: run every mutant again",
    )
    args = ap.parse_args(argv)
    if args.fresh and (args.resume or args.report):
        print("error: --fresh starts a new copy: not with --resume or --report", file=sys.stderr)
        return 2
    if (args.retry or args.refresh) and not args.resume:
        print("error: --retry and --refresh go with --resume", file=sys.stderr)
        return 2
    if args.resume and args.report:
        print("error: --resume and --report exclude each other", file=sys.stderr)
        return 2
    cfg = load_config()
    areas = cfg["areas"]
    if not args.list:
        try:
            import mutmut  # noqa: F401  (the runs and the reports read its files)
        except ImportError:
            print(
                f"error: mutmut is not installed for {sys.executable}; run `make setup` and use "
                ".venv/bin/python tools/mutation.py",
                file=sys.stderr,
            )
            return 2
    if args.list:
        for name, a in areas.items():
            print(f"{name:12} {' '.join(a['paths'])}  <-  {' '.join(a['tests'])}")
        return 0
    unknown = [a for a in args.areas if a not in areas]
    if unknown:
        print(
            f"error: unknown area {', '.join(unknown)}; valid: {', '.join(areas)}", file=sys.stderr
        )
        return 2
    settings = cfg.get("settings", {})
    target = float(settings.get("target_percent", 85))
    results = [
        run_area(
            n,
            areas[n],
            settings,
            cfg.get("rule", []),
            args.nice,
            args.jobs,
            rerun=not args.report,
            only=args.mutants,
            resume=args.resume,
            retry=args.retry,
            refresh=args.refresh,
            fresh=args.fresh,
            save=args.save,
        )
        for n in (args.areas or list(areas))
    ]
    ok = True
    for r in results:
        if r.survivors and not args.quiet:
            print(
                f"\n[{r.area}] surviving mutants (each is a missing test or an unlisted equivalent):"
            )
            for name, diff in r.survivors:
                print(f"--- {name}")
                print("\n".join(ln for ln in diff.splitlines() if ln.strip()))
    print("\narea         mutants  killed  timeout  survived  equivalent  score")
    for r in results:
        survived = r.total - r.detected - len(r.equivalent)
        print(
            f"{r.area:12} {r.total:7d}  {r.counts.get('killed', 0):6d}  "
            f"{r.counts.get('timeout', 0):7d}  {survived:8d}  {len(r.equivalent):10d}  "
            f"{r.score:5.1f} %"
        )
        ok &= r.score >= target
    print(f"target: {target:.0f} % per area")
    if args.mutants:
        print(f"(counted: only the mutants matching {' '.join(args.mutants)})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
