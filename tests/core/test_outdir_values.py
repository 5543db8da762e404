"""vgcsim.core.outdir by value: the exact one-line refusals of ``-o FILE`` outputs, the JSON
text ``write_json_output`` writes, the OSError fields a ``WriteError`` carries, what
``OutputDir.snapshot`` lists, which markers count, and that markers are read as UTF-8 whatever
the locale says."""

from __future__ import annotations

import errno
import json
import os

import pytest

from tests.conftest import ascii_locale
from vgcsim.core.outdir import (
    MARKER,
    OutputError,
    WriteError,
    check_output_file,
    is_trace_dir,
    prepare_output,
    read_marker,
    write_error,
    write_json_output,
)

# --- check_output_file: the refusals of a JSON file written with -o FILE ------------------


def test_a_folder_given_as_the_output_file_is_refused_naming_the_command(tmp_path):
    with pytest.raises(OutputError) as exc:
        check_output_file(tmp_path, "vgcsim calibrate")
    assert str(exc.value) == f"cannot write vgcsim calibrate output to {tmp_path}: it is a folder"


def test_write_json_output_names_its_command_when_the_path_is_a_folder(tmp_path):
    with pytest.raises(OutputError) as exc:
        write_json_output(tmp_path, "vgcsim advise", {"x": 1})
    assert str(exc.value) == f"cannot write vgcsim advise output to {tmp_path}: it is a folder"


def test_a_file_vgcsim_wrote_is_refused_without_overwrite_by_default(tmp_path):
    out = tmp_path / "cluster.json"
    out.write_text('{"written_by": "vgcsim calibrate", "name": "lab"}\n', encoding="utf-8")
    with pytest.raises(OutputError) as exc:
        check_output_file(out, "vgcsim calibrate")
    assert str(exc.value) == (
        f"{out} already holds vgcsim output; pass --overwrite to replace it, or choose another -o"
    )
    assert check_output_file(out, "vgcsim calibrate", overwrite=True) is None


@pytest.mark.parametrize(
    "text",
    [
        "not json at all",  # unreadable: not vgcsim's
        '{"name": "lab"}',  # no written_by
        '{"written_by": null}',
        '{"written_by": "someone else"}',
        '["written_by", "vgcsim"]',  # not an object
    ],
)
def test_a_file_vgcsim_did_not_write_is_refused_even_with_overwrite(tmp_path, text):
    out = tmp_path / "cluster.json"
    out.write_text(text, encoding="utf-8")
    for overwrite in (False, True):
        with pytest.raises(OutputError) as exc:
            check_output_file(out, "vgcsim calibrate", overwrite=overwrite)
        assert str(exc.value) == f"{out} exists and was not written by vgcsim; not replacing it"
    assert out.read_text(encoding="utf-8") == text


def test_a_vgcsim_file_holding_utf8_text_is_vgcsims_whatever_the_locale(tmp_path):
    out = tmp_path / "cluster.json"
    out.write_text('{"written_by": "vgcsim calibrate", "note": "Zürich — 10 µs"}', "utf-8")
    with ascii_locale():
        check_output_file(out, "vgcsim calibrate", overwrite=True)  # no refusal
        with pytest.raises(OutputError, match="already holds vgcsim output"):
            check_output_file(out, "vgcsim calibrate")


# --- write_json_output: the text it writes --------------------------------------------------


def test_write_json_output_writes_indented_json_marked_with_its_command(tmp_path):
    out = tmp_path / "a" / "b" / "out.json"  # neither folder exists yet
    assert write_json_output(out, "vgcsim calibrate", {"x": 1, "y": [1, 2]}) == out
    assert out.read_text(encoding="utf-8") == (
        '{\n  "written_by": "vgcsim calibrate",\n  "x": 1,\n  "y": [\n    1,\n    2\n  ]\n}\n'
    )


def test_write_json_output_replaces_its_own_file_only_with_overwrite(tmp_path):
    out = tmp_path / "out.json"
    write_json_output(out, "vgcsim calibrate", {"run": 1})
    with pytest.raises(OutputError, match="already holds vgcsim output"):
        write_json_output(out, "vgcsim calibrate", {"run": 2})
    assert json.loads(out.read_text(encoding="utf-8"))["run"] == 1
    write_json_output(out, "vgcsim calibrate", {"run": 2}, overwrite=True)
    assert json.loads(out.read_text(encoding="utf-8")) == {
        "written_by": "vgcsim calibrate",
        "run": 2,
    }


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_write_json_output_never_writes_nan_or_infinity(tmp_path, value):
    # strict JSON: NaN/Infinity are not JSON, so nothing is written
    out = tmp_path / "out.json"
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_json_output(out, "vgcsim calibrate", {"bandwidth": value})
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary file left either


# --- write_error and WriteError: one line, and the OSError fields ---------------------------


CHOOSE = "(choose a folder you can write to with -o)"
ON_PATH = "a folder on its path is a file"


