"""The commit and the package versions every header records (vgcsim.core.provenance).

``git_commit`` runs ``git rev-parse HEAD`` in the package's own folder, whatever the caller's
working folder; these tests put a stand-in ``git`` first on PATH that records how it was called
and answers as told, so each of its answers is checked, then the real git on this checkout.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy
import pandas
import pyarrow
import pytest

from vgcsim.core import provenance
from vgcsim.core.provenance import git_commit, package_versions
from vgcsim.core.version import __version__

PACKAGE_DIR = Path(provenance.__file__).resolve().parent


def _stand_in_git(where: Path, *, stdout: str, code: int) -> Path:
    """A ``git`` that writes its arguments and working folder to ``calls.jsonl`` beside it,
    prints ``stdout`` and exits with ``code``."""
    where.mkdir(parents=True, exist_ok=True)
    log = where / "calls.jsonl"
    script = where / "git"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd()}) + '\\n')\n"
        f"sys.stdout.write({stdout!r})\n"
        f"sys.exit({code})\n"
    )
    script.chmod(0o755)
    return log


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The test runs from a folder outside any checkout."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _answer(tmp_path, monkeypatch, *, stdout: str, code: int):
    log = _stand_in_git(tmp_path / "bin", stdout=stdout, code=code)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    got = git_commit()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return got, calls


def test_the_commit_is_asked_of_git_in_the_package_folder_and_stripped(
    tmp_path, monkeypatch, elsewhere
):
    got, calls = _answer(tmp_path, monkeypatch, stdout="  0123abcd\n", code=0)
    assert got == "0123abcd" and isinstance(got, str)
    assert calls == [{"argv": ["rev-parse", "HEAD"], "cwd": str(PACKAGE_DIR)}]


def test_git_refusing_gives_none_even_with_output(tmp_path, monkeypatch, elsewhere):
    got, calls = _answer(tmp_path, monkeypatch, stdout="fatal: not a git repository\n", code=128)
    assert got is None and len(calls) == 1


@pytest.mark.parametrize("stdout", ["", " \n"])
def test_git_answering_nothing_gives_none(tmp_path, monkeypatch, elsewhere, stdout):
    got, _ = _answer(tmp_path, monkeypatch, stdout=stdout, code=0)
    assert got is None


def test_no_git_at_all_gives_none(tmp_path, monkeypatch, elsewhere):
    empty = tmp_path / "nothing"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert git_commit() is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_in_this_checkout_it_is_head_whatever_the_working_folder(elsewhere):
    want = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PACKAGE_DIR, capture_output=True, text=True
    )
    if want.returncode != 0:
        pytest.skip("the package is not in a git checkout here")
    assert git_commit() == want.stdout.strip()


def test_versions_name_vgcsim_python_and_the_base_packages():
    assert package_versions() == {
        "vgcsim": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "pyarrow": pyarrow.__version__,
    }


def test_extra_packages_come_after_with_their_version_or_unknown(monkeypatch):
    with_version = types.ModuleType("vgcsim_test_with_version")
    with_version.__version__ = 1.5  # not a string: written as one
    monkeypatch.setitem(sys.modules, "vgcsim_test_with_version", with_version)
    monkeypatch.setitem(sys.modules, "vgcsim_test_bare", types.ModuleType("vgcsim_test_bare"))
    got = package_versions("vgcsim_test_with_version", "vgcsim_test_bare")
    assert list(got)[-2:] == ["vgcsim_test_with_version", "vgcsim_test_bare"]
    assert got["vgcsim_test_with_version"] == "1.5"
    assert got["vgcsim_test_bare"] == "unknown"
    assert got["numpy"] == numpy.__version__


def test_an_extra_package_that_is_not_installed_is_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        package_versions("vgcsim_no_such_package")
