"""tools/mutation.py's bookkeeping around a run: which mutated files changed since an area's
copy was taken (``--resume`` is refused then, unless ``--refresh``), copying new tests and the
rest of the package into the copy, and reading a ``.meta`` file that a running mutmut is
writing."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time

import pytest
from repo_scripts import ROOT, load_script

tool = load_script("tools/mutation.py")
AREA = {"paths": ["reports/tables.py"], "tests": ["tests/reports/test_tables.py"]}


def _copy_of_area(tmp_path):
    dirs = tool.package_dirs()
    copy = tmp_path / "copy"
    target = copy / tool.copy_path("reports/tables.py", dirs)
    target.parent.mkdir(parents=True)
    shutil.copy2(ROOT / "reports/tables.py", target)
    return copy, target, dirs


def test_a_copy_equal_to_the_tree_has_no_change_and_each_kind_of_change_is_named(tmp_path):
    copy, target, dirs = _copy_of_area(tmp_path)
    assert tool.copy_path("reports/tables.py", dirs) == "vgcsim/reports/tables.py"
    assert tool.changed_since_copy(AREA, copy, dirs) == []
    target.write_text(target.read_text() + "\n# edited\n")
    assert tool.changed_since_copy(AREA, copy, dirs) == ["reports/tables.py"]
    target.unlink()  # a file the copy lacks
    assert tool.changed_since_copy(AREA, copy, dirs) == ["reports/tables.py"]
    shutil.copy2(ROOT / "reports/tables.py", target)
    (target.parent / "extra.py").write_text("x = 1\n")  # a file only the copy has
    assert tool.changed_since_copy({"paths": ["reports"]}, copy, dirs) != []
    assert tool.changed_since_copy(AREA, copy, dirs) == []  # outside the area's paths


def test_resume_is_refused_when_the_mutated_code_changed(tmp_path, monkeypatch):
    copy, target, _ = _copy_of_area(tmp_path)
    (copy / "mutants").mkdir()
    target.write_text("# another version\n")
    monkeypatch.setattr(tool, "ROOT", ROOT)
    with pytest.raises(SystemExit, match="cannot resume: reports/tables.py changed"):
        tool._resume("tables", AREA, copy, 19, 1, None)
    with pytest.raises(SystemExit, match="no earlier run"):
        tool._resume("tables", AREA, tmp_path / "none", 19, 1, None)


def test_sync_support_copies_new_and_changed_files_outside_the_area_only(tmp_path):
    dirs = tool.package_dirs()
    copy = tmp_path / "copy"
    first = tool._sync_support(copy, dirs, AREA)
    assert first > 0 and (copy / "tests" / "test_mutation_tool.py").is_file()
    # the rest of the package travels (by import name), the area's own file does not
    assert (copy / "vgcsim" / "core" / "collectives.py").is_file()
    assert (copy / "vgcsim" / "reports" / "plots.py").is_file()
    assert not (copy / "vgcsim" / "reports" / "tables.py").exists()
    assert tool._sync_support(copy, dirs, AREA) == 0
    stale = copy / "tests" / "test_mutation_tool.py"
    stale.write_text("# old\n")
    old_core = copy / "vgcsim" / "core" / "collectives.py"
    old_core.write_text("# an older core\n")
    assert tool._sync_support(copy, dirs, AREA) == 2
    assert stale.read_bytes() == (ROOT / "tests" / "test_mutation_tool.py").read_bytes()
    assert old_core.read_bytes() == (ROOT / "vgcsim" / "core" / "collectives.py").read_bytes()


def test_a_meta_file_half_written_is_read_again(tmp_path):
    meta = tmp_path / "x.py.meta"
    data = {"exit_code_by_key": {"m.x_f__mutmut_1": 0}}
    meta.write_text(json.dumps(data)[:10])  # mutmut is half-way through writing it

    def finish():
        time.sleep(0.2)
        meta.write_text(json.dumps(data))

    writer = threading.Thread(target=finish)
    writer.start()
    try:
        assert tool._read_meta(meta) == data
    finally:
        writer.join()
    meta.write_text("{")
    with pytest.raises(json.JSONDecodeError):
        tool._read_meta(meta, tries=2)


def test_resume_with_refresh_copies_the_changed_source_in_newer_than_its_mutants(
    tmp_path, monkeypatch
):
    """--refresh: the tree's version of a changed file replaces the copy's, with a modification
    time after its mutated version's (mutmut mutates a file again when its source is
    newer), and the run goes on; a file the tree no longer has is refused."""
    import os

    copy, target, dirs = _copy_of_area(tmp_path)
    mutated = copy / "mutants" / tool.copy_path("reports/tables.py", dirs)
    mutated.parent.mkdir(parents=True)
    mutated.write_text("# mutated from the old version\n")
    target.write_text("# the old version\n")
    earlier = time.time() - 3600
    os.utime(target, (earlier, earlier))
    os.utime(mutated, (earlier + 1, earlier + 1))
    runs = []
    monkeypatch.setattr(tool, "_run_mutmut", lambda *args: runs.append(args))
    monkeypatch.setattr(tool, "_sync_support", lambda copy, dirs, area: 0)
    tool._resume("tables", AREA, copy, 19, 1, None, refresh=True)
    assert target.read_bytes() == (ROOT / "reports/tables.py").read_bytes()
    assert target.stat().st_mtime > mutated.stat().st_mtime
    assert tool.changed_since_copy(AREA, copy, dirs) == []
    assert len(runs) == 1
    with pytest.raises(SystemExit, match="reports/gone.py no longer in the tree"):
        tool._refresh_sources("tables", ["reports/gone.py"], copy, dirs)


def test_saved_results_keep_exit_codes_and_hashes_only_and_seed_a_new_copy(tmp_path, monkeypatch):
    """--save writes each .meta file's results and function hashes (not its timings) to the
    results folder, replacing what was there; a new copy is seeded with exactly those, at
    the same paths under mutants/, and the count is of mutants with a result."""
    copy = tmp_path / "copy"
    meta = copy / "mutants" / "vgcsim" / "reports" / "tables.py.meta"
    meta.parent.mkdir(parents=True)
    data = {
        "exit_code_by_key": {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 0, "m.x_f__mutmut_3": None},
        "hash_by_function_name": {"x_f": "abc"},
        "durations_by_key": {"m.x_f__mutmut_1": 1.5},
        "estimated_durations_by_key": {},
    }
    meta.write_text(json.dumps(data))
    (copy / "setup.cfg").write_text("[mutmut]\nsource_paths =\n    vgcsim/reports/tables.py\n")
    results = tmp_path / "results"
    stale = results / "vgcsim" / "gone.py.meta"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    assert tool.save_results("tables", copy, results) == 2
    saved = results / "vgcsim" / "reports" / "tables.py.meta"
    assert json.loads(saved.read_text()) == {
        "exit_code_by_key": data["exit_code_by_key"],
        "hash_by_function_name": {"x_f": "abc"},
    }
    assert not stale.exists()
    new = tmp_path / "new"
    (new / "mutants").mkdir(parents=True)
    shutil.copyfile(copy / "setup.cfg", new / "setup.cfg")
    assert tool.seed_results("tables", new, results) == 2
    seeded = new / "mutants" / "vgcsim" / "reports" / "tables.py.meta"
    # what mutmut's own reader takes: every key, the timings empty
    from mutmut.mutation.data import SourceFileMutationData

    monkeypatch.chdir(new)
    read = SourceFileMutationData(path="vgcsim/reports/tables.py")
    read.load()
    assert read.exit_code_by_key == data["exit_code_by_key"]
    assert read.hash_by_function_name == {"x_f": "abc"} and read.durations_by_key == {}
    assert tool.seed_results("tables", new, tmp_path / "none") == 0
    # other settings (here other paths): the saved results are not used
    seeded.unlink()
    (new / "setup.cfg").write_text("[mutmut]\nsource_paths =\n    vgcsim/traces/\n")
    assert tool.seed_results("tables", new, results) == 0 and not seeded.exists()
    with pytest.raises(SystemExit, match="nothing to save"):
        tool.save_results("tables", tmp_path / "empty", results)


def test_the_saved_results_stay_out_of_the_copies():
    """A copy of the tree never holds tools/mutation-results: mutmut would read those .meta
    files in the copy's mutants/ folder as results of its own run. git ignores the folder
    (run output), and the copy's file list leaves it out even where a checkout tracks it."""
    meta = "tools/mutation-results/simulator/vgcsim/simulator/rounds.py.meta"
    ignored = subprocess.run(["git", "check-ignore", "-q", meta], cwd=ROOT, check=False)
    assert ignored.returncode == 0
    files = tool._tree_files()
    assert "tools/mutation.py" in files
    assert not any(f.startswith("tools/mutation-results/") for f in files)