@pytest.mark.parametrize(
    ("code", "strerror", "message"),
    [
        (
            errno.ENOSPC,
            "No space left on device",
            "No space left on device writing {p}; free space and run it again",
        ),
        (errno.EACCES, "Permission denied", "cannot write {p}: Permission denied " + CHOOSE),
        (
            errno.EPERM,
            "Operation not permitted",
            "cannot write {p}: Operation not permitted " + CHOOSE,
        ),
        (errno.EROFS, "Read-only file system", "cannot write {p}: Read-only file system " + CHOOSE),
        (errno.ENOTDIR, "Not a directory", "cannot write {p}: " + ON_PATH),
        (errno.EEXIST, "File exists", "cannot write {p}: " + ON_PATH),
        (errno.EIO, "Input/output error", "cannot write {p}: Input/output error"),
    ],
)
def test_a_failed_write_is_one_line_naming_the_file(tmp_path, code, strerror, message):
    p = tmp_path / "out" / "results.csv"
    err = write_error(OSError(code, strerror, str(p)), p)
    assert isinstance(err, WriteError) and isinstance(err, OSError)
    assert str(err) == message.format(p=p)
    assert (err.errno, err.strerror, err.filename) == (code, strerror, str(p))


def test_a_write_error_keeps_the_failing_file_and_falls_back_to_the_path(tmp_path):
    p = tmp_path / "results.csv"
    tmp = str(tmp_path / ".results.csv.abc.tmp")
    err = write_error(OSError(errno.EIO, "Input/output error", tmp), p)
    assert err.filename == tmp  # the file that failed, not the final name
    assert str(err) == f"cannot write {p}: Input/output error"
    err = write_error(OSError(errno.EIO, "Input/output error"), p)  # no filename
    assert err.filename == str(p)


def test_an_error_without_strerror_is_named_by_its_text(tmp_path):
    p = tmp_path / "results.csv"
    err = write_error(OSError("the disk went away"), p)
    assert str(err) == f"cannot write {p}: the disk went away"
    assert (err.errno, err.strerror, err.filename) == (None, None, str(p))


def test_write_error_is_an_oserror_with_its_fields():
    err = WriteError("cannot write x: no", errno.EACCES, "Permission denied", "/x/y")
    assert str(err) == "cannot write x: no"
    assert err.errno == errno.EACCES
    assert err.strerror == "Permission denied"
    assert err.filename == "/x/y"


# --- read_marker and is_trace_dir: which markers count ----------------------------------------


def _marker(folder, data):
    (folder / MARKER).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def test_a_marker_of_another_kind_is_no_marker(tmp_path):
    _marker(tmp_path, {"kind": "something-else", "command": "x", "files": []})
    assert read_marker(tmp_path) is None
    _marker(tmp_path, ["kind", "vgcsim-output"])
    assert read_marker(tmp_path) is None


@pytest.mark.parametrize("files", [[1, 2], ["a.csv", None], "a.csv", 5, None])
def test_a_marker_whose_files_are_not_a_list_of_names_is_no_marker(tmp_path, files):
    _marker(tmp_path, {"kind": "vgcsim-output", "command": "x", "files": files})
    assert read_marker(tmp_path) is None


def test_a_marker_with_utf8_text_is_read_whatever_the_locale(tmp_path):
    data = {"kind": "vgcsim-output", "command": "vgcsim predict", "files": ["Zürich.csv"]}
    _marker(tmp_path, data)
    with ascii_locale():
        assert read_marker(tmp_path) == data


def test_a_trace_header_with_utf8_text_marks_a_trace_whatever_the_locale(tmp_path):
    header = {"kind": "vgcsim-trace", "name": "résumé — µ-batch"}
    (tmp_path / "header.json").write_text(json.dumps(header, ensure_ascii=False), "utf-8")
    with ascii_locale():
        assert is_trace_dir(tmp_path) is True


# --- OutputDir.snapshot -----------------------------------------------------------------------


def test_snapshot_lists_every_file_below_the_folder_but_the_marker(tmp_path):
    out = prepare_output(tmp_path / "out", "vgcsim report")
    assert (out.path / MARKER).is_file()
    (out.path / "a.txt").write_text("abc", encoding="utf-8")
    (out.path / "sub").mkdir()
    (out.path / "sub" / "b.csv").write_text("x,y\n1", encoding="utf-8")
    os.utime(out.path / "a.txt", ns=(1_000_000_000, 1_600_000_000_123_456_789))
    os.utime(out.path / "sub" / "b.csv", ns=(1_000_000_000, 1_700_000_000_000_000_001))
    assert out.snapshot() == {
        "a.txt": (1_600_000_000_123_456_789, 3),
        "sub/b.csv": (1_700_000_000_000_000_001, 5),
    }


def test_a_file_in_nested_subfolders_is_made_and_recorded_once(tmp_path):
    out = prepare_output(tmp_path / "o", "vgcsim test")
    target = out.file("plots/by/world/size.csv")
    assert target == tmp_path / "o" / "plots" / "by" / "world" / "size.csv"
    assert target.parent.is_dir()
    out.file("plots/by/world/size.csv")
    assert out.written == ["plots/by/world/size.csv"]
