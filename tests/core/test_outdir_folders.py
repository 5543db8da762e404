"""Output folders by their rules (vgcsim.core.outdir): which folders a command may write, the
one line that refuses the others, the marker it leaves, and how one file is written."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from tests.conftest import ascii_locale
from vgcsim.core.outdir import (
    MARKER,
    MARKER_KIND,
    OutputDir,
    OutputError,
    WriteError,
    atomic_write,
    atomic_write_text,
    check_output,
    prepare_output,
    read_marker,
)
from vgcsim.core.version import __version__


def _marked(folder: Path, files: list[str], **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(json.dumps({"kind": MARKER_KIND, "files": files, **extra}))
    for name in files:
        (folder / name).write_text("old")
    return folder


# -- which folders, and the line that refuses the others ----------------------------------


def test_a_file_in_place_of_the_folder_is_refused_naming_command_and_path(tmp_path):
    where = tmp_path / "f"
    where.write_text("x")
    for call in (check_output, prepare_output):
        with pytest.raises(OutputError) as err:
            call(where, "predict")
        assert str(err.value) == f"cannot write predict output to {where}: it is not a folder"


def test_a_folder_vgcsim_did_not_write_is_refused_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    for call in (check_output, prepare_output):
        with pytest.raises(OutputError) as err:
            call(tmp_path, "simulate", overwrite=True)
        assert str(err.value) == (
            f"{tmp_path} is not empty and was not written by vgcsim; not writing simulate "
            "output there (choose a new or empty folder)"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("call", [check_output, prepare_output])
def test_an_earlier_output_is_refused_by_default_naming_what_wrote_it(tmp_path, call):
    _marked(tmp_path, ["a.csv"], command="sweep")
    with pytest.raises(OutputError) as err:
        call(tmp_path, "predict")
    assert str(err.value) == (
        f"{tmp_path} already holds sweep output; pass --overwrite to replace its files, or "
        "choose another folder"
    )


def test_a_marker_without_a_command_is_called_vgcsim_output(tmp_path):
    _marked(tmp_path, ["a.csv"])
    with pytest.raises(OutputError, match=r"already holds vgcsim output; pass --overwrite"):
        check_output(tmp_path, "predict")


def test_with_overwrite_the_earlier_files_are_returned(tmp_path):
    _marked(tmp_path, ["a.csv", "b.csv"], command="predict")
    assert check_output(tmp_path, "predict", overwrite=True) == ("a.csv", "b.csv")


def test_a_missing_folder_is_made_with_its_parents_and_marked_at_once(tmp_path):
    where = tmp_path / "a" / "b" / "c"
    out = prepare_output(where, "predict", files=["results.csv"])
    assert where.is_dir() and out.path == where and out.command == "predict"
    assert read_marker(where)["files"] == ["results.csv"]
    assert read_marker(where)["command"] == "predict"


def test_a_prepared_folder_keeps_the_earlier_files_apart_from_the_planned_ones(tmp_path):
    _marked(tmp_path, ["old.csv"], command="predict")
    out = prepare_output(tmp_path, "predict", overwrite=True, files=["new.csv"])
    assert out.previous == ("old.csv",) and out.planned == ("new.csv",) and out.written == []
    assert read_marker(tmp_path)["files"] == ["new.csv", "old.csv"]


# -- the marker ------------------------------------------------------------------------------


def test_the_marker_lists_written_planned_and_surviving_earlier_files(tmp_path):
    (tmp_path / "kept.csv").write_text("x")
    out = OutputDir(tmp_path, "report", previous=("kept.csv", "gone.csv"), planned=("p.csv",))
    out.written.append("w.csv")
    path = out.commit(["x.png", "w.csv"])
    assert path == tmp_path / MARKER
    assert out.written == ["w.csv", "x.png"]  # an extra already written is listed once
    want = {
        "kind": MARKER_KIND,
        "command": "report",
        "files": ["kept.csv", "p.csv", "w.csv", "x.png"],
        "vgcsim": __version__,
    }
    assert path.read_text(encoding="utf-8") == json.dumps(want, indent=2) + "\n"


# -- one file, atomically ------------------------------------------------------------------


def test_a_file_is_written_through_a_hidden_temporary_file_beside_it(tmp_path):
    seen = []

    def write(tmp: str) -> None:
        seen.append(Path(tmp))
        Path(tmp).write_text("new")

    target = tmp_path / "table.csv"
    assert atomic_write(target, write) == target
    (tmp,) = seen
    assert tmp.parent == tmp_path and tmp != target
    assert tmp.name.startswith(".table.csv.") and tmp.name.endswith(".tmp")
    assert target.read_text() == "new" and not tmp.exists()


def test_an_error_that_is_not_a_write_error_passes_unchanged_and_leaves_nothing(tmp_path):
    def write(tmp: str) -> None:
        Path(tmp).write_text("half")
        raise ValueError("the writer's own bug")

    with pytest.raises(ValueError, match="the writer's own bug"):
        atomic_write(tmp_path / "t.csv", write)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_becomes_one_line_naming_the_file(tmp_path):
    def write(tmp: str) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", tmp)

    target = tmp_path / "t.csv"
    with pytest.raises(WriteError) as err:
        atomic_write(target, write)
    assert str(err.value) == (
        f"cannot write {target}: Permission denied (choose a folder you can write to with -o)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_file_the_marker_does_not_list_is_refused_naming_it_and_what_to_do(tmp_path):
    folder = _marked(tmp_path / "out", ["results.json"])
    (folder / "notes.txt").write_text("the user's own")
    out = prepare_output(folder, "vgcsim predict", overwrite=True)
    with pytest.raises(OutputError) as err:
        out.file("notes.txt")
    assert str(err.value) == (
        f"{folder / 'notes.txt'} exists and was not written by vgcsim; not replacing it "
        "(choose another -o)"
    )
    assert (folder / "notes.txt").read_text() == "the user's own"


def test_atomic_write_text_writes_utf8_whatever_the_locale(tmp_path):
    target = tmp_path / "note.txt"
    with ascii_locale():
        atomic_write_text(target, "Zürich — 10 µs")
    assert target.read_bytes() == "Zürich — 10 µs".encode()


@pytest.mark.parametrize(
    ("earlier", "now", "replaced"),
    [
        ("vgcsim predict", "vgcsim simulate", True),  # a result table replaces a result table
        ("vgcsim.api.save", "vgcsim sweep", True),
        ("vgcsim api.report", "vgcsim report", True),
        ("vgcsim api.save_validation", "vgcsim validate", True),
        ("vgcsim advise", "vgcsim predict", False),
        ("vgcsim predict", "vgcsim report", False),
        ("vgcsim report", "vgcsim demo", False),
    ],
)
def test_overwrite_replaces_only_an_output_of_the_same_kind(tmp_path, earlier, now, replaced):
    """Another command's files would stay beside the new ones under the new marker."""
    from vgcsim.core.outdir import OutputError, check_output, prepare_output

    first = prepare_output(tmp_path / "o", earlier, files=("a.csv",))
    first.write_text("a.csv", "x\n")
    first.commit()
    if replaced:
        assert check_output(tmp_path / "o", now, overwrite=True) == ("a.csv",)
    else:
        with pytest.raises(OutputError, match=f"holds {earlier} output, which {now} does not"):
            check_output(tmp_path / "o", now, overwrite=True)