def test_resume_is_refused_when_the_areas_tests_changed(tmp_path, monkeypatch):
    """A copy runs the test list its setup.cfg was written with: a test file added to the
    area in tools/mutation.toml would never run there (and mutmut, given the new list, would
    reset every result), so --resume names what changed and stops; the same list goes on."""
    copy, _, dirs = _copy_of_area(tmp_path)
    (copy / "mutants").mkdir()
    settings = {"pytest_args": ["-p", "no:cacheprovider"]}
    (copy / "setup.cfg").write_text(tool._setup_cfg(AREA, settings, dirs, ["tests"]))
    assert tool.selection_changed(AREA, settings, copy) == []
    more_tests = {**AREA, "tests": [*AREA["tests"], "tests/reports/test_tables_contract.py"]}
    assert tool.selection_changed(more_tests, settings, copy) == ["tests"]
    assert tool.selection_changed(AREA, {"pytest_args": []}, copy) == ["pytest options"]
    forked = {**AREA, "process_isolation": "forkserver"}
    assert tool.selection_changed(forked, settings, copy) == ["process isolation"]
    monkeypatch.setattr(tool, "ROOT", ROOT)
    with pytest.raises(SystemExit, match="cannot resume: the area's tests in tools/mutation.toml"):
        tool._resume("tables", more_tests, copy, 19, 1, None, settings=settings)
    runs = []
    monkeypatch.setattr(tool, "_run_mutmut", lambda *args: runs.append(args))
    monkeypatch.setattr(tool, "_sync_support", lambda copy, dirs, area: 0)
    tool._resume("tables", AREA, copy, 19, 1, None, settings=settings)
    assert len(runs) == 1


def test_without_mutmut_the_tool_says_so_in_one_line(monkeypatch, capsys):
    """Run with a Python that lacks mutmut (the system one rather than the venv's), the tool
    stops before copying anything, with one line naming the fix, not an ImportError traceback;
    --list still works (it reads only tools/mutation.toml)."""
    monkeypatch.setitem(__import__("sys").modules, "mutmut", None)
    assert tool.main(["tables", "--report"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mutmut is not installed" in err and "make setup" in err
    assert tool.main(["--list"]) == 0
    assert "tables" in capsys.readouterr().out


def test_tests_added_to_the_area_keep_the_kills_and_run_the_rest_again(tmp_path):
    """Saved with tests A, seeded into a copy whose area has A and B: a mutant A killed (or
    timed out) stays so, since A still runs; a survivor, a mutant without a test and one
    never run get no result, so mutmut runs them with B too. Any other difference (a test
    dropped, other pytest options) seeds nothing."""
    area = {"paths": ["reports/tables.py"], "tests": ["tests/a.py"]}
    settings = {"pytest_args": ["-p", "no:cacheprovider"]}
    dirs = tool.package_dirs()
    saved_cfg = tool._setup_cfg(area, settings, dirs, ["tests"])
    results = tmp_path / "results"
    meta = results / "vgcsim" / "reports" / "tables.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {
        "m.x_f__mutmut_1": 1,
        "m.x_f__mutmut_2": 0,
        "m.x_f__mutmut_3": -24,
        "m.x_f__mutmut_4": 33,
        "m.x_f__mutmut_5": None,
    }
    meta.write_text(json.dumps({"exit_code_by_key": codes, "hash_by_function_name": {"x_f": "h"}}))
    (results / "setup.cfg").write_text(saved_cfg)
    more = {**area, "tests": ["tests/a.py", "tests/b.py"]}
    new_cfg = tool._setup_cfg(more, settings, dirs, ["tests"])
    assert tool.tests_added(saved_cfg, new_cfg) == ["tests/b.py"]
    assert tool.tests_added(saved_cfg, saved_cfg) == []
    assert tool.tests_added(new_cfg, saved_cfg) is None  # a test file dropped
    other = tool._setup_cfg(more, {"pytest_args": []}, dirs, ["tests"])
    assert tool.tests_added(saved_cfg, other) is None
    copy = tmp_path / "copy"
    (copy / "mutants").mkdir(parents=True)
    (copy / "setup.cfg").write_text(new_cfg)
    assert tool.seed_results("tables", copy, results) == 2
    seeded = json.loads((copy / "mutants" / "vgcsim" / "reports" / "tables.py.meta").read_text())
    assert seeded["exit_code_by_key"] == {
        "m.x_f__mutmut_1": 1,
        "m.x_f__mutmut_2": None,
        "m.x_f__mutmut_3": -24,
        "m.x_f__mutmut_4": None,
        "m.x_f__mutmut_5": None,
    }
    assert seeded["hash_by_function_name"] == {"x_f": "h"}
    (copy / "setup.cfg").write_text(other)
    assert tool.seed_results("tables", copy, results) == 0


# -- equivalent mutants: rules by kind of change and by function ------------------------------


@pytest.mark.parametrize(
    ("minus", "plus", "kind", "argument", "call"),
    [
        (
            "for a, b in zip(x, y, strict=True):",
            "for a, b in zip(x, y, strict=None):",
            "argument",
            "strict",
            "zip",
        ),
        (
            "for a, b in zip(x, y, strict=True):",
            "for a, b in zip(x, y, ):",
            "argument",
            "strict",
            "zip",
        ),
        (
            "for a, b in zip(x, y, strict=True):",
            "for a, b in zip(x, y, strict=False):",
            "argument",
            "strict",
            "zip",
        ),
        (
            'with np.errstate(divide="ignore"):',
            "with np.errstate(divide=None):",
            "argument",
            "divide",
            "errstate",
        ),
        ("y = x.astype(np.float64)", "y = x.astype(None)", "argument", "astype()", "astype"),
        ('v = float("inf")', 'v = float("INF")', "string-case", "", "float"),
        ('v = f("inf")', 'v = f("XXinfXX")', "string", "", "f"),
        ("if a > b:", "if a >= b:", "operator", "", ""),
        ("n = 1", "n = 2", "number", "", ""),
        ("if a > b:", "if a > b + 1:", "other", "", ""),
    ],
)
def test_a_mutants_change_is_classified_by_its_tokens(minus, plus, kind, argument, call):
    assert tool.change_of(minus, plus) == tool.Change(kind, argument, call)


def test_mutmut_names_give_the_function_or_method():
    assert tool.function_of("vgcsim.simulator.paths.round.x_run_rounds__mutmut_3") == (
        "vgcsim.simulator.paths.round.run_rounds"
    )
    assert tool.function_of("vgcsim.simulator.network.x\u01c1_Flow\u01c1__init____mutmut_12") == (
        "vgcsim.simulator.network._Flow.__init__"
    )


RULES = [
    {"kind": "argument", "arguments": ["strict"], "calls": ["zip"], "reason": "r"},
    {"kind": "logging", "lines_starting": ["log.debug("], "reason": "r"},
    {"kind": "function", "functions": {"m.f": 2}, "reason": "r"},
]


def test_a_category_rule_argues_its_change_anywhere_and_nothing_else():
    survivors = {
        "m.x_g__mutmut_1": ("zip(a, b, strict=True)", "zip(a, b, strict=None)"),
        "m.x_g__mutmut_2": ('log.debug("n=%d", n)', 'log.debug("XXn=%dXX", n)'),
        "m.x_g__mutmut_3": ("if a > b:", "if a >= b:"),
        "m.x_g__mutmut_4": ("sorted(a, key=k)", "sorted(a, )"),  # an argument, not of zip
    }
    equivalent, why = tool.classify_survivors(survivors, RULES)
    assert equivalent == ["m.x_g__mutmut_1", "m.x_g__mutmut_2"]
    assert set(why) == {"m.x_g__mutmut_3", "m.x_g__mutmut_4"}
    assert why["m.x_g__mutmut_3"] == "no rule argues survivors of m.g"


def test_a_function_rule_argues_up_to_its_number_and_none_beyond():
    two = {f"m.x_f__mutmut_{i}": ("if a > b:", "if a >= b:") for i in (1, 2)}
    assert tool.classify_survivors(two, RULES) == (sorted(two), {})
    three = {**two, "m.x_f__mutmut_3": ("n = 1", "n = 2")}
    equivalent, why = tool.classify_survivors(three, RULES)
    assert equivalent == []
    assert set(why) == set(three)
    assert why["m.x_f__mutmut_3"] == "3 survivors in m.f, 2 argued in tools/mutation.toml"


def test_the_rules_of_the_toml_are_well_formed():
    rules = tool.load_config()["rule"]
    kinds = {"argument", "string-case", "logging", "function"}
    for rule in rules:
        assert rule["kind"] in kinds and rule["reason"].strip() and rule["name"], rule
        if rule["kind"] == "function":
            assert all(n > 0 for n in rule["functions"].values())
            assert all(fn.startswith("vgcsim.") for fn in rule["functions"])
    names = [fn for r in rules if r["kind"] == "function" for fn in r["functions"]]
    assert len(names) == len(set(names))  # one number per function


def test_an_area_may_run_its_slow_tests_with_its_own_pytest_options(tmp_path):
    """The resume area's tests record in child processes and are marked slow: its own
    pytest options keep them in its mutant sessions; the other areas leave slow tests out."""
    cfg = tool.load_config()
    settings = cfg["settings"]
    assert "not slow" in " ".join(tool.pytest_args(cfg["areas"]["models"], settings))
    resume = tool.pytest_args(cfg["areas"]["resume"], settings)
    assert "slow" not in " ".join(resume)
    text = tool._setup_cfg(cfg["areas"]["resume"], settings, tool.package_dirs(), ["tests"])
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "setup.cfg").write_text(text)
    assert tool.selection_changed(cfg["areas"]["resume"], settings, copy) == []
    without = {k: v for k, v in cfg["areas"]["resume"].items() if k != "pytest_args"}
    assert tool.selection_changed(without, settings, copy) == ["pytest options"]
